/*
 * ptcalib — closes the loop from a run back to the cost tables, and undoes it. It reads
 * a run's per-op statistics (what ptrun --record stored, or computed from the merged
 * trace ptrun --trace wrote), checks that they were made from the plan they are compared
 * with and on a machine no busier than when it was profiled (the load check: the run's
 * GEMMs against the profile), turns them into kernel samples under the run's id, fits
 * what the analytic fallbacks assume (efficiency per kind of kernel, latency and
 * bandwidth per link level) and keeps a fit only where it is plausible and predicts
 * held-out samples better than the figures in force. It prints each op's median measured
 * time against what the tables predicted before the run and what the fitted model gives,
 * and the step time and MFU predicted by the plan, re-predicted and measured.
 * ptcalib --forget RUN removes a run's samples and the fits its calibration stored, so
 * that the tables are exactly what they were before it (--dry-run shows the change).
 * ptcalib --run FILE takes a measured run of another framework instead (a run record,
 * or a Megatron-LM or torchtitan log): ptcalib_runs.c stores it, and the planner learns
 * a correction of that stack's predictions from the stored runs.
 * Exit code: 0 done, 1 bad input, a noisy run refused, or failure.
 */
#include "ptcalib.h"
#include "trace.h"
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: ptcalib [--trace FILE | --run ID] [--plan PLAN.json] [options]\n"
    "       ptcalib --forget ID [--dry-run] [--db FILE]\n"
    "       ptcalib --run FILE [--no-store] [--db FILE] [what a log does not say]\n"
    "       ptcalib --forget fID [--dry-run] [--db FILE]\n"
    "\n"
    "Calibrates the cost tables from a recorded run (ptrun --record; the latest run\n"
    "unless --run or --trace says which) and prints predicted against measured per op;\n"
    "--forget undoes the calibration of a run.\n"
    "\n"
    "  --trace FILE   the run's merged Chrome trace (ptrun --trace) instead of the\n"
    "                 statistics stored in the database\n"
    "  --run ID       the run (id in table runs) whose stored statistics to use\n"
    "  --plan FILE    the plan the run trained [the one the trace or run names]\n"
    "  --db FILE      the cost table [$PT_COSTS_DB, else ~/.local/share/ptplan/costs.db]\n"
    "  --no-store     print, fit and re-predict, but change nothing in the database\n"
    "  --force        calibrate from a run the load check found noisy\n"
    "  --top N        ops in the table, by measured time [all]\n"
    "  --forget ID    remove run ID's cost samples and the fits its calibration stored:\n"
    "                 the tables are again what they were before it\n"
    "  --dry-run      with --forget: show what would change, change nothing\n"
    "  -h, --help     this text\n"
    "\n"
    "Measured runs of other frameworks (docs/calibration.md, \"Runs of other frameworks\"):\n"
    "  --run FILE     when FILE exists: a run record (JSON), a Megatron-LM / Megatron-Core\n"
    "                 training log or a torchtitan log; it is priced zero-shot, stored\n"
    "                 (table framework_runs, id fN) and the correction that the stored runs\n"
    "                 of its stack on its device give is printed; ptplan applies it\n"
    "  --format F     json, megatron or torchtitan [found from the file]\n"
    "  --forget fN    remove stored run fN (--dry-run: show the correction without it)\n"
    "  A log's run, as ptplan reads the same options:\n"
    "  --model NAME|FILE  --cluster NAME|FILE  --nodes N  --devices N  --stack NAME|FILE\n"
    "  --layout L     (all but --devices required)\n"
    "  --global-batch B   sequences per step [Megatron-LM's logged global batch size]\n"
    "  --seq S        [the model's]     --precision P   [bf16 on GPUs]\n"
    "  --skip K       logged intervals left out as warm-up [2]\n"
    "  --date D       ISO 8601 [the log's first timestamp, else the file's date]\n"
    "  --software NAME[@VERSION]  [Megatron-LM or torchtitan, version unknown]\n"
    "  --note TEXT    kept with the run\n";

/* ---- Options ---------------------------------------------------------------------------- */

/* --run ARG: an existing file is a measured run of another framework; else ARG must be
 * the id of a ptrun run in table runs. */
