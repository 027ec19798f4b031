/*
 * The communication watchdog (comm/comm_watch.c) under mpirun on 2 ranks
 * (tests/run_mpi.sh 2 test_comm_watchdog), on a dp = 2 grid: PT_COMM_TIMEOUT is read
 * and checked; a collective, an all-to-all with counts per rank, a receive and a send
 * whose peer comes LATE_S (4 s) late each end at a 1 s deadline (3 s of margin for a
 * busy machine's scheduling) with the report naming the operation, its bytes, the
 * group or peer, the ranks waited on and the step; the late peer's side still
 * completes. The test asks the comm to return the report (timeout_returns,
 * comm_internal.h) instead of ending the run; tests/tools/cli_watchdog.sh checks the
 * ending with ptrun, whose notes print it. Notes (pt_comm_set_notes) reach the
 * callback set, and those of a pt_comm_sub too. Before MPI starts, the guard of the
 * calls that cannot poll (pt_comm_guard_start, which bounds MPI_Init) is tried in
 * forked children: ended in time it is silent, past its deadline it says so and ends
 * the process with status 1; cli_watchdog.sh checks it around ptrun's MPI_Init with a
 * rank stopped.
 */
#include "check.h"
#include "comm_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { N = 7, BIG = 1 << 18 }; /* BIG floats: 1 MiB, past MPI's eager limit */
#define LATE_S 4.0 /* how late the peer comes, against the 1 s deadline */

/* Buffers of operations a missed deadline leaves posted: MPI may write them later. */
static float coll_buf[N], recv_buf[4], send_buf[BIG], late_buf[BIG], a2a_in[2 * N],
    a2a_out[2 * N];

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void check_env(void)
{
    pt_err err = {""};
    double t = 0;
    setenv("PT_COMM_TIMEOUT", "2.5", 1);
    CHECK_INT(pt_comm_timeout_from_env(&t, &err), 0);
    CHECK_NEAR(t, 2.5, 0);
    setenv("PT_COMM_TIMEOUT", "0", 1);
    CHECK_INT(pt_comm_timeout_from_env(&t, &err), 0);
    CHECK_NEAR(t, 0, 0);
    setenv("PT_COMM_TIMEOUT", "soon", 1);
    CHECK(pt_comm_timeout_from_env(&t, &err) != 0);
    CHECK_STR_HAS(err.msg, "PT_COMM_TIMEOUT='soon'");
    setenv("PT_COMM_TIMEOUT", "-1", 1);
    CHECK(pt_comm_timeout_from_env(&t, &err) != 0);
    unsetenv("PT_COMM_TIMEOUT");
    CHECK_INT(pt_comm_timeout_from_env(&t, &err), 0);
    CHECK_NEAR(t, 300, 0);
}

/* ---- The guard of a stage that cannot poll --------------------------------------------- */

static void note_to_fd(void *arg, const char *line)
{
    int fd = *(int *)arg;
    if (write(fd, line, strlen(line)) < 0)
        _exit(3);
}

/* A child whose stage takes work_s under a guard of timeout_s: its exit status (-1 when
 * it did not exit), how long it ran, and its notes into note (cap bytes). */
