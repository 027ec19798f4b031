/*
 * Enumeration tests: the counts add up, every layout handed out is valid and has
 * the world size, the fit decision follows the memory limit, the rejection counts
 * land under the expected reasons, and a callback can stop the walk.
 */
#include "check.h"
#include "planner.h"

/* GPT-2 124M's shape, built by hand: 12 heads and 12 layers. */
static pt_model gpt2(void)
{
    return (pt_model){.name = "g", .layers = 12, .hidden = 768, .heads = 12, .kv_heads = 12,
                      .ffn = 3072, .vocab = 50257, .seq = 1024, .norm = PT_NORM_LAYERNORM,
                      .act = PT_ACT_GELU, .pos = PT_POS_LEARNED, .tied_embeddings = true,
                      .bias = true, .dropout = true};
}

/* Eight CPU devices: ptrun's CPU backend trains every valid layout. */
static pt_cluster node8(int64_t memory_bytes)
{
    pt_cluster c = {.name = "c", .nodes = 1, .devices_per_node = 8};
    snprintf(c.device.name, sizeof c.device.name, "cpu-test");
    c.device.memory_bytes = memory_bytes;
    c.device.peak_flops[PT_DTYPE_BF16] = 1e15;
    return c;
}

typedef struct {
    const pt_model *m;
    const pt_cluster *c;
    const pt_train *t;
    double limit;
    int64_t seen, fit, grids[9][9]; /* by tp and pp */
    int64_t stop_after;
} walk;

static int visit(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    walk *w = ctx;
    w->seen++;
    w->fit += fits;
    CHECK_INT(pt_layout_world(l), pt_cluster_world(w->c));
    CHECK_INT(pt_layout_check(w->m, w->c, w->t->global_batch, l, NULL), 0);
    CHECK(fits == (mem->total_bytes <= w->limit));
    pt_memory again;
    pt_mem_rank_max(w->m, l, w->t, &again);
    CHECK(again.total_bytes == mem->total_bytes);
    CHECK_INT(l->n_micro * l->mbs * l->dp, w->t->global_batch);
    if (l->tp <= 8 && l->pp <= 8)
        w->grids[l->tp][l->pp]++;
    return w->stop_after && w->seen >= w->stop_after;
}

static void test_counts(void)
{
    pt_model m = gpt2();
    pt_cluster c = node8(2LL << 30); /* 2 GiB: some layouts fit, some do not */
    pt_train t;
    pt_train_default(&t, &c);
    t.global_batch = 64;
    pt_enum_opts o;
    pt_enum_opts_default(&o);
    walk w = {.m = &m, .c = &c, .t = &t, .limit = o.mem_fraction * (double)(2LL << 30)};
    pt_enum_counts n;
    pt_enum_layouts(&m, &c, &t, &o, visit, &w, &n);
    int64_t rejected = 0;
    for (int r = 0; r < PT_REJECT_COUNT; r++)
        rejected += n.rejected[r];
    CHECK_INT(n.enumerated, n.valid + rejected);
    CHECK_INT(n.valid, n.fit + n.too_big);
    CHECK_INT(w.seen, n.valid);
    CHECK_INT(w.fit, n.fit);
    CHECK(n.fit > 0 && n.too_big > 0);
    /* tp = 8 is the only divisor of 8 that does not divide 12 heads; its candidates:
     * cp = pp = dp = 1, vp 1, sp 0/1, zero 0..3, mbs 1/2/4/8, three recompute modes. */
    CHECK_INT(n.rejected[PT_REJECT_HEADS_TP], 2 * 4 * 4 * 3);
    CHECK_INT(n.rejected[PT_REJECT_WORLD], 0);
    /* pp = 8 does not divide 12 layers: every candidate with pp = 8 (tp = cp = dp = 1,
     * no sp, vp 1, zero 0..3, four mbs, three recompute, afab and 1f1b). */
    CHECK_INT(n.rejected[PT_REJECT_LAYERS_PP], 4 * 4 * 3 * 2);
    /* Every factorisation with a valid tp and pp shows up. */
    CHECK(w.grids[1][1] > 0 && w.grids[2][2] > 0 && w.grids[4][2] > 0 && w.grids[1][4] > 0);
    CHECK_INT(w.grids[8][1], 0);
}

