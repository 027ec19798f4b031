/*
 * Internal to the ptplan command: its options, the job they describe (model,
 * cluster, training settings, cost table) and the printing helpers its two source
 * files share. ptplan.c parses options and runs the spec and group modes;
 * ptplan_rank.c evaluates one layout or ranks all of them and writes plan.json.
 */
#ifndef PT_TOOLS_PTPLAN_H
#define PT_TOOLS_PTPLAN_H

#include "planner.h"

enum { EXIT_BAD_INPUT = 1, EXIT_REJECTED = 3 };

typedef struct {
    const char *model, *cluster, *layout, *groups, *dump_model, *dump_cluster;
    const char *precision, *order, *db, *out, *timeline, *data, *stack, *dump_stack;
    const char *validate;    /* --validate FILE */
    int64_t nodes, devices, global_batch, seq, max_mbs, top, bucket_mib, sim_top, steps, seed;
    double mem_fraction, lr;
    bool explain, json, list_models, list_clusters, list_stacks, no_out, list_layouts;
} options;

typedef struct {
    pt_model m;
    pt_cluster c;
    pt_train t;
    pt_run_opts run;
    pt_enum_opts eo;
    pt_costdb *db;           /* NULL: analytic only */
    char db_path[512];       /* what was (or would have been) opened */
} job;

/* Prints "ptplan: <msg>" to stderr and returns EXIT_BAD_INPUT. */
int pt_tool_fail(const char *fmt, const char *msg);
int load_job(const options *o, job *j);
void free_job(job *j);
double limit_bytes(const job *j);
json_t *job_json(const job *j);
void print_job_header(const job *j);
void print_json(json_t *j);
double gib(double bytes);

int evaluate_layout(const options *o);
int rank_layouts(const options *o);
/* --list-layouts: every layout the search would price, unpriced. */
int list_layouts(const options *o);
/* ptplan_validate.c: predicted against measured over a set of published runs. */
int validate_set(const options *o);

#endif
