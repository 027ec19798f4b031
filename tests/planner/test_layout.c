/*
 * Layout tests: the string form parses and prints back, bad strings are refused
 * with a message naming the key or value, and each validity rule rejects exactly
 * the layouts it names.
 */
#include "check.h"
#include "planner.h"

/* A LLaMA-3-8B-shaped model and one 8-GPU node, built by hand so this test does
 * not depend on the built-in tables. */
static pt_model model(void)
{
    return (pt_model){.name = "m", .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8,
                      .ffn = 14336, .vocab = 128256, .seq = 8192, .norm = PT_NORM_RMSNORM,
                      .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE};
}

static pt_cluster cluster(int nodes)
{
    pt_cluster c = {.name = "c", .nodes = nodes, .devices_per_node = 8};
    c.device.memory_bytes = 80LL << 30;
    return c;
}

static void test_parse_format(void)
{
    pt_layout l, back;
    pt_err err;
    char text[256];
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=8,pp=4,vp=2,cp=1,dp=2,zero=1,mbs=1,recompute=selective,"
                              "sp=1,schedule=interleaved", 64, 256, &l, &err), 0);
    CHECK_INT(l.tp, 8);
    CHECK_INT(l.pp, 4);
    CHECK_INT(l.vp, 2);
    CHECK_INT(l.dp, 2);
    CHECK_INT(l.zero, 1);
    CHECK(l.sp);
    CHECK_INT(l.recompute, PT_RECOMPUTE_SELECTIVE);
    CHECK_INT(l.schedule, PT_SCHED_INTERLEAVED);
    CHECK_INT(l.n_micro, 128); /* 256 / (1 * 2) */
    pt_layout_format(&l, text, sizeof text);
    pt_layout_default(&back);
    CHECK_INT(pt_layout_parse(text, 0, 256, &back, &err), 0);
    char again[256];
    pt_layout_format(&back, again, sizeof again);
    CHECK(strcmp(text, again) == 0);
    CHECK_INT(back.n_micro, l.n_micro);

    /* dp derived from the world, interleaved implied by vp > 1. */
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,pp=2,vp=2", 16, 64, &l, &err), 0);
    CHECK_INT(l.dp, 4);
    CHECK_INT(l.schedule, PT_SCHED_INTERLEAVED);
    CHECK_INT(l.n_micro, 16);
    /* tp_overlap is written only when on, and reads back. */
    CHECK(strstr(text, "tp_overlap") == NULL);
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,sp=1,tp_overlap=1", 2, 8, &l, &err), 0);
    CHECK(l.tp_overlap);
    pt_layout_format(&l, text, sizeof text);
    CHECK(strstr(text, ",tp_overlap=1") != NULL);
    pt_layout_default(&back);
    CHECK_INT(pt_layout_parse(text, 0, 8, &back, &err), 0);
    CHECK(back.tp_overlap);
    /* Rank order. */
    CHECK_INT(pt_layout_parse("order=pp-dp-cp-tp", 0, 0, &l, &err), 0);
    CHECK_INT(l.order[0], PT_DIM_PP);
    CHECK_INT(l.order[3], PT_DIM_TP);
}

static void expect_parse_error(const char *text, int64_t world, const char *needle)
{
    pt_layout l;
    pt_err err = {""};
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse(text, world, 0, &l, &err), -1);
    CHECK_STR_HAS(err.msg, needle);
}

static void test_parse_errors(void)
{
    /* blanks around whole items are allowed */
    pt_layout l;
    pt_err err = {""};
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse(" tp=2, pp=2 ", 0, 0, &l, &err), 0);
    CHECK_INT(l.tp, 2);
    CHECK_INT(l.pp, 2);
    expect_parse_error("tp=2,foo=3", 0, "unknown key 'foo'");
    expect_parse_error("", 0, "layout: empty");
    expect_parse_error("  ", 0, "layout: empty");
    expect_parse_error("tp=1,,", 0, "an empty item");
    expect_parse_error(",tp=1", 0, "an empty item");
    expect_parse_error("tp=1,,pp=1", 0, "an empty item");
    expect_parse_error("tp= 1", 0, "no blank around '='");
    expect_parse_error("tp =1", 0, "no blank around '='");
    expect_parse_error("=1", 0, "no blank around '='");
    expect_parse_error("tp=two", 0, "tp=two");
    expect_parse_error("tp=0", 0, "tp=0");
    expect_parse_error("tp=2,tp=4", 0, "'tp' given twice");
    expect_parse_error("zero=4", 0, "zero=4");
    expect_parse_error("sp=yes", 0, "sp=yes");
    expect_parse_error("recompute=most", 0, "none, selective, full");
    /* Megatron-Core's recompute modules: a '+' list, written back in one order */
    pt_layout back;
    char text[256];
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("recompute=moe_act+layernorm", 1, 8, &l, &err), 0);
    CHECK_INT(l.recompute, PT_RECOMPUTE_SELECTIVE);
    CHECK_INT(l.recompute_modules, 1u << PT_RMOD_LAYERNORM | 1u << PT_RMOD_MOE_ACT);
    CHECK(pt_layout_recomputes(&l, PT_RMOD_MOE_ACT) && !pt_layout_recomputes(&l, PT_RMOD_MOE));
    CHECK(!pt_layout_recomputes(&l, PT_RMOD_CORE_ATTN));
    pt_layout_format(&l, text, sizeof text);
    CHECK_STR_HAS(text, "recompute=layernorm+moe_act,");
    pt_layout_default(&back);
    CHECK_INT(pt_layout_parse(text, 0, 8, &back, &err), 0);
    CHECK_INT(back.recompute_modules, l.recompute_modules);
    /* plain selective is the stack's own policy: the attention core for Megatron */
    CHECK_INT(pt_layout_parse("recompute=selective", 1, 8, &l, &err), 0);
    CHECK(l.recompute_modules == 0 && pt_layout_recomputes(&l, PT_RMOD_CORE_ATTN));
    expect_parse_error("recompute=norm+act", 0, "modules joined by '+', each once, of "
                                                "core_attn, layernorm, mlp, moe_act, moe");
    expect_parse_error("recompute=moe+moe", 0, "recompute=moe+moe: expected");
    expect_parse_error("recompute=moe+", 0, "a module name after the last '+'");
    expect_parse_error("recompute=", 0, "recompute is empty");
    expect_parse_error("schedule=gpipe", 0, "afab, 1f1b, interleaved");
    expect_parse_error("tp=2,pp", 0, "'pp' is not key=value");
    expect_parse_error("order=tp-tp-dp-pp", 0, "bad rank order");
    expect_parse_error("order=tp-cp-dp", 0, "bad rank order");
    expect_parse_error("tp=3", 8, "does not divide the world size 8");
    expect_parse_error("mbs=99999999999999999999", 0, "mbs=");
}

