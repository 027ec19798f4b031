/*
 * test_kernels_cuda's attention and the RoPE before it (the harness and the overview:
 * test_kernels_cuda_harness.c, test_kernels_cuda.c): rope_forward and rope_backward,
 * in place too and at long-context positions; attention_forward and
 * attention_backward (accumulated into and written) over sequence length 1, one head,
 * GQA with one KV head, head dimensions 64, 128 and 40, causal blocks of context
 * parallelism that see every key, none or part, and the tensor-core path over many
 * tiles; attention_combine, with rows that saw no key. The same shapes run on the
 * CUDA-core kernels (PT_KCUDA_SIMPLE_ATTN) and under each PT_KCUDA_ATTN mode: own
 * (this project's kernels alone) and cudnn (cuDNN's fused attention required,
 * deterministic and with PT_KCUDA_DETERMINISTIC=0); a mode that does not exist and a
 * call cuDNN does not take are errors; a call cuDNN declines is said once per
 * direction through the backend's notes (kn->note).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_kernels_cuda.h"
/* ---- RoPE -------------------------------------------------------------------------------------------- */

typedef struct { int b, s, nh, d, pos0; float theta; int in_place; } rope_arg;

static void op_rope_fwd(pt_kernels *kn, void **b, const void *p)
{
    const rope_arg *a = p;
    kn->rope_forward(kn, F(b[0]), a->in_place ? CF(b[0]) : CF(b[1]), a->b, a->s, a->nh, a->d,
                     a->pos0, a->theta);
}

static void op_rope_bwd(pt_kernels *kn, void **b, const void *p)
{
    const rope_arg *a = p;
    kn->rope_backward(kn, F(b[0]), CF(b[1]), a->b, a->s, a->nh, a->d, a->pos0, a->theta);
}

static void test_rope_shape(int b, int s, int nh, int d, int pos0, float theta)
{
    int64_t n = (int64_t)b * s * nh * d;
    float *x = frand(n, 1), *g = frand(n, 1), *d0 = frand(n, 1);
    char what[80];
    for (int in_place = 0; in_place < 2; in_place++) {
        rope_arg a = {b, s, nh, d, pos0, theta, in_place};
        snprintf(what, sizeof what, "rope b%d s%d nh%d d%d pos0 %d%s", b, s, nh, d, pos0,
                 in_place ? " in place" : "");
        tbuf fwd[] = {{"out", ACT, n, in_place ? x : NULL, TOL_ELEM}, {"inp", ACT, n, x, 0}};
        run_case(what, fwd, NB(fwd), op_rope_fwd, &a);
        if (!in_place) {
            tbuf bwd[] = {{"dinp", ACT, n, d0, TOL_ELEM}, {"dout", ACT, n, g, 0}};
            run_case(what, bwd, NB(bwd), op_rope_bwd, &a);
        }
    }
    free(x);
    free(g);
    free(d0);
}

void test_rope(void)
{
    test_rope_shape(2, 5, 3, 16, 7, 10000.0f);
    test_rope_shape(1, 1, 1, 128, 4095, 500000.0f);
    test_rope_shape(3, 33, 2, 64, 0, 10000.0f);
    /* long contexts: fp32 angles with the two-float frequency and exact reduction by 2π
     * (pointwise.cu) stay within a bf16 rounding of the CPU's double ones */
    test_rope_shape(1, 3, 2, 128, 100000, 500000.0f);
    test_rope_shape(2, 4, 1, 64, 131000, 10000.0f);
}

/* ---- Attention --------------------------------------------------------------------------------------------- */

typedef struct { int b, sq, skv, a, kh, d, q0, k0, causal, accumulate; } attn_arg;

static void op_attn_fwd(pt_kernels *kn, void **b, const void *p)
{
    const attn_arg *a = p;
    kn->attention_forward(kn, F(b[0]), F(b[1]), CF(b[2]), CF(b[3]), CF(b[4]), a->b, a->sq,
                          a->skv, a->a, a->kh, a->d, a->q0, a->k0, a->causal);
}

static void op_attn_bwd(pt_kernels *kn, void **b, const void *p)
{
    const attn_arg *a = p;
    kn->attention_backward(kn, F(b[0]), F(b[1]), F(b[2]), CF(b[3]), CF(b[4]), CF(b[5]),
                           CF(b[6]), CF(b[7]), CF(b[8]), a->b, a->sq, a->skv, a->a, a->kh, a->d,
                           a->q0, a->k0, a->causal, a->accumulate);
}

