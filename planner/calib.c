/*
 * The correction learned from measured runs of one software stack on one device: what
 * the zero-shot model gets wrong about a framework that the cost tables cannot see (the
 * efficiency its kernels sustain in training, how much of its communication is really
 * hidden, a fixed time per step for the Python around the kernels), as a few physical
 * parameters fitted over every stored run at once — never one parameter per run:
 *
 *     corrected step = k_compute·compute + k_comm·exposed communication + fixed + overhead
 *
 * where compute, exposed communication and the stack's fixed time are the simulator's
 * breakdown of the zero-shot step (pt_sim_result.breakdown_s). The forms are nested
 * (none; k_compute; k_compute + overhead; k_compute + k_comm + overhead) and each is
 * fitted by least squares in relative error, a linear problem solved by its normal
 * equations. Which form, and whether any, is decided on held-out runs as ptcalib's
 * kernel fits are (costmodels/fit.c): each run is predicted by the form fitted to the
 * others alone (leave-one-out), the form with the least mean error is chosen, and it
 * is applied only when that error is below the zero-shot error of the same runs. A
 * form needs one run more than it has parameters, so that every run can be held out.
 */
#include "calib.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *pt_calib_form_name(pt_calib_form f)
{
    static const char *const names[PT_CALIB_FORM_COUNT] = {"none", "compute",
                                                           "compute+overhead", "full"};
    return (unsigned)f < PT_CALIB_FORM_COUNT ? names[f] : "?";
}

void pt_calib_point_of(const pt_sim_result *r, double measured_s, pt_calib_point *out)
{
    const double *bd = r->breakdown_s;
    double comm = bd[PT_BD_TP] + bd[PT_BD_CP] + bd[PT_BD_EP] + bd[PT_BD_DP] + bd[PT_BD_P2P];
    double fixed = bd[PT_BD_OVERHEAD];
    *out = (pt_calib_point){.compute_s = fmax(0, r->step_time_s - comm - fixed),
                            .comm_s = comm, .fixed_s = fixed, .measured_s = measured_s};
}

/* ---- One form: its design row, its parameters ------------------------------------ */

enum { MAXP = 3 };

/* The form's free columns of run q into x (returns how many) and the part of the step
 * it leaves as priced into *rest. */
static int design(pt_calib_form f, const pt_calib_point *q, double x[MAXP], double *rest)
{
    switch (f) {
    case PT_CALIB_COMPUTE:
        x[0] = q->compute_s;
        *rest = q->comm_s + q->fixed_s;
        return 1;
    case PT_CALIB_COMPUTE_OVERHEAD:
        x[0] = q->compute_s;
        x[1] = 1;
        *rest = q->comm_s + q->fixed_s;
        return 2;
    case PT_CALIB_FULL:
        x[0] = q->compute_s;
        x[1] = q->comm_s;
        x[2] = 1;
        *rest = q->fixed_s;
        return 3;
    case PT_CALIB_NONE:
    case PT_CALIB_FORM_COUNT:
        break;
    }
    *rest = q->compute_s + q->comm_s + q->fixed_s;
    return 0;
}

static int params_of(pt_calib_form f)
{
    double x[MAXP], rest;
    return design(f, &(pt_calib_point){0}, x, &rest);
}

/* The correction theta of form f as (k_compute, k_comm, overhead_s). */
static void unpack(pt_calib_form f, const double *theta, pt_calib *c)
{
    c->form = f;
    c->k_compute = f == PT_CALIB_NONE ? 1 : theta[0];
    c->k_comm = f == PT_CALIB_FULL ? theta[1] : 1;
    c->overhead_s = f == PT_CALIB_COMPUTE_OVERHEAD ? theta[1]
                  : f == PT_CALIB_FULL ? theta[2] : 0;
}

double pt_calib_step(const pt_calib *c, const pt_calib_point *p)
{
    return c->k_compute * p->compute_s + c->k_comm * p->comm_s + p->fixed_s + c->overhead_s;
}

/* Solves the p x p system a·theta = b by Gaussian elimination with partial pivoting;
 * -1 when it is singular (a column the runs do not tell apart: no communication
 * exposed in any run, say, makes k_comm unidentifiable). */
