/*
 * The optimizer on the CPU: fused AdamW (Kingma & Ba 2015, with the decoupled weight
 * decay of Loshchilov & Hutter 2019, as torch.optim.AdamW) on fp32 master weights,
 * and the sum of squares that the global gradient norm and clipping are built from.
 */
#include <math.h>

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
        if (params_bf16)
            params_bf16[i] = pt_k_bf16_from_f32(p);
    }
}

double pt_kcpu_sumsq(pt_kernels *kn,
                     const float *x,                /* (n) */
                     int64_t n)
{
    (void)kn;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)x[i] * x[i];
    return sum;
}

float pt_k_clip_scale(double norm, double max_norm)
{
    if (max_norm <= 0.0 || norm + 1e-6 <= max_norm)
        return 1.0f;
    return (float)(max_norm / (norm + 1e-6));
}
