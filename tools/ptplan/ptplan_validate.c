/*
 * ptplan --validate FILE: the planner's predictions against published training runs.
 *
 * FILE holds measured runs as their sources published them (tests/validation/
 * public-set.json is the project's set, holdout.json the runs it was not tuned on):
 * per point the model's sizes, the GPUs, the layout, the global batch and what was
 * measured. An optional "ptplan" object per point says how ptplan models the run:
 *   "ptplan": {
 *     "label": "bloom-176b",             short name for the listing [the source's
 *                                        first words]
 *     "cluster": "dgx-a100-80g",         built-in name, or a cluster JSON file relative
 *                                        to FILE [from "gpu": a100-80g, h100-sxm]
 *     "stack": "megatron-lm",            built-in name, or a stack JSON file relative
 *                                        to FILE [ptrun]
 *     "why": "...",                      why that cluster and stack (free text)
 *     "assume": {"mbs": {"value": 1, "why": "..."}, ...},
 *     "needs": ["moe"]                   what ptplan does not plan yet (moe, relu2): the
 *                                        point is listed as not evaluable, not scored
 * A point whose "precision" is "fp8" is planned with FP8 GEMMs (read_fp8).
 *   }
 * The source's fields are required as the public set writes them (model sizes, norm,
 * activation, bias, tied_embeddings; gpus, tp, pp, dp, mbs, global_batch, zero,
 * recompute, measured); where a source gives no value the field is null. An
 * assumption fills such a null (or a zero/recompute text that names no value, or an
 * optional field left out: positions [learned], dropout [none], vp, cp [1], sp [off])
 * and carries its reason; one that contradicts a value the source gives is refused.
 * Keys: the fields above, first_layers, last_layers, dp_overlap, tp_overlap,
 * param_overlap, tflops_convention (how a TFLOP/s-per-GPU figure counts FLOPs) and
 * moe_imbalance (a mixture's busiest rank's tokens over the mean, as --moe-imbalance;
 * 1, balanced, when not assumed).
 *
 * Measured step time: "step_s" when the source gives it; else global batch x seq /
 * (tokens/s per GPU x GPUs); else the FLOPs of one step under the source's
 * convention / (TFLOP/s per GPU x GPUs). Predicted: pt_evaluate on the spec and
 * layout built from the point, priced with its device's cost table (table_for: --db, or
 * the device's shipped profile where --db has no samples of it, else analytic). Error =
 * predicted / measured - 1.
 *
 * Each evaluated point is judged three ways: its zero-shot error; its leave-one-out
 * error, predicted with the correction of planner/calib.c fitted to the set's other
 * points of its source label, device and stack, never to itself; and, within each
 * source, the ranking: pairs whose measured tokens/s per GPU differ by more than 10 %
 * that the predictions order the other way, and Kendall's tau (ptplan_validate_loo.c).
 *
 * The summary ends with the errors by (stack, device): n, mean, min and max of
 * predicted / measured - 1 over the evaluated points of a stack (by the loaded stack's
 * name) on a device (by the cluster's device name, so a cluster file of a built-in's
 * device counts as that device). These are the error bands that ptplan's predictions
 * carry (ptplan_band.c), read and priced by the same code (eval_points).
 *
 * Exit status: 0 when every point was evaluated (but those that need what ptplan does
 * not plan); 3 when some point could not be (it is
 * listed with the reason: a layout the rules or the stack refuse, a value that cannot
 * be read); 1 when FILE is not a validation set (missing, malformed JSON, a point
 * without a required field, an unknown cluster or stack, a malformed "ptplan" object),
 * with one message naming the file and field.
 */
#include "ptplan.h"
#include "ptplan_validate_loo.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- Where a value is --------------------------------------------------------------- */

typedef struct vtables vtables; /* the cost table of each device (table_for) */

typedef struct {
    const char *file;  /* the validation file, as given */
    char dir[1024];    /* its folder with a trailing '/', "" for the working directory */
    char at[64];       /* the point being read: "points[3]" */
    const json_t *assume; /* the point's ptplan.assume, or NULL */
    vtables *tables;   /* --validate: each point priced with its device's table; NULL:
                          with the table eval_points is given (the error bands) */
} vctx;

/* Read results: the point is read, the point cannot be evaluated (the reason goes in
 * the point's listing), or the file is bad input (err filled). */
enum { V_OK = 0, V_SKIP = 1, V_BAD = -1,
       V_NEEDS = 2 /* the point needs what ptplan does not plan yet (ptplan.needs): listed,
                      not scored, not a failure */ };

