/*
 * Layer op list tests: the FLOPs of a whole step agree with the standard model-FLOPs
 * formula, the collectives of each parallelism appear as often as Megatron-LM runs
 * them, and op keys are the stable text the cost tables use.
 */
#include "check.h"
#include "planner.h"

static pt_model gpt(int64_t L, int64_t h, int64_t a, int64_t s, int64_t v)
{
    return (pt_model){.name = "g", .layers = L, .hidden = h, .heads = a, .kv_heads = a,
                      .ffn = 4 * h, .vocab = v, .seq = s, .norm = PT_NORM_LAYERNORM,
                      .act = PT_ACT_GELU, .pos = PT_POS_LEARNED, .tied_embeddings = true,
                      .bias = true, .dropout = true};
}

static pt_layout layout(const char *text, int64_t gb)
{
    pt_layout l;
    pt_err err;
    pt_layout_default(&l);
    if (pt_layout_parse(text, 0, gb, &l, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        pt_check_failures++;
    }
    return l;
}

static pt_train train(int64_t gb)
{
    pt_train t;
    pt_train_default(&t, NULL);
    t.global_batch = gb;
    t.precision = PT_PREC_BF16;
    return t;
}

/* Korthikanti et al. 2022, Sec. 6 (after Narayanan et al. 2021, Appendix): model FLOPs
 * per iteration 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)); with full recomputation the
 * hardware does 96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h)). */
static void test_flops_formula(void)
{
    static const char *layouts[] = {"dp=1", "tp=4,dp=2", "tp=2,sp=1,pp=2,dp=2",
                                    "cp=2,tp=2,dp=2", "pp=4,vp=2,dp=1,mbs=2",
                                    "recompute=full,tp=2,dp=4", "recompute=selective,dp=8"};
    pt_model m = gpt(24, 2048, 16, 2048, 51200); /* vocabulary divisible by tp */
    int64_t B = 64;
    double Bd = (double)B, s = 2048, L = 24, h = 2048, V = 51200;
    double model = 72 * Bd * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h));
    double full = 96 * Bd * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        pt_layout l = layout(layouts[i], B);
        pt_train t = train(B);
        pt_opctx c;
        pt_opctx_init(&c, &m, &l, &t, NULL);
        CHECK_NEAR(pt_step_model_flops(&c), model, 1e-12);
        double hw = pt_step_hardware_flops(&c);
        if (l.recompute == PT_RECOMPUTE_FULL)
            CHECK_NEAR(hw, full, 1e-12);
        else if (l.recompute == PT_RECOMPUTE_NONE)
            CHECK_NEAR(hw, model, 1e-12);
        else /* selective: the attention core's forward once more, 4·B·s²·h per layer */
            CHECK_NEAR(hw, model + 4 * Bd * s * s * h * L, 1e-12);
    }
}

/* Counts collectives of a kind in a list. */
static int count(const pt_oplist *o, pt_coll what, pt_group_kind g)
{
    int n = 0;
    for (int i = 0; i < o->n; i++)
        if (o->op[i].cls == PT_OP_COLL && o->op[i].coll.op == what && o->op[i].group == g)
            n += 1;
    return n;
}

static void layer_lists(const char *text, pt_oplist *fwd, pt_oplist *bwd)
{
    pt_model m = gpt(4, 1024, 16, 1024, 50304);
    pt_layout l = layout(text, 16);
    pt_train t = train(16);
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    *fwd = (pt_oplist){0};
    *bwd = (pt_oplist){0};
    CHECK_INT(pt_ops_layer(&c, false, fwd), 0);
    CHECK_INT(pt_ops_layer(&c, true, bwd), 0);
}

static void test_collectives(void)
{
    pt_oplist f, b;
    /* tp without sp: "g" after both row-parallel GEMMs forward, "f" before both
     * column-parallel ones backward (Shoeybi et al. 2019, Fig. 3). */
    layer_lists("tp=4,dp=1", &f, &b);
    CHECK_INT(count(&f, PT_COLL_ALLREDUCE, PT_GROUP_TP), 2);
    CHECK_INT(count(&b, PT_COLL_ALLREDUCE, PT_GROUP_TP), 2);
    CHECK_INT(count(&f, PT_COLL_ALLGATHER, PT_GROUP_TP), 0);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    /* sp: all-gather before and reduce-scatter after each block; backward gathers
     * the gradient, re-gathers the input for the weight gradient, reduce-scatters. */
    layer_lists("tp=4,sp=1,dp=1", &f, &b);
    CHECK_INT(count(&f, PT_COLL_ALLGATHER, PT_GROUP_TP), 2);
    CHECK_INT(count(&f, PT_COLL_REDUCESCATTER, PT_GROUP_TP), 2);
    CHECK_INT(count(&f, PT_COLL_ALLREDUCE, PT_GROUP_TP), 0);
    CHECK_INT(count(&b, PT_COLL_ALLGATHER, PT_GROUP_TP), 4);
    CHECK_INT(count(&b, PT_COLL_REDUCESCATTER, PT_GROUP_TP), 2);
    /* The gathered activation is the whole sequence: 2 bytes · 1024 tokens · 1024. */
    for (int i = 0; i < f.n; i++)
        if (f.op[i].cls == PT_OP_COLL)
            CHECK_NEAR(f.op[i].coll.bytes, 2.0 * 1024 * 1024, 0);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    /* tp_overlap: the gathers before column-parallel GEMMs (2 forward, 2 of the 4
     * backward) run beside them; the backward's gradient gathers and every
     * reduce-scatter stay exposed. */
    for (int on = 0; on < 2; on++) {
        layer_lists(on ? "tp=4,sp=1,tp_overlap=1,dp=1" : "tp=4,sp=1,dp=1", &f, &b);
        int hidden_f = 0, hidden_b = 0;
        for (int i = 0; i < f.n; i++)
            hidden_f += f.op[i].cls == PT_OP_COLL && f.op[i].overlapped;
        for (int i = 0; i < b.n; i++)
            hidden_b += b.op[i].cls == PT_OP_COLL && b.op[i].overlapped;
        CHECK_INT(hidden_f, on ? 2 : 0);
        CHECK_INT(hidden_b, on ? 2 : 0);
        pt_oplist_free(&f);
        pt_oplist_free(&b);
    }
    /* cp: a ring of c-1 K/V steps forward, overlapped. */
    layer_lists("cp=4,dp=1", &f, &b);
    CHECK_INT(count(&f, PT_COLL_SENDRECV, PT_GROUP_CP), 1);
    for (int i = 0; i < f.n; i++)
        if (f.op[i].cls == PT_OP_COLL) {
            CHECK_INT(f.op[i].count, 3);
            CHECK(f.op[i].overlapped);
            /* K and V of 256 local tokens, 1024 wide, bf16 */
            CHECK_NEAR(f.op[i].coll.bytes, 2.0 * 2 * 256 * 1024, 0);
        }
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    /* ZeRO-3 gathers weights forward and again backward, reduce-scatters gradients. */
    layer_lists("dp=8,zero=3", &f, &b);
    CHECK_INT(count(&f, PT_COLL_ALLGATHER, PT_GROUP_DPCP), 1);
    CHECK_INT(count(&b, PT_COLL_ALLGATHER, PT_GROUP_DPCP), 1);
    CHECK_INT(count(&b, PT_COLL_REDUCESCATTER, PT_GROUP_DPCP), 1);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    /* Full recomputation repeats the forward (with its all-reduces) in backward. */
    layer_lists("tp=2,dp=1,recompute=full", &f, &b);
    CHECK_INT(count(&b, PT_COLL_ALLREDUCE, PT_GROUP_TP), 4);
    int repeated = 0;
    for (int i = 0; i < b.n; i++)
        repeated += b.op[i].recompute;
    CHECK_INT(repeated, f.n);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
}

static void test_keys(void)
{
    pt_oplist f, b;
    layer_lists("tp=4,dp=1", &f, &b);
    /* q, k, v: 1024 tokens, 1024/4 = 256 outputs each, 1024 inputs */
    CHECK(f.op[1].kind == PT_OPK_Q && f.op[1].param == PT_PARAM_Q);
    CHECK(strcmp(f.op[1].kernel.key, "gemm_bias:bf16:m=1024,n=256,k=1024") == 0);
    /* T·h and h·h/t read, T·h/t written, the bias (h/t) read */
    CHECK_NEAR(f.op[1].kernel.bytes, 2 * (1024.0 * 1024 + 1024.0 * 256 + 1024.0 * 256 + 256), 0);
    CHECK(f.op[2].kind == PT_OPK_K && f.op[3].kind == PT_OPK_V);
    CHECK(strcmp(f.op[0].kernel.key, "layernorm_fwd:bf16:rows=1024,cols=1024") == 0);
    int attn = 0;
    for (int i = 0; i < f.n; i++)
        if (f.op[i].kind == PT_OPK_ATTN) {
            attn++;
            CHECK(strcmp(f.op[i].kernel.key,
                         "attn_fwd:bf16:b=1,a=4,kv=4,sq=1024,sk=1024,d=64") == 0);
        }
    CHECK_INT(attn, 1);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
}

static void test_grad_sync_and_optimizer(void)
{
    pt_model m = gpt(4, 1024, 16, 1024, 50304);
    pt_layout l = layout("dp=8,zero=0", 16);
    pt_train t = train(16);
    t.bucket_bytes = 1000;
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    pt_oplist o = {0};
    /* 1100 parameters of fp32 gradients = 4400 bytes: buckets 1000 x4 (one op run
     * four times) + 400 */
    CHECK_INT(pt_ops_grad_sync(&c, 1100, 0, &o), 0);
    CHECK_INT(o.n, 2);
    CHECK_NEAR(o.op[0].coll.bytes, 1000, 0);
    CHECK_INT(o.op[0].count, 4);
    CHECK_NEAR(o.op[1].coll.bytes, 400, 0);
    CHECK_INT(o.op[1].count, 1);
    CHECK_INT(o.op[0].coll.op, PT_COLL_ALLREDUCE);
    CHECK_INT(o.op[0].coll.group, 8);
    pt_oplist_free(&o);
    /* A 1-byte bucket over 2^40 bytes stays one op, with at most 2^30 buckets. */
    t.bucket_bytes = 1;
    CHECK_INT(pt_ops_grad_sync(&c, 0x1p38, 0, &o), 0);
    CHECK_INT(o.n, 1);
    CHECK_INT(o.op[0].count, 1 << 30);
    CHECK_NEAR(o.op[0].coll.bytes * o.op[0].count, 0x1p40, 0);
    pt_oplist_free(&o);
    t.bucket_bytes = 1000;
    /* The bucket rule the runtime's ZeRO-1 buckets and the memory model share: 10
     * elements in buckets of 4 from the top down are [6, 10), [2, 6), then [0, 2); over
     * 3 ranks each owns ceil(4/3) + ceil(4/3) + ceil(2/3) = 5 of them. */
    CHECK_INT(pt_bucket_count(10, 4), 3);
    CHECK_INT(pt_bucket_count(8, 4), 2);
    CHECK_INT(pt_bucket_count(0, 4), 0);
    int64_t off, cnt;
    pt_bucket_at(10, 4, 0, &off, &cnt);
    CHECK(off == 6 && cnt == 4);
    pt_bucket_at(10, 4, 1, &off, &cnt);
    CHECK(off == 2 && cnt == 4);
    pt_bucket_at(10, 4, 2, &off, &cnt);
    CHECK(off == 0 && cnt == 2);
    pt_bucket_at(8, 4, 1, &off, &cnt);
    CHECK(off == 0 && cnt == 4);
    CHECK_NEAR(pt_bucket_shares(10, 4, 3), 5, 0);
    CHECK_NEAR(pt_bucket_shares(8, 4, 3), 4, 0);
    /* ZeRO 2/3 reduce in their layer lists: no buckets */
    l.zero = 2;
    CHECK_INT(pt_ops_grad_sync(&c, 1100, 0, &o), 0);
    CHECK_INT(o.n, 0);
    pt_oplist_free(&o);

    /* The step's end, ZeRO 0: the gradient norm summed over all 8 ranks (one double),
     * then Adam over every parameter. */
    l.zero = 0;
    pt_step_params sp = {.params = 8000, .edge = 3000, .tied = 0};
    CHECK_INT(pt_ops_optimizer(&c, &sp, &o), 0);
    CHECK_INT(o.n, 2);
    CHECK(o.op[0].kind == PT_OPK_GRAD_NORM && o.op[0].group == PT_GROUP_COUNT);
    CHECK_INT(o.op[0].coll.group, 8);
    CHECK_NEAR(o.op[0].coll.bytes, 8, 0);
    CHECK(strcmp(o.op[1].kernel.key, "adam:fp32:n=8000") == 0);
    pt_oplist_free(&o);
    /* ZeRO-1 shards the optimizer over 8 ranks and all-gathers after: ptrun keeps the
     * whole fp32 master on every rank and gathers that (runtime/engine.c), a stack
     * with Megatron's distributed optimizer the bf16 weights */
    l.zero = 1;
    CHECK_INT(pt_ops_optimizer(&c, &sp, &o), 0);
    CHECK_INT(o.n, 3);
    CHECK(strcmp(o.op[1].kernel.key, "adam:fp32:n=1000") == 0);
    CHECK_INT(o.op[2].coll.op, PT_COLL_ALLGATHER);
    CHECK_NEAR(o.op[2].coll.bytes, 8000 * 4, 0);
    pt_oplist_free(&o);
    pt_train tm = t;
    pt_err serr;
    CHECK_INT(pt_stack_get("megatron-core", &tm.stack, &serr), 0);
    pt_opctx cm;
    pt_opctx_init(&cm, &m, &l, &tm, NULL);
    CHECK_INT(pt_ops_optimizer(&cm, &sp, &o), 0);
    CHECK_NEAR(o.op[o.n - 1].coll.bytes, 8000 * 2, 0);
    pt_oplist_free(&o);
    /* ZeRO 3: the embedding's and head's gradients (kept whole) reduce-scattered first,
     * their weights gathered after */
    l.zero = 3;
    CHECK_INT(pt_ops_optimizer(&c, &sp, &o), 0);
    CHECK_INT(o.n, 4);
    CHECK(o.op[0].kind == PT_OPK_ZERO_REDUCESCATTER && !o.op[0].overlapped);
    CHECK_NEAR(o.op[0].coll.bytes, 3000 * 4, 0);
    CHECK(o.op[3].kind == PT_OPK_ZERO_ALLGATHER);
    CHECK_NEAR(o.op[3].coll.bytes, 3000 * 2, 0);
    pt_oplist_free(&o);
    /* A tied copy (first or last stage of a pipeline): its all-reduce over the two
     * stages comes first; ZeRO 1 reduce-scatters it at the step, the chunk's buckets
     * leave it out. */
    pt_layout lp = layout("pp=2,dp=4,zero=1", 16);
    pt_opctx_init(&c, &m, &lp, &t, NULL);
    double tied = pt_step_tied(&c, 0, 2);
    CHECK_NEAR(tied, 50304.0 * 1024, 0);
    CHECK_NEAR(pt_step_tied_out(&c, 1, 2), tied, 0);
    sp.tied = tied;
    CHECK_INT(pt_ops_optimizer(&c, &sp, &o), 0);
    CHECK_INT(o.n, 5);
    CHECK(o.op[0].kind == PT_OPK_EMBED_ALLREDUCE && o.op[0].src == PT_TEN_EMBED_GRAD);
    CHECK(o.op[1].kind == PT_OPK_ZERO_REDUCESCATTER);
    CHECK_NEAR(o.op[1].coll.bytes, tied * 4, 0);
    pt_oplist_free(&o);
    lp.zero = 0;
    CHECK_NEAR(pt_step_tied_out(&c, 0, 2), 0, 0);
}

