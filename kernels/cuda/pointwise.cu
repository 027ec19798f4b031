/*
 * Pointwise ops on CUDA: rotary position embedding, GELU, SwiGLU, the residual add,
 * dropout and the bf16 conversions, forward and backward. Each is a grid-stride loop
 * over elements with the same formulas as the CPU reference (kernels/cpu/act.c,
 * rope.c, rng.c, convert.c), evaluated in fp32 on bf16 data; RoPE's angles are fp32
 * from the absolute position, the inverse frequency in two floats and the reduction by
 * 2π exact (the error bound is above rope_sincos). Dropout runs the same Philox4x32-10
 * with the same counter scheme as pt_k_dropout_keep, so its masks equal the CPU's bit
 * for bit. Backwards accumulate (+=) into their gradients; dgelu_inplace, the GELU half
 * of matmul_backward_dgelu when matmul.cu composes it, scales its buffer in place.
 */
#include "cuda.cuh"

#define GRID_STRIDE(e, n)                                                                  \
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (n);             \
         e += (int64_t)gridDim.x * blockDim.x)

#define LAUNCH(n) pt_kcuda_blocks((n), PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0, pt_kcuda_ctx(kn)->stream

/* ---- RoPE ------------------------------------------------------------------------------ */

/* The angle of pair i at position p is p · f_i, f_i = theta^(-2i/d), and positions reach
 * 128K (LLaMA 3.1). Plain fp32 is not enough there: rounding f_i costs p · f_i · 2^-24
 * (0.008 rad at p = 2^17, f_0 = 1) and rounding the product half as much again, about
 * 1.2% of the element where a bf16 rounding is at most 0.4%; double pow/sin/cos per
 * element are exact but slow on GPUs without full-rate fp64. So, in fp32 throughout:
 * - f_i is computed per call on the host in double (pow, as the CPU) and split into
 *   fp32 hi + lo, together f_i to 2^-48 relative, passed as a kernel parameter (no
 *   device memory, no upload);
 * - P = p is exact for p < 2^24; P·hi = a_hi + e exactly, e = fmaf(P, hi, -a_hi), and
 *   a_lo = e + P·lo holds the rest of the angle to 1e-7 rad (1e-9 for p <= 2^17);
 * - a_hi is reduced by 2π: k = rint(a_hi / 2π), |k| < 2^22; a_hi - k·C1 (C1 = 2π in
 *   fp32) is exact, both being multiples of 2^-22 once k != 0 and the difference below
 *   4; then k·C2 (C2 = 2π - C1 in fp32; C1 + C2 is 2π to 2^-47, so k·2^-47 < 3e-8 rad)
 *   and a_lo are added with one rounding each, at most 2^-23 and 2^-22;
 * - sincosf is within 2 ulp (CUDA Programming Guide, "Mathematical Functions"), 1.2e-7
 *   on the reduced angle (|r| < π + 1).
 * The cosine and sine so differ from the CPU's (double, rounded to fp32) by under 1e-6
 * at any position below 2^24, independent of the position: the bf16 outputs equal the
 * CPU's or lie one bf16 ulp away where the fp32 values straddle a rounding midpoint,
 * as for every pointwise op, inside TOL_ELEM of tests/kernels/test_kernels_cuda.h (its RoPE test
 * checks pos0 = 100000 as well as 0). */
enum { ROPE_MAX_HALF = 256 }; /* d <= 512: 2 KiB of parameters */

struct rope_freqs {
    float2 f[ROPE_MAX_HALF]; /* (hi, lo) of theta^(-2i/d) */
};

#define ROPE_TWO_PI_HI 6.28318548202514648f      /* 2π rounded to fp32 */
#define ROPE_TWO_PI_LO -1.74845553146951305e-7f  /* 2π - ROPE_TWO_PI_HI, rounded */
#define ROPE_INV_TWO_PI 0.159154943091895336f

