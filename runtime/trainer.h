/*
 * The trainer: what runs a plan.json from its first step to its last on this rank —
 * the plan's checks, this rank's place in the planner's rank grid (computed once, at
 * open, and handed to the communicator and the engine), the data, the model on its
 * backend, steps under the loss-spike guard, validation, checkpoints (save, resume,
 * rollback), the JSON-lines log, sampling, and the trace and cost-table record of the
 * run. It prints nothing: each call returns what happened, and tools/ptrun.c says it.
 * Part of ptrt; runtime.h includes this header.
 *
 * Collective calls (marked so) must be made by every rank of the run in the same
 * order. Errors: 0, or -1 (other codes where said) with a pt_err naming the file,
 * option or value at fault.
 */
#ifndef PT_TRAINER_H
#define PT_TRAINER_H

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Opening a run ------------------------------------------------------------------- */

/* Text shipped with every Debian system (package base-files): the built-in corpus, used
 * when neither the plan nor the options name data. */
#define PT_TRAINER_DEFAULT_CORPUS "/usr/share/common-licenses/GPL-3"

/* What to do on a loss spike (or a NaN/Inf loss). */
typedef enum { PT_SPIKE_OFF, PT_SPIKE_STOP, PT_SPIKE_ROLLBACK } pt_spike_action;

/* The trainer's settings: the plan and what the command line changes about it. The
 * strings are the caller's and must outlive the trainer. */
typedef struct {
    const char *plan;            /* plan.json path */
    const char *data;            /* overrides the plan's data; NULL: the plan's, else
                                    PT_TRAINER_DEFAULT_CORPUS */
    const char *val_data;        /* validation data (token file or text): data is then
                                    trained on whole; NULL: the last 10% of data */
    const pt_tokenizer *tokenizer; /* encodes text data and decodes the sample (NULL:
                                    byte-level); the caller's, loaded by
                                    pt_tokenizer_load; its vocabulary must fit the
                                    model's */
    int64_t steps;               /* overrides the plan's run.steps; 0: the plan's */
    double dropout;              /* overrides the plan's; < 0: the plan's */
    int threads;                 /* BLAS threads of the CPU backend */
    const char *ckpt;            /* checkpoint directory (NULL: none) */
    int keep_ckpt;               /* checkpoints kept: DIR, DIR.1, ... (>= 1) */
    const char *log;             /* JSON-lines log (NULL: none); give it on rank 0 only;
                                    locked for the run (pt_trainer_open) */
    bool resuming;               /* the log is appended to and its header says so */
    const char *trace;           /* Chrome trace written by pt_trainer_trace_and_record */
    int64_t trace_steps;         /* only the last K steps in it; 0: all */
    const char *record_db;       /* cost table the run is recorded in (NULL: no record) */
    int64_t val_batches;         /* micro-batches per validation */
    int64_t spike_window;        /* steps whose medians a spike is measured against */
    double spike_factor;         /* over the median loss */
    double spike_grad_factor;    /* over the median gradient norm */
    pt_spike_action spike_action;
    const char *version;         /* "ptrun X (CUDA backend: yes)", for the log's header */
    const char *git_revision;    /* for the log's header and the record */
    void (*kernel_note)(void *arg, const char *line); /* the compute backend's notes
                                    (kernels.h, pt_kernels.note), handed to it when it
                                    starts; NULL drops them */
    void *kernel_note_arg;
} pt_trainer_opts;

/* Fills o with the defaults of ptrun's options (keep 2 checkpoints, 8 validation
 * micro-batches, spike window 32, factors 3 and 10, stop on a spike, one thread). */
void pt_trainer_opts_default(pt_trainer_opts *o);

typedef struct pt_trainer pt_trainer;

/* What pt_trainer_open found, for the caller to report. */
typedef struct {
    char priced_stack[64];       /* the stack the plan was priced for when it is not
                                    ptrun's own ("": it is), which trains it anyway */
    char layout[1024];           /* pt_layout_format of the plan's layout */
    bool has_data;               /* this rank reads data (first and last stage) */
    char data_path[512];         /* what it read, with its token counts */
    char val_path[512];          /* the validation file ("": split off data_path's) */
    int64_t tokens, train_tokens, val_tokens;
    char device[256];            /* a device backend's about line: the device, driver and
                                    libraries ("": the CPU backend) */
} pt_trainer_info;

