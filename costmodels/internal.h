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
    int64_t run_id;           /* the traced run it came from; 0 for ptprofile's, -1 for a
                                 trace sample without one (stored before schema 5); the
                                 orders sort run samples before the profile's */
} pt_ksample;

/* One collective sample. */
typedef struct {
    char backend[16];
    pt_coll op;
    int group, ranks_per_node;
    double bytes, time_s;
} pt_csample;

/* One stored fit: of a kernel class `cls` of a device (what = PT_FIT_KERNEL) or of a
 * link level of a backend (what = PT_FIT_INTRA, PT_FIT_INTER). */
enum { PT_FIT_KERNEL, PT_FIT_INTRA, PT_FIT_INTER };
typedef struct {
    char target[64];          /* device or backend */
    int what;
    char cls[32];
    double p1, p2;            /* eff and fixed_s, or alpha_s and bw_Bps */
    int samples;
    double rms_rel_err;
} pt_fit_row;

struct pt_costdb {
    char path[512];           /* "" for the in-memory table */
    sqlite3 *sql;             /* NULL for the in-memory table */
    int schema_version;

    pt_ksample *ks;           /* append-only */
    uint32_t *k_by_key;       /* (device, key, origin, time, flops, bytes, dtype) */
    uint32_t *k_by_x;         /* (device, kind, dtype, axis, x, key, origin, time, flops,
                                 bytes); origin: a training run's samples before the
                                 profile's */
    size_t nk, capk;

    pt_csample *cs;           /* append-only */
    uint32_t *c_by_cfg;       /* (backend, op, group, ranks_per_node, bytes, time) */
    size_t nc, capc;

    pt_cost_hw *devs;         /* device descriptions, one per name */
    size_t ndev, capdev;

    bool profile_only;        /* opened with PT_COSTDB_PROFILE_ONLY */
    pt_fit_row *fits;         /* fitted figures (tables kernel_fits, link_fits) */
    size_t nfits;
    int tx_depth;             /* pt_costdb_begin calls not yet committed (nesting) */
};

/* Levels of the kernel orders: comparing "up to level L" compares the first L
 * fields of the order named above. */
enum { PT_KKEY_DEVICE = 1, PT_KKEY_KEY = 2, PT_KKEY_ALL = 7 };
enum { PT_KX_DEVICE = 1, PT_KX_KIND, PT_KX_DTYPE, PT_KX_AXIS, PT_KX_X, PT_KX_KEY,
       PT_KX_ALL = 10 };
enum { PT_CC_BACKEND = 1, PT_CC_OP, PT_CC_GROUP, PT_CC_RPN, PT_CC_BYTES, PT_CC_ALL = 6 };

int pt_ksample_cmp_key(const pt_ksample *a, const pt_ksample *b, int level);
int pt_ksample_cmp_x(const pt_ksample *a, const pt_ksample *b, int level);
/* The time one op key's repeats idx[a, b) (a run of either kernel order) stand for: the
 * median of those measured in training runs (trace samples, timed where the op really
 * runs, among its neighbours) when there are any, else of the profile's. */
double pt_ksample_key_time(const pt_costdb *db, const uint32_t *idx, size_t a, size_t b);
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

/* Shared by db.c, runs.c and fit.c: the file's name for messages, SQLite's diagnosis
 * of a failure, the time now (UTC, ISO 8601), one INSERT with bound arguments ('t'
 * text, 'd' double, 'i' int64). */
const char *pt_costdb_where(const pt_costdb *db);
int pt_costdb_sql_fail(const pt_costdb *db, pt_err *err, const char *what);
void pt_costdb_iso_now(char out[32]);
int pt_costdb_insert_row(pt_costdb *db, const char *sql, const char *types, pt_err *err,
                         const char *what, ...);
/* The peak FLOP/s the analytic models use for dtype d, and the memory bandwidth
 * (hw's figures, else analytic.c's documented defaults). */
double pt_cost_peak(const pt_cost_hw *hw, pt_dtype d);
double pt_cost_mem_bw(const pt_cost_hw *hw);
/* The analytic time of op on hw with the fit stored for its class, else the built-in
 * curve (the lookups' fallback; no copying of fits on this hot path). */
double pt_cost_kernel_stored_fit(const pt_costdb *db, const pt_cost_hw *hw,
                                 const pt_kernel_op *op);
/* Reads the fits tables into db->fits (fit.c). */
int pt_costdb_load_fits(pt_costdb *db, pt_err *err);
/* pt_costdb_add_kernel with the sample's run (0: ptprofile's), spread and repeats. */
int pt_costdb_add_kernel_from(pt_costdb *db, const char *device, const pt_kernel_op *op,
                              double time_s, pt_source source, int64_t run_id,
                              double spread_s, int64_t spans, pt_err *err);
/* Reads every sample again (after rows were deleted or a transaction rolled back). */
int pt_costdb_reload(pt_costdb *db, pt_err *err);
/* Runs one statement with bound arguments ('t' text, 'd' double, 'i' int64) that returns
 * no rows; *changes (may be NULL) receives how many rows it changed. */
int pt_costdb_exec_bound(pt_costdb *db, const char *sql, const char *types, int64_t *changes,
                         pt_err *err, const char *what, ...);

#endif
