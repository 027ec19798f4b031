/*
 * Benchmarks of ptkernels' CPU backend (figures, not tests):
 *   1. matmul_forward and matmul_backward against OpenBLAS's own cblas_sgemm on the
 *      same shapes (the target is >= 90% of sgemm's rate);
 *   2. a full forward + backward of one transformer layer of `tiny` (h64 a4 f256 s64,
 *      4 layers) and of `gpt2-124m` (h768 a12 f3072 s1024), as FLOP/s and as a
 *      fraction of the sgemm rate measured on that model's MLP shape.
 * FLOP counts: a GEMM is 2·m·n·k forward and twice that backward; causal attention is
 * 2·b·s²·h forward (QK^T and PV, half the square) and twice that backward; norms and
 * pointwise ops count 0 (their time counts). Each figure is the best of --reps runs.
 *   usage: bench_kernels [--threads N] [--reps N] [--tiny-b B] [--gpt2-b B]
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *buf(int64_t n)
{
    float *x = malloc((size_t)n * sizeof(float));
    if (!x) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return x;
}

/* ---- 1. matmul against sgemm ------------------------------------------------------------ */

typedef struct {
    const char *name;
    int64_t n;
    int ic, oc;
} mm_shape;

/* best-of-reps seconds of: 0 sgemm forward, 1 matmul_forward, 2 sgemm backward pair,
 * 3 matmul_backward (dinp and dw, no bias) */
static void bench_matmul(pt_kernels *K, const mm_shape *sh, int reps, double t[4])
{
    float *x = buf(sh->n * sh->ic), *w = buf((int64_t)sh->oc * sh->ic);
    float *y = buf(sh->n * sh->oc), *dx = buf(sh->n * sh->ic), *dw = buf((int64_t)sh->oc * sh->ic);
    int n = (int)sh->n, ic = sh->ic, oc = sh->oc;
    for (int i = 0; i < 4; i++)
        t[i] = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, oc, ic, 1.0f, x, ic, w, ic,
                    0.0f, y, oc);
        double t1 = now_s();
        K->matmul_forward(K, y, x, w, NULL, sh->n, ic, oc);
        double t2 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, ic, oc, 1.0f, y, oc, w, ic,
                    1.0f, dx, ic);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, oc, ic, n, 1.0f, y, oc, x, ic,
                    1.0f, dw, ic);
        double t3 = now_s();
        K->matmul_backward(K, dx, dw, NULL, y, x, w, sh->n, ic, oc);
        double t4 = now_s();
        double d[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
        for (int i = 0; i < 4; i++)
            t[i] = d[i] < t[i] ? d[i] : t[i];
    }
    free(x);
    free(w);
    free(y);
    free(dx);
    free(dw);
}

/* ---- 2. one GPT-2 layer, forward and backward ---------------------------------------------- */

typedef struct {
    const char *name;
    int b, s, h, a, f, layers;
} model;

typedef struct {
    /* weights (fp32) */
    float *ln1w, *ln1b, *wq, *wk, *wv, *bq, *bk, *bv, *wo, *bo, *ln2w, *ln2b, *wfc, *bfc,
        *wpr, *bpr;
    /* activations */
    float *x, *ln1, *m1, *r1, *q, *k, *v, *att, *lse, *ao, *x2, *ln2, *m2, *r2, *fc, *ge,
        *pr, *y;
    /* gradients: one weight-gradient buffer reused for every weight, activation grads */
    float *dwbig, *dbbig, *dy, *dx, *dln1, *dq, *dk, *dv, *datt, *dx2, *dln2, *dfc, *dge;
} layer;

static void layer_alloc(layer *L, const model *m)
{
    int64_t n = (int64_t)m->b * m->s, h = m->h, f = m->f;
    L->ln1w = buf(h), L->ln1b = buf(h), L->ln2w = buf(h), L->ln2b = buf(h);
    L->wq = buf(h * h), L->wk = buf(h * h), L->wv = buf(h * h), L->wo = buf(h * h);
    L->bq = buf(h), L->bk = buf(h), L->bv = buf(h), L->bo = buf(h);
    L->wfc = buf(f * h), L->bfc = buf(f), L->wpr = buf(h * f), L->bpr = buf(h);
    L->x = buf(n * h), L->ln1 = buf(n * h), L->m1 = buf(n), L->r1 = buf(n);
    L->q = buf(n * h), L->k = buf(n * h), L->v = buf(n * h), L->att = buf(n * h);
    L->lse = buf(n * m->a), L->ao = buf(n * h), L->x2 = buf(n * h), L->ln2 = buf(n * h);
    L->m2 = buf(n), L->r2 = buf(n), L->fc = buf(n * f), L->ge = buf(n * f), L->pr = buf(n * h);
    L->y = buf(n * h);
    L->dwbig = buf(f * h), L->dbbig = buf(f), L->dy = buf(n * h), L->dx = buf(n * h);
    L->dln1 = buf(n * h), L->dq = buf(n * h), L->dk = buf(n * h), L->dv = buf(n * h);
    L->datt = buf(n * h), L->dx2 = buf(n * h), L->dln2 = buf(n * h), L->dfc = buf(n * f);
    L->dge = buf(n * f);
}

