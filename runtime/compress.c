/*
 * Gradient compression of the data-parallel reduction (the layout's compress key),
 * for the ZeRO 0 and 1 gradient buckets the engine starts during the backward
 * (engine.c).
 *
 * bf16: a bucket's fp32 gradients are rounded to bf16 (round to nearest even) into a
 * buffer of their own, summed over the dp·cp group as bf16 with two bytes per element
 * on the wire (PT_COMM_BF16_WIRE: every step of the collective rounds to bf16, as
 * ncclBfloat16 does), and widened back to fp32 when the bucket is waited for: PyTorch
 * DDP's bf16_compress_hook. ZeRO 0 all-reduces the bucket, ZeRO 1 reduce-scatters its
 * padded copy into this rank's share.
 *
 * powersgd (Vogels et al. 2019, "PowerSGD: Practical Low-Rank Gradient Compression
 * for Distributed Optimization", NeurIPS, Algorithm 1 with error feedback and warm
 * start): from step powersgd_start on, each layer weight matrix M (rows, cols) that
 * pt_psgd_compresses picks is reduced as two thin matrices. With g_i this rank's
 * gradient and e_i its error (zero at first), M_i = g_i + e_i;
 *     P = sum_i M_i Q        (all-reduced; Q (cols, r) the last step's, warm start)
 *     P = orthonormal(P)     (Gram–Schmidt twice in fp32, kn->orthonormalize)
 *     Q = sum_i M_i^T P      (all-reduced)
 *     M = P Q^T              (the reduced gradient: P P^T sum_i M_i)
 *     e_i = M_i - P Q^T / W  (W ranks: the errors sum to what the reduction missed)
 * Gradients here are already scaled so that their sum over the ranks is the step's
 * gradient (engine.c), so sums stand where the paper averages. Q starts as a standard
 * normal matrix keyed by the run's seed and the tensor, the same on every rank of the
 * group. Everything else of the chunk — the embedding, the head, norms, biases and
 * matrices too small to gain — is packed into one buffer and all-reduced uncompressed
 * in buckets of the plan's size. Matrices go in groups of at least a bucket's
 * elements, each group's P matrices one all-reduce and its Q matrices another: a group
 * starts (error, P = MQ, its P all-reduce) once the backward has made its gradients
 * final, its Q step runs when the next group starts or at the chunk's REDUCE_GRADS,
 * which waits for everything, so the P all-reduce of one group overlaps the backward
 * of the layers below it. On a backend with a second stream (CUDA) all of PowerSGD's
 * work — its kernels, and the waits for its collectives — is queued there, beside the
 * backward on the main stream, which waits for it only at REDUCE_GRADS (the training
 * diary's stream wrapper in the reference notes; on the CPU the host runs it between
 * the backward's layers). Steps before powersgd_start reduce as compress=none.
 * ZeRO 1 under PowerSGD all-reduces (its uncompressed part too) and each rank then
 * takes its share of every bucket; the tied embedding's copy keeps its reduce-scatter
 * at the step.
 *
 * The buffers are allocated with the model and counted in pt_net.bytes; the planner's
 * ptrun memory model (planner/memory.c, pt_mem_ptrun_states) counts the same.
 */
#include "model_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* Gram–Schmidt's guard against a zero column (PyTorch's orthogonalization_epsilon; the
 * training diary in the reference notes used 1e-6, far below a gradient column's norm
 * after the sum over ranks). */
#define PSGD_EPS 1e-8f

_Static_assert((int)PT_POWERSGD_MAX_RANK <= (int)PT_K_ORTHO_MAX_COLS,
               "the largest powersgd_rank must fit kn->orthonormalize");

/* One compressed matrix of a chunk. */
typedef struct {
    int param;                /* index in pt_net.param */
    int64_t lo;               /* its first gradient element */
    int64_t rows, cols, r;
    int64_t p_at, q_at, e_at; /* where its P, Q and error sit in pbuf, qbuf, ebuf */
} psgd_mat;

/* Matrices [first, first + count) of a chunk (descending offsets), reduced together. */
typedef struct {
    int first, count;
    int64_t lowest;           /* their lowest gradient element: final, the group starts */
    int64_t p_at, p_len, q_at, q_len; /* their P and Q matrices, one span each */
    int phase;                /* 0 not started, 1 P in flight, 2 Q in flight */
    pt_comm_req *req;
} psgd_group;