/* Opens the run of world rank pt_comm_rank(comm) (comm: pt_comm_init's, also for a
 * world of one; it must outlive the trainer): reads and checks the plan (its world size
 * against the run's), applies the options, computes the rank grid once and from it this
 * rank's place and process groups (the communicator's and the engine's), starts the
 * compute backend, claims the run's outputs, loads the data and builds this rank's part
 * of the model. Claiming: a checkpoint folder that cannot be written or holds what is
 * not ours is refused, else locked (pt_ckpt_lock, on rank 0), and the log is opened
 * without truncating it and locked (flock); a folder or log another running process
 * holds is refused, naming it (and for the folder the holder's pid and host). Every
 * rank fails together, with rank 0's reason. The locks are held until pt_trainer_close
 * or the process's end. Collective. On error *out may hold a partly opened trainer:
 * pt_trainer_close it. */
int pt_trainer_open(pt_trainer **out, const pt_trainer_opts *o, pt_comm *comm,
                    pt_trainer_info *info, pt_err *err);
/* The plan as it trains (options applied, ptrun's stack). */
const pt_plan *pt_trainer_plan(const pt_trainer *t);
/* Frees everything; closes the log. t may be NULL. */
void pt_trainer_close(pt_trainer *t);

/* ---- Checkpoints -------------------------------------------------------------------- */

typedef struct {
    char path[4096];             /* the checkpoint loaded (a step folder) */
    int64_t step;                /* its step: training continues after it */
    int64_t data_pos;            /* its data position */
    int64_t data_skip;           /* this run's sample offset: data_pos - step x batch */
    char layout[1024];           /* the layout that wrote it */
    int64_t world;               /* and its ranks */
    char changed[3072];          /* settings this run changes ("lr 0.0006 -> 0.0003, ..."),
                                    "" when none */
} pt_trainer_resumed;

/* Continues from a checkpoint: dir is a step folder, or a --checkpoint folder whose
 * newest complete step is taken (pt_ckpt_find: a newest step whose meta.json is damaged
 * is an error, not passed over). Any layout, ZeRO stage, micro-batch size or world size
 * may have written it: each rank reads its elements of the whole tensors. The model,
 * the seed and the training data must be the checkpoint's (the error names the field
 * and both values), its step at most this run's steps, and its data position such that
 * this run's remaining steps read global sample indices (pt_sampler_check_skip); other
 * settings may differ and are listed in `changed`. Reading a folder another run is
 * writing is allowed (its step folders are complete once named); writing into it is
 * not (pt_trainer_open). Collective. */
int pt_trainer_resume(pt_trainer *t, const char *dir, pt_trainer_resumed *out, pt_err *err);

typedef struct {
    char path[4096];             /* what was loaded */
    bool hugging_face;           /* a Hugging Face model folder (else a checkpoint) */
    int64_t step;                /* the checkpoint's step (training starts at 0 anyway) */
} pt_trainer_initialized;
/* Loads only the weights, from a checkpoint of ours (a step folder or a --checkpoint
 * folder) or a Hugging Face GPT-2 / LLaMA folder (config.json and safetensors;
 * runtime/hf.c); the model must agree, the optimizer starts afresh at step 0.
 * Collective. */
int pt_trainer_init_from(pt_trainer *t, const char *dir, pt_trainer_initialized *out,
                         pt_err *err);
/* Writes a checkpoint of the state after `step` steps to the options' directory, as
 * DIR/step_N: every rank its pieces of the whole tensors into one temporary folder,
 * renamed into place only when all succeeded, keeping the newest keep_ckpt.
 * Collective. */
int pt_trainer_save(pt_trainer *t, int64_t step, pt_err *err);
/* The folder the last pt_trainer_save wrote ("" before any). */
const char *pt_trainer_saved_path(const pt_trainer *t);

/* ---- Training ------------------------------------------------------------------------ */

/* Starts the log pt_trainer_open claimed (truncated for a fresh run, appended to after
 * a resume) with its header, and checks that the trace and the record's cost table can
 * be written: what fails here fails before the first step. Call after
 * pt_trainer_resume, if any. */
int pt_trainer_start(pt_trainer *t, pt_err *err);

/* This rank's model memory beside the planner's prediction for its stage. */
typedef struct {
    int rank, stage;
    double allocated_bytes;      /* what the model allocated on the backend */
    double planned_bytes;        /* the memory model's total for the stage */
    double planned_comm_bytes;   /* of which communication buffers */
} pt_trainer_memory;
void pt_trainer_memory_of(const pt_trainer *t, pt_trainer_memory *out);

/* The next step to run, 0-based (after a resume, the checkpoint's step). */
int64_t pt_trainer_next_step(const pt_trainer *t);

