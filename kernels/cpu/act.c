/*
 * Pointwise ops on the CPU: GELU (GPT-2's MLP), SwiGLU (LLaMA's MLP) and the
 * residual add, forward and backward. Every backward accumulates into its gradients.
 */
#include <math.h>

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

void pt_kcpu_gelu_backward(pt_kernels *kn,
                           float *dinp,             /* (n) */
                           const float *dout,       /* (n) */
                           const float *inp,        /* (n) */
                           int64_t n)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n)
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float th = tanh_fast(u);
        float sech2 = 1.0f - th * th;
        float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        dinp[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * sech2 * du);
    }
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
