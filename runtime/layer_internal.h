/*
 * Internal to runtime/: the context an op runs in — a micro-batch in its activation
 * slot, the layer of it that runs (or the embedding and head, outside the layers), the
 * gradient scratch, and what one op hands the next (the input of the next
 * column-parallel GEMMs, an all-gather still in flight) — shared by layer.c (what each
 * op does), attention.c (the attention op and its context-parallel ring) and chunk.c
 * (which runs the op lists of a model chunk).
 */
#ifndef PT_RT_LAYER_INTERNAL_H
#define PT_RT_LAYER_INTERNAL_H

#include "model_internal.h"

typedef struct {
    pt_net *n;
    pt_acts *A;
    pt_scratch *S;
    pt_layer_dims d;
    int64_t l;      /* layer (global index, names its parameters), -1 outside */
    int64_t next_l; /* the layer this pass runs next (-1: none): ZeRO-3 prefetches it */
    int64_t li;     /* the layer's index on this rank (its parameters' row) */
    int64_t ai;     /* its index in the chunk's slot (its activations) */
    int64_t xi;     /* index in A->x of the layer's input (ai) */
    pt_head_acts *H; /* the head's buffers of this micro-batch (last stage) */
    float dloss;
    pt_comm_req *gather; /* tp_overlap: the all-gather of a norm output still in flight */
    const float *gather_dst; /* ... its destination, the (T, h) rows a GEMM reads */
    const float *gather_shard; /* its source: this rank's (R, h) rows */
    pt_err *err;
} pt_layer_ctx;

/* Bytes of elems [act] values. */
static inline size_t pt_act_bytes(const pt_layer_ctx *c, int64_t elems)
{
    return (size_t)elems * pt_kdtype_bytes(c->n->kn->act_dtype);
}

/* Element i of a (rows, cols) [act] buffer. */
static inline float *pt_act_at(const pt_layer_ctx *c, const float *buf, int64_t i)
{
    return (float *)((const char *)buf + pt_act_bytes(c, i));
}

/* ---- What each op does (runtime/layer.c) ------------------------------------------------ */

/* Runs op `op` of the running list on the context's micro-batch and layer: 0, or -1
 * with c->err set. Backward ops accumulate. */
int pt_layer_run_op(pt_layer_ctx *c, const pt_op *op);
/* Waits for the overlapped all-gather still in flight, if any (a list's end). */
int pt_layer_finish_gather(pt_layer_ctx *c);

/* Dropout sites of a layer; the embedding's is site 0 of layer -1. */
enum { PT_DROP_EMBED, PT_DROP_ATTN, PT_DROP_MLP };
/* Whether this micro-batch drops (a training forward of a model with dropout). */
bool pt_layer_dropping(const pt_layer_ctx *c);
/* First local token row of this rank's residual-stream rows. */
int64_t pt_layer_own_row0(const pt_layer_ctx *c);
/* Dropout on local token rows [row0, row0 + rows) of a (T, h) tensor laid out from
 * buf: forward in place (dout NULL), or backward adding the gradient dout into buf.
 * Every layout drops the same elements (the masks are keyed by step, sample and
 * position in the whole sequence). */
void pt_layer_dropout_rows(pt_layer_ctx *c, float *buf, const float *dout, int64_t row0,
                           int64_t rows, int site);

/* ---- FP8 linear layers (runtime/fp8.c) --------------------------------------------------- */

/* Whether linear layer r of the running layer computes in FP8 (the plan's FP8 is on and
 * r is one of a transformer layer's linear layers). */
bool pt_fp8_linear(const pt_layer_ctx *c, pt_param_ref r);
/* Where the kernel about to write src, linear layer r's input (or with `grad` its
 * output gradient), takes src's FP8 amax for r's next cast, which the plan calls taken
 * (pt_fp8_work.take_amax on the kernel's op, taken_a on the GEMM's; kernels.h's
 * gelu_forward_amax, gelu_backward_amax): the scaling state, or NULL where r is no FP8
 * layer under current scaling. The next cast of the rank must cast that src into that
 * state. pt_fp8_amax_after takes the amax of n values at src into it after the kernel,
 * for a backend without the fused kernels. */
float *pt_fp8_amax_into(pt_layer_ctx *c, pt_param_ref r, bool grad, const float *src);
void pt_fp8_amax_after(pt_layer_ctx *c, float *meta, const float *src, int64_t n);
/* Linear layer r's forward out = inp · w^T (+ bias), its data gradient into dinp
 * (written, or added; with dbias the bias gradient added there, summed in the output
 * gradient's cast), and its weight gradient added into dw (and the bias gradient into
 * dbias, either may be NULL), on FP8 operands; T = c->d.T rows; `how` the op's
 * reuse of earlier casts (planner/step.h's pt_fp8_work). 0, or -1 with c->err set (a
 * collective of the amax failed, or a planned reuse that no earlier cast allows). */
int pt_fp8_forward(pt_layer_ctx *c, pt_param_ref r, const pt_fp8_work *how, float *out,
                   const float *inp, const float *w, const float *bias, int ic, int oc);
int pt_fp8_dgrad(pt_layer_ctx *c, pt_param_ref r, const pt_fp8_work *how, float *dinp,
                 bool write, const float *dout, const float *w, float *dbias, int ic, int oc);
int pt_fp8_wgrad(pt_layer_ctx *c, pt_param_ref r, const pt_fp8_work *how, float *dw,
                 float *dbias, const float *dout, const float *inp, int ic, int oc);

/* ---- The attention op (runtime/attention.c) --------------------------------------------- */

/* The attention of the running layer, from its q, k and v to att and lse, over every
 * cp rank's keys; and its backward into the scratch's dq, dk and dv. `again`: the
 * attention recomputed before its backward (selective recomputation), from q, k and v
 * as the forward left them, att kept. */
int pt_attention_forward(pt_layer_ctx *c, bool again);
int pt_attention_backward(pt_layer_ctx *c);

/* ---- Mixtures of experts (runtime/moe.c) ------------------------------------------------ */

/* A mixture of experts' op of the running layer (the router, routing, dispatch, the
 * experts' GEMMs, combine and their backwards); in and out: the tensors the op names
 * (the router's input and its data gradient's output). 0, or -1 with c->err set. */
int pt_moe_run_op(pt_layer_ctx *c, const pt_op *op, const float *in, float *out);

#endif
