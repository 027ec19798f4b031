/*
 * The optimizer on CUDA: fused AdamW (Kingma & Ba 2015 with the decoupled weight decay
 * of Loshchilov & Hutter 2019, as torch.optim.AdamW and kernels/cpu/optim.c) on fp32
 * master weights, writing the bf16 compute copy in the same pass, and the sum of
 * squares behind the global gradient norm: two passes in double (a partial per block
 * over a grid whose size depends on n only, then one block sums the partials in
 * order), so the result is the same on every run.
 *
 * The step without the host: sumsq_acc queues the same two passes with the second
 * adding into a device double; adamw_multi updates a list of tensors in one launch,
 * blocks mapped over (tensor, chunk of ADAMW_CHUNK elements) through a device table
 * of descriptors, and computes the clipping factor from the device sum in every block.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.cuh"

/* One step's figures: the learning rate, betas, eps, a tensor's weight decay, the bias
 * corrections and the gradient's scale (the clipping factor). */
struct adamw_step {
    float lr, beta1, beta2, eps, weight_decay, bc1, bc2, grad_scale;
};

/* One element of AdamW, the formula of kernels/cpu/optim.c: the new moments and
 * weight from the gradient g and the old ones. Every kernel below goes through this one
 * function, so the multi-tensor form (four elements at a time or one) evaluates the
 * same expression with the same fused multiply-adds as the per-tensor form: the same
 * bits. */
static __device__ __forceinline__ void adamw_math(float grad, float *m, float *v, float *p,
                                                  const adamw_step &s)
{
    float g = grad * s.grad_scale;
    float mi = s.beta1 * *m + (1.0f - s.beta1) * g;
    float vi = s.beta2 * *v + (1.0f - s.beta2) * g * g;
    float mhat = mi / s.bc1, vhat = vi / s.bc2;
    *p -= s.lr * (mhat / (sqrtf(vhat) + s.eps) + s.weight_decay * *p);
    *m = mi;
    *v = vi;
}

static __device__ __forceinline__ void adamw_element(float *params, uint16_t *params_bf16,
                                                     const float *grads, float *m, float *v,
                                                     int64_t i, const adamw_step &s)
{
    float mi = m[i], vi = v[i], p = params[i];
    adamw_math(grads[i], &mi, &vi, &p, s);
    m[i] = mi;
    v[i] = vi;
    params[i] = p;
    if (params_bf16)
        params_bf16[i] = pt_bf16_bits(p);
}

/* The update of elements i .. i+3 from their loaded g, m, v and params (mi, vi, p
 * updated in place), each 16-byte store whole (the bf16 copy 8 bytes). */
static __device__ __forceinline__ void adamw_apply4(float *params, uint16_t *params_bf16,
                                                    float *m, float *v, int64_t i, const float4 &g,
                                                    float4 &mi, float4 &vi, float4 &p,
                                                    const adamw_step &s)
{
    adamw_math(g.x, &mi.x, &vi.x, &p.x, s);
    adamw_math(g.y, &mi.y, &vi.y, &p.y, s);
    adamw_math(g.z, &mi.z, &vi.z, &p.z, s);
    adamw_math(g.w, &mi.w, &vi.w, &p.w, s);
    *reinterpret_cast<float4 *>(m + i) = mi;
    *reinterpret_cast<float4 *>(v + i) = vi;
    *reinterpret_cast<float4 *>(params + i) = p;
    if (params_bf16) {
        uint2 b;
        b.x = (uint32_t)pt_bf16_bits(p.x) | (uint32_t)pt_bf16_bits(p.y) << 16;
        b.y = (uint32_t)pt_bf16_bits(p.z) | (uint32_t)pt_bf16_bits(p.w) << 16;
        *reinterpret_cast<uint2 *>(params_bf16 + i) = b;
    }
}

/* Elements i .. i+3, each 16-byte load whole: four times the bytes in flight of one
 * element's loads. */
