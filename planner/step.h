/*
 * The ops of a training step (planner/ops.c, ops_step.c): the typed kernels and
 * collectives of one micro-batch on one rank (a transformer layer's forward and
 * backward, the embedding, the head with its loss) and of the step's end (a chunk's
 * gradient buckets, PowerSGD's compression, the optimizer), the table of per-kind
 * facts, the breakdown categories, and the FLOPs of a step. The simulator prices these
 * lists and the runtime executes them, in the order of schedule.h's programs.
 */
#ifndef PT_PLANNER_STEP_H
#define PT_PLANNER_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "cost.h"
#include "grid.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Layer op lists: the step's typed instructions (planner/ops.c) -------------- */

/* Where a step's time goes (the --explain breakdown and predicted.breakdown): compute by
 * kind, communication by group (exposed on the compute stream's critical path, or
 * hidden beside compute), the optimizer step, the stack's fixed per-step overhead and
 * the pipeline's idle time. */
typedef enum { PT_BD_GEMM, PT_BD_ATTN, PT_BD_OTHER, PT_BD_TP, PT_BD_CP, PT_BD_EP, PT_BD_DP,
               PT_BD_P2P, PT_BD_OPTIM, PT_BD_OVERHEAD, PT_BD_BUBBLE, PT_BD_COUNT } pt_bd;
const char *pt_bd_name(pt_bd b); /* "gemm", "attention", "other_compute", "tp", "cp", "ep",
                                    "dp_zero", "pipeline_p2p", "optimizer", "overhead",
                                    "bubble" */

/* One op of a training step on one rank: a compute kernel or a collective. The op
 * lists are the one description of what a micro-batch does: the simulator prices each
 * op from the cost tables and the runtime executes each (runtime/oprun.c runs the
 * lists; runtime/layer.c's switch over a micro-batch's kinds is compiled with
 * -Wswitch-enum, so an op the planner adds and the runtime does not run fails the
 * build, not a run). The kernel's key (pt_kernel_op.key)
 * is its cost-table key; the runtime's trace spans carry the same keys and names, so
 * predicted and measured meet op by op. */
typedef enum { PT_OP_KERNEL, PT_OP_COLL } pt_op_class;

/* What an op does. The name of each (pt_op_kind_name: "q", "attn", "tp_allreduce", ...)
 * is its trace span's name. Kinds marked "priced only" describe other stacks' kernels
 * (Megatron-LM's unfused attention and cross-entropy); ptrun trains every plan with its
 * own stack's ops (tools/ptrun.c) and refuses to run them. */
