/*
 * The FP8 ops of test_kernels_cuda (fp8_amax, fp8_amax_scale, fp8_scale, fp8_cast,
 * gemm_fp8) against the CPU backend on the same inputs:
 * - fp8_cast, E4M3 and E5M2, with and without the transpose (and the transpose alone),
 *   on bf16 inputs spread over 2^-30 .. 2^10 with zeros, infinities and NaNs of both
 *   signs and values on either side of the saturation count's midpoints, at a scale
 *   that saturates some and flushes others to zero: the bytes, the
 *   amax and the saturation and underflow counts (added to counts already there) equal
 *   the CPU's bit for bit, and the counts are non-zero, so they were exercised;
 * - fp8_cast_dbias: fp8_cast's bytes and meta block on the same backend, bits, and the
 *   bias gradient added within fp32's summing error, in the eight-wide kernel (more
 *   tiles than blocks too) and apart;
 * - fp8_amax on aligned and misaligned views, a NaN in the input: bits;
 * - fp8_amax_scale, aligned and misaligned, both formats, and an empty tensor: the meta
 *   block the CPU's zero, fp8_amax and fp8_scale leave, bits;
 * - gelu_forward_amax and gelu_backward_amax on each backend against gelu_forward (and
 *   gelu_backward into zeros) then zero and fp8_amax: the output and meta block, bits;
 * - fp8_scale, current (with margins 0 and 1, an amax of 0, infinity, and one so small
 *   that max / amax overflows) and delayed with a history of 4 over three steps: every
 *   float of the meta block, bits;
 * - gemm_fp8 in the shapes of a linear layer's three products: the forward (E4M3 x
 *   E4M3, bf16 out, a bias), the data gradient (E5M2 x E4M3, bf16 out) and the weight
 *   gradient (E5M2 x E4M3, fp32 out, beta = 1 onto a gradient already there), and E5M2 x
 *   E5M2, k not a multiple of 16 and a misaligned bias (the paths cuBLASLt declines).
 *   Tolerance, per element: both backends sum the same exact products in different
 *   orders, so they differ by at most d = 2 (k + 3) u S, S the sum of the terms'
 *   magnitudes (products times scales, beta · c, bias), u the unit of the sums: 2^-24
 *   where both add in fp32 (the plain kernel, the emulator's cuBLASLt); 2^-14 for
 *   cuBLASLt on a GPU, whose FP8 tensor-core adds keep about 14 bits of mantissa
 *   (DeepSeek-V3 technical report, 2024, section 3.3.2, for Hopper; an H200 went past
 *   the fp32 bound: the H200's figures in docs/results/). A bf16 output adds
 *   its rounding, 2^-8 of the value: |gpu - cpu| <= 2^-8 (|cpu| + d) + d. On the GPU the
 *   cuBLASLt path, the plain kernel (PT_KCUDA_NO_LT) and the misaligned bias's path sum
 *   in the same order, so they must agree bit for bit (in the emulator, whose cuBLASLt
 *   sums in order of k; a GPU's cuBLASLt blocks k its own way, so there only the CPU
 *   tolerance applies).
 * Under PT_CUDA_EMU it also counts cuBLASLt calls: the TN products run through it,
 * E5M2 x E5M2 and k % 16 != 0 do not.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_kernels_cuda.h"
#ifdef PT_CUDA_EMU
#include "pt_emu_test.h"
#endif

/* ---- Buffers ----------------------------------------------------------------------------- */

static void *put(pt_kernels *kn, const void *host, size_t bytes)
{
    void *d = kn->alloc(kn, bytes ? bytes : 1);
    CHECK(d != NULL);
    if (d && bytes)
        kn->copy(kn, d, host, bytes, PT_KCOPY_H2D);
    return d;
}

static void get(pt_kernels *kn, void *host, const void *dev, size_t bytes)
{
    kn->copy(kn, host, dev, bytes, PT_KCOPY_D2H);
}

/* n [act] values (bf16-representable) on kn, at element offset `off` of the allocation;
 * *base receives the allocation */
static void *put_act(pt_kernels *kn, const float *x, int64_t n, int64_t off, void **base)
{
    tbuf t = {"act", ACT, n + off, NULL, 0};
    float *h = xmalloc((size_t)(n + off) * sizeof(float));
    memset(h, 0, (size_t)off * sizeof(float));
    memcpy(h + off, x, (size_t)n * sizeof(float));
    t.init = h;
    *base = upload(kn, &t);
    free(h);
    return *base ? (char *)*base + off * elem_bytes(kn, ACT) : NULL;
}

