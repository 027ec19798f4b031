/*
 * Normalisations on the CPU: LayerNorm (GPT-2) and RMSNorm (LLaMA), forward and
 * backward, one row at a time. Row statistics are computed in double and saved as
 * fp32 (mean, rstd) for the backward, as llm.c does.
 */
#include <math.h>

#include "cpu.h"

void pt_kcpu_layernorm_forward(pt_kernels *kn,
                               float *out,          /* (n, h) */
                               float *mean,         /* (n) */
                               float *rstd,         /* (n) */
                               const float *inp,    /* (n, h) */
                               const float *w,      /* (h) */
                               const float *bias,   /* (h) */
                               int64_t n, int h, float eps)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * (int64_t)h)
    for (int64_t r = 0; r < n; r++) {
        const float *x = inp + r * h;
        float *o = out + r * h;
        double sum = 0.0;
        for (int i = 0; i < h; i++)
            sum += x[i];
        double mu = sum / h;
        double var = 0.0;
        for (int i = 0; i < h; i++)
            var += (x[i] - mu) * (x[i] - mu);
        float m = (float)mu;
        float rs = (float)(1.0 / sqrt(var / h + eps));
        for (int i = 0; i < h; i++)
            o[i] = (x[i] - m) * rs * w[i] + bias[i];
        mean[r] = m;
        rstd[r] = rs;
    }
}

void pt_kcpu_layernorm_backward(pt_kernels *kn,
                                float *dinp,        /* (n, h) */
                                float *dw,          /* (h) */
                                float *dbias,       /* (h) */
                                const float *dout,  /* (n, h) */
                                const float *inp,   /* (n, h) */
                                const float *w,     /* (h) */
                                const float *mean,  /* (n) */
                                const float *rstd,  /* (n) */
                                int64_t n, int h)
{
    (void)kn;
    for (int64_t r = 0; r < n; r++) {
        const float *x = inp + r * h, *g = dout + r * h;
        float *dx = dinp + r * h;
        float m = mean[r], rs = rstd[r];
        /* dx = rstd · (dnorm - mean(dnorm) - xhat · mean(dnorm · xhat)), dnorm = g · w */
        double dnorm_mean = 0.0, dnorm_xhat_mean = 0.0;
        for (int i = 0; i < h; i++) {
            float xhat = (x[i] - m) * rs;
            float dnorm = w[i] * g[i];
            dnorm_mean += dnorm;
            dnorm_xhat_mean += dnorm * xhat;
        }
        float dm = (float)(dnorm_mean / h), dxm = (float)(dnorm_xhat_mean / h);
        for (int i = 0; i < h; i++) {
            float xhat = (x[i] - m) * rs;
            float dnorm = w[i] * g[i];
            dbias[i] += g[i];
            dw[i] += xhat * g[i];
            dx[i] += rs * (dnorm - dm - xhat * dxm);
        }
    }
}

void pt_kcpu_rmsnorm_forward(pt_kernels *kn,
                             float *out,            /* (n, h) */
                             float *rstd,           /* (n) */
                             const float *inp,      /* (n, h) */
                             const float *w,        /* (h) */
                             int64_t n, int h, float eps)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * (int64_t)h)
    for (int64_t r = 0; r < n; r++) {
        const float *x = inp + r * h;
        float *o = out + r * h;
        double ss = 0.0;
        for (int i = 0; i < h; i++)
            ss += (double)x[i] * x[i];
        float rs = (float)(1.0 / sqrt(ss / h + eps));
        for (int i = 0; i < h; i++)
            o[i] = x[i] * rs * w[i];
        rstd[r] = rs;
    }
}

void pt_kcpu_rmsnorm_backward(pt_kernels *kn,
                              float *dinp,          /* (n, h) */
                              float *dw,            /* (h) */
                              const float *dout,    /* (n, h) */
                              const float *inp,     /* (n, h) */
                              const float *w,       /* (h) */
                              const float *rstd,    /* (n) */
                              int64_t n, int h)
{
    (void)kn;
    for (int64_t r = 0; r < n; r++) {
        const float *x = inp + r * h, *g = dout + r * h;
        float *dx = dinp + r * h;
        float rs = rstd[r];
        /* dx = rstd · (dnorm - xhat · mean(dnorm · xhat)), xhat = x · rstd, dnorm = g · w */
        double dot = 0.0;
        for (int i = 0; i < h; i++)
            dot += (double)(w[i] * g[i]) * (x[i] * rs);
        float dxm = (float)(dot / h);
        for (int i = 0; i < h; i++) {
            float xhat = x[i] * rs;
            dw[i] += xhat * g[i];
            dx[i] += rs * (w[i] * g[i] - xhat * dxm);
        }
    }
}

/* The residual add fused with the norm after it, as the two ops it stands for (in one
 * call; the values are those of residual_forward then the norm on the sum). */
void pt_kcpu_residual_layernorm_forward(pt_kernels *kn,
                                        float *res,         /* (n, h) */
                                        float *out,         /* (n, h) */
                                        float *mean,        /* (n) */
                                        float *rstd,        /* (n) */
                                        const float *inp1,  /* (n, h) */
                                        const float *inp2,  /* (n, h) */
                                        const float *w,     /* (h) */
                                        const float *bias,  /* (h) */
                                        int64_t n, int h, float eps)
{
    pt_kcpu_residual_forward(kn, res, inp1, inp2, n * h);
    pt_kcpu_layernorm_forward(kn, out, mean, rstd, res, w, bias, n, h, eps);
}

void pt_kcpu_residual_rmsnorm_forward(pt_kernels *kn,
                                      float *res,           /* (n, h) */
                                      float *out,           /* (n, h) */
                                      float *rstd,          /* (n) */
                                      const float *inp1,    /* (n, h) */
                                      const float *inp2,    /* (n, h) */
                                      const float *w,       /* (h) */
                                      int64_t n, int h, float eps)
{
    pt_kcpu_residual_forward(kn, res, inp1, inp2, n * h);
    pt_kcpu_rmsnorm_forward(kn, out, rstd, res, w, n, h, eps);
}
