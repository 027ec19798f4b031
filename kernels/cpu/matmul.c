/*
 * Linear layers on the CPU: out = inp · w^T + bias with w stored (oc, ic), as
 * PyTorch's Linear and llm.c, and its backward, all through OpenBLAS's sgemm so that
 * the layers run at the library's own rate. Row-major throughout.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

void pt_kcpu_matmul_forward(pt_kernels *kn,
                            float *out,             /* (n, oc) */
                            const float *inp,       /* (n, ic) */
                            const float *w,         /* (oc, ic) */
                            const float *bias,      /* (oc) or NULL */
                            int64_t n, int ic, int oc)
{
    (void)kn;
    /* start from the bias in every row, then let sgemm add inp · w^T onto it */
    if (bias)
        for (int64_t i = 0; i < n; i++)
            memcpy(out + i * oc, bias, (size_t)oc * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, oc, ic, 1.0f, inp, ic, w,
                ic, bias ? 1.0f : 0.0f, out, oc);
}

void pt_kcpu_matmul_backward(pt_kernels *kn,
                             float *dinp,           /* (n, ic) or NULL */
                             float *dw,             /* (oc, ic) or NULL */
                             float *dbias,          /* (oc) or NULL */
                             const float *dout,     /* (n, oc) */
                             const float *inp,      /* (n, ic) */
                             const float *w,        /* (oc, ic) */
                             int64_t n, int ic, int oc)
{
    (void)kn;
    /* dinp (n, ic) += dout (n, oc) · w (oc, ic) */
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, ic, oc, 1.0f, dout,
                    oc, w, ic, 1.0f, dinp, ic);
    /* dw (oc, ic) += dout^T (oc, n) · inp (n, ic) */
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, ic, (int)n, 1.0f, dout, oc,
                    inp, ic, 1.0f, dw, ic);
    /* dbias (oc) += column sums of dout, rows in order, in fp32 like the GEMMs */
    if (dbias)
        for (int64_t i = 0; i < n; i++) {
            const float *row = dout + i * oc;
            for (int o = 0; o < oc; o++)
                dbias[o] += row[o];
        }
}

void pt_kcpu_gemm(pt_kernels *kn, int trans_a, int trans_b, int m, int n, int kk,
                  float alpha, const float *a, int lda, const float *b, int ldb,
                  float beta, float *c, int ldc)
{
    (void)kn;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, kk, alpha, a, lda, b, ldb, beta, c,
                ldc);
}
