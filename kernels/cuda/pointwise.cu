/*
 * Pointwise ops on CUDA: rotary position embedding, GELU, SwiGLU, the residual add,
 * dropout and the bf16 conversions, forward and backward. Each is a grid-stride loop
 * over elements with the same formulas as the CPU reference (kernels/cpu/act.c,
 * rope.c, rng.c, convert.c), evaluated in fp32 on bf16 data; RoPE's angles are
 * computed in double from the absolute position, as on the CPU. Dropout runs the same
 * Philox4x32-10 with the same counter scheme as pt_k_dropout_keep, so its masks equal
 * the CPU's bit for bit. Backwards accumulate (+=) into their gradients.
 */
#include "cuda.cuh"

#define GRID_STRIDE(e, n)                                                                  \
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (n);             \
         e += (int64_t)gridDim.x * blockDim.x)

#define LAUNCH(n) pt_kcuda_blocks((n), PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0, pt_kcuda_ctx(kn)->stream

/* ---- RoPE ------------------------------------------------------------------------------ */

/* one thread per pair (x[2i], x[2i+1]) of one head of one token */
template <bool BACKWARD>
__global__ void rope_kernel(bf16 *out, const bf16 *inp, int b, int s, int nh, int d, int pos0,
                            float theta)
{
    int half = d / 2;
    int64_t total = (int64_t)b * s * nh * half;
    GRID_STRIDE(e, total) {
        int i = (int)(e % half);
        int64_t row = e / half; /* (bi, si, hi) */
        int si = (int)(row / nh % s);
        double freq = pow((double)theta, -2.0 * i / d);
        double angle = (double)(pos0 + si) * freq;
        float c = (float)cos(angle), sn = (float)sin(angle);
        int64_t off = row * d + 2 * i;
        float x0 = pt_ld(inp + off), x1 = pt_ld(inp + off + 1);
        if (!BACKWARD) {
            pt_st(out + off, x0 * c - x1 * sn);
            pt_st(out + off + 1, x0 * sn + x1 * c);
        } else { /* the transposed rotation, accumulated */
            pt_st(out + off, pt_ld(out + off) + (x0 * c + x1 * sn));
            pt_st(out + off + 1, pt_ld(out + off + 1) + (-x0 * sn + x1 * c));
        }
    }
}

void pt_kcuda_rope_forward(pt_kernels *kn,
                           float *out,              /* (b, s, nh, d) [act] */
                           const float *inp,        /* (b, s, nh, d) [act] */
                           int b, int s, int nh, int d, int pos0, float theta)
{
    int64_t total = (int64_t)b * s * nh * (d / 2);
    if (total <= 0)
        return;
    rope_kernel<false><<<LAUNCH(total)>>>((bf16 *)out, (const bf16 *)inp, b, s, nh, d, pos0,
                                          theta);
    PT_LAUNCHED(kn, "rope_forward");
}

void pt_kcuda_rope_backward(pt_kernels *kn,
                            float *dinp,            /* (b, s, nh, d) [act] */
                            const float *dout,      /* (b, s, nh, d) [act] */
                            int b, int s, int nh, int d, int pos0, float theta)
{
    int64_t total = (int64_t)b * s * nh * (d / 2);
    if (total <= 0)
        return;
    rope_kernel<true><<<LAUNCH(total)>>>((bf16 *)dinp, (const bf16 *)dout, b, s, nh, d, pos0,
                                         theta);
    PT_LAUNCHED(kn, "rope_backward");
}

/* ---- GELU (tanh approximation), as kernels/cpu/act.c ---------------------------------- */

#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f

static __device__ __forceinline__ float tanh_fast(float u)
{
    return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f);
}

__global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, int64_t n)
{
    GRID_STRIDE(e, n) {
        float x = pt_ld(inp + e);
        pt_st(out + e, 0.5f * x * (1.0f + tanh_fast(GELU_SCALE * (x + GELU_CUBE * x * x * x))));
    }
}

__global__ void gelu_backward_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, int64_t n)
{
    GRID_STRIDE(e, n) {
        float x = pt_ld(inp + e);
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float th = tanh_fast(u);
        float sech2 = 1.0f - th * th;
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        float g = pt_ld(dout + e) * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
        pt_st(dinp + e, pt_ld(dinp + e) + g);
    }
}

