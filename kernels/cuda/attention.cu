/*
 * Causal attention with grouped queries on CUDA, over one K/V block (context
 * parallelism merges blocks with attention_combine), in the manner of FlashAttention
 * (Dao et al. 2022; FlashAttention-2, Dao 2023), written for clarity first: fp32 FMAs
 * on CUDA cores from bf16 tiles in shared memory. Head dimensions 64 and 128 take the
 * tensor-core kernels of attention_tc.cu; these are the reference they are tested
 * against and the path for every other head dimension (and for all with
 * PT_KCUDA_SIMPLE_ATTN=1).
 *
 * Tiling. A block of 256 threads owns a tile of 64 rows (queries in the forward and in
 * dQ, keys in dK/dV) of one head of one sequence and walks the 64-row tiles of the
 * other side. Thread (ty, tx) = (tid / 16, tid % 16) holds the 4 x 4 scores of rows
 * ty + 16i and columns tx + 16j of a 64 x 64 score tile, and the accumulators of rows
 * ty + 16i and head-dimension columns tx + 16jj (jj < DJ; DJ = 4 for d <= 64, 8 for
 * d <= 128). A row's 16 score-holders are 16 consecutive lanes of one warp, so row
 * maxima and sums are butterfly shuffles within them. Shared bf16 tiles have a row
 * stride of an odd number of 4-byte words, so the 16 rows read at once fall in 16
 * different banks.
 *
 * Forward: online softmax in fp32 (running max m, running sum l, the output rescaled
 * when the max grows); out = acc / l, lse = m + log(l); a row that sees no key gets
 * out = 0 and lse = -inf (kernels.h). Causal masking uses the absolute positions:
 * query i (position q0 + i) sees key j (position k0 + j) when k0 + j <= q0 + i.
 *
 * Backward (FlashAttention-2's recomputation, no atomics): first D_i = dout_i · out_i;
 * then one kernel per key tile computes dK and dV by walking every query tile of every
 * query head of its group (GQA: query head hq uses KV head hq / (a / kh)), and a
 * second kernel per query tile computes dQ by walking the key tiles. Each gradient
 * element is owned by one thread and summed in a fixed order, then added (+=) to the
 * bf16 gradient once. P = exp(scale · q·k - lse), dS = P ∘ (dout·v - D),
 * dV += P^T dout, dK += scale · dS^T q, dQ += scale · dS k, as kernels/cpu/attention.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.cuh"

enum { BT = 64, ATT_THREADS = 256, PLD = BT + 1, DMAX = 128 };

/* row stride of a bf16 tile: d rounded up to 4, plus 2, an odd number of words */
static __host__ __device__ int tile_lds(int d) { return (d + 3) / 4 * 4 + 2; }

static size_t fwd_smem_bytes(int d)
{
    return (size_t)3 * BT * tile_lds(d) * sizeof(bf16) + (size_t)BT * PLD * sizeof(float);
}

static size_t bwd_smem_bytes(int d)
{
    return (size_t)4 * BT * tile_lds(d) * sizeof(bf16) + (size_t)BT * PLD * sizeof(float) +
           (size_t)2 * BT * sizeof(float);
}

/* the number of keys query row i can see: keys j < skv with k0 + j <= q0 + i */
static __host__ __device__ int attn_visible(int64_t i, int skv, int q0, int k0, int causal)
{
    if (!causal)
        return skv;
    int64_t nv = (int64_t)q0 + i - k0 + 1;
    return nv < 0 ? 0 : nv > skv ? skv : (int)nv;
}

/* rows [0, rows) of a 64-row tile from global memory (row stride ld), zeros below */
static __device__ void load_tile(bf16 *dst, int lds, const bf16 *src, int64_t ld, int rows, int d)
{
    for (int e = threadIdx.x; e < BT * d; e += ATT_THREADS) {
        int r = e / d, c = e % d;
        dst[r * lds + c] = r < rows ? src[r * ld + c] : __float2bfloat16(0.0f);
    }
}

