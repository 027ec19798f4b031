/*
 * The trainer's outputs besides checkpoints: the JSON-lines log (a header naming the
 * plan, the model and the build, then a line per step, validation, spike and rollback,
 * each with its time, the tokens trained on so far and the memory in use, flushed as
 * it is written), and at the end the trace of every rank merged on rank 0's clock, written
 * as a Chrome trace and recorded in the cost table with the run's predicted and
 * measured figures. The log is claimed when the run opens: opened without truncating
 * it and locked, so that another run's log is refused untouched. What else cannot be
 * written is found by pt_trainer_start, before the first step.
 */
#include "trainer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- The JSON-lines log --------------------------------------------------------------------- */

/* ts in UTC, ISO 8601 with milliseconds: "YYYY-MM-DDThh:mm:ss.sssZ". */
static void utc_text(const struct timespec *ts, char out[32])
{
    struct tm tm;
    gmtime_r(&ts->tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ts->tv_nsec / 1000000));
}

/* The process's peak resident set in bytes (Linux reports ru_maxrss in KiB), 0 when
 * getrusage fails. */
static double peak_rss_bytes(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : 0;
}

/* Every line's leading fields: when (ISO 8601 and Unix seconds, one clock reading), the
 * tokens of the steps the weights have taken (r->next of them, each global batch x
 * sequence), the backend memory the model allocated and the process's peak RSS. */
FILE *pt_trainer_log_begin(pt_trainer *r, const char *type, int64_t step)
{
    if (!r->log)
        return NULL;
    struct timespec ts;
    char now[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    utc_text(&ts, now);
    const pt_plan *p = &r->plan;
    fprintf(r->log, "{\"type\":\"%s\"", type);
    if (step >= 0)
        fprintf(r->log, ",\"step\":%lld", (long long)step);
    fprintf(r->log, ",\"time\":\"%s\",\"unix_s\":%lld.%03d,\"tokens_seen\":%lld,"
            "\"allocated_bytes\":%lld,\"peak_rss_bytes\":%.0f", now, (long long)ts.tv_sec,
            (int)(ts.tv_nsec / 1000000),
            (long long)(r->next * p->train.global_batch * p->model.seq),
            (long long)r->net.bytes, peak_rss_bytes());
    return r->log;
}

/* Whether every line of the log reached its file: a full disk sets the stream's error flag
 * and cuts the log mid-line, which must not pass as a complete log. */
int pt_trainer_log_check(pt_trainer *r, pt_err *err)
{
    if (!r->log)
        return 0;
    errno = 0;
    if (fflush(r->log) == 0 && !ferror(r->log))
        return 0;
    int e = r->log_errno ? r->log_errno : errno;
    return pt_err_set(err, "cannot write the log '%s': %s; it is incomplete", r->o.log,
                      e ? strerror(e) : "write error");
}

/* Flushed line by line besides the stream's line buffering: a killed run's log holds
 * every line it wrote, and a follower (tail -f) sees each step as it ends. */
void pt_trainer_log_end(pt_trainer *r, FILE *f)
{
    errno = 0;
    if ((fputs("}\n", f) < 0 || fflush(f) != 0 || ferror(f)) && !r->log_errno)
        r->log_errno = errno ? errno : EIO;
}

void pt_trainer_log_line(pt_trainer *r, const char *type, int64_t step, const char *fields, ...)
{
    FILE *f = pt_trainer_log_begin(r, type, step);
    if (!f)
        return;
    va_list ap;
    va_start(ap, fields);
    vfprintf(f, fields, ap);
    va_end(ap);
    pt_trainer_log_end(r, f);
}

/* ,"key":"value" with value escaped as a JSON string (paths and names may hold quotes). */
static void log_string(FILE *f, const char *key, const char *value)
{
    fprintf(f, ",\"%s\":", key);
    pt_json_put_string(f, value);
}

/* The process holding a flock on the file open as fd, from /proc/locks (proc(5): "1:
 * FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END", the device numbers in hex); 0 when
 * it cannot be told (another host's lock on a shared file system, no /proc). */
static long flock_holder(int fd)
{
    struct stat st;
    FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "r") : NULL;
    long holder = 0;
    char line[256], kind[16];
    while (f && !holder && fgets(line, sizeof line, f)) {
        long pid;
        unsigned maj, min;
        unsigned long long ino;
        if (sscanf(line, "%*[^:]: %15s %*s %*s %ld %x:%x:%llu", kind, &pid, &maj, &min, &ino) == 5 &&
            strcmp(kind, "FLOCK") == 0 && ino == (unsigned long long)st.st_ino &&
            maj == major(st.st_dev) && min == minor(st.st_dev) && pid != (long)getpid())
            holder = pid;
    }
    if (f)
        fclose(f);
    return holder;
}

