/*
 * ptrt — the runtime that trains a plan for real: data loading and the tokenizers,
 * the transformer model (parameters in one buffer with named views,
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

#include "comm.h"
#include "kernels.h"
#include "planner.h"
#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Token data (runtime/data.c) ---------------------------------------------------- */

/* llm.c's token files (karpathy/llm.c, dev/data/data_common.py: HEADERS_INFO and
 * write_datafile): a header of 256 little-endian int32 (magic, version, token count,
 * the rest 0) followed by the tokens: uint16 for GPT-2's vocabulary (magic 20240520,
 * version 1), uint32 for larger ones such as Llama 3's (magic 20240801, version 7). */
enum {
    PT_TOKENS_MAGIC = 20240520,     /* uint16 tokens */
    PT_TOKENS_VERSION = 1,
    PT_TOKENS_MAGIC_U32 = 20240801, /* uint32 tokens */
    PT_TOKENS_VERSION_U32 = 7,
    PT_TOKENS_HEADER_INTS = 256
};

typedef struct pt_tokenizer pt_tokenizer;

typedef struct {
    uint32_t *tok;     /* n tokens (malloc'd) */
    int64_t n;
    int token_bytes;   /* the width in the token file it came from (2 or 4); 0: text */
    char origin[512];  /* file it came from, for messages */
} pt_tokens;

/* Reads a token file of either width, or text. A file is a token file when its first 4
 * bytes are one of the two magic numbers (then version, count and size must agree);
 * else it is text, unless its name ends in ".bin" or its first 1024 bytes (a token
 * file's header) hold a NUL byte: then it is refused, naming the magic number found and
 * the expected ones. Text goes through tk, or with tk NULL through the byte-level
 * tokenizer (one token per byte, 0..255). Errors name the file. */
int pt_tokens_load_with(const char *path, const pt_tokenizer *tk, pt_tokens *out, pt_err *err);
/* pt_tokens_load_with(path, NULL, out, err). */
int pt_tokens_load(const char *path, pt_tokens *out, pt_err *err);
/* The token width of a file for a vocabulary of v ids: 2 (uint16) up to 65536, else 4. */
int pt_tokens_width(int64_t vocab);
/* Writes tokens in llm.c's format of width token_bytes (2 or 4), through a temporary
 * file renamed when complete; a token that does not fit 16 bits in a 2-byte file is an
 * error naming it (nothing is written then). */
int pt_tokens_write(const char *path, const uint32_t *tok, int64_t n, int token_bytes,
                    pt_err *err);
void pt_tokens_free(pt_tokens *t);
/* Checks every token id is below `vocab`; the error names the file, the first offender
 * and its position, and the vocabulary. */
int pt_tokens_check_vocab(const pt_tokens *t, int64_t vocab, pt_err *err);
/* Splits off the last `val_fraction` of the tokens (at least seq+1 of them) as a
 * validation set; both outputs own copies and keep all's token_bytes. */
int pt_tokens_split(const pt_tokens *all, double val_fraction, int64_t seq, pt_tokens *train,
                    pt_tokens *val, pt_err *err);

/* The byte-level tokenizer: token i is byte i. Decoding writes printable text (other
 * bytes as \xNN) into buf; returns the length written. */
size_t pt_bytes_decode(const int32_t *tok, int64_t n, char *buf, size_t cap);

/* ---- Tokenizers (runtime/tokenizer.c, tokenizer_read.c, tokenizer_encode.c) -------------- */

/* Byte-level BPE tokenizers read from files the user has (nothing is downloaded):
 *   - a folder holding GPT-2's vocab.json and merges.txt;
 *   - a Hugging Face tokenizer.json whose model is BPE over a ByteLevel pre-tokenizer
 *     (GPT-2's, Llama 3's); other model types, normalizers and pre-tokenizers are
 *     refused naming the field;
 *   - a tiktoken rank file (each line: the token's bytes in base64, a space, its rank,
 *     which is its id), as Llama 3's tokenizer.model; one of exactly 128000 ranks gets
 *     Llama 3's 256 special tokens (ids 128000..128255) for decoding.
 * A folder without vocab.json + merges.txt is searched for tokenizer.json, then
 * tokenizer.model. Text is split into pieces by GPT-2's or Llama 3's pattern (docs/ptrun.md,
 * "Data and tokenizers": exact for ASCII, approximate for other characters), and each
 * piece's bytes are merged by rank. Special tokens decode to their names and are never
 * produced by encoding. */

