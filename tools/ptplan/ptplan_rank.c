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
    if (!o->json)
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
    if (rc == 0 && !o->json)
        printf("wrote %s (open in https://ui.perfetto.dev)\n", o->timeline);
    return rc;
}

/* ---- Printing -------------------------------------------------------------------------- */

static void print_memory(const pt_memory *mem, double limit)
{
    const char *names[MEM_PARTS];
    double v[MEM_PARTS];
    memory_parts(mem, names, v);
    for (int i = 0; i < MEM_PARTS; i++)
        printf("  %-15s %9.2f GiB\n", names[i], gib(v[i]));
    printf("  %-15s %9.2f GiB of %.2f GiB usable\n", "total", gib(mem->total_bytes), gib(limit));
}

static void print_prediction(const pt_sim_result *r)
{
    char prov[64];
    provenance_text(r, prov, sizeof prov);
    printf("predicted step %.4g s, %.0f tokens/s, MFU %.1f%%, HFU %.1f%%, bubble %.1f%%, "
           "exposed communication %.1f%%\n", r->step_time_s, r->tokens_per_s, 100 * r->mfu,
           100 * r->hfu, 100 * r->bubble_fraction, 100 * r->exposed_comm_fraction);
    printf("priced from: %.0f%% measured, %.0f%% interpolated, %.0f%% analytic\n",
           100 * r->prov_share[PT_PROV_MEASURED], 100 * r->prov_share[PT_PROV_INTERPOLATED],
           100 * r->prov_share[PT_PROV_ANALYTIC]);
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

static json_t *candidate_json(const pt_candidate *c)
{
    return json_pack("{s:o, s:o, s:o}", "layout", pt_layout_json(&c->layout), "memory",
                     pt_memory_json(&c->memory), "predicted", pt_sim_result_json(&c->predicted));
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
        print_memory(&sm, limit_bytes(j));
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
        char text[256];
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
    char text[256];
    pt_layout_format(l, text, sizeof text);
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
    print_memory(&c->memory, limit_bytes(j));
    if (fits)
        printf("fits: yes (%.2f GiB to spare)\n", gib(limit_bytes(j) - c->memory.total_bytes));
    else
        printf("fits: NO, over by %.2f GiB\n", gib(c->memory.total_bytes - limit_bytes(j)));
    print_prediction(&c->predicted);
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
    if (o->json)
        layout_json(o, j, &l, mask, &c, fits);
    else
        print_layout(o, j, &l, mask, &c, fits);
    /* A plan only for a layout that can run; the timeline for any valid one. */
    int rc = fits ? write_plan(o, j, &c) : 0;
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

/* The short form of a layout in the ranking table. */
static void row_text(const pt_layout *l, const job *j, char *text, size_t cap)
{
    snprintf(text, cap, "tp%d%s pp%d vp%d cp%d dp%d z%d mbs%lld %s %s", l->tp,
             l->sp ? " sp" : "", l->pp, l->vp, l->cp, l->dp, l->zero, (long long)l->mbs,
             pt_recompute_name(l->recompute), pt_schedule_name(l->schedule));
    size_t used = strlen(text);
    if (l->first_layers || l->last_layers) /* uneven stages: the ends' layers */
        used += (size_t)snprintf(text + used, cap - used, " first%lld last%lld",
                                 (long long)pt_rank_layers(&j->m, l, 0),
                                 (long long)pt_rank_layers(&j->m, l, l->pp - 1));
    if (used < cap && l->tp_overlap)
        used += (size_t)snprintf(text + used, cap - used, " tpo");
    if (used < cap && l->dp_overlap != PT_DPO_LAST)
        used += (size_t)snprintf(text + used, cap - used, " dpo:%s",
                                 pt_dp_overlap_name(l->dp_overlap));
    if (used < cap && l->param_overlap)
        used += (size_t)snprintf(text + used, cap - used, " pgo");
    if (used < cap && l->compress == PT_COMPRESS_BF16)
        snprintf(text + used, cap - used, " c:bf16");
    else if (used < cap && l->compress == PT_COMPRESS_POWERSGD)
        snprintf(text + used, cap - used, " c:psgd%d", l->powersgd_rank);
}

/* Layouts whose predicted time and memory agree within this share are one row. */
#define SAME_SHARE 0.005

static bool same_row(const pt_candidate *a, const pt_candidate *b)
{
    double ta = a->predicted.step_time_s, tb = b->predicted.step_time_s;
    double ma = a->memory.total_bytes, mb = b->memory.total_bytes;
    return fabs(ta - tb) <= SAME_SHARE * fmax(ta, tb) && fabs(ma - mb) <= SAME_SHARE * fmax(ma, mb);
}

/* The rows of the ranking: starts of groups of equivalent layouts, each represented by
 * its member with the least memory (ties in time go to less memory). *rows receives
 * malloc'd [start, count, representative] triples; returns the number of rows. */
static int64_t group_rows(const pt_search_result *r, int64_t **rows)
{
    *rows = malloc((size_t)(r->n_best ? r->n_best : 1) * 3 * sizeof **rows);
    if (!*rows)
        return 0;
    int64_t n = 0;
    for (int64_t i = 0; i < r->n_best;) {
        int64_t k = i + 1, best = i;
        while (k < r->n_best && same_row(&r->best[i], &r->best[k])) {
            if (r->best[k].memory.total_bytes < r->best[best].memory.total_bytes)
                best = k;
            k++;
        }
        (*rows)[3 * n] = i;
        (*rows)[3 * n + 1] = k - i;
        (*rows)[3 * n + 2] = best;
        n++;
        i = k;
    }
    return n;
}

static void print_row(const char *rank, const pt_candidate *c, const job *j, int64_t count,
                      const char *extra)
{
    char text[256], prov[64], same[24] = "";
    row_text(&c->layout, j, text, sizeof text);
    provenance_text(&c->predicted, prov, sizeof prov);
    if (count > 1)
        snprintf(same, sizeof same, "x%lld", (long long)count);
    printf("%-4s %-76s %5s %7.3g %9.4g %10.0f %6.1f %7.1f %6.1f  %s%s\n", rank, text, same,
           gib(c->memory.total_bytes), c->predicted.step_time_s, c->predicted.tokens_per_s,
           100 * c->predicted.mfu, 100 * c->predicted.bubble_fraction,
           100 * c->predicted.exposed_comm_fraction, prov, extra);
}

static void print_ranking(const options *o, const pt_search_result *r, const job *j)
{
    int64_t *rows;
    int64_t n_rows = group_rows(r, &rows);
    int64_t shown = o->top > 0 && o->top < n_rows ? o->top : n_rows;
    printf("%-4s %-76s %5s %7s %9s %10s %6s %7s %6s  %s\n", "rank", "layout", "same", "GiB",
           "step s", "tokens/s", "MFU%", "bubble%", "comm%", "priced from");
    for (int64_t i = 0; i < shown; i++) {
        char rank[24];
        snprintf(rank, sizeof rank, "%lld", (long long)i + 1);
        print_row(rank, &r->best[rows[3 * i + 2]], j, rows[3 * i + 1], "");
    }
    free(rows);
    if (shown)
        printf("(same: layouts predicted within %.1f%% in time and memory, listed once with "
               "the least memory)\n", 100 * SAME_SHARE);
    double limit = limit_bytes(j);
    if (r->n_over > 0) {
        printf("\nfaster layouts that do not fit:\n");
        for (int64_t i = 0; i < r->n_over; i++) {
            if (r->n_best > 0 &&
                r->over[i].predicted.step_time_s >= r->best[0].predicted.step_time_s)
                break;
            char extra[64];
            snprintf(extra, sizeof extra, "  over by %.2f GiB",
                     gib(r->over[i].memory.total_bytes - limit));
            print_row("-", &r->over[i], j, 1, extra);
        }
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
    case PT_REJECT_LAYERS_PP:
    case PT_REJECT_UNEVEN_SPLIT:
        snprintf(buf, n, " (%lld layers)", (long long)m->layers);
        break;
    case PT_REJECT_SEQ_CP:
    case PT_REJECT_SEQ_SP: snprintf(buf, n, " (sequence %lld)", (long long)m->seq); break;
    case PT_REJECT_BATCH_DP:
        snprintf(buf, n, " (global batch %lld)", (long long)j->t.global_batch);
        break;
    case PT_REJECT_TP_SPANS_NODES:
        snprintf(buf, n, " (%d devices per node)", j->c.devices_per_node);
        break;
    case PT_REJECT_SP_WITHOUT_TP:
    case PT_REJECT_OVERLAP_WITHOUT_SP:
    case PT_REJECT_VP_WITHOUT_PP:
    case PT_REJECT_SCHEDULE_VP:
    case PT_REJECT_INTERLEAVED_MICRO:
    case PT_REJECT_ZERO_NO_DP:
    case PT_REJECT_ZERO_PP:
    case PT_REJECT_COMPRESS_ZERO:
    case PT_REJECT_COMPRESS_NO_DP:
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
static void no_layout_advice(const job *j, const pt_enum_counts *n, char *buf, size_t cap)
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
    int64_t *rows;
    int64_t n_rows = group_rows(r, &rows);
    shown = o->top > 0 && o->top < n_rows ? o->top : n_rows;
    for (int64_t i = 0; i < shown; i++) {
        json_t *c = candidate_json(&r->best[rows[3 * i + 2]]);
        json_object_set_new(c, "equivalent", json_integer(rows[3 * i + 1]));
        json_array_append_new(list, c);
    }
    free(rows);
    json_t *over = json_array();
    for (int64_t i = 0; i < r->n_over; i++) {
        json_t *c = candidate_json(&r->over[i]);
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
    print_json(root);
}

int rank_layouts(const options *o)
{
    job j;
    pt_err err;
    if (load_job(o, &j)) {
        free_job(&j);
        return EXIT_BAD_INPUT;
    }
    pt_search_result r;
    if (pt_search(&j.m, &j.c, &j.t, &j.eo, j.db, o->sim_top, &r, &err)) {
        free_job(&j);
        return pt_tool_fail("%s", err.msg);
    }
    char advice[2048] = "";
    if (r.n_best == 0)
        no_layout_advice(&j, &r.counts, advice, sizeof advice);
    if (o->json) {
        ranking_json(o, &r, &j, r.n_best ? NULL : advice);
    } else {
        print_job_header(&j);
        print_ranking(o, &r, &j);
    }
    int rc = 0;
    if (r.n_best > 0) {
        rc = write_plan(o, &j, &r.best[0]);
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
    char text[256];
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
