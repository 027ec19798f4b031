/*
 * ptrt — the runtime that trains a plan for real: data loading and the byte-level
 * tokenizer, the transformer model (parameters in one buffer with named views,
 * initialisation keyed by name and element, layers executed from the planner's op
 * lists through the kernel table), the engine that runs the planner's schedule
 * programs, the optimizer step, and checkpoints.
 *
 * Dimension letters: the one legend of common/common.h (b micro-batch, s sequence,
 * h hidden, a heads, k KV heads, d head dim, f FFN size, v vocabulary, L layers).
 *
 * Errors: functions return 0 on success and -1 on error with a pt_err naming the
 * file, tensor or value at fault; they never exit.
 */
#ifndef PT_RUNTIME_H
#define PT_RUNTIME_H

#include "kernels.h"
#include "planner.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Token data (runtime/data.c) ---------------------------------------------------- */

/* llm.c's token file: a header of 256 int32 (magic 20240520, version 1, token count,
 * the rest 0) followed by the tokens as uint16. */
enum { PT_TOKENS_MAGIC = 20240520, PT_TOKENS_VERSION = 1, PT_TOKENS_HEADER_INTS = 256 };

typedef struct {
    uint16_t *tok;     /* n tokens (malloc'd) */
    int64_t n;
    char origin[512];  /* file it came from, for messages */
} pt_tokens;

/* Reads a token file; or, when the file does not start with the magic number, a
 * plain text file through the byte-level tokenizer (one token per byte, 0..255).
 * Errors name the file: unreadable, truncated, bad version, count disagreeing with
 * the file size. */
int pt_tokens_load(const char *path, pt_tokens *out, pt_err *err);
/* Writes tokens in llm.c's format, through a temporary file renamed when complete. */
int pt_tokens_write(const char *path, const uint16_t *tok, int64_t n, pt_err *err);
void pt_tokens_free(pt_tokens *t);
/* Checks every token id is below `vocab`; the error names the first offender and
 * its position. */
int pt_tokens_check_vocab(const pt_tokens *t, int64_t vocab, pt_err *err);
/* Splits off the last `val_fraction` of the tokens (at least seq+1 of them) as a
 * validation set; both outputs own copies. */
int pt_tokens_split(const pt_tokens *all, double val_fraction, int64_t seq, pt_tokens *train,
                    pt_tokens *val, pt_err *err);

/* The byte-level tokenizer: token i is byte i. Decoding writes printable text (other
 * bytes as \xNN) into buf; returns the length written. */
size_t pt_bytes_decode(const int32_t *tok, int64_t n, char *buf, size_t cap);

/* Deterministic sampling: the data are cut into windows of s+1 tokens (inputs and
 * targets shifted by one); global sample g is window perm_e(g mod W) of epoch
 * e = g / W, where perm_e is a permutation keyed by (seed, e). A step of global batch
 * B uses samples [step·B, (step+1)·B), so what a step sees does not depend on the
 * layout (how the batch is split over data-parallel ranks and micro-batches). */
typedef struct {
    const pt_tokens *data;
    int64_t seq;
    int64_t windows;   /* W */
    uint64_t seed;
    int64_t skip;      /* samples skipped (a loss spike's batches, ptrun --spike-action
                        * rollback): pt_sampler_fill's sample g is global sample g + skip */
} pt_sampler;

int pt_sampler_init(pt_sampler *s, const pt_tokens *data, int64_t seq, uint64_t seed,
                    pt_err *err);
/* Start offset in data->tok of global sample g. */
int64_t pt_sampler_offset(const pt_sampler *s, int64_t g);
/* Fills inputs and targets for `count` consecutive global samples from first + skip. */
void pt_sampler_fill(const pt_sampler *s, int64_t first, int count,
                     int32_t *inputs,    /* (count, s) */
                     int32_t *targets);  /* (count, s) */

/* ---- safetensors and checkpoints (runtime/checkpoint.c) ------------------------------- */

/* One tensor of a safetensors file (https://github.com/huggingface/safetensors:
 * 8-byte little-endian header length, a JSON header mapping names to dtype, shape and
 * data_offsets, then the raw little-endian data). */
