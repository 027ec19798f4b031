/*
 * The schedule programs' pipeline transfers as a runtime issues them to NCCL, replayed
 * under NCCL's blocking semantics to prove that no issue policy the runtime uses can
 * deadlock a schedule (pt_sched_check_nccl). pt_sched_check proves the programs under
 * MPI's rules, where a send never waits; NCCL's does: ncclSend and ncclRecv "block
 * the GPU" until the peer's matching call runs, except calls fused in one
 * ncclGroupStart/End, which progress together (NCCL user guide, "Point-to-point
 * communication" and the ncclSend/ncclRecv API pages), and NCCL has no tags, so the
 * k-th send from rank a to rank b meets the k-th receive that b posts from a.
 *
 * The model. Each rank has a kernel stream K and, under PT_P2P_SEND_STREAM, a send
 * stream S; each stream is a FIFO of operations. Compute never waits for another
 * rank, so only transfers and the orderings between streams are modelled. An
 * operation is *reached* when it is at the head of its stream and the event it waits
 * for (on the rank's other stream) has happened; a transfer happens once the send's
 * and the receive's operations are both reached (each executes, blocking its stream,
 * until the other does); an operation is done when all its transfers have happened,
 * and then its stream moves on. Every condition only ever turns true, so the set of
 * operations that complete is the same in every interleaving: running each stream as
 * far as it can, round after round until nothing moves, decides the question.
 *
 * What the host does adds nothing: the runtime's host waits (for the kernel stream
 * after a backward, for a loss) come after operations the host has already issued,
 * and every operation issued after such a wait is ordered on the kernel stream after
 * it anyway (S waits for an event recorded on K); the hosts issue everything else
 * without waiting for a peer. Collectives, and the transfers of the context-parallel
 * ring inside a forward or backward, are not in the programs and not modelled.
 */
#include "schedule.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const pt_p2p_policy_names[PT_P2P_POLICY_COUNT] = {
    "grouped", "send-stream", "serial"};

const char *pt_p2p_policy_name(pt_p2p_policy p)
{
    return (unsigned)p < PT_P2P_POLICY_COUNT ? pt_p2p_policy_names[p] : "?";
}

/* ---- Operations -------------------------------------------------------------------- */

enum { PT_NK = 0, PT_NS = 1 }; /* the kernel stream, the send stream */

/* One operation on a stream: the transfers [first, first + n) of the rank's member
 * list (none: a send's copy), and the event it waits for on the rank's other stream:
 * that stream's operations before index `after` must be done (0: none). */
typedef struct {
    int first, n;
    int after;
    int ins;       /* the instruction that issued it (a group: its receive, or the
                      optimizer step that issues the sends left) */
} pt_nccl_op;

typedef struct {
    pt_nccl_op *op[2];  /* [stream] */
    int n_op[2];
    int head[2];        /* ops before head are done */
    int *member;        /* [prog n]: instruction indices of the transfers of the ops */
    int n_member;
    int *op_of;         /* [prog n]: for a send or receive, its op index */
    int *stream_of;     /* [prog n]: and that op's stream */
    int *match;         /* [prog n]: the peer's instruction it meets (by NCCL's order) */
    bool *moved;        /* [prog n]: the transfer has happened */
} pt_nccl_rank;

typedef struct {
    const pt_sched *s;
    pt_p2p_issue how;
    pt_nccl_rank *rk;   /* [pp] */
    int *queue;         /* [longest program]: PT_P2P_GROUPED's sends waiting */
    pt_err *err;
} pt_nccl_model;

static bool pt_nccl_is_send(pt_ins_kind k)
{
    return k == PT_INS_SEND_ACT || k == PT_INS_SEND_GRAD;
}

static bool pt_nccl_is_recv(pt_ins_kind k)
{
    return k == PT_INS_RECV_ACT || k == PT_INS_RECV_GRAD;
}

/* "ins 4 (send_act mb 0 chunk 1 peer 0)" */
static const char *pt_nccl_desc(const pt_sched *s, int r, int i, char *buf, size_t n)
{
    const pt_ins *in = &s->prog[r].ins[i];
    snprintf(buf, n, "ins %d (%s mb %d chunk %d peer %d)", i, pt_ins_name(in->kind), in->mb,
             in->chunk, in->peer);
    return buf;
}

