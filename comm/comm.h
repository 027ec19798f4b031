/*
 * ptcomm — the communication layer: the run's world (MPI, a file rendezvous, or a
 * world of one), one communicator per process group of the planner's rank grid, and
 * every collective and transfer the runtime uses, blocking and asynchronous, with a
 * deadline on every wait. Where buffers travel is chosen once per run, as one backend
 * table (comm_internal.h): MPI on host buffers, device buffers staged through host
 * memory over MPI, or NCCL on device buffers. ptprofile-coll times these same calls,
 * so the cost tables price the code that ptrun runs.
 *
 * Errors: functions return 0 on success and -1 on error with a pt_err naming the
 * group, peer or value at fault; they never exit, except pt_comm_abort, and a wait
 * or a start past its deadline, which ends the run by design (the watchdog below).
 * Nothing here prints: what the user should see goes to the caller's notes
 * (pt_comm_set_notes).
 */
#ifndef PT_COMM_H
#define PT_COMM_H

#include "grid.h"     /* pt_grid: the groups */
#include "kernels.h"
#include "schedule.h" /* pt_p2p_issue: how NCCL sends are issued */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The world and its groups (comm.c) -------------------------------------------------- */

/* The ranks of a run and their process groups, built from the planner's rank grid
 * (pt_grid_group), so the runtime's groups are the ones the planner priced. Every
 * call is collective over the group named: `kind` is a pt_group_kind, PT_GROUP_COUNT
 * for the tied-embedding pair (the first and last stage of each pipeline), or < 0 for
 * the whole world. Collectives over a group this rank is not in, and every
 * collective in a world of one, are local (a copy where in and out differ).
 *
 * Backends (one table each, chosen once: comm_internal.h). MPI on host buffers: the
 * CPU backend, and every host-buffer call below. After pt_comm_use_device with the CUDA backend, the "backend memory" calls take
 * the kernel backend's (device) buffers and go through NCCL (one communicator per
 * group, on the kernel backend's stream) where this build has NCCL, else through
 * host memory over MPI (copied with kn->copy). Which memory each call takes is said
 * with it: [backend] (the kernel backend's memory once pt_comm_use_device has been
 * called, host memory before) or [host].
 *
 * Element types: calls on `float *` are fp32 on every backend (gradients, master
 * weights, optimizer state: kernels.h's non-[act] buffers); the typed calls (*_t)
 * take a pt_comm_dtype, among them bf16 for the [act] activations of the CUDA
 * backend; the *_bytes calls move any element type.
 *
 * Launch. mpirun, or any launcher that starts MPI (srun --mpi=pmix): MPI_Init, and
 * the NCCL unique id of each group is broadcast over that group's MPI communicator,
 * so no master address or port is configured. A launcher without MPI (srun without
 * PMIx, or anything that sets RANK and WORLD_SIZE) with PT_RENDEZVOUS=DIR set: rank
 * and world size from SLURM_PROCID and SLURM_NTASKS, else RANK and WORLD_SIZE, and
 * the ranks meet through files in DIR (a directory every node shares) to exchange
 * the NCCL unique ids; such a run does every collective through NCCL, so it needs
 * this build's NCCL and the CUDA backend. A process that started MPI itself (MPI_Init
 * before pt_comm_init, as ptprofile-coll does) uses that MPI, and finalizes it itself.
 * Without a launcher: a world of one. */
typedef struct pt_comm pt_comm;
/* An asynchronous operation in flight; pt_comm_wait completes and frees it. */
typedef struct pt_comm_req pt_comm_req;

/* Where the layer's notes go, one line each without the newline: a choice the user
 * should know of (ranks that share a GPU staged through host memory, said by world rank
 * 0) and, just before the run ends, pt_comm_abort's reason as "rank R: why" (the
 * watchdog's report among them). A comm starts without (notes are dropped) unless
 * pt_comm_init_with is given them; tools/ set theirs (ptrun prints "ptrun: LINE" on
 * stderr). A pt_comm_sub takes its parent's. arg is passed to note unchanged. */
