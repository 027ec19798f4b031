/*
 * Simulator tests. With uniform costs the pipeline bubble is the textbook one:
 * (p-1)/m for 1F1B and all-forward-all-backward, (p-1)/(v·m) for interleaved 1F1B
 * (Narayanan et al. 2021, Sec. 2.2). Transfers, gradient-bucket overlap and the
 * optimizer add exactly what they should, and a priced layout gives sane figures.
 */
#include "check.h"
#include "planner.h"

#include <jansson.h>

static pt_layout pipeline(int pp, int vp, int n, pt_schedule s)
{
    pt_layout l;
    pt_layout_default(&l);
    l.pp = pp;
    l.vp = vp;
    l.n_micro = n;
    l.schedule = s;
    return l;
}

/* Every chunk costs 1/vp forward and 2/vp backward; nothing else costs anything. */
static void uniform(pt_sim_costs *c, int pp, int vp)
{
    pt_sim_costs_alloc(c, pp, vp);
    for (int vs = 0; vs < pp * vp; vs++) {
        c->fwd_s[vs] = 1.0 / vp;
        c->bwd_s[vs] = 2.0 / vp;
    }
}

static double run(const pt_layout *l, const pt_sim_costs *c, pt_sim_result *r)
{
    pt_err err;
    if (pt_sim_run(l, c, 1000, 0, NULL, r, &err)) {
        fprintf(stderr, "sim: %s\n", err.msg);
        pt_check_failures++;
        return -1;
    }
    return r->step_time_s;
}

static void test_bubbles(void)
{
    for (int pp = 2; pp <= 8; pp++)
        for (int m = pp; m <= 4 * pp; m += pp) {
            for (int s = PT_SCHED_AFAB; s <= PT_SCHED_1F1B; s++) {
                pt_layout l = pipeline(pp, 1, m, (pt_schedule)s);
                pt_sim_costs c;
                pt_sim_result r;
                uniform(&c, pp, 1);
                run(&l, &c, &r);
                CHECK_NEAR(r.bubble_fraction, (double)(pp - 1) / m, 1e-9);
                CHECK_NEAR(r.step_time_s, 3.0 * (m + pp - 1), 1e-9);
                pt_sim_costs_free(&c);
            }
            for (int vp = 2; vp <= 4; vp++) {
                pt_layout l = pipeline(pp, vp, m, PT_SCHED_INTERLEAVED);
                pt_sim_costs c;
                pt_sim_result r;
                uniform(&c, pp, vp);
                run(&l, &c, &r);
                CHECK_NEAR(r.bubble_fraction, (double)(pp - 1) / (vp * m), 1e-9);
                pt_sim_costs_free(&c);
            }
        }
}

static void test_transfers(void)
{
    /* pp=2, one micro-batch: F(r0) send F(r1) B(r1) send B(r0) = 1+.5+1+2+.5+2 */
    pt_layout l = pipeline(2, 1, 1, PT_SCHED_1F1B);
    pt_sim_costs c;
    pt_sim_result r;
    uniform(&c, 2, 1);
    c.p2p_s[0] = c.p2p_s[1] = 0.5;
    CHECK_NEAR(run(&l, &c, &r), 7.0, 1e-12);
    CHECK_NEAR(r.bubble_fraction, (7.0 - 3.0) / 3.0, 1e-12);
    pt_sim_costs_free(&c);

    /* Two micro-batches, 1F1B. Sends beside compute: r0 F0 [0,1] F1 [1,2]; r1 F0
     * [1.5,2.5] B0 [2.5,4.5] F1 [4.5,5.5] B1 [5.5,7.5]; r0 B0 [5,7] B1 [8,10]. Blocking
     * sends (Megatron-LM) hold the sender until delivery: r0 F1 starts at 1.5, r1 F1 at
     * 5 and B1 ends at 8, its send at 8.5, so r0's B1 runs [8.5,10.5]. */
    l = pipeline(2, 1, 2, PT_SCHED_1F1B);
    uniform(&c, 2, 1);
    c.p2p_s[0] = c.p2p_s[1] = 0.5;
    CHECK_NEAR(run(&l, &c, &r), 10.0, 1e-12);
    c.p2p_blocking = true;
    CHECK_NEAR(run(&l, &c, &r), 10.5, 1e-12);
    /* rank 0 ends it: its two blocked sends (1.0) and the warm-up and cool-down chain's
     * 2(p - 1) transfers (1.0) are exposed p2p */
    CHECK_NEAR(r.breakdown_s[PT_BD_P2P], 2.0, 1e-12);
    CHECK_NEAR(r.hidden_s[PT_BD_P2P], 0, 0);
    pt_sim_costs_free(&c);
}

