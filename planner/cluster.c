/*
 * Cluster specs: what the planner knows about the machines before profiling —
 * node count, devices per node, how many devices one NVLink fabric joins, each
 * device's memory and peak throughput, and the bandwidth and latency of the links
 * inside an NVLink domain and between domains. This file owns the built-in clusters
 * (datasheet figures for DGX A100, DGX H100, DGX H200 and DGX B200 nodes and GB200
 * NVL72 racks, and `local`, read off this machine at run time), the JSON form of a
 * spec and its checks. Datasheet figures are upper bounds; ptprofile's measurements
 * replace them.
 *
 * JSON format (unknown fields refused, and every field required but those marked
 * optional; integers may be written as reals with no fractional part, 40e9; other
 * numbers may be integers or reals):
 *   {
 *     "name": "my-cluster",            string, at most 63 bytes, not empty
 *     "nodes": 4,                      integer >= 1
 *     "devices_per_node": 8,           integer >= 1
 *     "nvlink_domain": 72,             optional: devices one NVLink fabric joins, a
 *                                      multiple of devices_per_node (default: the
 *                                      node); a dump writes it when wider than a node
 *     "device": {
 *       "name": "A100-SXM4-80GB",
 *       "memory_bytes": 85899345920,   integer > 0
 *       "memory_bandwidth": 2.039e12,  bytes/s
 *       "peak_flops": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12,
 *                      "fp16": 312e12, "fp8": 0}   dense FLOP/s, each optional;
 *                                                  absent or 0 = unsupported or not
 *                                                  yet profiled; the planned
 *                                                  precision's must be > 0
 *       "sm_count": 108,               optional
 *       "gemm_max_efficiency": 0.869,  optional, share of peak
 *       "gemm_max_efficiency_fp8": 0   optional, FP8 GEMMs' share of the fp8 peak
 *                                      (absent or 0: gemm_max_efficiency's)
 *     },
 *     "intra_node": {"name": "NVLink3", "bandwidth": 300e9, "latency": 3e-6},
 *     "inter_node": {"name": "HDR-IB", "bandwidth": 25e9, "latency": 5e-6,
 *                    "nics": 8,              optional: NICs per node, >= 1
 *                    "nic_bandwidth": 25e9}  optional: bytes/s per NIC per direction
 *   }
 * "intra_node" is the link inside an NVLink domain (the node, unless "nvlink_domain"
 * says more), "inter_node" the network between domains. Link bandwidth is bytes/s
 * per device per direction, latency in seconds; all rates and latencies must be
 * finite and >= 0 (0 = not yet profiled). Either link may add
 * the optional "bus_bandwidth" and "allreduce_bus_bandwidth" (NCCL's achievable bus
 * bandwidth). The inter-node "bandwidth" may be left out when "nics" and
 * "nic_bandwidth" are given: it is then nics x nic_bandwidth / devices_per_node (the
 * node's NICs shared by its devices); given with both, it must agree with them. A dump
 * writes "bandwidth" and "nics" (not "nic_bandwidth"), so that editing its bandwidth
 * is enough.
 */
#include "cost.h"
#include "specjson.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Indexed by pt_dtype (the same names as pt_dtype_name); the keys of "peak_flops". */
static const char *const dtype_names[] = {"fp32", "tf32", "bf16", "fp16", "fp8", NULL};

/* ---- Built-in clusters ------------------------------------------------------- */

/* What software reaches on these machines, beside the datasheets' line rates:
 * - sm_count: 108 SMs on A100 (NVIDIA A100 Tensor Core GPU Architecture whitepaper,
 *   2020), 132 on H100 SXM5 (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022);
 * - gemm_max_eff: the maximum achievable bf16 matmul rate over a shape sweep
 *   (stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul
 *   FLOPS comparison table"): 271.2 TFLOP/s = 86.9% of peak on A100 80GB, 794.5 =
 *   80.3% on H100 SXM;
 * - gemm_max_eff_fp8: the same table's FP8 (float8_e4m3fn) sweep: 1,402.6 TFLOP/s =
 *   70.9% of the 1,979 FP8 peak on H100 SXM, 1,453.4 = 73.4% on H200 SXM, 3,432.5 =
 *   76.3% on B200, 3,615.6 = 72.3% on GB200: on Hopper FP8 reaches 1.77x (H100) and
 *   1.83x (H200) the bf16 rate, not the datasheets' 2x;
 * - NCCL bus bandwidth: on 8x H100 NVLink about 370 GB/s for ring collectives (450
 *   line rate less ~20% protocol overhead) and 480 GB/s for all-reduce with NVLink
 *   SHARP (NCCL maintainer in NVIDIA/nccl-tests#212, 2024); 46-48 GB/s per 400 Gb/s NDR
 *   NIC (NVIDIA in nccl-tests#290, 2025): 46; 8x A100 NVLink all-reduce about
 *   200 GB/s (nccl-tests#149); HDR 200 Gb/s per NIC: the same 92% of line rate as NDR,
 *   23 GB/s. */

/* Link latencies are estimates (NVLink/NVSwitch hop and one InfiniBand switch hop
 * as seen by a small NCCL message), to be replaced by ptprofile's measurements. */