static void test_ranks_per_node(void)
{
    pt_model m = gpt(4, 1024, 16, 1024, 50304);
    pt_layout l = layout("tp=8,pp=2,dp=2", 16);
    pt_train t = train(16);
    pt_cluster cl = {.name = "c", .nodes = 4, .devices_per_node = 8};
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, &cl);
    CHECK_INT(c.ranks_per_node[PT_GROUP_TP], 8);  /* a tp group fills a node */
    CHECK_INT(c.ranks_per_node[PT_GROUP_DP], 1);  /* dp peers are 8 ranks apart */
    CHECK_INT(c.ranks_per_node[PT_GROUP_PP], 1);
    CHECK_INT(c.embed_ranks_per_node, 1);
    cl.devices_per_node = 64;
    pt_opctx_init(&c, &m, &l, &t, &cl);
    CHECK_INT(c.ranks_per_node[PT_GROUP_PP], 2);
    CHECK_INT(c.embed_ranks_per_node, 2);
}

/* Sums over a list: the FLOPs of kernels marked recompute, and the bytes of kernels of
 * one kind. */
static double recompute_flops(const pt_oplist *o)
{
    double f = 0;
    for (int i = 0; i < o->n; i++)
        if (o->op[i].cls == PT_OP_KERNEL && o->op[i].recompute)
            f += o->op[i].kernel.flops * o->op[i].count;
    return f;
}

static double kind_bytes(const pt_oplist *o, pt_op_kind k, bool recompute)
{
    double b = 0;
    for (int i = 0; i < o->n; i++)
        if (o->op[i].kind == k && o->op[i].recompute == recompute)
            b += o->op[i].kernel.bytes;
    return b;
}

/* The backward of one llama-shaped layer (RMSNorm, SwiGLU, RoPE, GQA) under a stack. */
static void llama_lists(const pt_stack *st, const char *text, pt_oplist *fwd, pt_oplist *bwd)
{
    pt_model m = gpt(4, 1024, 16, 1024, 32000);
    m.norm = PT_NORM_RMSNORM;
    m.act = PT_ACT_SWIGLU;
    m.pos = PT_POS_ROPE;
    m.kv_heads = 4;
    m.ffn = 2816;
    m.dropout = m.bias = false;
    pt_layout l = layout(text, 16);
    pt_train t = train(16);
    t.stack = *st;
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    *fwd = (pt_oplist){0};
    *bwd = (pt_oplist){0};
    CHECK_INT(pt_ops_layer(&c, false, fwd), 0);
    CHECK_INT(pt_ops_layer(&c, true, bwd), 0);
}

/* torchtitan's per-op selective recomputation rebuilds the 2nd, 4th and 6th GEMM of
 * the forward (k, the output projection and up), never the attention kernel, and
 * every memory-bound op; Korthikanti's rebuilds only the attention kernel. Eager
 * modules move more bytes than fused kernels: RMSNorm 36 against 4 bytes per element
 * forward, RoPE 20 against 4, SwiGLU 10 against 6 (bf16). */
static void test_stack_kernels_and_selective(void)
{
    pt_stack st;
    pt_err err;
    CHECK_INT(pt_stack_get("fsdp", &st, &err), 0);
    CHECK_INT(st.kernels, PT_KERNELS_EAGER);
    CHECK_INT(st.selective, PT_SELECTIVE_OP);
    pt_oplist f, b;
    llama_lists(&st, "dp=1,mbs=2,recompute=selective", &f, &b);
    double T = 2 * 1024.0, h = 1024, kv = 4 * 64.0, ffn = 2816;
    CHECK_NEAR(recompute_flops(&b), 2 * T * (h * kv + h * h + h * ffn), 1.0);
    for (int i = 0; i < b.n; i++) {
        const pt_op *op = &b.op[i];
        if (op->recompute) {
            CHECK(op->kind != PT_OPK_ATTN && op->kind != PT_OPK_Q && op->kind != PT_OPK_V &&
                  op->kind != PT_OPK_MLP_GATE && op->kind != PT_OPK_MLP_DOWN);
            CHECK(op->cls == PT_OP_KERNEL);
        }
    }
    /* every memory-bound forward op is rebuilt once: as many bytes as the forward's */
    CHECK_NEAR(kind_bytes(&b, PT_OPK_NORM1, true), kind_bytes(&f, PT_OPK_NORM1, false), 0);
    CHECK_NEAR(kind_bytes(&b, PT_OPK_ACT, true), kind_bytes(&f, PT_OPK_ACT, false), 0);
    CHECK_NEAR(kind_bytes(&f, PT_OPK_NORM1, false), 36 * T * h, 0);
    CHECK_NEAR(kind_bytes(&b, PT_OPK_NORM1_BWD, false), 76 * T * h, 0);
    CHECK_NEAR(kind_bytes(&f, PT_OPK_ROPE, false), 20 * T * (h + kv), 0);
    CHECK_NEAR(kind_bytes(&f, PT_OPK_ACT, false), 10 * T * ffn, 0);
    CHECK_NEAR(kind_bytes(&b, PT_OPK_ACT_BWD, false), 18 * T * ffn, 0);
    pt_oplist_free(&f);
    pt_oplist_free(&b);

    /* The same stack with fused kernels and Korthikanti's selective recomputation. */
    st.kernels = PT_KERNELS_FUSED;
    st.selective = PT_SELECTIVE_ATTENTION;
    llama_lists(&st, "dp=1,mbs=2,recompute=selective", &f, &b);
    CHECK_NEAR(kind_bytes(&f, PT_OPK_NORM1, false), 4 * T * h, 0);
    CHECK_NEAR(kind_bytes(&f, PT_OPK_ROPE, false), 4 * T * (h + kv), 0);
    CHECK_NEAR(kind_bytes(&f, PT_OPK_ACT, false), 6 * T * ffn, 0);
    CHECK_NEAR(kind_bytes(&b, PT_OPK_NORM1, true), 0, 0);
    for (int i = 0; i < b.n; i++)
        if (b.op[i].recompute)
            CHECK_INT(b.op[i].kind, PT_OPK_ATTN);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
}

static int kind_count(const pt_oplist *o, pt_op_kind k)
{
    int n = 0;
    for (int i = 0; i < o->n; i++)
        n += o->op[i].kind == k;
    return n;
}

static const char *kind_key(const pt_oplist *o, pt_op_kind k)
{
    for (int i = 0; i < o->n; i++)
        if (o->op[i].kind == k)
            return o->op[i].kernel.key;
    return "";
}

static double list_total(const pt_oplist *o, bool flops)
{
    double t = 0;
    for (int i = 0; i < o->n; i++)
        if (o->op[i].cls == PT_OP_KERNEL)
            t += (flops ? o->op[i].kernel.flops : o->op[i].kernel.bytes) * o->op[i].count;
    return t;
}

/* Each GEMM's role is in its kind, as ptprofile times each (the runtime's call): the
 * first data gradient into a buffer writes it (the attention output's, the MLP's
 * down projection's, the first projection of an input: q, the head's), the others add
 * into it (read and written); weight gradients add into fp32, with the bias gradient
 * from the same call where the model has biases. */
static void test_gemm_roles(void)
{
    pt_oplist f, b;
    layer_lists("tp=4,dp=1", &f, &b);
    CHECK(strcmp(kind_key(&b, PT_OPK_Q_DGRAD), "gemm_dgrad_write:bf16:m=1024,n=1024,k=256") ==
          0);
    CHECK(strcmp(kind_key(&b, PT_OPK_K_DGRAD), "gemm_dgrad:bf16:m=1024,n=1024,k=256") == 0);
    CHECK(strcmp(kind_key(&b, PT_OPK_V_DGRAD), "gemm_dgrad:bf16:m=1024,n=1024,k=256") == 0);
    CHECK(strcmp(kind_key(&b, PT_OPK_Q_WGRAD), "gemm_wgrad_bias:bf16:m=256,n=1024,k=1024") == 0);
    CHECK(strcmp(kind_key(&b, PT_OPK_ATTN_OUT_DGRAD),
                 "gemm_dgrad_write:bf16:m=1024,n=256,k=1024") == 0);
    CHECK(strcmp(kind_key(&b, PT_OPK_MLP_DOWN_WGRAD),
                 "gemm_wgrad_bias:bf16:m=1024,n=1024,k=1024") == 0);
    for (int i = 0; i < b.n; i++) {
        const pt_kernel_op *k = &b.op[i].kernel;
        double mn = 1024.0 * (b.op[i].kind == PT_OPK_Q_WGRAD ? 256 : 1024);
        if (b.op[i].kind == PT_OPK_Q_DGRAD) /* T·h/t and h/t·h read, T·h written */
            CHECK_NEAR(k->bytes, 2 * (1024.0 * 256 + 256.0 * 1024 + mn), 0);
        if (b.op[i].kind == PT_OPK_K_DGRAD) /* ... T·h read and written */
            CHECK_NEAR(k->bytes, 2 * (1024.0 * 256 + 256.0 * 1024 + 2 * mn), 0);
        if (b.op[i].kind == PT_OPK_Q_WGRAD) /* T·h/t and T·h, fp32 (h/t)·h and h/t bias */
            CHECK_NEAR(k->bytes, 2 * (256.0 * 1024 + 1024.0 * 1024) + 8 * mn + 8 * 256.0, 0);
    }
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    /* the output head has no bias; a model without biases has none anywhere */
    pt_model m = gpt(4, 1024, 16, 1024, 50304);
    pt_layout l = layout("dp=1", 16);
    pt_train t = train(16);
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    pt_oplist h = {0};
    CHECK_INT(pt_ops_head(&c, true, &h), 0);
    CHECK_STR_HAS(kind_key(&h, PT_OPK_LOGITS_WGRAD), "gemm_wgrad:bf16:");
    CHECK_STR_HAS(kind_key(&h, PT_OPK_LOGITS_DGRAD), "gemm_dgrad_write:bf16:");
    pt_oplist_free(&h);
    /* the head's forward has a bias where the vocabulary is padded (the runtime's mask
     * of the padding, PT_BUF_VMASK): GPT-2's 50,257 to 50,304, not 50,304 itself */
    CHECK_INT(pt_ops_head(&c, false, &h), 0);
    CHECK_STR_HAS(kind_key(&h, PT_OPK_LOGITS), "gemm:bf16:");
    pt_oplist_free(&h);
    m.vocab = 50257;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    CHECK_INT(pt_ops_head(&c, false, &h), 0);
    CHECK_STR_HAS(kind_key(&h, PT_OPK_LOGITS), "gemm_bias:bf16:");
    pt_oplist_free(&h);
    /* the layers' forwards with the model's biases: the row-parallel ones too, on tp
     * rank 0 (the lists the planner prices) */
    layer_lists("tp=4,dp=1", &f, &b);
    CHECK_STR_HAS(kind_key(&f, PT_OPK_ATTN_OUT), "gemm_bias:bf16:");
    CHECK_STR_HAS(kind_key(&f, PT_OPK_MLP_DOWN), "gemm_bias:bf16:");
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    /* another tp rank's row-parallel forwards add no bias (the runtime's linear_fwd):
     * their key and traffic say so; its column-parallel ones and its bias gradients
     * keep theirs */
    m = gpt(4, 1024, 16, 1024, 50304);
    l = layout("tp=4,dp=1", 16);
    pt_opctx_init(&c, &m, &l, &t, NULL);
    c.tp_rank = 1;
    f = (pt_oplist){0};
    b = (pt_oplist){0};
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    CHECK_INT(pt_ops_layer(&c, true, &b), 0);
    CHECK(strcmp(kind_key(&f, PT_OPK_ATTN_OUT), "gemm:bf16:m=1024,n=1024,k=256") == 0);
    CHECK_STR_HAS(kind_key(&f, PT_OPK_MLP_DOWN), "gemm:bf16:");
    CHECK_STR_HAS(kind_key(&f, PT_OPK_Q), "gemm_bias:bf16:");
    CHECK_STR_HAS(kind_key(&b, PT_OPK_ATTN_OUT_WGRAD), "gemm_wgrad_bias:bf16:");
    for (int i = 0; i < f.n; i++)
        if (f.op[i].kind == PT_OPK_ATTN_OUT) /* T·h/t and h·h/t read, T·h written */
            CHECK_NEAR(f.op[i].kernel.bytes, 2 * (1024.0 * 256 + 1024.0 * 256 + 1024.0 * 1024), 0);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    pt_stack st;
    pt_err err;
    CHECK_INT(pt_stack_get("ptrun", &st, &err), 0);
    llama_lists(&st, "dp=1", &f, &b);
    CHECK_STR_HAS(kind_key(&b, PT_OPK_Q_WGRAD), "gemm_wgrad:bf16:");
    CHECK_STR_HAS(kind_key(&b, PT_OPK_MLP_GATE_WGRAD), "gemm_wgrad:bf16:");
    CHECK_STR_HAS(kind_key(&f, PT_OPK_Q), "gemm:bf16:");
    CHECK_STR_HAS(kind_key(&f, PT_OPK_MLP_UP), "gemm:bf16:");
    pt_oplist_free(&f);
    pt_oplist_free(&b);
}