static void test_gradient_overlap(void)
{
    /* One rank, one micro-batch: forward 1, backward 2, four buckets of 0.25 each
     * ready at 1.5, 2, 2.5 and 3 -> the last ends at 3.25; the optimizer 0.5 after. */
    pt_layout l = pipeline(1, 1, 1, PT_SCHED_1F1B);
    pt_sim_costs c;
    pt_sim_result r;
    uniform(&c, 1, 1);
    c.sync_s[0] = 1.0;
    c.sync_buckets[0] = 4;
    c.optim_s[0] = 0.5;
    CHECK_NEAR(run(&l, &c, &r), 3.75, 1e-12);
    CHECK_NEAR(r.exposed_comm_fraction, 0.25 / 3.75, 1e-12);
    /* Buckets slower than the backward: 4 x 1 s from 1.5 -> ends 5.5. */
    c.sync_s[0] = 4.0;
    CHECK_NEAR(run(&l, &c, &r), 6.0, 1e-12);
    /* 100 buckets (run as one span): 0.01 s each, ready every 0.02 s over [1, 3]:
     * the stream keeps up and the last ends at 3.01; at 0.04 s each it falls behind
     * from the first (ready at 1.02) and ends at 5.02. */
    c.sync_buckets[0] = 100;
    c.sync_s[0] = 1.0;
    CHECK_NEAR(run(&l, &c, &r), 3.51, 1e-12);
    c.sync_s[0] = 4.0;
    CHECK_NEAR(run(&l, &c, &r), 5.52, 1e-12);
    c.sync_buckets[0] = 4;
    /* Exposed communication inside forward and backward counts too. */
    c.sync_s[0] = 0;
    c.sync_buckets[0] = 0;
    c.fwd_comm_s[0] = 0.25;
    c.bwd_comm_s[0] = 0.5;
    CHECK_NEAR(run(&l, &c, &r), 3.5, 1e-12);
    CHECK_NEAR(r.exposed_comm_fraction, 0.75 / 3.5, 1e-12);
    pt_sim_costs_free(&c);
}

static void test_priced_layout(void)
{
    pt_model m;
    pt_cluster cl;
    pt_err err;
    CHECK_INT(pt_model_get("llama3-8b", &m, &err), 0);
    CHECK_INT(pt_cluster_get("dgx-h100", &cl, &err), 0);
    pt_train t;
    pt_train_default(&t, &cl);
    t.global_batch = 64;
    pt_layout l;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,pp=2,dp=2,zero=1,recompute=selective", 8, 64, &l, &err), 0);
    pt_sim_costs c;
    CHECK_INT(pt_sim_price(&m, &cl, &t, NULL, &l, &c, &err), 0);
    double peak = cl.device.peak_flops[PT_DTYPE_BF16] * 8;
    pt_sim_result r;
    json_t *trace = json_array();
    CHECK_INT(pt_sim_run(&l, &c, 64 * m.seq, peak, trace, &r, &err), 0);
    CHECK(r.step_time_s > 0);
    CHECK(r.mfu > 0.05 && r.mfu < 0.9);
    CHECK(r.hfu > r.mfu); /* selective recomputation repeats the attention core */
    CHECK_NEAR(r.tokens_per_s, 64.0 * m.seq / r.step_time_s, 1e-12);
    CHECK_NEAR(r.prov_share[PT_PROV_ANALYTIC], 1.0, 1e-12);
    CHECK(r.bubble_fraction > 0);
    CHECK(r.exposed_comm_fraction > 0 && r.exposed_comm_fraction < 1);
    /* One F and one B span per (micro-batch, chunk) per stage, plus the rest. */
    CHECK((int64_t)json_array_size(trace) >= 2 * l.n_micro * l.pp);
    /* The estimate used for choosing what to simulate is in the right range. */
    double est = pt_sim_estimate(&l, &c);
    CHECK(est > 0.5 * r.step_time_s && est < 2 * r.step_time_s);
    json_decref(trace);
    pt_sim_costs_free(&c);
}

/* A measured sample in the cost table replaces the analytic price of exactly the op
 * with its key: the provenance shows it, and a slower sample slows the step. */