/* "FILE: points[3].model.hidden: <message>" into err; returns V_BAD. */
static int bad(const vctx *v, pt_err *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(const vctx *v, pt_err *err, const char *field, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pt_err_set(err, "%s: %s%s%s: %s", v->file, v->at, field[0] ? "." : "", field, msg);
    return V_BAD;
}

/* ---- One point --------------------------------------------------------------------- */

typedef struct {
    char label[48];
    char source[160];
    int64_t gpus;
    pt_model m;
    pt_cluster c;
    pt_train t;
    pt_layout l;
    char layout_text[704];     /* compact, for the listing */
    const char *measured_from; /* "step_s", "tokens_per_s_per_gpu", "tflops_per_gpu" */
    double measured_s;
    char assumed[256];         /* the assumption keys used, comma-separated */
    bool ok;                   /* evaluated */
    char reason[512];          /* why not */
    pt_candidate cand;
    double error;              /* predicted / measured - 1 */
    char needs[96];            /* ptplan.needs in words ("FP8, mixture-of-experts"): not
                                  evaluable until ptplan plans it; "" otherwise */
    int loo_n;                 /* evaluated points of the same source label, device and
                                  stack besides this one (leave_one_out) */
    pt_calib loo;              /* the correction they give (planner/calib.c) */
    double loo_step_s, loo_error; /* this point predicted with it, and its error */
} vpoint;

static int skip(vpoint *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int skip(vpoint *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->reason, sizeof p->reason, fmt, ap);
    va_end(ap);
    return V_SKIP;
}

/* ---- Fields -------------------------------------------------------------------------- */

/* A value of the point and where it came from. */
typedef struct {
    const json_t *val; /* NULL: absent, and not required */
    char name[128];    /* for messages: "model.ffn" or "ptplan.assume.ffn" */
} vval;

static int field_name(char *buf, size_t n, const char *path, const char *key)
{
    return snprintf(buf, n, "%s%s%s", path, path[0] ? "." : "", key);
}

/* obj[key] (obj at `path` inside the point, "" for the point itself) into x: V_OK when
 * present, V_SKIP when absent or null and not required, V_BAD when required. */
static int field(const vctx *v, const json_t *obj, const char *path, const char *key,
                 bool required, vval *x, pt_err *err)
{
    field_name(x->name, sizeof x->name, path, key);
    x->val = json_object_get(obj, key);
    if (x->val && !json_is_null(x->val))
        return V_OK;
    x->val = NULL;
    return required ? bad(v, err, x->name, "missing (the field is required)") : V_SKIP;
}

static int as_int(const vctx *v, const vval *x, int64_t *out, pt_err *err)
{
    if (!json_is_integer(x->val))
        return bad(v, err, x->name, "expected an integer");
    *out = json_integer_value(x->val);
    return V_OK;
}

static int as_real(const vctx *v, const vval *x, double *out, pt_err *err)
{
    if (!json_is_number(x->val))
        return bad(v, err, x->name, "expected a number");
    *out = json_number_value(x->val);
    return V_OK;
}

static int as_string(const vctx *v, const vval *x, const char **out, pt_err *err)
{
    if (!json_is_string(x->val))
        return bad(v, err, x->name, "expected a string");
    *out = json_string_value(x->val);
    return V_OK;
}

/* true/false, or 0/1 as some sources write flags. */
static int as_bool(const vctx *v, const vval *x, bool *out, pt_err *err)
{
    if (json_is_boolean(x->val))
        *out = json_is_true(x->val);
    else if (json_is_integer(x->val) && (json_integer_value(x->val) & ~1) == 0)
        *out = json_integer_value(x->val) == 1;
    else
        return bad(v, err, x->name, "expected true or false");
    return V_OK;
}

/* obj[key] of one type: the codes of field(), or V_BAD for the wrong type. */
static int get_int(const vctx *v, const json_t *obj, const char *path, const char *key,
                   bool required, int64_t *out, pt_err *err)
{
    vval x;
    int rc = field(v, obj, path, key, required, &x, err);
    return rc ? rc : as_int(v, &x, out, err);
}

static int get_real(const vctx *v, const json_t *obj, const char *path, const char *key,
                    bool required, double *out, pt_err *err)
{
    vval x;
    int rc = field(v, obj, path, key, required, &x, err);
    return rc ? rc : as_real(v, &x, out, err);
}

static int get_string(const vctx *v, const json_t *obj, const char *path, const char *key,
                      bool required, const char **out, pt_err *err)
{
    vval x;
    int rc = field(v, obj, path, key, required, &x, err);
    return rc ? rc : as_string(v, &x, out, err);
}

/* ---- Assumptions --------------------------------------------------------------------- */

static const char *const assume_keys[] = {
    "mbs", "zero", "recompute", "sp", "vp", "cp", "kv_heads", "ffn", "norm", "activation",
    "bias", "tied_embeddings", "positions", "dropout", "first_layers", "last_layers",
    "pipeline_layout", "dp_overlap", "tp_overlap", "param_overlap", "tflops_convention",
    "moe_imbalance", NULL};

/* Checks ptplan.assume: known keys, each {"value": ..., "why": "<reason>"}. */
static int check_assume(const vctx *v, const json_t *assume, pt_err *err)
{
    if (!json_is_object(assume))
        return bad(v, err, "ptplan.assume", "expected an object of {\"value\", \"why\"}");
    const char *key;
    const json_t *a;
    json_object_foreach((json_t *)assume, key, a) {
        char name[128];
        snprintf(name, sizeof name, "ptplan.assume.%s", key);
        int k = 0;
        while (assume_keys[k] && strcmp(assume_keys[k], key) != 0)
            k++;
        if (!assume_keys[k])
            return bad(v, err, name, "unknown assumption (known: mbs, zero, recompute, sp, vp, "
                                     "cp, kv_heads, ffn, norm, activation, bias, "
                                     "tied_embeddings, positions, dropout, first_layers, "
                                     "last_layers, pipeline_layout, dp_overlap, tp_overlap, "
                                     "param_overlap, tflops_convention)");
        const json_t *why = json_object_get(a, "why");
        if (!json_is_object(a) || json_object_size(a) != 2 || !json_object_get(a, "value") ||
            !json_is_string(why) || !json_string_length(why))
            return bad(v, err, name, "expected {\"value\": ..., \"why\": \"<the reason>\"}");
    }
    return V_OK;
}

/* The assumed value of `key`, or NULL. Records the key in p->assumed. */
static const json_t *assumed(const vctx *v, vpoint *p, const char *key)
{
    const json_t *a = v->assume ? json_object_get(v->assume, key) : NULL;
    if (!a)
        return NULL;
    size_t n = strlen(p->assumed);
    snprintf(p->assumed + n, sizeof p->assumed - n, "%s%s", n ? "," : "", key);
    return json_object_get(a, "value");
}

/* A value the source gives must not be replaced by an assumption. */
static int conflict(vpoint *p, const char *key, const json_t *given)
{
    char *text = json_dumps(given, JSON_ENCODE_ANY);
    skip(p, "ptplan.assume.%s: the source gives %s = %s; an assumption only fills what the "
            "source leaves out", key, key, text ? text : "?");
    free(text);
    return V_SKIP;
}

/* The value of obj[key] (obj at `path` in the point, "" for the point itself): the
 * source's, or the assumed one where the source writes null. An absent key is bad
 * input when required (a source that gives no value says null), else no value; a
 * null without an assumption leaves the point unevaluated. */
static int resolve(const vctx *v, vpoint *p, const json_t *obj, const char *path,
                   const char *key, bool required, vval *out, pt_err *err)
{
    field_name(out->name, sizeof out->name, path, key);
    const json_t *x = json_object_get(obj, key);
    const json_t *a = assumed(v, p, key);
    out->val = NULL;
    if (!x && required)
        return bad(v, err, out->name, "missing (the field is required; write null where the "
                                      "source gives no value)");
    if (x && !json_is_null(x)) {
        out->val = x;
        return a ? conflict(p, key, x) : V_OK;
    }
    if (a) {
        snprintf(out->name, sizeof out->name, "ptplan.assume.%s", key);
        out->val = a;
        return V_OK;
    }
    if (x)
        return skip(p, "the source gives no %s; state one in ptplan.assume.%s with its reason",
                    out->name, key);
    return V_OK;
}

/* An integer of the point: the source's or the assumed one; `def` when absent (and
 * not required). */
static int point_int(const vctx *v, vpoint *p, const json_t *obj, const char *path,
                     const char *key, bool required, int64_t def, int64_t *out, pt_err *err)
{
    vval x;
    int rc = resolve(v, p, obj, path, key, required, &x, err);
    if (rc)
        return rc;
    *out = def;
    return x.val ? as_int(v, &x, out, err) : V_OK;
}

static int point_bool(const vctx *v, vpoint *p, const json_t *obj, const char *path,
                      const char *key, bool required, bool def, bool *out, pt_err *err)
{
    vval x;
    int rc = resolve(v, p, obj, path, key, required, &x, err);
    if (rc)
        return rc;
    *out = def;
    return x.val ? as_bool(v, &x, out, err) : V_OK;
}

/* ---- Text the sources write ------------------------------------------------------ */

/* Whether `word` occurs in `text`, ignoring case. */
static bool has(const char *text, const char *word)
{
    size_t n = strlen(word);
    for (; *text; text++)
        if (strncasecmp(text, word, n) == 0)
            return true;
    return false;
}

/* The ZeRO stage a source's text names ("FSDP FULL_SHARD (ZeRO-3 equivalent)",
 * "ZeRO-1 equivalent"), or -1 when it names none or several. */
static int zero_of_text(const char *t)
{
    int found = -1, n = 0;
    static const struct {
        const char *word;
        int stage;
    } words[] = {{"zero-3", 3}, {"zero stage 3", 3}, {"full_shard", 3}, {"full shard", 3},
                 {"zero-2", 2}, {"zero stage 2", 2}, {"shard_grad_op", 2},
                 {"zero-1", 1}, {"zero stage 1", 1}, {"zero-0", 0}, {"no_shard", 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (has(t, words[i].word) && found != words[i].stage) {
            found = words[i].stage;
            n++;
        }
    if (n == 0 && strncasecmp(t, "none", 4) == 0) /* "none", "none (no distributed ...)" */
        return 0;
    return n == 1 ? found : -1;
}

/* Whether the len characters at p are `word`, in either case. */
static bool word_is(const char *p, size_t len, const char *word)
{
    return strlen(word) == len && strncasecmp(p, word, len) == 0;
}

/* "full", "full (--checkpoint-activations)", "selective (per-op SAC)", "none".
 * "selective: norm, act" (Megatron-Core's --recompute-modules, as the MoE model zoo's
 * tables write them) names modules, which a layout lists (recompute=layernorm+moe_act):
 * norm or layernorm, act or moe_act, moe, mlp, attn or core_attn. A word it does not
 * know leaves the text unread (-1), for an assumption to say. */
static int recompute_of_text(const char *t, pt_recompute *out, unsigned *mods)
{
    const char *modules = strchr(t, ':');
    *mods = 0;
    if (strncasecmp(t, "full", 4) == 0) {
        *out = PT_RECOMPUTE_FULL;
    } else if (strncasecmp(t, "selective", 9) == 0 && modules) {
        /* the model zoo's short words, beside the modules' own names */
        static const struct {
            const char *word;
            pt_rmod mod;
        } shorts[] = {{"norm", PT_RMOD_LAYERNORM}, {"act", PT_RMOD_MOE_ACT},
                      {"attn", PT_RMOD_CORE_ATTN}};
        for (const char *p = modules + 1; *p;) {
            p += strspn(p, " ,");
            size_t len = strcspn(p, " ,");
            if (!len)
                break;
            int r = 0;
            while (r < PT_RMOD_COUNT && !word_is(p, len, pt_rmod_name((pt_rmod)r)))
                r++;
            for (size_t w = 0; r == PT_RMOD_COUNT && w < sizeof shorts / sizeof shorts[0]; w++)
                if (word_is(p, len, shorts[w].word))
                    r = (int)shorts[w].mod;
            if (r == PT_RMOD_COUNT)
                return -1;
            *mods |= 1u << r;
            p += len;
        }
        if (!*mods)
            return -1;
        *out = PT_RECOMPUTE_SELECTIVE;
    } else if (strncasecmp(t, "selective", 9) == 0) {
        *out = PT_RECOMPUTE_SELECTIVE;
    } else if (strncasecmp(t, "none", 4) == 0) {
        *out = PT_RECOMPUTE_NONE;
    } else {
        return -1;
    }
    return 0;
}

/* "learned" / "absolute", "alibi", "rope..." / "rotary..." */
static int pos_of_text(const char *t, pt_pos *out)
{
    if (strcasecmp(t, "learned") == 0 || strcasecmp(t, "absolute") == 0)
        *out = PT_POS_LEARNED;
    else if (strcasecmp(t, "alibi") == 0)
        *out = PT_POS_ALIBI;
    else if (strncasecmp(t, "rope", 4) == 0 || strncasecmp(t, "rotary", 6) == 0)
        *out = PT_POS_ROPE;
    else
        return -1;
    return 0;
}

/* ---- The model ------------------------------------------------------------------------ */

/* model.moe: {experts, top_k, expert_ffn, shared_experts, moe_layers ("all ..."),
 * router ("softmax ..." or "sigmoid ..."), aux_loss_coeff}. Every layer an MoE layer is
 * what "all" says; which top-k scores are renormalised does not change a step's time
 * (Megatron-Core's --moe-router-pre-softmax false, the zoo's Qwen3 setting, is softmax
 * over the top-k logits: renormalised). */
static int model_moe(const vctx *v, vpoint *p, const json_t *mo, pt_err *err)
{
    const json_t *x = json_object_get(mo, "moe");
    if (!x || json_is_null(x))
        return V_OK;
    if (!json_is_object(x))
        return bad(v, err, "model.moe", "expected an object");
    pt_moe *e = &p->m.moe;
    const char *layers = NULL, *router = NULL;
    double aux = 0;
    int rc;
    if ((rc = point_int(v, p, x, "model.moe", "experts", true, 0, &e->experts, err)) ||
        (rc = point_int(v, p, x, "model.moe", "top_k", true, 0, &e->top_k, err)) ||
        (rc = point_int(v, p, x, "model.moe", "expert_ffn", true, 0, &e->expert_ffn, err)) ||
        (rc = point_int(v, p, x, "model.moe", "shared_experts", false, 0, &e->shared_experts,
                        err)))
        return rc;
    if (get_string(v, x, "model.moe", "moe_layers", true, &layers, err) == V_BAD ||
        get_string(v, x, "model.moe", "router", true, &router, err) == V_BAD ||
        get_real(v, x, "model.moe", "aux_loss_coeff", false, &aux, err) == V_BAD)
        return V_BAD;
    if (e->shared_experts > 0)
        return skip(p, "model.moe.shared_experts = %lld: the set gives no shared expert size",
                    (long long)e->shared_experts);
    if (!layers || strncasecmp(layers, "all", 3) != 0)
        return skip(p, "model.moe.moe_layers '%s': only \"all ...\" is read",
                    layers ? layers : "null");
    e->every = 1;
    if (router && strncasecmp(router, "sigmoid", 7) == 0)
        e->score = PT_ROUTER_SIGMOID;
    else if (router && strncasecmp(router, "softmax", 7) == 0)
        e->score = PT_ROUTER_SOFTMAX;
    else
        return skip(p, "model.moe.router '%s': expected softmax or sigmoid",
                    router ? router : "null");
    e->renorm = true;
    e->aux_loss = aux;
    return V_OK;
}

static int model_sizes(const vctx *v, vpoint *p, const json_t *mo, pt_err *err)
{
    pt_model *m = &p->m;
    struct {
        const char *key;
        int64_t *out;
    } sizes[] = {{"layers", &m->layers}, {"hidden", &m->hidden}, {"heads", &m->heads},
                 {"kv_heads", &m->kv_heads}, {"ffn", &m->ffn}, {"vocab", &m->vocab},
                 {"seq", &m->seq}};
    int rc;
    if ((rc = model_moe(v, p, mo, err)))
        return rc;
    /* a model whose every layer is a mixture has no dense MLP: its ffn sizes nothing */
    const json_t *ffn = json_object_get(mo, "ffn");
    bool no_ffn = m->moe.experts > 0 && ffn && json_is_null(ffn);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (no_ffn && sizes[i].out == &m->ffn) {
            m->ffn = m->moe.expert_ffn;
            continue;
        }
        if ((rc = point_int(v, p, mo, "model", sizes[i].key, true, 0, sizes[i].out, err)))
            return rc;
    }
    if ((rc = point_int(v, p, mo, "model", "head_dim", false, 0, &m->head_dim, err)))
        return rc;
    if (m->heads > 0 && m->head_dim * m->heads == m->hidden)
        m->head_dim = 0; /* h/a: the spec's one form */
    if ((rc = point_bool(v, p, mo, "model", "bias", true, false, &m->bias, err)) ||
        (rc = point_bool(v, p, mo, "model", "tied_embeddings", true, false,
                         &m->tied_embeddings, err)) ||
        (rc = point_bool(v, p, mo, "model", "dropout", false, false, &m->dropout, err)))
        return rc;
    return V_OK;
}

/* norm and activation ("layernorm (+ embedding layernorm)" reads as layernorm);
 * positions: learned when the source names none. */
static int model_kinds(const vctx *v, vpoint *p, const json_t *mo, pt_err *err)
{
    vval norm, act, pos;
    const char *tn = "", *ta = "", *tp = "learned";
    int rc;
    if ((rc = resolve(v, p, mo, "model", "norm", true, &norm, err)) ||
        (rc = as_string(v, &norm, &tn, err)) ||
        (rc = resolve(v, p, mo, "model", "activation", true, &act, err)) ||
        (rc = as_string(v, &act, &ta, err)) ||
        (rc = resolve(v, p, mo, "model", "positions", false, &pos, err)) ||
        (pos.val && (rc = as_string(v, &pos, &tp, err))))
        return rc;
    /* "rmsnorm (+ qk-layernorm)": q and k normalised per head too */
    p->m.qk_norm = has(tn, "qk-layernorm") || has(tn, "qk_norm") || has(tn, "qk-norm");
    if (strncasecmp(tn, "layernorm", 9) == 0)
        p->m.norm = PT_NORM_LAYERNORM;
    else if (strncasecmp(tn, "rmsnorm", 7) == 0)
        p->m.norm = PT_NORM_RMSNORM;
    else
        return skip(p, "%s '%s': expected layernorm or rmsnorm", norm.name, tn);
    if (strncasecmp(ta, "gelu", 4) == 0)
        p->m.act = PT_ACT_GELU;
    else if (strncasecmp(ta, "swiglu", 6) == 0)
        p->m.act = PT_ACT_SWIGLU;
    else
        return skip(p, "%s '%s': expected gelu or swiglu", act.name, ta);
    if (pos_of_text(tp, &p->m.pos))
        return skip(p, "%s '%s': expected learned, rope or alibi", pos.name, tp);
    return V_OK;
}

static int read_model(const vctx *v, const json_t *pt, vpoint *p, pt_err *err)
{
    vval mv;
    int rc = field(v, pt, "", "model", true, &mv, err);
    if (rc)
        return rc;
    const json_t *mo = mv.val;
    if (!json_is_object(mo))
        return bad(v, err, "model", "expected an object");
    memset(&p->m, 0, sizeof p->m);
    const char *name = "model";
    if (get_string(v, mo, "model", "name", false, &name, err) == V_BAD)
        return V_BAD;
    snprintf(p->m.name, sizeof p->m.name, "%s", name);
    if ((rc = model_sizes(v, p, mo, err)) || (rc = model_kinds(v, p, mo, err)))
        return rc;
    pt_err why;
    if (pt_model_validate(&p->m, "model", &why))
        return skip(p, "%s", why.msg);
    return V_OK;
}

/* ---- Cluster and stack ------------------------------------------------------------------ */

/* A built-in name, or a file relative to the validation file (any name with a '/' or
 * ending in .json). */
static void spec_path(const vctx *v, const char *name, char *buf, size_t n)
{
    size_t len = strlen(name);
    bool file = strchr(name, '/') || (len > 5 && strcmp(name + len - 5, ".json") == 0);
    snprintf(buf, n, "%s%s", file && name[0] != '/' ? v->dir : "", name);
}

/* The built-in cluster of a point's "gpu" when ptplan.cluster is not given. */
static const char *cluster_of_gpu(const char *gpu)
{
    if (strcmp(gpu, "a100-80g") == 0)
        return "dgx-a100-80g";
    if (strcmp(gpu, "h100-sxm") == 0)
        return "dgx-h100";
    return NULL;
}

static int read_cluster(const vctx *v, const json_t *pt, const json_t *pp, vpoint *p,
                        pt_err *err)
{
    const char *name = NULL, *gpu = NULL;
    if (pp && get_string(v, pp, "ptplan", "cluster", false, &name, err) == V_BAD)
        return V_BAD;
    if (!name) {
        if (get_string(v, pt, "", "gpu", false, &gpu, err) == V_BAD)
            return V_BAD;
        if (!gpu || !(name = cluster_of_gpu(gpu)))
            return bad(v, err, "ptplan.cluster", "missing, and gpu '%s' has no built-in "
                                                 "cluster: name one (or a cluster file)",
                       gpu ? gpu : "(none)");
    }
    char path[1200];
    spec_path(v, name, path, sizeof path);
    pt_err why;
    if (pt_cluster_get(path, &p->c, &why))
        return bad(v, err, "ptplan.cluster", "%s", why.msg);
    int dpn = p->c.devices_per_node;
    if (p->gpus < dpn)
        p->c.devices_per_node = (int)p->gpus;
    else if (p->gpus % dpn)
        return skip(p, "%lld GPUs are not whole nodes of %d (cluster %s)", (long long)p->gpus,
                    dpn, p->c.name);
    p->c.nodes = (int)(p->gpus / p->c.devices_per_node);
    return V_OK;
}

static int read_stack(const vctx *v, const json_t *pp, vpoint *p, pt_err *err)
{
    const char *name = "ptrun";
    if (pp && get_string(v, pp, "ptplan", "stack", false, &name, err) == V_BAD)
        return V_BAD;
    char path[1200];
    spec_path(v, name, path, sizeof path);
    pt_err why;
    if (pt_stack_get(path, &p->t.stack, &why))
        return bad(v, err, "ptplan.stack", "%s", why.msg);
    return V_OK;
}

/* ptplan.needs: what the point needs that ptplan does not plan yet, a list of "moe"
 * (mixture-of-experts with expert parallelism) and "relu2" (the squared-ReLU MLP of
 * Nemotron-4), into p->needs
 * in words; such a point is listed as not evaluable and not scored. */
static int read_needs(const vctx *v, const json_t *needs, vpoint *p, pt_err *err)
{
    static const struct {
        const char *key, *words;
    } known[] = {{"moe", "mixture-of-experts"}, {"relu2", "the squared-ReLU activation"}};
    if (!needs)
        return V_OK;
    if (!json_is_array(needs) || json_array_size(needs) == 0)
        return bad(v, err, "ptplan.needs", "expected a list of moe, relu2");
    size_t i;
    const json_t *x;
    json_array_foreach(needs, i, x) {
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] &&
               !(json_is_string(x) && strcmp(json_string_value(x), known[k].key) == 0))
            k++;
        if (k == sizeof known / sizeof known[0])
            return bad(v, err, "ptplan.needs", "expected a list of moe, relu2");
        size_t used = strlen(p->needs);
        snprintf(p->needs + used, sizeof p->needs - used, "%s%s", used ? ", " : "",
                 known[k].words);
    }
    return V_OK;
}

