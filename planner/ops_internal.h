/*
 * Internal to planner/: how the op lists are built, shared by the files that build
 * them (ops.c: a layer, the embedding and the head; ops_step.c: the step's end). A
 * builder appends typed ops to one list; each helper here appends one op, sets what
 * every op of its kind has, and counts a failed allocation in the builder instead of
 * returning it, so a list builder checks once, at its end (finish). Static inline, so
 * the names stay private to each file that includes this one.
 */
#ifndef PT_PLANNER_OPS_INTERNAL_H
#define PT_PLANNER_OPS_INTERNAL_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "step.h"

/* ---- The list ------------------------------------------------------------------ */

static inline pt_op *push(pt_oplist *o)
{
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 32;
        pt_op *p = realloc(o->op, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        o->op = p;
        o->cap = cap;
    }
    pt_op *op = &o->op[o->n++];
    memset(op, 0, sizeof *op);
    op->count = 1;
    op->role = PT_GEMM_NONE;
    return op;
}

/* ---- Op builders ---------------------------------------------------------------- */

typedef struct {
    const pt_opctx *c;
    pt_oplist *out;
    int failed;
    bool recompute; /* mark ops as recomputation */
    bool fp8_input_cast; /* the next GEMM's input (its transpose in a weight gradient) was
                            quantized already, by the first projection of the same input
                            (q of q, k, v): TE's forward, ptrun's (current scaling) both */
    bool fp8_dy_held;    /* ptrun, current scaling: the next weight gradient's output
                            gradient was quantized, transposed, by its data gradient */
    bool fp8_dy_kept;    /* ... and the next data gradient quantizes it so (the weight
                            gradient right after it is its layer's) */
} builder;

static inline pt_op *add_op(builder *b, pt_op_kind kind)
{
    pt_op *op = push(b->out);
    if (!op) {
        b->failed = 1;
        return NULL;
    }
    op->kind = kind;
    op->cls = pt_op_kind_info_of(kind)->cls; /* the kind table says which */
    op->recompute = b->recompute;
    return op;
}

/* A memory-bound kernel reading and writing `bytes` in all; `shape` completes the key. */
static inline pt_op *membound(builder *b, pt_op_kind op_kind, const char *kind,
                              double bytes, const char *shape)
{
    pt_op *op = add_op(b, op_kind);
    if (!op)
        return NULL;
    op->kernel.dtype = b->c->dtype;
    op->kernel.bytes = bytes;
    snprintf(op->kernel.key, sizeof op->kernel.key, "%s:%s:%s", kind,
             pt_dtype_name(b->c->dtype), shape);
    return op;
}

/* A collective moving `src` into `dst` (the same buffer for an in-place reduction);
 * the op, or NULL where the group is one rank (no op) or out of memory. */
typedef struct {
    pt_tensor src, dst;
} moves;

static inline pt_op *coll(builder *b, pt_op_kind kind, moves mv, pt_coll what,
                          pt_group_kind group, double bytes, int count, bool overlapped)
{
    pt_grid g;
    pt_grid_init(&g, b->c->l);
    int size = pt_grid_group_size(&g, group);
    if (size == 1)
        return NULL;
    pt_op *op = add_op(b, kind);
    if (!op)
        return NULL;
    op->src = mv.src;
    op->dst = mv.dst;
    op->coll = (pt_coll_op){.op = what, .bytes = bytes, .group = size,
                            .ranks_per_node = b->c->ranks_per_node[group]};
    op->group = group;
    op->count = count;
    op->overlapped = overlapped;
    return op;
}

static inline int finish(builder *b)
{
    return b->failed ? -1 : 0;
}

#endif
