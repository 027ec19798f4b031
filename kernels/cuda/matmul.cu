/*
 * Linear layers and the general GEMM on CUDA, through cuBLASLt: bf16 A and B, fp32
 * compute (CUBLAS_COMPUTE_32F), bf16 output for activations and fp32 output for weight
 * gradients (cuBLASLt supports bf16 inputs with fp32 C/D, "cublasLtMatmul" type
 * table). The bias of the forward rides the CUBLASLT_EPILOGUE_BIAS epilogue.
 *
 * Row-major to column-major: cuBLASLt is column-major, and a row-major (r, c) matrix is
 * the column-major (c, r) matrix with the same memory. So the row-major product
 * C (M, N) = op(A) (M, K) · op(B) (K, N) is computed as the column-major product
 * C^T (N, M) = op(B)^T · op(A)^T: swap the operands, keep each one's transpose flag.
 *
 * Fused epilogues (cublasLt.h's cublasLtEpilogue_t), where the backend asks for them
 * (ctx->epilogues, PT_KCUDA_EPILOGUES in backend.cu):
 * - matmul_forward_gelu: GELU_AUX_BIAS (GELU_AUX without a bias) writes pre as the aux
 *   matrix (the biased fp32 sum rounded to bf16) and out = gelu of the fp32 sum;
 * - matmul_backward_dgelu: DGELU reads pre as the aux matrix and writes
 *   dpre = (dout · w) ⊙ gelu'(pre) from the fp32 product, beta = 0;
 * - matmul_forward_res: the forward product (with BIAS where it has one) with beta = 1
 *   on the residual as C and out as D: out = the fp32 sum plus the residual, rounded
 *   once (no epilogue: C is cuBLASLt's own addend);
 * - matmul_forward_shared and matmul_wgrad_shared: the products of matmul_forward and
 *   matmul_backward's weight gradient as one strided batch (BATCH_COUNT and
 *   STRIDED_BATCH_OFFSET on each matrix, the shared input's step 0), the bias or BGRADB's
 *   bias gradients stepped by BIAS_BATCH_STRIDE, where the pointers allow (equal steps);
 *   else one call per layer;
 * - matmul_backward's dbias where oc <= ic: BGRADB on the weight-gradient GEMM sums
 *   op(B) = dout over the rows (k) into an fp32 scratch vector, which add_f32 adds to
 *   dbias (the epilogue writes, the contract accumulates); a wider dout (the MLP's up
 *   projection) takes the plain GEMM and the column sum, which ran faster there.
 * cuBLASLt may decline an epilogue (no algorithm; an aux leading dimension that is no
 * multiple of 8, as the header requires; aux or bias not 16-byte aligned; no cuBLASLt at
 * all), and then the op is composed of the unfused pieces: matmul_forward then
 * gelu_forward (or residual_forward); the plain GEMM into dpre with beta = 0, then pointwise.cu's
 * dgelu_inplace (one more bf16 rounding of the product); the GEMM, then the
 * deterministic column sum of backend.cu's two passes for dbias, which is also the path
 * when dw is not wanted.
 *
 * Precision notes. dinp += dout · w accumulates through beta = 1 into a bf16 buffer:
 * the old value is read as bf16 and the sum rounded to bf16 once per call, so a
 * gradient accumulated over many micro-batches loses bits a fp32 buffer would keep
 * (as in llm.c; activation gradients live for one step only); matmul_dgrad writes it
 * (beta = 0), the first data gradient into a buffer. dw accumulates into
 * fp32 through beta = 1, exactly as the CPU backend. No path uses atomics.
 *
 * cuBLASLt picks one algorithm per shape (its heuristic; cached here, keyed by shape,
 * types, epilogue and pointer alignment class, since the heuristic assumes
 * 256-byte-aligned buffers unless told otherwise, reads the alignment of the bias and
 * aux pointers from their values, and the runtime passes views into larger
 * allocations). cuBLAS documents bit-wise reproducibility for a fixed algorithm,
 * toolkit and GPU model. When cuBLASLt offers no algorithm for a plain product (rare odd
 * leading dimensions), or PT_KCUDA_NO_LT is set (used by the tests to cover it), a
 * plain tiled kernel does the product.
 */
#include <stdio.h>
#include <string.h>

#include "cuda.cuh"

/* ---- The fallback GEMM: column-major, fp32 accumulation, one output per thread -------- */

enum { FB_TILE = 16 };

