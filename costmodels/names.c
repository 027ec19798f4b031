/*
 * The names of provenances, GEMM roles and collectives, as they appear in costs.db, plan.json
 * and reports, and the bus-bandwidth convention that makes collective timings of
 * different group sizes comparable. Names here are part of the stored formats:
 * changing one breaks existing databases.
 */
#include "cost.h"

#include <string.h>

static const char *const prov_names[PT_PROV_COUNT] = {"measured", "interpolated",
                                                      "analytic"};

const char *pt_prov_name(pt_prov p)
{
    return (unsigned)p < PT_PROV_COUNT ? prov_names[p] : "?";
}

static const char *const gemm_kinds[PT_GEMM_ROLE_COUNT] = {
    [PT_GEMM_FWD] = "gemm",          [PT_GEMM_FWD_GELU] = "gemm_gelu",
    [PT_GEMM_DGRAD] = "gemm_dgrad",  [PT_GEMM_DGRAD_DGELU] = "gemm_dgelu",
    [PT_GEMM_WGRAD] = "gemm_wgrad", [PT_GEMM_WGRAD_BIAS] = "gemm_wgrad_bias",
    [PT_GEMM_FWD_BIAS] = "gemm_bias", [PT_GEMM_FWD_GELU_BIAS] = "gemm_gelu_bias",
    [PT_GEMM_FWD_RES] = "gemm_res",  [PT_GEMM_FWD_BIAS_RES] = "gemm_bias_res",
    [PT_GEMM_DGRAD_WRITE] = "gemm_dgrad_write"};

const char *pt_gemm_role_kind(pt_gemm_role r)
{
    return (unsigned)r < PT_GEMM_ROLE_COUNT ? gemm_kinds[r] : "?";
}

pt_gemm_role pt_gemm_role_of(const char *key)
{
    size_t n = strcspn(key, ":");
    for (int r = 0; r < PT_GEMM_ROLE_COUNT; r++)
        if (strlen(gemm_kinds[r]) == n && strncmp(key, gemm_kinds[r], n) == 0)
            return (pt_gemm_role)r;
    return PT_GEMM_NONE;
}

bool pt_gemm_role_adds_residual(pt_gemm_role role)
{
    return role == PT_GEMM_FWD_RES || role == PT_GEMM_FWD_BIAS_RES;
}

bool pt_gemm_role_has_bias(pt_gemm_role role)
{
    return role == PT_GEMM_FWD_BIAS || role == PT_GEMM_FWD_GELU_BIAS ||
           role == PT_GEMM_FWD_BIAS_RES || role == PT_GEMM_WGRAD_BIAS;
}

static const char *const coll_names[PT_COLL_COUNT] = {
    "allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"};

const char *pt_coll_name(pt_coll c)
{
    return (unsigned)c < PT_COLL_COUNT ? coll_names[c] : "?";
}

int pt_coll_parse(const char *text, pt_coll *out, pt_err *err)
{
    if (text)
        for (int c = 0; c < PT_COLL_COUNT; c++)
            if (strcmp(text, coll_names[c]) == 0) {
                *out = (pt_coll)c;
                return 0;
            }
    return pt_err_set(err,
                      "unknown collective '%s' (expected allreduce, allgather, "
                      "reducescatter, alltoall, broadcast or sendrecv)",
                      text ? text : "(null)");
}

/* nccl-tests, doc/PERFORMANCE.md: busbw = algbw · factor, where the factor makes a
 * ring implementation's busbw equal to the link bandwidth it achieves whatever the
 * group size: 2(n-1)/n for all-reduce (each byte crosses a link 2(n-1)/n times),
 * (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for broadcast and
 * point-to-point. */
double pt_coll_busbw(pt_coll op, int group, double bytes, double time_s)
{
    if (!(time_s > 0) || group < 1)
        return 0;
    double n = group, algbw = bytes / time_s;
    switch (op) {
    case PT_COLL_ALLREDUCE:
        return algbw * 2 * (n - 1) / n;
    case PT_COLL_ALLGATHER:
    case PT_COLL_REDUCESCATTER:
    case PT_COLL_ALLTOALL:
        return algbw * (n - 1) / n;
    case PT_COLL_BROADCAST:
    case PT_COLL_SENDRECV:
        return algbw;
    default:
        return 0;
    }
}
