/*
 * costs.db: the SQLite file that holds the cost tables — device descriptions,
 * kernel samples and collective samples, each sample with where it came from
 * (a ptprofile run or a ptrun trace) and when. This file owns the schema and its
 * migrations, opening and checking a database, loading every sample into memory
 * (lookup.c searches them there) and inserting; identity.c fingerprints the samples.
 *
 * The schema is the list of migration steps below: step v turns a version-v database
 * into version v+1, so a new version appends a step and older files are brought up
 * to date on open, all steps in one transaction. Version 0 is an empty cost database:
 * a meta table with schema_version 0 and nothing else.
 */
#include "internal.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- Schema ------------------------------------------------------------------------ */

static const char *const migrations[] = {
    /* 0 -> 1: devices, kernel samples, collective samples. Lookups read everything
     * into memory; the indexes serve the same questions asked with sqlite3. */
    "CREATE TABLE devices("
    "  name TEXT PRIMARY KEY,"
    "  backend TEXT NOT NULL,"
    "  peak_flops_fp32 REAL NOT NULL, peak_flops_tf32 REAL NOT NULL,"
    "  peak_flops_bf16 REAL NOT NULL, peak_flops_fp16 REAL NOT NULL,"
    "  peak_flops_fp8 REAL NOT NULL,"
    "  mem_bw_Bps REAL NOT NULL,"
    "  devices_per_node INTEGER NOT NULL,"
    "  intra_bw_Bps REAL NOT NULL, intra_latency_s REAL NOT NULL,"
    "  inter_bw_Bps REAL NOT NULL, inter_latency_s REAL NOT NULL,"
    "  created_at TEXT NOT NULL);"
    "CREATE TABLE kernel_samples("
    "  id INTEGER PRIMARY KEY,"
    "  device TEXT NOT NULL,"
    "  op_key TEXT NOT NULL,"
    "  kind TEXT NOT NULL,"
    "  dtype TEXT NOT NULL,"
    "  flops REAL NOT NULL CHECK(flops >= 0),"
    "  bytes REAL NOT NULL CHECK(bytes >= 0),"
    "  time_s REAL NOT NULL CHECK(time_s > 0),"
    "  source TEXT NOT NULL CHECK(source IN ('profile', 'trace')),"
    "  created_at TEXT NOT NULL);"
    "CREATE INDEX kernel_samples_by_key ON kernel_samples(device, op_key);"
    "CREATE INDEX kernel_samples_by_kind ON kernel_samples(device, kind, dtype, flops, bytes);"
    "CREATE TABLE coll_samples("
    "  id INTEGER PRIMARY KEY,"
    "  backend TEXT NOT NULL,"
    "  op TEXT NOT NULL,"
    "  bytes REAL NOT NULL CHECK(bytes >= 0),"
    "  group_size INTEGER NOT NULL CHECK(group_size >= 1),"
    "  ranks_per_node INTEGER NOT NULL CHECK(ranks_per_node BETWEEN 1 AND group_size),"
    "  crosses_nodes INTEGER NOT NULL CHECK(crosses_nodes = (ranks_per_node < group_size)),"
    "  time_s REAL NOT NULL CHECK(time_s > 0),"
    "  source TEXT NOT NULL CHECK(source IN ('profile', 'trace')),"
    "  created_at TEXT NOT NULL);"
    "CREATE INDEX coll_samples_by_config"
    "  ON coll_samples(backend, op, group_size, ranks_per_node, bytes);",
    /* 1 -> 2: the ptprofile runs that wrote the samples: where, with what libraries,
     * how they ended (an interrupted run says so and can be resumed). */
    "CREATE TABLE profile_runs("
    "  id INTEGER PRIMARY KEY,"
    "  started_at TEXT NOT NULL,"
    "  finished_at TEXT,"
    "  host TEXT NOT NULL,"
    "  device TEXT NOT NULL,"
    "  backend TEXT NOT NULL,"
    "  versions TEXT NOT NULL,"
    "  command TEXT NOT NULL,"
    "  status TEXT NOT NULL CHECK(status IN ('running', 'done', 'interrupted', 'failed')));",
    /* 2 -> 3: training runs, predicted against measured, so that anyone can see how
     * right the predictions are (and regress on it). */
    "CREATE TABLE runs("
    "  id INTEGER PRIMARY KEY,"
    "  created_at TEXT NOT NULL,"
    "  host TEXT NOT NULL,"
    "  git_revision TEXT NOT NULL,"
    "  model TEXT NOT NULL,"
    "  cluster TEXT NOT NULL,"
    "  layout TEXT NOT NULL,"
    "  world INTEGER NOT NULL CHECK(world >= 1),"
    "  steps INTEGER NOT NULL CHECK(steps >= 1),"
    "  predicted_step_s REAL NOT NULL,"
    "  measured_step_s REAL NOT NULL CHECK(measured_step_s > 0),"
    "  predicted_mfu REAL NOT NULL,"
    "  measured_mfu REAL NOT NULL,"
    "  predicted_memory_bytes REAL NOT NULL,"
    "  measured_memory_bytes REAL NOT NULL);",
    /* 3 -> 4: closing the loop. A run names the plan it trained and its files; its
     * ranks' memory and every span of its merged trace are kept beside it, so that
     * calibration and reports can be made from the database alone; and the figures
     * that calibration fits for the analytic fallbacks are stored for the planner. */
    "ALTER TABLE runs ADD COLUMN plan_id TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE runs ADD COLUMN plan_path TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE runs ADD COLUMN log_path TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE runs ADD COLUMN trace_path TEXT NOT NULL DEFAULT '';"
    "CREATE TABLE run_ranks("
    "  run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  rank INTEGER NOT NULL CHECK(rank >= 0),"
    "  stage INTEGER NOT NULL CHECK(stage >= 0),"
    "  predicted_memory_bytes REAL NOT NULL,"
    "  measured_memory_bytes REAL NOT NULL,"
    "  peak_rss_bytes REAL NOT NULL,"
    "  PRIMARY KEY(run_id, rank));"
    "CREATE TABLE spans("
    "  id INTEGER PRIMARY KEY,"
    "  run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  rank INTEGER NOT NULL CHECK(rank >= 0),"
    "  stream INTEGER NOT NULL,"
    "  name TEXT NOT NULL,"
    "  op_key TEXT NOT NULL,"
    "  mb INTEGER NOT NULL,"
    "  chunk INTEGER NOT NULL,"
    "  start_s REAL NOT NULL,"
    "  dur_s REAL NOT NULL CHECK(dur_s >= 0),"
    "  flops REAL NOT NULL,"
    "  bytes REAL NOT NULL,"
    "  dtype TEXT NOT NULL);"
    "CREATE INDEX spans_by_run ON spans(run_id, rank, start_s);"
    "CREATE TABLE kernel_fits("
    "  device TEXT NOT NULL,"
    "  class TEXT NOT NULL,"
    "  eff REAL NOT NULL CHECK(eff > 0),"
    "  fixed_s REAL NOT NULL CHECK(fixed_s >= 0),"
    "  samples INTEGER NOT NULL,"
    "  rms_rel_err REAL NOT NULL,"
    "  created_at TEXT NOT NULL,"
    "  PRIMARY KEY(device, class));"
    "CREATE TABLE link_fits("
    "  backend TEXT NOT NULL,"
    "  level TEXT NOT NULL CHECK(level IN ('intra', 'inter')),"
    "  alpha_s REAL NOT NULL CHECK(alpha_s >= 0),"
    "  bw_Bps REAL NOT NULL CHECK(bw_Bps > 0),"
    "  samples INTEGER NOT NULL,"
    "  rms_rel_err REAL NOT NULL,"
    "  created_at TEXT NOT NULL,"
    "  PRIMARY KEY(backend, level));",
    /* 4 -> 5: calibration that can be trusted and undone (issue 13). A trace sample
     * names the run it came from (run_id; NULL for ptprofile's) with its robust spread
     * and span count, so that ptcalib --forget removes exactly one run's figures. A run
     * keeps per-(rank, op) statistics (op_stats) instead of every span, its GEMM rate
     * against the profile and why it was judged too noisy to calibrate from. Fits keep
     * their history, one row per calibration (run_id, 0 for fits made before), the
     * newest row of a class being the one in force, so that forgetting a run restores
     * the fits that were in force before it. */
    "ALTER TABLE kernel_samples ADD COLUMN run_id INTEGER;"
    "ALTER TABLE kernel_samples ADD COLUMN spread_s REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE kernel_samples ADD COLUMN spans INTEGER NOT NULL DEFAULT 1;"
    "CREATE INDEX kernel_samples_by_run ON kernel_samples(run_id);"
    "ALTER TABLE runs ADD COLUMN steps_timed INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE runs ADD COLUMN gemm_ratio REAL NOT NULL DEFAULT 0;"
    "ALTER TABLE runs ADD COLUMN noisy TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE runs ADD COLUMN forgotten INTEGER NOT NULL DEFAULT 0;"
    "CREATE TABLE op_stats("
    "  run_id INTEGER NOT NULL REFERENCES runs(id),"
    "  rank INTEGER NOT NULL CHECK(rank >= 0),"
    "  stream INTEGER NOT NULL,"
    "  name TEXT NOT NULL,"
    "  op_key TEXT NOT NULL,"
    "  dtype TEXT NOT NULL,"
    "  flops REAL NOT NULL,"
    "  bytes REAL NOT NULL,"
    "  spans INTEGER NOT NULL CHECK(spans >= 1),"
    "  kept INTEGER NOT NULL CHECK(kept BETWEEN 1 AND spans),"
    "  median_s REAL NOT NULL CHECK(median_s >= 0),"
    "  mad_s REAL NOT NULL CHECK(mad_s >= 0),"
    "  mean_s REAL NOT NULL CHECK(mean_s >= 0),"
    "  min_s REAL NOT NULL,"
    "  max_s REAL NOT NULL,"
    "  total_s REAL NOT NULL,"
    "  PRIMARY KEY(run_id, rank, stream, name, op_key));"
    "CREATE TABLE kernel_fits_5("
    "  device TEXT NOT NULL,"
    "  class TEXT NOT NULL,"
    "  run_id INTEGER NOT NULL,"
    "  eff REAL NOT NULL CHECK(eff > 0),"
    "  fixed_s REAL NOT NULL CHECK(fixed_s >= 0),"
    "  samples INTEGER NOT NULL,"
    "  rms_rel_err REAL NOT NULL,"
    "  cv_rel_err REAL NOT NULL DEFAULT 0,"
    "  created_at TEXT NOT NULL,"
    "  PRIMARY KEY(device, class, run_id));"
    "INSERT INTO kernel_fits_5(device, class, run_id, eff, fixed_s, samples, rms_rel_err,"
    "  created_at) SELECT device, class, 0, eff, fixed_s, samples, rms_rel_err, created_at"
    "  FROM kernel_fits;"
    "DROP TABLE kernel_fits;"
    "ALTER TABLE kernel_fits_5 RENAME TO kernel_fits;"
    "CREATE TABLE link_fits_5("
    "  backend TEXT NOT NULL,"
    "  level TEXT NOT NULL CHECK(level IN ('intra', 'inter')),"
    "  run_id INTEGER NOT NULL,"
    "  alpha_s REAL NOT NULL CHECK(alpha_s >= 0),"
    "  bw_Bps REAL NOT NULL CHECK(bw_Bps > 0),"
    "  samples INTEGER NOT NULL,"
    "  rms_rel_err REAL NOT NULL,"
    "  cv_rel_err REAL NOT NULL DEFAULT 0,"
    "  created_at TEXT NOT NULL,"
    "  PRIMARY KEY(backend, level, run_id));"
    "INSERT INTO link_fits_5(backend, level, run_id, alpha_s, bw_Bps, samples, rms_rel_err,"
    "  created_at) SELECT backend, level, 0, alpha_s, bw_Bps, samples, rms_rel_err,"
    "  created_at FROM link_fits;"
    "DROP TABLE link_fits;"
    "ALTER TABLE link_fits_5 RENAME TO link_fits;",
    /* 5 -> 6: a span says which instruction of its rank's schedule program it ran in, and
     * an op span its place in its op list (-1: not known, as in older runs) */
    "ALTER TABLE spans"
    "  ADD COLUMN ins INTEGER NOT NULL DEFAULT -1;"
    "ALTER TABLE spans ADD COLUMN op INTEGER NOT NULL DEFAULT -1;",
    /* 6 -> 7: measured runs of any framework (issue 65): a run record (planner/runrec.c's
     * JSON, self-contained) per row, keyed by the stack and device it calibrates, with
     * the figures a reader of the table wants beside it. Their own table and ids, apart
     * from ptrun's runs: ptcalib names them f<id> (runs.c). */
    "CREATE TABLE framework_runs("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT," /* an id forgotten is never given again */
    "  created_at TEXT NOT NULL,"
    "  stack TEXT NOT NULL,"
    "  device TEXT NOT NULL,"
    "  model TEXT NOT NULL,"
    "  cluster TEXT NOT NULL,"
    "  gpus INTEGER NOT NULL CHECK(gpus >= 1),"
    "  layout TEXT NOT NULL,"
    "  measured_step_s REAL NOT NULL CHECK(measured_step_s > 0),"
    "  date TEXT NOT NULL,"
    "  software TEXT NOT NULL,"
    "  source TEXT NOT NULL,"
    "  record TEXT NOT NULL);"
    "CREATE INDEX framework_runs_by_target ON framework_runs(stack, device);",
};

