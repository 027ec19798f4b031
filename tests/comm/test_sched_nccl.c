/*
 * The schedule programs' pipeline transfers under NCCL's blocking point-to-point
 * semantics (pt_sched_check_nccl): over every schedule the planner has, pp 2 to 8,
 * vp 1 to 4 where the schedule allows it, and micro-batch counts below, at and above
 * pp, the policy comm_nccl.c used to follow (sends grouped with the next receive on
 * the kernel stream) deadlocks interleaved 1F1B in exactly the cases counted here,
 * and the policy comm_nccl.c follows now (pt_comm_nccl_p2p, read from the
 * communication layer, so this checks the code's own policy and slot count) deadlocks
 * in none, and sends and receives serialised on one communicator deadlock 1F1B too. Also: how few send slots suffice, a deadlock's message, a send order that
 * NCCL (no tags) would pair with the wrong receive, and bad arguments. No MPI, no GPU.
 */
#include "check.h"
#include "comm.h"

#include <stdlib.h>

/* Micro-batch counts tried for pp stages: interleaved needs multiples of pp. */
static int micro_counts(pt_schedule kind, int pp, int *n)
{
    if (kind == PT_SCHED_INTERLEAVED) {
        for (int k = 0; k < 4; k++)
            n[k] = (k + 1) * pp;
        return 4;
    }
    int v[] = {1, 2, pp, pp + 1, 2 * pp, 4 * pp};
    for (int k = 0; k < 6; k++)
        n[k] = v[k];
    return 6;
}

typedef struct {
    int cases, deadlocks, deadlocks_over_pp;
    int other_errors;
} tally;

/* Runs the check under `how` over every case of `kind`; counts deadlocks (and those
 * with n_micro > pp), and any other error. */
static tally run_all(pt_schedule kind, const pt_p2p_issue *how, bool print)
{
    tally t = {0};
    for (int pp = 2; pp <= 8; pp++)
        for (int vp = 1; vp <= 4; vp++) {
            int n[8], count = micro_counts(kind, pp, n);
            for (int k = 0; k < count; k++) {
                pt_sched s;
                pt_err err = {""};
                if (pt_sched_build(kind, pp, vp, n[k], &s, &err))
                    continue; /* vp not allowed for this schedule */
                t.cases++;
                int rc = pt_sched_check_nccl(&s, how, &err);
                bool dead = rc != 0 && strstr(err.msg, "deadlock") != NULL;
                t.deadlocks += dead;
                t.deadlocks_over_pp += dead && n[k] > pp;
                t.other_errors += rc != 0 && !dead;
                if (rc != 0 && (!dead || print))
                    printf("  %s pp %d vp %d n %d: %s\n", pt_schedule_name(kind), pp, vp, n[k],
                           err.msg);
                pt_sched_free(&s);
            }
        }
    return t;
}

/* Every schedule under the old policy and the code's: the counts the review found. */
static void check_policies(void)
{
    const pt_p2p_issue grouped = {.policy = PT_P2P_GROUPED};
    const pt_p2p_issue serial = {.policy = PT_P2P_SERIAL};
    const int want_cases[PT_SCHED_COUNT] = {[PT_SCHED_AFAB] = 42, [PT_SCHED_1F1B] = 42,
                                            [PT_SCHED_INTERLEAVED] = 84};
    for (int kind = 0; kind < PT_SCHED_COUNT; kind++) {
        tally old = run_all((pt_schedule)kind, &grouped, false);
        tally now = run_all((pt_schedule)kind, &pt_comm_nccl_p2p, true);
        tally one = run_all((pt_schedule)kind, &serial, false);
        printf("%-12s %3d cases: deadlocks %s %2d, %s %2d, %s (%d slots) %d\n",
               pt_schedule_name((pt_schedule)kind), old.cases,
               pt_p2p_policy_name(grouped.policy), old.deadlocks,
               pt_p2p_policy_name(serial.policy), one.deadlocks,
               pt_p2p_policy_name(pt_comm_nccl_p2p.policy), pt_comm_nccl_p2p.send_slots,
               now.deadlocks);
        /* one communicator for both streams (one FIFO): 1F1B deadlocks in every case
         * with more than one micro-batch (all but 7) and interleaved in all; why
         * comm_nccl.c gives each direction a communicator of its own */
        const int want_serial[PT_SCHED_COUNT] = {[PT_SCHED_AFAB] = 0, [PT_SCHED_1F1B] = 35,
                                                 [PT_SCHED_INTERLEAVED] = 84};
        CHECK_INT(one.other_errors, 0);
        CHECK_INT(one.deadlocks, want_serial[kind]);
        CHECK_INT(old.cases, want_cases[kind]);
        CHECK_INT(old.other_errors, 0);
        CHECK_INT(now.other_errors, 0);
        CHECK_INT(now.deadlocks, 0);
        if (kind == PT_SCHED_INTERLEAVED) {
            /* every case with more micro-batches than stages, and none other */
            CHECK(old.deadlocks > 0);
            CHECK_INT(old.deadlocks, 63);
            CHECK_INT(old.deadlocks_over_pp, 63);
        } else {
            CHECK_INT(old.deadlocks, 0);
        }
    }
}

/* The code's policy is the send stream with at least the slots the model needs: one
 * slot deadlocks some interleaved cases, two none; unlimited none. */
