/*
 * What each op of a layer, of the embedding and of the head does on this rank.
 * pt_ops_layer, pt_ops_embed and pt_ops_head (planner/ops.c) say which ops a
 * micro-batch runs and in what order, under which cost-table keys; this file maps each
 * op, by its kind, to its kernel calls and collectives on the micro-batch's buffers
 * (tensors.c), and chunk.c runs the lists and times each op into the trace under the
 * same key. So the runtime cannot run a layer differently from what the planner
 * priced: an op the planner lists and this file does not know is an error, not a
 * skip. The attention op, with its context-parallel ring, is attention.c's.
 *
 * Backward passes accumulate: kernels add into gradients (kernels.h), the residual
 * stream's gradient dres flows through each layer in place (a norm's backward adds
 * its input gradient into dres, which is exactly the residual connection's), and
 * scratch buffers are zeroed where their accumulation starts.
 */
#include "layer_internal.h"

#include <math.h>
#include <string.h>

static const float kEps = 1e-5f;
/* RoPE base: LLaMA 2's 10000 (the model spec does not carry LLaMA 3's 500000 yet). */
static const float kRopeTheta = 10000.0f;

/* ---- Dropout -------------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    /* splitmix64's finaliser (Steele et al. 2014) */
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The dropout tensor of one sample's branch: keyed by step, global sample, layer and
 * site; elements inside it by position · h + feature, the sample's own coordinates. */
static uint64_t drop_tensor(const pt_layer_ctx *c, int64_t sample, int site)
{
    uint64_t k = mix64((uint64_t)c->A->step * 0x9E3779B97F4A7C15ull ^ (uint64_t)sample);
    return mix64(k ^ ((uint64_t)(c->l + 1) << 8 | (uint64_t)site));
}

/* Dropout on local token rows [row0, row0 + rows) of a (T, h) tensor laid out from
 * `buf` (which holds row row0 first): forward in place, or backward accumulating
 * the gradient `dout` into `buf`. Rows are cut into runs of consecutive positions of
 * one sample, each one kernel call with its offset in the whole sequence. */
void pt_layer_dropout_rows(pt_layer_ctx *c, float *buf, const float *dout, int64_t row0,
                           int64_t rows, int site)
{
    pt_kernels *kn = c->n->kn;
    const pt_layer_dims *d = &c->d;
    for (int64_t r = row0; r < row0 + rows;) {
        /* row r is position j of chunk p of sequence bi (pt_net_cp_slice's layout) */
        int p = (int)(r / (d->b * d->sc));
        int64_t bi = r / d->sc % d->b, j = r % d->sc;
        int64_t len = d->sc - j; /* to the end of this chunk */
        if (len > row0 + rows - r)
            len = row0 + rows - r;
        int64_t pos = pt_dims_piece_pos(d, d->cr, p) + j;
        uint64_t id = drop_tensor(c, c->A->first_sample + bi, site);
        float *out = pt_act_at(c, buf, (r - row0) * d->h);
        if (dout)
            kn->dropout_backward(kn, out, pt_act_at(c, dout, (r - row0) * d->h), len * d->h,
                                 c->n->dropout, c->n->seed, id, pos * d->h);
        else
            kn->dropout_forward(kn, out, out, len * d->h, c->n->dropout, c->n->seed, id,
                                pos * d->h);
        r += len;
    }
}

bool pt_layer_dropping(const pt_layer_ctx *c)
{
    return c->n->dropout > 0 && c->A->train;
}

/* First local token row of this rank's residual-stream rows. */
int64_t pt_layer_own_row0(const pt_layer_ctx *c)
{
    return c->d.sp ? (int64_t)c->d.tr * c->d.R : 0;
}

/* ---- Parameters ------------------------------------------------------------------------------ */

/* The weight (bias false) or the bias of parameters `r` of the running layer, or outside
 * the layers when none runs. */
static pt_param_view param(const pt_layer_ctx *c, pt_param_ref r, bool bias)
{
    return pt_net_param_view(c->n, pt_net_param_row(c->n, c->l < 0 ? -1 : c->li)[2 * r + bias]);
}

/* ---- Forward ops -------------------------------------------------------------------------- */

/* A norm's forward of the rank's rows of inp. With skip (add1_norm2), inp is a branch's
 * output and the residual add runs in the norm's kernel first: inp += skip, then the
 * norm of the sum, the same values as residual_forward then the norm. */
static void norm_fwd(pt_layer_ctx *c, pt_param_ref which, float *inp, const float *skip,
                     float *out, float *mean, float *rstd)
{
    pt_kernels *kn = c->n->kn;
    pt_param_view w = param(c, which, false), b = param(c, which, true);
    bool rms = c->n->spec.norm == PT_NORM_RMSNORM;
    int64_t R = c->d.R;
    int h = c->d.h;
    if (skip && rms)
        kn->residual_rmsnorm_forward(kn, inp, out, rstd, inp, skip, w.w, R, h, kEps);
    else if (skip)
        kn->residual_layernorm_forward(kn, inp, out, mean, rstd, inp, skip, w.w, b.w, R, h,
                                       kEps);
    else if (rms)
        kn->rmsnorm_forward(kn, out, rstd, inp, w.w, R, h, kEps);
    else
        kn->layernorm_forward(kn, out, mean, rstd, inp, w.w, b.w, R, h, kEps);
}

/* A linear layer's forward or weight gradient over rows [row0, row0 + rows) of the
 * (T, ic) input, whose first row is at inp. */
typedef struct {
    const float *w, *bias;  /* weights (oc, ic) [act], bias or NULL */
    float *out;             /* forward: (T, oc) [act]; NULL for a weight gradient */
    float *pre;             /* forward with the GELU in the epilogue: (T, oc) [act] the
                             * product before it (out is then its GELU); else NULL */
    const float *res;       /* forward with the residual add in its epilogue: (T, oc)
                             * [act] added to the product (matmul_forward_res); else NULL */
    float *dw, *dbias;      /* weight gradient: (oc, ic) and (oc) fp32 */
    const float *dout;      /* weight gradient: (T, oc) [act] */
    int ic, oc;
} rows_gemm;

