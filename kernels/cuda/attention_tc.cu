/*
 * Causal attention with grouped queries on the tensor cores, for head dimensions 64 and
 * 128: the fast path of attention.cu, which keeps its CUDA-core kernels as the
 * reference and the fallback for every other shape (and for PT_KCUDA_SIMPLE_ATTN=1).
 * Same contract as kernels.h: one K/V block, absolute positions for causal masking,
 * lse in natural log, a row that sees no key gets out = 0 and lse = -inf; the
 * backward accumulates (+=) into bf16 dq, dk, dv.
 *
 * The design is FlashAttention-2's (Dao 2023, sections 3.1-3.3): a block of 4 warps
 * owns 64 rows; each warp owns 16 of them and computes its scores with
 * mma.sync.m16n8k16 (bf16 in, fp32 accumulate; PTX ISA, "Matrix fragments for
 * mma.m16n8k16"), keeps the online softmax in the accumulator registers, and feeds the
 * probabilities back as the A operand of the next product without leaving registers
 * (the accumulator layout of two adjacent n=8 tiles is the A layout of one k=16 step).
 * Tiles reach shared memory through cp.async, double-buffered, with rows padded by 16
 * bytes so the eight row addresses of an ldmatrix fall in distinct banks.
 *
 * Backward without atomics, so results stay bit-identical run to run: one kernel per
 * 64-key tile computes dK and dV over every query tile of every query head of its
 * group; a second kernel per 64-query tile computes dQ over the key tiles. Each
 * recomputes P = exp(scale·QK^T - lse) and dP = dO·V^T; that is seven tile products
 * where FlashAttention-2's atomic dQ needs five, the price of determinism.
 * Softmax arithmetic is in base 2 (exp2f of scores pre-multiplied by log2(e)).
 */
#include <math.h>
#include <stdint.h>

#include "cuda.cuh"

