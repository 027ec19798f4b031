/*
 * ptprofile-coll internals — the collective benchmark that ptprofile runs under
 * mpirun. ptprofile_coll.c drives the measurement (groups, sizes, repeats, timing
 * reductions, the output file); coll_opts.c parses and checks the command line;
 * coll_topo.c learns which node each rank is on; coll_mpi.c and coll_nccl.c are the
 * communication backends, each one table of function pointers (pt_cb_backend).
 *
 * Sizes follow nccl-tests (and cost.h's pt_coll_op): `bytes` is the per-rank buffer
 * for all-reduce, broadcast, all-to-all and send/recv, and the whole gathered (or
 * to-be-scattered) buffer for all-gather and reduce-scatter. Elements are fp32.
 *
 * Errors: functions return 0 or -1 with a pt_err. Functions marked collective must
 * be called by every rank of the communicator they name; those that say "agreed"
 * return the same result on every rank, so that no rank is left waiting in a
 * collective that another rank skipped.
 */
#ifndef PT_COLL_BENCH_H
#define PT_COLL_BENCH_H

#include "cost.h"

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifndef PT_HAVE_NCCL
#define PT_HAVE_NCCL 0
#endif

/* ---- Options (coll_opts.c) ------------------------------------------------------ */

/* Rank 0's progress on stderr. Under mpirun stderr is a pipe, so auto (a bar when
 * stderr is a terminal) gives lines there; ptprofile asks for the bar itself. */
typedef enum { PT_CB_PROGRESS_AUTO, PT_CB_PROGRESS_BAR, PT_CB_PROGRESS_LINES,
               PT_CB_PROGRESS_NONE } pt_cb_progress_mode;

typedef struct {
    const char *backend;          /* "mpi" or "nccl" */
    const char *out;              /* JSON-lines file written by rank 0 */
    int64_t min_bytes, max_bytes; /* sizes go min, min·step, … up to max */
    int step;                     /* 2, or 4 with --quick */
    bool ops[PT_COLL_COUNT];      /* which collectives to measure */
    int *groups;                  /* ascending group sizes, each in 2..world (owned) */
    int ngroups;
    int repeats;                  /* timed repeats per point (fewer under the cap) */
    double max_seconds_per_point; /* cap on one point's warm-ups and repeats */
    pt_cb_progress_mode progress;
    bool help;                    /* --help: print usage, measure nothing */
} pt_cb_opts;

/* Parses argv for a world of `world` ranks. Every rank parses the same argv, so every
 * rank gets the same result without communication. On error o holds nothing to free
 * and err names the option and value. */
int pt_cb_opts_parse(int argc, char **argv, int world, pt_cb_opts *o, pt_err *err);
void pt_cb_opts_free(pt_cb_opts *o);
void pt_cb_usage(FILE *f);

/* Rounds bytes down to what op can move over a group of `group` fp32 ranks: a multiple
 * of 4·group for all-gather, reduce-scatter and all-to-all (each rank's share is a
 * whole number of elements), of 4 otherwise. 0 means the size is skipped. */
int64_t pt_cb_round_bytes(pt_coll op, int group, int64_t bytes);

/* ---- Agreement and topology (coll_topo.c) ---------------------------------------- */

/* Collective over comm, agreed: 0 when every rank passes rc 0; otherwise -1 on every
 * rank, with err holding the message of the lowest-numbered failing rank. */
int pt_cb_agree(MPI_Comm comm, int rc, pt_err *err);

typedef struct {
    int world, rank;
    int local_rank, local_size; /* this rank among the ranks on its node */
    int nodes;                  /* distinct nodes in the world */
    int *node_of;               /* [world] node index of each world rank (owned) */
} pt_cb_topo;

/* Collective over MPI_COMM_WORLD, agreed. Nodes are told apart by
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED): ranks that can share memory. */
int pt_cb_topo_init(pt_cb_topo *t, pt_err *err);
void pt_cb_topo_free(pt_cb_topo *t);
/* The most members of the group of world ranks 0..group-1 that sit on one node. */
int pt_cb_topo_ranks_per_node(const pt_cb_topo *t, int group);

/* ---- Backends (coll_mpi.c, coll_nccl.c) ------------------------------------------ */

typedef struct {
    const char *name; /* "mpi", "nccl" */
    /* Sets up this rank (for NCCL: picks and checks its GPU). Not collective; the
     * caller agrees on the result over the world. *state is the backend's. */
    int (*open)(const pt_cb_topo *topo, void **state, pt_err *err);
    /* The library's name and version, one line, into buf. */
    void (*library)(void *state, char *buf, size_t cap);
    /* Collective over comm (the group's ranks only), agreed: a communicator and
     * send/receive buffers for sizes up to max_bytes. */
    int (*group_open)(void *state, MPI_Comm comm, int64_t max_bytes, void **group,
                      pt_err *err);
    /* Collective over the group: runs op once on `bytes` (already rounded by
     * pt_cb_round_bytes) and gives this rank's elapsed time. The op is complete on
     * return. An error here may leave other ranks inside the collective: the caller
     * aborts the job. */
    int (*run)(void *group, pt_coll op, int64_t bytes, double *time_s, pt_err *err);
    void (*group_close)(void *group);
    void (*close)(void *state);
} pt_cb_backend;

extern const pt_cb_backend pt_cb_backend_mpi;
#if PT_HAVE_NCCL
extern const pt_cb_backend pt_cb_backend_nccl;
#endif

#endif
