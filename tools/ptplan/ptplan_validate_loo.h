/*
 * Internal to ptplan --validate: the two ways of judging predictions besides the
 * zero-shot error, computed from points ptplan_validate.c has read and priced
 * (ptplan_validate_loo.c). Leave-one-out: each point predicted with the correction
 * (planner/calib.c) fitted to the other points of its source, device and stack, never
 * to itself. Ranking: within each source, the pairs of points whose measured speeds
 * (tokens/s per GPU) differ by more than VAL_RANK_DIFF that the zero-shot predictions
 * order the other way, and Kendall's tau between measured and predicted speeds.
 */
#ifndef PT_TOOLS_PTPLAN_VALIDATE_LOO_H
#define PT_TOOLS_PTPLAN_VALIDATE_LOO_H

#include "planner.h"

#include <jansson.h>

/* Measured speeds differing by more than this share must be ordered right. */
#define VAL_RANK_DIFF 0.10

/* One evaluated point as the leave-one-out and the ranking see it. */
typedef struct {
    const char *label, *device, *stack; /* its group: source label, device, stack names */
    pt_calib_point zero;        /* its zero-shot prediction in parts, and its measurement */
    double predicted_s;         /* its zero-shot step time */
    double tokens_per_gpu;      /* global batch x sequence / GPUs: speed = this / step */
    /* filled by val_leave_one_out */
    int loo_n;                  /* the other points of its group */
    pt_calib loo;               /* the correction they give */
    double loo_step_s, loo_error; /* this point predicted with it; loo_n 0: unset */
} val_point;

/* Fills each point's leave-one-out fields from the other points of its group. */
void val_leave_one_out(val_point *v, int n);

/* The ranking of one source (or of all, pooled over the sources' own pairs). */
typedef struct {
    char label[48];
    int points;
    int64_t pairs;              /* every pair of the source's points */
    int64_t compared;           /* pairs whose measured speeds differ by > VAL_RANK_DIFF */
    int64_t wrong;              /* of those, ordered the other way by the prediction */
    int64_t concordant, discordant, ties_measured, ties_predicted;
    double kendall_tau;         /* tau-b; NaN with fewer than two points or all tied */
    int wrong_first[8], wrong_second[8]; /* the first wrong pairs, by index into v */
} val_rank;

/* The ranking of each source label in v (into by, room for n; returns how many) and of
 * all together (*all: the sources' pairs pooled; pairs across sources are not
 * compared, their points being of different hardware and software). */
int val_ranking(const val_point *v, int n, val_rank *by, val_rank *all);
/* {points, pairs, pairs_compared, wrong_pairs, kendall_tau[, label][, wrong]}. */
json_t *val_rank_json(const val_rank *r, bool with_label);

#endif
