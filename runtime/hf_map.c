/*
 * The map between our parameter tensors and Hugging Face's GPT-2, LLaMA, Qwen3, Mixtral
 * and Qwen3-MoE tensors: which of their tensors holds each of ours and how its elements
 * are arranged there (hf_internal.h). Reading a Hugging Face directory (hf.c) and
 * exporting a checkpoint (hf_export.c) both go through hf_map_of and hf_row, element by
 * element in opposite directions. Also the 16-bit float conversions both need.
 *
 * Names follow transformers' modeling files: models/gpt2/modeling_gpt2.py (GPT2Model:
 * wte, wpe, h.L.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f;
 * every linear layer a Conv1D) and models/llama/modeling_llama.py (model.embed_tokens,
 * model.layers.L.{input_layernorm, self_attn.{q,k,v,o}_proj,
 * post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head), whose
 * names models/qwen3/modeling_qwen3.py keeps, adding self_attn.{q,k}_norm;
 * models/mixtral/modeling_mixtral.py puts block_sparse_moe.{gate, experts.E.{w1,w3,w2}}
 * in place of the MLP, models/qwen3_moe/modeling_qwen3_moe.py
 * mlp.{gate, experts.E.{gate,up,down}_proj}.
 */
#include "hf_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Families ------------------------------------------------------------------------ */

static const char *const norm_names[] = {"layernorm", "rmsnorm"};
static const char *const act_names[] = {"gelu", "swiglu"};
static const char *const pos_names[] = {"learned", "rope", "alibi"};

static const struct {
    const char *type, *cls, *shape;
} families[] = {
    [HF_GPT2] = {"gpt2", "GPT2LMHeadModel", "GPT-2 shaped (layernorm, gelu, learned positions)"},
    [HF_LLAMA] = {"llama", "LlamaForCausalLM", "LLaMA shaped (rmsnorm, swiglu, rope)"},
    [HF_QWEN3] = {"qwen3", "Qwen3ForCausalLM", "Qwen3 shaped (LLaMA's with q/k norms)"},
    [HF_MIXTRAL] = {"mixtral", "MixtralForCausalLM",
                    "Mixtral shaped (LLaMA's with a mixture of experts)"},
    [HF_QWEN3_MOE] = {"qwen3_moe", "Qwen3MoeForCausalLM",
                      "Qwen3-MoE shaped (Qwen3's with a mixture of experts)"},
};

const char *hf_family_type(hf_family f) { return families[f].type; }
const char *hf_family_class(hf_family f) { return families[f].cls; }
const char *hf_family_shape(hf_family f) { return families[f].shape; }

/* What none of the families' config.json can say. */
static int no_family_field(const pt_model *m, pt_err *err)
{
    if (m->window > 0)
        return pt_err_set(err, "model '%s': window %lld (banded attention) has no Hugging Face "
                          "mapping here", m->name, (long long)m->window);
    if (m->attn_sinks)
        return pt_err_set(err, "model '%s': attn_sinks (gpt-oss's learned sink logits) have no "
                          "Hugging Face mapping here", m->name);
    return 0;
}

/* GPT-2: biases everywhere, one head size h/a, no grouped-query attention, no q/k norms,
 * no experts. */
static int gpt2_fits(const pt_model *m, pt_err *err)
{
    if (!m->bias)
        return pt_err_set(err, "model '%s': bias false, but GPT-2 (layernorm, gelu, learned "
                          "positions) has biases in every linear layer", m->name);
    if (m->kv_heads != m->heads)
        return pt_err_set(err, "model '%s': kv_heads %lld, but GPT-2 has no grouped-query "
                          "attention (heads %lld)", m->name, (long long)m->kv_heads,
                          (long long)m->heads);
    if (pt_model_head_dim(m) * m->heads != m->hidden)
        return pt_err_set(err, "model '%s': head_dim %lld, but GPT-2's heads are hidden / heads "
                          "= %lld wide", m->name, (long long)pt_model_head_dim(m),
                          (long long)(m->hidden / m->heads));
    if (m->qk_norm)
        return pt_err_set(err, "model '%s': qk_norm, but GPT-2 has no q/k norms", m->name);
    if (m->moe.experts > 0)
        return pt_err_set(err, "model '%s': moe.experts %lld, but GPT-2 has no mixture of "
                          "experts", m->name, (long long)m->moe.experts);
    return 0;
}

