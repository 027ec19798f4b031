/*
 * The cuBLASLt stand-in of the CUDA emulator (cublasLt.h states what it covers): the
 * descriptor objects, argument checks with the statuses the cuBLAS documentation lists
 * (NOT_INITIALIZED for a missing handle, INVALID_VALUE for missing pointers, sizes in
 * conflict, a leading dimension below the rows, an aux leading dimension that is no
 * multiple of 8, a wrong attribute size, scale pointers without FP8 operands;
 * NOT_SUPPORTED for types, orders and epilogues outside the stand-in, and the FP8
 * combinations the real library refuses), and a column-major GEMM on the CPU with the
 * epilogues (bias, GELU with its aux output, the GELU gradient, the bias gradient of B)
 * and FP8 operands with their scales. The
 * product of each element of D is summed in fp32 in order of k, so results do not depend
 * on blocking; rows are blocked by 64 only so that the inner loop vectorises.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda_bf16.h"
#include "cuda_fp8.h"
#include "cublasLt.h"
#include "emu_internal.h"

struct cublasLtContext {
    uint64_t magic;
};

struct cublasLtMatmulDescOpaque {
    int32_t compute, scale, pointer_mode, transa, transb;
    uint32_t epilogue;
    const void *bias; /* the bias, or the bias gradient BGRADB writes */
    int32_t bias_type;
    int64_t bias_stride; /* elements from one batch's bias to the next */
    void *aux;        /* GELU_AUX*: written; DGELU: read */
    int64_t aux_ld;
    int32_t aux_type;
    const void *scale_a, *scale_b; /* FP8: device fp32 scales of A and B, or NULL */
};

struct cublasLtMatrixLayoutOpaque {
    uint32_t type;
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride; /* elements between batches */
};

struct cublasLtMatmulPreferenceOpaque {
    uint32_t search;
    uint64_t max_workspace;
    uint32_t align[4]; /* A, B, C, D */
};

namespace {

constexpr uint64_t HANDLE_MAGIC = 0x70745f656d756c74ull; /* "pt_emult" */
constexpr uint64_t ALGO_MAGIC = 0x70745f656d75616cull;   /* "pt_emual" */
constexpr uint32_t DEFAULT_ALIGN = 256;                  /* cuBLAS docs: the default */
constexpr uint32_t ALGO_MAX_ALIGN = 16;
constexpr int ROWS = 64; /* rows of A per block of the product */

/* An object's Create: a new object holding init (NULL out: INVALID_VALUE). */
template <typename T> cublasStatus_t create(T **out, const T &init)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    *out = new T(init);
    return CUBLAS_STATUS_SUCCESS;
}

/* Where an attribute lives in its object, and its size: the attribute's type in
 * cublasLt.h. at is NULL for an attribute the object lacks. */
struct field {
    void *at;
    size_t bytes;
};

template <typename T> field field_of(T &member) { return field{&member, sizeof member}; }

