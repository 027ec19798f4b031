/*
 * A CPU stand-in for cuBLASLt (PT_CUDA_EMU), implemented in emu_cublaslt.cpp after
 * NVIDIA's cuBLAS documentation ("Using the cuBLASLt API") and the comments of the real
 * cublasLt.h: handles, matmul descriptors, column-major matrix layouts (with batches),
 * preferences, a heuristic that offers one algorithm, and cublasLtMatmul computing
 *     v = alpha · op(A) · op(B) + beta · C
 * for A and B both bf16, both fp32 or both FP8 (below), C = D in type, bf16 or fp32,
 * compute type CUBLAS_COMPUTE_32F with fp32 scalars. Each element of v sums its k products in fp32,
 * in order of k, then scales; bf16 results round to nearest even. Epilogues:
 * - DEFAULT: D = v; BIAS: D = v + bias (bias: D's rows, broadcast over columns);
 * - GELU_AUX, GELU_AUX_BIAS: u = v (+ bias), aux = u, D = gelu(u) from the fp32 u,
 *   GELU the tanh approximation 0.5 u (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))), which
 *   is what Transformer Engine and llm.c assume when they swap this epilogue for their
 *   own tanh-GELU kernels;
 * - DGELU: D = v · gelu'(aux), gelu' the derivative of that tanh form (the formula of
 *   kernels/cuda/pointwise.cu's gelu_backward);
 * - BGRADB: D = v, and the bias gradient (BIAS_POINTER, D's columns, of the bias type,
 *   by default D's type) = the sums of op(B) over k, in fp32 in order of k.
 * The aux matrix (EPILOGUE_AUX_POINTER, written by GELU_AUX*, read by DGELU) has D's
 * shape, leading dimension EPILOGUE_AUX_LD (a multiple of 8 and at least D's rows, else
 * CUBLAS_STATUS_INVALID_VALUE, as the header states) and EPILOGUE_AUX_DATA_TYPE (-1, the
 * default: D's type; bf16 or fp32). A missing aux, bias or bias-gradient pointer is
 * CUBLAS_STATUS_INVALID_VALUE at cublasLtMatmul. Other epilogues, aux or bias-gradient
 * epilogues with batches, row-major layouts and other types return
 * CUBLAS_STATUS_NOT_SUPPORTED.
 *
 * FP8 (CUDA_R_8F_E4M3, CUDA_R_8F_E5M2 as A and B, the FP8 matmul of the cuBLAS
 * documentation, https://docs.nvidia.com/cuda/cublas/#cublasltmatmul): each element of
 * v sums in fp32, in order of k, the products of the bytes' values (exact in fp32,
 * decoded by cuda_fp8.h's fp8_bits_to_float), then v = alpha · (scale_A · scale_B · sum)
 * + beta · C, the scales read at cublasLtMatmul from A_SCALE_POINTER and
 * B_SCALE_POINTER (device fp32; NULL is 1). What it refuses, as the documentation's
 * requirements for FP8 and its table of supported types do:
 * - NOT_SUPPORTED: an FP8 operand with a non-FP8 one; both E5M2 (the table has no
 *   E5M2 x E5M2 row); other than the "TN" format (A transposed, B not); C and D other
 *   than both bf16 or both fp32 (of the table, the types this stand-in has); epilogues
 *   other than DEFAULT and BIAS (the stand-in's subset); a bias type other than bf16
 *   (the table's bias type for bf16 and fp32 outputs; the default, D's type, is
 *   refused for fp32 D);
 * - no algorithm (the heuristic's NOT_SUPPORTED): a leading dimension of A, B, C or D
 *   that is no multiple of 16 bytes, or a preference alignment of A, B, C or D below
 *   16 bytes ("pointers and matrix dimension must support 16-byte alignment");
 * - INVALID_VALUE at cublasLtMatmul: a scale pointer set with bf16 or fp32 A and B
 *   (cublasLt.h: "If set for an unsupported matrix data, scale, and compute type
 *   combination, calling cublasLtMatmul() will return CUBLAS_INVALID_VALUE").
 * Not modelled: the compute capability (8.9 or newer on a GPU), FAST_ACCUM, the C, D and
 * aux scales, amax, FP8 outputs, and block scaling (the A/B_SCALE_MODE attributes).
 *
 * The algorithm honours the alignment its heuristic was told to assume: found under
 * CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES = a (256 when not set, as
 * documented), it needs min(a, 16) bytes of alignment of that matrix at run time (the
 * 16-byte loads of tensor-core kernels), and cublasLtMatmul refuses pointers that lack it
 * with CUBLAS_STATUS_INVALID_VALUE. The bias and aux pointers are held to the alignment
 * of the values the descriptor had when the heuristic ran (capped at 16), since the real
 * heuristic reads their alignment from those values. The epilogues, descriptor
 * attributes (the scale pointers too) and data types (the FP8 ones too, library_types.h)
 * have the values of CUDA 13.0's headers; other enumerators need not.
 */