/* What one call of pt_trainer_step did. */
typedef struct {
    int64_t step;                /* 1-based: the step run */
    pt_step_stats stats;
    double tokens_per_s, mfu;    /* mfu 0 when the cluster's peak is unknown */
    double eta_s;                /* to the last step, at the pace since the first */
    /* the loss-spike guard */
    bool spike;                  /* a spike: loss or gradient norm far over the medians */
    double median_loss, median_grad_norm;
    int64_t window;              /* steps the medians are of */
    bool nonfinite;              /* the loss or gradient norm is NaN or infinite */
    bool rolled_back;            /* back to an earlier checkpoint (below) */
    char rollback_path[4096];
    int64_t rollback_to;         /* its step: the next step run is rollback_to + 1 */
    int64_t rollback_data_pos;   /* the data position now: past the spike's batch */
    /* FP8 training (the plan's fp8 on): this rank's scales' range over the tensors it
     * quantized, the values saturated and flushed to zero in the step, of fp8_elems,
     * and of those the ones read for an amax first (fp8_amax_elems) */
    bool fp8;
    double fp8_scale_min, fp8_scale_max, fp8_overflow, fp8_underflow;
    int64_t fp8_elems, fp8_amax_elems;
} pt_trainer_step_result;

/* Runs step pt_trainer_next_step (its batch, the schedule program, the optimizer) and
 * guards it: a finite, ordinary step returns 0 and is logged; a spike or a NaN/Inf
 * loss under --spike-action rollback with a checkpoint from before it reloads that
 * checkpoint and skips the batches since (returns 1; the step is not counted); else it
 * returns 2 with err saying why training stops and which checkpoint is kept. -1 on
 * failure. Collective. */
int pt_trainer_step(pt_trainer *t, pt_trainer_step_result *out, pt_err *err);
/* The mean token loss over val_batches micro-batches of the validation data, logged at
 * `step`. Collective. */
int pt_trainer_evaluate(pt_trainer *t, int64_t step, double *loss, pt_err *err);
/* Logs the sum of squares of every parameter (a fingerprint of the weights any layout
 * can compare) at the last step. Collective. */
int pt_trainer_fingerprint(pt_trainer *t, double *sumsq, pt_err *err);
/* Whether every line of the log reached its file (a full disk cuts it mid-line). */
int pt_trainer_log_check(pt_trainer *t, pt_err *err);

/* ---- The end of a run ------------------------------------------------------------------ */

/* What pt_trainer_trace_and_record recorded, on rank 0. */
typedef struct {
    bool recorded;
    char db[512];
    int64_t run_id;
    double measured_step_s, predicted_step_s;
    int64_t steps_timed;
    int world;
    size_t n_stats, n_spans;
    char noisy[256];             /* why the run is not calibrated into the tables ("": it is) */
    int64_t samples;             /* op timings stored as cost samples */
    double gemm_ratio;           /* its GEMMs' time over the profiled time */
} pt_trainer_record;

/* Gathers every rank's spans and memory to rank 0, merges them on rank 0's clock,
 * writes the Chrome trace (options' trace) and records the run in the cost table
 * (options' record_db): predicted against measured, each rank's memory, per-op
 * statistics, the last step's spans and, unless the load check finds the machine busy,
 * the op timings as samples. Collective; rec is filled on rank 0. */
int pt_trainer_trace_and_record(pt_trainer *t, pt_trainer_record *rec, pt_err *err);

/* Whether one rank holds the whole model and runs it alone (no pipeline stages, no
 * collectives inside a layer, no ZeRO-3 gathers): then pt_trainer_sample draws from
 * rank 0's own model, else it gathers the model on rank 0 first. */
bool pt_trainer_can_sample(const pt_trainer *t);
/* Generates `count` tokens after a prompt from the validation data, each drawn at
 * temperature 0.8 with a Philox stream keyed by the run's seed (the same run writes the
 * same text), and writes them decoded into text (cap bytes) on rank 0 by the options'
 * tokenizer, else the byte-level one; with a vocabulary larger than the byte
 * tokenizer's and no tokenizer, a note that they are token ids. Other ranks get "".
 * Any layout: without pt_trainer_can_sample every rank sends its part of the fp32
 * master weights to rank 0, which builds the model on one rank (tp = pp = cp = 1,
 * ZeRO 0, the plan's model, precision and backend) from them beside its own part,
 * draws from it and frees it; rank 0 then needs host memory for the whole model's
 * fp32 weights and backend memory for that model with its optimizer state. Errors
 * (that memory, a failed gather) fail every rank with rank 0's reason, before the
 * drawing. The model's weights are unchanged. Collective. */
int pt_trainer_sample(pt_trainer *t, int64_t count, char *text, size_t cap, pt_err *err);

#ifdef __cplusplus
}
#endif
#endif
