/*
 * The parameters of a rank's model and their state: the parameter table (named views
 * into one buffer, as llm.c lays out its parameters, so that sharding and checkpoints
 * are offset arithmetic), their initialisation, the fp32 master weights, gradients and
 * Adam moments of every element or, with ZeRO 1, of this rank's share of each gradient
 * bucket, and their upload to the backend. ZeRO 2/3's shards are zero.c's; net.c
 * assembles the model around these; what the layers compute lives in layer.c.
 *
 * Initialisation is keyed by parameter name and element index, never by rank or
 * layout: element i of parameter "layers.3.q.w" gets the same value in every layout
 * of the same model and seed (GPT-2's scheme: N(0, 0.02), residual projections
 * scaled by 1/sqrt(2L), Radford et al. 2019; biases 0, norm weights 1).
 */
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- The parameter table -------------------------------------------------------------- */

typedef struct {
    pt_param *v;
    int n, cap;
    int64_t total;
    bool oom;
    int tp, tp_rank;   /* how tensor-parallel tensors are split, and which part is here */
    int ep, ep_rank;   /* how the experts are split, and which of them are here */
    int etp, etp_rank; /* how each expert's MLP is split, and which slice is here */
    int kv_share;      /* tp ranks that hold the same KV head: t/k when tp > k, else 1 */
} table;

/* How a tensor is divided over the tensor-parallel group (Megatron-LM): whole on
 * every rank, split by rows (column-parallel weights and their biases, the
 * vocabulary of the embedding and head), by columns (row-parallel weights), or, for
 * K and V with fewer KV heads than tp ranks, the rows of the one KV head the rank's
 * query heads use, the same rows on the tp/k ranks that share it. */
typedef enum { WHOLE, SPLIT_ROWS, SPLIT_COLS, KV_HEAD } split;

static void add_split(table *t, const char *name, int64_t rows, int64_t cols, split how)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        pt_param *v = realloc(t->v, (size_t)cap * sizeof *v);
        if (!v) {
            t->oom = true;
            return;
        }
        t->v = v;
        t->cap = cap;
    }
    pt_param *p = &t->v[t->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = cols ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->count = rows * (cols ? cols : 1);
    p->offset = t->total;
    p->decay = cols != 0; /* matrices decay; norms and biases do not */
    p->tp_whole = how == WHOLE;
    p->tp_copies = how == WHOLE ? t->tp : 1;
    p->full_cols = cols ? cols : 1;
    if (how == SPLIT_ROWS)
        p->first = (int64_t)t->tp_rank * p->count;
    else if (how == KV_HEAD) { /* one head of k: head tp_rank / (t/k) */
        p->tp_copies = t->kv_share;
        p->first = (int64_t)(t->tp_rank / t->kv_share) * p->count;
    }
    else if (how == SPLIT_COLS) {
        p->first = (int64_t)t->tp_rank * cols;
        p->full_cols = cols * t->tp;
    }
    t->total += p->count;
}

static void add(table *t, const char *name, int64_t rows, int64_t cols)
{
    add_split(t, name, rows, cols, WHOLE);
}

/* A linear layer's weight (out, in) and, when the model has biases, its bias: a
 * column-parallel layer holds out/t output rows and their bias, a row-parallel one
 * in/t input columns and the whole bias (added once, after the reduction). */
static void linear(table *t, const char *prefix, int64_t out, int64_t in, bool bias,
                   split how)
{
    char name[48];
    snprintf(name, sizeof name, "%s.w", prefix);
    add_split(t, name, out, in, how);
    if (bias) {
        snprintf(name, sizeof name, "%s.b", prefix);
        add_split(t, name, out, 0, how == SPLIT_COLS ? WHOLE : how);
    }
}

static void norm(table *t, const pt_model *m, const char *prefix)
{
    char name[48];
    snprintf(name, sizeof name, "%s.w", prefix);
    add(t, name, m->hidden, 0);
    if (m->norm == PT_NORM_LAYERNORM) {
        snprintf(name, sizeof name, "%s.b", prefix);
        add(t, name, m->hidden, 0);
    }
}

