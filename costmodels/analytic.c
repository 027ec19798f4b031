/*
 * The analytic fallbacks: what a kernel or a collective should cost on hardware
 * described only by its datasheet figures, used when the cost tables hold no sample
 * to answer from. Kernels follow a roofline (Williams, Waterman and Patterson,
 * "Roofline: an insightful visual performance model for multicore architectures",
 * CACM 52(4), 2009) with efficiency curves for small sizes; collectives follow the
 * alpha-beta (latency-bandwidth) models of Thakur, Rabenseifner and Gropp,
 * "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1), 2005,
 * taking ring or tree as NCCL does, and a hierarchical form for groups that span
 * nodes. This file also owns the defaults used for figures that are 0 (unknown).
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Defaults for unknown figures ------------------------------------------------- */

/* Conservative figures for hardware nobody has profiled yet (the "local" CPU
 * cluster ships with all figures 0). 50 GFLOP/s is well under one modern x86 core
 * with AVX2 FMA (2 FMA units x 8 fp32 lanes x 2 flops x ~3 GHz = 96 GFLOP/s); 10 GB/s
 * is under one DDR4-3200 channel (25.6 GB/s). Links: 5 GB/s and 10 us are what MPI
 * over TCP on 40-100 GbE or shared memory comfortably beats. */
#define DEFAULT_PEAK_FLOPS 50e9
#define DEFAULT_MEM_BW_BPS 10e9
#define DEFAULT_LINK_BW_BPS 5e9
#define DEFAULT_LINK_LATENCY_S 10e-6

/* The peak used for dtype d, and the dtype whose figure it is (d itself, fp32 for
 * lower precisions the device has no figure for, or PT_DTYPE_COUNT for the default).
 * fp8 falls back to bf16 then fp16 before fp32. Falling back to a higher precision
 * under-estimates the speed: the safe side. */
static double peak_for(const pt_cost_hw *hw, pt_dtype d, pt_dtype *from)
{
    pt_dtype chain[4] = {d, PT_DTYPE_FP32, PT_DTYPE_FP32, PT_DTYPE_FP32};
    if (d == PT_DTYPE_FP8) {
        chain[1] = PT_DTYPE_BF16;
        chain[2] = PT_DTYPE_FP16;
    }
    for (int i = 0; i < 4; i++)
        if ((unsigned)chain[i] < PT_DTYPE_COUNT && hw->peak_flops[chain[i]] > 0) {
            *from = chain[i];
            return hw->peak_flops[chain[i]];
        }
    *from = PT_DTYPE_COUNT;
    return DEFAULT_PEAK_FLOPS;
}

static double or_default(double v, double dflt)
{
    return v > 0 && isfinite(v) ? v : dflt;
}

double pt_cost_peak(const pt_cost_hw *hw, pt_dtype d)
{
    pt_dtype from;
    return peak_for(hw, d, &from);
}

double pt_cost_mem_bw(const pt_cost_hw *hw)
{
    return or_default(hw->mem_bw_Bps, DEFAULT_MEM_BW_BPS);
}

static void note_add(char *buf, size_t cap, size_t *len, const char *text)
{
    if (*len + 1 >= cap)
        return;
    int n = snprintf(buf + *len, cap - *len, "%s%s", *len ? "; " : "", text);
    if (n > 0)
        *len += (size_t)n < cap - *len ? (size_t)n : cap - *len - 1;
}

void pt_cost_hw_note(const pt_cost_hw *hw, char *buf, size_t cap)
{
    size_t len = 0;
    char text[128], none[64] = "";
    if (!cap)
        return;
    buf[0] = 0;
    for (int d = 0; d < PT_DTYPE_COUNT; d++) {
        pt_dtype from;
        const char *name = pt_dtype_name((pt_dtype)d);
        peak_for(hw, (pt_dtype)d, &from);
        if (from == PT_DTYPE_COUNT) {
            size_t n = strlen(none);
            snprintf(none + n, sizeof none - n, "%s%s", n ? "/" : "", name);
        } else if ((int)from != d) {
            snprintf(text, sizeof text, "%s peak unknown, %s peak used", name,
                     pt_dtype_name(from));
            note_add(buf, cap, &len, text);
        }
    }
    if (none[0]) {
        snprintf(text, sizeof text, "%s peak unknown, 50 GFLOP/s assumed", none);
        note_add(buf, cap, &len, text);
    }
    if (!(hw->mem_bw_Bps > 0))
        note_add(buf, cap, &len, "memory bandwidth unknown, 10 GB/s assumed");
    if (!(hw->intra_bw_Bps > 0) || !(hw->intra_latency_s > 0))
        note_add(buf, cap, &len, "intra-node link unknown, 5 GB/s and 10 us assumed");
    if (!(hw->inter_bw_Bps > 0) || !(hw->inter_latency_s > 0))
        note_add(buf, cap, &len, "inter-node link unknown, 5 GB/s and 10 us assumed");
}

