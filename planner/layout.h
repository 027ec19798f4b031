/*
 * A layout and the rules that decide whether it can run (planner/layout.c, stack.c):
 * the parallel sizes, ZeRO stage, micro-batch, recomputation, schedule, compression and
 * rank order with their string form; the validity rules with their reasons; how a
 * layout splits the model's layers over pipeline stages; and whether a stack runs it.
 */
#ifndef PT_PLANNER_LAYOUT_H
#define PT_PLANNER_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Layout ------------------------------------------------------------------ */

typedef enum { PT_RECOMPUTE_NONE, PT_RECOMPUTE_SELECTIVE, PT_RECOMPUTE_FULL,
               PT_RECOMPUTE_COUNT } pt_recompute;
typedef enum { PT_SCHED_AFAB, PT_SCHED_1F1B, PT_SCHED_INTERLEAVED, PT_SCHED_COUNT } pt_schedule;
/* Grid dimensions. A rank order lists them fastest-varying first. */
typedef enum { PT_DIM_TP, PT_DIM_CP, PT_DIM_DP, PT_DIM_PP, PT_NDIM } pt_dim;

/* Each enum's names, in enum order: the layout string's and plan.json's spellings. */
extern const char *const pt_recompute_names[PT_RECOMPUTE_COUNT];
const char *pt_recompute_name(pt_recompute r);

/* Megatron-Core's --recompute-modules: what recompute=selective runs again before each
 * layer's backward when the layout names a list (recompute=layernorm+moe_act) instead of
 * the stack's own selective policy (megatron/core/transformer/transformer_config.py,
 * recompute_modules): core_attn the attention core; layernorm the norms that are modules
 * of their own (a mixture's pre-MLP norm: the others are fused into the next GEMM);
 * mlp a dense layer's MLP; moe_act the experts' activation; moe a mixture's whole
 * routed block, router to combine. */
typedef enum { PT_RMOD_CORE_ATTN, PT_RMOD_LAYERNORM, PT_RMOD_MLP, PT_RMOD_MOE_ACT, PT_RMOD_MOE,
               PT_RMOD_COUNT } pt_rmod;
extern const char *const pt_rmod_names[PT_RMOD_COUNT]; /* "core_attn", "layernorm", "mlp", ... */
const char *pt_rmod_name(pt_rmod r);
/* Every module's name, ", "-joined, into buf (n bytes): the choices an error lists. */
void pt_rmod_choices(char *buf, size_t n);
extern const char *const pt_schedule_names[PT_SCHED_COUNT];
const char *pt_schedule_name(pt_schedule s);
const char *pt_dim_name(pt_dim d);
extern const char *const pt_dp_overlap_names[PT_DPO_COUNT];
const char *pt_dp_overlap_name(pt_dp_overlap o); /* "none", "last", "backward" */

/* How context parallelism communicates around attention, with Megatron-Core's
 * --cp-comm-type meanings (megatron/core/transformer/transformer_config.py):
 * p2p: K/V blocks travel a ring of the cp ranks beside the attention compute (ring
 *   attention); all_gather: the full K/V gathered before attention, not overlapped;
 * a2a: DeepSpeed-Ulysses (Jacobs et al. 2023): an all-to-all over the cp group turns
 *   "my tokens, all heads" into "all tokens, my heads" for q, k and v, attention runs
 *   locally, and a second all-to-all turns the output back;
 * a2a+p2p: all-to-all inside groups of cp_a2a consecutive cp ranks (an NVLink domain)
 *   and the ring across those groups (--hierarchical-context-parallel-sizes
 *   cp_a2a cp/cp_a2a). */
typedef enum { PT_CPC_P2P, PT_CPC_ALLGATHER, PT_CPC_A2A, PT_CPC_A2A_P2P,
               PT_CPC_COUNT } pt_cp_comm;
extern const char *const pt_cp_comm_names[PT_CPC_COUNT];
const char *pt_cp_comm_name(pt_cp_comm k); /* "p2p", "all_gather", "a2a", "a2a+p2p" */

/* How a mixture-of-experts layer moves tokens to the experts' ranks and back, with
 * Megatron-Core's --moe-token-dispatcher-type meanings
 * (megatron/core/transformer/moe/token_dispatcher.py): alltoall: each rank sends each
 * token's copies to the ranks of their experts over the ep group (an all-to-all with
 * counts per rank) and back; allgather: every rank gathers all the ep group's tokens,
 * keeps those for its experts, and the outputs are summed back by a reduce-scatter;
 * flex: DeepEP's kernels (DeepSeek-AI 2025, github.com/deepseek-ai/DeepEP), which send a
 * token over the network once to each other node holding some of its experts and
 * forward it inside that node over NVLink, and combine the same way back. */
