/*
 * Learning from measured runs of any framework (planner/runrec.c, calib.c): a run record
 * says what was trained (model, cluster and nodes, stack, layout, batch, sequence,
 * precision) and what it measured; the planner predicts it zero-shot with the same
 * functions that price a plan, and a correction with a few physical parameters, fitted
 * over the stored runs of one stack on one device and kept only when it predicts
 * held-out runs better than no correction, is applied to that stack's predictions on
 * that device. ptcalib --run stores records (costs.db, table framework_runs), ptplan
 * fits and applies, ptplan --validate computes the same fit leave-one-out over a
 * validation set. docs/calibration.md documents the record's format.
 */
#ifndef PT_PLANNER_CALIB_H
#define PT_PLANNER_CALIB_H

#include <stdbool.h>
#include <stdint.h>

#include "layout.h"
#include "predict.h"
#include "spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Run records (planner/runrec.c) ---------------------------------------------- */

/* The record format this build writes and reads ("format_version"). */
#define PT_RUNREC_FORMAT_VERSION 1

/* What a record measured, as its source states it. */
typedef enum {
    PT_MEAS_STEP_S,               /* seconds per optimizer step */
    PT_MEAS_TOKENS_PER_S,         /* tokens per second over all GPUs */
    PT_MEAS_TOKENS_PER_S_PER_GPU, /* tokens per second per GPU (torchtitan's tps) */
    PT_MEAS_COUNT
} pt_meas_kind;
const char *pt_meas_name(pt_meas_kind k); /* "step_s", "tokens_per_s", ... */

/* Where a record came from when a reader made it from a training log. */
typedef struct {
    char reader[32];       /* "megatron-log", "torchtitan-log"; "" for a JSON record */
    char file[512];        /* the log, as given */
    int64_t intervals;     /* logged intervals the median is taken over */
    int64_t skipped;       /* logged intervals left out as warm-up */
    int64_t first, last;   /* iterations (steps) of the first and last interval used */
} pt_runrec_log;

/* One measured run. Specs given by a built-in's name keep the name (ref), so a stored
 * record follows the built-in's current definition; a spec given as a file or inline is
 * kept inline. */
typedef struct {
    pt_model model;              /* with seq = the run's sequence length */
    pt_cluster cluster;          /* with nodes = the run's node count */
    pt_train train;              /* stack, global batch, precision */
    pt_layout layout;            /* parsed under the stack, checked against the rules */
    char model_ref[64];          /* the built-in's name, "" when inline */
    char cluster_ref[64];
    char stack_ref[64];
    char layout_text[512];       /* as given */
    pt_meas_kind meas;
    double meas_value;           /* in the unit of meas */
    double measured_step_s;      /* meas_value as seconds per step */
    char date[40];               /* ISO 8601 (YYYY-MM-DD), or with a time */
    char software[64];           /* "Megatron-LM" */
    char version[64];            /* "core_r0.12.0" */
    char note[512];              /* "" for none */
    pt_runrec_log log;
} pt_runrec;

/* Reads a record (JSON text `text`; `origin` names it in errors: "run.json"). Specs
 * given as files are read relative to `dir` ("" or NULL: the working directory).
 * Every bad field is one error naming origin and field ("run.json: field
 * 'measured.step_s' = -1: expected a positive number"; an unknown key with the closest
 * known one); a layout the stack cannot run or the rules reject is an error too. */
int pt_runrec_from_json(const char *text, const char *origin, const char *dir, pt_runrec *out,
                        pt_err *err);
/* Reads the record file at `path` (relative specs beside it). */
int pt_runrec_read(const char *path, pt_runrec *out, pt_err *err);
/* Loads the specs of a record that a log reader makes, named as ptplan's --model,
 * --cluster and --stack name them (a built-in, else a file): r's model, cluster and
 * stack with their refs; the training settings are reset to the cluster's defaults with
 * that stack. Errors name the unknown spec or the file and field. */
int pt_runrec_load_specs(pt_runrec *r, const char *model, const char *cluster,
                         const char *stack, pt_err *err);
/* Completes a record that a log reader filled (specs, layout text, measurement, date,
 * software): parses the layout under the stack for the cluster's world and the batch,
 * checks it, and derives the step time. Errors name `origin` and the value. */
int pt_runrec_finish(pt_runrec *r, const char *origin, pt_err *err);
/* The record as self-contained JSON (built-ins by name, other specs inline; the form
 * stored in costs.db), malloc'd with a trailing newline; NULL when out of memory.
 * pt_runrec_from_json reads it back to the same record. */
char *pt_runrec_to_json(const pt_runrec *r);
/* The record's zero-shot prediction: pt_evaluate of its layout with db (NULL:
 * analytic), without any correction. */