static __device__ __forceinline__ float fb_load(const bf16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ float fb_load(const float *p) { return *p; }

template <typename TA, typename TC>
__global__ void gemm_fallback_kernel(int ta, int tb, int m, int n, int k, float alpha,
                                     const TA *A, int64_t lda, const TA *B, int64_t ldb,
                                     float beta, TC *C, int64_t ldc, const bf16 *bias)
{
    __shared__ float as[FB_TILE][FB_TILE + 1]; /* as[kk][i] = op(A)(i, kk) */
    __shared__ float bs[FB_TILE][FB_TILE + 1]; /* bs[j][kk] = op(B)(kk, j) */
    int tx = threadIdx.x, ty = threadIdx.y;
    int i = blockIdx.x * FB_TILE + tx; /* row of C */
    int j = blockIdx.y * FB_TILE + ty; /* column of C */
    float acc = 0.0f;
    for (int k0 = 0; k0 < k; k0 += FB_TILE) {
        /* op(A)(row, kk): A(row, kk) when not transposed, A(kk, row) when transposed */
        int ar = blockIdx.x * FB_TILE + tx, ak = k0 + ty;
        float av = 0.0f;
        if (ar < m && ak < k)
            av = fb_load(ta ? &A[(int64_t)ar * lda + ak] : &A[(int64_t)ak * lda + ar]);
        as[ty][tx] = av;
        int bc = blockIdx.y * FB_TILE + ty, bk = k0 + tx;
        float bv = 0.0f;
        if (bc < n && bk < k)
            bv = fb_load(tb ? &B[(int64_t)bk * ldb + bc] : &B[(int64_t)bc * ldb + bk]);
        bs[ty][tx] = bv;
        __syncthreads();
        for (int kk = 0; kk < FB_TILE; kk++)
            acc += as[kk][tx] * bs[ty][kk];
        __syncthreads();
    }
    if (i >= m || j >= n)
        return;
    float r = alpha * acc;
    if (bias)
        r += __bfloat162float(bias[i]);
    TC *c = C + (int64_t)j * ldc + i;
    if (beta != 0.0f)
        r += beta * (float)*c;
    if constexpr (sizeof(TC) == 2)
        *c = pt_bf16(r);
    else
        *c = r;
}

/* ---- The bias when the epilogue cannot take it ----------------------------------------- */

/* column-major C (m, n) += bias (m) over columns, rounding once more */
__global__ void add_bias_kernel(bf16 *C, const bf16 *bias, int64_t m, int64_t n, int64_t ldc)
{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e % m, j = e / m;
        bf16 *c = C + j * ldc + i;
        *c = pt_bf16(__bfloat162float(*c) + __bfloat162float(bias[i]));
    }
}

/* ---- cuBLASLt ------------------------------------------------------------------------------- */

/* The alignment class of an address: 256 (cuBLASLt's default assumption), 16 (what
 * its tensor-core kernels load with), or the largest power of two below that. An
 * algorithm chosen for a class runs on any pointer of that class, so the cache keeps
 * a few entries per shape however the runtime's views fall in their allocations. */
uint64_t pt_kcuda_align_of(const void *p)
{
    uint64_t a = (uint64_t)(uintptr_t)p;
    if (a % 256 == 0)
        return 256;
    if (a % 16 == 0)
        return 16;
    uint64_t al = 8;
    while (al > 1 && a % al)
        al >>= 1;
    return al;
}

static uint64_t align_of(const void *p) { return pt_kcuda_align_of(p); }

/* For alignment only, never dereferenced: an address whose alignment class is that of
 * every product's pointer in a batch, p stepped by `step` elements of `bytes` each (the
 * lowest set bit of p | step·bytes is the lower of the two). NULL stays NULL. */
static const void *stepped(const void *p, int64_t step, size_t bytes)
{
    return p ? (const void *)((uintptr_t)p | (uintptr_t)((uint64_t)step * bytes)) : NULL;
}

/* log2 of align_of, plus one; 0 for NULL: four bits of the cache key */
uint64_t pt_kcuda_align_code(const void *p)
{
    if (!p)
        return 0;
    uint64_t a = align_of(p), code = 1;
    while (a > 1) {
        a >>= 1;
        code++;
    }
    return code;
}

static uint64_t align_code(const void *p) { return pt_kcuda_align_code(p); }

/* One column-major product: C (m, n) = alpha · op(A) · op(B) + beta · C, A and B bf16
 * (or with ab_f32 fp32, then C fp32 too: gemm_f32), C bf16 (c_f32 = 0) or fp32
 * (c_f32 = 1). op(A) is (m, k): A is (m, k) with leading dimension lda, or (k, m) when
 * ta. Likewise B, (k, n). With D set (cuBLASLt only: lt_run), the result goes to D
 * (C's layout) and C is only read: matmul_forward_res's residual. */
typedef struct {
    int ta, tb;
    int64_t m, n, k;
    float alpha;
    const bf16 *A;
    int64_t lda;
    const bf16 *B;
    int64_t ldb;
    float beta;
    void *C;
    int64_t ldc;
    int c_f32;
    int ab_f32;
    void *D;
    int batch;             /* > 1: a strided batch of products (matmul_*_shared) */
    int64_t sa, sb, sc;    /* elements from one product's A, B, C (and D) to the next */
} lt_args;

static lt_args lt_product(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const bf16 *A, int64_t lda, const bf16 *B, int64_t ldb, float beta,
                          void *C, int64_t ldc, int c_f32)
{
    return lt_args{ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, c_f32, 0, NULL, 1,
                   0, 0, 0};
}