static __device__ __forceinline__ void rope_sincos(int pos, float2 f, float *sn, float *c)
{
    const float P = (float)pos;
    const float a_hi = __fmul_rn(P, f.x); /* rounded, never fused: e below is its error */
    const float a_lo = fmaf(P, f.x, -a_hi) + P * f.y;
    const float k = rintf(a_hi * ROPE_INV_TWO_PI);
    float r = fmaf(-k, ROPE_TWO_PI_HI, a_hi);
    r = fmaf(-k, ROPE_TWO_PI_LO, r);
    sincosf(r + a_lo, sn, c);
}

/* one thread per pair (x[2i], x[2i+1]) of one head of one token */
template <bool BACKWARD>
__global__ void rope_kernel(bf16 *out, const bf16 *inp, int b, int s, int nh, int d, int pos0,
                            rope_freqs freqs)
{
    int half = d / 2;
    int64_t total = (int64_t)b * s * nh * half;
    GRID_STRIDE(e, total) {
        int i = (int)(e % half);
        int64_t row = e / half; /* (bi, si, hi) */
        int si = (int)(row / nh % s);
        float c, sn;
        rope_sincos(pos0 + si, freqs.f[i], &sn, &c);
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

/* The inverse frequencies of a call, with pow in double exactly as kernels/cpu/rope.c;
 * 0 or -1 (error recorded) when d is beyond the table. */
static int rope_freqs_of(pt_kernels *kn, int d, float theta, rope_freqs *fr)
{
    if (d / 2 > ROPE_MAX_HALF) {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "rope: head dim %d, at most %d", d,
                      2 * ROPE_MAX_HALF);
        return -1;
    }
    for (int i = 0; i < d / 2; i++) {
        double f = pow((double)theta, -2.0 * i / d);
        float hi = (float)f;
        fr->f[i] = make_float2(hi, (float)(f - hi));
    }
    return 0;
}

void pt_kcuda_rope_forward(pt_kernels *kn,
                           float *out,              /* (b, s, nh, d) [act] */
                           const float *inp,        /* (b, s, nh, d) [act] */
                           int b, int s, int nh, int d, int pos0, float theta)
{
    int64_t total = (int64_t)b * s * nh * (d / 2);
    rope_freqs fr;
    if (total <= 0 || rope_freqs_of(kn, d, theta, &fr))
        return;
    PT_LAUNCH(LAUNCH(total), rope_kernel<false>)((bf16 *)out, (const bf16 *)inp, b, s, nh, d, pos0,
        fr);
    PT_LAUNCHED(kn, "rope_forward");
}

void pt_kcuda_rope_backward(pt_kernels *kn,
                            float *dinp,            /* (b, s, nh, d) [act] */
                            const float *dout,      /* (b, s, nh, d) [act] */
                            int b, int s, int nh, int d, int pos0, float theta)
{
    int64_t total = (int64_t)b * s * nh * (d / 2);
    rope_freqs fr;
    if (total <= 0 || rope_freqs_of(kn, d, theta, &fr))
        return;
    PT_LAUNCH(LAUNCH(total), rope_kernel<true>)((bf16 *)dinp, (const bf16 *)dout, b, s, nh, d, pos0,
        fr);
    PT_LAUNCHED(kn, "rope_backward");
}

/* ---- GELU (tanh approximation), as kernels/cpu/act.c ---------------------------------- */

#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f

static __device__ __forceinline__ float tanh_fast(float u)
{
    return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f);
}

/* Eight elements a thread where every pointer is 16-byte aligned (vec), one where not;
 * the first 8 · (n / 8) elements of a vec launch go by eights, the rest one at a time.
 * The same values either way. */
static bool aligned16(const void *a, const void *b, const void *c)
{
    return pt_kcuda_align_of(a) >= 16 && pt_kcuda_align_of(b) >= 16 &&
           pt_kcuda_align_of(c) >= 16;
}

