/*
 * The transformer executed from the planner's op lists. pt_ops_layer, pt_ops_embed
 * and pt_ops_head (planner/ops.c) say which ops a micro-batch runs and in what
 * order, under which cost-table keys; this file maps each op, by its name, to its
 * kernel call on this model's buffers, and times it into the trace under the same
 * key. So the runtime cannot run a layer differently from what the planner priced:
 * an op the planner lists and this file does not know is an error, not a skip.
 *
 * Backward passes accumulate: kernels add into gradients (kernels.h), the residual
 * stream's gradient dres flows through each layer in place (a norm's backward adds
 * its input gradient into dres, which is exactly the residual connection's), and
 * scratch buffers are zeroed where their accumulation starts.
 */
#include "model_internal.h"

#include <string.h>

/* ---- Sizes ------------------------------------------------------------------------------ */

typedef struct {
    int64_t b, s, T;          /* micro-batch, sequence, tokens */
    int h, a, kh, d, f, v;    /* per rank: a, kh, f and v already divided by t */
} dims;

static dims dims_of(const pt_net *n)
{
    const pt_model *m = &n->spec;
    int t = n->layout.tp;
    dims d = {.b = n->layout.mbs, .s = m->seq / n->layout.cp, .h = (int)m->hidden,
              .a = (int)(m->heads / t), .kh = (int)(m->kv_heads / t),
              .d = (int)(m->hidden / m->heads), .f = (int)(m->ffn / t),
              .v = (int)(pt_vocab_padded(m, t) / t)};
    d.T = d.b * d.s;
    return d;
}

/* ---- Allocation of slots and scratch ---------------------------------------------------- */

/* Hands out consecutive pieces of one allocation (or, with base NULL, only counts). */
typedef struct {
    char *base;
    size_t used;
} carve;

static float *take(carve *c, int64_t elems, size_t elem_bytes)
{
    size_t bytes = ((size_t)elems * elem_bytes + 63) & ~(size_t)63;
    float *p = c->base ? (float *)(c->base + c->used) : NULL;
    c->used += bytes;
    return p;
}

static void carve_layer(carve *c, const pt_net *n, const dims *d, size_t ab, pt_layer_acts *L)
{
    L->ln1 = take(c, d->T * d->h, ab);
    L->ln1_mean = take(c, d->T, 4);
    L->ln1_rstd = take(c, d->T, 4);
    L->q = take(c, d->T * d->a * d->d, ab);
    L->k = take(c, d->T * d->kh * d->d, ab);
    L->v = take(c, d->T * d->kh * d->d, ab);
    L->att = take(c, d->T * d->a * d->d, ab);
    L->lse = take(c, d->b * d->a * d->s, 4);
    L->x2 = take(c, d->T * d->h, ab);
    L->ln2 = take(c, d->T * d->h, ab);
    L->ln2_mean = take(c, d->T, 4);
    L->ln2_rstd = take(c, d->T, 4);
    L->gate = n->spec.act == PT_ACT_SWIGLU ? take(c, d->T * d->f, ab) : NULL;
    L->up = take(c, d->T * d->f, ab);
    L->act = take(c, d->T * d->f, ab);
}

/* Lays out one slot; with full recomputation all layers share one set of views. */
static void carve_slot(carve *c, const pt_net *n, const dims *d, pt_acts *A)
{
    size_t ab = pt_kdtype_bytes(n->kn->act_dtype);
    int64_t L = n->n_layers;
    A->tokens = (int32_t *)take(c, d->T, 4);
    A->targets = (int32_t *)take(c, d->T, 4);
    for (int64_t l = 0; l < L + n->layout.vp; l++) /* each chunk's input and layer outputs */
        A->x[l] = take(c, d->T * d->h, ab);
    bool shared = n->layout.recompute == PT_RECOMPUTE_FULL;
    for (int64_t l = 0; l < L; l++) {
        if (shared && l > 0)
            A->layer[l] = A->layer[0];
        else
            carve_layer(c, n, d, ab, &A->layer[l]);
    }
    A->lnf = take(c, d->T * d->h, ab);
    A->lnf_mean = take(c, d->T, 4);
    A->lnf_rstd = take(c, d->T, 4);
    A->logits = take(c, d->T * d->v, ab);
    A->losses = take(c, d->T, 4);
}

