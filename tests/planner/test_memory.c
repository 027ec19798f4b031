/*
 * Unit tests of the parameter counts (planner/params.c) and the memory model
 * (planner/memory.c): published parameter counts, the ZeRO paper's model-state
 * example, Korthikanti et al.'s activation formulas, a hand-computed LLaMA layer,
 * a full hand-computed stage breakdown, the direction of every memory-saving knob,
 * and pt_mem_rank_max against a loop over all stages. Models and layouts are built
 * by hand here so that this test depends only on the files it tests.
 */
#include "check.h"
#include "planner.h"

#include <math.h>
#include <stdio.h>

/* ---- Models and layouts ------------------------------------------------------- */

static pt_model gpt(int64_t L, int64_t h, int64_t a, int64_t v, int64_t s)
{
    pt_model m = {.layers = L, .hidden = h, .heads = a, .kv_heads = a, .ffn = 4 * h,
                  .vocab = v, .seq = s, .norm = PT_NORM_LAYERNORM, .act = PT_ACT_GELU,
                  .pos = PT_POS_LEARNED, .tied_embeddings = true, .bias = true,
                  .dropout = true};
    return m;
}

static pt_model llama(int64_t L, int64_t h, int64_t a, int64_t k, int64_t f, int64_t v,
                      int64_t s)
{
    pt_model m = {.layers = L, .hidden = h, .heads = a, .kv_heads = k, .ffn = f,
                  .vocab = v, .seq = s, .norm = PT_NORM_RMSNORM, .act = PT_ACT_SWIGLU,
                  .pos = PT_POS_ROPE, .tied_embeddings = false, .bias = false,
                  .dropout = false};
    return m;
}

static pt_layout layout(int tp, int pp, int dp)
{
    pt_layout l = {.tp = tp, .cp = 1, .pp = pp, .dp = dp, .vp = 1, .ep = 1, .etp = 1,
                   .sp = false, .zero = 0,
                   .mbs = 1, .n_micro = 1, .recompute = PT_RECOMPUTE_NONE,
                   .schedule = PT_SCHED_1F1B,
                   .order = {PT_DIM_TP, PT_DIM_CP, PT_DIM_DP, PT_DIM_PP}};
    return l;
}

/* ptrun's stack with unfused attention (Megatron-LM's: the score matrix is kept), so
 * that the figures are Korthikanti et al.'s; ptrun's own attention is memory of its
 * own buffers (test_ptrun_buffers). */
static pt_train train(pt_prec_kind p)
{
    pt_train t = {.global_batch = 512, .precision = p, .bucket_bytes = 25 * 1024 * 1024,
                  .stack = *pt_stack_builtin(0)}; /* ptrun */
    t.stack.attention = PT_ATTN_UNFUSED;
    return t;
}

/* ---- Parameter counts --------------------------------------------------------- */

static void test_params_published(void)
{
    /* GPT-2 small with the unpadded vocabulary 50257 (HF: 124,439,808). */
    pt_model g = gpt(12, 768, 12, 50257, 1024);
    CHECK_INT(pt_model_params_total(&g), 124439808);
    /* Per layer: QKV 768·2304 + 2304, proj 768·768 + 768, MLP 768·3072 + 3072 and
     * 3072·768 + 768, two LayerNorms 4·768: 7,087,872. */
    CHECK_INT(pt_params_layer(&g, 1), 7087872);

    pt_model l7 = llama(32, 4096, 32, 32, 11008, 32000, 4096);
    CHECK_INT(pt_model_params_total(&l7), 6738415616); /* Llama 2 7B (HF) */
    pt_model l8 = llama(32, 4096, 32, 8, 14336, 128256, 8192);
    CHECK_INT(pt_model_params_total(&l8), 8030261248); /* Llama 3 8B (HF) */
    pt_model l70 = llama(80, 8192, 64, 8, 28672, 32000, 4096);
    CHECK_NEAR((double)pt_model_params_total(&l70), 68.98e9, 0.005); /* Llama 2 70B */
    pt_model l405 = llama(126, 16384, 128, 8, 53248, 128256, 8192);
    CHECK_NEAR((double)pt_model_params_total(&l405), 405.8e9, 0.005); /* Llama 3 405B */
}

static void test_params_tp(void)
{
    pt_model g = gpt(12, 768, 12, 50257, 1024);
    CHECK_INT(pt_vocab_padded(&g, 1), 50304);
    CHECK_INT(pt_vocab_padded(&g, 2), 50304);
    CHECK_INT(pt_vocab_padded(&g, 3), 50304);
    CHECK_INT(pt_vocab_padded(&g, 7), 50309);
    /* t = 2: split weights and column biases halve, replicated biases (2·768) and
     * norms (4·768) stay: (7,087,872 - 6·768)/2 + 6·768. */
    CHECK_INT(pt_params_layer(&g, 2), (7087872 - 6 * 768) / 2 + 6 * 768);
    /* Tied head: nothing but the final norm with p = 1, a vocab-parallel copy of the
     * embedding on the last stage with p > 1. */
    CHECK_INT(pt_params_head(&g, 1, 1), 2 * 768);
    CHECK_INT(pt_params_head(&g, 2, 4), 2 * 768 + 50304 * 768 / 2);
    CHECK_INT(pt_params_embedding(&g, 2), 50304 * 768 / 2 + 1024 * 768);

    pt_model l8 = llama(32, 4096, 32, 8, 14336, 128256, 8192);
    CHECK_INT(pt_params_embedding(&l8, 8), 128256 * 4096 / 8); /* RoPE: no table */
    CHECK_INT(pt_params_head(&l8, 8, 1), 4096 + 128256 * 4096 / 8);
    /* t = 8: (4096·6144 + 4096·4096 + 3·4096·14336)/8 + 2·4096 RMSNorm gains. */
    CHECK_INT(pt_params_layer(&l8, 8), (4096LL * 6144 + 4096LL * 4096 + 3LL * 4096 * 14336) / 8 +
                                           2 * 4096);
    /* t = 16 > 8 KV heads: each rank holds 2 of the 32 query heads and the one KV head
     * they use (128 rows of K and of V), replicated over 2 ranks. */
    CHECK_INT(pt_kv_heads_rank(&l8, 16), 1);
    CHECK_INT(pt_kv_heads_rank(&l8, 4), 2);
    CHECK_INT(pt_params_layer(&l8, 16), 4096LL * (256 + 2 * 128) + 4096LL * 4096 / 16 +
                                            3LL * 4096 * 14336 / 16 + 2 * 4096);
}