typedef enum { PT_MOED_ALLTOALL, PT_MOED_ALLGATHER, PT_MOED_FLEX,
               PT_MOED_COUNT } pt_moe_dispatch;
extern const char *const pt_moe_dispatch_names[PT_MOED_COUNT];
const char *pt_moe_dispatch_name(pt_moe_dispatch k); /* "alltoall", "allgather", "flex" */
/* The dispatchers stack s runs, as "alltoall, flex", into buf (n bytes). */
void pt_stack_moe_dispatch_text(const pt_stack *s, char *buf, size_t n);

/* Compression of the data-parallel gradient reduction (ZeRO 0 and 1 buckets):
 * none; bf16 (each bucket rounded to bf16 for the reduction and widened back, as
 * PyTorch DDP's bf16_compress_hook); powersgd (rank-r PowerSGD, Vogels et al. 2019,
 * "PowerSGD: Practical Low-Rank Gradient Compression for Distributed Optimization",
 * NeurIPS: each weight matrix M reduced as P = MQ and Q = M^T P, with error feedback
 * and warm-started Q; 1-D tensors, the embedding and the head stay uncompressed). */
typedef enum { PT_COMPRESS_NONE, PT_COMPRESS_BF16, PT_COMPRESS_POWERSGD,
               PT_COMPRESS_COUNT } pt_compress;
extern const char *const pt_compress_names[PT_COMPRESS_COUNT];
const char *pt_compress_name(pt_compress c); /* "none", "bf16", "powersgd" */
/* PowerSGD's defaults: rank 4 (Vogels et al. 2019 train their transformer language
 * model at rank 4, Table 8) and 10 uncompressed steps first (PyTorch's
 * PowerSGDState advises starting after the learning-rate warm-up). */
enum { PT_POWERSGD_RANK = 4, PT_POWERSGD_START = 10, PT_POWERSGD_MAX_RANK = 1024 };
/* Virtual pipeline stages (chunks) one pipeline rank runs at most: the runtime keeps
 * per-chunk tables of this size, and a larger vp is a bad value (pt_layout_check). */
enum { PT_CHUNK_MAX = 64 };

/* A pipeline layout in Megatron-Core's terms (planner/pipeline.c): the transformer
 * layers of each virtual stage (vs = chunk·p + pipeline rank), as runs of consecutive
 * virtual stages that hold the same number; the embedding opens virtual stage 0 and
 * the output layer with the loss closes the last, so a stage may hold only one of
 * them, or nothing. n = 0: no pipeline layout (first_layers/last_layers say it). */
enum { PT_PIPE_RUNS = 16 };
typedef struct {
    int32_t layers, stages;
} pt_pipe_run;
typedef struct {
    int n;
    pt_pipe_run run[PT_PIPE_RUNS];
} pt_pipe;

typedef struct {
    int tp, cp, pp, dp;     /* t, c, p, d: tp·cp·pp·dp = world size */
    pt_cp_comm cp_comm;     /* how cp communicates around attention [p2p] */
    int cp_a2a;             /* a2a+p2p: the all-to-all groups' size (a divisor of cp);
                               0 with the other kinds (pt_layout_a2a says the degree) */
    int ep, etp;            /* mixture of experts: expert parallel (the experts split
                               ep ways) and expert tensor parallel (each expert's MLP
                               split etp ways), folded over the same ranks as tp·cp·dp
                               (Megatron-Core's parallel folding); the expert-data-
                               parallel size edp = tp·cp·dp/(ep·etp) (pt_layout_edp) */
    pt_moe_dispatch moe_dispatch; /* how tokens reach the experts [alltoall] */
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
    pt_pipe pipe;           /* a pipeline layout (pipe.n > 0) in place of the above */
    int zero;               /* ZeRO stage 0..3, sharding over the dp×cp group */
    pt_compress compress;   /* gradient compression of the dp·cp reduction [none] */
    int powersgd_rank;      /* r of compress=powersgd [PT_POWERSGD_RANK] */
    int64_t powersgd_start; /* the first step compressed by PowerSGD (the steps before
                               are reduced uncompressed) [PT_POWERSGD_START] */
    int64_t mbs;            /* b: micro-batch size */
    int64_t n_micro;        /* micro-batches per step per data-parallel rank */
    pt_recompute recompute;
    unsigned recompute_modules; /* recompute=selective: the pt_rmod bits of the modules
                               it runs again; 0: the stack's own selective policy */
    pt_schedule schedule;
    pt_dim order[PT_NDIM];  /* rank order, fastest first; default tp-cp-dp-pp */
} pt_layout;

