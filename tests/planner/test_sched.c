/*
 * Schedule program tests: every schedule over many (pp, vp, n_micro) builds programs
 * that pass the checker, with the instruction counts the layout implies; the peak
 * activations in flight equal what the memory model assumes; small cases match
 * programs written out by hand from the papers; the checker catches corrupted
 * programs (missing, misplaced, mismatched and deadlocking instructions) and the
 * builder refuses bad arguments.
 */
#include "check.h"
#include "planner.h"

#include <stdlib.h>

/* ---- Helpers ------------------------------------------------------------------- */

static int count_kind(const pt_prog *p, pt_ins_kind kind)
{
    int n = 0;
    for (int i = 0; i < p->n; i++)
        n += p->ins[i].kind == kind;
    return n;
}

/* Index of the instruction (kind, mb, chunk) in p, or -1. */
static int find(const pt_prog *p, pt_ins_kind kind, int mb, int chunk)
{
    for (int i = 0; i < p->n; i++)
        if (p->ins[i].kind == kind && p->ins[i].mb == mb && p->ins[i].chunk == chunk)
            return i;
    return -1;
}

static void prog_delete(pt_prog *p, int i)
{
    memmove(&p->ins[i], &p->ins[i + 1], sizeof *p->ins * (size_t)(p->n - i - 1));
    p->n--;
}

/* Moves instruction `from` to index `to`, shifting those between. */
static void prog_move(pt_prog *p, int from, int to)
{
    pt_ins in = p->ins[from];
    prog_delete(p, from);
    memmove(&p->ins[to + 1], &p->ins[to], sizeof *p->ins * (size_t)(p->n - to));
    p->ins[to] = in;
    p->n++;
}

/* "fwd(0,0) send_act(0,0)>1 recv_grad(0,0)<1 bwd(0,0) reduce(0) optim": one rank's
 * program as text, to compare with programs written out by hand. */
static void render(const pt_prog *p, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < p->n && len < n; i++) {
        const pt_ins *in = &p->ins[i];
        const char *sep = i ? " " : "";
        int w;
        if (in->kind == PT_INS_OPTIM_STEP)
            w = snprintf(buf + len, n - len, "%soptim", sep);
        else if (in->kind == PT_INS_REDUCE_GRADS)
            w = snprintf(buf + len, n - len, "%sreduce(%d)", sep, in->chunk);
        else if (in->peer < 0)
            w = snprintf(buf + len, n - len, "%s%s(%d,%d)", sep, pt_ins_name(in->kind), in->mb,
                         in->chunk);
        else {
            bool send = in->kind == PT_INS_SEND_ACT || in->kind == PT_INS_SEND_GRAD;
            w = snprintf(buf + len, n - len, "%s%s(%d,%d)%c%d", sep, pt_ins_name(in->kind),
                         in->mb, in->chunk, send ? '>' : '<', in->peer);
        }
        len += w > 0 ? (size_t)w : 0;
    }
}

static void check_prog_text(const pt_sched *s, int rank, const char *want)
{
    char got[2048];
    render(&s->prog[rank], got, sizeof got);
    CHECK_STR_HAS(got, want);
    CHECK_INT(strlen(got), strlen(want));
}

/* ---- Properties over many shapes ------------------------------------------------ */

/* Counts of rank r's program: n·vp forwards and backwards, a transfer for each
 * (mb, chunk) whose virtual stage has a neighbour on that side, one reduction per
 * chunk, one optimizer step at the end. */
