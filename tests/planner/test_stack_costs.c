/*
 * Which of a stack's kernels the cost tables price. The tables hold ptrun's kernels (a
 * shipped profile, ptprofile's, ptrun's traces); another stack's kernel is priced from
 * them only where the stack runs that very kernel (planner/stack.c: its cuBLAS GEMMs of
 * ptrun's roles, cuDNN's attention where it is ptrun's), and analytically where it runs
 * one of its own, even when the key is the same. Each check puts one sample, ten times
 * the analytic price, under one key and sees whether the step moves.
 */
#include "check.h"
#include "planner.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    pt_model m;
    pt_cluster c;
    pt_train t;
    pt_layout l;
} job;

/* Model `model` on `cluster` under `stack` and `layout`, a global batch of 16. */
static void job_of_model(job *j, const char *model, const char *cluster, const char *stack,
                         const char *layout)
{
    pt_err err;
    CHECK_INT(pt_model_get(model, &j->m, &err), 0);
    CHECK_INT(pt_cluster_get(cluster, &j->c, &err), 0);
    pt_train_default(&j->t, &j->c);
    j->t.global_batch = 16;
    j->t.precision = PT_PREC_BF16;
    CHECK_INT(pt_stack_get(stack, &j->t.stack, &err), 0);
    pt_layout_default(&j->l);
    CHECK_INT(pt_layout_parse_stack(layout, pt_cluster_world(&j->c), 16, &j->t.stack, &j->l,
                                    &err), 0);
}

/* GPT-2 124M without biases: forward GEMMs keyed "gemm", weight gradients "gemm_wgrad". */
static void job_of(job *j, const char *cluster, const char *stack, const char *layout)
{
    job_of_model(j, "gpt2-124m", cluster, stack, layout);
    j->m.bias = false;
}

/* The kernel of the first op of `kind` in a layer's forward or backward list. */
static pt_op op_of(const job *j, pt_op_kind kind, bool backward)
{
    pt_opctx ctx;
    pt_opctx_init(&ctx, &j->m, &j->l, &j->t, &j->c);
    pt_oplist o = {0};
    pt_op found;
    memset(&found, 0, sizeof found);
    CHECK_INT(pt_ops_layer(&ctx, backward, &o), 0);
    bool seen = false;
    for (int i = 0; i < o.n && !seen; i++)
        if (o.op[i].kind == kind) {
            found = o.op[i];
            seen = true;
        }
    CHECK(seen);
    pt_oplist_free(&o);
    return found;
}

static pt_sim_result evaluate(const job *j, const pt_costdb *db)
{
    pt_err err;
    pt_candidate c;
    memset(&c, 0, sizeof c);
    CHECK_INT(pt_evaluate(&j->m, &j->c, &j->t, db, &j->l, NULL, &c, &err), 0);
    return c.predicted;
}

/* Whether a sample under `kernel`'s key, 10x its analytic price, moves j's step: it must
 * (moves) or must not (!moves), and the step's provenance says so. */
static void check_sample(const job *j, const pt_kernel_op *kernel, bool moves)
{
    pt_err err;
    pt_cost_hw hw;
    pt_cost_hw_of(&j->c, &hw);
    pt_costdb *db;
    CHECK_INT(pt_costdb_open(NULL, PT_COSTDB_CREATE, &db, &err), 0);
    double t = 10 * pt_cost_kernel_analytic(&hw, kernel);
    CHECK_INT(pt_costdb_add_kernel(db, hw.device, kernel, t, PT_SOURCE_PROFILE, &err), 0);
    pt_sim_result none = evaluate(j, NULL), with = evaluate(j, db);
    if (moves) {
        CHECK(with.step_time_s > none.step_time_s * 1.001);
        CHECK(with.prov_share[PT_PROV_MEASURED] > 0);
    } else {
        CHECK_NEAR(with.step_time_s, none.step_time_s, 1e-12);
        CHECK_NEAR(with.prov_share[PT_PROV_ANALYTIC], 1.0, 1e-12);
    }
    pt_costdb_close(db);
}

/* Megatron-Core's wait on the host before each dispatch: a micro-batch's forward through
 * a stage takes the stack's figure longer for each mixture layer the stage holds, under
 * the breakdown's overhead, and its backward too where the dispatch is recomputed.
 * tiny-moe's first layer is dense: over two stages, one mixture layer and two. */
