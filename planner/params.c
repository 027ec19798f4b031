/*
 * Parameter counts of a transformer as one tensor-parallel rank holds them. The
 * memory model (memory.c) turns these counts into weight, gradient and optimizer
 * bytes per pipeline stage, and pt_model_params_total() reproduces the published
 * size of a model so that a spec can be checked against its paper or model card.
 *
 * Sharding follows Megatron-LM (Shoeybi et al. 2019, Sec. 3; Narayanan et al. 2021):
 * the QKV and MLP up/gate projections are split by columns, the attention output
 * and MLP down projections by rows, so the column-parallel biases are split and the
 * row-parallel biases (added after the all-reduce) are replicated. Norm weights are
 * replicated on every tensor-parallel rank. The token embedding and the output head
 * are split along the vocabulary, padded to a multiple of t. With fewer KV heads than
 * t, each rank holds one KV head, the one its query heads use, replicated over the
 * t/k ranks that share it (Megatron-LM's rule for tp > num_query_groups).
 *
 * Letters: h hidden, a heads, k key/value heads, f FFN size, v vocabulary, s sequence,
 * t tensor-parallel size; d is the head dimension (h/a unless the model says) and k·d
 * the width of the K (and of the V) projection. A mixture-of-experts layer's experts
 * are split over ep ranks (E/ep each) and each expert's MLP over etp ranks, as a dense
 * MLP over tp.
 */
#include "spec.h"

/* Parameters of one norm: LayerNorm has a gain and a bias, RMSNorm only a gain. */
static int64_t pt_params_norm(const pt_model *m)
{
    return m->norm == PT_NORM_LAYERNORM ? 2 * m->hidden : m->hidden;
}

static int64_t pt_params_tp(int tp)
{
    return tp < 1 ? 1 : tp;
}

int64_t pt_vocab_padded(const pt_model *m, int tp)
{
    /* Rounded up to a multiple of 128 (Megatron-LM's --make-vocab-size-divisible-by
     * default), so the head's GEMMs have aligned leading dimensions (GPT-2's 50257 rows
     * push cuBLASLt onto slow kernels), then to a multiple of t for the vocab-parallel
     * split. Unlike Megatron-LM's 128·t, the size then stays the same for every t that
     * divides it, so layouts train the same model. The padded rows are allocated like
     * the others, but the head masks their logits out of the softmax (PT_BUF_VMASK,
     * runtime/tensors.c fill_vocab_mask): the loss is the unpadded model's and they are
     * never trained. */
    return pt_vocab_round(m, tp, 128, false);
}

int64_t pt_vocab_mask_elems(const pt_model *m, int tp)
{
    int64_t padded = pt_vocab_padded(m, tp);
    return padded > m->vocab ? padded / pt_params_tp(tp) : 0;
}

int64_t pt_vocab_round(const pt_model *m, int tp, int64_t multiple, bool per_tp)
{
    /* multiple <= 65536 (stack files) and t <= 2^24 (world sizes): no overflow */
    int64_t t = pt_params_tp(tp), q = multiple < 1 ? 1 : multiple;
    if (per_tp)
        q *= t;
    int64_t v = (m->vocab + q - 1) / q * q;
    return (v + t - 1) / t * t;
}

int64_t pt_kv_heads_rank(const pt_model *m, int tp)
{
    int64_t t = pt_params_tp(tp);
    return m->kv_heads >= t ? m->kv_heads / t : 1;
}

int pt_kv_head_copies(const pt_model *m, int tp)
{
    int64_t t = pt_params_tp(tp);
    return m->kv_heads >= t ? 1 : (int)(t / m->kv_heads);
}

/* Attention with its norm on one rank: column-parallel q, k, v (a·d wide, k·d each
 * for k and v), the row-parallel output projection, and q/k norms (one d-wide gain
 * each, shared by the heads, replicated). */
static int64_t params_attention(const pt_model *m, int tp)
{
    int64_t t = pt_params_tp(tp), h = m->hidden, d = pt_model_head_dim(m);
    int64_t qd = m->heads * d; /* attention's width, a·d (h unless head_dim says) */
    int64_t qkv = qd / t + 2 * pt_kv_heads_rank(m, tp) * d;
    int64_t n = h * qkv + qd / t * h;
    if (m->bias)
        n += qkv + h;
    if (m->qk_norm)
        n += 2 * d;
    if (m->attn_sinks) /* one logit per head, the rank's heads */
        n += m->heads / t;
    return n + pt_params_norm(m);
}

/* An MLP of inner size f split over `split` ranks: column-parallel up (and gate for
 * SwiGLU), row-parallel down, whose bias is replicated. */
static int64_t params_mlp(const pt_model *m, int64_t f, int split)
{
    int64_t t = pt_params_tp(split), h = m->hidden;
    int64_t up = m->act == PT_ACT_SWIGLU ? 2 * f : f;
    int64_t n = h * up / t + f * h / t;
    if (m->bias)
        n += up / t + h;
    return n;
}

int64_t pt_params_layer(const pt_model *m, int tp)
{
    /* attention, the pre-MLP norm and the MLP */
    return params_attention(m, tp) + pt_params_norm(m) + params_mlp(m, m->ffn, tp);
}

int64_t pt_params_moe_layer_dense(const pt_model *m, int tp)
{
    int64_t n = params_attention(m, tp) + pt_params_norm(m);
    /* the router, (E, h), replicated on every rank (Megatron-Core's TopKRouter) */
    n += m->moe.experts * m->hidden + (m->bias ? m->moe.experts : 0);
    /* shared experts as one MLP of their summed width, split over tp as a dense one */
    if (m->moe.shared_experts > 0)
        n += params_mlp(m, m->moe.shared_experts * m->moe.shared_ffn, tp);
    return n;
}

