/*
 * Run records: a measured training run of any framework as ptcalib --run stores it and
 * the calibration of planner/calib.c reads it. A record is a small JSON object (format
 * version PT_RUNREC_FORMAT_VERSION, documented in docs/calibration.md):
 *
 *   {"format_version": 1,
 *    "model": "llama3-8b" | {a model spec}, "cluster": "dgx-h100" | {a cluster spec},
 *    "nodes": 1, "devices_per_node": 8 (optional),
 *    "stack": "megatron-core" | {a stack spec},
 *    "layout": "tp=2,pp=1,dp=4,mbs=1,recompute=selective",
 *    "global_batch": 128, "seq": 8192, "precision": "bf16" (or "fp8", "fp8:RECIPE"),
 *    "measured": {"step_s": 1.92} | {"tokens_per_s": ...} | {"tokens_per_s_per_gpu": ...},
 *    "date": "YYYY-MM-DD", "software": {"name": "Megatron-LM", "version": "core_r0.12.0"},
 *    "note": "free text" (optional), "log": {where a log reader took it from} (optional)}
 *
 * This file reads, checks, writes and prices records; it owns their format. A spec
 * named by a built-in's name stays a name in the stored form (it follows the built-in);
 * one given as a file is stored inline, so that a stored record never depends on a
 * file that may move.
 */
#include "calib.h"
#include "plan_json.h"
#include "specjson.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *pt_meas_name(pt_meas_kind k)
{
    static const char *const names[PT_MEAS_COUNT] = {"step_s", "tokens_per_s",
                                                     "tokens_per_s_per_gpu"};
    return (unsigned)k < PT_MEAS_COUNT ? names[k] : "?";
}

static const char *const record_keys[] = {
    "format_version", "model", "cluster", "nodes", "devices_per_node", "stack", "layout",
    "global_batch", "seq", "precision", "measured", "date", "software", "note", "log", NULL};
static const char *const software_keys[] = {"name", "version", NULL};
static const char *const log_keys[] = {"reader", "file", "intervals", "skipped", "first",
                                       "last", NULL};

/* ---- Specs: a built-in's name, a file, or inline ----------------------------------- */

typedef enum { SPEC_MODEL, SPEC_CLUSTER, SPEC_STACK } spec_kind;

/* Whether `name` is one of the built-ins of kind k. */
static bool builtin(spec_kind k, const char *name)
{
    if (k == SPEC_MODEL) {
        for (int i = 0; i < pt_model_builtin_count(); i++)
            if (strcmp(pt_model_builtin(i)->name, name) == 0)
                return true;
    } else if (k == SPEC_CLUSTER) {
        for (int i = 0; i < pt_cluster_builtin_count(); i++) {
            pt_cluster c;
            if (pt_cluster_builtin(i, &c) == 0 && strcmp(c.name, name) == 0)
                return true;
        }
    } else {
        for (int i = 0; i < pt_stack_builtin_count(); i++)
            if (strcmp(pt_stack_builtin(i)->name, name) == 0)
                return true;
    }
    return false;
}

/* Loads spec `name` of kind k (a built-in, else a file relative to dir) into out. */
static int get_named(spec_kind k, const char *name, const char *dir, void *out, pt_err *err)
{
    char path[1200];
    bool rel = name[0] != '/' && dir && dir[0] && !builtin(k, name);
    snprintf(path, sizeof path, "%s%s%s", rel ? dir : "",
             rel && dir[strlen(dir) - 1] != '/' ? "/" : "", name);
    switch (k) {
    case SPEC_MODEL: return pt_model_get(path, out, err);
    case SPEC_CLUSTER: return pt_cluster_get(path, out, err);
    case SPEC_STACK: return pt_stack_get(path, out, err);
    }
    return -1;
}

/* An inline spec object: read and validated as its own files are, errors naming the
 * record and the field. */
