/*
 * FP8 linear layers (pt_train.fp8): the transformer layers' q, k, v, output
 * projection and MLP GEMMs compute on FP8 operands — E4M3 for inputs and weights, E5M2
 * for output gradients, the hybrid format of Transformer Engine's recipes — while the
 * embedding, the head, attention and the norms stay in the backend's precision. Each
 * GEMM quantizes its two operands into the scratch's fp8_a, fp8_b and fp8_w (planner/
 * buffers.c counts them), or reuses what they hold (operand_in), and multiplies them
 * with kernels.h's gemm_fp8:
 *
 *   forward    out (T, oc)  = X (T, ic)     · W (oc, ic)^T
 *   data grad  dX  (T, ic)  = dY (T, oc)    · W^T (ic, oc)^T
 *   weight grad dW (oc, ic) += dY^T (oc, T) · X^T (ic, T)^T
 *
 * both operands K-major, as Hopper's FP8 GEMMs read them, so the data gradient
 * casts the weight transposed and the weight gradient both operands transposed.
 *
 * Each (layer, linear layer, operand) has a scaling state (a meta block of kernels.h)
 * in one backend array. Current scaling takes each tensor's scale from its own amax
 * just before the cast; delayed scaling casts with the scale its amax history gave
 * and, once the GEMM has read it, pushes this use's amax (push).
 *
 * Under tensor and context parallelism a rank holds a slice of some operands: every
 * weight is split over tp, a row-parallel layer's input and a column-parallel layer's
 * output gradient too, and every activation's rows over cp. The amax of a slice is
 * max-reduced over the group before the scale is taken, so every layout quantizes a
 * tensor with the scale one rank would give the whole of it, and an FP8 layout matches
 * one FP8 rank to fp32 rounding.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer_internal.h"

/* The FP8 linear layers of a transformer layer, each with its three operands: six,
 * and the gate of a gated MLP last; the state's size is the planner's
 * (pt_fp8_meta_floats, which the memory model counts). */
enum { FP8_X, FP8_W, FP8_DY, FP8_OPERANDS };
_Static_assert((int)PT_KFP8_META == (int)PT_FP8_META_FLOATS, "the planner sizes kernels.h's meta block");
_Static_assert(FP8_OPERANDS == 3, "pt_fp8_meta_floats counts three tensors a linear layer");

/* An operand's format: E5M2 for output gradients, E4M3 for inputs and weights */
static int format_of(int operand) { return operand == FP8_DY ? PT_KFP8_E5M2 : PT_KFP8_E4M3; }

static int linears(const pt_model *m)
{
    int n;
    pt_layer_linear_elems(m, 1, &n);
    return n;
}

/* Which FP8 linear layer parameter r is (0 .. linears-1), or -1 for one that stays in
 * the backend's precision. */
static int linear_index(pt_param_ref r)
{
    switch (r) {
    case PT_PARAM_Q: return 0;
    case PT_PARAM_K: return 1;
    case PT_PARAM_V: return 2;
    case PT_PARAM_ATTN_OUT: return 3;
    case PT_PARAM_MLP_UP: return 4;
    case PT_PARAM_MLP_DOWN: return 5;
    case PT_PARAM_MLP_GATE: return 6;
    default: return -1;
    }
}

static bool row_parallel(pt_param_ref r)
{
    return r == PT_PARAM_ATTN_OUT || r == PT_PARAM_MLP_DOWN;
}

/* The initial scaling state into host (floats): scale 1 until a first amax, so that
 * delayed scaling's first use casts unscaled. */
static void initial_state(const pt_net *n, float *host, int64_t floats)
{
    memset(host, 0, (size_t)floats * sizeof *host);
    for (int64_t i = 0; i < floats; i += n->fp8_stride)
        host[i + PT_KFP8_SCALE] = host[i + PT_KFP8_SCALE_INV] = 1.0f;
}