/* The "ptplan" object: its keys, the label, and the assumptions it states. */
static int read_ptplan(vctx *v, const json_t *pt, const json_t **pp, vpoint *p, pt_err *err)
{
    static const char *const keys[] = {"label", "cluster", "stack", "why", "assume", "needs",
                                       NULL};
    *pp = json_object_get(pt, "ptplan");
    v->assume = NULL;
    const char *label = NULL;
    if (*pp) {
        if (!json_is_object(*pp))
            return bad(v, err, "ptplan", "expected an object");
        const char *key;
        const json_t *x;
        json_object_foreach((json_t *)*pp, key, x) {
            int k = 0;
            while (keys[k] && strcmp(keys[k], key) != 0)
                k++;
            if (!keys[k])
                return bad(v, err, "ptplan", "unknown key '%s' (known: label, cluster, stack, "
                                             "why, assume, needs)", key);
        }
        if (get_string(v, *pp, "ptplan", "label", false, &label, err) == V_BAD ||
            get_string(v, *pp, "ptplan", "why", false, &(const char *){NULL}, err) == V_BAD)
            return V_BAD;
        v->assume = json_object_get(*pp, "assume");
        if (v->assume && check_assume(v, v->assume, err))
            return V_BAD;
        if (read_needs(v, json_object_get(*pp, "needs"), p, err))
            return V_BAD;
    }
    const char *source = NULL;
    if (get_string(v, pt, "", "source", true, &source, err))
        return V_BAD;
    snprintf(p->source, sizeof p->source, "%s", source);
    if (label)
        snprintf(p->label, sizeof p->label, "%s", label);
    else /* the source's first word */
        snprintf(p->label, sizeof p->label, "%.*s", (int)strcspn(source, " ,("), source);
    return V_OK;
}