static void layer_params(table *t, const pt_model *m, int tp, int64_t l)
{
    /* attention is a·d wide: h unless the model's head_dim says */
    int64_t h = m->hidden, hd = pt_model_head_dim(m), kvr = pt_kv_heads_rank(m, tp) * hd;
    int64_t qd = m->heads * hd;
    split kv = t->kv_share > 1 ? KV_HEAD : SPLIT_ROWS;
    char p[40];
#define LAYER(suffix) (snprintf(p, sizeof p, "layers.%lld." suffix, (long long)l), p)
    norm(t, m, LAYER("norm1"));
    linear(t, LAYER("q"), qd / tp, h, m->bias, SPLIT_ROWS);
    linear(t, LAYER("k"), kvr, h, m->bias, kv);
    linear(t, LAYER("v"), kvr, h, m->bias, kv);
    linear(t, LAYER("attn_out"), h, qd / tp, m->bias, SPLIT_COLS);
    if (m->qk_norm) /* q's gain then k's, d each, whole on every tp rank */
        add(t, LAYER("qk_norm.w"), 2 * hd, 0);
    norm(t, m, LAYER("norm2"));
    if (pt_model_layer_moe(m, l)) { /* the router; its experts lie at the chunk's start */
        linear(t, LAYER("router"), m->moe.experts, h, m->bias, WHOLE);
        return;
    }
    if (m->act == PT_ACT_SWIGLU)
        linear(t, LAYER("mlp_gate"), m->ffn / tp, h, m->bias, SPLIT_ROWS);
    linear(t, LAYER("mlp_up"), m->ffn / tp, h, m->bias, SPLIT_ROWS);
    linear(t, LAYER("mlp_down"), h, m->ffn / tp, m->bias, SPLIT_COLS);
#undef LAYER
}

/* The experts of mixture-of-experts layer l that this rank holds, E/ep of them from
 * expert ep_rank·E/ep, each tensor under its own name ("layers.3.experts.5.up.w") so
 * that checkpoints and Hugging Face maps take them one by one in any layout: the local
 * experts' gate projections (SwiGLU) one after another, then their up and their down
 * projections, so that each kind is one (G, out, in) array for the grouped GEMMs
 * (runtime/moe.c). With etp > 1 each expert's MLP is split as a dense MLP over tp:
 * gate and up by rows (fe/etp of them from etp_rank·fe/etp), down by columns. */
static void expert_params(table *t, const pt_model *m, int64_t l)
{
    int64_t G = m->moe.experts / t->ep, e0 = (int64_t)t->ep_rank * G;
    int64_t fe = m->moe.expert_ffn / t->etp;
    static const char *const kinds[3] = {"gate", "up", "down"};
    char name[48]; /* a pt_param's name; the model's checks keep layers and experts ints */
    for (int k = m->act == PT_ACT_SWIGLU ? 0 : 1; k < 3; k++)
        for (int64_t e = e0; e < e0 + G; e++) {
            snprintf(name, sizeof name, "layers.%d.experts.%d.%s.w", (int)l, (int)e, kinds[k]);
            add(t, name, k == 2 ? m->hidden : fe, k == 2 ? fe : m->hidden);
            if (t->oom)
                continue;
            /* each tp rank holds experts of its own (parallel folding) */
            pt_param *p = &t->v[t->n - 1];
            p->expert = true;
            p->tp_whole = false;
            p->tp_copies = 1;
            if (k == 2) { /* the down projection's columns etp_rank·fe/etp .. */
                p->first = (int64_t)t->etp_rank * fe;
                p->full_cols = fe * t->etp;
            } else { /* gate's and up's rows */
                p->first = (int64_t)t->etp_rank * p->count;
            }
        }
}

/* The parameters of one pipeline stage on one tensor-parallel rank, in the order
 * they sit in the buffer, chunk by chunk: must stay in step with planner/params.c,
 * which counts the same tensors (checked when the model is built). The last stage of
 * a pipeline keeps its own copy of a tied embedding as the head (Megatron-LM). */
