/*
 * The optimizer on the CPU: fused AdamW (Kingma & Ba 2015, with the decoupled weight
 * decay of Loshchilov & Hutter 2019, as torch.optim.AdamW) on fp32 master weights,
 * and the sum of squares that the global gradient norm and clipping are built from;
 * the multi-tensor forms the runtime's step uses (sumsq_acc into one double, then one
 * adamw_multi over every tensor with the clipping factor computed here from it).
 */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"

void pt_kcpu_adamw(pt_kernels *kn,
                   float *params,                   /* (n) */
                   uint16_t *params_bf16,           /* (n) or NULL */
                   const float *grads,              /* (n) */
                   float *m,                        /* (n) */
                   float *v,                        /* (n) */
                   int64_t n, float lr, float beta1, float beta2, float eps,
                   float weight_decay, int step, float grad_scale)
{
    (void)kn;
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    PT_KCPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        float mhat = mi / bc1, vhat = vi / bc2;
        float p = params[i];
        p -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
        m[i] = mi;
        v[i] = vi;
        params[i] = p;
    }
    if (params_bf16) {
        PT_KCPU_PARALLEL_FOR(n)
        for (int64_t i = 0; i < n; i++)
            params_bf16[i] = pt_k_bf16_from_f32(params[i]);
    }
}

/* Blocks of SUMSQ_BLOCK elements are summed on the threads and the block sums added in
 * order: the same result for any thread count. */
#define SUMSQ_BLOCK 16384

double pt_kcpu_sumsq(pt_kernels *kn,
                     const float *x,                /* (n) */
                     int64_t n)
{
    (void)kn;
    int64_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double stack[64], *part = nb <= 64 ? stack : malloc((size_t)nb * sizeof *part);
    double sum = 0.0;
    if (!part) { /* no room for the block sums: the same blocks, one after another */
        for (int64_t b = 0; b < nb; b++) {
            double s = 0.0;
            for (int64_t i = b * SUMSQ_BLOCK; i < n && i < (b + 1) * SUMSQ_BLOCK; i++)
                s += (double)x[i] * x[i];
            sum += s;
        }
        return sum;
    }
    PT_KCPU_PARALLEL_FOR(n)
    for (int64_t b = 0; b < nb; b++) {
        double s = 0.0;
        for (int64_t i = b * SUMSQ_BLOCK; i < n && i < (b + 1) * SUMSQ_BLOCK; i++)
            s += (double)x[i] * x[i];
        part[b] = s;
    }
    for (int64_t b = 0; b < nb; b++)
        sum += part[b];
    if (part != stack)
        free(part);
    return sum;
}

void pt_kcpu_sumsq_acc(pt_kernels *kn,
                       const float *x,              /* (n) */
                       int64_t n,
                       double *acc)                 /* (1), += */
{
    if (n > 0) /* adds nothing, as on CUDA (keeps a -0.0 too) */
        *acc += pt_kcpu_sumsq(kn, x, n);
}

void pt_kcpu_sum_acc(pt_kernels *kn,
                     const float *x,                /* (n) */
                     int64_t n,
                     double *acc)                   /* (1), += */
{
    (void)kn;
    double s = 0.0; /* in order: the token losses of one micro-batch */
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    if (n > 0)
        *acc += s;
}

/* The clipping factor of an adamw_multi: the contract of pt_k_adamw_args, the same
 * expression the CUDA kernel evaluates (kernels/cuda/optim.cu, clip_factor). */
static float multi_scale(const pt_k_adamw_args *a)
{
    if (a->max_norm <= 0.0)
        return 1.0f;
    return pt_k_clip_scale(sqrt(*a->sumsq / a->copies), a->max_norm);
}

/* Tensor by tensor through pt_kcpu_adamw: on the CPU one pass over the list is the
 * fusion there is, and it makes each tensor's results adamw's by construction. */
void pt_kcpu_adamw_multi(pt_kernels *kn,
                         const pt_k_adamw_tensor *t, /* (count) */
                         int count,
                         const pt_k_adamw_args *a)
{
    if (count <= 0)
        return;
    float scale = multi_scale(a);
    for (int i = 0; i < count; i++)
        pt_kcpu_adamw(kn, t[i].params, t[i].params_bf16, t[i].grads, t[i].m, t[i].v, t[i].n,
                      a->lr, a->beta1, a->beta2, a->eps, t[i].weight_decay, a->step, scale);
}

float pt_k_clip_scale(double norm, double max_norm)
{
    if (max_norm <= 0.0 || norm + 1e-6 <= max_norm)
        return 1.0f;
    return (float)(max_norm / (norm + 1e-6));
}
