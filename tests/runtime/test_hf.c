/*
 * Tests of Hugging Face directories (runtime/hf.c, hf_map.c, hf_export.c) and of
 * tools/ptconvert.c: the 16-bit float conversions against known values and every bit
 * pattern; a tiny GPT-2, a tiny LLaMA (grouped-query attention, two shards and an
 * index) and a tiny Qwen3 (q/k norms, heads wider than h/a) written here with random
 * F32, F16 and BF16 tensors, opened with pt_hf_open and every element of every tensor
 * checked against expectations computed here from transformers' conventions (Conv1D
 * transposes, c_attn split into q, k and v, the padded vocabulary's rows zero, the RoPE
 * row permutation of q, k and Qwen3's q_norm and k_norm — also checked as a function:
 * attention scores of Hugging Face's rotate-half RoPE, after the q/k norms, against our
 * kernel's); the families models fall in, a few names of each mapped literally
 * (Mixtral's and Qwen3-MoE's routers and experts among them), and what a family cannot
 * say refused naming the field; each config.json mismatch refused naming the field and
 * both values; missing, misshapen and mistyped tensors refused naming the file and
 * tensor; and the round trip for GPT-2, LLaMA, Qwen3, Mixtral and Qwen3-MoE: a
 * checkpoint step folder of ours written here, converted by ptconvert (f32, bf16, f16),
 * opened with pt_hf_open and compared, with ptconvert's refusals.
 *   usage: test_hf SCRATCH_DIR PATH/TO/ptconvert
 */
#include "check.h"
#include "hf_internal.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char scratch[2048];
static const char *ptconvert;

/* snprintf into an array, checked not to be cut */
#define PATHF(buf, ...) CHECK(snprintf(buf, sizeof buf, __VA_ARGS__) < (int)sizeof buf)

static const char *in_scratch(char *buf, const char *name)
{
    snprintf(buf, 4096, "%s/%s", scratch, name);
    return buf;
}

static void make_dir(const char *path)
{
    CHECK(mkdir(path, 0777) == 0 || errno == EEXIST);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (fp) {
        fputs(text, fp);
        fclose(fp);
    }
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- Random tensors of a Hugging Face directory ------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float frand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 40) / (double)(1 << 24) * 2.0 - 1.0);
}

typedef struct {
    char name[128];
    char dtype[8];
    int ndim;
    int64_t shape[2];
    int64_t n;
    float *val;     /* the values as they read back: rounded to dtype */
    void *raw;      /* what the file holds */
} htensor;

typedef struct {
    htensor t[320];
    int n;
} hset;

static htensor *hadd(hset *s, const char *name, const char *dtype, int64_t rows, int64_t cols)
{
    if (s->n == (int)(sizeof s->t / sizeof s->t[0])) {
        fprintf(stderr, "test: more than %d tensors\n", s->n);
        exit(2);
    }
    htensor *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->n = rows * (cols ? cols : 1);
    t->val = malloc((size_t)t->n * sizeof(float) + 4);
    t->raw = malloc((size_t)t->n * 4 + 4);
    for (int64_t i = 0; i < t->n; i++) {
        float v = frand();
        if (!strcmp(dtype, "F32")) {
            ((float *)t->raw)[i] = v;
            t->val[i] = v;
        } else if (!strcmp(dtype, "BF16")) {
            ((uint16_t *)t->raw)[i] = hf_f32_to_bf16(v);
            t->val[i] = hf_bf16_to_f32(((uint16_t *)t->raw)[i]);
        } else {
            ((uint16_t *)t->raw)[i] = hf_f32_to_f16(v);
            t->val[i] = hf_f16_to_f32(((uint16_t *)t->raw)[i]);
        }
    }
    return t;
}

static const htensor *hget(const hset *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->t[i].name, name))
            return &s->t[i];
    fprintf(stderr, "test: no tensor '%s' in the set\n", name);
    exit(2);
}

static void hfree(hset *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->t[i].val);
        free(s->t[i].raw);
    }
    s->n = 0;
}

/* Writes tensors [from, to) of s to path, leaving out `skip` (NULL: none); `bad` (NULL:
 * none) is written with the wrong shape or dtype ("shape" or "dtype"). */
static void hwrite(const hset *s, const char *path, int from, int to, const char *skip,
                   const char *bad, const char *how)
{
    pt_st_tensor t[320];
    int n = 0;
    static int32_t ints[4096];
    for (int i = from; i < to; i++) {
        const htensor *h = &s->t[i];
        if (skip && !strcmp(h->name, skip))
            continue;
        pt_st_tensor *o = &t[n++];
        memset(o, 0, sizeof *o);
        snprintf(o->name, sizeof o->name, "%s", h->name);
        snprintf(o->dtype, sizeof o->dtype, "%s", h->dtype);
        o->ndim = h->ndim;
        o->shape[0] = h->shape[0];
        o->shape[1] = h->shape[1];
        o->data = h->raw;
        o->bytes = (size_t)h->n * (strcmp(h->dtype, "F32") ? 2 : 4);
        if (bad && !strcmp(h->name, bad) && !strcmp(how, "shape")) { /* transposed */
            o->shape[0] = h->shape[1];
            o->shape[1] = h->shape[0];
        }
        if (bad && !strcmp(h->name, bad) && !strcmp(how, "dtype")) {
            snprintf(o->dtype, sizeof o->dtype, "I32");
            o->data = ints;
            o->bytes = (size_t)h->n * 4;
        }
    }
    pt_err err = {{0}};
    int rc = pt_st_write(path, t, n, NULL, NULL, 0, &err);
    if (rc != 0)
        fprintf(stderr, "test: %s\n", err.msg);
    CHECK(rc == 0);
}

/* config.json of dir: `base` with key set to the JSON value `value` ("DELETE" removes
 * it; key NULL: as it is). */
static void write_config(const char *dir, const char *base, const char *key, const char *value)
{
    json_error_t je;
    json_t *c = json_loads(base, 0, &je);
    CHECK(c != NULL);
    if (key && !strcmp(value, "DELETE"))
        json_object_del(c, key);
    else if (key)
        json_object_set_new(c, key, json_loads(value, JSON_DECODE_ANY, &je));
    char path[4096];
    PATHF(path, "%s/config.json", dir);
    char *text = json_dumps(c, JSON_INDENT(2));
    write_text(path, text);
    free(text);
    json_decref(c);
}

/* `base` with key set to the JSON value `value` (as write_config), as a malloc'd text. */
static char *config_with(const char *base, const char *key, const char *value)
{
    json_error_t je;
    json_t *c = json_loads(base, 0, &je);
    CHECK(c != NULL);
    json_object_set_new(c, key, json_loads(value, JSON_DECODE_ANY, &je));
    char *text = json_dumps(c, 0);
    json_decref(c);
    return text;
}

/* ---- Expected tensors, from transformers' conventions ----------------------------------- */

/* Copied row for row; our rows past theirs zero (rows: ours). */
static float *expect_copy(const htensor *t, int64_t rows)
{
    int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
    float *e = calloc((size_t)(rows * cols) + 1, sizeof *e);
    for (int64_t r = 0; r < rows && r < t->shape[0]; r++)
        memcpy(e + r * cols, t->val + r * cols, (size_t)cols * sizeof *e);
    return e;
}

/* GPT-2's Conv1D (in, all): our (out, in) is columns [col0, col0 + out) transposed; a
 * bias (all) gives elements [col0, col0 + out). */
static float *expect_conv1d(const htensor *t, int64_t col0, int64_t out)
{
    if (t->ndim == 1) {
        float *e = malloc((size_t)out * sizeof *e);
        for (int64_t o = 0; o < out; o++)
            e[o] = t->val[col0 + o];
        return e;
    }
    int64_t in = t->shape[0], all = t->shape[1];
    float *e = malloc((size_t)(out * in) * sizeof *e);
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++)
            e[o * in + i] = t->val[i * all + col0 + o];
    return e;
}

/* convert_llama_weights_to_hf.py's permute, undone: their row p·d/2 + i of a head is our
 * row 2i + p. */
static float *expect_rope(const htensor *t, int64_t d)
{
    int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
    float *e = malloc((size_t)(rows * cols) * sizeof *e);
    for (int64_t head = 0; head < rows / d; head++)
        for (int64_t i = 0; i < d / 2; i++)
            for (int64_t p = 0; p < 2; p++)
                for (int64_t c = 0; c < cols; c++)
                    e[(head * d + 2 * i + p) * cols + c] =
                        t->val[(head * d + p * (d / 2) + i) * cols + c];
    return e;
}

/* Reads our tensor whole, row by row and in pieces of 7 elements, each equal to e
 * (which it frees). */
static void check_tensor(pt_wsrc *s, const char *name, int64_t rows, int64_t cols, float *e)
{
    int64_t shape[2] = {rows, cols}, n = rows * (cols ? cols : 1), row = cols ? cols : 1;
    float *got = malloc((size_t)n * sizeof *got + 4);
    pt_err err = {{0}};
    int bad = 0;
    int rc = s->read(s, name, cols ? 2 : 1, shape, 0, n, got, &err);
    if (rc)
        fprintf(stderr, "%s: %s\n", name, err.msg);
    CHECK(rc == 0);
    for (int64_t i = 0; rc == 0 && i < n; i++)
        bad += got[i] != e[i];
    memset(got, 0xff, (size_t)n * sizeof *got);
    for (int64_t r = 0; rc == 0 && r < rows; r++)
        rc = s->read(s, name, cols ? 2 : 1, shape, r * row, row, got + r * row, &err);
    for (int64_t i = 0; rc == 0 && i < n; i++)
        bad += got[i] != e[i];
    for (int64_t lo = 0; rc == 0 && lo < n; lo += 7) {
        int64_t k = n - lo < 7 ? n - lo : 7;
        float piece[7];
        rc = s->read(s, name, cols ? 2 : 1, shape, lo, k, piece, &err);
        for (int64_t i = 0; rc == 0 && i < k; i++)
            bad += piece[i] != e[lo + i];
    }
    CHECK(rc == 0);
    if (bad)
        fprintf(stderr, "%s: %d elements differ\n", name, bad);
    CHECK(bad == 0);
    free(got);
    free(e);
}

/* ---- 16-bit floats ---------------------------------------------------------------------------- */