/* Uncompressed gradient elements [lo, hi) of a chunk, packed at u_at in ubuf. */
typedef struct {
    int64_t lo, hi, u_at;
} psgd_stretch;

/* An uncompressed bucket: packed elements [u_at, u_at + len), the lowest gradient
 * element it holds `lowest`. */
typedef struct {
    int64_t u_at, len, lowest;
    pt_comm_req *req;
} psgd_ubucket;

typedef struct {
    psgd_mat *mat;
    int n_mat;
    psgd_group *grp;
    int n_grp, next_grp;
    psgd_stretch *st;         /* ascending */
    int n_st;
    psgd_ubucket *ub;         /* from the chunk's end down, as they start */
    int n_ub, next_ub;
} psgd_chunk;

struct pt_compress_state {
    pt_compress kind;
    int dp_rank, dp_size;
    uint16_t *g16;            /* bf16, ZeRO 0: (n_elems) the flat gradients' copy */
    uint16_t *full16;         /* bf16, ZeRO 1: (opt_elems·opt_ranks) the buckets' padded
                                 copies, as rs_full */
    uint16_t *shard16;        /* bf16, ZeRO 1: (opt_elems) their reduced shares, as
                                 rs_shard */
    /* powersgd */
    int rank;
    int64_t start;            /* the first compressed step */
    bool q_ready;             /* Q holds the warm start (set at the first compressed step) */
    psgd_chunk chunk[PT_CHUNK_MAX]; /* [vp] */
    float *pbuf, *qbuf, *ebuf, *ubuf; /* fp32: P, Q, errors, packed uncompressed */
    int64_t p_elems, q_elems, e_elems, u_elems;
};

static size_t b16(int64_t n)
{
    return (size_t)(n > 0 ? n : 1) * sizeof(uint16_t);
}

static size_t f32(int64_t n)
{
    return (size_t)(n > 0 ? n : 1) * sizeof(float);
}

/* ---- PowerSGD's tables ---------------------------------------------------------------------- */

/* The chunk's compressed matrices, from its end down (the backward's order). */
static int psgd_matrices(pt_net *n, struct pt_compress_state *g, int c, psgd_chunk *ch)
{
    ch->mat = calloc((size_t)(n->n_param > 0 ? n->n_param : 1), sizeof *ch->mat);
    if (!ch->mat)
        return -1;
    for (int i = n->n_param - 1; i >= 0; i--) {
        const pt_param *p = &n->param[i];
        if (p->offset < n->reduce_lo[c] || p->offset + p->count > n->reduce_hi[c] ||
            p->ndim != 2 || strncmp(p->name, "layers.", 7) != 0 ||
            !pt_psgd_compresses(p->shape[0], p->shape[1], g->rank))
            continue;
        psgd_mat *m = &ch->mat[ch->n_mat++];
        *m = (psgd_mat){.param = i, .lo = p->offset, .rows = p->shape[0], .cols = p->shape[1],
                        .r = pt_psgd_rank(p->shape[0], p->shape[1], g->rank)};
        m->e_at = g->e_elems;
        g->e_elems += p->count;
    }
    return 0;
}

/* The chunk's groups (pt_psgd_group_closes, the planner's rule), from its end down;
 * each group's P and Q matrices one span of pbuf and qbuf. */
static int psgd_groups(struct pt_compress_state *g, psgd_chunk *ch, int64_t bucket)
{
    ch->grp = calloc((size_t)(ch->n_mat > 0 ? ch->n_mat : 1), sizeof *ch->grp);
    if (!ch->grp)
        return -1;
    int64_t acc = 0;
    bool open = false;
    for (int i = 0; i < ch->n_mat; i++) {
        psgd_mat *m = &ch->mat[i];
        if (!open) {
            ch->grp[ch->n_grp++] = (psgd_group){.first = i, .p_at = g->p_elems,
                                                .q_at = g->q_elems};
            open = true;
        }
        psgd_group *gr = &ch->grp[ch->n_grp - 1];
        m->p_at = g->p_elems;
        m->q_at = g->q_elems;
        g->p_elems += m->rows * m->r;
        g->q_elems += m->cols * m->r;
        gr->count++;
        gr->lowest = m->lo;
        gr->p_len = g->p_elems - gr->p_at;
        gr->q_len = g->q_elems - gr->q_at;
        if (pt_psgd_group_closes(&acc, m->rows, m->cols, bucket))
            open = false;
    }
    return 0;
}

