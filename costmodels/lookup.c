/*
 * Lookups in the in-memory cost tables: the exact sample, else interpolation between
 * samples, else the analytic model — and the sorted indexes that make each lookup a
 * few binary searches with no allocation and no SQLite call (the planner asks
 * 10^5-10^6 times per search). db.c fills the tables; this file owns their orders.
 *
 * Repeats of one op are kept as separate samples; the answer for an op is the median
 * of its repeats, read from the middle of its run in an order whose last fields are
 * the origin and the time. Samples from training runs (ptrun --record, ptcalib) come
 * first and, where a key has any, stand for it alone: they were timed inside the
 * program the planner predicts, among the ops that really precede and follow it
 * (caches, memory traffic, the other stream), where the profile times the op in a loop
 * of its own; the median of one profile figure and one run's figure is their mean, which
 * would move a prediction only half way to what the run measured.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- Orders ------------------------------------------------------------------------ */

static int cmp_d(double a, double b)
{
    return (a > b) - (a < b);
}

static int cmp_i(long a, long b)
{
    return (a > b) - (a < b);
}

int pt_ksample_axis(double flops)
{
    return flops > 0 ? 0 : 1;
}

static double kx(const pt_ksample *s)
{
    return s->flops > 0 ? s->flops : s->bytes;
}

/* 0 for a sample measured in a training run (any run id, -1 for one stored before runs
 * had ids), 1 for the profile's: run samples sort first. */
static int origin(const pt_ksample *s)
{
    return s->run_id == 0;
}

/* (device, key, origin, time, flops, bytes, dtype) */
int pt_ksample_cmp_key(const pt_ksample *a, const pt_ksample *b, int level)
{
    int c = 0;
    if (level >= 1 && (c = strcmp(a->device, b->device)))
        return c;
    if (level >= 2 && (c = strcmp(a->key, b->key)))
        return c;
    if (level >= 3 && (c = cmp_i(origin(a), origin(b))))
        return c;
    if (level >= 4 && (c = cmp_d(a->time_s, b->time_s)))
        return c;
    if (level >= 5 && (c = cmp_d(a->flops, b->flops)))
        return c;
    if (level >= 6 && (c = cmp_d(a->bytes, b->bytes)))
        return c;
    if (level >= 7)
        c = cmp_i(a->dtype, b->dtype);
    return c;
}

static int cmp_kind(const pt_ksample *a, const pt_ksample *b)
{
    int n = a->kind_len < b->kind_len ? a->kind_len : b->kind_len;
    int c = memcmp(a->key, b->key, (size_t)n);
    return c ? c : cmp_i(a->kind_len, b->kind_len);
}

/* (device, kind, dtype, axis, x, key, origin, time, flops, bytes) */
int pt_ksample_cmp_x(const pt_ksample *a, const pt_ksample *b, int level)
{
    int c = 0;
    if (level >= PT_KX_DEVICE && (c = strcmp(a->device, b->device)))
        return c;
    if (level >= PT_KX_KIND && (c = cmp_kind(a, b)))
        return c;
    if (level >= PT_KX_DTYPE && (c = cmp_i(a->dtype, b->dtype)))
        return c;
    if (level >= PT_KX_AXIS &&
        (c = cmp_i(pt_ksample_axis(a->flops), pt_ksample_axis(b->flops))))
        return c;
    if (level >= PT_KX_X && (c = cmp_d(kx(a), kx(b))))
        return c;
    if (level >= PT_KX_KEY && (c = strcmp(a->key, b->key)))
        return c;
    if (level >= 7 && (c = cmp_i(origin(a), origin(b))))
        return c;
    if (level >= 8 && (c = cmp_d(a->time_s, b->time_s)))
        return c;
    if (level >= 9 && (c = cmp_d(a->flops, b->flops)))
        return c;
    if (level >= 10)
        c = cmp_d(a->bytes, b->bytes);
    return c;
}

/* (backend, op, group, ranks_per_node, bytes, time) */
int pt_csample_cmp(const pt_csample *a, const pt_csample *b, int level)
{
    int c = 0;
    if (level >= PT_CC_BACKEND && (c = strcmp(a->backend, b->backend)))
        return c;
    if (level >= PT_CC_OP && (c = cmp_i(a->op, b->op)))
        return c;
    if (level >= PT_CC_GROUP && (c = cmp_i(a->group, b->group)))
        return c;
    if (level >= PT_CC_RPN && (c = cmp_i(a->ranks_per_node, b->ranks_per_node)))
        return c;
    if (level >= PT_CC_BYTES && (c = cmp_d(a->bytes, b->bytes)))
        return c;
    if (level >= 6)
        c = cmp_d(a->time_s, b->time_s);
    return c;
}

