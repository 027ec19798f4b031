/*
 * The harness of test_kernels_cuda (declared in test_kernels_cuda.h): random inputs
 * from one generator, so every file draws from the same sequence in main's order;
 * buffers uploaded to a backend as fp32, [act] (bf16 on the GPU, bf16-rounded fp32 on
 * the CPU), bf16 or int32; run_case, which runs an op on the CPU backend and twice on
 * the GPU backend over the same inputs and compares every output under one
 * normalised error measure,
 *     max_i |gpu_i - cpu_i| / max(max_i |cpu_i|, 1e-6)
 * (infinities must match exactly, a NaN fails), and the GPU's two runs bit for bit;
 * and the second backends the tests open with a switch set in the environment.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_kernels_cuda.h"

pt_kernels *CPU, *GPU;
pt_kernels *MAIN_GPU; /* GPU as main opened it (cases_on swaps GPU for a while) */

/* ---- Random inputs ------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

double urand(void) /* uniform in [-1, 1), xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_kernels_cuda: out of host memory\n");
        exit(1);
    }
    return p;
}

float *frand(int64_t n, double scale)
{
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(urand() * scale);
    return x;
}

float *fconst(int64_t n, float v)
{
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = v;
    return x;
}

float bf16_round(float x) { return pt_k_f32_from_bf16(pt_k_bf16_from_f32(x)); }

/* ---- Buffers on a backend -------------------------------------------------------------- */

size_t elem_bytes(pt_kernels *kn, int kind)
{
    if (kind == BF16)
        return 2;
    if (kind == ACT)
        return pt_kdtype_bytes(kn->act_dtype);
    return 4;
}

void *upload(pt_kernels *kn, const tbuf *t)
{
    size_t eb = elem_bytes(kn, t->kind), bytes = (size_t)t->n * eb;
    void *dev = kn->alloc(kn, bytes);
    CHECK(dev != NULL);
    if (!dev)
        return NULL;
    void *host = xmalloc(bytes);
    if (!t->init)
        memset(host, 0, bytes);
    else if (t->kind == I32 || t->kind == F32)
        memcpy(host, t->init, bytes);
    else
        for (int64_t i = 0; i < t->n; i++) {
            float x = ((const float *)t->init)[i];
            if (eb == 2)
                ((uint16_t *)host)[i] = pt_k_bf16_from_f32(x);
            else
                ((float *)host)[i] = bf16_round(x);
        }
    kn->copy(kn, dev, host, bytes, PT_KCOPY_H2D);
    free(host);
    return dev;
}

float *download(pt_kernels *kn, const tbuf *t, const void *dev)
{
    size_t eb = elem_bytes(kn, t->kind);
    float *out = xmalloc((size_t)t->n * sizeof(float));
    void *host = xmalloc((size_t)t->n * eb);
    kn->copy(kn, host, dev, (size_t)t->n * eb, PT_KCOPY_D2H);
    for (int64_t i = 0; i < t->n; i++)
        out[i] = eb == 2 ? pt_k_f32_from_bf16(((uint16_t *)host)[i]) : ((float *)host)[i];
    free(host);
    return out;
}

/* runs op on kn over fresh copies of the buffers; outs[i] receives output i (host fp32) */
int run_on(pt_kernels *kn, const tbuf *bufs, int nb, op_fn op, const void *arg,
                  float **outs)
{
    void *dev[MAXBUF] = {0};
    for (int i = 0; i < nb; i++)
        if (!(dev[i] = upload(kn, &bufs[i])))
            return -1;
    op(kn, dev, arg);
    int rc = kn->sync(kn);
    if (rc)
        fprintf(stderr, "%s backend failed: %s\n", kn->name, kn->err);
    CHECK(rc == 0);
    for (int i = 0; i < nb; i++) {
        outs[i] = bufs[i].tol != 0.0 ? download(kn, &bufs[i], dev[i]) : NULL;
        kn->free(kn, dev[i]);
    }
    return rc;
}

/* max |got - want| / max(max |want|, 1e-6); infinities must agree exactly; NaN fails */
double nerr(const float *got, const float *want, int64_t n)
{
    double e = 0.0, m = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) || isnan(want[i]))
            return isnan(got[i]) && isnan(want[i]) ? e / m : INFINITY;
        if (isinf(got[i]) || isinf(want[i])) {
            if (got[i] != want[i])
                return INFINITY;
            continue;
        }
        e = fmax(e, fabs((double)got[i] - want[i]));
        m = fmax(m, fabs(want[i]));
    }
    return e / m;
}

