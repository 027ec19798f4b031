/*
 * Internal to the ptplan command: its options, the job they describe (model,
 * cluster, training settings, cost table) and the printing helpers its source files
 * share. ptplan.c parses options, runs the spec and group modes and calls the others;
 * ptplan_rank.c evaluates one layout or ranks all of them and writes plan.json;
 * ptplan_compare.c sets layouts side by side; ptplan_validate.c predicts published
 * runs; ptplan_job.c loads the job and holds what they share. Calls go one way:
 * ptplan.c into the modes, the modes into ptplan_job.c, which calls none of them.
 */
#ifndef PT_TOOLS_PTPLAN_H
#define PT_TOOLS_PTPLAN_H

#include "planner.h"

#include <jansson.h>
#include <stdio.h>

/* EXIT_REJECTED: nothing that can run (the layout of --layout, every layout of the
 * search, every layout of --compare), so no plan. */
enum { EXIT_BAD_INPUT = 1, EXIT_REJECTED = 3 };

#define COMPARE_MAX 16 /* layouts --compare sets side by side */
#define NODES_MAX 16   /* cluster sizes --nodes N1,N2,... sets side by side */

typedef struct {
    const char *model, *cluster, *layout, *groups, *dump_model, *dump_cluster;
    const char *fp8_recipe;  /* --fp8-recipe R (with --precision fp8), NULL for the stack's */
    bool fp8_emulate;        /* --fp8-emulate */
    bool fp8_param_gather;   /* --fp8-param-gather */
    const char *precision, *order, *db, *out, *timeline, *data, *stack, *dump_stack;
    const char *validate;    /* --validate FILE */
    const char *emit;        /* --emit megatron|nemo|torchtitan|ptrun, NULL for none */
    const char *pipeline;    /* --pipeline-layout: Megatron-Core's notation, NULL for none */
    const char *compare[COMPARE_MAX]; /* --compare L1 L2 ... */
    int n_compare;
    int64_t nodes, devices, global_batch, seq, max_mbs, top, bucket_mib, sim_top, steps, seed;
    int64_t global_batch_tokens; /* --global-batch in tokens (0: in sequences) */
    int64_t nodes_list[NODES_MAX]; /* --nodes N1,N2,...: the sizes (n_nodes > 1) */
    int n_nodes;
    double tokens;           /* --tokens: tokens to train on (0: not asked) */
    double gpu_hour_price;   /* --gpu-hour-price (< 0: not given) */
    unsigned compress_modes; /* --compress: bit c tries compress=c (pt_enum_opts) */
    double mem_fraction, lr;
    double moe_imbalance;    /* --moe-imbalance: the busiest expert rank over the mean */
    bool explain, json, list_models, list_clusters, list_stacks, no_out, list_layouts;
    bool no_shipped;         /* --no-shipped-profile */
    bool no_calibration;     /* --no-calibration: plan zero-shot, stored runs unused */
} options;

/* The error band of a prediction: over the published runs of the validation sets
 * (tests/validation/, as --validate reads them) of one stack on one device, the error
 * predicted / measured - 1 of each run that could be evaluated. */
typedef struct {
    int n;                             /* runs evaluated; 0: none (reason says why) */
    double err_min, err_max, err_mean; /* over those n; 0 when n is 0 */
    char stack[64], device[64];        /* the stack's and the device's names */
    char sets[256];                    /* the sets read: "public-set.json, holdout.json" */
    char reason[512];                  /* "" when every set was read and n > 0; else why
                                        * n is 0, or which sets were not found */
} pred_band;

/* The correction of the job's stack on its device (ptplan_calib.c), learned from the
 * measured runs stored in the cost table (ptcalib --run FILE); job.t.calib points at fit
 * when it is applied. */
typedef struct job_calib job_calib;

typedef struct {
    pt_model m;
    pt_cluster c;
    pt_train t;
    pt_run_opts run;
    pt_enum_opts eo;
    double tokens;           /* tokens to train on (0: not asked) */
    double gpu_hour_price;   /* price of one GPU-hour (< 0: not given) */
    pt_costdb *db;           /* NULL: analytic only */
    char db_path[512];       /* what was (or would have been) opened */
    bool shipped;            /* db is the device's shipped profile */
    char db_about[512];      /* then what it was measured on (pt_costdb_profile_about) */
    char passed_over[512];   /* and the table it replaced, "" for none */
    pred_band band;          /* how far predictions of published runs of this stack on
                              * this device missed (prediction_band) */
    job_calib *cal;          /* malloc'd by load_calibration, freed by free_job; NULL when
                              * not loaded */
} job;