typedef enum {
    /* a transformer layer's forward (also what recomputation runs again) */
    PT_OPK_NORM1, PT_OPK_Q, PT_OPK_K, PT_OPK_V, PT_OPK_ROPE, PT_OPK_ATTN, PT_OPK_ATTN_OUT,
    PT_OPK_ADD1, PT_OPK_NORM2, PT_OPK_MLP_GATE, PT_OPK_MLP_UP, PT_OPK_ACT, PT_OPK_MLP_DOWN,
    PT_OPK_ADD2,
    /* ... its fused forms (a stack with fused_epilogues): the residual add in the
     * second norm's kernel (add1 + norm2), the GELU in the up projection's epilogue
     * (mlp_up + act), q, k and v as one batched GEMM (q + k + v: multi-head attention
     * at tp = 1) */
    PT_OPK_ADD1_NORM2, PT_OPK_MLP_UP_GELU, PT_OPK_QKV,
    /* its backward */
    PT_OPK_MLP_DOWN_DGRAD, PT_OPK_MLP_DOWN_WGRAD, PT_OPK_ACT_BWD, PT_OPK_MLP_GATE_DGRAD,
    PT_OPK_MLP_UP_DGRAD, PT_OPK_MLP_GATE_WGRAD, PT_OPK_MLP_UP_WGRAD, PT_OPK_NORM2_BWD,
    PT_OPK_ATTN_OUT_DGRAD, PT_OPK_ATTN_OUT_WGRAD, PT_OPK_ATTN_BWD, PT_OPK_ROPE_BWD,
    PT_OPK_Q_DGRAD, PT_OPK_K_DGRAD, PT_OPK_V_DGRAD, PT_OPK_Q_WGRAD, PT_OPK_K_WGRAD,
    PT_OPK_V_WGRAD, PT_OPK_NORM1_BWD,
    /* ... its fused forms: the down projection's data gradient through the GELU's
     * derivative in the GEMM's epilogue (mlp_down_dgrad + act_bwd); the weight
     * gradients of q, k and v as one batched GEMM (q_wgrad + k_wgrad + v_wgrad) */
    PT_OPK_MLP_DOWN_DGRAD_GELU, PT_OPK_QKV_WGRAD,
    /* unfused attention (priced only) */
    PT_OPK_ATTN_SCORES, PT_OPK_ATTN_SOFTMAX, PT_OPK_ATTN_DROPOUT, PT_OPK_ATTN_CTX,
    PT_OPK_ATTN_CTX_DGRAD, PT_OPK_ATTN_CTX_WGRAD, PT_OPK_ATTN_DROPOUT_BWD,
    PT_OPK_ATTN_SOFTMAX_BWD, PT_OPK_ATTN_SCORES_DGRAD, PT_OPK_ATTN_SCORES_WGRAD,
    /* embedding and head */
    PT_OPK_EMBED, PT_OPK_EMBED_BWD, PT_OPK_FINAL_NORM, PT_OPK_LOGITS, PT_OPK_LOGITS_DGRAD,
    PT_OPK_LOGITS_WGRAD, PT_OPK_FINAL_NORM_BWD,
    /* cross-entropy. Fused (ptrun): one op computes the loss and the logits' gradient;
     * vocabulary-parallel (tp > 1) it is cut where the row statistics are reduced over
     * tp: local maxima, their all-reduce, local sums of exponentials and target logits,
     * their all-reduce, then the loss and gradient. Unfused (priced only): forward and
     * backward ops with one all-reduce of the statistics. */
    PT_OPK_XENT, PT_OPK_XENT_MAX, PT_OPK_XENT_SUMEXP, PT_OPK_XENT_MAX_ALLREDUCE,
    PT_OPK_XENT_SUM_ALLREDUCE, PT_OPK_XENT_BWD, PT_OPK_XENT_ALLREDUCE,
    /* tensor and context parallelism */
    PT_OPK_TP_ALLREDUCE, PT_OPK_SP_ALLGATHER, PT_OPK_SP_REDUCESCATTER, PT_OPK_CP_RING,
    PT_OPK_CP_RING_BWD,
    /* ... context parallelism's other kinds (pt_cp_comm). a2a and a2a+p2p: blocking
     * all-to-alls over the cp_a2a group of q, of k and v (count 2), of the attention
     * output back; in the backward of the output's gradient in, of dq, of dk and dv
     * back. all_gather (priced only): K and V gathered over cp before attention, in
     * the forward and again in the backward, and dK, dV reduce-scattered after it. */
    PT_OPK_CP_A2A_Q, PT_OPK_CP_A2A_KV, PT_OPK_CP_A2A_OUT, PT_OPK_CP_A2A_DOUT,
    PT_OPK_CP_A2A_DQ, PT_OPK_CP_A2A_DKV, PT_OPK_CP_ALLGATHER, PT_OPK_CP_REDUCESCATTER,
    /* a mixture-of-experts layer's MLP, in the forward (pt_opctx.moe_layer): the
     * router's GEMM (logits over the experts) and top-k, the tokens' copies permuted
     * into expert order, dispatched to the experts' ranks over ep (alltoall: an
     * all-to-all; allgather: all-gathered), with etp > 1 gathered over etp, the
     * experts' two GEMMs (one grouped GEMM each: E/ep experts) around their
     * activation, the way back (etp reduce-scatter, the combine over ep), and the
     * copies unpermuted and summed with their router weights; the load-balancing
     * loss's kernel. Shared experts run as the layer's dense MLP ops. */
    PT_OPK_ROUTER, PT_OPK_MOE_ROUTE, PT_OPK_MOE_AUX, PT_OPK_MOE_PERMUTE, PT_OPK_MOE_DISPATCH,
    PT_OPK_ETP_ALLGATHER, PT_OPK_EXPERT_FC1, PT_OPK_EXPERT_ACT, PT_OPK_EXPERT_FC2,
    PT_OPK_ETP_REDUCESCATTER, PT_OPK_MOE_COMBINE, PT_OPK_MOE_UNPERMUTE,
    /* ... its backward (the etp collectives reversed: a gather of the output's
     * gradient, a reduce-scatter of the input's) */
    PT_OPK_MOE_UNPERMUTE_BWD, PT_OPK_MOE_COMBINE_BWD, PT_OPK_ETP_ALLGATHER_BWD,
    PT_OPK_EXPERT_FC2_DGRAD, PT_OPK_EXPERT_FC2_WGRAD, PT_OPK_EXPERT_ACT_BWD,
    PT_OPK_EXPERT_FC1_DGRAD, PT_OPK_EXPERT_FC1_WGRAD, PT_OPK_ETP_REDUCESCATTER_BWD,
    PT_OPK_MOE_DISPATCH_BWD, PT_OPK_MOE_PERMUTE_BWD, PT_OPK_MOE_ROUTE_BWD,
    PT_OPK_ROUTER_DGRAD, PT_OPK_ROUTER_WGRAD,
    /* ... the device idle while the host synchronises with it for the routed tokens'
     * counts before the dispatch, once a forward (priced only: pt_stack.moe_host_sync_s;
     * ptrun's dispatch waits inside its own op) */
    PT_OPK_MOE_SYNC,
    /* q/k normalisation (pt_model.qk_norm): an RMSNorm over each head of q and k */
    PT_OPK_QK_NORM, PT_OPK_QK_NORM_BWD,
    /* data parallelism, ZeRO and the optimizer */
    PT_OPK_ZERO3_ALLGATHER, PT_OPK_ZERO_REDUCESCATTER, PT_OPK_DP_BUCKET,
    PT_OPK_EMBED_ALLREDUCE, PT_OPK_GRAD_NORM, PT_OPK_ADAM, PT_OPK_ZERO_ALLGATHER,
    /* PowerSGD's compression of a chunk's gradients (compress=powersgd, in its
     * gradient-bucket list; runtime/compress.c): the error added (M = g + e), P = M Q,
     * P's orthonormalisation, Q = M^T P, the decompression (M = P Q^T and the new
     * error), and the all-reduces of the P and Q matrices */
    PT_OPK_BF16_CONVERT, /* compress=bf16: the buckets rounded to bf16 and back */
    PT_OPK_PSGD_ERROR, PT_OPK_PSGD_P, PT_OPK_PSGD_ORTH, PT_OPK_PSGD_Q,
    PT_OPK_PSGD_DECOMPRESS, PT_OPK_PSGD_ALLREDUCE_P, PT_OPK_PSGD_ALLREDUCE_Q,
    PT_OPK_COUNT
} pt_op_kind;

