/*
 * Internal to the ptcalib command: its options, and the two parts it is made of beside
 * ptcalib.c (which parses options and calibrates from ptrun's own runs):
 * ptcalib_runs.c stores, lists and forgets measured runs of other frameworks (run
 * records, and the runs the log readers make) and prints the correction they give;
 * ptcalib_logs.c reads a Megatron-LM / Megatron-Core or torchtitan training log into
 * one measurement.
 */
#ifndef PT_TOOLS_PTCALIB_H
#define PT_TOOLS_PTCALIB_H

#include "planner.h"

#include <stdbool.h>
#include <stdint.h>

/* What --run FILE is: a run record (JSON), a training log, or found out from the file. */
typedef enum { RUNF_AUTO, RUNF_JSON, RUNF_MEGATRON, RUNF_TORCHTITAN } run_format;

typedef struct {
    const char *trace, *plan;
    char db[512];
    bool db_given;           /* --db (else $PT_COSTS_DB or the default path) */
    int64_t run, top, forget;
    bool store, force, dry_run;
    /* a measured run of another framework: --run FILE, --forget fID */
    const char *run_file;
    int64_t forget_framework; /* fID's id, -1 for none */
    run_format format;
    /* what a log does not say (ptplan's options of the same names) */
    const char *model, *cluster, *stack, *layout, *precision, *date, *software, *note;
    int64_t nodes, devices, global_batch, seq;
    int64_t skip;            /* logged intervals left out as warm-up (-1: the default) */
} options;

/* ---- ptcalib_logs.c ------------------------------------------------------------------ */

/* Logged intervals left out at the start of a log unless --skip says otherwise: the
 * first interval's time holds the job's start (Megatron-LM's first logged iteration
 * also carries its initialisation, and recent versions log iteration 1 alone and keep
 * it in the next interval's timer; torchtitan logs step 1 alone, timed from the metrics
 * processor's creation, with compilation and the first allocations), the second
 * allocator warm-up and the first data-loader prefetch; two are left out whatever the
 * version, and the median of the rest makes a checkpoint's interval or one slow step
 * harmless. */
#define CALIB_LOG_SKIP 2

/* One measurement read off a log. */
typedef struct {
    pt_meas_kind meas;       /* step_s (Megatron) or tokens_per_s_per_gpu (torchtitan) */
    double value;            /* the median over the intervals used */
    int64_t intervals, skipped, first, last;
    int64_t global_batch;    /* Megatron's "global batch size" of the intervals used (0:
                                not logged); they must agree */
    char date[40];           /* the first timestamp's date, "" when none */
    bool restarted;          /* the log holds several runs: the last one was read */
} log_reading;

/* The format of `path` when fmt is RUNF_AUTO (a JSON object, a Megatron log, a
 * torchtitan log, by their first lines that say so), else fmt; -1 with err naming the
 * file when it is none of them. */
int calib_log_format(const char *path, run_format fmt, run_format *out, pt_err *err);
const char *calib_log_format_name(run_format f); /* "run record", "Megatron log", ... */
/* Reads the training intervals of a log of format f (RUNF_MEGATRON or
 * RUNF_TORCHTITAN), leaves the first `skip` out and takes the median; -1 with err naming
 * the file when no usable interval is left. */
int calib_read_log(const char *path, run_format f, int64_t skip, log_reading *out,
                   pt_err *err);

/* ---- ptcalib_runs.c ------------------------------------------------------------------- */

/* ptcalib --run FILE: reads the record (or makes one from the log), prints it and its
 * zero-shot prediction, stores it (unless --no-store) and prints the correction the
 * stored runs of its stack on its device give. */
int calib_framework_run(const options *o, pt_err *err);
/* ptcalib --forget fID [--dry-run]. */
int calib_forget_framework_run(const options *o, pt_err *err);

#endif
