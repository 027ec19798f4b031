/*
 * Mixture-of-experts ops on CUDA (contracts in kernels.h, "Mixture of experts"): the
 * router (scores, top-k and weights, one warp a token) and its backward, the column sum
 * of the scores, the dispatch plan, the row gather into expert order and the weighted
 * combine back with their backwards, and the grouped linear layers.
 *
 * Determinism without atomics: every sum has a fixed shape (a warp's butterfly, a
 * block's fixed tree, or one thread in order). The dispatch plan is CUB's stable radix
 * sort of the (token, slot) assignments by expert, as the embedding backward sorts
 * tokens (embed.cu): stable, so each expert's assignments keep their flattened (t, j)
 * order, whatever the threads' timing; a binary search then finds each expert's run,
 * one thread adds the kept counts into row offsets in expert order, and each sorted
 * entry's row is its offset plus its place in the run. The backward of the gather is a
 * gather too (through pos, the inverse of src), so no row is added to by two threads.
 *
 * The grouped linear layers run matmul.cu's cuBLASLt calls once per non-empty group on
 * the group's rows (pointer offsets): cuBLASLt in this toolkit has no grouped layout
 * (kernels/README.md says what was looked for).
 */
#include <cub/device/device_radix_sort.cuh>

#include "cuda.cuh"

/* Rows (tokens) of a router kernel's block: one warp each. */
enum { MOE_WARPS = 8 };

/* Whether expert a (score sa) comes before expert b (score sb) in the top-k order:
 * larger score first, ties to the lower index (kernels/cpu/moe.c orders the same). */
static __device__ __forceinline__ bool moe_before(float sa, int a, float sb, int b)
{
    return sa > sb || (sa == sb && a < b);
}

static __device__ __forceinline__ float moe_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* One warp per token: the scores into `scores`, then k rounds of a warp arg-max over
 * the experts after the previous choice in the order, then the weights. */
__global__ void moe_route_forward_kernel(float *scores, int32_t *idx, float *w,
                                         const bf16 *logits, int64_t n, int E, int k,
                                         int score, int renorm)
{
    const int lane = threadIdx.x % 32;
    for (int64_t t = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / 32; t < n;
         t += (int64_t)gridDim.x * MOE_WARPS) {
        const bf16 *x = logits + t * E;
        float *s = scores + t * E;
        if (score == PT_KMOE_SIGMOID) {
            for (int e = lane; e < E; e += 32)
                s[e] = moe_sigmoid(pt_ld(x + e));
        } else {
            float mx = -INFINITY, sum = 0.0f;
            for (int e = lane; e < E; e += 32)
                mx = fmaxf(mx, pt_ld(x + e));
            mx = pt_warp_max(mx);
            for (int e = lane; e < E; e += 32)
                sum += expf(pt_ld(x + e) - mx);
            sum = pt_warp_sum(sum);
            for (int e = lane; e < E; e += 32)
                s[e] = expf(pt_ld(x + e) - mx) / sum;
        }
        __syncwarp(); /* the row's scores, written by every lane, read by every lane */
        int prev = -1;
        float prev_s = 0.0f, total = 0.0f;
        for (int j = 0; j < k; j++) {
            int best = -1;
            float best_s = 0.0f;
            for (int e = lane; e < E; e += 32) {
                const float v = s[e];
                if ((prev < 0 || moe_before(prev_s, prev, v, e)) &&
                    (best < 0 || moe_before(v, e, best_s, best))) {
                    best = e;
                    best_s = v;
                }
            }
            /* the order is total, so the butterfly leaves every lane the same winner */
            for (int o = 16; o > 0; o >>= 1) {
                const int ob = __shfl_xor_sync(0xffffffffu, best, o);
                const float os = __shfl_xor_sync(0xffffffffu, best_s, o);
                if (ob >= 0 && (best < 0 || moe_before(os, ob, best_s, best))) {
                    best = ob;
                    best_s = os;
                }
            }
            if (best < 0) { /* scores that are not numbers: the caller's bug, kept in bounds */
                best = 0;
                best_s = s[0];
            }
            if (lane == 0) {
                idx[t * k + j] = best;
                w[t * k + j] = best_s;
            }
            total += best_s;
            prev = best;
            prev_s = best_s;
        }
        if (lane == 0 && renorm)
            for (int j = 0; j < k; j++)
                w[t * k + j] /= total;
        __syncwarp(); /* the next row's scores reuse no memory, but keep lanes together */
    }
}

