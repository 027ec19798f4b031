/*
 * ptplan's planning modes: --layout evaluates one layout (validity with every broken
 * rule, memory by stage, predicted step time), and the default ranks every layout
 * that fits by predicted step time. Both write plan.json for the layout chosen and,
 * on request, its predicted timeline as a Chrome trace. When there is nothing to
 * plan they say why (the rules that rejected the layouts, with counts, or memory) and
 * leave no plan of an earlier run at --out, so `ptplan ... && ptrun plan.json` never
 * trains a stale plan.
 */
#include "ptplan.h"
#include "specjson.h"
#include "ptconfig.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- No plan ------------------------------------------------------------------------- */

/* Whether the file at path is a plan ptplan wrote: a JSON object with an integer
 * format_version and a created_by that names ptplan (planner/plan.c writes both). */
static bool is_ptplan_plan(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    json_t *root = json_load_file(path, 0, NULL);
    json_t *by = json_object_get(root, "created_by");
    bool plan = json_is_integer(json_object_get(root, "format_version")) &&
                json_is_string(by) && strncmp(json_string_value(by), "ptplan ", 7) == 0;
    json_decref(root);
    return plan;
}

/* No new plan is at --out: a plan an earlier run left there is removed, so that ptrun
 * cannot train it in place of the one asked for; anything else there is left alone.
 * Says on stderr what it did (nothing when nothing is there). Returns 0, or
 * EXIT_BAD_INPUT when the old plan could not be removed. */
static int clear_stale_plan(const options *o)
{
    struct stat st;
    if (o->no_out || lstat(o->out, &st) != 0)
        return 0;
    if (!is_ptplan_plan(o->out)) {
        fprintf(stderr, "ptplan: '%s' is not a ptplan plan: left untouched\n", o->out);
        return 0;
    }
    if (remove(o->out) != 0) {
        fprintf(stderr, "ptplan: cannot remove '%s', the plan of an earlier run: %s; do not "
                        "train it\n", o->out, strerror(errno));
        return EXIT_BAD_INPUT;
    }
    fprintf(stderr, "ptplan: removed '%s', the plan of an earlier run, so that it is not "
                    "trained by mistake\n", o->out);
    return 0;
}

/* Nothing can run: says why on stderr and clears --out of an earlier plan. Returns the
 * exit status, EXIT_REJECTED unless the old plan could not be removed. */
static int no_plan(const options *o, const char *why)
{
    fprintf(stderr, "ptplan: %s%s\n", o->no_out ? "" : "no plan written: ", why);
    int rc = clear_stale_plan(o);
    return rc ? rc : EXIT_REJECTED;
}

/* ---- plan.json and the timeline ----------------------------------------------------- */

static int write_plan(const options *o, const job *j, const pt_candidate *best)
{
    if (o->no_out)
        return 0;
    pt_plan p = {.format_version = PT_PLAN_FORMAT_VERSION, .model = j->m, .cluster = j->c,
                 .layout = best->layout, .train = j->t, .run = j->run, .memory = best->memory,
                 .predicted = best->predicted};
    snprintf(p.created_by, sizeof p.created_by, "ptplan %s", PT_VERSION);
    pt_costdb_identity(j->db, &p.costs);
    pt_err err;
    if (pt_plan_write(&p, o->out, &err)) {
        pt_tool_fail("%s", err.msg);
        clear_stale_plan(o);
        return EXIT_BAD_INPUT;
    }
    if (!o->json && !o->emit)
        printf("wrote %s\n", o->out);
    return 0;
}

/* Names each stage's process and streams, then writes {"traceEvents": [...]}. */
static int write_timeline(const char *path, json_t *events, int pp)
{
    for (int r = 0; r < pp; r++) {
        char name[32];
        snprintf(name, sizeof name, "pipeline stage %d", r);
        json_array_append_new(events, json_pack("{s:s, s:s, s:i, s:{s:s}}", "name",
                                                "process_name", "ph", "M", "pid", r, "args",
                                                "name", name));
        for (int tid = 0; tid < 2; tid++)
            json_array_append_new(events,
                                  json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name",
                                            "thread_name", "ph", "M", "pid", r, "tid", tid,
                                            "args", "name",
                                            tid ? "data-parallel reduction" : "compute"));
    }
    json_t *root = json_pack("{s:o, s:s}", "traceEvents", events, "displayTimeUnit", "ms");
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    pt_err err;
    int rc = text ? pt_file_write_atomic(path, text, strlen(text), &err)
                  : pt_err_set(&err, "out of memory writing timeline '%s'", path);
    free(text);
    if (rc)
        return pt_tool_fail("timeline: %s", err.msg);
    return 0;
}