static __device__ __forceinline__ float gelu(float x)
{
    return 0.5f * x * (1.0f + tanh_fast(GELU_SCALE * (x + GELU_CUBE * x * x * x)));
}

__global__ void gelu_forward_kernel(bf16 *out, const bf16 *inp, int64_t n, int vec)
{
    const int64_t n8 = vec ? n / 8 : 0;
    GRID_STRIDE(q, n8) {
        float x[8];
        pt_ld8(x, inp + 8 * q);
#pragma unroll
        for (int j = 0; j < 8; j++)
            x[j] = gelu(x[j]);
        pt_st8(out + 8 * q, x);
    }
    GRID_STRIDE(e, n - 8 * n8) pt_st(out + 8 * n8 + e, gelu(pt_ld(inp + 8 * n8 + e)));
}

/* gelu'(x): d/dx of 0.5 x (1 + tanh(u)), u = s (x + c x^3) */
static __device__ __forceinline__ float gelu_grad(float x)
{
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    float th = tanh_fast(u);
    float sech2 = 1.0f - th * th;
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

__global__ void gelu_backward_kernel(bf16 *dinp, const bf16 *dout, const bf16 *inp, int64_t n,
                                     int vec)
{
    const int64_t n8 = vec ? n / 8 : 0;
    GRID_STRIDE(q, n8) {
        float di[8], g[8], x[8];
        pt_ld8(di, dinp + 8 * q);
        pt_ld8(g, dout + 8 * q);
        pt_ld8(x, inp + 8 * q);
#pragma unroll
        for (int j = 0; j < 8; j++)
            di[j] = di[j] + g[j] * gelu_grad(x[j]);
        pt_st8(dinp + 8 * q, di);
    }
    GRID_STRIDE(e, n - 8 * n8) {
        const int64_t i = 8 * n8 + e;
        float g = pt_ld(dout + i) * gelu_grad(pt_ld(inp + i));
        pt_st(dinp + i, pt_ld(dinp + i) + g);
    }
}

/* d = d · gelu'(pre), written: the data gradient of a GEMM (d) taken through the GELU
 * whose input was pre (matmul_backward_dgelu without cuBLASLt's DGELU epilogue) */
__global__ void dgelu_inplace_kernel(bf16 *d, const bf16 *pre, int64_t n)
{
    GRID_STRIDE(e, n) pt_st(d + e, pt_ld(d + e) * gelu_grad(pt_ld(pre + e)));
}

/* elementwise launches that go by eights: an eighth of the threads where they can */
#define LAUNCH8(n, vec) LAUNCH((vec) ? ((n) + 7) / 8 : (n))

void pt_kcuda_gelu_forward(pt_kernels *kn, float *out, const float *inp, int64_t n)
{
    if (n <= 0)
        return;
    const int vec = aligned16(out, inp, inp);
    PT_LAUNCH(LAUNCH8(n, vec), gelu_forward_kernel)((bf16 *)out, (const bf16 *)inp, n, vec);
    PT_LAUNCHED(kn, "gelu_forward");
}

void pt_kcuda_gelu_backward(pt_kernels *kn, float *dinp, const float *dout, const float *inp,
                            int64_t n)
{
    if (n <= 0)
        return;
    const int vec = aligned16(dinp, dout, inp);
    PT_LAUNCH(LAUNCH8(n, vec), gelu_backward_kernel)((bf16 *)dinp, (const bf16 *)dout,
        (const bf16 *)inp, n, vec);
    PT_LAUNCHED(kn, "gelu_backward");
}

void pt_kcuda_dgelu_inplace(pt_kernels *kn,
                            bf16 *d,                /* (n) in/out */
                            const bf16 *pre,        /* (n) */
                            int64_t n)
{
    if (n <= 0)
        return;
    PT_LAUNCH(LAUNCH(n), dgelu_inplace_kernel)(d, pre, n);
    PT_LAUNCHED(kn, "dgelu_inplace");
}

/* The GELU before an FP8 cast (kernels.h's gelu_forward_amax, gelu_backward_amax): the
 * forward, or the backward written (0 + dout · gelu'(x), what gelu_backward adds into a
 * zeroed buffer), and each block's max |value as stored| into ctx->fp8_part, which
 * fp8.cu's second pass folds into the meta block, as fp8_amax's blocks do. By eights
 * the values are rounded in pairs (pt_pack8_rn: the GELU of finite values is finite,
 * so the same bits as gelu_forward's; the kernel is bound by its instructions) and read
 * back as stored for the amax. */
template <bool BWD>
__global__ void gelu_amax_kernel(pt_kcuda_fp8_part *part, bf16 *out, const bf16 *dout,
                                 const bf16 *x, int64_t n, int vec)
{
    __shared__ float shared[32];
    float m = 0.0f;
    const int64_t n8 = vec ? n / 8 : 0;
    GRID_STRIDE(q, n8) {
        float v[8], xs[8];
        pt_ld8(xs, x + 8 * q);
        if (BWD)
            pt_ld8(v, dout + 8 * q);
#pragma unroll
        for (int j = 0; j < 8; j++)
            v[j] = BWD ? 0.0f + v[j] * gelu_grad(xs[j]) : gelu(xs[j]);
        const uint4 u = pt_pack8_rn(v);
        *reinterpret_cast<uint4 *>(out + 8 * q) = u;
        pt_unpack8(v, u);
#pragma unroll
        for (int j = 0; j < 8; j++)
            m = pt_amax_step(m, v[j]);
    }
    GRID_STRIDE(e, n - 8 * n8) {
        const int64_t i = 8 * n8 + e;
        float v = BWD ? 0.0f + pt_ld(dout + i) * gelu_grad(pt_ld(x + i)) : gelu(pt_ld(x + i));
        out[i] = pt_bf16(v);
        m = pt_amax_step(m, pt_ld(out + i));
    }
    m = pt_block_max(m, shared);
    if (threadIdx.x == 0)
        part[blockIdx.x] = pt_kcuda_fp8_part{m, 0, 0, 0};
}

static void gelu_amax(pt_kernels *kn, bool bwd, float *out, const float *dout, const float *x,
                      int64_t n, float *meta)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    int blocks = 0; /* an empty tensor folds no partials: amax 0 */
    if (n > 0) {
        const int vec = aligned16(out, bwd ? dout : x, x);
        int64_t threads = vec ? (n + 7) / 8 : n;
        int64_t want = (threads + PT_KCUDA_THREADS - 1) / PT_KCUDA_THREADS;
        blocks = (int)(want < PT_KCUDA_FP8_BLOCKS ? want : PT_KCUDA_FP8_BLOCKS);
        if (bwd)
            PT_LAUNCH(blocks, PT_KCUDA_THREADS, 0, ctx->stream, gelu_amax_kernel<true>)(
                ctx->fp8_part, (bf16 *)out, (const bf16 *)dout, (const bf16 *)x, n, vec);
        else
            PT_LAUNCH(blocks, PT_KCUDA_THREADS, 0, ctx->stream, gelu_amax_kernel<false>)(
                ctx->fp8_part, (bf16 *)out, NULL, (const bf16 *)x, n, vec);
        PT_LAUNCHED(kn, bwd ? "gelu_backward_amax" : "gelu_forward_amax");
    }
    pt_kcuda_fp8_fold_amax(kn, meta, blocks);
}