static void carve_scratch(carve *c, const pt_net *n, const dims *d, pt_scratch *S)
{
    size_t ab = pt_kdtype_bytes(n->kn->act_dtype);
    S->dres = take(c, d->T * d->h, ab);
    S->dln = take(c, d->T * d->h, ab);
    S->dq = take(c, d->T * d->a * d->d, ab);
    S->dk = take(c, d->T * d->kh * d->d, ab);
    S->dv = take(c, d->T * d->kh * d->d, ab);
    S->dqr = take(c, d->T * d->a * d->d, ab);
    S->dkr = take(c, d->T * d->kh * d->d, ab);
    S->datt = take(c, d->T * d->a * d->d, ab);
    S->dgate = take(c, d->T * d->f, ab);
    S->dup = take(c, d->T * d->f, ab);
    S->dact = take(c, d->T * d->f, ab);
}

static pt_acts *alloc_slot(pt_net *n, const dims *d)
{
    pt_acts *A = calloc(1, sizeof *A);
    int64_t L = n->n_layers;
    if (!A || !(A->x = calloc((size_t)(L + n->layout.vp), sizeof *A->x)) ||
        !(A->layer = calloc((size_t)L, sizeof *A->layer))) {
        if (A)
            free(A->x);
        free(A);
        return NULL;
    }
    carve c = {0};
    carve_slot(&c, n, d, A);
    n->bytes += (int64_t)c.used;
    c.base = n->kn->alloc(n->kn, c.used);
    if (!c.base) {
        free(A->x);
        free(A->layer);
        free(A);
        return NULL;
    }
    A->mem = c.base;
    c.used = 0;
    carve_slot(&c, n, d, A);
    return A;
}

static void free_slot(pt_net *n, pt_acts *A)
{
    if (!A)
        return;
    n->kn->free(n->kn, A->mem);
    free(A->x);
    free(A->layer);
    free(A);
}

static int build_op_lists(pt_net *n, const pt_plan *p)
{
    pt_opctx c;
    pt_opctx_init(&c, &n->spec, &n->layout, &p->train, &p->cluster);
    int rc = 0;
    for (int i = 0; i < 6 && rc == 0; i++) {
        bool bwd = i % 2;
        rc = i < 2 ? pt_ops_layer(&c, bwd, &n->ops[i])
             : i < 4 ? pt_ops_embed(&c, bwd, &n->ops[i])
                     : pt_ops_head(&c, bwd, &n->ops[i]);
    }
    return rc;
}

int pt_net_alloc_runtime(pt_net *n, const pt_plan *p, int slots, pt_err *err)
{
    dims d = dims_of(n);
    if (build_op_lists(n, p))
        return pt_err_set(err, "out of memory building the op lists");
    n->slot = calloc((size_t)slots, sizeof *n->slot);
    pt_scratch *S = calloc(1, sizeof *S);
    if (!n->slot || !S) {
        free(S);
        return pt_err_set(err, "out of memory");
    }
    n->scratch = S;
    n->n_slots = slots;
    for (int i = 0; i < slots; i++)
        if (!(n->slot[i] = alloc_slot(n, &d)))
            return pt_err_set(err, "out of memory for the activations of %d micro-batches of "
                                   "%lld tokens", slots, (long long)d.T);
    carve c = {0};
    carve_scratch(&c, n, &d, S);
    n->bytes += (int64_t)c.used;
    if (!(c.base = n->kn->alloc(n->kn, c.used)))
        return pt_err_set(err, "out of memory for gradient scratch (%zu bytes)", c.used);
    S->mem = c.base;
    c.used = 0;
    carve_scratch(&c, n, &d, S);
    return 0;
}

