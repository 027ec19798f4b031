/*
 * Internal to runtime/: what the files of a rank's model share, from the bottom up.
 * The parameters and their state (param_table.c); ZeRO 2/3's shards of them (zero.c)
 * and the gradient compression of their reduction (compress.c); the activation slots,
 * the head's buffers and the gradient scratch of a micro-batch and where they live
 * (tensors.c), which layer.c, attention.c and chunk.c compute on; the model assembled
 * from all of these (net.c); and the device timers of op spans (devtime.c).
 */
#ifndef PT_RT_MODEL_INTERNAL_H
#define PT_RT_MODEL_INTERNAL_H

#include "runtime.h"

#include <string.h>

/* ---- A rank's model (runtime.h: pt_net) ------------------------------------------------ */

/* One gradient bucket of ZeRO 1 (Megatron-Core's distributed optimizer: each bucket
 * padded to a multiple of dp and reduce-scattered on its own, every rank owning one
 * share of each, so the reduction overlaps the backward as DDP's all-reduces do). */
typedef struct pt_zero1_bucket {
    int chunk;
    bool at_step;             /* the tied embedding's copy: reduced at the optimizer step */
    bool experts;             /* a chunk's experts' bucket, shared over the expert-data-
                                 parallel group (reduced at REDUCE_GRADS after the rest) */
    int group;                /* the group it is shared over: PT_GROUP_DPCP or _EDP */
    int ranks, rank;          /* that group's size and this rank's place in it */
    int64_t lo, hi;           /* gradient elements [lo, hi) */
    int64_t share;            /* elements each rank owns: ceil((hi - lo) / ranks); rank r
                                 owns [lo + r·share, lo + (r+1)·share) ∩ [lo, hi) */
    int64_t full_at;          /* where the padded copy (share·ranks) sits in rs_full */
    int64_t shard_at;         /* where this rank's share sits in rs_shard, m and v */
} pt_zero1_bucket;

/* The tensor a current-scaling state's scale was last taken from (runtime/fp8.c's
 * cast): src (rows, cols), read by the micro-batch in activation slot `slot` (NULL for
 * a weight, which no step changes between its forward and its backward). */
typedef struct {
    const float *src;
    const void *slot;
    int64_t rows;
    int cols;
} pt_fp8_memo;

/* Activations one micro-batch keeps for its backward pass (one "slot"). */
typedef struct pt_acts pt_acts;

/* The op lists of a micro-batch that a model runs (pt_net.ops), built by net.c from the
 * planner's pt_ops_layer, pt_ops_embed and pt_ops_head; a mixture of experts' layers
 * run lists of their own (MOE_FWD, MOE_BWD; empty in a dense model). */
typedef enum { PT_NET_LAYER_FWD, PT_NET_LAYER_BWD, PT_NET_EMBED_FWD, PT_NET_EMBED_BWD,
               PT_NET_HEAD_FWD, PT_NET_HEAD_BWD, PT_NET_MOE_FWD, PT_NET_MOE_BWD,
               PT_NET_LISTS } pt_net_list;

/* One rank's part of the model (opaque in runtime.h): built by net.c, in place by
 * pt_net_build or allocated by pt_net_init_at. */
