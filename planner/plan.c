/*
 * plan.json: what ptplan decided and ptrun executes. It holds the format version,
 * the model and cluster specs in full, the layout (schedule and rank order also at
 * the top level, where users look for them), the training settings, the predicted
 * figures (memory, step time, MFU, bubble and exposed-communication shares, the
 * provenance of the priced time) and the identity of the cost table they came
 * from. Reading it back checks every field, so ptrun never starts from a plan it
 * misreads. Field names are documented in README.md.
 */
#include "plan_json.h"
#include "specjson.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Peak learning rates of GPT-3 by model size (Brown et al. 2020, Table 2.1); models
 * below 50M parameters (the byte-level toys that train on a CPU) take 1e-3. */
static double default_lr(const pt_model *m)
{
    static const struct { double params, lr; } gpt3[] = {
        {125e6, 6e-4}, {350e6, 3e-4}, {760e6, 2.5e-4}, {1.3e9, 2e-4}, {2.7e9, 1.6e-4},
        {6.7e9, 1.2e-4}, {13e9, 1e-4}, {175e9, 0.6e-4}};
    double n = m ? (double)pt_model_params_total(m) : 125e6;
    if (n < 50e6)
        return 1e-3;
    double lr = gpt3[0].lr;
    for (size_t i = 0; i < sizeof gpt3 / sizeof *gpt3; i++)
        if (n >= 0.7 * gpt3[i].params)
            lr = gpt3[i].lr;
    return lr;
}

void pt_run_opts_default(pt_run_opts *r, const pt_model *m)
{
    double lr = default_lr(m);
    *r = (pt_run_opts){.steps = 50, .lr = lr, .min_lr = lr / 10, .warmup_steps = 10,
                       .weight_decay = 0.1, .grad_clip = 1.0, .seed = 1234, .data = ""};
}

/* ---- Writing ---------------------------------------------------------------------- */

static json_t *prov_json(const double share[PT_PROV_COUNT])
{
    json_t *o = json_object();
    for (int p = 0; o && p < PT_PROV_COUNT; p++)
        json_object_set_new(o, pt_prov_name((pt_prov)p), json_real(share[p]));
    return o;
}

json_t *pt_sim_result_json(const pt_sim_result *r)
{
    json_t *busy = json_array();
    for (int i = 0; busy && i < r->pp && i < 64; i++)
        json_array_append_new(busy, json_real(r->stage_busy_s[i]));
    json_t *bd = json_object();
    for (int k = 0; bd && k < PT_BD_COUNT; k++)
        json_object_set_new(bd, pt_bd_name((pt_bd)k),
                            json_pack("{s:f, s:f}", "exposed_s", r->breakdown_s[k], "hidden_s",
                                      r->hidden_s[k]));
    return json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:o, s:o, s:o}", "step_time_s",
                     r->step_time_s, "tokens_per_s", r->tokens_per_s, "mfu", r->mfu, "hfu",
                     r->hfu, "bubble_fraction", r->bubble_fraction, "exposed_comm_fraction",
                     r->exposed_comm_fraction, "provenance", prov_json(r->prov_share),
                     "stage_busy_s", busy, "breakdown", bd);
}

static json_t *training_json_base(const pt_train *t, const pt_run_opts *r);

json_t *pt_fp8_json(const pt_fp8 *f)
{
    return json_pack("{s:s, s:i, s:b, s:b}", "recipe", pt_fp8_recipe_name(f->recipe),
                     "amax_history", f->history, "emulated", f->emulated, "param_gather",
                     f->param_gather);
}

static json_t *training_json(const pt_train *t, const pt_run_opts *r)
{
    json_t *o = training_json_base(t, r);
    if (o && pt_train_fp8(t))
        json_object_set_new(o, "fp8", pt_fp8_json(&t->fp8));
    return o;
}

static json_t *training_json_base(const pt_train *t, const pt_run_opts *r)
{
    return json_pack("{s:I, s:s, s:I, s:I, s:f, s:f, s:I, s:f, s:f, s:f, s:I, s:s}", "global_batch",
                     (json_int_t)t->global_batch, "precision", pt_prec_name(t->precision),
                     "bucket_bytes", (json_int_t)t->bucket_bytes, "steps",
                     (json_int_t)r->steps, "lr", r->lr, "min_lr", r->min_lr, "warmup_steps",
                     (json_int_t)r->warmup_steps, "weight_decay", r->weight_decay,
                     "grad_clip", r->grad_clip, "dropout", r->dropout, "seed",
                     (json_int_t)r->seed, "data", r->data);
}

