/*
 * Calibration of the analytic fallbacks: the roofline's efficiency per kind of kernel
 * and the alpha-beta figures per link level are fitted to measured samples (from
 * ptprofile and from ptrun traces) by least squares, stored in the database (tables
 * kernel_fits and link_fits) and used by the lookups whenever they fall back to the
 * analytic model. This file owns the fitting, the two tables and the models that read
 * fitted figures; analytic.c keeps the built-in curves used where nothing is fitted.
 *
 * Both fits are linear in their unknowns, so each is a 2x2 weighted least-squares
 * problem solved through its normal equations (Press, Teukolsky, Vetterling and
 * Flannery, "Numerical Recipes", 3rd ed., sec. 15.4, "General Linear Least Squares").
 * The weights are 1/t², i.e. the fit minimises the squared *relative* error: times
 * span five orders of magnitude and a plain least-squares fit would only see the
 * largest samples.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names of the link levels in table link_fits (indexed what - PT_FIT_INTRA). */
static const char *const level_names[2] = {"intra", "inter"};

/* ---- Classes ------------------------------------------------------------------------ */

void pt_fit_class_of(const pt_kernel_op *op, char cls[32])
{
    const char *colon = strchr(op->key, ':');
    int n = colon ? (int)(colon - op->key) : (int)strlen(op->key);
    snprintf(cls, 32, "%.*s", n < 31 ? n : 31, op->key);
    if (strstr(cls, "gemm") || strstr(cls, "matmul"))
        snprintf(cls, 32, "gemm");
}

/* The time the kernel needs at 100% of the device: its FLOPs at peak, or without FLOPs
 * its bytes at the memory bandwidth. The fitted models are linear in it. */
static double ideal_s(const pt_cost_hw *hw, const pt_kernel_op *op)
{
    return op->flops > 0 ? op->flops / pt_cost_peak(hw, op->dtype)
                         : op->bytes / pt_cost_mem_bw(hw);
}

/* ---- Least squares -------------------------------------------------------------------- */

/* Observations t ≈ p·x + q·y, weighted by 1/t². */
typedef struct {
    double sxx, sxy, syy, sxt, syt;
    int n;
} lsq2;

static void lsq_add(lsq2 *l, double x, double y, double t)
{
    if (!(t > 0) || !isfinite(x) || !isfinite(y))
        return;
    double w = 1.0 / (t * t);
    l->sxx += w * x * x, l->sxy += w * x * y, l->syy += w * y * y;
    l->sxt += w * x * t, l->syt += w * y * t;
    l->n++;
}

/* Solves for p and q, both kept >= 0: a negative one is set to 0 and the other fitted
 * alone (a negative latency or fixed time has no physical meaning; it only appears
 * when the samples barely constrain it). False when p cannot be determined. */
static bool lsq_solve(const lsq2 *l, double *p, double *q)
{
    double det = l->sxx * l->syy - l->sxy * l->sxy;
    if (l->n < 2 || !(l->sxx > 0))
        return false;
    if (det > 1e-12 * l->sxx * l->syy) {
        *p = (l->sxt * l->syy - l->syt * l->sxy) / det;
        *q = (l->syt * l->sxx - l->sxt * l->sxy) / det;
        if (*p > 0 && *q >= 0)
            return true;
    }
    *q = 0;
    *p = l->sxt / l->sxx;
    return *p > 0;
}

/* ---- Kernel fits ------------------------------------------------------------------------ */

/* Calls f for each distinct key of `device`, with the time its repeats stand for. */
typedef void (*key_fn)(void *ctx, const pt_ksample *s, double time_s);

static void each_key(const pt_costdb *db, const char *device, key_fn f, void *ctx)
{
    for (size_t a = 0, b; db && a < db->nk; a = b) {
        const pt_ksample *s = &db->ks[db->k_by_key[a]];
        for (b = a + 1; b < db->nk &&
                        pt_ksample_cmp_key(&db->ks[db->k_by_key[b]], s, PT_KKEY_KEY) == 0;
             b++)
            ;
        if (strcmp(s->device, device) != 0)
            continue;
        f(ctx, s, pt_ksample_key_time(db, db->k_by_key, a, b));
    }
}

