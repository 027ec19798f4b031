/*
 * Softmax cross-entropy on CUDA, fused with the logits and in the vocab-parallel pieces
 * of Megatron-LM (Shoeybi et al. 2019, §3), with the formulas of kernels/cpu/loss.c:
 * one block per row, maximum in fp32, sum of exponentials accumulated in double (as
 * the CPU) through a fixed-shape block reduction, losses in fp32, dlogits written as
 * bf16. dlogits may equal logits: every thread reads the elements it writes, and the
 * target logit is read before the first barrier.
 *
 * The exponentials are the device's fast __expf (ex2.approx on x·log2 e: a relative
 * error of a few fp32 ulps for the arguments x - max <= 0 met here, far under the bf16
 * of dlogits and the 1e-4 the tests allow the loss) and the 16-byte stores round pairs
 * in one instruction (pt_st8_rn): by a count of its source's instructions (an estimate,
 * not a profile), expf's range reduction and the bit-level rounding cost about 37 issue
 * slots an element, about as long as a row's memory traffic takes on a Hopper GPU. With
 * them (and 512 threads) the kernel ran faster inside training steps
 * (the code notes in docs/results/).
 */
#include "cuda.cuh"

enum { CE_THREADS = 256 };

/* Rows of bf16 logits are read 8 elements (16 bytes) at a time when they are aligned
 * and a whole number of such chunks (the padded vocabulary makes them so), else one by
 * one; the per-thread order of a sum is fixed either way, so results stay
 * deterministic. */
static __device__ __forceinline__ bool row_vec(const bf16 *x, int vr)
{
    return ((uintptr_t)x & 15) == 0 && vr % 8 == 0;
}

template <int THREADS> static __device__ float row_max(const bf16 *x, int vr, float *shared)
{
    float mx = -INFINITY;
    if (row_vec(x, vr)) {
        for (int j = threadIdx.x * 8; j < vr; j += THREADS * 8) {
            float f[8];
            pt_ld8(f, x + j);
#pragma unroll
            for (int i = 0; i < 8; i++)
                mx = fmaxf(mx, f[i]);
        }
    } else {
        for (int j = threadIdx.x; j < vr; j += THREADS)
            mx = fmaxf(mx, pt_ld(x + j));
    }
    return pt_block_max(mx, shared);
}

template <int THREADS>
static __device__ float row_sumexp(const bf16 *x, int vr, float gmax, double *shared)
{
    double s = 0.0;
    if (row_vec(x, vr)) {
        for (int j = threadIdx.x * 8; j < vr; j += THREADS * 8) {
            float f[8], part = 0.0f;
            pt_ld8(f, x + j);
#pragma unroll
            for (int i = 0; i < 8; i++)
                part += __expf(f[i] - gmax);
            s += part;
        }
    } else {
        for (int j = threadIdx.x; j < vr; j += THREADS)
            s += __expf(pt_ld(x + j) - gmax);
    }
    return (float)pt_block_sum(s, shared);
}

/* the loss of one row and its slice of dlogits, from the global figures */
template <int THREADS>
static __device__ void row_finalize(float *loss, bf16 *dx, const bf16 *x, int32_t target, int vr,
                                    int v0, float gmax, float gsum, float gtarget, float dloss)
{
    if (target < 0) { /* padded row */
        if (threadIdx.x == 0)
            *loss = 0.0f;
        if (dx)
            for (int j = threadIdx.x; j < vr; j += THREADS)
                dx[j] = pt_bf16(0.0f);
        return;
    }
    if (threadIdx.x == 0)
        *loss = logf(gsum) + gmax - gtarget;
    if (!dx)
        return;
    float inv = 1.0f / gsum;
    int t = target - v0;
    if (row_vec(x, vr) && row_vec(dx, vr)) {
        for (int j = threadIdx.x * 8; j < vr; j += THREADS * 8) {
            float f[8];
            pt_ld8(f, x + j);
#pragma unroll
            for (int i = 0; i < 8; i++)
                f[i] = __expf(f[i] - gmax) * inv;
            if ((unsigned)(t - j) < 8u) /* the target's chunk */
#pragma unroll
                for (int i = 0; i < 8; i++)
                    f[i] -= j + i == t ? 1.0f : 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++)
                f[i] *= dloss;
            pt_st8_rn(dx + j, f);
        }
        return;
    }
    for (int j = threadIdx.x; j < vr; j += THREADS) {
        float prob = __expf(pt_ld(x + j) - gmax) * inv;
        pt_st(dx + j, (prob - (j == t ? 1.0f : 0.0f)) * dloss);
    }
}

#define ROWS_LOOP(r, n) for (int64_t r = blockIdx.x; r < (n); r += gridDim.x)

static unsigned row_grid(int64_t n) { return (unsigned)(n < 65535 * 8 ? n : 65535 * 8); }