void pt_kcuda_moe_route_forward(pt_kernels *kn,
                                float *scores,        /* (n, E) fp32 */
                                int32_t *idx,         /* (n, k) */
                                float *w,             /* (n, k) fp32 */
                                const float *logits,  /* (n, E) [act] */
                                int64_t n, int E, int k, int score, int renorm)
{
    if (n <= 0)
        return;
    PT_LAUNCH(pt_kcuda_blocks(n, MOE_WARPS), 32 * MOE_WARPS, 0, pt_kcuda_ctx(kn)->stream,
              moe_route_forward_kernel)(scores, idx, w, (const bf16 *)logits, n, E, k, score,
                                        renorm);
    PT_LAUNCHED(kn, "moe_route_forward");
}

/* ds[t,e] of one expert: aux_g[e] (or 0) plus dsel_j where e is choice j */
static __device__ float moe_ds(int e, const float *aux_g, const int32_t *it, const float *dwt,
                               float dot, float sum, int k, int renorm)
{
    float ds = aux_g ? aux_g[e] : 0.0f;
    for (int j = 0; j < k; j++)
        if (it[j] == e)
            ds += renorm ? (dwt[j] - dot) / sum : dwt[j];
    return ds;
}

__global__ void moe_route_backward_kernel(bf16 *dlogits, const float *dw, const float *aux_g,
                                          const float *scores, const int32_t *idx,
                                          const float *w, int64_t n, int E, int k, int score,
                                          int renorm)
{
    const int lane = threadIdx.x % 32;
    for (int64_t t = (int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / 32; t < n;
         t += (int64_t)gridDim.x * MOE_WARPS) {
        const float *s = scores + t * E, *dwt = dw + t * k, *wt = w + t * k;
        const int32_t *it = idx + t * k;
        float sum = 0.0f, dot = 0.0f; /* j ascending, as the forward sums the weights */
        for (int j = 0; j < k; j++) {
            sum += s[it[j]];
            dot += dwt[j] * wt[j];
        }
        bf16 *dl = dlogits + t * E;
        if (score == PT_KMOE_SIGMOID) {
            for (int e = lane; e < E; e += 32)
                pt_st(dl + e, moe_ds(e, aux_g, it, dwt, dot, sum, k, renorm) * s[e] *
                                  (1.0f - s[e]));
            continue;
        }
        float g = 0.0f; /* Σ_e ds·s */
        for (int e = lane; e < E; e += 32)
            g += moe_ds(e, aux_g, it, dwt, dot, sum, k, renorm) * s[e];
        g = pt_warp_sum(g);
        for (int e = lane; e < E; e += 32)
            pt_st(dl + e, s[e] * (moe_ds(e, aux_g, it, dwt, dot, sum, k, renorm) - g));
    }
}

void pt_kcuda_moe_route_backward(pt_kernels *kn,
                                 float *dlogits,      /* (n, E) [act], written */
                                 const float *dw,     /* (n, k) fp32 */
                                 const float *aux_g,  /* (E) fp32 or NULL */
                                 const float *scores, /* (n, E) fp32 */
                                 const int32_t *idx,  /* (n, k) */
                                 const float *w,      /* (n, k) fp32 */
                                 int64_t n, int E, int k, int score, int renorm)
{
    if (n <= 0)
        return;
    PT_LAUNCH(pt_kcuda_blocks(n, MOE_WARPS), 32 * MOE_WARPS, 0, pt_kcuda_ctx(kn)->stream,
              moe_route_backward_kernel)((bf16 *)dlogits, dw, aux_g, scores, idx, w, n, E, k,
                                         score, renorm);
    PT_LAUNCHED(kn, "moe_route_backward");
}

/* A block of 32 x 32 threads per 32 columns: thread (x, y) sums rows y, y + 32, ... of
 * column x in double, then row y = 0 adds the 32 partial sums in order. */
__global__ void moe_colsum_kernel(float *out, const float *scores, int64_t n, int E)
{
    __shared__ double part[32][33];
    const int x = threadIdx.x % 32, y = threadIdx.x / 32;
    const int e = blockIdx.x * 32 + x;
    double acc = 0.0;
    if (e < E)
        for (int64_t t = y; t < n; t += 32)
            acc += scores[t * E + e];
    part[y][x] = acc;
    __syncthreads();
    if (y == 0 && e < E) {
        double sum = 0.0;
        for (int i = 0; i < 32; i++)
            sum += part[i][x];
        out[e] = (float)sum;
    }
}

void pt_kcuda_moe_score_colsum(pt_kernels *kn,
                               float *out,            /* (E) fp32, written */
                               const float *scores,   /* (n, E) fp32 */
                               int64_t n, int E)
{
    if (E <= 0)
        return;
    PT_LAUNCH((unsigned)((E + 31) / 32), 1024, 0, pt_kcuda_ctx(kn)->stream,
              moe_colsum_kernel)(out, scores, n < 0 ? 0 : n, E);
    PT_LAUNCHED(kn, "moe_score_colsum");
}

/* ---- The dispatch plan ------------------------------------------------------------------ */

/* the sort's input: each assignment's expert as key, its flattened index t·k + j as value */
__global__ void moe_plan_keys_kernel(int32_t *keys, int32_t *vals, const int32_t *idx,
                                     int64_t nk)
{
    for (int64_t f = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; f < nk;
         f += (int64_t)gridDim.x * blockDim.x) {
        keys[f] = idx[f];
        vals[f] = (int32_t)f;
    }
}

/* One block: start[e] = the first sorted entry of expert e (a binary search; start[E] =
 * nk); then one thread, in expert order, the rows kept (counts) and where each expert's
 * rows begin (first). */
__global__ void moe_plan_bounds_kernel(int64_t *counts, int64_t *start, int64_t *first,
                                       const int32_t *skeys, int64_t nk, int E,
                                       int64_t capacity)
{
    for (int e = threadIdx.x; e <= E; e += blockDim.x) {
        int64_t lo = 0, hi = nk;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (skeys[mid] < e)
                lo = mid + 1;
            else
                hi = mid;
        }
        start[e] = lo;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int64_t row = 0;
        for (int e = 0; e < E; e++) {
            int64_t c = start[e + 1] - start[e];
            if (capacity >= 0 && c > capacity)
                c = capacity;
            counts[e] = c;
            first[e] = row;
            row += c;
        }
    }
}

