/*
 * The attention op of a layer, forward and backward, with context parallelism's ring
 * (Megatron-LM's context parallel, Liu et al. 2023's ring attention). Without cp it is
 * one kernel call each way. With cp the K/V blocks of every cp rank travel around the
 * ring, each rank computing with the block it holds while it sends it on, and the
 * partial results are combined by running maximum and sum; in the backward the blocks
 * travel again with their gradients. The sequence's layout over the cp ranks (two
 * chunks each, for causal load balance) is tensors.c's (pt_dims_piece_pos).
 */
#include "layer_internal.h"

/* Chunk p, (b, sc, nh, d), of a (T, nh, d) tensor laid out chunk by chunk, and its
 * (b, a, sc) log-sum-exp block (lse is (2, b, a, sc) with cp). */
static float *chunk_of(const pt_layer_ctx *c, const float *t, int p, int nh)
{
    return pt_act_at(c, t, p * c->d.b * c->d.sc * nh * c->d.d);
}

static float *lse_of(const pt_layer_ctx *c, float *lse, int p)
{
    return lse + p * c->d.b * c->d.a * c->d.sc;
}

/* Ring messages: tags above the pipeline's (which are below 2^14). */
static int tag_ring(int step, bool backward)
{
    return 0x4000 + (backward ? 0x1000 : 0) + (step & 0xfff);
}

/* Whether query chunk qp of this rank sees any key of chunk kp of rank src. */
static bool visible(const pt_layer_dims *d, int src, int qp, int kp)
{
    return pt_dims_piece_pos(d, src, kp) <= pt_dims_piece_pos(d, d->cr, qp) + d->sc - 1;
}

/* Forward: attention of the local queries over the K/V chunks of every cp rank,
 * which travel around the ring (this rank sends the block it holds on while it
 * computes with it), results combined by running maximum and sum in ring order. */
int pt_attention_forward(pt_layer_ctx *c)
{
    pt_kernels *kn = c->n->kn;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_scratch *S = c->S;
    const pt_layer_dims *d = &c->d;
    if (d->cp == 1) {
        kn->attention_forward(kn, L->att, L->lse, L->q, L->k, L->v, (int)d->b, (int)d->s,
                              (int)d->s, d->a, d->kh, d->d, 0, 0, 1);
        return 0;
    }
    int64_t kv = d->T * d->kh * d->d;
    float *cur = S->ring[0], *next = S->ring[1];
    kn->copy(kn, cur, L->k, pt_act_bytes(c, kv), PT_KCOPY_D2D);
    kn->copy(kn, pt_act_at(c, cur, kv), L->v, pt_act_bytes(c, kv), PT_KCOPY_D2D);
    for (int j = 0; j < d->cp; j++) {
        int src = (d->cr - j + d->cp) % d->cp;
        if (j < d->cp - 1 && pt_comm_isend_bytes(c->n->comm, c->n->cp_next, tag_ring(j, false),
                                                 cur, (int64_t)pt_act_bytes(c, 2 * kv), c->err))
            return -1;
        const float *k = cur, *v = pt_act_at(c, cur, kv);
        for (int qp = 0; qp < 2; qp++)
            for (int kp = 0; kp < 2; kp++) {
                if (!visible(d, src, qp, kp))
                    continue;
                bool first = j == 0 && kp == 0; /* the diagonal chunk: always seen */
                float *out = first ? chunk_of(c, L->att, qp, d->a) : S->part;
                float *lse = first ? lse_of(c, L->lse, qp) : S->part_lse;
                kn->attention_forward(kn, out, lse, chunk_of(c, L->q, qp, d->a),
                                      chunk_of(c, k, kp, d->kh), chunk_of(c, v, kp, d->kh),
                                      (int)d->b, (int)d->sc, (int)d->sc, d->a, d->kh, d->d,
                                      (int)pt_dims_piece_pos(d, d->cr, qp),
                                      (int)pt_dims_piece_pos(d, src, kp), 1);
                if (!first)
                    kn->attention_combine(kn, chunk_of(c, L->att, qp, d->a),
                                          lse_of(c, L->lse, qp), S->part, S->part_lse,
                                          (int)d->b, (int)d->sc, d->a, d->d);
            }
        if (j < d->cp - 1) {
            if (pt_comm_recv_bytes(c->n->comm, c->n->cp_prev, tag_ring(j, false), next,
                                   (int64_t)pt_act_bytes(c, 2 * kv), c->err))
                return -1;
            float *t = cur;
            cur = next;
            next = t;
        }
    }
    return 0;
}