struct pt_net {
    pt_model spec;
    pt_layout layout;
    pt_kernels *kn;
    pt_trace *trace;          /* may be off */
    bool trace_sync;          /* PT_TRACE_SYNC=1: wait for the device around each op, so
                               * a span is its host time around the device's work (the
                               * device timers are then not used) */
    struct pt_devtime *devtime; /* op spans waiting for their device times (runtime/
                                 devtime.c): with the trace on, on a backend with
                                 device timers; NULL otherwise */
    int rank;                 /* for trace spans */
    int op_seq;               /* the next op span's place in its instruction (the engine
                                 resets it as each instruction starts) */
    int stage;                /* pipeline stage of this rank */
    int tp_rank, cp_rank;     /* place in the tensor- and context-parallel groups */
    int ep_rank, edp_rank;    /* ... in the expert-parallel and expert-data-parallel ones */
    int etp_rank;             /* ... and the expert-tensor-parallel one */
    pt_comm *comm;            /* tp/cp collectives and the cp ring; NULL on one rank */
    int cp_next, cp_prev;     /* world ranks after and before this one in the cp ring */
    float dropout;            /* probability on the embedding and residual branches */
    uint64_t seed;            /* the run's seed: keys initialisation and dropout */
    int64_t chunk_layers[PT_CHUNK_MAX]; /* layers of each model chunk (pt_stage_layers: L /
                                 (pp·vp) when even; with a pipeline layout chunks differ,
                                 and one may hold none) */
    int64_t chunk_li[PT_CHUNK_MAX];    /* this rank's index (0 .. n_layers-1) of each chunk's
                                 first layer: the sum of the chunks' before it */
    int64_t slot_layers;      /* layers of the largest chunk: an activation slot's */
    int64_t n_layers;         /* layers on this rank, over all its chunks */
    int64_t chunk_first[PT_CHUNK_MAX]; /* model index of each chunk's first layer */
    int64_t chunk_begin[PT_CHUNK_MAX], chunk_end[PT_CHUNK_MAX]; /* parameter elements of each chunk: its
                                 layers, with the embedding on virtual stage 0 and the
                                 final norm and head on the last virtual stage */
    int64_t experts_end[PT_CHUNK_MAX]; /* a mixture of experts: the chunk's experts lie
                                 first, [chunk_begin, experts_end), reduced over the
                                 expert-data-parallel group; the rest over dp·cp
                                 (experts_end == chunk_begin: none) */

    pt_param *param;
    int n_param;
    int64_t n_elems;          /* parameters on this rank */
    float *w;                 /* (n_elems) [act] every parameter, one buffer */
    float *grad;              /* (n_elems) fp32 */
    float *m, *v;             /* (opt_elems) fp32 Adam moments: of every element, or
                                 with ZeRO 1 of this rank's share of every bucket in
                                 turn, or with ZeRO 2/3 of its segment shards */
    int64_t opt_elems;        /* the optimizer's share: every element; with ZeRO 1 the
                                 sum of this rank's bucket shares (z1); with ZeRO 2/3
                                 its segment shards (zero.c) */
    float *master;            /* (n_elems) fp32 master weights; == w on fp32 backends */
    int64_t opt_ranks;        /* ranks the optimizer state is sharded over (1: none) */
    int64_t reduce_lo[PT_CHUNK_MAX], reduce_hi[PT_CHUNK_MAX]; /* the elements of each chunk its gradient
                                 buckets reduce during the backward: the chunk's, but
                                 with ZeRO 1 a tied embedding's copy (first and last
                                 stage), which the optimizer step reduces after its
                                 sum over the two stages */
    struct pt_zero1_bucket *z1; /* ZeRO 1 over dp > 1: every gradient bucket, chunk by
                                 chunk, each from the chunk's end down (engine.c's
                                 order), then the tied copy's, then each chunk's experts'
                                 (over their own group); n_z1 of them */
    int n_z1;
    int64_t rs_full_elems;    /* ZeRO 1: the buckets' padded copies, all of them */
    float *rs_full, *rs_shard; /* ZeRO 1: the buckets' padded copies, each
                                 reduce-scattered as the backward finishes it
                                 (rs_full), and this rank's reduced shares of them
                                 (opt_elems floats, rs_shard); allocated with the
                                 model */

    double *gsq;              /* (2) backend memory: the step's gradient sum of squares,
                                 summed over the ranks on the device (engine.c), and
                                 lsum */
    double *lsum;             /* (1) backend memory: token losses summed (gsq + 1) */
    pt_k_adamw_tensor *adam;  /* [adam_cap] the optimizer's tensor list (host) */
    int adam_cap;

