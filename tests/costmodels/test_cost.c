/*
 * Tests of ptcost: the names, bus bandwidth, the analytic models against numbers
 * worked out by hand, the cost database (create, reopen, migrate, refuse what it
 * must refuse) and each lookup path (measured, interpolated, analytic) against
 * values computed here independently of the library.
 */
#include "check.h"
#include "cost.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static void path_in_tmp(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

/* An H100-like node with round link figures, so that hand computations stay simple. */
static pt_cost_hw h100(void)
{
    pt_cost_hw hw = {.device = "h100", .backend = "nccl", .mem_bw_Bps = 3.35e12,
                     .devices_per_node = 8, .intra_bw_Bps = 100e9, .intra_latency_s = 5e-6,
                     .inter_bw_Bps = 25e9, .inter_latency_s = 10e-6};
    hw.peak_flops[PT_DTYPE_FP32] = 67e12;
    hw.peak_flops[PT_DTYPE_TF32] = 494e12;
    hw.peak_flops[PT_DTYPE_BF16] = 989e12;
    hw.peak_flops[PT_DTYPE_FP16] = 989e12;
    return hw;
}

static pt_kernel_op kop(const char *key, pt_dtype dt, double flops, double bytes)
{
    pt_kernel_op op = {.dtype = dt, .flops = flops, .bytes = bytes};
    snprintf(op.key, sizeof op.key, "%s", key);
    return op;
}

static pt_coll_op cop(pt_coll c, double bytes, int group, int rpn)
{
    return (pt_coll_op){.op = c, .bytes = bytes, .group = group, .ranks_per_node = rpn};
}

static double loglog(double x1, double y1, double x2, double y2, double x)
{
    return y1 * pow(y2 / y1, log(x / x1) / log(x2 / x1));
}

/* ---- Names and bus bandwidth ------------------------------------------------------- */

static void test_names(void)
{
    pt_err err;
    pt_coll c;
    CHECK_STR_HAS(pt_prov_name(PT_PROV_MEASURED), "measured");
    CHECK_STR_HAS(pt_prov_name(PT_PROV_INTERPOLATED), "interpolated");
    CHECK_STR_HAS(pt_prov_name(PT_PROV_ANALYTIC), "analytic");
    for (int i = 0; i < PT_COLL_COUNT; i++) {
        CHECK_INT(pt_coll_parse(pt_coll_name((pt_coll)i), &c, &err), 0);
        CHECK_INT(c, i);
    }
    CHECK(strcmp(pt_coll_name(PT_COLL_REDUCESCATTER), "reducescatter") == 0);
    CHECK_INT(pt_coll_parse("allreduse", &c, &err), -1);
    CHECK_STR_HAS(err.msg, "allreduse");
    /* a GEMM key's role is its whole kind: "gemm_wgrad" is not "gemm_wgrad_bias", and
     * the other GEMM-like kinds (PowerSGD's "gemm_skinny", attention's "bmm") are none */
    char key[64];
    for (int r = 0; r < PT_GEMM_ROLE_COUNT; r++) {
        snprintf(key, sizeof key, "%s:bf16:m=8,n=8,k=8", pt_gemm_role_kind((pt_gemm_role)r));
        CHECK_INT(pt_gemm_role_of(key), r);
    }
    CHECK(strcmp(pt_gemm_role_kind(PT_GEMM_WGRAD_BIAS), "gemm_wgrad_bias") == 0);
    CHECK(strcmp(pt_gemm_role_kind(PT_GEMM_FWD_BIAS), "gemm_bias") == 0);
    CHECK(strcmp(pt_gemm_role_kind(PT_GEMM_FWD_GELU_BIAS), "gemm_gelu_bias") == 0);
    CHECK_INT(pt_gemm_role_of("gemm_wgrad:bf16:m=8,n=8,k=8"), PT_GEMM_WGRAD);
    CHECK_INT(pt_gemm_role_of("gemm_skinny:bf16:m=8,n=8,k=8"), -1);
    CHECK_INT(pt_gemm_role_of("bmm:bf16:b=2,m=8,n=8,k=8"), -1);
    CHECK_INT(pt_gemm_role_of("gemm_wgrad_biased:bf16:m=8,n=8,k=8"), -1);
    /* the residual's roles, and no other (nor a key that is no GEMM's), add the stream */
    int adding = 0;
    for (int r = 0; r < PT_GEMM_ROLE_COUNT; r++)
        adding += pt_gemm_role_adds_residual(r);
    CHECK_INT(adding, 2);
    CHECK(pt_gemm_role_adds_residual(PT_GEMM_FWD_RES));
    CHECK(pt_gemm_role_adds_residual(PT_GEMM_FWD_BIAS_RES));
    CHECK(!pt_gemm_role_adds_residual(-1));
}

static void test_busbw(void)
{
    CHECK_NEAR(pt_coll_busbw(PT_COLL_ALLREDUCE, 8, 1e9, 1.0), 1.75e9, 1e-12);
    CHECK_NEAR(pt_coll_busbw(PT_COLL_ALLGATHER, 4, 1e9, 0.5), 1.5e9, 1e-12);
    CHECK_NEAR(pt_coll_busbw(PT_COLL_REDUCESCATTER, 4, 1e9, 0.5), 1.5e9, 1e-12);
    CHECK_NEAR(pt_coll_busbw(PT_COLL_ALLTOALL, 2, 1e9, 1.0), 0.5e9, 1e-12);
    CHECK_NEAR(pt_coll_busbw(PT_COLL_BROADCAST, 8, 1e9, 2.0), 0.5e9, 1e-12);
    CHECK_NEAR(pt_coll_busbw(PT_COLL_SENDRECV, 2, 1e9, 2.0), 0.5e9, 1e-12);
    CHECK(pt_coll_busbw(PT_COLL_ALLREDUCE, 8, 1e9, 0) == 0);
}

/* ---- Analytic models ----------------------------------------------------------------- */

static void test_kernel_analytic(void)
{
    pt_cost_hw hw = h100();
    /* Compute-bound GEMM: F_half = peak · 3 us; t = (flops + F_half) / (peak · 0.75). */
    pt_kernel_op g = kop("gemm:bf16:m=8192,n=8192,k=8192", PT_DTYPE_BF16, 1.1e12, 4e8);
    double fh = 989e12 * 3e-6;
    double tc = 1.1e12 / (989e12 * 0.75 * 1.1e12 / (1.1e12 + fh));
    double tm = 4e8 / (3.35e12 * 0.8 * 4e8 / (4e8 + 3.35e12 * 0.3e-6));
    CHECK(tc > tm);
    CHECK_NEAR(pt_cost_kernel_analytic(&hw, &g), tc + 5e-6, 1e-12);
    CHECK_NEAR(pt_cost_kernel_analytic(&hw, &g), (1.1e12 + 2.967e9) / 741.75e12 + 5e-6, 1e-9);

    /* Memory-bound norm: no FLOPs; 1e9 bytes at 0.8 of 3.35 TB/s after the ramp. */
    pt_kernel_op n = kop("rmsnorm:bf16:b=8,s=4096,h=8192", PT_DTYPE_BF16, 0, 1e9);
    CHECK_NEAR(pt_cost_kernel_analytic(&hw, &n), (1e9 + 1.005e6) / 2.68e12 + 5e-6, 1e-9);

    /* Attention is charged E_max 0.5. */
    pt_kernel_op a = kop("attn:bf16:b=1,a=32,s=4096,d=128", PT_DTYPE_BF16, 1e12, 1e6);
    CHECK_NEAR(pt_cost_kernel_analytic(&hw, &a), (1e12 + fh) / (989e12 * 0.5) + 5e-6, 1e-12);

    /* Small kernels are dominated by the ramp and the launch. */
    pt_kernel_op tiny = kop("gemm:bf16:m=16,n=16,k=16", PT_DTYPE_BF16, 8192, 1536);
    CHECK(pt_cost_kernel_analytic(&hw, &tiny) > 5e-6 + fh / (989e12 * 0.75) * 0.99);

    /* The tile model (an SM count known): three weight gradients of 768 x 768 outputs
     * batched (b=3, planner/ops.c's qkv_wgrad) fill three times the tiles of one (18 of
     * 128 x 256 each, under one wave of 132 SMs), so the batch takes the time of one
     * call, not three. The weight gradient is added into fp32 (8 bytes an output element
     * read and written in the epilogue): k_epi = 8 · 0.8 · 989e12 / (2 · 3.35e12) steps
     * of k on top of the prologue's 64. */
    pt_cost_hw sm = hw;
    sm.sm_count = 132;
    sm.gemm_max_eff = 0.8;
    double fw = 2.0 * 768 * 768 * 65536;
    pt_kernel_op w1 = kop("gemm_wgrad_bias:bf16:m=768,n=768,k=65536", PT_DTYPE_BF16, fw, 1);
    pt_kernel_op w3 = kop("gemm_wgrad_bias:bf16:b=3,m=768,n=768,k=65536", PT_DTYPE_BF16, 3 * fw, 1);
    double k_epi8 = 8 * 0.8 * 989e12 / (2 * 3.35e12);
    double t1 = fw / (989e12 * 0.8 * 18.0 / 132 * 65536 / (65536 + 64 + k_epi8)) + 5e-6;
    CHECK_NEAR(pt_cost_kernel_analytic(&sm, &w1), t1, 1e-12);
    CHECK_NEAR(pt_cost_kernel_analytic(&sm, &w3), t1, 1e-12);

    /* The same shape as a forward writes 2 bytes an output element: a quarter of the
     * epilogue; with less memory bandwidth the epilogue grows. */
    pt_kernel_op f1 = kop("gemm:bf16:m=768,n=768,k=65536", PT_DTYPE_BF16, fw, 1);
    double tf = fw / (989e12 * 0.8 * 18.0 / 132 * 65536 / (65536 + 64 + k_epi8 / 4)) + 5e-6;
    CHECK_NEAR(pt_cost_kernel_analytic(&sm, &f1), tf, 1e-12);
    pt_cost_hw slow = sm;
    slow.mem_bw_Bps = sm.mem_bw_Bps / 2;
    CHECK(pt_cost_kernel_analytic(&slow, &f1) > tf);

    /* An FP8 GEMM: the fp8 peak, a K step of 128, and the device's best FP8 share of
     * that peak where it is known (gemm_max_eff_fp8), else the bf16 one. */
    pt_cost_hw f8 = sm;
    f8.peak_flops[PT_DTYPE_FP8] = 1979e12;
    pt_kernel_op q1 = kop("gemm:fp8:m=768,n=768,k=65536", PT_DTYPE_FP8, fw, 1);
    double k_epi2 = 2 * 0.8 * 1979e12 / (2 * 3.35e12);
    CHECK_NEAR(pt_cost_kernel_analytic(&f8, &q1),
               fw / (1979e12 * 0.8 * 18.0 / 132 * 65536 / (65536 + 128 + k_epi2)) + 5e-6, 1e-12);
    f8.gemm_max_eff_fp8 = 0.7;
    k_epi2 = 2 * 0.7 * 1979e12 / (2 * 3.35e12);
    CHECK_NEAR(pt_cost_kernel_analytic(&f8, &q1),
               fw / (1979e12 * 0.7 * 18.0 / 132 * 65536 / (65536 + 128 + k_epi2)) + 5e-6, 1e-12);
    CHECK_NEAR(pt_cost_kernel_analytic(&f8, &f1), tf, 1e-12); /* bf16 keeps its own */

    /* fp8 unknown on this device: bf16 peak used. */
    pt_kernel_op g8 = g;
    g8.dtype = PT_DTYPE_FP8;
    CHECK_NEAR(pt_cost_kernel_analytic(&hw, &g8), pt_cost_kernel_analytic(&hw, &g), 1e-12);

    /* bf16 unknown: fp32 peak used. */
    pt_cost_hw f32 = hw;
    f32.peak_flops[PT_DTYPE_BF16] = 0;
    CHECK_NEAR(pt_cost_kernel_analytic(&f32, &g), (1.1e12 + 67e12 * 3e-6) / (67e12 * 0.75) + 5e-6,
               1e-12);
    char note[256];
    pt_cost_hw_note(&f32, note, sizeof note);
    CHECK_STR_HAS(note, "bf16 peak unknown, fp32 peak used");
    pt_cost_hw_note(&hw, note, sizeof note);
    CHECK_STR_HAS(note, "fp8 peak unknown, bf16 peak used");

    /* Nothing known (the local CPU before profiling): 50 GFLOP/s and 10 GB/s. */
    pt_cost_hw cpu = {.device = "cpu", .backend = "mpi"};
    pt_kernel_op c = kop("gemm:fp32:m=512,n=512,k=512", PT_DTYPE_FP32, 2.68e8, 3.1e6);
    double c_c = (2.68e8 + 50e9 * 3e-6) / (50e9 * 0.75);
    double c_m = (3.1e6 + 10e9 * 0.3e-6) / (10e9 * 0.8);
    CHECK_NEAR(pt_cost_kernel_analytic(&cpu, &c), fmax(c_c, c_m) + 5e-6, 1e-12);
    pt_cost_hw_note(&cpu, note, sizeof note);
    CHECK_STR_HAS(note, "fp32/tf32/bf16/fp16/fp8 peak unknown, 50 GFLOP/s assumed");
    CHECK_STR_HAS(note, "memory bandwidth unknown, 10 GB/s assumed");
    CHECK_STR_HAS(note, "inter-node link unknown, 5 GB/s and 10 us assumed");
    char small[16];
    pt_cost_hw_note(&cpu, small, sizeof small);
    CHECK(strlen(small) == sizeof small - 1);

    pt_cost_hw full = hw;
    full.peak_flops[PT_DTYPE_FP8] = 1979e12;
    pt_cost_hw_note(&full, note, sizeof note);
    CHECK_STR_HAS(note, "");
    CHECK_INT(strlen(note), 0);
}

