/*
 * The file rendezvous (comm/rendezvous.c) with fork()ed processes on a temporary
 * directory: rank and world from the launcher's environment (and every bad value
 * refused), a barrier and a broadcast among 4 processes, the timeout error naming the
 * directory and the ranks that never arrived, a broadcast whose root never writes, an
 * abort seen by a waiting rank, cleanup, and pt_comm_init's choices for a process a
 * launcher without MPI started.
 */
#include "check.h"
#include "comm.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static pt_rdv rdv(int rank, int size, const char *key, double timeout_s)
{
    pt_rdv r;
    memset(&r, 0, sizeof r);
    r.rank = rank;
    r.size = size;
    snprintf(r.dir, sizeof r.dir, "%s", dir);
    snprintf(r.key, sizeof r.key, "%s", key);
    r.timeout_s = timeout_s;
    return r;
}

/* Runs fn(rank) in a child process for each rank of ranks[0..n); returns each child's
 * exit status in status[]. A child writes its error message to <dir>/msg.<rank>. */
static void run_children(const int *ranks, int n, int (*fn)(int), int *status)
{
    pid_t pid[16];
    for (int i = 0; i < n; i++) {
        fflush(NULL);
        pid[i] = fork();
        if (pid[i] == 0)
            _exit(fn(ranks[i]));
    }
    for (int i = 0; i < n; i++) {
        int st = 0;
        waitpid(pid[i], &st, 0);
        status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 100;
    }
}

static void save_msg(int rank, const char *msg)
{
    char path[400];
    snprintf(path, sizeof path, "%s/msg.%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(msg, f);
        fclose(f);
    }
}

static void read_msg(int rank, char *out, size_t cap)
{
    char path[400];
    snprintf(path, sizeof path, "%s/msg.%d", dir, rank);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = '\0';
        fclose(f);
    }
}

/* ---- The exchange that works ----------------------------------------------------------- */

static int meet(int rank)
{
    pt_rdv r = rdv(rank, 4, "ok", 20);
    pt_err err = {""};
    unsigned char id[128];
    for (int i = 0; i < 128; i++)
        id[i] = rank == 2 ? (unsigned char)(i * 7 + 1) : 0;
    if (pt_rdv_barrier(&r, "join", &err) || pt_rdv_bcast(&r, "id", 2, id, sizeof id, &err)) {
        save_msg(rank, err.msg);
        return 1;
    }
    for (int i = 0; i < 128; i++)
        if (id[i] != (unsigned char)(i * 7 + 1))
            return 2;
    return 0;
}

static void test_exchange(void)
{
    int ranks[4] = {0, 1, 2, 3}, st[4];
    run_children(ranks, 4, meet, st);
    for (int i = 0; i < 4; i++)
        CHECK_INT(st[i], 0);
    /* cleanup removes this run's files and leaves others */
    char other[400], path[400];
    snprintf(other, sizeof other, "%s/okay.keep", dir);
    FILE *f = fopen(other, "w");
    if (f)
        fclose(f);
    pt_rdv r = rdv(0, 4, "ok", 1);
    pt_rdv_cleanup(&r);
    snprintf(path, sizeof path, "%s/ok.join.3", dir);
    CHECK(access(path, F_OK) != 0);
    snprintf(path, sizeof path, "%s/ok.id", dir);
    CHECK(access(path, F_OK) != 0);
    CHECK(access(other, F_OK) == 0);
    unlink(other);
}

/* ---- Ranks that never come ------------------------------------------------------------------ */

static int late(int rank)
{
    pt_rdv r = rdv(rank, 4, "late", 0.5);
    pt_err err = {""};
    if (pt_rdv_barrier(&r, "join", &err) == 0)
        return 0;
    save_msg(rank, err.msg);
    return 3;
}

static int orphan(int rank)
{
    pt_rdv r = rdv(rank, 2, "orphan", 0.3);
    pt_err err = {""};
    int x = 0;
    if (pt_rdv_bcast(&r, "id", 0, &x, sizeof x, &err) == 0)
        return 0;
    save_msg(rank, err.msg);
    return 3;
}