/* The chunk's uncompressed stretches (what lies between its compressed matrices),
 * packed in ascending order, and its buckets over the packed elements from the end
 * down (pt_bucket_at, the planner's rule). */
static int psgd_stretches(pt_net *n, struct pt_compress_state *g, int c, psgd_chunk *ch,
                          int64_t bucket)
{
    ch->st = calloc((size_t)ch->n_mat + 1, sizeof *ch->st);
    if (!ch->st)
        return -1;
    int64_t at = n->reduce_lo[c], base = g->u_elems;
    for (int i = ch->n_mat; i >= 0; i--) { /* matrices ascending: mat[n_mat - 1] first */
        int64_t end = i > 0 ? ch->mat[i - 1].lo : n->reduce_hi[c];
        if (end > at) {
            ch->st[ch->n_st++] = (psgd_stretch){.lo = at, .hi = end, .u_at = g->u_elems};
            g->u_elems += end - at;
        }
        if (i > 0)
            at = ch->mat[i - 1].lo + ch->mat[i - 1].rows * ch->mat[i - 1].cols;
    }
    int64_t len = g->u_elems - base;
    ch->n_ub = (int)pt_bucket_count(len, bucket);
    ch->ub = calloc((size_t)(ch->n_ub > 0 ? ch->n_ub : 1), sizeof *ch->ub);
    if (!ch->ub)
        return -1;
    for (int b = 0; b < ch->n_ub; b++) {
        int64_t off, cnt;
        pt_bucket_at(len, bucket, b, &off, &cnt);
        psgd_ubucket *u = &ch->ub[b];
        *u = (psgd_ubucket){.u_at = base + off, .len = cnt};
        /* the gradient element of its first packed element */
        for (int k = 0; k < ch->n_st; k++)
            if (u->u_at >= ch->st[k].u_at && u->u_at < ch->st[k].u_at + ch->st[k].hi -
                                                           ch->st[k].lo)
                u->lowest = ch->st[k].lo + (u->u_at - ch->st[k].u_at);
    }
    return 0;
}

static int psgd_init(pt_net *n, struct pt_compress_state *g, int64_t bucket, pt_err *err)
{
    pt_kernels *kn = n->kn;
    if (!kn->gemm_f32 || !kn->orthonormalize)
        return pt_err_set(err, "compress=powersgd: the %s backend has no fp32 GEMM or "
                               "orthonormalisation", kn->name);
    g->rank = n->layout.powersgd_rank;
    g->start = n->layout.powersgd_start;
    for (int c = 0; c < n->layout.vp; c++) {
        psgd_chunk *ch = &g->chunk[c];
        if (psgd_matrices(n, g, c, ch) || psgd_groups(g, ch, bucket) ||
            psgd_stretches(n, g, c, ch, bucket))
            return pt_err_set(err, "out of memory for PowerSGD's tables");
    }
    size_t bytes = f32(g->p_elems) + f32(g->q_elems) + f32(g->e_elems) + f32(g->u_elems);
    g->pbuf = kn->alloc(kn, f32(g->p_elems));
    g->qbuf = kn->alloc(kn, f32(g->q_elems));
    g->ebuf = kn->alloc(kn, f32(g->e_elems));
    g->ubuf = kn->alloc(kn, f32(g->u_elems));
    if (!g->pbuf || !g->qbuf || !g->ebuf || !g->ubuf)
        return pt_err_set(err, "out of memory for PowerSGD's buffers (%.1f MiB)",
                          (double)bytes / 1048576);
    kn->zero(kn, g->ebuf, f32(g->e_elems));
    n->bytes += (int64_t)bytes;
    return 0;
}

