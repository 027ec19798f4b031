/*
 * Tests of ptkernels' CPU backend: every forward against a plain double-precision
 * reference written here, every backward against central finite differences, the
 * split forms (vocab-parallel embedding and cross-entropy, attention over K/V blocks,
 * dropout slices) against the unsplit op, and bit-identical repeats.
 *
 * Finite differences. Inputs are drawn in double and stored as fp32 (the kernels are
 * fp32). For a scalar L = sum(out · w) with fixed random weights w (so dout = w), each
 * input element x is moved to x ± eps (eps = 1e-2; the step actually taken is the
 * difference of the two fp32 values), the forward is rerun, L is summed in double, and
 * (L+ - L-) / (x+ - x-) is compared with the analytic gradient the backward
 * accumulated. The error measure, the same for every op, is
 *     max_i |fd_i - grad_i| / max(max_i |grad_i|, 1e-3)
 * and must be below FD_TOL = 1e-3: the central difference's truncation error is
 * O(eps²) ~ 1e-4 relative, its fp32 rounding error ~ 6e-8 · |L| / eps ~ 1e-5 for these
 * sizes (PT_TEST_VERBOSE=1 prints each op's error), so 1e-3 leaves room without hiding
 * a wrong term (a wrong term is O(1)).
 * Forward checks use the same normalised measure against the double reference with
 * FWD_TOL = 1e-5 (fp32 arithmetic over at most a few hundred terms).
 *
 * PT_TEST_VERBOSE=1 prints every measured error.
 *
 * Odd shapes: sizes that are not multiples of anything (7, 13, 5), sequence length 1,
 * one head, GQA with one KV head, more query rows than the attention block (70 > 64).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels.h"

#define FD_EPS 1e-2
#define FD_TOL 1e-3
#define FWD_TOL 1e-5

static pt_kernels *K;

/* ---- Helpers ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double urand(void) /* uniform in [-1, 1), xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static float *frand(int64_t n, double scale)
{
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(urand() * scale);
    return x;
}

static float *fzero(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }

static float *fcopy(const float *x, int64_t n)
{
    float *y = malloc((size_t)(n ? n : 1) * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* sum(out · w) in double */
static double wsum(const float *out, const float *w, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)out[i] * w[i];
    return s;
}

/* max |got - want| / max(max |want|, 1e-3) */
static double nerr_f(const float *got, const double *want, int64_t n)
{
    double e = 0.0, m = 1e-3;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs(got[i] - want[i]));
        m = fmax(m, fabs(want[i]));
    }
    return e / m;
}

static double nerr_ff(const float *got, const float *want, int64_t n)
{
    double e = 0.0, m = 1e-3;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)got[i] - want[i]));
        m = fmax(m, fabs(want[i]));
    }
    return e / m;
}

#define CHECK_ERR(what, err, tol)                                                       \
    do {                                                                                \
        double e_ = (err);                                                              \
        if (getenv("PT_TEST_VERBOSE"))                                                  \
            printf("%-60s %.2e (tol %.0e)\n", (what), e_, (double)(tol));              \
        if (!(e_ <= (tol))) {                                                           \
            fprintf(stderr, "%s:%d: %s: normalised error %.3g > %.3g\n", __FILE__,      \
                    __LINE__, (what), e_, (double)(tol));                               \
            pt_check_failures++;                                                        \
        }                                                                               \
    } while (0)

/* Central differences of loss() with respect to x (n elements) against grad. */
static double fd_error(double (*loss)(void *), void *ctx, float *x, int64_t n,
                       const float *grad)
{
    double e = 0.0, m = 1e-3;
    for (int64_t i = 0; i < n; i++) {
        float x0 = x[i];
        float xp = (float)(x0 + FD_EPS), xm = (float)(x0 - FD_EPS);
        x[i] = xp;
        double lp = loss(ctx);
        x[i] = xm;
        double lm = loss(ctx);
        x[i] = x0;
        double fd = (lp - lm) / ((double)xp - xm);
        e = fmax(e, fabs(fd - grad[i]));
        m = fmax(m, fabs(grad[i]));
    }
    return e / m;
}

/* ---- Matmul ------------------------------------------------------------------------- */

typedef struct {
    int64_t n;
    int ic, oc;
    float *inp, *w, *bias, *out, *wts;
} mm_ctx;

static double mm_loss(void *p)
{
    mm_ctx *c = p;
    K->matmul_forward(K, c->out, c->inp, c->w, c->bias, c->n, c->ic, c->oc);
    return wsum(c->out, c->wts, c->n * c->oc);
}

static void test_matmul_shape(int64_t n, int ic, int oc, int with_bias)
{
    mm_ctx c = {n, ic, oc, frand(n * ic, 1), frand((int64_t)oc * ic, 1),
                with_bias ? frand(oc, 1) : NULL, fzero(n * oc), frand(n * oc, 1)};
    K->matmul_forward(K, c.out, c.inp, c.w, c.bias, n, ic, oc);
    double *ref = calloc((size_t)(n * oc), sizeof(double));
    for (int64_t i = 0; i < n; i++)
        for (int o = 0; o < oc; o++) {
            double s = with_bias ? c.bias[o] : 0.0;
            for (int j = 0; j < ic; j++)
                s += (double)c.inp[i * ic + j] * c.w[(int64_t)o * ic + j];
            ref[i * oc + o] = s;
        }
    CHECK_ERR("matmul forward", nerr_f(c.out, ref, n * oc), FWD_TOL);

    /* gradients start at 1 to check that the backward accumulates */
    float *dinp = fzero(n * ic), *dw = fzero((int64_t)oc * ic), *db = fzero(oc);
    for (int64_t i = 0; i < n * ic; i++)
        dinp[i] = 1.0f;
    for (int64_t i = 0; i < (int64_t)oc * ic; i++)
        dw[i] = 1.0f;
    for (int i = 0; i < oc; i++)
        db[i] = 1.0f;
    K->matmul_backward(K, dinp, dw, with_bias ? db : NULL, c.wts, c.inp, c.w, n, ic, oc);
    for (int64_t i = 0; i < n * ic; i++)
        dinp[i] -= 1.0f;
    for (int64_t i = 0; i < (int64_t)oc * ic; i++)
        dw[i] -= 1.0f;
    for (int i = 0; i < oc; i++)
        db[i] -= 1.0f;
    CHECK_ERR("matmul dinp", fd_error(mm_loss, &c, c.inp, n * ic, dinp), FD_TOL);
    CHECK_ERR("matmul dw", fd_error(mm_loss, &c, c.w, (int64_t)oc * ic, dw), FD_TOL);
    if (with_bias)
        CHECK_ERR("matmul dbias", fd_error(mm_loss, &c, c.bias, oc, db), FD_TOL);
    free(ref);
    free(dinp);
    free(dw);
    free(db);
    free(c.inp);
    free(c.w);
    free(c.bias);
    free(c.out);
    free(c.wts);
}

static void test_matmul(void)
{
    test_matmul_shape(7, 13, 5, 1);
    test_matmul_shape(1, 1, 1, 1);
    test_matmul_shape(9, 4, 6, 0);
    test_matmul_shape(65, 33, 17, 1);
    /* the general gemm: c = 2 · a^T · b + c with a (kk, m), b (kk, n) */
    int m = 3, n = 4, kk = 5;
    float *a = frand(kk * m, 1), *b = frand(kk * n, 1), *c = frand(m * n, 1);
    double ref[12];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < kk; l++)
                s += (double)a[l * m + i] * b[l * n + j];
            ref[i * n + j] = 2 * s + c[i * n + j];
        }
    K->gemm(K, 1, 0, m, n, kk, 2.0f, a, m, b, n, 1.0f, c, n);
    CHECK_ERR("gemm", nerr_f(c, ref, m * n), FWD_TOL);
    free(a);
    free(b);
    free(c);
}

/* ---- Norms ---------------------------------------------------------------------------- */

typedef struct {
    int64_t n;
    int h, rms;
    float *inp, *w, *bias, *out, *mean, *rstd, *wts;
} norm_ctx;

static double norm_loss(void *p)
{
    norm_ctx *c = p;
    if (c->rms)
        K->rmsnorm_forward(K, c->out, c->rstd, c->inp, c->w, c->n, c->h, 1e-5f);
    else
        K->layernorm_forward(K, c->out, c->mean, c->rstd, c->inp, c->w, c->bias, c->n, c->h,
                             1e-5f);
    return wsum(c->out, c->wts, c->n * c->h);
}