static void gemm_rows(pt_layer_ctx *c, const rows_gemm *g, int64_t row0, int64_t rows,
                      const float *inp)
{
    pt_kernels *kn = c->n->kn;
    if (g->pre)
        kn->matmul_forward_gelu(kn, pt_act_at(c, g->out, row0 * g->oc),
                                pt_act_at(c, g->pre, row0 * g->oc), inp, g->w, g->bias, rows,
                                g->ic, g->oc);
    else if (g->res)
        kn->matmul_forward_res(kn, pt_act_at(c, g->out, row0 * g->oc), inp, g->w, g->bias,
                               pt_act_at(c, g->res, row0 * g->oc), rows, g->ic, g->oc);
    else if (g->out)
        kn->matmul_forward(kn, pt_act_at(c, g->out, row0 * g->oc), inp, g->w, g->bias, rows,
                           g->ic, g->oc);
    else
        kn->matmul_backward(kn, NULL, g->dw, g->dbias, pt_act_at(c, g->dout, row0 * g->oc), inp,
                            g->w, rows, g->ic, g->oc);
}

/* Waits for an overlapped all-gather still in flight. */
int pt_layer_finish_gather(pt_layer_ctx *c)
{
    if (!c->gather)
        return 0;
    pt_comm_req *r = c->gather;
    c->gather = NULL;
    return pt_comm_wait(c->n->comm, r, c->err);
}

/* A GEMM over the T rows of `inp`. When inp is the gathered input of an all-gather
 * still in flight (tp_overlap), this rank's own rows go first, from the shard it had
 * before the gather, and the other ranks' rows after the wait: the gather runs
 * beside the first part, the decomposition of Megatron-LM's TP communication overlap
 * (Wang et al. 2023). Per-row results are the same either way; a weight gradient's
 * sum over rows is taken in another order. */
static int gemm_over_rows(pt_layer_ctx *c, const rows_gemm *g, const float *inp)
{
    const pt_layer_dims *d = &c->d;
    if (!c->gather || inp != c->gather_dst) {
        gemm_rows(c, g, 0, d->T, inp);
        return 0;
    }
    int64_t r0 = (int64_t)d->tr * d->R, r1 = r0 + d->R;
    gemm_rows(c, g, r0, d->R, c->gather_shard);
    if (pt_layer_finish_gather(c))
        return -1;
    if (r0 > 0)
        gemm_rows(c, g, 0, r0, inp);
    if (r1 < d->T)
        gemm_rows(c, g, r1, d->T - r1, pt_act_at(c, inp, r1 * g->ic));
    return 0;
}

/* The bias of op's parameters where its GEMM role has one (a row-parallel layer's
 * forward on tp rank 0 only, as its partial outputs are summed over tp afterwards:
 * planner/ops.c's gemm_batch decides, from the rank's pt_opctx.tp_rank), with its
 * gradient; NULL both where the role has none. */
static pt_param_view role_bias(const pt_layer_ctx *c, const pt_op *op)
{
    return pt_gemm_role_has_bias(op->role) ? param(c, op->param, true) : (pt_param_view){0};
}

/* A linear layer's forward, out = inp · w^T (+ bias where op's role has one). */
static int linear_fwd(pt_layer_ctx *c, const pt_op *op, float *out, const float *inp, int ic,
                      int oc)
{
    pt_param_view w = param(c, op->param, false);
    if (pt_fp8_linear(c, op->param))
        return pt_fp8_forward(c, op->param, &op->fp8, out, inp, w.w, role_bias(c, op).w, ic,
                              oc);
    rows_gemm g = {.w = w.w, .bias = role_bias(c, op).w, .out = out, .ic = ic, .oc = oc};
    return gemm_over_rows(c, &g, inp);
}

static void residual_add(pt_layer_ctx *c, float *branch, const float *skip, int site);

/* A row-parallel layer's forward whose op adds the residual stream `res` (the plan's
 * gemm_res roles: tp = 1, planner/ops.c's residual_in_gemm): out = inp · w^T + bias +
 * res in the GEMM (matmul_forward_res). A run that drops does the product, the branch's
 * dropout and the add apart, as without the fusion. */
static int linear_res_fwd(pt_layer_ctx *c, const pt_op *op, float *out, const float *inp,
                          const float *res, int ic, int oc, int site)
{
    /* FP8's GEMM has no residual in its epilogue: the add runs after it */
    if (pt_layer_dropping(c) || pt_fp8_linear(c, op->param)) {
        if (linear_fwd(c, op, out, inp, ic, oc))
            return -1;
        residual_add(c, out, res, site);
        return 0;
    }
    pt_param_view w = param(c, op->param, false);
    rows_gemm g = {.w = w.w, .bias = role_bias(c, op).w, .out = out, .res = res,
                   .ic = ic, .oc = oc};
    return gemm_over_rows(c, &g, inp);
}

/* A column-parallel linear layer with the GELU after it in its epilogue (mlp_up_gelu):
 * pre = inp · w^T + bias, act = gelu(pre). */
static int linear_gelu_fwd(pt_layer_ctx *c, const pt_op *op, float *act, float *pre,
                           const float *inp, int ic, int oc)
{
    pt_param_view w = param(c, op->param, false);
    if (pt_fp8_linear(c, op->param)) { /* the FP8 product, then the GELU apart */
        if (pt_fp8_forward(c, op->param, &op->fp8, pre, inp, w.w, role_bias(c, op).w, ic, oc))
            return -1;
        c->n->kn->gelu_forward(c->n->kn, act, pre, c->d.T * oc);
        return 0;
    }
    rows_gemm g = {.w = w.w, .bias = role_bias(c, op).w, .out = act, .pre = pre,
                   .ic = ic, .oc = oc};
    return gemm_over_rows(c, &g, inp);
}

/* Where a row-parallel GEMM writes its (T, h) partial sum: in place of the residual
 * rows it becomes (summed over tp there), or, with sp, into a buffer that the
 * reduce-scatter then spreads over the ranks' rows. */
static float *row_out(pt_layer_ctx *c, float *rows)
{
    return c->d.sp ? c->S->rout : rows;
}

/* RoPE on every sequence chunk of this rank at its position in the whole sequence. */
static void rope_all(pt_layer_ctx *c, float *t, int nh, bool backward, float *grad_out)
{
    pt_kernels *kn = c->n->kn;
    const pt_layer_dims *d = &c->d;
    for (int p = 0; p < pt_dims_pieces(d); p++) {
        int64_t off = p * d->b * d->sc * nh * d->d;
        int pos0 = (int)pt_dims_piece_pos(d, d->cr, p);
        if (backward)
            kn->rope_backward(kn, pt_act_at(c, grad_out, off), pt_act_at(c, t, off), (int)d->b,
                              (int)d->sc, nh, d->d, pos0, kRopeTheta);
        else
            kn->rope_forward(kn, pt_act_at(c, t, off), pt_act_at(c, t, off), (int)d->b,
                             (int)d->sc, nh, d->d, pos0, kRopeTheta);
    }
}

