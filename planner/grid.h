/*
 * The rank grid of a layout and its process groups (planner/grid.c): where each rank
 * sits along tp, cp, dp and pp, and the members of each of its groups. The runtime's
 * communicators are made from these (comm/comm.h), so they are the groups the planner
 * priced.
 */
#ifndef PT_PLANNER_GRID_H
#define PT_PLANNER_GRID_H

#include <stdbool.h>
#include <stdint.h>

#include "layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Rank grid and process groups -------------------------------------------- */

typedef enum { PT_GROUP_TP, PT_GROUP_CP, PT_GROUP_DP, PT_GROUP_PP,
               PT_GROUP_DPCP, /* gradient reduction and ZeRO sharding */
               PT_GROUP_TPCP,
               PT_GROUP_CPA2A, /* cp_a2a consecutive ranks of a cp group: the
                                  all-to-all of cp_comm=a2a and a2a+p2p */
               /* the experts' groups (parallel folding): a pipeline stage's tp·cp·dp
                * ranks, numbered in the rank order, taken as etp (fastest) x ep x edp */
               PT_GROUP_EP,    /* the token dispatch between experts' ranks */
               PT_GROUP_ETP,   /* one expert's MLP split */
               PT_GROUP_EDP,   /* the same experts: their gradient reduction and ZeRO */
               PT_GROUP_COUNT } pt_group_kind;
const char *pt_group_name(pt_group_kind g);

typedef struct {
    int size[PT_NDIM];   /* indexed by pt_dim */
    int stride[PT_NDIM]; /* rank = sum coord[d]·stride[d] */
    pt_dim order[PT_NDIM];
    int cp_a2a;          /* the cp all-to-all groups' size (the layout's cp_a2a) */
    int ep, etp, edp;    /* the experts' grid over a stage's tp·cp·dp ranks */
    int64_t world;
} pt_grid;

void pt_grid_init(pt_grid *g, const pt_layout *l);
void pt_grid_coords(const pt_grid *g, int64_t rank, int coords[PT_NDIM]);
int64_t pt_grid_rank(const pt_grid *g, const int coords[PT_NDIM]);
int pt_grid_group_size(const pt_grid *g, pt_group_kind kind);
/* Fills ranks[0..size) with the members of `rank`'s group of `kind`, ascending.
 * ranks must hold pt_grid_group_size() entries. Returns this rank's index in it. */
int pt_grid_group(const pt_grid *g, pt_group_kind kind, int64_t rank, int64_t *ranks);
/* How many members of `rank`'s group of `kind` are below rank `limit` (in the first
 * `limit` ranks: a node or an NVLink domain); ranks is scratch of
 * pt_grid_group_size() entries. Unlike pt_grid_group it sorts nothing. */
int pt_grid_group_below(const pt_grid *g, pt_group_kind kind, int64_t rank, int64_t limit,
                        int64_t *ranks);
/* Context parallelism's ring: the world rank `dir` (+1 or -1) places from `rank` along
 * it. The ring runs over the cp/cp_a2a all-to-all groups (every cp rank without an
 * all-to-all), between the ranks at the same place in neighbouring groups, as
 * Transformer Engine's a2a+p2p does. */
int64_t pt_grid_cp_ring_peer(const pt_grid *g, int64_t rank, int dir);
/* True when some group of `kind` has members on two nodes of `devices_per_node`. */
bool pt_grid_group_crosses_nodes(const pt_grid *g, pt_group_kind kind, int devices_per_node);

#ifdef __cplusplus
}
#endif
#endif