static void test_f16(void)
{
    CHECK_INT(hf_f32_to_f16(1.0f), 0x3c00);
    CHECK_INT(hf_f32_to_f16(-2.0f), 0xc000);
    CHECK_INT(hf_f32_to_f16(65504.0f), 0x7bff);
    CHECK_INT(hf_f32_to_f16(65519.0f), 0x7bff);
    CHECK_INT(hf_f32_to_f16(65520.0f), 0x7c00);       /* half way: to even, infinity */
    CHECK_INT(hf_f32_to_f16(1e10f), 0x7c00);
    CHECK_INT(hf_f32_to_f16(-INFINITY), 0xfc00);
    CHECK_INT(hf_f32_to_f16(0x1p-14f), 0x0400);       /* the smallest normal */
    CHECK_INT(hf_f32_to_f16(0x1p-24f), 0x0001);       /* the smallest subnormal */
    CHECK_INT(hf_f32_to_f16(0x1p-25f), 0x0000);       /* half of it: to even, zero */
    CHECK_INT(hf_f32_to_f16(0x1.8p-24f), 0x0002);     /* 1.5 of it: to even, 2 */
    CHECK_INT(hf_f32_to_f16(0x1.0002p-25f), 0x0001);  /* just over half: up */
    CHECK_INT(hf_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie: even */
    CHECK_INT(hf_f32_to_f16(1.0f + 0x3p-11f), 0x3c02); /* tie: even, up */
    CHECK_INT(hf_f32_to_f16(1.0f + 0x1.2p-11f), 0x3c01);
    CHECK_INT(hf_f32_to_f16(0x1.ffcp-15f), 0x0400);   /* rounds up into the normals */
    CHECK(hf_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(hf_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(hf_f16_to_f32(0x8000) == 0.0f && signbit(hf_f16_to_f32(0x8000)));
    CHECK(isinf(hf_f16_to_f32(0x7c00)));
    CHECK(isnan(hf_f16_to_f32(0x7e00)) && isnan(hf_f16_to_f32(0x7c01)));
    CHECK((hf_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (hf_f32_to_f16(NAN) & 0x3ff) != 0);
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        uint16_t back = hf_f32_to_f16(hf_f16_to_f32((uint16_t)h));
        bad += nan ? !((back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h;
    }
    CHECK_INT(bad, 0);
}

static void test_bf16(void)
{
    CHECK_INT(hf_f32_to_bf16(1.0f), 0x3f80);
    CHECK_INT(hf_f32_to_bf16(-2.0f), 0xc000);
    CHECK_INT(hf_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  /* tie: even */
    CHECK_INT(hf_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);  /* tie: even, up */
    CHECK_INT(hf_f32_to_bf16(1.0f + 0x1.2p-8f), 0x3f81);
    CHECK_INT(hf_f32_to_bf16(FLT_MAX), 0x7f80);         /* rounds to infinity */
    CHECK(isnan(hf_bf16_to_f32(hf_f32_to_bf16(NAN))));
    CHECK(hf_bf16_to_f32(0x3f80) == 1.0f && hf_bf16_to_f32(0x0001) == 0x1p-133f);
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        bool nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
        uint16_t back = hf_f32_to_bf16(hf_bf16_to_f32((uint16_t)h));
        bad += nan ? !isnan(hf_bf16_to_f32(back)) : back != h;
    }
    CHECK_INT(bad, 0);
}

/* ---- Our names against the runtime's parameter count ------------------------------------------ */

static pt_model gpt2_spec(void)
{
    pt_model m = {.layers = 2, .hidden = 8, .heads = 2, .kv_heads = 2, .ffn = 32, .vocab = 200,
                  .seq = 6, .norm = PT_NORM_LAYERNORM, .act = PT_ACT_GELU,
                  .pos = PT_POS_LEARNED, .tied_embeddings = true, .bias = true, .dropout = true};
    snprintf(m.name, sizeof m.name, "hf-gpt2");
    return m;
}

static pt_model llama_spec(void)
{
    pt_model m = {.layers = 2, .hidden = 32, .heads = 4, .kv_heads = 2, .ffn = 48, .vocab = 100,
                  .seq = 8, .norm = PT_NORM_RMSNORM, .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE,
                  .tied_embeddings = false, .bias = false};
    snprintf(m.name, sizeof m.name, "hf-llama");
    return m;
}

/* Whole shape of our tensor `name` (the vocabulary padded as on one rank). */
static void ours_shape(const pt_model *m, const char *name, int64_t shape[2])
{
    hf_layout l = {.family = HF_GPT2, .prefix = "", .vocab = m->vocab, .positions = m->seq};
    hf_family_of(m, &l.family, NULL); /* neither (ALiBi): GPT-2's names, no wpe */
    hf_map mp;
    pt_err err;
    CHECK(hf_map_of(m, &l, name, &mp, &err) == 0);
    shape[0] = mp.ours_shape[0] < 0 ? pt_vocab_padded(m, 1) : mp.ours_shape[0];
    shape[1] = mp.ours_shape[1];
}

/* The names cover the model: their elements add up to the planner's count of one rank's
 * whole model (planner/params.c, with experts planner/layout.c's, which
 * runtime/param_table.c's table is checked against). */
static void test_names(const pt_model *m)
{
    char(*names)[48] = NULL;
    int n = 0;
    pt_err err;
    CHECK(hf_param_names(m, &names, &n, &err) == 0);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        int64_t shape[2];
        ours_shape(m, names[i], shape);
        total += shape[0] * (shape[1] ? shape[1] : 1);
    }
    pt_layout one;
    pt_layout_default(&one);
    CHECK_INT(total, m->moe.experts ? pt_rank_params(m, &one, 0, NULL)
                                    : pt_params_part(m, 1, 1, m->layers, true, true));
    free(names);
}

/* ---- A tiny GPT-2 ------------------------------------------------------------------------------- */

static const char gpt2_config[] =
    "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"n_embd\": 8, "
    "\"n_layer\": 2, \"n_head\": 2, \"n_inner\": null, \"vocab_size\": 190, "
    "\"n_positions\": 10, \"activation_function\": \"gelu_new\", "
    "\"layer_norm_epsilon\": 1e-05, \"resid_pdrop\": 0.1}";

/* GPT-2's tensors (prefix "transformer." or ""), in a mix of dtypes, with one the model
 * does not read (the causal-mask buffer older files carry). */
static void gpt2_set(hset *s, const char *p)
{
    char n[128];
#define GN(fmt, ...) (snprintf(n, sizeof n, "%s" fmt, p, __VA_ARGS__), n)
    hadd(s, GN("%s", "wte.weight"), "F32", 190, 8);
    hadd(s, GN("%s", "wpe.weight"), "BF16", 10, 8);
    for (int l = 0; l < 2; l++) {
        hadd(s, GN("h.%d.ln_1.weight", l), "F32", 8, 0);
        hadd(s, GN("h.%d.ln_1.bias", l), "F16", 8, 0);
        hadd(s, GN("h.%d.attn.bias", l), "F32", 1, 4);
        hadd(s, GN("h.%d.attn.c_attn.weight", l), "BF16", 8, 24);
        hadd(s, GN("h.%d.attn.c_attn.bias", l), "F32", 24, 0);
        hadd(s, GN("h.%d.attn.c_proj.weight", l), "F16", 8, 8);
        hadd(s, GN("h.%d.attn.c_proj.bias", l), "BF16", 8, 0);
        hadd(s, GN("h.%d.ln_2.weight", l), "F32", 8, 0);
        hadd(s, GN("h.%d.ln_2.bias", l), "F32", 8, 0);
        hadd(s, GN("h.%d.mlp.c_fc.weight", l), "F32", 8, 32);
        hadd(s, GN("h.%d.mlp.c_fc.bias", l), "F32", 32, 0);
        hadd(s, GN("h.%d.mlp.c_proj.weight", l), "BF16", 32, 8);
        hadd(s, GN("h.%d.mlp.c_proj.bias", l), "F32", 8, 0);
    }
    hadd(s, GN("%s", "ln_f.weight"), "F32", 8, 0);
    hadd(s, GN("%s", "ln_f.bias"), "F32", 8, 0);
#undef GN
}

/* Every tensor of the GPT-2 model against s (names with prefix p). */
static void check_gpt2(pt_wsrc *src, const hset *s, const char *p)
{
    char n[128], ours[64];
#define GN(fmt, ...) (snprintf(n, sizeof n, "%s" fmt, p, __VA_ARGS__), hget(s, n))
#define OURS(fmt, l) (snprintf(ours, sizeof ours, "layers.%d." fmt, l), ours)
    check_tensor(src, "wte", 256, 8, expect_copy(GN("%s", "wte.weight"), 256));
    check_tensor(src, "wpe", 6, 8, expect_copy(GN("%s", "wpe.weight"), 6));
    for (int l = 0; l < 2; l++) {
        check_tensor(src, OURS("norm1.w", l), 8, 0, expect_copy(GN("h.%d.ln_1.weight", l), 8));
        check_tensor(src, OURS("norm1.b", l), 8, 0, expect_copy(GN("h.%d.ln_1.bias", l), 8));
        for (int j = 0; j < 3; j++) { /* q, k, v: the three column blocks of c_attn */
            snprintf(ours, sizeof ours, "layers.%d.%c.w", l, "qkv"[j]);
            check_tensor(src, ours, 8, 8,
                         expect_conv1d(GN("h.%d.attn.c_attn.weight", l), 8 * j, 8));
            snprintf(ours, sizeof ours, "layers.%d.%c.b", l, "qkv"[j]);
            check_tensor(src, ours, 8, 0, expect_conv1d(GN("h.%d.attn.c_attn.bias", l), 8 * j, 8));
        }
        check_tensor(src, OURS("attn_out.w", l), 8, 8,
                     expect_conv1d(GN("h.%d.attn.c_proj.weight", l), 0, 8));
        check_tensor(src, OURS("attn_out.b", l), 8, 0,
                     expect_copy(GN("h.%d.attn.c_proj.bias", l), 8));
        check_tensor(src, OURS("norm2.w", l), 8, 0, expect_copy(GN("h.%d.ln_2.weight", l), 8));
        check_tensor(src, OURS("norm2.b", l), 8, 0, expect_copy(GN("h.%d.ln_2.bias", l), 8));
        check_tensor(src, OURS("mlp_up.w", l), 32, 8,
                     expect_conv1d(GN("h.%d.mlp.c_fc.weight", l), 0, 32));
        check_tensor(src, OURS("mlp_up.b", l), 32, 0,
                     expect_copy(GN("h.%d.mlp.c_fc.bias", l), 32));
        check_tensor(src, OURS("mlp_down.w", l), 8, 32,
                     expect_conv1d(GN("h.%d.mlp.c_proj.weight", l), 0, 8));
        check_tensor(src, OURS("mlp_down.b", l), 8, 0,
                     expect_copy(GN("h.%d.mlp.c_proj.bias", l), 8));
    }
    check_tensor(src, "final_norm.w", 8, 0, expect_copy(GN("%s", "ln_f.weight"), 8));
    check_tensor(src, "final_norm.b", 8, 0, expect_copy(GN("%s", "ln_f.bias"), 8));
#undef GN
#undef OURS
}

/* pt_hf_open fails with a message holding want (and want2 when not NULL). */
static void open_fails(const char *dir, const pt_model *m, const char *want, const char *want2)
{
    pt_wsrc *src = (pt_wsrc *)&src;
    pt_err err = {{0}};
    CHECK(pt_hf_open(dir, m, &src, &err) != 0);
    CHECK(src == NULL);
    CHECK_STR_HAS(err.msg, want);
    if (want2)
        CHECK_STR_HAS(err.msg, want2);
}

static pt_wsrc *open_ok(const char *dir, const pt_model *m)
{
    pt_wsrc *src = NULL;
    pt_err err = {{0}};
    int rc = pt_hf_open(dir, m, &src, &err);
    if (rc)
        fprintf(stderr, "pt_hf_open %s: %s\n", dir, err.msg);
    CHECK(rc == 0 && src != NULL);
    return rc == 0 ? src : NULL;
}

/* A read that fails naming `want`. */
static void read_fails(pt_wsrc *src, const char *name, int ndim, int64_t rows, int64_t cols,
                       int64_t lo, int64_t count, const char *want)
{
    int64_t shape[2] = {rows, cols};
    float buf[64];
    pt_err err = {{0}};
    CHECK(src->read(src, name, ndim, shape, lo, count, buf, &err) != 0);
    CHECK_STR_HAS(err.msg, want);
}

/* A directory of config.json and model.safetensors from s (skip, bad, how: hwrite's). */
static void gpt2_dir(const char *dir, const hset *s, const char *config, const char *skip,
                     const char *bad, const char *how)
{
    char path[4096];
    make_dir(dir);
    if (config)
        write_config(dir, config, NULL, NULL);
    PATHF(path, "%s/model.safetensors", dir);
    hwrite(s, path, 0, s->n, skip, bad, how);
}

static void test_gpt2(void)
{
    pt_model m = gpt2_spec();
    char dir[4096];
    hset s = {0};
    /* save_pretrained's names, then the original files' (no "transformer.") */
    const char *prefixes[] = {"transformer.", ""};
    for (int k = 0; k < 2; k++) {
        gpt2_set(&s, prefixes[k]);
        gpt2_dir(in_scratch(dir, k ? "gpt2-plain" : "gpt2"), &s, gpt2_config, NULL, NULL, NULL);
        pt_wsrc *src = open_ok(dir, &m);
        if (src) {
            check_gpt2(src, &s, prefixes[k]);
            read_fails(src, "layers.2.q.w", 2, 8, 8, 0, 64, "no parameter 'layers.2.q.w'");
            read_fails(src, "lm_head.w", 2, 256, 8, 0, 64, "no parameter 'lm_head.w'");
            read_fails(src, "layers.0.mlp_gate.w", 2, 32, 8, 0, 64, "mlp_gate");
            read_fails(src, "layers.0.q.b.w", 2, 8, 8, 0, 64, "no parameter");
            read_fails(src, "wte", 2, 100, 8, 0, 64, "(>= 200, 8)");
            read_fails(src, "layers.0.q.w", 2, 8, 9, 0, 64, "(8, 9)");
            read_fails(src, "layers.0.q.w", 1, 64, 0, 0, 64, "1 dimensions");
            read_fails(src, "layers.0.q.w", 2, 8, 8, 60, 10, "[60, 70) are outside its 64");
            read_fails(src, "layers.0.q.w", 2, 8, 8, -1, 1, "outside");
            src->close(src);
        }
        hfree(&s);
    }

    /* config.json against the model: each mismatch names the field and both values */
    static const char *const cases[][4] = {
        {"n_embd", "16", "n_embd = 16", "hidden = 8"},
        {"n_layer", "3", "n_layer = 3", "layers = 2"},
        {"n_head", "4", "n_head = 4", "heads = 2"},
        {"n_inner", "64", "n_inner = 64", "ffn = 32"},
        {"vocab_size", "300", "vocab_size = 300", "vocab = 200"},
        {"n_positions", "4", "n_positions = 4", "seq = 6"},
        {"activation_function", "\"gelu\"", "activation_function = 'gelu'", "gelu_new"},
        {"layer_norm_epsilon", "1e-6", "layer_norm_epsilon = 1e-06", "1e-05"},
        {"tie_word_embeddings", "false", "tie_word_embeddings = false", "tied_embeddings = true"},
        {"scale_attn_by_inverse_layer_idx", "true", "scale_attn_by_inverse_layer_idx", NULL},
        {"model_type", "\"mistral\"", "model_type = 'mistral'",
         "only gpt2, llama, qwen3, mixtral and qwen3_moe are read"},
        {"model_type", "DELETE", "no field 'model_type'", NULL},
        {"model_type", "\"llama\"", "model_type = 'llama'", "GPT-2 shaped"},
        {"n_embd", "\"8\"", "field 'n_embd': expected an integer", NULL},
    };
    gpt2_set(&s, "transformer.");
    gpt2_dir(in_scratch(dir, "gpt2-bad"), &s, gpt2_config, NULL, NULL, NULL);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_config(dir, gpt2_config, cases[i][0], cases[i][1]);
        open_fails(dir, &m, cases[i][2], cases[i][3]);
        open_fails(dir, &m, "gpt2-bad/config.json", NULL);
    }
    write_config(dir, gpt2_config, "n_inner", "32"); /* the default, said */
    pt_wsrc *src = open_ok(dir, &m);
    if (src)
        src->close(src);
    pt_model nobias = m;
    nobias.bias = false;
    open_fails(dir, &nobias, "model_type = 'gpt2'", "bias false");
    pt_model qk = m; /* q/k norms are Qwen3's, not GPT-2's */
    qk.qk_norm = true;
    open_fails(dir, &qk, "model_type = 'gpt2'", "qk_norm, but GPT-2 has no q/k norms");
    char path[4096];
    PATHF(path, "%s/config.json", dir);
    write_text(path, "{\"model_type\": \"gpt2\",\n \"n_embd\": }");
    open_fails(dir, &m, "gpt2-bad/config.json:2:", NULL);

    /* the tensors: missing, misshapen, mistyped; the files missing */
    gpt2_dir(in_scratch(dir, "gpt2-missing"), &s, gpt2_config, "transformer.h.1.mlp.c_fc.bias",
             NULL, NULL);
    open_fails(dir, &m, "gpt2-missing/model.safetensors: no tensor "
               "'transformer.h.1.mlp.c_fc.bias'", NULL);
    gpt2_dir(in_scratch(dir, "gpt2-shape"), &s, gpt2_config, NULL,
             "transformer.h.0.attn.c_attn.weight", "shape");
    open_fails(dir, &m, "gpt2-shape/model.safetensors: tensor 'transformer.h.0.attn.c_attn."
               "weight': shape (24, 8) in the file, (8, 24) expected", NULL);
    gpt2_dir(in_scratch(dir, "gpt2-dtype"), &s, gpt2_config, NULL,
             "transformer.h.0.ln_1.weight", "dtype");
    open_fails(dir, &m, "gpt2-dtype/model.safetensors: tensor 'transformer.h.0.ln_1.weight': "
               "dtype I32", NULL);
    make_dir(in_scratch(dir, "gpt2-noweights"));
    write_config(dir, gpt2_config, NULL, NULL);
    open_fails(dir, &m, "neither model.safetensors nor model.safetensors.index.json", NULL);
    make_dir(in_scratch(dir, "gpt2-noconfig"));
    open_fails(dir, &m, "gpt2-noconfig/config.json", NULL);
    hfree(&s);
}

/* ---- A tiny LLaMA: grouped-query attention, two shards and an index ------------------------ */

static const char llama_config[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
    "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"intermediate_size\": 48, \"vocab_size\": 100, "
    "\"rms_norm_eps\": 1e-05, \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, "
    "\"rope_theta\": 10000.0, \"max_position_embeddings\": 2048, "
    "\"torch_dtype\": \"bfloat16\"}";

static const char *const shard[2] = {"model-00001-of-00002.safetensors",
                                     "model-00002-of-00002.safetensors"};

/* LLaMA's tensors; returns how many go into the first shard (the embedding and layer 0). */
static int llama_set(hset *s, bool head)
{
    char n[128];
    int split = 0;
#define LN(fmt, l) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
    hadd(s, "model.embed_tokens.weight", "BF16", 100, 32);
    for (int l = 0; l < 2; l++) {
        hadd(s, LN("input_layernorm.weight", l), "F32", 32, 0);
        hadd(s, LN("self_attn.q_proj.weight", l), "BF16", 32, 32);
        hadd(s, LN("self_attn.k_proj.weight", l), "F32", 16, 32);
        hadd(s, LN("self_attn.v_proj.weight", l), "F16", 16, 32);
        hadd(s, LN("self_attn.o_proj.weight", l), "BF16", 32, 32);
        hadd(s, LN("self_attn.rotary_emb.inv_freq", l), "F32", 4, 0);
        hadd(s, LN("post_attention_layernorm.weight", l), "BF16", 32, 0);
        hadd(s, LN("mlp.gate_proj.weight", l), "F32", 48, 32);
        hadd(s, LN("mlp.up_proj.weight", l), "BF16", 48, 32);
        hadd(s, LN("mlp.down_proj.weight", l), "F32", 32, 48);
        if (l == 0)
            split = s->n;
    }
    hadd(s, "model.norm.weight", "F32", 32, 0);
    if (head)
        hadd(s, "lm_head.weight", "F32", 100, 32);
#undef LN
    return split;
}

/* The index: each tensor's shard, leaving out `skip`, sending `moved` to file `to`. */
static void write_index(const char *dir, const hset *s, int split, const char *skip,
                        const char *moved, const char *to)
{
    json_t *map = json_object();
    for (int i = 0; i < s->n; i++)
        if (!skip || strcmp(s->t[i].name, skip))
            json_object_set_new(map, s->t[i].name,
                                json_string(moved && !strcmp(s->t[i].name, moved)
                                                ? to
                                                : shard[i >= split]));
    json_t *root = json_pack("{s:{s:i},s:o}", "metadata", "total_size", 0, "weight_map", map);
    char path[4096];
    PATHF(path, "%s/model.safetensors.index.json", dir);
    CHECK(json_dump_file(root, path, JSON_INDENT(2)) == 0);
    json_decref(root);
}

static void llama_dir(const char *dir, const hset *s, int split, const char *config)
{
    char path[4096];
    make_dir(dir);
    write_config(dir, config, NULL, NULL);
    for (int k = 0; k < 2; k++) {
        PATHF(path, "%s/%s", dir, shard[k]);
        hwrite(s, path, k ? split : 0, k ? s->n : split, NULL, NULL, NULL);
    }
    write_index(dir, s, split, NULL, NULL, NULL);
}

static void check_llama(pt_wsrc *src, const hset *s, bool head)
{
    char n[128], ours[64];
#define LN(fmt, l) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), hget(s, n))
#define OURS(fmt, l) (snprintf(ours, sizeof ours, "layers.%d." fmt, l), ours)
    check_tensor(src, "wte", 128, 32, expect_copy(hget(s, "model.embed_tokens.weight"), 128));
    for (int l = 0; l < 2; l++) {
        check_tensor(src, OURS("norm1.w", l), 32, 0, expect_copy(LN("input_layernorm.weight", l), 32));
        check_tensor(src, OURS("q.w", l), 32, 32, expect_rope(LN("self_attn.q_proj.weight", l), 8));
        check_tensor(src, OURS("k.w", l), 16, 32, expect_rope(LN("self_attn.k_proj.weight", l), 8));
        check_tensor(src, OURS("v.w", l), 16, 32, expect_copy(LN("self_attn.v_proj.weight", l), 16));
        check_tensor(src, OURS("attn_out.w", l), 32, 32,
                     expect_copy(LN("self_attn.o_proj.weight", l), 32));
        check_tensor(src, OURS("norm2.w", l), 32, 0,
                     expect_copy(LN("post_attention_layernorm.weight", l), 32));
        check_tensor(src, OURS("mlp_gate.w", l), 48, 32, expect_copy(LN("mlp.gate_proj.weight", l), 48));
        check_tensor(src, OURS("mlp_up.w", l), 48, 32, expect_copy(LN("mlp.up_proj.weight", l), 48));
        check_tensor(src, OURS("mlp_down.w", l), 32, 48, expect_copy(LN("mlp.down_proj.weight", l), 32));
    }
    check_tensor(src, "final_norm.w", 32, 0, expect_copy(hget(s, "model.norm.weight"), 32));
    if (head)
        check_tensor(src, "lm_head.w", 128, 32, expect_copy(hget(s, "lm_head.weight"), 128));
#undef LN
#undef OURS
}

/* y = W x for W (rows, 32). */
static void matvec(const float *w, int rows, const float *x, float *y)
{
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int c = 0; c < 32; c++)
            acc += (double)w[r * 32 + c] * x[c];
        y[r] = (float)acc;
    }
}

/* transformers' apply_rotary_pos_emb (models/llama/modeling_llama.py): with
 * inv_freq_i = theta^(-2i/d) and emb = cat(freqs, freqs), q·cos + rotate_half(q)·sin,
 * rotate_half(x) = cat(-x[d/2:], x[:d/2]). */
static void hf_rope(float *v, int heads, int d, int pos)
{
    for (int h = 0; h < heads; h++) {
        float *x = v + h * d;
        for (int i = 0; i < d / 2; i++) {
            double f = pos * pow(10000.0, -2.0 * i / d), c = cos(f), s = sin(f);
            double x1 = x[i], x2 = x[i + d / 2];
            x[i] = (float)(x1 * c - x2 * s);
            x[i + d / 2] = (float)(x2 * c + x1 * s);
        }
    }
}

/* Qwen3's q_norm and k_norm (models/qwen3/modeling_qwen3.py, Qwen3RMSNorm over each
 * head of d): x / sqrt(mean(x^2) + eps) · gain, element by element. */
static void head_rmsnorm(float *v, int heads, int d, const float *gain)
{
    for (int h = 0; h < heads; h++) {
        float *x = v + h * d;
        double ss = 0;
        for (int i = 0; i < d; i++)
            ss += (double)x[i] * x[i];
        double r = 1.0 / sqrt(ss / d + PT_HF_NORM_EPS);
        for (int i = 0; i < d; i++)
            x[i] = (float)(x[i] * r * gain[i]);
    }
}

/* Attention scores q(pq)·k(pk) of each of 4 query heads of d (at most 16) with its KV
 * head (of 2), for positions 0..7: [pq][pk][head]. */
typedef struct {
    double s[8][8][4];
} scores;

/* The scores of q and k weights (4d, 32) and (2d, 32), with q/k norm gains qg and kg
 * (d each; NULL: none) before RoPE: our kernel's RoPE with kn, else Hugging Face's. */
static void scores_of(const float *qw, const float *kw, const float *qg, const float *kg,
                      int d, const float *x, pt_kernels *kn, scores *out)
{
    float q[8][64], k[8][32];
    for (int p = 0; p < 8; p++) {
        float q0[64], k0[32];
        matvec(qw, 4 * d, x, q0);
        matvec(kw, 2 * d, x, k0);
        if (qg) {
            head_rmsnorm(q0, 4, d, qg);
            head_rmsnorm(k0, 2, d, kg);
        }
        if (kn) { /* ours: pairs (2i, 2i+1) */
            kn->rope_forward(kn, q[p], q0, 1, 1, 4, d, p, (float)PT_HF_ROPE_THETA);
            kn->rope_forward(kn, k[p], k0, 1, 1, 2, d, p, (float)PT_HF_ROPE_THETA);
        } else {
            memcpy(q[p], q0, sizeof q0);
            memcpy(k[p], k0, sizeof k0);
            hf_rope(q[p], 4, d, p);
            hf_rope(k[p], 2, d, p);
        }
    }
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++)
            for (int h = 0; h < 4; h++) {
                double acc = 0;
                for (int i = 0; i < d; i++)
                    acc += (double)q[a][h * d + i] * k[b][(h / 2) * d + i];
                out->s[a][b][h] = acc;
            }
}

/* The permuted q and k (and, with q/k norms, their permuted gains: our qk_norm) with our
 * kernel's RoPE give Hugging Face's attention scores; the unpermuted ones do not (so the
 * check can fail). Layer 1 of a model of 4 heads of d on h = 32, 2 KV heads. */
static void check_rope_function(pt_wsrc *src, const hset *s, int d, bool qk_norm)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    CHECK(kn != NULL);
    if (!kn)
        return;
    float qw[64 * 32], kw[32 * 32], x[32], g[32];
    int64_t qs[2] = {4 * d, 32}, ks[2] = {2 * d, 32}, gs[2] = {2 * d, 0};
    pt_err err;
    CHECK(src->read(src, "layers.1.q.w", 2, qs, 0, 4 * d * 32, qw, &err) == 0);
    CHECK(src->read(src, "layers.1.k.w", 2, ks, 0, 2 * d * 32, kw, &err) == 0);
    if (qk_norm)
        CHECK(src->read(src, "layers.1.qk_norm.w", 1, gs, 0, 2 * d, g, &err) == 0);
    for (int i = 0; i < 32; i++)
        x[i] = frand();
    static scores ours, theirs, unpermuted;
    const htensor *hq = hget(s, "model.layers.1.self_attn.q_proj.weight");
    const htensor *hk = hget(s, "model.layers.1.self_attn.k_proj.weight");
    const float *hqg = qk_norm ? hget(s, "model.layers.1.self_attn.q_norm.weight")->val : NULL;
    const float *hkg = qk_norm ? hget(s, "model.layers.1.self_attn.k_norm.weight")->val : NULL;
    scores_of(qw, kw, qk_norm ? g : NULL, qk_norm ? g + d : NULL, d, x, kn, &ours);
    scores_of(hq->val, hk->val, hqg, hkg, d, x, NULL, &theirs);
    if (qk_norm) /* the rows permuted, their gains not */
        scores_of(qw, kw, hqg, hkg, d, x, kn, &unpermuted);
    else
        scores_of(hq->val, hk->val, NULL, NULL, d, x, kn, &unpermuted);
    double worst = 0, control = 0;
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++)
            for (int h = 0; h < 4; h++) {
                double t = theirs.s[a][b][h];
                worst = fmax(worst, fabs(ours.s[a][b][h] - t) / (1 + fabs(t)));
                control = fmax(control, fabs(unpermuted.s[a][b][h] - t) / (1 + fabs(t)));
            }
    if (worst > 1e-5)
        fprintf(stderr, "RoPE scores differ from Hugging Face's by %g\n", worst);
    CHECK(worst <= 1e-5);
    CHECK(control > 1e-2);
    pt_kernels_destroy(kn);
}