/* The op lists of a step, by what they run on: a micro-batch's layer (forward and
 * backward), its embedding and its head, a chunk's gradient buckets, the step's end. */
typedef enum { PT_LIST_LAYER, PT_LIST_EMBED, PT_LIST_HEAD, PT_LIST_GRAD_SYNC, PT_LIST_STEP,
               PT_LIST_COUNT } pt_list_kind;

/* The facts of one op kind that do not depend on a layout. */
typedef struct {
    const char *name;   /* the trace span's name: "q", "attn", "tp_allreduce", ... */
    pt_op_class cls;    /* a kernel or a collective */
    unsigned lists;     /* the lists it may stand in: bit (1u << pt_list_kind) each */
    pt_bd category;     /* the breakdown category its time goes to */
    bool priced_only;   /* another stack's kernels: ptrun refuses to run it */
} pt_op_kind_info;
/* The facts of kind k; for a k outside the enum, an entry named "?" in no list. */
const pt_op_kind_info *pt_op_kind_info_of(pt_op_kind k);
const char *pt_op_kind_name(pt_op_kind k); /* pt_op_kind_info_of(k)->name */
/* Whether kind k may stand in an op list of kind `list`. */
bool pt_op_kind_in(pt_op_kind k, pt_list_kind list);

/* The parameters a kernel op reads and whose gradients it writes (its weight, and
 * bias where the model has one): per layer for layer ops. The runtime resolves each to
 * its place once, when it allocates, not by name per op. */
