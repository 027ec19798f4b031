/*
 * Model specs: the shape of a decoder-only transformer that the planner sizes
 * layouts for and ptrun trains. This file owns the built-in models (with the
 * published sizes of each family), the JSON form of a spec, and the checks a spec
 * must pass before anything multiplies its sizes. A built-in is the same data as a
 * file: pt_model_to_json dumps it and pt_model_from_json reads it back identically.
 *
 * JSON format (every field required, unknown fields refused so typos are caught):
 *   {
 *     "name": "my-model",          string, at most 63 bytes, not empty
 *     "layers": 32,                L, integer
 *     "hidden": 4096,              h, integer, divisible by heads
 *     "heads": 32,                 a, integer, divisible by kv_heads
 *     "kv_heads": 8,               k, integer (= heads without grouped-query attention)
 *     "ffn": 14336,                f, integer: MLP inner size (per branch for SwiGLU)
 *     "vocab": 128256,             v, integer
 *     "seq": 8192,                 s, integer: training sequence length
 *     "norm": "rmsnorm",           "layernorm" | "rmsnorm"
 *     "activation": "swiglu",      "gelu" | "swiglu"
 *     "positions": "rope",         "learned" | "rope" (rope needs an even h/a) | "alibi"
 *     "tied_embeddings": false,    output head shares the token embedding
 *     "bias": false,               linear layers carry biases
 *     "dropout": false,            dropout layers present
 *     "head_dim": 128,             optional, d (default h/a): attention is a·d wide
 *     "qk_norm": true,             optional (default false): RMSNorm on q's and k's heads
 *     "window": {"size": 128,      optional (default: full attention): banded attention
 *                "full_every": 2}, of `size` keys; optional full_every N: layer i attends
 *                                  in full when (i+1) % N == 0 (0: every layer banded)
 *     "attn_sinks": true,          optional (default false): a learned logit per head in
 *                                  each softmax (gpt-oss)
 *     "moe": {                     optional: a mixture of experts (default: dense)
 *       "experts": 128,            E, at least 2
 *       "top_k": 8,                experts per token, at most E
 *       "expert_ffn": 1536,        inner size of one expert (per branch for SwiGLU)
 *       "router": "softmax",       "softmax" | "sigmoid": how the router scores experts
 *       "renorm": true,            the top-k scores renormalised to sum to 1
 *       "shared_experts": 0,       optional (default 0): experts every token passes
 *       "shared_ffn": 0,           ... their inner size each (required with them)
 *       "first_dense": 0,          optional (default 0): the first layers stay dense
 *       "every": 1,                optional (default 1): layer i >= first_dense is MoE
 *                                  when i % every == 0 (Megatron-Core --moe-layer-freq)
 *       "aux_loss": 0.001,         optional (default 0): load-balancing loss coefficient
 *       "capacity": 0              optional (default 0: dropless): capacity factor
 *     }
 *   }
 * Integer fields must be JSON integers (12.5 and 12.0 are refused). Sizes are capped
 * (see model_size_max) so that products of a few sizes stay far below 2^63. A dense
 * layer's MLP is `ffn` wide; a model whose layers are all MoE layers still gives it (the
 * published configurations do) and it sizes nothing.
 */
#include "specjson.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- Built-in models --------------------------------------------------------- */

/* GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners",
 * Table 2, with heads from the released hparams.json): pre-LayerNorm, GELU, learned
 * positions, tied embeddings, biases, dropout; f = 4h, v = 50257, s = 1024. The
 * names use the parameter counts of the released checkpoints (the paper's table
 * printed 117M/345M/762M/1542M). */
#define PT_GPT2(nm, L_, h_, a_, v_, s_)                                                 \
    { .name = nm, .layers = L_, .hidden = h_, .heads = a_, .kv_heads = a_,              \
      .ffn = 4 * (h_), .vocab = v_, .seq = s_, .norm = PT_NORM_LAYERNORM,            \
      .act = PT_ACT_GELU, .pos = PT_POS_LEARNED, .tied_embeddings = true, .bias = true, \
      .dropout = true }

/* LLaMA style: RMSNorm, SwiGLU, RoPE, untied output head, no biases, no dropout. */
#define PT_LLAMA(nm, L_, h_, a_, k_, f_, v_, s_)                                        \
    { .name = nm, .layers = L_, .hidden = h_, .heads = a_, .kv_heads = k_, .ffn = f_,   \
      .vocab = v_, .seq = s_, .norm = PT_NORM_RMSNORM, .act = PT_ACT_SWIGLU,            \
      .pos = PT_POS_ROPE, .tied_embeddings = false, .bias = false, .dropout = false }

