/*
 * Schedule programs: for each pipeline rank, the ordered list of instructions of one
 * training step (forward and backward of each micro-batch and model chunk, the
 * activation and gradient transfers between stages, gradient reductions and the
 * optimizer step). This file owns the one generator per pipeline schedule and the
 * checker that proves a set of programs complete, consistent and deadlock-free.
 * The simulator (sim.c) and the runtime engine execute these programs; nothing else
 * decides the order of a training step (ARCHITECTURE.md, "The one description of a
 * step").
 *
 * Sources:
 *   all-forward-all-backward: GPipe (Huang et al. 2019, "GPipe: Efficient Training
 *     of Giant Neural Networks using Pipeline Parallelism", Sec. 2.2);
 *   1F1B: PipeDream-Flush (Narayanan et al. 2021, "Efficient Large-Scale Language
 *     Model Training on GPU Clusters Using Megatron-LM", Sec. 2.2.1) and Megatron-LM's
 *     forward_backward_pipelining_without_interleaving (schedules.py);
 *   interleaved 1F1B: the same paper, Sec. 2.2.2, and Megatron-LM's
 *     forward_backward_pipelining_with_interleaving (its get_model_chunk_id and
 *     warm-up count).
 *
 * Virtual stages: chunk c of pipeline rank r is virtual stage vs = c·p + r of
 * V = p·vp; stage 0 holds the embedding, stage V-1 the head and loss. The rank that
 * holds virtual stage vs is vs mod p.
 */
#include "schedule.h"

#include <stdlib.h>
#include <string.h>

/* ---- Instruction names -------------------------------------------------------- */

static const char *const pt_ins_names[PT_INS_COUNT] = {
    "recv_act", "fwd", "send_act", "recv_grad", "bwd", "send_grad", "reduce_grads",
    "optim_step"};

const char *pt_ins_name(pt_ins_kind k)
{
    return (unsigned)k < PT_INS_COUNT ? pt_ins_names[k] : "?";
}

/* ---- Generators --------------------------------------------------------------- */

/* What a generator writes one rank's program with. The program's array is sized
 * for the largest program a schedule can produce (pt_sched_capacity), so emitting
 * never fails. */
typedef struct {
    pt_prog *prog;
    int rank, pp, vp, n;
    int *bwd_left; /* [vp]: backwards of each chunk not yet emitted */
} pt_sched_gen;

/* Every (mb, chunk) needs at most recv, compute and send in each direction; then
 * one reduction per chunk and the optimizer step. */
static int pt_sched_capacity(int vp, int n)
{
    return 6 * n * vp + vp + 1;
}

static void pt_sched_emit(pt_sched_gen *g, pt_ins_kind kind, int mb, int chunk, int peer)
{
    g->prog->ins[g->prog->n++] = (pt_ins){.kind = kind, .mb = mb, .chunk = chunk,
                                          .peer = peer};
}

/* Forward of (mb, chunk) with the receive of its input and the send of its output. */
static void pt_sched_fwd(pt_sched_gen *g, int mb, int chunk)
{
    int vs = chunk * g->pp + g->rank, last = g->pp * g->vp - 1;
    if (vs > 0)
        pt_sched_emit(g, PT_INS_RECV_ACT, mb, chunk, (vs - 1) % g->pp);
    pt_sched_emit(g, PT_INS_FWD, mb, chunk, -1);
    if (vs < last)
        pt_sched_emit(g, PT_INS_SEND_ACT, mb, chunk, (vs + 1) % g->pp);
}

/* Backward of (mb, chunk) with its gradient transfers; after the chunk's last
 * backward its gradients are final and their reduction can finish. */
static void pt_sched_bwd(pt_sched_gen *g, int mb, int chunk)
{
    int vs = chunk * g->pp + g->rank, last = g->pp * g->vp - 1;
    if (vs < last)
        pt_sched_emit(g, PT_INS_RECV_GRAD, mb, chunk, (vs + 1) % g->pp);
    pt_sched_emit(g, PT_INS_BWD, mb, chunk, -1);
    if (vs > 0)
        pt_sched_emit(g, PT_INS_SEND_GRAD, mb, chunk, (vs - 1) % g->pp);
    if (--g->bwd_left[chunk] == 0)
        pt_sched_emit(g, PT_INS_REDUCE_GRADS, -1, chunk, -1);
}