/* Mixtral and Qwen3-MoE (their MoE blocks, modeling_mixtral.py and
 * modeling_qwen3_moe.py): a softmax router without bias over every expert, no shared
 * experts, no biases anywhere; Mixtral renormalises the top-k always (softmax over the
 * k logits) and has the mixture in every layer. Qwen3-MoE says any set of MoE layers
 * (decoder_sparse_step, mlp_only_layers). Both blocks are dropless: a capacity factor
 * (moe.capacity) is not said, as the load-balancing coefficient is a training setting. */
static int moe_fits(const pt_model *m, hf_family f, pt_err *err)
{
    const char *fam = f == HF_MIXTRAL ? "Mixtral" : "Qwen3-MoE";
    const pt_moe *e = &m->moe;
    if (e->shared_experts > 0)
        return pt_err_set(err, "model '%s': moe.shared_experts %lld, but %s has no shared "
                          "experts", m->name, (long long)e->shared_experts, fam);
    if (e->score != PT_ROUTER_SOFTMAX)
        return pt_err_set(err, "model '%s': moe.router sigmoid, but %s's router is a softmax",
                          m->name, fam);
    if (m->bias)
        return pt_err_set(err, "model '%s': bias true, but %s has no biases", m->name, fam);
    if (f == HF_MIXTRAL && !e->renorm)
        return pt_err_set(err, "model '%s': moe.renorm false, but Mixtral renormalises its "
                          "top-k scores (a softmax over the top-k logits)", m->name);
    if (f == HF_MIXTRAL && pt_model_moe_layers(m, 0, m->layers) != m->layers)
        return pt_err_set(err, "model '%s': moe.first_dense %lld, moe.every %lld leave dense "
                          "layers, but Mixtral has a mixture of experts in every layer",
                          m->name, (long long)e->first_dense, (long long)e->every);
    return 0;
}

int hf_family_of(const pt_model *m, hf_family *out, pt_err *err)
{
    if (no_family_field(m, err))
        return -1;
    if (m->norm == PT_NORM_LAYERNORM && m->act == PT_ACT_GELU && m->pos == PT_POS_LEARNED) {
        *out = HF_GPT2;
        return gpt2_fits(m, err);
    }
    if (m->norm != PT_NORM_RMSNORM || m->act != PT_ACT_SWIGLU || m->pos != PT_POS_ROPE)
        return pt_err_set(err, "model '%s': norm %s, activation %s, positions %s fit neither "
                          "GPT-2 (layernorm, gelu, learned) nor LLaMA (rmsnorm, swiglu, rope)",
                          m->name, norm_names[m->norm], act_names[m->act], pos_names[m->pos]);
    if (m->moe.experts > 0) {
        *out = m->qk_norm ? HF_QWEN3_MOE : HF_MIXTRAL;
        return moe_fits(m, *out, err);
    }
    *out = m->qk_norm ? HF_QWEN3 : HF_LLAMA;
    if (m->qk_norm && m->bias) /* Qwen3Config has attention_bias, but no MLP bias */
        return pt_err_set(err, "model '%s': bias true, but Qwen3's MLP has no biases", m->name);
    return 0;
}

/* ---- The map --------------------------------------------------------------------------- */

/* A tensor of a layer, by its base name (before ".w" or ".b"), with its names in the
 * families (NULL: the family has none); "llama" is every family but GPT-2. */
typedef struct {
    const char *ours, *gpt2, *llama;
} hf_names;

static const hf_names layer_names[] = {
    {"norm1", "ln_1", "input_layernorm"},
    {"q", "attn.c_attn", "self_attn.q_proj"},
    {"k", "attn.c_attn", "self_attn.k_proj"},
    {"v", "attn.c_attn", "self_attn.v_proj"},
    {"attn_out", "attn.c_proj", "self_attn.o_proj"},
    {"norm2", "ln_2", "post_attention_layernorm"},
    {"mlp_gate", NULL, "mlp.gate_proj"},
    {"mlp_up", "mlp.c_fc", "mlp.up_proj"},
    {"mlp_down", "mlp.c_proj", "mlp.down_proj"},
};

/* The router and an expert's gate, up and down projections of an MoE layer, ours and
 * theirs: Mixtral's MixtralSparseMoeBlock (w1 the gate, w3 the linear branch, w2 down)
 * and Qwen3-MoE's Qwen3MoeSparseMoeBlock. */
static const char *const moe_ours[4] = {"router.w", "gate.w", "up.w", "down.w"};
static const char *const mixtral_moe[4] = {"block_sparse_moe.gate", "w1", "w3", "w2"};
static const char *const qwen3_moe[4] = {"mlp.gate", "gate_proj", "up_proj", "down_proj"};