/* ---- Kernels: roofline with efficiency curves -------------------------------------- */

/* Fixed cost of running any kernel: a CUDA launch costs ~3-5 us from the host
 * (NVIDIA, CUDA C++ Best Practices Guide, "kernel launch overhead"); 5 us also
 * covers a threaded CPU kernel's fork/join. */
#define KERNEL_LAUNCH_S 5e-6

/* Size-dependent efficiencies eff(x) = E_max · x / (x + x_half): small kernels do not
 * fill the machine (too few waves of thread blocks, pipeline ramp-up). The half points
 * are given as time at peak so that one constant serves a CPU and a GPU: 3 us of work
 * is 3e9 FLOPs on an H100 (989 TFLOP/s bf16) and 0.9e9 on an A100, and 0.3 us of
 * traffic is 1 MB on an H100 (3.35 TB/s HBM3). Note that flops / (peak · eff_c) =
 * (flops + F_half) / (peak · E_max): a per-kernel ramp of F_half / (peak · E_max). */
#define COMPUTE_HALF_EFF_S 3e-6
#define MEMORY_HALF_EFF_S 0.3e-6

/* E_max by kind. Large GEMMs reach 70-80% of dense tensor-core peak in cuBLAS;
 * FlashAttention-2 reaches 50-73% of A100 peak forward and less backward (Dao,
 * "FlashAttention-2", 2023); other kernels (norms, activations, softmax) run off
 * the tensor cores and are memory-bound anyway. STREAM-like kernels sustain about
 * 80% of HBM bandwidth. */
#define E_MAX_GEMM 0.75
#define E_MAX_ATTENTION 0.5
#define E_MAX_OTHER 0.3
#define E_MAX_MEMORY 0.8

static double kind_efficiency(const char *key)
{
    const char *colon = strchr(key, ':');
    size_t n = colon ? (size_t)(colon - key) : strlen(key);
    char kind[128];
    if (n >= sizeof kind)
        n = sizeof kind - 1;
    memcpy(kind, key, n);
    kind[n] = 0;
    if (strncmp(kind, "gemm", 4) == 0 || strncmp(kind, "matmul", 6) == 0 ||
        strcmp(kind, "bmm") == 0)
        return E_MAX_GEMM;
    if (strstr(kind, "attn") || strstr(kind, "attention"))
        return E_MAX_ATTENTION;
    return E_MAX_OTHER;
}

/* ---- GEMM efficiency by shape ----------------------------------------------------- */