static void test_interleaving_and_order(void)
{
    pt_model m = gpt2();
    pt_cluster c = node8(80LL << 30);
    pt_train t;
    pt_train_default(&t, &c);
    t.global_batch = 64;
    pt_enum_opts o;
    pt_enum_opts_default(&o);
    pt_err err;
    CHECK_INT(pt_order_parse("dp-tp-cp-pp", o.order, &err), 0);
    pt_enum_counts n;
    pt_enum_layouts(&m, &c, &t, &o, NULL, NULL, &n);
    /* With dp fastest, tp pairs sit dp ranks apart; on one node of 8 they never leave
     * it, on two nodes of 4 some do. */
    CHECK_INT(n.rejected[PT_REJECT_TP_SPANS_NODES], 0);
    c.devices_per_node = 4;
    c.nodes = 2;
    pt_enum_layouts(&m, &c, &t, &o, NULL, NULL, &n);
    CHECK(n.rejected[PT_REJECT_TP_SPANS_NODES] > 0);
}

static void test_stop(void)
{
    pt_model m = gpt2();
    pt_cluster c = node8(80LL << 30);
    pt_train t;
    pt_train_default(&t, &c);
    t.global_batch = 64;
    pt_enum_opts o;
    pt_enum_opts_default(&o);
    walk w = {.m = &m, .c = &c, .t = &t, .limit = 1e30, .stop_after = 7};
    pt_enum_counts n;
    pt_enum_layouts(&m, &c, &t, &o, visit, &w, &n);
    CHECK_INT(w.seen, 7);
    CHECK_INT(n.valid, 7);
}

/* The uneven splits the enumeration offers, by (pp, vp): at most one each. */
typedef struct {
    const pt_model *m;
    int64_t global_batch;
    int64_t n_uneven, split[17][4][2]; /* [pp][vp]: first, last */
    int64_t even_pp16;
    int64_t n_piped, piped_vp[17][65]; /* balanced pipeline layouts: [pp][vp] seen */
    int64_t e_alone;                   /* of them, with the embedding alone on stage 0 */
} split_walk;

static int visit_split(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    (void)mem;
    (void)fits;
    split_walk *w = ctx;
    CHECK_INT(pt_layout_check(w->m, NULL, w->global_batch, l, NULL), 0);
    if (l->pp == 16 && !l->first_layers && !l->pipe.n)
        w->even_pp16++;
    if (l->pipe.n) {
        /* Megatron-Core's balanced split: the embedding and/or the loss count as a
         * layer, every virtual stage holds as many units */
        w->n_piped++;
        CHECK(l->first_layers == 0 && l->last_layers == 0);
        int V = l->pp * l->vp;
        int64_t u = pt_stage_layers(w->m, l, 1, NULL), first = pt_stage_layers(w->m, l, 0, NULL);
        int64_t last = pt_stage_layers(w->m, l, V - 1, NULL);
        CHECK(u - first <= 1 && u - last <= 1 && first <= u && last <= u);
        CHECK(first < u || last < u);
        if (first == 0)
            w->e_alone++;
        if (l->pp <= 16)
            w->piped_vp[l->pp][l->vp]++;
        return 0;
    }
    if (!l->first_layers && !l->last_layers)
        return 0;
    w->n_uneven++;
    CHECK(l->first_layers > 0 && l->last_layers > 0);
    int64_t sum = 0;
    for (int r = 0; r < l->pp; r++)
        sum += pt_rank_layers(w->m, l, r);
    CHECK_INT(sum, w->m->layers);
    /* first and last at most two below the middle stages, within one of each other
     * beyond two stages */
    int64_t mid = pt_rank_layers(w->m, l, l->pp > 2 ? 1 : 0);
    CHECK(l->pp == 2 || (mid - l->first_layers <= 2 && mid - l->last_layers <= 2 &&
                         mid >= l->first_layers && mid >= l->last_layers));
    if (l->pp <= 16 && l->vp < 4) {
        int64_t *s = w->split[l->pp][l->vp];
        CHECK((s[0] == 0 && s[1] == 0) || (s[0] == l->first_layers && s[1] == l->last_layers));
        s[0] = l->first_layers;
        s[1] = l->last_layers;
    }
    return 0;
}

