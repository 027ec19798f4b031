/*
 * ptplan's correction of its stack on its device, learned from the measured runs a user
 * stored with ptcalib --run FILE (costs.db, table framework_runs): every stored run of
 * the job's stack on the job's device is read back as a run record, priced zero-shot
 * with the job's cost table by the same functions that price the plan, and the
 * correction of planner/calib.c is fitted over them and judged on held-out runs. An
 * applied correction goes into the job's training settings (j->t.calib), so every
 * prediction ptplan makes for the job — the search's ranking, --layout, --compare,
 * --nodes, plan.json — is corrected alike; the header says so, or why none is applied.
 * The error bands (ptplan_band.c) stay the zero-shot model's.
 */
#include "ptplan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct job_calib {
    pt_calib fit;
    bool off;                  /* --no-calibration */
    int stored;                /* runs of the stack on the device in the table */
    int used;                  /* of which priced and fitted */
    char ids[256];             /* "f1, f2, f4" (those used) */
    char left_out[1024];       /* "f3: why; ..." (those not) */
};

/* The table the runs are stored in: the job's, or the one a shipped profile stands in
 * for (use_shipped), opened here (*own, the caller closes it). NULL: none. */
static const pt_costdb *runs_table(const job *j, pt_costdb **own, pt_err *err, int *rc)
{
    *own = NULL;
    *rc = 0;
    if (!j->shipped)
        return j->db;
    if (!j->passed_over[0])
        return NULL;
    if (pt_costdb_open(j->passed_over, PT_COSTDB_READ, own, err))
        *rc = -1;
    return *own;
}

/* Appends "fID" (with `why`: "fID: why"), separated by sep, to buf of size n. */
static void append(char *buf, size_t n, const char *sep, int64_t id, const char *why)
{
    size_t used = strlen(buf);
    if (used < n)
        snprintf(buf + used, n - used, "%sf%lld%s%s", used ? sep : "", (long long)id,
                 why ? ": " : "", why ? why : "");
}

/* Prices stored run v zero-shot with the job's table into *pt; -1 with why. */
static int price_stored(const job *j, const pt_framework_run *v, pt_calib_point *pt, pt_err *why)
{
    char origin[64];
    snprintf(origin, sizeof origin, "stored run f%lld", (long long)v->id);
    pt_runrec *r = malloc(sizeof *r);
    pt_candidate *c = malloc(sizeof *c);
    int rc = r && c ? 0 : pt_err_set(why, "out of memory");
    if (rc == 0)
        rc = pt_runrec_from_json(v->record, origin, NULL, r, why) ||
             pt_runrec_predict(r, j->db, c, why) ? -1 : 0;
    if (rc == 0)
        pt_calib_point_of(&c->predicted, r->measured_step_s, pt);
    free(r);
    free(c);
    return rc;
}

int load_calibration(const options *o, job *j)
{
    pt_err err;
    pt_costdb *own;
    int rc;
    const pt_costdb *table = runs_table(j, &own, &err, &rc);
    pt_framework_run *v = NULL;
    size_t n = 0;
    if (rc == 0 && pt_costdb_framework_runs(table, j->t.stack.name, j->c.device.name, &v, &n,
                                            &err))
        rc = -1;
    pt_costdb_close(own);
    job_calib *cal = rc ? NULL : calloc(1, sizeof *cal);
    pt_calib_point *pts = rc ? NULL : calloc(n + 1, sizeof *pts);
    if (rc == 0 && (!cal || !pts))
        rc = pt_err_set(&err, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        pt_err why;
        if (price_stored(j, &v[i], &pts[cal->used], &why)) {
            append(cal->left_out, sizeof cal->left_out, "; ", v[i].id, why.msg);
            continue;
        }
        append(cal->ids, sizeof cal->ids, ", ", v[i].id, NULL);
        cal->used++;
    }
    pt_costdb_framework_runs_free(v, n);
    if (rc) {
        free(cal);
        free(pts);
        return pt_tool_fail("%s", err.msg);
    }
    cal->stored = (int)n;
    cal->off = o->no_calibration;
    pt_calib_fit(pts, cal->used, &cal->fit);
    free(pts);
    j->cal = cal;
    if (cal->fit.applied && !cal->off)
        j->t.calib = &cal->fit;
    return 0;
}

