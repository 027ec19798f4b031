/*
 * Internal to the trainer (runtime/trainer*.c): the state of one rank's run and what its
 * four files share. trainer.c opens a run and steps it, trainer_ckpt.c saves and loads
 * checkpoints, trainer_sample.c draws the sample at the end, trainer_log.c writes the
 * JSON-lines log, the trace and the record.
 */
#ifndef PT_TRAINER_INTERNAL_H
#define PT_TRAINER_INTERNAL_H

#include "model_internal.h"
#include "trainer.h"

#include <stdio.h>

struct pt_trainer {
    pt_trainer_opts o;
    pt_plan plan;
    pt_grid grid;               /* the layout's rank grid, computed once at open: the
                                   communicator's groups, the engine's pipeline and
                                   this rank's place all come from it */
    pt_tokens all, train, val;
    pt_sampler train_s, val_s;
    pt_kernels *kn;
    pt_net net;
    bool net_built;
    pt_sched sched;
    pt_trace trace;
    FILE *log;
    int log_fd;                 /* the log, locked, until pt_trainer_log_open makes it
                                   the stream `log`; -1: none */
    bool log_made;              /* pt_trainer_log_claim created the file */
    int log_errno;              /* errno of the first failed log line, 0 when none */
    double model_flops;         /* per step, all ranks, the planner's count */
    double peak_flops;          /* all the layout's devices */
    pt_comm *comm;
    pt_dist dist;
    pt_net_place place;         /* this rank's part of the model */
    int rank, world, stage;
    double *step_s;             /* the time of each step after this process's first */
    int64_t timed_steps, steps_run, cap_step_s;
    bool has_data;              /* the first and last stage read data; others none */
    int64_t start_step;         /* the step this process started at */
    int64_t next;               /* the next step to run, 0-based */
    double t0;                  /* when this process ran its first step (pt_trace_now) */
    int64_t data_skip;          /* samples skipped by spike rollbacks (train_s.skip) */
    bool spike_fired;           /* the PT_TEST_SPIKE_AT test hook has fired */
    struct pt_spike_guard *guard;
    char config_hash[17];       /* what a resume must match: the model and the seed */
    char plan_hash[17];         /* of the plan file's text, for checkpoints */
    char saved_path[4200];      /* the checkpoint pt_trainer_save wrote last */
    char resume_note[3072];     /* the settings a resume changed ("lr 0.0006 -> 0.0003") */
    pt_ckpt_hold ckpt_hold;     /* the checkpoint folder's lock, on rank 0 */
};

/* ---- trainer.c ---- */

/* Whether the steps from `from` to the run's last read global sample indices (in
 * checked arithmetic) when `skip` samples are skipped: what a resume and a rollback
 * check before they set it. */
int pt_trainer_check_skip(const pt_trainer *r, int64_t skip, int64_t from, pt_err *err);
/* Every rank fails when one did (rc != 0 on some rank), with rank 0's reason where it
 * has one (the one ptrun prints), else saying that another rank could not do `what`;
 * 0 when every rc was 0. Collective. */
int pt_trainer_agree(pt_trainer *r, int rc, const char *what, pt_err *err);

/* ---- trainer_ckpt.c ---- */

/* Loads the checkpoint at path, whose meta.json pt_ckpt_find read, after checking that
 * it belongs to this run, and takes its data position. Collective. */
int pt_trainer_load_ckpt(pt_trainer *r, const char *path, const pt_ckpt_meta *meta,
                         pt_err *err);
/* Test hook (tests/tools/cli_checkpoint.sh), not an option: PT_TEST_SPIKE_AT=N multiplies
 * every parameter by 100 just before step N runs the first time in this process, so
 * that step's loss and gradients really explode, deterministically. Collective. */
int pt_trainer_test_spike(pt_trainer *r, int64_t step, pt_err *err);

/* ---- trainer_log.c ---- */

/* Starts a line of the log and returns the log to write its fields into, each with its
 * leading comma, before pt_trainer_log_end; NULL without a log. The line starts
 * {"type":TYPE, "step":STEP (when STEP >= 0), "time":now (ISO 8601, UTC), "unix_s",
 * "tokens_seen" (r->next steps' tokens: advance r->next before a step's line),
 * "allocated_bytes", "peak_rss_bytes". type and step lead, in this order: tests and
 * scripts find a step's line by the text "type":"step","step":N, and read its last
 * field up to the closing brace (tests/tools/cli_ptrun.sh, mpi_equivalence.sh,
 * bench/), so a type's own fields come after these and its last stays last. */
FILE *pt_trainer_log_begin(pt_trainer *r, const char *type, int64_t step);
/* Ends and flushes a line, keeping the cause of the first failure for
 * pt_trainer_log_check. */
void pt_trainer_log_end(pt_trainer *r, FILE *f);
/* A whole line: log_begin, then the fields `fields` formats. */
__attribute__((format(printf, 4, 5)))
void pt_trainer_log_line(pt_trainer *r, const char *type, int64_t step, const char *fields, ...);
/* Opens the options' log without truncating it and locks it (flock) for the run's
 * lifetime, so that a second run given the same file is refused before it changes a
 * byte of it; the error says the file is another run's. A FIFO or a terminal is not
 * locked. */
int pt_trainer_log_claim(pt_trainer *r, pt_err *err);
/* The log's first line, and again where a resumed run appends to it: what ran and which
 * build ran it. Truncates the claimed log (a fresh run) or appends to it (a resumed
 * one). */
int pt_trainer_log_open(pt_trainer *r, pt_err *err);
/* Closes the log; one this run created and never wrote is removed again. */
void pt_trainer_log_close(pt_trainer *r);
/* The absolute form of path (as given when it cannot be resolved). */
void pt_trainer_abs_path(const char *path, char *out, size_t cap);

#endif