enum { SCHEMA_VERSION = (int)(sizeof migrations / sizeof migrations[0]) };

/* How long an open waits for another process's lock on the file (sqlite3_busy_timeout). */
enum { PT_COSTDB_BUSY_MS = 10000 };

int pt_costdb_schema_version(void)
{
    return SCHEMA_VERSION;
}

static const char *const source_names[] = {"profile", "trace"};

/* ---- SQLite helpers ------------------------------------------------------------------ */

const char *pt_costdb_where(const pt_costdb *db)
{
    return db->path[0] ? db->path : "(in-memory cost table)";
}

int pt_costdb_sql_fail(const pt_costdb *db, pt_err *err, const char *what)
{
    /* SQLite's own diagnosis of the file beats our guess at what went wrong. */
    int code = sqlite3_errcode(db->sql);
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
        return pt_err_set(err, "%s: %s: locked by another process for longer than the %d s "
                               "waited (a ptprofile or ptrun --record writing it, or a sqlite3 "
                               "shell in a transaction); try again when it has finished",
                          pt_costdb_where(db), what, PT_COSTDB_BUSY_MS / 1000);
    if (code == SQLITE_NOTADB)
        what = "not a cost database";
    else if (code == SQLITE_CORRUPT)
        what = "damaged database";
    return pt_err_set(err, "%s: %s: %s", pt_costdb_where(db), what, sqlite3_errmsg(db->sql));
}

