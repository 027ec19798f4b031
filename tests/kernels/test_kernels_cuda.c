/*
 * Tests of ptkernels' CUDA backend against the CPU backend, the reference: every op
 * of the table runs on the same inputs on both, and each output is compared with one
 * normalised error measure,
 *     max_i |gpu_i - cpu_i| / max(max_i |cpu_i|, 1e-6)
 * (infinities must match exactly, a NaN fails), under a tolerance stated per kind of
 * output (test_kernels_cuda.h). Inputs of [act] buffers are rounded to bf16 first and
 * the CPU gets the rounded values, so the two backends see identical inputs and differ
 * only in arithmetic (bf16 outputs, fp32 vs double sums, summation order).
 *
 * Every GPU run is repeated and must give bit-identical outputs (the determinism
 * contract of kernels.h: no atomics). Shapes include odd sizes that are no multiple of
 * a tile (7, 13, 771), sequence length 1, one head, GQA with one KV head, head
 * dimensions 64, 128 and 40, attention blocks that see no key, buffers at odd offsets
 * (cuBLASLt alignment), in-place forms, and the fallback GEMM (PT_KCUDA_NO_LT). The
 * fused ops (matmul with GELU, the residual add with the norm) are checked against the
 * CPU with cuBLASLt's epilogues on, off (PT_KCUDA_EPILOGUES) and declined, and the fused
 * norms against residual_forward + the norm forward on the GPU, bit for bit.
 * The device timers (event_record, event_elapsed) time a GEMM and order three. A call
 * cuDNN declines is said once per direction through the backend's notes (kn->note).
 *
 * The program is one binary over several files, by topic: this one holds main and the
 * tests of memory, conversions, the embedding, the norms (fused with the residual add
 * too), the pointwise ops, dropout, cross-entropy, the optimizer (adamw, sumsq,
 * adamw_multi), reserve, the device timers and the errors;
 * test_kernels_cuda_gemm.c the GEMMs and their epilogues; test_kernels_cuda_attention.c
 * RoPE and attention in every mode; test_kernels_cuda_fp8.c the FP8 casts, scales and
 * GEMMs; test_kernels_cuda_moe.c the mixture-of-experts ops (router, dispatch plan,
 * gather, combine, grouped linear layers); test_kernels_cuda_harness.c the harness they
 * share (random inputs, buffers, run_case, second backends), declared in
 * test_kernels_cuda.h.
 *
 * Without a CUDA device (or without CUDA in the build) the test prints why and exits
 * with 77, which ctest reports as skipped, never as passed. Built with PT_CUDA_EMU (the
 * emulation lane, kernels/emu/), the same checks run the CUDA code on the CPU; only the
 * timed GEMM is smaller there.
 * PT_TEST_VERBOSE=1 prints every measured error.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_kernels_cuda.h"
/* ---- Memory ------------------------------------------------------------------------------ */

static void test_memory(void)
{
    enum { N = 1000 };
    float host[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i;
    float *a = GPU->alloc(GPU, N * sizeof(float)), *b = GPU->alloc(GPU, N * sizeof(float));
    void *empty = GPU->alloc(GPU, 0);
    CHECK(a && b && empty);
    if (!a || !b || !empty)
        return;
    CHECK(((uintptr_t)a % 64) == 0);
    GPU->copy(GPU, a, host, sizeof host, PT_KCOPY_H2D);
    GPU->copy(GPU, b, a, sizeof host, PT_KCOPY_D2D);
    GPU->zero(GPU, a, 10 * sizeof(float));
    GPU->copy(GPU, back, b, sizeof back, PT_KCOPY_D2H);
    CHECK(memcmp(back, host, sizeof host) == 0);
    GPU->copy(GPU, back, a, sizeof back, PT_KCOPY_D2H);
    CHECK(back[0] == 0.0f && back[9] == 0.0f && back[10] == 10.0f && back[N - 1] == N - 1);
    float h2[N];
    GPU->copy(GPU, h2, host, sizeof host, PT_KCOPY_H2H);
    CHECK(memcmp(h2, host, sizeof host) == 0);
    /* an impossible allocation fails without poisoning the backend */
    CHECK(GPU->alloc(GPU, (size_t)1 << 60) == NULL);
    CHECK(GPU->sync(GPU) == 0);
    GPU->free(GPU, a);
    GPU->free(GPU, b);
    GPU->free(GPU, empty);
    CHECK(GPU->sync(GPU) == 0);
}

/* ---- Conversions -------------------------------------------------------------------------- */

typedef struct { int64_t n; } n_arg;

static void op_f32_to_bf16(pt_kernels *kn, void **b, const void *arg)
{
    kn->f32_to_bf16(kn, b[1], CF(b[0]), ((const n_arg *)arg)->n);
}

static void op_bf16_to_f32(pt_kernels *kn, void **b, const void *arg)
{
    kn->bf16_to_f32(kn, F(b[1]), b[0], ((const n_arg *)arg)->n);
}

static void test_convert(void)
{
    /* ties, specials, subnormals, NaN with a payload, and random values */
    enum { N = 64 };
    float x[N];
    uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u, 0x80000000u,
                           0x00000001u, 0x7fc00001u, 0xffa00000u, 0x7f7fffffu, 0x00800000u};
    int ns = (int)(sizeof specials / sizeof specials[0]);
    for (int i = 0; i < N; i++) {
        if (i < ns)
            memcpy(&x[i], &specials[i], 4);
        else
            x[i] = (float)(urand() * 1000.0);
    }
    n_arg arg = {N};
    tbuf to[] = {{"src", F32, N, x, 0}, {"dst", BF16, N, NULL, EXACT}};
    run_case("f32_to_bf16", to, NB(to), op_f32_to_bf16, &arg);
    tbuf from[] = {{"src", BF16, N, x, 0}, {"dst", F32, N, NULL, EXACT}};
    run_case("bf16_to_f32", from, NB(from), op_bf16_to_f32, &arg);
}

static void op_add_f32(pt_kernels *kn, void **b, const void *arg)
{
    kn->add_f32(kn, F(b[1]), CF(b[0]), ((const n_arg *)arg)->n);
}

/* dst += src in fp32: each element one IEEE addition on both backends (an odd length
 * leaves a partial last block) */
static void test_add_f32(void)
{
    enum { N = 771 };
    float *src = frand(N, 10.0), *dst = frand(N, 10.0);
    n_arg arg = {N};
    tbuf add[] = {{"src", F32, N, src, 0}, {"dst", F32, N, dst, EXACT}};
    run_case("add_f32", add, NB(add), op_add_f32, &arg);
    free(src);
    free(dst);
}

/* ---- Embedding ------------------------------------------------------------------------------ */

typedef struct { int b, s, h, v0, vr, pos0, with_wpe; } emb_arg;

static void op_embed_fwd(pt_kernels *kn, void **b, const void *p)
{
    const emb_arg *a = p;
    kn->embed_forward(kn, F(b[0]), b[1], CF(b[2]), a->with_wpe ? CF(b[3]) : NULL, a->b, a->s,
                      a->h, a->v0, a->vr, a->pos0);
}

static void op_embed_bwd(pt_kernels *kn, void **b, const void *p)
{
    const emb_arg *a = p;
    kn->embed_backward(kn, F(b[0]), a->with_wpe ? F(b[1]) : NULL, CF(b[2]), b[3], a->b, a->s,
                       a->h, a->v0, a->vr, a->pos0);
}

static void test_embed_shape(int b, int s, int h, int v0, int vr, int pos0, int with_wpe,
                             int vocab)
{
    emb_arg a = {b, s, h, v0, vr, pos0, with_wpe};
    int64_t n = (int64_t)b * s;
    int32_t *tok = xmalloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) /* many repeats; some outside [v0, v0+vr) */
        tok[i] = (int32_t)((urand() + 1.0) * 0.5 * vocab) % vocab;
    float *wte = frand((int64_t)vr * h, 1), *wpe = frand((int64_t)(pos0 + s) * h, 1);
    float *dout = frand(n * h, 1), *dwte0 = frand((int64_t)vr * h, 1);
    float *dwpe0 = frand((int64_t)(pos0 + s) * h, 1);
    char what[96];
    snprintf(what, sizeof what, "embed b%d s%d h%d v0 %d vr %d%s", b, s, h, v0, vr,
             with_wpe ? " wpe" : "");
    tbuf fwd[] = {{"out", ACT, n * h, NULL, TOL_ELEM},
                  {"tokens", I32, n, tok, 0},
                  {"wte", ACT, (int64_t)vr * h, wte, 0},
                  {"wpe", ACT, (int64_t)(pos0 + s) * h, wpe, 0}};
    run_case(what, fwd, NB(fwd), op_embed_fwd, &a);
    tbuf bwd[] = {{"dwte", F32, (int64_t)vr * h, dwte0, TOL_F32},
                  {"dwpe", F32, (int64_t)(pos0 + s) * h, dwpe0, TOL_F32},
                  {"dout", ACT, n * h, dout, 0},
                  {"tokens", I32, n, tok, 0}};
    run_case(what, bwd, NB(bwd), op_embed_bwd, &a);
    free(tok);
    free(wte);
    free(wpe);
    free(dout);
    free(dwte0);
    free(dwpe0);
}