namespace {

constexpr int TC_ROWS = 64;     /* rows of a block's own tile */
constexpr int TC_COLS = 64;     /* rows of each tile of the other side */
constexpr int TC_THREADS = 128; /* 4 warps of 16 rows */
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

/* ---- PTX wrappers ----------------------------------------------------------------------
 * Under PT_CUDA_EMU the same operations run in the emulator (kernels/emu/pt_emu.h), which
 * implements the PTX ISA's fragment layouts; ldmatrix and mma are warp collectives there
 * too, and cp.async lands at issue or at the wait that covers its group. */

__device__ __forceinline__ void cp16(void *dst, const void *src, bool valid)
{
#ifdef PT_CUDA_EMU
    pt_emu::cp_async(dst, src, 16, valid ? 16 : 0);
#else
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    /* src-size 0 fills the 16 bytes with zeros and reads nothing (PTX ISA, cp.async) */
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
                 "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_commit()
{
#ifdef PT_CUDA_EMU
    pt_emu::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void cp_wait()
{
#ifdef PT_CUDA_EMU
    pt_emu::cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__device__ __forceinline__ void ldsm4(uint32_t r[4], const bf16 *p)
{
#ifdef PT_CUDA_EMU
    pt_emu::ldmatrix_x4(r, p, false);
#else
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#endif
}
__device__ __forceinline__ void ldsm4t(uint32_t r[4], const bf16 *p)
{
#ifdef PT_CUDA_EMU
    pt_emu::ldmatrix_x4(r, p, true);
#else
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#endif
}

/* c (16x8 fp32) += a (16x16 bf16, row) · b (16x8 bf16, col) */
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
#ifdef PT_CUDA_EMU
    pt_emu::mma_m16n8k16_bf16(c, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ uint32_t pack(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); /* .x (lo) in the low half */
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* ---- Fragments --------------------------------------------------------------------------- */

/* The A fragment of rows [r0, r0+16) and columns [c0, c0+16) of a row-major tile. */
__device__ __forceinline__ void frag_a(uint32_t a[4], const bf16 *t, int lds, int r0, int c0,
                                       int lane)
{
    ldsm4(a, t + (r0 + (lane & 15)) * lds + c0 + (lane >> 4) * 8);
}

/* B fragments of two n-tiles, b = rows [n0, n0+16) of a row-major tile read as its
 * transpose (k = tile columns [c0, c0+16)): b[0..1] for rows n0.., b[2..3] for n0+8.. */
__device__ __forceinline__ void frag_bt(uint32_t b[4], const bf16 *t, int lds, int n0, int c0,
                                        int lane)
{
    ldsm4(b, t + (n0 + (lane & 7) + (lane >> 4) * 8) * lds + c0 + ((lane >> 3) & 1) * 8);
}

/* B fragments of two n-tiles taken straight: k = tile rows [k0, k0+16), n = tile
 * columns [n0, n0+16); b[0..1] for columns n0.., b[2..3] for n0+8.. */
__device__ __forceinline__ void frag_b(uint32_t b[4], const bf16 *t, int lds, int k0, int n0,
                                       int lane)
{
    ldsm4t(b, t + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * lds + n0 + (lane >> 4) * 8);
}

/* The accumulators of n-tiles 2j and 2j+1 (16 rows x 16 columns) as an A fragment. */
__device__ __forceinline__ void acc_to_a(uint32_t a[4], const float c0[4], const float c1[4])
{
    a[0] = pack(c0[0], c0[1]);
    a[1] = pack(c0[2], c0[3]);
    a[2] = pack(c1[0], c1[1]);
    a[3] = pack(c1[2], c1[3]);
}

/* rows [0, rows) of a (TC_COLS or TC_ROWS)-row tile of D columns into shared memory,
 * zeros below; asynchronous until the next cp_wait */
template <int D>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *src, int64_t ld, int rows)
{
    constexpr int LDS = D + 8, CHUNKS = D / 8;
    for (int e = threadIdx.x; e < 64 * CHUNKS; e += TC_THREADS) {
        const int r = e / CHUNKS, c = (e % CHUNKS) * 8;
        const bool ok = r < rows;
        cp16(dst + r * LDS + c, ok ? src + r * ld + c : src, ok);
    }
}

/* the number of keys query row i sees (attention.cu's attn_visible) */
__device__ __forceinline__ int visible(int64_t i, int skv, int q0, int k0, int causal)
{
    if (!causal)
        return skv;
    const int64_t nv = (int64_t)q0 + i - k0 + 1;
    return nv < 0 ? 0 : nv > skv ? skv : (int)nv;
}

/* ---- Forward ----------------------------------------------------------------------------- */

/* grid (query tiles, a, b); the tiles with most keys first */
template <int D>
__global__ void __launch_bounds__(TC_THREADS)
tc_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int sq, int skv,
           int a, int kh, int q0, int k0, int causal, float scale2)
{
    constexpr int LDS = D + 8;
    PT_DYNAMIC_SMEM(smem);
    bf16 *Qs = (bf16 *)smem, *Ks = Qs + TC_ROWS * LDS, *Vs = Ks + 2 * TC_COLS * LDS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int i0 = (int)(gridDim.x - 1 - blockIdx.x) * TC_ROWS;
    const int hq = blockIdx.y, bi = blockIdx.z, hk = hq / (a / kh);
    const int64_t ldq = (int64_t)a * D, ldk = (int64_t)kh * D;
    const int bq = min(TC_ROWS, sq - i0);
    const bf16 *kb = k + (int64_t)bi * skv * ldk + (int64_t)hk * D;
    const bf16 *vb = v + (int64_t)bi * skv * ldk + (int64_t)hk * D;
    const int kmax = visible(i0 + bq - 1, skv, q0, k0, causal);
    const int tiles = (kmax + TC_COLS - 1) / TC_COLS;

    load_tile<D>(Qs, q + ((int64_t)bi * sq + i0) * ldq + (int64_t)hq * D, ldq, bq);
    if (tiles > 0) {
        load_tile<D>(Ks, kb, ldk, min(TC_COLS, skv));
        load_tile<D>(Vs, vb, ldk, min(TC_COLS, skv));
    }
    cp_commit();

    const int r_lo = i0 + warp * 16 + g, r_hi = r_lo + 8;
    const int nv_lo = visible(r_lo, skv, q0, k0, causal), nv_hi = visible(r_hi, skv, q0, k0, causal);
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;
    uint32_t qf[D / 16][4];

    for (int t = 0; t < tiles; t++) {
        const int j0 = t * TC_COLS, buf = t & 1;
        if (t + 1 < tiles) {
            const int n0 = j0 + TC_COLS;
            load_tile<D>(Ks + (buf ^ 1) * TC_COLS * LDS, kb + (int64_t)n0 * ldk, ldk,
                         min(TC_COLS, skv - n0));
            load_tile<D>(Vs + (buf ^ 1) * TC_COLS * LDS, vb + (int64_t)n0 * ldk, ldk,
                         min(TC_COLS, skv - n0));
        }
        cp_commit();
        cp_wait<1>(); /* everything but the tile just asked for */
        __syncthreads();
        if (t == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                frag_a(qf[kk], Qs, LDS, warp * 16, kk * 16, lane);
        }
        const bf16 *Kt = Ks + buf * TC_COLS * LDS, *Vt = Vs + buf * TC_COLS * LDS;

        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
            for (int p = 0; p < 4; p++) {
                uint32_t b[4];
                frag_bt(b, Kt, LDS, p * 16, kk * 16, lane);
                mma(s[2 * p], qf[kk], b[0], b[1]);
                mma(s[2 * p + 1], qf[kk], b[2], b[3]);
            }

        float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int key = j0 + j * 8 + 2 * t4;
            s[j][0] = key < nv_lo ? s[j][0] * scale2 : -INFINITY;
            s[j][1] = key + 1 < nv_lo ? s[j][1] * scale2 : -INFINITY;
            s[j][2] = key < nv_hi ? s[j][2] * scale2 : -INFINITY;
            s[j][3] = key + 1 < nv_hi ? s[j][3] * scale2 : -INFINITY;
            mx_lo = fmaxf(mx_lo, fmaxf(s[j][0], s[j][1]));
            mx_hi = fmaxf(mx_hi, fmaxf(s[j][2], s[j][3]));
        }
        const float mn_lo = fmaxf(m_lo, quad_max(mx_lo)), mn_hi = fmaxf(m_hi, quad_max(mx_hi));
        /* a row that has seen no key yet keeps max -inf: nothing to scale, p = 0 */
        const float al_lo = mn_lo == -INFINITY ? 1.0f : exp2f(m_lo - mn_lo);
        const float al_hi = mn_hi == -INFINITY ? 1.0f : exp2f(m_hi - mn_hi);
        const float sub_lo = mn_lo == -INFINITY ? 0.0f : mn_lo;
        const float sub_hi = mn_hi == -INFINITY ? 0.0f : mn_hi;
        float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            s[j][0] = exp2f(s[j][0] - sub_lo);
            s[j][1] = exp2f(s[j][1] - sub_lo);
            s[j][2] = exp2f(s[j][2] - sub_hi);
            s[j][3] = exp2f(s[j][3] - sub_hi);
            sum_lo += s[j][0] + s[j][1];
            sum_hi += s[j][2] + s[j][3];
        }
        l_lo = l_lo * al_lo + sum_lo;
        l_hi = l_hi * al_hi + sum_hi;
        m_lo = mn_lo;
        m_hi = mn_hi;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            o[j][0] *= al_lo;
            o[j][1] *= al_lo;
            o[j][2] *= al_hi;
            o[j][3] *= al_hi;
        }
#pragma unroll
        for (int kc = 0; kc < 4; kc++) {
            uint32_t pa[4];
            acc_to_a(pa, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t b[4];
                frag_b(b, Vt, LDS, kc * 16, dp * 16, lane);
                mma(o[2 * dp], pa, b[0], b[1]);
                mma(o[2 * dp + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads(); /* this buffer is loaded again two tiles on */
    }
    cp_wait<0>();

    l_lo = quad_sum(l_lo);
    l_hi = quad_sum(l_hi);
    const float inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f, inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
    float *lrow = lse + ((int64_t)bi * a + hq) * sq;
    if (r_lo < sq) {
        bf16 *orow = out + ((int64_t)bi * sq + r_lo) * ldq + (int64_t)hq * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            *(uint32_t *)(orow + j * 8 + 2 * t4) = pack(o[j][0] * inv_lo, o[j][1] * inv_lo);
        if (t4 == 0)
            lrow[r_lo] = l_lo > 0.0f ? m_lo * LN2 + logf(l_lo) : -INFINITY;
    }
    if (r_hi < sq) {
        bf16 *orow = out + ((int64_t)bi * sq + r_hi) * ldq + (int64_t)hq * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++)
            *(uint32_t *)(orow + j * 8 + 2 * t4) = pack(o[j][2] * inv_hi, o[j][3] * inv_hi);
        if (t4 == 0)
            lrow[r_hi] = l_hi > 0.0f ? m_hi * LN2 + logf(l_hi) : -INFINITY;
    }
}

/* ---- Backward ---------------------------------------------------------------------------- */

/* dst[r][c] += scale · the accumulators of one row (bf16 pairs read, added, rounded) */
template <int D>
__device__ __forceinline__ void add_row(bf16 *dst, const float (*acc)[4], int half, float scale,
                                        int t4)
{
#pragma unroll
    for (int j = 0; j < D / 8; j++) {
        __nv_bfloat162 *p = (__nv_bfloat162 *)(dst + j * 8 + 2 * t4);
        const float2 old = __bfloat1622float2(*p);
        *p = __floats2bfloat162_rn(old.x + scale * acc[j][2 * half],
                                   old.y + scale * acc[j][2 * half + 1]);
    }
}

/* The backward's two score-shaped products over one 64-row tile of the other side, for
 * this warp's 16 rows [16w, 16w+16) of its block's own tiles A1 and A2:
 * s = A1 · B1^T and dp = A2 · B2^T, each 16 x 64, over D columns. The dK/dV kernel
 * passes (K, Q, V, dO), giving S^T and dP^T; the dQ kernel (Q, K, dO, V), giving S and dP. */
template <int D>
__device__ __forceinline__ void bwd_products(float s[8][4], float dp[8][4], const bf16 *A1,
                                             const bf16 *B1, const bf16 *A2, const bf16 *B2,
                                             int warp, int lane)
{
    constexpr int LDS = D + 8;
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            s[j][e] = dp[j][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a1[4], a2[4];
        frag_a(a1, A1, LDS, warp * 16, kk * 16, lane);
        frag_a(a2, A2, LDS, warp * 16, kk * 16, lane);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t b[4];
            frag_bt(b, B1, LDS, p * 16, kk * 16, lane);
            mma(s[2 * p], a1, b[0], b[1]);
            mma(s[2 * p + 1], a1, b[2], b[3]);
            frag_bt(b, B2, LDS, p * 16, kk * 16, lane);
            mma(dp[2 * p], a2, b[0], b[1]);
            mma(dp[2 * p + 1], a2, b[2], b[3]);
        }
    }
}

/* grid (key tiles, kh, b): dK and dV of 64 keys of one KV head over every query tile of
 * every query head of its group; warp w owns keys [16w, 16w+16) of the tile */
template <int D>
__global__ void __launch_bounds__(TC_THREADS)
tc_bwd_dkdv(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
            const float *lse, const float *Dsum, int sq, int skv, int a, int kh, int q0, int k0,
            int causal, float scale2, float scale)
{
    constexpr int LDS = D + 8;
    PT_DYNAMIC_SMEM(smem);
    bf16 *Ks = (bf16 *)smem, *Vs = Ks + TC_ROWS * LDS, *Qs = Vs + TC_ROWS * LDS;
    bf16 *Gs = Qs + 2 * TC_COLS * LDS;
    float *Ls = (float *)(Gs + 2 * TC_COLS * LDS), *Ds = Ls + 2 * TC_COLS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int j0 = blockIdx.x * TC_ROWS, hk = blockIdx.y, bi = blockIdx.z;
    const int group = a / kh;
    const int64_t ldq = (int64_t)a * D, ldk = (int64_t)kh * D;
    const int bk = min(TC_ROWS, skv - j0);
    const int64_t koff = ((int64_t)bi * skv + j0) * ldk + (int64_t)hk * D;

    load_tile<D>(Ks, k + koff, ldk, bk);
    load_tile<D>(Vs, v + koff, ldk, bk);

    /* the query tiles: for each head of the group, from the first query that sees key
     * j0 (i = k0 + j0 - q0) to the end */
    int64_t first = causal ? (int64_t)k0 + j0 - q0 : 0;
    first = first < 0 ? 0 : first / TC_COLS * TC_COLS;
    const int per_head = first >= sq ? 0 : (int)((sq - first + TC_COLS - 1) / TC_COLS);
    const int tiles = per_head * group;

    auto issue = [&](int t, int buf) {
        const int hq = hk * group + t / per_head;
        const int i0 = (int)first + (t % per_head) * TC_COLS;
        const int rows = min(TC_COLS, sq - i0);
        const int64_t qoff = ((int64_t)bi * sq + i0) * ldq + (int64_t)hq * D;
        load_tile<D>(Qs + buf * TC_COLS * LDS, q + qoff, ldq, rows);
        load_tile<D>(Gs + buf * TC_COLS * LDS, dout + qoff, ldq, rows);
        const int64_t base = ((int64_t)bi * a + hq) * sq + i0;
        for (int r = threadIdx.x; r < TC_COLS; r += TC_THREADS) {
            Ls[buf * TC_COLS + r] = r < rows ? lse[base + r] * LOG2E : -INFINITY;
            Ds[buf * TC_COLS + r] = r < rows ? Dsum[base + r] : 0.0f;
        }
    };
    if (tiles > 0)
        issue(0, 0);
    cp_commit();

    const int kr_lo = j0 + warp * 16 + g, kr_hi = kr_lo + 8;
    float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            dka[j][e] = dva[j][e] = 0.0f;

    for (int t = 0; t < tiles; t++) {
        const int buf = t & 1;
        const int i0 = (int)first + (t % per_head) * TC_COLS;
        if (t + 1 < tiles)
            issue(t + 1, buf ^ 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const bf16 *Qt = Qs + buf * TC_COLS * LDS, *Gt = Gs + buf * TC_COLS * LDS;
        const float *Lt = Ls + buf * TC_COLS, *Dt = Ds + buf * TC_COLS;

        /* S^T = K Q^T and dP^T = V dO^T: rows keys, columns queries */
        float s[8][4], dp[8][4];
        bwd_products<D>(s, dp, Ks, Qt, Vs, Gt, warp, lane);
        /* P^T and dS^T = P^T ∘ (dP^T - D) */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int qc = j * 8 + 2 * t4 + (e & 1);
                const int kr = e < 2 ? kr_lo : kr_hi;
                const float l2 = Lt[qc];
                const bool ok = l2 != -INFINITY && kr < skv &&
                                kr < visible(i0 + qc, skv, q0, k0, causal);
                const float p = ok ? exp2f(s[j][e] * scale2 - l2) : 0.0f;
                s[j][e] = p;
                dp[j][e] = ok ? p * (dp[j][e] - Dt[qc]) : 0.0f;
            }
        /* dV += P^T dO, dK += dS^T Q (scaled at the end) */
#pragma unroll
        for (int kc = 0; kc < 4; kc++) {
            uint32_t pa[4], da[4];
            acc_to_a(pa, s[2 * kc], s[2 * kc + 1]);
            acc_to_a(da, dp[2 * kc], dp[2 * kc + 1]);
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                uint32_t b[4];
                frag_b(b, Gt, LDS, kc * 16, dn * 16, lane);
                mma(dva[2 * dn], pa, b[0], b[1]);
                mma(dva[2 * dn + 1], pa, b[2], b[3]);
                frag_b(b, Qt, LDS, kc * 16, dn * 16, lane);
                mma(dka[2 * dn], da, b[0], b[1]);
                mma(dka[2 * dn + 1], da, b[2], b[3]);
            }
        }
        __syncthreads();
    }
    cp_wait<0>();

    if (kr_lo < skv) {
        add_row<D>(dk + koff + (int64_t)(warp * 16 + g) * ldk, dka, 0, scale, t4);
        add_row<D>(dv + koff + (int64_t)(warp * 16 + g) * ldk, dva, 0, 1.0f, t4);
    }
    if (kr_hi < skv) {
        add_row<D>(dk + koff + (int64_t)(warp * 16 + g + 8) * ldk, dka, 1, scale, t4);
        add_row<D>(dv + koff + (int64_t)(warp * 16 + g + 8) * ldk, dva, 1, 1.0f, t4);
    }
}

/* grid (query tiles, a, b), the tiles with most keys first: dQ of 64 queries of one
 * head over the key tiles they see; warp w owns queries [16w, 16w+16) */
template <int D>
__global__ void __launch_bounds__(TC_THREADS)
tc_bwd_dq(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
          const float *lse, const float *Dsum, int sq, int skv, int a, int kh, int q0, int k0,
          int causal, float scale2, float scale)
{
    constexpr int LDS = D + 8;
    PT_DYNAMIC_SMEM(smem);
    bf16 *Qs = (bf16 *)smem, *Gs = Qs + TC_ROWS * LDS, *Ks = Gs + TC_ROWS * LDS;
    bf16 *Vs = Ks + 2 * TC_COLS * LDS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
    const int i0 = (int)(gridDim.x - 1 - blockIdx.x) * TC_ROWS;
    const int hq = blockIdx.y, bi = blockIdx.z, hk = hq / (a / kh);
    const int64_t ldq = (int64_t)a * D, ldk = (int64_t)kh * D;
    const int bq = min(TC_ROWS, sq - i0);
    const int64_t qoff = ((int64_t)bi * sq + i0) * ldq + (int64_t)hq * D;
    const bf16 *kb = k + (int64_t)bi * skv * ldk + (int64_t)hk * D;
    const bf16 *vb = v + (int64_t)bi * skv * ldk + (int64_t)hk * D;
    const int kmax = visible(i0 + bq - 1, skv, q0, k0, causal);
    const int tiles = (kmax + TC_COLS - 1) / TC_COLS;

    load_tile<D>(Qs, q + qoff, ldq, bq);
    load_tile<D>(Gs, dout + qoff, ldq, bq);
    if (tiles > 0) {
        load_tile<D>(Ks, kb, ldk, min(TC_COLS, skv));
        load_tile<D>(Vs, vb, ldk, min(TC_COLS, skv));
    }
    cp_commit();

    const int r_lo = i0 + warp * 16 + g, r_hi = r_lo + 8;
    const int64_t lbase = ((int64_t)bi * a + hq) * sq;
    const float l_lo = r_lo < sq ? lse[lbase + r_lo] * LOG2E : -INFINITY;
    const float l_hi = r_hi < sq ? lse[lbase + r_hi] * LOG2E : -INFINITY;
    const float d_lo = r_lo < sq ? Dsum[lbase + r_lo] : 0.0f;
    const float d_hi = r_hi < sq ? Dsum[lbase + r_hi] : 0.0f;
    const int nv_lo = l_lo == -INFINITY ? 0 : visible(r_lo, skv, q0, k0, causal);
    const int nv_hi = l_hi == -INFINITY ? 0 : visible(r_hi, skv, q0, k0, causal);
    float dqa[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++)
        dqa[j][0] = dqa[j][1] = dqa[j][2] = dqa[j][3] = 0.0f;

    for (int t = 0; t < tiles; t++) {
        const int j0 = t * TC_COLS, buf = t & 1;
        if (t + 1 < tiles) {
            const int n0 = j0 + TC_COLS;
            load_tile<D>(Ks + (buf ^ 1) * TC_COLS * LDS, kb + (int64_t)n0 * ldk, ldk,
                         min(TC_COLS, skv - n0));
            load_tile<D>(Vs + (buf ^ 1) * TC_COLS * LDS, vb + (int64_t)n0 * ldk, ldk,
                         min(TC_COLS, skv - n0));
        }
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const bf16 *Kt = Ks + buf * TC_COLS * LDS, *Vt = Vs + buf * TC_COLS * LDS;

        float s[8][4], dp[8][4];
        bwd_products<D>(s, dp, Qs, Kt, Gs, Vt, warp, lane);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = j0 + j * 8 + 2 * t4 + (e & 1);
                const bool hi = e >= 2;
                const bool ok = key < (hi ? nv_hi : nv_lo);
                const float p = ok ? exp2f(s[j][e] * scale2 - (hi ? l_hi : l_lo)) : 0.0f;
                dp[j][e] = ok ? p * (dp[j][e] - (hi ? d_hi : d_lo)) : 0.0f;
            }
        /* dQ += dS K */
#pragma unroll
        for (int kc = 0; kc < 4; kc++) {
            uint32_t da[4];
            acc_to_a(da, dp[2 * kc], dp[2 * kc + 1]);
#pragma unroll
            for (int dn = 0; dn < D / 16; dn++) {
                uint32_t b[4];
                frag_b(b, Kt, LDS, kc * 16, dn * 16, lane);
                mma(dqa[2 * dn], da, b[0], b[1]);
                mma(dqa[2 * dn + 1], da, b[2], b[3]);
            }
        }
        __syncthreads();
    }
    cp_wait<0>();