int pt_fp8_init(pt_net *n, const pt_fp8 *f, pt_err *err)
{
    pt_kernels *kn = n->kn;
    n->fp8 = *f;
    if (f->recipe == PT_FP8_OFF)
        return 0;
    if (f->recipe != PT_FP8_CURRENT && f->recipe != PT_FP8_DELAYED)
        return pt_err_set(err, "training.fp8.recipe '%s': ptrun trains the recipes 'current' "
                               "and 'delayed'; plan the others for the stacks that run them",
                          pt_fp8_recipe_name(f->recipe));
    if (f->recipe == PT_FP8_DELAYED && f->history < 1)
        return pt_err_set(err, "training.fp8.amax_history %d: delayed scaling needs at "
                               "least 1", f->history);
    if (!kn->fp8_amax || !kn->fp8_scale || !kn->fp8_cast || !kn->gemm_fp8)
        return pt_err_set(err, "the plan trains in FP8, but the %s backend has no FP8 "
                               "kernels", kn->name);
    n->fp8_stride = PT_KFP8_META + (f->recipe == PT_FP8_DELAYED ? f->history : 0);
    int64_t floats = pt_fp8_meta_floats(&n->spec, f, n->n_layers);
    if (floats == 0)
        return 0; /* a rank without layers */
    float *host = calloc((size_t)floats, sizeof *host);
    n->fp8_meta = kn->alloc(kn, (size_t)floats * sizeof(float));
    /* current scaling's memo: whose amax each state's scale is (cast) */
    if (f->recipe == PT_FP8_CURRENT)
        n->fp8_memo = calloc((size_t)(floats / n->fp8_stride), sizeof *n->fp8_memo);
    if (!host || !n->fp8_meta || (f->recipe == PT_FP8_CURRENT && !n->fp8_memo)) {
        free(host);
        return pt_err_set(err, "out of memory for the FP8 scaling state (%lld floats)",
                          (long long)floats);
    }
    const char *check = getenv("PT_FP8_CHECK_SCALES");
    if (n->fp8_memo && check && strcmp(check, "1") == 0 &&
        !(n->fp8_check = kn->alloc(kn, (size_t)n->fp8_stride * sizeof(float)))) {
        free(host);
        return pt_err_set(err, "out of memory for PT_FP8_CHECK_SCALES's scaling state");
    }
    initial_state(n, host, floats);
    kn->copy(kn, n->fp8_meta, host, (size_t)floats * sizeof(float), PT_KCOPY_H2D);
    int rc = kn->sync(kn);
    free(host);
    if (rc)
        return pt_err_set(err, "FP8 scaling state: %s", kn->err);
    n->bytes += floats * (int64_t)sizeof(float);
    return 0;
}

int64_t pt_fp8_state_floats(const pt_net *n)
{
    if (n->fp8.recipe != PT_FP8_DELAYED || !n->fp8_meta)
        return 0;
    return pt_fp8_meta_floats(&n->spec, &n->fp8, n->n_layers);
}

int pt_fp8_state_get(pt_net *n, float *host, pt_err *err)
{
    pt_kernels *kn = n->kn;
    kn->copy(kn, host, n->fp8_meta, (size_t)pt_fp8_state_floats(n) * sizeof(float),
             PT_KCOPY_D2H);
    return kn->sync(kn) ? pt_err_set(err, "reading the FP8 scaling state: %s", kn->err) : 0;
}

int pt_fp8_state_set(pt_net *n, const float *host, pt_err *err)
{
    pt_kernels *kn = n->kn;
    int64_t floats = pt_fp8_state_floats(n);
    float *init = NULL;
    if (!host) {
        if (!(init = malloc((size_t)floats * sizeof *init)))
            return pt_err_set(err, "out of memory for the FP8 scaling state");
        initial_state(n, init, floats);
    }
    kn->copy(kn, n->fp8_meta, host ? host : init, (size_t)floats * sizeof(float),
             PT_KCOPY_H2D);
    int rc = kn->sync(kn);
    free(init);
    return rc ? pt_err_set(err, "writing the FP8 scaling state: %s", kn->err) : 0;
}