static void test_embed(void)
{
    test_embed_shape(2, 7, 13, 3, 10, 2, 1, 16);
    test_embed_shape(1, 1, 64, 0, 50, 0, 0, 50);
    /* 1200 positions over 37 tokens: a token repeats ~32 times (the list flushes) */
    test_embed_shape(4, 300, 96, 0, 37, 5, 1, 37);
    /* one token everywhere: 1000 repeats, collected in several rounds */
    test_embed_shape(2, 500, 40, 0, 1, 0, 1, 1);
    /* vocab-parallel slice: most tokens belong to other ranks */
    test_embed_shape(3, 50, 24, 40, 20, 3, 0, 100);
    /* runs of exactly two rounds of the dwte kernel's unrolled loads (32 repeats) */
    test_embed_shape(1, 32, 64, 0, 1, 0, 0, 1);
    /* more rows than the dwte kernel's blocks per column slice (4096), so each block
     * strides over entries; five long runs; h over two slices and a partial third */
    test_embed_shape(2, 2100, 130, 0, 5, 0, 1, 5);
    /* a run of one whole window (256 sorted entries: added straight into dwte), one
     * across two windows (two pieces, then their sums) */
    test_embed_shape(1, 256, 64, 0, 1, 0, 0, 1);
    test_embed_shape(1, 257, 64, 0, 1, 0, 0, 1);
    /* long runs of a vocab-parallel slice among other ranks' tokens: ~300 positions
     * each, so a window holds the last piece of one run and the first of the next */
    test_embed_shape(4, 600, 70, 2, 3, 0, 0, 8);
}

/* ---- Norms ------------------------------------------------------------------------------------ */

typedef struct { int64_t n; int h; } nh_arg;

static void op_ln_fwd(pt_kernels *kn, void **b, const void *p)
{
    const nh_arg *a = p;
    kn->layernorm_forward(kn, F(b[0]), F(b[1]), F(b[2]), CF(b[3]), CF(b[4]), CF(b[5]), a->n,
                          a->h, 1e-5f);
}

static void op_ln_bwd(pt_kernels *kn, void **b, const void *p)
{
    const nh_arg *a = p;
    kn->layernorm_backward(kn, F(b[0]), F(b[1]), F(b[2]), CF(b[3]), CF(b[4]), CF(b[5]),
                           CF(b[6]), CF(b[7]), a->n, a->h);
}

static void op_rms_fwd(pt_kernels *kn, void **b, const void *p)
{
    const nh_arg *a = p;
    kn->rmsnorm_forward(kn, F(b[0]), F(b[1]), CF(b[2]), CF(b[3]), a->n, a->h, 1e-5f);
}

static void op_rms_bwd(pt_kernels *kn, void **b, const void *p)
{
    const nh_arg *a = p;
    kn->rmsnorm_backward(kn, F(b[0]), F(b[1]), CF(b[2]), CF(b[3]), CF(b[4]), CF(b[5]), a->n,
                         a->h);
}

static void test_norm_shape(int64_t n, int h)
{
    nh_arg a = {n, h};
    float *x = frand(n * h, 2), *w = frand(h, 1), *bias = frand(h, 1), *dout = frand(n * h, 1);
    float *dinp0 = frand(n * h, 1), *dw0 = frand(h, 1), *db0 = frand(h, 1);
    for (int64_t i = 0; i < n * h; i++) /* an offset, so that the mean matters */
        x[i] += 0.5f;
    /* statistics for the backward: the CPU's, from the bf16-rounded input */
    float *xr = xmalloc((size_t)(n * h) * sizeof(float)), *wr = xmalloc((size_t)h * 4);
    float *br = xmalloc((size_t)h * 4), *tmp = xmalloc((size_t)(n * h) * 4);
    float *mean = xmalloc((size_t)n * 4), *rstd = xmalloc((size_t)n * 4);
    float *rrstd = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n * h; i++)
        xr[i] = bf16_round(x[i]);
    for (int i = 0; i < h; i++) {
        wr[i] = bf16_round(w[i]);
        br[i] = bf16_round(bias[i]);
    }
    CPU->layernorm_forward(CPU, tmp, mean, rstd, xr, wr, br, n, h, 1e-5f);
    CPU->rmsnorm_forward(CPU, tmp, rrstd, xr, wr, n, h, 1e-5f);
    char what[64];
    snprintf(what, sizeof what, "layernorm n%lld h%d", (long long)n, h);
    tbuf lf[] = {{"out", ACT, n * h, NULL, TOL_ELEM}, {"mean", F32, n, NULL, TOL_F32},
                 {"rstd", F32, n, NULL, TOL_F32},     {"inp", ACT, n * h, x, 0},
                 {"w", ACT, h, w, 0},                 {"bias", ACT, h, bias, 0}};
    run_case(what, lf, NB(lf), op_ln_fwd, &a);
    tbuf lb[] = {{"dinp", ACT, n * h, dinp0, TOL_ELEM}, {"dw", F32, h, dw0, TOL_F32},
                 {"dbias", F32, h, db0, TOL_F32},       {"dout", ACT, n * h, dout, 0},
                 {"inp", ACT, n * h, x, 0},             {"w", ACT, h, w, 0},
                 {"mean", F32, n, mean, 0},             {"rstd", F32, n, rstd, 0}};
    run_case(what, lb, NB(lb), op_ln_bwd, &a);
    snprintf(what, sizeof what, "rmsnorm n%lld h%d", (long long)n, h);
    tbuf rf[] = {{"out", ACT, n * h, NULL, TOL_ELEM}, {"rstd", F32, n, NULL, TOL_F32},
                 {"inp", ACT, n * h, x, 0},           {"w", ACT, h, w, 0}};
    run_case(what, rf, NB(rf), op_rms_fwd, &a);
    tbuf rb[] = {{"dinp", ACT, n * h, dinp0, TOL_ELEM}, {"dw", F32, h, dw0, TOL_F32},
                 {"dout", ACT, n * h, dout, 0},         {"inp", ACT, n * h, x, 0},
                 {"w", ACT, h, w, 0},                   {"rstd", F32, n, rrstd, 0}};
    run_case(what, rb, NB(rb), op_rms_bwd, &a);
    free(x); free(w); free(bias); free(dout); free(dinp0); free(dw0); free(db0);
    free(xr); free(wr); free(br); free(tmp); free(mean); free(rstd); free(rrstd);
}

/* The norm backward's vector path (h % 8 == 0, every buffer 16-byte aligned) against
 * its scalar path, bit for bit: the same inputs once at aligned addresses and once with
 * every bf16 buffer 2 bytes off (norm.cu promises the same bits either way). */