static pt_kernel_op op_of(const pt_ksample *s)
{
    pt_kernel_op op = {.dtype = s->dtype, .flops = s->flops, .bytes = s->bytes};
    snprintf(op.key, sizeof op.key, "%s", s->key);
    return op;
}

/* One key's observation: its class, its ideal time, its measured time and the built-in
 * curve's time. */
typedef struct {
    int cls;
    double x, t, builtin;
} kobs;

typedef struct {
    const pt_cost_hw *hw;
    pt_kernel_fits *classes;
    kobs *v;
    size_t n, cap;
    bool oom;
} kfit_ctx;

/* The index of class cls in out (added when new; -1 when the table is full). */
static int class_index(pt_kernel_fits *f, const char *cls)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->v[i].cls, cls) == 0)
            return i;
    if (f->n == PT_FIT_MAX_CLASSES)
        return -1;
    memset(&f->v[f->n], 0, sizeof f->v[f->n]);
    snprintf(f->v[f->n].cls, sizeof f->v[f->n].cls, "%s", cls);
    return f->n++;
}

static void kfit_add(void *ctx, const pt_ksample *s, double t)
{
    kfit_ctx *k = ctx;
    pt_kernel_op op = op_of(s);
    char cls[32];
    pt_fit_class_of(&op, cls);
    int c = class_index(k->classes, cls);
    double x = ideal_s(k->hw, &op);
    if (c < 0 || !(t > 0) || !isfinite(x))
        return;
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 256;
        kobs *v = realloc(k->v, cap * sizeof *v);
        if (!v) {
            k->oom = true;
            return;
        }
        k->v = v, k->cap = cap;
    }
    k->v[k->n++] = (kobs){c, x, t, pt_cost_kernel_analytic(k->hw, &op)};
}

/* Fits class c from its observations, leaving out observation `skip` (-1: none):
 * t = x / eff + fixed. A class measured at one size only gets its efficiency alone. */
static bool fit_class(const kfit_ctx *k, int c, size_t skip, double *inv_eff, double *fixed)
{
    lsq2 l = {0};
    for (size_t i = 0; i < k->n; i++)
        if (k->v[i].cls == c && i != skip)
            lsq_add(&l, k->v[i].x, 1.0, k->v[i].t);
    if (l.n >= 2)
        return lsq_solve(&l, inv_eff, fixed);
    *fixed = 0;
    *inv_eff = l.sxx > 0 ? l.sxt / l.sxx : 0;
    return *inv_eff > 0;
}

/* Collects the observations of every key of hw's device into k (classes in *classes). */
static void collect(const pt_costdb *db, const pt_cost_hw *hw, pt_kernel_fits *classes,
                    kfit_ctx *k)
{
    *k = (kfit_ctx){.hw = hw, .classes = classes};
    classes->n = 0;
    each_key(db, hw->device, kfit_add, k);
}

void pt_cost_fit_kernels(const pt_costdb *db, const pt_cost_hw *hw, pt_kernel_fits *out)
{
    pt_kernel_fits *all = calloc(1, sizeof *all);
    kfit_ctx k;
    out->n = 0;
    if (!all)
        return; /* nothing fitted: the built-in curves stay */
    collect(db, hw, all, &k);
    for (int c = 0; c < all->n && !k.oom; c++) {
        double inv_eff, fixed;
        if (!fit_class(&k, c, (size_t)-1, &inv_eff, &fixed))
            continue;
        pt_kernel_fit *f = &out->v[out->n++];
        *f = all->v[c];
        f->eff = 1.0 / inv_eff;
        f->fixed_s = fixed;
        double sq = 0, cv = 0;
        int m = 0;
        for (size_t i = 0; i < k.n; i++) {
            if (k.v[i].cls != c)
                continue;
            double e = (k.v[i].x * inv_eff + fixed - k.v[i].t) / k.v[i].t, a, b;
            sq += e * e;
            m++;
            /* leave-one-out: the key predicted by the fit of the others */
            double ecv = fit_class(&k, c, i, &a, &b) ? (k.v[i].x * a + b - k.v[i].t) / k.v[i].t
                                                     : 1.0;
            cv += ecv * ecv;
        }
        f->samples = m;
        f->rms_rel_err = sqrt(sq / m);
        f->cv_rel_err = m >= 2 ? sqrt(cv / m) : NAN;
    }
    free(k.v);
    free(all);
}