/* GPipe: every forward, then every backward, micro-batches in order. */
static void pt_sched_afab(pt_sched_gen *g)
{
    for (int mb = 0; mb < g->n; mb++)
        pt_sched_fwd(g, mb, 0);
    for (int mb = 0; mb < g->n; mb++)
        pt_sched_bwd(g, mb, 0);
}

/* PipeDream-Flush: rank r runs p - r - 1 warm-up forwards, then alternates one
 * forward with the backward of its oldest micro-batch, then drains the backwards. */
static void pt_sched_1f1b(pt_sched_gen *g)
{
    int warmup = g->pp - g->rank - 1 < g->n ? g->pp - g->rank - 1 : g->n;
    for (int mb = 0; mb < warmup; mb++)
        pt_sched_fwd(g, mb, 0);
    for (int i = 0; i < g->n - warmup; i++) {
        pt_sched_fwd(g, warmup + i, 0);
        pt_sched_bwd(g, i, 0);
    }
    for (int mb = g->n - warmup; mb < g->n; mb++)
        pt_sched_bwd(g, mb, 0);
}

/* Micro-step k of the interleaved schedule runs p micro-batches of one chunk in
 * turn before moving to the next chunk (Megatron-LM's get_model_chunk_id); the
 * backward steps walk the chunks in reverse order. */
static int pt_sched_step_mb(const pt_sched_gen *g, int k)
{
    return k / (g->pp * g->vp) * g->pp + k % g->pp;
}

static int pt_sched_step_chunk(const pt_sched_gen *g, int k, bool forward)
{
    int c = k / g->pp % g->vp;
    return forward ? c : g->vp - 1 - c;
}

static void pt_sched_step(pt_sched_gen *g, int k, bool forward)
{
    int mb = pt_sched_step_mb(g, k), chunk = pt_sched_step_chunk(g, k, forward);
    if (forward)
        pt_sched_fwd(g, mb, chunk);
    else
        pt_sched_bwd(g, mb, chunk);
}

/* Interleaved 1F1B: (p - r - 1)·2 + (vp - 1)·p warm-up forward micro-steps, then
 * one forward and one backward micro-step in turn, then the remaining backwards. */
static void pt_sched_interleaved(pt_sched_gen *g)
{
    int total = g->n * g->vp;
    int warmup = (g->pp - g->rank - 1) * 2 + (g->vp - 1) * g->pp;
    if (warmup > total)
        warmup = total;
    for (int k = 0; k < warmup; k++)
        pt_sched_step(g, k, true);
    for (int i = 0; i < total - warmup; i++) {
        pt_sched_step(g, warmup + i, true);
        pt_sched_step(g, i, false);
    }
    for (int k = total - warmup; k < total; k++)
        pt_sched_step(g, k, false);
}

/* ---- Building ----------------------------------------------------------------- */

/* Programs beyond PT_MAX_SCHED_PAIRS (mb, chunk) pairs over all ranks are refused (a
 * layout rule, schedule_size, keeps the search from them). */
#define PT_SCHED_MAX_PAIRS ((long)PT_MAX_SCHED_PAIRS)

static int pt_sched_check_args(pt_schedule kind, int pp, int vp, int n, pt_err *err)
{
    if ((unsigned)kind >= PT_SCHED_COUNT)
        return pt_err_set(err, "unknown schedule kind %d", (int)kind);
    const char *name = pt_schedule_name(kind);
    if (pp < 1)
        return pt_err_set(err, "schedule %s: pp (%d) must be at least 1", name, pp);
    if (vp < 1)
        return pt_err_set(err, "schedule %s: vp (%d) must be at least 1", name, vp);
    if (n < 1)
        return pt_err_set(err, "schedule %s: n_micro (%d) must be at least 1", name, n);
    if ((long)pp * vp * n > PT_SCHED_MAX_PAIRS)
        return pt_err_set(err, "schedule %s: pp·vp·n_micro (%ld) exceeds %ld", name,
                          (long)pp * vp * n, PT_SCHED_MAX_PAIRS);
    if (kind != PT_SCHED_INTERLEAVED) {
        if (vp != 1)
            return pt_err_set(err, "schedule %s: vp (%d) must be 1 (only interleaved runs "
                              "several chunks per rank)", name, vp);
        return 0;
    }
    if (vp < 2)
        return pt_err_set(err, "schedule %s: vp (%d) must be greater than 1", name, vp);
    if (pp < 2)
        return pt_err_set(err, "schedule %s: pp (%d) must be greater than 1", name, pp);
    if (n % pp != 0)
        return pt_err_set(err, "schedule %s: n_micro (%d) is not a multiple of pp (%d)",
                          name, n, pp);
    return 0;
}