/* ---- Precisions and defaults -------------------------------------------------- */

static void test_precisions(void)
{
    pt_precision b = pt_precision_of(PT_PREC_BF16);
    CHECK_INT(b.weight_bytes + b.grad_bytes + b.master_bytes + b.moment_bytes, 18);
    pt_precision z = pt_precision_of(PT_PREC_BF16_GRAD16);
    CHECK_INT(z.weight_bytes + z.grad_bytes + z.master_bytes + z.moment_bytes, 16);
    pt_precision f = pt_precision_of(PT_PREC_FP32);
    CHECK_INT(f.master_bytes, 0);
    CHECK_INT(f.act_bytes, 4);

    for (int k = 0; k < PT_PREC_COUNT; k++) {
        pt_prec_kind got = PT_PREC_COUNT;
        CHECK_INT(pt_prec_parse(pt_prec_name((pt_prec_kind)k), &got, NULL), 0);
        CHECK_INT(got, k);
    }
    pt_err err = {{0}};
    pt_prec_kind got = PT_PREC_BF16;
    CHECK_INT(pt_prec_parse("fp16", &got, &err), -1);
    CHECK_STR_HAS(err.msg, "unknown precision 'fp16' (expected bf16, bf16-grad16 or fp32)");
    CHECK_INT(pt_prec_parse(NULL, &got, &err), -1);

    pt_train t;
    pt_train_default(&t, NULL);
    CHECK_INT(t.precision, PT_PREC_FP32);
    CHECK_INT(t.bucket_bytes, 25 * 1024 * 1024);
    CHECK(t.global_batch > 0);
    pt_cluster c = {.nodes = 1, .devices_per_node = 8};
    pt_train_default(&t, &c);
    CHECK_INT(t.precision, PT_PREC_FP32); /* no bf16 throughput: a CPU */
    c.device.peak_flops[PT_DTYPE_BF16] = 989e12;
    pt_train_default(&t, &c);
    CHECK_INT(t.precision, PT_PREC_BF16);
}

/* ---- Model states: the ZeRO paper's example ----------------------------------- */

static void test_zero_example(void)
{
    /* Rajbhandari et al. 2020, Fig. 1: Ψ = 7.5B, N_d = 64, K = 12 gives 120 GB,
     * 31.4 GB, 16.6 GB and 1.9 GB for baseline, P_os, P_os+g and P_os+g+p. */
    const double want[4] = {120e9, 31.4e9, 16.6e9, 1.9e9};
    pt_precision p = pt_precision_of(PT_PREC_BF16_GRAD16);
    for (int stage = 0; stage < 4; stage++) {
        pt_model_states s = pt_mem_model_states(7.5e9, 64, stage, p);
        double total = s.weights_bytes + s.grads_bytes + s.optimizer_bytes;
        CHECK(fabs(total - want[stage]) <= 0.05e9);
    }
    pt_model_states s0 = pt_mem_model_states(7.5e9, 64, 0, p);
    CHECK_NEAR(s0.optimizer_bytes, 12 * 7.5e9, 1e-12);
    pt_model_states s3 = pt_mem_model_states(7.5e9, 64, 3, p);
    CHECK_NEAR(s3.weights_bytes, 2 * 7.5e9 / 64, 1e-12);
    /* A shard of one changes nothing. */
    pt_model_states s1 = pt_mem_model_states(7.5e9, 1, 3, p);
    CHECK_NEAR(s1.weights_bytes + s1.grads_bytes + s1.optimizer_bytes, 120e9, 1e-12);
}

/* ---- Activations: Korthikanti et al. 2022 ------------------------------------- */

static double act(const pt_model *m, int tp, bool sp, pt_recompute r, int64_t b)
{
    pt_layout l = layout(tp, 1, 1);
    l.sp = sp;
    l.recompute = r;
    l.mbs = b;
    return pt_mem_layer_activations(m, &l, pt_precision_of(PT_PREC_BF16));
}

static void test_korthikanti(void)
{
    /* GPT-3 175B's layer shape and a small one; f = 4h, k = a, GeLU, LayerNorm,
     * dropout, 2-byte activations, c = 1. */
    pt_model ms[2] = {gpt(96, 12288, 96, 51200, 2048), gpt(4, 256, 8, 1000, 512)};
    const int tps[4] = {1, 2, 4, 8};
    for (int i = 0; i < 2; i++) {
        const pt_model *m = &ms[i];
        double s = (double)m->seq, h = (double)m->hidden, a = (double)m->heads;
        for (int64_t b = 1; b <= 4; b *= 2) {
            double sbh = s * (double)b * h;
            /* Sec. 4.1, eq. 1: sbh(34 + 5as/h). */
            CHECK_NEAR(act(m, 1, false, PT_RECOMPUTE_NONE, b), sbh * (34 + 5 * a * s / h),
                       1e-12);
            for (int j = 0; j < 4; j++) {
                double t = tps[j];
                /* Eq. 2, tensor parallelism: sbh(10 + 24/t + 5as/(ht)). */
                CHECK_NEAR(act(m, tps[j], false, PT_RECOMPUTE_NONE, b),
                           sbh * (10 + 24 / t + 5 * a * s / (h * t)), 1e-12);
                /* Eq. 3, with sequence parallelism: sbh/t·(34 + 5as/h). */
                CHECK_NEAR(act(m, tps[j], true, PT_RECOMPUTE_NONE, b),
                           sbh / t * (34 + 5 * a * s / h), 1e-12);
                /* Sec. 5, selective recomputation: sbh·34/t with sp, sbh(10 + 24/t)
                 * without. */
                CHECK_NEAR(act(m, tps[j], true, PT_RECOMPUTE_SELECTIVE, b), sbh * 34 / t,
                           1e-12);
                CHECK_NEAR(act(m, tps[j], false, PT_RECOMPUTE_SELECTIVE, b),
                           sbh * (10 + 24 / t), 1e-12);
                /* Full recomputation keeps the layer input: 2sbh, 2sbh/t with sp. */
                CHECK_NEAR(act(m, tps[j], false, PT_RECOMPUTE_FULL, b), 2 * sbh, 1e-12);
                CHECK_NEAR(act(m, tps[j], true, PT_RECOMPUTE_FULL, b), 2 * sbh / t, 1e-12);
            }
        }
    }
}

