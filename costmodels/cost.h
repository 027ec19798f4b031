/*
 * ptcost — the cost tables: what a kernel or a collective costs on a given machine.
 * Samples measured by ptprofile or taken from ptrun traces live in SQLite (costs.db);
 * a lookup answers from an exact sample, else by interpolating between samples, else
 * from an analytic model of the hardware (roofline for kernels, alpha-beta for
 * collectives), and says which of the three it did (the provenance).
 *
 * This is the bottom library: it knows nothing of models or layouts. The planner
 * describes each op by its stable key and its FLOP and byte counts, and the hardware
 * by a pt_cost_hw filled from its cluster spec.
 *
 * Errors: functions return 0 on success and -1 on error, filling a pt_err whose
 * message names the file and what is wrong; they never exit or print.
 */
#ifndef PT_COST_H
#define PT_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h" /* pt_err, checked arithmetic, pt_dtype */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Provenance ---------------------------------------------------------------- */

typedef enum { PT_PROV_MEASURED, PT_PROV_INTERPOLATED, PT_PROV_ANALYTIC,
               PT_PROV_COUNT } pt_prov;
const char *pt_prov_name(pt_prov p);     /* "measured", "interpolated", "analytic" */

typedef struct {
    double time_s;
    pt_prov prov;
} pt_cost;

/* ---- Hardware and ops ------------------------------------------------------------ */

/* The hardware figures the analytic fallbacks need; the planner fills it from its
 * cluster spec. A figure of 0 means unknown: the analytic model then uses a
 * documented conservative default and says so in pt_cost_hw_note. */
typedef struct {
    char device[64];                   /* kernel samples are looked up by device name */
    char backend[16];                  /* collective samples by backend: "nccl", "mpi" */
    double peak_flops[PT_DTYPE_COUNT]; /* dense FLOP/s */
    double mem_bw_Bps;                 /* device memory bandwidth, bytes/s */
    int devices_per_node;
    double intra_bw_Bps, intra_latency_s; /* per device per direction */
    double inter_bw_Bps, inter_latency_s;
    /* What software reaches on that hardware (0: unknown, line rates and the
     * built-in efficiency curves are used). */
    int sm_count;                      /* streaming multiprocessors: GEMM waves */
    double gemm_max_eff;               /* best GEMM rate measured, share of peak */
    double gemm_max_eff_fp8;           /* ... of FP8 GEMMs (0: gemm_max_eff's) */
    double intra_busbw_Bps;            /* NCCL bus bandwidth inside a node */
    double intra_allreduce_busbw_Bps;  /* all-reduce inside a node (NVLink SHARP) */
    double inter_busbw_Bps;            /* NCCL bus bandwidth between nodes, per device */
} pt_cost_hw;

/* Writes into buf (cap bytes, always NUL-terminated) a one-line note naming each
 * figure of hw that is 0 and what the analytic models use instead, e.g.
 * "bf16 peak unknown, fp32 peak used; memory bandwidth unknown, 10 GB/s assumed";
 * "" when every figure is known. */
void pt_cost_hw_note(const pt_cost_hw *hw, char *buf, size_t cap);

/* A compute kernel. The key is stable text that identifies the op and its shape,
 * "<kind>:<dtype>:<shape>", e.g. "gemm:bf16:m=8192,n=6144,k=4096"; the kind is the
 * text before the first ':'. Keys are built by planner/ops.c and must match what
 * ptprofile and the runtime's traces write. */
typedef struct {
    char key[128];
    pt_dtype dtype;
    double flops;  /* floating-point operations; 0 for purely memory-bound kernels */
    double bytes;  /* device-memory traffic (reads + writes) */
    double efficiency; /* share of peak the analytic model assumes for its FLOPs when
                          known from elsewhere (a stack's attention kernel); 0: by kind */
} pt_kernel_op;

