/*
 * ptcalib — closes the loop from a run back to the cost tables. It reads a run's
 * merged trace (the file ptrun --trace wrote, or the spans ptrun --record stored),
 * checks that it was made from the plan it is compared with, turns every rank's op
 * spans into kernel samples (source trace), fits what the analytic fallbacks assume
 * (efficiency per kind of kernel, latency and bandwidth per link level) by least
 * squares and stores the fits, so that the planner's next prediction uses them. It
 * prints each op's measured time against what the tables predicted before the run
 * (and what the fitted model gives), with the error of each, and the step time and
 * MFU predicted by the plan, re-predicted from the calibrated tables and measured.
 * Exit code: 0 done, 1 bad input or failure.
 */
#include "planner.h"
#include "trace.h"
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: ptcalib [--trace FILE | --run ID] [--plan PLAN.json] [options]\n"
    "\n"
    "Calibrates the cost tables from a recorded run (ptrun --record; the latest run\n"
    "unless --run or --trace says which) and prints predicted against measured per op.\n"
    "\n"
    "  --trace FILE   the run's merged Chrome trace (ptrun --trace) instead of its spans\n"
    "                 in the database\n"
    "  --run ID       the run (id in table runs) whose stored spans to use\n"
    "  --plan FILE    the plan the run trained [the one the trace or run names]\n"
    "  --db FILE      the cost table [$PT_COSTS_DB, else ~/.local/share/ptplan/costs.db]\n"
    "  --no-store     print, fit and re-predict, but change nothing in the database\n"
    "  --top N        ops in the table, by measured time [all]\n"
    "  -h, --help     this text\n";

typedef struct {
    const char *trace, *plan;
    char db[512];
    int64_t run, top;
    bool store;
} options;

static int parse_options(int argc, char **argv, options *o)
{
    enum { O_TRACE = 256, O_RUN, O_PLAN, O_DB, O_NOSTORE, O_TOP };
    static const struct option longopts[] = {
        {"trace", 1, 0, O_TRACE}, {"run", 1, 0, O_RUN}, {"plan", 1, 0, O_PLAN},
        {"db", 1, 0, O_DB}, {"no-store", 0, 0, O_NOSTORE}, {"top", 1, 0, O_TOP},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    *o = (options){.run = -1, .store = true};
    pt_cli_default_db(o->db, sizeof o->db, false);
    opterr = 0;
    int c, bad = 0;
    while (!bad && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_TRACE: o->trace = optarg; break;
        case O_RUN: bad = pt_cli_int("ptcalib", "--run", optarg, 1, INT64_MAX, &o->run); break;
        case O_PLAN: o->plan = optarg; break;
        case O_DB: snprintf(o->db, sizeof o->db, "%s", optarg); break;
        case O_NOSTORE: o->store = false; break;
        case O_TOP: bad = pt_cli_int("ptcalib", "--top", optarg, 1, 1 << 20, &o->top); break;
        case 'h': fputs(usage_text, stdout); exit(0);
        default: return pt_cli_bad_option("ptcalib", c, argv[optind - 1]);
        }
    }
    if (bad)
        return -1;
    if (optind < argc) {
        fprintf(stderr, "ptcalib: unexpected argument '%s' (see ptcalib --help)\n", argv[optind]);
        return -1;
    }
    if (o->trace && o->run >= 0) {
        fprintf(stderr, "ptcalib: --trace and --run both name a run; give one\n");
        return -1;
    }
    return 0;
}

/* ---- The run, its spans and its plan ---------------------------------------------------- */

typedef struct {
    pt_costdb *db;              /* read and written */
    pt_costdb *before;          /* the same file without trace samples: as profiled */
    pt_run_record run;          /* the run the spans come from */
    pt_trace spans;             /* every rank's, on one clock */
    pt_plan plan;
    char plan_path[512];
    pt_cost_hw hw;
} job;