static void test_measured_costs(void)
{
    pt_model m;
    pt_cluster cl;
    pt_err err;
    CHECK_INT(pt_model_get("gpt2-124m", &m, &err), 0);
    /* without biases: the forward GEMMs' kind is plain "gemm", whose samples a
     * gradient's GEMM of the same shape falls back to (a biased forward's is
     * "gemm_bias") */
    m.bias = false;
    CHECK_INT(pt_cluster_get("dgx-a100-80g", &cl, &err), 0);
    pt_train t;
    pt_train_default(&t, &cl);
    t.global_batch = 16;
    pt_layout l;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,dp=4", 8, 16, &l, &err), 0);
    pt_opctx ctx;
    pt_opctx_init(&ctx, &m, &l, &t, &cl);
    pt_oplist o = {0};
    CHECK_INT(pt_ops_layer(&ctx, false, &o), 0);
    pt_kernel_op q_gemm;
    memset(&q_gemm, 0, sizeof q_gemm);
    const pt_kernel_op *q_op = &q_gemm;
    for (int i = 0; i < o.n; i++)
        if (o.op[i].kind == PT_OPK_Q)
            q_gemm = o.op[i].kernel;
    CHECK(q_gemm.flops > 0);
    pt_cost_hw hw;
    pt_cost_hw_of(&cl, &hw);
    double analytic = pt_cost_kernel_analytic(&hw, q_op);

    pt_costdb *db;
    CHECK_INT(pt_costdb_open(NULL, PT_COSTDB_CREATE, &db, &err), 0);
    pt_candidate base, slow;
    CHECK_INT(pt_evaluate(&m, &cl, &t, db, &l, NULL, &base, &err), 0);
    CHECK_NEAR(base.predicted.prov_share[PT_PROV_ANALYTIC], 1.0, 1e-12);
    /* The same op measured 10x slower than the analytic figure. */
    CHECK_INT(pt_costdb_add_kernel(db, hw.device, q_op, 10 * analytic, PT_SOURCE_PROFILE, &err), 0);
    CHECK_INT(pt_evaluate(&m, &cl, &t, db, &l, NULL, &slow, &err), 0);
    CHECK(slow.predicted.prov_share[PT_PROV_MEASURED] > 0);
    /* The op with that key is measured; the other forward GEMMs of exactly its FLOPs
     * (k, v, the attention output) are interpolated onto the same sample, and so is a
     * gradient's GEMM of q's very shape (the attention output's data gradient: m = T,
     * n = h/t, k = h), which takes the forward's sample of its shape where it has none
     * of its own kind. Gradient GEMMs of other shapes stay analytic: their kinds have
     * no sample. Each that takes it costs 10x q's analytic time instead of its own
     * (which differs from q's by its shape), per layer and micro-batch (one stage, no
     * overlap). */
    int uses = 0, grads = 0;
    double grow = 0;
    const char *q_shape = strchr(q_op->key, ':');
    CHECK_INT(pt_ops_layer(&ctx, true, &o), 0);
    for (int i = 0; i < o.n; i++) {
        const char *key = o.op[i].kernel.key, *shape = strchr(key, ':');
        if (o.op[i].cls != PT_OP_KERNEL || !shape)
            continue;
        bool fwd = strncmp(key, "gemm:", 5) == 0 && o.op[i].kernel.flops == q_op->flops;
        bool grad = (strncmp(key, "gemm_dgrad:", 11) == 0 ||
                     strncmp(key, "gemm_dgrad_write:", 17) == 0 ||
                     strncmp(key, "gemm_wgrad:", 11) == 0) && strcmp(shape, q_shape) == 0;
        if (fwd || grad) {
            uses++;
            grads += grad;
            grow += 10 * analytic - pt_cost_kernel_analytic(&hw, &o.op[i].kernel);
        }
    }
    CHECK(uses >= 4);
    CHECK_INT(grads, 1);
    grow *= (double)m.layers * (double)l.n_micro;
    CHECK_NEAR(slow.predicted.step_time_s - base.predicted.step_time_s, grow, 1e-6);
    pt_costdb_close(db);
    pt_oplist_free(&o);
}

/* llama3-8b on two DGX H100 nodes (16 ranks), global batch 64, the ptrun stack. */
static void two_nodes_8b(pt_model *m, pt_cluster *cl, pt_train *t)
{
    pt_err err;
    CHECK_INT(pt_model_get("llama3-8b", m, &err), 0);
    CHECK_INT(pt_cluster_get("dgx-h100", cl, &err), 0);
    cl->nodes = 2;
    pt_train_default(t, cl);
    t->global_batch = 64;
}

