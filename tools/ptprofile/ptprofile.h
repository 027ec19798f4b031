/*
 * Internal to the ptprofile command: the measurement pieces its main file drives.
 * ptprofile_cpu.c times GEMMs through OpenBLAS and characterises the CPU (peak sgemm
 * rate, memory bandwidth); ptprofile_model.c times the kernel table's GEMMs and the
 * model's other kernels, ptprofile_fp8.c the FP8 GEMMs; ptprofile_coll.c (the front
 * end's side) runs the collective profiler under mpirun and reads its results;
 * progress.c draws progress.
 */
#ifndef PT_TOOLS_PTPROFILE_H
#define PT_TOOLS_PTPROFILE_H

#include "kernels.h"
#include "planner.h"
#include "runtime.h"

#include <signal.h>

/* ---- CPU measurements (ptprofile_cpu.c) ---------------------------------------------- */

/* Sets the BLAS threads (one rank per core: 1; 0 leaves them). Returns the library's
 * description. OpenBLAS's OpenMP build (scripts/setup.sh) sets OpenMP's thread count with
 * its own: after openblas_set_num_threads(1), omp_get_max_threads() reads 1. */
const char *pt_prof_cpu_init(int threads);
/* Median seconds of `repeats` timed runs (after one warm-up) of the fp32 GEMM
 * out(m,n) = a(m,k)·b(n,k)^T, the layout the runtime's forward uses; the fastest run
 * in *best_s (may be NULL). Fewer repeats when the runs exceed `budget_s`. -1 when
 * out of memory. */
double pt_prof_gemm(int64_t m, int64_t n, int64_t k, int repeats, double budget_s,
                    double *best_s);
/* Best sgemm rate (FLOP/s) on a square problem and streaming bandwidth (bytes/s). */
double pt_prof_cpu_peak_flops(int repeats);
double pt_prof_cpu_mem_bw(int64_t bytes, int repeats);
/* Parses "<kind>:<dtype>:m=..,n=..,k=.." of one of the layers' GEMM roles
 * (pt_gemm_role_of), or "<kind>:<dtype>:b=..,m=..,n=..,k=.." of a batch of them, into
 * its sizes, role and batch count (role and batch may be NULL; 1 without b); -1 when
 * it is not one. ptprofile times each role as the runtime calls it. */
int pt_prof_gemm_shape(const char *key, int64_t *m, int64_t *n, int64_t *k,
                       pt_gemm_role *role, int *batch);

/* ---- The model's other kernels (ptprofile_model.c) ------------------------------------- */

/* Runs the runtime's model of `m` with micro-batch size `mbs` on one rank, `repeats`
 * training steps of the engine after a warm-up one, on micro-batches of `data`, and
 * stores the median time of each non-GEMM op key (the optimizer's among them) as a
 * profile sample of the cluster's device. */
int pt_prof_model_kernels(pt_kernels *kn, const pt_model *m, const pt_cluster *c,
                          const pt_train *t, const pt_tokens *data, int64_t mbs, int repeats,
                          pt_costdb *db, int64_t *stored, pt_err *err);
/* Median seconds of the kernel table's matmul (any backend) in role `role`, as the
 * runtime calls it for a key of that shape (with batch > 1 a batch of them through
 * matmul_forward_shared or matmul_wgrad_shared), after soak_s seconds of it back to back
 * on the CUDA backend (pt_prof_cuda_time; other backends take none); *best_s the
 * fastest run; -1 when the backend fails or runs out of memory. */
double pt_prof_gemm_backend(pt_kernels *kn, int batch, int64_t m, int64_t n, int64_t k,
                            pt_gemm_role role, int repeats, double soak_s, double *best_s);

/* Median seconds of `repeats` (at most 64) runs of run(kn, arg) on backend kn, after a
 * warm-up: on the CUDA backend through pt_prof_cuda_time (after soak_s seconds of it
 * back to back), elsewhere with the monotonic clock around each run and kn->sync;
 * *best_s the fastest run. -1 when the backend fails. */
