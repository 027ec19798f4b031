/*
 * Enumeration of the layout space: every (tp, cp, pp, dp) whose product is the
 * world size, crossed with virtual stages, sequence parallelism, ZeRO stage,
 * micro-batch size, recomputation, schedule and how cp communicates. Each candidate is
 * checked against the rules of layout.c; a rejected one is counted under the first rule
 * it breaks, and a valid one gets its memory figures and is handed to the caller.
 */
#include "grid.h"
#include "internal.h"
#include "predict.h"

#include <stdlib.h>

void pt_enum_opts_default(pt_enum_opts *o)
{
    o->max_mbs = 8;
    /* Leave 5% of device memory for what the model does not count: the CUDA context,
     * library workspaces and allocator fragmentation. */
    o->mem_fraction = 0.95;
    /* bf16 halves the bytes at a rounding of each gradient; PowerSGD changes what the
     * optimizer sees far more and is tried only when asked for (ptplan --compress) */
    o->compress_modes = 1u << PT_COMPRESS_NONE | 1u << PT_COMPRESS_BF16;
    pt_layout l;
    pt_layout_default(&l);
    for (int i = 0; i < PT_NDIM; i++)
        o->order[i] = l.order[i];
    o->pipe.n = 0;
}

/* Shared state of one enumeration. */
typedef struct {
    const pt_model *m;
    const pt_cluster *c;
    const pt_train *t;
    double limit_bytes;
    pt_enum_fn fn;
    void *ctx;
    unsigned compress_modes;
    pt_enum_counts *counts;
    int tp_spans;
    int cp_domain; /* the cp ranks in one NVLink domain for this (tp, cp, pp, dp) */
    bool stop;
} enum_state;

/* Hands one valid layout to the caller in every overlap variant the stack offers:
 * tp_overlap with sp, dp_overlap where gradients are reduced by buckets (ZeRO 0/1
 * over dp·cp > 1), param_overlap with ZeRO 1/2. Overlaps change no memory figure. */
static void visit_overlaps(enum_state *st, const pt_layout *base, const pt_memory *mem,
                           bool fits)
{
    const pt_stack *s = &st->t->stack;
    pt_layout l = *base;
    bool buckets = l.zero <= 1 && (int64_t)l.dp * l.cp > 1;
    bool gathers = (l.zero == 1 || l.zero == 2) && s->param_overlap;
    for (int tpo = 0; tpo <= (l.sp && s->tp_overlap) && !st->stop; tpo++)
        for (int dpo = 0; dpo < PT_DPO_COUNT && !st->stop; dpo++) {
            if (!(s->dp_overlap_modes & (1u << dpo)) || (!buckets && dpo != (int)s->dp_overlap))
                continue;
            for (int po = 0; po <= gathers && !st->stop; po++) {
                l.tp_overlap = tpo;
                l.dp_overlap = (pt_dp_overlap)dpo;
                l.param_overlap = po;
                st->counts->enumerated++;
                st->counts->valid++;
                if (fits)
                    st->counts->fit++;
                else
                    st->counts->too_big++;
                if (st->fn && st->fn(&l, mem, fits, st->ctx))
                    st->stop = true;
            }
        }
}

/* The model zoo's two recompute lists for mixtures of experts, lighter first: the
 * pre-MLP norm and the experts' activation; the norm and the whole routed block. */
static const unsigned list_act = 1u << PT_RMOD_LAYERNORM | 1u << PT_RMOD_MOE_ACT,
                      list_block = 1u << PT_RMOD_LAYERNORM | 1u << PT_RMOD_MOE;

/* Whether the search tries l's list of recompute modules (recompute_options), whose
 * memory is mem. A list only adds work to the step and saves memory, so it is tried
 * only where it fits and the option before it (none before the lighter list, that
 * before the heavier) does not: elsewhere that option is as fast and fits, or the list
 * misses the memory too (and the other options' layouts are counted). */
static bool list_needed(const enum_state *st, const pt_layout *l, const pt_memory *mem)
{
    if (mem->total_bytes > st->limit_bytes)
        return false;
    pt_layout lighter = *l;
    if (l->recompute_modules == list_block) {
        lighter.recompute_modules = list_act;
    } else {
        lighter.recompute = PT_RECOMPUTE_NONE;
        lighter.recompute_modules = 0;
    }
    pt_memory m;
    pt_mem_rank_max(st->m, &lighter, st->t, &m);
    return m.total_bytes > st->limit_bytes;
}