/* What the epilogue adds to the product (the cache key's epilogue kind: keep the values) */
typedef enum {
    EPI_NONE = 0,   /* C as the product says */
    EPI_BIAS = 1,   /* + bias (m) broadcast over columns */
    EPI_GELU = 2,   /* v = product (+ bias); aux = v rounded, C = gelu(v) */
    EPI_DGELU = 3,  /* C = product · gelu'(aux) */
    EPI_BGRADB = 4, /* C as the product, and bgrad (n) = the sums of op(B) over k */
} lt_epi_kind;

typedef struct {
    lt_epi_kind kind;
    const bf16 *bias;  /* BIAS; GELU: (m) or NULL */
    bf16 *aux;         /* GELU: (m, n) written; DGELU: (m, n) read; leading dim aux_ld */
    int64_t aux_ld;
    float *bgrad;      /* BGRADB: (n) fp32, written */
    int64_t vec_step;  /* a batch: elements from one product's bias or bias gradient to
                        * the next */
} lt_epi;

static lt_epi lt_epilogue(lt_epi_kind kind, const bf16 *bias, bf16 *aux, int64_t aux_ld,
                          float *bgrad)
{
    return lt_epi{kind, bias, aux, aux_ld, bgrad, 0};
}

typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
} lt_problem;

static void lt_release(lt_problem *p)
{
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        cublasLtMatrixLayoutDestroy(p->lc);
    if (p->desc)
        cublasLtMatmulDescDestroy(p->desc);
}

const pt_kcuda_algo *pt_kcuda_lt_algo(pt_kernels *kn, const uint64_t key[7],
                                      cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                      cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                      const void *A, const void *B, const void *C,
                                      const void *D)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    /* open addressing on an FNV-1a hash of the key: a lookup costs a probe or two */
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 7; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    unsigned slot = (unsigned)(h % PT_KCUDA_ALGO_CACHE);
    for (int n = 0; n < PT_KCUDA_ALGO_CACHE; n++, slot = (slot + 1) % PT_KCUDA_ALGO_CACHE) {
        pt_kcuda_algo *e = &ctx->algos[slot];
        if (!e->used)
            break;
        if (!memcmp(e->key, key, sizeof e->key))
            return e;
    }
    pt_kcuda_algo entry;
    memset(&entry, 0, sizeof entry);
    memcpy(entry.key, key, sizeof entry.key);
    cublasLtMatmulPreference_t pref = NULL;
    if (PT_LT(kn, cublasLtMatmulPreferenceCreate(&pref)))
        return NULL;
    uint64_t ws = ctx->lt_ws_bytes;
    uint32_t al_a = (uint32_t)align_of(A), al_b = (uint32_t)align_of(B);
    uint32_t al_c = (uint32_t)align_of(C), al_d = (uint32_t)align_of(D);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                         &al_a, sizeof al_a);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                         &al_b, sizeof al_b);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                         &al_c, sizeof al_c);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                         &al_d, sizeof al_d);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, la, lb, lc, lc, pref, 1,
                                                       &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    entry.ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS;
    if (entry.ok)
        entry.algo = res.algo;
    entry.used = 1;
    /* slot: the first free one of the probe, or, with the table full (an unusual
     * number of shapes), the home slot, whose old entry is forgotten */
    ctx->algos[slot] = entry;
    return &ctx->algos[slot];
}

/* The epilogue's attributes on the descriptor; false when cuBLASLt refuses one (an
 * older library), which declines the epilogue rather than failing the backend. The aux
 * matrix's type is left at its default, D's type (bf16 here), as the header documents. */
static bool lt_set_epilogue(cublasLtMatmulDesc_t desc, const lt_epi *e)
{
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    const void *vec = NULL; /* the bias or bias-gradient pointer */
    cudaDataType vec_type = CUDA_R_16BF;
    switch (e->kind) {
    case EPI_NONE:
        return true;
    case EPI_BIAS:
        epi = CUBLASLT_EPILOGUE_BIAS;
        vec = e->bias;
        break;
    case EPI_GELU:
        epi = e->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        vec = e->bias;
        break;
    case EPI_DGELU:
        epi = CUBLASLT_EPILOGUE_DGELU;
        break;
    case EPI_BGRADB:
        /* the bias gradient has the output's type (the header), fp32 here */
        epi = CUBLASLT_EPILOGUE_BGRADB;
        vec = e->bgrad;
        vec_type = CUDA_R_32F;
        break;
    }
    bool ok = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                             sizeof epi) == CUBLAS_STATUS_SUCCESS;
    if (ok && vec)
        ok = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vec,
                                            sizeof vec) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                            &vec_type, sizeof vec_type) == CUBLAS_STATUS_SUCCESS;
    if (ok && (e->kind == EPI_GELU || e->kind == EPI_DGELU)) {
        const void *aux = e->aux;
        int64_t ld = e->aux_ld;
        ok = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                            sizeof aux) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                            sizeof ld) == CUBLAS_STATUS_SUCCESS;
    }
    return ok;
}