static void check_counts(const pt_sched *s, int r)
{
    const pt_prog *p = &s->prog[r];
    int n = s->n_micro, vp = s->vp;
    int with_prev = n * vp - (r == 0 ? n : 0);               /* stages vs > 0 */
    int with_next = n * vp - (r == s->pp - 1 ? n : 0);       /* stages vs < V-1 */
    CHECK_INT(count_kind(p, PT_INS_FWD), n * vp);
    CHECK_INT(count_kind(p, PT_INS_BWD), n * vp);
    CHECK_INT(count_kind(p, PT_INS_RECV_ACT), with_prev);
    CHECK_INT(count_kind(p, PT_INS_SEND_GRAD), with_prev);
    CHECK_INT(count_kind(p, PT_INS_SEND_ACT), with_next);
    CHECK_INT(count_kind(p, PT_INS_RECV_GRAD), with_next);
    CHECK_INT(count_kind(p, PT_INS_REDUCE_GRADS), vp);
    CHECK_INT(count_kind(p, PT_INS_OPTIM_STEP), 1);
    CHECK_INT(p->n, 2 * n * vp + 2 * with_prev + 2 * with_next + vp + 1);
    CHECK(p->n > 0 && p->ins[p->n - 1].kind == PT_INS_OPTIM_STEP);
    for (int mb = 0; mb < n; mb++)
        for (int c = 0; c < vp; c++) {
            int f = find(p, PT_INS_FWD, mb, c), b = find(p, PT_INS_BWD, mb, c);
            CHECK(f >= 0 && b > f);
        }
}

/* A model whose layers divide by every p·vp tried (2^5·3^2·5·7 layers). */
static pt_model deep_model(void)
{
    return (pt_model){.name = "deep", .layers = 10080, .hidden = 64, .heads = 4, .kv_heads = 4,
                      .ffn = 256, .vocab = 1000, .seq = 128, .norm = PT_NORM_LAYERNORM,
                      .act = PT_ACT_GELU, .pos = PT_POS_LEARNED, .tied_embeddings = true,
                      .bias = true, .dropout = true};
}

/* The peak of each rank's program equals the memory model's in-flight count. */
static void check_memory_agrees(const pt_sched *s)
{
    pt_model m = deep_model();
    pt_layout l;
    pt_layout_default(&l);
    l.pp = s->pp;
    l.vp = s->vp;
    l.n_micro = s->n_micro;
    l.schedule = s->kind;
    pt_train t;
    pt_train_default(&t, NULL);
    CHECK_INT(m.layers % (s->pp * s->vp), 0);
    for (int r = 0; r < s->pp; r++) {
        pt_memory mem;
        pt_mem_stage(&m, &l, &t, r, &mem);
        int peak = pt_sched_peak_in_flight(s, r);
        if (peak != mem.in_flight)
            fprintf(stderr, "  %s pp %d vp %d n %d rank %d\n", pt_schedule_name(s->kind), s->pp,
                    s->vp, s->n_micro, r);
        CHECK_INT(peak, mem.in_flight);
    }
}

/* The peak the schedules are designed for: GPipe keeps all n, 1F1B min(p - r, n),
 * interleaving min((p - r - 1)·2 + (vp - 1)·p + 1, n·vp) chunks. */
static int want_peak(const pt_sched *s, int r)
{
    int n = s->n_micro, total = n * s->vp;
    if (s->kind == PT_SCHED_AFAB)
        return n;
    if (s->kind == PT_SCHED_1F1B)
        return s->pp - r < n ? s->pp - r : n;
    int w = (s->pp - r - 1) * 2 + (s->vp - 1) * s->pp + 1;
    return w < total ? w : total;
}

/* The runtime's slots: a (mb, chunk) holds one from its input's receive (or, without
 * one, its forward) to the end of its backward. Their peak is the in-flight count, and
 * the last stage's last chunk has the memory model's mb_last micro-batches in flight
 * (its logits): every one under AFAB, one otherwise. */
static void check_slots(const pt_sched *s, int r)
{
    const pt_prog *p = &s->prog[r];
    int now = 0, peak = 0;
    for (int i = 0; i < p->n; i++) {
        pt_ins in = p->ins[i];
        bool received = false;
        for (int j = 0; j < i && in.kind == PT_INS_FWD; j++)
            received |= p->ins[j].kind == PT_INS_RECV_ACT && p->ins[j].mb == in.mb &&
                        p->ins[j].chunk == in.chunk;
        now += in.kind == PT_INS_RECV_ACT || (in.kind == PT_INS_FWD && !received);
        now -= in.kind == PT_INS_BWD;
        peak = now > peak ? now : peak;
    }
    CHECK_INT(peak, pt_sched_peak_in_flight(s, r));
    int sum = 0;
    for (int c = 0; c < s->vp; c++)
        sum += pt_sched_peak_in_flight_chunk(s, r, c);
    CHECK(sum >= peak);
    if (r == s->pp - 1)
        CHECK_INT(pt_sched_peak_in_flight_chunk(s, r, s->vp - 1),
                  s->kind == PT_SCHED_AFAB ? s->n_micro : 1);
}