void pt_kcuda_gelu_forward(pt_kernels *kn, float *out, const float *inp, int64_t n)
{
    if (n <= 0)
        return;
    gelu_forward_kernel<<<LAUNCH(n)>>>((bf16 *)out, (const bf16 *)inp, n);
    PT_LAUNCHED(kn, "gelu_forward");
}

void pt_kcuda_gelu_backward(pt_kernels *kn, float *dinp, const float *dout, const float *inp,
                            int64_t n)
{
    if (n <= 0)
        return;
    gelu_backward_kernel<<<LAUNCH(n)>>>((bf16 *)dinp, (const bf16 *)dout, (const bf16 *)inp, n);
    PT_LAUNCHED(kn, "gelu_backward");
}

/* ---- SwiGLU ----------------------------------------------------------------------------- */

__global__ void swiglu_forward_kernel(bf16 *out, const bf16 *gate, const bf16 *up, int64_t n)
{
    GRID_STRIDE(e, n) {
        float g = pt_ld(gate + e);
        pt_st(out + e, g / (1.0f + expf(-g)) * pt_ld(up + e));
    }
}

__global__ void swiglu_backward_kernel(bf16 *dgate, bf16 *dup, const bf16 *dout,
                                       const bf16 *gate, const bf16 *up, int64_t n)
{
    GRID_STRIDE(e, n) {
        float g = pt_ld(gate + e), u = pt_ld(up + e), go = pt_ld(dout + e);
        float sig = 1.0f / (1.0f + expf(-g));
        float silu = g * sig;
        /* d silu / dg = sig · (1 + g · (1 - sig)) */
        pt_st(dgate + e, pt_ld(dgate + e) + go * u * sig * (1.0f + g * (1.0f - sig)));
        pt_st(dup + e, pt_ld(dup + e) + go * silu);
    }
}

void pt_kcuda_swiglu_forward(pt_kernels *kn, float *out, const float *gate, const float *up,
                             int64_t n, int f)
{
    int64_t total = n * f;
    if (total <= 0)
        return;
    swiglu_forward_kernel<<<LAUNCH(total)>>>((bf16 *)out, (const bf16 *)gate, (const bf16 *)up,
                                             total);
    PT_LAUNCHED(kn, "swiglu_forward");
}

void pt_kcuda_swiglu_backward(pt_kernels *kn, float *dgate, float *dup, const float *dout,
                              const float *gate, const float *up, int64_t n, int f)
{
    int64_t total = n * f;
    if (total <= 0)
        return;
    swiglu_backward_kernel<<<LAUNCH(total)>>>((bf16 *)dgate, (bf16 *)dup, (const bf16 *)dout,
                                              (const bf16 *)gate, (const bf16 *)up, total);
    PT_LAUNCHED(kn, "swiglu_backward");
}

/* ---- Residual ---------------------------------------------------------------------------- */

__global__ void residual_forward_kernel(bf16 *out, const bf16 *a, const bf16 *b, int64_t n)
{
    GRID_STRIDE(e, n) pt_st(out + e, pt_ld(a + e) + pt_ld(b + e));
}

__global__ void residual_backward_kernel(bf16 *d1, bf16 *d2, const bf16 *dout, int64_t n)
{
    GRID_STRIDE(e, n) {
        float g = pt_ld(dout + e);
        pt_st(d1 + e, pt_ld(d1 + e) + g);
        pt_st(d2 + e, pt_ld(d2 + e) + g);
    }
}

void pt_kcuda_residual_forward(pt_kernels *kn, float *out, const float *inp1,
                               const float *inp2, int64_t n)
{
    if (n <= 0)
        return;
    residual_forward_kernel<<<LAUNCH(n)>>>((bf16 *)out, (const bf16 *)inp1, (const bf16 *)inp2,
                                           n);
    PT_LAUNCHED(kn, "residual_forward");
}

void pt_kcuda_residual_backward(pt_kernels *kn, float *dinp1, float *dinp2, const float *dout,
                                int64_t n)
{
    if (n <= 0)
        return;
    residual_backward_kernel<<<LAUNCH(n)>>>((bf16 *)dinp1, (bf16 *)dinp2, (const bf16 *)dout,
                                            n);
    PT_LAUNCHED(kn, "residual_backward");
}

