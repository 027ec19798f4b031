/*
 * The NCCL backend of the communication layer: collectives and pipeline transfers on
 * the CUDA kernel backend's device buffers, one NCCL communicator per process group
 * and the world, and one per direction between neighbours (the links, which carry the
 * point-to-point transfers). Each communicator's first rank makes the ncclUniqueId and
 * the others get it over MPI, or, in a run without MPI, through the rendezvous
 * directory; so no master address or port is ever configured.
 *
 * Streams. Blocking calls are queued on the kernel backend's stream, so they are
 * ordered after the kernels that produced their input and before those that read their
 * output, with no host synchronisation. Asynchronous calls go on a communication stream
 * of this file, which first waits for an event recorded on the kernel stream; their
 * wait makes the kernel stream wait for an event recorded after them. NCCL's warning
 * about communicators used concurrently from several streams (NCCL user guide, "Using
 * multiple NCCL communicators concurrently") is why every asynchronous collective
 * shares the one communication stream, in issue order, which the caller keeps the same
 * on every rank. Sends run on streams of their own (below): NCCL kernels of different
 * communicators then run side by side, which the guide says works while they fit on
 * the GPU together (a point-to-point kernel takes a few blocks), and which PyTorch's
 * ProcessGroupNCCL relies on as well (a communicator and a stream per pair of ranks
 * for send and receive).
 *
 * Sends. NCCL has no tags, and a send or receive blocks its stream until the peer's
 * matching call runs ("This operation is blocking for the GPU", NCCL API, ncclSend and
 * ncclRecv). Issuing a rank's queued sends in one group with its next receive, on the
 * kernel stream, deadlocks interleaved 1F1B whenever it has more micro-batches than
 * stages: two neighbours' groups each hold a send whose receive the other posts only
 * later on its own kernel stream (pt_sched_check_nccl finds 63 of 84 cases,
 * tests/comm/test_sched_nccl.c). So each send is its own NCCL operation (its own
 * group) on a send stream of its link: the kernel stream copies buf into a send slot
 * after the kernels that produced it and records an event, the send stream waits for
 * that event and sends, and records an event the slot's next copy waits for. Receives
 * stay on the kernel stream, so kernels after them see the data. A blocked send then
 * holds up only later sends to the same peer, which pt_sched_check_nccl proves
 * deadlock-free for every schedule (pt_comm_nccl_p2p, comm.c, states the policy and the
 * slot count for it; the model's one send stream per rank is stricter than ours).
 *
 * Links. NCCL serialises the operations of one communicator whatever the streams they
 * are issued on (it adds CUDA events between them: NCCL maintainers in NVIDIA/nccl
 * issues #574, "NCCL collective operations on a given communicator are always
 * serialized", and #592, same communicator on different streams "will be
 * serialized"), so sends on a send stream and receives on the kernel stream over one
 * communicator would run in issue order, one FIFO again, and deadlock as above. Each
 * direction between two neighbours therefore has a two-rank communicator of its own
 * (rank 0 sends, rank 1 receives), used by one stream on each side. Links join the
 * neighbours of three rings: the pipeline group (pipeline transfers), the
 * context-parallel group (ring attention) and the world of a pt_comm_sub
 * (ptprofile-coll's ring); transfers between other ranks are refused. NCCL connects
 * point-to-point peers at their first transfer, which waits for the peer to connect
 * too (NVIDIA/nccl issue #783: "connections for send/receive ... are created upon the
 * first exchange between two ranks"); a host waiting there in a step could not issue
 * what its peer waits for, so each link makes its first transfer, one byte, when it is
 * made (the probe).
 *
 * Send slots are device memory allocated outside a step (nccl_reserve, or
 * pt_comm_wait_sends growing them to the largest send seen): cudaMalloc and cudaFree
 * may synchronise the device, which would wait for a send blocked on its peer ("any
 * CUDA operation can cause a device synchronization", NCCL user guide, "Using multiple
 * NCCL communicators concurrently"). A send larger than a slot before then takes a
 * stream-ordered allocation (cudaMallocAsync on the kernel stream, cudaFreeAsync after
 * the send), which does not.
 *
 * Communicators are nonblocking (ncclConfig_t.blocking = 0, NCCL 2.14 and newer): a
 * call may return ncclInProgress and this file polls ncclCommGetAsyncError until it is
 * done, watching a deadline and, in a run without MPI, the rendezvous abort file, so a
 * rank whose peers are gone reports it instead of hanging in ncclCommInitRank. After
 * the start that deadline is the watchdog's (comm_watch.c): a call that stays in
 * progress, and a host collective's wait for the stream, end the run with its report.
 * The host does not wait for queued operations, except the sends in
 * pt_comm_wait_sends (under the watchdog's deadline), so a peer that stalls during a
 * collective or receive shows only as a kernel stream that never finishes (kn->sync),
 * which is not watched.
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

/* One direction between this rank and a neighbour: a two-rank communicator whose rank
 * 0 sends and rank 1 receives. */
