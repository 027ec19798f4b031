/*
 * Gradient compression on the CPU: the orthonormalisation of PowerSGD's P matrices
 * (Vogels et al. 2019, Algorithm 1), modified Gram–Schmidt over the columns of a
 * row-major fp32 matrix with double sums. Its products are cblas_sgemm (gemm_f32 is the
 * backend's fp32 gemm, matmul.c).
 */
#include <math.h>

#include "cpu.h"

void pt_kcpu_orthonormalize(pt_kernels *kn, float *p, int64_t rows, int cols, float eps)
{
    (void)kn;
    for (int i = 0; i < cols; i++) {
        for (int j = 0; j < i; j++) {
            double dot = 0.0;
            for (int64_t r = 0; r < rows; r++)
                dot += (double)p[r * cols + j] * p[r * cols + i];
            for (int64_t r = 0; r < rows; r++)
                p[r * cols + i] -= (float)dot * p[r * cols + j];
        }
        double sq = 0.0;
        for (int64_t r = 0; r < rows; r++)
            sq += (double)p[r * cols + i] * p[r * cols + i];
        float scale = (float)(1.0 / (sqrt(sq) + (double)eps));
        for (int64_t r = 0; r < rows; r++)
            p[r * cols + i] *= scale;
    }
}
