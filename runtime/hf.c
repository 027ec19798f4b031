/*
 * A Hugging Face model directory as a source of our parameter tensors (pt_hf_open,
 * runtime/hf.h): config.json checked against our model spec, the safetensors files
 * (one, or shards named by model.safetensors.index.json) opened by their headers, and
 * each tensor read on demand, converted to fp32 once and kept while the caller reads
 * its parts. What goes where is runtime/hf_map.c's.
 *
 * config.json's fields are transformers' (models/gpt2/configuration_gpt2.py,
 * models/llama/configuration_llama.py, models/qwen3/configuration_qwen3.py,
 * models/mixtral/configuration_mixtral.py, models/qwen3_moe/configuration_qwen3_moe.py);
 * a field left out takes the class default, as from_pretrained would give it
 * (save_pretrained drops some of them).
 */
#include "hf_internal.h"
#include "specjson.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { HF_PATH_MAX = 4096 };

/* A field whose default is None (computed from others), as cfg_int's dflt. */
#define HF_NONE INT64_MIN

/* ---- config.json ------------------------------------------------------------------------- */

typedef struct {
    const json_t *root;
    const char *path;      /* of config.json, for messages */
    const pt_model *m;
    pt_err *err;
} hf_cfg;

static int cfg_type(const hf_cfg *c, const char *key, const char *want)
{
    return pt_err_set(c->err, "%s: field '%s': expected %s", c->path, key, want);
}