/* Uneven stages: every virtual stage is priced with its own layers (7, 9, 9, 7 of
 * llama3-8b's 32 against 8 each), and its gradient reduction and optimizer step with
 * its own parameters. */
static void test_uneven_priced(void)
{
    pt_model m;
    pt_cluster cl;
    pt_train t;
    pt_err err;
    two_nodes_8b(&m, &cl, &t);
    pt_layout even, uneven;
    pt_layout_default(&even);
    pt_layout_default(&uneven);
    CHECK_INT(pt_layout_parse("tp=2,pp=4,dp=2", 16, 64, &even, &err), 0);
    CHECK_INT(pt_layout_parse("tp=2,pp=4,dp=2,first_layers=7,last_layers=7", 16, 64, &uneven,
                              &err), 0);
    CHECK_INT(pt_layout_check(&m, &cl, 64, &uneven, NULL), 0);
    pt_sim_costs e, u;
    CHECK_INT(pt_sim_price(&m, &cl, &t, NULL, &even, &e, &err), 0);
    CHECK_INT(pt_sim_price(&m, &cl, &t, NULL, &uneven, &u, &err), 0);
    double layer_fwd = e.fwd_s[1] / 8, layer_bwd = e.bwd_s[1] / 8;
    CHECK(layer_fwd > 0);
    CHECK_NEAR(u.fwd_s[1], 9 * layer_fwd, 1e-12);
    CHECK_NEAR(u.bwd_s[2], 9 * layer_bwd, 1e-12);
    CHECK_NEAR(e.fwd_s[0] - u.fwd_s[0], layer_fwd, 1e-9); /* the embedding stays */
    CHECK_NEAR(e.bwd_s[3] - u.bwd_s[3], layer_bwd, 1e-9); /* the head stays */
    CHECK(u.sync_s[1] > e.sync_s[1] && u.sync_s[0] < e.sync_s[0]);
    CHECK(u.optim_s[1] > e.optim_s[1] && u.optim_s[3] < e.optim_s[3]);
    pt_sim_costs_free(&e);
    pt_sim_costs_free(&u);
}

/* Step time of `layout` for llama3-8b on two DGX H100 nodes under `stack`; the
 * candidate's breakdown must add up to its step time, with no negative part. */
static double stack_step(const char *stack, const char *layout, pt_candidate *cand)
{
    pt_model m;
    pt_cluster cl;
    pt_train t;
    pt_err err;
    two_nodes_8b(&m, &cl, &t);
    CHECK_INT(pt_stack_get(stack, &t.stack, &err), 0);
    pt_layout l;
    pt_layout_default(&l);
    if (pt_layout_parse_stack(layout, 16, 64, &t.stack, &l, &err) ||
        pt_evaluate(&m, &cl, &t, NULL, &l, NULL, cand, &err)) {
        fprintf(stderr, "%s under %s: %s\n", layout, stack, err.msg);
        pt_check_failures++;
        return -1;
    }
    double sum = 0;
    for (int k = 0; k < PT_BD_COUNT; k++) {
        CHECK(cand->predicted.breakdown_s[k] >= 0 && cand->predicted.hidden_s[k] >= 0);
        sum += cand->predicted.breakdown_s[k];
    }
    CHECK_NEAR(sum, cand->predicted.step_time_s, 1e-9 * cand->predicted.step_time_s);
    return cand->predicted.step_time_s;
}