static int solve(int p, double a[MAXP][MAXP], double b[MAXP], double theta[MAXP])
{
    double scale = 0;
    for (int i = 0; i < p; i++)
        scale = fmax(scale, fabs(a[i][i]));
    for (int c = 0; c < p; c++) {
        int piv = c;
        for (int r = c + 1; r < p; r++)
            if (fabs(a[r][c]) > fabs(a[piv][c]))
                piv = r;
        if (!(fabs(a[piv][c]) > 1e-12 * scale))
            return -1;
        for (int k = 0; k < p; k++) {
            double t = a[c][k];
            a[c][k] = a[piv][k];
            a[piv][k] = t;
        }
        double t = b[c];
        b[c] = b[piv];
        b[piv] = t;
        for (int r = c + 1; r < p; r++) {
            double m = a[r][c] / a[c][c];
            for (int k = c; k < p; k++)
                a[r][k] -= m * a[c][k];
            b[r] -= m * b[c];
        }
    }
    for (int c = p - 1; c >= 0; c--) {
        double s = b[c];
        for (int k = c + 1; k < p; k++)
            s -= a[c][k] * theta[k];
        theta[c] = s / a[c][c];
    }
    return 0;
}

/* Whether a fitted correction is physically plausible (PT_CALIB_K_MIN ...): why not
 * into why. The overhead must also stay below the shortest step it was fitted to. */
static bool plausible(const pt_calib *c, double shortest_s, char *why, size_t n)
{
    if (!(c->k_compute >= PT_CALIB_K_MIN && c->k_compute <= PT_CALIB_K_MAX))
        snprintf(why, n, "a compute scale of %.3g is outside %.2g..%.2g", c->k_compute,
                 PT_CALIB_K_MIN, PT_CALIB_K_MAX);
    else if (!(c->k_comm >= 0 && c->k_comm <= PT_CALIB_KCOMM_MAX))
        snprintf(why, n, "a communication scale of %.3g is outside 0..%.2g", c->k_comm,
                 PT_CALIB_KCOMM_MAX);
    else if (!(c->overhead_s >= 0 && c->overhead_s < shortest_s))
        snprintf(why, n, "an overhead of %.3g s is negative or longer than a step",
                 c->overhead_s);
    else
        return true;
    return false;
}

/* Fits form f (not NONE) to v[0..n) except run `skip` (-1: none) by least squares in
 * relative error: minimises sum_i ((pred_i - y_i) / y_i)^2, pred_i linear in theta.
 * -1 (why filled) when the runs do not determine it or the fit is implausible. */
static int fit_form(pt_calib_form f, const pt_calib_point *v, int n, int skip, pt_calib *c,
                    char *why, size_t wn)
{
    int p = params_of(f), used = 0;
    double a[MAXP][MAXP] = {{0}}, b[MAXP] = {0}, theta[MAXP] = {0}, shortest = INFINITY;
    for (int i = 0; i < n; i++) {
        if (i == skip)
            continue;
        double x[MAXP], rest, y = v[i].measured_s;
        design(f, &v[i], x, &rest);
        for (int r = 0; r < p; r++) {
            for (int k = 0; k < p; k++)
                a[r][k] += x[r] * x[k] / (y * y);
            b[r] += x[r] / y * (1 - rest / y);
        }
        shortest = fmin(shortest, y);
        used++;
    }
    if (used < p || solve(p, a, b, theta)) {
        snprintf(why, wn, "the runs do not determine the %s form", pt_calib_form_name(f));
        return -1;
    }
    unpack(f, theta, c);
    return plausible(c, shortest, why, wn) ? 0 : -1;
}

/* ---- Choosing the form on held-out runs ------------------------------------------- */

/* Mean |corrected/measured - 1| of form f, each run predicted by the fit of the others;
 * NaN (why filled) when some held-out fit cannot be made. */
static double loo_error(pt_calib_form f, const pt_calib_point *v, int n, char *why, size_t wn)
{
    double sum = 0;
    for (int i = 0; i < n; i++) {
        pt_calib c;
        if (fit_form(f, v, n, i, &c, why, wn))
            return NAN;
        sum += fabs(pt_calib_step(&c, &v[i]) / v[i].measured_s - 1);
    }
    return sum / n;
}

/* Takes the parameters of fit c into out. */
static void take(pt_calib *out, const pt_calib *c)
{
    out->form = c->form;
    out->k_compute = c->k_compute;
    out->k_comm = c->k_comm;
    out->overhead_s = c->overhead_s;
    out->applied = c->form != PT_CALIB_NONE;
}

/* One run: the compute scale that makes it exact, applied unchecked. */
static void fit_one(const pt_calib_point *v, pt_calib *out)
{
    char why[160];
    pt_calib c = {0};
    if (fit_form(PT_CALIB_COMPUTE, v, 1, -1, &c, why, sizeof why)) {
        snprintf(out->why, sizeof out->why, "from one run: %s", why);
        return;
    }
    take(out, &c);
    snprintf(out->why, sizeof out->why, "one run: its compute scale, not checked on a "
             "held-out run");
}