    struct pt_compress_state *compress; /* gradient compression of the ZeRO 0/1 buckets
                                 (runtime/compress.c); NULL without */
    struct pt_moe *moe;       /* a mixture of experts' routing tables and figures
                                 (runtime/moe.c); NULL in a dense model */
    struct pt_zero *zero;     /* ZeRO 2/3's shards and windows (runtime/zero.c), with
                                 dp·cp > 1; NULL otherwise. With it, master, grad, m
                                 and v are shard arrays of opt_elems floats and w is
                                 NULL */

    pt_acts **slot;           /* activation slots: one (micro-batch, chunk) each */
    int n_slots;
    int *slot_map;            /* [n_micro·vp] the slot of (mb, chunk) in flight, or -1 */
    bool *slot_busy;          /* [n_slots] */
    void **head;              /* the head's buffers (pt_head_acts), last stage only */
    int n_head;
    void *scratch;            /* gradient scratch shared by all layers */
    pt_fp8 fp8;               /* the plan's FP8 setting (recipe off: none) */
    float *fp8_meta;          /* FP8 scaling state of every (layer, linear layer,
                                 operand) on this rank, fp8_stride floats each
                                 (runtime/fp8.c); NULL without FP8 */
    int fp8_stride;
    pt_fp8_memo *fp8_memo;    /* per scaling state: the tensor its current-scaling scale
                                 was last taken from (runtime/fp8.c); NULL otherwise */
    float *fp8_check;         /* PT_FP8_CHECK_SCALES=1: a scaling state where each scale
                                 taken without reading its tensor is taken again from
                                 it, to compare; else NULL */
    int64_t fp8_elems;        /* elements quantized since the last pt_fp8_step_stats */
    int64_t fp8_amax_elems;   /* ... and read for an amax before their cast */

    int64_t bytes;            /* backend memory this model allocated: what the planner's
                                 memory model predicts for the rank */
    pt_oplist ops[PT_NET_LISTS]; /* the planner's op lists of a micro-batch this model
                                 executes, by pt_net_list */
    pt_oplist ops_sync[PT_CHUNK_MAX]; /* each chunk's gradient buckets (pt_ops_grad_sync),
                                 run by the engine at its REDUCE_GRADS */
    pt_oplist ops_step;       /* the step's end (pt_ops_optimizer), run at OPTIM_STEP */
    const pt_param **pref;    /* [(n_layers + 1)·PT_PARAM_COUNT·2]: the weight and bias
                                 of each pt_param_ref of each layer on this rank (its
                                 index in n_layers), then of the parts outside layers;
                                 NULL where there is none. Resolved once by name when
                                 the runtime is allocated; the ops index it. The experts'
                                 refs differ: their first local expert's tensors
                                 (tensors.c's resolve_experts) */

    /* Optional (NULL: not called): pt_net_backward_chunk calls it as the chunk's
     * gradient becomes final for this micro-batch — after the head's backward, each
     * layer's and the embedding's — with `lo`, the lowest element this backward no
     * longer changes (elements [lo, chunk_end[chunk]) are done). The engine sets it
     * around a chunk's last backward of the step to start gradient buckets. Returns
     * 0, or -1 with err set, which fails the backward. */
    int (*grad_done)(void *ctx, int chunk, int64_t lo, pt_err *err);
    void *grad_done_ctx;
};

/* pt_net_init_at in place, for a model that lives inside another structure (the
 * trainer's); pt_net_release frees what it holds from any state pt_net_build leaves,
 * but not n. */
int pt_net_build(pt_net *n, const pt_plan *p, pt_kernels *kn, const pt_net_place *at,
                 int slots, uint64_t seed, pt_trace *trace, pt_err *err);
void pt_net_release(pt_net *n);

/* ---- The parameters and their state (runtime/param_table.c) ----------------------------- */

/* This rank's parameter table (n->param, n_param, n_elems; each chunk's element range,
 * chunk_begin and chunk_end) from the model, the layout and the chunks' layers
 * (chunk_layers, chunk_first), checked against the planner's count. */
int pt_net_build_table(pt_net *n, pt_err *err);
/* The initial value of every parameter element on this rank, into *out (n_elems host
 * floats, malloc'd; NULL on error), keyed by the seed, each parameter's name and each
 * element's index in the whole tensor. */