/* The layers' GEMMs by the runtime call each is, which is their key's kind (the
 * libraries choose other kernels for each, so each is priced and profiled apart):
 * - PT_GEMM_FWD, "gemm": the forward, out = in · w^T (matmul_forward);
 * - PT_GEMM_FWD_BIAS, "gemm_bias": with a bias added in its epilogue;
 * - PT_GEMM_FWD_GELU, "gemm_gelu": with the GELU in its epilogue (matmul_forward_gelu);
 * - PT_GEMM_FWD_GELU_BIAS, "gemm_gelu_bias": with the bias and the GELU;
 * - PT_GEMM_DGRAD, "gemm_dgrad": a data gradient added into its output,
 *   dinp += dout · w (matmul_backward's dinp);
 * - PT_GEMM_DGRAD_DGELU, "gemm_dgelu": a data gradient through the GELU's derivative
 *   (matmul_backward_dgelu);
 * - PT_GEMM_WGRAD, "gemm_wgrad": a weight gradient added into fp32, dw += dout^T · in
 *   (matmul_backward's dw);
 * - PT_GEMM_WGRAD_BIAS, "gemm_wgrad_bias": with the bias gradient from the same call;
 * - PT_GEMM_FWD_RES, "gemm_res": a forward with the residual add after it, res read as
 *   the product's addend (matmul_forward_res);
 * - PT_GEMM_FWD_BIAS_RES, "gemm_bias_res": with the bias too;
 * - PT_GEMM_DGRAD_WRITE, "gemm_dgrad_write": a data gradient written, dinp = dout · w
 *   (matmul_dgrad), the first of those into a buffer.
 * planner/ops.c builds the keys, ptprofile times each role as that call, the lookups
 * read them back: all through this table. */
typedef enum { PT_GEMM_NONE = -1, /* not one of the layers' GEMMs */
               PT_GEMM_FWD, PT_GEMM_FWD_GELU, PT_GEMM_DGRAD, PT_GEMM_DGRAD_DGELU,
               PT_GEMM_WGRAD, PT_GEMM_WGRAD_BIAS, PT_GEMM_FWD_BIAS, PT_GEMM_FWD_GELU_BIAS,
               PT_GEMM_FWD_RES, PT_GEMM_FWD_BIAS_RES, PT_GEMM_DGRAD_WRITE,
               PT_GEMM_ROLE_COUNT } pt_gemm_role;
const char *pt_gemm_role_kind(pt_gemm_role r); /* "gemm", "gemm_gelu", "gemm_dgrad", ... */
/* The role whose kind starts key (up to its first ':'); PT_GEMM_NONE (-1) when key is
 * not one of the layers' GEMMs. Only for keys read back from cost tables and traces:
 * an op list's GEMMs carry their role as a field (planner.h's pt_op.role). */
pt_gemm_role pt_gemm_role_of(const char *key);
/* Whether role adds the residual stream to its product (PT_GEMM_FWD_RES,
 * PT_GEMM_FWD_BIAS_RES): the runtime's op and ptprofile's call read res beside the
 * product. */
bool pt_gemm_role_adds_residual(pt_gemm_role role);
/* Whether role is a forward whose epilogue adds a bias (PT_GEMM_FWD_BIAS,
 * PT_GEMM_FWD_GELU_BIAS, PT_GEMM_FWD_BIAS_RES), or a weight gradient that also forms
 * the bias gradient (PT_GEMM_WGRAD_BIAS). */
bool pt_gemm_role_has_bias(pt_gemm_role role);

typedef enum { PT_COLL_ALLREDUCE, PT_COLL_ALLGATHER, PT_COLL_REDUCESCATTER, PT_COLL_ALLTOALL,
               PT_COLL_BROADCAST, PT_COLL_SENDRECV, PT_COLL_COUNT } pt_coll;
const char *pt_coll_name(pt_coll c);  /* "allreduce", "allgather", "reducescatter",
                                         "alltoall", "broadcast", "sendrecv" */
int pt_coll_parse(const char *text, pt_coll *out, pt_err *err);

/* A collective over `group` ranks, `ranks_per_node` of them on each node (equal to
 * group when the group sits inside one node). `bytes` follows nccl-tests: the
 * per-rank buffer for all-reduce, broadcast, all-to-all and send/recv, the whole
 * gathered (or to-be-scattered) buffer for all-gather and reduce-scatter. */