static void visit_comm(enum_state *st, const pt_layout *in)
{
    uint32_t mask;
    pt_layout base = *in, *l = &base;
    base.tp_overlap = base.param_overlap = false;
    base.dp_overlap = st->t->stack.dp_overlap;
    /* what the stack cannot run is not a layout of this search */
    if (pt_stack_check_model(&st->t->stack, st->m, l, NULL))
        return;
    if (pt_layout_check_spans(st->m, st->c, st->t->global_batch, l, st->tp_spans, &mask)) {
        st->counts->enumerated++;
        st->counts->rejected[__builtin_ctz(mask)]++;
        return;
    }
    pt_memory mem;
    pt_mem_rank_max(st->m, l, st->t, &mem);
    if (l->recompute_modules && !list_needed(st, l, &mem))
        return;
    visit_overlaps(st, l, &mem, mem.total_bytes <= st->limit_bytes);
    /* gradient compression where the gradients go in buckets: its buffers change the
     * memory; the pricing decides whether the bytes it saves outweigh its work */
    bool buckets = l->zero <= 1 && (int64_t)l->dp * l->cp > 1;
    for (int cm = 1; cm < PT_COMPRESS_COUNT && buckets && st->t->stack.compression; cm++) {
        if (!(st->compress_modes & (1u << cm)) || st->stop)
            continue;
        pt_layout v = *l;
        v.compress = (pt_compress)cm;
        if (pt_stack_check_model(&st->t->stack, st->m, &v, NULL)) /* not for experts */
            continue;
        pt_mem_rank_max(st->m, &v, st->t, &mem);
        visit_overlaps(st, &v, &mem, mem.total_bytes <= st->limit_bytes);
    }
}

/* The cp ranks of rank 0's cp group inside its NVLink domain, for a (tp, cp, pp, dp). */
static int cp_in_domain(const pt_cluster *c, const pt_layout *l)
{
    pt_grid g;
    pt_grid_init(&g, l);
    int64_t *ranks = malloc((size_t)l->cp * sizeof *ranks);
    if (!ranks)
        return 1;
    int n = pt_grid_group_below(&g, PT_GROUP_CP, 0, pt_cluster_nvlink_domain(c), ranks);
    free(ranks);
    return n;
}

/* Whether pure a2a over cp sends at least the ring's bytes in both passes. Per T·hd
 * elements (T tokens a rank, heads of hd): the all-to-all's buffer holds q and the output
 * (a/t heads each) and k and v (k' = k/t, or c where fewer are replicated), 2(a/t + k')
 * each way, of which (c-1)/c is sent; the ring sends 2(c-1)·k/t forward and twice that
 * backward. a/t + k' >= 2c·k/t makes the all-to-all send as much backward (and so
 * forward), with more latencies and in the open, where the ring hides what the attention
 * covers: on the same links (priced as in costmodels/analytic.c) it is not faster. */
static bool a2a_moves_more(const pt_model *m, const pt_layout *l)
{
    pt_layout a = *l;
    a.cp_comm = PT_CPC_A2A;
    pt_attn_shape at = pt_attn_shape_of(m, &a); /* k' = u times the head form's */
    int64_t heads = m->heads / l->tp, kv = pt_kv_heads_rank(m, l->tp);
    return heads + at.u * at.kv_heads >= 2 * (int64_t)l->cp * kv;
}