/* ---- The layout ------------------------------------------------------------------------- */

/* zero: required; the source's stage (a number, or text naming one), else (null, or
 * text that names none) the assumed one. */
static int layout_zero(const vctx *v, const json_t *pt, vpoint *p, int64_t *zero, pt_err *err)
{
    const json_t *z = json_object_get(pt, "zero");
    if (!z)
        return bad(v, err, "zero", "missing (the field is required; write null where the "
                                   "source gives no value)");
    const json_t *a = assumed(v, p, "zero");
    int given = -1;
    if (json_is_integer(z))
        given = (int)json_integer_value(z);
    else if (json_is_string(z))
        given = zero_of_text(json_string_value(z));
    else if (!json_is_null(z))
        return bad(v, err, "zero", "expected a stage number or text naming one");
    if (given >= 0 && a)
        return conflict(p, "zero", z);
    if (given >= 0) {
        *zero = given;
        return V_OK;
    }
    if (!a)
        return skip(p, "zero '%s' names no ZeRO stage; state one in ptplan.assume.zero with "
                       "its reason", json_is_string(z) ? json_string_value(z) : "null");
    if (!json_is_integer(a))
        return bad(v, err, "ptplan.assume.zero", "expected an integer");
    *zero = json_integer_value(a);
    return V_OK;
}

/* recompute: required; "full ...", "selective ...", "none", else assumed. */
static int layout_recompute(const vctx *v, const json_t *pt, vpoint *p, pt_recompute *r,
                            unsigned *mods, pt_err *err)
{
    const json_t *x = json_object_get(pt, "recompute");
    if (!x)
        return bad(v, err, "recompute", "missing (the field is required; write null where "
                                        "the source gives no value)");
    if (!json_is_string(x) && !json_is_null(x))
        return bad(v, err, "recompute", "expected a string");
    const char *text = json_is_string(x) ? json_string_value(x) : NULL;
    const json_t *a = assumed(v, p, "recompute");
    if (text && recompute_of_text(text, r, mods) == 0)
        return a ? conflict(p, "recompute", x) : V_OK;
    if (!a)
        return skip(p, "recompute '%s': expected none, selective or full, or state one in "
                       "ptplan.assume.recompute", text ? text : "null");
    if (!json_is_string(a) || recompute_of_text(json_string_value(a), r, mods))
        return bad(v, err, "ptplan.assume.recompute", "expected none, selective or full");
    return V_OK;
}

/* Keys that only an assumption sets: appended to the layout text as given. */
static int layout_extra(const vctx *v, vpoint *p, char *text, size_t n, pt_err *err)
{
    /* (a pipeline layout in Megatron-Core's notation is the layout key pipeline=) */
    static const char *const keys[] = {"first_layers", "last_layers", "pipeline_layout",
                                       "dp_overlap", "tp_overlap", "param_overlap", NULL};
    static const char *const as[] = {"first_layers", "last_layers", "pipeline", "dp_overlap",
                                     "tp_overlap", "param_overlap"};
    for (int k = 0; keys[k]; k++) {
        const json_t *a = assumed(v, p, keys[k]);
        if (!a)
            continue;
        size_t used = strlen(text);
        if (json_is_string(a)) {
            snprintf(text + used, n - used, ",%s=%s", as[k], json_string_value(a));
            continue;
        }
        if (json_is_integer(a))
            snprintf(text + used, n - used, ",%s=%lld", keys[k], (long long)json_integer_value(a));
        else if (json_is_boolean(a))
            snprintf(text + used, n - used, ",%s=%d", keys[k], json_is_true(a));
        else if (json_is_string(a))
            snprintf(text + used, n - used, ",%s=%s", keys[k], json_string_value(a));
        else
            return bad(v, err, "ptplan.assume", "%s: expected an integer, boolean or string "
                                                "value", keys[k]);
    }
    return V_OK;
}

static void layout_label(vpoint *p)
{
    const pt_layout *l = &p->l;
    char vp[16] = "", cp[16] = "", split[PT_PIPE_TEXT_MAX + 2] = "";
    if (l->vp > 1)
        snprintf(vp, sizeof vp, " vp%d", l->vp);
    if (l->cp > 1)
        snprintf(cp, sizeof cp, " cp%d", l->cp);
    if (l->first_layers || l->last_layers)
        snprintf(split, sizeof split, " L%lld/%lld", (long long)l->first_layers,
                 (long long)l->last_layers);
    if (l->pipe.n) { /* the pipeline layout, as Megatron-Core writes it */
        split[0] = ' ';
        pt_pipe_format(&l->pipe, split + 1, sizeof split - 1);
    }
    char ep[32] = "";
    if (l->ep > 1 || l->etp > 1)
        snprintf(ep, sizeof ep, " ep%d%s", l->ep, l->etp > 1 ? " etp" : "");
    if (l->etp > 1)
        snprintf(ep + strlen(ep), sizeof ep - strlen(ep), "%d", l->etp);
    /* "tp8 sp pp16 vp2 dp48 z1 mbs1 none": sizes 1 of vp, cp, ep and etp left out */
    char rec[64];
    pt_layout_recompute_text(l, rec, sizeof rec);
    snprintf(p->layout_text, sizeof p->layout_text, "tp%d%s pp%d%s%s dp%d%s z%d mbs%lld %s%s",
             l->tp, l->sp ? " sp" : "", l->pp, vp, cp, l->dp, ep, l->zero, (long long)l->mbs,
             rec, split);
}

/* Every rule the layout breaks, "; "-joined, into the point's reason. */
static int layout_rules(vpoint *p, uint32_t mask)
{
    size_t n = 0;
    for (int r = 0; r < PT_REJECT_COUNT; r++) {
        if (!(mask & (1u << r)))
            continue;
        char why[256];
        pt_reject_explain((pt_reject)r, &p->m, &p->c, p->t.global_batch, &p->l, why, sizeof why);
        n += (size_t)snprintf(p->reason + n, n < sizeof p->reason ? sizeof p->reason - n : 0,
                              "%sinvalid layout: %s", n ? "; " : "", why);
        if (n >= sizeof p->reason)
            break;
    }
    return V_SKIP;
}

