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
 * it. It is a profile of ptrun's kernels: for another stack it prices the kernels that
 * stack runs as ptrun does (its cuBLAS GEMMs of ptrun's roles, cuDNN's attention where it
 * is ptrun's) and the simulator prices the stack's own kernels analytically
 * (planner/sim.c); --validate chooses the same way for each point. */
static int use_shipped(const options *o, job *j)
{
    const char *device = j->c.device.name;
    if (o->no_shipped || has_samples_of(j->db, device))
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

/* The global batch in sequences: --global-batch as given, or its tokens (then a whole
 * number of sequences of the model's length, or an error naming the nearest). */
static int batch_of(const options *o, const pt_model *m, int64_t *batch)
{
    *batch = o->global_batch;
    if (!o->global_batch_tokens)
        return 0;
    int64_t t = o->global_batch_tokens, s = m->seq, n = t / s;
    if (t % s) {
        fprintf(stderr, "ptplan: a global batch of %lld tokens is not a whole number of "
                        "%lld-token sequences (%.2f); %lld tokens are %lld sequences, %lld "
                        "tokens %lld\n", (long long)t, (long long)s, (double)t / (double)s,
                (long long)(n * s), (long long)n, (long long)((n + 1) * s), (long long)n + 1);
        return -1;
    }
    if (n > PT_MAX_GLOBAL_BATCH) {
        fprintf(stderr, "ptplan: a global batch of %lld tokens is %lld sequences of %lld, "
                        "more than %lld\n", (long long)t, (long long)n, (long long)s,
                (long long)PT_MAX_GLOBAL_BATCH);
        return -1;
    }
    *batch = n;
    return 0;
}

/* --precision, --fp8-recipe, --fp8-emulate into t (its stack already chosen): fp8 is
 * FP8 GEMMs on top of the device's default storage precision, with the stack's default
 * recipe unless --fp8-recipe names one. Whether the cluster and stack can run it is
 * checked once the cluster's figures are complete (pt_train_check_fp8). */
static int load_precision(const options *o, pt_train *t)
{
    pt_err err;
    bool fp8 = o->precision && strcmp(o->precision, "fp8") == 0;
    if (!fp8 && (o->fp8_recipe || o->fp8_emulate || o->fp8_param_gather)) {
        fprintf(stderr, "ptplan: %s goes with --precision fp8 (the precision is %s)\n",
                o->fp8_recipe ? "--fp8-recipe"
                : o->fp8_emulate ? "--fp8-emulate" : "--fp8-param-gather",
                o->precision ? o->precision : pt_prec_name(t->precision));
        return -1;
    }
    if (!fp8) {
        if (o->precision && pt_prec_parse(o->precision, &t->precision, &err)) {
            fprintf(stderr, "ptplan: --precision: unknown precision '%s' (expected bf16, "
                            "bf16-grad16, fp32 or fp8)\n", o->precision);
            return -1;
        }
        return 0;
    }
    t->fp8.emulated = o->fp8_emulate;
    t->fp8.param_gather = o->fp8_param_gather;
    t->fp8.recipe = (pt_fp8_recipe)t->stack.fp8_default;
    if (o->fp8_recipe) {
        if (pt_fp8_recipe_parse(o->fp8_recipe, &t->fp8.recipe, &err) ||
            t->fp8.recipe == PT_FP8_OFF) {
            fprintf(stderr, "ptplan: --fp8-recipe: unknown FP8 recipe '%s' (expected current, "
                            "delayed, blockwise or rowwise)\n", o->fp8_recipe);
            return -1;
        }
    }
    if (t->fp8.recipe == PT_FP8_OFF) {
        fprintf(stderr, "ptplan: --precision fp8: stack '%s' trains no layer in FP8 (stacks "
                        "with FP8: ptrun, megatron-core, fsdp)\n", t->stack.name);
        return -1;
    }
    return 0;
}

int load_job(const options *o, job *j)
{
    pt_err err;
    memset(j, 0, sizeof *j);
    if (pt_model_get(o->model, &j->m, &err) || pt_cluster_get(o->cluster, &j->c, &err))
        return pt_tool_fail("%s", err.msg);
    if (o->nodes)
        j->c.nodes = (int)o->nodes;
    if (o->devices) {
        j->c.devices_per_node = (int)o->devices;
        /* an NVLink domain of whole nodes stays one when the node changes size */
        if (j->c.nvlink_domain % j->c.devices_per_node)
            j->c.nvlink_domain = 0;
    }
    if (o->seq) {
        j->m.seq = o->seq;
        if (pt_model_validate(&j->m, "--seq", &err))
            return pt_tool_fail("%s", err.msg);
    }
    pt_train_default(&j->t, &j->c);
    if (o->stack && pt_stack_get(o->stack, &j->t.stack, &err))
        return pt_tool_fail("--stack: %s", err.msg);
    if (batch_of(o, &j->m, &j->t.global_batch))
        return EXIT_BAD_INPUT;
    if ((double)j->t.global_batch * (double)j->m.seq > MAX_BATCH_TOKENS) {
        char tokens[32];
        count_text((double)j->t.global_batch * (double)j->m.seq, tokens, sizeof tokens);
        fprintf(stderr, "ptplan: a global batch of %lld sequences of %lld is %s tokens a step, "
                        "beyond any training run; --global-batch counts sequences: for a "
                        "batch in tokens write it with a unit (--global-batch 8M) or use "
                        "--global-batch-tokens\n", (long long)j->t.global_batch,
                (long long)j->m.seq, tokens);
        return EXIT_BAD_INPUT;
    }
    j->tokens = o->tokens;
    j->gpu_hour_price = o->gpu_hour_price;
    j->t.bucket_bytes = o->bucket_mib << 20;
    j->t.moe_imbalance = o->moe_imbalance;
    if (j->m.moe.experts > 0 && !j->t.stack.moe_dispatches) {
        fprintf(stderr, "ptplan: model %s is a mixture of experts, which stack '%s' does not "
                        "run; plan it with --stack megatron-core (ptplan --list-stacks)\n",
                j->m.name, j->t.stack.name);
        return EXIT_BAD_INPUT;
    }
    if (o->moe_imbalance != 1 && j->m.moe.experts == 0) {
        fprintf(stderr, "ptplan: --moe-imbalance applies to a mixture of experts; model %s "
                        "has none\n", j->m.name);
        return EXIT_BAD_INPUT;
    }
    if (load_precision(o, &j->t))
        return EXIT_BAD_INPUT;
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
    if (o->pipeline && pt_pipe_parse(o->pipeline, &j->eo.pipe, &err))
        return pt_tool_fail("--pipeline-layout: %s", err.msg);
    int rc = open_costs(o, j);
    /* After the profile, which fills the peaks a spec leaves at 0. */
    if (rc == 0 && pt_cluster_check_precision(&j->c, j->t.precision, &err))
        rc = pt_tool_fail("%s", err.msg);
    if (rc == 0 && pt_train_check_fp8(&j->t, &j->c, &err))
        rc = pt_tool_fail("--precision fp8: %s", err.msg);
    if (rc == 0)
        rc = load_calibration(o, j); /* the stored runs of this stack: ptplan_calib.c */
    /* a validation set that cannot be read costs the band, not the plan */
    if (rc == 0 && prediction_band(j, &j->band, &err)) {
        j->band.n = 0;
        snprintf(j->band.reason, sizeof j->band.reason, "%s", err.msg);
    }
    return rc;
}

void print_band_header(const job *j)
{
    const pred_band *b = &j->band;
    if (b->n == 0) {
        printf("band    no error band: %s\n", b->reason[0] ? b->reason : "no published runs");
        return;
    }
    double lo, hi;
    band_range(b, 1, &lo, &hi);
    printf("band    %d published run%s of stack %s on %s (%s) were predicted %+.0f%% to "
           "%+.0f%% (mean %+.0f%%)\n        off what they measured: a step may take %.2f-%.2fx "
           "the prediction\n", b->n, b->n > 1 ? "s" : "", b->stack, b->device, b->sets,
           100 * b->err_min, 100 * b->err_max, 100 * b->err_mean, lo, hi);
}

void band_text(const job *j, const pt_sim_result *r, int64_t world, char *buf, size_t n)
{
    buf[0] = 0;
    if (j->band.n == 0)
        return;
    double lo, hi;
    band_range(&j->band, r->step_time_s, &lo, &hi);
    int used = snprintf(buf, n, "%.4g-%.4g s a step", lo, hi);
    train_time t;
    train_time_of(j, world, r, &t);
    if (t.set && used > 0 && (size_t)used < n) {
        double k_lo = lo / r->step_time_s, k_hi = hi / r->step_time_s;
        snprintf(buf + used, n - (size_t)used, ", %.4g-%.4g days to train", t.days * k_lo,
                 t.days * k_hi);
    }
}

json_t *band_json(const job *j, const pt_sim_result *r)
{
    const pred_band *b = &j->band;
    if (b->n == 0)
        return json_null();
    double lo, hi;
    band_range(b, r->step_time_s, &lo, &hi);
    return json_pack("{s:f, s:f}", "step_time_lo_s", lo, "step_time_hi_s", hi);
}

int search_job(const options *o, job *j, pt_search_result *r)
{
    pt_err err;
    if (load_job(o, j)) {
        free_job(j);
        return EXIT_BAD_INPUT;
    }
    if (pt_search(&j->m, &j->c, &j->t, &j->eo, j->db, o->sim_top, r, &err)) {
        free_job(j);
        return pt_tool_fail("%s", err.msg);
    }
    return 0;
}

void free_job(job *j)
{
    pt_costdb_close(j->db);
    j->db = NULL;
    free_calibration(j);
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
    const pred_band *b = &j->band;
    if (pt_train_fp8(&j->t))
        json_object_set_new(root, "fp8", pt_fp8_json(&j->t.fp8));
    json_object_set_new(root, "global_batch_tokens",
                        json_integer((json_int_t)(j->t.global_batch * j->m.seq)));
    json_object_set_new(root, "goal", j->tokens > 0 ? json_pack("{s:f, s:f, s:o}", "tokens",
                                                                j->tokens, "steps", goal_steps(j),
                                                                "gpu_hour_price",
                                                                j->gpu_hour_price >= 0
                                                                    ? json_real(j->gpu_hour_price)
                                                                    : json_null())
                                                    : json_null());
    json_object_set_new(root, "band",
                        json_pack("{s:i, s:s, s:s, s:s, s:f, s:f, s:f, s:s}", "runs", b->n,
                                  "stack", b->stack, "device", b->device, "sets", b->sets,
                                  "err_min", b->err_min, "err_max", b->err_max, "err_mean",
                                  b->err_mean, "reason", b->reason));
    json_object_set_new(root, "calibration", calib_json(j));
    json_t *ct = json_object_get(root, "cost_table");
    json_object_set_new(ct, "shipped", json_boolean(j->shipped));
    if (j->shipped) {
        json_object_set_new(ct, "about", json_string(j->db_about));
        json_object_set_new(ct, "passed_over",
                            j->passed_over[0] ? json_string(j->passed_over) : json_null());
    }
    return root;
}

/* Under the costs line, for a stack other than ptrun's: which of its kernels the table
 * prices, as ptrun's kernels (planner/stack.c, pt_stack_ptrun_*), and that its own are
 * analytic; each prediction's "priced from" then gives the share of its step that was
 * measured, interpolated and analytic. */
static void print_cost_kernels(const job *j)
{
    const pt_stack *s = &j->t.stack;
    if (pt_stack_is_ptrun(s))
        return;
    char roles[256] = "";
    for (int r = 0; r < PT_GEMM_ROLE_COUNT; r++)
        if (pt_stack_ptrun_gemm(s, r))
            snprintf(roles + strlen(roles), sizeof roles - strlen(roles), "%s%s",
                     roles[0] ? ", " : "", pt_gemm_role_kind((pt_gemm_role)r));
    bool unfused = s->attention == PT_ATTN_UNFUSED;
    bool fwd = !unfused && pt_stack_ptrun_attn(s, j->c.device.name, false);
    bool bwd = !unfused && pt_stack_ptrun_attn(s, j->c.device.name, true);
    const char *attn = fwd && bwd ? "its attention both ways" : fwd ? "its attention forward"
                       : bwd ? "its attention backward" : "";
    if (!roles[0] && !attn[0]) {
        printf("        stack %s runs none of ptrun's kernels: its kernels are priced "
               "analytically, its collectives from the table\n", s->name);
        return;
    }
    printf("        stack %s: ptrun's kernels priced from the table: %s%s%s%s; its own "
           "kernels analytically\n", s->name, roles[0] ? "GEMMs " : "", roles,
           roles[0] && attn[0] ? " and " : "", attn);
}

void print_job_header(const job *j)
{
    char order[32];
    pt_order_format(j->eo.order, order, sizeof order);
    double params = (double)pt_model_params_total(&j->m);
    char active[96] = "";
    if (j->m.moe.experts > 0) {
        double a = (double)pt_model_params_active(&j->m);
        snprintf(active, sizeof active, " (%.3g%s active: top %lld of %lld experts)",
                 a >= 1e9 ? a / 1e9 : a / 1e6, a >= 1e9 ? "B" : "M",
                 (long long)j->m.moe.top_k, (long long)j->m.moe.experts);
    }
    printf("model   %s: %.3g%s parameters%s, %lld layers, hidden %lld, seq %lld\n", j->m.name,
           params >= 1e9 ? params / 1e9 : params / 1e6, params >= 1e9 ? "B" : "M", active,
           (long long)j->m.layers,
           (long long)j->m.hidden, (long long)j->m.seq);
    printf("cluster %s: %d node(s) x %d %s, %.1f GiB each; layouts may use %.0f%% = %.1f "
           "GiB\n", j->c.name, j->c.nodes, j->c.devices_per_node, j->c.device.name,
           gib((double)j->c.device.memory_bytes), 100 * j->eo.mem_fraction,
           gib(limit_bytes(j)));
    char tokens[32];
    count_text((double)j->t.global_batch * (double)j->m.seq, tokens, sizeof tokens);
    char prec[64];
    pt_train_precision_text(&j->t, prec, sizeof prec);
    printf("train   global batch %lld sequences = %s tokens, precision %s, rank order %s, "
           "stack %s\n", (long long)j->t.global_batch, tokens, prec, order, j->t.stack.name);
    if (pt_train_fp8(&j->t))
        printf("        fp8: the layers' linear layers in FP8 (E4M3 forward, E5M2 "
               "gradients; embedding, output layer, attention and norms in %s); MFU is of "
               "the %s peak\n", pt_prec_name(j->t.precision),
               pt_dtype_name(pt_prec_dtype(j->t.precision)));
    if (j->tokens > 0) {
        char goal[32], steps[32];
        count_text(j->tokens, goal, sizeof goal);
        count_text(goal_steps(j), steps, sizeof steps);
        printf("goal    %s tokens = %s steps", goal, steps);
        if (j->gpu_hour_price >= 0)
            printf(", at %g per GPU-hour", j->gpu_hour_price);
        printf("\n");
    }
    print_band_header(j);
    print_calib_header(j);
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
                   "analytically; --no-shipped-profile prices all so\n");
            print_cost_kernels(j);
            printf("\n");
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
        printf("\n");
        print_cost_kernels(j);
        printf("\n");
    } else {
        printf("costs   no cost table at %s: analytic figures (ptprofile measures them)\n\n",
               j->db_path);
    }
}