typedef struct {
    int peer;             /* world rank */
    bool send;            /* this rank sends on it, else receives */
    ncclComm_t comm;
    cudaStream_t stream;  /* the sender's send stream; NULL on the receiver */
} nccl_link;

/* Two directions to each of two neighbours in each ring of link_rings (the world's
 * only in a comm without the others). */
#define PT_NCCL_MAX_LINKS 12

/* The send slots (pt_comm_nccl_p2p.send_slots of them), taken in turn: ready[i] is
 * recorded on the kernel stream after the copy into slot i (its send waits for it),
 * sent[i] on the send stream after slot i's send (its next copy waits for it). */
typedef struct {
    char *base;           /* n · slot_bytes, device; NULL until allocated */
    int64_t slot_bytes;
    int n, next;
    cudaEvent_t *ready, *sent;
    bool *used;           /* sent[i] has been recorded */
    int64_t want_bytes;   /* the largest send so far: what the slots grow to */
} send_pool;

struct pt_nccl {
    ncclComm_t comm[PT_COMM_SLOTS]; /* NULL: not in such a group, or a group of one */
    cudaStream_t *kstream;          /* the kernel backend's current stream (its main one,
                                       or its side one between stream_select(kn, 1) and
                                       (kn, 0)): read at each call, so that collectives
                                       follow the kernels queued where they were; not
                                       ours to destroy */
    cudaStream_t cstream;           /* asynchronous collectives */
    int device;
    void *scratch;                  /* host collectives of a run without MPI */
    size_t scratch_bytes;
    nccl_link link[PT_NCCL_MAX_LINKS];
    int n_link;
    send_pool pool;
    void *probe;                    /* device bytes of each link's first transfer */
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
                                       "NCCL_SOCKET_IFNAME in docs/ptrun.md)", what, timeout_s);
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
           : t == PT_CT_I32                      ? ncclInt32
           : t == PT_CT_BF16 || t == PT_CT_BF16W ? ncclBfloat16
                                                 : ncclUint8;
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

/* ---- Links: a communicator per direction between neighbours ------------------------------ */

/* The rings whose neighbours get links: the pipeline group (pipeline transfers), the
 * context-parallel group (ring attention, runtime/attention.c) and, in a comm without
 * groups (pt_comm_sub), the world (ptprofile-coll's ring, tools/ptprofile/coll_comm.c). */
static const int link_rings[] = {PT_GROUP_PP, PT_GROUP_CP, PT_COMM_WORLD};

/* The MPI tag of a link's unique id (no other transfer is in flight while links open). */
#define PT_NCCL_LINK_TAG 31001

static nccl_link *find_link(pt_nccl *nc, int peer, bool send)
{
    for (int i = 0; i < nc->n_link; i++)
        if (nc->link[i].peer == peer && nc->link[i].send == send)
            return &nc->link[i];
    return NULL;
}

/* World rank of member i of slot's group (group order; the world: rank i). */
static int member(const pt_comm *c, int slot, int i)
{
    return c->members[slot] ? c->members[slot][i] : i;
}

