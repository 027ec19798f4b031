/*
 * CPU measurements for ptprofile: GEMMs through OpenBLAS's cblas_sgemm in the layout
 * the runtime uses (activations row-major (m, k), weights (n, k), out = a·bᵀ), the
 * peak sgemm rate of one core, and streaming memory bandwidth. Each time is the
 * median of repeats after a warm-up run, measured with the monotonic clock.
 */
#include "ptprofile.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double pt_prof_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *pt_prof_cpu_init(int threads)
{
    if (threads > 0)
        openblas_set_num_threads(threads);
    return openblas_get_config();
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Deterministic values in [-1, 1): the inputs do not change the time of a GEMM,
 * but denormals or NaNs would, so keep them ordinary. */
static void fill(float *x, int64_t n)
{
    uint32_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
    }
}

double pt_prof_gemm(int64_t m, int64_t n, int64_t k, int repeats, double budget_s,
                    double *best_s)
{
    float *a = malloc((size_t)(m * k) * sizeof *a);
    float *b = malloc((size_t)(n * k) * sizeof *b);
    float *c = malloc((size_t)(m * n) * sizeof *c);
    double times[64];
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return -1;
    }
    fill(a, m * k);
    fill(b, n * k);
    if (repeats > 64)
        repeats = 64;
    int done = 0;
    double spent = 0;
    for (int r = -1; r < repeats; r++) {
        double t0 = pt_prof_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a,
                    (int)k, b, (int)k, 0.0f, c, (int)n);
        double dt = pt_prof_now_s() - t0;
        if (r < 0)
            continue; /* warm-up: caches, page faults, thread start */
        times[done++] = dt;
        spent += dt;
        if (spent > budget_s && done >= 1)
            break;
    }
    free(a);
    free(b);
    free(c);
    if (best_s) {
        *best_s = times[0];
        for (int i = 1; i < done; i++)
            if (times[i] < *best_s)
                *best_s = times[i];
    }
    return median(times, done);
}

double pt_prof_cpu_peak_flops(int repeats)
{
    /* A square problem large enough to run at the core's steady rate; the best
     * run, since a peak is what the core can do when nothing disturbs it. */
    const int64_t s = 1024;
    double best;
    double t = pt_prof_gemm(s, s, s, repeats, 5.0, &best);
    return t > 0 ? 2.0 * (double)(s * s * s) / best : 0;
}

double pt_prof_cpu_mem_bw(int64_t bytes, int repeats)
{
    size_t n = (size_t)bytes / 2;
    char *src = malloc(n), *dst = malloc(n);
    double times[16];
    if (!src || !dst) {
        free(src);
        free(dst);
        return 0;
    }
    memset(src, 1, n);
    memset(dst, 0, n);
    if (repeats > 16)
        repeats = 16;
    for (int r = -1; r < repeats; r++) {
        double t0 = pt_prof_now_s();
        memcpy(dst, src, n);
        double dt = pt_prof_now_s() - t0;
        if (r >= 0)
            times[r] = dt;
    }
    /* A copy reads n bytes and writes n bytes. */
    volatile char sink = dst[n / 2];
    (void)sink;
    free(src);
    free(dst);
    return 2.0 * (double)n / median(times, repeats);
}

int pt_prof_gemm_shape(const char *key, int64_t *m, int64_t *n, int64_t *k,
                       pt_gemm_role *role, int *batch)
{
    long long mm, nn, kk;
    int r = pt_gemm_role_of(key), b = 1, used = 0;
    const char *shape = strchr(key, ':');
    shape = shape ? strchr(shape + 1, ':') : NULL;
    if (r < 0 || !shape)
        return -1;
    shape++;
    /* a batch (planner/ops.c's qkv and qkv_wgrad): forwards and weight gradients only,
     * the roles of kernels.h's matmul_forward_shared and matmul_wgrad_shared */
    if (strncmp(shape, "b=", 2) == 0) {
        if (sscanf(shape, "b=%d,%n", &b, &used) != 1 || used == 0 || b < 2 ||
            b > PT_K_SHARED_MAX ||
            (r != PT_GEMM_FWD && r != PT_GEMM_FWD_BIAS && r != PT_GEMM_WGRAD &&
             r != PT_GEMM_WGRAD_BIAS))
            return -1;
        shape += used;
    }
    if (sscanf(shape, "m=%lld,n=%lld,k=%lld", &mm, &nn, &kk) != 3 || mm < 1 || nn < 1 ||
        kk < 1)
        return -1;
    *m = mm;
    *n = nn;
    *k = kk;
    if (role)
        *role = (pt_gemm_role)r;
    if (batch)
        *batch = b;
    return 0;
}