#ifndef PT_EMU_CUBLASLT_H
#define PT_EMU_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_runtime.h"

/* ---- Types (library_types.h, cublas_api.h, cublasLt.h) ------------------------------------- */

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14,
    CUDA_R_8F_E4M3 = 28,
    CUDA_R_8F_E5M2 = 29,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    CUBLAS_COMPUTE_64F = 70,
} cublasComputeType_t;

typedef enum {
    CUBLASLT_POINTER_MODE_HOST = 0,
    CUBLASLT_POINTER_MODE_DEVICE = 1,
} cublasLtPointerMode_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_RELU = 2,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_RELU_BIAS = 6,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_BIAS = 36,
    CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
    CUBLASLT_EPILOGUE_DGELU = 64 | 128,
    CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;

typedef enum { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 } cublasLtOrder_t;

/* attribute: the type its buffer holds */
typedef enum {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,  /* int32_t (cublasComputeType_t) */
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,    /* int32_t (cudaDataType) */
    CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,  /* int32_t (cublasLtPointerMode_t) */
    CUBLASLT_MATMUL_DESC_TRANSA = 3,        /* int32_t (cublasOperation_t) */
    CUBLASLT_MATMUL_DESC_TRANSB = 4,        /* int32_t (cublasOperation_t) */
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,      /* uint32_t (cublasLtEpilogue_t) */
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,  /* const void * (BGRADB: void *) */
    CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,      /* int64_t, elements */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,   /* void * */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,        /* int64_t */
    CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,        /* const void *, device fp32 */
    CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,        /* const void *, device fp32 */
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22, /* int32_t (cudaDataType), -1: D's type */
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26, /* int32_t (cudaDataType), -1: D's type */
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_MATRIX_LAYOUT_TYPE = 0,                 /* uint32_t (cudaDataType) */
    CUBLASLT_MATRIX_LAYOUT_ORDER = 1,                /* int32_t (cublasLtOrder_t) */
    CUBLASLT_MATRIX_LAYOUT_ROWS = 2,                 /* uint64_t */
    CUBLASLT_MATRIX_LAYOUT_COLS = 3,                 /* uint64_t */
    CUBLASLT_MATRIX_LAYOUT_LD = 4,                   /* int64_t */
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,          /* int32_t */
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6, /* int64_t, elements */
} cublasLtMatrixLayoutAttribute_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,           /* uint32_t */
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,   /* uint64_t */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, /* uint32_t */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, /* uint32_t */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7, /* uint32_t */
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8, /* uint32_t */
} cublasLtMatmulPreferenceAttributes_t;

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque *cublasLtMatmulPreference_t;

typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

/* ---- Functions ------------------------------------------------------------------------------ */

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle);
/* the emulator's: 0 (a real cuBLASLt's major·10000 + minor·100 + patch) */
size_t cublasLtGetVersion(void);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes);
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, void *buf,
                                              size_t bytes, size_t *written);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t bytes);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t bytes);

/* At most one result: the stand-in's algorithm, when it can do the problem. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle,
                                              cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a_desc,
                                              cublasLtMatrixLayout_t b_desc,
                                              cublasLtMatrixLayout_t c_desc,
                                              cublasLtMatrixLayout_t d_desc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned);

/* algo may be NULL (the heuristic's choice under default preferences). */
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t a_desc,
                              const void *B, cublasLtMatrixLayout_t b_desc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c_desc, void *D,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream);

#endif