/* Sorted entry p: its place in its expert's run decides whether it is kept, and its row. */
__global__ void moe_plan_rows_kernel(int32_t *pos, int32_t *src, const int32_t *skeys,
                                     const int32_t *svals, const int64_t *counts,
                                     const int64_t *start, const int64_t *first, int64_t nk,
                                     int k)
{
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < nk;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int e = skeys[p], f = svals[p];
        const int64_t place = p - start[e];
        if (place < counts[e]) {
            const int64_t row = first[e] + place;
            pos[f] = (int32_t)row;
            src[row] = f / k;
        } else {
            pos[f] = -1;
        }
    }
}

/* The key bits of experts [0, E): enough that every index is below 2^bits. */
static int moe_key_bits(int E)
{
    int bits = 1;
    while (bits < 31 && (1ll << bits) < E)
        bits++;
    return bits;
}

/* The plan's scratch: keys and values in, sorted keys and values out (int32, nk each),
 * start (E + 1), first (E) int64, and CUB's space; each part rounded to 256 bytes. */
static size_t moe_plan_layout(int64_t nk, int E, size_t *arr, size_t *ebytes, size_t *cub_bytes)
{
    *arr = ((size_t)nk * sizeof(int32_t) + 255) / 256 * 256;
    *ebytes = ((size_t)(E + 1) * sizeof(int64_t) + 255) / 256 * 256;
    *cub_bytes = 0;
    cub::DeviceRadixSort::SortPairs(NULL, *cub_bytes, (const int32_t *)NULL, (int32_t *)NULL,
                                    (const int32_t *)NULL, (int32_t *)NULL, (int)nk, 0,
                                    moe_key_bits(E));
    return 4 * *arr + 2 * *ebytes + *cub_bytes;
}

size_t pt_kcuda_moe_plan_bytes(int64_t nk, int E)
{
    if (nk <= 0 || nk > INT32_MAX || E <= 0)
        return 0;
    size_t arr, ebytes, cub_bytes;
    return moe_plan_layout(nk, E, &arr, &ebytes, &cub_bytes);
}