static void test_attention_shape(int b, int sq, int skv, int a, int kh, int d, int q0, int k0,
                                 int causal)
{
    attn_arg arg = {b, sq, skv, a, kh, d, q0, k0, causal, 1};
    int64_t nq = (int64_t)b * sq * a * d, nk = (int64_t)b * skv * kh * d;
    int64_t nl = (int64_t)b * a * sq;
    float *q = frand(nq, 1), *k = frand(nk, 1), *v = frand(nk, 1), *g = frand(nq, 1);
    float *dq0 = frand(nq, 1), *dk0 = frand(nk, 1), *dv0 = frand(nk, 1);
    char what[96];
    snprintf(what, sizeof what, "attention b%d sq%d skv%d a%d kh%d d%d q0 %d k0 %d%s", b, sq,
             skv, a, kh, d, q0, k0, causal ? " causal" : "");
    tbuf fwd[] = {{"out", ACT, nq, NULL, TOL_ATTN}, {"lse", F32, nl, NULL, TOL_F32},
                  {"q", ACT, nq, q, 0},              {"k", ACT, nk, k, 0},
                  {"v", ACT, nk, v, 0}};
    run_case(what, fwd, NB(fwd), op_attn_fwd, &arg);

    /* the backward's out and lse: the CPU's forward on the bf16-rounded inputs, its out
     * rounded to bf16, given to both backends */
    float *qr = xmalloc((size_t)nq * 4), *kr = xmalloc((size_t)nk * 4);
    float *vr = xmalloc((size_t)nk * 4), *out = xmalloc((size_t)nq * 4);
    float *lse = xmalloc((size_t)nl * 4);
    for (int64_t i = 0; i < nq; i++)
        qr[i] = bf16_round(q[i]);
    for (int64_t i = 0; i < nk; i++) {
        kr[i] = bf16_round(k[i]);
        vr[i] = bf16_round(v[i]);
    }
    CPU->attention_forward(CPU, out, lse, qr, kr, vr, b, sq, skv, a, kh, d, q0, k0, causal);
    tbuf bwd[] = {{"dq", ACT, nq, dq0, TOL_ATTN}, {"dk", ACT, nk, dk0, TOL_ATTN},
                  {"dv", ACT, nk, dv0, TOL_ATTN}, {"dout", ACT, nq, g, 0},
                  {"q", ACT, nq, q, 0},           {"k", ACT, nk, k, 0},
                  {"v", ACT, nk, v, 0},           {"out", ACT, nq, out, 0},
                  {"lse", F32, nl, lse, 0}};
    run_case(what, bwd, NB(bwd), op_attn_bwd, &arg);
    /* written rather than added to: the old contents (dq0, ...) must not show. Not with
     * one key: there dq and dk are 0 but for rounding (a softmax over one score), and
     * only the accumulated case gives the error measure a scale */
    if (skv > 1) {
        arg.accumulate = 0;
        snprintf(what + strlen(what), sizeof what - strlen(what), " written");
        run_case(what, bwd, NB(bwd), op_attn_bwd, &arg);
    }
    free(q); free(k); free(v); free(g); free(dq0); free(dk0); free(dv0);
    free(qr); free(kr); free(vr); free(out); free(lse);
}

typedef struct { int b, sq, a, d; } comb_arg;

static void op_attn_combine(pt_kernels *kn, void **b, const void *p)
{
    const comb_arg *a = p;
    kn->attention_combine(kn, F(b[0]), F(b[1]), CF(b[2]), CF(b[3]), a->b, a->sq, a->a, a->d);
}

static void test_attention_combine(void)
{
    comb_arg a = {2, 37, 3, 40};
    int64_t no = (int64_t)a.b * a.sq * a.a * a.d, nl = (int64_t)a.b * a.a * a.sq;
    float *o1 = frand(no, 1), *o2 = frand(no, 1), *l1 = frand(nl, 3), *l2 = frand(nl, 3);
    for (int64_t i = 0; i < nl; i += 5) /* rows that saw no key in one block or both */
        l1[i] = -INFINITY;
    for (int64_t i = 0; i < nl; i += 7)
        l2[i] = -INFINITY;
    tbuf bufs[] = {{"out", ACT, no, o1, TOL_ELEM}, {"lse", F32, nl, l1, TOL_F32},
                   {"out2", ACT, no, o2, 0},       {"lse2", F32, nl, l2, 0}};
    run_case("attention_combine", bufs, NB(bufs), op_attn_combine, &a);
    free(o1); free(o2); free(l1); free(l2);
}