#define where pt_costdb_where
#define iso_now pt_costdb_iso_now
#define insert_row pt_costdb_insert_row
#define sql_fail pt_costdb_sql_fail

static int exec(pt_costdb *db, const char *sql, pt_err *err, const char *what)
{
    if (sqlite3_exec(db->sql, sql, NULL, NULL, NULL) != SQLITE_OK)
        return sql_fail(db, err, what);
    return 0;
}

/* Runs a query whose first row's first column is an integer; *out = -1 if no row. */
static int query_int(pt_costdb *db, const char *sql, int64_t *out, pt_err *err,
                     const char *what)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return sql_fail(db, err, what);
    int rc = sqlite3_step(st);
    *out = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return sql_fail(db, err, what);
    return 0;
}

void pt_costdb_iso_now(char out[32])
{
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
    else
        snprintf(out, 32, "1970-01-01T00:00:00Z");
}

/* ---- Opening and migrating ------------------------------------------------------------ */

/* The version stored in meta; -1 with err when it is missing or not a number. */
static int read_version(pt_costdb *db, int *version, pt_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql, "SELECT value FROM meta WHERE key = 'schema_version'",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_fail(db, err, "damaged cost database");
    int rc = sqlite3_step(st);
    char text[32] = "";
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(text, sizeof text, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return sql_fail(db, err, "damaged cost database");
    if (rc == SQLITE_DONE)
        return pt_err_set(err, "%s: damaged cost database: meta has no schema_version",
                          where(db));
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!text[0] || *end || errno || v < 0 || v > 1000000)
        return pt_err_set(err, "%s: damaged cost database: schema_version '%s' is not a "
                               "version number", where(db), text);
    *version = (int)v;
    return 0;
}

/* Brings the database to SCHEMA_VERSION in one transaction; with `init`, first
 * makes an empty file a version-0 cost database. The version is read again inside
 * the transaction, so two processes opening one old file migrate it once. */
static int migrate(pt_costdb *db, bool init, pt_err *err)
{
    if (exec(db, "BEGIN IMMEDIATE", err, "cannot start the schema transaction"))
        return -1;
    int v = 0;
    if (init && exec(db,
                     "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                     "INSERT OR IGNORE INTO meta VALUES('schema_version', '0');",
                     err, "cannot create the schema"))
        goto fail;
    if (read_version(db, &v, err))
        goto fail;
    for (; v < SCHEMA_VERSION; v++) {
        char what[96], sql[96];
        snprintf(what, sizeof what, "migrating schema from version %d to %d", v, v + 1);
        snprintf(sql, sizeof sql, "UPDATE meta SET value = '%d' WHERE key = 'schema_version'",
                 v + 1);
        if (exec(db, migrations[v], err, what) || exec(db, sql, err, what))
            goto fail;
    }
    if (exec(db, "COMMIT", err, "cannot commit the schema"))
        goto fail;
    return 0;
fail:
    sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

/* Checks that the file is an undamaged cost database of a version this build
 * understands, creating or migrating the schema where needed. */
static int check_schema(pt_costdb *db, int flags, pt_err *err)
{
    sqlite3_stmt *st;
    /* what SQLite says decides the message (pt_costdb_sql_fail): not a database,
     * damaged, or locked */
    if (sqlite3_prepare_v2(db->sql, "PRAGMA quick_check(1)", -1, &st, NULL) != SQLITE_OK)
        return sql_fail(db, err, "cannot check the file");
    int rc = sqlite3_step(st);
    char result[200] = "";
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(result, sizeof result, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
        return sql_fail(db, err, "cannot check the file");
    if (strcmp(result, "ok") != 0)
        return pt_err_set(err, "%s: damaged database: %s", where(db), result);

    int64_t tables, has_meta;
    if (query_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                      "name NOT LIKE 'sqlite_%'", &tables, err, "cannot read the schema") ||
        query_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                      "name = 'meta'", &has_meta, err, "cannot read the schema"))
        return -1;
    if (tables == 0) {
        if (!(flags & PT_COSTDB_CREATE))
            return pt_err_set(err, "%s: empty database, not a cost table (ptprofile "
                                   "creates one)", where(db));
        if (migrate(db, true, err))
            return -1;
    } else if (has_meta != 1) {
        return pt_err_set(err, "%s: not a cost database (it has tables but no 'meta' "
                               "table)", where(db));
    }

    int v;
    if (read_version(db, &v, err))
        return -1;
    if (v > SCHEMA_VERSION)
        return pt_err_set(err, "%s: schema version %d is newer than this build "
                               "understands (%d); update ptplan", where(db), v, SCHEMA_VERSION);
    if (v < SCHEMA_VERSION && (migrate(db, false, err) || read_version(db, &v, err)))
        return -1;
    db->schema_version = v;
    return 0;
}

