/*
 * Token and position embedding on CUDA, including the vocab-parallel form (a rank holds
 * token rows [v0, v0+vr) and produces a partial sum). The backward must add the
 * gradients of repeated tokens without atomics: the (token, position) pairs of the
 * micro-batch are sorted by token with CUB's stable radix sort (part of the CUDA
 * toolkit), so each token's positions come out in position order. The sorted entries
 * are cut into windows of EMB_PIECE: a run of one token inside one window is added into
 * its row of dwte in position order, as the CPU loop adds it (the same fp32 result); a
 * run across windows is cut at their edges into pieces, each summed on its own, and the
 * pieces are then added to the row in order: a fixed order, so the result is the same
 * on every run, within fp32 rounding of the CPU's. O(b·s·h) work. dwpe sums over the
 * batch in order.
 */
#include <cub/device/device_radix_sort.cuh>

#include "cuda.cuh"

__global__ void embed_forward_kernel(bf16 *out, const int32_t *tokens, const bf16 *wte,
                                     const bf16 *wpe, int s, int h, int v0, int vr, int pos0)
{
    int64_t row = blockIdx.x; /* bi · s + si */
    int si = (int)(row % s);
    int tok = tokens[row] - v0;
    int in = tok >= 0 && tok < vr;
    const bf16 *te = wte + (int64_t)(in ? tok : 0) * h;
    const bf16 *pe = wpe ? wpe + (int64_t)(pos0 + si) * h : NULL;
    for (int i = threadIdx.x; i < h; i += blockDim.x) {
        float x = in ? pt_ld(te + i) : 0.0f;
        if (pe)
            x = in ? x + pt_ld(pe + i) : pt_ld(pe + i);
        pt_st(out + row * h + i, x);
    }
}

void pt_kcuda_embed_forward(pt_kernels *kn,
                            float *out,             /* (b, s, h) [act] */
                            const int32_t *tokens,  /* (b, s) */
                            const float *wte,       /* (vr, h) [act] */
                            const float *wpe,       /* (>= pos0+s, h) [act] or NULL */
                            int b, int s, int h, int v0, int vr, int pos0)
{
    int64_t rows = (int64_t)b * s;
    if (rows <= 0)
        return;
    PT_LAUNCH((unsigned)rows, 128, 0, pt_kcuda_ctx(kn)->stream, embed_forward_kernel)((bf16 *)out,
        tokens, (const bf16 *)wte, (const bf16 *)wpe, s, h, v0, vr, pos0);
    PT_LAUNCHED(kn, "embed_forward");
}

/* The dwte kernels' shape: a block is one warp that owns a slice of EMB_SLICE columns
 * (two per thread) of one window of EMB_PIECE sorted entries, the longest chain of adds
 * one after another; each thread keeps EMB_UNROLL entries' loads in flight. */
enum { EMB_WARP = 32, EMB_SLICE = 2 * EMB_WARP, EMB_UNROLL = 16, EMB_PIECE = 256 };

/* the sort's input: this rank's rows of dwte get their token (relative to v0) as key,
 * the others vr (sorted last, never added); positions as values */
__global__ void embed_keys_kernel(int32_t *keys, int32_t *pos, const int32_t *tokens,
                                  int64_t rows, int v0, int vr)
{
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < rows;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int t = tokens[p] - v0;
        keys[p] = t >= 0 && t < vr ? t : vr;
        pos[p] = (int32_t)p;
    }
}

/* Where a piece of a run across windows keeps its sums: two slots per window, one for
 * the piece at the window's start (a run that began in an earlier window), one for the
 * piece that starts such a run (at most one a window: the run goes on to the window's
 * end). */
__device__ int64_t emb_slot(int64_t piece, bool run_start)
{
    return 2 * (piece / EMB_PIECE) + (run_start ? 1 : 0);
}

/* Whether the run of token t that starts at sorted entry a goes on past its window. */
__device__ bool emb_across(const int32_t *keys, int64_t a, int64_t rows, int t)
{
    const int64_t next = (a / EMB_PIECE + 1) * EMB_PIECE;
    return next < rows && keys[next] == t;
}

/* The two gradient columns c, c + 1 of dout's row r (in0, in1: which exist), as fp32:
 * one 4-byte load where rows are (h even, dout 4-byte aligned, c even), else two. */
static __device__ __forceinline__ void emb_ld2(float *x0, float *x1, const bf16 *dout, int64_t r,
                                               int h, int c, bool pair, bool in0, bool in1)
{
    const bf16 *p = dout + r * h + c;
    if (pair && in1) {
        const uint32_t u = *reinterpret_cast<const uint32_t *>(p);
        *x0 = __uint_as_float(u << 16);
        *x1 = __uint_as_float(u & 0xffff0000u);
        return;
    }
    *x0 = in0 ? pt_ld(p) : 0.0f;
    *x1 = in1 ? pt_ld(p + 1) : 0.0f;
}