/* The sender's unique id to the receiver: over MPI, or as a file of the rendezvous. */
static int share_link_id(pt_comm *c, int from, int to, id_msg *m, pt_err *err)
{
    if (c->rank == from)
        m->ok = ncclGetUniqueId(&m->id) == ncclSuccess;
    if (c->file) {
        char name[64];
        snprintf(name, sizeof name, "nccl-link-%d-%d", from, to);
        if (pt_rdv_bcast(&c->rdv, name, from, m, sizeof *m, err))
            return -1;
    } else {
        MPI_Comm world = c->group[PT_COMM_WORLD];
        int rc = c->rank == from
                     ? MPI_Send(m, (int)sizeof *m, MPI_BYTE, to, PT_NCCL_LINK_TAG, world)
                     : MPI_Recv(m, (int)sizeof *m, MPI_BYTE, from, PT_NCCL_LINK_TAG, world,
                                MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return pt_comm_mpi_fail(err, rc, "passing the NCCL unique id of a link");
    }
    if (!m->ok)
        return pt_err_set(err, "ncclGetUniqueId failed on world rank %d", from);
    return 0;
}

/* Makes the link from world rank `from` to `to`, this rank being one of them (both
 * call it together), and its first transfer, one byte, so that NCCL connects the two
 * now. A link made before (another ring's) is kept. */
static int open_link(pt_comm *c, int from, int to, pt_err *err)
{
    pt_nccl *nc = c->nccl;
    bool send = c->rank == from;
    int peer = send ? to : from;
    if (find_link(nc, peer, send))
        return 0;
    if (nc->n_link == PT_NCCL_MAX_LINKS)
        return pt_err_set(err, "internal: more than %d NCCL links", PT_NCCL_MAX_LINKS);
    id_msg m = {0};
    if (share_link_id(c, from, to, &m, err))
        return -1;
    nccl_link *l = &nc->link[nc->n_link];
    *l = (nccl_link){.peer = peer, .send = send};
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&l->comm, 2, m.id, send ? 0 : 1, &cfg);
    char what[128];
    snprintf(what, sizeof what, "ncclCommInitRank (link from world rank %d to %d, device %d)",
             from, to, nc->device);
    if (!l->comm)
        return pt_err_set(err, "%s: %s", what, ncclGetErrorString(r));
    nc->n_link++;
    double timeout = c->file ? c->rdv.timeout_s : PT_NCCL_INIT_TIMEOUT_S;
    if (settle(c, l->comm, r, timeout, what, NULL, err))
        return -1;
    cudaStream_t stream = nc->cstream; /* the receiver's probe: nothing else runs there yet */
    if (send) {
        CUDA_TRY(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking));
        stream = l->stream;
    }
    r = send ? ncclSend(nc->probe, 1, ncclUint8, 1, l->comm, stream)
             : ncclRecv((char *)nc->probe + 128, 1, ncclUint8, 0, l->comm, stream);
    if (settle(c, l->comm, r, timeout, what, NULL, err))
        return -1;
    CUDA_TRY(cudaStreamSynchronize(stream));
    return 0;
}

/* The round in which the edge between members e and e + 1 (mod n) of a ring opens:
 * e % 2, but the closing edge of an odd ring in round 2; so each rank is in at most
 * one edge of a round. */
static int edge_round(int e, int n)
{
    return n % 2 && e == n - 1 ? 2 : e % 2;
}

/* The links of every ring of link_rings in both directions (d = +1: to the next
 * member; -1: to the previous; one direction serves a ring of two), round by round.
 * Every rank walks rings, directions and rounds in the same order and makes a link
 * with its peer, which is at the same place of that walk, and only waits for links
 * earlier in it; so all links open. Collective over the world. */
static int open_links(pt_comm *c, pt_err *err)
{
    CUDA_TRY(cudaMalloc(&c->nccl->probe, 256));
    for (size_t k = 0; k < sizeof link_rings / sizeof *link_rings; k++) {
        int slot = link_rings[k];
        const pt_comm_group *g = &c->grp[slot];
        if (!g->in || g->size < 2 || (slot == PT_COMM_WORLD && !c->sub))
            continue;
        int n = g->size, i = g->rank;
        for (int d = 1; d >= -1; d -= 2) {
            if (d < 0 && n == 2)
                continue;
            int e_send = d > 0 ? i : (i - 1 + n) % n, e_recv = d > 0 ? (i - 1 + n) % n : i;
            int next = member(c, slot, (i + d + n) % n), prev = member(c, slot, (i - d + n) % n);
            for (int round = 0; round < 3; round++) {
                int rc = 0;
                if (edge_round(e_send, n) == round)
                    rc = open_link(c, c->rank, next, err);
                else if (edge_round(e_recv, n) == round)
                    rc = open_link(c, prev, c->rank, err);
                if (rc)
                    return -1;
            }
        }
    }
    return 0;
}

