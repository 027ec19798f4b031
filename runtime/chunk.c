/*
 * Running a model chunk of one micro-batch: its op lists in order — the embedding's on
 * the first virtual stage, each layer's, the head's and the loss on the last — each op
 * a span of the trace under the planner's key (with the device timers of devtime.c);
 * the calls that tell the engine a chunk's gradients are final, on which its gradient
 * buckets start; and the whole-model forward and backward of one stage (pp = vp = 1).
 * What each op does is layer.c's.
 */
#include "layer_internal.h"

/* ---- Running op lists ---------------------------------------------------------------------- */

/* One op of a micro-batch's list: layer.c's. */
static int exec_layer_op(void *ctx, const pt_op *op, pt_err *err)
{
    (void)err; /* the context's own (pt_layer_ctx.err) */
    return pt_layer_run_op(ctx, op);
}

/* Runs list `id` of the micro-batch and layer of c (oprun.c times each op), then waits
 * for a gather still in flight. */
static int run_list(pt_layer_ctx *c, pt_net_list id)
{
    if (pt_net_run_list(c->n, &c->n->ops[id], exec_layer_op, c, c->err))
        return -1;
    return pt_layer_finish_gather(c);
}

/* The list layer l runs: a mixture of experts' or a dense layer's. */
static pt_net_list layer_list(const pt_net *n, int64_t l, bool backward)
{
    if (pt_model_layer_moe(&n->spec, l))
        return backward ? PT_NET_MOE_BWD : PT_NET_MOE_FWD;
    return backward ? PT_NET_LAYER_BWD : PT_NET_LAYER_FWD;
}

static pt_layer_ctx context(pt_net *n, int slot, float dloss, pt_err *err)
{
    return (pt_layer_ctx){.n = n, .A = n->slot[slot], .H = pt_net_head_of(n, n->slot[slot]),
                          .S = n->scratch, .d = pt_net_dims(n), .l = -1, .dloss = dloss,
                          .err = err};
}

/* Points the context at layer i of chunk `chunk`. */
static void at_layer(pt_layer_ctx *c, int chunk, int64_t i)
{
    const pt_net *n = c->n;
    c->l = n->chunk_first[chunk] + i;
    c->next_l = -1;
    c->li = n->chunk_li[chunk] + i;
    c->ai = c->xi = i;
}

static bool first_vs(const pt_net *n, int chunk)
{
    return chunk == 0 && n->stage == 0;
}

static bool last_vs(const pt_net *n, int chunk)
{
    return chunk == n->layout.vp - 1 && n->stage == n->layout.pp - 1;
}

/* Adds the micro-batch's token losses to *loss_sum (backend memory) where the kernels
 * run; every tp rank holds the same losses, and tp rank 0 counts them. */
static void sum_losses(pt_layer_ctx *c, double *loss_sum)
{
    if (c->d.tr == 0)
        c->n->kn->sum_acc(c->n->kn, c->H->losses, c->d.T, loss_sum);
}

int pt_net_forward_chunk(pt_net *n, int slot, int chunk, const int32_t *tokens,
                         const int32_t *targets, float dloss, double *loss_sum, pt_err *err)
{
    pt_layer_ctx c = context(n, slot, dloss, err);
    pt_kernels *kn = n->kn;
    size_t tb = (size_t)c.d.T * sizeof(int32_t);
    if (dloss == 0)
        c.A->train = false; /* evaluation never drops */
    c.A->dloss = dloss;
    if (first_vs(n, chunk)) {
        kn->copy(kn, c.A->tokens, tokens, tb, PT_KCOPY_H2D);
        if (run_list(&c, PT_NET_EMBED_FWD))
            return -1;
        if (pt_layer_dropping(&c))
            pt_layer_dropout_rows(&c, c.A->x[0], NULL, pt_layer_own_row0(&c), c.d.R,
                                  PT_DROP_EMBED);
    }
    for (int64_t i = 0; i < n->chunk_layers[chunk]; i++) {
        at_layer(&c, chunk, i);
        c.next_l = i + 1 < n->chunk_layers[chunk] ? c.l + 1 : -1;
        if (run_list(&c, layer_list(n, c.l, false)))
            return -1;
    }
    c.l = -1;
    if (!last_vs(n, chunk))
        return 0;
    kn->copy(kn, c.A->targets, targets, tb, PT_KCOPY_H2D);
    if (run_list(&c, PT_NET_HEAD_FWD))
        return -1;
    sum_losses(&c, loss_sum);
    return 0;
}

