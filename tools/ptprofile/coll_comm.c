/*
 * ptprofile-coll's measurement: each op through the communication layer (comm.h), the
 * calls the runtime makes when it trains, so that the cost tables time the code ptrun
 * runs — its MPI nonblocking collectives waited on under the watchdog, its host
 * staging, its NCCL calls on the kernel backend's stream, its pipeline sends (a private
 * copy, then the transfer). --backend mpi measures host buffers over MPI (the CPU
 * runtime); --backend nccl device buffers over NCCL on the CUDA kernel backend (the
 * CUDA runtime). Every op runs over the group's world (kind < 0).
 *
 * Timing: on host buffers the host clock around the call, which returns complete; on
 * device buffers the kernel backend's events recorded around the call on its stream,
 * read after a sync, as nccl-tests times with CUDA events.
 */
#include "coll_bench.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pt_cb_comm_open(pt_cb_comm *cc, const char *backend, const pt_cb_topo *topo,
                    pt_err *err)
{
    *cc = (pt_cb_comm){.backend = backend};
    if (strcmp(backend, "nccl") == 0) {
        /* More local ranks than visible GPUs is not refused here: a launcher may show
         * each rank only its own GPU (CUDA_VISIBLE_DEVICES), and where ranks really do
         * share a GPU, the comm layer says so when it selects NCCL. */
        int count = pt_kernels_cuda_devices();
        if (count == 0)
            return pt_err_set(err, "no CUDA device: --backend nccl needs a GPU (rank %d: "
                                   "none visible, or this build's kernels have no CUDA)",
                              topo->rank);
        char why[256] = "";
        cc->kn = pt_kernels_cuda(topo->local_rank % count, why, sizeof why);
        if (!cc->kn)
            return pt_err_set(err, "rank %d cannot open CUDA device %d: %s", topo->rank,
                              topo->local_rank % count, why);
        cc->kn->note = pt_cli_note;
        cc->kn->note_arg = PT_CLI_KERNEL_NOTES;
    }
    /* MPI is running (main): the comm takes it as its world */
    if (pt_comm_init(NULL, NULL, &cc->world, err) != 0) {
        pt_kernels_destroy(cc->kn);
        cc->kn = NULL;
        return -1;
    }
    /* the comm's notes (a shared GPU; the watchdog's report), its groups' too */
    pt_comm_set_notes(cc->world, pt_cli_note, PT_CLI_COMM_NOTES);
    return 0;
}

void pt_cb_comm_close(pt_cb_comm *cc)
{
    pt_comm_finalize(cc->world); /* MPI stays up: main ends it */
    pt_kernels_destroy(cc->kn);
    *cc = (pt_cb_comm){0};
}

int pt_cb_group_split(const pt_cb_comm *cc, int size, pt_cb_group **out, pt_err *err)
{
    *out = NULL;
    pt_comm *comm = NULL;
    if (pt_comm_sub(cc->world, size, &comm, err) != 0)
        return -1;
    if (!comm)
        return 0; /* not in this group */
    pt_cb_group *g = calloc(1, sizeof *g);
    if (!g) {
        pt_comm_finalize(comm);
        return pt_err_set(err, "out of memory");
    }
    *g = (pt_cb_group){.comm = comm, .kn = cc->kn, .rank = pt_comm_rank(comm),
                       .size = pt_comm_size(comm), .ev_start = -1, .ev_stop = -1};
    *out = g;
    return 0;
}

