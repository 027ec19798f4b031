/*
 * The CUDA backend's internal declarations: its context (stream, cuBLASLt handle and
 * workspace, a growable scratch buffer), the checked-call helpers that record a
 * backend's first failure in kn->err, bf16 load/store helpers that round exactly as
 * the CPU's pt_k_bf16_from_f32, and one function per slot of the pt_kernels table,
 * named pt_kcuda_<op>, defined in the .cu file of its area (backend.cu for memory,
 * matmul.cu, norm.cu, pointwise.cu, embed.cu, loss.cu, optim.cu, attention.cu, fp8.cu,
 * moe.cu) and put into the table by backend.cu. Shapes and contracts are those of
 * kernels.h.
 *
 * Every op runs asynchronously on the backend's one stream, in call order, so ops
 * need no synchronisation among themselves; only copy to the host, sumsq (which
 * returns a number) and sync wait. The device is selected once, when the backend is
 * created: a process drives one device through one table.
 *
 * Device memory: the backend's own buffers (cuBLASLt's workspace, sumsq's partial
 * sums) are allocated with it; the per-op scratch and adamw_multi's descriptor table
 * grow on demand until reserve (backend.cu) sizes them for the model and sets steady,
 * after which nothing in an op allocates, frees or waits (pt_kcuda_scratch and
 * adamw_multi fail instead of growing).
 *
 * Numerics: [act] buffers hold bf16 (__nv_bfloat16 behind the float * of kernels.h);
 * arithmetic is fp32 (double where the CPU reference uses double for a row sum), and
 * backwards that accumulate into an [act] gradient read it, add in fp32 and round
 * once. No floating-point atomics anywhere: every reduction has a fixed shape that
 * depends on the problem size only, so results are bit-identical run to run on one
 * device model.
 */
#ifndef PT_KERNELS_CUDA_CUH
#define PT_KERNELS_CUDA_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

typedef __nv_bfloat16 bf16;

/* Slots of the cuBLASLt algorithm cache (matmul.cu), a hash table: one entry per
 * distinct GEMM shape, type, epilogue and pointer alignment class seen; a model's
 * layers need a few dozen to a few hundred (forward, both backward products,
 * recomputation, ragged tensor-parallel row splits). */
enum { PT_KCUDA_ALGO_CACHE = 1024 };

typedef struct {
    uint64_t key[7];           /* shape, leading dimensions (aux's too), transposes,
                                * types, epilogue kind, alignments (bias and aux too),
                                * batch count and which operands it steps */
    cublasLtMatmulAlgo_t algo;
    int ok;                    /* 0: no cuBLASLt algorithm, use the fallback kernel */
    int used;                  /* the slot holds an entry */
} pt_kcuda_algo;

/* sumsq's first pass: at most this many blocks, each writing one partial sum */
enum { PT_KCUDA_SUMSQ_BLOCKS = 1024 };

/* orthonormalize's passes (compress.cu): at most this many blocks, each writing a
 * partial sum per column */
enum { PT_KCUDA_ORTHO_BLOCKS = 256 };

/* fp8_amax's and fp8_cast's first pass (fp8.cu): at most this many blocks, each writing
 * one pt_kcuda_fp8_part; a second one-block pass folds them into the meta block. */
enum { PT_KCUDA_FP8_BLOCKS = 1024 };

/* One block's share of an FP8 amax or cast: max |x| (NaN skipped) and, for a cast, the
 * elements saturated and those flushed to zero, as integers (added in any order, the
 * sums are the same). */
struct pt_kcuda_fp8_part {
    float amax;
    uint32_t unused;           /* explicit padding */
    unsigned long long over, under;
};

/* One tensor of adamw_multi as its kernel reads it (optim.cu): the fields of
 * pt_k_adamw_tensor and the index of its first block in the launch (64 bytes). */
struct pt_kcuda_adamw_desc {
    float *params;
    uint16_t *params_bf16;
    const float *grads;
    float *m;
    float *v;
    int64_t n;
    int64_t first_block;
    float weight_decay;
    float unused;              /* explicit padding: descriptors are compared with memcmp */
};

/* kn->priv. The current stream is the first member so that code holding only the priv
 * pointer (the communication layer, to order its NCCL calls after the kernels) can
 * read it as a cudaStream_t; keep it first. */