int pt_trainer_log_claim(pt_trainer *r, pt_err *err)
{
    const char *path = r->o.log;
    /* no O_TRUNC: the file may be another run's log, which is refused below unchanged;
     * O_APPEND: each line lands at the end, after a truncation too; O_NONBLOCK (for the
     * open only): a FIFO that no process reads is refused instead of waited on */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666);
    r->log_made = fd >= 0;
    if (fd < 0 && errno == EEXIST)
        fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0 && errno == ENXIO)
        return pt_err_set(err, "cannot write '%s': it is a FIFO and no process reads it", path);
    if (fd < 0)
        return pt_err_set(err, "cannot write '%s': %s", path, strerror(errno));
    r->log_fd = fd;
    (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return pt_err_set(err, "cannot write '%s': %s", path, strerror(errno));
    /* a FIFO or terminal is not a file two runs could cut each other's lines out of,
     * and several runs may well share /dev/null */
    if (!S_ISREG(st.st_mode) || flock(fd, LOCK_EX | LOCK_NB) == 0)
        return 0;
    int e = errno;
    r->log_made = false; /* another run's: nothing of ours to remove */
    if (e == EWOULDBLOCK) {
        char who[64] = "";
        long holder = flock_holder(fd);
        if (holder > 0)
            snprintf(who, sizeof who, " (pid %ld on this host)", holder);
        return pt_err_set(err, "log '%s' is in use by another running ptrun%s, which holds its "
                               "lock: two runs writing one log would interleave their lines "
                               "(a fresh run would also cut the other's log short); give this "
                               "one another --log", path, who);
    }
    return pt_err_set(err, "cannot lock the log '%s': %s", path, strerror(e));
}

void pt_trainer_log_close(pt_trainer *r)
{
    if (r->log) {
        fclose(r->log);
    } else if (r->log_fd >= 0) {
        if (r->log_made)
            unlink(r->o.log);
        close(r->log_fd);
    }
    r->log = NULL;
    r->log_fd = -1;
}

/* What ran (the plan file and its identity, layout, model with its size, cluster,
 * ranks, batch, steps) and which build ran it. */
int pt_trainer_log_open(pt_trainer *r, pt_err *err)
{
    const pt_plan *p = &r->plan;
    struct stat st;
    /* truncated only now that it is this run's (a regular file: a FIFO has nothing to
     * truncate) */
    if (!r->start_step && fstat(r->log_fd, &st) == 0 && S_ISREG(st.st_mode) &&
        ftruncate(r->log_fd, 0) != 0)
        return pt_err_set(err, "cannot write '%s': %s", r->o.log, strerror(errno));
    if (!(r->log = fdopen(r->log_fd, "a")))
        return pt_err_set(err, "cannot write '%s': %s", r->o.log, strerror(errno));
    r->log_fd = -1; /* the stream's now */
    setvbuf(r->log, NULL, _IOLBF, 0); /* a line at a time: the log can be followed live */
    char id[17], path[4096], layout[1024];
    if (pt_trace_plan_id(r->o.plan, id, err))
        return -1;
    pt_trainer_abs_path(r->o.plan, path, sizeof path);
    pt_layout_format(&p->layout, layout, sizeof layout);
    FILE *f = pt_trainer_log_begin(r, "header", -1);
    log_string(f, "plan", path);
    log_string(f, "plan_id", id);
    log_string(f, "plan_created_by", p->created_by);
    log_string(f, "layout", layout);
    log_string(f, "model", p->model.name);
    const pt_model *m = &p->model;
    fprintf(f, ",\"model_spec\":{\"params\":%lld,\"layers\":%lld,\"hidden\":%lld,"
            "\"heads\":%lld,\"kv_heads\":%lld,\"ffn\":%lld,\"vocab\":%lld,\"seq\":%lld}",
            (long long)pt_model_params_total(m), (long long)m->layers, (long long)m->hidden,
            (long long)m->heads, (long long)m->kv_heads, (long long)m->ffn,
            (long long)m->vocab, (long long)m->seq);
    log_string(f, "cluster", p->cluster.name);
    fprintf(f, ",\"world\":%d,\"steps\":%lld,\"global_batch\":%lld,\"tokens_per_step\":%lld",
            r->world, (long long)p->run.steps, (long long)p->train.global_batch,
            (long long)(p->train.global_batch * m->seq));
    log_string(f, "precision", pt_prec_name(p->train.precision));
    log_string(f, "version", r->o.version);
    log_string(f, "git_revision", r->o.git_revision);
    if (r->o.resuming)
        fprintf(f, ",\"resumed_from_step\":%lld", (long long)r->start_step);
    pt_trainer_log_end(r, f);
    return pt_trainer_log_check(r, err); /* an unwritable log is found before training */
}