#define PT_NVLINK_LATENCY_S 3e-6
#define PT_IB_LATENCY_S 5e-6

/* NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column): FP32 19.5 TFLOPS,
 * TF32 156, BF16/FP16 312 (dense; the datasheet's 312/624 are with sparsity), no
 * FP8; 80 GB HBM2e (nvidia-smi reports 81920 MiB) at 2,039 GB/s; NVLink 3 at
 * 600 GB/s total, i.e. 300 GB/s each way. NVIDIA DGX A100 datasheet: 8 GPUs, 8x
 * single-port ConnectX-6 200 Gb/s HDR InfiniBand for the compute fabric, one per
 * GPU: 25 GB/s each way per GPU. */
static const pt_cluster cluster_dgx_a100 = {
    .name = "dgx-a100-80g",
    .nodes = 1,
    .devices_per_node = 8,
    .device = {.name = "A100-SXM4-80GB",
               .peak_flops = {19.5e12, 156e12, 312e12, 312e12, 0},
               .memory_bytes = INT64_C(80) << 30,
               .memory_bw_Bps = 2039e9,
               .sm_count = 108, .gemm_max_eff = 0.869},
    .intra = {.name = "NVLink3", .bw_Bps = 300e9, .latency_s = PT_NVLINK_LATENCY_S,
              .busbw_Bps = 200e9},
    .inter = {.name = "HDR-InfiniBand-200G", .bw_Bps = 25e9, .latency_s = PT_IB_LATENCY_S,
              .busbw_Bps = 23e9, .nics = 8, .nic_bw_Bps = 25e9},
};

/* NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): FP32 67 TFLOPS, and
 * dense TF32 494.7, BF16/FP16 989.4, FP8 1978.9 (half of the datasheet's figures,
 * which are with sparsity); 80 GB HBM3 at 3.35 TB/s; NVLink 4 at 900 GB/s total,
 * 450 GB/s each way. NVIDIA DGX H100 user guide: 8 GPUs, 8x single-port ConnectX-7
 * 400 Gb/s (NDR InfiniBand) for the compute fabric, one per GPU: 50 GB/s each way. */
static const pt_cluster cluster_dgx_h100 = {
    .name = "dgx-h100",
    .nodes = 1,
    .devices_per_node = 8,
    .device = {.name = "H100-SXM5-80GB",
               .peak_flops = {67e12, 494.7e12, 989.4e12, 989.4e12, 1978.9e12},
               .memory_bytes = INT64_C(80) << 30,
               .memory_bw_Bps = 3.35e12,
               .sm_count = 132, .gemm_max_eff = 0.803, .gemm_max_eff_fp8 = 0.709},
    .intra = {.name = "NVLink4", .bw_Bps = 450e9, .latency_s = PT_NVLINK_LATENCY_S,
              .busbw_Bps = 370e9, .allreduce_busbw_Bps = 480e9},
    .inter = {.name = "NDR-InfiniBand-400G", .bw_Bps = 50e9, .latency_s = PT_IB_LATENCY_S,
              .busbw_Bps = 46e9, .nics = 8, .nic_bw_Bps = 50e9},
};

/* NVIDIA H200: the H100 SXM's compute (the same GH100 with 132 SMs) with more and
 * faster memory (stas00/ml-engineering, compute/accelerator/README.md, "TFLOPS
 * comparison table", dense: FP32 67, TF32 494.5, BF16/FP16 989, FP8 1979 TFLOPS,
 * note 16, from NVIDIA's H200 specifications; the datasheet's 989/1,979/3,958 for
 * TF32/BF16/FP8 are with sparsity): the H100 entry's figures. 141 GB of HBM3e (taken
 * as GiB, as the H100's 80 GB are) at 4.8 TB/s (the same README's memory table);
 * NVLink 4 at 900 GB/s total ("18x 4th Gen NVLink, 900GB/s" in NVIDIA's MLPerf
 * system description H200-SXM-141GBx8), 450 GB/s each way. NVIDIA DGX BasePOD
 * reference architecture, "Core Components": the DGX H200 is the DGX H100 system with
 * 1,128 GB of GPU memory — four NVSwitch chips, eight single-port ConnectX-7 at up to
 * 400 Gb/s for the compute fabric, one per GPU: 50 GB/s each way — so the H100's
 * NCCL and matmul figures carry over (the MAMF table: "H200 is the same"), except
 * all-reduce with NVLink SHARP, measured on 8x H200 at 475 GB/s (nccl-tests#272). */
static const pt_cluster cluster_dgx_h200 = {
    .name = "dgx-h200",
    .nodes = 1,
    .devices_per_node = 8,
    .device = {.name = "H200-SXM5-141GB",
               .peak_flops = {67e12, 494.7e12, 989.4e12, 989.4e12, 1978.9e12},
               .memory_bytes = INT64_C(141) << 30,
               .memory_bw_Bps = 4.8e12,
               .sm_count = 132, .gemm_max_eff = 0.803, .gemm_max_eff_fp8 = 0.734},
    .intra = {.name = "NVLink4", .bw_Bps = 450e9, .latency_s = PT_NVLINK_LATENCY_S,
              .busbw_Bps = 370e9, .allreduce_busbw_Bps = 475e9},
    .inter = {.name = "NDR-InfiniBand-400G", .bw_Bps = 50e9, .latency_s = PT_IB_LATENCY_S,
              .busbw_Bps = 46e9, .nics = 8, .nic_bw_Bps = 50e9},
};