static void test_coll_analytic(void)
{
    pt_cost_hw hw = h100(); /* intra: 5 us, 100 GB/s; inter: 10 us, 25 GB/s */

    /* Large intra-node all-reduce: ring wins (14·5 us + 1.75 · 1e9 / 1e11 = 17.57 ms,
     * tree 6·5 us + 20 ms), and its busbw approaches the link bandwidth. */
    pt_coll_op ar = cop(PT_COLL_ALLREDUCE, 1e9, 8, 8);
    double t = pt_cost_coll_analytic(&hw, &ar);
    CHECK_NEAR(t, 14 * 5e-6 + 1.75e9 / 100e9, 1e-12);
    double busbw = pt_coll_busbw(PT_COLL_ALLREDUCE, 8, 1e9, t);
    CHECK(busbw > 0.99 * hw.intra_bw_Bps && busbw <= hw.intra_bw_Bps);

    /* Small all-reduce: tree wins (6 latency steps against 14) and latency dominates. */
    pt_coll_op small = cop(PT_COLL_ALLREDUCE, 8, 8, 8);
    t = pt_cost_coll_analytic(&hw, &small);
    CHECK_NEAR(t, 6 * 5e-6 + 16 / 100e9, 1e-12);
    CHECK_NEAR(t, 6 * 5e-6, 1e-5);
    CHECK(pt_coll_busbw(PT_COLL_ALLREDUCE, 8, 8, t) < 1e-3 * hw.intra_bw_Bps);

    /* Hierarchical, 2 nodes x 8: reduce-scatter and all-gather inside (7·5 us + 7/8 ·
     * 10 ms each) and an all-reduce of 1e9/8 bytes over 2 nodes (ring: 2·10 us +
     * 1.25e8 / 25e9 = 5.02 ms; tree: 2·10 us + 10 ms). */
    pt_coll_op h = cop(PT_COLL_ALLREDUCE, 1e9, 16, 8);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &h), 2 * (35e-6 + 8.75e-3) + 20e-6 + 5e-3, 1e-12);

    /* One rank per node: flat inter-node all-reduce (ring: 6·10 us + 1.5 · 1e9 / 25e9). */
    pt_coll_op flat = cop(PT_COLL_ALLREDUCE, 1e9, 4, 1);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &flat), 60e-6 + 0.06, 1e-12);

    /* All-gather and reduce-scatter, whole buffer: intra ring, and hierarchical. */
    pt_coll_op ag = cop(PT_COLL_ALLGATHER, 8e8, 8, 8);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &ag), 35e-6 + 7e-3, 1e-12);
    pt_coll_op rs = cop(PT_COLL_REDUCESCATTER, 8e8, 8, 8);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &rs), 35e-6 + 7e-3, 1e-12);
    pt_coll_op agh = cop(PT_COLL_ALLGATHER, 1.6e9, 16, 8);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &agh), (10e-6 + 4e-3) + (35e-6 + 0.014), 1e-12);
    pt_coll_op rsh = cop(PT_COLL_REDUCESCATTER, 1.6e9, 16, 8);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &rsh), (10e-6 + 4e-3) + (35e-6 + 0.014), 1e-12);

    /* All-to-all inside a node; across 2 nodes of 4: 7 inter latencies, 4/8 of the
     * bytes leave the node and 3/8 stay. */
    pt_coll_op a2a = cop(PT_COLL_ALLTOALL, 8e8, 8, 8);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &a2a), 35e-6 + 7e-3, 1e-12);
    pt_coll_op a2ah = cop(PT_COLL_ALLTOALL, 8e8, 8, 4);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &a2ah), 70e-6 + 4e8 / 25e9 + 3e8 / 100e9, 1e-12);

    /* Broadcast and send/recv. */
    pt_coll_op bc = cop(PT_COLL_BROADCAST, 1e8, 8, 8);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &bc), 35e-6 + 1e-3, 1e-12);
    pt_coll_op bch = cop(PT_COLL_BROADCAST, 1e8, 16, 8);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &bch), 10e-6 + 35e-6 + 4e-3, 1e-12);
    pt_coll_op p2p = cop(PT_COLL_SENDRECV, 1e8, 2, 2);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &p2p), 5e-6 + 1e-3, 1e-12);
    pt_coll_op p2px = cop(PT_COLL_SENDRECV, 1e8, 2, 1);
    CHECK_NEAR(pt_cost_coll_analytic(&hw, &p2px), 10e-6 + 4e-3, 1e-12);

    /* A group of one moves nothing. */
    pt_coll_op one = cop(PT_COLL_ALLREDUCE, 1e9, 1, 1);
    CHECK(pt_cost_coll_analytic(&hw, &one) == 0);
    CHECK(pt_cost_coll(NULL, &hw, &one).time_s == 0);

    /* Unknown links: 5 GB/s and 10 us. */
    pt_cost_hw cpu = {.device = "cpu", .backend = "mpi"};
    pt_coll_op ar2 = cop(PT_COLL_ALLREDUCE, 1e9, 2, 2);
    CHECK_NEAR(pt_cost_coll_analytic(&cpu, &ar2), 2 * 10e-6 + 1e9 / 5e9, 1e-12);

    /* db NULL: analytic only. */
    pt_cost c = pt_cost_coll(NULL, &hw, &ar);
    CHECK_INT(c.prov, PT_PROV_ANALYTIC);
    CHECK_NEAR(c.time_s, pt_cost_coll_analytic(&hw, &ar), 1e-15);
}

/* ---- The database and lookups ------------------------------------------------------------ */

#define GEMM_S "gemm:bf16:m=1024,n=1024,k=1024"
#define GEMM_M "gemm:bf16:m=2048,n=2048,k=2048"
#define GEMM_L "gemm:bf16:m=4096,n=4096,k=4096"
#define GEMM_XL "gemm:bf16:m=8192,n=8192,k=8192"
#define F_S (2.0 * 1024 * 1024 * 1024)
#define F_M (2.0 * 2048 * 2048 * 2048)
#define F_L (2.0 * 4096 * 4096 * 4096)
#define F_XL (2.0 * 8192 * 8192 * 8192)

/* Fills db with the samples the lookup tests use; `reverse` inserts them in the
 * opposite order (the fingerprint must not care). */
