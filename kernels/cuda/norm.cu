/*
 * Normalisations on CUDA: LayerNorm (GPT-2) and RMSNorm (LLaMA), forward and backward,
 * and the residual add fused with the norm forward after it. One warp per row: row
 * statistics are summed in double, as the CPU reference does, and saved as fp32 (mean,
 * rstd). The backward's dinp is per row too; its weight gradients (dw, dbias: sums over
 * all n rows) are reduced in two deterministic passes (a partial per chunk of rows and
 * column, then backend.cu's in-order sum), never with atomics.
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

/* dx += rstd · (dnorm - mean(dnorm) - xhat · mean(dnorm · xhat)), dnorm = g · w; with
 * rms, mean = 0 and the mean(dnorm) term is left out */
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

/* First pass of dw (and dbias): per (chunk of rows, column) partial sums of xhat · g
 * (and g). Block (32 columns, 8 row lanes), grid (column tiles, chunks). */
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

template <bool RMS>
static void norm_backward(pt_kernels *kn, bf16 *dinp, float *dw, float *dbias,
                          const bf16 *dout, const bf16 *inp, const bf16 *w, const float *mean,
                          const float *rstd, int64_t n, int h)
{
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    if (n <= 0 || h <= 0)
        return;
    PT_LAUNCH(row_blocks(n), PT_KCUDA_THREADS, 0, st, norm_backward_dinp_kernel<RMS>)(dinp, dout,
        inp, w, mean, rstd, n, h);
    PT_LAUNCHED(kn, "norm_backward_dinp");
    int chunks = pt_kcuda_chunks(n);
    size_t per = (size_t)chunks * h;
    float *part = (float *)pt_kcuda_scratch(kn, (RMS ? 1 : 2) * per * sizeof(float));
    if (!part)
        return;
    dim3 grid((unsigned)((h + 31) / 32), (unsigned)chunks), block(32, 8);
    PT_LAUNCH(grid, block, 0, st, norm_backward_dw_kernel<RMS>)(part, RMS ? NULL : part + per, dout,
        inp, mean, rstd, n, h, pt_kcuda_chunk_rows(n));
    PT_LAUNCHED(kn, "norm_backward_dw");
    pt_kcuda_sum_partials(kn, dw, part, chunks, h);
    if (!RMS)
        pt_kcuda_sum_partials(kn, dbias, part + per, chunks, h);
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