static __device__ __forceinline__ float group16_max(float x)
{
    for (int o = 8; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

static __device__ __forceinline__ float group16_sum(float x)
{
    for (int o = 8; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* s[i][j] = A[ty + 16i] · B[tx + 16j] over d columns, A and B bf16 tiles (stride lds) */
static __device__ __forceinline__ void tile_dots(float s[4][4], const bf16 *A, const bf16 *B,
                                                 int lds, int d, int ty, int tx)
{
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            s[i][j] = 0.0f;
    for (int c = 0; c < d; c++) {
        float av[4], bv[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            av[i] = __bfloat162float(A[(ty + 16 * i) * lds + c]);
#pragma unroll
        for (int j = 0; j < 4; j++)
            bv[j] = __bfloat162float(B[(tx + 16 * j) * lds + c]);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                s[i][j] += av[i] * bv[j];
    }
}

/* acc[i][jj] += sum over kk < n of P[ty + 16i][kk] · B[kk][tx + 16jj]: P fp32 (stride
 * PLD), B a bf16 tile (stride lds) */
template <int DJ>
static __device__ __forceinline__ void tile_pv(float acc[4][DJ], const float *P, const bf16 *B,
                                               int lds, int d, int n, int ty, int tx)
{
    for (int kk = 0; kk < n; kk++) {
        float pv[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            pv[i] = P[(ty + 16 * i) * PLD + kk];
#pragma unroll
        for (int jj = 0; jj < DJ; jj++) {
            int c = tx + 16 * jj;
            float bv = c < d ? __bfloat162float(B[kk * lds + c]) : 0.0f;
#pragma unroll
            for (int i = 0; i < 4; i++)
                acc[i][jj] += pv[i] * bv;
        }
    }
}

/* ---- Forward -------------------------------------------------------------------------------- */

/* grid (query tiles, a, b) */
template <int DJ>
__global__ void __launch_bounds__(ATT_THREADS)
attn_forward_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int sq,
                    int skv, int a, int kh, int d, int q0, int k0, int causal, float scale)
{
    PT_DYNAMIC_SMEM(smem);
    const int lds = tile_lds(d);
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + BT * lds, *Vs = Ks + BT * lds;
    float *Ps = (float *)(Vs + BT * lds);
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int i0 = blockIdx.x * BT, hq = blockIdx.y, bi = blockIdx.z;
    const int hk = hq / (a / kh);
    const int64_t ldq = (int64_t)a * d, ldk = (int64_t)kh * d;
    const int bq = sq - i0 < BT ? sq - i0 : BT;
    const bf16 *kb = k + (int64_t)bi * skv * ldk + (int64_t)hk * d;
    const bf16 *vb = v + (int64_t)bi * skv * ldk + (int64_t)hk * d;

    load_tile(Qs, lds, q + ((int64_t)bi * sq + i0) * ldq + (int64_t)hq * d, ldq, bq, d);
    const int kmax = attn_visible(i0 + bq - 1, skv, q0, k0, causal);

    float m[4], l[4], acc[4][DJ];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int jj = 0; jj < DJ; jj++)
            acc[i][jj] = 0.0f;
    }

    for (int j0 = 0; j0 < kmax; j0 += BT) {
        const int bk = skv - j0 < BT ? skv - j0 : BT;
        __syncthreads(); /* the previous tile's readers are done */
        load_tile(Ks, lds, kb + (int64_t)j0 * ldk, ldk, bk, d);
        load_tile(Vs, lds, vb + (int64_t)j0 * ldk, ldk, bk, d);
        __syncthreads();
        float s[4][4];
        tile_dots(s, Qs, Ks, lds, d, ty, tx);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int nv = attn_visible(i0 + ty + 16 * i, skv, q0, k0, causal);
            float mt = -INFINITY;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int kj = j0 + tx + 16 * j;
                s[i][j] = kj < nv ? s[i][j] * scale : -INFINITY;
                mt = fmaxf(mt, s[i][j]);
            }
            const float mnew = fmaxf(m[i], group16_max(mt));
            float alpha = 1.0f, rowsum = 0.0f;
            if (mnew != -INFINITY) {
                alpha = expf(m[i] - mnew); /* 0 while m was -inf */
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    s[i][j] = expf(s[i][j] - mnew); /* exp(-inf) = 0 for masked keys */
                    rowsum += s[i][j];
                }
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++)
                    s[i][j] = 0.0f;
            }
            l[i] = l[i] * alpha + group16_sum(rowsum);
            m[i] = mnew;
#pragma unroll
            for (int jj = 0; jj < DJ; jj++)
                acc[i][jj] *= alpha;
#pragma unroll
            for (int j = 0; j < 4; j++)
                Ps[(ty + 16 * i) * PLD + tx + 16 * j] = s[i][j];
        }
        __syncthreads();
        tile_pv<DJ>(acc, Ps, Vs, lds, d, bk, ty, tx);
    }

