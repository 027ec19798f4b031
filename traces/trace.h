/*
 * pttrace — what a run did and when: spans of instructions and ops, each with the
 * rank and stream it ran on, the micro-batch and model chunk it worked on and, for
 * ops, the planner's op key, so that a measured span meets the predicted figure of
 * the same key. Spans are kept in memory while the run goes; at the end every rank's
 * spans are gathered to rank 0, put on one clock and written as one Chrome trace
 * (Perfetto, chrome://tracing; one track per rank and stream) and into the cost
 * database, and turned into cost samples.
 */
#ifndef PT_TRACE_H
#define PT_TRACE_H

#include "cost.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Spans are pt_span (cost.h), the form the cost database stores them in. While a run
 * goes they are recorded in a compact form instead (a few words a span: its times,
 * micro-batch and chunk, and the index of what ran, each distinct op or instruction kind
 * interned once with its name, key, FLOPs, bytes and data type), so that recording copies
 * and formats nothing; merging (pt_trace_merge) or expanding (pt_trace_expand) turns them
 * into pt_span. */

/* The format name merged traces carry in otherData; a reader refuses others. */
#define PT_TRACE_FORMAT "pttrace-1"

/* The largest world a merged trace holds. */
#define PT_TRACE_MAX_RANKS 4096

struct pt_trace_log; /* the compact spans recorded so far (trace.c) */

typedef struct {
    bool on;         /* a trace that is off records nothing and costs nothing */
    double origin_s; /* monotonic time at start */
    struct pt_trace_log *log; /* recorded, not yet expanded; NULL when none */
    pt_span *v;      /* full spans: merged, read from a file, or expanded */
    size_t n, cap;
    bool oom;        /* a span was dropped for lack of memory */
    double sync_s[2]; /* monotonic times of the barriers the clocks are aligned by */
    int n_sync;
    /* what a merged trace says about itself (written into and read from the file) */
    char plan_id[17];
    char plan_path[512];
    int world;       /* ranks merged; 0 for one rank's own trace */
    int32_t step;    /* the step spans are being recorded in (pt_trace_set_step); -1 before */
    int32_t first_step; /* the run's first step (its warm-up), -1 when none was set */
} pt_trace;

/* Monotonic seconds. */
double pt_trace_now(void);
void pt_trace_init(pt_trace *t, bool on);
void pt_trace_free(pt_trace *t);

/* ---- Recording (once per instruction and op: cheap, no formatting) ------------------- */

/* Records a span from t0 to t1 (monotonic seconds, as pt_trace_now gives); t may be
 * NULL (no trace). A span without a key named "<kind> mb<m> c<c>" is taken for an
 * instruction, as pt_trace_add_ins records it (which is the cheaper call). */
void pt_trace_add(pt_trace *t, int rank, int stream, const char *name, const char *key,
                  double t0, double t1);
/* Records an op span: its key, FLOPs, bytes and data type come from `op`; `index` is
 * its place among the ops of the instruction it runs in (0, 1, ...: the embedding's,
 * each layer's and the head's lists in the order they ran; -1: none). Returns a handle for pt_trace_retime (-1 when
 * nothing was recorded: no trace, or out of memory). */
int64_t pt_trace_add_op(pt_trace *t, int rank, int stream, const char *name,
                        const pt_kernel_op *op, int index, double t0, double t1);
/* Records a collective of an op list (stream 1, no key) at its place `index`, counted
 * as pt_trace_add_op counts. */
void pt_trace_add_coll(pt_trace *t, int rank, const char *name, int index, double t0,
                       double t1);
/* Gives a recorded span new times (monotonic seconds, as pt_trace_now's): how a backend
 * whose ops run asynchronously (CUDA) records a span at launch, keeping its place among
 * the instruction's spans, and sets its device times once they are known (after the
 * step). Handles stay valid until the trace is expanded or packed; a bad handle or
 * t1 < t0 is ignored. */
void pt_trace_retime(pt_trace *t, int64_t span, double t0, double t1);
/* Sets the optimizer step the following spans belong to (the engine calls it as a step
 * starts); the first step set is the run's warm-up step (first_step). */