json_t *pt_plan_json(const pt_plan *p)
{
    char order[32];
    pt_order_format(p->layout.order, order, sizeof order);
    json_t *predicted = pt_sim_result_json(&p->predicted);
    if (predicted)
        json_object_set_new(predicted, "memory", pt_memory_json(&p->memory));
    char *stack_text = pt_stack_to_json(&p->train.stack);
    json_t *stack = stack_text ? json_loads(stack_text, JSON_DECODE_ANY, NULL) : NULL;
    free(stack_text);
    return json_pack("{s:i, s:s, s:o, s:o, s:o, s:s, s:s, s:o, s:o, s:o, s:{s:s, s:i, s:I, s:I, "
                     "s:s}}",
                     "format_version", p->format_version, "created_by", p->created_by,
                     "model", pt_model_json_obj(&p->model), "cluster",
                     pt_cluster_json_obj(&p->cluster), "layout", pt_layout_json(&p->layout),
                     "schedule", pt_schedule_name(p->layout.schedule), "rank_order", order,
                     "training", training_json(&p->train, &p->run), "stack", stack,
                     "predicted", predicted, "cost_table", "path", p->costs.path, "schema_version",
                     p->costs.schema_version, "kernel_samples",
                     (json_int_t)p->costs.kernel_samples, "coll_samples",
                     (json_int_t)p->costs.coll_samples, "fingerprint", p->costs.fingerprint);
}

