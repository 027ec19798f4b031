/*
 * Token and position embedding on CUDA, including the vocab-parallel form (a rank holds
 * token rows [v0, v0+vr) and produces a partial sum). The backward must add the
 * gradients of repeated tokens without atomics: the (token, position) pairs of the
 * micro-batch are sorted by token with CUB's stable radix sort (part of the CUDA
 * toolkit), so each token's positions come out in position order; the block at the
 * start of each run of one token then adds the gradient rows of its positions in that
 * order, the same order (and so the same fp32 result) as the CPU loop, in O(b·s·h)
 * work. dwpe sums over the batch in order.
 */
#include <cub/device/device_radix_sort.cuh>

#include "cuda.cuh"

__global__ void embed_forward_kernel(bf16 *out, const int32_t *tokens, const bf16 *wte,
                                     const bf16 *wpe, int s, int h, int v0, int vr, int pos0)
{
    int64_t row = blockIdx.x; /* bi · s + si */
    int si = (int)(row % s);
    int tok = tokens[row] - v0;
    int in = tok >= 0 && tok < vr;
    const bf16 *te = wte + (int64_t)(in ? tok : 0) * h;
    const bf16 *pe = wpe ? wpe + (int64_t)(pos0 + si) * h : NULL;
    for (int i = threadIdx.x; i < h; i += blockDim.x) {
        float x = in ? pt_ld(te + i) : 0.0f;
        if (pe)
            x = in ? x + pt_ld(pe + i) : pt_ld(pe + i);
        pt_st(out + row * h + i, x);
    }
}

void pt_kcuda_embed_forward(pt_kernels *kn,
                            float *out,             /* (b, s, h) [act] */
                            const int32_t *tokens,  /* (b, s) */
                            const float *wte,       /* (vr, h) [act] */
                            const float *wpe,       /* (>= pos0+s, h) [act] or NULL */
                            int b, int s, int h, int v0, int vr, int pos0)
{
    int64_t rows = (int64_t)b * s;
    if (rows <= 0)
        return;
    PT_LAUNCH((unsigned)rows, 128, 0, pt_kcuda_ctx(kn)->stream, embed_forward_kernel)((bf16 *)out,
        tokens, (const bf16 *)wte, (const bf16 *)wpe, s, h, v0, vr, pos0);
    PT_LAUNCHED(kn, "embed_forward");
}

enum { EMB_THREADS = 128, EMB_COLS = 8, EMB_UNROLL = 8 };

/* the sort's input: this rank's rows of dwte get their token (relative to v0) as key,
 * the others vr (sorted last, never added); positions as values */
__global__ void embed_keys_kernel(int32_t *keys, int32_t *pos, const int32_t *tokens,
                                  int64_t rows, int v0, int vr)
{
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < rows;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int t = tokens[p] - v0;
        keys[p] = t >= 0 && t < vr ? t : vr;
        pos[p] = (int32_t)p;
    }
}

/* one block per sorted entry i; it works only when i starts a run of one token, and adds
 * the run's gradient rows, in position order, into that token's row of dwte */
__global__ void embed_backward_wte_kernel(float *dwte, const bf16 *dout, const int32_t *keys,
                                          const int32_t *pos, int64_t rows, int h, int vr)
{
    const int64_t i = blockIdx.x;
    const int t = keys[i];
    if (t >= vr || (i > 0 && keys[i - 1] == t))
        return;
    int64_t end = i + 1;
    while (end < rows && keys[end] == t)
        end++;
    /* each thread owns up to EMB_COLS columns at a time, so that many independent loads
     * are in flight per position of a long run (a frequent token) */
    float *dte = dwte + (int64_t)t * h;
    for (int c0 = threadIdx.x; c0 < h; c0 += EMB_COLS * EMB_THREADS) {
        float acc[EMB_COLS];
#pragma unroll
        for (int k = 0; k < EMB_COLS; k++)
            acc[k] = c0 + k * EMB_THREADS < h ? dte[c0 + k * EMB_THREADS] : 0.0f;
        /* EMB_UNROLL positions at a time: their loads are all issued before the adds,
         * which still go in position order */
        int64_t m = i;
        for (; m + EMB_UNROLL <= end; m += EMB_UNROLL) {
            float x[EMB_UNROLL][EMB_COLS];
#pragma unroll
            for (int u = 0; u < EMB_UNROLL; u++) {
                const bf16 *row = dout + (int64_t)pos[m + u] * h + c0;
#pragma unroll
                for (int k = 0; k < EMB_COLS; k++)
                    x[u][k] = c0 + k * EMB_THREADS < h ? pt_ld(row + k * EMB_THREADS) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < EMB_UNROLL; u++)
#pragma unroll
                for (int k = 0; k < EMB_COLS; k++)
                    acc[k] += x[u][k];
        }
        for (; m < end; m++) {
            const bf16 *row = dout + (int64_t)pos[m] * h + c0;
#pragma unroll
            for (int k = 0; k < EMB_COLS; k++)
                if (c0 + k * EMB_THREADS < h)
                    acc[k] += pt_ld(row + k * EMB_THREADS);
        }
#pragma unroll
        for (int k = 0; k < EMB_COLS; k++)
            if (c0 + k * EMB_THREADS < h)
                dte[c0 + k * EMB_THREADS] = acc[k];
    }
}