static void test_llama(void)
{
    pt_model m = llama_spec();
    char dir[4096], path[4096];
    hset s = {0};
    int split = llama_set(&s, true);
    llama_dir(in_scratch(dir, "llama"), &s, split, llama_config);
    pt_wsrc *src = open_ok(dir, &m);
    if (src) {
        check_llama(src, &s, true);
        check_rope_function(src, &s, 8, false);
        read_fails(src, "wpe", 2, 8, 32, 0, 64, "no parameter 'wpe'");
        read_fails(src, "layers.0.norm1.b", 1, 32, 0, 0, 32, "no parameter");
        read_fails(src, "layers.0.q.b", 1, 32, 0, 0, 32, "no parameter");
        src->close(src);
    }

    static const char *const cases[][4] = {
        {"hidden_size", "64", "hidden_size = 64", "hidden = 32"},
        {"num_hidden_layers", "1", "num_hidden_layers = 1", "layers = 2"},
        {"num_attention_heads", "8", "num_attention_heads = 8", "heads = 4"},
        {"num_key_value_heads", "4", "num_key_value_heads = 4", "kv_heads = 2"},
        {"num_key_value_heads", "DELETE", "num_key_value_heads = 4", "kv_heads = 2"},
        {"head_dim", "16", "head_dim = 16", "has head_dim = 8"},
        {"intermediate_size", "64", "intermediate_size = 64", "ffn = 48"},
        {"vocab_size", "101", "vocab_size = 101", "vocab = 100"},
        {"rms_norm_eps", "DELETE", "rms_norm_eps = 1e-06", "eps = 1e-05"},
        {"rope_theta", "500000.0", "rope_theta = 500000", "10000"},
        {"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0}", "rope_scaling", NULL},
        {"hidden_act", "\"gelu\"", "hidden_act = 'gelu'", "silu"},
        {"tie_word_embeddings", "true", "tie_word_embeddings = true", "tied_embeddings = false"},
        {"attention_bias", "true", "attention_bias = true", "bias = false"},
        {"mlp_bias", "true", "mlp_bias = true", "bias = false"},
        {"model_type", "\"gpt2\"", "model_type = 'gpt2'", "LLaMA shaped"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_config(dir, llama_config, cases[i][0], cases[i][1]);
        open_fails(dir, &m, cases[i][2], cases[i][3]);
    }
    /* defaults that agree: tie_word_embeddings false, and rope_theta from
     * rope_parameters (newer transformers) */
    write_config(dir, llama_config, "tie_word_embeddings", "DELETE");
    if ((src = open_ok(dir, &m)) != NULL)
        src->close(src);
    write_config(dir, llama_config, "rope_parameters",
                 "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}");
    if ((src = open_ok(dir, &m)) != NULL)
        src->close(src);
    write_config(dir, llama_config, "rope_parameters",
                 "{\"rope_type\": \"default\", \"rope_theta\": 500000.0}");
    open_fails(dir, &m, "rope_theta = 500000", NULL);
    write_config(dir, llama_config, NULL, NULL);

    /* the index: a tensor it leaves out, a shard that is not there, one outside the folder;
     * a tensor the index names but its shard lacks */
    write_index(dir, &s, split, "model.layers.1.mlp.up_proj.weight", NULL, NULL);
    open_fails(dir, &m, "llama/model.safetensors.index.json: no tensor "
               "'model.layers.1.mlp.up_proj.weight' in its weight_map", NULL);
    write_index(dir, &s, split, NULL, "model.norm.weight", "model-00003-of-00003.safetensors");
    open_fails(dir, &m, "cannot read", "llama/model-00003-of-00003.safetensors");
    write_index(dir, &s, split, NULL, "model.norm.weight", "../model.safetensors");
    open_fails(dir, &m, "names file '../model.safetensors', which is not a file of this folder",
               NULL);
    write_index(dir, &s, split, NULL, "model.norm.weight", shard[0]);
    open_fails(dir, &m, "llama/model-00001-of-00002.safetensors: no tensor 'model.norm.weight'",
               NULL);
    PATHF(path, "%s/model.safetensors.index.json", dir);
    write_text(path, "{\"weight_map\": {\"model.norm.weight\": 3}}");
    open_fails(dir, &m, "field 'weight_map': expected an object of file names", NULL);
    hfree(&s);

    /* tied: no lm_head.weight needed (and none read) */
    pt_model tied = m;
    tied.tied_embeddings = true;
    split = llama_set(&s, false);
    llama_dir(in_scratch(dir, "llama-tied"), &s, split, llama_config);
    write_config(dir, llama_config, "tie_word_embeddings", "true");
    if ((src = open_ok(dir, &tied)) != NULL) {
        check_llama(src, &s, false);
        read_fails(src, "lm_head.w", 2, 128, 32, 0, 64, "no parameter 'lm_head.w'");
        src->close(src);
    }
    open_fails(dir, &m, "tie_word_embeddings = true", NULL);
    hfree(&s);
}

/* ---- Qwen3, Mixtral and Qwen3-MoE -------------------------------------------------------- */

static pt_model builtin(const char *name)
{
    pt_model m;
    pt_err err = {{0}};
    if (pt_model_get(name, &m, &err)) {
        fprintf(stderr, "test: %s\n", err.msg);
        exit(2);
    }
    return m;
}

/* Qwen3 shaped: tiny LLaMA's sizes with q/k norms, heads of 16 on h = 32 (attention
 * a·d = 64 wide, not h, as Qwen3's head_dim 128 makes it), tied. */
static pt_model qwen3_spec(void)
{
    pt_model m = llama_spec();
    m.head_dim = 16;
    m.qk_norm = true;
    m.tied_embeddings = true;
    snprintf(m.name, sizeof m.name, "hf-qwen3");
    return m;
}

/* Mixtral shaped: tiny-moe with the mixture in every layer (its first layer is dense,
 * which Mixtral cannot say). */
static pt_model mixtral_spec(void)
{
    pt_model m = builtin("tiny-moe");
    m.moe.first_dense = 0;
    snprintf(m.name, sizeof m.name, "hf-mixtral");
    return m;
}

/* tiny-qwen3-moe with dense layers 0, 1 and 3 (first_dense 1, every 2: the mixture in
 * layer 2 alone), which Qwen3-MoE says with mlp_only_layers. */
static pt_model qwen3_moe_sparse_spec(void)
{
    pt_model m = builtin("tiny-qwen3-moe");
    m.moe.first_dense = 1;
    m.moe.every = 2;
    snprintf(m.name, sizeof m.name, "hf-qwen3-moe-sparse");
    return m;
}

/* Our `name` of m maps to their `hf`, of shape (rows, cols), in one part, laid out as
 * `how` says. */
static void map_is(const pt_model *m, const char *name, const char *hf, hf_how how,
                   int64_t rows, int64_t cols)
{
    hf_layout l = {.family = HF_GPT2, .prefix = "", .vocab = m->vocab};
    hf_map mp;
    pt_err err = {{0}};
    CHECK(hf_family_of(m, &l.family, &err) == 0);
    int rc = hf_map_of(m, &l, name, &mp, &err);
    if (rc)
        fprintf(stderr, "%s: %s\n", name, err.msg);
    CHECK(rc == 0);
    if (rc)
        return;
    CHECK_INT(mp.parts, 1);
    CHECK_STR(mp.part[0].hf, hf);
    CHECK_INT(mp.part[0].how, how);
    CHECK_INT(mp.part[0].shape[0], rows);
    CHECK_INT(mp.part[0].shape[1], cols);
    CHECK_INT(mp.ours_shape[0], rows);
    CHECK_INT(mp.ours_shape[1], cols);
}

static void map_fails(const pt_model *m, const char *name)
{
    hf_layout l = {.family = HF_GPT2, .prefix = "", .vocab = m->vocab};
    hf_map mp;
    pt_err err = {{0}};
    CHECK(hf_family_of(m, &l.family, &err) == 0);
    CHECK(hf_map_of(m, &l, name, &mp, &err) != 0);
    CHECK_STR_HAS(err.msg, "has no parameter");
}

/* The families models fall in, and a few names of each literally: Qwen3's q_norm and
 * k_norm as the two parts of our qk_norm, permuted as a head of q or k; Mixtral's and
 * Qwen3-MoE's routers and experts. */
static void test_maps(void)
{
    pt_model llama = llama_spec(), qwen3 = qwen3_spec(), mixtral = mixtral_spec();
    pt_model qmoe = builtin("tiny-qwen3-moe"), sparse = qwen3_moe_sparse_spec();
    const struct {
        const pt_model *m;
        hf_family f;
    } fam[] = {{&llama, HF_LLAMA}, {&qwen3, HF_QWEN3}, {&mixtral, HF_MIXTRAL},
               {&qmoe, HF_QWEN3_MOE}, {&sparse, HF_QWEN3_MOE}};
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        hf_family f = HF_GPT2;
        pt_err err = {{0}};
        CHECK(hf_family_of(fam[i].m, &f, &err) == 0);
        CHECK_INT(f, fam[i].f);
    }
    CHECK_STR(hf_family_type(HF_QWEN3_MOE), "qwen3_moe");
    CHECK_STR(hf_family_class(HF_MIXTRAL), "MixtralForCausalLM");
    CHECK_STR(hf_family_class(HF_QWEN3), "Qwen3ForCausalLM");

    /* Qwen3: attention 64 wide on h = 32; qk_norm is q_norm then k_norm */
    map_is(&qwen3, "layers.0.q.w", "model.layers.0.self_attn.q_proj.weight", HF_ROPE, 64, 32);
    map_is(&qwen3, "layers.1.attn_out.w", "model.layers.1.self_attn.o_proj.weight", HF_COPY, 32,
           64);
    hf_layout l = {.family = HF_QWEN3, .vocab = 100};
    hf_map mp;
    pt_err err = {{0}};
    CHECK(hf_map_of(&qwen3, &l, "layers.1.qk_norm.w", &mp, &err) == 0);
    CHECK_INT(mp.parts, 2);
    CHECK_INT(mp.ours_ndim, 1);
    CHECK_INT(mp.ours_shape[0], 32);
    CHECK_STR(mp.part[0].hf, "model.layers.1.self_attn.q_norm.weight");
    CHECK_STR(mp.part[1].hf, "model.layers.1.self_attn.k_norm.weight");
    for (int k = 0; k < 2; k++) {
        CHECK_INT(mp.part[k].row0, 16 * k);
        CHECK_INT(mp.part[k].how, HF_ROPE);
        CHECK_INT(mp.part[k].ndim, 1);
        CHECK_INT(mp.part[k].shape[0], 16);
    }
    int part = -1;
    int64_t at = -1, stride = 0;
    CHECK(hf_row(&mp, 2, &part, &at, &stride)); /* our 2i + p = 2: their p·8 + i = 1 */
    CHECK(part == 0 && at == 1 && stride == 1);
    CHECK(hf_row(&mp, 16 + 7, &part, &at, &stride)); /* k's 7 = 2·3 + 1: their 8 + 3 */
    CHECK(part == 1 && at == 11);
    map_fails(&llama, "layers.0.qk_norm.w");

    /* Mixtral: block_sparse_moe, w1 the gate, w3 up, w2 down */
    map_is(&mixtral, "layers.3.router.w", "model.layers.3.block_sparse_moe.gate.weight", HF_COPY,
           8, 64);
    map_is(&mixtral, "layers.0.experts.7.gate.w",
           "model.layers.0.block_sparse_moe.experts.7.w1.weight", HF_COPY, 96, 64);
    map_is(&mixtral, "layers.0.experts.7.up.w",
           "model.layers.0.block_sparse_moe.experts.7.w3.weight", HF_COPY, 96, 64);
    map_is(&mixtral, "layers.2.experts.0.down.w",
           "model.layers.2.block_sparse_moe.experts.0.w2.weight", HF_COPY, 64, 96);
    map_fails(&mixtral, "layers.0.qk_norm.w");
    map_fails(&mixtral, "layers.0.mlp_up.w"); /* an MoE layer has experts instead */

    /* Qwen3-MoE: mlp.gate and mlp.experts.E.{gate,up,down}_proj; q/k norms of 32 */
    map_is(&qmoe, "layers.2.router.w", "model.layers.2.mlp.gate.weight", HF_COPY, 16, 64);
    map_is(&qmoe, "layers.1.experts.15.down.w", "model.layers.1.mlp.experts.15.down_proj.weight",
           HF_COPY, 64, 32);
    map_is(&qmoe, "layers.3.experts.4.up.w", "model.layers.3.mlp.experts.4.up_proj.weight",
           HF_COPY, 32, 64);
    map_is(&qmoe, "layers.0.q.w", "model.layers.0.self_attn.q_proj.weight", HF_ROPE, 128, 64);
    map_fails(&qmoe, "layers.0.experts.16.up.w");
    map_fails(&qmoe, "layers.0.experts.01.up.w");
    map_fails(&qmoe, "layers.0.experts.1.mid.w");
    map_fails(&qmoe, "layers.0.experts.1.up.b");
    map_fails(&qmoe, "layers.0.experts..up.w");
    map_fails(&qmoe, "layers.0.router.b");
    map_fails(&qmoe, "layers.4.router.w");
    map_fails(&qmoe, "layers.0.mlp_gate.w");
    /* its dense layers: Qwen3MoeMLP's names, ffn wide; no router or experts there */
    map_is(&sparse, "layers.0.mlp_gate.w", "model.layers.0.mlp.gate_proj.weight", HF_COPY, 192, 64);
    map_is(&sparse, "layers.3.mlp_down.w", "model.layers.3.mlp.down_proj.weight", HF_COPY, 64, 192);
    map_is(&sparse, "layers.2.experts.3.gate.w", "model.layers.2.mlp.experts.3.gate_proj.weight",
           HF_COPY, 32, 64);
    map_fails(&sparse, "layers.1.router.w");
    map_fails(&sparse, "layers.3.experts.0.up.w");
}

