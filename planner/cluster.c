/*
 * Cluster specs: what the planner knows about the machines before profiling —
 * node count, devices per node, each device's memory and peak throughput, and the
 * bandwidth and latency of the links inside a node and between nodes. This file
 * owns the built-in clusters (datasheet figures for DGX A100 and DGX H100 nodes, and
 * `local`, read off this machine at run time), the JSON form of a spec and its
 * checks. Datasheet figures are upper bounds; ptprofile's measurements replace them.
 *
 * JSON format (every field required, unknown fields refused; numbers other than
 * nodes, devices_per_node and memory_bytes may be integers or reals):
 *   {
 *     "name": "my-cluster",            string, at most 63 bytes, not empty
 *     "nodes": 4,                      integer >= 1
 *     "devices_per_node": 8,           integer >= 1
 *     "device": {
 *       "name": "A100-SXM4-80GB",
 *       "memory_bytes": 85899345920,   integer > 0
 *       "memory_bandwidth": 2.039e12,  bytes/s
 *       "peak_flops": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12,
 *                      "fp16": 312e12, "fp8": 0}   dense FLOP/s; 0 = unsupported or
 *                                                  not yet profiled
 *     },
 *     "intra_node": {"name": "NVLink3", "bandwidth": 300e9, "latency": 3e-6},
 *     "inter_node": {"name": "HDR-IB", "bandwidth": 25e9, "latency": 5e-6}
 *   }
 * Link bandwidth is bytes/s per device per direction, latency in seconds; all rates
 * and latencies must be finite and >= 0 (0 = not yet profiled).
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
              .busbw_Bps = 23e9},
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
               .sm_count = 132, .gemm_max_eff = 0.803},
    .intra = {.name = "NVLink4", .bw_Bps = 450e9, .latency_s = PT_NVLINK_LATENCY_S,
              .busbw_Bps = 370e9, .allreduce_busbw_Bps = 480e9},
    .inter = {.name = "NDR-InfiniBand-400G", .bw_Bps = 50e9, .latency_s = PT_IB_LATENCY_S,
              .busbw_Bps = 46e9},
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

static const char *const cluster_builtin_names[] = {"dgx-a100-80g", "dgx-h100", "local"};

int pt_cluster_builtin_count(void)
{
    return (int)(sizeof cluster_builtin_names / sizeof cluster_builtin_names[0]);
}

int pt_cluster_builtin(int i, pt_cluster *out)
{
    switch (i) {
    case 0: *out = cluster_dgx_a100; return 0;
    case 1: *out = cluster_dgx_h100; return 0;
    case 2: return cluster_local(out);
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
static const char *const cluster_keys[] = {"name", "nodes", "devices_per_node", "device",
                                           "intra_node", "inter_node", NULL};
static const char *const device_keys[] = {"name", "memory_bytes", "memory_bandwidth",
                                          "peak_flops", "sm_count", "gemm_max_efficiency",
                                          NULL};
static const char *const link_keys[] = {"name", "bandwidth", "latency", "bus_bandwidth",
                                        "allreduce_bus_bandwidth", NULL};

/* Optional fields (specs written before they existed leave them out: 0, unknown). */
static int opt_real(const pt_json_obj *o, const char *key, double *out, pt_err *err)
{
    return json_object_get(o->obj, key) ? pt_json_get_real(o, key, out, err) : 0;
}

static int link_read(const pt_json_obj *o, const char *key, pt_link *l, pt_err *err)
{
    pt_json_obj lo;
    if (pt_json_get_object(o, key, link_keys, &lo, err) ||
        pt_json_get_string(&lo, "name", l->name, sizeof l->name, err) ||
        pt_json_get_real(&lo, "bandwidth", &l->bw_Bps, err) ||
        pt_json_get_real(&lo, "latency", &l->latency_s, err) ||
        opt_real(&lo, "bus_bandwidth", &l->busbw_Bps, err) ||
        opt_real(&lo, "allreduce_bus_bandwidth", &l->allreduce_busbw_Bps, err))
        return -1;
    return 0;
}

static int device_read(const pt_json_obj *o, pt_device *d, pt_err *err)
{
    pt_json_obj dev, flops;
    if (pt_json_get_object(o, "device", device_keys, &dev, err) ||
        pt_json_get_string(&dev, "name", d->name, sizeof d->name, err) ||
        pt_json_get_int(&dev, "memory_bytes", &d->memory_bytes, err) ||
        pt_json_get_real(&dev, "memory_bandwidth", &d->memory_bw_Bps, err) ||
        pt_json_get_object(&dev, "peak_flops", dtype_names, &flops, err) ||
        (json_object_get(dev.obj, "sm_count") &&
         pt_json_get_int32(&dev, "sm_count", &d->sm_count, err)) ||
        opt_real(&dev, "gemm_max_efficiency", &d->gemm_max_eff, err))
        return -1;
    for (int t = 0; t < PT_DTYPE_COUNT; t++)
        if (pt_json_get_real(&flops, dtype_names[t], &d->peak_flops[t], err))
            return -1;
    return 0;
}