typedef enum {
    PT_PARAM_NONE, PT_PARAM_NORM1, PT_PARAM_Q, PT_PARAM_K, PT_PARAM_V, PT_PARAM_ATTN_OUT,
    PT_PARAM_NORM2, PT_PARAM_MLP_GATE, PT_PARAM_MLP_UP, PT_PARAM_MLP_DOWN,
    PT_PARAM_FINAL_NORM, PT_PARAM_HEAD, PT_PARAM_WTE, PT_PARAM_WPE,
    /* a mixture-of-experts layer's router, its experts' first (gate and up) and second
     * (down) projections, all E/ep local experts in one; q and k's norms */
    PT_PARAM_ROUTER, PT_PARAM_EXPERT_FC1, PT_PARAM_EXPERT_FC2, PT_PARAM_QK_NORM,
    PT_PARAM_COUNT
} pt_param_ref;
/* Its name in the model's parameter table without the "layers.<i>." prefix and the
 * ".w"/".b" suffix ("norm1", "q", "lm_head", "wte"); NULL for PT_PARAM_NONE. */
const char *pt_param_ref_name(pt_param_ref r);
/* Whether r is a transformer layer's parameter (per layer), not the embedding's or
 * the head's. */
bool pt_param_ref_in_layer(pt_param_ref r);

/* The buffers a collective moves, from (src) and into (dst); the same buffer for an
 * in-place all-reduce. Micro-batch buffers are the running layer's (or the embedding's
 * or head's); scratch is one per rank. */
typedef enum {
    PT_TEN_NONE,
    PT_TEN_ATTN_RES,     /* (R, h) the residual stream after attention (x2) */
    PT_TEN_MLP_RES,      /* (R, h) the layer's output */
    PT_TEN_EMBED_RES,    /* (R, h) the embedding's output */
    PT_TEN_ROW_PARTIAL,  /* (T, h) a row-parallel output before its reduce-scatter (sp) */
    PT_TEN_LN1, PT_TEN_LN2, PT_TEN_LNF, /* (R, h) a norm's output */
    PT_TEN_GATHERED,     /* (T, h) a norm output gathered over tp (sp) */
    PT_TEN_DRES,         /* (R, h) the residual stream's gradient */
    PT_TEN_DRES_GATHERED,/* (T, h) ... gathered over tp (sp) */
    PT_TEN_DLN,          /* (T, h) a column-parallel input's gradient, partial over tp */
    PT_TEN_DLN_ROWS,     /* (R, h) its reduced rows (sp) */
    PT_TEN_XENT_MAX,     /* (T) fp32 row maxima of the logits */
    PT_TEN_XENT_SUMS,    /* (2, T) fp32 sums of exponentials and target logits */
    PT_TEN_KV,           /* the K/V blocks (and their gradients) cp moves: around the
                            ring, through the all-to-all or the all-gather */
    PT_TEN_LAYER_WEIGHTS,/* a layer's weights (ZeRO-3 gather) */
    PT_TEN_LAYER_GRADS,  /* a layer's gradients (ZeRO-2/3 reduce-scatter) */
    PT_TEN_GRADS,        /* the gradient buffer (data-parallel buckets) */
    PT_TEN_EMBED_GRAD,   /* the tied embedding's gradient */
    PT_TEN_WEIGHTS,      /* the updated weights (ZeRO 1/2 gather) */
    PT_TEN_COUNT
} pt_tensor;
const char *pt_tensor_name(pt_tensor t);