static void norm_vec_vs_scalar(int64_t n, int h, int rms)
{
    size_t nh = (size_t)n * h, cap = (nh + 8) * 2;
    float *x = frand((int64_t)nh, 2), *g = frand((int64_t)nh, 1), *d = frand((int64_t)nh, 1);
    float *w = frand(h, 1), *mean = frand(n, 1), *rstd = frand(n, 1);
    for (int64_t i = 0; i < n; i++)
        rstd[i] = 1.0f + fabsf(rstd[i]);
    uint16_t *hx = xmalloc(cap), *hg = xmalloc(cap), *hd = xmalloc(cap);
    uint16_t *hw = xmalloc(((size_t)h + 8) * 2);
    void *outs[2][3];
    for (int off = 0; off < 2; off++) {
        for (size_t i = 0; i < nh; i++) {
            hx[i + off] = pt_k_bf16_from_f32(x[i]);
            hg[i + off] = pt_k_bf16_from_f32(g[i]);
            hd[i + off] = pt_k_bf16_from_f32(d[i]);
        }
        for (int i = 0; i < h; i++)
            hw[i + off] = pt_k_bf16_from_f32(w[i]);
        uint16_t *dx = GPU->alloc(GPU, cap), *dg = GPU->alloc(GPU, cap);
        uint16_t *dd = GPU->alloc(GPU, cap), *dwt = GPU->alloc(GPU, ((size_t)h + 8) * 2);
        float *dm = GPU->alloc(GPU, (size_t)n * 4), *dr = GPU->alloc(GPU, (size_t)n * 4);
        float *gw = GPU->alloc(GPU, (size_t)h * 4), *gb = GPU->alloc(GPU, (size_t)h * 4);
        GPU->copy(GPU, dx, hx, cap, PT_KCOPY_H2D);
        GPU->copy(GPU, dg, hg, cap, PT_KCOPY_H2D);
        GPU->copy(GPU, dd, hd, cap, PT_KCOPY_H2D);
        GPU->copy(GPU, dwt, hw, ((size_t)h + 8) * 2, PT_KCOPY_H2D);
        GPU->copy(GPU, dm, mean, (size_t)n * 4, PT_KCOPY_H2D);
        GPU->copy(GPU, dr, rstd, (size_t)n * 4, PT_KCOPY_H2D);
        GPU->copy(GPU, gw, w, (size_t)h * 4, PT_KCOPY_H2D);
        GPU->copy(GPU, gb, w, (size_t)h * 4, PT_KCOPY_H2D);
        float *px = (float *)(dx + off), *pg = (float *)(dg + off), *pd = (float *)(dd + off);
        float *pw = (float *)(dwt + off);
        if (rms)
            GPU->rmsnorm_backward(GPU, pd, gw, pg, px, pw, dr, n, h);
        else
            GPU->layernorm_backward(GPU, pd, gw, gb, pg, px, pw, dm, dr, n, h);
        CHECK(GPU->sync(GPU) == 0);
        outs[off][0] = xmalloc(nh * 2);
        outs[off][1] = xmalloc((size_t)h * 4);
        outs[off][2] = xmalloc((size_t)h * 4);
        GPU->copy(GPU, hd, dd, cap, PT_KCOPY_D2H);
        memcpy(outs[off][0], hd + off, nh * 2);
        GPU->copy(GPU, outs[off][1], gw, (size_t)h * 4, PT_KCOPY_D2H);
        GPU->copy(GPU, outs[off][2], gb, (size_t)h * 4, PT_KCOPY_D2H);
        void *bufs[] = {dx, dg, dd, dwt, dm, dr, gw, gb};
        for (int i = 0; i < 8; i++)
            GPU->free(GPU, bufs[i]);
    }
    int same = !memcmp(outs[0][0], outs[1][0], nh * 2) &&
                !memcmp(outs[0][1], outs[1][1], (size_t)h * 4) &&
                !memcmp(outs[0][2], outs[1][2], (size_t)h * 4);
    if (!same)
        fprintf(stderr, "%s backward n%lld h%d: the vector and scalar paths differ\n",
                rms ? "rmsnorm" : "layernorm", (long long)n, h);
    CHECK(same);
    for (int off = 0; off < 2; off++)
        for (int i = 0; i < 3; i++)
            free(outs[off][i]);
    free(x); free(g); free(d); free(w); free(mean); free(rstd);
    free(hx); free(hg); free(hd); free(hw);
}

static void test_norms(void)
{
    test_norm_shape(37, 771);
    test_norm_shape(1, 8);
    test_norm_shape(300, 64);   /* several row chunks in the dw reduction */
    test_norm_shape(20000, 16); /* chunks of more than 64 rows */
    /* the fused backward (norm.cu): GPT-2 1.5B's width over 47 row chunks, two groups a
     * block; the scalar path over 201 column chunks; two chunks a thread (K = 2) with
     * 288 and 512 threads; past its widest row (h > 8192), the two-kernel backward; a
     * last group of rows partly filled */
    test_norm_shape(3000, 1600);
    test_norm_shape(130, 1601);
    test_norm_shape(67, 4104);
    test_norm_shape(70, 8192);
    test_norm_shape(5, 8200);
    test_norm_shape(129, 24);
    for (int rms = 0; rms < 2; rms++) {
        norm_vec_vs_scalar(300, 64, rms);
        norm_vec_vs_scalar(130, 1600, rms);
        norm_vec_vs_scalar(7, 8192, rms);
    }
}

/* ---- The residual add fused with the norm forward ----------------------------------------- */

/* in_place: 0 res is its own buffer, 1 res = inp1, 2 res = inp2 (res's buffer holds that
 * input's values); off2 shifts inp2 by that many elements (a misaligned view) */
typedef struct { int64_t n; int h, rms, in_place, off2; } resnorm_arg;

/* buffers: res, out, mean, rstd, inp1, inp2 (n·h + off2), w, bias */
static void resnorm_inputs(pt_kernels *kn, void **b, const resnorm_arg *a, const float **inp1,
                           const float **inp2)
{
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    *inp1 = a->in_place == 1 ? CF(b[0]) : CF(b[4]);
    *inp2 = a->in_place == 2 ? CF(b[0]) : CF((char *)b[5] + a->off2 * eb);
}

static void op_resnorm(pt_kernels *kn, void **b, const void *p)
{
    const resnorm_arg *a = p;
    const float *inp1, *inp2;
    resnorm_inputs(kn, b, a, &inp1, &inp2);
    if (a->rms)
        kn->residual_rmsnorm_forward(kn, F(b[0]), F(b[1]), F(b[3]), inp1, inp2, CF(b[6]), a->n,
                                     a->h, 1e-5f);
    else
        kn->residual_layernorm_forward(kn, F(b[0]), F(b[1]), F(b[2]), F(b[3]), inp1, inp2,
                                       CF(b[6]), CF(b[7]), a->n, a->h, 1e-5f);
}

/* the unfused ops: residual_forward into res, then the norm forward of res */
static void op_res_then_norm(pt_kernels *kn, void **b, const void *p)
{
    const resnorm_arg *a = p;
    const float *inp1, *inp2;
    resnorm_inputs(kn, b, a, &inp1, &inp2);
    kn->residual_forward(kn, F(b[0]), inp1, inp2, a->n * a->h);
    if (a->rms)
        kn->rmsnorm_forward(kn, F(b[1]), F(b[3]), CF(b[0]), CF(b[6]), a->n, a->h, 1e-5f);
    else
        kn->layernorm_forward(kn, F(b[1]), F(b[2]), F(b[3]), CF(b[0]), CF(b[6]), CF(b[7]), a->n,
                              a->h, 1e-5f);
}

/* residual_*norm_forward against the CPU, and on the GPU against residual_forward followed
 * by the norm forward, bit for bit (kernels.h's contract). The GPU rounds res to bf16
 * before the norm reads it, where the CPU's res stays fp32, so the statistics differ by
 * a bf16 rounding of their inputs: TOL_ELEM, not TOL_F32. */
static void test_resnorm_shape(int64_t n, int h, int rms, int in_place, int off2)
{
    resnorm_arg a = {n, h, rms, in_place, off2};
    int64_t nh = n * h;
    float *x1 = frand(nh, 2), *x2 = frand(nh + off2, 2), *w = frand(h, 1), *bias = frand(h, 1);
    float *junk = frand(nh, 100), *stat = frand(n, 100); /* outputs must be overwritten */
    for (int64_t i = 0; i < nh; i++) /* an offset, so that the mean matters */
        x1[i] += 0.5f;
    const float *res0 = in_place == 1 ? x1 : in_place == 2 ? x2 + off2 : junk;
    char what[96];
    snprintf(what, sizeof what, "residual_%s n%lld h%d%s%s", rms ? "rmsnorm" : "layernorm",
             (long long)n, h, in_place == 1 ? " res=inp1" : in_place == 2 ? " res=inp2" : "",
             off2 ? " inp2 misaligned" : "");
    tbuf bufs[] = {{"res", ACT, nh, res0, TOL_ELEM},   {"out", ACT, nh, junk, TOL_ELEM},
                   {"mean", F32, n, stat, TOL_ELEM},   {"rstd", F32, n, stat, TOL_ELEM},
                   {"inp1", ACT, nh, x1, 0},           {"inp2", ACT, nh + off2, x2, 0},
                   {"w", ACT, h, w, 0},                {"bias", ACT, h, bias, 0}};
    run_case(what, bufs, NB(bufs), op_resnorm, &a);
    float *fused[MAXBUF] = {0}, *composed[MAXBUF] = {0};
    if (!run_on(GPU, bufs, NB(bufs), op_resnorm, &a, fused) &&
        !run_on(GPU, bufs, NB(bufs), op_res_then_norm, &a, composed)) {
        for (int i = 0; i < 4; i++) {
            if (memcmp(fused[i], composed[i], (size_t)bufs[i].n * sizeof(float))) {
                fprintf(stderr, "%s: %s: differs from residual_forward + the norm forward\n",
                        what, bufs[i].name);
                pt_check_failures++;
            } else if (verbose()) {
                printf("%-44s %-8s fused == unfused\n", what, bufs[i].name);
            }
        }
    }
    for (int i = 0; i < MAXBUF; i++) {
        free(fused[i]);
        free(composed[i]);
    }
    free(x1); free(x2); free(w); free(bias); free(junk); free(stat);
}