typedef struct {
    char name[128];
    char dtype[8];       /* "F32", "BF16", "I32", "I64", "U8", ... */
    int ndim;
    int64_t shape[4];
    const void *data;    /* writing: the caller's; reading: points into the file's buffer */
    size_t bytes;
} pt_st_tensor;

/* Writes tensors (in the order given) and string metadata pairs (may be NULL/0) to
 * `path` through a temporary file renamed when complete. */
int pt_st_write(const char *path, const pt_st_tensor *t, int n, const char *const *meta_keys,
                const char *const *meta_values, int n_meta, pt_err *err);

typedef struct pt_st_file pt_st_file;
/* Reads and validates a whole file: header JSON, offsets inside the data, no
 * overlaps, sizes agreeing with dtype and shape. The header and its offsets are checked
 * against the file's size before any tensor data are read, so a damaged header of a
 * large file is refused without reading it. Errors name the file and tensor. */
int pt_st_open(const char *path, pt_st_file **out, pt_err *err);
int pt_st_count(const pt_st_file *f);
const pt_st_tensor *pt_st_at(const pt_st_file *f, int i);
/* The tensor `name`, checked against an expected dtype and shape; the error says
 * what disagrees ("tensor 'wte': shape (256, 64) in the file, (512, 64) expected"). */
int pt_st_get(const pt_st_file *f, const char *name, const char *dtype, int ndim,
              const int64_t *shape, const pt_st_tensor **out, pt_err *err);
/* The metadata value of `key`, or NULL. */
const char *pt_st_meta(const pt_st_file *f, const char *key);
void pt_st_close(pt_st_file *f);

/* A checkpoint directory: meta.json (format version, layout string, step, data
 * position, config hash, the files below), model.safetensors (parameters),
 * optim_rank<N>.safetensors (optimizer state and RNG state of each rank). Written as
 * <dir>.tmp-<pid> and renamed to <dir> when complete; the `keep` newest stay, the
 * older ones as <dir>.1, <dir>.2, ... A folder is taken for a checkpoint of ours only
 * when it holds nothing but a checkpoint's files and a meta.json this build reads (an
 * empty folder counts too); nothing else is ever moved or removed. */
typedef struct {
    int format_version;
    char layout[256];     /* pt_layout_format of the layout that wrote it */
    int64_t step;         /* optimizer steps done */
    int64_t data_pos;     /* next global sample index */
    char config_hash[17]; /* hex hash of model spec + training settings that must match */
    int64_t world;
} pt_ckpt_meta;

int pt_ckpt_meta_write(const char *dir, const pt_ckpt_meta *m, pt_err *err);
int pt_ckpt_meta_read(const char *dir, pt_ckpt_meta *m, pt_err *err);
/* Whether a file can be created at `path`: makes and removes a probe file in its
 * folder. The error names path, its folder and the reason. Changes nothing. */
int pt_path_writable(const char *path, pt_err *err);
/* Whether checkpoints may be written to `dir` (what to check before training): dir and
 * its kept copies <dir>.1 .. <dir>.<keep-1> are each absent, an empty folder or a
 * checkpoint of ours, and dir's folder is writable. The error names the path. */
int pt_ckpt_check_target(const char *dir, int keep, pt_err *err);
/* Creates the temporary directory for a checkpoint of `dir` and returns its path;
 * pt_ckpt_commit syncs it and renames it into place, after moving the previous ones
 * down a place (<dir> to <dir>.1, ...; the one beyond `keep` is removed, and so are
 * orphaned temporaries of killed runs that are ours and not newer); each move is one
 * rename, so a kill at any point leaves every complete checkpoint where pt_ckpt_find
 * looks. It refuses to move anything that is not ours. pt_ckpt_abort removes tmp (a
 * temporary folder or a checkpoint of ours; anything else stays). */