/* hf_family_of refuses what a family's config.json cannot say, naming the field. */
static void family_fails(const pt_model *m, const char *want)
{
    hf_family f;
    pt_err err = {{0}};
    CHECK(hf_family_of(m, &f, &err) != 0);
    CHECK_STR_HAS(err.msg, want);
}

static void test_family_refusals(void)
{
    pt_model m = mixtral_spec();
    m.moe.shared_experts = 1;
    m.moe.shared_ffn = 32;
    family_fails(&m, "moe.shared_experts 1, but Mixtral has no shared experts");
    m = builtin("tiny-qwen3-moe");
    m.moe.score = PT_ROUTER_SIGMOID;
    family_fails(&m, "moe.router sigmoid, but Qwen3-MoE's router is a softmax");
    m = mixtral_spec();
    m.bias = true;
    family_fails(&m, "bias true, but Mixtral has no biases");
    m = qwen3_spec();
    m.bias = true;
    family_fails(&m, "bias true, but Qwen3's MLP has no biases");
    m = mixtral_spec();
    m.moe.renorm = false;
    family_fails(&m, "moe.renorm false, but Mixtral renormalises");
    m = builtin("tiny-moe");
    family_fails(&m, "moe.first_dense 1, moe.every 1 leave dense layers, but Mixtral has a "
                     "mixture of experts in every layer");
    m = mixtral_spec();
    m.moe.every = 2;
    family_fails(&m, "moe.every 2 leave dense layers");
    m = llama_spec();
    m.window = 4;
    family_fails(&m, "window 4 (banded attention)");
    m = builtin("gpt-oss-20b");
    m.window = 0;
    family_fails(&m, "attn_sinks");
    m = gpt2_spec();
    m.moe = mixtral_spec().moe;
    family_fails(&m, "moe.experts 8, but GPT-2 has no mixture of experts");
    m = gpt2_spec();
    m.head_dim = 8;
    family_fails(&m, "head_dim 8, but GPT-2's heads are hidden / heads = 4 wide");
}