/* Block (x, y) sweeps window x of the sorted entries for its slice y of the columns,
 * adding each run's gradient rows in position order: a run inside the window into its
 * token's row of dwte (from that row's old value), a piece of a run across windows
 * into its slot of `pieces` (from zero). The window's keys and positions are read into
 * shared memory first, so the row loads of EMB_UNROLL entries go out together whatever
 * runs they belong to. One block a window, not one a run: with one block a run a
 * frequent token's run is added one position after another, and byte-level tokens of
 * real text are skewed (about a sixth of the default corpus is spaces). One block a
 * window ran real tokens about as fast as one block a run ran ptprofile's near-uniform
 * ones, and faster than h / EMB_SLICE blocks on each run or a fixed grid of blocks
 * striding over the windows (the code notes in docs/results/). */
__global__ void embed_backward_wte_kernel(float *dwte, float *pieces, const bf16 *dout,
                                          const int32_t *keys, const int32_t *pos,
                                          int64_t rows, int h, int vr)
{
    __shared__ int32_t wkey[EMB_PIECE], wpos[EMB_PIECE];
    const int c = blockIdx.y * EMB_SLICE + 2 * threadIdx.x; /* this thread's two columns */
    const bool in0 = c < h, in1 = c + 1 < h;
    const bool pair = h % 2 == 0 && ((uintptr_t)dout & 3) == 0;
    const int64_t w0 = (int64_t)blockIdx.x * EMB_PIECE;
    const int len = (int)(rows - w0 < EMB_PIECE ? rows - w0 : EMB_PIECE);
    for (int j = threadIdx.x; j < len; j += EMB_WARP) {
        wkey[j] = keys[w0 + j];
        wpos[j] = pos[w0 + j];
    }
    __syncthreads();
    int t = -1; /* the token of the run being added, -1 before the first */
    float acc0 = 0.0f, acc1 = 0.0f, *dst = NULL;
    for (int j0 = 0; j0 < len; j0 += EMB_UNROLL) {
        float x0[EMB_UNROLL], x1[EMB_UNROLL];
#pragma unroll
        for (int u = 0; u < EMB_UNROLL; u++) {
            const int j = j0 + u;
            const bool add = j < len && wkey[j] < vr;
            emb_ld2(&x0[u], &x1[u], dout, add ? wpos[j] : 0, h, c, pair, add && in0,
                    add && in1);
        }
#pragma unroll
        for (int u = 0; u < EMB_UNROLL; u++) {
            const int j = j0 + u;
            if (j >= len || wkey[j] >= vr) /* other ranks' tokens come last */
                break;
            if (wkey[j] != t) { /* a run, or the piece of one in this window, begins */
                if (dst) {
                    if (in0)
                        dst[0] = acc0;
                    if (in1)
                        dst[1] = acc1;
                }
                t = wkey[j];
                const bool run_start = j > 0 || w0 == 0 || keys[w0 - 1] != t;
                const bool piece = !run_start || emb_across(keys, w0 + j, rows, t);
                dst = piece ? pieces + emb_slot(w0 + j, run_start) * h + c
                            : dwte + (int64_t)t * h + c;
                acc0 = in0 && !piece ? dst[0] : 0.0f;
                acc1 = in1 && !piece ? dst[1] : 0.0f;
            }
            acc0 += x0[u];
            acc1 += x1[u];
        }
    }
    if (dst) {
        if (in0)
            dst[0] = acc0;
        if (in1)
            dst[1] = acc1;
    }
}

/* The second pass for runs across windows, block (x, y) for window x: if a run starts
 * there and goes on past its end, the sums of its pieces are added into its token's row
 * of dwte, in order. */
__global__ void embed_backward_pieces_kernel(float *dwte, const float *pieces,
                                             const int32_t *keys, int64_t rows, int h, int vr)
{
    const int c = blockIdx.y * EMB_SLICE + 2 * threadIdx.x;
    const bool in0 = c < h, in1 = c + 1 < h;
    const int64_t w0 = (int64_t)blockIdx.x * EMB_PIECE, next = w0 + EMB_PIECE;
    if (next >= rows)
        return;
    const int t = keys[next - 1];
    const bool starts_here = keys[w0] != t || w0 == 0 || keys[w0 - 1] != t;
    if (t >= vr || keys[next] != t || !starts_here)
        return;
    float *dte = dwte + (int64_t)t * h + c;
    const float *sum = pieces + emb_slot(w0, true) * h + c;
    float acc0 = in0 ? dte[0] + sum[0] : 0.0f, acc1 = in1 ? dte[1] + sum[1] : 0.0f;
    for (int64_t p = next; p < rows && keys[p] == t; p += EMB_PIECE) {
        sum = pieces + emb_slot(p, false) * h + c;
        acc0 += in0 ? sum[0] : 0.0f;
        acc1 += in1 ? sum[1] : 0.0f;
    }
    if (in0)
        dte[0] = acc0;
    if (in1)
        dte[1] = acc1;
}

