/*
 * Assembling a rank's model: its place in the layout and its chunks' layers, the
 * parameters and their state (param_table.c, or ZeRO 2/3's shards of zero.c, and the
 * gradient compression of compress.c), the planner's op lists this rank runs (a
 * layer's, the embedding's and the head's; each chunk's gradient buckets and the
 * step's end), the parameters they name resolved, the micro-batch's tensors allocated
 * (tensors.c) and the kernels' temporaries reserved; freeing all of it; and the
 * model's state as checkpoints save and load it, whichever of the two holds it.
 */
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- Op lists, buffers and the kernels' temporaries ---------------------------------------- */

/* The kernels' own temporaries, sized once for the largest op of this rank (kernels.h:
 * reserve), so that no op allocates or waits inside a step; and the device scalar of
 * the gradient norm. Every op runs on at most T rows (validation and sampling take the
 * micro-batch's shape); the widest biased or normalised rows are the fused QKV, the
 * MLP's (twice f for SwiGLU's gate and up) and the vocabulary slice. The optimizer's
 * tensors number at most one per parameter plus one per range cut (a ZeRO segment or
 * bucket share cuts at most one parameter in two). */
static int reserve_kernels(pt_net *n, const pt_layer_dims *d, pt_err *err)
{
    pt_kernels *kn = n->kn;
    if (!(n->gsq = kn->alloc(kn, 2 * sizeof *n->gsq)))
        return pt_err_set(err, "out of memory");
    n->lsum = n->gsq + 1;
    n->bytes += (int64_t)(2 * sizeof *n->gsq);
    if (!kn->reserve)
        return 0;
    int64_t cols = d->h, qkv = (int64_t)(d->a + 2 * d->kh) * d->d;
    cols = qkv > cols ? qkv : cols;
    cols = 2 * (int64_t)d->f > cols ? 2 * (int64_t)d->f : cols;
    cols = d->v > cols ? d->v : cols;
    int64_t ranges = n->zero ? pt_zero_segments(n) : n->n_z1 > 0 ? n->n_z1 : 1;
    /* attention_bwd's calls: (b, sc, sc), sc being s without cp and a chunk with it, in
     * the head form with cp's all-to-all; rows: the most any op's call has, u·T there */
    pt_layer_dims at = pt_dims_attn(d);
    /* a mixture of experts: the experts' rows (moe.c) and the dispatch plan's sort */
    int64_t moe_rows = pt_moe_recv_rows_max(&n->spec, &n->layout);
    int64_t rows = moe_rows > at.T ? moe_rows : at.T, fe = n->spec.moe.expert_ffn;
    cols = 2 * fe > cols ? 2 * fe : cols;
    cols = n->spec.moe.experts > cols ? n->spec.moe.experts : cols;
    pt_k_scratch_shape sh = {.rows = rows, .cols = cols, .heads = at.a, .kv_heads = at.kh,
                             .moe_assign = n->spec.moe.experts > 0 ? d->R * n->spec.moe.top_k : 0,
                             .moe_experts = (int)n->spec.moe.experts,
                             .head_dim = d->d, .attn_batch = (int)d->b,
                             .attn_seq = (int)at.sc, .vocab_rows = d->v,
                             .adamw_tensors = (int)(n->n_param + ranges)};
    /* the backend's, like cuBLASLt's workspace: not in the model's bytes, which the
     * memory model predicts */
    if (kn->reserve(kn, &sh))
        return pt_err_set(err, "the %s backend's temporaries: %s", kn->name, kn->err);
    return 0;
}

/* The planner's lists this rank runs: a layer's, the embedding's and the head's (here),
 * each chunk's gradient buckets over its reduced range and the step's end (the engine),
 * the latter from the same parameter counts the simulator gives them (planner/sim.c). */
