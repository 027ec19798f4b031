/*
 * FP8 linear layers on CUDA (kernels.h's fp8_amax, fp8_scale, fp8_cast and gemm_fp8):
 * per-tensor scaled E4M3/E5M2 quantization of bf16 tensors, and the FP8 GEMM through
 * cuBLASLt. A tensor's scaling state (the meta block of kernels.h) lives in device
 * memory and is read and written only by kernels, so no op waits for the host.
 *
 * Rounding. fp8_cast multiplies each bf16 element by meta[SCALE] in fp32 and converts
 * with cuda_fp8.h's __nv_cvt_float_to_fp8(v, __NV_SATFINITE, ...): round to nearest,
 * ties to even, anything beyond the largest finite value (infinities too) to that value
 * with its sign (CUDA Math API, "FP8 Conversion and Data Movement"; on sm_89 and newer
 * the header's cvt.rn.satfinite.{e4m3,e5m2}x2.f32). That is pt_kfp8_from_f32 bit for bit
 * except for NaN, which the conversion turns into 0x7F without its sign: a NaN element is
 * encoded here as the CPU does, its sign and 0x7F (taken from x, since a GPU's product
 * with a NaN is the canonical NaN and has lost the sign).
 *
 * The saturation count is kernels.h's: |x · scale| at or past the midpoint between max
 * and the step above it (464, 61440), what rounding would have taken past max.
 *
 * Reductions without atomics. amax and the saturation and underflow counts are
 * reduced in two passes, as sumsq is: each block of the first pass (at most
 * PT_KCUDA_FP8_BLOCKS, grid-striding) writes its max and integer counts to
 * ctx->fp8_part, and one block folds them into meta (amax by max, counts summed as
 * integers, then each added to its float once, as the CPU adds its double count), so
 * results are bit-identical run to run and equal the CPU's.
 *
 * The cast is tiled 64 x 64: a block reads a tile row by row (a warp reads 32 adjacent
 * bf16), writes dst the same way and, for dst_t, keeps the tile's bytes in shared
 * memory (rows padded to 68 bytes, so a warp reading a column touches 32 banks) and
 * writes the transpose row by row: both global sides coalesced. Where the widths allow
 * (cols a multiple of 8, rows too for the transpose, the pointers aligned) a thread
 * moves eight elements a load and a store instead of one.
 *
 * The GEMM: row-major c (m, n) = a (m, k) · b (n, k)^T is the column-major
 * c^T (n, m) = (b-view (k, n))^T · a-view (k, m), so cuBLASLt's A is our b, transposed,
 * and its B is our a, not transposed: the "TN" format its FP8 kernels require ("A must
 * be transposed and B non-transposed", cuBLAS documentation, cublasLtMatmul(), for
 * FP8), with CUBLAS_COMPUTE_32F and fp32 scale type. A_SCALE_POINTER is therefore
 * meta_b + PT_KFP8_SCALE_INV and B_SCALE_POINTER meta_a + PT_KFP8_SCALE_INV (device
 * pointers; cuBLASLt computes D = alpha · scale_A · scale_B · op(A) op(B) + beta · C).
 * Output bf16 with C bf16, or fp32 with C fp32 (the weight gradient, beta 1); the bias
 * (bf16, the [act] type) rides the BIAS epilogue with CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE
 * CUDA_R_16BF, the bias type the documentation's FP8 table gives for bf16 and for fp32
 * outputs. cuBLASLt does not multiply two E5M2 operands (absent from that table); such
 * a product, one cuBLASLt declines (its FP8 kernels want 16-byte-aligned pointers and
 * leading dimensions, so k % 16 == 0; compute capability 8.9 or newer), PT_KCUDA_NO_LT,
 * and k = 0 run on a plain tiled kernel that sums the same exact products in order of
 * k. A bias the epilogue cannot take (not 16-byte aligned, or the epilogue declined)
 * is written into c first and added through beta = 1, so c is still rounded once; with
 * beta != 0 as well, the plain kernel takes it. In the emulator (kernels/emu/) the plain
 * kernel and cuBLASLt sum in the same order and agree bit for bit; on a GPU cuBLASLt
 * blocks k its own way, within fp32 rounding of the CPU.
 */
#include <cuda_fp8.h>
#include <math.h>
#include <string.h>

#include "cuda.cuh"

/* ---- The formats --------------------------------------------------------------------- */

static __device__ __forceinline__ __nv_fp8_interpretation_t fp8_interp(int e5m2)
{
    return e5m2 ? __NV_E5M2 : __NV_E4M3;
}

/* x · scale = v as a byte: pt_kfp8_from_f32(v), a NaN x kept with its sign */
static __device__ __forceinline__ uint8_t fp8_quantize(float x, float v, int e5m2)
{
    if (x != x)
        return (uint8_t)(((__float_as_uint(x) >> 24) & 0x80u) | 0x7Fu);
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, fp8_interp(e5m2));
}