static int sync_ok(pt_kernels *kn)
{
    int rc = kn->sync(kn);
    if (rc)
        fprintf(stderr, "%s backend failed: %s\n", kn->name, kn->err);
    CHECK(rc == 0);
    return rc == 0;
}

static int same_bits(const char *what, const void *got, const void *want, size_t bytes)
{
    if (memcmp(got, want, bytes) == 0) {
        if (verbose())
            printf("%-44s exact\n", what);
        return 1;
    }
    fprintf(stderr, "%s: differs from the reference's bits\n", what);
    pt_check_failures++;
    return 0;
}

/* ---- fp8_cast -------------------------------------------------------------------------------- */

/* bf16 values over many binades, with zeros, infinities and NaNs of both signs */
static float *cast_inputs(int64_t n)
{
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        double mag = ldexp(1.0, (int)((urand() + 1.0) * 20.0) - 30); /* 2^-30 .. 2^10 */
        x[i] = bf16_round((float)(urand() * mag));
    }
    /* at a scale of max / 64: 66 and 68.5 round to max without counting as saturated
     * (E4M3's 462, E5M2's 61376 lie below the midpoints 464 and 61440), 66.5 and 69 count */
    const float special[] = {0.0f,  -0.0f, INFINITY, -INFINITY, NAN,   -NAN,
                             1e-30f, -3e3f, 66.0f,   -66.5f,    68.5f, 69.0f};
    enum { NSPECIAL = sizeof special / sizeof special[0] };
    for (int i = 0; i < NSPECIAL && i < n; i++)
        x[(i * 7919) % n] = bf16_round(special[i]);
    return x;
}

/* one cast on kn: bytes of dst and dst_t (when asked) and the meta block after */
static void cast_on(pt_kernels *kn, const float *x, int64_t rows, int cols, int fmt,
                    const float meta0[PT_KFP8_META], int with_dst, int with_t, uint8_t *dst,
                    uint8_t *dst_t, float meta[PT_KFP8_META])
{
    size_t bytes = (size_t)rows * (size_t)cols;
    void *base = NULL;
    const float *src = put_act(kn, x, rows * (int64_t)cols, 0, &base);
    float *m = put(kn, meta0, PT_KFP8_META * sizeof(float));
    uint8_t *d = with_dst ? kn->alloc(kn, bytes) : NULL, *t = with_t ? kn->alloc(kn, bytes) : NULL;
    if (src && m) {
        kn->fp8_cast(kn, d, t, src, rows, cols, fmt, m);
        if (sync_ok(kn)) {
            if (d)
                get(kn, dst, d, bytes);
            if (t)
                get(kn, dst_t, t, bytes);
            get(kn, meta, m, PT_KFP8_META * sizeof(float));
        }
    }
    kn->free(kn, base);
    kn->free(kn, m);
    kn->free(kn, d);
    kn->free(kn, t);
}

static void test_cast_shape(int64_t rows, int cols, int fmt, int with_dst, int with_t)
{
    char what[96];
    snprintf(what, sizeof what, "fp8_cast %s %lld x %d%s%s", fmt ? "e5m2" : "e4m3",
             (long long)rows, cols, with_dst ? " dst" : "", with_t ? " dst_t" : "");
    int64_t n = rows * (int64_t)cols;
    float *x = cast_inputs(n);
    /* |x| above max / scale saturates; the smallest ones flush to zero */
    float scale = pt_kfp8_max((pt_kfp8)fmt) / 64.0f;
    const float meta0[PT_KFP8_META] = {scale, 1.0f / scale, 0.5f, 3.0f, 5.0f};
    uint8_t *d_cpu = xmalloc((size_t)n), *t_cpu = xmalloc((size_t)n);
    uint8_t *d_gpu = xmalloc((size_t)n), *t_gpu = xmalloc((size_t)n);
    float m_cpu[PT_KFP8_META] = {0}, m_gpu[PT_KFP8_META] = {0}, m_again[PT_KFP8_META] = {0};
    cast_on(CPU, x, rows, cols, fmt, meta0, with_dst, with_t, d_cpu, t_cpu, m_cpu);
    cast_on(GPU, x, rows, cols, fmt, meta0, with_dst, with_t, d_gpu, t_gpu, m_gpu);
    char part[128];
    if (with_dst) {
        snprintf(part, sizeof part, "%s: dst", what);
        same_bits(part, d_gpu, d_cpu, (size_t)n);
    }
    if (with_t) {
        snprintf(part, sizeof part, "%s: dst_t", what);
        same_bits(part, t_gpu, t_cpu, (size_t)n);
    }
    snprintf(part, sizeof part, "%s: meta", what);
    same_bits(part, m_gpu, m_cpu, sizeof m_cpu);
    /* the inputs were made to take both counts, and the amax is the input's infinity */
    CHECK(m_cpu[PT_KFP8_OVER] > 3.0f && m_cpu[PT_KFP8_UNDER] > 5.0f);
    CHECK(m_cpu[PT_KFP8_AMAX] == INFINITY);
    /* the GPU again: the same bits (no atomics) */
    uint8_t *d_again = xmalloc((size_t)n), *t_again = xmalloc((size_t)n);
    cast_on(GPU, x, rows, cols, fmt, meta0, with_dst, with_t, d_again, t_again, m_again);
    snprintf(part, sizeof part, "%s: rerun", what);
    same_bits(part, m_again, m_gpu, sizeof m_gpu);
    if (with_dst)
        same_bits(part, d_again, d_gpu, (size_t)n);
    if (with_t)
        same_bits(part, t_again, t_gpu, (size_t)n);
    free(d_again);
    free(t_again);
    free(x);
    free(d_cpu);
    free(t_cpu);
    free(d_gpu);
    free(t_gpu);
}

