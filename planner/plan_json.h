/*
 * plan.json and the JSON forms of planner results (planner/plan.c, report.c): the
 * settings ptrun trains with, reading and writing a plan, and the JSON of a layout,
 * its memory and its prediction that ptplan --json and plan.json share. The only
 * planner header that includes <jansson.h>; a file that needs jansson otherwise
 * includes it itself.
 */
#ifndef PT_PLANNER_PLAN_JSON_H
#define PT_PLANNER_PLAN_JSON_H

#include <stdint.h>

#include <jansson.h>

#include "cost.h"
#include "memory_model.h"
#include "predict.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- plan.json (planner/plan.c) ------------------------------------------------- */

#define PT_PLAN_FORMAT_VERSION 1

/* The limits of the settings below and of the global batch: plan.json's "training"
 * (plan.c), ptplan's and ptrun's options and a checkpoint's meta.json are held to
 * them. */
#define PT_MAX_STEPS (INT64_C(1) << 40)
#define PT_MAX_GLOBAL_BATCH (INT64_C(1) << 30)
#define PT_MAX_LR 1e3            /* lr, min_lr and weight_decay */
#define PT_MAX_GRAD_CLIP 1e9
#define PT_MAX_DROPOUT 0.99

/* The settings ptrun trains with, beside the layout. */
typedef struct {
    int64_t steps;
    double lr, min_lr;       /* peak and final learning rate (cosine decay) */
    int64_t warmup_steps;
    double weight_decay;
    double grad_clip;        /* global gradient-norm clip; 0 = none */
    double dropout;          /* dropout probability on the embedding and the residual
                                branches (GPT-2 trained with 0.1); 0 = none */
    uint64_t seed;
    char data[512];          /* token file or text file; "" = ptrun's built-in corpus */
} pt_run_opts;

/* Defaults for model `m` (NULL: a GPT-2-small-sized one): the peak learning rate
 * GPT-3 used at that size, a tenth of it at the end, 10 warm-up steps, weight decay
 * 0.1, clipping at 1, seed 1234. */
void pt_run_opts_default(pt_run_opts *r, const pt_model *m);

typedef struct {
    int format_version;
    char created_by[64];
    pt_model model;
    pt_cluster cluster;
    pt_layout layout;
    pt_train train;
    pt_run_opts run;
    pt_memory memory;          /* predicted, the largest stage */
    pt_sim_result predicted;
    pt_costdb_id costs;        /* the cost table the prediction used */
} pt_plan;

/* Writes `p` as JSON to `path` through a temporary file renamed when complete, so a
 * failure never leaves a half-written plan. */
int pt_plan_write(const pt_plan *p, const char *path, pt_err *err);
/* Reads and validates every field (types, ranges, the layout's rules against the
 * model and cluster); errors name the file and the field. */
int pt_plan_read(const char *path, pt_plan *out, pt_err *err);
int pt_plan_from_json(const char *text, const char *origin, pt_plan *out, pt_err *err);
json_t *pt_plan_json(const pt_plan *p);
json_t *pt_sim_result_json(const pt_sim_result *r);
/* plan.json's training.fp8: {"recipe": "current", "amax_history": 1024, "emulated":
 * false}, written where the recipe is not off (absent: off). */
json_t *pt_fp8_json(const pt_fp8 *f);

/* ---- JSON forms of planner results (planner/report.c) ------------------------- */

/* New references (caller owns them); NULL only when out of memory. Field names
 * are part of ptplan's documented --json output and of plan.json. */
json_t *pt_layout_json(const pt_layout *l);
json_t *pt_memory_json(const pt_memory *mem);

#ifdef __cplusplus
}
#endif
#endif