#define PT_NCCL_DESC(m, r, i) pt_nccl_desc((m)->s, (r), (i), (char[80]){0}, 80)

static pt_nccl_op *pt_nccl_push(pt_nccl_rank *k, int stream, int ins, int after)
{
    pt_nccl_op *o = &k->op[stream][k->n_op[stream]++];
    *o = (pt_nccl_op){.first = k->n_member, .n = 0, .after = after, .ins = ins};
    return o;
}

static void pt_nccl_add(pt_nccl_rank *k, int stream, pt_nccl_op *o, int ins)
{
    k->member[k->n_member++] = ins;
    o->n++;
    k->op_of[ins] = (int)(o - k->op[stream]);
    k->stream_of[ins] = stream;
}

/* PT_P2P_GROUPED: sends wait in a queue (`queue`, room for the program); a receive
 * takes them into its group; what is left goes as a group of its own at the end
 * (pt_comm_wait_sends before the optimizer step). */
static void pt_nccl_build_grouped(pt_nccl_rank *k, const pt_prog *p, int *queue)
{
    int queued = 0;
    for (int i = 0; i < p->n; i++) {
        pt_ins_kind kind = p->ins[i].kind;
        if (pt_nccl_is_send(kind)) {
            queue[queued++] = i;
        } else if (pt_nccl_is_recv(kind) || (kind == PT_INS_OPTIM_STEP && queued > 0)) {
            pt_nccl_op *o = pt_nccl_push(k, PT_NK, i, 0);
            for (int j = 0; j < queued; j++)
                pt_nccl_add(k, PT_NK, o, queue[j]);
            if (pt_nccl_is_recv(kind))
                pt_nccl_add(k, PT_NK, o, i);
            queued = 0;
        }
    }
}

/* PT_P2P_SEND_STREAM: a send's copy into a slot on K (after the slot's previous send
 * completed, when slots are limited), then the send on S after an event recorded on K
 * after that copy; receives on K. */
static void pt_nccl_build_send_stream(pt_nccl_rank *k, const pt_prog *p, int slots)
{
    int sent = 0;
    for (int i = 0; i < p->n; i++) {
        pt_ins_kind kind = p->ins[i].kind;
        if (pt_nccl_is_send(kind)) {
            /* S op `sent - slots` used this slot last: done means S's head passed it */
            pt_nccl_push(k, PT_NK, i, slots > 0 && sent >= slots ? sent - slots + 1 : 0);
            pt_nccl_op *o = pt_nccl_push(k, PT_NS, i, k->n_op[PT_NK]);
            pt_nccl_add(k, PT_NS, o, i);
            sent++;
        } else if (pt_nccl_is_recv(kind)) {
            pt_nccl_add(k, PT_NK, pt_nccl_push(k, PT_NK, i, 0), i);
        }
    }
}

/* PT_P2P_SERIAL: every send and receive its own operation, in program order, on one
 * FIFO (NCCL serialises a communicator's operations across streams). */
static void pt_nccl_build_serial(pt_nccl_rank *k, const pt_prog *p)
{
    for (int i = 0; i < p->n; i++)
        if (pt_nccl_is_send(p->ins[i].kind) || pt_nccl_is_recv(p->ins[i].kind))
            pt_nccl_add(k, PT_NK, pt_nccl_push(k, PT_NK, i, 0), i);
}

/* ---- Matching ----------------------------------------------------------------------- */

/* The transfer an instruction moves: direction (0 activations, 1 gradients), the
 * micro-batch and the receiving virtual stage. Both sides must agree. */
static void pt_nccl_xfer(const pt_sched *s, int r, const pt_ins *in, int key[3])
{
    int vs = in->chunk * s->pp + r;
    bool act = in->kind == PT_INS_SEND_ACT || in->kind == PT_INS_RECV_ACT;
    key[0] = !act;
    key[1] = in->mb;
    key[2] = in->kind == PT_INS_SEND_ACT ? vs + 1 : in->kind == PT_INS_SEND_GRAD ? vs - 1 : vs;
}

/* Pairs the k-th send from a to b with the k-th receive b posts from a, as NCCL does
 * (posting order is program order under both policies), and checks that they move
 * the same data. */