static int build_op_lists(pt_net *n, const pt_plan *p)
{
    pt_opctx c;
    pt_opctx_init(&c, &n->spec, &n->layout, &p->train, &p->cluster);
    c.tp_rank = n->tp_rank; /* its row-parallel forwards add no bias unless it is rank 0 */
    c.moe_layer = false;
    int rc = pt_ops_layer(&c, false, &n->ops[PT_NET_LAYER_FWD]);
    if (rc == 0)
        rc = pt_ops_layer(&c, true, &n->ops[PT_NET_LAYER_BWD]);
    c.moe_layer = true;
    if (rc == 0 && n->spec.moe.experts > 0)
        rc = pt_ops_layer(&c, false, &n->ops[PT_NET_MOE_FWD]);
    if (rc == 0 && n->spec.moe.experts > 0)
        rc = pt_ops_layer(&c, true, &n->ops[PT_NET_MOE_BWD]);
    c.moe_layer = pt_model_layer_moe(&n->spec, 0);
    if (rc == 0)
        rc = pt_ops_embed(&c, false, &n->ops[PT_NET_EMBED_FWD]);
    if (rc == 0)
        rc = pt_ops_embed(&c, true, &n->ops[PT_NET_EMBED_BWD]);
    if (rc == 0)
        rc = pt_ops_head(&c, false, &n->ops[PT_NET_HEAD_FWD]);
    if (rc == 0)
        rc = pt_ops_head(&c, true, &n->ops[PT_NET_HEAD_BWD]);
    const pt_layout *l = &n->layout;
    int V = l->pp * l->vp;
    pt_step_params sp = {.params = (double)n->n_elems};
    for (int ch = 0; ch < l->vp && rc == 0; ch++) {
        int vs = ch * l->pp + n->stage;
        double experts = (double)(n->experts_end[ch] - n->chunk_begin[ch]);
        sp.experts += experts;
        double chunk = (double)(n->chunk_end[ch] - n->chunk_begin[ch]) - experts;
        rc = pt_ops_grad_sync(&c, chunk - pt_step_tied_out(&c, vs, V), n->chunk_layers[ch],
                              &n->ops_sync[ch]);
        if (rc == 0) /* the experts' own buckets, over their group */
            rc = pt_ops_expert_sync(&c, experts, &n->ops_sync[ch]);
        if (vs == 0 || vs == V - 1)
            sp.tied = pt_step_tied(&c, vs, V);
    }
    if (n->stage == 0)
        sp.edge += (double)pt_params_embedding(&n->spec, l->tp);
    if (n->stage == l->pp - 1)
        sp.edge += (double)pt_params_head(&n->spec, l->tp, l->pp);
    return rc ? rc : pt_ops_optimizer(&c, &sp, &n->ops_step);
}

int pt_net_alloc_runtime(pt_net *n, const pt_plan *p, int slots, pt_err *err)
{
    pt_layer_dims d = pt_net_dims(n);
    if (n->dropout > 0 && (!n->kn->dropout_forward || !n->kn->dropout_backward))
        return pt_err_set(err, "dropout %g: the %s backend has no dropout kernels",
                          (double)n->dropout, n->kn->name);
    if ((d.t > 1 || d.cp > 1) && !n->comm)
        return pt_err_set(err, "internal: tp = %d, cp = %d needs a communicator", d.t, d.cp);
    if (d.sp && d.T % d.t)
        return pt_err_set(err, "sequence parallelism: %lld tokens per micro-batch do not "
                               "split over tp = %d", (long long)d.T, d.t);
    if (d.cp > 1 && n->spec.seq % (2 * d.cp))
        return pt_err_set(err, "context parallelism: sequence %lld does not split into "
                               "2·cp = %d chunks", (long long)n->spec.seq, 2 * d.cp);
    if (pt_fp8_init(n, &p->train.fp8, err)) /* before the buffers, which it sizes */
        return -1;
    if (pt_tensors_check(n, slots, err))
        return -1;
    if (build_op_lists(n, p))
        return pt_err_set(err, "out of memory building the op lists");
    if (pt_net_resolve_params(n, err))
        return -1;
    if (pt_tensors_alloc(n, slots, err) || pt_moe_init(n, err))
        return -1;
    return reserve_kernels(n, &d, err);
}

void pt_net_free_runtime(pt_net *n)
{
    pt_tensors_free(n);
    pt_moe_free(n);
    pt_fp8_free(n);
    if (n->kn)
        n->kn->free(n->kn, n->gsq);
    n->gsq = n->lsum = NULL;
    free(n->adam);
    n->adam = NULL;
    n->adam_cap = 0;
    for (int i = 0; i < PT_NET_LISTS; i++)
        pt_oplist_free(&n->ops[i]);
    for (int i = 0; i < PT_CHUNK_MAX; i++)
        pt_oplist_free(&n->ops_sync[i]);
    pt_oplist_free(&n->ops_step);
}

/* ---- Building and freeing a rank's model --------------------------------------------------- */