/* ---- In-memory tables ------------------------------------------------------------------ */

static int grow(void **p, size_t elem, size_t cap)
{
    void *q = realloc(*p, elem * cap);
    if (!q)
        return -1;
    *p = q;
    return 0;
}

/* Makes room for one more kernel sample in every array. */
static int reserve_kernel(pt_costdb *db, pt_err *err)
{
    if (db->nk < db->capk)
        return 0;
    size_t cap = db->capk ? 2 * db->capk : 256;
    if (cap > UINT32_MAX || grow((void **)&db->ks, sizeof *db->ks, cap) ||
        grow((void **)&db->k_by_key, sizeof *db->k_by_key, cap) ||
        grow((void **)&db->k_by_x, sizeof *db->k_by_x, cap))
        return pt_err_set(err, "%s: out of memory for kernel samples", where(db));
    db->capk = cap;
    return 0;
}

static int reserve_coll(pt_costdb *db, pt_err *err)
{
    if (db->nc < db->capc)
        return 0;
    size_t cap = db->capc ? 2 * db->capc : 256;
    if (cap > UINT32_MAX || grow((void **)&db->cs, sizeof *db->cs, cap) ||
        grow((void **)&db->c_by_cfg, sizeof *db->c_by_cfg, cap))
        return pt_err_set(err, "%s: out of memory for collective samples", where(db));
    db->capc = cap;
    return 0;
}

/* ---- Validation (inserts, and rows read back from a file) ------------------------------- */

static bool finite_nonneg(double v)
{
    return isfinite(v) && v >= 0;
}

/* Fills s from the arguments; on a bad value writes why into `why` and returns -1. */
static int make_ksample(pt_ksample *s, const char *device, const char *key, int dtype,
                        double flops, double bytes, double time_s, char *why, size_t cap)
{
    const char *colon = key ? strchr(key, ':') : NULL;
    if (!device || !device[0] || strlen(device) >= sizeof s->device)
        snprintf(why, cap, "device name must be 1 to %zu characters", sizeof s->device - 1);
    else if (!key || !key[0] || strlen(key) >= sizeof s->key)
        snprintf(why, cap, "op key must be 1 to %zu characters", sizeof s->key - 1);
    else if (!colon || colon == key)
        snprintf(why, cap, "op key '%s' is not '<kind>:<dtype>:<shape>'", key);
    else if ((unsigned)dtype >= PT_DTYPE_COUNT)
        snprintf(why, cap, "data type %d is not one of fp32, tf32, bf16, fp16, fp8", dtype);
    else if (!finite_nonneg(flops))
        snprintf(why, cap, "flops must be finite and >= 0 (got %g)", flops);
    else if (!finite_nonneg(bytes))
        snprintf(why, cap, "bytes must be finite and >= 0 (got %g)", bytes);
    else if (!(isfinite(time_s) && time_s > 0))
        snprintf(why, cap, "time_s must be finite and > 0 (got %g)", time_s);
    else {
        memset(s, 0, sizeof *s);
        snprintf(s->device, sizeof s->device, "%s", device);
        snprintf(s->key, sizeof s->key, "%s", key);
        s->kind_len = (int)(colon - key);
        s->dtype = (pt_dtype)dtype;
        s->flops = flops + 0.0; /* + 0.0 turns -0 into 0, for the fingerprint */
        s->bytes = bytes + 0.0;
        s->time_s = time_s;
        return 0;
    }
    return -1;
}

static int make_csample(pt_csample *s, const char *backend, int op, double bytes,
                        int64_t group, int64_t rpn, double time_s, char *why, size_t cap)
{
    if (!backend || !backend[0] || strlen(backend) >= sizeof s->backend)
        snprintf(why, cap, "backend name must be 1 to %zu characters", sizeof s->backend - 1);
    else if ((unsigned)op >= PT_COLL_COUNT)
        snprintf(why, cap, "collective %d is not one of allreduce, allgather, "
                           "reducescatter, alltoall, broadcast, sendrecv", op);
    else if (!finite_nonneg(bytes))
        snprintf(why, cap, "bytes must be finite and >= 0 (got %g)", bytes);
    else if (group < 1 || group > INT32_MAX)
        snprintf(why, cap, "group size must be >= 1 (got %" PRId64 ")", group);
    else if (rpn < 1 || rpn > group)
        snprintf(why, cap, "ranks_per_node must be in 1..%" PRId64 " (got %" PRId64 ")",
                 group, rpn);
    else if (!(isfinite(time_s) && time_s > 0))
        snprintf(why, cap, "time_s must be finite and > 0 (got %g)", time_s);
    else {
        memset(s, 0, sizeof *s);
        snprintf(s->backend, sizeof s->backend, "%s", backend);
        s->op = (pt_coll)op;
        s->bytes = bytes + 0.0;
        s->group = (int)group;
        s->ranks_per_node = (int)rpn;
        s->time_s = time_s;
        return 0;
    }
    return -1;
}