static __device__ __forceinline__ void adamw_element4(float *params, uint16_t *params_bf16,
                                                      const float *grads, float *m, float *v,
                                                      int64_t i, const adamw_step &s)
{
    float4 g = *reinterpret_cast<const float4 *>(grads + i);
    float4 mi = *reinterpret_cast<const float4 *>(m + i);
    float4 vi = *reinterpret_cast<const float4 *>(v + i);
    float4 p = *reinterpret_cast<const float4 *>(params + i);
    adamw_apply4(params, params_bf16, m, v, i, g, mi, vi, p, s);
}

/* Elements i .. i+3 and j .. j+3: all eight 16-byte loads are issued before the first
 * store, which the compiler may not move a later element's loads above (the buffers
 * could alias, for all it knows): twice the bytes in flight of adamw_element4 a thread,
 * the same arithmetic on each element. */
static __device__ __forceinline__ void adamw_element4x2(float *params, uint16_t *params_bf16,
                                                        const float *grads, float *m, float *v,
                                                        int64_t i, int64_t j,
                                                        const adamw_step &s)
{
    float4 g[2], mi[2], vi[2], p[2];
    const int64_t at[2] = {i, j};
#pragma unroll
    for (int u = 0; u < 2; u++) {
        g[u] = *reinterpret_cast<const float4 *>(grads + at[u]);
        mi[u] = *reinterpret_cast<const float4 *>(m + at[u]);
        vi[u] = *reinterpret_cast<const float4 *>(v + at[u]);
        p[u] = *reinterpret_cast<const float4 *>(params + at[u]);
    }
#pragma unroll
    for (int u = 0; u < 2; u++)
        adamw_apply4(params, params_bf16, m, v, at[u], g[u], mi[u], vi[u], p[u], s);
}

__global__ void adamw_kernel(float *params, uint16_t *params_bf16, const float *grads, float *m,
                             float *v, int64_t n, adamw_step s)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        adamw_element(params, params_bf16, grads, m, v, i, s);
}