void pt_fp8_free(pt_net *n)
{
    if (n->kn && n->fp8_meta)
        n->kn->free(n->kn, n->fp8_meta);
    n->fp8_meta = NULL;
    if (n->kn && n->fp8_check)
        n->kn->free(n->kn, n->fp8_check);
    n->fp8_check = NULL;
    free(n->fp8_memo);
    n->fp8_memo = NULL;
}

bool pt_fp8_linear(const pt_layer_ctx *c, pt_param_ref r)
{
    return c->n->fp8.recipe != PT_FP8_OFF && c->l >= 0 && linear_index(r) >= 0;
}

/* The groups over which a rank holds only a slice of operand `operand` of linear layer
 * r: tp for weights, row-parallel inputs and column-parallel output gradients; cp for
 * every activation (its rows). */
static bool sliced_tp(pt_param_ref r, int operand)
{
    return operand == FP8_W || (operand == FP8_X) == row_parallel(r);
}

static bool reduced_tp(const pt_layer_ctx *c, pt_param_ref r, int operand)
{
    return c->d.t > 1 && sliced_tp(r, operand);
}

static bool reduced_cp(const pt_layer_ctx *c, int operand)
{
    return c->d.cp > 1 && operand != FP8_W;
}

/* Whether this rank holds a slice of the operand, whose amax reduce_amax takes over the
 * ranks holding the others. */
static bool reduced(const pt_layer_ctx *c, pt_param_ref r, int operand)
{
    return reduced_tp(c, r, operand) || reduced_cp(c, operand);
}

static int reduce_amax(pt_layer_ctx *c, float *meta, pt_param_ref r, int operand)
{
    float *amax = meta + PT_KFP8_AMAX;
    if (reduced_tp(c, r, operand) &&
        pt_comm_allreduce_max(c->n->comm, PT_GROUP_TP, amax, 1, c->err))
        return -1;
    if (reduced_cp(c, operand) &&
        pt_comm_allreduce_max(c->n->comm, PT_GROUP_CP, amax, 1, c->err))
        return -1;
    return 0;
}

/* The index of operand `operand` of linear layer r of the running layer among the
 * rank's scaling states. */
static int64_t site_index(const pt_layer_ctx *c, pt_param_ref r, int operand)
{
    return (c->li * linears(&c->n->spec) + linear_index(r)) * FP8_OPERANDS + operand;
}

static float *site(const pt_layer_ctx *c, pt_param_ref r, int operand)
{
    return c->n->fp8_meta + site_index(c, r, operand) * c->n->fp8_stride;
}

/* Whether the scale in operand `operand`'s state was taken from this very tensor: the
 * last amax there read src (rows, cols) in the same activation slot, or for a weight
 * the same parameters. A re-cast the plan calls known (pt_fp8_work.known_a, known_b)
 * takes that scale as it is where this holds, since the tensor has not changed: a
 * weight changes only between steps, and each of its forwards takes its amax again; an
 * activation slot holds one micro-batch from its forward to its backward, and every
 * forward of it takes its amaxes again (a recomputing one too); an output gradient
 * is cast by its data gradient, right before its weight gradient. Where another
 * micro-batch's forward came between (the planner calls no X^T known then), or a
 * weight sits elsewhere in its backward, the re-cast takes the amax again. */
static pt_fp8_memo memo_of(const pt_layer_ctx *c, int operand, const float *src,
                           int64_t rows, int cols)
{
    return (pt_fp8_memo){.src = src, .slot = operand == FP8_W ? NULL : (const void *)c->A,
                         .rows = rows, .cols = cols};
}

/* Takes the amax of src (n) into meta, reduced over the ranks that hold its slices,
 * and the current-scaling scale from it. */
static int take_scale(pt_layer_ctx *c, pt_param_ref r, int operand, float *meta,
                      const float *src, int64_t n)
{
    pt_kernels *kn = c->n->kn;
    int fmt = format_of(operand);
    if (kn->fp8_amax_scale && !reduced(c, r, operand)) {
        kn->fp8_amax_scale(kn, meta, src, n, fmt);
        return 0;
    }
    kn->zero(kn, meta + PT_KFP8_AMAX, sizeof(float));
    kn->fp8_amax(kn, meta, src, n);
    if (reduce_amax(c, meta, r, operand))
        return -1;
    kn->fp8_scale(kn, meta, fmt, 0, 0.0f);
    return 0;
}