/* Parses `text` for the model above on `nodes` nodes and returns the broken-rule mask. */
static uint32_t rules(const char *text, int nodes, int64_t global_batch)
{
    pt_model m = model();
    pt_cluster c = cluster(nodes);
    pt_layout l;
    pt_err err;
    pt_layout_default(&l);
    if (pt_layout_parse(text, pt_cluster_world(&c), global_batch, &l, &err)) {
        fprintf(stderr, "unexpected parse error: %s\n", err.msg);
        pt_check_failures++;
        return 0;
    }
    uint32_t mask;
    int n = pt_layout_check(&m, &c, global_batch, &l, &mask);
    CHECK_INT(n, __builtin_popcount(mask));
    return mask;
}

#define ONLY(r) (1u << (r))

static void test_rules(void)
{
    CHECK_INT(rules("tp=8", 1, 64), 0);
    CHECK_INT(rules("tp=2,pp=2,vp=2,dp=2,zero=1,sp=1,recompute=full", 1, 64), 0);
    CHECK_INT(rules("tp=8,dp=2", 1, 64), ONLY(PT_REJECT_WORLD));
    /* 32 heads, 8 KV heads: tp=16 and 32 replicate each KV head over 2 and 4 ranks
     * (allowed), but cross 8-GPU nodes. */
    CHECK_INT(rules("tp=16", 2, 64), ONLY(PT_REJECT_TP_SPANS_NODES));
    CHECK_INT(rules("tp=32,dp=1", 4, 64), ONLY(PT_REJECT_TP_SPANS_NODES));
    /* 6 KV heads (of 48): tp=4 neither divides them nor is divided by them. */
    {
        pt_model m = model();
        m.heads = 48;
        m.hidden = 6144;
        m.kv_heads = 6;
        pt_cluster c = cluster(1);
        pt_layout l;
        pt_err err;
        uint32_t mask;
        pt_layout_default(&l);
        CHECK_INT(pt_layout_parse("tp=4,dp=2", 8, 64, &l, &err), 0);
        pt_layout_check(&m, &c, 64, &l, &mask);
        CHECK(mask & ONLY(PT_REJECT_KV_HEADS_TP));
        pt_layout_default(&l);
        CHECK_INT(pt_layout_parse("tp=2,dp=4", 8, 64, &l, &err), 0);
        pt_layout_check(&m, &c, 64, &l, &mask);
        CHECK(!(mask & ONLY(PT_REJECT_KV_HEADS_TP)));
    }
    CHECK_INT(rules("pp=8,dp=1,vp=8", 1, 64), ONLY(PT_REJECT_LAYERS_PP)); /* 32 % 64 */
    CHECK_INT(rules("pp=8,dp=1,vp=4", 1, 64), 0);
    CHECK_INT(rules("cp=8", 1, 64), 0);
    CHECK_INT(rules("tp=2,sp=1,dp=4", 1, 64), 0);
    CHECK_INT(rules("dp=8,mbs=3", 1, 64), ONLY(PT_REJECT_BATCH_DP));
    CHECK_INT(rules("dp=8", 1, 100), ONLY(PT_REJECT_BATCH_DP));
    CHECK_INT(rules("sp=1,dp=8", 1, 64), ONLY(PT_REJECT_SP_WITHOUT_TP));
    CHECK_INT(rules("tp=2,dp=4,tp_overlap=1", 1, 64), ONLY(PT_REJECT_OVERLAP_WITHOUT_SP));
    CHECK_INT(rules("tp=2,sp=1,dp=4,tp_overlap=1", 1, 64), 0);
    CHECK_INT(rules("schedule=interleaved,pp=2", 1, 64), ONLY(PT_REJECT_SCHEDULE_VP));
    CHECK_INT(rules("pp=2,vp=2,schedule=1f1b", 1, 64), ONLY(PT_REJECT_SCHEDULE_VP));
    /* A global batch of 6 over dp = 2 gives 3 micro-batches: not a multiple of pp = 4. */
    CHECK_INT(rules("pp=4,vp=2,dp=2", 1, 6), ONLY(PT_REJECT_INTERLEAVED_MICRO));
    CHECK_INT(rules("pp=4,vp=2,dp=2", 1, 8), 0);
    CHECK_INT(rules("tp=8,zero=1", 1, 64), ONLY(PT_REJECT_ZERO_NO_DP));
    CHECK_INT(rules("tp=4,cp=2,zero=3", 1, 64), 0); /* sharded over cp */
    CHECK_INT(rules("pp=2,dp=4,zero=2", 1, 64), ONLY(PT_REJECT_ZERO_PP));
    CHECK_INT(rules("pp=2,dp=4,zero=1", 1, 64), 0);
    /* tp=2 with dp fastest puts a tp pair on ranks r and r+8: across nodes. */
    CHECK_INT(rules("tp=2,dp=8,order=dp-tp-cp-pp", 2, 64), ONLY(PT_REJECT_TP_SPANS_NODES));
    CHECK_INT(rules("tp=2,dp=8", 2, 64), 0);
}

static void test_sequence_rules(void)
{
    pt_model m = model();
    pt_cluster c = cluster(1);
    pt_layout l;
    pt_err err;
    uint32_t mask;
    m.seq = 24;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("cp=8", 8, 64, &l, &err), 0);
    pt_layout_check(&m, &c, 64, &l, &mask);
    CHECK_INT(mask, ONLY(PT_REJECT_SEQ_CP)); /* 24 % 16 != 0 */
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("cp=4,tp=2", 8, 64, &l, &err), 0);
    pt_layout_check(&m, &c, 64, &l, &mask);
    CHECK_INT(mask, 0); /* 24 % 8 == 0 */
    m.seq = 40;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=4,cp=2,sp=1", 8, 64, &l, &err), 0);
    pt_layout_check(&m, &c, 64, &l, &mask);
    CHECK_INT(mask, 0); /* 40 / 2 = 20 per cp rank, divisible by tp = 4 */
    m.seq = 36;         /* 36 / 2 = 18 per cp rank: not divisible by tp = 4 */
    pt_layout_check(&m, &c, 64, &l, &mask);
    CHECK_INT(mask, ONLY(PT_REJECT_SEQ_SP));
}

static void test_explain(void)
{
    pt_model m = model();
    pt_cluster c = cluster(1);
    pt_layout l;
    pt_err err;
    char buf[256];
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=3,dp=1", 0, 64, &l, &err), 0);
    pt_reject_explain(PT_REJECT_HEADS_TP, &m, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "heads (32)");
    CHECK_STR_HAS(buf, "tp (3)");
    pt_reject_explain(PT_REJECT_WORLD, &m, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "= 3");
    CHECK_STR_HAS(buf, "8 ranks");
    /* sizes a plan.json allows (2^30 per field): the messages' products do not wrap */
    pt_layout_default(&l);
    l.cp = 1 << 30;
    l.dp = 1 << 30;
    l.zero = 1;
    pt_reject_explain(PT_REJECT_SEQ_CP, &m, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "2*cp = 2147483648");
    pt_reject_explain(PT_REJECT_ZERO_NO_DP, &m, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "dp*cp = 1152921504606846976");
    l.tp = l.pp = 1 << 30;
    CHECK_INT(pt_layout_world(&l), -1); /* 2^120: beyond int64, said so */
    pt_reject_explain(PT_REJECT_WORLD, &m, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "more than 2^63 ranks");
    for (int r = 0; r < PT_REJECT_COUNT; r++) {
        CHECK(strlen(pt_reject_name((pt_reject)r)) > 0);
        CHECK(strlen(pt_reject_describe((pt_reject)r)) > 0);
    }
}