/* crossentropy_kernel's loads in flight per thread (16 bytes each) while it copies a
 * row into shared memory, and its threads a block there. Two blocks fit on a
 * multiprocessor beside GPT-2's 100 KB rows, so one load a thread of 256 would keep
 * 8 KB in flight there; the three-pass form, eight blocks at its 32 registers a thread
 * (ptxas, sm_90), keeps 32 KB. Four loads a thread of 256 kept as much and moved bytes
 * more slowly than the three-pass form (the code notes in docs/results/); 512 threads
 * (40 registers each, ptxas) keep twice that, and twice the warps to cover the
 * exponentials' latency. */
enum { CE_ROW_LOADS = 4, CE_ROW_THREADS = 512 };
/* its static shared memory: the reductions' arrays, beside the row */
enum { CE_STATIC_SMEM = 32 * sizeof(float) + 32 * sizeof(double) };

/* Copies the 16-byte row x into shared memory at row and returns its maximum (the same
 * per-thread order as row_max's 16-byte path); the block reduction's barriers publish
 * the row. */
template <int THREADS>
static __device__ float row_copy_max(bf16 *row, const bf16 *x, int v, float *shared)
{
    float mx = -INFINITY;
    for (int j0 = threadIdx.x * 8; j0 < v; j0 += CE_ROW_LOADS * THREADS * 8) {
        uint4 u[CE_ROW_LOADS];
#pragma unroll
        for (int k = 0; k < CE_ROW_LOADS; k++) {
            const int j = j0 + k * THREADS * 8;
            if (j < v)
                u[k] = *reinterpret_cast<const uint4 *>(x + j);
        }
#pragma unroll
        for (int k = 0; k < CE_ROW_LOADS; k++) {
            const int j = j0 + k * THREADS * 8;
            if (j >= v)
                break;
            *reinterpret_cast<uint4 *>(row + j) = u[k];
            float f[8];
            pt_unpack8(f, u[k]);
#pragma unroll
            for (int i = 0; i < 8; i++)
                mx = fmaxf(mx, f[i]);
        }
    }
    return pt_block_max(mx, shared);
}

/* One block a row. IN_SMEM: the row is read from device memory once, copied into
 * shared memory (v bf16, dynamic) while its maximum is taken, then its sum of
 * exponentials and its gradient come from there; else it is read three times. IN_SMEM
 * moves half the bytes of three reads and a write (13 GB against 26 GB for GPT-2 124M's
 * 65,536 rows of 50,304) and ran faster where both were timed on one machine
 * (the code notes in docs/results/). Both do the same arithmetic on 16-byte rows,
 * in each thread's order for their block size (IN_SMEM's CE_ROW_THREADS, the three
 * reads' CE_THREADS: so their sums may differ in the last bits); IN_SMEM is used where
 * rows are such (aligned, v a multiple of 8) and one fits in a block's shared memory. */
template <bool IN_SMEM, int THREADS>
__global__ void __launch_bounds__(THREADS)
crossentropy_kernel(float *losses, bf16 *dlogits, const bf16 *logits, const int32_t *targets,
                    int64_t n, int v, float dloss)
{
    PT_DYNAMIC_SMEM(smem);
    bf16 *row = reinterpret_cast<bf16 *>(smem);
    __shared__ float sf[32];
    __shared__ double sd[32];
    ROWS_LOOP(r, n) {
        const bf16 *x = logits + r * v;
        int32_t target = targets[r];
        float tgt = target >= 0 && target < v ? pt_ld(x + target) : 0.0f;
        float mx = IN_SMEM ? row_copy_max<THREADS>(row, x, v, sf) : row_max<THREADS>(x, v, sf);
        const bf16 *src = IN_SMEM ? row : x;
        float sum = row_sumexp<THREADS>(src, v, mx, sd);
        row_finalize<THREADS>(losses + r, dlogits ? dlogits + r * v : NULL, src, target, v, 0, mx, sum,
                     tgt, dloss);
        __syncthreads(); /* the next row's reductions (and copy) reuse the shared arrays */
    }
}

int pt_kcuda_loss_init(pt_kernels *kn)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    size_t most = ctx->smem_optin > CE_STATIC_SMEM ? ctx->smem_optin - CE_STATIC_SMEM : 0;
    ctx->ce_row_bytes = 0;
    if (most > 0 && PT_CU(kn, cudaFuncSetAttribute(crossentropy_kernel<true, CE_ROW_THREADS>,
                                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)most)))
        return -1;
    ctx->ce_row_bytes = most;
    return 0;
}

