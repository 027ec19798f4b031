/*
 * ptrt — the runtime that trains a plan for real: data loading and the byte-level
 * tokenizer, the transformer model (parameters in one buffer with named views,
 * initialisation keyed by name and element, layers executed from the planner's op
 * lists through the kernel table), the engine that runs the planner's schedule
 * programs, the optimizer step, and checkpoints.
 *
 * Letters as in planner.h and kernels.h: b micro-batch, s sequence, h hidden,
 * a heads, k KV heads, d head dim, f FFN size, v vocabulary, L layers.
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
} pt_sampler;

int pt_sampler_init(pt_sampler *s, const pt_tokens *data, int64_t seq, uint64_t seed,
                    pt_err *err);
/* Start offset in data->tok of global sample g. */
int64_t pt_sampler_offset(const pt_sampler *s, int64_t g);
/* Fills inputs and targets for `count` consecutive global samples from `first`. */
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
 * overlaps, sizes agreeing with dtype and shape. Errors name the file and tensor. */
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
 * <dir>.tmp-<pid> and renamed to <dir> when complete, replacing an older <dir> only
 * then. */
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
/* Creates the temporary directory for a checkpoint of `dir` and returns its path;
 * pt_ckpt_commit renames it into place (removing an older checkpoint only after
 * the new one is complete); pt_ckpt_abort removes it. */
int pt_ckpt_begin(const char *dir, char *tmp, size_t n, pt_err *err);
int pt_ckpt_commit(const char *tmp, const char *dir, pt_err *err);
void pt_ckpt_abort(const char *tmp);

/* ---- Communication (runtime/comm.c) ----------------------------------------------------- */

/* The ranks of a run and their process groups, built from the planner's rank grid
 * (pt_grid_group), so the runtime's groups are the ones the planner priced. MPI
 * backend on host buffers. Every call is collective over the group named. */
typedef struct pt_comm pt_comm;

/* Starts MPI when a launcher (mpirun, PMI/PMIx) started the process; a process
 * started on its own is a world of one and never touches MPI. */
int pt_comm_init(int *argc, char ***argv, pt_comm **out, pt_err *err);
int pt_comm_rank(const pt_comm *c);
int pt_comm_size(const pt_comm *c);
/* Builds a communicator for every group kind of `g` (tp, cp, dp, pp, dp*cp, tp*cp)
 * and the tied-embedding pair (the first and last stage of each pipeline). */
int pt_comm_groups(pt_comm *c, const pt_grid *g, pt_err *err);

/* Sums in place over the group (kind = PT_GROUP_COUNT: the tied-embedding pair;
 * kind < 0: the whole world). */
int pt_comm_allreduce(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err);
int pt_comm_allreduce_f64(pt_comm *c, int kind, double *buf, int64_t n, pt_err *err);
/* in (n·size) summed over the group, this rank's n-element slice into out. */
int pt_comm_reducescatter(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                          pt_err *err);
/* Every rank's n elements, in group order, into out (n·size); in may be out + rank·n. */
int pt_comm_allgather(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                      pt_err *err);
/* A blocking receive from a world rank; the tag tells transfers apart. */
int pt_comm_recv(pt_comm *c, int from, int tag, float *buf, int64_t n, pt_err *err);
/* Rank 0's n bytes to every rank of the world. */
int pt_comm_bcast(pt_comm *c, void *buf, int64_t n, pt_err *err);
/* Whether every rank's `ok` is true (a world-wide AND; a barrier). */
bool pt_comm_all_ok(pt_comm *c, bool ok);

/* Posts a send of a private copy of buf (so the caller may reuse buf at once);
 * pt_comm_wait_sends completes every posted send. Pipeline transfers use these, as
 * the schedule programs assume sends that do not wait for their receiver. */
int pt_comm_isend(pt_comm *c, int to, int tag, const float *buf, int64_t n, pt_err *err);
int pt_comm_wait_sends(pt_comm *c, pt_err *err);
/* Ends every rank of the run at once with `why` printed by this rank: what a failing
 * rank does, so that no other rank hangs in a collective. */
void pt_comm_abort(pt_comm *c, const char *why);
void pt_comm_finalize(pt_comm *c);

