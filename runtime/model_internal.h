/*
 * Internal to runtime/: the activation slots and gradient scratch of a model, shared
 * by model.c (which allocates parameters) and layer.c (which executes the op lists),
 * and the device timers of its op spans (devtime.c).
 */
#ifndef PT_RT_MODEL_INTERNAL_H
#define PT_RT_MODEL_INTERNAL_H

#include "runtime.h"

#include <string.h>

/* What one transformer layer keeps of a micro-batch. T = b·s_r tokens pass through
 * the layer on this rank (s_r = s/cp); R of them are this rank's rows of the
 * residual stream: T, or T/t with sequence parallelism (rows [tp_rank·R, +R)).
 * With full recomputation every layer's views point at one shared set, rebuilt in
 * backward. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (R, h) [act], (R), (R) */
    float *q, *k, *v;                 /* (b, s_r, a/t, d), (b, s_r, k/t, d) x2 [act] */
    float *att, *lse;                 /* (T, a/t, d) [act]; (b, a/t, s_r), or with cp
                                         (2, b, a/t, s_r/2): per sequence chunk (with cp
                                         the T rows are chunk by chunk, (2, b, s_r/2)) */
    float *x2;                        /* (R, h) [act] residual stream after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *gate, *up, *act;           /* (T, f/t) [act] each; gate only with SwiGLU */
} pt_layer_acts;

/* One activation slot: what one model chunk keeps of one micro-batch between its
 * forward and its backward (the memory model's unit, a (micro-batch, chunk) in flight).
 * The engine hands slots out from a pool as a chunk's forward (or the receive of its
 * input) starts and takes them back when its backward ends. */
struct pt_acts {
    void *mem;                        /* one backend allocation for all of the below */
    int32_t *tokens, *targets;        /* (T) in backend memory */
    float **x;                        /* [chunk_layers + 1] (R, h) [act] the chunk's input
                                         and each of its layers' outputs */
    pt_layer_acts *layer;             /* [chunk_layers] */
    int64_t step, first_sample;       /* the micro-batch in the slot (dropout's keys) */
    int mb;                           /* its index in the step (the head's slot) */
    bool train;                       /* dropout applies */
};

/* What the head keeps of one micro-batch on the last stage, from its forward to its
 * backward: a pool of its own, as many as the schedule has last-chunk micro-batches in
 * flight (one under 1F1B, every micro-batch under all-forward-all-backward). */
typedef struct {
    void *mem;
    float *lnf, *lnf_mean, *lnf_rstd; /* final norm, (R, h) */
    float *logits;                    /* (T, v/t) [act]; dlogits after a training forward */
    float *losses;                    /* (T) fp32 */
    float *vmask;                     /* (v/t) [act] the logits' bias: -inf on the padded
                                         vocabulary, else 0; NULL without padding */
} pt_head_acts;

/* Gradient scratch, reused by every layer and micro-batch. */
typedef struct {
    void *mem;
    float *dres;                      /* (R, h) gradient of the residual stream */
    float *dln;                       /* (T, h) gradient of a norm's output (partial
                                         over tp until reduced) */
    float *dlns;                      /* (R, h) its reduced rows (sp) */
    float *gath;                      /* (T, h) a norm output gathered over tp (sp) */
    float *gdres;                     /* (T, h) dres gathered over tp (sp) */
    float *rout;                      /* (T, h) a row-parallel output before its
                                         reduce-scatter (sp) */
    float *ddrop;                     /* (T, h) a dropped branch's gradient */
    float *dq, *dk, *dv, *dqr, *dkr;  /* attention inputs, before and after RoPE */
    float *datt;                      /* (T, h/t) */
    float *dgate, *dup, *dact;        /* (T, f/t) */
    float *ce;                        /* (3, T) fp32: vocab-parallel loss statistics */
    float *dnorm;                     /* (2, h) fp32: a norm's weight gradients (sp) */
    float *dkv;                       /* (k, d·(h+1)) fp32: every KV head's weight and
                                         bias gradients, when tp > k */
    float *ring[2];                   /* cp: K, V, dK, dV of a travelling block, each
                                         (b, s_r, k/t, d) [act]; two to swap */
    float *part, *part_lse;           /* cp: one block's (b, s_r/2, a/t, d) [act] and
                                         (b, a/t, s_r/2) fp32 result before combining */
} pt_scratch;

/* ZeRO 2 and 3 (runtime/zero.c): shards of every segment (layer, embedding, head)
 * of the parameter buffer over the dp·cp group, a window for one layer's gradients
 * (and with stage 3 one for its gathered weights), and whole copies of the weights
 * kept whole. */
typedef struct pt_zero pt_zero;
/* count host fp32 weights into backend [act] memory dst: copied, or rounded to bf16
 * (waits until the host copy may go). Errors: out of memory. */
int pt_net_upload_weights(pt_kernels *kn, void *dst, const float *src, int64_t count,
                          pt_err *err);
/* Shards `init` (n_elems host floats) and allocates the windows; sets n->master,
 * grad, m and v to shard arrays of opt_elems floats and n->w to NULL. */