/* ---- ptplan_job.c: the job and what every mode shows ---------------------------- */

/* Prints "ptplan: <msg>" to stderr and returns EXIT_BAD_INPUT. */
int pt_tool_fail(const char *fmt, const char *msg);
int load_job(const options *o, job *j);
void free_job(job *j);
/* load_job, then the search of its layouts into r (pt_search_free frees it); on failure
 * the job is freed and the exit status returned. */
int search_job(const options *o, job *j, pt_search_result *r);
double limit_bytes(const job *j);
json_t *job_json(const job *j);
void print_job_header(const job *j);
/* The header's "band" line: the job's error band, or why it has none. */
void print_band_header(const job *j);
/* {step_time_lo_s, step_time_hi_s}: the step times prediction r implies under the job's
 * band; JSON null when it has none. */
json_t *band_json(const job *j, const pt_sim_result *r);
/* "74-149 s a step[, 102-206 days to train]": the same in words, "" without a band. */
void band_text(const job *j, const pt_sim_result *r, int64_t world, char *buf, size_t n);
void print_json(json_t *j);
/* Parses a spec text (and frees it) back into a json_t so it can be nested in other
 * output; JSON null when text is NULL or does not parse. */
json_t *spec_json(char *text);
double gib(double bytes);

/* ---- Time to train ---- */

/* A global batch of more tokens than this (2^30) is refused: it is 64 times the largest
 * published one (Llama 3 405B: 16M tokens, Dubey et al. 2024, Sec. 3.4.1), and is what a
 * batch meant in tokens but given in sequences makes; the search's time grows with the
 * micro-batches of a step. */
#define MAX_BATCH_TOKENS 1073741824.0
/* "8.39M", "208k", "1T": three significant digits and a decimal unit. */
void count_text(double v, char *buf, size_t n);
/* Optimizer steps to train on j->tokens (whole steps; 0 without --tokens). */
double goal_steps(const job *j);
typedef struct {
    bool set;                /* --tokens was given and the step time is known */
    double seconds, days, gpu_hours;
    double cost;             /* GPU-hours x --gpu-hour-price; < 0 without a price */
} train_time;
/* The time to train of a layout of `world` ranks predicted as r. */
void train_time_of(const job *j, int64_t world, const pt_sim_result *r, train_time *out);
/* {tokens, steps, seconds, days, gpu_hours[, cost]}, or JSON null when not set. */
json_t *train_time_json(const job *j, const train_time *t);

/* The parts of one rank's memory (stage mem->stage of layout l) as ptplan prints them,
 * in order: names and bytes. The weights, gradients and optimizer parts are the
 * transformer layers'; "embedding/head" holds the model states of the embedding and
 * head parameters the stage holds (by their share of its parameters) and their
 * activations (embedding output, logits for the loss). */
enum { MEM_PARTS = 7 };
void memory_parts(const job *j, const pt_layout *l, const pt_memory *mem,
                  const char *names[MEM_PARTS], double bytes[MEM_PARTS]);
/* The same as a JSON object of name: bytes. */
json_t *memory_parts_json(const job *j, const pt_layout *l, const pt_memory *mem);
/* "analytic", or "m40 i10 a50": where a prediction's priced time came from. */
void provenance_text(const pt_sim_result *r, char *buf, size_t n);
/* Reads layout `text` as --layout does: the rank order of --order, the stack's defaults
 * and what the stack can run (the error says which). */
int parse_job_layout(const job *j, const char *text, pt_layout *l, pt_err *err);
/* Whether a and b are the same layout, key by key. */
bool same_layout(const pt_layout *a, const pt_layout *b);
/* Layout l as --layout reads it back for this job: the keys that differ from what
 * parse_job_layout would choose by itself (the stack's defaults, the derived schedule);
 * pasting it into --layout gives l again. */
void layout_text(const job *j, const pt_layout *l, char *buf, size_t n);
/* One layout as --json shows it: layout, valid, rejected (each broken rule with its
 * values), fits, memory and predicted (null for an invalid layout). */
json_t *layout_result_json(const job *j, const pt_layout *l, uint32_t mask,
                           const pt_candidate *c, bool fits);
