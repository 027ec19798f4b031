/*
 * The CUDA backend: opens a device (compute capability 8.0 or newer, for bf16 tensor
 * cores and the shared-memory sizes the attention kernels use), creates the stream,
 * the cuBLASLt handle and its workspace, fills the pt_kernels table with the kernels
 * of this folder, and provides device memory and timing events through it. It also
 * holds the checked-call helpers that record a backend's first failure for sync(),
 * the scratch buffer and its reserve (the one point where the backend's temporaries
 * are sized for a model, so that no step allocates), and the second pass of the
 * deterministic column reductions.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cub/device/device_radix_sort.cuh>

#include "cuda.cuh"

/* cuBLASLt's workspace: 32 MiB is what NVIDIA recommends for Hopper (cuBLAS docs,
 * "cublasSetWorkspace"); smaller GPUs need less, but it is cheap next to a model. */
#define PT_KCUDA_LT_WORKSPACE ((size_t)32 << 20)

/* The smallest scratch buffer: small requests of many shapes share it without growing. */
#define PT_KCUDA_SCRATCH_MIN ((size_t)1 << 20)

/* ---- Checked calls --------------------------------------------------------------------- */

void pt_kcuda_fail(pt_kernels *kn, const char *file, int line, const char *fmt, ...)
{
    if (kn->err[0])
        return;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    snprintf(kn->err, sizeof kn->err, "cuda: %s (%s:%d)", msg, base ? base + 1 : file, line);
}

void pt_kcuda_note(pt_kernels *kn, const char *fmt, ...)
{
    if (!kn->note)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    kn->note(kn->note_arg, line);
}

int pt_kcuda_check(pt_kernels *kn, cudaError_t status, const char *what, const char *file,
                   int line)
{
    if (status == cudaSuccess)
        return 0;
    pt_kcuda_fail(kn, file, line, "%s: %s", what, cudaGetErrorString(status));
    return -1;
}

int pt_kcuda_check_lt(pt_kernels *kn, cublasStatus_t status, const char *what,
                      const char *file, int line)
{
    if (status == CUBLAS_STATUS_SUCCESS)
        return 0;
    pt_kcuda_fail(kn, file, line, "%s: cuBLASLt status %d", what, (int)status);
    return -1;
}

void *pt_kcuda_scratch(pt_kernels *kn, size_t bytes)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (bytes <= ctx->scratch_bytes)
        return ctx->scratch;
    if (ctx->steady) {
        pt_kcuda_fail(kn, __FILE__, __LINE__,
                      "scratch: an op needs %zu bytes, reserve made %zu; the shapes given to "
                      "reserve miss this call (no allocation after reserve)",
                      bytes, ctx->scratch_bytes);
        return NULL;
    }
    /* kernels queued earlier may still read the old buffer */
    if (PT_CU(kn, cudaStreamSynchronize(ctx->stream)))
        return NULL;
    if (ctx->scratch)
        cudaFree(ctx->scratch);
    ctx->scratch = NULL;
    ctx->scratch_bytes = 0;
    size_t want = bytes < PT_KCUDA_SCRATCH_MIN ? PT_KCUDA_SCRATCH_MIN : bytes;
    if (PT_CU(kn, cudaMalloc(&ctx->scratch, want))) {
        ctx->scratch = NULL;
        return NULL;
    }
    ctx->scratch_bytes = want;
    return ctx->scratch;
}

/* ---- Reserve: every temporary sized before the first step ------------------------------- */

/* The scratch requests of the ops, for the largest shapes (must match the calls of
 * pt_kcuda_scratch in norm.cu, matmul.cu, attention.cu, embed.cu and moe.cu):
 * - LayerNorm/RMSNorm backward: 2 (LayerNorm) · chunks(n) · h fp32 partials;
 * - matmul_backward's dbias: chunks(n) · oc fp32 partials (the column sum), or oc fp32
 *   (cuBLASLt's BGRADB epilogue writes the column sums there before they are added);
 * - attention_backward: b·sq·a fp32 (rowsum(dout ∘ out)); through cuDNN, the same
 *   row sums, bf16 dq, dk and dv (needed only when it accumulates), with
 *   PT_KCUDA_DETERMINISTIC=0 the fp32 dQ_accum, and cuDNN's workspace
 *   (cudnn_attn_workspace);
 * - embed_backward with dwte: four int32 arrays of b·s, each rounded up to 256 bytes,
 *   the sums of long runs' pieces (pt_kcuda_embed_pieces_bytes, with cols for h) and
 *   CUB's radix sort space for b·s pairs over the key bits of vr.
 * - moe_dispatch_plan: four int32 arrays of n·k and two int64 arrays of E + 1, each
 *   rounded up to 256 bytes, and CUB's radix sort space for n·k pairs over the key bits
 *   of E (pt_kcuda_moe_plan_bytes, with moe_assign and moe_experts).
 * chunks(n) is not monotonic in n (pt_kcuda_chunk_rows jumps at 64·256 rows), so its
 * bound for every n <= rows is used: min(ceil(rows / 64), PT_KCUDA_MAX_CHUNKS). Sums of
 * squares and the FP8 ops' partial results use their own buffers (ctx->sumsq_part,
 * ctx->fp8_part), not scratch. */