static void test_fp8_cast(void)
{
    for (int fmt = 0; fmt < 2; fmt++) {
        test_cast_shape(70, 45, fmt, 1, 1); /* tiles cut on both edges */
        test_cast_shape(64, 128, fmt, 1, 0);
        test_cast_shape(3, 200, fmt, 0, 1); /* only the transpose */
        /* widths of eights: the kernel that moves eight elements at once, its tiles cut
         * on both edges, with and without dst */
        test_cast_shape(136, 72, fmt, 1, 1);
        test_cast_shape(80, 200, fmt, 0, 1);
    }
    test_cast_shape(130, 7, PT_KFP8_E4M3, 1, 1);
}

/* ---- fp8_cast_dbias ------------------------------------------------------------------------------ */

/* fp8_cast_dbias on each backend: the bytes and meta block of fp8_cast on the same
 * backend, bit for bit, and dbias = its old values + the column sums of src, within
 * fp32's summing error (the backends and the host sum in different orders) */
static void cast_dbias_case(int64_t rows, int cols, int fmt, int with_dst, int with_t)
{
    char what[96];
    const int64_t n = rows * (int64_t)cols;
    const size_t bytes = (size_t)n;
    float *x = frand(n, 3.0), *d0 = frand(cols, 1.0);
    double *want = xmalloc((size_t)cols * sizeof(double)), *mag = xmalloc((size_t)cols * sizeof(double));
    for (int j = 0; j < cols; j++) {
        want[j] = d0[j];
        mag[j] = fabs(d0[j]);
    }
    for (int64_t i = 0; i < n; i++) {
        x[i] = bf16_round(x[i]);
        want[i % cols] += x[i];
        mag[i % cols] += fabs(x[i]);
    }
    const float meta0[PT_KFP8_META] = {40.0f, 1.0f / 40.0f, 0.0f, 0.0f, 0.0f};
    pt_kernels *kn[2] = {CPU, GPU};
    float *got[2];
    for (int b = 0; b < 2; b++) {
        pt_kernels *K = kn[b];
        void *base;
        const float *src = put_act(K, x, n, 0, &base);
        float *m1 = put(K, meta0, sizeof meta0), *m2 = put(K, meta0, sizeof meta0);
        float *db = put(K, d0, (size_t)cols * sizeof(float));
        uint8_t *q1 = with_dst ? K->alloc(K, bytes) : NULL, *t1 = with_t ? K->alloc(K, bytes) : NULL;
        uint8_t *q2 = with_dst ? K->alloc(K, bytes) : NULL, *t2 = with_t ? K->alloc(K, bytes) : NULL;
        uint8_t *h1 = xmalloc(bytes), *h2 = xmalloc(bytes);
        float g1[PT_KFP8_META], g2[PT_KFP8_META];
        got[b] = xmalloc((size_t)cols * sizeof(float));
        K->fp8_cast(K, q1, t1, src, rows, cols, fmt, m1);
        K->fp8_cast_dbias(K, q2, t2, src, rows, cols, fmt, m2, db);
        if (sync_ok(K)) {
            snprintf(what, sizeof what, "%s fp8_cast_dbias %lldx%d fmt %d", K->name,
                     (long long)rows, cols, fmt);
            for (int k = 0; k < 2; k++) {
                uint8_t *a = k ? t1 : q1, *c = k ? t2 : q2;
                if (!a)
                    continue;
                get(K, h1, a, bytes);
                get(K, h2, c, bytes);
                same_bits(what, h2, h1, bytes);
            }
            get(K, g1, m1, sizeof g1);
            get(K, g2, m2, sizeof g2);
            same_bits(what, g2, g1, sizeof g1);
            get(K, got[b], db, (size_t)cols * sizeof(float));
            double worst = 0;
            for (int j = 0; j < cols; j++) {
                /* fp32 sums of rows + 1 terms: each addition off by at most 2^-24 of the
                 * running sum's magnitude, at most mag */
                double tol = 2.0 * (double)(rows + 2) * ldexp(1.0, -24) * mag[j];
                double err = fabs(got[b][j] - want[j]) / tol;
                worst = err > worst ? err : worst;
            }
            CHECK(worst <= 1.0);
            if (verbose())
                printf("%-44s dbias at %.2g of its bound\n", what, worst);
        }
        K->free(K, base);
        K->free(K, m1);
        K->free(K, m2);
        K->free(K, db);
        if (q1) {
            K->free(K, q1);
            K->free(K, q2);
        }
        if (t1) {
            K->free(K, t1);
            K->free(K, t2);
        }
        free(h1);
        free(h2);
    }
    free(got[0]);
    free(got[1]);
    free(x);
    free(d0);
    free(want);
    free(mag);
}