static int get_inline(spec_kind k, const pt_json_obj *o, const char *key, void *out,
                      pt_err *err)
{
    pt_json_obj child;
    if (pt_json_get_object(o, key, NULL, &child, err))
        return -1;
    char origin[700];
    snprintf(origin, sizeof origin, "%s: field '%s'", o->origin, key);
    if (k == SPEC_MODEL)
        return pt_model_read_obj(&child, out, err) || pt_model_validate(out, origin, err);
    if (k == SPEC_CLUSTER)
        return pt_cluster_read_obj(&child, out, err) || pt_cluster_validate(out, origin, err);
    char *text = json_dumps(child.obj, JSON_PRESERVE_ORDER);
    if (!text)
        return pt_err_set(err, "out of memory");
    int rc = pt_stack_from_json(text, origin, out, err);
    free(text);
    return rc;
}

/* Field `key` of o: a spec of kind k by name (ref gets a built-in's name) or inline. */
static int get_spec(spec_kind k, const pt_json_obj *o, const char *key, const char *dir,
                    void *out, char ref[64], pt_err *err)
{
    const json_t *v = json_object_get(o->obj, key);
    ref[0] = 0;
    if (v && json_is_object(v))
        return get_inline(k, o, key, out, err);
    char name[512];
    if (pt_json_get_string(o, key, name, sizeof name, err))
        return -1;
    pt_err why;
    if (get_named(k, name, dir, out, &why))
        return pt_json_fail(o, key, err, "%s: field '%s': %s", o->origin, key, why.msg);
    if (builtin(k, name))
        snprintf(ref, 64, "%.63s", name);
    return 0;
}

int pt_runrec_load_specs(pt_runrec *r, const char *model, const char *cluster,
                         const char *stack, pt_err *err)
{
    const spec_kind kinds[3] = {SPEC_MODEL, SPEC_CLUSTER, SPEC_STACK};
    const char *names[3] = {model, cluster, stack};
    void *outs[3] = {&r->model, &r->cluster, &r->train.stack};
    char *refs[3] = {r->model_ref, r->cluster_ref, r->stack_ref};
    pt_stack keep = r->train.stack;
    for (int i = 0; i < 3; i++) {
        refs[i][0] = 0;
        if (i == 2) /* the stack goes into the training settings that the cluster resets */
            pt_train_default(&r->train, &r->cluster);
        if (get_named(kinds[i], names[i], NULL, outs[i], err)) {
            r->train.stack = keep;
            return -1;
        }
        if (builtin(kinds[i], names[i]))
            snprintf(refs[i], 64, "%.63s", names[i]);
    }
    return 0;
}

/* ---- Fields -------------------------------------------------------------------------- */

static int get_int_in(const pt_json_obj *o, const char *key, int64_t lo, int64_t hi,
                      int64_t *out, pt_err *err)
{
    if (pt_json_get_int(o, key, out, err))
        return -1;
    if (*out < lo || *out > hi)
        return pt_json_fail(o, key, err, "%s: field '%s' = %lld: expected %lld to %lld",
                            o->origin, key, (long long)*out, (long long)lo, (long long)hi);
    return 0;
}

/* "measured": exactly one of step_s, tokens_per_s, tokens_per_s_per_gpu, positive. */
static int get_measured(const pt_json_obj *o, pt_runrec *r, pt_err *err)
{
    static const char *const keys[] = {"step_s", "tokens_per_s", "tokens_per_s_per_gpu",
                                       NULL};
    pt_json_obj m;
    if (pt_json_get_object(o, "measured", keys, &m, err))
        return -1;
    if (json_object_size(m.obj) != 1)
        return pt_json_fail(o, "measured", err, "%s: field 'measured': expected exactly one "
                            "of step_s, tokens_per_s (all GPUs together) and "
                            "tokens_per_s_per_gpu; got %zu", o->origin,
                            json_object_size(m.obj));
    for (int k = 0; k < PT_MEAS_COUNT; k++) {
        if (!json_object_get(m.obj, keys[k]))
            continue;
        if (pt_json_get_real(&m, keys[k], &r->meas_value, err))
            return -1;
        if (!(r->meas_value > 0) || !isfinite(r->meas_value))
            return pt_json_fail(&m, keys[k], err, "%s: field 'measured.%s' = %g: expected a "
                                "positive number", o->origin, keys[k], r->meas_value);
        r->meas = (pt_meas_kind)k;
    }
    return 0;
}

