/*
 * test_kernels_cuda's GEMMs and their epilogues (the harness and the overview:
 * test_kernels_cuda_harness.c, test_kernels_cuda.c): matmul_forward, matmul_backward
 * and matmul_dgrad over odd shapes, no bias and buffers at odd offsets (cuBLASLt
 * alignment); gemm in every transpose with leading dimensions wider than the matrices;
 * PowerSGD's side stream, gemm_f32 and orthonormalize; the fused linear layers (with
 * the GELU, with the residual, dbias through BGRADB accumulating across calls) and
 * the shared-input ones (matmul_forward_shared, matmul_wgrad_shared), each with
 * cuBLASLt's epilogues on, off (PT_KCUDA_EPILOGUES) and declined, against the same
 * CPU reference; in the emulation build, that the fused paths and the batched
 * cuBLASLt calls really ran; and the same GEMMs on the fallback kernel
 * (PT_KCUDA_NO_LT).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_kernels_cuda.h"
#ifdef PT_CUDA_EMU
#include "pt_emu_test.h"
#endif
/* ---- Matmul and GEMM --------------------------------------------------------------------------- */

typedef struct { int64_t n; int ic, oc, with_bias, off; } mm_arg;

/* off > 0 shifts every pointer by off elements, as views into a larger buffer */
static void op_mm_fwd(pt_kernels *kn, void **b, const void *p)
{
    const mm_arg *a = p;
    int o = a->off;
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    char *out = b[0], *inp = b[1], *w = b[2], *bias = b[3];
    kn->matmul_forward(kn, F(out + o * eb), CF(inp + o * eb), CF(w + o * eb),
                       a->with_bias ? CF(bias + o * eb) : NULL, a->n, a->ic, a->oc);
}

static void op_mm_bwd(pt_kernels *kn, void **b, const void *p)
{
    const mm_arg *a = p;
    int o = a->off;
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    char *dinp = b[0], *dout = b[3], *inp = b[4], *w = b[5];
    kn->matmul_backward(kn, F(dinp + o * eb), F(b[1]) + o, a->with_bias ? F(b[2]) + o : NULL,
                        CF(dout + o * eb), CF(inp + o * eb), CF(w + o * eb), a->n, a->ic, a->oc);
}

/* buffers as op_mm_bwd's: dinp written (b[0]), dout (b[3]), w (b[5]) */
static void op_mm_dgrad(pt_kernels *kn, void **b, const void *p)
{
    const mm_arg *a = p;
    int o = a->off;
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    kn->matmul_dgrad(kn, F((char *)b[0] + o * eb), CF((char *)b[3] + o * eb),
                     CF((char *)b[5] + o * eb), a->n, a->ic, a->oc);
}

static void test_matmul_shape(int64_t n, int ic, int oc, int with_bias, int off)
{
    mm_arg a = {n, ic, oc, with_bias, off};
    int64_t ni = n * ic + off, no = n * oc + off, nw = (int64_t)oc * ic + off;
    float *inp = frand(ni, 1), *w = frand(nw, 1), *bias = frand(oc + off, 1);
    float *dout = frand(no, 1), *dinp0 = frand(ni, 1), *dw0 = frand(nw, 1);
    float *db0 = frand(oc + off, 1);
    char what[80];
    snprintf(what, sizeof what, "matmul n%lld ic%d oc%d%s%s", (long long)n, ic, oc,
             with_bias ? " bias" : "", off ? " odd-offset" : "");
    tbuf fwd[] = {{"out", ACT, no, NULL, TOL_GEMM},
                  {"inp", ACT, ni, inp, 0},
                  {"w", ACT, nw, w, 0},
                  {"bias", ACT, oc + off, bias, 0}};
    run_case(what, fwd, NB(fwd), op_mm_fwd, &a);
    tbuf bwd[] = {{"dinp", ACT, ni, dinp0, TOL_GEMM},
                  {"dw", F32, nw, dw0, TOL_F32_GEMM},
                  {"dbias", F32, oc + off, db0, TOL_F32},
                  {"dout", ACT, no, dout, 0},
                  {"inp", ACT, ni, inp, 0},
                  {"w", ACT, nw, w, 0}};
    run_case(what, bwd, NB(bwd), op_mm_bwd, &a);
    /* the written data gradient: dinp's old contents (large values) must not reach it */
    float *junk = frand(ni, 1000);
    tbuf dg[] = {{"dinp", ACT, ni, junk, TOL_GEMM},
                 {"dw", F32, nw, dw0, 0},
                 {"dbias", F32, oc + off, db0, 0},
                 {"dout", ACT, no, dout, 0},
                 {"inp", ACT, ni, inp, 0},
                 {"w", ACT, nw, w, 0}};
    run_case(what, dg, NB(dg), op_mm_dgrad, &a);
    free(junk);
    free(inp); free(w); free(bias); free(dout); free(dinp0); free(dw0); free(db0);
}

