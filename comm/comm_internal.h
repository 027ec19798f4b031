/*
 * What the communication layer's files share (comm.c: the world, its groups, the
 * choice of backend and the calls every caller makes; comm_mpi.c: MPI on host buffers
 * and host staging of device buffers; comm_nccl.c: NCCL; comm_watch.c: deadlines;
 * rendezvous.c needs none of it): the pt_comm context, requests, and the backend
 * table. The NCCL backend exists only where the build found NCCL (PT_COMM_HAVE_NCCL).
 * Tests may include this header (test_comm_watchdog sets timeout_returns).
 */
#ifndef PT_COMM_INTERNAL_H
#define PT_COMM_INTERNAL_H

#include "comm.h"

#include <mpi.h>
#include <pthread.h>
#include <time.h>

/* Group slots: the grid's kinds, then the tied-embedding pair, then the world
 * (kind < 0). */
enum { PT_COMM_EMBED = PT_GROUP_COUNT, PT_COMM_WORLD, PT_COMM_SLOTS };

/* Operations and element types, shared by the MPI and NCCL paths. Counts: for
 * sum, max, min and broadcast the buffer's elements; for reduce-scatter, all-gather
 * and all-to-all the elements per rank. */
typedef enum { PT_CO_SUM, PT_CO_MAX, PT_CO_MIN, PT_CO_RS, PT_CO_AG, PT_CO_A2A,
               PT_CO_BCAST } pt_comm_op;
/* PT_CT_BF16W: bf16 reduced as bf16 (PT_COMM_BF16_WIRE); PT_CT_BF16 is reduced in
 * fp32 on MPI. */
typedef enum { PT_CT_F32, PT_CT_F64, PT_CT_I32, PT_CT_BYTE, PT_CT_BF16,
               PT_CT_BF16W } pt_comm_type;

/* This rank's place in one group (from the planner's grid; the world by itself). */
typedef struct {
    bool in;        /* this rank belongs to a group of this kind */
    int rank, size; /* in the group, ordered by world rank as MPI_Comm_split orders */
    int leader;     /* world rank of the group's rank 0 */
} pt_comm_group;

/* What a wait waits for, as the watchdog reports it. */
typedef struct {
    const char *op;   /* "all-reduce", "receive", ... */
    int slot;         /* the group's slot; -1: point to point with `peer` */
    int peer;         /* world rank */
    int64_t bytes;    /* this rank's buffer */
} pt_comm_wait_for;

/* A send posted over MPI: the private copy MPI reads until the send completes. */
typedef struct {
    MPI_Request req;
    void *copy;
    pt_comm_wait_for what;
} pt_comm_send;

typedef struct pt_nccl pt_nccl;

/* ---- The backend table -------------------------------------------------------------------- */

/* How one kind of buffer travels: one table per backend, chosen once per comm (at
 * pt_comm_init for host buffers, at pt_comm_use_device / pt_comm_use_staging for
 * [backend] buffers), so no call below asks which backend it is on. comm.c's front
 * handles what every backend shares first: the group slot, a group of one (local), a
 * world of one. Entries marked optional may be NULL; the front asks before it calls. */