/* Each stack prices a layout as its software runs the step. */
static void test_stacks(void)
{
    pt_candidate a, b;
    /* The breakdown adds up under every built-in stack and its own kind of layout. */
    CHECK(stack_step("ptrun", "tp=2,pp=2,dp=4,zero=1", &a) > 0);
    CHECK(a.predicted.breakdown_s[PT_BD_BUBBLE] > 0 && a.predicted.breakdown_s[PT_BD_TP] > 0);
    CHECK(stack_step("megatron-lm", "tp=2,pp=2,dp=4,zero=1", &a) > 0);
    /* Megatron-LM's pipeline sends block: every transfer is exposed, none hidden. */
    CHECK(a.predicted.breakdown_s[PT_BD_P2P] > 0 && a.predicted.hidden_s[PT_BD_P2P] == 0);
    CHECK(stack_step("megatron-core", "tp=2,pp=2,vp=2,dp=4,zero=1,tp_overlap=1", &a) > 0);
    CHECK(stack_step("fsdp", "dp=16,zero=3", &a) > 0);
    CHECK(a.predicted.hidden_s[PT_BD_DP] > 0); /* FSDP's gathers run beside compute */

    /* Reducing gradients only after the backward (Megatron-LM's DDP) leaves the whole
     * reduction exposed; overlapping it with the last micro-batch's backward hides some. */
    double none = stack_step("megatron-core", "tp=2,pp=2,dp=4,zero=1,dp_overlap=none", &a);
    double last = stack_step("megatron-core", "tp=2,pp=2,dp=4,zero=1,dp_overlap=last", &b);
    CHECK(none > last);
    CHECK(a.predicted.breakdown_s[PT_BD_DP] > b.predicted.breakdown_s[PT_BD_DP]);
    CHECK(b.predicted.hidden_s[PT_BD_DP] > a.predicted.hidden_s[PT_BD_DP]);

    /* Unfused attention writes and reads the score matrix: megatron-lm's attention costs
     * more than megatron-core's flash attention on the same layout. */
    stack_step("megatron-lm", "tp=2,pp=2,dp=4,zero=1", &a);
    stack_step("megatron-core", "tp=2,pp=2,dp=4,zero=1,dp_overlap=none,param_overlap=0", &b);
    CHECK(a.predicted.breakdown_s[PT_BD_ATTN] > b.predicted.breakdown_s[PT_BD_ATTN]);

    /* Flash attention keeps no score matrix: its activations are the unfused ones less
     * the bf16 softmax output (2 bytes per head, query and key; llama3-8b has no
     * dropout) plus one fp32 log-sum-exp per head and query. */
    pt_model m;
    pt_err err;
    CHECK_INT(pt_model_get("llama3-8b", &m, &err), 0);
    pt_layout l;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=2,mbs=1", 2, 64, &l, &err), 0);
    pt_precision bf16 = pt_precision_of(PT_PREC_BF16);
    double flash = pt_mem_layer_activations_attn(&m, &l, bf16, PT_ATTN_FLASH);
    double unfused = pt_mem_layer_activations_attn(&m, &l, bf16, PT_ATTN_UNFUSED);
    double heads = (double)(m.heads / 2), s = (double)m.seq;
    CHECK(flash > 0);
    CHECK_NEAR(unfused - flash, 2.0 * heads * s * s - 4.0 * heads * s, 1.0);
    /* ... and with full recomputation both keep only the layer input. */
    l.recompute = PT_RECOMPUTE_FULL;
    CHECK_NEAR(pt_mem_layer_activations_attn(&m, &l, bf16, PT_ATTN_FLASH),
               pt_mem_layer_activations_attn(&m, &l, bf16, PT_ATTN_UNFUSED), 0);

    /* Vocabulary padding by stack: GPT-2's 50,257 at tp = 8 is 51,200 under Megatron's
     * 128·tp rule, 50,304 under ptrun's (128, then a multiple of tp), as is under FSDP. */
    pt_model g;
    CHECK_INT(pt_model_get("gpt2-124m", &g, &err), 0);
    pt_stack st;
    CHECK_INT(pt_stack_get("megatron-core", &st, &err), 0);
    CHECK_INT(pt_stack_vocab(&st, &g, 8), 51200);
    CHECK_INT(pt_stack_get("ptrun", &st, &err), 0);
    CHECK_INT(pt_stack_vocab(&st, &g, 8), pt_vocab_padded(&g, 8));
    CHECK_INT(pt_stack_vocab(&st, &g, 8), 50304);
    CHECK_INT(pt_stack_get("fsdp", &st, &err), 0);
    CHECK_INT(pt_stack_vocab(&st, &g, 1), 50257);
}

/* Two priced layouts are the same to the bit. */
static bool same_costs(const pt_sim_costs *a, const pt_sim_costs *b)
{
    int V = a->pp * a->vp;
    bool same = a->pp == b->pp && a->vp == b->vp && a->model_flops == b->model_flops &&
                a->hardware_flops == b->hardware_flops && a->overhead_s == b->overhead_s;
    for (int k = 0; k < PT_PROV_COUNT; k++)
        same &= a->prov_s[k] == b->prov_s[k];
    for (int i = 0; same && i < V; i++)
        same = a->fwd_s[i] == b->fwd_s[i] && a->bwd_s[i] == b->bwd_s[i] &&
               a->fwd_comm_s[i] == b->fwd_comm_s[i] && a->bwd_comm_s[i] == b->bwd_comm_s[i] &&
               a->sync_s[i] == b->sync_s[i] && a->sync_buckets[i] == b->sync_buckets[i];
    for (int i = 0; same && i < V * PT_BD_COUNT; i++)
        same = a->bd_exposed[i] == b->bd_exposed[i] && a->bd_hidden[i] == b->bd_hidden[i];
    for (int r = 0; same && r < a->pp; r++)
        same = a->optim_s[r] == b->optim_s[r] && a->optim_comm_s[r] == b->optim_comm_s[r];
    return same;
}

