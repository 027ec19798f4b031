/*
 * The attention op of a layer, forward and backward, with context parallelism's ring
 * (Megatron-LM's context parallel, Liu et al. 2023's ring attention) and its
 * all-to-all (DeepSpeed-Ulysses, Jacobs et al. 2023), alone or inside the ring's
 * groups (Transformer Engine's a2a+p2p).
 *
 * Without cp it is one kernel call each way. With the ring the K/V blocks of every cp
 * rank travel around it, each rank computing with the block it holds while it sends it
 * on, and the partial results are combined by running maximum and sum; in the backward
 * the blocks travel again with their gradients. The sequence's layout over the cp ranks
 * (two chunks each, for causal load balance) is tensors.c's (pt_dims_piece_pos).
 *
 * With the all-to-all of degree u, q, k and v go from "my tokens, all my heads" to the
 * head form, "my group's tokens, a/u of the heads" (pt_dims_attn), by one all-to-all each
 * over the group of u cp ranks; attention (the ring over the cp/u groups, or one call when
 * u is all of cp) runs there, and the output comes back by a second all-to-all. KV heads
 * fewer than u are replicated, and their gradients from the ranks that share one summed
 * on the way back. The backward mirrors it: the output's gradient in, dq, dk, dv back.
 */
#include "layer_internal.h"

/* What attention computes on: buffers laid out as the dims d describe. */
typedef struct {
    pt_layer_dims d;
    float *q, *k, *v, *att, *lse;
    float *dq, *dk, *dv, *datt; /* the backward's */
} attn_view;

/* Chunk p, (b, sc, nh, d), of a (T, nh, d) tensor laid out chunk by chunk, and its
 * (b, a, sc) log-sum-exp block (lse is (2, b, a, sc) with cp). */
static float *chunk_of(const pt_layer_ctx *c, const pt_layer_dims *d, const float *t, int p,
                       int nh)
{
    return pt_act_at(c, t, p * d->b * d->sc * nh * d->d);
}

