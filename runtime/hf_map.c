/*
 * The map between our parameter tensors and Hugging Face's GPT-2 and LLaMA tensors:
 * which of their tensors holds each of ours and how its elements are arranged there
 * (hf_internal.h). Reading a Hugging Face directory (hf.c) and exporting a checkpoint
 * (hf_export.c) both go through hf_map_of and hf_row, element by element in opposite
 * directions. Also the 16-bit float conversions both need.
 *
 * Names follow transformers' modeling files: models/gpt2/modeling_gpt2.py (GPT2Model:
 * wte, wpe, h.L.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_f;
 * every linear layer a Conv1D) and models/llama/modeling_llama.py (model.embed_tokens,
 * model.layers.L.{input_layernorm, self_attn.{q,k,v,o}_proj,
 * post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm, lm_head).
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

int hf_family_of(const pt_model *m, hf_family *out, pt_err *err)
{
    if (m->qk_norm)
        return pt_err_set(err, "model '%s': its q/k norms (qk_norm, Qwen3's q_norm and k_norm) "
                          "have no Hugging Face mapping here yet", m->name);
    if (m->norm == PT_NORM_LAYERNORM && m->act == PT_ACT_GELU && m->pos == PT_POS_LEARNED) {
        if (!m->bias)
            return pt_err_set(err, "model '%s': bias false, but GPT-2 (layernorm, gelu, "
                              "learned positions) has biases in every linear layer", m->name);
        if (m->kv_heads != m->heads)
            return pt_err_set(err, "model '%s': kv_heads %lld, but GPT-2 has no grouped-query "
                              "attention (heads %lld)", m->name, (long long)m->kv_heads,
                              (long long)m->heads);
        *out = HF_GPT2;
        return 0;
    }
    if (m->norm == PT_NORM_RMSNORM && m->act == PT_ACT_SWIGLU && m->pos == PT_POS_ROPE) {
        *out = HF_LLAMA;
        return 0;
    }
    return pt_err_set(err, "model '%s': norm %s, activation %s, positions %s fit neither "
                      "GPT-2 (layernorm, gelu, learned) nor LLaMA (rmsnorm, swiglu, rope)",
                      m->name, norm_names[m->norm], act_names[m->act], pos_names[m->pos]);
}

/* ---- The map --------------------------------------------------------------------------- */

/* A tensor of a layer, by its base name (before ".w" or ".b"), with its names in the two
 * families (NULL: the family has none). */
typedef struct {
    const char *ours, *gpt2, *llama;
} hf_part;

static const hf_part hf_parts[] = {
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

static void set_shape(int *ndim, int64_t *shape, int64_t rows, int64_t cols)
{
    *ndim = cols ? 2 : 1;
    shape[0] = rows;
    shape[1] = cols;
}

/* Ours and theirs the same shape, row for row. */
static void same(hf_map *out, hf_how how, int64_t rows, int64_t cols)
{
    out->how = how;
    set_shape(&out->ours_ndim, out->ours_shape, rows, cols);
    set_shape(&out->ndim, out->shape, rows, cols);
}

static int unknown(const pt_model *m, const char *name, pt_err *err)
{
    return pt_err_set(err, "model '%s' has no parameter '%.64s' (or no Hugging Face tensor "
                      "for it)", m->name, name);
}

/* The layer index of "layers.<L>.<rest>" (below m->layers), or -1; *rest after its dot. */
static int64_t layer_of(const pt_model *m, const char *name, const char **rest)
{
    if (strncmp(name, "layers.", 7) != 0)
        return -1;
    const char *p = name + 7;
    if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '.'))
        return -1;
    char *end;
    errno = 0;
    long long l = strtoll(p, &end, 10);
    if (errno || *end != '.' || l >= m->layers)
        return -1;
    *rest = end + 1;
    return l;
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
    linear_shape(m, base, &rows, &cols);
    int64_t all = rows;
    if (!strcmp(base, "q") || !strcmp(base, "k") || !strcmp(base, "v")) {
        int64_t qd = m->heads * pt_model_head_dim(m);
        all = qd + 2 * kvd;
        out->col0 = !strcmp(base, "q") ? 0 : !strcmp(base, "k") ? qd : qd + kvd;
    }
    out->how = HF_CONV1D;
    set_shape(&out->ours_ndim, out->ours_shape, rows, weight ? cols : 0);
    if (weight)
        set_shape(&out->ndim, out->shape, cols, all);
    else
        set_shape(&out->ndim, out->shape, all, 0);
}