static void layer_free(layer *L)
{
    float **p = (float **)L;
    for (size_t i = 0; i < sizeof *L / sizeof(float *); i++)
        free(p[i]);
}

static void layer_forward(pt_kernels *K, layer *L, const model *m)
{
    int64_t n = (int64_t)m->b * m->s;
    int h = m->h, f = m->f, d = m->h / m->a;
    K->layernorm_forward(K, L->ln1, L->m1, L->r1, L->x, L->ln1w, L->ln1b, n, h, 1e-5f);
    K->matmul_forward(K, L->q, L->ln1, L->wq, L->bq, n, h, h);
    K->matmul_forward(K, L->k, L->ln1, L->wk, L->bk, n, h, h);
    K->matmul_forward(K, L->v, L->ln1, L->wv, L->bv, n, h, h);
    K->attention_forward(K, L->att, L->lse, L->q, L->k, L->v, m->b, m->s, m->s, m->a, m->a, d,
                         0, 0, 1);
    K->matmul_forward(K, L->ao, L->att, L->wo, L->bo, n, h, h);
    K->residual_forward(K, L->x2, L->x, L->ao, n * h);
    K->layernorm_forward(K, L->ln2, L->m2, L->r2, L->x2, L->ln2w, L->ln2b, n, h, 1e-5f);
    K->matmul_forward(K, L->fc, L->ln2, L->wfc, L->bfc, n, h, f);
    K->gelu_forward(K, L->ge, L->fc, n * f);
    K->matmul_forward(K, L->pr, L->ge, L->wpr, L->bpr, n, f, h);
    K->residual_forward(K, L->y, L->x2, L->pr, n * h);
}

static void layer_backward(pt_kernels *K, layer *L, const model *m)
{
    int64_t n = (int64_t)m->b * m->s;
    int h = m->h, f = m->f, d = m->h / m->a;
    size_t nh = (size_t)n * h * sizeof(float), nf = (size_t)n * f * sizeof(float);
    memset(L->dx2, 0, nh);
    memset(L->dge, 0, nf);
    memset(L->dfc, 0, nf);
    memset(L->dln2, 0, nh);
    memset(L->dx, 0, nh);
    memset(L->datt, 0, nh);
    memset(L->dq, 0, nh);
    memset(L->dk, 0, nh);
    memset(L->dv, 0, nh);
    memset(L->dln1, 0, nh);
    /* y = x2 + pr: dx2 += dy, dpr += dy (dx serves as dpr until the end) */
    K->residual_backward(K, L->dx2, L->dx, L->dy, n * h);
    K->matmul_backward(K, L->dge, L->dwbig, L->dbbig, L->dx, L->ge, L->wpr, n, f, h);
    K->gelu_backward(K, L->dfc, L->dge, L->fc, n * f);
    K->matmul_backward(K, L->dln2, L->dwbig, L->dbbig, L->dfc, L->ln2, L->wfc, n, h, f);
    K->layernorm_backward(K, L->dx2, L->dwbig, L->dbbig, L->dln2, L->x2, L->ln2w, L->m2, L->r2,
                          n, h);
    /* x2 = x + ao: dx += dx2, dao += dx2 (dln2 serves as dao) */
    memset(L->dx, 0, nh);
    memset(L->dln2, 0, nh);
    K->residual_backward(K, L->dx, L->dln2, L->dx2, n * h);
    K->matmul_backward(K, L->datt, L->dwbig, L->dbbig, L->dln2, L->att, L->wo, n, h, h);
    K->attention_backward(K, L->dq, L->dk, L->dv, L->datt, L->q, L->k, L->v, L->att, L->lse,
                          m->b, m->s, m->s, m->a, m->a, d, 0, 0, 1, 0);
    K->matmul_backward(K, L->dln1, L->dwbig, L->dbbig, L->dq, L->ln1, L->wq, n, h, h);
    K->matmul_backward(K, L->dln1, L->dwbig, L->dbbig, L->dk, L->ln1, L->wk, n, h, h);
    K->matmul_backward(K, L->dln1, L->dwbig, L->dbbig, L->dv, L->ln1, L->wv, n, h, h);
    K->layernorm_backward(K, L->dx, L->dwbig, L->dbbig, L->dln1, L->x, L->ln1w, L->m1, L->r1, n,
                          h);
}