int pt_net_build(pt_net *n, const pt_plan *p, pt_kernels *kn, const pt_net_place *at,
                 int slots, uint64_t seed, pt_trace *trace, pt_err *err)
{
    memset(n, 0, sizeof *n);
    /* The planner prices ALiBi models (BLOOM, MPT) for validation against published
     * runs; the runtime's attention kernels have no score bias, so it refuses them
     * rather than train a model without positions. */
    if (p->model.pos == PT_POS_ALIBI)
        return pt_err_set(err, "model '%s': positions 'alibi' are not implemented by the "
                               "runtime (learned and rope are); the planner can still price "
                               "it", p->model.name);
    n->spec = p->model;
    n->layout = p->layout;
    n->kn = kn;
    n->trace = trace;
    const char *ts = getenv("PT_TRACE_SYNC");
    n->trace_sync = trace && trace->on && ts && strcmp(ts, "1") == 0;
    n->stage = at->stage;
    n->tp_rank = at->tp_rank;
    n->cp_rank = at->cp_rank;
    n->ep_rank = at->ep_rank;
    n->edp_rank = at->edp_rank;
    n->etp_rank = at->etp_rank;
    n->comm = at->comm;
    n->cp_next = at->cp_next;
    n->cp_prev = at->cp_prev;
    n->dropout = (float)p->run.dropout;
    n->seed = seed;
    int stage = at->stage;
    if (n->layout.vp > PT_CHUNK_MAX)
        return pt_err_set(err, "vp = %d: at most %d model chunks per rank", n->layout.vp,
                          PT_CHUNK_MAX);
    /* each chunk's layers: uneven stages (first_layers, last_layers) differ between
     * ranks, a pipeline layout also between the chunks of one rank */
    n->n_layers = n->slot_layers = 0;
    for (int c = 0; c < n->layout.vp; c++) {
        int64_t k = pt_stage_layers(&n->spec, &n->layout, c * n->layout.pp + stage,
                                    &n->chunk_first[c]);
        n->chunk_layers[c] = k;
        n->chunk_li[c] = n->n_layers;
        n->n_layers += k;
        n->slot_layers = k > n->slot_layers ? k : n->slot_layers;
    }
    if (pt_net_build_table(n, err))
        return -1;
    int64_t tied_lo, tied_hi;
    if (pt_net_reduce_ranges(n, &tied_lo, &tied_hi, err))
        return -1;
    float *host;
    if (pt_net_init_values(n, seed, &host, err))
        return -1;
    int rc;
    if (n->layout.zero >= 2 && at->dp_size > 1) {
        if (!n->comm)
            rc = pt_err_set(err, "internal: ZeRO-%d needs a communicator", n->layout.zero);
        else
            rc = pt_zero_init(n, n->layout.zero, at->dp_rank, at->dp_size, host, err);
    } else {
        rc = pt_net_alloc_state(n, p, at, tied_lo, tied_hi, err);
        if (rc == 0)
            rc = pt_compress_init(n, at->dp_rank, at->dp_size,
                                  p->train.bucket_bytes / (int64_t)sizeof(float), err);
        if (rc == 0)
            rc = pt_net_upload_master(n, host, err);
    }
    free(host);
    if (rc == 0)
        rc = pt_net_alloc_runtime(n, p, slots, err);
    if (rc == 0)
        rc = pt_devtime_init(n, err);
    return rc;
}

void pt_net_release(pt_net *n)
{
    if (n->zero)
        pt_zero_free(n); /* the shards (n->master, grad, m and v with them) */
    pt_compress_free(n);
    pt_net_free_runtime(n);
    pt_devtime_free(n);
    pt_net_free_state(n);
    memset(n, 0, sizeof *n);
}

int pt_net_init_at(pt_net **out, const pt_plan *p, pt_kernels *kn, const pt_net_place *at,
                   int slots, uint64_t seed, pt_trace *trace, pt_err *err)
{
    pt_net *n = calloc(1, sizeof *n);
    *out = NULL;
    if (!n)
        return pt_err_set(err, "out of memory");
    if (pt_net_build(n, p, kn, at, slots, seed, trace, err)) {
        pt_net_free(n);
        return -1;
    }
    *out = n;
    return 0;
}