/* What an FP8 GEMM op (pt_train.fp8 on, a layer's linear layer) does besides its GEMM,
 * which its key (dtype fp8) does not time: the memory-bound passes that find its
 * operands' amax and quantize them (with transposes where the GEMM reads an operand
 * K-major the other way), the scale kernels, and the all-reduces (max) of one float
 * over tp for each operand sharded over tp, and over cp for each activation. planner/ops.c fills it as the stack runs
 * its casts (pt_fp8_casts); planner/sim.c adds its price to the GEMM's. Under ptrun's
 * stack these kernels run inside the op (the runtime maps ops by kind, so they are no
 * ops of their own). */
typedef struct {
    double bytes;           /* the passes' device-memory traffic, reads and writes */
    double passes;          /* memory-bound kernels (a fraction where a cast is shared by
                               the micro-batches of a step: TE's cached weights) */
    double launches;        /* kernels too small to move bytes (fp8_scale) */
    int amax_reduces;       /* all-reduces of one float over tp */
    pt_coll_op amax;        /* one of them: 4 bytes over the tp group */
    int amax_cp_reduces;    /* ... and over cp (an activation's rows are split over it) */
    pt_coll_op amax_cp;     /* one of them: 4 bytes over the cp group */
    /* ptrun under current scaling (runtime/fp8.c follows these): the GEMM takes operand
     * a (X in a forward, dY^T in a weight gradient) or b (X^T in a weight gradient) as
     * an earlier GEMM of the list cast it; a data gradient writes dY's transpose too */
    bool reuse_a, reuse_b, dy_both;
    /* ... and casts operand a or b again with the scale the tensor's last amax gave (a
     * data gradient's W^T, a weight gradient's dY^T and, with one micro-batch in flight,
     * its X^T), where runtime/fp8.c's memo confirms the tensor is unchanged; takes
     * operand a's amax as the kernel that wrote it took it (taken_a: the down
     * projection's input, the up projection's output gradient after the GELU); and, on
     * the GELU's act and act_bwd ops, take_amax: its kernel takes that amax */
    bool known_a, known_b, taken_a, take_amax;
    /* ptrun (either recipe): a data gradient sums its layer's bias gradient in the cast
     * of the output gradient (kernels.h's fp8_cast_dbias), and the layer's weight
     * gradient, in role gemm_wgrad, has none */
    bool dbias;
} pt_fp8_work;

typedef struct {
    pt_op_kind kind;
    pt_op_class cls;
    pt_gemm_role role;      /* one of the layers' GEMMs: which call it is, with or without
                               a bias (its key's kind is the role's name); PT_GEMM_NONE
                               for every other op */
    pt_param_ref param;     /* kernel ops: the parameters it uses; PT_PARAM_NONE */
    pt_tensor src, dst;     /* collectives: what they move; kernel ops: what they read
                               and write where the runtime is told (a norm's output,
                               the column-parallel GEMMs' input, their data
                               gradients' output), else PT_TEN_NONE */
    pt_kernel_op kernel;    /* cls == PT_OP_KERNEL */
    pt_coll_op coll;        /* cls == PT_OP_COLL */
    pt_group_kind group;    /* the group a collective runs in (PT_GROUP_COUNT: every
                               rank of the run, the gradient norm's sum) */
    int count;              /* times the op runs in a row (CP ring steps; k and v's
                               all-to-alls); >= 1 */
    bool overlapped;        /* a collective that runs beside compute (CP ring, ZeRO-3
                               prefetch) instead of blocking the compute stream */
    bool recompute;         /* a forward op run again during backward */
    double out_elems;       /* GEMMs: elements of the output (m·n), else 0 */
    pt_fp8_work fp8;        /* an FP8 GEMM's scaling work beside its GEMM; zero else */
} pt_op;

typedef struct {
    pt_op *op;
    int n, cap;
} pt_oplist;