void pt_trace_set_step(pt_trace *t, int64_t step);
/* Records instruction `ins` (its index in the rank's schedule program) : `kind`
 * ("fwd", "bwd", ...) on micro-batch mb of model chunk `chunk`; it is named
 * "<kind> mb<m> c<c>". The op spans recorded since the instruction began, on the same
 * rank, take its micro-batch, chunk and index, so that every span of a step says which
 * instruction it belongs to, as the simulator's timeline says of its spans
 * (planner/sim.c): predicted and measured meet instruction by instruction. */
void pt_trace_add_ins(pt_trace *t, int rank, int stream, const char *kind, int mb,
                      int chunk, int ins, double t0, double t1);

/* Whether a span is an op's: one with a key (a compute op) or a collective of the
 * communication stream (no key, no micro-batch in its name); false for the schedule's
 * instructions. */
bool pt_span_is_op(const pt_span *s);

/* Turns the spans recorded so far into full spans appended to t->v (times relative to
 * t->origin_s), as the functions below that read t->v need; -1 with err when out of
 * memory. */
int pt_trace_expand(pt_trace *t, pt_err *err);

/* Records the moment every rank leaves a barrier: call right after one (at the start
 * of the run and again before merging), on every rank. Merging aligns the ranks'
 * clocks on these instants. At most two are kept (the first and the last). */
void pt_trace_sync(pt_trace *t);

/* ---- Merging the ranks' traces -------------------------------------------------------- */

/* Packs this rank's recorded spans (compact), sync instants and memory figures into one malloc'd buffer
 * (*buf, *n bytes; the caller frees) to be gathered to rank 0, where pt_trace_merge
 * reads every rank's buffer. Buffers are read by the same build that wrote them. */
int pt_trace_pack(const pt_trace *t, const pt_run_rank *mem, void **buf, int64_t *n,
                  pt_err *err);
/* Merges `world` packed buffers laid end to end in `all` (sizes[r] bytes from rank r)
 * into `out` (initialised here; free with pt_trace_free): every span on rank 0's clock,
 * in rank order and time order within a rank; mem[r] (world entries) receives rank r's
 * memory figures. Errors name the rank whose buffer is damaged. */
int pt_trace_merge(const void *all, const int64_t *sizes, int world, pt_trace *out,
                   pt_run_rank *mem, pt_err *err);

/* The identity of a plan file: 16 hex digits of a 64-bit FNV-1a hash of its bytes.
 * Errors name the path. */
int pt_trace_plan_id(const char *path, char out[17], pt_err *err);

/* Reads a Chrome trace that pt_trace_write_chrome wrote (spans, plan identity, world)
 * into `out`. A file that is not JSON, was cut short or lacks the spans it announces is
 * an error naming the path (and for JSON errors the line and column). */
int pt_trace_read_chrome(const char *path, pt_trace *out, pt_err *err);

/* The statistics of every op of every rank (t->v: expand a recorded trace first): per
 * rank, stream, key and name, the robust summary (pt_robust_of) of its spans' durations
 * after the warm-up (the spans of the run's first step, t->first_step; without steps,
 * the first span of each op). Compute ops have a key; collectives are the communication
 * stream's spans without one; the schedule's instructions are left out. *out malloc'd. */
int pt_trace_op_stats(const pt_trace *t, pt_op_stat **out, size_t *n, pt_err *err);
/* Stores the op spans' samples (pt_op_samples of pt_trace_op_stats: the median of every
 * key over the ranks) as kernel samples of `device` and `source`, replacing older ones
 * of that source without a run (ptprofile's); *stored counts the keys written. */
int pt_trace_to_costdb(const pt_trace *t, pt_costdb *db, const char *device, pt_source source,
                       int64_t *stored, pt_err *err);
/* Keeps only the spans of the last `steps` steps (what --trace-steps writes). */
void pt_trace_keep_steps(pt_trace *t, int64_t steps);

/* Writes {"traceEvents": [...], "otherData": {...}} with one process per rank and one
 * thread per stream; a span's args carry its key, micro-batch, chunk, FLOPs, bytes and
 * data type, and otherData the plan identity, world and span count (what
 * pt_trace_read_chrome checks). Temporary file renamed when complete; errors name the
 * path. */
int pt_trace_write_chrome(const pt_trace *t, const char *path, pt_err *err);

#ifdef __cplusplus
}
#endif
#endif
