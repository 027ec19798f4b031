/*
 * ptprofile-coll's MPI backend: the collectives of the CPU runtime, on host buffers,
 * timed with MPI_Wtime. Buffers are out of place (a send and a receive buffer of
 * max_bytes each), as nccl-tests measures by default. Send/recv is a ring exchange:
 * each rank sends to (r+1)%g and receives from (r-1+g)%g at once, nccl-tests'
 * sendrecv pattern, so in a group of 2 both directions of one link are busy.
 */
#include "coll_bench.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    MPI_Comm comm; /* the group's, errors returned rather than fatal */
    int rank, size;
    float *send, *recv; /* [max_bytes / 4] each */
} mpi_group;

static int mpi_open(const pt_cb_topo *topo, void **state, pt_err *err)
{
    (void)topo;
    (void)err;
    *state = NULL;
    return 0;
}

static void mpi_library(void *state, char *buf, size_t cap)
{
    (void)state;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    version[strcspn(version, "\r\n")] = '\0'; /* the first line names the library */
    snprintf(buf, cap, "%s", version);
}

static void mpi_group_close(void *gp)
{
    mpi_group *g = gp;
    if (!g)
        return;
    if (g->comm != MPI_COMM_NULL)
        MPI_Comm_free(&g->comm);
    free(g->send);
    free(g->recv);
    free(g);
}

static int mpi_group_open(void *state, MPI_Comm comm, int64_t max_bytes, void **out,
                          pt_err *err)
{
    (void)state;
    mpi_group *g = calloc(1, sizeof *g);
    int rc = -1;
    if (g) {
        MPI_Comm_dup(comm, &g->comm);
        MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(g->comm, &g->rank);
        MPI_Comm_size(g->comm, &g->size);
        g->send = malloc((size_t)max_bytes);
        g->recv = malloc((size_t)max_bytes);
        rc = g->send && g->recv ? 0 : -1;
    }
    if (rc != 0)
        pt_err_set(err, "out of host memory for two buffers of %lld bytes",
                   (long long)max_bytes);
    else {
        /* Touch every page now, so that no timed op pays for first-touch faults. */
        for (int64_t i = 0; i < max_bytes / 4; i++)
            g->send[i] = (float)(i % 1024) * 0.001f;
        memset(g->recv, 0, (size_t)max_bytes);
    }
    if (pt_cb_agree(comm, rc, err) != 0) {
        mpi_group_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

static int mpi_call(const mpi_group *g, pt_coll op, int count)
{
    int n = g->size, share = count / n;
    switch (op) {
    case PT_COLL_ALLREDUCE:
        return MPI_Allreduce(g->send, g->recv, count, MPI_FLOAT, MPI_SUM, g->comm);
    case PT_COLL_ALLGATHER:
        return MPI_Allgather(g->send, share, MPI_FLOAT, g->recv, share, MPI_FLOAT, g->comm);
    case PT_COLL_REDUCESCATTER:
        return MPI_Reduce_scatter_block(g->send, g->recv, share, MPI_FLOAT, MPI_SUM, g->comm);
    case PT_COLL_ALLTOALL:
        return MPI_Alltoall(g->send, share, MPI_FLOAT, g->recv, share, MPI_FLOAT, g->comm);
    case PT_COLL_BROADCAST:
        return MPI_Bcast(g->rank == 0 ? g->send : g->recv, count, MPI_FLOAT, 0, g->comm);
    case PT_COLL_SENDRECV:
        return MPI_Sendrecv(g->send, count, MPI_FLOAT, (g->rank + 1) % n, 0, g->recv, count,
                            MPI_FLOAT, (g->rank - 1 + n) % n, 0, g->comm, MPI_STATUS_IGNORE);
    default:
        return MPI_ERR_OP;
    }
}

static int mpi_run(void *gp, pt_coll op, int64_t bytes, double *time_s, pt_err *err)
{
    const mpi_group *g = gp;
    double t0 = MPI_Wtime();
    int rc = mpi_call(g, op, (int)(bytes / 4));
    *time_s = MPI_Wtime() - t0;
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        return pt_err_set(err, "MPI %s of %lld bytes over %d ranks failed: %s",
                          pt_coll_name(op), (long long)bytes, g->size, text);
    }
    return 0;
}

static void mpi_close(void *state)
{
    (void)state;
}

const pt_cb_backend pt_cb_backend_mpi = {
    .name = "mpi",
    .open = mpi_open,
    .library = mpi_library,
    .group_open = mpi_group_open,
    .run = mpi_run,
    .group_close = mpi_group_close,
    .close = mpi_close,
};