/* Writes rank `rank`'s program with the generator of `kind`. */
static int pt_sched_gen_rank(pt_sched *s, int rank, int *bwd_left)
{
    pt_prog *prog = &s->prog[rank];
    prog->ins = malloc(sizeof *prog->ins * (size_t)pt_sched_capacity(s->vp, s->n_micro));
    if (!prog->ins)
        return -1;
    for (int c = 0; c < s->vp; c++)
        bwd_left[c] = s->n_micro;
    pt_sched_gen g = {.prog = prog, .rank = rank, .pp = s->pp, .vp = s->vp,
                      .n = s->n_micro, .bwd_left = bwd_left};
    if (s->kind == PT_SCHED_AFAB)
        pt_sched_afab(&g);
    else if (s->kind == PT_SCHED_1F1B)
        pt_sched_1f1b(&g);
    else
        pt_sched_interleaved(&g);
    pt_sched_emit(&g, PT_INS_OPTIM_STEP, -1, -1, -1);
    return 0;
}

int pt_sched_build(pt_schedule kind, int pp, int vp, int n_micro, pt_sched *out,
                   pt_err *err)
{
    *out = (pt_sched){.kind = kind, .pp = pp, .vp = vp, .n_micro = n_micro};
    if (pt_sched_check_args(kind, pp, vp, n_micro, err))
        return -1;
    /* Sizes are positive here; the unsigned casts tell the compiler so. */
    out->prog = calloc((unsigned)pp, sizeof *out->prog);
    int *bwd_left = malloc(sizeof *bwd_left * (unsigned)vp);
    int rc = out->prog && bwd_left ? 0 : -1;
    for (int r = 0; rc == 0 && r < pp; r++)
        rc = pt_sched_gen_rank(out, r, bwd_left);
    free(bwd_left);
    if (rc) {
        pt_sched_free(out);
        return pt_err_set(err, "schedule %s: out of memory", pt_schedule_name(kind));
    }
    return 0;
}

void pt_sched_free(pt_sched *s)
{
    if (!s)
        return;
    for (int r = 0; s->prog && r < s->pp; r++)
        free(s->prog[r].ins);
    free(s->prog);
    s->prog = NULL;
}

/* ---- Peak activations in flight ----------------------------------------------- */

int pt_sched_peak_in_flight(const pt_sched *s, int rank)
{
    return pt_sched_peak_in_flight_chunk(s, rank, -1);
}

int pt_sched_peak_in_flight_chunk(const pt_sched *s, int rank, int chunk)
{
    if (!s || !s->prog || rank < 0 || rank >= s->pp)
        return -1;
    int now = 0, peak = 0;
    const pt_prog *p = &s->prog[rank];
    for (int i = 0; i < p->n; i++) {
        if (chunk >= 0 && p->ins[i].chunk != chunk)
            continue;
        now += p->ins[i].kind == PT_INS_FWD;
        now -= p->ins[i].kind == PT_INS_BWD;
        if (now > peak)
            peak = now;
    }
    return peak;
}

/* ---- Checking ----------------------------------------------------------------- */

/* Instructions of kinds below PT_SCHED_PAIR_KINDS belong to one (mb, chunk); the
 * checker keeps each one's position in the rank's program. Relies on pt_ins_kind
 * listing the six of them first. */
#define PT_SCHED_PAIR_KINDS (PT_INS_SEND_GRAD + 1)

typedef struct {
    const pt_sched *s;
    int V;        /* virtual stages, p·vp */
    int *pos;     /* [pp][PT_SCHED_PAIR_KINDS][n][vp]: index in the program, or -1 */
    int *reduce;  /* [pp][vp]: index of each chunk's REDUCE_GRADS, or -1 */
    pt_err *err;
} pt_sched_chk;

