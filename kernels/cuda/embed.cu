/*
 * Token and position embedding on CUDA, including the vocab-parallel form (a rank holds
 * token rows [v0, v0+vr) and produces a partial sum). The backward must add the
 * gradients of repeated tokens without atomics, so each distinct token row is owned by
 * the block of its FIRST occurrence, which adds the gradients of all its occurrences
 * in position order: the same order (and so the same fp32 result) as the CPU loop.
 * Finding first occurrences and their repeats scans the token array once per distinct
 * token: O((b·s)²) integer compares, coalesced and from L2, small next to a layer for
 * the b·s of one micro-batch (16 K tokens: ~2.7e8 compares), but quadratic; a
 * sort-based grouping would replace it for much longer micro-batches. dwpe sums over the batch in order.
 */
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
    embed_forward_kernel<<<(unsigned)rows, 128, 0, pt_kcuda_ctx(kn)->stream>>>(
        (bf16 *)out, tokens, (const bf16 *)wte, (const bf16 *)wpe, s, h, v0, vr, pos0);
    PT_LAUNCHED(kn, "embed_forward");
}

enum { EMB_THREADS = 128, EMB_LIST = 2 * EMB_THREADS };

/* One block of EMB_THREADS per position p; it works only when p is the first occurrence
 * of its token within this rank's rows. It then collects the positions q >= p holding
 * the same token, in order, into a shared list (an ordered compaction: ballot within
 * each warp, warps in order), and adds their gradient rows into the token's row of dwte
 * column by column, list entry by list entry, whenever the list may overflow and at
 * the end. */
__global__ void embed_backward_wte_kernel(float *dwte, const bf16 *dout, const int32_t *tokens,
                                          int64_t rows, int h, int v0, int vr)
{
    __shared__ int64_t list[EMB_LIST];
    __shared__ int warp_count[EMB_THREADS / 32];
    __shared__ int list_n;
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int64_t p = blockIdx.x;
    int32_t t = tokens[p];
    if (t - v0 < 0 || t - v0 >= vr)
        return;
    int seen = 0;
    for (int64_t q = tid; q < p && !seen; q += EMB_THREADS)
        seen = tokens[q] == t;
    if (__syncthreads_or(seen))
        return;
    float *dte = dwte + (int64_t)(t - v0) * h;
    if (tid == 0)
        list_n = 0;
    __syncthreads();
    for (int64_t base = p; base < rows; base += EMB_THREADS) {
        int64_t q = base + tid;
        int match = q < rows && tokens[q] == t;
        unsigned ballot = __ballot_sync(0xffffffffu, match);
        if (lane == 0)
            warp_count[warp] = __popc(ballot);
        __syncthreads();
        int before = list_n, total = list_n;
        for (int w = 0; w < EMB_THREADS / 32; w++) {
            before += w < warp ? warp_count[w] : 0;
            total += warp_count[w];
        }
        if (match)
            list[before + __popc(ballot & ((1u << lane) - 1u))] = q;
        __syncthreads();
        if (tid == 0)
            list_n = total;
        __syncthreads();
        if (total > EMB_LIST - EMB_THREADS || base + EMB_THREADS >= rows) {
            for (int i = tid; i < h; i += EMB_THREADS) {
                float acc = dte[i];
                for (int m = 0; m < total; m++)
                    acc += pt_ld(dout + list[m] * h + i);
                dte[i] = acc;
            }
            __syncthreads();
            if (tid == 0)
                list_n = 0;
            __syncthreads();
        }
    }
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
        embed_backward_wte_kernel<<<(unsigned)rows, EMB_THREADS, 0, st>>>(dwte, (const bf16 *)dout,
                                                                  tokens, rows, h, v0, vr);
        PT_LAUNCHED(kn, "embed_backward_wte");
    }
    if (dwpe) {
        embed_backward_wpe_kernel<<<pt_kcuda_blocks((int64_t)s * h, PT_KCUDA_THREADS),
                                    PT_KCUDA_THREADS, 0, st>>>(dwpe, (const bf16 *)dout, b, s,
                                                               h, pos0);
        PT_LAUNCHED(kn, "embed_backward_wpe");
    }
}