static void set_shape(int *ndim, int64_t *shape, int64_t rows, int64_t cols)
{
    *ndim = cols ? 2 : 1;
    shape[0] = rows;
    shape[1] = cols;
}

/* Ours and theirs (one tensor) the same shape, row for row. */
static void same(hf_map *out, hf_how how, int64_t rows, int64_t cols)
{
    out->parts = 1;
    out->part[0].how = how;
    set_shape(&out->ours_ndim, out->ours_shape, rows, cols);
    set_shape(&out->part[0].ndim, out->part[0].shape, rows, cols);
}

static int unknown(const pt_model *m, const char *name, pt_err *err)
{
    return pt_err_set(err, "model '%s' has no parameter '%.64s' (or no Hugging Face tensor "
                      "for it)", m->name, name);
}

/* The number at *p below `below` followed by a dot, or -1; *rest after the dot. */
static int64_t index_of(const char *p, int64_t below, const char **rest)
{
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.'))
        return -1;
    char *end;
    errno = 0;
    long long i = strtoll(p, &end, 10);
    if (errno || *end != '.' || i >= below)
        return -1;
    *rest = end + 1;
    return i;
}

/* The layer index of "layers.<L>.<rest>" (below m->layers), or -1; *rest after its dot. */
static int64_t layer_of(const pt_model *m, const char *name, const char **rest)
{
    if (strncmp(name, "layers.", 7) != 0)
        return -1;
    return index_of(name + 7, m->layers, rest);
}

/* Rows and columns of our linear layer `base` (q, k, v, attn_out, mlp_*). */
static void linear_shape(const pt_model *m, const char *base, int64_t *rows, int64_t *cols)
{
    int64_t h = m->hidden, d = pt_model_head_dim(m), kvd = m->kv_heads * d;
    *rows = h;
    *cols = h;
    if (!strcmp(base, "q"))
        *rows = m->heads * d; /* a·d: h unless head_dim says */
    else if (!strcmp(base, "attn_out"))
        *cols = m->heads * d;
    else if (!strcmp(base, "k") || !strcmp(base, "v"))
        *rows = kvd;
    else if (!strcmp(base, "mlp_gate") || !strcmp(base, "mlp_up"))
        *rows = m->ffn;
    else if (!strcmp(base, "mlp_down"))
        *cols = m->ffn;
}

/* GPT-2's Conv1D layers: weight (in, out_all) and bias (out_all), ours a block of
 * out_all's columns; c_attn holds q, k and v side by side (modeling_gpt2.py,
 * GPT2Attention.forward: query, key, value = c_attn(x).split(split_size, dim=2)). */
static void gpt2_linear(const pt_model *m, const char *base, bool weight, hf_map *out)
{
    int64_t rows, cols, kvd = m->kv_heads * pt_model_head_dim(m);
    hf_part *p = &out->part[0];
    linear_shape(m, base, &rows, &cols);
    int64_t all = rows;
    if (!strcmp(base, "q") || !strcmp(base, "k") || !strcmp(base, "v")) {
        int64_t qd = m->heads * pt_model_head_dim(m);
        all = qd + 2 * kvd;
        p->col0 = !strcmp(base, "q") ? 0 : !strcmp(base, "k") ? qd : qd + kvd;
    }
    out->parts = 1;
    p->how = HF_CONV1D;
    set_shape(&out->ours_ndim, out->ours_shape, rows, weight ? cols : 0);
    if (weight)
        set_shape(&p->ndim, p->shape, cols, all);
    else
        set_shape(&p->ndim, p->shape, all, 0);
}

/* Qwen3's q_norm and k_norm (d each) as our one qk_norm (2d): q's gain, then k's, each
 * permuted as one head of q or k is (HF_ROPE). */
static void qk_norm_map(const pt_model *m, int64_t layer, hf_map *out)
{
    int64_t d = pt_model_head_dim(m);
    set_shape(&out->ours_ndim, out->ours_shape, 2 * d, 0);
    out->parts = 2;
    for (int k = 0; k < 2; k++) {
        hf_part *p = &out->part[k];
        snprintf(p->hf, sizeof p->hf, "model.layers.%lld.self_attn.%c_norm.weight",
                 (long long)layer, "qk"[k]);
        p->how = HF_ROPE;
        p->head_dim = d;
        p->row0 = k * d;
        set_shape(&p->ndim, p->shape, d, 0);
    }
}