void test_attention(void)
{
    test_attention_shape(2, 70, 70, 4, 2, 64, 0, 0, 1);     /* more rows than a tile, GQA */
    test_attention_shape(1, 1, 1, 1, 1, 64, 0, 0, 1);       /* one token, one head */
    test_attention_shape(1, 130, 130, 4, 1, 128, 0, 0, 1);  /* head dim 128, MQA */
    test_attention_shape(2, 33, 45, 3, 3, 40, 0, 0, 0);     /* general d, not causal */
    test_attention_shape(1, 200, 200, 2, 2, 64, 0, 0, 1);   /* several key tiles */
    test_attention_shape(1, 50, 64, 2, 1, 64, 64, 0, 1);    /* a CP block: all keys earlier */
    test_attention_shape(1, 50, 64, 2, 1, 64, 0, 64, 1);    /* a CP block: no key visible */
    test_attention_shape(1, 80, 100, 2, 2, 64, 30, 10, 1);  /* partly visible, offsets */
    /* the tensor-core path over many tiles: double buffering, GQA groups of 4, causal
     * offsets that are not multiples of a tile, a ragged last tile */
    test_attention_shape(2, 300, 300, 8, 2, 128, 0, 0, 1);
    test_attention_shape(1, 257, 400, 4, 4, 64, 143, 0, 1);
    test_attention_shape(1, 96, 160, 4, 1, 128, 0, 0, 0);
    test_attention_combine();
}

static void attention_simple_cases(void)
{
    test_attention_shape(2, 70, 70, 4, 2, 64, 0, 0, 1);
    test_attention_shape(1, 130, 130, 4, 1, 128, 0, 0, 1);
    test_attention_shape(1, 80, 100, 2, 2, 64, 30, 10, 1);
}

/* the same shapes on the CUDA-core kernels: a second backend without the tensor-core path */
void test_attention_simple(void)
{
    with_backend_env("PT_KCUDA_SIMPLE_ATTN", attention_simple_cases);
}

/* ---- Attention modes (PT_KCUDA_ATTN) ---------------------------------------------------
 * The default backend gives cuDNN's fused attention the calls it takes, when the build
 * has cuDNN (kernels/cuda/attention_cudnn.cu), so test_attention checks a mix. Here the
 * same shapes run on our kernels alone (own), and the shapes cuDNN takes run with cuDNN
 * required (cudnn: a call it declined would be an error), against the same CPU reference
 * and tolerances, each twice for determinism. */

/* A second backend with PT_KCUDA_ATTN=mode, or NULL after saying why: skipped when the
 * build has no cuDNN and mode is "cudnn", a failure otherwise. */
static pt_kernels *attention_backend(const char *mode)
{
    char err[256] = "";
    pt_kernels *kn = backend_with("PT_KCUDA_ATTN", mode, err, sizeof err);
    if (!kn && strstr(err, "built without cuDNN")) {
        printf("SKIPPED attention with PT_KCUDA_ATTN=%s: %s\n", mode, err);
        return NULL;
    }
    if (!kn)
        fprintf(stderr, "PT_KCUDA_ATTN=%s: %s\n", mode, err);
    CHECK(kn != NULL);
    return kn;
}

static void with_attention(const char *mode, void (*cases)(void))
{
    pt_kernels *second = attention_backend(mode);
    if (second)
        cases_on(second, cases);
}

/* The cuDNN this process loaded (cudnnGetVersion, looked up so that a build without
 * cuDNN links too), or 0 when none is. */
size_t cudnn_version(void)
{
    size_t (*get)(void) = NULL;
    void *sym = dlsym(RTLD_DEFAULT, "cudnnGetVersion");
    memcpy(&get, &sym, sizeof get); /* POSIX: a function's address through void * */
    return get ? get() : 0;
}

/* One shape with cuDNN required, unless the loaded cuDNN's backward refuses it by
 * attention_cudnn.cu's rule (cuDNN <= 9.15 with skv not a multiple of 128: a known
 * backward bug there), when that call would be an error by design: then skipped, said. */
static void cudnn_shape(int b, int sq, int skv, int a, int kh, int d, int q0, int k0,
                        int causal)
{
    size_t v = cudnn_version();
    if (v <= 91500 && skv % 128 != 0) {
        printf("SKIPPED cuDNN attention sq %d skv %d: cuDNN %zu's backward takes skv a "
               "multiple of 128 only\n", sq, skv, v);
        return;
    }
    test_attention_shape(b, sq, skv, a, kh, d, q0, k0, causal);
}

/* shapes cuDNN's path takes: head dimension a multiple of 8 up to 128, causal blocks
 * with q0 = k0 or every key visible, not one query and one key */
