/*
 * The buffers ptrun allocates for a micro-batch, one list that the runtime carves its
 * memory from (runtime/tensors.c) and the memory model sums for ptrun's own stack
 * (memory.c). So the bytes a plan promises for ptrun are the bytes ptrun takes: a
 * buffer added here is allocated and counted, one left out is neither.
 *
 * Sizes come from pt_rank_shape_of, the sizes the op lists price: T tokens and R
 * residual rows (T/t with sequence parallelism) on this rank, a and k heads of width
 * d, f the MLP width and v the vocabulary slice of one tp rank. Every buffer is
 * rounded up to PT_BUF_ALIGN bytes, as the runtime lays them out.
 */
#include "memory_model.h"
#include "step.h"

#include <math.h>

static const char *const buf_names[PT_BUF_COUNT] = {
    [PT_BUF_LN1] = "ln1", [PT_BUF_LN1_MEAN] = "ln1_mean", [PT_BUF_LN1_RSTD] = "ln1_rstd",
    [PT_BUF_Q] = "q", [PT_BUF_K] = "k", [PT_BUF_V] = "v", [PT_BUF_ATT] = "att",
    [PT_BUF_LSE] = "lse", [PT_BUF_X2] = "x2", [PT_BUF_LN2] = "ln2",
    [PT_BUF_LN2_MEAN] = "ln2_mean", [PT_BUF_LN2_RSTD] = "ln2_rstd", [PT_BUF_GATE] = "gate",
    [PT_BUF_UP] = "up", [PT_BUF_ACT] = "act", [PT_BUF_TOKENS] = "tokens",
    [PT_BUF_TARGETS] = "targets", [PT_BUF_X] = "x", [PT_BUF_LNF] = "lnf",
    [PT_BUF_LNF_MEAN] = "lnf_mean", [PT_BUF_LNF_RSTD] = "lnf_rstd", [PT_BUF_LOGITS] = "logits",
    [PT_BUF_LOSSES] = "losses", [PT_BUF_VMASK] = "vocab_mask", [PT_BUF_DRES] = "dres",
    [PT_BUF_DLN] = "dln", [PT_BUF_DLNS] = "dlns", [PT_BUF_GATH] = "gath", [PT_BUF_GDRES] = "gdres",
    [PT_BUF_ROUT] = "rout", [PT_BUF_DDROP] = "ddrop", [PT_BUF_DQ] = "dq", [PT_BUF_DK] = "dk",
    [PT_BUF_DV] = "dv", [PT_BUF_DQR] = "dqr", [PT_BUF_DKR] = "dkr", [PT_BUF_DATT] = "datt",
    [PT_BUF_DGATE] = "dgate", [PT_BUF_DUP] = "dup", [PT_BUF_DACT] = "dact", [PT_BUF_CE] = "ce",
    [PT_BUF_DNORM] = "dnorm", [PT_BUF_DKV] = "dkv", [PT_BUF_RING0] = "ring0",
    [PT_BUF_RING1] = "ring1", [PT_BUF_PART] = "part", [PT_BUF_PART_LSE] = "part_lse",
    [PT_BUF_QKN] = "qk_pre_norm", [PT_BUF_QKN_RSTD] = "qk_norm_rstd",
    [PT_BUF_DQKN] = "dqk_pre_norm", [PT_BUF_DQKNORM] = "dqk_norm_w",
    [PT_BUF_FP8_A] = "fp8_a", [PT_BUF_FP8_B] = "fp8_b", [PT_BUF_FP8_W] = "fp8_w",
    [PT_BUF_ATTH] = "att_heads",
    [PT_BUF_A2A_SEND] = "a2a_send", [PT_BUF_A2A_RECV] = "a2a_recv", [PT_BUF_HDATT] = "hdatt",
    [PT_BUF_HDQ] = "hdq", [PT_BUF_HDK] = "hdk", [PT_BUF_HDV] = "hdv",
    [PT_BUF_MOE_SCORES] = "moe_scores", [PT_BUF_MOE_IDX] = "moe_idx", [PT_BUF_MOE_W] = "moe_w",
    [PT_BUF_MOE_POS] = "moe_pos", [PT_BUF_MOE_AUXG] = "moe_aux_grad",
    [PT_BUF_MOE_XR] = "moe_expert_in", [PT_BUF_MOE_YP] = "moe_expert_out",
    [PT_BUF_MOE_LOGITS] = "moe_logits", [PT_BUF_MOE_SRC] = "moe_src",
    [PT_BUF_MOE_COUNTS] = "moe_counts", [PT_BUF_MOE_TOK] = "moe_tokens",
    [PT_BUF_MOE_RECV] = "moe_recv", [PT_BUF_MOE_EM] = "moe_expert_rows",
    [PT_BUF_MOE_EG] = "moe_etp_rows",
    [PT_BUF_MOE_DW] = "moe_dw", [PT_BUF_MOE_PERM] = "moe_perm",
    [PT_BUF_MOE_INVPERM] = "moe_invperm", [PT_BUF_MOE_DROUTER] = "moe_drouter",
};