    if (r_lo < sq)
        add_row<D>(dq + qoff + (int64_t)(warp * 16 + g) * ldq, dqa, 0, scale, t4);
    if (r_hi < sq)
        add_row<D>(dq + qoff + (int64_t)(warp * 16 + g + 8) * ldq, dqa, 1, scale, t4);
}

/* shared memory of each kernel: own tile(s) once, the other side's double-buffered */
constexpr size_t fwd_bytes(int d) { return (size_t)(TC_ROWS + 4 * TC_COLS) * (d + 8) * 2; }
constexpr size_t dkdv_bytes(int d)
{
    return (size_t)(2 * TC_ROWS + 4 * TC_COLS) * (d + 8) * 2 + (size_t)4 * TC_COLS * 4;
}
constexpr size_t dq_bytes(int d) { return (size_t)(2 * TC_ROWS + 4 * TC_COLS) * (d + 8) * 2; }

template <typename K> int raise(pt_kernels *kn, K kernel, size_t bytes)
{
    if (bytes > pt_kcuda_ctx(kn)->smem_optin)
        return 1; /* a small device: the CUDA-core kernels serve */
    return PT_CU(kn, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)bytes)) ? -1 : 0;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

} // namespace

int pt_kcuda_attn_tc_init(pt_kernels *kn)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    int rc = 0;
    int r[] = {raise(kn, tc_forward<64>, fwd_bytes(64)), raise(kn, tc_forward<128>, fwd_bytes(128)),
               raise(kn, tc_bwd_dkdv<64>, dkdv_bytes(64)),
               raise(kn, tc_bwd_dkdv<128>, dkdv_bytes(128)),
               raise(kn, tc_bwd_dq<64>, dq_bytes(64)), raise(kn, tc_bwd_dq<128>, dq_bytes(128))};
    ctx->attn_tc = 1;
    for (int i = 0; i < 6; i++) {
        if (r[i] < 0)
            rc = -1;
        if (r[i] != 0)
            ctx->attn_tc = 0;
    }
    return rc;
}

