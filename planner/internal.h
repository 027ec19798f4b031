/*
 * Declarations shared between the planner's own files and not part of its public
 * header.
 */
#ifndef PT_PLANNER_INTERNAL_H
#define PT_PLANNER_INTERNAL_H

#include "layout.h"

/* pt_layout_check with the "tensor-parallel group spans nodes" rule answered by the
 * caller (tp_spans >= 0), so the enumeration computes it once per grid shape instead
 * of once per layout; tp_spans < 0 computes it. */
int pt_layout_check_spans(const pt_model *m, const pt_cluster *c, int64_t global_batch,
                          const pt_layout *l, int tp_spans, uint32_t *mask);

/* Whether some tensor-parallel group of `l` (under its rank order) has ranks on two
 * nodes of `devices_per_node` devices. */
bool pt_layout_tp_spans_nodes(const pt_layout *l, int devices_per_node);

/* The names of the set bits of `mask` (names[k] for bit k < count), `sep`-joined, into
 * buf (n bytes): a stack's name sets, a layout's recompute modules. */
void pt_join_names(unsigned mask, int count, const char *const *names, const char *sep,
                   char *buf, size_t n);
/* All `count` names, ", "-joined, into buf (n bytes): the choices an error lists. */
void pt_join_all_names(int count, const char *const *names, char *buf, size_t n);

#endif