/* Re-runs the chosen layout's simulation recording its timeline. */
static int timeline_of(const options *o, const job *j, const pt_layout *l)
{
    if (!o->timeline)
        return 0;
    json_t *events = json_array();
    pt_candidate c;
    pt_err err;
    if (pt_evaluate(&j->m, &j->c, &j->t, j->db, l, events, &c, &err)) {
        json_decref(events);
        return pt_tool_fail("%s", err.msg);
    }
    int rc = write_timeline(o->timeline, events, l->pp);
    if (rc == 0 && !o->json && !o->emit)
        printf("wrote %s (open in https://ui.perfetto.dev)\n", o->timeline);
    return rc;
}

/* ---- Printing -------------------------------------------------------------------------- */

static void print_memory(const job *j, const pt_layout *l, const pt_memory *mem, double limit)
{
    const char *names[MEM_PARTS];
    double v[MEM_PARTS];
    memory_parts(j, l, mem, names, v);
    for (int i = 0; i < MEM_PARTS; i++)
        printf("  %-15s %9.2f GiB\n", names[i], gib(v[i]));
    printf("  %-15s %9.2f GiB of %.2f GiB usable\n", "total", gib(mem->total_bytes), gib(limit));
}

static void print_prediction(const job *j, const pt_layout *l, const pt_sim_result *r)
{
    char prov[64], band[160];
    provenance_text(r, prov, sizeof prov);
    /* an FP8 plan's MFU is of the storage precision's peak, as published tables give it */
    char of[32] = "";
    if (pt_train_fp8(&j->t))
        snprintf(of, sizeof of, " (of the %s peak)",
                 pt_dtype_name(pt_prec_dtype(j->t.precision)));
    printf("predicted step %.4g s, %.0f tokens/s, MFU %.1f%%%s, HFU %.1f%%, bubble %.1f%%, "
           "exposed communication %.1f%%\n", r->step_time_s, r->tokens_per_s, 100 * r->mfu, of,
           100 * r->hfu, 100 * r->bubble_fraction, 100 * r->exposed_comm_fraction);
    printf("priced from: %.0f%% measured, %.0f%% interpolated, %.0f%% analytic\n",
           100 * r->prov_share[PT_PROV_MEASURED], 100 * r->prov_share[PT_PROV_INTERPOLATED],
           100 * r->prov_share[PT_PROV_ANALYTIC]);
    train_time t;
    train_time_of(j, pt_layout_world(l), r, &t);
    if (t.set) {
        char hours[32], cost[32] = "";
        count_text(t.gpu_hours, hours, sizeof hours);
        if (t.cost >= 0) {
            snprintf(cost, sizeof cost, ", cost ");
            count_text(t.cost, cost + strlen(cost), sizeof cost - strlen(cost));
        }
        printf("to train on the goal: %.1f days, %s GPU-hours%s\n", t.days, hours, cost);
    }
    band_text(j, r, pt_layout_world(l), band, sizeof band);
    if (band[0])
        printf("within the band of published runs: %s\n", band);
}

/* Where the step's time goes, on the rank that finishes last. */
static void print_breakdown(const pt_sim_result *r)
{
    printf("\ntime per step (the rank that ends it):  %10s %10s\n", "exposed s", "hidden s");
    for (int k = 0; k < PT_BD_COUNT; k++) {
        if (r->breakdown_s[k] == 0 && r->hidden_s[k] == 0)
            continue;
        printf("  %-38s %10.4g %10.4g  %5.1f%%\n", pt_bd_name((pt_bd)k), r->breakdown_s[k],
               r->hidden_s[k], r->step_time_s > 0 ? 100 * r->breakdown_s[k] / r->step_time_s : 0);
    }
}

/* ---- --layout --------------------------------------------------------------------------- */

static void print_stages(const job *j, const pt_layout *l)
{
    for (int s = 0; s < l->pp; s++) {
        pt_memory sm;
        pt_mem_stage(&j->m, l, &j->t, s, &sm);
        printf("\nstage %d: %lld layers, %.3f B parameters on this rank, %lld micro-batch "
               "chunks in flight\n", s, (long long)sm.layers, sm.params / 1e9,
               (long long)sm.in_flight);
        print_memory(j, l, &sm, limit_bytes(j));
    }
}