/* ---- How cp communicates (cp_comm, cp_a2a) ------------------------------------------ */

static void test_cp_comm_parse(void)
{
    pt_layout l, back;
    pt_err err;
    char text[256], again[256];
    /* p2p, the default, is not written; the others are, cp_a2a only with a2a+p2p */
    pt_layout_default(&l);
    CHECK_INT(l.cp_comm, PT_CPC_P2P);
    CHECK_INT(pt_layout_parse("cp=8", 8, 64, &l, &err), 0);
    pt_layout_format(&l, text, sizeof text);
    CHECK(strstr(text, "cp_comm") == NULL && strstr(text, "cp_a2a") == NULL);
    static const char *const kinds[] = {"cp=8,cp_comm=p2p", "cp=8,cp_comm=all_gather",
                                        "cp=8,cp_comm=a2a", "cp=8,cp_comm=a2a+p2p,cp_a2a=4"};
    static const pt_cp_comm want[] = {PT_CPC_P2P, PT_CPC_ALLGATHER, PT_CPC_A2A,
                                      PT_CPC_A2A_P2P};
    static const int degree[] = {1, 1, 8, 4};
    for (int k = 0; k < 4; k++) {
        pt_layout_default(&l);
        CHECK_INT(pt_layout_parse(kinds[k], 8, 64, &l, &err), 0);
        CHECK_INT(l.cp_comm, want[k]);
        CHECK_INT(l.cp_a2a, k == 3 ? 4 : 0);
        CHECK_INT(pt_layout_a2a(&l), degree[k]);
        pt_layout_format(&l, text, sizeof text);
        CHECK_INT(strstr(text, "cp_comm=") != NULL, k > 0);
        CHECK_INT(strstr(text, ",cp_a2a=4") != NULL, k == 3);
        pt_layout_default(&back);
        CHECK_INT(pt_layout_parse(text, 0, 64, &back, &err), 0);
        CHECK_INT(back.cp_comm, l.cp_comm);
        CHECK_INT(back.cp_a2a, l.cp_a2a);
        pt_layout_format(&back, again, sizeof again);
        CHECK(strcmp(text, again) == 0);
    }
    CHECK_STR_HAS(pt_cp_comm_name(PT_CPC_A2A_P2P), "a2a+p2p");
    CHECK_STR_HAS(pt_cp_comm_name(PT_CPC_COUNT), "?");
    expect_parse_error("cp=8,cp_comm=ring", 8, "p2p, all_gather, a2a, a2a+p2p");
    expect_parse_error("cp=8,cp_comm=a2a,cp_comm=p2p", 8, "'cp_comm' given twice");
    expect_parse_error("cp=8,cp_a2a=0,cp_comm=a2a+p2p", 8, "cp_a2a=0");
    expect_parse_error("cp=8,cp_a2a=two,cp_comm=a2a+p2p", 8, "cp_a2a=two");
    expect_parse_error("cp=8,cp_a2a=2", 8, "applies only with cp_comm=a2a+p2p (cp_comm=p2p)");
    expect_parse_error("cp=8,cp_comm=a2a,cp_a2a=2", 8, "whose all-to-all spans all of cp");
    expect_parse_error("cp=8,cp_comm=a2a+p2p", 8, "needs cp_a2a=N");
}

static void test_cp_comm_rules(void)
{
    /* 32 heads, 8 KV heads, seq 8192, one node of 8 */
    CHECK_INT(rules("cp=8,cp_comm=all_gather", 1, 64), 0);
    CHECK_INT(rules("cp=8,cp_comm=a2a", 1, 64), 0); /* 32 % 8; 8 KV heads, 1 each */
    CHECK_INT(rules("tp=2,cp=4,cp_comm=a2a", 1, 64), 0); /* 16 % 4; 4 KV heads % 4 */
    CHECK_INT(rules("tp=4,cp=2,cp_comm=a2a", 1, 64), 0); /* 2 KV heads, 1 each */
    CHECK_INT(rules("tp=8,cp=2,cp_comm=a2a", 2, 64), 0); /* 1 KV head replicated to 2 */
    CHECK_INT(rules("cp=8,cp_comm=a2a+p2p,cp_a2a=2", 1, 64), 0);
    CHECK_INT(rules("cp=8,cp_comm=a2a+p2p,cp_a2a=8", 1, 64), 0);
    CHECK_INT(rules("cp_comm=a2a,dp=8", 1, 64), ONLY(PT_REJECT_CP_COMM_NO_CP));
    CHECK_INT(rules("cp_comm=all_gather,dp=8", 1, 64), ONLY(PT_REJECT_CP_COMM_NO_CP));
    /* 3 divides neither cp nor the heads: cp_a2a is the first rule broken */
    CHECK_INT(__builtin_ctz(rules("cp=8,cp_comm=a2a+p2p,cp_a2a=3", 1, 64)), PT_REJECT_CP_A2A);
    /* set by hand, as a plan file may: cp_a2a with another kind, none with a2a+p2p */
    {
        pt_model m = model();
        pt_cluster c = cluster(1);
        pt_layout l;
        pt_err err;
        uint32_t mask;
        char buf[256];
        pt_layout_default(&l);
        CHECK_INT(pt_layout_parse("cp=8,cp_comm=a2a", 8, 64, &l, &err), 0);
        l.cp_a2a = 2;
        pt_layout_check(&m, &c, 64, &l, &mask);
        CHECK_INT(mask, ONLY(PT_REJECT_CP_A2A));
        pt_reject_explain(PT_REJECT_CP_A2A, &m, &c, 64, &l, buf, sizeof buf);
        CHECK_STR_HAS(buf, "cp_a2a = 2 applies only with cp_comm=a2a+p2p (cp_comm=a2a)");
        l.cp_comm = PT_CPC_A2A_P2P;
        l.cp_a2a = 0;
        pt_layout_check(&m, &c, 64, &l, &mask);
        CHECK(mask & ONLY(PT_REJECT_CP_A2A));
        l.cp_comm = PT_CPC_COUNT; /* out of range: refused, not indexed */
        CHECK(pt_layout_check(&m, &c, 64, &l, &mask) > 0);
    }
    /* a degree of 16 over 32 heads with tp = 4: 8 heads a rank */
    CHECK_INT(rules("tp=4,cp=16,cp_comm=a2a,dp=1", 8, 64) & ONLY(PT_REJECT_HEADS_CP_A2A),
              ONLY(PT_REJECT_HEADS_CP_A2A));
    /* 6 KV heads of 48 over tp = 2: 3 a rank, against a degree of 2 */
    {
        pt_model m = model();
        m.heads = 48;
        m.hidden = 6144;
        m.kv_heads = 6;
        pt_cluster c = cluster(1);
        pt_layout l;
        pt_err err;
        uint32_t mask;
        char buf[256];
        pt_layout_default(&l);
        CHECK_INT(pt_layout_parse("tp=2,cp=4,cp_comm=a2a+p2p,cp_a2a=2", 8, 64, &l, &err), 0);
        pt_layout_check(&m, &c, 64, &l, &mask);
        CHECK_INT(mask, ONLY(PT_REJECT_KV_HEADS_CP_A2A));
        pt_reject_explain(PT_REJECT_KV_HEADS_CP_A2A, &m, &c, 64, &l, buf, sizeof buf);
        CHECK_STR_HAS(buf, "KV heads per tp rank (3)");
        CHECK_STR_HAS(buf, "all-to-all degree 2 (cp_comm=a2a+p2p)");
        /* 24 heads a rank against a degree of 4 pass; 3 KV heads neither divide nor are
         * divided by 4 */
        pt_layout_default(&l);
        CHECK_INT(pt_layout_parse("tp=2,cp=4,cp_comm=a2a", 8, 64, &l, &err), 0);
        pt_layout_check(&m, &c, 64, &l, &mask);
        CHECK_INT(mask, ONLY(PT_REJECT_KV_HEADS_CP_A2A));
        /* 48 heads, tp = 1, degree 32 */
        m.seq = 8192;
        pt_layout_default(&l);
        CHECK_INT(pt_layout_parse("cp=32,cp_comm=a2a", 0, 64, &l, &err), 0);
        pt_layout_check(&m, NULL, 64, &l, &mask);
        CHECK(mask & ONLY(PT_REJECT_HEADS_CP_A2A));
        pt_reject_explain(PT_REJECT_HEADS_CP_A2A, &m, NULL, 64, &l, buf, sizeof buf);
        CHECK_STR_HAS(buf, "heads per tp rank (48/1) are not divisible by the all-to-all "
                           "degree 32 (cp_comm=a2a)");
    }
    {
        pt_model m = model();
        pt_layout l;
        pt_err err;
        char buf[256];
        pt_layout_default(&l);
        CHECK_INT(pt_layout_parse("cp_comm=a2a", 0, 64, &l, &err), 0);
        pt_reject_explain(PT_REJECT_CP_COMM_NO_CP, &m, NULL, 64, &l, buf, sizeof buf);
        CHECK_STR_HAS(buf, "cp_comm=a2a with cp = 1");
        CHECK_INT(pt_layout_parse("cp=8,cp_comm=a2a+p2p,cp_a2a=3", 0, 64, &l, &err), 0);
        pt_reject_explain(PT_REJECT_CP_A2A, &m, NULL, 64, &l, buf, sizeof buf);
        CHECK_STR_HAS(buf, "cp_a2a = 3 does not divide cp = 8");
    }
}