typedef struct {
    pt_coll op;
    double bytes;
    int group;
    int ranks_per_node;
} pt_coll_op;

/* NCCL's bus bandwidth of a collective that took time_s: algorithm bandwidth
 * bytes/time_s times 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
 * reduce-scatter and all-to-all, 1 for broadcast and send/recv (nccl-tests,
 * doc/PERFORMANCE.md). */
double pt_coll_busbw(pt_coll op, int group, double bytes, double time_s);

/* ---- Analytic models ------------------------------------------------------------- */

/* Roofline with size-dependent efficiency: max(flops / (peak·eff_c), bytes /
 * (bw·eff_m)) plus a launch overhead. */
double pt_cost_kernel_analytic(const pt_cost_hw *hw, const pt_kernel_op *op);
/* Alpha-beta models: ring and tree (the faster is taken, as NCCL picks), and
 * hierarchical (intra-node, then inter-node, then intra-node) when the group spans
 * nodes. */
double pt_cost_coll_analytic(const pt_cost_hw *hw, const pt_coll_op *op);

/* ---- The database ---------------------------------------------------------------- */

typedef struct pt_costdb pt_costdb;

enum { PT_COSTDB_READ = 0, PT_COSTDB_CREATE = 1,
       /* leave out the samples taken from traces: the tables as profiled, before any
        * run was calibrated into them */
       PT_COSTDB_PROFILE_ONLY = 2 };

/* The schema version this build writes and reads. Older databases are migrated
 * on open (in a transaction); newer ones are refused. */
int pt_costdb_schema_version(void);

/* Opens `path`. With PT_COSTDB_READ a missing file is an error; PT_COSTDB_CREATE
 * creates it (and its schema). A file that is not a database, a damaged database or
 * a newer schema is an error naming the path. path NULL gives an empty in-memory
 * table (every lookup analytic). All samples are read into memory, so lookups do
 * not touch SQLite. */
int pt_costdb_open(const char *path, int flags, pt_costdb **out, pt_err *err);
/* Opens, in memory, the cost table that `sql` fills: statements run over a fresh
 * schema (INSERTs into its tables, as a shipped profile holds them). `name` stands
 * for the path in messages and pt_costdb_where. Nothing is read from or written to
 * disk; writes go to the memory copy. Bad SQL is an error naming `name`. */
int pt_costdb_open_sql(const char *name, const char *sql, pt_costdb **out, pt_err *err);
void pt_costdb_close(pt_costdb *db);

/* The profiles the project ships (costmodels/profiles/, compiled in): the SQL text of
 * each device's, by the device's name; ended by {NULL, NULL}. */
typedef struct {
    const char *device;
    const char *sql;
} pt_shipped_sql;
extern const pt_shipped_sql pt_shipped_sqls[];
/* Opens the shipped profile of `device` in memory: 0 with *out; 1 with *out NULL when
 * none is shipped for it; -1 with err when it does not load. */
int pt_costdb_open_shipped(const char *device, pt_costdb **out, pt_err *err);
/* What `device`'s samples in db were measured on, from its ptprofile runs: the first
 * run's date, the number of runs, the libraries of the last that finished. -1 (buf "")
 * when the table records no run of it. */
int pt_costdb_profile_about(const pt_costdb *db, const char *device, char *buf, size_t cap);

/* Where each sample came from. */
typedef enum { PT_SOURCE_PROFILE, PT_SOURCE_TRACE } pt_source;

/* Stores hw under hw->device, replacing an earlier description of that name. */
int pt_costdb_add_device(pt_costdb *db, const pt_cost_hw *hw, pt_err *err);
/* Copies the stored description of device `name` into out; -1 (with err) when the
 * table has none. */
int pt_costdb_device(const pt_costdb *db, const char *name, pt_cost_hw *out, pt_err *err);
int pt_costdb_add_kernel(pt_costdb *db, const char *device, const pt_kernel_op *op,
                         double time_s, pt_source source, pt_err *err);