/* h a multiple of 8 with aligned buffers (16-byte loads) and not (element by element),
 * more chunks than lanes, in place on either input, and a misaligned inp2 that puts the
 * fused op on the scalar path while the plain norm of the aligned res takes the vector
 * one: the bits agree either way */
static void test_residual_norms(void)
{
    for (int rms = 0; rms < 2; rms++) {
        test_resnorm_shape(37, 771, rms, 0, 0);
        test_resnorm_shape(33, 64, rms, 0, 0);
        test_resnorm_shape(5, 1288, rms, 0, 0); /* 161 chunks: lanes take five or six */
        test_resnorm_shape(1, 8, rms, 0, 0);
        test_resnorm_shape(33, 64, rms, 1, 0);
        test_resnorm_shape(37, 771, rms, 2, 0);
        test_resnorm_shape(20, 264, rms, 2, 0);
        test_resnorm_shape(33, 64, rms, 0, 1);
        test_resnorm_shape(33, 64, rms, 1, 3);
    }
}

/* ---- Pointwise ----------------------------------------------------------------------------------------- */

static void op_gelu_fwd(pt_kernels *kn, void **b, const void *p)
{
    kn->gelu_forward(kn, F(b[0]), CF(b[1]), ((const n_arg *)p)->n);
}

static void op_gelu_bwd(pt_kernels *kn, void **b, const void *p)
{
    kn->gelu_backward(kn, F(b[0]), CF(b[1]), CF(b[2]), ((const n_arg *)p)->n);
}

static void op_swiglu_fwd(pt_kernels *kn, void **b, const void *p)
{
    /* n rows of f = 1: the op only sees n · f */
    kn->swiglu_forward(kn, F(b[0]), CF(b[1]), CF(b[2]), ((const n_arg *)p)->n, 1);
}

static void op_swiglu_bwd(pt_kernels *kn, void **b, const void *p)
{
    kn->swiglu_backward(kn, F(b[0]), F(b[1]), CF(b[2]), CF(b[3]), CF(b[4]),
                        ((const n_arg *)p)->n / 7, 7);
}

static void op_residual_fwd(pt_kernels *kn, void **b, const void *p)
{
    /* in place: out = inp1 */
    kn->residual_forward(kn, F(b[0]), CF(b[0]), CF(b[1]), ((const n_arg *)p)->n);
}

static void op_residual_bwd(pt_kernels *kn, void **b, const void *p)
{
    kn->residual_backward(kn, F(b[0]), F(b[1]), CF(b[2]), ((const n_arg *)p)->n);
}

static void test_pointwise(void)
{
    enum { N = 7 * 1001 };
    n_arg a = {N};
    float *x = frand(N, 4), *y = frand(N, 4), *g = frand(N, 1), *d0 = frand(N, 1);
    float *d1 = frand(N, 1);
    tbuf gf[] = {{"out", ACT, N, NULL, TOL_ELEM}, {"inp", ACT, N, x, 0}};
    run_case("gelu", gf, NB(gf), op_gelu_fwd, &a);
    tbuf gb[] = {{"dinp", ACT, N, d0, TOL_ELEM}, {"dout", ACT, N, g, 0}, {"inp", ACT, N, x, 0}};
    run_case("gelu", gb, NB(gb), op_gelu_bwd, &a);
    tbuf sf[] = {{"out", ACT, N, NULL, TOL_ELEM}, {"gate", ACT, N, x, 0}, {"up", ACT, N, y, 0}};
    run_case("swiglu", sf, NB(sf), op_swiglu_fwd, &a);
    tbuf sb[] = {{"dgate", ACT, N, d0, TOL_ELEM}, {"dup", ACT, N, d1, TOL_ELEM},
                 {"dout", ACT, N, g, 0},          {"gate", ACT, N, x, 0},
                 {"up", ACT, N, y, 0}};
    run_case("swiglu", sb, NB(sb), op_swiglu_bwd, &a);
    tbuf rf[] = {{"out=inp1", ACT, N, x, TOL_ELEM}, {"inp2", ACT, N, y, 0}};
    run_case("residual in place", rf, NB(rf), op_residual_fwd, &a);
    tbuf rb[] = {{"dinp1", ACT, N, d0, TOL_ELEM}, {"dinp2", ACT, N, d1, TOL_ELEM},
                 {"dout", ACT, N, g, 0}};
    run_case("residual", rb, NB(rb), op_residual_bwd, &a);
    free(x); free(y); free(g); free(d0); free(d1);
}

/* ---- Dropout --------------------------------------------------------------------------------------------- */

typedef struct { int64_t n, offset; float p; uint64_t seed, id; int in_place; } drop_arg;

static void op_drop_fwd(pt_kernels *kn, void **b, const void *p)
{
    const drop_arg *a = p;
    kn->dropout_forward(kn, F(b[0]), a->in_place ? CF(b[0]) : CF(b[1]), a->n, a->p, a->seed,
                        a->id, a->offset);
}

static void op_drop_bwd(pt_kernels *kn, void **b, const void *p)
{
    const drop_arg *a = p;
    kn->dropout_backward(kn, F(b[0]), CF(b[1]), a->n, a->p, a->seed, a->id, a->offset);
}

static void test_dropout(void)
{
    int64_t offsets[] = {0, 3, 4097};
    int64_t sizes[] = {1001, 1, 4096};
    for (int c = 0; c < 3; c++) {
        int64_t n = sizes[c];
        /* p = 0.5 on ones: kept elements are exactly 2, so the masks must match bit for
         * bit; p = 0.1 on random values within bf16 rounding */
        float *ones = fconst(n, 1.0f), *x = frand(n, 1), *d0 = frand(n, 1);
        char what[80];
        drop_arg half = {n, offsets[c], 0.5f, 0x1234567890abcdefull, 42, 0};
        snprintf(what, sizeof what, "dropout n%lld offset %lld p 0.5", (long long)n,
                 (long long)offsets[c]);
        tbuf hf[] = {{"out", ACT, n, NULL, EXACT}, {"inp", ACT, n, ones, 0}};
        run_case(what, hf, NB(hf), op_drop_fwd, &half);
        drop_arg tenth = {n, offsets[c], 0.1f, 7, 0x100000003ull, 1};
        snprintf(what, sizeof what, "dropout n%lld offset %lld p 0.1 in place", (long long)n,
                 (long long)offsets[c]);
        tbuf tf[] = {{"out=inp", ACT, n, x, TOL_ELEM}};
        run_case(what, tf, NB(tf), op_drop_fwd, &tenth);
        tbuf tb[] = {{"dinp", ACT, n, d0, TOL_ELEM}, {"dout", ACT, n, x, 0}};
        run_case(what, tb, NB(tb), op_drop_bwd, &tenth);
        free(ones);
        free(x);
        free(d0);
    }
}

/* ---- Cross-entropy -------------------------------------------------------------------------------------------- */

typedef struct { int64_t n; int v, vr, v0, with_dlogits, in_place; float dloss; } ce_arg;

static void op_ce(pt_kernels *kn, void **b, const void *p)
{
    const ce_arg *a = p;
    float *dl = !a->with_dlogits ? NULL : a->in_place ? F(b[2]) : F(b[1]);
    kn->crossentropy(kn, F(b[0]), dl, CF(b[2]), b[3], a->n, a->v, a->dloss);
}

static void test_ce_shape(int64_t n, int v, int with_dlogits, int in_place)
{
    ce_arg a = {n, v, v, 0, with_dlogits, in_place, 1.0f / (float)n};
    float *logits = frand(n * v, 4);
    int32_t *tgt = xmalloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++)
        tgt[i] = (int32_t)((urand() + 1.0) * 0.5 * v) % v;
    tgt[n / 2] = -1; /* a padded row */
    char what[80];
    snprintf(what, sizeof what, "crossentropy n%lld v%d%s%s", (long long)n, v,
             with_dlogits ? "" : " loss only", in_place ? " in place" : "");
    tbuf bufs[] = {{"losses", F32, n, NULL, TOL_F32},
                   {"dlogits", ACT, n * v, NULL, with_dlogits && !in_place ? TOL_ELEM : 0},
                   {"logits", ACT, n * v, logits, in_place ? TOL_ELEM : 0},
                   {"targets", I32, n, tgt, 0}};
    run_case(what, bufs, NB(bufs), op_ce, &a);
    free(logits);
    free(tgt);
}