void pt_calib_fit(const pt_calib_point *v, int n, pt_calib *out)
{
    *out = (pt_calib){.form = PT_CALIB_NONE, .k_compute = 1, .k_comm = 1, .runs = n,
                      .loo_err = NAN};
    for (int f = 0; f < PT_CALIB_FORM_COUNT; f++)
        out->loo_by_form[f] = NAN;
    for (int i = 0; i < n; i++)
        out->zero_err += fabs(pt_calib_step(out, &v[i]) / v[i].measured_s - 1) / n;
    if (n == 0) {
        snprintf(out->why, sizeof out->why, "no runs");
        return;
    }
    if (n == 1) {
        fit_one(v, out);
        return;
    }
    out->checked = true;
    out->loo_by_form[PT_CALIB_NONE] = out->zero_err;
    pt_calib_form best = PT_CALIB_NONE;
    double best_err = out->zero_err;
    char left_out[sizeof out->why] = "";
    for (int f = PT_CALIB_COMPUTE; f < PT_CALIB_FORM_COUNT; f++) {
        if (params_of((pt_calib_form)f) > n - 1)
            break; /* every run must be predictable from the others */
        char why[160];
        pt_calib all = {0};
        double e = loo_error((pt_calib_form)f, v, n, why, sizeof why);
        if (isnan(e) || fit_form((pt_calib_form)f, v, n, -1, &all, why, sizeof why)) {
            if (!left_out[0])
                snprintf(left_out, sizeof left_out, "the %s form was left out: %s",
                         pt_calib_form_name((pt_calib_form)f), why);
            continue;
        }
        out->loo_by_form[f] = e;
        if (e < best_err - PT_CALIB_MIN_GAIN) {
            best = (pt_calib_form)f;
            best_err = e;
        }
    }
    if (best == PT_CALIB_NONE) {
        snprintf(out->why, sizeof out->why, "no correction predicts held-out runs better "
                 "than none%s%s", left_out[0] ? "; " : "", left_out);
        return;
    }
    pt_calib c = {0};
    char why[160];
    fit_form(best, v, n, -1, &c, why, sizeof why); /* succeeded above */
    take(out, &c);
    out->loo_err = best_err;
    snprintf(out->why, sizeof out->why, "%s", left_out);
}

/* ---- Applying it ----------------------------------------------------------------------- */

void pt_calib_apply(const pt_calib *c, pt_sim_result *r)
{
    if (!c || !c->applied || !(r->step_time_s > 0))
        return;
    static const pt_bd compute[] = {PT_BD_GEMM, PT_BD_ATTN, PT_BD_OTHER, PT_BD_OPTIM,
                                    PT_BD_BUBBLE};
    static const pt_bd comm[] = {PT_BD_TP, PT_BD_CP, PT_BD_EP, PT_BD_DP, PT_BD_P2P};
    pt_calib_point p;
    pt_calib_point_of(r, 0, &p);
    double old = r->step_time_s, step = pt_calib_step(c, &p);
    if (!(step > 0))
        return;
    for (size_t i = 0; i < sizeof compute / sizeof compute[0]; i++)
        r->breakdown_s[compute[i]] *= c->k_compute;
    for (size_t i = 0; i < sizeof comm / sizeof comm[0]; i++) {
        r->breakdown_s[comm[i]] *= c->k_comm;
        r->hidden_s[comm[i]] *= c->k_comm;
    }
    r->breakdown_s[PT_BD_OVERHEAD] += c->overhead_s;
    int stages = r->pp < 64 ? r->pp : 64;
    for (int s = 0; s < stages; s++)
        r->stage_busy_s[s] *= c->k_compute;
    double speedup = old / step;
    r->step_time_s = step;
    r->tokens_per_s *= speedup;
    r->mfu *= speedup;
    r->hfu *= speedup;
    r->exposed_comm_fraction = c->k_comm * p.comm_s / step;
}

void pt_calib_text(const pt_calib *c, char *buf, size_t n)
{
    switch (c->applied ? c->form : PT_CALIB_NONE) {
    case PT_CALIB_COMPUTE:
        snprintf(buf, n, "compute x%.3g", c->k_compute);
        break;
    case PT_CALIB_COMPUTE_OVERHEAD:
        snprintf(buf, n, "compute x%.3g, overhead %.3g s", c->k_compute, c->overhead_s);
        break;
    case PT_CALIB_FULL:
        snprintf(buf, n, "compute x%.3g, exposed communication x%.3g, overhead %.3g s",
                 c->k_compute, c->k_comm, c->overhead_s);
        break;
    case PT_CALIB_NONE:
    case PT_CALIB_FORM_COUNT:
        snprintf(buf, n, "none");
        break;
    }
}