int pt_costdb_add_coll(pt_costdb *db, const char *backend, const pt_coll_op *op,
                       double time_s, pt_source source, pt_err *err);

/* Lookups: exact sample (median of repeats) → for a gradient's GEMM key that has none,
 * the forward GEMM ("gemm") of the same dtype and shape, for a biased forward's the
 * same forward without the bias (interpolated: tables made before the roles had keys
 * of their own) → log-log interpolation between samples
 * of the same kind, dtype and device over FLOPs (bytes for memory-bound kinds), or for
 * collectives of the same op and backend over bytes and then between group sizes →
 * analytic. db may be NULL (analytic only). */
pt_cost pt_cost_kernel(const pt_costdb *db, const pt_cost_hw *hw, const pt_kernel_op *op);
/* Only what the table holds of op's very shape: its key's samples (measured), else, for a
 * layer GEMM's role, those of another role of the same shape as pt_cost_kernel takes them
 * (interpolated). 0 with *out; -1 when it holds neither (nothing interpolated between
 * shapes, nothing analytic). The planner prices another framework's kernel this way where
 * it runs the kernel ptrun does: a cuBLAS GEMM of another shape may be another kernel. */
int pt_cost_kernel_sampled(const pt_costdb *db, const pt_cost_hw *hw, const pt_kernel_op *op,
                           pt_cost *out);
pt_cost pt_cost_coll(const pt_costdb *db, const pt_cost_hw *hw, const pt_coll_op *op);

/* Groups writes into one transaction (one commit instead of one per sample; SQLite
 * commits are slow). They nest: calls that are transactions of their own (recording a
 * run, storing its samples) become one atomic change inside an outer begin/commit, and
 * a failure in any of them rolls the whole of it back. No-ops on the in-memory table. */
int pt_costdb_begin(pt_costdb *db, pt_err *err);
int pt_costdb_commit(pt_costdb *db, pt_err *err);
/* Undoes the whole transaction (every begin so far) and reads the tables again. */
int pt_costdb_rollback(pt_costdb *db, pt_err *err);

/* Like add, but first removes the samples of the same source with the same identity
 * (device and key; or backend, op, bytes, group and ranks per node), so that
 * measuring again updates instead of piling up repeats. */
int pt_costdb_put_kernel(pt_costdb *db, const char *device, const pt_kernel_op *op,
                         double time_s, pt_source source, pt_err *err);
int pt_costdb_put_coll(pt_costdb *db, const char *backend, const pt_coll_op *op,
                       double time_s, pt_source source, pt_err *err);
/* Whether any sample of `key` on `device` exists; how many collective samples of
 * `backend` exist (what a resumed profile run skips). */
bool pt_costdb_has_kernel(const pt_costdb *db, const char *device, const char *key);
int64_t pt_costdb_count_colls(const pt_costdb *db, const char *backend);

/* A ptprofile run as the database records it (table profile_runs). */
typedef struct {
    char host[128];
    char device[64];
    char backend[16];
    char versions[512];   /* the libraries measured through, e.g. OpenBLAS and MPI */
    char command[512];
} pt_profile_run;

/* Records that a run started (status "running"); *id names it for run_end, whose
 * status is "done", "interrupted" or "failed". No-ops on the in-memory table. */
int pt_costdb_run_begin(pt_costdb *db, const pt_profile_run *run, int64_t *id, pt_err *err);
int pt_costdb_run_end(pt_costdb *db, int64_t id, const char *status, pt_err *err);

/* A training run, predicted against measured (table runs). The fields from plan_id
 * on came with schema version 4; older rows read back with them empty. */