static void test_llama_activations(void)
{
    /* Llama 3 8B's layer: h = 4096, a = 32, k = 8 (kvd = 8·128 = 1024), f = 14336,
     * SwiGLU, RMSNorm, no dropout; s = 4096, b = 1, 2-byte activations.
     * t = 1:
     *   norm inputs 2·2·sbh                 =    67,108,864
     *   QKV input 2·sbh                     =    33,554,432
     *   Q, K, V 2·sb·(4096 + 2·1024)        =    50,331,648
     *   softmax output 2·a·s²·b             = 1,073,741,824
     *   output-projection input 2·sbh       =    33,554,432
     *   MLP input 2·sbh                     =    33,554,432
     *   gate, up and down inputs 3·2·sb·f   =   352,321,536
     *   total                               = 1,644,167,168
     * (sbh = 4096·4096 = 16,777,216; sb·f = 4096·14336 = 58,720,256.) */
    pt_model m = llama(32, 4096, 32, 8, 14336, 128256, 4096);
    CHECK_NEAR(act(&m, 1, false, PT_RECOMPUTE_NONE, 1), 1644167168.0, 1e-15);
    /* t = 2 without sp: replicated 8·sbh = 134,217,728; split Q, K, V 25,165,824,
     * output-projection input 16,777,216, MLP 176,160,768, softmax 536,870,912;
     * total 889,192,448. */
    CHECK_NEAR(act(&m, 2, false, PT_RECOMPUTE_NONE, 1), 889192448.0, 1e-15);
    /* Selective drops the softmax output: 889,192,448 - 536,870,912. */
    CHECK_NEAR(act(&m, 2, false, PT_RECOMPUTE_SELECTIVE, 1), 352321536.0, 1e-15);

    /* Context parallelism c = 2 halves every term, the s² ones included (s/2 local
     * queries against s keys). */
    pt_layout l = layout(1, 1, 1);
    l.cp = 2;
    CHECK_NEAR(pt_mem_layer_activations(&m, &l, pt_precision_of(PT_PREC_BF16)),
               1644167168.0 / 2, 1e-15);
    /* fp32 activations double everything (there are no 1-byte masks without dropout). */
    l.cp = 1;
    CHECK_NEAR(pt_mem_layer_activations(&m, &l, pt_precision_of(PT_PREC_FP32)),
               2 * 1644167168.0, 1e-15);
}

/* Transformer Engine's FP8 (megatron-core, casts "te") keeps each linear layer's input
 * for the backward in one byte: Llama 3 8B's layer at t = 1 saves a byte of sbh on the
 * QKV input and on the MLP input and a byte of sb·f on the down projection's input,
 * and keeps an FP8 copy of the attention output beside flash attention's bf16 one:
 * -sbh - sb·f = -(16,777,216 + 58,720,256) bytes a layer. The FP8 weights and their
 * cached transposes are 2 bytes a weight element of the layers. */
static void test_te_fp8_activations(void)
{
    pt_model m = llama(32, 4096, 32, 8, 14336, 128256, 4096);
    pt_layout l = layout(1, 1, 8);
    l.zero = 1;
    l.n_micro = 16;
    pt_train t = {.global_batch = 128, .precision = PT_PREC_BF16,
                  .bucket_bytes = 25 * 1024 * 1024};
    pt_err err;
    CHECK_INT(pt_stack_get("megatron-core", &t.stack, &err), 0);
    pt_memory bf16, fp8;
    pt_mem_stage(&m, &l, &t, 0, &bf16);
    t.fp8.recipe = PT_FP8_DELAYED;
    t.fp8.history = 1024;
    pt_mem_stage(&m, &l, &t, 0, &fp8);
    CHECK_NEAR(fp8.activations_bytes - bf16.activations_bytes, -32.0 * (16777216 + 58720256),
               1e-12);
    double w = 4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3 * 4096.0 * 14336;
    CHECK_NEAR(fp8.weights_bytes - bf16.weights_bytes, 2 * 32 * w, 1e-12);
    /* ptrun's own FP8 keeps its GEMM inputs in the storage precision. */
    CHECK_INT(pt_stack_get("ptrun", &t.stack, &err), 0);
    t.stack.attention = PT_ATTN_FLASH;
    pt_mem_stage(&m, &l, &t, 0, &fp8);
    t.fp8.recipe = PT_FP8_OFF;
    pt_mem_stage(&m, &l, &t, 0, &bf16);
    CHECK_NEAR(fp8.activations_bytes, bf16.activations_bytes, 1e-15);
}

/* ---- One stage, by hand ------------------------------------------------------- */

