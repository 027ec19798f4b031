/*
 * Gradient compression on CUDA: the orthonormalisation of PowerSGD's P matrices
 * (Vogels et al. 2019, Algorithm 1) as kernels/cpu/compress.c computes it — modified
 * Gram–Schmidt over the columns of a row-major fp32 matrix, dot products and norms
 * summed in double — in one block: the columns depend on each other in order, and a
 * P matrix has rank (a few, at most PT_POWERSGD_MAX_RANK) columns, so one block's
 * passes over its rows are the whole work. The products around it are gemm_f32
 * (matmul.cu).
 */
#include <math.h>

#include "cuda.cuh"

enum { ORTHO_THREADS = 256 };

__global__ void orthonormalize_kernel(float *p, int64_t rows, int cols, float eps)
{
    __shared__ double shared[32];
    for (int i = 0; i < cols; i++) {
        for (int j = 0; j < i; j++) {
            double dot = 0.0;
            for (int64_t r = threadIdx.x; r < rows; r += ORTHO_THREADS)
                dot += (double)p[r * cols + j] * p[r * cols + i];
            dot = pt_block_sum(dot, shared);
            for (int64_t r = threadIdx.x; r < rows; r += ORTHO_THREADS)
                p[r * cols + i] -= (float)dot * p[r * cols + j];
            __syncthreads();
        }
        double sq = 0.0;
        for (int64_t r = threadIdx.x; r < rows; r += ORTHO_THREADS)
            sq += (double)p[r * cols + i] * p[r * cols + i];
        sq = pt_block_sum(sq, shared);
        float scale = (float)(1.0 / (sqrt(sq) + (double)eps));
        for (int64_t r = threadIdx.x; r < rows; r += ORTHO_THREADS)
            p[r * cols + i] *= scale;
        __syncthreads();
    }
}

void pt_kcuda_orthonormalize(pt_kernels *kn, float *p, int64_t rows, int cols, float eps)
{
    if (rows <= 0 || cols <= 0)
        return;
    PT_LAUNCH(1, ORTHO_THREADS, 0, pt_kcuda_ctx(kn)->stream, orthonormalize_kernel)(p, rows, cols,
                                                                                   eps);
    PT_LAUNCHED(kn, "orthonormalize");
}