/* Reads a tokenizer from path (a folder or a file, as above). Errors name the file and
 * the line or JSON field at fault. */
int pt_tokenizer_load(const char *path, pt_tokenizer **out, pt_err *err);
void pt_tokenizer_free(pt_tokenizer *t);
/* v: the highest id + 1 (special tokens included). */
int64_t pt_tokenizer_vocab(const pt_tokenizer *t);
/* One line for the user: the path, the kind of file, the counts and the split. */
void pt_tokenizer_describe(const pt_tokenizer *t, char *buf, size_t cap);
/* The path it was loaded from. */
const char *pt_tokenizer_origin(const pt_tokenizer *t);
/* The tokens of text[0, len) into *tok (malloc'd, *n of them; NULL and 0 for no text). */
int pt_tokenizer_encode(const pt_tokenizer *t, const char *text, size_t len, uint32_t **tok,
                        int64_t *n, pt_err *err);
/* The exact bytes of n tokens into *out (malloc'd, NUL-terminated after *len bytes); an
 * id that is no token is an error naming it and its position. */
int pt_tokenizer_decode(const pt_tokenizer *t, const uint32_t *tok, int64_t n, char **out,
                        size_t *len, pt_err *err);
/* Printable text of n tokens into buf (cap bytes, NUL-terminated; whole tokens only):
 * their bytes, control bytes other than newline and tab as \xNN, ids that are no
 * token as <tok N>. Returns the length written. */
size_t pt_tokenizer_decode_text(const pt_tokenizer *t, const int32_t *tok, int64_t n,
                                char *buf, size_t cap);

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
/* Whether the samples [first, end) a run asks pt_sampler_fill for are, `skip` further
 * on, global sample indices (0 to INT64_MAX), in checked arithmetic: what a run checks
 * before it sets skip (a checkpoint's data position, a rollback), so that none of the
 * indices it reads overflows. The error names the numbers. */
int pt_sampler_check_skip(int64_t skip, int64_t first, int64_t end, pt_err *err);
/* Start offset in data->tok of global sample g (any g: one below 0 counts back from
 * epoch 0). */
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
/* Opens and checks a file as pt_st_open does but reads only its header: the tensors
 * have no data pointers, and pt_st_read reads what is asked for from the file. */
int pt_st_open_header(const char *path, pt_st_file **out, pt_err *err);
/* Copies `bytes` bytes of tensor t of f (one of pt_st_at's or pt_st_get's) from byte
 * `offset` of its data to dst, from memory or (pt_st_open_header) from the file. */
int pt_st_read(const pt_st_file *f, const pt_st_tensor *t, int64_t offset, size_t bytes,
               void *dst, pt_err *err);
/* Where tensor t of f starts in the file (bytes from its beginning), or -1 when t is
 * not one of f's. */
int64_t pt_st_file_offset(const pt_st_file *f, const pt_st_tensor *t);
/* Creates a file of tensors whose data other writers put in place later (each
 * pwrite-ing its pieces at the offsets pt_st_open_header reads back): the header, and
 * the data zero-filled to their full size. The tensors' data pointers are not read.
 * Not atomic: used inside a checkpoint's temporary folder. */
int pt_st_create(const char *path, const pt_st_tensor *t, int n, const char *const *meta_keys,
                 const char *const *meta_values, int n_meta, pt_err *err);
void pt_st_close(pt_st_file *f);

/* Checkpoint folders (runtime/checkpoint.c): --checkpoint DIR holds one folder per
 * saved step, DIR/step_NNNNNNNN (meta.json beside the safetensors files of whole
 * tensors, trainer_ckpt.c), and DIR/latest_checkpointed_iteration.txt, the tracker
 * naming the newest, written last (Megatron-LM's layout). A folder is taken for ours
 * only when it holds nothing but a checkpoint's files and a meta.json this build reads
 * (an empty folder counts too); nothing else is ever moved or removed. */