static void test_stage_by_hand(void)
{
    /* Tiny GPT: L = 4, h = 64, a = k = 4 (hd = 16, kvd = 64), f = 256, v = 1000,
     * s = 128, tied, biases, dropout. Layout tp = 2, pp = 2, dp = 2, zero = 1, 1F1B,
     * b = 2, n = 4; bf16 (2 + 4 + 4 + 8 bytes, 2-byte activations).
     *
     * Parameters per layer at t = 2: QKV 64·192/2 + 192/2 = 6144 + 96, proj
     * 64·64/2 + 64 = 2048 + 64, up 64·256/2 + 256/2 = 8192 + 128, down
     * 256·64/2 + 64 = 8192 + 64, norms 2·128 = 256: 25,184. Two layers per stage:
     * 50,368. Embedding 1000·64/2 + 128·64 = 40,192; head (tied, p > 1)
     * 128 + 32,000 = 32,128. Stage 0: 90,560; stage 1: 82,496.
     *
     * Activations per layer (sb = 256, sbh = 16,384, t = 2): Korthikanti's
     * sbh(10 + 24/t) = 360,448 plus 5as²b/t = 5·4·128²·2/2 = 327,680: 688,128. */
    pt_model m = gpt(4, 64, 4, 1000, 128);
    pt_layout l = layout(2, 2, 2);
    l.zero = 1;
    l.mbs = 2;
    l.n_micro = 4;
    pt_train t = train(PT_PREC_BF16);
    CHECK_INT(pt_params_layer(&m, 2), 25184);
    CHECK_NEAR(pt_mem_layer_activations(&m, &l, pt_precision_of(PT_PREC_BF16)), 688128.0,
               1e-15);

    /* The vocabulary 1000 is padded to 1024 (a multiple of 128), 512 rows per rank.
     * Stage 0: weights 2·91,328 = 182,656; grads 4·91,328 = 365,312; optimizer
     * 12·91,328/2 = 547,968; min(2 - 0, 4) = 2 micro-batches of 2 layers:
     * 4·688,128 = 2,752,512; embedding dropout mask of min(p, n) = 2 micro-batches:
     * 2·16,384 = 32,768; comm: two buckets of min(25 MiB, 365,312) = 730,624 plus
     * send/receive 2·2·16,384 = 65,536: 796,160. Total 4,677,376. */
    pt_memory s;
    pt_mem_stage(&m, &l, &t, 0, &s);
    CHECK_INT(s.stage, 0);
    CHECK_NEAR(s.params, 91328, 1e-15);
    CHECK_INT(s.layers, 2);
    CHECK_INT(s.in_flight, 2);
    CHECK_NEAR(s.weights_bytes, 182656, 1e-15);
    CHECK_NEAR(s.grads_bytes, 365312, 1e-15);
    CHECK_NEAR(s.optimizer_bytes, 547968, 1e-15);
    CHECK_NEAR(s.activations_bytes, 2752512, 1e-15);
    CHECK_NEAR(s.embed_head_bytes, 32768, 1e-15);
    CHECK(s.recompute_bytes == 0);
    CHECK_NEAR(s.comm_bytes, 796160, 1e-15);
    CHECK_NEAR(s.total_bytes, 4677376, 1e-15);

    /* Stage 1: weights 166,528; grads 333,056; optimizer 499,584; one micro-batch of
     * 2 layers: 1,376,256; final-norm input 2·16,384 = 32,768 plus fp32 logits
     * 4·256·1024/2 = 524,288: 557,056; comm 2·333,056 + 65,536 = 731,648.
     * Total 3,664,128. */
    pt_mem_stage(&m, &l, &t, 1, &s);
    CHECK_INT(s.stage, 1);
    CHECK_NEAR(s.params, 83264, 1e-15);
    CHECK_INT(s.in_flight, 1);
    CHECK_NEAR(s.weights_bytes, 166528, 1e-15);
    CHECK_NEAR(s.grads_bytes, 333056, 1e-15);
    CHECK_NEAR(s.optimizer_bytes, 499584, 1e-15);
    CHECK_NEAR(s.activations_bytes, 1376256, 1e-15);
    CHECK_NEAR(s.embed_head_bytes, 557056, 1e-15);
    CHECK_NEAR(s.comm_bytes, 731648, 1e-15);
    CHECK_NEAR(s.total_bytes, 3664128, 1e-15);

    pt_mem_rank_max(&m, &l, &t, &s);
    CHECK_INT(s.stage, 0);
    CHECK_NEAR(s.total_bytes, 4677376, 1e-15);

    /* Recomputation working space: full rebuilds one whole layer (688,128), selective
     * one attention core (327,680). */
    l.recompute = PT_RECOMPUTE_FULL;
    pt_mem_stage(&m, &l, &t, 0, &s);
    CHECK_NEAR(s.recompute_bytes, 688128, 1e-15);
    CHECK_NEAR(s.activations_bytes, 4 * 2 * 16384, 1e-15); /* layer inputs only */
    l.recompute = PT_RECOMPUTE_SELECTIVE;
    pt_mem_stage(&m, &l, &t, 0, &s);
    CHECK_NEAR(s.recompute_bytes, 327680, 1e-15);

    /* torchtitan's per-op policy (the fsdp stack, given tp here to test the widths)
     * keeps per layer the input (R: sbh = 16,384 elements), the attention output
     * (sbh/t = 8,192), q (sb·h/t = 8,192), v (sb·kvd/t = 8,192) and the MLP up output
     * (sb·f/t = 32,768): 73,728 bf16 elements = 147,456 bytes, plus the fp32
     * log-sum-exp 4·(a/t)·sb = 2,048: 149,504 per layer, 4 layer-chunks in flight;
     * its recomputation holds one whole layer without recompute, flash attention
     * (360,448 + 2,048). */
    pt_err err;
    CHECK_INT(pt_stack_get("fsdp", &t.stack, &err), 0);
    t.stack.tp = true; /* only the widths matter here */
    pt_mem_stage(&m, &l, &t, 0, &s);
    CHECK_NEAR(s.activations_bytes, 4 * 149504.0, 1e-15);
    CHECK_NEAR(s.recompute_bytes, 360448 + 2048, 1e-15);
    /* Korthikanti's selective recomputation with flash attention keeps no score
     * matrix to rebuild. */
    t.stack.selective = PT_SELECTIVE_ATTENTION;
    pt_mem_stage(&m, &l, &t, 0, &s);
    CHECK(s.recompute_bytes == 0);
}

static void test_single_rank(void)
{
    /* One rank holds the whole model, tied head included once, the vocabulary padded
     * to 50,304 rows: 124,439,808 + 47·768 parameters. */
    pt_model g = gpt(12, 768, 12, 50257, 1024);
    pt_layout l = layout(1, 1, 1);
    l.n_micro = 8;
    pt_train t = train(PT_PREC_BF16);
    pt_memory s;
    pt_mem_stage(&g, &l, &t, 0, &s);
    CHECK_NEAR(s.params, 124475904, 1e-15);
    CHECK_INT(s.in_flight, 1); /* gradient accumulation keeps one micro-batch */
    CHECK_INT(s.layers, 12);
    CHECK(s.comm_bytes == 0);
    CHECK_NEAR(s.weights_bytes + s.grads_bytes + s.optimizer_bytes, 18.0 * 124475904, 1e-15);

    /* A tied model over p stages holds one extra copy of the embedding matrix. */
    l.pp = 4;
    double sum = 0;
    for (int st = 0; st < 4; st++) {
        pt_mem_stage(&g, &l, &t, st, &s);
        sum += s.params;
    }
    CHECK_NEAR(sum, 124475904.0 + 50304.0 * 768, 1e-15);
}

/* ---- Directions of the knobs -------------------------------------------------- */