#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = ty + 16 * i;
        if (r >= bq)
            continue;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        bf16 *o = out + ((int64_t)bi * sq + i0 + r) * ldq + (int64_t)hq * d;
#pragma unroll
        for (int jj = 0; jj < DJ; jj++) {
            const int c = tx + 16 * jj;
            if (c < d)
                pt_st(o + c, acc[i][jj] * inv);
        }
        if (tx == 0)
            lse[((int64_t)bi * a + hq) * sq + i0 + r] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
}

/* ---- Backward ------------------------------------------------------------------------------- */

/* D[(bi·a + hq)·sq + i] = dout_i · out_i, one warp per row */
__global__ void attn_bwd_dot_kernel(float *D, const bf16 *dout, const bf16 *out, int b, int sq,
                                    int a, int d)
{
    const int lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * (ATT_THREADS / 32) + threadIdx.x / 32;
    if (row >= (int64_t)b * sq * a)
        return;
    /* row = (bi · sq + i) · a + hq: the layout of out */
    const int hq = (int)(row % a);
    const int64_t bs = row / a, bi = bs / sq, i = bs % sq;
    const bf16 *g = dout + row * d, *o = out + row * d;
    float s = 0.0f;
    for (int c = lane; c < d; c += 32)
        s += pt_ld(g + c) * pt_ld(o + c);
    s = pt_warp_sum(s);
    if (lane == 0)
        D[(bi * a + hq) * sq + i] = s;
}

/* the 64 rows of lse and D of query tile i0 of head hq into shared memory; rows past the
 * sequence get lse = -inf, which masks them */
static __device__ void load_row_stats(float *lse_s, float *D_s, const float *lse, const float *D,
                                      int64_t base, int bq)
{
    for (int r = threadIdx.x; r < BT; r += ATT_THREADS) {
        lse_s[r] = r < bq ? lse[base + r] : -INFINITY;
        D_s[r] = r < bq ? D[base + r] : 0.0f;
    }
}

/* grid (key tiles, kh, b): dK and dV of 64 keys of one KV head, over every query tile of
 * every query head of its group */