/* The outputs of the end of the run, checked before training so that an unwritable
 * trace or cost database is found in the first second, not after the last step. */
static int outputs_writable(pt_trainer *r, pt_err *err)
{
    if (r->rank != 0)
        return 0;
    pt_err why;
    if (r->o.trace && pt_path_writable(r->o.trace, &why))
        return pt_err_set(err, "--trace '%s' cannot be written (%s)", r->o.trace, why.msg);
    if (!r->o.record_db)
        return 0;
    pt_costdb *db = NULL;
    int rc = pt_costdb_open(r->o.record_db, PT_COSTDB_CREATE, &db, err);
    pt_costdb_close(db);
    return rc;
}

int pt_trainer_start(pt_trainer *r, pt_err *err)
{
    if (r->o.log && pt_trainer_log_open(r, err))
        return -1;
    return outputs_writable(r, err);
}

/* ---- Trace and record --------------------------------------------------------------------- */

/* This rank's memory: the planner's figure for its stage, what its model allocated on
 * the backend, and the process's peak resident set (Linux reports ru_maxrss in KiB). */
static pt_run_rank rank_memory(const pt_trainer *r)
{
    pt_memory mem;
    pt_mem_stage(&r->plan.model, &r->plan.layout, &r->plan.train, r->stage, &mem);
    return (pt_run_rank){.rank = r->rank, .stage = r->stage,
                         .predicted_memory_bytes = mem.total_bytes,
                         .measured_memory_bytes = (double)r->net.bytes,
                         .peak_rss_bytes = peak_rss_bytes()};
}

/* The absolute form of path (as given when it cannot be resolved), for the record: a
 * report made elsewhere finds the files. */
void pt_trainer_abs_path(const char *path, char *out, size_t cap)
{
    char cwd[4096];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd) ||
        snprintf(out, cap, "%s/%s", cwd, path) >= (int)cap)
        snprintf(out, cap, "%s", path);
}

/* Gathers every rank's spans and memory to rank 0 (collective: every rank calls it) and
 * merges them there onto rank 0's clock, after the second clock barrier. On rank 0
 * `merged` and `mem` (world entries) are filled; elsewhere they stay empty. */
static int gather_trace(pt_trainer *r, pt_trace *merged, pt_run_rank *mem,
                        pt_err *err)
{
    void *mine = NULL, *all = NULL;
    int64_t n = 0, *sizes = calloc((size_t)r->world, sizeof *sizes);
    pt_run_rank me = rank_memory(r);
    pt_trace_init(merged, false);
    if (!sizes)
        return pt_err_set(err, "out of memory");
    pt_comm_all_ok(r->comm, true);
    pt_trace_sync(&r->trace);
    int rc = pt_trace_pack(&r->trace, &me, &mine, &n, err);
    if (rc == 0)
        rc = pt_comm_gather_bytes(r->comm, mine, n, &all, sizes, err);
    if (rc == 0 && r->rank == 0 && (rc = pt_trace_merge(all, sizes, r->world, merged, mem, err)) == 0) {
        if (pt_trace_plan_id(r->o.plan, merged->plan_id, err))
            rc = -1;
        else
            pt_trainer_abs_path(r->o.plan, merged->plan_path, sizeof merged->plan_path);
    }
    free(mine);
    free(all);
    free(sizes);
    return rc;
}

