/*
 * Training runs in costs.db: each ptrun that records appends its predicted and
 * measured figures (table runs), the memory of each of its ranks (run_ranks), the
 * statistics of each op on each rank (op_stats) and the spans of the schedule's
 * instructions in its last step (spans), in one transaction; calibration (ptcalib) and
 * reports (ptreport) read them back. The schema is db.c's (versions 3 to 6). Measured
 * runs of other frameworks (ptcalib --run FILE) are kept apart, one run record each
 * (table framework_runs, version 7), with ids of their own.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Writing ---------------------------------------------------------------------------- */

static int insert_run(pt_costdb *db, const pt_run_record *r, pt_err *err)
{
    char now[32];
    pt_costdb_iso_now(now);
    return pt_costdb_insert_row(
        db,
        "INSERT INTO runs(created_at, host, git_revision, model, cluster, layout, world, steps,"
        " predicted_step_s, measured_step_s, predicted_mfu, measured_mfu,"
        " predicted_memory_bytes, measured_memory_bytes, plan_id, plan_path, log_path,"
        " trace_path, steps_timed, gemm_ratio, noisy, forgotten)"
        " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        "ttttttiiddddddttttidti", err, "cannot record the run", now, r->host, r->git_revision,
        r->model, r->cluster, r->layout, r->world, r->steps, r->predicted_step_s,
        r->measured_step_s, r->predicted_mfu, r->measured_mfu, r->predicted_memory_bytes,
        r->measured_memory_bytes, r->plan_id, r->plan_path, r->log_path, r->trace_path,
        r->steps_timed, r->gemm_ratio, r->noisy, (int64_t)r->forgotten);
}

