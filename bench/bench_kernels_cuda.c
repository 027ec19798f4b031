/*
 * Benchmarks of ptkernels' CUDA backend (figures, not tests):
 *   1. memory-bound kernels (pointwise ops, norms, embedding, cross-entropy, AdamW,
 *      conversions, sum of squares) as achieved bandwidth against the device's peak
 *      (2 x memory clock x bus width, from cudaDeviceGetAttribute). Bytes are the
 *      minimum the op must move: each input read once, each output written once
 *      (read too when it accumulates);
 *   2. matmul_forward and matmul_backward as TFLOP/s (2·n·ic·oc forward, twice that
 *      backward), against the best of cuBLASLt's heuristic candidates (up to 8, each
 *      timed) for the forward's own problem;
 *   3. attention forward and backward, bf16, causal, head dims 64 and 128, sequences
 *      1 K to 8 K at 16 K tokens per batch and 16 heads, as TFLOP/s: forward
 *      2·b·a·s²·d (QK^T and PV over half the square), backward 2.5 times that (five
 *      products: S again, dP, dV, dQ, dK), FlashAttention's convention;
 *   4. the fused ops against the ops they replace, on GPT-2 124M's MLP and its
 *      pre-norm residual at b·s = 8·1024 (h 768, f 3072): matmul_forward_gelu against
 *      matmul_forward + gelu_forward, matmul_backward_dgelu against zero +
 *      matmul_backward's dinp + gelu_backward, residual_layernorm_forward against
 *      residual_forward + layernorm_forward, as times and the unfused/fused ratio,
 *      under the backend's PT_KCUDA_EPILOGUES (auto: fused GEMM epilogues from sm_90);
 *      and the up projection's weight and bias gradients (matmul_backward's dw and
 *      dbias) with cuBLASLt's BGRADB epilogue against a second backend made with
 *      PT_KCUDA_EPILOGUES=off (the plain GEMM, then the column sum);
 *   5. q, k and v of one input as one batched call (matmul_forward_shared and
 *      matmul_wgrad_shared, with biases) against three matmul_forward calls and three
 *      matmul_backward weight-and-bias gradients, at GPT-2 124M's training shape
 *      (b·s = 64·1024, h 768) and 1.5B's (16·1024, h 1600), as times, TFLOP/s and the
 *      three-call/batched ratio; the layers lie as the runtime's (weights and biases
 *      end to end, outputs end to end);
 *   6. a mixture of experts' grouped GEMMs (matmul_grouped_forward and
 *      matmul_grouped_backward, one cuBLASLt call per expert, as ptrun runs them)
 *      against one matmul_forward / matmul_backward of all the rows (the same FLOPs,
 *      one weight), each expert given the same rows, at the shapes of
 *      examples/model-moe-1.3b.json (8 experts, top 2, 8 K tokens) and of Qwen3-30B-A3B
 *      with ep = 8 (16 of its 128 experts a rank, top 8, 16 K tokens), the gate's and
 *      the down projection's, as TFLOP/s and the grouped/dense time ratio.
 * Each figure is the best of --reps timed runs, timed on the host around a sync.
 *   usage: bench_kernels_cuda [--reps N] [--device D] [--only SECTION]
 * Without a CUDA device it says so and exits 1.
 */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

static pt_kernels *K;
static pt_kernels *K_plain; /* PT_KCUDA_EPILOGUES=off: section 4's unfused weight gradient */
static int reps = 5;