/* Backward: each K/V chunk travels the ring again with its gradients, which every
 * rank adds its queries' share to; after a full turn a block is home with the
 * whole of its dK and dV. */
int pt_attention_backward(pt_layer_ctx *c)
{
    pt_kernels *kn = c->n->kn;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_scratch *S = c->S;
    const pt_layer_dims *d = &c->d;
    int qd = d->a * d->d;
    int64_t kv = d->T * d->kh * d->d;
    if (d->cp == 1) { /* one block: written, not added to (no zeroing first) */
        kn->attention_backward(kn, S->dq, S->dk, S->dv, S->datt, L->q, L->k, L->v, L->att,
                               L->lse, (int)d->b, (int)d->s, (int)d->s, d->a, d->kh, d->d, 0,
                               0, 1, 0);
    } else {
        kn->zero(kn, S->dq, pt_act_bytes(c, d->T * qd));
        float *cur = S->ring[0], *next = S->ring[1];
        kn->copy(kn, cur, L->k, pt_act_bytes(c, kv), PT_KCOPY_D2D);
        kn->copy(kn, pt_act_at(c, cur, kv), L->v, pt_act_bytes(c, kv), PT_KCOPY_D2D);
        kn->zero(kn, pt_act_at(c, cur, 2 * kv), pt_act_bytes(c, 2 * kv));
        for (int j = 0; j < d->cp; j++) {
            int src = (d->cr - j + d->cp) % d->cp;
            float *k = cur, *v = pt_act_at(c, cur, kv), *dk = pt_act_at(c, cur, 2 * kv),
                  *dv = pt_act_at(c, cur, 3 * kv);
            for (int qp = 0; qp < 2; qp++)
                for (int kp = 0; kp < 2; kp++) {
                    if (!visible(d, src, qp, kp))
                        continue;
                    kn->attention_backward(
                        kn, chunk_of(c, S->dq, qp, d->a), chunk_of(c, dk, kp, d->kh),
                        chunk_of(c, dv, kp, d->kh), chunk_of(c, S->datt, qp, d->a),
                        chunk_of(c, L->q, qp, d->a), chunk_of(c, k, kp, d->kh),
                        chunk_of(c, v, kp, d->kh), chunk_of(c, L->att, qp, d->a),
                        lse_of(c, L->lse, qp), (int)d->b, (int)d->sc, (int)d->sc, d->a, d->kh,
                        d->d, (int)pt_dims_piece_pos(d, d->cr, qp),
                        (int)pt_dims_piece_pos(d, src, kp), 1, 1);
                }
            /* on: K, V and their gradients; the last hop takes only the gradients home */
            bool last = j == d->cp - 1;
            float *from = last ? dk : cur, *into = last ? pt_act_at(c, next, 2 * kv) : next;
            int64_t count = last ? 2 * kv : 4 * kv;
            int64_t bytes = (int64_t)pt_act_bytes(c, count);
            if (pt_comm_isend_bytes(c->n->comm, c->n->cp_next, tag_ring(j, true), from, bytes,
                                    c->err) ||
                pt_comm_recv_bytes(c->n->comm, c->n->cp_prev, tag_ring(j, true), into, bytes,
                                   c->err))
                return -1;
            float *t = cur;
            cur = next;
            next = t;
        }
        kn->copy(kn, S->dk, pt_act_at(c, cur, 2 * kv), pt_act_bytes(c, kv), PT_KCOPY_D2D);
        kn->copy(kn, S->dv, pt_act_at(c, cur, 3 * kv), pt_act_bytes(c, kv), PT_KCOPY_D2D);
    }
    return 0;
}