static int layer_map(const pt_model *m, const hf_layout *l, const char *name, hf_map *out,
                     pt_err *err)
{
    const char *rest = NULL;
    int64_t layer = layer_of(m, name, &rest);
    const char *dot = layer >= 0 ? strrchr(rest, '.') : NULL;
    if (!dot || (strcmp(dot, ".w") != 0 && strcmp(dot, ".b") != 0))
        return unknown(m, name, err);
    bool weight = dot[1] == 'w';
    size_t base_len = (size_t)(dot - rest);
    const hf_part *part = NULL;
    for (size_t i = 0; i < sizeof hf_parts / sizeof hf_parts[0] && !part; i++)
        if (strlen(hf_parts[i].ours) == base_len && !strncmp(rest, hf_parts[i].ours, base_len))
            part = &hf_parts[i];
    bool norm = part && !strncmp(part->ours, "norm", 4);
    const char *theirs = !part ? NULL : l->family == HF_GPT2 ? part->gpt2 : part->llama;
    if (!theirs || (!weight && norm && m->norm != PT_NORM_LAYERNORM) ||
        (!weight && !norm && !m->bias) ||
        (!strcmp(part->ours, "mlp_gate") && m->act != PT_ACT_SWIGLU))
        return unknown(m, name, err);
    if (l->family == HF_GPT2)
        snprintf(out->hf, sizeof out->hf, "%sh.%lld.%s.%s", l->prefix, (long long)layer, theirs,
                 weight ? "weight" : "bias");
    else
        snprintf(out->hf, sizeof out->hf, "model.layers.%lld.%s.%s", (long long)layer, theirs,
                 weight ? "weight" : "bias");
    int64_t rows, cols;
    if (norm) {
        same(out, HF_COPY, m->hidden, 0);
    } else if (l->family == HF_GPT2) {
        gpt2_linear(m, part->ours, weight, out);
    } else {
        linear_shape(m, part->ours, &rows, &cols);
        bool rope = !strcmp(part->ours, "q") || !strcmp(part->ours, "k");
        same(out, rope ? HF_ROPE : HF_COPY, rows, weight ? cols : 0);
        out->head_dim = pt_model_head_dim(m);
    }
    return 0;
}

int hf_map_of(const pt_model *m, const hf_layout *l, const char *name, hf_map *out,
              pt_err *err)
{
    memset(out, 0, sizeof *out);
    bool gpt2 = l->family == HF_GPT2;
    if (!strcmp(name, "wte") || (!strcmp(name, "lm_head.w") && !m->tied_embeddings)) {
        bool head = name[0] == 'l';
        snprintf(out->hf, sizeof out->hf, "%s%s", gpt2 && !head ? l->prefix : "",
                 head ? "lm_head.weight" : gpt2 ? "wte.weight" : "model.embed_tokens.weight");
        same(out, HF_COPY, l->vocab, m->hidden);
        out->ours_shape[0] = -1;
        return 0;
    }
    if (!strcmp(name, "wpe") && gpt2 && m->pos == PT_POS_LEARNED) {
        snprintf(out->hf, sizeof out->hf, "%swpe.weight", l->prefix);
        same(out, HF_COPY, m->seq, m->hidden);
        out->shape[0] = l->positions;
        return 0;
    }
    if (!strcmp(name, "final_norm.w") ||
        (!strcmp(name, "final_norm.b") && m->norm == PT_NORM_LAYERNORM)) {
        bool w = name[11] == 'w';
        if (gpt2)
            snprintf(out->hf, sizeof out->hf, "%sln_f.%s", l->prefix, w ? "weight" : "bias");
        else
            snprintf(out->hf, sizeof out->hf, "model.norm.%s", w ? "weight" : "bias");
        same(out, HF_COPY, m->hidden, 0);
        return 0;
    }
    return layer_map(m, l, name, out, err);
}

bool hf_row(const hf_map *mp, int64_t r, int64_t *at, int64_t *stride)
{
    int64_t cols = mp->ours_ndim == 2 ? mp->ours_shape[1] : 1;
    *stride = 1;
    switch (mp->how) {
    case HF_COPY:
        *at = r * cols;
        return r < mp->shape[0];
    case HF_CONV1D:
        *at = mp->col0 + r;
        *stride = mp->ndim == 2 ? mp->shape[1] : 1;
        return true;
    case HF_ROPE: {
        int64_t d = mp->head_dim, head = r / d, j = r % d;
        *at = (head * d + (j % 2) * (d / 2) + j / 2) * cols;
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