/* bias corrections on the host, in float, exactly as the CPU backend */
static void bias_corrections(float beta1, float beta2, int step, float *bc1, float *bc2)
{
    *bc1 = 1.0f - powf(beta1, (float)step);
    *bc2 = 1.0f - powf(beta2, (float)step);
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
    adamw_step s = {lr, beta1, beta2, eps, weight_decay, 0.0f, 0.0f, grad_scale};
    bias_corrections(beta1, beta2, step, &s.bc1, &s.bc2);
    PT_LAUNCH(pt_kcuda_blocks(n, PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0, pt_kcuda_ctx(kn)->stream,
              adamw_kernel)(params, params_bf16, grads, m, v, n, s);
    PT_LAUNCHED(kn, "adamw");
}

/* ---- AdamW over a list of tensors ------------------------------------------------------------ */

enum {
    ADAMW_THREADS = 256,
    ADAMW_CHUNK = 64 * ADAMW_THREADS, /* elements per block: 64 per thread */
    ADAMW_UPLOAD = 48                 /* descriptors per upload: 3 KiB of kernel
                                       * parameters, under CUDA's 4 KiB */
};

/* A batch of descriptors travelling as a kernel parameter (by value). */
struct adamw_upload {
    pt_kcuda_adamw_desc d[ADAMW_UPLOAD];
};

/* Writes count descriptors into the table. The driver copies a launch's parameters when
 * the launch is queued, so this upload never waits and needs no pinned staging buffer
 * (cudaMemcpyAsync from pageable memory may wait for the stream; from a pinned buffer,
 * the buffer could not be rewritten for the next list until the copy had run), and it
 * stays in stream order with the kernels that read the table. */
__global__ void adamw_upload_kernel(pt_kcuda_adamw_desc *table, adamw_upload batch, int count)
{
    if ((int)threadIdx.x < count)
        table[threadIdx.x] = batch.d[threadIdx.x];
}

/* pt_k_clip_scale(sqrt(*sumsq / copies), max_norm) with the same double operations:
 * division and square root are correctly rounded on the device as on the host, and
 * nothing here can be contracted into a fused multiply-add, so the factor is the float
 * the host would compute. */
static __device__ float clip_factor(double max_norm, const double *sumsq, double copies)
{
    if (max_norm <= 0.0)
        return 1.0f;
    double norm = sqrt(*sumsq / copies);
    if (norm + 1e-6 <= max_norm)
        return 1.0f;
    return (float)(max_norm / (norm + 1e-6));
}

/* Block j updates chunk j - first_block of the tensor whose blocks hold j: the last
 * descriptor with first_block <= j (a binary search; the table holds no empty tensor,
 * so first_block strictly increases). */
__global__ void adamw_multi_kernel(const pt_kcuda_adamw_desc *table, int count, adamw_step s,
                                   double max_norm, const double *sumsq, double copies)
{
    const int64_t j = blockIdx.x;
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (table[mid].first_block <= j)
            lo = mid;
        else
            hi = mid - 1;
    }
    const pt_kcuda_adamw_desc d = table[lo];
    s.weight_decay = d.weight_decay;
    s.grad_scale = clip_factor(max_norm, sumsq, copies);
    const int64_t i0 = (j - d.first_block) * ADAMW_CHUNK;
    const int64_t i1 = i0 + ADAMW_CHUNK < d.n ? i0 + ADAMW_CHUNK : d.n;
    /* four elements a thread where the tensor's buffers allow 16-byte accesses (i0, a
     * multiple of ADAMW_CHUNK, keeps their alignment), two such groups at a time; the
     * rest one by one: the wide accesses and the second group keep more loads in
     * flight, which this memory-bound op needs to approach a Hopper GPU's bandwidth
     * (the code notes in docs/results/). Two groups take 76 registers (ptxas,
     * sm_90: three blocks of 256 a multiprocessor); capped at 64 for four blocks they
     * spill. */
    const bool four = ((uintptr_t)d.params & 15) == 0 && ((uintptr_t)d.grads & 15) == 0 &&
                      ((uintptr_t)d.m & 15) == 0 && ((uintptr_t)d.v & 15) == 0 &&
                      ((uintptr_t)d.params_bf16 & 7) == 0;
    int64_t i = i0;
    if (four) {
        const int64_t i4 = i0 + (i1 - i0) / 4 * 4, step = 4 * (int64_t)blockDim.x;
        int64_t k = i0 + 4 * (int64_t)threadIdx.x;
        for (; k + step < i4; k += 2 * step)
            adamw_element4x2(d.params, d.params_bf16, d.grads, d.m, d.v, k, k + step, s);
        if (k < i4)
            adamw_element4(d.params, d.params_bf16, d.grads, d.m, d.v, k, s);
        i = i4;
    }
    for (i += threadIdx.x; i < i1; i += blockDim.x)
        adamw_element(d.params, d.params_bf16, d.grads, d.m, d.v, i, s);
}

int pt_kcuda_adamw_grow(pt_kernels *kn, int count)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (count <= ctx->adamw_cap)
        return 0;
    /* kernels queued earlier may still read the old table */
    if (PT_CU(kn, cudaStreamSynchronize(ctx->stream)))
        return -1;
    pt_kcuda_adamw_desc *host =
        (pt_kcuda_adamw_desc *)realloc(ctx->adamw_host, (size_t)count * sizeof *host);
    if (!host) {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "adamw_multi: out of host memory for %d tensors",
                      count);
        return -1;
    }
    ctx->adamw_host = host;
    cudaFree(ctx->adamw_table);
    ctx->adamw_table = NULL;
    ctx->adamw_cap = ctx->adamw_valid = 0;
    if (PT_CU(kn, cudaMalloc((void **)&ctx->adamw_table,
                             (size_t)count * sizeof(pt_kcuda_adamw_desc)))) {
        ctx->adamw_table = NULL;
        return -1;
    }
    ctx->adamw_cap = count;
    return 0;
}