static void fill(pt_costdb *db, bool reverse)
{
    pt_err err;
    pt_cost_hw hw = h100();
    struct {
        const char *key;
        double flops, bytes, t;
    } ks[] = {
        {GEMM_S, F_S, 6.3e6, 30e-6}, {GEMM_S, F_S, 6.3e6, 10e-6}, {GEMM_S, F_S, 6.3e6, 12e-6},
        {GEMM_L, F_L, 1e8, 200e-6},  {GEMM_L, F_L, 1e8, 210e-6},  {GEMM_L, F_L, 1e8, 190e-6},
        {GEMM_L, F_L, 1e8, 250e-6},  {"gemm_dgrad:bf16:m=1024,n=1024,k=1024", F_S, 8.4e6, 17e-6},
        {"rmsnorm:bf16:n=1e6", 0, 1e6, 5e-6},
        {"rmsnorm:bf16:n=1e8", 0, 1e8, 60e-6},
    };
    struct {
        pt_coll op;
        double bytes;
        int group, rpn;
        double t;
    } cs[] = {
        {PT_COLL_ALLREDUCE, 1e6, 8, 8, 50e-6},  {PT_COLL_ALLREDUCE, 1e6, 8, 8, 60e-6},
        {PT_COLL_ALLREDUCE, 1e8, 8, 8, 1.2e-3}, {PT_COLL_ALLREDUCE, 1e6, 2, 2, 20e-6},
        {PT_COLL_ALLREDUCE, 1e8, 2, 2, 1.0e-3}, {PT_COLL_ALLGATHER, 1e6, 16, 8, 80e-6},
    };
    int nk = (int)(sizeof ks / sizeof ks[0]), nc = (int)(sizeof cs / sizeof cs[0]);
    CHECK_INT(pt_costdb_add_device(db, &hw, &err), 0);
    for (int j = 0; j < nk; j++) {
        int i = reverse ? nk - 1 - j : j;
        pt_kernel_op op = kop(ks[i].key, PT_DTYPE_BF16, ks[i].flops, ks[i].bytes);
        CHECK_INT(pt_costdb_add_kernel(db, "h100", &op, ks[i].t, PT_SOURCE_PROFILE, &err), 0);
    }
    for (int j = 0; j < nc; j++) {
        int i = reverse ? nc - 1 - j : j;
        pt_coll_op op = cop(cs[i].op, cs[i].bytes, cs[i].group, cs[i].rpn);
        CHECK_INT(pt_costdb_add_coll(db, "nccl", &op, cs[i].t, PT_SOURCE_TRACE, &err), 0);
    }
}

static void check_lookups(const pt_costdb *db)
{
    pt_cost_hw hw = h100();
    pt_cost c;

    /* Exact: median of repeats (odd and even counts). */
    pt_kernel_op s = kop(GEMM_S, PT_DTYPE_BF16, F_S, 6.3e6);
    c = pt_cost_kernel(db, &hw, &s);
    CHECK_INT(c.prov, PT_PROV_MEASURED);
    CHECK_NEAR(c.time_s, 12e-6, 1e-15);
    pt_kernel_op l = kop(GEMM_L, PT_DTYPE_BF16, F_L, 1e8);
    c = pt_cost_kernel(db, &hw, &l);
    CHECK_INT(c.prov, PT_PROV_MEASURED);
    CHECK_NEAR(c.time_s, 205e-6, 1e-12);

    /* Between samples: log-log over FLOPs between the two medians. */
    pt_kernel_op m = kop(GEMM_M, PT_DTYPE_BF16, F_M, 2.5e7);
    c = pt_cost_kernel(db, &hw, &m);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    CHECK_NEAR(c.time_s, loglog(F_S, 12e-6, F_L, 205e-6, F_M), 1e-12);
    /* F_M is the geometric mean of F_S and F_L, so the answer is the geometric mean. */
    CHECK_NEAR(c.time_s, sqrt(12e-6 * 205e-6), 1e-12);

    /* Outside the sampled range, another dtype or another device: analytic. */
    pt_kernel_op xl = kop(GEMM_XL, PT_DTYPE_BF16, F_XL, 4e8);
    c = pt_cost_kernel(db, &hw, &xl);
    CHECK_INT(c.prov, PT_PROV_ANALYTIC);
    CHECK_NEAR(c.time_s, pt_cost_kernel_analytic(&hw, &xl), 1e-15);
    pt_kernel_op tiny = kop("gemm:bf16:m=64,n=64,k=64", PT_DTYPE_BF16, 2.0 * 64 * 64 * 64, 24576);
    CHECK_INT(pt_cost_kernel(db, &hw, &tiny).prov, PT_PROV_ANALYTIC);
    pt_kernel_op m16 = kop("gemm:fp16:m=2048,n=2048,k=2048", PT_DTYPE_FP16, F_M, 2.5e7);
    CHECK_INT(pt_cost_kernel(db, &hw, &m16).prov, PT_PROV_ANALYTIC);
    pt_cost_hw a100 = hw;
    snprintf(a100.device, sizeof a100.device, "a100");
    CHECK_INT(pt_cost_kernel(db, &a100, &m).prov, PT_PROV_ANALYTIC);
    CHECK_INT(pt_cost_kernel(db, &a100, &s).prov, PT_PROV_ANALYTIC);
    /* Another kind never borrows gemm samples. */
    pt_kernel_op at = kop("attn:bf16:s=2048", PT_DTYPE_BF16, F_M, 2.5e7);
    CHECK_INT(pt_cost_kernel(db, &hw, &at).prov, PT_PROV_ANALYTIC);

    /* A gradient's GEMM with no sample of its kind takes the forward's of its very
     * shape (interpolated: what tables made before the roles had keys hold for it);
     * one with a sample of its own kind takes that; a forward with an epilogue, or a
     * gradient of another shape, borrows nothing. */
    pt_kernel_op wg = kop("gemm_wgrad_bias:bf16:m=1024,n=1024,k=1024", PT_DTYPE_BF16, F_S, 6.3e6);
    c = pt_cost_kernel(db, &hw, &wg);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    CHECK_NEAR(c.time_s, 12e-6, 1e-15);
    pt_kernel_op dg = kop("gemm_dgrad:bf16:m=1024,n=1024,k=1024", PT_DTYPE_BF16, F_S, 8.4e6);
    c = pt_cost_kernel(db, &hw, &dg);
    CHECK_INT(c.prov, PT_PROV_MEASURED);
    CHECK_NEAR(c.time_s, 17e-6, 1e-15);
    pt_kernel_op ge = kop("gemm_gelu:bf16:m=1024,n=1024,k=1024", PT_DTYPE_BF16, F_S, 6.3e6);
    CHECK_INT(pt_cost_kernel(db, &hw, &ge).prov, PT_PROV_ANALYTIC);
    pt_kernel_op wm = kop("gemm_wgrad:bf16:m=2048,n=2048,k=2048", PT_DTYPE_BF16, F_M, 2.5e7);
    CHECK_INT(pt_cost_kernel(db, &hw, &wm).prov, PT_PROV_ANALYTIC);
    /* A biased forward with no sample of its kind takes the unbiased forward's of its
     * shape; with the GELU, only the GELU forward's (none here), not the plain one's. */
    pt_kernel_op fb = kop("gemm_bias:bf16:m=1024,n=1024,k=1024", PT_DTYPE_BF16, F_S, 6.3e6);
    c = pt_cost_kernel(db, &hw, &fb);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    CHECK_NEAR(c.time_s, 12e-6, 1e-15);
    pt_kernel_op gb = kop("gemm_gelu_bias:bf16:m=1024,n=1024,k=1024", PT_DTYPE_BF16, F_S, 6.3e6);
    CHECK_INT(pt_cost_kernel(db, &hw, &gb).prov, PT_PROV_ANALYTIC);
    /* A forward with the residual takes the same forward's without it: the plain one's
     * for gemm_res; the biased one's (none here, and no further) for gemm_bias_res. */
    pt_kernel_op fr = kop("gemm_res:bf16:m=1024,n=1024,k=1024", PT_DTYPE_BF16, F_S, 8.4e6);
    c = pt_cost_kernel(db, &hw, &fr);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    CHECK_NEAR(c.time_s, 12e-6, 1e-15);
    pt_kernel_op fbr = kop("gemm_bias_res:bf16:m=1024,n=1024,k=1024", PT_DTYPE_BF16, F_S, 8.4e6);
    CHECK_INT(pt_cost_kernel(db, &hw, &fbr).prov, PT_PROV_ANALYTIC);
    /* A written data gradient takes the added one's samples of its shape (17 us, not
     * the forward's 12), else the forward's (the large shape has no data gradient). */
    pt_kernel_op dw = kop("gemm_dgrad_write:bf16:m=1024,n=1024,k=1024", PT_DTYPE_BF16, F_S, 6.3e6);
    c = pt_cost_kernel(db, &hw, &dw);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    CHECK_NEAR(c.time_s, 17e-6, 1e-15);
    pt_kernel_op dwl = kop("gemm_dgrad_write:bf16:m=4096,n=4096,k=4096", PT_DTYPE_BF16, F_L, 1e8);
    c = pt_cost_kernel(db, &hw, &dwl);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    CHECK_NEAR(c.time_s, 205e-6, 1e-12);

    /* Memory-bound kinds interpolate over bytes. */
    pt_kernel_op nm = kop("rmsnorm:bf16:n=1e7", PT_DTYPE_BF16, 0, 1e7);
    c = pt_cost_kernel(db, &hw, &nm);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    CHECK_NEAR(c.time_s, loglog(1e6, 5e-6, 1e8, 60e-6, 1e7), 1e-12);

    /* Collectives: exact (median of 50 and 60 us), between sizes, analytic outside. */
    pt_coll_op e = cop(PT_COLL_ALLREDUCE, 1e6, 8, 8);
    c = pt_cost_coll(db, &hw, &e);
    CHECK_INT(c.prov, PT_PROV_MEASURED);
    CHECK_NEAR(c.time_s, 55e-6, 1e-12);
    pt_coll_op i = cop(PT_COLL_ALLREDUCE, 1e7, 8, 8);
    c = pt_cost_coll(db, &hw, &i);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    double t8 = loglog(1e6, 55e-6, 1e8, 1.2e-3, 1e7);
    CHECK_NEAR(c.time_s, t8, 1e-12);
    pt_coll_op big = cop(PT_COLL_ALLREDUCE, 1e10, 8, 8);
    c = pt_cost_coll(db, &hw, &big);
    CHECK_INT(c.prov, PT_PROV_ANALYTIC);
    CHECK_NEAR(c.time_s, pt_cost_coll_analytic(&hw, &big), 1e-15);

    /* Between group sizes 2 and 8: busbw of each at 1e7 bytes, linear in log(group). */
    pt_coll_op g4 = cop(PT_COLL_ALLREDUCE, 1e7, 4, 4);
    c = pt_cost_coll(db, &hw, &g4);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    double t2 = loglog(1e6, 20e-6, 1e8, 1.0e-3, 1e7);
    double bw2 = 1e7 / t2 * 2 * 1 / 2.0, bw8 = 1e7 / t8 * 2 * 7 / 8.0;
    double bw4 = bw2 + (bw8 - bw2) * (log(4) - log(2)) / (log(8) - log(2));
    CHECK_NEAR(c.time_s, 1e7 * (2 * 3 / 4.0) / bw4, 1e-12);
    /* Exactly at a sampled size of both neighbours. */
    pt_coll_op g4e = cop(PT_COLL_ALLREDUCE, 1e6, 4, 4);
    c = pt_cost_coll(db, &hw, &g4e);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    bw2 = 1e6 / 20e-6 * 1.0;
    bw8 = 1e6 / 55e-6 * 1.75;
    CHECK_NEAR(c.time_s, 1e6 * 1.5 / (0.5 * (bw2 + bw8)), 1e-12);
    /* A group crossing nodes does not borrow from intra-node groups; nor beyond the
     * largest sampled group, nor another backend or op. */
    pt_coll_op g4x = cop(PT_COLL_ALLREDUCE, 1e7, 4, 2);
    CHECK_INT(pt_cost_coll(db, &hw, &g4x).prov, PT_PROV_ANALYTIC);
    pt_coll_op g16 = cop(PT_COLL_ALLREDUCE, 1e7, 16, 16);
    CHECK_INT(pt_cost_coll(db, &hw, &g16).prov, PT_PROV_ANALYTIC);
    pt_cost_hw mpi = hw;
    snprintf(mpi.backend, sizeof mpi.backend, "mpi");
    CHECK_INT(pt_cost_coll(db, &mpi, &e).prov, PT_PROV_ANALYTIC);
    pt_coll_op rs = cop(PT_COLL_REDUCESCATTER, 1e6, 8, 8);
    CHECK_INT(pt_cost_coll(db, &hw, &rs).prov, PT_PROV_ANALYTIC);
    pt_coll_op agx = cop(PT_COLL_ALLGATHER, 1e6, 16, 8);
    c = pt_cost_coll(db, &hw, &agx);
    CHECK_INT(c.prov, PT_PROV_MEASURED);
    CHECK_NEAR(c.time_s, 80e-6, 1e-12);
    pt_coll_op one = cop(PT_COLL_ALLREDUCE, 1e6, 1, 1);
    CHECK(pt_cost_coll(db, &hw, &one).time_s == 0);
}