static int parse_run(const char *arg, options *o)
{
    if (access(arg, F_OK) == 0) {
        o->run_file = arg;
        return 0;
    }
    char *end;
    long long v = strtoll(arg, &end, 10);
    if (*arg && !*end && v >= 1) {
        o->run = v;
        return 0;
    }
    fprintf(stderr, "ptcalib: --run %s: no such file, and not a run id (a run recorded by "
                    "ptrun --record, from 1)\n", arg);
    return -1;
}

/* --forget ID (a ptrun run) or fID (a stored run of another framework). */
static int parse_forget(const char *arg, options *o)
{
    if (arg[0] == 'f') {
        char *end;
        long long v = strtoll(arg + 1, &end, 10);
        if (arg[1] && !*end && v >= 1) {
            o->forget_framework = v;
            return 0;
        }
        fprintf(stderr, "ptcalib: --forget %s: expected a run id (4) or a stored run of "
                        "another framework (f4)\n", arg);
        return -1;
    }
    return pt_cli_int("ptcalib", "--forget", arg, 1, INT64_MAX, &o->forget);
}

static int parse_format(const char *arg, run_format *f)
{
    static const struct {
        const char *name;
        run_format f;
    } names[] = {{"json", RUNF_JSON}, {"megatron", RUNF_MEGATRON},
                 {"torchtitan", RUNF_TORCHTITAN}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(arg, names[i].name) == 0) {
            *f = names[i].f;
            return 0;
        }
    fprintf(stderr, "ptcalib: --format %s: expected json, megatron or torchtitan\n", arg);
    return -1;
}

/* Which options go together. */
static int check_options(const options *o)
{
    bool forget = o->forget >= 0 || o->forget_framework >= 0;
    bool log_opts = o->model || o->cluster || o->stack || o->layout || o->nodes ||
                    o->devices || o->global_batch || o->seq || o->precision || o->date ||
                    o->software || o->note || o->skip >= 0 || o->format != RUNF_AUTO;
    const char *why = NULL;
    if (o->trace && (o->run >= 0 || o->run_file))
        why = "--trace and --run both name a run; give one";
    else if (forget && (o->trace || o->run >= 0 || o->run_file || o->plan || !o->store ||
                        o->force || log_opts))
        why = "--forget takes only --dry-run and --db";
    else if (o->dry_run && !forget)
        why = "--dry-run goes with --forget ID (--no-store is the dry run of a calibration)";
    else if (o->run_file && (o->plan || o->top))
        why = "--run FILE (a measured run of another framework) takes --no-store, --db, "
              "--format and what describes a log's run, not --plan or --top (--force is "
              "allowed and changes nothing: such a run has no load check)";
    else if (log_opts && !o->run_file)
        why = "--model, --cluster, --nodes, --devices, --stack, --layout, --global-batch, "
              "--seq, --precision, --skip, --date, --software, --note and --format describe "
              "the run of --run FILE";
    if (!why)
        return 0;
    fprintf(stderr, "ptcalib: %s\n", why);
    return -1;
}

/* The options that describe a log's run (and --format), parsed by parse_log_option. */
enum { O_MODEL = 300, O_CLUSTER, O_NODES, O_DEVICES, O_STACK, O_LAYOUT, O_GB, O_SEQ, O_PREC,
       O_SKIP, O_DATE, O_SOFTWARE, O_NOTE, O_FORMAT };

/* The options of a log's run (and of --run FILE alone), case by case. */
static int parse_log_option(int c, const char *arg, options *o)
{
    switch (c) {
    case O_MODEL: o->model = arg; return 0;
    case O_CLUSTER: o->cluster = arg; return 0;
    case O_STACK: o->stack = arg; return 0;
    case O_LAYOUT: o->layout = arg; return 0;
    case O_PREC: o->precision = arg; return 0;
    case O_DATE: o->date = arg; return 0;
    case O_SOFTWARE: o->software = arg; return 0;
    case O_NOTE: o->note = arg; return 0;
    case O_NODES: return pt_cli_int("ptcalib", "--nodes", arg, 1, 1 << 20, &o->nodes);
    case O_DEVICES: return pt_cli_int("ptcalib", "--devices", arg, 1, 1 << 20, &o->devices);
    case O_GB:
        return pt_cli_int("ptcalib", "--global-batch", arg, 1, PT_MAX_GLOBAL_BATCH,
                          &o->global_batch);
    case O_SEQ: return pt_cli_int("ptcalib", "--seq", arg, 1, INT64_C(1) << 30, &o->seq);
    case O_SKIP: return pt_cli_int("ptcalib", "--skip", arg, 0, 1 << 20, &o->skip);
    case O_FORMAT: return parse_format(arg, &o->format);
    default: return 1; /* not one of these */
    }
}