static void test_norm_shape(int64_t n, int h, int rms)
{
    norm_ctx c = {n,          h,         rms,        frand(n * h, 2), frand(h, 1),
                  frand(h, 1), fzero(n * h), fzero(n), fzero(n),        frand(n * h, 1)};
    norm_loss(&c);
    double *ref = calloc((size_t)(n * h), sizeof(double));
    for (int64_t r = 0; r < n; r++) {
        const float *x = c.inp + r * h;
        double mu = 0, var = 0;
        if (!rms) {
            for (int i = 0; i < h; i++)
                mu += x[i];
            mu /= h;
        }
        for (int i = 0; i < h; i++)
            var += (x[i] - mu) * (x[i] - mu);
        double rs = 1.0 / sqrt(var / h + 1e-5);
        for (int i = 0; i < h; i++)
            ref[r * h + i] = (x[i] - mu) * rs * c.w[i] + (rms ? 0.0 : c.bias[i]);
    }
    CHECK_ERR(rms ? "rmsnorm forward" : "layernorm forward", nerr_f(c.out, ref, n * h),
              FWD_TOL);
    float *dinp = fzero(n * h), *dw = fzero(h), *db = fzero(h);
    if (rms)
        K->rmsnorm_backward(K, dinp, dw, c.wts, c.inp, c.w, c.rstd, n, h);
    else
        K->layernorm_backward(K, dinp, dw, db, c.wts, c.inp, c.w, c.mean, c.rstd, n, h);
    CHECK_ERR(rms ? "rmsnorm dinp" : "layernorm dinp",
              fd_error(norm_loss, &c, c.inp, n * h, dinp), FD_TOL);
    CHECK_ERR(rms ? "rmsnorm dw" : "layernorm dw", fd_error(norm_loss, &c, c.w, h, dw),
              FD_TOL);
    if (!rms)
        CHECK_ERR("layernorm dbias", fd_error(norm_loss, &c, c.bias, h, db), FD_TOL);
    free(ref);
    free(dinp);
    free(dw);
    free(db);
    free(c.inp);
    free(c.w);
    free(c.bias);
    free(c.out);
    free(c.mean);
    free(c.rstd);
    free(c.wts);
}

static void test_norms(void)
{
    for (int rms = 0; rms <= 1; rms++) {
        test_norm_shape(5, 7, rms);
        test_norm_shape(1, 3, rms);
        test_norm_shape(3, 33, rms);
    }
}

/* ---- Pointwise ops ------------------------------------------------------------------------ */

typedef struct {
    int64_t n;
    int op; /* 0 gelu, 1 swiglu, 2 residual, 3 dropout */
    float *x, *y, *out, *wts;
} pw_ctx;

static double pw_loss(void *p)
{
    pw_ctx *c = p;
    switch (c->op) {
    case 0: K->gelu_forward(K, c->out, c->x, c->n); break;
    case 1: K->swiglu_forward(K, c->out, c->x, c->y, c->n, 1); break;
    case 2: K->residual_forward(K, c->out, c->x, c->y, c->n); break;
    default: K->dropout_forward(K, c->out, c->x, c->n, 0.3f, 42, 7, 0); break;
    }
    return wsum(c->out, c->wts, c->n);
}

static void test_pointwise(void)
{
    const int64_t n = 37;
    const char *names[] = {"gelu", "swiglu", "residual", "dropout"};
    for (int op = 0; op < 4; op++) {
        pw_ctx c = {n, op, frand(n, 3), frand(n, 2), fzero(n), frand(n, 1)};
        pw_loss(&c);
        double ref[37];
        for (int64_t i = 0; i < n; i++) {
            double x = c.x[i], y = c.y[i];
            if (op == 0)
                ref[i] = 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
            else if (op == 1)
                ref[i] = x / (1 + exp(-x)) * y;
            else if (op == 2)
                ref[i] = x + y;
            else
                ref[i] = pt_k_dropout_keep(42, 7, i, 0.3f) ? x / 0.7 : 0.0;
        }
        CHECK_ERR(names[op], nerr_f(c.out, ref, n), FWD_TOL);
        float *dx = fzero(n), *dy = fzero(n);
        if (op == 0)
            K->gelu_backward(K, dx, c.wts, c.x, n);
        else if (op == 1)
            K->swiglu_backward(K, dx, dy, c.wts, c.x, c.y, n, 1);
        else if (op == 2)
            K->residual_backward(K, dx, dy, c.wts, n);
        else
            K->dropout_backward(K, dx, c.wts, n, 0.3f, 42, 7, 0);
        CHECK_ERR(names[op], fd_error(pw_loss, &c, c.x, n, dx), FD_TOL);
        if (op == 1 || op == 2)
            CHECK_ERR(names[op], fd_error(pw_loss, &c, c.y, n, dy), FD_TOL);
        free(dx);
        free(dy);
        free(c.x);
        free(c.y);
        free(c.out);
        free(c.wts);
    }
}

/* ---- Embedding ------------------------------------------------------------------------------- */

typedef struct {
    int b, s, h, v, pos0;
    int32_t *tok;
    float *wte, *wpe, *out, *wts;
} emb_ctx;

static double emb_loss(void *p)
{
    emb_ctx *c = p;
    K->embed_forward(K, c->out, c->tok, c->wte, c->wpe, c->b, c->s, c->h, 0, c->v, c->pos0);
    return wsum(c->out, c->wts, (int64_t)c->b * c->s * c->h);
}

static void test_embed(void)
{
    int b = 2, s = 3, h = 5, v = 7, pos0 = 2, smax = 6;
    int32_t tok[6] = {3, 0, 6, 3, 3, 5}; /* repeated tokens accumulate */
    emb_ctx c = {b,        s,          h,           v,
                 pos0,     tok,        frand((int64_t)v * h, 1),
                 frand((int64_t)smax * h, 1), fzero(b * s * h), frand(b * s * h, 1)};
    emb_loss(&c);
    double ref[30];
    for (int i = 0; i < b * s; i++)
        for (int j = 0; j < h; j++)
            ref[i * h + j] = (double)c.wte[tok[i] * h + j] + c.wpe[(pos0 + i % s) * h + j];
    CHECK_ERR("embed forward", nerr_f(c.out, ref, b * s * h), FWD_TOL);
    float *dwte = fzero((int64_t)v * h), *dwpe = fzero((int64_t)smax * h);
    K->embed_backward(K, dwte, dwpe, c.wts, tok, b, s, h, 0, v, pos0);
    CHECK_ERR("embed dwte", fd_error(emb_loss, &c, c.wte, (int64_t)v * h, dwte), FD_TOL);
    CHECK_ERR("embed dwpe", fd_error(emb_loss, &c, c.wpe, (int64_t)smax * h, dwpe), FD_TOL);

    /* vocab-parallel: slices [0,3), [3,5), [5,7); wpe on the first rank only; the sum of
     * the partial outputs is the whole output, the slices of dwte are the whole dwte */
    int cuts[4] = {0, 3, 5, 7};
    float *sum = fzero(b * s * h), *part = fzero(b * s * h), *dpart = fzero((int64_t)v * h);
    for (int r = 0; r < 3; r++) {
        int v0 = cuts[r], vr = cuts[r + 1] - cuts[r];
        K->embed_forward(K, part, tok, c.wte + (int64_t)v0 * h, r == 0 ? c.wpe : NULL, b, s,
                         h, v0, vr, pos0);
        for (int i = 0; i < b * s * h; i++)
            sum[i] += part[i];
        K->embed_backward(K, dpart + (int64_t)v0 * h, NULL, c.wts, tok, b, s, h, v0, vr, pos0);
    }
    CHECK_ERR("embed vocab-parallel forward", nerr_ff(sum, c.out, b * s * h), FWD_TOL);
    CHECK(memcmp(dpart, dwte, sizeof(float) * v * h) == 0);
    free(sum);
    free(part);
    free(dpart);
    free(dwte);
    free(dwpe);
    free(c.wte);
    free(c.wpe);
    free(c.out);
    free(c.wts);
}

/* ---- RoPE ---------------------------------------------------------------------------------------- */

typedef struct {
    int b, s, nh, d, pos0;
    float *x, *out, *wts;
} rope_ctx;

static double rope_loss(void *p)
{
    rope_ctx *c = p;
    K->rope_forward(K, c->out, c->x, c->b, c->s, c->nh, c->d, c->pos0, 10000.0f);
    return wsum(c->out, c->wts, (int64_t)c->b * c->s * c->nh * c->d);
}

