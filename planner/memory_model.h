/*
 * The per-rank memory model (planner/memory.c, buffers.c): model states by ZeRO stage,
 * the activations a layer keeps, the buffers ptrun allocates per micro-batch, and the
 * peak of each pipeline stage. (Named apart from the C library's <memory.h>, which
 * this folder would hide from every file that has it on its include path.)
 */
#ifndef PT_PLANNER_MEMORY_MODEL_H
#define PT_PLANNER_MEMORY_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Memory model ------------------------------------------------------------ */

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

/* How attention runs on one rank under the layout's cp_comm (planner/buffers.c). With
 * an all-to-all of degree u (pt_layout_a2a) each rank of an all-to-all group holds, for
 * attention, the group's u·T tokens and a/u of its a query heads ("head form"); its KV
 * heads go the same way, k/u each, or, when k < u, one each, every KV head replicated
 * to u/k ranks. The ring then runs over the r = cp/u groups with those blocks; u = 1 is
 * the plain ring, r = 1 the plain all-to-all. */
typedef struct {
    int u, r;           /* all-to-all degree, ring members */
    int64_t tokens;     /* u·T: the tokens attention sees on this rank */
    int64_t heads;      /* a/u query heads */
    int64_t kv_heads;   /* k/u KV heads, or 1 (replicated) */
    int64_t head_dim;
} pt_attn_shape;
pt_attn_shape pt_attn_shape_of(const pt_model *m, const pt_layout *l);

/* The buffers ptrun allocates per micro-batch (planner/buffers.c): the runtime carves
 * its activation slots, head buffers and backward scratch from this list, and the
 * memory model sums it for ptrun's own stack, so the two cannot differ. In order:
 * one layer's kept activations, the rest of a slot, the head, the scratch. */
typedef enum {
    PT_BUF_LN1, PT_BUF_LN1_MEAN, PT_BUF_LN1_RSTD, PT_BUF_Q, PT_BUF_K, PT_BUF_V, PT_BUF_ATT,
    PT_BUF_LSE, PT_BUF_ATTH, PT_BUF_X2, PT_BUF_LN2, PT_BUF_LN2_MEAN, PT_BUF_LN2_RSTD, PT_BUF_GATE,
    PT_BUF_UP, PT_BUF_ACT, PT_BUF_QKN, PT_BUF_QKN_RSTD, PT_BUF_MOE_SCORES, PT_BUF_MOE_IDX,
    PT_BUF_MOE_W, PT_BUF_MOE_POS, PT_BUF_MOE_AUXG, PT_BUF_MOE_XR, PT_BUF_MOE_YP,
    PT_BUF_TOKENS, PT_BUF_TARGETS, PT_BUF_X,
    PT_BUF_LNF, PT_BUF_LNF_MEAN, PT_BUF_LNF_RSTD, PT_BUF_LOGITS, PT_BUF_LOSSES, PT_BUF_VMASK,
    PT_BUF_DRES, PT_BUF_DLN, PT_BUF_DLNS, PT_BUF_GATH, PT_BUF_GDRES, PT_BUF_ROUT,
    PT_BUF_DDROP, PT_BUF_DQ, PT_BUF_DK, PT_BUF_DV, PT_BUF_DQR, PT_BUF_DKR, PT_BUF_DATT,
    PT_BUF_DGATE, PT_BUF_DUP, PT_BUF_DACT, PT_BUF_CE, PT_BUF_DNORM, PT_BUF_DKV,
    PT_BUF_RING0, PT_BUF_RING1, PT_BUF_PART, PT_BUF_PART_LSE, PT_BUF_A2A_SEND,
    PT_BUF_A2A_RECV, PT_BUF_HDATT, PT_BUF_HDQ, PT_BUF_HDK, PT_BUF_HDV, PT_BUF_DQKN,
    PT_BUF_DQKNORM, PT_BUF_MOE_LOGITS, PT_BUF_MOE_SRC, PT_BUF_MOE_COUNTS, PT_BUF_MOE_TOK,
    PT_BUF_MOE_RECV, PT_BUF_MOE_EM, PT_BUF_MOE_EG, PT_BUF_MOE_DW, PT_BUF_MOE_PERM, PT_BUF_MOE_INVPERM,
    PT_BUF_MOE_DROUTER,
    PT_BUF_FP8_A,
    PT_BUF_FP8_B,
    PT_BUF_FP8_W,
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
/* With FP8 GEMMs (pt_train.fp8 on), the scratch of the FP8 GEMMs' quantized operands
 * added to B, one byte per element: fp8_a holds an input, an output gradient or an
 * input's transpose, fp8_b an output gradient's transpose, fp8_w a weight or its
 * transpose (runtime/fp8.c: a data gradient casts its output gradient both ways, for
 * the weight gradient after it). */
void pt_buffers_fp8(const pt_model *m, const pt_layout *l, pt_buffers *B);
const char *pt_buf_name(pt_buf b);
/* The most rows one rank's experts can receive in one mixture-of-experts layer of a
 * micro-batch, which ptrun sizes their buffers for: dropless, every token of the ep
 * group may send its copies here, min(k, E/ep) each (a token's k experts differ); a
 * capacity factor C caps each expert at ceil(C·R·k/E) rows from each of the ep ranks
 * (Megatron-Core's capacity over a rank's own tokens). 0 for a dense model. */
int64_t pt_moe_recv_rows_max(const pt_model *m, const pt_layout *l);
/* The capacity factor's cap of one expert's rows from one rank's R tokens,
 * ceil(C·R·k/E), or -1 for none (dropless). */
int64_t pt_moe_capacity_rows(const pt_model *m, int64_t R);
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

#ifdef __cplusplus
}
#endif
#endif
