/*
 * Gradient compression of the data-parallel reduction (the layout's compress key),
 * for the ZeRO 0 and 1 gradient buckets the engine starts during the backward
 * (engine.c). bf16: a bucket's fp32 gradients are rounded to bf16 (round to nearest
 * even) into a buffer of their own, summed over the dp·cp group as bf16 with two
 * bytes per element on the wire (PT_COMM_BF16_WIRE: every step of the collective
 * rounds to bf16, as ncclBfloat16 does), and widened back to fp32 when the bucket is
 * waited for: PyTorch DDP's bf16_compress_hook. ZeRO 0 all-reduces the bucket, ZeRO 1
 * reduce-scatters its padded copy into this rank's share.
 *
 * The buffers are allocated with the model and counted in pt_net.bytes; the planner's
 * ptrun memory model (planner/memory.c, pt_mem_ptrun_states) counts the same.
 */
#include "model_internal.h"

#include <stdlib.h>

struct pt_gcomp {
    pt_compress kind;
    uint16_t *g16;            /* bf16, ZeRO 0: (n_elems) the flat gradients' copy */
    uint16_t *full16;         /* bf16, ZeRO 1: (opt_elems·opt_ranks) the buckets' padded
                                 copies, as rs_full */
    uint16_t *shard16;        /* bf16, ZeRO 1: (opt_elems) their reduced shares, as
                                 rs_shard */
};

static size_t b16(int64_t n)
{
    return (size_t)(n > 0 ? n : 1) * sizeof(uint16_t);
}

int pt_gc_init(pt_net *n, int dp_size, pt_err *err)
{
    const pt_layout *l = &n->layout;
    if (l->compress == PT_COMPRESS_NONE || dp_size <= 1)
        return 0;
    if (l->zero > 1)
        return pt_err_set(err, "compress=%s applies to the ZeRO 0/1 gradient buckets, not "
                               "ZeRO %d", pt_compress_name(l->compress), l->zero);
    if (l->compress != PT_COMPRESS_BF16)
        return pt_err_set(err, "compress=%s is not implemented by the runtime yet",
                          pt_compress_name(l->compress));
    pt_kernels *kn = n->kn;
    if (!kn->f32_to_bf16 || !kn->bf16_to_f32)
        return pt_err_set(err, "compress=bf16: the %s backend has no bf16 conversions",
                          kn->name);
    struct pt_gcomp *g = calloc(1, sizeof *g);
    if (!g)
        return pt_err_set(err, "out of memory");
    n->gc = g;
    g->kind = l->compress;
    size_t bytes;
    if (n->opt_ranks > 1) {
        size_t full = b16(n->opt_elems * n->opt_ranks), shard = b16(n->opt_elems);
        g->full16 = kn->alloc(kn, full);
        g->shard16 = kn->alloc(kn, shard);
        bytes = g->full16 && g->shard16 ? full + shard : 0;
    } else {
        g->g16 = kn->alloc(kn, b16(n->n_elems));
        bytes = g->g16 ? b16(n->n_elems) : 0;
    }
    if (!bytes)
        return pt_err_set(err, "out of memory for the bf16 gradient buckets");
    n->bytes += (int64_t)bytes;
    return 0;
}

void pt_gc_free(pt_net *n)
{
    struct pt_gcomp *g = n->gc;
    if (!g)
        return;
    pt_kernels *kn = n->kn;
    kn->free(kn, g->g16);
    kn->free(kn, g->full16);
    kn->free(kn, g->shard16);
    free(g);
    n->gc = NULL;
}

bool pt_gc_on(const pt_net *n)
{
    return n->gc != NULL;
}

int pt_gc_allreduce_start(pt_net *n, pt_comm *comm, int64_t lo, int64_t count,
                          pt_comm_req **req, pt_err *err)
{
    uint16_t *to = n->gc->g16 + lo;
    n->kn->f32_to_bf16(n->kn, to, n->grad + lo, count);
    return pt_comm_iallreduce_t(comm, PT_GROUP_DPCP, PT_COMM_BF16_WIRE, to, count, req, err);
}

void pt_gc_allreduce_done(pt_net *n, int64_t lo, int64_t count)
{
    n->kn->bf16_to_f32(n->kn, n->grad + lo, n->gc->g16 + lo, count);
}

int pt_gc_rs_start(pt_net *n, pt_comm *comm, const pt_zero1_bucket *z, pt_comm_req **req,
                   pt_err *err)
{
    pt_kernels *kn = n->kn;
    uint16_t *full = n->gc->full16 + z->full_at;
    int64_t len = z->hi - z->lo, padded = z->share * n->opt_ranks;
    kn->f32_to_bf16(kn, full, n->grad + z->lo, len);
    kn->zero(kn, full + len, (size_t)(padded - len) * sizeof *full);
    return pt_comm_ireducescatter_t(comm, PT_GROUP_DPCP, PT_COMM_BF16_WIRE, full,
                                    n->gc->shard16 + z->shard_at, z->share, req, err);
}

void pt_gc_rs_done(pt_net *n, const pt_zero1_bucket *z)
{
    n->kn->bf16_to_f32(n->kn, n->rs_shard + z->shard_at, n->gc->shard16 + z->shard_at,
                       z->share);
}