static int check_hw(const pt_cost_hw *hw, char *why, size_t cap)
{
    double figs[] = {hw->mem_bw_Bps, hw->intra_bw_Bps, hw->intra_latency_s,
                     hw->inter_bw_Bps, hw->inter_latency_s};
    if (!hw->device[0] || strnlen(hw->device, sizeof hw->device) >= sizeof hw->device)
        return snprintf(why, cap, "device name must be 1 to %zu characters",
                        sizeof hw->device - 1), -1;
    if (strnlen(hw->backend, sizeof hw->backend) >= sizeof hw->backend)
        return snprintf(why, cap, "backend name is longer than %zu characters",
                        sizeof hw->backend - 1), -1;
    for (int d = 0; d < PT_DTYPE_COUNT; d++)
        if (!finite_nonneg(hw->peak_flops[d]))
            return snprintf(why, cap, "%s peak must be finite and >= 0 (0 = unknown)",
                            pt_dtype_name((pt_dtype)d)), -1;
    for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++)
        if (!finite_nonneg(figs[i]))
            return snprintf(why, cap, "bandwidths and latencies must be finite and >= 0 "
                                      "(0 = unknown)"), -1;
    if (hw->devices_per_node < 0)
        return snprintf(why, cap, "devices_per_node must be >= 0"), -1;
    return 0;
}

/* ---- Loading ---------------------------------------------------------------------------- */

static bool col_is_number(sqlite3_stmt *st, int c)
{
    int t = sqlite3_column_type(st, c);
    return t == SQLITE_INTEGER || t == SQLITE_FLOAT;
}

static const char *col_text(sqlite3_stmt *st, int c)
{
    const unsigned char *t = sqlite3_column_text(st, c);
    return t ? (const char *)t : "";
}

static int load_kernels(pt_costdb *db, pt_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT id, device, op_key, dtype, flops, bytes, time_s, kind, source,"
                           " created_at, run_id FROM kernel_samples"
                           " WHERE source = 'profile' OR ?1 = 0 ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_fail(db, err, "damaged cost database");
    sqlite3_bind_int(st, 1, db->profile_only);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char why[200];
        pt_dtype dt = PT_DTYPE_COUNT;
        if (pt_dtype_parse(col_text(st, 3), &dt, NULL) != 0)
            snprintf(why, sizeof why, "unknown data type '%.32s'", col_text(st, 3));
        else if (!col_is_number(st, 4) || !col_is_number(st, 5) || !col_is_number(st, 6))
            snprintf(why, sizeof why, "flops, bytes and time_s must be numbers");
        else if (reserve_kernel(db, err))
            goto fail;
        else if (make_ksample(&db->ks[db->nk], col_text(st, 1), col_text(st, 2), (int)dt,
                              sqlite3_column_double(st, 4), sqlite3_column_double(st, 5),
                              sqlite3_column_double(st, 6), why, sizeof why) == 0) {
            /* a trace sample stored before schema 5 names no run: -1 */
            db->ks[db->nk++].run_id = sqlite3_column_type(st, 10) != SQLITE_NULL
                                          ? sqlite3_column_int64(st, 10)
                                          : strcmp(col_text(st, 8), "trace") == 0 ? -1 : 0;
            continue;
        }
        pt_err_set(err, "%s: damaged cost database: kernel sample %lld: %s", where(db),
                   (long long)sqlite3_column_int64(st, 0), why);
        goto fail;
    }
    if (rc != SQLITE_DONE) {
        sql_fail(db, err, "damaged cost database");
        goto fail;
    }
    sqlite3_finalize(st);
    return 0;
fail:
    sqlite3_finalize(st);
    return -1;
}

static int load_colls(pt_costdb *db, pt_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT id, backend, op, bytes, group_size, ranks_per_node, time_s,"
                           " crosses_nodes, source, created_at FROM coll_samples"
                           " WHERE source = 'profile' OR ?1 = 0 ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_fail(db, err, "damaged cost database");
    sqlite3_bind_int(st, 1, db->profile_only);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char why[200];
        pt_coll op = PT_COLL_COUNT;
        if (pt_coll_parse(col_text(st, 2), &op, NULL) != 0)
            snprintf(why, sizeof why, "unknown collective '%.32s'", col_text(st, 2));
        else if (!col_is_number(st, 3) || !col_is_number(st, 4) || !col_is_number(st, 5) ||
            !col_is_number(st, 6))
            snprintf(why, sizeof why, "bytes, group_size, ranks_per_node and time_s must "
                                      "be numbers");
        else if (reserve_coll(db, err))
            goto fail;
        else if (make_csample(&db->cs[db->nc], col_text(st, 1), (int)op,
                              sqlite3_column_double(st, 3), sqlite3_column_int64(st, 4),
                              sqlite3_column_int64(st, 5), sqlite3_column_double(st, 6), why,
                              sizeof why) == 0) {
            db->nc++;
            continue;
        }
        pt_err_set(err, "%s: damaged cost database: collective sample %lld: %s", where(db),
                   (long long)sqlite3_column_int64(st, 0), why);
        goto fail;
    }
    if (rc != SQLITE_DONE) {
        sql_fail(db, err, "damaged cost database");
        goto fail;
    }
    sqlite3_finalize(st);
    return 0;
fail:
    sqlite3_finalize(st);
    return -1;
}

/* Adds or replaces hw in the in-memory device list. */
static int keep_device(pt_costdb *db, const pt_cost_hw *hw, pt_err *err)
{
    for (size_t i = 0; i < db->ndev; i++)
        if (strcmp(db->devs[i].device, hw->device) == 0) {
            db->devs[i] = *hw;
            return 0;
        }
    if (db->ndev == db->capdev) {
        size_t cap = db->capdev ? 2 * db->capdev : 8;
        if (grow((void **)&db->devs, sizeof *db->devs, cap))
            return pt_err_set(err, "%s: out of memory for devices", where(db));
        db->capdev = cap;
    }
    db->devs[db->ndev++] = *hw;
    return 0;
}