static int read_layout(const vctx *v, const json_t *pt, vpoint *p, pt_err *err)
{
    int64_t tp, pp, dp, vp = 1, cp = 1, mbs = 1, zero = 0;
    int rc;
    if (get_int(v, pt, "", "tp", true, &tp, err) || get_int(v, pt, "", "pp", true, &pp, err) ||
        get_int(v, pt, "", "dp", true, &dp, err))
        return V_BAD;
    if ((rc = point_int(v, p, pt, "", "vp", false, 1, &vp, err)) ||
        (rc = point_int(v, p, pt, "", "cp", false, 1, &cp, err)) ||
        (rc = point_int(v, p, pt, "", "mbs", true, 1, &mbs, err)) ||
        (rc = layout_zero(v, pt, p, &zero, err)))
        return rc;
    pt_recompute rec = PT_RECOMPUTE_NONE;
    unsigned mods = 0;
    bool sp = false;
    int64_t ep = 1, etp = 1, edp = 0;
    if ((rc = layout_recompute(v, pt, p, &rec, &mods, err)) ||
        (rc = point_bool(v, p, pt, "", "sp", false, false, &sp, err)) ||
        (rc = point_int(v, p, pt, "", "ep", false, 1, &ep, err)) ||
        (rc = point_int(v, p, pt, "", "etp", false, 1, &etp, err)) ||
        (rc = point_int(v, p, pt, "", "edp", false, 0, &edp, err)))
        return rc;
    /* the expert-data-parallel size is what folding leaves: a source's must agree */
    if (edp > 0 && ep >= 1 && etp >= 1 && edp * ep * etp != tp * cp * dp)
        return skip(p, "edp = %lld: parallel folding gives tp*cp*dp/(ep*etp) = "
                       "%lld*%lld*%lld/(%lld*%lld)", (long long)edp, (long long)tp,
                    (long long)cp, (long long)dp, (long long)ep, (long long)etp);
    /* the token dispatcher the framework names: NCCL's all-to-all, DeepEP's (flex), or
     * Megatron-Core's allgather */
    const char *fw = NULL;
    if (get_string(v, pt, "", "framework", false, &fw, err) == V_BAD)
        return V_BAD;
    const char *dispatch = !fw                                 ? ""
                           : has(fw, "dispatcher allgather")   ? ",moe_dispatch=allgather"
                           : has(fw, "dispatcher deepep")      ? ",moe_dispatch=flex"
                                                               : "";
    char text[400], rec_text[64];
    pt_layout_recompute_text(&(pt_layout){.recompute = rec, .recompute_modules = mods},
                             rec_text, sizeof rec_text);
    snprintf(text, sizeof text, "tp=%lld,pp=%lld,vp=%lld,cp=%lld,dp=%lld,zero=%lld,mbs=%lld,"
                                "recompute=%s,sp=%d", (long long)tp, (long long)pp,
             (long long)vp, (long long)cp, (long long)dp, (long long)zero, (long long)mbs,
             rec_text, sp);
    if (ep > 1 || etp > 1) {
        size_t used = strlen(text);
        snprintf(text + used, sizeof text - used, ",ep=%lld,etp=%lld%s", (long long)ep,
                 (long long)etp, dispatch);
    }
    if ((rc = layout_extra(v, p, text, sizeof text, err)))
        return rc;
    /* One optimizer step: global_batch / (mbs x dp) micro-batches per data-parallel rank,
     * 1F1B (interleaved when vp > 1), the stack's overlap defaults. */
    pt_layout_default(&p->l);
    pt_err why;
    if (pt_layout_parse_stack(text, pt_cluster_world(&p->c), p->t.global_batch, &p->t.stack,
                              &p->l, &why))
        return skip(p, "%s", why.msg);
    layout_label(p);
    uint32_t mask;
    if (pt_layout_check(&p->m, &p->c, p->t.global_batch, &p->l, &mask))
        return layout_rules(p, mask);
    return V_OK;
}

/* ---- Measured step time ------------------------------------------------------------------ */

/* FLOPs of one step of B sequences as the source counted them.
 * "megatron-2021": Narayanan et al. 2021, "Efficient Large-Scale Language Model
 *   Training on GPU Clusters Using Megatron-LM", Sec. 5.1, eq. (3):
 *   96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h)), which counts full recomputation.
 * "megatron-core": Megatron-LM's num_floating_point_operations (megatron/training/
 *   training.py at core_r0.8.0), model FLOPs without recomputation:
 *   12·B·s·L·h²·((1 + k/a + s/h)·(a·d/h) + (f/h)·g + Vp/(2·L·h)), d = h/a, g = 3/2
 *   for SwiGLU, Vp the vocabulary padded to 128·tp. */
static int step_flops(const char *conv, const vpoint *p, double *out)
{
    const pt_model *m = &p->m;
    double B = (double)p->t.global_batch, s = (double)m->seq, L = (double)m->layers;
    double h = (double)m->hidden, a = (double)m->heads, k = (double)m->kv_heads;
    if (strcmp(conv, "megatron-2021") == 0) {
        double V = (double)m->vocab;
        *out = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
        return 0;
    }
    if (strcmp(conv, "megatron-core") == 0) {
        int64_t mult = 128 * (int64_t)p->l.tp;
        double Vp = (double)((m->vocab + mult - 1) / mult * mult);
        double g = m->act == PT_ACT_SWIGLU ? 1.5 : 1.0;
        double d = h / a;
        *out = 12 * B * s * L * h * h *
               ((1 + k / a + s / h) * (a * d / h) + (double)m->ffn / h * g + Vp / (2 * L * h));
        return 0;
    }
    return -1;
}

static int read_measured(const vctx *v, const json_t *pt, vpoint *p, pt_err *err)
{
    vval mv;
    int rc = field(v, pt, "", "measured", true, &mv, err);
    if (rc)
        return rc;
    const json_t *me = mv.val;
    if (!json_is_object(me))
        return bad(v, err, "measured", "expected an object");
    double x = 0;
    if ((rc = get_real(v, me, "measured", "step_s", false, &x, err)) != V_SKIP) {
        p->measured_from = "step_s";
        p->measured_s = x;
    } else if ((rc = get_real(v, me, "measured", "tokens_per_s_per_gpu", false, &x, err)) !=
               V_SKIP) {
        p->measured_from = "tokens_per_s_per_gpu";
        p->measured_s = (double)p->t.global_batch * (double)p->m.seq / (x * (double)p->gpus);
    } else if ((rc = get_real(v, me, "measured", "tflops_per_gpu", false, &x, err)) != V_SKIP) {
        p->measured_from = "tflops_per_gpu";
        const json_t *a = assumed(v, p, "tflops_convention");
        double flops;
        if (rc == V_OK && !a)
            return skip(p, "measured.tflops_per_gpu needs the FLOP count it was computed with: "
                           "state it in ptplan.assume.tflops_convention");
        if (rc == V_OK && (!json_is_string(a) || step_flops(json_string_value(a), p, &flops)))
            return bad(v, err, "ptplan.assume.tflops_convention",
                       "expected megatron-2021 or megatron-core");
        if (rc == V_OK)
            p->measured_s = flops / (x * 1e12 * (double)p->gpus);
    } else
        return skip(p, "measured gives none of step_s, tokens_per_s_per_gpu, tflops_per_gpu");
    if (rc == V_BAD)
        return rc;
    if (!(p->measured_s > 0) || !isfinite(p->measured_s))
        return skip(p, "measured %s gives no positive step time", p->measured_from);
    return V_OK;
}

/* ---- Reading and evaluating one point ------------------------------------------------------ */

/* A point that needs what ptplan does not plan: its model's name, its cluster and stack
 * (bad input as anywhere), listed with the reason. */
static int read_unevaluable(vctx *v, const json_t *pt, const json_t *pp, vpoint *p,
                            pt_err *err)
{
    const json_t *mo = json_object_get(pt, "model"), *name = json_object_get(mo, "name");
    snprintf(p->m.name, sizeof p->m.name, "%s", json_is_string(name) ? json_string_value(name)
                                                                     : "model");
    if (read_cluster(v, pt, pp, p, err) == V_BAD || read_stack(v, pp, p, err) == V_BAD)
        return V_BAD;
    snprintf(p->reason, sizeof p->reason, "not evaluable: needs %s", p->needs);
    return V_NEEDS;
}

/* precision "fp8" (as the NeMo FP8 table writes it): the layers' linear layers in FP8
 * over bf16 storage, with the stack's default recipe (Megatron-Core's: delayed, the
 * recipe NeMo 24.07 ran) and TE's default amax history; any other precision text is
 * bf16 mixed precision, as before. */
static int read_fp8(const vctx *v, const json_t *pt, vpoint *p, pt_err *err)
{
    const json_t *x = json_object_get(pt, "precision");
    if (!json_is_string(x) || strcmp(json_string_value(x), "fp8") != 0)
        return V_OK;
    p->t.fp8.recipe = (pt_fp8_recipe)p->t.stack.fp8_default;
    if (p->t.fp8.recipe == PT_FP8_OFF)
        return bad(v, err, "precision", "fp8: stack '%s' trains no layer in FP8",
                   p->t.stack.name);
    pt_err why;
    if (pt_train_check_fp8(&p->t, &p->c, &why))
        return bad(v, err, "precision", "fp8: %s", why.msg);
    return V_OK;
}

