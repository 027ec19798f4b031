/*
 * The communication watchdog: every wait of a collective or pipeline transfer has a
 * deadline, so that a rank that stalls (stopped, swapping, stuck in a driver) or dies
 * without its launcher noticing ends the run with a report instead of leaving the
 * other ranks spinning in MPI for ever. This file owns the deadline (PT_COMM_TIMEOUT,
 * pt_comm_opts), the trainer's context that the report names
 * (pt_comm_set_context), the polling wait on MPI requests that comm_mpi.c uses in
 * place of MPI_Wait, and the report itself.
 *
 * Why poll: a blocking MPI call cannot be given a deadline, and an MPI request of a
 * collective may be neither cancelled nor freed (MPI 3.1, section 5.12), so a rank
 * that misses a deadline cannot go on communicating: it reports and ends the job
 * (MPI_Abort, through pt_comm_abort), which also takes down a stopped rank (the
 * launcher kills it).
 *
 * The calls that cannot poll — MPI_Init, which waits for every rank of the world, the
 * first collective after it, and the MPI_Comm_split of each group — run under a guard
 * (pt_comm_guard_start): a thread that ends the process if the stage has not completed
 * by its deadline (the start's own, the groups' the watchdog's), so that a rank stopped
 * or lost before it joins cannot leave the others in MPI_Init for ever either.
 */
#include "comm_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The default deadline: as long as the rendezvous (PT_RENDEZVOUS_TIMEOUT) and NCCL's
 * start (comm_nccl.c) may take. No healthy wait comes near it: the longest are ranks
 * waiting for rank 0 to finish validation or a checkpoint write, seconds to a minute
 * even for large models, while a hung job costs every GPU of the run until someone
 * notices; PyTorch's default for NCCL process groups is of the same order (10 min). */
#define PT_COMM_TIMEOUT_DEFAULT_S 300.0

/* Polling: MPI_Wait itself spins, so a wait spins as well for its first SPIN_S (most
 * waits of a step end well within it, and sleeping would delay them), then naps from
 * NAP_MIN_S doubling to NAP_MAX_S: an idle rank leaves its core to others (ranks
 * oversubscribed on a CPU, BLAS threads) and a long wait ends at most NAP_MAX_S late. */
#define SPIN_S 0.010
#define NAP_MIN_S 20e-6
#define NAP_MAX_S 250e-6

int pt_comm_timeout_from_env(double *timeout_s, pt_err *err)
{
    *timeout_s = PT_COMM_TIMEOUT_DEFAULT_S;
    const char *s = getenv("PT_COMM_TIMEOUT");
    if (!s)
        return 0;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= 0 && v <= 1e9))
        return pt_err_set(err, "PT_COMM_TIMEOUT='%s': expected seconds >= 0 (0: no deadline)",
                          s);
    *timeout_s = v;
    return 0;
}

void pt_comm_set_timeout(pt_comm *c, double seconds)
{
    if (c)
        c->timeout_s = seconds > 0 ? seconds : 0;
}

double pt_comm_timeout(const pt_comm *c) { return c ? c->timeout_s : 0; }

void pt_comm_set_context(pt_comm *c, int64_t step, const char *doing)
{
    if (!c)
        return;
    c->step = step;
    c->doing = doing;
}

