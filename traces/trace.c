/*
 * Span recording, merging the ranks' spans onto one clock, and the Chrome trace
 * writer and reader (the Trace Event Format's complete events, "ph": "X", with
 * microsecond timestamps, plus metadata events naming the processes and threads;
 * Google, "Trace Event Format", 2016).
 */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The format name merged traces carry in otherData; a reader refuses others. */
#define PT_TRACE_FORMAT "pttrace-1"

double pt_trace_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pt_trace_init(pt_trace *t, bool on)
{
    *t = (pt_trace){.on = on, .origin_s = pt_trace_now()};
}

void pt_trace_free(pt_trace *t)
{
    free(t->v);
    *t = (pt_trace){0};
}

/* A bounded copy without printf's parsing: this runs for every op of every step. */
static void copy_text(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

void pt_trace_sync(pt_trace *t)
{
    if (!t || !t->on)
        return;
    t->sync_s[t->n_sync < 2 ? t->n_sync++ : 1] = pt_trace_now();
}

/* An instruction span is named "<kind> mb<m> c<c>" (must match pt_engine_step in
 * runtime/engine.c and the simulator's spans in planner/sim.c). Its micro-batch and
 * chunk go to it and to the op spans it contains, which were recorded before it (an
 * instruction's span ends after its ops'); so the ops of a span are the ones just
 * before it that started no earlier, and each op is visited once. */
static void adopt_ops(pt_trace *t, pt_span *ins)
{
    int mb, chunk;
    const char *p = strstr(ins->name, " mb");
    if (!p || sscanf(p, " mb%d c%d", &mb, &chunk) != 2)
        return;
    ins->mb = mb;
    ins->chunk = chunk;
    for (size_t i = t->n - 1; i-- > 0;) {
        pt_span *s = &t->v[i];
        if (s->t0_s < ins->t0_s || s->mb >= 0 || s->rank != ins->rank)
            break;
        s->mb = mb;
        s->chunk = chunk;
    }
}

void pt_trace_add(pt_trace *t, int rank, int stream, const char *name, const char *key,
                  double t0, double t1)
{
    if (!t || !t->on)
        return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        pt_span *v = realloc(t->v, cap * sizeof *v);
        if (!v) {
            t->oom = true;
            return;
        }
        t->v = v;
        t->cap = cap;
    }
    pt_span *s = &t->v[t->n++];
    copy_text(s->name, sizeof s->name, name);
    copy_text(s->key, sizeof s->key, key ? key : "");
    s->rank = rank;
    s->stream = stream;
    s->mb = s->chunk = -1;
    s->t0_s = t0 - t->origin_s;
    s->dur_s = t1 - t0;
    s->flops = s->bytes = 0;
    s->dtype = PT_DTYPE_FP32;
    if (!s->key[0])
        adopt_ops(t, s);
}

void pt_trace_add_op(pt_trace *t, int rank, int stream, const char *name,
                     const pt_kernel_op *op, double t0, double t1)
{
    if (!t || !t->on)
        return;
    size_t before = t->n;
    pt_trace_add(t, rank, stream, name, op->key, t0, t1);
    if (t->n > before) {
        t->v[before].flops = op->flops;
        t->v[before].bytes = op->bytes;
        t->v[before].dtype = op->dtype;
    }
}

/* ---- Trace -> cost samples ------------------------------------------------------- */

static int by_key_then_time(const void *a, const void *b)
{
    const pt_span *x = *(const pt_span *const *)a, *y = *(const pt_span *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->t0_s > y->t0_s) - (x->t0_s < y->t0_s);
}