/* The backend's notes (kernels.h, pt_kernels.note), as the tools print them. */
static void print_note(void *arg, const char *line)
{
    (void)arg;
    fprintf(stderr, "ptkernels: note: %s\n", line);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void check_sync(const char *what)
{
    pt_kernels *kns[] = {K, K_plain};
    for (int i = 0; i < 2; i++)
        if (kns[i] && kns[i]->sync(kns[i])) {
            fprintf(stderr, "bench_kernels_cuda: %s: %s\n", what, kns[i]->err);
            exit(1);
        }
}

/* device buffer of bytes filled with small values: bytes 0x3c read as bf16 (0x3c3c)
 * or fp32 (0x3c3c3c3c) are both about 0.0115 */
static void *dbuf(size_t bytes)
{
    void *p = K->alloc(K, bytes);
    if (!p) {
        fprintf(stderr, "bench_kernels_cuda: out of device memory for %zu bytes\n", bytes);
        exit(1);
    }
    cudaMemset(p, 0x3c, bytes);
    return p;
}

typedef void (*bench_fn)(void *ctx);

/* best seconds of reps runs, after one warm-up */
static double best_time(bench_fn fn, void *ctx, const char *what)
{
    fn(ctx);
    check_sync(what);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        fn(ctx);
        check_sync(what);
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    return best;
}

/* ---- 1. memory-bound kernels ----------------------------------------------------------- */

typedef struct {
    int64_t n, rows;
    int h, v;
    void *a, *b, *c, *d, *f32a, *f32b, *f32c, *f32d, *tok;
} mem_ctx;

static void run_gelu_f(void *p) { mem_ctx *c = p; K->gelu_forward(K, c->a, c->b, c->n); }
static void run_gelu_b(void *p) { mem_ctx *c = p; K->gelu_backward(K, c->a, c->b, c->c, c->n); }
static void run_swiglu_f(void *p) { mem_ctx *c = p; K->swiglu_forward(K, c->a, c->b, c->c, c->n, 1); }
static void run_swiglu_b(void *p)
{
    mem_ctx *c = p;
    /* up: bf16 data in the first half of an fp32-sized buffer */
    K->swiglu_backward(K, c->a, c->b, c->c, c->d, c->f32a, c->n, 1);
}
static void run_res_f(void *p) { mem_ctx *c = p; K->residual_forward(K, c->a, c->b, c->c, c->n); }
static void run_res_b(void *p) { mem_ctx *c = p; K->residual_backward(K, c->a, c->b, c->c, c->n); }
static void run_drop_f(void *p) { mem_ctx *c = p; K->dropout_forward(K, c->a, c->b, c->n, 0.1f, 1, 2, 0); }
static void run_rope_f(void *p)
{
    mem_ctx *c = p;
    K->rope_forward(K, c->a, c->b, 1, (int)(c->n / 4096), 32, 128, 0, 500000.0f);
}
static void run_ln_f(void *p)
{
    mem_ctx *c = p;
    K->layernorm_forward(K, c->a, c->f32a, c->f32b, c->b, c->c, c->d, c->rows, c->h, 1e-5f);
}
static void run_ln_b(void *p)
{
    mem_ctx *c = p;
    K->layernorm_backward(K, c->a, c->f32a, c->f32b, c->b, c->c, c->d, c->f32c, c->f32d,
                          c->rows, c->h);
}
static void run_rms_f(void *p)
{
    mem_ctx *c = p;
    K->rmsnorm_forward(K, c->a, c->f32a, c->b, c->c, c->rows, c->h, 1e-5f);
}
static void run_rms_b(void *p)
{
    mem_ctx *c = p;
    K->rmsnorm_backward(K, c->a, c->f32a, c->b, c->c, c->d, c->f32d, c->rows, c->h);
}
static void run_embed_f(void *p)
{
    mem_ctx *c = p;
    K->embed_forward(K, c->a, c->tok, c->b, c->c, 1, (int)c->rows, c->h, 0, 1024, 0);
}
static void run_ce(void *p)
{
    mem_ctx *c = p;
    K->crossentropy(K, c->f32a, c->a, c->a, c->tok, c->rows, c->v, 1.0f / (float)c->rows);
}
static void run_adamw(void *p)
{
    mem_ctx *c = p;
    K->adamw(K, c->f32a, c->a, c->f32b, c->f32c, c->f32d, c->n, 3e-4f, 0.9f, 0.95f, 1e-8f,
             0.1f, 10, 1.0f);
}
static void run_f2b(void *p) { mem_ctx *c = p; K->f32_to_bf16(K, c->a, c->f32a, c->n); }
static void run_sumsq(void *p) { mem_ctx *c = p; K->sumsq(K, c->f32a, c->n); }

static void bench_memory(double peak_gbs)
{
    mem_ctx c;
    c.n = (int64_t)64 << 20; /* 64 M elements: 128 MB per bf16 tensor */
    c.h = 4096;
    c.rows = c.n / c.h;      /* 16 K rows */
    c.v = 32768;
    size_t nb = (size_t)c.n * 2, nf = (size_t)c.n * 4;
    c.a = dbuf(nb);
    c.b = dbuf(nb);
    c.c = dbuf(nb);
    c.d = dbuf(nb);
    c.f32a = dbuf(nf);
    c.f32b = dbuf(nf);
    c.f32c = dbuf(nf);
    c.f32d = dbuf(nf);
    int32_t *tok = malloc((size_t)c.rows * sizeof(int32_t));
    for (int64_t i = 0; i < c.rows; i++)
        tok[i] = (int32_t)((i * 2654435761u) % 1024);
    c.tok = dbuf((size_t)c.rows * sizeof(int32_t));
    K->copy(K, c.tok, tok, (size_t)c.rows * sizeof(int32_t), PT_KCOPY_H2D);
    free(tok);
    /* the cross-entropy's logits: rows · v must fit in one bf16 buffer */
    int64_t ce_rows = c.n / c.v;
    double n = (double)c.n, nh = (double)c.rows * c.h;
    struct {
        const char *name;
        bench_fn fn;
        double bytes;
    } cases[] = {
        {"gelu_forward", run_gelu_f, 4 * n},
        {"gelu_backward", run_gelu_b, 8 * n},
        {"swiglu_forward", run_swiglu_f, 6 * n},
        {"swiglu_backward", run_swiglu_b, 14 * n},
        {"residual_forward", run_res_f, 6 * n},
        {"residual_backward", run_res_b, 10 * n},
        {"dropout_forward", run_drop_f, 4 * n},
        {"rope_forward", run_rope_f, 4 * n},
        {"layernorm_forward", run_ln_f, 4 * nh},
        {"layernorm_backward", run_ln_b, 8 * nh},
        {"rmsnorm_forward", run_rms_f, 4 * nh},
        {"rmsnorm_backward", run_rms_b, 8 * nh},
        {"embed_forward", run_embed_f, 4 * nh},
        {"crossentropy", run_ce, 4 * (double)ce_rows * c.v},
        {"adamw (+bf16 copy)", run_adamw, 30 * n},
        {"f32_to_bf16", run_f2b, 6 * n},
        {"sumsq", run_sumsq, 4 * n},
    };
    printf("\n1. memory-bound kernels (64 M elements; norms and embedding 16 K rows x 4096;"
           " cross-entropy %lld rows x %d)\n", (long long)ce_rows, c.v);
    printf("%-22s %10s %10s %8s\n", "kernel", "time ms", "GB/s", "of peak");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t saved = c.rows;
        if (cases[i].fn == run_ce)
            c.rows = ce_rows;
        double t = best_time(cases[i].fn, &c, cases[i].name);
        c.rows = saved;
        double gbs = cases[i].bytes / t / 1e9;
        printf("%-22s %10.3f %10.1f %7.0f%%\n", cases[i].name, t * 1e3, gbs,
               100.0 * gbs / peak_gbs);
    }
    void *bufs[] = {c.a, c.b, c.c, c.d, c.f32a, c.f32b, c.f32c, c.f32d, c.tok};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        K->free(K, bufs[i]);
}