/* On a GPU whose SM count is known, a GEMM's efficiency follows from its shape: cuBLAS
 * and CUTLASS give each thread block one output tile, so the output is cut into tiles
 * (the last row and column of tiles partly empty: tile quantisation) and the tiles run
 * in waves of one per SM (the last wave partly empty: wave quantisation) (NVIDIA,
 * "Matrix Multiplication Background User's Guide", Deep Learning Performance docs,
 * sections "Tile Quantization" and "Wave Quantization"). 128x256 is CUTLASS's default
 * bf16 tile on SM80 and SM90 (either orientation; we take the better one, as the
 * library's heuristics pick). A tile's main loop runs k/64 steps of 64, and its
 * prologue costs about one step more. Each wave then writes its output tiles to memory
 * after its main loop (the epilogue), and the next wave's main loop waits for it: a
 * wave of tiles computes 2·m'·n'·k FLOPs at the rate R and moves m'·n'·c bytes at the
 * memory bandwidth B (c bytes per output element: 2 for a bf16 output, 4 where the
 * product is added into a bf16 buffer, 8 into an fp32 one), so the epilogue is worth
 * k_epi = c·R / (2·B) more of k and the efficiency is k / (k + 64 + k_epi) (the
 * roofline's two terms added, not overlapped: NVIDIA, "Matrix Multiplication Background
 * User's Guide", section "Math and Memory Bounds", for the traffic; CUTLASS's
 * documentation, "Efficient GEMM in CUDA", section "Epilogue", for the epilogue that
 * follows the main loop). A persistent kernel that overlaps one tile's epilogue with the
 * next tile's main loop hides part of it; this charges all of it. On an H100 SXM
 * (R = 794.5 TFLOP/s, B = 3.35 TB/s) a bf16 output is worth 237 of k, on an A100 80GB
 * (271.2, 2.04) 133: the same shapes lose more on the H100, whose FLOP rate grew faster
 * than its bandwidth. The role says c; a stack whose weight gradient is written in bf16
 * (its key the same role) is charged the fp32 accumulation, at most a few percent of a
 * weight gradient whose k is the micro-batch's tokens. The rate with full
 * waves is the best rate measured on the device (gemm_max_eff: maximum achievable
 * matmul FLOPs, stas00/ml-engineering's MAMF table: 80.3% of peak on H100 SXM, 86.9%
 * on A100 80GB). */
#define GEMM_TILE_A 128
#define GEMM_TILE_B 256
#define GEMM_K_STEP 64

/* FP8 GEMMs (keys of dtype fp8). Hopper's tensor cores run FP8 at twice the bf16 rate
 * per SM and clock (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022: dense
 * FP8 1,979 against BF16 989 TFLOP/s on H100 SXM), through the same warp-specialised
 * kernel design (CUTLASS 3's SM90 collective mainloops serve both), whose main loop steps
 * over the same bytes of k: 128 one-byte elements against 64 two-byte ones (CUTLASS's
 * SM90 FP8 GEMM examples use a 128x128x128 tile, its bf16 ones 128x128x64). So the model
 * above serves with the FP8 peak, a K step of 128, and the best share of the FP8 peak
 * measured on the device (gemm_max_eff_fp8: the MAMF table's FP8 sweep, 70.9% on H100
 * SXM against 80.3% for bf16; gemm_max_eff where none is known): what else is harder
 * for FP8 follows from it, since at the higher rate the epilogue's output (still bf16,
 * or fp32 for a weight gradient) is worth more of k (k_epi grows with the rate) and the
 * prologue's step is 128 of k. No FP8 efficiency is fitted. */
#define GEMM_K_STEP_FP8 128

/* The integer after "name=" in a key's shape (after the second ':'), 0 when absent. */
static double key_dim(const char *key, const char *name)
{
    const char *p = strchr(key, ':');
    p = p ? strchr(p + 1, ':') : NULL;
    size_t n = strlen(name);
    while (p) {
        p++;
        if (strncmp(p, name, n) == 0 && p[n] == '=')
            return strtod(p + n + 1, NULL);
        p = strchr(p, ',');
    }
    return 0;
}

/* Bytes an output element of role moves in the epilogue (see above): the product
 * written in bf16, read and written where it is added into bf16 (a data gradient, a
 * residual) or into fp32 (a weight gradient into main_grad). */
static double gemm_out_bytes(pt_gemm_role role)
{
    switch (role) {
    case PT_GEMM_WGRAD:
    case PT_GEMM_WGRAD_BIAS:
        return 8;
    case PT_GEMM_DGRAD:
    case PT_GEMM_DGRAD_DGELU:
    case PT_GEMM_FWD_RES:
    case PT_GEMM_FWD_BIAS_RES:
        return 4;
    default:
        return 2;
    }
}

static double gemm_shape_eff(const pt_cost_hw *hw, double batch, double m, double n, double k,
                             double out_bytes, double peak, double max_eff, double k_step)
{
    double best = 0, sms = hw->sm_count;
    for (int o = 0; o < 2; o++) {
        double tm = o ? GEMM_TILE_B : GEMM_TILE_A, tn = o ? GEMM_TILE_A : GEMM_TILE_B;
        double tiles = ceil(m / tm) * ceil(n / tn) * batch;
        double quant = m * n * batch / (tiles * tm * tn);
        double waves = ceil(tiles / sms);
        double eff = quant * tiles / (waves * sms);
        best = fmax(best, eff);
    }
    double bw = or_default(hw->mem_bw_Bps, DEFAULT_MEM_BW_BPS);
    double k_epi = out_bytes * peak * max_eff / (2 * bw);
    return max_eff * best * k / (k + k_step + k_epi);
}