/* A branch's dropout before its residual add (in place), when the model drops. */
static void drop_branch(pt_layer_ctx *c, float *branch, int site)
{
    if (pt_layer_dropping(c))
        pt_layer_dropout_rows(c, branch, NULL, pt_layer_own_row0(c), c->d.R, site);
}

/* The residual add after a branch, with the branch's dropout first. */
static void residual_add(pt_layer_ctx *c, float *branch, const float *skip, int site)
{
    drop_branch(c, branch, site);
    c->n->kn->residual_forward(c->n->kn, branch, branch, skip, c->d.R * c->d.h);
}

/* ---- Backward ops -------------------------------------------------------------------------- */

/* A linear layer's weight (and bias) gradients from dout and its input inp, added. */
static int linear_wgrad(pt_layer_ctx *c, const pt_op *op, const float *dout,
                        const float *inp, int ic, int oc)
{
    pt_param_view w = param(c, op->param, false);
    if (pt_fp8_linear(c, op->param))
        return pt_fp8_wgrad(c, op->param, &op->fp8, w.g, role_bias(c, op).g, dout, inp, ic,
                            oc);
    rows_gemm g = {.w = w.w, .dw = w.g, .dbias = role_bias(c, op).g, .dout = dout,
                   .ic = ic, .oc = oc};
    return gemm_over_rows(c, &g, inp);
}

/* The bias gradient an FP8 data gradient sums in its output gradient's cast, where the
 * plan says so (pt_fp8_work.dbias: the weight gradient after it then has none), else
 * NULL. */
static float *fp8_dbias(const pt_layer_ctx *c, const pt_op *op)
{
    return op->fp8.dbias ? param(c, op->param, true).g : NULL;
}

/* A linear layer's data gradient into dinp (T, ic): written where the op's role says
 * so (gemm_dgrad_write: the first data gradient into its buffer, planner/ops.c), else
 * added to what the buffer holds. */
static int linear_dgrad(pt_layer_ctx *c, const pt_op *op, float *dinp, const float *dout,
                        int ic, int oc)
{
    pt_kernels *kn = c->n->kn;
    const float *w = param(c, op->param, false).w;
    if (pt_fp8_linear(c, op->param))
        return pt_fp8_dgrad(c, op->param, &op->fp8, dinp, op->role == PT_GEMM_DGRAD_WRITE,
                            dout, w, fp8_dbias(c, op), ic, oc);
    if (op->role == PT_GEMM_DGRAD_WRITE)
        kn->matmul_dgrad(kn, dinp, dout, w, c->d.T, ic, oc);
    else
        kn->matmul_backward(kn, dinp, NULL, NULL, dout, NULL, w, c->d.T, ic, oc);
    return 0;
}

/* A norm's backward. With sequence parallelism each tp rank sees only its rows, so
 * the weight gradients of this micro-batch are summed over tp before they are added
 * (Korthikanti et al. 2022) — here, so that every ZeRO stage finds them complete. */
static int norm_bwd(pt_layer_ctx *c, pt_param_ref which, float *dinp, const float *dout,
                    const float *inp, const float *mean, const float *rstd)
{
    pt_kernels *kn = c->n->kn;
    pt_param_view w = param(c, which, false), b = param(c, which, true);
    int h = c->d.h;
    float *dw = w.g, *db = b.g;
    if (c->d.sp) {
        dw = c->S->dnorm;
        db = b.g ? c->S->dnorm + h : NULL;
        kn->zero(kn, c->S->dnorm, 2 * (size_t)h * sizeof(float));
    }
    if (c->n->spec.norm == PT_NORM_RMSNORM)
        kn->rmsnorm_backward(kn, dinp, dw, dout, inp, w.w, rstd, c->d.R, h);
    else
        kn->layernorm_backward(kn, dinp, dw, db, dout, inp, w.w, mean, rstd, c->d.R, h);
    if (!c->d.sp)
        return 0;
    /* the collective is ordered after the kernels on every backend (comm.h) */
    if (pt_comm_allreduce(c->n->comm, PT_GROUP_TP, c->S->dnorm, 2 * (int64_t)h, c->err))
        return -1;
    kn->add_f32(kn, w.g, dw, h);
    if (db)
        kn->add_f32(kn, b.g, db, h);
    return 0;
}

/* q, k and v of one input and one width as one call each way (the plan's qkv and
 * qkv_wgrad: planner/ops.c's shared_qkv, tp = 1, each oc wide): the forward into out,
 * or with dout the weight gradients (kernels.h's matmul_forward_shared,
 * matmul_wgrad_shared; they batch where the pointers lie at equal steps: the parameters
 * sit (w, b) after (w, b), and tensors.c's carve_slot and carve_scratch lay q, k, v and
 * the gradients the wgrad reads end to end). */
static int qkv_shared(pt_layer_ctx *c, const pt_op *op, float *const out[3],
                      const float *const dout[3], const float *inp, int oc)
{
    pt_kernels *kn = c->n->kn;
    const pt_layer_dims *d = &c->d;
    static const pt_param_ref refs[3] = {PT_PARAM_Q, PT_PARAM_K, PT_PARAM_V};
    const float *w[3], *bias[3];
    float *dw[3], *dbias[3];
    for (int i = 0; i < 3; i++) {
        pt_param_view pw = param(c, refs[i], false), pb = param(c, refs[i], true);
        w[i] = pw.w;
        dw[i] = pw.g;
        bool b = pt_gemm_role_has_bias(op->role);
        bias[i] = b ? pb.w : NULL;
        dbias[i] = b ? pb.g : NULL;
    }
    /* FP8 casts and multiplies each projection apart, with its own reuse of casts (the
     * op's pt_fp8_work), so the planner batches none under FP8 (gemm_epilogues) */
    if (pt_fp8_linear(c, PT_PARAM_Q))
        return pt_err_set(c->err, "internal: layer %lld's q, k and v are planned as one "
                                  "batched GEMM under FP8, which runs one GEMM each",
                          (long long)c->li);
    if (pt_layer_finish_gather(c))
        return -1;
    if (out)
        kn->matmul_forward_shared(kn, 3, out, inp, w, bias, d->T, d->h, oc);
    else
        kn->matmul_wgrad_shared(kn, 3, dw, dbias, dout, inp, d->T, d->h, oc);
    return 0;
}

/* The gradient of a row-parallel layer's output: the residual stream's (T, h)
 * (gathered with sp), through the branch's dropout when there is one. Called by the
 * data-gradient op, which runs first; the weight-gradient op reuses the result. */
