/*
 * ptprofile's measurement of the FP8 GEMMs (pt_train.fp8): the transformer layers'
 * linear layers as runtime/fp8.c multiplies them with kernels.h's gemm_fp8, timed under
 * the keys of dtype fp8 that the planner's op lists give them (gemm:fp8:m=..,n=..,k=..,
 * one per role, as for bf16). A key's sample is the GEMM alone: the planner prices the
 * amax passes, scale kernels and casts around it on top of the key (pt_fp8_work,
 * planner/sim.c), so the operands are quantized once, before the timing, and only
 * gemm_fp8 runs in it.
 *
 * The operands are what the runtime feeds it: the hybrid formats, E4M3 for inputs and
 * weights and E5M2 for output gradients, both K-major, each quantized from random
 * values with the scale its own amax gives (current scaling), so that the bytes span
 * the format as in training (a multiplier fed few distinct bits can run faster than on
 * real data: pt_prof_fill_random).
 *
 * On the CPU backend gemm_fp8 decodes both operands to fp32 and multiplies them through
 * OpenBLAS: a sample there is the time of that emulation, which is what a plan made
 * with --fp8-emulate runs, not an FP8 rate.
 */
#include "ptprofile.h"

#include <limits.h>

bool pt_prof_fp8_role(pt_gemm_role role)
{
    switch (role) {
    case PT_GEMM_FWD:
    case PT_GEMM_FWD_BIAS:
    case PT_GEMM_DGRAD:
    case PT_GEMM_DGRAD_WRITE:
    case PT_GEMM_WGRAD:
    case PT_GEMM_WGRAD_BIAS:
        return true;
    case PT_GEMM_FWD_GELU:
    case PT_GEMM_FWD_GELU_BIAS:
    case PT_GEMM_DGRAD_DGELU:
    case PT_GEMM_FWD_RES:
    case PT_GEMM_FWD_BIAS_RES:
    case PT_GEMM_NONE:
    case PT_GEMM_ROLE_COUNT:
        return false;
    }
    return false;
}

/* One FP8 GEMM as runtime/fp8.c calls it, c (m, n) = a (m, k) · b (n, k)^T, the key's
 * m, n and k:
 * - the forward: out (T, oc) = X (T, ic) · W (oc, ic)^T, E4M3 · E4M3 into [act],
 *   beta 0, with the layer's bias (n) or without;
 * - the data gradient: dX (T, ic) = dY (T, oc) · W^T (ic, oc)^T, E5M2 · E4M3 into
 *   [act], beta 1 (added) or 0 (gemm_dgrad_write);
 * - the weight gradient: dW (oc, ic) += dY^T (oc, T) · X^T (ic, T)^T, E5M2 · E4M3 into
 *   fp32, beta 1, and with the bias the bias gradient (m, fp32) summed from dY (T, oc)
 *   unquantized, as the runtime's op does beside the product. */
typedef struct {
    float *c;        /* (m, n) [act], or fp32 for a weight gradient (c_f32) */
    uint8_t *a, *b;  /* (m, k) and (n, k) fp8 */
    float *meta;     /* a's meta block, then b's: PT_KFP8_META floats each */
    float *bias;     /* (n) [act]: a biased forward's; else NULL */
    float *dbias;    /* (m) fp32: a weight gradient's bias gradient; else NULL */
    float *dy;       /* (k, m) [act]: what dbias sums; else NULL */
    int fmt_a, c_f32;
    float beta;
    int64_t m, n, k;
} fp8_gemm;

static void run_fp8(pt_kernels *kn, void *arg)
{
    fp8_gemm *g = arg;
    kn->gemm_fp8(kn, g->c, g->c_f32, g->beta, g->a, g->fmt_a, g->meta, g->b, PT_KFP8_E4M3,
                 g->meta + PT_KFP8_META, g->bias, g->m, (int)g->n, (int)g->k);
    if (g->dbias)
        kn->matmul_backward(kn, NULL, NULL, g->dbias, g->dy, NULL, NULL, g->k, (int)g->n,
                            (int)g->m);
}

/* q (rows, cols) of format fmt from random values (seed) put in src, scaled by their
 * amax into the operand's meta block, as current scaling quantizes a tensor. */
