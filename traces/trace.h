/*
 * pttrace — what a run did and when: spans of instructions and ops, each with the
 * rank and stream it ran on and, for ops, the planner's op key, so that a measured
 * span meets the predicted figure of the same key. Spans are kept in memory while
 * the run goes and written at the end as a Chrome trace (Perfetto,
 * chrome://tracing), one track per rank and stream.
 */
#ifndef PT_TRACE_H
#define PT_TRACE_H

#include "cost.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char name[48];   /* what ran: "fwd mb3 c0", "q", "attn_bwd", ... */
    char key[128];   /* the op's cost-table key; "" for instructions */
    int rank;
    int stream;      /* 0 compute, 1 communication */
    double t0_s;     /* seconds since the trace started */
    double dur_s;
    double flops, bytes; /* of an op span (its pt_kernel_op), for cost samples */
    pt_dtype dtype;
} pt_span;

typedef struct {
    bool on;         /* a trace that is off records nothing and costs nothing */
    double origin_s; /* monotonic time at start */
    pt_span *v;
    size_t n, cap;
    bool oom;        /* a span was dropped for lack of memory */
} pt_trace;

/* Monotonic seconds. */
double pt_trace_now(void);
void pt_trace_init(pt_trace *t, bool on);
void pt_trace_free(pt_trace *t);
/* Records a span from t0 to t1 (monotonic seconds, as pt_trace_now gives); t may be
 * NULL (no trace). */
void pt_trace_add(pt_trace *t, int rank, int stream, const char *name, const char *key,
                  double t0, double t1);
/* Records an op span: its key, FLOPs, bytes and data type come from `op`. */
void pt_trace_add_op(pt_trace *t, int rank, int stream, const char *name,
                     const pt_kernel_op *op, double t0, double t1);

/* Turns the op spans into kernel samples of `device`: for each key, the median of
 * its spans' durations (after dropping the first `skip` spans of each key, the
 * warm-up), stored with pt_costdb_put_kernel (replacing older samples of the same
 * source). *stored counts the keys written. */
int pt_trace_to_costdb(const pt_trace *t, pt_costdb *db, const char *device, pt_source source,
                       int skip, int64_t *stored, pt_err *err);

/* Writes {"traceEvents": [...]} with one process per rank and one thread per
 * stream; each op span carries its key in args. Temporary file renamed when
 * complete; errors name the path. */
int pt_trace_write_chrome(const pt_trace *t, const char *path, pt_err *err);

#ifdef __cplusplus
}
#endif
#endif
