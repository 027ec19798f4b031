/*
 * ptcalib --run FILE and --forget fID: measured runs of other frameworks. A run record
 * (planner/runrec.c's JSON) is read as it is; a Megatron-LM or torchtitan log is made
 * into one with what the command line says of the run (ptplan's --model, --cluster,
 * --nodes, --stack, --layout, --global-batch, --seq). The run is priced zero-shot,
 * stored in costs.db (table framework_runs) under an id of its own, printed f<id> so
 * that it is never taken for a ptrun run's id, and the correction that the stored runs
 * of its stack on its device give (planner/calib.c) is printed, run by run, as ptplan
 * will apply it. --forget fID deletes one (--dry-run: shows what would change).
 */
#include "ptcalib.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- A record from a log and the command line ------------------------------------------- */

/* The options that describe a log's run; a record carries them itself. */
static const char *log_option_given(const options *o)
{
    return o->model ? "--model" : o->cluster ? "--cluster" : o->stack ? "--stack"
         : o->layout ? "--layout" : o->nodes ? "--nodes" : o->devices ? "--devices"
         : o->global_batch ? "--global-batch" : o->seq ? "--seq" : o->precision ? "--precision"
         : o->date ? "--date" : o->software ? "--software" : o->note ? "--note"
         : o->skip >= 0 ? "--skip" : NULL;
}

/* --software NAME[@VERSION] (the reader's framework and "unknown" by default). */
static void software_of(const options *o, run_format f, pt_runrec *r)
{
    const char *s = o->software ? o->software : f == RUNF_MEGATRON ? "Megatron-LM"
                                                                   : "torchtitan";
    const char *at = strchr(s, '@');
    snprintf(r->software, sizeof r->software, "%.*s", at ? (int)(at - s) : (int)strlen(s), s);
    snprintf(r->version, sizeof r->version, "%s", at && at[1] ? at + 1 : "unknown");
}

/* The date: --date, else the log's first timestamp, else the file's modification day. */
static void date_of(const options *o, const log_reading *lr, pt_runrec *r, bool *from_mtime)
{
    *from_mtime = false;
    if (o->date) {
        snprintf(r->date, sizeof r->date, "%s", o->date);
        return;
    }
    if (lr->date[0]) {
        snprintf(r->date, sizeof r->date, "%s", lr->date);
        return;
    }
    struct stat sb;
    struct tm tm;
    time_t t = stat(o->run_file, &sb) == 0 ? sb.st_mtime : time(NULL);
    if (gmtime_r(&t, &tm))
        strftime(r->date, sizeof r->date, "%Y-%m-%d", &tm);
    *from_mtime = true;
}

static int record_of_log(const options *o, run_format f, pt_runrec *r, pt_err *err)
{
    const char *missing = !o->model ? "--model" : !o->cluster ? "--cluster"
                        : !o->nodes ? "--nodes" : !o->stack ? "--stack"
                        : !o->layout ? "--layout" : NULL;
    if (missing)
        return pt_err_set(err, "%s is a %s: give what it does not say of the run: %s (and "
                               "--model, --cluster, --nodes, --stack, --layout, --global-batch "
                               "as ptplan reads them)", o->run_file, calib_log_format_name(f),
                          missing);
    log_reading lr;
    if (calib_read_log(o->run_file, f, o->skip >= 0 ? o->skip : CALIB_LOG_SKIP, &lr, err))
        return -1;
    memset(r, 0, sizeof *r);
    pt_err why;
    if (pt_runrec_load_specs(r, o->model, o->cluster, o->stack, &why))
        return pt_err_set(err, "%s", why.msg);
    r->cluster.nodes = (int)o->nodes;
    if (o->devices)
        r->cluster.devices_per_node = (int)o->devices;
    pt_stack stack = r->train.stack;
    pt_train_default(&r->train, &r->cluster);
    r->train.stack = stack;
    if (o->precision && pt_train_precision_parse(o->precision, &r->train, &why))
        return pt_err_set(err, "--precision: %s", why.msg);
    if (o->seq)
        r->model.seq = o->seq;
    int64_t batch = o->global_batch ? o->global_batch : lr.global_batch;
    if (!batch)
        return pt_err_set(err, "%s: the log gives no global batch: give --global-batch",
                          o->run_file);
    if (o->global_batch && lr.global_batch && o->global_batch != lr.global_batch)
        return pt_err_set(err, "--global-batch %lld, but %s logs a global batch size of %lld",
                          (long long)o->global_batch, o->run_file, (long long)lr.global_batch);
    r->train.global_batch = batch;
    snprintf(r->layout_text, sizeof r->layout_text, "%s", o->layout);
    r->meas = lr.meas;
    r->meas_value = lr.value;
    bool mtime;
    date_of(o, &lr, r, &mtime);
    software_of(o, f, r);
    if (o->note)
        snprintf(r->note, sizeof r->note, "%s", o->note);
    r->log = (pt_runrec_log){.intervals = lr.intervals, .skipped = lr.skipped,
                             .first = lr.first, .last = lr.last};
    snprintf(r->log.reader, sizeof r->log.reader, "%s",
             f == RUNF_MEGATRON ? "megatron-log" : "torchtitan-log");
    snprintf(r->log.file, sizeof r->log.file, "%s", o->run_file);
    printf("%s %s: the median of %lld logged interval%s (iterations %lld-%lld), the first %lld "
           "left out as warm-up%s: %.6g %s\n", calib_log_format_name(f), o->run_file,
           (long long)lr.intervals, lr.intervals == 1 ? "" : "s", (long long)lr.first,
           (long long)lr.last, (long long)lr.skipped,
           lr.restarted ? " (the log restarts: its last run is read)" : "", lr.value,
           f == RUNF_MEGATRON ? "s a step" : "tokens/s per GPU");
    if (mtime && !o->date)
        printf("(the log has no date: the file's, %s, is taken; --date sets it)\n", r->date);
    char origin[700];
    snprintf(origin, sizeof origin, "%s (the run --model, --cluster, --layout ... describe)",
             o->run_file);
    return pt_runrec_finish(r, origin, err);
}