/* ---- A tiny Qwen3, written here ------------------------------------------------------------ */

static const char qwen3_config[] =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", "
    "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"head_dim\": 16, \"intermediate_size\": 48, "
    "\"vocab_size\": 100, \"rms_norm_eps\": 1e-05, \"hidden_act\": \"silu\", "
    "\"tie_word_embeddings\": true, \"rope_theta\": 10000.0, \"attention_bias\": false, "
    "\"use_sliding_window\": false, \"sliding_window\": null, \"max_window_layers\": 28}";

/* Qwen3's tensors (models/qwen3/modeling_qwen3.py), tied: LLaMA's with q and k 64 and 32
 * rows wide and q_norm, k_norm of 16. */
static void qwen3_set(hset *s)
{
    char n[128];
#define QN(fmt, l) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
    hadd(s, "model.embed_tokens.weight", "BF16", 100, 32);
    for (int l = 0; l < 2; l++) {
        hadd(s, QN("input_layernorm.weight", l), "F32", 32, 0);
        hadd(s, QN("self_attn.q_proj.weight", l), "BF16", 64, 32);
        hadd(s, QN("self_attn.k_proj.weight", l), "F32", 32, 32);
        hadd(s, QN("self_attn.v_proj.weight", l), "F16", 32, 32);
        hadd(s, QN("self_attn.o_proj.weight", l), "BF16", 32, 64);
        hadd(s, QN("self_attn.q_norm.weight", l), "BF16", 16, 0);
        hadd(s, QN("self_attn.k_norm.weight", l), "F32", 16, 0);
        hadd(s, QN("post_attention_layernorm.weight", l), "BF16", 32, 0);
        hadd(s, QN("mlp.gate_proj.weight", l), "F32", 48, 32);
        hadd(s, QN("mlp.up_proj.weight", l), "BF16", 48, 32);
        hadd(s, QN("mlp.down_proj.weight", l), "F32", 32, 48);
    }
    hadd(s, "model.norm.weight", "F32", 32, 0);
#undef QN
}

