/*
 * The planner's inputs, none of which depends on a layout: the model spec with its
 * parameter counts and PowerSGD's matrices (planner/model.c, params.c), the cluster
 * spec (cluster.c), the software stack that runs a step (stack.c), the compute backend
 * a cluster trains on (caps.c), and the training settings: precision, batch, gradient
 * buckets, stack (train.c). Each spec has built-ins and a JSON form.
 */
#ifndef PT_PLANNER_SPEC_H
#define PT_PLANNER_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* The cost table a cluster spec is completed from (costmodels/cost.h). */
typedef struct pt_costdb pt_costdb;

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Model spec -------------------------------------------------------------- */

typedef enum { PT_NORM_LAYERNORM, PT_NORM_RMSNORM } pt_norm;
typedef enum { PT_ACT_GELU, PT_ACT_SWIGLU } pt_act;
/* ALiBi (Press et al. 2022, BLOOM, MPT): no position embedding; a per-head linear bias
 * added to the attention scores inside the attention kernel, so no op of its own. */
typedef enum { PT_POS_LEARNED, PT_POS_ROPE, PT_POS_ALIBI } pt_pos;

/* How a mixture-of-experts router scores the experts from its logits: softmax over
 * all experts (Mixtral, Qwen3, gpt-oss) or a sigmoid of each (DeepSeek-V3). */
typedef enum { PT_ROUTER_SOFTMAX, PT_ROUTER_SIGMOID } pt_router_score;

/* The mixture-of-experts part of a model (Shazeer et al. 2017; Fedus et al. 2022,
 * "Switch Transformers"): in an MoE layer the MLP is replaced by `experts` MLPs of
 * inner size expert_ffn, of which a router picks top_k per token, and the token's
 * output is their sum weighted by the router's scores; shared experts (DeepSeek) see
 * every token. experts = 0: a dense model (every other field 0). */
typedef struct {
    int64_t experts;        /* E */
    int64_t top_k;          /* experts per token */
    int64_t expert_ffn;     /* inner size of one expert's MLP (per branch for SwiGLU) */
    int64_t shared_experts; /* experts every token goes through (0: none) */
    int64_t shared_ffn;     /* inner size of one shared expert */
    int64_t first_dense;    /* the first layers are dense (DeepSeek's first_k_dense) */
    int64_t every;          /* of the layers after them, layer i is MoE when i % every
                               == 0 (Megatron-Core's --moe-layer-freq N); 1: all */
    pt_router_score score;
    bool renorm;            /* the top-k scores renormalised to sum to 1 */
    double aux_loss;        /* load-balancing loss coefficient (Switch's alpha); 0: none */
    double capacity;        /* capacity factor: an expert takes at most capacity·T·k/E
                               of T tokens' assignments, the rest are dropped; 0:
                               dropless */
} pt_moe;

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
    int64_t head_dim;     /* d; 0: h/a. Read it through pt_model_head_dim */
    bool qk_norm;         /* an RMSNorm over each head of q and of k before RoPE (Qwen3) */
    int64_t window;       /* banded (sliding-window) attention: a query attends to itself
                             and the window-1 keys before it; 0: every layer full */
    int64_t window_full_every; /* with a window, layer i attends in full when (i+1) %
                             window_full_every == 0 (Megatron-Core's
                             --window-attn-skip-freq N: N-1 banded, then one full);
                             0: every layer banded */
    bool attn_sinks;      /* a learned logit per head in each softmax's denominator
                             (gpt-oss's attention sinks) */
    pt_moe moe;           /* moe.experts = 0: dense */
} pt_model;

/* d: the head size, head_dim or h/a. Attention's width a·d may differ from h (Qwen3:
 * 64 heads of 128 on h = 4096). */
int64_t pt_model_head_dim(const pt_model *m);
/* Whether layer i (0-based) of m is a mixture-of-experts layer, and how many of the
 * `count` layers from `first` are. */
bool pt_model_layer_moe(const pt_model *m, int64_t i);
int64_t pt_model_moe_layers(const pt_model *m, int64_t first, int64_t count);
/* Whether layer i attends in a band of m->window keys. */
bool pt_model_layer_window(const pt_model *m, int64_t i);
/* The kinds of layer a model may mix, as bits: PT_LAYER_MOE (a mixture of experts),
 * PT_LAYER_WINDOW (banded attention); 0 a dense layer of full attention. */