template <int DJ>
__global__ void __launch_bounds__(ATT_THREADS)
attn_bwd_dkdv_kernel(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k,
                     const bf16 *v, const float *lse, const float *D, int sq, int skv, int a,
                     int kh, int d, int q0, int k0, int causal, float scale)
{
    PT_DYNAMIC_SMEM(smem);
    const int lds = tile_lds(d);
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + BT * lds, *Qs = Vs + BT * lds, *Gs = Qs + BT * lds;
    float *Ps = (float *)(Gs + BT * lds), *lse_s = Ps + BT * PLD, *D_s = lse_s + BT;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int j0 = blockIdx.x * BT, hk = blockIdx.y, bi = blockIdx.z;
    const int group = a / kh;
    const int64_t ldq = (int64_t)a * d, ldk = (int64_t)kh * d;
    const int bk = skv - j0 < BT ? skv - j0 : BT;
    const int64_t koff = ((int64_t)bi * skv + j0) * ldk + (int64_t)hk * d;

    load_tile(Ks, lds, k + koff, ldk, bk, d);
    load_tile(Vs, lds, v + koff, ldk, bk, d);
    float dk_acc[4][DJ], dv_acc[4][DJ];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int jj = 0; jj < DJ; jj++)
            dk_acc[i][jj] = dv_acc[i][jj] = 0.0f;

    /* the first query that sees key j0 is i = k0 + j0 - q0 */
    int64_t first = causal ? (int64_t)k0 + j0 - q0 : 0;
    first = first < 0 ? 0 : first;
    for (int hq = hk * group; hq < (hk + 1) * group; hq++)
        for (int64_t i0 = first / BT * BT; i0 < sq; i0 += BT) {
            const int bq = sq - i0 < BT ? (int)(sq - i0) : BT;
            const int64_t qoff = ((int64_t)bi * sq + i0) * ldq + (int64_t)hq * d;
            __syncthreads(); /* the previous tile's readers are done */
            load_tile(Qs, lds, q + qoff, ldq, bq, d);
            load_tile(Gs, lds, dout + qoff, ldq, bq, d);
            load_row_stats(lse_s, D_s, lse, D, ((int64_t)bi * a + hq) * sq + i0, bq);
            __syncthreads();
            float s[4][4], dp[4][4]; /* rows: keys ty + 16i; columns: queries tx + 16j */
            tile_dots(s, Ks, Qs, lds, d, ty, tx);
            tile_dots(dp, Vs, Gs, lds, d, ty, tx);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int kr = j0 + ty + 16 * i, qc = tx + 16 * j;
                    const float ls = lse_s[qc];
                    const int ok = kr < skv && !isinf(ls) &&
                                   kr < attn_visible(i0 + qc, skv, q0, k0, causal);
                    const float p = ok ? expf(s[i][j] * scale - ls) : 0.0f;
                    s[i][j] = p;
                    dp[i][j] = ok ? p * (dp[i][j] - D_s[qc]) : 0.0f; /* dS, unscaled */
                    Ps[(ty + 16 * i) * PLD + tx + 16 * j] = p;
                }
            __syncthreads();
            tile_pv<DJ>(dv_acc, Ps, Gs, lds, d, bq, ty, tx); /* dV += P^T dout */
            __syncthreads();
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    Ps[(ty + 16 * i) * PLD + tx + 16 * j] = dp[i][j];
            __syncthreads();
            tile_pv<DJ>(dk_acc, Ps, Qs, lds, d, bq, ty, tx); /* dK += dS^T q (scaled below) */
        }

#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = ty + 16 * i;
        if (r >= bk)
            continue;
        bf16 *dkr = dk + koff + (int64_t)r * ldk, *dvr = dv + koff + (int64_t)r * ldk;
#pragma unroll
        for (int jj = 0; jj < DJ; jj++) {
            const int c = tx + 16 * jj;
            if (c < d) {
                pt_st(dkr + c, pt_ld(dkr + c) + scale * dk_acc[i][jj]);
                pt_st(dvr + c, pt_ld(dvr + c) + dv_acc[i][jj]);
            }
        }
    }
}

