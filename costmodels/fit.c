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

/* Calls f for each distinct key of `device`, with the median of its repeats. */
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
        size_t n = b - a, m = a + n / 2; /* the run is in time order */
        double t = n % 2 ? db->ks[db->k_by_key[m]].time_s
                         : 0.5 * (db->ks[db->k_by_key[m - 1]].time_s +
                                  db->ks[db->k_by_key[m]].time_s);
        f(ctx, s, t);
    }
}

static pt_kernel_op op_of(const pt_ksample *s)
{
    pt_kernel_op op = {.dtype = s->dtype, .flops = s->flops, .bytes = s->bytes};
    snprintf(op.key, sizeof op.key, "%s", s->key);
    return op;
}

typedef struct {
    const pt_cost_hw *hw;
    lsq2 l[PT_FIT_MAX_CLASSES];
    double sq[PT_FIT_MAX_CLASSES];
    pt_kernel_fits *out;
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
    int c = class_index(k->out, cls);
    if (c >= 0)
        lsq_add(&k->l[c], ideal_s(k->hw, &op), 1.0, t);
}

static void kfit_err(void *ctx, const pt_ksample *s, double t)
{
    kfit_ctx *k = ctx;
    pt_kernel_op op = op_of(s);
    char cls[32];
    pt_fit_class_of(&op, cls);
    for (int c = 0; c < k->out->n; c++)
        if (strcmp(k->out->v[c].cls, cls) == 0) {
            double e = (pt_cost_kernel_fitted(k->hw, &op, k->out) - t) / t;
            k->sq[c] += e * e;
        }
}

void pt_cost_fit_kernels(const pt_costdb *db, const pt_cost_hw *hw, pt_kernel_fits *out)
{
    kfit_ctx *k = calloc(1, sizeof *k);
    pt_kernel_fits all = {0};
    out->n = 0;
    if (!k)
        return; /* nothing fitted: the built-in curves stay */
    k->hw = hw;
    k->out = &all;
    each_key(db, hw->device, kfit_add, k);
    for (int c = 0; c < all.n; c++) {
        double inv_eff, fixed;
        lsq2 *l = &k->l[c];
        /* one size only: the efficiency alone (a line through the origin) */
        bool ok = l->n >= 2 ? lsq_solve(l, &inv_eff, &fixed)
                            : (fixed = 0, inv_eff = l->sxx > 0 ? l->sxt / l->sxx : 0) > 0;
        if (!ok)
            continue;
        pt_kernel_fit *f = &out->v[out->n++];
        *f = all.v[c];
        f->eff = 1.0 / inv_eff;
        f->fixed_s = fixed;
        f->samples = l->n;
    }
    k->out = out;
    memset(k->sq, 0, sizeof k->sq);
    each_key(db, hw->device, kfit_err, k);
    for (int c = 0; c < out->n; c++)
        out->v[c].rms_rel_err = sqrt(k->sq[c] / out->v[c].samples);
    free(k);
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

void pt_cost_fit_links(const pt_costdb *db, const char *backend, pt_link_fit *intra,
                       pt_link_fit *inter)
{
    lsq2 l[2];
    memset(l, 0, sizeof l);
    pt_link_fit *out[2] = {intra, inter};
    *intra = *inter = (pt_link_fit){0};
    for (size_t i = 0; db && i < db->nc; i++) {
        const pt_csample *s = &db->cs[i];
        int lv = level_of(s);
        double steps, volume;
        if (lv < 0 || strcmp(s->backend, backend) != 0)
            continue;
        coll_regressors(s->op, s->group, s->bytes, &steps, &volume);
        lsq_add(&l[lv], volume, steps, s->time_s);
    }
    for (int lv = 0; lv < 2; lv++) {
        double inv_bw, alpha;
        if (!lsq_solve(&l[lv], &inv_bw, &alpha))
            continue;
        *out[lv] = (pt_link_fit){.ok = true, .alpha_s = alpha, .bw_Bps = 1.0 / inv_bw,
                                 .samples = l[lv].n};
    }
    double sq[2] = {0, 0};
    for (size_t i = 0; db && i < db->nc; i++) {
        const pt_csample *s = &db->cs[i];
        int lv = level_of(s);
        double steps, volume;
        if (lv < 0 || strcmp(s->backend, backend) != 0 || !out[lv]->ok)
            continue;
        coll_regressors(s->op, s->group, s->bytes, &steps, &volume);
        double e = (out[lv]->alpha_s * steps + volume / out[lv]->bw_Bps - s->time_s) / s->time_s;
        sq[lv] += e * e;
    }
    for (int lv = 0; lv < 2; lv++)
        if (out[lv]->ok)
            out[lv]->rms_rel_err = sqrt(sq[lv] / out[lv]->samples);
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

/* Forgets the fits of `target` of the kinds in `what` (a kernel, or both link levels). */
static void drop_fits(pt_costdb *db, const char *target, bool links)
{
    size_t k = 0;
    for (size_t i = 0; i < db->nfits; i++)
        if (!((db->fits[i].what != PT_FIT_KERNEL) == links &&
              strcmp(db->fits[i].target, target) == 0))
            db->fits[k++] = db->fits[i];
    db->nfits = k;
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
            sqlite3_finalize(st);
            return pt_err_set(err, "%s: damaged cost database: a fit of '%s' names no target "
                                   "or an unknown level", pt_costdb_where(db), what ? what : "");
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
    return load_table(db, "SELECT device, class, eff, fixed_s, samples, rms_rel_err"
                          " FROM kernel_fits ORDER BY device, class", false, err) ||
                   load_table(db, "SELECT backend, level, alpha_s, bw_Bps, samples, rms_rel_err"
                                  " FROM link_fits ORDER BY backend, level", true, err)
               ? -1
               : 0;
}

static int exec_bound(pt_costdb *db, const char *sql, const char *arg, pt_err *err)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db->sql, sql, -1, &st, NULL) != SQLITE_OK)
        return pt_costdb_sql_fail(db, err, "cannot store fits");
    sqlite3_bind_text(st, 1, arg, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : pt_costdb_sql_fail(db, err, "cannot store fits");
}