/* Calls the engine's pt_net.grad_done, when it asked, once elements [lo, chunk end) of
 * the chunk's gradient are final for this micro-batch: lo is the first element of
 * layer l, or the one past its last with `past`, or with l < 0 the chunk's first. A
 * layer's parameters are one contiguous range of the buffer, the head's at the
 * chunk's end and the embedding's at its start (param_table.c's build_table). */
static int grads_done(pt_layer_ctx *c, int chunk, int64_t l, bool past)
{
    pt_net *n = c->n;
    if (!n->grad_done)
        return 0;
    int64_t lo = n->chunk_end[chunk], hi = n->chunk_begin[chunk];
    /* the layer's, resolved at allocation */
    const pt_param *const *row = pt_net_param_row(n, c->li);
    for (int i = 0; l >= 0 && i < 2 * PT_PARAM_COUNT; i++) {
        const pt_param *q = row[i];
        if (!q || q->offset < n->experts_end[chunk]) /* experts: reduced at REDUCE_GRADS */
            continue;
        lo = q->offset < lo ? q->offset : lo;
        hi = q->offset + q->count > hi ? q->offset + q->count : hi;
    }
    return n->grad_done(n->grad_done_ctx, chunk, l < 0 ? n->chunk_begin[chunk] : past ? hi : lo,
                        c->err);
}

int pt_net_backward_chunk(pt_net *n, int slot, int chunk, pt_err *err)
{
    pt_layer_ctx c = context(n, slot, 0, err);
    if (last_vs(n, chunk)) {
        n->kn->zero(n->kn, c.S->dres, pt_act_bytes(&c, c.d.R * c.d.h));
        if (run_list(&c, PT_NET_HEAD_BWD))
            return -1;
        /* the head's parameters follow the chunk's last layer, or open a chunk of none */
        int64_t last = n->chunk_layers[chunk] - 1;
        if (last >= 0)
            at_layer(&c, chunk, last);
        if (grads_done(&c, chunk, last >= 0 ? c.l : -1, last >= 0))
            return -1;
    }
    for (int64_t i = n->chunk_layers[chunk] - 1; i >= 0; i--) {
        at_layer(&c, chunk, i);
        c.next_l = i > 0 ? c.l - 1 : -1;
        if (n->zero && pt_zero_begin_backward(n, c.l, err))
            return -1;
        if (run_list(&c, layer_list(n, c.l, true)) || grads_done(&c, chunk, c.l, false))
            return -1;
    }
    c.l = -1;
    if (first_vs(n, chunk)) {
        if (pt_layer_dropping(&c)) { /* the embedding's dropout, in place on the gradient */
            pt_scratch *S = c.S;
            n->kn->zero(n->kn, S->ddrop, pt_act_bytes(&c, c.d.R * c.d.h));
            pt_layer_dropout_rows(&c, S->ddrop, S->dres, pt_layer_own_row0(&c), c.d.R,
                                  PT_DROP_EMBED);
            n->kn->copy(n->kn, S->dres, S->ddrop, pt_act_bytes(&c, c.d.R * c.d.h),
                        PT_KCOPY_D2D);
        }
        if (run_list(&c, PT_NET_EMBED_BWD) || grads_done(&c, chunk, -1, false))
            return -1;
    }
    return 0;
}

int pt_net_forward(pt_net *n, int slot, const int32_t *tokens, const int32_t *targets,
                   float dloss, double *loss_sum, pt_err *err)
{
    if (n->layout.pp != 1 || n->layout.vp != 1) /* the layout rules keep vp > 1 to pp > 1 */
        return pt_err_set(err, "internal: the whole-model forward needs one pipeline stage of "
                               "one chunk");
    pt_kernels *kn = n->kn;
    kn->zero(kn, n->lsum, sizeof *n->lsum);
    if (pt_net_forward_chunk(n, slot, 0, tokens, targets, dloss, n->lsum, err))
        return -1;
    double sum = 0;
    kn->copy(kn, &sum, n->lsum, sizeof sum, PT_KCOPY_D2H);
    if (kn->sync(kn))
        return pt_err_set(err, "%s", kn->err);
    *loss_sum += sum;
    return pt_net_trace_resolve(n, err);
}

int pt_net_backward(pt_net *n, int slot, pt_err *err)
{
    if (n->layout.pp != 1 || n->layout.vp != 1)
        return pt_err_set(err, "internal: the whole-model backward needs one pipeline stage "
                               "of one chunk");
    if (pt_net_backward_chunk(n, slot, 0, err))
        return -1;
    if (n->kn->sync(n->kn))
        return pt_err_set(err, "%s", n->kn->err);
    return pt_net_trace_resolve(n, err);
}