double pt_comm_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pt_comm_nap(double waited_s)
{
    if (waited_s < SPIN_S)
        return;
    /* the nap doubles with each 2^k NAP_MIN_S past the spin, as a backoff would */
    double nap = NAP_MIN_S;
    while (nap < NAP_MAX_S && nap < waited_s - SPIN_S)
        nap *= 2;
    if (nap > NAP_MAX_S)
        nap = NAP_MAX_S;
    struct timespec ts = {0, (long)(nap * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- The report ---------------------------------------------------------------------------- */

static const char *slot_name(int slot)
{
    if (slot == PT_COMM_EMBED)
        return "the tied-embedding pair";
    if (slot == PT_COMM_WORLD || slot < 0)
        return "the world";
    return pt_group_name((pt_group_kind)slot);
}

/* Appends "1, 3, 5 and 12 more" (the members of slot other than this rank) to out. */
static void list_peers(const pt_comm *c, int slot, char *out, size_t cap)
{
    const pt_comm_group *g = &c->grp[slot];
    pt_rank_list l = {out, cap, strlen(out), 0, 0};
    for (int i = 0; i < g->size; i++) {
        int r = c->members[slot] ? c->members[slot][i] : i;
        if (r != c->rank)
            pt_rank_list_add(&l, r);
    }
    pt_rank_list_end(&l);
}

int pt_comm_missed(pt_comm *c, const pt_comm_wait_for *w, double waited_s, pt_err *err)
{
    char what[256], when[128], peers[160] = "";
    if (w->slot < 0) {
        snprintf(what, sizeof what, "%s of %lld bytes %s world rank %d", w->op,
                 (long long)w->bytes, strcmp(w->op, "send") == 0 ? "to" : "from", w->peer);
        snprintf(peers, sizeof peers, "%d", w->peer);
    } else {
        snprintf(what, sizeof what, "%s of %lld bytes over %s (%d ranks)", w->op,
                 (long long)w->bytes, slot_name(w->slot), c->grp[w->slot].size);
        list_peers(c, w->slot, peers, sizeof peers);
    }
    if (c->step >= 0)
        snprintf(when, sizeof when, "in step %lld (%s)", (long long)c->step,
                 c->doing ? c->doing : "training");
    else
        snprintf(when, sizeof when, "%s", c->doing ? c->doing : "outside the training steps");
    char line[700];
    snprintf(line, sizeof line, "comm timeout: %s %s did not finish within %.0f s, waiting on "
                                "world rank(s) %s: a rank stalled or died, or the network is "
                                "lost; ending the run (the deadline: --comm-timeout or "
                                "PT_COMM_TIMEOUT)", what, when, waited_s, peers);
    if (c->timeout_returns)
        return pt_err_set(err, "%s", line);
    pt_comm_abort(c, 1, line); /* does not return */
    return -1;
}

/* ---- Waiting on MPI ------------------------------------------------------------------------- */

int pt_comm_await(pt_comm *c, int n, MPI_Request *q, const pt_comm_wait_for *w, pt_err *err)
{
    double t0 = 0;
    for (int i = 0;; i++) {
        int done = 0, rc = MPI_Testall(n, q, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
            char text[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, text, &len);
            return pt_err_set(err, "%s: %s", w->op, text);
        }
        if (done)
            return 0;
        if (i == 0) {
            t0 = pt_comm_now_s(); /* not before: a wait that is done at once costs no clock */
            continue;
        }
        double waited = pt_comm_now_s() - t0;
        if (c->timeout_s > 0 && waited > c->timeout_s)
            return pt_comm_missed(c, w, waited, err);
        pt_comm_nap(waited);
    }
}

/* ---- Stages that cannot poll ------------------------------------------------------------ */

static void *guard_main(void *arg)
{
    pt_comm_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    int rc = 0;
    while (!g->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&g->cv, &g->mu, &g->deadline);
    if (!g->done) {
        /* the main thread is inside MPI and may stay there: say why and end here */
        if (g->note)
            g->note(g->note_arg, g->line);
        _exit(1);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int pt_comm_guard_start(pt_comm_guard *g, const pt_comm *c, const char *stage, double seconds,
                        const char *knob, pt_err *err)
{
    memset(g, 0, sizeof *g);
    if (seconds <= 0)
        return 0;
    snprintf(g->line, sizeof g->line, "rank %d: %s did not complete within %g s: a rank "
             "stalled or died before reaching it, or the launcher lost one; ending the run "
             "(the deadline: %s)", c->rank, stage, seconds, knob);
    g->note = c->note;
    g->note_arg = c->note_arg;
    clock_gettime(CLOCK_MONOTONIC, &g->deadline);
    double whole = floor(seconds);
    g->deadline.tv_sec += (time_t)whole;
    g->deadline.tv_nsec += (long)((seconds - whole) * 1e9);
    if (g->deadline.tv_nsec >= 1000000000L) {
        g->deadline.tv_sec++;
        g->deadline.tv_nsec -= 1000000000L;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&g->thread, NULL, guard_main, g);
    if (rc) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        return pt_err_set(err, "cannot start the deadline of %s: %s", stage, strerror(rc));
    }
    g->armed = true;
    return 0;
}

void pt_comm_guard_end(pt_comm_guard *g)
{
    if (!g->armed)
        return;
    pthread_mutex_lock(&g->mu);
    g->done = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    g->armed = false;
}