/* The fused cross-entropy reads each row of bf16 logits once and writes its gradient
 * where the row fits on chip (227 KiB: GPT-2's 50,304), three times where not (a
 * 131,072 vocabulary, 256 KiB); vocabulary-parallel, its max and sum passes read the
 * slice once each and the last reads and writes it. */
static void test_xent_bytes(void)
{
    pt_stack st;
    pt_err err;
    CHECK_INT(pt_stack_get("ptrun", &st, &err), 0);
    int64_t vocabs[] = {50304, 131072};
    for (int i = 0; i < 2; i++) {
        for (int tp = 1; tp <= 2; tp *= 2) {
            pt_model m = gpt(4, 1024, 16, 1024, vocabs[i]);
            char text[32];
            snprintf(text, sizeof text, "tp=%d,dp=1", tp);
            pt_layout l = layout(text, 16);
            pt_train t = train(16);
            t.stack = st;
            pt_opctx c;
            pt_opctx_init(&c, &m, &l, &t, NULL);
            pt_oplist h = {0};
            CHECK_INT(pt_ops_head(&c, false, &h), 0);
            double slice = 2.0 * 1024 * (double)vocabs[i] / tp; /* T·v/t bf16 */
            double want = tp > 1 ? 4 * slice : vocabs[i] == 50304 ? 2 * slice : 4 * slice;
            double got = 0;
            for (int k = 0; k < h.n; k++)
                if (h.op[k].kind == PT_OPK_XENT || h.op[k].kind == PT_OPK_XENT_MAX ||
                    h.op[k].kind == PT_OPK_XENT_SUMEXP)
                    got += h.op[k].kernel.bytes;
            CHECK_NEAR(got, want, 0);
            pt_oplist_free(&h);
        }
    }
}

/* layer_lists' layer under a stack that fuses no epilogue (a JSON stack can say so) */
static void unfused_lists(const char *text, pt_oplist *fwd, pt_oplist *bwd)
{
    pt_model m = gpt(4, 1024, 16, 1024, 50304);
    pt_layout l = layout(text, 16);
    pt_train t = train(16);
    t.stack.fused_epilogues = false;
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    *fwd = *bwd = (pt_oplist){0};
    CHECK_INT(pt_ops_layer(&c, false, fwd), 0);
    CHECK_INT(pt_ops_layer(&c, true, bwd), 0);
}

/* ptrun fuses its epilogues (pt_stack.fused_epilogues): the residual add after attention
 * runs inside the second norm's kernel (one pass over T·h less), and GPT-2's GELU in the
 * up projection's GEMM (its T·f read and write become one more write of the saved
 * pre-activation) and the GELU's backward in the down projection's data gradient (the
 * gradient's write of T·f, the first into its buffer, and the GELU backward's two
 * reads and one write become one write and one read of that pre-activation). FLOPs do
 * not move. */
static void test_fused_epilogues(void)
{
    pt_oplist f, b, uf, ub;
    layer_lists("tp=2,sp=1,dp=1", &f, &b);
    pt_stack st;
    pt_err err;
    CHECK_INT(pt_stack_get("ptrun", &st, &err), 0);
    CHECK(st.fused_epilogues);
    CHECK_INT(kind_count(&f, PT_OPK_ADD1_NORM2), 1);
    CHECK_INT(kind_count(&f, PT_OPK_MLP_UP_GELU), 1);
    CHECK_INT(kind_count(&b, PT_OPK_MLP_DOWN_DGRAD_GELU), 1);
    const pt_op_kind gone[] = {PT_OPK_ADD1, PT_OPK_NORM2, PT_OPK_MLP_UP, PT_OPK_ACT,
                               PT_OPK_MLP_DOWN_DGRAD, PT_OPK_ACT_BWD};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        CHECK_INT(kind_count(&f, gone[i]) + kind_count(&b, gone[i]), 0);
    /* T = 1024 tokens, sp: R = 512 rows per rank; f/t = 2048 */
    CHECK(strcmp(kind_key(&f, PT_OPK_ADD1_NORM2), "add_layernorm_fwd:bf16:rows=512,cols=1024") == 0);
    CHECK(strcmp(kind_key(&f, PT_OPK_MLP_UP_GELU), "gemm_gelu_bias:bf16:m=1024,n=2048,k=1024") == 0);
    CHECK(strcmp(kind_key(&b, PT_OPK_MLP_DOWN_DGRAD_GELU),
                 "gemm_dgelu:bf16:m=1024,n=2048,k=1024") == 0);
    /* the op order: the fused norm between the reduce-scatter and the gather, the GELU
     * GEMM's data gradient before the weight gradient */
    int at_rs = -1, at_fused = -1;
    for (int i = 0; i < f.n; i++) {
        if (f.op[i].kind == PT_OPK_SP_REDUCESCATTER && at_rs < 0)
            at_rs = i;
        if (f.op[i].kind == PT_OPK_ADD1_NORM2)
            at_fused = i;
    }
    CHECK(at_rs >= 0 && at_fused == at_rs + 1 && f.op[at_fused + 1].kind == PT_OPK_SP_ALLGATHER);

    /* the same layer without fusion (a JSON stack can say so) */
    unfused_lists("tp=2,sp=1,dp=1", &uf, &ub);
    CHECK_INT(kind_count(&uf, PT_OPK_ADD1_NORM2) + kind_count(&uf, PT_OPK_MLP_UP_GELU) +
                  kind_count(&ub, PT_OPK_MLP_DOWN_DGRAD_GELU), 0);
    CHECK_INT(kind_count(&uf, PT_OPK_ACT), 1);
    double R = 512, T = 1024, h = 1024, fr = 2048;
    CHECK_NEAR(list_total(&f, true), list_total(&uf, true), 0);
    CHECK_NEAR(list_total(&b, true), list_total(&ub, true), 0);
    CHECK_NEAR(list_total(&uf, false) - list_total(&f, false), 2 * (R * h + T * fr), 0);
    CHECK_NEAR(list_total(&ub, false) - list_total(&b, false), 2 * 2 * T * fr, 0);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    pt_oplist_free(&uf);
    pt_oplist_free(&ub);

    /* LLaMA under ptrun with tp: the residual add fuses into RMSNorm; SwiGLU has no
     * epilogue */
    llama_lists(&st, "tp=2,dp=1", &f, &b);
    CHECK(strcmp(kind_key(&f, PT_OPK_ADD1_NORM2), "add_rmsnorm_fwd:bf16:rows=1024,cols=1024") == 0);
    CHECK_INT(kind_count(&f, PT_OPK_ACT), 1);
    CHECK_INT(kind_count(&f, PT_OPK_MLP_UP_GELU) + kind_count(&b, PT_OPK_MLP_DOWN_DGRAD_GELU), 0);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    /* other stacks price their own kernels, unfused */
    CHECK_INT(pt_stack_get("megatron-core", &st, &err), 0);
    CHECK(!st.fused_epilogues);
    llama_lists(&st, "dp=1", &f, &b);
    CHECK_INT(kind_count(&f, PT_OPK_ADD1_NORM2), 0);
    CHECK_INT(kind_count(&f, PT_OPK_ADD1), 1);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
}

/* With tp = 1 ptrun's residual adds ride the row-parallel GEMMs before them
 * (matmul_forward_res, the "gemm_res" roles): attn_out and mlp_down read the stream as
 * the product's addend, the second norm runs alone and add2 goes. FLOPs do not move;
 * against the unfused layer the bytes fall by add1's and add2's three passes less the
 * GEMMs' one read each, and by the GELU's pass (test_fused_epilogues). With tp the
 * partial products are summed first: no residual in the GEMM (test_fused_epilogues'
 * lists). */
static void test_residual_in_gemm(void)
{
    pt_oplist f, b, uf, ub;
    layer_lists("tp=1,dp=1", &f, &b);
    CHECK(strcmp(kind_key(&f, PT_OPK_ATTN_OUT), "gemm_bias_res:bf16:m=1024,n=1024,k=1024") == 0);
    CHECK(strcmp(kind_key(&f, PT_OPK_MLP_DOWN), "gemm_bias_res:bf16:m=1024,n=1024,k=4096") == 0);
    CHECK_INT(kind_count(&f, PT_OPK_NORM2), 1);
    CHECK_INT(kind_count(&f, PT_OPK_ADD1) + kind_count(&f, PT_OPK_ADD2) +
                  kind_count(&f, PT_OPK_ADD1_NORM2),
              0);
    /* the norm after the GEMM that wrote its input */
    for (int i = 0; i + 1 < f.n; i++)
        if (f.op[i].kind == PT_OPK_ATTN_OUT)
            CHECK_INT(f.op[i + 1].kind, PT_OPK_NORM2);
    CHECK_INT(f.op[f.n - 1].kind, PT_OPK_MLP_DOWN);

    unfused_lists("tp=1,dp=1", &uf, &ub);
    CHECK_INT(kind_count(&uf, PT_OPK_ADD1) + kind_count(&uf, PT_OPK_ADD2), 2);
    CHECK(strcmp(kind_key(&uf, PT_OPK_MLP_DOWN), "gemm_bias:bf16:m=1024,n=1024,k=4096") == 0);
    double T = 1024, h = 1024, fr = 4096, ab = 2;
    CHECK_NEAR(list_total(&f, true), list_total(&uf, true), 0);
    CHECK_NEAR(list_total(&uf, false) - list_total(&f, false), ab * (T * fr + 4 * T * h), 0);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    pt_oplist_free(&uf);
    pt_oplist_free(&ub);

    /* LLaMA has no biases: the plain residual role */
    pt_stack st;
    pt_err err;
    CHECK_INT(pt_stack_get("ptrun", &st, &err), 0);
    llama_lists(&st, "dp=1", &f, &b);
    CHECK(strcmp(kind_key(&f, PT_OPK_ATTN_OUT), "gemm_res:bf16:m=1024,n=1024,k=1024") == 0);
    CHECK_INT(kind_count(&f, PT_OPK_ADD2) + kind_count(&f, PT_OPK_ADD1_NORM2), 0);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
}