static int quantize_random(pt_kernels *kn, uint8_t *q, float *meta, int64_t rows, int64_t cols,
                           int fmt, void *src, uint32_t seed)
{
    if (pt_prof_fill_random(kn, src, rows * cols, seed))
        return -1;
    kn->fp8_amax(kn, meta, src, rows * cols);
    kn->fp8_scale(kn, meta, fmt, 0, 0.0f);
    kn->fp8_cast(kn, q, NULL, src, rows, (int)cols, fmt, meta);
    return kn->sync(kn);
}

/* Both meta blocks at scale 1 and amax 0 (the runtime's state before a first use), then
 * both operands quantized; src (the larger operand's elements of [act]) is scratch. */
static int prepare(pt_kernels *kn, fp8_gemm *g, void *src)
{
    float host[2 * PT_KFP8_META] = {0};
    for (int i = 0; i < 2; i++)
        host[i * PT_KFP8_META + PT_KFP8_SCALE] = host[i * PT_KFP8_META + PT_KFP8_SCALE_INV] = 1;
    kn->copy(kn, g->meta, host, sizeof host, PT_KCOPY_H2D);
    if (kn->sync(kn) ||
        quantize_random(kn, g->a, g->meta, g->m, g->k, g->fmt_a, src, 1) ||
        quantize_random(kn, g->b, g->meta + PT_KFP8_META, g->n, g->k, PT_KFP8_E4M3, src, 2) ||
        (g->bias && pt_prof_fill_random(kn, g->bias, g->n, 4)) ||
        (g->dy && pt_prof_fill_random(kn, g->dy, g->k * g->m, 3)))
        return -1;
    /* an output that the call adds into starts from zeros */
    kn->zero(kn, g->c, (size_t)(g->m * g->n) * (g->c_f32 ? 4 : pt_kdtype_bytes(kn->act_dtype)));
    if (g->dbias)
        kn->zero(kn, g->dbias, (size_t)g->m * 4);
    return kn->sync(kn);
}

double pt_prof_gemm_fp8(pt_kernels *kn, int64_t m, int64_t n, int64_t k, pt_gemm_role role,
                        int repeats, double soak_s, double *best_s)
{
    if (!pt_prof_fp8_role(role) || !kn->fp8_amax || !kn->fp8_scale || !kn->fp8_cast ||
        !kn->gemm_fp8 || m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return -1;
    size_t ab = pt_kdtype_bytes(kn->act_dtype);
    bool wgrad = role == PT_GEMM_WGRAD || role == PT_GEMM_WGRAD_BIAS;
    bool grad = wgrad || role == PT_GEMM_DGRAD || role == PT_GEMM_DGRAD_WRITE;
    fp8_gemm g = {.m = m, .n = n, .k = k, .c_f32 = wgrad,
                  .fmt_a = grad ? PT_KFP8_E5M2 : PT_KFP8_E4M3, /* gradients are E5M2 */
                  .beta = role == PT_GEMM_DGRAD || wgrad ? 1.0f : 0.0f};
    g.c = kn->alloc(kn, (size_t)(m * n) * (wgrad ? 4 : ab));
    g.a = kn->alloc(kn, (size_t)(m * k));
    g.b = kn->alloc(kn, (size_t)(n * k));
    g.meta = kn->alloc(kn, 2 * PT_KFP8_META * sizeof(float));
    void *src = kn->alloc(kn, (size_t)((m > n ? m : n) * k) * ab);
    bool bias = role == PT_GEMM_FWD_BIAS, dbias = role == PT_GEMM_WGRAD_BIAS;
    g.bias = bias ? kn->alloc(kn, (size_t)n * ab) : NULL;
    g.dbias = dbias ? kn->alloc(kn, (size_t)m * 4) : NULL;
    g.dy = dbias ? kn->alloc(kn, (size_t)(k * m) * ab) : NULL;
    double t = -1;
    bool ok = g.c && g.a && g.b && g.meta && src && (g.bias || !bias) &&
              (g.dbias || !dbias) && (g.dy || !dbias) && prepare(kn, &g, src) == 0;
    kn->free(kn, src); /* before the timing: not part of the GEMM's footprint */
    if (ok)
        t = pt_prof_time_backend(kn, run_fp8, &g, repeats, soak_s, best_s);
    kn->free(kn, g.c);
    kn->free(kn, g.a);
    kn->free(kn, g.b);
    kn->free(kn, g.meta);
    kn->free(kn, g.bias);
    kn->free(kn, g.dbias);
    kn->free(kn, g.dy);
    return t;
}