/* A LLaMA-style model whose MLPs are mixtures of experts, dropless: E experts of
 * inner size fe, top-k of them per token by softmax scores renormalised over the k
 * (Mixtral's softmax over the top-k logits is the same weights), from layer 0. */
#define PT_MOE(E_, k_, fe_, aux_)                                                       \
    { .experts = E_, .top_k = k_, .expert_ffn = fe_, .every = 1,                        \
      .score = PT_ROUTER_SOFTMAX, .renorm = true, .aux_loss = aux_ }

static const pt_model model_builtins[] = {
    /* Small enough to train in seconds on one CPU core: GPT-2 shaped, with a
     * byte-level tokenizer (v = 256). tiny-llama is the same size in LLaMA style,
     * with grouped-query attention (k = 2) and f = 3h so SwiGLU's two branches keep
     * the MLP near GPT-2's 8h^2 weights. */
    PT_GPT2("tiny", 4, 64, 4, 256, 64),
    PT_LLAMA("tiny-llama", 4, 64, 4, 2, 192, 256, 64),

    PT_GPT2("gpt2-124m", 12, 768, 12, 50257, 1024),
    PT_GPT2("gpt2-350m", 24, 1024, 16, 50257, 1024),
    PT_GPT2("gpt2-774m", 36, 1280, 20, 50257, 1024),
    PT_GPT2("gpt2-1.5b", 48, 1600, 25, 50257, 1024),

    /* GPT-3 (Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1):
     * GPT-2's architecture (the paper's alternating sparse attention is not modelled)
     * with s = 2048. Two rows of the table do not multiply out: GPT-3 XL lists 24
     * heads of d_head 128 for d_model 2048, and GPT-3 13B lists d_model 5140 for 40
     * heads of 128. We keep d_head = 128 in both, i.e. 16 heads for 1.3B and
     * h = 40 x 128 = 5120 for 13B, the sizes that make h divisible by a. */
    PT_GPT2("gpt3-1.3b", 24, 2048, 16, 50257, 2048),
    PT_GPT2("gpt3-2.7b", 32, 2560, 32, 50257, 2048),
    PT_GPT2("gpt3-6.7b", 32, 4096, 32, 50257, 2048),
    PT_GPT2("gpt3-13b", 40, 5120, 40, 50257, 2048),
    PT_GPT2("gpt3-175b", 96, 12288, 96, 50257, 2048),

    /* Llama 2 (Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat
     * Models", Table 1: s = 4096, GQA for 70B; f and k from the released
     * params.json / config.json): v = 32000. */
    PT_LLAMA("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    PT_LLAMA("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
    PT_LLAMA("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),

    /* Llama 3 (Llama Team, Meta 2024, "The Llama 3 Herd of Models", Table 3; the
     * exact vocabulary 128256 from the released config.json, the paper says 128K;
     * s = 8192, the pre-training length before long-context training). */
    PT_LLAMA("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    PT_LLAMA("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    PT_LLAMA("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192),

    /* Mixtures of experts for tests: tiny-llama's attention with 8 experts, top-2,
     * the first layer dense (so pipeline stages and layouts meet both kinds of layer);
     * and a Qwen3-shaped one: 16 experts, top-8, q/k norms, heads of 32 on h = 64. */
    {.name = "tiny-moe", .layers = 4, .hidden = 64, .heads = 4, .kv_heads = 2, .ffn = 192,
     .vocab = 256, .seq = 64, .norm = PT_NORM_RMSNORM, .act = PT_ACT_SWIGLU,
     .pos = PT_POS_ROPE,
     .moe = {.experts = 8, .top_k = 2, .expert_ffn = 96, .first_dense = 1, .every = 1,
             .score = PT_ROUTER_SOFTMAX, .renorm = true, .aux_loss = 0.01}},
    {.name = "tiny-qwen3-moe", .layers = 4, .hidden = 64, .heads = 4, .kv_heads = 2,
     .ffn = 192, .vocab = 256, .seq = 64, .norm = PT_NORM_RMSNORM, .act = PT_ACT_SWIGLU,
     .pos = PT_POS_ROPE, .head_dim = 32, .qk_norm = true, .moe = PT_MOE(16, 8, 32, 0.001)},

    /* Mixtral (Jiang et al. 2024, "Mixtral of Experts", Table 1: 8 experts, top-2,
     * 32k context; the sizes of the released config.json: Mixtral-8x7B h 4096, f
     * 14336, 32 layers, 32 heads, 8 KV heads, v 32000, router_aux_loss_coef 0.02;
     * Mixtral-8x22B h 6144, f 16384, 56 layers, 48 heads, 8 KV heads, v 32768, a 64k
     * context). Every layer's MLP is the mixture; ffn is the experts' size. */
    {.name = "mixtral-8x7b", .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8,
     .ffn = 14336, .vocab = 32000, .seq = 32768, .norm = PT_NORM_RMSNORM,
     .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE, .moe = PT_MOE(8, 2, 14336, 0.02)},
    {.name = "mixtral-8x22b", .layers = 56, .hidden = 6144, .heads = 48, .kv_heads = 8,
     .ffn = 16384, .vocab = 32768, .seq = 65536, .norm = PT_NORM_RMSNORM,
     .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE, .moe = PT_MOE(8, 2, 16384, 0.001)},

    /* Qwen3 (Qwen Team 2025, "Qwen3 Technical Report", Table 2: 30B-A3B 48 layers,
     * 32/4 heads, 128 experts, 8 active; 235B-A22B 94 layers, 64/4 heads, 128
     * experts, 8 active; no shared experts; QK-norm; pre-training stage 1 at 4096
     * tokens), with the released config.json's sizes: head_dim 128, hidden 2048 and
     * 4096, moe_intermediate_size 768 and 1536, intermediate_size (dense MLP, unused:
     * every layer is sparse, decoder_sparse_step 1) 6144 and 12288, vocab 151936,
     * norm_topk_prob true, router_aux_loss_coef 0.001, untied. */
    {.name = "qwen3-30b-a3b", .layers = 48, .hidden = 2048, .heads = 32, .kv_heads = 4,
     .ffn = 6144, .vocab = 151936, .seq = 4096, .norm = PT_NORM_RMSNORM,
     .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE, .head_dim = 128, .qk_norm = true,
     .moe = PT_MOE(128, 8, 768, 0.001)},
    {.name = "qwen3-235b-a22b", .layers = 94, .hidden = 4096, .heads = 64, .kv_heads = 4,
     .ffn = 12288, .vocab = 151936, .seq = 4096, .norm = PT_NORM_RMSNORM,
     .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE, .head_dim = 128, .qk_norm = true,
     .moe = PT_MOE(128, 8, 1536, 0.001)},

    /* gpt-oss (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", Table 1: 36 and 24
     * layers, 128 and 32 experts, 4 active, residual width 2880; Sec. 2.1: attention
     * alternating between banded windows of 128 tokens and full, 64 query heads of 64
     * and 8 KV heads, a learned sink logit per head, biases; pre-trained at 4,096
     * tokens), with the released config.json's sizes: vocab 201088, expert FFN 2880
     * (intermediate_size), the first layer banded (layer_types), the router's softmax
     * over its top-4 logits, untied. Its SwiGLU with a clamp and a +1 on the linear
     * branch is priced as SwiGLU; the card gives no load-balancing coefficient (0). */
    {.name = "gpt-oss-20b", .layers = 24, .hidden = 2880, .heads = 64, .kv_heads = 8,
     .ffn = 2880, .vocab = 201088, .seq = 4096, .norm = PT_NORM_RMSNORM,
     .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE, .bias = true, .head_dim = 64,
     .window = 128, .window_full_every = 2, .attn_sinks = true,
     .moe = PT_MOE(32, 4, 2880, 0)},
    {.name = "gpt-oss-120b", .layers = 36, .hidden = 2880, .heads = 64, .kv_heads = 8,
     .ffn = 2880, .vocab = 201088, .seq = 4096, .norm = PT_NORM_RMSNORM,
     .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE, .bias = true, .head_dim = 64,
     .window = 128, .window_full_every = 2, .attn_sinks = true,
     .moe = PT_MOE(128, 4, 2880, 0)},
};

int pt_model_builtin_count(void)
{
    return (int)(sizeof model_builtins / sizeof model_builtins[0]);
}

const pt_model *pt_model_builtin(int i)
{
    return i >= 0 && i < pt_model_builtin_count() ? &model_builtins[i] : NULL;
}

/* ---- Lookup ------------------------------------------------------------------ */

int pt_model_get(const char *name, pt_model *out, pt_err *err)
{
    if (!name)
        return pt_err_set(err, "no model name given; see ptplan --list-models");
    for (int i = 0; i < pt_model_builtin_count(); i++) {
        if (strcmp(model_builtins[i].name, name) == 0) {
            *out = model_builtins[i];
            return 0;
        }
    }
    struct stat st;
    if (stat(name, &st) == 0)
        return pt_model_load_file(name, out, err);
    const char *names[64];
    int n = 0;
    for (int i = 0; i < pt_model_builtin_count() && n < 64; i++)
        names[n++] = model_builtins[i].name;
    const char *meant = pt_spec_closest(name, names, n);
    if (meant)
        return pt_err_set(err, "unknown model '%s' (not a built-in and no such file); did you "
                               "mean '%s'? (ptplan --list-models lists them)", name, meant);
    return pt_err_set(err,
                      "unknown model '%s' (not a built-in and no such file); "
                      "see ptplan --list-models", name);
}

int pt_model_load_file(const char *path, pt_model *out, pt_err *err)
{
    char *text = pt_json_read_file(path, err);
    if (!text)
        return -1;
    int rc = pt_model_from_json(text, path, out, err);
    free(text);
    return rc;
}

/* ---- JSON -------------------------------------------------------------------- */

/* Indexed by pt_norm, pt_act and pt_pos. */
static const char *const norm_names[] = {"layernorm", "rmsnorm"};
static const char *const act_names[] = {"gelu", "swiglu"};
static const char *const pos_names[] = {"learned", "rope", "alibi"};
static const char *const router_names[] = {"softmax", "sigmoid"};

/* In the order pt_model_to_json writes them (the last three only when not the
 * default). */
static const char *const model_keys[] = {
    "name", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "norm",
    "activation", "positions", "tied_embeddings", "bias", "dropout", "head_dim",
    "qk_norm", "moe", "window", "attn_sinks", NULL};
static const char *const window_keys[] = {"size", "full_every", NULL};
static const char *const moe_keys[] = {
    "experts", "top_k", "expert_ffn", "router", "renorm", "shared_experts", "shared_ffn",
    "first_dense", "every", "aux_loss", "capacity", NULL};

int64_t pt_model_head_dim(const pt_model *m)
{
    return m->head_dim > 0 ? m->head_dim : m->heads > 0 ? m->hidden / m->heads : m->hidden;
}

bool pt_model_layer_moe(const pt_model *m, int64_t i)
{
    int64_t every = m->moe.every > 0 ? m->moe.every : 1;
    return m->moe.experts > 0 && i >= m->moe.first_dense && i % every == 0;
}

/* Multiples of e in [0, x): ceil(x/e) for x > 0. */
static int64_t multiples_below(int64_t x, int64_t e)
{
    return x <= 0 ? 0 : (x + e - 1) / e;
}

int64_t pt_model_moe_layers(const pt_model *m, int64_t first, int64_t count)
{
    if (m->moe.experts <= 0 || count <= 0)
        return 0;
    /* the multiples of `every` in [max(first, first_dense), first + count) */
    int64_t every = m->moe.every > 0 ? m->moe.every : 1;
    int64_t lo = first > m->moe.first_dense ? first : m->moe.first_dense, hi = first + count;
    return hi > lo ? multiples_below(hi, every) - multiples_below(lo, every) : 0;
}

bool pt_model_layer_window(const pt_model *m, int64_t i)
{
    return m->window > 0 && !(m->window_full_every > 0 && (i + 1) % m->window_full_every == 0);
}

int pt_model_layer_kind(const pt_model *m, int64_t i)
{
    return (pt_model_layer_moe(m, i) ? PT_LAYER_MOE : 0) |
           (pt_model_layer_window(m, i) ? PT_LAYER_WINDOW : 0);
}

void pt_model_layer_kinds(const pt_model *m, int64_t first, int64_t count,
                          int64_t n[PT_LAYER_KINDS])
{
    for (int k = 0; k < PT_LAYER_KINDS; k++)
        n[k] = 0;
    if (m->window <= 0) { /* the experts' count in closed form */
        n[PT_LAYER_MOE] = pt_model_moe_layers(m, first, count);
        n[0] = (count > 0 ? count : 0) - n[PT_LAYER_MOE];
        return;
    }
    for (int64_t i = first; i < first + count; i++)
        n[pt_model_layer_kind(m, i)]++;
}

/* An optional field: read when present, else `dflt`. */
static int opt_int(const pt_json_obj *o, const char *key, int64_t dflt, int64_t *out,
                   pt_err *err)
{
    *out = dflt;
    return json_object_get(o->obj, key) ? pt_json_get_int(o, key, out, err) : 0;
}

static int opt_real(const pt_json_obj *o, const char *key, double *out, pt_err *err)
{
    *out = 0;
    return json_object_get(o->obj, key) ? pt_json_get_real(o, key, out, err) : 0;
}

static int model_read_moe(const pt_json_obj *o, pt_moe *e, pt_err *err)
{
    pt_json_obj x;
    if (pt_json_get_object(o, "moe", moe_keys, &x, err))
        return -1;
    int score = 0;
    int bad = pt_json_get_int(&x, "experts", &e->experts, err);
    bad |= pt_json_get_int(&x, "top_k", &e->top_k, err);
    bad |= pt_json_get_int(&x, "expert_ffn", &e->expert_ffn, err);
    bad |= pt_json_get_enum(&x, "router", router_names, 2, &score, err);
    bad |= pt_json_get_bool(&x, "renorm", &e->renorm, err);
    bad |= opt_int(&x, "shared_experts", 0, &e->shared_experts, err);
    bad |= opt_int(&x, "shared_ffn", 0, &e->shared_ffn, err);
    bad |= opt_int(&x, "first_dense", 0, &e->first_dense, err);
    bad |= opt_int(&x, "every", 1, &e->every, err);
    bad |= opt_real(&x, "aux_loss", &e->aux_loss, err);
    bad |= opt_real(&x, "capacity", &e->capacity, err);
    e->score = (pt_router_score)score;
    return bad ? -1 : 0;
}

static int model_read_enums(const pt_json_obj *o, pt_model *m, pt_err *err)
{
    int norm = 0, act = 0, pos = 0;
    int bad = pt_json_get_enum(o, "norm", norm_names, 2, &norm, err);
    bad |= pt_json_get_enum(o, "activation", act_names, 2, &act, err);
    bad |= pt_json_get_enum(o, "positions", pos_names, 3, &pos, err);
    m->norm = (pt_norm)norm;
    m->act = (pt_act)act;
    m->pos = (pt_pos)pos;
    return bad ? -1 : 0;
}

/* Reads every field of `o` (which has a collector) into m, recording each problem. */
static int model_read(const pt_json_obj *o, pt_model *m, pt_err *err)
{
    int bad = pt_json_check_keys(o, model_keys, err);
    bad |= pt_json_get_string(o, "name", m->name, sizeof m->name, err);
    bad |= pt_json_get_int(o, "layers", &m->layers, err);
    bad |= pt_json_get_int(o, "hidden", &m->hidden, err);
    bad |= pt_json_get_int(o, "heads", &m->heads, err);
    bad |= pt_json_get_int(o, "kv_heads", &m->kv_heads, err);
    bad |= pt_json_get_int(o, "ffn", &m->ffn, err);
    bad |= pt_json_get_int(o, "vocab", &m->vocab, err);
    bad |= pt_json_get_int(o, "seq", &m->seq, err);
    bad |= model_read_enums(o, m, err);
    bad |= pt_json_get_bool(o, "tied_embeddings", &m->tied_embeddings, err);
    bad |= pt_json_get_bool(o, "bias", &m->bias, err);
    bad |= pt_json_get_bool(o, "dropout", &m->dropout, err);
    if (json_object_get(o->obj, "head_dim"))
        bad |= pt_json_get_int(o, "head_dim", &m->head_dim, err);
    /* head_dim = h/a is what its absence says: one spec, one form */
    if (m->head_dim > 0 && m->head_dim <= INT32_MAX && m->heads > 0 &&
        m->heads <= INT32_MAX && m->head_dim * m->heads == m->hidden)
        m->head_dim = 0;
    if (json_object_get(o->obj, "qk_norm"))
        bad |= pt_json_get_bool(o, "qk_norm", &m->qk_norm, err);
    if (json_object_get(o->obj, "moe"))
        bad |= model_read_moe(o, &m->moe, err);
    if (json_object_get(o->obj, "window")) {
        pt_json_obj w;
        if (pt_json_get_object(o, "window", window_keys, &w, err) == 0) {
            bad |= pt_json_get_int(&w, "size", &m->window, err);
            bad |= opt_int(&w, "full_every", 0, &m->window_full_every, err);
            if (m->window < 1)
                bad |= pt_json_fail(&w, "size", err, "%s: field 'window.size' = %" PRId64
                                    ": must be at least 1 (leave the window out for full "
                                    "attention)", o->origin, m->window);
        } else {
            bad = -1;
        }
    }
    if (json_object_get(o->obj, "attn_sinks"))
        bad |= pt_json_get_bool(o, "attn_sinks", &m->attn_sinks, err);
    return bad ? -1 : 0;
}

int pt_model_read_obj(const pt_json_obj *o, pt_model *m, pt_err *err)
{
    if (o->errs)
        return model_read(o, m, err);
    pt_json_errs errs;
    pt_json_errs_init(&errs);
    pt_json_obj all = *o;
    all.errs = &errs;
    model_read(&all, m, err);
    return pt_json_errs_finish(&errs, o->origin, err);
}

static void model_check(const pt_model *m, const char *origin, pt_json_errs *e);

int pt_model_from_json(const char *text, const char *origin, pt_model *out, pt_err *err)
{
    pt_json_obj top;
    json_t *root = pt_json_parse_object(text, origin, &top, err);
    if (!root)
        return -1;
    pt_model m;
    memset(&m, 0, sizeof m);
    pt_json_errs errs;
    pt_json_errs_init(&errs);
    top.errs = &errs;
    model_read(&top, &m, err);
    json_decref(root);
    /* The values read are checked too; a field already reported is not again. */
    model_check(&m, origin, &errs);
    int rc = pt_json_errs_finish(&errs, origin, err);
    if (rc == 0)
        *out = m;
    return rc;
}

json_t *pt_model_json_obj(const pt_model *m)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    int bad = pt_json_set(root, "name", json_string(m->name));
    bad |= pt_json_set(root, "layers", json_integer(m->layers));
    bad |= pt_json_set(root, "hidden", json_integer(m->hidden));
    bad |= pt_json_set(root, "heads", json_integer(m->heads));
    bad |= pt_json_set(root, "kv_heads", json_integer(m->kv_heads));
    bad |= pt_json_set(root, "ffn", json_integer(m->ffn));
    bad |= pt_json_set(root, "vocab", json_integer(m->vocab));
    bad |= pt_json_set(root, "seq", json_integer(m->seq));
    /* Indexing by comparison keeps an unvalidated enum value inside the tables. */
    bad |= pt_json_set(root, "norm", json_string(norm_names[m->norm == PT_NORM_RMSNORM]));
    bad |= pt_json_set(root, "activation", json_string(act_names[m->act == PT_ACT_SWIGLU]));
    bad |= pt_json_set(root, "positions",
                       json_string(pos_names[m->pos == PT_POS_ROPE    ? 1
                                             : m->pos == PT_POS_ALIBI ? 2
                                                                      : 0]));
    bad |= pt_json_set(root, "tied_embeddings", json_boolean(m->tied_embeddings));
    bad |= pt_json_set(root, "bias", json_boolean(m->bias));
    bad |= pt_json_set(root, "dropout", json_boolean(m->dropout));
    if (m->head_dim > 0 && !(m->heads > 0 && m->head_dim * m->heads == m->hidden))
        bad |= pt_json_set(root, "head_dim", json_integer(m->head_dim));
    if (m->qk_norm)
        bad |= pt_json_set(root, "qk_norm", json_true());
    if (m->window > 0) {
        json_t *w = json_object();
        bad |= w ? 0 : -1;
        if (w) {
            bad |= pt_json_set(w, "size", json_integer(m->window));
            if (m->window_full_every > 0)
                bad |= pt_json_set(w, "full_every", json_integer(m->window_full_every));
            bad |= pt_json_set(root, "window", w);
        }
    }
    if (m->attn_sinks)
        bad |= pt_json_set(root, "attn_sinks", json_true());
    if (m->moe.experts > 0) {
        const pt_moe *e = &m->moe;
        json_t *x = json_object();
        bad |= x ? 0 : -1;
        if (x) {
            bad |= pt_json_set(x, "experts", json_integer(e->experts));
            bad |= pt_json_set(x, "top_k", json_integer(e->top_k));
            bad |= pt_json_set(x, "expert_ffn", json_integer(e->expert_ffn));
            bad |= pt_json_set(x, "router",
                               json_string(router_names[e->score == PT_ROUTER_SIGMOID]));
            bad |= pt_json_set(x, "renorm", json_boolean(e->renorm));
            bad |= pt_json_set(x, "shared_experts", json_integer(e->shared_experts));
            bad |= pt_json_set(x, "shared_ffn", json_integer(e->shared_ffn));
            bad |= pt_json_set(x, "first_dense", json_integer(e->first_dense));
            bad |= pt_json_set(x, "every", json_integer(e->every));
            bad |= pt_json_set(x, "aux_loss", json_real(e->aux_loss));
            bad |= pt_json_set(x, "capacity", json_real(e->capacity));
            bad |= pt_json_set(root, "moe", x);
        }
    }
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

char *pt_model_to_json(const pt_model *m)
{
    json_t *root = pt_model_json_obj(m);
    char *text = root ? pt_json_dump(root) : NULL;
    json_decref(root);
    return text;
}

/* ---- Validation -------------------------------------------------------------- */

/* Upper bounds far above any published model (Llama 3 405B: L 126, h 16384,
 * f 53248, v 128256) that keep products such as L·h·f, v·h or a·s² within int64. */
typedef struct {
    const char *key;
    int64_t value;
    int64_t max;
} model_size;

/* Returns whether f is in range, recording a problem when not. */
static bool model_check_size(const model_size *f, const char *origin, pt_json_errs *e)
{
    if (f->value < 1)
        pt_json_errs_add(e, f->key, "%s: field '%s' = %" PRId64 ": must be at least 1",
                         origin, f->key, f->value);
    else if (f->value > f->max)
        pt_json_errs_add(e, f->key, "%s: field '%s' = %" PRId64 ": must be at most %" PRId64,
                         origin, f->key, f->value, f->max);
    return f->value >= 1 && f->value <= f->max;
}

static bool model_check_sizes(const pt_model *m, const char *origin, pt_json_errs *e)
{
    const model_size sizes[] = {
        {"layers", m->layers, INT64_C(1) << 16}, {"hidden", m->hidden, INT64_C(1) << 20},
        {"heads", m->heads, INT64_C(1) << 14},   {"kv_heads", m->kv_heads, INT64_C(1) << 14},
        {"ffn", m->ffn, INT64_C(1) << 22},       {"vocab", m->vocab, INT64_C(1) << 24},
        {"seq", m->seq, INT64_C(1) << 22},
    };
    bool ok = true;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        ok &= model_check_size(&sizes[i], origin, e);
    return ok;
}

static bool model_check_enums(const pt_model *m, const char *origin, pt_json_errs *e)
{
    bool ok = true;
    if (m->norm != PT_NORM_LAYERNORM && m->norm != PT_NORM_RMSNORM)
        ok = pt_json_errs_add(e, "norm", "%s: field 'norm' = %d: not a known norm", origin,
                              (int)m->norm) == 0;
    if (m->act != PT_ACT_GELU && m->act != PT_ACT_SWIGLU)
        ok = pt_json_errs_add(e, "activation", "%s: field 'activation' = %d: not a known "
                              "activation", origin, (int)m->act) == 0;
    if (m->pos != PT_POS_LEARNED && m->pos != PT_POS_ROPE && m->pos != PT_POS_ALIBI)
        ok = pt_json_errs_add(e, "positions", "%s: field 'positions' = %d: not a known "
                              "position encoding", origin, (int)m->pos) == 0;
    return ok;
}

/* Needs sizes and enums in range (no division by zero). */
static void model_check_shapes(const pt_model *m, const char *origin, pt_json_errs *e)
{
    if (m->head_dim == 0 && m->hidden % m->heads)
        pt_json_errs_add(e, NULL, "%s: hidden (%" PRId64 ") is not divisible by heads "
                         "(%" PRId64 "); give head_dim when attention's width differs "
                         "from hidden", origin, m->hidden, m->heads);
    if (m->heads % m->kv_heads)
        pt_json_errs_add(e, NULL, "%s: heads (%" PRId64 ") is not divisible by kv_heads "
                         "(%" PRId64 ")", origin, m->heads, m->kv_heads);
    if (m->head_dim > 0 && m->heads * m->head_dim > (INT64_C(1) << 20))
        pt_json_errs_add(e, "head_dim", "%s: heads x head_dim = %" PRId64 " x %" PRId64
                         ": attention's width must be at most %" PRId64, origin, m->heads,
                         m->head_dim, INT64_C(1) << 20);
    /* RoPE rotates pairs of channels within a head. */
    int64_t d = pt_model_head_dim(m);
    if (m->pos == PT_POS_ROPE && (m->head_dim > 0 || m->hidden % m->heads == 0) && d % 2)
        pt_json_errs_add(e, NULL, "%s: positions 'rope' needs an even head size, but "
                         "%s = %" PRId64, origin, m->head_dim > 0 ? "head_dim" : "hidden/heads",
                         d);
}

/* The mixture of experts: sizes in range, fields that agree with each other. */
static void model_check_moe(const pt_model *m, const char *origin, pt_json_errs *e)
{
    const pt_moe *x = &m->moe;
    if (x->experts == 0 && x->top_k == 0)
        return; /* dense */
    const model_size sizes[] = {
        {"moe.experts", x->experts, INT64_C(1) << 16},
        {"moe.top_k", x->top_k, INT64_C(1) << 16},
        {"moe.expert_ffn", x->expert_ffn, INT64_C(1) << 22},
        {"moe.every", x->every, INT64_C(1) << 16},
    };
    bool ok = true;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        ok &= model_check_size(&sizes[i], origin, e);
    if (ok && x->experts < 2)
        ok = pt_json_errs_add(e, "moe.experts", "%s: field 'moe.experts' = %" PRId64
                              ": a mixture needs at least 2 experts", origin,
                              x->experts) == 0;
    if (ok && x->top_k > x->experts)
        pt_json_errs_add(e, "moe.top_k", "%s: field 'moe.top_k' = %" PRId64 ": more experts "
                         "per token than the %" PRId64 " experts (moe.experts)", origin,
                         x->top_k, x->experts);
    if (x->shared_experts < 0 || x->shared_experts > 1024)
        pt_json_errs_add(e, "moe.shared_experts", "%s: field 'moe.shared_experts' = %" PRId64
                         ": must be 0 to 1024", origin, x->shared_experts);
    else if (x->shared_experts > 0 && (x->shared_ffn < 1 || x->shared_ffn > INT64_C(1) << 22))
        pt_json_errs_add(e, "moe.shared_ffn", "%s: field 'moe.shared_ffn' = %" PRId64
                         ": moe.shared_experts = %" PRId64 " needs their inner size, 1 to %"
                         PRId64, origin, x->shared_ffn, x->shared_experts,
                         INT64_C(1) << 22);
    else if (x->shared_experts == 0 && x->shared_ffn != 0)
        pt_json_errs_add(e, "moe.shared_ffn", "%s: field 'moe.shared_ffn' = %" PRId64
                         " without shared experts (moe.shared_experts is 0)", origin,
                         x->shared_ffn);
    if (x->first_dense < 0 || x->first_dense >= m->layers)
        pt_json_errs_add(e, "moe.first_dense", "%s: field 'moe.first_dense' = %" PRId64
                         ": must leave a layer to the experts (0 to layers - 1 = %" PRId64 ")",
                         origin, x->first_dense, m->layers - 1);
    else if (ok && pt_model_moe_layers(m, 0, m->layers) == 0)
        pt_json_errs_add(e, "moe.every", "%s: field 'moe.every' = %" PRId64 ": no layer from "
                         "moe.first_dense = %" PRId64 " on is a multiple of it, so no layer "
                         "has experts", origin, x->every, x->first_dense);
    if (!(x->aux_loss >= 0 && x->aux_loss <= 1000))
        pt_json_errs_add(e, "moe.aux_loss", "%s: field 'moe.aux_loss' = %g: must be 0 to "
                         "1000", origin, x->aux_loss);
    if (!(x->capacity == 0 || (x->capacity > 0 && x->capacity <= 1000)))
        pt_json_errs_add(e, "moe.capacity", "%s: field 'moe.capacity' = %g: must be 0 "
                         "(dropless) or a factor above 0, at most 1000", origin, x->capacity);
    if (x->score != PT_ROUTER_SOFTMAX && x->score != PT_ROUTER_SIGMOID)
        pt_json_errs_add(e, "moe.router", "%s: field 'moe.router' = %d: not a known score",
                         origin, (int)x->score);
}

/* Records every problem of m, skipping fields e already has one for. */
static void model_check(const pt_model *m, const char *origin, pt_json_errs *e)
{
    if (!memchr(m->name, '\0', sizeof m->name))
        pt_json_errs_add(e, "name", "%s: field 'name' is not terminated", origin);
    else if (!m->name[0])
        pt_json_errs_add(e, "name", "%s: field 'name' is empty", origin);
    bool sizes = model_check_sizes(m, origin, e);
    bool enums = model_check_enums(m, origin, e);
    /* Sizes read wrongly are 0: shapes are only checked on sizes that were read. */
    static const char *const shape_fields[] = {"hidden", "heads", "kv_heads", "positions",
                                               "head_dim"};
    bool read = true;
    for (size_t i = 0; i < sizeof shape_fields / sizeof shape_fields[0]; i++)
        read &= !pt_json_errs_has(e, shape_fields[i]);
    if (m->head_dim < 0 || m->head_dim > (INT64_C(1) << 14)) {
        pt_json_errs_add(e, "head_dim", "%s: field 'head_dim' = %" PRId64 ": must be 1 to %"
                         PRId64 " (or left out: hidden/heads)", origin, m->head_dim,
                         INT64_C(1) << 14);
        read = false;
    }
    if (sizes && enums && read)
        model_check_shapes(m, origin, e);
    if (sizes && !pt_json_errs_has(e, "moe"))
        model_check_moe(m, origin, e);
    if (m->window < 0 || m->window > (INT64_C(1) << 22))
        pt_json_errs_add(e, "window.size", "%s: field 'window.size' = %" PRId64 ": must be 1 "
                         "to %" PRId64 " keys", origin, m->window, INT64_C(1) << 22);
    else if (m->window_full_every < 0 || m->window_full_every > (INT64_C(1) << 16))
        pt_json_errs_add(e, "window.full_every", "%s: field 'window.full_every' = %" PRId64
                         ": must be 0 (every layer banded) to %" PRId64, origin,
                         m->window_full_every, INT64_C(1) << 16);
    else if (m->window == 0 && m->window_full_every != 0)
        pt_json_errs_add(e, "window.full_every", "%s: field 'window.full_every' = %" PRId64
                         " without a window", origin, m->window_full_every);
}

int pt_model_validate(const pt_model *m, const char *origin, pt_err *err)
{
    pt_json_errs errs;
    pt_json_errs_init(&errs);
    model_check(m, origin, &errs);
    return pt_json_errs_finish(&errs, origin, err);
}