static void test_db_roundtrip(void)
{
    pt_err err;
    pt_costdb *db = NULL;
    char path[512];
    path_in_tmp(path, sizeof path, "costs.db");

    CHECK_INT(pt_costdb_open(path, PT_COSTDB_CREATE, &db, &err), 0);
    if (!db) {
        fprintf(stderr, "open: %s\n", err.msg);
        return;
    }
    fill(db, false);
    check_lookups(db);
    pt_costdb_id id1, id2, id3, idm;
    pt_costdb_identity(db, &id1);
    CHECK(strcmp(id1.path, path) == 0);
    CHECK_INT(id1.schema_version, pt_costdb_schema_version());
    CHECK_INT(id1.kernel_samples, 10);
    CHECK_INT(id1.coll_samples, 6);
    CHECK_INT(strlen(id1.fingerprint), 16);
    pt_costdb_close(db);

    /* Reopen: everything came back from SQLite. */
    db = NULL;
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_READ, &db, &err), 0);
    if (!db)
        return;
    check_lookups(db);
    pt_costdb_identity(db, &id2);
    CHECK(strcmp(id1.fingerprint, id2.fingerprint) == 0);
    CHECK_INT(id2.kernel_samples, 10);

    pt_cost_hw got, want = h100();
    CHECK_INT(pt_costdb_device(db, "h100", &got, &err), 0);
    CHECK(memcmp(&got, &want, sizeof got) == 0);
    CHECK_INT(pt_costdb_device(db, "b200", &got, &err), -1);
    CHECK_STR_HAS(err.msg, "b200");

    /* The same samples inserted in another order, in memory: same fingerprint. */
    pt_costdb *mem = NULL;
    CHECK_INT(pt_costdb_open(NULL, PT_COSTDB_READ, &mem, &err), 0);
    fill(mem, true);
    check_lookups(mem);
    pt_costdb_identity(mem, &idm);
    CHECK(strcmp(idm.fingerprint, id1.fingerprint) == 0);
    CHECK_INT(strlen(idm.path), 0);
    pt_costdb_close(mem);

    /* One more sample changes it, and is written through to the file. */
    pt_kernel_op m = kop(GEMM_M, PT_DTYPE_BF16, F_M, 2.5e7);
    CHECK_INT(pt_costdb_add_kernel(db, "h100", &m, 60e-6, PT_SOURCE_TRACE, &err), 0);
    pt_costdb_identity(db, &id3);
    CHECK(strcmp(id3.fingerprint, id1.fingerprint) != 0);
    CHECK_INT(id3.kernel_samples, 11);
    pt_cost_hw hw = h100();
    pt_cost c = pt_cost_kernel(db, &hw, &m);
    CHECK_INT(c.prov, PT_PROV_MEASURED);
    CHECK_NEAR(c.time_s, 60e-6, 1e-15);
    /* The neighbours now interpolate through the new sample. */
    pt_kernel_op between = kop("gemm:bf16:m=3000", PT_DTYPE_BF16, 2 * F_M, 5e7);
    c = pt_cost_kernel(db, &hw, &between);
    CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
    CHECK_NEAR(c.time_s, loglog(F_M, 60e-6, F_L, 205e-6, 2 * F_M), 1e-12);
    /* Replacing a device description. */
    want.mem_bw_Bps = 3.0e12;
    CHECK_INT(pt_costdb_add_device(db, &want, &err), 0);
    pt_costdb_close(db);

    db = NULL;
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_READ, &db, &err), 0);
    if (!db)
        return;
    pt_costdb_identity(db, &id2);
    CHECK(strcmp(id2.fingerprint, id3.fingerprint) == 0);
    CHECK_INT(pt_costdb_device(db, "h100", &got, &err), 0);
    CHECK(got.mem_bw_Bps == 3.0e12);
    pt_costdb_close(db);

    /* The file is plain SQLite: provenance and time are stored with each sample. */
    sqlite3 *s;
    CHECK_INT(sqlite3_open(path, &s), SQLITE_OK);
    sqlite3_stmt *st;
    CHECK_INT(sqlite3_prepare_v2(s, "SELECT source, created_at, kind FROM kernel_samples "
                                    "WHERE op_key = '" GEMM_M "'", -1, &st, NULL), SQLITE_OK);
    CHECK_INT(sqlite3_step(st), SQLITE_ROW);
    CHECK_STR_HAS((const char *)sqlite3_column_text(st, 0), "trace");
    const char *at = (const char *)sqlite3_column_text(st, 1);
    CHECK(at && strlen(at) == 20 && at[10] == 'T' && at[19] == 'Z');
    CHECK_STR_HAS((const char *)sqlite3_column_text(st, 2), "gemm");
    sqlite3_finalize(st);
    CHECK_INT(sqlite3_prepare_v2(s, "SELECT crosses_nodes FROM coll_samples WHERE op = "
                                    "'allgather'", -1, &st, NULL), SQLITE_OK);
    CHECK_INT(sqlite3_step(st), SQLITE_ROW);
    CHECK_INT(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    sqlite3_close(s);
}

/* Many samples in random order against a brute-force median and bracket search. */
static void test_many(void)
{
    pt_err err;
    pt_costdb *db = NULL;
    CHECK_INT(pt_costdb_open(NULL, PT_COSTDB_CREATE, &db, &err), 0);
    pt_cost_hw hw = h100();
    enum { KEYS = 60, REPEATS = 7 };
    double times[KEYS][REPEATS];
    unsigned seed = 12345;
    for (int r = 0; r < REPEATS; r++)
        for (int k = 0; k < KEYS; k++) {
            int key = (k * 37 + r * 11) % KEYS; /* scrambled insertion order */
            if (key % 5 == 3 && r >= 4)
                continue; /* some keys with an even number of repeats */
            seed = seed * 1103515245u + 12345u;
            double t = (key + 1) * 1e-5 * (1 + (seed >> 16) % 1000 / 1000.0);
            times[key][r] = t;
            char name[64];
            snprintf(name, sizeof name, "gemm:bf16:k=%d", key);
            pt_kernel_op op = kop(name, PT_DTYPE_BF16, 1e9 * (key + 1), 1e6);
            CHECK_INT(pt_costdb_add_kernel(db, "h100", &op, t, PT_SOURCE_PROFILE, &err), 0);
        }
    double med[KEYS];
    for (int key = 0; key < KEYS; key++) {
        int n = key % 5 == 3 ? 4 : REPEATS;
        double v[REPEATS];
        memcpy(v, times[key], sizeof v);
        for (int a = 0; a < n; a++) /* insertion sort: n is small */
            for (int b = a; b > 0 && v[b] < v[b - 1]; b--) {
                double x = v[b];
                v[b] = v[b - 1];
                v[b - 1] = x;
            }
        med[key] = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        char name[64];
        snprintf(name, sizeof name, "gemm:bf16:k=%d", key);
        pt_kernel_op op = kop(name, PT_DTYPE_BF16, 1e9 * (key + 1), 1e6);
        pt_cost c = pt_cost_kernel(db, &hw, &op);
        CHECK_INT(c.prov, PT_PROV_MEASURED);
        CHECK_NEAR(c.time_s, med[key], 1e-15);
    }
    for (int key = 0; key + 1 < KEYS; key += 7) {
        double x = 1e9 * (key + 1.5);
        pt_kernel_op op = kop("gemm:bf16:other", PT_DTYPE_BF16, x, 1e6);
        pt_cost c = pt_cost_kernel(db, &hw, &op);
        CHECK_INT(c.prov, PT_PROV_INTERPOLATED);
        CHECK_NEAR(c.time_s, loglog(1e9 * (key + 1), med[key], 1e9 * (key + 2), med[key + 1], x),
                   1e-12);
    }
    pt_costdb_close(db);
}