static void test_fp8_cast_dbias(void)
{
    CHECK(GPU->fp8_cast_dbias && CPU->fp8_cast_dbias);
    if (!GPU->fp8_cast_dbias || !CPU->fp8_cast_dbias)
        return;
    cast_dbias_case(520, 200, PT_KFP8_E5M2, 1, 1); /* eight-wide, tiles cut at the edge */
    cast_dbias_case(136, 72, PT_KFP8_E5M2, 1, 0);
    cast_dbias_case(80, 200, PT_KFP8_E4M3, 0, 1);
    cast_dbias_case(70, 45, PT_KFP8_E5M2, 1, 1); /* no width of eights: apart */
    /* more tiles than blocks: 17 across, 62 rows of tiles in 60 slices */
    cast_dbias_case(3912, 1032, PT_KFP8_E5M2, 1, 1);
}

/* ---- fp8_amax -------------------------------------------------------------------------------- */

static void amax_case(int64_t n, int64_t off, int with_nan)
{
    char what[64];
    snprintf(what, sizeof what, "fp8_amax n %lld offset %lld", (long long)n, (long long)off);
    float *x = frand(n, 3.0);
    for (int64_t i = 0; i < n; i++)
        x[i] = bf16_round(x[i]);
    /* the largest magnitude planted, so that the check below holds for every draw (five
     * draws in [-3, 3) all stay under 2.5 two times in five) */
    x[n - 1] = -2.75f;
    if (with_nan)
        x[n / 2] = NAN;
    const float meta0[PT_KFP8_META] = {1.0f, 1.0f, 0.25f, 0.0f, 0.0f};
    float got[2][PT_KFP8_META];
    pt_kernels *kn[2] = {CPU, GPU};
    for (int b = 0; b < 2; b++) {
        void *base = NULL;
        const float *src = put_act(kn[b], x, n, off, &base);
        float *m = put(kn[b], meta0, sizeof meta0);
        kn[b]->fp8_amax(kn[b], m, src, n);
        if (sync_ok(kn[b]))
            get(kn[b], got[b], m, sizeof meta0);
        kn[b]->free(kn[b], base);
        kn[b]->free(kn[b], m);
    }
    same_bits(what, got[1], got[0], sizeof meta0);
    CHECK(got[0][PT_KFP8_AMAX] > 2.5f && got[0][PT_KFP8_AMAX] <= 3.0f);
    free(x);
}

/* fp8_amax_scale on both backends: the meta block that zero, fp8_amax and fp8_scale
 * leave on the CPU, bit for bit, from a block whose amax (100, above the input's) the
 * call must drop */
