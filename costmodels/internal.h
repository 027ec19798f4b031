/*
 * Internals of ptcost shared by its files and by no one else: the in-memory form
 * of the cost tables that db.c fills (from SQLite and on insert) and lookup.c
 * searches, and the sorted index orders both rely on.
 *
 * Every sample lives once in an append-only array; index arrays hold sample numbers
 * in the orders the lookups binary-search. The orders are total over every field a
 * lookup or the fingerprint reads, so that the same samples give the same order
 * whatever order they were inserted in (pt_costdb_identity relies on this).
 */
#ifndef PT_COST_INTERNAL_H
#define PT_COST_INTERNAL_H

#include "cost.h"

#include <sqlite3.h>

/* One kernel sample as the lookups need it. The kind is key[0 .. kind_len). */
typedef struct {
    char device[64];
    char key[128];
    int kind_len;
    pt_dtype dtype;
    double flops, bytes, time_s;
} pt_ksample;

/* One collective sample. */
typedef struct {
    char backend[16];
    pt_coll op;
    int group, ranks_per_node;
    double bytes, time_s;
} pt_csample;

struct pt_costdb {
    char path[512];           /* "" for the in-memory table */
    sqlite3 *sql;             /* NULL for the in-memory table */
    int schema_version;

    pt_ksample *ks;           /* append-only */
    uint32_t *k_by_key;       /* (device, key, time, flops, bytes, dtype) */
    uint32_t *k_by_x;         /* (device, kind, dtype, axis, x, key, time, flops, bytes) */
    size_t nk, capk;

    pt_csample *cs;           /* append-only */
    uint32_t *c_by_cfg;       /* (backend, op, group, ranks_per_node, bytes, time) */
    size_t nc, capc;

    pt_cost_hw *devs;         /* device descriptions, one per name */
    size_t ndev, capdev;
};

/* Levels of the kernel orders: comparing "up to level L" compares the first L
 * fields of the order named above. */
enum { PT_KKEY_DEVICE = 1, PT_KKEY_KEY = 2, PT_KKEY_ALL = 6 };
enum { PT_KX_DEVICE = 1, PT_KX_KIND, PT_KX_DTYPE, PT_KX_AXIS, PT_KX_X, PT_KX_KEY,
       PT_KX_ALL = 9 };
enum { PT_CC_BACKEND = 1, PT_CC_OP, PT_CC_GROUP, PT_CC_RPN, PT_CC_BYTES, PT_CC_ALL = 6 };

int pt_ksample_cmp_key(const pt_ksample *a, const pt_ksample *b, int level);
int pt_ksample_cmp_x(const pt_ksample *a, const pt_ksample *b, int level);
int pt_csample_cmp(const pt_csample *a, const pt_csample *b, int level);

/* The interpolation axis of a kernel: FLOPs (axis 0) when it has any, else bytes
 * (axis 1, memory-bound kernels). */
int pt_ksample_axis(double flops);

/* Inserts sample number i (already stored in ks / cs) into the index arrays, which
 * must have room for it. */
void pt_costdb_index_kernel(pt_costdb *db, uint32_t i);
void pt_costdb_index_coll(pt_costdb *db, uint32_t i);
/* Sorts all index arrays from scratch (after loading). tmp holds max(nk, nc). */
void pt_costdb_index_all(pt_costdb *db, uint32_t *tmp);

#endif