/* PT_FP8_CHECK_SCALES=1: a scale taken without reading the tensor (a re-cast's from
 * the memo, a cast's from the amax the tensor's kernel took) against the one the
 * tensor's amax gives now, which must be equal bit for bit. Waits for the backend. */
static int check_scale(pt_layer_ctx *c, pt_param_ref r, int operand, const float *meta,
                       const float *src, int64_t n)
{
    pt_kernels *kn = c->n->kn;
    float had, now;
    if (take_scale(c, r, operand, c->n->fp8_check, src, n))
        return -1;
    kn->copy(kn, &had, meta + PT_KFP8_SCALE, sizeof had, PT_KCOPY_D2H);
    kn->copy(kn, &now, c->n->fp8_check + PT_KFP8_SCALE, sizeof now, PT_KCOPY_D2H);
    if (kn->sync(kn))
        return pt_err_set(c->err, "PT_FP8_CHECK_SCALES: %s", kn->err);
    if (memcmp(&had, &now, sizeof had) != 0)
        return pt_err_set(c->err, "internal: PT_FP8_CHECK_SCALES: layer %lld's %s cast "
                                  "takes scale %.9g, but its tensor's amax gives %.9g",
                          (long long)c->li, pt_param_ref_name(r), had, now);
    return 0;
}

/* How a cast takes its scale under current scaling (the op's pt_fp8_work): from a
 * fresh amax; as the memo keeps it, where the plan calls the scale known; from the amax
 * the kernel that wrote the tensor took. */
typedef enum { SCALE_FRESH, SCALE_KNOWN, SCALE_TAKEN } scale_from;

static scale_from scale_of(bool known, bool taken)
{
    return taken ? SCALE_TAKEN : known ? SCALE_KNOWN : SCALE_FRESH;
}

/* Casts operand `operand` of linear layer r, src (rows, cols) [act], into dst and/or its
 * transpose dst_t. Current scaling takes the tensor's amax, reduced over the ranks that
 * hold its slices, and its scale first, except as `how` says (scale_from); delayed
 * scaling casts with the scale its history gave (the amax taken in the cast), and
 * `push` (after the GEMM) moves it on. */
static int cast(pt_layer_ctx *c, pt_param_ref r, int operand, const float *src, int64_t rows,
                int cols, uint8_t *dst, uint8_t *dst_t, scale_from how, float *dbias)
{
    pt_net *n = c->n;
    pt_kernels *kn = n->kn;
    float *meta = site(c, r, operand);
    int fmt = format_of(operand);
    n->fp8_elems += rows * cols;
    /* an amax the kernel that wrote src took (pt_fp8_amax_into), for this cast only */
    bool taken = c->S->fp8_taken_src == src && c->S->fp8_taken_meta == meta;
    c->S->fp8_taken_src = c->S->fp8_taken_meta = NULL;
    if (n->fp8.recipe == PT_FP8_CURRENT) {
        if ((how == SCALE_TAKEN) != taken)
            return pt_err_set(c->err, taken ? "internal: layer %lld's %s cast is not planned "
                                              "to take the amax the kernel before it took"
                                            : "internal: layer %lld's %s cast is planned to "
                                              "take an amax that no kernel before it took",
                              (long long)c->li, pt_param_ref_name(r));
        pt_fp8_memo *m = &n->fp8_memo[site_index(c, r, operand)];
        pt_fp8_memo want = memo_of(c, operand, src, rows, cols);
        bool known = how == SCALE_KNOWN && m->src == want.src && m->slot == want.slot &&
                     m->rows == want.rows && m->cols == want.cols;
        if (how == SCALE_KNOWN && !known && n->fp8_check)
            return pt_err_set(c->err, "internal: PT_FP8_CHECK_SCALES: layer %lld's %s re-cast "
                                      "is planned with a known scale, which the last amax "
                                      "there was not of its tensor",
                              (long long)c->li, pt_param_ref_name(r));
        if (known && n->fp8_check && check_scale(c, r, operand, meta, src, rows * cols))
            return -1;
        if (!known) {
            m->src = NULL; /* until the new scale is taken */
            if (taken) {
                if (reduce_amax(c, meta, r, operand))
                    return -1;
                kn->fp8_scale(kn, meta, fmt, 0, 0.0f);
                if (n->fp8_check && check_scale(c, r, operand, meta, src, rows * cols))
                    return -1;
            } else {
                n->fp8_amax_elems += rows * cols;
                if (take_scale(c, r, operand, meta, src, rows * cols))
                    return -1;
            }
            *m = want;
        }
    }
    /* delayed: amax fused */
    if (dbias && kn->fp8_cast_dbias) {
        kn->fp8_cast_dbias(kn, dst, dst_t, src, rows, cols, fmt, meta, dbias);
        return 0;
    }
    kn->fp8_cast(kn, dst, dst_t, src, rows, cols, fmt, meta);
    if (dbias)
        kn->matmul_backward(kn, NULL, NULL, dbias, src, NULL, NULL, rows, 1, cols);
    return 0;
}