static void test_directions(void)
{
    pt_model m = llama(32, 4096, 32, 8, 14336, 128256, 8192);
    pt_train t = train(PT_PREC_BF16);
    pt_layout l = layout(4, 4, 8);
    l.n_micro = 16;
    l.zero = 1;
    pt_memory base, s;
    pt_mem_stage(&m, &l, &t, 0, &base);

    pt_layout z = l;
    z.pp = 1;
    z.dp = 32;
    z.zero = 1;
    pt_memory z1, z3;
    pt_mem_stage(&m, &z, &t, 0, &z1);
    z.zero = 3;
    pt_mem_stage(&m, &z, &t, 0, &z3);
    CHECK(z3.weights_bytes < z1.weights_bytes);
    CHECK(z3.grads_bytes < z1.grads_bytes);
    CHECK(z3.comm_bytes > z1.comm_bytes); /* gathered layers */

    pt_layout sp = l;
    sp.sp = true;
    pt_mem_stage(&m, &sp, &t, 0, &s);
    CHECK(s.activations_bytes < base.activations_bytes);

    pt_layout r = l;
    r.recompute = PT_RECOMPUTE_SELECTIVE;
    pt_memory sel, full;
    pt_mem_stage(&m, &r, &t, 0, &sel);
    r.recompute = PT_RECOMPUTE_FULL;
    pt_mem_stage(&m, &r, &t, 0, &full);
    CHECK(sel.activations_bytes < base.activations_bytes);
    CHECK(full.activations_bytes < sel.activations_bytes);
    CHECK(full.total_bytes < sel.total_bytes && sel.total_bytes < base.total_bytes);

    /* Interleaving keeps more on stage 0: Korthikanti Sec. 4.2.3's factor
     * L·(1 + (p-1)/(p·vp)) layers against L for 1F1B. */
    pt_layout iv = l;
    iv.vp = 2;
    iv.schedule = PT_SCHED_INTERLEAVED;
    pt_mem_stage(&m, &iv, &t, 0, &s);
    CHECK(s.activations_bytes > base.activations_bytes);
    CHECK_INT(s.in_flight, 2 * 3 + 1 * 4 + 1); /* chunks of 32/(4·2) = 4 layers */
    CHECK_NEAR(s.activations_bytes / base.activations_bytes, 1.0 + 3.0 / 8.0, 1e-12);
    CHECK_INT(base.in_flight * base.layers / l.pp, 32 / 4); /* 1F1B: L layers' worth */
    CHECK_NEAR(base.activations_bytes,
               32 * pt_mem_layer_activations(&m, &l, pt_precision_of(PT_PREC_BF16)), 1e-12);

    /* All-forward-all-backward keeps every micro-batch. */
    pt_layout af = l;
    af.schedule = PT_SCHED_AFAB;
    pt_mem_stage(&m, &af, &t, 3, &s);
    CHECK_INT(s.in_flight, 16);

    /* Context parallelism c = 2 halves activations and the stage's send/receive
     * buffers (2·2·s·b·h = 134,217,728 to 67,108,864) and adds the K/V ring
     * buffers 2·(2·2·(s/2)·b·kvd/t) = 2·(2·2·4096·1024/4) = 8,388,608; the
     * gradient buckets stay (the same dp·cp = 8 shard). */
    pt_layout cp = l;
    cp.cp = 2;
    cp.dp = 4;
    pt_mem_stage(&m, &cp, &t, 0, &s);
    CHECK_NEAR(s.activations_bytes, base.activations_bytes / 2, 1e-12);
    CHECK_NEAR(s.comm_bytes, base.comm_bytes - 67108864.0 + 8388608.0, 1e-12);
}

/* ---- pt_mem_rank_max against every stage -------------------------------------- */

static void test_rank_max(void)
{
    /* 1680 layers divide by p·vp for every p in 2..8 and vp in 1..2. */
    pt_model ms[2] = {gpt(1680, 64, 4, 1000, 128), llama(1680, 64, 4, 2, 160, 5000, 256)};
    pt_train t = train(PT_PREC_BF16);
    int checked = 0;
    for (int i = 0; i < 2; i++) {
        for (int pp = 1; pp <= 8; pp++) {
            for (int sch = 0; sch < PT_SCHED_COUNT; sch++) {
                for (int64_t n = 1; n <= 3 * pp; n += pp > 1 ? pp - 1 : 1) {
                    for (int r = 0; r < PT_RECOMPUTE_COUNT; r++) {
                        pt_layout l = layout(2, pp, 2);
                        l.schedule = (pt_schedule)sch;
                        l.vp = sch == PT_SCHED_INTERLEAVED ? 2 : 1;
                        l.n_micro = n;
                        l.zero = 1;
                        l.recompute = (pt_recompute)r;
                        double want = 0;
                        int want_stage = -1;
                        for (int st = 0; st < pp; st++) {
                            pt_memory s;
                            pt_mem_stage(&ms[i], &l, &t, st, &s);
                            if (s.total_bytes > want) {
                                want = s.total_bytes;
                                want_stage = st;
                            }
                        }
                        pt_memory got;
                        pt_mem_rank_max(&ms[i], &l, &t, &got);
                        CHECK(got.total_bytes == want);
                        pt_memory at;
                        pt_mem_stage(&ms[i], &l, &t, want_stage, &at);
                        CHECK(at.total_bytes == got.total_bytes);
                        checked++;
                    }
                }
            }
        }
    }
    CHECK(checked > 300);
}

/* Uneven stages (first_layers, last_layers): each stage counts its own layers'
 * parameters and activations; interleaved chunks hold that rank's layers / vp. */