static void amax_scale_case(int64_t n, int64_t off, int fmt)
{
    char what[64];
    snprintf(what, sizeof what, "fp8_amax_scale n %lld offset %lld fmt %d", (long long)n,
             (long long)off, fmt);
    float *x = frand(n + 1, 3.0), a = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        x[i] = bf16_round(x[i]);
        a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
    }
    const float meta0[PT_KFP8_META] = {9.0f, 9.0f, 100.0f, 2.0f, 1.0f};
    float want[PT_KFP8_META], got[PT_KFP8_META];
    void *base = NULL;
    const float *src = put_act(CPU, x, n, off, &base);
    float *m = put(CPU, meta0, sizeof meta0);
    CPU->zero(CPU, m + PT_KFP8_AMAX, sizeof(float));
    CPU->fp8_amax(CPU, m, src, n);
    CPU->fp8_scale(CPU, m, fmt, 0, 0.0f);
    get(CPU, want, m, sizeof want);
    CPU->free(CPU, base);
    CPU->free(CPU, m);
    pt_kernels *kn[2] = {CPU, GPU};
    for (int b = 0; b < 2; b++) {
        src = put_act(kn[b], x, n, off, &base);
        m = put(kn[b], meta0, sizeof meta0);
        kn[b]->fp8_amax_scale(kn[b], m, src, n, fmt);
        if (sync_ok(kn[b])) {
            get(kn[b], got, m, sizeof got);
            same_bits(what, got, want, sizeof got);
        }
        kn[b]->free(kn[b], base);
        kn[b]->free(kn[b], m);
    }
    float fmax = fmt == PT_KFP8_E5M2 ? 57344.0f : 448.0f;
    CHECK(want[PT_KFP8_SCALE] == (n > 0 ? fmax / a : 1.0f) && want[PT_KFP8_AMAX] == 0.0f &&
          want[PT_KFP8_OVER] == 2.0f);
    free(x);
}

static void test_fp8_amax(void)
{
    amax_case(4099, 0, 1); /* 8-element loads and a tail */
    amax_case(1000, 3, 0); /* misaligned: one element a load */
    amax_case(5, 0, 0);
    CHECK(GPU->fp8_amax_scale && CPU->fp8_amax_scale);
    if (!GPU->fp8_amax_scale || !CPU->fp8_amax_scale)
        return;
    for (int fmt = 0; fmt < 2; fmt++) {
        amax_scale_case(4099, 0, fmt);
        amax_scale_case(1000, 3, fmt);
    }
    amax_scale_case(0, 0, PT_KFP8_E4M3); /* nothing to take: scale 1 */
}

/* ---- gelu_forward_amax, gelu_backward_amax ------------------------------------------------------ */

/* On each backend, the GELU before an FP8 cast against the ops it stands for: the output
 * of gelu_forward (of gelu_backward added into a zeroed buffer) and the meta block zero
 * and fp8_amax then leave, which the fused op's output (written over other values) and
 * meta (from an amax of 100 it must drop) equal bit for bit, so that training with it
 * is bit-identical */
static void gelu_amax_case(int64_t n, int64_t off, int bwd)
{
    char what[80];
    float *x = frand(n, 4.0), *g = frand(n, 1.0), *zeros = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        x[i] = bf16_round(x[i]);
        g[i] = bf16_round(g[i]);
        zeros[i] = 0.0f;
    }
    const float meta0[PT_KFP8_META] = {9.0f, 9.0f, 100.0f, 2.0f, 1.0f};
    pt_kernels *kn[2] = {CPU, GPU};
    for (int b = 0; b < 2; b++) {
        pt_kernels *K = kn[b];
        size_t bytes = (size_t)n * elem_bytes(K, ACT);
        void *bx, *bg, *b1, *b2;
        const float *src = put_act(K, x, n, off, &bx), *dout = put_act(K, g, n, off, &bg);
        float *o1 = put_act(K, zeros, n, off, &b1), *o2 = put_act(K, g, n, off, &b2);
        float *m1 = put(K, meta0, sizeof meta0), *m2 = put(K, meta0, sizeof meta0);
        char *h1 = xmalloc(bytes), *h2 = xmalloc(bytes);
        float got1[PT_KFP8_META], got2[PT_KFP8_META];
        if (bwd)
            K->gelu_backward(K, o1, dout, src, n);
        else
            K->gelu_forward(K, o1, src, n);
        K->zero(K, m1 + PT_KFP8_AMAX, sizeof(float));
        K->fp8_amax(K, m1, o1, n);
        if (bwd)
            K->gelu_backward_amax(K, o2, dout, src, n, m2);
        else
            K->gelu_forward_amax(K, o2, src, n, m2);
        if (sync_ok(K)) {
            get(K, h1, o1, bytes);
            get(K, h2, o2, bytes);
            get(K, got1, m1, sizeof got1);
            get(K, got2, m2, sizeof got2);
            snprintf(what, sizeof what, "%s gelu_%s_amax n %lld offset %lld: output", K->name,
                     bwd ? "backward" : "forward", (long long)n, (long long)off);
            same_bits(what, h2, h1, bytes);
            snprintf(what, sizeof what, "%s gelu_%s_amax n %lld offset %lld: meta", K->name,
                     bwd ? "backward" : "forward", (long long)n, (long long)off);
            same_bits(what, got2, got1, sizeof got1);
            CHECK(got1[PT_KFP8_AMAX] > 0.0f && got1[PT_KFP8_AMAX] < 100.0f);
        }
        K->free(K, bx);
        K->free(K, bg);
        K->free(K, b1);
        K->free(K, b2);
        K->free(K, m1);
        K->free(K, m2);
        free(h1);
        free(h2);
    }
    free(x);
    free(g);
    free(zeros);
}