/* ---- Errors ----------------------------------------------------------------------------- */

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return;
    fwrite(data, 1, n, f);
    fclose(f);
}

static void sql_script(const char *path, const char *sql)
{
    sqlite3 *s;
    CHECK_INT(sqlite3_open(path, &s), SQLITE_OK);
    char *msg = NULL;
    if (sqlite3_exec(s, sql, NULL, NULL, &msg) != SQLITE_OK) {
        fprintf(stderr, "sql_script: %s\n", msg ? msg : "?");
        CHECK(0);
    }
    sqlite3_free(msg);
    sqlite3_close(s);
}

/* Opens path expecting failure, with a message naming the path and `what`. */
static void expect_open_error(const char *path, int flags, const char *what)
{
    pt_err err = {{0}};
    pt_costdb *db = (pt_costdb *)&err; /* must be reset to NULL */
    CHECK_INT(pt_costdb_open(path, flags, &db, &err), -1);
    CHECK(db == NULL);
    CHECK_STR_HAS(err.msg, path);
    CHECK_STR_HAS(err.msg, what);
    if (db && db != (pt_costdb *)&err)
        pt_costdb_close(db);
}

static void make_v1(const char *path)
{
    pt_err err;
    pt_costdb *db = NULL;
    unlink(path);
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_CREATE, &db, &err), 0);
    pt_costdb_close(db);
}

static void test_open_errors(void)
{
    char path[512];

    path_in_tmp(path, sizeof path, "missing.db");
    expect_open_error(path, PT_COSTDB_READ, "No such file");
    CHECK(access(path, F_OK) != 0); /* not created by a failed open */
    path_in_tmp(path, sizeof path, "no/such/dir.db");
    expect_open_error(path, PT_COSTDB_CREATE, "cannot open");
    expect_open_error(tmpdir, PT_COSTDB_CREATE, "is a directory");

    path_in_tmp(path, sizeof path, "garbage.db");
    char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)("this is not a database "[i % 23]);
    write_file(path, junk, sizeof junk);
    expect_open_error(path, PT_COSTDB_READ, "file is not a database");
    expect_open_error(path, PT_COSTDB_CREATE, "file is not a database");

    path_in_tmp(path, sizeof path, "empty.db");
    write_file(path, "", 0);
    expect_open_error(path, PT_COSTDB_READ, "empty database");

    path_in_tmp(path, sizeof path, "other.db");
    sql_script(path, "CREATE TABLE foo(x); INSERT INTO foo VALUES(1);");
    expect_open_error(path, PT_COSTDB_READ, "not a cost database");
    expect_open_error(path, PT_COSTDB_CREATE, "not a cost database");

    /* a cost table another connection holds an exclusive lock on: after the wait, the
     * message says locked, not "not a cost database" */
    path_in_tmp(path, sizeof path, "locked.db");
    make_v1(path);
    sqlite3 *holder;
    CHECK_INT(sqlite3_open(path, &holder), SQLITE_OK);
    CHECK_INT(sqlite3_exec(holder, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    expect_open_error(path, PT_COSTDB_READ, "locked by another process");
    sqlite3_exec(holder, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(holder);

    path_in_tmp(path, sizeof path, "newer.db");
    make_v1(path);
    sql_script(path, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
    expect_open_error(path, PT_COSTDB_READ, "schema version 99 is newer than this build "
                                            "understands (7); update ptplan");

    path_in_tmp(path, sizeof path, "badversion.db");
    make_v1(path);
    sql_script(path, "UPDATE meta SET value = 'one' WHERE key = 'schema_version'");
    expect_open_error(path, PT_COSTDB_READ, "'one' is not a version number");
    sql_script(path, "DELETE FROM meta");
    expect_open_error(path, PT_COSTDB_READ, "no schema_version");

    path_in_tmp(path, sizeof path, "notables.db");
    make_v1(path);
    sql_script(path, "DROP TABLE coll_samples");
    expect_open_error(path, PT_COSTDB_READ, "no such table: coll_samples");

    path_in_tmp(path, sizeof path, "badrow.db");
    make_v1(path);
    sql_script(path, "INSERT INTO kernel_samples(device, op_key, kind, dtype, flops, bytes,"
                     " time_s, source, created_at) VALUES('h100', 'gemm:fp64:x', 'gemm',"
                     " 'fp64', 1, 1, 1, 'profile', '2024-01-01T00:00:00Z')");
    expect_open_error(path, PT_COSTDB_READ, "unknown data type 'fp64'");
    make_v1(path);
    sql_script(path, "INSERT INTO coll_samples(backend, op, bytes, group_size,"
                     " ranks_per_node, crosses_nodes, time_s, source, created_at)"
                     " VALUES('nccl', 'allreduce', 'lots', 2, 2, 0, 1, 'profile', 'x')");
    expect_open_error(path, PT_COSTDB_READ, "must be numbers");

    /* A fit that names no device: the message quotes the row, which must be read
     * before its statement ends (the ASan build caught a use after free here). */
    path_in_tmp(path, sizeof path, "nodevice.db");
    {
        pt_costdb *db;
        pt_err err;
        CHECK_INT(pt_costdb_open(path, PT_COSTDB_CREATE, &db, &err), 0);
        pt_costdb_close(db);
    }
    sql_script(path, "INSERT INTO kernel_fits(device, class, run_id, eff, fixed_s, samples,"
                     " rms_rel_err, created_at) VALUES('', 'gemm', 1, 0.5, 0, 3, 0.01, 'x')");
    expect_open_error(path, PT_COSTDB_READ, "a fit of 'gemm' names no target");

    /* A database cut short: page count in the header no longer matches. */
    path_in_tmp(path, sizeof path, "truncated.db");
    make_v1(path);
    {
        char sql[400];
        snprintf(sql, sizeof sql,
                 "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)"
                 " INSERT INTO kernel_samples(device, op_key, kind, dtype, flops, bytes,"
                 " time_s, source, created_at) SELECT 'h100', 'gemm:bf16:' || i, 'gemm',"
                 " 'bf16', i, i, i, 'profile', 'x' FROM n");
        sql_script(path, sql);
        FILE *f = fopen(path, "r+b");
        CHECK(f != NULL);
        if (f) {
            fseek(f, 0, SEEK_END);
            long size = ftell(f);
            fclose(f);
            CHECK(size > 65536);
            CHECK_INT(truncate(path, size / 2), 0);
        }
        expect_open_error(path, PT_COSTDB_READ, "damaged");
    }
}

static void test_insert_errors(void)
{
    pt_err err;
    pt_costdb *db = NULL;
    char path[512];
    path_in_tmp(path, sizeof path, "inserts.db");
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_CREATE, &db, &err), 0);
    if (!db)
        return;
    pt_kernel_op ok = kop("gemm:bf16:m=1", PT_DTYPE_BF16, 2, 6);
    struct {
        const char *device;
        pt_kernel_op op;
        double t;
        int source;
        const char *why;
    } bad_k[] = {
        {"h100", ok, 0, 0, "time_s"},
        {"h100", ok, -1e-6, 0, "time_s"},
        {"h100", ok, NAN, 0, "time_s"},
        {"h100", ok, INFINITY, 0, "time_s"},
        {"h100", kop("gemm:bf16:m=1", PT_DTYPE_BF16, 2, -1), 1e-6, 0, "bytes"},
        {"h100", kop("gemm:bf16:m=1", PT_DTYPE_BF16, NAN, 1), 1e-6, 0, "flops"},
        {"h100", kop("gemm", PT_DTYPE_BF16, 2, 6), 1e-6, 0, "<kind>:<dtype>:<shape>"},
        {"h100", kop(":bf16:m=1", PT_DTYPE_BF16, 2, 6), 1e-6, 0, "<kind>:<dtype>:<shape>"},
        {"h100", kop("", PT_DTYPE_BF16, 2, 6), 1e-6, 0, "op key"},
        {"h100", kop("gemm:x:y", PT_DTYPE_COUNT, 2, 6), 1e-6, 0, "data type"},
        {"", ok, 1e-6, 0, "device"},
        {NULL, ok, 1e-6, 0, "device"},
        {"h100", ok, 1e-6, 7, "source"},
    };
    for (size_t i = 0; i < sizeof bad_k / sizeof bad_k[0]; i++) {
        err.msg[0] = 0;
        CHECK_INT(pt_costdb_add_kernel(db, bad_k[i].device, &bad_k[i].op, bad_k[i].t,
                                       (pt_source)bad_k[i].source, &err), -1);
        CHECK_STR_HAS(err.msg, bad_k[i].why);
        CHECK_STR_HAS(err.msg, path);
    }
    struct {
        const char *backend;
        pt_coll_op op;
        double t;
        const char *why;
    } bad_c[] = {
        {"nccl", cop(PT_COLL_ALLREDUCE, 1e6, 0, 1), 1e-6, "group size"},
        {"nccl", cop(PT_COLL_ALLREDUCE, 1e6, 4, 0), 1e-6, "ranks_per_node"},
        {"nccl", cop(PT_COLL_ALLREDUCE, 1e6, 4, 8), 1e-6, "ranks_per_node"},
        {"nccl", cop(PT_COLL_ALLREDUCE, -1, 4, 4), 1e-6, "bytes"},
        {"nccl", cop(PT_COLL_ALLREDUCE, 1e6, 4, 4), 0, "time_s"},
        {"nccl", cop(PT_COLL_ALLREDUCE, 1e6, 4, 4), NAN, "time_s"},
        {"nccl", cop(PT_COLL_COUNT, 1e6, 4, 4), 1e-6, "collective"},
        {"", cop(PT_COLL_ALLREDUCE, 1e6, 4, 4), 1e-6, "backend"},
        {"a-very-long-backend-name", cop(PT_COLL_ALLREDUCE, 1e6, 4, 4), 1e-6, "backend"},
    };
    for (size_t i = 0; i < sizeof bad_c / sizeof bad_c[0]; i++) {
        err.msg[0] = 0;
        CHECK_INT(pt_costdb_add_coll(db, bad_c[i].backend, &bad_c[i].op, bad_c[i].t,
                                     PT_SOURCE_PROFILE, &err), -1);
        CHECK_STR_HAS(err.msg, bad_c[i].why);
        CHECK_STR_HAS(err.msg, path);
    }
    pt_coll_op okc = cop(PT_COLL_ALLREDUCE, 1e6, 4, 4);
    CHECK_INT(pt_costdb_add_coll(db, "nccl", &okc, 1e-6, (pt_source)9, &err), -1);
    CHECK_STR_HAS(err.msg, "source");

    pt_cost_hw hw = h100();
    hw.mem_bw_Bps = -1;
    CHECK_INT(pt_costdb_add_device(db, &hw, &err), -1);
    CHECK_STR_HAS(err.msg, "bandwidths");
    hw = h100();
    hw.peak_flops[PT_DTYPE_BF16] = NAN;
    CHECK_INT(pt_costdb_add_device(db, &hw, &err), -1);
    CHECK_STR_HAS(err.msg, "bf16 peak");
    hw = h100();
    hw.device[0] = 0;
    CHECK_INT(pt_costdb_add_device(db, &hw, &err), -1);
    CHECK_STR_HAS(err.msg, "device name");

    /* Nothing reached memory or the file; a valid sample still goes in. */
    pt_costdb_id id;
    pt_costdb_identity(db, &id);
    CHECK_INT(id.kernel_samples, 0);
    CHECK_INT(id.coll_samples, 0);
    CHECK_INT(pt_costdb_add_kernel(db, "h100", &ok, 1e-6, PT_SOURCE_PROFILE, &err), 0);
    CHECK_INT(pt_costdb_add_coll(db, "nccl", &okc, 1e-6, PT_SOURCE_PROFILE, &err), 0);
    pt_costdb_close(db);
    db = NULL;
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_READ, &db, &err), 0);
    pt_costdb_identity(db, &id);
    CHECK_INT(id.kernel_samples, 1);
    CHECK_INT(id.coll_samples, 1);
    pt_costdb_close(db);
}