#ifdef PT_KCUDA_HAVE_CUDNN
/* cuDNN's own workspace for its fused attention backward at the shape's largest call.
 * With deterministic engines only (attention_cudnn.cu) it keeps dP, the gradient of
 * the scores, there: b·a·sq·skv bf16, both lengths padded to 64, as cudnn-frontend
 * sizes its "dP workspace" implementation, which it forces for a deterministic
 * backward on Hopper (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h).
 * Reserve counts it because cuDNN declines a backward whose workspace is over the cap
 * or was not reserved, and our kernels then run it (the code notes in docs/results/).
 * 0 without attention, or when the size does not fit a size_t. */
static size_t cudnn_attn_workspace(const pt_k_scratch_shape *sh)
{
    if (sh->heads <= 0 || sh->head_dim <= 0 || sh->attn_batch <= 0 || sh->attn_seq <= 0)
        return 0;
    uint64_t s = ((uint64_t)sh->attn_seq + 63) / 64 * 64, bytes; /* s < 2^32: s²·2 fits */
    if (__builtin_mul_overflow((uint64_t)sh->attn_batch * (uint64_t)sh->heads, s * s * 2,
                               &bytes))
        return 0;
    /* and a margin, 1/16 and 32 MiB: what else the engine keeps there is not documented,
     * and a workspace a little over the reserve would send every backward to our
     * kernels */
    uint64_t margin = bytes / 16 + ((uint64_t)32 << 20);
    if (bytes > (uint64_t)SIZE_MAX - margin - 255)
        return 0;
    return (size_t)(bytes + margin + 255) / 256 * 256;
}
#endif

/* Whether attention runs through cuDNN (ctx->cudnn, attention_cudnn.cu), whose backward's
 * temporaries reserve then counts: not in a build without cuDNN, with PT_KCUDA_ATTN=own
 * or PT_KCUDA_SIMPLE_ATTN, or where cuDNN did not open, when our kernels run it all. */
static bool attn_cudnn(pt_kernels *kn) { return pt_kcuda_ctx(kn)->cudnn != NULL; }

/* Whether reserve holds cuDNN's attention workspace for the shape: attention runs
 * through cuDNN and the workspace is not over the cap (ctx->attn_ws_cap). */
static bool attn_ws_reserved(pt_kernels *kn, const pt_k_scratch_shape *sh)
{
#ifdef PT_KCUDA_HAVE_CUDNN
    return attn_cudnn(kn) && cudnn_attn_workspace(sh) <= pt_kcuda_ctx(kn)->attn_ws_cap;
#else
    (void)kn;
    (void)sh;
    return false;
#endif
}

/* cudnn: cuDNN's attention backward's temporaries counted (attn_cudnn); with_ws: and its
 * workspace (cudnn_attn_workspace); accum_dq: and the fp32 dQ_accum of its
 * nondeterministic graph (PT_KCUDA_DETERMINISTIC=0) */
static size_t scratch_need(const pt_k_scratch_shape *sh, bool cudnn, bool with_ws,
                           bool accum_dq)
{
    (void)cudnn; /* without cuDNN in the build there is nothing of it to count */
    (void)with_ws;
    (void)accum_dq;
    size_t need = 0;
    int64_t rows = sh->rows > 0 ? sh->rows : 0;
    int64_t chunks = (rows + 63) / 64;
    if (chunks > PT_KCUDA_MAX_CHUNKS)
        chunks = PT_KCUDA_MAX_CHUNKS;
    if (sh->cols > 0) {
        size_t partials = 2 * (size_t)chunks * (size_t)sh->cols * sizeof(float);
        size_t bgrad = (size_t)sh->cols * sizeof(float);
        need = partials > need ? partials : need;
        need = bgrad > need ? bgrad : need;
    }
    if (sh->heads > 0) {
        size_t dsum = (size_t)rows * (size_t)sh->heads * sizeof(float);
        need = dsum > need ? dsum : need;
#ifdef PT_KCUDA_HAVE_CUDNN
        /* attention_cudnn.cu's backward: softmax_sum (b·sq·a fp32, 256-byte rounded)
         * and bf16 dq, dk, dv (used only when a call accumulates; the shape does not
         * say whether one will, so always counted); with with_ws cuDNN's own workspace
         * as well (a call whose temporaries do not fit after reserve runs on our
         * kernels instead) */
        if (cudnn && sh->head_dim > 0) {
            size_t parts = ((size_t)rows * (size_t)(sh->heads + 2 * sh->kv_heads) *
                            (size_t)sh->head_dim) * 2;
            size_t cudnn = (dsum + 255) / 256 * 256 + parts;
            if (accum_dq) /* b·sq·a·d fp32: twice the bf16 dq of parts */
                cudnn += ((size_t)rows * (size_t)sh->heads * (size_t)sh->head_dim * 4 + 255) /
                         256 * 256;
            size_t ws = with_ws ? cudnn_attn_workspace(sh) : 0;
            cudnn = ws <= SIZE_MAX - cudnn ? cudnn + ws : cudnn;
            need = cudnn > need ? cudnn : need;
        }
#endif
    }
    if (sh->vocab_rows > 0 && rows > 0 && rows <= INT32_MAX) {
        int bits = 1;
        while (bits < 31 && (1ll << bits) <= sh->vocab_rows)
            bits++;
        size_t cub_bytes = 0, arr = ((size_t)rows * sizeof(int32_t) + 255) / 256 * 256;
        cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const int32_t *)NULL, (int32_t *)NULL,
                                        (const int32_t *)NULL, (int32_t *)NULL, (int)rows, 0,
                                        bits);
        size_t sort = 4 * arr + pt_kcuda_embed_pieces_bytes(rows, sh->cols) + cub_bytes;
        need = sort > need ? sort : need;
    }
    if (sh->moe_assign > 0 && sh->moe_experts > 0) {
        size_t plan = pt_kcuda_moe_plan_bytes(sh->moe_assign, sh->moe_experts);
        need = plan > need ? plan : need;
    }
    return need;
}