/* Runs g with epilogue e through cuBLASLt. 0 when it ran (or failed, the error
 * recorded); 1 when declined: cuBLASLt is off or has no algorithm, k = 0 (cuBLASLt
 * rejects it), or the epilogue's vectors break its rules (aux's leading dimension a
 * multiple of 8 and at least m, cublasLt.h; aux, bias and bias gradient 16-byte
 * aligned, what its vector loads need). The caller then does the work another way. */
static int lt_run(pt_kernels *kn, const lt_args *g, const lt_epi *e)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (ctx->no_lt || g->k <= 0)
        return 1;
    /* a batch's operands and vectors by the alignment all of its products share */
    bool batched = g->batch > 1;
    size_t ab = g->ab_f32 ? 4 : 2, cb = g->c_f32 ? 4 : 2;
    const void *A = stepped(g->A, g->sa, ab), *B = stepped(g->B, g->sb, ab);
    const void *C = stepped(g->C, g->sc, cb), *D = stepped(g->D, g->sc, cb);
    const void *bias = stepped(e->bias, e->vec_step, 2);
    const void *bgrad = stepped(e->bgrad, e->vec_step, 4);
    if ((bias && align_of(bias) < 16) || (bgrad && align_of(bgrad) < 16))
        return 1;
    if (batched && (e->kind == EPI_GELU || e->kind == EPI_DGELU))
        return 1; /* no aux batch stride here */
    if ((e->kind == EPI_GELU || e->kind == EPI_DGELU) &&
        (e->aux_ld % 8 != 0 || e->aux_ld < g->m || align_of(e->aux) < 16))
        return 1;
    lt_problem p;
    memset(&p, 0, sizeof p);
    cudaDataType ct = g->c_f32 ? CUDA_R_32F : CUDA_R_16BF;
    cudaDataType abt = g->ab_f32 ? CUDA_R_32F : CUDA_R_16BF;
    cublasOperation_t opa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ok = !PT_LT(kn, cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
             !PT_LT(kn, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
                                                       sizeof opa)) &&
             !PT_LT(kn, cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
                                                       sizeof opb)) &&
             !PT_LT(kn, cublasLtMatrixLayoutCreate(&p.la, abt, g->ta ? g->k : g->m,
                                                   g->ta ? g->m : g->k, g->lda)) &&
             !PT_LT(kn, cublasLtMatrixLayoutCreate(&p.lb, abt, g->tb ? g->n : g->k,
                                                   g->tb ? g->k : g->n, g->ldb)) &&
             !PT_LT(kn, cublasLtMatrixLayoutCreate(&p.lc, ct, g->m, g->n, g->ldc));
    if (ok && batched) {
        /* cublasLt.h: BATCH_COUNT (int32) and STRIDED_BATCH_OFFSET (int64, elements) on
         * each matrix; C's layout is D's too */
        int32_t count = g->batch;
        const cublasLtMatrixLayout_t ls[3] = {p.la, p.lb, p.lc};
        const int64_t steps[3] = {g->sa, g->sb, g->sc};
        for (int i = 0; ok && i < 3; i++)
            ok = !PT_LT(kn, cublasLtMatrixLayoutSetAttribute(
                                ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count)) &&
                 !PT_LT(kn, cublasLtMatrixLayoutSetAttribute(
                                ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &steps[i],
                                sizeof steps[i]));
    }
    if (!ok) {
        lt_release(&p);
        return 0; /* the error is recorded */
    }
    if (!lt_set_epilogue(p.desc, e) ||
        (batched && (e->bias || e->bgrad) &&
         cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                        &e->vec_step, sizeof e->vec_step) !=
             CUBLAS_STATUS_SUCCESS)) {
        lt_release(&p);
        return 1;
    }
    /* key[4]: ldc and aux's leading dimension; key[5]: transposes, output type, epilogue
     * kind, then 4-bit alignment codes of A, B, C, the bias or bias gradient, aux and D
     * (align_code's 0 for a NULL D: the result goes to C); key[6]: the batch count and
     * which of A, B and C step (a zero step broadcasts) */
    const void *vec = e->kind == EPI_BGRADB ? bgrad : bias;
    uint64_t key[7] = {(uint64_t)g->m, (uint64_t)g->n, (uint64_t)g->k,
                       (uint64_t)g->lda << 32 ^ (uint64_t)g->ldb,
                       (uint64_t)g->ldc | (uint64_t)e->aux_ld << 32,
                       (uint64_t)g->ta | (uint64_t)g->tb << 1 | (uint64_t)g->c_f32 << 2 |
                           (uint64_t)e->kind << 3 | (uint64_t)g->ab_f32 << 7 |
                           align_code(A) << 8 |
                           align_code(B) << 12 | align_code(C) << 16 |
                           align_code(vec) << 20 | align_code(e->aux) << 24 |
                           align_code(D) << 28,
                       (uint64_t)g->batch | (uint64_t)(g->sa != 0) << 32 |
                           (uint64_t)(g->sb != 0) << 33 | (uint64_t)(g->sc != 0) << 34};
    const pt_kcuda_algo *algo = pt_kcuda_lt_algo(kn, key, p.desc, p.la, p.lb, p.lc, A, B, C,
                                                 D ? D : C);
    if (!algo || !algo->ok) {
        lt_release(&p);
        return algo ? 1 : 0;
    }
    /* each stream its own workspace: GEMMs of the two streams may run at once */
    void *ws = ctx->side && ctx->stream == ctx->side ? ctx->lt_ws_side : ctx->lt_ws;
    PT_LT(kn, cublasLtMatmul(ctx->lt, p.desc, &g->alpha, g->A, p.la, g->B, p.lb, &g->beta, g->C,
                             p.lc, g->D ? g->D : g->C, p.lc, &algo->algo, ws, ctx->lt_ws_bytes,
                             ctx->stream));
    lt_release(&p);
    return 0;
}