/* ---- 2. GEMMs against cuBLASLt's best heuristic candidate ------------------------------------- */

typedef struct {
    int64_t n;
    int ic, oc;
    void *inp, *w, *out, *dout, *dinp, *dw;
} mm_ctx;

static void run_mm_f(void *p)
{
    mm_ctx *c = p;
    K->matmul_forward(K, c->out, c->inp, c->w, NULL, c->n, c->ic, c->oc);
}

static void run_mm_b(void *p)
{
    mm_ctx *c = p;
    K->matmul_backward(K, c->dinp, c->dw, NULL, c->dout, c->inp, c->w, c->n, c->ic, c->oc);
}

/* the forward's product straight through cuBLASLt: every heuristic candidate (up to 8)
 * timed, the best returned in seconds; 0 when none ran */
static double lt_best(const mm_ctx *c)
{
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS)
        return 0.0;
    size_t ws_bytes = (size_t)32 << 20;
    void *ws = NULL;
    cudaMalloc(&ws, ws_bytes);
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasOperation_t opt = CUBLAS_OP_T, opn = CUBLAS_OP_N;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opn, sizeof opn);
    /* column-major out^T (oc, n) = (w-view (ic, oc))^T · inp-view (ic, n), as matmul.cu */
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, c->ic, c->oc, c->ic);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, c->ic, c->n, c->ic);
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, c->oc, c->n, c->oc);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 8, res, &found);
    float alpha = 1.0f, beta = 0.0f;
    double best = 0.0;
    for (int i = 0; i < found; i++) {
        double t_best = 1e30;
        for (int r = 0; r <= reps; r++) {
            cudaDeviceSynchronize();
            double t0 = now_s();
            cublasStatus_t st = cublasLtMatmul(lt, desc, &alpha, c->w, la, c->inp, lb, &beta,
                                               c->out, lc, c->out, lc, &res[i].algo, ws,
                                               ws_bytes, 0);
            cudaDeviceSynchronize();
            if (st != CUBLAS_STATUS_SUCCESS)
                break;
            double t = now_s() - t0;
            if (r > 0) /* the first run warms up */
                t_best = t < t_best ? t : t_best;
        }
        if (t_best < 1e30 && (best == 0.0 || t_best < best))
            best = t_best;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(ws);
    cublasLtDestroy(lt);
    return best;
}