void pt_oplist_free(pt_oplist *o);

/* What op lists are built from: model, layout, training settings and, from the
 * cluster, how many ranks of each process group share a node. */
typedef struct {
    const pt_model *m;
    const pt_layout *l;
    const pt_train *t;
    pt_precision prec;
    pt_dtype dtype;                   /* data type of GEMMs and activations */
    int ranks_per_node[PT_GROUP_COUNT];
    int embed_ranks_per_node;         /* first and last stage (tied embedding group) */
    int world_ranks_per_node;         /* every rank of the run */
    char device[64];                  /* the cluster's device (the stack's attention
                                         efficiency is per device); "" without one */
    bool moe_layer;                   /* whose layer lists: a mixture-of-experts layer
                                         (pt_model_layer_moe), else a dense one */
    bool window_layer;                /* ... a layer of banded attention
                                         (pt_model_layer_window), else full */
    double moe_imbalance;             /* the busiest rank's expert tokens over the mean
                                         (pt_train.moe_imbalance; 1: balanced) */
    int tp_rank;                      /* whose lists: 0, the tp rank that adds a
                                         row-parallel layer's bias (the one priced), unless
                                         the runtime sets its own rank's */
} pt_opctx;

/* What one rank of layout l holds of a micro-batch going through a layer: the op
 * lists price these sizes and the runtime allocates and computes with the same. */
typedef struct {
    int64_t tokens;        /* T = b·s/cp: tokens a layer sees on this rank */
    int64_t rows;          /* the residual-stream rows here: T, or T/t with sp */
    int64_t heads, kv_heads; /* attention and KV heads on this rank */
    int64_t head_dim;      /* d (pt_model_head_dim) */
    int64_t ffn;           /* f/t */
    int64_t vocab;         /* padded vocabulary / t */
} pt_rank_shape;
pt_rank_shape pt_rank_shape_of(const pt_model *m, const pt_layout *l);

void pt_opctx_init(pt_opctx *c, const pt_model *m, const pt_layout *l, const pt_train *t,
                   const pt_cluster *cl);

/* Each appends, in execution order, the ops of one micro-batch on one rank:
 * one transformer layer's forward, or its backward (with the forward ops that
 * recomputation repeats, marked recompute); the embedding (first virtual stage);
 * the final norm, output head and loss (last virtual stage). Return -1 only when
 * out of memory. */
int pt_ops_layer(const pt_opctx *c, bool backward, pt_oplist *out);
/* Elements of the GEMM outputs one layer's forward keeps under torchtitan's per-op
 * selective recomputation (the 1st, 3rd, ... GEMM: the ones its backward does not
 * rebuild); -1 when out of memory. The memory model counts these. */
double pt_ops_op_policy_kept_elems(const pt_opctx *c);
int pt_ops_embed(const pt_opctx *c, bool backward, pt_oplist *out);
int pt_ops_head(const pt_opctx *c, bool backward, pt_oplist *out);
/* The kernel as ptrun's own lists describe it, whose key a profile of ptrun's kernels
 * holds its samples under: a copy of op->kernel, but for another stack's flash attention
 * (flash_fwd, flash_bwd), which is ptrun's attn_fwd or attn_bwd of the same shape with
 * ptrun's FLOP count (the whole score matrix). The simulator looks a stack's kernel up
 * in the cost tables this way where the stack runs ptrun's kernel for it
 * (pt_stack_ptrun_gemm, pt_stack_ptrun_attn). */
void pt_op_ptrun_twin(const pt_op *op, pt_kernel_op *out);
/* ---- The step's end: gradient buckets and the optimizer (planner/ops_step.c) ---- */

/* A chunk's gradient reduction during the backward: `params` parameters over the
 * dp×cp group, one collective per bucket (all-reduce for ZeRO 0, reduce-scatter for
 * ZeRO 1), run as the chunk's last backward fills them; none for ZeRO 2/3 (their
 * layers reduce-scatter in the layer lists). The engine runs this list at the
 * chunk's REDUCE_GRADS. */
