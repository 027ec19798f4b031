/*
 * Our model as a Hugging Face directory (pt_hf_export, runtime/hf.h): every tensor read
 * from a source of whole tensors under our names, put where runtime/hf_map.c says it
 * sits in theirs (the inverse of what pt_hf_open reads), converted to the chosen dtype,
 * and written as model.safetensors beside a config.json that transformers'
 * GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM or
 * Qwen3MoeForCausalLM loads (the family hf_family_of gives the model). Nothing is
 * written until every tensor has been read and converted; each file goes through a
 * temporary name, config.json last.
 */
#include "hf_internal.h"
#include "specjson.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { EX_PATH_MAX = 4096 };

/* One of their tensors being filled. */
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[2];
    int64_t n;          /* elements */
    int64_t written;    /* elements put in place so far: n at the end, or the map is wrong */
    float *data;        /* (n) fp32; converted in place to a 16-bit dtype before writing */
} ex_tensor;

typedef struct {
    ex_tensor *t;
    int n, cap;
    float *ours;        /* one of our tensors, as read */
    int64_t ours_cap;
} ex_set;

static void ex_free(ex_set *x)
{
    for (int i = 0; i < x->n; i++)
        free(x->t[i].data);
    free(x->t);
    free(x->ours);
}

/* The index of their tensor of part p: found, or added zeroed; -1 when out of memory. */
static int ex_tensor_of(ex_set *x, const hf_part *p, pt_err *err)
{
    for (int i = 0; i < x->n; i++)
        if (!strcmp(x->t[i].name, p->hf))
            return i;
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 64;
        ex_tensor *t = realloc(x->t, (size_t)cap * sizeof *t);
        if (!t)
            return pt_err_set(err, "out of memory for %d tensors", cap);
        x->t = t;
        x->cap = cap;
    }
    ex_tensor *t = &x->t[x->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", p->hf);
    t->ndim = p->ndim;
    t->shape[0] = p->shape[0];
    t->shape[1] = p->shape[1];
    if (!pt_mul64(p->shape[0], p->ndim == 2 ? p->shape[1] : 1, &t->n) ||
        t->n > (int64_t)(SIZE_MAX / sizeof(float)) ||
        !(t->data = calloc((size_t)t->n + 1, sizeof(float))))
        return pt_err_set(err, "tensor '%s': out of memory for %" PRId64 " floats", p->hf, t->n);
    return x->n++;
}

/* Our tensor `name` (rows: vocab_rows for the embedding and head), read whole from src
 * and put in place in theirs (one or more). */
static int ex_put(ex_set *x, const pt_model *m, const hf_layout *l, const char *name,
                  int64_t vocab_rows, pt_wsrc *src, pt_err *err)
{
    hf_map mp;
    if (hf_map_of(m, l, name, &mp, err))
        return -1;
    int64_t shape[2] = {mp.ours_shape[0] < 0 ? vocab_rows : mp.ours_shape[0], mp.ours_shape[1]};
    int64_t cols = mp.ours_ndim == 2 ? shape[1] : 1, n;
    if (!pt_mul64(shape[0], cols, &n) || n > (int64_t)(SIZE_MAX / sizeof(float)))
        return pt_err_set(err, "parameter '%s': too large", name);
    if (n > x->ours_cap) {
        float *p = realloc(x->ours, (size_t)n * sizeof *p);
        if (!p)
            return pt_err_set(err, "parameter '%s': out of memory for %" PRId64 " floats", name,
                              n);
        x->ours = p;
        x->ours_cap = n;
    }
    int idx[HF_PARTS_MAX]; /* indices, not pointers: adding a tensor may move x->t */
    for (int k = 0; k < mp.parts; k++)
        if ((idx[k] = ex_tensor_of(x, &mp.part[k], err)) < 0)
            return -1;
    if (src->read(src, name, mp.ours_ndim, shape, 0, n, x->ours, err))
        return -1;
    for (int64_t r = 0; r < shape[0]; r++) {
        int64_t at, stride;
        int k;
        if (!hf_row(&mp, r, &k, &at, &stride))
            continue; /* a padding row of the vocabulary */
        ex_tensor *t = &x->t[idx[k]];
        for (int64_t c = 0; c < cols; c++)
            t->data[at + c * stride] = x->ours[r * cols + c];
        t->written += cols;
    }
    return 0;
}