static double layer_flops(const model *m)
{
    double n = (double)m->b * m->s, h = m->h, f = m->f;
    double gemm = 2 * n * (4 * h * h + 2 * h * f);
    double attn = 2.0 * m->b * (double)m->s * m->s * h;
    return 3 * (gemm + attn); /* forward + backward (2x forward) */
}

static void bench_model(pt_kernels *K, const model *m, int reps)
{
    /* the sgemm rate on this model's MLP shape (n, h) -> (n, f), forward */
    mm_shape fc = {"fc", (int64_t)m->b * m->s, m->h, m->f};
    double t[4];
    bench_matmul(K, &fc, reps, t);
    double sgemm_rate = 2.0 * fc.n * fc.ic * fc.oc / t[0];

    layer L;
    layer_alloc(&L, m);
    double best_f = 1e30, best_b = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        layer_forward(K, &L, m);
        double t1 = now_s();
        layer_backward(K, &L, m);
        double t2 = now_s();
        best_f = t1 - t0 < best_f ? t1 - t0 : best_f;
        best_b = t2 - t1 < best_b ? t2 - t1 : best_b;
    }
    double fl = layer_flops(m), tl = best_f + best_b;
    printf("%-10s b%d s%d h%d a%d f%d: layer fwd %.3f ms, bwd %.3f ms, fwd+bwd %.3f ms, "
           "%.2f GFLOP/s = %.0f%% of sgemm %.2f GFLOP/s; %d layers fwd+bwd %.2f ms\n",
           m->name, m->b, m->s, m->h, m->a, m->f, best_f * 1e3, best_b * 1e3, tl * 1e3,
           fl / tl * 1e-9, 100.0 * fl / tl / sgemm_rate, sgemm_rate * 1e-9, m->layers,
           m->layers * tl * 1e3);
    layer_free(&L);
}

int main(int argc, char **argv)
{
    int threads = 0, reps = 5, tiny_b = 8, gpt2_b = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tiny-b"))
            tiny_b = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gpt2-b"))
            gpt2_b = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_kernels: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    pt_kernels *K = pt_kernels_cpu(threads);
    if (!K) {
        fprintf(stderr, "bench_kernels: cannot create the CPU backend\n");
        return 1;
    }
    printf("ptkernels CPU backend, OpenBLAS %s, %d threads, best of %d\n",
           openblas_get_config(), openblas_get_num_threads(), reps);

    const mm_shape shapes[] = {
        {"tiny qkv", 8 * 64, 64, 192},     {"tiny fc", 8 * 64, 64, 256},
        {"tiny proj", 8 * 64, 256, 64},    {"gpt2 qkv", 1024, 768, 2304},
        {"gpt2 attnproj", 1024, 768, 768}, {"gpt2 fc", 1024, 768, 3072},
        {"gpt2 fcproj", 1024, 3072, 768},  {"gpt2 head", 1024, 768, 50257},
    };
    printf("\n%-14s %6s %6s %6s  %10s %10s %6s  %10s %10s %6s\n", "matmul", "n", "ic", "oc",
           "sgemm GF/s", "fwd GF/s", "ratio", "sgemm bwd", "bwd GF/s", "ratio");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        double t[4];
        const mm_shape *sh = &shapes[i];
        bench_matmul(K, sh, sh->oc > 10000 ? 2 : reps, t);
        double fl = 2.0 * sh->n * sh->ic * sh->oc;
        printf("%-14s %6lld %6d %6d  %10.2f %10.2f %5.0f%%  %10.2f %10.2f %5.0f%%\n", sh->name,
               (long long)sh->n, sh->ic, sh->oc, fl / t[0] * 1e-9, fl / t[1] * 1e-9,
               100 * t[0] / t[1], 2 * fl / t[2] * 1e-9, 2 * fl / t[3] * 1e-9,
               100 * t[2] / t[3]);
    }

    printf("\n");
    model tiny = {"tiny", tiny_b, 64, 64, 4, 256, 4};
    model gpt2 = {"gpt2-124m", gpt2_b, 1024, 768, 12, 3072, 12};
    bench_model(K, &tiny, reps);
    bench_model(K, &gpt2, reps);
    pt_kernels_destroy(K);
    return 0;
}