static int check_shape(pt_schedule kind, int pp, int vp, int n)
{
    pt_sched s;
    pt_err err = {{0}};
    int rc = pt_sched_build(kind, pp, vp, n, &s, &err);
    CHECK_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  build: %s\n", err.msg);
        return 0;
    }
    rc = pt_sched_check(&s, &err);
    if (rc)
        fprintf(stderr, "  %s pp %d vp %d n %d: %s\n", pt_schedule_name(kind), pp, vp, n,
                err.msg);
    CHECK_INT(rc, 0);
    for (int r = 0; r < pp; r++) {
        check_counts(&s, r);
        CHECK_INT(pt_sched_peak_in_flight(&s, r), want_peak(&s, r));
        check_slots(&s, r);
    }
    check_memory_agrees(&s);
    pt_sched_free(&s);
    return 1;
}

/* Every n from 1 to 4p + 1 (so 1, 2, 3, p, p + 1, 2p, 3p + 1 among them), and a
 * few larger counts. */
static void test_properties(void)
{
    int built = 0;
    for (int pp = 1; pp <= 8; pp++) {
        for (int n = 1; n <= 48; n++) {
            if (n > 4 * pp + 1 && n != 16 && n != 17 && n != 48)
                continue;
            built += check_shape(PT_SCHED_AFAB, pp, 1, n);
            built += check_shape(PT_SCHED_1F1B, pp, 1, n);
            for (int vp = 2; vp <= 4 && pp > 1 && n % pp == 0; vp++)
                built += check_shape(PT_SCHED_INTERLEAVED, pp, vp, n);
        }
    }
    CHECK(built > 400);
}

/* ---- Programs written out by hand ------------------------------------------------ */

static void test_1f1b_literal(void)
{
    pt_sched s;
    pt_err err;
    CHECK_INT(pt_sched_build(PT_SCHED_1F1B, 2, 1, 3, &s, &err), 0);
    /* Rank 0: one warm-up forward, F1 B0 F2 B1, then B2. */
    check_prog_text(&s, 0,
                    "fwd(0,0) send_act(0,0)>1 fwd(1,0) send_act(1,0)>1 "
                    "recv_grad(0,0)<1 bwd(0,0) fwd(2,0) send_act(2,0)>1 "
                    "recv_grad(1,0)<1 bwd(1,0) recv_grad(2,0)<1 bwd(2,0) reduce(0) optim");
    /* Rank 1 (the last stage): each backward right after its forward. */
    check_prog_text(&s, 1,
                    "recv_act(0,0)<0 fwd(0,0) bwd(0,0) send_grad(0,0)>0 "
                    "recv_act(1,0)<0 fwd(1,0) bwd(1,0) send_grad(1,0)>0 "
                    "recv_act(2,0)<0 fwd(2,0) bwd(2,0) send_grad(2,0)>0 reduce(0) optim");
    CHECK_INT(pt_sched_peak_in_flight(&s, 0), 2);
    CHECK_INT(pt_sched_peak_in_flight(&s, 1), 1);
    pt_sched_free(&s);
}