typedef struct { int ta, tb, m, n, kk, lda, ldb, ldc; float alpha, beta; } gemm_arg;

static void op_gemm(pt_kernels *kn, void **b, const void *p)
{
    const gemm_arg *g = p;
    kn->gemm(kn, g->ta, g->tb, g->m, g->n, g->kk, g->alpha, CF(b[1]), g->lda, CF(b[2]), g->ldb,
             g->beta, F(b[0]), g->ldc);
}

/* A gemm case: random a, b and c for g's shapes and leading dimensions, c compared
 * (element type dt, tolerance tol) after op */
static void gemm_case(const char *kind, int dt, double tol, op_fn op, const gemm_arg *g)
{
    int ar = g->ta ? g->kk : g->m, br = g->tb ? g->n : g->kk;
    float *a = frand((int64_t)ar * g->lda, 1), *b = frand((int64_t)br * g->ldb, 1);
    float *c = frand((int64_t)g->m * g->ldc, 1);
    char what[64];
    snprintf(what, sizeof what, "%s %c%c m%d n%d k%d", kind, g->ta ? 'T' : 'N',
             g->tb ? 'T' : 'N', g->m, g->n, g->kk);
    tbuf bufs[] = {{"c", dt, (int64_t)g->m * g->ldc, c, tol},
                   {"a", dt, (int64_t)ar * g->lda, a, 0},
                   {"b", dt, (int64_t)br * g->ldb, b, 0}};
    run_case(what, bufs, NB(bufs), op, g);
    free(a);
    free(b);
    free(c);
}

static void test_gemm(int ta, int tb, int m, int n, int kk)
{
    /* leading dimensions wider than the matrices, as views of a larger one */
    int ac = ta ? m : kk, bc = tb ? kk : n;
    gemm_arg g = {ta, tb, m, n, kk, ac + 3, bc + 5, n + 2, 0.5f, 0.75f};
    gemm_case("gemm", ACT, TOL_GEMM, op_gemm, &g);
}

/* gemm_f32 (PowerSGD's products): fp32 operands and result, fp32 products on both
 * backends, so only the order of the sums differs */
static void op_gemm_f32(pt_kernels *kn, void **b, const void *p)
{
    const gemm_arg *g = p;
    kn->gemm_f32(kn, g->ta, g->tb, g->m, g->n, g->kk, g->alpha, CF(b[1]), g->lda, CF(b[2]),
                 g->ldb, g->beta, F(b[0]), g->ldc);
}

static void test_gemm_f32(int ta, int tb, int m, int n, int kk, float beta)
{
    gemm_arg g = {ta, tb, m, n, kk, ta ? m : kk, tb ? kk : n, n, -0.5f, beta};
    gemm_case("gemm_f32", F32, 1e-5, op_gemm_f32, &g);
}

typedef struct { int64_t rows; int cols; } ortho_arg;

static void op_orthonormalize(pt_kernels *kn, void **b, const void *p)
{
    const ortho_arg *o = p;
    kn->orthonormalize(kn, F(b[0]), o->rows, o->cols, 1e-8f);
}

static void test_orthonormalize(int64_t rows, int cols)
{
    float *p = frand(rows * cols, 1);
    for (int64_t r = 0; r < rows && cols > 2; r++)
        p[r * cols + 1] = 0; /* a zero column stays zero */
    ortho_arg o = {rows, cols};
    char what[64];
    snprintf(what, sizeof what, "orthonormalize %lld x %d", (long long)rows, cols);
    tbuf bufs[] = {{"p", F32, rows * cols, p, 1e-5}};
    run_case(what, bufs, NB(bufs), op_orthonormalize, &o);
    free(p);
}