/* grid (query tiles, a, b): dQ of 64 queries of one head, over the key tiles they see */
template <int DJ>
__global__ void __launch_bounds__(ATT_THREADS)
attn_bwd_dq_kernel(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                   const float *lse, const float *D, int sq, int skv, int a, int kh, int d,
                   int q0, int k0, int causal, float scale)
{
    PT_DYNAMIC_SMEM(smem);
    const int lds = tile_lds(d);
    bf16 *Qs = (bf16 *)smem, *Gs = Qs + BT * lds, *Ks = Gs + BT * lds, *Vs = Ks + BT * lds;
    float *Ps = (float *)(Vs + BT * lds), *lse_s = Ps + BT * PLD, *D_s = lse_s + BT;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int i0 = blockIdx.x * BT, hq = blockIdx.y, bi = blockIdx.z;
    const int hk = hq / (a / kh);
    const int64_t ldq = (int64_t)a * d, ldk = (int64_t)kh * d;
    const int bq = sq - i0 < BT ? sq - i0 : BT;
    const int64_t qoff = ((int64_t)bi * sq + i0) * ldq + (int64_t)hq * d;
    const bf16 *kb = k + (int64_t)bi * skv * ldk + (int64_t)hk * d;
    const bf16 *vb = v + (int64_t)bi * skv * ldk + (int64_t)hk * d;

    load_tile(Qs, lds, q + qoff, ldq, bq, d);
    load_tile(Gs, lds, dout + qoff, ldq, bq, d);
    load_row_stats(lse_s, D_s, lse, D, ((int64_t)bi * a + hq) * sq + i0, bq);
    float dq_acc[4][DJ];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int jj = 0; jj < DJ; jj++)
            dq_acc[i][jj] = 0.0f;

    const int kmax = attn_visible(i0 + bq - 1, skv, q0, k0, causal);
    for (int j0 = 0; j0 < kmax; j0 += BT) {
        const int bk = skv - j0 < BT ? skv - j0 : BT;
        __syncthreads();
        load_tile(Ks, lds, kb + (int64_t)j0 * ldk, ldk, bk, d);
        load_tile(Vs, lds, vb + (int64_t)j0 * ldk, ldk, bk, d);
        __syncthreads();
        float s[4][4], dp[4][4]; /* rows: queries ty + 16i; columns: keys tx + 16j */
        tile_dots(s, Qs, Ks, lds, d, ty, tx);
        tile_dots(dp, Gs, Vs, lds, d, ty, tx);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int qr = ty + 16 * i;
            const float ls = lse_s[qr];
            const int nv = isinf(ls) ? 0 : attn_visible(i0 + qr, skv, q0, k0, causal);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int kj = j0 + tx + 16 * j;
                const float p = kj < nv ? expf(s[i][j] * scale - ls) : 0.0f;
                Ps[qr * PLD + tx + 16 * j] = kj < nv ? p * (dp[i][j] - D_s[qr]) : 0.0f;
            }
        }
        __syncthreads();
        tile_pv<DJ>(dq_acc, Ps, Ks, lds, d, bk, ty, tx); /* dQ += dS k (scaled below) */
    }

#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = ty + 16 * i;
        if (r >= bq)
            continue;
        bf16 *dqr = dq + qoff + (int64_t)r * ldq;
#pragma unroll
        for (int jj = 0; jj < DJ; jj++) {
            const int c = tx + 16 * jj;
            if (c < d)
                pt_st(dqr + c, pt_ld(dqr + c) + scale * dq_acc[i][jj]);
        }
    }
}

/* ---- Combine ------------------------------------------------------------------------------- */

/* one warp per row (bi, hq, i), as kernels/cpu/attention.c */
__global__ void attn_combine_kernel(bf16 *out, float *lse, const bf16 *out2, const float *lse2,
                                    int b, int sq, int a, int d)
{
    const int lane = threadIdx.x % 32;
    const int64_t li = (int64_t)blockIdx.x * (ATT_THREADS / 32) + threadIdx.x / 32;
    if (li >= (int64_t)b * a * sq)
        return;
    /* li = (bi · a + hq) · sq + i */
    const int64_t i = li % sq, hq = li / sq % a, bi = li / sq / a;
    const int64_t oi = ((bi * sq + i) * a + hq) * d;
    const float l1 = lse[li], l2 = lse2[li];
    if (l2 == -INFINITY)
        return;
    float w1 = 0.0f, w2 = 1.0f, l = l2;
    if (l1 != -INFINITY) {
        const float mx = l1 > l2 ? l1 : l2;
        l = mx + logf(expf(l1 - mx) + expf(l2 - mx));
        w1 = expf(l1 - l);
        w2 = expf(l2 - l);
    }
    for (int c = lane; c < d; c += 32) {
        if (l1 == -INFINITY)
            out[oi + c] = out2[oi + c]; /* a copy, as the CPU's memcpy */
        else
            pt_st(out + oi + c, w1 * pt_ld(out + oi + c) + w2 * pt_ld(out2 + oi + c));
    }
    __syncwarp(); /* every lane has read lse[li] */
    if (lane == 0)
        lse[li] = l;
}

/* ---- The table's entries ------------------------------------------------------------------- */