void pt_kcuda_moe_dispatch_plan(pt_kernels *kn,
                                int32_t *pos,         /* (n, k) */
                                int32_t *src,         /* (n·k) */
                                int64_t *counts,      /* (E) */
                                const int32_t *idx,   /* (n, k) */
                                int64_t n, int E, int k, int64_t capacity)
{
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    const int64_t nk = n * k;
    if (E <= 0)
        return;
    if (nk <= 0) {
        PT_CU(kn, cudaMemsetAsync(counts, 0, (size_t)E * sizeof(int64_t), st));
        return;
    }
    if (nk > INT32_MAX) {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "moe_dispatch_plan: %lld assignments",
                      (long long)nk);
        return;
    }
    size_t arr, ebytes, cub_bytes;
    const size_t need = moe_plan_layout(nk, E, &arr, &ebytes, &cub_bytes);
    char *base = (char *)pt_kcuda_scratch(kn, need);
    if (!base)
        return;
    int32_t *keys = (int32_t *)base, *vals = (int32_t *)(base + arr);
    int32_t *skeys = (int32_t *)(base + 2 * arr), *svals = (int32_t *)(base + 3 * arr);
    int64_t *start = (int64_t *)(base + 4 * arr), *first = (int64_t *)(base + 4 * arr + ebytes);
    const unsigned blocks = pt_kcuda_blocks(nk, PT_KCUDA_THREADS);
    PT_LAUNCH(blocks, PT_KCUDA_THREADS, 0, st, moe_plan_keys_kernel)(keys, vals, idx, nk);
    PT_LAUNCHED(kn, "moe_dispatch_plan_keys");
    if (PT_CU(kn, cub::DeviceRadixSort::SortPairs(base + 4 * arr + 2 * ebytes, cub_bytes, keys,
                                                  skeys, vals, svals, (int)nk, 0,
                                                  moe_key_bits(E), st)))
        return;
    PT_LAUNCH(1, PT_KCUDA_THREADS, 0, st, moe_plan_bounds_kernel)(counts, start, first, skeys,
                                                                  nk, E, capacity);
    PT_LAUNCHED(kn, "moe_dispatch_plan_bounds");
    PT_LAUNCH(blocks, PT_KCUDA_THREADS, 0, st, moe_plan_rows_kernel)(pos, src, skeys, svals,
                                                                     counts, start, first, nk,
                                                                     k);
    PT_LAUNCHED(kn, "moe_dispatch_plan_rows");
}

/* ---- Gather and combine ----------------------------------------------------------------- */

/* Row kernels: one block of MOE_ROW_THREADS per row (a grid-stride loop over rows), 8
 * columns a thread with 16-byte accesses where h % 8 == 0 and the pointers are 16-byte
 * aligned (vec), else one. */
enum { MOE_ROW_THREADS = 128 };

static bool moe_vec(int h, const void *a, const void *b, const void *c)
{
    return h % 8 == 0 && ((uintptr_t)a % 16) == 0 && ((uintptr_t)b % 16) == 0 &&
           ((uintptr_t)c % 16) == 0;
}

__global__ void moe_gather_kernel(bf16 *out, const bf16 *x, const int32_t *src, int64_t m,
                                  int h, bool vec)
{
    for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
        const bf16 *from = x + (int64_t)src[i] * h;
        bf16 *to = out + i * h;
        if (vec)
            for (int c = 8 * threadIdx.x; c < h; c += 8 * blockDim.x)
                *reinterpret_cast<uint4 *>(to + c) = *reinterpret_cast<const uint4 *>(from + c);
        else
            for (int c = threadIdx.x; c < h; c += blockDim.x)
                to[c] = from[c];
    }
}

void pt_kcuda_moe_gather_rows(pt_kernels *kn,
                              float *out,             /* (m, h) [act] */
                              const float *x,         /* (n, h) [act] */
                              const int32_t *src,     /* (m) */
                              int64_t m, int h)
{
    if (m <= 0 || h <= 0)
        return;
    PT_LAUNCH(pt_kcuda_blocks(m, 1), MOE_ROW_THREADS, 0, pt_kcuda_ctx(kn)->stream,
              moe_gather_kernel)((bf16 *)out, (const bf16 *)x, src, m, h,
                                 moe_vec(h, out, x, NULL));
    PT_LAUNCHED(kn, "moe_gather_rows");
}