static int insert_stats(pt_costdb *db, int64_t run, const pt_op_stat *v, size_t n, pt_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "INSERT INTO op_stats(run_id, rank, stream, name, op_key, dtype, flops,"
                           " bytes, spans, kept, median_s, mad_s, mean_s, min_s, max_s, total_s)"
                           " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           -1, &st, NULL) != SQLITE_OK)
        return pt_costdb_sql_fail(db, err, "cannot record the run's op statistics");
    int rc = SQLITE_DONE;
    for (size_t i = 0; i < n && rc == SQLITE_DONE; i++) {
        const pt_op_stat *s = &v[i];
        if (s->st.spans < 1)
            continue;
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int(st, 2, s->rank);
        sqlite3_bind_int(st, 3, s->stream);
        sqlite3_bind_text(st, 4, s->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, s->key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 6, pt_dtype_name(s->dtype), -1, SQLITE_STATIC);
        sqlite3_bind_double(st, 7, s->flops);
        sqlite3_bind_double(st, 8, s->bytes);
        sqlite3_bind_int64(st, 9, s->st.spans);
        sqlite3_bind_int64(st, 10, s->st.kept > 0 ? s->st.kept : 1);
        sqlite3_bind_double(st, 11, s->st.median_s > 0 ? s->st.median_s : 0);
        sqlite3_bind_double(st, 12, s->st.mad_s > 0 ? s->st.mad_s : 0);
        sqlite3_bind_double(st, 13, s->st.mean_s > 0 ? s->st.mean_s : 0);
        sqlite3_bind_double(st, 14, s->st.min_s);
        sqlite3_bind_double(st, 15, s->st.max_s);
        sqlite3_bind_double(st, 16, s->st.total_s);
        rc = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0
                             : pt_costdb_sql_fail(db, err, "cannot record the run's op statistics");
}

static int insert_spans(pt_costdb *db, int64_t run, const pt_span *v, size_t n, pt_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "INSERT INTO spans(run_id, rank, stream, name, op_key, mb, chunk,"
                           " start_s, dur_s, flops, bytes, dtype, ins, op)"
                           " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           -1, &st, NULL) != SQLITE_OK)
        return pt_costdb_sql_fail(db, err, "cannot record the run's spans");
    int rc = SQLITE_DONE;
    for (size_t i = 0; i < n && rc == SQLITE_DONE; i++) {
        const pt_span *s = &v[i];
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, run);
        sqlite3_bind_int(st, 2, s->rank);
        sqlite3_bind_int(st, 3, s->stream);
        sqlite3_bind_text(st, 4, s->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 5, s->key, -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 6, s->mb);
        sqlite3_bind_int(st, 7, s->chunk);
        sqlite3_bind_double(st, 8, s->t0_s);
        sqlite3_bind_double(st, 9, s->dur_s > 0 ? s->dur_s : 0);
        sqlite3_bind_double(st, 10, s->flops);
        sqlite3_bind_double(st, 11, s->bytes);
        sqlite3_bind_text(st, 12, pt_dtype_name(s->dtype), -1, SQLITE_STATIC);
        sqlite3_bind_int(st, 13, s->ins);
        sqlite3_bind_int(st, 14, s->op);
        rc = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : pt_costdb_sql_fail(db, err, "cannot record the run's spans");
}

int pt_costdb_record_run(pt_costdb *db, const pt_run_record *r, const pt_run_rank *ranks,
                         int n_ranks, const pt_op_stat *stats, size_t n_stats,
                         const pt_span *spans, size_t n_spans, int64_t *id, pt_err *err)
{
    if (!db || !db->sql)
        return pt_err_set(err, "no cost database file to record the run in");
    if (!(r->measured_step_s > 0) || r->world < 1 || r->steps < 1)
        return pt_err_set(err, "%s: run record: measured step time %g, world %lld, steps %lld",
                          pt_costdb_where(db), r->measured_step_s, (long long)r->world,
                          (long long)r->steps);
    if (pt_costdb_begin(db, err))
        return -1;
    int rc = insert_run(db, r, err);
    int64_t run = sqlite3_last_insert_rowid(db->sql);
    for (int i = 0; rc == 0 && i < n_ranks; i++)
        rc = pt_costdb_insert_row(db,
                                  "INSERT INTO run_ranks(run_id, rank, stage,"
                                  " predicted_memory_bytes, measured_memory_bytes,"
                                  " peak_rss_bytes) VALUES(?, ?, ?, ?, ?, ?)",
                                  "iiiddd", err, "cannot record the run's ranks", run,
                                  (int64_t)ranks[i].rank, (int64_t)ranks[i].stage,
                                  ranks[i].predicted_memory_bytes,
                                  ranks[i].measured_memory_bytes, ranks[i].peak_rss_bytes);
    if (rc == 0 && n_stats)
        rc = insert_stats(db, run, stats, n_stats, err);
    if (rc == 0 && n_spans)
        rc = insert_spans(db, run, spans, n_spans, err);
    if (rc == 0)
        rc = pt_costdb_commit(db, err);
    if (rc) {
        pt_costdb_rollback(db, NULL);
        return -1;
    }
    if (id)
        *id = run;
    return 0;
}

int pt_costdb_add_run(pt_costdb *db, const pt_run_record *r, pt_err *err)
{
    return pt_costdb_record_run(db, r, NULL, 0, NULL, 0, NULL, 0, NULL, err);
}

/* ---- Reading -------------------------------------------------------------------------------- */

static void text_into(char *dst, size_t cap, sqlite3_stmt *st, int c)
{
    const unsigned char *t = sqlite3_column_text(st, c);
    snprintf(dst, cap, "%s", t ? (const char *)t : "");
}

/* Grows *v (of elem bytes) to hold one more than *n. */
static int grow_one(void **v, size_t elem, size_t n, size_t *cap)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? 2 * *cap : 64;
    void *p = realloc(*v, c * elem);
    if (!p)
        return -1;
    *v = p;
    *cap = c;
    return 0;
}

/* Prepares sql (binding run_id to ?1 when >= 0); -1 with err when the database has no
 * runs tables (a file older than version 4 cannot be: opening migrates it). */