size_t pt_kcuda_scratch_bytes(pt_kernels *kn, const pt_k_scratch_shape *shape)
{
    size_t need = scratch_need(shape, attn_cudnn(kn), attn_ws_reserved(kn, shape),
                               kn->nondeterministic);
    int count = shape->adamw_tensors > 0 ? shape->adamw_tensors : 0;
    if (need > 0 && need < PT_KCUDA_SCRATCH_MIN) /* what pt_kcuda_scratch allocates */
        need = PT_KCUDA_SCRATCH_MIN;
    return need + (size_t)count * sizeof(struct pt_kcuda_adamw_desc);
}

int pt_kcuda_reserve(pt_kernels *kn, const pt_k_scratch_shape *shape)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    bool cudnn = attn_cudnn(kn);
    bool acc = kn->nondeterministic;
    size_t base = scratch_need(shape, cudnn, false, acc),
           full = scratch_need(shape, cudnn, true, acc);
    size_t need = attn_ws_reserved(kn, shape) ? full : base;
    if (need < full)
        pt_kcuda_note(kn, "cuDNN's attention backward wants %zu MiB of workspace, over the "
                      "%zu MiB cap: not reserved", (full - base) >> 20,
                      ctx->attn_ws_cap >> 20);
    ctx->steady = 0; /* lets pt_kcuda_scratch grow once more */
    if (need > ctx->scratch_bytes && !pt_kcuda_scratch(kn, need)) {
        if (base == need)
            return -1;
        /* cuDNN's attention workspace does not fit beside the model: its backward is
         * then declined (and said once) and runs on our kernels */
        pt_kcuda_note(kn, "%s; reserving %zu bytes instead, without cuDNN's attention "
                      "workspace", kn->err, base);
        kn->err[0] = '\0';
        cudaGetLastError(); /* the failed allocation leaves nothing for sync() */
        if (base > ctx->scratch_bytes && !pt_kcuda_scratch(kn, base))
            return -1;
    }
    if (pt_kcuda_adamw_grow(kn, shape->adamw_tensors))
        return -1;
    ctx->steady = 1;
    return kn->err[0] ? -1 : 0;
}

/* ---- Deterministic column reductions, second pass --------------------------------------- */

/* dst[c] += the sum over chunks of partials[chunk][c] (blockIdx.y 1: dst2 from the
 * partials that follow), each column's chunks in 8 slices (chunk = ty mod 8) summed
 * apart, then in slice order: a thread adds 32 partials at n >= 16384 rows rather than
 * 256 in one dependent chain, and both outputs take one launch: faster than a thread a
 * column called once per output (the code notes in docs/results/).
 * Block (32 columns, 8 slices), grid (column tiles, 1 or 2). */