void pt_net_free_runtime(pt_net *n)
{
    for (int i = 0; i < n->n_slots; i++)
        free_slot(n, n->slot[i]);
    free(n->slot);
    pt_scratch *S = n->scratch;
    if (S && n->kn)
        n->kn->free(n->kn, S->mem);
    free(S);
    for (int i = 0; i < 6; i++)
        pt_oplist_free(&n->ops[i]);
    n->slot = NULL;
    n->scratch = NULL;
}

/* ---- Parameters by name ------------------------------------------------------------------- */

/* A layer's parameter `what` ("q.w", "norm1.b", ...): its weights (in w, [act])
 * and its gradient (fp32); NULL when the model has no such parameter (a bias of a
 * model without biases). */
typedef struct {
    const float *w;
    float *g;
} pview;

static pview param(const pt_net *n, int64_t layer, const char *what)
{
    char name[48];
    if (layer >= 0)
        snprintf(name, sizeof name, "layers.%lld.%s", (long long)layer, what);
    else
        snprintf(name, sizeof name, "%s", what);
    const pt_param *p = pt_net_param(n, name);
    if (!p)
        return (pview){NULL, NULL};
    size_t ab = pt_kdtype_bytes(n->kn->act_dtype);
    return (pview){(const float *)((const char *)n->w + (size_t)p->offset * ab),
                   n->grad + p->offset};
}

/* The output head's weight: its own, or the token embedding when tied. */
static pview head_weight(const pt_net *n)
{
    return n->spec.tied_embeddings ? param(n, -1, "wte") : param(n, -1, "lm_head.w");
}

/* ---- Forward ops -------------------------------------------------------------------------- */

typedef struct {
    pt_net *n;
    pt_acts *A;
    pt_scratch *S;
    dims d;
    int64_t l;      /* layer (global index, names its parameters), -1 outside */
    int64_t li;     /* the layer's index on this rank (its activations) */
    int64_t xi;     /* index in A->x of the layer's input */
    float dloss;
    pt_err *err;
} ctx;

static const float kEps = 1e-5f;
/* RoPE base: LLaMA 2's 10000 (the model spec does not carry LLaMA 3's 500000 yet). */
static const float kRopeTheta = 10000.0f;

static void norm_fwd(ctx *c, const char *which, const float *inp, float *out, float *mean,
                     float *rstd)
{
    pt_kernels *kn = c->n->kn;
    char wn[24], bn[24];
    snprintf(wn, sizeof wn, "%s.w", which);
    snprintf(bn, sizeof bn, "%s.b", which);
    pview w = param(c->n, c->l, wn), b = param(c->n, c->l, bn);
    if (c->n->spec.norm == PT_NORM_RMSNORM)
        kn->rmsnorm_forward(kn, out, rstd, inp, w.w, c->d.T, c->d.h, kEps);
    else
        kn->layernorm_forward(kn, out, mean, rstd, inp, w.w, b.w, c->d.T, c->d.h, kEps);
}

static void linear_fwd(ctx *c, const char *which, float *out, const float *inp, int ic, int oc)
{
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "%s.w", which);
    snprintf(bn, sizeof bn, "%s.b", which);
    pview w = param(c->n, c->l, wn), b = param(c->n, c->l, bn);
    c->n->kn->matmul_forward(c->n->kn, out, inp, w.w, b.w, c->d.T, ic, oc);
}