/* The spans of the schedule's instructions in the last step: the measured timeline the
 * report draws beside the simulator's, which has the same instructions. The ops inside
 * them, collectives included, are summed up by op_stats instead: a layer's tensor-
 * parallel collectives alone grow with layers x micro-batches (tiny at tp = 2 with sp,
 * 4 layers and 8 micro-batches, ran 520 a step on each rank: bench/bench_storage.sh),
 * which would make this table grow with layers x micro-batches x ranks. *out malloc'd
 * (NULL when none). */
static int last_step_spans(const pt_trace *t, pt_span **out, size_t *n, pt_err *err)
{
    int last = -1;
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].step > last)
            last = t->v[i].step;
    for (size_t i = 0; i < t->n; i++)
        *n += t->v[i].step == last && !pt_span_is_op(&t->v[i]);
    if (*n && !(*out = malloc(*n * sizeof **out)))
        return pt_err_set(err, "out of memory for %zu spans", *n);
    size_t k = 0;
    for (size_t i = 0; i < t->n && *out; i++)
        if (t->v[i].step == last && !pt_span_is_op(&t->v[i]))
            (*out)[k++] = t->v[i];
    return 0;
}

/* The load check: whether this run's GEMMs ran as fast as the profile says they do.
 * Fills rec's gemm_ratio and, when they ran slower than PT_NOISY_GEMM_RATIO, rec->noisy. */
static void load_check(const pt_op_sample *smp, size_t n, const char *path, const pt_plan *p,
                       pt_run_record *rec)
{
    pt_costdb *profile;
    pt_cost_hw hw;
    pt_cluster c = p->cluster;
    int keys = 0;
    if (pt_costdb_open(path, PT_COSTDB_READ | PT_COSTDB_PROFILE_ONLY, &profile, NULL))
        return;
    pt_cluster_apply_profile(&c, profile);
    pt_cost_hw_of(&c, &hw);
    rec->gemm_ratio = pt_gemm_ratio(smp, n, profile, &hw, &keys);
    pt_costdb_close(profile);
    double excess = pt_span_excess(smp, n);
    if (excess > PT_NOISY_EXCESS)
        snprintf(rec->noisy, sizeof rec->noisy,
                 "its ops took %.2fx what their medians account for (pre-empted: more than "
                 "%.2fx means the machine was busy)", excess, PT_NOISY_EXCESS);
    else if (rec->gemm_ratio > PT_NOISY_GEMM_RATIO)
        snprintf(rec->noisy, sizeof rec->noisy,
                 "its GEMMs took %.2fx the profiled time (median of %d shapes; more than "
                 "%.2fx means the machine was busier than when it was profiled)",
                 rec->gemm_ratio, keys, PT_NOISY_GEMM_RATIO);
}

/* Appends the run, its ranks' memory, its per-op statistics and its last step's
 * schedule to the cost table and, unless the load check finds it noisy or its backend
 * ran nondeterministic kernels, its op timings as kernel samples (source trace) under
 * its id. */