int pt_ckpt_begin(const char *dir, char *tmp, size_t n, pt_err *err);
int pt_ckpt_commit(const char *tmp, const char *dir, int keep, pt_err *err);
void pt_ckpt_abort(const char *tmp);
/* The newest complete checkpoint (one with a meta.json this build reads) among dir,
 * its kept copies <dir>.<N> and the temporaries an interrupted commit leaves
 * (<dir>.tmp-<pid>, <dir>.old-<pid>), with a step below `below_step` (< 0: any); one
 * whose config hash is `config_hash` is preferred (NULL: any). Its path goes to found
 * (n bytes), its meta.json to m. When there is none the error is why dir's own
 * meta.json cannot be read. */
int pt_ckpt_find(const char *dir, const char *config_hash, int64_t below_step, char *found,
                 size_t n, pt_ckpt_meta *m, pt_err *err);

/* ---- Communication (runtime/comm.c, comm_nccl.c, rendezvous.c) --------------------------- */

/* The ranks of a run and their process groups, built from the planner's rank grid
 * (pt_grid_group), so the runtime's groups are the ones the planner priced. Every
 * call is collective over the group named: `kind` is a pt_group_kind, PT_GROUP_COUNT
 * for the tied-embedding pair (the first and last stage of each pipeline), or < 0 for
 * the whole world. Collectives over a group this rank is not in, and every
 * collective in a world of one, are local (a copy where in and out differ).
 *
 * Backends. MPI on host buffers: the CPU backend, and every host-buffer call below.
 * After pt_comm_use_device with the CUDA backend, the "backend memory" calls take
 * the kernel backend's (device) buffers and go through NCCL (one communicator per
 * group, on the kernel backend's stream) where this build has NCCL, else through
 * host memory over MPI (copied with kn->copy). Which memory each call takes is said
 * with it: [backend] (the kernel backend's memory once pt_comm_use_device has been
 * called, host memory before) or [host].
 *
 * Element types: calls on `float *` are fp32 on every backend (gradients, master
 * weights, optimizer state: kernels.h's non-[act] buffers); the *_bytes calls move
 * any element type, among them the bf16 [act] activations of the CUDA backend.
 *
 * Launch. mpirun, or any launcher that starts MPI (srun --mpi=pmix): MPI_Init, and
 * the NCCL unique id of each group is broadcast over that group's MPI communicator,
 * so no master address or port is configured. A launcher without MPI (srun without
 * PMIx, or anything that sets RANK and WORLD_SIZE) with PT_RENDEZVOUS=DIR set: rank
 * and world size from SLURM_PROCID and SLURM_NTASKS, else RANK and WORLD_SIZE, and
 * the ranks meet through files in DIR (a directory every node shares) to exchange
 * the NCCL unique ids; such a run does every collective through NCCL, so it needs
 * this build's NCCL and the CUDA backend. Without a launcher: a world of one. */
typedef struct pt_comm pt_comm;
/* An asynchronous operation in flight; pt_comm_wait completes and frees it. */
typedef struct pt_comm_req pt_comm_req;

/* Starts the run's communication as described above. Errors: MPI_Init failing; a
 * rank started without MPI and without PT_RENDEZVOUS by a launcher that says it has
 * other ranks; a rendezvous without NCCL in this build, or whose ranks do not all
 * arrive within PT_RENDEZVOUS_TIMEOUT seconds (the error names the directory and the
 * missing ranks). */
int pt_comm_init(int *argc, char ***argv, pt_comm **out, pt_err *err);
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
 * CUDA backend uses NCCL on kn's stream where built (each group's communicator made
 * here, collectively), else host staging over MPI. PT_COMM_NCCL=0 in the
 * environment selects staging even where NCCL is built. Errors: a run without MPI
 * whose backend cannot use NCCL; NCCL failing to start (named with the group). */
int pt_comm_use_device(pt_comm *c, pt_kernels *kn, pt_err *err);
/* Host staging over MPI for [backend] buffers of any kernel backend: what the CUDA
 * backend without NCCL does; tests use it to exercise that path on the CPU backend. */
int pt_comm_use_staging(pt_comm *c, pt_kernels *kn, pt_err *err);

/* -- Blocking collectives. On NCCL they are queued on the kernel backend's stream
 * and return at once: kernels queued after them see the result, the host after
 * kn->sync. Elsewhere the result is there on return. */

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
/* Completes and frees req (NULL: nothing to do). After it, the result is in the
 * buffers as for the blocking call. An error still frees req. */