static const float *branch_grad(pt_layer_ctx *c, int site, bool first)
{
    const float *g = c->S->gdres;
    if (!pt_layer_dropping(c))
        return g;
    if (first) {
        c->n->kn->zero(c->n->kn, c->S->ddrop, pt_act_bytes(c, c->d.T * c->d.h));
        pt_layer_dropout_rows(c, c->S->ddrop, g, 0, c->d.T, site);
    }
    return c->S->ddrop;
}

/* The weight gradients of K or V when one KV head is shared by several tp ranks
 * (tp > k): each rank's share comes from its own query heads, and the head's
 * gradient is the sum over the ranks sharing it. Each rank writes its share into its
 * head's slot of a buffer of every head, the buffer is summed over tp (the other
 * heads' ranks add into the other slots), and each rank takes its head's slot. */
static int kv_wgrad_shared(pt_layer_ctx *c, const pt_op *op, pt_param_ref which,
                           const float *dout, const float *inp)
{
    pt_kernels *kn = c->n->kn;
    const pt_layer_dims *d = &c->d;
    pt_param_view w = param(c, which, false), b = param(c, which, true);
    int kvd = d->kh * d->d;
    int64_t part = (int64_t)kvd * (d->h + 1), heads = c->n->spec.kv_heads;
    float *mine = c->S->dkv + (d->tr / d->kv_share) * part;
    if (pt_layer_finish_gather(c))
        return -1;
    kn->zero(kn, c->S->dkv, (size_t)(heads * part) * sizeof(float));
    float *mine_b = b.g ? mine + (int64_t)kvd * d->h : NULL;
    if (pt_fp8_linear(c, which)) {
        if (pt_fp8_wgrad(c, which, &op->fp8, mine, mine_b, dout, inp, d->h, kvd))
            return -1;
    } else
        kn->matmul_backward(kn, NULL, mine, mine_b, dout, inp, w.w, d->T, d->h, kvd);
    if (pt_comm_allreduce(c->n->comm, PT_GROUP_TP, c->S->dkv, heads * part, c->err))
        return -1;
    kn->add_f32(kn, w.g, mine, (int64_t)kvd * d->h);
    if (b.g)
        kn->add_f32(kn, b.g, mine + (int64_t)kvd * d->h, kvd);
    return 0;
}

/* ---- The buffers an op names -------------------------------------------------------------- */

/* The buffer `t` of the running layer (or of the embedding or head), or NULL for what is
 * not one buffer of the micro-batch (parameters, the K/V ring, gradient buckets: their
 * ops move them themselves). */
static float *tensor(pt_layer_ctx *c, pt_tensor t)
{
    pt_acts *A = c->A;
    pt_scratch *S = c->S;
    pt_head_acts *H = c->H;
    pt_layer_acts *L = c->l >= 0 ? &A->layer[c->ai] : NULL;
    switch (t) {
    case PT_TEN_ATTN_RES: return L ? L->x2 : NULL;
    case PT_TEN_MLP_RES: return L ? A->x[c->xi + 1] : NULL;
    case PT_TEN_EMBED_RES: return A->x[0];
    case PT_TEN_ROW_PARTIAL: return S->rout;
    case PT_TEN_LN1: return L ? L->ln1 : NULL;
    case PT_TEN_LN2: return L ? L->ln2 : NULL;
    case PT_TEN_LNF: return H ? H->lnf : NULL;
    case PT_TEN_GATHERED: return S->gath;
    case PT_TEN_DRES: return S->dres;
    case PT_TEN_DRES_GATHERED: return S->gdres;
    case PT_TEN_DLN: return S->dln;
    case PT_TEN_DLN_ROWS: return S->dlns;
    case PT_TEN_XENT_MAX: return S->ce;
    case PT_TEN_XENT_SUMS: return S->ce ? S->ce + c->d.T : NULL;
    case PT_TEN_NONE:
    case PT_TEN_KV:
    case PT_TEN_LAYER_WEIGHTS:
    case PT_TEN_LAYER_GRADS:
    case PT_TEN_GRADS:
    case PT_TEN_EMBED_GRAD:
    case PT_TEN_WEIGHTS:
    case PT_TEN_COUNT:
        break;
    }
    return NULL;
}

/* A tensor a kernel op reads or writes that the planner names (op->src: a
 * column-parallel GEMM's input, the norm output or its gathered rows; op->dst: a norm's
 * output, the data gradients' input gradient), or NULL with the error set. */
static float *op_tensor(pt_layer_ctx *c, const pt_op *op, pt_tensor which)
{
    float *t = tensor(c, which);
    if (!t)
        pt_err_set(c->err, "internal: op '%s' uses '%s', which this rank does not hold",
                   pt_op_kind_name(op->kind), pt_tensor_name(which));
    return t;
}

/* ---- Collectives inside a micro-batch ------------------------------------------------------ */

/* Megatron-LM's f and g operators (Shoeybi et al. 2019) and their sequence-parallel
 * forms (Korthikanti et al. 2022), on the buffers the op names: the partial sums of a
 * row-parallel output (all-reduced in place, or reduce-scattered from the (T, h) partial
 * output into this rank's rows), a column-parallel input's gradient, the norm output the
 * column-parallel GEMMs read (gathered, beside the next GEMM with tp_overlap) and the
 * residual gradient a row-parallel backward reads (gathered). */
static int tp_collective(pt_layer_ctx *c, const pt_op *op)
{
    pt_comm *comm = c->n->comm;
    const pt_layer_dims *d = &c->d;
    float *src = tensor(c, op->src), *dst = tensor(c, op->dst);
    int64_t Rh = d->R * d->h;
    /* [act] buffers: bf16 on the CUDA backend, summed by the collective in that type
     * (Megatron-LM's tensor-parallel all-reduces run in the compute dtype) */
    pt_comm_dtype t = c->n->kn->act_dtype == PT_KDTYPE_BF16 ? PT_COMM_BF16 : PT_COMM_F32;
    if (!src || !dst)
        return pt_err_set(c->err, "internal: %s moves %s into %s, which this op list does "
                                  "not hold here", pt_op_kind_name(op->kind),
                          pt_tensor_name(op->src), pt_tensor_name(op->dst));
    /* the overlapped gather that may be in flight finished first (the kernels that
     * wrote the input need no wait: every backend orders a collective after the work
     * queued before it, comm.h) */
    if (pt_layer_finish_gather(c))
        return -1;
    if (op->kind == PT_OPK_TP_ALLREDUCE)
        return pt_comm_allreduce_t(comm, PT_GROUP_TP, t, dst, d->T * d->h, c->err);
    if (op->kind == PT_OPK_SP_REDUCESCATTER)
        return pt_comm_reducescatter_t(comm, PT_GROUP_TP, t, src, dst, Rh, c->err);
    if (op->dst != PT_TEN_GATHERED) /* the residual gradient */
        return pt_comm_allgather_t(comm, PT_GROUP_TP, t, src, dst, Rh, c->err);
    int rc;
    if (op->overlapped) { /* tp_overlap: the next GEMM starts on this rank's rows */
        c->gather_shard = src;
        rc = pt_comm_iallgather_t(comm, PT_GROUP_TP, t, src, dst, Rh, &c->gather, c->err);
    } else
        rc = pt_comm_allgather_t(comm, PT_GROUP_TP, t, src, dst, Rh, c->err);
    c->gather_dst = dst;
    return rc;
}