/* Every tensor of the model read into theirs, each filled exactly. */
static int ex_gather(ex_set *x, const pt_model *m, const hf_layout *l, int64_t vocab_rows,
                     pt_wsrc *src, pt_err *err)
{
    char(*names)[48] = NULL;
    int n = 0, rc = hf_param_names(m, &names, &n, err);
    for (int i = 0; rc == 0 && i < n; i++)
        rc = ex_put(x, m, l, names[i], vocab_rows, src, err);
    free(names);
    for (int i = 0; rc == 0 && i < x->n; i++)
        if (x->t[i].written != x->t[i].n) /* a map that leaves holes or overlaps: a bug */
            rc = pt_err_set(err, "tensor '%s': %" PRId64 " of its %" PRId64 " elements "
                            "written (runtime/hf_map.c)", x->t[i].name, x->t[i].written,
                            x->t[i].n);
    return rc ? -1 : 0;
}

/* Converts every tensor to dtype in place (a 16-bit element i lands at bytes 2i, below
 * the float i it comes from, which is read first) and describes it for pt_st_write. */
static void ex_convert(ex_set *x, const char *dtype, pt_st_tensor *out)
{
    bool f32 = !strcmp(dtype, "F32"), bf16 = !strcmp(dtype, "BF16");
    for (int i = 0; i < x->n; i++) {
        ex_tensor *t = &x->t[i];
        char *bytes = (char *)t->data;
        for (int64_t j = 0; !f32 && j < t->n; j++) {
            float v;
            memcpy(&v, bytes + 4 * j, sizeof v);
            uint16_t h = bf16 ? hf_f32_to_bf16(v) : hf_f32_to_f16(v);
            memcpy(bytes + 2 * j, &h, sizeof h);
        }
        pt_st_tensor *o = &out[i];
        memset(o, 0, sizeof *o);
        snprintf(o->name, sizeof o->name, "%s", t->name);
        snprintf(o->dtype, sizeof o->dtype, "%s", dtype);
        o->ndim = t->ndim;
        o->shape[0] = t->shape[0];
        o->shape[1] = t->shape[1];
        o->data = t->data;
        o->bytes = (size_t)t->n * (f32 ? 4 : 2);
    }
}

/* ---- config.json ---------------------------------------------------------------------------- */

static const char *torch_dtype(const char *dtype)
{
    return !strcmp(dtype, "F32") ? "float32" : !strcmp(dtype, "BF16") ? "bfloat16" : "float16";
}

/* GPT2Config (models/gpt2/configuration_gpt2.py). Dropout rates are 0: the model spec
 * does not carry the run's; bos/eos are null: our token files have no special tokens. */
static int ex_config_gpt2(json_t *c, const pt_model *m)
{
    return pt_json_set(c, "architectures", json_pack("[s]", "GPT2LMHeadModel")) |
           pt_json_set(c, "model_type", json_string("gpt2")) |
           pt_json_set(c, "vocab_size", json_integer(m->vocab)) |
           pt_json_set(c, "n_positions", json_integer(m->seq)) |
           pt_json_set(c, "n_embd", json_integer(m->hidden)) |
           pt_json_set(c, "n_layer", json_integer(m->layers)) |
           pt_json_set(c, "n_head", json_integer(m->heads)) |
           pt_json_set(c, "n_inner", json_integer(m->ffn)) |
           pt_json_set(c, "activation_function", json_string("gelu_new")) |
           pt_json_set(c, "layer_norm_epsilon", json_real(PT_HF_NORM_EPS)) |
           pt_json_set(c, "resid_pdrop", json_real(0.0)) |
           pt_json_set(c, "embd_pdrop", json_real(0.0)) |
           pt_json_set(c, "attn_pdrop", json_real(0.0)) |
           pt_json_set(c, "scale_attn_weights", json_true()) |
           pt_json_set(c, "scale_attn_by_inverse_layer_idx", json_false()) |
           pt_json_set(c, "reorder_and_upcast_attn", json_false());
}

/* The fields of LlamaConfig (models/llama/configuration_llama.py) that every LLaMA-like
 * family's config shares; intermediate_size is the family's (ffn_size). rope_theta is
 * always said: Mixtral's default is 1e6. */
