/*
 * Gradient compression on CUDA: the orthonormalisation of PowerSGD's P matrices
 * (Vogels et al. 2019, Algorithm 1) as kernels.h states it and kernels/cpu/compress.c
 * computes it — Gram–Schmidt twice, column by column, dot products and norms summed in
 * double — spread over the device's blocks. Per column i, twice: ortho_dots writes each
 * block's partial dot products of column i with the columns before it (a warp per
 * earlier column, a lane per row), and ortho_project sums them over the blocks in
 * order and subtracts the projections row by row, the second time also writing each
 * block's partial norm; ortho_scale sums those and divides. Five launches a column,
 * each a pass over at most the first i + 1 floats of every row, where the one-block
 * modified Gram–Schmidt this replaces made i + 1 dependent passes on one SM. The
 * partials live in the backend's own buffer (ctx->ortho_part), not scratch: PowerSGD
 * runs this on the side stream while the backward uses scratch on the main one. Every
 * sum has a fixed order that depends on rows only: the same bits run to run. The
 * products around it are gemm_f32 (matmul.cu). planner/ops_step.c (psgd_sync) prices these
 * passes and launches: change both together.
 */
#include <math.h>

#include "cuda.cuh"

enum {
    ORTHO_THREADS = 256,
    ORTHO_DOT_ROWS = 32 /* rows a block of ortho_dots takes per turn: one per lane */
};

/* blocks for a pass over `rows` rows, `per` rows a block per turn */
static int ortho_grid(int64_t rows, int per)
{
    int64_t b = (rows + per - 1) / per;
    return (int)(b < 1 ? 1 : b > PT_KCUDA_ORTHO_BLOCKS ? PT_KCUDA_ORTHO_BLOCKS : b);
}

/* part[block][j] = this block's share of sum_r p[r][j] · p[r][i], for j < i: warp w
 * takes j = w, w + warps, ...; lane l rows block·32 + l, then a grid's rows further */
__global__ void ortho_dots_kernel(const float *p, int64_t rows, int cols, int i, double *part)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int j = warp; j < i; j += warps) {
        double dot = 0.0;
        for (int64_t r = (int64_t)blockIdx.x * ORTHO_DOT_ROWS + lane; r < rows;
             r += (int64_t)gridDim.x * ORTHO_DOT_ROWS)
            dot += (double)p[r * cols + j] * p[r * cols + i];
        dot = pt_warp_sum(dot);
        if (lane == 0)
            part[(int64_t)blockIdx.x * cols + j] = dot;
    }
}

/* d_j = the dots' partials summed over the `parts` blocks in order, as float; then
 * p[r][i] -= d_j · p[r][j] for j < i in order, a thread per row; with npart, this
 * block's share of column i's sum of squares into npart[block] */
__global__ void ortho_project_kernel(float *p, int64_t rows, int cols, int i,
                                     const double *part, int parts, double *npart)
{
    __shared__ float d[PT_K_ORTHO_MAX_COLS];
    __shared__ double shared[32];
    for (int j = threadIdx.x; j < i; j += blockDim.x) {
        double s = 0.0;
        for (int b = 0; b < parts; b++)
            s += part[(int64_t)b * cols + j];
        d[j] = (float)s;
    }
    __syncthreads();
    double sq = 0.0;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        float *row = p + r * cols, x = row[i];
        for (int j = 0; j < i; j++)
            x -= d[j] * row[j];
        row[i] = x;
        sq += (double)x * x;
    }
    if (npart) {
        sq = pt_block_sum(sq, shared);
        if (threadIdx.x == 0)
            npart[blockIdx.x] = sq;
    }
}

/* column i divided by its norm (the partials summed in order) + eps */
__global__ void ortho_scale_kernel(float *p, int64_t rows, int cols, int i, const double *npart,
                                   int parts, float eps)
{
    double sq = 0.0;
    for (int b = 0; b < parts; b++)
        sq += npart[b];
    float scale = (float)(1.0 / (sqrt(sq) + (double)eps));
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x)
        p[r * cols + i] *= scale;
}

void pt_kcuda_orthonormalize(pt_kernels *kn, float *p, int64_t rows, int cols, float eps)
{
    if (rows <= 0 || cols <= 0)
        return;
    if (cols > PT_K_ORTHO_MAX_COLS) {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "orthonormalize: %d columns, at most %d", cols,
                      PT_K_ORTHO_MAX_COLS);
        return;
    }
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    cudaStream_t s = ctx->stream;
    double *part = ctx->ortho_part, *npart = part + (size_t)PT_KCUDA_ORTHO_BLOCKS * cols;
    int gd = ortho_grid(rows, ORTHO_DOT_ROWS), gp = ortho_grid(rows, ORTHO_THREADS);
    for (int i = 0; i < cols; i++) {
        for (int pass = 0; pass < 2; pass++) {
            bool last = pass == 1 || i == 0; /* column 0 has nothing to project out */
            if (i > 0)
                PT_LAUNCH(gd, ORTHO_THREADS, 0, s, ortho_dots_kernel)(p, rows, cols, i, part);
            PT_LAUNCH(gp, ORTHO_THREADS, 0, s, ortho_project_kernel)(p, rows, cols, i, part,
                                                                    gd, last ? npart : NULL);
            if (last)
                break;
        }
        PT_LAUNCH(gp, ORTHO_THREADS, 0, s, ortho_scale_kernel)(p, rows, cols, i, npart, gp, eps);
    }
    PT_LAUNCHED(kn, "orthonormalize");
}