/* The vocab-parallel loss statistics (kernels.h): the row maxima (max-reduced), then the
 * sums of exponentials and target logits (summed), over tp. */
static int xent_allreduce(pt_layer_ctx *c, const pt_op *op)
{
    float *buf = tensor(c, op->dst);
    if (!buf)
        return pt_err_set(c->err, "internal: %s without the loss statistics' buffer (tp = 1)",
                          pt_op_kind_name(op->kind));
    if (pt_layer_finish_gather(c)) /* as tp_collective */
        return -1;
    if (op->kind == PT_OPK_XENT_MAX_ALLREDUCE)
        return pt_comm_allreduce_max(c->n->comm, PT_GROUP_TP, buf, c->d.T, c->err);
    return pt_comm_allreduce(c->n->comm, PT_GROUP_TP, buf, 2 * c->d.T, c->err);
}

/* ---- Embedding and cross-entropy ------------------------------------------------------------ */

static void embed(pt_layer_ctx *c, bool fwd)
{
    pt_kernels *kn = c->n->kn;
    const pt_layer_dims *d = &c->d;
    pt_param_view wte = param(c, PT_PARAM_WTE, false), wpe = param(c, PT_PARAM_WPE, false);
    int v0 = d->tr * d->v;
    /* The positions are added by one tp rank: the partial lookups are summed. */
    const float *pos = d->tr == 0 ? wpe.w : NULL;
    float *out = fwd ? row_out(c, c->A->x[0]) : NULL;
    const float *dout = c->S->gdres;
    for (int p = 0; p < pt_dims_pieces(d); p++) { /* each chunk at its place in the sequence */
        int64_t row = p * d->b * d->sc;
        int pos0 = (int)pt_dims_piece_pos(d, d->cr, p);
        if (fwd)
            kn->embed_forward(kn, pt_act_at(c, out, row * d->h), c->A->tokens + row, wte.w, pos,
                              (int)d->b, (int)d->sc, d->h, v0, d->v, pos0);
        else
            kn->embed_backward(kn, wte.g, wpe.g, pt_act_at(c, dout, row * d->h),
                               c->A->tokens + row, (int)d->b, (int)d->sc, d->h, v0, d->v, pos0);
    }
}

/* The fused cross-entropy: the loss, and in a training forward (dloss > 0) the logits'
 * gradient in place of the logits. With tp > 1 the row statistics are the ones
 * xent_max, xent_sumexp and their all-reduces left in the scratch. */
static void xent(pt_layer_ctx *c)
{
    pt_kernels *kn = c->n->kn;
    pt_acts *A = c->A;
    pt_head_acts *H = c->H;
    const pt_layer_dims *d = &c->d;
    float *dlogits = c->dloss > 0 ? H->logits : NULL;
    if (d->t == 1) {
        kn->crossentropy(kn, H->losses, dlogits, H->logits, A->targets, d->T, d->v, c->dloss);
        return;
    }
    float *mx = c->S->ce, *sum = mx + d->T, *tgt = sum + d->T;
    kn->ce_finalize(kn, H->losses, dlogits, H->logits, A->targets, mx, sum, tgt, d->T, d->v,
                    d->tr * d->v, c->dloss);
}

/* ---- One op ----------------------------------------------------------------------------- */

static int priced_only(pt_layer_ctx *c, const pt_op *op)
{
    return pt_err_set(c->err, "internal: op '%s' describes another stack's kernels; ptrun "
                              "trains with its own (plans are re-listed for stack 'ptrun')",
                      pt_op_kind_name(op->kind));
}

static int outside_micro_batch(pt_layer_ctx *c, const pt_op *op)
{
    return pt_err_set(c->err, "internal: op '%s' belongs to the step's end, not to a "
                              "micro-batch's op list", pt_op_kind_name(op->kind));
}

/* q/k norms (Qwen3): an RMSNorm over each head of q (gain qk_norm[0, d)) and of k (gain
 * qk_norm[d, 2d)), from the projections' outputs (nq, nk) into q and k. */
static int qk_norm_fwd(pt_layer_ctx *c, const float *nq, const float *nk)
{
    pt_kernels *kn = c->n->kn;
    const pt_layer_dims *d = &c->d;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_param_view w = param(c, PT_PARAM_QK_NORM, false);
    int64_t qrows = d->T * d->a, krows = d->T * d->kh;
    kn->rmsnorm_forward(kn, L->q, L->qkn_rstd, nq, w.w, qrows, d->d, kEps);
    kn->rmsnorm_forward(kn, L->k, L->qkn_rstd + qrows, nk, pt_act_at(c, w.w, d->d), krows,
                        d->d, kEps);
    return 0;
}

/* Their backward: from the gradients of the normed q and k (dq, dk) into those of the
 * projections' outputs (gq, gk, written: zeroed first) and the gains' gradients. A rank
 * holds a/t of the heads, so with tp > 1 each rank's gain gradients are a part, summed
 * over tp. A KV head replicated over kv_share ranks is too: each copy's dk holds only
 * what its rank's query heads gave it (the K weight's gradient is summed over the copies
 * the same way, kv_wgrad_shared), so each copy's part of the gain's gradient is its own
 * and the sum counts every query head once. */