typedef struct {
    int format_version;
    int64_t step;         /* optimizer steps done */
    int64_t data_pos;     /* next global sample index */
    int64_t world;        /* ranks of the run that wrote it */
    char layout[1024];    /* pt_layout_format of the layout that wrote it */
    char config_hash[17]; /* hex hash of what a resume must match: model and seed */
    char plan_hash[17];   /* hex hash of the plan file's text */
    char created_at[32];  /* ISO 8601 UTC; "" when writing: now */
    pt_model model;       /* the model's spec */
    pt_run_opts run;      /* the training settings it ran with */
    int64_t global_batch; /* samples per step */
    char precision[16];   /* pt_prec_name */
    int64_t train_tokens; /* tokens of the training data */
} pt_ckpt_meta;

int pt_ckpt_meta_write(const char *dir, const pt_ckpt_meta *m, pt_err *err);
/* Reads dir/meta.json; every field is checked, unknown ones refused, every number
 * against what it can mean (checkpoint.c: data_pos from step to step x 2^32 samples;
 * step within training.steps; the counters within a plan's limits). Writing checks the
 * same. */
int pt_ckpt_meta_read(const char *dir, pt_ckpt_meta *m, pt_err *err);
/* Whether a file can be created at `path`: makes and removes a probe file in its
 * folder. The error names path, its folder and the reason. Changes nothing. */
int pt_path_writable(const char *path, pt_err *err);
/* Whether checkpoints may be written to `dir` (what to check before training): dir is
 * absent, or a folder holding only the tracker, the lock file, step folders of ours and
 * their temporaries, and it is writable; keep >= 1. The error names the path at fault. */
int pt_ckpt_check_target(const char *dir, int keep, pt_err *err);
/* One run writes a checkpoint folder at a time: the run that writes checkpoints holds
 * the lock of its folder (on rank 0) from opening to its end. pt_ckpt_lock creates dir
 * when absent and the lock file dir/lock, takes an exclusive flock on it (flock: a
 * local file system's own lock, emulated with fcntl locks on NFS by Linux) and writes
 * "pid P host H" into it. The kernel drops the lock when the process ends, however it
 * ends (kill -9 too), so a crashed run's lock file is simply taken by the next run.
 * When another process holds it, the error names dir, the holder's pid and host as the
 * lock file says, and the lock file. pt_ckpt_unlock releases it (h may be one that
 * pt_ckpt_lock failed to fill), and removes dir again when pt_ckpt_lock made it and it
 * holds nothing else. */
typedef struct {
    int fd;               /* the lock file, locked; -1: none */
    bool made_dir;        /* pt_ckpt_lock created dir */
    char dir[4096];
} pt_ckpt_hold;
int pt_ckpt_lock(const char *dir, pt_ckpt_hold *h, pt_err *err);
void pt_ckpt_unlock(pt_ckpt_hold *h);
/* Creates dir (when absent) and the temporary folder dir/step_N.tmp-<pid> for the
 * checkpoint of `step`, and returns its path. pt_ckpt_commit syncs it and renames it to
 * dir/step_N (one of the same step already there is replaced), rewrites the tracker,
 * removes the step folders before it beyond the `keep` newest (later ones, of a run
 * rolled back or resumed from an older step, are left alone) and orphaned temporaries
 * of killed runs that are ours and not newer. pt_ckpt_abort removes tmp (only a
 * temporary folder of ours). */
int pt_ckpt_begin(const char *dir, int64_t step, char *tmp, size_t n, pt_err *err);
int pt_ckpt_commit(const char *tmp, const char *dir, int keep, pt_err *err);
void pt_ckpt_abort(const char *tmp);
/* The checkpoint to load from dir: dir itself when it is a step folder (has a
 * meta.json); else the step the tracker names when it is complete, or the newest
 * complete step folder (or temporary an interrupted commit left); with a step below
 * `below_step` (< 0: any), one whose config hash is `config_hash` preferred (NULL:
 * any). Its path goes to found (n bytes), its meta.json to m. A step folder without a
 * meta.json is incomplete and passed over; one newer than the checkpoint taken whose
 * meta.json is there but cannot be read (or names another step) is an error: its own,
 * and the folder of the one before it to name instead. */