/* One op of a layer's forward (also run again by recomputation). */
static int layer_fwd_op(ctx *c, const char *op)
{
    pt_kernels *kn = c->n->kn;
    pt_layer_acts *L = &c->A->layer[c->li];
    const dims *d = &c->d;
    float *x = c->A->x[c->xi], *y = c->A->x[c->xi + 1];
    int qd = d->a * d->d, kvd = d->kh * d->d;
    if (!strcmp(op, "norm1"))
        norm_fwd(c, "norm1", x, L->ln1, L->ln1_mean, L->ln1_rstd);
    else if (!strcmp(op, "q"))
        linear_fwd(c, "q", L->q, L->ln1, d->h, qd);
    else if (!strcmp(op, "k"))
        linear_fwd(c, "k", L->k, L->ln1, d->h, kvd);
    else if (!strcmp(op, "v"))
        linear_fwd(c, "v", L->v, L->ln1, d->h, kvd);
    else if (!strcmp(op, "rope")) {
        kn->rope_forward(kn, L->q, L->q, (int)d->b, (int)d->s, d->a, d->d, 0, kRopeTheta);
        kn->rope_forward(kn, L->k, L->k, (int)d->b, (int)d->s, d->kh, d->d, 0, kRopeTheta);
    } else if (!strcmp(op, "attn"))
        kn->attention_forward(kn, L->att, L->lse, L->q, L->k, L->v, (int)d->b, (int)d->s,
                              (int)d->s, d->a, d->kh, d->d, 0, 0, 1);
    else if (!strcmp(op, "attn_out"))
        linear_fwd(c, "attn_out", L->x2, L->att, qd, d->h);
    else if (!strcmp(op, "add1"))
        kn->residual_forward(kn, L->x2, L->x2, x, d->T * d->h);
    else if (!strcmp(op, "norm2"))
        norm_fwd(c, "norm2", L->x2, L->ln2, L->ln2_mean, L->ln2_rstd);
    else if (!strcmp(op, "mlp_gate"))
        linear_fwd(c, "mlp_gate", L->gate, L->ln2, d->h, d->f);
    else if (!strcmp(op, "mlp_up"))
        linear_fwd(c, "mlp_up", L->up, L->ln2, d->h, d->f);
    else if (!strcmp(op, "act")) {
        if (c->n->spec.act == PT_ACT_SWIGLU)
            kn->swiglu_forward(kn, L->act, L->gate, L->up, d->T, d->f);
        else
            kn->gelu_forward(kn, L->act, L->up, d->T * d->f);
    } else if (!strcmp(op, "mlp_down"))
        linear_fwd(c, "mlp_down", y, L->act, d->f, d->h);
    else if (!strcmp(op, "add2"))
        kn->residual_forward(kn, y, y, L->x2, d->T * d->h);
    else
        return -1;
    return 0;
}

/* ---- Backward ops -------------------------------------------------------------------------- */

static size_t act_bytes(const ctx *c, int64_t elems)
{
    return (size_t)elems * pt_kdtype_bytes(c->n->kn->act_dtype);
}

static void linear_bwd(ctx *c, const char *which, bool data, float *dinp, const float *dout,
                       const float *inp, int ic, int oc)
{
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "%s.w", which);
    snprintf(bn, sizeof bn, "%s.b", which);
    pview w = param(c->n, c->l, wn), b = param(c->n, c->l, bn);
    if (data)
        c->n->kn->matmul_backward(c->n->kn, dinp, NULL, NULL, dout, inp, w.w, c->d.T, ic, oc);
    else
        c->n->kn->matmul_backward(c->n->kn, NULL, w.g, b.g, dout, inp, w.w, c->d.T, ic, oc);
}

static void norm_bwd(ctx *c, const char *which, float *dinp, const float *dout,
                     const float *inp, const float *mean, const float *rstd)
{
    pt_kernels *kn = c->n->kn;
    char wn[24], bn[24];
    snprintf(wn, sizeof wn, "%s.w", which);
    snprintf(bn, sizeof bn, "%s.b", which);
    pview w = param(c->n, c->l, wn), b = param(c->n, c->l, bn);
    if (c->n->spec.norm == PT_NORM_RMSNORM)
        kn->rmsnorm_backward(kn, dinp, w.g, dout, inp, w.w, rstd, c->d.T, c->d.h);
    else
        kn->layernorm_backward(kn, dinp, w.g, b.g, dout, inp, w.w, mean, rstd, c->d.T, c->d.h);
}