/* An ISO 8601 date, YYYY-MM-DD, optionally followed by 'T' or ' ' and a time. */
static bool iso_date(const char *s)
{
    for (int i = 0; i < 10; i++)
        if (i == 4 || i == 7 ? s[i] != '-' : !isdigit((unsigned char)s[i]))
            return false;
    int month = atoi(s + 5), day = atoi(s + 8);
    return month >= 1 && month <= 12 && day >= 1 && day <= 31 &&
           (s[10] == 0 || s[10] == 'T' || s[10] == ' ');
}

static int get_provenance(const pt_json_obj *o, pt_runrec *r, pt_err *err)
{
    pt_json_obj sw;
    if (pt_json_get_string(o, "date", r->date, sizeof r->date, err))
        return -1;
    if (!iso_date(r->date))
        return pt_json_fail(o, "date", err, "%s: field 'date' = \"%s\": expected an ISO 8601 "
                            "date, e.g. 2026-01-31 (a time may follow)", o->origin, r->date);
    if (pt_json_get_object(o, "software", software_keys, &sw, err) ||
        pt_json_get_string(&sw, "name", r->software, sizeof r->software, err) ||
        pt_json_get_string(&sw, "version", r->version, sizeof r->version, err))
        return -1;
    if (!r->software[0] || !r->version[0])
        return pt_json_fail(&sw, r->software[0] ? "version" : "name", err, "%s: field "
                            "'software.%s': expected a non-empty string (write \"unknown\" "
                            "when it is not known)", o->origin,
                            r->software[0] ? "version" : "name");
    if (json_object_get(o->obj, "note") &&
        pt_json_get_string(o, "note", r->note, sizeof r->note, err))
        return -1;
    return 0;
}

static int get_log(const pt_json_obj *o, pt_runrec *r, pt_err *err)
{
    pt_json_obj lg;
    pt_runrec_log *l = &r->log;
    if (!json_object_get(o->obj, "log"))
        return 0;
    if (pt_json_get_object(o, "log", log_keys, &lg, err) ||
        pt_json_get_string(&lg, "reader", l->reader, sizeof l->reader, err) ||
        pt_json_get_string(&lg, "file", l->file, sizeof l->file, err) ||
        get_int_in(&lg, "intervals", 1, INT64_MAX, &l->intervals, err) ||
        get_int_in(&lg, "skipped", 0, INT64_MAX, &l->skipped, err) ||
        get_int_in(&lg, "first", 0, INT64_MAX, &l->first, err) ||
        get_int_in(&lg, "last", l->first, INT64_MAX, &l->last, err))
        return -1;
    return 0;
}

/* ---- Whole records ------------------------------------------------------------------------ */

