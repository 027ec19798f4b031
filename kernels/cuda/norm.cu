/*
 * Normalisations on CUDA: LayerNorm (GPT-2) and RMSNorm (LLaMA), forward and backward,
 * and the residual add fused with the norm forward after it. One warp per row: row
 * statistics are summed in double, as the CPU reference does, and saved as fp32 (mean,
 * rstd). The backward is one kernel over chunks of rows, threads across the columns
 * (see its section); its weight gradients (dw, dbias: sums over all n rows) are reduced
 * in two deterministic passes (a partial per chunk of rows and column, then a sum of
 * the partials), never with atomics.
 *
 * Every forward (plain or fused, LayerNorm or RMSNorm) is one kernel template,
 * norm_forward_kernel, so that residual_layernorm_forward equals residual_forward
 * followed by layernorm_forward to the bit: the sum res = inp1 + inp2 is rounded to bf16
 * exactly as pointwise.cu's residual_forward rounds it (one fp32 add, pt_bf16), and the
 * norm reads those rounded values with the same per-lane order of sums and the same
 * explicit fused multiply-adds as the plain forward reading res from memory.
 */
#include "cuda.cuh"

enum { ROWS_PER_BLOCK = PT_KCUDA_THREADS / 32 };

static unsigned row_blocks(int64_t n) { return (unsigned)((n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

/* ---- Forward: LayerNorm and RMSNorm, with or without the residual add ------------------- */

/* The elements of a row a lane handles: chunks of 8 consecutive elements, chunk
 * c = lane + 32 j covering [8c, 8c + 8), the last one cut at h. The vector path (VEC:
 * h % 8 == 0 and every pointer 16-byte aligned) moves a chunk with one 16-byte load or
 * store, the scalar path element by element; both give a lane the same elements in the
 * same order, so the two paths give the same bits and the choice never shows in the
 * results. */
template <bool VEC>
static __device__ __forceinline__ void load_chunk(float f[8], const bf16 *p, int count)
{
    if (VEC)
        pt_ld8(f, p);
    else
        for (int i = 0; i < count; i++)
            f[i] = pt_ld(p + i);
}

/* stores f rounded to bf16 (pt_bf16, as pt_st) */
template <bool VEC>
static __device__ __forceinline__ void store_chunk(bf16 *p, const float f[8], int count)
{
    if (VEC)
        pt_st8(p, f);
    else
        for (int i = 0; i < count; i++)
            pt_st(p + i, f[i]);
}

/* One warp per row. RES: res = inp1 + inp2 rounded to bf16 (written), then the norm of
 * res; otherwise the norm of inp1. RMS: out = x · rstd · w; otherwise
 * out = (x - mean) · rstd · w + bias. mean is not written with RMS.
 * In place (res == inp1 or res == inp2) needs no barrier: the first pass reads each
 * element of inp1 and inp2 before the same lane writes it to res, and the later passes
 * re-read only the res elements that lane itself wrote (the chunks are the same in
 * every pass), so no lane ever reads what another lane writes.
 * The sums of squares and the output use explicit fused multiply-adds (fma, fmaf), so
 * that every instantiation rounds the same way whatever the compiler contracts. */
template <bool RMS, bool RES, bool VEC>
__global__ void norm_forward_kernel(bf16 *out, float *mean, float *rstd, bf16 *res,
                                    const bf16 *inp1, const bf16 *inp2, const bf16 *w,
                                    const bf16 *bias, int64_t n, int h, float eps)
{
    int lane = threadIdx.x % 32;
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (r >= n)
        return; /* the whole warp leaves together */
    const int chunks = (h + 7) / 8;
    const bf16 *x = (RES ? res : inp1) + r * h; /* the row the norm reads */
    bf16 *o = out + r * h;
    double sum = 0.0; /* sum of x (LayerNorm) or of x² (RMSNorm) */
    for (int c = lane; c < chunks; c += 32) {
        const int i0 = 8 * c, count = VEC ? 8 : (h - i0 < 8 ? h - i0 : 8);
        float f[8];
        if (RES) {
            float b[8];
            load_chunk<VEC>(f, inp1 + r * h + i0, count);
            load_chunk<VEC>(b, inp2 + r * h + i0, count);
            for (int i = 0; i < count; i++) /* residual_forward's rounding */
                f[i] = __bfloat162float(pt_bf16(f[i] + b[i]));
            store_chunk<VEC>(res + r * h + i0, f, count);
        } else {
            load_chunk<VEC>(f, x + i0, count);
        }
        for (int i = 0; i < count; i++)
            sum = RMS ? fma((double)f[i], (double)f[i], sum) : sum + f[i];
    }
    sum = pt_warp_sum(sum);
    float m = 0.0f, rs;
    if (RMS) {
        rs = (float)(1.0 / sqrt(sum / h + eps));
    } else {
        double mu = sum / h, var = 0.0;
        for (int c = lane; c < chunks; c += 32) {
            const int i0 = 8 * c, count = VEC ? 8 : (h - i0 < 8 ? h - i0 : 8);
            float f[8];
            load_chunk<VEC>(f, x + i0, count);
            for (int i = 0; i < count; i++) {
                double dx = f[i] - mu;
                var = fma(dx, dx, var);
            }
        }
        var = pt_warp_sum(var);
        m = (float)mu;
        rs = (float)(1.0 / sqrt(var / h + eps));
    }
    for (int c = lane; c < chunks; c += 32) {
        const int i0 = 8 * c, count = VEC ? 8 : (h - i0 < 8 ? h - i0 : 8);
        float f[8], wv[8], bv[8];
        load_chunk<VEC>(f, x + i0, count);
        load_chunk<VEC>(wv, w + i0, count);
        if (!RMS)
            load_chunk<VEC>(bv, bias + i0, count);
        for (int i = 0; i < count; i++)
            f[i] = RMS ? f[i] * rs * wv[i] : fmaf((f[i] - m) * rs, wv[i], bv[i]);
        store_chunk<VEC>(o + i0, f, count);
    }
    if (lane == 0) {
        if (!RMS)
            mean[r] = m;
        rstd[r] = rs;
    }
}

/* Launches the forward on the vector path when h % 8 == 0 and every pointer given is
 * 16-byte aligned, else on the scalar path (the same bits either way, see load_chunk);
 * the one rule for every forward, plain and fused. */
template <bool RMS, bool RES>
static void norm_forward(pt_kernels *kn, const char *name, bf16 *out, float *mean, float *rstd,
                         bf16 *res, const bf16 *inp1, const bf16 *inp2, const bf16 *w,
                         const bf16 *bias, int64_t n, int h, float eps)
{
    if (n <= 0)
        return;
    const void *ptrs[] = {out, res, inp1, inp2, w, bias};
    bool vec = h % 8 == 0;
    for (const void *p : ptrs)
        vec = vec && (uintptr_t)p % 16 == 0; /* NULL (unused) passes */
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    if (vec)
        PT_LAUNCH(row_blocks(n), PT_KCUDA_THREADS, 0, st, norm_forward_kernel<RMS, RES, true>)(
            out, mean, rstd, res, inp1, inp2, w, bias, n, h, eps);
    else
        PT_LAUNCH(row_blocks(n), PT_KCUDA_THREADS, 0, st, norm_forward_kernel<RMS, RES, false>)(
            out, mean, rstd, res, inp1, inp2, w, bias, n, h, eps);
    PT_LAUNCHED(kn, name);
}

void pt_kcuda_layernorm_forward(pt_kernels *kn,
                                float *out,         /* (n, h) [act] */
                                float *mean,        /* (n) fp32 */
                                float *rstd,        /* (n) fp32 */
                                const float *inp,   /* (n, h) [act] */
                                const float *w,     /* (h) [act] */
                                const float *bias,  /* (h) [act] */
                                int64_t n, int h, float eps)
{
    norm_forward<false, false>(kn, "layernorm_forward", (bf16 *)out, mean, rstd, NULL,
                               (const bf16 *)inp, NULL, (const bf16 *)w, (const bf16 *)bias, n,
                               h, eps);
}

void pt_kcuda_residual_layernorm_forward(pt_kernels *kn,
                                         float *res,         /* (n, h) [act] inp1 + inp2 */
                                         float *out,         /* (n, h) [act] */
                                         float *mean,        /* (n) fp32 */
                                         float *rstd,        /* (n) fp32 */
                                         const float *inp1,  /* (n, h) [act] */
                                         const float *inp2,  /* (n, h) [act] */
                                         const float *w,     /* (h) [act] */
                                         const float *bias,  /* (h) [act] */
                                         int64_t n, int h, float eps)
{
    norm_forward<false, true>(kn, "residual_layernorm_forward", (bf16 *)out, mean, rstd,
                              (bf16 *)res, (const bf16 *)inp1, (const bf16 *)inp2,
                              (const bf16 *)w, (const bf16 *)bias, n, h, eps);
}

/* ---- Backward --------------------------------------------------------------------------- */

/* The backward reads x, dout and dinp from device memory once and writes dinp once:
 * for GPT-2 1.5B's n = 16384, h = 1600 that is 4 · 52 MB, ~70 µs at the H100's ~3 TB/s.
 * It replaced two kernels (dinp with 2-byte loads reading x and dout twice, then a dw
 * kernel reading both again), which were slower inside training steps and in a
 * benchmark at every shape tried (the code notes in docs/results/;
 * bench_kernels_cuda's layernorm_backward and rmsnorm_backward time the op).
 *
 * One kernel, norm_backward_kernel. Block b owns the rows of chunk b of the column
 * reductions (pt_kcuda_chunk_rows(n) rows, pt_kcuda_chunks(n) blocks: one partial per
 * chunk and column, what backend.cu's reserve counts), and its threads split every row
 * by columns: thread t of a group of T holds the chunks of 8 elements c = t + T·k
 * (k < K) of every row it sees, so its share of dw and dbias never leaves its registers
 * and is added row after row in row order. Rows go R at a time: the R rows' chunks of
 * x, dout and dinp are loaded together (16 bytes each on the vector path, 9 loads in
 * flight a thread) and kept in registers as bf16; the two row sums go per thread in
 * fp32 (over its 8·K elements), then in double over the warp by the butterfly and over
 * the group's warps in warp order through shared memory (the CPU sums the row in
 * double), and dinp is written from the registers. Each block then writes its
 * partials, and pt_kcuda_sum_partials (backend.cu) adds them up. Every order depends on n and h
 * only, so results are bit-identical run to run.
 *
 * Columns rather than a warp per row: with a warp per row the per-column sums would
 * need 2·h floats of shared memory per warp (102 KB for 8 warps at h = 1600) and a
 * shared read-modify-write per element, and a warp could hold its row in registers
 * only with h fixed at compile time. Here K = 1 up to h = 4096 and K = 2 up to 8192,
 * at most BWD_THREADS threads a block so that ptxas may use 65536 / 512 = 128
 * registers a thread (R = 3 for K = 1 and 1 for K = 2 fit without spills; R = 4
 * spilled); longer rows run the two kernels after it (norm_backward_dinp_kernel,
 * norm_backward_dw_kernel). */
enum { BWD_THREADS = 512 };
/* threads an H100 holds at 128 registers a thread: 132 multiprocessors · 512, rounded;
 * a constant, not the device's, so that the reduction's shape depends on n and h only */
enum { BWD_GRID_THREADS = 65536 };

/* The 8 bf16 of a chunk as raw bits: one 16-byte load (VEC) or count loads, the
 * elements past count zero; pt_unpack8 gives pt_ld8's values. Kept raw, a chunk takes 4
 * registers instead of 8. */
template <bool VEC>
static __device__ __forceinline__ uint4 load_raw(const bf16 *p, int count)
{
    uint4 u = make_uint4(0u, 0u, 0u, 0u);
    if (VEC) {
        u = *reinterpret_cast<const uint4 *>(p);
    } else {
        bf16 *e = reinterpret_cast<bf16 *>(&u);
        for (int i = 0; i < count; i++)
            e[i] = p[i];
    }
    return u;
}

/* dx += rstd · (dnorm - mean(dnorm) - xhat · mean(dnorm · xhat)), dnorm = g · w, and
 * the block's partials of dw (xhat · g) and dbias (g) into part_w, part_b
 * (gridDim.x, h); with RMS, mean = 0, the mean(dnorm) term and dbias are left out.
 * T: a multiple of 32 with T · K >= ceil(h / 8); blockDim.x: G · T, at most BWD_THREADS;
 * dynamic shared memory: (G - 1) · K · 16 · T floats. Fused multiply-adds are explicit
 * (fmaf) so that both paths round alike. The row sums pass through red,
 * double-buffered: a thread writes red[buf] again two steps later, after the barrier
 * of the step between, which every thread reaches only once it has read red[buf]; so
 * one barrier a step suffices. */
template <bool RMS, bool VEC, int K>
__global__ __launch_bounds__(BWD_THREADS) void norm_backward_kernel(
    bf16 *dinp, float *part_w, float *part_b, const bf16 *dout, const bf16 *inp,
    const bf16 *w, const float *mean, const float *rstd, int64_t n, int h, int64_t chunk_rows,
    int T)
{
    constexpr int R = K == 1 ? 3 : 1; /* rows a group */
    __shared__ double red[2][R][2][BWD_THREADS / 32];
    PT_DYNAMIC_SMEM(smem);
    const int G = blockDim.x / T, grp = threadIdx.x / T, t = threadIdx.x % T;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warp0 = grp * (T / 32);
    const int chunks = (h + 7) / 8;
    const int64_t r0 = (int64_t)blockIdx.x * chunk_rows;
    const int64_t r1 = r0 + chunk_rows < n ? r0 + chunk_rows : n;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    int count[K]; /* the elements of the thread's chunk k: 0 past the row */
    float wv[K][8], acc_w[K][8], acc_b[K][8];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int c = t + T * k;
        count[k] = c >= chunks ? 0 : VEC ? 8 : (h - 8 * c < 8 ? h - 8 * c : 8);
        pt_unpack8(wv[k], count[k] ? load_raw<VEC>(w + 8 * c, count[k]) : zero);
#pragma unroll
        for (int i = 0; i < 8; i++)
            acc_w[k][i] = acc_b[k][i] = 0.0f;
    }
    int buf = 0;
    for (int64_t base = r0; base < r1; base += (int64_t)G * R, buf ^= 1) {
        const int64_t r = base + (int64_t)grp * R; /* this group's rows: r .. r + R - 1 */
        uint4 xr[R][K], gr[R][K], dr[R][K];
#pragma unroll
        for (int q = 0; q < R; q++)
#pragma unroll
            for (int k = 0; k < K; k++) {
                const bool on = r + q < r1 && count[k] > 0;
                const int64_t off = (r + q) * h + 8 * (t + T * k);
                xr[q][k] = on ? load_raw<VEC>(inp + off, count[k]) : zero;
                gr[q][k] = on ? load_raw<VEC>(dout + off, count[k]) : zero;
                dr[q][k] = on ? load_raw<VEC>(dinp + off, count[k]) : zero;
            }
        float m[R], rs[R];
#pragma unroll
        for (int q = 0; q < R; q++) {
            const bool row = r + q < r1;
            m[q] = RMS || !row ? 0.0f : mean[r + q];
            rs[q] = row ? rstd[r + q] : 0.0f;
            float f1 = 0.0f, f2 = 0.0f; /* the thread's sums of dnorm and dnorm · xhat */
#pragma unroll
            for (int k = 0; k < K; k++) {
                float x[8], g[8];
                pt_unpack8(x, xr[q][k]);
                pt_unpack8(g, gr[q][k]);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (i < count[k]) {
                        float xhat = (x[i] - m[q]) * rs[q], dnorm = wv[k][i] * g[i];
                        f1 += dnorm;
                        f2 = fmaf(dnorm, xhat, f2);
                    }
            }
            double s1 = RMS ? 0.0 : pt_warp_sum((double)f1), s2 = pt_warp_sum((double)f2);
            if (lane == 0) {
                red[buf][q][0][warp] = s1;
                red[buf][q][1][warp] = s2;
            }
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < R; q++) {
            if (r + q >= r1)
                break;
            double s1 = 0.0, s2 = 0.0;
            for (int i = warp0; i < warp0 + T / 32; i++) {
                s1 += red[buf][q][0][i];
                s2 += red[buf][q][1][i];
            }
            const float dm = RMS ? 0.0f : (float)(s1 / h), dxm = (float)(s2 / h);
#pragma unroll
            for (int k = 0; k < K; k++) {
                if (count[k] == 0)
                    continue;
                float x[8], g[8], d[8];
                pt_unpack8(x, xr[q][k]);
                pt_unpack8(g, gr[q][k]);
                pt_unpack8(d, dr[q][k]);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (i < count[k]) {
                        float xhat = (x[i] - m[q]) * rs[q], dnorm = wv[k][i] * g[i];
                        d[i] = fmaf(rs[q], fmaf(-xhat, dxm, dnorm - dm), d[i]);
                        acc_w[k][i] = fmaf(xhat, g[i], acc_w[k][i]);
                        acc_b[k][i] += g[i];
                    }
                store_chunk<VEC>(dinp + (r + q) * h + 8 * (t + T * k), d, count[k]);
            }
        }
    }
    float *hand = reinterpret_cast<float *>(smem); /* [(G - 1) · K · 16][T] */
    if (G > 1) {
        if (grp > 0)
#pragma unroll
            for (int k = 0; k < K; k++)
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    hand[(((grp - 1) * K + k) * 16 + i) * T + t] = acc_w[k][i];
                    hand[(((grp - 1) * K + k) * 16 + 8 + i) * T + t] = acc_b[k][i];
                }
        __syncthreads();
        if (grp > 0)
            return;
        for (int g = 1; g < G; g++)
#pragma unroll
            for (int k = 0; k < K; k++)
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    acc_w[k][i] += hand[(((g - 1) * K + k) * 16 + i) * T + t];
                    acc_b[k][i] += hand[(((g - 1) * K + k) * 16 + 8 + i) * T + t];
                }
    }
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int64_t col = (int64_t)blockIdx.x * h + 8 * (t + T * k);
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (i < count[k]) {
                part_w[col + i] = acc_w[k][i];
                if (!RMS)
                    part_b[col + i] = acc_b[k][i];
            }
    }
}