__global__ void sum_partials_kernel(float *dst, float *dst2, const float *partials, int chunks,
                                    int cols)
{
    __shared__ float s[8][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    const float *p = partials + (int64_t)blockIdx.y * chunks * cols;
    float acc = 0.0f;
    if (c < cols)
#pragma unroll 8
        for (int i = ty; i < chunks; i += 8)
            acc += p[(int64_t)i * cols + c];
    float sum = pt_fold_slices(s, acc);
    if (ty == 0 && c < cols)
        (blockIdx.y ? dst2 : dst)[c] += sum;
}

void pt_kcuda_sum_partials(pt_kernels *kn,
                           float *dst,             /* (cols) fp32, += */
                           float *dst2,            /* (cols) fp32, += , or NULL */
                           const float *partials,  /* (1 or 2, chunks, cols) fp32 */
                           int chunks, int cols)
{
    if (cols <= 0)
        return;
    PT_LAUNCH(dim3((unsigned)((cols + 31) / 32), dst2 ? 2 : 1), dim3(32, 8), 0,
              pt_kcuda_ctx(kn)->stream, sum_partials_kernel)(dst, dst2, partials, chunks, cols);
    PT_LAUNCHED(kn, "sum_partials");
}

/* ---- Memory and synchronisation -------------------------------------------------------- */

void *pt_kcuda_alloc(pt_kernels *kn, size_t bytes)
{
    (void)kn;
    void *p = NULL;
    /* cudaMalloc aligns to at least 256 bytes, more than the 64 kernels.h promises */
    if (cudaMalloc(&p, bytes ? bytes : 64) != cudaSuccess) {
        cudaGetLastError(); /* out of memory is not sticky: leave no trace for sync() */
        return NULL;
    }
    return p;
}

void pt_kcuda_free(pt_kernels *kn, void *p)
{
    if (p)
        PT_CU(kn, cudaFree(p));
}

void pt_kcuda_copy(pt_kernels *kn, void *dst, const void *src, size_t bytes, pt_kcopy dir)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (!bytes)
        return;
    switch (dir) {
    case PT_KCOPY_H2H:
        /* host memory on both sides: nothing queued can touch it */
        memmove(dst, src, bytes);
        break;
    case PT_KCOPY_H2D:
        /* returns once src may be reused (pageable memory is staged first) */
        PT_CU(kn, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream));
        break;
    case PT_KCOPY_D2H:
        /* the caller reads dst next, as on the CPU backend: wait for the copy */
        if (!PT_CU(kn, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream)))
            PT_CU(kn, cudaStreamSynchronize(ctx->stream));
        break;
    case PT_KCOPY_D2D:
        PT_CU(kn, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
        break;
    }
}

void pt_kcuda_copy_rows(pt_kernels *kn, void *dst, size_t dst_pitch, const void *src,
                        size_t src_pitch, size_t row_bytes, size_t rows)
{
    if (!rows || !row_bytes)
        return;
    PT_CU(kn, cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                cudaMemcpyDeviceToDevice, pt_kcuda_ctx(kn)->stream));
}

void pt_kcuda_zero(pt_kernels *kn, void *p, size_t bytes)
{
    if (bytes)
        PT_CU(kn, cudaMemsetAsync(p, 0, bytes, pt_kcuda_ctx(kn)->stream));
}

int pt_kcuda_sync(pt_kernels *kn)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    PT_CU(kn, cudaStreamSynchronize(ctx->main_stream));
    if (ctx->side)
        PT_CU(kn, cudaStreamSynchronize(ctx->side));
    PT_CU(kn, cudaGetLastError());
    return kn->err[0] ? -1 : 0;
}

/* ---- The side stream ---------------------------------------------------------------------- */

/* The side stream, its two ordering events and its cuBLASLt workspace, made once. */
static int side_open(pt_kernels *kn)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (ctx->side)
        return 0;
    cudaStream_t s = NULL;
    /* blocking, as the main stream: ordered with the legacy default stream */
    if (PT_CU(kn, cudaStreamCreate(&s)) ||
        PT_CU(kn, cudaEventCreateWithFlags(&ctx->side_ev[0], cudaEventDisableTiming)) ||
        PT_CU(kn, cudaEventCreateWithFlags(&ctx->side_ev[1], cudaEventDisableTiming)) ||
        PT_CU(kn, cudaMalloc(&ctx->lt_ws_side, ctx->lt_ws_bytes))) {
        if (s)
            cudaStreamDestroy(s);
        return -1;
    }
    ctx->side = s;
    return 0;
}

void pt_kcuda_stream_select(pt_kernels *kn, int side)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (!side) {
        ctx->stream = ctx->main_stream;
        return;
    }
    if (ctx->stream == ctx->side && ctx->side)
        return;
    /* a failure is recorded; the ops then stay on the main stream, in order */
    if (side_open(kn) || PT_CU(kn, cudaEventRecord(ctx->side_ev[0], ctx->main_stream)) ||
        PT_CU(kn, cudaStreamWaitEvent(ctx->side, ctx->side_ev[0], 0)))
        return;
    ctx->stream = ctx->side;
}

void pt_kcuda_stream_join(pt_kernels *kn)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (!ctx->side)
        return;
    if (!PT_CU(kn, cudaEventRecord(ctx->side_ev[1], ctx->side)))
        PT_CU(kn, cudaStreamWaitEvent(ctx->main_stream, ctx->side_ev[1], 0));
}

/* ---- Device timers ----------------------------------------------------------------------- */

/* A free event of the pool: a released one, or a new one with timing on
 * (cudaEventDefault); its index, or -1. */