static void test_rope(void)
{
    int b = 2, s = 5, nh = 3, d = 6, pos0 = 4;
    int64_t n = (int64_t)b * s * nh * d;
    rope_ctx c = {b, s, nh, d, pos0, frand(n, 1), fzero(n), frand(n, 1)};
    rope_loss(&c);
    double *ref = calloc((size_t)n, sizeof(double));
    for (int bi = 0; bi < b; bi++)
        for (int si = 0; si < s; si++)
            for (int hi = 0; hi < nh; hi++)
                for (int i = 0; i < d / 2; i++) {
                    int64_t o = (((int64_t)bi * s + si) * nh + hi) * d + 2 * i;
                    double ang = (pos0 + si) * pow(10000.0, -2.0 * i / d);
                    ref[o] = c.x[o] * cos(ang) - c.x[o + 1] * sin(ang);
                    ref[o + 1] = c.x[o] * sin(ang) + c.x[o + 1] * cos(ang);
                }
    CHECK_ERR("rope forward", nerr_f(c.out, ref, n), FWD_TOL);
    float *dx = fzero(n);
    K->rope_backward(K, dx, c.wts, b, s, nh, d, pos0, 10000.0f);
    CHECK_ERR("rope backward", fd_error(rope_loss, &c, c.x, n, dx), FD_TOL);
    /* in place, and a chunk at pos0 + 2 rotates as rows 2.. of the whole */
    rope_loss(&c); /* out again from the unperturbed inputs */
    float *y = fcopy(c.x, n);
    K->rope_forward(K, y, y, b, s, nh, d, pos0, 10000.0f);
    CHECK(memcmp(y, c.out, sizeof(float) * n) == 0);
    float *chunk = fzero(n);
    K->rope_forward(K, chunk, c.x + 2 * nh * d, 1, 1, nh, d, pos0 + 2, 10000.0f); /* b0, row 2 */
    CHECK(memcmp(chunk, c.out + 2 * nh * d, sizeof(float) * nh * d) == 0);
    free(chunk);
    free(y);
    free(dx);
    free(ref);
    free(c.x);
    free(c.out);
    free(c.wts);
}

/* ---- Attention ---------------------------------------------------------------------------------- */

typedef struct {
    int b, sq, skv, a, kh, d, q0, k0, causal;
    float *q, *k, *v, *out, *lse, *wts;
} attn_ctx;

static double attn_loss(void *p)
{
    attn_ctx *c = p;
    K->attention_forward(K, c->out, c->lse, c->q, c->k, c->v, c->b, c->sq, c->skv, c->a,
                         c->kh, c->d, c->q0, c->k0, c->causal);
    return wsum(c->out, c->wts, (int64_t)c->b * c->sq * c->a * c->d);
}

/* the plain reference: whole score rows in double */
static void attn_ref(const attn_ctx *c, double *out, double *lse)
{
    int g = c->a / c->kh;
    double *sc = malloc(sizeof(double) * (size_t)(c->skv ? c->skv : 1));
    for (int bi = 0; bi < c->b; bi++)
        for (int h = 0; h < c->a; h++)
            for (int i = 0; i < c->sq; i++) {
                const float *qi = c->q + (((int64_t)bi * c->sq + i) * c->a + h) * c->d;
                double *oi = out + (((int64_t)bi * c->sq + i) * c->a + h) * c->d;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < c->skv; j++) {
                    const float *kj = c->k + (((int64_t)bi * c->skv + j) * c->kh + h / g) * c->d;
                    double s = 0;
                    for (int e = 0; e < c->d; e++)
                        s += (double)qi[e] * kj[e];
                    sc[j] = (!c->causal || c->k0 + j <= c->q0 + i) ? s / sqrt(c->d) : -INFINITY;
                    mx = fmax(mx, sc[j]);
                }
                for (int e = 0; e < c->d; e++)
                    oi[e] = 0;
                if (mx == -INFINITY) {
                    lse[((int64_t)bi * c->a + h) * c->sq + i] = -INFINITY;
                    continue;
                }
                for (int j = 0; j < c->skv; j++)
                    sum += exp(sc[j] - mx);
                for (int j = 0; j < c->skv; j++) {
                    const float *vj = c->v + (((int64_t)bi * c->skv + j) * c->kh + h / g) * c->d;
                    double pj = exp(sc[j] - mx) / sum;
                    for (int e = 0; e < c->d; e++)
                        oi[e] += pj * vj[e];
                }
                lse[((int64_t)bi * c->a + h) * c->sq + i] = mx + log(sum);
            }
    free(sc);
}

static attn_ctx attn_make(int b, int sq, int skv, int a, int kh, int d, int q0, int k0,
                          int causal)
{
    int64_t nq = (int64_t)b * sq * a * d, nk = (int64_t)b * skv * kh * d;
    attn_ctx c = {b,           sq,          skv,         a,        kh,
                  d,           q0,          k0,          causal,   frand(nq, 1),
                  frand(nk, 1), frand(nk, 1), fzero(nq), fzero((int64_t)b * a * sq),
                  frand(nq, 1)};
    return c;
}

static void attn_free(attn_ctx *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->out);
    free(c->lse);
    free(c->wts);
}

static void test_attention_shape(int b, int sq, int skv, int a, int kh, int d, int q0,
                                 int k0, int causal, int fd)
{
    attn_ctx c = attn_make(b, sq, skv, a, kh, d, q0, k0, causal);
    int64_t nq = (int64_t)b * sq * a * d, nk = (int64_t)b * skv * kh * d;
    int64_t nl = (int64_t)b * a * sq;
    attn_loss(&c);
    double *ref = calloc((size_t)nq, sizeof(double)), *lref = calloc((size_t)nl, sizeof(double));
    attn_ref(&c, ref, lref);
    char what[96];
    snprintf(what, sizeof what, "attention b%d sq%d skv%d a%d k%d d%d q0 %d k0 %d causal %d", b,
             sq, skv, a, kh, d, q0, k0, causal);
    CHECK_ERR(what, nerr_f(c.out, ref, nq), FWD_TOL);
    for (int64_t i = 0; i < nl; i++)
        CHECK(isinf(lref[i]) ? c.lse[i] == -INFINITY : fabs(c.lse[i] - lref[i]) < 1e-5);
    if (fd) {
        float *dq = fzero(nq), *dk = fzero(nk), *dv = fzero(nk);
        K->attention_backward(K, dq, dk, dv, c.wts, c.q, c.k, c.v, c.out, c.lse, b, sq, skv, a,
                              kh, d, q0, k0, causal, 1);
        /* accumulate = 0 writes over whatever the buffers held: the same bits as adding
         * into zeros (before the finite differences, which leave out and lse as their
         * last evaluation had them) */
        float *wq = fzero(nq), *wk = fzero(nk), *wv = fzero(nk);
        for (int64_t i = 0; i < nq; i++)
            wq[i] = 1e30f;
        for (int64_t i = 0; i < nk; i++)
            wk[i] = wv[i] = -1e30f;
        K->attention_backward(K, wq, wk, wv, c.wts, c.q, c.k, c.v, c.out, c.lse, b, sq, skv, a,
                              kh, d, q0, k0, causal, 0);
        CHECK(memcmp(wq, dq, (size_t)nq * sizeof(float)) == 0);
        CHECK(memcmp(wk, dk, (size_t)nk * sizeof(float)) == 0);
        CHECK(memcmp(wv, dv, (size_t)nk * sizeof(float)) == 0);
        free(wq);
        free(wk);
        free(wv);
        CHECK_ERR(what, fd_error(attn_loss, &c, c.q, nq, dq), FD_TOL);
        CHECK_ERR(what, fd_error(attn_loss, &c, c.k, nk, dk), FD_TOL);
        CHECK_ERR(what, fd_error(attn_loss, &c, c.v, nk, dv), FD_TOL);
        free(dq);
        free(dk);
        free(dv);
    }
    free(ref);
    free(lref);
    attn_free(&c);
}

/* Context parallelism: keys in blocks [0,5), [5,9), [9,s) combined in order equal the
 * whole; each block's backward (given the final out and lse) sums to the whole. */