/* The side stream (PowerSGD's): work queued there follows what the main stream held
 * when it was selected; the main stream sees the side's after stream_join; GEMMs on
 * both streams (each its own workspace) give the same results. In the emulator every
 * launch has finished when it returns, so there this checks the results only; a
 * missing wait between the streams shows only on a GPU. */
static void test_side_stream(void)
{
    enum { N = 4099, M = 48, K = 40 };
    CHECK(GPU->stream_select != NULL && GPU->stream_join != NULL);
    if (!GPU->stream_select || !GPU->stream_join)
        return;
    float *x = frand(N, 1.0), *a = frand(M * K, 1.0), *b = frand(K * 4, 1.0);
    size_t bytes = N * sizeof(float);
    float *d_x = GPU->alloc(GPU, bytes), *d_y = GPU->alloc(GPU, bytes);
    float *d_a = GPU->alloc(GPU, M * K * sizeof(float)), *d_b = GPU->alloc(GPU, K * 4 * 4);
    float *d_c = GPU->alloc(GPU, M * 4 * 4), *d_c2 = GPU->alloc(GPU, M * 4 * 4);
    CHECK(d_x && d_y && d_a && d_b && d_c && d_c2);
    if (d_x && d_y && d_a && d_b && d_c && d_c2) {
        GPU->copy(GPU, d_x, x, bytes, PT_KCOPY_H2D);
        GPU->copy(GPU, d_a, a, M * K * sizeof(float), PT_KCOPY_H2D);
        GPU->copy(GPU, d_b, b, K * 4 * sizeof(float), PT_KCOPY_H2D);
        GPU->zero(GPU, d_y, bytes);
        GPU->add_f32(GPU, d_y, d_x, N);             /* main: y = x */
        GPU->stream_select(GPU, 1);
        GPU->add_f32(GPU, d_y, d_x, N);             /* side, after main's: y = 2x */
        GPU->gemm_f32(GPU, 0, 0, M, 4, K, 1.0f, d_a, K, d_b, 4, 0.0f, d_c, 4);
        GPU->stream_select(GPU, 0);
        GPU->gemm_f32(GPU, 0, 0, M, 4, K, 1.0f, d_a, K, d_b, 4, 0.0f, d_c2, 4);
        GPU->stream_join(GPU);
        GPU->add_f32(GPU, d_y, d_x, N);             /* main, after the side's: y = 3x */
        CHECK(GPU->sync(GPU) == 0);
        float *y = xmalloc(bytes), *c = xmalloc(M * 4 * 4), *c2 = xmalloc(M * 4 * 4);
        GPU->copy(GPU, y, d_y, bytes, PT_KCOPY_D2H);
        GPU->copy(GPU, c, d_c, M * 4 * 4, PT_KCOPY_D2H);
        GPU->copy(GPU, c2, d_c2, M * 4 * 4, PT_KCOPY_D2H);
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad += y[i] != x[i] + x[i] + x[i];
        CHECK(bad == 0);
        CHECK(memcmp(c, c2, M * 4 * 4) == 0);
        free(y);
        free(c);
        free(c2);
    }
    GPU->free(GPU, d_x);
    GPU->free(GPU, d_y);
    GPU->free(GPU, d_a);
    GPU->free(GPU, d_b);
    GPU->free(GPU, d_c);
    GPU->free(GPU, d_c2);
    free(x);
    free(a);
    free(b);
}

void test_compression(void)
{
    test_side_stream();
    /* PowerSGD's three products: P = M Q, Q = M^T P, M - P Q^T / W */
    test_gemm_f32(0, 0, 96, 4, 80, 0.0f);
    test_gemm_f32(1, 0, 80, 4, 96, 0.0f);
    test_gemm_f32(0, 1, 96, 80, 4, 1.0f);
    test_gemm_f32(0, 1, 33, 17, 3, 0.0f);
    /* Gram–Schmidt twice over the blocks: one block; several; more earlier columns
     * than a block has warps (40); more rows than the grid's cap takes in one turn
     * (PT_KCUDA_ORTHO_BLOCKS · 32) */
    test_orthonormalize(5, 1);
    test_orthonormalize(96, 4);
    test_orthonormalize(1000, 7);
    test_orthonormalize(300, 40);
    test_orthonormalize(9000, 3);
}