static int load_devices(pt_costdb *db, pt_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "SELECT name, backend, peak_flops_fp32, peak_flops_tf32,"
                           " peak_flops_bf16, peak_flops_fp16, peak_flops_fp8, mem_bw_Bps,"
                           " devices_per_node, intra_bw_Bps, intra_latency_s, inter_bw_Bps,"
                           " inter_latency_s, created_at FROM devices ORDER BY name",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_fail(db, err, "damaged cost database");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        pt_cost_hw hw = {0};
        char why[200] = "device or backend name too long";
        snprintf(hw.device, sizeof hw.device, "%s", col_text(st, 0));
        snprintf(hw.backend, sizeof hw.backend, "%s", col_text(st, 1));
        for (int d = 0; d < PT_DTYPE_COUNT; d++)
            hw.peak_flops[d] = sqlite3_column_double(st, 2 + d);
        hw.mem_bw_Bps = sqlite3_column_double(st, 7);
        hw.devices_per_node = sqlite3_column_int(st, 8);
        hw.intra_bw_Bps = sqlite3_column_double(st, 9);
        hw.intra_latency_s = sqlite3_column_double(st, 10);
        hw.inter_bw_Bps = sqlite3_column_double(st, 11);
        hw.inter_latency_s = sqlite3_column_double(st, 12);
        if (strlen(col_text(st, 0)) >= sizeof hw.device ||
            strlen(col_text(st, 1)) >= sizeof hw.backend || check_hw(&hw, why, sizeof why)) {
            pt_err_set(err, "%s: damaged cost database: device '%s': %s", where(db),
                       col_text(st, 0), why);
            goto fail;
        }
        if (keep_device(db, &hw, err))
            goto fail;
    }
    if (rc != SQLITE_DONE) {
        sql_fail(db, err, "damaged cost database");
        goto fail;
    }
    sqlite3_finalize(st);
    return 0;
fail:
    sqlite3_finalize(st);
    return -1;
}

static int build_indexes(pt_costdb *db, pt_err *err)
{
    size_t n = db->nk > db->nc ? db->nk : db->nc;
    uint32_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return pt_err_set(err, "%s: out of memory for the sample indexes", where(db));
    pt_costdb_index_all(db, tmp);
    free(tmp);
    return 0;
}

/* ---- Open and close ---------------------------------------------------------------------- */

/* The schema checked (created where `flags` say so), `sql` run over it in one
 * transaction where given, then every table read into memory: *out, or the table
 * closed and -1. */
static int finish_open(pt_costdb *db, int flags, const char *sql, pt_costdb **out,
                       pt_err *err)
{
    int rc = check_schema(db, flags, err);
    if (rc == 0 && sql) {
        char *msg = NULL;
        if (sqlite3_exec(db->sql, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db->sql, sql, NULL, NULL, &msg) != SQLITE_OK ||
            sqlite3_exec(db->sql, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            rc = pt_err_set(err, "%s: bad cost data: %s", where(db),
                            msg ? msg : sqlite3_errmsg(db->sql));
            sqlite3_free(msg);
        }
    }
    if (rc || load_devices(db, err) || load_kernels(db, err) || load_colls(db, err) ||
        build_indexes(db, err) || pt_costdb_load_fits(db, err)) {
        pt_costdb_close(db);
        return -1;
    }
    *out = db;
    return 0;
}

int pt_costdb_open(const char *path, int flags, pt_costdb **out, pt_err *err)
{
    *out = NULL;
    pt_costdb *db = calloc(1, sizeof *db);
    if (!db)
        return pt_err_set(err, "%s: out of memory", path ? path : "(in-memory cost table)");
    db->schema_version = SCHEMA_VERSION;
    if (!path) {
        *out = db;
        return 0;
    }
    if (!path[0] || strlen(path) >= sizeof db->path) {
        free(db);
        return pt_err_set(err, "cost database path '%.64s' is empty or longer than %zu "
                               "characters", path, sizeof db->path - 1);
    }
    snprintf(db->path, sizeof db->path, "%s", path);
    db->profile_only = (flags & PT_COSTDB_PROFILE_ONLY) != 0;

    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno != ENOENT || !(flags & PT_COSTDB_CREATE)) {
            pt_err_set(err, "%s: cannot open cost database: %s%s", path, strerror(errno),
                       errno == ENOENT ? " (ptprofile creates one)" : "");
            free(db);
            return -1;
        }
    } else if (S_ISDIR(sb.st_mode)) {
        free(db);
        return pt_err_set(err, "%s: cannot open cost database: is a directory", path);
    }

    int oflags = SQLITE_OPEN_READWRITE | (flags & PT_COSTDB_CREATE ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(path, &db->sql, oflags, NULL) != SQLITE_OK) {
        sql_fail(db, err, "cannot open cost database");
        pt_costdb_close(db);
        return -1;
    }
    /* ptprofile's ranks may write one file at once: wait for the lock, don't fail (for
     * PT_COSTDB_BUSY_MS; pt_costdb_sql_fail's message says how long) */
    sqlite3_busy_timeout(db->sql, PT_COSTDB_BUSY_MS);
    return finish_open(db, flags, NULL, out, err);
}

int pt_costdb_open_sql(const char *name, const char *sql, pt_costdb **out, pt_err *err)
{
    *out = NULL;
    pt_costdb *db = calloc(1, sizeof *db);
    if (!db)
        return pt_err_set(err, "%s: out of memory", name);
    db->schema_version = SCHEMA_VERSION;
    snprintf(db->path, sizeof db->path, "%s", name);
    if (sqlite3_open_v2(":memory:", &db->sql, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                        NULL) != SQLITE_OK) {
        sql_fail(db, err, "cannot open an in-memory cost table");
        pt_costdb_close(db);
        return -1;
    }
    return finish_open(db, PT_COSTDB_CREATE, sql, out, err);
}

void pt_costdb_close(pt_costdb *db)
{
    if (!db)
        return;
    if (db->sql)
        sqlite3_close_v2(db->sql);
    free(db->ks);
    free(db->k_by_key);
    free(db->k_by_x);
    free(db->cs);
    free(db->c_by_cfg);
    free(db->devs);
    free(db->fits);
    free(db);
}

/* ---- Inserts ------------------------------------------------------------------------------ */

/* Prepares sql, binds the arguments described by `types` ('t' text, 'd' double, 'i'
 * int64) from ap and runs it to completion; *changes (may be NULL) receives the rows it
 * changed. */