static void test_afab_literal(void)
{
    pt_sched s;
    pt_err err;
    CHECK_INT(pt_sched_build(PT_SCHED_AFAB, 2, 1, 2, &s, &err), 0);
    check_prog_text(&s, 0,
                    "fwd(0,0) send_act(0,0)>1 fwd(1,0) send_act(1,0)>1 "
                    "recv_grad(0,0)<1 bwd(0,0) recv_grad(1,0)<1 bwd(1,0) reduce(0) optim");
    check_prog_text(&s, 1,
                    "recv_act(0,0)<0 fwd(0,0) recv_act(1,0)<0 fwd(1,0) "
                    "bwd(0,0) send_grad(0,0)>0 bwd(1,0) send_grad(1,0)>0 reduce(0) optim");
    pt_sched_free(&s);

    /* One rank: no transfers at all; GPipe keeps every micro-batch. */
    CHECK_INT(pt_sched_build(PT_SCHED_AFAB, 1, 1, 3, &s, &err), 0);
    check_prog_text(&s, 0,
                    "fwd(0,0) fwd(1,0) fwd(2,0) bwd(0,0) bwd(1,0) bwd(2,0) reduce(0) optim");
    CHECK_INT(pt_sched_peak_in_flight(&s, 0), 3);
    pt_sched_free(&s);
    CHECK_INT(pt_sched_build(PT_SCHED_1F1B, 1, 1, 3, &s, &err), 0);
    check_prog_text(&s, 0,
                    "fwd(0,0) bwd(0,0) fwd(1,0) bwd(1,0) fwd(2,0) bwd(2,0) reduce(0) optim");
    CHECK_INT(pt_sched_peak_in_flight(&s, 0), 1);
    pt_sched_free(&s);
}

/* pp = 2, vp = 2, n = 2: virtual stages 0 (rank 0 chunk 0), 1 (rank 1 chunk 0),
 * 2 (rank 0 chunk 1), 3 (rank 1 chunk 1). total = 4 micro-steps per rank; rank 0's
 * warm-up is min(1·2 + 1·2, 4) = 4 (all forwards first), rank 1's min(0 + 2, 4) = 2. */
static void test_interleaved_literal(void)
{
    pt_sched s;
    pt_err err;
    CHECK_INT(pt_sched_build(PT_SCHED_INTERLEAVED, 2, 2, 2, &s, &err), 0);
    check_prog_text(&s, 0,
                    "fwd(0,0) send_act(0,0)>1 fwd(1,0) send_act(1,0)>1 "
                    "recv_act(0,1)<1 fwd(0,1) send_act(0,1)>1 "
                    "recv_act(1,1)<1 fwd(1,1) send_act(1,1)>1 "
                    "recv_grad(0,1)<1 bwd(0,1) send_grad(0,1)>1 "
                    "recv_grad(1,1)<1 bwd(1,1) send_grad(1,1)>1 reduce(1) "
                    "recv_grad(0,0)<1 bwd(0,0) recv_grad(1,0)<1 bwd(1,0) reduce(0) optim");
    check_prog_text(&s, 1,
                    "recv_act(0,0)<0 fwd(0,0) send_act(0,0)>0 "
                    "recv_act(1,0)<0 fwd(1,0) send_act(1,0)>0 "
                    "recv_act(0,1)<0 fwd(0,1) bwd(0,1) send_grad(0,1)>0 "
                    "recv_act(1,1)<0 fwd(1,1) bwd(1,1) send_grad(1,1)>0 reduce(1) "
                    "recv_grad(0,0)<0 bwd(0,0) send_grad(0,0)>0 "
                    "recv_grad(1,0)<0 bwd(1,0) send_grad(1,0)>0 reduce(0) optim");
    CHECK_INT(pt_sched_peak_in_flight(&s, 0), 4);
    CHECK_INT(pt_sched_peak_in_flight(&s, 1), 3);
    pt_sched_free(&s);

    /* pp = 4, vp = 2, n = 8: rank 0 warms up with (4-1)·2 + 4 = 10 forwards, chunk 0
     * for micro-batches 0..3, chunk 1 for 0..3, then chunk 0 for 4 and 5. */
    CHECK_INT(pt_sched_build(PT_SCHED_INTERLEAVED, 4, 2, 8, &s, &err), 0);
    const pt_prog *p = &s.prog[0];
    int first_bwd = find(p, PT_INS_BWD, 0, 1);
    int fwd_before = 0;
    for (int i = 0; i < first_bwd; i++)
        fwd_before += p->ins[i].kind == PT_INS_FWD;
    CHECK_INT(fwd_before, 11); /* warm-up plus the first steady-state forward */
    CHECK(find(p, PT_INS_FWD, 5, 0) < first_bwd && find(p, PT_INS_FWD, 6, 0) < first_bwd);
    CHECK(find(p, PT_INS_FWD, 7, 0) > first_bwd);
    CHECK(find(p, PT_INS_FWD, 3, 1) < find(p, PT_INS_FWD, 4, 0));
    /* The last rank's chunk 1 is the last virtual stage: no send after its forward. */
    CHECK_INT(count_kind(&s.prog[3], PT_INS_SEND_ACT), 8);
    CHECK_INT(s.prog[3].ins[find(&s.prog[3], PT_INS_SEND_ACT, 0, 0)].peer, 0);
    pt_sched_free(&s);
}

