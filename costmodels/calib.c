/*
 * From a run's per-op statistics to cost samples, and back out again: the samples of a
 * run (its ranks merged), the load check that keeps a run made on a
 * busy machine out of the tables, storing a run's samples under its id, and forgetting
 * a run (its samples and the fits its calibration made) so that the tables are exactly
 * what they were before it.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Samples ------------------------------------------------------------------------------ */

static int by_key(const void *a, const void *b)
{
    const pt_op_stat *x = *(const pt_op_stat *const *)a, *y = *(const pt_op_stat *const *)b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

int pt_op_samples(const pt_op_stat *v, size_t n, pt_op_sample **out, size_t *n_out,
                  pt_err *err)
{
    *out = NULL;
    *n_out = 0;
    const pt_op_stat **ops = malloc((n ? n : 1) * sizeof *ops);
    const pt_robust **st = malloc((n ? n : 1) * sizeof *st);
    pt_op_sample *s = calloc(n ? n : 1, sizeof *s);
    if (!ops || !st || !s) {
        free(ops), free(st), free(s);
        return pt_err_set(err, "out of memory for %zu op statistics", n);
    }
    size_t m = 0, ns = 0;
    /* An FP8 GEMM op's span holds the casts of its operands besides the GEMM (ptrun's
     * runtime/fp8.c), which the planner prices apart (planner/sim.c): it is not its
     * key's time, and ptprofile measures those keys instead. */
    for (size_t i = 0; i < n; i++)
        if (v[i].stream == 0 && v[i].key[0] && v[i].st.spans > 0 && v[i].dtype != PT_DTYPE_FP8)
            ops[m++] = &v[i];
    qsort(ops, m, sizeof *ops, by_key);
    for (size_t a = 0, b; a < m; a = b) {
        size_t k = 0;
        for (b = a; b < m && !strcmp(ops[b]->key, ops[a]->key); b++)
            st[k++] = &ops[b]->st;
        pt_op_sample *x = &s[ns++];
        x->op = (pt_kernel_op){.dtype = ops[a]->dtype, .flops = ops[a]->flops,
                               .bytes = ops[a]->bytes};
        snprintf(x->op.key, sizeof x->op.key, "%s", ops[a]->key);
        x->ranks = (int)k;
        pt_robust_merge(st, k, &x->st);
    }
    free(ops);
    free(st);
    *out = s;
    *n_out = ns;
    return 0;
}

/* ---- The load check ------------------------------------------------------------------------- */

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pt_gemm_ratio(const pt_op_sample *v, size_t n, const pt_costdb *profile,
                     const pt_cost_hw *hw, int *keys)
{
    double *r = malloc((n ? n : 1) * sizeof *r);
    size_t m = 0;
    for (size_t i = 0; r && i < n; i++) {
        char cls[32];
        pt_fit_class_of(&v[i].op, cls);
        if (strcmp(cls, "gemm") != 0 || !(v[i].st.median_s > 0))
            continue;
        pt_cost c = pt_cost_kernel(profile, hw, &v[i].op);
        if (c.prov != PT_PROV_ANALYTIC && c.time_s > 0)
            r[m++] = v[i].st.median_s / c.time_s;
    }
    double ratio = 0;
    if (m) {
        qsort(r, m, sizeof *r, by_double);
        ratio = m % 2 ? r[m / 2] : 0.5 * (r[m / 2 - 1] + r[m / 2]);
    }
    free(r);
    if (keys)
        *keys = (int)m;
    return ratio;
}

double pt_span_excess(const pt_op_sample *v, size_t n)
{
    double total = 0, median = 0;
    for (size_t i = 0; i < n; i++) {
        total += v[i].st.total_s;
        median += (double)v[i].st.spans * v[i].st.median_s;
    }
    return median > 0 ? total / median : 0;
}

/* ---- Storing and forgetting a run's samples ---------------------------------------------- */

int pt_costdb_put_run_samples(pt_costdb *db, const char *device, int64_t run_id,
                              const pt_op_sample *v, size_t n, int64_t *stored, pt_err *err)
{
    *stored = 0;
    if (!db || !db->sql)
        return pt_err_set(err, "no cost database file to store the run's samples in");
    if (run_id < 1)
        return pt_err_set(err, "%s: samples of run %lld: runs are numbered from 1",
                          pt_costdb_where(db), (long long)run_id);
    if (pt_costdb_begin(db, err))
        return -1;
    int64_t gone = 0;
    int rc = pt_costdb_exec_bound(db, "DELETE FROM kernel_samples WHERE run_id = ? AND device = ?",
                                  "it", &gone, err, "cannot replace the run's samples", run_id,
                                  device);
    if (rc == 0 && gone > 0)
        rc = pt_costdb_reload(db, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (v[i].st.kept < PT_MIN_SPANS || !(v[i].st.median_s > 0))
            continue; /* too few repeats, or below the clock's resolution */
        rc = pt_costdb_add_kernel_from(db, device, &v[i].op, v[i].st.median_s, PT_SOURCE_TRACE,
                                       run_id, v[i].st.mad_s, v[i].st.kept, err);
        if (rc == 0)
            (*stored)++;
    }
    if (rc == 0)
        return pt_costdb_commit(db, err);
    pt_costdb_rollback(db, NULL);
    return -1;
}

int pt_costdb_mark_noisy(pt_costdb *db, int64_t run_id, const char *why, pt_err *err)
{
    if (!db || !db->sql)
        return pt_err_set(err, "no cost database file");
    return pt_costdb_exec_bound(db, "UPDATE runs SET noisy = ? WHERE id = ?", "ti", NULL, err,
                                "cannot mark the run noisy", why, run_id);
}

int pt_costdb_forget_run(pt_costdb *db, int64_t run_id, pt_forgotten *out, pt_err *err)
{
    *out = (pt_forgotten){0};
    if (!db || !db->sql)
        return pt_err_set(err, "no cost database file");
    if (pt_costdb_exec_bound(db, "DELETE FROM kernel_samples WHERE run_id = ?", "i",
                             &out->samples, err, "cannot forget the run's samples", run_id) ||
        pt_costdb_exec_bound(db, "DELETE FROM kernel_fits WHERE run_id = ?", "i",
                             &out->kernel_fits, err, "cannot forget the run's fits", run_id) ||
        pt_costdb_exec_bound(db, "DELETE FROM link_fits WHERE run_id = ?", "i",
                             &out->link_fits, err, "cannot forget the run's fits", run_id) ||
        pt_costdb_exec_bound(db, "UPDATE runs SET forgotten = 1 WHERE id = ?", "i", NULL, err,
                             "cannot mark the run forgotten", run_id))
        return -1;
    return pt_costdb_reload(db, err);
}

static int by_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int pt_costdb_sample_runs(const pt_costdb *db, const char *device, int64_t *runs, int cap,
                          int64_t *profile_samples)
{
    int n = 0;
    *profile_samples = 0;
    for (size_t i = 0; db && i < db->nk; i++) {
        const pt_ksample *s = &db->ks[i];
        if (strcmp(s->device, device) != 0)
            continue;
        if (s->run_id == 0) {
            (*profile_samples)++;
            continue;
        }
        bool seen = false;
        for (int k = 0; k < n && k < cap && !seen; k++)
            seen = runs[k] == s->run_id;
        if (!seen && n < cap)
            runs[n++] = s->run_id;
    }
    qsort(runs, (size_t)n, sizeof *runs, by_i64);
    return n;
}