/* ---- The stored runs of a stack on a device, and their correction ------------------------ */

/* One stored run, read and priced. */
typedef struct {
    int64_t id;              /* 0: the run given, not stored */
    pt_runrec rec;
    pt_candidate zero;       /* zero-shot */
    pt_calib_point pt;
    bool ok;
    char why[sizeof(pt_err)]; /* why not ok */
} priced_run;

/* The table that prices runs on `device` as ptplan chooses it (tools/ptplan/
 * ptplan_job.c, use_shipped): db, or where db holds no samples of the device and the
 * project ships a profile of it, that profile (*shipped, which the caller closes). */
static const pt_costdb *pricing_table(const pt_costdb *db, const char *device,
                                      pt_costdb **shipped, char *costs, size_t n)
{
    int64_t runs[1], profiled = 0;
    *shipped = NULL;
    if ((db && (pt_costdb_sample_runs(db, device, runs, 1, &profiled) > 0 || profiled > 0)) ||
        pt_costdb_open_shipped(device, shipped, &(pt_err){""}) != 0 || !*shipped)
        return db;
    snprintf(costs, n, "the shipped profile of %s", device);
    return *shipped;
}

static void price(const pt_costdb *db, priced_run *p)
{
    pt_err err;
    if (pt_runrec_predict(&p->rec, db, &p->zero, &err)) {
        snprintf(p->why, sizeof p->why, "%s", err.msg);
        return;
    }
    pt_calib_point_of(&p->zero.predicted, p->rec.measured_step_s, &p->pt);
    p->ok = true;
}

static double pct(double predicted, double measured)
{
    return 100 * (predicted / measured - 1);
}

static void print_fit(const char *stack, const char *device, const priced_run *v, size_t n,
                      const pt_calib *c)
{
    printf("\ncalibration of %s on %s from %zu run%s:\n", stack, device, n, n == 1 ? "" : "s");
    printf("  %-6s %-14s %6s %-30s %11s %11s %8s %11s %8s\n", "run", "model", "gpus", "layout",
           "measured s", "zero-shot s", "error", "corrected", "error");
    for (size_t i = 0; i < n; i++) {
        const priced_run *p = &v[i];
        char id[24];
        snprintf(id, sizeof id, p->id ? "f%lld" : "(new)", (long long)p->id);
        printf("  %-6s %-14.14s %6lld %-30.30s %11.4g ", id, p->rec.model.name,
               (long long)pt_cluster_world(&p->rec.cluster), p->rec.layout_text,
               p->rec.measured_step_s);
        if (!p->ok) {
            printf("left out: %s\n", p->why);
            continue;
        }
        double corrected = pt_calib_step(c, &p->pt);
        printf("%11.4g %+7.1f%% %11.4g %+7.1f%%\n", p->zero.predicted.step_time_s,
               pct(p->zero.predicted.step_time_s, p->rec.measured_step_s), corrected,
               pct(corrected, p->rec.measured_step_s));
    }
    char text[200];
    pt_calib_text(c, text, sizeof text);
    if (c->applied && c->checked)
        printf("  correction: %s (form %s; leave-one-out error %.1f%% vs %.1f%% uncalibrated): "
               "ptplan applies it to %s on %s\n", text, pt_calib_form_name(c->form),
               100 * c->loo_err, 100 * c->zero_err, stack, device);
    else if (c->applied)
        printf("  correction: %s, from one run (zero-shot error %.1f%%), not checked on a "
               "held-out run: ptplan applies it; store more runs to check it\n", text,
               100 * c->zero_err);
    else if (c->runs)
        printf("  no correction: %s (zero-shot error %.1f%%); ptplan plans %s on %s "
               "zero-shot\n", c->why, 100 * c->zero_err, stack, device);
}