int pt_runrec_finish(pt_runrec *r, const char *origin, pt_err *err)
{
    pt_err why;
    if (!iso_date(r->date))
        return pt_err_set(err, "%s: date \"%s\": expected an ISO 8601 date, e.g. 2026-01-31",
                          origin, r->date);
    if (!r->software[0] || !r->version[0])
        return pt_err_set(err, "%s: the software's name and version must not be empty "
                               "(write \"unknown\" when it is not known)", origin);
    if (pt_model_validate(&r->model, origin, err) ||
        pt_cluster_validate(&r->cluster, origin, err))
        return -1;
    if (pt_cluster_check_precision(&r->cluster, r->train.precision, &why) ||
        pt_train_check_fp8(&r->train, &r->cluster, &why))
        return pt_err_set(err, "%s: field 'precision': %s", origin, why.msg);
    int64_t world = pt_cluster_world(&r->cluster);
    pt_layout_default(&r->layout);
    if (pt_layout_parse_stack(r->layout_text, world, r->train.global_batch, &r->train.stack,
                              &r->layout, &why))
        return pt_err_set(err, "%s: field 'layout' = \"%s\": %s", origin, r->layout_text,
                          why.msg);
    uint32_t mask = 0;
    if (pt_layout_check(&r->model, &r->cluster, r->train.global_batch, &r->layout, &mask)) {
        int rule = 0;
        while (!(mask & (1u << rule)))
            rule++;
        char text[256];
        pt_reject_explain((pt_reject)rule, &r->model, &r->cluster, r->train.global_batch,
                          &r->layout, text, sizeof text);
        return pt_err_set(err, "%s: field 'layout' = \"%s\" is not a valid layout of %s on "
                               "%lld GPUs: %s", origin, r->layout_text, r->model.name,
                          (long long)world, text);
    }
    double tokens = (double)r->train.global_batch * (double)r->model.seq;
    switch (r->meas) {
    case PT_MEAS_STEP_S: r->measured_step_s = r->meas_value; break;
    case PT_MEAS_TOKENS_PER_S: r->measured_step_s = tokens / r->meas_value; break;
    case PT_MEAS_TOKENS_PER_S_PER_GPU:
    case PT_MEAS_COUNT:
        r->measured_step_s = tokens / (r->meas_value * (double)world);
        break;
    }
    return 0;
}

/* The fields in order, each one error naming origin and field. */
static int read_record(const pt_json_obj *top, const char *dir, pt_runrec *r, pt_err *err)
{
    int64_t version, nodes, devices = 0, batch, seq;
    char prec[32];
    pt_err why;
    if (pt_json_check_keys(top, record_keys, err) ||
        pt_json_get_int(top, "format_version", &version, err))
        return -1;
    if (version != PT_RUNREC_FORMAT_VERSION)
        return pt_json_fail(top, "format_version", err, "%s: field 'format_version' = %lld: "
                            "this build reads run records of version %d", top->origin,
                            (long long)version, PT_RUNREC_FORMAT_VERSION);
    if (get_spec(SPEC_MODEL, top, "model", dir, &r->model, r->model_ref, err) ||
        get_spec(SPEC_CLUSTER, top, "cluster", dir, &r->cluster, r->cluster_ref, err) ||
        get_int_in(top, "nodes", 1, 1 << 20, &nodes, err) ||
        (json_object_get(top->obj, "devices_per_node") &&
         get_int_in(top, "devices_per_node", 1, 1 << 20, &devices, err)))
        return -1;
    r->cluster.nodes = (int)nodes;
    if (devices)
        r->cluster.devices_per_node = (int)devices;
    pt_train_default(&r->train, &r->cluster);
    if (get_spec(SPEC_STACK, top, "stack", dir, &r->train.stack, r->stack_ref, err) ||
        pt_json_get_string(top, "layout", r->layout_text, sizeof r->layout_text, err) ||
        get_int_in(top, "global_batch", 1, PT_MAX_GLOBAL_BATCH, &batch, err) ||
        get_int_in(top, "seq", 1, INT64_C(1) << 30, &seq, err) ||
        pt_json_get_string(top, "precision", prec, sizeof prec, err))
        return -1;
    if (pt_train_precision_parse(prec, &r->train, &why))
        return pt_json_fail(top, "precision", err, "%s: field 'precision' = \"%s\": %s",
                            top->origin, prec, why.msg);
    r->train.global_batch = batch;
    r->model.seq = seq;
    if (get_measured(top, r, err) || get_provenance(top, r, err) || get_log(top, r, err))
        return -1;
    return pt_runrec_finish(r, top->origin, err);
}