static void build_table(table *t, pt_net *n)
{
    const pt_model *m = &n->spec;
    int tp = n->layout.tp, pp = n->layout.pp, vp = n->layout.vp;
    int64_t V = (int64_t)pp * vp, vr = pt_vocab_padded(m, tp) / tp;
    for (int c = 0; c < vp; c++) {
        int64_t vs = (int64_t)c * pp + n->stage;
        n->chunk_begin[c] = t->total;
        for (int64_t i = 0; i < n->chunk_layers[c]; i++)
            if (pt_model_layer_moe(m, n->chunk_first[c] + i))
                expert_params(t, m, n->chunk_first[c] + i);
        n->experts_end[c] = t->total;
        if (vs == 0) {
            add_split(t, "wte", vr, m->hidden, SPLIT_ROWS);
            if (m->pos == PT_POS_LEARNED)
                add(t, "wpe", m->seq, m->hidden);
        }
        for (int64_t i = 0; i < n->chunk_layers[c]; i++)
            layer_params(t, m, tp, n->chunk_first[c] + i);
        if (vs == V - 1) {
            norm(t, m, "final_norm");
            if (!m->tied_embeddings)
                add_split(t, "lm_head.w", vr, m->hidden, SPLIT_ROWS);
            else if (pp > 1)
                add_split(t, "wte", vr, m->hidden, SPLIT_ROWS);
        }
        n->chunk_end[c] = t->total;
    }
}

int pt_model_param_table(const pt_model *m, pt_param **out, int *count, pt_err *err)
{
    pt_net *n = calloc(1, sizeof *n);
    *out = NULL;
    *count = 0;
    if (!n)
        return pt_err_set(err, "out of memory");
    n->spec = *m;
    pt_layout_default(&n->layout); /* one rank: tp = pp = vp = 1 */
    n->chunk_layers[0] = n->slot_layers = n->n_layers = m->layers;
    table t = {.tp = 1, .ep = 1, .etp = 1, .kv_share = 1};
    build_table(&t, n);
    free(n);
    if (t.oom) {
        free(t.v);
        return pt_err_set(err, "out of memory for model '%s''s parameter table", m->name);
    }
    *out = t.v;
    *count = t.n;
    return 0;
}

const pt_param *pt_net_param(const pt_net *n, const char *name)
{
    for (int i = 0; i < n->n_param; i++)
        if (strcmp(n->param[i].name, name) == 0)
            return &n->param[i];
    return NULL;
}

/* The planner's count of this rank's parameters: what the memory model assumed. */
static int64_t planned_params(const pt_net *n)
{
    return pt_rank_params(&n->spec, &n->layout, n->stage, NULL);
}

int pt_net_build_table(pt_net *n, pt_err *err)
{
    table t = {.tp = n->layout.tp, .tp_rank = n->tp_rank,
               .ep = n->layout.ep > 1 ? n->layout.ep : 1, .ep_rank = n->ep_rank,
               .etp = n->layout.etp > 1 ? n->layout.etp : 1, .etp_rank = n->etp_rank,
               .kv_share = pt_kv_head_copies(&n->spec, n->layout.tp)};
    build_table(&t, n);
    if (t.oom) {
        free(t.v);
        return pt_err_set(err, "out of memory building the parameter table");
    }
    n->param = t.v;
    n->n_param = t.n;
    n->n_elems = t.total;
    if (n->n_elems != planned_params(n))
        return pt_err_set(err, "internal: stage %d has %lld parameters, the planner counts "
                               "%lld", n->stage, (long long)n->n_elems,
                          (long long)planned_params(n));
    return 0;
}

/* ---- Initialisation ----------------------------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Element i of a standard normal stream keyed by (seed, name): Box-Muller on a
 * Philox block, two normals per counter value. */
static float normal_at(uint64_t seed, uint64_t name_hash, int64_t i)
{
    uint64_t key64 = seed ^ (name_hash * 0x9E3779B97F4A7C15ull);
    uint32_t key[2] = {(uint32_t)key64, (uint32_t)(key64 >> 32)};
    uint64_t c = (uint64_t)i / 2;
    uint32_t ctr[4] = {(uint32_t)c, (uint32_t)(c >> 32), (uint32_t)name_hash,
                       (uint32_t)(name_hash >> 32)};
    uint32_t out[4];
    pt_k_philox4x32_10(ctr, key, out);
    double u1 = ((double)(out[0] >> 8) + 1.0) / 16777217.0; /* (0, 1] */
    double u2 = pt_k_philox_unit(out[1]);
    double r = sqrt(-2.0 * log(u1));
    double angle = 2.0 * 3.14159265358979323846 * u2;
    return (float)(i % 2 ? r * sin(angle) : r * cos(angle));
}

int64_t pt_param_whole_index(const pt_param *p, int64_t i)
{
    if (p->ndim == 1 || p->full_cols == p->shape[1])
        return p->first + i; /* whole, or split by rows: one contiguous range */
    int64_t row = i / p->shape[1], col = i % p->shape[1];
    return row * p->full_cols + p->first + col;
}

