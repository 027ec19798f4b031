/*
 * The search: every layout that fits is priced from the cost tables and given a
 * closed-form step-time estimate; the best of those by estimate are simulated in
 * full and ranked by the simulated step time. Pricing is cheap (one op list per
 * layer kind, not per layer), the simulation costs in proportion to the schedule's
 * length, so the estimate keeps huge searches fast while every layout shown to the
 * user has been simulated.
 */
#include "predict.h"
#include "calib.h"

#include <stdlib.h>
#include <string.h>

double pt_peak_flops_total(const pt_cluster *c, const pt_train *t)
{
    return c->device.peak_flops[pt_prec_dtype(t->precision)] * (double)pt_cluster_world(c);
}

/* pt_evaluate with l's schedule programs built already when s is not NULL. */
static int evaluate(const pt_model *m, const pt_cluster *c, const pt_train *t,
                    const pt_costdb *db, const pt_layout *l, const pt_sched *s, json_t *trace,
                    pt_candidate *out, pt_err *err)
{
    pt_sim_costs costs;
    pt_layout layout = *l; /* l may point into *out */
    memset(out, 0, sizeof *out);
    out->layout = layout;
    pt_mem_rank_max(m, &layout, t, &out->memory);
    if (pt_sim_price(m, c, t, db, &layout, &costs, err))
        return -1;
    out->estimate_s = pt_sim_estimate(&layout, &costs);
    int64_t tokens = t->global_batch * m->seq;
    double peak = pt_peak_flops_total(c, t);
    int rc = s ? pt_sim_run_sched(&layout, s, &costs, tokens, peak, trace, &out->predicted, err)
               : pt_sim_run(&layout, &costs, tokens, peak, trace, &out->predicted, err);
    pt_sim_costs_free(&costs);
    if (rc == 0)
        pt_calib_apply(t->calib, &out->predicted); /* no-op without one */
    return rc;
}

/* Layouts that fit, gathered during the enumeration. */
typedef struct {
    pt_candidate *v;
    int64_t n, cap;
    bool oom;
} fit_list;

typedef struct {
    fit_list fit, over;   /* layouts that fit; near misses */
    double over_bytes;    /* the largest memory a near miss may need */
} collected;

static int append(fit_list *f, const pt_layout *l, const pt_memory *mem)
{
    if (f->n == f->cap) {
        int64_t cap = f->cap ? 2 * f->cap : 1024;
        pt_candidate *v = realloc(f->v, (size_t)cap * sizeof *v);
        if (!v) {
            f->oom = true;
            return 1;
        }
        f->v = v;
        f->cap = cap;
    }
    pt_candidate *c = &f->v[f->n++];
    memset(c, 0, sizeof *c);
    c->layout = *l;
    c->memory = *mem;
    return 0;
}

static int collect(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    collected *k = ctx;
    if (fits)
        return append(&k->fit, l, mem);
    if (mem->total_bytes <= k->over_bytes)
        return append(&k->over, l, mem);
    return 0;
}

static int by_estimate(const void *a, const void *b)
{
    double x = ((const pt_candidate *)a)->estimate_s, y = ((const pt_candidate *)b)->estimate_s;
    return (x > y) - (x < y);
}

int pt_evaluate(const pt_model *m, const pt_cluster *c, const pt_train *t, const pt_costdb *db,
                const pt_layout *l, json_t *trace, pt_candidate *out, pt_err *err)
{
    return evaluate(m, c, t, db, l, NULL, trace, out, err);
}

/* What a layout's schedule programs depend on: its schedule, pp, vp and micro-batches. */
static int schedule_cmp(const pt_layout *x, const pt_layout *y)
{
    int64_t kx[4] = {x->schedule, x->pp, x->vp, x->n_micro};
    int64_t ky[4] = {y->schedule, y->pp, y->vp, y->n_micro};
    for (int i = 0; i < 4; i++)
        if (kx[i] != ky[i])
            return (kx[i] > ky[i]) - (kx[i] < ky[i]);
    return 0;
}

/* Candidates by schedule (then by place, so that the order is total). */
typedef struct {
    const pt_candidate *v;
    int64_t i;
} at;

static int by_schedule(const void *a, const void *b)
{
    const at *x = a, *y = b;
    int k = schedule_cmp(&x->v[x->i].layout, &y->v[y->i].layout);
    return k ? k : (x->i > y->i) - (x->i < y->i);
}

/* Simulates v[0..n) in full, in place, building each schedule once for the layouts
 * that share it (visited in schedule order: the programs of an interleaved pipeline
 * are a large part of its simulation's cost). */