/* ptrun at tp = 1 runs q, k and v of multi-head attention as one batched GEMM in the
 * forward (qkv) and the weight gradient (qkv_wgrad): one op each, keyed with the batch
 * count, three times one projection's FLOPs and bytes, in place of the three; the data
 * gradients stay three (the first writes). Not with tp > 1, grouped queries or an
 * unfused stack. */
static void test_shared_qkv(void)
{
    pt_oplist f, b, tf, tb;
    layer_lists("tp=1,dp=1", &f, &b);
    layer_lists("tp=2,dp=1", &tf, &tb);
    CHECK_INT(kind_count(&f, PT_OPK_QKV), 1);
    CHECK_INT(kind_count(&b, PT_OPK_QKV_WGRAD), 1);
    const pt_op_kind gone[] = {PT_OPK_Q, PT_OPK_K, PT_OPK_V, PT_OPK_Q_WGRAD, PT_OPK_K_WGRAD,
                               PT_OPK_V_WGRAD};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        CHECK_INT(kind_count(&f, gone[i]) + kind_count(&b, gone[i]), 0);
    CHECK_INT(kind_count(&b, PT_OPK_Q_DGRAD) + kind_count(&b, PT_OPK_K_DGRAD) +
                  kind_count(&b, PT_OPK_V_DGRAD),
              3);
    CHECK(strcmp(kind_key(&f, PT_OPK_QKV), "gemm_bias:bf16:b=3,m=1024,n=1024,k=1024") == 0);
    CHECK(strcmp(kind_key(&b, PT_OPK_QKV_WGRAD),
                 "gemm_wgrad_bias:bf16:b=3,m=1024,n=1024,k=1024") == 0);
    /* one projection: T·h and h·h read, T·h written, h bias read; three of those */
    double T = 1024, h = 1024;
    for (int i = 0; i < f.n; i++)
        if (f.op[i].kind == PT_OPK_QKV) {
            CHECK_NEAR(f.op[i].kernel.flops, 3 * 2 * T * h * h, 0);
            CHECK_NEAR(f.op[i].kernel.bytes, 3 * 2 * (T * h + h * h + T * h + h), 0);
            CHECK_INT(f.op[i].param, PT_PARAM_Q);
        }
    /* the same FLOPs in all as tp = 2's two ranks' q, k and v */
    CHECK_NEAR(list_total(&f, true), 2 * list_total(&tf, true), 1e-12);
    CHECK_INT(kind_count(&tf, PT_OPK_QKV) + kind_count(&tb, PT_OPK_QKV_WGRAD), 0);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    pt_oplist_free(&tf);
    pt_oplist_free(&tb);
    unfused_lists("tp=1,dp=1", &f, &b);
    CHECK_INT(kind_count(&f, PT_OPK_QKV) + kind_count(&b, PT_OPK_QKV_WGRAD), 0);
    CHECK_INT(kind_count(&f, PT_OPK_Q), 1);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    pt_stack st;
    pt_err err;
    CHECK_INT(pt_stack_get("ptrun", &st, &err), 0);
    llama_lists(&st, "dp=1", &f, &b); /* 4 KV heads of 16: k and v a quarter of q */
    CHECK_INT(kind_count(&f, PT_OPK_QKV) + kind_count(&b, PT_OPK_QKV_WGRAD), 0);
    CHECK_INT(kind_count(&f, PT_OPK_Q) + kind_count(&f, PT_OPK_K) + kind_count(&f, PT_OPK_V), 3);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
}

static const pt_op *find_kind(const pt_oplist *o, pt_op_kind k)
{
    for (int i = 0; i < o->n; i++)
        if (o->op[i].kind == k)
            return &o->op[i];
    return NULL;
}

/* Kernel ops name the tensors the runtime must be told: a norm's output, the input the
 * column-parallel GEMMs read (the norm's output, or with sp its gathered rows), and the
 * input gradient their data gradients write. */
static void test_kernel_operands(void)
{
    for (int sp = 0; sp < 2; sp++) {
        pt_oplist f, b;
        layer_lists(sp ? "tp=2,sp=1,dp=1" : "tp=2,dp=1", &f, &b);
        pt_tensor in1 = sp ? PT_TEN_GATHERED : PT_TEN_LN1, in2 = sp ? PT_TEN_GATHERED : PT_TEN_LN2;
        const pt_op *op;
        CHECK((op = find_kind(&f, PT_OPK_NORM1)) && op->dst == PT_TEN_LN1);
        CHECK((op = find_kind(&f, PT_OPK_Q)) && op->src == in1);
        CHECK((op = find_kind(&f, PT_OPK_V)) && op->src == in1);
        CHECK((op = find_kind(&f, PT_OPK_MLP_UP_GELU)) && op->src == in2);
        CHECK((op = find_kind(&f, PT_OPK_ATTN_OUT)) && op->src == PT_TEN_NONE);
        CHECK((op = find_kind(&b, PT_OPK_Q_WGRAD)) && op->src == in1);
        CHECK((op = find_kind(&b, PT_OPK_MLP_UP_WGRAD)) && op->src == in2);
        CHECK((op = find_kind(&b, PT_OPK_K_DGRAD)) && op->dst == PT_TEN_DLN);
        CHECK((op = find_kind(&b, PT_OPK_MLP_DOWN_WGRAD)) && op->src == PT_TEN_NONE);
        pt_oplist_free(&f);
        pt_oplist_free(&b);
    }
}

/* Checks each op of list `o` (of kind `lk`) against its kind's facts: its class, the
 * lists it may stand in, its breakdown category (a GEMM category exactly when it carries
 * a GEMM role), its key named after its role, and no priced-only kind under `ptrun`. */
static void check_kind_facts(const pt_oplist *o, pt_list_kind lk, bool ptrun)
{
    for (int i = 0; i < o->n; i++) {
        const pt_op *op = &o->op[i];
        const pt_op_kind_info *k = pt_op_kind_info_of(op->kind);
        CHECK_INT(op->cls, k->cls);
        /* the table's class is what the builder filled: a key, or a group to run in */
        if (op->cls == PT_OP_KERNEL)
            CHECK(op->kernel.key[0] != '\0' && op->coll.group == 0);
        else
            CHECK(op->kernel.key[0] == '\0' && op->coll.group >= 2);
        if (!pt_op_kind_in(op->kind, lk))
            fprintf(stderr, "op '%s' in list %d\n", k->name, (int)lk);
        CHECK(pt_op_kind_in(op->kind, lk));
        CHECK(!(ptrun && k->priced_only));
        if (op->cls == PT_OP_COLL) {
            CHECK_INT(op->role, PT_GEMM_NONE);
            CHECK(k->category == PT_BD_TP || k->category == PT_BD_CP ||
                  k->category == PT_BD_DP);
            continue;
        }
        CHECK(k->category == PT_BD_GEMM || k->category == PT_BD_ATTN ||
              k->category == PT_BD_OTHER);
        CHECK_INT(op->role != PT_GEMM_NONE, k->category == PT_BD_GEMM);
        CHECK_INT(pt_gemm_role_of(op->kernel.key), op->role);
    }
}

/* The kind table: every kind named once, in at least one list; and the ops of every
 * built-in stack's lists, over layouts that bring in each parallelism, agree with it. */
static void test_kind_table(void)
{
    for (int k = 0; k < PT_OPK_COUNT; k++) {
        const pt_op_kind_info *a = pt_op_kind_info_of((pt_op_kind)k);
        CHECK(strcmp(a->name, "?") != 0);
        CHECK(a->lists != 0 && a->lists < 1u << PT_LIST_COUNT);
        for (int j = 0; j < k; j++)
            CHECK(strcmp(a->name, pt_op_kind_name((pt_op_kind)j)) != 0);
    }
    CHECK(strcmp(pt_op_kind_name(PT_OPK_COUNT), "?") == 0);
    CHECK(!pt_op_kind_in(PT_OPK_COUNT, PT_LIST_LAYER));
    CHECK(!pt_op_kind_in(PT_OPK_Q, PT_LIST_COUNT));
    CHECK(!pt_op_kind_in(PT_OPK_ADAM, PT_LIST_LAYER));
    CHECK(pt_op_kind_in(PT_OPK_TP_ALLREDUCE, PT_LIST_EMBED));
    static const char *layouts[] = {
        "dp=2,zero=0", "tp=2,dp=2,zero=1", "tp=2,sp=1,pp=2,dp=2,zero=2",
        "cp=2,tp=2,dp=2,zero=3,recompute=full", "pp=2,vp=2,dp=2,mbs=2,recompute=selective",
        "dp=4,zero=0,compress=bf16", "dp=4,zero=1,compress=powersgd,powersgd_rank=2",
        "tp=4,sp=1,tp_overlap=1,dp=2", "cp=4,cp_comm=a2a,dp=1",
        "cp=4,cp_comm=a2a+p2p,cp_a2a=2,dp=1,recompute=full"};
    for (int si = 0; si < pt_stack_builtin_count(); si++) {
        const pt_stack *st = pt_stack_builtin(si);
        bool ptrun = pt_stack_is_ptrun(st);
        for (size_t li = 0; li < sizeof layouts / sizeof *layouts; li++)
            for (int gpt2 = 0; gpt2 < 2; gpt2++) {
                pt_model m = gpt(4, 1024, 16, 1024, 50304);
                if (!gpt2) {
                    m.norm = PT_NORM_RMSNORM;
                    m.act = PT_ACT_SWIGLU;
                    m.pos = PT_POS_ROPE;
                    m.kv_heads = 4;
                    m.bias = false;
                }
                pt_layout l = layout(layouts[li], 32);
                pt_train t = train(32);
                t.stack = *st;
                pt_opctx c;
                pt_opctx_init(&c, &m, &l, &t, NULL);
                pt_oplist o = {0};
                for (int bwd = 0; bwd < 2; bwd++) {
                    o.n = 0;
                    CHECK_INT(pt_ops_layer(&c, bwd, &o), 0);
                    check_kind_facts(&o, PT_LIST_LAYER, ptrun);
                    o.n = 0;
                    CHECK_INT(pt_ops_embed(&c, bwd, &o), 0);
                    check_kind_facts(&o, PT_LIST_EMBED, ptrun);
                    o.n = 0;
                    CHECK_INT(pt_ops_head(&c, bwd, &o), 0);
                    check_kind_facts(&o, PT_LIST_HEAD, ptrun);
                }
                o.n = 0;
                CHECK_INT(pt_ops_grad_sync(&c, 1e7, 4, &o), 0);
                check_kind_facts(&o, PT_LIST_GRAD_SYNC, ptrun);
                o.n = 0;
                pt_step_params sp = {.params = 1e7, .edge = 1e6, .tied = 5e5};
                CHECK_INT(pt_ops_optimizer(&c, &sp, &o), 0);
                check_kind_facts(&o, PT_LIST_STEP, ptrun);
                pt_oplist_free(&o);
            }
    }
}

/* ---- How cp communicates (cp_comm) ---- */

/* One llama-shaped layer (16 heads of 64, 4 KV heads, sequence 1024) under a stack, on
 * the cluster `cl` (NULL: one NVLink domain). */
static void cp_lists(const char *stack, const char *text, const pt_cluster *cl, pt_oplist *fwd,
                     pt_oplist *bwd)
{
    pt_model m = gpt(4, 1024, 16, 1024, 32000);
    m.norm = PT_NORM_RMSNORM;
    m.act = PT_ACT_SWIGLU;
    m.pos = PT_POS_ROPE;
    m.kv_heads = 4;
    m.bias = m.dropout = false;
    pt_layout l = layout(text, 16);
    pt_train t = train(16);
    pt_err err;
    CHECK_INT(pt_stack_get(stack, &t.stack, &err), 0);
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, cl);
    *fwd = (pt_oplist){0};
    *bwd = (pt_oplist){0};
    CHECK_INT(pt_ops_layer(&c, false, fwd), 0);
    CHECK_INT(pt_ops_layer(&c, true, bwd), 0);
}

/* Checks the op of kind k in o: the collective, its group, per-rank bytes, count and
 * overlap. */
static void expect_cp_op(const pt_oplist *o, pt_op_kind k, pt_coll what, pt_group_kind g,
                         int size, double bytes, int count, bool overlapped)
{
    const pt_op *op = find_kind(o, k);
    CHECK(op != NULL);
    if (!op)
        return;
    CHECK_INT(kind_count(o, k), 1);
    CHECK_INT(op->cls, PT_OP_COLL);
    CHECK_INT(op->coll.op, what);
    CHECK_INT(op->group, g);
    CHECK_INT(op->coll.group, size);
    CHECK_NEAR(op->coll.bytes, bytes, 0);
    CHECK_INT(op->count, count);
    CHECK_INT(op->overlapped, overlapped);
}

static double attn_flops(const pt_oplist *o, pt_op_kind k)
{
    const pt_op *op = find_kind(o, k);
    return op ? op->kernel.flops : -1;
}