typedef struct {
    const char *name;   /* "mpi", "mpi+staging", "nccl", ... (pt_comm_backend) */
    /* The library and version that moves the buffers, one line (pt_comm_library). */
    void (*library)(char *buf, size_t cap);
    /* op over `slot` (a group of two or more ranks that this rank is in), count n as
     * pt_comm_op says. Blocking with req NULL; else started, *req set (optional:
     * NULL when the backend has no asynchronous form). */
    int (*coll)(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                void *out, int64_t n, pt_comm_req **req, pt_err *err);
    /* All-to-all with counts per rank over `slot` (a group of two or more ranks that
     * this rank is in): send_counts and recv_counts (the group's size entries, elements
     * of t) checked by the front (none negative, each sum within int64 bytes), blocks
     * back to back in group order; named "all-to-all" in errors and the watchdog's
     * report. Blocking with req NULL; else started, *req set. Optional: NULL where the
     * backend has none (the front refuses the call). */
    int (*alltoallv)(pt_comm *c, int slot, pt_comm_type t, const void *in,
                     const int64_t *send_counts, void *out, const int64_t *recv_counts,
                     pt_comm_req **req, pt_err *err);
    /* Completes and frees a request coll started (NULL where coll never starts one). */
    int (*wait)(pt_comm *c, pt_comm_req *req, pt_err *err);
    /* Point to point between world ranks (n elements of t); a send returns at once and
     * flush completes every posted send (NULL: host buffers have no transfers). */
    int (*send)(pt_comm *c, int to, int tag, const void *buf, int64_t n, pt_comm_type t,
                pt_err *err);
    int (*recv)(pt_comm *c, int from, int tag, void *buf, int64_t n, pt_comm_type t,
                pt_err *err);
    int (*flush)(pt_comm *c, pt_err *err);
    /* Room for sends of up to `bytes` (pt_comm_reserve_sends; optional: NULL where a
     * send needs none). */
    int (*reserve)(pt_comm *c, int64_t bytes, pt_err *err);
    /* Every rank's n bytes to world rank 0 (pt_comm_gather_bytes; optional: NULL gathers
     * with two all-gathers). */
    int (*gather)(pt_comm *c, const void *buf, int64_t n, void **all, int64_t *sizes,
                  pt_err *err);
    /* Releases what the backend holds, at the end (optional); abort: at once, when a
     * rank fails (optional). */
    void (*close)(pt_comm *c);
    void (*abort)(pt_comm *c);
} pt_comm_be;

/* comm_mpi.c: MPI on host buffers; device buffers copied through host memory for MPI. */
extern const pt_comm_be pt_comm_be_mpi, pt_comm_be_staged;
/* comm.c: a run without MPI before NCCL is open; every call is refused. */
extern const pt_comm_be pt_comm_be_unready;
#ifdef PT_COMM_HAVE_NCCL
/* comm_nccl.c: NCCL on device buffers; host buffers through a device buffer (the
 * host collectives of a run without MPI: coll only). */
extern const pt_comm_be pt_comm_be_nccl, pt_comm_be_nccl_host;
#endif

struct pt_comm {
    bool mpi;          /* MPI in use (a launcher gave us a world, or the caller began it) */
    bool own_mpi;      /* we called MPI_Init, so pt_comm_finalize ends MPI */
    bool file;         /* ranks met through the rendezvous directory: no MPI */
    bool sub;          /* made by pt_comm_sub: group[PT_COMM_WORLD] is ours to free */
    int rank, size, local_rank;
    MPI_Comm group[PT_COMM_SLOTS]; /* group[PT_COMM_WORLD]: this comm's world */
    pt_comm_group grp[PT_COMM_SLOTS];
    bool grouped;      /* pt_comm_groups done */
    pt_comm_send *sends;
    int n_sends, cap_sends;
    pt_kernels *kn;    /* set by pt_comm_use_device / pt_comm_use_staging */
    const pt_comm_be *dev;  /* how [backend] buffers travel */
    const pt_comm_be *host; /* how [host] buffers travel */
    bool on_device;    /* [backend] buffers are the kernel backend's device memory */
    pt_nccl *nccl;     /* NCCL open (pt_comm_be_nccl, pt_comm_be_nccl_host) */
    pt_rdv rdv;        /* file */
    int *members[PT_COMM_SLOTS]; /* world ranks of each group, in group order (NULL:
                                  * the world, or not grouped yet) */
    /* The watchdog (comm_watch.c): every wait ends by timeout_s (0: never). */
    double timeout_s;
    int64_t step;      /* pt_comm_set_context: the trainer's step, < 0 none */
    const char *doing; /* and what it is doing there */
    bool timeout_returns; /* tests: a missed deadline returns its error, no abort */
    pt_comm_note_fn note; /* pt_comm_set_notes: where notes go (NULL: dropped) */
    void *note_arg;
};

/* An asynchronous operation: MPI requests, host staging buffers copied back into dst
 * once the requests complete, or the NCCL backend's completion event. A bf16
 * reduction on MPI runs in fp32 (host_out); completing it rounds host_out's b16_n
 * elements into b16_to, which is host_b16 when that is staged on to dst. */
