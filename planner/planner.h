/*
 * ptplanner — the planning library: model and cluster specs (built-in and JSON),
 * the layout space with its validity rules, the rank grid and its process groups,
 * and the per-rank memory model.
 *
 * Dimension letters: the one legend of common/common.h (b, s, h, a, k, d, f, v, L, t,
 * c, p; dp written out).
 *
 * Errors: library functions never exit or print. They return 0 on success and -1
 * on error, filling a pt_err (common/common.h) whose message names the file, field
 * or value at fault; tools/ decides what to do with it.
 */
#ifndef PT_PLANNER_H
#define PT_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "cost.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Model spec -------------------------------------------------------------- */

typedef enum { PT_NORM_LAYERNORM, PT_NORM_RMSNORM } pt_norm;
typedef enum { PT_ACT_GELU, PT_ACT_SWIGLU } pt_act;
/* ALiBi (Press et al. 2022, BLOOM, MPT): no position embedding; a per-head linear bias
 * added to the attention scores inside the attention kernel, so no op of its own. */
typedef enum { PT_POS_LEARNED, PT_POS_ROPE, PT_POS_ALIBI } pt_pos;

typedef struct {
    char name[64];
    int64_t layers;   /* L */
    int64_t hidden;   /* h */
    int64_t heads;    /* a */
    int64_t kv_heads; /* k; equal to a without grouped-query attention */
    int64_t ffn;      /* f: inner size of the MLP (per branch for SwiGLU) */
    int64_t vocab;    /* v */
    int64_t seq;      /* s: training sequence length */
    pt_norm norm;
    pt_act act;
    pt_pos pos;
    bool tied_embeddings; /* output head shares the token embedding */
    bool bias;            /* linear layers carry biases (GPT-2/3 yes, LLaMA no) */
    bool dropout;         /* dropout layers present (keeps 1-byte masks) */
} pt_model;

/* Number of built-in models; pt_model_builtin(i) returns the i-th (NULL past the end). */
int pt_model_builtin_count(void);
const pt_model *pt_model_builtin(int i);

/* Looks up `name` among the built-ins; if there is none and `name` is a readable
 * file, loads it as JSON. Errors name the unknown model or the file and field. */
int pt_model_get(const char *name, pt_model *out, pt_err *err);
int pt_model_load_file(const char *path, pt_model *out, pt_err *err);
/* Parses a JSON text; `origin` names it in errors (a file name or "<string>"). */
int pt_model_from_json(const char *text, const char *origin, pt_model *out, pt_err *err);
/* Returns a malloc'd JSON text (ends with a newline) that pt_model_from_json reads
 * back to an identical spec. NULL only when out of memory. */
char *pt_model_to_json(const pt_model *m);
/* Checks sizes (positive, h divisible by a, a divisible by k, ...). */
int pt_model_validate(const pt_model *m, const char *origin, pt_err *err);

/* Parameter counts (planner/params.c). `tp` is the tensor-parallel size: the figures
 * are what one tensor-parallel rank holds; tp = 1 gives the whole model. */
int64_t pt_vocab_padded(const pt_model *m, int tp);       /* v rounded up to 128, then to t */
/* Elements of the head's padding mask on one tensor-parallel rank of the last stage
 * (PT_BUF_VMASK; runtime/layer.c, alloc_head: a bias of -inf on the rows
 * pt_vocab_padded adds): the rank's vocabulary slice when the vocabulary is padded,
 * else 0. */
int64_t pt_vocab_mask_elems(const pt_model *m, int tp);
/* v rounded up to a multiple of `multiple` (times t when per_tp), then of t. */
int64_t pt_vocab_round(const pt_model *m, int tp, int64_t multiple, bool per_tp);
int64_t pt_params_layer(const pt_model *m, int tp);       /* one transformer layer */
/* KV heads one tensor-parallel rank holds: k/t, or 1 when tp > k (each KV head then
 * replicated over the tp/k ranks whose query heads use it). */
int64_t pt_kv_heads_rank(const pt_model *m, int tp);
/* Tensor-parallel ranks holding the same KV head: tp/k when tp > k, else 1. */
int pt_kv_head_copies(const pt_model *m, int tp);
int64_t pt_params_embedding(const pt_model *m, int tp);   /* token (vocab-parallel) + learned positions */
int64_t pt_params_head(const pt_model *m, int tp, int pp);/* final norm + output head; the head is
                                                             a copy of the embedding when tied and p > 1,
                                                             and absent when tied and p = 1 */
int64_t pt_model_params_total(const pt_model *m);         /* the published parameter count */
/* Parameters of a part of the model on one tensor-parallel rank: `layers` transformer
 * layers, with the embedding when `first` and the final norm and head when `last`
 * (pp decides whether a tied head is a copy). The one count that the memory model
 * (a pipeline stage), the simulator (a virtual stage) and the runtime's parameter
 * table (checked against it) all use. */
int64_t pt_params_part(const pt_model *m, int tp, int pp, int64_t layers, bool first,
                       bool last);

/* PowerSGD's matrices (compress=powersgd; planner/params.c). The weight matrices of a
 * transformer layer on one tensor-parallel rank, (rows, cols) each in the order the
 * runtime's parameter table holds them (q, k, v, attn_out, [mlp_gate,] mlp_up,
 * mlp_down); the embedding, the head, norms and biases are never compressed. A matrix
 * is compressed at rank pt_psgd_rank = min(rank, rows, cols) when its factors P (rows,
 * r) and Q (cols, r) take less than half its elements (pt_psgd_compresses). Per
 * layer: *compressed elements are reduced as factors, *factors elements of P and Q
 * travel instead. */
enum { PT_PSGD_LAYER_MAX = 7 };
int pt_psgd_layer_matrices(const pt_model *m, int tp, int64_t shape[PT_PSGD_LAYER_MAX][2]);
int64_t pt_psgd_rank(int64_t rows, int64_t cols, int rank);
bool pt_psgd_compresses(int64_t rows, int64_t cols, int rank);
void pt_psgd_layer(const pt_model *m, int tp, int rank, int64_t *compressed,
                   int64_t *factors);
/* PowerSGD's groups, the one rule runtime/compress.c forms them by and planner/ops.c
 * prices them by: compressed matrices, taken from the chunk's end down, join the open
 * group, whose P and Q are each all-reduced at once; the group closes once it holds at
 * least `bucket` elements. Adds a (rows, cols) matrix to the open group's *acc and says
 * whether that closes it (*acc is then 0, for the next group). */
bool pt_psgd_group_closes(int64_t *acc, int64_t rows, int64_t cols, int64_t bucket);

/* ---- Cluster spec ------------------------------------------------------------ */

typedef struct {
    char name[64];
    double peak_flops[PT_DTYPE_COUNT]; /* dense FLOP/s; 0 = not supported / not yet profiled */
    int64_t memory_bytes;
    double memory_bw_Bps;              /* bytes per second */
    int sm_count;                      /* streaming multiprocessors (GEMM waves); 0 unknown */
    double gemm_max_eff;               /* best measured GEMM rate, share of peak; 0 unknown */
} pt_device;

