/*
 * Span recording and the Chrome trace writer (the Trace Event Format's complete
 * events, "ph": "X", with microsecond timestamps, plus metadata events naming the
 * processes and threads).
 */
#include "trace.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->key, sizeof s->key, "%s", key ? key : "");
    s->rank = rank;
    s->stream = stream;
    s->t0_s = t0 - t->origin_s;
    s->dur_s = t1 - t0;
    s->flops = s->bytes = 0;
    s->dtype = PT_DTYPE_FP32;
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

/* The median duration of spans [i, j) after the first `skip`. */
static double median_of(pt_span *const *v, size_t i, size_t j, int skip, double *tmp)
{
    size_t n = 0;
    for (size_t k = i + (size_t)skip < j ? i + (size_t)skip : i; k < j; k++)
        tmp[n++] = v[k]->dur_s;
    qsort(tmp, n, sizeof *tmp, by_duration);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

int pt_trace_to_costdb(const pt_trace *t, pt_costdb *db, const char *device, pt_source source,
                       int skip, int64_t *stored, pt_err *err)
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
        double time_s = median_of(v, i, j, skip, tmp);
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
    if (e && s->key[0])
        json_object_set_new(e, "args", json_pack("{s:s}", "key", s->key));
    return e;
}

int pt_trace_write_chrome(const pt_trace *t, const char *path, pt_err *err)
{
    json_t *events = json_array();
    int max_rank = -1;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].rank > max_rank)
            max_rank = t->v[i].rank;
    for (int r = 0; r <= max_rank; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank %d", r);
        json_array_append_new(events, meta_event("process_name", r, 0, name));
        json_array_append_new(events, meta_event("thread_name", r, 0, "compute"));
        json_array_append_new(events, meta_event("thread_name", r, 1, "communication"));
    }
    for (size_t i = 0; i < t->n; i++)
        json_array_append_new(events, span_event(&t->v[i]));
    json_t *root = json_pack("{s:o, s:s}", "traceEvents", events, "displayTimeUnit", "ms");
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
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