typedef struct {
    int64_t id;                /* set by reads; ignored by writes */
    char created_at[32];       /* set by reads (UTC, ISO 8601); ignored by writes */
    char host[128];
    char git_revision[48];
    char model[64], cluster[64], layout[1024];
    int64_t world, steps;
    double predicted_step_s, measured_step_s;
    double predicted_mfu, measured_mfu;
    double predicted_memory_bytes, measured_memory_bytes;
    char plan_id[17];          /* identity of the plan file trained (pt_trace_plan_id) */
    char plan_path[512];       /* where it was, and the run's log and trace, "" if none */
    char log_path[512];
    char trace_path[512];
    /* from schema version 5 on (0 and "" in older rows) */
    int64_t steps_timed;       /* the steps measured_step_s is the median of (after warm-up) */
    double gemm_ratio;         /* its GEMMs' median time over the profiled time (0: unknown) */
    char noisy[256];           /* why its timings were not calibrated into the tables, or "" */
    bool forgotten;            /* ptcalib --forget removed its samples and fits */
} pt_run_record;

/* One rank of a run: its memory, predicted for its stage against measured. */
typedef struct {
    int rank, stage;
    double predicted_memory_bytes;  /* the memory model's figure for the rank's stage */
    double measured_memory_bytes;   /* what the rank's model allocated on its backend */
    double peak_rss_bytes;          /* the rank's process at its peak (resident set) */
} pt_run_rank;

/* A timed span of a run: an instruction of the schedule program (key "") or an op
 * (key = its cost-table key), on one rank and stream, with the micro-batch and
 * model chunk it worked on (-1 when none). Times are seconds on the run's common
 * clock (see traces/trace.c for how ranks' clocks are aligned). */
typedef struct {
    char name[48];   /* what ran: "fwd mb3 c0", "q", "attn_bwd", ... */
    char key[128];   /* the op's cost-table key; "" for instructions */
    int rank;
    int stream;      /* 0 compute, 1 communication */
    int mb, chunk;
    int step;        /* the optimizer step it ran in; -1 when unknown */
    int ins;         /* the index of the schedule-program instruction it ran in (of
                        its rank's program: planner/sched.c), an instruction span's own;
                        -1 when none */
    int op;          /* an op span's place among the ops of its instruction (the op
                        lists of planner/ops.c in the order they ran); -1 otherwise */
    double t0_s;
    double dur_s;
    double flops, bytes; /* of an op span, for cost samples */
    pt_dtype dtype;
} pt_span;

/* ---- Robust statistics of repeated timings (costmodels/stats.c) ------------------------ */

/* A timing repeated n times is summarised by its median and its median absolute
 * deviation (MAD), which one pre-empted repeat cannot move; repeats whose modified
 * z-score 0.6745·|x - median| / MAD exceeds PT_OUTLIER_Z are outliers (Iglewicz and
 * Hoaglin, "How to Detect and Handle Outliers", ASQC 1993, sec. 3.3, who recommend 3.5),
 * and the mean is taken over the rest. */
#define PT_OUTLIER_Z 3.5
/* The fewest repeats (after warm-up and outliers) a timing needs to become a cost
 * sample: with fewer, the median is one or two numbers and nothing is robust. */
#define PT_MIN_SPANS 3

typedef struct {
    int64_t spans;           /* repeats summarised */
    int64_t kept;            /* left after outlier rejection */
    double median_s, mad_s;  /* of every repeat */
    double mean_s;           /* of the kept repeats */
    double min_s, max_s, total_s; /* of every repeat */
} pt_robust;

/* Summarises v[0 .. n) (sorted in place); n = 0 gives all zeros. */
void pt_robust_of(double *v, size_t n, pt_robust *out);
/* Merges summaries of the same timing on several ranks: the median of their medians and
 * of their MADs, and the sums and extremes of the rest. */
void pt_robust_merge(const pt_robust *const *v, size_t n, pt_robust *out);

/* What a run stores per op and rank instead of every span: the statistics of one op
 * key (or, for a collective without a key, one name) of one rank and stream over the
 * run's steps after its warm-up. */
typedef struct {
    int rank, stream;
    char name[48];
    char key[128];           /* "" for a collective */
    pt_dtype dtype;
    double flops, bytes;
    pt_robust st;
} pt_op_stat;

/* Appends a run; the table must be a file. */
int pt_costdb_add_run(pt_costdb *db, const pt_run_record *r, pt_err *err);
/* Appends a run with its ranks, op statistics and spans (any may be 0 long) in one
 * transaction; *id (may be NULL) receives the run's id. */
