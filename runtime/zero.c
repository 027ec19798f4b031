/*
 * ZeRO stages 2 and 3 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward
 * Training Trillion Parameter Models", Sec. 5): gradients and optimizer state (stage
 * 2), and the parameters too (stage 3), sharded over the data-parallel (dp·cp)
 * group (a mixture of experts' experts over their expert-data-parallel group, kept
 * whole besides as the embedding and head are: build_segments). The parameter buffer is cut into segments — each transformer layer, the
 * embedding, the head — and each segment is padded to a multiple of dp and sharded
 * on its own, as FSDP shards its units. A rank keeps only its shard of every
 * segment's fp32 master weights, gradients and Adam moments.
 *
 * A layer's gradients accumulate in a window during the layer's backward, which the
 * op list's zero_reducescatter starts reduce-scattering while the next layer's
 * backward accumulates into the other window (two, used in turn: a window is waited
 * for, its reduced share added to this rank's gradient shard, before it is reused).
 * With stage 3, a layer's weights are all-gathered into a window when the op list
 * says (zero3_allgather, before the layer's forward and again before its backward),
 * and the next layer's gather starts then into the other window (the prefetch the
 * ptrun stack prices: zero3_prefetch = 1); with stage 2 every rank keeps the whole
 * weights, and the updated shards are all-gathered after each step. The
 * embedding and head segments are not in layer op lists: their weights stay whole on
 * every rank (as FSDP keeps its root unit), their gradients are reduce-scattered at
 * the optimizer step and their updated shards all-gathered back.
 *
 * Addressing stays the flat buffer's: a parameter's offset says where it sits in its
 * segment, and pt_zero_weight / pt_zero_grad map it into a window or a whole copy.
 *
 * Element types. Gradients, master weights and moments are fp32 on every backend;
 * the weights the layers read (windows, whole copies) are the backend's [act] type.
 * On the fp32 CPU backend a whole copy is also its segment's master (ZeRO 2 keeps
 * no second copy); on a bf16 backend (CUDA) every segment has an fp32 master shard,
 * and a gather rounds this rank's shard to bf16 before it all-gathers, so bf16
 * weights travel (FSDP's mixed precision, where parameters are gathered in the
 * compute type). Every buffer is backend memory and every move a kernel or a
 * collective on it: no host loop touches a shard, and nothing waits on the host.
 */
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t begin, end;   /* parameter elements [begin, end) of the flat buffer */
    int64_t layer;        /* global layer index, or -1: embedding, head or experts */
    bool experts;         /* a chunk's experts (a mixture of experts): kept whole as the
                             embedding and head are, sharded over their own group */
    int group, ranks, rank; /* the group it is sharded over (PT_GROUP_DPCP, the experts'
                             PT_GROUP_EDP), its size and this rank's place in it */
    int64_t shard;        /* elements per rank: ceil((end - begin) / ranks) */
    int64_t sbase;        /* where this rank's shard starts in the shard arrays */
    int64_t wbase;        /* weights kept whole: where they start in `whole`, else -1 */
    int64_t gbase;        /* gradients kept whole: where in `gwhole`, else -1 */
    int64_t mbase;        /* where this rank's fp32 master shard starts in n->master, or
                             -1: the whole copy is the master (weights kept whole on
                             the fp32 backend, where weights and master weights are one) */
} segment;