typedef struct {
    char name[64];
    double bw_Bps;    /* per device per direction, bytes per second; 0 = not yet profiled */
    double latency_s;
    double busbw_Bps; /* NCCL's achievable bus bandwidth per device (0: the line rate) */
    double allreduce_busbw_Bps; /* all-reduce bus bandwidth where it differs (NVLink
                                   SHARP); 0: busbw_Bps */
} pt_link;

typedef struct {
    char name[64];
    int nodes;
    int devices_per_node;
    pt_device device;
    pt_link intra; /* between devices of one node */
    pt_link inter; /* between nodes */
} pt_cluster;

int pt_cluster_builtin_count(void);
/* Fills `out` with the i-th built-in (the `local` one is read off this machine). */
int pt_cluster_builtin(int i, pt_cluster *out);
int pt_cluster_get(const char *name, pt_cluster *out, pt_err *err);
int pt_cluster_load_file(const char *path, pt_cluster *out, pt_err *err);
int pt_cluster_from_json(const char *text, const char *origin, pt_cluster *out, pt_err *err);
char *pt_cluster_to_json(const pt_cluster *c);
int pt_cluster_validate(const pt_cluster *c, const char *origin, pt_err *err);
/* Fills the figures the spec leaves at 0 (not yet profiled, as for `local`) from
 * the description ptprofile stored for a device of the same name in `db`. Returns
 * true when it changed anything. db may be NULL. */
bool pt_cluster_apply_profile(pt_cluster *c, const pt_costdb *db);
static inline int64_t pt_cluster_world(const pt_cluster *c)
{
    return (int64_t)c->nodes * c->devices_per_node;
}

/* How the data-parallel gradient reduction (ZeRO 0/1 buckets) overlaps the backward:
 * none (every bucket after the step's last backward), last (buckets reduced as the
 * last micro-batch's backward of each chunk fills them: PyTorch DDP under no_sync,
 * Megatron-LM's --overlap-grad-reduce), or backward (every micro-batch's gradients
 * reduced during its own backward, n_micro times the traffic: FSDP without no_sync). */
typedef enum { PT_DPO_NONE, PT_DPO_LAST, PT_DPO_BACKWARD, PT_DPO_COUNT } pt_dp_overlap;
/* Pipeline sends: beside compute, blocking the sender's compute until delivered, or
 * beside compute only with interleaving (Megatron-Core's overlap_p2p_comm). */
typedef enum { PT_P2P_OVERLAPPED, PT_P2P_BLOCKING, PT_P2P_INTERLEAVED, PT_P2P_COUNT } pt_p2p_mode;

/* ---- Software stack (planner/stack.c) ------------------------------------------ */

/* How a training framework executes a step: the planner prices the same layout
 * differently under Megatron-LM 2021, Megatron-Core with Transformer Engine, PyTorch
 * FSDP or ptrun itself. Built-ins: "ptrun" (the default), "megatron-lm",
 * "megatron-core", "fsdp"; any other as a JSON file (stack.c documents the format). */
typedef enum {
    PT_ATTN_PTRUN,   /* ptrun's own kernels: one kernel per direction that writes and
                        reads the score matrix (keys attn_fwd / attn_bwd) */
    PT_ATTN_UNFUSED, /* score GEMM, fused scale-mask-softmax, dropout and context GEMM
                        as separate kernels, the score matrix through memory each time */
    PT_ATTN_FLASH,   /* tiled attention: no score matrix, the causal half of the FLOPs,
                        the scores recomputed in the backward */
    PT_ATTN_COUNT
} pt_attn_impl;
const char *pt_attn_impl_name(pt_attn_impl a); /* "ptrun", "unfused", "flash" */

/* Attention kernel efficiency on one device family (flash only). */
typedef struct {
    char device[32];        /* prefix of the device name ("A100", "H100"); "*" matches all */
    double fwd, bwd;        /* share of the dense peak FLOP/s in the training dtype */
} pt_attn_eff;

/* How the memory-bound ops of a layer (norms, RoPE, the gated activation) run:
 * fused, one kernel per direction reading and writing each tensor once (Megatron's
 * and Transformer Engine's kernels, ptrun's), or eager, as PyTorch runs the modules
 * of torchtitan's Llama operator by operator (RMSNorm through fp32 copies, RoPE in
 * complex fp32, SiLU and the product as kernels of their own): several passes each.
 * LayerNorm and GELU are one PyTorch kernel per direction either way. */
typedef enum { PT_KERNELS_FUSED, PT_KERNELS_EAGER, PT_KERNELS_COUNT } pt_kernel_style;
const char *pt_kernel_style_name(pt_kernel_style k); /* "fused", "eager" */

/* What recompute=selective rebuilds: the attention core only (Korthikanti et al.
 * 2022, Megatron), or every op but the attention kernel and every other GEMM
 * (torchtitan's per-op selective checkpointing policy, selective_ac_option "op"). */
typedef enum { PT_SELECTIVE_ATTENTION, PT_SELECTIVE_OP, PT_SELECTIVE_COUNT } pt_selective;
const char *pt_selective_name(pt_selective s); /* "attention", "op" */

/* How gradient buckets are sized: a fixed size, or Megatron-Core's distributed
 * optimizer rule max(40,000,000, 1,000,000 x dp) parameters per bucket. */
typedef enum { PT_BUCKET_FIXED, PT_BUCKET_MEGATRON, PT_BUCKET_COUNT } pt_bucket_rule;

#define PT_STACK_MAX_ATTN_EFF 8

typedef struct {
    char name[64];
    char about[256];               /* which software and version it describes, and sources */
    pt_attn_impl attention;
    int n_attn_eff;
    pt_attn_eff attn_eff[PT_STACK_MAX_ATTN_EFF]; /* first matching prefix wins */
    /* what the stack can run at all */
    bool tp, pp, cp, sp;           /* tensor, pipeline, context parallelism, sequence par. */
    unsigned zero_stages;          /* bit z set: ZeRO stage z offered */
    /* overlaps: which exist, and the default of each layout key */
    bool tp_overlap;               /* TP communication beside the GEMMs (needs sp) */
    bool tp_overlap_rs;            /* the reduce-scatters too, not only the all-gathers */
    double tp_overlap_reach;       /* share of that communication the GEMMs hide */
    unsigned dp_overlap_modes;     /* bit o set: dp_overlap o offered */
    pt_dp_overlap dp_overlap;      /* default */
    bool param_overlap;            /* parameter all-gather beside the next forward offered
                                      (and the default when offered) */
    bool compression;              /* runs the layout's compress=bf16|powersgd */
    int zero3_prefetch;            /* ZeRO-3 layers gathered ahead (0: each gather blocks) */
    double comm_compute_slowdown;  /* compute slowdown while a collective shares the SMs */
    pt_p2p_mode p2p;               /* pipeline sends beside compute or blocking */
    /* gradients and loss */
    pt_bucket_rule bucket_rule;
    int64_t bucket_bytes;          /* PT_BUCKET_FIXED; 0: the training's --bucket-mib */
    pt_dtype grad_reduce_dtype;    /* fp32 or bf16 gradient reduction */
    bool fused_xent;               /* cross-entropy in one kernel per direction */
    int64_t vocab_multiple;        /* vocabulary padded to a multiple of this, */
    bool vocab_per_tp;             /* ... times tp (Megatron), else then to one of tp */
    double step_overhead_s;        /* per step: launch gaps, logging, data loader */
    pt_kernel_style kernels;       /* norms, RoPE, activation: fused or eager */
    pt_selective selective;        /* what recompute=selective rebuilds */
    bool fused_epilogues;          /* the residual add inside the next norm's kernel and,
                                      for GELU models, the GELU and its derivative in the
                                      MLP GEMMs' epilogues (ptrun: cuBLASLt's) */
} pt_stack;