static int read_point(vctx *v, const json_t *pt, vpoint *p, pt_err *err)
{
    const json_t *pp;
    int rc;
    if (!json_is_object(pt))
        return bad(v, err, "", "expected an object");
    if ((rc = read_ptplan(v, pt, &pp, p, err)))
        return rc;
    if (get_int(v, pt, "", "gpus", true, &p->gpus, err) ||
        get_int(v, pt, "", "global_batch", true, &p->t.global_batch, err))
        return V_BAD;
    if (p->gpus < 1 || p->gpus > (1 << 24))
        return bad(v, err, "gpus", "%lld: expected 1 to 2^24", (long long)p->gpus);
    if (p->t.global_batch < 1)
        return bad(v, err, "global_batch", "%lld: expected at least 1",
                   (long long)p->t.global_batch);
    if (p->needs[0])
        return read_unevaluable(v, pt, pp, p, err);
    /* Bad input first (every required field, the cluster and the stack), so that a broken
     * file is reported as such even when an earlier part of a point cannot be evaluated. */
    int64_t batch = p->t.global_batch;
    if ((rc = read_model(v, pt, p, err)) == V_BAD)
        return rc;
    int rc_c = read_cluster(v, pt, pp, p, err);
    if (rc_c == V_BAD)
        return rc_c;
    pt_train_default(&p->t, &p->c);
    p->t.global_batch = batch;
    p->t.precision = PT_PREC_BF16;
    if (pt_cluster_check_precision(&p->c, p->t.precision, err))
        return bad(v, err, "ptplan.cluster", "%s", err->msg);
    int rc_s = read_stack(v, pp, p, err);
    if (rc_s == V_BAD)
        return rc_s;
    if (read_fp8(v, pt, p, err) == V_BAD)
        return V_BAD;
    const json_t *imb = assumed(v, p, "moe_imbalance");
    if (imb) {
        double F = json_is_number(imb) ? json_number_value(imb) : 0;
        if (!(F >= 1 && F <= 64))
            return bad(v, err, "ptplan.assume.moe_imbalance", "expected a number from 1 to 64 "
                                                              "(the busiest rank's tokens over "
                                                              "the mean)");
        p->t.moe_imbalance = F;
    }
    if (rc || rc_c)
        return V_SKIP;
    if ((rc = read_layout(v, pt, p, err)))
        return rc;
    return read_measured(v, pt, p, err);
}

static void evaluate_point(const pt_costdb *db, vpoint *p)
{
    pt_err err;
    if (pt_evaluate(&p->m, &p->c, &p->t, db, &p->l, NULL, &p->cand, &err)) {
        skip(p, "%s", err.msg);
        return;
    }
    p->ok = true;
    p->error = p->cand.predicted.step_time_s / p->measured_s - 1;
}

/* ---- The cost table of each point ------------------------------------------------------- */

/* A point is priced as ptplan prices a job on its cluster (ptplan_job.c, use_shipped):
 * with --db where that table has samples of the point's device, else with the profile the
 * project ships of that device (for every stack: each prices from it the kernels that are
 * ptrun's, planner/sim.c), unless --no-shipped-profile; else with --db (its collectives
 * and fits) or analytically. The shipped profiles are opened once each. */
#define VT_MAX_DEVICES 16
struct vtables {
    pt_costdb *db;     /* --db, or NULL */
    bool no_shipped;
    int n;
    struct {
        char device[64];
        pt_costdb *db; /* NULL: none shipped */
    } shipped[VT_MAX_DEVICES];
};

static bool has_samples_of(const pt_costdb *db, const char *device)
{
    int64_t runs[1], profiled;
    return db && (pt_costdb_sample_runs(db, device, runs, 1, &profiled) > 0 || profiled > 0);
}

/* The table for points on `device` into *db; -1 with err when a shipped profile does
 * not load. */
static int table_for(vtables *t, const char *device, const pt_costdb **db, pt_err *err)
{
    *db = t->db;
    if (t->no_shipped || has_samples_of(t->db, device))
        return 0;
    int i = 0;
    while (i < t->n && strcmp(t->shipped[i].device, device) != 0)
        i++;
    if (i == t->n) {
        pt_costdb *shipped = NULL;
        if (pt_costdb_open_shipped(device, &shipped, err) < 0)
            return -1;
        if (t->n == VT_MAX_DEVICES) { /* more devices than any set holds: open each time */
            pt_costdb_close(shipped);
            return 0;
        }
        snprintf(t->shipped[i].device, sizeof t->shipped[i].device, "%s", device);
        t->shipped[i].db = shipped;
        t->n++;
    }
    if (t->shipped[i].db)
        *db = t->shipped[i].db;
    return 0;
}

/* Which points are priced: every one (NULL), or those of one stack on one device, as a
 * band selects them (by the loaded stack's name and the cluster's device name, so that a
 * cluster file with a built-in's device counts as that device). */
typedef struct {
    const char *stack, *device;
} vonly;

static bool selected(const vonly *only, const vpoint *p)
{
    return !only || (strcmp(p->t.stack.name, only->stack) == 0 &&
                     strcmp(p->c.device.name, only->device) == 0);
}

/* Reads every point of the set that load_set read into v and root into *out (calloc'd,
 * *n of them; the caller frees it) and prices those `only` selects with db. V_OK (a point
 * that cannot be evaluated carries its reason), or V_BAD with err when the file is not a
 * validation set: then *out is NULL. The one path of --validate and of the error bands. */
static int eval_points(vctx *v, const json_t *root, const pt_costdb *db, const vonly *only,
                       vpoint **out, int *n, pt_err *err)
{
    const json_t *points = json_object_get(root, "points");
    *n = (int)json_array_size(points);
    vpoint *p = calloc((size_t)*n, sizeof *p);
    *out = NULL;
    if (!p) {
        pt_err_set(err, "out of memory");
        return V_BAD;
    }
    for (int i = 0; i < *n; i++) {
        snprintf(v->at, sizeof v->at, "points[%d]", i);
        int r = read_point(v, json_array_get(points, (size_t)i), &p[i], err);
        if (r == V_BAD) {
            free(p);
            return V_BAD;
        }
        const pt_costdb *table = db;
        if (r == V_OK && v->tables && table_for(v->tables, p[i].c.device.name, &table, err)) {
            free(p);
            return V_BAD;
        }
        if (r == V_OK && selected(only, &p[i]))
            evaluate_point(table, &p[i]);
    }
    *out = p;
    return V_OK;
}

/* ---- Three ways: zero-shot, leave-one-out, ranking ------------------------------------ */

/* Each evaluated point judged three ways: its zero-shot error (p->error); its error
 * when predicted with the correction learned from the other points of its source label,
 * device and stack (never itself; ptplan_validate_loo.c); and, within its source,
 * whether the zero-shot predictions order it against the others as measured. */
typedef struct {
    int n, evaluated;
    int needs;                 /* not evaluable by design (ptplan.needs), not scored */
    double mean_abs, max_abs;  /* zero-shot, over the evaluated points */
    int worst;
    int loo_points;            /* evaluated points with at least one neighbour */
    double loo_mean, loo_max;
    int loo_worst;
    val_rank *by;              /* the ranking of each source label ([groups]) */
    int groups;
    val_rank all;
    int *of;                   /* the ranking's point numbers -> the set's indices */
} vsummary;

/* The evaluated points as ptplan_validate_loo.c sees them, into v; of maps back. */
static int val_points(const vpoint *p, int n, val_point *v, int *of)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!p[i].ok)
            continue;
        v[k] = (val_point){.label = p[i].label, .device = p[i].c.device.name,
                           .stack = p[i].t.stack.name,
                           .predicted_s = p[i].cand.predicted.step_time_s,
                           .tokens_per_gpu = (double)p[i].t.global_batch *
                                             (double)p[i].m.seq / (double)p[i].gpus};
        pt_calib_point_of(&p[i].cand.predicted, p[i].measured_s, &v[k].zero);
        of[k++] = i;
    }
    return k;
}

static void summarise_zero(const vpoint *p, int n, vsummary *s)
{
    for (int i = 0; i < n; i++) {
        s->needs += !p[i].ok && p[i].needs[0];
        if (!p[i].ok)
            continue;
        double e = fabs(p[i].error);
        s->evaluated++;
        s->mean_abs += e;
        if (e > s->max_abs || s->worst < 0) {
            s->max_abs = e;
            s->worst = i;
        }
    }
    if (s->evaluated)
        s->mean_abs /= s->evaluated;
}

/* Judges p three ways into s (and each point's leave-one-out fields); free_summary frees
 * it. -1 when out of memory. */
