/*
 * The engine: one optimizer step is this rank's schedule program (planner/sched.c)
 * executed instruction by instruction — forward and backward of model chunks on
 * micro-batches drawn from the sampler, activations and their gradients sent and
 * received between pipeline stages, gradient reduction over the data-parallel group,
 * clipping and AdamW — the same program the simulator timed. Every instruction is a
 * span in the trace: compute on stream 0, transfers and reductions on stream 1. On a
 * backend with device timers the step ends by giving its op spans the device's times
 * (pt_net_trace_resolve).
 *
 * Data parallelism: each dp rank takes its consecutive share of the step's global
 * samples. With ZeRO 0 each chunk's gradients are all-reduced in buckets started
 * during its last backward of the step and finished at the program's REDUCE_GRADS
 * (below); with ZeRO 1 the flat gradient buffer, padded to a multiple of dp, is
 * reduce-scattered at the optimizer step, each rank updates only its shard of the
 * fp32 master weights (keeping Adam moments for that shard alone), and the shards
 * are all-gathered (Rajbhandari et al. 2020). ZeRO 2 and 3 shard gradients (and with
 * 3 weights) segment by segment (runtime/zero.c): layers reduce-scatter their
 * gradients as their backward ends, the step updates the shards. The loss is
 * normalised by the tokens of the whole global batch, so sums over ranks need no
 * further scaling.
 */
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double pt_lr_at(const pt_run_opts *r, int64_t step)
{
    if (r->warmup_steps > 0 && step < r->warmup_steps)
        return r->lr * (double)(step + 1) / (double)r->warmup_steps;
    int64_t decay = r->steps - r->warmup_steps;
    if (decay <= 1)
        return r->lr;
    double x = (double)(step - r->warmup_steps) / (double)(decay - 1);
    if (x > 1)
        x = 1;
    /* cosine from lr to min_lr (Loshchilov & Hutter 2017, SGDR, without restarts) */
    const double pi = 3.14159265358979323846;
    return r->min_lr + 0.5 * (r->lr - r->min_lr) * (1.0 + cos(pi * x));
}

int pt_dist_init(pt_dist *d, pt_comm *comm, const pt_grid *g, int64_t rank, pt_err *err)
{
    memset(d, 0, sizeof *d);
    d->comm = comm;
    d->rank = (int)rank;
    int pp = g->size[PT_DIM_PP];
    if (pp > (int)(sizeof d->pipe / sizeof *d->pipe))
        return pt_err_set(err, "pp = %d: at most %zu pipeline stages", pp,
                          sizeof d->pipe / sizeof *d->pipe);
    int coords[PT_NDIM];
    pt_grid_coords(g, rank, coords);
    for (int s = 0; s < pp; s++) {
        coords[PT_DIM_PP] = s;
        d->pipe[s] = (int)pt_grid_rank(g, coords);
    }
    pt_grid_coords(g, rank, coords);
    d->dp_index = coords[PT_DIM_DP];
    d->dp_count = g->size[PT_DIM_DP];
    d->tp_rank = coords[PT_DIM_TP];
    d->cp_rank = coords[PT_DIM_CP];
    d->dp_size = pt_grid_group_size(g, PT_GROUP_DPCP);
    int64_t *members = malloc((size_t)d->dp_size * sizeof *members);
    if (!members)
        return pt_err_set(err, "out of memory");
    d->dp_rank = pt_grid_group(g, PT_GROUP_DPCP, rank, members);
    free(members);
    return 0;
}

/* ---- Micro-batches ------------------------------------------------------------------------- */

/* A micro-batch's tokens: whole sequences as the sampler gives them, and this rank's
 * context-parallel chunks of them (the same arrays without cp). */
typedef struct {
    int32_t *inputs, *targets;   /* (b, s) */
    int32_t *in_cp, *tg_cp;      /* (b, s/cp) */
    bool cp;
} batch;

static int batch_alloc(batch *b, const pt_net *n)
{
    int64_t tokens = n->layout.mbs * n->spec.seq;
    memset(b, 0, sizeof *b);
    b->cp = n->layout.cp > 1;
    b->inputs = calloc((size_t)tokens, sizeof *b->inputs);
    b->targets = calloc((size_t)tokens, sizeof *b->targets);
    b->in_cp = b->cp ? calloc((size_t)tokens, sizeof *b->in_cp) : b->inputs;
    b->tg_cp = b->cp ? calloc((size_t)tokens, sizeof *b->tg_cp) : b->targets;
    return b->inputs && b->targets && b->in_cp && b->tg_cp ? 0 : -1;
}

static void batch_free(batch *b)
{
    if (b->cp) {
        free(b->in_cp);
        free(b->tg_cp);
    }
    free(b->inputs);
    free(b->targets);
}

/* Fills the batch with `rows` samples from global sample `first`. */
static void batch_fill(batch *b, const pt_net *n, const pt_sampler *data, int64_t first)
{
    pt_sampler_fill(data, first, (int)n->layout.mbs, b->inputs, b->targets);
    if (b->cp) {
        pt_net_cp_slice(n, b->inputs, b->in_cp);
        pt_net_cp_slice(n, b->targets, b->tg_cp);
    }
}

/* Global index of the first sample of micro-batch mb on this dp rank: the dp ranks
 * take consecutive shares of the step's global batch (the tp and cp ranks of one
 * replica read the same samples). */
static int64_t first_sample(const pt_plan *p, const pt_dist *d, int64_t step, int mb)
{
    return step * p->train.global_batch +
           (int64_t)d->dp_index * p->layout.n_micro * p->layout.mbs + (int64_t)mb * p->layout.mbs;
}

/* The activation slot of (mb, chunk): taken from the pool when the chunk's input is
 * received or its forward starts, given back when its backward ends. */
static int slot_for(pt_net *n, const pt_ins *in, pt_err *err)
{
    return pt_net_slot_take(n, in->mb, in->chunk, err);
}

/* Bytes of one micro-batch's activations (or their gradient) between stages, in the
 * backend's activation type. */
static int64_t act_bytes(const pt_net *n)
{
    return pt_net_act_elems(n) * (int64_t)pt_kdtype_bytes(n->kn->act_dtype);
}

/* Message tags: an edge between virtual stages, activations forward, gradients back. */
static int tag_act_into(int64_t vs) { return (int)(2 * vs) & 0x7fff; }
static int tag_grad_from(int64_t vs) { return (int)(2 * vs + 1) & 0x7fff; }