static int qk_norm_bwd(pt_layer_ctx *c, const float *nq, const float *nk, const float *dq,
                       const float *dk, float *gq, float *gk)
{
    pt_kernels *kn = c->n->kn;
    const pt_layer_dims *d = &c->d;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_param_view w = param(c, PT_PARAM_QK_NORM, false);
    int64_t qrows = d->T * d->a, krows = d->T * d->kh;
    int dd = d->d;
    bool split = c->n->layout.tp > 1;
    float *dw = split ? c->S->dqknorm : w.g;
    kn->zero(kn, gq, pt_act_bytes(c, qrows * dd));
    kn->zero(kn, gk, pt_act_bytes(c, krows * dd));
    if (split)
        kn->zero(kn, dw, 2 * (size_t)dd * sizeof(float));
    kn->rmsnorm_backward(kn, gq, dw, dq, nq, w.w, L->qkn_rstd, qrows, dd);
    kn->rmsnorm_backward(kn, gk, dw + dd, dk, nk, pt_act_at(c, w.w, dd), L->qkn_rstd + qrows,
                         krows, dd);
    if (!split)
        return 0;
    /* the collective is ordered after the kernels on every backend (comm.h) */
    if (pt_comm_allreduce(c->n->comm, PT_GROUP_TP, dw, 2 * (int64_t)dd, c->err))
        return -1;
    kn->add_f32(kn, w.g, dw, 2 * dd);
    return 0;
}

/* Runs op `op` of the running list on the context's micro-batch and layer: 0, or -1
 * with the error set. One case per kind (-Wswitch-enum: a kind the planner gains and
 * this switch lacks does not compile). Backward ops accumulate (see the top). */
