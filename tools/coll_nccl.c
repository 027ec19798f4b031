/*
 * ptprofile-coll's NCCL backend: the collectives of the CUDA runtime, on device
 * buffers, one GPU per rank (local rank modulo the visible devices), timed with
 * CUDA events around the op on the group's stream. MPI only sets things up: it
 * carries the ncclUniqueId from the group's rank 0 and agrees on errors. Each group
 * gets its own NCCL communicator (ncclCommInitRank over the group's ranks).
 *
 * All-to-all and send/recv are grouped ncclSend/ncclRecv calls, as nccl-tests
 * writes them (ncclAlltoAll exists only from NCCL 2.28). Send/recv is the ring
 * exchange of coll_mpi.c: to (r+1)%g, from (r-1+g)%g.
 *
 * This file is plain C against cuda_runtime.h and nccl.h; it needs no nvcc.
 */
#include "coll_bench.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>

#define CUDA_TRY(call)                                                                    \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess)                                                            \
            return pt_err_set(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call,            \
                              cudaGetErrorString(e_));                                    \
    } while (0)

#define NCCL_TRY(call)                                                                    \
    do {                                                                                  \
        ncclResult_t r_ = (call);                                                         \
        if (r_ != ncclSuccess)                                                            \
            return pt_err_set(err, "%s:%d: %s: %s", __FILE__, __LINE__, #call,            \
                              ncclGetErrorString(r_));                                    \
    } while (0)

typedef struct {
    int device;
} nccl_state;

typedef struct {
    ncclComm_t comm; /* NULL until initialised */
    cudaStream_t stream;
    cudaEvent_t start, stop;
    float *send, *recv; /* device, [max_bytes / 4] each */
    int rank, size;
} nccl_group;

