/*
 * Schedule programs (planner/sched.c, sched_nccl.c): the ordered instructions of every
 * pipeline rank under all-forward-all-backward, 1F1B and interleaved 1F1B, their checks
 * and in-flight counts, and how a runtime issues their transfers on NCCL with the check
 * that proves that free of deadlock. Apart from the op lists (step.h), so that the
 * communication layer (comm/comm.h) includes neither the cost tables nor JSON. (Named
 * apart from POSIX's <sched.h>, which pthread.h includes.)
 */
#ifndef PT_PLANNER_SCHEDULE_H
#define PT_PLANNER_SCHEDULE_H

#include <stdint.h>

#include "layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Schedule programs (planner/sched.c) -------------------------------------- */

/* One instruction of a pipeline rank's program. Micro-batches are 0..n_micro-1; a
 * rank holds vp model chunks, chunk c of pipeline rank r being virtual stage c·p + r
 * (Megatron-LM's interleaved assignment; vp = 1: chunk 0 is stage r). Sends are
 * posted without waiting; a receive waits until the matching send has been posted.
 * The simulator and the runtime execute these programs; nothing else describes a
 * training step's order. */
typedef enum {
    PT_INS_RECV_ACT,     /* receive the input activations of (mb, chunk) from `peer` */
    PT_INS_FWD,          /* forward of (mb, chunk) */
    PT_INS_SEND_ACT,     /* send the output activations of (mb, chunk) to `peer` */
    PT_INS_RECV_GRAD,    /* receive the output gradient of (mb, chunk) from `peer` */
    PT_INS_BWD,          /* backward of (mb, chunk) */
    PT_INS_SEND_GRAD,    /* send the input gradient of (mb, chunk) to `peer` */
    PT_INS_REDUCE_GRADS, /* chunk's gradients are final: finish their data-parallel
                            reduction (buckets start during the backward before it) */
    PT_INS_OPTIM_STEP,   /* optimizer step after every reduction */
    PT_INS_COUNT
} pt_ins_kind;
const char *pt_ins_name(pt_ins_kind k);   /* "recv_act", "fwd", ... */

typedef struct {
    pt_ins_kind kind;
    int mb;     /* micro-batch; -1 for REDUCE_GRADS and OPTIM_STEP */
    int chunk;  /* model chunk on this rank, 0..vp-1; -1 for OPTIM_STEP */
    int peer;   /* pipeline rank of a send or receive; -1 otherwise */
} pt_ins;

typedef struct {
    pt_ins *ins;
    int n;
} pt_prog;

typedef struct {
    pt_schedule kind;
    int pp, vp, n_micro;
    pt_prog *prog;  /* one program per pipeline rank, [pp] */
} pt_sched;

/* Builds the programs of every pipeline rank. One generator per schedule:
 * all-forward-all-backward (GPipe), 1F1B (PipeDream-Flush) and interleaved 1F1B
 * (vp > 1, n_micro a multiple of pp). Errors name the parameter at fault. The
 * caller frees with pt_sched_free. */
int pt_sched_build(pt_schedule kind, int pp, int vp, int n_micro, pt_sched *out,
                   pt_err *err);
void pt_sched_free(pt_sched *s);

/* Checks a schedule: every (mb, chunk) has exactly one forward and one backward on
 * the right rank, each forward precedes its backward, every send has one matching
 * receive, and the programs run to completion under the send/receive rule above
 * (no deadlock). Errors say which instruction breaks which rule. */
int pt_sched_check(const pt_sched *s, pt_err *err);

/* The most (mb, chunk) pairs whose forward has run and backward has not, at any
 * point of rank `rank`'s program: what the memory model counts as in flight. */
int pt_sched_peak_in_flight(const pt_sched *s, int rank);
/* The same for the micro-batches of model chunk `chunk` only (-1: every chunk). A
 * (mb, chunk)'s activations are held from its forward, or the receive of its input
 * just before it, to the end of its backward: in every schedule the receive comes
 * with no other forward or backward between, so these counts are also the most
 * activation slots the runtime holds at once. */
int pt_sched_peak_in_flight_chunk(const pt_sched *s, int rank, int chunk);

/* ---- Pipeline transfers on NCCL (planner/sched_nccl.c) ------------------------ */

/* How a runtime issues a schedule's sends and receives to NCCL, whose point-to-point
 * calls have no tags and block their stream until the peer's matching call runs
 * (NCCL user guide, "Point-to-point communication"). Receives go on the kernel
 * stream, in program order, under both policies. */
typedef enum {
    PT_P2P_GROUPED,     /* each send queued, then issued in one NCCL group with the
                           rank's next receive on the kernel stream (the rest before
                           the optimizer step) */
    PT_P2P_SEND_STREAM, /* each send copied on the kernel stream after the kernels that
                           produced it, then its own NCCL operation on a send stream,
                           started by an event recorded after the copy */
    PT_P2P_SERIAL,      /* each send its own operation, but run in issue order with the
                           receives: what NCCL makes of a send stream and a kernel
                           stream sharing one communicator */
    PT_P2P_POLICY_COUNT
} pt_p2p_policy;
const char *pt_p2p_policy_name(pt_p2p_policy p); /* "grouped", "send-stream", "serial" */

typedef struct {
    pt_p2p_policy policy;
    /* PT_P2P_SEND_STREAM: the copies a rank's sends use, in turn; the copy for its
     * send j waits on the kernel stream until send j - send_slots has completed.
     * 0: as many as there are sends. */
    int send_slots;
} pt_p2p_issue;

/* Replays every rank's transfers of `s` as issued under `how`, under NCCL's blocking
 * semantics: each stream a FIFO; a send and its receive (the k-th send from a to b
 * meets the k-th receive b posts from a) both execute, blocking their streams, until
 * the other is executing too; grouped calls progress together. 0 when every stream
 * runs to its end. Errors: the programs fail pt_sched_check (its error); a send that
 * would meet a receive of other data; a deadlock, naming each rank's stream and the
 * instructions it is stuck at. */
int pt_sched_check_nccl(const pt_sched *s, const pt_p2p_issue *how, pt_err *err);

#ifdef __cplusplus
}
#endif
#endif