static void test_uneven_stages(void)
{
    /* test_stage_by_hand's model and layout with 1 layer on stage 0 and 3 on stage 1 */
    pt_model m = gpt(4, 64, 4, 1000, 128);
    pt_layout l = layout(2, 2, 2);
    l.zero = 1;
    l.mbs = 2;
    l.n_micro = 4;
    l.first_layers = 1;
    l.last_layers = 3;
    pt_train t = train(PT_PREC_BF16);
    pt_memory s;
    pt_mem_stage(&m, &l, &t, 0, &s);
    CHECK_INT(s.layers, 1);
    CHECK_NEAR(s.params, 91328 - 25184, 1e-15);         /* one layer fewer */
    CHECK_NEAR(s.activations_bytes, 2 * 688128, 1e-15); /* 2 micro-batches x 1 layer */
    pt_mem_stage(&m, &l, &t, 1, &s);
    CHECK_INT(s.layers, 3);
    CHECK_NEAR(s.params, 83264 + 25184, 1e-15);         /* one layer more */
    CHECK_NEAR(s.activations_bytes, 3 * 688128, 1e-15); /* 1 micro-batch x 3 layers */

    /* Interleaved, 6 layers: rank 0 holds 2 in chunks of 1, rank 1 holds 4 in chunks
     * of 2; each in-flight chunk carries its own rank's chunk. */
    m.layers = 6;
    l.vp = 2;
    l.schedule = PT_SCHED_INTERLEAVED;
    l.first_layers = 2;
    l.last_layers = 4;
    double act = pt_mem_layer_activations(&m, &l, pt_precision_of(PT_PREC_BF16));
    for (int st = 0; st < 2; st++) {
        pt_mem_stage(&m, &l, &t, st, &s);
        CHECK_INT(s.layers, st == 0 ? 2 : 4);
        CHECK_NEAR(s.activations_bytes, (double)s.in_flight * (st == 0 ? 1 : 2) * act, 1e-15);
    }

    /* pt_mem_rank_max still finds the largest stage: ends lighter or heavier than the
     * middle, every schedule and recomputation. */
    pt_model ms[2] = {gpt(0, 64, 4, 1000, 128), llama(0, 64, 4, 2, 160, 5000, 256)};
    int64_t ends[2][2] = {{20, 22}, {26, 28}}, mid = 24;
    int checked = 0;
    for (int i = 0; i < 2; i++) {
        for (int pp = 2; pp <= 8; pp++) {
            for (int e = 0; e < 2; e++) {
                for (int sch = 0; sch < PT_SCHED_COUNT; sch++) {
                    for (int r = 0; r < PT_RECOMPUTE_COUNT; r++) {
                        ms[i].layers = ends[e][0] + ends[e][1] + (pp - 2) * mid;
                        pt_layout u = layout(2, pp, 2);
                        u.schedule = (pt_schedule)sch;
                        u.vp = sch == PT_SCHED_INTERLEAVED ? 2 : 1;
                        u.n_micro = 2 * pp;
                        u.zero = 1;
                        u.recompute = (pt_recompute)r;
                        u.first_layers = ends[e][0];
                        u.last_layers = ends[e][1];
                        CHECK_INT(pt_layout_check(&ms[i], NULL, 2 * pp * 2, &u, NULL), 0);
                        double want = 0;
                        for (int st = 0; st < pp; st++) {
                            pt_mem_stage(&ms[i], &u, &t, st, &s);
                            CHECK_INT(s.layers, st == 0 ? ends[e][0]
                                                : st == pp - 1 ? ends[e][1] : mid);
                            want = s.total_bytes > want ? s.total_bytes : want;
                        }
                        pt_memory got;
                        pt_mem_rank_max(&ms[i], &u, &t, &got);
                        CHECK(got.total_bytes == want);
                        checked++;
                    }
                }
            }
        }
    }
    CHECK(checked > 200);
}


/* ---- ptrun's own stack: the buffers it allocates --------------------------------- */

/* The memory model for ptrun's stack sums planner/buffers.c's list, the one the
 * runtime carves (the equivalence suite compares each rank's allocation with it). */
static void test_ptrun_buffers(void)
{
    /* GPT, L = 2, h = 64, a = k = 4 (d = 16), f = 256, s = 128, b = 1, fp32: T = R =
     * 128. One layer keeps ln1, q, k, v, att, x2, ln2 (T·h·4 = 32,768 bytes each),
     * four means/rstds (T·4 = 512), lse (b·a·s·4 = 2,048), up and act (T·f·4 =
     * 131,072 each), no gate (GELU): 229,376 + 2,048 + 2,048 + 262,144 = 495,616. */
    pt_model m = gpt(2, 64, 4, 1000, 128);
    pt_layout l = layout(1, 1, 1);
    pt_buffers B;
    pt_buffers_of(&m, &l, 4, false, &B);
    CHECK(!B.overflow);
    CHECK_NEAR(pt_buffers_layer(&B), 495616, 1e-15);
    CHECK_INT(B.elems[PT_BUF_GATE], 0);
    CHECK_INT(B.elems[PT_BUF_DGATE], 0); /* GELU: no gate, nor its gradient */
    CHECK_INT(B.elems[PT_BUF_DDROP], 0);
    /* a slot of 2 layers: tokens and targets (512 each), 3 residual streams (32,768
     * each) and two layers' buffers; full recomputation keeps one set */
    CHECK_NEAR(pt_buffers_slot(&B, 2, false), 1024 + 3 * 32768 + 2 * 495616.0, 1e-15);
    CHECK_NEAR(pt_buffers_slot(&B, 2, true), 1024 + 3 * 32768 + 495616.0, 1e-15);
    /* every buffer starts on a 64-byte line: 3 fp32 values take 64 bytes */
    l.tp = 2;
    pt_buffers_of(&m, &l, 4, true, &B);
    CHECK_INT(B.elems[PT_BUF_CE], 3 * 128);
    CHECK_INT(B.elems[PT_BUF_DDROP], 128 * 64);
    CHECK_INT(B.elems[PT_BUF_Q], 128 * 2 * 16);
    CHECK_INT(pt_buf_bytes(&B, PT_BUF_LSE), 1 * 2 * 128 * 4);
    pt_model big = gpt(2, 1 << 20, 1 << 10, 1000, 1LL << 40);
    pt_buffers_of(&big, &l, 4, true, &B);
    CHECK(B.overflow);

    /* The stage total: ZeRO 0, one rank, 1F1B, n = 1: states 16 bytes per parameter,
     * one slot, one head, the scratch, nothing else. */
    pt_train t = train(PT_PREC_FP32);
    t.stack = *pt_stack_builtin(0);
    l = layout(1, 1, 1);
    pt_buffers_of(&m, &l, 4, m.dropout, &B);
    pt_memory s;
    pt_mem_stage(&m, &l, &t, 0, &s);
    double P = (double)pt_params_part(&m, 1, 1, 2, true, true);
    CHECK_NEAR(s.weights_bytes + s.grads_bytes + s.optimizer_bytes, 16 * P, 1e-15);
    CHECK_NEAR(s.activations_bytes, pt_buffers_slot(&B, 2, false), 1e-15);
    CHECK_NEAR(s.embed_head_bytes, pt_buffers_head(&B), 1e-15);
    CHECK_NEAR(s.recompute_bytes, pt_buffers_scratch(&B), 1e-15);
    CHECK(s.comm_bytes == 0);

    /* ZeRO 3 over 4 ranks: each layer (pt_params_layer elements) a segment of its own,
     * the embedding and the head pieces too, each padded to a multiple of 4; the
     * layers' weights are shards, the embedding's and head's whole; two weight and two
     * gradient windows, two reduced shares of a layer. */
    l = layout(1, 1, 4);
    l.zero = 3;
    pt_mem_stage(&m, &l, &t, 0, &s);
    int64_t lp = pt_params_layer(&m, 1), emb = pt_params_embedding(&m, 1),
            head = pt_params_head(&m, 1, 1);
    double shards = 2.0 * ((lp + 3) / 4) + (double)((emb + 3) / 4) + (double)((head + 3) / 4);
    double window = 4.0 * (double)((lp + 3) / 4);
    CHECK_NEAR(s.weights_bytes, 4.0 * ((double)(emb + head) + 2.0 * (double)((lp + 3) / 4)), 1e-15);
    CHECK_NEAR(s.grads_bytes, 4.0 * (shards + 2 * window + (double)(emb + head)), 1e-15);
    CHECK_NEAR(s.optimizer_bytes, 8.0 * shards, 1e-15);
    double staging = fmax(window, 4.0 * (double)((emb + 3) / 4));
    CHECK_NEAR(s.comm_bytes, 4.0 * (2 * window + staging + 2.0 * (double)((lp + 3) / 4)), 1e-15);
}