struct pt_zero {
    segment *seg;
    int n_seg;
    int dp_rank, dp_size;
    bool gather_layers;        /* stage 3: layers' weights live in shards only */
    bool sep_master;           /* weights are bf16: every segment has an fp32 master shard */
    pt_comm_dtype wtype;       /* the weights' type in collectives */
    size_t ab;                 /* bytes per weight element ([act]) */
    char *window[2];           /* (win_elems) [act] gathered layers' weights, used in turn */
    int win_seg[2];            /* the segment each holds (or is being gathered), -1 none */
    pt_comm_req *win_req[2];   /* a prefetch in flight into the window, or NULL */
    int win_last;              /* the window the current layer's weights are in */
    float *gwindow[2];         /* (win_elems) layers' gradients, used in turn */
    int gwin_seg;              /* the segment accumulating in gwindow[gcur], -1 none */
    int gcur;
    int grs_seg[2];            /* the segment each gradient window is being
                                  reduce-scattered for, -1 none */
    pt_comm_req *grs_req[2];
    float *gshare[2];          /* (max layer shard) each reduce-scatter's output */
    char *whole;               /* (whole_elems) [act] weights kept whole */
    float *gwhole;             /* (gwhole_elems) fp32 gradients kept whole */
    float *staging;            /* (stage_elems) fp32 backend memory: a padded segment on
                                  its way through the step's collectives, allocated once */
    int64_t win_elems, whole_elems, gwhole_elems, master_elems, stage_elems, max_shard;
};

/* The layer a parameter name belongs to ("layers.12.q.w" -> 12), or -1. */
static int64_t layer_of(const char *name)
{
    if (strncmp(name, "layers.", 7) != 0)
        return -1;
    return strtoll(name + 7, NULL, 10);
}

/* Cuts the parameter table into segments: runs of consecutive parameters of one
 * layer, or of none (embedding and head pieces, a chunk's experts: those kept whole). A
 * mixture of experts' experts, which only their expert-data-parallel group holds
 * alike, are sharded over that group and kept whole besides, as FSDP keeps its root
 * unit: their gradients reduce-scattered and their weights gathered at the step. */
static int build_segments(pt_net *n, pt_zero *z)
{
    z->seg = calloc((size_t)n->n_param, sizeof *z->seg);
    if (!z->seg)
        return -1;
    int edp = pt_layout_edp(&n->layout);
    for (int i = 0; i < n->n_param; i++) {
        const pt_param *p = &n->param[i];
        int64_t layer = p->expert ? -1 : layer_of(p->name);
        segment *last = z->n_seg ? &z->seg[z->n_seg - 1] : NULL;
        if (last && last->layer == layer && last->experts == p->expert &&
            last->end == p->offset) {
            last->end += p->count;
            continue;
        }
        z->seg[z->n_seg++] = (segment){.begin = p->offset, .end = p->offset + p->count,
                                       .layer = layer, .experts = p->expert,
                                       .group = p->expert ? PT_GROUP_EDP : PT_GROUP_DPCP,
                                       .ranks = p->expert ? edp : z->dp_size,
                                       .rank = p->expert ? n->edp_rank : z->dp_rank};
    }
    int64_t sbase = 0;
    for (int s = 0; s < z->n_seg; s++) {
        segment *g = &z->seg[s];
        int64_t len = g->end - g->begin;
        g->shard = (len + g->ranks - 1) / g->ranks;
        g->sbase = sbase;
        sbase += g->shard;
        g->wbase = g->gbase = g->mbase = -1;
        if (g->layer >= 0 && g->shard * g->ranks > z->win_elems) {
            z->win_elems = g->shard * g->ranks;
            z->max_shard = g->shard;
        }
        if (g->shard * g->ranks > z->stage_elems)
            z->stage_elems = g->shard * g->ranks;
        if (g->layer < 0 || !z->gather_layers) {
            g->wbase = z->whole_elems;
            z->whole_elems += len;
        }
        if (g->wbase < 0 || z->sep_master) {
            g->mbase = z->master_elems;
            z->master_elems += g->shard;
        }
        if (g->layer < 0) {
            g->gbase = z->gwhole_elems;
            z->gwhole_elems += len;
        }
    }
    n->opt_elems = sbase;
    return 0;
}