static int prepare(const pt_costdb *db, const char *sql, int64_t run_id, sqlite3_stmt **st,
                   pt_err *err)
{
    if (!db || !db->sql)
        return pt_err_set(err, "no cost database file to read runs from");
    if (sqlite3_prepare_v2(db->sql, sql, -1, st, NULL) != SQLITE_OK)
        return pt_costdb_sql_fail(db, err, "cannot read runs");
    if (run_id >= 0)
        sqlite3_bind_int64(*st, 1, run_id);
    return 0;
}

/* Runs sql (run_id bound to ?1 when >= 0) and collects its rows into a malloc'd array
 * of elem-byte records, each filled from its row by fill(row, st); `what` names the
 * rows in errors. */
typedef void (*row_fill)(void *row, sqlite3_stmt *st);

static int read_rows(const pt_costdb *db, const char *sql, int64_t run_id, size_t elem,
                     row_fill fill, void **out, size_t *n, const char *what, pt_err *err)
{
    sqlite3_stmt *st;
    *out = NULL;
    *n = 0;
    if (prepare(db, sql, run_id, &st, err))
        return -1;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (grow_one(out, elem, *n, &cap)) {
            sqlite3_finalize(st);
            return pt_err_set(err, "%s: out of memory reading %s", pt_costdb_where(db), what);
        }
        void *row = (char *)*out + (*n)++ * elem;
        memset(row, 0, elem);
        fill(row, st);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(*out);
        *out = NULL;
        *n = 0;
        char why[64];
        snprintf(why, sizeof why, "cannot read %s", what);
        return pt_costdb_sql_fail(db, err, why);
    }
    return 0;
}

static void fill_run(void *row, sqlite3_stmt *st)
{
    pt_run_record *r = row;
    r->id = sqlite3_column_int64(st, 0);
    text_into(r->created_at, sizeof r->created_at, st, 1);
    text_into(r->host, sizeof r->host, st, 2);
    text_into(r->git_revision, sizeof r->git_revision, st, 3);
    text_into(r->model, sizeof r->model, st, 4);
    text_into(r->cluster, sizeof r->cluster, st, 5);
    text_into(r->layout, sizeof r->layout, st, 6);
    r->world = sqlite3_column_int64(st, 7);
    r->steps = sqlite3_column_int64(st, 8);
    r->predicted_step_s = sqlite3_column_double(st, 9);
    r->measured_step_s = sqlite3_column_double(st, 10);
    r->predicted_mfu = sqlite3_column_double(st, 11);
    r->measured_mfu = sqlite3_column_double(st, 12);
    r->predicted_memory_bytes = sqlite3_column_double(st, 13);
    r->measured_memory_bytes = sqlite3_column_double(st, 14);
    text_into(r->plan_id, sizeof r->plan_id, st, 15);
    text_into(r->plan_path, sizeof r->plan_path, st, 16);
    text_into(r->log_path, sizeof r->log_path, st, 17);
    text_into(r->trace_path, sizeof r->trace_path, st, 18);
    r->steps_timed = sqlite3_column_int64(st, 19);
    r->gemm_ratio = sqlite3_column_double(st, 20);
    text_into(r->noisy, sizeof r->noisy, st, 21);
    r->forgotten = sqlite3_column_int(st, 22) != 0;
}

int pt_costdb_runs(const pt_costdb *db, pt_run_record **out, size_t *n, pt_err *err)
{
    return read_rows(db,
                     "SELECT id, created_at, host, git_revision, model, cluster, layout, world,"
                     " steps, predicted_step_s, measured_step_s, predicted_mfu, measured_mfu,"
                     " predicted_memory_bytes, measured_memory_bytes, plan_id, plan_path,"
                     " log_path, trace_path, steps_timed, gemm_ratio, noisy, forgotten"
                     " FROM runs ORDER BY id",
                     -1, sizeof **out, fill_run, (void **)out, n, "runs", err);
}

static void fill_rank(void *row, sqlite3_stmt *st)
{
    *(pt_run_rank *)row = (pt_run_rank){sqlite3_column_int(st, 0), sqlite3_column_int(st, 1),
                                        sqlite3_column_double(st, 2),
                                        sqlite3_column_double(st, 3),
                                        sqlite3_column_double(st, 4)};
}

