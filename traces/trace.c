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