static void test_gelu_amax(void)
{
    CHECK(GPU->gelu_forward_amax && GPU->gelu_backward_amax && CPU->gelu_forward_amax &&
          CPU->gelu_backward_amax);
    if (!GPU->gelu_forward_amax || !GPU->gelu_backward_amax || !CPU->gelu_forward_amax ||
        !CPU->gelu_backward_amax)
        return;
    for (int bwd = 0; bwd < 2; bwd++) {
        gelu_amax_case(4099, 0, bwd);  /* by eights, a tail */
        gelu_amax_case(1000, 3, bwd);  /* misaligned: one at a time */
        gelu_amax_case(2100000, 0, bwd); /* past 1024 blocks of 256 by eights: grid-stride */
    }
}

/* ---- fp8_scale -------------------------------------------------------------------------------- */

enum { HIST = 4 };

/* fp8_scale on both backends from meta (PT_KFP8_META + hist floats); meta becomes the
 * CPU's result, which the GPU's must equal */
static void scale_case(const char *what, float *meta, int fmt, int hist, float margin)
{
    size_t bytes = (PT_KFP8_META + (size_t)hist) * sizeof(float);
    float got[2][PT_KFP8_META + HIST];
    pt_kernels *kn[2] = {CPU, GPU};
    for (int b = 0; b < 2; b++) {
        float *m = put(kn[b], meta, bytes);
        kn[b]->fp8_scale(kn[b], m, fmt, hist, margin);
        if (sync_ok(kn[b]))
            get(kn[b], got[b], m, bytes);
        kn[b]->free(kn[b], m);
    }
    same_bits(what, got[1], got[0], bytes);
    memcpy(meta, got[0], bytes);
}

static void test_fp8_scale(void)
{
    /* current scaling */
    const float amaxes[] = {3.7f, 0.0f, INFINITY, 1e-40f, 1000.0f};
    for (int fmt = 0; fmt < 2; fmt++)
        for (int i = 0; i < 5; i++)
            for (int margin = 0; margin < 2; margin++) {
                float meta[PT_KFP8_META] = {9.0f, 9.0f, amaxes[i], 2.0f, 1.0f};
                char what[64];
                snprintf(what, sizeof what, "fp8_scale fmt %d amax %g margin %d", fmt,
                         amaxes[i], margin);
                scale_case(what, meta, fmt, 0, (float)margin);
                CHECK(meta[PT_KFP8_AMAX] == 0.0f);
            }
    /* delayed scaling: the history shifts, its max sets the scale */
    float meta[PT_KFP8_META + HIST] = {1.0f, 1.0f, 3.0f, 0.0f, 0.0f, 1.0f, 5.0f, 2.0f, 0.5f};
    scale_case("fp8_scale delayed step 1", meta, PT_KFP8_E4M3, HIST, 0.0f);
    CHECK(meta[PT_KFP8_META] == 3.0f && meta[PT_KFP8_META + 3] == 2.0f);
    CHECK(meta[PT_KFP8_SCALE] == 448.0f / 5.0f);
    meta[PT_KFP8_AMAX] = 7.0f;
    scale_case("fp8_scale delayed step 2", meta, PT_KFP8_E4M3, HIST, 1.0f);
    CHECK(meta[PT_KFP8_SCALE] == 448.0f / 7.0f / 2.0f);
    scale_case("fp8_scale delayed step 3", meta, PT_KFP8_E5M2, HIST, 0.0f);
    CHECK(meta[PT_KFP8_META] == 0.0f && meta[PT_KFP8_META + 1] == 7.0f);
}

/* ---- gemm_fp8 -------------------------------------------------------------------------------- */

typedef struct {
    const char *what;
    int64_t m;
    int n, k;
    int fmt_a, fmt_b, c_f32, with_bias, bias_off;
    float beta;
} gemm_case;