void test_matmuls(void)
{
    test_matmul_shape(7, 13, 5, 1, 0);
    test_matmul_shape(1, 1, 1, 1, 0);
    test_matmul_shape(65, 33, 17, 1, 0);
    test_matmul_shape(128, 256, 192, 1, 0);
    test_matmul_shape(200, 96, 80, 0, 0);
    test_matmul_shape(300, 64, 48, 1, 0); /* several row chunks in dbias */
    test_matmul_shape(64, 64, 64, 1, 1);  /* 2-byte-aligned views: alignment, bias path */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            test_gemm(ta, tb, 19, 23, 29);
    test_gemm(0, 1, 128, 64, 96);
}

/* ---- Linear layers fused with the GELU, and dbias through the epilogue ---------------------- */

/* buffers: out, pre, inp, w, bias (forward); dpre, dout, w, pre (backward); off > 0 shifts
 * every pointer by off elements */
static void op_mm_gelu_fwd(pt_kernels *kn, void **b, const void *p)
{
    const mm_arg *a = p;
    int o = a->off;
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    char *out = b[0], *pre = b[1], *inp = b[2], *w = b[3], *bias = b[4];
    kn->matmul_forward_gelu(kn, F(out + o * eb), F(pre + o * eb), CF(inp + o * eb),
                            CF(w + o * eb), a->with_bias ? CF(bias + o * eb) : NULL, a->n, a->ic,
                            a->oc);
}

static void op_mm_dgelu(pt_kernels *kn, void **b, const void *p)
{
    const mm_arg *a = p;
    int o = a->off;
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    char *dpre = b[0], *dout = b[1], *w = b[2], *pre = b[3];
    kn->matmul_backward_dgelu(kn, F(dpre + o * eb), CF(dout + o * eb), CF(w + o * eb),
                              CF(pre + o * eb), a->n, a->ic, a->oc);
}

/* buffers: out, inp, w, bias, res; off > 0 shifts every pointer by off elements */
static void op_mm_res(pt_kernels *kn, void **b, const void *p)
{
    const mm_arg *a = p;
    int o = a->off;
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    char *out = b[0], *inp = b[1], *w = b[2], *bias = b[3], *res = b[4];
    kn->matmul_forward_res(kn, F(out + o * eb), CF(inp + o * eb), CF(w + o * eb),
                           a->with_bias ? CF(bias + o * eb) : NULL, CF(res + o * eb), a->n,
                           a->ic, a->oc);
}

/* out = inp · w^T + bias + res (written over what it held) against the CPU's product
 * then add; the GPU's fused form rounds once where the CPU rounds the product first,
 * inside TOL_GEMM */
static void test_mm_res_shape(int64_t n, int ic, int oc, int with_bias, int off)
{
    mm_arg a = {n, ic, oc, with_bias, off};
    int64_t ni = n * ic + off, no = n * oc + off, nw = (int64_t)oc * ic + off;
    float *inp = frand(ni, 1), *w = frand(nw, 1), *bias = frand(oc + off, 1);
    float *res = frand(no, 2), *junk = frand(no, 100);
    char what[80];
    snprintf(what, sizeof what, "matmul+residual n%lld ic%d oc%d%s%s", (long long)n, ic, oc,
             with_bias ? " bias" : "", off ? " odd-offset" : "");
    tbuf bufs[] = {{"out", ACT, no, junk, TOL_GEMM},
                   {"inp", ACT, ni, inp, 0},
                   {"w", ACT, nw, w, 0},
                   {"bias", ACT, oc + off, bias, 0},
                   {"res", ACT, no, res, 0}};
    run_case(what, bufs, NB(bufs), op_mm_res, &a);
    free(inp); free(w); free(bias); free(res); free(junk);
}

/* out and pre of the forward, and dpre (written over what it held) of the backward,
 * against the CPU; the GPU's fused epilogue rounds pre once where the CPU's fp32 keeps
 * it, inside TOL_GEMM */
