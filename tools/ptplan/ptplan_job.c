/*
 * What every mode of ptplan shares, and nothing that calls back into a mode: the
 * failure message, the printing helpers, loading the job (model, cluster, training
 * settings, cost table) and printing its header, and how a layout's memory, rules and
 * result are shown. ptplan.c runs the modes (ptplan_rank.c, ptplan_compare.c,
 * ptplan_validate.c); each of them calls only into this file.
 */
#include "ptplan.h"
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- Failing and printing -------------------------------------------------------- */

int pt_tool_fail(const char *fmt, const char *msg)
{
    fprintf(stderr, "ptplan: ");
    fprintf(stderr, fmt, msg);
    fputc('\n', stderr);
    return EXIT_BAD_INPUT;
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

void print_json(json_t *j)
{
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (text) {
        fputs(text, stdout);
        fputc('\n', stdout);
        free(text);
    }
    json_decref(j);
}

/* Parses a spec text back into a json_t so it can be nested in other output. */
json_t *spec_json(char *text)
{
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return j ? j : json_null();
}

/* ---- Loading what to plan ---------------------------------------------------- */

/* Whether db holds kernel samples of `device`, ptprofile's or a recorded run's (false
 * for no table). */
static bool has_samples_of(const pt_costdb *db, const char *device)
{
    int64_t runs[1], profiled;
    int n = pt_costdb_sample_runs(db, device, runs, 1, &profiled);
    return profiled > 0 || n > 0;
}

/* The shipped profile of the cluster's device in place of a table with no samples of
 * it: a profile of this project's kernels, so for stack ptrun only (another stack's
 * step runs other kernels; --validate prices those analytically). */
static int use_shipped(const options *o, job *j)
{
    const char *device = j->c.device.name;
    if (o->no_shipped || !pt_stack_is_ptrun(&j->t.stack) || has_samples_of(j->db, device))
        return 0;
    pt_err err;
    pt_costdb *shipped;
    int rc = pt_costdb_open_shipped(device, &shipped, &err);
    if (rc < 0)
        return pt_tool_fail("%s", err.msg);
    if (rc > 0)
        return 0;
    snprintf(j->passed_over, sizeof j->passed_over, "%s", j->db ? j->db_path : "");
    pt_costdb_close(j->db);
    j->db = shipped;
    j->shipped = true;
    pt_costdb_id id;
    pt_costdb_identity(shipped, &id);
    snprintf(j->db_path, sizeof j->db_path, "%s", id.path);
    pt_costdb_profile_about(shipped, device, j->db_about, sizeof j->db_about);
    return 0;
}

/* The cost table: --db (must exist), else $PT_COSTS_DB or the default path when that
 * file exists, else none (analytic figures); then the shipped profile of the device
 * where that table has no samples of it (use_shipped). */
static int open_costs(const options *o, job *j)
{
    pt_err err;
    if (o->db)
        snprintf(j->db_path, sizeof j->db_path, "%s", o->db);
    else
        pt_cli_default_db(j->db_path, sizeof j->db_path, false);
    if (o->db || access(j->db_path, F_OK) == 0) {
        if (pt_costdb_open(j->db_path, PT_COSTDB_READ, &j->db, &err))
            return pt_tool_fail("%s", err.msg);
        /* An unprofiled spec (the local machine) takes what ptprofile measured. */
        pt_cluster_apply_profile(&j->c, j->db);
    }
    return use_shipped(o, j);
}

int load_job(const options *o, job *j)
{
    pt_err err;
    memset(j, 0, sizeof *j);
    if (pt_model_get(o->model, &j->m, &err) || pt_cluster_get(o->cluster, &j->c, &err))
        return pt_tool_fail("%s", err.msg);
    if (o->nodes)
        j->c.nodes = (int)o->nodes;
    if (o->devices)
        j->c.devices_per_node = (int)o->devices;
    if (o->seq) {
        j->m.seq = o->seq;
        if (pt_model_validate(&j->m, "--seq", &err))
            return pt_tool_fail("%s", err.msg);
    }
    pt_train_default(&j->t, &j->c);
    if (o->stack && pt_stack_get(o->stack, &j->t.stack, &err))
        return pt_tool_fail("--stack: %s", err.msg);
    j->t.global_batch = o->global_batch;
    j->t.bucket_bytes = o->bucket_mib << 20;
    if (o->precision && pt_prec_parse(o->precision, &j->t.precision, &err))
        return pt_tool_fail("--precision: %s", err.msg);
    pt_run_opts_default(&j->run, &j->m);
    j->run.steps = o->steps;
    if (o->lr > 0) {
        j->run.lr = o->lr;
        j->run.min_lr = o->lr / 10;
    }
    j->run.seed = (uint64_t)o->seed;
    if (o->data)
        snprintf(j->run.data, sizeof j->run.data, "%s", o->data);
    pt_enum_opts_default(&j->eo);
    j->eo.max_mbs = o->max_mbs;
    j->eo.mem_fraction = o->mem_fraction;
    j->eo.compress_modes = o->compress_modes;
    if (o->order && pt_order_parse(o->order, j->eo.order, &err))
        return pt_tool_fail("--order: %s", err.msg);
    return open_costs(o, j);
}

void free_job(job *j)
{
    pt_costdb_close(j->db);
    j->db = NULL;
}

double limit_bytes(const job *j)
{
    return j->eo.mem_fraction * (double)j->c.device.memory_bytes;
}

json_t *job_json(const job *j)
{
    pt_costdb_id id;
    pt_costdb_identity(j->db, &id);
    json_t *root = json_pack("{s:o, s:o, s:o, s:I, s:s, s:I, s:{s:s, s:b, s:I, s:I}}", "model",
                     spec_json(pt_model_to_json(&j->m)), "cluster",
                     spec_json(pt_cluster_to_json(&j->c)), "stack",
                     spec_json(pt_stack_to_json(&j->t.stack)), "global_batch",
                     (json_int_t)j->t.global_batch, "precision", pt_prec_name(j->t.precision),
                     "memory_limit_bytes", (json_int_t)llround(limit_bytes(j)), "cost_table",
                     "path", j->db_path, "used", j->db != NULL, "kernel_samples",
                     (json_int_t)id.kernel_samples, "coll_samples",
                     (json_int_t)id.coll_samples);
    json_t *ct = json_object_get(root, "cost_table");
    json_object_set_new(ct, "shipped", json_boolean(j->shipped));
    if (j->shipped) {
        json_object_set_new(ct, "about", json_string(j->db_about));
        json_object_set_new(ct, "passed_over",
                            j->passed_over[0] ? json_string(j->passed_over) : json_null());
    }
    return root;
}

void print_job_header(const job *j)
{
    char order[32];
    pt_order_format(j->eo.order, order, sizeof order);
    double params = (double)pt_model_params_total(&j->m);
    printf("model   %s: %.3g%s parameters, %lld layers, hidden %lld, seq %lld\n", j->m.name,
           params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "B" : "M",
           (long long)j->m.layers,
           (long long)j->m.hidden, (long long)j->m.seq);
    printf("cluster %s: %d node(s) x %d %s, %.1f GiB each; layouts may use %.0f%% = %.1f "
           "GiB\n", j->c.name, j->c.nodes, j->c.devices_per_node, j->c.device.name,
           gib((double)j->c.device.memory_bytes), 100 * j->eo.mem_fraction,
           gib(limit_bytes(j)));
    printf("train   global batch %lld, precision %s, rank order %s, stack %s\n",
           (long long)j->t.global_batch, pt_prec_name(j->t.precision), order,
           j->t.stack.name);
    if (j->db) {
        pt_costdb_id id;
        pt_costdb_identity(j->db, &id);
        printf("costs   %s: %lld kernel and %lld collective samples\n", j->db_path,
               (long long)id.kernel_samples, (long long)id.coll_samples);
        if (j->shipped) {
            printf("        %s", j->db_about);
            if (j->passed_over[0])
                printf("\n        (used instead of %s, which has no samples of %s)",
                       j->passed_over, j->c.device.name);
            printf("\n        ops it has no samples of (collectives among them) are priced "
                   "analytically; --no-shipped-profile prices all so\n\n");
            return;
        }
        /* where the measured figures of this device come from: the profile and which
         * recorded runs (ptcalib --forget RUN takes one out) */
        int64_t runs[16], profiled;
        int n = pt_costdb_sample_runs(j->db, j->c.device.name, runs, 16, &profiled);
        printf("        %s kernel samples: %lld from ptprofile", j->c.device.name,
               (long long)profiled);
        if (n > 0) {
            printf(", the rest from the traces of run%s", n > 1 ? "s" : "");
            for (int i = 0; i < n; i++)
                printf(runs[i] < 0 ? "%s(older, no run id)" : "%s%lld", i ? ", " : " ",
                       (long long)runs[i]);
            printf(n == 16 ? ", ..." : "");
        }
        printf("\n\n");
    } else {
        printf("costs   no cost table at %s: analytic figures (ptprofile measures them)\n\n",
               j->db_path);
    }
}

/* ---- A layout as every mode shows it ------------------------------------------------ */

void memory_parts(const pt_memory *mem, const char *names[MEM_PARTS], double bytes[MEM_PARTS])
{
    static const char *const part[MEM_PARTS] = {"weights", "gradients", "optimizer",
                                                "activations", "embedding/head", "recompute",
                                                "comm buffers"};
    const double v[MEM_PARTS] = {mem->weights_bytes, mem->grads_bytes, mem->optimizer_bytes,
                                 mem->activations_bytes, mem->embed_head_bytes,
                                 mem->recompute_bytes, mem->comm_bytes};
    for (int i = 0; i < MEM_PARTS; i++) {
        names[i] = part[i];
        bytes[i] = v[i];
    }
}

/* "m40 i10 a50", or the single source when there is one. */
void provenance_text(const pt_sim_result *r, char *buf, size_t n)
{
    for (int p = 0; p < PT_PROV_COUNT; p++)
        if (r->prov_share[p] > 0.9995) {
            snprintf(buf, n, "%s", pt_prov_name((pt_prov)p));
            return;
        }
    snprintf(buf, n, "m%.0f i%.0f a%.0f", 100 * r->prov_share[PT_PROV_MEASURED],
             100 * r->prov_share[PT_PROV_INTERPOLATED], 100 * r->prov_share[PT_PROV_ANALYTIC]);
}

void print_rules(const job *j, const pt_layout *l, uint32_t mask)
{
    char why[256];
    for (int r = 0; r < PT_REJECT_COUNT; r++) {
        if (!(mask & (1u << r)))
            continue;
        pt_reject_explain((pt_reject)r, &j->m, &j->c, j->t.global_batch, l, why, sizeof why);
        printf("  %-18s %s\n", pt_reject_name((pt_reject)r), why);
    }
}

static json_t *rules_json(const job *j, const pt_layout *l, uint32_t mask)
{
    char why[256];
    json_t *rej = json_array();
    for (int r = 0; r < PT_REJECT_COUNT; r++) {
        if (!(mask & (1u << r)))
            continue;
        pt_reject_explain((pt_reject)r, &j->m, &j->c, j->t.global_batch, l, why, sizeof why);
        json_array_append_new(rej, json_pack("{s:s, s:s}", "reason",
                                             pt_reject_name((pt_reject)r), "detail", why));
    }
    return rej;
}

json_t *layout_result_json(const job *j, const pt_layout *l, uint32_t mask,
                           const pt_candidate *c, bool fits)
{
    return json_pack("{s:o, s:b, s:o, s:b, s:o, s:o}", "layout", pt_layout_json(l), "valid",
                     mask == 0, "rejected", rules_json(j, l, mask), "fits", fits, "memory",
                     mask ? json_null() : pt_memory_json(&c->memory), "predicted",
                     mask ? json_null() : pt_sim_result_json(&c->predicted));
}

int parse_job_layout(const job *j, const char *text, pt_layout *l, pt_err *err)
{
    pt_layout_default(l);
    memcpy(l->order, j->eo.order, sizeof l->order);
    return pt_layout_parse_stack(text, pt_cluster_world(&j->c), j->t.global_batch,
                                 &j->t.stack, l, err);
}