/* a byte's value, exact in fp32: pt_kfp8_to_f32 (the OCP formats: E4M3 bias 7, its
 * S.1111.111 NaN; E5M2 bias 15, IEEE-like top exponent) */
static __device__ __forceinline__ float fp8_value(uint8_t q, int e5m2)
{
    const int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    const uint32_t sign = (uint32_t)(q & 0x80u) << 24;
    const uint32_t e = (q & 0x7Fu) >> mbits, m = q & ((1u << mbits) - 1u);
    if (e == (e5m2 ? 31u : 15u) && (e5m2 || m == 7u))
        return __uint_as_float(e5m2 && m == 0u ? sign | 0x7f800000u : 0x7fc00000u);
    if (e == 0u) /* subnormal: m · 2^(1 - bias - mbits), an exact product */
        return __uint_as_float(__float_as_uint((float)m * __uint_as_float(
                                   (uint32_t)(127 + 1 - bias - mbits) << 23)) | sign);
    return __uint_as_float(sign | (e + 127u - (uint32_t)bias) << 23 | m << (23 - mbits));
}

static float fp8_max(int e5m2) { return e5m2 ? 57344.0f : 448.0f; }

/* ---- The second pass: partial results into the meta block ---------------------------- */

enum { FOLD_THREADS = 256 };

/* kernels.h's fp8_scale from the amax a (after the history, if any), in the CPU's order
 * of operations */
static __device__ void scale_from(float *meta, float a, float fmax, float margin)
{
    /* 2^margin exactly for a whole margin (the CPU's exp2f is exact there; the device's
     * is documented to 2 ulp) */
    float p = margin == truncf(margin) && fabsf(margin) < 127.0f ? ldexpf(1.0f, (int)margin)
                                                                 : exp2f(margin);
    float scale = 1.0f;
    if (a > 0.0f && isfinite(a))
        scale = fmax / a / p;
    if (!isfinite(scale) || scale <= 0.0f) /* an amax so small that max / amax overflows */
        scale = 1.0f;
    meta[PT_KFP8_SCALE] = scale;
    meta[PT_KFP8_SCALE_INV] = 1.0f / scale;
    meta[PT_KFP8_AMAX] = 0.0f;
}

/* meta[AMAX] = max(meta[AMAX], the partials' max); with FOLD_COUNTS also meta[OVER] and
 * meta[UNDER] += the partials' sums. With FOLD_SET the partials' max alone is the amax
 * (one taken by the kernel that wrote the tensor: pt_kcuda_fp8_fold_amax); with
 * FOLD_SCALE (fp8_amax_scale) the scale is taken from the partials' max alone (fmax:
 * the format's largest value) */
enum { FOLD_COUNTS = 1, FOLD_SET = 2, FOLD_SCALE = 4 };

__global__ void fp8_fold_kernel(float *meta, const pt_kcuda_fp8_part *part, int count,
                                int how, float fmax)
{
    __shared__ float smax[32];
    __shared__ unsigned long long ssum[32];
    float m = 0.0f;
    unsigned long long over = 0, under = 0;
    for (int i = threadIdx.x; i < count; i += FOLD_THREADS) {
        m = fmaxf(m, part[i].amax);
        over += part[i].over;
        under += part[i].under;
    }
    m = pt_block_max(m, smax);
    over = pt_block_sum(over, ssum);
    under = pt_block_sum(under, ssum);
    if (threadIdx.x != 0)
        return;
    if (how & FOLD_SCALE)
        scale_from(meta, m, fmax, 0.0f);
    else if ((how & FOLD_SET) || m > meta[PT_KFP8_AMAX])
        meta[PT_KFP8_AMAX] = m;
    if (how & FOLD_COUNTS) {
        meta[PT_KFP8_OVER] += (float)over;
        meta[PT_KFP8_UNDER] += (float)under;
    }
}

static void fp8_fold(pt_kernels *kn, float *meta, int count, int how, float fmax)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    PT_LAUNCH(1, FOLD_THREADS, 0, ctx->stream, fp8_fold_kernel)(meta, ctx->fp8_part, count,
                                                                 how, fmax);
    PT_LAUNCHED(kn, "fp8_fold");
}

void pt_kcuda_fp8_fold_amax(pt_kernels *kn, float *meta, int count)
{
    fp8_fold(kn, meta, count, FOLD_SET, 0.0f);
}

/* ---- amax ----------------------------------------------------------------------------- */

enum { AMAX_THREADS = 256 };

/* each block's max |x| into part[blockIdx.x], eight bf16 a load where x is 16-byte
 * aligned */