static void nccl_abort(pt_comm *c);

int pt_nccl_open(pt_comm *c, pt_err *err)
{
    pt_nccl *n = calloc(1, sizeof *n);
    if (!n)
        return pt_err_set(err, "out of memory");
    c->nccl = n;
    /* kernels/cuda/cuda.cuh keeps the current stream first in the backend's context for
     * this */
    n->kstream = (cudaStream_t *)c->kn->priv;
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
    if (rc == 0)
        rc = open_links(c, err);
    if (rc) {
        nccl_abort(c);
        return -1;
    }
    return 0;
}

static void pool_free(send_pool *p)
{
    for (int i = 0; i < p->n; i++) {
        if (p->ready)
            cudaEventDestroy(p->ready[i]);
        if (p->sent)
            cudaEventDestroy(p->sent[i]);
    }
    cudaFree(p->base);
    free(p->ready);
    free(p->sent);
    free(p->used);
    *p = (send_pool){0};
}

static void nccl_close(pt_comm *c)
{
    pt_nccl *n = c->nccl;
    if (!n)
        return;
    /* the kernel backend (and its stream) may be gone already: wait for the device */
    cudaDeviceSynchronize();
    pool_free(&n->pool);
    for (int i = 0; i < n->n_link; i++) {
        settle(c, n->link[i].comm, ncclCommFinalize(n->link[i].comm), PT_NCCL_INIT_TIMEOUT_S,
               "ncclCommFinalize", NULL, NULL);
        ncclCommDestroy(n->link[i].comm);
        if (n->link[i].stream)
            cudaStreamDestroy(n->link[i].stream);
    }
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
    cudaFree(n->probe);
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
    for (int i = 0; i < n->n_link; i++)
        ncclCommAbort(n->link[i].comm);
    memset(n->comm, 0, sizeof n->comm);
    n->n_link = 0;
    if (n->cstream)
        cudaStreamDestroy(n->cstream);
    free(n->pool.ready);
    free(n->pool.sent);
    free(n->pool.used);
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

/* All-to-all with counts per rank on `stream`: grouped sends and receives, as
 * enqueue's all-to-all, at offsets that are the counts' prefix sums; blocks of no
 * elements are skipped (both sides agree on them: a rank's send count is its peer's
 * receive count). 0 or an NCCL error settled. */
static int enqueue_v(pt_comm *c, int slot, pt_comm_type t, const void *in,
                     const int64_t *send_counts, void *out, const int64_t *recv_counts,
                     cudaStream_t stream, pt_err *err)
{
    ncclComm_t comm = c->nccl->comm[slot];
    ncclDataType_t ty = nccl_type(t);
    size_t es = pt_comm_type_bytes(t);
    int64_t sent = 0, received = 0;
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < c->grp[slot].size && r == ncclSuccess; p++) {
        if (send_counts[p] > 0)
            r = ncclSend((const char *)in + (size_t)sent * es, (size_t)send_counts[p], ty, p,
                         comm, stream);
        if (r == ncclSuccess && recv_counts[p] > 0)
            r = ncclRecv((char *)out + (size_t)received * es, (size_t)recv_counts[p], ty, p,
                         comm, stream);
        sent += send_counts[p];
        received += recv_counts[p];
    }
    ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess)
        r = end;
    pt_comm_wait_for w = {.op = pt_comm_op_name(PT_CO_A2A), .slot = slot,
                          .bytes = (sent > received ? sent : received) * (int64_t)es};
    return settle(c, comm, r, 0, "NCCL all-to-all", &w, err);
}

/* Orders the communication stream after the kernels queued so far on the kernel
 * stream: the start of an asynchronous collective. */