/* ---- Corrupted programs ----------------------------------------------------------- */

typedef void (*corrupt_fn)(pt_sched *s);

/* Builds a schedule, corrupts it with fn and expects the checker to fail naming
 * `want` (and `also`, when given). */
static void expect_bad(pt_schedule kind, int pp, int vp, int n, corrupt_fn fn,
                       const char *want, const char *also)
{
    pt_sched s;
    pt_err err = {{0}};
    CHECK_INT(pt_sched_build(kind, pp, vp, n, &s, &err), 0);
    fn(&s);
    CHECK_INT(pt_sched_check(&s, &err), -1);
    CHECK_STR_HAS(err.msg, want);
    if (also)
        CHECK_STR_HAS(err.msg, also);
    pt_sched_free(&s);
}

static void swap_fwd_bwd(pt_sched *s)
{
    pt_prog *p = &s->prog[1];
    int f = find(p, PT_INS_FWD, 0, 0), b = find(p, PT_INS_BWD, 0, 0);
    pt_ins t = p->ins[f];
    p->ins[f] = p->ins[b];
    p->ins[b] = t;
}

static void delete_recv_act(pt_sched *s)
{
    prog_delete(&s->prog[1], find(&s->prog[1], PT_INS_RECV_ACT, 1, 0));
}

static void delete_send_grad(pt_sched *s)
{
    prog_delete(&s->prog[1], find(&s->prog[1], PT_INS_SEND_GRAD, 2, 0));
}

/* Rank 0 waits for the gradient of micro-batch 0 before sending its activations:
 * rank 1 waits for those activations, so neither moves. */
static void recv_grad_first(pt_sched *s)
{
    prog_move(&s->prog[0], find(&s->prog[0], PT_INS_RECV_GRAD, 0, 0), 0);
}

static void delete_bwd(pt_sched *s)
{
    prog_delete(&s->prog[0], find(&s->prog[0], PT_INS_BWD, 1, 0));
}

static void duplicate_fwd(pt_sched *s)
{
    pt_prog *p = &s->prog[0];
    p->ins[find(p, PT_INS_FWD, 2, 0)].mb = 1;
}

static void wrong_peer(pt_sched *s)
{
    s->prog[0].ins[find(&s->prog[0], PT_INS_SEND_ACT, 0, 0)].peer = 0;
}

static void recv_after_fwd(pt_sched *s)
{
    pt_prog *p = &s->prog[1];
    prog_move(p, find(p, PT_INS_RECV_ACT, 1, 0), find(p, PT_INS_FWD, 1, 0));
}

static void early_reduce(pt_sched *s)
{
    pt_prog *p = &s->prog[0];
    prog_move(p, find(p, PT_INS_REDUCE_GRADS, -1, 0), find(p, PT_INS_BWD, 2, 0));
}

static void optim_not_last(pt_sched *s)
{
    pt_prog *p = &s->prog[1];
    prog_move(p, p->n - 1, 0);
}

static void mb_out_of_range(pt_sched *s)
{
    s->prog[0].ins[0].mb = 9;
}

static void chunk_out_of_range(pt_sched *s)
{
    s->prog[1].ins[find(&s->prog[1], PT_INS_FWD, 1, 0)].chunk = 1;
}

static void unknown_kind(pt_sched *s)
{
    s->prog[0].ins[2].kind = PT_INS_COUNT;
}

static void reduce_with_mb(pt_sched *s)
{
    s->prog[0].ins[find(&s->prog[0], PT_INS_REDUCE_GRADS, -1, 0)].mb = 0;
}