/* Reads the stored runs of (stack, device) from db (plus `extra`, not stored, when not
 * NULL), prices them with db, fits and prints. */
static int fit_stored(pt_costdb *db, const char *stack, const char *device,
                      const priced_run *extra, pt_calib *out, pt_err *err)
{
    pt_framework_run *v = NULL;
    size_t n = 0;
    if (pt_costdb_framework_runs(db, stack, device, &v, &n, err))
        return -1;
    priced_run *p = calloc(n + 1, sizeof *p);
    pt_calib_point *pts = calloc(n + 1, sizeof *pts);
    if (!p || !pts) {
        free(p);
        free(pts);
        pt_costdb_framework_runs_free(v, n);
        return pt_err_set(err, "out of memory");
    }
    size_t m = 0;
    int k = 0;
    pt_costdb *shipped;
    char costs[200] = "";
    const pt_costdb *table = pricing_table(db, device, &shipped, costs, sizeof costs);
    for (size_t i = 0; i < n; i++, m++) {
        char origin[128];
        snprintf(origin, sizeof origin, "stored run f%lld", (long long)v[i].id);
        p[m].id = v[i].id;
        pt_err why;
        if (pt_runrec_from_json(v[i].record, origin, NULL, &p[m].rec, &why)) {
            snprintf(p[m].why, sizeof p[m].why, "%s", why.msg);
            snprintf(p[m].rec.model.name, sizeof p[m].rec.model.name, "%s", v[i].model);
            snprintf(p[m].rec.layout_text, sizeof p[m].rec.layout_text, "%s", v[i].layout);
            p[m].rec.measured_step_s = v[i].measured_step_s;
            continue;
        }
        price(table, &p[m]);
    }
    if (extra)
        p[m++] = *extra;
    for (size_t i = 0; i < m; i++)
        if (p[i].ok)
            pts[k++] = p[i].pt;
    pt_calib_fit(pts, k, out);
    print_fit(stack, device, p, m, out);
    if (costs[0])
        printf("  (priced with %s, as ptplan prices it)\n", costs);
    pt_costdb_close(shipped);
    free(p);
    free(pts);
    pt_costdb_framework_runs_free(v, n);
    return 0;
}

/* ---- ptcalib --run FILE ------------------------------------------------------------------- */

static void print_record(const pt_runrec *r, const priced_run *p, const char *costs)
{
    const pt_cluster *c = &r->cluster;
    printf("run: %s on %s, %d node%s x %d %s, stack %s, layout %s\n", r->model.name, c->name,
           c->nodes, c->nodes == 1 ? "" : "s", c->devices_per_node, c->device.name,
           r->train.stack.name, r->layout_text);
    printf("     global batch %lld x seq %lld, %s; %s, %s %s%s%s\n",
           (long long)r->train.global_batch, (long long)r->model.seq,
           pt_prec_name(r->train.precision), r->date, r->software, r->version,
           r->note[0] ? "; " : "", r->note);
    printf("     measured %.6g s a step (%s %.6g; %.6g tokens/s per GPU)\n", r->measured_step_s,
           pt_meas_name(r->meas), r->meas_value, pt_runrec_speed(r, r->measured_step_s));
    if (p->ok)
        printf("     zero-shot prediction %.6g s (%+.1f%%), priced with %s\n",
               p->zero.predicted.step_time_s,
               pct(p->zero.predicted.step_time_s, r->measured_step_s), costs);
    else
        printf("     cannot be priced: %s\n", p->why);
}

/* The table runs are stored in (created where missing), or read for --no-store (NULL
 * when there is none: analytic prices). */
static int open_table(const options *o, pt_costdb **db, char path[512], char *costs, size_t n,
                      pt_err *err)
{
    *db = NULL;
    snprintf(path, 512, "%s", o->db);
    if (o->store && !o->db_given)
        pt_cli_default_db(path, 512, true);
    if (!o->store && access(path, F_OK) != 0) {
        snprintf(costs, n, "analytic costs (no cost table at %s)", path);
        return 0;
    }
    if (pt_costdb_open(path, o->store ? PT_COSTDB_CREATE : PT_COSTDB_READ, db, err))
        return -1;
    snprintf(costs, n, "cost table %s", path);
    return 0;
}