static int by_duration(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median (or mean) duration of spans [i, j) after the first `skip`. */
static double stat_of(pt_span *const *v, size_t i, size_t j, int skip, pt_trace_stat stat,
                      double *tmp)
{
    size_t n = 0;
    double sum = 0;
    for (size_t k = i + (size_t)skip < j ? i + (size_t)skip : i; k < j; k++)
        sum += tmp[n++] = v[k]->dur_s;
    if (stat == PT_TRACE_MEAN)
        return sum / (double)n;
    qsort(tmp, n, sizeof *tmp, by_duration);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

int pt_trace_to_costdb(const pt_trace *t, pt_costdb *db, const char *device, pt_source source,
                       int skip, int64_t *stored, pt_err *err)
{
    return pt_trace_to_costdb_stat(t, db, device, source, skip, PT_TRACE_MEDIAN, stored, err);
}

int pt_trace_to_costdb_stat(const pt_trace *t, pt_costdb *db, const char *device,
                            pt_source source, int skip, pt_trace_stat stat, int64_t *stored,
                            pt_err *err)
{
    *stored = 0;
    pt_span **v = malloc((t->n ? t->n : 1) * sizeof *v);
    double *tmp = malloc((t->n ? t->n : 1) * sizeof *tmp);
    size_t n = 0;
    int rc = 0;
    if (!v || !tmp)
        rc = pt_err_set(err, "out of memory reading %zu spans", t->n);
    for (size_t i = 0; rc == 0 && i < t->n; i++)
        if (t->v[i].key[0] && t->v[i].stream == 0)
            v[n++] = &t->v[i];
    if (rc == 0) {
        qsort(v, n, sizeof *v, by_key_then_time);
        rc = pt_costdb_begin(db, err);
    }
    for (size_t i = 0, j; rc == 0 && i < n; i = j) {
        for (j = i + 1; j < n && strcmp(v[j]->key, v[i]->key) == 0; j++)
            ;
        double time_s = stat_of(v, i, j, skip, stat, tmp);
        pt_kernel_op op = {.dtype = v[i]->dtype, .flops = v[i]->flops, .bytes = v[i]->bytes};
        snprintf(op.key, sizeof op.key, "%s", v[i]->key);
        if (time_s <= 0)
            continue; /* below the clock's resolution: nothing to learn */
        rc = pt_costdb_put_kernel(db, device, &op, time_s, source, err);
        if (rc == 0)
            (*stored)++;
    }
    if (rc == 0)
        rc = pt_costdb_commit(db, err);
    free(v);
    free(tmp);
    return rc;
}

/* ---- Merging the ranks' traces ----------------------------------------------------------- */

/* What one rank sends to rank 0, followed by its spans. */
typedef struct {
    uint32_t magic;      /* PACK_MAGIC: the buffer is a packed trace of this build */
    int32_t n_sync;
    double origin_s, sync_s[2];
    pt_run_rank mem;
    uint64_t n_spans;
} pack_header;

#define PACK_MAGIC 0x70747472u /* "pttr" */

int pt_trace_pack(const pt_trace *t, const pt_run_rank *mem, void **buf, int64_t *n,
                  pt_err *err)
{
    size_t bytes = sizeof(pack_header) + t->n * sizeof(pt_span);
    pack_header h = {.magic = PACK_MAGIC, .n_sync = t->n_sync, .origin_s = t->origin_s,
                     .sync_s = {t->sync_s[0], t->sync_s[1]}, .mem = *mem, .n_spans = t->n};
    char *b = malloc(bytes);
    if (!b)
        return pt_err_set(err, "out of memory packing %zu spans", t->n);
    memcpy(b, &h, sizeof h);
    if (t->n)
        memcpy(b + sizeof h, t->v, t->n * sizeof(pt_span));
    *buf = b;
    *n = (int64_t)bytes;
    return 0;
}

/* The clocks. Every rank times its spans with its own CLOCK_MONOTONIC, whose zero
 * differs between hosts and whose rate differs by a few parts per million. All ranks
 * record the instant they leave a barrier at the start of the run (s0) and again at the
 * end (s1); leaving a barrier happens at nearly the same real time on every rank (within
 * the barrier's exit skew, microseconds over shared memory or InfiniBand). A local time
 * t of rank r is mapped onto rank 0's clock by the straight line through those two
 * pairs of instants, g(t) = S0 + (t - s0) · (S1 - S0) / (s1 - s0), which removes the
 * offset and a constant drift — the linear offset interpolation that trace analysers
 * use (Becker, Rabenseifner, Wolf, Linford, "Scalable timestamp synchronization for
 * event traces of message-passing applications", Parallel Computing 35(12), 2009,
 * sec. 2). With one barrier only the offset is removed. */
static double align(double t, const pack_header *me, const pack_header *r0)
{
    if (me->n_sync < 1 || r0->n_sync < 1)
        return t; /* no reference: a single rank, or a trace without barriers */
    double rate = 1.0;
    if (me->n_sync >= 2 && r0->n_sync >= 2 && me->sync_s[1] > me->sync_s[0])
        rate = (r0->sync_s[1] - r0->sync_s[0]) / (me->sync_s[1] - me->sync_s[0]);
    return r0->sync_s[0] + (t - me->sync_s[0]) * rate;
}

static int by_rank_then_time(const void *a, const void *b)
{
    const pt_span *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->t0_s > y->t0_s) - (x->t0_s < y->t0_s);
}

int pt_trace_merge(const void *all, const int64_t *sizes, int world, pt_trace *out,
                   pt_run_rank *mem, pt_err *err)
{
    pt_trace_init(out, true);
    if (world < 1 || world > PT_TRACE_MAX_RANKS)
        return pt_err_set(err, "cannot merge the traces of %d ranks", world);
    const char *p = all;
    pack_header r0;
    size_t total = 0;
    for (int r = 0; r < world; r++) {
        pack_header h;
        if (sizes[r] < (int64_t)sizeof h)
            return pt_err_set(err, "the trace of rank %d is damaged (%lld bytes)", r,
                              (long long)sizes[r]);
        memcpy(&h, p, sizeof h);
        if (h.magic != PACK_MAGIC || h.n_sync < 0 || h.n_sync > 2 ||
            (int64_t)(sizeof h + h.n_spans * sizeof(pt_span)) != sizes[r])
            return pt_err_set(err, "the trace of rank %d is damaged or from another build", r);
        if (r == 0)
            r0 = h;
        total += h.n_spans;
        p += sizes[r];
    }
    out->v = malloc((total ? total : 1) * sizeof *out->v);
    if (!out->v)
        return pt_err_set(err, "out of memory merging %zu spans", total);
    out->cap = total;
    out->origin_s = r0.origin_s;
    out->world = world;
    p = all;
    for (int r = 0; r < world; r++) {
        pack_header h;
        memcpy(&h, p, sizeof h);
        memcpy(out->v + out->n, p + sizeof h, h.n_spans * sizeof(pt_span));
        for (size_t i = 0; i < h.n_spans; i++) {
            pt_span *s = &out->v[out->n + i];
            double t0 = align(h.origin_s + s->t0_s, &h, &r0);
            double t1 = align(h.origin_s + s->t0_s + s->dur_s, &h, &r0);
            s->t0_s = t0 - r0.origin_s;
            s->dur_s = t1 - t0;
            s->rank = r; /* the rank that sent it, whatever it wrote */
        }
        out->n += h.n_spans;
        if (mem) {
            mem[r] = h.mem;
            mem[r].rank = r;
        }
        p += sizes[r];
    }
    qsort(out->v, out->n, sizeof *out->v, by_rank_then_time);
    return 0;
}

/* ---- Plan identity --------------------------------------------------------------------- */

int pt_trace_plan_id(const char *path, char out[17], pt_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pt_err_set(err, "cannot read plan '%s': %s", path, strerror(errno));
    /* 64-bit FNV-1a (Fowler, Noll, Vo; http://www.isthe.com/chongo/tech/comp/fnv/) */
    uint64_t h = 14695981039346656037ull;
    int c;
    while ((c = getc(f)) != EOF)
        h = (h ^ (unsigned char)c) * 1099511628211ull;
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return pt_err_set(err, "cannot read plan '%s'", path);
    snprintf(out, 17, "%016" PRIx64, h);
    return 0;
}

/* ---- Chrome trace writer ----------------------------------------------------------------- */

static json_t *meta_event(const char *what, int rank, int tid, const char *name)
{
    return json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", what, "ph", "M", "pid", rank,
                     "tid", tid, "args", "name", name);
}