static int *pt_sched_pos(const pt_sched_chk *k, int rank, int kind, int mb, int chunk)
{
    const pt_sched *s = k->s;
    return &k->pos[(((size_t)rank * PT_SCHED_PAIR_KINDS + (size_t)kind) * (size_t)s->n_micro +
                    (size_t)mb) * (size_t)s->vp + (size_t)chunk];
}

/* "rank 1 ins 4 (send_act mb 0 chunk 1 peer 0)": how every error names an
 * instruction. */
static const char *pt_sched_desc(const pt_sched *s, int rank, int i, char *buf, size_t n)
{
    const pt_ins *in = &s->prog[rank].ins[i];
    int len = snprintf(buf, n, "rank %d ins %d (%s mb %d chunk %d", rank, i,
                       pt_ins_name(in->kind), in->mb, in->chunk);
    if (len >= 0 && (size_t)len < n && in->peer >= 0)
        len += snprintf(buf + len, n - (size_t)len, " peer %d", in->peer);
    if (len >= 0 && (size_t)len < n - 1)
        snprintf(buf + len, n - (size_t)len, ")");
    return buf;
}

#define PT_SCHED_DESC(k, r, i) pt_sched_desc((k)->s, (r), (i), (char[96]){0}, 96)

/* The peer a transfer of virtual stage vs must name, or -1 when the stage has no
 * such transfer (nothing before stage 0, nothing after stage V-1). */
static int pt_sched_want_peer(const pt_sched_chk *k, pt_ins_kind kind, int vs)
{
    bool from_prev = kind == PT_INS_RECV_ACT || kind == PT_INS_SEND_GRAD;
    if (from_prev)
        return vs > 0 ? (vs - 1) % k->s->pp : -1;
    return vs < k->V - 1 ? (vs + 1) % k->s->pp : -1;
}

static bool pt_sched_is_comm(pt_ins_kind kind)
{
    return kind == PT_INS_RECV_ACT || kind == PT_INS_SEND_ACT || kind == PT_INS_RECV_GRAD ||
           kind == PT_INS_SEND_GRAD;
}

/* Fields of an instruction that belongs to one (mb, chunk): ranges and peer. */
static int pt_sched_chk_pair(pt_sched_chk *k, int r, int i, const pt_ins *in)
{
    const pt_sched *s = k->s;
    if (in->mb < 0 || in->mb >= s->n_micro)
        return pt_err_set(k->err, "%s: micro-batch outside 0..%d", PT_SCHED_DESC(k, r, i),
                          s->n_micro - 1);
    if (in->chunk < 0 || in->chunk >= s->vp)
        return pt_err_set(k->err, "%s: chunk outside 0..%d", PT_SCHED_DESC(k, r, i),
                          s->vp - 1);
    int vs = in->chunk * s->pp + r;
    int want = pt_sched_is_comm(in->kind) ? pt_sched_want_peer(k, in->kind, vs) : -1;
    if (pt_sched_is_comm(in->kind) && want < 0)
        return pt_err_set(k->err, "%s: virtual stage %d has no such transfer",
                          PT_SCHED_DESC(k, r, i), vs);
    if (in->peer != want)
        return pt_err_set(k->err, "%s: peer should be %d", PT_SCHED_DESC(k, r, i), want);
    int *slot = pt_sched_pos(k, r, in->kind, in->mb, in->chunk);
    if (*slot >= 0)
        return pt_err_set(k->err, "%s: duplicate of ins %d", PT_SCHED_DESC(k, r, i), *slot);
    *slot = i;
    return 0;
}

/* Fields of REDUCE_GRADS and OPTIM_STEP. */
static int pt_sched_chk_step(pt_sched_chk *k, int r, int i, const pt_ins *in)
{
    const pt_sched *s = k->s;
    bool optim = in->kind == PT_INS_OPTIM_STEP;
    bool chunk_ok = optim ? in->chunk == -1 : in->chunk >= 0 && in->chunk < s->vp;
    if (in->mb != -1 || in->peer != -1 || !chunk_ok)
        return pt_err_set(k->err, "%s: wants mb -1, peer -1 and %s", PT_SCHED_DESC(k, r, i),
                          optim ? "chunk -1" : "a chunk of this rank");
    if (optim && i != s->prog[r].n - 1)
        return pt_err_set(k->err, "%s: optim_step must be the last instruction",
                          PT_SCHED_DESC(k, r, i));
    if (optim)
        return 0;
    int *slot = &k->reduce[(size_t)r * (size_t)s->vp + (size_t)in->chunk];
    if (*slot >= 0)
        return pt_err_set(k->err, "%s: duplicate of ins %d", PT_SCHED_DESC(k, r, i), *slot);
    *slot = i;
    return 0;
}