static void test_attention_blocks(void)
{
    int b = 2, s = 13, a = 4, kh = 2, d = 4, cuts[4] = {0, 5, 9, 13};
    attn_ctx full = attn_make(b, s, s, a, kh, d, 0, 0, 1);
    int64_t nq = (int64_t)b * s * a * d, nk = (int64_t)b * s * kh * d, nl = (int64_t)b * a * s;
    attn_loss(&full);
    float *out = fzero(nq), *lse = fzero(nl), *o2 = fzero(nq), *l2 = fzero(nl);
    int rowk = kh * d;
    float *kb = fzero(nk), *vb = fzero(nk), *dkb = fzero(nk), *dvb = fzero(nk);
    for (int blk = 0; blk < 3; blk++) {
        int k0 = cuts[blk], skv = cuts[blk + 1] - cuts[blk];
        for (int bi = 0; bi < b; bi++) { /* this block's rows of k and v, contiguous */
            memcpy(kb + (int64_t)bi * skv * rowk, full.k + ((int64_t)bi * s + k0) * rowk,
                   sizeof(float) * skv * rowk);
            memcpy(vb + (int64_t)bi * skv * rowk, full.v + ((int64_t)bi * s + k0) * rowk,
                   sizeof(float) * skv * rowk);
        }
        float *o = blk ? o2 : out, *l = blk ? l2 : lse;
        K->attention_forward(K, o, l, full.q, kb, vb, b, s, skv, a, kh, d, 0, k0, 1);
        if (blk)
            K->attention_combine(K, out, lse, o2, l2, b, s, a, d);
    }
    CHECK_ERR("attention blocks combined", nerr_ff(out, full.out, nq), FWD_TOL);
    CHECK_ERR("attention blocks lse", nerr_ff(lse, full.lse, nl), FWD_TOL);

    float *dq = fzero(nq), *dk = fzero(nk), *dv = fzero(nk), *dq2 = fzero(nq);
    float *dk2 = fzero(nk), *dv2 = fzero(nk);
    K->attention_backward(K, dq, dk, dv, full.wts, full.q, full.k, full.v, full.out, full.lse,
                          b, s, s, a, kh, d, 0, 0, 1, 1);
    for (int blk = 0; blk < 3; blk++) {
        int k0 = cuts[blk], skv = cuts[blk + 1] - cuts[blk];
        for (int bi = 0; bi < b; bi++) {
            memcpy(kb + (int64_t)bi * skv * rowk, full.k + ((int64_t)bi * s + k0) * rowk,
                   sizeof(float) * skv * rowk);
            memcpy(vb + (int64_t)bi * skv * rowk, full.v + ((int64_t)bi * s + k0) * rowk,
                   sizeof(float) * skv * rowk);
        }
        memset(dkb, 0, sizeof(float) * nk);
        memset(dvb, 0, sizeof(float) * nk);
        K->attention_backward(K, dq2, dkb, dvb, full.wts, full.q, kb, vb, out, lse, b, s, skv,
                              a, kh, d, 0, k0, 1, 1);
        for (int bi = 0; bi < b; bi++)
            for (int64_t i = 0; i < (int64_t)skv * rowk; i++) {
                dk2[((int64_t)bi * s + k0) * rowk + i] = dkb[(int64_t)bi * skv * rowk + i];
                dv2[((int64_t)bi * s + k0) * rowk + i] = dvb[(int64_t)bi * skv * rowk + i];
            }
    }
    CHECK_ERR("attention blocks dq", nerr_ff(dq2, dq, nq), 1e-5);
    CHECK_ERR("attention blocks dk", nerr_ff(dk2, dk, nk), 1e-5);
    CHECK_ERR("attention blocks dv", nerr_ff(dv2, dv, nk), 1e-5);
    free(dq);
    free(dk);
    free(dv);
    free(dq2);
    free(dk2);
    free(dv2);
    free(kb);
    free(vb);
    free(dkb);
    free(dvb);
    free(out);
    free(lse);
    free(o2);
    free(l2);
    attn_free(&full);
}

static void test_attention(void)
{
    test_attention_shape(2, 5, 5, 4, 2, 3, 0, 0, 1, 1);   /* GQA, odd sizes */
    test_attention_shape(1, 1, 1, 1, 1, 4, 0, 0, 1, 1);   /* s = 1, one head */
    test_attention_shape(1, 6, 6, 3, 1, 2, 0, 0, 0, 1);   /* MQA, not causal */
    test_attention_shape(1, 4, 7, 2, 2, 3, 3, 0, 1, 1);   /* queries [3,7) of keys [0,7) */
    test_attention_shape(1, 3, 4, 2, 1, 2, 0, 2, 1, 1);   /* keys after some queries: empty rows */
    test_attention_shape(2, 70, 70, 2, 1, 8, 0, 0, 1, 0); /* more rows than a block */
    test_attention_shape(1, 67, 67, 1, 1, 2, 0, 0, 1, 1); /* FD across the block edge */
    test_attention_blocks();
}

/* ---- Cross-entropy -------------------------------------------------------------------------------- */

typedef struct {
    int64_t n;
    int v;
    float *logits, *losses;
    int32_t *tgt;
} ce_ctx;

static double ce_loss(void *p)
{
    ce_ctx *c = p;
    K->crossentropy(K, c->losses, NULL, c->logits, c->tgt, c->n, c->v, 1.0f);
    double s = 0;
    for (int64_t i = 0; i < c->n; i++)
        s += c->losses[i];
    return s;
}

static void test_crossentropy(void)
{
    int64_t n = 5;
    int v = 11;
    int32_t tgt[5] = {3, 0, 10, -1, 7};
    ce_ctx c = {n, v, frand(n * v, 4), fzero(n), tgt};
    ce_loss(&c);
    double ref[5];
    for (int64_t r = 0; r < n; r++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < v; j++)
            mx = fmax(mx, c.logits[r * v + j]);
        for (int j = 0; j < v; j++)
            s += exp(c.logits[r * v + j] - mx);
        ref[r] = tgt[r] < 0 ? 0.0 : log(s) + mx - c.logits[r * v + tgt[r]];
    }
    CHECK_ERR("crossentropy loss", nerr_f(c.losses, ref, n), FWD_TOL);
    float *dl = fzero(n * v), *losses = fzero(n);
    K->crossentropy(K, losses, dl, c.logits, tgt, n, v, 1.0f);
    CHECK_ERR("crossentropy dlogits", fd_error(ce_loss, &c, c.logits, n * v, dl), FD_TOL);
    /* in place: dlogits over the logits, scaled by dloss */
    float *inplace = fcopy(c.logits, n * v);
    K->crossentropy(K, losses, inplace, inplace, tgt, n, v, 0.25f);
    for (int64_t i = 0; i < n * v; i++)
        CHECK(fabsf(inplace[i] - 0.25f * dl[i]) <= 1e-7f);

    /* vocab-parallel: three slices [0,4), [4,9), [9,11), combined by hand as the
     * runtime's all-reduces would */
    int cuts[4] = {0, 4, 9, 11};
    float gmax[5], gsum[5] = {0}, gtgt[5] = {0}, lm[5], ls[5], lt[5];
    float *slice[3];
    for (int r = 0; r < 3; r++) {
        int vr = cuts[r + 1] - cuts[r];
        slice[r] = fzero(n * vr);
        for (int64_t i = 0; i < n; i++)
            memcpy(slice[r] + i * vr, c.logits + i * v + cuts[r], sizeof(float) * vr);
    }
    for (int64_t i = 0; i < n; i++)
        gmax[i] = -INFINITY;
    for (int r = 0; r < 3; r++) {
        K->ce_local_max(K, lm, slice[r], n, cuts[r + 1] - cuts[r]);
        for (int64_t i = 0; i < n; i++)
            gmax[i] = fmaxf(gmax[i], lm[i]);
    }
    for (int r = 0; r < 3; r++) {
        K->ce_local_sumexp(K, ls, slice[r], gmax, n, cuts[r + 1] - cuts[r]);
        K->ce_local_target(K, lt, slice[r], tgt, n, cuts[r + 1] - cuts[r], cuts[r]);
        for (int64_t i = 0; i < n; i++) {
            gsum[i] += ls[i];
            gtgt[i] += lt[i];
        }
    }
    for (int r = 0; r < 3; r++) {
        int vr = cuts[r + 1] - cuts[r];
        float *dls = fzero(n * vr), lvp[5];
        K->ce_finalize(K, lvp, dls, slice[r], tgt, gmax, gsum, gtgt, n, vr, cuts[r], 1.0f);
        CHECK_ERR("vocab-parallel loss", nerr_ff(lvp, losses, n), 1e-6);
        for (int64_t i = 0; i < n; i++)
            for (int j = 0; j < vr; j++)
                CHECK(fabsf(dls[i * vr + j] - dl[i * v + cuts[r] + j]) <= 1e-6f);
        free(dls);
        free(slice[r]);
    }
    free(inplace);
    free(dl);
    free(losses);
    free(c.logits);
    free(c.losses);
}

/* ---- Optimizer, norm, conversions, RNG ---------------------------------------------------------------- */