/* dx[t] = dx[t] + Σ_j dout[pos[t,j]], in fp32, rounded once */
__global__ void moe_gather_backward_kernel(bf16 *dx, const bf16 *dout, const int32_t *pos,
                                           int64_t n, int k, int h, bool vec)
{
    for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
        const int32_t *pt = pos + t * k;
        bf16 *d = dx + t * h;
        if (vec) {
            for (int c = 8 * threadIdx.x; c < h; c += 8 * blockDim.x) {
                float acc[8], r[8];
                pt_ld8(acc, d + c);
                for (int j = 0; j < k; j++) {
                    if (pt[j] < 0)
                        continue;
                    pt_ld8(r, dout + (int64_t)pt[j] * h + c);
#pragma unroll
                    for (int u = 0; u < 8; u++)
                        acc[u] += r[u];
                }
                pt_st8(d + c, acc);
            }
        } else {
            for (int c = threadIdx.x; c < h; c += blockDim.x) {
                float acc = pt_ld(d + c);
                for (int j = 0; j < k; j++)
                    if (pt[j] >= 0)
                        acc += pt_ld(dout + (int64_t)pt[j] * h + c);
                pt_st(d + c, acc);
            }
        }
    }
}

void pt_kcuda_moe_gather_rows_backward(pt_kernels *kn,
                                       float *dx,            /* (n, h) [act], += */
                                       const float *dout,    /* (m, h) [act] */
                                       const int32_t *pos,   /* (n, k) */
                                       int64_t n, int k, int h)
{
    if (n <= 0 || h <= 0)
        return;
    PT_LAUNCH(pt_kcuda_blocks(n, 1), MOE_ROW_THREADS, 0, pt_kcuda_ctx(kn)->stream,
              moe_gather_backward_kernel)((bf16 *)dx, (const bf16 *)dout, pos, n, k, h,
                                          moe_vec(h, dx, dout, NULL));
    PT_LAUNCHED(kn, "moe_gather_rows_backward");
}

/* out[t] = Σ_j w[t,j]·y[pos[t,j]], from 0 in fp32, rounded once */
__global__ void moe_combine_forward_kernel(bf16 *out, const bf16 *y, const int32_t *pos,
                                           const float *w, int64_t n, int k, int h, bool vec)
{
    for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
        const int32_t *pt = pos + t * k;
        const float *wt = w + t * k;
        bf16 *o = out + t * h;
        if (vec) {
            for (int c = 8 * threadIdx.x; c < h; c += 8 * blockDim.x) {
                float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, r[8];
                for (int j = 0; j < k; j++) {
                    if (pt[j] < 0)
                        continue;
                    pt_ld8(r, y + (int64_t)pt[j] * h + c);
#pragma unroll
                    for (int u = 0; u < 8; u++)
                        acc[u] += wt[j] * r[u];
                }
                pt_st8(o + c, acc);
            }
        } else {
            for (int c = threadIdx.x; c < h; c += blockDim.x) {
                float acc = 0.0f;
                for (int j = 0; j < k; j++)
                    if (pt[j] >= 0)
                        acc += wt[j] * pt_ld(y + (int64_t)pt[j] * h + c);
                pt_st(o + c, acc);
            }
        }
    }
}

void pt_kcuda_moe_combine_forward(pt_kernels *kn,
                                  float *out,          /* (n, h) [act], written */
                                  const float *y,      /* (m, h) [act] */
                                  const int32_t *pos,  /* (n, k) */
                                  const float *w,      /* (n, k) fp32 */
                                  int64_t n, int k, int h)
{
    if (n <= 0 || h <= 0)
        return;
    PT_LAUNCH(pt_kcuda_blocks(n, 1), MOE_ROW_THREADS, 0, pt_kcuda_ctx(kn)->stream,
              moe_combine_forward_kernel)((bf16 *)out, (const bf16 *)y, pos, w, n, k, h,
                                          moe_vec(h, out, y, NULL));
    PT_LAUNCHED(kn, "moe_combine_forward");
}

/* One block per token: for each slot j, dy's row = w·dout[t] and dw[t,j] = the block's
 * fixed-tree sum of dout[t]·y[pos] (pt_block_sum). */