bool pt_kcuda_attn_tc_ok(pt_kernels *kn, int d, const void *const *ptrs, int n)
{
    if (!pt_kcuda_ctx(kn)->attn_tc || (d != 64 && d != 128))
        return false;
    for (int i = 0; i < n; i++)
        if (!aligned16(ptrs[i]))
            return false;
    return true;
}

void pt_kcuda_attn_tc_forward(pt_kernels *kn, bf16 *out, float *lse, const bf16 *q,
                              const bf16 *k, const bf16 *v, int b, int sq, int skv, int a,
                              int kh, int d, int q0, int k0, int causal)
{
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    const float scale2 = LOG2E / sqrtf((float)d);
    dim3 grid((unsigned)((sq + TC_ROWS - 1) / TC_ROWS), (unsigned)a, (unsigned)b);
    if (d == 64)
        PT_LAUNCH(grid, TC_THREADS, fwd_bytes(64), st, tc_forward<64>)(out, lse, q, k, v, sq, skv,
            a, kh, q0, k0, causal, scale2);
    else
        PT_LAUNCH(grid, TC_THREADS, fwd_bytes(128), st, tc_forward<128>)(out, lse, q, k, v, sq, skv,
            a, kh, q0, k0, causal, scale2);
    PT_LAUNCHED(kn, "attention_forward (tensor cores)");
}