/* Values of one parameter, element by element from its index in the whole tensor,
 * so that a tensor-parallel part holds exactly the values of the same elements of
 * the unsplit model. */
float pt_net_normal(uint64_t seed, const char *key, int64_t i)
{
    return normal_at(seed, fnv1a(key), i);
}

static void init_param(const pt_param *p, const pt_model *m, uint64_t seed, float *w)
{
    bool norm_w = strstr(p->name, "norm") && pt_ends_with(p->name, ".w");
    if (pt_ends_with(p->name, ".b") || norm_w) {
        for (int64_t i = 0; i < p->count; i++)
            w[i] = norm_w ? 1.0f : 0.0f;
        return;
    }
    double std = 0.02;
    if (strcmp(p->name, "wpe") == 0)
        std = 0.01; /* GPT-2's position embedding */
    else if (strstr(p->name, "attn_out.w") || strstr(p->name, "mlp_down.w"))
        std = 0.02 / sqrt(2.0 * (double)m->layers);
    uint64_t h = fnv1a(p->name);
    /* A large model's elements, drawn one by one on one thread, hold up ptrun's start
     * for long, so the threads share them. Each element is a function of its index
     * alone, so the threads (OpenMP's default count on a GPU rank, --threads on the CPU
     * backend) give the same values as one. */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (p->count >= 65536)
#endif
    for (int64_t i = 0; i < p->count; i++)
        w[i] = (float)(std * normal_at(seed, h, pt_param_whole_index(p, i)));
}

int pt_net_init_values(const pt_net *n, uint64_t seed, float **out, pt_err *err)
{
    float *host = malloc((size_t)n->n_elems * sizeof *host);
    *out = host;
    if (!host)
        return pt_err_set(err, "out of memory initialising %lld parameters",
                          (long long)n->n_elems);
    for (int i = 0; i < n->n_param; i++)
        init_param(&n->param[i], &n->spec, seed, host + n->param[i].offset);
    return 0;
}

/* ---- Buffers ------------------------------------------------------------------------------- */

int pt_net_upload_weights(pt_kernels *kn, void *dst, const float *src, int64_t count,
                          pt_err *err)
{
    if (kn->act_dtype == PT_KDTYPE_F32) {
        kn->copy(kn, dst, src, (size_t)count * sizeof *src, PT_KCOPY_H2D);
        return 0;
    }
    uint16_t *b16 = malloc((size_t)(count > 0 ? count : 1) * sizeof *b16);
    if (!b16)
        return pt_err_set(err, "out of memory converting %lld parameters", (long long)count);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) if (count >= 65536)
#endif
    for (int64_t i = 0; i < count; i++)
        b16[i] = pt_k_bf16_from_f32(src[i]);
    kn->copy(kn, dst, b16, (size_t)count * sizeof *b16, PT_KCOPY_H2D);
    int rc = kn->sync(kn) ? pt_err_set(err, "%s", kn->err) : 0; /* b16 is read until then */
    free(b16);
    return rc;
}

int pt_net_upload_master(pt_net *n, const float *host, pt_err *err)
{
    pt_kernels *kn = n->kn;
    size_t bytes = (size_t)n->n_elems * sizeof(float);
    kn->copy(kn, n->master, host, bytes, PT_KCOPY_H2D);
    /* the bf16 compute copy of the fp32 master weights */
    if (n->master != n->w && pt_net_upload_weights(kn, n->w, host, n->n_elems, err))
        return -1;
    return kn->sync(kn) ? pt_err_set(err, "%s", kn->err) : 0;
}

/* The elements each chunk's gradient buckets reduce over dp·cp: the chunk's, less its
 * experts (at its start: reduced over their own group), and less a tied
 * embedding's copy under ZeRO 1 (on the first stage at the chunk's start, on the last
 * at its end: build_table), whose sum over the two stages must come first; *tied_lo,
 * *tied_hi: that copy, or an empty range. */
