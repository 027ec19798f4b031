/*
 * Rank grid tests: coordinates and ranks invert each other for every order, and
 * the 16-rank example with tp=2, pp=4 (dp=2) gives Megatron-LM's groups.
 */
#include "check.h"
#include "planner.h"

#include <stdlib.h>

static void check_group(const pt_grid *g, pt_group_kind kind, int64_t rank,
                        const int64_t *want, int n)
{
    int64_t got[64];
    CHECK_INT(pt_grid_group_size(g, kind), n);
    int idx = pt_grid_group(g, kind, rank, got);
    CHECK(idx >= 0 && got[idx] == rank);
    for (int i = 0; i < n; i++)
        CHECK_INT(got[i], want[i]);
}

static void test_sixteen_rank_example(void)
{
    pt_layout l;
    pt_err err;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,pp=4", 16, 0, &l, &err), 0);
    CHECK_INT(l.dp, 2);
    pt_grid g;
    pt_grid_init(&g, &l);
    CHECK_INT(g.world, 16);
    /* tp groups [0,1],[2,3],... */
    for (int64_t r = 0; r < 16; r += 2)
        check_group(&g, PT_GROUP_TP, r, (int64_t[]){r, r + 1}, 2);
    /* dp groups [0,2],[1,3],[4,6],[5,7],... */
    check_group(&g, PT_GROUP_DP, 0, (int64_t[]){0, 2}, 2);
    check_group(&g, PT_GROUP_DP, 1, (int64_t[]){1, 3}, 2);
    check_group(&g, PT_GROUP_DP, 4, (int64_t[]){4, 6}, 2);
    check_group(&g, PT_GROUP_DP, 7, (int64_t[]){5, 7}, 2);
    check_group(&g, PT_GROUP_DP, 14, (int64_t[]){12, 14}, 2);
    /* pp groups [0,4,8,12],[1,5,9,13],... */
    check_group(&g, PT_GROUP_PP, 0, (int64_t[]){0, 4, 8, 12}, 4);
    check_group(&g, PT_GROUP_PP, 9, (int64_t[]){1, 5, 9, 13}, 4);
    check_group(&g, PT_GROUP_PP, 15, (int64_t[]){3, 7, 11, 15}, 4);
    /* cp = 1: the gradient-reduction group is the dp group, tp*cp the tp group. */
    check_group(&g, PT_GROUP_DPCP, 5, (int64_t[]){5, 7}, 2);
    check_group(&g, PT_GROUP_TPCP, 5, (int64_t[]){4, 5}, 2);
    CHECK(!pt_grid_group_crosses_nodes(&g, PT_GROUP_TP, 8));
    CHECK(pt_grid_group_crosses_nodes(&g, PT_GROUP_PP, 8));
}

static void test_combined_groups(void)
{
    pt_layout l;
    pt_err err;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,cp=2,dp=2,pp=1", 0, 0, &l, &err), 0);
    pt_grid g;
    pt_grid_init(&g, &l);
    /* strides: tp 1, cp 2, dp 4 */
    check_group(&g, PT_GROUP_CP, 1, (int64_t[]){1, 3}, 2);
    check_group(&g, PT_GROUP_DP, 1, (int64_t[]){1, 5}, 2);
    check_group(&g, PT_GROUP_DPCP, 1, (int64_t[]){1, 3, 5, 7}, 4);
    check_group(&g, PT_GROUP_TPCP, 6, (int64_t[]){4, 5, 6, 7}, 4);
    /* without an all-to-all its groups are single ranks; with a2a the cp group */
    check_group(&g, PT_GROUP_CPA2A, 3, (int64_t[]){3}, 1);
    CHECK_INT(pt_layout_parse("tp=2,cp=2,dp=2,pp=1,cp_comm=a2a", 0, 0, &l, &err), 0);
    pt_grid_init(&g, &l);
    check_group(&g, PT_GROUP_CPA2A, 3, (int64_t[]){1, 3}, 2);
    /* a2a+p2p: pairs of consecutive cp ranks (stride 2 here), the ring across them */
    CHECK_INT(pt_layout_parse("tp=2,cp=4,dp=1,pp=1,cp_comm=a2a+p2p,cp_a2a=2", 0, 0, &l, &err),
              0);
    pt_grid_init(&g, &l);
    check_group(&g, PT_GROUP_CPA2A, 0, (int64_t[]){0, 2}, 2);
    check_group(&g, PT_GROUP_CPA2A, 7, (int64_t[]){5, 7}, 2);
    check_group(&g, PT_GROUP_CPA2A, 4, (int64_t[]){4, 6}, 2);
    check_group(&g, PT_GROUP_CP, 4, (int64_t[]){0, 2, 4, 6}, 4);
    /* its ring: between the pairs' ranks at the same place, cp ranks 0 <-> 2, 1 <-> 3 */
    CHECK_INT(pt_grid_cp_ring_peer(&g, 0, 1), 4);
    CHECK_INT(pt_grid_cp_ring_peer(&g, 0, -1), 4);
    CHECK_INT(pt_grid_cp_ring_peer(&g, 3, 1), 7);
    CHECK_INT(pt_grid_cp_ring_peer(&g, 7, -1), 3);
    /* without an all-to-all, every cp rank in order, wrapping */
    CHECK_INT(pt_layout_parse("tp=2,cp=4,dp=1,pp=1,cp_comm=p2p", 0, 0, &l, &err), 0);
    pt_grid_init(&g, &l);
    CHECK_INT(pt_grid_cp_ring_peer(&g, 1, 1), 3);
    CHECK_INT(pt_grid_cp_ring_peer(&g, 1, -1), 7);
    CHECK_INT(pt_grid_cp_ring_peer(&g, 6, 1), 0);
}