/* ---- Uneven pipeline stages ----------------------------------------------------- */

/* The layout `text` (world and batch large enough for any grid) on a model of L
 * layers: its broken-rule mask, and in *l the parsed layout. */
static uint32_t split_rules(const char *text, int64_t L, pt_layout *l)
{
    pt_model m = model();
    m.layers = L;
    pt_err err;
    pt_layout_default(l);
    if (pt_layout_parse(text, 0, 1024, l, &err)) {
        fprintf(stderr, "unexpected parse error: %s\n", err.msg);
        pt_check_failures++;
        return 0;
    }
    uint32_t mask;
    pt_layout_check(&m, NULL, 1024, l, &mask);
    return mask;
}

/* Checks every virtual stage's layers and first layer against `want` (layers per
 * virtual stage in vs order), and the ranks' sums. */
static void expect_stages(const char *text, int64_t L, const int64_t *want)
{
    pt_layout l;
    CHECK_INT(split_rules(text, L, &l), 0);
    pt_model m = model();
    m.layers = L;
    int64_t next = 0, V = (int64_t)l.pp * l.vp;
    for (int vs = 0; vs < V; vs++) {
        int64_t first = -1;
        CHECK_INT(pt_stage_layers(&m, &l, vs, &first), want[vs]);
        CHECK_INT(first, next); /* consecutive layers in vs order */
        next += want[vs];
    }
    CHECK_INT(next, L);
    for (int r = 0; r < l.pp; r++) {
        int64_t sum = 0;
        for (int c = 0; c < l.vp; c++)
            sum += want[c * l.pp + r];
        CHECK_INT(pt_rank_layers(&m, &l, r), sum);
    }
}

static void test_uneven_split(void)
{
    /* Llama 3 405B: 7, 8 x 14, 7 */
    int64_t llama[16] = {7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7};
    expect_stages("pp=16,first_layers=7,last_layers=7", 126, llama);
    /* 70 layers (BLOOM's) on 12 stages: 5, 6 x 10, 5 */
    int64_t bloom[12] = {5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5};
    expect_stages("pp=12,first_layers=5,last_layers=5", 70, bloom);
    /* interleaved: rank 0's 2 layers in chunks of 1, rank 1's 4 in chunks of 2;
     * virtual stages 0, 1, 2, 3 = rank 0, rank 1, rank 0, rank 1 */
    int64_t inter[4] = {1, 2, 1, 2};
    expect_stages("pp=2,vp=2,first_layers=2,last_layers=4", 6, inter);
    /* one end given: the other ranks share the rest, the end left out included */
    int64_t first_only[4] = {7, 8, 8, 8};
    expect_stages("pp=4,first_layers=7", 31, first_only);
    int64_t last_only[3] = {4, 4, 2};
    expect_stages("pp=3,last_layers=2", 10, last_only);
    /* both 0: the even split */
    int64_t even[8] = {4, 4, 4, 4, 4, 4, 4, 4};
    expect_stages("pp=4,vp=2", 32, even);

    pt_layout l;
    /* an uneven layout is judged by its split, not by layers_pp */
    CHECK_INT(split_rules("pp=16,first_layers=7,last_layers=7", 126, &l), 0);
    CHECK_INT(split_rules("pp=16", 126, &l), ONLY(PT_REJECT_LAYERS_PP));
    CHECK_INT(split_rules("pp=2,first_layers=1,last_layers=1", 32, &l),
              ONLY(PT_REJECT_UNEVEN_SPLIT)); /* 1 + 1 != 32 */
    CHECK_INT(split_rules("pp=2,first_layers=12,last_layers=20", 32, &l), 0);
    CHECK_INT(split_rules("first_layers=4", 32, &l), ONLY(PT_REJECT_UNEVEN_SPLIT)); /* pp=1 */
    CHECK_INT(split_rules("pp=4,vp=2,first_layers=7,last_layers=7", 32, &l),
              ONLY(PT_REJECT_UNEVEN_SPLIT)); /* 7 % 2 */
    CHECK_INT(split_rules("pp=4,vp=2,first_layers=6,last_layers=6", 32, &l), 0); /* 6,10,10,6 */
    CHECK_INT(split_rules("pp=4,vp=2,first_layers=6,last_layers=8", 32, &l),
              ONLY(PT_REJECT_UNEVEN_SPLIT)); /* 9 per middle rank, odd */
    CHECK_INT(split_rules("pp=4,first_layers=6,last_layers=7", 32, &l),
              ONLY(PT_REJECT_UNEVEN_SPLIT)); /* 19 over 2 */
    CHECK_INT(split_rules("pp=4,first_layers=16,last_layers=16", 32, &l),
              ONLY(PT_REJECT_UNEVEN_SPLIT)); /* nothing left for the middle */
    CHECK_INT(split_rules("pp=3,first_layers=30", 32, &l), 0); /* 30, 1, 1 */
    CHECK_INT(split_rules("pp=3,first_layers=31", 32, &l), ONLY(PT_REJECT_UNEVEN_SPLIT));
    CHECK_INT(split_rules("pp=3,first_layers=40", 32, &l), ONLY(PT_REJECT_UNEVEN_SPLIT));
    /* negative counts (a plan built in code) are bad values */
    l.first_layers = -1;
    pt_model m = model();
    uint32_t mask;
    pt_layout_check(&m, NULL, 1024, &l, &mask);
    CHECK_INT(mask, ONLY(PT_REJECT_BAD_VALUE));
    /* more virtual stages than the runtime's per-chunk tables hold: a bad value, so no
     * plan the runtime would refuse is written */
    CHECK_INT(split_rules("pp=2,vp=65", 2 * 65, &l), ONLY(PT_REJECT_BAD_VALUE));
    CHECK_INT(split_rules("pp=2,vp=64", 2 * 64, &l), 0);
    CHECK_INT(PT_CHUNK_MAX, 64);
}