static int guarded_child(double timeout_s, double work_s, double *ran_s, char *note, size_t cap)
{
    int fds[2];
    CHECK_INT(pipe(fds), 0);
    double t0 = pt_comm_now_s();
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        pt_comm c = {0};
        c.rank = 3;
        c.note = note_to_fd;
        c.note_arg = &fds[1];
        pt_comm_guard g;
        pt_err err = {""};
        if (pt_comm_guard_start(&g, &c, "a test stage", timeout_s, "a test's knob", &err))
            _exit(2);
        sleep_s(work_s);
        pt_comm_guard_end(&g);
        _exit(0);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], note, cap - 1);
    note[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    *ran_s = pt_comm_now_s() - t0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void check_guard(void)
{
    char note[512];
    double ran = 0;
    /* ended in time: silent, and the process goes on */
    CHECK_INT(guarded_child(5, 0.05, &ran, note, sizeof note), 0);
    CHECK_INT((int)strlen(note), 0);
    /* past the deadline: the line, and status 1 from the guard, not 0 at the stage's end
     * (30 s on), and not before the deadline */
    CHECK_INT(guarded_child(0.3, 30, &ran, note, sizeof note), 1);
    CHECK_STR_HAS(note, "rank 3: a test stage did not complete within 0.3 s: a rank stalled "
                        "or died before reaching it");
    CHECK(ran >= 0.3);
    /* no deadline: no guard */
    CHECK_INT(guarded_child(0, 0.5, &ran, note, sizeof note), 0);
    CHECK_INT((int)strlen(note), 0);
}

/* The notes a comm hands its caller (pt_comm_set_notes): the last line, and how many. */
static char note_line[256];
static int note_count;

static void take_note(void *arg, const char *line)
{
    CHECK(arg == (void *)note_line);
    snprintf(note_line, sizeof note_line, "%s", line);
    note_count++;
}

/* Notes reach the callback set, none are said without one, and a pt_comm_sub takes its
 * parent's (ptprofile-coll sets them on its world only). Collective. */
static void check_notes(pt_comm *c)
{
    pt_err err = {""};
    pt_comm_note(c, "dropped");
    CHECK_INT(note_count, 0);
    pt_comm_set_notes(c, take_note, note_line);
    pt_comm_note(c, "ranks share a GPU");
    CHECK_INT(note_count, 1);
    CHECK(strcmp(note_line, "ranks share a GPU") == 0);
    pt_comm *s = NULL;
    CHECK_INT(pt_comm_sub(c, 2, &s, &err), 0);
    CHECK(s != NULL);
    if (s) {
        pt_comm_note(s, "from the sub");
        CHECK_INT(note_count, 2);
        CHECK(strcmp(note_line, "from the sub") == 0);
        pt_comm_finalize(s);
    }
    pt_comm_set_notes(c, NULL, NULL);
    pt_comm_note(c, "dropped again");
    CHECK_INT(note_count, 2);
}

/* Between the phases: every rank here, with a generous deadline. */
static void barrier(pt_comm *c)
{
    pt_comm_set_timeout(c, 60);
    CHECK(pt_comm_all_ok(c, true));
    pt_comm_set_timeout(c, 1);
}

int main(int argc, char **argv)
{
    check_guard(); /* before MPI: its children must not inherit it */
    pt_comm *c = NULL;
    pt_err err = {""};
    if (pt_comm_init(&argc, &argv, &c, &err)) {
        fprintf(stderr, "test_comm_watchdog: %s\n", err.msg);
        return 1;
    }
    int rank = pt_comm_rank(c);
    if (pt_comm_size(c) != 2) {
        fprintf(stderr, "test_comm_watchdog: run me on 2 ranks, not %d\n", pt_comm_size(c));
        pt_comm_finalize(c);
        return 1;
    }
    check_env();
    check_notes(c);
    if (!getenv("PT_COMM_TIMEOUT"))
        CHECK_NEAR(pt_comm_timeout(c), 300, 0);
    pt_layout l;
    pt_layout_default(&l);
    l.tp = l.pp = l.cp = 1;
    l.dp = 2;
    pt_grid grid;
    pt_grid_init(&grid, &l);
    CHECK_INT(pt_comm_groups(c, &grid, &err), 0);
    c->timeout_returns = true;
    pt_comm_set_context(c, 7, "testing");
    barrier(c);

    /* a collective: rank 1 comes late, rank 0 reports it */
    for (int i = 0; i < N; i++)
        coll_buf[i] = (float)(rank + i);
    if (rank == 0) {
        double t0 = pt_comm_now_s();
        CHECK(pt_comm_allreduce(c, PT_GROUP_DP, coll_buf, N, &err) != 0);
        CHECK(pt_comm_now_s() - t0 >= 1.0); /* the deadline, not earlier */
        CHECK_STR_HAS(err.msg, "comm timeout: all-reduce of 28 bytes over dp (2 ranks) in "
                               "step 7 (testing) did not finish within 1 s, waiting on world "
                               "rank(s) 1");
    } else {
        sleep_s(LATE_S);
        CHECK_INT(pt_comm_allreduce(c, PT_GROUP_DP, coll_buf, N, &err), 0);
        CHECK_NEAR(coll_buf[N - 1], 2 * (N - 1) + 1, 0); /* rank 0's part still arrived */
    }
    barrier(c);

    /* an all-to-all with counts per rank: rank 0 sends 1 and 3 elements, receives 1 and
     * 2, so 16 bytes at most; rank 1 comes late */
    const int64_t sc[2][2] = {{1, 3}, {2, 5}}, rc[2][2] = {{1, 2}, {3, 5}};
    for (int i = 0; i < 2 * N; i++)
        a2a_in[i] = (float)(rank * 10 + i);
    if (rank == 0) {
        CHECK(pt_comm_alltoallv_t(c, PT_GROUP_DP, PT_COMM_F32, a2a_in, sc[0], a2a_out, rc[0],
                                  &err) != 0);
        CHECK_STR_HAS(err.msg, "comm timeout: all-to-all of 16 bytes over dp (2 ranks) in "
                               "step 7 (testing) did not finish within 1 s, waiting on world "
                               "rank(s) 1");
    } else {
        sleep_s(LATE_S);
        CHECK_INT(pt_comm_alltoallv_t(c, PT_GROUP_DP, PT_COMM_F32, a2a_in, sc[1], a2a_out,
                                      rc[1], &err), 0);
        CHECK_NEAR(a2a_out[2], 3, 0); /* rank 0's last element for rank 1 still arrived */
    }
    barrier(c);

    /* a receive whose sender comes late */
    pt_comm_set_context(c, -1, NULL);
    if (rank == 0) {
        CHECK(pt_comm_recv(c, 1, 5, recv_buf, 4, &err) != 0);
        CHECK_STR_HAS(err.msg, "comm timeout: receive of 16 bytes from world rank 1 outside "
                               "the training steps did not finish within 1 s, waiting on "
                               "world rank(s) 1");
    } else {
        sleep_s(LATE_S);
        float v[4] = {1, 2, 3, 4};
        CHECK_INT(pt_comm_isend(c, 0, 5, v, 4, &err), 0);
        CHECK_INT(pt_comm_wait_sends(c, &err), 0);
    }
    barrier(c);

    /* a send too large to go eagerly, whose receiver comes late */
    pt_comm_set_context(c, 12, NULL);
    if (rank == 1) {
        for (int i = 0; i < BIG; i++)
            send_buf[i] = (float)i;
        CHECK_INT(pt_comm_isend(c, 0, 9, send_buf, BIG, &err), 0);
        CHECK(pt_comm_wait_sends(c, &err) != 0);
        CHECK_STR_HAS(err.msg, "comm timeout: send of 1048576 bytes to world rank 0 in step 12 "
                               "(training)");
    } else {
        sleep_s(LATE_S);
        CHECK_INT(pt_comm_recv(c, 1, 9, late_buf, BIG, &err), 0);
        CHECK_NEAR(late_buf[BIG - 1], BIG - 1, 0);
    }
    barrier(c);

    /* without a deadline a late peer is waited for */
    pt_comm_set_timeout(c, 0);
    if (rank == 1)
        sleep_s(1.5);
    float one = 1;
    CHECK_INT(pt_comm_allreduce(c, PT_GROUP_DP, &one, 1, &err), 0);
    CHECK_NEAR(one, 2, 0);

    pt_comm_set_timeout(c, 60);
    bool ok = pt_comm_all_ok(c, pt_check_failures == 0);
    pt_comm_finalize(c);
    return ok ? 0 : 1;
}