/* ptrun holds one activation slot per micro-batch chunk in flight, as many as the
 * schedule program's peak (pt_sched_peak_in_flight), and the head's buffers for the
 * last chunk's peak: the memory model's closed forms must give the same counts for
 * every schedule. */
static void test_slots_match_schedules(void)
{
    pt_model m = gpt(24, 64, 4, 1000, 128);
    pt_train t = train(PT_PREC_FP32);
    t.stack = *pt_stack_builtin(0);
    int checked = 0;
    for (int kind = 0; kind < 3; kind++)
        for (int pp = 1; pp <= 6; pp++)
            for (int vp = 1; vp <= 4; vp++)
                for (int n = 1; n <= 12; n++) {
                    pt_schedule sk = (pt_schedule)kind;
                    if ((vp > 1) != (sk == PT_SCHED_INTERLEAVED) || (vp > 1 && n % pp) ||
                        24 % (pp * vp))
                        continue;
                    pt_sched sch;
                    pt_err err;
                    if (pt_sched_build(sk, pp, vp, n, &sch, &err))
                        continue;
                    pt_layout l = layout(1, pp, 1);
                    l.vp = vp;
                    l.n_micro = n;
                    l.schedule = sk;
                    for (int r = 0; r < pp; r++) {
                        pt_memory s;
                        pt_mem_stage(&m, &l, &t, r, &s);
                        int slots = pt_sched_peak_in_flight(&sch, r);
                        if (s.in_flight != slots)
                            printf("  %s pp=%d vp=%d n=%d stage %d: model %lld, program %d\n",
                                   pt_schedule_name(sk), pp, vp, n, r, (long long)s.in_flight,
                                   slots);
                        CHECK_INT(s.in_flight, slots);
                        if (r == pp - 1) { /* the head: the last chunk's peak */
                            pt_buffers B;
                            pt_buffers_of(&m, &l, 4, m.dropout, &B);
                            int heads = pt_sched_peak_in_flight_chunk(&sch, r, vp - 1);
                            CHECK_NEAR(s.embed_head_bytes, heads * pt_buffers_head(&B), 1e-15);
                        }
                        checked++;
                    }
                    pt_sched_free(&sch);
                }
    CHECK(checked > 100);
}

/* Pipeline layouts: a stage of the embedding alone holds no layer, and the chunks of
 * one rank may differ, each in-flight chunk carrying its own layers; rank max asks
 * every stage when the middle ones differ. */
static void test_pipeline_layouts(void)
{
    pt_model m = gpt(6, 64, 4, 1000, 128);
    pt_train t = train(PT_PREC_BF16);
    pt_layout l = layout(2, 2, 2);
    l.zero = 1;
    l.mbs = 2;
    l.n_micro = 4;
    pt_err err;
    /* vs 0..3 = rank 0, rank 1, rank 0, rank 1: E | t*2 | t*4 | L */
    CHECK_INT(pt_pipe_parse("E|t*2|t*4|L", &l.pipe, &err), 0);
    l.vp = 2;
    l.schedule = PT_SCHED_INTERLEAVED;
    CHECK_INT(pt_layout_check(&m, NULL, 16, &l, NULL), 0);
    double act = pt_mem_layer_activations(&m, &l, pt_precision_of(PT_PREC_BF16));
    pt_memory s;
    pt_mem_stage(&m, &l, &t, 0, &s);
    CHECK_INT(s.layers, 4);
    /* stage 0 under interleaving: (p - 1)·2 + (vp - 1)·p + 1 = 5 chunks in flight, the
     * k-th in chunk (k / p) mod vp: chunk 0 (the embedding, no layer) twice, chunk 1
     * (4 layers) twice, chunk 0 once */
    CHECK_INT(s.in_flight, 5);
    CHECK_NEAR(s.activations_bytes, 8 * act, 1e-15);
    pt_mem_stage(&m, &l, &t, 1, &s);
    CHECK_INT(s.layers, 2);
    /* stage 1: 3 in flight: chunk 0 (2 layers) twice, then chunk 1 (the head only) */
    CHECK_INT(s.in_flight, 3);
    CHECK_NEAR(s.activations_bytes, 4 * act, 1e-15);

    /* middle stages that differ: pp=4, rank 2 heavier than rank 1 */
    m.layers = 7;
    pt_layout u = layout(2, 4, 2);
    u.mbs = 2;
    u.n_micro = 8;
    CHECK_INT(pt_pipe_parse("Et|t|t*4|tL", &u.pipe, &err), 0);
    CHECK_INT(pt_layout_check(&m, NULL, 32, &u, NULL), 0);
    CHECK(!pt_pipe_middle_alike(&m, &u));
    double want = 0;
    int at = -1;
    for (int st = 0; st < 4; st++) {
        pt_mem_stage(&m, &u, &t, st, &s);
        if (s.total_bytes > want) {
            want = s.total_bytes;
            at = st;
        }
    }
    CHECK_INT(at, 2);
    pt_memory got;
    pt_mem_rank_max(&m, &u, &t, &got);
    CHECK(got.total_bytes == want);
    CHECK_INT(got.stage, 2);
}

/* Context parallelism's buffers under Megatron-Core (Transformer Engine) by cp_comm, for
 * a llama-shaped model of 16 heads of 64 and 4 KV heads, s = 1024 over cp = 4 (sb = 256,
 * K width 256, bf16). p2p: the K and V blocks, current and next, 2·2·2·256·256 =
 * 524,288. all_gather: the whole sequence's K and V and their gradients, 4·2·1024·256 =
 * 2,097,152. a2a (degree 4): q, k, v received, 2·256·(16 + 2·4)·64 = 786,432.
 * a2a+p2p (groups of 2): those and the ring's blocks. The activations stay. */