static void bench_gemm(void)
{
    struct {
        const char *name;
        int64_t n;
        int ic, oc;
    } shapes[] = {
        {"gpt2 qkv", 8192, 768, 2304},   {"gpt2 fc", 8192, 768, 3072},
        {"llama7b qkv", 8192, 4096, 12288}, {"llama7b up", 8192, 4096, 11008},
        {"llama7b down", 8192, 11008, 4096}, {"odd", 1000, 999, 1001},
    };
    printf("\n2. GEMMs, bf16 in and out, fp32 compute (TFLOP/s)\n");
    printf("%-14s %6s %6s %6s %9s %9s %12s %8s\n", "shape", "n", "ic", "oc", "forward",
           "backward", "lt best fwd", "fwd/lt");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        mm_ctx c = {shapes[i].n, shapes[i].ic, shapes[i].oc, 0, 0, 0, 0, 0, 0};
        c.inp = dbuf((size_t)c.n * c.ic * 2);
        c.w = dbuf((size_t)c.oc * c.ic * 2);
        c.out = dbuf((size_t)c.n * c.oc * 2);
        c.dout = dbuf((size_t)c.n * c.oc * 2);
        c.dinp = dbuf((size_t)c.n * c.ic * 2);
        c.dw = dbuf((size_t)c.oc * c.ic * 4);
        double flops = 2.0 * c.n * c.ic * c.oc;
        double tf = best_time(run_mm_f, &c, "matmul_forward");
        double tb = best_time(run_mm_b, &c, "matmul_backward");
        double tl = lt_best(&c);
        printf("%-14s %6lld %6d %6d %9.1f %9.1f %12.1f %7.0f%%\n", shapes[i].name,
               (long long)c.n, c.ic, c.oc, flops / tf / 1e12, 2 * flops / tb / 1e12,
               tl > 0 ? flops / tl / 1e12 : 0.0, tl > 0 ? 100.0 * tl / tf : 0.0);
        K->free(K, c.inp);
        K->free(K, c.w);
        K->free(K, c.out);
        K->free(K, c.dout);
        K->free(K, c.dinp);
        K->free(K, c.dw);
    }
}

/* ---- 3. attention -------------------------------------------------------------------------------- */

typedef struct {
    int b, s, a, d;
    void *q, *k, *v, *out, *lse, *dout, *dq, *dk, *dv;
} att_ctx;

static void run_att_f(void *p)
{
    att_ctx *c = p;
    K->attention_forward(K, c->out, c->lse, c->q, c->k, c->v, c->b, c->s, c->s, c->a, c->a, c->d,
                         0, 0, 1);
}

static void run_att_b(void *p)
{
    att_ctx *c = p;
    K->attention_backward(K, c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->out, c->lse,
                          c->b, c->s, c->s, c->a, c->a, c->d, 0, 0, 1, 0);
}