static void test_adamw(void)
{
    int64_t n = 9;
    float *p = frand(n, 1), *g = frand(n, 1), *m = fzero(n), *v = fzero(n);
    uint16_t bf[9];
    double rp[9], rm[9] = {0}, rv[9] = {0};
    for (int64_t i = 0; i < n; i++)
        rp[i] = p[i];
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
    for (int step = 1; step <= 3; step++) {
        K->adamw(K, p, bf, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd,
                 step, (float)gs);
        for (int64_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
            rp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
        }
    }
    CHECK_ERR("adamw params", nerr_f(p, rp, n), 1e-5);
    CHECK_ERR("adamw m", nerr_f(m, rm, n), 1e-5);
    CHECK_ERR("adamw v", nerr_f(v, rv, n), 1e-5);
    for (int64_t i = 0; i < n; i++)
        CHECK(bf[i] == pt_k_bf16_from_f32(p[i]));
    free(p);
    free(g);
    free(m);
    free(v);
}

static void test_norm_clip(void)
{
    float x[4] = {3, -4, 0, 12};
    CHECK(K->sumsq(K, x, 4) == 169.0);
    CHECK(K->sumsq(K, x, 0) == 0.0);
    CHECK(pt_k_clip_scale(13.0, 1.0) == (float)(1.0 / (13.0 + 1e-6)));
    CHECK(pt_k_clip_scale(0.5, 1.0) == 1.0f);
    CHECK(pt_k_clip_scale(100.0, 0.0) == 1.0f);
}

/* sumsq_acc adds exactly sumsq's double: from 0 one call gives it to the bit, and
 * several accumulate in call order; sizes cover one block, a partial block, and more
 * block sums than pt_kcpu_sumsq keeps on its stack. */
static void test_sumsq_acc(void)
{
    int64_t sizes[] = {1, 1000, 100003, 1100000};
    double acc_all = 0.0, want_all = 0.0;
    for (int c = 0; c < 4; c++) {
        int64_t n = sizes[c];
        float *x = frand(n, 3);
        double want = K->sumsq(K, x, n), acc = 0.0;
        K->sumsq_acc(K, x, n, &acc);
        CHECK(memcmp(&acc, &want, sizeof acc) == 0);
        K->sumsq_acc(K, x, n, &acc_all);
        want_all += want;
        free(x);
    }
    CHECK(memcmp(&acc_all, &want_all, sizeof acc_all) == 0);
    double acc = 5.0;
    K->sumsq_acc(K, NULL, 0, &acc);
    CHECK(acc == 5.0);
}

/* One adamw_multi over several tensors (empty, one element, sizes that are no
 * multiple of anything, with and without the bf16 copy, each with its weight decay)
 * against adamw on copies of each tensor with grad_scale = pt_k_clip_scale(
 * sqrt(sumsq / copies), max_norm) computed here: bit-identical, over two steps. */
enum { MT = 5 };

typedef struct {
    float *p, *g, *m, *v;
    uint16_t *bf;
    int64_t n;
} mt_buf;

static void mt_make(mt_buf *b, const mt_buf *from, int64_t n, int with_bf16)
{
    b->n = n;
    b->p = from ? fcopy(from->p, n) : frand(n, 1);
    b->g = from ? fcopy(from->g, n) : frand(n, 1);
    b->m = from ? fcopy(from->m, n) : frand(n, 0.1);
    b->v = from ? fcopy(from->v, n) : frand(n, 0.01);
    if (!from)
        for (int64_t i = 0; i < n; i++)
            b->v[i] = fabsf(b->v[i]);
    b->bf = with_bf16 ? calloc((size_t)(n ? n : 1), sizeof(uint16_t)) : NULL;
}

static int mt_same(const mt_buf *a, const mt_buf *b)
{
    size_t fb = (size_t)a->n * sizeof(float);
    return !memcmp(a->p, b->p, fb) && !memcmp(a->m, b->m, fb) && !memcmp(a->v, b->v, fb) &&
           (!a->bf || !memcmp(a->bf, b->bf, (size_t)a->n * sizeof(uint16_t)));
}

static void mt_free(mt_buf *b)
{
    free(b->p);
    free(b->g);
    free(b->m);
    free(b->v);
    free(b->bf);
}

/* returns the grad_scale the multi form was checked against */
static float check_adamw_multi(double max_norm, double copies, double sumsq)
{
    const int64_t sizes[MT] = {0, 1, 1001, 77, 40000};
    const float wd[MT] = {0.1f, 0.0f, 0.1f, 0.0f, 0.05f};
    mt_buf multi[MT], single[MT];
    pt_k_adamw_tensor t[MT];
    for (int i = 0; i < MT; i++) {
        mt_make(&multi[i], NULL, sizes[i], i % 2 == 0);
        mt_make(&single[i], &multi[i], sizes[i], i % 2 == 0);
        t[i] = (pt_k_adamw_tensor){multi[i].p, multi[i].bf, multi[i].g, multi[i].m,
                                   multi[i].v, sizes[i], wd[i]};
    }
    pt_k_adamw_args a = {3e-4f, 0.9f, 0.95f, 1e-8f, 0, max_norm, &sumsq, copies};
    float scale = pt_k_clip_scale(sqrt(sumsq / copies), max_norm);
    for (int step = 1; step <= 2; step++) {
        a.step = step;
        K->adamw_multi(K, t, MT, &a);
        for (int i = 0; i < MT; i++)
            K->adamw(K, single[i].p, single[i].bf, single[i].g, single[i].m, single[i].v,
                     sizes[i], a.lr, a.beta1, a.beta2, a.eps, wd[i], step, scale);
    }
    for (int i = 0; i < MT; i++) {
        CHECK(mt_same(&multi[i], &single[i]));
        mt_free(&multi[i]);
        mt_free(&single[i]);
    }
    return scale;
}