/* Every instruction's fields, recording where each one is. */
static int pt_sched_chk_fields(pt_sched_chk *k)
{
    const pt_sched *s = k->s;
    for (int r = 0; r < s->pp; r++) {
        const pt_prog *p = &s->prog[r];
        for (int i = 0; i < p->n; i++) {
            const pt_ins *in = &p->ins[i];
            if ((unsigned)in->kind >= PT_INS_COUNT)
                return pt_err_set(k->err, "rank %d ins %d: unknown instruction kind %d", r,
                                  i, (int)in->kind);
            int rc = in->kind < PT_SCHED_PAIR_KINDS ? pt_sched_chk_pair(k, r, i, in)
                                                    : pt_sched_chk_step(k, r, i, in);
            if (rc)
                return rc;
        }
        if (p->n == 0 || p->ins[p->n - 1].kind != PT_INS_OPTIM_STEP)
            return pt_err_set(k->err, "rank %d: program does not end with optim_step", r);
    }
    return 0;
}

/* (a) one forward and one backward of each (mb, chunk), the forward first. */
static int pt_sched_chk_pairs(const pt_sched_chk *k, int r, int mb, int c)
{
    int f = *pt_sched_pos(k, r, PT_INS_FWD, mb, c), b = *pt_sched_pos(k, r, PT_INS_BWD, mb, c);
    if (f < 0 || b < 0)
        return pt_err_set(k->err, "rank %d: %s of mb %d chunk %d is missing", r,
                          f < 0 ? "fwd" : "bwd", mb, c);
    if (b < f)
        return pt_err_set(k->err, "%s: comes before its fwd (ins %d)", PT_SCHED_DESC(k, r, b),
                          f);
    return 0;
}

/* (b) the transfer at `kind` of (mb, chunk) on rank r, if present, has its partner
 * on the peer: a send the receive of the next (activations) or previous (gradients)
 * virtual stage, a receive the matching send. */
static int pt_sched_chk_partner(const pt_sched_chk *k, int r, pt_ins_kind kind, int mb,
                                int c)
{
    static const pt_ins_kind partner[PT_SCHED_PAIR_KINDS] = {
        [PT_INS_RECV_ACT] = PT_INS_SEND_ACT, [PT_INS_SEND_ACT] = PT_INS_RECV_ACT,
        [PT_INS_RECV_GRAD] = PT_INS_SEND_GRAD, [PT_INS_SEND_GRAD] = PT_INS_RECV_GRAD};
    int i = *pt_sched_pos(k, r, kind, mb, c);
    if (i < 0)
        return 0;
    int vs = c * k->s->pp + r;
    bool to_prev = kind == PT_INS_RECV_ACT || kind == PT_INS_SEND_GRAD;
    int other = to_prev ? vs - 1 : vs + 1, peer = other % k->s->pp;
    if (*pt_sched_pos(k, peer, partner[kind], mb, other / k->s->pp) < 0)
        return pt_err_set(k->err, "%s: no matching %s on rank %d", PT_SCHED_DESC(k, r, i),
                          pt_ins_name(partner[kind]), peer);
    return 0;
}

/* (d) the transfer `kind` exists and sits on the right side of its compute
 * instruction (`compute` at index ci): receives before, sends after. */
static int pt_sched_chk_order(const pt_sched_chk *k, int r, pt_ins_kind kind, int mb, int c,
                              int ci)
{
    int i = *pt_sched_pos(k, r, kind, mb, c);
    bool recv = kind == PT_INS_RECV_ACT || kind == PT_INS_RECV_GRAD;
    if (i < 0)
        return pt_err_set(k->err, "%s: has no %s", PT_SCHED_DESC(k, r, ci), pt_ins_name(kind));
    if (recv ? i > ci : i < ci)
        return pt_err_set(k->err, "%s: must come %s %s", PT_SCHED_DESC(k, r, i),
                          recv ? "before" : "after", PT_SCHED_DESC(k, r, ci));
    return 0;
}