/* ---- The optimizer step ---------------------------------------------------------------------- */

/* Whether parameter q is counted by this rank in sums over the whole model (the
 * gradient norm, the weights' fingerprint): a copy held elsewhere too is counted
 * once. The head's copy of a tied embedding (last stage, pp > 1) duplicates the first
 * stage's; a part held by several tp ranks (a whole tensor, a replicated KV head) is
 * counted by the first of them. */
static bool counted_here(const pt_net *n, const pt_param *q)
{
    if (n->tp_rank % q->tp_copies != 0)
        return false;
    return !(n->spec.tied_embeddings && n->layout.pp > 1 && n->stage == n->layout.pp - 1 &&
             strcmp(q->name, "wte") == 0);
}

/* The sum of squares of buf's elements [a, b) (indexed from lo): into *acc, or
 * returned. */
static double sumsq_part(pt_net *n, const float *buf, int64_t lo, int64_t a, int64_t b,
                         double *acc)
{
    if (acc) {
        n->kn->sumsq_acc(n->kn, buf + (a - lo), b - a, acc);
        return 0;
    }
    return n->kn->sumsq(n->kn, buf + (a - lo), b - a);
}

/* Sum of squares of elements [lo, hi) of buf (a parameter-shaped buffer, indexed
 * from lo), over the parameters counted here: added to *acc (backend memory) where
 * the kernels run when acc is given (the step's gradients: nothing waits), else
 * returned to the host. Parameters counted here that lie end to end are one call: at
 * one call a parameter, GPT-2 1.5B's 580 tensors cost two launches each, most of them
 * over a bias or a norm's few thousand elements, inside the optimizer's step on the GPU.
 * The parts depend on the layout only, so the sum is the same on every run. */
static double sumsq_range(pt_net *n, const float *buf, int64_t lo, int64_t hi, double *acc)
{
    double s = 0;
    int64_t ra = 0, rb = 0; /* the run of counted elements not yet summed */
    for (int i = 0; i < n->n_param; i++) {
        const pt_param *q = &n->param[i];
        int64_t a = q->offset > lo ? q->offset : lo;
        int64_t b = q->offset + q->count < hi ? q->offset + q->count : hi;
        if (a >= b || !counted_here(n, q))
            continue;
        if (rb > ra && a == rb) {
            rb = b;
            continue;
        }
        if (rb > ra)
            s += sumsq_part(n, buf, lo, ra, rb, acc);
        ra = a;
        rb = b;
    }
    if (rb > ra)
        s += sumsq_part(n, buf, lo, ra, rb, acc);
    return s;
}

/* The tensors of AdamW over elements [lo, hi) of the buffers, parameter by parameter
 * (weight decay on matrices only, the GPT-2/llm.c practice), appended to list from
 * index k (list NULL: only counted); master, grad, m and v hold element lo first.
 * Returns the new count. */
static int adam_range(pt_net *n, const pt_plan *p, pt_k_adamw_tensor *list, int k,
                      float *master, const float *grad, float *m, float *v, int64_t lo,
                      int64_t hi)
{
    for (int i = 0; i < n->n_param; i++) {
        const pt_param *q = &n->param[i];
        int64_t a = q->offset > lo ? q->offset : lo;
        int64_t b = q->offset + q->count < hi ? q->offset + q->count : hi;
        if (a >= b)
            continue;
        if (list)
            list[k] = (pt_k_adamw_tensor){
                .params = master + (a - lo),
                .params_bf16 = !n->w || n->w == n->master ? NULL : (uint16_t *)n->w + a,
                .grads = grad + (a - lo), .m = m + (a - lo), .v = v + (a - lo), .n = b - a,
                .weight_decay = q->decay ? (float)p->run.weight_decay : 0.0f};
        k++;
    }
    return k;
}

/* Sums a tied embedding's gradient over its two copies (first and last stage). */
static int reduce_tied(pt_net *n, const pt_dist *d, pt_err *err)
{
    if (!d->comm || !n->spec.tied_embeddings || n->layout.pp == 1 ||
        (n->stage != 0 && n->stage != n->layout.pp - 1))
        return 0;
    const pt_param *q = pt_net_param(n, "wte");
    return pt_comm_allreduce(d->comm, PT_GROUP_COUNT, n->grad + q->offset, q->count, err);
}

/* This rank's share of ZeRO-1 bucket z: flat elements [*lo, *hi), possibly empty. */
static void zero1_share(const pt_zero1_bucket *z, int64_t *lo, int64_t *hi)
{
    int64_t r = z->rank;
    *lo = z->lo + r * z->share;
    *hi = *lo + z->share < z->hi ? *lo + z->share : z->hi;
    if (*lo > *hi)
        *lo = *hi;
}

static int zero1_start(pt_net *n, pt_comm *comm, const pt_zero1_bucket *z, pt_comm_req **req,
                       pt_err *err);
static int zero1_wait(pt_net *n, pt_comm *comm, int b, pt_comm_req *req, pt_err *err);

/* The step's end (pt_ops_optimizer's list), op by op. How the gradients are held:
 * ZeRO 0 whole everywhere (reduced chunk by chunk); ZeRO 1 (Megatron-Core's
 * distributed optimizer) this rank's share of every bucket, reduce-scattered during
 * the backward, but the tied embedding's copy, reduced at the step after its sum over
 * the first and last stage; ZeRO 2/3 segment shards (runtime/zero.c). */
typedef struct {
    pt_net *n;
    const pt_dist *d;
    const pt_plan *p;
    int64_t step;
    pt_step_stats *out;
    bool have_norm;           /* the gradient norm's square is in n->gsq (GRAD_NORM ran) */
    bool updated;             /* ADAM ran */
    bool reduced, gathered;   /* ZERO_REDUCESCATTER and ZERO_ALLGATHER ran: each does all
                                 its groups' work at once (dp·cp's and the experts'), so a
                                 second op of the kind (the experts' group's) has none */
    double copies;            /* how many times n->gsq counts each gradient element */
} step_end;

/* Whether the model has experts: then every rank (with or without experts of its own)
 * counts each replicated element once, so that the sums over the world agree. */
static bool holds_experts(const pt_net *n)
{
    return n->spec.moe.experts > 0;
}