static int ex_config_llama_like(json_t *c, const pt_model *m, hf_family f, int64_t ffn_size)
{
    return pt_json_set(c, "architectures", json_pack("[s]", hf_family_class(f))) |
           pt_json_set(c, "model_type", json_string(hf_family_type(f))) |
           pt_json_set(c, "vocab_size", json_integer(m->vocab)) |
           pt_json_set(c, "hidden_size", json_integer(m->hidden)) |
           pt_json_set(c, "intermediate_size", json_integer(ffn_size)) |
           pt_json_set(c, "num_hidden_layers", json_integer(m->layers)) |
           pt_json_set(c, "num_attention_heads", json_integer(m->heads)) |
           pt_json_set(c, "num_key_value_heads", json_integer(m->kv_heads)) |
           pt_json_set(c, "head_dim", json_integer(pt_model_head_dim(m))) |
           pt_json_set(c, "max_position_embeddings", json_integer(m->seq)) |
           pt_json_set(c, "hidden_act", json_string("silu")) |
           pt_json_set(c, "rms_norm_eps", json_real(PT_HF_NORM_EPS)) |
           pt_json_set(c, "rope_theta", json_real(PT_HF_ROPE_THETA)) |
           pt_json_set(c, "rope_scaling", json_null()) |
           pt_json_set(c, "attention_dropout", json_real(0.0));
}

/* Qwen3-MoE's dense layers as mlp_only_layers (decoder_sparse_step 1): any set of ours,
 * as first_dense and every make it (modeling_qwen3_moe.py, Qwen3MoeDecoderLayer). */