/* The default layout: every size 1, zero 0, mbs 1, no recompute, 1F1B, tp-cp-dp-pp,
 * cp_comm p2p. */
void pt_layout_default(pt_layout *l);

/* Parses "tp=8,pp=4,vp=2,cp=1,dp=2,zero=1,mbs=1,recompute=selective,sp=1,
 * schedule=interleaved,order=tp-cp-dp-pp,pipeline=E|(t*2|)*6tL,cp_comm=a2a+p2p,
 * cp_a2a=2". Keys left out keep the value in `l`, except: dp is derived from `world`
 * when absent (world <= 0: dp stays), cp_a2a is 0 unless cp_comm=a2a+p2p (given with
 * another kind, an error; a2a+p2p needs it), vp from a pipeline layout's stages when absent, schedule becomes interleaved
 * when vp > 1 and is not given, and n_micro is derived from `global_batch` when > 0.
 * A pipeline layout's commas (which Megatron-Core reads as spacing) may stay: an item
 * with no '=' after pipeline= continues it. Unknown keys, bad values and repeated keys
 * are errors. */
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
/* A step's schedule holds at most this many (micro-batch, chunk) pairs over its
 * pipeline: the simulator's and the checker's tables grow with it, and no real step
 * comes near (a batch of 2^24 sequences is what a batch given in tokens by mistake
 * makes). */
#define PT_MAX_SCHED_PAIRS (INT64_C(1) << 24)
/* The degree of context parallelism's all-to-all: cp with cp_comm=a2a, cp_a2a with
 * a2a+p2p, 1 (none) with p2p and all_gather. The ring around it has cp/that members. */
int pt_layout_a2a(const pt_layout *l);
/* The expert-data-parallel size, tp·cp·dp/(ep·etp): the ranks holding the same experts,
 * over which their gradients are reduced and ZeRO shards their optimizer (1 when ep·etp
 * does not divide, which rule ep_fold rejects). */
int pt_layout_edp(const pt_layout *l);
/* Whether the layout runs module r again before the backward: a module its list names,
 * or the attention core under the stack's own selective policy (no list). */
bool pt_layout_recomputes(const pt_layout *l, pt_rmod r);
/* The recompute setting as layouts write it: none, selective, full, or the modules joined
 * by '+' ("layernorm+moe_act"). */
void pt_layout_recompute_text(const pt_layout *l, char *buf, size_t n);
/* Parses a recompute value (as pt_layout_recompute_text writes it) into l. */
int pt_layout_parse_recompute(const char *val, pt_layout *l, pt_err *err);
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
    PT_REJECT_CP_COMM_NO_CP,      /* cp_comm other than p2p with c = 1 */
    PT_REJECT_CP_A2A,             /* cp_a2a does not divide c, or does not fit cp_comm */
    PT_REJECT_HEADS_CP_A2A,       /* a/t not divisible by the all-to-all degree */
    PT_REJECT_KV_HEADS_CP_A2A,    /* k/t neither divisible by nor dividing that degree */
    PT_REJECT_EP_DENSE,           /* ep or etp > 1 on a model without experts */
    PT_REJECT_EP_FOLD,            /* ep·etp does not divide tp·cp·dp */
    PT_REJECT_EXPERTS_EP,         /* experts not divisible by ep */
    PT_REJECT_EXPERT_FFN_ETP,     /* an expert's FFN size not divisible by etp */
    PT_REJECT_MOE_SP,             /* experts with tp > 1 and no sequence parallelism */
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
    PT_REJECT_PIPELINE_LAYOUT,    /* the pipeline layout does not fit the model or pp */
    PT_REJECT_COMPRESS_ZERO,      /* gradient compression with ZeRO 2/3 */
    PT_REJECT_COMPRESS_NO_DP,     /* gradient compression with d·c = 1: nothing reduced */
    PT_REJECT_SCHEDULE_SIZE,      /* p·vp·n_micro above PT_MAX_SCHED_PAIRS */
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
 * layout's split (its pipeline layout, else first_layers/last_layers, else the even
 * split), and in *first (may be NULL) the model index of its first layer: virtual
 * stages hold consecutive layers in vs order, so rank 0's chunks are not contiguous
 * with interleaving. Virtual stage 0 also holds the embedding and the last one the
 * output layer and loss; a stage may hold no layer. The memory model, op lists,
 * simulator and runtime all ask this. Meaningful for layouts pt_layout_check accepts;
 * for others a non-negative estimate (the even split rounded up). */