/* ---- Binary search over an index ----------------------------------------------------- */

/* Which order an index is in: a sample array and its comparator. */
typedef struct {
    const void *base;
    size_t size;
    int (*cmp)(const void *a, const void *b, int level);
} order;

static int kkey_cmp(const void *a, const void *b, int level)
{
    return pt_ksample_cmp_key(a, b, level);
}
static int kx_cmp(const void *a, const void *b, int level)
{
    return pt_ksample_cmp_x(a, b, level);
}
static int cc_cmp(const void *a, const void *b, int level)
{
    return pt_csample_cmp(a, b, level);
}

static const void *at(order o, uint32_t i)
{
    return (const char *)o.base + (size_t)i * o.size;
}

/* First position in idx[lo, hi) whose sample compares >= q (upper: > q) up to level. */
static size_t bound(order o, const uint32_t *idx, size_t lo, size_t hi, const void *q,
                    int level, bool upper)
{
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = o.cmp(at(o, idx[mid]), q, level);
        if (c < 0 || (upper && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- Building the indexes ------------------------------------------------------------- */

static void index_insert(order o, uint32_t *idx, size_t n, uint32_t i, int level)
{
    size_t p = bound(o, idx, 0, n, at(o, i), level, true);
    memmove(idx + p + 1, idx + p, (n - p) * sizeof *idx);
    idx[p] = i;
}

void pt_costdb_index_kernel(pt_costdb *db, uint32_t i)
{
    order ok = {db->ks, sizeof *db->ks, kkey_cmp}, ox = {db->ks, sizeof *db->ks, kx_cmp};
    index_insert(ok, db->k_by_key, i, i, PT_KKEY_ALL);
    index_insert(ox, db->k_by_x, i, i, PT_KX_ALL);
}

void pt_costdb_index_coll(pt_costdb *db, uint32_t i)
{
    order oc = {db->cs, sizeof *db->cs, cc_cmp};
    index_insert(oc, db->c_by_cfg, i, i, PT_CC_ALL);
}

/* Stable merge sort of idx[0, n) by o (qsort has no context argument in C17). */
static void merge_sort(order o, int level, uint32_t *idx, uint32_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(o, level, idx, tmp, h);
    merge_sort(o, level, idx + h, tmp, n - h);
    size_t a = 0, b = h, k = 0;
    while (a < h && b < n)
        tmp[k++] = o.cmp(at(o, idx[b]), at(o, idx[a]), level) < 0 ? idx[b++] : idx[a++];
    while (a < h)
        tmp[k++] = idx[a++];
    while (b < n)
        tmp[k++] = idx[b++];
    memcpy(idx, tmp, n * sizeof *idx);
}

void pt_costdb_index_all(pt_costdb *db, uint32_t *tmp)
{
    order ok = {db->ks, sizeof *db->ks, kkey_cmp}, ox = {db->ks, sizeof *db->ks, kx_cmp};
    order oc = {db->cs, sizeof *db->cs, cc_cmp};
    for (size_t i = 0; i < db->nk; i++)
        db->k_by_key[i] = db->k_by_x[i] = (uint32_t)i;
    for (size_t i = 0; i < db->nc; i++)
        db->c_by_cfg[i] = (uint32_t)i;
    merge_sort(ok, PT_KKEY_ALL, db->k_by_key, tmp, db->nk);
    merge_sort(ox, PT_KX_ALL, db->k_by_x, tmp, db->nk);
    merge_sort(oc, PT_CC_ALL, db->c_by_cfg, tmp, db->nc);
}

/* ---- Shared arithmetic ------------------------------------------------------------------ */

/* log-log interpolation: the power law through (x1, y1) and (x2, y2), at x. */
static double loglog(double x1, double y1, double x2, double y2, double x)
{
    double f = (log(x) - log(x1)) / (log(x2) - log(x1));
    return exp(log(y1) + f * (log(y2) - log(y1)));
}

double pt_ksample_key_time(const pt_costdb *db, const uint32_t *idx, size_t a, size_t b)
{
    size_t r = a; /* the run's samples come first, each origin in time order */
    while (r < b && origin(&db->ks[idx[r]]) == 0)
        r++;
    if (r > a)
        b = r;
    size_t n = b - a, m = a + n / 2;
    return n % 2 ? db->ks[idx[m]].time_s
                 : 0.5 * (db->ks[idx[m - 1]].time_s + db->ks[idx[m]].time_s);
}

static double run_median_c(const pt_costdb *db, size_t a, size_t b)
{
    const uint32_t *idx = db->c_by_cfg;
    size_t n = b - a, m = a + n / 2;
    return n % 2 ? db->cs[idx[m]].time_s
                 : 0.5 * (db->cs[idx[m - 1]].time_s + db->cs[idx[m]].time_s);
}

/* Bounded copy of a caller's string into a fixed field (lookups must not fail). */
static void copy_field(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* ---- Kernels ---------------------------------------------------------------------------- */

/* Interpolation between the nearest samples below and above op's x among samples of
 * the same device, kind, dtype and axis; each side is the median of its op's repeats.
 * Returns 0 and sets *t, or -1 when op's x is not inside the sampled range. */
static int kernel_interp(const pt_costdb *db, const pt_ksample *q, double *t)
{
    order o = {db->ks, sizeof *db->ks, kx_cmp};
    const uint32_t *idx = db->k_by_x;
    double x = kx(q);
    if (!(x > 0))
        return -1;
    size_t ga = bound(o, idx, 0, db->nk, q, PT_KX_AXIS, false);
    size_t gb = bound(o, idx, ga, db->nk, q, PT_KX_AXIS, true);
    size_t p = bound(o, idx, ga, gb, q, PT_KX_X, true); /* first sample with x > op's */
    if (p == ga)
        return -1;
    const pt_ksample *lo = &db->ks[idx[p - 1]];
    size_t la = bound(o, idx, ga, p, lo, PT_KX_KEY, false);
    double t_lo = pt_ksample_key_time(db, idx, la, p);
    if (kx(lo) == x) {
        *t = t_lo;
        return 0;
    }
    if (p == gb || !(kx(lo) > 0))
        return -1;
    const pt_ksample *hi = &db->ks[idx[p]];
    size_t hb = bound(o, idx, p, gb, hi, PT_KX_KEY, true);
    *t = loglog(kx(lo), t_lo, kx(hi), pt_ksample_key_time(db, idx, p, hb), x);
    return 0;
}

/* For a gradient's GEMM key (PT_GEMM_DGRAD, PT_GEMM_WGRAD, PT_GEMM_WGRAD_BIAS) the
 * samples of the forward GEMM of the same dtype and shape, for a biased forward's
 * (PT_GEMM_FWD_BIAS, PT_GEMM_FWD_GELU_BIAS) those of the same forward without the bias,
 * for one with the residual (PT_GEMM_FWD_RES, PT_GEMM_FWD_BIAS_RES) those of the same
 * forward without it (with its bias), and for a written data gradient
 * (PT_GEMM_DGRAD_WRITE) those of the data gradient that adds, else of the forward,
 * k_by_key[*a, *b): what tables made before these roles had keys of their own hold for
 * it. False when it has none. */
static bool forward_gemm(const pt_costdb *db, const pt_ksample *q, size_t *a, size_t *b)
{
    int role = pt_gemm_role_of(q->key);
    pt_gemm_role base[2];
    int nb = 1;
    if (role == PT_GEMM_DGRAD || role == PT_GEMM_WGRAD || role == PT_GEMM_WGRAD_BIAS ||
        role == PT_GEMM_FWD_BIAS || role == PT_GEMM_FWD_RES)
        base[0] = PT_GEMM_FWD;
    else if (role == PT_GEMM_FWD_BIAS_RES)
        base[0] = PT_GEMM_FWD_BIAS;
    else if (role == PT_GEMM_FWD_GELU_BIAS)
        base[0] = PT_GEMM_FWD_GELU;
    else if (role == PT_GEMM_DGRAD_WRITE) {
        base[0] = PT_GEMM_DGRAD;
        base[1] = PT_GEMM_FWD;
        nb = 2;
    } else
        return false;
    order o = {db->ks, sizeof *db->ks, kkey_cmp};
    for (int i = 0; i < nb; i++) {
        pt_ksample f = *q;
        snprintf(f.key, sizeof f.key, "%s%s", pt_gemm_role_kind(base[i]),
                 q->key + strcspn(q->key, ":"));
        *a = bound(o, db->k_by_key, 0, db->nk, &f, PT_KKEY_KEY, false);
        *b = bound(o, db->k_by_key, *a, db->nk, &f, PT_KKEY_KEY, true);
        if (*a < *b)
            return true;
    }
    return false;
}

/* The query sample of op on hw's device. */
static pt_ksample kernel_query(const pt_cost_hw *hw, const pt_kernel_op *op)
{
    pt_ksample q = {.dtype = op->dtype, .flops = op->flops, .bytes = op->bytes};
    copy_field(q.device, sizeof q.device, hw->device);
    copy_field(q.key, sizeof q.key, op->key);
    const char *colon = strchr(q.key, ':');
    q.kind_len = colon ? (int)(colon - q.key) : (int)strlen(q.key);
    return q;
}

/* The samples of q's key, else of another role of its shape (forward_gemm). */
static int kernel_of_shape(const pt_costdb *db, const pt_ksample *q, pt_cost *out)
{
    order o = {db->ks, sizeof *db->ks, kkey_cmp};
    size_t a = bound(o, db->k_by_key, 0, db->nk, q, PT_KKEY_KEY, false);
    size_t b = bound(o, db->k_by_key, a, db->nk, q, PT_KKEY_KEY, true);
    if (a < b) {
        *out = (pt_cost){pt_ksample_key_time(db, db->k_by_key, a, b), PT_PROV_MEASURED};
        return 0;
    }
    if (forward_gemm(db, q, &a, &b)) {
        *out = (pt_cost){pt_ksample_key_time(db, db->k_by_key, a, b), PT_PROV_INTERPOLATED};
        return 0;
    }
    return -1;
}

int pt_cost_kernel_sampled(const pt_costdb *db, const pt_cost_hw *hw, const pt_kernel_op *op,
                           pt_cost *out)
{
    if (!db || !db->nk)
        return -1;
    pt_ksample q = kernel_query(hw, op);
    return kernel_of_shape(db, &q, out);
}

pt_cost pt_cost_kernel(const pt_costdb *db, const pt_cost_hw *hw, const pt_kernel_op *op)
{
    if (db && db->nk) {
        pt_ksample q = kernel_query(hw, op);
        pt_cost c;
        if (kernel_of_shape(db, &q, &c) == 0)
            return c;
        double t;
        if (kernel_interp(db, &q, &t) == 0)
            return (pt_cost){t, PT_PROV_INTERPOLATED};
    }
    /* the analytic model, with the figures calibration fitted for this device */
    if (db && db->nfits)
        return (pt_cost){pt_cost_kernel_stored_fit(db, hw, op), PT_PROV_ANALYTIC};
    return (pt_cost){pt_cost_kernel_analytic(hw, op), PT_PROV_ANALYTIC};
}

/* ---- Collectives ------------------------------------------------------------------------- */

/* Time at `bytes` within one configuration's run c_by_cfg[a, b) (all samples of one
 * backend, op, group and ranks_per_node, in bytes order): the median of the samples of
 * exactly these bytes, else log-log between the bracketing sizes. -1 outside. */
static int coll_at_bytes(const pt_costdb *db, size_t a, size_t b, double bytes, double *t)
{
    order o = {db->cs, sizeof *db->cs, cc_cmp};
    const uint32_t *idx = db->c_by_cfg;
    pt_csample q = db->cs[idx[a]];
    q.bytes = bytes;
    size_t p = bound(o, idx, a, b, &q, PT_CC_BYTES, true); /* first with more bytes */
    if (p == a)
        return -1;
    const pt_csample *lo = &db->cs[idx[p - 1]];
    size_t la = bound(o, idx, a, p, lo, PT_CC_BYTES, false);
    double t_lo = run_median_c(db, la, p);
    if (lo->bytes == bytes) {
        *t = t_lo;
        return 0;
    }
    if (p == b || !(lo->bytes > 0) || !(bytes > 0))
        return -1;
    const pt_csample *hi = &db->cs[idx[p]];
    size_t hb = bound(o, idx, p, b, hi, PT_CC_BYTES, true);
    *t = loglog(lo->bytes, t_lo, hi->bytes, run_median_c(db, p, hb), bytes);
    return 0;
}

/* A sampled configuration of another group size that brackets the query. */
typedef struct {
    int group, rpn;
    double busbw;
    bool found;
} bracket;

static bool better(const bracket *cur, int group, int rpn, int want_rpn, bool below)
{
    if (!cur->found)
        return true;
    if (group != cur->group)
        return below ? group > cur->group : group < cur->group;
    int d = rpn > want_rpn ? rpn - want_rpn : want_rpn - rpn;
    int dc = cur->rpn > want_rpn ? cur->rpn - want_rpn : want_rpn - cur->rpn;
    return d < dc;
}

/* Interpolation across group sizes: among the configurations of the same backend and
 * op whose group does (or does not) cross nodes as the query's does, take the nearest
 * group below and above that were sampled around these bytes (ties: the nearest
 * ranks_per_node, then the first in order), read each one's bus bandwidth at these
 * bytes, and interpolate busbw linearly in log(group). Bus bandwidth is the quantity
 * that stays nearly constant across group sizes for ring algorithms (nccl-tests,
 * doc/PERFORMANCE.md), so it is the one to interpolate. */
static int coll_group_interp(const pt_costdb *db, const pt_csample *q, double *t)
{
    order o = {db->cs, sizeof *db->cs, cc_cmp};
    const uint32_t *idx = db->c_by_cfg;
    bool crosses = q->ranks_per_node < q->group;
    if (!(q->bytes > 0))
        return -1;
    size_t oa = bound(o, idx, 0, db->nc, q, PT_CC_OP, false);
    size_t ob = bound(o, idx, oa, db->nc, q, PT_CC_OP, true);
    bracket below = {0}, above = {0};
    for (size_t a = oa, b; a < ob; a = b) {
        const pt_csample *s = &db->cs[idx[a]];
        b = bound(o, idx, a, ob, s, PT_CC_RPN, true);
        double ts;
        if (s->group < 2 || s->group == q->group || (s->ranks_per_node < s->group) != crosses)
            continue;
        bool is_below = s->group < q->group;
        bracket *br = is_below ? &below : &above;
        if (!better(br, s->group, s->ranks_per_node, q->ranks_per_node, is_below) ||
            coll_at_bytes(db, a, b, q->bytes, &ts) != 0)
            continue;
        *br = (bracket){s->group, s->ranks_per_node,
                        pt_coll_busbw(q->op, s->group, q->bytes, ts), true};
    }
    if (!below.found || !above.found)
        return -1;
    double f = (log(q->group) - log(below.group)) / (log(above.group) - log(below.group));
    double busbw = below.busbw + f * (above.busbw - below.busbw);
    double per_busbw = pt_coll_busbw(q->op, q->group, q->bytes, 1.0) / q->bytes;
    if (!(busbw > 0) || !(per_busbw > 0))
        return -1;
    *t = q->bytes * per_busbw / busbw; /* busbw = bytes / t · factor */
    return 0;
}

pt_cost pt_cost_coll(const pt_costdb *db, const pt_cost_hw *hw, const pt_coll_op *op)
{
    /* A group of one moves nothing. */
    if (op->group <= 1)
        return (pt_cost){0, PT_PROV_ANALYTIC};
    if (db && db->nc) {
        pt_csample q = {.op = op->op, .group = op->group, .bytes = op->bytes,
                        .ranks_per_node = op->ranks_per_node < 1 ? 1
                                          : op->ranks_per_node > op->group
                                              ? op->group
                                              : op->ranks_per_node};
        copy_field(q.backend, sizeof q.backend, hw->backend);
        order o = {db->cs, sizeof *db->cs, cc_cmp};
        const uint32_t *idx = db->c_by_cfg;
        size_t a = bound(o, idx, 0, db->nc, &q, PT_CC_RPN, false);
        size_t b = bound(o, idx, a, db->nc, &q, PT_CC_RPN, true);
        double t;
        if (a < b) {
            /* This configuration was sampled: exact bytes, or between its sizes. */
            size_t ea = bound(o, idx, a, b, &q, PT_CC_BYTES, false);
            size_t eb = bound(o, idx, ea, b, &q, PT_CC_BYTES, true);
            if (ea < eb)
                return (pt_cost){run_median_c(db, ea, eb), PT_PROV_MEASURED};
            if (coll_at_bytes(db, a, b, op->bytes, &t) == 0)
                return (pt_cost){t, PT_PROV_INTERPOLATED};
        } else if (coll_group_interp(db, &q, &t) == 0) {
            return (pt_cost){t, PT_PROV_INTERPOLATED};
        }
    }
    if (db && db->nfits) {
        pt_link_fit intra, inter;
        pt_costdb_link_fits(db, hw->backend, &intra, &inter);
        return (pt_cost){pt_cost_coll_fitted(hw, op, &intra, &inter), PT_PROV_ANALYTIC};
    }
    return (pt_cost){pt_cost_coll_analytic(hw, op), PT_PROV_ANALYTIC};
}