int pt_costdb_record_run(pt_costdb *db, const pt_run_record *r, const pt_run_rank *ranks,
                         int n_ranks, const pt_op_stat *stats, size_t n_stats,
                         const pt_span *spans, size_t n_spans, int64_t *id, pt_err *err);
/* A run's op statistics (by rank, stream, key, name); malloc'd, caller frees. */
int pt_costdb_run_op_stats(const pt_costdb *db, int64_t run_id, pt_op_stat **out, size_t *n,
                           pt_err *err);
/* Reads every run in the order recorded; *out is malloc'd (the caller frees; NULL when
 * there is none). */
int pt_costdb_runs(const pt_costdb *db, pt_run_record **out, size_t *n, pt_err *err);
/* A run's ranks (by rank) and spans (by rank, then start); malloc'd, caller frees. */
int pt_costdb_run_ranks(const pt_costdb *db, int64_t run_id, pt_run_rank **out, size_t *n,
                        pt_err *err);
int pt_costdb_run_spans(const pt_costdb *db, int64_t run_id, pt_span **out, size_t *n,
                        pt_err *err);

/* ---- Measured runs of other frameworks (costmodels/runs.c) ---------------------------- */

/* A measured run of any framework (ptcalib --run FILE), stored to calibrate the planner's
 * predictions of its stack on its device (table framework_runs, schema version 7). The
 * cost tables do not read the record: it is the planner's run record (planner/calib.h),
 * kept as its JSON text; the other fields repeat what a reader of the table looks for.
 * Its id is its own (shown as f<id>), not a ptrun run's. */
typedef struct {
    int64_t id;               /* set by reads; ignored by writes */
    char created_at[32];      /* set by reads (UTC, ISO 8601) */
    char stack[64];           /* the stack's name: what it calibrates, with device */
    char device[64];          /* the device's name (pt_cost_hw.device) */
    char model[64], cluster[64];
    int64_t gpus;
    char layout[512];
    double measured_step_s;
    char date[40];            /* when it ran, as its record says */
    char software[160];       /* "Megatron-LM core_r0.12.0" */
    char source[512];         /* the file it was read from */
    char *record;             /* the record's JSON text: malloc'd by reads (freed by
                                 pt_costdb_framework_runs_free), borrowed by writes */
} pt_framework_run;

/* Stores r; *id (may be NULL) receives its id. The table must be a file. */
int pt_costdb_add_framework_run(pt_costdb *db, const pt_framework_run *r, int64_t *id,
                                pt_err *err);
/* The stored runs of `stack` on `device` (either NULL: any), by id; *out malloc'd (NULL
 * when none), freed with pt_costdb_framework_runs_free. A table that is not a file (the
 * in-memory one, db NULL) holds none. */
int pt_costdb_framework_runs(const pt_costdb *db, const char *stack, const char *device,
                             pt_framework_run **out, size_t *n, pt_err *err);
void pt_costdb_framework_runs_free(pt_framework_run *v, size_t n);
/* Deletes stored run `id` (in the caller's transaction, if any): -1 with err naming the
 * table when there is none of that id. */
int pt_costdb_forget_framework_run(pt_costdb *db, int64_t id, pt_err *err);

/* ---- Samples from a run (costmodels/calib.c) ---------------------------------------- */

/* One op key's timing over a whole run: its ranks' statistics merged. The planner and
 * the runtime list the same ops (a fused kernel is one op in both: planner/ops.c), so
 * every sample times exactly the op its key prices; FP8 GEMMs (dtype fp8), whose spans
 * hold their operands' casts too, give none (pt_op_samples leaves them out). */
typedef struct {
    pt_kernel_op op;
    pt_robust st;            /* st.median_s is the sample's time */
    int ranks;
} pt_op_sample;

/* The samples of the compute ops (stream 0, with a key) among v. *out malloc'd, caller
 * frees. */
int pt_op_samples(const pt_op_stat *v, size_t n, pt_op_sample **out, size_t *n_out,
                  pt_err *err);