static void delete_reduce(pt_sched *s)
{
    prog_delete(&s->prog[1], find(&s->prog[1], PT_INS_REDUCE_GRADS, -1, 0));
}

static void duplicate_reduce(pt_sched *s)
{
    pt_prog *p = &s->prog[1];
    p->ins[find(p, PT_INS_REDUCE_GRADS, -1, 0)] = (pt_ins){PT_INS_REDUCE_GRADS, -1, 1, -1};
}

/* Both ends of a transfer gone: each is consistent with the other, but the
 * output of the first stage's forward is never sent. */
static void delete_transfer(pt_sched *s)
{
    prog_delete(&s->prog[0], find(&s->prog[0], PT_INS_SEND_ACT, 2, 0));
    prog_delete(&s->prog[1], find(&s->prog[1], PT_INS_RECV_ACT, 2, 0));
}

static void send_from_last_stage(pt_sched *s)
{
    pt_prog *p = &s->prog[2];
    p->ins[find(p, PT_INS_BWD, 0, 0)] = (pt_ins){PT_INS_SEND_ACT, 0, 0, 0};
}

/* In the interleaved pp = 2, vp = 2 case, rank 1 waits for the gradient of its
 * chunk 0 (from rank 0's chunk 1) before it runs the forward and backward of its
 * chunk 1 that rank 0's chunk 1 needs first. */
static void interleaved_deadlock(pt_sched *s)
{
    pt_prog *p = &s->prog[1];
    prog_move(p, find(p, PT_INS_RECV_GRAD, 0, 0), find(p, PT_INS_RECV_ACT, 0, 1));
}

static void test_corrupt(void)
{
    pt_schedule f = PT_SCHED_1F1B;
    expect_bad(f, 2, 1, 3, swap_fwd_bwd, "rank 1 ins 1 (bwd mb 0 chunk 0)",
               "comes before its fwd (ins 2)");
    expect_bad(f, 2, 1, 3, delete_recv_act, "rank 0 ins 3 (send_act mb 1 chunk 0 peer 1)",
               "no matching recv_act on rank 1");
    expect_bad(f, 2, 1, 3, delete_send_grad, "recv_grad mb 2 chunk 0 peer 1",
               "no matching send_grad on rank 1");
    expect_bad(f, 2, 1, 1, recv_grad_first, "deadlock",
               "rank 0 ins 0 (recv_grad mb 0 chunk 0 peer 1)");
    expect_bad(f, 2, 1, 3, delete_bwd, "rank 0: bwd of mb 1 chunk 0 is missing", NULL);
    expect_bad(f, 2, 1, 3, duplicate_fwd, "(fwd mb 1 chunk 0): duplicate of ins 2", NULL);
    expect_bad(f, 2, 1, 3, wrong_peer, "rank 0 ins 1 (send_act mb 0 chunk 0 peer 0)",
               "peer should be 1");
    expect_bad(f, 2, 1, 3, recv_after_fwd, "rank 1 ins 5 (recv_act mb 1 chunk 0 peer 0)",
               "must come before rank 1 ins 4 (fwd mb 1 chunk 0)");
    expect_bad(f, 2, 1, 3, early_reduce, "(reduce_grads mb -1 chunk 0)",
               "must come after rank 0 ins");
    expect_bad(f, 2, 1, 3, optim_not_last, "rank 1 ins 0 (optim_step mb -1 chunk -1)",
               "must be the last instruction");
    expect_bad(f, 2, 1, 3, mb_out_of_range, "rank 0 ins 0 (fwd mb 9 chunk 0)",
               "micro-batch outside 0..2");
    expect_bad(f, 2, 1, 3, chunk_out_of_range, "rank 1 ins 5 (fwd mb 1 chunk 1)",
               "chunk outside 0..0");
    expect_bad(f, 2, 1, 3, unknown_kind, "rank 0 ins 2: unknown instruction kind 8", NULL);
    expect_bad(f, 2, 1, 3, reduce_with_mb, "(reduce_grads mb 0 chunk 0)",
               "wants mb -1, peer -1 and a chunk of this rank");
    expect_bad(f, 2, 1, 3, delete_reduce, "rank 1: reduce_grads of chunk 0 is missing", NULL);
    expect_bad(PT_SCHED_INTERLEAVED, 2, 2, 2, duplicate_reduce,
               "rank 1 ins 21 (reduce_grads mb -1 chunk 1): duplicate of ins 14", NULL);
    expect_bad(f, 2, 1, 3, delete_transfer, "rank 0 ins 6 (fwd mb 2 chunk 0): has no send_act",
               NULL);
    expect_bad(PT_SCHED_AFAB, 3, 1, 2, send_from_last_stage, "virtual stage 2 has no such",
               NULL);
    expect_bad(PT_SCHED_INTERLEAVED, 2, 2, 2, interleaved_deadlock, "deadlock",
               "rank 1 ins");
}