int pt_compress_init(pt_net *n, int dp_rank, int dp_size, int64_t bucket_elems, pt_err *err)
{
    const pt_layout *l = &n->layout;
    if (l->compress == PT_COMPRESS_NONE || dp_size <= 1)
        return 0;
    if (l->zero > 1)
        return pt_err_set(err, "compress=%s applies to the ZeRO 0/1 gradient buckets, not "
                               "ZeRO %d", pt_compress_name(l->compress), l->zero);
    pt_kernels *kn = n->kn;
    struct pt_compress_state *g = calloc(1, sizeof *g);
    if (!g)
        return pt_err_set(err, "out of memory");
    n->compress = g;
    g->kind = l->compress;
    g->dp_rank = dp_rank;
    g->dp_size = dp_size;
    if (g->kind == PT_COMPRESS_POWERSGD)
        return psgd_init(n, g, bucket_elems < 1 ? 1 : bucket_elems, err);
    if (!kn->f32_to_bf16 || !kn->bf16_to_f32)
        return pt_err_set(err, "compress=bf16: the %s backend has no bf16 conversions",
                          kn->name);
    size_t bytes;
    if (n->opt_ranks > 1) {
        size_t full = b16(n->opt_elems * n->opt_ranks), shard = b16(n->opt_elems);
        g->full16 = kn->alloc(kn, full);
        g->shard16 = kn->alloc(kn, shard);
        bytes = g->full16 && g->shard16 ? full + shard : 0;
    } else {
        g->g16 = kn->alloc(kn, b16(n->n_elems));
        bytes = g->g16 ? b16(n->n_elems) : 0;
    }
    if (!bytes)
        return pt_err_set(err, "out of memory for the bf16 gradient buckets");
    n->bytes += (int64_t)bytes;
    return 0;
}

void pt_compress_free(pt_net *n)
{
    struct pt_compress_state *g = n->compress;
    if (!g)
        return;
    pt_kernels *kn = n->kn;
    kn->free(kn, g->g16);
    kn->free(kn, g->full16);
    kn->free(kn, g->shard16);
    kn->free(kn, g->pbuf);
    kn->free(kn, g->qbuf);
    kn->free(kn, g->ebuf);
    kn->free(kn, g->ubuf);
    for (int c = 0; c < PT_CHUNK_MAX; c++) {
        free(g->chunk[c].mat);
        free(g->chunk[c].grp);
        free(g->chunk[c].st);
        free(g->chunk[c].ub);
    }
    free(g);
    n->compress = NULL;
}

bool pt_compress_bf16_on(const pt_net *n)
{
    return n->compress != NULL && n->compress->kind == PT_COMPRESS_BF16;
}

bool pt_compress_powersgd_at(const pt_net *n, int64_t step)
{
    const struct pt_compress_state *g = n->compress;
    return g != NULL && g->kind == PT_COMPRESS_POWERSGD && step >= g->start;
}

int pt_compress_allreduce_start(pt_net *n, pt_comm *comm, int64_t lo, int64_t count,
                                pt_comm_req **req, pt_err *err)
{
    uint16_t *to = n->compress->g16 + lo;
    n->kn->f32_to_bf16(n->kn, to, n->grad + lo, count);
    return pt_comm_iallreduce_t(comm, PT_GROUP_DPCP, PT_COMM_BF16_WIRE, to, count, req, err);
}

void pt_compress_allreduce_done(pt_net *n, int64_t lo, int64_t count)
{
    n->kn->bf16_to_f32(n->kn, n->grad + lo, n->compress->g16 + lo, count);
}

int pt_compress_rs_start(pt_net *n, pt_comm *comm, const pt_zero1_bucket *z,
                         pt_comm_req **req, pt_err *err)
{
    pt_kernels *kn = n->kn;
    uint16_t *full = n->compress->full16 + z->full_at;
    int64_t len = z->hi - z->lo, padded = z->share * n->opt_ranks;
    kn->f32_to_bf16(kn, full, n->grad + z->lo, len);
    kn->zero(kn, full + len, (size_t)(padded - len) * sizeof *full);
    return pt_comm_ireducescatter_t(comm, PT_GROUP_DPCP, PT_COMM_BF16_WIRE, full,
                                    n->compress->shard16 + z->shard_at, z->share, req, err);
}

void pt_compress_rs_done(pt_net *n, const pt_zero1_bucket *z)
{
    n->kn->bf16_to_f32(n->kn, n->rs_shard + z->shard_at, n->compress->shard16 + z->shard_at,
                       z->share);
}

/* ---- PowerSGD's reduction ------------------------------------------------------------------- */

/* A start or wait of PowerSGD's collectives as a span on the communication stream. */
static void psgd_span(pt_net *n, const char *what, int chunk, int64_t elems, double t0)
{
    pt_trace *t = n->trace;
    if (!t || !t->on)
        return;
    char name[64];
    snprintf(name, sizeof name, "powersgd %s c%d %lld B", what, chunk,
             (long long)(elems * (int64_t)sizeof(float)));
    pt_trace_add(t, n->rank, 1, name, NULL, t0, pt_trace_now());
}