/* (d) data dependencies of (mb, chunk): its input arrives before the forward and
 * its output leaves after it; likewise for the backward. Together with (b) and the
 * receive rule, FWD(mb, vs) then follows FWD(mb, vs-1) and BWD(mb, vs) follows
 * BWD(mb, vs+1) on every execution, not only on the one (c) tries. */
static int pt_sched_chk_deps(const pt_sched_chk *k, int r, int mb, int c)
{
    int vs = c * k->s->pp + r;
    int f = *pt_sched_pos(k, r, PT_INS_FWD, mb, c), b = *pt_sched_pos(k, r, PT_INS_BWD, mb, c);
    if (vs > 0 && (pt_sched_chk_order(k, r, PT_INS_RECV_ACT, mb, c, f) ||
                   pt_sched_chk_order(k, r, PT_INS_SEND_GRAD, mb, c, b)))
        return -1;
    if (vs < k->V - 1 && (pt_sched_chk_order(k, r, PT_INS_SEND_ACT, mb, c, f) ||
                          pt_sched_chk_order(k, r, PT_INS_RECV_GRAD, mb, c, b)))
        return -1;
    return 0;
}

/* (a), (b) and (d) for every (mb, chunk) of every rank, in that order. */
static int pt_sched_chk_all_pairs(const pt_sched_chk *k)
{
    const pt_sched *s = k->s;
    for (int r = 0; r < s->pp; r++)
        for (int mb = 0; mb < s->n_micro; mb++)
            for (int c = 0; c < s->vp; c++)
                if (pt_sched_chk_pairs(k, r, mb, c))
                    return -1;
    for (int r = 0; r < s->pp; r++)
        for (int mb = 0; mb < s->n_micro; mb++)
            for (int c = 0; c < s->vp; c++)
                for (int kind = 0; kind < PT_SCHED_PAIR_KINDS; kind++)
                    if (pt_sched_is_comm((pt_ins_kind)kind) &&
                        pt_sched_chk_partner(k, r, (pt_ins_kind)kind, mb, c))
                        return -1;
    for (int r = 0; r < s->pp; r++)
        for (int mb = 0; mb < s->n_micro; mb++)
            for (int c = 0; c < s->vp; c++)
                if (pt_sched_chk_deps(k, r, mb, c))
                    return -1;
    return 0;
}

/* (e) each chunk's REDUCE_GRADS after all of its backwards (OPTIM_STEP being last
 * was checked with the fields). */
static int pt_sched_chk_reduce(const pt_sched_chk *k)
{
    const pt_sched *s = k->s;
    for (int r = 0; r < s->pp; r++) {
        for (int c = 0; c < s->vp; c++) {
            int red = k->reduce[(size_t)r * (size_t)s->vp + (size_t)c];
            if (red < 0)
                return pt_err_set(k->err, "rank %d: reduce_grads of chunk %d is missing", r, c);
            for (int mb = 0; mb < s->n_micro; mb++) {
                int b = *pt_sched_pos(k, r, PT_INS_BWD, mb, c);
                if (b > red)
                    return pt_err_set(k->err, "%s: must come after %s",
                                      PT_SCHED_DESC(k, r, red), PT_SCHED_DESC(k, r, b));
            }
        }
    }
    return 0;
}

/* The state of (c)'s execution: where each rank is, and which transfers have been
 * posted, by direction (0 activations, 1 gradients), micro-batch and receiving
 * virtual stage. */
typedef struct {
    const pt_sched_chk *k;
    int *pc;       /* [pp] */
    bool *posted;  /* [2][n][V] */
} pt_sched_exec;

static bool *pt_sched_posted(const pt_sched_exec *x, int dir, int mb, int vs)
{
    return &x->posted[((size_t)dir * (size_t)x->k->s->n_micro + (size_t)mb) *
                      (size_t)x->k->V + (size_t)vs];
}