static void bench_attention(void)
{
    printf("\n3. attention, bf16, causal, 16 heads, 16 K tokens per batch (TFLOP/s)\n");
    printf("%5s %6s %4s %10s %10s %10s %10s\n", "d", "s", "b", "fwd ms", "fwd TF/s",
           "bwd ms", "bwd TF/s");
    int dims[] = {64, 128}, seqs[] = {1024, 2048, 4096, 8192};
    for (int di = 0; di < 2; di++)
        for (int si = 0; si < 4; si++) {
            att_ctx c = {16384 / seqs[si], seqs[si], 16, dims[di], 0, 0, 0, 0, 0, 0, 0, 0, 0};
            size_t n = (size_t)c.b * c.s * c.a * c.d * 2;
            c.q = dbuf(n);
            c.k = dbuf(n);
            c.v = dbuf(n);
            c.out = dbuf(n);
            c.dout = dbuf(n);
            c.dq = dbuf(n);
            c.dk = dbuf(n);
            c.dv = dbuf(n);
            c.lse = dbuf((size_t)c.b * c.a * c.s * 4);
            double flops = 2.0 * c.b * c.a * (double)c.s * c.s * c.d;
            double tf = best_time(run_att_f, &c, "attention_forward");
            double tb = best_time(run_att_b, &c, "attention_backward");
            printf("%5d %6d %4d %10.2f %10.1f %10.2f %10.1f\n", c.d, c.s, c.b, tf * 1e3,
                   flops / tf / 1e12, tb * 1e3, 2.5 * flops / tb / 1e12);
            void *bufs[] = {c.q, c.k, c.v, c.out, c.dout, c.dq, c.dk, c.dv, c.lse};
            for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
                K->free(K, bufs[i]);
        }
}

/* ---- 4. fused ops against the ops they replace ---------------------------------------------- */

typedef struct {
    int64_t n;
    int h, f;
    void *x, *w_fc, *b_fc, *pre, *act, *w_proj, *dout, *dgrad, *res, *res2, *ln_w, *ln_b,
        *ln_out, *mean, *rstd;
    float *dw, *dbias;
} mlp_ctx;

static void run_fc_unfused(void *p)
{
    mlp_ctx *c = p;
    K->matmul_forward(K, c->pre, c->x, c->w_fc, c->b_fc, c->n, c->h, c->f);
    K->gelu_forward(K, c->act, c->pre, c->n * c->f);
}

static void run_fc_fused(void *p)
{
    mlp_ctx *c = p;
    K->matmul_forward_gelu(K, c->act, c->pre, c->x, c->w_fc, c->b_fc, c->n, c->h, c->f);
}

/* dgrad holds two (n, f) bf16 halves: the data gradient of the projection, then dpre;
 * gelu_backward accumulates, so both start from zero (one zero call) */
static void run_proj_bwd_unfused(void *p)
{
    mlp_ctx *c = p;
    size_t half = (size_t)c->n * c->f * 2;
    char *dact = c->dgrad, *dpre = dact + half;
    K->zero(K, dact, 2 * half);
    K->matmul_backward(K, (float *)dact, NULL, NULL, c->dout, c->act, c->w_proj, c->n, c->f,
                       c->h);
    K->gelu_backward(K, (float *)dpre, (const float *)dact, c->pre, c->n * c->f);
}

static void run_proj_bwd_fused(void *p)
{
    mlp_ctx *c = p;
    K->matmul_backward_dgelu(K, c->dgrad, c->dout, c->w_proj, c->pre, c->n, c->f, c->h);
}

/* the up projection's dw (f, h) and dbias (f), fp32, from dout = its output's gradient
 * (n, f) and x (n, h): the plain GEMM and the column sum, or the GEMM with BGRADB */
static void run_wgrad_bias_unfused(void *p)
{
    mlp_ctx *c = p;
    K_plain->matmul_backward(K_plain, NULL, c->dw, c->dbias, c->act, c->x, c->w_fc, c->n, c->h,
                             c->f);
}

static void run_wgrad_bias_fused(void *p)
{
    mlp_ctx *c = p;
    K->matmul_backward(K, NULL, c->dw, c->dbias, c->act, c->x, c->w_fc, c->n, c->h, c->f);
}

static void run_resln_unfused(void *p)
{
    mlp_ctx *c = p;
    K->residual_forward(K, c->res2, c->res, c->x, c->n * c->h);
    K->layernorm_forward(K, c->ln_out, c->mean, c->rstd, c->res2, c->ln_w, c->ln_b, c->n, c->h,
                         1e-5f);
}

static void run_resln_fused(void *p)
{
    mlp_ctx *c = p;
    K->residual_layernorm_forward(K, c->res2, c->ln_out, c->mean, c->rstd, c->res, c->x,
                                  c->ln_w, c->ln_b, c->n, c->h, 1e-5f);
}

