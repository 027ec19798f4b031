/*
 * Gradient compression on the CPU: the orthonormalisation of PowerSGD's P matrices
 * (Vogels et al. 2019, Algorithm 1) by Gram–Schmidt twice over the columns of a
 * row-major fp32 matrix, dot products and norms summed in double, as kernels.h states
 * it; kernels/cuda/compress.cu runs the same operations spread over a device's blocks.
 * Its products are cblas_sgemm (gemm_f32 is the backend's fp32 gemm, matmul.c).
 */
#include <math.h>
#include <stdio.h>

#include "cpu.h"

void pt_kcpu_orthonormalize(pt_kernels *kn, float *p, int64_t rows, int cols, float eps)
{
    float d[PT_K_ORTHO_MAX_COLS];
    if (cols > PT_K_ORTHO_MAX_COLS) {
        if (!kn->err[0])
            snprintf(kn->err, sizeof kn->err, "orthonormalize: %d columns, at most %d", cols,
                     PT_K_ORTHO_MAX_COLS);
        return;
    }
    for (int i = 0; i < cols; i++) {
        for (int pass = 0; pass < 2 && i > 0; pass++) {
            for (int j = 0; j < i; j++) {
                double dot = 0.0;
                for (int64_t r = 0; r < rows; r++)
                    dot += (double)p[r * cols + j] * p[r * cols + i];
                d[j] = (float)dot;
            }
            for (int64_t r = 0; r < rows; r++) {
                float *row = p + r * cols, x = row[i];
                for (int j = 0; j < i; j++)
                    x -= d[j] * row[j];
                row[i] = x;
            }
        }
        double sq = 0.0;
        for (int64_t r = 0; r < rows; r++)
            sq += (double)p[r * cols + i] * p[r * cols + i];
        float scale = (float)(1.0 / (sqrt(sq) + (double)eps));
        for (int64_t r = 0; r < rows; r++)
            p[r * cols + i] *= scale;
    }
}