static void attention_cudnn_cases(void)
{
    cudnn_shape(2, 70, 70, 4, 2, 64, 0, 0, 1);       /* GQA, a ragged last tile */
    cudnn_shape(1, 130, 130, 4, 1, 128, 0, 0, 1);    /* head dim 128, MQA */
    cudnn_shape(2, 128, 128, 4, 4, 64, 128, 128, 1); /* a CP diagonal, q0 = k0 > 0 */
    cudnn_shape(1, 50, 64, 2, 1, 64, 64, 0, 1);      /* a CP block: all keys earlier */
    cudnn_shape(1, 64, 200, 2, 1, 64, 0, 0, 1);      /* causal, more keys than queries */
    cudnn_shape(1, 96, 160, 4, 1, 128, 0, 0, 0);     /* not causal */
    cudnn_shape(2, 33, 45, 3, 3, 40, 0, 0, 0);       /* head dim 40 */
    cudnn_shape(2, 300, 300, 8, 2, 128, 0, 0, 1);    /* many tiles, groups of 4 */
    cudnn_shape(1, 256, 256, 2, 2, 64, 0, 0, 1);     /* lengths multiples of 128 */
    cudnn_shape(1, 128, 384, 2, 1, 64, 0, 0, 1);     /* causal, keys multiples of 128 */
}

void test_attention_own(void) { with_attention("own", test_attention); }

/* PT_KCUDA_DETERMINISTIC=0 with cuDNN required: the backward sums dQ with fp32 atomics
 * (attention_cudnn.cu's accum_dq graph) and must match the CPU within the same
 * tolerances; its two runs are not compared bit for bit. The about line says so. A
 * value other than 0 or 1 fails backend creation. */
void test_attention_nondeterministic(void)
{
    check_bad_mode("PT_KCUDA_DETERMINISTIC", "sometimes");
    setenv("PT_KCUDA_DETERMINISTIC", "0", 1);
    pt_kernels *kn = attention_backend("cudnn");
    unsetenv("PT_KCUDA_DETERMINISTIC");
    if (!kn)
        return;
    CHECK_STR_HAS(kn->about, "nondeterministic (PT_KCUDA_DETERMINISTIC=0)");
    CHECK(strstr(GPU->about, "nondeterministic") == NULL);
    nondeterministic_gpu = 1;
    cases_on(kn, attention_cudnn_cases);
    nondeterministic_gpu = 0;
}

void test_attention_cudnn(void) { with_attention("cudnn", attention_cudnn_cases); }

/* A mode that does not exist fails backend creation; with cuDNN required, a call its
 * path does not take (a partly visible causal block) is an error sync reports. */
void test_attention_mode_errors(void)
{
    check_bad_mode("PT_KCUDA_ATTN", "bogus");
    pt_kernels *kn = attention_backend("cudnn");
    if (!kn)
        return;
    kn->attention_forward(kn, NULL, NULL, NULL, NULL, NULL, 1, 80, 100, 2, 2, 64, 30, 10, 1);
    CHECK(kn->sync(kn) == -1);
    CHECK_STR_HAS(kn->err, "PT_KCUDA_ATTN=cudnn");
    CHECK_STR_HAS(kn->err, "offset");
    pt_kernels_destroy(kn);
}

/* The backend's notes (kernels.h, kn->note): where cuDNN's attention is in use, a call
 * it declines (a partly visible causal block) runs on our kernels and is said once per
 * direction, whatever the number of calls; without cuDNN in use, skipped, said. */
static char first_note[512], last_note[512];
static int note_count;

static void take_note(void *arg, const char *line)
{
    CHECK(arg == (void *)first_note);
    if (note_count++ == 0)
        snprintf(first_note, sizeof first_note, "%s", line);
    snprintf(last_note, sizeof last_note, "%s", line);
}

static void attention_declined_cases(void)
{
    test_attention_shape(1, 80, 100, 2, 2, 64, 30, 10, 1);
    test_attention_shape(1, 80, 100, 2, 2, 64, 30, 10, 1);
}

void test_attention_notes(void)
{
    char err[256] = "";
    pt_kernels *own = backend_with("PT_KCUDA_ATTN", "own", err, sizeof err);
    pt_kernels *kn = backend_with("PT_KCUDA_ATTN", "auto", err, sizeof err);
    CHECK(own != NULL && kn != NULL);
    int cudnn = own && kn && kn->attention_forward != own->attention_forward;
    pt_kernels_destroy(own);
    if (!cudnn) {
        printf("SKIPPED the attention notes: cuDNN's attention is not in use\n");
        pt_kernels_destroy(kn);
        return;
    }
    kn->note = take_note;
    kn->note_arg = first_note;
    cases_on(kn, attention_declined_cases);
    CHECK_INT(note_count, 2);
    CHECK_STR_HAS(first_note, "cuDNN declined an attention forward (");
    CHECK_STR_HAS(last_note, "cuDNN declined an attention backward (");
    CHECK_STR_HAS(last_note, "); this project's kernels run such calls");
}

int failures_attention(void) { return pt_check_failures; }