__global__ void fp8_amax_kernel(pt_kcuda_fp8_part *part, const bf16 *x, int64_t n)
{
    __shared__ float shared[32];
    float m = 0.0f;
    const int64_t t = blockIdx.x * (int64_t)AMAX_THREADS + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * AMAX_THREADS;
    int64_t i = t;
    if (((uintptr_t)x & 15) == 0) {
        const int64_t n8 = n / 8;
        for (int64_t q = t; q < n8; q += stride) {
            float f[8];
            pt_ld8(f, x + 8 * q);
#pragma unroll
            for (int j = 0; j < 8; j++)
                m = pt_amax_step(m, f[j]);
        }
        i = 8 * n8 + t;
    }
    for (; i < n; i += stride)
        m = pt_amax_step(m, pt_ld(x + i));
    m = pt_block_max(m, shared);
    if (threadIdx.x == 0)
        part[blockIdx.x] = pt_kcuda_fp8_part{m, 0, 0, 0};
}

/* the first pass of an amax: each block's max into ctx->fp8_part; returns the blocks */
static int amax_blocks(pt_kernels *kn, const float *src, int64_t n)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    int64_t want = (n + AMAX_THREADS * 8 - 1) / (AMAX_THREADS * 8);
    int blocks = (int)(want < PT_KCUDA_FP8_BLOCKS ? want : PT_KCUDA_FP8_BLOCKS);
    PT_LAUNCH(blocks, AMAX_THREADS, 0, ctx->stream, fp8_amax_kernel)(ctx->fp8_part,
        (const bf16 *)src, n);
    PT_LAUNCHED(kn, "fp8_amax");
    return blocks;
}

void pt_kcuda_fp8_amax(pt_kernels *kn,
                       float *meta,           /* PT_KFP8_META+ fp32 */
                       const float *src,      /* (n) [act] */
                       int64_t n)
{
    if (n <= 0)
        return;
    fp8_fold(kn, meta, amax_blocks(kn, src, n), 0, 0.0f);
}

/* two kernels where zero, fp8_amax and fp8_scale take four */
void pt_kcuda_fp8_amax_scale(pt_kernels *kn,
                             float *meta,     /* PT_KFP8_META+ fp32 */
                             const float *src, /* (n) [act] */
                             int64_t n,
                             int fmt)         /* pt_kfp8 */
{
    /* an empty tensor folds no partials: amax 0, scale 1 */
    int blocks = n > 0 ? amax_blocks(kn, src, n) : 0;
    fp8_fold(kn, meta, blocks, FOLD_SCALE, fp8_max(fmt == PT_KFP8_E5M2));
}

/* ---- scale ---------------------------------------------------------------------------- */

/* one thread: kernels.h's fp8_scale */
__global__ void fp8_scale_kernel(float *meta, float fmax, int hist_len, float margin)
{
    float a = meta[PT_KFP8_AMAX];
    if (hist_len > 0) {
        float *h = meta + PT_KFP8_META;
        for (int i = hist_len - 1; i > 0; i--)
            h[i] = h[i - 1];
        h[0] = a;
        for (int i = 1; i < hist_len; i++)
            if (h[i] > a)
                a = h[i];
    }
    scale_from(meta, a, fmax, margin);
}

void pt_kcuda_fp8_scale(pt_kernels *kn,
                        float *meta,          /* PT_KFP8_META + hist_len fp32 */
                        int fmt,              /* pt_kfp8 */
                        int hist_len, float margin)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    PT_LAUNCH(1, 1, 0, ctx->stream, fp8_scale_kernel)(meta, fp8_max(fmt == PT_KFP8_E5M2),
                                                       hist_len, margin);
    PT_LAUNCHED(kn, "fp8_scale");
}

/* ---- cast ------------------------------------------------------------------------------ */

enum { CAST_TILE = 64, CAST_ROWS = 8 }; /* a block of 32 · CAST_ROWS threads a tile */

/* A thread's share of a cast's amax and counts, then its block's (cast_part) */
typedef struct {
    float amax;
    unsigned over, under;
} cast_stats;

/* the tile grid of a (rows, cols) matrix: tiles across, and in all (row-major order) */
typedef struct {
    int64_t across, count;
} cast_grid;

static __host__ __device__ __forceinline__ cast_grid cast_grid_of(int64_t rows, int cols)
{
    const int64_t across = (cols + CAST_TILE - 1) / CAST_TILE;
    return cast_grid{across, (rows + CAST_TILE - 1) / CAST_TILE * across};
}

/* tile t's first row and column */
static __device__ __forceinline__ void cast_tile_at(cast_grid g, int64_t t, int64_t *r0,
                                                    int *c0)
{
    *r0 = t / g.across * CAST_TILE;
    *c0 = (int)(t % g.across) * CAST_TILE;
}

/* x as fp8 at `scale`, its |x| and counts added to st: saturated at or past the midpoint
 * of max and the step above it (kernels.h); non-zero flushed to zero */
static __device__ __forceinline__ uint8_t cast_one(float x, float scale, int e5m2,
                                                   cast_stats *st)
{
    const float v = x * scale, past = e5m2 ? 61440.0f : 464.0f;
    const uint8_t q = fp8_quantize(x, v, e5m2);
    st->amax = pt_amax_step(st->amax, x);
    st->over += fabsf(v) >= past;
    st->under += x != 0.0f && (q & 0x7Fu) == 0;
    return q;
}