static void test_mlp_gelu_shape(int64_t n, int ic, int oc, int with_bias, int off)
{
    mm_arg a = {n, ic, oc, with_bias, off};
    int64_t ni = n * ic + off, no = n * oc + off, nw = (int64_t)oc * ic + off;
    float *inp = frand(ni, 1), *w = frand(nw, 1), *bias = frand(oc + off, 1);
    float *dout = frand(no, 1), *pre = frand(ni, 2), *junk = frand(ni > no ? ni : no, 100);
    char what[80];
    snprintf(what, sizeof what, "matmul+gelu n%lld ic%d oc%d%s%s", (long long)n, ic, oc,
             with_bias ? " bias" : "", off ? " odd-offset" : "");
    tbuf fwd[] = {{"out", ACT, no, junk, TOL_GEMM},
                  {"pre", ACT, no, junk, TOL_GEMM},
                  {"inp", ACT, ni, inp, 0},
                  {"w", ACT, nw, w, 0},
                  {"bias", ACT, oc + off, bias, 0}};
    run_case(what, fwd, NB(fwd), op_mm_gelu_fwd, &a);
    tbuf bwd[] = {{"dpre", ACT, ni, junk, TOL_GEMM},
                  {"dout", ACT, no, dout, 0},
                  {"w", ACT, nw, w, 0},
                  {"pre", ACT, ni, pre, 0}};
    run_case(what, bwd, NB(bwd), op_mm_dgelu, &a);
    free(inp); free(w); free(bias); free(dout); free(pre); free(junk);
}

/* matmul_backward twice into the same dw and dbias: both accumulate (+=), through
 * cuBLASLt's BGRADB epilogue where the backend fuses (it writes its sums to scratch) */
static void op_mm_bwd_twice(pt_kernels *kn, void **b, const void *p)
{
    op_mm_bwd(kn, b, p);
    op_mm_bwd(kn, b, p);
}

static void test_dbias_twice_shape(int64_t n, int ic, int oc)
{
    mm_arg a = {n, ic, oc, 1, 0};
    float *inp = frand(n * ic, 1), *w = frand((int64_t)oc * ic, 1), *dout = frand(n * oc, 1);
    float *dinp0 = frand(n * ic, 1), *dw0 = frand((int64_t)oc * ic, 1), *db0 = frand(oc, 1);
    char what[80];
    snprintf(what, sizeof what, "matmul_backward twice n%lld ic%d oc%d", (long long)n, ic, oc);
    tbuf bwd[] = {{"dinp", ACT, n * ic, dinp0, TOL_GEMM},
                  {"dw", F32, (int64_t)oc * ic, dw0, TOL_F32_GEMM},
                  {"dbias", F32, oc, db0, TOL_F32},
                  {"dout", ACT, n * oc, dout, 0},
                  {"inp", ACT, n * ic, inp, 0},
                  {"w", ACT, (int64_t)oc * ic, w, 0}};
    run_case(what, bwd, NB(bwd), op_mm_bwd_twice, &a);
    free(inp); free(w); free(dout); free(dinp0); free(dw0); free(db0);
}

/* shapes where cuBLASLt's epilogues apply (leading dimensions multiples of 8, aligned
 * buffers) and where the op is composed instead: oc or ic not a multiple of 8 (the aux
 * matrix's leading dimension), 2-byte-aligned views, no bias */
void test_mlp_gelu(void)
{
    test_mlp_gelu_shape(64, 48, 40, 1, 0);
    test_mlp_gelu_shape(33, 24, 16, 0, 0);
    test_mlp_gelu_shape(7, 13, 5, 1, 0);
    test_mlp_gelu_shape(65, 40, 17, 1, 0); /* forward composed, backward fused */
    test_mlp_gelu_shape(64, 64, 64, 1, 1);
    test_dbias_twice_shape(128, 64, 48);
    test_dbias_twice_shape(65, 33, 17);
    test_dbias_twice_shape(128, 48, 64); /* oc > ic: the column sum, epilogues or not */
    test_mm_res_shape(64, 48, 40, 1, 0);
    test_mm_res_shape(33, 24, 16, 0, 0);
    test_mm_res_shape(7, 13, 5, 1, 0);  /* oc not a multiple of 8 */
    test_mm_res_shape(64, 64, 64, 1, 1); /* 2-byte-aligned views */
}