static void op_ce_max(pt_kernels *kn, void **b, const void *p)
{
    const ce_arg *a = p;
    kn->ce_local_max(kn, F(b[0]), CF(b[1]), a->n, a->vr);
}

static void op_ce_sumexp(pt_kernels *kn, void **b, const void *p)
{
    const ce_arg *a = p;
    kn->ce_local_sumexp(kn, F(b[0]), CF(b[1]), CF(b[2]), a->n, a->vr);
}

static void op_ce_target(pt_kernels *kn, void **b, const void *p)
{
    const ce_arg *a = p;
    kn->ce_local_target(kn, F(b[0]), CF(b[1]), b[2], a->n, a->vr, a->v0);
}

static void op_ce_finalize(pt_kernels *kn, void **b, const void *p)
{
    const ce_arg *a = p;
    kn->ce_finalize(kn, F(b[0]), a->with_dlogits ? F(b[1]) : NULL, CF(b[2]), b[3], CF(b[4]),
                    CF(b[5]), CF(b[6]), a->n, a->vr, a->v0, a->dloss);
}

static void test_ce_parallel(void)
{
    enum { N = 6, VR = 777, V0 = 1000 };
    ce_arg a = {N, 4 * VR, VR, V0, 1, 0, 0.25f};
    float *logits = frand(N * VR, 4), *gmax = fconst(N, 4.5f), *gsum = frand(N, 1);
    float *gtgt = frand(N, 4);
    for (int i = 0; i < N; i++)
        gsum[i] = 300.0f + 100.0f * gsum[i];
    int32_t tgt[N] = {V0, V0 + VR - 1, V0 - 1, V0 + VR, -1, V0 + 123}; /* edges, out, pad */
    tbuf mx[] = {{"lmax", F32, N, NULL, TOL_F32}, {"logits", ACT, N * VR, logits, 0}};
    run_case("ce_local_max", mx, NB(mx), op_ce_max, &a);
    tbuf se[] = {{"lsum", F32, N, NULL, TOL_F32},
                 {"logits", ACT, N * VR, logits, 0},
                 {"gmax", F32, N, gmax, 0}};
    run_case("ce_local_sumexp", se, NB(se), op_ce_sumexp, &a);
    tbuf tg[] = {{"ltarget", F32, N, NULL, TOL_F32},
                 {"logits", ACT, N * VR, logits, 0},
                 {"targets", I32, N, tgt, 0}};
    run_case("ce_local_target", tg, NB(tg), op_ce_target, &a);
    tbuf fin[] = {{"losses", F32, N, NULL, TOL_F32},  {"dlogits", ACT, N * VR, NULL, TOL_ELEM},
                  {"logits", ACT, N * VR, logits, 0}, {"targets", I32, N, tgt, 0},
                  {"gmax", F32, N, gmax, 0},          {"gsum", F32, N, gsum, 0},
                  {"gtarget", F32, N, gtgt, 0}};
    run_case("ce_finalize", fin, NB(fin), op_ce_finalize, &a);
    free(logits);
    free(gmax);
    free(gsum);
    free(gtgt);
}

static void test_crossentropy(void)
{
    /* rows in shared memory (loss.cu's row kernel: 16-byte rows that fit), in place
     * too, GPT-2's padded vocabulary among them; the three-pass kernel for rows not a
     * multiple of 8 and for a row over the block's shared memory (128 K bf16 = 256 KB) */
    test_ce_shape(9, 1000, 1, 0);
    test_ce_shape(6, 1000, 1, 1);
    test_ce_shape(3, 50304, 1, 0);
    test_ce_shape(4, 50257, 1, 0);
    test_ce_shape(2, 131072, 1, 0);
    test_ce_shape(5, 333, 1, 1);
    test_ce_shape(5, 333, 0, 0);
    test_ce_parallel();
}

/* ---- Optimizer ------------------------------------------------------------------------------------------------- */

typedef struct { int64_t n; int step; } adam_arg;

static void op_adamw(pt_kernels *kn, void **b, const void *p)
{
    const adam_arg *a = p;
    kn->adamw(kn, F(b[0]), b[1], CF(b[2]), F(b[3]), F(b[4]), a->n, 3e-4f, 0.9f, 0.95f, 1e-8f,
              0.1f, a->step, 0.7f);
}

static void test_adamw(void)
{
    enum { N = 1001 };
    adam_arg a = {N, 3};
    float *p = frand(N, 1), *g = frand(N, 1), *m = frand(N, 0.1), *v = frand(N, 0.01);
    for (int i = 0; i < N; i++)
        v[i] = fabsf(v[i]);
    tbuf bufs[] = {{"params", F32, N, p, TOL_OPT}, {"bf16", BF16, N, NULL, TOL_ELEM},
                   {"grads", F32, N, g, 0},        {"m", F32, N, m, TOL_OPT},
                   {"v", F32, N, v, TOL_OPT}};
    run_case("adamw", bufs, NB(bufs), op_adamw, &a);
    free(p); free(g); free(m); free(v);
}

static void test_sumsq(void)
{
    int64_t sizes[] = {1, 1000, 100003, 3000000};
    for (int c = 0; c < 4; c++) {
        int64_t n = sizes[c];
        float *x = frand(n, 3);
        tbuf t = {"x", F32, n, x, 0};
        float *dev = upload(GPU, &t);
        double want = CPU->sumsq(CPU, x, n);
        double got = GPU->sumsq(GPU, dev, n), again = GPU->sumsq(GPU, dev, n);
        if (verbose())
            printf("sumsq n%-10lld rel err %.2e\n", (long long)n, fabs(got - want) / want);
        CHECK_NEAR(got, want, 1e-9);
        CHECK(memcmp(&got, &again, sizeof got) == 0);
        if (n > 1) { /* x + 1 is not 16-byte aligned: the one-by-one loads */
            double want1 = CPU->sumsq(CPU, x + 1, n - 1), got1 = GPU->sumsq(GPU, dev + 1, n - 1);
            CHECK_NEAR(got1, want1, 1e-9);
        }
        GPU->free(GPU, dev);
        free(x);
    }
    CHECK(GPU->sumsq(GPU, NULL, 0) == 0.0);
    CHECK(GPU->sync(GPU) == 0);
}

/* sumsq_acc: from 0, the double sumsq returns on the same backend to the bit, and the
 * CPU's within 1e-12 relative (both sum exact products in double, in other orders);
 * several calls add in call order; n = 0 adds nothing. */
static void test_sumsq_acc(void)
{
    int64_t sizes[] = {1, 1000, 100003, 3000000};
    double *acc = GPU->alloc(GPU, 2 * sizeof(double)); /* [0] one buffer, [1] all of them */
    CHECK(acc != NULL);
    if (!acc)
        return;
    GPU->zero(GPU, acc + 1, sizeof(double));
    double gpu_all = 0.0, cpu_all = 0.0, got, all;
    for (int c = 0; c < 4; c++) {
        int64_t n = sizes[c];
        float *x = frand(n, 3);
        tbuf t = {"x", F32, n, x, 0};
        float *dev = upload(GPU, &t);
        GPU->zero(GPU, acc, sizeof(double));
        GPU->sumsq_acc(GPU, dev, n, acc);
        GPU->sumsq_acc(GPU, dev, n, acc + 1);
        GPU->copy(GPU, &got, acc, sizeof got, PT_KCOPY_D2H);
        double want_gpu = GPU->sumsq(GPU, dev, n), want_cpu = CPU->sumsq(CPU, x, n);
        if (verbose())
            printf("sumsq_acc n%-10lld rel err %.2e\n", (long long)n,
                   fabs(got - want_cpu) / want_cpu);
        CHECK(memcmp(&got, &want_gpu, sizeof got) == 0);
        CHECK_NEAR(got, want_cpu, 1e-12);
        gpu_all += want_gpu;
        cpu_all += want_cpu;
        GPU->free(GPU, dev);
        free(x);
    }
    GPU->sumsq_acc(GPU, NULL, 0, acc + 1);
    GPU->copy(GPU, &all, acc + 1, sizeof all, PT_KCOPY_D2H);
    CHECK(memcmp(&all, &gpu_all, sizeof all) == 0);
    CHECK_NEAR(all, cpu_all, 1e-12);
    GPU->free(GPU, acc);
    CHECK(GPU->sync(GPU) == 0);
}

/* adamw_multi over MT tensors (more than one upload batch of descriptors; empty ones;
 * sizes at and around a block's chunk of 16384; with and without the bf16 copy; each
 * with its weight decay; some views one element into their buffers, which the CUDA
 * backend updates one element at a time where the others go four at a time), two
 * steps: bit-identical to adamw per tensor on the GPU with the host's clip factor, and
 * within TOL_OPT of the CPU's adamw_multi. */