int pt_comm_wait(pt_comm *c, pt_comm_req *req, pt_err *err);

/* -- Point to point between world ranks (pipeline transfers). Sends do not wait for
 * their receiver, as the schedule programs assume: a send takes a private copy of buf
 * (so the caller may reuse buf at once) and pt_comm_wait_sends completes every posted
 * send. The tag tells transfers apart on MPI; NCCL has no tags, so between two ranks
 * receives must be posted in the order of the matching sends. On NCCL a send is
 * issued together with this rank's next receive (one NCCL group, so that neither
 * waits for the other, as Megatron-LM batches its pipeline sends and receives), or
 * before its next collective, or by pt_comm_wait_sends. */
/* buf (n) fp32 [backend] */
int pt_comm_recv(pt_comm *c, int from, int tag, float *buf, int64_t n, pt_err *err);
int pt_comm_isend(pt_comm *c, int to, int tag, const float *buf, int64_t n, pt_err *err);
/* buf (bytes) of any element type [backend]: bf16 activations on the CUDA backend */
int pt_comm_recv_bytes(pt_comm *c, int from, int tag, void *buf, int64_t bytes, pt_err *err);
int pt_comm_isend_bytes(pt_comm *c, int to, int tag, const void *buf, int64_t bytes,
                        pt_err *err);
int pt_comm_wait_sends(pt_comm *c, pt_err *err);

/* -- The watchdog (runtime/comm_watch.c). Every wait of a collective or transfer on
 * MPI (and every NCCL call the host waits for) has a deadline: a rank that has waited
 * that long prints one line on stderr naming the operation, its bytes, the group (or
 * peer), the ranks it waited on and the step set by pt_comm_set_context, and ends the
 * run with pt_comm_abort, so that a rank that stalls (stopped, swapping) or dies
 * unseen cannot leave the others waiting for ever. The deadline comes from
 * PT_COMM_TIMEOUT (seconds; 0: none) when pt_comm_init runs, else 300 s, which no
 * healthy wait nears; pt_comm_init fails on a PT_COMM_TIMEOUT that is not a number
 * >= 0. */
/* Sets the deadline in seconds (<= 0: none). c may be NULL (nothing to do). */
void pt_comm_set_timeout(pt_comm *c, double seconds);
double pt_comm_timeout(const pt_comm *c);
/* What the trainer is doing, for the watchdog's report: step (the step number the
 * trainer shows; < 0: none) and `doing` ("training", "validation", ...; NULL for
 * the default), a string that must outlive the comm. c may be NULL. */
void pt_comm_set_context(pt_comm *c, int64_t step, const char *doing);

/* Ends every rank of the run at once with `why` printed by this rank: what a failing
 * rank does, so that no other rank hangs in a collective (MPI_Abort; in a file
 * rendezvous an abort file in the directory, which ranks waiting there see). */
void pt_comm_abort(pt_comm *c, const char *why);
void pt_comm_finalize(pt_comm *c);

/* ---- File rendezvous (runtime/rendezvous.c) ------------------------------------------------ */

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

/* ---- The model (runtime/model.c, runtime/layer.c) ----------------------------------- */

/* One parameter tensor: a named view into the single parameter buffer. */
typedef struct {
    char name[48];      /* "wte", "layers.3.q.w", "final_norm.b", ... */
    int64_t offset;     /* elements into the buffer */
    int64_t count;
    int ndim;
    int64_t shape[2];
    bool decay;         /* weight decay applies (matrices, not norms or biases) */
    bool tp_whole;      /* the whole tensor on every tensor-parallel rank (norms, a
                           row-parallel layer's bias, positions), not a part of it */
    int tp_copies;      /* consecutive tp ranks holding this same part: 1, tp for a
                           whole tensor, tp/k for a replicated KV head */
    int64_t first;      /* index in the whole tensor of this part's first element */
    int64_t full_cols;  /* columns of the whole tensor (a row-parallel weight holds
                           shape[1] of them from column `first`) */
} pt_param;