/* A version-0 database (the meta table alone) is brought up to date on open. */
static void test_migration(void)
{
    pt_err err;
    pt_costdb *db = NULL;
    char path[512];
    path_in_tmp(path, sizeof path, "v0.db");
    sql_script(path, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                     "INSERT INTO meta VALUES('schema_version', '0');");
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_READ, &db, &err), 0);
    if (!db) {
        fprintf(stderr, "migration: %s\n", err.msg);
        return;
    }
    pt_costdb_id id;
    pt_costdb_identity(db, &id);
    CHECK_INT(id.schema_version, pt_costdb_schema_version());
    CHECK_INT(id.schema_version, 7);
    CHECK_INT(id.kernel_samples, 0);
    pt_coll_op op = cop(PT_COLL_ALLGATHER, 1e6, 8, 8);
    CHECK_INT(pt_costdb_add_coll(db, "nccl", &op, 1e-4, PT_SOURCE_PROFILE, &err), 0);
    pt_costdb_close(db);

    sqlite3 *s;
    CHECK_INT(sqlite3_open(path, &s), SQLITE_OK);
    sqlite3_stmt *st;
    CHECK_INT(sqlite3_prepare_v2(s, "SELECT value FROM meta WHERE key = 'schema_version'", -1,
                                 &st, NULL), SQLITE_OK);
    CHECK_INT(sqlite3_step(st), SQLITE_ROW);
    CHECK_STR_HAS((const char *)sqlite3_column_text(st, 0), "7");
    sqlite3_finalize(st);
    CHECK_INT(sqlite3_prepare_v2(s, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                                    " AND name IN ('devices', 'kernel_samples', 'coll_samples',"
                                    " 'profile_runs')",
                                 -1, &st, NULL), SQLITE_OK);
    CHECK_INT(sqlite3_step(st), SQLITE_ROW);
    CHECK_INT(sqlite3_column_int(st, 0), 4);
    sqlite3_finalize(st);
    sqlite3_close(s);

    db = NULL;
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_READ, &db, &err), 0);
    pt_cost_hw hw = h100();
    CHECK_INT(pt_cost_coll(db, &hw, &op).prov, PT_PROV_MEASURED);
    pt_costdb_close(db);

    /* A failed migration leaves the file as it was: in a v0 file with a table in the
     * way of the last statement of step 1, the tables step 1 created before it are
     * rolled back and the version stays 0. */
    path_in_tmp(path, sizeof path, "v0-blocked.db");
    sql_script(path, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                     "INSERT INTO meta VALUES('schema_version', '0');"
                     "CREATE TABLE coll_samples(x);");
    expect_open_error(path, PT_COSTDB_READ, "migrating schema from version 0 to 1");
    CHECK_INT(sqlite3_open(path, &s), SQLITE_OK);
    CHECK_INT(sqlite3_prepare_v2(s, "SELECT (SELECT value FROM meta), (SELECT count(*) FROM"
                                    " sqlite_master WHERE name IN ('devices', 'kernel_samples'))",
                                 -1, &st, NULL), SQLITE_OK);
    CHECK_INT(sqlite3_step(st), SQLITE_ROW);
    CHECK_STR_HAS((const char *)sqlite3_column_text(st, 0), "0");
    CHECK_INT(sqlite3_column_int(st, 1), 0);
    sqlite3_finalize(st);
    sqlite3_close(s);
}

static void remove_tree(void)
{
    const char *names[] = {"costs.db", "garbage.db", "empty.db", "other.db", "newer.db",
                           "badversion.db", "notables.db", "badrow.db", "truncated.db",
                           "inserts.db", "v0.db", "v0-blocked.db"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        path_in_tmp(path, sizeof path, names[i]);
        unlink(path);
    }
    rmdir(tmpdir);
}

/* Measuring again replaces a sample instead of adding a repeat; runs are recorded. */
static void test_put_and_runs(void)
{
    char path[600];
    path_in_tmp(path, sizeof path, "put.db");
    pt_costdb *db;
    pt_err err;
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_CREATE, &db, &err), 0);
    if (!db)
        return;
    pt_profile_run run = {.host = "h", .device = "cpu", .backend = "mpi",
                          .versions = "OpenBLAS x", .command = "ptprofile --quick"};
    int64_t id;
    CHECK_INT(pt_costdb_run_begin(db, &run, &id, &err), 0);
    CHECK(id > 0);
    pt_kernel_op g = kop("gemm:fp32:m=64,n=64,k=64", PT_DTYPE_FP32, 2.0 * 64 * 64 * 64, 49152);
    pt_coll_op c = cop(PT_COLL_ALLREDUCE, 4096, 2, 2);
    CHECK(!pt_costdb_has_kernel(db, "cpu", g.key));
    CHECK_INT(pt_costdb_begin(db, &err), 0);
    CHECK_INT(pt_costdb_put_kernel(db, "cpu", &g, 1e-4, PT_SOURCE_PROFILE, &err), 0);
    CHECK_INT(pt_costdb_put_kernel(db, "cpu", &g, 2e-4, PT_SOURCE_PROFILE, &err), 0);
    CHECK_INT(pt_costdb_put_coll(db, "mpi", &c, 1e-5, PT_SOURCE_PROFILE, &err), 0);
    CHECK_INT(pt_costdb_put_coll(db, "mpi", &c, 3e-5, PT_SOURCE_PROFILE, &err), 0);
    /* A trace sample of the same op is kept beside the profile one. */
    CHECK_INT(pt_costdb_put_kernel(db, "cpu", &g, 5e-4, PT_SOURCE_TRACE, &err), 0);
    CHECK_INT(pt_costdb_commit(db, &err), 0);
    CHECK_INT(pt_costdb_run_end(db, id, "done", &err), 0);
    CHECK(pt_costdb_has_kernel(db, "cpu", g.key));
    CHECK_INT(pt_costdb_count_colls(db, "mpi"), 1);
    pt_costdb_close(db);

    CHECK_INT(pt_costdb_open(path, PT_COSTDB_READ, &db, &err), 0);
    pt_costdb_id ident;
    pt_costdb_identity(db, &ident);
    CHECK_INT(ident.kernel_samples, 2);
    CHECK_INT(ident.coll_samples, 1);
    pt_cost_hw hw = h100();
    snprintf(hw.device, sizeof hw.device, "cpu");
    snprintf(hw.backend, sizeof hw.backend, "mpi");
    /* a key timed in a training run (trace, 5e-4) stands for itself: the profile's
     * repeats (2e-4 after deduplication) are what it falls back on */
    CHECK_NEAR(pt_cost_kernel(db, &hw, &g).time_s, 5e-4, 1e-12);
    CHECK_NEAR(pt_cost_coll(db, &hw, &c).time_s, 3e-5, 1e-12);
    pt_costdb_close(db);

    sqlite3 *s;
    sqlite3_stmt *st;
    CHECK_INT(sqlite3_open(path, &s), SQLITE_OK);
    CHECK_INT(sqlite3_prepare_v2(s, "SELECT status, finished_at IS NOT NULL FROM profile_runs",
                                 -1, &st, NULL), SQLITE_OK);
    CHECK_INT(sqlite3_step(st), SQLITE_ROW);
    CHECK_STR_HAS((const char *)sqlite3_column_text(st, 0), "done");
    CHECK_INT(sqlite3_column_int(st, 1), 1);
    sqlite3_finalize(st);
    sqlite3_close(s);
}