__global__ void moe_combine_backward_kernel(bf16 *dy, float *dw, const bf16 *dout,
                                            const bf16 *y, const int32_t *pos, const float *w,
                                            int64_t n, int k, int h, bool vec)
{
    __shared__ float shared[32];
    for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
        const bf16 *d = dout + t * h;
        for (int j = 0; j < k; j++) {
            const int32_t p = pos[t * k + j];
            if (p < 0) { /* the same for every thread of the block: no one waits alone */
                if (threadIdx.x == 0)
                    dw[t * k + j] = 0.0f;
                continue;
            }
            const float wj = w[t * k + j];
            const bf16 *yr = y + (int64_t)p * h;
            bf16 *dr = dy + (int64_t)p * h;
            float dot = 0.0f;
            if (vec) {
                for (int c = 8 * threadIdx.x; c < h; c += 8 * blockDim.x) {
                    float a[8], b[8];
                    pt_ld8(a, d + c);
                    pt_ld8(b, yr + c);
#pragma unroll
                    for (int u = 0; u < 8; u++) {
                        dot += a[u] * b[u];
                        a[u] *= wj;
                    }
                    pt_st8(dr + c, a);
                }
            } else {
                for (int c = threadIdx.x; c < h; c += blockDim.x) {
                    const float a = pt_ld(d + c);
                    dot += a * pt_ld(yr + c);
                    pt_st(dr + c, wj * a);
                }
            }
            dot = pt_block_sum(dot, shared);
            if (threadIdx.x == 0)
                dw[t * k + j] = dot;
        }
    }
}

void pt_kcuda_moe_combine_backward(pt_kernels *kn,
                                   float *dy,           /* (m, h) [act], written */
                                   float *dw,           /* (n, k) fp32, written */
                                   const float *dout,   /* (n, h) [act] */
                                   const float *y,      /* (m, h) [act] */
                                   const int32_t *pos,  /* (n, k) */
                                   const float *w,      /* (n, k) fp32 */
                                   int64_t n, int k, int h)
{
    if (n <= 0)
        return;
    PT_LAUNCH(pt_kcuda_blocks(n, 1), MOE_ROW_THREADS, 0, pt_kcuda_ctx(kn)->stream,
              moe_combine_backward_kernel)((bf16 *)dy, dw, (const bf16 *)dout,
                                           (const bf16 *)y, pos, w, n, k, h,
                                           moe_vec(h, dy, dout, y));
    PT_LAUNCHED(kn, "moe_combine_backward");
}

/* ---- Grouped linear layers ---------------------------------------------------------------- */

void pt_kcuda_matmul_grouped_forward(pt_kernels *kn,
                                     float *out,             /* (m, oc) [act] */
                                     const float *inp,       /* (m, ic) [act] */
                                     const float *w,         /* (G, oc, ic) [act] */
                                     const int64_t *counts,  /* (G) host */
                                     int G, int ic, int oc)
{
    bf16 *o = (bf16 *)out;
    const bf16 *in = (const bf16 *)inp, *wb = (const bf16 *)w;
    int64_t row = 0;
    for (int g = 0; g < G; g++) {
        if (counts[g] > 0)
            pt_kcuda_matmul_forward(kn, (float *)(o + row * oc), (const float *)(in + row * ic),
                                    (const float *)(wb + (int64_t)g * oc * ic), NULL,
                                    counts[g], ic, oc);
        row += counts[g] > 0 ? counts[g] : 0;
    }
}

void pt_kcuda_matmul_grouped_backward(pt_kernels *kn,
                                      float *dinp,            /* (m, ic) [act] or NULL */
                                      float *dw,              /* (G, oc, ic) fp32 or NULL */
                                      const float *dout,      /* (m, oc) [act] */
                                      const float *inp,       /* (m, ic) [act] */
                                      const float *w,         /* (G, oc, ic) [act] */
                                      const int64_t *counts,  /* (G) host */
                                      int G, int ic, int oc)
{
    bf16 *di = (bf16 *)dinp;
    const bf16 *d = (const bf16 *)dout, *in = (const bf16 *)inp, *wb = (const bf16 *)w;
    int64_t row = 0;
    for (int g = 0; g < G; g++) {
        const int64_t wo = (int64_t)g * oc * ic;
        if (counts[g] > 0)
            pt_kcuda_matmul_backward(kn, di ? (float *)(di + row * ic) : NULL,
                                     dw ? dw + wo : NULL, NULL, (const float *)(d + row * oc),
                                     (const float *)(in + row * ic),
                                     (const float *)(wb + wo), counts[g], ic, oc);
        row += counts[g] > 0 ? counts[g] : 0;
    }
}