static int summarise(vpoint *p, int n, vsummary *s)
{
    *s = (vsummary){.n = n, .worst = -1, .loo_worst = -1};
    summarise_zero(p, n, s);
    size_t room = n > 0 ? (size_t)n : 1;
    val_point *v = calloc(room, sizeof *v);
    s->of = calloc(room, sizeof *s->of);
    s->by = calloc(room, sizeof *s->by);
    if (!v || !s->of || !s->by) {
        free(v);
        return -1;
    }
    int k = val_points(p, n, v, s->of);
    val_leave_one_out(v, k);
    for (int i = 0; i < k; i++) {
        vpoint *q = &p[s->of[i]];
        q->loo_n = v[i].loo_n;
        if (!q->loo_n)
            continue;
        q->loo = v[i].loo;
        q->loo_step_s = v[i].loo_step_s;
        q->loo_error = v[i].loo_error;
        double e = fabs(q->loo_error);
        s->loo_points++;
        s->loo_mean += e;
        if (e > s->loo_max || s->loo_worst < 0) {
            s->loo_max = e;
            s->loo_worst = s->of[i];
        }
    }
    if (s->loo_points)
        s->loo_mean /= s->loo_points;
    s->groups = val_ranking(v, k, s->by, &s->all);
    free(v);
    return 0;
}

static void free_summary(vsummary *s)
{
    free(s->by);
    free(s->of);
}

/* ---- Output ------------------------------------------------------------------------------ */

/* A point's leave-one-out prediction, or why it has none. */
static json_t *loo_json(const vpoint *p)
{
    if (!p->loo_n)
        return json_pack("{s:i, s:s}", "neighbours", 0, "reason",
                         "no other evaluated point of this source on this device with this "
                         "stack");
    const pt_calib *c = &p->loo;
    json_t *cal = json_pack("{s:b, s:s, s:f, s:f, s:f, s:b}", "applied", c->applied, "form",
                            pt_calib_form_name(c->form), "k_compute", c->k_compute, "k_comm",
                            c->k_comm, "overhead_s", c->overhead_s, "checked", c->checked);
    if (cal && c->why[0])
        json_object_set_new(cal, "why", json_string(c->why));
    return json_pack("{s:i, s:f, s:f, s:o}", "neighbours", p->loo_n, "predicted_step_s",
                     p->loo_step_s, "error", p->loo_error, "calibration",
                     cal ? cal : json_null());
}

static json_t *point_json(int i, const vpoint *p)
{
    json_t *o = json_pack("{s:i, s:s, s:s, s:s, s:I, s:s, s:s, s:b}", "index", i, "label",
                          p->label, "source", p->source, "model", p->m.name, "gpus",
                          (json_int_t)p->gpus, "cluster", p->c.name, "stack", p->t.stack.name,
                          "evaluable", p->ok);
    if (p->layout_text[0])
        json_object_set_new(o, "layout", json_string(p->layout_text));
    json_object_set_new(o, "assumed", json_string(p->assumed));
    if (!p->ok) {
        json_object_set_new(o, "reason", json_string(p->reason));
        if (p->needs[0])
            json_object_set_new(o, "needs", json_string(p->needs));
        return o;
    }
    const pt_sim_result *r = &p->cand.predicted;
    double tokens = (double)p->t.global_batch * (double)p->m.seq / (double)p->gpus;
    json_object_set_new(o, "measured_from", json_string(p->measured_from));
    json_object_set_new(o, "measured_step_s", json_real(p->measured_s));
    json_object_set_new(o, "predicted_step_s", json_real(r->step_time_s));
    json_object_set_new(o, "error", json_real(p->error));
    json_object_set_new(o, "measured_tokens_per_s_per_gpu", json_real(tokens / p->measured_s));
    json_object_set_new(o, "predicted_tokens_per_s_per_gpu",
                        json_real(tokens / r->step_time_s));
    json_object_set_new(o, "leave_one_out", loo_json(p));
    json_object_set_new(o, "predicted_mfu", json_real(r->mfu));
    json_object_set_new(o, "bubble_fraction", json_real(r->bubble_fraction));
    json_object_set_new(o, "exposed_comm_fraction", json_real(r->exposed_comm_fraction));
    json_object_set_new(o, "memory_bytes", json_real(p->cand.memory.total_bytes));
    json_object_set_new(o, "fits", json_boolean(p->cand.memory.total_bytes <=
                                                (double)p->c.device.memory_bytes));
    json_object_set_new(o, "predicted", pt_sim_result_json(r)); /* with the time breakdown */
    return o;
}

/* The evaluated points' errors by (stack, device), in the order each pair first occurs,
 * into b (room for n): the numbers prediction_band gives a job of that stack on that
 * device, from the same band_add. Returns how many pairs. */
static int group_bands(const vpoint *p, int n, pred_band *b)
{
    int groups = 0;
    for (int i = 0; i < n; i++) {
        if (!p[i].ok)
            continue;
        int g = 0;
        while (g < groups && !(strcmp(b[g].stack, p[i].t.stack.name) == 0 &&
                               strcmp(b[g].device, p[i].c.device.name) == 0))
            g++;
        if (g == groups) {
            b[g] = (pred_band){0};
            snprintf(b[g].stack, sizeof b[g].stack, "%s", p[i].t.stack.name);
            snprintf(b[g].device, sizeof b[g].device, "%s", p[i].c.device.name);
            groups++;
        }
        band_add(&b[g], p[i].error);
    }
    return groups;
}

static void print_bands_text(const vpoint *p, int n)
{
    pred_band *b = calloc((size_t)n, sizeof *b);
    int groups = b ? group_bands(p, n, b) : 0;
    if (groups)
        printf("\nby stack and device (the error bands ptplan's predictions carry):\n"
               "%-24s %-24s %4s %10s %7s %7s\n", "stack", "device", "n", "mean error", "min",
               "max");
    for (int g = 0; g < groups; g++)
        printf("%-24s %-24s %4d %+9.1f%% %+6.1f%% %+6.1f%%\n", b[g].stack, b[g].device, b[g].n,
               100 * b[g].err_mean, 100 * b[g].err_min, 100 * b[g].err_max);
    free(b);
}

static json_t *bands_json(const vpoint *p, int n)
{
    json_t *list = json_array();
    pred_band *b = calloc((size_t)n, sizeof *b);
    int groups = b ? group_bands(p, n, b) : 0;
    for (int g = 0; g < groups; g++)
        json_array_append_new(list, json_pack("{s:s, s:s, s:i, s:f, s:f, s:f}", "stack",
                                              b[g].stack, "device", b[g].device, "n", b[g].n,
                                              "mean_error", b[g].err_mean, "min_error",
                                              b[g].err_min, "max_error", b[g].err_max));
    free(b);
    return list;
}

static void print_point_text(int i, const vpoint *q)
{
    printf("%3d %-16.16s %-12.12s %5lld %-38.38s ", i, q->label, q->m.name, (long long)q->gpus,
           q->layout_text[0] ? q->layout_text : "-");
    if (!q->ok) {
        printf("%10s %11s %7s %9s %7s %6s  %s%s\n", "-", "-", "-", "-", "-", "-",
               q->needs[0] ? "" : "NOT EVALUATED: ", q->reason);
        return;
    }
    const pt_sim_result *r = &q->cand.predicted;
    char note[400] = "", loo_s[16] = "-", loo_e[16] = "-";
    if (q->cand.memory.total_bytes > (double)q->c.device.memory_bytes)
        snprintf(note, sizeof note, "over memory: %.1f of %.1f GiB ",
                 gib(q->cand.memory.total_bytes), gib((double)q->c.device.memory_bytes));
    if (q->assumed[0])
        snprintf(note + strlen(note), sizeof note - strlen(note), "assumed: %s", q->assumed);
    if (q->loo_n) {
        snprintf(loo_s, sizeof loo_s, "%.4g", q->loo_step_s);
        snprintf(loo_e, sizeof loo_e, "%+.1f%%", 100 * q->loo_error);
    }
    printf("%10.4g %11.4g %+6.1f%% %9s %7s %5.1f%%  %s\n", q->measured_s, r->step_time_s,
           100 * q->error, loo_s, loo_e, 100 * r->mfu, note);
}

/* Kendall's tau as the table shows it, "-" when it is not defined. */
static void tau_text(double tau, char *buf, size_t n)
{
    if (isnan(tau))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%.2f", tau);
}

static void print_ranking_text(const vsummary *s)
{
    char tau[16];
    tau_text(s->all.kendall_tau, tau, sizeof tau);
    printf("ranking:       %lld of %lld pairs whose measured speeds (tokens/s per GPU) differ "
           "by more than %.0f%% are ordered wrongly by the zero-shot predictions; Kendall's "
           "tau %s over the %lld pairs within sources\n", (long long)s->all.wrong,
           (long long)s->all.compared, 100 * VAL_RANK_DIFF, tau, (long long)s->all.pairs);
    printf("  %-16s %6s %6s %6s %6s %6s  %s\n", "source", "points", "pairs", ">10%", "wrong",
           "tau", "wrong pairs");
    for (int g = 0; g < s->groups; g++) {
        const val_rank *r = &s->by[g];
        tau_text(r->kendall_tau, tau, sizeof tau);
        printf("  %-16.16s %6d %6lld %6lld %6lld %6s ", r->label, r->points,
               (long long)r->pairs, (long long)r->compared, (long long)r->wrong, tau);
        for (int k = 0; k < r->wrong && k < 8; k++)
            printf(" #%d/#%d", s->of[r->wrong_first[k]], s->of[r->wrong_second[k]]);
        printf("\n");
    }
}