/* Q's warm start before the first compressed step: a standard normal matrix per
 * tensor, keyed by the run's seed and the tensor's name (the same on every rank of
 * the group). */
static int psgd_first_q(pt_net *n, struct pt_compress_state *g, pt_err *err)
{
    float *q = malloc(f32(g->q_elems));
    if (!q)
        return pt_err_set(err, "out of memory initialising PowerSGD's Q");
    for (int c = 0; c < n->layout.vp; c++) {
        const psgd_chunk *ch = &g->chunk[c];
        for (int i = 0; i < ch->n_mat; i++) {
            const psgd_mat *m = &ch->mat[i];
            char key[64];
            snprintf(key, sizeof key, "%s.powersgd_q", n->param[m->param].name);
            for (int64_t k = 0; k < m->cols * m->r; k++)
                q[m->q_at + k] = pt_net_normal(n->seed, key, k);
        }
    }
    n->kn->copy(n->kn, g->qbuf, q, (size_t)g->q_elems * sizeof *q, PT_KCOPY_H2D);
    free(q);
    g->q_ready = true;
    return 0;
}

/* Copies packed elements [u_at, u_at + len) between ubuf and the gradients. */
static void psgd_pack(pt_net *n, const psgd_chunk *ch, int64_t u_at, int64_t len, bool in)
{
    pt_kernels *kn = n->kn;
    float *u = n->compress->ubuf;
    for (int k = 0; k < ch->n_st; k++) {
        const psgd_stretch *st = &ch->st[k];
        int64_t a = u_at > st->u_at ? u_at : st->u_at;
        int64_t b = st->u_at + (st->hi - st->lo);
        if (u_at + len < b)
            b = u_at + len;
        if (b <= a)
            continue;
        float *grad = n->grad + st->lo + (a - st->u_at);
        size_t bytes = (size_t)(b - a) * sizeof(float);
        if (in)
            kn->copy(kn, u + a, grad, bytes, PT_KCOPY_D2D);
        else
            kn->copy(kn, grad, u + a, bytes, PT_KCOPY_D2D);
    }
}

static int ub_start(pt_net *n, pt_comm *comm, int chunk, psgd_ubucket *u, pt_err *err)
{
    double t0 = pt_trace_now();
    psgd_pack(n, &n->compress->chunk[chunk], u->u_at, u->len, true);
    if (pt_comm_iallreduce(comm, PT_GROUP_DPCP, n->compress->ubuf + u->u_at, u->len, &u->req,
                           err))
        return -1;
    psgd_span(n, "start u", chunk, u->len, t0);
    return 0;
}

/* ---- One matrix (the reductions between the steps are the caller's) ---------------------- */

void pt_psgd_local_p(pt_kernels *kn, float *M, const float *E, const float *Q, float *P,
                     int64_t rows, int64_t cols, int64_t r)
{
    if (E)
        kn->add_f32(kn, M, E, rows * cols);
    kn->gemm_f32(kn, 0, 0, (int)rows, (int)r, (int)cols, 1.0f, M, (int)cols, Q, (int)r, 0.0f,
                 P, (int)r);
}

void pt_psgd_local_q(pt_kernels *kn, const float *M, float *P, float *Q, int64_t rows,
                     int64_t cols, int64_t r)
{
    kn->orthonormalize(kn, P, rows, (int)r, PSGD_EPS);
    kn->gemm_f32(kn, 1, 0, (int)cols, (int)r, (int)rows, 1.0f, M, (int)cols, P, (int)r, 0.0f,
                 Q, (int)r);
}

void pt_psgd_local_done(pt_kernels *kn, float *M, float *E, const float *P, const float *Q,
                        int64_t rows, int64_t cols, int64_t r, int ranks)
{
    int ir = (int)rows, ic = (int)cols, rr = (int)r;
    if (E) {
        kn->copy(kn, E, M, (size_t)(rows * cols) * sizeof *E, PT_KCOPY_D2D);
        kn->gemm_f32(kn, 0, 1, ir, ic, rr, -1.0f / (float)ranks, P, rr, Q, rr, 1.0f, E, ic);
    }
    kn->gemm_f32(kn, 0, 1, ir, ic, rr, 1.0f, P, rr, Q, rr, 0.0f, M, ic);
}