static json_t *span_event(const pt_span *s)
{
    json_t *e = json_pack("{s:s, s:s, s:f, s:f, s:i, s:i}", "name", s->name, "ph", "X", "ts",
                          s->t0_s * 1e6, "dur", s->dur_s * 1e6, "pid", s->rank, "tid",
                          s->stream);
    if (!e)
        return NULL;
    json_t *args = json_object();
    if (s->mb >= 0) {
        json_object_set_new(args, "mb", json_integer(s->mb));
        json_object_set_new(args, "chunk", json_integer(s->chunk));
    }
    if (s->key[0]) {
        json_object_set_new(args, "key", json_string(s->key));
        json_object_set_new(args, "flops", json_real(s->flops));
        json_object_set_new(args, "bytes", json_real(s->bytes));
        json_object_set_new(args, "dtype", json_string(pt_dtype_name(s->dtype)));
    }
    json_object_set_new(e, "args", args);
    return e;
}

int pt_trace_write_chrome(const pt_trace *t, const char *path, pt_err *err)
{
    json_t *events = json_array();
    int max_rank = -1;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].rank > max_rank)
            max_rank = t->v[i].rank;
    if (t->world > max_rank + 1)
        max_rank = t->world - 1;
    for (int r = 0; r <= max_rank; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank %d", r);
        json_array_append_new(events, meta_event("process_name", r, 0, name));
        json_array_append_new(events, meta_event("thread_name", r, 0, "compute"));
        json_array_append_new(events, meta_event("thread_name", r, 1, "communication"));
    }
    for (size_t i = 0; i < t->n; i++)
        json_array_append_new(events, span_event(&t->v[i]));
    json_t *other = json_pack("{s:s, s:s, s:s, s:i, s:I}", "format", PT_TRACE_FORMAT,
                              "plan_id", t->plan_id, "plan", t->plan_path, "world",
                              t->world > 0 ? t->world : max_rank + 1, "spans",
                              (json_int_t)t->n);
    json_t *root = json_pack("{s:o, s:s, s:o}", "traceEvents", events, "displayTimeUnit", "ms",
                             "otherData", other);
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    errno = 0;
    int rc = root ? json_dump_file(root, tmp, JSON_COMPACT) : -1;
    json_decref(root);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -1;
    if (rc) {
        remove(tmp);
        return pt_err_set(err, "cannot write trace '%s': %s", path,
                          errno ? strerror(errno) : "out of memory");
    }
    return 0;
}