/* the block's amax and counts into part[blockIdx.x] (every thread calls it) */
static __device__ __forceinline__ void cast_part(pt_kcuda_fp8_part *part, cast_stats st,
                                                 float *smax, unsigned long long *ssum)
{
    const float amax = pt_block_max(st.amax, smax);
    const unsigned long long o = pt_block_sum((unsigned long long)st.over, ssum);
    const unsigned long long u = pt_block_sum((unsigned long long)st.under, ssum);
    if (threadIdx.x == 0)
        part[blockIdx.x] = pt_kcuda_fp8_part{amax, 0, o, u};
}

/* grid-strides over the 64 x 64 tiles of src (rows, cols), row-major tile order;
 * thread (tx, ty) = (lane, warp) takes columns tx and tx + 32 of rows ty, ty + 8, ...
 * Uniform per block: the tile count and dst_t, so every thread meets every barrier. */
__global__ void __launch_bounds__(32 * CAST_ROWS)
fp8_cast_kernel(pt_kcuda_fp8_part *part, uint8_t *dst, uint8_t *dst_t, const bf16 *src,
                int64_t rows, int cols, const float *meta, int e5m2)
{
    __shared__ uint8_t tile[CAST_TILE][CAST_TILE + 4];
    __shared__ float smax[32];
    __shared__ unsigned long long ssum[32];
    const float scale = meta[PT_KFP8_SCALE];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32; /* a 1-D block: pt_block_* */
    const cast_grid g = cast_grid_of(rows, cols);
    cast_stats st = {0.0f, 0, 0};
    for (int64_t t = blockIdx.x; t < g.count; t += gridDim.x) {
        int64_t r0;
        int c0;
        cast_tile_at(g, t, &r0, &c0);
        for (int i = ty; i < CAST_TILE; i += CAST_ROWS)
            for (int j = tx; j < CAST_TILE; j += 32) {
                const int64_t r = r0 + i;
                const int c = c0 + j;
                if (r >= rows || c >= cols)
                    continue;
                const uint8_t q = cast_one(pt_ld(src + r * cols + c), scale, e5m2, &st);
                if (dst)
                    dst[r * cols + c] = q;
                tile[i][j] = q;
            }
        if (!dst_t)
            continue;
        __syncthreads();
        /* tile column i is dst_t's row c0 + i; its bytes are tile rows j */
        for (int i = ty; i < CAST_TILE; i += CAST_ROWS)
            for (int j = tx; j < CAST_TILE; j += 32) {
                const int64_t r = r0 + j;
                const int c = c0 + i;
                if (r < rows && c < cols)
                    dst_t[(int64_t)c * rows + r] = tile[j][i];
            }
        __syncthreads(); /* the tile is rewritten by the next one */
    }
    cast_part(part, st, smax, ssum);
}

/* x (8 values at once) as eight bytes of fp8, little-endian in the order of x */
static __device__ __forceinline__ uint2 cast8(const float x[8], float scale, int e5m2,
                                              cast_stats *st)
{
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; j++)
        w[j / 4] |= (uint32_t)cast_one(x[j], scale, e5m2, st) << (8 * (j % 4));
    return make_uint2(w[0], w[1]);
}

/* fp8_cast_kernel for cols % 8 == 0 (and rows % 8 == 0 with dst_t), src 16-byte and
 * dst, dst_t 8-byte aligned: thread (chunk, row) = (t % 8, t / 8) loads eight bf16 in
 * one 16-byte load from rows row and row + 32 of the tile, stores their eight bytes
 * in one 8-byte store to dst and in two 4-byte stores to the tile; for dst_t it gathers
 * eight bytes of a tile column (rows 8·chunk ...) and stores them in one. The same bytes,
 * amax and counts as fp8_cast_kernel, with an eighth of its memory instructions. */
/* fp8_cast8_kernel's DBIAS: the block's 64 column sums from each thread's cs (its chunk's
 * eight columns over its rows) into its slice's row of colpart: the four rows of a warp
 * that share a chunk by a fixed butterfly, then the eight warps in order. Every thread
 * calls it. */
static __device__ void colsum_block(float *colpart, float cs[8], cast_grid g, int cols)
{
    __shared__ float red[CAST_ROWS][CAST_TILE];
    const int chunk = threadIdx.x % 8, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        cs[j] += __shfl_xor_sync(0xffffffffu, cs[j], 8);
        cs[j] += __shfl_xor_sync(0xffffffffu, cs[j], 16);
    }
    if (lane < 8)
#pragma unroll
        for (int j = 0; j < 8; j++)
            red[warp][8 * chunk + j] = cs[j];
    __syncthreads();
    const int c = (int)(blockIdx.x % g.across) * CAST_TILE + (int)threadIdx.x;
    if (threadIdx.x < CAST_TILE && c < cols) {
        float sum = 0.0f;
        for (int w = 0; w < CAST_ROWS; w++)
            sum += red[w][threadIdx.x];
        colpart[(int64_t)(blockIdx.x / g.across) * cols + c] = sum;
    }
}