static void test_cp_comm(void)
{
    pt_oplist f, b, rf, rb;
    /* The ring for reference: 256 tokens a rank, K and V of 4 heads of 64, bf16. */
    cp_lists("ptrun", "cp=4,dp=1", NULL, &rf, &rb);
    double kv = 2.0 * 2 * 256 * 4 * 64;
    expect_cp_op(&rf, PT_OPK_CP_RING, PT_COLL_SENDRECV, PT_GROUP_CP, 4, kv, 3, true);
    expect_cp_op(&rb, PT_OPK_CP_RING_BWD, PT_COLL_SENDRECV, PT_GROUP_CP, 4, 2 * kv, 3, true);
    CHECK_STR_HAS(kind_key(&rf, PT_OPK_ATTN), "a=16,kv=4,sq=256,sk=1024,d=64");

    /* a2a: q (256 tokens x 16 heads x 64), k and v (4 heads) in, the output back; no
     * ring; attention on the whole sequence with 4 heads and 1 KV head, same FLOPs. */
    cp_lists("ptrun", "cp=4,cp_comm=a2a,dp=1", NULL, &f, &b);
    double q = 2.0 * 256 * 16 * 64, k = 2.0 * 256 * 4 * 64;
    expect_cp_op(&f, PT_OPK_CP_A2A_Q, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 4, q, 1, false);
    expect_cp_op(&f, PT_OPK_CP_A2A_KV, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 4, k, 2, false);
    expect_cp_op(&f, PT_OPK_CP_A2A_OUT, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 4, q, 1, false);
    expect_cp_op(&b, PT_OPK_CP_A2A_DOUT, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 4, q, 1, false);
    expect_cp_op(&b, PT_OPK_CP_A2A_DQ, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 4, q, 1, false);
    expect_cp_op(&b, PT_OPK_CP_A2A_DKV, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 4, k, 2, false);
    CHECK_INT(kind_count(&f, PT_OPK_CP_RING) + kind_count(&b, PT_OPK_CP_RING_BWD), 0);
    CHECK_STR_HAS(kind_key(&f, PT_OPK_ATTN), "a=4,kv=1,sq=1024,sk=1024,d=64");
    CHECK_NEAR(attn_flops(&f, PT_OPK_ATTN), attn_flops(&rf, PT_OPK_ATTN), 1e-12);
    CHECK_NEAR(attn_flops(&b, PT_OPK_ATTN_BWD), attn_flops(&rb, PT_OPK_ATTN_BWD), 1e-12);
    /* in order: rope, the all-to-alls in, attention, the output's back */
    int at = -1, in = -1, out = -1;
    for (int i = 0; i < f.n; i++) {
        at = f.op[i].kind == PT_OPK_ATTN ? i : at;
        in = f.op[i].kind == PT_OPK_CP_A2A_KV ? i : in;
        out = f.op[i].kind == PT_OPK_CP_A2A_OUT ? i : out;
    }
    CHECK(in < at && at < out);
    for (int i = 0; i < b.n; i++) {
        at = b.op[i].kind == PT_OPK_ATTN_BWD ? i : at;
        in = b.op[i].kind == PT_OPK_CP_A2A_DOUT ? i : in;
        out = b.op[i].kind == PT_OPK_CP_A2A_DKV ? i : out;
    }
    CHECK(in < at && at < out);
    pt_oplist_free(&f);
    pt_oplist_free(&b);

    /* 2 KV heads a tp rank against a degree of 4: each replicated to 2 ranks before the
     * all-to-all, so 4 heads' worth travel and each rank ends with 1 */
    cp_lists("ptrun", "tp=2,cp=4,cp_comm=a2a,dp=1", NULL, &f, &b);
    expect_cp_op(&f, PT_OPK_CP_A2A_KV, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 4, k, 2, false);
    expect_cp_op(&f, PT_OPK_CP_A2A_Q, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 4, q / 2, 1, false);
    CHECK_STR_HAS(kind_key(&f, PT_OPK_ATTN), "a=2,kv=1,sq=1024,sk=1024");
    pt_oplist_free(&f);
    pt_oplist_free(&b);

    /* a2a+p2p with groups of 2: the all-to-all inside them, the ring across the 2
     * groups (one hop) with blocks twice as long of half the KV heads: as many bytes */
    cp_lists("ptrun", "cp=4,cp_comm=a2a+p2p,cp_a2a=2,dp=1", NULL, &f, &b);
    expect_cp_op(&f, PT_OPK_CP_A2A_Q, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 2, q, 1, false);
    expect_cp_op(&f, PT_OPK_CP_A2A_KV, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 2, k, 2, false);
    expect_cp_op(&f, PT_OPK_CP_RING, PT_COLL_SENDRECV, PT_GROUP_CP, 2, kv, 1, true);
    expect_cp_op(&b, PT_OPK_CP_RING_BWD, PT_COLL_SENDRECV, PT_GROUP_CP, 2, 2 * kv, 1, true);
    expect_cp_op(&b, PT_OPK_CP_A2A_DKV, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, 2, k, 2, false);
    CHECK_STR_HAS(kind_key(&f, PT_OPK_ATTN), "a=8,kv=2,sq=512,sk=1024");
    CHECK_NEAR(attn_flops(&f, PT_OPK_ATTN), attn_flops(&rf, PT_OPK_ATTN), 1e-12);
    pt_oplist_free(&f);
    pt_oplist_free(&b);

    /* cp = 16 over two nodes of 8, the all-to-all inside each: on NVLink, the ring's
     * one hop across */
    pt_cluster cl = {.name = "c", .nodes = 2, .devices_per_node = 8};
    cp_lists("ptrun", "cp=16,cp_comm=a2a+p2p,cp_a2a=8,dp=1", &cl, &f, &b);
    const pt_op *op = find_kind(&f, PT_OPK_CP_A2A_Q);
    CHECK(op && op->coll.group == 8 && op->coll.ranks_per_node == 8);
    op = find_kind(&f, PT_OPK_CP_RING);
    CHECK(op && op->coll.group == 2 && op->coll.ranks_per_node == 1 && op->count == 1);
    pt_oplist_free(&f);
    pt_oplist_free(&b);

    /* all_gather (Megatron-Core): K and V of the whole sequence gathered before
     * attention and again in the backward, dK and dV reduce-scattered; blocking */
    cp_lists("megatron-core", "cp=4,cp_comm=all_gather,dp=1", NULL, &f, &b);
    double kv_all = 2.0 * 1024 * 4 * 64;
    expect_cp_op(&f, PT_OPK_CP_ALLGATHER, PT_COLL_ALLGATHER, PT_GROUP_CP, 4, kv_all, 2, false);
    expect_cp_op(&b, PT_OPK_CP_ALLGATHER, PT_COLL_ALLGATHER, PT_GROUP_CP, 4, kv_all, 2, false);
    expect_cp_op(&b, PT_OPK_CP_REDUCESCATTER, PT_COLL_REDUCESCATTER, PT_GROUP_CP, 4, kv_all, 2,
                 false);
    CHECK_INT(kind_count(&f, PT_OPK_CP_RING) + kind_count(&f, PT_OPK_CP_A2A_Q), 0);
    CHECK(pt_op_kind_info_of(PT_OPK_CP_ALLGATHER)->priced_only);
    CHECK(!pt_op_kind_info_of(PT_OPK_CP_A2A_Q)->priced_only);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
    pt_oplist_free(&rf);
    pt_oplist_free(&rb);
}

/* A bias goes with the GEMM's role: a row-parallel layer's forward adds it on tp rank 0
 * only (the partial outputs are summed after), a column-parallel one on every rank. */
static void test_bias_in_role(void)
{
    pt_model m = gpt(4, 1024, 16, 1024, 50304);
    pt_layout l = layout("tp=2,dp=1", 16);
    pt_train t = train(16);
    for (int rank = 0; rank < 2; rank++) {
        pt_opctx c;
        pt_opctx_init(&c, &m, &l, &t, NULL);
        c.tp_rank = rank;
        pt_oplist o = {0};
        CHECK_INT(pt_ops_layer(&c, false, &o), 0);
        for (int i = 0; i < o.n; i++) {
            if (o.op[i].kind == PT_OPK_ATTN_OUT || o.op[i].kind == PT_OPK_MLP_DOWN)
                CHECK_INT(pt_gemm_role_has_bias(o.op[i].role), rank == 0);
            if (o.op[i].kind == PT_OPK_Q || o.op[i].kind == PT_OPK_MLP_UP_GELU ||
                o.op[i].kind == PT_OPK_MLP_UP)
                CHECK(pt_gemm_role_has_bias(o.op[i].role));
        }
        pt_oplist_free(&o);
    }
}

/* FP8 (pt_train.fp8): the layers' GEMMs keyed fp8 with one-byte operands, the head's in
 * bf16; under ptrun's stack no fused GEMM form (the runtime calls gemm_fp8 plain), and
 * each GEMM op carries its casts as ptrun's runtime runs them. */
static bool fp8_pass_is_dgrad(pt_gemm_role r)
{
    return r == PT_GEMM_DGRAD || r == PT_GEMM_DGRAD_DGELU || r == PT_GEMM_DGRAD_WRITE;
}