static int take_event(pt_kernels *kn)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (ctx->n_free > 0)
        return ctx->free_events[--ctx->n_free];
    if (ctx->n_events == ctx->cap_events) {
        int cap = ctx->cap_events ? 2 * ctx->cap_events : 256;
        cudaEvent_t *e = (cudaEvent_t *)realloc(ctx->events, (size_t)cap * sizeof *e);
        if (e)
            ctx->events = e;
        int *f = e ? (int *)realloc(ctx->free_events, (size_t)cap * sizeof *f) : NULL;
        if (!f) {
            pt_kcuda_fail(kn, __FILE__, __LINE__, "out of host memory for %d timing events",
                          cap);
            return -1;
        }
        ctx->free_events = f;
        ctx->cap_events = cap;
    }
    if (PT_CU(kn, cudaEventCreate(&ctx->events[ctx->n_events])))
        return -1;
    return ctx->n_events++;
}

int pt_kcuda_event_record(pt_kernels *kn, int *event)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (*event < 0 && (*event = take_event(kn)) < 0)
        return -1;
    if (*event >= ctx->n_events) {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "timing event %d: the pool holds %d", *event,
                      ctx->n_events);
        return -1;
    }
    return PT_CU(kn, cudaEventRecord(ctx->events[*event], ctx->stream));
}

int pt_kcuda_event_elapsed(pt_kernels *kn, int from, int to, double *ms)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (from < 0 || to < 0 || from >= ctx->n_events || to >= ctx->n_events) {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "timing events %d, %d: the pool holds %d", from,
                      to, ctx->n_events);
        return -1;
    }
    float f = 0;
    if (PT_CU(kn, cudaEventElapsedTime(&f, ctx->events[from], ctx->events[to])))
        return -1;
    *ms = f;
    return 0;
}

void pt_kcuda_event_release(pt_kernels *kn, int event)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    /* every handed-out index fits: n_free < n_events <= cap_events */
    if (event >= 0 && event < ctx->n_events && ctx->n_free < ctx->n_events)
        ctx->free_events[ctx->n_free++] = event;
}

/* ---- Lifetime ----------------------------------------------------------------------------- */

void pt_kcuda_destroy(pt_kernels *kn)
{
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (ctx) {
        if (ctx->main_stream)
            cudaStreamSynchronize(ctx->main_stream);
        if (ctx->side) {
            cudaStreamSynchronize(ctx->side);
            cudaStreamDestroy(ctx->side);
            cudaEventDestroy(ctx->side_ev[0]);
            cudaEventDestroy(ctx->side_ev[1]);
        }
        cudaFree(ctx->lt_ws_side);
        for (int i = 0; i < ctx->n_events; i++)
            cudaEventDestroy(ctx->events[i]);
        free(ctx->events);
        free(ctx->free_events);
#ifdef PT_KCUDA_HAVE_CUDNN
        pt_kcuda_cudnn_destroy(kn);
#endif
        if (ctx->lt)
            cublasLtDestroy(ctx->lt);
        cudaFree(ctx->lt_ws);
        cudaFree(ctx->scratch);
        cudaFree(ctx->sumsq_part);
        cudaFree(ctx->ortho_part);
        cudaFree(ctx->fp8_part);
        cudaFree(ctx->fp8_colpart);
        cudaFree(ctx->fp8_scale_slots);
        cudaFree(ctx->adamw_table);
        free(ctx->adamw_host);
        if (ctx->host_sum)
            cudaFreeHost(ctx->host_sum);
        if (ctx->main_stream)
            cudaStreamDestroy(ctx->main_stream);
        free(ctx);
    }
    free(kn);
}

/* ---- The table ---------------------------------------------------------------------------- */