/* Llama 3 405B's 126 layers on 16 stages: only uneven splits are valid, Meta's 7, 8 x
 * 14, 7 among them; 70 layers on 12 stages get 5, 6 x 10, 5. */
static void test_uneven_splits(void)
{
    pt_model m = gpt2();
    m.layers = 126;
    pt_cluster c = node8(1LL << 50); /* everything fits */
    c.devices_per_node = 16;
    pt_train t;
    pt_train_default(&t, &c);
    t.global_batch = 64;
    pt_enum_opts o;
    pt_enum_opts_default(&o);
    o.max_mbs = 1;
    split_walk w = {.m = &m, .global_batch = t.global_batch};
    pt_enum_counts n;
    pt_enum_layouts(&m, &c, &t, &o, visit_split, &w, &n);
    CHECK_INT(w.even_pp16, 0);
    CHECK_INT(w.split[16][1][0], 7);
    CHECK_INT(w.split[16][1][1], 7);
    /* vp = 2 needs even counts: 8, 8 x 14, 6 (the lighter last stage first) */
    CHECK_INT(w.split[16][2][0], 8);
    CHECK_INT(w.split[16][2][1], 6);
    /* pp = 2 divides 126 evenly, yet 62/64 is tried (one split per vp) */
    CHECK_INT(w.split[2][1][0] + w.split[2][1][1], 126);
    CHECK(w.n_uneven > 0);
    /* few extra layouts: at most one uneven split per (tp, cp, pp, dp, vp) */
    CHECK(n.valid < 3 * (n.valid - w.n_uneven - w.n_piped));
    /* Meta's layout: 128 units, one per virtual stage with vp = 8 on 16 stages (the
     * first only the embedding, the last only the loss); vp = 1 and 2 have their
     * uneven split already, and each vp gets one */
    CHECK(w.piped_vp[16][8] > 0);
    CHECK(w.piped_vp[16][4] > 0);
    CHECK_INT(w.piped_vp[16][2], 0); /* the 8, 8 x 14, 6 split above */
    CHECK_INT(w.piped_vp[16][1], 0);
    CHECK(w.e_alone > 0);

    m.layers = 70;
    c.devices_per_node = 12;
    c.nodes = 1;
    t.global_batch = 12;
    split_walk b = {.m = &m, .global_batch = t.global_batch};
    pt_enum_layouts(&m, &c, &t, &o, visit_split, &b, &n);
    CHECK_INT(b.split[12][1][0], 5);
    CHECK_INT(b.split[12][1][1], 5);
}

/* Both of ptrun's backends train every valid layout: on GPUs the enumeration for ptrun's
 * own stack offers tp, cp and ZeRO like on the CPU, and no reason refuses a layout for
 * its backend. Fails if a backend gate comes back. */
typedef struct {
    int64_t seen, tp, cp, zero;
} gpu_walk;

static int visit_gpu(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    (void)mem;
    (void)fits;
    gpu_walk *w = ctx;
    w->seen++;
    w->tp += l->tp > 1;
    w->cp += l->cp > 1;
    w->zero += l->zero > 0;
    return 0;
}