/* one thread per (si, column): dwpe[pos0 + si] += sum over the batch, in order */
__global__ void embed_backward_wpe_kernel(float *dwpe, const bf16 *dout, int b, int s, int h,
                                          int pos0)
{
    int64_t total = (int64_t)s * h;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t si = e / h, i = e % h;
        float acc = dwpe[(pos0 + si) * h + i];
        for (int bi = 0; bi < b; bi++)
            acc += pt_ld(dout + ((int64_t)bi * s + si) * h + i);
        dwpe[(pos0 + si) * h + i] = acc;
    }
}

size_t pt_kcuda_embed_pieces_bytes(int64_t rows, int64_t h)
{
    /* emb_slot's two slots per window of EMB_PIECE entries, h fp32 each, 256-byte
     * rounded like the other arrays */
    size_t slots = 2 * (size_t)((rows + EMB_PIECE - 1) / EMB_PIECE);
    return (slots * (size_t)h * sizeof(float) + 255) / 256 * 256;
}

void pt_kcuda_embed_backward(pt_kernels *kn,
                             float *dwte,           /* (vr, h) fp32 or NULL */
                             float *dwpe,           /* (>= pos0+s, h) fp32 or NULL */
                             const float *dout,     /* (b, s, h) [act] */
                             const int32_t *tokens, /* (b, s) */
                             int b, int s, int h, int v0, int vr, int pos0)
{
    cudaStream_t st = pt_kcuda_ctx(kn)->stream;
    int64_t rows = (int64_t)b * s;
    if (rows <= 0)
        return;
    if (dwte) {
        if (rows > INT32_MAX) {
            pt_kcuda_fail(kn, __FILE__, __LINE__, "embed_backward: %lld rows", (long long)rows);
            return;
        }
        /* scratch: keys and positions in, sorted keys and positions out, the pieces'
         * sums, CUB's space */
        int bits = 1;
        while (bits < 31 && (1ll << bits) <= vr)
            bits++;
        size_t cub_bytes = 0, arr = ((size_t)rows * sizeof(int32_t) + 255) / 256 * 256;
        size_t piece_bytes = pt_kcuda_embed_pieces_bytes(rows, h);
        cub::DeviceRadixSort::SortPairs(NULL, cub_bytes, (const int32_t *)NULL, (int32_t *)NULL,
                                        (const int32_t *)NULL, (int32_t *)NULL, (int)rows, 0,
                                        bits, st);
        char *base = (char *)pt_kcuda_scratch(kn, 4 * arr + piece_bytes + cub_bytes);
        if (!base)
            return;
        int32_t *keys = (int32_t *)base, *pos = (int32_t *)(base + arr);
        int32_t *skeys = (int32_t *)(base + 2 * arr), *spos = (int32_t *)(base + 3 * arr);
        float *pieces = (float *)(base + 4 * arr);
        PT_LAUNCH(pt_kcuda_blocks(rows, PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0, st,
                  embed_keys_kernel)(
            keys, pos, tokens, rows, v0, vr);
        PT_LAUNCHED(kn, "embed_backward_keys");
        if (PT_CU(kn, cub::DeviceRadixSort::SortPairs(base + 4 * arr + piece_bytes, cub_bytes,
                                                      keys, skeys, pos, spos, (int)rows, 0,
                                                      bits, st)))
            return;
        dim3 grid((unsigned)((rows + EMB_PIECE - 1) / EMB_PIECE),
                  (unsigned)((h + EMB_SLICE - 1) / EMB_SLICE));
        PT_LAUNCH(grid, EMB_WARP, 0, st, embed_backward_wte_kernel)(dwte, pieces,
            (const bf16 *)dout, skeys, spos, rows, h, vr);
        PT_LAUNCHED(kn, "embed_backward_wte");
        if (rows > EMB_PIECE) {
            PT_LAUNCH(grid, EMB_WARP, 0, st, embed_backward_pieces_kernel)(dwte, pieces, skeys,
                                                                           rows, h, vr);
            PT_LAUNCHED(kn, "embed_backward_pieces");
        }
    }
    if (dwpe) {
        PT_LAUNCH(pt_kcuda_blocks((int64_t)s * h, PT_KCUDA_THREADS), PT_KCUDA_THREADS, 0, st,
                  embed_backward_wpe_kernel)(
            dwpe, (const bf16 *)dout, b, s, h, pos0);
        PT_LAUNCHED(kn, "embed_backward_wpe");
    }
}