/* The sum of squares of a whole parameter-shaped buffer that every dp·cp replica holds
 * (ZeRO 0): into *acc, or returned. A dense model's every replica counts (dp·cp times
 * over the world). A mixture of experts' experts only their expert-data-parallel group
 * replicates, so each element is counted by one replica: the experts by their group's
 * rank 0, the rest by dp·cp rank 0 (on every rank, experts of its own or not). */
static double replicas_sumsq(pt_net *n, const pt_dist *d, const float *buf, double *acc)
{
    if (!holds_experts(n))
        return sumsq_range(n, buf, 0, n->n_elems, acc);
    double s = 0;
    for (int c = 0; c < n->layout.vp; c++) {
        int64_t a = n->chunk_begin[c], x = n->experts_end[c], b = n->chunk_end[c];
        if (n->edp_rank == 0 && x > a)
            s += sumsq_range(n, buf + a, a, x, acc);
        if (d->dp_rank == 0 && b > x)
            s += sumsq_range(n, buf + x, x, b, acc);
    }
    return s;
}

/* How many times replicas_sumsq's sum over the world counts each element. */
static double replicas_counted(const pt_net *n, const pt_dist *d)
{
    return holds_experts(n) ? 1.0 : (double)d->dp_size;
}

/* Adds the sum of squares of the gradients this rank holds to n->gsq, each element
 * counted once over its holders but a replicated one (ZeRO 0) as replicas_sumsq says. */
static void local_sumsq(step_end *e)
{
    pt_net *n = e->n;
    if (n->zero) {
        for (int s = 0; s < pt_zero_segments(n); s++) {
            pt_zero_shard h = pt_zero_shard_of(n, s);
            sumsq_range(n, h.grad, h.lo, h.hi, n->gsq);
        }
    } else if (n->n_z1 > 0) {
        for (int b = 0; b < n->n_z1; b++) {
            int64_t lo, hi;
            zero1_share(&n->z1[b], &lo, &hi);
            if (hi > lo) /* without the tied copy */
                sumsq_range(n, n->rs_shard + n->z1[b].shard_at, lo, hi, n->gsq);
        }
    } else {
        replicas_sumsq(n, e->d, n->grad, n->gsq);
    }
}

/* GRAD_NORM (sum over every rank: with_sum) or, on one rank, the norm before ADAM:
 * its square into n->gsq on the device, read by ADAM's clipping where it runs and by
 * the host after the step. */
static int grad_norm(step_end *e, bool with_sum, pt_err *err)
{
    pt_net *n = e->n;
    if (n->zero && pt_zero_drain(n, err)) /* the layers' last reductions */
        return -1;
    n->kn->zero(n->kn, n->gsq, sizeof *n->gsq);
    local_sumsq(e);
    if (with_sum && pt_comm_allreduce_t(e->d->comm, -1, PT_COMM_F64, n->gsq, 1, err))
        return -1;
    /* every dp·cp replica of ZeRO 0 holds the same gradients: the sum counts them
     * dp·cp times */
    e->copies = n->zero || n->n_z1 > 0 ? 1.0 : replicas_counted(n, e->d);
    e->have_norm = true;
    return 0;
}

/* The optimizer's tensors over what this rank updates, into list (NULL: counted). */
static int adam_list(pt_net *n, const pt_plan *p, pt_k_adamw_tensor *list)
{
    int k = 0;
    if (n->zero) {
        for (int s = 0; s < pt_zero_segments(n); s++) {
            pt_zero_shard h = pt_zero_shard_of(n, s);
            k = adam_range(n, p, list, k, h.master, h.grad, h.m, h.v, h.lo, h.hi);
        }
    } else if (n->n_z1 > 0) {
        for (int b = 0; b < n->n_z1; b++) {
            const pt_zero1_bucket *z = &n->z1[b];
            int64_t lo, hi;
            zero1_share(z, &lo, &hi);
            if (hi > lo)
                k = adam_range(n, p, list, k, n->master + lo, n->rs_shard + z->shard_at,
                               n->m + z->shard_at, n->v + z->shard_at, lo, hi);
        }
    } else {
        k = adam_range(n, p, list, k, n->master, n->grad, n->m, n->v, 0, n->n_elems);
    }
    return k;
}

/* ADAM over what this rank updates: one multi-tensor AdamW, clipped by the norm in
 * n->gsq where it runs. */
static int adam(step_end *e, pt_err *err)
{
    pt_net *n = e->n;
    const pt_plan *p = e->p;
    if (!e->have_norm && grad_norm(e, false, err))
        return -1;
    int count = adam_list(n, p, NULL);
    if (count > n->adam_cap) {
        pt_k_adamw_tensor *t = realloc(n->adam, (size_t)count * sizeof *t);
        if (!t)
            return pt_err_set(err, "out of memory for %d optimizer tensors", count);
        n->adam = t;
        n->adam_cap = count;
    }
    adam_list(n, p, n->adam);
    pt_k_adamw_args a = {.lr = (float)e->out->lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                         .step = (int)e->step + 1, .max_norm = p->run.grad_clip,
                         .sumsq = n->gsq, .copies = e->copies};
    n->kn->adamw_multi(n->kn, n->adam, count, &a);
    e->updated = true;
    return 0;
}

/* ZERO_REDUCESCATTER at the step: ZeRO 2/3 the embedding's and head's gradients
 * (kept whole); ZeRO 1 the tied copy's bucket. */
static int reduce_left(step_end *e, pt_err *err)
{
    pt_net *n = e->n;
    if (n->zero)
        return pt_zero_reduce_whole(n, err);
    for (int b = 0; b < n->n_z1; b++) {
        pt_comm_req *req = NULL;
        if (n->z1[b].at_step && (zero1_start(n, e->d->comm, &n->z1[b], &req, err) ||
                                 zero1_wait(n, e->d->comm, b, req, err)))
            return -1;
    }
    return 0;
}

/* ZERO_ALLGATHER: the updated weights back to every rank (ZeRO 1: bucket by bucket,
 * the fp32 master weights, then on a bf16 backend the bucket's compute copy rounded
 * from them; ZeRO 2/3: the segments kept whole). */