/* An MoE layer's "router.w" or "experts.<E>.{gate,up,down}.w" (rest, after the layer). */
static int moe_map(const pt_model *m, const hf_layout *l, int64_t layer, const char *rest,
                   const char *name, hf_map *out, pt_err *err)
{
    const char *const *n = l->family == HF_MIXTRAL ? mixtral_moe : qwen3_moe;
    const char *mlp = l->family == HF_MIXTRAL ? "block_sparse_moe" : "mlp";
    int64_t h = m->hidden, fe = m->moe.expert_ffn;
    hf_part *p = &out->part[0];
    if (!strcmp(rest, moe_ours[0])) {
        snprintf(p->hf, sizeof p->hf, "model.layers.%lld.%s.weight", (long long)layer, n[0]);
        same(out, HF_COPY, m->moe.experts, h);
        return 0;
    }
    const char *kind = NULL;
    int64_t e = strncmp(rest, "experts.", 8) ? -1 : index_of(rest + 8, m->moe.experts, &kind);
    int k = 0;
    for (int i = 1; e >= 0 && i < 4 && !k; i++)
        if (!strcmp(kind, moe_ours[i]))
            k = i;
    if (!k)
        return unknown(m, name, err);
    snprintf(p->hf, sizeof p->hf, "model.layers.%lld.%s.experts.%lld.%s.weight",
             (long long)layer, mlp, (long long)e, n[k]);
    same(out, HF_COPY, k == 3 ? h : fe, k == 3 ? fe : h);
    return 0;
}

static int layer_map(const pt_model *m, const hf_layout *l, const char *name, hf_map *out,
                     pt_err *err)
{
    const char *rest = NULL;
    int64_t layer = layer_of(m, name, &rest);
    bool llama = l->family != HF_GPT2, moe = layer >= 0 && pt_model_layer_moe(m, layer);
    if (layer >= 0 && llama && m->qk_norm && !strcmp(rest, "qk_norm.w")) {
        qk_norm_map(m, layer, out);
        return 0;
    }
    if (moe && llama && (!strcmp(rest, "router.w") || !strncmp(rest, "experts.", 8)))
        return moe_map(m, l, layer, rest, name, out, err);
    const char *dot = layer >= 0 ? strrchr(rest, '.') : NULL;
    if (!dot || (strcmp(dot, ".w") != 0 && strcmp(dot, ".b") != 0))
        return unknown(m, name, err);
    bool weight = dot[1] == 'w';
    size_t base_len = (size_t)(dot - rest);
    const hf_names *part = NULL;
    for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0] && !part; i++)
        if (strlen(layer_names[i].ours) == base_len &&
            !strncmp(rest, layer_names[i].ours, base_len))
            part = &layer_names[i];
    bool norm = part && !strncmp(part->ours, "norm", 4);
    const char *theirs = !part ? NULL : llama ? part->llama : part->gpt2;
    if (!theirs || (!weight && norm && m->norm != PT_NORM_LAYERNORM) ||
        (!weight && !norm && !m->bias) ||
        (!strcmp(part->ours, "mlp_gate") && m->act != PT_ACT_SWIGLU) ||
        (moe && !strncmp(part->ours, "mlp_", 4))) /* an MoE layer has experts instead */
        return unknown(m, name, err);
    hf_part *p = &out->part[0];
    if (!llama)
        snprintf(p->hf, sizeof p->hf, "%sh.%lld.%s.%s", l->prefix, (long long)layer, theirs,
                 weight ? "weight" : "bias");
    else
        snprintf(p->hf, sizeof p->hf, "model.layers.%lld.%s.%s", (long long)layer, theirs,
                 weight ? "weight" : "bias");
    int64_t rows, cols;
    if (norm) {
        same(out, HF_COPY, m->hidden, 0);
    } else if (!llama) {
        gpt2_linear(m, part->ours, weight, out);
    } else {
        linear_shape(m, part->ours, &rows, &cols);
        bool rope = !strcmp(part->ours, "q") || !strcmp(part->ours, "k");
        same(out, rope ? HF_ROPE : HF_COPY, rows, weight ? cols : 0);
        p->head_dim = pt_model_head_dim(m);
    }
    return 0;
}