static void test_fp8(void)
{
    pt_model m = gpt(4, 1024, 16, 1024, 50304); /* GELU, biases: every fused form at tp=1 */
    for (int tp = 1; tp <= 2; tp++) {
        pt_layout l = layout(tp == 1 ? "dp=1" : "tp=2,dp=1", 16);
        pt_train t = train(16);
        t.fp8 = (pt_fp8){.recipe = PT_FP8_CURRENT, .history = 1024};
        pt_opctx c;
        pt_opctx_init(&c, &m, &l, &t, NULL);
        pt_oplist o = {0};
        CHECK_INT(pt_ops_layer(&c, false, &o), 0);
        CHECK_INT(pt_ops_layer(&c, true, &o), 0);
        int gemms = 0;
        double T = 1024, h = 1024, ab = 2;
        for (int i = 0; i < o.n; i++) {
            const pt_op *op = &o.op[i];
            CHECK(op->kind != PT_OPK_QKV && op->kind != PT_OPK_QKV_WGRAD &&
                  op->kind != PT_OPK_MLP_UP_GELU && op->kind != PT_OPK_MLP_DOWN_DGRAD_GELU);
            CHECK(op->role != PT_GEMM_FWD_RES && op->role != PT_GEMM_FWD_BIAS_RES &&
                  op->role != PT_GEMM_DGRAD_DGELU && op->role != PT_GEMM_FWD_GELU &&
                  op->role != PT_GEMM_FWD_GELU_BIAS);
            if (op->role == PT_GEMM_NONE || op->param == PT_PARAM_NONE)
                continue;
            gemms++;
            CHECK(strstr(op->kernel.key, ":fp8:") != NULL);
            CHECK_INT(op->kernel.dtype, PT_DTYPE_FP8);
            if (op->kind == PT_OPK_Q) { /* X (T, h) and W (h/tp, h): amax and cast each */
                double x = T * h, w = h / tp * h;
                CHECK_NEAR(op->fp8.bytes, ab * (x + w) + (ab + 1) * (x + w), 1e-12);
                CHECK_NEAR(op->fp8.passes, 4, 0);
                CHECK_NEAR(op->fp8.launches, 2, 0);
                CHECK_INT(op->fp8.amax_reduces, tp > 1 ? 1 : 0); /* the weight */
            }
            if (op->kind == PT_OPK_ATTN_OUT) /* row-parallel: W and X are sharded */
                CHECK_INT(op->fp8.amax_reduces, tp > 1 ? 2 : 0);
            if (op->kind == PT_OPK_Q_DGRAD) { /* column-parallel: dY (W^T's scale is known) */
                CHECK_INT(op->fp8.amax_reduces, tp > 1 ? 1 : 0);
                /* dY (T, h/tp) with its amax, cast as rows only (k's and v's data
                 * gradients come before q's weight gradient); W^T cast with the scale the
                 * forward took */
                double dy = T * h / tp, w = h / tp * h;
                CHECK_NEAR(op->fp8.bytes, ab * dy + (ab + 1) * dy + (ab + 1) * w, 1e-12);
            }
            if (op->kind == PT_OPK_ATTN_OUT_DGRAD) { /* dY (T, h) both ways: its wgrad next */
                double dy = T * h, w = h * h / tp;
                CHECK_NEAR(op->fp8.bytes, ab * dy + (ab + 2) * dy + (ab + 1) * w, 1e-12);
            }
            /* reused casts (runtime/fp8.c's operand_in): k and v take q's input, in the
             * forward and transposed in their weight gradients; a weight gradient right
             * after its data gradient takes that one's transposed dY. Each cast is a
             * pass, and each amax a pass and a scale launch; the re-casts take the
             * scale their tensor's amax gave (runtime/fp8.c's memo_of): the data
             * gradient's W^T, and with one micro-batch in flight the weight gradient's
             * dY^T and X^T */
            int passes = -1, launches = -1;
            switch (op->kind) {
            case PT_OPK_Q: case PT_OPK_ATTN_OUT: case PT_OPK_MLP_UP: /* X and W */
                passes = 4, launches = 2;
                break;
            case PT_OPK_K: case PT_OPK_V: /* W */
                passes = 2, launches = 1;
                break;
            case PT_OPK_Q_DGRAD: case PT_OPK_ATTN_OUT_DGRAD: case PT_OPK_MLP_DOWN_DGRAD:
                passes = 3, launches = 1; /* dY's amax and cast, W^T's cast */
                break;
            /* the amaxes the GELU takes as it writes (runtime/layer.c): still a scale */
            case PT_OPK_MLP_DOWN: /* X's cast, W's amax and cast */
                passes = 3, launches = 2;
                break;
            case PT_OPK_MLP_UP_DGRAD: /* dY's cast, W^T's cast */
                passes = 2, launches = 1;
                break;
            case PT_OPK_Q_WGRAD: /* dY^T and X^T, casts alone */
                passes = 2, launches = 0;
                break;
            case PT_OPK_K_WGRAD: case PT_OPK_V_WGRAD:
            case PT_OPK_ATTN_OUT_WGRAD: case PT_OPK_MLP_UP_WGRAD: case PT_OPK_MLP_DOWN_WGRAD:
                passes = 1, launches = 0;
                break;
            default:
                break;
            }
            if (passes >= 0) {
                CHECK_NEAR(op->fp8.passes, passes, 0);
                CHECK_NEAR(op->fp8.launches, launches, 0);
            }
            /* ... and say so to the runtime, which follows the op */
            bool fwd = op->kind == PT_OPK_K || op->kind == PT_OPK_V;
            bool dy = op->kind == PT_OPK_ATTN_OUT_WGRAD || op->kind == PT_OPK_MLP_UP_WGRAD ||
                      op->kind == PT_OPK_MLP_DOWN_WGRAD;
            bool x_t = op->kind == PT_OPK_K_WGRAD || op->kind == PT_OPK_V_WGRAD;
            CHECK(op->fp8.reuse_a == (fwd || dy) && op->fp8.reuse_b == x_t);
            /* dY's transpose written where the layer's weight gradient comes next */
            bool kept = op->kind == PT_OPK_ATTN_OUT_DGRAD || op->kind == PT_OPK_MLP_UP_DGRAD ||
                        op->kind == PT_OPK_MLP_DOWN_DGRAD;
            CHECK(op->fp8.dy_both == kept);
            /* the bias gradient in the data gradient's cast, none in the weight
             * gradient's call (and key) */
            CHECK(op->fp8.dbias == fp8_pass_is_dgrad(op->role));
            /* ... and which scales it takes as known, or as the GELU took their amax */
            bool wgrad = op->role == PT_GEMM_WGRAD;
            CHECK(op->fp8.known_a == (wgrad && !dy));
            CHECK(op->fp8.known_b == (fp8_pass_is_dgrad(op->role) || (wgrad && !x_t)));
            CHECK(op->fp8.taken_a ==
                  (op->kind == PT_OPK_MLP_DOWN || op->kind == PT_OPK_MLP_UP_DGRAD));
            CHECK(op->role != PT_GEMM_WGRAD_BIAS);
            if (op->role == PT_GEMM_WGRAD)
                CHECK(strncmp(op->kernel.key, "gemm_wgrad:fp8:", 15) == 0);
            if (op->kind == PT_OPK_K) /* the weight alone */
                CHECK_INT(op->fp8.amax_reduces, tp > 1 ? 1 : 0);
            if (op->kind == PT_OPK_ATTN_OUT_WGRAD || op->kind == PT_OPK_K_WGRAD)
                CHECK_INT(op->fp8.amax_reduces, 0); /* known scales, none taken */
        }
        CHECK_INT(gemms, 3 * 6); /* q, k, v, attn_out, mlp_up, mlp_down: fwd, dgrad, wgrad */
        int acts = 0; /* the GELU's kernels take those amaxes */
        for (int i = 0; i < o.n; i++)
            if (o.op[i].kind == PT_OPK_ACT || o.op[i].kind == PT_OPK_ACT_BWD)
                acts += o.op[i].fp8.take_amax;
        CHECK_INT(acts, 2);
        o.n = 0;
        CHECK_INT(pt_ops_head(&c, false, &o), 0);
        for (int i = 0; i < o.n; i++)
            if (o.op[i].kind == PT_OPK_LOGITS)
                CHECK(strstr(o.op[i].kernel.key, ":bf16:") != NULL && o.op[i].fp8.passes == 0);
        pt_oplist_free(&o);
        /* delayed scaling: the casts alone, none reused, and the amax reduced only where
         * a use pushes it (runtime/fp8.c): the forward's X and W, the data gradient's dY */
        t.fp8.recipe = PT_FP8_DELAYED;
        CHECK_INT(pt_ops_layer(&c, false, &o), 0);
        CHECK_INT(pt_ops_layer(&c, true, &o), 0);
        for (int i = 0; i < o.n; i++) {
            const pt_op *op = &o.op[i];
            if (op->kind == PT_OPK_Q || op->kind == PT_OPK_K || op->kind == PT_OPK_K_WGRAD ||
                op->kind == PT_OPK_MLP_DOWN_WGRAD)
                CHECK_NEAR(op->fp8.passes, 2, 0);
            CHECK(!op->fp8.reuse_a && !op->fp8.reuse_b && !op->fp8.dy_both);
            CHECK(!op->fp8.known_a && !op->fp8.known_b && !op->fp8.taken_a &&
                  !op->fp8.take_amax);
            if (op->kind == PT_OPK_ATTN_OUT)
                CHECK_INT(op->fp8.amax_reduces, tp > 1 ? 2 : 0);
            if (op->kind == PT_OPK_Q_DGRAD) /* dY; W^T is cast with the pushed scale */
                CHECK_INT(op->fp8.amax_reduces, tp > 1 ? 1 : 0);
            if (op->kind == PT_OPK_ATTN_OUT_DGRAD)
                CHECK_INT(op->fp8.amax_reduces, 0);
            if (op->kind == PT_OPK_Q_WGRAD)
                CHECK_INT(op->fp8.amax_reduces, 0);
        }
        pt_oplist_free(&o);
    }
    /* cp: every activation's amax over the cp group (X, dY; the weight gradient's two
     * re-casts take known scales), never the weight's */
    pt_layout l = layout("cp=2,dp=1", 16);
    pt_train t = train(16);
    t.fp8 = (pt_fp8){.recipe = PT_FP8_CURRENT, .history = 1024};
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    pt_oplist o = {0};
    CHECK_INT(pt_ops_layer(&c, false, &o), 0);
    CHECK_INT(pt_ops_layer(&c, true, &o), 0);
    int seen = 0;
    for (int i = 0; i < o.n; i++) {
        const pt_op *op = &o.op[i];
        if (op->kind == PT_OPK_Q || op->kind == PT_OPK_Q_DGRAD || op->kind == PT_OPK_Q_WGRAD) {
            seen++;
            CHECK_INT(op->fp8.amax_reduces, 0);
            CHECK_INT(op->fp8.amax_cp_reduces, op->kind == PT_OPK_Q_WGRAD ? 0 : 1);
            CHECK_INT(op->fp8.amax_cp.group, 2);
        }
    }
    CHECK_INT(seen, 3);
    /* one KV head shared by two tp ranks: K's and V's bias gradients are summed over tp
     * apart (runtime/layer.c's kv_wgrad_shared), so their weight gradients keep them */
    {
        pt_model mg = m;
        mg.kv_heads = 1;
        l = layout("tp=2,dp=1", 16);
        pt_opctx_init(&c, &mg, &l, &t, NULL);
        o.n = 0;
        CHECK_INT(pt_ops_layer(&c, true, &o), 0);
        seen = 0;
        for (int i = 0; i < o.n; i++) {
            const pt_op *op = &o.op[i];
            bool kv = op->param == PT_PARAM_K || op->param == PT_PARAM_V;
            if (fp8_pass_is_dgrad(op->role)) {
                seen++;
                CHECK(op->fp8.dbias == !kv);
            }
            if (kv && (op->kind == PT_OPK_K_WGRAD || op->kind == PT_OPK_V_WGRAD))
                CHECK_INT(op->role, PT_GEMM_WGRAD_BIAS);
        }
        CHECK_INT(seen, 6);
    }
    /* SwiGLU's kernels take no amax: the down projection reads its input for it */
    {
        pt_model ms = m;
        ms.act = PT_ACT_SWIGLU;
        l = layout("dp=1", 16);
        pt_opctx_init(&c, &ms, &l, &t, NULL);
        o.n = 0;
        CHECK_INT(pt_ops_layer(&c, false, &o), 0);
        CHECK_INT(pt_ops_layer(&c, true, &o), 0);
        seen = 0;
        for (int i = 0; i < o.n; i++)
            if (o.op[i].kind == PT_OPK_MLP_DOWN || o.op[i].kind == PT_OPK_MLP_UP_DGRAD) {
                seen++;
                CHECK_NEAR(o.op[i].fp8.passes, o.op[i].kind == PT_OPK_MLP_DOWN ? 4 : 3, 0);
                CHECK(!o.op[i].fp8.taken_a);
            } else if (o.op[i].kind == PT_OPK_ACT || o.op[i].kind == PT_OPK_ACT_BWD)
                CHECK(!o.op[i].fp8.take_amax);
        CHECK_INT(seen, 2);
    }
    /* pipeline parallelism and all-forward-all-backward: other micro-batches' forwards
     * come between a forward and its backward, so the weight gradient takes X^T's amax
     * again; dY^T's and the data gradient's W^T's scales are still known */
    for (int afab = 0; afab < 2; afab++) {
        l = layout(afab ? "dp=1,mbs=4,schedule=afab" : "pp=2,dp=1,mbs=4", 16);
        CHECK(l.n_micro > 1);
        pt_opctx_init(&c, &m, &l, &t, NULL);
        o.n = 0;
        CHECK_INT(pt_ops_layer(&c, true, &o), 0);
        seen = 0;
        for (int i = 0; i < o.n; i++) {
            const pt_op *op = &o.op[i];
            if (op->kind == PT_OPK_Q_WGRAD || op->kind == PT_OPK_MLP_DOWN_WGRAD ||
                op->kind == PT_OPK_Q_DGRAD) {
                seen++;
                CHECK_NEAR(op->fp8.passes, op->kind == PT_OPK_MLP_DOWN_WGRAD ? 2 : 3, 0);
                CHECK_NEAR(op->fp8.launches, 1, 0);
                CHECK(op->fp8.known_b == (op->kind == PT_OPK_Q_DGRAD));
            }
        }
        CHECK_INT(seen, 3);
    }
    pt_oplist_free(&o);
    /* torchao's Float8Linear (fsdp, per GEMM as ptrun) reuses no cast: k casts its input */
    {
        pt_err err;
        pt_train tf = train(16);
        tf.fp8 = (pt_fp8){.recipe = PT_FP8_CURRENT, .history = 1024};
        CHECK_INT(pt_stack_get("fsdp", &tf.stack, &err), 0);
        pt_layout lf = layout("dp=1", 16);
        pt_opctx_init(&c, &m, &lf, &tf, NULL);
        CHECK_INT(pt_ops_layer(&c, false, &o), 0);
        CHECK_INT(pt_ops_layer(&c, true, &o), 0);
        int k = 0;
        for (int i = 0; i < o.n; i++) {
            if (o.op[i].kind == PT_OPK_K || o.op[i].kind == PT_OPK_MLP_DOWN_WGRAD) {
                k++;
                CHECK_NEAR(o.op[i].fp8.passes, 4, 0);
            }
            CHECK(!o.op[i].fp8.dbias && o.op[i].role != PT_GEMM_WGRAD); /* bias gradients apart */
            CHECK(!o.op[i].fp8.known_a && !o.op[i].fp8.known_b && !o.op[i].fp8.taken_a &&
                  !o.op[i].fp8.take_amax);
        }
        CHECK_INT(k, 2);
        pt_oplist_free(&o);
    }
    /* tp_overlap: ptrun's FP8 GEMMs quantize the whole gathered input, so the gather
     * before them is not overlapped (without FP8 it is) */
    for (int f = 0; f < 2; f++) {
        l = layout("tp=2,sp=1,tp_overlap=1,dp=1", 16);
        t.fp8.recipe = f ? PT_FP8_CURRENT : PT_FP8_OFF;
        pt_opctx_init(&c, &m, &l, &t, NULL);
        o.n = 0;
        CHECK_INT(pt_ops_layer(&c, false, &o), 0);
        int gathers = 0;
        for (int i = 0; i < o.n; i++)
            if (o.op[i].kind == PT_OPK_SP_ALLGATHER && o.op[i].dst == PT_TEN_GATHERED) {
                gathers++;
                CHECK(o.op[i].overlapped == !f);
            }
        CHECK(gathers > 0);
    }
    pt_oplist_free(&o);
}

