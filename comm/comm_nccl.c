/*
 * The NCCL backend of the communication layer: collectives and pipeline transfers on
 * the CUDA kernel backend's device buffers, one NCCL communicator per process group
 * (and one for the world, which carries the point-to-point transfers between world
 * ranks). Each group's rank 0 makes the ncclUniqueId and the group's other ranks get it
 * over the group's MPI communicator, or, in a run without MPI, through the rendezvous
 * directory; so no master address or port is ever configured.
 *
 * Streams. Blocking calls are queued on the kernel backend's stream, so they are
 * ordered after the kernels that produced their input and before those that read their
 * output, with no host synchronisation. Asynchronous calls go on a communication stream
 * of this file, which first waits for an event recorded on the kernel stream; their
 * wait makes the kernel stream wait for an event recorded after them. NCCL's warning
 * about communicators used concurrently from several streams (NCCL user guide, "Using
 * multiple NCCL communicators concurrently") is why every asynchronous operation shares
 * the one communication stream, in issue order, which the caller keeps the same on
 * every rank.
 *
 * Sends. NCCL has no tags and a send blocks its stream until the receiver posts the
 * matching receive (NCCL user guide, "Point-to-point communication"), so a pipeline
 * rank that sent on its own stream and then waited for a receive could deadlock
 * against its neighbour doing the same. A send is therefore copied and queued, and
 * issued in one ncclGroupStart/End with this rank's next receive (the grouped
 * operations progress together, the pattern the guide gives for sendrecv), or before
 * its next collective, or by pt_comm_wait_sends.
 *
 * Communicators are nonblocking (ncclConfig_t.blocking = 0, NCCL 2.14 and newer): a
 * call may return ncclInProgress and this file polls ncclCommGetAsyncError until it is
 * done, watching a deadline and, in a run without MPI, the rendezvous abort file, so a
 * rank whose peers are gone reports it instead of hanging in ncclCommInitRank. After
 * the start that deadline is the watchdog's (comm_watch.c): a call that stays in
 * progress, and a host collective's wait for the stream, end the run with its report.
 * The host does not wait for queued operations, so a peer that stalls during one
 * shows only as a kernel stream that never finishes (kn->sync), which is not watched.
 *
 * The two tables at the end are this file's only entry points besides starting NCCL
 * (pt_nccl_open, pt_nccl_device_shared): pt_comm_be_nccl for device buffers, and
 * pt_comm_be_nccl_host for the host collectives of a run without MPI.
 *
 * Plain C against cuda_runtime.h and nccl.h; no nvcc needed.
 */
#include "comm_internal.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Seconds a communicator may take to start before the ranks are presumed gone. */
#define PT_NCCL_INIT_TIMEOUT_S 300.0

typedef struct {
    int to;
    void *copy;        /* device, freed in stream order once sent */
    int64_t bytes;
} queued_send;

struct pt_nccl {
    ncclComm_t comm[PT_COMM_SLOTS]; /* NULL: not in such a group, or a group of one */
    cudaStream_t kstream;           /* the kernel backend's; not ours to destroy */
    cudaStream_t cstream;           /* asynchronous collectives */
    int device;
    void *scratch;                  /* host collectives of a run without MPI */
    size_t scratch_bytes;
    queued_send *q;
    int nq, capq;
};

static int cuda_fail(pt_err *err, cudaError_t e, const char *what)
{
    return pt_err_set(err, "%s: %s", what, cudaGetErrorString(e));
}

#define CUDA_TRY(call)                                                                    \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess)                                                            \
            return cuda_fail(err, e_, #call);                                             \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until `comm` has finished what the call that returned r started (r is
 * ncclInProgress on a nonblocking communicator), up to timeout_s (0: no deadline),
 * watching the rendezvous abort file in a run without MPI. With `w`, the deadline is
 * the watchdog's (comm_watch.c), which reports w and ends the run when it passes. */
static int settle(pt_comm *c, ncclComm_t comm, ncclResult_t r, double timeout_s,
                  const char *what, const pt_comm_wait_for *w, pt_err *err)
{
    double t0 = now_s();
    if (w)
        timeout_s = c->timeout_s;
    for (int i = 0; r == ncclInProgress; i++) {
        ncclResult_t q = ncclCommGetAsyncError(comm, &r);
        if (q != ncclSuccess)
            r = q;
        if (r != ncclInProgress)
            break;
        if (c->file && i % 100 == 99 && pt_rdv_aborted(&c->rdv, err))
            return -1;
        if (timeout_s > 0 && now_s() - t0 > timeout_s)
            return w ? pt_comm_missed(c, w, now_s() - t0, err)
                     : pt_err_set(err, "%s: NCCL did not finish within %.0f s (a rank that "
                                       "never started, or a network NCCL cannot reach: see "
                                       "NCCL_SOCKET_IFNAME in README)", what, timeout_s);
        nap_ms(1);
    }
    if (r == ncclSuccess)
        return 0;
    const char *last = ncclGetLastError(comm);
    return pt_err_set(err, "%s: %s%s%s", what, ncclGetErrorString(r), last && *last ? ": " : "",
                      last ? last : "");
}