/* SetAttribute's rule: a known attribute and a buffer of exactly its size. */
cublasStatus_t set_field(field f, const void *buf, size_t bytes)
{
    if (!f.at || !buf || bytes != f.bytes)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(f.at, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
}

/* the attribute tables of the three descriptor objects, for Set and Get alike */
field desc_field(cublasLtMatmulDescOpaque *d, cublasLtMatmulDescAttributes_t attr)
{
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return field_of(d->compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return field_of(d->scale);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return field_of(d->pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA: return field_of(d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return field_of(d->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return field_of(d->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field_of(d->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field_of(d->bias_type);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return field_of(d->bias_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return field_of(d->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return field_of(d->aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return field_of(d->aux_type);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return field_of(d->scale_a);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return field_of(d->scale_b);
    }
    return field{NULL, 0};
}

field layout_field(cublasLtMatrixLayoutOpaque *l, cublasLtMatrixLayoutAttribute_t attr)
{
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return field_of(l->type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return field_of(l->order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return field_of(l->rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return field_of(l->cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return field_of(l->ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return field_of(l->batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return field_of(l->stride);
    }
    return field{NULL, 0};
}

field pref_field(cublasLtMatmulPreferenceOpaque *p, cublasLtMatmulPreferenceAttributes_t attr)
{
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return field_of(p->search);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return field_of(p->max_workspace);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return field_of(p->align[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return field_of(p->align[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return field_of(p->align[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return field_of(p->align[3]);
    }
    return field{NULL, 0};
}

bool fp8_type(uint32_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

size_t type_bytes(uint32_t t) { return fp8_type(t) ? 1 : t == CUDA_R_16BF ? 2 : 4; }

float load(uint32_t type, const void *p, int64_t i)
{
    if (type == CUDA_R_16BF)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (fp8_type(type))
        return pt_emu::fp8_bits_to_float(((const uint8_t *)p)[i], type == CUDA_R_8F_E5M2);
    return ((const float *)p)[i];
}

void store(uint32_t type, void *p, int64_t i, float v)
{
    if (type == CUDA_R_16BF)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    else
        ((float *)p)[i] = v;
}

bool op_valid(int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

struct problem {
    int64_t m, n, k;
    int batch;
    bool ta, tb; /* CUBLAS_OP_C is CUBLAS_OP_T for real types */
    uint32_t bias_type, aux_type;
};

/* what an epilogue reads or writes besides D */
bool epi_bias(uint32_t e)
{
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool epi_gelu(uint32_t e)
{
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool epi_aux(uint32_t e) { return epi_gelu(e) || e == CUBLASLT_EPILOGUE_DGELU; }
/* the epilogues of the stand-in */
bool epi_known(uint32_t e)
{
    return e == CUBLASLT_EPILOGUE_DEFAULT || epi_bias(e) || epi_aux(e) ||
           e == CUBLASLT_EPILOGUE_BGRADB;
}

bool vector_type(uint32_t t) { return t == CUDA_R_16BF || t == CUDA_R_32F; }

/* GELU, tanh approximation, and its derivative (kernels/cuda/pointwise.cu's formula) */
constexpr float GELU_SCALE = 0.7978845608028654f; /* sqrt(2/pi) */
constexpr float GELU_CUBE = 0.044715f;

float gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + GELU_CUBE * x * x * x)));
}

float gelu_grad(float x)
{
    const float th = tanhf(GELU_SCALE * (x + GELU_CUBE * x * x * x));
    const float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

/* the alignment of an address, capped at 256 (NULL counts as 256) */
uint32_t address_align(const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    uint32_t al = 1;
    while (al < DEFAULT_ALIGN && a % (2 * al) == 0)
        al *= 2;
    return al;
}

/* The FP8 matmul's rules (cublasLt.h's header comment lists them with their source):
 * both operands FP8, not both E5M2, the TN format, DEFAULT or BIAS with a bf16 bias. */
cublasStatus_t check_fp8(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                         cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t d)
{
    if (!fp8_type(a->type) || !fp8_type(b->type) ||
        (a->type == CUDA_R_8F_E5M2 && b->type == CUDA_R_8F_E5M2))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (desc->transa != CUBLAS_OP_T || desc->transb != CUBLAS_OP_N)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT && desc->epilogue != CUBLASLT_EPILOGUE_BIAS)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const int32_t bias = desc->bias_type < 0 ? (int32_t)d->type : desc->bias_type;
    if (desc->epilogue == CUBLASLT_EPILOGUE_BIAS && bias != CUDA_R_16BF)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, problem *p)
{
    if (!handle || handle->magic != HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !a || !b || !c || !d)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!op_valid(desc->transa) || !op_valid(desc->transb))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (desc->compute != CUBLAS_COMPUTE_32F || desc->scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!epi_known(desc->epilogue))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const cublasLtMatrixLayout_t all[4] = {a, b, c, d};
    for (cublasLtMatrixLayout_t l : all)
        if (l->order != CUBLASLT_ORDER_COL)
            return CUBLAS_STATUS_NOT_SUPPORTED;
    const bool fp8 = fp8_type(a->type) || fp8_type(b->type);
    if (fp8) {
        cublasStatus_t st = check_fp8(desc, a, b, d);
        if (st != CUBLAS_STATUS_SUCCESS)
            return st;
    } else if (a->type != b->type || (a->type != CUDA_R_16BF && a->type != CUDA_R_32F) ||
               (a->type == CUDA_R_32F && d->type != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (c->type != d->type || (d->type != CUDA_R_16BF && d->type != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    p->ta = desc->transa != CUBLAS_OP_N;
    p->tb = desc->transb != CUBLAS_OP_N;
    p->m = (int64_t)d->rows;
    p->n = (int64_t)d->cols;
    p->k = (int64_t)(p->ta ? a->rows : a->cols);
    const uint64_t a_rows = p->ta ? a->cols : a->rows;
    const uint64_t b_rows = p->tb ? b->cols : b->rows, b_cols = p->tb ? b->rows : b->cols;
    if (a_rows != d->rows || b_rows != (uint64_t)p->k || b_cols != d->cols ||
        c->rows != d->rows || c->cols != d->cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (p->m < 1 || p->n < 1 || p->k < 1 || (uint64_t)p->m >> 31 || (uint64_t)p->n >> 31 ||
        (uint64_t)p->k >> 31)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (cublasLtMatrixLayout_t l : all)
        if (l->ld < 1 || (uint64_t)l->ld < l->rows || l->batch < 1 || l->batch != d->batch)
            return CUBLAS_STATUS_INVALID_VALUE;
    p->batch = d->batch;
    p->bias_type = desc->bias_type < 0 ? d->type : (uint32_t)desc->bias_type;
    p->aux_type = desc->aux_type < 0 ? d->type : (uint32_t)desc->aux_type;
    const uint32_t epi = desc->epilogue;
    if ((epi_bias(epi) || epi == CUBLASLT_EPILOGUE_BGRADB) && !vector_type(p->bias_type))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (epi_aux(epi) && !vector_type(p->aux_type))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* no AUX_BATCH_STRIDE here (the bias and bias gradient step by BIAS_BATCH_STRIDE) */
    if (epi_aux(epi) && p->batch > 1)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* the header: the GELU input's leading dimension "must be divisible by 8 and be no
     * less than the number of rows in the output matrix" */
    if (epi_aux(epi) && (desc->aux_ld % 8 != 0 || desc->aux_ld < (int64_t)d->rows))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

/* the alignment the algorithm found under preference bytes needs, at least an element */
uint32_t needed_align(uint32_t pref, uint32_t type)
{
    uint32_t a = pref < ALGO_MAX_ALIGN ? pref : ALGO_MAX_ALIGN;
    return a < type_bytes(type) ? (uint32_t)type_bytes(type) : a;
}

/* One batch: D = alpha · (scale_ab · op(A) · op(B)) + beta · C and the epilogue,
 * column-major; scale_ab is FP8's scale_A · scale_B, 1 otherwise (an exact product). */
void gemm(const problem &p, const cublasLtMatmulDescOpaque *desc, float scale_ab,
          const void *vec, float alpha, float beta, const char *A, const cublasLtMatrixLayoutOpaque *la,
          const char *B,
          const cublasLtMatrixLayoutOpaque *lb, const char *C,
          const cublasLtMatrixLayoutOpaque *lc, char *D, const cublasLtMatrixLayoutOpaque *ld)
{
    const uint32_t epi = desc->epilogue;
    const bool bias = epi_bias(epi), gelu_aux = epi_gelu(epi);
    const bool dgelu = epi == CUBLASLT_EPILOGUE_DGELU, bgradb = epi == CUBLASLT_EPILOGUE_BGRADB;
    std::vector<float> ablk((size_t)p.k * ROWS), bcol((size_t)p.k);
    float acc[ROWS];
    for (int64_t i0 = 0; i0 < p.m; i0 += ROWS) {
        const int rows = (int)(p.m - i0 < ROWS ? p.m - i0 : ROWS);
        /* op(A)(i0 + r, kk) at ablk[kk · ROWS + r], zeros past the last row */
        for (int64_t kk = 0; kk < p.k; kk++)
            for (int r = 0; r < ROWS; r++)
                ablk[(size_t)kk * ROWS + r] =
                    r >= rows ? 0.0f
                    : p.ta    ? load(la->type, A, (i0 + r) * la->ld + kk)
                              : load(la->type, A, kk * la->ld + i0 + r);
        for (int64_t j = 0; j < p.n; j++) {
            for (int64_t kk = 0; kk < p.k; kk++)
                bcol[(size_t)kk] = p.tb ? load(lb->type, B, kk * lb->ld + j)
                                        : load(lb->type, B, j * lb->ld + kk);
            if (bgradb && i0 == 0) { /* column j of op(B) summed over k, once */
                float s = 0.0f;
                for (int64_t kk = 0; kk < p.k; kk++)
                    s += bcol[(size_t)kk];
                store(p.bias_type, (void *)vec, j, s);
            }
            for (int r = 0; r < ROWS; r++)
                acc[r] = 0.0f;
            for (int64_t kk = 0; kk < p.k; kk++) {
                const float bv = bcol[(size_t)kk], *a = &ablk[(size_t)kk * ROWS];
                for (int r = 0; r < ROWS; r++)
                    acc[r] += a[r] * bv;
            }
            for (int r = 0; r < rows; r++) {
                const int64_t i = i0 + r;
                float v = alpha * (scale_ab * acc[r]);
                if (beta != 0.0f) /* beta = 0: C is not read (it may hold NaN) */
                    v += beta * load(lc->type, C, j * lc->ld + i);
                if (bias)
                    v += load(p.bias_type, vec, i);
                if (gelu_aux) { /* aux holds the GELU's input, D its output from fp32 */
                    store(p.aux_type, desc->aux, j * desc->aux_ld + i, v);
                    v = gelu(v);
                }
                if (dgelu)
                    v *= gelu_grad(load(p.aux_type, desc->aux, j * desc->aux_ld + i));
                store(ld->type, D, j * ld->ld + i, v);
            }
        }
    }
}

} // namespace

/* ---- Handles and descriptors -------------------------------------------------------------------- */

size_t cublasLtGetVersion(void) { return 0; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle)
{
    return create(handle, cublasLtContext{HANDLE_MAGIC});
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle)
{
    if (!handle || handle->magic != HANDLE_MAGIC)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale)
{
    return create(desc, cublasLtMatmulDescOpaque{(int32_t)compute,   (int32_t)scale,
                                                 CUBLASLT_POINTER_MODE_HOST,
                                                 CUBLAS_OP_N,        CUBLAS_OP_N,
                                                 CUBLASLT_EPILOGUE_DEFAULT,
                                                 NULL,               -1,
                                                 0,                  NULL,
                                                 0,                  -1,
                                                 NULL,               NULL});
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes)
{
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == CUBLASLT_MATMUL_DESC_POINTER_MODE) { /* one of the two modes, else unchanged */
        int32_t mode;
        if (set_field(field_of(mode), buf, bytes) != CUBLAS_STATUS_SUCCESS ||
            (mode != CUBLASLT_POINTER_MODE_HOST && mode != CUBLASLT_POINTER_MODE_DEVICE))
            return CUBLAS_STATUS_INVALID_VALUE;
    }
    return set_field(desc_field(desc, attr), buf, bytes);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, void *buf,
                                              size_t bytes, size_t *written)
{
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    const field f = desc_field(desc, attr);
    if (!f.at)
        return CUBLAS_STATUS_INVALID_VALUE;
    /* documented: bytes = 0 asks for the size only */
    if (bytes == 0 && written) {
        *written = f.bytes;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || bytes < f.bytes)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, f.at, f.bytes);
    if (written)
        *written = f.bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld)
{
    return create(layout, cublasLtMatrixLayoutOpaque{(uint32_t)type, CUBLASLT_ORDER_COL, rows,
                                                     cols, ld, 1, 0});
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t bytes)
{
    if (!layout)
        return CUBLAS_STATUS_INVALID_VALUE;
    return set_field(layout_field(layout, attr), buf, bytes);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    return create(pref, cublasLtMatmulPreferenceOpaque{
                            0, 0, {DEFAULT_ALIGN, DEFAULT_ALIGN, DEFAULT_ALIGN, DEFAULT_ALIGN}});
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t bytes)
{
    if (!pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    return set_field(pref_field(pref, attr), buf, bytes);
}

/* ---- Heuristic and product ----------------------------------------------------------------------- */

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle,
                                              cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a_desc,
                                              cublasLtMatrixLayout_t b_desc,
                                              cublasLtMatrixLayout_t c_desc,
                                              cublasLtMatrixLayout_t d_desc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned)
{
    if (returned)
        *returned = 0;
    problem p;
    cublasStatus_t st = check(handle, desc, a_desc, b_desc, c_desc, d_desc, &p);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (!pref || requested < 1 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    const uint32_t types[4] = {a_desc->type, b_desc->type, c_desc->type, d_desc->type};
    const cublasLtMatrixLayoutOpaque *ls[4] = {a_desc, b_desc, c_desc, d_desc};
    /* FP8: "pointers and matrix dimension must support 16-byte alignment" */
    if (fp8_type(a_desc->type))
        for (int i = 0; i < 4; i++)
            if (pref->align[i] < 16 || (ls[i]->ld * type_bytes(types[i])) % 16)
                return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = ALGO_MAGIC;
    /* an algorithm for every product of a batch: no more alignment than the step between
     * them keeps (a step of 0 keeps any) */
    for (int i = 0; i < 4; i++) {
        uint32_t step =
            address_align((const void *)(uintptr_t)(ls[i]->stride * type_bytes(types[i])));
        results[0].algo.data[1 + i] =
            needed_align(pref->align[i] < step ? pref->align[i] : step, types[i]);
    }
    /* the bias and aux vectors: the alignment of the values set now (and of the bias's
     * batch step) */
    uint32_t vec = address_align(desc->bias), vstep = address_align(
        (const void *)(uintptr_t)(desc->bias_stride * type_bytes(p.bias_type)));
    results[0].algo.data[5] = needed_align(vec < vstep ? vec : vstep, p.bias_type);
    results[0].algo.data[6] = needed_align(address_align(desc->aux), p.aux_type);
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* cublasLtMatmul calls that ran, for tests that check which path an op took */
static uint64_t matmuls_run;

extern "C" uint64_t pt_emu_lt_matmuls(void) { return matmuls_run; }

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t a_desc,
                              const void *B, cublasLtMatrixLayout_t b_desc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c_desc, void *D,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream)
{
    (void)workspace;
    (void)workspace_bytes; /* the algorithm needs none */
    problem p;
    cublasStatus_t st = check(handle, desc, a_desc, b_desc, c_desc, d_desc, &p);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (!alpha || !beta || !A || !B || !D)
        return CUBLAS_STATUS_INVALID_VALUE;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    if (!C && be != 0.0f)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (C == D && (c_desc->ld != d_desc->ld || c_desc->stride != d_desc->stride))
        return CUBLAS_STATUS_INVALID_VALUE; /* in place needs C's layout to be D's */
    const uint32_t epi = desc->epilogue;
    if ((epi_bias(epi) || epi == CUBLASLT_EPILOGUE_BGRADB) && !desc->bias)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (epi_aux(epi) && !desc->aux)
        return CUBLAS_STATUS_INVALID_VALUE;
    const bool fp8 = fp8_type(a_desc->type);
    if (!fp8 && (desc->scale_a || desc->scale_b))
        return CUBLAS_STATUS_INVALID_VALUE;
    const uint32_t types[6] = {a_desc->type, b_desc->type, c_desc->type, d_desc->type,
                               p.bias_type, p.aux_type};
    uint64_t need[6];
    if (algo) {
        if (algo->data[0] != ALGO_MAGIC)
            return CUBLAS_STATUS_INVALID_VALUE;
        for (int i = 0; i < 6; i++)
            need[i] = algo->data[1 + i];
    } else {
        for (int i = 0; i < 6; i++)
            need[i] = needed_align(DEFAULT_ALIGN, types[i]);
    }
    /* each batch's pointers, which the algorithm's alignment must hold for as the first's */
    const int64_t steps[6] = {a_desc->stride, b_desc->stride, (C ? c_desc : d_desc)->stride,
                              d_desc->stride, desc->bias_stride, 0};
    for (int b = 0; b < p.batch; b++) {
        const void *ptrs[6] = {A, B, C ? C : D, D, desc->bias, desc->aux};
        for (int i = 0; i < 6; i++)
            if (ptrs[i] && ((uintptr_t)ptrs[i] + (uint64_t)(b * steps[i]) * type_bytes(types[i])) %
                               need[i])
                return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (pt_emu::sticky_error() != cudaSuccess || !pt_emu::stream_valid(stream))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    /* the scales, read when the product runs (every operation finishes before it
     * returns here, so "when it runs" is now) */
    const float sa = desc->scale_a ? *(const float *)desc->scale_a : 1.0f;
    const float sb = desc->scale_b ? *(const float *)desc->scale_b : 1.0f;
    for (int b = 0; b < p.batch; b++)
        gemm(p, desc, sa * sb,
             desc->bias ? (const char *)desc->bias + b * desc->bias_stride * type_bytes(types[4])
                        : NULL,
             al, be, (const char *)A + b * a_desc->stride * type_bytes(types[0]), a_desc,
             (const char *)B + b * b_desc->stride * type_bytes(types[1]), b_desc,
             C ? (const char *)C + b * c_desc->stride * type_bytes(types[2]) : NULL, c_desc,
             (char *)D + b * d_desc->stride * type_bytes(types[3]), d_desc);
    matmuls_run++;
    return CUBLAS_STATUS_SUCCESS;
}