/* Each way the stack communicates context parallelism (pt_cp_comm), for cp > 1, where
 * the cost model can make it the fastest (docs/ptplan.md, "How context parallelism
 * communicates"); the others would only slow the search down. a2a+p2p with the
 * all-to-all filling an NVLink domain (the cp ranks of one, when that is a proper
 * divisor of cp: the split Megatron-Core's --hierarchical-context-parallel-sizes is
 * meant for). Pure a2a where it moves fewer bytes than the ring (a2a_moves_more), and
 * then only where its all-to-all stays inside a domain or no such split exists: across
 * domains the split keeps the same all-to-all on NVLink and sends only K/V blocks over
 * the network, beside the attention, and smaller groups leave NVLink unused.
 * all_gather only where cp spans domains with several of its ranks in each: inside one
 * domain, or with one rank a domain, its all-gather is priced as the ring's c-1 steps
 * (costmodels/analytic.c: ring_partial, and the hierarchical form with one rank a node),
 * exposed, where the ring hides all but a stack's compute slowdown (< 1) of them, in
 * less memory; only the hierarchical all-gather's steps inside the domains make it
 * cheaper. These compare the analytic prices; a profiled table may rank them otherwise,
 * which a layout given by hand shows: it may use any kind and divisor. */
static void visit_cp(enum_state *st, const pt_layout *in);

/* The experts' split of a mixture of experts (a dense model: none): ep over each
 * divisor of the experts that parallel folding allows (ep·etp dividing a stage's
 * tp·cp·dp), with etp 1, and etp = tp (Megatron-Core's default) only where ep holds one
 * expert a rank already: elsewhere a larger ep over the same ranks splits the experts'
 * weights as far without etp's gather and reduce-scatter, and keeps each expert's GEMMs
 * whole; the stack's first dispatcher (alltoall where it runs it: allgather gathers
 * every token of the ep group, more bytes for ep > 2). */
static void visit(enum_state *st, const pt_layout *in)
{
    pt_layout l = *in;
    l.ep = l.etp = 1;
    l.moe_dispatch = PT_MOED_ALLTOALL;
    const pt_moe *e = &st->m->moe;
    if (e->experts == 0 || !st->t->stack.moe_dispatches) {
        visit_cp(st, &l);
        return;
    }
    if (!(st->t->stack.moe_dispatches & (1u << PT_MOED_ALLTOALL)))
        l.moe_dispatch = PT_MOED_ALLGATHER;
    int64_t fold = (int64_t)l.tp * l.cp * l.dp;
    for (int etp = 1; etp <= l.tp && !st->stop; etp = etp == 1 && l.tp > 1 ? l.tp : l.tp + 1)
        for (int64_t ep = 1; ep <= e->experts && ep * etp <= fold && !st->stop; ep++) {
            if (e->experts % ep || fold % (ep * etp) || e->expert_ffn % etp ||
                (etp > 1 && ep < e->experts))
                continue;
            l.ep = (int)ep;
            l.etp = etp;
            visit_cp(st, &l);
        }
}

static void visit_cp(enum_state *st, const pt_layout *in)
{
    pt_layout l = *in;
    l.cp_comm = PT_CPC_P2P;
    l.cp_a2a = 0;
    if (l.cp == 1) {
        visit_comm(st, &l);
        return;
    }
    int u = st->cp_domain;
    bool split = u > 1 && u < l.cp && l.cp % u == 0;
    for (int k = 0; k < PT_CPC_COUNT && !st->stop; k++) {
        if (!(st->t->stack.cp_comms & (1u << k)))
            continue;
        if ((k == PT_CPC_A2A && (split || a2a_moves_more(st->m, &l))) ||
            (k == PT_CPC_A2A_P2P && !split) ||
            (k == PT_CPC_ALLGATHER && (u >= l.cp || u <= 1)))
            continue;
        l.cp_comm = (pt_cp_comm)k;
        l.cp_a2a = k == PT_CPC_A2A_P2P ? u : 0;
        visit_comm(st, &l);
    }
}

/* How many recompute options the search may try: the three settings and the two lists. */
#define RECOMPUTE_OPTIONS_MAX (PT_RECOMPUTE_COUNT + 2)

/* What a layout may recompute: none, selective (the stack's policy), full, and where the
 * stack names Megatron-Core's recompute modules and the model has experts, the lists
 * list_act and list_block. Returns how many. */
