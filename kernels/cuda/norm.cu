/*
 * Normalisations on CUDA: LayerNorm (GPT-2) and RMSNorm (LLaMA), forward and backward.
 * One warp per row: row statistics are summed in double, as the CPU reference does,
 * and saved as fp32 (mean, rstd). The backward's dinp is per row too; its weight
 * gradients (dw, dbias: sums over all n rows) are reduced in two deterministic passes
 * (a partial per chunk of rows and column, then backend.cu's in-order sum), never with
 * atomics.
 */
#include "cuda.cuh"

enum { ROWS_PER_BLOCK = PT_KCUDA_THREADS / 32 };

static unsigned row_blocks(int64_t n) { return (unsigned)((n + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

/* ---- LayerNorm ------------------------------------------------------------------------ */

__global__ void layernorm_forward_kernel(bf16 *out, float *mean, float *rstd, const bf16 *inp,
                                         const bf16 *w, const bf16 *bias, int64_t n, int h,
                                         float eps)
{
    int lane = threadIdx.x % 32;
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (r >= n)
        return; /* the whole warp leaves together */
    const bf16 *x = inp + r * h;
    bf16 *o = out + r * h;
    double sum = 0.0;
    for (int i = lane; i < h; i += 32)
        sum += pt_ld(x + i);
    double mu = pt_warp_sum(sum) / h;
    double var = 0.0;
    for (int i = lane; i < h; i += 32) {
        double dx = pt_ld(x + i) - mu;
        var += dx * dx;
    }
    var = pt_warp_sum(var);
    float m = (float)mu;
    float rs = (float)(1.0 / sqrt(var / h + eps));
    for (int i = lane; i < h; i += 32)
        pt_st(o + i, (pt_ld(x + i) - m) * rs * pt_ld(w + i) + pt_ld(bias + i));
    if (lane == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
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
    if (n <= 0)
        return;
    PT_LAUNCH(row_blocks(n), PT_KCUDA_THREADS, 0, pt_kcuda_ctx(kn)->stream,
              layernorm_forward_kernel)(
        (bf16 *)out, mean, rstd, (const bf16 *)inp, (const bf16 *)w, (const bf16 *)bias, n, h, eps);
    PT_LAUNCHED(kn, "layernorm_forward");
}

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

/* ---- RMSNorm -------------------------------------------------------------------------- */

__global__ void rmsnorm_forward_kernel(bf16 *out, float *rstd, const bf16 *inp, const bf16 *w,
                                       int64_t n, int h, float eps)
{
    int lane = threadIdx.x % 32;
    int64_t r = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    if (r >= n)
        return;
    const bf16 *x = inp + r * h;
    bf16 *o = out + r * h;
    double ss = 0.0;
    for (int i = lane; i < h; i += 32) {
        double xi = pt_ld(x + i);
        ss += xi * xi;
    }
    ss = pt_warp_sum(ss);
    float rs = (float)(1.0 / sqrt(ss / h + eps));
    for (int i = lane; i < h; i += 32)
        pt_st(o + i, pt_ld(x + i) * rs * pt_ld(w + i));
    if (lane == 0)
        rstd[r] = rs;
}

void pt_kcuda_rmsnorm_forward(pt_kernels *kn,
                              float *out,           /* (n, h) [act] */
                              float *rstd,          /* (n) fp32 */
                              const float *inp,     /* (n, h) [act] */
                              const float *w,       /* (h) [act] */
                              int64_t n, int h, float eps)
{
    if (n <= 0)
        return;
    PT_LAUNCH(row_blocks(n), PT_KCUDA_THREADS, 0, pt_kcuda_ctx(kn)->stream, rmsnorm_forward_kernel)(
        (bf16 *)out, rstd, (const bf16 *)inp, (const bf16 *)w, n, h, eps);
    PT_LAUNCHED(kn, "rmsnorm_forward");
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