int pt_net_reduce_ranges(pt_net *n, int64_t *tied_lo, int64_t *tied_hi, pt_err *err)
{
    *tied_lo = *tied_hi = 0;
    for (int c = 0; c < n->layout.vp; c++) {
        n->reduce_lo[c] = n->experts_end[c]; /* the experts' own group reduces theirs */
        n->reduce_hi[c] = n->chunk_end[c];
    }
    bool tied_copy = n->spec.tied_embeddings && n->layout.pp > 1 &&
                     (n->stage == 0 || n->stage == n->layout.pp - 1);
    if (n->layout.zero != 1 || !tied_copy)
        return 0;
    const pt_param *q = pt_net_param(n, "wte");
    *tied_lo = q->offset;
    *tied_hi = q->offset + q->count;
    for (int c = 0; c < n->layout.vp; c++) {
        if (n->reduce_lo[c] == *tied_lo) {
            n->reduce_lo[c] = *tied_hi;
            return 0;
        }
        if (n->reduce_hi[c] == *tied_hi) {
            n->reduce_hi[c] = *tied_lo;
            return 0;
        }
    }
    return pt_err_set(err, "internal: stage %d's tied embedding [%lld, %lld) is at neither end "
                           "of a chunk", n->stage, (long long)*tied_lo, (long long)*tied_hi);
}

/* ZeRO 1's buckets, as the engine starts them: in each chunk its reduced range cut by
 * the planner's rule (pt_bucket_at: from the end down), the tied copy, a bucket of its
 * own, then each chunk's experts cut the same way (pt_ops_expert_sync's buckets), shared
 * over their own group. Returns the count; fills z (when not NULL) with each bucket's
 * range, chunk and group. */
static int zero1_buckets(const pt_net *n, const pt_net_place *at, int64_t bucket_elems,
                         int64_t tied_lo, int64_t tied_hi, pt_zero1_bucket *z)
{
    int k = 0, edp = pt_layout_edp(&n->layout);
    pt_zero1_bucket dense = {.group = PT_GROUP_DPCP, .ranks = at->dp_size, .rank = at->dp_rank};
    pt_zero1_bucket experts = {.experts = true, .group = PT_GROUP_EDP, .ranks = edp,
                               .rank = at->edp_rank};
    for (int c = 0; c < n->layout.vp; c++) {
        int64_t len = n->reduce_hi[c] - n->reduce_lo[c];
        for (int64_t b = 0; b < pt_bucket_count(len, bucket_elems); b++, k++) {
            int64_t off, cnt;
            pt_bucket_at(len, bucket_elems, b, &off, &cnt);
            if (z) {
                z[k] = dense;
                z[k].chunk = c;
                z[k].lo = n->reduce_lo[c] + off;
                z[k].hi = n->reduce_lo[c] + off + cnt;
            }
        }
    }
    if (tied_hi > tied_lo) {
        if (z) {
            z[k] = dense;
            z[k].chunk = -1;
            z[k].at_step = true;
            z[k].lo = tied_lo;
            z[k].hi = tied_hi;
        }
        k++;
    }
    for (int c = 0; c < n->layout.vp; c++) {
        int64_t lo = n->chunk_begin[c], len = n->experts_end[c] - lo;
        for (int64_t b = 0; len > 0 && b < pt_bucket_count(len, bucket_elems); b++, k++) {
            int64_t off, cnt;
            pt_bucket_at(len, bucket_elems, b, &off, &cnt);
            if (z) {
                z[k] = experts;
                z[k].chunk = c;
                z[k].lo = lo + off;
                z[k].hi = lo + off + cnt;
            }
        }
    }
    return k;
}

/* The optimizer's share of the buffer. With ZeRO 1 over several data-parallel ranks,
 * each gradient bucket is padded to a multiple of its group's ranks (dp·cp, or for the
 * experts their expert-data-parallel group) and this rank owns one share of every one
 * (Megatron-Core's distributed optimizer), so the moments take about 1/dp of the
 * memory, as the planner's memory model counts them. */
static int optimizer_share(pt_net *n, const pt_plan *p, const pt_net_place *at,
                           int64_t tied_lo, int64_t tied_hi, pt_err *err)
{
    n->opt_elems = n->n_elems;
    n->opt_ranks = 1;
    if (n->layout.zero < 1 || at->dp_size <= 1)
        return 0;
    int64_t bucket = p->train.bucket_bytes / (int64_t)sizeof(float);
    n->opt_ranks = at->dp_size;
    n->n_z1 = zero1_buckets(n, at, bucket, tied_lo, tied_hi, NULL);
    if (!(n->z1 = calloc((size_t)(n->n_z1 > 0 ? n->n_z1 : 1), sizeof *n->z1)))
        return pt_err_set(err, "out of memory for %d ZeRO-1 buckets", n->n_z1);
    zero1_buckets(n, at, bucket, tied_lo, tied_hi, n->z1);
    int64_t full = 0, shard = 0;
    for (int b = 0; b < n->n_z1; b++) {
        pt_zero1_bucket *z = &n->z1[b];
        z->share = (z->hi - z->lo + z->ranks - 1) / z->ranks;
        z->full_at = full;
        z->shard_at = shard;
        full += z->share * z->ranks;
        shard += z->share;
    }
    n->opt_elems = shard;
    n->rs_full_elems = full;
    return 0;
}

