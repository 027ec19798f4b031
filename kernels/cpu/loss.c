/*
 * Softmax cross-entropy fused with the logits on the CPU, whole-vocabulary and
 * vocab-parallel (Megatron-LM, Shoeybi et al. 2019, §3): the parallel form exposes
 * the per-rank pieces (local maximum, local sum of exponentials under the global
 * maximum, local target logit) whose all-reduces the runtime does, then finishes the
 * loss and this rank's slice of dlogits from the global figures. Sums run in double.
 */
#include <math.h>

#include "cpu.h"

void pt_kcpu_ce_local_max(pt_kernels *kn,
                          float *lmax,              /* (n) */
                          const float *logits,      /* (n, vr) */
                          int64_t n, int vr)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * vr)
    for (int64_t r = 0; r < n; r++) {
        const float *x = logits + r * vr;
        float mx = -INFINITY;
        for (int j = 0; j < vr; j++)
            mx = x[j] > mx ? x[j] : mx;
        lmax[r] = mx;
    }
}

void pt_kcpu_ce_local_sumexp(pt_kernels *kn,
                             float *lsum,           /* (n) */
                             const float *logits,   /* (n, vr) */
                             const float *gmax,     /* (n) */
                             int64_t n, int vr)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * vr)
    for (int64_t r = 0; r < n; r++) {
        const float *x = logits + r * vr;
        double sum = 0.0;
        for (int j = 0; j < vr; j++)
            sum += expf(x[j] - gmax[r]);
        lsum[r] = (float)sum;
    }
}

void pt_kcpu_ce_local_target(pt_kernels *kn,
                             float *ltarget,        /* (n) */
                             const float *logits,   /* (n, vr) */
                             const int32_t *targets,/* (n) */
                             int64_t n, int vr, int v0)
{
    (void)kn;
    for (int64_t r = 0; r < n; r++) {
        int t = targets[r] - v0;
        ltarget[r] = targets[r] >= 0 && t >= 0 && t < vr ? logits[r * vr + t] : 0.0f;
    }
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
    for (int64_t r = 0; r < n; r++) {
        const float *x = logits + r * vr;
        if (targets[r] < 0) { /* padded row */
            losses[r] = 0.0f;
            if (dlogits)
                for (int j = 0; j < vr; j++)
                    dlogits[r * vr + j] = 0.0f;
            continue;
        }
        losses[r] = logf(gsum[r]) + gmax[r] - gtarget[r];
        if (!dlogits)
            continue;
        float inv = 1.0f / gsum[r];
        int t = targets[r] - v0;
        float *dx = dlogits + r * vr;
        for (int j = 0; j < vr; j++) {
            float prob = expf(x[j] - gmax[r]) * inv;
            dx[j] = (prob - (j == t ? 1.0f : 0.0f)) * dloss;
        }
    }
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
    PT_KCPU_PARALLEL_FOR(n * (int64_t)v)
    for (int64_t r = 0; r < n; r++) {
        float mx, sum, tgt;
        const float *x = logits + r * v;
        pt_kcpu_ce_local_max(kn, &mx, x, 1, v);
        pt_kcpu_ce_local_sumexp(kn, &sum, x, &mx, 1, v);
        pt_kcpu_ce_local_target(kn, &tgt, x, targets + r, 1, v, 0);
        pt_kcpu_ce_finalize(kn, losses + r, dlogits ? dlogits + r * v : NULL, x, targets + r,
                            &mx, &sum, &tgt, 1, v, 0, dloss);
    }
}