/* A second backend with PT_KCUDA_EPILOGUES=mode (a backend reads it when it is created). */
static pt_kernels *epilogue_backend(const char *mode)
{
    return own_backend("PT_KCUDA_EPILOGUES", mode);
}

static void epilogue_cases(void)
{
    test_mlp_gelu();
    test_mm_shared();
    test_matmul_shape(65, 33, 17, 1, 0);
    test_matmul_shape(64, 64, 64, 1, 1);
}

/* every fused op with cuBLASLt's epilogues asked for (on) and never (off): the composed
 * forms (gelu kernels after the GEMM, the column sum for dbias) against the same CPU
 * reference and tolerances; a mode that does not exist fails backend creation */
void test_epilogue_modes(void)
{
    const char *modes[] = {"on", "off"};
    for (int i = 0; i < 2; i++) {
        pt_kernels *kn = epilogue_backend(modes[i]);
        if (kn)
            cases_on(kn, epilogue_cases);
    }
    check_bad_mode("PT_KCUDA_EPILOGUES", "sometimes");
}

#ifdef PT_CUDA_EMU
/* The emulator's cuBLASLt takes every epilogue asked here, so with epilogues on the
 * fused paths must run, which its results show: pre is the same bits either way (the
 * bias epilogue and GELU_AUX_BIAS round the same fp32 sum), out and dpre differ in some
 * element (the fused path takes the GELU, or its gradient, of the fp32 sum instead of
 * the rounded one), and BGRADB's column sums are the stand-in's, in order of the rows,
 * so dbias after two calls is (db0 + s) + s to the bit (written to scratch, then added:
 * the contract's +=). */
static int differ(const float *x, const float *y, int64_t n)
{
    return memcmp(x, y, (size_t)n * sizeof(float)) != 0;
}

void test_epilogues_ran(void)
{
    pt_kernels *on = epilogue_backend("on"), *off = epilogue_backend("off");
    if (!on || !off) {
        pt_kernels_destroy(on);
        pt_kernels_destroy(off);
        return;
    }
    enum { N = 64, IC = 48, OC = 40 };
    mm_arg a = {N, IC, OC, 1, 0};
    float *inp = frand(N * IC, 1), *w = frand(OC * IC, 1), *bias = frand(OC, 1);
    float *dout = frand(N * OC, 1), *pre = frand(N * IC, 2), *junk = frand(N * OC, 100);
    float *db0 = frand(OC, 1);
    float *x[MAXBUF] = {0}, *y[MAXBUF] = {0};
    tbuf fwd[] = {{"out", ACT, N * OC, junk, TOL_GEMM}, {"pre", ACT, N * OC, junk, TOL_GEMM},
                  {"inp", ACT, N * IC, inp, 0},         {"w", ACT, OC * IC, w, 0},
                  {"bias", ACT, OC, bias, 0}};
    if (!run_on(on, fwd, NB(fwd), op_mm_gelu_fwd, &a, x) &&
        !run_on(off, fwd, NB(fwd), op_mm_gelu_fwd, &a, y)) {
        CHECK(differ(x[0], y[0], N * OC));
        CHECK(!differ(x[1], y[1], N * OC));
    }
    for (int i = 0; i < MAXBUF; i++) {
        free(x[i]);
        free(y[i]);
        x[i] = y[i] = NULL;
    }
    float *res = frand(N * OC, 2);
    tbuf rb[] = {{"out", ACT, N * OC, junk, TOL_GEMM}, {"inp", ACT, N * IC, inp, 0},
                 {"w", ACT, OC * IC, w, 0},            {"bias", ACT, OC, bias, 0},
                 {"res", ACT, N * OC, res, 0}};
    if (!run_on(on, rb, NB(rb), op_mm_res, &a, x) && !run_on(off, rb, NB(rb), op_mm_res, &a, y))
        CHECK(differ(x[0], y[0], N * OC)); /* one rounding, not two */
    for (int i = 0; i < MAXBUF; i++) {
        free(x[i]);
        free(y[i]);
        x[i] = y[i] = NULL;
    }
    free(res);
    tbuf bwd[] = {{"dpre", ACT, N * IC, junk, TOL_GEMM}, {"dout", ACT, N * OC, dout, 0},
                  {"w", ACT, OC * IC, w, 0},             {"pre", ACT, N * IC, pre, 0}};
    if (!run_on(on, bwd, NB(bwd), op_mm_dgelu, &a, x) &&
        !run_on(off, bwd, NB(bwd), op_mm_dgelu, &a, y))
        CHECK(differ(x[0], y[0], N * IC));
    for (int i = 0; i < MAXBUF; i++) {
        free(x[i]);
        free(y[i]);
        x[i] = NULL;
    }
    tbuf mb[] = {{"dinp", ACT, N * IC, junk, TOL_GEMM},  {"dw", F32, OC * IC, junk, TOL_F32},
                 {"dbias", F32, OC, db0, TOL_F32},       {"dout", ACT, N * OC, dout, 0},
                 {"inp", ACT, N * IC, inp, 0},           {"w", ACT, OC * IC, w, 0}};
    if (!run_on(on, mb, NB(mb), op_mm_bwd_twice, &a, x)) {
        int bad = 0;
        for (int j = 0; j < OC; j++) {
            float col = 0.0f;
            for (int r = 0; r < N; r++)
                col += bf16_round(dout[r * OC + j]);
            float want = (db0[j] + col) + col;
            bad += memcmp(&x[2][j], &want, sizeof want) != 0;
        }
        CHECK(bad == 0);
    }
    for (int i = 0; i < MAXBUF; i++)
        free(x[i]);
    free(inp); free(w); free(bias); free(dout); free(pre); free(junk); free(db0);
    pt_kernels_destroy(on);
    pt_kernels_destroy(off);
}
#endif