int pt_cb_group_open(pt_cb_group *g, int64_t max_bytes, pt_err *err)
{
    if (g->kn) {
        if (pt_comm_use_device(g->comm, g->kn, err) != 0)
            return -1;
        const char *how = pt_comm_backend(g->comm);
        if (strcmp(how, "nccl") != 0)
            return pt_err_set(err, "--backend nccl: the communication layer moves device "
                                   "buffers by '%s' over %d ranks, not NCCL (ranks sharing "
                                   "a GPU, or PT_COMM_NCCL=0)", how, g->size);
        g->send = g->kn->alloc(g->kn, (size_t)max_bytes);
        g->recv = g->kn->alloc(g->kn, (size_t)max_bytes);
        if (!g->send || !g->recv)
            return pt_err_set(err, "out of device memory for two buffers of %lld bytes: %s",
                              (long long)max_bytes, g->kn->err);
        g->kn->zero(g->kn, g->send, (size_t)max_bytes);
        g->kn->zero(g->kn, g->recv, (size_t)max_bytes);
        /* the send pool now, as ptrun makes it before its first step: no timed send
         * allocates */
        if (pt_comm_reserve_sends(g->comm, max_bytes, err))
            return -1;
        return g->kn->sync(g->kn) == 0 ? 0 : pt_err_set(err, "%s", g->kn->err);
    }
    g->send = malloc((size_t)max_bytes);
    g->recv = malloc((size_t)max_bytes);
    if (!g->send || !g->recv)
        return pt_err_set(err, "out of host memory for two buffers of %lld bytes",
                          (long long)max_bytes);
    /* written now, so that no timed op pays for first-touch faults */
    memset(g->send, 0, (size_t)max_bytes);
    memset(g->recv, 0, (size_t)max_bytes);
    return 0;
}

void pt_cb_group_library(const pt_cb_group *g, char *buf, size_t cap)
{
    pt_comm_library(g->comm, buf, cap);
}

/* One op over the group's world, through the comm layer. */
static int call(pt_cb_group *g, pt_coll op, int64_t bytes, pt_err *err)
{
    int64_t count = bytes / 4, share = count / g->size;
    pt_comm *c = g->comm;
    switch (op) {
    case PT_COLL_ALLREDUCE:
        return pt_comm_allreduce(c, -1, g->send, count, err);
    case PT_COLL_ALLGATHER:
        return pt_comm_allgather(c, -1, g->send, g->recv, share, err);
    case PT_COLL_REDUCESCATTER:
        return pt_comm_reducescatter(c, -1, g->send, g->recv, share, err);
    case PT_COLL_ALLTOALL:
        return pt_comm_alltoall(c, -1, g->send, g->recv, share, err);
    case PT_COLL_BROADCAST:
        return pt_comm_broadcast(c, -1, g->send, count, err);
    case PT_COLL_SENDRECV:
        if (pt_comm_isend(c, (g->rank + 1) % g->size, 0, g->send, count, err) != 0 ||
            pt_comm_recv(c, (g->rank - 1 + g->size) % g->size, 0, g->recv, count, err) != 0)
            return -1;
        return pt_comm_wait_sends(c, err);
    case PT_COLL_COUNT:
        break;
    }
    return pt_err_set(err, "internal: collective %d", (int)op);
}

int pt_cb_group_run(pt_cb_group *g, pt_coll op, int64_t bytes, double *time_s, pt_err *err)
{
    int rc;
    if (!g->kn) {
        double t0 = MPI_Wtime();
        rc = call(g, op, bytes, err);
        *time_s = MPI_Wtime() - t0;
    } else {
        pt_kernels *kn = g->kn;
        double ms = 0;
        rc = kn->event_record(kn, &g->ev_start) != 0 ? pt_err_set(err, "%s", kn->err)
                                                      : call(g, op, bytes, err);
        if (rc == 0 && (kn->event_record(kn, &g->ev_stop) != 0 || kn->sync(kn) != 0 ||
                        kn->event_elapsed(kn, g->ev_start, g->ev_stop, &ms) != 0))
            rc = pt_err_set(err, "timing on the device: %s", kn->err);
        *time_s = ms * 1e-3;
    }
    if (rc == 0)
        return 0;
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    return pt_err_set(err, "%s of %lld bytes over %d ranks (%s) failed: %s", pt_coll_name(op),
                      (long long)bytes, g->size, pt_comm_backend(g->comm), why);
}

void pt_cb_group_close(pt_cb_group *g)
{
    if (!g)
        return;
    if (g->kn) {
        g->kn->sync(g->kn);
        if (g->send)
            g->kn->free(g->kn, g->send);
        if (g->recv)
            g->kn->free(g->kn, g->recv);
        g->kn->event_release(g->kn, g->ev_start);
        g->kn->event_release(g->kn, g->ev_stop);
    } else {
        free(g->send);
        free(g->recv);
    }
    pt_comm_finalize(g->comm);
    free(g);
}