static void print_summary_text(const vpoint *p, int n, const vsummary *s)
{
    if (s->evaluated)
        printf("zero-shot:     mean |error| %.1f%% over %d evaluated points; max |error| %.1f%% "
               "(#%d %s %s)\n", 100 * s->mean_abs, s->evaluated, 100 * s->max_abs, s->worst,
               p[s->worst].label, p[s->worst].m.name);
    if (s->loo_points)
        printf("leave-one-out: mean |error| %.1f%% over %d points; max |error| %.1f%% (#%d %s "
               "%s); each predicted with the correction learned from the other points of its "
               "source, device and stack\n", 100 * s->loo_mean, s->loo_points,
               100 * s->loo_max, s->loo_worst, p[s->loo_worst].label,
               p[s->loo_worst].m.name);
    int alone = s->evaluated - s->loo_points;
    if (alone) {
        printf("               %d point%s no other point of %s source, device and stack, so "
               "no leave-one-out prediction:", alone, alone == 1 ? " has" : "s have",
               alone == 1 ? "its" : "their");
        for (int i = 0; i < n; i++)
            if (p[i].ok && !p[i].loo_n)
                printf(" #%d %s", i, p[i].label);
        printf("\n");
    }
    if (s->evaluated)
        print_ranking_text(s);
    if (s->needs)
        printf("%d point%s not evaluable until ptplan plans what %s (listed, not scored)\n",
               s->needs, s->needs == 1 ? " is" : "s are",
               s->needs == 1 ? "it needs" : "they need");
    if (s->evaluated + s->needs < n)
        printf("%d of %d points could not be evaluated\n", n - s->evaluated - s->needs, n);
}

static void print_text(const char *file, const char *costs, const vpoint *p, int n,
                       const vsummary *s)
{
    printf("validation set %s: %d points, %s\n\n", file, n, costs);
    printf("%3s %-16s %-12s %5s %-38s %10s %11s %7s %9s %7s %6s  %s\n", "#", "source", "model",
           "gpus", "layout", "measured s", "predicted s", "error", "l-o-o s", "error", "MFU",
           "note");
    for (int i = 0; i < n; i++)
        print_point_text(i, &p[i]);
    printf("\n");
    print_summary_text(p, n, s);
    print_bands_text(p, n);
}

/* {points, mean_abs_error, max_abs_error, worst} of one way; null figures without
 * points. */
static json_t *errors_json(int points, double mean, double max, int worst)
{
    json_t *o = json_pack("{s:i}", "points", points);
    json_object_set_new(o, "mean_abs_error", points ? json_real(mean) : json_null());
    json_object_set_new(o, "max_abs_error", points ? json_real(max) : json_null());
    json_object_set_new(o, "worst", points ? json_integer(worst) : json_null());
    return o;
}

static json_t *ranking_json(const vsummary *s)
{
    json_t *o = val_rank_json(&s->all, false), *by = json_array();
    json_object_set_new(o, "speed", json_string("tokens_per_s_per_gpu"));
    json_object_set_new(o, "predictions", json_string("zero_shot"));
    json_object_set_new(o, "differ_by_more_than", json_real(VAL_RANK_DIFF));
    for (int g = 0; g < s->groups; g++) {
        const val_rank *r = &s->by[g];
        json_t *x = val_rank_json(r, true), *wrong = json_array();
        for (int k = 0; k < r->wrong && k < 8; k++)
            json_array_append_new(wrong, json_pack("[i, i]", s->of[r->wrong_first[k]],
                                                   s->of[r->wrong_second[k]]));
        json_object_set_new(x, "wrong", wrong);
        json_array_append_new(by, x);
    }
    json_object_set_new(o, "by_source", by);
    return o;
}

static void print_json_out(const char *file, const char *costs, const vpoint *p, int n,
                           const vsummary *s)
{
    json_t *list = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(list, point_json(i, &p[i]));
    json_t *root = json_pack("{s:s, s:s, s:o, s:i, s:i, s:i}", "file", file, "costs", costs,
                             "points", list, "count", n, "evaluated", s->evaluated,
                             "not_evaluable", s->needs);
    /* the zero-shot figures, also at the top level as they always were */
    json_object_set_new(root, "mean_abs_error", s->evaluated ? json_real(s->mean_abs) : json_null());
    json_object_set_new(root, "max_abs_error", s->evaluated ? json_real(s->max_abs) : json_null());
    json_object_set_new(root, "zero_shot",
                        errors_json(s->evaluated, s->mean_abs, s->max_abs, s->worst));
    json_t *loo = errors_json(s->loo_points, s->loo_mean, s->loo_max, s->loo_worst);
    json_object_set_new(loo, "without_neighbours", json_integer(s->evaluated - s->loo_points));
    json_object_set_new(root, "leave_one_out", loo);
    json_object_set_new(root, "ranking", ranking_json(s));
    json_object_set_new(root, "by_stack_device", bands_json(p, n));
    print_json(root);
}

/* ---- The file ------------------------------------------------------------------------------ */

static json_t *load_set(const char *file, vctx *v, pt_err *err)
{
    FILE *f = fopen(file, "r");
    if (!f) {
        pt_err_set(err, "cannot read validation set '%s': %s", file, strerror(errno));
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadf(f, JSON_REJECT_DUPLICATES, &je);
    fclose(f);
    if (!root) {
        pt_err_set(err, "%s:%d:%d: %s", file, je.line, je.column, je.text);
        return NULL;
    }
    const json_t *points = json_object_get(root, "points");
    if (!json_is_object(root) || !json_is_array(points) || json_array_size(points) == 0) {
        pt_err_set(err, "%s: expected an object with a non-empty array 'points'", file);
        json_decref(root);
        return NULL;
    }
    v->file = file;
    const char *slash = strrchr(file, '/');
    size_t n = slash ? (size_t)(slash - file) + 1 : 0;
    snprintf(v->dir, sizeof v->dir, "%.*s", (int)n, file);
    return root;
}

/* Opens --db into t and says in `costs` what the points are priced with. */
static int open_tables(const options *o, vtables *t, char *costs, size_t n)
{
    *t = (vtables){.no_shipped = o->no_shipped};
    char devices[256] = "";
    for (int i = 0; pt_shipped_sqls[i].device; i++)
        snprintf(devices + strlen(devices), sizeof devices - strlen(devices), "%s%s",
                 i ? ", " : "", pt_shipped_sqls[i].device);
    if (o->no_shipped || !devices[0])
        snprintf(costs, n, o->db ? "cost table %s" : "analytic costs (no --db)", o->db);
    else if (o->db)
        snprintf(costs, n, "cost table %s (the shipped profile of %s for points on a device "
                 "it has no samples of)", o->db, devices);
    else
        snprintf(costs, n, "the shipped profile of %s for points on it, else analytic costs "
                 "(no --db)", devices);
    if (!o->db)
        return 0;
    pt_err err;
    if (pt_costdb_open(o->db, PT_COSTDB_READ, &t->db, &err))
        return pt_tool_fail("%s", err.msg);
    return 0;
}

static void close_tables(vtables *t)
{
    pt_costdb_close(t->db);
    for (int i = 0; i < t->n; i++)
        pt_costdb_close(t->shipped[i].db);
    t->n = 0;
}

int validate_set(const options *o)
{
    vctx v = {0};
    pt_err err;
    json_t *root = load_set(o->validate, &v, &err);
    if (!root)
        return pt_tool_fail("%s", err.msg);
    vpoint *p = NULL;
    int n = 0;
    vtables tables;
    char costs[800];
    int rc = open_tables(o, &tables, costs, sizeof costs);
    v.tables = &tables;
    if (rc == 0 && eval_points(&v, root, NULL, NULL, &p, &n, &err) == V_BAD)
        rc = pt_tool_fail("%s", err.msg);
    vsummary s = {0};
    if (rc == 0 && summarise(p, n, &s))
        rc = pt_tool_fail("%s", "out of memory");
    if (rc == 0) {
        if (o->json)
            print_json_out(o->validate, costs, p, n, &s);
        else
            print_text(o->validate, costs, p, n, &s);
        /* a point that needs what ptplan does not plan is no failure */
        rc = s.evaluated + s.needs == n ? 0 : EXIT_REJECTED;
    }
    free_summary(&s);
    close_tables(&tables);
    free(p);
    json_decref(root);
    return rc;
}

int validate_band(const char *file, const pt_costdb *db, pred_band *band, pt_err *err)
{
    vctx v = {0};
    json_t *root = load_set(file, &v, err);
    if (!root)
        return -1;
    vonly only = {band->stack, band->device};
    vpoint *p;
    int n;
    int rc = eval_points(&v, root, db, &only, &p, &n, err) == V_BAD ? -1 : 0;
    for (int i = 0; rc == 0 && i < n; i++)
        if (p[i].ok)
            band_add(band, p[i].error);
    free(p);
    json_decref(root);
    return rc;
}