int pt_net_init_values(const pt_net *n, uint64_t seed, float **out, pt_err *err);
/* Element i of a standard normal stream keyed by (seed, key) (the initialiser's). */
float pt_net_normal(uint64_t seed, const char *key, int64_t i);
/* The elements each chunk's gradient buckets reduce (n->reduce_lo, reduce_hi), and
 * with ZeRO 1 the tied embedding's copy they leave to the optimizer step, [*tied_lo,
 * *tied_hi) (else an empty range). */
int pt_net_reduce_ranges(pt_net *n, int64_t *tied_lo, int64_t *tied_hi, pt_err *err);
/* The model states without ZeRO 2/3: fp32 master weights (the weights themselves on an
 * fp32 backend, else beside a bf16 copy), gradients, and the Adam moments of every
 * element or, with ZeRO 1 over at->dp_size > 1 ranks, of this rank's share of each
 * gradient bucket (n->z1, with the reduce-scatter buffers rs_full and rs_shard).
 * pt_net_free_state frees them, the buckets and the parameter table (what ZeRO 2/3
 * allocated instead is pt_zero_free's). */
int pt_net_alloc_state(pt_net *n, const pt_plan *p, const pt_net_place *at, int64_t tied_lo,
                       int64_t tied_hi, pt_err *err);
void pt_net_free_state(pt_net *n);
/* count host fp32 weights into backend [act] memory dst: copied, or rounded to bf16
 * (waits until the host copy may go). Errors: out of memory. */
int pt_net_upload_weights(pt_kernels *kn, void *dst, const float *src, int64_t count,
                          pt_err *err);
/* n_elems host fp32 weights into the master weights and, on a bf16 backend, the
 * compute copy n->w; waits for the device. */
int pt_net_upload_master(pt_net *n, const float *host, pt_err *err);

/* ---- Mixtures of experts (runtime/moe.c) -------------------------------------------------- */

/* pt_moe_init sets n->moe for a model with experts (nothing for a dense one): the host's
 * routing tables, sized for the rank's layers; pt_moe_free frees them. */
int pt_moe_init(pt_net *n, pt_err *err);
void pt_moe_free(pt_net *n);
/* The routing counts a MoE layer keeps per micro-batch slot for its backward (the ep
 * group's ep·E, then the etp group's etp·E/ep): pt_acts.moe_counts holds this many a
 * layer. 0 for a dense model. */
int64_t pt_moe_layer_counts(const pt_net *n);
/* What the experts did since the last call, on this rank (training forwards only, not
 * recomputed ones); the figures then start again. */
typedef struct {
    double aux;            /* the load-balancing loss summed over sequences and layers */
    double dropped;        /* copies a capacity factor dropped */
    double assigned;       /* copies the routers made (tokens times k, summed) */
    double imbalance;      /* the busiest ep rank's rows over the mean, summed */
    double expert_max;     /* the busiest expert's rows over the mean, summed */
    double events;         /* (layer, micro-batch) pairs the two sums are over */
} pt_moe_stats;
void pt_moe_take_stats(pt_net *n, pt_moe_stats *out);

/* ---- FP8 (runtime/fp8.c) ----------------------------------------------------------------- */

/* Takes the plan's FP8 setting into n->fp8 and, when on, allocates and initialises the
 * scaling state of n's layers (its bytes added to n->bytes). Errors: a recipe ptrun
 * does not run, a backend without FP8 kernels, out of memory. pt_fp8_free frees it. */
int pt_fp8_init(pt_net *n, const pt_fp8 *f, pt_err *err);
void pt_fp8_free(pt_net *n);

/* Delayed scaling's state (every tensor's scale and amax history on this rank), which a
 * checkpoint keeps so that a resumed run goes on as the uninterrupted one:
 * pt_fp8_state_floats is its size (0 without delayed scaling); get copies it into host,
 * set copies host back, or with host NULL starts it afresh. Both wait for the backend. */