static void test_adamw_multi(void)
{
    /* clipping: norm sqrt(400/4) = 10 against 1 */
    float s = check_adamw_multi(1.0, 4.0, 400.0);
    CHECK(s == (float)(1.0 / (10.0 + 1e-6)));
    /* a norm below max_norm, clipping off (sumsq not read), one copy */
    CHECK(check_adamw_multi(20.0, 2.0, 400.0) == 1.0f);
    CHECK(check_adamw_multi(0.0, 1.0, 1e30) == 1.0f);
    pt_k_adamw_args off = {1e-2f, 0.9f, 0.95f, 1e-8f, 1, 0.0, NULL, 1.0};
    float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
    pt_k_adamw_tensor one = {&p, NULL, &g, &m, &v, 1, 0.0f};
    K->adamw_multi(K, &one, 1, &off); /* max_norm 0: sumsq NULL is not read */
    CHECK(p < 1.0f && m > 0.0f && v > 0.0f);
    K->adamw_multi(K, NULL, 0, &off);
    /* the CPU backend reserves nothing */
    pt_k_scratch_shape shape = {.rows = 1024, .cols = 768, .heads = 12, .vocab_rows = 50257,
                                .adamw_tensors = 100};
    CHECK(K->scratch_bytes == NULL && K->reserve == NULL);
    CHECK(pt_k_scratch_bytes(K, &shape) == 0);
    CHECK(K->sync(K) == 0);
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16(void)
{
    struct { uint32_t in; uint16_t out; } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1 */
        {0x3f808000u, 0x3f80}, /* tie, even stays */
        {0x3f818000u, 0x3f82}, /* tie, odd rounds up */
        {0x3f808001u, 0x3f81}, /* above the tie */
        {0xc0490fdbu, 0xc049}, /* -pi */
        {0x7f800000u, 0x7f80}, /* +inf */
        {0xff800000u, 0xff80}, /* -inf */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to inf */
        {0x80000000u, 0x8000}, /* -0 */
        {0x00000001u, 0x0000}, /* smallest subnormal rounds to 0 */
        {0x7fc00000u, 0x7fc0}, /* quiet NaN */
        {0x7f800001u, 0x7fc0}, /* signalling NaN with a low payload stays NaN */
        {0xffffffffu, 0xffff}, /* negative NaN */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_INT(pt_k_bf16_from_f32(bitsf(cases[i].in)), cases[i].out);
    CHECK(fbits(pt_k_f32_from_bf16(0x3f80)) == 0x3f800000u);
    CHECK(isnan(pt_k_f32_from_bf16(0x7fc0)));
    CHECK(isinf(pt_k_f32_from_bf16(0xff80)));
    float src[3] = {1.0f, -2.5f, bitsf(0x7f800001u)}, back[3];
    uint16_t mid[3];
    K->f32_to_bf16(K, mid, src, 3);
    K->bf16_to_f32(K, back, mid, 3);
    CHECK(back[0] == 1.0f && back[1] == -2.5f && isnan(back[2]));
}

/* The FP8 value nearest to x among all 256 codes (ties to the even code, whose
 * mantissa's last bit is 0), saturated to the largest finite value: a brute-force
 * reference for pt_kfp8_from_f32. */
static float fp8_nearest(float x, pt_kfp8 f)
{
    float best = 0.0f, max = pt_kfp8_max(f);
    double bd = INFINITY;
    int bcode = 0;
    if (x > max)
        x = max;
    if (x < -max)
        x = -max;
    for (int q = 0; q < 256; q++) {
        float v = pt_kfp8_to_f32((uint8_t)q, f);
        if (!isfinite(v))
            continue;
        double d = fabs((double)v - (double)x);
        if (d < bd || (d == bd && (q & 1) == 0 && (bcode & 1))) {
            bd = d;
            best = v;
            bcode = q;
        }
    }
    return best;
}

/* FP8: the formats' rounding against known codes and a brute-force nearest value;
 * cast (scale, transpose, amax, saturation and underflow counts), the two scaling
 * recipes, and the GEMM against a double-precision sum of the decoded operands. */
static void test_fp8(void)
{
    struct { float in; pt_kfp8 f; uint8_t out; } cases[] = {
        {1.0f, PT_KFP8_E4M3, 0x38},      {448.0f, PT_KFP8_E4M3, 0x7E},
        {500.0f, PT_KFP8_E4M3, 0x7E},    {-448.0f, PT_KFP8_E4M3, 0xFE},
        {464.0f, PT_KFP8_E4M3, 0x7E},    {INFINITY, PT_KFP8_E4M3, 0x7E},
        {0x1p-9f, PT_KFP8_E4M3, 0x01},   {0x1p-10f, PT_KFP8_E4M3, 0x00},
        {0x1.8p-10f, PT_KFP8_E4M3, 0x01}, {1.0625f, PT_KFP8_E4M3, 0x38},
        {1.1875f, PT_KFP8_E4M3, 0x3A},   {0x1p-6f, PT_KFP8_E4M3, 0x08},
        {-0.0f, PT_KFP8_E4M3, 0x80},     {NAN, PT_KFP8_E4M3, 0x7F},
        {1.0f, PT_KFP8_E5M2, 0x3C},      {57344.0f, PT_KFP8_E5M2, 0x7B},
        {1e6f, PT_KFP8_E5M2, 0x7B},      {0x1p-16f, PT_KFP8_E5M2, 0x01},
        {1.125f, PT_KFP8_E5M2, 0x3C},    {1.375f, PT_KFP8_E5M2, 0x3E},
        {-INFINITY, PT_KFP8_E5M2, 0xFB},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_INT(pt_kfp8_from_f32(cases[i].in, cases[i].f), cases[i].out);
    CHECK(pt_kfp8_to_f32(0x7E, PT_KFP8_E4M3) == 448.0f && isnan(pt_kfp8_to_f32(0xFF, PT_KFP8_E4M3)));
    CHECK(isinf(pt_kfp8_to_f32(0x7C, PT_KFP8_E5M2)) && pt_kfp8_to_f32(0x01, PT_KFP8_E5M2) == 0x1p-16f);
    for (int f = 0; f < 2; f++) {
        for (int q = 0; q < 256; q++) { /* every finite code round-trips */
            float v = pt_kfp8_to_f32((uint8_t)q, (pt_kfp8)f);
            if (isfinite(v))
                CHECK_INT(pt_kfp8_from_f32(v, (pt_kfp8)f), q);
        }
        uint64_t st = 12345;
        for (int i = 0; i < 20000; i++) { /* values over the whole range, and the ties */
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            float x = ldexpf((float)(st >> 40) / (float)(1 << 24), (int)(st % 40) - 20);
            if (i % 4 == 0) /* the midpoint of two neighbouring codes */
                x = 0.5f * (pt_kfp8_to_f32((uint8_t)(st % 120), (pt_kfp8)f) +
                            pt_kfp8_to_f32((uint8_t)(st % 120 + 1), (pt_kfp8)f));
            if (st & 1)
                x = -x;
            float got = pt_kfp8_to_f32(pt_kfp8_from_f32(x, (pt_kfp8)f), (pt_kfp8)f);
            if (got != fp8_nearest(x, (pt_kfp8)f)) {
                fprintf(stderr, "fp8 %d: %a -> %a, nearest %a\n", f, x, got,
                        fp8_nearest(x, (pt_kfp8)f));
                CHECK(0);
                break;
            }
        }
    }

    /* cast: 2 x 3 with scale 2, one value saturating, one flushed, transposed too */
    float meta[PT_KFP8_META + 4] = {0};
    meta[PT_KFP8_SCALE] = 2.0f;
    float src[6] = {1.0f, -300.0f, 0x1p-12f, 0.0f, 3.0f, -0.75f};
    uint8_t q[6], qt[6];
    K->fp8_cast(K, q, qt, src, 2, 3, PT_KFP8_E4M3, meta);
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++) {
            CHECK_INT(q[r * 3 + c], pt_kfp8_from_f32(2.0f * src[r * 3 + c], PT_KFP8_E4M3));
            CHECK_INT(qt[c * 2 + r], q[r * 3 + c]);
        }
    CHECK(pt_kfp8_to_f32(q[1], PT_KFP8_E4M3) == -448.0f);
    CHECK(meta[PT_KFP8_AMAX] == 300.0f);
    CHECK(meta[PT_KFP8_OVER] == 1.0f && meta[PT_KFP8_UNDER] == 1.0f);
    K->fp8_cast(K, NULL, qt, src, 2, 3, PT_KFP8_E4M3, meta); /* counts accumulate */
    CHECK(meta[PT_KFP8_OVER] == 2.0f && meta[PT_KFP8_UNDER] == 2.0f);
    /* 450 rounds to 448 (no saturation counted), 464 would round past it (counted) */
    float edge[2] = {225.0f, 232.0f};
    K->fp8_cast(K, q, NULL, edge, 1, 2, PT_KFP8_E4M3, meta);
    CHECK(meta[PT_KFP8_OVER] == 3.0f && q[0] == 0x7E && q[1] == 0x7E);

    /* current scaling: scale = 448 / amax; the amax is consumed */
    float cur[PT_KFP8_META] = {0};
    K->fp8_amax(K, cur, src, 6);
    CHECK(cur[PT_KFP8_AMAX] == 300.0f);
    K->fp8_scale(K, cur, PT_KFP8_E4M3, 0, 0.0f);
    CHECK(cur[PT_KFP8_SCALE] == 448.0f / 300.0f && cur[PT_KFP8_AMAX] == 0.0f);
    CHECK(cur[PT_KFP8_SCALE_INV] == 1.0f / (448.0f / 300.0f));
    K->fp8_scale(K, cur, PT_KFP8_E5M2, 0, 0.0f); /* amax 0: scale 1 */
    CHECK(cur[PT_KFP8_SCALE] == 1.0f && cur[PT_KFP8_SCALE_INV] == 1.0f);
    /* delayed scaling over a history of 4: the largest of the last four amaxes */
    float del[PT_KFP8_META + 4] = {0};
    float seen[6] = {8.0f, 2.0f, 1.0f, 1.0f, 1.0f, 4.0f}, want[6] = {8, 8, 8, 8, 2, 4};
    for (int i = 0; i < 6; i++) {
        del[PT_KFP8_AMAX] = seen[i];
        K->fp8_scale(K, del, PT_KFP8_E4M3, 4, 1.0f); /* margin 1: half the range */
        CHECK(del[PT_KFP8_SCALE] == 448.0f / want[i] / 2.0f);
        CHECK(del[PT_KFP8_META] == seen[i]);
    }

    /* gemm_fp8: c (3, 2) = a (3, 4) · b (2, 4)^T · sa · sb + bias, then beta = 1 */
    uint8_t a8[12], b8[8];
    for (int i = 0; i < 12; i++)
        a8[i] = pt_kfp8_from_f32((float)(i - 5) * 0.375f, PT_KFP8_E4M3);
    for (int i = 0; i < 8; i++)
        b8[i] = pt_kfp8_from_f32((float)(3 - i) * 1.5f, PT_KFP8_E5M2);
    float ma[PT_KFP8_META] = {0}, mb[PT_KFP8_META] = {0};
    ma[PT_KFP8_SCALE_INV] = 0.25f;
    mb[PT_KFP8_SCALE_INV] = 3.0f;
    float bias[2] = {0.5f, -1.0f}, c[6], c2[6];
    for (int i = 0; i < 6; i++)
        c[i] = 100.0f; /* beta 0 ignores it */
    K->gemm_fp8(K, c, 0, 0.0f, a8, PT_KFP8_E4M3, ma, b8, PT_KFP8_E5M2, mb, bias, 3, 2, 4);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            double sum = 0;
            for (int k = 0; k < 4; k++)
                sum += (double)pt_kfp8_to_f32(a8[i * 4 + k], PT_KFP8_E4M3) *
                       pt_kfp8_to_f32(b8[j * 4 + k], PT_KFP8_E5M2);
            double w = sum * 0.25 * 3.0 + bias[j];
            CHECK(fabs(c[i * 2 + j] - w) <= 1e-5 * (fabs(w) + 1));
            c2[i * 2 + j] = c[i * 2 + j];
        }
    K->gemm_fp8(K, c, 1, 1.0f, a8, PT_KFP8_E4M3, ma, b8, PT_KFP8_E5M2, mb, NULL, 3, 2, 4);
    for (int i = 0; i < 6; i++)
        CHECK(fabsf(c[i] - (2.0f * c2[i] - bias[i % 2])) <= 1e-5f * (fabsf(c[i]) + 1));
    CHECK(K->sync(K) == 0);
}