template <typename K> static int raise_smem(pt_kernels *kn, K kernel, size_t bytes)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (bytes > ctx->smem_optin) {
        pt_kcuda_fail(kn, __FILE__, __LINE__,
                      "attention needs %zu bytes of shared memory per block, the device "
                      "allows %zu", bytes, ctx->smem_optin);
        return -1;
    }
    return PT_CU(kn, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)bytes));
}

/* Raises the shared-memory limit of each attention kernel to what its largest head
 * dimension needs (d = 64 for DJ = 4, d = 128 for DJ = 8). */
int pt_kcuda_attention_init(pt_kernels *kn)
{
    const char *simple = getenv("PT_KCUDA_SIMPLE_ATTN");
    if (!(simple && simple[0] && strcmp(simple, "0") != 0) && pt_kcuda_attn_tc_init(kn))
        return -1;
    return raise_smem(kn, attn_forward_kernel<4>, fwd_smem_bytes(64)) ||
           raise_smem(kn, attn_forward_kernel<8>, fwd_smem_bytes(128)) ||
           raise_smem(kn, attn_bwd_dkdv_kernel<4>, bwd_smem_bytes(64)) ||
           raise_smem(kn, attn_bwd_dkdv_kernel<8>, bwd_smem_bytes(128)) ||
           raise_smem(kn, attn_bwd_dq_kernel<4>, bwd_smem_bytes(64)) ||
           raise_smem(kn, attn_bwd_dq_kernel<8>, bwd_smem_bytes(128));
}

/* sizes the kernels take; records an error and returns -1 otherwise */
static int attn_check(pt_kernels *kn, int b, int sq, int a, int kh, int d)
{
    if (d < 1 || d > DMAX || kh < 1 || a % kh != 0 || b > 65535 || a > 65535) {
        pt_kcuda_fail(kn, __FILE__, __LINE__,
                      "attention: unsupported sizes b %d a %d kh %d head dim %d (need head dim "
                      "1..%d, a a multiple of kh)", b, a, kh, d, DMAX);
        return -1;
    }
    return 0;
}