int verbose(void) { return getenv("PT_TEST_VERBOSE") != NULL; }

void report(const char *what, const char *name, double err, double tol)
{
    if (verbose())
        printf("%-44s %-8s %.2e (tol %.0e)\n", what, name, err, tol);
    if (!(err <= tol)) {
        fprintf(stderr, "%s: %s: normalised error %.3g > %.3g\n", what, name, err, tol);
        pt_check_failures++;
    }
}

/* Set while cases run on a backend opened with PT_KCUDA_DETERMINISTIC=0: run_case then
 * does not ask its two GPU runs for the same bits. */
int nondeterministic_gpu;

/* runs op on the CPU and twice on the GPU; compares every output */
void run_case(const char *what, const tbuf *bufs, int nb, op_fn op, const void *arg)
{
    float *ref[MAXBUF] = {0}, *got[MAXBUF] = {0}, *again[MAXBUF] = {0};
    if (!run_on(CPU, bufs, nb, op, arg, ref) && !run_on(GPU, bufs, nb, op, arg, got) &&
        !run_on(GPU, bufs, nb, op, arg, again))
        for (int i = 0; i < nb; i++) {
            if (bufs[i].tol == 0.0)
                continue;
            size_t bytes = (size_t)bufs[i].n * sizeof(float);
            if (bufs[i].tol == EXACT) {
                if (memcmp(got[i], ref[i], bytes)) {
                    fprintf(stderr, "%s: %s: differs from the CPU's bits\n", what,
                            bufs[i].name);
                    pt_check_failures++;
                } else if (verbose()) {
                    printf("%-44s %-8s exact\n", what, bufs[i].name);
                }
            } else {
                report(what, bufs[i].name, nerr(got[i], ref[i], bufs[i].n), bufs[i].tol);
            }
            if (!nondeterministic_gpu && memcmp(got[i], again[i], bytes)) {
                fprintf(stderr, "%s: %s: two GPU runs differ (not deterministic)\n", what,
                        bufs[i].name);
                pt_check_failures++;
            }
        }
    for (int i = 0; i < nb; i++) {
        free(ref[i]);
        free(got[i]);
        free(again[i]);
    }
}

/* ---- Second backends ------------------------------------------------------------------- */

/* A backend of the test's own, created with the environment variable var set to value
 * (var NULL: the environment as it is; a backend reads its switches when it is created,
 * and var is unset again after); NULL with the reason in err. */
pt_kernels *backend_with(const char *var, const char *value, char *err, size_t cap)
{
    if (var)
        setenv(var, value, 1);
    pt_kernels *kn = pt_kernels_cuda(0, err, cap);
    if (var)
        unsetenv(var);
    return kn;
}

/* A backend of the test's own, as backend_with creates it (to run cases with a switch
 * set, to reserve, or to record an error the shared GPU must not see), or NULL after a
 * failed check that says why. */
pt_kernels *own_backend(const char *var, const char *value)
{
    char err[256] = "";
    pt_kernels *kn = backend_with(var, value, err, sizeof err);
    if (!kn && var)
        fprintf(stderr, "%s=%s: %s\n", var, value, err);
    else if (!kn)
        fprintf(stderr, "pt_kernels_cuda: %s\n", err);
    CHECK(kn != NULL);
    return kn;
}

/* var=value names no mode: creating a backend fails, and the error names the setting. */
void check_bad_mode(const char *var, const char *value)
{
    char err[256] = "", want[128];
    pt_kernels *kn = backend_with(var, value, err, sizeof err);
    CHECK(kn == NULL);
    snprintf(want, sizeof want, "%s=%s", var, value);
    CHECK_STR_HAS(err, want);
    pt_kernels_destroy(kn);
}

/* Runs cases with `second` as GPU, then destroys it. */
void cases_on(pt_kernels *second, void (*cases)(void))
{
    pt_kernels *saved = GPU;
    GPU = second;
    cases();
    GPU = saved;
    pt_kernels_destroy(second);
}

/* Runs cases as GPU on a second backend created with the environment variable var set
 * to 1 (a backend reads its switches when it is created). */
void with_backend_env(const char *var, void (*cases)(void))
{
    pt_kernels *second = own_backend(var, "1");
    if (second)
        cases_on(second, cases);
}

int failures_harness(void) { return pt_check_failures; }