typedef struct {
    cudaStream_t stream;       /* where ops are queued: main_stream, or side between
                                * stream_select(kn, 1) and (kn, 0) */
    cudaStream_t main_stream;
    cudaStream_t side;         /* the second stream, made when first selected; NULL */
    cudaEvent_t side_ev[2];    /* ordering: main before side, side before main */
    void *lt_ws_side;          /* cuBLASLt's workspace for GEMMs on the side stream (one
                                * workspace must not serve two streams at once) */
    int device;
    int sm_count;
    size_t smem_optin;         /* largest dynamic shared memory a block may ask for */
    size_t ce_row_bytes;       /* the longest row (bytes) the cross-entropy holds in shared
                                * memory (loss.cu); 0: none */
    cublasLtHandle_t lt;
    void *lt_ws;               /* cuBLASLt workspace */
    size_t lt_ws_bytes;
    int no_lt;                 /* PT_KCUDA_NO_LT set: every GEMM on the fallback kernel */
    int epilogues;             /* PT_KCUDA_EPILOGUES (backend.cu): 1 to ask cuBLASLt for the
                                * GELU, GELU-gradient and bias-gradient epilogues (matmul.cu),
                                * 0 to compose those ops from plain GEMMs and our kernels */
    int attn_tc;               /* the tensor-core attention kernels can run (attention_tc.cu);
                                * 0 with PT_KCUDA_SIMPLE_ATTN=1 */
    struct pt_kcuda_cudnn *cudnn; /* attention through cuDNN (attention_cudnn.cu): its
                                * handle and plans; NULL when our kernels run it all */
    size_t attn_ws_cap;        /* the most cuDNN's attention workspace may take, before
                                * reserve and in it: an eighth of the device's memory, at
                                * least 1 GiB (dP grows with s²: 69 GB for 32 heads at
                                * 32K tokens) */
    void *scratch;             /* per-op temporaries, reused in stream order */
    size_t scratch_bytes;
    int steady;                /* reserve ran: scratch and the adamw table never grow */
    double *host_sum;          /* pinned: the result of sumsq */
    double *sumsq_part;        /* [PT_KCUDA_SUMSQ_BLOCKS + 1] device: sumsq's result and
                                * the partial sums of sumsq and sumsq_acc */
    double *ortho_part;        /* [PT_KCUDA_ORTHO_BLOCKS · (PT_K_ORTHO_MAX_COLS + 1)]
                                * device: orthonormalize's partial dot products and norms
                                * (PowerSGD's, on whichever one stream it runs) */
    float *fp8_scale_slots;    /* device, 64 bytes: an FP8 GEMM's two inverse scales, each
                                * on a 16-byte boundary, where the meta blocks' are not
                                * (fp8.cu): bytes 0 and 16 for the main stream, 32 and 48
                                * for the side stream */
    struct pt_kcuda_fp8_part *fp8_part; /* [PT_KCUDA_FP8_BLOCKS] device: the partial
                                * results of fp8_amax and fp8_cast (fp8.cu), reused in
                                * stream order (FP8 ops run on the main stream) */
    float *fp8_colpart;        /* [PT_KCUDA_FP8_BLOCKS · 64] device: fp8_cast_dbias's
                                * column sums, a 64-column tile's per block (fp8.cu) */
    struct pt_kcuda_adamw_desc *adamw_table; /* [adamw_cap] device: adamw_multi's list */
    struct pt_kcuda_adamw_desc *adamw_host;  /* [adamw_cap] host: what the device table
                                * holds, entries [0, adamw_valid) uploaded */
    int adamw_cap, adamw_valid;
    cudaEvent_t *events;       /* [n_events] the timer pool (event_record), created as
                                * first asked for, with timing on; destroyed with the
                                * backend */
    int *free_events;          /* [n_free] indices released, handed out again first;
                                * room for cap_events */
    int n_events, n_free, cap_events;
    pt_kcuda_algo algos[PT_KCUDA_ALGO_CACHE];
} pt_kcuda;

static inline pt_kcuda *pt_kcuda_ctx(pt_kernels *kn) { return (pt_kcuda *)kn->priv; }

/* ---- Checked calls (backend.cu) ------------------------------------------------------ */

/* Records "what: message (file:line)" in kn->err unless a failure is already recorded;
 * returns 0 when status is success, -1 otherwise. */
int pt_kcuda_check(pt_kernels *kn, cudaError_t status, const char *what, const char *file,
                   int line);
int pt_kcuda_check_lt(pt_kernels *kn, cublasStatus_t status, const char *what,
                      const char *file, int line);
/* Records a caller's error (unsupported size, ...) the same way. */
void pt_kcuda_fail(pt_kernels *kn, const char *file, int line, const char *fmt, ...);
/* Hands a note, formatted as printf does, to kn->note (kernels.h); nothing when it is
 * NULL. */