/* Rows longer than norm_backward_kernel holds (h > 8192), in two kernels: dinp, one
 * warp per row, then the partials of dw and dbias. */
template <bool RMS>
__global__ void norm_backward_dinp_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp,
                                          const bf16 *w, const float *mean, const float *rstd,
                                          int64_t n, int h)
{
    int lane = threadIdx.x % 32;
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (r >= n)
        return;
    const bf16 *x = inp + r * h, *g = dout + r * h;
    bf16 *dx = dinp + r * h;
    float m = RMS ? 0.0f : mean[r], rs = rstd[r];
    double dnorm_sum = 0.0, dnorm_xhat_sum = 0.0;
    for (int i = lane; i < h; i += 32) {
        float xhat = (pt_ld(x + i) - m) * rs;
        float dnorm = pt_ld(w + i) * pt_ld(g + i);
        dnorm_sum += dnorm;
        dnorm_xhat_sum += (double)dnorm * xhat;
    }
    float dm = RMS ? 0.0f : (float)(pt_warp_sum(dnorm_sum) / h);
    float dxm = (float)(pt_warp_sum(dnorm_xhat_sum) / h);
    for (int i = lane; i < h; i += 32) {
        float xhat = (pt_ld(x + i) - m) * rs;
        float dnorm = pt_ld(w + i) * pt_ld(g + i);
        pt_st(dx + i, pt_ld(dx + i) + rs * (dnorm - dm - xhat * dxm));
    }
}