/* Why a fit with these figures is not a model to store, or NULL when it may be. */
static const char *implausible(double eff, double rms, double cv, double prev, int samples,
                               char *why, size_t cap)
{
    if (eff > 1.0)
        snprintf(why, cap, "efficiency %.0f%% is above 100%%: the samples do not measure "
                           "what the model counts", 100 * eff);
    else if (rms > PT_FIT_MAX_RMS)
        snprintf(why, cap, "rms error %.1f%% over its own samples (more than %.0f%%): not "
                           "a model of them", 100 * rms, 100 * PT_FIT_MAX_RMS);
    else if (samples < 2 || !isfinite(cv))
        snprintf(why, cap, "too few sizes (%d) to hold one out: not validated", samples);
    else if (!(cv < prev))
        snprintf(why, cap, "held-out error %.1f%% is not below %.1f%% of the model in force",
                 100 * cv, 100 * prev);
    else
        return NULL;
    return why;
}

void pt_cost_fit_judge_kernels(const pt_costdb *db, const pt_cost_hw *hw, pt_kernel_fits *fits)
{
    pt_kernel_fits *all = calloc(1, sizeof *all);
    kfit_ctx k;
    if (!all) {
        for (int c = 0; c < fits->n; c++)
            fits->v[c].accepted = false, snprintf(fits->v[c].why, 128, "out of memory");
        return;
    }
    collect(db, hw, all, &k);
    for (int f = 0; f < fits->n; f++) {
        pt_kernel_fit *x = &fits->v[f];
        double sq = 0;
        int m = 0;
        for (size_t i = 0; i < k.n; i++) {
            if (strcmp(all->v[k.v[i].cls].cls, x->cls) != 0)
                continue;
            /* the model in force: the stored fit of the class, else the built-in curve */
            double prev = k.v[i].builtin;
            for (size_t j = 0; db && j < db->nfits; j++) {
                const pt_fit_row *r = &db->fits[j];
                if (r->what == PT_FIT_KERNEL && !strcmp(r->cls, x->cls) &&
                    !strcmp(r->target, hw->device))
                    prev = k.v[i].x / r->p1 + r->p2;
            }
            double e = (prev - k.v[i].t) / k.v[i].t;
            sq += e * e;
            m++;
        }
        x->prev_rel_err = m ? sqrt(sq / m) : INFINITY;
        x->accepted = !implausible(x->eff, x->rms_rel_err, x->cv_rel_err, x->prev_rel_err,
                                   x->samples, x->why, sizeof x->why);
        if (x->accepted)
            x->why[0] = 0;
    }
    free(k.v);
    free(all);
}

/* ---- Link fits ---------------------------------------------------------------------------- */

/* The alpha-beta regressors of a flat collective over n ranks: latency steps and bytes
 * through one link, as analytic.c charges them (all-reduce as the ring; for n = 2, the
 * only size one node of this project's CI has, ring and tree coincide in steps). */