/* NVLink 5, NCCL's view: NCCL's src/graph/topo.h prices a Blackwell NVLink at
 * SM100_NVLINK_BW = 40.1 GB/s, 18 links per GPU: 721.8 GB/s of bus bandwidth for ring
 * collectives (its Hopper figure, 20.6 x 18 = 370.8, is the 370 above). No published
 * NVLink SHARP all-reduce figure for Blackwell is cited here, so all-reduce is priced
 * at that bus bandwidth too. */
#define PT_NVLINK5_BUSBW_BPS (18 * 40.1e9)

/* NVIDIA DGX B200 user guide, "Introduction to NVIDIA DGX B200 Systems": 8x B200 with
 * 1,440 GB of GPU memory in all, 180 GB each (taken as GiB); two NVLink 5 switches,
 * 14.4 TB/s aggregate: 1.8 TB/s per GPU, 900 GB/s each way; 8x single-port ConnectX-7
 * at up to 400 Gb/s for the cluster network, one per GPU: 50 GB/s each way. Peaks,
 * dense (stas00/ml-engineering, compute/accelerator/README.md, "TFLOPS comparison
 * table", note 20, from the DGX B200 datasheet): FP32 80, TF32 1,125, BF16/FP16 2,250,
 * FP8 4,500 TFLOPS — half NVIDIA's per-GPU Tensor Core figures (BF16 4.5, FP8 9
 * PFLOPS), which are with sparsity. HBM3e at 7.7 TB/s, NVIDIA's per-GPU HGX B200
 * figure (the driver reports a 7,680-bit bus at 3,996 MHz, 7.67 TB/s: pytorch/ao#4002;
 * the DGX datasheet's 64 TB/s per system is 8). 148 SMs (the device query in
 * pytorch/ao#4002). Best bf16 matmul 1,745 TFLOP/s = 77.6% of peak (the MAMF table). */
static const pt_cluster cluster_dgx_b200 = {
    .name = "dgx-b200",
    .nodes = 1,
    .devices_per_node = 8,
    .device = {.name = "B200-SXM6-180GB",
               .peak_flops = {80e12, 1125e12, 2250e12, 2250e12, 4500e12},
               .memory_bytes = INT64_C(180) << 30,
               .memory_bw_Bps = 7.7e12,
               .sm_count = 148, .gemm_max_eff = 0.776, .gemm_max_eff_fp8 = 0.763},
    .intra = {.name = "NVLink5", .bw_Bps = 900e9, .latency_s = PT_NVLINK_LATENCY_S,
              .busbw_Bps = PT_NVLINK5_BUSBW_BPS},
    .inter = {.name = "NDR-InfiniBand-400G", .bw_Bps = 50e9, .latency_s = PT_IB_LATENCY_S,
              .busbw_Bps = 46e9, .nics = 8, .nic_bw_Bps = 50e9},
};

/* NVIDIA DGX GB200 user guide, "Hardware": a rack is one 72-GPU NVLink domain of 18
 * compute trays (the nodes), each with 2 Grace CPUs, 4 Blackwell GPUs and 4x
 * single-port ConnectX-7 400G NICs for the cluster network: 50 GB/s each way per GPU.
 * NVIDIA DGX SuperPOD GB200 reference architecture, "Network Fabrics": every GPU has 18
 * NVLink 5 links, one to each of the rack's 18 NVLink switch chips, 1.8 TB/s in all:
 * 900 GB/s each way to any GPU of the rack. The GB200's GPUs peak above the B200's:
 * dense FP32 80, TF32 1,250, BF16/FP16 2,500, FP8 5,000 TFLOPS (stas00/ml-engineering,
 * compute/accelerator/README.md, "TFLOPS comparison table", note 23, per GPU and
 * without sparsity, from NVIDIA's GB200 NVL72 specifications); 186 GB of HBM3e (13.4 TB
 * over the rack's 72 GPUs; taken as GiB) at 8 TB/s (its memory table). Best bf16 matmul
 * 1,822 TFLOP/s = 72.9% of peak (the MAMF table). The SM count is not cited: 0. The
 * default size is one rack; --nodes counts trays. */
static const pt_cluster cluster_gb200_nvl72 = {
    .name = "gb200-nvl72",
    .nodes = 18,
    .devices_per_node = 4,
    .nvlink_domain = 72,
    .device = {.name = "GB200-186GB",
               .peak_flops = {80e12, 1250e12, 2500e12, 2500e12, 5000e12},
               .memory_bytes = INT64_C(186) << 30,
               .memory_bw_Bps = 8e12,
               .gemm_max_eff = 0.729, .gemm_max_eff_fp8 = 0.723},
    .intra = {.name = "NVLink5", .bw_Bps = 900e9, .latency_s = PT_NVLINK_LATENCY_S,
              .busbw_Bps = PT_NVLINK5_BUSBW_BPS},
    .inter = {.name = "NDR-InfiniBand-400G", .bw_Bps = 50e9, .latency_s = PT_IB_LATENCY_S,
              .busbw_Bps = 46e9, .nics = 4, .nic_bw_Bps = 50e9},
};