struct pt_comm_req {
    MPI_Request mpi[8];
    int n_mpi;
    void *host_in, *host_out;
    void *host_b16;     /* owned bf16 staging of a staged bf16 reduction, or NULL */
    void *b16_to;       /* bf16 result of host_out's fp32 (b16_n elements), or NULL */
    int64_t b16_n;
    void *dst;          /* [backend] destination of dst_bytes bytes (host_b16 when a
                           bf16 result, else host_out) */
    size_t dst_bytes;
    int *v_counts;      /* MPI_Ialltoallv's counts and displacements (4 × group size),
                           owned: MPI reads them until the operation completes */
    void *event;        /* NCCL: a cudaEvent_t recorded after the operation */
    pt_comm_wait_for what; /* for the watchdog */
};

size_t pt_comm_type_bytes(pt_comm_type t);
/* An MPI error code as err: "what: MPI's text". */
int pt_comm_mpi_fail(pt_err *err, int code, const char *what);
/* "all-reduce", "reduce-scatter", ...: op as errors and the watchdog name it. */
const char *pt_comm_op_name(pt_comm_op op);
/* Hands line to c's notes (pt_comm_set_notes); nothing when none are set. */
void pt_comm_note(const pt_comm *c, const char *line);

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
/* Past c's deadline by waited_s: ends the run with a report of w, the step and the
 * peers as pt_comm_abort's reason (so the notes get it); under timeout_returns, -1 with
 * the report in err. */
int pt_comm_missed(pt_comm *c, const pt_comm_wait_for *w, double waited_s, pt_err *err);

/* A deadline on blocking MPI calls that cannot poll (MPI_Init and the collective it is
 * followed by, MPI_Comm_split): a thread that waits for pt_comm_guard_end and, when
 * c's deadline passes first, hands "rank R: STAGE did not complete within N s: ..." to
 * c's notes and ends the process with _exit(1) (MPI_Abort may not be called before
 * MPI_Init returns, nor from a second thread; the launcher ends the other ranks when
 * one exits without MPI_Finalize). c's rank and notes are read when the guard starts. */
typedef struct {
    bool armed;               /* a thread is running */
    bool done;                /* the stage ended (under mu) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* on CLOCK_MONOTONIC */
    struct timespec deadline; /* CLOCK_MONOTONIC */
    char line[512];           /* the note said when the deadline passes */
    pt_comm_note_fn note;
    void *note_arg;
} pt_comm_guard;
/* Sets the watchdog's deadline in seconds (<= 0: none) after the start, which
 * pt_comm_opts sets otherwise: for the tests. c may be NULL (nothing to do). */
void pt_comm_set_timeout(pt_comm *c, double seconds);

/* The start's deadline when none is given (pt_comm_opts.start_timeout_s < 0): as the
 * watchdog's default, far above MPI_Init on thousands of ranks (tens of seconds). */
#define PT_COMM_START_TIMEOUT_DEFAULT_S 300.0

/* Starts the guard of `stage` ("MPI initialisation", ...) with a deadline of seconds
 * (0: none, no thread), which the option or variable `knob` sets (named in the note).
 * Errors: no thread could be started. */
int pt_comm_guard_start(pt_comm_guard *g, const pt_comm *c, const char *stage, double seconds,
                        const char *knob, pt_err *err);
/* The stage is over: stops the guard's thread (nothing when none started). */
void pt_comm_guard_end(pt_comm_guard *g);

/* Elements of the input and output buffers of op with count n (see pt_comm_op) on a
 * group of `size` ranks. */
static inline void pt_comm_op_sizes(pt_comm_op op, int64_t n, int size, int64_t *in,
                                    int64_t *out)
{
    *in = op == PT_CO_RS || op == PT_CO_A2A ? n * size : n;
    *out = op == PT_CO_AG || op == PT_CO_A2A ? n * size : n;
}

#ifdef PT_COMM_HAVE_NCCL
/* Makes a communicator for the world and for every group this rank is in (after
 * cudaSetDevice: the kernel backend's device), each unique id broadcast over the
 * group's MPI communicator, or through the rendezvous directory when c->file.
 * Collective over the world. */
int pt_nccl_open(pt_comm *c, pt_err *err);
/* Under MPI: whether two ranks of one node use the same GPU (same device UUID), which
 * NCCL refuses ("Duplicate GPU detected"); collective over the world. -1 on error. */
int pt_nccl_device_shared(pt_comm *c, bool *shared, pt_err *err);
#endif

#endif
