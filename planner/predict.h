/*
 * Prediction (planner/enum.c, sim.c, search.c): the enumeration of every layout of a
 * job, the pricing of a layout's ops from the cost tables, the discrete-event
 * simulation of its schedule programs, and the search that ranks the layouts that fit
 * by predicted step time. Chrome trace events go into a jansson array passed as a
 * json_t pointer; the caller includes <jansson.h> (plan_json.h does).
 */
#ifndef PT_PLANNER_PREDICT_H
#define PT_PLANNER_PREDICT_H

#include <stdbool.h>
#include <stdint.h>

#include "cost.h"
#include "memory_model.h"
#include "schedule.h"
#include "step.h"

/* A JSON value (<jansson.h>): the trace array of pt_sim_run and pt_evaluate. */
typedef struct json_t json_t;

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Enumeration ------------------------------------------------------------- */

typedef struct {
    int64_t max_mbs;          /* micro-batch sizes tried: powers of two up to this */
    double mem_fraction;      /* share of device memory a layout may use */
    pt_dim order[PT_NDIM];    /* rank order for all enumerated layouts */
    unsigned compress_modes;  /* bit c: compress=c tried where gradients go in buckets
                                 (ZeRO 0/1 over dp·cp > 1) and the stack compresses;
                                 none is always tried [none, bf16] */
    pt_pipe pipe;             /* pipe.n > 0: only this pipeline layout, on every pp
                                 dividing its virtual stages (vp the quotient) */
} pt_enum_opts;

void pt_enum_opts_default(pt_enum_opts *o);

typedef struct {
    int64_t enumerated;               /* every candidate layout considered */
    int64_t valid;                    /* passed every rule */
    int64_t fit;                      /* valid and within device memory */
    int64_t rejected[PT_REJECT_COUNT];/* by first broken rule */
    int64_t too_big;                  /* valid but over device memory */
} pt_enum_counts;

/* Called for each valid layout; `fits` says whether it is within device memory.
 * Return non-zero to stop the enumeration. */
typedef int (*pt_enum_fn)(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx);

/* Enumerates every layout with tp·cp·pp·dp equal to the cluster's world size. */
void pt_enum_layouts(const pt_model *m, const pt_cluster *c, const pt_train *t,
                     const pt_enum_opts *o, pt_enum_fn fn, void *ctx,
                     pt_enum_counts *counts);

/* ---- Simulator (planner/sim.c) ------------------------------------------------- */

/* What one layout's instructions cost, in seconds, priced from the op lists and the
 * cost tables (or written by hand in tests). Indexed by virtual stage vs = c·p + r
 * ([p·vp]) or by pipeline rank ([p]). */
typedef struct {
    int pp, vp;
    double *fwd_s, *bwd_s;           /* [p·vp] one micro-batch through the stage */
    double *fwd_comm_s, *bwd_comm_s; /* [p·vp] the exposed communication inside them */
    double *sync_s;                  /* [p·vp] data-parallel reduction of its gradients */
    int64_t *sync_buckets;           /* [p·vp] buckets that reduction is cut into */
    double *sync_compute_s;          /* [p·vp] compute of that reduction (PowerSGD's
                                        compression), on the compute stream */
    double *p2p_s;                   /* [p] send from pipeline rank r to r+1 (mod p) */
    double *optim_s, *optim_comm_s;  /* [p] optimizer step, and its exposed all-gather */
    double prov_s[PT_PROV_COUNT];    /* priced time per step by provenance */
    double model_flops, hardware_flops; /* of the whole step, all ranks */
    double *bd_exposed, *bd_hidden;  /* [p·vp·PT_BD_COUNT] forward + backward of one
                                        micro-batch through the stage, by pt_bd */
    double *optim_adam_s;            /* [p] the optimizer kernel alone */
    double overhead_s;               /* the stack's fixed time per step */
    pt_dp_overlap dp_overlap;        /* how the reduction overlaps the backward */
    bool p2p_blocking;               /* a send holds its sender's compute until delivered */
} pt_sim_costs;

int pt_sim_costs_alloc(pt_sim_costs *c, int pp, int vp);
void pt_sim_costs_free(pt_sim_costs *c);

typedef struct {
    double step_time_s;
    double tokens_per_s;
    double mfu, hfu;                   /* 0 when the device's peak FLOP/s is unknown */
    double bubble_fraction;            /* pipeline idle over busy time (Narayanan et al.
                                          2021, Sec. 2.2): (p-1)/m for 1F1B */
    double exposed_comm_fraction;      /* communication not hidden, share of the step */
    double prov_share[PT_PROV_COUNT];  /* share of priced time by provenance */
    int pp;
    double stage_busy_s[64];           /* compute busy time of the first 64 stages */
    double breakdown_s[PT_BD_COUNT];   /* on the rank that ends the step last: compute
                                          and exposed communication; they sum to the
                                          step time */
    double hidden_s[PT_BD_COUNT];      /* communication that ran beside compute */
} pt_sim_result;