/* Transformer Engine (the megatron-core stack's casts) all-gathers what its FP8 GEMMs
 * read in FP8: the layers' sequence-parallel gathers move one byte an element, the head's
 * and the embedding's and every reduce-scatter the storage precision's; ptrun gathers in
 * bf16. Its backward's column-parallel gather and reduce-scatter run beside the GEMMs
 * (tp_backward_async) without tp_overlap too, the forward's collectives and the
 * row-parallel backward's gradient gathers not; ptrun's stack overlaps none of them. */
static void test_te_tp_collectives(void)
{
    pt_model m = gpt(4, 1024, 16, 1024, 50304);
    double T = 1024, h = 1024;
    for (int core = 0; core <= 1; core++) {
        pt_layout l = layout("tp=2,sp=1,dp=1", 16);
        pt_train t = train(16);
        pt_err err;
        CHECK_INT(pt_stack_get(core ? "megatron-core" : "ptrun", &t.stack, &err), 0);
        t.fp8 = (pt_fp8){.recipe = core ? PT_FP8_DELAYED : PT_FP8_CURRENT, .history = 1024};
        pt_opctx c;
        pt_opctx_init(&c, &m, &l, &t, NULL);
        pt_oplist f = {0}, b = {0}, e = {0};
        CHECK_INT(pt_ops_layer(&c, false, &f), 0);
        CHECK_INT(pt_ops_layer(&c, true, &b), 0);
        CHECK_INT(pt_ops_embed(&c, true, &e), 0);
        CHECK_INT(pt_ops_head(&c, false, &e), 0);
        double layer_ag = core ? T * h : 2 * T * h;
        int hidden_bwd = 0;
        for (int pass = 0; pass < 2; pass++) {
            const pt_oplist *o = pass ? &b : &f;
            for (int i = 0; i < o->n; i++) {
                const pt_op *op = &o->op[i];
                if (op->cls != PT_OP_COLL || op->group != PT_GROUP_TP)
                    continue;
                if (op->coll.op == PT_COLL_ALLGATHER)
                    CHECK_NEAR(op->coll.bytes, layer_ag, 1e-12);
                else
                    CHECK_NEAR(op->coll.bytes, 2 * T * h, 1e-12);
                if (!pass)
                    CHECK(!op->overlapped);
                else
                    hidden_bwd += op->overlapped;
            }
        }
        /* the two column-parallel inputs' gathers and reduce-scatters */
        CHECK_INT(hidden_bwd, core ? 4 : 0);
        CHECK_INT(count(&b, PT_COLL_ALLGATHER, PT_GROUP_TP), 4);
        for (int i = 0; i < e.n; i++)
            if (e.op[i].cls == PT_OP_COLL && e.op[i].coll.op == PT_COLL_ALLGATHER)
                CHECK_NEAR(e.op[i].coll.bytes, 2 * T * h, 1e-12);
        pt_oplist_free(&f);
        pt_oplist_free(&b);
        pt_oplist_free(&e);
    }
    /* without FP8 the gathers stay in bf16 under TE too */
    pt_layout l = layout("tp=2,sp=1,dp=1", 16);
    pt_train t = train(16);
    pt_err err;
    CHECK_INT(pt_stack_get("megatron-core", &t.stack, &err), 0);
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    pt_oplist f = {0};
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    for (int i = 0; i < f.n; i++)
        if (f.op[i].cls == PT_OP_COLL && f.op[i].coll.op == PT_COLL_ALLGATHER)
            CHECK_NEAR(f.op[i].coll.bytes, 2 * T * h, 1e-12);
    pt_oplist_free(&f);
}

/* ---- Mixtures of experts ---------------------------------------------------------- */

/* A LLaMA-shaped model of 4 layers, 16 experts of fe, top-4, heads of 128 on h = 1024. */
static pt_model moe_model(void)
{
    pt_model m = {.name = "moe", .layers = 4, .hidden = 1024, .heads = 16, .kv_heads = 4,
                  .ffn = 2048, .vocab = 32000, .seq = 1024, .norm = PT_NORM_RMSNORM,
                  .act = PT_ACT_SWIGLU, .pos = PT_POS_ROPE, .head_dim = 128, .qk_norm = true};
    m.moe = (pt_moe){.experts = 16, .top_k = 4, .expert_ffn = 512, .every = 1,
                     .score = PT_ROUTER_SOFTMAX, .renorm = true, .aux_loss = 0.01};
    return m;
}

static const pt_op *find_op(const pt_oplist *o, pt_op_kind k)
{
    for (int i = 0; i < o->n; i++)
        if (o->op[i].kind == k)
            return &o->op[i];
    return NULL;
}

/* Whether the list holds each of the n kinds, first ones in that order. */
static bool in_order(const pt_oplist *o, const pt_op_kind *kinds, int n)
{
    const pt_op *last = NULL;
    for (int i = 0; i < n; i++) {
        const pt_op *op = find_op(o, kinds[i]);
        if (!op || (last && op <= last))
            return false;
        last = op;
    }
    return true;
}

static void test_moe_lists(void)
{
    pt_model m = moe_model();
    int64_t B = 8, T = 1024, h = 1024, E = 16, k = 4, fe = 512, qd = 16 * 128, kv = 4 * 128;
    /* one rank: the model FLOPs of a step are 6 per token per active weight (three
     * GEMMs each, forward and backward) plus the attention core's, 12·B·s²·a·d a layer
     * (model FLOPs count the full score matrix) plus the head's */
    {
        pt_layout l = layout("dp=1", B);
        pt_train t = train(B);
        pt_opctx c;
        pt_opctx_init(&c, &m, &l, &t, NULL);
        CHECK(c.moe_layer);
        double per_tok = (double)(h * (qd + 2 * kv) + qd * h + E * h + k * 3 * fe * h);
        double attn = 12.0 * (double)T * (double)T * (double)qd;
        double head = 6.0 * (double)(B * T) * (double)h * 32000;
        double want = 6.0 * (double)(B * T) * per_tok * 4 + (double)B * attn * 4 + head;
        CHECK_NEAR(pt_step_model_flops(&c), want, 1e-3);
    }
    /* tp 2 with sp, ep 4 on 8 ranks: R = T/2 tokens reach the router; each sends R·k
     * rows through the all-to-all over ep, and 16/4 experts compute R·k rows in one
     * grouped GEMM (a batch of 4 of R·k/4 rows) */
    pt_layout l = layout("tp=2,sp=1,dp=4,ep=4", B);
    pt_train t = train(B);
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    pt_oplist f = {0}, b = {0};
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    CHECK_INT(pt_ops_layer(&c, true, &b), 0);
    double R = (double)T / 2, ab = 2;
    const pt_op *d = find_op(&f, PT_OPK_MOE_DISPATCH), *cb = find_op(&f, PT_OPK_MOE_COMBINE);
    CHECK(d && cb && d->coll.op == PT_COLL_ALLTOALL && d->group == PT_GROUP_EP);
    CHECK(d && d->coll.group == 4 && !d->overlapped);
    CHECK_NEAR(d ? d->coll.bytes : 0, ab * R * (double)k * (double)h, 1e-12);
    CHECK(cb && cb->coll.bytes == d->coll.bytes);
    /* ptrun's kernels run the experts' GEMMs one after another: 4 of one shape, SwiGLU's
     * gate and up as two calls of fe each (runtime/moe.c), so 8 of n = fe */
    const pt_op *fc1 = find_op(&f, PT_OPK_EXPERT_FC1);
    CHECK(fc1 && strcmp(fc1->kernel.key, "gemm:bf16:m=512,n=512,k=1024") == 0);
    CHECK(fc1 && fc1->param == PT_PARAM_EXPERT_FC1 && fc1->count == 8);
    /* ... and add their data gradients into zeroed buffers: the accumulating role; the
     * first projection's gradients two calls of fe as well */
    const pt_op *fc2d = find_op(&b, PT_OPK_EXPERT_FC2_DGRAD);
    const pt_op *fc1d = find_op(&b, PT_OPK_EXPERT_FC1_DGRAD);
    const pt_op *fc1w = find_op(&b, PT_OPK_EXPERT_FC1_WGRAD);
    CHECK(fc2d && fc2d->role == PT_GEMM_DGRAD && fc2d->count == 4);
    CHECK(fc1d && fc1d->role == PT_GEMM_DGRAD && fc1d->count == 8);
    CHECK(fc1d && strcmp(fc1d->kernel.key, "gemm_dgrad:bf16:m=512,n=1024,k=512") == 0);
    CHECK(fc1w && fc1w->count == 8 && strncmp(fc1w->kernel.key, "gemm_wgrad", 10) == 0 &&
          strstr(fc1w->kernel.key, ":m=512,n=1024,k=512") != NULL);
    CHECK(find_op(&f, PT_OPK_ROUTER) && find_op(&f, PT_OPK_QK_NORM) &&
          find_op(&f, PT_OPK_MOE_AUX));
    CHECK(find_op(&f, PT_OPK_MLP_UP) == NULL); /* no shared expert: no dense MLP */
    CHECK(count(&f, PT_COLL_ALLTOALL, PT_GROUP_EP) == 2 &&
          count(&b, PT_COLL_ALLTOALL, PT_GROUP_EP) == 2);
    CHECK(find_op(&b, PT_OPK_ROUTER_WGRAD) && find_op(&b, PT_OPK_EXPERT_FC1_WGRAD) &&
          find_op(&b, PT_OPK_QK_NORM_BWD));
    for (int i = 0; i < f.n; i++) /* the kind table allows every op where it stands */
        CHECK(pt_op_kind_in(f.op[i].kind, PT_LIST_LAYER));
    /* q is a·d = 2048 wide (over tp 2: 1024 a rank), not h */
    const pt_op *q = find_op(&f, PT_OPK_Q);
    CHECK(q && strcmp(q->kernel.key, "gemm:bf16:m=1024,n=1024,k=1024") == 0);
    /* etp 2: the gathered copies through the experts (2·R·k rows, fe/2 wide) and back */
    pt_oplist_free(&f);
    l = layout("tp=2,sp=1,dp=4,ep=2,etp=2", B);
    pt_opctx_init(&c, &m, &l, &t, NULL);
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    CHECK_INT(count(&f, PT_COLL_ALLGATHER, PT_GROUP_ETP), 1);
    CHECK_INT(count(&f, PT_COLL_REDUCESCATTER, PT_GROUP_ETP), 1);
    fc1 = find_op(&f, PT_OPK_EXPERT_FC1);
    CHECK(fc1 && strcmp(fc1->kernel.key, "gemm:bf16:m=512,n=256,k=1024") == 0);
    CHECK(fc1 && fc1->count == 16);
    /* in the order ptrun runs them: gathered after the dispatch, the partial sums
     * reduce-scattered before the combine; the backward the other way round */
    CHECK(in_order(&f, (pt_op_kind[]){PT_OPK_MOE_DISPATCH, PT_OPK_ETP_ALLGATHER,
                                       PT_OPK_EXPERT_FC1, PT_OPK_EXPERT_FC2,
                                       PT_OPK_ETP_REDUCESCATTER, PT_OPK_MOE_COMBINE}, 6));
    pt_oplist_free(&b);
    CHECK_INT(pt_ops_layer(&c, true, &b), 0);
    CHECK(in_order(&b, (pt_op_kind[]){PT_OPK_MOE_COMBINE_BWD, PT_OPK_ETP_ALLGATHER_BWD,
                                       PT_OPK_EXPERT_FC2_DGRAD, PT_OPK_EXPERT_FC1_DGRAD,
                                       PT_OPK_ETP_REDUCESCATTER_BWD, PT_OPK_MOE_DISPATCH_BWD},
                   6));
    /* Transformer Engine's grouped GEMM: one GEMM an expert over 4 streams, priced as
     * runs of a batch of 4 */
    pt_err err;
    pt_train tm = train(B);
    CHECK_INT(pt_stack_get("megatron-core", &tm.stack, &err), 0);
    pt_oplist_free(&f);
    pt_opctx_init(&c, &m, &l, &tm, NULL);
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    fc1 = find_op(&f, PT_OPK_EXPERT_FC1);
    CHECK(fc1 && strcmp(fc1->kernel.key, "gemm:bf16:b=4,m=512,n=512,k=1024") == 0);
    CHECK(fc1 && fc1->count == 2);
    /* (Megatron-Core's linear_fc1 is gate and up in one GEMM, its data gradients written) */
    pt_oplist_free(&b);
    CHECK_INT(pt_ops_layer(&c, true, &b), 0);
    fc1d = find_op(&b, PT_OPK_EXPERT_FC1_DGRAD);
    CHECK(fc1d && fc1d->role == PT_GEMM_DGRAD_WRITE && fc1d->count == 2);
    /* DeepEP (flex) across nodes: each token once to each other node holding one of its
     * experts, then the copies over NVLink. 16 experts over ep 8 on 2 nodes of 4 (one
     * stage of tp 1, dp 8): of 4 experts among the other node's 8, it holds none with
     * probability C(8,4)/C(16,4) = 70/1820 */
    pt_cluster two = {.name = "c", .nodes = 2, .devices_per_node = 4};
    pt_layout lf = layout("dp=8,ep=8,moe_dispatch=flex", B);
    pt_oplist_free(&f);
    pt_opctx_init(&c, &m, &lf, &tm, &two);
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    int flex = 0;
    for (int i = 0; i < f.n; i++) {
        const pt_op *op = &f.op[i];
        if (op->kind != PT_OPK_MOE_DISPATCH)
            continue;
        if (flex++ == 0) { /* among the 2 nodes, one rank each */
            CHECK(op->coll.group == 2 && op->coll.ranks_per_node == 1);
            CHECK_NEAR(op->coll.bytes, ab * (double)T * (1 - 70.0 / 1820) * (double)h * 2, 1e-12);
        } else { /* inside the node: the R·k copies */
            CHECK(op->coll.group == 4 && op->coll.ranks_per_node == 4);
            CHECK_NEAR(op->coll.bytes, ab * (double)T * (double)k * (double)h, 1e-12);
        }
    }
    CHECK_INT(flex, 2);
    /* the busiest rank at imbalance 1.5 computes and receives half as much again */
    pt_oplist_free(&f);
    t.moe_imbalance = 1.5;
    l = layout("tp=2,sp=1,dp=4,ep=4", B);
    pt_opctx_init(&c, &m, &l, &t, NULL);
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    d = find_op(&f, PT_OPK_MOE_DISPATCH);
    CHECK_NEAR(d ? d->coll.bytes : 0, 1.5 * ab * R * (double)k * (double)h, 1e-12);
    fc1 = find_op(&f, PT_OPK_EXPERT_FC1);
    CHECK(fc1 && strcmp(fc1->kernel.key, "gemm:bf16:m=768,n=512,k=1024") == 0);
    /* ... but a capacity factor of 1.25 drops what exceeds it */
    pt_oplist_free(&f);
    m.moe.capacity = 1.25;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    fc1 = find_op(&f, PT_OPK_EXPERT_FC1);
    CHECK(fc1 && strcmp(fc1->kernel.key, "gemm:bf16:m=640,n=512,k=1024") == 0);
    m.moe.capacity = 0;
    /* the allgather dispatcher: the ep group's tokens gathered, their sums scattered */
    pt_oplist_free(&f);
    t.moe_imbalance = 1;
    l = layout("tp=2,sp=1,dp=4,ep=4,moe_dispatch=allgather", B);
    pt_opctx_init(&c, &m, &l, &t, NULL);
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    d = find_op(&f, PT_OPK_MOE_DISPATCH);
    CHECK(d && d->coll.op == PT_COLL_ALLGATHER);
    CHECK_NEAR(d ? d->coll.bytes : 0, ab * 4 * R * (double)h, 1e-12);
    cb = find_op(&f, PT_OPK_MOE_COMBINE);
    CHECK(cb && cb->coll.op == PT_COLL_REDUCESCATTER);
    /* the experts' gradients: buckets of their own over edp (16/4 = 2 here... 8/4) */
    pt_oplist o = {0};
    CHECK_INT(pt_ops_expert_sync(&c, 1e6, &o), 0);
    CHECK(o.n >= 1 && o.op[0].group == PT_GROUP_EDP && o.op[0].coll.group == 2);
    pt_oplist_free(&o);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
}