/* With DBIAS (fp8_cast_dbias) the grid is a whole number of rows of tiles across, so
 * that block b takes tile column b % across of every (gridDim / across)-th tile row;
 * each thread sums its chunk's columns over its rows, and the block's column sums go to
 * colpart row b / across (its slice of the rows), which dbias_fold adds up. */
template <bool DBIAS>
__global__ void __launch_bounds__(32 * CAST_ROWS)
fp8_cast8_kernel(pt_kcuda_fp8_part *part, uint8_t *dst, uint8_t *dst_t, const bf16 *src,
                 int64_t rows, int cols, const float *meta, int e5m2, float *colpart)
{
    /* rows of 68 bytes: 4-byte aligned, and the column gathers of a warp fall on
     * distinct banks but for pairs */
    __shared__ uint32_t tile[CAST_TILE][CAST_TILE / 4 + 1];
    __shared__ float smax[32];
    __shared__ unsigned long long ssum[32];
    const float scale = meta[PT_KFP8_SCALE];
    const int chunk = threadIdx.x % 8, row = threadIdx.x / 8; /* row 0 .. 31 */
    const cast_grid g = cast_grid_of(rows, cols);
    cast_stats st = {0.0f, 0, 0};
    float cs[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t t = blockIdx.x; t < g.count; t += gridDim.x) {
        int64_t r0;
        int c0;
        cast_tile_at(g, t, &r0, &c0);
        for (int i = row; i < CAST_TILE; i += 32) {
            const int64_t r = r0 + i;
            const int c = c0 + 8 * chunk;
            if (r >= rows || c >= cols) /* cols % 8 == 0: a chunk is in or out whole */
                continue;
            float x[8];
            pt_ld8(x, src + r * cols + c);
            if (DBIAS)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    cs[j] += x[j];
            const uint2 q = cast8(x, scale, e5m2, &st);
            if (dst)
                *reinterpret_cast<uint2 *>(dst + r * cols + c) = q;
            tile[i][2 * chunk] = q.x;
            tile[i][2 * chunk + 1] = q.y;
        }
        if (!dst_t)
            continue;
        __syncthreads();
        /* dst_t's row c0 + j holds tile column j; this thread's eight bytes are tile
         * rows 8·chunk ... 8·chunk + 7 */
        const uint8_t *tb = reinterpret_cast<const uint8_t *>(tile);
        for (int j = row; j < CAST_TILE; j += 32) {
            const int c = c0 + j;
            const int64_t r = r0 + 8 * chunk;
            if (c >= cols || r >= rows) /* rows % 8 == 0 */
                continue;
            uint32_t w[2] = {0, 0};
#pragma unroll
            for (int m = 0; m < 8; m++)
                w[m / 4] |= (uint32_t)tb[(8 * chunk + m) * (int)sizeof tile[0] + j]
                            << (8 * (m % 4));
            *reinterpret_cast<uint2 *>(dst_t + (int64_t)c * rows + r) = make_uint2(w[0], w[1]);
        }
        __syncthreads(); /* the tile is rewritten by the next one */
    }
    cast_part(part, st, smax, ssum);
    if (DBIAS)
        colsum_block(colpart, cs, g, cols);
}

/* dbias[j] += the slices' column sums of colpart (slices, cols), in order */
__global__ void dbias_fold_kernel(float *dbias, const float *colpart, int slices, int cols)
{
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x) {
        float sum = 0.0f;
        for (int k = 0; k < slices; k++)
            sum += colpart[(int64_t)k * cols + j];
        dbias[j] += sum;
    }
}

/* whether fp8_cast8_kernel takes the cast: widths of eights, aligned pointers */
static bool cast_wide(const uint8_t *dst, const uint8_t *dst_t, const float *src,
                      int64_t rows, int cols)
{
    return cols % 8 == 0 && (!dst_t || rows % 8 == 0) && pt_kcuda_align_of(src) >= 16 &&
           (!dst || pt_kcuda_align_of(dst) >= 8) && (!dst_t || pt_kcuda_align_of(dst_t) >= 8);
}