int pt_costdb_run_ranks(const pt_costdb *db, int64_t run_id, pt_run_rank **out, size_t *n,
                        pt_err *err)
{
    return read_rows(db,
                     "SELECT rank, stage, predicted_memory_bytes, measured_memory_bytes,"
                     " peak_rss_bytes FROM run_ranks WHERE run_id = ?1 ORDER BY rank",
                     run_id, sizeof **out, fill_rank, (void **)out, n, "the run's ranks", err);
}

static void fill_span(void *row, sqlite3_stmt *st)
{
    pt_span *s = row;
    s->rank = sqlite3_column_int(st, 0);
    s->stream = sqlite3_column_int(st, 1);
    text_into(s->name, sizeof s->name, st, 2);
    text_into(s->key, sizeof s->key, st, 3);
    s->mb = sqlite3_column_int(st, 4);
    s->chunk = sqlite3_column_int(st, 5);
    s->t0_s = sqlite3_column_double(st, 6);
    s->dur_s = sqlite3_column_double(st, 7);
    s->flops = sqlite3_column_double(st, 8);
    s->bytes = sqlite3_column_double(st, 9);
    const unsigned char *dt = sqlite3_column_text(st, 10);
    if (pt_dtype_parse(dt ? (const char *)dt : "", &s->dtype, NULL))
        s->dtype = PT_DTYPE_FP32;
    s->ins = sqlite3_column_int(st, 11);
    s->op = sqlite3_column_int(st, 12);
}

int pt_costdb_run_spans(const pt_costdb *db, int64_t run_id, pt_span **out, size_t *n,
                        pt_err *err)
{
    return read_rows(db,
                     "SELECT rank, stream, name, op_key, mb, chunk, start_s, dur_s, flops, bytes,"
                     " dtype, ins, op FROM spans WHERE run_id = ?1 ORDER BY rank, start_s, id",
                     run_id, sizeof **out, fill_span, (void **)out, n, "the run's spans", err);
}

static void fill_stat(void *row, sqlite3_stmt *st)
{
    pt_op_stat *s = row;
    s->rank = sqlite3_column_int(st, 0);
    s->stream = sqlite3_column_int(st, 1);
    text_into(s->name, sizeof s->name, st, 2);
    text_into(s->key, sizeof s->key, st, 3);
    const unsigned char *dt = sqlite3_column_text(st, 4);
    if (pt_dtype_parse(dt ? (const char *)dt : "", &s->dtype, NULL))
        s->dtype = PT_DTYPE_FP32;
    s->flops = sqlite3_column_double(st, 5);
    s->bytes = sqlite3_column_double(st, 6);
    s->st = (pt_robust){.spans = sqlite3_column_int64(st, 7), .kept = sqlite3_column_int64(st, 8),
                        .median_s = sqlite3_column_double(st, 9),
                        .mad_s = sqlite3_column_double(st, 10),
                        .mean_s = sqlite3_column_double(st, 11),
                        .min_s = sqlite3_column_double(st, 12),
                        .max_s = sqlite3_column_double(st, 13),
                        .total_s = sqlite3_column_double(st, 14)};
}

int pt_costdb_run_op_stats(const pt_costdb *db, int64_t run_id, pt_op_stat **out, size_t *n,
                           pt_err *err)
{
    return read_rows(db,
                     "SELECT rank, stream, name, op_key, dtype, flops, bytes, spans, kept,"
                     " median_s, mad_s, mean_s, min_s, max_s, total_s FROM op_stats"
                     " WHERE run_id = ?1 ORDER BY rank, stream, op_key, name",
                     run_id, sizeof **out, fill_stat, (void **)out, n, "the run's op statistics",
                     err);
}

/* ---- Measured runs of other frameworks ------------------------------------------------ */