/* The layout strings carry the split and read back; the even split writes nothing. */
static void test_uneven_format(void)
{
    pt_layout l, back;
    pt_err err;
    char text[256], again[256];
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=8,pp=16,first_layers=7,last_layers=7", 1024, 2048, &l, &err),
              0);
    CHECK_INT(l.first_layers, 7);
    CHECK_INT(l.last_layers, 7);
    pt_layout_format(&l, text, sizeof text);
    CHECK_STR_HAS(text, ",first_layers=7,last_layers=7");
    pt_layout_default(&back);
    CHECK_INT(pt_layout_parse(text, 0, 2048, &back, &err), 0);
    pt_layout_format(&back, again, sizeof again);
    CHECK(strcmp(text, again) == 0);
    CHECK_INT(back.first_layers, 7);
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("pp=2,last_layers=3", 2, 8, &l, &err), 0);
    pt_layout_format(&l, text, sizeof text);
    CHECK(strstr(text, "first_layers") == NULL);
    CHECK_STR_HAS(text, ",last_layers=3");
    pt_layout_default(&l);
    pt_layout_format(&l, text, sizeof text);
    CHECK(strstr(text, "_layers") == NULL);
    expect_parse_error("pp=2,first_layers=-1", 0, "first_layers=-1");
    expect_parse_error("pp=2,last_layers=x", 0, "last_layers=x");
}

/* --explain names the numbers that do not work. */
static void expect_explain(const char *text, int64_t L, const char *a, const char *b)
{
    pt_layout l;
    CHECK_INT(split_rules(text, L, &l), ONLY(PT_REJECT_UNEVEN_SPLIT));
    pt_model m = model();
    m.layers = L;
    char buf[256];
    pt_reject_explain(PT_REJECT_UNEVEN_SPLIT, &m, NULL, 1024, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, a);
    CHECK_STR_HAS(buf, b);
}

static void test_uneven_explain(void)
{
    expect_explain("pp=2,first_layers=1,last_layers=1", 32, "1 + 1 = 2",
                   "add up to the model's 32 layers");
    expect_explain("first_layers=4", 32, "first_layers = 4 needs pp > 1", "32 layers");
    expect_explain("pp=4,vp=2,first_layers=7,last_layers=7", 32, "first_layers (7)",
                   "not divisible by vp (2)");
    expect_explain("pp=4,vp=2,first_layers=6,last_layers=8", 32, "middle stages hold 9",
                   "vp (2)");
    expect_explain("pp=4,first_layers=6,last_layers=7", 32, "the 19 layers",
                   "do not divide evenly over the 2 middle stages");
    expect_explain("pp=4,first_layers=16,last_layers=16", 32, "leave 0 of the 32 layers",
                   "2 middle stages");
    expect_explain("pp=3,first_layers=31", 32, "first_layers = 31 leaves 1 of the 32",
                   "2 middle and last stages");
    expect_explain("pp=2,last_layers=32", 32, "leaves 0 of the 32", "first stage");
}

/* A step of more (micro-batch, chunk) pairs than PT_MAX_SCHED_PAIRS is refused by its
 * rule, with its values, at the bound and not below it. */
static void test_schedule_size(void)
{
    int64_t most = PT_MAX_SCHED_PAIRS; /* 2^24 */
    CHECK_INT(rules("pp=2,dp=4,mbs=1", 1, most / 2 * 4), 0);               /* 2 x 2^23 */
    CHECK_INT(rules("pp=2,dp=4,mbs=1", 1, (most / 2 + 1) * 4), ONLY(PT_REJECT_SCHEDULE_SIZE));
    CHECK_INT(rules("pp=2,vp=2,dp=4,mbs=2", 1, most / 4 * 8), 0);            /* 2 x 2 x 2^22 */
    CHECK_INT(rules("pp=2,vp=2,dp=4,mbs=2", 1, (most / 4 + 2) * 8),
              ONLY(PT_REJECT_SCHEDULE_SIZE));
    pt_model m = model();
    pt_layout l;
    pt_err err;
    pt_layout_default(&l);
    CHECK(pt_layout_parse("pp=8,dp=1", 8, most, &l, &err) == 0);
    char why[256];
    pt_reject_explain(PT_REJECT_SCHEDULE_SIZE, &m, NULL, most, &l, why, sizeof why);
    CHECK(strstr(why, "pp*vp*n_micro = 8*1*16777216") != NULL);
    CHECK(strcmp(pt_reject_name(PT_REJECT_SCHEDULE_SIZE), "schedule_size") == 0);
}

/* ---- Pipeline layouts (Megatron-Core's notation) ------------------------------------ */

static void expect_pipe(const char *text, int want_stages, int64_t want_layers,
                        const char *canon)
{
    pt_pipe p;
    pt_err err = {""};
    if (pt_pipe_parse(text, &p, &err)) {
        fprintf(stderr, "'%s': %s\n", text, err.msg);
        pt_check_failures++;
        return;
    }
    CHECK_INT(pt_pipe_stages(&p), want_stages);
    CHECK_INT(pt_pipe_layers(&p), want_layers);
    char buf[256];
    pt_pipe_format(&p, buf, sizeof buf);
    CHECK_STR(buf, canon);
    pt_pipe back; /* the canonical text reads back to the same runs */
    CHECK_INT(pt_pipe_parse(buf, &back, &err), 0);
    CHECK(pt_pipe_same(&p, &back));
}

static void expect_pipe_error(const char *text, const char *needle)
{
    pt_pipe p;
    pt_err err = {""};
    CHECK_INT(pt_pipe_parse(text, &p, &err), -1);
    CHECK_STR_HAS(err.msg, needle);
    CHECK_INT(p.n, 0);
}