/* the fallback kernel for g (+ bias (m) broadcast over columns) */
static void fallback_gemm(pt_kernels *kn, const lt_args *g, const bf16 *bias)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    int64_t m = g->m, n = g->n, k = g->k > 0 ? g->k : 0;
    if (m > INT32_MAX || n > INT32_MAX || (n + FB_TILE - 1) / FB_TILE > 65535) {
        pt_kcuda_fail(kn, __FILE__, __LINE__,
                      "gemm %lld x %lld x %lld: no cuBLASLt algorithm and too large for the "
                      "fallback kernel", (long long)m, (long long)n, (long long)k);
        return;
    }
    /* an empty sum (k = 0): C = beta · C (+ bias) still holds, no operand is read */
    const bf16 *A = k > 0 ? g->A : NULL, *B = k > 0 ? g->B : NULL;
    dim3 grid((unsigned)((m + FB_TILE - 1) / FB_TILE), (unsigned)((n + FB_TILE - 1) / FB_TILE));
    dim3 block(FB_TILE, FB_TILE);
    if (g->ab_f32)
        PT_LAUNCH(grid, block, 0, ctx->stream, gemm_fallback_kernel<float, float>)(g->ta, g->tb,
            (int)m, (int)n, (int)k, g->alpha, (const float *)(const void *)A, g->lda,
            (const float *)(const void *)B, g->ldb, g->beta, (float *)g->C, g->ldc, bias);
    else if (g->c_f32)
        PT_LAUNCH(grid, block, 0, ctx->stream, gemm_fallback_kernel<bf16, float>)(g->ta, g->tb,
            (int)m, (int)n, (int)k, g->alpha, A, g->lda, B, g->ldb, g->beta, (float *)g->C,
            g->ldc, bias);
    else
        PT_LAUNCH(grid, block, 0, ctx->stream, gemm_fallback_kernel<bf16, bf16>)(g->ta, g->tb,
            (int)m, (int)n, (int)k, g->alpha, A, g->lda, B, g->ldb, g->beta, (bf16 *)g->C,
            g->ldc, bias);
    PT_LAUNCHED(kn, "gemm_fallback");
}

/* g (+ bias (m) broadcast over columns, bf16 C only): cuBLASLt, or the fallback kernel
 * where it declines. Never fails for want of an algorithm. */
static void lt_gemm(pt_kernels *kn, const lt_args *g, const bf16 *bias)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (g->m <= 0 || g->n <= 0)
        return;
    if (bias && !ctx->no_lt && g->k > 0 && align_of(bias) < 16) {
        /* cuBLASLt's bias epilogue wants an aligned vector: add the bias afterwards */
        lt_gemm(kn, g, NULL);
        if (!g->c_f32) {
            PT_LAUNCH(pt_kcuda_blocks(g->m * g->n, PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0,
                      ctx->stream, add_bias_kernel)((bf16 *)g->C, bias, g->m, g->n, g->ldc);
            PT_LAUNCHED(kn, "add_bias");
        }
        return;
    }
    lt_epi e = lt_epilogue(bias ? EPI_BIAS : EPI_NONE, bias, NULL, 0, NULL);
    if (lt_run(kn, g, &e))
        fallback_gemm(kn, g, bias);
}

/* whether to ask cuBLASLt for a fused epilogue for g at all */
static bool lt_fuse(pt_kernels *kn, const lt_args *g)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    return ctx->epilogues && !ctx->no_lt && g->m > 0 && g->n > 0 && g->k > 0;
}

/* ---- dbias: column sums of dout, first pass (second pass in backend.cu) ---------------- */

/* block (32 columns, 8 row lanes); grid (column tiles, chunks). Lane ty sums rows
 * ty, ty+8, ... of its chunk in order; lanes are then summed in order. */