static void test_timeouts(void)
{
    int ranks[3] = {0, 1, 3}, st[3];
    run_children(ranks, 3, late, st);
    char msg[600];
    for (int i = 0; i < 3; i++) {
        CHECK_INT(st[i], 3);
        read_msg(ranks[i], msg, sizeof msg);
        CHECK_STR_HAS(msg, dir);
        CHECK_STR_HAS(msg, "never arrived: 2 (world of 4");
    }
    int one = 1;
    run_children(&one, 1, orphan, st);
    CHECK_INT(st[0], 3);
    read_msg(1, msg, sizeof msg);
    CHECK_STR_HAS(msg, "from rank 0, which never wrote it");
    CHECK_STR_HAS(msg, dir);
}

/* ---- A rank that fails ------------------------------------------------------------------------ */

static int waiter(int rank)
{
    /* world of 3, rank 2 never comes; rank 0 aborts: rank 1 must stop well before the
     * 30 s timeout, with rank 0's reason */
    pt_rdv r = rdv(rank, 3, "abort", 30);
    pt_err err = {""};
    if (rank == 0) {
        pt_rdv_abort(&r, "out of memory on purpose");
        return 0;
    }
    if (pt_rdv_barrier(&r, "join", &err) == 0)
        return 0;
    save_msg(rank, err.msg);
    return 3;
}

static void test_abort(void)
{
    int ranks[2] = {0, 1}, st[2];
    run_children(ranks, 2, waiter, st);
    CHECK_INT(st[0], 0);
    CHECK_INT(st[1], 3);
    char msg[600];
    read_msg(1, msg, sizeof msg);
    CHECK_STR_HAS(msg, "rank 0 aborted: out of memory on purpose");
    pt_rdv r = rdv(0, 3, "abort", 1);
    pt_err err = {""};
    CHECK(pt_rdv_aborted(&r, &err) != 0);
    pt_rdv_cleanup(&r);
    CHECK_INT(pt_rdv_aborted(&r, &err), 0);
}

/* ---- The environment ---------------------------------------------------------------------------- */

static void clear_env(void)
{
    const char *vars[] = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID",
                          "SLURM_STEP_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                          "PT_RENDEZVOUS", "PT_RENDEZVOUS_KEY", "PT_RENDEZVOUS_TIMEOUT"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
}

static void test_env(void)
{
    pt_rdv r;
    pt_err err = {""};
    clear_env();
    CHECK_INT(pt_rdv_from_env(&r, &err), 0);
    CHECK_INT(r.size, 0);
    CHECK_STR_HAS(r.key, "run");

    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("RANK", "5", 1); /* Slurm's variables come first */
    setenv("WORLD_SIZE", "6", 1);
    setenv("PT_RENDEZVOUS", dir, 1);
    CHECK_INT(pt_rdv_from_env(&r, &err), 0);
    CHECK_INT(r.rank, 3);
    CHECK_INT(r.size, 8);
    CHECK_INT(r.local_rank, 1);
    CHECK_STR_HAS(r.source, "SLURM_PROCID");
    CHECK_STR_HAS(r.key, "4242.0");
    CHECK_STR_HAS(r.dir, dir);
    CHECK_NEAR(r.timeout_s, 300, 0);

    clear_env();
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("PT_RENDEZVOUS_KEY", "job-7", 1);
    setenv("PT_RENDEZVOUS_TIMEOUT", "2.5", 1);
    CHECK_INT(pt_rdv_from_env(&r, &err), 0);
    CHECK_INT(r.rank, 2);
    CHECK_INT(r.size, 4);
    CHECK_STR_HAS(r.source, "RANK/WORLD_SIZE");
    CHECK_STR_HAS(r.key, "job-7");
    CHECK_NEAR(r.timeout_s, 2.5, 0);

    setenv("RANK", "4", 1); /* outside the world */
    CHECK(pt_rdv_from_env(&r, &err) != 0);
    CHECK_STR_HAS(err.msg, "RANK='4'");
    setenv("RANK", "1x", 1);
    CHECK(pt_rdv_from_env(&r, &err) != 0);
    CHECK_STR_HAS(err.msg, "RANK='1x'");
    setenv("RANK", "1", 1);
    setenv("PT_RENDEZVOUS_TIMEOUT", "soon", 1);
    CHECK(pt_rdv_from_env(&r, &err) != 0);
    CHECK_STR_HAS(err.msg, "PT_RENDEZVOUS_TIMEOUT='soon'");
    unsetenv("PT_RENDEZVOUS_TIMEOUT");
    setenv("PT_RENDEZVOUS_KEY", "../x", 1);
    CHECK(pt_rdv_from_env(&r, &err) != 0);
    CHECK_STR_HAS(err.msg, "rendezvous key '../x'");
    unsetenv("PT_RENDEZVOUS_KEY");
    setenv("PT_RENDEZVOUS", "/nonexistent/rdv", 1);
    CHECK(pt_rdv_from_env(&r, &err) != 0);
    CHECK_STR_HAS(err.msg, "PT_RENDEZVOUS=/nonexistent/rdv");
    clear_env();
}

