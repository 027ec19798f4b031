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

static pt_cluster node8(int64_t memory_bytes)
{
    pt_cluster c = {.name = "c", .nodes = 1, .devices_per_node = 8};
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

int main(void)
{
    test_counts();
    test_interleaving_and_order();
    test_stop();
    return pt_check_result();
}