enum { MT = 60 };

typedef struct {
    int64_t n;
    float wd;
    float *p, *g, *m, *v; /* host initial values */
} mt_host;

static void mt_make(mt_host *h, int i)
{
    static const int64_t base[] = {0, 1, 1001, 16384, 16385, 0, 100000, 3};
    h->n = i < 8 ? base[i] : 1 + (i * 37) % 500;
    h->wd = i % 3 == 0 ? 0.0f : 0.1f;
    h->p = frand(h->n, 1);
    h->g = frand(h->n, 1);
    h->m = frand(h->n, 0.1);
    h->v = frand(h->n, 0.01);
    for (int64_t j = 0; j < h->n; j++)
        h->v[j] = fabsf(h->v[j]);
}

/* Tensor i's views start one element into their buffers for some i (unaligned for
 * 16-byte accesses). */
static int mt_shift(int i)
{
    return i % 4 == 1 || i == 6;
}

/* n values of kind into a fresh buffer of n + shift, the view shift elements in */
static void *mt_put(pt_kernels *kn, const char *name, int kind, int64_t n, const float *init,
                    int shift)
{
    float *host = xmalloc((size_t)(n + shift + 1) * sizeof(float));
    for (int k = 0; k < shift; k++)
        host[k] = 0.5f;
    if (init)
        memcpy(host + shift, init, (size_t)n * sizeof(float));
    else
        memset(host + shift, 0, (size_t)n * sizeof(float));
    tbuf t = {name, kind, n + shift, host, 0};
    char *dev = upload(kn, &t);
    free(host);
    return dev ? dev + (size_t)shift * elem_bytes(kn, kind) : NULL;
}

static void mt_upload(pt_kernels *kn, const mt_host *h, int with_bf16, int shift,
                      pt_k_adamw_tensor *t)
{
    t->params = mt_put(kn, "p", F32, h->n, h->p, shift);
    t->grads = mt_put(kn, "g", F32, h->n, h->g, shift);
    t->m = mt_put(kn, "m", F32, h->n, h->m, shift);
    t->v = mt_put(kn, "v", F32, h->n, h->v, shift);
    t->params_bf16 = with_bf16 ? mt_put(kn, "bf16", BF16, h->n, NULL, shift) : NULL;
    t->n = h->n;
    t->weight_decay = h->wd;
}

static void mt_release(pt_kernels *kn, pt_k_adamw_tensor *t, int shift)
{
    size_t f = (size_t)shift * elem_bytes(kn, F32), b = (size_t)shift * elem_bytes(kn, BF16);
    kn->free(kn, (char *)t->params - f);
    kn->free(kn, (char *)t->grads - f);
    kn->free(kn, (char *)t->m - f);
    kn->free(kn, (char *)t->v - f);
    if (t->params_bf16)
        kn->free(kn, (char *)t->params_bf16 - b);
}

/* two steps on kn: adamw_multi over the list (in list order), or adamw per tensor with
 * grad_scale = pt_k_clip_scale(sqrt(sumsq / copies), max_norm) */
static void mt_run(pt_kernels *kn, pt_k_adamw_tensor *t, const int *order, double max_norm,
                   double copies, double sumsq, int multi)
{
    double *dsum = kn->alloc(kn, sizeof(double));
    CHECK(dsum != NULL);
    kn->copy(kn, dsum, &sumsq, sizeof sumsq, PT_KCOPY_H2D);
    pt_k_adamw_args a = {3e-4f, 0.9f, 0.95f, 1e-8f, 0, max_norm, max_norm > 0 ? dsum : NULL,
                         copies};
    pt_k_adamw_tensor list[MT];
    for (int i = 0; i < MT; i++)
        list[i] = t[order[i]];
    float scale = pt_k_clip_scale(sqrt(sumsq / copies), max_norm);
    for (int step = 1; step <= 2; step++) {
        a.step = step;
        if (multi)
            kn->adamw_multi(kn, list, MT, &a);
        else
            for (int i = 0; i < MT; i++)
                kn->adamw(kn, list[i].params, list[i].params_bf16, list[i].grads, list[i].m,
                          list[i].v, list[i].n, a.lr, a.beta1, a.beta2, a.eps,
                          list[i].weight_decay, step, scale);
    }
    int rc = kn->sync(kn);
    if (rc)
        fprintf(stderr, "%s backend failed: %s\n", kn->name, kn->err);
    CHECK(rc == 0);
    kn->free(kn, dsum);
}

/* compares one buffer of tensor i: bits against the per-tensor run, tol against the CPU */
static void mt_compare(const char *what, const char *name, int kind, int64_t n,
                       const void *multi, const void *single, const void *cpu, double tol)
{
    tbuf t = {name, kind, n, NULL, tol};
    float *a = download(GPU, &t, multi), *b = download(GPU, &t, single);
    float *c = download(CPU, &t, cpu);
    if (memcmp(a, b, (size_t)n * sizeof(float))) {
        fprintf(stderr, "%s: %s: adamw_multi differs from adamw's bits\n", what, name);
        pt_check_failures++;
    }
    report(what, name, nerr(a, c, n), tol);
    free(a);
    free(b);
    free(c);
}

static void mt_case(const char *what, double max_norm, double copies, double sumsq,
                    int reversed)
{
    mt_host h[MT];
    pt_k_adamw_tensor gm[MT], gs[MT], cm[MT];
    int order[MT];
    for (int i = 0; i < MT; i++) {
        mt_make(&h[i], i);
        mt_upload(GPU, &h[i], i % 2 == 0, mt_shift(i), &gm[i]);
        mt_upload(GPU, &h[i], i % 2 == 0, mt_shift(i), &gs[i]);
        mt_upload(CPU, &h[i], i % 2 == 0, mt_shift(i), &cm[i]);
        order[i] = reversed ? MT - 1 - i : i;
    }
    mt_run(GPU, gm, order, max_norm, copies, sumsq, 1);
    mt_run(GPU, gs, order, max_norm, copies, sumsq, 0);
    mt_run(CPU, cm, order, max_norm, copies, sumsq, 1);
    for (int i = 0; i < MT; i++) {
        int64_t n = h[i].n;
        char name[32];
        snprintf(name, sizeof name, "%d params", i);
        mt_compare(what, name, F32, n, gm[i].params, gs[i].params, cm[i].params, TOL_OPT);
        snprintf(name, sizeof name, "%d m", i);
        mt_compare(what, name, F32, n, gm[i].m, gs[i].m, cm[i].m, TOL_OPT);
        snprintf(name, sizeof name, "%d v", i);
        mt_compare(what, name, F32, n, gm[i].v, gs[i].v, cm[i].v, TOL_OPT);
        if (i % 2 == 0) {
            snprintf(name, sizeof name, "%d bf16", i);
            mt_compare(what, name, BF16, n, gm[i].params_bf16, gs[i].params_bf16,
                       cm[i].params_bf16, TOL_ELEM);
        }
        mt_release(GPU, &gm[i], mt_shift(i));
        mt_release(GPU, &gs[i], mt_shift(i));
        mt_release(CPU, &cm[i], mt_shift(i));
        free(h[i].p);
        free(h[i].g);
        free(h[i].m);
        free(h[i].v);
    }
    CHECK(GPU->sync(GPU) == 0);
}

static void test_adamw_multi(void)
{
    mt_case("adamw_multi clipped", 1.0, 4.0, 400.0, 0);    /* factor 1/(10 + 1e-6) */
    mt_case("adamw_multi below max_norm", 20.0, 2.0, 400.0, 1); /* a new list: uploaded */
    mt_case("adamw_multi max_norm 0", 0.0, 1.0, 0.0, 0);    /* sumsq NULL, not read */
    GPU->adamw_multi(GPU, NULL, 0, NULL);                   /* nothing to do */
    CHECK(GPU->sync(GPU) == 0);
}

/* ---- Reserve: no allocation inside a step ------------------------------------------------ */

static void *dzero(pt_kernels *kn, size_t bytes)
{
    void *p = kn->alloc(kn, bytes);
    CHECK(p != NULL);
    if (p)
        kn->zero(kn, p, bytes);
    return p;
}

/* matmul_backward's dbias alone (scratch: its column partials) */
static void reserve_dbias(pt_kernels *kn, int64_t n, int oc)
{
    size_t ab = pt_kdtype_bytes(kn->act_dtype);
    void *dout = dzero(kn, (size_t)n * oc * ab), *dbias = dzero(kn, (size_t)oc * 4);
    kn->matmul_backward(kn, NULL, NULL, dbias, dout, dout, dout, n, 1, oc);
    kn->sync(kn);
    kn->free(kn, dout);
    kn->free(kn, dbias);
}