static int pick_device(const pt_cb_topo *topo, int *device, pt_err *err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return pt_err_set(err, "no CUDA device: --backend nccl needs a GPU (rank %d: %s)",
                          topo->rank,
                          e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    /* More local ranks than visible GPUs is not refused here: a launcher may show
     * each rank only its own GPU (CUDA_VISIBLE_DEVICES), and where ranks really do
     * share a GPU, ncclCommInitRank says so. */
    *device = topo->local_rank % count;
    CUDA_TRY(cudaSetDevice(*device));
    return 0;
}

static int nccl_open(const pt_cb_topo *topo, void **state, pt_err *err)
{
    nccl_state *s = calloc(1, sizeof *s);
    if (!s)
        return pt_err_set(err, "out of memory");
    if (pick_device(topo, &s->device, err) != 0) {
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static void nccl_library(void *state, char *buf, size_t cap)
{
    (void)state;
    int v = 0;
    ncclGetVersion(&v);
    /* NCCL_VERSION_CODE: major·10000 + minor·100 + patch since 2.9. */
    snprintf(buf, cap, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

static void nccl_group_close(void *gp)
{
    nccl_group *g = gp;
    if (!g)
        return;
    if (g->comm)
        ncclCommDestroy(g->comm);
    cudaFree(g->send);
    cudaFree(g->recv);
    if (g->start)
        cudaEventDestroy(g->start);
    if (g->stop)
        cudaEventDestroy(g->stop);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    free(g);
}

static int alloc_group(nccl_group *g, int64_t max_bytes, pt_err *err)
{
    CUDA_TRY(cudaMalloc((void **)&g->send, (size_t)max_bytes));
    CUDA_TRY(cudaMalloc((void **)&g->recv, (size_t)max_bytes));
    CUDA_TRY(cudaMemset(g->send, 0, (size_t)max_bytes));
    CUDA_TRY(cudaMemset(g->recv, 0, (size_t)max_bytes));
    CUDA_TRY(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreate(&g->start));
    CUDA_TRY(cudaEventCreate(&g->stop));
    CUDA_TRY(cudaDeviceSynchronize());
    return 0;
}

/* Collective over comm, agreed: the group's rank 0 makes the id and sends it. */
static int share_unique_id(MPI_Comm comm, int rank, ncclUniqueId *id, pt_err *err)
{
    int rc = 0;
    if (rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess)
            rc = pt_err_set(err, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    if (pt_cb_agree(comm, rc, err) != 0)
        return -1;
    MPI_Bcast(id, (int)sizeof *id, MPI_BYTE, 0, comm);
    return 0;
}

static int nccl_group_open(void *state, MPI_Comm comm, int64_t max_bytes, void **out,
                           pt_err *err)
{
    (void)state;
    nccl_group *g = calloc(1, sizeof *g);
    int rc = g ? 0 : pt_err_set(err, "out of memory");
    if (g) {
        MPI_Comm_rank(comm, &g->rank);
        MPI_Comm_size(comm, &g->size);
        rc = alloc_group(g, max_bytes, err);
    }
    ncclUniqueId id;
    if (pt_cb_agree(comm, rc, err) != 0 || share_unique_id(comm, g->rank, &id, err) != 0) {
        nccl_group_close(g);
        return -1;
    }
    ncclResult_t r = ncclCommInitRank(&g->comm, g->size, id, g->rank);
    if (r != ncclSuccess) {
        g->comm = NULL;
        rc = pt_err_set(err, "ncclCommInitRank over %d ranks: %s", g->size,
                        ncclGetErrorString(r));
    }
    if (pt_cb_agree(comm, rc, err) != 0) {
        nccl_group_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

/* Enqueues op on the group's stream. */
static ncclResult_t nccl_call(const nccl_group *g, pt_coll op, size_t count)
{
    int n = g->size;
    size_t share = count / (size_t)n;
    switch (op) {
    case PT_COLL_ALLREDUCE:
        return ncclAllReduce(g->send, g->recv, count, ncclFloat, ncclSum, g->comm, g->stream);
    case PT_COLL_ALLGATHER:
        return ncclAllGather(g->send, g->recv, share, ncclFloat, g->comm, g->stream);
    case PT_COLL_REDUCESCATTER:
        return ncclReduceScatter(g->send, g->recv, share, ncclFloat, ncclSum, g->comm,
                                 g->stream);
    case PT_COLL_BROADCAST:
        return ncclBroadcast(g->send, g->recv, count, ncclFloat, 0, g->comm, g->stream);
    case PT_COLL_ALLTOALL:
        ncclGroupStart();
        for (int p = 0; p < n; p++) {
            ncclSend(g->send + (size_t)p * share, share, ncclFloat, p, g->comm, g->stream);
            ncclRecv(g->recv + (size_t)p * share, share, ncclFloat, p, g->comm, g->stream);
        }
        return ncclGroupEnd();
    case PT_COLL_SENDRECV:
        ncclGroupStart();
        ncclSend(g->send, count, ncclFloat, (g->rank + 1) % n, g->comm, g->stream);
        ncclRecv(g->recv, count, ncclFloat, (g->rank - 1 + n) % n, g->comm, g->stream);
        return ncclGroupEnd();
    default:
        return ncclInvalidArgument;
    }
}

static int nccl_run(void *gp, pt_coll op, int64_t bytes, double *time_s, pt_err *err)
{
    const nccl_group *g = gp;
    float ms = 0;
    CUDA_TRY(cudaEventRecord(g->start, g->stream));
    NCCL_TRY(nccl_call(g, op, (size_t)bytes / 4));
    CUDA_TRY(cudaEventRecord(g->stop, g->stream));
    CUDA_TRY(cudaEventSynchronize(g->stop));
    CUDA_TRY(cudaEventElapsedTime(&ms, g->start, g->stop));
    *time_s = ms * 1e-3;
    return 0;
}

static void nccl_close(void *state)
{
    free(state);
}

const pt_cb_backend pt_cb_backend_nccl = {
    .name = "nccl",
    .open = nccl_open,
    .library = nccl_library,
    .group_open = nccl_group_open,
    .run = nccl_run,
    .group_close = nccl_group_close,
    .close = nccl_close,
};