static void test_pipe_parse(void)
{
    /* Llama 3 405B as Meta ran it: the embedding and the loss on stages of their own */
    char meta[400] = "E|";
    for (int i = 0; i < 126; i++)
        strcat(meta, "t|");
    strcat(meta, "L");
    expect_pipe(meta, 128, 126, "E|(t|)*126L");
    /* Megatron-LM's documentation (pipeline_parallel_layout.md), DeepSeek-V3 on PP16,
     * VPP2 with its MTP stage left empty: 61 layers on 32 stages */
    expect_pipe("Et*3|(tt|)*29,|L", 32, 61, "Et*3|(t*2|)*29|L");
    /* its tests' shapes: groups with a stage inside, x*n, commas and blanks */
    expect_pipe("Et*2|(tt|)*5t|tL", 8, 14, "Et*2|(t*2|)*5t|tL");
    expect_pipe("E, t*3 | t*4 | tttL", 3, 10, "Et*3|t*4|t*3L");
    expect_pipe("Et*4L", 1, 4, "Et*4L");
    expect_pipe("E||t|L", 4, 1, "E||t|L"); /* an empty stage, as the docs allow */
    expect_pipe("E|(|)*3tL", 5, 1, "E|(|)*3tL");

    expect_pipe_error("", "empty");
    expect_pipe_error("Et*3|(tt|)*29,m|L", "'m' (a multi-token-prediction layer, virtual stage 30)");
    expect_pipe_error("tE|tL", "'E' must come first");
    expect_pipe_error("t|EtL", "'E' must come first");
    expect_pipe_error("Et|Lt", "'L' must come last");
    expect_pipe_error("EtL|t", "'L' must come last");
    expect_pipe_error("Et|t", "exactly once (E 1 times, L 0 times)");
    expect_pipe_error("EEt|L", "exactly once (E 2 times, L 1 times)");
    expect_pipe_error("Et|x|L", "'x' at character 4 is not E");
    expect_pipe_error("E((t|)*2)*2L", "groups do not nest");
    expect_pipe_error("E(t|*2L", "never closed");
    expect_pipe_error("Et)|L", "closes no group");
    expect_pipe_error("E(t|)L", "needs a count");
    expect_pipe_error("E()*2tL", "empty group");
    expect_pipe_error("Et*0L", "a count of 0");
    expect_pipe_error("Et*|L", "must be followed by a count");
    expect_pipe_error("Et*99999999L", "a count above");
    expect_pipe_error("E(t*60000|)*60000L", "more than 65538 units");
    /* 17 runs of different stages: more than ptplan keeps */
    expect_pipe_error("Et|t*2|t|t*2|t|t*2|t|t*2|t|t*2|t|t*2|t|t*2|t|t*2|t*3L", "more than 16 runs");
}

/* The layout key pipeline=: commas inside it are Megatron's spacing, vp follows from
 * its stages, and it goes alone (not with first_layers/last_layers). */
static void test_pipe_layout(void)
{
    pt_layout l;
    pt_err err = {""};
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=8,pp=16,pipeline=E|(t|)*126L,mbs=1", 0, 0, &l, &err), 0);
    CHECK_INT(l.vp, 8);
    CHECK_INT(l.schedule, PT_SCHED_INTERLEAVED);
    char text[512];
    pt_layout_format(&l, text, sizeof text);
    CHECK_STR_HAS(text, ",pipeline=E|(t|)*126L");
    pt_layout back;
    pt_layout_default(&back);
    CHECK_INT(pt_layout_parse(text, 0, 0, &back, &err), 0);
    CHECK(pt_pipe_same(&back.pipe, &l.pipe));
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("pp=16,pipeline=Et*3|(tt|)*29,|L,dp=2", 0, 0, &l, &err), 0);
    CHECK_INT(l.vp, 2);
    CHECK_INT(l.dp, 2);
    CHECK_INT(pt_pipe_layers(&l.pipe), 61);
    expect_parse_error("pp=2,first_layers=1,pipeline=Et|tL", 0, "give one");
    expect_parse_error("pp=2,pipeline=Et|x|L", 0, "'x' at character 4");

    /* Meta's 405B: every virtual stage one unit */
    pt_model m = model();
    m.layers = 126;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("pp=16,pipeline=E|(t|)*126L", 0, 1024, &l, &err), 0);
    CHECK_INT(pt_layout_check(&m, NULL, 1024, &l, NULL), 0);
    int64_t first = -1;
    CHECK_INT(pt_stage_layers(&m, &l, 0, &first), 0); /* the embedding alone */
    CHECK_INT(pt_stage_layers(&m, &l, 127, &first), 0); /* the output layer and loss */
    CHECK_INT(first, 126);
    CHECK_INT(pt_stage_layers(&m, &l, 17, &first), 1); /* rank 1, chunk 1 */
    CHECK_INT(first, 16);
    CHECK_INT(pt_rank_layers(&m, &l, 0), 7);
    CHECK_INT(pt_rank_layers(&m, &l, 1), 8);
    CHECK_INT(pt_rank_layers(&m, &l, 15), 7);
    CHECK(pt_pipe_middle_alike(&m, &l));
}

static void expect_pipe_rule(const char *text, int64_t L, const char *needle)
{
    pt_layout l;
    pt_err err = {""};
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse(text, 0, 1024, &l, &err), 0);
    pt_model m = model();
    m.layers = L;
    uint32_t mask;
    pt_layout_check(&m, NULL, 1024, &l, &mask);
    CHECK_INT(mask, ONLY(PT_REJECT_PIPELINE_LAYOUT));
    char buf[256];
    pt_reject_explain(PT_REJECT_PIPELINE_LAYOUT, &m, NULL, 1024, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, needle);
}

static void test_pipe_rules(void)
{
    expect_pipe_rule("pp=2,pipeline=E|t*62|t*63|L", 126, "holds 125 transformer layers (t), the model has 126");
    expect_pipe_rule("pp=2,pipeline=E|t*64|t*63|L", 126, "holds 127 transformer layers");
    expect_pipe_rule("pp=2,pipeline=Et|t|tL", 3, "3 virtual stages, not a multiple of pp (2)");
    expect_pipe_rule("pp=2,vp=3,pipeline=Et|tL", 2, "pp = 2 with vp = 3 needs 6");
    /* rank 1 of pp=4 holds nothing */
    expect_pipe_rule("pp=4,pipeline=Et||t|ttL", 4, "leaves pipeline rank 1 with nothing");
    /* an empty chunk is fine while its rank holds something */
    pt_layout l;
    pt_err err = {""};
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("pp=2,pipeline=Et|t||ttL", 0, 1024, &l, &err), 0);
    pt_model m = model();
    m.layers = 4;
    CHECK_INT(pt_layout_check(&m, NULL, 1024, &l, NULL), 0);
    CHECK(!pt_pipe_middle_alike(&m, &l) || l.pp <= 2);
}