/* matmul_backward's dw and dbias (scratch: BGRADB's oc fp32 column sums where the
 * epilogue runs, the column partials where it does not) */
static void reserve_dw_dbias(pt_kernels *kn, int64_t n, int ic, int oc)
{
    size_t ab = pt_kdtype_bytes(kn->act_dtype);
    void *dout = dzero(kn, (size_t)n * oc * ab), *inp = dzero(kn, (size_t)n * ic * ab);
    void *dw = dzero(kn, (size_t)oc * ic * 4), *dbias = dzero(kn, (size_t)oc * 4);
    kn->matmul_backward(kn, NULL, dw, dbias, dout, inp, dout, n, ic, oc);
    kn->sync(kn);
    void *bufs[] = {dout, inp, dw, dbias};
    for (int i = 0; i < 4; i++)
        kn->free(kn, bufs[i]);
}

/* LayerNorm's backward (scratch: 2 · chunks(n) · h partials) */
static void reserve_ln(pt_kernels *kn, int64_t n, int h)
{
    size_t ab = pt_kdtype_bytes(kn->act_dtype), nh = (size_t)n * h;
    void *dinp = dzero(kn, nh * ab), *dout = dzero(kn, nh * ab), *inp = dzero(kn, nh * ab);
    void *w = dzero(kn, (size_t)h * ab), *dw = dzero(kn, (size_t)h * 4);
    void *db = dzero(kn, (size_t)h * 4), *stat = dzero(kn, (size_t)n * 4);
    kn->layernorm_backward(kn, dinp, dw, db, dout, inp, w, stat, stat, n, h);
    kn->sync(kn);
    void *bufs[] = {dinp, dout, inp, w, dw, db, stat};
    for (int i = 0; i < 7; i++)
        kn->free(kn, bufs[i]);
}

/* Every op that takes scratch, at the reserved shapes, runs without error; a call
 * beyond them fails with a message naming reserve instead of allocating, for scratch
 * and for adamw_multi's table; reserve again grows; the chunk bound (chunks(n) jumps
 * at 16384 rows) covers n below rows. */
static void test_reserve(void)
{
    CHECK(GPU->scratch_bytes && GPU->reserve);
    pt_k_scratch_shape big = {.rows = 16385, .cols = 1100, .adamw_tensors = 10};
    /* 2 · 256 chunks · 1100 fp32, and ten 64-byte descriptors */
    CHECK(pt_k_scratch_bytes(GPU, &big) == 2 * 256 * 1100 * 4 + 10 * 64);
    /* with cuDNN, its attention backward's workspace on top: dP, b·a·sq·skv bf16 with
     * the lengths padded to 64 (1000 -> 1024), and a margin of 1/16 and 32 MiB; none
     * without cuDNN */
    pt_k_scratch_shape att = {.rows = 2000, .heads = 4, .kv_heads = 2, .head_dim = 64,
                              .attn_batch = 2, .attn_seq = 1000};
    pt_k_scratch_shape att0 = att;
    att0.attn_seq = 0;
    size_t dp = cudnn_version() ? (size_t)2 * 4 * 1024 * 1024 * 2 * 17 / 16 + (32 << 20) : 0;
    CHECK(pt_k_scratch_bytes(GPU, &att) - pt_k_scratch_bytes(GPU, &att0) == dp);
    /* where our kernels run attention (PT_KCUDA_ATTN=own), nothing of cuDNN's: the row
     * sums alone, b·sq·a fp32 (100 · 1000 rows of 4 heads, over the 1 MiB floor) */
    pt_kernels *own = own_backend("PT_KCUDA_ATTN", "own");
    if (own) {
        pt_k_scratch_shape rows = att;
        rows.rows = 100000;
        rows.attn_batch = 100;
        CHECK(pt_k_scratch_bytes(own, &rows) == (size_t)100000 * 4 * 4);
        pt_kernels_destroy(own);
    }

    pt_kernels *kn = own_backend(NULL, NULL);
    if (!kn)
        return;
    pt_k_scratch_shape sh = {.rows = 256, .cols = 300, .heads = 4, .vocab_rows = 1000,
                             .adamw_tensors = 3};
    CHECK(kn->reserve(kn, &sh) == 0);
    size_t ab = pt_kdtype_bytes(kn->act_dtype);
    reserve_ln(kn, 256, 300);
    reserve_dbias(kn, 256, 300);
    reserve_dbias(kn, 100, 7);
    reserve_dw_dbias(kn, 256, 8, 300);
    {   /* attention_backward: b·sq·a = 64 · 4 rows of D */
        size_t nq = (size_t)64 * 4 * 64;
        void *q = dzero(kn, nq * ab), *dq = dzero(kn, nq * ab), *dk = dzero(kn, nq * ab);
        void *dv = dzero(kn, nq * ab), *lse = dzero(kn, 64 * 4 * 4);
        kn->attention_backward(kn, dq, dk, dv, q, q, q, q, q, lse, 1, 64, 64, 4, 4, 64, 0, 0, 1,
                               1);
        kn->sync(kn);
        void *bufs[] = {q, dq, dk, dv, lse};
        for (int i = 0; i < 5; i++)
            kn->free(kn, bufs[i]);
    }
    {   /* embed_backward with dwte: the sort of 256 rows over 1000 tokens */
        void *dwte = dzero(kn, (size_t)1000 * 64 * 4), *dout = dzero(kn, (size_t)256 * 64 * ab);
        void *tok = dzero(kn, 256 * 4);
        kn->embed_backward(kn, dwte, NULL, dout, tok, 1, 256, 64, 0, 1000, 0);
        kn->sync(kn);
        kn->free(kn, dwte);
        kn->free(kn, dout);
        kn->free(kn, tok);
    }
    {   /* adamw_multi over the reserved three tensors */
        float *buf = dzero(kn, 4 * 12 * sizeof(float)); /* params, grads, m, v of 4 x 3 */
        pt_k_adamw_tensor t[4];
        for (int i = 0; i < 4; i++)
            t[i] = (pt_k_adamw_tensor){buf + 3 * i, NULL, buf + 12 + 3 * i, buf + 24 + 3 * i,
                                       buf + 36 + 3 * i, 3, 0.0f};
        pt_k_adamw_args a = {1e-3f, 0.9f, 0.95f, 1e-8f, 1, 0.0, NULL, 1.0};
        kn->adamw_multi(kn, t, 3, &a);
        CHECK(kn->sync(kn) == 0);
        kn->adamw_multi(kn, t, 4, &a); /* one more than reserved */
        CHECK(kn->sync(kn) == -1);
        CHECK_STR_HAS(kn->err, "adamw_multi: 4 tensors, reserve made room for 3");
        kn->free(kn, buf);
    }
    pt_kernels_destroy(kn);

    /* scratch beyond the reserve: an error, not a reallocation */
    if (!(kn = own_backend(NULL, NULL)))
        return;
    CHECK(kn->reserve(kn, &sh) == 0);
    CHECK(kn->sync(kn) == 0);
    reserve_dbias(kn, 16384, 1100); /* 256 · 1100 fp32 partials, above the 1 MiB minimum */
    CHECK(kn->sync(kn) == -1);
    CHECK_STR_HAS(kn->err, "reserve");
    pt_kernels_destroy(kn);

    /* reserve again, larger, between steps; n = 16384 needs 256 chunks although
     * 16385 rows take 253: the bound holds */
    if (!(kn = own_backend(NULL, NULL)))
        return;
    CHECK(kn->reserve(kn, &sh) == 0);
    pt_k_scratch_shape grown = {.rows = 16385, .cols = 1100};
    CHECK(kn->reserve(kn, &grown) == 0);
    reserve_ln(kn, 16384, 1100);
    reserve_dbias(kn, 16384, 1100);
    int rc = kn->sync(kn);
    if (rc)
        fprintf(stderr, "reserve: %s\n", kn->err);
    CHECK(rc == 0);
    pt_kernels_destroy(kn);
}

/* ---- Device timers ------------------------------------------------------------------ */

/* The timed GEMM's size: big enough for a GPU to take measurable time; the emulator's
 * cuBLASLt runs at CPU speed, where a small one takes long enough. */
#ifdef PT_CUDA_EMU
enum { TIMER_GEMM = 256 };
#else
enum { TIMER_GEMM = 2048 };
#endif

/* Monotonic seconds, as the runtime's trace clock. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Three GEMMs between pairs of events, put on the host clock as the runtime does
 * (runtime/devtime.c: an anchor event recorded on the idle stream, each op's start
 * from the anchor and its duration from its own pair): each takes a positive time, the
 * spans follow one another and lie between the anchor and the end of the wait; a
 * second round records the same events again, without new ones; a released event is
 * handed out again. The CPU backend has no timers. */