/* Field `key`, or dflt when it is absent or null. */
static int cfg_int(const hf_cfg *c, const char *key, int64_t dflt, int64_t *out)
{
    const json_t *v = json_object_get(c->root, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return cfg_type(c, key, "an integer");
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int cfg_real(const hf_cfg *c, const json_t *obj, const char *key, double dflt,
                    double *out)
{
    const json_t *v = json_object_get(obj, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return cfg_type(c, key, "a number");
    *out = json_number_value(v);
    return 0;
}

static int cfg_bool(const hf_cfg *c, const char *key, bool dflt, bool *out)
{
    const json_t *v = json_object_get(c->root, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return cfg_type(c, key, "true or false");
    *out = json_is_true(v);
    return 0;
}

static int cfg_str(const hf_cfg *c, const char *key, const char *dflt, const char **out)
{
    const json_t *v = json_object_get(c->root, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return cfg_type(c, key, "a string");
    *out = json_string_value(v);
    return 0;
}

/* Their `key` against our `field`: equal, or an error naming both. */
static int cfg_same(const hf_cfg *c, const char *key, int64_t theirs, const char *field,
                    int64_t ours)
{
    if (theirs == ours)
        return 0;
    return pt_err_set(c->err, "%s: %s = %" PRId64 ", but model '%s' has %s = %" PRId64, c->path,
                      key, theirs, c->m->name, field, ours);
}

static int cfg_same_bool(const hf_cfg *c, const char *key, bool theirs, const char *field,
                         bool ours)
{
    if (theirs == ours)
        return 0;
    return pt_err_set(c->err, "%s: %s = %s, but model '%s' has %s = %s", c->path, key,
                      theirs ? "true" : "false", c->m->name, field, ours ? "true" : "false");
}

static int cfg_eps(const hf_cfg *c, const char *key, double dflt)
{
    double eps;
    if (cfg_real(c, c->root, key, dflt, &eps))
        return -1;
    if (fabs(eps - PT_HF_NORM_EPS) <= PT_HF_NORM_EPS * 1e-6)
        return 0;
    return pt_err_set(c->err, "%s: %s = %g, but ptrun's norms use eps = %g", c->path, key, eps,
                      PT_HF_NORM_EPS);
}

/* The vocabulary: theirs may be smaller than ours (the rows past it start at zero). */
static int cfg_vocab(const hf_cfg *c, int64_t v, hf_layout *l)
{
    if (v < 1 || v > c->m->vocab)
        return pt_err_set(c->err, "%s: vocab_size = %" PRId64 ", but model '%s' has vocab = "
                          "%" PRId64 " (a Hugging Face vocabulary must be at least 1 and at "
                          "most ours)", c->path, v, c->m->name, c->m->vocab);
    l->vocab = v;
    return 0;
}

/* The model must be of the family config.json's model_type names. */
static int cfg_family(const hf_cfg *c, hf_family want)
{
    hf_family have;
    pt_err why;
    const char *type = hf_family_type(want);
    if (hf_family_of(c->m, &have, &why) != 0)
        return pt_err_set(c->err, "%s: model_type = '%s', but %s", c->path, type, why.msg);
    if (have != want)
        return pt_err_set(c->err, "%s: model_type = '%s', but model '%s' is %s", c->path, type,
                          c->m->name, hf_family_shape(have));
    return 0;
}

/* GPT2Config's defaults (vocab_size 50257, n_positions 1024, n_embd 768, n_layer 12,
 * n_head 12, n_inner None = 4·n_embd, activation_function gelu_new, layer_norm_epsilon
 * 1e-5, scale_attn_weights True, scale_attn_by_inverse_layer_idx False) and
 * PretrainedConfig's tie_word_embeddings True. */
static int cfg_gpt2(const hf_cfg *c, hf_layout *l)
{
    const pt_model *m = c->m;
    int64_t h, layers, heads, ffn, vocab, npos;
    bool tied, scale, by_layer;
    const char *act;
    if (cfg_family(c, HF_GPT2) || cfg_int(c, "n_embd", 768, &h) ||
        cfg_int(c, "n_layer", 12, &layers) || cfg_int(c, "n_head", 12, &heads) ||
        cfg_int(c, "n_inner", HF_NONE, &ffn) || cfg_int(c, "vocab_size", 50257, &vocab) ||
        cfg_int(c, "n_positions", 1024, &npos) ||
        cfg_str(c, "activation_function", "gelu_new", &act) ||
        cfg_bool(c, "tie_word_embeddings", true, &tied) ||
        cfg_bool(c, "scale_attn_weights", true, &scale) ||
        cfg_bool(c, "scale_attn_by_inverse_layer_idx", false, &by_layer))
        return -1;
    if (ffn == HF_NONE && !pt_mul64(4, h, &ffn)) /* GPT2Block: 4 * hidden_size when None */
        return cfg_type(c, "n_embd", "a size");
    if (cfg_same(c, "n_embd", h, "hidden", m->hidden) ||
        cfg_same(c, "n_layer", layers, "layers", m->layers) ||
        cfg_same(c, "n_head", heads, "heads", m->heads) ||
        cfg_same(c, "n_inner", ffn, "ffn", m->ffn) || cfg_vocab(c, vocab, l) ||
        cfg_eps(c, "layer_norm_epsilon", 1e-5) ||
        cfg_same_bool(c, "tie_word_embeddings", tied, "tied_embeddings", m->tied_embeddings))
        return -1;
    if (npos < m->seq)
        return pt_err_set(c->err, "%s: n_positions = %" PRId64 ", but model '%s' has seq = "
                          "%" PRId64 " (GPT-2 has no positions past n_positions)", c->path, npos,
                          m->name, m->seq);
    /* kernels/cpu/act.c computes GELU's tanh approximation: transformers' gelu_new and
     * gelu_pytorch_tanh (activations.py), not the exact "gelu" */
    if (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return pt_err_set(c->err, "%s: activation_function = '%.32s', but model '%s' has "
                          "activation gelu, the tanh approximation (gelu_new)", c->path, act,
                          m->name);
    if (!scale || by_layer)
        return pt_err_set(c->err, "%s: %s = %s, but ptrun scales attention scores by "
                          "1/sqrt(d) alone", c->path, !scale ? "scale_attn_weights" :
                          "scale_attn_by_inverse_layer_idx", !scale ? "false" : "true");
    l->positions = npos;
    return 0;
}

/* RoPE's base and scaling: rope_theta (dflt, the config class's, when absent), or
 * (newer transformers) rope_parameters. */
static int cfg_rope(const hf_cfg *c, double dflt)
{
    const json_t *params = json_object_get(c->root, "rope_parameters");
    const json_t *scaling = json_object_get(c->root, "rope_scaling");
    const json_t *type = json_is_object(params) ? json_object_get(params, "rope_type") : NULL;
    double theta;
    if (cfg_real(c, json_is_object(params) ? params : c->root, "rope_theta", dflt, &theta))
        return -1;
    if (fabs(theta - PT_HF_ROPE_THETA) > 1e-6 * PT_HF_ROPE_THETA)
        return pt_err_set(c->err, "%s: rope_theta = %g, but ptrun's RoPE uses %g", c->path,
                          theta, PT_HF_ROPE_THETA);
    if ((scaling && !json_is_null(scaling)) ||
        (type && (!json_is_string(type) || strcmp(json_string_value(type), "default") != 0)))
        return pt_err_set(c->err, "%s: %s is set, but ptrun's RoPE has no scaling", c->path,
                          type ? "rope_parameters.rope_type" : "rope_scaling");
    return 0;
}

/* A sliding window `key` of `size` keys, when on: one of at least our seq keys is full
 * attention over every training sequence, as ours is; a narrower one is refused. */
static int cfg_window(const hf_cfg *c, const char *key, bool on, int64_t size)
{
    if (!on || size >= c->m->seq)
        return 0;
    return pt_err_set(c->err, "%s: %s = %" PRId64 ", but model '%s' attends in full over seq = "
                      "%" PRId64, c->path, key, size, c->m->name, c->m->seq);
}

/* The defaults of a LLaMA-like config class where config.json leaves a field out
 * (HF_NONE: computed from others): models/llama/configuration_llama.py (LlamaConfig;
 * rope_theta 10000, rms_norm_eps 1e-6, num_key_value_heads None = heads, head_dim None =
 * hidden / heads), models/qwen3/configuration_qwen3.py (head_dim 128, num_key_value_heads
 * 32), models/mixtral/configuration_mixtral.py (rope_theta 1e6, rms_norm_eps 1e-5) and
 * models/qwen3_moe/configuration_qwen3_moe.py. All: hidden_act silu, tie_word_embeddings
 * False. */
typedef struct {
    hf_family family;
    int64_t vocab, hidden, ffn, layers, heads, kv, head_dim;
    double eps, theta;
} hf_llama_defaults;

static const hf_llama_defaults llama_defaults[] = {
    {HF_LLAMA, 32000, 4096, 11008, 32, 32, HF_NONE, HF_NONE, 1e-6, 1e4},
    {HF_QWEN3, 151936, 4096, 22016, 32, 32, 32, 128, 1e-6, 1e4},
    {HF_MIXTRAL, 32000, 4096, 14336, 32, 32, 8, HF_NONE, 1e-5, 1e6},
    {HF_QWEN3_MOE, 151936, 2048, 6144, 24, 32, 4, HF_NONE, 1e-6, 1e4},
};

/* The count of experts under `key`, or under `alt` when only that is there (transformers
 * maps one name to the other: attribute_map {"num_experts": "num_local_experts"}). */
static int cfg_experts(const hf_cfg *c, const char *key, const char *alt, int64_t dflt)
{
    int64_t e;
    if (!json_object_get(c->root, key) && json_object_get(c->root, alt))
        key = alt;
    if (cfg_int(c, key, dflt, &e))
        return -1;
    return cfg_same(c, key, e, "moe.experts", c->m->moe.experts);
}

/* MixtralConfig: num_local_experts 8, num_experts_per_tok 2, intermediate_size the
 * experts' (every layer is sparse), sliding_window None (full attention). The
 * router's jitter noise and router_aux_loss_coef are training settings: the run's own
 * (the model spec's moe.aux_loss) apply. */
static int cfg_mixtral(const hf_cfg *c, int64_t ffn)
{
    const pt_model *m = c->m;
    int64_t k, window;
    if (cfg_experts(c, "num_local_experts", "num_experts", 8) ||
        cfg_int(c, "num_experts_per_tok", 2, &k) ||
        cfg_same(c, "num_experts_per_tok", k, "moe.top_k", m->moe.top_k) ||
        cfg_same(c, "intermediate_size", ffn, "moe.expert_ffn", m->moe.expert_ffn) ||
        cfg_int(c, "sliding_window", HF_NONE, &window) ||
        cfg_window(c, "sliding_window", window != HF_NONE, window))
        return -1;
    return 0;
}

/* Qwen3-MoE's sparse layers must be ours: Qwen3MoeDecoderLayer (modeling_qwen3_moe.py)
 * puts the mixture in layer i unless i is in mlp_only_layers, when (i + 1) %
 * decoder_sparse_step == 0; ours are pt_model_layer_moe's (i >= first_dense, i % every
 * == 0). */
static int cfg_sparse_layers(const hf_cfg *c)
{
    const pt_model *m = c->m;
    const json_t *only = json_object_get(c->root, "mlp_only_layers");
    size_t n = json_array_size(only); /* 0 for null or absent */
    int64_t step;
    if (cfg_int(c, "decoder_sparse_step", 1, &step))
        return -1;
    if (step < 1)
        return cfg_type(c, "decoder_sparse_step", "a positive integer");
    bool ok = !only || json_is_null(only) || json_is_array(only);
    for (size_t i = 0; ok && i < n; i++)
        ok = json_is_integer(json_array_get(only, i));
    if (!ok)
        return cfg_type(c, "mlp_only_layers", "a list of layer numbers");
    for (int64_t layer = 0; layer < m->layers; layer++) {
        bool sparse = (layer + 1) % step == 0;
        for (size_t i = 0; i < n; i++)
            sparse = sparse && json_integer_value(json_array_get(only, i)) != layer;
        if (sparse != pt_model_layer_moe(m, layer))
            return pt_err_set(c->err, "%s: decoder_sparse_step = %" PRId64 " and "
                              "mlp_only_layers make layer %" PRId64 " %s, but model '%s' has "
                              "%s there (moe.first_dense = %" PRId64 ", moe.every = %" PRId64
                              ")", c->path, step, layer, sparse ? "sparse" : "dense", m->name,
                              sparse ? "a dense MLP" : "a mixture of experts",
                              m->moe.first_dense, m->moe.every);
    }
    return 0;
}

/* Qwen3MoeConfig: num_experts 128, num_experts_per_tok 8, moe_intermediate_size 768,
 * norm_topk_prob False, decoder_sparse_step 1, mlp_only_layers [], intermediate_size the
 * dense layers' (compared only when the model has one: unused otherwise, as in the
 * released configs), attention_bias False, use_sliding_window False (sliding_window
 * 4096). router_aux_loss_coef is a training setting, as Mixtral's. */
static int cfg_qwen3_moe(const hf_cfg *c, int64_t ffn)
{
    const pt_model *m = c->m;
    int64_t k, fe, window;
    bool renorm, bias, sliding;
    bool dense = pt_model_moe_layers(m, 0, m->layers) < m->layers;
    if (cfg_experts(c, "num_experts", "num_local_experts", 128) ||
        cfg_int(c, "num_experts_per_tok", 8, &k) ||
        cfg_same(c, "num_experts_per_tok", k, "moe.top_k", m->moe.top_k) ||
        cfg_int(c, "moe_intermediate_size", 768, &fe) ||
        cfg_same(c, "moe_intermediate_size", fe, "moe.expert_ffn", m->moe.expert_ffn) ||
        cfg_bool(c, "norm_topk_prob", false, &renorm) ||
        cfg_same_bool(c, "norm_topk_prob", renorm, "moe.renorm", m->moe.renorm) ||
        cfg_sparse_layers(c) || (dense && cfg_same(c, "intermediate_size", ffn, "ffn", m->ffn)) ||
        cfg_bool(c, "attention_bias", false, &bias) ||
        cfg_same_bool(c, "attention_bias", bias, "bias", m->bias) ||
        cfg_bool(c, "use_sliding_window", false, &sliding) ||
        cfg_int(c, "sliding_window", 4096, &window) ||
        cfg_window(c, "sliding_window", sliding, window))
        return -1;
    return 0;
}

/* The rest of LLaMA's (attention_bias, mlp_bias False) and Qwen3's (attention_bias
 * False, no MLP bias; use_sliding_window False): the dense MLP is ffn wide. */
static int cfg_dense(const hf_cfg *c, hf_family f, int64_t ffn)
{
    const pt_model *m = c->m;
    bool attn_bias, mlp_bias, sliding;
    int64_t window;
    if (cfg_same(c, "intermediate_size", ffn, "ffn", m->ffn) ||
        cfg_bool(c, "attention_bias", false, &attn_bias) ||
        cfg_same_bool(c, "attention_bias", attn_bias, "bias", m->bias))
        return -1;
    if (f == HF_LLAMA && (cfg_bool(c, "mlp_bias", false, &mlp_bias) ||
                          cfg_same_bool(c, "mlp_bias", mlp_bias, "bias", m->bias)))
        return -1;
    if (f == HF_QWEN3 && (cfg_bool(c, "use_sliding_window", false, &sliding) ||
                          cfg_int(c, "sliding_window", 4096, &window) ||
                          cfg_window(c, "sliding_window", sliding, window)))
        return -1;
    return 0;
}

/* The fields every LLaMA-like family has, then the family's own. */
static int cfg_llama(const hf_cfg *c, hf_layout *l, const hf_llama_defaults *d)
{
    const pt_model *m = c->m;
    int64_t h, layers, heads, kv, ffn, vocab, hd;
    bool tied;
    const char *act;
    if (cfg_family(c, d->family) || cfg_int(c, "hidden_size", d->hidden, &h) ||
        cfg_int(c, "num_hidden_layers", d->layers, &layers) ||
        cfg_int(c, "num_attention_heads", d->heads, &heads) ||
        cfg_int(c, "num_key_value_heads", d->kv, &kv) ||
        cfg_int(c, "intermediate_size", d->ffn, &ffn) ||
        cfg_int(c, "vocab_size", d->vocab, &vocab) ||
        cfg_int(c, "head_dim", d->head_dim, &hd) || cfg_str(c, "hidden_act", "silu", &act) ||
        cfg_bool(c, "tie_word_embeddings", false, &tied))
        return -1;
    if (cfg_same(c, "hidden_size", h, "hidden", m->hidden) ||
        cfg_same(c, "num_hidden_layers", layers, "layers", m->layers) ||
        cfg_same(c, "num_attention_heads", heads, "heads", m->heads) ||
        cfg_same(c, "num_key_value_heads", kv == HF_NONE ? heads : kv, "kv_heads", m->kv_heads) ||
        cfg_same(c, "head_dim", hd == HF_NONE ? m->hidden / m->heads : hd, "head_dim",
                 pt_model_head_dim(m)) ||
        cfg_vocab(c, vocab, l) || cfg_eps(c, "rms_norm_eps", d->eps) || cfg_rope(c, d->theta) ||
        cfg_same_bool(c, "tie_word_embeddings", tied, "tied_embeddings", m->tied_embeddings))
        return -1;
    if (strcmp(act, "silu") != 0)
        return pt_err_set(c->err, "%s: hidden_act = '%.32s', but model '%s' has activation "
                          "swiglu, whose gate is silu", c->path, act, m->name);
    switch (d->family) {
    case HF_MIXTRAL:
        return cfg_mixtral(c, ffn);
    case HF_QWEN3_MOE:
        return cfg_qwen3_moe(c, ffn);
    default:
        return cfg_dense(c, d->family, ffn);
    }
}

/* Reads dir/config.json and checks it against m; fills l's family and sizes. */
static int hf_read_config(const char *dir, const pt_model *m, hf_layout *l, pt_err *err)
{
    char path[HF_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return pt_err_set(err, "%s: path too long", dir);
    char *text = pt_json_read_file(path, err);
    if (!text)
        return -1;
    pt_json_obj top;
    json_t *root = pt_json_parse_object(text, path, &top, err);
    free(text);
    if (!root)
        return -1;
    hf_cfg c = {.root = root, .path = path, .m = m, .err = err};
    const char *type = NULL;
    const hf_llama_defaults *d = NULL;
    int rc = cfg_str(&c, "model_type", NULL, &type);
    for (size_t i = 0; rc == 0 && type && i < sizeof llama_defaults / sizeof *llama_defaults; i++)
        if (!strcmp(type, hf_family_type(llama_defaults[i].family)))
            d = &llama_defaults[i];
    if (rc == 0 && !type) {
        rc = pt_err_set(err, "%s: no field 'model_type' (gpt2, llama, qwen3, mixtral or "
                        "qwen3_moe)", path);
    } else if (rc == 0 && !strcmp(type, "gpt2")) {
        l->family = HF_GPT2;
        rc = cfg_gpt2(&c, l);
    } else if (rc == 0 && d) {
        l->family = d->family;
        rc = cfg_llama(&c, l, d);
    } else if (rc == 0) {
        rc = pt_err_set(err, "%s: model_type = '%.64s': only gpt2, llama, qwen3, mixtral and "
                        "qwen3_moe are read", path, type);
    }
    json_decref(root);
    return rc;
}

/* ---- The safetensors files ------------------------------------------------------------------ */

typedef struct {
    pt_wsrc base;
    char dir[HF_PATH_MAX];
    char index[HF_PATH_MAX];  /* model.safetensors.index.json, for messages; "" without */
    pt_model m;
    hf_layout lay;
    json_t *weight_map;       /* the index's; NULL: one file, model.safetensors */
    char (*file_name)[256];   /* files opened so far (their headers) */
    pt_st_file **file;
    int n_files;
    char cached[128];         /* their tensor now in buf ("" for none) */
    float *buf;               /* (cap) its elements as fp32 */
    int64_t cap;
} hf_src;

/* The file `name` of the directory, opened by its header (once). */
static int hf_file(hf_src *s, const char *name, pt_st_file **out, pt_err *err)
{
    for (int i = 0; i < s->n_files; i++)
        if (!strcmp(s->file_name[i], name)) {
            *out = s->file[i];
            return 0;
        }
    char path[HF_PATH_MAX];
    if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
        strlen(name) >= sizeof s->file_name[0])
        return pt_err_set(err, "%s: names file '%.80s', which is not a file of this folder",
                          s->index, name);
    if (snprintf(path, sizeof path, "%s/%s", s->dir, name) >= (int)sizeof path)
        return pt_err_set(err, "%s/%s: path too long", s->dir, name);
    void *names = realloc(s->file_name, (size_t)(s->n_files + 1) * sizeof *s->file_name);
    if (names)
        s->file_name = names;
    void *files = realloc(s->file, (size_t)(s->n_files + 1) * sizeof *s->file);
    if (files)
        s->file = files;
    if (!names || !files)
        return pt_err_set(err, "%s: out of memory", path);
    if (pt_st_open_header(path, out, err))
        return -1;
    snprintf(s->file_name[s->n_files], sizeof s->file_name[0], "%s", name);
    s->file[s->n_files++] = *out;
    return 0;
}

/* Their tensor `name`, checked against a dtype we read and (ndim >= 0) a shape. */
static int hf_tensor(hf_src *s, const char *name, int ndim, const int64_t *shape,
                     pt_st_file **f, const pt_st_tensor **t, pt_err *err)
{
    const char *file = "model.safetensors";
    if (s->weight_map) {
        const json_t *v = json_object_get(s->weight_map, name);
        if (!v)
            return pt_err_set(err, "%s: no tensor '%.128s' in its weight_map", s->index, name);
        file = json_string_value(v);
    }
    if (hf_file(s, file, f, err) || pt_st_get(*f, name, NULL, ndim, ndim >= 0 ? shape : NULL,
                                               t, err))
        return -1;
    const char *dt = (*t)->dtype;
    if (strcmp(dt, "F32") && strcmp(dt, "F16") && strcmp(dt, "BF16"))
        return pt_err_set(err, "%s/%s: tensor '%.128s': dtype %s (F32, F16 or BF16 are read)",
                          s->dir, file, name, dt);
    return 0;
}

static bool hf_has(hf_src *s, const char *name)
{
    pt_st_file *f;
    const pt_st_tensor *t;
    pt_err ignored;
    return hf_tensor(s, name, -1, NULL, &f, &t, &ignored) == 0;
}

/* The weight map of model.safetensors.index.json: an object of file names. */
static int hf_read_index(hf_src *s, pt_err *err)
{
    char *text = pt_json_read_file(s->index, err);
    pt_json_obj top;
    json_t *root = text ? pt_json_parse_object(text, s->index, &top, err) : NULL;
    free(text);
    if (!root)
        return -1;
    json_t *map = json_object_get(root, "weight_map");
    const char *key;
    json_t *v;
    bool ok = json_is_object(map);
    json_object_foreach(ok ? map : NULL, key, v) ok = ok && json_is_string(v);
    if (ok)
        s->weight_map = json_incref(map);
    json_decref(root);
    return ok ? 0 : pt_err_set(err, "%s: field 'weight_map': expected an object of file names",
                               s->index);
}

/* model.safetensors, else model.safetensors.index.json. */
static int hf_open_files(hf_src *s, pt_err *err)
{
    char single[HF_PATH_MAX];
    struct stat st;
    if (snprintf(single, sizeof single, "%s/model.safetensors", s->dir) >= (int)sizeof single ||
        snprintf(s->index, sizeof s->index, "%s/model.safetensors.index.json", s->dir) >=
            (int)sizeof s->index)
        return pt_err_set(err, "%s: path too long", s->dir);
    if (stat(single, &st) == 0) {
        s->index[0] = '\0';
        return 0;
    }
    if (stat(s->index, &st) != 0)
        return pt_err_set(err, "%s: neither model.safetensors nor model.safetensors.index.json "
                          "(only safetensors weights are read)", s->dir);
    return hf_read_index(s, err);
}

/* ---- The source ------------------------------------------------------------------------------ */

/* Converts their tensor of part p to fp32 in s->buf (unless it is there already). */
static int hf_load(hf_src *s, const hf_part *p, pt_err *err)
{
    const char *name = p->hf;
    if (!strcmp(s->cached, name))
        return 0;
    pt_st_file *f;
    const pt_st_tensor *t;
    if (hf_tensor(s, name, p->ndim, p->shape, &f, &t, err))
        return -1;
    bool f32 = !strcmp(t->dtype, "F32");
    int64_t n = (int64_t)t->bytes / (f32 ? 4 : 2);
    s->cached[0] = '\0';
    if (n > s->cap) {
        float *buf = realloc(s->buf, (size_t)n * sizeof *buf);
        if (!buf)
            return pt_err_set(err, "%s: tensor '%.128s': out of memory for %" PRId64
                              " floats", s->dir, name, n);
        s->buf = buf;
        s->cap = n;
    }
    if (f32) {
        if (pt_st_read(f, t, 0, t->bytes, s->buf, err))
            return -1;
    } else {
        uint16_t *raw = malloc(t->bytes + 1);
        if (!raw)
            return pt_err_set(err, "%s: tensor '%.128s': out of memory", s->dir, name);
        int rc = pt_st_read(f, t, 0, t->bytes, raw, err);
        bool bf16 = !strcmp(t->dtype, "BF16");
        for (int64_t i = 0; rc == 0 && i < n; i++)
            s->buf[i] = bf16 ? hf_bf16_to_f32(raw[i]) : hf_f16_to_f32(raw[i]);
        free(raw);
        if (rc)
            return -1;
    }
    snprintf(s->cached, sizeof s->cached, "%s", name);
    return 0;
}

/* The caller's shape and range against our tensor's; *cols is its row length. */
static int hf_check_ask(const hf_src *s, const hf_map *mp, const char *name, int ndim,
                        const int64_t *shape, int64_t lo, int64_t count, int64_t *cols,
                        pt_err *err)
{
    bool vocab_rows = mp->ours_shape[0] < 0;
    bool ok = ndim == mp->ours_ndim && shape &&
              (vocab_rows ? shape[0] >= s->m.vocab : shape[0] == mp->ours_shape[0]) &&
              (ndim == 1 || shape[1] == mp->ours_shape[1]);
    int64_t n = 0;
    *cols = ndim == 2 ? mp->ours_shape[1] : 1;
    if (!ok || !pt_mul64(shape[0], *cols, &n))
        return pt_err_set(err, "%s: parameter '%s': asked for a shape of %d dimensions "
                          "(%" PRId64 ", %" PRId64 "); model '%s' has (%s%" PRId64 ", %" PRId64
                          ")", s->dir, name, ndim, shape ? shape[0] : 0,
                          shape && ndim == 2 ? shape[1] : 0, s->m.name,
                          vocab_rows ? ">= " : "", vocab_rows ? s->m.vocab : mp->ours_shape[0],
                          mp->ours_ndim == 2 ? mp->ours_shape[1] : 0);
    if (lo < 0 || count < 0 || lo > n || count > n - lo)
        return pt_err_set(err, "%s: parameter '%s': elements [%" PRId64 ", %" PRId64 ") are "
                          "outside its %" PRId64, s->dir, name, lo, lo + count, n);
    return 0;
}

static int hf_read(pt_wsrc *base, const char *name, int ndim, const int64_t *shape, int64_t lo,
                   int64_t count, float *dst, pt_err *err)
{
    hf_src *s = (hf_src *)base;
    hf_map mp;
    int64_t cols;
    if (hf_map_of(&s->m, &s->lay, name, &mp, err) ||
        hf_check_ask(s, &mp, name, ndim, shape, lo, count, &cols, err))
        return -1;
    for (int64_t e = lo, k = 0; e < lo + count;) {
        int64_t r = e / cols, c = e % cols, len = cols - c, at, stride;
        int part;
        if (len > lo + count - e)
            len = lo + count - e;
        bool here = hf_row(&mp, r, &part, &at, &stride);
        if (here && hf_load(s, &mp.part[part], err)) /* cached: loads once per part */
            return -1;
        for (int64_t j = 0; j < len; j++)
            dst[k++] = here ? s->buf[at + (c + j) * stride] : 0.0f;
        e += len;
    }
    return 0;
}

static void hf_close(pt_wsrc *base)
{
    hf_src *s = (hf_src *)base;
    for (int i = 0; i < s->n_files; i++)
        pt_st_close(s->file[i]);
    json_decref(s->weight_map);
    free(s->file_name);
    free(s->file);
    free(s->buf);
    free(s);
}

/* Every tensor the model needs is there, of a dtype we read and the shape the map says;
 * GPT-2's names with or without "transformer." (save_pretrained's and the original
 * files'). */
static int hf_check_tensors(hf_src *s, pt_err *err)
{
    if (s->lay.family == HF_GPT2)
        s->lay.prefix = hf_has(s, "transformer.wte.weight") || !hf_has(s, "wte.weight")
                            ? "transformer."
                            : "";
    char(*names)[48] = NULL;
    int n = 0, rc = hf_param_names(&s->m, &names, &n, err);
    for (int i = 0; rc == 0 && i < n; i++) {
        hf_map mp;
        pt_st_file *f;
        const pt_st_tensor *t;
        rc = hf_map_of(&s->m, &s->lay, names[i], &mp, err);
        for (int k = 0; rc == 0 && k < mp.parts; k++)
            rc = hf_tensor(s, mp.part[k].hf, mp.part[k].ndim, mp.part[k].shape, &f, &t, err);
    }
    free(names);
    return rc ? -1 : 0;
}

int pt_hf_open(const char *dir, const pt_model *spec, pt_wsrc **out, pt_err *err)
{
    *out = NULL;
    if (pt_model_validate(spec, spec->name, err))
        return -1;
    hf_src *s = calloc(1, sizeof *s);
    if (!s)
        return pt_err_set(err, "%s: out of memory", dir);
    s->base = (pt_wsrc){hf_read, hf_close};
    s->m = *spec;
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len == 0 || len >= sizeof s->dir - 64) {
        free(s);
        return pt_err_set(err, "Hugging Face directory '%.64s': empty or too long a path", dir);
    }
    memcpy(s->dir, dir, len);
    s->lay.prefix = "";
    if (hf_read_config(s->dir, spec, &s->lay, err) || hf_open_files(s, err) ||
        hf_check_tensors(s, err)) {
        hf_close(&s->base);
        return -1;
    }
    *out = &s->base;
    return 0;
}