static pt_kernels cuda_table(void)
{
    pt_kernels t;
    memset(&t, 0, sizeof t);
    t.name = "cuda";
    t.act_dtype = PT_KDTYPE_BF16;
    t.destroy = pt_kcuda_destroy;
    t.alloc = pt_kcuda_alloc;
    t.free = pt_kcuda_free;
    t.copy = pt_kcuda_copy;
    t.copy_rows = pt_kcuda_copy_rows;
    t.zero = pt_kcuda_zero;
    t.sync = pt_kcuda_sync;
    t.scratch_bytes = pt_kcuda_scratch_bytes;
    t.reserve = pt_kcuda_reserve;
    t.event_record = pt_kcuda_event_record;
    t.event_elapsed = pt_kcuda_event_elapsed;
    t.event_release = pt_kcuda_event_release;
    t.embed_forward = pt_kcuda_embed_forward;
    t.embed_backward = pt_kcuda_embed_backward;
    t.layernorm_forward = pt_kcuda_layernorm_forward;
    t.layernorm_backward = pt_kcuda_layernorm_backward;
    t.rmsnorm_forward = pt_kcuda_rmsnorm_forward;
    t.rmsnorm_backward = pt_kcuda_rmsnorm_backward;
    t.residual_layernorm_forward = pt_kcuda_residual_layernorm_forward;
    t.residual_rmsnorm_forward = pt_kcuda_residual_rmsnorm_forward;
    t.matmul_forward = pt_kcuda_matmul_forward;
    t.matmul_backward = pt_kcuda_matmul_backward;
    t.matmul_forward_gelu = pt_kcuda_matmul_forward_gelu;
    t.matmul_forward_res = pt_kcuda_matmul_forward_res;
    t.matmul_dgrad = pt_kcuda_matmul_dgrad;
    t.matmul_forward_shared = pt_kcuda_matmul_forward_shared;
    t.matmul_wgrad_shared = pt_kcuda_matmul_wgrad_shared;
    t.matmul_backward_dgelu = pt_kcuda_matmul_backward_dgelu;
    t.gemm = pt_kcuda_gemm;
    t.gemm_f32 = pt_kcuda_gemm_f32;
    t.stream_select = pt_kcuda_stream_select;
    t.stream_join = pt_kcuda_stream_join;
    t.orthonormalize = pt_kcuda_orthonormalize;
    t.moe_route_forward = pt_kcuda_moe_route_forward;
    t.moe_route_backward = pt_kcuda_moe_route_backward;
    t.moe_score_colsum = pt_kcuda_moe_score_colsum;
    t.moe_dispatch_plan = pt_kcuda_moe_dispatch_plan;
    t.moe_gather_rows = pt_kcuda_moe_gather_rows;
    t.moe_gather_rows_backward = pt_kcuda_moe_gather_rows_backward;
    t.moe_combine_forward = pt_kcuda_moe_combine_forward;
    t.moe_combine_backward = pt_kcuda_moe_combine_backward;
    t.matmul_grouped_forward = pt_kcuda_matmul_grouped_forward;
    t.matmul_grouped_backward = pt_kcuda_matmul_grouped_backward;
    t.rope_forward = pt_kcuda_rope_forward;
    t.rope_backward = pt_kcuda_rope_backward;
    t.attention_forward = pt_kcuda_attention_forward;
    t.attention_backward = pt_kcuda_attention_backward;
    t.attention_combine = pt_kcuda_attention_combine;
    t.gelu_forward = pt_kcuda_gelu_forward;
    t.gelu_backward = pt_kcuda_gelu_backward;
    t.gelu_forward_amax = pt_kcuda_gelu_forward_amax;
    t.gelu_backward_amax = pt_kcuda_gelu_backward_amax;
    t.swiglu_forward = pt_kcuda_swiglu_forward;
    t.swiglu_backward = pt_kcuda_swiglu_backward;
    t.residual_forward = pt_kcuda_residual_forward;
    t.residual_backward = pt_kcuda_residual_backward;
    t.dropout_forward = pt_kcuda_dropout_forward;
    t.dropout_backward = pt_kcuda_dropout_backward;
    t.crossentropy = pt_kcuda_crossentropy;
    t.ce_local_max = pt_kcuda_ce_local_max;
    t.ce_local_sumexp = pt_kcuda_ce_local_sumexp;
    t.ce_local_target = pt_kcuda_ce_local_target;
    t.ce_finalize = pt_kcuda_ce_finalize;
    t.adamw = pt_kcuda_adamw;
    t.sumsq = pt_kcuda_sumsq;
    t.sumsq_acc = pt_kcuda_sumsq_acc;
    t.sum_acc = pt_kcuda_sum_acc;
    t.adamw_multi = pt_kcuda_adamw_multi;
    t.f32_to_bf16 = pt_kcuda_f32_to_bf16;
    t.bf16_to_f32 = pt_kcuda_bf16_to_f32;
    t.add_f32 = pt_kcuda_add_f32;
    t.fp8_amax = pt_kcuda_fp8_amax;
    t.fp8_scale = pt_kcuda_fp8_scale;
    t.fp8_amax_scale = pt_kcuda_fp8_amax_scale;
    t.fp8_cast_dbias = pt_kcuda_fp8_cast_dbias;
    t.fp8_cast = pt_kcuda_fp8_cast;
    t.gemm_fp8 = pt_kcuda_gemm_fp8;
    return t;
}