/* add_f32: dst += src element by element, src untouched */
/* The fused ops equal, to the bit, the separate ops they stand for: GEMM then GELU,
 * GEMM then the residual add, the data gradient then the GELU's backward into zeroed
 * buffers, the residual add then the norm (in place on either input too). */
static void test_fused(void)
{
    const int64_t n = 37;
    const int ic = 24, oc = 40, h = 48;
    float *inp = frand(n * ic, 1.0), *w = frand((int64_t)oc * ic, 0.3), *bias = frand(oc, 0.2);
    float *out = fzero(n * oc), *pre = fzero(n * oc), *want_pre = fzero(n * oc),
          *want_out = fzero(n * oc);
    K->matmul_forward_gelu(K, out, pre, inp, w, bias, n, ic, oc);
    K->matmul_forward(K, want_pre, inp, w, bias, n, ic, oc);
    K->gelu_forward(K, want_out, want_pre, n * oc);
    CHECK(memcmp(pre, want_pre, (size_t)(n * oc) * sizeof(float)) == 0);
    CHECK(memcmp(out, want_out, (size_t)(n * oc) * sizeof(float)) == 0);
    K->matmul_forward_gelu(K, out, pre, inp, w, NULL, n, ic, oc);
    K->matmul_forward(K, want_pre, inp, w, NULL, n, ic, oc);
    CHECK(memcmp(pre, want_pre, (size_t)(n * oc) * sizeof(float)) == 0);

    /* the GEMM with the residual add: the product, then residual_forward, with and
     * without a bias (out starts as garbage: written) */
    float *res = frand(n * oc, 1.0);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        float *got = frand(n * oc, 5.0), *want = fzero(n * oc);
        const float *bv = with_bias ? bias : NULL;
        K->matmul_forward_res(K, got, inp, w, bv, res, n, ic, oc);
        K->matmul_forward(K, want, inp, w, bv, n, ic, oc);
        K->residual_forward(K, want, want, res, n * oc);
        CHECK(memcmp(got, want, (size_t)(n * oc) * sizeof(float)) == 0);
        K->matmul_forward(K, got, inp, w, bv, n, ic, oc); /* res did reach it */
        CHECK(memcmp(got, want, (size_t)(n * oc) * sizeof(float)) != 0);
        free(got);
        free(want);
    }
    free(res);

    /* the written data gradient: matmul_backward's dinp into zeros (dinp starts as
     * garbage); the layers of one input one call at a time, with and without biases
     * (the weight and bias gradients add to what they held) */
    {
        float *g = frand(n * oc, 1.0), *got = frand(n * ic, 5.0), *want = fzero(n * ic);
        K->matmul_dgrad(K, got, g, w, n, ic, oc);
        K->matmul_backward(K, want, NULL, NULL, g, NULL, w, n, ic, oc);
        CHECK(memcmp(got, want, (size_t)(n * ic) * sizeof(float)) == 0);
        enum { S = 3 };
        float *outs = frand(S * n * oc, 5.0), *ws = frand(S * (int64_t)oc * ic, 0.3);
        float *bs = frand(S * oc, 0.2), *sep = fzero(n * oc);
        float *dws = frand(S * (int64_t)oc * ic, 1.0), *dbs = frand(S * oc, 1.0);
        float *dw0 = fcopy(dws, S * (int64_t)oc * ic), *db0 = fcopy(dbs, S * oc);
        float *o[S], *dw[S], *db[S];
        const float *wp[S], *bp[S], *gp[S];
        for (int i = 0; i < S; i++) {
            o[i] = outs + i * n * oc;
            wp[i] = ws + (int64_t)i * oc * ic;
            bp[i] = bs + i * oc;
            dw[i] = dws + (int64_t)i * oc * ic;
            db[i] = dbs + i * oc;
            gp[i] = outs + i * n * oc; /* the outputs as the gradients below */
        }
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            K->matmul_forward_shared(K, S, o, inp, wp, with_bias ? bp : NULL, n, ic, oc);
            for (int i = 0; i < S; i++) {
                K->matmul_forward(K, sep, inp, wp[i], with_bias ? bp[i] : NULL, n, ic, oc);
                CHECK(memcmp(o[i], sep, (size_t)(n * oc) * sizeof(float)) == 0);
            }
        }
        K->matmul_wgrad_shared(K, S, dw, db, gp, inp, n, ic, oc);
        for (int i = 0; i < S; i++) {
            float *wdw = dw0 + (int64_t)i * oc * ic, *wdb = db0 + i * oc;
            K->matmul_backward(K, NULL, wdw, wdb, gp[i], inp, NULL, n, ic, oc);
            CHECK(memcmp(dw[i], wdw, (size_t)oc * ic * sizeof(float)) == 0);
            CHECK(memcmp(db[i], wdb, (size_t)oc * sizeof(float)) == 0);
        }
        free(g); free(got); free(want); free(outs); free(ws); free(bs); free(sep);
        free(dws); free(dbs); free(dw0); free(db0);
    }

    /* backward of a layer (oc2 = ic outputs) reading gelu(pre), pre (n, oc) */
    float *dout = frand(n * ic, 1.0), *dpre = frand(n * oc, 5.0); /* garbage: written */
    float *dact = fzero(n * oc), *want_dpre = fzero(n * oc), *w2 = frand((int64_t)ic * oc, 0.3);
    K->matmul_backward_dgelu(K, dpre, dout, w2, pre, n, oc, ic);
    K->matmul_backward(K, dact, NULL, NULL, dout, NULL, w2, n, oc, ic);
    K->gelu_backward(K, want_dpre, dact, pre, n * oc);
    CHECK(memcmp(dpre, want_dpre, (size_t)(n * oc) * sizeof(float)) == 0);
    double nz = 0;
    for (int64_t i = 0; i < n * oc; i++)
        nz += fabs(dpre[i]);
    CHECK(nz > 0);

    for (int rms = 0; rms < 2; rms++)
        for (int place = 0; place < 3; place++) { /* res apart, res = inp1, res = inp2 */
            float *a = frand(n * h, 1.0), *b = frand(n * h, 1.0), *nw = frand(h, 1.0),
                  *nb = frand(h, 0.5);
            float *a0 = fcopy(a, n * h), *b0 = fcopy(b, n * h), *sep = fzero(n * h);
            float *res = place == 1 ? a : place == 2 ? b : sep;
            float *o = fzero(n * h), *mean = fzero(n), *rstd = fzero(n);
            float *wres = fzero(n * h), *wo = fzero(n * h), *wmean = fzero(n), *wrstd = fzero(n);
            if (rms)
                K->residual_rmsnorm_forward(K, res, o, rstd, a, b, nw, n, h, 1e-5f);
            else
                K->residual_layernorm_forward(K, res, o, mean, rstd, a, b, nw, nb, n, h, 1e-5f);
            K->residual_forward(K, wres, a0, b0, n * h);
            if (rms)
                K->rmsnorm_forward(K, wo, wrstd, wres, nw, n, h, 1e-5f);
            else
                K->layernorm_forward(K, wo, wmean, wrstd, wres, nw, nb, n, h, 1e-5f);
            CHECK(memcmp(res, wres, (size_t)(n * h) * sizeof(float)) == 0);
            CHECK(memcmp(o, wo, (size_t)(n * h) * sizeof(float)) == 0);
            CHECK(memcmp(rstd, wrstd, (size_t)n * sizeof(float)) == 0);
            CHECK(rms || memcmp(mean, wmean, (size_t)n * sizeof(float)) == 0);
            float *all[] = {a, b, nw, nb, a0, b0, sep, o, mean, rstd, wres, wo, wmean, wrstd};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                free(all[i]);
        }
    float *all[] = {inp, w, bias, out, pre, want_pre, want_out, dout, dpre, dact, want_dpre, w2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static void test_add_f32(void)
{
    float dst[4] = {1.0f, -2.0f, 0.5f, 3.0f}, src[4] = {0.25f, 2.0f, -0.5f, 1e-8f};
    K->add_f32(K, dst, src, 4);
    CHECK(dst[0] == 1.25f && dst[1] == 0.0f && dst[2] == 0.0f && dst[3] == 3.0f + 1e-8f);
    CHECK(src[0] == 0.25f && src[3] == 1e-8f);
    K->add_f32(K, dst, src, 0);
    CHECK(dst[0] == 1.25f);
}

static void test_philox_dropout(void)
{
    /* known-answer vectors of Random123 (kat_vectors, philox4x32 10) */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        pt_k_philox4x32_10(kat[t], kat[t] + 4, out);
        for (int i = 0; i < 4; i++)
            CHECK_INT(out[i], kat[t][6 + i]);
    }
    /* a slice's mask is the slice of the whole mask, at any offset */
    int64_t n = 1001;
    float *ones = fzero(n), *full = fzero(n), *part = fzero(n);
    for (int64_t i = 0; i < n; i++)
        ones[i] = 1.0f;
    K->dropout_forward(K, full, ones, n, 0.25f, 1234, 99, 0);
    int64_t cuts[4] = {0, 3, 514, 1001};
    for (int r = 0; r < 3; r++)
        K->dropout_forward(K, part + cuts[r], ones, cuts[r + 1] - cuts[r], 0.25f, 1234, 99,
                           cuts[r]);
    CHECK(memcmp(part, full, sizeof(float) * n) == 0);
    int kept = 0;
    for (int64_t i = 0; i < n; i++)
        kept += full[i] != 0.0f;
    CHECK(kept > 700 && kept < 800); /* 75% of 1001 = 751, sd 14 */
    /* another tensor id or seed gives another mask */
    K->dropout_forward(K, part, ones, n, 0.25f, 1234, 100, 0);
    CHECK(memcmp(part, full, sizeof(float) * n) != 0);
    free(ones);
    free(full);
    free(part);
}