/* ---- pt_comm_init for a process without MPI ------------------------------------------------ */

static int init_as(int rank)
{
    char r[8];
    snprintf(r, sizeof r, "%d", rank % 10);
    clear_env();
    setenv("RANK", r, 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("PT_RENDEZVOUS_KEY", "init", 1);
    setenv("PT_RENDEZVOUS_TIMEOUT", "10", 1);
    if (rank >= 10) /* ranks 10, 11: the same with a rendezvous directory */
        setenv("PT_RENDEZVOUS", dir, 1);
    pt_comm *c = NULL;
    pt_err err = {""};
    int argc = 1;
    char *args[] = {"test", NULL}, **argv = args;
    if (pt_comm_init(&argc, &argv, &c, &err)) {
        save_msg(rank, err.msg);
        return 3;
    }
    int size = pt_comm_size(c);
    int rc = 0;
    if (size == 2) {
        /* met through the directory: the CPU backend cannot do its collectives */
        pt_grid g;
        pt_layout l;
        pt_layout_default(&l);
        l.dp = 2;
        pt_grid_init(&g, &l);
        pt_kernels *kn = pt_kernels_cpu(1);
        if (pt_comm_groups(c, &g, &err) || pt_comm_use_device(c, kn, &err) == 0)
            rc = 4;
        save_msg(rank, err.msg);
        pt_kernels_destroy(kn);
        rc = rc ? rc : 5;
    }
    pt_comm_finalize(c);
    return rc ? rc : size == 1 ? 0 : 6;
}

/* The rank list of the messages: the first 16 by number, then a count; appended after
 * what out already holds; cut, never overrun, by a small buffer. */
static void test_rank_list(void)
{
    char out[256] = "waiting on ";
    pt_rank_list l = {out, sizeof out, strlen(out), 0, 0};
    for (int r = 0; r < 20; r++)
        pt_rank_list_add(&l, r * 2);
    pt_rank_list_end(&l);
    CHECK(strcmp(out, "waiting on 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, "
                      "30 and 4 more") == 0);
    char few[8] = "";
    pt_rank_list s = {few, sizeof few, 0, 0, 0};
    pt_rank_list_add(&s, 3);
    pt_rank_list_end(&s);
    CHECK(strcmp(few, "3") == 0);
    char tiny[6] = "";
    pt_rank_list t = {tiny, sizeof tiny, 0, 0, 0};
    for (int r = 100; r < 140; r++)
        pt_rank_list_add(&t, r);
    pt_rank_list_end(&t);
    CHECK(strcmp(tiny, "100, ") == 0);
}

static void test_init(void)
{
    int r0 = 0, r1 = 1, st[2];
    char msg[600];
    run_children(&r0, 1, init_as, st); /* rank 0 without a directory: a world of one */
    CHECK_INT(st[0], 0);
    run_children(&r1, 1, init_as, st); /* any other rank: refused */
    CHECK_INT(st[0], 3);
    read_msg(1, msg, sizeof msg);
    CHECK_STR_HAS(msg, "started as rank 1 of 2 (RANK/WORLD_SIZE) but without MPI");
    CHECK_STR_HAS(msg, "PT_RENDEZVOUS");

    int both[2] = {10, 11};
    run_children(both, 2, init_as, st);
    for (int i = 0; i < 2; i++) {
        read_msg(both[i], msg, sizeof msg);
        if (pt_comm_have_nccl()) {
            CHECK_INT(st[i], 5);
            CHECK_STR_HAS(msg, "the cpu backend has no NCCL");
        } else {
            CHECK_INT(st[i], 3);
            CHECK_STR_HAS(msg, "which this build lacks");
        }
    }
    clear_env();
}

int main(int argc, char **argv)
{
    snprintf(dir, sizeof dir, "%s/rdv.XXXXXX", argc > 1 ? argv[1] : "/tmp");
    if (!mkdtemp(dir)) {
        perror(dir);
        return 1;
    }
    test_rank_list();
    test_env();
    test_exchange();
    test_timeouts();
    test_abort();
    test_init();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_rendezvous: could not remove %s\n", dir);
    return pt_check_result();
}