void pt_kcuda_note(pt_kernels *kn, const char *fmt, ...);

#define PT_CU(kn, call) pt_kcuda_check((kn), (call), #call, __FILE__, __LINE__)
#define PT_LT(kn, call) pt_kcuda_check_lt((kn), (call), #call, __FILE__, __LINE__)
/* after every kernel launch: catches bad launch configurations at once */
#define PT_LAUNCHED(kn, name) pt_kcuda_check((kn), cudaGetLastError(), (name), __FILE__, __LINE__)

/* A device buffer of at least bytes for one op's temporaries, valid until the next
 * call that asks for scratch (ops run in stream order, so reuse is safe). Before
 * reserve, growing waits for the stream and reallocates; after it (ctx->steady) a
 * request above the reserved size is an error. NULL (error recorded) when out of
 * memory or beyond the reserve. What each op asks for is mirrored by
 * pt_kcuda_scratch_bytes (backend.cu): change both together. */
void *pt_kcuda_scratch(pt_kernels *kn, size_t bytes);
/* The part of embed_backward's scratch that holds the sums of a long run's pieces, for
 * b·s = rows and width h (embed.cu). */
size_t pt_kcuda_embed_pieces_bytes(int64_t rows, int64_t h);

/* ---- Launches ------------------------------------------------------------------------- */

/* PT_LAUNCH(grid, block, smem, stream, kernel)(args...) launches kernel as
 * kernel<<<grid, block, smem, stream>>>(args...) does; under PT_CUDA_EMU (kernels/emu/,
 * the .cu files compiled as host C++) it hands the launch to the emulator. The kernel
 * comes last so that template arguments with commas pass through; the indirection lets
 * the first four come from one macro (pointwise.cu's LAUNCH). Every launch in this
 * folder goes through it. */
#define PT_LAUNCH(...) PT_LAUNCH_(__VA_ARGS__)
#ifdef PT_CUDA_EMU
#define PT_LAUNCH_(g, b, s, st, ...)                                                       \
    ::pt_emu::launch((g), (b), (s), (st), #__VA_ARGS__, __VA_ARGS__)
#else
#define PT_LAUNCH_(g, b, s, st, ...) __VA_ARGS__<<<g, b, s, st>>>
#endif

/* PT_DYNAMIC_SMEM(name); declares name, the block's dynamic shared memory (the launch's
 * smem bytes), 16-byte aligned: extern __shared__ under nvcc, the emulator's per-block
 * buffer under PT_CUDA_EMU. */
#ifdef PT_CUDA_EMU
#define PT_DYNAMIC_SMEM(name) unsigned char *const name = ::pt_emu::dynamic_smem()
#else
#define PT_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

/* ---- Launch shapes ------------------------------------------------------------------- */

enum { PT_KCUDA_THREADS = 256 };

/* blocks for a grid-stride loop over n items, capped so that the grid is always valid;
 * the cap depends on n only, never on the device, so reductions keep their shape */
static inline unsigned pt_kcuda_blocks(int64_t n, int threads)
{
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks < 1)
        blocks = 1;
    if (blocks > 65535 * 8)
        blocks = 65535 * 8;
    return (unsigned)blocks;
}

/* ---- bf16 helpers (device) ----------------------------------------------------------- */

static __device__ __forceinline__ float pt_ld(const bf16 *p) { return __bfloat162float(*p); }

/* fp32 -> bf16 bits, round to nearest even, NaN kept quiet with its sign: the same bits
 * as pt_k_bf16_from_f32 in kernels/cpu/convert.c (must stay identical) */