static void check_slots(void)
{
    CHECK_INT(pt_comm_nccl_p2p.policy, PT_P2P_SEND_STREAM);
    CHECK(pt_comm_nccl_p2p.send_slots >= 2);
    for (int slots = 0; slots <= 2; slots++) {
        pt_p2p_issue how = {.policy = PT_P2P_SEND_STREAM, .send_slots = slots};
        int dead = 0;
        for (int kind = 0; kind < PT_SCHED_COUNT; kind++) {
            tally t = run_all((pt_schedule)kind, &how, false);
            CHECK_INT(t.other_errors, 0);
            dead += t.deadlocks;
            if (kind != PT_SCHED_INTERLEAVED)
                CHECK_INT(t.deadlocks, 0); /* one slot is enough without interleaving */
        }
        printf("send-stream with %d slot(s)%s: %d deadlocks\n", slots,
               slots ? "" : " (unlimited)", dead);
        if (slots == 1)
            CHECK(dead > 0);
        else
            CHECK_INT(dead, 0);
    }
}

/* The smallest deadlock: interleaved, pp 2, vp 2, 4 micro-batches; each rank's group
 * holds a send whose receive the other posts later on its kernel stream. */
static void check_message(void)
{
    pt_sched s;
    pt_err err = {""};
    CHECK_INT(pt_sched_build(PT_SCHED_INTERLEAVED, 2, 2, 4, &s, &err), 0);
    pt_p2p_issue grouped = {.policy = PT_P2P_GROUPED};
    CHECK(pt_sched_check_nccl(&s, &grouped, &err) != 0);
    printf("%s\n", err.msg);
    CHECK_STR_HAS(err.msg, "deadlock (grouped):");
    CHECK_STR_HAS(err.msg, "rank 0 kernel stream at ins 16 (send_act mb 3 chunk 0 peer 1)");
    CHECK_STR_HAS(err.msg, "rank 1 kernel stream at ins 16 (send_act mb 2 chunk 0 peer 0)");
    CHECK_STR_HAS(err.msg, "waits for rank 1 ins");
    pt_p2p_issue one = {.policy = PT_P2P_SEND_STREAM, .send_slots = 1};
    CHECK(pt_sched_check_nccl(&s, &one, &err) != 0);
    CHECK_STR_HAS(err.msg, "deadlock (send-stream):");
    CHECK_STR_HAS(err.msg, "the copy of ins");
    pt_sched_free(&s);
}

/* 1F1B, pp 2, 2 micro-batches with rank 0's two sends swapped: MPI's tags keep them
 * apart (pt_sched_check passes), NCCL would hand micro-batch 1 to the receive of 0. */
static void check_order(void)
{
    pt_sched s;
    pt_err err = {""};
    CHECK_INT(pt_sched_build(PT_SCHED_1F1B, 2, 1, 2, &s, &err), 0);
    pt_prog *p = &s.prog[0];
    int a = -1, b = -1;
    for (int i = 0; i < p->n; i++)
        if (p->ins[i].kind == PT_INS_SEND_ACT && a < 0)
            a = i;
        else if (p->ins[i].kind == PT_INS_SEND_ACT && b < 0)
            b = i;
    CHECK(a >= 0 && b > a);
    if (a < 0 || b < 0)
        return;
    /* send_act 0 moved to just after send_act 1: still after its forward */
    pt_ins first = p->ins[a];
    memmove(&p->ins[a], &p->ins[a + 1], sizeof *p->ins * (size_t)(b - a));
    p->ins[b] = first;
    CHECK_INT(pt_sched_check(&s, &err), 0);
    CHECK(pt_sched_check_nccl(&s, &pt_comm_nccl_p2p, &err) != 0);
    CHECK_STR_HAS(err.msg, "NCCL has no tags");
    CHECK_STR_HAS(err.msg, "(send_act mb 1 chunk 0 peer 1) would meet rank 1");
    pt_sched_free(&s);
}

static void check_errors(void)
{
    pt_sched s;
    pt_err err = {""};
    CHECK_INT(pt_sched_build(PT_SCHED_1F1B, 4, 1, 8, &s, &err), 0);
    pt_p2p_issue bad = {.policy = PT_P2P_POLICY_COUNT};
    CHECK(pt_sched_check_nccl(&s, &bad, &err) != 0);
    CHECK_STR_HAS(err.msg, "unknown policy");
    bad = (pt_p2p_issue){.policy = PT_P2P_SEND_STREAM, .send_slots = -1};
    CHECK(pt_sched_check_nccl(&s, &bad, &err) != 0);
    CHECK_STR_HAS(err.msg, "send slots -1");
    /* a program pt_sched_check refuses is refused with its error */
    s.prog[1].n--; /* no optim_step */
    CHECK(pt_sched_check_nccl(&s, &pt_comm_nccl_p2p, &err) != 0);
    CHECK_STR_HAS(err.msg, "does not end with optim_step");
    s.prog[1].n++;
    CHECK_STR_HAS(pt_p2p_policy_name(PT_P2P_GROUPED), "grouped");
    CHECK_STR_HAS(pt_p2p_policy_name(PT_P2P_POLICY_COUNT), "?");
    pt_sched_free(&s);
}

int main(void)
{
    check_policies();
    check_slots();
    check_message();
    check_order();
    check_errors();
    return pt_check_result();
}