/* ---- Linear layers of one input: matmul_forward_shared, matmul_wgrad_shared -------------- */

/* Three layers of one input and width. The weights and biases lie as the runtime's
 * parameters do, (w, b) after (w, b); outputs and output gradients end to end, the
 * weight and bias gradients likewise as (dw, db) pairs. With uneven the third of each
 * sits 8 elements further (16 bytes in bf16: still aligned, no longer at one step), so
 * the backend takes one call per layer. */
typedef struct { int64_t n; int ic, oc, with_bias, uneven; } sh_arg;

enum { SH = 3 };

static int64_t sh_at(const sh_arg *a, int64_t step, int i)
{
    return i * step + (a->uneven && i == SH - 1 ? 8 : 0);
}

/* buffers: out (SH of n·oc), inp, wb (SH of (oc, ic) weight then oc bias) */
static void op_mm_shared_fwd(pt_kernels *kn, void **b, const void *p)
{
    const sh_arg *a = p;
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    int64_t wb = (int64_t)a->oc * a->ic + a->oc, no = a->n * a->oc;
    float *out[SH];
    const float *w[SH], *bias[SH];
    for (int i = 0; i < SH; i++) {
        out[i] = F((char *)b[0] + sh_at(a, no, i) * eb);
        w[i] = CF((char *)b[2] + sh_at(a, wb, i) * eb);
        bias[i] = a->with_bias ? CF((char *)b[2] + (sh_at(a, wb, i) + wb - a->oc) * eb) : NULL;
    }
    kn->matmul_forward_shared(kn, SH, out, CF(b[1]), w, a->with_bias ? bias : NULL, a->n, a->ic,
                              a->oc);
}

/* buffers: dwb (SH of (oc, ic) fp32 then oc fp32), dout (SH of n·oc), inp */
static void op_mm_shared_wgrad(pt_kernels *kn, void **b, const void *p)
{
    const sh_arg *a = p;
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    int64_t wb = (int64_t)a->oc * a->ic + a->oc, no = a->n * a->oc;
    float *dw[SH], *db[SH];
    const float *dout[SH];
    for (int i = 0; i < SH; i++) {
        dw[i] = F(b[0]) + sh_at(a, wb, i);
        db[i] = a->with_bias ? dw[i] + wb - a->oc : NULL;
        dout[i] = CF((char *)b[1] + sh_at(a, no, i) * eb);
    }
    kn->matmul_wgrad_shared(kn, SH, dw, db, dout, CF(b[2]), a->n, a->ic, a->oc);
}

/* both ops against the CPU's calls one layer at a time; the weight and bias gradients
 * add to what they held */