int64_t pt_moe_capacity_rows(const pt_model *m, int64_t R)
{
    if (m->moe.experts <= 0 || m->moe.capacity <= 0)
        return -1;
    return (int64_t)ceil(m->moe.capacity * (double)R * (double)m->moe.top_k /
                         (double)m->moe.experts);
}

int64_t pt_moe_recv_rows_max(const pt_model *m, const pt_layout *l)
{
    if (m->moe.experts <= 0)
        return 0;
    pt_rank_shape r = pt_rank_shape_of(m, l);
    int64_t ep = l->ep > 1 ? l->ep : 1, G = m->moe.experts / ep, k = m->moe.top_k;
    int64_t per = k < G ? k : G, n = 0, capped = 0;
    if (!pt_prod64((int64_t[]){ep, r.rows, per}, 3, &n))
        return INT64_MAX;
    int64_t cap = pt_moe_capacity_rows(m, r.rows);
    if (cap >= 0 && pt_prod64((int64_t[]){ep, G, cap}, 3, &capped) && capped < n)
        n = capped;
    return n;
}

pt_attn_shape pt_attn_shape_of(const pt_model *m, const pt_layout *l)
{
    pt_rank_shape r = pt_rank_shape_of(m, l);
    int u = pt_layout_a2a(l);
    u = u >= 1 ? u : 1;
    int64_t k = r.kv_heads;
    return (pt_attn_shape){.u = u, .r = l->cp / u, .tokens = u * r.tokens,
                           .heads = r.heads / u, .kv_heads = k % u == 0 ? k / u : 1,
                           .head_dim = r.head_dim};
}

const char *pt_buf_name(pt_buf b)
{
    return (unsigned)b < PT_BUF_COUNT && buf_names[b] ? buf_names[b] : "?";
}

/* Sets buffer b to the product of n factors, `bytes` per element; a product past
 * int64 marks the whole list as overflowing (the sizes come from spec files). */
static void set(pt_buffers *B, pt_buf b, int bytes, int n, const int64_t *factors)
{
    int64_t e;
    if (!pt_prod64(factors, n, &e) || !pt_mul64(e, bytes, &(int64_t){0})) {
        B->overflow = true;
        e = 0;
    }
    B->elems[b] = e;
    B->bytes[b] = bytes;
}

/* a·b, or 0 with the list marked as overflowing */
static int64_t mul(pt_buffers *B, int64_t a, int64_t b)
{
    int64_t p;
    if (pt_mul64(a, b, &p))
        return p;
    B->overflow = true;
    return 0;
}

#define SET(B, b, bytes, ...)                                                                \
    set(B, b, bytes, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),            \
        (int64_t[]){__VA_ARGS__})