static int record_run(pt_trainer *r, const pt_trace *merged, const pt_run_rank *mem,
                      pt_trainer_record *out, pt_err *err)
{
    if (r->timed_steps == 0)
        return pt_err_set(err, "--record needs at least two steps to time");
    const pt_plan *p = &r->plan;
    double *d = malloc((size_t)r->timed_steps * sizeof *d);
    if (!d)
        return pt_err_set(err, "out of memory");
    pt_robust steps;
    memcpy(d, r->step_s, (size_t)r->timed_steps * sizeof *d);
    pt_robust_of(d, (size_t)r->timed_steps, &steps);
    free(d);
    /* the median step, and the MFU of that step: one pre-empted step moves neither */
    pt_run_record rec = {.world = r->world, .steps = r->steps_run,
                         .steps_timed = r->timed_steps,
                         .predicted_step_s = p->predicted.step_time_s,
                         .measured_step_s = steps.median_s,
                         .predicted_mfu = p->predicted.mfu,
                         .measured_mfu = r->peak_flops > 0
                                             ? r->model_flops / (steps.median_s * r->peak_flops)
                                             : 0,
                         .predicted_memory_bytes = p->memory.total_bytes};
    for (int i = 0; i < r->world; i++) /* the largest rank, as the plan predicts it */
        if (mem[i].measured_memory_bytes > rec.measured_memory_bytes)
            rec.measured_memory_bytes = mem[i].measured_memory_bytes;
    gethostname(rec.host, sizeof rec.host - 1);
    snprintf(rec.git_revision, sizeof rec.git_revision, "%s", r->o.git_revision);
    snprintf(rec.model, sizeof rec.model, "%s", p->model.name);
    snprintf(rec.cluster, sizeof rec.cluster, "%s", p->cluster.name);
    pt_layout_format(&p->layout, rec.layout, sizeof rec.layout);
    snprintf(rec.plan_id, sizeof rec.plan_id, "%s", merged->plan_id);
    snprintf(rec.plan_path, sizeof rec.plan_path, "%s", merged->plan_path);
    if (r->o.log)
        pt_trainer_abs_path(r->o.log, rec.log_path, sizeof rec.log_path);
    if (r->o.trace)
        pt_trainer_abs_path(r->o.trace, rec.trace_path, sizeof rec.trace_path);
    const char *path = r->o.record_db;
    pt_costdb *db = NULL;
    pt_op_stat *stats = NULL;
    pt_op_sample *smp = NULL;
    size_t n_stats = 0, n_smp = 0;
    int64_t ops = 0, id = 0;
    if (r->log)
        fflush(r->log);
    pt_cost_hw hw;
    pt_cluster c = p->cluster;
    int rc = pt_costdb_open(path, PT_COSTDB_CREATE, &db, err);
    if (rc == 0) {
        pt_cluster_apply_profile(&c, db);
        pt_cost_hw_of(&c, &hw);
        rc = pt_trace_op_stats(merged, &stats, &n_stats, err) ||
                     pt_op_samples(stats, n_stats, &smp, &n_smp, err)
                 ? -1
                 : 0;
    }
    if (rc == 0)
        load_check(smp, n_smp, path, p, &rec);
    /* timings of kernels that the tables do not price (the plan prices the deterministic
     * ones) would move their figures: the run is kept, its samples are not, whatever
     * the load check found */
    if (rc == 0 && r->kn->nondeterministic)
        snprintf(rec.noisy, sizeof rec.noisy,
                 "it ran with nondeterministic kernels (PT_KCUDA_DETERMINISTIC=0), which "
                 "the tables do not price");
    pt_span *spans = NULL;
    size_t n_spans = 0;
    if (rc == 0)
        rc = last_step_spans(merged, &spans, &n_spans, err);
    /* the run and its samples in one transaction: a failure (a full disk) leaves neither */
    if (rc == 0)
        rc = pt_costdb_begin(db, err);
    if (rc == 0)
        rc = pt_costdb_record_run(db, &rec, mem, r->world, stats, n_stats, spans, n_spans,
                                  &id, err);
    free(spans);
    if (rc == 0 && !rec.noisy[0])
        rc = pt_costdb_put_run_samples(db, hw.device, id, smp, n_smp, &ops, err);
    if (rc == 0)
        rc = pt_costdb_commit(db, err);
    else
        pt_costdb_rollback(db, NULL);
    pt_costdb_close(db);
    free(stats);
    free(smp);
    if (rc)
        return rc;
    *out = (pt_trainer_record){.recorded = true, .run_id = id,
                               .measured_step_s = rec.measured_step_s,
                               .predicted_step_s = rec.predicted_step_s,
                               .steps_timed = rec.steps_timed, .world = r->world,
                               .n_stats = n_stats, .n_spans = n_spans, .samples = ops,
                               .gemm_ratio = rec.gemm_ratio};
    snprintf(out->db, sizeof out->db, "%s", path);
    snprintf(out->noisy, sizeof out->noisy, "%s", rec.noisy);
    return 0;
}

int pt_trainer_trace_and_record(pt_trainer *r, pt_trainer_record *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    if (!r->trace.on)
        return 0;
    pt_trace merged;
    pt_run_rank *mem = calloc((size_t)r->world, sizeof *mem);
    int rc = mem ? gather_trace(r, &merged, mem, err) : pt_err_set(err, "out of memory");
    if (rc == 0 && r->rank == 0 && r->o.record_db)
        rc = record_run(r, &merged, mem, out, err);
    if (rc == 0 && r->rank == 0 && r->o.trace) {
        pt_trace_keep_steps(&merged, r->o.trace_steps); /* after the record's statistics */
        rc = pt_trace_write_chrome(&merged, r->o.trace, err);
    }
    if (mem)
        pt_trace_free(&merged);
    free(mem);
    return rc;
}