static void test_gpu_layouts(void)
{
    pt_model m = gpt2();
    pt_cluster c = node8(80LL << 30);
    snprintf(c.device.name, sizeof c.device.name, "H100-SXM5-80GB");
    CHECK_INT(pt_cluster_backend(&c), PT_BACKEND_CUDA);
    pt_train t;
    pt_train_default(&t, &c);
    t.global_batch = 64;
    CHECK(pt_stack_is_ptrun(&t.stack));
    pt_enum_opts o;
    pt_enum_opts_default(&o);
    gpu_walk w = {0};
    pt_enum_counts n;
    pt_enum_layouts(&m, &c, &t, &o, visit_gpu, &w, &n);
    CHECK(w.seen > 0);
    CHECK(w.tp > 0);
    CHECK(w.cp > 0);
    CHECK(w.zero > 0);
    /* every candidate is either handed out or rejected by a layout rule */
    int64_t rejected = 0;
    for (int r = 0; r < PT_REJECT_COUNT; r++) {
        rejected += n.rejected[r];
        CHECK(strcmp(pt_reject_name((pt_reject)r), "backend") != 0);
    }
    CHECK_INT(n.enumerated, n.valid + rejected);
    CHECK_INT(n.rejected[PT_REJECT_HEADS_TP], 2 * 4 * 4 * 3);
    /* the CPU backend for a device named "cpu..." */
    snprintf(c.device.name, sizeof c.device.name, "cpu");
    CHECK_INT(pt_cluster_backend(&c), PT_BACKEND_CPU);
}

/* How cp communicates, as the search tries it: each kind the stack runs for cp > 1 and
 * none but p2p for cp = 1; a2a+p2p with the all-to-all filling an NVLink domain. */
typedef struct {
    int64_t by_kind[PT_CPC_COUNT], bad_a2a_group, no_cp_other;
} cp_walk;

static int visit_cp(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    (void)mem;
    (void)fits;
    cp_walk *w = ctx;
    if (l->cp == 1) {
        w->no_cp_other += l->cp_comm != PT_CPC_P2P;
        return 0;
    }
    w->by_kind[l->cp_comm]++;
    /* two nodes of 4, tp-cp-dp-pp: a domain holds 4/tp cp ranks */
    if (l->cp_comm == PT_CPC_A2A_P2P && (l->cp_a2a != 4 / l->tp || l->cp % l->cp_a2a))
        w->bad_a2a_group++;
    return 0;
}

static void test_cp_comm(void)
{
    pt_model m = gpt2(); /* 12 heads: a degree of 8 breaks the heads rule */
    pt_cluster c = node8(80LL << 30);
    c.nodes = 2;
    c.devices_per_node = 4;
    pt_train t;
    pt_train_default(&t, &c);
    t.global_batch = 64;
    pt_enum_opts o;
    pt_enum_opts_default(&o);
    pt_err err;
    for (int core = 0; core < 2; core++) {
        CHECK_INT(pt_stack_get(core ? "megatron-core" : "ptrun", &t.stack, &err), 0);
        cp_walk w;
        memset(&w, 0, sizeof w);
        pt_enum_counts n;
        pt_enum_layouts(&m, &c, &t, &o, visit_cp, &w, &n);
        CHECK(w.by_kind[PT_CPC_P2P] > 0 && w.by_kind[PT_CPC_A2A] > 0);
        CHECK(w.by_kind[PT_CPC_A2A_P2P] > 0);
        CHECK_INT(w.by_kind[PT_CPC_ALLGATHER] > 0, core); /* ptrun runs no all-gather */
        CHECK_INT(w.bad_a2a_group, 0);
        CHECK_INT(w.no_cp_other, 0);
        /* a2a at tp = 4 (3 heads a rank) and cp = 2: tried, as the split does not exist
         * (one cp rank a node) and the ring would send more; rejected */
        CHECK(n.rejected[PT_REJECT_HEADS_CP_A2A] > 0);
        CHECK_INT(n.rejected[PT_REJECT_CP_COMM_NO_CP], 0);
        CHECK_INT(n.rejected[PT_REJECT_CP_A2A], 0);
    }
}

/* Recompute lists (Megatron-Core's modules) in the search: tried for a mixture of
 * experts on a stack that names them, and only where the list fits and the option
 * before it (none, then the lighter list) does not. */