static void test_round_trip_all_orders(void)
{
    static const char *orders[] = {"tp-cp-dp-pp", "pp-dp-cp-tp", "dp-tp-pp-cp", "cp-pp-tp-dp"};
    for (size_t o = 0; o < sizeof orders / sizeof *orders; o++) {
        pt_layout l;
        pt_err err;
        char text[128];
        pt_layout_default(&l);
        snprintf(text, sizeof text, "tp=2,cp=3,dp=2,pp=5,order=%s", orders[o]);
        CHECK_INT(pt_layout_parse(text, 0, 0, &l, &err), 0);
        pt_grid g;
        pt_grid_init(&g, &l);
        CHECK_INT(g.world, 60);
        /* The fastest dimension has stride 1. */
        CHECK_INT(g.stride[l.order[0]], 1);
        int seen[60] = {0};
        for (int64_t r = 0; r < g.world; r++) {
            int c[PT_NDIM];
            pt_grid_coords(&g, r, c);
            CHECK_INT(pt_grid_rank(&g, c), r);
            seen[r]++;
            /* Every rank appears in exactly one group of each kind, of the right size. */
            for (int k = 0; k < PT_GROUP_COUNT; k++) {
                int64_t members[64];
                int n = pt_grid_group_size(&g, (pt_group_kind)k);
                CHECK(pt_grid_group(&g, (pt_group_kind)k, r, members) >= 0);
                for (int i = 1; i < n; i++)
                    CHECK(members[i - 1] < members[i]);
            }
        }
        for (int r = 0; r < 60; r++)
            CHECK_INT(seen[r], 1);
    }
}

static void test_order_changes_node_crossing(void)
{
    pt_layout l;
    pt_err err;
    pt_layout_default(&l);
    /* With dp fastest, the tp pair is {r, r+8}: it crosses 8-device nodes. */
    CHECK_INT(pt_layout_parse("tp=2,dp=8,order=dp-tp-cp-pp", 0, 0, &l, &err), 0);
    pt_grid g;
    pt_grid_init(&g, &l);
    check_group(&g, PT_GROUP_TP, 3, (int64_t[]){3, 11}, 2);
    CHECK(pt_grid_group_crosses_nodes(&g, PT_GROUP_TP, 8));
    CHECK(!pt_grid_group_crosses_nodes(&g, PT_GROUP_TP, 16));
    CHECK(!pt_grid_group_crosses_nodes(&g, PT_GROUP_DP, 8));
}

/* Parallel folding: the experts' etp x ep x edp grid over each stage's tp·cp·dp ranks,
 * numbered in the rank order (Megatron-Core's expert groups). */
static void test_expert_groups(void)
{
    pt_layout l;
    pt_err err;
    pt_layout_default(&l);
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,sp=1,dp=4,pp=2,ep=4", 16, 0, &l, &err), 0);
    pt_grid g;
    pt_grid_init(&g, &l);
    CHECK(g.ep == 4 && g.etp == 1 && g.edp == 2);
    check_group(&g, PT_GROUP_EP, 0, (int64_t[]){0, 1, 2, 3}, 4);
    check_group(&g, PT_GROUP_EP, 6, (int64_t[]){4, 5, 6, 7}, 4);
    check_group(&g, PT_GROUP_EP, 9, (int64_t[]){8, 9, 10, 11}, 4); /* the second stage */
    check_group(&g, PT_GROUP_EDP, 1, (int64_t[]){1, 5}, 2);
    check_group(&g, PT_GROUP_EDP, 14, (int64_t[]){10, 14}, 2);
    check_group(&g, PT_GROUP_ETP, 5, (int64_t[]){5}, 1);
    /* etp fastest, then ep: etp 2 x ep 2 x edp 2 on one stage of 8 */
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,sp=1,dp=4,ep=2,etp=2", 8, 0, &l, &err), 0);
    pt_grid_init(&g, &l);
    check_group(&g, PT_GROUP_ETP, 3, (int64_t[]){2, 3}, 2);
    check_group(&g, PT_GROUP_EP, 1, (int64_t[]){1, 3}, 2);
    check_group(&g, PT_GROUP_EDP, 6, (int64_t[]){2, 6}, 2);
    /* with pp first in the order the stage's ranks are not consecutive; the places are
     * still taken in the order of the other dimensions */
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("dp=4,pp=2,ep=4,order=pp-tp-cp-dp", 8, 0, &l, &err), 0);
    pt_grid_init(&g, &l);
    check_group(&g, PT_GROUP_EP, 0, (int64_t[]){0, 2, 4, 6}, 4);
    check_group(&g, PT_GROUP_EP, 7, (int64_t[]){1, 3, 5, 7}, 4);
    /* every rank in exactly one group of each kind, of the group's size */
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,sp=1,cp=2,dp=4,pp=2,ep=4,etp=2", 32, 0, &l, &err), 0);
    pt_grid_init(&g, &l);
    for (int k = PT_GROUP_EP; k <= PT_GROUP_EDP; k++) {
        int seen[32] = {0};
        int64_t m[32];
        for (int64_t r = 0; r < 32; r++) {
            int n = pt_grid_group_size(&g, (pt_group_kind)k);
            pt_grid_group(&g, (pt_group_kind)k, r, m);
            if (m[0] == r)
                for (int i = 0; i < n; i++)
                    seen[m[i]]++;
        }
        for (int r = 0; r < 32; r++)
            CHECK_INT(seen[r], 1);
    }
}

int main(void)
{
    test_expert_groups();
    test_sixteen_rank_example();
    test_combined_groups();
    test_round_trip_all_orders();
    test_order_changes_node_crossing();
    return pt_check_result();
}