/* ---- Time to train and cost ----------------------------------------------------------- */

void count_text(double v, char *buf, size_t n)
{
    static const char units[] = " kMGTPE";
    int u = 0;
    if (fabs(v) < 9999.5) { /* four digits read as they are */
        snprintf(buf, n, "%.0f", v);
        return;
    }
    while (fabs(v) >= 999.5 && u < 6) {
        v /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f", v);
    else
        snprintf(buf, n, "%.3g%c", v, units[u]);
}

double goal_steps(const job *j)
{
    double per_step = (double)j->t.global_batch * (double)j->m.seq;
    return j->tokens > 0 ? ceil(j->tokens / per_step) : 0;
}

void train_time_of(const job *j, int64_t world, const pt_sim_result *r, train_time *out)
{
    *out = (train_time){0};
    if (!(j->tokens > 0) || !(r->step_time_s > 0))
        return;
    out->set = true;
    out->seconds = goal_steps(j) * r->step_time_s;
    out->days = out->seconds / 86400;
    out->gpu_hours = out->seconds / 3600 * (double)world;
    out->cost = j->gpu_hour_price >= 0 ? out->gpu_hours * j->gpu_hour_price : -1;
}

json_t *train_time_json(const job *j, const train_time *t)
{
    if (!t->set)
        return json_null();
    json_t *o = json_pack("{s:f, s:f, s:f, s:f, s:f}", "tokens", j->tokens, "steps",
                          goal_steps(j), "seconds", t->seconds, "days", t->days, "gpu_hours",
                          t->gpu_hours);
    if (o && t->cost >= 0)
        json_object_set_new(o, "cost", json_real(t->cost));
    return o;
}

/* ---- A layout as every mode shows it ------------------------------------------------ */

void memory_parts(const job *j, const pt_layout *l, const pt_memory *mem,
                  const char *names[MEM_PARTS], double bytes[MEM_PARTS])
{
    static const char *const part[MEM_PARTS] = {"weights", "gradients", "optimizer",
                                                "activations", "embedding/head", "recompute",
                                                "comm buffers"};
    /* the model states of the embedding and head parameters the stage holds, by their
     * share of its parameters */
    bool first = mem->stage == 0, last = mem->stage == l->pp - 1;
    double ends = (double)((first ? pt_params_embedding(&j->m, l->tp) : 0) +
                           (last ? pt_params_head(&j->m, l->tp, l->pp) : 0));
    double share = mem->params > 0 ? fmin(1, ends / mem->params) : 0;
    double states = mem->weights_bytes + mem->grads_bytes + mem->optimizer_bytes;
    const double v[MEM_PARTS] = {mem->weights_bytes * (1 - share),
                                 mem->grads_bytes * (1 - share),
                                 mem->optimizer_bytes * (1 - share), mem->activations_bytes,
                                 mem->embed_head_bytes + states * share, mem->recompute_bytes,
                                 mem->comm_bytes};
    for (int i = 0; i < MEM_PARTS; i++) {
        names[i] = part[i];
        bytes[i] = v[i];
    }
}

json_t *memory_parts_json(const job *j, const pt_layout *l, const pt_memory *mem)
{
    const char *names[MEM_PARTS];
    double bytes[MEM_PARTS];
    memory_parts(j, l, mem, names, bytes);
    json_t *o = json_object();
    for (int i = 0; i < MEM_PARTS; i++)
        json_object_set_new(o, names[i], json_integer((json_int_t)llround(bytes[i])));
    return o;
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

void print_rules_to(FILE *f, const job *j, const pt_layout *l, uint32_t mask)
{
    char why[256];
    for (int r = 0; r < PT_REJECT_COUNT; r++) {
        if (!(mask & (1u << r)))
            continue;
        pt_reject_explain((pt_reject)r, &j->m, &j->c, j->t.global_batch, l, why, sizeof why);
        fprintf(f, "  %-18s %s\n", pt_reject_name((pt_reject)r), why);
    }
}

void print_rules(const job *j, const pt_layout *l, uint32_t mask)
{
    print_rules_to(stdout, j, l, mask);
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
    char text[1024];
    layout_text(j, l, text, sizeof text);
    json_t *o = json_pack("{s:o, s:s, s:b, s:o, s:b, s:o, s:o, s:o}", "layout",
                          pt_layout_json(l), "layout_text", text, "valid", mask == 0,
                          "rejected", rules_json(j, l, mask), "fits", fits, "memory",
                          mask ? json_null() : pt_memory_json(&c->memory), "memory_parts",
                          mask ? json_null() : memory_parts_json(j, l, &c->memory),
                          "predicted", mask ? json_null() : pt_sim_result_json(&c->predicted));
    if (o && !mask) {
        train_time t;
        train_time_of(j, pt_layout_world(l), &c->predicted, &t);
        json_object_set_new(o, "time_to_train", train_time_json(j, &t));
        json_object_set_new(o, "band", band_json(j, &c->predicted));
    }
    return o;
}

bool same_layout(const pt_layout *a, const pt_layout *b)
{
    bool same = a->tp == b->tp && a->cp == b->cp && a->pp == b->pp && a->dp == b->dp &&
                a->vp == b->vp && a->sp == b->sp && a->tp_overlap == b->tp_overlap &&
                a->dp_overlap == b->dp_overlap && a->param_overlap == b->param_overlap &&
                a->first_layers == b->first_layers && a->last_layers == b->last_layers &&
                a->zero == b->zero && a->compress == b->compress && a->mbs == b->mbs &&
                a->n_micro == b->n_micro && a->recompute == b->recompute &&
                a->recompute_modules == b->recompute_modules &&
                a->schedule == b->schedule && pt_pipe_same(&a->pipe, &b->pipe) &&
                a->cp_comm == b->cp_comm && a->cp_a2a == b->cp_a2a && a->ep == b->ep &&
                a->etp == b->etp && a->moe_dispatch == b->moe_dispatch;
    if (same && a->compress == PT_COMPRESS_POWERSGD)
        same = a->powersgd_rank == b->powersgd_rank && a->powersgd_start == b->powersgd_start;
    for (int d = 0; d < PT_NDIM && same; d++)
        same = a->order[d] == b->order[d];
    return same;
}

/* The keys of l that parse_job_layout would not set to l's value by itself. */
static void short_layout(const job *j, const pt_layout *l, char *buf, size_t n)
{
    size_t used = 0;
#define KEY(...)                                                                       \
    do {                                                                               \
        int w_ = snprintf(buf + used, n > used ? n - used : 0, __VA_ARGS__);           \
        used += w_ > 0 ? (size_t)w_ : 0;                                               \
    } while (0)
    KEY("tp=%d,pp=%d", l->tp, l->pp);
    if (l->vp > 1)
        KEY(",vp=%d", l->vp);
    if (l->cp > 1)
        KEY(",cp=%d", l->cp);
    if (l->cp_comm != PT_CPC_P2P)
        KEY(",cp_comm=%s", pt_cp_comm_name(l->cp_comm));
    if (l->cp_comm == PT_CPC_A2A_P2P)
        KEY(",cp_a2a=%d", l->cp_a2a);
    KEY(",dp=%d", l->dp);
    if (l->ep > 1)
        KEY(",ep=%d", l->ep);
    if (l->etp > 1)
        KEY(",etp=%d", l->etp);
    if (l->moe_dispatch != PT_MOED_ALLTOALL)
        KEY(",moe_dispatch=%s", pt_moe_dispatch_name(l->moe_dispatch));
    if (l->zero)
        KEY(",zero=%d", l->zero);
    KEY(",mbs=%lld", (long long)l->mbs);
    if (l->sp)
        KEY(",sp=1");
    if (l->recompute != PT_RECOMPUTE_NONE) {
        char rec[64];
        pt_layout_recompute_text(l, rec, sizeof rec);
        KEY(",recompute=%s", rec);
    }
    if (l->schedule == PT_SCHED_AFAB)
        KEY(",schedule=%s", pt_schedule_name(l->schedule));
    if (l->first_layers)
        KEY(",first_layers=%lld", (long long)l->first_layers);
    if (l->last_layers)
        KEY(",last_layers=%lld", (long long)l->last_layers);
    if (l->pipe.n) {
        char pipe[PT_PIPE_TEXT_MAX];
        pt_pipe_format(&l->pipe, pipe, sizeof pipe);
        KEY(",pipeline=%s", pipe);
    }
    if (l->tp_overlap)
        KEY(",tp_overlap=1");
    if (l->dp_overlap != j->t.stack.dp_overlap)
        KEY(",dp_overlap=%s", pt_dp_overlap_name(l->dp_overlap));
    if (l->param_overlap != (j->t.stack.param_overlap && (l->zero == 1 || l->zero == 2)))
        KEY(",param_overlap=%d", l->param_overlap ? 1 : 0);
    if (l->compress != PT_COMPRESS_NONE)
        KEY(",compress=%s", pt_compress_name(l->compress));
    if (l->compress == PT_COMPRESS_POWERSGD)
        KEY(",powersgd_rank=%d,powersgd_start=%lld", l->powersgd_rank,
            (long long)l->powersgd_start);
    bool order = false;
    for (int d = 0; d < PT_NDIM; d++)
        order |= l->order[d] != j->eo.order[d];
    if (order) {
        char text[32];
        pt_order_format(l->order, text, sizeof text);
        KEY(",order=%s", text);
    }
#undef KEY
}

void layout_text(const job *j, const pt_layout *l, char *buf, size_t n)
{
    short_layout(j, l, buf, n);
    pt_layout back;
    pt_err err;
    if (parse_job_layout(j, buf, &back, &err) != 0 || !same_layout(&back, l)) {
        /* a case short_layout does not know: every key, the overlaps explicit */
        pt_layout_format(l, buf, n);
        size_t used = strlen(buf);
        snprintf(buf + used, n > used ? n - used : 0, "%s%s", l->param_overlap ? "" :
                 ",param_overlap=0", l->dp_overlap == PT_DPO_LAST ? ",dp_overlap=last" : "");
    }
}

int parse_job_layout(const job *j, const char *text, pt_layout *l, pt_err *err)
{
    pt_layout_default(l);
    memcpy(l->order, j->eo.order, sizeof l->order);
    char with[2048];
    if (j->eo.pipe.n && !strstr(text, "pipeline=")) {
        /* --pipeline-layout: as if each layout said pipeline= */
        char pipe[PT_PIPE_TEXT_MAX];
        pt_pipe_format(&j->eo.pipe, pipe, sizeof pipe);
        snprintf(with, sizeof with, "%s,pipeline=%s", text, pipe);
        text = with;
    }
    return pt_layout_parse_stack(text, pt_cluster_world(&j->c), j->t.global_batch,
                                 &j->t.stack, l, err) ||
                   pt_stack_check_model(&j->t.stack, &j->m, l, err)
               ? -1
               : 0;
}

json_t *candidate_json(const job *j, const pt_candidate *c)
{
    char text[1024];
    layout_text(j, &c->layout, text, sizeof text);
    train_time t;
    train_time_of(j, pt_layout_world(&c->layout), &c->predicted, &t);
    return json_pack("{s:o, s:s, s:o, s:o, s:o, s:o, s:o}", "layout", pt_layout_json(&c->layout),
                     "layout_text", text, "memory", pt_memory_json(&c->memory), "memory_parts",
                     memory_parts_json(j, &c->layout, &c->memory), "predicted",
                     pt_sim_result_json(&c->predicted), "time_to_train", train_time_json(j, &t),
                     "band", band_json(j, &c->predicted));
}

/* ---- Nothing to plan: why ---------------------------------------------------------- */

/* The size of the job that rule r holds a layout's degrees against, as " (32 heads)"; ""
 * for the rules on how a layout's own settings combine. */
static void rule_subject(pt_reject r, const job *j, char *buf, size_t n)
{
    const pt_model *m = &j->m;
    buf[0] = 0;
    switch (r) {
    case PT_REJECT_WORLD:
        snprintf(buf, n, " (%lld ranks)", (long long)pt_cluster_world(&j->c));
        break;
    case PT_REJECT_HEADS_TP: snprintf(buf, n, " (%lld heads)", (long long)m->heads); break;
    case PT_REJECT_KV_HEADS_TP:
        snprintf(buf, n, " (%lld KV heads)", (long long)m->kv_heads);
        break;
    case PT_REJECT_FFN_TP: snprintf(buf, n, " (FFN %lld)", (long long)m->ffn); break;
    case PT_REJECT_HEADS_CP_A2A:
        snprintf(buf, n, " (%lld heads)", (long long)m->heads);
        break;
    case PT_REJECT_KV_HEADS_CP_A2A:
        snprintf(buf, n, " (%lld KV heads)", (long long)m->kv_heads);
        break;
    case PT_REJECT_EXPERTS_EP:
        snprintf(buf, n, " (%lld experts)", (long long)m->moe.experts);
        break;
    case PT_REJECT_EXPERT_FFN_ETP:
        snprintf(buf, n, " (expert FFN %lld)", (long long)m->moe.expert_ffn);
        break;
    case PT_REJECT_LAYERS_PP:
    case PT_REJECT_UNEVEN_SPLIT:
    case PT_REJECT_PIPELINE_LAYOUT:
        snprintf(buf, n, " (%lld layers)", (long long)m->layers);
        break;
    case PT_REJECT_SEQ_CP:
    case PT_REJECT_SEQ_SP: snprintf(buf, n, " (sequence %lld)", (long long)m->seq); break;
    case PT_REJECT_BATCH_DP:
        snprintf(buf, n, " (global batch %lld)", (long long)j->t.global_batch);
        break;
    case PT_REJECT_TP_SPANS_NODES:
        snprintf(buf, n, " (%d devices per NVLink domain)", pt_cluster_nvlink_domain(&j->c));
        break;
    case PT_REJECT_CP_COMM_NO_CP:
    case PT_REJECT_CP_A2A:
    case PT_REJECT_EP_DENSE:
    case PT_REJECT_EP_FOLD:
    case PT_REJECT_MOE_SP:
    case PT_REJECT_SP_WITHOUT_TP:
    case PT_REJECT_OVERLAP_WITHOUT_SP:
    case PT_REJECT_VP_WITHOUT_PP:
    case PT_REJECT_SCHEDULE_VP:
    case PT_REJECT_INTERLEAVED_MICRO:
    case PT_REJECT_ZERO_NO_DP:
    case PT_REJECT_ZERO_PP:
    case PT_REJECT_COMPRESS_ZERO:
    case PT_REJECT_COMPRESS_NO_DP:
    case PT_REJECT_SCHEDULE_SIZE:
    case PT_REJECT_BAD_VALUE:
    case PT_REJECT_COUNT:
        break;
    }
}

/* "96 by heads_tp (4 heads), 48 by batch_dp (global batch 64)": the rules that
 * rejected layouts, most first. */
static void rejected_text(const job *j, const pt_enum_counts *n, char *buf, size_t cap)
{
    bool done[PT_REJECT_COUNT] = {false};
    size_t used = 0;
    buf[0] = 0;
    for (;;) {
        int best = -1;
        for (int k = 0; k < PT_REJECT_COUNT; k++)
            if (!done[k] && n->rejected[k] && (best < 0 || n->rejected[k] > n->rejected[best]))
                best = k;
        if (best < 0 || used >= cap)
            return;
        done[best] = true;
        char subject[64];
        rule_subject((pt_reject)best, j, subject, sizeof subject);
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld by %s%s", used ? ", " : "",
                                 (long long)n->rejected[best], pt_reject_name((pt_reject)best),
                                 subject);
    }
}

static int smallest_memory(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    double *least = ctx;
    (void)l;
    (void)fits;
    if (mem->total_bytes < *least)
        *least = mem->total_bytes;
    return 0;
}

/* Why the search has nothing to plan, and what would help: more devices only when memory
 * is what stopped the valid layouts, never when the rules rejected every one. */
void no_layout_advice(const job *j, const pt_enum_counts *n, char *buf, size_t cap)
{
    char rules[1024];
    rejected_text(j, n, rules, sizeof rules);
    long long world = (long long)pt_cluster_world(&j->c);
    if (n->enumerated == 0) {
        snprintf(buf, cap, "no layout: stack '%s' runs none of the layouts of %lld ranks",
                 j->t.stack.name, world);
    } else if (n->valid == 0) {
        snprintf(buf, cap, "no valid layout: all %lld layouts of %lld ranks were rejected: %s "
                 "(ptplan --layout L --explain shows a layout's rules with their values)",
                 (long long)n->enumerated, world, rules);
    } else {
        double least = INFINITY;
        pt_enum_counts again;
        pt_enum_layouts(&j->m, &j->c, &j->t, &j->eo, smallest_memory, &least, &again);
        int used = snprintf(buf, cap, "no layout fits: none of the %lld valid layouts fits in "
                            "the %.2f GiB a device may use (the smallest needs %.2f GiB)",
                            (long long)n->valid, gib(limit_bytes(j)), gib(least));
        if (n->enumerated > n->valid && used > 0 && (size_t)used < cap)
            used += snprintf(buf + used, cap - (size_t)used, "; the other %lld broke rules: %s",
                             (long long)(n->enumerated - n->valid), rules);
        if (used > 0 && (size_t)used < cap)
            snprintf(buf + used, cap - (size_t)used, ". Try more devices (--nodes, --devices), "
                     "a smaller --global-batch or --seq, or a larger --mem-fraction");
    }
}