/* per (chunk of rows, column) partial sums of xhat · g (and g). Block (32 columns,
 * 8 row lanes), grid (column tiles, chunks). */
template <bool RMS>
__global__ void norm_backward_dw_kernel(float *part_w, float *part_b, const bf16 *dout,
                                        const bf16 *inp, const float *mean, const float *rstd,
                                        int64_t n, int h, int64_t chunk_rows)
{
    __shared__ float sw[8][33], sb[8][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * 32 + tx;
    int64_t r0 = (int64_t)blockIdx.y * chunk_rows;
    int64_t r1 = r0 + chunk_rows < n ? r0 + chunk_rows : n;
    float acc_w = 0.0f, acc_b = 0.0f;
    if (c < h)
        for (int64_t r = r0 + ty; r < r1; r += 8) {
            float g = pt_ld(dout + r * h + c);
            float xhat = (pt_ld(inp + r * h + c) - (RMS ? 0.0f : mean[r])) * rstd[r];
            acc_w += xhat * g;
            acc_b += g;
        }
    sw[ty][tx] = acc_w;
    sb[ty][tx] = acc_b;
    __syncthreads();
    if (ty == 0 && c < h) {
        float tw = 0.0f, tb = 0.0f;
        for (int i = 0; i < 8; i++) {
            tw += sw[i][tx];
            tb += sb[i][tx];
        }
        part_w[(int64_t)blockIdx.y * h + c] = tw;
        if (!RMS)
            part_b[(int64_t)blockIdx.y * h + c] = tb;
    }
}

/* norm_backward_kernel with K chunks a thread, on the vector path when vec: G groups of
 * T threads (T · K >= the row's chunks) a block, each taking every G-th group of R rows
 * of the block's chunk; groups 1 .. G-1 hand their column sums to group 0 through
 * dynamic shared memory, added in group order. G brings the grid to about
 * BWD_GRID_THREADS threads when its chunks(n) blocks have few columns, and no further:
 * more groups ran faster on grids of few narrow blocks, and a second group on a grid
 * that fills the device already ran slower (two blocks a multiprocessor, out of step,
 * keep loads in flight while the other waits at its barrier;
 * the code notes in docs/results/). */
template <bool RMS, int K>
static void norm_backward_fused(pt_kernels *kn, bool vec, bf16 *dinp, float *part_w,
                                float *part_b, const bf16 *dout, const bf16 *inp,
                                const bf16 *w, const float *mean, const float *rstd,
                                int64_t n, int h)
{
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    unsigned blocks = (unsigned)pt_kcuda_chunks(n);
    int T = (((h + 7) / 8 + K - 1) / K + 31) / 32 * 32;
    int64_t G = BWD_GRID_THREADS / ((int64_t)blocks * T);
    G = G < 1 ? 1 : G > BWD_THREADS / T ? BWD_THREADS / T : G;
    /* at most 480 · 16 floats, 31 KB (G > 1 only where T <= 256, so K = 1): under the
     * 48 KB a launch may ask for without cudaFuncSetAttribute */
    size_t smem = (size_t)(G - 1) * K * 16 * T * sizeof(float);
    int64_t rows = pt_kcuda_chunk_rows(n);
    unsigned threads = (unsigned)(G * T);
    if (vec)
        PT_LAUNCH(blocks, threads, smem, st, norm_backward_kernel<RMS, true, K>)(dinp, part_w,
            part_b, dout, inp, w, mean, rstd, n, h, rows, T);
    else
        PT_LAUNCH(blocks, threads, smem, st, norm_backward_kernel<RMS, false, K>)(dinp, part_w,
            part_b, dout, inp, w, mean, rstd, n, h, rows, T);
    PT_LAUNCHED(kn, "norm_backward");
}

template <bool RMS>
static void norm_backward(pt_kernels *kn, bf16 *dinp, float *dw, float *dbias,
                          const bf16 *dout, const bf16 *inp, const bf16 *w, const float *mean,
                          const float *rstd, int64_t n, int h)
{
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    if (n <= 0 || h <= 0)
        return;
    int chunks = pt_kcuda_chunks(n), col_chunks = (h + 7) / 8; /* of rows; of 8 columns */
    size_t per = (size_t)chunks * h;
    float *part = (float *)pt_kcuda_scratch(kn, (RMS ? 1 : 2) * per * sizeof(float));
    if (!part)
        return;
    float *part_b = RMS ? NULL : part + per;
    const void *ptrs[] = {dinp, dout, inp, w};
    bool vec = h % 8 == 0;
    for (const void *p : ptrs)
        vec = vec && (uintptr_t)p % 16 == 0;
    if (col_chunks <= BWD_THREADS) {
        norm_backward_fused<RMS, 1>(kn, vec, dinp, part, part_b, dout, inp, w, mean, rstd, n, h);
    } else if (col_chunks <= 2 * BWD_THREADS) {
        norm_backward_fused<RMS, 2>(kn, vec, dinp, part, part_b, dout, inp, w, mean, rstd, n, h);
    } else {
        PT_LAUNCH(row_blocks(n), PT_KCUDA_THREADS, 0, st, norm_backward_dinp_kernel<RMS>)(dinp,
            dout, inp, w, mean, rstd, n, h);
        PT_LAUNCHED(kn, "norm_backward_dinp");
        dim3 grid((unsigned)((h + 31) / 32), (unsigned)chunks), block(32, 8);
        PT_LAUNCH(grid, block, 0, st, norm_backward_dw_kernel<RMS>)(part, part_b, dout, inp,
            mean, rstd, n, h, pt_kcuda_chunk_rows(n));
        PT_LAUNCHED(kn, "norm_backward_dw");
    }
    pt_kcuda_sum_partials(kn, dw, RMS ? NULL : dbias, part, chunks, h);
}

void pt_kcuda_layernorm_backward(pt_kernels *kn,
                                 float *dinp,       /* (n, h) [act] */
                                 float *dw,         /* (h) fp32 */
                                 float *dbias,      /* (h) fp32 */
                                 const float *dout, /* (n, h) [act] */
                                 const float *inp,  /* (n, h) [act] */
                                 const float *w,    /* (h) [act] */
                                 const float *mean, /* (n) */
                                 const float *rstd, /* (n) */
                                 int64_t n, int h)
{
    norm_backward<false>(kn, (bf16 *)dinp, dw, dbias, (const bf16 *)dout, (const bf16 *)inp,
                         (const bf16 *)w, mean, rstd, n, h);
}

/* ---- RMSNorm entries ----------------------------------------------------------------- */

void pt_kcuda_rmsnorm_forward(pt_kernels *kn,
                              float *out,           /* (n, h) [act] */
                              float *rstd,          /* (n) fp32 */
                              const float *inp,     /* (n, h) [act] */
                              const float *w,       /* (h) [act] */
                              int64_t n, int h, float eps)
{
    norm_forward<true, false>(kn, "rmsnorm_forward", (bf16 *)out, NULL, rstd, NULL,
                              (const bf16 *)inp, NULL, (const bf16 *)w, NULL, n, h, eps);
}

void pt_kcuda_residual_rmsnorm_forward(pt_kernels *kn,
                                       float *res,           /* (n, h) [act] inp1 + inp2 */
                                       float *out,           /* (n, h) [act] */
                                       float *rstd,          /* (n) fp32 */
                                       const float *inp1,    /* (n, h) [act] */
                                       const float *inp2,    /* (n, h) [act] */
                                       const float *w,       /* (h) [act] */
                                       int64_t n, int h, float eps)
{
    norm_forward<true, true>(kn, "residual_rmsnorm_forward", (bf16 *)out, NULL, rstd,
                             (bf16 *)res, (const bf16 *)inp1, (const bf16 *)inp2,
                             (const bf16 *)w, NULL, n, h, eps);
}

void pt_kcuda_rmsnorm_backward(pt_kernels *kn,
                               float *dinp,         /* (n, h) [act] */
                               float *dw,           /* (h) fp32 */
                               const float *dout,   /* (n, h) [act] */
                               const float *inp,    /* (n, h) [act] */
                               const float *w,      /* (h) [act] */
                               const float *rstd,   /* (n) */
                               int64_t n, int h)
{
    norm_backward<true>(kn, (bf16 *)dinp, dw, NULL, (const bf16 *)dout, (const bf16 *)inp,
                        (const bf16 *)w, NULL, rstd, n, h);
}
