/*
 * Pointwise ops on the CPU: GELU (GPT-2's MLP), SwiGLU (LLaMA's MLP) and the
 * residual add, forward and backward. Every backward accumulates into its gradients.
 */
#include <math.h>
#include <string.h>

#include "cpu.h"

/* sqrt(2/pi) and 0.044715: the tanh approximation of Hendrycks & Gimpel 2016, eq. in §2 */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBE 0.044715f

/* tanh through one expf (glibc's tanhf is several times slower); exact at both tails,
 * absolute error ~1e-7 near 0, where GELU multiplies it by x/2 */
static inline float tanh_fast(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }

void pt_kcpu_gelu_forward(pt_kernels *kn,
                          float *out,               /* (n) */
                          const float *inp,         /* (n) */
                          int64_t n)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_fast(GELU_SCALE * (x + GELU_CUBE * x * x * x)));
    }
}

/* d gelu(x) / dx of the tanh approximation */
static inline float gelu_grad(float x)
{
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    float th = tanh_fast(u);
    float sech2 = 1.0f - th * th;
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
}

void pt_kcpu_gelu_backward(pt_kernels *kn,
                           float *dinp,             /* (n) */
                           const float *dout,       /* (n) */
                           const float *inp,        /* (n) */
                           int64_t n)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++)
        dinp[i] += dout[i] * gelu_grad(inp[i]);
}

/* The GELU before an FP8 cast: the forward, or the backward written (0 + the product:
 * what gelu_backward adds into a zeroed buffer), then the output's amax in place of
 * meta[AMAX], as zero and fp8_amax would leave it. */
void pt_kcpu_gelu_forward_amax(pt_kernels *kn, float *out, const float *inp, int64_t n,
                               float *meta)
{
    pt_kcpu_gelu_forward(kn, out, inp, n);
    meta[PT_KFP8_AMAX] = 0.0f;
    pt_kcpu_fp8_amax(kn, meta, out, n);
}

void pt_kcpu_gelu_backward_amax(pt_kernels *kn, float *dinp, const float *dout,
                                const float *inp, int64_t n, float *meta)
{
    PT_KCPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++)
        dinp[i] = 0.0f + dout[i] * gelu_grad(inp[i]);
    meta[PT_KFP8_AMAX] = 0.0f;
    pt_kcpu_fp8_amax(kn, meta, dinp, n);
}

/* The fused linear + GELU (and + residual, and the shared-input) ops of the table, as
 * the compositions they stand for (the CPU has no epilogue to fuse into; the results
 * are those of the separate ops). */
void pt_kcpu_matmul_forward_gelu(pt_kernels *kn,
                                 float *out,        /* (n, oc) */
                                 float *pre,        /* (n, oc) */
                                 const float *inp,  /* (n, ic) */
                                 const float *w,    /* (oc, ic) */
                                 const float *bias, /* (oc) or NULL */
                                 int64_t n, int ic, int oc)
{
    pt_kcpu_matmul_forward(kn, pre, inp, w, bias, n, ic, oc);
    pt_kcpu_gelu_forward(kn, out, pre, n * oc);
}

void pt_kcpu_matmul_forward_res(pt_kernels *kn,
                                float *out,        /* (n, oc) */
                                const float *inp,  /* (n, ic) */
                                const float *w,    /* (oc, ic) */
                                const float *bias, /* (oc) or NULL */
                                const float *res,  /* (n, oc) */
                                int64_t n, int ic, int oc)
{
    pt_kcpu_matmul_forward(kn, out, inp, w, bias, n, ic, oc);
    pt_kcpu_residual_forward(kn, out, out, res, n * oc);
}

void pt_kcpu_matmul_dgrad(pt_kernels *kn,
                          float *dinp,       /* (n, ic), written */
                          const float *dout, /* (n, oc) */
                          const float *w,    /* (oc, ic) */
                          int64_t n, int ic, int oc)
{
    memset(dinp, 0, (size_t)(n * ic) * sizeof(float));
    pt_kcpu_matmul_backward(kn, dinp, NULL, NULL, dout, NULL, w, n, ic, oc);
}

void pt_kcpu_matmul_forward_shared(pt_kernels *kn, int count,
                                   float *const out[],        /* (n, oc) each */
                                   const float *inp,          /* (n, ic) */
                                   const float *const w[],    /* (oc, ic) each */
                                   const float *const bias[], /* (oc) each, or NULL */
                                   int64_t n, int ic, int oc)
{
    for (int i = 0; i < count; i++)
        pt_kcpu_matmul_forward(kn, out[i], inp, w[i], bias ? bias[i] : NULL, n, ic, oc);
}

void pt_kcpu_matmul_wgrad_shared(pt_kernels *kn, int count,
                                 float *const dw[],         /* (oc, ic) each */
                                 float *const dbias[],      /* (oc) each, or NULL */
                                 const float *const dout[], /* (n, oc) each */
                                 const float *inp,          /* (n, ic) */
                                 int64_t n, int ic, int oc)
{
    for (int i = 0; i < count; i++)
        pt_kcpu_matmul_backward(kn, NULL, dw[i], dbias ? dbias[i] : NULL, dout[i], inp, NULL,
                                n, ic, oc);
}

void pt_kcpu_matmul_backward_dgelu(pt_kernels *kn,
                                   float *dpre,       /* (n, ic), written */
                                   const float *dout, /* (n, oc) */
                                   const float *w,    /* (oc, ic) */
                                   const float *pre,  /* (n, ic) */
                                   int64_t n, int ic, int oc)
{
    int64_t count = n * ic;
    memset(dpre, 0, (size_t)count * sizeof(float));
    pt_kcpu_matmul_backward(kn, dpre, NULL, NULL, dout, NULL, w, n, ic, oc);
    /* 0 + product · gelu'(pre): what gelu_backward adds into a zeroed buffer */
    PT_KCPU_PARALLEL_FOR(count)
    for (int64_t i = 0; i < count; i++)
        dpre[i] = 0.0f + dpre[i] * gelu_grad(pre[i]);
}

void pt_kcpu_swiglu_forward(pt_kernels *kn,
                            float *out,             /* (n, f) */
                            const float *gate,      /* (n, f) */
                            const float *up,        /* (n, f) */
                            int64_t n, int f)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * f)
    for (int64_t i = 0; i < n * f; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void pt_kcpu_swiglu_backward(pt_kernels *kn,
                             float *dgate,          /* (n, f) */
                             float *dup,            /* (n, f) */
                             const float *dout,     /* (n, f) */
                             const float *gate,     /* (n, f) */
                             const float *up,       /* (n, f) */
                             int64_t n, int f)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * f)
    for (int64_t i = 0; i < n * f; i++) {
        float g = gate[i];
        float sig = 1.0f / (1.0f + expf(-g));
        float silu = g * sig;
        /* d silu / dg = sig · (1 + g · (1 - sig)) */
        dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
        dup[i] += dout[i] * silu;
    }
}

void pt_kcpu_residual_forward(pt_kernels *kn,
                              float *out,           /* (n) */
                              const float *inp1,    /* (n) */
                              const float *inp2,    /* (n) */
                              int64_t n)
{
    (void)kn;
    for (int64_t i = 0; i < n; i++)
        out[i] = inp1[i] + inp2[i];
}

void pt_kcpu_residual_backward(pt_kernels *kn,
                               float *dinp1,        /* (n) */
                               float *dinp2,        /* (n) */
                               const float *dout,   /* (n) */
                               int64_t n)
{
    (void)kn;
    for (int64_t i = 0; i < n; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
}