static json_t *compression_json(const job *j, const pt_layout *l);

static int layout_json(const options *o, const job *j, const pt_layout *l, uint32_t mask,
                       const pt_candidate *c, bool fits)
{
    json_t *root = job_json(j), *result = layout_result_json(j, l, mask, c, fits);
    json_object_update(root, result);
    json_decref(result);
    if (o->explain && !mask) {
        json_t *stages = json_array();
        for (int s = 0; s < l->pp; s++) {
            pt_memory sm;
            pt_mem_stage(&j->m, l, &j->t, s, &sm);
            json_array_append_new(stages, pt_memory_json(&sm));
        }
        json_object_set_new(root, "stages", stages);
        json_object_set_new(root, "compression", compression_json(j, l));
    }
    print_json(root);
    return 0;
}

/* Why --layout's layout gets no plan: the rules it breaks, or its memory. */
static int layout_no_plan(const options *o, const job *j, uint32_t mask, const pt_memory *mem)
{
    char why[512];
    if (mask) {
        size_t n = (size_t)snprintf(why, sizeof why, "the layout breaks %d rule(s):",
                                    __builtin_popcount(mask));
        for (int r = 0; r < PT_REJECT_COUNT && n < sizeof why; r++)
            if (mask & (1u << r))
                n += (size_t)snprintf(why + n, sizeof why - n, " %s",
                                      pt_reject_name((pt_reject)r));
    } else {
        snprintf(why, sizeof why, "the layout needs %.2f GiB per device, over the %.2f GiB "
                 "it may use", gib(mem->total_bytes), gib(limit_bytes(j)));
    }
    return no_plan(o, why);
}

/* --explain: the layout under each gradient compression the stack runs, where its
 * gradients go in buckets — step time, exposed data-parallel time (reduction and
 * compression's work) and memory — and what each saves against none. */
typedef struct {
    pt_layout l;
    bool priced;
    char why[512];            /* not priced: the error */
    pt_candidate c;
} compress_row;

/* The rows (PT_COMPRESS_COUNT of them); false when compression does not apply. */
static bool compression_rows(const job *j, const pt_layout *l, compress_row *rows)
{
    if (l->zero > 1 || (int64_t)l->dp * l->cp <= 1 || !j->t.stack.compression)
        return false;
    for (int k = 0; k < PT_COMPRESS_COUNT; k++) {
        compress_row *r = &rows[k];
        *r = (compress_row){.l = *l};
        r->l.compress = (pt_compress)k;
        if (k == PT_COMPRESS_POWERSGD && l->compress != PT_COMPRESS_POWERSGD) {
            r->l.powersgd_rank = PT_POWERSGD_RANK;
            r->l.powersgd_start = PT_POWERSGD_START;
        }
        pt_err err;
        r->priced = pt_evaluate(&j->m, &j->c, &j->t, j->db, &r->l, NULL, &r->c, &err) == 0;
        if (!r->priced)
            snprintf(r->why, sizeof r->why, "%s", err.msg);
    }
    return true;
}

/* The share of the step compression k saves against none (0 when either is unpriced). */
static double compression_saves(const compress_row *rows, int k)
{
    double none = rows[PT_COMPRESS_NONE].c.predicted.step_time_s;
    if (!rows[k].priced || !rows[PT_COMPRESS_NONE].priced || !(none > 0))
        return 0;
    return (none - rows[k].c.predicted.step_time_s) / none;
}

static void print_compression(const job *j, const pt_layout *l)
{
    compress_row rows[PT_COMPRESS_COUNT];
    if (!compression_rows(j, l, rows))
        return;
    printf("\ngradient compression (compress=; README: Gradient compression):\n");
    printf("  %-24s %10s %12s %10s %10s\n", "", "step s", "dp exposed s", "GiB", "saves");
    for (int k = 0; k < PT_COMPRESS_COUNT; k++) {
        const compress_row *r = &rows[k];
        char name[48];
        snprintf(name, sizeof name, k == PT_COMPRESS_POWERSGD ? "%s rank %d" : "%s",
                 pt_compress_name(r->l.compress), r->l.powersgd_rank);
        if (!r->priced) {
            printf("  %-24s not priced: %s\n", name, r->why);
            continue;
        }
        printf("  %-24s %10.4g %12.4g %10.2f %9.1f%%%s\n", name, r->c.predicted.step_time_s,
               r->c.predicted.breakdown_s[PT_BD_DP], gib(r->c.memory.total_bytes),
               100 * compression_saves(rows, k),
               k == (int)l->compress ? "  <- this layout" : "");
    }
}