static void check_qwen3(pt_wsrc *src, const hset *s)
{
    char n[128], ours[64];
#define QN(fmt, l) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), hget(s, n))
#define OURS(fmt, l) (snprintf(ours, sizeof ours, "layers.%d." fmt, l), ours)
    check_tensor(src, "wte", 128, 32, expect_copy(hget(s, "model.embed_tokens.weight"), 128));
    for (int l = 0; l < 2; l++) {
        check_tensor(src, OURS("norm1.w", l), 32, 0,
                     expect_copy(QN("input_layernorm.weight", l), 32));
        check_tensor(src, OURS("q.w", l), 64, 32,
                     expect_rope(QN("self_attn.q_proj.weight", l), 16));
        check_tensor(src, OURS("k.w", l), 32, 32,
                     expect_rope(QN("self_attn.k_proj.weight", l), 16));
        check_tensor(src, OURS("v.w", l), 32, 32,
                     expect_copy(QN("self_attn.v_proj.weight", l), 32));
        check_tensor(src, OURS("attn_out.w", l), 32, 64,
                     expect_copy(QN("self_attn.o_proj.weight", l), 32));
        /* qk_norm: q_norm's 16 then k_norm's 16, each permuted as one head */
        float *qg = expect_rope(QN("self_attn.q_norm.weight", l), 16);
        float *kg = expect_rope(QN("self_attn.k_norm.weight", l), 16);
        float *g = malloc(32 * sizeof *g);
        memcpy(g, qg, 16 * sizeof *g);
        memcpy(g + 16, kg, 16 * sizeof *g);
        free(qg);
        free(kg);
        check_tensor(src, OURS("qk_norm.w", l), 32, 0, g);
        check_tensor(src, OURS("norm2.w", l), 32, 0,
                     expect_copy(QN("post_attention_layernorm.weight", l), 32));
        check_tensor(src, OURS("mlp_gate.w", l), 48, 32,
                     expect_copy(QN("mlp.gate_proj.weight", l), 48));
        check_tensor(src, OURS("mlp_up.w", l), 48, 32,
                     expect_copy(QN("mlp.up_proj.weight", l), 48));
        check_tensor(src, OURS("mlp_down.w", l), 32, 48,
                     expect_copy(QN("mlp.down_proj.weight", l), 32));
    }
    check_tensor(src, "final_norm.w", 32, 0, expect_copy(hget(s, "model.norm.weight"), 32));
#undef QN
#undef OURS
}