typedef void (*pt_comm_note_fn)(void *arg, const char *line);
/* What the start is told before the world exists. */
typedef struct {
    /* The watchdog's deadline in seconds (below); 0: none; < 0: PT_COMM_TIMEOUT's,
     * else the default. */
    double timeout_s;
    /* The start's deadline in seconds (below): MPI_Init with the world's first
     * collective; 0: none; < 0: the default, 300 s. Apart from timeout_s, which a job
     * may set short to catch a stall in a step soon, while MPI_Init on thousands of
     * ranks takes tens of seconds. */
    double start_timeout_s;
    pt_comm_note_fn note; /* the notes from the start on (NULL: none yet) */
    void *note_arg;
} pt_comm_opts;
/* Starts the run's communication as described above, with o's deadline and notes.
 * Errors: MPI_Init failing; a PT_COMM_TIMEOUT that is not a number >= 0 (read when
 * o->timeout_s < 0); a rank started without MPI and without PT_RENDEZVOUS by a
 * launcher that says it has other ranks; a rendezvous without NCCL in this build, or
 * whose ranks do not all arrive within PT_RENDEZVOUS_TIMEOUT seconds (the error names
 * the directory and the missing ranks). MPI_Init not done by the deadline ends the
 * process (the watchdog, below). */
int pt_comm_init_with(int *argc, char ***argv, const pt_comm_opts *o, pt_comm **out,
                      pt_err *err);
/* pt_comm_init_with without notes, the deadline from PT_COMM_TIMEOUT or the default,
 * the start's the default. */
int pt_comm_init(int *argc, char ***argv, pt_comm **out, pt_err *err);
void pt_comm_set_notes(pt_comm *c, pt_comm_note_fn note, void *arg);
int pt_comm_rank(const pt_comm *c);
int pt_comm_size(const pt_comm *c);
/* This rank's index among the ranks of its node (the device it should drive). */
int pt_comm_local_rank(const pt_comm *c);
/* "none" (a world of one), "mpi", "mpi+staging" (device buffers through host
 * memory), "nccl" (device buffers through NCCL, MPI for host buffers) or "nccl+file"
 * (NCCL only, ranks met through the rendezvous directory). */
const char *pt_comm_backend(const pt_comm *c);
/* Whether this build has the NCCL backend. */
bool pt_comm_have_nccl(void);
/* Builds a communicator for every group kind of `g` (tp, cp, dp, pp, dp*cp, tp*cp)
 * and the tied-embedding pair. Errors: the grid's world is not the run's. */
int pt_comm_groups(pt_comm *c, const pt_grid *g, pt_err *err);
/* Selects how [backend] buffers travel, once the kernel backend `kn` exists (it must
 * outlive the comm) and after pt_comm_groups: the CPU backend changes nothing; the
 * CUDA backend uses NCCL on kn's stream where built (each group's communicator, and
 * the links of point-to-point transfers below, made here, collectively), else host
 * staging over MPI. PT_COMM_NCCL=0 in the environment selects staging even where
 * NCCL is built. Errors: a run without MPI whose backend cannot use NCCL; NCCL failing
 * to start (named with the group or link). */
int pt_comm_use_device(pt_comm *c, pt_kernels *kn, pt_err *err);
/* Host staging over MPI for [backend] buffers of any kernel backend: what the CUDA
 * backend without NCCL does; tests use it to exercise that path on the CPU backend. */
int pt_comm_use_staging(pt_comm *c, pt_kernels *kn, pt_err *err);
/* The library and version that moves [backend] buffers, one line into buf (cap bytes):
 * "Open MPI v4.1.4, ..." (MPI's first line), "NCCL 2.21.5", or "none" in a world of
 * one without MPI. */
void pt_comm_library(const pt_comm *c, char *buf, size_t cap);
/* The NCCL library's version ("NCCL 2.28.9") into buf where this layer was built with
 * its NCCL backend, with no world open; "" without it. */