/* ---- Determinism ---------------------------------------------------------------------------------------------- */

static void test_determinism(void)
{
    int b = 2, s = 150, a = 4, kh = 2, d = 16;
    attn_ctx c = attn_make(b, s, s, a, kh, d, 0, 0, 1);
    int64_t nq = (int64_t)b * s * a * d, nk = (int64_t)b * s * kh * d;
    float *res[2][4];
    for (int run = 0; run < 2; run++) {
        attn_loss(&c);
        res[run][0] = fcopy(c.out, nq);
        res[run][1] = fzero(nq);
        res[run][2] = fzero(nk);
        res[run][3] = fzero(nk);
        K->attention_backward(K, res[run][1], res[run][2], res[run][3], c.wts, c.q, c.k, c.v,
                              c.out, c.lse, b, s, s, a, kh, d, 0, 0, 1, 1);
    }
    CHECK(memcmp(res[0][0], res[1][0], sizeof(float) * nq) == 0);
    CHECK(memcmp(res[0][1], res[1][1], sizeof(float) * nq) == 0);
    CHECK(memcmp(res[0][2], res[1][2], sizeof(float) * nk) == 0);
    CHECK(memcmp(res[0][3], res[1][3], sizeof(float) * nk) == 0);
    for (int run = 0; run < 2; run++)
        for (int i = 0; i < 4; i++)
            free(res[run][i]);
    attn_free(&c);

    int64_t n = 300;
    int ic = 257, oc = 129;
    float *x = frand(n * ic, 1), *w = frand((int64_t)oc * ic, 1), *o[2], *dw[2];
    for (int run = 0; run < 2; run++) {
        o[run] = fzero(n * oc);
        dw[run] = fzero((int64_t)oc * ic);
        K->matmul_forward(K, o[run], x, w, NULL, n, ic, oc);
        K->matmul_backward(K, NULL, dw[run], NULL, o[run], x, w, n, ic, oc);
    }
    CHECK(memcmp(o[0], o[1], sizeof(float) * n * oc) == 0);
    CHECK(memcmp(dw[0], dw[1], sizeof(float) * oc * ic) == 0);
    for (int run = 0; run < 2; run++) {
        free(o[run]);
        free(dw[run]);
    }
    free(x);
    free(w);
}

/* The driver's release from /proc/driver/nvidia/version's first line, as the CUDA
 * backend reads it into kn->about: both kernel modules' wordings, and lines without one. */
static void test_driver_release(void)
{
    char out[32];
    CHECK_INT(pt_nvidia_driver_release("NVRM version: NVIDIA UNIX x86_64 Kernel Module  "
                                       "580.159.04  Release Build  (dvs-builder@U16)  Thu\n"
                                       "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
                                       out, sizeof out), 0);
    CHECK(strcmp(out, "580.159.04") == 0);
    CHECK_INT(pt_nvidia_driver_release("NVRM version: NVIDIA UNIX Open Kernel Module for "
                                       "x86_64  550.54.15  Release Build", out, sizeof out), 0);
    CHECK(strcmp(out, "550.54.15") == 0);
    /* the second line's "12.2.0" is not the driver's */
    CHECK_INT(pt_nvidia_driver_release("NVRM version: unknown\ngcc 12.2.0\n", out, sizeof out),
              -1);
    CHECK(out[0] == '\0');
    CHECK_INT(pt_nvidia_driver_release("x86_64 9. .5 1..", out, sizeof out), -1);
    CHECK_INT(pt_nvidia_driver_release("Module 580.159.04", out, 6), -1); /* does not fit */
    CHECK(out[0] == '\0');
    CHECK_INT(pt_nvidia_driver_release(NULL, out, sizeof out), -1);
}

static void test_backend(void)
{
    CHECK(strcmp(K->name, "cpu") == 0);
    CHECK(K->act_dtype == PT_KDTYPE_F32);
    CHECK(pt_kdtype_bytes(PT_KDTYPE_BF16) == 2 && pt_kdtype_bytes(PT_KDTYPE_F32) == 4);
    CHECK(strcmp(pt_kdtype_name(PT_KDTYPE_BF16), "bf16") == 0);
    float *p = K->alloc(K, 10 * sizeof(float)), h[10], back[10];
    CHECK(p && ((uintptr_t)p % 64) == 0);
    for (int i = 0; i < 10; i++)
        h[i] = (float)i;
    K->copy(K, p, h, sizeof h, PT_KCOPY_H2D);
    K->zero(K, p, 2 * sizeof(float));
    K->copy(K, back, p, sizeof back, PT_KCOPY_D2H);
    CHECK(back[0] == 0.0f && back[1] == 0.0f && back[9] == 9.0f);
    K->free(K, p);
    CHECK(K->sync(K) == 0);
    char err[128] = "";
    pt_kernels *cuda = pt_kernels_cuda(0, err, sizeof err);
    if (cuda)
        pt_kernels_destroy(cuda);
    else
        CHECK(err[0] != '\0');
    pt_kernels_destroy(NULL);
}

/* copy_rows gathers strided pieces: a (4, 5) block of a (6, 8) table into a (4, 5) one,
 * and leaves the bytes between pieces alone. */
static void test_copy_rows(void)
{
    float src[6 * 8], dst[4 * 7];
    for (int i = 0; i < 6 * 8; i++)
        src[i] = (float)i;
    for (int i = 0; i < 4 * 7; i++)
        dst[i] = -1;
    K->copy_rows(K, dst, 7 * sizeof(float), src + 8 + 2, 8 * sizeof(float), 5 * sizeof(float),
                 4);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 7; c++)
            CHECK(dst[r * 7 + c] == (c < 5 ? (float)((r + 1) * 8 + 2 + c) : -1.0f));
}

int main(void)
{
    K = pt_kernels_cpu(1);
    if (!K) {
        fprintf(stderr, "test_kernels: pt_kernels_cpu failed\n");
        return 1;
    }
    test_backend();
    test_copy_rows();
    test_driver_release();
    test_matmul();
    test_norms();
    test_pointwise();
    test_embed();
    test_rope();
    test_attention();
    test_crossentropy();
    test_adamw();
    test_norm_clip();
    test_sumsq_acc();
    test_adamw_multi();
    test_bf16();
    test_fp8();
    test_add_f32();
    test_fused();
    test_philox_dropout();
    test_determinism();
    pt_kernels_destroy(K);
    return pt_check_result();
}