int pt_net_init(pt_net **out, const pt_plan *p, pt_kernels *kn, int stage, int slots,
                uint64_t seed, pt_trace *trace, pt_err *err)
{
    pt_net_place place = {.stage = stage};
    return pt_net_init_at(out, p, kn, &place, slots, seed, trace, err);
}

void pt_net_free(pt_net *n)
{
    if (!n)
        return;
    pt_net_release(n);
    free(n);
}

/* ---- What callers outside the runtime read -------------------------------------------------- */

int64_t pt_net_bytes(const pt_net *n)
{
    return n->bytes;
}

int64_t pt_net_elems(const pt_net *n)
{
    return n->n_elems;
}

int64_t pt_net_opt_elems(const pt_net *n)
{
    return n->opt_elems;
}

int pt_net_param_count(const pt_net *n)
{
    return n->n_param;
}

const pt_param *pt_net_param_at(const pt_net *n, int i)
{
    return i >= 0 && i < n->n_param ? &n->param[i] : NULL;
}

/* ---- State for checkpoints ---------------------------------------------------------------- */

int pt_net_opt_spans(const pt_net *n, int dp_rank, pt_net_span **out, int *count, pt_err *err)
{
    (void)dp_rank; /* each ZeRO-1 bucket knows this rank's place in its group */
    int cap = n->zero ? pt_zero_segments(n) : n->n_z1 > 0 ? n->n_z1 : 1, k = 0;
    pt_net_span *s = calloc((size_t)cap, sizeof *s);
    *out = s;
    if (!s)
        return pt_err_set(err, "out of memory");
    if (n->zero) {
        for (int i = 0; i < cap; i++) {
            pt_zero_shard z = pt_zero_shard_of((pt_net *)n, i);
            s[k++] = (pt_net_span){z.lo, z.hi, z.m - n->m};
        }
    } else if (n->n_z1 > 0) {
        for (int b = 0; b < n->n_z1; b++) {
            const pt_zero1_bucket *z = &n->z1[b];
            int64_t lo = z->lo + (int64_t)z->rank * z->share; /* its group's */
            int64_t hi = lo + z->share < z->hi ? lo + z->share : z->hi;
            s[k++] = (pt_net_span){lo, lo > hi ? lo : hi, z->shard_at};
        }
    } else {
        s[k++] = (pt_net_span){0, n->n_elems, 0};
    }
    *count = k;
    return 0;
}

int pt_net_get_own_master(pt_net *n, float *master, pt_err *err)
{
    pt_kernels *kn = n->kn;
    if (!n->zero)
        kn->copy(kn, master, n->master, (size_t)n->n_elems * sizeof(float), PT_KCOPY_D2H);
    for (int i = 0; n->zero && i < pt_zero_segments(n); i++) {
        pt_zero_shard z = pt_zero_shard_of(n, i);
        kn->copy(kn, master + z.lo, z.master, (size_t)(z.hi - z.lo) * sizeof(float),
                 PT_KCOPY_D2H);
    }
    return kn->sync(kn) ? pt_err_set(err, "%s", kn->err) : 0;
}

int pt_net_get_state(pt_net *n, float *master, float *m, float *v, pt_err *err)
{
    pt_kernels *kn = n->kn;
    size_t bytes = (size_t)n->n_elems * sizeof(float), opt = (size_t)n->opt_elems * sizeof(float);
    if (master && n->zero && pt_zero_get_master(n, master, err))
        return -1;
    if (master && !n->zero)
        kn->copy(kn, master, n->master, bytes, PT_KCOPY_D2H);
    if (m)
        kn->copy(kn, m, n->m, opt, PT_KCOPY_D2H);
    if (v)
        kn->copy(kn, v, n->v, opt, PT_KCOPY_D2H);
    return kn->sync(kn) ? pt_err_set(err, "%s", kn->err) : 0;
}

int pt_net_set_state(pt_net *n, const float *master, const float *m, const float *v,
                     pt_err *err)
{
    pt_kernels *kn = n->kn;
    size_t opt = (size_t)n->opt_elems * sizeof(float);
    if (m)
        kn->copy(kn, n->m, m, opt, PT_KCOPY_H2D);
    if (v)
        kn->copy(kn, n->v, v, opt, PT_KCOPY_H2D);
    if (master && n->zero)
        return pt_zero_set_master(n, master, err);
    if (master)
        return pt_net_upload_master(n, master, err);
    return kn->sync(kn) ? pt_err_set(err, "%s", kn->err) : 0;
}