/* This machine as one node whose "devices" are its online CPU cores, each with an
 * equal share of physical memory. Compute and link figures are 0: not yet
 * profiled; ptprofile fills them. Returns -1 when sysconf cannot tell. */
static int cluster_local(pt_cluster *out)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES);
    long page_bytes = sysconf(_SC_PAGESIZE);
    memset(out, 0, sizeof *out);
    if (cores < 1 || cores > INT_MAX || pages < 1 || page_bytes < 1)
        return -1;
    snprintf(out->name, sizeof out->name, "local");
    out->nodes = 1;
    out->devices_per_node = (int)cores;
    snprintf(out->device.name, sizeof out->device.name, "cpu");
    out->device.memory_bytes = (int64_t)pages * page_bytes / cores;
    snprintf(out->intra.name, sizeof out->intra.name, "shared-memory");
    snprintf(out->inter.name, sizeof out->inter.name, "none");
    return 0;
}

/* In pt_cluster_builtin's order. */
static const char *const cluster_builtin_names[] = {"dgx-a100-80g", "dgx-h100", "dgx-h200",
                                                    "dgx-b200",     "gb200-nvl72", "local"};

int pt_cluster_builtin_count(void)
{
    return (int)(sizeof cluster_builtin_names / sizeof cluster_builtin_names[0]);
}

int pt_cluster_builtin(int i, pt_cluster *out)
{
    switch (i) {
    case 0: *out = cluster_dgx_a100; return 0;
    case 1: *out = cluster_dgx_h100; return 0;
    case 2: *out = cluster_dgx_h200; return 0;
    case 3: *out = cluster_dgx_b200; return 0;
    case 4: *out = cluster_gb200_nvl72; return 0;
    case 5: return cluster_local(out);
    }
    return -1;
}

/* ---- Lookup ------------------------------------------------------------------ */

int pt_cluster_get(const char *name, pt_cluster *out, pt_err *err)
{
    if (!name)
        return pt_err_set(err, "no cluster name given; see ptplan --list-clusters");
    for (int i = 0; i < pt_cluster_builtin_count(); i++) {
        if (strcmp(cluster_builtin_names[i], name) != 0)
            continue;
        if (pt_cluster_builtin(i, out))
            return pt_err_set(err, "cluster '%s': cannot read this machine's core count "
                                   "and memory size (sysconf)", name);
        return 0;
    }
    struct stat st;
    if (stat(name, &st) == 0)
        return pt_cluster_load_file(name, out, err);
    const char *meant = pt_spec_closest(name, cluster_builtin_names, pt_cluster_builtin_count());
    if (meant)
        return pt_err_set(err, "unknown cluster '%s' (not a built-in and no such file); did "
                               "you mean '%s'? (ptplan --list-clusters lists them)", name, meant);
    return pt_err_set(err,
                      "unknown cluster '%s' (not a built-in and no such file); "
                      "see ptplan --list-clusters", name);
}

int pt_cluster_load_file(const char *path, pt_cluster *out, pt_err *err)
{
    char *text = pt_json_read_file(path, err);
    if (!text)
        return -1;
    int rc = pt_cluster_from_json(text, path, out, err);
    free(text);
    return rc;
}

/* ---- JSON -------------------------------------------------------------------- */

/* In the order pt_cluster_to_json writes them. */
static const char *const cluster_keys[] = {"name", "nodes", "devices_per_node",
                                           "nvlink_domain", "device", "intra_node",
                                           "inter_node", NULL};
static const char *const device_keys[] = {"name", "memory_bytes", "memory_bandwidth",
                                          "peak_flops", "sm_count", "gemm_max_efficiency",
                                          "gemm_max_efficiency_fp8", NULL};
static const char *const intra_keys[] = {"name", "bandwidth", "latency", "bus_bandwidth",
                                         "allreduce_bus_bandwidth", NULL};
static const char *const inter_keys[] = {"name", "bandwidth", "latency", "nics",
                                         "nic_bandwidth", "bus_bandwidth",
                                         "allreduce_bus_bandwidth", NULL};

/* Two statements of one bandwidth agree when within this share of each other (a spec
 * may round what it derives by hand). */
#define PT_NIC_BW_TOLERANCE 1e-6

/* Optional fields (specs written before they existed leave them out: 0, unknown). */
static int opt_real(const pt_json_obj *o, const char *key, double *out, pt_err *err)
{
    return json_object_get(o->obj, key) ? pt_json_get_real(o, key, out, err) : 0;
}

static bool has(const pt_json_obj *o, const char *key)
{
    return json_object_get(o->obj, key) != NULL;
}

/* The per-device inter-node bandwidth a node's NICs give: nics x nic_bw shared by
 * its devices. */
static double nic_share_Bps(const pt_link *l, int devices_per_node)
{
    return (double)l->nics * l->nic_bw_Bps / devices_per_node;
}

static bool nic_share_agrees(const pt_link *l, int devices_per_node)
{
    double share = nic_share_Bps(l, devices_per_node);
    return fabs(l->bw_Bps - share) <= PT_NIC_BW_TOLERANCE * share;
}