/* ---- Chrome trace reader --------------------------------------------------------------- */

/* One "X" event into a span; -1 with err naming the event when a field is wrong. */
static int read_event(const char *path, size_t i, json_t *e, pt_span *s, pt_err *err)
{
    json_t *args = json_object_get(e, "args");
    const char *name = json_string_value(json_object_get(e, "name"));
    json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur");
    json_t *pid = json_object_get(e, "pid"), *tid = json_object_get(e, "tid");
    memset(s, 0, sizeof *s);
    if (!name || !json_is_number(ts) || !json_is_number(dur) || !json_is_integer(pid) ||
        !json_is_integer(tid) || json_integer_value(pid) < 0 ||
        json_integer_value(pid) >= PT_TRACE_MAX_RANKS)
        return pt_err_set(err, "%s: traceEvents[%zu]: a span needs name, ts, dur and a rank "
                               "(pid) in 0..%d", path, i, PT_TRACE_MAX_RANKS - 1);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->rank = (int)json_integer_value(pid);
    s->stream = (int)json_integer_value(tid);
    s->t0_s = json_number_value(ts) * 1e-6;
    s->dur_s = json_number_value(dur) * 1e-6;
    s->mb = s->chunk = -1;
    json_t *mb = json_object_get(args, "mb"), *chunk = json_object_get(args, "chunk");
    if (json_is_integer(mb) && json_is_integer(chunk)) {
        s->mb = (int)json_integer_value(mb);
        s->chunk = (int)json_integer_value(chunk);
    }
    const char *key = json_string_value(json_object_get(args, "key"));
    if (key) {
        const char *dtype = json_string_value(json_object_get(args, "dtype"));
        snprintf(s->key, sizeof s->key, "%s", key);
        s->flops = json_number_value(json_object_get(args, "flops"));
        s->bytes = json_number_value(json_object_get(args, "bytes"));
        if (pt_dtype_parse(dtype ? dtype : "", &s->dtype, NULL))
            return pt_err_set(err, "%s: traceEvents[%zu] ('%s'): unknown dtype '%s'", path, i,
                              name, dtype ? dtype : "");
    }
    return 0;
}