/* A priced layout as the ranking's --json lists it: layout, layout_text, memory,
 * memory_parts, predicted, time_to_train. */
json_t *candidate_json(const job *j, const pt_candidate *c);
/* Why a search (counts n) has nothing to plan, and what would help. */
void no_layout_advice(const job *j, const pt_enum_counts *n, char *buf, size_t cap);
/* Writes "  KEY  why" for every rule of mask that l breaks (on stdout, or f). */
void print_rules(const job *j, const pt_layout *l, uint32_t mask);
void print_rules_to(FILE *f, const job *j, const pt_layout *l, uint32_t mask);

/* ---- ptplan_calib.c: learning from measured runs of the job's stack ----------------- */

/* Reads the runs of the job's stack on its device stored in its cost table (the one
 * ptplan prices with; for a shipped profile, the table it stands in for), prices each
 * zero-shot with j->db, fits the correction (planner/calib.h) and, unless
 * --no-calibration, applies it to every prediction of the job (j->t.calib). A stored
 * run that cannot be priced is left out and named in the header. 0, or EXIT_BAD_INPUT
 * (message printed) when the table cannot be read. */
int load_calibration(const options *o, job *j);
void free_calibration(job *j);
/* The header's "calib" line(s): the correction and how well it predicts held-out runs,
 * or why none is applied; nothing when no run is stored. */
void print_calib_header(const job *j);
/* {runs, applied, form, k_compute, k_comm, overhead_s, leave_one_out_error,
 * zero_shot_error, ...}: the header's facts for --json. */
json_t *calib_json(const job *j);

/* ---- ptplan_emit.c: the plan in a framework's own configuration -------------------- */

/* Whether `kind` names an --emit format; prints the error (with the formats) if not. */
int emit_check_kind(const char *kind);
/* Prints on stdout the configuration of o->emit for layout c of the job (the plan
 * ptplan chose, or --layout's). Returns 0, EXIT_REJECTED when the framework cannot
 * express the layout (the message on stderr says why), EXIT_BAD_INPUT on failure. */
int emit_plan(const options *o, const job *j, const pt_candidate *c);

/* ---- ptplan_band.c: how far predictions of published runs missed ------------------ */

/* The band of j's stack (by name) on j's device (by name), each run priced with j's cost
 * table (j->db, NULL: analytic) as --validate --db would. The sets: the files that
 * PT_VALIDATION_SETS names (colon-separated; set and empty: none), else public-set.json and
 * holdout.json in the source tree's tests/validation/ (PT_VALIDATION_DIR, compiled in).
 * A set that does not exist is left out and named in band->reason. Returns 0 (band->n
 * may be 0), or -1 with err when a set exists but is not a validation set (unreadable,
 * malformed, a point that --validate refuses). */
int prediction_band(const job *j, pred_band *band, pt_err *err);
/* The measured step times a prediction implies: predicted_s / (1 + err_max) ..
 * predicted_s / (1 + err_min); both predicted_s when b->n is 0. */
void band_range(const pred_band *b, double predicted_s, double *lo_s, double *hi_s);
/* Counts one run's error into b (n, min, max, mean). */
void band_add(pred_band *b, double error);
/* ptplan_validate.c: adds to band (its stack and device set) the errors of the runs of
 * validation set `file` of that stack on that device, priced with db; 0, or -1 with err
 * when the file is not a validation set (as --validate would refuse it). */
int validate_band(const char *file, const pt_costdb *db, pred_band *band, pt_err *err);

/* ---- The modes: ptplan.c calls these ---------------------------------------------- */

/* ptplan_rank.c: --layout, the search (writing plan.json). */
int evaluate_layout(const options *o);
int rank_layouts(const options *o);
/* --list-layouts: every layout the search would price, unpriced. */
int list_layouts(const options *o);
/* ptplan_validate.c: predicted against measured over a set of published runs. */
int validate_set(const options *o);
/* ptplan_compare.c: --compare, the layouts side by side; writes no plan. */
int compare_layouts(const options *o);
/* Valid layouts priced as c[0..n-1] in --compare's table (without the job header): the
 * list of layouts, "[i] labels[i]layout", then memory, time and figures a column each. */
void print_side_by_side(const job *j, const pt_candidate *c, int n, const char *const *labels);
/* ptplan_sizes.c: --nodes N1,N2,...: the best layout of each cluster size side by side,
 * with its scaling efficiency; writes no plan. */
int sweep_sizes(const options *o);

#endif