void pt_buffers_of(const pt_model *m, const pt_layout *l, int act_bytes, bool dropout,
                   pt_buffers *out)
{
    pt_buffers *B = out;
    *B = (pt_buffers){0};
    pt_rank_shape r = pt_rank_shape_of(m, l);
    int ab = act_bytes, t = l->tp;
    pt_attn_shape at = pt_attn_shape_of(m, l);
    bool sp = l->sp && t > 1, cp = l->cp > 1, swiglu = m->act == PT_ACT_SWIGLU;
    bool a2a = at.u > 1, ring = at.r > 1;
    int64_t T = r.tokens, R = r.rows, h = m->hidden, a = r.heads, k = r.kv_heads,
            d = r.head_dim, f = r.ffn, v = r.vocab, b = l->mbs, s = m->seq / l->cp;
    int64_t sc = cp ? s / 2 : s; /* one of the two sequence chunks a cp rank holds */

    /* one layer's activations, kept for its backward */
    SET(B, PT_BUF_LN1, ab, R, h);
    SET(B, PT_BUF_LN1_MEAN, 4, R);
    SET(B, PT_BUF_LN1_RSTD, 4, R);
    SET(B, PT_BUF_Q, ab, T, a, d);
    /* with the all-to-all, q, k and v hold the head form once attention has begun: K
     * and V u·T tokens of the head form's KV heads, more than T·k when replicated */
    int64_t kv_h = mul(B, at.tokens, at.kv_heads), kv = mul(B, T, k);
    kv = kv > kv_h ? kv : kv_h;
    SET(B, PT_BUF_K, ab, kv, d);
    SET(B, PT_BUF_V, ab, kv, d);
    SET(B, PT_BUF_ATT, ab, T, a, d);
    SET(B, PT_BUF_LSE, 4, b, a, s);
    SET(B, PT_BUF_ATTH, ab, a2a ? T : 0, a, d); /* the output in head form */
    SET(B, PT_BUF_X2, ab, R, h);
    SET(B, PT_BUF_LN2, ab, R, h);
    SET(B, PT_BUF_LN2_MEAN, 4, R);
    SET(B, PT_BUF_LN2_RSTD, 4, R);
    /* a mixture of experts: the experts' rows through the same MLP buffers (a layer is
     * dense or MoE), N received rows of fe columns where wider than the dense MLP's;
     * with etp > 1 the etp group's rows, each rank's padded to N, of fe/etp columns */
    bool moe = m->moe.experts > 0;
    int64_t etp = l->etp > 1 ? l->etp : 1, ep = l->ep > 1 ? l->ep : 1;
    int64_t N = moe ? pt_moe_recv_rows_max(m, l) : 0, fe = moe ? m->moe.expert_ffn / etp : 0;
    int64_t E = m->moe.experts, kk = m->moe.top_k, Rk = mul(B, R, kk), eN = mul(B, etp, N);
    int64_t mlp = mul(B, T, f), emlp = mul(B, eN, fe);
    mlp = emlp > mlp ? emlp : mlp;
    SET(B, PT_BUF_GATE, ab, swiglu ? mlp : 0);
    SET(B, PT_BUF_UP, ab, mlp);
    SET(B, PT_BUF_ACT, ab, mlp);
    /* q/k norms: q and k before them (token form, q's heads then k's) and the norms'
     * statistics, one a head and token */
    bool qk = m->qk_norm;
    SET(B, PT_BUF_QKN, ab, qk ? T : 0, a + k, d);
    SET(B, PT_BUF_QKN_RSTD, 4, qk ? T : 0, a + k);
    /* a mixture of experts' layer (runtime/moe.c): the router's scores, each token's
     * experts, weights and rows, the load-balancing loss's gradient per sequence, the
     * rows the experts received (expert by expert) and their outputs back in this
     * rank's order */
    SET(B, PT_BUF_MOE_SCORES, 4, moe ? R : 0, E);
    SET(B, PT_BUF_MOE_IDX, 4, moe ? Rk : 0);
    SET(B, PT_BUF_MOE_W, 4, moe ? Rk : 0);
    SET(B, PT_BUF_MOE_POS, 4, moe ? Rk : 0);
    /* ... (b, E) the loss's gradient, and beside it (b, E) the copies' counts while the
     * sequences' sums are reduced over tp and cp, and each run of a sequence's rows'
     * sums (at most 2·b: pieces of sequences) */
    SET(B, PT_BUF_MOE_AUXG, 4, moe && m->moe.aux_loss > 0 ? 4 * b : 0, E);
    SET(B, PT_BUF_MOE_XR, ab, eN, h);
    SET(B, PT_BUF_MOE_YP, ab, moe ? Rk : 0, h);
    /* the rest of a slot: token ids, targets, and one residual stream per layer
     * boundary (pt_buffers_slot multiplies) */
    SET(B, PT_BUF_TOKENS, 4, T);
    SET(B, PT_BUF_TARGETS, 4, T);
    SET(B, PT_BUF_X, ab, R, h);
    /* the head: final norm, logits (the cross-entropy writes their gradient over
     * them), per-token losses, and the logits' bias masking a padded vocabulary */
    SET(B, PT_BUF_LNF, ab, R, h);
    SET(B, PT_BUF_LNF_MEAN, 4, R);
    SET(B, PT_BUF_LNF_RSTD, 4, R);
    SET(B, PT_BUF_LOGITS, ab, T, v);
    SET(B, PT_BUF_LOSSES, 4, T);
    SET(B, PT_BUF_VMASK, ab, pt_vocab_mask_elems(m, l->tp));
    /* the backward's scratch: gradients of one layer at a time; with sp the gathered
     * rows and their gradients; the ring's K/V blocks and partial outputs with cp */
    SET(B, PT_BUF_DRES, ab, R, h);
    SET(B, PT_BUF_DLN, ab, T, h);
    SET(B, PT_BUF_DLNS, ab, sp ? R : 0, h);
    SET(B, PT_BUF_GATH, ab, sp ? T : 0, h);
    SET(B, PT_BUF_GDRES, ab, sp ? T : 0, h);
    SET(B, PT_BUF_ROUT, ab, sp ? T : 0, h);
    SET(B, PT_BUF_DDROP, ab, dropout ? T : 0, h);
    SET(B, PT_BUF_DQ, ab, T, a, d);
    SET(B, PT_BUF_DK, ab, T, k, d);
    SET(B, PT_BUF_DV, ab, T, k, d);
    SET(B, PT_BUF_DQR, ab, T, a, d);
    SET(B, PT_BUF_DKR, ab, T, k, d);
    SET(B, PT_BUF_DATT, ab, T, a, d);
    SET(B, PT_BUF_DGATE, ab, swiglu ? mlp : 0); /* the gate (SwiGLU only) */
    SET(B, PT_BUF_DUP, ab, mlp);
    SET(B, PT_BUF_DACT, ab, mlp);
    SET(B, PT_BUF_CE, 4, t > 1 ? 3 : 0, T);
    SET(B, PT_BUF_DNORM, 4, sp ? 2 : 0, h);
    /* tp ranks sharing a KV head sum its weights' gradients (K and V rows, bias) */
    SET(B, PT_BUF_DKV, 4, pt_kv_head_copies(m, t) > 1 ? m->kv_heads : 0, d, h + 1);
    /* the ring's blocks: K, V, dK, dV in head form; one block's partial output */
    SET(B, PT_BUF_RING0, ab, ring ? 4 : 0, at.tokens, at.kv_heads, d);
    SET(B, PT_BUF_RING1, ab, ring ? 4 : 0, at.tokens, at.kv_heads, d);
    SET(B, PT_BUF_PART, ab, ring ? b : 0, sc, a, d);
    SET(B, PT_BUF_PART_LSE, 4, ring ? b : 0, a, sc);
    /* the all-to-all: what is sent and received (q, the output or their gradients, or
     * k, v, dk, dv in head form), and the backward's gradients in head form */
    int64_t q_h = mul(B, T, a), wide = kv_h > q_h ? kv_h : q_h;
    SET(B, PT_BUF_A2A_SEND, ab, a2a ? wide : 0, d);
    SET(B, PT_BUF_A2A_RECV, ab, a2a ? wide : 0, d);
    SET(B, PT_BUF_HDATT, ab, a2a ? q_h : 0, d);
    SET(B, PT_BUF_HDQ, ab, a2a ? q_h : 0, d);
    SET(B, PT_BUF_HDK, ab, a2a ? kv_h : 0, d);
    SET(B, PT_BUF_HDV, ab, a2a ? kv_h : 0, d);
    /* q/k norms: the gradients of q and k before them, and (tp > 1) the norms' weight
     * gradients of this rank's heads before their sum over tp */
    SET(B, PT_BUF_DQKN, ab, qk ? T : 0, a + k, d);
    SET(B, PT_BUF_DQKNORM, 4, qk && t > 1 ? 2 : 0, d);
    /* a mixture of experts: the router's logits (their gradient after), the local
     * order of the copies and the experts' counts, the copies to send (and their
     * gradients back), what arrives in sending-rank order and its order by expert (ep >
     * 1), the rows by expert (the second GEMM's output, the gradients), with etp > 1 the
     * etp group's rows (the second GEMM's partial sums, the gradients gathered), the
     * combine's weight gradient; the counts are E from the dispatch plan, the ep group's
     * E each and the etp group's E/ep each, gathered */
    SET(B, PT_BUF_MOE_LOGITS, ab, moe ? R : 0, E);
    SET(B, PT_BUF_MOE_SRC, 4, moe ? Rk : 0);
    SET(B, PT_BUF_MOE_COUNTS, 8, moe ? (ep + 1) * E + etp * (E / ep) : 0);
    SET(B, PT_BUF_MOE_TOK, ab, ep > 1 ? Rk : 0, h);
    SET(B, PT_BUF_MOE_RECV, ab, ep > 1 ? N : 0, h);
    SET(B, PT_BUF_MOE_EM, ab, N, h);
    SET(B, PT_BUF_MOE_EG, ab, etp > 1 ? eN : 0, h);
    SET(B, PT_BUF_MOE_DW, 4, moe ? Rk : 0);
    SET(B, PT_BUF_MOE_PERM, 4, ep ? N : 0);
    SET(B, PT_BUF_MOE_INVPERM, 4, ep ? N : 0);
    /* tp > 1: the router's weight gradient of this rank's rows before its sum over tp */
    SET(B, PT_BUF_MOE_DROUTER, 4, moe && t > 1 ? E : 0, h);
}