/* Phase 1: error feedback into the gradients (M = g + e), P = M Q, P all-reduced. */
static int grp_start(pt_net *n, pt_comm *comm, int chunk, psgd_group *gr, pt_err *err)
{
    struct pt_compress_state *g = n->compress;
    pt_kernels *kn = n->kn;
    double t0 = pt_trace_now();
    if (!g->q_ready && psgd_first_q(n, g, err))
        return -1;
    const psgd_chunk *ch = &g->chunk[chunk];
    for (int i = gr->first; i < gr->first + gr->count; i++) {
        const psgd_mat *m = &ch->mat[i];
        pt_psgd_local_p(kn, n->grad + m->lo, g->ebuf + m->e_at, g->qbuf + m->q_at,
                        g->pbuf + m->p_at, m->rows, m->cols, m->r);
    }
    if (pt_comm_iallreduce(comm, PT_GROUP_DPCP, g->pbuf + gr->p_at, gr->p_len, &gr->req, err))
        return -1;
    gr->phase = 1;
    psgd_span(n, "start P", chunk, gr->p_len, t0);
    return 0;
}

/* Phase 2: P summed; orthonormalised, Q = M^T P, Q all-reduced. */
static int grp_q(pt_net *n, pt_comm *comm, int chunk, psgd_group *gr, pt_err *err)
{
    struct pt_compress_state *g = n->compress;
    pt_kernels *kn = n->kn;
    double t0 = pt_trace_now();
    int rc = pt_comm_wait(comm, gr->req, err);
    gr->req = NULL;
    if (rc)
        return -1;
    psgd_span(n, "wait P", chunk, gr->p_len, t0);
    t0 = pt_trace_now();
    const psgd_chunk *ch = &g->chunk[chunk];
    for (int i = gr->first; i < gr->first + gr->count; i++) {
        const psgd_mat *m = &ch->mat[i];
        pt_psgd_local_q(kn, n->grad + m->lo, g->pbuf + m->p_at, g->qbuf + m->q_at, m->rows,
                        m->cols, m->r);
    }
    if (pt_comm_iallreduce(comm, PT_GROUP_DPCP, g->qbuf + gr->q_at, gr->q_len, &gr->req, err))
        return -1;
    gr->phase = 2;
    psgd_span(n, "start Q", chunk, gr->q_len, t0);
    return 0;
}

/* Phase 3: Q summed; e = M - P Q^T / W, and the gradients = P Q^T. */
static int grp_done(pt_net *n, pt_comm *comm, int chunk, psgd_group *gr, pt_err *err)
{
    struct pt_compress_state *g = n->compress;
    pt_kernels *kn = n->kn;
    double t0 = pt_trace_now();
    int rc = pt_comm_wait(comm, gr->req, err);
    gr->req = NULL;
    gr->phase = 0;
    if (rc)
        return -1;
    psgd_span(n, "wait Q", chunk, gr->q_len, t0);
    const psgd_chunk *ch = &g->chunk[chunk];
    for (int i = gr->first; i < gr->first + gr->count; i++) {
        const psgd_mat *m = &ch->mat[i];
        pt_psgd_local_done(kn, n->grad + m->lo, g->ebuf + m->e_at, g->pbuf + m->p_at,
                           g->qbuf + m->q_at, m->rows, m->cols, m->r, g->dp_size);
    }
    return 0;
}

/* PowerSGD's work goes on the backend's side stream where it has one (the CUDA
 * backend's), so that it and the waits for its collectives run beside the backward on
 * the main stream; pt_compress_finish makes the main stream wait for it. */
static void on_side(pt_net *n, int side)
{
    if (n->kn->stream_select)
        n->kn->stream_select(n->kn, side);
}

static int ready(pt_net *n, pt_comm *comm, int chunk, int64_t lo, pt_err *err)
{
    psgd_chunk *ch = &n->compress->chunk[chunk];
    while (ch->next_ub < ch->n_ub && ch->ub[ch->next_ub].lowest >= lo)
        if (ub_start(n, comm, chunk, &ch->ub[ch->next_ub++], err))
            return -1;
    while (ch->next_grp < ch->n_grp && ch->grp[ch->next_grp].lowest >= lo) {
        /* the group before moves on to its Q step: its P all-reduce had this
         * group's backward to run beside */
        psgd_group *prev = ch->next_grp > 0 ? &ch->grp[ch->next_grp - 1] : NULL;
        if (prev && prev->phase == 1 && grp_q(n, comm, chunk, prev, err))
            return -1;
        if (grp_start(n, comm, chunk, &ch->grp[ch->next_grp++], err))
            return -1;
    }
    return 0;
}