/* The run to calibrate from: --run's, the latest with the trace's plan, or the latest. */
static int pick_run(const options *o, job *j, const char *plan_id, pt_err *err)
{
    pt_run_record *runs;
    size_t n;
    if (pt_costdb_runs(j->db, &runs, &n, err))
        return -1;
    int rc = 0;
    if (n == 0)
        rc = pt_err_set(err, "%s: no runs recorded in this cost database (record one with "
                             "ptrun PLAN.json --record --db %s)", o->db, o->db);
    const pt_run_record *pick = NULL;
    for (size_t i = n; rc == 0 && i-- > 0 && !pick;)
        if (o->run >= 0 ? runs[i].id == o->run : !plan_id || !strcmp(runs[i].plan_id, plan_id))
            pick = &runs[i];
    if (rc == 0 && !pick && o->run >= 0)
        rc = pt_err_set(err, "%s: no run %lld (runs 1..%lld are recorded)", o->db,
                        (long long)o->run, (long long)runs[n - 1].id);
    else if (rc == 0 && !pick)
        rc = pt_err_set(err, "%s: no run of the trace's plan (plan_id %s) is recorded here; "
                             "record it with ptrun --record --db %s", o->db, plan_id, o->db);
    if (rc == 0)
        j->run = *pick;
    free(runs);
    return rc;
}

/* The spans, from the trace file or from the run's rows in the database. */
static int load_spans(const options *o, job *j, pt_err *err)
{
    if (o->trace) {
        if (pt_trace_read_chrome(o->trace, &j->spans, err) ||
            pick_run(o, j, j->spans.plan_id, err))
            return -1;
        return 0;
    }
    size_t n;
    if (pick_run(o, j, NULL, err) ||
        pt_costdb_run_spans(j->db, j->run.id, &j->spans.v, &n, err))
        return -1;
    j->spans.n = j->spans.cap = n;
    j->spans.on = true;
    j->spans.world = (int)j->run.world;
    snprintf(j->spans.plan_id, sizeof j->spans.plan_id, "%s", j->run.plan_id);
    snprintf(j->spans.plan_path, sizeof j->spans.plan_path, "%s", j->run.plan_path);
    if (n == 0)
        return pt_err_set(err, "%s: run %lld has no spans stored (recorded before schema 4, "
                               "or without a trace); give its trace with --trace", o->db,
                          (long long)j->run.id);
    return 0;
}

/* Reads the plan and checks that the spans were recorded from exactly this file. */
static int load_plan(const options *o, job *j, pt_err *err)
{
    const char *from = o->trace ? o->trace : "the run";
    snprintf(j->plan_path, sizeof j->plan_path, "%s", o->plan ? o->plan : j->spans.plan_path);
    if (!j->plan_path[0])
        return pt_err_set(err, "%s names no plan; give it with --plan", from);
    char id[17];
    if (pt_trace_plan_id(j->plan_path, id, err))
        return -1;
    if (!j->spans.plan_id[0] || strcmp(id, j->spans.plan_id) != 0)
        return pt_err_set(err, "%s was recorded from another plan (plan_id %s, %s), not from %s "
                               "(plan_id %s)", from, j->spans.plan_id[0] ? j->spans.plan_id : "none",
                          j->spans.plan_path[0] ? j->spans.plan_path : "no path", j->plan_path, id);
    if (pt_plan_read(j->plan_path, &j->plan, err))
        return -1;
    pt_cluster_apply_profile(&j->plan.cluster, j->db);
    pt_cost_hw_of(&j->plan.cluster, &j->hw);
    return 0;
}

/* ---- Per-op table --------------------------------------------------------------------------- */

typedef struct {
    const pt_span *first;       /* name, key, flops, bytes, dtype */
    int64_t count;
    double measured_s, total_s; /* median and sum of the spans' durations */
    pt_cost before;             /* the tables' answer before this run */
    double fitted_s;            /* the fitted analytic model's */
} op_row;

static int by_key(const void *a, const void *b)
{
    const pt_span *x = *(const pt_span *const *)a, *y = *(const pt_span *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->t0_s > y->t0_s) - (x->t0_s < y->t0_s);
}

static int by_total(const void *a, const void *b)
{
    const op_row *x = a, *y = b;
    return (x->total_s < y->total_s) - (x->total_s > y->total_s);
}

/* One row per op key of the compute stream: the mean of its spans after the first
 * (the warm-up), as the samples are stored (pt_trace_to_costdb_stat, PT_TRACE_MEAN). */