enum { PT_LAYER_MOE = 1, PT_LAYER_WINDOW = 2, PT_LAYER_KINDS = 4 };
int pt_model_layer_kind(const pt_model *m, int64_t i);
/* How many of the `count` layers from `first` are of each kind (n[PT_LAYER_KINDS]). */
void pt_model_layer_kinds(const pt_model *m, int64_t first, int64_t count,
                          int64_t n[PT_LAYER_KINDS]);

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
 * (PT_BUF_VMASK; runtime/tensors.c, alloc_head: a bias of -inf on the rows
 * pt_vocab_padded adds): the rank's vocabulary slice when the vocabulary is padded,
 * else 0. */
int64_t pt_vocab_mask_elems(const pt_model *m, int tp);
/* v rounded up to a multiple of `multiple` (times t when per_tp), then of t. */
int64_t pt_vocab_round(const pt_model *m, int tp, int64_t multiple, bool per_tp);
int64_t pt_params_layer(const pt_model *m, int tp);       /* one dense transformer layer */
/* A mixture-of-experts layer on one rank: what is not an expert (attention, norms, the
 * router, shared experts: reduced over dp×cp like a dense layer), the experts (E/ep of
 * them, each split over etp: reduced over the expert-data-parallel group), and both. */
int64_t pt_params_moe_layer_dense(const pt_model *m, int tp);
int64_t pt_params_experts(const pt_model *m, int ep, int etp);
int64_t pt_params_moe_layer(const pt_model *m, int tp, int ep, int etp);
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
int64_t pt_model_params_active(const pt_model *m);        /* ... with top_k experts of each
                                                             MoE layer: what a token uses */
/* Parameters of a part of the model on one tensor-parallel rank: `layers` transformer
 * layers, with the embedding when `first` and the final norm and head when `last`
 * (pp decides whether a tied head is a copy). The one count that the memory model
 * (a pipeline stage), the simulator (a virtual stage) and the runtime's parameter
 * table (checked against it) all use. */
int64_t pt_params_part(const pt_model *m, int tp, int pp, int64_t layers, bool first,
                       bool last);
/* (pt_params_part counts dense layers; a stage of a model with experts: layout.h's
 * pt_stage_params.) */

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
/* The weight elements of one transformer layer's linear layers on a tp rank (the
 * matrices of pt_psgd_layer_matrices), and how many linear layers it has (6, or 7 with
 * a gated MLP) into *count when count is non-NULL. */
double pt_layer_linear_elems(const pt_model *m, int tp, int *count);
/* PowerSGD's groups, the one rule runtime/compress.c forms them by and
 * planner/ops_step.c prices them by: compressed matrices, taken from the chunk's
 * end down, join the open group, whose P and Q are each all-reduced at once; the
 * group closes once it holds at least `bucket` elements. Adds a (rows, cols) matrix
 * to the open group's *acc and says whether that closes it (*acc is then 0, for the
 * next group). */
bool pt_psgd_group_closes(int64_t *acc, int64_t rows, int64_t cols, int64_t bucket);

/* ---- Cluster spec ------------------------------------------------------------ */

typedef struct {
    char name[64];
    double peak_flops[PT_DTYPE_COUNT]; /* dense FLOP/s; 0 = not supported / not yet profiled */
    int64_t memory_bytes;
    double memory_bw_Bps;              /* bytes per second */
    int sm_count;                      /* streaming multiprocessors (GEMM waves); 0 unknown */
    double gemm_max_eff;               /* best measured GEMM rate, share of peak; 0 unknown */
    double gemm_max_eff_fp8;           /* ... of FP8 GEMMs, share of the fp8 peak; 0: as
                                          gemm_max_eff */
} pt_device;