int pt_layer_run_op(pt_layer_ctx *c, const pt_op *op)
{
    pt_kernels *kn = c->n->kn;
    pt_acts *A = c->A;
    pt_scratch *S = c->S;
    const pt_layer_dims *d = &c->d;
    pt_layer_acts *L = c->l >= 0 ? &A->layer[c->ai] : NULL;
    pt_head_acts *H = c->H;
    float *x = L ? A->x[c->xi] : NULL, *y = L ? A->x[c->xi + 1] : NULL;
    /* the chunk's output, which the head reads (in the last chunk's slot) */
    float *xl = A->x[c->n->chunk_layers[c->n->layout.vp - 1]];
    int qd = d->a * d->d, kvd = d->kh * d->d;
    int64_t Tf = d->T * d->f;
    pt_param_ref w = op->param;
    /* Without RoPE the projections' gradients are the attention's directly; with q/k
     * norms they are the norms' input gradients. */
    bool rope = c->n->spec.pos == PT_POS_ROPE, qkn = c->n->spec.qk_norm;
    float *gq = rope ? S->dqr : S->dq, *gk = rope ? S->dkr : S->dk;
    float *nq = NULL, *nk = NULL; /* the projections' outputs under q/k norms */
    if (qkn && L) {
        nq = L->qkn;
        nk = pt_act_at(c, L->qkn, d->T * qd);
    }
    if (qkn) {
        gq = S->dqkn;
        gk = pt_act_at(c, S->dqkn, d->T * qd);
    }
    const pt_op_kind_info *k = pt_op_kind_info_of(op->kind);
    if (!L && k->lists == 1u << PT_LIST_LAYER)
        return pt_err_set(c->err, "internal: layer op '%s' outside a layer", k->name);
    if (!H && k->lists == 1u << PT_LIST_HEAD)
        return pt_err_set(c->err, "internal: head op '%s' on a stage without the head",
                          k->name);
    /* the tensors the planner names: a column-parallel GEMM's input (the norm output),
     * a norm's output, the data gradients' input gradient */
    const float *in = NULL;
    float *out = NULL;
    if (op->cls == PT_OP_KERNEL && op->src != PT_TEN_NONE && !(in = op_tensor(c, op, op->src)))
        return -1;
    if (op->cls == PT_OP_KERNEL && op->dst != PT_TEN_NONE && !(out = op_tensor(c, op, op->dst)))
        return -1;
    switch (op->kind) {
    /* a layer's forward */
    case PT_OPK_NORM1:
        norm_fwd(c, w, x, NULL, out, L->ln1_mean, L->ln1_rstd);
        return 0;
    case PT_OPK_Q: return linear_fwd(c, op, qkn ? nq : L->q, in, d->h, qd);
    case PT_OPK_K: return linear_fwd(c, op, qkn ? nk : L->k, in, d->h, kvd);
    case PT_OPK_V: return linear_fwd(c, op, L->v, in, d->h, kvd);
    case PT_OPK_QKV: {
        float *const out[3] = {qkn ? nq : L->q, qkn ? nk : L->k, L->v};
        return qkv_shared(c, op, out, NULL, in, qd);
    }
    case PT_OPK_QK_NORM: return qk_norm_fwd(c, nq, nk);
    case PT_OPK_QK_NORM_BWD:
        return qk_norm_bwd(c, nq, nk, rope ? S->dqr : S->dq, rope ? S->dkr : S->dk, gq, gk);
    case PT_OPK_ROPE:
        rope_all(c, L->q, d->a, false, NULL);
        rope_all(c, L->k, d->kh, false, NULL);
        return 0;
    case PT_OPK_ATTN:
        return pt_attention_forward(c, op->recompute &&
                                           c->n->layout.recompute != PT_RECOMPUTE_FULL);
    case PT_OPK_ATTN_OUT:
        if (pt_gemm_role_adds_residual(op->role))
            return linear_res_fwd(c, op, L->x2, L->att, x, qd, d->h, PT_DROP_ATTN);
        return linear_fwd(c, op, row_out(c, L->x2), L->att, qd, d->h);
    case PT_OPK_ADD1:
        residual_add(c, L->x2, x, PT_DROP_ATTN);
        return 0;
    case PT_OPK_NORM2:
        norm_fwd(c, w, L->x2, NULL, out, L->ln2_mean, L->ln2_rstd);
        return 0;
    case PT_OPK_MLP_GATE: return linear_fwd(c, op, L->gate, in, d->h, d->f);
    case PT_OPK_MLP_UP: return linear_fwd(c, op, L->up, in, d->h, d->f);
    case PT_OPK_ACT: {
        if (c->n->spec.act == PT_ACT_SWIGLU) {
            kn->swiglu_forward(kn, L->act, L->gate, L->up, d->T, d->f);
            return 0;
        }
        /* where the plan says, the down projection's input amax, taken as it is written */
        float *meta = op->fp8.take_amax ? pt_fp8_amax_into(c, PT_PARAM_MLP_DOWN, false, L->act)
                                        : NULL;
        if (meta && kn->gelu_forward_amax) {
            kn->gelu_forward_amax(kn, L->act, L->up, Tf, meta);
            return 0;
        }
        kn->gelu_forward(kn, L->act, L->up, Tf);
        if (meta)
            pt_fp8_amax_after(c, meta, L->act, Tf);
        return 0;
    }
    case PT_OPK_MLP_DOWN:
        if (pt_gemm_role_adds_residual(op->role))
            return linear_res_fwd(c, op, y, L->act, L->x2, d->f, d->h, PT_DROP_MLP);
        return linear_fwd(c, op, row_out(c, y), L->act, d->f, d->h);
    case PT_OPK_ADD2:
        residual_add(c, y, L->x2, PT_DROP_MLP);
        return 0;
    /* fused forms */
    case PT_OPK_ADD1_NORM2:
        drop_branch(c, L->x2, PT_DROP_ATTN); /* then the add in the norm's kernel */
        norm_fwd(c, w, L->x2, x, out, L->ln2_mean, L->ln2_rstd);
        return 0;
    case PT_OPK_MLP_UP_GELU: return linear_gelu_fwd(c, op, L->act, L->up, in, d->h, d->f);
    case PT_OPK_MLP_DOWN_DGRAD_GELU: {
        /* dup = (gradient of the down projection's output · w) ⊙ gelu'(up), written */
        pt_param_view wd = param(c, w, false);
        if (pt_fp8_linear(c, w)) { /* the FP8 data gradient, then the GELU's backward */
            if (pt_fp8_dgrad(c, w, &op->fp8, S->dact, true, branch_grad(c, PT_DROP_MLP, true),
                             wd.w, fp8_dbias(c, op), d->f, d->h))
                return -1;
            kn->zero(kn, S->dup, pt_act_bytes(c, Tf));
            kn->gelu_backward(kn, S->dup, S->dact, L->up, Tf);
            return 0;
        }
        kn->matmul_backward_dgelu(kn, S->dup, branch_grad(c, PT_DROP_MLP, true), wd.w, L->up,
                                  d->T, d->f, d->h);
        return 0;
    }
    /* its backward: the MLP half */
    case PT_OPK_MLP_DOWN_DGRAD:
        return linear_dgrad(c, op, S->dact, branch_grad(c, PT_DROP_MLP, true), d->f, d->h);
    case PT_OPK_MLP_DOWN_WGRAD:
        return linear_wgrad(c, op, branch_grad(c, PT_DROP_MLP, false), L->act, d->f, d->h);
    case PT_OPK_ACT_BWD: {
        if (c->n->spec.act == PT_ACT_SWIGLU) {
            kn->zero(kn, S->dup, pt_act_bytes(c, Tf));
            kn->zero(kn, S->dgate, pt_act_bytes(c, Tf));
            kn->swiglu_backward(kn, S->dgate, S->dup, S->dact, L->gate, L->up, d->T, d->f);
            return 0;
        }
        /* where the plan says written, with the up projection's output-gradient amax */
        float *meta = op->fp8.take_amax ? pt_fp8_amax_into(c, PT_PARAM_MLP_UP, true, S->dup)
                                        : NULL;
        if (meta && kn->gelu_backward_amax) {
            kn->gelu_backward_amax(kn, S->dup, S->dact, L->up, Tf, meta);
            return 0;
        }
        kn->zero(kn, S->dup, pt_act_bytes(c, Tf));
        kn->gelu_backward(kn, S->dup, S->dact, L->up, Tf);
        if (meta)
            pt_fp8_amax_after(c, meta, S->dup, Tf);
        return 0;
    }
    case PT_OPK_MLP_GATE_DGRAD: return linear_dgrad(c, op, out, S->dgate, d->h, d->f);
    case PT_OPK_MLP_UP_DGRAD: return linear_dgrad(c, op, out, S->dup, d->h, d->f);
    case PT_OPK_MLP_GATE_WGRAD:
        return linear_wgrad(c, op, S->dgate, in, d->h, d->f);
    case PT_OPK_MLP_UP_WGRAD: return linear_wgrad(c, op, S->dup, in, d->h, d->f);
    case PT_OPK_NORM2_BWD:
        return norm_bwd(c, w, S->dres, S->dlns, L->x2, L->ln2_mean, L->ln2_rstd);
    /* the attention half */
    case PT_OPK_ATTN_OUT_DGRAD:
        return linear_dgrad(c, op, S->datt, branch_grad(c, PT_DROP_ATTN, true), qd, d->h);
    case PT_OPK_ATTN_OUT_WGRAD:
        return linear_wgrad(c, op, branch_grad(c, PT_DROP_ATTN, false), L->att, qd, d->h);
    case PT_OPK_ATTN_BWD: return pt_attention_backward(c);
    case PT_OPK_ROPE_BWD:
        kn->zero(kn, S->dqr, pt_act_bytes(c, d->T * qd));
        kn->zero(kn, S->dkr, pt_act_bytes(c, d->T * kvd));
        rope_all(c, S->dq, d->a, true, S->dqr);
        rope_all(c, S->dk, d->kh, true, S->dkr);
        return 0;
    case PT_OPK_Q_DGRAD: return linear_dgrad(c, op, out, gq, d->h, qd);
    case PT_OPK_K_DGRAD: return linear_dgrad(c, op, out, gk, d->h, kvd);
    case PT_OPK_V_DGRAD: return linear_dgrad(c, op, out, S->dv, d->h, kvd);
    case PT_OPK_Q_WGRAD: return linear_wgrad(c, op, gq, in, d->h, qd);
    case PT_OPK_K_WGRAD:
        if (d->kv_share > 1)
            return kv_wgrad_shared(c, op, w, gk, in);
        return linear_wgrad(c, op, gk, in, d->h, kvd);
    case PT_OPK_V_WGRAD:
        if (d->kv_share > 1)
            return kv_wgrad_shared(c, op, w, S->dv, in);
        return linear_wgrad(c, op, S->dv, in, d->h, kvd);
    case PT_OPK_QKV_WGRAD: {
        const float *const dout[3] = {gq, gk, S->dv};
        return qkv_shared(c, op, NULL, dout, in, qd);
    }
    case PT_OPK_NORM1_BWD:
        return norm_bwd(c, w, S->dres, S->dlns, x, L->ln1_mean, L->ln1_rstd);
    /* other stacks' kernels */
    case PT_OPK_ATTN_SCORES:
    case PT_OPK_ATTN_SOFTMAX:
    case PT_OPK_ATTN_DROPOUT:
    case PT_OPK_ATTN_CTX:
    case PT_OPK_ATTN_CTX_DGRAD:
    case PT_OPK_ATTN_CTX_WGRAD:
    case PT_OPK_ATTN_DROPOUT_BWD:
    case PT_OPK_ATTN_SOFTMAX_BWD:
    case PT_OPK_ATTN_SCORES_DGRAD:
    case PT_OPK_ATTN_SCORES_WGRAD:
    case PT_OPK_XENT_BWD:
    case PT_OPK_XENT_ALLREDUCE:
    case PT_OPK_MOE_SYNC:
        return priced_only(c, op);
    /* embedding and head */
    case PT_OPK_EMBED:
        embed(c, true);
        return 0;
    case PT_OPK_EMBED_BWD:
        embed(c, false);
        return 0;
    case PT_OPK_FINAL_NORM:
        norm_fwd(c, w, xl, NULL, out, H->lnf_mean, H->lnf_rstd);
        return 0;
    case PT_OPK_LOGITS: {
        /* the head's bias is its vocabulary mask (a role with a bias where it has one) */
        rows_gemm g = {.w = param(c, w, false).w,
                       .bias = pt_gemm_role_has_bias(op->role) ? H->vmask : NULL,
                       .out = H->logits, .ic = d->h, .oc = d->v};
        return gemm_over_rows(c, &g, in);
    }
    case PT_OPK_LOGITS_DGRAD:
        return linear_dgrad(c, op, out, H->logits, d->h, d->v);
    case PT_OPK_LOGITS_WGRAD: {
        pt_param_view hw = param(c, w, false);
        rows_gemm g = {.w = hw.w, .dw = hw.g, .dout = H->logits, .ic = d->h, .oc = d->v};
        return gemm_over_rows(c, &g, in);
    }
    case PT_OPK_FINAL_NORM_BWD:
        return norm_bwd(c, w, S->dres, S->dlns, xl, H->lnf_mean, H->lnf_rstd);
    case PT_OPK_XENT:
        xent(c);
        return 0;
    case PT_OPK_XENT_MAX:
        kn->ce_local_max(kn, S->ce, H->logits, d->T, d->v);
        return 0;
    case PT_OPK_XENT_SUMEXP:
        kn->ce_local_sumexp(kn, S->ce + d->T, H->logits, S->ce, d->T, d->v);
        kn->ce_local_target(kn, S->ce + 2 * d->T, H->logits, A->targets, d->T, d->v,
                            d->tr * d->v);
        return 0;
    case PT_OPK_XENT_MAX_ALLREDUCE:
    case PT_OPK_XENT_SUM_ALLREDUCE:
        return xent_allreduce(c, op);
    /* tensor and context parallelism */
    case PT_OPK_TP_ALLREDUCE:
    case PT_OPK_SP_ALLGATHER:
    case PT_OPK_SP_REDUCESCATTER:
        return tp_collective(c, op);
    case PT_OPK_CP_RING:
    case PT_OPK_CP_RING_BWD:
    case PT_OPK_CP_A2A_Q:
    case PT_OPK_CP_A2A_KV:
    case PT_OPK_CP_A2A_OUT:
    case PT_OPK_CP_A2A_DOUT:
    case PT_OPK_CP_A2A_DQ:
    case PT_OPK_CP_A2A_DKV:
        /* The K/V blocks travel inside the attention ops, beside their compute, as the
         * op's `overlapped` prices them; the all-to-alls too, around it. */
        return 0;
    case PT_OPK_CP_ALLGATHER:
    case PT_OPK_CP_REDUCESCATTER:
        break; /* cp_comm=all_gather: priced for other stacks, not run here */
    /* mixtures of experts, expert tensor parallelism with them (runtime/moe.c) */
    case PT_OPK_ETP_ALLGATHER:
    case PT_OPK_ETP_REDUCESCATTER:
    case PT_OPK_ETP_ALLGATHER_BWD:
    case PT_OPK_ETP_REDUCESCATTER_BWD:
    case PT_OPK_ROUTER:
    case PT_OPK_MOE_ROUTE:
    case PT_OPK_MOE_AUX:
    case PT_OPK_MOE_PERMUTE:
    case PT_OPK_MOE_DISPATCH:
    case PT_OPK_EXPERT_FC1:
    case PT_OPK_EXPERT_ACT:
    case PT_OPK_EXPERT_FC2:
    case PT_OPK_MOE_COMBINE:
    case PT_OPK_MOE_UNPERMUTE:
    case PT_OPK_MOE_UNPERMUTE_BWD:
    case PT_OPK_MOE_COMBINE_BWD:
    case PT_OPK_EXPERT_FC2_DGRAD:
    case PT_OPK_EXPERT_FC2_WGRAD:
    case PT_OPK_EXPERT_ACT_BWD:
    case PT_OPK_EXPERT_FC1_DGRAD:
    case PT_OPK_EXPERT_FC1_WGRAD:
    case PT_OPK_MOE_DISPATCH_BWD:
    case PT_OPK_MOE_PERMUTE_BWD:
    case PT_OPK_MOE_ROUTE_BWD:
    case PT_OPK_ROUTER_DGRAD:
    case PT_OPK_ROUTER_WGRAD:
        return pt_moe_run_op(c, op, in, out);
    /* ZeRO inside the layers; a mixture of experts' experts are kept whole and reduced at
     * the step (runtime/zero.c), so their group's ops here have nothing to do */
    case PT_OPK_ZERO3_ALLGATHER:
        if (op->group == PT_GROUP_EDP)
            return 0;
        return pt_zero_gather_layer(c->n, c->l, c->next_l, c->err);
    case PT_OPK_ZERO_REDUCESCATTER:
        if (op->group == PT_GROUP_EDP)
            return 0;
        return c->n->zero ? pt_zero_reduce_layer(c->n, c->l, c->err) : 0;
    /* the step's end: the engine's (runtime/engine.c) */
    case PT_OPK_DP_BUCKET:
    case PT_OPK_EMBED_ALLREDUCE:
    case PT_OPK_GRAD_NORM:
    case PT_OPK_ADAM:
    case PT_OPK_ZERO_ALLGATHER:
    case PT_OPK_BF16_CONVERT:
    case PT_OPK_PSGD_ERROR:
    case PT_OPK_PSGD_P:
    case PT_OPK_PSGD_ORTH:
    case PT_OPK_PSGD_Q:
    case PT_OPK_PSGD_DECOMPRESS:
    case PT_OPK_PSGD_ALLREDUCE_P:
    case PT_OPK_PSGD_ALLREDUCE_Q:
        return outside_micro_batch(c, op);
    case PT_OPK_COUNT:
        break;
    }
    return pt_err_set(c->err, "internal: op kind %d", (int)op->kind);
}