int pt_stack_builtin_count(void);
const pt_stack *pt_stack_builtin(int i);
/* A built-in by name, else a JSON file; errors name the unknown stack or the file and
 * field. */
int pt_stack_get(const char *name, pt_stack *out, pt_err *err);
int pt_stack_load_file(const char *path, pt_stack *out, pt_err *err);
int pt_stack_from_json(const char *text, const char *origin, pt_stack *out, pt_err *err);
/* A JSON text (with its newline) that pt_stack_from_json reads back identically;
 * NULL only when out of memory. */
char *pt_stack_to_json(const pt_stack *s);
int pt_stack_validate(const pt_stack *s, const char *origin, pt_err *err);
/* The efficiency the stack's flash attention reaches on `device` (fwd or bwd); 0
 * when no entry matches. */
/* The vocabulary as stack s pads it under tensor parallelism tp: rounded up to a
 * multiple of vocab_multiple·tp (Megatron-LM's --make-vocab-size-divisible-by), or to
 * a multiple of vocab_multiple and then of tp (ptrun: pt_vocab_padded). */
int64_t pt_stack_vocab(const pt_stack *s, const pt_model *m, int tp);
double pt_stack_attn_eff(const pt_stack *s, const char *device, bool backward);

/* ---- Layout ------------------------------------------------------------------ */

typedef enum { PT_RECOMPUTE_NONE, PT_RECOMPUTE_SELECTIVE, PT_RECOMPUTE_FULL,
               PT_RECOMPUTE_COUNT } pt_recompute;
typedef enum { PT_SCHED_AFAB, PT_SCHED_1F1B, PT_SCHED_INTERLEAVED, PT_SCHED_COUNT } pt_schedule;
/* Grid dimensions. A rank order lists them fastest-varying first. */
typedef enum { PT_DIM_TP, PT_DIM_CP, PT_DIM_DP, PT_DIM_PP, PT_NDIM } pt_dim;

const char *pt_recompute_name(pt_recompute r);
const char *pt_schedule_name(pt_schedule s);
const char *pt_dim_name(pt_dim d);
const char *pt_dp_overlap_name(pt_dp_overlap o); /* "none", "last", "backward" */

/* Compression of the data-parallel gradient reduction (ZeRO 0 and 1 buckets):
 * none; bf16 (each bucket rounded to bf16 for the reduction and widened back, as
 * PyTorch DDP's bf16_compress_hook); powersgd (rank-r PowerSGD, Vogels et al. 2019,
 * "PowerSGD: Practical Low-Rank Gradient Compression for Distributed Optimization",
 * NeurIPS: each weight matrix M reduced as P = MQ and Q = M^T P, with error feedback
 * and warm-started Q; 1-D tensors, the embedding and the head stay uncompressed). */
typedef enum { PT_COMPRESS_NONE, PT_COMPRESS_BF16, PT_COMPRESS_POWERSGD,
               PT_COMPRESS_COUNT } pt_compress;
const char *pt_compress_name(pt_compress c); /* "none", "bf16", "powersgd" */
/* PowerSGD's defaults: rank 4 (Vogels et al. 2019 train their transformer language
 * model at rank 4, Table 8) and 10 uncompressed steps first (PyTorch's
 * PowerSGDState advises starting after the learning-rate warm-up). */
enum { PT_POWERSGD_RANK = 4, PT_POWERSGD_START = 10, PT_POWERSGD_MAX_RANK = 1024 };

typedef struct {
    int tp, cp, pp, dp;     /* t, c, p, d: tp·cp·pp·dp = world size */
    int vp;                 /* virtual stages (model chunks) per pipeline rank */
    bool sp;                /* sequence parallelism (only with tp > 1) */
    bool tp_overlap;        /* the sequence-parallel all-gathers run beside the GEMMs
                               that read them (only with sp) */
    pt_dp_overlap dp_overlap; /* data-parallel reduction beside the backward [last] */
    bool param_overlap;     /* ZeRO 1/2 (distributed optimizer): the all-gather of updated
                               weights runs beside the next step's forward, bucket by
                               bucket, instead of after the optimizer step */
    int64_t first_layers, last_layers; /* layers on the first and last pipeline stage
                               (0: the even split L/p); the rest divide evenly over the
                               middle stages, each stage's over its vp chunks */
    int zero;               /* ZeRO stage 0..3, sharding over the dp×cp group */
    pt_compress compress;   /* gradient compression of the dp·cp reduction [none] */
    int powersgd_rank;      /* r of compress=powersgd [PT_POWERSGD_RANK] */
    int64_t powersgd_start; /* the first step compressed by PowerSGD (the steps before
                               are reduced uncompressed) [PT_POWERSGD_START] */
    int64_t mbs;            /* b: micro-batch size */
    int64_t n_micro;        /* micro-batches per step per data-parallel rank */
    pt_recompute recompute;
    pt_schedule schedule;
    pt_dim order[PT_NDIM];  /* rank order, fastest first; default tp-cp-dp-pp */
} pt_layout;

/* The default layout: every size 1, zero 0, mbs 1, no recompute, 1F1B, tp-cp-dp-pp. */
void pt_layout_default(pt_layout *l);

/* Parses "tp=8,pp=4,vp=2,cp=1,dp=2,zero=1,mbs=1,recompute=selective,sp=1,
 * schedule=interleaved,order=tp-cp-dp-pp". Keys left out keep the value in `l`,
 * except: dp is derived from `world` when absent (world <= 0: dp stays), schedule
 * becomes interleaved when vp > 1 and is not given, and n_micro is derived from
 * `global_batch` when > 0. Unknown keys, bad values and repeated keys are errors. */
int pt_layout_parse(const char *text, int64_t world, int64_t global_batch, pt_layout *l,
                    pt_err *err);