int64_t pt_fp8_state_floats(const pt_net *n);
int pt_fp8_state_get(pt_net *n, float *host, pt_err *err);
int pt_fp8_state_set(pt_net *n, const float *host, pt_err *err);

/* This rank's FP8 figures since the last call: the range of the scales in use, the
 * elements saturated and flushed to zero, and the elements quantized; the counts then
 * start again. Waits for the backend. */
typedef struct {
    double scale_min, scale_max; /* 0 both when no FP8 tensor has been quantized */
    double overflow, underflow;
    int64_t elems, amax_elems; /* quantized; read for an amax first */
} pt_fp8_stats;
int pt_fp8_step_stats(pt_net *n, pt_fp8_stats *out, pt_err *err);

/* ---- ZeRO 2 and 3 (runtime/zero.c) -------------------------------------------------------- */

/* Shards of every segment (layer, embedding, head) of the parameter buffer over the
 * dp·cp group, a window for one layer's gradients (and with stage 3 one for its
 * gathered weights), and whole copies of the weights kept whole. */
typedef struct pt_zero pt_zero;
/* Shards `init` (n_elems host floats) and allocates the windows; sets n->master,
 * grad, m and v to shard arrays of opt_elems floats and n->w to NULL. pt_zero_free
 * frees them (n->zero NULL again). */
int pt_zero_init(pt_net *n, int stage, int dp_rank, int dp_size, const float *init,
                 pt_err *err);
void pt_zero_free(pt_net *n);
/* Whole master weights (n_elems host floats) from or into the shards; getting is
 * collective over the dp·cp group. */
int pt_zero_get_master(pt_net *n, float *whole, pt_err *err);
int pt_zero_set_master(pt_net *n, const float *whole, pt_err *err);
/* The op list's zero3_allgather and zero_reducescatter of a layer; a layer's
 * backward opens its gradient window first (begin_backward).
 * Gathers layer's weights into a window (waiting for its prefetch when one was
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

/* ---- Gradient compression (runtime/compress.c) -------------------------------------------- */

/* With the layout's compress over dp·cp > 1 (ZeRO 0/1): pt_compress_init allocates
 * its buffers after the model states (pt_net.compress stays NULL without compression;
 * bucket_elems: the plan's bucket in fp32 elements), pt_compress_free frees them.
 * bf16 (pt_compress_bf16_on): a bucket's collective starts with
 * pt_compress_allreduce_start (ZeRO 0: gradient elements [lo, lo + count)) or
 * pt_compress_rs_start (ZeRO 1: bucket z into this rank's share) and, once waited for,
 * its result is widened into the fp32 gradients (ZeRO 0) or rs_shard (ZeRO 1) by the
 * matching _done.
 * powersgd (pt_compress_powersgd_at: from the layout's powersgd_start on): the engine
 * hands a chunk's reduction over: pt_compress_ready as the backward makes elements
 * [lo, chunk end) final, pt_compress_finish at its REDUCE_GRADS (reduced gradients in
 * n->grad, with ZeRO 1 this rank's shares in rs_shard). */
int pt_compress_init(pt_net *n, int dp_rank, int dp_size, int64_t bucket_elems, pt_err *err);
void pt_compress_free(pt_net *n);
bool pt_compress_bf16_on(const pt_net *n);
int pt_compress_allreduce_start(pt_net *n, pt_comm *comm, int64_t lo, int64_t count,
                                pt_comm_req **req, pt_err *err);
void pt_compress_allreduce_done(pt_net *n, int64_t lo, int64_t count);
int pt_compress_rs_start(pt_net *n, pt_comm *comm, const pt_zero1_bucket *z,
                         pt_comm_req **req, pt_err *err);