typedef struct {
    uint8_t *a, *b;     /* host bytes */
    float *c0, *bias;   /* initial c (fp32, bf16-rounded when c is [act]), bias (bf16) */
    float meta_a[PT_KFP8_META], meta_b[PT_KFP8_META];
} gemm_inputs;

static uint8_t *fp8_rand(int64_t n, double scale, int fmt)
{
    uint8_t *q = xmalloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        q[i] = pt_kfp8_from_f32((float)(urand() * scale), (pt_kfp8)fmt);
    return q;
}

/* c after gemm_fp8 on kn, as fp32 */
static float *gemm_on(pt_kernels *kn, const gemm_case *g, const gemm_inputs *in)
{
    int64_t mn = g->m * (int64_t)g->n;
    tbuf tc = {"c", g->c_f32 ? F32 : ACT, mn, in->c0, 1};
    void *c = upload(kn, &tc), *bias_base = NULL;
    const float *bias = g->with_bias ? put_act(kn, in->bias, g->n, g->bias_off, &bias_base) : NULL;
    uint8_t *a = put(kn, in->a, (size_t)(g->m * g->k)), *b = put(kn, in->b, (size_t)g->n * g->k);
    float *ma = put(kn, in->meta_a, sizeof in->meta_a), *mb = put(kn, in->meta_b, sizeof in->meta_b);
    float *out = NULL;
    if (c && a && b && ma && mb) {
        kn->gemm_fp8(kn, c, g->c_f32, g->beta, a, g->fmt_a, ma, b, g->fmt_b, mb, bias, g->m, g->n,
                     g->k);
        if (sync_ok(kn))
            out = download(kn, &tc, c);
    }
    kn->free(kn, c);
    kn->free(kn, bias_base);
    kn->free(kn, a);
    kn->free(kn, b);
    kn->free(kn, ma);
    kn->free(kn, mb);
    return out;
}

/* the per-element bound of the file's comment; the number of elements beyond it */
static int64_t beyond_tolerance(const gemm_case *g, const gemm_inputs *in, const float *got,
                                const float *want, double unit, double *worst)
{
    double sab = (double)in->meta_a[PT_KFP8_SCALE_INV] * in->meta_b[PT_KFP8_SCALE_INV];
    int64_t bad = 0;
    *worst = 0.0;
    for (int64_t i = 0; i < g->m; i++)
        for (int j = 0; j < g->n; j++) {
            double s = 0.0;
            for (int kk = 0; kk < g->k; kk++)
                s += fabs((double)pt_kfp8_to_f32(in->a[i * g->k + kk], (pt_kfp8)g->fmt_a) *
                          pt_kfp8_to_f32(in->b[(int64_t)j * g->k + kk], (pt_kfp8)g->fmt_b));
            s = s * sab + fabs(g->beta * in->c0[i * g->n + j]) +
                (g->with_bias ? fabs(in->bias[j]) : 0.0);
            double d = 2.0 * (g->k + 3) * unit * s;
            double w = want[i * g->n + j], e = fabs((double)got[i * g->n + j] - w);
            double tol = g->c_f32 ? d : ldexp(fabs(w) + d, -8) + d;
            if (!(e <= tol))
                bad++;
            if (tol > 0 && e / tol > *worst)
                *worst = e / tol;
        }
    return bad;
}