__global__ void colsum_partial_kernel(float *partials, const bf16 *src, int64_t n, int cols,
                                      int64_t chunk_rows)
{
    __shared__ float part[8][33];
    int tx = threadIdx.x, ty = threadIdx.y;
    int c = blockIdx.x * 32 + tx;
    int64_t r0 = (int64_t)blockIdx.y * chunk_rows;
    int64_t r1 = r0 + chunk_rows < n ? r0 + chunk_rows : n;
    float s = 0.0f;
    if (c < cols)
        for (int64_t r = r0 + ty; r < r1; r += 8)
            s += __bfloat162float(src[r * cols + c]);
    float t = pt_fold_slices(part, s);
    if (ty == 0 && c < cols)
        partials[(int64_t)blockIdx.y * cols + c] = t;
}

static void colsum_bf16(pt_kernels *kn, float *dst, const bf16 *src, int64_t n, int cols)
{
    int chunks = pt_kcuda_chunks(n);
    float *partials = (float *)pt_kcuda_scratch(kn, (size_t)chunks * cols * sizeof(float));
    if (!partials)
        return;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)chunks), block(32, 8);
    PT_LAUNCH(grid, block, 0, pt_kcuda_ctx(kn)->stream, colsum_partial_kernel)(partials, src, n,
        cols, pt_kcuda_chunk_rows(n));
    PT_LAUNCHED(kn, "colsum_partial");
    pt_kcuda_sum_partials(kn, dst, NULL, partials, chunks, cols);
}

/* ---- The two products of a linear layer -------------------------------------------------- */

/* The forward product, matmul_forward's and matmul_forward_gelu's: row-major
 * out (n, oc) = inp (n, ic) · w^T, as column-major out^T (oc, n) =
 * (w-view (ic, oc))^T · inp-view (ic, n), beta = 0. */
static lt_args forward_product(float *out, const float *inp, const float *w, int64_t n, int ic,
                               int oc)
{
    return lt_product(1, 0, oc, n, ic, 1.0f, (const bf16 *)w, ic, (const bf16 *)inp, ic, 0.0f,
                      out, oc, 0);
}

/* The data-gradient product, matmul_backward's dinp (beta = 1: +=) and
 * matmul_backward_dgelu's dpre (beta = 0: written): row-major
 * dinp (n, ic) = dout (n, oc) · w (oc, ic) + beta · dinp, as column-major
 * dinp^T (ic, n) = w-view (ic, oc) · dout-view (oc, n). */
static lt_args dinp_product(float *dinp, const float *dout, const float *w, int64_t n, int ic,
                            int oc, float beta)
{
    return lt_product(0, 0, ic, n, oc, 1.0f, (const bf16 *)w, ic, (const bf16 *)dout, oc, beta,
                      dinp, ic, 0);
}

/* ---- The table's entries ----------------------------------------------------------------- */

void pt_kcuda_matmul_forward(pt_kernels *kn,
                             float *out,            /* (n, oc) [act] */
                             const float *inp,      /* (n, ic) [act] */
                             const float *w,        /* (oc, ic) [act] */
                             const float *bias,     /* (oc) [act] or NULL */
                             int64_t n, int ic, int oc)
{
    lt_args g = forward_product(out, inp, w, n, ic, oc);
    lt_gemm(kn, &g, (const bf16 *)bias);
}

void pt_kcuda_matmul_backward(pt_kernels *kn,
                              float *dinp,          /* (n, ic) [act] or NULL */
                              float *dw,            /* (oc, ic) fp32 or NULL */
                              float *dbias,         /* (oc) fp32 or NULL */
                              const float *dout,    /* (n, oc) [act] */
                              const float *inp,     /* (n, ic) [act] */
                              const float *w,       /* (oc, ic) [act] */
                              int64_t n, int ic, int oc)
{
    if (dinp) { /* dinp += dout · w */
        lt_args g = dinp_product(dinp, dout, w, n, ic, oc, 1.0f);
        lt_gemm(kn, &g, NULL);
    }
    if (dw) {
        /* dw (oc, ic) += dout^T (oc, n) · inp (n, ic): column-major dw^T (ic, oc) =
         * inp-view (ic, n) · (dout-view (oc, n))^T, into fp32. Its op(B) is dout (n, oc)
         * with k = n: BGRADB's sums over k are dbias, written to scratch (oc fp32, in
         * backend.cu's reserve) and added, since the contract accumulates. Only where
         * oc <= ic: for a wider dout (the up projection, oc = 4 ic) the plain GEMM and
         * the column sum after it ran faster, and where oc <= ic the two forms were
         * about even (the code notes in docs/results/). */
        lt_args g = lt_product(0, 1, ic, oc, n, 1.0f, (const bf16 *)inp, ic, (const bf16 *)dout,
                               oc, 1.0f, dw, ic, 1);
        if (dbias && oc <= ic && lt_fuse(kn, &g)) {
            float *col = (float *)pt_kcuda_scratch(kn, (size_t)oc * sizeof(float));
            if (!col)
                return;
            lt_epi e = lt_epilogue(EPI_BGRADB, NULL, NULL, 0, col);
            if (!lt_run(kn, &g, &e)) {
                pt_kcuda_add_f32(kn, dbias, col, oc);
                return;
            }
        }
        lt_gemm(kn, &g, NULL);
    }
    if (dbias)
        colsum_bf16(kn, dbias, (const bf16 *)dout, n, oc);
}

