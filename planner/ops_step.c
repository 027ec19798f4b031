/*
 * The op lists of a step's end: a chunk's gradient reduction during the backward (the
 * data-parallel buckets of ZeRO 0/1 and their compression, bf16 or PowerSGD) and the
 * optimizer step on one pipeline rank (the tied embedding's all-reduce, what the
 * backward left unreduced, the gradient norm, Adam, the all-gather of the updated
 * weights), with the bucket rules the runtime and the memory model share. Built like
 * a layer's lists (ops_internal.h) and priced and run the same way; keys adam:fp32,
 * bf16_convert:fp32 and PowerSGD's fp32 kernels (add_f32, gemm_skinny,
 * orthonormalize_pass, powersgd_decompress).
 */
#include "ops_internal.h"

#include <math.h>
#include <stdio.h>

/* ---- Gradient reduction and optimizer ------------------------------------------- */

double pt_grad_reduce_bytes(const pt_opctx *c)
{
    int g = c->prec.grad_bytes;
    return c->t->stack.grad_reduce_dtype == PT_DTYPE_BF16 && g > 2 ? 2 : g;
}

double pt_grad_wire_share(const pt_opctx *c)
{
    double g = pt_grad_reduce_bytes(c);
    return c->l->compress == PT_COMPRESS_BF16 && g > 2 ? 2 / g : 1;
}

double pt_bucket_bytes(const pt_opctx *c)
{
    const pt_stack *s = &c->t->stack;
    if (s->bucket_rule == PT_BUCKET_MEGATRON) {
        /* Megatron-Core: max(40,000,000, 1,000,000 x dp) parameters per bucket
         * (megatron/training/training.py, the DDP config's bucket_size). */
        double params = fmax(40e6, 1e6 * (double)c->l->dp);
        return params * pt_grad_reduce_bytes(c);
    }
    return (double)(s->bucket_bytes > 0 ? s->bucket_bytes : c->t->bucket_bytes);
}

int64_t pt_bucket_count(int64_t len, int64_t bucket)
{
    bucket = bucket < 1 ? 1 : bucket;
    return len <= 0 ? 0 : len / bucket + (len % bucket != 0);
}

void pt_bucket_at(int64_t len, int64_t bucket, int64_t k, int64_t *off, int64_t *n)
{
    bucket = bucket < 1 ? 1 : bucket;
    int64_t full = len / bucket;
    if (k < full) {
        *off = len - (k + 1) * bucket;
        *n = bucket;
    } else { /* the rest, at the bottom */
        *off = 0;
        *n = len - full * bucket;
    }
}

double pt_bucket_shares(int64_t len, int64_t bucket, int64_t N)
{
    bucket = bucket < 1 ? 1 : bucket;
    N = N < 1 ? 1 : N;
    if (len <= 0)
        return 0;
    int64_t full = len / bucket, rest = len % bucket;
    return (double)full * (double)((bucket + N - 1) / N) + (double)((rest + N - 1) / N);
}

/* `total` bytes in buckets of `bucket` bytes, `wire` of each travelling: the full
 * buckets as one op run `count` times, then the rest — the same collectives as one op
 * per bucket, without a list as long as the bucket count (a tiny bucket_bytes would
 * make that list enormous). Past 2^30 buckets the count stays 2^30 and each carries
 * its share of the rest. */
static void buckets_in(builder *b, double total, double bucket, double wire, pt_coll what,
                       pt_group_kind group)
{
    moves grads = {PT_TEN_GRADS, PT_TEN_GRADS};
    double full = floor(total / bucket), rest = total - full * bucket;
    if (full > 0x1p30) {
        bucket = total / 0x1p30;
        full = 0x1p30;
        rest = 0;
    }
    if (full >= 1)
        coll(b, PT_OPK_DP_BUCKET, grads, what, group, bucket * wire, (int)full, true);
    if (rest > 0)
        coll(b, PT_OPK_DP_BUCKET, grads, what, group, rest * wire, 1, true);
}

static void buckets_of(builder *b, double total, double bucket, double wire, pt_coll what)
{
    buckets_in(b, total, bucket, wire, what, PT_GROUP_DPCP);
}