double pt_prof_time_backend(pt_kernels *kn, void (*run)(pt_kernels *kn, void *arg), void *arg,
                            int repeats, double soak_s, double *best_s);
/* Fills count elements of kn's activation type at dst (backend memory) with values in
 * [-1, 1) from the project's Philox stream keyed by seed; never zeros. 0, or -1 when out
 * of host memory or the backend fails. */
int pt_prof_fill_random(pt_kernels *kn, void *dst, int64_t count, uint32_t seed);

/* ---- FP8 GEMMs (ptprofile_fp8.c) --------------------------------------------------------- */

/* Whether the runtime calls gemm_fp8 in role `role` (runtime/fp8.c: a forward with or
 * without a bias, a data gradient added or written, a weight gradient with or without
 * the bias gradient); the fused forms (GELU, residual) and batches have no FP8 form. */
bool pt_prof_fp8_role(pt_gemm_role role);
/* Median seconds of the kernel table's gemm_fp8 in role `role` (pt_prof_fp8_role) with
 * a key's m, n and k, as runtime/fp8.c calls it, on operands quantized once beforehand
 * (their casts are not timed: the planner prices them on top of the key, pt_fp8_work),
 * after soak_s seconds of it back to back on the CUDA backend; a weight gradient with
 * the bias gradient adds that reduction, which the runtime's op runs beside it. *best_s
 * the fastest run. -1 when the backend has no FP8 kernels, the role has no FP8 form,
 * the backend fails or runs out of memory. */
double pt_prof_gemm_fp8(pt_kernels *kn, int64_t m, int64_t n, int64_t k, pt_gemm_role role,
                        int repeats, double soak_s, double *best_s);

/* ---- The CUDA backend's timer (ptprofile_cuda.c, built with the CUDA backend) ----------- */

/* Times run(kn, arg) on the CUDA backend kn with CUDA events on its stream: warm-up
 * runs, then runs back to back for about soak_s seconds (0: none), then `repeats` (at
 * most 64) runs queued back to back, each between its own events; each run's seconds
 * into times_s. Returns how many were measured, or -1 when kn is not the CUDA backend
 * or a CUDA call fails. */
int pt_prof_cuda_time(pt_kernels *kn, void (*run)(pt_kernels *kn, void *arg), void *arg,
                      int repeats, double soak_s, double *times_s);

/* ---- Progress (ptprofile.c) ------------------------------------------------------------- */

typedef struct {
    bool tty;          /* draw a bar with \r on a terminal, else plain lines */
    int64_t total, done;
    double start_s;
    double work_total, work_done; /* for the ETA: expected cost units */
} pt_progress;

void pt_progress_start(pt_progress *p, int64_t total, double work_total);
void pt_progress_step(pt_progress *p, double work, const char *what, const char *result);
void pt_progress_end(pt_progress *p);
double pt_prof_now_s(void);

/* ---- Collectives (ptprofile_coll_run.c) ------------------------------------------------- */

typedef struct {
    int np;                  /* ranks to launch */
    bool quick;
    int repeats;
    const char *backend;     /* "mpi" or "nccl" */
    const char *self_dir;    /* folder of the ptprofile binary (ptprofile-coll is beside it) */
    const char *scratch;     /* where the results file goes */
} pt_coll_job;

/* Checks before anything is measured that mpirun and the profiler can be run. */
int pt_prof_coll_check(const pt_coll_job *job, pt_err *err);

/* Runs the collective profiler under mpirun, then stores its samples (replacing
 * older ones) and returns the MPI library line in `library`. Clear errors when
 * mpirun or the profiler is missing or the run fails. */
int pt_prof_collectives(const pt_coll_job *job, pt_costdb *db, char *library, size_t n,
                        int64_t *stored, double *link_bw_Bps, double *link_latency_s,
                        pt_err *err);

#endif