/* The MLP half of a layer's backward. */
static int mlp_bwd_op(ctx *c, const char *op)
{
    pt_kernels *kn = c->n->kn;
    pt_layer_acts *L = &c->A->layer[c->li];
    pt_scratch *S = c->S;
    const dims *d = &c->d;
    bool swiglu = c->n->spec.act == PT_ACT_SWIGLU;
    int64_t Tf = d->T * d->f;
    if (!strcmp(op, "mlp_down_dgrad")) {
        kn->zero(kn, S->dact, act_bytes(c, Tf));
        linear_bwd(c, "mlp_down", true, S->dact, S->dres, L->act, d->f, d->h);
    } else if (!strcmp(op, "mlp_down_wgrad"))
        linear_bwd(c, "mlp_down", false, NULL, S->dres, L->act, d->f, d->h);
    else if (!strcmp(op, "act_bwd")) {
        kn->zero(kn, S->dup, act_bytes(c, Tf));
        if (swiglu) {
            kn->zero(kn, S->dgate, act_bytes(c, Tf));
            kn->swiglu_backward(kn, S->dgate, S->dup, S->dact, L->gate, L->up, d->T, d->f);
        } else
            kn->gelu_backward(kn, S->dup, S->dact, L->up, Tf);
        kn->zero(kn, S->dln, act_bytes(c, d->T * d->h)); /* the block's input gradient */
    } else if (!strcmp(op, "mlp_gate_dgrad"))
        linear_bwd(c, "mlp_gate", true, S->dln, S->dgate, L->ln2, d->h, d->f);
    else if (!strcmp(op, "mlp_up_dgrad"))
        linear_bwd(c, "mlp_up", true, S->dln, S->dup, L->ln2, d->h, d->f);
    else if (!strcmp(op, "mlp_gate_wgrad"))
        linear_bwd(c, "mlp_gate", false, NULL, S->dgate, L->ln2, d->h, d->f);
    else if (!strcmp(op, "mlp_up_wgrad"))
        linear_bwd(c, "mlp_up", false, NULL, S->dup, L->ln2, d->h, d->f);
    else if (!strcmp(op, "norm2_bwd"))
        norm_bwd(c, "norm2", S->dres, S->dln, L->x2, L->ln2_mean, L->ln2_rstd);
    else
        return -1;
    return 0;
}