static void test_moe_host_sync(void)
{
    pt_err err;
    const char *layouts[2] = {"pp=2,dp=4,ep=4", "pp=2,dp=4,ep=4,recompute=moe"};
    for (int i = 0; i < 2; i++) {
        job with, none;
        job_of_model(&with, "tiny-moe", "dgx-h100", "megatron-core", layouts[i]);
        none = with;
        none.t.stack.moe_host_sync_s = 0;
        double g = with.t.stack.moe_host_sync_s;
        pt_sim_costs a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        CHECK_INT(pt_sim_price(&none.m, &none.c, &none.t, NULL, &none.l, &a, &err), 0);
        CHECK_INT(pt_sim_price(&with.m, &with.c, &with.t, NULL, &with.l, &b, &err), 0);
        for (int vs = 0; vs < 2; vs++) {
            double n = vs + 1; /* mixture layers in the stage */
            CHECK_NEAR(b.fwd_s[vs] - a.fwd_s[vs], n * g, 1e-12);
            CHECK_NEAR(b.bwd_s[vs] - a.bwd_s[vs], i == 1 ? n * g : 0, 1e-12);
            double *oa = a.bd_exposed + vs * PT_BD_COUNT, *ob = b.bd_exposed + vs * PT_BD_COUNT;
            CHECK_NEAR(ob[PT_BD_OVERHEAD] - oa[PT_BD_OVERHEAD], (i == 1 ? 2 : 1) * n * g,
                       1e-12);
            CHECK_NEAR(ob[PT_BD_GEMM], oa[PT_BD_GEMM], 1e-15);
        }
        pt_sim_costs_free(&a);
        pt_sim_costs_free(&b);
    }
}

/* A GEMM of ptrun's roles at a profiled shape is priced from the profile for
 * Megatron-Core and FSDP, not analytically. */
static void test_gemm_from_profile(void)
{
    job mc, fsdp;
    job_of(&mc, "dgx-h100", "megatron-core", "tp=2,dp=4,sp=0,tp_overlap=0,zero=1");
    job_of(&fsdp, "dgx-h100", "fsdp", "dp=8,zero=3,sp=0,tp_overlap=0");
    pt_op q = op_of(&mc, PT_OPK_Q, false);
    CHECK_INT(q.role, PT_GEMM_FWD);
    CHECK_STR_HAS(q.kernel.key, "gemm:bf16:");
    check_sample(&mc, &q.kernel, true);
    pt_op fq = op_of(&fsdp, PT_OPK_Q, false);
    check_sample(&fsdp, &fq.kernel, true);
    /* Megatron-Core adds the weight gradient into fp32 as ptrun does; PyTorch's autograd
     * writes it in bf16: another call, which the profile never timed */
    pt_op wg = op_of(&mc, PT_OPK_MLP_UP_WGRAD, true);
    CHECK_INT(wg.role, PT_GEMM_WGRAD);
    check_sample(&mc, &wg.kernel, true);
    pt_op fwg = op_of(&fsdp, PT_OPK_MLP_UP_WGRAD, true);
    check_sample(&fsdp, &fwg.kernel, false);
}

/* Another stack's GEMM is priced from what the tables hold of its very shape, never
 * interpolated in FLOPs between other shapes (ptrun's own are): two samples of the
 * forward GEMM's kind around q's FLOPs, of other shapes. */