/* ---- Robust statistics, fits, runs' samples, forgetting (calibration) ------------------ */

static void test_robust(void)
{
    /* nine repeats around 100 us and one pre-empted repeat of 3 ms */
    double v[10] = {100e-6, 101e-6, 99e-6, 102e-6, 98e-6, 100e-6, 103e-6, 97e-6, 100e-6, 3e-3};
    pt_robust r;
    pt_robust_of(v, 10, &r);
    CHECK_INT(r.spans, 10);
    CHECK_INT(r.kept, 9); /* the 3 ms repeat is an outlier */
    CHECK_NEAR(r.median_s, 100e-6, 1e-12);
    /* deviations 0 1 1 2 2 0 3 3 0 2900 (us): sorted 0 0 0 1 1 2 2 3 3 2900, MAD 1.5 */
    CHECK_NEAR(r.mad_s, 1.5e-6, 1e-12);
    CHECK_NEAR(r.mean_s, 900e-6 / 9, 1e-12);
    CHECK_NEAR(r.max_s, 3e-3, 1e-15);
    CHECK_NEAR(r.total_s, 900e-6 + 3e-3, 1e-12);
    pt_robust a = {.spans = 4, .kept = 4, .median_s = 1, .mad_s = 0.1, .mean_s = 1,
                   .min_s = 0.5, .max_s = 2, .total_s = 4};
    pt_robust b = {.spans = 2, .kept = 1, .median_s = 3, .mad_s = 0.3, .mean_s = 3,
                   .min_s = 0.2, .max_s = 9, .total_s = 12};
    const pt_robust *both[2] = {&a, &b};
    pt_robust m;
    pt_robust_merge(both, 2, &m);
    CHECK_INT(m.spans, 6);
    CHECK_INT(m.kept, 5);
    CHECK_NEAR(m.median_s, 2, 1e-15);
    CHECK_NEAR(m.mean_s, 7.0 / 5, 1e-15);
    CHECK_NEAR(m.min_s, 0.2, 1e-15);
    CHECK_NEAR(m.max_s, 9, 1e-15);
}

/* A cpu-like device: 100 GFLOP/s fp32, 10 GB/s. */
static pt_cost_hw small_cpu(void)
{
    pt_cost_hw hw = {.device = "cpu", .backend = "mpi", .mem_bw_Bps = 10e9,
                     .devices_per_node = 2};
    hw.peak_flops[PT_DTYPE_FP32] = 100e9;
    return hw;
}

static void test_fit_recovers(void)
{
    pt_costdb *db;
    pt_err err;
    CHECK_INT(pt_costdb_open(NULL, 0, &db, &err), 0);
    pt_cost_hw hw = small_cpu();
    /* a memory-bound class made with efficiency 20% and 3 us a kernel (bytes / 10 GB/s
     * / 0.2 + 3 us), with +-1% of alternating noise; one at 150% of the bandwidth (a
     * cache-resident kernel whose bytes are not DRAM traffic); one of a single size
     * (CHECK_NEAR's tolerance is relative) */
    const double sizes[5] = {1e5, 4e5, 1.6e6, 6.4e6, 2.56e7};
    for (int i = 0; i < 5; i++) {
        char key[64];
        snprintf(key, sizeof key, "gelu_fwd:fp32:n=%g", sizes[i]);
        pt_kernel_op op = kop(key, PT_DTYPE_FP32, 0, sizes[i]);
        double t = (sizes[i] / 10e9 / 0.2 + 3e-6) * (i % 2 ? 1.005 : 0.995);
        CHECK_INT(pt_costdb_add_kernel(db, "cpu", &op, t, PT_SOURCE_PROFILE, &err), 0);
        snprintf(key, sizeof key, "add_fwd:fp32:n=%g", sizes[i]);
        op = kop(key, PT_DTYPE_FP32, 0, sizes[i]);
        CHECK_INT(pt_costdb_add_kernel(db, "cpu", &op, sizes[i] / 10e9 / 1.5, PT_SOURCE_PROFILE,
                                       &err), 0);
    }
    pt_kernel_op one = kop("softmax:fp32:n=1", PT_DTYPE_FP32, 0, 1e6);
    CHECK_INT(pt_costdb_add_kernel(db, "cpu", &one, 1e-3, PT_SOURCE_PROFILE, &err), 0);
    pt_kernel_fits f;
    pt_cost_fit_kernels(db, &hw, &f);
    pt_cost_fit_judge_kernels(db, &hw, &f);
    CHECK_INT(f.n, 3);
    for (int c = 0; c < f.n; c++) {
        const pt_kernel_fit *x = &f.v[c];
        if (!strcmp(x->cls, "gelu_fwd")) {
            CHECK_NEAR(x->eff, 0.2, 0.01);
            CHECK_NEAR(x->fixed_s, 3e-6, 0.15);
            CHECK(x->rms_rel_err < 0.02);
            CHECK(x->cv_rel_err < 0.05);
            CHECK(x->accepted); /* the built-in curve misses these by far more */
        } else if (!strcmp(x->cls, "add_fwd")) {
            CHECK_NEAR(x->eff, 1.5, 1e-6);
            CHECK(!x->accepted);
            CHECK_STR_HAS(x->why, "above 100%");
        } else {
            CHECK_STR_HAS(x->cls, "softmax");
            CHECK(!x->accepted);
            CHECK_STR_HAS(x->why, "too few sizes (1)");
        }
    }
    /* Stored, the accepted fit is in force, and a second judgement of the same fit
     * finds nothing better than itself: not stored again. */
    pt_costdb_close(db);
    char path[600];
    path_in_tmp(path, sizeof path, "fits.db");
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_CREATE, &db, &err), 0);
    for (int i = 0; i < 5; i++) {
        char key[64];
        snprintf(key, sizeof key, "gelu_fwd:fp32:n=%g", sizes[i]);
        pt_kernel_op op = kop(key, PT_DTYPE_FP32, 0, sizes[i]);
        double t = (sizes[i] / 10e9 / 0.2 + 3e-6) * (i % 2 ? 1.005 : 0.995);
        CHECK_INT(pt_costdb_add_kernel(db, "cpu", &op, t, PT_SOURCE_PROFILE, &err), 0);
    }
    pt_cost_fit_kernels(db, &hw, &f);
    pt_cost_fit_judge_kernels(db, &hw, &f);
    CHECK_INT(pt_costdb_put_kernel_fits(db, "cpu", 7, &f, &err), 0);
    pt_kernel_fits in_force;
    pt_costdb_kernel_fits(db, "cpu", &in_force);
    CHECK_INT(in_force.n, 1);
    CHECK_NEAR(in_force.v[0].eff, f.v[0].eff, 1e-15);
    /* a size beyond the samples: no interpolation, the analytic model with the fit */
    pt_kernel_op other = kop("gelu_fwd:fp32:n=1e9", PT_DTYPE_FP32, 0, 1e9);
    CHECK_NEAR(pt_cost_kernel(db, &hw, &other).time_s, 1e9 / 10e9 / f.v[0].eff + f.v[0].fixed_s,
               1e-12);
    pt_cost_fit_judge_kernels(db, &hw, &f);
    CHECK(!f.v[0].accepted);
    CHECK_STR_HAS(f.v[0].why, "is not below");
    pt_costdb_close(db);
}

static pt_op_stat opstat(int rank, const char *key, double flops, double bytes, double median,
                         int64_t kept)
{
    pt_op_stat s = {.rank = rank, .dtype = PT_DTYPE_FP32, .flops = flops, .bytes = bytes};
    snprintf(s.key, sizeof s.key, "%s", key);
    snprintf(s.name, sizeof s.name, "%.*s", (int)(strchr(key, ':') - key), key);
    s.st = (pt_robust){.spans = kept, .kept = kept, .median_s = median, .mad_s = median / 100,
                       .mean_s = median, .min_s = median, .max_s = median,
                       .total_s = median * (double)kept};
    return s;
}