static int gather_updated(step_end *e, pt_err *err)
{
    pt_net *n = e->n;
    pt_kernels *kn = n->kn;
    if (n->zero)
        return pt_zero_gather_whole(n, err);
    for (int b = 0; b < n->n_z1; b++) {
        const pt_zero1_bucket *z = &n->z1[b];
        int64_t lo, hi, r = z->rank;
        zero1_share(z, &lo, &hi);
        float *full = n->rs_full + z->full_at;
        kn->copy(kn, full + r * z->share, n->master + lo, (size_t)(hi - lo) * sizeof *full,
                 PT_KCOPY_D2D);
        if (pt_comm_allgather(e->d->comm, z->group, full + r * z->share, full, z->share, err))
            return -1;
        kn->copy(kn, n->master + z->lo, full, (size_t)(z->hi - z->lo) * sizeof *full,
                 PT_KCOPY_D2D);
        if (n->w != n->master)
            kn->f32_to_bf16(kn, (uint16_t *)n->w + z->lo, n->master + z->lo, z->hi - z->lo);
    }
    return 0;
}

/* One op of the step's end list (pt_ops_optimizer). */
static int step_op(void *ctx, const pt_op *op, pt_err *err)
{
    step_end *e = ctx;
    if (!pt_op_kind_in(op->kind, PT_LIST_STEP))
        return pt_err_set(err, "internal: op '%s' in the step's end", pt_op_kind_name(op->kind));
    switch (op->kind) {
    case PT_OPK_EMBED_ALLREDUCE:
        return reduce_tied(e->n, e->d, err);
    case PT_OPK_ZERO_REDUCESCATTER:
        if (e->reduced)
            return PT_OP_NO_SPAN;
        e->reduced = true;
        return reduce_left(e, err);
    case PT_OPK_GRAD_NORM:
        return grad_norm(e, true, err);
    case PT_OPK_ADAM:
        return adam(e, err);
    case PT_OPK_ZERO_ALLGATHER:
        if (e->gathered)
            return PT_OP_NO_SPAN;
        e->gathered = true;
        return gather_updated(e, err);
    default: /* a kind the planner lists at the step's end that this switch lacks */
        return pt_err_set(err, "internal: step's end op '%s' not run",
                          pt_op_kind_name(op->kind));
    }
}

/* OPTIM_STEP: the step's end list, run by oprun.c (each op a span under its name and
 * key). */
static int optimizer_step(pt_net *n, const pt_dist *d, const pt_plan *p, int64_t step,
                          pt_step_stats *out, pt_err *err)
{
    pt_kernels *kn = n->kn;
    out->lr = pt_lr_at(&p->run, step);
    step_end e = {.n = n, .d = d, .p = p, .step = step, .out = out};
    int rc = d->comm ? pt_comm_wait_sends(d->comm, err) : 0;
    if (rc == 0)
        rc = pt_net_run_list(n, &n->ops_step, step_op, &e, err);
    if (rc == 0 && !e.updated) /* a list without ADAM is the planner's error */
        rc = pt_err_set(err, "internal: the step's end list has no optimizer update");
    kn->zero(kn, n->grad, (size_t)(n->zero ? n->opt_elems : n->n_elems) * sizeof(float));
    if (rc == 0 && kn->sync(kn))
        rc = pt_err_set(err, "%s", kn->err);
    if (rc == 0) { /* the step is done: its gradient norm to the host */
        double sq = 0;
        kn->copy(kn, &sq, n->gsq, sizeof sq, PT_KCOPY_D2H);
        out->grad_norm = sqrt(sq / e.copies);
    }
    return rc;
}

/* ---- Gradient buckets (ZeRO 0) ----------------------------------------------------------------- */

/* With ZeRO 0 and dp·cp > 1 a chunk's gradients are all-reduced in buckets of the
 * plan's bucket_bytes, started while the chunk's last backward of the step goes on,
 * so that reduction overlaps compute (PyTorch DDP's bucketing, Li et al. 2020, VLDB).
 * Gradients accumulate over the step's micro-batches, so they are final only in
 * that last backward, and there from the chunk's end down: head, last layer, ...,
 * first layer, embedding (pt_net.grad_done says how far). Each bucket is the next
 * bucket_bytes / 4 fp32 elements below those already started; what is left starts
 * at REDUCE_GRADS, which then waits for all of the chunk's buckets: ceil(elements /
 * bucket) collectives per chunk, as pt_ops_grad_sync prices them. ZeRO 0 all-reduces
 * each bucket in place; ZeRO 1 copies it into its padded slot of rs_full and
 * reduce-scatters that into this rank's share (rs_shard), the buckets listed in the
 * same order (pt_zero1_bucket, param_table.c). Every rank of the dp·cp group runs the same
 * program on the same parameter table, so all start the same buckets in the same
 * order, as MPI and NCCL require. Each start and each wait is a span on the
 * communication stream. */
typedef struct {
    int64_t started;          /* elements [started, reduce_hi) are in buckets */
    int next_z1;              /* ZeRO 1: the chunk's next bucket in pt_net.z1 */
    pt_comm_req **req;        /* [n_req] the buckets in flight, in start order */
    int64_t *bytes;           /* [n_req] their sizes (fp32 bytes) */
    int64_t *key;             /* [n_req] which: ZeRO 0 the first element, ZeRO 1 the
                                 index in pt_net.z1 (a compressed bucket's result is
                                 widened once waited for) */
    int n_req, cap;
    int n_waited, n_widened;  /* of those, waited for; and widened (compress=bf16) */
} chunk_buckets;

typedef struct {
    bool on;                  /* ZeRO 0 or 1 with dp·cp > 1 */
    bool scatter;             /* ZeRO 1: reduce-scatter into shares */
    bool powersgd;            /* this step's reduction is PowerSGD's (runtime/compress.c) */
    pt_net *n;
    pt_comm *comm;
    int64_t bucket_elems;
    int last_bwd[PT_CHUNK_MAX]; /* program index of each chunk's last backward; -1 none */
    chunk_buckets c[PT_CHUNK_MAX]; /* [vp] */
} buckets;

static void buckets_init(buckets *B, pt_net *n, const pt_dist *d, const pt_plan *p,
                         const pt_prog *prog, int64_t step)
{
    memset(B, 0, sizeof *B);
    B->on = d->comm && d->dp_size > 1 && p->layout.zero <= 1;
    B->powersgd = B->on && pt_compress_powersgd_at(n, step);
    B->scatter = B->on && p->layout.zero == 1 && !B->powersgd;
    B->n = n;
    B->comm = d->comm;
    B->bucket_elems = p->train.bucket_bytes / (int64_t)sizeof(float);
    if (B->bucket_elems < 1)
        B->bucket_elems = 1;
    for (int c = 0; c < n->layout.vp; c++) {
        B->last_bwd[c] = -1;
        B->c[c].started = n->reduce_hi[c];
        B->c[c].next_z1 = -1;
    }
    for (int b = n->n_z1 - 1; b >= 0; b--) /* each chunk's first bucket (not its experts') */
        if (n->z1[b].chunk >= 0 && !n->z1[b].experts)
            B->c[n->z1[b].chunk].next_z1 = b;
    for (int i = 0; i < prog->n; i++)
        if (prog->ins[i].kind == PT_INS_BWD)
            B->last_bwd[prog->ins[i].chunk] = i;
}