static int async_begin(pt_nccl *nc, pt_err *err)
{
    cudaEvent_t ready = NULL;
    CUDA_TRY(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ready, *nc->kstream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(nc->cstream, ready, 0);
    /* destroying a recorded event is safe: its resources go once it completes (CUDA
     * runtime API, cudaEventDestroy) */
    cudaEventDestroy(ready);
    return e == cudaSuccess ? 0 : cuda_fail(err, e, "ordering an asynchronous collective");
}

/* The request of what was just queued on the communication stream: an event recorded
 * after it, which nccl_wait makes the kernel stream wait for. */
static int async_end(pt_nccl *nc, pt_comm_req **req, pt_err *err)
{
    cudaEvent_t done = NULL;
    cudaError_t e = cudaSuccess;
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

/* op over slot on device buffers: blocking ones queued on the kernel backend's stream;
 * async ones on the communication stream, *req set. */
static int nccl_coll(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                     void *out, int64_t n, pt_comm_req **req, pt_err *err)
{
    pt_nccl *nc = c->nccl;
    if (!req)
        return enqueue(c, op, slot, t, in, out, n, *nc->kstream, err);
    if (async_begin(nc, err) || enqueue(c, op, slot, t, in, out, n, nc->cstream, err))
        return -1;
    return async_end(nc, req, err);
}

/* All-to-all with counts per rank on device buffers, queued as nccl_coll queues. */
static int nccl_alltoallv(pt_comm *c, int slot, pt_comm_type t, const void *in,
                          const int64_t *send_counts, void *out, const int64_t *recv_counts,
                          pt_comm_req **req, pt_err *err)
{
    pt_nccl *nc = c->nccl;
    if (!req)
        return enqueue_v(c, slot, t, in, send_counts, out, recv_counts, *nc->kstream, err);
    if (async_begin(nc, err) ||
        enqueue_v(c, slot, t, in, send_counts, out, recv_counts, nc->cstream, err))
        return -1;
    return async_end(nc, req, err);
}

static int nccl_wait(pt_comm *c, pt_comm_req *req, pt_err *err)
{
    cudaError_t e = cudaStreamWaitEvent(*c->nccl->kstream, (cudaEvent_t)req->event, 0);
    cudaEventDestroy((cudaEvent_t)req->event);
    free(req);
    return e == cudaSuccess ? 0 : cuda_fail(err, e, "waiting for an asynchronous collective");
}

/* Waits on the host for `stream`, polling, with the watchdog's deadline (reporting w)
 * and, in a run without MPI, the rendezvous abort file checked every hundred polls: a
 * host collective there may wait long (rank 0 writing a checkpoint) but must end when
 * another rank has failed. */
static int wait_stream(pt_comm *c, cudaStream_t stream, const pt_comm_wait_for *w,
                       pt_err *err)
{
    double t0 = now_s();
    for (int i = 0;; i++) {
        cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_fail(err, e, w->op);
        if (c->file && i % 100 == 99 && pt_rdv_aborted(&c->rdv, err)) {
            nccl_abort(c);
            return -1;
        }
        double waited = now_s() - t0;
        if (c->timeout_s > 0 && waited > c->timeout_s)
            return pt_comm_missed(c, w, waited, err);
        pt_comm_nap(waited);
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
    if (in_bytes + out_bytes > nc->scratch_bytes) {
        CUDA_TRY(cudaStreamSynchronize(*nc->kstream)); /* queued work may use the old one */
        cudaFree(nc->scratch);
        nc->scratch = NULL;
        nc->scratch_bytes = 0;
        CUDA_TRY(cudaMalloc(&nc->scratch, in_bytes + out_bytes));
        nc->scratch_bytes = in_bytes + out_bytes;
    }
    char *din = nc->scratch, *dout = din + in_bytes;
    CUDA_TRY(cudaMemcpyAsync(din, in, (size_t)n_in * es, cudaMemcpyHostToDevice, *nc->kstream));
    if (enqueue(c, op, slot, t, din, dout, n, *nc->kstream, err))
        return -1;
    CUDA_TRY(cudaMemcpyAsync(out, dout, out_bytes, cudaMemcpyDeviceToHost, *nc->kstream));
    pt_comm_wait_for w = {.op = "host collective", .slot = slot,
                          .bytes = (int64_t)(in_bytes > out_bytes ? in_bytes : out_bytes)};
    return wait_stream(c, *nc->kstream, &w, err);
}

/* ---- Point to point ------------------------------------------------------------------------ */

/* Allocates the send slots at `bytes` each (rounded up to 256, cudaMalloc's alignment),
 * freeing smaller ones: only when no send is in flight (after every send stream has
 * been waited for), outside a step. */
static int pool_grow(pt_nccl *nc, int64_t bytes, pt_err *err)
{
    send_pool *p = &nc->pool;
    bytes = (bytes + 255) & ~(int64_t)255;
    if (bytes <= p->slot_bytes)
        return 0;
    if (!p->ready) {
        int n = pt_comm_nccl_p2p.send_slots;
        p->ready = calloc((size_t)n, sizeof *p->ready);
        p->sent = calloc((size_t)n, sizeof *p->sent);
        p->used = calloc((size_t)n, sizeof *p->used);
        if (!p->ready || !p->sent || !p->used)
            return pt_err_set(err, "out of memory");
        for (; p->n < n; p->n++) {
            CUDA_TRY(cudaEventCreateWithFlags(&p->ready[p->n], cudaEventDisableTiming));
            CUDA_TRY(cudaEventCreateWithFlags(&p->sent[p->n], cudaEventDisableTiming));
        }
    }
    cudaFree(p->base);
    p->base = NULL;
    p->slot_bytes = 0;
    memset(p->used, 0, (size_t)p->n * sizeof *p->used);
    cudaError_t e = cudaMalloc((void **)&p->base, (size_t)(bytes * p->n));
    if (e != cudaSuccess)
        return pt_err_set(err, "%d NCCL send slots of %lld bytes: %s", p->n, (long long)bytes,
                          cudaGetErrorString(e));
    p->slot_bytes = bytes;
    return 0;
}

/* The copy a send reads (*copy), taken on the kernel stream after the work queued
 * there (so after the kernels that produced buf; the caller may reuse buf at once), and
 * the send stream `s` made to wait for it. In the next slot (*slot), once that slot's
 * last send has completed; a send larger than a slot in a stream-ordered allocation of
 * its own (*slot = -1), until pt_comm_wait_sends grows the slots. */
static int send_copy(pt_nccl *nc, cudaStream_t s, const void *buf, int64_t bytes,
                     void **copy, int *slot, pt_err *err)
{
    send_pool *p = &nc->pool;
    p->want_bytes = bytes > p->want_bytes ? bytes : p->want_bytes;
    *slot = -1;
    if (bytes <= p->slot_bytes && p->n > 0) {
        int i = p->next;
        p->next = (i + 1) % p->n;
        if (p->used[i])
            CUDA_TRY(cudaStreamWaitEvent(*nc->kstream, p->sent[i], 0));
        *copy = p->base + (int64_t)i * p->slot_bytes;
        CUDA_TRY(cudaMemcpyAsync(*copy, buf, (size_t)bytes, cudaMemcpyDeviceToDevice,
                                 *nc->kstream));
        CUDA_TRY(cudaEventRecord(p->ready[i], *nc->kstream));
        CUDA_TRY(cudaStreamWaitEvent(s, p->ready[i], 0));
        *slot = i;
        return 0;
    }
    /* cudaMallocAsync and cudaFreeAsync never wait for the device (CUDA 11.2+) */
    CUDA_TRY(cudaMallocAsync(copy, (size_t)bytes, *nc->kstream));
    CUDA_TRY(cudaMemcpyAsync(*copy, buf, (size_t)bytes, cudaMemcpyDeviceToDevice, *nc->kstream));
    cudaEvent_t ready = NULL;
    CUDA_TRY(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ready, *nc->kstream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(s, ready, 0);
    cudaEventDestroy(ready); /* safe once recorded: freed when it completes */
    return e == cudaSuccess ? 0 : cuda_fail(err, e, "ordering a send after its copy");
}

/* A send of a copy of buf, its own NCCL operation on its link's send stream (the
 * file's opening comment says why). NCCL has no tags: tag is unused (receives are
 * posted in the order of the sends). */
static int nccl_send(pt_comm *c, int to, int tag, const void *buf, int64_t n, pt_comm_type t,
                     pt_err *err)
{
    (void)tag;
    pt_nccl *nc = c->nccl;
    nccl_link *l = find_link(nc, to, true);
    if (!l)
        return pt_err_set(err, "a send from world rank %d to %d over NCCL: NCCL transfers go "
                               "between neighbours of the pipeline, context-parallel and "
                               "world rings only", c->rank, to);
    int64_t bytes = n * (int64_t)pt_comm_type_bytes(t);
    void *copy = nc->probe;
    int slot = -1;
    if (bytes > 0 && send_copy(nc, l->stream, buf, bytes, &copy, &slot, err))
        return -1;
    pt_comm_wait_for w = {.op = "send", .slot = -1, .peer = to, .bytes = bytes};
    int rc = settle(c, l->comm, ncclSend(copy, (size_t)bytes, ncclUint8, 1, l->comm, l->stream),
                    0, "NCCL send", &w, err);
    cudaError_t e = cudaSuccess;
    if (slot >= 0) {
        e = cudaEventRecord(nc->pool.sent[slot], l->stream);
        nc->pool.used[slot] = e == cudaSuccess;
    } else if (bytes > 0) {
        e = cudaFreeAsync(copy, l->stream);
    }
    return rc ? rc : e == cudaSuccess ? 0 : cuda_fail(err, e, "after a send");
}

/* A receive on the kernel stream, from the link `from` sends on. */
static int nccl_recv(pt_comm *c, int from, int tag, void *buf, int64_t n, pt_comm_type t,
                     pt_err *err)
{
    (void)tag;
    nccl_link *l = find_link(c->nccl, from, false);
    if (!l)
        return pt_err_set(err, "a receive by world rank %d from %d over NCCL: NCCL transfers "
                               "go between neighbours of the pipeline, context-parallel and "
                               "world rings only", c->rank, from);
    int64_t bytes = n * (int64_t)pt_comm_type_bytes(t);
    pt_comm_wait_for w = {.op = "receive", .slot = -1, .peer = from, .bytes = bytes};
    return settle(c, l->comm, ncclRecv(bytes > 0 ? buf : c->nccl->probe, (size_t)bytes,
                                       ncclUint8, 0, l->comm, *c->nccl->kstream),
                  0, "NCCL receive", &w, err);
}

/* pt_comm_wait_sends: waits on the host for every send stream, then grows the send
 * slots to the largest send so far (no send is in flight: outside a step). */
static int nccl_flush(pt_comm *c, pt_err *err)
{
    pt_nccl *nc = c->nccl;
    if (!nc)
        return 0;
    for (int i = 0; i < nc->n_link; i++) {
        const nccl_link *l = &nc->link[i];
        pt_comm_wait_for w = {.op = "send", .slot = -1, .peer = l->peer,
                              .bytes = nc->pool.want_bytes};
        if (l->send && wait_stream(c, l->stream, &w, err))
            return -1;
    }
    return pool_grow(nc, nc->pool.want_bytes, err);
}

/* pt_comm_reserve_sends: every posted send completed, then slots of `bytes`. */
static int nccl_reserve(pt_comm *c, int64_t bytes, pt_err *err)
{
    pt_nccl *nc = c->nccl;
    if (nccl_flush(c, err))
        return -1;
    nc->pool.want_bytes = bytes > nc->pool.want_bytes ? bytes : nc->pool.want_bytes;
    return pool_grow(nc, nc->pool.want_bytes, err);
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
    .alltoallv = nccl_alltoallv,
    .wait = nccl_wait,
    .send = nccl_send,
    .recv = nccl_recv,
    .flush = nccl_flush,
    .reserve = nccl_reserve,
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
    .alltoallv = NULL, /* [backend] buffers only */
    .wait = NULL,
    .send = NULL,
    .recv = NULL,
    .flush = NULL,
    .reserve = NULL,
    .gather = NULL,
    .close = NULL,
    .abort = NULL,
};