/* inter_node's NICs: "nics" (per node, >= 1) and "nic_bandwidth" (bytes/s per NIC
 * per direction, > 0), from which "bandwidth" is derived when absent and which it
 * must agree with when present. `dpn` is the devices per node read (< 1: unknown,
 * reported elsewhere, nothing derived). */
static int nics_read(const pt_json_obj *lo, int dpn, pt_link *l, pt_err *err)
{
    char nics[160], nic_bw[160], bw[160];
    pt_json_field_name(lo, "nics", nics, sizeof nics);
    pt_json_field_name(lo, "nic_bandwidth", nic_bw, sizeof nic_bw);
    pt_json_field_name(lo, "bandwidth", bw, sizeof bw);
    int bad = 0;
    if (has(lo, "nics")) {
        if (pt_json_get_int32(lo, "nics", &l->nics, err))
            bad = -1;
        else if (l->nics < 1)
            bad = pt_json_fail(lo, "nics", err, "%s: field '%s' = %d: must be at least 1",
                               lo->origin, nics, l->nics);
    }
    if (has(lo, "nic_bandwidth")) {
        if (pt_json_get_real(lo, "nic_bandwidth", &l->nic_bw_Bps, err))
            bad = -1;
        else if (!(isfinite(l->nic_bw_Bps) && l->nic_bw_Bps > 0))
            bad = pt_json_fail(lo, "nic_bandwidth", err, "%s: field '%s' = %g: must be "
                               "finite and greater than 0", lo->origin, nic_bw, l->nic_bw_Bps);
    }
    if (has(lo, "nic_bandwidth") && !has(lo, "nics"))
        bad |= pt_json_fail(lo, "nics", err, "%s: field '%s' needs '%s', the NICs per node",
                            lo->origin, nic_bw, nics);
    bool derive = has(lo, "nics") && has(lo, "nic_bandwidth");
    if (has(lo, "bandwidth"))
        bad |= pt_json_get_real(lo, "bandwidth", &l->bw_Bps, err);
    else if (!derive)
        bad |= pt_json_fail(lo, "bandwidth", err, "%s: missing field '%s' (or give '%s' and "
                            "'%s')", lo->origin, bw, nics, nic_bw);
    if (bad || !derive || dpn < 1)
        return bad ? -1 : 0;
    if (!has(lo, "bandwidth"))
        l->bw_Bps = nic_share_Bps(l, dpn);
    else if (!nic_share_agrees(l, dpn))
        return pt_json_fail(lo, "bandwidth", err, "%s: field '%s' = %g disagrees with nics x "
                            "nic_bandwidth / devices_per_node = %d x %g / %d = %g: give "
                            "one or make them agree", lo->origin, bw, l->bw_Bps, l->nics,
                            l->nic_bw_Bps, dpn, nic_share_Bps(l, dpn));
    return 0;
}

/* Reads link `key`; the inter-node link may state its NICs (nics_read). */
static int link_read(const pt_json_obj *o, const char *key, bool inter, int dpn, pt_link *l,
                     pt_err *err)
{
    pt_json_obj lo;
    if (pt_json_get_object(o, key, inter ? inter_keys : intra_keys, &lo, err))
        return -1;
    int bad = pt_json_get_string(&lo, "name", l->name, sizeof l->name, err);
    bad |= inter ? nics_read(&lo, dpn, l, err)
                 : pt_json_get_real(&lo, "bandwidth", &l->bw_Bps, err);
    bad |= pt_json_get_real(&lo, "latency", &l->latency_s, err);
    bad |= opt_real(&lo, "bus_bandwidth", &l->busbw_Bps, err);
    bad |= opt_real(&lo, "allreduce_bus_bandwidth", &l->allreduce_busbw_Bps, err);
    return bad ? -1 : 0;
}

static int device_read(const pt_json_obj *o, pt_device *d, pt_err *err)
{
    pt_json_obj dev, flops;
    if (pt_json_get_object(o, "device", device_keys, &dev, err))
        return -1;
    int bad = pt_json_get_string(&dev, "name", d->name, sizeof d->name, err);
    bad |= pt_json_get_int(&dev, "memory_bytes", &d->memory_bytes, err);
    bad |= pt_json_get_real(&dev, "memory_bandwidth", &d->memory_bw_Bps, err);
    /* Each peak is optional: absent is 0, unsupported (pt_cluster_check_precision
     * requires the planned precision's). */
    if (pt_json_get_object(&dev, "peak_flops", dtype_names, &flops, err) == 0) {
        for (int t = 0; t < PT_DTYPE_COUNT; t++)
            bad |= opt_real(&flops, dtype_names[t], &d->peak_flops[t], err);
    } else {
        bad = -1;
    }
    if (has(&dev, "sm_count"))
        bad |= pt_json_get_int32(&dev, "sm_count", &d->sm_count, err);
    bad |= opt_real(&dev, "gemm_max_efficiency", &d->gemm_max_eff, err);
    bad |= opt_real(&dev, "gemm_max_efficiency_fp8", &d->gemm_max_eff_fp8, err);
    return bad ? -1 : 0;
}

/* The optional "nvlink_domain": absent, or equal to the devices per node, is the node
 * itself (0), which follows devices_per_node when a tool resizes the node; a value
 * below 1 is refused here, one that is not a multiple of the node by cluster_check. */
