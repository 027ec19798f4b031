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

/* EXIT_REJECTED: nothing that can run (the layout of --layout, every layout of the
 * search, every layout of --compare), so no plan. */
enum { EXIT_BAD_INPUT = 1, EXIT_REJECTED = 3 };

#define COMPARE_MAX 16 /* layouts --compare sets side by side */

typedef struct {
    const char *model, *cluster, *layout, *groups, *dump_model, *dump_cluster;
    const char *precision, *order, *db, *out, *timeline, *data, *stack, *dump_stack;
    const char *validate;    /* --validate FILE */
    const char *compare[COMPARE_MAX]; /* --compare L1 L2 ... */
    int n_compare;
    int64_t nodes, devices, global_batch, seq, max_mbs, top, bucket_mib, sim_top, steps, seed;
    unsigned compress_modes; /* --compress: bit c tries compress=c (pt_enum_opts) */
    double mem_fraction, lr;
    bool explain, json, list_models, list_clusters, list_stacks, no_out, list_layouts;
    bool no_shipped;         /* --no-shipped-profile */
} options;

typedef struct {
    pt_model m;
    pt_cluster c;
    pt_train t;
    pt_run_opts run;
    pt_enum_opts eo;
    pt_costdb *db;           /* NULL: analytic only */
    char db_path[512];       /* what was (or would have been) opened */
    bool shipped;            /* db is the device's shipped profile */
    char db_about[512];      /* then what it was measured on (pt_costdb_profile_about) */
    char passed_over[512];   /* and the table it replaced, "" for none */
} job;

/* ---- ptplan_job.c: the job and what every mode shows ---------------------------- */

/* Prints "ptplan: <msg>" to stderr and returns EXIT_BAD_INPUT. */
int pt_tool_fail(const char *fmt, const char *msg);
int load_job(const options *o, job *j);
void free_job(job *j);
double limit_bytes(const job *j);
json_t *job_json(const job *j);
void print_job_header(const job *j);
void print_json(json_t *j);
/* Parses a spec text (and frees it) back into a json_t so it can be nested in other
 * output; JSON null when text is NULL or does not parse. */
json_t *spec_json(char *text);
double gib(double bytes);

/* The parts of one rank's memory as ptplan prints them, in order: names and bytes. */
enum { MEM_PARTS = 7 };
void memory_parts(const pt_memory *mem, const char *names[MEM_PARTS], double bytes[MEM_PARTS]);
/* "analytic", or "m40 i10 a50": where a prediction's priced time came from. */
void provenance_text(const pt_sim_result *r, char *buf, size_t n);
/* Reads layout `text` as --layout does: the rank order of --order, the stack's defaults
 * and what the stack can run (the error says which). */
int parse_job_layout(const job *j, const char *text, pt_layout *l, pt_err *err);
/* One layout as --json shows it: layout, valid, rejected (each broken rule with its
 * values), fits, memory and predicted (null for an invalid layout). */
json_t *layout_result_json(const job *j, const pt_layout *l, uint32_t mask,
                           const pt_candidate *c, bool fits);
/* Writes "  KEY  why" for every rule of mask that l breaks. */
void print_rules(const job *j, const pt_layout *l, uint32_t mask);

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

#endif