/* An fp32 kernel of PowerSGD run `count` times (once per layer). */
static void psgd_kernel(builder *b, pt_op_kind kind, const char *name, double flops,
                        double bytes, int64_t rows, int64_t cols, int64_t r, int64_t count)
{
    pt_op *op = add_op(b, kind);
    if (!op)
        return;
    op->kernel.dtype = PT_DTYPE_FP32;
    op->kernel.flops = flops;
    op->kernel.bytes = bytes;
    op->count = (int)count;
    if (flops > 0)
        op->out_elems = (double)rows * (double)cols;
    snprintf(op->kernel.key, sizeof op->kernel.key, "%s:fp32:m=%lld,n=%lld,k=%lld", name,
             (long long)rows, (long long)cols, (long long)r);
}

/* One P or Q all-reduce of `elems` fp32, run `count` times in a row. */
static void psgd_allreduce(builder *b, pt_op_kind kind, double elems, int count)
{
    if (count > 0 && elems > 0)
        coll(b, kind, (moves){PT_TEN_GRADS, PT_TEN_GRADS}, PT_COLL_ALLREDUCE, PT_GROUP_DPCP,
             4 * elems, count, true);
}

/* compress=powersgd (runtime/compress.c): the chunk's uncompressed rest all-reduced in
 * buckets; per compressed matrix shape (once per layer) the error added, P = M Q, its
 * orthonormalisation, Q = M^T P and the decompression, fp32 throughout; and per group
 * of matrices (at least a bucket's elements, from the chunk's end down, as the runtime
 * groups them) one all-reduce of their P matrices and one of their Q matrices. */
static void psgd_sync(builder *b, double params, int64_t layers)
{
    const pt_opctx *c = b->c;
    int rank = c->l->powersgd_rank;
    int64_t shape[PT_PSGD_LAYER_MAX][2], compressed, factors;
    int n = pt_psgd_layer_matrices(c->m, c->l->tp, shape);
    pt_psgd_layer(c->m, c->l->tp, rank, &compressed, &factors);
    double bucket = fmax(1, floor(pt_bucket_bytes(c) / 4));
    buckets_of(b, 4 * (params - (double)layers * (double)compressed), 4 * bucket, 1,
               PT_COLL_ALLREDUCE);
    for (int i = 0; i < n && layers > 0; i++) {
        int64_t rows = shape[i][0], cols = shape[i][1], r = pt_psgd_rank(rows, cols, rank);
        if (!pt_psgd_compresses(rows, cols, rank))
            continue;
        double mn = (double)rows * (double)cols, rr = (double)r;
        /* M += e: read both, write M */
        psgd_kernel(b, PT_OPK_PSGD_ERROR, "add_f32", 0, 12 * mn, rows, cols, r, layers);
        /* P = M Q and Q = M^T P have r (a few) output columns, far below a GEMM tile
         * (128): cuBLAS runs such products as GEMV-like kernels, bound by reading M,
         * so they are priced by their traffic and FLOPs ("gemm_skinny"), not by the
         * tile model of planner/ops.c's "gemm" keys (costmodels/analytic.c) */
        psgd_kernel(b, PT_OPK_PSGD_P, "gemm_skinny", 2 * mn * rr,
                    4 * (mn + (double)(cols + rows) * rr), rows, r, cols, layers);
        /* Gram-Schmidt twice (kernels/cuda/compress.cu): column 0 one pass for its
         * norm and one to scale; every later column i four passes over the first
         * i + 1 floats of each row (dot products, projection, twice: whole 32-byte
         * sectors) with the projections writing column i's sector, and the scaling
         * pass; 5r - 3 launches, priced as that many of the average pass */
        double launches = 5 * rr - 3, ortho = 96 * (double)rows;
        for (int64_t i = 1; i < r; i++)
            ortho += (double)rows * (4 * 32 * ceil(4.0 * (double)(i + 1) / 32) + 2 * 32 + 64);
        psgd_kernel(b, PT_OPK_PSGD_ORTH, "orthonormalize_pass",
                    (2 * (double)rows * rr * rr) / launches, ortho / launches, rows, r, r,
                    layers * (int64_t)launches);
        psgd_kernel(b, PT_OPK_PSGD_Q, "gemm_skinny", 2 * mn * rr,
                    4 * (mn + (double)(cols + rows) * rr), cols, r, rows, layers);
        /* e = M (copy), e -= P Q^T / W, M = P Q^T: two GEMMs of rank r */
        psgd_kernel(b, PT_OPK_PSGD_DECOMPRESS, "powersgd_decompress", 4 * mn * rr,
                    4 * (5 * mn + 2 * (double)(cols + rows) * rr), rows, cols, r, layers);
    }
    /* the groups (pt_psgd_group_closes, as runtime/compress.c forms them): consecutive
     * groups of the same sizes are one op run `count` times */
    int64_t acc = 0;
    double gp = 0, gq = 0, last_p = -1, last_q = -1;
    int run = 0;
    for (int64_t l = 0; l < layers; l++)
        for (int i = n - 1; i >= 0; i--) {
            int64_t rows = shape[i][0], cols = shape[i][1], r = pt_psgd_rank(rows, cols, rank);
            if (!pt_psgd_compresses(rows, cols, rank))
                continue;
            gp += (double)(rows * r);
            gq += (double)(cols * r);
            if (!pt_psgd_group_closes(&acc, rows, cols, (int64_t)bucket))
                continue;
            if (gp != last_p || gq != last_q) {
                psgd_allreduce(b, PT_OPK_PSGD_ALLREDUCE_P, last_p, run);
                psgd_allreduce(b, PT_OPK_PSGD_ALLREDUCE_Q, last_q, run);
                last_p = gp;
                last_q = gq;
                run = 0;
            }
            run++;
            gp = gq = 0;
        }
    if (acc > 0) { /* the last group, smaller than a bucket */
        psgd_allreduce(b, PT_OPK_PSGD_ALLREDUCE_P, last_p, run);
        psgd_allreduce(b, PT_OPK_PSGD_ALLREDUCE_Q, last_q, run);
        last_p = gp;
        last_q = gq;
        run = 1;
    }
    psgd_allreduce(b, PT_OPK_PSGD_ALLREDUCE_P, last_p, run);
    psgd_allreduce(b, PT_OPK_PSGD_ALLREDUCE_Q, last_q, run);
}