/* one thread per (si, column): dwpe[pos0 + si] += sum over the batch, in order */
__global__ void embed_backward_wpe_kernel(float *dwpe, const bf16 *dout, int b, int s, int h,
                                          int pos0)
{
    int64_t total = (int64_t)s * h;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t si = e / h, i = e % h;
        float acc = dwpe[(pos0 + si) * h + i];
        for (int bi = 0; bi < b; bi++)
            acc += pt_ld(dout + ((int64_t)bi * s + si) * h + i);
        dwpe[(pos0 + si) * h + i] = acc;
    }
}

void pt_kcuda_embed_backward(pt_kernels *kn,
                             float *dwte,           /* (vr, h) fp32 or NULL */
                             float *dwpe,           /* (>= pos0+s, h) fp32 or NULL */
                             const float *dout,     /* (b, s, h) [act] */
                             const int32_t *tokens, /* (b, s) */
                             int b, int s, int h, int v0, int vr, int pos0)
{
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    int64_t rows = (int64_t)b * s;
    if (rows <= 0)
        return;
    if (dwte) {
        if (rows > INT32_MAX) {
            pt_kcuda_fail(kn, __FILE__, __LINE__, "embed_backward: %lld rows", (long long)rows);
            return;
        }
        /* scratch: keys and positions in, sorted keys and positions out, CUB's space */
        int bits = 1;
        while (bits < 31 && (1ll << bits) <= vr)
            bits++;
        size_t cub_bytes = 0, arr = ((size_t)rows * sizeof(int32_t) + 255) / 256 * 256;
        cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const int32_t *)NULL, (int32_t *)NULL,
                                        (const int32_t *)NULL, (int32_t *)NULL, (int)rows, 0,
                                        bits, st);
        char *base = (char *)pt_kcuda_scratch(kn, 4 * arr + cub_bytes);
        if (!base)
            return;
        int32_t *keys = (int32_t *)base, *pos = (int32_t *)(base + arr);
        int32_t *skeys = (int32_t *)(base + 2 * arr), *spos = (int32_t *)(base + 3 * arr);
        PT_LAUNCH(pt_kcuda_blocks(rows, PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0, st,
                  embed_keys_kernel)(
            keys, pos, tokens, rows, v0, vr);
        PT_LAUNCHED(kn, "embed_backward_keys");
        if (PT_CU(kn, cub::DeviceRadixSort::SortPairs(base + 4 * arr, cub_bytes, keys, skeys,
                                                      pos, spos, (int)rows, 0, bits, st)))
            return;
        PT_LAUNCH((unsigned)rows, EMB_THREADS, 0, st, embed_backward_wte_kernel)(dwte,
            (const bf16 *)dout, skeys, spos, rows, h, vr);
        PT_LAUNCHED(kn, "embed_backward_wte");
    }
    if (dwpe) {
        PT_LAUNCH(pt_kcuda_blocks((int64_t)s * h, PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0, st,
                  embed_backward_wpe_kernel)(
            dwpe, (const bf16 *)dout, b, s, h, pos0);
        PT_LAUNCHED(kn, "embed_backward_wpe");
    }
}