/* Writes the canonical string form (the one pt_layout_parse reads) into buf. */
void pt_layout_format(const pt_layout *l, char *buf, size_t n);
/* The smallest gradient bucket (plan.json's training.bucket_bytes, a stack's
 * gradients.bucket_bytes): below 64 KiB an all-reduce is all latency (the small-message
 * regime of NCCL and MPI), so smaller buckets add only calls — a 1-byte bucket made one
 * call per gradient element and a two-step run of a tiny model took minutes. */
#define PT_MIN_BUCKET_BYTES (INT64_C(1) << 16)
/* The most ranks a layout may have (2^30; plan.json's 'world' has the same bound). */
#define PT_MAX_WORLD (INT64_C(1) << 30)
/* tp*cp*pp*dp, or -1 when that product does not fit in int64_t. */
int64_t pt_layout_world(const pt_layout *l);
/* Parses "tp-cp-dp-pp" style rank orders (each dimension exactly once). */
int pt_order_parse(const char *text, pt_dim order[PT_NDIM], pt_err *err);
void pt_order_format(const pt_dim order[PT_NDIM], char *buf, size_t n);

/* ---- Validity rules ---------------------------------------------------------- */

/* Each rule that rejects a layout has a reason. Keep pt_reject_name/describe in
 * step with this list (planner/layout.c). */
typedef enum {
    PT_REJECT_WORLD,              /* tp·cp·pp·dp differs from the world size */
    PT_REJECT_HEADS_TP,           /* a not divisible by t */
    PT_REJECT_KV_HEADS_TP,        /* k not divisible by t */
    PT_REJECT_FFN_TP,             /* f not divisible by t */
    PT_REJECT_LAYERS_PP,          /* L not divisible by p·vp */
    PT_REJECT_SEQ_CP,             /* s not divisible by 2·c (load-balanced causal split) */
    PT_REJECT_SEQ_SP,             /* s/c not divisible by t with sequence parallelism */
    PT_REJECT_BATCH_DP,           /* global batch not divisible by b·dp */
    PT_REJECT_TP_SPANS_NODES,     /* a tensor-parallel group crosses a node boundary */
    PT_REJECT_SP_WITHOUT_TP,      /* sp requested with t = 1 */
    PT_REJECT_OVERLAP_WITHOUT_SP, /* tp_overlap requested without sequence parallelism */
    PT_REJECT_VP_WITHOUT_PP,      /* vp > 1 with p = 1 */
    PT_REJECT_SCHEDULE_VP,        /* interleaved without vp > 1, or vp > 1 without interleaving */
    PT_REJECT_INTERLEAVED_MICRO,  /* interleaving needs micro-batches a multiple of p */
    PT_REJECT_ZERO_NO_DP,         /* ZeRO stage > 0 with d·c = 1: nothing to shard */
    PT_REJECT_ZERO_PP,            /* ZeRO 2/3 with pipeline parallelism */
    PT_REJECT_UNEVEN_SPLIT,       /* first_layers/last_layers leave no valid split */
    PT_REJECT_COMPRESS_ZERO,      /* gradient compression with ZeRO 2/3 */
    PT_REJECT_COMPRESS_NO_DP,     /* gradient compression with d·c = 1: nothing reduced */
    PT_REJECT_BAD_VALUE,          /* a size below 1, zero outside 0..3, ... */
    PT_REJECT_COUNT
} pt_reject;

const char *pt_reject_name(pt_reject r);     /* short stable key, e.g. "heads_tp" */
const char *pt_reject_describe(pt_reject r); /* one line for humans */

/* Checks `l` against every rule for model `m`, cluster `c` (world size and devices
 * per node) and `global_batch`. Returns the number of rules broken and sets bit r of
 * *mask for each broken rule r (mask may be NULL). */
int pt_layout_check(const pt_model *m, const pt_cluster *c, int64_t global_batch,
                    const pt_layout *l, uint32_t *mask);
/* Layers per pipeline stage: Megatron-Core's decoder_first_pipeline_num_layers /
 * decoder_last_pipeline_num_layers rule. With F = first_layers and Z = last_layers
 * both 0, every one of the p·vp virtual stages holds L/(p·vp) layers (rule
 * layers_pp). Otherwise (rule uneven_split) pipeline rank 0 holds F layers and rank
 * p-1 holds Z; the ranks whose count is not given (0 means not given) share the rest
 * evenly: the p-2 middle ranks when both are given, else the middle ranks and the end
 * left out (first_layers=7 alone on pp=4 with 31 layers: 7, 8, 8, 8). Each rank's
 * layers divide evenly over its vp chunks. Valid only when pp > 1, F and Z are
 * multiples of vp, the rest divides evenly over the other ranks (with pp = 2 and both
 * given: F + Z = L), and every chunk holds at least one layer. Llama 3 405B: L = 126,
 * pp = 16, F = Z = 7, 8 on each middle rank. */

/* Layers of virtual stage vs (0 .. p·vp-1; vs = chunk·p + pipeline rank) under the
 * layout's split, and in *first (may be NULL) the model index of its first layer:
 * virtual stages hold consecutive layers in vs order, so rank 0's chunks are not
 * contiguous with interleaving. The memory model, simulator and runtime all ask this.
 * Meaningful for layouts pt_layout_check accepts; for others a non-negative estimate
 * (the even split rounded up). */
int64_t pt_stage_layers(const pt_model *m, const pt_layout *l, int vs, int64_t *first);
/* Layers pipeline rank r holds over all its chunks: vp times its chunk's layers. */
int64_t pt_rank_layers(const pt_model *m, const pt_layout *l, int r);

/* pt_layout_parse with the stack's defaults for the keys left out (dp_overlap;
 * param_overlap on for ZeRO 1/2 when the stack offers it), then pt_stack_check_layout. */
int pt_layout_parse_stack(const char *text, int64_t world, int64_t global_batch,
                          const pt_stack *s, pt_layout *l, pt_err *err);

/* Whether stack s can run layout l: the parallelisms, ZeRO stage and overlaps it
 * offers. The error names the layout key and the stack. */
int pt_stack_check_layout(const pt_stack *s, const pt_layout *l, pt_err *err);

/* Writes one line on why rule `r` rejects `l`, with the values involved
 * (e.g. "heads (32) are not divisible by tp (3)"). */
void pt_reject_explain(pt_reject r, const pt_model *m, const pt_cluster *c,
                       int64_t global_batch, const pt_layout *l, char *buf, size_t n);

/* ---- Rank grid and process groups -------------------------------------------- */

typedef enum { PT_GROUP_TP, PT_GROUP_CP, PT_GROUP_DP, PT_GROUP_PP,
               PT_GROUP_DPCP, /* gradient reduction and ZeRO sharding */
               PT_GROUP_TPCP,
               PT_GROUP_COUNT } pt_group_kind;
const char *pt_group_name(pt_group_kind g);

typedef struct {
    int size[PT_NDIM];   /* indexed by pt_dim */
    int stride[PT_NDIM]; /* rank = sum coord[d]·stride[d] */
    pt_dim order[PT_NDIM];
    int64_t world;
} pt_grid;