void pt_kcuda_crossentropy(pt_kernels *kn,
                           float *losses,           /* (n) fp32 */
                           float *dlogits,          /* (n, v) [act] or NULL */
                           const float *logits,     /* (n, v) [act] */
                           const int32_t *targets,  /* (n) */
                           int64_t n, int v, float dloss)
{
    if (n <= 0)
        return;
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    size_t row = (size_t)v * sizeof(bf16);
    bool vec = ((uintptr_t)logits & 15) == 0 && ((uintptr_t)dlogits & 15) == 0 && v % 8 == 0;
    if (vec && row <= ctx->ce_row_bytes) {
        PT_LAUNCH(row_grid(n), CE_ROW_THREADS, row, ctx->stream,
                  crossentropy_kernel<true, CE_ROW_THREADS>)(losses,
            (bf16 *)dlogits, (const bf16 *)logits, targets, n, v, dloss);
        PT_LAUNCHED(kn, "crossentropy_row");
        return;
    }
    PT_LAUNCH(row_grid(n), CE_THREADS, 0, ctx->stream, crossentropy_kernel<false, CE_THREADS>)(losses,
        (bf16 *)dlogits, (const bf16 *)logits, targets, n, v, dloss);
    PT_LAUNCHED(kn, "crossentropy");
}

/* ---- Vocab-parallel pieces --------------------------------------------------------------- */

__global__ void ce_local_max_kernel(float *lmax, const bf16 *logits, int64_t n, int vr)
{
    __shared__ float sf[32];
    ROWS_LOOP(r, n) {
        float mx = row_max<CE_THREADS>(logits + r * vr, vr, sf);
        if (threadIdx.x == 0)
            lmax[r] = mx;
    }
}

__global__ void ce_local_sumexp_kernel(float *lsum, const bf16 *logits, const float *gmax,
                                       int64_t n, int vr)
{
    __shared__ double sd[32];
    ROWS_LOOP(r, n) {
        float s = row_sumexp<CE_THREADS>(logits + r * vr, vr, gmax[r], sd);
        if (threadIdx.x == 0)
            lsum[r] = s;
    }
}

__global__ void ce_local_target_kernel(float *ltarget, const bf16 *logits,
                                       const int32_t *targets, int64_t n, int vr, int v0)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < n;
         r += (int64_t)gridDim.x * blockDim.x) {
        int t = targets[r] - v0;
        ltarget[r] = targets[r] >= 0 && t >= 0 && t < vr ? pt_ld(logits + r * vr + t) : 0.0f;
    }
}

__global__ void ce_finalize_kernel(float *losses, bf16 *dlogits, const bf16 *logits,
                                   const int32_t *targets, const float *gmax, const float *gsum,
                                   const float *gtarget, int64_t n, int vr, int v0, float dloss)
{
    ROWS_LOOP(r, n) {
        row_finalize<CE_THREADS>(losses + r, dlogits ? dlogits + r * vr : NULL, logits + r * vr, targets[r],
                     vr, v0, gmax[r], gsum[r], gtarget[r], dloss);
    }
}

void pt_kcuda_ce_local_max(pt_kernels *kn, float *lmax, const float *logits, int64_t n, int vr)
{
    if (n <= 0)
        return;
    PT_LAUNCH(row_grid(n), CE_THREADS, 0, pt_kcuda_ctx(kn)->stream, ce_local_max_kernel)(lmax,
        (const bf16 *)logits, n, vr);
    PT_LAUNCHED(kn, "ce_local_max");
}

void pt_kcuda_ce_local_sumexp(pt_kernels *kn, float *lsum, const float *logits,
                              const float *gmax, int64_t n, int vr)
{
    if (n <= 0)
        return;
    PT_LAUNCH(row_grid(n), CE_THREADS, 0, pt_kcuda_ctx(kn)->stream, ce_local_sumexp_kernel)(lsum,
        (const bf16 *)logits, gmax, n, vr);
    PT_LAUNCHED(kn, "ce_local_sumexp");
}

void pt_kcuda_ce_local_target(pt_kernels *kn, float *ltarget, const float *logits,
                              const int32_t *targets, int64_t n, int vr, int v0)
{
    if (n <= 0)
        return;
    PT_LAUNCH(pt_kcuda_blocks(n, PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0, pt_kcuda_ctx(kn)->stream,
              ce_local_target_kernel)(
        ltarget, (const bf16 *)logits, targets, n, vr, v0);
    PT_LAUNCHED(kn, "ce_local_target");
}

void pt_kcuda_ce_finalize(pt_kernels *kn,
                          float *losses,            /* (n) fp32 */
                          float *dlogits,           /* (n, vr) [act] or NULL */
                          const float *logits,      /* (n, vr) [act] */
                          const int32_t *targets,   /* (n) */
                          const float *gmax, const float *gsum, const float *gtarget,
                          int64_t n, int vr, int v0, float dloss)
{
    if (n <= 0)
        return;
    PT_LAUNCH(row_grid(n), CE_THREADS, 0, pt_kcuda_ctx(kn)->stream, ce_finalize_kernel)(losses,
        (bf16 *)dlogits, (const bf16 *)logits, targets, gmax, gsum, gtarget, n, vr, v0, dloss);
    PT_LAUNCHED(kn, "ce_finalize");
}