int64_t pt_params_experts(const pt_model *m, int ep, int etp)
{
    int64_t local = m->moe.experts / (ep < 1 ? 1 : ep);
    return local * params_mlp(m, m->moe.expert_ffn, etp);
}

int64_t pt_params_moe_layer(const pt_model *m, int tp, int ep, int etp)
{
    return pt_params_moe_layer_dense(m, tp) + pt_params_experts(m, ep, etp);
}

int64_t pt_params_embedding(const pt_model *m, int tp)
{
    int64_t n = pt_vocab_padded(m, tp) * m->hidden / pt_params_tp(tp);
    if (m->pos == PT_POS_LEARNED)
        n += m->seq * m->hidden; /* position table, replicated */
    return n;
}

int64_t pt_params_head(const pt_model *m, int tp, int pp)
{
    int64_t n = pt_params_norm(m); /* final norm */
    /* Megatron keeps a copy of the tied word embedding on the last stage and
     * all-reduces its gradient with the first stage's (Narayanan et al. 2021). */
    if (!m->tied_embeddings || pp > 1)
        n += pt_vocab_padded(m, tp) * m->hidden / pt_params_tp(tp);
    return n;
}

/* The transformer layers' parameters (whole, tp = ep = etp = 1), with top_k of each
 * MoE layer's experts when `active`. */
static int64_t params_layers(const pt_model *m, bool active)
{
    int64_t moe = pt_model_moe_layers(m, 0, m->layers);
    int64_t n = (m->layers - moe) * pt_params_layer(m, 1);
    if (moe > 0) {
        int64_t experts = pt_params_experts(m, 1, 1);
        if (active)
            experts = experts / m->moe.experts * m->moe.top_k;
        n += moe * (pt_params_moe_layer_dense(m, 1) + experts);
    }
    return n;
}

static int64_t params_whole(const pt_model *m, bool active)
{
    /* the model's own parameters, as published: the vocabulary's padding rows
     * (pt_vocab_padded) are allocated and trained but not counted */
    int64_t tables = m->tied_embeddings ? 1 : 2;
    return pt_params_embedding(m, 1) + params_layers(m, active) + pt_params_head(m, 1, 1) -
           tables * (pt_vocab_padded(m, 1) - m->vocab) * m->hidden;
}

int64_t pt_model_params_total(const pt_model *m) { return params_whole(m, false); }

int64_t pt_model_params_active(const pt_model *m) { return params_whole(m, true); }

int64_t pt_params_part(const pt_model *m, int tp, int pp, int64_t layers, bool first,
                       bool last)
{
    int64_t n = layers * pt_params_layer(m, tp);
    if (first)
        n += pt_params_embedding(m, tp);
    if (last)
        n += pt_params_head(m, tp, pp);
    return n;
}

/* ---- PowerSGD's matrices -------------------------------------------------------- */

bool pt_psgd_compresses(int64_t rows, int64_t cols, int rank)
{
    /* PyTorch's PowerSGDState.min_compression_rate = 2 (its default): a matrix is
     * compressed when its rank-r factors take less than half its elements */
    int64_t r = pt_psgd_rank(rows, cols, rank);
    return r > 0 && 2 * (rows + cols) * r < rows * cols;
}

int64_t pt_psgd_rank(int64_t rows, int64_t cols, int rank)
{
    int64_t r = rank;
    if (rows < r)
        r = rows;
    if (cols < r)
        r = cols;
    return r;
}

bool pt_psgd_group_closes(int64_t *acc, int64_t rows, int64_t cols, int64_t bucket)
{
    *acc += rows * cols;
    if (*acc < bucket)
        return false;
    *acc = 0;
    return true;
}

int pt_psgd_layer_matrices(const pt_model *m, int tp, int64_t shape[PT_PSGD_LAYER_MAX][2])
{
    int64_t t = pt_params_tp(tp), h = m->hidden, f = m->ffn;
    int64_t d = pt_model_head_dim(m), qd = m->heads * d, kvr = pt_kv_heads_rank(m, tp) * d;
    int n = 0;
#define MAT(r, c) (shape[n][0] = (r), shape[n][1] = (c), n++)
    MAT(qd / t, h); /* q, k, v: column-parallel */
    MAT(kvr, h);
    MAT(kvr, h);
    MAT(h, qd / t); /* attn_out: row-parallel */
    if (m->act == PT_ACT_SWIGLU)
        MAT(f / t, h); /* mlp_gate */
    MAT(f / t, h);     /* mlp_up */
    MAT(h, f / t);     /* mlp_down */
#undef MAT
    return n;
}

double pt_layer_linear_elems(const pt_model *m, int tp, int *count)
{
    int64_t shape[PT_PSGD_LAYER_MAX][2];
    int n = pt_psgd_layer_matrices(m, tp, shape);
    double e = 0;
    for (int i = 0; i < n; i++)
        e += (double)shape[i][0] * (double)shape[i][1];
    if (count)
        *count = n;
    return e;
}

void pt_psgd_layer(const pt_model *m, int tp, int rank, int64_t *compressed,
                   int64_t *factors)
{
    int64_t shape[PT_PSGD_LAYER_MAX][2];
    int n = pt_psgd_layer_matrices(m, tp, shape);
    *compressed = *factors = 0;
    for (int i = 0; i < n; i++) {
        int64_t rows = shape[i][0], cols = shape[i][1];
        if (!pt_psgd_compresses(rows, cols, rank))
            continue;
        *compressed += rows * cols;
        *factors += (rows + cols) * pt_psgd_rank(rows, cols, rank);
    }
}