void pt_compress_rs_done(pt_net *n, const pt_zero1_bucket *z);
bool pt_compress_powersgd_at(const pt_net *n, int64_t step);
int pt_compress_ready(pt_net *n, pt_comm *comm, int chunk, int64_t lo, pt_err *err);
int pt_compress_finish(pt_net *n, pt_comm *comm, int chunk, pt_err *err);
/* PowerSGD's state, which checkpoints keep: this rank's errors and its Q matrices
 * (fp32, flat). pt_compress_state_sizes: false without PowerSGD, else their element
 * counts. pt_compress_state_get copies them to host memory and says whether Q holds a
 * warm start (a compressed step has run); pt_compress_state_set puts them back (errors
 * NULL: zero; q NULL or !q_ready: Q is drawn afresh at the next compressed step). */
bool pt_compress_state_sizes(const pt_net *n, int64_t *errors, int64_t *q);
bool pt_compress_state_get(const pt_net *n, float *errors, float *q);
void pt_compress_state_set(pt_net *n, const float *errors, const float *q, bool q_ready);

/* ---- A micro-batch's activations and the gradient scratch --------------------------------- */

/* What one transformer layer keeps of a micro-batch. T = b·s_r tokens pass through
 * the layer on this rank (s_r = s/cp); R of them are this rank's rows of the
 * residual stream: T, or T/t with sequence parallelism (rows [tp_rank·R, +R)).
 * With full recomputation every layer's views point at one shared set, rebuilt in
 * backward. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (R, h) [act], (R), (R) */
    float *q, *k, *v;                 /* (b, s_r, a/t, d), (b, s_r, k/t, d) x2 [act]; with
                                         cp's all-to-all, once attention has begun, the
                                         head form (pt_dims_attn) */
    float *att, *lse;                 /* (T, a/t, d) [act]; (b, a/t, s_r), or with cp
                                         (2, b, a/t, s_r/2): per sequence chunk (with cp
                                         the T rows are chunk by chunk, (2, b, s_r/2));
                                         with the all-to-all lse is the head form's */
    float *atth;                      /* the all-to-all: attention's output in head form
                                         (the backward's), NULL without */
    float *x2;                        /* (R, h) [act] residual stream after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *gate, *up, *act;           /* (T, f/t) [act] each; gate only with SwiGLU */
    float *qkn, *qkn_rstd;            /* q/k norms: q then k before them, (T, a/t + k/t,
                                         d) [act] token form, and their (T, a/t + k/t)
                                         statistics; NULL without */
    /* a mixture of experts (runtime/moe.c; NULL in a dense model): the router's scores
     * (R, E) fp32, each token's experts (R, k) int32, weights (R, k) fp32 and rows
     * (R, k) int32 (-1: dropped), the load-balancing loss's gradient of each sequence's
     * scores (b, E) fp32 (NULL without that loss), the rows this rank's experts received,
     * expert by expert (N, h) [act], and their outputs back in this rank's order (R·k, h)
     * [act]; gate, up and act then hold the experts' N rows. moe_auxg has room for the
     * sequences' counts after it, (b, E) fp32, while they are summed over tp and cp,
     * and for each run of rows' sums, (2b, E) */
    float *moe_scores, *moe_w, *moe_auxg, *moe_xr, *moe_yp;
    int32_t *moe_idx, *moe_pos;
} pt_layer_acts;

/* One activation slot: what one model chunk keeps of one micro-batch between its
 * forward and its backward (the memory model's unit, a (micro-batch, chunk) in flight).
 * The engine hands slots out from a pool as a chunk's forward (or the receive of its
 * input) starts and takes them back when its backward ends. */