static void test_qwen3(void)
{
    pt_model m = qwen3_spec();
    char dir[4096];
    hset s = {0};
    qwen3_set(&s);
    gpt2_dir(in_scratch(dir, "qwen3"), &s, qwen3_config, NULL, NULL, NULL);
    pt_wsrc *src = open_ok(dir, &m);
    if (src) {
        check_qwen3(src, &s);
        check_rope_function(src, &s, 16, true);
        read_fails(src, "layers.0.qk_norm.w", 1, 16, 0, 0, 16, "(16, 0)");
        read_fails(src, "layers.0.qk_norm.w", 1, 32, 0, 30, 4, "[30, 34) are outside its 32");
        read_fails(src, "lm_head.w", 2, 128, 32, 0, 64, "no parameter 'lm_head.w'");
        src->close(src);
    }
    static const char *const cases[][4] = {
        {"head_dim", "DELETE", "head_dim = 128", "has head_dim = 16"}, /* Qwen3Config's */
        {"num_key_value_heads", "DELETE", "num_key_value_heads = 32", "kv_heads = 2"},
        {"rope_theta", "1000000.0", "rope_theta = 1e+06", "10000"}, /* the released ones' */
        {"rms_norm_eps", "DELETE", "rms_norm_eps = 1e-06", "eps = 1e-05"},
        {"attention_bias", "true", "attention_bias = true", "bias = false"},
        {"model_type", "\"llama\"", "model_type = 'llama'",
         "is Qwen3 shaped (LLaMA's with q/k norms)"},
        {"model_type", "\"qwen3_moe\"", "model_type = 'qwen3_moe'", "is Qwen3 shaped"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_config(dir, qwen3_config, cases[i][0], cases[i][1]);
        open_fails(dir, &m, cases[i][2], cases[i][3]);
    }
    /* a sliding window of 4096 keys is full attention over our 8; a narrower one is
     * refused */
    char *sliding = config_with(qwen3_config, "use_sliding_window", "true");
    write_config(dir, sliding, "sliding_window", "4096");
    if ((src = open_ok(dir, &m)) != NULL)
        src->close(src);
    write_config(dir, sliding, "sliding_window", "4");
    free(sliding);
    open_fails(dir, &m, "sliding_window = 4, but model 'hf-qwen3' attends in full over seq = 8",
               NULL);
    write_config(dir, qwen3_config, NULL, NULL);
    /* a LLaMA of the same sizes reads no Qwen3 directory */
    pt_model plain = m;
    plain.qk_norm = false;
    open_fails(dir, &plain, "model_type = 'qwen3', but model 'hf-qwen3' is LLaMA shaped", NULL);
    /* a missing k_norm */
    gpt2_dir(in_scratch(dir, "qwen3-missing"), &s, qwen3_config,
             "model.layers.1.self_attn.k_norm.weight", NULL, NULL);
    open_fails(dir, &m, "qwen3-missing/model.safetensors: no tensor "
               "'model.layers.1.self_attn.k_norm.weight'", NULL);
    hfree(&s);
}

/* ---- The round trip through ptconvert ---------------------------------------------------------- */

/* Runs ptconvert with args (NULL-terminated); its stdout and stderr go to files in scratch
 * (tool.out, tool.err). Returns its exit status. */
static int run_ptconvert(const char *const *args)
{
    char out[4096], errp[4096];
    in_scratch(out, "tool.out");
    in_scratch(errp, "tool.err");
    char *argv[16] = {(char *)ptconvert};
    for (int i = 0; args[i] && i < 14; i++)
        argv[i + 1] = (char *)args[i];
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        int e = open(errp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(126);
        execv(ptconvert, argv);
        _exit(127);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char tool_text[8192];

static const char *tool_file(const char *which)
{
    char path[4096];
    FILE *fp = fopen(in_scratch(path, which), "rb");
    size_t n = fp ? fread(tool_text, 1, sizeof tool_text - 1, fp) : 0;
    tool_text[n] = '\0';
    if (fp)
        fclose(fp);
    return tool_text;
}

/* A step folder of ours: meta.json with the model, model.safetensors.index.json and two
 * shards of whole F32 tensors under our names (the embedding's padding rows filled too,
 * as training leaves them: not necessarily zero). */
static void write_step(const char *dir, const pt_model *m, hset *s)
{
    make_dir(dir);
    char(*names)[48] = NULL;
    int n = 0;
    pt_err err;
    CHECK(hf_param_names(m, &names, &n, &err) == 0);
    for (int i = 0; i < n; i++) {
        int64_t shape[2];
        ours_shape(m, names[i], shape);
        hadd(s, names[i], "F32", shape[0], shape[1]);
    }
    free(names);
    char path[4096];
    for (int k = 0; k < 2; k++) {
        PATHF(path, "%s/%s", dir, shard[k]);
        hwrite(s, path, k ? s->n / 2 : 0, k ? s->n : s->n / 2, NULL, NULL, NULL);
    }
    write_index(dir, s, s->n / 2, NULL, NULL, NULL);
    pt_ckpt_meta meta = {.step = 7, .data_pos = 7 * 8, .world = 1, .model = *m,
                         .global_batch = 8};
    snprintf(meta.layout, sizeof meta.layout, "tp=1");
    snprintf(meta.config_hash, sizeof meta.config_hash, "ab");
    snprintf(meta.plan_hash, sizeof meta.plan_hash, "cd");
    snprintf(meta.precision, sizeof meta.precision, "fp32");
    pt_run_opts_default(&meta.run, m);
    CHECK(pt_ckpt_meta_write(dir, &meta, &err) == 0);
}

static float rounded(float v, const char *dtype)
{
    return !strcmp(dtype, "BF16") ? hf_bf16_to_f32(hf_f32_to_bf16(v))
           : !strcmp(dtype, "F16") ? hf_f16_to_f32(hf_f32_to_f16(v))
                                   : v;
}

/* The Hugging Face directory read back equals ours: rounded to dtype, the padding rows
 * zero. */
static void check_back(const char *dir, const pt_model *m, const hset *s, const char *dtype)
{
    pt_wsrc *src = open_ok(dir, m);
    if (!src)
        return;
    for (int i = 0; i < s->n; i++) {
        const htensor *t = &s->t[i];
        int64_t cols = t->ndim == 2 ? t->shape[1] : 1;
        bool vocab = !strcmp(t->name, "wte") || !strcmp(t->name, "lm_head.w");
        float *e = malloc((size_t)t->n * sizeof *e);
        for (int64_t j = 0; j < t->n; j++)
            e[j] = vocab && j / cols >= m->vocab ? 0.0f : rounded(t->val[j], dtype);
        check_tensor(src, t->name, t->shape[0], t->ndim == 2 ? t->shape[1] : 0, e);
    }
    src->close(src);
}

/* config.json's fields of Qwen3, Mixtral and Qwen3-MoE (configuration_qwen3.py,
 * configuration_mixtral.py, configuration_qwen3_moe.py): head_dim, RoPE's base always
 * said (Mixtral's default is 1e6), the experts; Qwen3-MoE's dense layers as
 * mlp_only_layers. */
static void check_family_config(const json_t *c, const pt_model *m, const char *type)
{
    const json_t *arch = json_array_get(json_object_get(c, "architectures"), 0);
    static const char *const classes[][2] = {{"llama", "LlamaForCausalLM"},
                                             {"qwen3", "Qwen3ForCausalLM"},
                                             {"mixtral", "MixtralForCausalLM"},
                                             {"qwen3_moe", "Qwen3MoeForCausalLM"}};
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++)
        if (!strcmp(type, classes[i][0]))
            CHECK_STR(json_string_value(arch), classes[i][1]);
    CHECK_INT(json_integer_value(json_object_get(c, "head_dim")), pt_model_head_dim(m));
    CHECK(json_real_value(json_object_get(c, "rope_theta")) == 10000.0);
    bool mixtral = !strcmp(type, "mixtral"), qmoe = !strcmp(type, "qwen3_moe");
    if (!mixtral && !qmoe)
        return;
    CHECK_INT(json_integer_value(json_object_get(c, mixtral ? "num_local_experts" : "num_experts")),
              m->moe.experts);
    CHECK_INT(json_integer_value(json_object_get(c, "num_experts_per_tok")), m->moe.top_k);
    CHECK_INT(json_integer_value(json_object_get(c, mixtral ? "intermediate_size"
                                                            : "moe_intermediate_size")),
              m->moe.expert_ffn);
    CHECK(json_real_value(json_object_get(c, "router_aux_loss_coef")) == m->moe.aux_loss);
    if (mixtral)
        return;
    CHECK_INT(json_integer_value(json_object_get(c, "intermediate_size")), m->ffn);
    CHECK(json_is_true(json_object_get(c, "norm_topk_prob")) == m->moe.renorm);
    CHECK_INT(json_integer_value(json_object_get(c, "decoder_sparse_step")), 1);
    const json_t *only = json_object_get(c, "mlp_only_layers");
    size_t k = 0;
    for (int64_t l = 0; l < m->layers; l++)
        if (!pt_model_layer_moe(m, l))
            CHECK_INT(json_integer_value(json_array_get(only, k++)), l);
    CHECK_INT((int64_t)json_array_size(only), (int64_t)k);
}

/* Theirs (a whole tensor of the file) equals ours `name` of s, element for element. */
static void check_copy(pt_st_file *f, const char *theirs, const hset *s, const char *name)
{
    const htensor *o = hget(s, name);
    const pt_st_tensor *t = NULL;
    pt_err err = {{0}};
    int rc = pt_st_get(f, theirs, "F32", o->ndim, o->shape, &t, &err);
    if (rc)
        fprintf(stderr, "%s: %s\n", theirs, err.msg);
    CHECK(rc == 0);
    if (rc == 0)
        CHECK(memcmp(t->data, o->val, (size_t)o->n * sizeof(float)) == 0);
}

/* Qwen3's q_norm and k_norm (F32) of layer l: each half of our qk_norm, its rows permuted
 * as a head of q and of k (their p·d/2 + i is our 2i + p). */
static void check_qk_norm_file(pt_st_file *f, const pt_model *m, const hset *s, int l)
{
    int64_t d = pt_model_head_dim(m);
    char name[128], ours[64];
    snprintf(ours, sizeof ours, "layers.%d.qk_norm.w", l);
    const float *g = hget(s, ours)->val;
    for (int k = 0; k < 2; k++) {
        const pt_st_tensor *t = NULL;
        pt_err err = {{0}};
        snprintf(name, sizeof name, "model.layers.%d.self_attn.%c_norm.weight", l, "qk"[k]);
        CHECK(pt_st_get(f, name, "F32", 1, (int64_t[]){d}, &t, &err) == 0);
        if (!t)
            continue;
        const float *w = t->data;
        int bad = 0;
        for (int64_t i = 0; i < d / 2; i++)
            for (int64_t p = 0; p < 2; p++)
                bad += w[p * d / 2 + i] != g[k * d + 2 * i + p];
        CHECK_INT(bad, 0);
    }
}

/* Mixtral's and Qwen3-MoE's first MoE layer in the file (F32): its router and an expert's
 * three projections copied from ours. */
static void check_moe_file(pt_st_file *f, const pt_model *m, const hset *s, const char *type)
{
    bool mixtral = !strcmp(type, "mixtral");
    int l = 0;
    while (l < m->layers && !pt_model_layer_moe(m, l))
        l++;
    int e = (int)m->moe.experts - 1;
    char theirs[128], ours[64];
    snprintf(theirs, sizeof theirs, "model.layers.%d.%s.gate.weight", l,
             mixtral ? "block_sparse_moe" : "mlp");
    snprintf(ours, sizeof ours, "layers.%d.router.w", l);
    check_copy(f, theirs, s, ours);
    static const char *const kinds[3] = {"gate", "up", "down"};
    static const char *const mixtral_names[3] = {"w1", "w3", "w2"};
    static const char *const qwen3_names[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int k = 0; k < 3; k++) {
        snprintf(theirs, sizeof theirs, "model.layers.%d.%s.experts.%d.%s.weight", l,
                 mixtral ? "block_sparse_moe" : "mlp", e,
                 mixtral ? mixtral_names[k] : qwen3_names[k]);
        snprintf(ours, sizeof ours, "layers.%d.experts.%d.%s.w", l, e, kinds[k]);
        check_copy(f, theirs, s, ours);
    }
}

/* What ptconvert wrote, read as transformers reads it: config.json's fields (model_type
 * `type`), tensor names, shapes and dtypes, the unpadded vocabulary; and the layouts,
 * element by element, from ours (F32): GPT-2's k block of c_attn transposed, q rows
 * permuted (and Qwen3's q_norm and k_norm), Mixtral's and Qwen3-MoE's experts copied. */
static void check_files(const char *dir, const pt_model *m, const hset *s, const char *type,
                        const char *dtype, int tensors)
{
    char path[4096];
    json_error_t je;
    PATHF(path, "%s/config.json", dir);
    json_t *c = json_load_file(path, 0, &je);
    CHECK(c != NULL);
    bool gpt2 = m->pos == PT_POS_LEARNED;
    CHECK_STR(json_string_value(json_object_get(c, "model_type")), type);
    if (!gpt2)
        check_family_config(c, m, type);
    CHECK_INT(json_integer_value(json_object_get(c, "vocab_size")), m->vocab);
    CHECK_INT(json_integer_value(json_object_get(c, gpt2 ? "n_positions" : "max_position_embeddings")),
              m->seq);
    CHECK(json_is_true(json_object_get(c, "tie_word_embeddings")) == m->tied_embeddings);
    CHECK(!strcmp(json_string_value(json_object_get(c, "torch_dtype")),
                  !strcmp(dtype, "F32") ? "float32" : !strcmp(dtype, "BF16") ? "bfloat16" : "float16"));
    if (!gpt2)
        CHECK_INT(json_integer_value(json_object_get(c, "num_key_value_heads")), m->kv_heads);
    json_decref(c);

    pt_st_file *f = NULL;
    pt_err err = {{0}};
    PATHF(path, "%s/model.safetensors", dir);
    CHECK(pt_st_open(path, &f, &err) == 0);
    if (!f)
        return;
    CHECK_INT(pt_st_count(f), tensors);
    CHECK(pt_st_meta(f, "format") && !strcmp(pt_st_meta(f, "format"), "pt"));
    const pt_st_tensor *t = NULL;
    int64_t h = m->hidden;
    if (gpt2) {
        CHECK(pt_st_get(f, "transformer.wte.weight", dtype, 2, (int64_t[]){m->vocab, h}, &t,
                        &err) == 0);
        CHECK(pt_st_get(f, "transformer.wpe.weight", dtype, 2, (int64_t[]){m->seq, h}, &t,
                        &err) == 0);
        CHECK(pt_st_get(f, "lm_head.weight", NULL, -1, NULL, &t, &err) != 0);
        CHECK(pt_st_get(f, "transformer.h.1.attn.c_attn.weight", dtype, 2,
                        (int64_t[]){h, 3 * h}, &t, &err) == 0);
        if (t && !strcmp(dtype, "F32")) {
            const float *w = t->data, *k = hget(s, "layers.1.k.w")->val;
            int bad = 0;
            for (int64_t o = 0; o < h; o++)
                for (int64_t i = 0; i < h; i++)
                    bad += w[i * 3 * h + h + o] != k[o * h + i];
            CHECK_INT(bad, 0);
        }
    } else {
        int64_t d = pt_model_head_dim(m), kvd = m->kv_heads * d, qd = m->heads * d;
        CHECK(pt_st_get(f, "model.embed_tokens.weight", dtype, 2, (int64_t[]){m->vocab, h}, &t,
                        &err) == 0);
        CHECK((pt_st_get(f, "lm_head.weight", dtype, 2, (int64_t[]){m->vocab, h}, &t, &err) ==
               0) == !m->tied_embeddings);
        CHECK((pt_st_get(f, "model.layers.1.self_attn.o_proj.bias", dtype, 1, (int64_t[]){h}, &t,
                         &err) == 0) == m->bias);
        CHECK(pt_st_get(f, "model.layers.1.self_attn.k_proj.weight", dtype, 2,
                        (int64_t[]){kvd, h}, &t, &err) == 0);
        CHECK(pt_st_get(f, "model.layers.0.self_attn.q_proj.weight", dtype, 2,
                        (int64_t[]){qd, h}, &t, &err) == 0);
        if (t && !strcmp(dtype, "F32")) {
            const float *w = t->data, *q = hget(s, "layers.0.q.w")->val;
            int bad = 0;
            for (int64_t head = 0; head < m->heads; head++)
                for (int64_t i = 0; i < d / 2; i++)
                    for (int64_t p = 0; p < 2; p++)
                        for (int64_t col = 0; col < h; col++)
                            bad += w[(head * d + p * d / 2 + i) * h + col] !=
                                   q[(head * d + 2 * i + p) * h + col];
            CHECK_INT(bad, 0);
        }
        if (m->bias && !strcmp(dtype, "F32") &&
            pt_st_get(f, "model.layers.0.self_attn.k_proj.bias", dtype, 1, (int64_t[]){kvd}, &t,
                      &err) == 0) {
            const float *b = t->data, *k = hget(s, "layers.0.k.b")->val;
            int bad = 0;
            for (int64_t j = 0; j < kvd; j++) /* row j = head·d + 2i + p of ours */
                bad += b[j / d * d + (j % d % 2) * d / 2 + j % d / 2] != k[j];
            CHECK_INT(bad, 0);
        }
        if (m->qk_norm && !strcmp(dtype, "F32"))
            check_qk_norm_file(f, m, s, 0);
        if (m->moe.experts > 0 && !strcmp(dtype, "F32"))
            check_moe_file(f, m, s, type);
    }
    pt_st_close(f);
}

static void test_round_trip(void)
{
    /* GPT-2; LLaMA; LLaMA with biases (attention_bias, mlp_bias: q and k biases permuted
     * as their rows) and a tied head; Qwen3 (q/k norms, heads of 16 on h = 32, tied);
     * Mixtral (8 experts in every layer); tiny-qwen3-moe (16 experts in every layer);
     * and a Qwen3-MoE with dense layers 0, 1 and 3 */
    enum { N = 7 };
    pt_model models[N] = {gpt2_spec(), llama_spec(), llama_spec(), qwen3_spec(),
                          mixtral_spec(), builtin("tiny-qwen3-moe"), qwen3_moe_sparse_spec()};
    models[2].bias = models[2].tied_embeddings = true;
    const char *const types[N] = {"gpt2", "llama", "llama", "qwen3", "mixtral", "qwen3_moe",
                                  "qwen3_moe"};
    /* their tensors: Qwen3 2·11 + 2 (tied); Mixtral 4·(7 + 3·8) + 3; tiny-qwen3-moe
     * 4·(9 + 3·16) + 3; the sparse one 3·11 + (9 + 3·16) + 3 */
    const int tensors[N] = {28, 21, 34, 24, 127, 231, 93};
    const char *const dtypes[3][2] = {{"f32", "F32"}, {"bf16", "BF16"}, {"f16", "F16"}};
    char step[4096], out[4096];
    const char *const steps[N] = {"step-gpt2", "step-llama", "step-llama-bias", "step-qwen3",
                                  "step-mixtral", "step-qwen3-moe", "step-qwen3-moe-sparse"};
    for (int k = 0; k < N; k++) {
        hset s = {0};
        write_step(in_scratch(step, steps[k]), &models[k], &s);
        for (int d = 0; d < 3; d++) {
            snprintf(out, sizeof out, "%s/hf-%d-%s", scratch, k, dtypes[d][0]);
            const char *args[] = {step, out, "--dtype", dtypes[d][0], NULL};
            int rc = run_ptconvert(args);
            if (rc)
                fprintf(stderr, "ptconvert: exit %d: %s\n", rc, tool_file("tool.err"));
            CHECK_INT(rc, 0);
            CHECK_STR_HAS(tool_file("tool.out"), "step 7 of model");
            CHECK_STR_HAS(tool_file("tool.out"), types[k]);
            check_files(out, &models[k], &s, types[k], dtypes[d][1], tensors[k]);
            check_back(out, &models[k], &s, dtypes[d][1]);
        }
        hfree(&s);
    }
}

/* config.json of an exported Mixtral or Qwen3-MoE against the model: each mismatch names
 * the field and both values. Reads the exports test_round_trip left. */
typedef struct {
    const char *key, *value, *want, *want2; /* want NULL: accepted */
} cfg_case;

static void config_cases(const char *dir, const pt_model *m, const cfg_case *cases, size_t n)
{
    char path[4096];
    PATHF(path, "%s/config.json", dir);
    FILE *fp = fopen(path, "rb");
    static char base[8192];
    size_t len = fp ? fread(base, 1, sizeof base - 1, fp) : 0;
    base[len] = '\0';
    if (fp)
        fclose(fp);
    CHECK(len > 0);
    for (size_t i = 0; i < n; i++) {
        write_config(dir, base, cases[i].key, cases[i].value);
        pt_wsrc *src = NULL;
        if (!cases[i].want && (src = open_ok(dir, m)) != NULL)
            src->close(src);
        if (cases[i].want)
            open_fails(dir, m, cases[i].want, cases[i].want2);
    }
    write_text(path, base);
}

static void test_moe_configs(void)
{
    char dir[4096];
    pt_model mixtral = mixtral_spec(), qmoe = builtin("tiny-qwen3-moe");
    pt_model sparse = qwen3_moe_sparse_spec();
    static const cfg_case mixtral_cases[] = {
        {"num_local_experts", "4", "num_local_experts = 4", "moe.experts = 8"},
        {"num_local_experts", "DELETE", NULL, NULL}, /* MixtralConfig's 8 */
        {"num_experts_per_tok", "1", "num_experts_per_tok = 1", "moe.top_k = 2"},
        {"intermediate_size", "192", "intermediate_size = 192", "moe.expert_ffn = 96"},
        {"rope_theta", "DELETE", "rope_theta = 1e+06", "10000"}, /* MixtralConfig's */
        {"rms_norm_eps", "DELETE", NULL, NULL},                  /* MixtralConfig's 1e-5 */
        {"sliding_window", "16", "sliding_window = 16", "attends in full over seq = 64"},
        {"sliding_window", "4096", NULL, NULL},
        {"router_aux_loss_coef", "0.5", NULL, NULL}, /* a training setting: the run's */
        {"model_type", "\"qwen3_moe\"", "model_type = 'qwen3_moe'",
         "is Mixtral shaped (LLaMA's with a mixture of experts)"},
        {"model_type", "\"llama\"", "model_type = 'llama'", "is Mixtral shaped"},
    };
    config_cases(in_scratch(dir, "hf-4-f32"), &mixtral, mixtral_cases,
                 sizeof mixtral_cases / sizeof mixtral_cases[0]);
    pt_model tiny_moe = builtin("tiny-moe"); /* a dense first layer: no Mixtral */
    open_fails(dir, &tiny_moe, "model_type = 'mixtral'", "moe.first_dense 1");

    static const cfg_case qmoe_cases[] = {
        {"num_experts", "8", "num_experts = 8", "moe.experts = 16"},
        {"num_experts", "DELETE", "num_experts = 128", "moe.experts = 16"},
        {"num_experts_per_tok", "2", "num_experts_per_tok = 2", "moe.top_k = 8"},
        {"moe_intermediate_size", "64", "moe_intermediate_size = 64", "moe.expert_ffn = 32"},
        {"norm_topk_prob", "DELETE", "norm_topk_prob = false", "moe.renorm = true"},
        {"decoder_sparse_step", "2", "make layer 0 dense", "has a mixture of experts there"},
        {"decoder_sparse_step", "0", "field 'decoder_sparse_step': expected a positive integer",
         NULL},
        {"mlp_only_layers", "[3]", "make layer 3 dense", "moe.first_dense = 0, moe.every = 1"},
        {"mlp_only_layers", "[\"0\"]", "field 'mlp_only_layers': expected a list of layer numbers",
         NULL},
        {"mlp_only_layers", "null", NULL, NULL},
        {"intermediate_size", "7", NULL, NULL}, /* no dense layer reads it */
        {"head_dim", "DELETE", "head_dim = 16", "has head_dim = 32"}, /* hidden / heads */
        {"rope_theta", "1000000.0", "rope_theta = 1e+06", "10000"},   /* the released ones' */
        {"attention_bias", "true", "attention_bias = true", "bias = false"},
        {"model_type", "\"mixtral\"", "model_type = 'mixtral'",
         "is Qwen3-MoE shaped (Qwen3's with a mixture of experts)"},
        {"model_type", "\"qwen3\"", "model_type = 'qwen3'", "is Qwen3-MoE shaped"},
    };
    config_cases(in_scratch(dir, "hf-5-f32"), &qmoe, qmoe_cases,
                 sizeof qmoe_cases / sizeof qmoe_cases[0]);
    open_fails(dir, &sparse, "make layer 0 sparse", "has a dense MLP there");
    /* the count under the other name (attribute_map) */
    char path[4096];
    PATHF(path, "%s/config.json", dir);
    char *base = NULL;
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    CHECK(c != NULL);
    json_object_del(c, "num_experts");
    json_object_set_new(c, "num_local_experts", json_integer(16));
    base = json_dumps(c, 0);
    json_decref(c);
    write_config(dir, base, NULL, NULL);
    pt_wsrc *src = open_ok(dir, &qmoe);
    if (src)
        src->close(src);
    write_config(dir, base, "num_local_experts", "8");
    open_fails(dir, &qmoe, "num_local_experts = 8", "moe.experts = 16");
    free(base);

    static const cfg_case sparse_cases[] = {
        {"mlp_only_layers", "[]", "make layer 0 sparse", "a dense MLP there (moe.first_dense = 1, "
                                                          "moe.every = 2)"},
        {"mlp_only_layers", "[3, 1, 0]", NULL, NULL},
        {"mlp_only_layers", "[0, 1, 2, 3]", "make layer 2 dense", NULL},
        {"intermediate_size", "7", "intermediate_size = 7", "ffn = 192"},
        {"intermediate_size", "DELETE", "intermediate_size = 6144", "ffn = 192"},
    };
    config_cases(in_scratch(dir, "hf-6-f32"), &sparse, sparse_cases,
                 sizeof sparse_cases / sizeof sparse_cases[0]);
}

/* ptconvert's refusals: one line naming the problem, exit 1, nothing written. */
static void refused(const char *const *args, const char *want, const char *not_made)
{
    CHECK_INT(run_ptconvert(args), 1);
    const char *e = tool_file("tool.err");
    CHECK_STR_HAS(e, want);
    CHECK(strchr(e, '\n') == e + strlen(e) - 1);
    CHECK(tool_file("tool.out")[0] == '\0');
    if (not_made)
        CHECK(!exists(not_made));
}

static void test_ptconvert_cli(void)
{
    char step[4096], out[4096], fresh[4096], path[4096];
    in_scratch(step, "step-gpt2");
    in_scratch(out, "hf-0-f32");
    in_scratch(fresh, "never-made");
    const char *help[] = {"--help", NULL};
    CHECK_INT(run_ptconvert(help), 0);
    CHECK_STR_HAS(tool_file("tool.out"), "usage: ptconvert CHECKPOINT OUT_DIR");

    /* out is not empty: refused, then --force replaces it (and --dtype=bf16 is read) */
    const char *again[] = {step, out, NULL};
    refused(again, "is not empty: nothing written (--force replaces", NULL);
    PATHF(path, "%s/notes.txt", out);
    write_text(path, "mine\n");
    const char *force[] = {step, out, "--force", "--dtype=bf16", NULL};
    CHECK_INT(run_ptconvert(force), 0);
    CHECK(exists(path));
    pt_model m = gpt2_spec();
    hset s = {0};
    write_step(step, &m, &s); /* the same names again, new values */
    CHECK_INT(run_ptconvert(force), 0);
    check_back(out, &m, &s, "BF16");
    hfree(&s);

    const char *no_args[] = {step, NULL};
    refused(no_args, "expected CHECKPOINT and OUT_DIR", NULL);
    const char *bad_dtype[] = {step, fresh, "--dtype", "f8", NULL};
    refused(bad_dtype, "--dtype 'f8': expected f32, bf16 or f16", fresh);
    const char *no_value[] = {step, fresh, "--dtype", NULL};
    refused(no_value, "--dtype needs a value", fresh);
    const char *bogus[] = {step, fresh, "--bogus", NULL};
    refused(bogus, "unknown option '--bogus'", fresh);
    const char *three[] = {step, fresh, "extra", NULL};
    refused(three, "unexpected argument 'extra'", fresh);
    in_scratch(path, "no-such-checkpoint");
    const char *missing[] = {path, fresh, NULL};
    refused(missing, "no-such-checkpoint", fresh);
    PATHF(path, "%s/no/such/parent", scratch);
    const char *no_parent[] = {step, path, NULL};
    refused(no_parent, "no/such/parent", NULL);

    /* a damaged step folder: a tensor its index names is not in its shard */
    char broken[4096];
    in_scratch(broken, "step-broken");
    hset b = {0};
    write_step(broken, &m, &b);
    PATHF(path, "%s/%s", broken, shard[1]);
    hwrite(&b, path, b.n / 2, b.n, "final_norm.w", NULL, NULL);
    const char *damaged[] = {broken, fresh, NULL};
    refused(damaged, "step-broken/model-00002-of-00002.safetensors: no tensor 'final_norm.w'",
            fresh);
    hfree(&b);
    /* a model neither GPT-2 nor LLaMA shaped (ALiBi) */
    pt_model alibi = m;
    alibi.pos = PT_POS_ALIBI;
    char alibi_step[4096];
    write_step(in_scratch(alibi_step, "step-alibi"), &alibi, &b);
    const char *neither[] = {alibi_step, fresh, NULL};
    refused(neither, "fit neither GPT-2", fresh);
    hfree(&b);
    /* a mixture of experts that Mixtral's config cannot say (a dense first layer) */
    pt_model tiny_moe = builtin("tiny-moe");
    char moe_step[4096];
    write_step(in_scratch(moe_step, "step-tiny-moe"), &tiny_moe, &b);
    const char *dense_first[] = {moe_step, fresh, NULL};
    refused(dense_first, "moe.first_dense 1, moe.every 1 leave dense layers, but Mixtral has a "
                         "mixture of experts in every layer", fresh);
    hfree(&b);
}

/* ---- Main ------------------------------------------------------------------------------------------ */

/* Removes path and all under it (links are removed, not followed). */
static void remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        for (const struct dirent *e; d && (e = readdir(d)) != NULL;) {
            char child[4096];
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                PATHF(child, "%s/%s", path, e->d_name);
                remove_tree(child);
            }
        }
        if (d)
            closedir(d);
    }
    CHECK(remove(path) == 0);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: test_hf SCRATCH_DIR PATH/TO/ptconvert\n");
        return 2;
    }
    snprintf(scratch, sizeof scratch, "%s/test_hf-%ld", argv[1], (long)getpid());
    make_dir(scratch);
    ptconvert = argv[2];
    test_f16();
    test_bf16();
    pt_model gpt2 = gpt2_spec(), llama = llama_spec(), tied_llama = llama, untied_gpt2 = gpt2;
    tied_llama.tied_embeddings = true;
    untied_gpt2.tied_embeddings = false;
    test_names(&gpt2);
    test_names(&llama);
    test_names(&tied_llama);
    test_names(&untied_gpt2);
    pt_model qwen3 = qwen3_spec(), mixtral = mixtral_spec(), qmoe = builtin("tiny-qwen3-moe");
    pt_model sparse = qwen3_moe_sparse_spec();
    test_names(&qwen3);
    test_names(&mixtral);
    test_names(&qmoe);
    test_names(&sparse);
    test_gpt2();
    test_llama();
    test_maps();
    test_family_refusals();
    test_qwen3();
    test_round_trip();
    test_moe_configs();
    test_ptconvert_cli();
    int rc = pt_check_result();
    if (rc == 0)
        remove_tree(scratch);
    return rc;
}