int pt_runrec_from_json(const char *text, const char *origin, const char *dir, pt_runrec *out,
                        pt_err *err)
{
    pt_json_obj top;
    json_t *root = pt_json_parse_object(text, origin, &top, err);
    if (!root)
        return -1;
    pt_runrec *r = calloc(1, sizeof *r);
    int rc = r ? read_record(&top, dir, r, err) : pt_err_set(err, "out of memory");
    json_decref(root);
    if (rc == 0)
        *out = *r;
    free(r);
    return rc ? -1 : 0;
}

int pt_runrec_read(const char *path, pt_runrec *out, pt_err *err)
{
    char *text = pt_json_read_file(path, err);
    if (!text)
        return -1;
    char dir[1024];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 0, path);
    int rc = pt_runrec_from_json(text, path, dir, out, err);
    free(text);
    return rc;
}

/* A spec as stored: its built-in's name, else the whole spec inline. */
static json_t *spec_value(const char *ref, char *text)
{
    json_t *v = ref[0] ? json_string(ref) : text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return v;
}

char *pt_runrec_to_json(const pt_runrec *r)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    int bad = pt_json_set(root, "format_version", json_integer(PT_RUNREC_FORMAT_VERSION));
    bad |= pt_json_set(root, "model", spec_value(r->model_ref, r->model_ref[0] ? NULL
                                                 : pt_model_to_json(&r->model)));
    bad |= pt_json_set(root, "cluster", spec_value(r->cluster_ref, r->cluster_ref[0] ? NULL
                                                   : pt_cluster_to_json(&r->cluster)));
    bad |= pt_json_set(root, "nodes", json_integer(r->cluster.nodes));
    bad |= pt_json_set(root, "devices_per_node", json_integer(r->cluster.devices_per_node));
    bad |= pt_json_set(root, "stack", spec_value(r->stack_ref, r->stack_ref[0] ? NULL
                                                 : pt_stack_to_json(&r->train.stack)));
    bad |= pt_json_set(root, "layout", json_string(r->layout_text));
    bad |= pt_json_set(root, "global_batch", json_integer(r->train.global_batch));
    bad |= pt_json_set(root, "seq", json_integer(r->model.seq));
    char prec[32];
    pt_train_precision_word(&r->train, prec, sizeof prec);
    bad |= pt_json_set(root, "precision", json_string(prec));
    bad |= pt_json_set(root, "measured", json_pack("{s:f}", pt_meas_name(r->meas),
                                                   r->meas_value));
    bad |= pt_json_set(root, "date", json_string(r->date));
    bad |= pt_json_set(root, "software", json_pack("{s:s, s:s}", "name", r->software,
                                                   "version", r->version));
    if (r->note[0])
        bad |= pt_json_set(root, "note", json_string(r->note));
    const pt_runrec_log *l = &r->log;
    if (l->reader[0])
        bad |= pt_json_set(root, "log", json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "reader",
                                                  l->reader, "file", l->file, "intervals",
                                                  (json_int_t)l->intervals, "skipped",
                                                  (json_int_t)l->skipped, "first",
                                                  (json_int_t)l->first, "last",
                                                  (json_int_t)l->last));
    char *text = bad ? NULL : pt_json_dump(root);
    json_decref(root);
    return text;
}

int pt_runrec_predict(const pt_runrec *r, const pt_costdb *db, pt_candidate *out, pt_err *err)
{
    pt_cluster c = r->cluster;
    pt_cluster_apply_profile(&c, db);
    pt_train t = r->train;
    t.calib = NULL; /* zero-shot, whatever the caller's settings hold */
    return pt_evaluate(&r->model, &c, &t, db, &r->layout, NULL, out, err);
}

double pt_runrec_speed(const pt_runrec *r, double step_s)
{
    double world = (double)pt_cluster_world(&r->cluster);
    return (double)r->train.global_batch * (double)r->model.seq / (step_s * world);
}