void pt_kcuda_gelu_forward_amax(pt_kernels *kn, float *out, const float *inp, int64_t n,
                                float *meta)
{
    gelu_amax(kn, false, out, NULL, inp, n, meta);
}

void pt_kcuda_gelu_backward_amax(pt_kernels *kn, float *dinp, const float *dout,
                                 const float *inp, int64_t n, float *meta)
{
    gelu_amax(kn, true, dinp, dout, inp, n, meta);
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
    PT_LAUNCH(LAUNCH(total), swiglu_forward_kernel)((bf16 *)out, (const bf16 *)gate,
        (const bf16 *)up, total);
    PT_LAUNCHED(kn, "swiglu_forward");
}

void pt_kcuda_swiglu_backward(pt_kernels *kn, float *dgate, float *dup, const float *dout,
                              const float *gate, const float *up, int64_t n, int f)
{
    int64_t total = n * f;
    if (total <= 0)
        return;
    PT_LAUNCH(LAUNCH(total), swiglu_backward_kernel)((bf16 *)dgate, (bf16 *)dup, (const bf16 *)dout,
        (const bf16 *)gate, (const bf16 *)up, total);
    PT_LAUNCHED(kn, "swiglu_backward");
}

/* ---- Residual ---------------------------------------------------------------------------- */