static void test_event_timer(void)
{
    CHECK(GPU->event_record && GPU->event_elapsed && GPU->event_release);
    CHECK(!CPU->event_record && !CPU->event_elapsed && !CPU->event_release);
    if (!GPU->event_record || !GPU->event_elapsed || !GPU->event_release)
        return;
    const int64_t m = TIMER_GEMM, n = TIMER_GEMM, k = TIMER_GEMM;
    size_t ab = pt_kdtype_bytes(GPU->act_dtype);
    void *a = GPU->alloc(GPU, (size_t)(m * k) * ab), *b = GPU->alloc(GPU, (size_t)(n * k) * ab);
    void *c = GPU->alloc(GPU, (size_t)(m * n) * ab);
    CHECK(a && b && c);
    if (!a || !b || !c)
        return;
    GPU->zero(GPU, a, (size_t)(m * k) * ab);
    GPU->zero(GPU, b, (size_t)(n * k) * ab);
    int ev[7] = {-1, -1, -1, -1, -1, -1, -1}, first[7];
    for (int round = 0; round < 2; round++) {
        CHECK(GPU->sync(GPU) == 0);
        double h0 = now_s();
        CHECK(GPU->event_record(GPU, &ev[0]) == 0);
        double anchor_s = 0.5 * (h0 + now_s());
        for (int i = 0; i < 3; i++) {
            CHECK(GPU->event_record(GPU, &ev[1 + 2 * i]) == 0);
            GPU->matmul_forward(GPU, c, a, b, NULL, m, (int)k, (int)n);
            CHECK(GPU->event_record(GPU, &ev[2 + 2 * i]) == 0);
        }
        CHECK(GPU->sync(GPU) == 0);
        double done_s = now_s(), prev_end = anchor_s;
        for (int i = 0; i < 3; i++) {
            double start_ms = -1, dur_ms = -1;
            CHECK(GPU->event_elapsed(GPU, ev[0], ev[1 + 2 * i], &start_ms) == 0);
            CHECK(GPU->event_elapsed(GPU, ev[1 + 2 * i], ev[2 + 2 * i], &dur_ms) == 0);
            double t0 = anchor_s + 1e-3 * start_ms, t1 = t0 + 1e-3 * dur_ms;
            if (verbose())
                printf("event timer: GEMM %d at +%.1f us for %.1f us\n", i, 1e6 * (t0 - anchor_s),
                       1e6 * (t1 - t0));
            CHECK(dur_ms > 0);        /* 2·TIMER_GEMM³ FLOPs: microseconds at least */
            CHECK(start_ms >= 0);
            CHECK(t0 >= prev_end - 1e-6); /* float milliseconds round by nanoseconds here */
            CHECK(t1 <= done_s + 1e-4);   /* the anchor's host time is off by microseconds */
            prev_end = t1;
        }
        if (round == 0)
            memcpy(first, ev, sizeof ev);
        else
            CHECK(memcmp(first, ev, sizeof ev) == 0);
    }
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < i; j++)
            CHECK(ev[i] != ev[j]);
    /* released events are handed out again */
    GPU->event_release(GPU, ev[3]);
    int again = -1;
    CHECK(GPU->event_record(GPU, &again) == 0);
    CHECK(again == ev[3]);
    for (int i = 0; i < 7; i++)
        GPU->event_release(GPU, ev[i]);
    GPU->free(GPU, a);
    GPU->free(GPU, b);
    GPU->free(GPU, c);
    CHECK(GPU->sync(GPU) == 0);
}

/* ---- Errors ---------------------------------------------------------------------------------------------------- */

static void test_errors(void)
{
    char err[256] = "";
    CHECK(pt_kernels_cuda(9999, err, sizeof err) == NULL);
    CHECK_STR_HAS(err, "9999");
    /* a head dimension the kernels do not take: recorded, reported by sync */
    pt_kernels *kn = own_backend(NULL, NULL);
    if (!kn)
        return;
    kn->attention_forward(kn, NULL, NULL, NULL, NULL, NULL, 1, 4, 4, 1, 1, 200, 0, 0, 1);
    CHECK(kn->sync(kn) == -1);
    CHECK_STR_HAS(kn->err, "head dim");
    pt_kernels_destroy(kn);
    /* a timing event the pool never handed out */
    if (!(kn = own_backend(NULL, NULL)))
        return;
    int ev = -1, bad = 1000000;
    double ms;
    CHECK(kn->event_record(kn, &ev) == 0 && ev >= 0);
    CHECK(kn->event_record(kn, &bad) == -1);
    CHECK_STR_HAS(kn->err, "timing event");
    CHECK(kn->event_elapsed(kn, ev, 1000000, &ms) == -1);
    CHECK(kn->sync(kn) == -1);
    pt_kernels_destroy(kn);
}

/* Whether group `name` runs: every group, or with PT_KTEST_GROUPS set (words apart by
 * spaces or commas) those whose names hold one of its words, so that a slow tool
 * (compute-sanitizer's racecheck, scripts/gpucheck.sh) can look at some kernels alone. */
static int group_wanted(const char *name)
{
    const char *want = getenv("PT_KTEST_GROUPS");
    if (!want || !*want)
        return 1;
    char words[256];
    snprintf(words, sizeof words, "%s", want);
    for (char *save = NULL, *w = strtok_r(words, " ,", &save); w; w = strtok_r(NULL, " ,", &save))
        if (strstr(name, w))
            return 1;
    return 0;
}

/* Runs one group of tests. A backend's error is sticky (kernels.h): after an op that
 * fails, every later call on the backend fails too, which would bury the groups after it
 * under its failure. So a group that leaves the backend failed counts as failed, and a
 * fresh backend serves the rest (none can where the failure took the CUDA context with
 * it: an illegal address, say). */
static void group(const char *name, void (*tests)(void))
{
    if (!group_wanted(name))
        return;
    tests();
    if (GPU->sync(GPU) == 0)
        return;
    fprintf(stderr, "%s: the backend failed (%s); a fresh one for the tests after it\n", name,
            GPU->err);
    pt_check_failures++;
    pt_kernels_destroy(GPU);
    char err[256] = "";
    GPU = MAIN_GPU = pt_kernels_cuda(0, err, sizeof err);
    if (!GPU) {
        fprintf(stderr, "%s: no fresh backend: %s\n", name, err);
        exit(1);
    }
}

#define GROUP(tests) group(#tests, tests)

int main(void)
{
    char err[256] = "";
    GPU = MAIN_GPU = pt_kernels_cuda(0, err, sizeof err);
    if (!GPU) {
        printf("SKIPPED: %s\n", err);
        return 77;
    }
    CPU = pt_kernels_cpu(1);
    CHECK(CPU != NULL);
    if (!CPU)
        return 1;
    if (getenv("PT_KTEST_GROUPS") && *getenv("PT_KTEST_GROUPS"))
        printf("only the groups named by PT_KTEST_GROUPS: %s\n", getenv("PT_KTEST_GROUPS"));
    CHECK(GPU->act_dtype == PT_KDTYPE_BF16);
    CHECK(strcmp(GPU->name, "cuda") == 0);
    GROUP(test_memory);
    GROUP(test_convert);
    GROUP(test_add_f32);
    GROUP(test_embed);
    GROUP(test_norms);
    GROUP(test_residual_norms);
    GROUP(test_matmuls);
    GROUP(test_compression);
    GROUP(test_mlp_gelu);
    GROUP(test_mm_shared);
    GROUP(test_epilogue_modes);
#ifdef PT_CUDA_EMU
    GROUP(test_epilogues_ran);
#endif
    GROUP(test_matmul_fallback);
    GROUP(test_fp8);
    GROUP(test_moe);
    GROUP(test_rope);
    GROUP(test_pointwise);
    GROUP(test_dropout);
    GROUP(test_attention);
    GROUP(test_attention_simple);
    GROUP(test_attention_own);
    GROUP(test_attention_cudnn);
    GROUP(test_attention_nondeterministic);
    GROUP(test_attention_mode_errors);
    GROUP(test_attention_notes);
    GROUP(test_crossentropy);
    GROUP(test_adamw);
    GROUP(test_sumsq);
    GROUP(test_sumsq_acc);
    GROUP(test_adamw_multi);
    GROUP(test_reserve);
    GROUP(test_event_timer);
    GROUP(test_errors);
    pt_kernels_destroy(GPU);
    pt_kernels_destroy(CPU);
    /* check.h counts failures per file: the other files' counts join this one's */
    pt_check_failures += failures_harness() + failures_gemm() + failures_attention() +
                         failures_fp8() + failures_moe();
    return pt_check_result();
}