int pt_ops_grad_sync(const pt_opctx *c, double params, int64_t layers, pt_oplist *out)
{
    builder b = {.c = c, .out = out};
    if (c->l->zero <= 1 && c->l->compress == PT_COMPRESS_POWERSGD) {
        psgd_sync(&b, params, layers);
    } else if (c->l->zero <= 1) { /* compress=bf16: the same buckets, two bytes an element */
        size_t before = (size_t)out->n;
        buckets_of(&b, params * pt_grad_reduce_bytes(c), pt_bucket_bytes(c),
                   pt_grad_wire_share(c),
                   c->l->zero == 0 ? PT_COLL_ALLREDUCE : PT_COLL_REDUCESCATTER);
        /* ... rounded to bf16 before and widened after: read 4 + write 2, read 2 +
         * write 4 bytes an element (where a bucket runs at all) */
        if (pt_grad_wire_share(c) < 1 && (size_t)out->n > before) {
            char shape[48];
            snprintf(shape, sizeof shape, "n=%.0f", params);
            pt_op *op = membound(&b, PT_OPK_BF16_CONVERT, "bf16_convert", 12 * params, shape);
            if (op)
                op->kernel.dtype = PT_DTYPE_FP32;
        }
    }
    return finish(&b);
}

int pt_ops_expert_sync(const pt_opctx *c, double experts, pt_oplist *out)
{
    builder b = {.c = c, .out = out};
    if (c->l->zero <= 1 && experts > 0)
        buckets_in(&b, experts * pt_grad_reduce_bytes(c), pt_bucket_bytes(c), 1,
                   c->l->zero == 0 ? PT_COLL_ALLREDUCE : PT_COLL_REDUCESCATTER, PT_GROUP_EDP);
    return finish(&b);
}

double pt_step_tied(const pt_opctx *c, int vs, int V)
{
    if (!c->m->tied_embeddings || c->l->pp == 1 || (vs != 0 && vs != V - 1))
        return 0;
    return (double)pt_stack_vocab(&c->t->stack, c->m, c->l->tp) / c->l->tp *
           (double)c->m->hidden;
}

double pt_step_tied_out(const pt_opctx *c, int vs, int V)
{
    return c->l->zero == 1 ? pt_step_tied(c, vs, V) : 0;
}