int pt_compress_ready(pt_net *n, pt_comm *comm, int chunk, int64_t lo, pt_err *err)
{
    on_side(n, 1);
    int rc = ready(n, comm, chunk, lo, err);
    on_side(n, 0);
    return rc;
}

/* ZeRO 1: this rank's share of each of the chunk's buckets, from the reduced
 * gradients into rs_shard. */
static void psgd_shares(pt_net *n, int chunk)
{
    struct pt_compress_state *g = n->compress;
    for (int b = 0; b < n->n_z1; b++) {
        const pt_zero1_bucket *z = &n->z1[b];
        if (z->chunk != chunk)
            continue;
        int64_t lo = z->lo + g->dp_rank * z->share, hi = lo + z->share;
        if (hi > z->hi)
            hi = z->hi;
        if (hi > lo)
            n->kn->copy(n->kn, n->rs_shard + z->shard_at, n->grad + lo,
                        (size_t)(hi - lo) * sizeof(float), PT_KCOPY_D2D);
    }
}

int pt_compress_finish(pt_net *n, pt_comm *comm, int chunk, pt_err *err)
{
    psgd_chunk *ch = &n->compress->chunk[chunk];
    on_side(n, 1);
    int rc = ready(n, comm, chunk, n->reduce_lo[chunk], err);
    for (int i = 0; i < ch->n_grp && rc == 0; i++)
        if (ch->grp[i].phase == 1)
            rc = grp_q(n, comm, chunk, &ch->grp[i], err);
    for (int i = 0; i < ch->n_ub && rc == 0; i++) {
        psgd_ubucket *u = &ch->ub[i];
        double t0 = pt_trace_now();
        rc = pt_comm_wait(comm, u->req, err);
        u->req = NULL;
        if (rc == 0) {
            psgd_span(n, "wait u", chunk, u->len, t0);
            psgd_pack(n, ch, u->u_at, u->len, false);
        }
    }
    for (int i = 0; i < ch->n_grp && rc == 0; i++)
        if (ch->grp[i].phase == 2)
            rc = grp_done(n, comm, chunk, &ch->grp[i], err);
    /* after an error the requests in flight are left to the abort that follows, as the
     * engine's buckets are */
    ch->next_ub = ch->next_grp = 0;
    if (rc == 0 && n->n_z1 > 0)
        psgd_shares(n, chunk);
    on_side(n, 0);
    if (n->kn->stream_join) /* what follows reads the reduced gradients */
        n->kn->stream_join(n->kn);
    return rc;
}

/* ---- PowerSGD's state in checkpoints -------------------------------------------------------- */

bool pt_compress_state_sizes(const pt_net *n, int64_t *errors, int64_t *q)
{
    const struct pt_compress_state *g = n->compress;
    if (!g || g->kind != PT_COMPRESS_POWERSGD)
        return false;
    *errors = g->e_elems;
    *q = g->q_elems;
    return true;
}

bool pt_compress_state_get(const pt_net *n, float *errors, float *q)
{
    const struct pt_compress_state *g = n->compress;
    n->kn->copy(n->kn, errors, g->ebuf, (size_t)g->e_elems * sizeof *errors, PT_KCOPY_D2H);
    n->kn->copy(n->kn, q, g->qbuf, (size_t)g->q_elems * sizeof *q, PT_KCOPY_D2H);
    return g->q_ready;
}

void pt_compress_state_set(pt_net *n, const float *errors, const float *q, bool q_ready)
{
    struct pt_compress_state *g = n->compress;
    pt_kernels *kn = n->kn;
    if (errors)
        kn->copy(kn, g->ebuf, errors, (size_t)g->e_elems * sizeof *errors, PT_KCOPY_H2D);
    else
        kn->zero(kn, g->ebuf, f32(g->e_elems));
    if (q && q_ready)
        kn->copy(kn, g->qbuf, q, (size_t)g->q_elems * sizeof *q, PT_KCOPY_H2D);
    g->q_ready = q && q_ready;
}