/* Activations one micro-batch keeps for its backward pass (one "slot"). */
typedef struct pt_acts pt_acts;

typedef struct {
    pt_model spec;
    pt_layout layout;
    pt_kernels *kn;
    pt_trace *trace;          /* may be off */
    bool trace_sync;          /* PT_TRACE_SYNC=1: wait for the device around each op, so
                               * a span is its host time around the device's work (the
                               * device timers are then not used) */
    struct pt_devtime *devtime; /* op spans waiting for their device times (runtime/
                                 devtime.c): with the trace on, on a backend with
                                 device timers; NULL otherwise */
    int rank;                 /* for trace spans */
    int stage;                /* pipeline stage of this rank */
    int tp_rank, cp_rank;     /* place in the tensor- and context-parallel groups */
    pt_comm *comm;            /* tp/cp collectives and the cp ring; NULL on one rank */
    int cp_next, cp_prev;     /* world ranks after and before this one in the cp ring */
    float dropout;            /* probability on the embedding and residual branches */
    uint64_t seed;            /* the run's seed: keys initialisation and dropout */
    int64_t chunk_layers;     /* layers per model chunk: every chunk of a rank holds as
                                 many (pt_stage_layers; L / (pp·vp) when even) */
    int64_t n_layers;         /* layers on this rank, vp·chunk_layers */
    int64_t chunk_first[64];  /* model index of each chunk's first layer */
    int64_t chunk_begin[64], chunk_end[64]; /* parameter elements of each chunk: its
                                 layers, with the embedding on virtual stage 0 and the
                                 final norm and head on the last virtual stage */

    pt_param *param;
    int n_param;
    int64_t n_elems;          /* parameters on this rank */
    float *w;                 /* (n_elems) [act] every parameter, one buffer */
    float *grad;              /* (n_elems) fp32 */
    float *m, *v;             /* (opt_elems) fp32 Adam moments of elements
                                 [opt_first, opt_first + opt_elems) */
    int64_t opt_first, opt_elems; /* the optimizer's share: every element, or with
                                 ZeRO >= 1 this data-parallel rank's shard of the
                                 buffer padded to a multiple of dp (Rajbhandari et
                                 al. 2020); elements past n_elems are padding */
    float *master;            /* (n_elems) fp32 master weights; == w on fp32 backends */

    struct pt_zero *zero;     /* ZeRO 2/3's shards and windows (runtime/zero.c), with
                                 dp·cp > 1; NULL otherwise. With it, master, grad, m
                                 and v are shard arrays of opt_elems floats and w is
                                 NULL */

    pt_acts **slot;           /* activation slots: one (micro-batch, chunk) each */
    int n_slots;
    int *slot_map;            /* [n_micro·vp] the slot of (mb, chunk) in flight, or -1 */
    bool *slot_busy;          /* [n_slots] */
    void **head;              /* the head's buffers (pt_head_acts), last stage only */
    int n_head;
    void *scratch;            /* gradient scratch shared by all layers */

    int64_t bytes;            /* backend memory this model allocated: what the planner's
                                 memory model predicts for the rank */
    pt_oplist ops[6];         /* the planner's op lists this model executes:
                                 layer fwd/bwd, embed fwd/bwd, head fwd/bwd */
    const pt_param **pref;    /* [(n_layers + 1)·PT_PARAM_COUNT·2]: the weight and bias
                                 of each pt_param_ref of each layer on this rank (its
                                 index in n_layers), then of the parts outside layers;
                                 NULL where there is none. Resolved once by name when
                                 the runtime is allocated; the ops index it. */

    /* Optional (NULL: not called): pt_net_backward_chunk calls it as the chunk's
     * gradient becomes final for this micro-batch — after the head's backward, each
     * layer's and the embedding's — with `lo`, the lowest element this backward no
     * longer changes (elements [lo, chunk_end[chunk]) are done). The engine sets it
     * around a chunk's last backward of the step to start gradient buckets. Returns
     * 0, or -1 with err set, which fails the backward. */
    int (*grad_done)(void *ctx, int chunk, int64_t lo, pt_err *err);
    void *grad_done_ctx;
} pt_net;