static __device__ __forceinline__ uint16_t pt_bf16_bits(float x)
{
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static __device__ __forceinline__ bf16 pt_bf16(float x)
{
    return __ushort_as_bfloat16(pt_bf16_bits(x));
}

static __device__ __forceinline__ void pt_st(bf16 *p, float x) { *p = pt_bf16(x); }

/* The 8 bf16 held in u (as 16 raw bytes) as fp32: the values of pt_ld. */
static __device__ __forceinline__ void pt_unpack8(float f[8], uint4 u)
{
    const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(h2[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

/* The 8 bf16 at p (16-byte aligned) as fp32, in one 16-byte load: the values of pt_ld. */
static __device__ __forceinline__ void pt_ld8(float f[8], const bf16 *p)
{
    pt_unpack8(f, *reinterpret_cast<const uint4 *>(p));
}

/* f rounded to bf16 (pt_bf16, as pt_st) into the 8 bf16 at p (16-byte aligned), in one
 * 16-byte store. */
static __device__ __forceinline__ void pt_st8(bf16 *p, const float f[8])
{
    uint4 u;
    __nv_bfloat162 *h2 = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++)
        h2[i] = __halves2bfloat162(pt_bf16(f[2 * i]), pt_bf16(f[2 * i + 1]));
    *reinterpret_cast<uint4 *>(p) = u;
}

/* As pt_st8 with the device's paired conversion (cvt.rn.bf16x2.f32, one instruction a
 * pair, where pt_bf16 takes about five an element): finite values and infinities round
 * to the same bits as pt_bf16 (to nearest, ties to even); a NaN comes out as a NaN, not
 * necessarily with pt_bf16's bits. For outputs that are pure arithmetic on finite
 * inputs, in kernels whose instruction count bounds them. pt_pack8_rn gives the 16
 * bytes, to store and to read back (pt_unpack8) as stored. */
static __device__ __forceinline__ uint4 pt_pack8_rn(const float f[8])
{
    uint4 u;
    __nv_bfloat162 *h2 = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++)
        h2[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return u;
}

static __device__ __forceinline__ void pt_st8_rn(bf16 *p, const float f[8])
{
    *reinterpret_cast<uint4 *>(p) = pt_pack8_rn(f);
}

/* An amax's step (the FP8 amaxes of fp8.cu and pointwise.cu): |x| where it exceeds m,
 * else m; a NaN never does. */
static __device__ __forceinline__ float pt_amax_step(float m, float x)
{
    float a = fabsf(x);
    return a > m ? a : m;
}

/* ---- Block reductions (device) -------------------------------------------------------- */

/* Sum / max over a warp by a fixed butterfly: every lane gets the same result, in the
 * same order on every run. */
template <typename T> static __device__ __forceinline__ T pt_warp_sum(T x)
{
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

static __device__ __forceinline__ float pt_warp_max(float x)
{
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* Sum over a block whose size is a multiple of 32 (at most 1024): warps reduce, then
 * warp 0 reduces the warps' sums in order. Every thread gets the result. shared must
 * hold 32 values. Must be reached by every thread of the block. */
template <typename T> static __device__ T pt_block_sum(T x, T *shared)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    x = pt_warp_sum(x);
    __syncthreads(); /* shared may still be read by a previous call */
    if (lane == 0)
        shared[warp] = x;
    __syncthreads();
    T s = lane < nwarps ? shared[lane] : (T)0;
    return pt_warp_sum(s);
}

static __device__ float pt_block_max(float x, float *shared)
{
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
    x = pt_warp_max(x);
    __syncthreads();
    if (lane == 0)
        shared[warp] = x;
    __syncthreads();
    float m = lane < nwarps ? shared[lane] : -INFINITY;
    return pt_warp_max(m);
}

/* The deterministic column sums' fold, in a block of (32 columns, 8 slices): thread
 * (tx, ty) gives acc, its slice's sum of column tx; row ty = 0 gets the 8 slices' sums
 * added in slice order (the other rows 0). s: the block's __shared__ float[8][33].
 * Must be reached by every thread of the block. */
static __device__ __forceinline__ float pt_fold_slices(float (*s)[33], float acc)
{
    int tx = threadIdx.x, ty = threadIdx.y;
    s[ty][tx] = acc;
    __syncthreads();
    float sum = 0.0f;
    if (ty == 0)
        for (int i = 0; i < 8; i++)
            sum += s[i][tx];
    return sum;
}

/* ---- The ops (one file per area) ------------------------------------------------------ */

/* backend.cu */
void pt_kcuda_destroy(pt_kernels *kn);
void *pt_kcuda_alloc(pt_kernels *kn, size_t bytes);
void pt_kcuda_free(pt_kernels *kn, void *p);
void pt_kcuda_copy(pt_kernels *kn, void *dst, const void *src, size_t bytes, pt_kcopy dir);
void pt_kcuda_copy_rows(pt_kernels *kn, void *dst, size_t dst_pitch, const void *src,
                        size_t src_pitch, size_t row_bytes, size_t rows);
void pt_kcuda_zero(pt_kernels *kn, void *p, size_t bytes);
int pt_kcuda_sync(pt_kernels *kn);
void pt_kcuda_stream_select(pt_kernels *kn, int side);
void pt_kcuda_stream_join(pt_kernels *kn);
size_t pt_kcuda_scratch_bytes(pt_kernels *kn, const pt_k_scratch_shape *shape);
int pt_kcuda_reserve(pt_kernels *kn, const pt_k_scratch_shape *shape);
int pt_kcuda_event_record(pt_kernels *kn, int *event);
int pt_kcuda_event_elapsed(pt_kernels *kn, int from, int to, double *ms);
void pt_kcuda_event_release(pt_kernels *kn, int event);
/* embed.cu */
void pt_kcuda_embed_forward(pt_kernels *kn, float *out, const int32_t *tokens,
                            const float *wte, const float *wpe, int b, int s, int h,
                            int v0, int vr, int pos0);
void pt_kcuda_embed_backward(pt_kernels *kn, float *dwte, float *dwpe, const float *dout,
                             const int32_t *tokens, int b, int s, int h, int v0, int vr,
                             int pos0);
/* norm.cu */
void pt_kcuda_layernorm_forward(pt_kernels *kn, float *out, float *mean, float *rstd,
                                const float *inp, const float *w, const float *bias,
                                int64_t n, int h, float eps);
void pt_kcuda_layernorm_backward(pt_kernels *kn, float *dinp, float *dw, float *dbias,
                                 const float *dout, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int64_t n, int h);
void pt_kcuda_rmsnorm_forward(pt_kernels *kn, float *out, float *rstd, const float *inp,
                              const float *w, int64_t n, int h, float eps);
void pt_kcuda_rmsnorm_backward(pt_kernels *kn, float *dinp, float *dw, const float *dout,
                               const float *inp, const float *w, const float *rstd,
                               int64_t n, int h);
void pt_kcuda_residual_layernorm_forward(pt_kernels *kn, float *res, float *out, float *mean,
                                         float *rstd, const float *inp1, const float *inp2,
                                         const float *w, const float *bias, int64_t n, int h,
                                         float eps);
void pt_kcuda_residual_rmsnorm_forward(pt_kernels *kn, float *res, float *out, float *rstd,
                                       const float *inp1, const float *inp2, const float *w,
                                       int64_t n, int h, float eps);
/* matmul.cu */
void pt_kcuda_matmul_forward(pt_kernels *kn, float *out, const float *inp, const float *w,
                             const float *bias, int64_t n, int ic, int oc);
void pt_kcuda_matmul_backward(pt_kernels *kn, float *dinp, float *dw, float *dbias,
                              const float *dout, const float *inp, const float *w,
                              int64_t n, int ic, int oc);
void pt_kcuda_matmul_forward_gelu(pt_kernels *kn, float *out, float *pre, const float *inp,
                                  const float *w, const float *bias, int64_t n, int ic, int oc);
void pt_kcuda_matmul_forward_res(pt_kernels *kn, float *out, const float *inp, const float *w,
                                 const float *bias, const float *res, int64_t n, int ic, int oc);
void pt_kcuda_matmul_dgrad(pt_kernels *kn, float *dinp, const float *dout, const float *w,
                           int64_t n, int ic, int oc);
void pt_kcuda_matmul_forward_shared(pt_kernels *kn, int count, float *const out[],
                                    const float *inp, const float *const w[],
                                    const float *const bias[], int64_t n, int ic, int oc);
void pt_kcuda_matmul_wgrad_shared(pt_kernels *kn, int count, float *const dw[],
                                  float *const dbias[], const float *const dout[],
                                  const float *inp, int64_t n, int ic, int oc);
void pt_kcuda_matmul_backward_dgelu(pt_kernels *kn, float *dpre, const float *dout,
                                    const float *w, const float *pre, int64_t n, int ic,
                                    int oc);
void pt_kcuda_gemm(pt_kernels *kn, int trans_a, int trans_b, int m, int n, int kk,
                   float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc);
void pt_kcuda_gemm_f32(pt_kernels *kn, int trans_a, int trans_b, int m, int n, int kk,
                       float alpha, const float *a, int lda, const float *b, int ldb,
                       float beta, float *c, int ldc);
/* matmul.cu's cuBLASLt helpers, shared with fp8.cu's FP8 matmul. align_of: an address's
 * alignment class (256, 16, or the largest power of two below 16); align_code: its log2
 * plus one, 0 for NULL (four bits of a cache key). lt_algo: the cached algorithm for key,
 * running the heuristic for the problem (desc, la, lb, lc as C and D, the pointers'
 * alignment classes as preferences) on a miss; NULL (error recorded) when the
 * preference cannot be made, else an entry whose ok says whether cuBLASLt offered one.
 * Keys of different callers must differ: fp8.cu sets bit 40 of key[6], which matmul.cu's
 * keys leave clear. */
uint64_t pt_kcuda_align_of(const void *p);
uint64_t pt_kcuda_align_code(const void *p);
const pt_kcuda_algo *pt_kcuda_lt_algo(pt_kernels *kn, const uint64_t key[7],
                                      cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                                      cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
                                      const void *A, const void *B, const void *C,
                                      const void *D);
/* fp8.cu */
void pt_kcuda_fp8_amax(pt_kernels *kn, float *meta, const float *src, int64_t n);
void pt_kcuda_fp8_scale(pt_kernels *kn, float *meta, int fmt, int hist_len, float margin);
void pt_kcuda_fp8_amax_scale(pt_kernels *kn, float *meta, const float *src, int64_t n, int fmt);
void pt_kcuda_fp8_cast_dbias(pt_kernels *kn, uint8_t *dst, uint8_t *dst_t, const float *src,
                             int64_t rows, int cols, int fmt, float *meta, float *dbias);
/* the second pass of an amax whose first pass wrote `count` blocks' partials into
 * ctx->fp8_part: meta[AMAX] = their max (fp8.cu) */
void pt_kcuda_fp8_fold_amax(pt_kernels *kn, float *meta, int count);
void pt_kcuda_fp8_cast(pt_kernels *kn, uint8_t *dst, uint8_t *dst_t, const float *src,
                       int64_t rows, int cols, int fmt, float *meta);
void pt_kcuda_gemm_fp8(pt_kernels *kn, float *c, int c_f32, float beta, const uint8_t *a,
                       int fmt_a, const float *meta_a, const uint8_t *b, int fmt_b,
                       const float *meta_b, const float *bias, int64_t m, int n, int k);
/* moe.cu */
void pt_kcuda_moe_route_forward(pt_kernels *kn, float *scores, int32_t *idx, float *w,
                                const float *logits, int64_t n, int E, int k, int score,
                                int renorm);
void pt_kcuda_moe_route_backward(pt_kernels *kn, float *dlogits, const float *dw,
                                 const float *aux_g, const float *scores, const int32_t *idx,
                                 const float *w, int64_t n, int E, int k, int score,
                                 int renorm);
void pt_kcuda_moe_score_colsum(pt_kernels *kn, float *out, const float *scores, int64_t n,
                               int E);
void pt_kcuda_moe_dispatch_plan(pt_kernels *kn, int32_t *pos, int32_t *src, int64_t *counts,
                                const int32_t *idx, int64_t n, int E, int k,
                                int64_t capacity);
void pt_kcuda_moe_gather_rows(pt_kernels *kn, float *out, const float *x, const int32_t *src,
                              int64_t m, int h);
void pt_kcuda_moe_gather_rows_backward(pt_kernels *kn, float *dx, const float *dout,
                                       const int32_t *pos, int64_t n, int k, int h);
void pt_kcuda_moe_combine_forward(pt_kernels *kn, float *out, const float *y,
                                  const int32_t *pos, const float *w, int64_t n, int k, int h);
void pt_kcuda_moe_combine_backward(pt_kernels *kn, float *dy, float *dw, const float *dout,
                                   const float *y, const int32_t *pos, const float *w,
                                   int64_t n, int k, int h);
void pt_kcuda_matmul_grouped_forward(pt_kernels *kn, float *out, const float *inp,
                                     const float *w, const int64_t *counts, int G, int ic,
                                     int oc);
void pt_kcuda_matmul_grouped_backward(pt_kernels *kn, float *dinp, float *dw,
                                      const float *dout, const float *inp, const float *w,
                                      const int64_t *counts, int G, int ic, int oc);
/* The scratch moe_dispatch_plan asks for with nk = n·k assignments over E experts
 * (backend.cu's reserve counts it); 0 when the call needs none. */
size_t pt_kcuda_moe_plan_bytes(int64_t nk, int E);
/* compress.cu */
void pt_kcuda_orthonormalize(pt_kernels *kn, float *p, int64_t rows, int cols, float eps);
/* pointwise.cu */
void pt_kcuda_rope_forward(pt_kernels *kn, float *out, const float *inp, int b, int s,
                           int nh, int d, int pos0, float theta);
void pt_kcuda_rope_backward(pt_kernels *kn, float *dinp, const float *dout, int b, int s,
                            int nh, int d, int pos0, float theta);
void pt_kcuda_gelu_forward(pt_kernels *kn, float *out, const float *inp, int64_t n);
void pt_kcuda_gelu_backward(pt_kernels *kn, float *dinp, const float *dout,
                            const float *inp, int64_t n);
void pt_kcuda_gelu_forward_amax(pt_kernels *kn, float *out, const float *inp, int64_t n,
                                float *meta);
void pt_kcuda_gelu_backward_amax(pt_kernels *kn, float *dinp, const float *dout,
                                 const float *inp, int64_t n, float *meta);
/* d = bf16(d · gelu'(pre)) in place, with gelu_backward's gelu': the second half of
 * matmul_backward_dgelu when cuBLASLt's DGELU epilogue is not used (matmul.cu) */
void pt_kcuda_dgelu_inplace(pt_kernels *kn, bf16 *d, const bf16 *pre, int64_t n);
void pt_kcuda_swiglu_forward(pt_kernels *kn, float *out, const float *gate,
                             const float *up, int64_t n, int f);
void pt_kcuda_swiglu_backward(pt_kernels *kn, float *dgate, float *dup, const float *dout,
                              const float *gate, const float *up, int64_t n, int f);
void pt_kcuda_residual_forward(pt_kernels *kn, float *out, const float *inp1,
                               const float *inp2, int64_t n);
void pt_kcuda_residual_backward(pt_kernels *kn, float *dinp1, float *dinp2,
                                const float *dout, int64_t n);
void pt_kcuda_dropout_forward(pt_kernels *kn, float *out, const float *inp, int64_t n,
                              float p, uint64_t seed, uint64_t tensor_id, int64_t offset);
void pt_kcuda_dropout_backward(pt_kernels *kn, float *dinp, const float *dout, int64_t n,
                               float p, uint64_t seed, uint64_t tensor_id, int64_t offset);
void pt_kcuda_f32_to_bf16(pt_kernels *kn, uint16_t *dst, const float *src, int64_t n);
void pt_kcuda_bf16_to_f32(pt_kernels *kn, float *dst, const uint16_t *src, int64_t n);
void pt_kcuda_add_f32(pt_kernels *kn, float *dst, const float *src, int64_t n);
/* loss.cu: raises the row kernel's shared-memory limit to what the device allows and
 * sets ctx->ce_row_bytes */
int pt_kcuda_loss_init(pt_kernels *kn);
/* attention.cu */
int pt_kcuda_attention_init(pt_kernels *kn);
/* attention_tc.cu: the tensor-core path for head dimensions 64 and 128. _init raises
 * the kernels' shared-memory limits and sets ctx->attn_tc when the device allows them;
 * _ok says whether a call with head dimension d and these pointers can take the path;
 * Dsum is the backward's rowsum(dout ∘ out), (b, a, sq) fp32. */
int pt_kcuda_attn_tc_init(pt_kernels *kn);
bool pt_kcuda_attn_tc_ok(pt_kernels *kn, int d, const void *const *ptrs, int n);
void pt_kcuda_attn_tc_forward(pt_kernels *kn, bf16 *out, float *lse, const bf16 *q,
                              const bf16 *k, const bf16 *v, int b, int sq, int skv, int a,
                              int kh, int d, int q0, int k0, int causal);
void pt_kcuda_attn_tc_backward(pt_kernels *kn, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                               const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                               const float *Dsum, int b, int sq, int skv, int a, int kh, int d,
                               int q0, int k0, int causal);
void pt_kcuda_attention_forward(pt_kernels *kn, float *out, float *lse, const float *q,
                                const float *k, const float *v, int b, int sq, int skv,
                                int a, int kh, int d, int q0, int k0, int causal);
void pt_kcuda_attention_backward(pt_kernels *kn, float *dq, float *dk, float *dv,
                                 const float *dout, const float *q, const float *k,
                                 const float *v, const float *out, const float *lse,
                                 int b, int sq, int skv, int a, int kh, int d, int q0,
                                 int k0, int causal, int accumulate);
void pt_kcuda_attention_combine(pt_kernels *kn, float *out, float *lse, const float *out2,
                                const float *lse2, int b, int sq, int a, int d);
/* attention_cudnn.cu, in builds that found cuDNN (PT_KCUDA_HAVE_CUDNN): attention
 * through cuDNN's fused flash attention. _init opens cuDNN on the backend's stream and
 * sets ctx->cudnn; without a usable cuDNN it leaves it NULL and returns 0, unless
 * required (PT_KCUDA_ATTN=cudnn): then -1 with kn->err set. The two entries are the
 * table's attention_forward and attention_backward while ctx->cudnn is set: cuDNN runs
 * the calls it takes, pt_kcuda_attention_forward/_backward the others (when required,
 * a call it does not take is an error instead). _destroy frees the plans and the
 * handle (backend.cu's destroy). nondeterministic: the backward may take cuDNN's
 * fp32-atomic dQ (kn->nondeterministic). */
typedef struct pt_kcuda_cudnn pt_kcuda_cudnn;
int pt_kcuda_cudnn_init(pt_kernels *kn, bool required, bool nondeterministic);
/* cudnnGetVersion() of the cuDNN loaded, e.g. 91900 for 9.19.0 */
size_t pt_kcuda_cudnn_version(void);
void pt_kcuda_cudnn_destroy(pt_kernels *kn);
void pt_kcuda_cudnn_attention_forward(pt_kernels *kn, float *out, float *lse, const float *q,
                                      const float *k, const float *v, int b, int sq, int skv,
                                      int a, int kh, int d, int q0, int k0, int causal);
void pt_kcuda_cudnn_attention_backward(pt_kernels *kn, float *dq, float *dk, float *dv,
                                       const float *dout, const float *q, const float *k,
                                       const float *v, const float *out, const float *lse,
                                       int b, int sq, int skv, int a, int kh, int d, int q0,
                                       int k0, int causal, int accumulate);
/* loss.cu */
void pt_kcuda_crossentropy(pt_kernels *kn, float *losses, float *dlogits,
                           const float *logits, const int32_t *targets, int64_t n, int v,
                           float dloss);
void pt_kcuda_ce_local_max(pt_kernels *kn, float *lmax, const float *logits, int64_t n,
                           int vr);
void pt_kcuda_ce_local_sumexp(pt_kernels *kn, float *lsum, const float *logits,
                              const float *gmax, int64_t n, int vr);
void pt_kcuda_ce_local_target(pt_kernels *kn, float *ltarget, const float *logits,
                              const int32_t *targets, int64_t n, int vr, int v0);
void pt_kcuda_ce_finalize(pt_kernels *kn, float *losses, float *dlogits,
                          const float *logits, const int32_t *targets, const float *gmax,
                          const float *gsum, const float *gtarget, int64_t n, int vr,
                          int v0, float dloss);
/* optim.cu */
void pt_kcuda_adamw(pt_kernels *kn, float *params, uint16_t *params_bf16,
                    const float *grads, float *m, float *v, int64_t n, float lr,
                    float beta1, float beta2, float eps, float weight_decay, int step,
                    float grad_scale);
double pt_kcuda_sumsq(pt_kernels *kn, const float *x, int64_t n);
void pt_kcuda_sumsq_acc(pt_kernels *kn, const float *x, int64_t n, double *acc);
void pt_kcuda_sum_acc(pt_kernels *kn, const float *x, int64_t n, double *acc);
void pt_kcuda_adamw_multi(pt_kernels *kn, const pt_k_adamw_tensor *t, int count,
                          const pt_k_adamw_args *a);
/* Makes room for count descriptors in adamw_multi's table (reserve's part): waits for
 * the stream when it grows. 0, or -1 with the error recorded. */
int pt_kcuda_adamw_grow(pt_kernels *kn, int count);

/* ---- Deterministic column reductions (backend.cu) -------------------------------------
 * A weight gradient summed over n rows (dbias, LayerNorm's dw) is reduced in two
 * passes without atomics: a first kernel writes one partial sum per (chunk of rows,
 * column) to scratch, in a fixed order within the chunk; pt_kcuda_sum_partials adds
 * the partials of each column into dst (+=) in a fixed order (8 slices of chunks, then
 * the slices), and with dst2 a second set that follows the first (LayerNorm's dbias
 * after its dw) in the same launch. The chunking depends on n only. */
enum { PT_KCUDA_MAX_CHUNKS = 256 };
static inline int64_t pt_kcuda_chunk_rows(int64_t n)
{
    int64_t rows = (n + PT_KCUDA_MAX_CHUNKS - 1) / PT_KCUDA_MAX_CHUNKS;
    return rows < 64 ? 64 : rows;
}
static inline int pt_kcuda_chunks(int64_t n)
{
    int64_t r = pt_kcuda_chunk_rows(n);
    int64_t c = (n + r - 1) / r;
    return c < 1 ? 1 : (int)c;
}
void pt_kcuda_sum_partials(pt_kernels *kn,
                           float *dst,             /* (cols) fp32, += */
                           float *dst2,            /* (cols) fp32, += , or NULL */
                           const float *partials,  /* (1 or 2, chunks, cols) fp32 */
                           int chunks, int cols);

#endif