void pt_kcuda_attn_tc_backward(pt_kernels *kn, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                               const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                               const float *Dsum, int b, int sq, int skv, int a, int kh, int d,
                               int q0, int k0, int causal)
{
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    const float scale = 1.0f / sqrtf((float)d), scale2 = LOG2E * scale;
    dim3 kgrid((unsigned)((skv + TC_ROWS - 1) / TC_ROWS), (unsigned)kh, (unsigned)b);
    dim3 qgrid((unsigned)((sq + TC_ROWS - 1) / TC_ROWS), (unsigned)a, (unsigned)b);
    if (d == 64) {
        PT_LAUNCH(kgrid, TC_THREADS, dkdv_bytes(64), st, tc_bwd_dkdv<64>)(dk, dv, dout, q, k, v,
            lse, Dsum, sq, skv, a, kh, q0, k0, causal, scale2, scale);
        PT_LAUNCH(qgrid, TC_THREADS, dq_bytes(64), st, tc_bwd_dq<64>)(dq, dout, q, k, v, lse, Dsum,
            sq, skv, a, kh, q0, k0, causal, scale2, scale);
    } else {
        PT_LAUNCH(kgrid, TC_THREADS, dkdv_bytes(128), st, tc_bwd_dkdv<128>)(dk, dv, dout, q, k, v,
            lse, Dsum, sq, skv, a, kh, q0, k0, causal, scale2, scale);
        PT_LAUNCH(qgrid, TC_THREADS, dq_bytes(128), st, tc_bwd_dq<128>)(dq, dout, q, k, v, lse,
            Dsum, sq, skv, a, kh, q0, k0, causal, scale2, scale);
    }
    PT_LAUNCHED(kn, "attention_backward (tensor cores)");
}