/* The same for --explain --json: an array of {layout, step_time_s, dp_exposed_s,
 * memory_bytes, saves} (saves: the share of none's step), null where it does not
 * apply. */
static json_t *compression_json(const job *j, const pt_layout *l)
{
    compress_row rows[PT_COMPRESS_COUNT];
    if (!compression_rows(j, l, rows))
        return json_null();
    json_t *a = json_array();
    for (int k = 0; k < PT_COMPRESS_COUNT && a; k++) {
        const compress_row *r = &rows[k];
        char text[1024];
        pt_layout_format(&r->l, text, sizeof text);
        json_array_append_new(
            a, r->priced ? json_pack("{s:s, s:f, s:f, s:f, s:f}", "layout", text, "step_time_s",
                                     r->c.predicted.step_time_s, "dp_exposed_s",
                                     r->c.predicted.breakdown_s[PT_BD_DP], "memory_bytes",
                                     r->c.memory.total_bytes, "saves",
                                     compression_saves(rows, k))
                         : json_pack("{s:s, s:s}", "layout", text, "error", r->why));
    }
    return a;
}

static void print_layout(const options *o, const job *j, const pt_layout *l, uint32_t mask,
                         const pt_candidate *c, bool fits)
{
    char text[1024];
    layout_text(j, l, text, sizeof text);
    print_job_header(j);
    printf("layout  %s\n        world %lld = tp %d x cp %d x pp %d x dp %d; %lld "
           "micro-batches of %lld per step\n", text, (long long)pt_layout_world(l), l->tp,
           l->cp, l->pp, l->dp, (long long)l->n_micro, (long long)l->mbs);
    if (mask) {
        printf("invalid: %d rule(s) broken\n", __builtin_popcount(mask));
        print_rules(j, l, mask);
        if (!o->explain)
            printf("(--explain shows more)\n");
        return;
    }
    printf("memory per rank, largest stage (%d of %d: %lld layers, %lld in flight):\n",
           c->memory.stage, l->pp, (long long)c->memory.layers, (long long)c->memory.in_flight);
    print_memory(j, l, &c->memory, limit_bytes(j));
    if (fits)
        printf("fits: yes (%.2f GiB to spare)\n", gib(limit_bytes(j) - c->memory.total_bytes));
    else
        printf("fits: NO, over by %.2f GiB\n", gib(c->memory.total_bytes - limit_bytes(j)));
    print_prediction(j, l, &c->predicted);
    if (o->explain) {
        print_breakdown(&c->predicted);
        print_compression(j, l);
        print_stages(j, l);
        if (!fits)
            printf("\nto fit, try a larger zero stage, recompute=selective or full, sp=1, "
                   "a smaller mbs, or more tp/pp\n");
    }
}

static int evaluate_job(const options *o, job *j)
{
    pt_err err;
    pt_layout l;
    if (parse_job_layout(j, o->layout, &l, &err))
        return pt_tool_fail("--layout: %s", err.msg);
    uint32_t mask;
    int broken = pt_layout_check(&j->m, &j->c, j->t.global_batch, &l, &mask);
    pt_candidate c = {0};
    if (!broken && pt_evaluate(&j->m, &j->c, &j->t, j->db, &l, NULL, &c, &err))
        return pt_tool_fail("%s", err.msg);
    bool fits = !broken && c.memory.total_bytes <= limit_bytes(j);
    if (o->emit) {
        if (mask) { /* the rules broken, where the figures would have gone */
            fflush(stdout);
            print_rules_to(stderr, j, &l, mask);
        }
    } else if (o->json) {
        layout_json(o, j, &l, mask, &c, fits);
    } else {
        print_layout(o, j, &l, mask, &c, fits);
    }
    /* A plan only for a layout that can run; the timeline for any valid one. */
    int rc = fits ? write_plan(o, j, &c) : 0;
    if (rc == 0 && fits && o->emit)
        rc = emit_plan(o, j, &c);
    if (rc == 0 && !broken)
        rc = timeline_of(o, j, &l);
    if (!fits) { /* even when the timeline failed: no earlier plan may stay at --out */
        fflush(stdout); /* the verdict after the figures, where both go to one terminal */
        int why = layout_no_plan(o, j, mask, &c.memory);
        rc = rc ? rc : why;
    }
    return rc;
}