static int simulate_all(const pt_model *m, const pt_cluster *c, const pt_train *t,
                        const pt_costdb *db, pt_candidate *v, int64_t n, pt_err *err)
{
    at *order = malloc((size_t)n * sizeof *order);
    if (!order)
        return pt_err_set(err, "out of memory simulating %lld layouts", (long long)n);
    for (int64_t i = 0; i < n; i++)
        order[i] = (at){v, i};
    qsort(order, (size_t)n, sizeof *order, by_schedule);
    pt_sched s;
    const pt_layout *built = NULL;
    int rc = 0;
    for (int64_t k = 0; k < n && rc == 0; k++) {
        pt_candidate *cand = &v[order[k].i];
        const pt_layout *l = &cand->layout;
        if (built && schedule_cmp(built, l) != 0) {
            pt_sched_free(&s);
            built = NULL;
        }
        if (!built) {
            rc = pt_sched_build(l->schedule, l->pp, l->vp, (int)l->n_micro, &s, err);
            if (rc)
                break;
            built = l;
        }
        double estimate = cand->estimate_s;
        rc = evaluate(m, c, t, db, l, &s, NULL, cand, err);
        cand->estimate_s = estimate;
    }
    if (built)
        pt_sched_free(&s);
    free(order);
    return rc;
}

static int by_step_time(const void *a, const void *b)
{
    double x = ((const pt_candidate *)a)->predicted.step_time_s;
    double y = ((const pt_candidate *)b)->predicted.step_time_s;
    if (x != y)
        return (x > y) - (x < y);
    /* equal times: less memory first */
    double p = ((const pt_candidate *)a)->memory.total_bytes;
    double q = ((const pt_candidate *)b)->memory.total_bytes;
    return (p > q) - (p < q);
}

/* Prices and estimates every layout of f, then simulates the `top` best estimates in
 * full (0: all) and sorts those by step time; returns how many were simulated, -1 on
 * error. */
static int64_t price_and_simulate(const pt_model *m, const pt_cluster *c, const pt_train *t,
                                  const pt_costdb *db, fit_list *f, int64_t top, pt_err *err)
{
    if (f->n == 0)
        return 0; /* qsort must not be given a null base, even for no elements */
    pt_sim_memo *memo = pt_sim_memo_new(m, c, t, db); /* NULL: priced one by one */
    for (int64_t i = 0; i < f->n; i++) {
        pt_sim_costs costs;
        if (pt_sim_price_memo(m, c, t, db, &f->v[i].layout, memo, &costs, err)) {
            pt_sim_memo_free(memo);
            return -1;
        }
        f->v[i].estimate_s = pt_sim_estimate(&f->v[i].layout, &costs);
        pt_sim_costs_free(&costs);
    }
    pt_sim_memo_free(memo);
    qsort(f->v, (size_t)f->n, sizeof *f->v, by_estimate);
    int64_t n = top > 0 && top < f->n ? top : f->n;
    if (simulate_all(m, c, t, db, f->v, n, err))
        return -1;
    qsort(f->v, (size_t)n, sizeof *f->v, by_step_time);
    return n;
}

int pt_search(const pt_model *m, const pt_cluster *c, const pt_train *t,
              const pt_enum_opts *o, const pt_costdb *db, int64_t sim_top,
              pt_search_result *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    collected k = {.over_bytes = PT_SEARCH_OVER_FACTOR * o->mem_fraction *
                                 (double)c->device.memory_bytes};
    pt_enum_layouts(m, c, t, o, collect, &k, &out->counts);
    if (k.fit.oom || k.over.oom) {
        free(k.fit.v);
        free(k.over.v);
        return pt_err_set(err, "out of memory collecting %lld layouts",
                          (long long)(k.fit.n + k.over.n));
    }
    int64_t n = price_and_simulate(m, c, t, db, &k.fit, sim_top, err);
    int64_t n_over = n < 0 ? -1 : price_and_simulate(m, c, t, db, &k.over,
                                                       PT_SEARCH_OVER_SHOWN, err);
    if (n < 0 || n_over < 0) {
        free(k.fit.v);
        free(k.over.v);
        return -1;
    }
    out->priced = k.fit.n;
    out->best = k.fit.v;
    out->n_best = n;
    out->over = k.over.v;
    out->n_over = n_over;
    return 0;
}

void pt_search_free(pt_search_result *r)
{
    free(r->best);
    free(r->over);
    memset(r, 0, sizeof *r);
}