static int read_spans(const char *path, json_t *events, pt_trace *out, pt_err *err)
{
    size_t n = json_array_size(events);
    out->v = malloc((n ? n : 1) * sizeof *out->v);
    if (!out->v)
        return pt_err_set(err, "%s: out of memory for %zu events", path, n);
    out->cap = n;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(events, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (ph && strcmp(ph, "X") == 0 && read_event(path, i, e, &out->v[out->n++], err))
            return -1;
    }
    return 0;
}

int pt_trace_read_chrome(const char *path, pt_trace *out, pt_err *err)
{
    pt_trace_init(out, true);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        FILE *f = fopen(path, "rb");
        if (!f)
            return pt_err_set(err, "cannot read trace '%s': %s", path, strerror(errno));
        fclose(f);
        return pt_err_set(err, "%s:%d:%d: not a complete JSON trace (truncated?): %s", path,
                          je.line, je.column, je.text);
    }
    json_t *other = json_object_get(root, "otherData");
    json_t *events = json_object_get(root, "traceEvents");
    const char *format = json_string_value(json_object_get(other, "format"));
    const char *plan_id = json_string_value(json_object_get(other, "plan_id"));
    const char *plan = json_string_value(json_object_get(other, "plan"));
    json_t *world = json_object_get(other, "world"), *spans = json_object_get(other, "spans");
    int rc = 0;
    if (!json_is_array(events))
        rc = pt_err_set(err, "%s: not a Chrome trace (no traceEvents array)", path);
    else if (!format || strcmp(format, PT_TRACE_FORMAT) != 0)
        rc = pt_err_set(err, "%s: otherData.format is '%s', not '%s': not a trace written by "
                             "ptrun", path, format ? format : "(missing)", PT_TRACE_FORMAT);
    else if (!plan_id || !json_is_integer(world) || !json_is_integer(spans) ||
             json_integer_value(world) < 1 || json_integer_value(world) > PT_TRACE_MAX_RANKS)
        rc = pt_err_set(err, "%s: otherData needs plan_id, world (1..%d) and spans", path,
                        PT_TRACE_MAX_RANKS);
    if (rc == 0) {
        snprintf(out->plan_id, sizeof out->plan_id, "%s", plan_id);
        snprintf(out->plan_path, sizeof out->plan_path, "%s", plan ? plan : "");
        out->world = (int)json_integer_value(world);
        rc = read_spans(path, events, out, err);
    }
    if (rc == 0 && (json_int_t)out->n != json_integer_value(spans))
        rc = pt_err_set(err, "%s: the trace holds %zu spans but announces %lld: it was cut "
                             "short or edited", path, out->n,
                        (long long)json_integer_value(spans));
    for (size_t i = 0; rc == 0 && i < out->n; i++)
        if (out->v[i].rank >= out->world)
            rc = pt_err_set(err, "%s: a span of rank %d in a trace of %d ranks", path,
                            out->v[i].rank, out->world);
    json_decref(root);
    if (rc)
        pt_trace_free(out);
    return rc;
}