int pt_plan_write(const pt_plan *p, const char *path, pt_err *err)
{
    json_t *root = pt_plan_json(p);
    char *text = root ? pt_json_dump(root) : NULL;
    json_decref(root);
    if (!text)
        return pt_err_set(err, "%s: out of memory writing the plan", path);
    int rc = pt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* ---- Reading ---------------------------------------------------------------------- */

static const char *const plan_keys[] = {"format_version", "created_by", "model", "cluster",
                                        "layout", "schedule", "rank_order", "training",
                                        "stack", "predicted", "cost_table", NULL};
static const char *const layout_keys[] = {"string", "tp", "sp", "tp_overlap", "pp", "vp",
                                          "cp", "dp", "zero", "mbs", "n_micro", "recompute",
                                          "schedule", "order", "world", "dp_overlap",
                                          "param_overlap", "first_layers", "last_layers",
                                          "compress", "powersgd_rank", "powersgd_start",
                                          "pipeline_layout", "cp_comm", "cp_a2a", "ep", "etp",
                                          "moe_dispatch", "recompute_modules", NULL};
static const char *const training_keys[] = {"global_batch", "precision", "bucket_bytes",
                                            "steps", "lr", "min_lr", "warmup_steps",
                                            "weight_decay", "grad_clip", "dropout", "seed",
                                            "data", "fp8", NULL};
static const char *const fp8_keys[] = {"recipe", "amax_history", "emulated", "param_gather",
                                       NULL};
static const char *const predicted_keys[] = {"step_time_s", "tokens_per_s", "mfu", "hfu",
                                             "bubble_fraction", "exposed_comm_fraction",
                                             "provenance", "stage_busy_s", "memory",
                                             "breakdown", NULL};
static const char *const memory_keys[] = {"stage", "layers", "in_flight", "params",
                                          "weights_bytes", "grads_bytes", "optimizer_bytes",
                                          "activations_bytes", "embed_head_bytes",
                                          "recompute_bytes", "comm_bytes", "total_bytes", NULL};
static const char *const prov_keys[] = {"measured", "interpolated", "analytic", NULL};
static const char *const costs_keys[] = {"path", "schema_version", "kernel_samples",
                                         "coll_samples", "fingerprint", NULL};

/* A field that must lie in [lo, hi]. */
static int range(const pt_json_obj *o, const char *key, double v, double lo, double hi,
                 pt_err *err)
{
    if (v >= lo && v <= hi)
        return 0;
    char name[160];
    pt_json_field_name(o, key, name, sizeof name);
    return pt_err_set(err, "%s: field '%s' = %g: expected a value from %g to %g", o->origin,
                      name, v, lo, hi);
}

static int get_int_in(const pt_json_obj *o, const char *key, int64_t lo, int64_t hi,
                      int64_t *out, pt_err *err)
{
    return pt_json_get_int(o, key, out, err) ||
           range(o, key, (double)*out, (double)lo, (double)hi, err);
}

static int get_real_in(const pt_json_obj *o, const char *key, double lo, double hi,
                       double *out, pt_err *err)
{
    return pt_json_get_real(o, key, out, err) || range(o, key, *out, lo, hi, err);
}

static int read_layout(const pt_json_obj *top, pt_layout *l, pt_err *err)
{
    pt_json_obj o;
    int64_t v[9];
    static const char *const ints[] = {"tp", "pp", "vp", "cp", "dp", "zero", "mbs", "n_micro",
                                       "world"};
    int rec, sch;
    bool sp, overlap;
    char order[32], text[256];
    if (pt_json_get_object(top, "layout", layout_keys, &o, err))
        return -1;
    for (int i = 0; i < 9; i++)
        if (get_int_in(&o, ints[i], i == 5 ? 0 : 1, i == 5 ? 3 : PT_MAX_WORLD, &v[i], err))
            return -1;
    if (pt_json_get_bool(&o, "sp", &sp, err) ||
        pt_json_get_bool(&o, "tp_overlap", &overlap, err) ||
        pt_json_get_enum(&o, "recompute", pt_recompute_names, PT_RECOMPUTE_COUNT, &rec, err) ||
        pt_json_get_enum(&o, "schedule", pt_schedule_names, PT_SCHED_COUNT, &sch, err) ||
        pt_json_get_string(&o, "order", order, sizeof order, err) ||
        pt_json_get_string(&o, "string", text, sizeof text, err))
        return -1;
    /* the world size first: every later check and the runtime's group tables use it */
    int64_t world;
    if (!pt_prod64((int64_t[]){v[0], v[3], v[1], v[4]}, 4, &world) || world > PT_MAX_WORLD)
        return pt_err_set(err, "%s: fields 'layout.tp', 'cp', 'pp' and 'dp' = %lld, %lld, "
                               "%lld, %lld: their product (the world size) is more than %lld "
                               "ranks", o.origin, (long long)v[0], (long long)v[3],
                          (long long)v[1], (long long)v[4], (long long)PT_MAX_WORLD);
    pt_layout_default(l);
    *l = (pt_layout){.tp = (int)v[0], .pp = (int)v[1], .vp = (int)v[2], .cp = (int)v[3],
                     .dp = (int)v[4], .zero = (int)v[5], .mbs = v[6], .n_micro = v[7],
                     .sp = sp, .tp_overlap = overlap, .recompute = (pt_recompute)rec,
                     .schedule = (pt_schedule)sch, .dp_overlap = PT_DPO_LAST,
                     .powersgd_rank = PT_POWERSGD_RANK, .powersgd_start = PT_POWERSGD_START,
                     .ep = 1, .etp = 1, .moe_dispatch = PT_MOED_ALLTOALL};
    /* Fields that plans written before they existed leave out (their defaults). */
    int dpo = PT_DPO_LAST, cmp = PT_COMPRESS_NONE, cpc = PT_CPC_P2P;
    int moed = PT_MOED_ALLTOALL;
    int64_t psgd_rank = PT_POWERSGD_RANK, cp_a2a = 0, ep = 1, etp = 1;
    if (json_object_get(o.obj, "recompute_modules")) {
        char mods[64];
        if (pt_json_get_string(&o, "recompute_modules", mods, sizeof mods, err))
            return -1;
        pt_layout parsed;
        pt_err why;
        if (l->recompute != PT_RECOMPUTE_SELECTIVE ||
            pt_layout_parse_recompute(mods, &parsed, &why) || !parsed.recompute_modules) {
            char choices[64];
            pt_rmod_choices(choices, sizeof choices);
            return pt_err_set(err, "%s: field 'layout.recompute_modules' = \"%s\": expected "
                                   "modules joined by '+' (of %s) with recompute \"selective\"",
                              o.origin, mods, choices);
        }
        l->recompute_modules = parsed.recompute_modules;
    }
    if ((json_object_get(o.obj, "compress") &&
         pt_json_get_enum(&o, "compress", pt_compress_names, PT_COMPRESS_COUNT, &cmp, err)) ||
        (json_object_get(o.obj, "powersgd_rank") &&
         get_int_in(&o, "powersgd_rank", 1, PT_POWERSGD_MAX_RANK, &psgd_rank, err)) ||
        (json_object_get(o.obj, "powersgd_start") &&
         get_int_in(&o, "powersgd_start", 0, INT32_MAX, &l->powersgd_start, err)) ||
        (json_object_get(o.obj, "dp_overlap") &&
         pt_json_get_enum(&o, "dp_overlap", pt_dp_overlap_names, PT_DPO_COUNT, &dpo, err)) ||
        (json_object_get(o.obj, "param_overlap") &&
         pt_json_get_bool(&o, "param_overlap", &l->param_overlap, err)) ||
        (json_object_get(o.obj, "first_layers") &&
         get_int_in(&o, "first_layers", 0, 1 << 16, &l->first_layers, err)) ||
        (json_object_get(o.obj, "last_layers") &&
         get_int_in(&o, "last_layers", 0, 1 << 16, &l->last_layers, err)) ||
        (json_object_get(o.obj, "cp_comm") &&
         pt_json_get_enum(&o, "cp_comm", pt_cp_comm_names, PT_CPC_COUNT, &cpc, err)) ||
        (json_object_get(o.obj, "cp_a2a") &&
         get_int_in(&o, "cp_a2a", 1, v[3], &cp_a2a, err)) ||
        (json_object_get(o.obj, "ep") && get_int_in(&o, "ep", 1, PT_MAX_WORLD, &ep, err)) ||
        (json_object_get(o.obj, "etp") && get_int_in(&o, "etp", 1, PT_MAX_WORLD, &etp, err)) ||
        (json_object_get(o.obj, "moe_dispatch") &&
         pt_json_get_enum(&o, "moe_dispatch", pt_moe_dispatch_names, PT_MOED_COUNT, &moed, err)))
        return -1;
    l->ep = (int)ep;
    l->etp = (int)etp;
    l->moe_dispatch = (pt_moe_dispatch)moed;
    l->cp_comm = (pt_cp_comm)cpc;
    l->cp_a2a = (int)cp_a2a;
    if (json_object_get(o.obj, "pipeline_layout")) {
        pt_err why;
        char pipe[1024];
        if (pt_json_get_string(&o, "pipeline_layout", pipe, sizeof pipe, err))
            return -1;
        if (pt_pipe_parse(pipe, &l->pipe, &why))
            return pt_err_set(err, "%s: field 'layout.pipeline_layout': %s", o.origin, why.msg);
    }
    l->dp_overlap = (pt_dp_overlap)dpo;
    l->compress = (pt_compress)cmp;
    l->powersgd_rank = (int)psgd_rank;
    pt_err why;
    if (pt_order_parse(order, l->order, &why))
        return pt_err_set(err, "%s: field 'layout.order': %s", o.origin, why.msg);
    char canon[1024];
    pt_layout_format(l, canon, sizeof canon);
    if (strcmp(canon, text) != 0)
        return pt_err_set(err, "%s: field 'layout.string' = \"%s\" disagrees with the layout's "
                               "fields (\"%s\")", o.origin, text, canon);
    if (v[8] != pt_layout_world(l))
        return pt_err_set(err, "%s: field 'layout.world' = %lld but tp*cp*pp*dp = %lld",
                          o.origin, (long long)v[8], (long long)pt_layout_world(l));
    return 0;
}

/* training.fp8: absent = off; else every field, each checked. */
static int read_fp8(const pt_json_obj *o, pt_fp8 *f, pt_err *err)
{
    *f = (pt_fp8){.recipe = PT_FP8_OFF, .history = 1024};
    if (!json_object_get(o->obj, "fp8"))
        return 0;
    pt_json_obj x;
    char recipe[32];
    int64_t hist;
    pt_err why;
    if (pt_json_get_object(o, "fp8", fp8_keys, &x, err) ||
        pt_json_get_string(&x, "recipe", recipe, sizeof recipe, err) ||
        pt_json_get_int(&x, "amax_history", &hist, err) ||
        pt_json_get_bool(&x, "emulated", &f->emulated, err) ||
        (json_object_get(x.obj, "param_gather") && /* optional: plans before it lack it */
         pt_json_get_bool(&x, "param_gather", &f->param_gather, err)))
        return -1;
    if (pt_fp8_recipe_parse(recipe, &f->recipe, &why) || f->recipe == PT_FP8_OFF)
        return pt_err_set(err, "%s: field 'training.fp8.recipe' = \"%s\": expected current, "
                               "delayed, blockwise or rowwise (no field fp8 for none)",
                          x.origin, recipe);
    if (hist < 1 || hist > PT_FP8_MAX_HISTORY)
        return pt_err_set(err, "%s: field 'training.fp8.amax_history' = %lld: expected 1 to %d",
                          x.origin, (long long)hist, PT_FP8_MAX_HISTORY);
    f->history = (int)hist;
    return 0;
}

static int read_training(const pt_json_obj *top, pt_train *t, pt_run_opts *r, pt_err *err)
{
    pt_json_obj o;
    int64_t seed;
    char prec[32];
    pt_err why;
    if (pt_json_get_object(top, "training", training_keys, &o, err) ||
        get_int_in(&o, "global_batch", 1, PT_MAX_GLOBAL_BATCH, &t->global_batch, err) ||
        pt_json_get_string(&o, "precision", prec, sizeof prec, err) ||
        get_int_in(&o, "bucket_bytes", PT_MIN_BUCKET_BYTES, 1LL << 40, &t->bucket_bytes, err) ||
        get_int_in(&o, "steps", 1, PT_MAX_STEPS, &r->steps, err) ||
        get_real_in(&o, "lr", 0, PT_MAX_LR, &r->lr, err) ||
        get_real_in(&o, "min_lr", 0, PT_MAX_LR, &r->min_lr, err) ||
        get_int_in(&o, "warmup_steps", 0, PT_MAX_STEPS, &r->warmup_steps, err) ||
        get_real_in(&o, "weight_decay", 0, PT_MAX_LR, &r->weight_decay, err) ||
        get_real_in(&o, "grad_clip", 0, PT_MAX_GRAD_CLIP, &r->grad_clip, err) ||
        get_real_in(&o, "dropout", 0, PT_MAX_DROPOUT, &r->dropout, err) ||
        get_int_in(&o, "seed", 0, INT64_MAX, &seed, err) ||
        pt_json_get_string(&o, "data", r->data, sizeof r->data, err))
        return -1;
    if (pt_prec_parse(prec, &t->precision, &why))
        return pt_err_set(err, "%s: field 'training.precision': %s", o.origin, why.msg);
    if (read_fp8(&o, &t->fp8, err))
        return -1;
    /* the cosine decay runs from lr down to min_lr: above lr it would climb instead */
    if (r->min_lr > r->lr)
        return pt_err_set(err, "%s: field 'training.min_lr' = %g is above 'training.lr' = %g "
                               "(the learning rate decays from lr to min_lr)",
                          o.origin, r->min_lr, r->lr);
    r->seed = (uint64_t)seed;
    return 0;
}

/* The software stack the plan was priced for; plans written before stacks existed
 * have none and were priced as ptrun runs. */
static int read_stack(const pt_json_obj *top, pt_train *t, pt_err *err)
{
    const json_t *v = json_object_get(top->obj, "stack");
    t->stack = *pt_stack_builtin(0);
    if (!v)
        return 0;
    if (!json_is_object(v))
        return pt_err_set(err, "%s: field 'stack': expected an object", top->origin);
    char *text = json_dumps(v, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    char origin[600];
    snprintf(origin, sizeof origin, "%s: field 'stack'", top->origin);
    int rc = text ? pt_stack_from_json(text, origin, &t->stack, err)
                  : pt_err_set(err, "%s: out of memory", origin);
    free(text);
    return rc;
}

static int read_memory(const pt_json_obj *pred, pt_memory *m, pt_err *err)
{
    pt_json_obj o;
    int64_t stage, layers, flight;
    double *f[] = {&m->params, &m->weights_bytes, &m->grads_bytes, &m->optimizer_bytes,
                   &m->activations_bytes, &m->embed_head_bytes, &m->recompute_bytes,
                   &m->comm_bytes, &m->total_bytes};
    if (pt_json_get_object(pred, "memory", memory_keys, &o, err) ||
        get_int_in(&o, "stage", 0, 1LL << 30, &stage, err) ||
        get_int_in(&o, "layers", 0, 1LL << 30, &layers, err) ||
        get_int_in(&o, "in_flight", 0, 1LL << 40, &flight, err))
        return -1;
    for (int i = 0; i < 9; i++)
        if (get_real_in(&o, memory_keys[3 + i], 0, 1e18, f[i], err))
            return -1;
    m->stage = (int)stage;
    m->layers = layers;
    m->in_flight = flight;
    return 0;
}

static int read_predicted(const pt_json_obj *top, pt_sim_result *r, pt_memory *mem,
                          pt_err *err)
{
    pt_json_obj o, prov;
    double *f[] = {&r->step_time_s, &r->tokens_per_s, &r->mfu, &r->hfu, &r->bubble_fraction,
                   &r->exposed_comm_fraction};
    if (pt_json_get_object(top, "predicted", predicted_keys, &o, err))
        return -1;
    for (int i = 0; i < 6; i++)
        if (get_real_in(&o, predicted_keys[i], 0, 1e18, f[i], err))
            return -1;
    if (pt_json_get_object(&o, "provenance", prov_keys, &prov, err))
        return -1;
    for (int p = 0; p < PT_PROV_COUNT; p++)
        if (get_real_in(&prov, prov_keys[p], 0, 1, &r->prov_share[p], err))
            return -1;
    const json_t *busy = json_object_get(o.obj, "stage_busy_s");
    if (!json_is_array(busy) || json_array_size(busy) > 64)
        return pt_err_set(err, "%s: field 'predicted.stage_busy_s': expected an array of at "
                               "most 64 numbers", o.origin);
    for (size_t i = 0; i < json_array_size(busy); i++) {
        const json_t *x = json_array_get(busy, i);
        if (!json_is_number(x) || json_number_value(x) < 0)
            return pt_err_set(err, "%s: field 'predicted.stage_busy_s[%zu]': expected a "
                                   "number >= 0", o.origin, i);
        r->stage_busy_s[i] = json_number_value(x);
    }
    /* The time breakdown (plans written before it have none). */
    pt_json_obj bd, part;
    static const char *const part_keys[] = {"exposed_s", "hidden_s", NULL};
    if (json_object_get(o.obj, "breakdown")) {
        if (pt_json_get_object(&o, "breakdown", NULL, &bd, err))
            return -1;
        for (int k = 0; k < PT_BD_COUNT; k++)
            if ((k != PT_BD_EP || json_object_get(bd.obj, pt_bd_name((pt_bd)k))) &&
                (pt_json_get_object(&bd, pt_bd_name((pt_bd)k), part_keys, &part, err) ||
                get_real_in(&part, "exposed_s", 0, 1e18, &r->breakdown_s[k], err) ||
                 get_real_in(&part, "hidden_s", 0, 1e18, &r->hidden_s[k], err)))
                return -1; /* (plans written before the experts' "ep" have none) */
    }
    return read_memory(&o, mem, err);
}

static int read_costs(const pt_json_obj *top, pt_costdb_id *c, pt_err *err)
{
    pt_json_obj o;
    int64_t schema;
    if (pt_json_get_object(top, "cost_table", costs_keys, &o, err) ||
        pt_json_get_string(&o, "path", c->path, sizeof c->path, err) ||
        get_int_in(&o, "schema_version", 0, 1 << 20, &schema, err) ||
        get_int_in(&o, "kernel_samples", 0, INT64_MAX, &c->kernel_samples, err) ||
        get_int_in(&o, "coll_samples", 0, INT64_MAX, &c->coll_samples, err) ||
        pt_json_get_string(&o, "fingerprint", c->fingerprint, sizeof c->fingerprint, err))
        return -1;
    c->schema_version = (int)schema;
    return 0;
}

/* The parts that must agree with each other: top-level schedule and rank order,
 * the layout's rules for this model, cluster and batch. */
static int check_plan(const pt_json_obj *top, pt_plan *p, pt_err *err)
{
    char sched[32], order[32], canon[32];
    if (pt_json_get_string(top, "schedule", sched, sizeof sched, err) ||
        pt_json_get_string(top, "rank_order", order, sizeof order, err))
        return -1;
    if (strcmp(sched, pt_schedule_name(p->layout.schedule)) != 0)
        return pt_err_set(err, "%s: field 'schedule' = \"%s\" disagrees with layout.schedule",
                          top->origin, sched);
    pt_order_format(p->layout.order, canon, sizeof canon);
    if (strcmp(order, canon) != 0)
        return pt_err_set(err, "%s: field 'rank_order' = \"%s\" disagrees with layout.order",
                          top->origin, order);
    pt_err why;
    if (pt_model_validate(&p->model, top->origin, err) ||
        pt_cluster_validate(&p->cluster, top->origin, err))
        return -1;
    if (pt_cluster_check_precision(&p->cluster, p->train.precision, &why) ||
        pt_train_check_fp8(&p->train, &p->cluster, &why))
        return pt_err_set(err, "%s: %s", top->origin, why.msg);
    uint32_t mask;
    if (pt_layout_check(&p->model, &p->cluster, p->train.global_batch, &p->layout, &mask)) {
        pt_reject r = (pt_reject)__builtin_ctz(mask);
        char why[256];
        pt_reject_explain(r, &p->model, &p->cluster, p->train.global_batch, &p->layout, why,
                          sizeof why);
        return pt_err_set(err, "%s: the layout is invalid (%s): %s", top->origin,
                          pt_reject_name(r), why);
    }
    if (p->layout.n_micro * p->layout.mbs * p->layout.dp != p->train.global_batch)
        return pt_err_set(err, "%s: field 'layout.n_micro' = %lld but global_batch / (mbs*dp) "
                               "= %lld", top->origin, (long long)p->layout.n_micro,
                          (long long)(p->train.global_batch / (p->layout.mbs * p->layout.dp)));
    return 0;
}

int pt_plan_from_json(const char *text, const char *origin, pt_plan *out, pt_err *err)
{
    pt_json_obj top, mo, co;
    json_t *root = pt_json_parse_object(text, origin, &top, err);
    if (!root)
        return -1;
    pt_plan p;
    memset(&p, 0, sizeof p);
    int64_t version = 0;
    int rc = pt_json_check_keys(&top, plan_keys, err) ||
             pt_json_get_int(&top, "format_version", &version, err);
    if (rc == 0 && version != PT_PLAN_FORMAT_VERSION)
        rc = pt_err_set(err, "%s: format_version %lld is not the one this build reads (%d)",
                        origin, (long long)version, PT_PLAN_FORMAT_VERSION);
    p.format_version = (int)version;
    if (rc == 0)
        rc = pt_json_get_string(&top, "created_by", p.created_by, sizeof p.created_by, err) ||
             pt_json_get_object(&top, "model", NULL, &mo, err) ||
             pt_model_read_obj(&mo, &p.model, err) ||
             pt_json_get_object(&top, "cluster", NULL, &co, err) ||
             pt_cluster_read_obj(&co, &p.cluster, err) || read_layout(&top, &p.layout, err) ||
             read_training(&top, &p.train, &p.run, err) || read_stack(&top, &p.train, err) ||
             read_predicted(&top, &p.predicted, &p.memory, err) ||
             read_costs(&top, &p.costs, err) || check_plan(&top, &p, err);
    p.predicted.pp = p.layout.pp;
    json_decref(root);
    if (rc == 0)
        *out = p;
    return rc ? -1 : 0;
}

int pt_plan_read(const char *path, pt_plan *out, pt_err *err)
{
    char *text = pt_json_read_file(path, err);
    if (!text)
        return -1;
    int rc = pt_plan_from_json(text, path, out, err);
    free(text);
    return rc;
}