int evaluate_layout(const options *o)
{
    job j;
    if (load_job(o, &j)) {
        free_job(&j);
        return EXIT_BAD_INPUT;
    }
    int rc = evaluate_job(o, &j);
    free_job(&j);
    return rc;
}

/* ---- Ranking ------------------------------------------------------------------------- */

/* Layouts that differ only in settings that move the prediction little (the depth of
 * virtual stages with its schedule, and the overlaps) and are predicted within this
 * share of the row's fastest are one row, listed as "+k". */
#define VARIANT_SHARE 0.01
/* Layouts of any difference predicted within this share in both time and memory are one
 * row as well. */
#define SAME_SHARE 0.005

/* l with the settings a variant may change set to one value. */
static pt_layout variant_key(const pt_layout *l)
{
    pt_layout k = *l;
    k.vp = 1;
    if (k.schedule == PT_SCHED_INTERLEAVED)
        k.schedule = PT_SCHED_1F1B;
    k.n_micro = 0;
    k.tp_overlap = false;
    k.dp_overlap = PT_DPO_LAST;
    k.param_overlap = false;
    return k;
}

static bool within(double a, double b, double share)
{
    return fabs(a - b) <= share * fmax(a, b);
}

/* Whether candidate c joins the row of representative rep. */
static bool joins(const pt_candidate *rep, const pt_candidate *c)
{
    double tr = rep->predicted.step_time_s, tc = c->predicted.step_time_s;
    pt_layout kr = variant_key(&rep->layout), kc = variant_key(&c->layout);
    if (within(tr, tc, VARIANT_SHARE) && same_layout(&kr, &kc))
        return true;
    return within(tr, tc, SAME_SHARE) &&
           within(rep->memory.total_bytes, c->memory.total_bytes, SAME_SHARE);
}

/* The rows of the ranking: row_of[i] is the row of r->best[i]; rows[k] the index of
 * row k's representative, its fastest member. Returns the number of rows (-1: out of
 * memory). */
static int64_t group_rows(const pt_search_result *r, int64_t **rows, int64_t **row_of)
{
    size_t n = (size_t)(r->n_best ? r->n_best : 1);
    *rows = malloc(n * sizeof **rows);
    *row_of = malloc(n * sizeof **row_of);
    if (!*rows || !*row_of) {
        free(*rows);
        free(*row_of);
        *rows = *row_of = NULL;
        return -1;
    }
    int64_t n_rows = 0;
    for (int64_t i = 0; i < r->n_best; i++) {
        int64_t k = 0;
        while (k < n_rows && !joins(&r->best[(*rows)[k]], &r->best[i]))
            k++;
        if (k == n_rows)
            (*rows)[n_rows++] = i;
        (*row_of)[i] = k;
    }
    return n_rows;
}

/* Which columns the table has. */
typedef struct {
    bool train;              /* days and GPU-hours (--tokens) */
    bool cost;               /* cost (--gpu-hour-price) */
} columns;

static void print_head(const columns *col)
{
    printf("%-4s %9s %10s %6s %7s %7s %6s", "rank", "step s", "tokens/s", "MFU%", "GiB",
           "bubble%", "comm%");
    if (col->train)
        printf(" %8s %8s", "days", "GPU-h");
    if (col->cost)
        printf(" %8s", "cost");
    printf("  %-14s %-8s %s\n", "priced from", "variants", "layout (as --layout reads it)");
}

static void print_row(const char *rank, const pt_candidate *c, const job *j, const columns *col,
                      int64_t variants, const char *extra)
{
    char text[1024], prov[64], more[24] = "";
    layout_text(j, &c->layout, text, sizeof text);
    provenance_text(&c->predicted, prov, sizeof prov);
    if (variants > 0)
        snprintf(more, sizeof more, "+%lld", (long long)variants);
    printf("%-4s %9.4g %10.0f %6.1f %7.3g %7.1f %6.1f", rank, c->predicted.step_time_s,
           c->predicted.tokens_per_s, 100 * c->predicted.mfu, gib(c->memory.total_bytes),
           100 * c->predicted.bubble_fraction, 100 * c->predicted.exposed_comm_fraction);
    train_time t;
    train_time_of(j, pt_layout_world(&c->layout), &c->predicted, &t);
    if (col->train) {
        char hours[32];
        count_text(t.gpu_hours, hours, sizeof hours);
        printf(" %8.1f %8s", t.days, hours);
    }
    if (col->cost) {
        char cost[32];
        count_text(t.cost, cost, sizeof cost);
        printf(" %8s", cost);
    }
    printf("  %-14s %-8s %s%s\n", prov, more, text, extra);
}