static json_t *ex_dense_layers(const pt_model *m)
{
    json_t *a = json_array();
    for (int64_t l = 0; a && l < m->layers; l++)
        if (!pt_model_layer_moe(m, l) && json_array_append_new(a, json_integer(l)) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* The family's own fields: LlamaConfig's biases; Qwen3Config's and Qwen3MoeConfig's
 * attention_bias and (no) sliding window; MixtralConfig's (no) sliding window and
 * experts (models/mixtral/configuration_mixtral.py: num_local_experts; intermediate_size
 * the experts'); Qwen3MoeConfig's experts (models/qwen3_moe/configuration_qwen3_moe.py:
 * num_experts, moe_intermediate_size, norm_topk_prob). */
static int ex_config_family(json_t *c, const pt_model *m, hf_family f)
{
    const pt_moe *e = &m->moe;
    int bad = ex_config_llama_like(c, m, f, f == HF_MIXTRAL ? e->expert_ffn : m->ffn);
    if (f == HF_LLAMA)
        return bad | pt_json_set(c, "attention_bias", json_boolean(m->bias)) |
               pt_json_set(c, "mlp_bias", json_boolean(m->bias));
    if (f == HF_QWEN3 || f == HF_QWEN3_MOE)
        bad |= pt_json_set(c, "attention_bias", json_false()) |
               pt_json_set(c, "use_sliding_window", json_false()) |
               pt_json_set(c, "sliding_window", json_null());
    if (f == HF_QWEN3)
        return bad;
    bad |= pt_json_set(c, "num_experts_per_tok", json_integer(e->top_k)) |
           pt_json_set(c, "router_aux_loss_coef", json_real(e->aux_loss));
    if (f == HF_MIXTRAL)
        return bad | pt_json_set(c, "num_local_experts", json_integer(e->experts)) |
               pt_json_set(c, "sliding_window", json_null());
    return bad | pt_json_set(c, "num_experts", json_integer(e->experts)) |
           pt_json_set(c, "moe_intermediate_size", json_integer(e->expert_ffn)) |
           pt_json_set(c, "norm_topk_prob", json_boolean(e->renorm)) |
           pt_json_set(c, "decoder_sparse_step", json_integer(1)) |
           pt_json_set(c, "mlp_only_layers", ex_dense_layers(m));
}

/* config.json's text (malloc'd), or NULL when out of memory. */
static char *ex_config(const pt_model *m, hf_family family, const char *dtype)
{
    json_t *c = json_object();
    if (!c)
        return NULL;
    int bad = family == HF_GPT2 ? ex_config_gpt2(c, m) : ex_config_family(c, m, family);
    bad |= pt_json_set(c, "tie_word_embeddings", json_boolean(m->tied_embeddings)) |
           pt_json_set(c, "bos_token_id", json_null()) |
           pt_json_set(c, "eos_token_id", json_null()) |
           pt_json_set(c, "torch_dtype", json_string(torch_dtype(dtype))) |
           pt_json_set(c, "use_cache", json_true());
    char *text = bad ? NULL : pt_json_dump(c);
    json_decref(c);
    return text;
}

/* ---- The directory ------------------------------------------------------------------------- */

/* out_dir absent (*exists false), or a directory that is empty (*empty) or, with force,
 * not. */
static int ex_check_dir(const char *dir, bool force, bool *exists, bool *empty, pt_err *err)
{
    struct stat st;
    *exists = stat(dir, &st) == 0;
    *empty = true;
    if (!*exists)
        return errno == ENOENT ? pt_path_writable(dir, err)
                               : pt_err_set(err, "cannot use '%s': %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return pt_err_set(err, "'%s' exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d)
        return pt_err_set(err, "cannot read directory '%s': %s", dir, strerror(errno));
    for (const struct dirent *e; *empty && (e = readdir(d)) != NULL;)
        *empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    if (!*empty && !force)
        return pt_err_set(err, "'%s' is not empty: nothing written (--force replaces its "
                          "config.json and model.safetensors)", dir);
    char probe[EX_PATH_MAX];
    if (snprintf(probe, sizeof probe, "%s/config.json", dir) >= (int)sizeof probe)
        return pt_err_set(err, "%s: path too long", dir);
    return pt_path_writable(probe, err);
}

/* model.safetensors, then config.json, into dir (made when absent). On failure, a
 * directory that was absent or empty is left as it was. */
static int ex_write(const char *dir, bool exists, bool empty, const pt_st_tensor *t, int n,
                    const char *config, pt_err *err)
{
    char weights[EX_PATH_MAX], cfg[EX_PATH_MAX];
    if (snprintf(weights, sizeof weights, "%s/model.safetensors", dir) >= (int)sizeof weights ||
        snprintf(cfg, sizeof cfg, "%s/config.json", dir) >= (int)sizeof cfg)
        return pt_err_set(err, "%s: path too long", dir);
    if (!exists && mkdir(dir, 0777) != 0)
        return pt_err_set(err, "cannot create directory '%s': %s", dir, strerror(errno));
    if (!empty && unlink(cfg) != 0 && errno != ENOENT)
        return pt_err_set(err, "cannot replace '%s': %s", cfg, strerror(errno));
    /* save_pretrained's metadata (transformers modeling_utils.py: {"format": "pt"}) */
    const char *key = "format", *value = "pt";
    int rc = pt_st_write(weights, t, n, &key, &value, 1, err);
    if (rc == 0)
        rc = pt_file_write_atomic(cfg, config, strlen(config), err);
    if (rc != 0 && empty) {
        unlink(weights);
        if (!exists)
            rmdir(dir);
    }
    return rc;
}

int pt_hf_export(const char *out_dir, const pt_model *spec, int64_t vocab_rows, pt_wsrc *src,
                 const char *dtype, bool force, pt_hf_written *info, pt_err *err)
{
    hf_family family;
    bool exists, empty;
    if (pt_model_validate(spec, spec->name, err) || hf_family_of(spec, &family, err))
        return -1;
    if (strcmp(dtype, "F32") && strcmp(dtype, "BF16") && strcmp(dtype, "F16"))
        return pt_err_set(err, "dtype '%.16s': expected F32, BF16 or F16", dtype);
    if (vocab_rows < spec->vocab)
        return pt_err_set(err, "the embedding has %" PRId64 " rows, fewer than model '%s''s "
                          "vocab = %" PRId64, vocab_rows, spec->name, spec->vocab);
    if (ex_check_dir(out_dir, force, &exists, &empty, err))
        return -1;
    hf_layout l = {.family = family, .prefix = "transformer.", .vocab = spec->vocab,
                   .positions = spec->seq};
    ex_set x = {0};
    pt_st_tensor *t = NULL;
    char *config = NULL;
    int rc = ex_gather(&x, spec, &l, vocab_rows, src, err);
    if (rc == 0 && (!(t = calloc((size_t)x.n + 1, sizeof *t)) ||
                    !(config = ex_config(spec, family, dtype))))
        rc = pt_err_set(err, "out of memory");
    if (rc == 0) {
        ex_convert(&x, dtype, t);
        rc = ex_write(out_dir, exists, empty, t, x.n, config, err);
    }
    if (rc == 0 && info) {
        info->family = hf_family_type(family);
        info->tensors = x.n;
        info->bytes = 0;
        for (int i = 0; i < x.n; i++)
            info->bytes += (int64_t)t[i].bytes;
    }
    free(config);
    free(t);
    ex_free(&x);
    return rc;
}