static void bench_fused(void)
{
    mlp_ctx c;
    memset(&c, 0, sizeof c);
    c.n = 8 * 1024;
    c.h = 768;
    c.f = 3072;
    size_t nh = (size_t)c.n * c.h * 2, nf = (size_t)c.n * c.f * 2, hf = (size_t)c.h * c.f * 2;
    c.x = dbuf(nh);
    c.w_fc = dbuf(hf);
    c.b_fc = dbuf((size_t)c.f * 2);
    c.pre = dbuf(nf);
    c.act = dbuf(nf);
    c.w_proj = dbuf(hf);
    c.dout = dbuf(nh);
    c.dgrad = dbuf(2 * nf);
    c.res = dbuf(nh);
    c.res2 = dbuf(nh);
    c.ln_w = dbuf((size_t)c.h * 2);
    c.ln_b = dbuf((size_t)c.h * 2);
    c.ln_out = dbuf(nh);
    c.mean = dbuf((size_t)c.n * 4);
    c.rstd = dbuf((size_t)c.n * 4);
    c.dw = dbuf(hf * 2);
    c.dbias = dbuf((size_t)c.f * 4);
    const char *mode = getenv("PT_KCUDA_EPILOGUES");
    printf("\n4. fused ops, GPT-2 124M MLP and residual at b·s = 8·1024, h %d, f %d "
           "(PT_KCUDA_EPILOGUES=%s)\n", c.h, c.f, mode && mode[0] ? mode : "auto");
    printf("%-34s %12s %10s %8s\n", "op", "unfused ms", "fused ms", "ratio");
    struct {
        const char *name;
        bench_fn unfused, fused;
    } cases[] = {
        {"fc forward + gelu", run_fc_unfused, run_fc_fused},
        {"proj backward dinp + gelu bwd", run_proj_bwd_unfused, run_proj_bwd_fused},
        {"residual + layernorm forward", run_resln_unfused, run_resln_fused},
        {"fc weight + bias gradient (BGRADB)", run_wgrad_bias_unfused, run_wgrad_bias_fused},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (!K_plain && cases[i].unfused == run_wgrad_bias_unfused)
            continue;
        double tu = best_time(cases[i].unfused, &c, cases[i].name);
        double tf = best_time(cases[i].fused, &c, cases[i].name);
        printf("%-34s %12.3f %10.3f %7.2fx\n", cases[i].name, tu * 1e3, tf * 1e3, tu / tf);
    }
    void *bufs[] = {c.x,    c.w_fc, c.b_fc, c.pre,    c.act,  c.w_proj, c.dout, c.dgrad, c.res,
                    c.res2, c.ln_w, c.ln_b, c.ln_out, c.mean, c.rstd,   c.dw,   c.dbias};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        K->free(K, bufs[i]);
}

/* ---- 5. q, k and v as one batch ------------------------------------------------------------- */

typedef struct {
    int64_t n;
    int h;
    void *x, *wb, *out, *dout;
    float *dwb;
} qkv_ctx;

/* layer i's weight, bias, output and output gradient; its weight and bias gradients */
static const float *qkv_w(const qkv_ctx *c, int i)
{
    return (const float *)((char *)c->wb + (size_t)i * ((size_t)c->h * c->h + c->h) * 2);
}
static const float *qkv_b(const qkv_ctx *c, int i)
{
    return (const float *)((const char *)qkv_w(c, i) + (size_t)c->h * c->h * 2);
}
static float *qkv_out(void *base, const qkv_ctx *c, int i)
{
    return (float *)((char *)base + (size_t)i * c->n * c->h * 2);
}
static float *qkv_dw(const qkv_ctx *c, int i)
{
    return c->dwb + (size_t)i * ((size_t)c->h * c->h + c->h);
}

static void run_qkv_f_three(void *p)
{
    qkv_ctx *c = p;
    for (int i = 0; i < 3; i++)
        K->matmul_forward(K, qkv_out(c->out, c, i), c->x, qkv_w(c, i), qkv_b(c, i), c->n, c->h,
                          c->h);
}

static void run_qkv_f_batch(void *p)
{
    qkv_ctx *c = p;
    float *out[3];
    const float *w[3], *b[3];
    for (int i = 0; i < 3; i++) {
        out[i] = qkv_out(c->out, c, i);
        w[i] = qkv_w(c, i);
        b[i] = qkv_b(c, i);
    }
    K->matmul_forward_shared(K, 3, out, c->x, w, b, c->n, c->h, c->h);
}