/* Every chunk's REDUCE_GRADS follows its backwards (pt_sched_check), so a step that
 * ran to its end waited for every bucket. After an error the requests in flight are
 * left to the abort that follows (ptrun ends every rank): waiting for them could hang
 * on a peer that stopped too. */
static void buckets_free(buckets *B)
{
    for (int c = 0; c < B->n->layout.vp; c++) {
        free(B->c[c].req);
        free(B->c[c].bytes);
        free(B->c[c].key);
    }
}

/* A bucket's start or wait as a span on the communication stream, named
 * "bucket start c<chunk> <bytes> B" with the bytes it puts on the wire (waits follow
 * the starts in order); formatted only
 * when the trace records, and one name per chunk and size, as the trace keeps each
 * distinct name once. */
static void bucket_span(const buckets *B, const char *what, int chunk, int64_t bytes,
                        double t0)
{
    pt_trace *t = B->n->trace;
    if (!t || !t->on)
        return;
    char name[48];
    snprintf(name, sizeof name, "bucket %s c%d %lld B", what, chunk, (long long)bytes);
    pt_trace_add(t, B->n->rank, 1, name, NULL, t0, pt_trace_now());
}

/* The bytes a bucket of `bytes` fp32 gradients puts on the wire: half under bf16
 * compression (the spans' names carry these). */
static int64_t wire_bytes(const pt_net *n, int64_t bytes)
{
    return pt_compress_bf16_on(n) ? bytes / 2 : bytes;
}

/* Starts ZeRO 1's reduce-scatter of bucket z: its gradients copied into its padded
 * slot of rs_full (the padding zero), this rank's share reduced into rs_shard; under
 * compression the bf16 copies of both (zero1_done widens the share). */
static int zero1_start(pt_net *n, pt_comm *comm, const pt_zero1_bucket *z, pt_comm_req **req,
                       pt_err *err)
{
    if (pt_compress_bf16_on(n))
        return pt_compress_rs_start(n, comm, z, req, err);
    pt_kernels *kn = n->kn;
    float *full = n->rs_full + z->full_at;
    int64_t len = z->hi - z->lo, padded = z->share * z->ranks;
    kn->copy(kn, full, n->grad + z->lo, (size_t)len * sizeof *full, PT_KCOPY_D2D);
    kn->zero(kn, full + len, (size_t)(padded - len) * sizeof *full);
    return pt_comm_ireducescatter(comm, z->group, full, n->rs_shard + z->shard_at,
                                  z->share, req, err);
}

/* What follows the wait for a bucket's collective: a compressed bucket's result
 * widened into the fp32 gradients (ZeRO 0) or this rank's share (ZeRO 1, bucket z). */
static void bucket_done(pt_net *n, bool scatter, int64_t key, int64_t bytes)
{
    if (!pt_compress_bf16_on(n))
        return;
    if (scatter)
        pt_compress_rs_done(n, &n->z1[key]);
    else
        pt_compress_allreduce_done(n, key, bytes / (int64_t)sizeof(float));
}

static int zero1_wait(pt_net *n, pt_comm *comm, int b, pt_comm_req *req, pt_err *err)
{
    if (pt_comm_wait(comm, req, err))
        return -1;
    bucket_done(n, true, b, 0);
    return 0;
}

/* Starts the collective of elements [lo, started) of chunk `chunk`. */
static int bucket_start(buckets *B, int chunk, int64_t lo, pt_err *err)
{
    chunk_buckets *cb = &B->c[chunk];
    int64_t count = cb->started - lo;
    if (count <= 0)
        return 0;
    if (cb->n_req == cb->cap) {
        int cap = cb->cap ? 2 * cb->cap : 16;
        pt_comm_req **r = realloc(cb->req, (size_t)cap * sizeof *r);
        if (r)
            cb->req = r;
        int64_t *b = r ? realloc(cb->bytes, (size_t)cap * sizeof *b) : NULL;
        if (b)
            cb->bytes = b;
        int64_t *k = b ? realloc(cb->key, (size_t)cap * sizeof *k) : NULL;
        if (!k)
            return pt_err_set(err, "out of memory for gradient buckets");
        cb->key = k;
        cb->cap = cap;
    }
    double t0 = pt_trace_now();
    cb->key[cb->n_req] = lo;
    if (B->scatter) {
        pt_net *n = B->n;
        int k = cb->next_z1;
        cb->key[cb->n_req] = k;
        if (k < 0 || k >= n->n_z1 || n->z1[k].chunk != chunk || n->z1[k].lo != lo ||
            n->z1[k].hi != cb->started)
            return pt_err_set(err, "internal: ZeRO-1 bucket [%lld, %lld) of chunk %d is not "
                                   "the one listed", (long long)lo, (long long)cb->started,
                              chunk);
        cb->next_z1 = k + 1 < n->n_z1 && n->z1[k + 1].chunk == chunk && !n->z1[k + 1].experts
                          ? k + 1
                          : -1;
        if (zero1_start(n, B->comm, &n->z1[k], &cb->req[cb->n_req], err))
            return -1;
    } else if (pt_compress_bf16_on(B->n)
                   ? pt_compress_allreduce_start(B->n, B->comm, lo, count, &cb->req[cb->n_req],
                                                 err)
                   : pt_comm_iallreduce(B->comm, PT_GROUP_DPCP, B->n->grad + lo, count,
                                        &cb->req[cb->n_req], err)) {
        return -1;
    }
    int64_t bytes = count * (int64_t)sizeof(float);
    cb->bytes[cb->n_req++] = bytes;
    cb->started = lo;
    bucket_span(B, "start", chunk, wire_bytes(B->n, bytes), t0);
    return 0;
}