void pt_fp8_amax_after(pt_layer_ctx *c, float *meta, const float *src, int64_t n)
{
    pt_kernels *kn = c->n->kn;
    kn->zero(kn, meta + PT_KFP8_AMAX, sizeof(float));
    kn->fp8_amax(kn, meta, src, n);
}

float *pt_fp8_amax_into(pt_layer_ctx *c, pt_param_ref r, bool grad, const float *src)
{
    if (!pt_fp8_linear(c, r) || c->n->fp8.recipe != PT_FP8_CURRENT)
        return NULL;
    float *meta = site(c, r, grad ? FP8_DY : FP8_X);
    c->S->fp8_taken_src = src;
    c->S->fp8_taken_meta = meta;
    return meta;
}

/* Delayed scaling: the amax of operand `operand`'s casts since its last push into its
 * history, and the scale for its next use. Called after the GEMM that read this cast, so
 * that it multiplied by the inverse of the scale the cast used. The forward's X and W
 * and the data gradient's dY push; the re-casts (the data gradient's W^T, the weight
 * gradient's transposes) do not, so each history moves once per micro-batch. */
static int push(pt_layer_ctx *c, pt_param_ref r, int operand)
{
    if (c->n->fp8.recipe != PT_FP8_DELAYED)
        return 0;
    float *meta = site(c, r, operand);
    if (reduce_amax(c, meta, r, operand))
        return -1;
    c->n->kn->fp8_scale(c->n->kn, meta, format_of(operand), c->n->fp8.history, 0.0f);
    return 0;
}

/* The linear layers that read one input: q, k and v; the output projection; the MLP's
 * gate and up projections; its down projection. */
static int input_group(pt_param_ref r)
{
    switch (r) {
    case PT_PARAM_Q: case PT_PARAM_K: case PT_PARAM_V: return 0;
    case PT_PARAM_ATTN_OUT: return 1;
    case PT_PARAM_MLP_GATE: case PT_PARAM_MLP_UP: return 2;
    default: return 3;
    }
}

/* Reuse. Under current scaling a tensor's cast depends on the tensor alone, so a GEMM
 * may take an operand as an earlier GEMM cast it, with that GEMM's scale: which ones do
 * is the plan's (the op's pt_fp8_work, planner/ops.c's fp8_per_gemm: k and v the input
 * q's forward cast, and their weight gradients the input's transpose q's cast; a weight
 * gradient the output gradient's transpose that the data gradient just before it wrote
 * beside the rows it read). Each buffer keeps a record of what its last cast wrote (the
 * same source, shape, orientation and operand of the same input group of the same
 * layer), and a reuse the record does not match is refused: planner and runtime would
 * disagree. A data gradient forgets both records and a forward and a weight gradient
 * fp8_b's. Delayed scaling moves a scale after each GEMM (push) and reuses nothing. */