static void test_check_shape(void)
{
    pt_err err;
    pt_sched s = {.kind = PT_SCHED_1F1B, .pp = 1, .vp = 1, .n_micro = 1, .prog = NULL};
    CHECK_INT(pt_sched_check(&s, &err), -1);
    CHECK_STR_HAS(err.msg, "no programs");
    pt_prog empty = {.ins = NULL, .n = 0};
    s.prog = &empty;
    CHECK_INT(pt_sched_check(&s, &err), -1);
    CHECK_STR_HAS(err.msg, "rank 0: program does not end with optim_step");
    s.n_micro = 0;
    CHECK_INT(pt_sched_check(&s, &err), -1);
    CHECK_STR_HAS(err.msg, "bad sizes");
    CHECK_INT(pt_sched_peak_in_flight(&s, 1), -1);
}

/* ---- Arguments ------------------------------------------------------------------- */

static void expect_build_error(pt_schedule kind, int pp, int vp, int n, const char *want)
{
    pt_sched s;
    pt_err err = {{0}};
    CHECK_INT(pt_sched_build(kind, pp, vp, n, &s, &err), -1);
    CHECK_STR_HAS(err.msg, want);
    CHECK(s.prog == NULL);
    pt_sched_free(&s);
}

static void test_bad_args(void)
{
    expect_build_error(PT_SCHED_INTERLEAVED, 4, 2, 6,
                       "schedule interleaved: n_micro (6) is not a multiple of pp (4)");
    expect_build_error(PT_SCHED_INTERLEAVED, 4, 1, 8, "schedule interleaved: vp (1) must be");
    expect_build_error(PT_SCHED_INTERLEAVED, 1, 2, 8, "schedule interleaved: pp (1) must be");
    expect_build_error(PT_SCHED_1F1B, 0, 1, 8, "schedule 1f1b: pp (0) must be at least 1");
    expect_build_error(PT_SCHED_1F1B, 2, 0, 8, "schedule 1f1b: vp (0) must be at least 1");
    expect_build_error(PT_SCHED_1F1B, 2, 1, 0, "schedule 1f1b: n_micro (0) must be at least 1");
    expect_build_error(PT_SCHED_1F1B, 2, 2, 4, "schedule 1f1b: vp (2) must be 1");
    expect_build_error(PT_SCHED_AFAB, 2, 3, 4, "schedule afab: vp (3) must be 1");
    expect_build_error(PT_SCHED_AFAB, 64, 1, 1 << 20, "exceeds");
    expect_build_error((pt_schedule)7, 2, 1, 4, "unknown schedule kind 7");
}

static void test_names(void)
{
    const char *want[PT_INS_COUNT] = {"recv_act", "fwd", "send_act", "recv_grad",
                                      "bwd", "send_grad", "reduce_grads", "optim_step"};
    for (int k = 0; k < PT_INS_COUNT; k++)
        CHECK_STR_HAS(pt_ins_name((pt_ins_kind)k), want[k]);
    CHECK_STR_HAS(pt_ins_name(PT_INS_COUNT), "?");
}

int main(void)
{
    test_names();
    test_properties();
    test_1f1b_literal();
    test_afab_literal();
    test_interleaved_literal();
    test_corrupt();
    test_check_shape();
    test_bad_args();
    return pt_check_result();
}