/* Builds pipeline stage `stage` of the model of plan `p` (its vp chunks: virtual
 * stages c·p + stage) on backend `kn` with `slots` micro-batches of activations,
 * parameters initialised from `seed`: each element from a Philox stream keyed by
 * (seed, parameter name, element index), so the same model in any layout starts from
 * the same weights. Checks that the parameter count equals the planner's. */
int pt_net_init(pt_net *n, const pt_plan *p, pt_kernels *kn, int stage, int slots,
                uint64_t seed, pt_trace *trace, pt_err *err);
/* Where a rank's part of the model sits: its pipeline stage, its tensor-parallel
 * part (which rows or columns of each split tensor, and which slice of the
 * vocabulary), its context-parallel chunks of the sequence, and the communicator
 * for the collectives inside a layer. */
typedef struct {
    int stage, tp_rank, cp_rank;
    int dp_rank, dp_size;     /* in the gradient-reduction (dp·cp) group: ZeRO's shards */
    pt_comm *comm;            /* needed when tp or cp > 1 */
    int cp_next, cp_prev;     /* world ranks of the cp ring's neighbours */
} pt_net_place;
int pt_net_init_at(pt_net *n, const pt_plan *p, pt_kernels *kn, const pt_net_place *at,
                   int slots, uint64_t seed, pt_trace *trace, pt_err *err);
void pt_net_free(pt_net *n);
const pt_param *pt_net_param(const pt_net *n, const char *name);

/* Copies the fp32 master weights (n_elems floats) and Adam moments (opt_elems each)
 * to host arrays (any may be NULL), or sets them from host arrays (refreshing the
 * bf16 compute copy on a bf16 backend): what checkpoints save and load, on any
 * backend. */
int pt_net_get_state(pt_net *n, float *master, float *m, float *v, pt_err *err);
int pt_net_set_state(pt_net *n, const float *master, const float *m, const float *v,
                     pt_err *err);

/* Activation slots: each holds one model chunk's activations of one micro-batch, from
 * its forward (or the receive of its input) to the end of its backward. take hands
 * (mb, chunk) a free slot (the one it holds, if any; -1 with err set when none is
 * free), of gives its slot (-1: none), give frees it; reset frees all (a step's start).
 * There are pt_sched_peak_in_flight slots, at least vp (evaluation runs chunk c in
 * slot c). */
int pt_net_slot_take(pt_net *n, int mb, int chunk, pt_err *err);
int pt_net_slot_of(const pt_net *n, int mb, int chunk);
void pt_net_slot_give(pt_net *n, int mb, int chunk);
void pt_net_slots_reset(pt_net *n);

/* Names the micro-batch about to run in `slot`: its index mb in the step (which of the
 * head's buffers it uses) and, for dropout, the step and its first sample: masks are
 * keyed by the step, the global index of each sample and each element's position in
 * the whole sequence and hidden vector, so every layout drops the same elements.
 * Training forwards use dropout only after this call; evaluation never does. */
void pt_net_set_batch(pt_net *n, int slot, int mb, int64_t step, int64_t first_sample,
                      bool train);

/* Forward of model chunk `chunk` of one micro-batch (b = layout mbs rows of s tokens)
 * in activation slot `slot`, executing the planner's op lists in order: the
 * embedding first on virtual stage 0 (tokens used there), the head and loss last on
 * the last virtual stage (targets used there), which adds the sum of its token
 * losses to *loss_sum. Other chunks start from pt_net_chunk_input. dloss is
 * dL/dloss_token (1 / tokens of the global batch); 0 keeps no gradient (evaluation). */
int pt_net_forward_chunk(pt_net *n, int slot, int chunk, const int32_t *tokens,
                         const int32_t *targets, float dloss, double *loss_sum, pt_err *err);
/* Backward of a chunk, accumulating parameter gradients. It starts from the loss on
 * the last virtual stage, else from the output gradient in pt_net_dres; it leaves
 * the chunk's input gradient in pt_net_dres. */