static int nvlink_domain_read(const pt_json_obj *o, pt_cluster *c, pt_err *err)
{
    c->nvlink_domain = 0;
    if (!has(o, "nvlink_domain"))
        return 0;
    int domain;
    if (pt_json_get_int32(o, "nvlink_domain", &domain, err))
        return -1;
    if (domain < 1) {
        char name[160];
        pt_json_field_name(o, "nvlink_domain", name, sizeof name);
        return pt_json_fail(o, "nvlink_domain", err, "%s: field '%s' = %d: must be a "
                            "positive multiple of devices_per_node (%d): the devices one "
                            "NVLink fabric joins are whole nodes", o->origin, name, domain,
                            c->devices_per_node);
    }
    c->nvlink_domain = domain == c->devices_per_node ? 0 : domain;
    return 0;
}

/* Reads every field of `o` (which has a collector) into c, recording each problem. */
static int cluster_read(const pt_json_obj *o, pt_cluster *c, pt_err *err)
{
    int bad = pt_json_check_keys(o, cluster_keys, err);
    bad |= pt_json_get_string(o, "name", c->name, sizeof c->name, err);
    bad |= pt_json_get_int32(o, "nodes", &c->nodes, err);
    bad |= pt_json_get_int32(o, "devices_per_node", &c->devices_per_node, err);
    bad |= nvlink_domain_read(o, c, err);
    bad |= device_read(o, &c->device, err);
    bad |= link_read(o, "intra_node", false, 0, &c->intra, err);
    bad |= link_read(o, "inter_node", true, c->devices_per_node, &c->inter, err);
    return bad ? -1 : 0;
}

int pt_cluster_read_obj(const pt_json_obj *o, pt_cluster *c, pt_err *err)
{
    if (o->errs)
        return cluster_read(o, c, err);
    pt_json_errs errs;
    pt_json_errs_init(&errs);
    pt_json_obj all = *o;
    all.errs = &errs;
    cluster_read(&all, c, err);
    return pt_json_errs_finish(&errs, o->origin, err);
}

static void cluster_check(const pt_cluster *c, const char *origin, pt_json_errs *e);

int pt_cluster_from_json(const char *text, const char *origin, pt_cluster *out, pt_err *err)
{
    pt_json_obj top;
    json_t *root = pt_json_parse_object(text, origin, &top, err);
    if (!root)
        return -1;
    pt_cluster c;
    memset(&c, 0, sizeof c);
    pt_json_errs errs;
    pt_json_errs_init(&errs);
    top.errs = &errs;
    cluster_read(&top, &c, err);
    json_decref(root);
    /* The values read are checked too; a field already reported is not again. */
    cluster_check(&c, origin, &errs);
    int rc = pt_json_errs_finish(&errs, origin, err);
    if (rc == 0)
        *out = c;
    return rc;
}