/* The attention half of a layer's backward. */
static int attn_bwd_op(ctx *c, const char *op)
{
    pt_kernels *kn = c->n->kn;
    pt_layer_acts *L = &c->A->layer[c->li];
    pt_scratch *S = c->S;
    const dims *d = &c->d;
    int qd = d->a * d->d, kvd = d->kh * d->d;
    bool rope = c->n->spec.pos == PT_POS_ROPE;
    /* Without RoPE the projections' gradients are the attention's directly. */
    float *gq = rope ? S->dqr : S->dq, *gk = rope ? S->dkr : S->dk;
    if (!strcmp(op, "attn_out_dgrad")) {
        kn->zero(kn, S->datt, act_bytes(c, d->T * qd));
        linear_bwd(c, "attn_out", true, S->datt, S->dres, L->att, qd, d->h);
    } else if (!strcmp(op, "attn_out_wgrad"))
        linear_bwd(c, "attn_out", false, NULL, S->dres, L->att, qd, d->h);
    else if (!strcmp(op, "attn_bwd")) {
        kn->zero(kn, S->dq, act_bytes(c, d->T * qd));
        kn->zero(kn, S->dk, act_bytes(c, d->T * kvd));
        kn->zero(kn, S->dv, act_bytes(c, d->T * kvd));
        kn->attention_backward(kn, S->dq, S->dk, S->dv, S->datt, L->q, L->k, L->v, L->att,
                               L->lse, (int)d->b, (int)d->s, (int)d->s, d->a, d->kh, d->d, 0,
                               0, 1);
        kn->zero(kn, S->dln, act_bytes(c, d->T * d->h));
    } else if (!strcmp(op, "rope_bwd")) {
        kn->zero(kn, S->dqr, act_bytes(c, d->T * qd));
        kn->zero(kn, S->dkr, act_bytes(c, d->T * kvd));
        kn->rope_backward(kn, S->dqr, S->dq, (int)d->b, (int)d->s, d->a, d->d, 0, kRopeTheta);
        kn->rope_backward(kn, S->dkr, S->dk, (int)d->b, (int)d->s, d->kh, d->d, 0, kRopeTheta);
    } else if (!strcmp(op, "q_dgrad"))
        linear_bwd(c, "q", true, S->dln, gq, L->ln1, d->h, qd);
    else if (!strcmp(op, "k_dgrad"))
        linear_bwd(c, "k", true, S->dln, gk, L->ln1, d->h, kvd);
    else if (!strcmp(op, "v_dgrad"))
        linear_bwd(c, "v", true, S->dln, S->dv, L->ln1, d->h, kvd);
    else if (!strcmp(op, "q_wgrad"))
        linear_bwd(c, "q", false, NULL, gq, L->ln1, d->h, qd);
    else if (!strcmp(op, "k_wgrad"))
        linear_bwd(c, "k", false, NULL, gk, L->ln1, d->h, kvd);
    else if (!strcmp(op, "v_wgrad"))
        linear_bwd(c, "v", false, NULL, S->dv, L->ln1, d->h, kvd);
    else if (!strcmp(op, "norm1_bwd"))
        norm_bwd(c, "norm1", S->dres, S->dln, c->A->x[c->xi], L->ln1_mean, L->ln1_rstd);
    else
        return -1;
    return 0;
}

/* ---- Embedding and head -------------------------------------------------------------------- */

static int embed_op(ctx *c, const char *op)
{
    pt_kernels *kn = c->n->kn;
    const dims *d = &c->d;
    pview wte = param(c->n, -1, "wte"), wpe = param(c->n, -1, "wpe");
    if (!strcmp(op, "embed"))
        kn->embed_forward(kn, c->A->x[0], c->A->tokens, wte.w, wpe.w, (int)d->b, (int)d->s,
                          d->h, 0, d->v, 0);
    else if (!strcmp(op, "embed_bwd"))
        kn->embed_backward(kn, wte.g, wpe.g, c->S->dres, c->A->tokens, (int)d->b, (int)d->s,
                           d->h, 0, d->v, 0);
    else
        return -1;
    return 0;
}

static int head_op(ctx *c, const char *op)
{
    pt_kernels *kn = c->n->kn;
    pt_acts *A = c->A;
    pt_scratch *S = c->S;
    const dims *d = &c->d;
    pview w = head_weight(c->n);
    /* the output of this rank's last chunk */
    float *xl = A->x[(c->n->layout.vp - 1) * (c->n->chunk_layers + 1) + c->n->chunk_layers];
    if (!strcmp(op, "final_norm"))
        norm_fwd(c, "final_norm", xl, A->lnf, A->lnf_mean, A->lnf_rstd);
    else if (!strcmp(op, "logits"))
        kn->matmul_forward(kn, A->logits, A->lnf, w.w, NULL, d->T, d->h, d->v);
    else if (!strcmp(op, "xent")) /* fused: the forward also writes dlogits */
        kn->crossentropy(kn, A->losses, c->dloss > 0 ? A->logits : NULL, A->logits,
                         A->targets, d->T, d->v, c->dloss);
    else if (!strcmp(op, "xent_bwd"))
        return 0; /* done by the fused forward */
    else if (!strcmp(op, "logits_dgrad")) {
        kn->zero(kn, S->dln, act_bytes(c, d->T * d->h));
        kn->matmul_backward(kn, S->dln, NULL, NULL, A->logits, A->lnf, w.w, d->T, d->h, d->v);
    } else if (!strcmp(op, "logits_wgrad"))
        kn->matmul_backward(kn, NULL, w.g, NULL, A->logits, A->lnf, w.w, d->T, d->h, d->v);
    else if (!strcmp(op, "final_norm_bwd"))
        norm_bwd(c, "final_norm", S->dres, S->dln, xl, A->lnf_mean, A->lnf_rstd);
    else
        return -1;
    return 0;
}

