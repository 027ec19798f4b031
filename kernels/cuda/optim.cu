/*
 * The optimizer on CUDA: fused AdamW (Kingma & Ba 2015 with the decoupled weight decay
 * of Loshchilov & Hutter 2019, as torch.optim.AdamW and kernels/cpu/optim.c) on fp32
 * master weights, writing the bf16 compute copy in the same pass, and the sum of
 * squares behind the global gradient norm: two passes in double (a partial per block
 * over a grid whose size depends on n only, then one block sums the partials in
 * order), so the result is the same on every run.
 */
#include <math.h>

#include "cuda.cuh"

__global__ void adamw_kernel(float *params, uint16_t *params_bf16, const float *grads, float *m,
                             float *v, int64_t n, float lr, float beta1, float beta2, float eps,
                             float weight_decay, float bc1, float bc2, float grad_scale)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
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
            params_bf16[i] = pt_bf16_bits(p);
    }
}

void pt_kcuda_adamw(pt_kernels *kn,
                    float *params,                  /* (n) fp32 master */
                    uint16_t *params_bf16,          /* (n) bf16 or NULL */
                    const float *grads,             /* (n) fp32 */
                    float *m,                       /* (n) fp32 */
                    float *v,                       /* (n) fp32 */
                    int64_t n, float lr, float beta1, float beta2, float eps,
                    float weight_decay, int step, float grad_scale)
{
    if (n <= 0)
        return;
    /* bias corrections on the host, in float, exactly as the CPU backend */
    float bc1 = 1.0f - powf(beta1, (float)step), bc2 = 1.0f - powf(beta2, (float)step);
    adamw_kernel<<<pt_kcuda_blocks(n, PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0,
                   pt_kcuda_ctx(kn)->stream>>>(params, params_bf16, grads, m, v, n, lr, beta1,
                                               beta2, eps, weight_decay, bc1, bc2, grad_scale);
    PT_LAUNCHED(kn, "adamw");
}

/* ---- Sum of squares ------------------------------------------------------------------------- */

enum { SUMSQ_THREADS = 256, SUMSQ_MAX_BLOCKS = 1024 };

__global__ void sumsq_partial_kernel(double *partials, const float *x, int64_t n)
{
    __shared__ double shared[32];
    double s = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)SUMSQ_THREADS + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * SUMSQ_THREADS)
        s += (double)x[i] * x[i];
    s = pt_block_sum(s, shared);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = s;
}

__global__ void sumsq_final_kernel(double *result, const double *partials, int count)
{
    __shared__ double shared[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += SUMSQ_MAX_BLOCKS)
        s += partials[i];
    s = pt_block_sum(s, shared);
    if (threadIdx.x == 0)
        *result = s;
}

double pt_kcuda_sumsq(pt_kernels *kn,
                      const float *x,               /* (n) fp32 */
                      int64_t n)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (n <= 0)
        return 0.0;
    int64_t want = (n + SUMSQ_THREADS * 4 - 1) / (SUMSQ_THREADS * 4);
    int blocks = (int)(want < SUMSQ_MAX_BLOCKS ? want : SUMSQ_MAX_BLOCKS);
    double *part = (double *)pt_kcuda_scratch(kn, (size_t)(blocks + 1) * sizeof(double));
    if (!part)
        return NAN;
    sumsq_partial_kernel<<<blocks, SUMSQ_THREADS, 0, ctx->stream>>>(part + 1, x, n);
    PT_LAUNCHED(kn, "sumsq_partial");
    sumsq_final_kernel<<<1, SUMSQ_MAX_BLOCKS, 0, ctx->stream>>>(part, part + 1, blocks);
    PT_LAUNCHED(kn, "sumsq_final");
    if (PT_CU(kn, cudaMemcpyAsync(ctx->host_sum, part, sizeof(double), cudaMemcpyDeviceToHost,
                                  ctx->stream)) ||
        PT_CU(kn, cudaStreamSynchronize(ctx->stream)))
        return NAN;
    return *ctx->host_sum;
}