static void run_qkv_w_three(void *p)
{
    qkv_ctx *c = p;
    for (int i = 0; i < 3; i++)
        K->matmul_backward(K, NULL, qkv_dw(c, i), qkv_dw(c, i) + (size_t)c->h * c->h,
                           qkv_out(c->dout, c, i), c->x, NULL, c->n, c->h, c->h);
}

static void run_qkv_w_batch(void *p)
{
    qkv_ctx *c = p;
    float *dw[3], *db[3];
    const float *dout[3];
    for (int i = 0; i < 3; i++) {
        dw[i] = qkv_dw(c, i);
        db[i] = dw[i] + (size_t)c->h * c->h;
        dout[i] = qkv_out(c->dout, c, i);
    }
    K->matmul_wgrad_shared(K, 3, dw, db, dout, c->x, c->n, c->h, c->h);
}

static void bench_qkv(void)
{
    printf("\n5. q, k and v of one input: three calls against one batch (with biases)\n");
    printf("%-26s %10s %10s %8s %8s %7s\n", "op", "3 calls ms", "batch ms", "TF/s 3",
           "TF/s b", "ratio");
    const struct {
        const char *model;
        int64_t n;
        int h;
    } shapes[] = {{"GPT-2 124M", 64 * 1024, 768}, {"GPT-2 1.5B", 16 * 1024, 1600}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        qkv_ctx c = {shapes[s].n, shapes[s].h, NULL, NULL, NULL, NULL, NULL};
        size_t nh = (size_t)c.n * c.h * 2, wb = 3 * ((size_t)c.h * c.h + c.h);
        c.x = dbuf(nh);
        c.wb = dbuf(wb * 2);
        c.out = dbuf(3 * nh);
        c.dout = dbuf(3 * nh);
        c.dwb = dbuf(wb * 4);
        double flops = 3 * 2.0 * (double)c.n * c.h * c.h;
        const struct {
            const char *name;
            bench_fn three, batch;
        } cases[] = {{"forward", run_qkv_f_three, run_qkv_f_batch},
                     {"weight + bias gradient", run_qkv_w_three, run_qkv_w_batch}};
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s %s", shapes[s].model, cases[i].name);
            double t3 = best_time(cases[i].three, &c, name);
            double tb = best_time(cases[i].batch, &c, name);
            printf("%-26s %10.3f %10.3f %8.0f %8.0f %6.2fx\n", name, t3 * 1e3, tb * 1e3,
                   flops / t3 / 1e12, flops / tb / 1e12, t3 / tb);
        }
        void *bufs[] = {c.x, c.wb, c.out, c.dout, c.dwb};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            K->free(K, bufs[i]);
    }
}

/* ---- 6. grouped GEMMs of a mixture of experts ----------------------------------------- */

typedef struct {
    int G, ic, oc;
    int64_t rows; /* each group's */
    int64_t counts[128];
    void *inp, *w, *out, *dout, *dinp, *dw;
} grp_ctx;

static void run_grp_f(void *p)
{
    grp_ctx *c = p;
    K->matmul_grouped_forward(K, c->out, c->inp, c->w, c->counts, c->G, c->ic, c->oc);
}

static void run_grp_b(void *p)
{
    grp_ctx *c = p;
    K->matmul_grouped_backward(K, c->dinp, c->dw, c->dout, c->inp, c->w, c->counts, c->G,
                               c->ic, c->oc);
}

static void run_grp_dense_f(void *p)
{
    grp_ctx *c = p;
    K->matmul_forward(K, c->out, c->inp, c->w, NULL, c->rows * c->G, c->ic, c->oc);
}

static void run_grp_dense_b(void *p)
{
    grp_ctx *c = p;
    K->matmul_backward(K, c->dinp, c->dw, NULL, c->dout, c->inp, c->w, c->rows * c->G,
                       c->ic, c->oc);
}

