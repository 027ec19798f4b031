/*
 * Softmax cross-entropy fused with the logits on the CPU, whole-vocabulary and
 * vocab-parallel (Megatron-LM, Shoeybi et al. 2019, §3): the parallel form exposes
 * the per-rank pieces (local maximum, local sum of exponentials under the global
 * maximum, local target logit) whose all-reduces the runtime does, then finishes the
 * loss and this rank's slice of dlogits from the global figures. Sums run in double.
 */
#include <math.h>

#include "cpu.h"

/* One row of each piece: the public functions below run them over the rows, on the
 * threads; the whole-vocabulary cross-entropy runs all four per row (a parallel region
 * per row and piece would cost more than the row). */
static float row_max(const float *x, int vr)
{
    float mx = -INFINITY;
    for (int j = 0; j < vr; j++)
        mx = x[j] > mx ? x[j] : mx;
    return mx;
}

static float row_sumexp(const float *x, float gmax, int vr)
{
    double sum = 0.0;
    for (int j = 0; j < vr; j++)
        sum += expf(x[j] - gmax);
    return (float)sum;
}

static float row_target(const float *x, int32_t target, int vr, int v0)
{
    int t = target - v0;
    return target >= 0 && t >= 0 && t < vr ? x[t] : 0.0f;
}

/* The loss of one row and, when dx is not NULL (it may be x), its slice of dlogits. */
static float row_finalize(float *dx, const float *x, int32_t target, float gmax, float gsum,
                          float gtarget, int vr, int v0, float dloss)
{
    if (target < 0) { /* padded row */
        if (dx)
            for (int j = 0; j < vr; j++)
                dx[j] = 0.0f;
        return 0.0f;
    }
    float loss = logf(gsum) + gmax - gtarget;
    if (!dx)
        return loss;
    float inv = 1.0f / gsum;
    int t = target - v0;
    for (int j = 0; j < vr; j++) {
        float prob = expf(x[j] - gmax) * inv;
        dx[j] = (prob - (j == t ? 1.0f : 0.0f)) * dloss;
    }
    return loss;
}

void pt_kcpu_ce_local_max(pt_kernels *kn,
                          float *lmax,              /* (n) */
                          const float *logits,      /* (n, vr) */
                          int64_t n, int vr)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * vr)
    for (int64_t r = 0; r < n; r++)
        lmax[r] = row_max(logits + r * vr, vr);
}

void pt_kcpu_ce_local_sumexp(pt_kernels *kn,
                             float *lsum,           /* (n) */
                             const float *logits,   /* (n, vr) */
                             const float *gmax,     /* (n) */
                             int64_t n, int vr)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * vr)
    for (int64_t r = 0; r < n; r++)
        lsum[r] = row_sumexp(logits + r * vr, gmax[r], vr);
}

void pt_kcpu_ce_local_target(pt_kernels *kn,
                             float *ltarget,        /* (n) */
                             const float *logits,   /* (n, vr) */
                             const int32_t *targets,/* (n) */
                             int64_t n, int vr, int v0)
{
    (void)kn;
    for (int64_t r = 0; r < n; r++)
        ltarget[r] = row_target(logits + r * vr, targets[r], vr, v0);
}

void pt_kcpu_ce_finalize(pt_kernels *kn,
                         float *losses,             /* (n) */
                         float *dlogits,            /* (n, vr) or NULL, may equal logits */
                         const float *logits,       /* (n, vr) */
                         const int32_t *targets,    /* (n) */
                         const float *gmax,         /* (n) */
                         const float *gsum,         /* (n) */
                         const float *gtarget,      /* (n) */
                         int64_t n, int vr, int v0, float dloss)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * vr)
    for (int64_t r = 0; r < n; r++)
        losses[r] = row_finalize(dlogits ? dlogits + r * vr : NULL, logits + r * vr, targets[r],
                                 gmax[r], gsum[r], gtarget[r], vr, v0, dloss);
}

void pt_kcpu_crossentropy(pt_kernels *kn,
                          float *losses,            /* (n) */
                          float *dlogits,           /* (n, v) or NULL, may equal logits */
                          const float *logits,      /* (n, v) */
                          const int32_t *targets,   /* (n) */
                          int64_t n, int v, float dloss)
{
    /* the vocab-parallel pieces with one slice holding the whole vocabulary, row by
     * row so that the statistics stay in registers */
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * (int64_t)v)
    for (int64_t r = 0; r < n; r++) {
        const float *x = logits + r * v;
        float mx = row_max(x, v);
        float sum = row_sumexp(x, mx, v);
        float tgt = row_target(x, targets[r], v, 0);
        losses[r] = row_finalize(dlogits ? dlogits + r * v : NULL, x, targets[r], mx, sum, tgt,
                                 v, 0, dloss);
    }
}