static int parse_options(int argc, char **argv, options *o)
{
    enum { O_TRACE = 256, O_RUN, O_PLAN, O_DB, O_NOSTORE, O_TOP, O_FORCE, O_FORGET, O_DRY };
    static const struct option longopts[] = {
        {"trace", 1, 0, O_TRACE}, {"run", 1, 0, O_RUN}, {"plan", 1, 0, O_PLAN},
        {"db", 1, 0, O_DB}, {"no-store", 0, 0, O_NOSTORE}, {"top", 1, 0, O_TOP},
        {"force", 0, 0, O_FORCE}, {"forget", 1, 0, O_FORGET}, {"dry-run", 0, 0, O_DRY},
        {"model", 1, 0, O_MODEL}, {"cluster", 1, 0, O_CLUSTER}, {"nodes", 1, 0, O_NODES},
        {"devices", 1, 0, O_DEVICES}, {"stack", 1, 0, O_STACK}, {"layout", 1, 0, O_LAYOUT},
        {"global-batch", 1, 0, O_GB}, {"seq", 1, 0, O_SEQ}, {"precision", 1, 0, O_PREC},
        {"skip", 1, 0, O_SKIP}, {"date", 1, 0, O_DATE}, {"software", 1, 0, O_SOFTWARE},
        {"note", 1, 0, O_NOTE}, {"format", 1, 0, O_FORMAT},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    *o = (options){.run = -1, .forget = -1, .forget_framework = -1, .skip = -1, .store = true};
    pt_cli_default_db(o->db, sizeof o->db, false);
    opterr = 0;
    int c, bad = 0;
    while (!bad && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_TRACE: o->trace = optarg; break;
        case O_RUN: bad = parse_run(optarg, o); break;
        case O_PLAN: o->plan = optarg; break;
        case O_DB:
            snprintf(o->db, sizeof o->db, "%s", optarg);
            o->db_given = true;
            break;
        case O_NOSTORE: o->store = false; break;
        case O_TOP: bad = pt_cli_int("ptcalib", "--top", optarg, 1, 1 << 20, &o->top); break;
        case O_FORCE: o->force = true; break;
        case O_FORGET: bad = parse_forget(optarg, o); break;
        case O_DRY: o->dry_run = true; break;
        case 'h': fputs(usage_text, stdout); exit(0);
        default:
            if (c >= O_MODEL && c <= O_FORMAT) {
                bad = parse_log_option(c, optarg, o);
                break;
            }
            return pt_cli_bad_option("ptcalib", c, argv[optind - 1]);
        }
    }
    if (bad)
        return -1;
    if (optind < argc) {
        fprintf(stderr, "ptcalib: unexpected argument '%s' (see ptcalib --help)\n", argv[optind]);
        return -1;
    }
    return check_options(o);
}

/* ---- The run, its spans and its plan ---------------------------------------------------- */