static int pt_nccl_match(pt_nccl_model *m, int a, int b)
{
    const pt_sched *s = m->s;
    const pt_prog *pa = &s->prog[a], *pb = &s->prog[b];
    int j = 0;
    for (int i = 0; i < pa->n; i++) {
        if (!pt_nccl_is_send(pa->ins[i].kind) || pa->ins[i].peer != b)
            continue;
        while (j < pb->n && !(pt_nccl_is_recv(pb->ins[j].kind) && pb->ins[j].peer == a))
            j++;
        if (j == pb->n)
            return pt_err_set(m->err, "rank %d %s: rank %d posts no receive for it", a,
                              PT_NCCL_DESC(m, a, i), b);
        int ks[3], kr[3];
        pt_nccl_xfer(s, a, &pa->ins[i], ks);
        pt_nccl_xfer(s, b, &pb->ins[j], kr);
        if (memcmp(ks, kr, sizeof ks) != 0)
            return pt_err_set(m->err, "rank %d %s would meet rank %d %s: NCCL has no tags, so "
                              "receives must be posted in the order of the sends", a,
                              PT_NCCL_DESC(m, a, i), b, PT_NCCL_DESC(m, b, j));
        m->rk[a].match[i] = j;
        m->rk[b].match[j] = i;
        j++;
    }
    return 0;
}

/* ---- Running ------------------------------------------------------------------------ */

static bool pt_nccl_reached(const pt_nccl_model *m, int r, int stream, int op)
{
    const pt_nccl_rank *k = &m->rk[r];
    return k->head[stream] == op && k->head[!stream] >= k->op[stream][op].after;
}

/* Moves rank r's stream as far as it can; true when it moved. */
static bool pt_nccl_step(pt_nccl_model *m, int r, int stream)
{
    pt_nccl_rank *k = &m->rk[r];
    bool moved = false;
    while (k->head[stream] < k->n_op[stream] &&
           pt_nccl_reached(m, r, stream, k->head[stream])) {
        const pt_nccl_op *o = &k->op[stream][k->head[stream]];
        bool all = true;
        for (int t = o->first; t < o->first + o->n; t++) {
            int i = k->member[t];
            if (k->moved[i])
                continue;
            int peer = m->s->prog[r].ins[i].peer, j = k->match[i];
            pt_nccl_rank *p = &m->rk[peer];
            if (pt_nccl_reached(m, peer, p->stream_of[j], p->op_of[j]))
                k->moved[i] = p->moved[j] = true;
            else
                all = false;
        }
        if (!all)
            break;
        k->head[stream]++;
        moved = true;
    }
    return moved;
}