void pt_comm_nccl_library(char *buf, size_t cap);
/* A run of its own over world ranks 0..n-1 of c (2 <= n <= size), for measuring a
 * group of that size (ptprofile-coll): collective over c's world; ranks from n on get
 * *out = NULL. The new comm's world is those n ranks (world rank r of c is its rank
 * r), with no other groups; it takes c's deadline. Its [backend] buffers are host
 * memory over MPI until pt_comm_use_device or pt_comm_use_staging on it selects
 * otherwise (it counts as grouped: NCCL opens over its world there, whatever c uses).
 * pt_comm_finalize frees it, before c; MPI stays up. Errors: c without MPI (one rank,
 * or a file rendezvous), n out of range, MPI failing to split. */
int pt_comm_sub(pt_comm *c, int n, pt_comm **out, pt_err *err);

/* -- Blocking collectives. On NCCL they are queued on the kernel backend's stream
 * and return at once: kernels queued after them see the result, the host after
 * kn->sync. Elsewhere the result is there on return. */

/* Element types of the typed collectives (*_t). bf16 sums and maxima: on MPI (host
 * buffers, and device buffers staged through host memory) MPI has no bf16 type, so
 * the values are widened to fp32 on the host, reduced by MPI in fp32 and rounded once
 * to bf16 (round to nearest, ties to even: pt_k_bf16_from_f32), at twice the bytes
 * on the wire: one rounding to bf16 whatever the group's size (the sum itself is as
 * exact as fp32 in MPI's order). NCCL reduces bf16 itself (ncclBfloat16), rounding to
 * bf16 at each step of its algorithm, so its sums over three or more ranks may differ
 * from the MPI paths' in the last bit. All-gathers move the elements unchanged. */
/* PT_COMM_BF16_WIRE sums bf16 as bf16 on every backend, two bytes per element on the
 * wire (gradient compression, runtime/compress.c): on MPI a user-defined operation on
 * 16-bit words widens each pair to fp32, adds and rounds the sum to bf16, at every
 * step of MPI's algorithm, as ncclBfloat16 does on NCCL; sums only (all-reduce and
 * reduce-scatter). */
typedef enum { PT_COMM_F32, PT_COMM_BF16, PT_COMM_F64, PT_COMM_BF16_WIRE } pt_comm_dtype;

/* The typed forms of the collectives below, on [backend] buffers of n elements of t
 * (counts as in the fp32 calls); the fp32 calls are these with PT_COMM_F32. Errors
 * as theirs, and a t outside pt_comm_dtype. PT_COMM_F64 sums [backend] memory (the
 * gradient norm's square on the device); pt_comm_allreduce_f64 sums [host] memory. */
int pt_comm_allreduce_t(pt_comm *c, int kind, pt_comm_dtype t, void *buf, int64_t n,
                        pt_err *err);
int pt_comm_allreduce_max_t(pt_comm *c, int kind, pt_comm_dtype t, void *buf, int64_t n,
                            pt_err *err);
int pt_comm_reducescatter_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                            int64_t n, pt_err *err);
int pt_comm_allgather_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                        int64_t n, pt_err *err);
/* All-to-all moves the elements unchanged (bf16 stays bf16 on the wire). */
int pt_comm_alltoall_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                       int64_t n, pt_err *err);
/* All-to-all with counts per rank (mixture-of-experts token dispatch, where how many
 * tokens a rank routes to each other rank differs, and may be 0). send_counts and
 * recv_counts [host] hold one count per group rank (one entry for a group of one or a
 * group this rank is not in), in elements of t: block j of in (send_counts[j]
 * elements) goes to group rank j, and block i of out (recv_counts[i] elements) comes
 * from group rank i. Blocks lie back to back in group order, so block j starts at the
 * sum of the counts before it (no displacements are passed); in holds the sum of
 * send_counts, out the sum of recv_counts. recv_counts[i] must equal group rank i's
 * send_counts[this rank], which is not checked across ranks (a longer block than its
 * receive count is MPI's truncation error; on NCCL undefined). in and out [backend],
 * not overlapping; elements move unchanged (PT_COMM_BF16_WIRE is refused: sums only).
 * The count arrays may be reused once the call returns. Errors: a negative count
 * (named with its group rank and value); counts whose sum, in bytes, overflows int64;
 * a group of one whose send and receive counts differ; on MPI (host buffers, and
 * device buffers staged through host memory) a block or its offset beyond INT_MAX
 * elements, since MPI_Ialltoallv's counts and displacements are ints (refused before
 * anything is sent). */