void pt_grid_init(pt_grid *g, const pt_layout *l);
void pt_grid_coords(const pt_grid *g, int64_t rank, int coords[PT_NDIM]);
int64_t pt_grid_rank(const pt_grid *g, const int coords[PT_NDIM]);
int pt_grid_group_size(const pt_grid *g, pt_group_kind kind);
/* Fills ranks[0..size) with the members of `rank`'s group of `kind`, ascending.
 * ranks must hold pt_grid_group_size() entries. Returns this rank's index in it. */
int pt_grid_group(const pt_grid *g, pt_group_kind kind, int64_t rank, int64_t *ranks);
/* True when some group of `kind` has members on two nodes of `devices_per_node`. */
bool pt_grid_group_crosses_nodes(const pt_grid *g, pt_group_kind kind, int devices_per_node);

/* ---- Compute backends (planner/caps.c) ---------------------------------------- */

/* The compute backends ptrun trains on: the CPU backend (C and OpenBLAS, MPI) for a
 * cluster whose device name starts with "cpu", the CUDA backend (cuBLASLt, NCCL) for any
 * other. Both train every layout pt_layout_check accepts. */
typedef enum { PT_BACKEND_CPU, PT_BACKEND_CUDA, PT_BACKEND_COUNT } pt_backend;
pt_backend pt_cluster_backend(const pt_cluster *c);
/* Whether plans priced for stack s are ptrun's own (by name). A plan priced for another
 * framework's stack trains with ptrun's stack in its place (runtime/trainer.c); that
 * stack says itself what it runs (pt_stack_check_layout). */
bool pt_stack_is_ptrun(const pt_stack *s);

/* ---- Memory model ------------------------------------------------------------ */

/* Storage sizes of one parameter and its training state, in bytes. */
typedef struct {
    int weight_bytes;   /* the working copy the forward pass reads */
    int grad_bytes;     /* gradient accumulation buffer */
    int master_bytes;   /* fp32 master copy (0 when weights are already fp32) */
    int moment_bytes;   /* Adam: first + second moments together */
    int act_bytes;      /* one activation element */
} pt_precision;

/* bf16 mixed precision with fp32 gradient accumulation (what ptrun's CUDA backend
 * keeps), bf16 with bf16 gradients (the ZeRO paper's accounting), or plain fp32. */
typedef enum { PT_PREC_BF16, PT_PREC_BF16_GRAD16, PT_PREC_FP32, PT_PREC_COUNT } pt_prec_kind;
pt_precision pt_precision_of(pt_prec_kind k);
const char *pt_prec_name(pt_prec_kind k);
int pt_prec_parse(const char *text, pt_prec_kind *out, pt_err *err);

/* Settings of a training job that the planner needs besides model and layout. */
typedef struct {
    int64_t global_batch;   /* sequences per optimizer step */
    pt_prec_kind precision;
    int64_t bucket_bytes;   /* gradient-reduction bucket (PyTorch DDP default: 25 MiB) */
    pt_stack stack;         /* the software that runs the step [ptrun] */
} pt_train;

void pt_train_default(pt_train *t, const pt_cluster *c);

/* Model states of `params` parameters on one rank with ZeRO `stage` sharded over
 * `shard` ranks (the ZeRO paper's Psi and N_d). */
typedef struct {
    double weights_bytes, grads_bytes, optimizer_bytes;
} pt_model_states;
pt_model_states pt_mem_model_states(double params, int shard, int stage, pt_precision p);

/* Activation bytes one transformer layer keeps for its backward pass, per micro-batch,
 * on one rank (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
 * Transformer Models", Sec. 4, generalised to GQA, SwiGLU and models without dropout). */
double pt_mem_layer_activations(const pt_model *m, const pt_layout *l, pt_precision p);
/* The same under attention implementation `attn` (the figure above is PT_ATTN_PTRUN's). */
double pt_mem_layer_activations_attn(const pt_model *m, const pt_layout *l, pt_precision p,
                                     pt_attn_impl attn);

/* The buffers ptrun allocates per micro-batch (planner/buffers.c): the runtime carves
 * its activation slots, head buffers and backward scratch from this list, and the
 * memory model sums it for ptrun's own stack, so the two cannot differ. In order:
 * one layer's kept activations, the rest of a slot, the head, the scratch. */
typedef enum {
    PT_BUF_LN1, PT_BUF_LN1_MEAN, PT_BUF_LN1_RSTD, PT_BUF_Q, PT_BUF_K, PT_BUF_V, PT_BUF_ATT,
    PT_BUF_LSE, PT_BUF_X2, PT_BUF_LN2, PT_BUF_LN2_MEAN, PT_BUF_LN2_RSTD, PT_BUF_GATE,
    PT_BUF_UP, PT_BUF_ACT,
    PT_BUF_TOKENS, PT_BUF_TARGETS, PT_BUF_X,
    PT_BUF_LNF, PT_BUF_LNF_MEAN, PT_BUF_LNF_RSTD, PT_BUF_LOGITS, PT_BUF_LOSSES, PT_BUF_VMASK,
    PT_BUF_DRES, PT_BUF_DLN, PT_BUF_DLNS, PT_BUF_GATH, PT_BUF_GDRES, PT_BUF_ROUT,
    PT_BUF_DDROP, PT_BUF_DQ, PT_BUF_DK, PT_BUF_DV, PT_BUF_DQR, PT_BUF_DKR, PT_BUF_DATT,
    PT_BUF_DGATE, PT_BUF_DUP, PT_BUF_DACT, PT_BUF_CE, PT_BUF_DNORM, PT_BUF_DKV,
    PT_BUF_RING0, PT_BUF_RING1, PT_BUF_PART, PT_BUF_PART_LSE,
    PT_BUF_COUNT
} pt_buf;

#define PT_BUF_ALIGN 64 /* bytes: every buffer starts on a cache line */

typedef struct {
    int64_t elems[PT_BUF_COUNT]; /* 0: not allocated (absent, or an alias) */
    int bytes[PT_BUF_COUNT];     /* bytes of one element */
    bool overflow;               /* a size past int64: refused by the runtime */
} pt_buffers;

/* The buffers of layout l on one rank, activations of act_bytes per element, with a
 * dropout gradient buffer when `dropout`. */
void pt_buffers_of(const pt_model *m, const pt_layout *l, int act_bytes, bool dropout,
                   pt_buffers *out);
const char *pt_buf_name(pt_buf b);
int64_t pt_buf_bytes(const pt_buffers *B, pt_buf b);        /* aligned */
double pt_buffers_layer(const pt_buffers *B);               /* one layer's kept activations */
/* One activation slot: one chunk of `layers` layers of one micro-batch (with full
 * recomputation the layers share one set of layer buffers). */
double pt_buffers_slot(const pt_buffers *B, int64_t layers, bool full_recompute);
double pt_buffers_head(const pt_buffers *B);                /* one micro-batch's head */
double pt_buffers_scratch(const pt_buffers *B);             /* the backward's scratch */