/* The line under the table that explains its words. */
static void print_legend(const columns *col, bool variants)
{
    printf("priced from: where the step's priced time came from: measured, interpolated or "
           "analytic,\n  or the shares of each (m40 i10 a50 = 40%% measured, 10%% "
           "interpolated, 50%% analytic)\n");
    if (variants)
        printf("variants: +k more layouts within %.0f%% of the row's step time that differ "
               "only in vp (with its schedule)\n  or the overlaps (tp_overlap, dp_overlap, "
               "param_overlap), or within %.1f%% in both time and memory\n  (--json lists "
               "them)\n", 100 * VARIANT_SHARE, 100 * SAME_SHARE);
    if (col->train)
        printf("days, GPU-h: to train on --tokens at that step time (steps x step time; "
               "GPU-hours = hours x GPUs)\n");
    if (col->cost)
        printf("cost: GPU-hours x --gpu-hour-price\n");
}

static void print_ranking(const options *o, const pt_search_result *r, const job *j)
{
    int64_t *rows, *row_of;
    int64_t n_rows = group_rows(r, &rows, &row_of);
    int64_t shown = o->top > 0 && o->top < n_rows ? o->top : n_rows;
    columns col = {.train = j->tokens > 0, .cost = j->tokens > 0 && j->gpu_hour_price >= 0};
    print_head(&col);
    bool variants = false;
    for (int64_t i = 0; i < shown; i++) {
        char rank[24];
        int64_t members = 0;
        for (int64_t k = 0; k < r->n_best; k++)
            members += row_of[k] == i;
        variants |= members > 1;
        snprintf(rank, sizeof rank, "%lld", (long long)i + 1);
        print_row(rank, &r->best[rows[i]], j, &col, members - 1, "");
    }
    free(rows);
    free(row_of);
    double limit = limit_bytes(j);
    bool over = false;
    for (int64_t i = 0; i < r->n_over; i++) {
        if (r->n_best > 0 && r->over[i].predicted.step_time_s >= r->best[0].predicted.step_time_s)
            break;
        if (!over)
            printf("\nfaster layouts that do not fit:\n");
        over = true;
        char extra[64];
        snprintf(extra, sizeof extra, "  (over by %.2f GiB)",
                 gib(r->over[i].memory.total_bytes - limit));
        print_row("-", &r->over[i], j, &col, 0, extra);
    }
    if (shown) {
        char band[160];
        band_text(j, &r->best[0].predicted, pt_layout_world(&r->best[0].layout), band,
                  sizeof band);
        if (band[0])
            printf("\nrank 1 within the band of published runs: %s\n", band);
    }
    if (shown || over) {
        printf("\n");
        print_legend(&col, variants);
    }
    const pt_enum_counts *n = &r->counts;
    printf("\n%lld layouts enumerated: %lld valid, %lld fit in memory (all priced, %lld "
           "simulated in full), %lld valid but too big\n", (long long)n->enumerated,
           (long long)n->valid, (long long)n->fit, (long long)r->n_best, (long long)n->too_big);
    printf("rejected by first rule broken:\n");
    for (int k = 0; k < PT_REJECT_COUNT; k++)
        if (n->rejected[k])
            printf("  %-18s %9lld  %s\n", pt_reject_name((pt_reject)k),
                   (long long)n->rejected[k], pt_reject_describe((pt_reject)k));
}

/* ---- --explain with the search: the winner against the runner-up ------------------- */

/* The layout keys whose values differ between a and b, as "tp 4 -> 2" lines (JSON: an
 * object of key: [a, b]). */
static json_t *layout_differences(const pt_layout *a, const pt_layout *b)
{
    json_t *ja = pt_layout_json(a), *jb = pt_layout_json(b), *diff = json_object();
    const char *key;
    json_t *va;
    json_object_foreach(ja, key, va) {
        json_t *vb = json_object_get(jb, key);
        if (strcmp(key, "string") != 0 && !json_equal(va, vb)) /* the keys, not their sum */
            json_object_set_new(diff, key, json_pack("[O, O]", va, vb ? vb : json_null()));
    }
    json_decref(ja);
    json_decref(jb);
    return diff;
}