typedef struct {
    pt_costdb *db;              /* read and written */
    pt_costdb *before;          /* the same file without trace samples: as profiled */
    pt_run_record run;          /* the run the statistics come from */
    pt_op_stat *stats;          /* every rank's, per op */
    size_t n_stats;
    char plan_id[17];           /* of the plan the statistics were made from */
    char plan_from[512];        /* the plan they name */
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

/* Per-op statistics of spans (a trace file's, or a run recorded before schema 5 with
 * every span stored). */
static int stats_of_spans(job *j, pt_trace *t, pt_err *err)
{
    int rc = pt_trace_op_stats(t, &j->stats, &j->n_stats, err);
    pt_trace_free(t);
    return rc;
}

/* The statistics: computed from the trace file, or the run's stored ones. */
static int load_stats(const options *o, job *j, pt_err *err)
{
    if (o->trace) {
        pt_trace t;
        if (pt_trace_read_chrome(o->trace, &t, err))
            return -1;
        snprintf(j->plan_id, sizeof j->plan_id, "%s", t.plan_id);
        snprintf(j->plan_from, sizeof j->plan_from, "%s", t.plan_path);
        if (pick_run(o, j, t.plan_id, err)) {
            pt_trace_free(&t);
            return -1;
        }
        return stats_of_spans(j, &t, err);
    }
    if (pick_run(o, j, NULL, err) ||
        pt_costdb_run_op_stats(j->db, j->run.id, &j->stats, &j->n_stats, err))
        return -1;
    snprintf(j->plan_id, sizeof j->plan_id, "%s", j->run.plan_id);
    snprintf(j->plan_from, sizeof j->plan_from, "%s", j->run.plan_path);
    if (j->n_stats == 0) { /* recorded before schema 5: every span is stored */
        pt_trace t;
        pt_trace_init(&t, true);
        if (pt_costdb_run_spans(j->db, j->run.id, &t.v, &t.n, err))
            return -1;
        if (stats_of_spans(j, &t, err))
            return -1;
    }
    if (j->n_stats == 0)
        return pt_err_set(err, "%s: run %lld has no op statistics stored (recorded without a "
                               "trace?); give its trace with --trace", o->db,
                          (long long)j->run.id);
    return 0;
}

/* Reads the plan and checks that the spans were recorded from exactly this file. */
static int load_plan(const options *o, job *j, pt_err *err)
{
    const char *from = o->trace ? o->trace : "the run";
    snprintf(j->plan_path, sizeof j->plan_path, "%s", o->plan ? o->plan : j->plan_from);
    if (!j->plan_path[0])
        return pt_err_set(err, "%s names no plan; give it with --plan", from);
    char id[17];
    if (pt_trace_plan_id(j->plan_path, id, err))
        return -1;
    if (!j->plan_id[0] || strcmp(id, j->plan_id) != 0)
        return pt_err_set(err, "%s was recorded from another plan (plan_id %s, %s), not from %s "
                               "(plan_id %s)", from, j->plan_id[0] ? j->plan_id : "none",
                          j->plan_from[0] ? j->plan_from : "no path", j->plan_path, id);
    if (pt_plan_read(j->plan_path, &j->plan, err))
        return -1;
    pt_cluster_apply_profile(&j->plan.cluster, j->db);
    pt_cost_hw_of(&j->plan.cluster, &j->hw);
    return 0;
}

/* ---- Per-op table --------------------------------------------------------------------------- */

typedef struct {
    const pt_op_sample *s;
    double measured_s;           /* median */
    double total_s;              /* every span's time, for the order and the weights */
    pt_cost before;              /* the tables' answer before this run */
    double fitted_s;             /* the fitted analytic model's */
} op_row;

static int by_total(const void *a, const void *b)
{
    const op_row *x = a, *y = b;
    return (x->total_s < y->total_s) - (x->total_s > y->total_s);
}

/* One row per op key. */
static size_t op_rows(const job *j, const pt_op_sample *v, size_t n, const pt_kernel_fits *k,
                      op_row *rows)
{
    for (size_t i = 0; i < n; i++) {
        rows[i] = (op_row){.s = &v[i], .measured_s = v[i].st.median_s,
                           .total_s = v[i].st.total_s};
        rows[i].before = pt_cost_kernel(j->before, &j->hw, &v[i].op);
        rows[i].fitted_s = pt_cost_kernel_fitted(&j->hw, &v[i].op, k);
    }
    qsort(rows, n, sizeof *rows, by_total);
    return n;
}

static double pct(double predicted, double measured)
{
    return measured > 0 ? 100.0 * (predicted - measured) / measured : 0;
}

static void print_table(const options *o, const op_row *rows, size_t n)
{
    double sum = 0, err_before = 0, err_fitted = 0;
    for (size_t i = 0; i < n; i++)
        sum += rows[i].total_s;
    printf("\n%-46s %9s %11s %9s %11s %-12s %8s %11s %8s\n", "op key (median over spans "
           "after warm-up)", "kept/all", "measured", "spread", "predicted", "(from)", "error",
           "fitted", "error");
    for (size_t i = 0; i < n; i++) {
        const op_row *r = &rows[i];
        double w = sum > 0 ? r->total_s / sum : 0;
        err_before += w * fabs(pct(r->before.time_s, r->measured_s));
        err_fitted += w * fabs(pct(r->fitted_s, r->measured_s));
        if (o->top && (int64_t)i >= o->top)
            continue;
        char kept[24];
        snprintf(kept, sizeof kept, "%lld/%lld", (long long)r->s->st.kept,
                 (long long)r->s->st.spans);
        printf("%-46.46s %9s %9.1fus %7.1fus %9.1fus %-12s %+7.1f%% %9.1fus %+7.1f%%\n",
               r->s->op.key,
               kept, 1e6 * r->measured_s, 1e6 * r->s->st.mad_s,
               1e6 * r->before.time_s, pt_prov_name(r->before.prov),
               pct(r->before.time_s, r->measured_s), 1e6 * r->fitted_s,
               pct(r->fitted_s, r->measured_s));
    }
    if (o->top && (int64_t)n > o->top)
        printf("(%zu more ops; --top)\n", n - (size_t)o->top);
    printf("time-weighted mean absolute error over %zu ops: tables before the run %.1f%%, "
           "fitted model %.1f%%\n(spread: the median absolute deviation of the spans)\n",
           n, err_before, err_fitted);
}

/* ---- Fits ---------------------------------------------------------------------------------- */

static void verdict(bool accepted, const char *why, bool store)
{
    if (accepted)
        printf("      %s\n", store ? "stored: in force from now on" : "would be stored");
    else
        printf("      not stored: %s\n", why);
}

static void print_fits(const job *j, const pt_kernel_fits *k, const pt_link_fit *intra,
                       const pt_link_fit *inter, bool store)
{
    printf("\nfits on %s (least squares in relative error; x = FLOPs at peak, or bytes at the "
           "memory bandwidth for kernels without FLOPs; held-out: each size predicted by the "
           "fit of the others, against the model in force on the same sizes):\n", j->hw.device);
    for (int c = 0; c < k->n; c++) {
        const pt_kernel_fit *f = &k->v[c];
        printf("  %-14s efficiency %7.2f%%, fixed %6.2f us per kernel   (%d sizes, rms error "
               "%.1f%%, held-out %.1f%% against %.1f%%)\n", f->cls, 100 * f->eff,
               1e6 * f->fixed_s, f->samples, 100 * f->rms_rel_err, 100 * f->cv_rel_err,
               100 * f->prev_rel_err);
        verdict(f->accepted, f->why, store);
    }
    const pt_link_fit *lv[2] = {intra, inter};
    const char *names[2] = {"intra-node", "inter-node"};
    for (int i = 0; i < 2; i++) {
        if (!lv[i]->ok) {
            printf("  %-10s link not fitted (no %s samples of backend %s)\n", names[i],
                   names[i], j->hw.backend);
            continue;
        }
        printf("  %-10s link latency %.2f us, bandwidth %.2f GB/s   (%d samples, rms error "
               "%.1f%%, held-out %.1f%% against %.1f%%)\n", names[i], 1e6 * lv[i]->alpha_s,
               1e-9 * lv[i]->bw_Bps, lv[i]->samples, 100 * lv[i]->rms_rel_err,
               100 * lv[i]->cv_rel_err, 100 * lv[i]->prev_rel_err);
        verdict(lv[i]->accepted, lv[i]->why, store);
    }
}

/* ---- Step level ------------------------------------------------------------------------------ */

static int predict(const pt_plan *p, const pt_costdb *db, pt_candidate *c, pt_err *err)
{
    return pt_evaluate(&p->model, &p->cluster, &p->train, db, &p->layout, NULL, c, err);
}

static int print_step(const job *j, pt_err *err)
{
    const pt_plan *p = &j->plan;
    pt_candidate c;
    if (predict(p, j->db, &c, err))
        return -1;
    const pt_run_record *r = &j->run;
    printf("\nstep of run %lld (%s, %lld ranks):\n", (long long)r->id, r->layout,
           (long long)r->world);
    printf("  step time  measured %.4g s (median of %lld steps); plan predicted %.4g s "
           "(%+.1f%%); re-predicted from the calibrated tables %.4g s (%+.1f%%)\n",
           r->measured_step_s, (long long)(r->steps_timed ? r->steps_timed : r->steps),
           p->predicted.step_time_s, pct(p->predicted.step_time_s, r->measured_step_s),
           c.predicted.step_time_s, pct(c.predicted.step_time_s, r->measured_step_s));
    printf("  MFU        measured %.2f%%; plan predicted %.2f%% (%+.1f%%); re-predicted %.2f%% "
           "(%+.1f%%)\n", 100 * r->measured_mfu, 100 * p->predicted.mfu,
           pct(p->predicted.mfu, r->measured_mfu), 100 * c.predicted.mfu,
           pct(c.predicted.mfu, r->measured_mfu));
    return 0;
}

/* ---- Calibrating ------------------------------------------------------------------------------ */

/* The load check, again (a trace file may be calibrated from without its run's record
 * having run it); a noisy run is refused unless --force. */
static int check_load(const options *o, const job *j, const pt_op_sample *v, size_t n,
                      pt_err *err)
{
    int keys = 0;
    double ratio = pt_gemm_ratio(v, n, j->before, &j->hw, &keys);
    if (keys)
        printf("load check: the run's GEMMs took %.2fx the profiled time (median of %d shapes; "
               "noisy above %.2fx)\n", ratio, keys, PT_NOISY_GEMM_RATIO);
    else
        printf("load check: no GEMM of the run is in the profile; not checked\n");
    double excess = pt_span_excess(v, n);
    printf("            its ops took %.2fx what their medians account for (noisy above %.2fx)\n",
           excess, PT_NOISY_EXCESS);
    char why[300] = "";
    if (j->run.noisy[0])
        snprintf(why, sizeof why, "%s", j->run.noisy);
    else if (excess > PT_NOISY_EXCESS)
        snprintf(why, sizeof why, "its ops took %.2fx what their medians account for", excess);
    else if (ratio > PT_NOISY_GEMM_RATIO)
        snprintf(why, sizeof why, "its GEMMs took %.2fx the profiled time", ratio);
    if (!why[0])
        return 0;
    if (o->force || !o->store) {
        printf("run %lld is noisy (%s); %s\n", (long long)j->run.id, why,
               o->force ? "calibrating from it anyway (--force)" : "nothing is stored (--no-store)");
        return 0;
    }
    return pt_err_set(err, "run %lld is noisy: %s; not calibrated (run it again on a quieter "
                           "machine, or give --force)", (long long)j->run.id, why);
}

static int calibrate(const options *o, job *j, pt_err *err)
{
    if (pt_costdb_open(o->db, PT_COSTDB_READ, &j->db, err) ||
        pt_costdb_open(o->db, PT_COSTDB_READ | PT_COSTDB_PROFILE_ONLY, &j->before, err) ||
        load_stats(o, j, err) || load_plan(o, j, err))
        return -1;
    printf("run %lld: %s on %s, %s, %lld ranks, %zu op statistics; plan %s (%s)\n",
           (long long)j->run.id, j->run.model, j->run.cluster, j->run.layout,
           (long long)j->run.world, j->n_stats, j->plan_path, j->plan_id);
    if (j->run.forgotten)
        printf("(run %lld was forgotten; calibrating from it again brings it back)\n",
               (long long)j->run.id);

    pt_op_sample *v = NULL;
    op_row *rows = NULL;
    pt_kernel_fits *k = malloc(sizeof *k);
    pt_link_fit intra, inter;
    size_t n = 0;
    int64_t stored = 0;
    int rc = k ? pt_op_samples(j->stats, j->n_stats, &v, &n, err)
               : pt_err_set(err, "out of memory");
    if (rc == 0 && !(rows = calloc(n ? n : 1, sizeof *rows)))
        rc = pt_err_set(err, "out of memory");
    if (rc == 0)
        rc = check_load(o, j, v, n, err);
    if (rc == 0 && o->store)
        rc = pt_costdb_put_run_samples(j->db, j->hw.device, j->run.id, v, n, &stored, err);
    if (rc == 0) {
        pt_cost_fit_kernels(j->db, &j->hw, k);
        pt_cost_fit_judge_kernels(j->db, &j->hw, k);
        pt_cost_fit_links(j->db, j->hw.backend, &intra, &inter);
        pt_cost_fit_judge_links(j->db, &j->hw, &intra, &inter);
        print_table(o, rows, op_rows(j, v, n, k, rows));
        print_fits(j, k, &intra, &inter, o->store);
    }
    if (rc == 0 && o->store &&
        (pt_costdb_put_kernel_fits(j->db, j->hw.device, j->run.id, k, err) ||
         pt_costdb_put_link_fits(j->db, j->hw.backend, j->run.id, &intra, &inter, err)))
        rc = -1;
    if (rc == 0)
        rc = print_step(j, err);
    if (rc == 0 && o->store)
        printf("\nstored in %s: %lld op timings of run %lld (source trace; at least %d spans "
               "each) and the accepted fits; ptcalib --forget %lld undoes them\n", o->db,
               (long long)stored, (long long)j->run.id, PT_MIN_SPANS, (long long)j->run.id);
    free(v);
    free(rows);
    free(k);
    return rc;
}

/* ---- Forgetting a run -------------------------------------------------------------------------- */

/* The fits in force that differ between two states of the tables. */
static void print_fit_changes(const pt_kernel_fits *a, const pt_kernel_fits *b)
{
    for (int i = 0; i < a->n; i++) {
        const pt_kernel_fit *x = &a->v[i], *y = NULL;
        for (int k = 0; k < b->n && !y; k++)
            if (!strcmp(b->v[k].cls, x->cls))
                y = &b->v[k];
        if (!y)
            printf("  fit of %-12s efficiency %.2f%% -> the built-in curve\n", x->cls,
                   100 * x->eff);
        else if (y->eff != x->eff || y->fixed_s != x->fixed_s)
            printf("  fit of %-12s efficiency %.2f%% -> %.2f%%, fixed %.2f -> %.2f us\n", x->cls,
                   100 * x->eff, 100 * y->eff, 1e6 * x->fixed_s, 1e6 * y->fixed_s);
    }
}

static int forget(const options *o, pt_err *err)
{
    pt_costdb *db;
    if (pt_costdb_open(o->db, PT_COSTDB_READ, &db, err))
        return -1;
    pt_run_record *runs = NULL, *r = NULL;
    size_t n = 0;
    pt_plan plan;
    bool have_plan = false;
    pt_candidate before, after;
    pt_cost_hw hw = {0};
    pt_kernel_fits *kf = calloc(2, sizeof *kf);
    pt_forgotten f;
    int rc = kf ? pt_costdb_runs(db, &runs, &n, err) : pt_err_set(err, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (runs[i].id == o->forget)
            r = &runs[i];
    if (rc == 0 && !r)
        rc = pt_err_set(err, "%s: no run %lld to forget", o->db, (long long)o->forget);
    if (rc == 0) {
        /* the prediction of the run's own plan, before and after, when it can be read */
        have_plan = pt_plan_read(r->plan_path, &plan, NULL) == 0;
        if (have_plan) {
            pt_cluster_apply_profile(&plan.cluster, db);
            pt_cost_hw_of(&plan.cluster, &hw);
            have_plan = predict(&plan, db, &before, NULL) == 0;
        }
        pt_costdb_kernel_fits(db, hw.device, &kf[0]);
        rc = pt_costdb_begin(db, err) || pt_costdb_forget_run(db, o->forget, &f, err) ? -1 : 0;
    }
    if (rc == 0) {
        pt_costdb_kernel_fits(db, hw.device, &kf[1]);
        if (have_plan && predict(&plan, db, &after, NULL))
            have_plan = false;
        printf("run %lld (%s, %s, recorded %s)%s: %lld kernel samples, %lld kernel fits and %lld "
               "link fits %s\n", (long long)r->id, r->model, r->layout, r->created_at,
               r->forgotten ? " was forgotten before" : "", (long long)f.samples,
               (long long)f.kernel_fits, (long long)f.link_fits,
               o->dry_run ? "would be removed" : "removed");
        if (hw.device[0])
            print_fit_changes(&kf[0], &kf[1]);
        if (have_plan)
            printf("  its plan (%s) is predicted at %.4g s now, %.4g s without run %lld\n",
                   r->plan_path, before.predicted.step_time_s, after.predicted.step_time_s,
                   (long long)r->id);
        rc = o->dry_run ? pt_costdb_rollback(db, err) : pt_costdb_commit(db, err);
        if (rc == 0)
            printf("%s\n", o->dry_run ? "dry run: nothing changed" : "done");
    } else {
        pt_costdb_rollback(db, NULL);
    }
    free(runs);
    free(kf);
    pt_costdb_close(db);
    return rc;
}

static int tool_main(int argc, char **argv)
{
    options o;
    if (parse_options(argc, argv, &o))
        return 1;
    job j;
    memset(&j, 0, sizeof j);
    pt_err err = {""};
    int rc = o.forget >= 0              ? forget(&o, &err)
             : o.forget_framework >= 0 ? calib_forget_framework_run(&o, &err)
             : o.run_file              ? calib_framework_run(&o, &err)
                                       : calibrate(&o, &j, &err);
    if (rc)
        fprintf(stderr, "ptcalib: %s\n", err.msg);
    free(j.stats);
    pt_costdb_close(j.db);
    pt_costdb_close(j.before);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    return pt_cli_exit("ptcalib", tool_main(argc, argv));
}