static void test_cp_comm_buffers(void)
{
    pt_model m = llama(4, 1024, 16, 4, 2816, 32000, 1024);
    pt_train t = train(PT_PREC_BF16);
    pt_err err;
    CHECK_INT(pt_stack_get("megatron-core", &t.stack, &err), 0);
    pt_layout l = layout(1, 1, 1);
    l.cp = 4;
    pt_memory p2p, s;
    pt_mem_stage(&m, &l, &t, 0, &p2p);
    static const struct {
        pt_cp_comm kind;
        int cp_a2a;
        double extra;
    } cases[] = {{PT_CPC_ALLGATHER, 0, 2097152.0 - 524288},
                 {PT_CPC_A2A, 0, 786432.0 - 524288},
                 {PT_CPC_A2A_P2P, 2, 786432.0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        l.cp_comm = cases[i].kind;
        l.cp_a2a = cases[i].cp_a2a;
        pt_mem_stage(&m, &l, &t, 0, &s);
        CHECK_NEAR(s.comm_bytes - p2p.comm_bytes, cases[i].extra, 1e-12);
        CHECK(s.activations_bytes == p2p.activations_bytes);
    }
}

/* A mixture of experts under megatron-core: the experts' states sharded over edp, the
 * rest over dp·cp; the routed activations of each MoE layer by hand. */
static void test_moe_states_and_activations(void)
{
    pt_model m = llama(4, 1024, 16, 4, 2816, 32000, 1024);
    m.moe = (pt_moe){.experts = 16, .top_k = 4, .expert_ffn = 512, .every = 1,
                     .score = PT_ROUTER_SOFTMAX, .renorm = true};
    pt_train t = train(PT_PREC_BF16);
    pt_err err;
    CHECK_INT(pt_stack_get("megatron-core", &t.stack, &err), 0);
    pt_layout l = layout(2, 1, 4);
    l.sp = true;
    l.ep = 4;
    l.zero = 1;
    int64_t experts, params = pt_rank_params(&m, &l, 0, &experts);
    /* 4 layers of 16/4 experts of 3·512·1024 each */
    CHECK_INT(experts, 4 * 4 * 3 * 512 * 1024);
    CHECK_INT(params - experts, pt_params_embedding(&m, 2) + pt_params_head(&m, 2, 1) +
                                    4 * pt_params_moe_layer_dense(&m, 2));
    pt_memory s;
    pt_mem_stage(&m, &l, &t, 0, &s);
    pt_precision p = pt_precision_of(PT_PREC_BF16);
    double moments = (double)(p.master_bytes + p.moment_bytes);
    /* dp·cp = 4 for the rest; edp = 2·1·4/4 = 2 for the experts */
    CHECK_NEAR(s.optimizer_bytes, moments * ((double)(params - experts) / 4 + (double)experts / 2),
               1e-12);
    CHECK_NEAR(s.weights_bytes, p.weight_bytes * (double)params, 1e-12);
    /* one more expert-parallel degree halves the experts' share of the weights */
    pt_memory s8;
    l.ep = 8;
    pt_mem_stage(&m, &l, &t, 0, &s8);
    CHECK_NEAR(s.weights_bytes - s8.weights_bytes, p.weight_bytes * (double)experts / 2, 1e-12);
    /* imbalance 2: each layer's busiest rank takes twice the mean; over the stage's 4
     * layers, drawn independently, the busiest rank keeps 1 + (2 - 1)/sqrt(4) = 1.5
     * times the routed copies' activations */
    pt_memory a1, a2;
    l.ep = 4;
    pt_mem_stage(&m, &l, &t, 0, &a1);
    t.moe_imbalance = 2;
    pt_mem_stage(&m, &l, &t, 0, &a2);
    /* per layer and micro-batch: R·k copies (R = 1024/2) of h in, 2·fe out, fe, h out */
    double R = 512, rows = R * 4, per = 2 * rows * (1024 + 2 * 512 + 512 + 1024);
    CHECK_NEAR(a2.activations_bytes - a1.activations_bytes,
               0.5 * per * 4 * (double)a1.in_flight, 1e-9);
    /* ... while the dispatch's buffers, one layer's at a time, take the whole 2 */
    double sbk = 2.0 * (1024 / 2) * 4 * 1024;
    CHECK_NEAR(a2.comm_bytes - a1.comm_bytes, 2 * sbk, 1e-9);
    /* Megatron-Core's recompute modules, each layer and micro-batch in flight: moe_act
     * drops the activation's output (R·k rows of fe), layernorm the pre-MLP norm's
     * output (R rows of h), moe every routed activation (the router's fp32 scores of
     * R tokens over 16 experts and the copies' four tensors) and holds one layer's
     * while it rebuilds them */
    t.moe_imbalance = 1;
    pt_memory mods;
    double kept = 4 * (double)a1.in_flight, routed = 4 * R * 16 + per;
    l.recompute = PT_RECOMPUTE_SELECTIVE;
    l.recompute_modules = 1u << PT_RMOD_MOE_ACT;
    pt_mem_stage(&m, &l, &t, 0, &mods);
    CHECK_NEAR(a1.activations_bytes - mods.activations_bytes, kept * 2 * rows * 512, 1e-9);
    l.recompute_modules |= 1u << PT_RMOD_LAYERNORM;
    pt_mem_stage(&m, &l, &t, 0, &mods);
    CHECK_NEAR(a1.activations_bytes - mods.activations_bytes,
               kept * (2 * rows * 512 + 2 * R * 1024), 1e-9);
    CHECK(mods.recompute_bytes == a1.recompute_bytes);
    l.recompute_modules = 1u << PT_RMOD_MOE;
    pt_mem_stage(&m, &l, &t, 0, &mods);
    CHECK_NEAR(a1.activations_bytes - mods.activations_bytes, kept * routed, 1e-9);
    CHECK_NEAR(mods.recompute_bytes, routed, 1e-9);
    /* core_attn alone keeps what flash attention keeps anyway */
    l.recompute_modules = 1u << PT_RMOD_CORE_ATTN;
    pt_mem_stage(&m, &l, &t, 0, &mods);
    CHECK_NEAR(mods.activations_bytes, a1.activations_bytes, 1e-12);
}

int main(void)
{
    test_moe_states_and_activations();
    test_params_published();
    test_params_tp();
    test_precisions();
    test_zero_example();
    test_korthikanti();
    test_llama_activations();
    test_te_fp8_activations();
    test_stage_by_hand();
    test_single_rank();
    test_directions();
    test_rank_max();
    test_uneven_stages();
    test_pipeline_layouts();
    test_ptrun_buffers();
    test_slots_match_schedules();
    test_cp_comm_buffers();
    return pt_check_result();
}