/* The hardware figures of a cluster as the cost tables want them; the backend is
 * "mpi" for CPU devices (name "cpu"), "nccl" otherwise. */
void pt_cost_hw_of(const pt_cluster *c, pt_cost_hw *hw);

/* Prices every instruction of layout `l`. db may be NULL (analytic). Returns -1
 * only when out of memory. */
int pt_sim_price(const pt_model *m, const pt_cluster *c, const pt_train *t,
                 const pt_costdb *db, const pt_layout *l, pt_sim_costs *out, pt_err *err);

/* A search's memo of priced op lists: layouts whose micro-batches run the same lists
 * (they differ only in the split of the layers over stages, the schedule, the data-
 * parallel overlaps or compression) are priced once. Made for one model, cluster,
 * training and cost table (their addresses: a call with others does not use it). */
typedef struct pt_sim_memo pt_sim_memo;
pt_sim_memo *pt_sim_memo_new(const pt_model *m, const pt_cluster *c, const pt_train *t,
                             const pt_costdb *db);
void pt_sim_memo_free(pt_sim_memo *memo);
/* pt_sim_price through memo (NULL: none); the same prices. */
int pt_sim_price_memo(const pt_model *m, const pt_cluster *c, const pt_train *t,
                      const pt_costdb *db, const pt_layout *l, pt_sim_memo *memo,
                      pt_sim_costs *out, pt_err *err);

/* A cheap closed-form estimate of the step time from the prices, used to choose
 * which layouts to simulate in full. */
double pt_sim_estimate(const pt_layout *l, const pt_sim_costs *costs);

/* Runs the schedule programs of `l` as a discrete-event simulation: each pipeline
 * rank with a compute stream (TP/CP communication exposed inside it unless
 * overlapped), a data-parallel stream reducing gradient buckets while the backward
 * goes on, and point-to-point transfers on the links. `peak_flops_total` is the
 * peak of all devices (0: unknown, MFU 0). `trace`, when not NULL, is a JSON
 * array that receives Chrome trace events of the predicted timeline. */
int pt_sim_run(const pt_layout *l, const pt_sim_costs *costs, int64_t tokens_per_step,
               double peak_flops_total, json_t *trace, pt_sim_result *out, pt_err *err);
/* pt_sim_run with l's schedule programs built already (pt_sched_build of l's schedule,
 * pp, vp and n_micro), so that layouts that share them build them once. */
int pt_sim_run_sched(const pt_layout *l, const pt_sched *s, const pt_sim_costs *costs,
                     int64_t tokens_per_step, double peak_flops_total, json_t *trace,
                     pt_sim_result *out, pt_err *err);

/* ---- Search (planner/search.c) ---------------------------------------------------- */

/* A layout with its predicted memory and time. */
typedef struct {
    pt_layout layout;
    pt_memory memory;
    double estimate_s;          /* closed-form step time that chose it for simulation */
    pt_sim_result predicted;    /* the full simulation */
} pt_candidate;

typedef struct {
    pt_enum_counts counts;
    int64_t priced;             /* layouts that fit, all priced and estimated */
    pt_candidate *best;         /* the simulated ones, fastest first */
    int64_t n_best;
    pt_candidate *over;         /* the fastest valid layouts that do not fit (within
                                   PT_SEARCH_OVER_FACTOR of the memory limit), simulated */
    int64_t n_over;
} pt_search_result;
#define PT_SEARCH_OVER_FACTOR 1.5
#define PT_SEARCH_OVER_SHOWN 3

/* The peak FLOP/s of all devices of the cluster in the training precision's
 * compute type (0 when the spec does not know it). */
double pt_peak_flops_total(const pt_cluster *c, const pt_train *t);

/* Prices and simulates one layout; memory figures too. trace may be NULL. */
int pt_evaluate(const pt_model *m, const pt_cluster *c, const pt_train *t, const pt_costdb *db,
                const pt_layout *l, json_t *trace, pt_candidate *out, pt_err *err);

/* Enumerates every layout, prices and estimates each one that fits, simulates the
 * `sim_top` with the best estimates in full (0: all) and sorts those by predicted
 * step time. The caller frees with pt_search_free. */
int pt_search(const pt_model *m, const pt_cluster *c, const pt_train *t,
              const pt_enum_opts *o, const pt_costdb *db, int64_t sim_top,
              pt_search_result *out, pt_err *err);
void pt_search_free(pt_search_result *r);

#ifdef __cplusplus
}
#endif
#endif
