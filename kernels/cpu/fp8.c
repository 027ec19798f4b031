/*
 * FP8 on the CPU: the formats' rounding (the host helpers of kernels.h, which the CUDA
 * backend's tests and the emulated cuBLASLt use as their reference) and the four FP8
 * ops of the table. The CPU keeps its activations in fp32; an FP8 GEMM decodes its
 * byte operands to fp32 (every FP8 value is exact there, and so is the product of two)
 * and sums through OpenBLAS's sgemm, so what it computes is the FP8 GEMM of the
 * quantized operands with fp32 accumulation, the arithmetic cuBLASLt's FP8 matmul
 * documents, to the order of the sums.
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* The shape of a format: mantissa bits, exponent bias, largest finite value. */
typedef struct {
    int mbits, bias;
    float max;
    float min_normal; /* 2^(1 - bias) */
    float sub_scale;  /* 2^(mbits + bias - 1): a subnormal's value times it is its code */
} fp8_fmt;

static fp8_fmt fmt_of(pt_kfp8 f)
{
    /* E4M3: the top exponent holds finite values up to 1.75 · 2^8 (its all-ones
     * mantissa is NaN); E5M2: the top exponent is infinity and NaN, as in IEEE 754. */
    return f == PT_KFP8_E5M2 ? (fp8_fmt){.mbits = 2, .bias = 15, .max = 57344.0f,
                                         .min_normal = 0x1p-14f, .sub_scale = 0x1p16f}
                             : (fp8_fmt){.mbits = 3, .bias = 7, .max = 448.0f,
                                         .min_normal = 0x1p-6f, .sub_scale = 0x1p9f};
}

float pt_kfp8_max(pt_kfp8 fmt) { return fmt_of(fmt).max; }

/* pt_kfp8_from_f32 with the format's shape given (inlined into the cast's loop). */
static inline uint8_t encode(float x, const fp8_fmt *Fp, uint32_t top)
{
    const fp8_fmt F = *Fp;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint8_t sign = (uint8_t)(u >> 24 & 0x80);
    u &= 0x7FFFFFFFu;
    if (u > 0x7F800000u)
        return sign | 0x7F; /* NaN: E4M3's S.1111.111, E5M2's S.11111.11 */
    float a;
    memcpy(&a, &u, sizeof a);
    if (a >= F.max) /* saturate (infinity too) */
        return sign | (uint8_t)top;
    if (a < F.min_normal) {
        /* subnormals are k · 2^(1 - bias - mbits), k < 2^mbits, and k's code is k
         * itself (k = 2^mbits rounds up to the smallest normal, whose code it also is) */
        return sign | (uint8_t)nearbyintf(a * F.sub_scale);
    }
    /* normal: round the float's mantissa to mbits bits, to nearest even (a carry moves
     * into the exponent), then rebias the exponent from 127 to the format's */
    int drop = 23 - F.mbits;
    u += (1u << (drop - 1)) - 1 + (u >> drop & 1);
    uint32_t code = (u >> drop) - ((uint32_t)(127 - F.bias) << F.mbits);
    return sign | (uint8_t)(code > top ? top : code);
}

uint8_t pt_kfp8_from_f32(float x, pt_kfp8 f)
{
    fp8_fmt F = fmt_of(f);
    /* the largest code: E4M3's S.1111.110 (its S.1111.111 is NaN), E5M2's S.11110.11 */
    return encode(x, &F, f == PT_KFP8_E5M2 ? 0x7B : 0x7E);
}

float pt_kfp8_to_f32(uint8_t q, pt_kfp8 f)
{
    fp8_fmt F = fmt_of(f);
    int ebits = 7 - F.mbits;
    int mask = (1 << F.mbits) - 1;
    int e = (q >> F.mbits) & ((1 << ebits) - 1), m = q & mask;
    float sign = q & 0x80 ? -1.0f : 1.0f;
    if (f == PT_KFP8_E4M3 && e == 15 && m == 7)
        return NAN;
    if (f == PT_KFP8_E5M2 && e == 31)
        return m ? NAN : sign * INFINITY;
    if (e == 0)
        return sign * ldexpf((float)m, 1 - F.bias - F.mbits);
    return sign * ldexpf((float)(m | (1 << F.mbits)), e - F.bias - F.mbits);
}

void pt_kcpu_fp8_amax(pt_kernels *kn, float *meta, const float *src, int64_t n)
{
    (void)kn;
    float a = meta[PT_KFP8_AMAX];
    /* a maximum is the same whichever thread takes which elements */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(max : a) if (n >= PT_KCPU_PAR_MIN)
#endif
    for (int64_t i = 0; i < n; i++) {
        float v = fabsf(src[i]);
        if (v > a) /* false for NaN */
            a = v;
    }
    meta[PT_KFP8_AMAX] = a;
}

void pt_kcpu_fp8_scale(pt_kernels *kn, float *meta, int fmt, int hist_len, float margin)
{
    (void)kn;
    float a = meta[PT_KFP8_AMAX];
    if (hist_len > 0) {
        float *h = meta + PT_KFP8_META;
        memmove(h + 1, h, (size_t)(hist_len - 1) * sizeof *h);
        h[0] = a;
        for (int i = 1; i < hist_len; i++)
            if (h[i] > a)
                a = h[i];
    }
    float scale = 1.0f;
    if (a > 0.0f && isfinite(a))
        scale = pt_kfp8_max((pt_kfp8)fmt) / a / exp2f(margin);
    if (!isfinite(scale) || scale <= 0.0f) /* an amax so small that max / amax overflows */
        scale = 1.0f;
    meta[PT_KFP8_SCALE] = scale;
    meta[PT_KFP8_SCALE_INV] = 1.0f / scale;
    meta[PT_KFP8_AMAX] = 0.0f;
}