int pt_ckpt_find(const char *dir, const char *config_hash, int64_t below_step, char *found,
                 size_t n, pt_ckpt_meta *m, pt_err *err);

/* ---- Communication: the communication layer (comm/comm.h: pt_comm, pt_rdv) ------------ */

/* ---- The model (runtime/param_table.c, net.c, tensors.c, chunk.c, layer.c) --------- */

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
    bool expert;        /* a mixture of experts' expert tensor: whole on the ranks of its
                           expert-data-parallel group, which tp folds into (neither
                           split nor copied over tp: tp_copies 1) */
} pt_param;

/* One rank's part of the model: its parameters and their optimizer state, the op
 * lists it runs and the buffers of its micro-batches in flight (runtime/net.c builds
 * it; its fields are the runtime's own, model_internal.h). */
typedef struct pt_net pt_net;

/* PowerSGD's steps on one matrix M (rows, cols) of one rank, fp32 backend memory
 * (runtime/compress.c; the sums over the ranks between them are the caller's):
 * pt_psgd_local_p: M += E (E NULL: none), P (rows, r) = M Q (Q (cols, r));
 * pt_psgd_local_q: P (summed) orthonormalised, Q = M^T P;
 * pt_psgd_local_done: with Q summed, E = M - P Q^T / ranks (E NULL: none), M = P Q^T. */
void pt_psgd_local_p(pt_kernels *kn, float *M, const float *E, const float *Q, float *P,
                     int64_t rows, int64_t cols, int64_t r);
void pt_psgd_local_q(pt_kernels *kn, const float *M, float *P, float *Q, int64_t rows,
                     int64_t cols, int64_t r);
void pt_psgd_local_done(pt_kernels *kn, float *M, float *E, const float *P, const float *Q,
                        int64_t rows, int64_t cols, int64_t r, int ranks);

/* Builds pipeline stage `stage` of the model of plan `p` (its vp chunks: virtual
 * stages c·p + stage) on backend `kn` with `slots` micro-batches of activations,
 * parameters initialised from `seed`: each element from a Philox stream keyed by
 * (seed, parameter name, element index), so the same model in any layout starts from
 * the same weights. Checks that the parameter count equals the planner's. *out is the
 * caller's to pt_net_free; on an error it is NULL and nothing is left allocated. */
int pt_net_init(pt_net **out, const pt_plan *p, pt_kernels *kn, int stage, int slots,
                uint64_t seed, pt_trace *trace, pt_err *err);
/* Where a rank's part of the model sits: its pipeline stage, its tensor-parallel
 * part (which rows or columns of each split tensor, and which slice of the
 * vocabulary), its context-parallel chunks of the sequence, and the communicator
 * for the collectives inside a layer. */
typedef struct {
    int stage, tp_rank, cp_rank;
    int dp_rank, dp_size;     /* in the gradient-reduction (dp·cp) group: ZeRO's shards */
    int ep_rank, edp_rank;    /* in the expert-parallel group (which experts are here)
                                 and the expert-data-parallel one (a mixture of experts) */
    int etp_rank;             /* in the expert-tensor-parallel group (which slice of each
                                 local expert's MLP is here) */
    pt_comm *comm;            /* needed when tp or cp > 1 */
    int cp_next, cp_prev;     /* world ranks of the cp ring's neighbours */
} pt_net_place;
/* pt_net_init for the part of the model at `at`. */
int pt_net_init_at(pt_net **out, const pt_plan *p, pt_kernels *kn, const pt_net_place *at,
                   int slots, uint64_t seed, pt_trace *trace, pt_err *err);
/* Frees everything of n (NULL: nothing). */
void pt_net_free(pt_net *n);
/* Backend memory the model allocated (parameters, optimizer state, activations,
 * scratch): what the planner's memory model predicts for the rank. */
int64_t pt_net_bytes(const pt_net *n);
/* The parameter elements on this rank (the length of the flat buffer that
 * pt_net_get_state reads), and its parameter table: pt_net_param_count tensors,
 * pt_net_param_at(n, i) the i-th in buffer order (NULL outside [0, count)). */
int64_t pt_net_elems(const pt_net *n);
/* The elements of each Adam moment this rank holds: pt_net_elems, or its shares of
 * them with ZeRO (padded shares of each bucket, or shards of each segment). */