int calib_framework_run(const options *o, pt_err *err)
{
    run_format f;
    if (calib_log_format(o->run_file, o->format, &f, err))
        return -1;
    const char *extra = log_option_given(o);
    if (f == RUNF_JSON && extra)
        return pt_err_set(err, "%s is a run record: it says itself what %s would (%s and the "
                               "other options that describe a run go with a log)",
                          o->run_file, extra, extra);
    priced_run *p = calloc(1, sizeof *p);
    if (!p)
        return pt_err_set(err, "out of memory");
    pt_costdb *db = NULL;
    char costs[600], where[512];
    int rc = f == RUNF_JSON ? pt_runrec_read(o->run_file, &p->rec, err)
                            : record_of_log(o, f, &p->rec, err);
    if (rc == 0)
        rc = open_table(o, &db, where, costs, sizeof costs, err);
    char *text = NULL;
    if (rc == 0 && !(text = pt_runrec_to_json(&p->rec)))
        rc = pt_err_set(err, "out of memory");
    const pt_runrec *r = &p->rec;
    if (rc == 0) {
        pt_costdb *shipped;
        price(pricing_table(db, r->cluster.device.name, &shipped, costs, sizeof costs), p);
        print_record(r, p, costs);
        pt_costdb_close(shipped);
    }
    if (rc == 0 && o->store) {
        pt_framework_run fr = {.gpus = pt_cluster_world(&r->cluster),
                               .measured_step_s = r->measured_step_s, .record = text};
        snprintf(fr.stack, sizeof fr.stack, "%s", r->train.stack.name);
        snprintf(fr.device, sizeof fr.device, "%s", r->cluster.device.name);
        snprintf(fr.model, sizeof fr.model, "%s", r->model.name);
        snprintf(fr.cluster, sizeof fr.cluster, "%s", r->cluster.name);
        snprintf(fr.layout, sizeof fr.layout, "%s", r->layout_text);
        snprintf(fr.date, sizeof fr.date, "%s", r->date);
        snprintf(fr.software, sizeof fr.software, "%s %s", r->software, r->version);
        snprintf(fr.source, sizeof fr.source, "%s", o->run_file);
        rc = pt_costdb_add_framework_run(db, &fr, &p->id, err);
        if (rc == 0)
            printf("stored in %s as run f%lld (ptcalib --forget f%lld removes it)\n",
                   where, (long long)p->id, (long long)p->id);
    } else if (rc == 0) {
        printf("not stored (--no-store)\n");
    }
    pt_calib c;
    if (rc == 0)
        rc = fit_stored(db, r->train.stack.name, r->cluster.device.name,
                        o->store ? NULL : p, &c, err);
    free(text);
    free(p);
    pt_costdb_close(db);
    return rc;
}

/* ---- ptcalib --forget fID ------------------------------------------------------------------ */

int calib_forget_framework_run(const options *o, pt_err *err)
{
    pt_costdb *db;
    if (pt_costdb_open(o->db, PT_COSTDB_READ, &db, err))
        return -1;
    pt_framework_run *v = NULL, *r = NULL;
    size_t n = 0;
    int rc = pt_costdb_framework_runs(db, NULL, NULL, &v, &n, err);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (v[i].id == o->forget_framework)
            r = &v[i];
    if (rc == 0 && !r)
        rc = pt_err_set(err, "%s: no stored framework run f%lld to forget (ptcalib --run FILE "
                             "stores them)", o->db, (long long)o->forget_framework);
    pt_calib before, after;
    if (rc == 0) {
        printf("run f%lld: %s on %s (%lld GPUs), stack %s, layout %s, measured %.6g s a step, "
               "%s, %s, from %s\n", (long long)r->id, r->model, r->device, (long long)r->gpus,
               r->stack, r->layout, r->measured_step_s, r->date, r->software, r->source);
        printf("\nbefore:");
        rc = fit_stored(db, r->stack, r->device, NULL, &before, err);
    }
    if (rc == 0)
        rc = pt_costdb_begin(db, err) || pt_costdb_forget_framework_run(db, r->id, err) ? -1 : 0;
    if (rc == 0) {
        printf("\nwithout run f%lld:", (long long)r->id);
        rc = fit_stored(db, r->stack, r->device, NULL, &after, err);
        if (rc == 0 && after.runs == 0)
            printf("  no runs of %s on %s are left: ptplan plans it zero-shot\n", r->stack,
                   r->device);
    }
    if (rc == 0) {
        rc = o->dry_run ? pt_costdb_rollback(db, err) : pt_costdb_commit(db, err);
        if (rc == 0)
            printf("\n%s\n", o->dry_run ? "dry run: nothing changed" : "removed");
    } else {
        pt_costdb_rollback(db, NULL);
    }
    pt_costdb_framework_runs_free(v, n);
    pt_costdb_close(db);
    return rc;
}