static int recompute_options(const enum_state *st, pt_recompute rec[RECOMPUTE_OPTIONS_MAX],
                             unsigned mods[RECOMPUTE_OPTIONS_MAX])
{
    int n = 0;
    for (int r = 0; r < PT_RECOMPUTE_COUNT; r++) {
        rec[n] = (pt_recompute)r;
        mods[n++] = 0;
    }
    unsigned have = st->t->stack.recompute_modules;
    if (pt_model_moe_layers(st->m, 0, st->m->layers) > 0 && (have & (list_act | list_block)) ==
                                                              (list_act | list_block)) {
        rec[n] = PT_RECOMPUTE_SELECTIVE;
        mods[n++] = list_act;
        rec[n] = PT_RECOMPUTE_SELECTIVE;
        mods[n++] = list_block;
    }
    return n;
}

/* The settings that do not change the rank grid or the layers per stage. */
static void enum_settings(enum_state *st, const pt_enum_opts *o, pt_layout *l)
{
    pt_recompute rec[RECOMPUTE_OPTIONS_MAX];
    unsigned mods[RECOMPUTE_OPTIONS_MAX];
    int n_rec = recompute_options(st, rec, mods);
    for (int sp = 0; sp <= (l->tp > 1) && !st->stop; sp++) {
        l->sp = sp;
        for (int zero = 0; zero <= 3 && !st->stop; zero++) {
            l->zero = zero;
            for (int64_t mbs = 1; mbs <= o->max_mbs && !st->stop; mbs *= 2) {
                l->mbs = mbs;
                l->n_micro = st->t->global_batch / (mbs * l->dp);
                for (int r = 0; r < n_rec && !st->stop; r++) {
                    l->recompute = rec[r];
                    l->recompute_modules = mods[r];
                    if (l->pp == 1) {
                        l->schedule = PT_SCHED_1F1B;
                        visit(st, l);
                    } else if (l->vp > 1) {
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

static int64_t gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The vp values one (tp, cp, pp, dp) has tried with an uneven split. */
typedef struct {
    int64_t vp[256];
    int n;
} vp_set;

static bool vp_seen(const vp_set *v, int64_t vp)
{
    for (int i = 0; i < v->n; i++)
        if (v->vp[i] == vp)
            return true;
    return false;
}

/* Every vp dividing `per_chunk` (what each stage's layer count is a multiple of),
 * vp > 1 only with pipelining, except those in *done (may be NULL), which it extends. */
static void enum_vp(enum_state *st, const pt_enum_opts *o, pt_layout *l, int64_t per_chunk,
                    vp_set *done)
{
    for (int64_t vp = 1; vp <= per_chunk && !st->stop; vp++) {
        if (per_chunk % vp || (vp > 1 && l->pp == 1) || (done && vp_seen(done, vp)))
            continue;
        if (done && done->n < (int)(sizeof done->vp / sizeof done->vp[0]))
            done->vp[done->n++] = vp;
        l->vp = (int)vp;
        enum_settings(st, o, l);
    }
}

typedef struct {
    int64_t first, last, middle;
} split;

/* Most balanced first (first and last closest), then the lighter last stage: the
 * head's GEMM and loss weigh more than the embedding's lookup (for Llama 3 405B on 32
 * stages, vp = 2, the split 4, 4 x 30, 2 predicts a 7% shorter step than 2, 4 x 30,
 * 4), though the first stage keeps the most micro-batches in flight. */
static int split_order(const void *a, const void *b)
{
    const split *x = a, *y = b;
    int64_t dx = x->first > x->last ? x->first - x->last : x->last - x->first;
    int64_t dy = y->first > y->last ? y->first - y->last : y->last - y->first;
    if (dx != dy)
        return dx < dy ? -1 : 1;
    return (x->first < y->first) - (x->first > y->first);
}

/* How the layers split over the pipeline stages, for one (tp, cp, pp, dp): the even
 * split (rejected under layers_pp when p does not divide L), then a few uneven ones
 * that lighten the first and last stage, which also hold the embedding and the head
 * (and on the first, the most micro-batches in flight): middle stages of k layers,
 * first and last of k - j1 and k - j2 for j1, j2 in 0..2, with (p-2)k + 2k - j1 - j2
 * = L. Llama 3 405B's 7, 8 x 14, 7 on 16 stages (Dubey et al. 2024, Sec. 3.3.2) is
 * among them, and so is 5, 6 x 10, 5 for 70 layers (BLOOM's) on 12. Each vp is tried
 * with one uneven split only, the first in split_order whose counts it divides, so
 * that a pp adds at most as many layouts as its even split would: every split makes
 * layouts valid that the search then prices, and llama3-405b on 2,048 nodes must stay
 * under 10 s (bench/bench_search.c). */
/* Megatron-Core's balanced splits that count the embedding and the loss as a layer
 * each (account_for_embedding_in_pipeline_split and ..._loss_...): for each vp not
 * tried yet, the first of (both, the embedding alone, the loss alone) whose units
 * divide over the p·vp virtual stages. Llama 3 405B's 126 layers with both are 128
 * units: one per virtual stage on 16 stages with vp = 8, the first holding only the
 * embedding and the last only the output layer and loss. */
static void enum_units(enum_state *st, const pt_enum_opts *o, pt_layout *l, vp_set *done)
{
    static const bool counted[3][2] = {{true, true}, {true, false}, {false, true}};
    for (int64_t vp = 1; vp <= PT_CHUNK_MAX && l->pp > 1 && !st->stop; vp++) {
        if (vp_seen(done, vp))
            continue;
        for (int k = 0; k < 3 && !st->stop; k++) {
            if (!pt_pipe_balanced(st->m->layers, l->pp, (int)vp, counted[k][0], counted[k][1],
                                  &l->pipe))
                continue;
            l->vp = (int)vp;
            enum_settings(st, o, l);
            break;
        }
    }
    l->pipe.n = 0;
}

/* Only the pipeline layout the user gave, where p divides its virtual stages. */
static void enum_given_pipe(enum_state *st, const pt_enum_opts *o, pt_layout *l)
{
    int stages = pt_pipe_stages(&o->pipe);
    if (stages % l->pp || stages / l->pp > PT_CHUNK_MAX)
        return;
    l->pipe = o->pipe;
    l->vp = stages / l->pp;
    l->first_layers = l->last_layers = 0;
    enum_settings(st, o, l);
    l->pipe.n = 0;
}

static void enum_splits(enum_state *st, const pt_enum_opts *o, pt_layout *l)
{
    int64_t L = st->m->layers, p = l->pp;
    if (o->pipe.n) {
        enum_given_pipe(st, o, l);
        return;
    }
    l->first_layers = l->last_layers = 0;
    vp_set done = {.n = 0};
    enum_vp(st, o, l, L % p ? 1 : L / p, NULL);
    split cand[9];
    int n = 0;
    for (int64_t s = 1; s <= 4 && p > 1; s++) {
        if ((L + s) % p)
            continue;
        int64_t k = (L + s) / p;
        for (int64_t j1 = s > 2 ? s - 2 : 0; j1 <= 2 && j1 <= s; j1++) {
            split c = {k - j1, k - (s - j1), k};
            bool seen = c.first < 1 || c.last < 1 || (p == 2 && c.first == c.last);
            for (int i = 0; i < n; i++) /* with p = 2 the first fixes the split */
                seen |= cand[i].first == c.first && cand[i].last == c.last;
            if (!seen)
                cand[n++] = c;
        }
    }
    if (n > 1)
        qsort(cand, (size_t)n, sizeof cand[0], split_order);
    for (int i = 0; i < n && !st->stop; i++) {
        l->first_layers = cand[i].first;
        l->last_layers = cand[i].last;
        int64_t g = gcd(cand[i].first, cand[i].last);
        enum_vp(st, o, l, p > 2 ? gcd(g, cand[i].middle) : g, &done);
    }
    l->first_layers = l->last_layers = 0;
    enum_units(st, o, l, &done);
}

void pt_enum_layouts(const pt_model *m, const pt_cluster *c, const pt_train *t,
                     const pt_enum_opts *o, pt_enum_fn fn, void *ctx, pt_enum_counts *counts)
{
    *counts = (pt_enum_counts){0};
    enum_state st = {.m = m, .c = c, .t = t, .fn = fn, .ctx = ctx, .counts = counts,
                     .compress_modes = o->compress_modes,
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
                st.tp_spans = pt_layout_tp_spans_nodes(&l, pt_cluster_nvlink_domain(c));
                st.cp_domain = l.cp > 1 ? cp_in_domain(c, &l) : 1;
                enum_splits(&st, o, &l);
            }
        }
    }
}