/* The load check: the median over GEMM keys of measured time over the profiled tables'
 * time (only keys they price from measured or interpolated samples); 0 when there is
 * none. *keys (may be NULL) receives how many keys it is the median of. A run whose
 * ratio is above PT_NOISY_GEMM_RATIO ran on a machine busier than when it was profiled:
 * its timings are kept with the run but not calibrated into the tables. */
double pt_gemm_ratio(const pt_op_sample *v, size_t n, const pt_costdb *profile,
                     const pt_cost_hw *hw, int *keys);
#define PT_NOISY_GEMM_RATIO 1.25
/* The second load check, from the run alone: the time its compute ops' spans took over
 * what their medians account for (sum of durations / sum of repeats x median). A
 * pre-empted span takes a scheduler slice more than its median; on the idle 2-core
 * machine the default job showed 1.09 and single-rank runs of tiny 1.07, runs made while
 * other builds loaded both cores 1.6 to 2.7. A run above PT_NOISY_EXCESS is noisy: its step time is the
 * machine's load, not the layout's. */
double pt_span_excess(const pt_op_sample *v, size_t n);
#define PT_NOISY_EXCESS 1.25

/* Stores the samples of run run_id (source trace) that have at least PT_MIN_SPANS
 * kept repeats, replacing the run's earlier ones, in one transaction; *stored counts
 * them. */
int pt_costdb_put_run_samples(pt_costdb *db, const char *device, int64_t run_id,
                              const pt_op_sample *v, size_t n, int64_t *stored, pt_err *err);
/* Marks run_id noisy with why (stored in runs.noisy). */
int pt_costdb_mark_noisy(pt_costdb *db, int64_t run_id, const char *why, pt_err *err);

/* Undoing a run: its kernel samples and the fits its calibration stored are deleted
 * (the fits in force before it are in force again) and the run is marked forgotten.
 * Runs in the caller's transaction (pt_costdb_begin): commit keeps it, pt_costdb_rollback
 * undoes it (a dry run); either way the in-memory tables follow. */
typedef struct {
    int64_t samples, kernel_fits, link_fits;
} pt_forgotten;
int pt_costdb_forget_run(pt_costdb *db, int64_t run_id, pt_forgotten *out, pt_err *err);

/* The traced runs whose samples of `device` are in the tables (ascending, at most cap
 * written), and how many of the device's kernel samples came from ptprofile. Returns
 * the number of runs. */
int pt_costdb_sample_runs(const pt_costdb *db, const char *device, int64_t *runs, int cap,
                          int64_t *profile_samples);

/* ---- Calibration (costmodels/fit.c) ------------------------------------------------ */

/* The analytic fallbacks assume an efficiency per kind of kernel and a latency and
 * bandwidth per link level. Calibration fits them to measured samples by least squares;
 * the fitted figures are stored in the database (tables kernel_fits and link_fits) and
 * then used by every lookup that falls back to the analytic model of that device or
 * backend.
 *
 * Kernels are fitted per class: every GEMM ("gemm", the efficiency curve of the GEMM
 * roofline) together, every other kind on its own ("attn_fwd", "gelu_bwd", ...: their
 * costs differ too much for one curve, a transcendental per element against a copy). */
#define PT_FIT_MAX_CLASSES 64

/* The class of a kernel: "gemm" for GEMM and matmul kinds, else the key's kind. */
void pt_fit_class_of(const pt_kernel_op *op, char cls[32]);

/* time = x / eff + fixed_s, where x is the time at 100% of the device: FLOPs at peak
 * when the kernel has FLOPs, else bytes at the memory bandwidth. */
typedef struct {
    char cls[32];
    double eff;           /* share of the peak FLOP/s (of the bandwidth without FLOPs) */
    double fixed_s;       /* per-kernel fixed time: launch, ramp-up */
    int samples;          /* distinct keys fitted */
    double rms_rel_err;   /* of the fit over its samples */
    /* judged by pt_cost_fit_judge_kernels */
    double cv_rel_err;    /* rms relative error on each key when fitted without it */
    double prev_rel_err;  /* rms relative error of the model in force on the same keys */
    bool accepted;        /* stored; else why says why not */
    char why[128];
} pt_kernel_fit;