/* Brings table entries [at, at + k) to batch's, uploading only when they differ from
 * what the table holds (ctx->adamw_host mirrors it): a runtime that passes the same list
 * every step uploads it once. */
static void adamw_put(pt_kernels *kn, const adamw_upload *batch, int at, int k)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    size_t bytes = (size_t)k * sizeof(pt_kcuda_adamw_desc);
    if (at + k <= ctx->adamw_valid && !memcmp(ctx->adamw_host + at, batch->d, bytes))
        return;
    memcpy(ctx->adamw_host + at, batch->d, bytes);
    PT_LAUNCH(1, ADAMW_UPLOAD, 0, ctx->stream, adamw_upload_kernel)(ctx->adamw_table + at, *batch,
                                                                    k);
    PT_LAUNCHED(kn, "adamw_multi_upload");
    if (at + k > ctx->adamw_valid) /* uploads run from entry 0 up: at <= adamw_valid */
        ctx->adamw_valid = at + k;
}

void pt_kcuda_adamw_multi(pt_kernels *kn,
                          const pt_k_adamw_tensor *t, /* (count) host */
                          int count,
                          const pt_k_adamw_args *a)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    int nd = 0; /* descriptors: the tensors that hold elements */
    for (int i = 0; i < count; i++)
        nd += t[i].n > 0;
    if (nd == 0)
        return;
    if (nd > ctx->adamw_cap) {
        if (ctx->steady) {
            pt_kcuda_fail(kn, __FILE__, __LINE__,
                          "adamw_multi: %d tensors, reserve made room for %d "
                          "(pt_k_scratch_shape.adamw_tensors; no allocation after reserve)",
                          nd, ctx->adamw_cap);
            return;
        }
        if (pt_kcuda_adamw_grow(kn, nd))
            return;
    }
    adamw_upload batch;
    memset(&batch, 0, sizeof batch); /* padding too: batches are compared with memcmp */
    int k = 0, at = 0;
    int64_t blocks = 0;
    for (int i = 0; i < count; i++) {
        if (t[i].n <= 0)
            continue;
        pt_kcuda_adamw_desc *d = &batch.d[k++];
        d->params = t[i].params;
        d->params_bf16 = t[i].params_bf16;
        d->grads = t[i].grads;
        d->m = t[i].m;
        d->v = t[i].v;
        d->n = t[i].n;
        d->first_block = blocks;
        d->weight_decay = t[i].weight_decay;
        blocks += (t[i].n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
        if (k == ADAMW_UPLOAD) {
            adamw_put(kn, &batch, at, k);
            at += k;
            k = 0;
            memset(&batch, 0, sizeof batch);
        }
    }
    if (k > 0)
        adamw_put(kn, &batch, at, k);
    if (blocks > INT32_MAX) {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "adamw_multi: %lld blocks of %d elements",
                      (long long)blocks, (int)ADAMW_CHUNK);
        return;
    }
    /* each block sets its tensor's weight decay and the clipping factor */
    adamw_step s = {a->lr, a->beta1, a->beta2, a->eps, 0.0f, 0.0f, 0.0f, 1.0f};
    bias_corrections(a->beta1, a->beta2, a->step, &s.bc1, &s.bc2);
    PT_LAUNCH((unsigned)blocks, ADAMW_THREADS, 0, ctx->stream, adamw_multi_kernel)(
        ctx->adamw_table, nd, s, a->max_norm, a->sumsq, a->copies);
    PT_LAUNCHED(kn, "adamw_multi");
}

/* ---- Sum of squares ------------------------------------------------------------------------- */

enum { SUMSQ_THREADS = 256 };

static __device__ __forceinline__ double sumsq_term(float x, int square)
{
    return square ? (double)x * x : (double)x;
}