void pt_kcuda_matmul_dgrad(pt_kernels *kn,
                           float *dinp,       /* (n, ic) [act], written */
                           const float *dout, /* (n, oc) [act] */
                           const float *w,    /* (oc, ic) [act] */
                           int64_t n, int ic, int oc)
{
    /* beta = 0: dinp's old contents are never read (cuBLASLt and the fallback kernel) */
    lt_args g = dinp_product(dinp, dout, w, n, ic, oc, 0.0f);
    lt_gemm(kn, &g, NULL);
}

void pt_kcuda_matmul_forward_gelu(pt_kernels *kn,
                                  float *out,        /* (n, oc) [act]: gelu(pre) */
                                  float *pre,        /* (n, oc) [act] */
                                  const float *inp,  /* (n, ic) [act] */
                                  const float *w,    /* (oc, ic) [act] */
                                  const float *bias, /* (oc) [act] or NULL */
                                  int64_t n, int ic, int oc)
{
    /* the forward product, with pre as the aux matrix (leading dimension oc) */
    lt_args g = forward_product(out, inp, w, n, ic, oc);
    lt_epi e = lt_epilogue(EPI_GELU, (const bf16 *)bias, (bf16 *)pre, oc, NULL);
    if (lt_fuse(kn, &g) && !lt_run(kn, &g, &e))
        return;
    pt_kcuda_matmul_forward(kn, pre, inp, w, bias, n, ic, oc);
    pt_kcuda_gelu_forward(kn, out, pre, n * oc);
}

void pt_kcuda_matmul_forward_res(pt_kernels *kn,
                                 float *out,        /* (n, oc) [act] */
                                 const float *inp,  /* (n, ic) [act] */
                                 const float *w,    /* (oc, ic) [act] */
                                 const float *bias, /* (oc) [act] or NULL */
                                 const float *res,  /* (n, oc) [act] */
                                 int64_t n, int ic, int oc)
{
    /* the forward product with beta = 1 on res as C, into out as D (res's layout) */
    lt_args g = forward_product((float *)res, inp, w, n, ic, oc);
    g.beta = 1.0f;
    g.D = out;
    lt_epi e = lt_epilogue(bias ? EPI_BIAS : EPI_NONE, (const bf16 *)bias, NULL, 0, NULL);
    if (lt_fuse(kn, &g) && !lt_run(kn, &g, &e))
        return;
    pt_kcuda_matmul_forward(kn, out, inp, w, bias, n, ic, oc);
    pt_kcuda_residual_forward(kn, out, out, res, n * oc);
}

void pt_kcuda_matmul_backward_dgelu(pt_kernels *kn,
                                    float *dpre,       /* (n, ic) [act], written */
                                    const float *dout, /* (n, oc) [act] */
                                    const float *w,    /* (oc, ic) [act] */
                                    const float *pre,  /* (n, ic) [act] */
                                    int64_t n, int ic, int oc)
{
    /* the data-gradient product with beta = 0 (dpre is written, its old contents never
     * read), pre as the aux matrix (leading dimension ic) */
    lt_args g = dinp_product(dpre, dout, w, n, ic, oc, 0.0f);
    lt_epi e = lt_epilogue(EPI_DGELU, NULL, (bf16 *)pre, ic, NULL);
    if (lt_fuse(kn, &g) && !lt_run(kn, &g, &e))
        return;
    lt_gemm(kn, &g, NULL);
    pt_kcuda_dgelu_inplace(kn, (bf16 *)dpre, (const bf16 *)pre, n * ic);
}

/* ---- Linear layers of one input: a strided batch ------------------------------------------ */

/* The step in elements of `bytes` from each of count pointers to the next when they lie
 * at one positive step (count >= 2), else -1: such arrays become one batched operand. */
static int64_t equal_step(const void *const p[], int count, size_t bytes)
{
    if (count < 2 || !p[0] || !p[1])
        return -1;
    intptr_t step = (const char *)p[1] - (const char *)p[0];
    if (step <= 0 || step % (intptr_t)bytes)
        return -1;
    for (int i = 2; i < count; i++)
        if (!p[i] || (const char *)p[i] - (const char *)p[i - 1] != step)
            return -1;
    return (int64_t)(step / (intptr_t)bytes);
}

/* Whether a vector array (biases or bias gradients) is NULL or holds only NULLs. */
static bool no_vectors(const void *const v[], int count)
{
    for (int i = 0; v && i < count; i++)
        if (v[i])
            return false;
    return true;
}