void pt_buffers_fp8(const pt_model *m, const pt_layout *l, pt_buffers *B)
{
    pt_rank_shape r = pt_rank_shape_of(m, l);
    int64_t T = r.tokens, h = m->hidden, w = h;
    /* the widest side of any linear layer on this rank: q, k and v's outputs, the
     * output projection's input, the MLP's width (tp's slices) */
    int64_t widths[] = {(int64_t)r.heads * r.head_dim, (int64_t)r.kv_heads * r.head_dim,
                        r.ffn};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        w = widths[i] > w ? widths[i] : w;
    /* X (T, ic), dY (T, oc) or X^T (ic, T); dY^T (oc, T); W (oc, ic) or W^T, whose
     * sides are h and at most w */
    SET(B, PT_BUF_FP8_A, 1, T, w);
    SET(B, PT_BUF_FP8_B, 1, T, w);
    SET(B, PT_BUF_FP8_W, 1, h, w);
}

int64_t pt_buf_bytes(const pt_buffers *B, pt_buf b)
{
    int64_t n = B->elems[b] * B->bytes[b]; /* checked in pt_buffers_of */
    return (n + PT_BUF_ALIGN - 1) / PT_BUF_ALIGN * PT_BUF_ALIGN;
}

/* Sum of buffers [first, end), as doubles: a sum of checked sizes may still pass
 * int64 for absurd specs, which the memory model then reports as not fitting. */
static double range_bytes(const pt_buffers *B, pt_buf first, pt_buf end)
{
    double s = 0;
    for (int b = first; b < (int)end; b++)
        s += (double)pt_buf_bytes(B, (pt_buf)b);
    return s;
}

double pt_buffers_layer(const pt_buffers *B)
{
    return range_bytes(B, PT_BUF_LN1, PT_BUF_TOKENS);
}

double pt_buffers_slot(const pt_buffers *B, int64_t layers, bool full_recompute)
{
    double kept = full_recompute && layers > 0 ? 1.0 : (double)layers;
    return (double)pt_buf_bytes(B, PT_BUF_TOKENS) + (double)pt_buf_bytes(B, PT_BUF_TARGETS) +
           (double)(layers + 1) * (double)pt_buf_bytes(B, PT_BUF_X) +
           kept * pt_buffers_layer(B);
}

double pt_buffers_head(const pt_buffers *B)
{
    return range_bytes(B, PT_BUF_LNF, PT_BUF_DRES);
}

double pt_buffers_scratch(const pt_buffers *B)
{
    return range_bytes(B, PT_BUF_DRES, PT_BUF_COUNT);
}