/* ---- Dropout ------------------------------------------------------------------------------- */

/* Philox4x32-10: must stay identical to pt_k_philox4x32_10 in kernels/cpu/rng.c */
static __device__ void philox4x32_10(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    for (int round = 0; round < 10; round++) {
        uint32_t hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* one thread per Philox block: elements 4·blk .. 4·blk+3 of the whole tensor, those of
 * them inside [offset, offset + n); out[i] (+)= inp[i] · mask(offset + i) · keep_scale */
template <bool ACC>
__global__ void dropout_kernel(bf16 *out, const bf16 *inp, int64_t n, float p, float keep_scale,
                               uint64_t seed, uint64_t tensor_id, int64_t offset, int64_t blk0,
                               int64_t nblk)
{
    GRID_STRIDE(t, nblk) {
        uint64_t blk = (uint64_t)(blk0 + t);
        uint32_t r[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)tensor_id,
                         (uint32_t)(tensor_id >> 32)};
        philox4x32_10(r, (uint32_t)seed, (uint32_t)(seed >> 32));
#pragma unroll
        for (int w = 0; w < 4; w++) {
            int64_t i = (int64_t)blk * 4 + w - offset;
            if (i < 0 || i >= n)
                continue;
            int keep = (float)(r[w] >> 8) * (1.0f / 16777216.0f) >= p;
            float y = keep ? pt_ld(inp + i) * keep_scale : 0.0f;
            pt_st(out + i, ACC ? pt_ld(out + i) + y : y);
        }
    }
}

template <bool ACC>
static void dropout(pt_kernels *kn, bf16 *out, const bf16 *inp, int64_t n, float p,
                    uint64_t seed, uint64_t tensor_id, int64_t offset, const char *name)
{
    if (n <= 0)
        return;
    const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; /* as rng.c */
    int64_t blk0 = offset / 4, nblk = (offset + n - 1) / 4 - blk0 + 1;
    dropout_kernel<ACC><<<LAUNCH(nblk)>>>(out, inp, n, p, keep_scale, seed, tensor_id, offset,
                                          blk0, nblk);
    PT_LAUNCHED(kn, name);
}

void pt_kcuda_dropout_forward(pt_kernels *kn, float *out, const float *inp, int64_t n, float p,
                              uint64_t seed, uint64_t tensor_id, int64_t offset)
{
    dropout<false>(kn, (bf16 *)out, (const bf16 *)inp, n, p, seed, tensor_id, offset,
                   "dropout_forward");
}

void pt_kcuda_dropout_backward(pt_kernels *kn, float *dinp, const float *dout, int64_t n,
                               float p, uint64_t seed, uint64_t tensor_id, int64_t offset)
{
    dropout<true>(kn, (bf16 *)dinp, (const bf16 *)dout, n, p, seed, tensor_id, offset,
                  "dropout_backward");
}

/* ---- Conversions ----------------------------------------------------------------------------- */

__global__ void f32_to_bf16_kernel(uint16_t *dst, const float *src, int64_t n)
{
    GRID_STRIDE(e, n) dst[e] = pt_bf16_bits(src[e]);
}

__global__ void bf16_to_f32_kernel(float *dst, const uint16_t *src, int64_t n)
{
    GRID_STRIDE(e, n) dst[e] = __uint_as_float((uint32_t)src[e] << 16);
}

void pt_kcuda_f32_to_bf16(pt_kernels *kn, uint16_t *dst, const float *src, int64_t n)
{
    if (n <= 0)
        return;
    f32_to_bf16_kernel<<<LAUNCH(n)>>>(dst, src, n);
    PT_LAUNCHED(kn, "f32_to_bf16");
}

void pt_kcuda_bf16_to_f32(pt_kernels *kn, float *dst, const uint16_t *src, int64_t n)
{
    if (n <= 0)
        return;
    bf16_to_f32_kernel<<<LAUNCH(n)>>>(dst, src, n);
    PT_LAUNCHED(kn, "bf16_to_f32");
}