/* Megatron-Core's account_for_embedding/loss_in_pipeline_split. */
static void test_pipe_balanced(void)
{
    pt_pipe p;
    char buf[128];
    CHECK(pt_pipe_balanced(126, 16, 8, true, true, &p));
    pt_pipe_format(&p, buf, sizeof buf);
    CHECK_STR(buf, "E|(t|)*126L");
    CHECK(pt_pipe_balanced(126, 16, 1, true, true, &p)); /* 8 units a stage: 7, 8 x 14, 7 */
    pt_pipe_format(&p, buf, sizeof buf);
    CHECK_STR(buf, "Et*7|(t*8|)*14t*7L");
    CHECK(pt_pipe_balanced(31, 4, 2, true, false, &p)); /* 32 units: 3 then 4 x 7 */
    pt_pipe_format(&p, buf, sizeof buf);
    CHECK_STR(buf, "Et*3|(t*4|)*6t*4L");
    CHECK(!pt_pipe_balanced(126, 16, 2, true, false, &p)); /* 127 units do not divide */
    CHECK(!pt_pipe_balanced(4, 1, 1, true, true, &p)); /* one stage: nothing to balance */
}

/* ---- Experts (ep, etp, moe_dispatch) -------------------------------------------------- */

/* model() with 16 experts of 1536, top-4, every layer */
static pt_model moe_model(void)
{
    pt_model m = model();
    m.moe = (pt_moe){.experts = 16, .top_k = 4, .expert_ffn = 1536, .every = 1,
                     .score = PT_ROUTER_SOFTMAX, .renorm = true};
    return m;
}

static uint32_t moe_rules(const char *text, const pt_model *m, int nodes)
{
    pt_cluster c = cluster(nodes);
    pt_layout l;
    pt_err err;
    pt_layout_default(&l);
    if (pt_layout_parse(text, pt_cluster_world(&c), 64, &l, &err)) {
        fprintf(stderr, "unexpected parse error: %s\n", err.msg);
        pt_check_failures++;
        return 0;
    }
    uint32_t mask;
    CHECK_INT(pt_layout_check(m, &c, 64, &l, &mask), __builtin_popcount(mask));
    return mask;
}

static void test_moe_parse_rules(void)
{
    pt_layout l, back;
    pt_err err = {""};
    char text[512];
    pt_layout_default(&l);
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,sp=1,ep=4,etp=2", 16, 0, &l, &err), 0);
    CHECK(l.ep == 4 && l.etp == 2 && l.moe_dispatch == PT_MOED_ALLTOALL && l.dp == 8);
    CHECK_INT(pt_layout_edp(&l), 2); /* tp·cp·dp / (ep·etp) = 16/8 */
    pt_layout_format(&l, text, sizeof text);
    CHECK_STR_HAS(text, ",ep=4,etp=2");
    CHECK(strstr(text, "moe_dispatch") == NULL);
    pt_layout_default(&back);
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse(text, 16, 0, &back, &err), 0);
    CHECK(back.ep == 4 && back.etp == 2);
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("ep=8,moe_dispatch=allgather", 8, 0, &l, &err), 0);
    pt_layout_format(&l, text, sizeof text);
    CHECK_STR_HAS(text, ",moe_dispatch=allgather");
    expect_parse_error("ep=0", 8, "ep=0: expected an integer from 1");
    expect_parse_error("ep=2,moe_dispatch=deepep", 8, "expected one of alltoall, allgather, flex");

    pt_model m = moe_model(), dense = model();
    CHECK_INT(moe_rules("ep=8", &m, 1), 0);
    CHECK_INT(moe_rules("ep=4,etp=2", &m, 1), 0);
    CHECK_INT(moe_rules("tp=2,sp=1,ep=4", &m, 1), 0);
    CHECK_INT(moe_rules("tp=2,sp=1,pp=2,ep=8", &m, 2), 0); /* ep over tp·dp of a stage */
    CHECK_INT(moe_rules("ep=2", &dense, 1), ONLY(PT_REJECT_EP_DENSE));
    CHECK_INT(moe_rules("tp=2,sp=1,ep=16", &m, 1), ONLY(PT_REJECT_EP_FOLD)); /* 16 of 8 */
    CHECK_INT(moe_rules("tp=2,sp=1,ep=8", &m, 1), 0); /* ep over tp·dp: folded */
    CHECK_INT(moe_rules("pp=2,ep=8", &m, 1), ONLY(PT_REJECT_EP_FOLD)); /* 4 per stage */
    m.moe.experts = 12;
    CHECK_INT(moe_rules("ep=8", &m, 1), ONLY(PT_REJECT_EXPERTS_EP));
    m.moe.experts = 16;
    m.moe.expert_ffn = 1002;
    CHECK_INT(moe_rules("ep=2,etp=4", &m, 1), ONLY(PT_REJECT_EXPERT_FFN_ETP));
    m.moe.expert_ffn = 1536;
    CHECK_INT(moe_rules("tp=2,ep=4", &m, 1), ONLY(PT_REJECT_MOE_SP));
    m.moe.shared_experts = 1;
    m.moe.shared_ffn = 1001;
    CHECK_INT(moe_rules("tp=2,sp=1", &m, 1), ONLY(PT_REJECT_FFN_TP));

    /* each rule explains itself with the values involved */
    pt_cluster c = cluster(1);
    char buf[256];
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,sp=1,ep=16", 8, 64, &l, &err), 0);
    pt_reject_explain(PT_REJECT_EP_FOLD, &m, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "ep*etp = 16*1 does not divide tp*cp*dp = 2*1*4");
    pt_reject_explain(PT_REJECT_FFN_TP, &m, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "shared experts' FFN size (1 x 1001)");
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("ep=2", 8, 64, &l, &err), 0);
    pt_reject_explain(PT_REJECT_EP_DENSE, &dense, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "model m has no experts to split");
    m.moe.experts = 12;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("ep=8", 8, 64, &l, &err), 0);
    pt_reject_explain(PT_REJECT_EXPERTS_EP, &m, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "experts (12) are not divisible by ep (8)");
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,ep=4", 8, 64, &l, &err), 0);
    pt_reject_explain(PT_REJECT_MOE_SP, &m, &c, 64, &l, buf, sizeof buf);
    CHECK_STR_HAS(buf, "needs sequence parallelism with tp > 1 (sp=1)");
}

/* A malloc'd copy of text with its first `from` replaced by `to` (which must be there). */
static char *swap_text(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    CHECK(at != NULL);
    size_t head = at ? (size_t)(at - text) : strlen(text), nfrom = at ? strlen(from) : 0;
    char *out = malloc(strlen(text) + strlen(to) + 1);
    if (!out)
        abort();
    memcpy(out, text, head);
    strcpy(out + head, to);
    strcat(out, text + head + nfrom);
    return out;
}