/* square: the sum of squares (sumsq), else the plain sum (sum_acc). Where x is 16-byte
 * aligned, each thread reads four elements a load (the tail of n % 4 one by one, by
 * the first threads): with one 4-byte load a thread in flight over the grid's 262,144
 * threads, about 1 MB was in flight, where the H100's ~3 TB/s at ~1 us latency wants
 * several; the gradient norm read GPT-2 1.5B's 6.2 GB of gradients inside the "adam"
 * op. The per-thread order depends on n and x's alignment only, so the sum is the same
 * on every run. */
__global__ void sumsq_partial_kernel(double *partials, const float *x, int64_t n, int square)
{
    __shared__ double shared[32];
    double s = 0.0;
    const int64_t t = blockIdx.x * (int64_t)SUMSQ_THREADS + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * SUMSQ_THREADS;
    int64_t i = t;
    if (((uintptr_t)x & 15) == 0) {
        const int64_t n4 = n / 4;
        const float4 *x4 = reinterpret_cast<const float4 *>(x);
#pragma unroll 4
        for (int64_t q = t; q < n4; q += stride) {
            const float4 f = x4[q];
            s += sumsq_term(f.x, square) + sumsq_term(f.y, square) +
                 (sumsq_term(f.z, square) + sumsq_term(f.w, square));
        }
        i = 4 * n4 + t;
    }
    for (; i < n; i += stride)
        s += sumsq_term(x[i], square);
    s = pt_block_sum(s, shared);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = s;
}

/* *result = the sum of the partials, or *result += it (accumulate) */
__global__ void sumsq_final_kernel(double *result, const double *partials, int count,
                                   int accumulate)
{
    __shared__ double shared[32];
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += PT_KCUDA_SUMSQ_BLOCKS)
        s += partials[i];
    s = pt_block_sum(s, shared);
    if (threadIdx.x == 0)
        *result = accumulate ? *result + s : s;
}

/* Queues both passes over x (n > 0) into *result; the partials live in
 * ctx->sumsq_part[1...], reused in stream order. */
static void sumsq_queue(pt_kernels *kn, const float *x, int64_t n, double *result,
                        int accumulate, int square)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    int64_t want = (n + SUMSQ_THREADS * 4 - 1) / (SUMSQ_THREADS * 4);
    int blocks = (int)(want < PT_KCUDA_SUMSQ_BLOCKS ? want : PT_KCUDA_SUMSQ_BLOCKS);
    double *part = ctx->sumsq_part + 1;
    PT_LAUNCH(blocks, SUMSQ_THREADS, 0, ctx->stream, sumsq_partial_kernel)(part, x, n, square);
    PT_LAUNCHED(kn, "sumsq_partial");
    PT_LAUNCH(1, PT_KCUDA_SUMSQ_BLOCKS, 0, ctx->stream, sumsq_final_kernel)(result, part, blocks,
                                                                           accumulate);
    PT_LAUNCHED(kn, "sumsq_final");
}

double pt_kcuda_sumsq(pt_kernels *kn,
                      const float *x,               /* (n) fp32 */
                      int64_t n)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (n <= 0)
        return 0.0;
    sumsq_queue(kn, x, n, ctx->sumsq_part, 0, 1);
    if (PT_CU(kn, cudaMemcpyAsync(ctx->host_sum, ctx->sumsq_part, sizeof(double),
                                  cudaMemcpyDeviceToHost, ctx->stream)) ||
        PT_CU(kn, cudaStreamSynchronize(ctx->stream)))
        return NAN;
    return *ctx->host_sum;
}

void pt_kcuda_sumsq_acc(pt_kernels *kn,
                        const float *x,             /* (n) fp32 */
                        int64_t n,
                        double *acc)                /* (1) fp64 device, += */
{
    if (n > 0)
        sumsq_queue(kn, x, n, acc, 1, 1);
}

void pt_kcuda_sum_acc(pt_kernels *kn,
                      const float *x,               /* (n) fp32 */
                      int64_t n,
                      double *acc)                  /* (1) fp64 device, += */
{
    if (n > 0)
        sumsq_queue(kn, x, n, acc, 1, 0);
}