/* ---- The model (runtime/model.c, runtime/layer.c) ----------------------------------- */

/* One parameter tensor: a named view into the single parameter buffer. */
typedef struct {
    char name[48];      /* "wte", "layers.3.q.w", "final_norm.b", ... */
    int64_t offset;     /* elements into the buffer */
    int64_t count;
    int ndim;
    int64_t shape[2];
    bool decay;         /* weight decay applies (matrices, not norms or biases) */
} pt_param;

/* Activations one micro-batch keeps for its backward pass (one "slot"). */
typedef struct pt_acts pt_acts;

typedef struct {
    pt_model spec;
    pt_layout layout;
    pt_kernels *kn;
    pt_trace *trace;          /* may be off */
    int rank;                 /* for trace spans */
    int stage;                /* pipeline stage of this rank */
    int64_t chunk_layers;     /* layers per model chunk, L / (pp·vp) */
    int64_t n_layers;         /* layers on this rank, vp·chunk_layers */
    int64_t chunk_begin[64], chunk_end[64]; /* parameter elements of each chunk: its
                                 layers, with the embedding on virtual stage 0 and the
                                 final norm and head on the last virtual stage */

    pt_param *param;
    int n_param;
    int64_t n_elems;          /* parameters on this rank */
    float *w;                 /* (n_elems) [act] every parameter, one buffer */
    float *grad;              /* (n_elems) fp32 */
    float *m, *v;             /* (n_elems) fp32 Adam moments */
    float *master;            /* (n_elems) fp32 master weights; == w on fp32 backends */

    pt_acts **slot;           /* activations of the micro-batches in flight */
    int n_slots;
    void *scratch;            /* gradient scratch shared by all layers */

    int64_t bytes;            /* backend memory this model allocated: what the planner's
                                 memory model predicts for the rank */
    pt_oplist ops[6];         /* the planner's op lists this model executes:
                                 layer fwd/bwd, embed fwd/bwd, head fwd/bwd */
} pt_net;

/* Builds pipeline stage `stage` of the model of plan `p` (its vp chunks: virtual
 * stages c·p + stage) on backend `kn` with `slots` micro-batches of activations,
 * parameters initialised from `seed`: each element from a Philox stream keyed by
 * (seed, parameter name, element index), so the same model in any layout starts from
 * the same weights. Checks that the parameter count equals the planner's. */
int pt_net_init(pt_net *n, const pt_plan *p, pt_kernels *kn, int stage, int slots,
                uint64_t seed, pt_trace *trace, pt_err *err);
void pt_net_free(pt_net *n);
const pt_param *pt_net_param(const pt_net *n, const char *name);

/* Copies the fp32 master weights and Adam moments to host arrays of n_elems floats
 * (any may be NULL), or sets them from host arrays (refreshing the bf16 compute copy
 * on a bf16 backend): what checkpoints save and load, on any backend. */
int pt_net_get_state(pt_net *n, float *master, float *m, float *v, pt_err *err);
int pt_net_set_state(pt_net *n, const float *master, const float *m, const float *v,
                     pt_err *err);

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
/* The chunk's input (received from the previous stage) and output (sent on) in
 * `slot`, (b·s, h) [act]; and the residual-stream gradient (b·s, h) [act]. */
float *pt_net_chunk_input(pt_net *n, int slot, int chunk);
float *pt_net_chunk_output(pt_net *n, int slot, int chunk);
float *pt_net_dres(pt_net *n);
/* The whole model on one stage (pp = 1): every chunk in order. */
int pt_net_forward(pt_net *n, int slot, const int32_t *tokens, const int32_t *targets,
                   float dloss, double *loss_sum, pt_err *err);
int pt_net_backward(pt_net *n, int slot, pt_err *err);
/* The logits (b·s, v) [act], in backend memory, of the last forward in `slot`
 * made with dloss = 0 (for sampling). */
const float *pt_net_last_logits(const pt_net *n, int slot);

/* ---- The engine (runtime/engine.c) ------------------------------------------------- */

/* Where this rank sits in the run. */
typedef struct {
    pt_comm *comm;        /* NULL: a single rank */
    int rank;             /* world rank */
    int dp_rank, dp_size; /* in the data-parallel (dp·cp) group */
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