static void coll_regressors(pt_coll op, int n, double bytes, double *steps, double *volume)
{
    double f = (double)(n - 1) / n;
    switch (op) {
    case PT_COLL_ALLREDUCE:
        *steps = 2.0 * (n - 1), *volume = 2.0 * f * bytes;
        break;
    case PT_COLL_BROADCAST:
        *steps = n - 1, *volume = bytes;
        break;
    case PT_COLL_SENDRECV:
        *steps = 1, *volume = bytes;
        break;
    default: /* all-gather, reduce-scatter, all-to-all */
        *steps = n - 1, *volume = f * bytes;
        break;
    }
}

/* The level a sample measures: 0 inside one node, 1 across nodes with one rank on each,
 * -1 a mix of both (left out: two unknown levels in one time). */
static int level_of(const pt_csample *s)
{
    if (s->group < 2)
        return -1;
    if (s->ranks_per_node == s->group)
        return 0;
    return s->ranks_per_node == 1 ? 1 : -1;
}

/* Fits level lv of backend's samples, leaving out sample `skip` (-1: none). */
static bool fit_level(const pt_costdb *db, const char *backend, int lv, size_t skip,
                      double *inv_bw, double *alpha, int *n)
{
    lsq2 l = {0};
    for (size_t i = 0; db && i < db->nc; i++) {
        const pt_csample *s = &db->cs[i];
        double steps, volume;
        if (i == skip || level_of(s) != lv || strcmp(s->backend, backend) != 0)
            continue;
        coll_regressors(s->op, s->group, s->bytes, &steps, &volume);
        lsq_add(&l, volume, steps, s->time_s);
    }
    *n = l.n;
    return lsq_solve(&l, inv_bw, alpha);
}

void pt_cost_fit_links(const pt_costdb *db, const char *backend, pt_link_fit *intra,
                       pt_link_fit *inter)
{
    pt_link_fit *out[2] = {intra, inter};
    *intra = *inter = (pt_link_fit){0};
    for (int lv = 0; lv < 2; lv++) {
        double inv_bw, alpha;
        int n;
        if (!fit_level(db, backend, lv, (size_t)-1, &inv_bw, &alpha, &n))
            continue;
        *out[lv] = (pt_link_fit){.ok = true, .alpha_s = alpha, .bw_Bps = 1.0 / inv_bw,
                                 .samples = n};
        double sq = 0, cv = 0;
        for (size_t i = 0; i < db->nc; i++) {
            const pt_csample *s = &db->cs[i];
            double steps, volume, a, b;
            int m;
            if (level_of(s) != lv || strcmp(s->backend, backend) != 0)
                continue;
            coll_regressors(s->op, s->group, s->bytes, &steps, &volume);
            double e = (alpha * steps + volume * inv_bw - s->time_s) / s->time_s;
            double ecv = fit_level(db, backend, lv, i, &b, &a, &m)
                             ? (a * steps + volume * b - s->time_s) / s->time_s
                             : 1.0;
            sq += e * e;
            cv += ecv * ecv;
        }
        out[lv]->rms_rel_err = sqrt(sq / n);
        out[lv]->cv_rel_err = n >= 3 ? sqrt(cv / n) : NAN;
    }
}

void pt_cost_fit_judge_links(const pt_costdb *db, const pt_cost_hw *hw, pt_link_fit *intra,
                             pt_link_fit *inter)
{
    pt_link_fit *lv[2] = {intra, inter}, in_force[2];
    pt_costdb_link_fits(db, hw->backend, &in_force[0], &in_force[1]);
    for (int l = 0; l < 2; l++) {
        pt_link_fit *x = lv[l];
        if (!x->ok)
            continue;
        double sq = 0;
        int m = 0;
        for (size_t i = 0; db && i < db->nc; i++) {
            const pt_csample *s = &db->cs[i];
            if (level_of(s) != l || strcmp(s->backend, hw->backend) != 0)
                continue;
            pt_coll_op op = {s->op, s->bytes, s->group, s->ranks_per_node};
            double prev = pt_cost_coll_fitted(hw, &op, &in_force[0], &in_force[1]);
            double e = (prev - s->time_s) / s->time_s;
            sq += e * e;
            m++;
        }
        x->prev_rel_err = m ? sqrt(sq / m) : INFINITY;
        /* a link has no efficiency: 1 passes the first rule */
        x->accepted = !implausible(1.0, x->rms_rel_err, x->cv_rel_err, x->prev_rel_err,
                                   x->samples >= 3 ? x->samples : 1, x->why, sizeof x->why);
        if (x->accepted)
            x->why[0] = 0;
    }
}