/* Where the runner-up's step time differs from the winner's: the parts of the step
 * (pt_bd) by how much they differ, largest first; returns how many (at most PT_BD_COUNT). */
static int time_differences(const pt_sim_result *w, const pt_sim_result *r, int order[])
{
    int n = 0;
    for (int k = 0; k < PT_BD_COUNT; k++)
        if (fabs(r->breakdown_s[k] - w->breakdown_s[k]) > 1e-6 * w->step_time_s)
            order[n++] = k;
    for (int i = 1; i < n; i++) /* insertion sort by |difference|, largest first */
        for (int k = i; k > 0; k--) {
            double dk = fabs(r->breakdown_s[order[k]] - w->breakdown_s[order[k]]);
            double dp = fabs(r->breakdown_s[order[k - 1]] - w->breakdown_s[order[k - 1]]);
            if (dk <= dp)
                break;
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    return n;
}

static void print_explain(const job *j, const pt_candidate *win, const pt_candidate *run)
{
    if (!run) {
        printf("\n--explain: only one layout (with its variants) fits; nothing to set it "
               "against (ptplan --layout L --explain shows it in full)\n");
        return;
    }
    const pt_sim_result *w = &win->predicted, *r = &run->predicted;
    printf("\n--explain: the winner [1] against the runner-up [2]\n");
    pt_candidate both[2] = {*win, *run};
    static const char *const labels[2] = {"winner:    ", "runner-up: "};
    print_side_by_side(j, both, 2, labels);
    json_t *diff = layout_differences(&win->layout, &run->layout);
    printf("\nthey differ in:");
    const char *key;
    json_t *v;
    json_object_foreach(diff, key, v) {
        char *a = json_dumps(json_array_get(v, 0), JSON_ENCODE_ANY);
        char *b = json_dumps(json_array_get(v, 1), JSON_ENCODE_ANY);
        printf(" %s %s -> %s;", key, a ? a : "?", b ? b : "?");
        free(a);
        free(b);
    }
    json_decref(diff);
    printf("\nthe runner-up's step is %.2f%% longer (%.4g s against %.4g s)", 100 *
           (r->step_time_s / w->step_time_s - 1), r->step_time_s, w->step_time_s);
    int order[PT_BD_COUNT];
    int n = time_differences(w, r, order);
    for (int i = 0; i < n && i < 3; i++) {
        double d = r->breakdown_s[order[i]] - w->breakdown_s[order[i]];
        printf("%s %s %+.4g s", i ? "," : ":", pt_bd_name((pt_bd)order[i]), d);
    }
    double more = gib(run->memory.total_bytes - win->memory.total_bytes);
    printf("\nand needs %.2f GiB %s per device\n", fabs(more), more < 0 ? "less" : "more");
}

static json_t *explain_json(const job *j, const pt_candidate *win, const pt_candidate *run)
{
    json_t *e = json_pack("{s:o, s:o}", "winner", candidate_json(j, win), "runner_up",
                          run ? candidate_json(j, run) : json_null());
    if (run) {
        int order[PT_BD_COUNT];
        int n = time_differences(&win->predicted, &run->predicted, order);
        json_t *t = json_object();
        for (int i = 0; i < n; i++)
            json_object_set_new(t, pt_bd_name((pt_bd)order[i]),
                                json_real(run->predicted.breakdown_s[order[i]] -
                                          win->predicted.breakdown_s[order[i]]));
        json_object_set_new(e, "layout_differences",
                            layout_differences(&win->layout, &run->layout));
        json_object_set_new(e, "time_differences_s", t);
    }
    return e;
}

/* The runner-up: the representative of the second row (NULL when there is one row). */
static const pt_candidate *runner_up(const pt_search_result *r)
{
    int64_t *rows, *row_of;
    int64_t n = group_rows(r, &rows, &row_of);
    const pt_candidate *c = n > 1 ? &r->best[rows[1]] : NULL;
    free(rows);
    free(row_of);
    return c;
}

/* advice: why nothing can be planned (NULL when something can) */
static void ranking_json(const options *o, const pt_search_result *r, const job *j,
                         const char *advice)
{
    int64_t shown = o->top > 0 && o->top < r->n_best ? o->top : r->n_best;
    json_t *root = job_json(j);
    json_t *rej = json_object(), *list = json_array();
    const pt_enum_counts *n = &r->counts;
    for (int k = 0; k < PT_REJECT_COUNT; k++)
        if (n->rejected[k])
            json_object_set_new(rej, pt_reject_name((pt_reject)k), json_integer(n->rejected[k]));
    int64_t *rows, *row_of;
    int64_t n_rows = group_rows(r, &rows, &row_of);
    shown = o->top > 0 && o->top < n_rows ? o->top : n_rows;
    for (int64_t i = 0; i < shown; i++) {
        json_t *c = candidate_json(j, &r->best[rows[i]]), *variants = json_array();
        int64_t members = 0;
        for (int64_t k = 0; k < r->n_best; k++) {
            if (row_of[k] != i)
                continue;
            members++;
            if (k == rows[i])
                continue;
            char text[1024];
            layout_text(j, &r->best[k].layout, text, sizeof text);
            json_array_append_new(variants, json_pack("{s:s, s:f, s:f}", "layout_text", text,
                                                      "step_time_s",
                                                      r->best[k].predicted.step_time_s,
                                                      "memory_bytes",
                                                      r->best[k].memory.total_bytes));
        }
        json_object_set_new(c, "equivalent", json_integer(members));
        json_object_set_new(c, "variants", variants);
        json_array_append_new(list, c);
    }
    free(rows);
    free(row_of);
    json_t *over = json_array();
    for (int64_t i = 0; i < r->n_over; i++) {
        json_t *c = candidate_json(j, &r->over[i]);
        json_object_set_new(c, "over_bytes", json_integer((json_int_t)llround(
                                                 r->over[i].memory.total_bytes - limit_bytes(j))));
        json_array_append_new(over, c);
    }
    json_object_set_new(root, "counts",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "enumerated",
                                  (json_int_t)n->enumerated, "valid", (json_int_t)n->valid,
                                  "fit", (json_int_t)n->fit, "too_big", (json_int_t)n->too_big,
                                  "simulated", (json_int_t)r->n_best, "listed",
                                  (json_int_t)shown));
    json_object_set_new(root, "rejected", rej);
    json_object_set_new(root, "layouts", list);
    json_object_set_new(root, "not_fitting", over);
    if (advice)
        json_object_set_new(root, "advice", json_string(advice));
    if (o->explain && r->n_best > 0)
        json_object_set_new(root, "explain", explain_json(j, &r->best[0], runner_up(r)));
    print_json(root);
}