void pt_kcuda_fp8_cast(pt_kernels *kn,
                       uint8_t *dst,          /* (rows, cols) fp8 or NULL */
                       uint8_t *dst_t,        /* (cols, rows) fp8 or NULL */
                       const float *src,      /* (rows, cols) [act] */
                       int64_t rows, int cols,
                       int fmt,               /* pt_kfp8 */
                       float *meta)           /* PT_KFP8_META+ fp32 */
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (rows <= 0 || cols <= 0)
        return;
    const int64_t tiles = cast_grid_of(rows, cols).count;
    int blocks = (int)(tiles < PT_KCUDA_FP8_BLOCKS ? tiles : PT_KCUDA_FP8_BLOCKS);
    const int wide = cast_wide(dst, dst_t, src, rows, cols);
    if (wide)
        PT_LAUNCH(blocks, 32 * CAST_ROWS, 0, ctx->stream, fp8_cast8_kernel<false>)(
            ctx->fp8_part, dst, dst_t, (const bf16 *)src, rows, cols, meta,
            fmt == PT_KFP8_E5M2, NULL);
    else
        PT_LAUNCH(blocks, 32 * CAST_ROWS, 0, ctx->stream, fp8_cast_kernel)(ctx->fp8_part, dst,
            dst_t, (const bf16 *)src, rows, cols, meta, fmt == PT_KFP8_E5M2);
    PT_LAUNCHED(kn, "fp8_cast");
    fp8_fold(kn, meta, blocks, FOLD_COUNTS, 0.0f);
}

/* fp8_cast and the column sums of src added into dbias in the same pass: a grid of
 * whole rows of tiles, at most PT_KCUDA_FP8_BLOCKS blocks (fp8_cast8_kernel's DBIAS).
 * Where the eight-wide kernel does not take the cast, or a row of tiles has more tiles
 * than that, the cast and matmul_backward's bias gradient run apart. */
void pt_kcuda_fp8_cast_dbias(pt_kernels *kn,
                             uint8_t *dst,    /* (rows, cols) fp8 or NULL */
                             uint8_t *dst_t,  /* (cols, rows) fp8 or NULL */
                             const float *src, /* (rows, cols) [act] */
                             int64_t rows, int cols,
                             int fmt,         /* pt_kfp8 */
                             float *meta,     /* PT_KFP8_META+ fp32 */
                             float *dbias)    /* (cols) fp32, added to */
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (rows <= 0 || cols <= 0)
        return;
    const cast_grid g = cast_grid_of(rows, cols);
    const int64_t down = g.count / g.across;
    if (!cast_wide(dst, dst_t, src, rows, cols) || g.across > PT_KCUDA_FP8_BLOCKS) {
        pt_kcuda_fp8_cast(kn, dst, dst_t, src, rows, cols, fmt, meta);
        pt_kcuda_matmul_backward(kn, NULL, NULL, dbias, src, NULL, NULL, rows, 1, cols);
        return;
    }
    const int64_t most = PT_KCUDA_FP8_BLOCKS / g.across;
    const int slices = (int)(down < most ? down : most);
    const int blocks = (int)(slices * g.across);
    PT_LAUNCH(blocks, 32 * CAST_ROWS, 0, ctx->stream, fp8_cast8_kernel<true>)(ctx->fp8_part,
        dst, dst_t, (const bf16 *)src, rows, cols, meta, fmt == PT_KFP8_E5M2, ctx->fp8_colpart);
    PT_LAUNCHED(kn, "fp8_cast_dbias");
    fp8_fold(kn, meta, blocks, FOLD_COUNTS, 0.0f);
    PT_LAUNCH((cols + 255) / 256, 256, 0, ctx->stream, dbias_fold_kernel)(dbias,
        ctx->fp8_colpart, slices, cols);
    PT_LAUNCHED(kn, "fp8_dbias_fold");
}

/* ---- GEMM: the plain kernel --------------------------------------------------------------- */

enum { GT = 16 };

static __device__ __forceinline__ float c_load(const bf16 *p) { return pt_ld(p); }
static __device__ __forceinline__ float c_load(const float *p) { return *p; }
static __device__ __forceinline__ void c_store(bf16 *p, float v) { pt_st(p, v); }
static __device__ __forceinline__ void c_store(float *p, float v) { *p = v; }

/* row-major c (m, n) = (sa · sb) · sum_k a[i][k] b[j][k] + beta · c + bias[j], the sum in
 * fp32 in order of k (the products of two FP8 values are exact), rounded once; block
 * (GT, GT): thread (tx, ty) gives c[by·GT + ty][bx·GT + tx] */
template <typename TC>
__global__ void gemm_fp8_plain_kernel(TC *c, float beta, const uint8_t *a, int e5m2_a,
                                      const float *meta_a, const uint8_t *b, int e5m2_b,
                                      const float *meta_b, const bf16 *bias, int64_t m, int n,
                                      int k)
{
    __shared__ float as[GT][GT + 1]; /* as[r][kk] = a(by·GT + r, k0 + kk) */
    __shared__ float bs[GT][GT + 1]; /* bs[r][kk] = b(bx·GT + r, k0 + kk) */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t i = (int64_t)blockIdx.y * GT + ty;
    const int j = blockIdx.x * GT + tx, jb = blockIdx.x * GT + ty;
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += GT) {
        const int kk = k0 + tx;
        as[ty][tx] = i < m && kk < k ? fp8_value(a[i * k + kk], e5m2_a) : 0.0f;
        bs[ty][tx] = jb < n && kk < k ? fp8_value(b[(int64_t)jb * k + kk], e5m2_b) : 0.0f;
        __syncthreads();
        for (int q = 0; q < GT; q++)
            acc += as[ty][q] * bs[tx][q];
        __syncthreads();
    }
    if (i >= m || j >= n)
        return;
    float v = meta_a[PT_KFP8_SCALE_INV] * meta_b[PT_KFP8_SCALE_INV] * acc;
    TC *p = c + i * n + j;
    if (beta != 0.0f) /* beta = 0: c is not read (it may hold NaN) */
        v += beta * c_load(p);
    if (bias)
        v += pt_ld(bias + j);
    c_store(p, v);
}