static void test_same_shape_only(void)
{
    job mc, ptrun;
    job_of(&mc, "dgx-h100", "megatron-core", "tp=2,dp=4,sp=0,tp_overlap=0,zero=1");
    job_of(&ptrun, "dgx-h100", "ptrun", "tp=2,dp=4,sp=0,tp_overlap=0,zero=1");
    pt_op q = op_of(&mc, PT_OPK_Q, false);
    pt_err err;
    pt_cost_hw hw;
    pt_cost_hw_of(&mc.c, &hw);
    pt_costdb *db;
    CHECK_INT(pt_costdb_open(NULL, PT_COSTDB_CREATE, &db, &err), 0);
    pt_kernel_op lo = q.kernel, hi = q.kernel;
    snprintf(lo.key, sizeof lo.key, "gemm:bf16:m=1,n=1,k=1");
    snprintf(hi.key, sizeof hi.key, "gemm:bf16:m=99999,n=99999,k=9");
    lo.flops = q.kernel.flops / 4;
    hi.flops = q.kernel.flops * 4;
    CHECK_INT(pt_costdb_add_kernel(db, hw.device, &lo, 1.0, PT_SOURCE_PROFILE, &err), 0);
    CHECK_INT(pt_costdb_add_kernel(db, hw.device, &hi, 2.0, PT_SOURCE_PROFILE, &err), 0);
    pt_sim_result m0 = evaluate(&mc, NULL), m1 = evaluate(&mc, db), p1 = evaluate(&ptrun, db);
    CHECK_NEAR(m1.step_time_s, m0.step_time_s, 1e-12);
    CHECK_NEAR(m1.prov_share[PT_PROV_ANALYTIC], 1.0, 1e-12);
    CHECK(p1.prov_share[PT_PROV_INTERPOLATED] > 0);
    pt_cost c;
    CHECK_INT(pt_cost_kernel_sampled(db, &hw, &q.kernel, &c), -1);
    CHECK_INT(pt_cost_kernel_sampled(db, &hw, &lo, &c), 0);
    CHECK_INT(c.prov, PT_PROV_MEASURED);
    CHECK_NEAR(c.time_s, 1.0, 1e-12);
    CHECK_INT(pt_cost_kernel_sampled(NULL, &hw, &lo, &c), -1);
    pt_costdb_close(db);
}

/* A stack's own kernels are priced analytically even where their key is ptrun's: a
 * norm of Megatron-Core's (Transformer Engine's kernel) or FSDP's, a GELU of PyTorch's;
 * the same sample does price ptrun's. */
static void test_own_kernels_analytic(void)
{
    job mc, fsdp, ptrun;
    job_of(&mc, "dgx-h100", "megatron-core", "tp=2,dp=4,sp=0,tp_overlap=0,zero=1");
    job_of(&fsdp, "dgx-h100", "fsdp", "dp=8,zero=3,sp=0,tp_overlap=0");
    job_of(&ptrun, "dgx-h100", "ptrun", "tp=2,dp=4,sp=0,tp_overlap=0,zero=1");
    pt_op norm = op_of(&mc, PT_OPK_NORM1, false), pnorm = op_of(&ptrun, PT_OPK_NORM1, false);
    CHECK_STR(norm.kernel.key, pnorm.kernel.key);
    check_sample(&mc, &norm.kernel, false);
    check_sample(&ptrun, &norm.kernel, true);
    pt_op fnorm = op_of(&fsdp, PT_OPK_NORM1, false), act = op_of(&mc, PT_OPK_ACT, false);
    check_sample(&fsdp, &fnorm.kernel, false);
    check_sample(&mc, &act.kernel, false);
    /* Megatron-LM's unfused attention: batched GEMMs of its own */
    job lm;
    job_of(&lm, "dgx-h100", "megatron-lm", "tp=2,dp=4,sp=0,tp_overlap=0,zero=1,dp_overlap=none");
    pt_op scores = op_of(&lm, PT_OPK_ATTN_SCORES, false);
    check_sample(&lm, &scores.kernel, false);
}

/* Flash attention is ptrun's cuDNN kernel for Megatron-Core's forward on Hopper: priced
 * from ptrun's attn_fwd sample of the same shape. Not its backward (another cuDNN
 * engine), not on an A100 (FlashAttention-2), not FSDP's (FlashAttention-2). */