int pt_ops_optimizer(const pt_opctx *c, const pt_step_params *sp, pt_oplist *out)
{
    builder b = {.c = c, .out = out};
    int zero = c->l->zero;
    double g = pt_grad_reduce_bytes(c);
    if (sp->tied > 0) {
        /* Megatron-LM keeps the tied word embedding on the first and the last stage
         * and all-reduces its gradient between the two after the backward
         * (finalize_model_grads), before the optimizer. */
        pt_op *op = add_op(&b, PT_OPK_EMBED_ALLREDUCE);
        if (op) {
            op->src = op->dst = PT_TEN_EMBED_GRAD;
            op->group = PT_GROUP_PP;
            op->count = 1;
            op->coll = (pt_coll_op){.op = PT_COLL_ALLREDUCE, .group = 2,
                                    .ranks_per_node = c->embed_ranks_per_node,
                                    .bytes = sp->tied * g};
        }
    }
    /* what the backward left unreduced: ZeRO 2/3's whole embedding and head, ZeRO 1's
     * tied copy */
    double left = zero >= 2 ? sp->edge : zero == 1 ? sp->tied : 0;
    if (left > 0)
        coll(&b, PT_OPK_ZERO_REDUCESCATTER, (moves){PT_TEN_GRADS, PT_TEN_GRADS},
             PT_COLL_REDUCESCATTER, PT_GROUP_DPCP,
             left * g * (zero == 1 ? pt_grad_wire_share(c) : 1), 1, false);
    /* ptrun keeps a mixture's experts whole under ZeRO 2/3 (runtime/zero.c): their
     * gradients are reduce-scattered over their group here, their weights gathered below */
    bool whole_experts = zero >= 2 && sp->experts > 0 && pt_stack_is_ptrun(&c->t->stack);
    if (whole_experts)
        coll(&b, PT_OPK_ZERO_REDUCESCATTER, (moves){PT_TEN_GRADS, PT_TEN_GRADS},
             PT_COLL_REDUCESCATTER, PT_GROUP_EDP, sp->experts * g, 1, false);
    pt_grid grid;
    pt_grid_init(&grid, c->l);
    if (grid.world > 1) { /* the gradient norm: one double summed over every rank */
        pt_op *op = add_op(&b, PT_OPK_GRAD_NORM);
        if (op) {
            op->group = PT_GROUP_COUNT;
            op->count = 1;
            op->coll = (pt_coll_op){.op = PT_COLL_ALLREDUCE, .group = (int)grid.world,
                                    .ranks_per_node = c->world_ranks_per_node, .bytes = 8};
        }
    }
    int64_t shard = (int64_t)c->l->dp * c->l->cp, eshard = pt_layout_edp(c->l);
    double dense = sp->params - sp->experts;
    double mine = zero >= 1 ? dense / (double)shard + sp->experts / (double)eshard : sp->params;
    pt_precision p = c->prec;
    /* Adam reads gradient, master weight and both moments and writes the last three
     * and the working weight. */
    double bytes = mine * (p.grad_bytes + 2.0 * (p.master_bytes + p.moment_bytes) +
                           (p.master_bytes ? p.weight_bytes : 0));
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld", (long long)llround(mine));
    pt_op *op = add_op(&b, PT_OPK_ADAM);
    if (op) {
        op->kernel.dtype = PT_DTYPE_FP32;
        op->kernel.bytes = bytes;
        snprintf(op->kernel.key, sizeof op->kernel.key, "adam:fp32:%s", shape);
    }
    /* With param_overlap the gather runs beside the next step's forward (the simulator
     * hides it behind that forward). */
    double gather = zero == 1 || zero == 2 ? dense : zero >= 3 ? sp->edge : 0;
    /* ptrun's ZeRO 1 keeps the whole fp32 master on every rank and gathers it, then
     * rounds its compute copy (runtime/engine.c, gather_updated); ZeRO 2/3 and the
     * other stacks gather the weights in their own type */
    double gather_bytes = zero == 1 && pt_stack_is_ptrun(&c->t->stack) && p.master_bytes
                              ? p.master_bytes : p.weight_bytes;
    /* with the FP8 parameter gather the layers' linear weights travel as one byte each */
    double fp8 = zero == 1 || zero == 2 ? sp->fp8_linear : 0;
    if (gather > 0)
        coll(&b, PT_OPK_ZERO_ALLGATHER, (moves){PT_TEN_WEIGHTS, PT_TEN_WEIGHTS},
             PT_COLL_ALLGATHER, PT_GROUP_DPCP, (gather - fp8) * gather_bytes + fp8, 1,
             c->l->param_overlap);
    /* the experts' shards, gathered over their own group */
    if ((zero == 1 || zero == 2 || whole_experts) && sp->experts > 0)
        coll(&b, PT_OPK_ZERO_ALLGATHER, (moves){PT_TEN_WEIGHTS, PT_TEN_WEIGHTS},
             PT_COLL_ALLGATHER, PT_GROUP_EDP, sp->experts * gather_bytes, 1,
             c->l->param_overlap);
    return finish(&b);
}