static void bench_grouped(void)
{
    printf("\n6. experts' grouped GEMMs against one dense GEMM of the same FLOPs\n");
    printf("%-30s %5s %6s %6s %6s %9s %9s %8s %8s %7s\n", "op", "G", "rows", "ic", "oc",
           "group ms", "dense ms", "TF/s g", "TF/s d", "ratio");
    const struct {
        const char *model;
        int G;
        int64_t rows; /* tokens x top-k / experts */
        int ic, oc;   /* the gate's (one grouped call; the up projection's is its twin) */
    } shapes[] = {{"moe-1.3b gate", 8, 8192 * 2 / 8, 1024, 2816},
                  {"moe-1.3b down", 8, 8192 * 2 / 8, 2816, 1024},
                  {"qwen3-30b-a3b ep8 gate", 16, 16384 * 8 / 128, 2048, 768},
                  {"qwen3-30b-a3b ep8 down", 16, 16384 * 8 / 128, 768, 2048}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        grp_ctx c = {shapes[s].G, shapes[s].ic, shapes[s].oc, shapes[s].rows, {0}, NULL,
                     NULL, NULL, NULL, NULL, NULL};
        for (int g = 0; g < c.G; g++)
            c.counts[g] = c.rows;
        size_t m = (size_t)c.rows * c.G;
        c.inp = dbuf(m * c.ic * 2);
        c.w = dbuf((size_t)c.G * c.oc * c.ic * 2);
        c.out = dbuf(m * c.oc * 2);
        c.dout = dbuf(m * c.oc * 2);
        c.dinp = dbuf(m * c.ic * 2);
        c.dw = dbuf((size_t)c.G * c.oc * c.ic * 4);
        double flops = 2.0 * (double)m * c.ic * c.oc;
        const struct {
            const char *name;
            bench_fn grouped, dense;
            double flops;
        } cases[] = {{"forward", run_grp_f, run_grp_dense_f, flops},
                     {"backward", run_grp_b, run_grp_dense_b, 2 * flops}};
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s %s", shapes[s].model, cases[i].name);
            double tg = best_time(cases[i].grouped, &c, name);
            double td = best_time(cases[i].dense, &c, name);
            printf("%-30s %5d %6lld %6d %6d %9.3f %9.3f %8.0f %8.0f %6.2fx\n", name, c.G,
                   (long long)c.rows, c.ic, c.oc, tg * 1e3, td * 1e3,
                   cases[i].flops / tg / 1e12, cases[i].flops / td / 1e12, tg / td);
        }
        void *bufs[] = {c.inp, c.w, c.out, c.dout, c.dinp, c.dw};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            K->free(K, bufs[i]);
    }
}

int main(int argc, char **argv)
{
    int device = 0, only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc && atoi(argv[i + 1]) >= 1 &&
                 atoi(argv[i + 1]) <= 6)
            only = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_kernels_cuda [--reps N] [--device D] "
                            "[--only SECTION (1-6)]\n");
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    char err[256] = "";
    K = pt_kernels_cuda(device, err, sizeof err);
    if (!K) {
        fprintf(stderr, "bench_kernels_cuda: no GPU to measure: %s\n", err);
        return 1;
    }
    K->note = print_note;
    /* the second backend, without GEMM epilogues; the first keeps the user's setting */
    const char *mode = getenv("PT_KCUDA_EPILOGUES");
    char *saved = mode ? strdup(mode) : NULL;
    setenv("PT_KCUDA_EPILOGUES", "off", 1);
    K_plain = pt_kernels_cuda(device, err, sizeof err);
    if (K_plain)
        K_plain->note = print_note;
    if (saved)
        setenv("PT_KCUDA_EPILOGUES", saved, 1);
    else
        unsetenv("PT_KCUDA_EPILOGUES");
    free(saved);
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, device);
    int mem_khz = 0, bus_bits = 0;
    cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device);
    cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device);
    double peak_gbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    printf("device %d: %s, sm_%d%d, %d SMs, %.1f GiB, peak memory bandwidth %.0f GB/s "
           "(2 x %d MHz x %d bits)\n", device, prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, peak_gbs,
           mem_khz / 1000, bus_bits);
    if (!only || only == 1)
        bench_memory(peak_gbs > 0 ? peak_gbs : 1.0);
    if (!only || only == 2)
        bench_gemm();
    if (!only || only == 3)
        bench_attention();
    if (!only || only == 4)
        bench_fused();
    if (!only || only == 5)
        bench_qkv();
    if (!only || only == 6)
        bench_grouped();
    if (K_plain)
        pt_kernels_destroy(K_plain);
    pt_kernels_destroy(K);
    return 0;
}