/* ---- Fitted models -------------------------------------------------------------------------- */

double pt_cost_kernel_fitted(const pt_cost_hw *hw, const pt_kernel_op *op,
                             const pt_kernel_fits *fits)
{
    char cls[32];
    pt_fit_class_of(op, cls);
    for (int c = 0; fits && c < fits->n; c++)
        if (strcmp(fits->v[c].cls, cls) == 0)
            return ideal_s(hw, op) / fits->v[c].eff + fits->v[c].fixed_s;
    return pt_cost_kernel_analytic(hw, op);
}

double pt_cost_kernel_stored_fit(const pt_costdb *db, const pt_cost_hw *hw,
                                 const pt_kernel_op *op)
{
    char cls[32];
    pt_fit_class_of(op, cls);
    for (size_t i = 0; i < db->nfits; i++) {
        const pt_fit_row *r = &db->fits[i];
        if (r->what == PT_FIT_KERNEL && !strcmp(r->cls, cls) && !strcmp(r->target, hw->device))
            return ideal_s(hw, op) / r->p1 + r->p2;
    }
    return pt_cost_kernel_analytic(hw, op);
}

double pt_cost_coll_fitted(const pt_cost_hw *hw, const pt_coll_op *op,
                           const pt_link_fit *intra, const pt_link_fit *inter)
{
    pt_cost_hw h = *hw;
    if (intra && intra->ok)
        h.intra_latency_s = intra->alpha_s, h.intra_bw_Bps = intra->bw_Bps;
    if (inter && inter->ok)
        h.inter_latency_s = inter->alpha_s, h.inter_bw_Bps = inter->bw_Bps;
    return pt_cost_coll_analytic(&h, op);
}

/* ---- Storage -------------------------------------------------------------------------------- */

static bool same_fit(const pt_fit_row *a, const pt_fit_row *b)
{
    return a->what == b->what && !strcmp(a->target, b->target) &&
           (a->what != PT_FIT_KERNEL || !strcmp(a->cls, b->cls));
}

static int keep_fit(pt_costdb *db, const pt_fit_row *row)
{
    for (size_t i = 0; i < db->nfits; i++)
        if (same_fit(&db->fits[i], row)) {
            db->fits[i] = *row;
            return 0;
        }
    pt_fit_row *v = realloc(db->fits, (db->nfits + 1) * sizeof *v);
    if (!v)
        return -1;
    db->fits = v;
    db->fits[db->nfits++] = *row;
    return 0;
}

static int load_table(pt_costdb *db, const char *sql, bool links, pt_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return pt_costdb_sql_fail(db, err, "damaged cost database");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        pt_fit_row row = {.what = links ? -1 : PT_FIT_KERNEL};
        const char *target = (const char *)sqlite3_column_text(st, 0);
        const char *what = (const char *)sqlite3_column_text(st, 1);
        for (int w = 0; links && w < 2 && what; w++)
            if (strcmp(level_names[w], what) == 0)
                row.what = PT_FIT_INTRA + w;
        snprintf(row.target, sizeof row.target, "%s", target ? target : "");
        snprintf(row.cls, sizeof row.cls, "%s", what && !links ? what : "");
        row.p1 = sqlite3_column_double(st, 2);
        row.p2 = sqlite3_column_double(st, 3);
        row.samples = sqlite3_column_int(st, 4);
        row.rms_rel_err = sqlite3_column_double(st, 5);
        if (row.what < 0 || !target || !target[0] || !what || !what[0]) {
            /* the message first: the row's text lives only until the statement ends */
            pt_err_set(err, "%s: damaged cost database: a fit of '%s' names no target "
                            "or an unknown level", pt_costdb_where(db), what ? what : "");
            sqlite3_finalize(st);
            return -1;
        }
        if (keep_fit(db, &row)) {
            sqlite3_finalize(st);
            return pt_err_set(err, "%s: out of memory for fits", pt_costdb_where(db));
        }
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : pt_costdb_sql_fail(db, err, "damaged cost database");
}