/* pt_net.grad_done: elements [lo, chunk end) are final; start every whole bucket. */
static int bucket_ready(void *ctx, int chunk, int64_t lo, pt_err *err)
{
    buckets *B = ctx;
    chunk_buckets *cb = &B->c[chunk];
    if (lo < B->n->reduce_lo[chunk]) /* a tied copy below is reduced at the step */
        lo = B->n->reduce_lo[chunk];
    if (B->powersgd)
        return pt_compress_ready(B->n, B->comm, chunk, lo, err);
    while (cb->started - lo >= B->bucket_elems)
        if (bucket_start(B, chunk, cb->started - B->bucket_elems, err))
            return -1;
    return 0;
}

/* The first DP_BUCKET op of a chunk's list: starts the whole buckets left, then the rest
 * of the chunk as its last bucket. */
static int buckets_start_rest(buckets *B, int chunk, pt_err *err)
{
    if (bucket_ready(B, chunk, B->n->reduce_lo[chunk], err))
        return -1;
    return bucket_start(B, chunk, B->n->reduce_lo[chunk], err);
}

/* Waits for the chunk's next `count` buckets in start order, or for all left when
 * count < 0 (the list's last DP_BUCKET op: a count the planner rounded differently
 * cannot leave a bucket behind). After an error the requests in flight are left to the
 * abort that follows (buckets_free). */
static int buckets_wait(buckets *B, int chunk, int64_t count, pt_err *err)
{
    chunk_buckets *cb = &B->c[chunk];
    for (; cb->n_waited < cb->n_req && count != 0; count--) {
        int i = cb->n_waited;
        double t0 = pt_trace_now();
        if (pt_comm_wait(B->comm, cb->req[i], err))
            return -1;
        cb->n_waited++;
        bucket_span(B, "wait", chunk, wire_bytes(B->n, cb->bytes[i]), t0);
    }
    return 0;
}

/* compress=bf16 (BF16_CONVERT): the waited buckets' bf16 results widened into the fp32
 * gradients or this rank's shares; nothing without compression. */
static void buckets_widen(buckets *B, int chunk)
{
    chunk_buckets *cb = &B->c[chunk];
    for (; cb->n_widened < cb->n_waited; cb->n_widened++)
        bucket_done(B->n, B->scatter, cb->key[cb->n_widened], cb->bytes[cb->n_widened]);
}

/* A chunk's bucket list run by oprun.c (reduce_grads). */
typedef struct {
    buckets *B;
    int chunk;
    int dp_ops_left;          /* DP_BUCKET ops over dp·cp not yet run */
    bool started;             /* the rest started (PowerSGD: its reduction finished) */
    bool experts_done;        /* the chunk's experts reduced */
} sync_run;

/* The chunk's experts' gradients (a mixture of experts), over their expert-data-parallel
 * group in buckets from the top down, as the planner lists them (pt_ops_expert_sync)
 * after the chunk's other buckets: all-reduced (ZeRO 0) or reduce-scattered into this
 * rank's shares (ZeRO 1). Its first expert bucket op reduces them all, the others have
 * nothing left (no span). */
static int expert_buckets(sync_run *r, pt_err *err)
{
    buckets *B = r->B;
    pt_net *n = B->n;
    if (r->experts_done)
        return PT_OP_NO_SPAN;
    r->experts_done = true;
    for (int b = 0; n->n_z1 > 0 && b < n->n_z1; b++) { /* ZeRO 1: into this rank's shares */
        const pt_zero1_bucket *z = &n->z1[b];
        if (!z->experts || z->chunk != r->chunk)
            continue;
        pt_comm_req *req = NULL;
        double t0 = pt_trace_now();
        if (zero1_start(n, B->comm, z, &req, err) || zero1_wait(n, B->comm, b, req, err))
            return -1;
        bucket_span(B, "experts", r->chunk, (z->hi - z->lo) * (int64_t)sizeof(float), t0);
    }
    if (n->n_z1 > 0)
        return 0;
    int64_t lo = n->chunk_begin[r->chunk], len = n->experts_end[r->chunk] - lo;
    for (int64_t b = 0; b < pt_bucket_count(len, B->bucket_elems); b++) {
        int64_t off, cnt;
        pt_bucket_at(len, B->bucket_elems, b, &off, &cnt);
        double t0 = pt_trace_now();
        if (pt_comm_allreduce(B->comm, PT_GROUP_EDP, n->grad + lo + off, cnt, err))
            return -1;
        bucket_span(B, "experts", r->chunk, cnt * (int64_t)sizeof(float), t0);
    }
    return 0;
}

/* One op of a chunk's gradient-bucket list (pt_ops_grad_sync). DP_BUCKET ops wait for
 * their count of buckets (the first starts what is left; the last waits for all left);
 * BF16_CONVERT widens the reduced bf16 buckets. Under PowerSGD the compression's
 * kernels and all-reduces run beside the backward on a side stream as its groups of
 * gradients become final (runtime/compress.c, pt_compress_ready): the list's first op
 * waits for all of that (pt_compress_finish), and the others ran beside it. In
 * PowerSGD's warm-up steps every gradient goes in plain buckets (the DP_BUCKET ops) and
 * its ops have nothing to run. */
static int sync_op(void *ctx, const pt_op *op, pt_err *err)
{
    sync_run *r = ctx;
    buckets *B = r->B;
    if (!pt_op_kind_in(op->kind, PT_LIST_GRAD_SYNC))
        return pt_err_set(err, "internal: op '%s' in a gradient-bucket list",
                          pt_op_kind_name(op->kind));
    /* the experts' group is not dp·cp (tp folds into it): theirs run without the rest */
    if (op->kind == PT_OPK_DP_BUCKET && op->group == PT_GROUP_EDP)
        return expert_buckets(r, err);
    if (!B->on)
        return pt_err_set(err, "internal: gradient buckets listed for chunk %d, none started",
                          r->chunk);
    if (B->powersgd) {
        if (r->started)
            return PT_OP_NO_SPAN;
        r->started = true;
        return pt_compress_finish(B->n, B->comm, r->chunk, err);
    }
    switch (op->kind) {
    case PT_OPK_DP_BUCKET:
        if (!r->started && buckets_start_rest(B, r->chunk, err))
            return -1;
        r->started = true;
        return buckets_wait(B, r->chunk, --r->dp_ops_left > 0 ? op->count : -1, err);
    case PT_OPK_BF16_CONVERT:
        buckets_widen(B, r->chunk);
        return 0;
    default: /* PowerSGD's ops in its warm-up steps: every gradient went in buckets */
        return PT_OP_NO_SPAN;
    }
}