static int store_row(pt_costdb *db, const pt_fit_row *row, pt_err *err)
{
    char now[32];
    pt_costdb_iso_now(now);
    bool kernel = row->what == PT_FIT_KERNEL;
    const char *sql = kernel ? "INSERT INTO kernel_fits(device, class, eff, fixed_s, samples,"
                               " rms_rel_err, created_at) VALUES(?, ?, ?, ?, ?, ?, ?)"
                             : "INSERT INTO link_fits(backend, level, alpha_s, bw_Bps, samples,"
                               " rms_rel_err, created_at) VALUES(?, ?, ?, ?, ?, ?, ?)";
    if (db->sql && pt_costdb_insert_row(db, sql, "ttddidt", err, "cannot store fits",
                                        row->target,
                                        kernel ? row->cls : level_names[row->what - PT_FIT_INTRA],
                                        row->p1, row->p2, (int64_t)row->samples,
                                        row->rms_rel_err, now))
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

/* Replaces every fit of `target` (its kernel classes, or its link levels) by rows. */
static int replace_fits(pt_costdb *db, const char *target, bool links, const pt_fit_row *rows,
                        int n, pt_err *err)
{
    if (pt_costdb_begin(db, err))
        return -1;
    int rc = !db->sql ? 0
             : links  ? exec_bound(db, "DELETE FROM link_fits WHERE backend = ?", target, err)
                      : exec_bound(db, "DELETE FROM kernel_fits WHERE device = ?", target, err);
    drop_fits(db, target, links);
    for (int i = 0; i < n && rc == 0; i++)
        rc = store_row(db, &rows[i], err);
    if (rc == 0)
        return pt_costdb_commit(db, err);
    if (db->sql)
        sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
    return -1;
}

int pt_costdb_put_kernel_fits(pt_costdb *db, const char *device, const pt_kernel_fits *fits,
                              pt_err *err)
{
    pt_fit_row rows[PT_FIT_MAX_CLASSES];
    if (check_target(db, device, sizeof rows[0].target, err))
        return -1;
    if (fits->n < 0 || fits->n > PT_FIT_MAX_CLASSES)
        return pt_err_set(err, "%s: %d kernel fits (at most %d)", pt_costdb_where(db), fits->n,
                          PT_FIT_MAX_CLASSES);
    for (int c = 0; c < fits->n; c++) {
        const pt_kernel_fit *f = &fits->v[c];
        if (!f->cls[0] || !(isfinite(f->eff) && f->eff > 0 && isfinite(f->fixed_s) &&
                            f->fixed_s >= 0))
            return pt_err_set(err, "%s: fit of class '%s' of %s: efficiency %g and fixed time %g "
                                   "must be finite and positive", pt_costdb_where(db), f->cls,
                              device, f->eff, f->fixed_s);
        rows[c] = (pt_fit_row){.what = PT_FIT_KERNEL, .p1 = f->eff, .p2 = f->fixed_s,
                               .samples = f->samples, .rms_rel_err = f->rms_rel_err};
        snprintf(rows[c].target, sizeof rows[c].target, "%s", device);
        snprintf(rows[c].cls, sizeof rows[c].cls, "%s", f->cls);
    }
    return replace_fits(db, device, false, rows, fits->n, err);
}

int pt_costdb_put_link_fits(pt_costdb *db, const char *backend, const pt_link_fit *intra,
                            const pt_link_fit *inter, pt_err *err)
{
    const pt_link_fit *lv[2] = {intra, inter};
    pt_fit_row rows[2];
    int n = 0;
    if (check_target(db, backend, sizeof rows[0].target, err))
        return -1;
    for (int i = 0; i < 2; i++) {
        if (!lv[i] || !lv[i]->ok)
            continue;
        if (!(isfinite(lv[i]->alpha_s) && lv[i]->alpha_s >= 0 && isfinite(lv[i]->bw_Bps) &&
              lv[i]->bw_Bps > 0))
            return pt_err_set(err, "%s: %s-node link fit of %s: latency %g and bandwidth %g "
                                   "must be finite and positive", pt_costdb_where(db),
                              level_names[i], backend, lv[i]->alpha_s, lv[i]->bw_Bps);
        rows[n] = (pt_fit_row){.what = PT_FIT_INTRA + i, .p1 = lv[i]->alpha_s,
                               .p2 = lv[i]->bw_Bps, .samples = lv[i]->samples,
                               .rms_rel_err = lv[i]->rms_rel_err};
        snprintf(rows[n++].target, sizeof rows[0].target, "%s", backend);
    }
    return replace_fits(db, backend, true, rows, n, err);
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
                             .rms_rel_err = r->rms_rel_err};
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
            (pt_link_fit){true, r->p1, r->p2, r->samples, r->rms_rel_err};
    }
}