int pt_net_backward_chunk(pt_net *n, int slot, int chunk, pt_err *err);
/* The input (received from the previous stage) and output (sent on) of the chunk in
 * `slot`, (b·s, h) [act]; and the residual-stream gradient (b·s, h) [act]. */
float *pt_net_chunk_input(pt_net *n, int slot);
float *pt_net_chunk_output(pt_net *n, int slot);
float *pt_net_dres(pt_net *n);
/* The whole model on one stage of one chunk (pp = vp = 1); each ends by giving the op
 * spans their device times (pt_net_trace_resolve). */
int pt_net_forward(pt_net *n, int slot, const int32_t *tokens, const int32_t *targets,
                   float dloss, double *loss_sum, pt_err *err);
int pt_net_backward(pt_net *n, int slot, pt_err *err);
/* Gives the op spans recorded since the last call their device times, on a backend
 * with device timers (kernels.h's event_record; on others nothing waits): waits for
 * the device, then retimes each span (pt_trace_retime) from its launch to when its
 * work ran. pt_engine_step calls it at the step's end, pt_engine_eval after each
 * batch, pt_net_forward and pt_net_backward at their end; a caller that runs chunks
 * itself calls it before the trace is expanded or packed. 0, or -1 with err set. */
int pt_net_trace_resolve(pt_net *n, pt_err *err);
/* Elements of one micro-batch's residual stream on this rank: what a pipeline
 * stage sends on (b·s/cp tokens, divided by tp again with sequence parallelism,
 * times h). */
int64_t pt_net_act_elems(const pt_net *n);
/* This rank's context-parallel share of a micro-batch's tokens: from full (b, s),
 * chunks cp_rank and 2·cp-1-cp_rank of each row into local (b, s/cp). */
void pt_net_cp_slice(const pt_net *n, const int32_t *full, int32_t *local);
/* The logits (b·s, v) [act], in backend memory, of the last forward in `slot`
 * made with dloss = 0 (for sampling). */
const float *pt_net_last_logits(const pt_net *n, int slot);

/* ---- The engine (runtime/engine.c) ------------------------------------------------- */

/* Where this rank sits in the run. */
typedef struct {
    pt_comm *comm;        /* NULL: a single rank */
    int rank;             /* world rank */
    int dp_rank, dp_size; /* in the gradient-reduction (dp·cp) group */
    int dp_index, dp_count; /* in the data-parallel dimension alone: which share of
                             each step's samples this rank reads */
    int tp_rank, cp_rank;
    int pipe[1024];       /* world rank of each stage of this rank's pipeline */
} pt_dist;

/* Fills `d` for world rank `rank` of grid `g` (comm may be NULL for one rank). */
int pt_dist_init(pt_dist *d, pt_comm *comm, const pt_grid *g, int64_t rank, pt_err *err);

typedef struct {
    double loss;              /* mean token loss of the step */
    double grad_norm;         /* before clipping */
    double lr;
    double time_s;
} pt_step_stats;

/* Learning rate at `step` (0-based): linear warm-up to lr, then cosine decay to
 * min_lr at the last step. */
double pt_lr_at(const pt_run_opts *r, int64_t step);

/* Runs one optimizer step by executing the schedule program of this rank: the
 * forward and backward instructions on micro-batches drawn from the sampler (global
 * samples [step·B, (step+1)·B)), gradient reduction, clipping and AdamW. */
int pt_engine_step(pt_net *n, const pt_dist *d, const pt_sched *s, const pt_sampler *data,
                   const pt_plan *p, int64_t step, pt_step_stats *out, pt_err *err);
/* Sum of squares of every parameter of the model, once each (over all stages, tied
 * copies and data-parallel replicas counted once): a fingerprint of the weights that
 * any layout of the same model can compare; -1 on error. */
double pt_engine_param_sumsq(pt_net *n, const pt_dist *d, pt_err *err);
/* Mean token loss over `batches` micro-batches of the validation sampler (the same
 * batches on every data-parallel rank), run through the pipeline stage by stage. */
int pt_engine_eval(pt_net *n, const pt_dist *d, const pt_sampler *data, int64_t batches,
                   double *loss, pt_err *err);

#ifdef __cplusplus
}
#endif
#endif