static int alloc_state(pt_net *n, pt_err *err)
{
    pt_kernels *kn = n->kn;
    size_t f32 = (size_t)n->n_elems * sizeof(float), opt = (size_t)n->opt_elems * sizeof(float);
    bool fp32 = kn->act_dtype == PT_KDTYPE_F32;
    n->master = kn->alloc(kn, f32);
    n->w = fp32 ? n->master : kn->alloc(kn, (size_t)n->n_elems * pt_kdtype_bytes(kn->act_dtype));
    n->grad = kn->alloc(kn, f32);
    n->m = kn->alloc(kn, opt);
    n->v = kn->alloc(kn, opt);
    n->bytes += (int64_t)(2 * f32 + 2 * opt) +
                (fp32 ? 0 : (int64_t)n->n_elems * (int64_t)pt_kdtype_bytes(kn->act_dtype));
    if (n->opt_ranks > 1) { /* ZeRO 1: the buckets' padded copies and shares */
        size_t full = (size_t)n->rs_full_elems * sizeof(float);
        n->rs_full = kn->alloc(kn, full);
        n->rs_shard = kn->alloc(kn, opt);
        n->bytes += (int64_t)(full + opt);
        if (!n->rs_full || !n->rs_shard)
            return pt_err_set(err, "out of memory for the ZeRO-1 reduce-scatter buffers "
                                   "(%.1f MiB)", (double)(full + opt) / 1048576);
    }
    if (!n->master || !n->w || !n->grad || !n->m || !n->v)
        return pt_err_set(err, "out of memory for %lld parameters and their optimizer state "
                               "(%.1f MiB)", (long long)n->n_elems,
                          (2.0 * (double)f32 + 2.0 * (double)opt) / 1048576);
    kn->zero(kn, n->grad, f32);
    kn->zero(kn, n->m, opt);
    kn->zero(kn, n->v, opt);
    return 0;
}

int pt_net_alloc_state(pt_net *n, const pt_plan *p, const pt_net_place *at, int64_t tied_lo,
                       int64_t tied_hi, pt_err *err)
{
    if (optimizer_share(n, p, at, tied_lo, tied_hi, err))
        return -1;
    return alloc_state(n, err);
}

void pt_net_free_state(pt_net *n)
{
    pt_kernels *kn = n->kn;
    if (kn) {
        if (n->w != n->master)
            kn->free(kn, n->w);
        kn->free(kn, n->master);
        kn->free(kn, n->grad);
        kn->free(kn, n->m);
        kn->free(kn, n->v);
        kn->free(kn, n->rs_full);
        kn->free(kn, n->rs_shard);
    }
    free(n->z1);
    free(n->param);
    n->w = n->master = n->grad = n->m = n->v = n->rs_full = n->rs_shard = NULL;
    n->z1 = NULL;
    n->param = NULL;
}

/* ---- A parameter's part and the whole tensor (checkpoints) ------------------------------ */

void pt_param_whole_shape(const pt_net *n, const pt_param *p, int64_t shape[2])
{
    /* parts split by rows (or KV heads) hold 1/(tp/copies) of the rows, an expert's
     * 1/etp; a part split by columns holds shape[1] of full_cols columns */
    int64_t parts = p->expert ? (n->layout.etp > 1 ? n->layout.etp : 1)
                              : n->layout.tp / (p->tp_copies > 0 ? p->tp_copies : 1);
    bool by_cols = p->ndim == 2 && p->full_cols != p->shape[1];
    shape[0] = by_cols ? p->shape[0] : p->shape[0] * parts;
    shape[1] = p->ndim == 2 ? p->full_cols : 0;
}

bool pt_param_writer(const pt_net *n, const pt_param *p)
{
    bool tied_copy = n->spec.tied_embeddings && n->layout.pp > 1 && n->stage > 0 &&
                     strcmp(p->name, "wte") == 0;
    return !tied_copy && (p->tp_copies <= 1 || n->tp_rank % p->tp_copies == 0);
}