int hf_map_of(const pt_model *m, const hf_layout *l, const char *name, hf_map *out,
              pt_err *err)
{
    memset(out, 0, sizeof *out);
    bool gpt2 = l->family == HF_GPT2;
    hf_part *p = &out->part[0];
    if (!strcmp(name, "wte") || (!strcmp(name, "lm_head.w") && !m->tied_embeddings)) {
        bool head = name[0] == 'l';
        snprintf(p->hf, sizeof p->hf, "%s%s", gpt2 && !head ? l->prefix : "",
                 head ? "lm_head.weight" : gpt2 ? "wte.weight" : "model.embed_tokens.weight");
        same(out, HF_COPY, l->vocab, m->hidden);
        out->ours_shape[0] = -1;
        return 0;
    }
    if (!strcmp(name, "wpe") && gpt2 && m->pos == PT_POS_LEARNED) {
        snprintf(p->hf, sizeof p->hf, "%swpe.weight", l->prefix);
        same(out, HF_COPY, m->seq, m->hidden);
        p->shape[0] = l->positions;
        return 0;
    }
    if (!strcmp(name, "final_norm.w") ||
        (!strcmp(name, "final_norm.b") && m->norm == PT_NORM_LAYERNORM)) {
        bool w = name[11] == 'w';
        if (gpt2)
            snprintf(p->hf, sizeof p->hf, "%sln_f.%s", l->prefix, w ? "weight" : "bias");
        else
            snprintf(p->hf, sizeof p->hf, "model.norm.%s", w ? "weight" : "bias");
        same(out, HF_COPY, m->hidden, 0);
        return 0;
    }
    return layer_map(m, l, name, out, err);
}

bool hf_row(const hf_map *mp, int64_t r, int *part, int64_t *at, int64_t *stride)
{
    int k = 0;
    while (k + 1 < mp->parts && r >= mp->part[k + 1].row0)
        k++;
    const hf_part *p = &mp->part[k];
    int64_t cols = mp->ours_ndim == 2 ? mp->ours_shape[1] : 1, j = r - p->row0;
    *part = k;
    *stride = 1;
    switch (p->how) {
    case HF_COPY:
        *at = j * cols;
        return j < p->shape[0];
    case HF_CONV1D:
        *at = p->col0 + j;
        *stride = p->ndim == 2 ? p->shape[1] : 1;
        return true;
    case HF_ROPE: {
        int64_t d = p->head_dim, head = j / d, i = j % d;
        *at = (head * d + (i % 2) * (d / 2) + i / 2) * cols;
        return true;
    }
    }
    return false;
}

/* ---- Our names -------------------------------------------------------------------------- */

int hf_param_names(const pt_model *m, char (**names)[48], int *n, pt_err *err)
{
    pt_param *t;
    int count;
    *names = NULL;
    *n = 0;
    if (pt_model_param_table(m, &t, &count, err))
        return -1;
    char(*v)[48] = malloc((size_t)(count > 0 ? count : 1) * sizeof *v);
    for (int i = 0; v && i < count; i++)
        snprintf(v[i], sizeof v[i], "%s", t[i].name);
    free(t);
    if (!v)
        return pt_err_set(err, "out of memory for %d parameter names", count);
    *names = v;
    *n = count;
    return 0;
}

/* ---- 16-bit floats ------------------------------------------------------------------------ */

static float f32_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float hf_bf16_to_f32(uint16_t h)
{
    return f32_of_bits((uint32_t)h << 16);
}

/* binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits (IEEE 754-2008, 3.6). */
float hf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) { /* zero or subnormal: man · 2^-24, exact in fp32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) /* infinity or NaN, payload kept */
        return f32_of_bits(sign | 0x7f800000u | man << 13);
    return f32_of_bits(sign | (exp + 112) << 23 | man << 13);
}

uint16_t hf_f32_to_bf16(float f)
{
    uint32_t u = bits_of_f32(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
        return (uint16_t)(u >> 16 | 0x40);
    u += 0x7fffu + (u >> 16 & 1); /* to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

uint16_t hf_f32_to_f16(float f)
{
    uint32_t u = bits_of_f32(f), ax = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)(u >> 16 & 0x8000);
    if (ax > 0x7f800000u) /* NaN */
        return sign | 0x7e00 | (uint16_t)(ax >> 13 & 0x3ff);
    if (ax >= 0x477ff000u) /* from 65520 (half way past 65504, the largest) up: infinity */
        return sign | 0x7c00;
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal (or 2^-14 itself, rounded up) */
        float v = f32_of_bits(ax) * 0x1p24f; /* exact: a power of two */
        return sign | (uint16_t)nearbyintf(v); /* the default mode: to nearest, ties even */
    }
    uint32_t h = ((ax >> 23) - 112) << 10 | (ax >> 13 & 0x3ff), rest = ax & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is right, and stays below infinity here */
    return sign | (uint16_t)h;
}