static void test_attention_from_profile(void)
{
    job mc, a100, fsdp, ptrun;
    job_of(&mc, "dgx-h100", "megatron-core", "tp=2,dp=4,sp=0,tp_overlap=0,zero=1");
    job_of(&a100, "dgx-a100-80g", "megatron-core", "tp=2,dp=4,sp=0,tp_overlap=0,zero=1");
    job_of(&fsdp, "dgx-h100", "fsdp", "dp=8,zero=3,sp=0,tp_overlap=0");
    job_of(&ptrun, "dgx-h100", "ptrun", "tp=2,dp=4,sp=0,tp_overlap=0,zero=1");
    pt_op fwd = op_of(&mc, PT_OPK_ATTN, false), bwd = op_of(&mc, PT_OPK_ATTN_BWD, true);
    pt_kernel_op tf, tb;
    pt_op_ptrun_twin(&fwd, &tf);
    pt_op_ptrun_twin(&bwd, &tb);
    /* the twin is what ptrun's own list holds for that attention */
    pt_op pf = op_of(&ptrun, PT_OPK_ATTN, false), pb = op_of(&ptrun, PT_OPK_ATTN_BWD, true);
    CHECK_STR(tf.key, pf.kernel.key);
    CHECK_STR(tb.key, pb.kernel.key);
    CHECK_NEAR(tf.flops, pf.kernel.flops, 1e-12);
    CHECK_NEAR(tb.flops, pb.kernel.flops, 1e-12);
    CHECK_NEAR(fwd.kernel.flops, 0.5 * pf.kernel.flops, 1e-12); /* the causal half */
    /* a GEMM's twin is itself */
    pt_op q = op_of(&mc, PT_OPK_Q, false);
    pt_kernel_op tq;
    pt_op_ptrun_twin(&q, &tq);
    CHECK_STR(tq.key, q.kernel.key);
    check_sample(&mc, &tf, true);
    check_sample(&mc, &tb, false);
    pt_op af = op_of(&a100, PT_OPK_ATTN, false);
    pt_op_ptrun_twin(&af, &tf);
    check_sample(&a100, &tf, false);
    pt_op ff = op_of(&fsdp, PT_OPK_ATTN, false);
    pt_op_ptrun_twin(&ff, &tf);
    check_sample(&fsdp, &tf, false);
    /* and the stack's own key is never looked up */
    check_sample(&mc, &fwd.kernel, false);
}

/* What the built-ins declare, and that a stack file carries it. */
static void test_declared(void)
{
    pt_stack mc, lm, fsdp, ptrun;
    pt_err err;
    CHECK_INT(pt_stack_get("megatron-core", &mc, &err), 0);
    CHECK_INT(pt_stack_get("megatron-lm", &lm, &err), 0);
    CHECK_INT(pt_stack_get("fsdp", &fsdp, &err), 0);
    CHECK_INT(pt_stack_get("ptrun", &ptrun, &err), 0);
    for (int r = 0; r < PT_GEMM_ROLE_COUNT; r++)
        CHECK(pt_stack_ptrun_gemm(&ptrun, r));
    CHECK(pt_stack_ptrun_attn(&ptrun, "A100-SXM4-80GB", true));
    CHECK(pt_stack_ptrun_gemm(&mc, PT_GEMM_WGRAD) && !pt_stack_ptrun_gemm(&fsdp, PT_GEMM_WGRAD));
    CHECK(!pt_stack_ptrun_gemm(&lm, PT_GEMM_WGRAD) && pt_stack_ptrun_gemm(&lm, PT_GEMM_FWD));
    CHECK(!pt_stack_ptrun_gemm(&mc, PT_GEMM_DGRAD) && !pt_stack_ptrun_gemm(&mc, PT_GEMM_FWD_GELU));
    CHECK(!pt_stack_ptrun_gemm(&mc, -1) && !pt_stack_ptrun_gemm(&mc, PT_GEMM_ROLE_COUNT));
    CHECK(pt_stack_ptrun_attn(&mc, "H100-SXM5-80GB", false));
    CHECK(!pt_stack_ptrun_attn(&mc, "H100-SXM5-80GB", true));
    CHECK(!pt_stack_ptrun_attn(&mc, "A100-SXM4-80GB", false));
    CHECK(!pt_stack_ptrun_attn(&fsdp, "H100-SXM5-80GB", false));
    CHECK(!pt_stack_ptrun_attn(&lm, "H100-SXM5-80GB", false));
    char *text = pt_stack_to_json(&mc);
    CHECK(text != NULL);
    pt_stack back;
    CHECK_INT(pt_stack_from_json(text, "<mc>", &back, &err), 0);
    CHECK_INT(back.ptrun_gemm_roles, mc.ptrun_gemm_roles);
    CHECK_INT(back.n_ptrun_attn, mc.n_ptrun_attn);
    for (int i = 0; i < mc.n_ptrun_attn && i < back.n_ptrun_attn; i++) {
        CHECK_STR(back.ptrun_attn[i].device, mc.ptrun_attn[i].device);
        CHECK(back.ptrun_attn[i].fwd == mc.ptrun_attn[i].fwd);
        CHECK(back.ptrun_attn[i].bwd == mc.ptrun_attn[i].bwd);
    }
    free(text);
}

int main(void)
{
    test_declared();
    test_gemm_from_profile();
    test_same_shape_only();
    test_own_kernels_analytic();
    test_attention_from_profile();
    test_moe_host_sync();
    return pt_check_result();
}