static int op_rows(const pt_trace *t, op_row **out, size_t *n_out, pt_err *err)
{
    const pt_span **v = malloc((t->n ? t->n : 1) * sizeof *v);
    double *d = malloc((t->n ? t->n : 1) * sizeof *d);
    op_row *rows = calloc(t->n ? t->n : 1, sizeof *rows);
    size_t n = 0, nr = 0;
    if (!v || !d || !rows) {
        free(v), free(d), free(rows);
        return pt_err_set(err, "out of memory for %zu spans", t->n);
    }
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].key[0] && t->v[i].stream == 0)
            v[n++] = &t->v[i];
    qsort(v, n, sizeof *v, by_key);
    for (size_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && strcmp(v[b]->key, v[a]->key) == 0; b++)
            ;
        size_t skip = b - a > 1 ? 1 : 0, m = 0;
        op_row *r = &rows[nr++];
        r->first = v[a];
        r->count = (int64_t)(b - a);
        for (size_t k = a; k < b; k++) {
            r->total_s += v[k]->dur_s;
            if (k >= a + skip)
                d[m++] = v[k]->dur_s;
        }
        double sum = 0;
        for (size_t k = 0; k < m; k++)
            sum += d[k];
        r->measured_s = sum / (double)m;
    }
    qsort(rows, nr, sizeof *rows, by_total);
    free(v);
    free(d);
    *out = rows;
    *n_out = nr;
    return 0;
}

static pt_kernel_op kernel_of(const pt_span *s)
{
    pt_kernel_op op = {.dtype = s->dtype, .flops = s->flops, .bytes = s->bytes};
    snprintf(op.key, sizeof op.key, "%s", s->key);
    return op;
}

static double pct(double predicted, double measured)
{
    return measured > 0 ? 100.0 * (predicted - measured) / measured : 0;
}

static void print_table(const options *o, op_row *rows, size_t n)
{
    double sum = 0, err_before = 0, err_fitted = 0;
    for (size_t i = 0; i < n; i++)
        sum += rows[i].total_s;
    printf("\n%-14s %-40s %6s %11s %11s %-12s %8s %11s %8s\n", "op", "key", "spans",
           "measured", "predicted", "(from)", "error", "fitted", "error");
    for (size_t i = 0; i < n; i++) {
        const op_row *r = &rows[i];
        double w = sum > 0 ? r->total_s / sum : 0;
        err_before += w * fabs(pct(r->before.time_s, r->measured_s));
        err_fitted += w * fabs(pct(r->fitted_s, r->measured_s));
        if (o->top && (int64_t)i >= o->top)
            continue;
        printf("%-14.14s %-40.40s %6lld %9.1fus %9.1fus %-12s %+7.1f%% %9.1fus %+7.1f%%\n",
               r->first->name, r->first->key, (long long)r->count, 1e6 * r->measured_s,
               1e6 * r->before.time_s, pt_prov_name(r->before.prov),
               pct(r->before.time_s, r->measured_s), 1e6 * r->fitted_s,
               pct(r->fitted_s, r->measured_s));
    }
    if (o->top && (int64_t)n > o->top)
        printf("(%zu more ops; --top)\n", n - (size_t)o->top);
    printf("time-weighted mean absolute error over %zu ops: tables before the run %.1f%%, "
           "fitted model %.1f%%\n", n, err_before, err_fitted);
}

/* ---- Fits ---------------------------------------------------------------------------------- */

static void print_fits(const job *j, const pt_kernel_fits *k, const pt_link_fit *intra,
                       const pt_link_fit *inter)
{
    printf("\nfitted on %s (least squares in relative error; x = FLOPs at peak, or bytes at "
           "the memory bandwidth for kernels without FLOPs):\n", j->hw.device);
    for (int c = 0; c < k->n; c++)
        printf("  %-14s efficiency %7.2f%%, fixed %6.2f us per kernel   (%d keys, rms error "
               "%.1f%%)\n", k->v[c].cls, 100 * k->v[c].eff, 1e6 * k->v[c].fixed_s,
               k->v[c].samples, 100 * k->v[c].rms_rel_err);
    const pt_link_fit *lv[2] = {intra, inter};
    const char *names[2] = {"intra-node", "inter-node"};
    for (int i = 0; i < 2; i++) {
        if (!lv[i]->ok)
            printf("  %-10s link not fitted (no %s samples of backend %s)\n", names[i],
                   names[i], j->hw.backend);
        else
            printf("  %-10s link latency %.2f us, bandwidth %.2f GB/s   (%d samples, rms error "
                   "%.1f%%)\n", names[i], 1e6 * lv[i]->alpha_s, 1e-9 * lv[i]->bw_Bps,
                   lv[i]->samples, 100 * lv[i]->rms_rel_err);
    }
}