/* Appends to msg (cap bytes, *len used) as snprintf would; stops at the end. */
static void pt_nccl_cat(char *msg, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void pt_nccl_cat(char *msg, size_t cap, size_t *len, const char *fmt, ...)
{
    if (*len >= cap - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(msg + *len, cap - *len, fmt, ap);
    va_end(ap);
    *len = w < 0 ? *len : *len + (size_t)w < cap - 1 ? *len + (size_t)w : cap - 1;
}

/* The deadlock error: each stream that has not finished, at the operation it is stuck
 * at, and what that waits for: the peer's instruction each of its transfers meets, or
 * the rank's other stream. */
static int pt_nccl_deadlock(const pt_nccl_model *m)
{
    static const char *const stream_name[2] = {"kernel", "send"};
    char msg[sizeof m->err->msg];
    size_t len = 0, cap = sizeof msg;
    msg[0] = '\0';
    pt_nccl_cat(msg, cap, &len, "deadlock (%s):", pt_p2p_policy_name(m->how.policy));
    for (int r = 0; r < m->s->pp; r++) {
        const pt_nccl_rank *k = &m->rk[r];
        for (int st = 0; st < 2; st++) {
            if (k->head[st] >= k->n_op[st])
                continue;
            const pt_nccl_op *o = &k->op[st][k->head[st]];
            pt_nccl_cat(msg, cap, &len, " rank %d %s stream at", r, stream_name[st]);
            if (o->n == 0)
                pt_nccl_cat(msg, cap, &len, " the copy of %s waits for its send stream;",
                            PT_NCCL_DESC(m, r, o->ins));
            else if (k->head[!st] < o->after)
                pt_nccl_cat(msg, cap, &len, " %s waits for its kernel stream;",
                            PT_NCCL_DESC(m, r, o->ins));
            for (int t = o->first; o->n > 0 && k->head[!st] >= o->after && t < o->first + o->n;
                 t++) {
                int i = k->member[t];
                if (!k->moved[i])
                    pt_nccl_cat(msg, cap, &len, " %s waits for rank %d ins %d;",
                                PT_NCCL_DESC(m, r, i), m->s->prog[r].ins[i].peer, k->match[i]);
            }
        }
    }
    return pt_err_set(m->err, "%s", msg);
}

static int pt_nccl_run(pt_nccl_model *m)
{
    for (;;) {
        bool moved = false, done = true;
        for (int r = 0; r < m->s->pp; r++)
            for (int st = 0; st < 2; st++) {
                moved |= pt_nccl_step(m, r, st);
                done = done && m->rk[r].head[st] >= m->rk[r].n_op[st];
            }
        if (done)
            return 0;
        if (!moved)
            return pt_nccl_deadlock(m);
    }
}

/* ---- The check ----------------------------------------------------------------------- */

static int pt_nccl_alloc(pt_nccl_model *m)
{
    const pt_sched *s = m->s;
    m->rk = calloc((size_t)s->pp, sizeof *m->rk);
    int longest = 1;
    for (int r = 0; r < s->pp; r++)
        longest = s->prog[r].n > longest ? s->prog[r].n : longest;
    m->queue = malloc(sizeof *m->queue * (size_t)longest);
    if (!m->rk || !m->queue)
        return -1;
    for (int r = 0; r < s->pp; r++) {
        pt_nccl_rank *k = &m->rk[r];
        size_t n = (size_t)(s->prog[r].n > 0 ? s->prog[r].n : 1);
        k->op[PT_NK] = malloc(sizeof *k->op[PT_NK] * n);
        k->op[PT_NS] = malloc(sizeof *k->op[PT_NS] * n);
        k->member = malloc(sizeof *k->member * n);
        k->op_of = malloc(sizeof *k->op_of * n);
        k->stream_of = malloc(sizeof *k->stream_of * n);
        k->match = malloc(sizeof *k->match * n);
        k->moved = calloc(n, sizeof *k->moved);
        if (!k->op[PT_NK] || !k->op[PT_NS] || !k->member || !k->op_of || !k->stream_of ||
            !k->match || !k->moved)
            return -1;
    }
    return 0;
}

static void pt_nccl_free(pt_nccl_model *m)
{
    for (int r = 0; m->rk && r < m->s->pp; r++) {
        pt_nccl_rank *k = &m->rk[r];
        free(k->op[PT_NK]);
        free(k->op[PT_NS]);
        free(k->member);
        free(k->op_of);
        free(k->stream_of);
        free(k->match);
        free(k->moved);
    }
    free(m->rk);
    free(m->queue);
}

int pt_sched_check_nccl(const pt_sched *s, const pt_p2p_issue *how, pt_err *err)
{
    if ((unsigned)how->policy >= PT_P2P_POLICY_COUNT || how->send_slots < 0)
        return pt_err_set(err, "NCCL schedule check: unknown policy %d or send slots %d",
                          (int)how->policy, how->send_slots);
    if (pt_sched_check(s, err))
        return -1;
    pt_nccl_model m = {.s = s, .how = *how, .err = err};
    int rc = pt_nccl_alloc(&m) ? pt_err_set(err, "NCCL schedule check: out of memory") : 0;
    for (int r = 0; rc == 0 && r < s->pp; r++) {
        if (how->policy == PT_P2P_GROUPED)
            pt_nccl_build_grouped(&m.rk[r], &s->prog[r], m.queue);
        else if (how->policy == PT_P2P_SERIAL)
            pt_nccl_build_serial(&m.rk[r], &s->prog[r]);
        else
            pt_nccl_build_send_stream(&m.rk[r], &s->prog[r], how->send_slots);
    }
    for (int a = 0; rc == 0 && a < s->pp; a++)
        for (int b = 0; rc == 0 && b < s->pp; b++)
            if (a != b)
                rc = pt_nccl_match(&m, a, b);
    if (rc == 0)
        rc = pt_nccl_run(&m);
    pt_nccl_free(&m);
    return rc;
}