static ncclDataType_t nccl_type(pt_comm_type t)
{
    return t == PT_CT_F32 ? ncclFloat32 : t == PT_CT_F64 ? ncclFloat64
           : t == PT_CT_I32 ? ncclInt32 : ncclUint8;
}

/* ---- Communicators ---------------------------------------------------------------------- */

/* What a group's rank 0 hands its members: the id, or that it could not make one. */
typedef struct {
    int ok;
    ncclUniqueId id;
} id_msg;

static int share_id(pt_comm *c, int slot, id_msg *m, pt_err *err)
{
    const pt_comm_group *g = &c->grp[slot];
    if (g->rank == 0)
        m->ok = ncclGetUniqueId(&m->id) == ncclSuccess;
    if (c->file) {
        char name[64];
        snprintf(name, sizeof name, "nccl-id-%d-%d", slot, g->leader);
        if (pt_rdv_bcast(&c->rdv, name, g->leader, m, sizeof *m, err))
            return -1;
    } else {
        int rc = MPI_Bcast(m, (int)sizeof *m, MPI_BYTE, 0, c->group[slot]);
        if (rc != MPI_SUCCESS)
            return pt_err_set(err, "broadcasting the NCCL unique id of group %d failed", slot);
    }
    if (!m->ok)
        return pt_err_set(err, "ncclGetUniqueId failed on world rank %d (the first rank of "
                               "group %d)", g->leader, slot);
    return 0;
}

static int open_group(pt_comm *c, int slot, pt_err *err)
{
    const pt_comm_group *g = &c->grp[slot];
    id_msg m = {0};
    if (share_id(c, slot, &m, err))
        return -1;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, g->size, m.id, g->rank, &cfg);
    char what[160];
    snprintf(what, sizeof what, "ncclCommInitRank (group %d: rank %d of %d, world rank %d, "
                                "device %d; one GPU per rank)", slot, g->rank, g->size, c->rank,
             c->nccl->device);
    if (!comm)
        return pt_err_set(err, "%s: %s", what, ncclGetErrorString(r));
    c->nccl->comm[slot] = comm;
    double timeout = c->file ? c->rdv.timeout_s : PT_NCCL_INIT_TIMEOUT_S;
    return settle(c, comm, r, timeout, what, NULL, err);
}

int pt_nccl_device_shared(pt_comm *c, bool *shared, pt_err *err)
{
    /* a node's ranks share its memory (MPI_COMM_TYPE_SHARED); among them, compare the
     * devices' UUIDs, which stay the same whatever CUDA_VISIBLE_DEVICES renumbers */
    int dev = 0;
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "reading the device's UUID");
    MPI_Comm node, world = c->group[PT_COMM_WORLD];
    if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                            &node) != MPI_SUCCESS)
        return pt_err_set(err, "MPI_Comm_split_type failed");
    int n = 1;
    MPI_Comm_size(node, &n);
    char *all = malloc((size_t)n * sizeof prop.uuid.bytes);
    int rc = all ? 0 : pt_err_set(err, "out of memory");
    if (rc == 0 && MPI_Allgather(prop.uuid.bytes, (int)sizeof prop.uuid.bytes, MPI_BYTE, all,
                                 (int)sizeof prop.uuid.bytes, MPI_BYTE, node) != MPI_SUCCESS)
        rc = pt_err_set(err, "MPI_Allgather of the devices' UUIDs failed");
    int mine = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        for (int j = i + 1; j < n; j++)
            mine |= memcmp(all + (size_t)i * sizeof prop.uuid.bytes,
                           all + (size_t)j * sizeof prop.uuid.bytes, sizeof prop.uuid.bytes) == 0;
    free(all);
    MPI_Comm_free(&node);
    /* one answer for the world, so every rank takes the same path */
    int any = 0;
    if (rc == 0 && MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, world) != MPI_SUCCESS)
        rc = pt_err_set(err, "MPI_Allreduce failed");
    *shared = any != 0;
    return rc;
}

static void nccl_abort(pt_comm *c);

