/*
 * The search: every layout that fits is priced from the cost tables and given a
 * closed-form step-time estimate; the best of those by estimate are simulated in
 * full and ranked by the simulated step time. Pricing is cheap (one op list per
 * layer kind, not per layer), the simulation costs in proportion to the schedule's
 * length, so the estimate keeps huge searches fast while every layout shown to the
 * user has been simulated.
 */
#include "planner.h"

#include <stdlib.h>
#include <string.h>

double pt_peak_flops_total(const pt_cluster *c, const pt_train *t)
{
    pt_dtype d = pt_precision_of(t->precision).act_bytes == 4 ? PT_DTYPE_FP32 : PT_DTYPE_BF16;
    return c->device.peak_flops[d] * (double)pt_cluster_world(c);
}

int pt_evaluate(const pt_model *m, const pt_cluster *c, const pt_train *t, const pt_costdb *db,
                const pt_layout *l, json_t *trace, pt_candidate *out, pt_err *err)
{
    pt_sim_costs costs;
    pt_layout layout = *l; /* l may point into *out */
    memset(out, 0, sizeof *out);
    out->layout = layout;
    pt_mem_rank_max(m, &layout, t, &out->memory);
    if (pt_sim_price(m, c, t, db, &layout, &costs, err))
        return -1;
    out->estimate_s = pt_sim_estimate(&layout, &costs);
    int rc = pt_sim_run(&layout, &costs, t->global_batch * m->seq, pt_peak_flops_total(c, t),
                        trace, &out->predicted, err);
    pt_sim_costs_free(&costs);
    return rc;
}

/* Layouts that fit, gathered during the enumeration. */
typedef struct {
    pt_candidate *v;
    int64_t n, cap;
    bool oom;
} fit_list;

static int collect(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    fit_list *f = ctx;
    if (!fits)
        return 0;
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

static int by_estimate(const void *a, const void *b)
{
    double x = ((const pt_candidate *)a)->estimate_s, y = ((const pt_candidate *)b)->estimate_s;
    return (x > y) - (x < y);
}

static int by_step_time(const void *a, const void *b)
{
    double x = ((const pt_candidate *)a)->predicted.step_time_s;
    double y = ((const pt_candidate *)b)->predicted.step_time_s;
    return (x > y) - (x < y);
}

int pt_search(const pt_model *m, const pt_cluster *c, const pt_train *t,
              const pt_enum_opts *o, const pt_costdb *db, int64_t sim_top,
              pt_search_result *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    fit_list f = {0};
    pt_enum_layouts(m, c, t, o, collect, &f, &out->counts);
    if (f.oom) {
        free(f.v);
        return pt_err_set(err, "out of memory collecting %lld layouts", (long long)f.n);
    }
    for (int64_t i = 0; i < f.n; i++) {
        pt_sim_costs costs;
        if (pt_sim_price(m, c, t, db, &f.v[i].layout, &costs, err)) {
            free(f.v);
            return -1;
        }
        f.v[i].estimate_s = pt_sim_estimate(&f.v[i].layout, &costs);
        pt_sim_costs_free(&costs);
    }
    out->priced = f.n;
    qsort(f.v, (size_t)f.n, sizeof *f.v, by_estimate);
    int64_t n = sim_top > 0 && sim_top < f.n ? sim_top : f.n;
    for (int64_t i = 0; i < n; i++) {
        double estimate = f.v[i].estimate_s;
        if (pt_evaluate(m, c, t, db, &f.v[i].layout, NULL, &f.v[i], err)) {
            free(f.v);
            return -1;
        }
        f.v[i].estimate_s = estimate;
    }
    qsort(f.v, (size_t)n, sizeof *f.v, by_step_time);
    out->best = f.v;
    out->n_best = n;
    return 0;
}

void pt_search_free(pt_search_result *r)
{
    free(r->best);
    memset(r, 0, sizeof *r);
}