int pt_costdb_load_fits(pt_costdb *db, pt_err *err)
{
    db->nfits = 0;
    if (!db->sql)
        return 0;
    /* in the order stored: the newest fit of a class or level is the one in force */
    return load_table(db, "SELECT device, class, eff, fixed_s, samples, rms_rel_err"
                          " FROM kernel_fits ORDER BY rowid", false, err) ||
                   load_table(db, "SELECT backend, level, alpha_s, bw_Bps, samples, rms_rel_err"
                                  " FROM link_fits ORDER BY rowid", true, err)
               ? -1
               : 0;
}

static int store_row(pt_costdb *db, const pt_fit_row *row, int64_t run_id, double cv,
                     pt_err *err)
{
    char now[32];
    pt_costdb_iso_now(now);
    bool kernel = row->what == PT_FIT_KERNEL;
    const char *sql = kernel ? "INSERT OR REPLACE INTO kernel_fits(device, class, run_id, eff,"
                               " fixed_s, samples, rms_rel_err, cv_rel_err, created_at)"
                               " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)"
                             : "INSERT OR REPLACE INTO link_fits(backend, level, run_id,"
                               " alpha_s, bw_Bps, samples, rms_rel_err, cv_rel_err, created_at)"
                               " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)";
    if (db->sql && pt_costdb_insert_row(db, sql, "ttiddiddt", err, "cannot store fits",
                                        row->target,
                                        kernel ? row->cls : level_names[row->what - PT_FIT_INTRA],
                                        run_id, row->p1, row->p2, (int64_t)row->samples,
                                        row->rms_rel_err, isfinite(cv) ? cv : 0.0, now))
        return -1;
    return keep_fit(db, row) ? pt_err_set(err, "out of memory for fits") : 0;
}

static int check_target(const pt_costdb *db, const char *target, size_t cap, pt_err *err)
{
    if (!db)
        return pt_err_set(err, "no cost table to store fits in");
    if (!target || !target[0] || strlen(target) >= cap)
        return pt_err_set(err, "%s: fits need a device or backend name of 1 to %zu characters",
                          pt_costdb_where(db), cap - 1);
    return 0;
}

/* Stores rows (cv[i] their held-out errors) as run_id's fits, in one transaction. */
static int store_fits(pt_costdb *db, const pt_fit_row *rows, const double *cv, int n,
                      int64_t run_id, pt_err *err)
{
    if (pt_costdb_begin(db, err))
        return -1;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = store_row(db, &rows[i], run_id, cv[i], err);
    if (rc == 0)
        return pt_costdb_commit(db, err);
    pt_costdb_rollback(db, NULL);
    return -1;
}