static void gemm_fp8_case(const gemm_case *g)
{
    gemm_inputs in;
    /* operands over a few binades of each format, scales as fp8_scale leaves them */
    in.a = fp8_rand(g->m * g->k, g->fmt_a ? 3000.0 : 300.0, g->fmt_a);
    in.b = fp8_rand((int64_t)g->n * g->k, g->fmt_b ? 3000.0 : 300.0, g->fmt_b);
    in.c0 = frand(g->m * (int64_t)g->n, 2.0);
    in.bias = frand(g->n, 1.0);
    for (int64_t i = 0; i < g->m * (int64_t)g->n; i++)
        in.c0[i] = g->c_f32 ? in.c0[i] : bf16_round(in.c0[i]);
    for (int j = 0; j < g->n; j++)
        in.bias[j] = bf16_round(in.bias[j]);
    const float ma[PT_KFP8_META] = {1.0f / 0.003f, 0.003f, 0, 0, 0};
    const float mb[PT_KFP8_META] = {1.0f / 0.0004f, 0.0004f, 0, 0, 0};
    memcpy(in.meta_a, ma, sizeof ma);
    memcpy(in.meta_b, mb, sizeof mb);

    float *want = gemm_on(CPU, g, &in);
    /* cuBLASLt takes the TN products whose k is a multiple of 16 and that are not two
     * E5M2 operands */
    int lt = g->k % 16 == 0 && !(g->fmt_a && g->fmt_b);
#ifdef PT_CUDA_EMU
    uint64_t before = pt_emu_lt_matmuls();
#endif
    float *got = gemm_on(GPU, g, &in);
#ifdef PT_CUDA_EMU
    CHECK_INT(pt_emu_lt_matmuls() - before, lt); /* one call */
    double unit = 0x1p-24; /* the emulated cuBLASLt adds in fp32 */
#else
    double unit = lt ? 0x1p-14 : 0x1p-24;
#endif
    float *again = gemm_on(GPU, g, &in);
    if (want && got && again) {
        double worst;
        int64_t bad = beyond_tolerance(g, &in, got, want, unit, &worst);
        if (verbose())
            printf("%-44s worst %.2f of the bound\n", g->what, worst);
        if (bad) {
            fprintf(stderr, "%s: %lld elements beyond the bound (worst %.3g of it)\n", g->what,
                    (long long)bad, worst);
            pt_check_failures++;
        }
        char part[96];
        snprintf(part, sizeof part, "%s: rerun", g->what);
        same_bits(part, again, got, (size_t)(g->m * g->n) * sizeof(float));
    }
#ifdef PT_CUDA_EMU
    /* the plain kernel (no cuBLASLt) sums in the emulated cuBLASLt's order: same bits */
    pt_kernels *plain = own_backend("PT_KCUDA_NO_LT", "1");
    if (plain && got) {
        pt_kernels *saved = GPU;
        GPU = plain;
        float *p = gemm_on(GPU, g, &in);
        GPU = saved;
        char part[96];
        snprintf(part, sizeof part, "%s: plain kernel", g->what);
        if (p)
            same_bits(part, p, got, (size_t)(g->m * g->n) * sizeof(float));
        free(p);
    }
    pt_kernels_destroy(plain);
    if (g->with_bias && g->bias_off == 0 && got) {
        /* a misaligned bias (written into c, added through beta = 1): the same bits */
        gemm_case mis = *g;
        mis.bias_off = 1;
        float *p = gemm_on(GPU, &mis, &in);
        char part[96];
        snprintf(part, sizeof part, "%s: misaligned bias", g->what);
        if (p)
            same_bits(part, p, got, (size_t)(g->m * g->n) * sizeof(float));
        free(p);
    }
#endif
    free(want);
    free(got);
    free(again);
    free(in.a);
    free(in.b);
    free(in.c0);
    free(in.bias);
}

static void test_gemm_fp8(void)
{
    const gemm_case cases[] = {
        /* forward: out (b·s, oc) = x (b·s, ic) · w (oc, ic)^T + bias */
        {"gemm_fp8 forward e4m3 x e4m3 + bias", 40, 48, 64, 0, 0, 0, 1, 0, 0.0f},
        /* data gradient: dx (b·s, ic) = dout (b·s, oc) · (w^T (ic, oc))^T */
        {"gemm_fp8 dgrad e5m2 x e4m3", 33, 32, 48, 1, 0, 0, 0, 0, 0.0f},
        /* weight gradient: dw (oc, ic) += dout^T (oc, b·s) · (x^T (ic, b·s))^T */
        {"gemm_fp8 wgrad e5m2 x e4m3 fp32 beta 1", 32, 24, 80, 1, 0, 1, 0, 0, 1.0f},
        /* what cuBLASLt declines */
        {"gemm_fp8 e5m2 x e5m2", 17, 16, 32, 1, 1, 0, 1, 0, 0.0f},
        {"gemm_fp8 k 40 (no multiple of 16) fp32", 16, 21, 40, 0, 1, 1, 1, 0, 0.5f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        gemm_fp8_case(&cases[i]);
}

void test_fp8(void)
{
    CHECK(GPU->fp8_amax && GPU->fp8_scale && GPU->fp8_cast && GPU->gemm_fp8);
    CHECK(CPU->fp8_amax && CPU->fp8_scale && CPU->fp8_cast && CPU->gemm_fp8);
    if (!GPU->gemm_fp8 || !CPU->gemm_fp8)
        return;
    test_fp8_cast();
    test_fp8_cast_dbias();
    test_fp8_amax();
    test_gelu_amax();
    test_fp8_scale();
    test_gemm_fp8();
}

int failures_fp8(void) { return pt_check_failures; }