int pt_cluster_read_obj(const pt_json_obj *o, pt_cluster *c, pt_err *err)
{
    if (pt_json_check_keys(o, cluster_keys, err) ||
        pt_json_get_string(o, "name", c->name, sizeof c->name, err) ||
        pt_json_get_int32(o, "nodes", &c->nodes, err) ||
        pt_json_get_int32(o, "devices_per_node", &c->devices_per_node, err) ||
        device_read(o, &c->device, err) ||
        link_read(o, "intra_node", &c->intra, err) ||
        link_read(o, "inter_node", &c->inter, err))
        return -1;
    return 0;
}

int pt_cluster_from_json(const char *text, const char *origin, pt_cluster *out, pt_err *err)
{
    pt_json_obj top;
    json_t *root = pt_json_parse_object(text, origin, &top, err);
    if (!root)
        return -1;
    pt_cluster c;
    memset(&c, 0, sizeof c);
    int rc = pt_cluster_read_obj(&top, &c, err);
    json_decref(root);
    if (rc == 0)
        rc = pt_cluster_validate(&c, origin, err);
    if (rc == 0)
        *out = c;
    return rc;
}

static json_t *link_to_json(const pt_link *l)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = pt_json_set(o, "name", json_string(l->name));
    bad |= pt_json_set(o, "bandwidth", json_real(l->bw_Bps));
    bad |= pt_json_set(o, "latency", json_real(l->latency_s));
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
    bad |= pt_json_set(root, "device", device_to_json(&c->device));
    bad |= pt_json_set(root, "intra_node", link_to_json(&c->intra));
    bad |= pt_json_set(root, "inter_node", link_to_json(&c->inter));
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

static int cluster_check_name(const char *name, size_t n, const char *key, const char *origin,
                              pt_err *err)
{
    if (!memchr(name, '\0', n))
        return pt_err_set(err, "%s: field '%s' is not terminated", origin, key);
    if (!name[0])
        return pt_err_set(err, "%s: field '%s' is empty", origin, key);
    return 0;
}

static int cluster_check_names(const pt_cluster *c, const char *origin, pt_err *err)
{
    if (cluster_check_name(c->name, sizeof c->name, "name", origin, err) ||
        cluster_check_name(c->device.name, sizeof c->device.name, "device.name", origin, err) ||
        cluster_check_name(c->intra.name, sizeof c->intra.name, "intra_node.name", origin,
                           err) ||
        cluster_check_name(c->inter.name, sizeof c->inter.name, "inter_node.name", origin,
                           err))
        return -1;
    return 0;
}

static int cluster_check_count(int64_t value, int64_t min, int64_t max, const char *key,
                               const char *origin, pt_err *err)
{
    if (value < min)
        return pt_err_set(err, "%s: field '%s' = %" PRId64 ": must be at least %" PRId64,
                          origin, key, value, min);
    if (value > max)
        return pt_err_set(err, "%s: field '%s' = %" PRId64 ": must be at most %" PRId64,
                          origin, key, value, max);
    return 0;
}

static int cluster_check_counts(const pt_cluster *c, const char *origin, pt_err *err)
{
    if (cluster_check_count(c->nodes, 1, PT_CLUSTER_MAX_NODES, "nodes", origin, err) ||
        cluster_check_count(c->devices_per_node, 1, PT_CLUSTER_MAX_DEVICES_PER_NODE,
                            "devices_per_node", origin, err) ||
        cluster_check_count(c->device.memory_bytes, 1, PT_CLUSTER_MAX_MEMORY_BYTES,
                            "device.memory_bytes", origin, err))
        return -1;
    if (pt_cluster_world(c) > PT_CLUSTER_MAX_WORLD)
        return pt_err_set(err, "%s: nodes x devices_per_node = %" PRId64 " devices: must be "
                               "at most %" PRId64, origin, pt_cluster_world(c),
                          PT_CLUSTER_MAX_WORLD);
    return 0;
}

static int cluster_check_rate(double value, const char *key, const char *origin, pt_err *err)
{
    if (!isfinite(value) || value < 0)
        return pt_err_set(err, "%s: field '%s' = %g: must be finite and at least 0", origin,
                          key, value);
    return 0;
}

static int cluster_check_rates(const pt_cluster *c, const char *origin, pt_err *err)
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
        {"inter_node.latency", c->inter.latency_s},
        {"intra_node.bus_bandwidth", c->intra.busbw_Bps},
        {"intra_node.allreduce_bus_bandwidth", c->intra.allreduce_busbw_Bps},
        {"inter_node.bus_bandwidth", c->inter.busbw_Bps},
        {"inter_node.allreduce_bus_bandwidth", c->inter.allreduce_busbw_Bps},
    };
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++)
        if (cluster_check_rate(rates[i].value, rates[i].key, origin, err))
            return -1;
    return 0;
}

int pt_cluster_validate(const pt_cluster *c, const char *origin, pt_err *err)
{
    if (cluster_check_names(c, origin, err) || cluster_check_counts(c, origin, err) ||
        cluster_check_rates(c, origin, err))
        return -1;
    if (c->device.sm_count < 0 || c->device.sm_count > (1 << 20))
        return pt_err_set(err, "%s: field 'device.sm_count' = %d: must be 0 (unknown) to 2^20",
                          origin, c->device.sm_count);
    if (!(c->device.gemm_max_eff >= 0 && c->device.gemm_max_eff <= 1))
        return pt_err_set(err, "%s: field 'device.gemm_max_efficiency' = %g: must be a share "
                               "of peak from 0 (unknown) to 1", origin, c->device.gemm_max_eff);
    return 0;
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