/* ---- Running op lists ---------------------------------------------------------------------- */

typedef enum { LIST_LAYER_FWD, LIST_LAYER_BWD, LIST_EMBED_FWD, LIST_EMBED_BWD, LIST_HEAD_FWD,
               LIST_HEAD_BWD } list_id;

static int dispatch(ctx *c, list_id id, const pt_op *op)
{
    const char *name = op->name;
    switch (id) {
    case LIST_LAYER_FWD:
        return layer_fwd_op(c, name);
    case LIST_LAYER_BWD:
        if (op->recompute)
            return layer_fwd_op(c, name);
        return mlp_bwd_op(c, name) == 0 || attn_bwd_op(c, name) == 0 ? 0 : -1;
    case LIST_EMBED_FWD:
    case LIST_EMBED_BWD:
        return embed_op(c, name);
    default:
        return head_op(c, name);
    }
}

static int run_list(ctx *c, list_id id)
{
    const pt_oplist *list = &c->n->ops[id];
    for (int i = 0; i < list->n; i++) {
        const pt_op *op = &list->op[i];
        /* ZeRO-2's gradient reduce-scatter: the engine reduce-scatters the whole flat
         * gradient buffer at the optimizer step instead of layer by layer, which gives
         * the same numbers (the planner times it per layer, overlapped). */
        if (op->cls == PT_OP_COLL && !strcmp(op->name, "zero_reducescatter"))
            continue;
        if (op->cls == PT_OP_COLL)
            return pt_err_set(c->err, "op '%s' needs tensor or context parallelism, which "
                                      "this runtime does not run yet", op->name);
        double t0 = pt_trace_now();
        if (dispatch(c, id, op))
            return pt_err_set(c->err, "internal: the planner lists op '%s', which the runtime "
                                      "does not know", op->name);
        pt_trace_add_op(c->n->trace, c->n->rank, 0, op->name, &op->kernel, t0, pt_trace_now());
    }
    return 0;
}

static ctx context(pt_net *n, int slot, float dloss, pt_err *err)
{
    return (ctx){.n = n, .A = n->slot[slot], .S = n->scratch, .d = dims_of(n), .l = -1,
                 .dloss = dloss, .err = err};
}

/* Points the context at layer i of chunk `chunk`. */
static void at_layer(ctx *c, int chunk, int64_t i)
{
    const pt_net *n = c->n;
    int64_t vs = (int64_t)chunk * n->layout.pp + n->stage;
    c->l = vs * n->chunk_layers + i;
    c->li = chunk * n->chunk_layers + i;
    c->xi = chunk * (n->chunk_layers + 1) + i;
}

static bool first_vs(const pt_net *n, int chunk)
{
    return chunk == 0 && n->stage == 0;
}

static bool last_vs(const pt_net *n, int chunk)
{
    return chunk == n->layout.vp - 1 && n->stage == n->layout.pp - 1;
}

float *pt_net_chunk_input(pt_net *n, int slot, int chunk)
{
    return n->slot[slot]->x[chunk * (n->chunk_layers + 1)];
}

float *pt_net_chunk_output(pt_net *n, int slot, int chunk)
{
    return n->slot[slot]->x[chunk * (n->chunk_layers + 1) + n->chunk_layers];
}