static void set_err(char *err, size_t cap, const char *fmt, ...)
{
    if (!err || !cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

int pt_kernels_cuda_devices(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

/* The attention entries, from PT_KCUDA_ATTN: unset, "" or "auto" use cuDNN's fused
 * attention where this build has cuDNN and it opens (attention_cudnn.cu; our kernels run
 * the calls it declines), "own" only our kernels (the reference; also what auto means
 * with PT_KCUDA_SIMPLE_ATTN set), "cudnn" cuDNN for every call (an error where it is
 * missing or declines). 0, or -1 with kn->err set. */
static int select_attention(pt_kernels *kn)
{
    const char *mode = getenv("PT_KCUDA_ATTN");
    const char *simple = getenv("PT_KCUDA_SIMPLE_ATTN");
    bool required = mode && strcmp(mode, "cudnn") == 0;
    if (mode && mode[0] && strcmp(mode, "auto") != 0 && strcmp(mode, "own") != 0 &&
        !required) {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "PT_KCUDA_ATTN=%s: want auto, own or cudnn",
                      mode);
        return -1;
    }
    if ((mode && strcmp(mode, "own") == 0) ||
        (!required && simple && simple[0] && strcmp(simple, "0") != 0))
        return 0;
#ifdef PT_KCUDA_HAVE_CUDNN
    if (pt_kcuda_cudnn_init(kn, required, kn->nondeterministic))
        return -1;
    if (pt_kcuda_ctx(kn)->cudnn) {
        kn->attention_forward = pt_kcuda_cudnn_attention_forward;
        kn->attention_backward = pt_kcuda_cudnn_attention_backward;
    }
    return 0;
#else
    if (required)
        pt_kcuda_fail(kn, __FILE__, __LINE__, "PT_KCUDA_ATTN=cudnn: ptkernels was built "
                      "without cuDNN");
    return required ? -1 : 0;
#endif
}

/* Determinism, from PT_KCUDA_DETERMINISTIC: unset, "" or "1" keep kernels.h's promise
 * of bit-identical reruns; "0" lets cuDNN's attention backward take the graph that sums
 * dQ over key blocks in fp32 with atomics (attention_cudnn.cu, backward_graph), the one
 * PyTorch's cuDNN attention runs, which is faster than the deterministic graph
 * (the code notes in docs/results/). No other kernel changes; kn->nondeterministic
 * keeps a recorded run's timings out of the cost tables (runtime/trainer_log.c). 0, or
 * -1 with kn->err set. */
static int select_determinism(pt_kernels *kn)
{
    const char *mode = getenv("PT_KCUDA_DETERMINISTIC");
    if (!mode || !mode[0] || strcmp(mode, "1") == 0)
        kn->nondeterministic = 0;
    else if (strcmp(mode, "0") == 0)
        kn->nondeterministic = 1;
    else {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "PT_KCUDA_DETERMINISTIC=%s: want 1 or 0", mode);
        return -1;
    }
    return 0;
}

/* The fused GEMM epilogues of matmul.cu (GELU_AUX_BIAS, DGELU, BGRADB), from
 * PT_KCUDA_EPILOGUES: unset, "" or "auto" use them on compute capability 9.0 and newer
 * and compose the unfused ops below it, "on" always asks cuBLASLt for them (it may still
 * decline a call), "off" never does. auto follows llm.c (karpathy/llm.c, train_gpt2.cu,
 * option -ge: "gelu fusion ... default: 2 for >=SM90, 0 for older GPUs"; its pull
 * request 338 found cuBLASLt's bf16 GELU fusion slower than its own GELU kernel on an
 * older GPU); the bias-gradient epilogue follows the
 * same switch (one user measured it faster for a 1.5-billion-parameter BERT and slower
 * for a 10-billion one on A100s, NVIDIA/CUDALibrarySamples issue 90), so that one
 * variable compares every fusion against its composed form. 0, or -1 with kn->err set. */
static int select_epilogues(pt_kernels *kn, const cudaDeviceProp *prop)
{
    const char *mode = getenv("PT_KCUDA_EPILOGUES");
    pt_kcuda *ctx = pt_kcuda_ctx(kn);
    if (!mode || !mode[0] || strcmp(mode, "auto") == 0)
        ctx->epilogues = prop->major >= 9;
    else if (strcmp(mode, "on") == 0)
        ctx->epilogues = 1;
    else if (strcmp(mode, "off") == 0)
        ctx->epilogues = 0;
    else {
        pt_kcuda_fail(kn, __FILE__, __LINE__, "PT_KCUDA_EPILOGUES=%s: want auto, on or off",
                      mode);
        return -1;
    }
    return 0;
}

/* Appends to kn->about at *at while it has room (snprintf cuts what does not fit). */
static void about_add(pt_kernels *kn, size_t *at, const char *fmt, ...)
{
    if (*at >= sizeof kn->about)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(kn->about + *at, sizeof kn->about - *at, fmt, ap);
    va_end(ap);
    *at += n > 0 ? (size_t)n : 0;
}

/* kn->about: the device and the versions of what the backend runs through, each as the
 * library reports it (NVIDIA's encodings: CUDA's major·1000 + minor·10; cuBLASLt's
 * and cuDNN's major·10000 + minor·100 + patch since cuBLAS 11 and cuDNN 9), and the
 * driver's release as its kernel module states it in /proc/driver/nvidia/version (the
 * runtime's cudaDriverGetVersion gives only the CUDA version the driver supports). */
static void describe(pt_kernels *kn, const cudaDeviceProp *prop)
{
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    size_t lt = cublasLtGetVersion();
    char release[64] = "", text[512];
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (f) {
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = '\0';
        fclose(f);
        pt_nvidia_driver_release(text, release, sizeof release);
    }
    size_t at = 0;
    about_add(kn, &at, "%.120s (compute capability %d.%d, %d SMs); ", prop->name, prop->major,
              prop->minor, prop->multiProcessorCount);
    if (release[0])
        about_add(kn, &at, "driver %s, ", release);
    about_add(kn, &at, "CUDA driver API %d.%d, runtime %d.%d; cuBLASLt %zu.%zu.%zu",
              driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10,
              lt / 10000, lt / 100 % 100, lt % 100);
#ifdef PT_KCUDA_HAVE_CUDNN
    size_t dnn = pt_kcuda_cudnn_version();
    about_add(kn, &at, "; cuDNN %zu.%zu.%zu", dnn / 10000, dnn / 100 % 100, dnn % 100);
#endif
    if (kn->nondeterministic && pt_kcuda_ctx(kn)->cudnn)
        about_add(kn, &at, "; nondeterministic (PT_KCUDA_DETERMINISTIC=0)");
}

pt_kernels *pt_kernels_cuda(int device, char *err, size_t cap)
{
    int count = 0;
    cudaError_t st = cudaGetDeviceCount(&count);
    if (st != cudaSuccess || count == 0) {
        set_err(err, cap, "CUDA device %d: no CUDA device (%s)", device,
                st != cudaSuccess ? cudaGetErrorString(st) : "the driver reports none");
        cudaGetLastError();
        return NULL;
    }
    if (device < 0 || device >= count) {
        set_err(err, cap, "CUDA device %d: no such device (%d present)", device, count);
        return NULL;
    }
    cudaDeviceProp prop;
    if ((st = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
        set_err(err, cap, "CUDA device %d: %s", device, cudaGetErrorString(st));
        return NULL;
    }
    if (prop.major < 8) {
        set_err(err, cap, "CUDA device %d (%s): compute capability %d.%d, need 8.0 or newer "
                "(bf16)", device, prop.name, prop.major, prop.minor);
        return NULL;
    }
    if ((st = cudaSetDevice(device)) != cudaSuccess) {
        set_err(err, cap, "CUDA device %d: %s", device, cudaGetErrorString(st));
        return NULL;
    }

    pt_kernels *kn = (pt_kernels *)calloc(1, sizeof *kn);
    pt_kcuda *ctx = (pt_kcuda *)calloc(1, sizeof *ctx);
    if (!kn || !ctx) {
        free(kn);
        free(ctx);
        set_err(err, cap, "CUDA device %d: out of host memory", device);
        return NULL;
    }
    *kn = cuda_table();
    kn->priv = ctx;
    ctx->device = device;
    ctx->sm_count = prop.multiProcessorCount;
    ctx->smem_optin = prop.sharedMemPerBlockOptin;
    ctx->lt_ws_bytes = PT_KCUDA_LT_WORKSPACE;
    ctx->attn_ws_cap = prop.totalGlobalMem / 8 > ((size_t)1 << 30) ? prop.totalGlobalMem / 8
                                                                    : (size_t)1 << 30;
    const char *no_lt = getenv("PT_KCUDA_NO_LT");
    ctx->no_lt = no_lt && no_lt[0] && strcmp(no_lt, "0") != 0;

    /* a blocking stream: it stays ordered with work others queue on the legacy default
     * stream (plain cudaMemcpy), which a non-blocking one would race */
    bool failed = select_epilogues(kn, &prop) || PT_CU(kn, cudaStreamCreate(&ctx->main_stream));
    ctx->stream = ctx->main_stream;
    if (failed || PT_LT(kn, cublasLtCreate(&ctx->lt)) ||
        PT_CU(kn, cudaMalloc(&ctx->lt_ws, ctx->lt_ws_bytes)) ||
        PT_CU(kn, cudaMallocHost((void **)&ctx->host_sum, sizeof(double))) ||
        PT_CU(kn, cudaMalloc((void **)&ctx->sumsq_part,
                             (PT_KCUDA_SUMSQ_BLOCKS + 1) * sizeof(double))) ||
        PT_CU(kn, cudaMalloc((void **)&ctx->ortho_part, (size_t)PT_KCUDA_ORTHO_BLOCKS *
                                                            (PT_K_ORTHO_MAX_COLS + 1) *
                                                            sizeof(double))) ||
        PT_CU(kn, cudaMalloc((void **)&ctx->fp8_part,
                             PT_KCUDA_FP8_BLOCKS * sizeof(struct pt_kcuda_fp8_part))) ||
        PT_CU(kn, cudaMalloc((void **)&ctx->fp8_colpart,
                             (size_t)PT_KCUDA_FP8_BLOCKS * 64 * sizeof(float))) ||
        PT_CU(kn, cudaMalloc((void **)&ctx->fp8_scale_slots, 64)) ||
        pt_kcuda_loss_init(kn) || pt_kcuda_attention_init(kn) || select_determinism(kn) ||
        select_attention(kn)) {
        set_err(err, cap, "CUDA device %d (%s): %s", device, prop.name, kn->err);
        pt_kcuda_destroy(kn);
        return NULL;
    }
    describe(kn, &prop);
    return kn;
}