/* ---- Step level ------------------------------------------------------------------------------ */

static int print_step(const job *j, pt_err *err)
{
    const pt_plan *p = &j->plan;
    pt_candidate c;
    if (pt_evaluate(&p->model, &p->cluster, &p->train, j->db, &p->layout, NULL, &c, err))
        return -1;
    const pt_run_record *r = &j->run;
    printf("\nstep of run %lld (%s, %lld ranks):\n", (long long)r->id, r->layout,
           (long long)r->world);
    printf("  step time  measured %.4g s; plan predicted %.4g s (%+.1f%%); re-predicted from "
           "the calibrated tables %.4g s (%+.1f%%)\n", r->measured_step_s,
           p->predicted.step_time_s, pct(p->predicted.step_time_s, r->measured_step_s),
           c.predicted.step_time_s, pct(c.predicted.step_time_s, r->measured_step_s));
    printf("  MFU        measured %.2f%%; plan predicted %.2f%% (%+.1f%%); re-predicted %.2f%% "
           "(%+.1f%%)\n", 100 * r->measured_mfu, 100 * p->predicted.mfu,
           pct(p->predicted.mfu, r->measured_mfu), 100 * c.predicted.mfu,
           pct(c.predicted.mfu, r->measured_mfu));
    return 0;
}

/* ---- Main ---------------------------------------------------------------------------------------- */

static int calibrate(const options *o, job *j, pt_err *err)
{
    if (pt_costdb_open(o->db, PT_COSTDB_READ, &j->db, err) ||
        pt_costdb_open(o->db, PT_COSTDB_READ | PT_COSTDB_PROFILE_ONLY, &j->before, err) ||
        load_spans(o, j, err) || load_plan(o, j, err))
        return -1;
    printf("run %lld: %s on %s, %s, %lld ranks, %zu spans; plan %s (%s)\n",
           (long long)j->run.id, j->run.model, j->run.cluster, j->run.layout,
           (long long)j->run.world, j->spans.n, j->plan_path, j->spans.plan_id);

    op_row *rows = NULL;
    size_t n = 0;
    if (op_rows(&j->spans, &rows, &n, err))
        return -1;
    for (size_t i = 0; i < n; i++) {
        pt_kernel_op op = kernel_of(rows[i].first);
        rows[i].before = pt_cost_kernel(j->before, &j->hw, &op);
    }
    int64_t stored = 0;
    int rc = 0;
    if (o->store)
        rc = pt_trace_to_costdb_stat(&j->spans, j->db, j->hw.device, PT_SOURCE_TRACE, 1,
                                     PT_TRACE_MEAN, &stored, err);
    pt_kernel_fits *k = malloc(sizeof *k);
    pt_link_fit intra, inter;
    if (!k)
        rc = pt_err_set(err, "out of memory");
    if (rc == 0) {
        pt_cost_fit_kernels(j->db, &j->hw, k);
        pt_cost_fit_links(j->db, j->hw.backend, &intra, &inter);
        for (size_t i = 0; i < n; i++) {
            pt_kernel_op op = kernel_of(rows[i].first);
            rows[i].fitted_s = pt_cost_kernel_fitted(&j->hw, &op, k);
        }
        print_table(o, rows, n);
        print_fits(j, k, &intra, &inter);
    }
    if (rc == 0 && o->store &&
        (pt_costdb_put_kernel_fits(j->db, j->hw.device, k, err) ||
         pt_costdb_put_link_fits(j->db, j->hw.backend, &intra, &inter, err)))
        rc = -1;
    if (rc == 0)
        rc = print_step(j, err);
    if (rc == 0 && o->store)
        printf("\nstored in %s: %lld op timings (source trace) and the fits\n", o->db,
               (long long)stored);
    free(rows);
    free(k);
    return rc;
}

int main(int argc, char **argv)
{
    options o;
    if (parse_options(argc, argv, &o))
        return 1;
    job j;
    memset(&j, 0, sizeof j);
    pt_err err = {""};
    int rc = calibrate(&o, &j, &err);
    if (rc)
        fprintf(stderr, "ptcalib: %s\n", err.msg);
    pt_trace_free(&j.spans);
    pt_costdb_close(j.db);
    pt_costdb_close(j.before);
    return rc ? 1 : 0;
}