int pt_comm_alltoallv_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in,
                        const int64_t *send_counts, void *out, const int64_t *recv_counts,
                        pt_err *err);

/* Sums in place over the group. buf (n) fp32 [backend]. */
int pt_comm_allreduce(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err);
/* The same on doubles; buf (n) [host]. */
int pt_comm_allreduce_f64(pt_comm *c, int kind, double *buf, int64_t n, pt_err *err);
/* The element-wise maximum over the group, in place. buf (n) fp32 [backend]. */
int pt_comm_allreduce_max(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err);
/* in (n·size) summed over the group, this rank's n-element slice into out (n); fp32
 * [backend]. */
int pt_comm_reducescatter(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                          pt_err *err);
/* Every rank's n elements, in group order, into out (n·size); in may be out + rank·n.
 * fp32 [backend]. */
int pt_comm_allgather(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                      pt_err *err);
/* All-to-all: block j (n elements) of in (n·size) goes to group rank j, and block i of
 * out (n·size) comes from group rank i. in and out must not overlap. fp32 [backend]. */
int pt_comm_alltoall(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                     pt_err *err);
/* Group rank 0's n elements to every rank of the group, in place. buf (n) fp32
 * [backend]. */
int pt_comm_broadcast(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err);
/* Rank 0's n bytes to every rank of the world; buf [host]. */
int pt_comm_bcast(pt_comm *c, void *buf, int64_t n, pt_err *err);
/* Every rank's n bytes (n may differ by rank) to world rank 0: there *all (malloc'd,
 * the caller frees) holds them in rank order and sizes[r] (world size entries) says
 * how many bytes came from rank r; on other ranks *all is NULL. buf [host]. */
int pt_comm_gather_bytes(pt_comm *c, const void *buf, int64_t n, void **all, int64_t *sizes,
                         pt_err *err);
/* Whether every rank's `ok` is true (a world-wide AND; a barrier). */
bool pt_comm_all_ok(pt_comm *c, bool ok);

/* -- Asynchronous collectives: each starts the operation and returns a handle in *req
 * (NULL when it completed at once, e.g. a group of one); the buffers must stay
 * untouched until pt_comm_wait(req). On NCCL the operation runs on a communication
 * stream of its own, after the work already queued on the kernel backend's stream
 * (so gradients produced by queued kernels are the ones reduced), and overlaps the
 * kernels queued after it; asynchronous operations run there one after another, and
 * pt_comm_wait makes the kernel stream wait for this one (the host does not wait).
 * On MPI they are MPI-3 nonblocking collectives (Open MPI progresses them inside MPI
 * calls, so most of the transfer happens in pt_comm_wait on the CPU backend). Start
 * them in the same order on every rank of the group, as MPI and NCCL require. */
int pt_comm_iallreduce(pt_comm *c, int kind, float *buf, int64_t n, pt_comm_req **req,
                       pt_err *err);
int pt_comm_ireducescatter(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                           pt_comm_req **req, pt_err *err);
int pt_comm_iallgather(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                       pt_comm_req **req, pt_err *err);
int pt_comm_ialltoall(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                      pt_comm_req **req, pt_err *err);
/* The typed forms (element type t, as the blocking *_t calls above). */
int pt_comm_iallreduce_t(pt_comm *c, int kind, pt_comm_dtype t, void *buf, int64_t n,
                         pt_comm_req **req, pt_err *err);
int pt_comm_ireducescatter_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                             int64_t n, pt_comm_req **req, pt_err *err);
int pt_comm_iallgather_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                         int64_t n, pt_comm_req **req, pt_err *err);
int pt_comm_ialltoallv_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in,
                         const int64_t *send_counts, void *out, const int64_t *recv_counts,
                         pt_comm_req **req, pt_err *err);
/* Completes and frees req (NULL: nothing to do). After it, the result is in the
 * buffers as for the blocking call. An error still frees req. */