static int segment_of(const pt_zero *z, int64_t offset)
{
    int lo = 0, hi = z->n_seg - 1;
    while (lo < hi) { /* the last segment that begins at or before offset */
        int mid = (lo + hi + 1) / 2;
        if (z->seg[mid].begin <= offset)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static size_t floats(int64_t n)
{
    return (size_t)(n > 0 ? n : 1) * sizeof(float);
}

/* Bytes of n weights ([act]), at least one element's. */
static size_t wbytes(const pt_zero *z, int64_t n)
{
    return (size_t)(n > 0 ? n : 1) * z->ab;
}

static char *at_weight(const pt_zero *z, char *base, int64_t elem)
{
    return base + (size_t)elem * z->ab;
}

int pt_zero_init(pt_net *n, int stage, int dp_rank, int dp_size, const float *init, pt_err *err)
{
    pt_kernels *kn = n->kn;
    pt_zero *z = calloc(1, sizeof *z);
    if (!z)
        return pt_err_set(err, "out of memory");
    n->zero = z;
    z->dp_rank = dp_rank;
    z->dp_size = dp_size;
    z->gather_layers = stage >= 3;
    z->ab = pt_kdtype_bytes(kn->act_dtype);
    z->sep_master = kn->act_dtype != PT_KDTYPE_F32;
    z->wtype = z->sep_master ? PT_COMM_BF16 : PT_COMM_F32;
    z->win_seg[0] = z->win_seg[1] = z->gwin_seg = z->grs_seg[0] = z->grs_seg[1] = -1;
    if (build_segments(n, z))
        return pt_err_set(err, "out of memory for the ZeRO segments");
    size_t opt = floats(n->opt_elems), win = floats(z->win_elems), mst = floats(z->master_elems);
    size_t wwin = wbytes(z, z->win_elems), whole = wbytes(z, z->whole_elems);
    size_t gwhole = floats(z->gwhole_elems);
    n->master = kn->alloc(kn, mst);
    n->grad = kn->alloc(kn, opt);
    n->m = kn->alloc(kn, opt);
    n->v = kn->alloc(kn, opt);
    bool windows_ok = true;
    for (int k = 0; k < 2; k++) {
        z->window[k] = z->gather_layers ? kn->alloc(kn, wwin) : NULL;
        z->gwindow[k] = kn->alloc(kn, win);
        z->gshare[k] = kn->alloc(kn, floats(z->max_shard));
        windows_ok &= (!z->gather_layers || z->window[k]) && z->gwindow[k] && z->gshare[k];
    }
    z->whole = kn->alloc(kn, whole);
    z->gwhole = kn->alloc(kn, gwhole);
    z->staging = kn->alloc(kn, floats(z->stage_elems));
    n->w = NULL;
    size_t total = 3 * opt + mst + (z->gather_layers ? 2 * wwin : 0) + 2 * win + whole +
                   gwhole + 2 * floats(z->max_shard) + floats(z->stage_elems);
    n->bytes += (int64_t)total;
    if (!n->master || !n->grad || !n->m || !n->v || !windows_ok || !z->whole || !z->gwhole ||
        !z->staging)
        return pt_err_set(err, "out of memory for ZeRO-%d shards and windows (%.1f MiB)", stage,
                          (double)total / 1048576);
    kn->zero(kn, n->grad, opt);
    kn->zero(kn, n->m, opt);
    kn->zero(kn, n->v, opt);
    kn->zero(kn, z->gwindow[0], win);
    kn->zero(kn, z->gwindow[1], win);
    kn->zero(kn, z->gwhole, gwhole);
    return pt_zero_set_master(n, init, err);
}

void pt_zero_free(pt_net *n)
{
    pt_zero *z = n->zero;
    if (!z)
        return;
    pt_kernels *kn = n->kn;
    kn->free(kn, n->master);
    kn->free(kn, n->grad);
    kn->free(kn, n->m);
    kn->free(kn, n->v);
    for (int k = 0; k < 2; k++) {
        kn->free(kn, z->window[k]);
        kn->free(kn, z->gwindow[k]);
        kn->free(kn, z->gshare[k]);
    }
    kn->free(kn, z->whole);
    kn->free(kn, z->gwhole);
    kn->free(kn, z->staging);
    free(z->seg);
    free(z);
    n->zero = NULL;
    n->master = n->grad = n->m = n->v = NULL;
}

/* This rank's part of segment s: elements [lo, hi) of the flat buffer (possibly
 * empty for the last ranks of a short segment). */
static void shard_range(const pt_zero *z, const segment *g, int64_t *lo, int64_t *hi)
{
    (void)z;
    *lo = g->begin + (int64_t)g->rank * g->shard;
    *hi = *lo + g->shard < g->end ? *lo + g->shard : g->end;
    if (*lo > *hi)
        *lo = *hi;
}

/* Where this rank's master weights of segment g start (element lo of its shard). */
static float *master_of(pt_net *n, const segment *g, int64_t lo)
{
    pt_zero *z = n->zero;
    return g->mbase >= 0 ? n->master + g->mbase
                         : (float *)at_weight(z, z->whole, g->wbase + (lo - g->begin));
}

int pt_zero_set_master(pt_net *n, const float *whole, pt_err *err)
{
    pt_zero *z = n->zero;
    pt_kernels *kn = n->kn;
    int rc = 0;
    for (int s = 0; s < z->n_seg && rc == 0; s++) {
        const segment *g = &z->seg[s];
        int64_t lo, hi;
        shard_range(z, g, &lo, &hi);
        if (g->wbase >= 0)
            rc = pt_net_upload_weights(kn, at_weight(z, z->whole, g->wbase),
                                       whole + g->begin, g->end - g->begin, err);
        if (g->mbase < 0)
            continue;
        kn->zero(kn, n->master + g->mbase, (size_t)g->shard * sizeof(float));
        kn->copy(kn, n->master + g->mbase, whole + lo, (size_t)(hi - lo) * sizeof(float),
                 PT_KCOPY_H2D);
    }
    z->win_seg[0] = z->win_seg[1] = -1; /* the windows hold old weights */
    if (rc == 0 && kn->sync(kn))
        rc = pt_err_set(err, "%s", kn->err);
    return rc;
}

/* All-gathers segment g's shards into `into` (shard · dp elements): the weights the
 * layers read ([act]: this rank's master shard rounded to bf16 on a bf16 backend),
 * or with `master` the fp32 master weights. With req, only starts it (pt_comm_wait
 * completes it). */
static int gather(pt_net *n, const segment *g, void *into, bool master, pt_comm_req **req,
                  pt_err *err)
{
    pt_zero *z = n->zero;
    pt_kernels *kn = n->kn;
    int64_t lo, hi;
    shard_range(z, g, &lo, &hi);
    bool round = z->sep_master && !master;
    size_t eb = round ? z->ab : sizeof(float);
    char *mine = (char *)into + (size_t)g->rank * (size_t)g->shard * eb;
    kn->zero(kn, mine, (size_t)g->shard * eb);
    if (round)
        kn->f32_to_bf16(kn, (uint16_t *)mine, master_of(n, g, lo), hi - lo);
    else
        kn->copy(kn, mine, master_of(n, g, lo), (size_t)(hi - lo) * sizeof(float),
                 PT_KCOPY_D2D);
    pt_comm_dtype t = round ? z->wtype : PT_COMM_F32;
    if (req)
        return pt_comm_iallgather_t(n->comm, g->group, t, mine, into, g->shard, req, err);
    return pt_comm_allgather_t(n->comm, g->group, t, mine, into, g->shard, err);
}

int pt_zero_get_master(pt_net *n, float *whole, pt_err *err)
{
    pt_zero *z = n->zero;
    pt_kernels *kn = n->kn;
    int rc = 0;
    for (int s = 0; s < z->n_seg && rc == 0; s++) {
        const segment *g = &z->seg[s];
        rc = gather(n, g, z->staging, true, NULL, err);
        if (rc == 0)
            kn->copy(kn, whole + g->begin, z->staging, (size_t)(g->end - g->begin) * sizeof(float),
                     PT_KCOPY_D2H);
        if (rc == 0 && kn->sync(kn)) /* staging is reused by the next segment */
            rc = pt_err_set(err, "%s", kn->err);
    }
    return rc;
}

/* ---- The layer ops ------------------------------------------------------------------------ */

static int layer_segment(const pt_zero *z, int64_t layer, pt_err *err)
{
    for (int s = 0; s < z->n_seg; s++)
        if (z->seg[s].layer == layer)
            return s;
    return pt_err_set(err, "internal: ZeRO has no segment for layer %lld", (long long)layer);
}

/* Waits for window k's prefetch, if one is in flight. */
static int window_ready(pt_net *n, int k, pt_err *err)
{
    pt_zero *z = n->zero;
    pt_comm_req *req = z->win_req[k];
    z->win_req[k] = NULL;
    if (req && pt_comm_wait(n->comm, req, err)) {
        z->win_seg[k] = -1;
        return -1;
    }
    return 0;
}

int pt_zero_gather_layer(pt_net *n, int64_t layer, int64_t next, pt_err *err)
{
    pt_zero *z = n->zero;
    int s = layer_segment(z, layer, err);
    if (s < 0)
        return -1;
    int k = z->win_seg[0] == s ? 0 : z->win_seg[1] == s ? 1 : -1;
    if (k >= 0) { /* prefetched (or still there) */
        if (window_ready(n, k, err))
            return -1;
    } else { /* the window the layer before did not use */
        k = 1 - z->win_last;
        if (window_ready(n, k, err))
            return -1;
        z->win_seg[k] = -1;
        if (gather(n, &z->seg[s], z->window[k], false, NULL, err))
            return -1;
        z->win_seg[k] = s;
    }
    z->win_last = k;
    if (next < 0)
        return 0;
    int t = layer_segment(z, next, err);
    if (t < 0)
        return -1;
    if (z->win_seg[1 - k] == t) /* already there, or on its way */
        return 0;
    if (window_ready(n, 1 - k, err))
        return -1;
    z->win_seg[1 - k] = t;
    if (gather(n, &z->seg[t], z->window[1 - k], false, &z->win_req[1 - k], err)) {
        z->win_seg[1 - k] = -1;
        return -1;
    }
    return 0;
}

/* Completes gradient window k's reduce-scatter: its share is added to this rank's
 * gradient shard and the window zeroed for reuse. */
static int gwindow_done(pt_net *n, int k, pt_err *err)
{
    pt_zero *z = n->zero;
    if (z->grs_seg[k] < 0)
        return 0;
    const segment *g = &z->seg[z->grs_seg[k]];
    pt_comm_req *req = z->grs_req[k];
    z->grs_req[k] = NULL;
    z->grs_seg[k] = -1;
    if (pt_comm_wait(n->comm, req, err))
        return -1;
    n->kn->add_f32(n->kn, n->grad + g->sbase, z->gshare[k], g->shard);
    n->kn->zero(n->kn, z->gwindow[k], (size_t)z->win_elems * sizeof(float));
    return 0;
}

int pt_zero_begin_backward(pt_net *n, int64_t layer, pt_err *err)
{
    pt_zero *z = n->zero;
    int s = layer_segment(z, layer, err);
    if (s < 0)
        return -1;
    if (z->gwin_seg >= 0 && z->gwin_seg != s)
        return pt_err_set(err, "internal: layer %lld's gradients were not reduce-scattered",
                          (long long)z->seg[z->gwin_seg].layer);
    if (z->gwin_seg < 0 && gwindow_done(n, z->gcur, err)) /* its previous reduction */
        return -1;
    z->gwin_seg = s;
    return 0;
}

int pt_zero_reduce_layer(pt_net *n, int64_t layer, pt_err *err)
{
    pt_zero *z = n->zero;
    int s = layer_segment(z, layer, err);
    if (s < 0)
        return -1;
    const segment *g = &z->seg[s];
    if (z->gwin_seg != s)
        return pt_err_set(err, "internal: zero_reducescatter of layer %lld outside its backward",
                          (long long)layer);
    int k = z->gcur;
    if (pt_comm_ireducescatter(n->comm, PT_GROUP_DPCP, z->gwindow[k], z->gshare[k], g->shard,
                               &z->grs_req[k], err))
        return -1;
    z->grs_seg[k] = s;
    z->gwin_seg = -1;
    z->gcur = 1 - k; /* the next layer accumulates in the other window */
    return 0;
}

/* Completes every collective the layers left in flight: the gradient windows'
 * reduce-scatters and a weight prefetch (none is left by a whole pass; an error may). */
int pt_zero_drain(pt_net *n, pt_err *err)
{
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        pt_err e2;
        if (gwindow_done(n, k, rc ? &e2 : err) || window_ready(n, k, rc ? &e2 : err))
            rc = -1;
    }
    return rc;
}

float *pt_zero_weight(pt_net *n, const pt_param *p)
{
    pt_zero *z = n->zero;
    int s = segment_of(z, p->offset);
    const segment *g = &z->seg[s];
    if (g->wbase >= 0)
        return (float *)at_weight(z, z->whole, g->wbase + (p->offset - g->begin));
    if (z->win_req[z->win_last] == NULL && z->win_seg[z->win_last] == s)
        return (float *)at_weight(z, z->window[z->win_last], p->offset - g->begin);
    return NULL;
}

float *pt_zero_grad(pt_net *n, const pt_param *p)
{
    pt_zero *z = n->zero;
    int s = segment_of(z, p->offset);
    const segment *g = &z->seg[s];
    if (g->gbase >= 0)
        return z->gwhole + g->gbase + (p->offset - g->begin);
    /* a layer's gradients exist during its backward only */
    return z->gwin_seg == s ? z->gwindow[z->gcur] + (p->offset - g->begin) : NULL;
}

/* ---- The optimizer's view ----------------------------------------------------------------- */

int pt_zero_segments(const pt_net *n)
{
    return n->zero->n_seg;
}

pt_zero_shard pt_zero_shard_of(pt_net *n, int s)
{
    pt_zero *z = n->zero;
    const segment *g = &z->seg[s];
    pt_zero_shard out;
    shard_range(z, g, &out.lo, &out.hi);
    out.master = master_of(n, g, out.lo);
    out.grad = n->grad + g->sbase;
    out.m = n->m + g->sbase;
    out.v = n->v + g->sbase;
    return out;
}

int pt_zero_reduce_whole(pt_net *n, pt_err *err)
{
    pt_zero *z = n->zero;
    pt_kernels *kn = n->kn;
    int rc = pt_zero_drain(n, err);
    for (int s = 0; s < z->n_seg && rc == 0; s++) {
        const segment *g = &z->seg[s];
        if (g->gbase < 0)
            continue;
        float *padded = z->staging;
        int64_t len = g->end - g->begin;
        kn->copy(kn, padded, z->gwhole + g->gbase, (size_t)len * sizeof *padded, PT_KCOPY_D2D);
        kn->zero(kn, padded + len, (size_t)(g->shard * g->ranks - len) * sizeof *padded);
        rc = pt_comm_reducescatter(n->comm, g->group, padded, n->grad + g->sbase, g->shard,
                                   err);
    }
    kn->zero(kn, z->gwhole, floats(z->gwhole_elems));
    return rc;
}

int pt_zero_gather_whole(pt_net *n, pt_err *err)
{
    pt_zero *z = n->zero;
    int rc = 0;
    for (int s = 0; s < z->n_seg && rc == 0; s++) {
        const segment *g = &z->seg[s];
        if (g->wbase < 0)
            continue;
        rc = gather(n, g, z->staging, false, NULL, err);
        if (rc == 0)
            n->kn->copy(n->kn, at_weight(z, z->whole, g->wbase), z->staging,
                        (size_t)(g->end - g->begin) * z->ab, PT_KCOPY_D2D);
    }
    z->win_seg[0] = z->win_seg[1] = -1; /* the windows hold weights from before the step */
    return rc;
}