int pt_costdb_put_kernel_fits(pt_costdb *db, const char *device, int64_t run_id,
                              const pt_kernel_fits *fits, pt_err *err)
{
    pt_fit_row rows[PT_FIT_MAX_CLASSES];
    double cv[PT_FIT_MAX_CLASSES];
    int n = 0;
    if (check_target(db, device, sizeof rows[0].target, err))
        return -1;
    if (fits->n < 0 || fits->n > PT_FIT_MAX_CLASSES)
        return pt_err_set(err, "%s: %d kernel fits (at most %d)", pt_costdb_where(db), fits->n,
                          PT_FIT_MAX_CLASSES);
    for (int c = 0; c < fits->n; c++) {
        const pt_kernel_fit *f = &fits->v[c];
        if (!f->accepted)
            continue;
        if (!f->cls[0] || !(isfinite(f->eff) && f->eff > 0 && isfinite(f->fixed_s) &&
                            f->fixed_s >= 0))
            return pt_err_set(err, "%s: fit of class '%s' of %s: efficiency %g and fixed time %g "
                                   "must be finite and positive", pt_costdb_where(db), f->cls,
                              device, f->eff, f->fixed_s);
        rows[n] = (pt_fit_row){.what = PT_FIT_KERNEL, .p1 = f->eff, .p2 = f->fixed_s,
                               .samples = f->samples, .rms_rel_err = f->rms_rel_err};
        cv[n] = f->cv_rel_err;
        snprintf(rows[n].target, sizeof rows[n].target, "%s", device);
        snprintf(rows[n++].cls, sizeof rows[0].cls, "%s", f->cls);
    }
    return store_fits(db, rows, cv, n, run_id, err);
}

int pt_costdb_put_link_fits(pt_costdb *db, const char *backend, int64_t run_id,
                            const pt_link_fit *intra, const pt_link_fit *inter, pt_err *err)
{
    const pt_link_fit *lv[2] = {intra, inter};
    pt_fit_row rows[2];
    double cv[2];
    int n = 0;
    if (check_target(db, backend, sizeof rows[0].target, err))
        return -1;
    for (int i = 0; i < 2; i++) {
        if (!lv[i] || !lv[i]->ok || !lv[i]->accepted)
            continue;
        if (!(isfinite(lv[i]->alpha_s) && lv[i]->alpha_s >= 0 && isfinite(lv[i]->bw_Bps) &&
              lv[i]->bw_Bps > 0))
            return pt_err_set(err, "%s: %s-node link fit of %s: latency %g and bandwidth %g "
                                   "must be finite and positive", pt_costdb_where(db),
                              level_names[i], backend, lv[i]->alpha_s, lv[i]->bw_Bps);
        rows[n] = (pt_fit_row){.what = PT_FIT_INTRA + i, .p1 = lv[i]->alpha_s,
                               .p2 = lv[i]->bw_Bps, .samples = lv[i]->samples,
                               .rms_rel_err = lv[i]->rms_rel_err};
        cv[n] = lv[i]->cv_rel_err;
        snprintf(rows[n++].target, sizeof rows[0].target, "%s", backend);
    }
    return store_fits(db, rows, cv, n, run_id, err);
}

void pt_costdb_kernel_fits(const pt_costdb *db, const char *device, pt_kernel_fits *out)
{
    out->n = 0;
    for (size_t i = 0; db && i < db->nfits && out->n < PT_FIT_MAX_CLASSES; i++) {
        const pt_fit_row *r = &db->fits[i];
        if (r->what != PT_FIT_KERNEL || strcmp(r->target, device) != 0)
            continue;
        pt_kernel_fit *f = &out->v[out->n++];
        *f = (pt_kernel_fit){.eff = r->p1, .fixed_s = r->p2, .samples = r->samples,
                             .rms_rel_err = r->rms_rel_err, .accepted = true};
        snprintf(f->cls, sizeof f->cls, "%s", r->cls);
    }
}

void pt_costdb_link_fits(const pt_costdb *db, const char *backend, pt_link_fit *intra,
                         pt_link_fit *inter)
{
    *intra = *inter = (pt_link_fit){0};
    for (size_t i = 0; db && i < db->nfits; i++) {
        const pt_fit_row *r = &db->fits[i];
        if (r->what == PT_FIT_KERNEL || strcmp(r->target, backend) != 0)
            continue;
        *(r->what == PT_FIT_INTRA ? intra : inter) =
            (pt_link_fit){.ok = true, .alpha_s = r->p1, .bw_Bps = r->p2, .samples = r->samples,
                          .rms_rel_err = r->rms_rel_err, .accepted = true};
    }
}