void pt_kcuda_matmul_forward_shared(pt_kernels *kn, int count,
                                    float *const out[],        /* (n, oc) [act] each */
                                    const float *inp,          /* (n, ic) [act] */
                                    const float *const w[],    /* (oc, ic) [act] each */
                                    const float *const bias[], /* (oc) [act] each, or NULL */
                                    int64_t n, int ic, int oc)
{
    /* the forward product of each, batched: A the weights (stepped), B the input (step
     * 0), C the outputs (stepped), the biases stepped too */
    bool unbiased = no_vectors((const void *const *)bias, count);
    int64_t so = equal_step((const void *const *)out, count, 2);
    int64_t sw = equal_step((const void *const *)w, count, 2);
    int64_t sv = unbiased ? 0 : equal_step((const void *const *)bias, count, 2);
    lt_args g = forward_product(out[0], inp, w[0], n, ic, oc);
    g.batch = count;
    g.sa = sw;
    g.sc = so;
    lt_epi e = lt_epilogue(unbiased ? EPI_NONE : EPI_BIAS, unbiased ? NULL : (const bf16 *)bias[0],
                           NULL, 0, NULL);
    e.vec_step = sv;
    if (so > 0 && sw > 0 && sv >= 0 && lt_fuse(kn, &g) && !lt_run(kn, &g, &e))
        return;
    for (int i = 0; i < count; i++)
        pt_kcuda_matmul_forward(kn, out[i], inp, w[i], unbiased ? NULL : bias[i], n, ic, oc);
}

void pt_kcuda_matmul_wgrad_shared(pt_kernels *kn, int count,
                                  float *const dw[],         /* (oc, ic) fp32 each */
                                  float *const dbias[],      /* (oc) fp32 each, or NULL */
                                  const float *const dout[], /* (n, oc) [act] each */
                                  const float *inp,          /* (n, ic) [act] */
                                  int64_t n, int ic, int oc)
{
    /* matmul_backward's weight-gradient product of each, batched: A the input (step 0),
     * B the output gradients (stepped), C the fp32 weight gradients (stepped); with
     * biases (oc <= ic, as matmul_backward) BGRADB sums each op(B) over k into its oc
     * of a count·oc scratch (the vectors' step oc), added to each dbias after */
    bool unbiased = no_vectors((const void *const *)dbias, count);
    int64_t sd = equal_step((const void *const *)dout, count, 2);
    int64_t sw = equal_step((const void *const *)dw, count, 4);
    lt_args g = lt_product(0, 1, ic, oc, n, 1.0f, (const bf16 *)inp, ic, (const bf16 *)dout[0],
                           oc, 1.0f, dw[0], ic, 1);
    g.batch = count;
    g.sb = sd;
    g.sc = sw;
    bool fuse = sd > 0 && sw > 0 && lt_fuse(kn, &g);
    if (fuse && !unbiased && oc <= ic) {
        float *col = (float *)pt_kcuda_scratch(kn, (size_t)count * oc * sizeof(float));
        if (!col)
            return;
        lt_epi e = lt_epilogue(EPI_BGRADB, NULL, NULL, 0, col);
        e.vec_step = oc;
        if (!lt_run(kn, &g, &e)) {
            for (int i = 0; i < count; i++)
                if (dbias[i])
                    pt_kcuda_add_f32(kn, dbias[i], col + (int64_t)i * oc, oc);
            return;
        }
    }
    lt_epi none = lt_epilogue(EPI_NONE, NULL, NULL, 0, NULL);
    if (fuse && !lt_run(kn, &g, &none)) {
        for (int i = 0; !unbiased && i < count; i++)
            if (dbias[i])
                colsum_bf16(kn, dbias[i], (const bf16 *)dout[i], n, oc);
        return;
    }
    for (int i = 0; i < count; i++)
        pt_kcuda_matmul_backward(kn, NULL, dw[i], unbiased ? NULL : dbias[i], dout[i], inp, NULL,
                                 n, ic, oc);
}

void pt_kcuda_gemm(pt_kernels *kn, int trans_a, int trans_b, int m, int n, int kk,
                   float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc)
{
    /* row-major c (m, n) = op(a) · op(b): column-major c^T (n, m) = op(b)^T · op(a)^T,
     * each operand's column-major view carrying its own transpose flag */
    lt_args g = lt_product(trans_b, trans_a, n, m, kk, alpha, (const bf16 *)b, ldb,
                           (const bf16 *)a, lda, beta, c, ldc, 0);
    lt_gemm(kn, &g, NULL);
}

void pt_kcuda_gemm_f32(pt_kernels *kn, int trans_a, int trans_b, int m, int n, int kk,
                       float alpha, const float *a, int lda, const float *b, int ldb,
                       float beta, float *c, int ldc)
{
    /* as pt_kcuda_gemm, on fp32 operands (CUBLAS_COMPUTE_32F: fp32 products, no TF32) */
    lt_args g = lt_product(trans_b, trans_a, n, m, kk, alpha, (const bf16 *)(const void *)b,
                           ldb, (const bf16 *)(const void *)a, lda, beta, c, ldc, 1);
    g.ab_f32 = 1;
    lt_gemm(kn, &g, NULL);
}