/* Runs rank r's next instruction if it is not a receive still waiting for its send. */
static bool pt_sched_exec_one(pt_sched_exec *x, int r)
{
    const pt_sched *s = x->k->s;
    if (x->pc[r] >= s->prog[r].n)
        return false;
    const pt_ins *in = &s->prog[r].ins[x->pc[r]];
    int vs = in->chunk * s->pp + r;
    if (in->kind == PT_INS_RECV_ACT && !*pt_sched_posted(x, 0, in->mb, vs))
        return false;
    if (in->kind == PT_INS_RECV_GRAD && !*pt_sched_posted(x, 1, in->mb, vs))
        return false;
    if (in->kind == PT_INS_SEND_ACT)
        *pt_sched_posted(x, 0, in->mb, vs + 1) = true;
    if (in->kind == PT_INS_SEND_GRAD)
        *pt_sched_posted(x, 1, in->mb, vs - 1) = true;
    x->pc[r]++;
    return true;
}

/* The deadlock error: every unfinished rank and the receive it waits at. */
static int pt_sched_deadlock(const pt_sched_exec *x)
{
    const pt_sched *s = x->k->s;
    char msg[sizeof x->k->err->msg];
    size_t len = (size_t)snprintf(msg, sizeof msg, "deadlock:");
    for (int r = 0; r < s->pp && len < sizeof msg; r++) {
        if (x->pc[r] >= s->prog[r].n)
            continue;
        int n = snprintf(msg + len, sizeof msg - len, " %s waits for a send never posted;",
                         PT_SCHED_DESC(x->k, r, x->pc[r]));
        len += n > 0 ? (size_t)n : 0;
    }
    return pt_err_set(x->k->err, "%s", msg);
}

/* (c) runs all programs round-robin, each rank as far as it can, until all have
 * finished or none can move. */
static int pt_sched_chk_run(const pt_sched_chk *k)
{
    const pt_sched *s = k->s;
    pt_sched_exec x = {
        .k = k,
        .pc = calloc((size_t)s->pp, sizeof *x.pc),
        .posted = calloc(2 * (size_t)s->n_micro * (size_t)k->V, sizeof *x.posted),
    };
    int rc = x.pc && x.posted ? 1 : pt_err_set(k->err, "schedule check: out of memory");
    while (rc > 0) {
        bool moved = false, done = true;
        for (int r = 0; r < s->pp; r++) {
            while (pt_sched_exec_one(&x, r))
                moved = true;
            done = done && x.pc[r] >= s->prog[r].n;
        }
        rc = done ? 0 : moved ? 1 : pt_sched_deadlock(&x);
    }
    free(x.pc);
    free(x.posted);
    return rc;
}

static int pt_sched_chk_shape(const pt_sched *s, pt_err *err)
{
    if (!s || !s->prog)
        return pt_err_set(err, "schedule check: no programs");
    if (s->pp < 1 || s->vp < 1 || s->n_micro < 1 ||
        (long)s->pp * s->vp * s->n_micro > PT_SCHED_MAX_PAIRS)
        return pt_err_set(err, "schedule check: bad sizes pp %d vp %d n_micro %d", s->pp,
                          s->vp, s->n_micro);
    for (int r = 0; r < s->pp; r++)
        if (s->prog[r].n < 0 || (s->prog[r].n > 0 && !s->prog[r].ins))
            return pt_err_set(err, "rank %d: program has no instructions array", r);
    return 0;
}

int pt_sched_check(const pt_sched *s, pt_err *err)
{
    if (pt_sched_chk_shape(s, err))
        return -1;
    size_t pairs = (size_t)s->pp * (size_t)s->n_micro * (size_t)s->vp;
    pt_sched_chk k = {.s = s, .V = s->pp * s->vp, .err = err,
                      .pos = malloc(sizeof *k.pos * pairs * PT_SCHED_PAIR_KINDS),
                      .reduce = malloc(sizeof *k.reduce * (size_t)s->pp * (size_t)s->vp)};
    int rc = k.pos && k.reduce ? 0 : pt_err_set(err, "schedule check: out of memory");
    if (rc == 0) {
        memset(k.pos, 0xff, sizeof *k.pos * pairs * PT_SCHED_PAIR_KINDS); /* all -1 */
        memset(k.reduce, 0xff, sizeof *k.reduce * (size_t)s->pp * (size_t)s->vp);
        rc = pt_sched_chk_fields(&k);
    }
    if (rc == 0)
        rc = pt_sched_chk_all_pairs(&k);
    if (rc == 0)
        rc = pt_sched_chk_reduce(&k);
    if (rc == 0)
        rc = pt_sched_chk_run(&k);
    free(k.pos);
    free(k.reduce);
    return rc;
}