typedef struct {
    int n;
    pt_kernel_fit v[PT_FIT_MAX_CLASSES];
} pt_kernel_fits;

/* Alpha-beta of one link level: a step costs alpha_s + bytes / bw_Bps. */
typedef struct {
    bool ok;
    double alpha_s, bw_Bps;
    int samples;
    double rms_rel_err;
    /* judged by pt_cost_fit_judge_links, as for kernels */
    double cv_rel_err, prev_rel_err;
    bool accepted;
    char why[128];
} pt_link_fit;

/* A fit is stored only when it is a model of its samples and better than the one in
 * force: efficiency at most 100% (a kernel cannot beat the peak; a memory-bound one that
 * seems to has its data in cache, and its bytes are not what it moves), rms error over
 * its own samples at most PT_FIT_MAX_RMS, and its error on each sample when fitted
 * without it (leave-one-out cross-validation) below the error of the model in force
 * (the newest stored fit, else the built-in figures). A class of one or two sizes
 * cannot be cross-validated and is not stored. */
#define PT_FIT_MAX_RMS 0.25

/* Fits each kernel class of device hw->device from its samples (the median of each
 * key's repeats, every source), minimising the sum of squared relative errors; a class
 * measured at one size only gets its efficiency alone (fixed time 0). */
void pt_cost_fit_kernels(const pt_costdb *db, const pt_cost_hw *hw, pt_kernel_fits *out);
/* Fits alpha and beta of the intra-node level (groups inside one node) and the
 * inter-node level (one rank per node) from the collective samples of `backend`. */
void pt_cost_fit_links(const pt_costdb *db, const char *backend, pt_link_fit *intra,
                       pt_link_fit *inter);
/* Judges fits against the tables' samples and the fits in force (PT_FIT_MAX_RMS). */
void pt_cost_fit_judge_kernels(const pt_costdb *db, const pt_cost_hw *hw, pt_kernel_fits *fits);
void pt_cost_fit_judge_links(const pt_costdb *db, const pt_cost_hw *hw, pt_link_fit *intra,
                             pt_link_fit *inter);
/* Stores the accepted fits as made by the calibration of run run_id (replacing that
 * run's earlier fits of the same classes); they are in force from now on. */
int pt_costdb_put_kernel_fits(pt_costdb *db, const char *device, int64_t run_id,
                              const pt_kernel_fits *fits, pt_err *err);
int pt_costdb_put_link_fits(pt_costdb *db, const char *backend, int64_t run_id,
                            const pt_link_fit *intra, const pt_link_fit *inter, pt_err *err);
/* The stored fits of a device / backend (links not stored have ok false). */
void pt_costdb_kernel_fits(const pt_costdb *db, const char *device, pt_kernel_fits *out);
void pt_costdb_link_fits(const pt_costdb *db, const char *backend, pt_link_fit *intra,
                         pt_link_fit *inter);
/* The analytic models with fitted figures: a kernel whose class has no fit (or fits
 * NULL) gets the built-in curve (pt_cost_kernel_analytic); a level not ok uses hw's. */
double pt_cost_kernel_fitted(const pt_cost_hw *hw, const pt_kernel_op *op,
                             const pt_kernel_fits *fits);
double pt_cost_coll_fitted(const pt_cost_hw *hw, const pt_coll_op *op,
                           const pt_link_fit *intra, const pt_link_fit *inter);

/* What identifies the table a prediction was made with (written into plan.json). */
typedef struct {
    char path[512];          /* "" for the in-memory table */
    int schema_version;
    int64_t kernel_samples;
    int64_t coll_samples;
    char fingerprint[17];    /* 64-bit hash of every sample, hex */
} pt_costdb_id;
void pt_costdb_identity(const pt_costdb *db, pt_costdb_id *out);

#ifdef __cplusplus
}
#endif
#endif