void pt_kcuda_attention_forward(pt_kernels *kn,
                                float *out,         /* (b, sq, a, d) [act] */
                                float *lse,         /* (b, a, sq) fp32 */
                                const float *q,     /* (b, sq, a, d) [act] */
                                const float *k,     /* (b, skv, kh, d) [act] */
                                const float *v,     /* (b, skv, kh, d) [act] */
                                int b, int sq, int skv, int a, int kh, int d,
                                int q0, int k0, int causal)
{
    if (b <= 0 || sq <= 0 || a <= 0 || attn_check(kn, b, sq, a, kh, d))
        return;
    const void *ptrs[] = {out, q, k, v};
    if (pt_kcuda_attn_tc_ok(kn, d, ptrs, 4)) {
        pt_kcuda_attn_tc_forward(kn, (bf16 *)out, lse, (const bf16 *)q, (const bf16 *)k,
                                 (const bf16 *)v, b, sq, skv, a, kh, d, q0, k0, causal);
        return;
    }
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    const float scale = 1.0f / sqrtf((float)d);
    dim3 grid((unsigned)((sq + BT - 1) / BT), (unsigned)a, (unsigned)b);
    /* DJ = 4 accumulator columns a thread for d <= 64, 8 up to 128 */
    auto attn_forward = d <= 64 ? attn_forward_kernel<4> : attn_forward_kernel<8>;
    PT_LAUNCH(grid, ATT_THREADS, fwd_smem_bytes(d), st, attn_forward)((bf16 *)out, lse,
        (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, sq, skv, a, kh, d, q0, k0, causal,
        scale);
    PT_LAUNCHED(kn, "attention_forward");
}

void pt_kcuda_attention_backward(pt_kernels *kn,
                                 float *dq,         /* (b, sq, a, d) [act] */
                                 float *dk,         /* (b, skv, kh, d) [act] */
                                 float *dv,         /* (b, skv, kh, d) [act] */
                                 const float *dout, /* (b, sq, a, d) [act] */
                                 const float *q,    /* (b, sq, a, d) [act] */
                                 const float *k,    /* (b, skv, kh, d) [act] */
                                 const float *v,    /* (b, skv, kh, d) [act] */
                                 const float *out,  /* (b, sq, a, d) [act] final */
                                 const float *lse,  /* (b, a, sq) final */
                                 int b, int sq, int skv, int a, int kh, int d,
                                 int q0, int k0, int causal, int accumulate)
{
    if (b <= 0 || sq <= 0 || skv <= 0 || a <= 0 || attn_check(kn, b, sq, a, kh, d))
        return;
    if (!accumulate) { /* written: zeroed, then summed into as below */
        pt_kcuda_zero(kn, dq, (size_t)b * sq * a * d * sizeof(bf16));
        pt_kcuda_zero(kn, dk, (size_t)b * skv * kh * d * sizeof(bf16));
        pt_kcuda_zero(kn, dv, (size_t)b * skv * kh * d * sizeof(bf16));
    }
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    const float scale = 1.0f / sqrtf((float)d);
    const int64_t rows = (int64_t)b * sq * a;
    float *D = (float *)pt_kcuda_scratch(kn, (size_t)rows * sizeof(float));
    if (!D)
        return;
    PT_LAUNCH((unsigned)((rows + ATT_THREADS / 32 - 1) / (ATT_THREADS / 32)), ATT_THREADS, 0, st,
              attn_bwd_dot_kernel)(
        D, (const bf16 *)dout, (const bf16 *)out, b, sq, a, d);
    PT_LAUNCHED(kn, "attention_backward_dot");
    const void *ptrs[] = {dq, dk, dv, dout, q, k, v};
    if (pt_kcuda_attn_tc_ok(kn, d, ptrs, 7)) {
        pt_kcuda_attn_tc_backward(kn, (bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout,
                                  (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, lse, D, b,
                                  sq, skv, a, kh, d, q0, k0, causal);
        return;
    }
    dim3 kgrid((unsigned)((skv + BT - 1) / BT), (unsigned)kh, (unsigned)b);
    dim3 qgrid((unsigned)((sq + BT - 1) / BT), (unsigned)a, (unsigned)b);
    size_t smem = bwd_smem_bytes(d);
    /* DJ = 4 accumulator columns a thread for d <= 64, 8 up to 128 */
    auto attn_bwd_dkdv = d <= 64 ? attn_bwd_dkdv_kernel<4> : attn_bwd_dkdv_kernel<8>;
    auto attn_bwd_dq = d <= 64 ? attn_bwd_dq_kernel<4> : attn_bwd_dq_kernel<8>;
    PT_LAUNCH(kgrid, ATT_THREADS, smem, st, attn_bwd_dkdv)((bf16 *)dk, (bf16 *)dv,
        (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, lse, D, sq, skv, a,
        kh, d, q0, k0, causal, scale);
    PT_LAUNCH(qgrid, ATT_THREADS, smem, st, attn_bwd_dq)((bf16 *)dq, (const bf16 *)dout,
        (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, lse, D, sq, skv, a, kh, d, q0, k0,
        causal, scale);
    PT_LAUNCHED(kn, "attention_backward");
}

void pt_kcuda_attention_combine(pt_kernels *kn,
                                float *out,         /* (b, sq, a, d) [act] in/out */
                                float *lse,         /* (b, a, sq) in/out */
                                const float *out2,  /* (b, sq, a, d) [act] */
                                const float *lse2,  /* (b, a, sq) */
                                int b, int sq, int a, int d)
{
    const int64_t rows = (int64_t)b * a * sq;
    if (rows <= 0)
        return;
    PT_LAUNCH((unsigned)((rows + ATT_THREADS / 32 - 1) / (ATT_THREADS / 32)), ATT_THREADS, 0,
              pt_kcuda_ctx(kn)->stream, attn_combine_kernel)(
        (bf16 *)out, lse, (const bf16 *)out2, lse2, b, sq, a, d);
    PT_LAUNCHED(kn, "attention_combine");
}