struct pt_acts {
    void *mem;                        /* one backend allocation for all of the below */
    int32_t *tokens, *targets;        /* (T) in backend memory */
    float **x;                        /* [slot_layers + 1] (R, h) [act] the chunk's input
                                         and each of its layers' outputs */
    pt_layer_acts *layer;             /* [slot_layers] */
    int64_t *moe_counts;              /* a mixture of experts: per layer of the slot, the
                                         rows each rank of the ep group sent each expert
                                         (ep·E), then the rows each rank of the etp group
                                         gives each local expert (etp·E/ep); host, the
                                         forward's, for the backward */
    float dloss;                      /* the loss scale of its forward (0: evaluation),
                                         which a recomputed forward takes again */
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

/* What one FP8 scratch buffer holds (runtime/fp8.c): src (rows, cols), cast as operand
 * `operand` of the linear layers that read input group `group` of layer li, transposed
 * or not, with the scale in meta; meta NULL: nothing another GEMM may reuse. */
typedef struct {
    const float *src, *meta;
    int64_t rows, li;
    int cols, group, operand;
    bool t;
} pt_fp8_held;

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
    float *dqkn;                      /* q/k norms: the gradients of q then k before them */
    float *dqknorm;                   /* (2, d) fp32: the norms' weight gradients of this
                                         rank's heads (tp > 1), before their sum */
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
    float *a2a_send, *a2a_recv;       /* cp's all-to-all: what is sent and received */
    float *hdatt, *hdq, *hdk, *hdv;   /* ... the attention gradients in head form */
    uint8_t *fp8_a, *fp8_b, *fp8_w;   /* FP8 GEMMs' quantized operands (runtime/fp8.c:
                                         inputs and output gradients, output gradients
                                         transposed, weights); NULL without FP8 */
    pt_fp8_held fp8_held[2];          /* what fp8_a and fp8_b hold */
    const float *fp8_taken_src, *fp8_taken_meta; /* an amax its tensor's kernel took
                                         (pt_fp8_amax_into), for the next cast */
    /* a mixture of experts (runtime/moe.c): the router's logits and their gradient
     * (R, E) [act]; the dispatch plan's source rows (R·k) int32 and counts (E int64,
     * then the ep group's E each and the etp group's E/ep each as doubles, gathered);
     * the copies sent and their gradients back (R·k, h) [act] and what arrives in
     * sending-rank order (N, h) [act] (ep > 1); rows expert by expert (N, h) [act]; the
     * etp group's rows, N a rank (etp·N, h) [act] (etp > 1); the weights' gradient
     * (R, k) fp32; the orders between the two (N) int32 (ep > 1) */
    float *moe_logits, *moe_tok, *moe_recv, *moe_em, *moe_eg, *moe_dw;
    float *moe_drouter;               /* (E, h) fp32: the router's weight gradient of this
                                         rank's rows before its sum over tp (tp > 1) */
    int32_t *moe_src, *moe_perm, *moe_invperm;
    int64_t *moe_counts;
} pt_scratch;

/* ---- Where a micro-batch's tensors live (runtime/tensors.c) ----------------------------- */

/* The sizes of one micro-batch through one layer on this rank: the shape the planner
 * priced (pt_rank_shape_of), split over tp and cp. */
typedef struct {
    int64_t b, s, T;          /* micro-batch, sequence on this rank (s/cp), tokens */
    int64_t R;                /* rows of the residual stream here: T, or T/t with sp */
    int64_t sc;               /* cp: one sequence chunk, s/(2·cp); s without cp */
    int h, a, kh, d, f, v;    /* per rank: a, kh, f and v already divided by t */
    int t, tr, cp, cr;        /* tp size and rank, cp size and rank */
    int kv_share;             /* tp ranks sharing one KV head (tp > k), else 1 */
    int u;                    /* cp's all-to-all degree (1: none), its group of u ranks
                                 inside cp; the ring runs over cp/u such groups */
    int ha, hkh;              /* the head form's query and KV heads (pt_attn_shape: a
                                 and kh with u = 1) */
    bool sp;
} pt_layer_dims;

pt_layer_dims pt_net_dims(const pt_net *n);
/* Context parallelism's causal load balancing: cp rank cr holds sequence chunks cr and
 * 2·cp-1-cr (its pieces 0 and 1; one piece, the whole sequence, without cp). The
 * position of the first token of piece `piece` of rank cr, and the pieces per rank. */