/* How many of the list's ops are of kind k and run again before the backward. */
static int recomputed(const pt_oplist *o, pt_op_kind k)
{
    int n = 0;
    for (int i = 0; i < o->n; i++)
        n += o->op[i].kind == k && o->op[i].recompute;
    return n;
}

/* The backward op list of model m's layer under layout `text` (global batch 8), in out
 * (emptied first). */
static void backward_list(const pt_model *m, const char *text, const pt_train *t,
                          pt_oplist *out)
{
    pt_layout l = layout(text, 8);
    pt_opctx c;
    pt_opctx_init(&c, m, &l, t, NULL);
    out->n = 0;
    CHECK_INT(pt_ops_layer(&c, true, out), 0);
}

/* Megatron-Core's recompute modules: each runs its part of the forward again before the
 * backward, and nothing else; a mixture's whole routed block includes its all-to-alls. */
static void test_recompute_modules(void)
{
    pt_model m = moe_model();
    pt_err err;
    pt_train t = train(8);
    CHECK_INT(pt_stack_get("megatron-core", &t.stack, &err), 0);
    pt_oplist none = {0}, b = {0};
    backward_list(&m, "tp=2,sp=1,dp=4,ep=4", &t, &none);
    int kept = 0;
    for (int i = 0; i < none.n; i++)
        kept += none.op[i].recompute;
    CHECK_INT(kept, 0);
    /* layernorm and moe_act: the pre-MLP norm and the experts' activation, once each */
    backward_list(&m, "tp=2,sp=1,dp=4,ep=4,recompute=layernorm+moe_act", &t, &b);
    CHECK_INT(b.n, none.n + 2);
    CHECK_INT(recomputed(&b, PT_OPK_NORM2), 1);
    CHECK_INT(recomputed(&b, PT_OPK_EXPERT_ACT), 1);
    CHECK_INT(recomputed(&b, PT_OPK_ATTN), 0); /* no core_attn in the list */
    /* ... before the backward that reads them */
    CHECK(in_order(&b, (pt_op_kind[]){PT_OPK_NORM2, PT_OPK_EXPERT_ACT, PT_OPK_EXPERT_FC2_DGRAD,
                                       PT_OPK_ROUTER_DGRAD}, 4));
    /* moe: the routed block's forward again, its dispatch and combine included */
    backward_list(&m, "tp=2,sp=1,dp=4,ep=4,recompute=moe", &t, &b);
    CHECK_INT(recomputed(&b, PT_OPK_ROUTER), 1);
    CHECK_INT(recomputed(&b, PT_OPK_EXPERT_FC1), 1);
    CHECK_INT(recomputed(&b, PT_OPK_EXPERT_FC2), 1);
    CHECK_INT(recomputed(&b, PT_OPK_MOE_DISPATCH), 1);
    CHECK_INT(recomputed(&b, PT_OPK_MOE_COMBINE), 1);
    CHECK_INT(recomputed(&b, PT_OPK_NORM2), 0);
    CHECK_INT(count(&b, PT_COLL_ALLTOALL, PT_GROUP_EP), 4);
    /* ... and its wait for the tokens' counts before that dispatch */
    CHECK_INT(recomputed(&b, PT_OPK_MOE_SYNC), 1);
    CHECK(in_order(&b, (pt_op_kind[]){PT_OPK_MOE_ROUTE, PT_OPK_MOE_SYNC, PT_OPK_MOE_DISPATCH,
                                       PT_OPK_MOE_COMBINE_BWD}, 4));
    /* core_attn: the attention core before its backward, as recompute=selective */
    backward_list(&m, "tp=2,sp=1,dp=4,ep=4,recompute=core_attn", &t, &b);
    CHECK_INT(recomputed(&b, PT_OPK_ATTN), 1);
    CHECK_INT(b.n, none.n + 1);
    /* mlp: a dense layer's MLP (a mixture's has none to rebuild) */
    pt_model dense = moe_model();
    dense.moe = (pt_moe){0};
    dense.ffn = 2048;
    backward_list(&dense, "tp=2,sp=1,dp=4", &t, &none);
    backward_list(&dense, "tp=2,sp=1,dp=4,recompute=mlp+moe_act", &t, &b);
    CHECK_INT(recomputed(&b, PT_OPK_MLP_DOWN), 1);
    CHECK_INT(recomputed(&b, PT_OPK_ACT), 1);
    CHECK_INT(recomputed(&b, PT_OPK_EXPERT_ACT), 0);
    CHECK(count(&b, PT_COLL_ALLGATHER, PT_GROUP_TP) ==
          count(&none, PT_COLL_ALLGATHER, PT_GROUP_TP) + 1);
    pt_oplist_free(&b);
    pt_oplist_free(&none);
}

/* Megatron-Core's dispatchers wait on the host for the routed tokens' counts: one
 * moe_sync a mixture layer's forward, between the routing and the dispatch, none in its
 * backward; a stack without the wait (ptrun's, a dense layer) lists none. */
static void test_moe_host_sync(void)
{
    pt_model m = moe_model();
    pt_err err;
    pt_train t = train(8);
    CHECK_INT(pt_stack_get("megatron-core", &t.stack, &err), 0);
    CHECK(t.stack.moe_host_sync_s > 0);
    pt_layout l = layout("tp=2,sp=1,dp=4,ep=4", 8);
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    pt_oplist f = {0}, b = {0};
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    CHECK_INT(pt_ops_layer(&c, true, &b), 0);
    int n = 0;
    for (int i = 0; i < f.n; i++)
        n += f.op[i].kind == PT_OPK_MOE_SYNC;
    CHECK_INT(n, 1);
    CHECK(in_order(&f, (pt_op_kind[]){PT_OPK_MOE_ROUTE, PT_OPK_MOE_SYNC, PT_OPK_MOE_DISPATCH},
                   3));
    const pt_op *s = find_op(&f, PT_OPK_MOE_SYNC);
    CHECK(s && s->cls == PT_OP_KERNEL && s->kernel.flops == 0 && s->kernel.bytes == 0);
    CHECK(pt_op_kind_info_of(PT_OPK_MOE_SYNC)->priced_only);
    CHECK(pt_op_kind_info_of(PT_OPK_MOE_SYNC)->category == PT_BD_OVERHEAD);
    CHECK(find_op(&b, PT_OPK_MOE_SYNC) == NULL);
    /* the same stack without the wait, and ptrun's own: none */
    t.stack.moe_host_sync_s = 0;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    f.n = 0;
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    CHECK(find_op(&f, PT_OPK_MOE_SYNC) == NULL);
    pt_train own = train(8);
    pt_opctx_init(&c, &m, &l, &own, NULL);
    f.n = 0;
    CHECK_INT(pt_ops_layer(&c, false, &f), 0);
    CHECK(find_op(&f, PT_OPK_MOE_DISPATCH) && find_op(&f, PT_OPK_MOE_SYNC) == NULL);
    pt_oplist_free(&f);
    pt_oplist_free(&b);
}

/* Banded attention (gpt-oss): a banded layer's flash kernels meet each query's band of
 * w keys, (s·w - w(w-1)/2) pairs a head and sequence, and the key says its window; the
 * full layers keep the causal half. */
static void test_window(void)
{
    pt_model m = moe_model();
    m.window = 128;
    m.window_full_every = 2;
    pt_layout l = layout("dp=8,ep=8", 8);
    pt_err err;
    pt_train t = train(8);
    CHECK_INT(pt_stack_get("megatron-core", &t.stack, &err), 0);
    pt_opctx c;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    CHECK(c.window_layer); /* layer 0 is banded */
    pt_oplist o = {0};
    CHECK_INT(pt_ops_layer(&c, false, &o), 0);
    const pt_op *a = find_op(&o, PT_OPK_ATTN);
    double s = 1024, w = 128, pairs = s * w - w * (w - 1) / 2;
    CHECK(a && strstr(a->kernel.key, ",w=128") != NULL);
    CHECK_NEAR(a ? a->kernel.flops : 0, 4.0 * 1 * 16 * pairs * 128, 1e-12);
    pt_oplist_free(&o);
    c.window_layer = false;
    CHECK_INT(pt_ops_layer(&c, false, &o), 0);
    a = find_op(&o, PT_OPK_ATTN);
    CHECK(a && strstr(a->kernel.key, ",w=") == NULL);
    CHECK_NEAR(a ? a->kernel.flops : 0, 4.0 * 16 * 0.5 * s * s * 128, 1e-12);
    pt_oplist_free(&o);
    /* the step: half the layers banded, half full */
    pt_opctx_init(&c, &m, &l, &t, NULL);
    double banded = pt_step_model_flops(&c);
    m.window = 0;
    m.window_full_every = 0;
    pt_opctx_init(&c, &m, &l, &t, NULL);
    double full = pt_step_model_flops(&c);
    /* 2 of 4 layers banded, attention fwd+bwd 3.5x the forward (flash), 8 sequences */
    double saved = 2 * 3.5 * 4.0 * 16 * 128 * (0.5 * s * s - pairs) * 8;
    CHECK_NEAR(full - banded, saved, 1e-9);
}

int main(void)
{
    test_window();
    test_moe_lists();
    test_recompute_modules();
    test_moe_host_sync();
    test_fp8();
    test_te_tp_collectives();
    test_flops_formula();
    test_kind_table();
    test_bias_in_role();
    test_kernel_operands();
    test_collectives();
    test_cp_comm();
    test_keys();
    test_grad_sync_and_optimizer();
    test_ranks_per_node();
    test_stack_kernels_and_selective();
    test_fused_epilogues();
    test_residual_in_gemm();
    test_shared_qkv();
    test_gemm_roles();
    test_xent_bytes();
    return pt_check_result();
}