int pt_runrec_predict(const pt_runrec *r, const pt_costdb *db, pt_candidate *out, pt_err *err);
/* tokens per second per GPU of a step of `step_s` seconds: the speed runs of different
 * sizes are compared by. */
double pt_runrec_speed(const pt_runrec *r, double step_s);

/* ---- The correction (planner/calib.c) -------------------------------------------- */

/* A zero-shot prediction in the parts the correction scales, with what was measured:
 * corrected step = k_compute·compute_s + k_comm·comm_s + fixed_s + overhead_s. */
typedef struct {
    double compute_s;   /* the step less its exposed communication and the stack's fixed
                           time: kernels, optimizer, and the pipeline bubble (idle time
                           that waits on compute, so it scales with it) */
    double comm_s;      /* exposed communication: tp, cp, dp/ZeRO, pipeline sends */
    double fixed_s;     /* the stack's own host time: per step (step_overhead_s) and its
                           waits before MoE dispatches (moe_host_sync_s), the breakdown's
                           overhead */
    double measured_s;  /* the run's measured step; > 0 */
} pt_calib_point;

/* The nested forms, simplest first; each adds parameters to the one before. */
typedef enum {
    PT_CALIB_NONE,             /* no correction */
    PT_CALIB_COMPUTE,          /* k_compute */
    PT_CALIB_COMPUTE_OVERHEAD, /* k_compute and overhead_s */
    PT_CALIB_FULL,             /* k_compute, k_comm and overhead_s */
    PT_CALIB_FORM_COUNT
} pt_calib_form;
const char *pt_calib_form_name(pt_calib_form f); /* "none", "compute", ... */

/* Bounds of a plausible correction: a compute scale is the inverse of a sustained GEMM
 * and kernel efficiency relative to what was priced, and no software runs 4x slower or
 * faster than its kernels' pricing without the record (or the model of it) being
 * wrong; exposed communication may be off by more (overlap that did not happen), but
 * not by more than 20x; an overhead is never negative. A fit outside them is refused. */
#define PT_CALIB_K_MIN 0.25
#define PT_CALIB_K_MAX 4.0
#define PT_CALIB_KCOMM_MAX 20.0
/* A form is chosen over a simpler one (and any over none) only when it lowers the mean
 * held-out error by more than this (a tenth of a percent of the step): a parameter that
 * fits noise, or fits exact data no better, is not worth its place. */
#define PT_CALIB_MIN_GAIN 0.001

typedef struct pt_calib {
    pt_calib_form form;          /* the chosen form; NONE when rejected or no runs */
    double k_compute, k_comm;    /* 1 where the form leaves them out */
    double overhead_s;           /* 0 where the form leaves it out */
    int runs;                    /* runs fitted */
    bool applied;                /* the correction is used (form != NONE) */
    bool checked;                /* held-out runs judged it (2 runs or more); a single
                                    run's compute scale is applied unchecked */
    double zero_err;             /* mean |predicted/measured - 1| of the runs, zero-shot */
    double loo_err;              /* of the chosen form, each run predicted by the fit of
                                    the others (NaN when not checked) */
    double loo_by_form[PT_CALIB_FORM_COUNT]; /* NaN: not tried (too few runs, or no
                                    plausible fit) */
    char why[256];               /* why not applied, or why a form was left out */
} pt_calib;

/* The parts of zero-shot prediction r with measured step time measured_s. */
void pt_calib_point_of(const pt_sim_result *r, double measured_s, pt_calib_point *out);
/* Fits a correction over v[0..n) (n >= 0): each form's parameters by least squares in
 * relative error, each form judged by its leave-one-out error (every run predicted by
 * the form fitted to the others, never to itself), the form with the least chosen, and
 * applied only when that error is below the zero-shot error of the same runs. One run
 * allows only k_compute, fitted exactly and applied unchecked (out->checked false).
 * Never fails: out->applied says whether a correction came of it, out->why why not. */
void pt_calib_fit(const pt_calib_point *v, int n, pt_calib *out);
/* The corrected step time of point p (its measured_s unused). */
double pt_calib_step(const pt_calib *c, const pt_calib_point *p);
/* Applies c (when c->applied) to a prediction: step time, tokens/s, MFU and HFU, the
 * breakdown (compute and bubble scaled by k_compute, exposed communication and the
 * hidden communication by k_comm, the overhead added to the overhead), the exposed
 * communication fraction and the stages' busy times, so that it reads as a prediction
 * made at those rates. */
void pt_calib_apply(const pt_calib *c, pt_sim_result *r);
/* "compute x1.18, overhead 0.05 s" (the form's parameters), or "none". */
void pt_calib_text(const pt_calib *c, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