int pt_comm_wait(pt_comm *c, pt_comm_req *req, pt_err *err);

/* -- Point to point between world ranks (pipeline transfers, the context-parallel
 * ring). Sends do not wait for their receiver, as the schedule programs assume: a send
 * takes a private copy of buf (so the caller may reuse buf at once) and
 * pt_comm_wait_sends completes every posted send. A receive waits for its data (on
 * NCCL: kernels queued after it see the data). The tag tells transfers apart on MPI;
 * NCCL has no tags, so between two ranks receives must be posted in the order of the
 * matching sends.
 *
 * On NCCL (comm_nccl.c) every send is its own NCCL operation on a send stream, started
 * by an event recorded on the kernel backend's stream after the kernels that produced
 * buf and the copy of buf into a send slot; receives are queued on the kernel stream.
 * So a send blocked until its receiver posts the receive (as NCCL sends are) holds up
 * neither this rank's kernels nor its receives: pt_comm_nccl_p2p describes this for
 * the planner's model check (pt_sched_check_nccl), which proves every schedule free of
 * deadlock under it. Each direction between two ranks has its own two-rank NCCL
 * communicator (NCCL serialises a communicator's operations whatever their streams),
 * made by pt_comm_use_device for the neighbours in the rings of the pipeline group and
 * the context-parallel group, and of the world in a pt_comm_sub (ptprofile-coll); a
 * transfer between other ranks is refused.
 * The copies go to a pool of pt_comm_nccl_p2p.send_slots slots, taken in turn; a copy
 * waits (on the kernel stream) for the send that last used its slot. The slots are
 * allocated outside steps only: by pt_comm_reserve_sends, else by pt_comm_wait_sends
 * once a step has sent more than a slot holds (such sends take a stream-ordered
 * allocation of their own meanwhile, cudaMallocAsync, which never waits for the
 * device). pt_comm_wait_sends waits on the host for every send stream. */
/* buf (n) fp32 [backend] */
int pt_comm_recv(pt_comm *c, int from, int tag, float *buf, int64_t n, pt_err *err);
int pt_comm_isend(pt_comm *c, int to, int tag, const float *buf, int64_t n, pt_err *err);
/* buf (bytes) of any element type [backend]: bf16 activations on the CUDA backend */
int pt_comm_recv_bytes(pt_comm *c, int from, int tag, void *buf, int64_t bytes, pt_err *err);
int pt_comm_isend_bytes(pt_comm *c, int to, int tag, const void *buf, int64_t bytes,
                        pt_err *err);
int pt_comm_wait_sends(pt_comm *c, pt_err *err);
/* Makes room for sends of up to `bytes` each (NCCL: the send slots, allocated here;
 * elsewhere nothing to do), after completing every posted send: call it outside a
 * step, before the first, with the largest transfer the run makes. Errors: the
 * device's memory. */
int pt_comm_reserve_sends(pt_comm *c, int64_t bytes, pt_err *err);
/* How the NCCL backend issues sends (see above), for pt_sched_check_nccl: the policy
 * comm_nccl.c implements and the number of send slots it allocates. */
extern const pt_p2p_issue pt_comm_nccl_p2p;

/* -- The watchdog (comm_watch.c). Every wait of a collective or transfer on
 * MPI (and every NCCL call the host waits for) has a deadline: a rank that has waited
 * that long ends the run with pt_comm_abort, whose reason (to the notes) is one line
 * naming the operation, its bytes, the group (or peer), the ranks it waited on and the
 * step set by pt_comm_set_context, so that a rank that stalls (stopped, swapping) or dies
 * unseen cannot leave the others waiting for ever. The deadline comes from
 * pt_comm_opts, else PT_COMM_TIMEOUT (seconds; 0: none) when pt_comm_init runs, else
 * 300 s, which no healthy wait nears. The building of the groups (pt_comm_groups) has
 * it too; the start has its own (pt_comm_opts.start_timeout_s, else 300 s, which
 * MPI_Init on thousands of ranks does not near): MPI_Init with the world's first
 * collective. A stage past its deadline makes this rank say "rank R: MPI
 * initialisation did not complete within N s: ..." (or "building the process groups")
 * to the notes and exit 1 (MPI_Abort cannot be called before MPI_Init returns; the
 * launcher ends the others). */
