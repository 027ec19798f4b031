/*
 * ptplan --validate's leave-one-out and ranking (ptplan_validate_loo.h): how well the
 * correction learned from measured runs (planner/calib.c, as ptplan applies it to the
 * runs a user stores) predicts a run it has not seen, and whether the zero-shot model
 * orders the runs of a source as they measured — what a planner needs to choose a
 * layout, whatever its absolute error.
 */
#include "ptplan_validate_loo.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Leave-one-out ------------------------------------------------------------------- */

static bool same_group(const val_point *a, const val_point *b)
{
    return strcmp(a->label, b->label) == 0 && strcmp(a->device, b->device) == 0 &&
           strcmp(a->stack, b->stack) == 0;
}

void val_leave_one_out(val_point *v, int n)
{
    pt_calib_point *others = calloc((size_t)(n > 0 ? n : 1), sizeof *others);
    for (int i = 0; others && i < n; i++) {
        int k = 0;
        for (int j = 0; j < n; j++)
            if (j != i && same_group(&v[i], &v[j]))
                others[k++] = v[j].zero; /* never v[i] itself */
        v[i].loo_n = k;
        if (k == 0)
            continue;
        pt_calib_fit(others, k, &v[i].loo);
        /* a correction not applied is none: the zero-shot prediction */
        v[i].loo_step_s = v[i].loo.applied ? pt_calib_step(&v[i].loo, &v[i].zero)
                                           : v[i].predicted_s;
        v[i].loo_error = v[i].loo_step_s / v[i].zero.measured_s - 1;
    }
    free(others);
}

/* ---- Ranking ----------------------------------------------------------------------------- */

static int sign(double x)
{
    return (x > 0) - (x < 0);
}

/* Counts the pair (a, b) into r. */
static void rank_pair(const val_point *v, int a, int b, val_rank *r)
{
    double ma = v[a].tokens_per_gpu / v[a].zero.measured_s;
    double mb = v[b].tokens_per_gpu / v[b].zero.measured_s;
    double pa = v[a].tokens_per_gpu / v[a].predicted_s;
    double pb = v[b].tokens_per_gpu / v[b].predicted_s;
    int sm = sign(ma - mb), sp = sign(pa - pb);
    r->pairs++;
    r->concordant += sm * sp > 0;
    r->discordant += sm * sp < 0;
    r->ties_measured += sm == 0;
    r->ties_predicted += sp == 0;
    if (fmax(ma, mb) > (1 + VAL_RANK_DIFF) * fmin(ma, mb)) {
        r->compared++;
        if (sm * sp <= 0) { /* ordered the other way, or not told apart */
            if (r->wrong < 8) {
                r->wrong_first[r->wrong] = a;
                r->wrong_second[r->wrong] = b;
            }
            r->wrong++;
        }
    }
}

/* Kendall's tau-b: (C - D) / sqrt((P - T_measured) (P - T_predicted)). */
static void tau_of(val_rank *r)
{
    double d = sqrt((double)(r->pairs - r->ties_measured) *
                    (double)(r->pairs - r->ties_predicted));
    r->kendall_tau = d > 0 ? (double)(r->concordant - r->discordant) / d : NAN;
}

int val_ranking(const val_point *v, int n, val_rank *by, val_rank *all)
{
    int groups = 0;
    *all = (val_rank){.kendall_tau = NAN};
    snprintf(all->label, sizeof all->label, "all");
    for (int i = 0; i < n; i++) {
        int g = 0;
        while (g < groups && strcmp(by[g].label, v[i].label) != 0)
            g++;
        if (g == groups) {
            by[g] = (val_rank){0};
            snprintf(by[g].label, sizeof by[g].label, "%s", v[i].label);
            groups++;
        }
        by[g].points++;
        for (int j = 0; j < i; j++)
            if (strcmp(v[j].label, v[i].label) == 0)
                rank_pair(v, j, i, &by[g]);
    }
    for (int g = 0; g < groups; g++) {
        tau_of(&by[g]);
        val_rank *r = &by[g];
        for (int k = 0; k < r->wrong && k < 8 && all->wrong + k < 8; k++) {
            all->wrong_first[all->wrong + k] = r->wrong_first[k];
            all->wrong_second[all->wrong + k] = r->wrong_second[k];
        }
        all->points += r->points;
        all->pairs += r->pairs;
        all->compared += r->compared;
        all->wrong += r->wrong;
        all->concordant += r->concordant;
        all->discordant += r->discordant;
        all->ties_measured += r->ties_measured;
        all->ties_predicted += r->ties_predicted;
    }
    tau_of(all);
    return groups;
}

json_t *val_rank_json(const val_rank *r, bool with_label)
{
    json_t *o = json_object();
    if (!o)
        return json_null();
    if (with_label)
        json_object_set_new(o, "label", json_string(r->label));
    json_object_set_new(o, "points", json_integer(r->points));
    json_object_set_new(o, "pairs", json_integer(r->pairs));
    json_object_set_new(o, "pairs_compared", json_integer(r->compared));
    json_object_set_new(o, "wrong_pairs", json_integer(r->wrong));
    json_object_set_new(o, "kendall_tau", isnan(r->kendall_tau) ? json_null()
                                                                : json_real(r->kendall_tau));
    return o;
}