float *pt_net_dres(pt_net *n)
{
    return ((pt_scratch *)n->scratch)->dres;
}

static int sum_losses(ctx *c, double *loss_sum)
{
    pt_kernels *kn = c->n->kn;
    float *losses = malloc((size_t)c->d.T * sizeof *losses);
    if (!losses)
        return pt_err_set(c->err, "out of memory");
    kn->copy(kn, losses, c->A->losses, (size_t)c->d.T * sizeof *losses, PT_KCOPY_D2H);
    int rc = kn->sync(kn) ? pt_err_set(c->err, "%s", kn->err) : 0;
    for (int64_t i = 0; rc == 0 && i < c->d.T; i++)
        *loss_sum += losses[i];
    free(losses);
    return rc;
}

int pt_net_forward_chunk(pt_net *n, int slot, int chunk, const int32_t *tokens,
                         const int32_t *targets, float dloss, double *loss_sum, pt_err *err)
{
    ctx c = context(n, slot, dloss, err);
    pt_kernels *kn = n->kn;
    size_t tb = (size_t)c.d.T * sizeof(int32_t);
    if (first_vs(n, chunk)) {
        kn->copy(kn, c.A->tokens, tokens, tb, PT_KCOPY_H2D);
        if (run_list(&c, LIST_EMBED_FWD))
            return -1;
    }
    for (int64_t i = 0; i < n->chunk_layers; i++) {
        at_layer(&c, chunk, i);
        if (run_list(&c, LIST_LAYER_FWD))
            return -1;
    }
    c.l = -1;
    if (!last_vs(n, chunk))
        return 0;
    kn->copy(kn, c.A->targets, targets, tb, PT_KCOPY_H2D);
    return run_list(&c, LIST_HEAD_FWD) ? -1 : sum_losses(&c, loss_sum);
}

int pt_net_backward_chunk(pt_net *n, int slot, int chunk, pt_err *err)
{
    ctx c = context(n, slot, 0, err);
    if (last_vs(n, chunk)) {
        n->kn->zero(n->kn, c.S->dres, act_bytes(&c, c.d.T * c.d.h));
        if (run_list(&c, LIST_HEAD_BWD))
            return -1;
    }
    for (int64_t i = n->chunk_layers - 1; i >= 0; i--) {
        at_layer(&c, chunk, i);
        if (run_list(&c, LIST_LAYER_BWD))
            return -1;
    }
    c.l = -1;
    if (first_vs(n, chunk) && run_list(&c, LIST_EMBED_BWD))
        return -1;
    return n->kn->sync(n->kn) ? pt_err_set(err, "%s", n->kn->err) : 0;
}

int pt_net_forward(pt_net *n, int slot, const int32_t *tokens, const int32_t *targets,
                   float dloss, double *loss_sum, pt_err *err)
{
    if (n->layout.pp != 1)
        return pt_err_set(err, "internal: the whole-model forward needs one pipeline stage");
    for (int c = 0; c < n->layout.vp; c++) {
        if (c > 0) /* a chunk's input is the previous chunk's output */
            n->kn->copy(n->kn, pt_net_chunk_input(n, slot, c), pt_net_chunk_output(n, slot, c - 1),
                        (size_t)(n->layout.mbs * n->spec.seq * n->spec.hidden) *
                            pt_kdtype_bytes(n->kn->act_dtype), PT_KCOPY_D2D);
        if (pt_net_forward_chunk(n, slot, c, tokens, targets, dloss, loss_sum, err))
            return -1;
    }
    return 0;
}

int pt_net_backward(pt_net *n, int slot, pt_err *err)
{
    for (int c = n->layout.vp - 1; c >= 0; c--)
        if (pt_net_backward_chunk(n, slot, c, err))
            return -1;
    return 0;
}

const float *pt_net_last_logits(const pt_net *n, int slot)
{
    return n->slot[slot]->logits;
}
