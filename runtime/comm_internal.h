/*
 * What the communication layer's files share (comm.c: the run, its groups, MPI and
 * host staging; comm_nccl.c: NCCL on device buffers; rendezvous.c needs none of it):
 * the pt_comm context, requests, and the NCCL backend's entry points, which exist only
 * where the build found NCCL (PT_RT_HAVE_NCCL).
 */
#ifndef PT_COMM_INTERNAL_H
#define PT_COMM_INTERNAL_H

#include "runtime.h"

#include <mpi.h>

/* Group slots: the grid's kinds, then the tied-embedding pair, then the world
 * (kind < 0). */
enum { PT_COMM_EMBED = PT_GROUP_COUNT, PT_COMM_WORLD, PT_COMM_SLOTS };

/* Operations and element types, shared by the MPI and NCCL paths. Counts: for
 * sum, max, min and broadcast the buffer's elements; for reduce-scatter, all-gather
 * and all-to-all the elements per rank. */
typedef enum { PT_CO_SUM, PT_CO_MAX, PT_CO_MIN, PT_CO_RS, PT_CO_AG, PT_CO_A2A,
               PT_CO_BCAST } pt_comm_op;
typedef enum { PT_CT_F32, PT_CT_F64, PT_CT_I32, PT_CT_BYTE } pt_comm_type;

/* How [backend] buffers travel. */
typedef enum {
    PT_MEM_HOST,    /* they are host memory: MPI on them directly */
    PT_MEM_STAGED,  /* device memory, copied through host memory for MPI */
    PT_MEM_NCCL     /* device memory, NCCL */
} pt_comm_mem;

/* This rank's place in one group (from the planner's grid; the world by itself). */
typedef struct {
    bool in;        /* this rank belongs to a group of this kind */
    int rank, size; /* in the group, ordered by world rank as MPI_Comm_split orders */
    int leader;     /* world rank of the group's rank 0 */
} pt_comm_group;

/* A send posted over MPI: the private copy MPI reads until the send completes. */
/* What a wait waits for, as the watchdog reports it. */
typedef struct {
    const char *op;   /* "all-reduce", "receive", ... */
    int slot;         /* the group's slot; -1: point to point with `peer` */
    int peer;         /* world rank */
    int64_t bytes;    /* this rank's buffer */
} pt_comm_wait_for;

typedef struct {
    MPI_Request req;
    void *copy;
    pt_comm_wait_for what;
} pt_comm_send;

typedef struct pt_nccl pt_nccl;

struct pt_comm {
    bool mpi;          /* MPI started (a launcher gave us a world) */
    bool file;         /* ranks met through the rendezvous directory: no MPI */
    int rank, size, local_rank;
    MPI_Comm group[PT_COMM_SLOTS];
    pt_comm_group grp[PT_COMM_SLOTS];
    bool grouped;      /* pt_comm_groups done */
    pt_comm_send *sends;
    int n_sends, cap_sends;
    pt_kernels *kn;    /* set by pt_comm_use_device / pt_comm_use_staging */
    pt_comm_mem mem;
    pt_nccl *nccl;     /* PT_MEM_NCCL */
    pt_rdv rdv;        /* file */
    int *members[PT_COMM_SLOTS]; /* world ranks of each group, in group order (NULL:
                                  * the world, or not grouped yet) */
    /* The watchdog (comm_watch.c): every wait ends by timeout_s (0: never). */
    double timeout_s;
    int64_t step;      /* pt_comm_set_context: the trainer's step, < 0 none */
    const char *doing; /* and what it is doing there */
    bool timeout_returns; /* tests: a missed deadline returns its error, no abort */
};

/* An asynchronous operation: MPI requests, host staging buffers copied back into dst
 * once the requests complete, or the NCCL backend's completion event. */
struct pt_comm_req {
    MPI_Request mpi[8];
    int n_mpi;
    void *host_in, *host_out;
    void *dst;          /* [backend] destination of host_out's dst_bytes bytes */
    size_t dst_bytes;
    void *event;        /* NCCL: a cudaEvent_t recorded after the operation */
    pt_comm_wait_for what; /* for the watchdog */
};

size_t pt_comm_type_bytes(pt_comm_type t);
/* "all-reduce", "reduce-scatter", ...: op as errors and the watchdog name it. */
const char *pt_comm_op_name(pt_comm_op op);


/* The deadline PT_COMM_TIMEOUT asks for, else the default. Errors: not a number >= 0. */
int pt_comm_timeout_from_env(double *timeout_s, pt_err *err);
/* Waits for the n requests q under c's deadline, polling (MPI_Testall and
 * pt_comm_nap). 0 when all are done; an MPI error named with w->op; a missed deadline
 * as pt_comm_missed. */
int pt_comm_await(pt_comm *c, int n, MPI_Request *q, const pt_comm_wait_for *w, pt_err *err);
/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double pt_comm_now_s(void);
/* One pause of a polling wait that has waited waited_s: none at first (the wait is
 * likely short and MPI_Wait would spin as well), then naps growing to a few hundred
 * microseconds, so an idle rank leaves its core to others. */
void pt_comm_nap(double waited_s);
/* Past c's deadline by waited_s: reports w with the step and the peers on stderr and
 * ends the run (pt_comm_abort); under timeout_returns, -1 with the report in err. */
int pt_comm_missed(pt_comm *c, const pt_comm_wait_for *w, double waited_s, pt_err *err);

/* Elements of the input and output buffers of op with count n (see pt_comm_op) on a
 * group of `size` ranks. */
static inline void pt_comm_op_sizes(pt_comm_op op, int64_t n, int size, int64_t *in,
                                    int64_t *out)
{
    *in = op == PT_CO_RS || op == PT_CO_A2A ? n * size : n;
    *out = op == PT_CO_AG || op == PT_CO_A2A ? n * size : n;
}

#ifdef PT_RT_HAVE_NCCL
/* Makes a communicator for the world and for every group this rank is in (after
 * cudaSetDevice: the kernel backend's device), each unique id broadcast over the
 * group's MPI communicator, or through the rendezvous directory when c->file.
 * Collective over the world. */
int pt_nccl_open(pt_comm *c, pt_err *err);
/* Under MPI: whether two ranks of one node use the same GPU (same device UUID), which
 * NCCL refuses ("Duplicate GPU detected"); collective over the world. -1 on error. */
int pt_nccl_device_shared(pt_comm *c, bool *shared, pt_err *err);
void pt_nccl_close(pt_comm *c);
/* ncclCommAbort on every communicator: what a failing rank does before it exits. */
void pt_nccl_abort(pt_comm *c);
/* op over slot on device buffers: blocking ones queued on the kernel backend's stream;
 * async ones on the communication stream, *req set. */
int pt_nccl_coll(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                 void *out, int64_t n, pt_comm_req **req, pt_err *err);
/* op over slot on host buffers, through a device buffer, waited for: the host
 * collectives of a run without MPI. */
int pt_nccl_host_coll(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                      void *out, int64_t n, pt_err *err);
int pt_nccl_wait(pt_comm *c, pt_comm_req *req, pt_err *err);
int pt_nccl_send(pt_comm *c, int to, const void *buf, int64_t bytes, pt_err *err);
int pt_nccl_recv(pt_comm *c, int from, void *buf, int64_t bytes, pt_err *err);
/* Issues the sends pt_nccl_send queued. */
int pt_nccl_flush(pt_comm *c, pt_err *err);
#endif

#endif