/* The compute efficiency of a GEMM ("gemm" or batched "bmm" key with m, n, k and for
 * bmm the batch b; a layer GEMM's role key with b is a batch too, planner/ops.c's
 * qkv) from its shape; 0 when the model does not apply. */
static double gemm_efficiency(const pt_cost_hw *hw, const pt_kernel_op *op)
{
    if (hw->sm_count <= 0 || !(hw->gemm_max_eff > 0))
        return 0;
    bool batched = strncmp(op->key, "bmm:", 4) == 0;
    pt_gemm_role role = pt_gemm_role_of(op->key);
    /* a gradient's GEMM, or one with a pointwise epilogue, tiles as the forward does */
    if (!batched && role < 0)
        return 0;
    double m = key_dim(op->key, "m"), n = key_dim(op->key, "n"), k = key_dim(op->key, "k");
    double b = key_dim(op->key, "b");
    if (!batched && b == 0)
        b = 1;
    if (!(m >= 1 && n >= 1 && k >= 1 && b >= 1))
        return 0;
    pt_dtype from;
    double peak = peak_for(hw, op->dtype, &from);
    bool fp8 = from == PT_DTYPE_FP8;
    double k_step = fp8 ? GEMM_K_STEP_FP8 : GEMM_K_STEP;
    double max_eff = fp8 && hw->gemm_max_eff_fp8 > 0 ? hw->gemm_max_eff_fp8 : hw->gemm_max_eff;
    return gemm_shape_eff(hw, b, m, n, k, gemm_out_bytes(batched ? PT_GEMM_NONE : role), peak,
                          max_eff, k_step);
}

double pt_cost_kernel_analytic(const pt_cost_hw *hw, const pt_kernel_op *op)
{
    pt_dtype from;
    double peak = peak_for(hw, op->dtype, &from);
    double bw = or_default(hw->mem_bw_Bps, DEFAULT_MEM_BW_BPS);
    double flops = op->flops > 0 ? op->flops : 0;
    double bytes = op->bytes > 0 ? op->bytes : 0;

    double compute_s = 0, shape_eff = gemm_efficiency(hw, op);
    if (flops > 0 && shape_eff > 0) {
        compute_s = flops / (peak * shape_eff);
    } else if (flops > 0) {
        double e_c = op->efficiency > 0 && op->efficiency <= 1 ? op->efficiency
                                                               : kind_efficiency(op->key);
        double f_half = peak * COMPUTE_HALF_EFF_S;
        compute_s = flops / (peak * e_c * flops / (flops + f_half));
    }
    double m_half = bw * MEMORY_HALF_EFF_S;
    double memory_s = bytes > 0 ? bytes / (bw * E_MAX_MEMORY * bytes / (bytes + m_half)) : 0;
    return fmax(compute_s, memory_s) + KERNEL_LAUNCH_S;
}

/* ---- Collectives: alpha-beta ------------------------------------------------------ */

/* One link class: alpha (latency, s) and beta (bandwidth per device per direction,
 * bytes/s). */
typedef struct {
    double alpha, beta;
} link;

static int ceil_log2(int n)
{
    int k = 0;
    while ((1 << k) < n)
        k++;
    return k;
}

/* All-reduce of B bytes per rank over n ranks: the faster of ring (reduce-scatter
 * then all-gather, 2(n-1) steps each moving B/n: Thakur et al. 2005, sec. 4.4,
 * Patarasuk and Yuan 2009) and NCCL's double binary tree (2·ceil(log2 n) latency
 * steps; we charge 2B/beta for the pipelined reduce and broadcast: Sanders, Speck
 * and Traff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan",
 * Parallel Computing 35, 2009; NVIDIA, "Massively Scale Your Deep Learning Training
 * with NCCL 2.4", 2019). NCCL chooses between the two by size, so we take the min. */