/* ---- Instructions ----------------------------------------------------------------------------- */

typedef struct {
    pt_net *n;
    const pt_dist *d;
    const pt_sampler *data;
    const pt_plan *p;
    int64_t step;
    batch *b;
    double *loss_sum;
    pt_step_stats *out;
    buckets *bk;
    int pc;                   /* index of the instruction running */
    pt_err *err;
} step_ctx;

static int64_t vs_of(const pt_net *n, int chunk)
{
    return (int64_t)chunk * n->layout.pp + n->stage;
}

static int transfer(step_ctx *c, const pt_ins *in)
{
    pt_net *n = c->n;
    int peer = c->d->pipe[in->peer];
    int64_t vs = vs_of(n, in->chunk), bytes = act_bytes(n);
    bool act = in->kind == PT_INS_RECV_ACT || in->kind == PT_INS_SEND_ACT;
    int slot = act ? slot_for(n, in, c->err) : -1;
    if (act && slot < 0)
        return -1;
    switch (in->kind) {
    case PT_INS_RECV_ACT:
        return pt_comm_recv_bytes(c->d->comm, peer, tag_act_into(vs),
                                  pt_net_chunk_input(n, slot), bytes, c->err);
    case PT_INS_SEND_ACT:
        return pt_comm_isend_bytes(c->d->comm, peer, tag_act_into(vs + 1),
                                   pt_net_chunk_output(n, slot, in->chunk), bytes, c->err);
    case PT_INS_RECV_GRAD:
        return pt_comm_recv_bytes(c->d->comm, peer, tag_grad_from(vs + 1), pt_net_dres(n),
                                  bytes, c->err);
    default: /* PT_INS_SEND_GRAD: the chunk's input gradient back */
        return pt_comm_isend_bytes(c->d->comm, peer, tag_grad_from(vs), pt_net_dres(n), bytes,
                                   c->err);
    }
}

/* REDUCE_GRADS: the chunk's gradient-bucket list (pt_ops_grad_sync), every op run by
 * oprun.c (sync_op). Its buckets started as the chunk's last backward filled them
 * (bucket_ready). ZeRO 2/3's list is empty (their layers reduce in the layer lists);
 * on one data-parallel rank so is every list. */
static int reduce_grads(step_ctx *c, int chunk)
{
    pt_net *n = c->n;
    const pt_oplist *o = &n->ops_sync[chunk];
    sync_run r = {.B = c->bk, .chunk = chunk};
    for (int i = 0; i < o->n; i++)
        r.dp_ops_left += o->op[i].kind == PT_OPK_DP_BUCKET && o->op[i].group != PT_GROUP_EDP;
    if (pt_net_run_list(n, o, sync_op, &r, c->err))
        return -1;
    /* ZeRO 1's experts' shares are filled even where their group is one rank (edp = 1),
     * which lists no bucket for them */
    if (!r.experts_done && n->n_z1 > 0 && expert_buckets(&r, c->err) < 0)
        return -1;
    /* Every bucket waited for and widened, whatever the list's counts: a plan priced with
     * 2-byte gradients (bf16-grad16) lists no bf16_convert, yet this rank's gradients
     * are fp32 and compress=bf16 rounded them (docs: ARCHITECTURE.md, last section). */
    if (r.started && !c->bk->powersgd) {
        if (buckets_wait(c->bk, chunk, -1, c->err))
            return -1;
        buckets_widen(c->bk, chunk);
    }
    chunk_buckets *cb = &c->bk->c[chunk];
    cb->n_req = cb->n_waited = cb->n_widened = 0;
    return 0;
}

static int run_instruction(step_ctx *c, const pt_ins *in)
{
    pt_net *n = c->n;
    const pt_plan *p = c->p;
    int64_t tokens_per_step = p->train.global_batch * p->model.seq;
    switch (in->kind) {
    case PT_INS_FWD: {
        int64_t first = first_sample(p, c->d, c->step, in->mb);
        int slot = slot_for(n, in, c->err);
        if (slot < 0)
            return -1;
        if (c->data) /* only the first and last stage read data */
            batch_fill(c->b, n, c->data, first);
        pt_net_set_batch(n, slot, in->mb, c->step, first, true);
        return pt_net_forward_chunk(n, slot, in->chunk, c->b->in_cp, c->b->tg_cp,
                                    1.0f / (float)tokens_per_step, c->loss_sum, c->err);
    }
    case PT_INS_BWD: {
        int slot = pt_net_slot_of(n, in->mb, in->chunk);
        if (slot < 0)
            return pt_err_set(c->err, "internal: the backward of micro-batch %d, chunk %d "
                                      "before its forward", in->mb, in->chunk);
        /* the chunk's last backward of the step starts its gradient buckets */
        bool last = c->bk->on && c->pc == c->bk->last_bwd[in->chunk];
        n->grad_done = last ? bucket_ready : NULL;
        n->grad_done_ctx = c->bk;
        int rc = pt_net_backward_chunk(n, slot, in->chunk, c->err);
        n->grad_done = NULL;
        pt_net_slot_give(n, in->mb, in->chunk);
        return rc;
    }
    case PT_INS_REDUCE_GRADS:
        return reduce_grads(c, in->chunk);
    case PT_INS_OPTIM_STEP:
        return optimizer_step(n, c->d, p, c->step, c->out, c->err);
    default:
        return transfer(c, in);
    }
}

/* The trace stream of an instruction: 1 for communication (what the simulator draws
 * on its data-parallel and transfer streams), 0 for compute. */
static int comm_stream(pt_ins_kind k)
{
    switch (k) {
    case PT_INS_SEND_ACT:
    case PT_INS_RECV_ACT:
    case PT_INS_SEND_GRAD:
    case PT_INS_RECV_GRAD:
    case PT_INS_REDUCE_GRADS:
        return 1;
    default:
        return 0;
    }
}