static int run_bound(pt_costdb *db, const char *sql, const char *types, va_list ap,
                     int64_t *changes, pt_err *err, const char *what)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return sql_fail(db, err, what);
    for (int i = 0; types[i]; i++) {
        if (types[i] == 't')
            sqlite3_bind_text(st, i + 1, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        else if (types[i] == 'd')
            sqlite3_bind_double(st, i + 1, va_arg(ap, double));
        else
            sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
    }
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE)
        return sql_fail(db, err, what);
    if (changes)
        *changes = sqlite3_changes(db->sql);
    return 0;
}

int pt_costdb_insert_row(pt_costdb *db, const char *sql, const char *types, pt_err *err,
                         const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    int rc = run_bound(db, sql, types, ap, NULL, err, what);
    va_end(ap);
    return rc;
}

int pt_costdb_exec_bound(pt_costdb *db, const char *sql, const char *types, int64_t *changes,
                         pt_err *err, const char *what, ...)
{
    va_list ap;
    va_start(ap, what);
    int rc = run_bound(db, sql, types, ap, changes, err, what);
    va_end(ap);
    return rc;
}

int pt_costdb_add_device(pt_costdb *db, const pt_cost_hw *hw, pt_err *err)
{
    if (!db)
        return pt_err_set(err, "no cost table to add to");
    char why[200], now[32];
    if (check_hw(hw, why, sizeof why))
        return pt_err_set(err, "%s: device '%.63s': %s", where(db), hw->device, why);
    iso_now(now);
    if (db->sql &&
        insert_row(db,
                   "INSERT OR REPLACE INTO devices(name, backend, peak_flops_fp32,"
                   " peak_flops_tf32, peak_flops_bf16, peak_flops_fp16, peak_flops_fp8,"
                   " mem_bw_Bps, devices_per_node, intra_bw_Bps, intra_latency_s,"
                   " inter_bw_Bps, inter_latency_s, created_at)"
                   " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   "ttddddddiddddt", err, "cannot store device", hw->device, hw->backend,
                   hw->peak_flops[PT_DTYPE_FP32], hw->peak_flops[PT_DTYPE_TF32],
                   hw->peak_flops[PT_DTYPE_BF16], hw->peak_flops[PT_DTYPE_FP16],
                   hw->peak_flops[PT_DTYPE_FP8], hw->mem_bw_Bps, (int64_t)hw->devices_per_node,
                   hw->intra_bw_Bps, hw->intra_latency_s, hw->inter_bw_Bps,
                   hw->inter_latency_s, now))
        return -1;
    return keep_device(db, hw, err);
}

int pt_costdb_device(const pt_costdb *db, const char *name, pt_cost_hw *out, pt_err *err)
{
    for (size_t i = 0; db && name && i < db->ndev; i++)
        if (strcmp(db->devs[i].device, name) == 0) {
            *out = db->devs[i];
            return 0;
        }
    return pt_err_set(err, "%s: no device '%s'", db ? where(db) : "(no cost table)",
                      name ? name : "(null)");
}

/* A kernel sample with where it came from: run_id 0 for ptprofile's (stored NULL), else
 * the traced run, with its spread and the repeats it summarises. */
int pt_costdb_add_kernel_from(pt_costdb *db, const char *device, const pt_kernel_op *op,
                              double time_s, pt_source source, int64_t run_id,
                              double spread_s, int64_t spans, pt_err *err)
{
    if (!db)
        return pt_err_set(err, "no cost table to add to");
    char why[200], now[32];
    pt_ksample s;
    if (make_ksample(&s, device, op->key, (int)op->dtype, op->flops, op->bytes, time_s, why,
                     sizeof why))
        return pt_err_set(err, "%s: kernel sample '%.127s': %s", where(db), op->key, why);
    if ((unsigned)source > PT_SOURCE_TRACE)
        return pt_err_set(err, "%s: kernel sample '%s': source %d is not profile or trace",
                          where(db), op->key, (int)source);
    if (reserve_kernel(db, err))
        return -1;
    /* in memory, a trace sample without a run is -1, as one read back is */
    s.run_id = run_id > 0 ? run_id : source == PT_SOURCE_TRACE ? -1 : 0;
    char kind[sizeof s.key];
    snprintf(kind, sizeof kind, "%.*s", s.kind_len, s.key);
    iso_now(now);
    if (db->sql &&
        insert_row(db,
                   "INSERT INTO kernel_samples(device, op_key, kind, dtype, flops, bytes,"
                   " time_s, source, created_at, run_id, spread_s, spans)"
                   " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, 0), ?, ?)",
                   "ttttdddttidi", err, "cannot store kernel sample", s.device, s.key, kind,
                   pt_dtype_name(s.dtype), s.flops, s.bytes, s.time_s, source_names[source],
                   now, run_id > 0 ? run_id : (int64_t)0, isfinite(spread_s) && spread_s > 0 ? spread_s : 0.0,
                   spans > 0 ? spans : (int64_t)1))
        return -1;
    db->ks[db->nk] = s;
    pt_costdb_index_kernel(db, (uint32_t)db->nk);
    db->nk++;
    return 0;
}

int pt_costdb_add_kernel(pt_costdb *db, const char *device, const pt_kernel_op *op,
                         double time_s, pt_source source, pt_err *err)
{
    return pt_costdb_add_kernel_from(db, device, op, time_s, source, 0, 0, 1, err);
}

int pt_costdb_add_coll(pt_costdb *db, const char *backend, const pt_coll_op *op,
                       double time_s, pt_source source, pt_err *err)
{
    if (!db)
        return pt_err_set(err, "no cost table to add to");
    char why[200], now[32];
    pt_csample s;
    if (make_csample(&s, backend, (int)op->op, op->bytes, op->group, op->ranks_per_node,
                     time_s, why, sizeof why))
        return pt_err_set(err, "%s: %s sample: %s", where(db), pt_coll_name(op->op), why);
    if ((unsigned)source > PT_SOURCE_TRACE)
        return pt_err_set(err, "%s: %s sample: source %d is not profile or trace", where(db),
                          pt_coll_name(op->op), (int)source);
    if (reserve_coll(db, err))
        return -1;
    iso_now(now);
    if (db->sql &&
        insert_row(db,
                   "INSERT INTO coll_samples(backend, op, bytes, group_size, ranks_per_node,"
                   " crosses_nodes, time_s, source, created_at)"
                   " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   "ttdiiidtt", err, "cannot store collective sample", s.backend,
                   pt_coll_name(s.op), s.bytes, (int64_t)s.group, (int64_t)s.ranks_per_node,
                   (int64_t)(s.ranks_per_node < s.group), s.time_s, source_names[source], now))
        return -1;
    db->cs[db->nc] = s;
    pt_costdb_index_coll(db, (uint32_t)db->nc);
    db->nc++;
    return 0;
}