typedef struct {
    const pt_model *m;
    const pt_train *t;
    double limit;
    int64_t lists, lists_fitting, lighter_fits, none_fit, none_too_big;
} rec_walk;

static int visit_rec(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    rec_walk *w = ctx;
    if (l->recompute == PT_RECOMPUTE_NONE) {
        w->none_fit += fits;
        w->none_too_big += !fits;
    }
    if (!l->recompute_modules)
        return 0;
    w->lists++;
    w->lists_fitting += fits && mem->total_bytes <= w->limit;
    pt_layout lighter = *l;
    if (l->recompute_modules & (1u << PT_RMOD_MOE)) {
        CHECK_INT(l->recompute_modules, 1u << PT_RMOD_LAYERNORM | 1u << PT_RMOD_MOE);
        lighter.recompute_modules = 1u << PT_RMOD_LAYERNORM | 1u << PT_RMOD_MOE_ACT;
    } else {
        CHECK_INT(l->recompute_modules, 1u << PT_RMOD_LAYERNORM | 1u << PT_RMOD_MOE_ACT);
        lighter.recompute = PT_RECOMPUTE_NONE;
        lighter.recompute_modules = 0;
    }
    pt_memory m;
    pt_mem_rank_max(w->m, &lighter, w->t, &m);
    w->lighter_fits += m.total_bytes <= w->limit;
    return 0;
}

static void test_recompute_lists(void)
{
    pt_model m;
    pt_err err;
    CHECK_INT(pt_model_get("tiny-moe", &m, &err), 0);
    m.seq = 4096; /* activations worth recomputing */
    pt_cluster c = node8(80LL << 30);
    pt_train t;
    pt_train_default(&t, &c);
    t.global_batch = 64;
    CHECK_INT(pt_stack_get("megatron-core", &t.stack, &err), 0);
    /* a limit between one layout's memory with no recomputation and with the lighter
     * list, so that some layouts need a list */
    pt_layout one;
    pt_layout_default(&one);
    CHECK_INT(pt_layout_parse("dp=8,ep=8,mbs=8", 8, 64, &one, &err), 0);
    pt_memory none, act;
    pt_mem_rank_max(&m, &one, &t, &none);
    one.recompute = PT_RECOMPUTE_SELECTIVE;
    one.recompute_modules = 1u << PT_RMOD_LAYERNORM | 1u << PT_RMOD_MOE_ACT;
    pt_mem_rank_max(&m, &one, &t, &act);
    CHECK(act.total_bytes < none.total_bytes);
    double limit = (act.total_bytes + none.total_bytes) / 2;
    pt_enum_opts o;
    pt_enum_opts_default(&o);
    c.device.memory_bytes = (int64_t)(limit / o.mem_fraction);
    rec_walk w = {.m = &m, .t = &t, .limit = o.mem_fraction * (double)c.device.memory_bytes};
    pt_enum_counts n;
    pt_enum_layouts(&m, &c, &t, &o, visit_rec, &w, &n);
    CHECK(w.none_fit > 0 && w.none_too_big > 0);
    CHECK(w.lists > 0);
    CHECK_INT(w.lists_fitting, w.lists);
    CHECK_INT(w.lighter_fits, 0);
    /* a dense model, or a stack without modules: no lists */
    pt_model dense = m;
    dense.moe = (pt_moe){0};
    w = (rec_walk){.m = &dense, .t = &t, .limit = w.limit};
    pt_enum_layouts(&dense, &c, &t, &o, visit_rec, &w, &n);
    CHECK_INT(w.lists, 0);
    CHECK_INT(pt_stack_get("ptrun", &t.stack, &err), 0);
    w = (rec_walk){.m = &m, .t = &t, .limit = w.limit};
    pt_enum_layouts(&m, &c, &t, &o, visit_rec, &w, &n);
    CHECK_INT(w.lists, 0);
}

int main(void)
{
    test_recompute_lists();
    test_gpu_layouts();
    test_counts();
    test_uneven_splits();
    test_interleaving_and_order();
    test_stop();
    test_cp_comm();
    return pt_check_result();
}