static float *lse_of(const pt_layer_dims *d, float *lse, int p)
{
    return lse + p * d->b * d->a * d->sc;
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

/* Forward: attention of the local queries over the K/V chunks of every ring member,
 * which travel around the ring (this rank sends the block it holds on while it
 * computes with it), results combined by running maximum and sum in ring order. */
static int ring_forward(pt_layer_ctx *c, const attn_view *w)
{
    pt_kernels *kn = c->n->kn;
    pt_scratch *S = c->S;
    const pt_layer_dims *d = &w->d;
    if (d->cp == 1) {
        kn->attention_forward(kn, w->att, w->lse, w->q, w->k, w->v, (int)d->b, (int)d->s,
                              (int)d->s, d->a, d->kh, d->d, 0, 0, 1);
        return 0;
    }
    int64_t kv = d->T * d->kh * d->d;
    float *cur = S->ring[0], *next = S->ring[1];
    kn->copy(kn, cur, w->k, pt_act_bytes(c, kv), PT_KCOPY_D2D);
    kn->copy(kn, pt_act_at(c, cur, kv), w->v, pt_act_bytes(c, kv), PT_KCOPY_D2D);
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
                float *out = first ? chunk_of(c, d, w->att, qp, d->a) : S->part;
                float *lse = first ? lse_of(d, w->lse, qp) : S->part_lse;
                kn->attention_forward(kn, out, lse, chunk_of(c, d, w->q, qp, d->a),
                                      chunk_of(c, d, k, kp, d->kh), chunk_of(c, d, v, kp, d->kh),
                                      (int)d->b, (int)d->sc, (int)d->sc, d->a, d->kh, d->d,
                                      (int)pt_dims_piece_pos(d, d->cr, qp),
                                      (int)pt_dims_piece_pos(d, src, kp), 1);
                if (!first)
                    kn->attention_combine(kn, chunk_of(c, d, w->att, qp, d->a),
                                          lse_of(d, w->lse, qp), S->part, S->part_lse,
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
static int ring_backward(pt_layer_ctx *c, const attn_view *w)
{
    pt_kernels *kn = c->n->kn;
    pt_scratch *S = c->S;
    const pt_layer_dims *d = &w->d;
    int qd = d->a * d->d;
    int64_t kv = d->T * d->kh * d->d;
    if (d->cp == 1) { /* one block: written, not added to (no zeroing first) */
        kn->attention_backward(kn, w->dq, w->dk, w->dv, w->datt, w->q, w->k, w->v, w->att,
                               w->lse, (int)d->b, (int)d->s, (int)d->s, d->a, d->kh, d->d, 0,
                               0, 1, 0);
        return 0;
    }
    kn->zero(kn, w->dq, pt_act_bytes(c, d->T * qd));
    float *cur = S->ring[0], *next = S->ring[1];
    kn->copy(kn, cur, w->k, pt_act_bytes(c, kv), PT_KCOPY_D2D);
    kn->copy(kn, pt_act_at(c, cur, kv), w->v, pt_act_bytes(c, kv), PT_KCOPY_D2D);
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
                    kn, chunk_of(c, d, w->dq, qp, d->a), chunk_of(c, d, dk, kp, d->kh),
                    chunk_of(c, d, dv, kp, d->kh), chunk_of(c, d, w->datt, qp, d->a),
                    chunk_of(c, d, w->q, qp, d->a), chunk_of(c, d, k, kp, d->kh),
                    chunk_of(c, d, v, kp, d->kh), chunk_of(c, d, w->att, qp, d->a),
                    lse_of(d, w->lse, qp), (int)d->b, (int)d->sc, (int)d->sc, d->a, d->kh,
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
    kn->copy(kn, w->dk, pt_act_at(c, cur, 2 * kv), pt_act_bytes(c, kv), PT_KCOPY_D2D);
    kn->copy(kn, w->dv, pt_act_at(c, cur, 3 * kv), pt_act_bytes(c, kv), PT_KCOPY_D2D);
    return 0;
}

/* ---- The all-to-all ---------------------------------------------------------------------- */

/* The first of the per heads (of this rank's nh) that go to member j of the
 * all-to-all group of u: a slice of nh/u, or, with fewer heads than u, the one head
 * member j shares with u/nh - 1 others (per 1). */
static int head_first(int nh, int per, int u, int j)
{
    return per * u == nh ? j * per : j / (u / nh);
}

/* Where member i's sequence chunk p (its batch element 0) lies in the head form of
 * dims h, as a row of it; batch elements follow every *pitch rows. One ring member (the
 * group is all of cp): the whole sequence batch-major, chunk p at its position. Else
 * the ring's chunk by chunk layout, its two chunks the group's: chunk p of every member
 * side by side, the second half in reverse (cp rank g·u+i holds chunks g·u+i and
 * 2·cp-1-g·u-i, so the group's are two runs of u consecutive chunks). */
static int64_t head_row(const pt_layer_dims *d, const pt_layer_dims *h, int i, int p,
                        int64_t *pitch)
{
    if (h->cp == 1) {
        *pitch = h->s;
        return pt_dims_piece_pos(d, i, p);
    }
    *pitch = h->sc;
    return p * d->b * h->sc + (p == 0 ? i : d->u - 1 - i) * d->sc;
}

static pt_comm_dtype act_type(const pt_layer_ctx *c)
{
    return c->n->kn->act_dtype == PT_KDTYPE_BF16 ? PT_COMM_BF16 : PT_COMM_F32;
}

/* One all-to-all's sizes for q (its output and their gradients) or, kv, for k and v
 * (and dk, dv): this rank's heads nh, the head form's per member, a row of this rank's
 * form and one member's share of it, in bytes. */
typedef struct {
    int nh, per;
    size_t row, part;
} a2a_sizes;

static a2a_sizes sizes_of(const pt_layer_ctx *c, bool kv)
{
    a2a_sizes z = {.nh = kv ? c->d.kh : c->d.a, .per = kv ? c->d.hkh : c->d.ha};
    z.row = pt_act_bytes(c, (int64_t)z.nh * c->d.d);
    z.part = pt_act_bytes(c, (int64_t)z.per * c->d.d);
    return z;
}

/* Between u member blocks (member i's T rows, chunk by chunk) and the head form hf:
 * into the head form, or out of it. */
static void member_chunks(pt_layer_ctx *c, char *blocks, char *hf, size_t part, bool into)
{
    const pt_layer_dims *d = &c->d;
    pt_layer_dims h = pt_dims_attn(d);
    size_t chunk = (size_t)d->sc * part;
    for (int i = 0; i < d->u; i++)
        for (int p = 0; p < 2; p++) {
            int64_t pitch, at = head_row(d, &h, i, p, &pitch);
            char *block = blocks + ((size_t)i * (size_t)d->T + (size_t)(p * d->b * d->sc)) * part;
            char *head = hf + (size_t)at * part;
            if (into)
                c->n->kn->copy_rows(c->n->kn, head, (size_t)pitch * part, block, chunk, chunk,
                                    (size_t)d->b);
            else
                c->n->kn->copy_rows(c->n->kn, block, chunk, head, (size_t)pitch * part, chunk,
                                    (size_t)d->b);
        }
}

/* x (T, nh, d) in this rank's form (q's, or kv: k's or v's) to out in the head form
 * (out may be x): each member's head slice packed, one all-to-all over the group, each
 * member's chunks put in place. */
static int a2a_in(pt_layer_ctx *c, const float *x, bool kv, float *out)
{
    const pt_layer_dims *d = &c->d;
    a2a_sizes z = sizes_of(c, kv);
    char *send = (char *)c->S->a2a_send, *recv = (char *)c->S->a2a_recv;
    for (int j = 0; j < d->u; j++) {
        int first = head_first(z.nh, z.per, d->u, j);
        c->n->kn->copy_rows(c->n->kn, send + (size_t)j * (size_t)d->T * z.part, z.part,
                            (const char *)x + (size_t)first * pt_act_bytes(c, d->d), z.row,
                            z.part, (size_t)d->T);
    }
    if (pt_comm_alltoall_t(c->n->comm, PT_GROUP_CPA2A, act_type(c), send, recv,
                           d->T * z.per * d->d, c->err))
        return -1;
    member_chunks(c, recv, (char *)out, z.part, true);
    return 0;
}

/* The way back: hf in the head form to x (T, nh, d) in this rank's form, every element
 * written; a head replicated to several members gets the sum of theirs, added in
 * member order. */
static int a2a_out(pt_layer_ctx *c, const float *hf, bool kv, float *x)
{
    pt_kernels *kn = c->n->kn;
    const pt_layer_dims *d = &c->d;
    int u = d->u;
    a2a_sizes z = sizes_of(c, kv);
    char *send = (char *)c->S->a2a_send, *recv = (char *)c->S->a2a_recv;
    member_chunks(c, send, (char *)hf, z.part, false);
    if (pt_comm_alltoall_t(c->n->comm, PT_GROUP_CPA2A, act_type(c), send, recv,
                           d->T * z.per * d->d, c->err))
        return -1;
    size_t block = (size_t)d->T * z.part;
    for (int j = 0; j < u; j++) {
        int first = head_first(z.nh, z.per, u, j);
        if (j > 0 && head_first(z.nh, z.per, u, j - 1) == first)
            continue; /* summed into the head's first member's block below */
        for (int k = j + 1; k < u && head_first(z.nh, z.per, u, k) == first; k++)
            kn->residual_forward(kn, (float *)(recv + (size_t)j * block),
                                 (const float *)(recv + (size_t)j * block),
                                 (const float *)(recv + (size_t)k * block), d->T * z.per * d->d);
        kn->copy_rows(kn, (char *)x + (size_t)first * pt_act_bytes(c, d->d), z.row,
                      recv + (size_t)j * block, z.part, z.part, (size_t)d->T);
    }
    return 0;
}

/* ---- The op -------------------------------------------------------------------------------- */

int pt_attention_forward(pt_layer_ctx *c, bool again)
{
    pt_layer_acts *L = &c->A->layer[c->ai];
    const pt_layer_dims *d = &c->d;
    if (d->u <= 1)
        return ring_forward(c, &(attn_view){.d = *d, .q = L->q, .k = L->k, .v = L->v,
                                            .att = L->att, .lse = L->lse});
    /* again: q, k and v are in the head form already and att is kept */
    if (!again && (a2a_in(c, L->q, false, L->q) || a2a_in(c, L->k, true, L->k) ||
                   a2a_in(c, L->v, true, L->v)))
        return -1;
    attn_view w = {.d = pt_dims_attn(d), .q = L->q, .k = L->k, .v = L->v, .att = L->atth,
                   .lse = L->lse};
    if (ring_forward(c, &w))
        return -1;
    return again ? 0 : a2a_out(c, L->atth, false, L->att);
}

int pt_attention_backward(pt_layer_ctx *c)
{
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_scratch *S = c->S;
    const pt_layer_dims *d = &c->d;
    attn_view w = {.d = *d, .q = L->q, .k = L->k, .v = L->v, .att = L->att, .lse = L->lse,
                   .dq = S->dq, .dk = S->dk, .dv = S->dv, .datt = S->datt};
    if (d->u <= 1)
        return ring_backward(c, &w);
    w = (attn_view){.d = pt_dims_attn(d), .q = L->q, .k = L->k, .v = L->v, .att = L->atth,
                    .lse = L->lse, .dq = S->hdq, .dk = S->hdk, .dv = S->hdv, .datt = S->hdatt};
    if (a2a_in(c, S->datt, false, S->hdatt) || ring_backward(c, &w) ||
        a2a_out(c, S->hdq, false, S->dq) || a2a_out(c, S->hdk, true, S->dk) ||
        a2a_out(c, S->hdv, true, S->dv))
        return -1;
    return 0;
}