static pt_fp8_held held_of(const pt_layer_ctx *c, pt_param_ref r, int operand,
                           const float *src, int64_t rows, int cols, bool t)
{
    return (pt_fp8_held){.src = src, .meta = site(c, r, operand), .rows = rows, .li = c->li,
                         .cols = cols, .group = input_group(r), .operand = operand, .t = t};
}

static bool holds(const pt_layer_ctx *c, const pt_fp8_held *h, const pt_fp8_held *want)
{
    return c->n->fp8.recipe == PT_FP8_CURRENT && h->meta && h->src == want->src &&
           h->rows == want->rows && h->cols == want->cols && h->li == want->li &&
           h->group == want->group && h->operand == want->operand && h->t == want->t;
}

/* Operand `operand` of linear layer r in buffer `buf` (held: what it holds): cast
 * there, or with `reuse` (the op's) taken as the earlier cast left it; the scale to
 * multiply by into *meta. */
static int operand_in(pt_layer_ctx *c, pt_param_ref r, int operand, const float *src,
                      int64_t rows, int cols, bool t, uint8_t *buf, pt_fp8_held *held,
                      bool reuse, scale_from how, const float **meta)
{
    static const char *const what[FP8_OPERANDS] = {"input", "weight", "output gradient"};
    pt_fp8_held want = held_of(c, r, operand, src, rows, cols, t);
    if (reuse) {
        if (!holds(c, held, &want))
            return pt_err_set(c->err, "internal: layer %lld's %s GEMM is planned to reuse "
                                      "the FP8 cast of its %s%s, which no GEMM before it made",
                              (long long)c->li, pt_param_ref_name(r), what[operand],
                              t ? " (transposed)" : "");
        *meta = held->meta;
        return 0;
    }
    held->meta = NULL; /* overwritten below */
    if (cast(c, r, operand, src, rows, cols, t ? NULL : buf, t ? buf : NULL, how, NULL))
        return -1;
    *held = want;
    *meta = want.meta;
    return 0;
}

int pt_fp8_forward(pt_layer_ctx *c, pt_param_ref r, const pt_fp8_work *how, float *out,
                   const float *inp, const float *w, const float *bias, int ic, int oc)
{
    pt_kernels *kn = c->n->kn;
    pt_scratch *S = c->S;
    int64_t T = c->d.T;
    const float *mx;
    S->fp8_held[1].meta = NULL; /* a data gradient's transposed dY: for its own wgrad only */
    if (pt_layer_finish_gather(c) ||
        operand_in(c, r, FP8_X, inp, T, ic, false, S->fp8_a, &S->fp8_held[0], how->reuse_a,
                   scale_of(false, how->taken_a), &mx) ||
        cast(c, r, FP8_W, w, oc, ic, S->fp8_w, NULL, SCALE_FRESH, NULL))
        return -1;
    kn->gemm_fp8(kn, out, 0, 0.0f, S->fp8_a, PT_KFP8_E4M3, mx, S->fp8_w, PT_KFP8_E4M3,
                 site(c, r, FP8_W), bias, T, oc, ic);
    return push(c, r, FP8_X) || push(c, r, FP8_W) ? -1 : 0;
}

int pt_fp8_dgrad(pt_layer_ctx *c, pt_param_ref r, const pt_fp8_work *how, float *dinp,
                 bool write, const float *dout, const float *w, float *dbias, int ic, int oc)
{
    pt_kernels *kn = c->n->kn;
    pt_scratch *S = c->S;
    int64_t T = c->d.T;
    /* dY's rows into fp8_a and, where the plan says, for a weight gradient to reuse, its
     * transpose into fp8_b in the same pass */
    bool both = how->dy_both;
    S->fp8_held[0].meta = S->fp8_held[1].meta = NULL;
    if (cast(c, r, FP8_DY, dout, T, oc, S->fp8_a, both ? S->fp8_b : NULL,
             scale_of(false, how->taken_a), dbias) ||
        cast(c, r, FP8_W, w, oc, ic, NULL, S->fp8_w, scale_of(how->known_b, false), NULL))
        return -1;
    if (both)
        S->fp8_held[1] = held_of(c, r, FP8_DY, dout, T, oc, true);
    kn->gemm_fp8(kn, dinp, 0, write ? 0.0f : 1.0f, S->fp8_a, PT_KFP8_E5M2, site(c, r, FP8_DY),
                 S->fp8_w, PT_KFP8_E4M3, site(c, r, FP8_W), NULL, T, ic, oc);
    return push(c, r, FP8_DY);
}