static double allreduce_flat(int n, double bytes, link l)
{
    if (n <= 1)
        return 0;
    double ring = 2.0 * (n - 1) * l.alpha + 2.0 * (n - 1) / n * bytes / l.beta;
    double tree = 2.0 * ceil_log2(n) * l.alpha + 2.0 * bytes / l.beta;
    return fmin(ring, tree);
}

/* Ring all-gather / reduce-scatter of a whole buffer of B bytes, and the pairwise
 * all-to-all of B bytes per rank: n-1 steps, each rank sending (n-1)/n of B
 * (Thakur et al. 2005, sec. 4.1 and 4.5; nccl-tests' byte convention). */
static double ring_partial(int n, double bytes, link l)
{
    if (n <= 1)
        return 0;
    return (n - 1) * l.alpha + (double)(n - 1) / n * bytes / l.beta;
}

double pt_cost_coll_analytic(const pt_cost_hw *hw, const pt_coll_op *op)
{
    int n = op->group;
    if (n <= 1)
        return 0;
    int ppn = op->ranks_per_node < 1 ? 1 : op->ranks_per_node > n ? n : op->ranks_per_node;
    int nodes = (n + ppn - 1) / ppn; /* a ragged last node is charged as a full one */
    double bytes = op->bytes > 0 ? op->bytes : 0;
    /* NCCL's achievable bus bandwidth where the spec gives it, else the line rate:
     * the bus bandwidth is defined so that a ring collective's time is its bytes
     * factor over it (nccl-tests doc/PERFORMANCE.md), which is how beta enters below. */
    double in_bw = hw->intra_busbw_Bps > 0 ? hw->intra_busbw_Bps : hw->intra_bw_Bps;
    double out_bw = hw->inter_busbw_Bps > 0 ? hw->inter_busbw_Bps : hw->inter_bw_Bps;
    if (op->op == PT_COLL_ALLREDUCE && hw->intra_allreduce_busbw_Bps > 0)
        in_bw = hw->intra_allreduce_busbw_Bps;
    link in = {or_default(hw->intra_latency_s, DEFAULT_LINK_LATENCY_S),
               or_default(in_bw, DEFAULT_LINK_BW_BPS)};
    link out = {or_default(hw->inter_latency_s, DEFAULT_LINK_LATENCY_S),
                or_default(out_bw, DEFAULT_LINK_BW_BPS)};
    bool spans = ppn < n;

    switch (op->op) {
    case PT_COLL_ALLREDUCE:
        if (!spans)
            return allreduce_flat(n, bytes, in);
        /* Hierarchical: reduce-scatter inside the node, all-reduce of each rank's
         * B/ppn shard across nodes among ranks with the same local index (each on
         * its own link), all-gather inside the node. ppn == 1 is the flat inter-node
         * all-reduce. */
        return 2 * ring_partial(ppn, bytes, in) + allreduce_flat(nodes, bytes / ppn, out);
    case PT_COLL_ALLGATHER:
    case PT_COLL_REDUCESCATTER:
        if (!spans)
            return ring_partial(n, bytes, in);
        /* All-gather: across nodes among same-local-index ranks (their part of the
         * buffer is B/ppn), then inside the node on the whole buffer; reduce-scatter is
         * the mirror image and costs the same. */
        return ring_partial(nodes, bytes / ppn, out) + ring_partial(ppn, bytes, in);
    case PT_COLL_ALLTOALL:
        if (!spans)
            return ring_partial(n, bytes, in);
        /* Pairwise exchange: n-1 steps, charged the inter-node latency; of the B bytes
         * each rank sends, (n-ppn)/n leave the node and (ppn-1)/n stay on it. */
        return (n - 1) * out.alpha + (double)(n - ppn) / n * bytes / out.beta +
               (double)(ppn - 1) / n * bytes / in.beta;
    case PT_COLL_BROADCAST:
        if (!spans)
            return (n - 1) * in.alpha + bytes / in.beta;
        /* Pipelined chain through the nodes and then inside each: every hop's latency
         * once, the bytes once through the slower link (Thakur et al. 2005, sec. 4.2
         * and pipelining). */
        return (nodes - 1) * out.alpha + (ppn - 1) * in.alpha + bytes / fmin(in.beta, out.beta);
    case PT_COLL_SENDRECV: {
        link l = spans ? out : in;
        return l.alpha + bytes / l.beta;
    }
    default:
        return 0;
    }
}