/* Per-rank memory of one pipeline stage, with its breakdown (bytes). */
typedef struct {
    int stage;                 /* the pipeline stage these figures are for */
    double weights_bytes;      /* layers of the stage + embedding/head on first/last */
    double grads_bytes;
    double optimizer_bytes;    /* fp32 master + Adam moments, by ZeRO stage */
    double activations_bytes;  /* layer activations kept in flight by the schedule */
    double embed_head_bytes;   /* embedding output, final norm, logits and loss */
    double recompute_bytes;    /* one layer's activations rebuilt during backward */
    double comm_bytes;         /* bucket, gather and send/receive buffers */
    double total_bytes;
    double params;             /* parameters held by this rank (unsharded by ZeRO) */
    int64_t layers;            /* transformer layers on this rank (all its chunks) */
    int64_t in_flight;         /* micro-batch chunks whose activations are kept at peak */
} pt_memory;

/* Memory of pipeline stage `stage` of layout `l`. */
void pt_mem_stage(const pt_model *m, const pt_layout *l, const pt_train *t, int stage,
                  pt_memory *out);
/* The largest over all pipeline stages (what decides whether the layout fits). */
void pt_mem_rank_max(const pt_model *m, const pt_layout *l, const pt_train *t,
                     pt_memory *out);

/* ---- Enumeration ------------------------------------------------------------- */

typedef struct {
    int64_t max_mbs;          /* micro-batch sizes tried: powers of two up to this */
    double mem_fraction;      /* share of device memory a layout may use */
    pt_dim order[PT_NDIM];    /* rank order for all enumerated layouts */
    unsigned compress_modes;  /* bit c: compress=c tried where gradients go in buckets
                                 (ZeRO 0/1 over dp·cp > 1) and the stack compresses;
                                 none is always tried [none, bf16] */
} pt_enum_opts;

void pt_enum_opts_default(pt_enum_opts *o);

typedef struct {
    int64_t enumerated;               /* every candidate layout considered */
    int64_t valid;                    /* passed every rule */
    int64_t fit;                      /* valid and within device memory */
    int64_t rejected[PT_REJECT_COUNT];/* by first broken rule */
    int64_t too_big;                  /* valid but over device memory */
} pt_enum_counts;

/* Called for each valid layout; `fits` says whether it is within device memory.
 * Return non-zero to stop the enumeration. */
typedef int (*pt_enum_fn)(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx);

/* Enumerates every layout with tp·cp·pp·dp equal to the cluster's world size. */
void pt_enum_layouts(const pt_model *m, const pt_cluster *c, const pt_train *t,
                     const pt_enum_opts *o, pt_enum_fn fn, void *ctx,
                     pt_enum_counts *counts);

/* ---- Layer op lists: the step's typed instructions (planner/ops.c) -------------- */

/* Where a step's time goes (the --explain breakdown and predicted.breakdown): compute by
 * kind, communication by group (exposed on the compute stream's critical path, or
 * hidden beside compute), the optimizer step, the stack's fixed per-step overhead and
 * the pipeline's idle time. */
typedef enum { PT_BD_GEMM, PT_BD_ATTN, PT_BD_OTHER, PT_BD_TP, PT_BD_CP, PT_BD_DP, PT_BD_P2P,
               PT_BD_OPTIM, PT_BD_OVERHEAD, PT_BD_BUBBLE, PT_BD_COUNT } pt_bd;
const char *pt_bd_name(pt_bd b); /* "gemm", "attention", "other_compute", "tp", "cp",
                                    "dp_zero", "pipeline_p2p", "optimizer", "overhead",
                                    "bubble" */

/* One op of a training step on one rank: a compute kernel or a collective. The op
 * lists are the one description of what a micro-batch does: the simulator prices each
 * op from the cost tables and the runtime (runtime/layer.c) executes each with one
 * switch over its kind, compiled with -Wswitch-enum, so an op the planner adds and the
 * runtime does not run fails the build, not a run. The kernel's key (pt_kernel_op.key)
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
/* Virtual pipeline stages (chunks) one pipeline rank runs at most: the runtime keeps
 * per-chunk tables of this size and refuses a plan with a larger vp. */
enum { PT_CHUNK_MAX = 64 };

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
    PT_PARAM_FINAL_NORM, PT_PARAM_HEAD, PT_PARAM_WTE, PT_PARAM_WPE, PT_PARAM_COUNT
} pt_param_ref;
/* Its name in the model's parameter table without the "layers.<i>." prefix and the
 * ".w"/".b" suffix ("norm1", "q", "lm_head", "wte"); NULL for PT_PARAM_NONE. */
const char *pt_param_ref_name(pt_param_ref r);

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
    PT_TEN_KV,           /* the K/V blocks (and their gradients) travelling the cp ring */
    PT_TEN_LAYER_WEIGHTS,/* a layer's weights (ZeRO-3 gather) */
    PT_TEN_LAYER_GRADS,  /* a layer's gradients (ZeRO-2/3 reduce-scatter) */
    PT_TEN_GRADS,        /* the gradient buffer (data-parallel buckets) */
    PT_TEN_EMBED_GRAD,   /* the tied embedding's gradient */
    PT_TEN_WEIGHTS,      /* the updated weights (ZeRO 1/2 gather) */
    PT_TEN_COUNT
} pt_tensor;
const char *pt_tensor_name(pt_tensor t);

