/*
 * Enumeration of the layout space: every (tp, cp, pp, dp) whose product is the
 * world size, crossed with virtual stages, sequence parallelism, ZeRO stage,
 * micro-batch size, recomputation and schedule. Each candidate is checked against
 * the rules of layout.c; a rejected one is counted under the first rule it breaks,
 * a valid one gets its memory figures and is handed to the caller.
 */
#include "internal.h"

void pt_enum_opts_default(pt_enum_opts *o)
{
    o->max_mbs = 8;
    /* Leave 5% of device memory for what the model does not count: the CUDA context,
     * library workspaces and allocator fragmentation. */
    o->mem_fraction = 0.95;
    pt_layout l;
    pt_layout_default(&l);
    for (int i = 0; i < PT_NDIM; i++)
        o->order[i] = l.order[i];
}

/* Shared state of one enumeration. */
typedef struct {
    const pt_model *m;
    const pt_cluster *c;
    const pt_train *t;
    double limit_bytes;
    pt_enum_fn fn;
    void *ctx;
    pt_enum_counts *counts;
    int tp_spans;
    bool stop;
} enum_state;

static void visit(enum_state *st, const pt_layout *l)
{
    uint32_t mask;
    st->counts->enumerated++;
    if (pt_layout_check_spans(st->m, st->c, st->t->global_batch, l, st->tp_spans, &mask)) {
        st->counts->rejected[__builtin_ctz(mask)]++;
        return;
    }
    st->counts->valid++;
    pt_memory mem;
    pt_mem_rank_max(st->m, l, st->t, &mem);
    bool fits = mem.total_bytes <= st->limit_bytes;
    if (fits)
        st->counts->fit++;
    else
        st->counts->too_big++;
    if (st->fn && st->fn(l, &mem, fits, st->ctx))
        st->stop = true;
}

/* The settings that do not change the rank grid, for one (tp, cp, pp, dp). */
static void enum_settings(enum_state *st, const pt_enum_opts *o, pt_layout *l)
{
    int64_t per_stage = st->m->layers % l->pp ? 1 : st->m->layers / l->pp;
    for (int64_t vp = 1; vp <= per_stage && !st->stop; vp++) {
        if (per_stage % vp || (vp > 1 && l->pp == 1))
            continue;
        l->vp = (int)vp;
        for (int sp = 0; sp <= (l->tp > 1) && !st->stop; sp++) {
            l->sp = sp;
            for (int zero = 0; zero <= 3 && !st->stop; zero++) {
                l->zero = zero;
                for (int64_t mbs = 1; mbs <= o->max_mbs && !st->stop; mbs *= 2) {
                    l->mbs = mbs;
                    l->n_micro = st->t->global_batch / (mbs * l->dp);
                    for (int r = 0; r < PT_RECOMPUTE_COUNT && !st->stop; r++) {
                        l->recompute = (pt_recompute)r;
                        if (l->pp == 1) {
                            l->schedule = PT_SCHED_1F1B;
                            visit(st, l);
                        } else if (vp > 1) {
                            l->schedule = PT_SCHED_INTERLEAVED;
                            visit(st, l);
                        } else {
                            l->schedule = PT_SCHED_AFAB;
                            visit(st, l);
                            l->schedule = PT_SCHED_1F1B;
                            if (!st->stop)
                                visit(st, l);
                        }
                    }
                }
            }
        }
    }
}

void pt_enum_layouts(const pt_model *m, const pt_cluster *c, const pt_train *t,
                     const pt_enum_opts *o, pt_enum_fn fn, void *ctx, pt_enum_counts *counts)
{
    *counts = (pt_enum_counts){0};
    enum_state st = {.m = m, .c = c, .t = t, .fn = fn, .ctx = ctx, .counts = counts,
                     .limit_bytes = o->mem_fraction * (double)c->device.memory_bytes};
    int64_t world = pt_cluster_world(c);
    pt_layout l;
    pt_layout_default(&l);
    for (int i = 0; i < PT_NDIM; i++)
        l.order[i] = o->order[i];
    for (int64_t tp = 1; tp <= world && !st.stop; tp++) {
        if (world % tp)
            continue;
        for (int64_t cp = 1; cp <= world / tp && !st.stop; cp++) {
            if ((world / tp) % cp)
                continue;
            for (int64_t pp = 1; pp <= world / (tp * cp) && !st.stop; pp++) {
                if ((world / (tp * cp)) % pp)
                    continue;
                l.tp = (int)tp;
                l.cp = (int)cp;
                l.pp = (int)pp;
                l.dp = (int)(world / (tp * cp * pp));
                st.tp_spans = pt_layout_tp_spans_nodes(&l, c->devices_per_node);
                enum_settings(&st, o, &l);
            }
        }
    }
}