static json_t *link_to_json(const pt_link *l, int devices_per_node)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = pt_json_set(o, "name", json_string(l->name));
    bad |= pt_json_set(o, "bandwidth", json_real(l->bw_Bps));
    bad |= pt_json_set(o, "latency", json_real(l->latency_s));
    /* The NIC count, not the rate per NIC: the bandwidth is written, and a dumped spec
     * whose bandwidth is edited (or whose devices per node --devices changed) must
     * still load, not disagree with a rate it never stated. */
    (void)devices_per_node;
    if (l->nics)
        bad |= pt_json_set(o, "nics", json_integer(l->nics));
    if (l->busbw_Bps)
        bad |= pt_json_set(o, "bus_bandwidth", json_real(l->busbw_Bps));
    if (l->allreduce_busbw_Bps)
        bad |= pt_json_set(o, "allreduce_bus_bandwidth", json_real(l->allreduce_busbw_Bps));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *device_to_json(const pt_device *d)
{
    json_t *o = json_object(), *flops = json_object();
    int bad = !o || !flops;
    for (int t = 0; t < PT_DTYPE_COUNT && !bad; t++)
        bad |= pt_json_set(flops, dtype_names[t], json_real(d->peak_flops[t]));
    if (!bad) {
        bad |= pt_json_set(o, "name", json_string(d->name));
        bad |= pt_json_set(o, "memory_bytes", json_integer(d->memory_bytes));
        bad |= pt_json_set(o, "memory_bandwidth", json_real(d->memory_bw_Bps));
        bad |= pt_json_set(o, "peak_flops", json_incref(flops));
        if (d->sm_count)
            bad |= pt_json_set(o, "sm_count", json_integer(d->sm_count));
        if (d->gemm_max_eff)
            bad |= pt_json_set(o, "gemm_max_efficiency", json_real(d->gemm_max_eff));
        if (d->gemm_max_eff_fp8)
            bad |= pt_json_set(o, "gemm_max_efficiency_fp8", json_real(d->gemm_max_eff_fp8));
    }
    json_decref(flops);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *pt_cluster_json_obj(const pt_cluster *c)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    int bad = pt_json_set(root, "name", json_string(c->name));
    bad |= pt_json_set(root, "nodes", json_integer(c->nodes));
    bad |= pt_json_set(root, "devices_per_node", json_integer(c->devices_per_node));
    /* Only a domain wider than the node: one equal to it reads back as the node. */
    if (c->nvlink_domain && c->nvlink_domain != c->devices_per_node)
        bad |= pt_json_set(root, "nvlink_domain", json_integer(c->nvlink_domain));
    bad |= pt_json_set(root, "device", device_to_json(&c->device));
    bad |= pt_json_set(root, "intra_node", link_to_json(&c->intra, c->devices_per_node));
    bad |= pt_json_set(root, "inter_node", link_to_json(&c->inter, c->devices_per_node));
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

char *pt_cluster_to_json(const pt_cluster *c)
{
    json_t *root = pt_cluster_json_obj(c);
    char *text = root ? pt_json_dump(root) : NULL;
    json_decref(root);
    return text;
}

/* ---- Validation -------------------------------------------------------------- */

/* Far above any real machine; keeps the world size, and layout sizes derived from
 * it, within an int. */
#define PT_CLUSTER_MAX_NODES (1 << 20)
#define PT_CLUSTER_MAX_DEVICES_PER_NODE (1 << 20)
#define PT_CLUSTER_MAX_WORLD (INT64_C(1) << 30)
#define PT_CLUSTER_MAX_MEMORY_BYTES (INT64_C(1) << 50)
#define PT_CLUSTER_MAX_NICS (1 << 16)

static void cluster_check_name(const char *name, size_t n, const char *key,
                               const char *origin, pt_json_errs *e)
{
    if (!memchr(name, '\0', n))
        pt_json_errs_add(e, key, "%s: field '%s' is not terminated", origin, key);
    else if (!name[0])
        pt_json_errs_add(e, key, "%s: field '%s' is empty", origin, key);
}

static void cluster_check_names(const pt_cluster *c, const char *origin, pt_json_errs *e)
{
    cluster_check_name(c->name, sizeof c->name, "name", origin, e);
    cluster_check_name(c->device.name, sizeof c->device.name, "device.name", origin, e);
    cluster_check_name(c->intra.name, sizeof c->intra.name, "intra_node.name", origin, e);
    cluster_check_name(c->inter.name, sizeof c->inter.name, "inter_node.name", origin, e);
}

/* Returns whether value is in [min, max], recording a problem when not. */
static bool cluster_check_count(int64_t value, int64_t min, int64_t max, const char *key,
                                const char *origin, pt_json_errs *e)
{
    if (value < min)
        pt_json_errs_add(e, key, "%s: field '%s' = %" PRId64 ": must be at least %" PRId64,
                         origin, key, value, min);
    else if (value > max)
        pt_json_errs_add(e, key, "%s: field '%s' = %" PRId64 ": must be at most %" PRId64,
                         origin, key, value, max);
    return value >= min && value <= max;
}

/* An NVLink domain is whole nodes (0: the node itself), at most as many devices as a
 * world may have. It may exceed the cluster: a cluster smaller than one domain (part of
 * a GB200 NVL72 rack) is a real one. `dpn` says whether devices_per_node is valid;
 * without it only the sign is checked. */
static void cluster_check_domain(const pt_cluster *c, bool dpn, const char *origin,
                                 pt_json_errs *e)
{
    int d = c->nvlink_domain;
    if (d > PT_CLUSTER_MAX_WORLD)
        pt_json_errs_add(e, "nvlink_domain", "%s: field 'nvlink_domain' = %d: must be at "
                         "most %" PRId64, origin, d, PT_CLUSTER_MAX_WORLD);
    else if (d < 0 || (d > 0 && dpn && d % c->devices_per_node))
        pt_json_errs_add(e, "nvlink_domain", "%s: field 'nvlink_domain' = %d: must be a "
                         "positive multiple of devices_per_node (%d): the devices one "
                         "NVLink fabric joins are whole nodes", origin, d,
                         c->devices_per_node);
}

static void cluster_check_counts(const pt_cluster *c, const char *origin, pt_json_errs *e)
{
    bool nodes = cluster_check_count(c->nodes, 1, PT_CLUSTER_MAX_NODES, "nodes", origin, e);
    bool dpn = cluster_check_count(c->devices_per_node, 1, PT_CLUSTER_MAX_DEVICES_PER_NODE,
                                   "devices_per_node", origin, e);
    cluster_check_count(c->device.memory_bytes, 1, PT_CLUSTER_MAX_MEMORY_BYTES,
                        "device.memory_bytes", origin, e);
    cluster_check_count(c->inter.nics, 0, PT_CLUSTER_MAX_NICS, "inter_node.nics", origin, e);
    if (c->intra.nics || c->intra.nic_bw_Bps)
        pt_json_errs_add(e, "intra_node", "%s: field 'intra_node': only inter_node states "
                         "NICs", origin);
    if (c->inter.nic_bw_Bps && !c->inter.nics)
        pt_json_errs_add(e, "inter_node.nics", "%s: field 'inter_node.nic_bandwidth' needs "
                         "'inter_node.nics', the NICs per node", origin);
    if (nodes && dpn && pt_cluster_world(c) > PT_CLUSTER_MAX_WORLD)
        pt_json_errs_add(e, NULL, "%s: nodes x devices_per_node = %" PRId64 " devices: must "
                         "be at most %" PRId64, origin, pt_cluster_world(c),
                         PT_CLUSTER_MAX_WORLD);
    cluster_check_domain(c, dpn, origin, e);
}

static void cluster_check_rates(const pt_cluster *c, const char *origin, pt_json_errs *e)
{
    const struct {
        const char *key;
        double value;
    } rates[] = {
        {"device.memory_bandwidth", c->device.memory_bw_Bps},
        {"device.peak_flops.fp32", c->device.peak_flops[PT_DTYPE_FP32]},
        {"device.peak_flops.tf32", c->device.peak_flops[PT_DTYPE_TF32]},
        {"device.peak_flops.bf16", c->device.peak_flops[PT_DTYPE_BF16]},
        {"device.peak_flops.fp16", c->device.peak_flops[PT_DTYPE_FP16]},
        {"device.peak_flops.fp8", c->device.peak_flops[PT_DTYPE_FP8]},
        {"intra_node.bandwidth", c->intra.bw_Bps},
        {"intra_node.latency", c->intra.latency_s},
        {"inter_node.bandwidth", c->inter.bw_Bps},
        {"inter_node.nic_bandwidth", c->inter.nic_bw_Bps},
        {"inter_node.latency", c->inter.latency_s},
        {"intra_node.bus_bandwidth", c->intra.busbw_Bps},
        {"intra_node.allreduce_bus_bandwidth", c->intra.allreduce_busbw_Bps},
        {"inter_node.bus_bandwidth", c->inter.busbw_Bps},
        {"inter_node.allreduce_bus_bandwidth", c->inter.allreduce_busbw_Bps},
    };
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (!isfinite(rates[i].value) || rates[i].value < 0)
            pt_json_errs_add(e, rates[i].key, "%s: field '%s' = %g: must be finite and at "
                             "least 0", origin, rates[i].key, rates[i].value);
}

/* Records every problem of c, skipping fields e already has one for. */
static void cluster_check(const pt_cluster *c, const char *origin, pt_json_errs *e)
{
    cluster_check_names(c, origin, e);
    cluster_check_counts(c, origin, e);
    cluster_check_rates(c, origin, e);
    if (c->device.sm_count < 0 || c->device.sm_count > (1 << 20))
        pt_json_errs_add(e, "device.sm_count", "%s: field 'device.sm_count' = %d: must be 0 "
                         "(unknown) to 2^20", origin, c->device.sm_count);
    if (!(c->device.gemm_max_eff >= 0 && c->device.gemm_max_eff <= 1))
        pt_json_errs_add(e, "device.gemm_max_efficiency", "%s: field "
                         "'device.gemm_max_efficiency' = %g: must be a share of peak from 0 "
                         "(unknown) to 1", origin, c->device.gemm_max_eff);
    if (!(c->device.gemm_max_eff_fp8 >= 0 && c->device.gemm_max_eff_fp8 <= 1))
        pt_json_errs_add(e, "device.gemm_max_efficiency_fp8", "%s: field "
                         "'device.gemm_max_efficiency_fp8' = %g: must be a share of the fp8 "
                         "peak from 0 (unknown) to 1", origin, c->device.gemm_max_eff_fp8);
}

int pt_cluster_validate(const pt_cluster *c, const char *origin, pt_err *err)
{
    pt_json_errs errs;
    pt_json_errs_init(&errs);
    cluster_check(c, origin, &errs);
    return pt_json_errs_finish(&errs, origin, err);
}

int pt_cluster_check_precision(const pt_cluster *c, pt_prec_kind p, pt_err *err)
{
    pt_dtype d = pt_prec_dtype(p);
    bool any = false;
    for (int t = 0; t < PT_DTYPE_COUNT; t++)
        any |= c->device.peak_flops[t] > 0;
    /* No peak at all: not yet profiled (`local`); the cost model's defaults price it. */
    if (c->device.peak_flops[d] > 0 || !any)
        return 0;
    return pt_err_set(err, "cluster '%s': field 'device.peak_flops.%s' is absent or 0 "
                           "(unsupported), but precision %s computes in %s: give the "
                           "device's dense %s FLOP/s, or plan another precision", c->name,
                      pt_dtype_name(d), pt_prec_name(p), pt_dtype_name(d), pt_dtype_name(d));
}

/* ---- Profiled figures --------------------------------------------------------- */

static bool fill_zero(double *field, double measured)
{
    if (*field != 0 || !(measured > 0))
        return false;
    *field = measured;
    return true;
}

bool pt_cluster_apply_profile(pt_cluster *c, const pt_costdb *db)
{
    pt_cost_hw hw;
    if (!db || pt_costdb_device(db, c->device.name, &hw, NULL))
        return false;
    bool changed = false;
    for (int d = 0; d < PT_DTYPE_COUNT; d++)
        changed |= fill_zero(&c->device.peak_flops[d], hw.peak_flops[d]);
    changed |= fill_zero(&c->device.memory_bw_Bps, hw.mem_bw_Bps);
    changed |= fill_zero(&c->intra.bw_Bps, hw.intra_bw_Bps);
    changed |= fill_zero(&c->intra.latency_s, hw.intra_latency_s);
    changed |= fill_zero(&c->inter.bw_Bps, hw.inter_bw_Bps);
    changed |= fill_zero(&c->inter.latency_s, hw.inter_latency_s);
    return changed;
}