typedef struct {
    pt_op_kind kind;
    pt_op_class cls;
    pt_gemm_role role;      /* one of the layers' GEMMs: which call it is, with or without
                               a bias (its key's kind is the role's name); PT_GEMM_NONE
                               for every other op */
    pt_param_ref param;     /* kernel ops: the parameters it uses; PT_PARAM_NONE */
    pt_tensor src, dst;     /* collectives: what they move */
    pt_kernel_op kernel;    /* cls == PT_OP_KERNEL */
    pt_coll_op coll;        /* cls == PT_OP_COLL */
    pt_group_kind group;    /* the group a collective runs in (PT_GROUP_COUNT: every
                               rank of the run, the gradient norm's sum) */
    int count;              /* times the op runs in a row (CP ring steps); >= 1 */
    bool overlapped;        /* a collective that runs beside compute (CP ring, ZeRO-3
                               prefetch) instead of blocking the compute stream */
    bool recompute;         /* a forward op run again during backward */
    double out_elems;       /* GEMMs: elements of the output (m·n), else 0 */
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
    int64_t head_dim;      /* d = h/a */
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
/* A chunk's gradient reduction during the backward: `params` parameters over the
 * dp×cp group, one collective per bucket (all-reduce for ZeRO 0, reduce-scatter for
 * ZeRO 1), run as the chunk's last backward fills them; none for ZeRO 2/3 (their
 * layers reduce-scatter in the layer lists). The engine runs this list at the
 * chunk's REDUCE_GRADS. */
int pt_ops_grad_sync(const pt_opctx *c, double params, int64_t layers, pt_oplist *out);
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
 * runtime's ZeRO-1 buckets (runtime/model.c) and the memory model's count of their
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
    double edge;        /* of which the embedding's and the head's (first, last stage) */
    double tied;        /* a tied embedding's copy (first and last stage, pp > 1), else 0 */
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

/* Model FLOPs of one training step over all ranks (forward and backward, without
 * recomputation), summed from the op lists; and the hardware FLOPs (with it). */
double pt_step_model_flops(const pt_opctx *c);
double pt_step_hardware_flops(const pt_opctx *c);

/* ---- Schedule programs (planner/sched.c) -------------------------------------- */

/* One instruction of a pipeline rank's program. Micro-batches are 0..n_micro-1; a
 * rank holds vp model chunks, chunk c of pipeline rank r being virtual stage c·p + r
 * (Megatron-LM's interleaved assignment; vp = 1: chunk 0 is stage r). Sends are
 * posted without waiting; a receive waits until the matching send has been posted.
 * The simulator and the runtime execute these programs; nothing else describes a
 * training step's order. */
typedef enum {
    PT_INS_RECV_ACT,     /* receive the input activations of (mb, chunk) from `peer` */
    PT_INS_FWD,          /* forward of (mb, chunk) */
    PT_INS_SEND_ACT,     /* send the output activations of (mb, chunk) to `peer` */
    PT_INS_RECV_GRAD,    /* receive the output gradient of (mb, chunk) from `peer` */
    PT_INS_BWD,          /* backward of (mb, chunk) */
    PT_INS_SEND_GRAD,    /* send the input gradient of (mb, chunk) to `peer` */
    PT_INS_REDUCE_GRADS, /* chunk's gradients are final: finish their data-parallel
                            reduction (buckets start during the backward before it) */
    PT_INS_OPTIM_STEP,   /* optimizer step after every reduction */
    PT_INS_COUNT
} pt_ins_kind;
const char *pt_ins_name(pt_ins_kind k);   /* "recv_act", "fwd", ... */

typedef struct {
    pt_ins_kind kind;
    int mb;     /* micro-batch; -1 for REDUCE_GRADS and OPTIM_STEP */
    int chunk;  /* model chunk on this rank, 0..vp-1; -1 for OPTIM_STEP */
    int peer;   /* pipeline rank of a send or receive; -1 otherwise */
} pt_ins;

typedef struct {
    pt_ins *ins;
    int n;
} pt_prog;

typedef struct {
    pt_schedule kind;
    int pp, vp, n_micro;
    pt_prog *prog;  /* one program per pipeline rank, [pp] */
} pt_sched;

/* Builds the programs of every pipeline rank. One generator per schedule:
 * all-forward-all-backward (GPipe), 1F1B (PipeDream-Flush) and interleaved 1F1B
 * (vp > 1, n_micro a multiple of pp). Errors name the parameter at fault. The
 * caller frees with pt_sched_free. */
int pt_sched_build(pt_schedule kind, int pp, int vp, int n_micro, pt_sched *out,
                   pt_err *err);
void pt_sched_free(pt_sched *s);

/* Checks a schedule: every (mb, chunk) has exactly one forward and one backward on
 * the right rank, each forward precedes its backward, every send has one matching
 * receive, and the programs run to completion under the send/receive rule above
 * (no deadlock). Errors say which instruction breaks which rule. */
int pt_sched_check(const pt_sched *s, pt_err *err);

/* The most (mb, chunk) pairs whose forward has run and backward has not, at any
 * point of rank `rank`'s program: what the memory model counts as in flight. */
int pt_sched_peak_in_flight(const pt_sched *s, int rank);
/* The same for the micro-batches of model chunk `chunk` only (-1: every chunk). A
 * (mb, chunk)'s activations are held from its forward, or the receive of its input
 * just before it, to the end of its backward: in every schedule the receive comes
 * with no other forward or backward between, so these counts are also the most
 * activation slots the runtime holds at once. */
int pt_sched_peak_in_flight_chunk(const pt_sched *s, int rank, int chunk);

/* ---- Simulator (planner/sim.c) ------------------------------------------------- */

/* What one layout's instructions cost, in seconds, priced from the op lists and the
 * cost tables (or written by hand in tests). Indexed by virtual stage vs = c·p + r
 * ([p·vp]) or by pipeline rank ([p]). */
typedef struct {
    int pp, vp;
    double *fwd_s, *bwd_s;           /* [p·vp] one micro-batch through the stage */
    double *fwd_comm_s, *bwd_comm_s; /* [p·vp] the exposed communication inside them */
    double *sync_s;                  /* [p·vp] data-parallel reduction of its gradients */
    int64_t *sync_buckets;           /* [p·vp] buckets that reduction is cut into */
    double *sync_compute_s;          /* [p·vp] compute of that reduction (PowerSGD's
                                        compression), on the compute stream */
    double *p2p_s;                   /* [p] send from pipeline rank r to r+1 (mod p) */
    double *optim_s, *optim_comm_s;  /* [p] optimizer step, and its exposed all-gather */
    double prov_s[PT_PROV_COUNT];    /* priced time per step by provenance */
    double model_flops, hardware_flops; /* of the whole step, all ranks */
    double *bd_exposed, *bd_hidden;  /* [p·vp·PT_BD_COUNT] forward + backward of one
                                        micro-batch through the stage, by pt_bd */
    double *optim_adam_s;            /* [p] the optimizer kernel alone */
    double overhead_s;               /* the stack's fixed time per step */
    pt_dp_overlap dp_overlap;        /* how the reduction overlaps the backward */
    bool p2p_blocking;               /* a send holds its sender's compute until delivered */
} pt_sim_costs;

int pt_sim_costs_alloc(pt_sim_costs *c, int pp, int vp);
void pt_sim_costs_free(pt_sim_costs *c);

typedef struct {
    double step_time_s;
    double tokens_per_s;
    double mfu, hfu;                   /* 0 when the device's peak FLOP/s is unknown */
    double bubble_fraction;            /* pipeline idle over busy time (Narayanan et al.
                                          2021, Sec. 2.2): (p-1)/m for 1F1B */
    double exposed_comm_fraction;      /* communication not hidden, share of the step */
    double prov_share[PT_PROV_COUNT];  /* share of priced time by provenance */
    int pp;
    double stage_busy_s[64];           /* compute busy time of the first 64 stages */
    double breakdown_s[PT_BD_COUNT];   /* on the rank that ends the step last: compute
                                          and exposed communication; they sum to the
                                          step time */
    double hidden_s[PT_BD_COUNT];      /* communication that ran beside compute */
} pt_sim_result;

/* The hardware figures of a cluster as the cost tables want them; the backend is
 * "mpi" for CPU devices (name "cpu"), "nccl" otherwise. */
void pt_cost_hw_of(const pt_cluster *c, pt_cost_hw *hw);

/* Prices every instruction of layout `l`. db may be NULL (analytic). Returns -1
 * only when out of memory. */
int pt_sim_price(const pt_model *m, const pt_cluster *c, const pt_train *t,
                 const pt_costdb *db, const pt_layout *l, pt_sim_costs *out, pt_err *err);

/* A cheap closed-form estimate of the step time from the prices, used to choose
 * which layouts to simulate in full. */
double pt_sim_estimate(const pt_layout *l, const pt_sim_costs *costs);

/* Runs the schedule programs of `l` as a discrete-event simulation: each pipeline
 * rank with a compute stream (TP/CP communication exposed inside it unless
 * overlapped), a data-parallel stream reducing gradient buckets while the backward
 * goes on, and point-to-point transfers on the links. `peak_flops_total` is the
 * peak of all devices (0: unknown, MFU 0). `trace`, when not NULL, is a JSON
 * array that receives Chrome trace events of the predicted timeline. */
int pt_sim_run(const pt_layout *l, const pt_sim_costs *costs, int64_t tokens_per_step,
               double peak_flops_total, json_t *trace, pt_sim_result *out, pt_err *err);

/* ---- Search (planner/search.c) ---------------------------------------------------- */

/* A layout with its predicted memory and time. */
typedef struct {
    pt_layout layout;
    pt_memory memory;
    double estimate_s;          /* closed-form step time that chose it for simulation */
    pt_sim_result predicted;    /* the full simulation */
} pt_candidate;

typedef struct {
    pt_enum_counts counts;
    int64_t priced;             /* layouts that fit, all priced and estimated */
    pt_candidate *best;         /* the simulated ones, fastest first */
    int64_t n_best;
    pt_candidate *over;         /* the fastest valid layouts that do not fit (within
                                   PT_SEARCH_OVER_FACTOR of the memory limit), simulated */
    int64_t n_over;
} pt_search_result;
#define PT_SEARCH_OVER_FACTOR 1.5
#define PT_SEARCH_OVER_SHOWN 3

/* The peak FLOP/s of all devices of the cluster in the training precision's
 * compute type (0 when the spec does not know it). */
double pt_peak_flops_total(const pt_cluster *c, const pt_train *t);

/* Prices and simulates one layout; memory figures too. trace may be NULL. */
int pt_evaluate(const pt_model *m, const pt_cluster *c, const pt_train *t, const pt_costdb *db,
                const pt_layout *l, json_t *trace, pt_candidate *out, pt_err *err);

/* Enumerates every layout, prices and estimates each one that fits, simulates the
 * `sim_top` with the best estimates in full (0: all) and sorts those by predicted
 * step time. The caller frees with pt_search_free. */
int pt_search(const pt_model *m, const pt_cluster *c, const pt_train *t,
              const pt_enum_opts *o, const pt_costdb *db, int64_t sim_top,
              pt_search_result *out, pt_err *err);
void pt_search_free(pt_search_result *r);

/* ---- plan.json (planner/plan.c) ------------------------------------------------- */

#define PT_PLAN_FORMAT_VERSION 1

/* The settings ptrun trains with, beside the layout. */
typedef struct {
    int64_t steps;
    double lr, min_lr;       /* peak and final learning rate (cosine decay) */
    int64_t warmup_steps;
    double weight_decay;
    double grad_clip;        /* global gradient-norm clip; 0 = none */
    double dropout;          /* dropout probability on the embedding and the residual
                                branches (GPT-2 trained with 0.1); 0 = none */
    uint64_t seed;
    char data[512];          /* token file or text file; "" = ptrun's built-in corpus */
} pt_run_opts;

/* Defaults for model `m` (NULL: a GPT-2-small-sized one): the peak learning rate
 * GPT-3 used at that size, a tenth of it at the end, 10 warm-up steps, weight decay
 * 0.1, clipping at 1, seed 1234. */
void pt_run_opts_default(pt_run_opts *r, const pt_model *m);

typedef struct {
    int format_version;
    char created_by[64];
    pt_model model;
    pt_cluster cluster;
    pt_layout layout;
    pt_train train;
    pt_run_opts run;
    pt_memory memory;          /* predicted, the largest stage */
    pt_sim_result predicted;
    pt_costdb_id costs;        /* the cost table the prediction used */
} pt_plan;

/* Writes `p` as JSON to `path` through a temporary file renamed when complete, so a
 * failure never leaves a half-written plan. */
int pt_plan_write(const pt_plan *p, const char *path, pt_err *err);
/* Reads and validates every field (types, ranges, the layout's rules against the
 * model and cluster); errors name the file and the field. */
int pt_plan_read(const char *path, pt_plan *out, pt_err *err);
int pt_plan_from_json(const char *text, const char *origin, pt_plan *out, pt_err *err);
json_t *pt_plan_json(const pt_plan *p);
json_t *pt_sim_result_json(const pt_sim_result *r);

/* ---- JSON forms of planner results (planner/report.c) ------------------------- */

/* New references (caller owns them); NULL only when out of memory. Field names
 * are part of ptplan's documented --json output and of plan.json. */
json_t *pt_layout_json(const pt_layout *l);
json_t *pt_memory_json(const pt_memory *mem);

/* ---- Pipeline transfers on NCCL (planner/sched_nccl.c) ------------------------ */

/* How a runtime issues a schedule's sends and receives to NCCL, whose point-to-point
 * calls have no tags and block their stream until the peer's matching call runs
 * (NCCL user guide, "Point-to-point communication"). Receives go on the kernel
 * stream, in program order, under both policies. */
typedef enum {
    PT_P2P_GROUPED,     /* each send queued, then issued in one NCCL group with the
                           rank's next receive on the kernel stream (the rest before
                           the optimizer step) */
    PT_P2P_SEND_STREAM, /* each send copied on the kernel stream after the kernels that
                           produced it, then its own NCCL operation on a send stream,
                           started by an event recorded after the copy */
    PT_P2P_SERIAL,      /* each send its own operation, but run in issue order with the
                           receives: what NCCL makes of a send stream and a kernel
                           stream sharing one communicator */
    PT_P2P_POLICY_COUNT
} pt_p2p_policy;
const char *pt_p2p_policy_name(pt_p2p_policy p); /* "grouped", "send-stream", "serial" */

typedef struct {
    pt_p2p_policy policy;
    /* PT_P2P_SEND_STREAM: the copies a rank's sends use, in turn; the copy for its
     * send j waits on the kernel stream until send j - send_slots has completed.
     * 0: as many as there are sends. */
    int send_slots;
} pt_p2p_issue;

/* Replays every rank's transfers of `s` as issued under `how`, under NCCL's blocking
 * semantics: each stream a FIFO; a send and its receive (the k-th send from a to b
 * meets the k-th receive b posts from a) both execute, blocking their streams, until
 * the other is executing too; grouped calls progress together. 0 when every stream
 * runs to its end. Errors: the programs fail pt_sched_check (its error); a send that
 * would meet a receive of other data; a deadlock, naming each rank's stream and the
 * instructions it is stuck at. */
int pt_sched_check_nccl(const pt_sched *s, const pt_p2p_issue *how, pt_err *err);

#ifdef __cplusplus
}
#endif
#endif