int pt_fp8_wgrad(pt_layer_ctx *c, pt_param_ref r, const pt_fp8_work *how, float *dw,
                 float *dbias, const float *dout, const float *inp, int ic, int oc)
{
    pt_kernels *kn = c->n->kn;
    pt_scratch *S = c->S;
    int64_t T = c->d.T;
    const float *mdy, *mx;
    if (pt_layer_finish_gather(c) ||
        operand_in(c, r, FP8_DY, dout, T, oc, true, S->fp8_b, &S->fp8_held[1], how->reuse_a,
                   scale_of(how->known_a, false), &mdy) ||
        operand_in(c, r, FP8_X, inp, T, ic, true, S->fp8_a, &S->fp8_held[0], how->reuse_b,
                   scale_of(how->known_b, false), &mx))
        return -1;
    if (dw)
        kn->gemm_fp8(kn, dw, 1, 1.0f, S->fp8_b, PT_KFP8_E5M2, mdy, S->fp8_a, PT_KFP8_E4M3, mx,
                     NULL, oc, ic, (int)T);
    S->fp8_held[1].meta = NULL;
    /* the bias gradient sums the unquantized output gradient, as TE's fused
     * cast-transpose-dbias does (ptrun's plans sum it in the data gradient's cast:
     * pt_fp8_work.dbias, and give this op no bias) */
    if (dbias)
        kn->matmul_backward(kn, NULL, NULL, dbias, dout, NULL, NULL, T, ic, oc);
    return 0;
}

int pt_fp8_step_stats(pt_net *n, pt_fp8_stats *out, pt_err *err)
{
    pt_kernels *kn = n->kn;
    memset(out, 0, sizeof *out);
    out->elems = n->fp8_elems;
    out->amax_elems = n->fp8_amax_elems;
    n->fp8_elems = n->fp8_amax_elems = 0;
    int64_t floats = pt_fp8_meta_floats(&n->spec, &n->fp8, n->n_layers);
    if (floats == 0)
        return 0;
    float *host = malloc((size_t)floats * sizeof *host);
    if (!host)
        return pt_err_set(err, "out of memory reading the FP8 scales");
    kn->copy(kn, host, n->fp8_meta, (size_t)floats * sizeof(float), PT_KCOPY_D2H);
    if (kn->sync(kn)) {
        free(host);
        return pt_err_set(err, "reading the FP8 scales: %s", kn->err);
    }
    out->scale_min = INFINITY;
    out->scale_max = 0;
    for (int64_t i = 0; i < floats; i += n->fp8_stride) {
        float *m = host + i;
        bool used = m[PT_KFP8_AMAX] > 0 || m[PT_KFP8_SCALE] != 1.0f;
        out->overflow += m[PT_KFP8_OVER];
        out->underflow += m[PT_KFP8_UNDER];
        m[PT_KFP8_OVER] = m[PT_KFP8_UNDER] = 0.0f;
        float s = m[PT_KFP8_SCALE];
        if (!used) /* a linear layer the model lacks (GPT-2's gate), or not run yet */
            continue;
        out->scale_min = s < out->scale_min ? s : out->scale_min;
        out->scale_max = s > out->scale_max ? s : out->scale_max;
    }
    if (out->scale_max == 0)
        out->scale_min = 0;
    /* the counts start again from zero for the next step */
    kn->copy(kn, n->fp8_meta, host, (size_t)floats * sizeof(float), PT_KCOPY_H2D);
    int rc = kn->sync(kn);
    free(host);
    return rc ? pt_err_set(err, "resetting the FP8 counts: %s", kn->err) : 0;
}