void free_calibration(job *j)
{
    free(j->cal);
    j->cal = NULL;
    j->t.calib = NULL;
}

/* "3 runs of megatron-core on H100-SXM5-80GB" */
static void runs_text(const job *j, int n, char *buf, size_t cap)
{
    snprintf(buf, cap, "%d run%s of %s on %s", n, n == 1 ? "" : "s", j->t.stack.name,
             j->c.device.name);
}

void print_calib_header(const job *j)
{
    const job_calib *cal = j->cal;
    if (!cal || cal->stored == 0)
        return;
    const pt_calib *c = &cal->fit;
    char runs[200], text[200];
    runs_text(j, cal->used, runs, sizeof runs);
    pt_calib_text(c, text, sizeof text);
    if (cal->off)
        printf("calib   --no-calibration: %s stored (ptcalib --run) are not used; planned "
               "zero-shot\n", runs);
    else if (c->applied && c->checked)
        printf("calib   calibrated from %s (%s; leave-one-out error %.1f %% vs %.1f %% "
               "uncalibrated)\n", runs, text, 100 * c->loo_err, 100 * c->zero_err);
    else if (c->applied)
        printf("calib   calibrated from %s (%s; it was predicted %.1f %% off zero-shot; one "
               "run cannot be checked on a held-out run: store more with ptcalib --run)\n",
               runs, text, 100 * c->zero_err);
    else if (cal->used)
        printf("calib   %s are stored, but a correction from them %s (zero-shot error "
               "%.1f %%): planned zero-shot\n", runs,
               c->checked ? "did not predict held-out runs better" : "is not plausible",
               100 * c->zero_err);
    if (cal->used && !cal->off)
        printf("        runs %s (ptcalib --forget fN removes one; --no-calibration plans "
               "zero-shot)\n", cal->ids);
    if (cal->left_out[0])
        printf("        left out, cannot be priced now: %s\n", cal->left_out);
}

static json_t *real_or_null(double x)
{
    return isnan(x) ? json_null() : json_real(x);
}

json_t *calib_json(const job *j)
{
    const job_calib *cal = j->cal;
    json_t *o = json_pack("{s:s, s:s, s:i, s:i}", "stack", j->t.stack.name, "device",
                          j->c.device.name, "runs_stored", cal ? cal->stored : 0, "runs_used",
                          cal ? cal->used : 0);
    if (!o)
        return json_null();
    const pt_calib *c = cal ? &cal->fit : NULL;
    bool applied = c && c->applied && !cal->off;
    json_object_set_new(o, "applied", json_boolean(applied));
    json_object_set_new(o, "disabled", json_boolean(cal && cal->off));
    if (!c || cal->used == 0)
        return o;
    json_object_set_new(o, "runs", json_string(cal->ids));
    json_object_set_new(o, "form", json_string(pt_calib_form_name(c->form)));
    json_object_set_new(o, "k_compute", json_real(c->k_compute));
    json_object_set_new(o, "k_comm", json_real(c->k_comm));
    json_object_set_new(o, "overhead_s", json_real(c->overhead_s));
    json_object_set_new(o, "checked", json_boolean(c->checked));
    json_object_set_new(o, "zero_shot_error", json_real(c->zero_err));
    json_object_set_new(o, "leave_one_out_error", real_or_null(c->loo_err));
    json_object_set_new(o, "why", json_string(c->why));
    if (cal->left_out[0])
        json_object_set_new(o, "left_out", json_string(cal->left_out));
    return o;
}