static void test_run_samples_and_forget(void)
{
    char path[600];
    path_in_tmp(path, sizeof path, "runs5.db");
    pt_costdb *db;
    pt_err err;
    pt_cost_hw hw = small_cpu();
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_CREATE, &db, &err), 0);
    const char *g1 = "gemm:fp32:m=64,n=64,k=64", *g2 = "gemm:fp32:m=128,n=64,k=64";
    const char *xf = "xent:fp32:rows=8,cols=256";
    pt_kernel_op o1 = kop(g1, PT_DTYPE_FP32, 2.0 * 64 * 64 * 64, 0);
    pt_kernel_op o2 = kop(g2, PT_DTYPE_FP32, 2.0 * 128 * 64 * 64, 0);
    pt_kernel_op of = kop(xf, PT_DTYPE_FP32, 0, 16384);
    CHECK_INT(pt_costdb_add_kernel(db, "cpu", &o1, 10e-6, PT_SOURCE_PROFILE, &err), 0);
    CHECK_INT(pt_costdb_add_kernel(db, "cpu", &o2, 20e-6, PT_SOURCE_PROFILE, &err), 0);
    CHECK_INT(pt_costdb_add_kernel(db, "cpu", &of, 30e-6, PT_SOURCE_PROFILE, &err), 0);

    /* two ranks' statistics of g1 */
    pt_op_stat st[] = {opstat(0, g1, o1.flops, 0, 11e-6, 8), opstat(1, g1, o1.flops, 0, 13e-6, 8),
                       opstat(0, g2, o2.flops, 0, 24e-6, 8), opstat(0, xf, 0, 16384, 48e-6, 4),
                       opstat(0, "attn_fwd:fp32:b=1", 1e6, 0, 5e-6, 2)};
    pt_op_sample *v;
    size_t n;
    CHECK_INT(pt_op_samples(st, 5, &v, &n, &err), 0);
    CHECK_INT((long long)n, 4);
    int keys;
    /* g1 merged: median of 11 and 13 us = 12 us, 1.2x its 10 us; g2 24/20 = 1.2x */
    CHECK_NEAR(pt_gemm_ratio(v, n, db, &hw, &keys), 1.2, 1e-12);
    CHECK_INT(keys, 2);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(v[i].op.key, g1)) {
            CHECK_NEAR(v[i].st.median_s, 12e-6, 1e-15);
            CHECK_INT(v[i].ranks, 2);
            CHECK_INT(v[i].st.kept, 16);
        }
        /* the fused cross-entropy is one op: its sample is its own span's time */
        if (!strcmp(v[i].op.key, xf))
            CHECK_NEAR(v[i].st.median_s, 48e-6, 1e-15);
    }
    pt_run_record rec = {.world = 2, .steps = 5, .steps_timed = 4, .measured_step_s = 0.1,
                         .model = "tiny", .layout = "dp=2", .gemm_ratio = 1.2};
    int64_t run;
    /* ptrun records a run and its samples in one transaction: when storing the samples
     * fails (here a device name the table refuses; a full disk in life), the run's
     * record goes too, though recording it had committed its own, inner transaction */
    {
        int64_t stored;
        pt_run_record *none;
        size_t n_none;
        CHECK_INT(pt_costdb_begin(db, &err), 0);
        CHECK_INT(pt_costdb_record_run(db, &rec, NULL, 0, st, 5, NULL, 0, &run, &err), 0);
        CHECK_INT(pt_costdb_put_run_samples(db, "", run, v, n, &stored, &err), -1);
        CHECK_INT(pt_costdb_rollback(db, &err), 0);
        CHECK_INT(pt_costdb_runs(db, &none, &n_none, &err), 0);
        CHECK_INT((long long)n_none, 0);
        free(none);
    }
    CHECK_INT(pt_costdb_record_run(db, &rec, NULL, 0, st, 5, NULL, 0, &run, &err), 0);
    pt_cost before[3] = {pt_cost_kernel(db, &hw, &o1), pt_cost_kernel(db, &hw, &o2),
                         pt_cost_kernel(db, &hw, &of)};
    int64_t stored;
    CHECK_INT(pt_costdb_put_run_samples(db, "cpu", run, v, n, &stored, &err), 0);
    CHECK_INT(stored, 3); /* attn_fwd has 2 repeats, fewer than PT_MIN_SPANS */
    /* again: the run's samples are replaced, not piled up */
    CHECK_INT(pt_costdb_put_run_samples(db, "cpu", run, v, n, &stored, &err), 0);
    pt_costdb_id ident;
    pt_costdb_identity(db, &ident);
    CHECK_INT(ident.kernel_samples, 6);
    /* the run's 12 us, not the median with the profile's 10 us */
    CHECK_NEAR(pt_cost_kernel(db, &hw, &o1).time_s, 12e-6, 1e-15);
    pt_kernel_fits f = {.n = 1};
    f.v[0] = (pt_kernel_fit){.cls = "gemm", .eff = 0.5, .samples = 3, .accepted = true};
    CHECK_INT(pt_costdb_put_kernel_fits(db, "cpu", run, &f, &err), 0);
    int64_t runs[4], prof;
    CHECK_INT(pt_costdb_sample_runs(db, "cpu", runs, 4, &prof), 1);
    CHECK_INT(runs[0], run);
    CHECK_INT(prof, 3);

    /* the stored statistics read back */
    pt_op_stat *back;
    size_t nb;
    CHECK_INT(pt_costdb_run_op_stats(db, run, &back, &nb, &err), 0);
    CHECK_INT((long long)nb, 5);
    free(back);

    /* a dry run changes nothing; forgetting restores every answer exactly */
    pt_forgotten gone;
    pt_cost now = pt_cost_kernel(db, &hw, &o1);
    CHECK_INT(pt_costdb_begin(db, &err), 0);
    CHECK_INT(pt_costdb_forget_run(db, run, &gone, &err), 0);
    CHECK_INT(gone.samples, 3);
    CHECK_INT(gone.kernel_fits, 1);
    CHECK(pt_cost_kernel(db, &hw, &o1).time_s == before[0].time_s);
    CHECK_INT(pt_costdb_rollback(db, &err), 0);
    CHECK(pt_cost_kernel(db, &hw, &o1).time_s == now.time_s);
    CHECK_INT(pt_costdb_begin(db, &err), 0);
    CHECK_INT(pt_costdb_forget_run(db, run, &gone, &err), 0);
    CHECK_INT(pt_costdb_commit(db, &err), 0);
    pt_costdb_close(db);
    CHECK_INT(pt_costdb_open(path, PT_COSTDB_READ, &db, &err), 0);
    pt_kernel_op ops[3] = {o1, o2, of};
    for (int i = 0; i < 3; i++)
        CHECK(pt_cost_kernel(db, &hw, &ops[i]).time_s == before[i].time_s);
    pt_costdb_kernel_fits(db, "cpu", &f);
    CHECK_INT(f.n, 0);
    pt_run_record *rr;
    size_t nr;
    CHECK_INT(pt_costdb_runs(db, &rr, &nr, &err), 0);
    CHECK_INT((long long)nr, 1);
    CHECK(nr == 1 && rr[0].forgotten && rr[0].steps_timed == 4 && rr[0].gemm_ratio == 1.2);
    free(rr);
    free(v);
    pt_costdb_close(db);
}

/* Cost tables from SQL text (pt_costdb_open_sql) and the shipped profiles built on it. */
static void test_shipped(void)
{
    pt_err err;
    pt_costdb *db = NULL;
    const char *sql =
        "INSERT INTO profile_runs(started_at, finished_at, host, device, backend, versions,"
        " command, status) VALUES ('2026-01-02T03:04:05Z', NULL, 'h', 'dev', 'nccl',"
        " 'old libraries', 'ptprofile', 'interrupted'), ('2026-01-03T00:00:00Z', 'x', 'h',"
        " 'dev', 'nccl', 'libraries 1.2', 'ptprofile', 'done');"
        "INSERT INTO kernel_samples(device, op_key, kind, dtype, flops, bytes, time_s, source,"
        " created_at) VALUES ('dev', 'gemm:bf16:m=1024,n=1024,k=1024', 'gemm', 'bf16',"
        " 2147483648, 6291456, 5e-6, 'profile', 'x');";
    CHECK_INT(pt_costdb_open_sql("the test's profile", sql, &db, &err), 0);
    if (!db) {
        fprintf(stderr, "open_sql: %s\n", err.msg);
        return;
    }
    pt_cost_hw hw = h100();
    snprintf(hw.device, sizeof hw.device, "dev");
    pt_kernel_op op = kop("gemm:bf16:m=1024,n=1024,k=1024", PT_DTYPE_BF16, 2147483648.0, 6291456);
    pt_cost c = pt_cost_kernel(db, &hw, &op);
    CHECK_INT(c.prov, PT_PROV_MEASURED);
    CHECK_NEAR(c.time_s, 5e-6, 1e-15);
    pt_costdb_id id;
    pt_costdb_identity(db, &id);
    CHECK(strcmp(id.path, "the test's profile") == 0);
    CHECK_INT(id.kernel_samples, 1);
    /* the first run's date, the runs, the last finished run's libraries */
    char about[512];
    CHECK_INT(pt_costdb_profile_about(db, "dev", about, sizeof about), 0);
    CHECK(strcmp(about, "measured 2026-01-02 by 2 ptprofile runs; libraries 1.2") == 0);
    CHECK_INT(pt_costdb_profile_about(db, "other", about, sizeof about), -1);
    CHECK_INT(about[0], '\0');
    pt_costdb_close(db);

    /* Bad text: the error names the table, nothing is opened. */
    db = NULL;
    CHECK_INT(pt_costdb_open_sql("bad profile", "INSERT INTO nosuch VALUES (1);", &db, &err), -1);
    CHECK(db == NULL);
    CHECK_STR_HAS(err.msg, "bad profile: bad cost data: no such table: nosuch");
    CHECK_INT(pt_costdb_open_sql("fp64 profile",
                                 "INSERT INTO kernel_samples(device, op_key, kind, dtype, flops,"
                                 " bytes, time_s, source, created_at) VALUES ('dev', 'gemm:fp64:x',"
                                 " 'gemm', 'fp64', 1, 1, 1, 'profile', 'x');",
                                 &db, &err),
              -1);
    CHECK_STR_HAS(err.msg, "unknown data type 'fp64'");

    /* Every shipped profile loads, holds its device's profiled samples only and says
     * what it was measured on; the H100's is among them. */
    bool h100_shipped = false;
    for (const pt_shipped_sql *s = pt_shipped_sqls; s->device; s++) {
        h100_shipped |= strcmp(s->device, "H100-SXM5-80GB") == 0;
        db = NULL;
        CHECK_INT(pt_costdb_open_shipped(s->device, &db, &err), 0);
        if (!db) {
            fprintf(stderr, "shipped %s: %s\n", s->device, err.msg);
            continue;
        }
        int64_t runs[4], profiled;
        CHECK_INT(pt_costdb_sample_runs(db, s->device, runs, 4, &profiled), 0);
        pt_costdb_identity(db, &id);
        CHECK(profiled > 100);
        CHECK_INT(id.kernel_samples, profiled);
        CHECK_INT(id.coll_samples, 0);
        CHECK_INT(pt_costdb_profile_about(db, s->device, about, sizeof about), 0);
        CHECK(strncmp(about, "measured 20", 11) == 0);
        CHECK_STR_HAS(about, "driver");
        CHECK_STR_HAS(id.path, s->device);
        pt_costdb_close(db);
    }
    CHECK(h100_shipped);
    db = (pt_costdb *)&err; /* overwritten with NULL */
    CHECK_INT(pt_costdb_open_shipped("no-such-device", &db, &err), 1);
    CHECK(db == NULL);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_cost.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_names();
    test_busbw();
    test_kernel_analytic();
    test_coll_analytic();
    test_db_roundtrip();
    test_many();
    test_open_errors();
    test_insert_errors();
    test_migration();
    test_put_and_runs();
    test_robust();
    test_fit_recovers();
    test_run_samples_and_forget();
    test_shipped();
    remove_tree();
    return pt_check_result();
}