/* The stacks: which run experts, how each refuses a layout or model it does not. */
static void test_moe_stacks(void)
{
    pt_model m = moe_model();
    pt_layout l;
    pt_err err = {""};
    pt_stack ptrun, mcore, fsdp;
    CHECK_INT(pt_stack_get("ptrun", &ptrun, &err), 0);
    CHECK_INT(pt_stack_get("megatron-core", &mcore, &err), 0);
    CHECK_INT(pt_stack_get("fsdp", &fsdp, &err), 0);
    pt_layout_default(&l);
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("ep=8", 8, 64, &l, &err), 0);
    CHECK_INT(pt_stack_check_model(&mcore, &m, &l, &err), 0);
    /* ptrun runs experts within its runtime's limits, one message each naming the key */
    CHECK_INT(pt_stack_check_model(&ptrun, &m, &l, &err), 0);
    pt_layout lim;
    pt_layout_default(&lim);
    CHECK_INT(pt_layout_parse("cp=2,dp=4,ep=8", 8, 64, &lim, &err), 0);
    CHECK_INT(pt_stack_check_model(&ptrun, &m, &lim, &err), 0);
    pt_layout_default(&lim);
    CHECK_INT(pt_layout_parse("dp=8,ep=2,etp=2", 8, 64, &lim, &err), 0);
    CHECK_INT(pt_stack_check_model(&ptrun, &m, &lim, &err), 0);
    pt_layout_default(&lim);
    CHECK_INT(pt_layout_parse("dp=8,ep=8,zero=1", 8, 64, &lim, &err), 0);
    CHECK_INT(pt_stack_check_model(&ptrun, &m, &lim, &err), 0);
    pt_layout_default(&lim);
    CHECK_INT(pt_layout_parse("dp=8,ep=8,zero=3", 8, 64, &lim, &err), 0);
    CHECK_INT(pt_stack_check_model(&ptrun, &m, &lim, &err), 0);
    pt_model sh = m;
    sh.moe.shared_experts = 1;
    sh.moe.shared_ffn = 64;
    CHECK_INT(pt_stack_check_model(&ptrun, &sh, &l, &err), -1);
    CHECK_STR_HAS(err.msg, "model m: stack 'ptrun' trains experts without shared experts so far");
    sh = m;
    sh.bias = true;
    CHECK_INT(pt_stack_check_model(&ptrun, &sh, &l, &err), -1);
    CHECK_STR_HAS(err.msg, "model m: stack 'ptrun' trains experts without biases so far");
    CHECK_INT(pt_stack_check_layout(&fsdp, &l, &err), -1);
    CHECK_STR_HAS(err.msg, "layout ep=8: stack 'fsdp' has no expert parallelism");
    /* a list of recompute modules: Megatron-Core's alone */
    pt_layout rm;
    pt_layout_default(&rm);
    CHECK_INT(pt_layout_parse("dp=8,ep=8,recompute=layernorm+moe", 8, 64, &rm, &err), 0);
    CHECK_INT(pt_stack_check_layout(&mcore, &rm, &err), 0);
    CHECK_INT(pt_stack_check_layout(&ptrun, &rm, &err), -1);
    CHECK_STR_HAS(err.msg, "layout recompute=layernorm+moe: stack 'ptrun' does not recompute "
                           "module layernorm (lists of modules are Megatron-Core's "
                           "--recompute-modules; here use none, selective or full)");
    /* banded attention and sinks: only the stacks with flash attention run them */
    pt_model w = model();
    w.window = 128;
    pt_layout d;
    pt_layout_default(&d);
    CHECK_INT(pt_layout_parse("dp=8", 8, 64, &d, &err), 0);
    CHECK_INT(pt_stack_check_model(&mcore, &w, &d, &err), 0);
    CHECK_INT(pt_stack_check_model(&ptrun, &w, &d, &err), -1);
    CHECK_STR_HAS(err.msg, "model m has banded attention (window), which the attention of "
                           "stack 'ptrun' does not run");
    w.window = 0;
    w.attn_sinks = true;
    CHECK_INT(pt_stack_check_model(&ptrun, &w, &d, &err), -1);
    CHECK_STR_HAS(err.msg, "attention sinks");
    l.compress = PT_COMPRESS_BF16;
    CHECK_INT(pt_stack_check_model(&mcore, &m, &l, &err), -1);
    CHECK_STR_HAS(err.msg, "gradient compression is not planned for a mixture of experts");
    /* a stack file that names only one dispatcher */
    char *dump = pt_stack_to_json(&mcore);
    CHECK(dump && strstr(dump, "\"moe_dispatch\": [") != NULL);
    char *one = swap_text(dump, "\"alltoall\",", "");
    pt_stack s;
    CHECK_INT(pt_stack_from_json(one, "<s>", &s, &err), 0);
    CHECK_INT(s.moe_dispatches, 1u << PT_MOED_ALLGATHER | 1u << PT_MOED_FLEX);
    l.compress = PT_COMPRESS_NONE;
    CHECK_INT(pt_stack_check_layout(&s, &l, &err), -1);
    CHECK_STR_HAS(err.msg, "layout moe_dispatch=alltoall: stack 'megatron-core' does not "
                           "dispatch tokens that way (it runs: allgather, flex)");
    char *wrong = swap_text(dump, "\"allgather\"", "\"deepep\"");
    CHECK_INT(pt_stack_from_json(wrong, "<s>", &s, &err), -1);
    CHECK_STR_HAS(err.msg,
                  "field 'parallelism.moe_dispatch[1]': expected alltoall, allgather or flex");
    /* ... and one that names only some recompute modules */
    CHECK(strstr(dump, "\"recompute_modules\": [") != NULL);
    char *few = swap_text(dump, "\"layernorm\",", "");
    CHECK_INT(pt_stack_from_json(few, "<s>", &s, &err), 0);
    CHECK_INT(s.recompute_modules, ((1u << PT_RMOD_COUNT) - 1) & ~(1u << PT_RMOD_LAYERNORM));
    CHECK_INT(pt_stack_check_layout(&s, &rm, &err), -1);
    CHECK_STR_HAS(err.msg, "does not recompute module layernorm (it names other modules)");
    char *bad_mod = swap_text(dump, "\"moe_act\"", "\"act\"");
    CHECK_INT(pt_stack_from_json(bad_mod, "<s>", &s, &err), -1);
    CHECK_STR_HAS(err.msg, "field 'parallelism.recompute_modules[3]': expected one of "
                           "core_attn, layernorm, mlp, moe_act, moe");
    /* ... and lists of context-parallel kinds and DP overlaps with a wrong or no entry */
    char *bad_cp = swap_text(dump, "\"a2a\",", "\"ring\",");
    CHECK_INT(pt_stack_from_json(bad_cp, "<s>", &s, &err), -1);
    CHECK_STR_HAS(err.msg, "<s>: field 'parallelism.cp_comm[2]': expected one of p2p, "
                           "all_gather, a2a, a2a+p2p");
    char *no_dp = swap_text(dump, "\"dp\": [\n      \"none\",\n      \"last\"\n    ]",
                            "\"dp\": []");
    CHECK_INT(pt_stack_from_json(no_dp, "<s>", &s, &err), -1);
    CHECK_STR_HAS(err.msg, "<s>: field 'overlap.dp' is empty: list at least one of none, last, "
                           "backward");
    free(bad_cp);
    free(no_dp);
    free(few);
    free(bad_mod);
    free(dump);
    free(one);
    free(wrong);
}

int main(void)
{
    test_moe_parse_rules();
    test_moe_stacks();
    test_parse_format();
    test_parse_errors();
    test_rules();
    test_sequence_rules();
    test_explain();
    test_cp_comm_parse();
    test_cp_comm_rules();
    test_uneven_split();
    test_uneven_format();
    test_uneven_explain();
    test_schedule_size();
    test_pipe_parse();
    test_pipe_layout();
    test_pipe_rules();
    test_pipe_balanced();
    return pt_check_result();
}