__global__ void residual_forward_kernel(bf16 *out, const bf16 *a, const bf16 *b, int64_t n,
                                        int vec)
{
    const int64_t n8 = vec ? n / 8 : 0;
    GRID_STRIDE(q, n8) {
        float x[8], y[8];
        pt_ld8(x, a + 8 * q);
        pt_ld8(y, b + 8 * q);
#pragma unroll
        for (int j = 0; j < 8; j++)
            x[j] += y[j];
        pt_st8(out + 8 * q, x);
    }
    GRID_STRIDE(e, n - 8 * n8) {
        const int64_t i = 8 * n8 + e;
        pt_st(out + i, pt_ld(a + i) + pt_ld(b + i));
    }
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
    const int vec = aligned16(out, inp1, inp2);
    PT_LAUNCH(LAUNCH8(n, vec), residual_forward_kernel)((bf16 *)out, (const bf16 *)inp1,
        (const bf16 *)inp2, n, vec);
    PT_LAUNCHED(kn, "residual_forward");
}

void pt_kcuda_residual_backward(pt_kernels *kn, float *dinp1, float *dinp2, const float *dout,
                                int64_t n)
{
    if (n <= 0)
        return;
    PT_LAUNCH(LAUNCH(n), residual_backward_kernel)((bf16 *)dinp1, (bf16 *)dinp2, (const bf16 *)dout,
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
    PT_LAUNCH(LAUNCH(nblk), dropout_kernel<ACC>)(out, inp, n, p, keep_scale, seed, tensor_id,
        offset, blk0, nblk);
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

__global__ void add_f32_kernel(float *dst, const float *src, int64_t n)
{
    GRID_STRIDE(e, n) dst[e] += src[e];
}

__global__ void bf16_to_f32_kernel(float *dst, const uint16_t *src, int64_t n)
{
    GRID_STRIDE(e, n) dst[e] = __uint_as_float((uint32_t)src[e] << 16);
}

void pt_kcuda_f32_to_bf16(pt_kernels *kn, uint16_t *dst, const float *src, int64_t n)
{
    if (n <= 0)
        return;
    PT_LAUNCH(LAUNCH(n), f32_to_bf16_kernel)(dst, src, n);
    PT_LAUNCHED(kn, "f32_to_bf16");
}

void pt_kcuda_bf16_to_f32(pt_kernels *kn, float *dst, const uint16_t *src, int64_t n)
{
    if (n <= 0)
        return;
    PT_LAUNCH(LAUNCH(n), bf16_to_f32_kernel)(dst, src, n);
    PT_LAUNCHED(kn, "bf16_to_f32");
}

void pt_kcuda_add_f32(pt_kernels *kn, float *dst, const float *src, int64_t n)
{
    if (n <= 0)
        return;
    PT_LAUNCH(LAUNCH(n), add_f32_kernel)(dst, src, n);
    PT_LAUNCHED(kn, "add_f32");
}