int pt_costdb_add_framework_run(pt_costdb *db, const pt_framework_run *r, int64_t *id,
                                pt_err *err)
{
    if (!db || !db->sql)
        return pt_err_set(err, "no cost database file to store the run in");
    if (!(r->measured_step_s > 0) || r->gpus < 1 || !r->record || !r->stack[0] ||
        !r->device[0])
        return pt_err_set(err, "%s: framework run: measured step time %g, %lld GPUs, stack "
                               "'%s', device '%s'", pt_costdb_where(db), r->measured_step_s,
                          (long long)r->gpus, r->stack, r->device);
    char now[32];
    pt_costdb_iso_now(now);
    if (pt_costdb_insert_row(db,
                             "INSERT INTO framework_runs(created_at, stack, device, model,"
                             " cluster, gpus, layout, measured_step_s, date, software, source,"
                             " record) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             "tttttitdtttt", err, "cannot store the run", now, r->stack,
                             r->device, r->model, r->cluster, r->gpus, r->layout,
                             r->measured_step_s, r->date, r->software, r->source, r->record))
        return -1;
    if (id)
        *id = sqlite3_last_insert_rowid(db->sql);
    return 0;
}

static void fill_framework_run(void *row, sqlite3_stmt *st)
{
    pt_framework_run *r = row;
    r->id = sqlite3_column_int64(st, 0);
    text_into(r->created_at, sizeof r->created_at, st, 1);
    text_into(r->stack, sizeof r->stack, st, 2);
    text_into(r->device, sizeof r->device, st, 3);
    text_into(r->model, sizeof r->model, st, 4);
    text_into(r->cluster, sizeof r->cluster, st, 5);
    r->gpus = sqlite3_column_int64(st, 6);
    text_into(r->layout, sizeof r->layout, st, 7);
    r->measured_step_s = sqlite3_column_double(st, 8);
    text_into(r->date, sizeof r->date, st, 9);
    text_into(r->software, sizeof r->software, st, 10);
    text_into(r->source, sizeof r->source, st, 11);
    const unsigned char *t = sqlite3_column_text(st, 12);
    r->record = strdup(t ? (const char *)t : "");
}

int pt_costdb_framework_runs(const pt_costdb *db, const char *stack, const char *device,
                             pt_framework_run **out, size_t *n, pt_err *err)
{
    *out = NULL;
    *n = 0;
    if (!db || !db->sql)
        return 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT id, created_at, stack, device, model, cluster, gpus, layout,"
                           " measured_step_s, date, software, source, record FROM framework_runs"
                           " WHERE (?1 IS NULL OR stack = ?1) AND (?2 IS NULL OR device = ?2)"
                           " ORDER BY id", -1, &st, NULL) != SQLITE_OK)
        return pt_costdb_sql_fail(db, err, "cannot read the stored framework runs");
    sqlite3_bind_text(st, 1, stack, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, device, -1, SQLITE_STATIC);
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (grow_one((void **)out, sizeof **out, *n, &cap)) {
            rc = SQLITE_NOMEM;
            break;
        }
        pt_framework_run *r = &(*out)[(*n)++];
        memset(r, 0, sizeof *r);
        fill_framework_run(r, st);
        if (!r->record) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    sqlite3_finalize(st);
    if (rc == SQLITE_DONE)
        return 0;
    pt_costdb_framework_runs_free(*out, *n);
    *out = NULL;
    *n = 0;
    if (rc == SQLITE_NOMEM)
        return pt_err_set(err, "%s: out of memory reading the stored framework runs",
                          pt_costdb_where(db));
    return pt_costdb_sql_fail(db, err, "cannot read the stored framework runs");
}

void pt_costdb_framework_runs_free(pt_framework_run *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        free(v[i].record);
    free(v);
}

int pt_costdb_forget_framework_run(pt_costdb *db, int64_t id, pt_err *err)
{
    if (!db || !db->sql)
        return pt_err_set(err, "no cost database file");
    int64_t changes = 0;
    if (pt_costdb_exec_bound(db, "DELETE FROM framework_runs WHERE id = ?", "i", &changes, err,
                             "cannot forget the run", id))
        return -1;
    if (changes == 0)
        return pt_err_set(err, "%s: no stored framework run f%lld", pt_costdb_where(db),
                          (long long)id);
    return 0;
}