/* Gradient compression (runtime/compress.c), with the layout's compress over dp·cp >
 * 1 (ZeRO 0/1): pt_gc_init allocates its buffers after the model states (pt_net.gc
 * stays NULL without compression; bucket_elems: the plan's bucket in fp32 elements),
 * pt_gc_free frees them.
 * bf16 (pt_gc_on): a bucket's collective starts with pt_gc_allreduce_start (ZeRO 0:
 * gradient elements [lo, lo + count)) or pt_gc_rs_start (ZeRO 1: bucket z into this
 * rank's share) and, once waited for, its result is widened into the fp32 gradients
 * (ZeRO 0) or rs_shard (ZeRO 1) by the matching _done.
 * powersgd (pt_gc_powersgd_at: from the layout's powersgd_start on): the engine hands
 * a chunk's reduction over: pt_gc_ready as the backward makes elements [lo, chunk end)
 * final, pt_gc_finish at its REDUCE_GRADS (reduced gradients in n->grad, with ZeRO 1
 * this rank's shares in rs_shard). */
int pt_gc_init(pt_net *n, int dp_rank, int dp_size, int64_t bucket_elems, pt_err *err);
void pt_gc_free(pt_net *n);
bool pt_gc_on(const pt_net *n);
int pt_gc_allreduce_start(pt_net *n, pt_comm *comm, int64_t lo, int64_t count,
                          pt_comm_req **req, pt_err *err);
void pt_gc_allreduce_done(pt_net *n, int64_t lo, int64_t count);
int pt_gc_rs_start(pt_net *n, pt_comm *comm, const pt_zero1_bucket *z, pt_comm_req **req,
                   pt_err *err);
void pt_gc_rs_done(pt_net *n, const pt_zero1_bucket *z);
bool pt_gc_powersgd_at(const pt_net *n, int64_t step);
int pt_gc_ready(pt_net *n, pt_comm *comm, int chunk, int64_t lo, pt_err *err);
int pt_gc_finish(pt_net *n, pt_comm *comm, int chunk, pt_err *err);
/* PowerSGD's state, which checkpoints keep: this rank's errors and its Q matrices
 * (fp32, flat). pt_gc_state_sizes: false without PowerSGD, else their element counts.
 * pt_gc_state_get copies them to host memory and says whether Q holds a warm start
 * (a compressed step has run); pt_gc_state_set puts them back (errors NULL: zero; q
 * NULL or !q_ready: Q is drawn afresh at the next compressed step). */
bool pt_gc_state_sizes(const pt_net *n, int64_t *errors, int64_t *q);
bool pt_gc_state_get(const pt_net *n, float *errors, float *q);
void pt_gc_state_set(pt_net *n, const float *errors, const float *q, bool q_ready);
/* Element i of a standard normal stream keyed by (seed, key) (model.c's initialiser). */
float pt_net_normal(uint64_t seed, const char *key, int64_t i);

int pt_zero_init(pt_net *n, int stage, int dp_rank, int dp_size, const float *init,
                 pt_err *err);
void pt_zero_free(pt_net *n);
/* Whole master weights (n_elems host floats) from or into the shards; getting is
 * collective over the dp·cp group. */
int pt_zero_get_master(pt_net *n, float *whole, pt_err *err);
int pt_zero_set_master(pt_net *n, const float *whole, pt_err *err);
/* The op list's zero3_allgather and zero_reducescatter of a layer; a layer's
 * backward opens its gradient window first. */
/* Gathers layer's weights into a window (waiting for its prefetch when one was
 * started) and starts gathering next's (-1: none) into the other window. */
int pt_zero_gather_layer(pt_net *n, int64_t layer, int64_t next, pt_err *err);
int pt_zero_begin_backward(pt_net *n, int64_t layer, pt_err *err);
/* Starts the reduce-scatter of layer's gradient window; begin_backward of a later
 * layer waits for the one before last (two windows), the step for all. */
int pt_zero_reduce_layer(pt_net *n, int64_t layer, pt_err *err);
/* Where parameter p's weights and gradient are now: in the window (NULL when its
 * layer is not gathered, or not in its backward) or in the whole copies. */
float *pt_zero_weight(pt_net *n, const pt_param *p);
float *pt_zero_grad(pt_net *n, const pt_param *p);
/* The optimizer's view: segment s's shard on this rank covers flat elements
 * [lo, hi); master, grad, m and v point at element lo. */
typedef struct {
    int64_t lo, hi;
    float *master, *grad, *m, *v;
} pt_zero_shard;
int pt_zero_segments(const pt_net *n);
pt_zero_shard pt_zero_shard_of(pt_net *n, int s);
/* At the optimizer step: the embedding's and head's gradients reduce-scattered into
 * their shards; after the update, the shards of every segment whose weights are kept
 * whole gathered back into the copies. */
int pt_zero_reduce_whole(pt_net *n, pt_err *err);
/* Completes the collectives the layers left in flight (the last gradient windows'
 * reduce-scatters); the step's end calls it before it reads the shards. */
int pt_zero_drain(pt_net *n, pt_err *err);
int pt_zero_gather_whole(pt_net *n, pt_err *err);

int pt_net_alloc_runtime(pt_net *n, const pt_plan *p, int slots, pt_err *err);
void pt_net_free_runtime(pt_net *n);

/* Device times of op spans (runtime/devtime.c; pt_net_trace_resolve in runtime.h).
 * init sets n->devtime when the trace is on, PT_TRACE_SYNC is not, and the backend has
 * device timers; free releases it. Around each compute op, when n->devtime is set:
 * before (the first op after a resolve also waits for the stream and records the
 * anchor) records the op's start event; after records its end event and keeps `span`
 * (pt_trace_add_op's handle) pending. 0, or -1 with err set. */
int pt_devtime_init(pt_net *n, pt_err *err);
void pt_devtime_free(pt_net *n);
int pt_devtime_before(pt_net *n, pt_err *err);
int pt_devtime_after(pt_net *n, int64_t span, pt_err *err);

/* Whether s ends with suffix (parameter and op names). */
static inline bool pt_ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

#endif