typedef struct {
    char name[64];
    double bw_Bps;    /* per device per direction, bytes per second; 0 = not yet profiled */
    double latency_s;
    double busbw_Bps; /* NCCL's achievable bus bandwidth per device (0: the line rate) */
    double allreduce_busbw_Bps; /* all-reduce bus bandwidth where it differs (NVLink
                                   SHARP); 0: busbw_Bps */
    int nics;          /* inter-node link only: NICs per node on this fabric; 0 unstated */
    double nic_bw_Bps; /* ... bytes/s per NIC per direction; 0 unstated. When read from
                          JSON without "bandwidth", bw_Bps = nics·nic_bw_Bps/devices */
} pt_link;

typedef struct {
    char name[64];
    int nodes;
    int devices_per_node;
    int nvlink_domain; /* devices one NVLink fabric joins: whole nodes, a multiple of
                          devices_per_node (72 on a GB200 NVL72 rack of 4-GPU nodes);
                          ranks r and r' share one when r / D == r' / D. 0: the node */
    pt_device device;
    pt_link intra; /* between devices of one NVLink domain */
    pt_link inter; /* between NVLink domains, through the nodes' NICs */
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
/* Devices per NVLink domain (nvlink_domain, or the node when 0). Every rule and price
 * that means "over NVLink" asks this, never devices_per_node: how far a tensor-parallel
 * group may reach (planner/layout.c), and which link a collective or a pipeline send
 * takes (planner/ops.c, sim.c). devices_per_node stays the node: its NICs, its host. */
static inline int pt_cluster_nvlink_domain(const pt_cluster *c)
{
    return c->nvlink_domain > 0 ? c->nvlink_domain : c->devices_per_node;
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

/* How a stack runs the FP8 scaling around its FP8 GEMMs (planner/ops.c prices it):
 * - per_gemm: each GEMM op quantizes its own two operands, as ptrun's runtime does
 *   (kernels.h's fp8_amax, fp8_scale, fp8_cast; transposes written where the GEMM reads
 *   an operand K-major the other way) and torchao's Float8Linear under torchtitan;
 * - te: Transformer Engine's linear modules: the input cast with its transpose in one
 *   fused kernel once per module and micro-batch, the weights cast once per step and
 *   cached across micro-batches, the output gradient cast with its transpose once per
 *   module; delayed scaling's amax taken inside those casts. */
typedef enum { PT_FP8_CASTS_PER_GEMM, PT_FP8_CASTS_TE, PT_FP8_CASTS_COUNT } pt_fp8_casts;
const char *pt_fp8_casts_name(pt_fp8_casts c); /* "per_gemm", "te" */

/* Where a stack's attention is the kernel ptrun's CUDA backend runs (cuDNN's fused flash
 * attention): on devices whose name starts with `device` ("*" matches all), its forward,
 * its backward or both. */
typedef struct {
    char device[32];
    bool fwd, bwd;
} pt_ptrun_attn;

typedef struct {
    char name[64];
    char about[256];               /* which software and version it describes, and sources */
    pt_attn_impl attention;
    int n_attn_eff;
    pt_attn_eff attn_eff[PT_STACK_MAX_ATTN_EFF]; /* first matching prefix wins */
    /* what the stack can run at all */
    bool tp, pp, cp, sp;           /* tensor, pipeline, context parallelism, sequence par. */
    unsigned cp_comms;             /* bit k set: cp_comm k (pt_cp_comm) runs; p2p alone
                                      when a stack file leaves it out */
    bool cp_a2a_kv_replicate;      /* the all-to-all replicates KV heads fewer than its
                                      degree (else they must divide by it) */
    unsigned moe_dispatches;       /* bit k set: mixtures of experts run, with
                                      moe_dispatch k (pt_moe_dispatch); 0: no MoE */
    unsigned zero_stages;          /* bit z set: ZeRO stage z offered */
    unsigned recompute_modules;    /* bit r set: module r (pt_rmod) may be named in a
                                      recompute list (Megatron-Core's --recompute-modules);
                                      0: no lists, only none, selective and full */
    /* overlaps: which exist, and the default of each layout key */
    bool tp_overlap;               /* TP communication beside the GEMMs (needs sp) */
    bool tp_overlap_rs;            /* the reduce-scatters too, not only the all-gathers */
    double tp_overlap_reach;       /* share of that communication the GEMMs hide */
    bool tp_backward_async;        /* without tp_overlap too: a column-parallel backward's
                                      input gather beside its data-gradient GEMM, its
                                      input gradient's reduce-scatter (all-reduce without
                                      sp) beside its weight-gradient GEMM */
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
    double moe_host_sync_s;        /* per forward of a mixture-of-experts layer (and per
                                      recomputation of its dispatch): the device's idle
                                      time at the dispatcher's wait for the tokens'
                                      counts on the host (ops.c's moe_sync); 0: none */
    pt_kernel_style kernels;       /* norms, RoPE, activation: fused or eager */
    pt_selective selective;        /* what recompute=selective rebuilds */
    int grouped_gemm_streams;      /* a mixture of experts' grouped GEMM: one GEMM per
                                      expert, on this many streams at once (0 or 1: one
                                      after another) */
    bool fused_epilogues;          /* the residual add inside the next norm's kernel and,
                                      for GELU models, the GELU and its derivative in the
                                      MLP GEMMs' epilogues (ptrun: cuBLASLt's) */
    /* Which of its kernels are the very library calls ptrun makes, so that a profile of
     * ptrun's kernels (a shipped one, the user's costs.db) prices them for this stack too
     * (planner/sim.c); its other kernels are its own and priced analytically. ptrun's
     * own stack runs ptrun's kernels throughout. */
    unsigned ptrun_gemm_roles;     /* bit r: its GEMM of role r (pt_gemm_role) is ptrun's
                                      cuBLAS call: same operand layout, output type and
                                      epilogue */
    int n_ptrun_attn;
    pt_ptrun_attn ptrun_attn[PT_STACK_MAX_ATTN_EFF]; /* first matching prefix wins */
    /* FP8 training (pt_train.fp8): the recipes the stack runs (bit r: pt_fp8_recipe r;
     * 0: no FP8), the one --precision fp8 picks, and how its casts run */
    unsigned fp8_recipes;
    int fp8_default;               /* a pt_fp8_recipe; PT_FP8_OFF when fp8_recipes is 0 */
    pt_fp8_casts fp8_casts;
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
/* The vocabulary as stack s pads it under tensor parallelism tp: rounded up to a
 * multiple of vocab_multiple·tp (Megatron-LM's --make-vocab-size-divisible-by), or to
 * a multiple of vocab_multiple and then of tp (ptrun: pt_vocab_padded). */
int64_t pt_stack_vocab(const pt_stack *s, const pt_model *m, int tp);
/* The efficiency the stack's flash attention reaches on `device` (fwd or bwd); 0
 * when no entry matches. */
double pt_stack_attn_eff(const pt_stack *s, const char *device, bool backward);
/* Whether the stack's GEMM of role `role` (a pt_gemm_role), and its attention's forward
 * or backward on `device`, are the kernels ptrun runs: then a profile of ptrun's kernels
 * prices them for this stack. Always true for ptrun's own stack. */
bool pt_stack_ptrun_gemm(const pt_stack *s, int role);
bool pt_stack_ptrun_attn(const pt_stack *s, const char *device, bool backward);

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

/* ---- Training settings (planner/train.c) --------------------------------------- */

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
/* The dtype whose peak FLOP/s a precision's GEMMs run at: fp32 for fp32, else bf16. */
pt_dtype pt_prec_dtype(pt_prec_kind k);
/* Whether cluster c can be planned in precision p: the device's peak for
 * pt_prec_dtype(p) must be > 0, unless the spec gives no peak at all (not yet
 * profiled, as `local`: the cost model's defaults price it). Else -1 with err naming
 * the cluster, the field (device.peak_flops.fp32) and the precision. */
int pt_cluster_check_precision(const pt_cluster *c, pt_prec_kind p, pt_err *err);

/* FP8 training: the transformer layers' linear layers (forward, data and weight
 * gradients) compute in FP8, E4M3 in the forward and E5M2 for gradients (the hybrid
 * format of Transformer Engine's recipes); the embedding, the output layer, attention
 * and the norms stay in the storage precision. The recipe says how each tensor's scale
 * is chosen: per tensor from its own amax (current), from an amax history (delayed),
 * per 1x128 / 128x128 block (blockwise, DeepSeek-V3's) or per row (rowwise,
 * torchtitan's). PT_FP8_OFF: no FP8. */
typedef enum { PT_FP8_OFF, PT_FP8_CURRENT, PT_FP8_DELAYED, PT_FP8_BLOCKWISE, PT_FP8_ROWWISE,
               PT_FP8_COUNT } pt_fp8_recipe;
extern const char *const pt_fp8_recipe_names[PT_FP8_COUNT]; /* "off", "current", "delayed", ... */
const char *pt_fp8_recipe_name(pt_fp8_recipe r);
int pt_fp8_recipe_parse(const char *text, pt_fp8_recipe *out, pt_err *err);

/* The longest amax history a plan may ask for (TE's default is 1024). */
#define PT_FP8_MAX_HISTORY 65536

typedef struct {
    pt_fp8_recipe recipe;   /* [off] */
    int history;            /* delayed: the amax history's length */
    bool emulated;          /* FP8 values computed in the storage precision on a device
                             * without FP8 peak (the CPU backend), asked for explicitly */
    bool param_gather;      /* the layers' linear weights held and all-gathered in FP8
                             * (Megatron-Core's --fp8-param-gather: the model built under
                             * Transformer Engine's fp8_model_init, one byte an element
                             * where bf16 keeps two, and the distributed optimizer's
                             * all-gather of the updated weights moves those bytes) */
} pt_fp8;

/* ptrun's FP8 scaling state for `layers` transformer layers of model m under f, in
 * floats: three tensors (input, weight, output gradient) per linear layer, each a meta
 * block of PT_FP8_META_FLOATS (kernels.h's PT_KFP8_META: scale, its inverse, amax and
 * two counts) and, under delayed scaling, the amax history; 0 with FP8 off. The
 * runtime allocates exactly this (runtime/fp8.c) and the memory model counts it. */
enum { PT_FP8_META_FLOATS = 5 };
int64_t pt_fp8_meta_floats(const pt_model *m, const pt_fp8 *f, int64_t layers);

/* Settings of a training job that the planner needs besides model and layout. */
typedef struct {
    int64_t global_batch;   /* sequences per optimizer step */
    pt_prec_kind precision;
    pt_fp8 fp8;             /* FP8 GEMMs on top of the precision [off] */
    int64_t bucket_bytes;   /* gradient-reduction bucket (PyTorch DDP default: 25 MiB) */
    pt_stack stack;         /* the software that runs the step [ptrun] */
    double moe_imbalance;   /* mixtures of experts: the busiest rank's share of the
                               experts' tokens over the mean, >= 1 (1: balanced, as
                               published benchmarks force the router) [1] */
    /* A correction learned from measured runs of this stack on this device (calib.h),
     * applied to every prediction pt_evaluate makes; NULL: zero-shot [NULL]. */
    const struct pt_calib *calib;
} pt_train;

void pt_train_default(pt_train *t, const pt_cluster *c);

/* Whether t trains the layers' linear layers in FP8. */
static inline bool pt_train_fp8(const pt_train *t)
{
    return t->fp8.recipe != PT_FP8_OFF;
}
/* Whether FP8 training as t asks it can be planned on cluster c: the recipe is one
 * t->stack runs, history >= 1, and the device has an FP8 peak (device.peak_flops.fp8)
 * unless emulated, which is for a device without one only. 0 when FP8 is off; else -1
 * with err naming the value and what is accepted. */
int pt_train_check_fp8(const pt_train *t, const pt_cluster *c, pt_err *err);
/* A run record's or ptcalib's precision word into t (its stack and storage precision
 * already set): "bf16", "bf16-grad16", "fp32", or "fp8" (FP8 GEMMs over the storage
 * precision, the stack's default recipe) and "fp8:RECIPE"; errors name the word. */
int pt_train_precision_parse(const char *text, pt_train *t, pt_err *err);
/* The word pt_train_precision_parse reads back: the storage precision's name, "fp8", or
 * "fp8:RECIPE" where the recipe is not the stack's default. */
void pt_train_precision_word(const pt_train *t, char *buf, size_t n);
/* "bf16", or "bf16+fp8(delayed)" with FP8 ("+fp8(current, emulated)" emulated). */
void pt_train_precision_text(const pt_train *t, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