/* c (m, n) = bias in every row: bf16's bits, or its value in fp32 */
template <typename TC> __global__ void fill_bias_kernel(TC *c, const bf16 *bias, int64_t m, int n)
{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * n;
         e += (int64_t)gridDim.x * blockDim.x)
        c_store(c + e, pt_ld(bias + e % n));
}

/* ---- GEMM: cuBLASLt ------------------------------------------------------------------------ */

/* The two inverse scales into their 16-byte-aligned slots (pt_kcuda.fp8_scale_slots) */
__global__ void fp8_scale_slots_kernel(float *slots, const float *a, const float *b)
{
    slots[0] = *a;
    slots[4] = *b;
}

typedef struct {
    void *c;
    int c_f32;
    float beta;
    const uint8_t *a, *b;
    int e5m2_a, e5m2_b;
    const float *meta_a, *meta_b;
    int64_t m;
    int n, k;
} fp8_gemm;

static cudaDataType fp8_type(int e5m2) { return e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3; }

/* Runs g (+ bias, by the BIAS epilogue, when bias is non-NULL) through cuBLASLt, with
 * c's old value times g->beta added. 0 when it ran (or failed, the error recorded); 1 when
 * declined: cuBLASLt off, k = 0, both operands E5M2, or no algorithm. */
static int lt_fp8(pt_kernels *kn, const fp8_gemm *g, const bf16 *bias)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (ctx->no_lt || g->k <= 0 || g->m > INT32_MAX || (g->e5m2_a && g->e5m2_b))
        return 1;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasOperation_t opa = CUBLAS_OP_T, opb = CUBLAS_OP_N;
    const void *scale_a = g->meta_b + PT_KFP8_SCALE_INV, *scale_b = g->meta_a + PT_KFP8_SCALE_INV;
    /* cuBLASLt 13.1 ran no FP8 matmul with a scale pointer 4 bytes off a 16-byte boundary
     * (NOT_SUPPORTED for every shape, after offering algorithms) and ran them with both
     * on 16-byte boundaries (an H200; the GPU logs of docs/results/). A meta block's
     * inverse scale sits 4 bytes in, so both go to this stream's aligned slots first */
    if (((uintptr_t)scale_a | (uintptr_t)scale_b) % 16) {
        float *slots = ctx->fp8_scale_slots + (ctx->side && ctx->stream == ctx->side ? 8 : 0);
        PT_LAUNCH(1, 1, 0, ctx->stream, fp8_scale_slots_kernel)(slots, (const float *)scale_a,
                                                                 (const float *)scale_b);
        PT_LAUNCHED(kn, "fp8_scale_slots");
        scale_a = slots;
        scale_b = slots + 4;
    }
    cudaDataType ct = g->c_f32 ? CUDA_R_32F : CUDA_R_16BF;
    /* cuBLASLt's column-major problem: (n x m) = (b (k x n))^T · a (k x m) */
    int ok = !PT_LT(kn, cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
             !PT_LT(kn, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
                                                       sizeof opa)) &&
             !PT_LT(kn, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
                                                       sizeof opb)) &&
             !PT_LT(kn, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                       &scale_a, sizeof scale_a)) &&
             !PT_LT(kn, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                       &scale_b, sizeof scale_b)) &&
             !PT_LT(kn, cublasLtMatrixLayoutCreate(&la, fp8_type(g->e5m2_b), g->k, g->n, g->k)) &&
             !PT_LT(kn, cublasLtMatrixLayoutCreate(&lb, fp8_type(g->e5m2_a), g->k, g->m, g->k)) &&
             !PT_LT(kn, cublasLtMatrixLayoutCreate(&lc, ct, g->n, g->m, g->n));
    int declined = 0;
    if (ok && bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType bt = CUDA_R_16BF;
        declined = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                  sizeof epi) != CUBLAS_STATUS_SUCCESS ||
                   cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias) != CUBLAS_STATUS_SUCCESS ||
                   cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt,
                                                  sizeof bt) != CUBLAS_STATUS_SUCCESS;
    }
    const pt_kcuda_algo *algo = NULL;
    if (ok && !declined) {
        /* matmul.cu's key layout, the FP8 marker (bit 40) and both formats in key[6] */
        uint64_t key[7] = {(uint64_t)g->n, (uint64_t)g->m, (uint64_t)g->k,
                           (uint64_t)g->k << 32 ^ (uint64_t)g->k, (uint64_t)g->n,
                           1u | (uint64_t)g->c_f32 << 2 | (uint64_t)(bias ? 1 : 0) << 3 |
                               pt_kcuda_align_code(g->b) << 8 |
                               pt_kcuda_align_code(g->a) << 12 |
                               pt_kcuda_align_code(g->c) << 16 |
                               pt_kcuda_align_code(bias) << 20,
                           1u | 1ull << 40 | (uint64_t)g->e5m2_a << 41 |
                               (uint64_t)g->e5m2_b << 42};
        algo = pt_kcuda_lt_algo(kn, key, desc, la, lb, lc, g->b, g->a, g->c, g->c);
        ok = algo != NULL;
        declined = ok && !algo->ok;
    }
    if (ok && !declined) {
        const float alpha = 1.0f;
        void *ws = ctx->side && ctx->stream == ctx->side ? ctx->lt_ws_side : ctx->lt_ws;
        PT_LT(kn, cublasLtMatmul(ctx->lt, desc, &alpha, g->b, la, g->a, lb, &g->beta, g->c, lc,
                                 g->c, lc, &algo->algo, ws, ctx->lt_ws_bytes, ctx->stream));
    }
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (lc)
        cublasLtMatrixLayoutDestroy(lc);
    if (desc)
        cublasLtMatmulDescDestroy(desc);
    return ok && declined ? 1 : 0;
}