int64_t pt_net_opt_elems(const pt_net *n);
int pt_net_param_count(const pt_net *n);
const pt_param *pt_net_param_at(const pt_net *n, int i);
/* The entry of parameter `name` (e.g. "layers.3.q.w") in this rank's table, or NULL
 * when this rank holds no part of it. */
const pt_param *pt_net_param(const pt_net *n, const char *name);
/* The parameter table of the whole model on one rank (tp = pp = 1): every tensor's
 * name and whole shape, in the order the buffer holds them; the one list the
 * checkpoint and Hugging Face code walk. *out is malloc'd (*count entries). */
int pt_model_param_table(const pt_model *m, pt_param **out, int *count, pt_err *err);

/* Copies the fp32 master weights (pt_net_elems floats) and Adam moments
 * (pt_net_opt_elems each) to host arrays (any may be NULL), or sets them from host
 * arrays (refreshing the bf16 compute copy on a bf16 backend): what checkpoints save
 * and load, on any backend. */
int pt_net_get_state(pt_net *n, float *master, float *m, float *v, pt_err *err);
int pt_net_set_state(pt_net *n, const float *master, const float *m, const float *v,
                     pt_err *err);

/* Checkpoints in any layout: a parameter's part here and the whole tensor. */
/* The whole (unsplit) tensor's shape ([1] is 0 for a vector). */
void pt_param_whole_shape(const pt_net *n, const pt_param *p, int64_t shape[2]);
/* Index in the whole tensor of element i of this rank's part. */
int64_t pt_param_whole_index(const pt_param *p, int64_t i);
/* Whether this rank's copy of p is the one a checkpoint takes among the tensor-parallel
 * ranks that hold the same part and the pipeline stages that hold a tied embedding
 * (the first stage's); data-parallel copies are the caller's to choose between. */
bool pt_param_writer(const pt_net *n, const pt_param *p);
/* The parameter elements whose Adam moments this rank holds: [lo, hi) of its flat
 * buffer at m and v + opt_at. One span of every element without ZeRO; with ZeRO 1 its
 * share of each bucket (its place in the bucket's group: dp_rank in dp·cp, for an
 * experts' bucket the rank's in their expert-data-parallel group); with ZeRO 2/3 its shard
 * of each segment, whose master weights it alone holds too. *out is malloc'd. */
typedef struct {
    int64_t lo, hi, opt_at;
} pt_net_span;
int pt_net_opt_spans(const pt_net *n, int dp_rank, pt_net_span **out, int *count, pt_err *err);
/* The fp32 master weights this rank holds to host memory (pt_net_elems floats, by
 * flat index): all of them, or with ZeRO 2/3 only its shards (other elements
 * untouched). Not collective, unlike pt_net_get_state under ZeRO 2/3. */
int pt_net_get_own_master(pt_net *n, float *master, pt_err *err);

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
 * losses to *loss_sum, a double of backend memory, where the kernels run (nothing
 * waits: the host reads it once the step is done). Other chunks start from pt_net_chunk_input. dloss is
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
float *pt_net_chunk_output(pt_net *n, int slot, int chunk); /* chunk's output in the slot */
float *pt_net_dres(pt_net *n);
/* The whole model on one stage of one chunk (pp = vp = 1); each waits for its work and
 * ends by giving the op spans their device times (pt_net_trace_resolve). Here
 * *loss_sum is host memory, added to. */
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
/* The largest point-to-point transfer this rank makes: a stage boundary's activations
 * or gradients, or (cp) one hop of the K/V ring with its gradients. */
int64_t pt_net_p2p_bytes(const pt_net *n);
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
    /* a mixture of experts (0 in a dense model), over the step's training forwards */
    double moe_aux;           /* the load-balancing loss: per sequence, summed over the
                                 layers, the step's mean */
    double moe_dropped;       /* the share of the routers' copies a capacity dropped */
    double moe_imbalance;     /* the busiest ep rank's rows over the mean, averaged over
                                 layers and micro-batches (the planner's --moe-imbalance) */
    double moe_expert_max;    /* the busiest expert's rows over the mean, likewise */
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

/* ---- The trainer (runtime/trainer.h): a plan's run from open to close ---------------- */
#include "trainer.h"

#endif