int pt_ops_grad_sync(const pt_opctx *c, double params, int64_t layers, pt_oplist *out);
/* ... and a chunk's experts' gradients (`experts` parameters, ZeRO 0/1) in buckets of
 * their own over the expert-data-parallel group, as Megatron-Core's distributed
 * optimizer keeps them, appended to the same list; nothing when edp = 1. */
int pt_ops_expert_sync(const pt_opctx *c, double experts, pt_oplist *out);
/* Bytes per gradient element in the data-parallel reduction (the stack's reduction
 * dtype, never wider than the gradients), and the gradient bucket size in bytes (the
 * stack's rule, else the training's bucket). */
double pt_grad_reduce_bytes(const pt_opctx *c);
double pt_bucket_bytes(const pt_opctx *c);
/* The share of a ZeRO 0/1 bucket's bytes that travels: 2/4 under compress=bf16 with
 * fp32 gradient reduction, else 1. */
double pt_grad_wire_share(const pt_opctx *c);
/* How a range of `len` gradient elements is cut into buckets of `bucket` elements as
 * the backward makes them final from the range's end down (PyTorch DDP's and
 * Megatron's order): whole buckets from the top, what is left at the bottom. The
 * runtime's ZeRO-1 buckets (runtime/param_table.c) and the memory model's count of their
 * shares (memory.c) both take them from here. pt_bucket_count: how many; pt_bucket_at:
 * bucket k (0 the top) starts *off elements above the range's start and holds *n;
 * pt_bucket_shares: the elements one of N ranks owns when each bucket is padded to a
 * multiple of N and shared N ways. bucket < 1 counts as 1. */
int64_t pt_bucket_count(int64_t len, int64_t bucket);
void pt_bucket_at(int64_t len, int64_t bucket, int64_t k, int64_t *off, int64_t *n);
double pt_bucket_shares(int64_t len, int64_t bucket, int64_t N);
/* What a pipeline rank holds that its step's end works on. */
typedef struct {
    double params;      /* parameters on the rank (all its chunks) */
    double experts;     /* of which the experts' (sharded over the expert-data-parallel
                           group, the rest over dp×cp) */
    double edge;        /* of which the embedding's and the head's (first, last stage) */
    double tied;        /* a tied embedding's copy (first and last stage, pp > 1), else 0 */
    double fp8_linear;  /* of `params`, the layers' linear weights when they are gathered in
                         * FP8 (pt_fp8.param_gather), else 0 */
} pt_step_params;
/* The step's end on one pipeline rank, in the order the engine runs it at
 * OPTIM_STEP: the tied embedding's all-reduce between first and last stage; the
 * reduce-scatter of what the backward did not reduce (ZeRO 2/3: the embedding's and
 * head's gradients, kept whole; ZeRO 1: the tied copy, after its sum); the gradient
 * norm's sum over every rank; Adam over this rank's share; the all-gather of the
 * updated weights (ZeRO 1/2: all; ZeRO 3: the embedding and head, kept whole). A
 * chunk's gradient buckets take the tied copy out under ZeRO 1 (pt_step_tied_out). */
int pt_ops_optimizer(const pt_opctx *c, const pt_step_params *sp, pt_oplist *out);
/* The parameters of a tied embedding's copy on virtual stage vs of V (pp > 1, first
 * or last), else 0; and how many of them a chunk's gradient buckets leave to the step
 * (ZeRO 1). */
double pt_step_tied(const pt_opctx *c, int vs, int V);
double pt_step_tied_out(const pt_opctx *c, int vs, int V);

/* ---- FLOPs of a step (planner/ops.c) ------------------------------------------- */

/* Model FLOPs of one training step over all ranks (forward and backward, without
 * recomputation), summed from the op lists; and the hardware FLOPs (with it). */
double pt_step_model_flops(const pt_opctx *c);
double pt_step_hardware_flops(const pt_opctx *c);

#ifdef __cplusplus
}
#endif
#endif