int64_t pt_dims_piece_pos(const pt_layer_dims *d, int cr, int piece);
/* The dimensions attention runs at (u > 1: the head form, planner/memory_model.h's
 * pt_attn_shape): cp and cr are the ring's (cp/u groups, this rank's group), s, sc and
 * T u times longer, a and kh the head form's (kh 1 when KV heads are replicated), u 1.
 * With u = 1, d itself. With one ring member (cp = u) the head form is batch-major,
 * (b, u·s, a/u, d), as attention without cp; else chunk by chunk as the ring's. */
pt_layer_dims pt_dims_attn(const pt_layer_dims *d);
int pt_dims_pieces(const pt_layer_dims *d);

/* pt_tensors_check: whether the buffers of `slots` micro-batches can be sized at all
 * (else an error naming them), before anything is allocated. pt_tensors_alloc: the
 * activation slots (`slots`, at least vp), the head's buffers (last stage) and the
 * gradient scratch, their bytes added to n->bytes. pt_tensors_free frees them and the
 * resolved parameters, from any state alloc or pt_net_resolve_params leaves. */
int pt_tensors_check(const pt_net *n, int slots, pt_err *err);
int pt_tensors_alloc(pt_net *n, int slots, pt_err *err);
void pt_tensors_free(pt_net *n);

/* The parameters the ops name (pt_param_ref), resolved once by name into n->pref;
 * pt_net_param_row gives layer li's row (0 .. n_layers-1; li < 0: the parameters
 * outside the layers), the weight and bias of each pt_param_ref. */
int pt_net_resolve_params(pt_net *n, pt_err *err);
const pt_param *const *pt_net_param_row(const pt_net *n, int64_t li);
/* A parameter's weights (in w, [act]) and its gradient (fp32); NULL when the model has no
 * such parameter (a bias of a model without biases) or this rank does not hold it. */
typedef struct {
    const float *w;
    float *g;
} pt_param_view;
/* Where p's weights and gradient are now: the parameter buffer, or under ZeRO 2/3 a
 * window or a whole copy (pt_zero_weight). p NULL: a view of NULLs. */
pt_param_view pt_net_param_view(const pt_net *n, const pt_param *p);
/* The head's buffers of the micro-batch in slot A (NULL off the last stage). */
pt_head_acts *pt_net_head_of(const pt_net *n, const pt_acts *A);

/* ---- The model assembled (runtime/net.c) ---------------------------------------------------- */

/* The op lists, the resolved parameters, the micro-batch's tensors and the kernels'
 * temporaries of a model whose parameters are in place; pt_net_free_runtime frees them
 * (from any state alloc leaves). */
int pt_net_alloc_runtime(pt_net *n, const pt_plan *p, int slots, pt_err *err);
void pt_net_free_runtime(pt_net *n);

/* ---- Running op lists (runtime/oprun.c) ------------------------------------------------------ */

/* Runs one op of a list: 0 when done, -1 with err set, or PT_OP_NO_SPAN when the op has
 * no work of its own to time here: it ran beside earlier work (PowerSGD's kernels and
 * all-reduces, on a side stream during the backward), or it does not apply to this step
 * (PowerSGD's ops in its warm-up steps, which reduce every gradient in plain buckets). */
enum { PT_OP_NO_SPAN = 1 };
typedef int (*pt_op_exec)(void *ctx, const pt_op *op, pt_err *err);
/* Runs every op of `list` in order through exec, each a span of the trace under its
 * kind's name and (kernels) key, timed on the device where it has timers: 0, or -1 with
 * err set at the first op that fails. */
int pt_net_run_list(pt_net *n, const pt_oplist *list, pt_op_exec exec, void *ctx,
                    pt_err *err);

/* ---- Device times of op spans (runtime/devtime.c) ----------------------------------------- */

/* (pt_net_trace_resolve is in runtime.h.) init sets n->devtime when the trace is on,
 * PT_TRACE_SYNC is not, and the backend has device timers; free releases it. Around
 * each compute op, when n->devtime is set: before (the first op after a resolve also
 * waits for the stream and records the anchor) records the op's start event; after
 * records its end event and keeps `span` (pt_trace_add_op's handle) pending. 0, or -1
 * with err set. */
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