int pt_engine_step(pt_net *n, const pt_dist *d, const pt_sched *s, const pt_sampler *data,
                   const pt_plan *p, int64_t step, pt_step_stats *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    pt_trace_set_step(n->trace, step);
    pt_net_slots_reset(n); /* a step that failed may have left slots taken */
    double t0 = pt_trace_now(), loss_sum = 0;
    n->kn->zero(n->kn, n->lsum, sizeof *n->lsum);
    batch b;
    if (batch_alloc(&b, n)) {
        batch_free(&b);
        return pt_err_set(err, "out of memory");
    }
    const pt_prog *prog = &s->prog[n->stage];
    buckets bk;
    buckets_init(&bk, n, d, p, prog, step);
    step_ctx c = {.n = n, .d = d, .data = data, .p = p, .step = step, .b = &b,
                  .loss_sum = n->lsum, .out = out, .bk = &bk, .err = err};
    int rc = 0;
    for (int i = 0; i < prog->n && rc == 0; i++) {
        const pt_ins *in = &prog->ins[i];
        double ti = pt_trace_now();
        c.pc = i;
        n->op_seq = 0;
        rc = run_instruction(&c, in);
        pt_trace_add_ins(n->trace, n->rank, comm_stream(in->kind), pt_ins_name(in->kind),
                         in->mb, in->chunk, i, ti, pt_trace_now());
    }
    buckets_free(&bk);
    batch_free(&b);
    /* the step's work is done (OPTIM_STEP waited for it): its losses to the host */
    if (rc == 0)
        n->kn->copy(n->kn, &loss_sum, n->lsum, sizeof loss_sum, PT_KCOPY_D2H);
    /* the loss lives on the last stages' tp rank 0, in parts over cp: the world's sum
     * is the global batch's; with experts, their figures summed beside it */
    pt_moe_stats ms;
    pt_moe_take_stats(n, &ms);
    double sums[7] = {loss_sum, ms.aux, ms.dropped, ms.assigned, ms.imbalance, ms.expert_max,
                      ms.events};
    int n_sums = n->moe ? 7 : 1;
    if (rc == 0 && d->comm)
        rc = pt_comm_allreduce_f64(d->comm, -1, sums, n_sums, err);
    out->loss = sums[0] / (double)(p->train.global_batch * p->model.seq);
    if (n->moe) {
        out->moe_aux = sums[1] / (double)p->train.global_batch;
        out->moe_dropped = sums[3] > 0 ? sums[2] / sums[3] : 0;
        out->moe_imbalance = sums[6] > 0 ? sums[4] / sums[6] : 0;
        out->moe_expert_max = sums[6] > 0 ? sums[5] / sums[6] : 0;
    }
    out->time_s = pt_trace_now() - t0;
    /* the op spans' device times, now that the step's work is done (the optimizer step
     * ended with a wait, so nothing waits here); the trace's bookkeeping, outside
     * time_s */
    if (rc == 0)
        rc = pt_net_trace_resolve(n, err);
    return rc;
}

/* One validation micro-batch through every virtual stage in order. */
static int eval_batch(pt_net *n, const pt_dist *d, const batch *b, double *sum, pt_err *err)
{
    int pp = n->layout.pp;
    int64_t V = (int64_t)pp * n->layout.vp, bytes = act_bytes(n);
    for (int64_t vs = 0; vs < V; vs++) {
        int owner = (int)(vs % pp), chunk = (int)(vs / pp);
        if (owner != n->stage)
            continue;
        n->op_seq = 0; /* ops counted per chunk's pass (no instruction of a step) */
        int rc = 0;
        /* chunk c in slot c: a chunk's output may still be on its way when the rank's
         * next chunk runs */
        if (vs > 0)
            rc = pt_comm_recv_bytes(d->comm, d->pipe[(vs - 1) % pp], tag_act_into(vs),
                                    pt_net_chunk_input(n, chunk), bytes, err);
        if (rc == 0)
            rc = pt_net_forward_chunk(n, chunk, chunk, b->in_cp, b->tg_cp, 0.0f, sum, err);
        if (rc == 0 && vs < V - 1)
            rc = pt_comm_isend_bytes(d->comm, d->pipe[(vs + 1) % pp], tag_act_into(vs + 1),
                                     pt_net_chunk_output(n, chunk, chunk), bytes, err);
        if (rc)
            return rc;
    }
    return d->comm ? pt_comm_wait_sends(d->comm, err) : 0;
}

int pt_engine_eval(pt_net *n, const pt_dist *d, const pt_sampler *data, int64_t batches,
                   double *loss, pt_err *err)
{
    int64_t rows = n->layout.mbs, tokens = rows * n->spec.seq;
    batch b;
    if (batch_alloc(&b, n)) {
        batch_free(&b);
        return pt_err_set(err, "out of memory");
    }
    double sum = 0;
    n->kn->zero(n->kn, n->lsum, sizeof *n->lsum);
    int rc = 0;
    for (int64_t i = 0; i < batches && rc == 0; i++) {
        /* validation samples in a fixed order, the same on every dp rank */
        if (data)
            batch_fill(&b, n, data, i * rows);
        if (n->layout.pp == 1 && n->layout.vp == 1)
            rc = pt_net_forward_chunk(n, 0, 0, b.in_cp, b.tg_cp, 0.0f, n->lsum, err);
        else
            rc = eval_batch(n, d, &b, n->lsum, err);
        /* the batch's op spans get their device times before the next batch */
        if (rc == 0)
            rc = pt_net_trace_resolve(n, err);
    }
    batch_free(&b);
    if (rc == 0) {
        n->kn->copy(n->kn, &sum, n->lsum, sizeof sum, PT_KCOPY_D2H);
        if (n->kn->sync(n->kn))
            rc = pt_err_set(err, "%s", n->kn->err);
    }
    /* each dp replica evaluated the same batches; the loss sits on the last stages'
     * tp rank 0, in parts over cp */
    if (rc == 0 && d->comm)
        rc = pt_comm_allreduce_f64(d->comm, -1, &sum, 1, err);
    *loss = sum / (double)(batches * tokens) / (double)d->dp_count;
    return rc;
}

double pt_engine_param_sumsq(pt_net *n, const pt_dist *d, pt_err *err)
{
    double s = 0;
    if (n->zero) /* disjoint shards: each element once over dp·cp */
        for (int i = 0; i < pt_zero_segments(n); i++) {
            pt_zero_shard h = pt_zero_shard_of(n, i);
            s += sumsq_range(n, h.master, h.lo, h.hi, NULL);
        }
    else
        s = replicas_sumsq(n, d, n->master, NULL);
    if (d->comm && pt_comm_allreduce_f64(d->comm, -1, &s, 1, err))
        return -1;
    return n->zero ? s : s / replicas_counted(n, d); /* replicas hold the same weights */
}