void pt_kcpu_fp8_amax_scale(pt_kernels *kn, float *meta, const float *src, int64_t n, int fmt)
{
    meta[PT_KFP8_AMAX] = 0.0f;
    pt_kcpu_fp8_amax(kn, meta, src, n);
    pt_kcpu_fp8_scale(kn, meta, fmt, 0, 0.0f);
}

void pt_kcpu_fp8_cast(pt_kernels *kn, uint8_t *dst, uint8_t *dst_t, const float *src,
                      int64_t rows, int cols, int fmt, float *meta)
{
    pt_kfp8 f = (pt_kfp8)fmt;
    float scale = meta[PT_KFP8_SCALE], amax = meta[PT_KFP8_AMAX];
    /* saturated: at or past the midpoint of max and the step above it (448 + 32/2,
     * 57344 + 8192/2), where rounding would have left the format */
    float past = f == PT_KFP8_E5M2 ? 61440.0f : 464.0f;
    double over = 0, under = 0;
    size_t elems = (size_t)rows * (size_t)cols;
    /* the transpose is written from a row-major copy, in tiles */
    uint8_t *q = dst ? dst : malloc(elems ? elems : 1);
    if (!q) {
        if (!kn->err[0])
            snprintf(kn->err, sizeof kn->err, "fp8_cast: out of memory for a %lld x %d "
                     "transpose", (long long)rows, cols);
        return;
    }
    fp8_fmt F = fmt_of(f);
    uint32_t top = pt_kfp8_from_f32(INFINITY, f);
    /* the maximum and the integer counts are the same whichever thread takes which
     * elements (the counts are exact in double) */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) reduction(max : amax) reduction(+ : over, under) \
    if (elems >= PT_KCPU_PAR_MIN)
#endif
    for (size_t i = 0; i < elems; i++) {
        float x = src[i], v = x * scale;
        uint8_t b = encode(v, &F, top);
        amax = fabsf(x) > amax ? fabsf(x) : amax;
        over += fabsf(v) >= past;
        under += x != 0.0f && (b & 0x7F) == 0;
        q[i] = b;
    }
    enum { TILE = 32 };
    for (int64_t r0 = 0; dst_t && r0 < rows; r0 += TILE)
        for (int c0 = 0; c0 < cols; c0 += TILE)
            for (int c = c0; c < c0 + TILE && c < cols; c++)
                for (int64_t r = r0; r < r0 + TILE && r < rows; r++)
                    dst_t[(int64_t)c * rows + r] = q[r * cols + c];
    if (!dst)
        free(q);
    meta[PT_KFP8_AMAX] = amax;
    meta[PT_KFP8_OVER] += (float)over;
    meta[PT_KFP8_UNDER] += (float)under;
}

/* The values of a (rows, k) FP8 matrix in fp32, into out, through the format's 256
 * values. */
static void decode(float *out, const uint8_t *q, int64_t elems, pt_kfp8 f)
{
    float lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = pt_kfp8_to_f32((uint8_t)i, f);
    PT_KCPU_PARALLEL_FOR(elems)
    for (int64_t i = 0; i < elems; i++)
        out[i] = lut[q[i]];
}

void pt_kcpu_fp8_cast_dbias(pt_kernels *kn, uint8_t *dst, uint8_t *dst_t, const float *src,
                            int64_t rows, int cols, int fmt, float *meta, float *dbias)
{
    pt_kcpu_fp8_cast(kn, dst, dst_t, src, rows, cols, fmt, meta);
    pt_kcpu_matmul_backward(kn, NULL, NULL, dbias, src, NULL, NULL, rows, 1, cols);
}

void pt_kcpu_gemm_fp8(pt_kernels *kn, float *c, int c_f32, float beta, const uint8_t *a,
                      int fmt_a, const float *meta_a, const uint8_t *b, int fmt_b,
                      const float *meta_b, const float *bias, int64_t m, int n, int k)
{
    (void)c_f32; /* the CPU's [act] is fp32 too */
    float *A = malloc((size_t)m * (size_t)k * sizeof *A);
    float *B = malloc((size_t)n * (size_t)k * sizeof *B);
    if (!A || !B) {
        if (!kn->err[0])
            snprintf(kn->err, sizeof kn->err, "gemm_fp8: out of memory decoding a %lld x %d "
                     "by %d x %d product", (long long)m, k, n, k);
        free(A);
        free(B);
        return;
    }
    decode(A, a, m * k, (pt_kfp8)fmt_a);
    decode(B, b, (int64_t)n * k, (pt_kfp8)fmt_b);
    float alpha = meta_a[PT_KFP8_SCALE_INV] * meta_b[PT_KFP8_SCALE_INV];
    if (bias) {
        /* c = beta · c + bias first, then sgemm adds the product onto it */
        for (int64_t i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[i * n + j] = (beta != 0.0f ? beta * c[i * n + j] : 0.0f) + bias[j];
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, n, k, alpha, A, k, B, k, beta,
                c, n);
    free(A);
    free(B);
}