int pt_nccl_open(pt_comm *c, pt_err *err)
{
    pt_nccl *n = calloc(1, sizeof *n);
    if (!n)
        return pt_err_set(err, "out of memory");
    c->nccl = n;
    /* kernels/cuda/cuda.cuh keeps the stream first in the backend's context for this */
    n->kstream = *(cudaStream_t *)c->kn->priv;
    int rc = 0;
    cudaError_t e = cudaGetDevice(&n->device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&n->cstream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        rc = cuda_fail(err, e, "starting NCCL");
    /* Every rank walks the slots in the same order; the groups of one slot partition
     * the world, so each ncclCommInitRank has all its ranks and none waits on another
     * slot's. */
    for (int s = PT_COMM_WORLD; rc == 0 && s >= 0; s--)
        if (c->grp[s].in && c->grp[s].size > 1)
            rc = open_group(c, s, err);
    if (rc) {
        nccl_abort(c);
        return -1;
    }
    return 0;
}

static void free_queue(pt_nccl *n)
{
    for (int i = 0; i < n->nq; i++)
        cudaFree(n->q[i].copy);
    n->nq = 0;
}

static void nccl_close(pt_comm *c)
{
    pt_nccl *n = c->nccl;
    if (!n)
        return;
    /* the kernel backend (and its stream) may be gone already: wait for the device */
    cudaDeviceSynchronize();
    free_queue(n);
    for (int s = 0; s < PT_COMM_SLOTS; s++) {
        if (!n->comm[s])
            continue;
        /* ncclCommFinalize flushes what is queued; on a nonblocking communicator it
         * may return ncclInProgress (NCCL user guide, "Destroying a communicator") */
        settle(c, n->comm[s], ncclCommFinalize(n->comm[s]), PT_NCCL_INIT_TIMEOUT_S,
               "ncclCommFinalize", NULL, NULL);
        ncclCommDestroy(n->comm[s]);
    }
    if (n->cstream)
        cudaStreamDestroy(n->cstream);
    cudaFree(n->scratch);
    free(n->q);
    free(n);
    c->nccl = NULL;
}

/* ncclCommAbort on every communicator: what a failing rank does before it exits. */
static void nccl_abort(pt_comm *c)
{
    pt_nccl *n = c->nccl;
    if (!n)
        return;
    for (int s = 0; s < PT_COMM_SLOTS; s++)
        if (n->comm[s])
            ncclCommAbort(n->comm[s]);
    memset(n->comm, 0, sizeof n->comm);
    if (n->cstream)
        cudaStreamDestroy(n->cstream);
    free(n->q);
    free(n);
    c->nccl = NULL;
}

/* ---- Collectives ---------------------------------------------------------------------------- */

/* Queues op on `stream`; 0 or an NCCL error settled. */
static int enqueue(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                   void *out, int64_t n, cudaStream_t stream, pt_err *err)
{
    ncclComm_t comm = c->nccl->comm[slot];
    ncclDataType_t ty = nccl_type(t);
    size_t cnt = (size_t)n, es = pt_comm_type_bytes(t);
    ncclResult_t r;
    switch (op) {
    case PT_CO_SUM:
    case PT_CO_MAX:
    case PT_CO_MIN:
        r = ncclAllReduce(in, out, cnt, ty,
                          op == PT_CO_SUM ? ncclSum : op == PT_CO_MAX ? ncclMax : ncclMin, comm,
                          stream);
        break;
    case PT_CO_BCAST:
        r = ncclBroadcast(in, out, cnt, ty, 0, comm, stream);
        break;
    case PT_CO_RS: /* recvcount = n; in holds n per rank */
        r = ncclReduceScatter(in, out, cnt, ty, ncclSum, comm, stream);
        break;
    case PT_CO_AG: /* in-place when in == out + rank·n, which NCCL allows */
        r = ncclAllGather(in, out, cnt, ty, comm, stream);
        break;
    default: /* PT_CO_A2A: grouped sends and receives, as nccl-tests' alltoall */
        r = ncclGroupStart();
        for (int p = 0; p < c->grp[slot].size && r == ncclSuccess; p++) {
            r = ncclSend((const char *)in + (size_t)p * cnt * es, cnt, ty, p, comm, stream);
            if (r == ncclSuccess)
                r = ncclRecv((char *)out + (size_t)p * cnt * es, cnt, ty, p, comm, stream);
        }
        {
            ncclResult_t end = ncclGroupEnd();
            if (r == ncclSuccess)
                r = end;
        }
        break;
    }
    size_t bytes = cnt * es * (op == PT_CO_RS || op == PT_CO_AG || op == PT_CO_A2A
                               ? (size_t)c->grp[slot].size : 1);
    pt_comm_wait_for w = {.op = pt_comm_op_name(op), .slot = slot, .bytes = (int64_t)bytes};
    return settle(c, comm, r, 0, "NCCL collective", &w, err);
}

static int nccl_flush(pt_comm *c, pt_err *err);

/* op over slot on device buffers: blocking ones queued on the kernel backend's stream;
 * async ones on the communication stream, *req set. */
static int nccl_coll(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                     void *out, int64_t n, pt_comm_req **req, pt_err *err)
{
    pt_nccl *nc = c->nccl;
    if (nccl_flush(c, err))
        return -1;
    if (!req)
        return enqueue(c, op, slot, t, in, out, n, nc->kstream, err);
    /* after the kernels queued so far, on the communication stream */
    cudaEvent_t ready = NULL, done = NULL;
    CUDA_TRY(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ready, nc->kstream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(nc->cstream, ready, 0);
    /* destroying a recorded event is safe: its resources go once it completes (CUDA
     * runtime API, cudaEventDestroy) */
    cudaEventDestroy(ready);
    if (e != cudaSuccess)
        return cuda_fail(err, e, "ordering an asynchronous collective");
    if (enqueue(c, op, slot, t, in, out, n, nc->cstream, err))
        return -1;
    CUDA_TRY(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    pt_comm_req *r = calloc(1, sizeof *r);
    if (!r || (e = cudaEventRecord(done, nc->cstream)) != cudaSuccess) {
        cudaEventDestroy(done);
        free(r);
        return r ? cuda_fail(err, e, "cudaEventRecord") : pt_err_set(err, "out of memory");
    }
    r->event = done;
    *req = r;
    return 0;
}

static int nccl_wait(pt_comm *c, pt_comm_req *req, pt_err *err)
{
    cudaError_t e = cudaStreamWaitEvent(c->nccl->kstream, (cudaEvent_t)req->event, 0);
    cudaEventDestroy((cudaEvent_t)req->event);
    free(req);
    return e == cudaSuccess ? 0 : cuda_fail(err, e, "waiting for an asynchronous collective");
}

/* Waits for the kernel stream, checking the rendezvous abort file every 100 ms: a host
 * collective of a run without MPI may wait long (rank 0 writing a checkpoint) but must
 * end when another rank has failed, or, reported as w, when the watchdog's deadline
 * passes. */
static int wait_stream(pt_comm *c, const pt_comm_wait_for *w, pt_err *err)
{
    double t0 = now_s();
    for (int i = 0;; i++) {
        cudaError_t e = cudaStreamQuery(c->nccl->kstream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_fail(err, e, "a host collective");
        if (i % 100 == 99 && pt_rdv_aborted(&c->rdv, err)) {
            nccl_abort(c);
            return -1;
        }
        if (c->timeout_s > 0 && now_s() - t0 > c->timeout_s)
            return pt_comm_missed(c, w, now_s() - t0, err);
        nap_ms(1);
    }
}

/* op over slot on host buffers, through a device buffer, waited for: the host
 * collectives of a run without MPI (blocking only: every asynchronous call takes
 * [backend] buffers). */
static int nccl_host_coll(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t,
                          const void *in, void *out, int64_t n, pt_comm_req **req,
                          pt_err *err)
{
    pt_nccl *nc = c->nccl;
    if (req)
        return pt_err_set(err, "internal: an asynchronous %s on host buffers without MPI",
                          pt_comm_op_name(op));
    size_t es = pt_comm_type_bytes(t);
    int64_t n_in, n_out;
    pt_comm_op_sizes(op, n, c->grp[slot].size, &n_in, &n_out);
    size_t in_bytes = ((size_t)n_in * es + 255) & ~(size_t)255, out_bytes = (size_t)n_out * es;
    if (nccl_flush(c, err))
        return -1;
    if (in_bytes + out_bytes > nc->scratch_bytes) {
        CUDA_TRY(cudaStreamSynchronize(nc->kstream)); /* queued work may use the old one */
        cudaFree(nc->scratch);
        nc->scratch = NULL;
        nc->scratch_bytes = 0;
        CUDA_TRY(cudaMalloc(&nc->scratch, in_bytes + out_bytes));
        nc->scratch_bytes = in_bytes + out_bytes;
    }
    char *din = nc->scratch, *dout = din + in_bytes;
    CUDA_TRY(cudaMemcpyAsync(din, in, (size_t)n_in * es, cudaMemcpyHostToDevice, nc->kstream));
    if (enqueue(c, op, slot, t, din, dout, n, nc->kstream, err))
        return -1;
    CUDA_TRY(cudaMemcpyAsync(out, dout, out_bytes, cudaMemcpyDeviceToHost, nc->kstream));
    pt_comm_wait_for w = {.op = "host collective", .slot = slot,
                          .bytes = (int64_t)(in_bytes > out_bytes ? in_bytes : out_bytes)};
    return wait_stream(c, &w, err);
}

/* ---- Point to point --------------------------------------------------------------------------- */

/* NCCL has no tags: tag is unused (receives are posted in the order of the sends). */
static int nccl_send(pt_comm *c, int to, int tag, const void *buf, int64_t n, pt_comm_type t,
                     pt_err *err)
{
    (void)tag;
    pt_nccl *nc = c->nccl;
    int64_t bytes = n * (int64_t)pt_comm_type_bytes(t);
    if (nc->nq == nc->capq) {
        int cap = nc->capq ? 2 * nc->capq : 16;
        queued_send *v = realloc(nc->q, (size_t)cap * sizeof *v);
        if (!v)
            return pt_err_set(err, "out of memory");
        nc->q = v;
        nc->capq = cap;
    }
    queued_send *s = &nc->q[nc->nq];
    s->to = to;
    s->bytes = bytes;
    s->copy = NULL;
    /* stream-ordered allocation (CUDA 11.2+): cheap, and freed in order after the send */
    CUDA_TRY(cudaMallocAsync(&s->copy, bytes ? (size_t)bytes : 1, nc->kstream));
    CUDA_TRY(cudaMemcpyAsync(s->copy, buf, (size_t)bytes, cudaMemcpyDeviceToDevice,
                             nc->kstream));
    nc->nq++;
    return 0;
}

/* The queued sends, and a receive when buf is non-NULL, as one NCCL group. */
static int p2p_group(pt_comm *c, int from, void *buf, int64_t bytes, pt_err *err)
{
    pt_nccl *nc = c->nccl;
    ncclComm_t world = nc->comm[PT_COMM_WORLD];
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < nc->nq && r == ncclSuccess; i++)
        r = ncclSend(nc->q[i].copy, (size_t)nc->q[i].bytes, ncclUint8, nc->q[i].to, world,
                     nc->kstream);
    if (buf && r == ncclSuccess)
        r = ncclRecv(buf, (size_t)bytes, ncclUint8, from, world, nc->kstream);
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess)
        r = end;
    pt_comm_wait_for w = {.op = buf ? "receive" : "send", .slot = -1,
                          .peer = buf ? from : nc->nq ? nc->q[0].to : -1, .bytes = bytes};
    int rc = settle(c, world, r, 0, buf ? "NCCL receive" : "NCCL send", &w, err);
    for (int i = 0; i < nc->nq; i++)
        cudaFreeAsync(nc->q[i].copy, nc->kstream);
    nc->nq = 0;
    return rc;
}

static int nccl_recv(pt_comm *c, int from, int tag, void *buf, int64_t n, pt_comm_type t,
                     pt_err *err)
{
    (void)tag;
    return p2p_group(c, from, buf, n * (int64_t)pt_comm_type_bytes(t), err);
}

/* Issues the sends nccl_send queued. */
static int nccl_flush(pt_comm *c, pt_err *err)
{
    if (!c->nccl || c->nccl->nq == 0)
        return 0;
    return p2p_group(c, -1, NULL, 0, err);
}

static void nccl_library(char *buf, size_t cap)
{
    int v = 0;
    ncclGetVersion(&v);
    /* NCCL_VERSION_CODE: major·10000 + minor·100 + patch since 2.9 */
    snprintf(buf, cap, "NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
}

/* ---- The tables ------------------------------------------------------------------------------ */

const pt_comm_be pt_comm_be_nccl = {
    .name = "nccl",
    .library = nccl_library,
    .coll = nccl_coll,
    .wait = nccl_wait,
    .send = nccl_send,
    .recv = nccl_recv,
    .flush = nccl_flush,
    .gather = NULL, /* NCCL has no gather: two all-gathers (comm.c) */
    .close = nccl_close,
    .abort = nccl_abort,
};

/* Host buffers of a run without MPI: collectives only (transfers are [backend]); the
 * device table closes and aborts the communicators both share. */
const pt_comm_be pt_comm_be_nccl_host = {
    .name = "nccl",
    .library = nccl_library,
    .coll = nccl_host_coll,
    .wait = NULL,
    .send = NULL,
    .recv = NULL,
    .flush = NULL,
    .gather = NULL,
    .close = NULL,
    .abort = NULL,
};