int64_t pt_stage_layers(const pt_model *m, const pt_layout *l, int vs, int64_t *first);
/* Layers pipeline rank r holds over all its chunks. */
int64_t pt_rank_layers(const pt_model *m, const pt_layout *l, int r);
/* Parameters one rank of virtual stage vs holds (its layers, dense or mixtures of
 * experts, with the embedding on the first and the head on the last), and in *experts
 * (may be NULL) how many of them are experts' (sharded and reduced over the expert-data-
 * parallel group, the rest over dp×cp); pt_rank_params: over pipeline rank r's chunks. */
int64_t pt_stage_params(const pt_model *m, const pt_layout *l, int vs, int64_t *experts);
int64_t pt_rank_params(const pt_model *m, const pt_layout *l, int r, int64_t *experts);

/* ---- Pipeline layouts (planner/pipeline.c) ----------------------------------- */

/* Parses Megatron-Core's --pipeline-model-parallel-layout notation ("Et*3|(tt|)*29|L":
 * stages split by '|', E embedding, t transformer layer, L output layer and loss,
 * x*n and (...)*n repeat, commas and blanks ignored) into runs. The embedding must
 * open the first stage and the loss close the last, each once; 'm' (multi-token
 * prediction) is refused as not modelled. The error quotes the text. */
int pt_pipe_parse(const char *text, pt_pipe *out, pt_err *err);
/* The canonical text (no commas: "E|(t|)*126L"), which pt_pipe_parse reads back; at
 * most PT_PIPE_TEXT_MAX bytes with its NUL (16 runs of at most 24 characters). */
#define PT_PIPE_TEXT_MAX 512
void pt_pipe_format(const pt_pipe *p, char *buf, size_t n);
bool pt_pipe_same(const pt_pipe *a, const pt_pipe *b);
int pt_pipe_stages(const pt_pipe *p);      /* virtual stages: pp·vp when it fits */
int64_t pt_pipe_layers(const pt_pipe *p);  /* transformer layers over all stages */
/* Megatron-Core's balanced split with the embedding and/or the loss counted as one
 * layer each (account_for_embedding_in_pipeline_split / _loss_): (L + E + Lo)/(p·vp)
 * units per virtual stage, the first stage's first unit the embedding, the last one's
 * last unit the loss. False when that does not divide or leaves a stage short. */
bool pt_pipe_balanced(int64_t layers, int pp, int vp, bool embedding, bool loss, pt_pipe *out);
/* The split of any layout as a pipeline layout (false when it needs more than
 * PT_PIPE_RUNS runs). */
bool pt_pipe_of_layout(const pt_model *m, const pt_layout *l, pt_pipe *out);
/* Whether pipeline ranks 1 .. p-2 hold the same layers chunk by chunk. */
bool pt_pipe_middle_alike(const pt_model *m, const pt_layout *l);
/* Whether l's pipeline layout fits the model and pp·vp, with every pipeline rank
 * holding something; if not and why is not NULL, one line on what is wrong. */
bool pt_pipe_split_ok(const pt_model *m, const pt_layout *l, char *why, size_t n);

/* pt_layout_parse with the stack's defaults for the keys left out (dp_overlap;
 * param_overlap on for ZeRO 1/2 when the stack offers it), then pt_stack_check_layout. */
int pt_layout_parse_stack(const char *text, int64_t world, int64_t global_batch,
                          const pt_stack *s, pt_layout *l, pt_err *err);

/* Whether stack s can run layout l: the parallelisms, ZeRO stage and overlaps it
 * offers. The error names the layout key and the stack. */
int pt_stack_check_layout(const pt_stack *s, const pt_layout *l, pt_err *err);

/* The cp_comm kinds stack s runs, as "p2p, a2a, a2a+p2p", into buf (n bytes). */
void pt_stack_cp_comms_text(const pt_stack *s, char *buf, size_t n);

/* pt_stack_check_layout, and what depends on model m's shape: KV heads per tp rank
 * fewer than the all-to-all's degree on a stack that does not replicate them
 * (pt_stack.cp_a2a_kv_replicate). */
int pt_stack_check_model(const pt_stack *s, const pt_model *m, const pt_layout *l, pt_err *err);

/* Writes one line on why rule `r` rejects `l`, with the values involved
 * (e.g. "heads (32) are not divisible by tp (3)"). */
void pt_reject_explain(pt_reject r, const pt_model *m, const pt_cluster *c,
                       int64_t global_batch, const pt_layout *l, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
