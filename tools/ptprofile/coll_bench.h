/*
 * ptprofile-coll internals — the collective benchmark that ptprofile runs under
 * mpirun. ptprofile_coll.c drives the measurement (groups, sizes, repeats, timing
 * reductions, the output file); coll_opts.c parses and checks the command line;
 * coll_topo.c learns which node each rank is on; coll_comm.c runs and times each op
 * through the communication layer (comm.h), the same calls ptrun makes, on host
 * buffers over MPI or on device buffers over NCCL.
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

#include "comm.h"
#include "cost.h"

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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

/* ---- Measuring through the communication layer (coll_comm.c) -------------------------- */

/* The run's side of it: the world's comm and, for nccl, the CUDA kernel backend on this
 * rank's GPU (local rank modulo the visible devices), whose stream the NCCL calls and
 * the timing events run on. */
typedef struct {
    const char *backend; /* "mpi" or "nccl" */
    pt_comm *world;      /* pt_comm_init's, over MPI_COMM_WORLD */
    pt_kernels *kn;      /* nccl only; NULL for mpi (host buffers) */
} pt_cb_comm;

/* Starts the comm (MPI must be running) and for nccl the device. Not collective; the
 * caller agrees on the result over the world. On error nothing is left to close. */
int pt_cb_comm_open(pt_cb_comm *cc, const char *backend, const pt_cb_topo *topo,
                    pt_err *err);
void pt_cb_comm_close(pt_cb_comm *cc);

/* One measured group: world ranks 0..size-1 as a comm of their own (pt_comm_sub), and
 * two buffers of max_bytes in the backend's memory. */
typedef struct {
    pt_comm *comm;
    pt_kernels *kn;      /* as pt_cb_comm's: NULL times with the host clock */
    int rank, size;
    float *send, *recv;  /* [max_bytes / 4] each, zeros (sums of zeros stay zeros) */
    int ev_start, ev_stop; /* kn's timing events; -1 until first recorded */
} pt_cb_group;

/* Collective over the world: ranks 0..size-1 get *out, the others NULL (and 0). Not
 * agreed: the caller agrees over the world. Errors name the group and what failed; on
 * error *out is NULL. */
int pt_cb_group_split(const pt_cb_comm *cc, int size, pt_cb_group **out, pt_err *err);
/* Collective over the group's ranks: for nccl selects NCCL on the device (its
 * communicator made here), then makes the buffers. Not agreed: the caller agrees
 * over the group. */
int pt_cb_group_open(pt_cb_group *g, int64_t max_bytes, pt_err *err);
/* Collective over the group: runs op once on `bytes` (already rounded by
 * pt_cb_round_bytes) through the comm layer and gives this rank's elapsed time: the
 * host clock around the call on host buffers, the device's events around it on
 * device buffers. The op is complete on return. Send/recv is a ring exchange, as
 * nccl-tests' sendrecv: each rank sends to (r+1)%g and receives from (r-1+g)%g, so
 * in a group of 2 both directions of one link are busy. An error here may leave
 * other ranks inside the collective: the caller aborts the job. */
int pt_cb_group_run(pt_cb_group *g, pt_coll op, int64_t bytes, double *time_s, pt_err *err);
/* The library that moves the group's buffers, one line ("Open MPI v4.1.4, ...",
 * "NCCL 2.21.5"). */
void pt_cb_group_library(const pt_cb_group *g, char *buf, size_t cap);
void pt_cb_group_close(pt_cb_group *g);

#endif
