/*
 * What the files of test_kernels_cuda share (test_kernels_cuda.c and its overview
 * say what the program tests): the tolerances, the harness of
 * test_kernels_cuda_harness.c (random inputs, buffers on a backend, run_case, second
 * backends), and each file's tests that main calls. check.h counts failures in a
 * static of each file, so each file but test_kernels_cuda.c hands its count to main
 * through its failures_* function.
 */
#ifndef PT_TEST_KERNELS_CUDA_H
#define PT_TEST_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "kernels.h"

/* Tolerances of the normalised error, by kind of output:
 * - bf16 outputs carry a rounding of 2^-9 relative to the element (<= 2e-3 of the
 *   row's maximum), plus fp32 differences; GEMM and attention outputs also differ in
 *   fp32 summation order over up to a few hundred terms, and their backwards add into
 *   bf16 gradients (two roundings);
 * - fp32 outputs from identical bf16 inputs (norm statistics, weight gradients, lse,
 *   losses) differ only in summation order and fp32 vs double accumulation (at most
 *   4e-6 when these kernels ran in a host-side emulation of CUDA; the device's expf
 *   and fused multiply-adds differ from the host's by an ulp or two);
 * - optimizer state: one fused multiply-add contraction apart. */
#define TOL_GEMM 2e-2
#define TOL_ATTN 2e-2
#define TOL_ELEM 1e-2
#define TOL_F32 1e-4
#define TOL_F32_GEMM 5e-3
#define TOL_OPT 1e-5
#define EXACT (-1.0)

extern pt_kernels *CPU, *GPU;
extern pt_kernels *MAIN_GPU; /* GPU as main opened it (cases_on swaps GPU for a while) */

/* Set while cases run on a backend opened with PT_KCUDA_DETERMINISTIC=0: run_case then
 * does not ask its two GPU runs for the same bits. */
extern int nondeterministic_gpu;

/* ---- Random inputs (one generator for the whole program) ---------------------------- */

double urand(void); /* uniform in [-1, 1), xorshift64* */
void *xmalloc(size_t bytes);
float *frand(int64_t n, double scale);
float *fconst(int64_t n, float v);
float bf16_round(float x);

/* ---- Buffers on a backend -------------------------------------------------------------- */

/* kinds of buffer: fp32 on both backends; [act] (bf16 on the GPU, bf16-rounded fp32
 * on the CPU); bf16 on both (AdamW's compute copy, conversions); int32 */
enum { F32, ACT, BF16, I32 };

typedef struct {
    const char *name;
    int kind;
    int64_t n;
    const void *init; /* float * (int32_t * for I32); NULL: zeros */
    double tol;       /* 0: input only; > 0: compared with this tolerance; EXACT: bits */
} tbuf;

enum { MAXBUF = 12 };

typedef void (*op_fn)(pt_kernels *kn, void **b, const void *arg);

size_t elem_bytes(pt_kernels *kn, int kind);
void *upload(pt_kernels *kn, const tbuf *t);
float *download(pt_kernels *kn, const tbuf *t, const void *dev);
/* runs op on kn over fresh copies of the buffers; outs[i] receives output i (host fp32) */
int run_on(pt_kernels *kn, const tbuf *bufs, int nb, op_fn op, const void *arg, float **outs);
/* max |got - want| / max(max |want|, 1e-6); infinities must agree exactly; NaN fails */
double nerr(const float *got, const float *want, int64_t n);
int verbose(void);
void report(const char *what, const char *name, double err, double tol);
/* runs op on the CPU and twice on the GPU; compares every output */
void run_case(const char *what, const tbuf *bufs, int nb, op_fn op, const void *arg);

#define NB(bufs) ((int)(sizeof(bufs) / sizeof((bufs)[0])))
#define F(b) ((float *)(b))
#define CF(b) ((const float *)(b))

/* ---- Second backends (test_kernels_cuda_harness.c says what each does) ---------------- */

pt_kernels *backend_with(const char *var, const char *value, char *err, size_t cap);
pt_kernels *own_backend(const char *var, const char *value);
void check_bad_mode(const char *var, const char *value);
void cases_on(pt_kernels *second, void (*cases)(void));
void with_backend_env(const char *var, void (*cases)(void));

/* ---- The tests main calls, by file ------------------------------------------------------ */

/* test_kernels_cuda_gemm.c */
void test_matmuls(void);
void test_compression(void);
void test_mlp_gelu(void);
void test_mm_shared(void);
void test_epilogue_modes(void);
#ifdef PT_CUDA_EMU
void test_epilogues_ran(void);
#endif
void test_matmul_fallback(void);

/* test_kernels_cuda_attention.c */
void test_rope(void);
void test_attention(void);
void test_attention_simple(void);
void test_attention_own(void);
void test_attention_cudnn(void);
void test_attention_nondeterministic(void);
void test_attention_mode_errors(void);
void test_attention_notes(void);
size_t cudnn_version(void); /* the cuDNN this process loaded, 0 when none (test_reserve) */

/* test_kernels_cuda_fp8.c */
void test_fp8(void);

/* test_kernels_cuda_moe.c */
void test_moe(void);

/* each file's count of failed checks (check.h's pt_check_failures is a static) */
int failures_harness(void);
int failures_gemm(void);
int failures_attention(void);
int failures_fp8(void);
int failures_moe(void);

#endif