/* ---- Transactions, replacing samples, profile runs ------------------------------------ */

/* Transactions nest: only the outermost begin starts one and only the outermost commit
 * ends it, so a caller can make several recording calls (each a transaction of its own
 * when called alone) one atomic change. Any rollback undoes the whole transaction. */
int pt_costdb_begin(pt_costdb *db, pt_err *err)
{
    if (!db || !db->sql)
        return 0;
    if (db->tx_depth > 0 && sqlite3_get_autocommit(db->sql) == 0) {
        db->tx_depth++;
        return 0;
    }
    if (exec(db, "BEGIN IMMEDIATE", err, "cannot start a transaction"))
        return -1;
    db->tx_depth = 1;
    return 0;
}

int pt_costdb_commit(pt_costdb *db, pt_err *err)
{
    if (!db || !db->sql)
        return 0;
    if (db->tx_depth > 1) {
        db->tx_depth--;
        return 0;
    }
    db->tx_depth = 0;
    return exec(db, "COMMIT", err, "cannot commit");
}

int pt_costdb_rollback(pt_costdb *db, pt_err *err)
{
    if (!db || !db->sql)
        return 0;
    db->tx_depth = 0;
    if (sqlite3_get_autocommit(db->sql) == 0 &&
        sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK)
        return pt_costdb_sql_fail(db, err, "cannot roll back");
    return pt_costdb_reload(db, err);
}

/* Reads every sample again after rows were deleted (the in-memory arrays are
 * append-only), and the fits. */
int pt_costdb_reload(pt_costdb *db, pt_err *err)
{
    free(db->ks);
    free(db->k_by_key);
    free(db->k_by_x);
    free(db->cs);
    free(db->c_by_cfg);
    db->ks = NULL, db->k_by_key = db->k_by_x = NULL, db->cs = NULL, db->c_by_cfg = NULL;
    db->nk = db->capk = db->nc = db->capc = 0;
    return load_kernels(db, err) || load_colls(db, err) || build_indexes(db, err) ||
                   pt_costdb_load_fits(db, err)
               ? -1
               : 0;
}

/* Runs a DELETE with the given bindings; reloads the in-memory tables when it removed
 * rows. */
static int delete_rows(pt_costdb *db, const char *sql, const char *types, pt_err *err, ...)
{
    va_list ap;
    va_start(ap, err);
    int64_t changes = 0;
    int rc = run_bound(db, sql, types, ap, &changes, err, "cannot replace samples");
    va_end(ap);
    return rc == 0 && changes > 0 ? pt_costdb_reload(db, err) : rc;
}

int pt_costdb_put_kernel(pt_costdb *db, const char *device, const pt_kernel_op *op,
                         double time_s, pt_source source, pt_err *err)
{
    if (db && db->sql && (unsigned)source <= PT_SOURCE_TRACE &&
        delete_rows(db, "DELETE FROM kernel_samples WHERE device = ? AND op_key = ? AND"
                        " source = ? AND run_id IS NULL", "ttt", err, device, op->key,
                    source_names[source]))
        return -1;
    return pt_costdb_add_kernel(db, device, op, time_s, source, err);
}

int pt_costdb_put_coll(pt_costdb *db, const char *backend, const pt_coll_op *op,
                       double time_s, pt_source source, pt_err *err)
{
    if (db && db->sql && (unsigned)source <= PT_SOURCE_TRACE && (unsigned)op->op < PT_COLL_COUNT &&
        delete_rows(db, "DELETE FROM coll_samples WHERE backend = ? AND op = ? AND bytes = ?"
                        " AND group_size = ? AND ranks_per_node = ? AND source = ?",
                    "ttdiit", err, backend, pt_coll_name(op->op), op->bytes,
                    (int64_t)op->group, (int64_t)op->ranks_per_node, source_names[source]))
        return -1;
    return pt_costdb_add_coll(db, backend, op, time_s, source, err);
}

bool pt_costdb_has_kernel(const pt_costdb *db, const char *device, const char *key)
{
    for (size_t i = 0; db && i < db->nk; i++)
        if (strcmp(db->ks[i].device, device) == 0 && strcmp(db->ks[i].key, key) == 0)
            return true;
    return false;
}

int64_t pt_costdb_count_colls(const pt_costdb *db, const char *backend)
{
    int64_t n = 0;
    for (size_t i = 0; db && i < db->nc; i++)
        n += strcmp(db->cs[i].backend, backend) == 0;
    return n;
}

int pt_costdb_run_begin(pt_costdb *db, const pt_profile_run *run, int64_t *id, pt_err *err)
{
    *id = 0;
    if (!db || !db->sql)
        return 0;
    char now[32];
    iso_now(now);
    if (insert_row(db,
                   "INSERT INTO profile_runs(started_at, host, device, backend, versions,"
                   " command, status) VALUES(?, ?, ?, ?, ?, ?, 'running')",
                   "tttttt", err, "cannot record the profile run", now, run->host, run->device,
                   run->backend, run->versions, run->command))
        return -1;
    *id = sqlite3_last_insert_rowid(db->sql);
    return 0;
}

int pt_costdb_run_end(pt_costdb *db, int64_t id, const char *status, pt_err *err)
{
    if (!db || !db->sql || id == 0)
        return 0;
    char now[32];
    iso_now(now);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql,
                           "UPDATE profile_runs SET finished_at = ?, status = ? WHERE id = ?",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_fail(db, err, "cannot record the end of the profile run");
    sqlite3_bind_text(st, 1, now, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, status, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 3, id);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : sql_fail(db, err, "cannot record the end of the profile run");
}