int rank_layouts(const options *o)
{
    job j;
    pt_search_result r;
    int rc = search_job(o, &j, &r);
    if (rc)
        return rc;
    char advice[2048] = "";
    if (r.n_best == 0)
        no_layout_advice(&j, &r.counts, advice, sizeof advice);
    if (o->emit) {
        /* the configuration alone on stdout */
    } else if (o->json) {
        ranking_json(o, &r, &j, r.n_best ? NULL : advice);
    } else {
        print_job_header(&j);
        print_ranking(o, &r, &j);
        if (o->explain && r.n_best > 0)
            print_explain(&j, &r.best[0], runner_up(&r));
    }
    if (r.n_best > 0) {
        rc = write_plan(o, &j, &r.best[0]);
        if (rc == 0 && o->emit)
            rc = emit_plan(o, &j, &r.best[0]);
        if (rc == 0)
            rc = timeline_of(o, &j, &r.best[0].layout);
    } else {
        fflush(stdout); /* the verdict after the table, where both go to one terminal */
        rc = no_plan(o, advice);
    }
    pt_search_free(&r);
    free_job(&j);
    return rc;
}

/* ---- --list-layouts ----------------------------------------------------------------- */

static int print_fitting(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    (void)mem;
    if (!fits)
        return 0;
    char text[1024];
    pt_layout_format(l, text, sizeof text);
    if (ctx)
        json_array_append_new(ctx, json_string(text));
    else
        printf("%s\n", text);
    return 0;
}

int list_layouts(const options *o)
{
    job j;
    if (load_job(o, &j)) {
        free_job(&j);
        return EXIT_BAD_INPUT;
    }
    json_t *list = o->json ? json_array() : NULL;
    pt_enum_counts counts;
    pt_enum_layouts(&j.m, &j.c, &j.t, &j.eo, print_fitting, list, &counts);
    if (list)
        print_json(list);
    free_job(&j);
    return 0;
}