/* The search's memo prices a layout as pricing it alone does, whichever layouts of the
 * same op lists (another split of the layers, schedule, overlap) came before, for dense
 * and mixture-of-experts models (the memo keyed wrongly would hand one layout another's
 * lists: ep, zero, mbs or sp differing below). */
static void test_memo_same_prices(void)
{
    pt_cluster c;
    pt_err err;
    CHECK_INT(pt_cluster_get("dgx-h100", &c, &err), 0);
    c.nodes = 2;
    static const char *const models[] = {"llama3-8b", "tiny-moe"};
    static const char *const layouts[] = {
        "tp=2,sp=1,pp=2,dp=4,zero=1,mbs=1", "tp=2,sp=1,pp=2,vp=2,dp=4,zero=1,mbs=1",
        "tp=2,sp=1,pp=2,dp=4,zero=1,mbs=1,first_layers=1", "tp=2,sp=1,pp=2,dp=4,zero=1,mbs=2",
        "tp=2,sp=1,pp=2,dp=4,zero=1,mbs=1,dp_overlap=none", "tp=2,pp=2,dp=4,zero=0,mbs=1",
        "tp=2,sp=1,pp=2,dp=4,zero=1,mbs=1,ep=2", "tp=2,sp=1,pp=2,dp=4,zero=1,mbs=1,ep=4",
        "tp=2,sp=1,pp=2,vp=2,dp=4,zero=1,mbs=1,ep=4", "tp=2,sp=1,pp=2,dp=4,ep=2,etp=2,zero=1"};
    for (int mi = 0; mi < 2; mi++) {
        pt_model m;
        pt_train t;
        CHECK_INT(pt_model_get(models[mi], &m, &err), 0);
        pt_train_default(&t, &c);
        CHECK_INT(pt_stack_get("megatron-core", &t.stack, &err), 0);
        t.global_batch = 64;
        pt_sim_memo *memo = pt_sim_memo_new(&m, &c, &t, NULL);
        CHECK(memo != NULL);
        for (int pass = 0; pass < 2; pass++) /* the second pass finds every key */
            for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
                pt_layout l;
                pt_layout_default(&l);
                CHECK_INT(pt_layout_parse_stack(layouts[i], 16, 64, &t.stack, &l, &err), 0);
                if ((l.ep > 1 || l.etp > 1) && m.moe.experts == 0)
                    continue;
                if (m.moe.experts > 0 && l.tp > 1 && !l.sp)
                    continue;
                pt_sim_costs a, b;
                CHECK_INT(pt_sim_price(&m, &c, &t, NULL, &l, &a, &err), 0);
                CHECK_INT(pt_sim_price_memo(&m, &c, &t, NULL, &l, memo, &b, &err), 0);
                if (!same_costs(&a, &b))
                    fprintf(stderr, "memo differs: %s %s pass %d\n", models[mi], layouts[i],
                            pass);
                CHECK(same_costs(&a, &b));
                pt_sim_costs_free(&a);
                pt_sim_costs_free(&b);
            }
        /* a memo made for another model is not used */
        pt_model other = m;
        other.hidden *= 2;
        pt_layout l;
        pt_layout_default(&l);
        CHECK_INT(pt_layout_parse_stack(layouts[0], 16, 64, &t.stack, &l, &err), 0);
        pt_sim_costs a, b;
        CHECK_INT(pt_sim_price(&other, &c, &t, NULL, &l, &a, &err), 0);
        CHECK_INT(pt_sim_price_memo(&other, &c, &t, NULL, &l, memo, &b, &err), 0);
        CHECK(same_costs(&a, &b));
        pt_sim_costs_free(&a);
        pt_sim_costs_free(&b);
        pt_sim_memo_free(memo);
    }
}

int main(void)
{
    test_memo_same_prices();
    test_stacks();
    test_measured_costs();
    test_uneven_priced();
    test_bubbles();
    test_transfers();
    test_gradient_overlap();
    test_priced_layout();
    return pt_check_result();
}