static void test_mm_shared_shape(int64_t n, int ic, int oc, int with_bias, int uneven)
{
    sh_arg a = {n, ic, oc, with_bias, uneven};
    int64_t wb = SH * ((int64_t)oc * ic + oc) + 8, no = SH * n * oc + 8, ni = n * ic;
    float *inp = frand(ni, 1), *w = frand(wb, 1), *dout = frand(no, 1), *dw0 = frand(wb, 2);
    float *junk = frand(no, 100);
    char what[96];
    snprintf(what, sizeof what, "matmul shared x%d n%lld ic%d oc%d%s%s", SH, (long long)n, ic,
             oc, with_bias ? " bias" : "", uneven ? " uneven" : "");
    tbuf fwd[] = {{"out", ACT, no, junk, TOL_GEMM},
                  {"inp", ACT, ni, inp, 0},
                  {"wb", ACT, wb, w, 0}};
    run_case(what, fwd, NB(fwd), op_mm_shared_fwd, &a);
    tbuf bwd[] = {{"dwb", F32, wb, dw0, TOL_F32_GEMM},
                  {"dout", ACT, no, dout, 0},
                  {"inp", ACT, ni, inp, 0}};
    run_case(what, bwd, NB(bwd), op_mm_shared_wgrad, &a);
#ifdef PT_CUDA_EMU
    /* on the main backend (epilogues on: the emulated device is compute capability 9.0)
     * with the layers at one step, one batched cuBLASLt call each way; uneven, one call a
     * layer (the bias gradients ride BGRADB where oc <= ic, else the column-sum kernels,
     * so no call more) */
    if (GPU != MAIN_GPU) {
        free(inp); free(w); free(dout); free(dw0); free(junk);
        return;
    }
    float *x[MAXBUF] = {0};
    uint64_t before = pt_emu_lt_matmuls();
    if (!run_on(GPU, fwd, NB(fwd), op_mm_shared_fwd, &a, x))
        CHECK(pt_emu_lt_matmuls() - before == (uneven ? SH : 1));
    for (int i = 0; i < MAXBUF; i++) {
        free(x[i]);
        x[i] = NULL;
    }
    before = pt_emu_lt_matmuls();
    if (!run_on(GPU, bwd, NB(bwd), op_mm_shared_wgrad, &a, x))
        CHECK(pt_emu_lt_matmuls() - before == (uneven ? SH : 1));
    for (int i = 0; i < MAXBUF; i++)
        free(x[i]);
#endif
    free(inp); free(w); free(dout); free(dw0); free(junk);
}

/* shapes where the batch runs (the weights' step oc·(ic + 1) a multiple of 8 elements:
 * 16-byte aligned in bf16) with and without biases, BGRADB's oc <= ic and the column
 * sums' oc > ic; and the uneven layouts, one call a layer */
void test_mm_shared(void)
{
    test_mm_shared_shape(64, 48, 40, 1, 0);
    test_mm_shared_shape(33, 40, 48, 1, 0);
    test_mm_shared_shape(64, 48, 40, 0, 0);
    test_mm_shared_shape(64, 48, 40, 1, 1);
    test_mm_shared_shape(17, 24, 16, 0, 1);
}

static void matmul_fallback_cases(void)
{
    test_matmul_shape(7, 13, 5, 1, 0);
    test_matmul_shape(65, 33, 17, 1, 1);
    test_matmul_shape(128, 96, 80, 0, 0);
    test_mlp_gelu_shape(64, 48, 40, 1, 0); /* the epilogues declined: composed */
    test_mm_res_shape(64, 48, 40, 1, 0);
    test_dbias_twice_shape(65, 33, 17);
    test_mm_shared_shape(64, 48, 40, 1, 0); /* one call a layer */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            test_gemm(ta, tb, 19, 23, 29);
    test_gemm_f32(0, 1, 33, 17, 3, 1.0f); /* the fp32 fallback kernel */
}

/* the same GEMMs on the fallback kernel: a second backend with cuBLASLt switched off */
void test_matmul_fallback(void) { with_backend_env("PT_KCUDA_NO_LT", matmul_fallback_cases); }

int failures_gemm(void) { return pt_check_failures; }