static void plain_fp8(pt_kernels *kn, const fp8_gemm *g, const bf16 *bias)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    int64_t rows_tiles = (g->m + GT - 1) / GT;
    if (rows_tiles > 65535) {
        pt_kcuda_fail(kn, __FILE__, __LINE__,
                      "gemm_fp8 %lld x %d x %d: no cuBLASLt algorithm and too many rows for "
                      "the plain kernel", (long long)g->m, g->n, g->k);
        return;
    }
    dim3 grid((unsigned)((g->n + GT - 1) / GT), (unsigned)rows_tiles), block(GT, GT);
    int k = g->k > 0 ? g->k : 0;
    if (g->c_f32)
        PT_LAUNCH(grid, block, 0, ctx->stream, gemm_fp8_plain_kernel<float>)((float *)g->c,
            g->beta, g->a, g->e5m2_a, g->meta_a, g->b, g->e5m2_b, g->meta_b, bias, g->m, g->n,
            k);
    else
        PT_LAUNCH(grid, block, 0, ctx->stream, gemm_fp8_plain_kernel<bf16>)((bf16 *)g->c,
            g->beta, g->a, g->e5m2_a, g->meta_a, g->b, g->e5m2_b, g->meta_b, bias, g->m, g->n,
            k);
    PT_LAUNCHED(kn, "gemm_fp8_plain");
}

static void fill_bias(pt_kernels *kn, const fp8_gemm *g, const bf16 *bias)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    unsigned blocks = pt_kcuda_blocks(g->m * g->n, PT_KCUDA_THREADS);
    if (g->c_f32)
        PT_LAUNCH(blocks, PT_KCUDA_THREADS, 0, ctx->stream, fill_bias_kernel<float>)(
            (float *)g->c, bias, g->m, g->n);
    else
        PT_LAUNCH(blocks, PT_KCUDA_THREADS, 0, ctx->stream, fill_bias_kernel<bf16>)(
            (bf16 *)g->c, bias, g->m, g->n);
    PT_LAUNCHED(kn, "fp8_fill_bias");
}

void pt_kcuda_gemm_fp8(pt_kernels *kn,
                       float *c,              /* (m, n) [act], or fp32 if c_f32 */
                       int c_f32, float beta,
                       const uint8_t *a,      /* (m, k) fp8 */
                       int fmt_a,             /* pt_kfp8 */
                       const float *meta_a,   /* PT_KFP8_META+ fp32 */
                       const uint8_t *b,      /* (n, k) fp8 */
                       int fmt_b,
                       const float *meta_b,
                       const float *bias,     /* (n) [act] or NULL */
                       int64_t m, int n, int k)
{
    if (m <= 0 || n <= 0)
        return;
    fp8_gemm g = {c, c_f32, beta, a, b, fmt_a == PT_KFP8_E5M2, fmt_b == PT_KFP8_E5M2,
                  meta_a, meta_b, m, n, k};
    const bf16 *bv = (const bf16 *)bias;
    if ((!bv || pt_kcuda_align_of(bv) >= 16) && !lt_fp8(kn, &g, bv))
        return; /* ran through cuBLASLt, the bias by its epilogue */
    if (bv && beta == 0.0f) {
        /* a bias the epilogue cannot take: c = bias (exact in c's type), then the
         * product added through beta = 1, still rounded once */
        fill_bias(kn, &g, bv);
        g.beta = 1.0f;
        bv = NULL;
        if (!lt_fp8(kn, &g, NULL))
            return;
    }
    plain_fp8(kn, &g, bv);
}