double pt_comm_timeout(const pt_comm *c);
/* What the trainer is doing, for the watchdog's report: step (the step number the
 * trainer shows; < 0: none) and `doing` ("training", "validation", ...; NULL for
 * the default), a string that must outlive the comm. c may be NULL. */
void pt_comm_set_context(pt_comm *c, int64_t step, const char *doing);

/* Ends every rank of the run at once with exit status `status` (1 to 255), after
 * handing "rank R: why" to this rank's notes (pt_comm_set_notes): what a failing rank
 * does, so that no other rank hangs in a collective (MPI_Abort(status), whose status
 * Open MPI's mpirun exits with; in a file rendezvous an abort file in the directory,
 * which ranks waiting there see, and exit(status)). c may be NULL (then nothing is
 * said: exit(status)). */
void pt_comm_abort(pt_comm *c, int status, const char *why);
void pt_comm_finalize(pt_comm *c);

/* ---- File rendezvous (rendezvous.c) -------------------------------------------------------- */

/* Ranks named in a message, "1, 3, 5 and 12 more" (the first 16 by number): set out and
 * cap (out[0] = '\0'), add the ranks, then end. What the rendezvous and the collective
 * watchdog say they wait on. */
typedef struct {
    char *out;
    size_t cap, len;
    int listed, more;
} pt_rank_list;
void pt_rank_list_add(pt_rank_list *l, int rank);
void pt_rank_list_end(pt_rank_list *l);

/* Where a launcher without MPI put this process, from the environment: rank and world
 * size from SLURM_PROCID and SLURM_NTASKS (srun), else RANK and WORLD_SIZE (torchrun
 * and others); local rank from SLURM_LOCALID, else LOCAL_RANK; the directory from
 * PT_RENDEZVOUS; a key telling runs that share the directory apart from
 * PT_RENDEZVOUS_KEY, else SLURM_JOB_ID.SLURM_STEP_ID, else "run"; the timeout from
 * PT_RENDEZVOUS_TIMEOUT (seconds, default 300). */
typedef struct {
    int rank, size, local_rank;  /* size 0: the environment names no world */
    const char *source;          /* "SLURM_PROCID/SLURM_NTASKS" or "RANK/WORLD_SIZE" */
    char dir[512];               /* "" when PT_RENDEZVOUS is not set */
    char key[128];
    double timeout_s;
} pt_rdv;

/* Fills r from the environment. Errors: a value that is not a number, a rank outside
 * the world, a bad timeout, a directory that does not exist. */
int pt_rdv_from_env(pt_rdv *r, pt_err *err);
/* Every rank posts that it has arrived under `name` and waits until all r->size have.
 * Errors name the directory, the time waited and the ranks that did not arrive, or
 * the reason of a rank that aborted. */
int pt_rdv_barrier(const pt_rdv *r, const char *name, pt_err *err);
/* `bytes` bytes of world rank `root` to every rank that calls it (any subset): the
 * root writes the file `name` (atomically: written under a temporary name and
 * renamed), the others wait for it. Errors name the directory, the file and the root. */
int pt_rdv_bcast(const pt_rdv *r, const char *name, int root, void *buf, size_t bytes,
                 pt_err *err);
/* Writes the abort file with `why` (what pt_rdv_barrier and pt_rdv_bcast report). */
void pt_rdv_abort(const pt_rdv *r, const char *why);
/* -1 with the reason in err when a rank of this run has written the abort file; else 0. */
int pt_rdv_aborted(const pt_rdv *r, pt_err *err);
/* Removes every file of this run (its key) from the directory; call it on one rank,
 * once every rank is past its last pt_rdv_* call (after a collective over the
 * communicators the rendezvous set up), or a slow rank would miss a file. */
void pt_rdv_cleanup(const pt_rdv *r);

#ifdef __cplusplus
}
#endif
#endif
