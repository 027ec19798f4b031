/*
 * Tests of the CPU backend's mixture-of-experts ops (kernels.h, "Mixture of experts"):
 * each against a plain reference written here (double precision where sums are
 * involved), the router's backward against central finite differences of a scalar loss
 * through the router's forward, the dispatch plan against a naive per-expert scan
 * (ties, capacity drops that leave tokens with no slot, experts with no tokens), and the
 * grouped linear layers against matmul_forward / matmul_backward on each group's rows,
 * to the bit, with an empty group whose weight gradient must stay untouched.
 *
 * Finite differences as test_kernels.c takes them: L = Σ_{t,j} c[t,j]·w[t,j] +
 * Σ_{t,e} a[e]·s[t,e] (so dw = c and aux_g = a), each logit moved by ±eps = 1e-2 (the
 * step actually taken is the difference of the two fp32 values), the forward rerun and
 * L summed in double; the error max_i |fd_i - grad_i| / max(max_i |grad_i|, 1e-3) must
 * stay below 1e-3. Logits within a row are at least 1/16 apart, so a step of 1e-2 never
 * changes which experts are chosen (checked).
 *
 * PT_TEST_VERBOSE=1 prints every measured error.
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

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static double urand(void) /* uniform in [-1, 1), xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
    return (double)(r >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static int irand(int n) { return (int)((urand() + 1.0) * 0.5 * n) % n; }

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "test_kernels_moe: out of memory\n");
        exit(1);
    }
    return p;
}

static float *frand(int64_t n, double scale)
{
    float *x = xcalloc((size_t)n, sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(urand() * scale);
    return x;
}

static float *fdup(const float *x, int64_t n)
{
    float *y = xcalloc((size_t)n, sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* max_i |got_i - want_i| / max(max_i |want_i|, floor) */
static double nerr(const float *got, const double *want, int64_t n, double floor)
{
    double e = 0.0, m = floor;
    for (int64_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)got[i] - want[i]));
        m = fmax(m, fabs(want[i]));
    }
    return e / m;
}

static void check_err(const char *what, double err, double tol)
{
    if (getenv("PT_TEST_VERBOSE"))
        printf("%-48s %.2e (tol %.0e)\n", what, err, tol);
    if (!(err <= tol)) {
        fprintf(stderr, "%s: error %.3g > %.3g\n", what, err, tol);
        pt_check_failures++;
    }
}

/* Logits whose rows hold distinct multiples of 1/16 (a shuffled ramp of E steps,
 * centred), so that no two experts of a row are within 1/16 of each other. */
static float *ramp_logits(int64_t n, int E)
{
    float *x = xcalloc((size_t)(n * E), sizeof(float));
    for (int64_t t = 0; t < n; t++) {
        float *row = x + t * E;
        for (int e = 0; e < E; e++)
            row[e] = (float)(e - E / 2) * 0.0625f * 2.0f;
        for (int e = E - 1; e > 0; e--) { /* Fisher–Yates */
            int r = irand(e + 1);
            float tmp = row[e];
            row[e] = row[r];
            row[r] = tmp;
        }
    }
    return x;
}

/* ---- Router ------------------------------------------------------------------------ */

/* the reference scores of one row, in double */
static void ref_scores(double *s, const float *x, int E, int score)
{
    if (score == PT_KMOE_SIGMOID) {
        for (int e = 0; e < E; e++)
            s[e] = 1.0 / (1.0 + exp(-(double)x[e]));
        return;
    }
    double mx = x[0], sum = 0.0;
    for (int e = 1; e < E; e++)
        mx = fmax(mx, x[e]);
    for (int e = 0; e < E; e++)
        sum += s[e] = exp(x[e] - mx);
    for (int e = 0; e < E; e++)
        s[e] /= sum;
}

/* the reference choice: both scores are increasing in the logit, so the top k of a row
 * are its k largest logits, ties to the lower index */
static void ref_topk(int32_t *idx, const float *x, int E, int k)
{
    int prev = -1;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int after_prev = prev < 0 || x[e] < x[prev] || (x[e] == x[prev] && e > prev);
            int better = best < 0 || x[e] > x[best] || (x[e] == x[best] && e < best);
            if (after_prev && better)
                best = e;
        }
        idx[j] = best;
        prev = best;
    }
}

static void route_forward_case(int64_t n, int E, int k, int score, int renorm,
                               const float *logits)
{
    float *scores = xcalloc((size_t)(n * E), sizeof(float));
    float *w = xcalloc((size_t)(n * k), sizeof(float));
    int32_t *idx = xcalloc((size_t)(n * k), sizeof(int32_t));
    double *rs = xcalloc((size_t)(n * E), sizeof(double));
    double *rw = xcalloc((size_t)(n * k), sizeof(double));
    int32_t *ridx = xcalloc((size_t)(n * k), sizeof(int32_t));
    K->moe_route_forward(K, scores, idx, w, logits, n, E, k, score, renorm);
    CHECK(K->sync(K) == 0);
    for (int64_t t = 0; t < n; t++) {
        ref_scores(rs + t * E, logits + t * E, E, score);
        ref_topk(ridx + t * k, logits + t * E, E, k);
        double sum = 0.0;
        for (int j = 0; j < k; j++)
            sum += rw[t * k + j] = rs[t * E + ridx[t * k + j]];
        for (int j = 0; j < k && renorm; j++)
            rw[t * k + j] /= sum;
    }
    char what[128];
    snprintf(what, sizeof what, "route_forward n=%lld E=%d k=%d %s%s scores", (long long)n,
             E, k, score == PT_KMOE_SIGMOID ? "sigmoid" : "softmax", renorm ? " renorm" : "");
    check_err(what, nerr(scores, rs, n * E, 1e-6), FWD_TOL);
    CHECK(memcmp(idx, ridx, (size_t)(n * k) * sizeof(int32_t)) == 0);
    snprintf(what, sizeof what, "route_forward n=%lld E=%d k=%d %s%s w", (long long)n, E, k,
             score == PT_KMOE_SIGMOID ? "sigmoid" : "softmax", renorm ? " renorm" : "");
    check_err(what, nerr(w, rw, n * k, 1e-6), FWD_TOL);
    /* the weights are the chosen scores (renormalised): the same floats when not */
    for (int64_t t = 0; t < n && !renorm; t++)
        for (int j = 0; j < k; j++)
            CHECK(w[t * k + j] == scores[t * E + idx[t * k + j]]);
    free(scores);
    free(w);
    free(idx);
    free(rs);
    free(rw);
    free(ridx);
}

static void test_route_forward(void)
{
    for (int score = 0; score < 2; score++)
        for (int renorm = 0; renorm < 2; renorm++) {
            float *x = ramp_logits(13, 8);
            route_forward_case(13, 8, 3, score, renorm, x);
            free(x);
            x = ramp_logits(5, 7);
            route_forward_case(5, 7, 7, score, renorm, x); /* k = E */
            route_forward_case(5, 7, 1, score, renorm, x);
            free(x);
        }
    /* ties: equal logits go to the lower expert, in any position of the row */
    float tie[4 * 6] = {
        0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f,   /* all equal: 0, 1, 2 */
        -1.f, 2.0f, 0.0f, 2.0f, 0.0f, 2.0f,   /* 1, 3, 5 */
        1.0f, 0.0f, 1.0f, 3.0f, 0.0f, 0.0f,   /* 3, 0, 2 */
        -2.f, -2.f, -3.f, -1.f, -2.f, -4.f,   /* 3, 0, 1 */
    };
    const int32_t want[4 * 3] = {0, 1, 2, 1, 3, 5, 3, 0, 2, 3, 0, 1};
    for (int score = 0; score < 2; score++) {
        float scores[4 * 6], w[4 * 3];
        int32_t idx[4 * 3];
        K->moe_route_forward(K, scores, idx, w, tie, 4, 6, 3, score, 1);
        CHECK(memcmp(idx, want, sizeof want) == 0);
        route_forward_case(4, 6, 3, score, 1, tie);
        /* renormalised weights of a row sum to 1 */
        for (int t = 0; t < 4; t++)
            CHECK_NEAR(w[t * 3] + w[t * 3 + 1] + w[t * 3 + 2], 1.0, 1e-6);
    }
}

/* L = Σ c·w + Σ a·s over the op's forward, in double */
static double route_loss(const float *logits, int64_t n, int E, int k, int score, int renorm,
                         const float *c, const float *a, const int32_t *want_idx, int *same)
{
    float *s = xcalloc((size_t)(n * E), sizeof(float)), *w = xcalloc((size_t)(n * k), 4);
    int32_t *idx = xcalloc((size_t)(n * k), sizeof(int32_t));
    K->moe_route_forward(K, s, idx, w, logits, n, E, k, score, renorm);
    double L = 0.0;
    for (int64_t i = 0; i < n * k; i++)
        L += (double)c[i] * w[i];
    for (int64_t t = 0; t < n && a; t++)
        for (int e = 0; e < E; e++)
            L += (double)a[e] * s[t * E + e];
    if (want_idx && memcmp(idx, want_idx, (size_t)(n * k) * sizeof(int32_t)))
        *same = 0;
    free(s);
    free(w);
    free(idx);
    return L;
}

static void route_backward_case(int64_t n, int E, int k, int score, int renorm, int aux)
{
    float *x = ramp_logits(n, E), *c = frand(n * k, 1.0), *a = aux ? frand(E, 1.0) : NULL;
    float *s = xcalloc((size_t)(n * E), sizeof(float)), *w = xcalloc((size_t)(n * k), 4);
    int32_t *idx = xcalloc((size_t)(n * k), sizeof(int32_t));
    K->moe_route_forward(K, s, idx, w, x, n, E, k, score, renorm);
    /* dlogits is written: start from garbage */
    float *dl = frand(n * E, 100.0);
    K->moe_route_backward(K, dl, c, a, s, idx, w, n, E, k, score, renorm);
    CHECK(K->sync(K) == 0);
    double *fd = xcalloc((size_t)(n * E), sizeof(double));
    int same = 1;
    for (int64_t i = 0; i < n * E; i++) {
        float x0 = x[i];
        float xp = x[i] = (float)(x0 + FD_EPS);
        double lp = route_loss(x, n, E, k, score, renorm, c, a, idx, &same);
        float xm = x[i] = (float)(x0 - FD_EPS);
        double lm = route_loss(x, n, E, k, score, renorm, c, a, idx, &same);
        x[i] = x0;
        fd[i] = (lp - lm) / ((double)xp - (double)xm);
    }
    CHECK(same); /* the choice stayed put, so the differences see one smooth function */
    char what[128];
    snprintf(what, sizeof what, "route_backward n=%lld E=%d k=%d %s%s%s", (long long)n, E, k,
             score == PT_KMOE_SIGMOID ? "sigmoid" : "softmax", renorm ? " renorm" : "",
             aux ? " aux" : "");
    /* measured as test_kernels.c does: against the analytic gradient's scale */
    double e = 0.0, m = 1e-3;
    for (int64_t i = 0; i < n * E; i++) {
        e = fmax(e, fabs(fd[i] - dl[i]));
        m = fmax(m, fabs((double)dl[i]));
    }
    check_err(what, e / m, FD_TOL);
    free(x);
    free(c);
    free(a);
    free(s);
    free(w);
    free(idx);
    free(dl);
    free(fd);
}

static void test_route_backward(void)
{
    for (int score = 0; score < 2; score++)
        for (int renorm = 0; renorm < 2; renorm++)
            for (int aux = 0; aux < 2; aux++) {
                route_backward_case(6, 8, 2, score, renorm, aux);
                route_backward_case(3, 5, 5, score, renorm, aux); /* k = E */
            }
    /* k = 1 with renorm: w = 1 whatever the logits, so only aux_g moves them */
    route_backward_case(4, 6, 1, PT_KMOE_SOFTMAX, 1, 0);
    route_backward_case(4, 6, 1, PT_KMOE_SIGMOID, 1, 1);
}

static void test_score_colsum(void)
{
    const int64_t n = 37;
    const int E = 11;
    float *s = frand(n * E, 1.0), out[11];
    double want[11] = {0};
    for (int64_t t = 0; t < n; t++)
        for (int e = 0; e < E; e++)
            want[e] += s[t * E + e];
    memset(out, 0xff, sizeof out); /* written, not added */
    K->moe_score_colsum(K, out, s, n, E);
    CHECK(K->sync(K) == 0);
    check_err("score_colsum", nerr(out, want, E, 1e-6), 1e-7);
    K->moe_score_colsum(K, out, s, 0, E);
    for (int e = 0; e < E; e++)
        CHECK(out[e] == 0.0f);
    free(s);
}

/* ---- Dispatch ---------------------------------------------------------------------- */

/* The reference plan: expert by expert, a scan of the assignments in flattened order. */
static void ref_plan(int32_t *pos, int32_t *src, int64_t *counts, const int32_t *idx,
                     int64_t n, int E, int k, int64_t cap)
{
    int64_t row = 0;
    for (int e = 0; e < E; e++) {
        int64_t seen = 0;
        counts[e] = 0;
        for (int64_t f = 0; f < n * k; f++) {
            if (idx[f] != e)
                continue;
            if (cap < 0 || seen < cap) {
                pos[f] = (int32_t)row;
                src[row++] = (int32_t)(f / k);
                counts[e]++;
            } else {
                pos[f] = -1;
            }
            seen++;
        }
    }
}

/* runs the plan and compares it with the reference; returns the rows kept */
static int64_t plan_case(const char *what, const int32_t *idx, int64_t n, int E, int k,
                         int64_t cap)
{
    const int64_t nk = n * k;
    int32_t *pos = xcalloc((size_t)nk, 4), *src = xcalloc((size_t)nk, 4);
    int32_t *rpos = xcalloc((size_t)nk, 4), *rsrc = xcalloc((size_t)nk, 4);
    int64_t *counts = xcalloc((size_t)E, 8), *rcounts = xcalloc((size_t)E, 8);
    memset(pos, 0x5a, (size_t)nk * 4); /* every entry written */
    memset(counts, 0x5a, (size_t)E * 8);
    K->moe_dispatch_plan(K, pos, src, counts, idx, n, E, k, cap);
    CHECK(K->sync(K) == 0);
    ref_plan(rpos, rsrc, rcounts, idx, n, E, k, cap);
    int64_t m = 0;
    for (int e = 0; e < E; e++)
        m += rcounts[e];
    int ok = memcmp(pos, rpos, (size_t)nk * 4) == 0 && memcmp(src, rsrc, (size_t)m * 4) == 0 &&
             memcmp(counts, rcounts, (size_t)E * 8) == 0;
    if (!ok)
        fprintf(stderr, "dispatch_plan %s (capacity %lld): differs from the reference\n", what,
                (long long)cap);
    CHECK(ok);
    /* and the plan's own invariants: each row [0, m) named by exactly one pos, src its
     * token */
    int *hits = xcalloc((size_t)(m ? m : 1), sizeof(int));
    for (int64_t f = 0; f < nk; f++) {
        CHECK(pos[f] >= -1 && pos[f] < m);
        if (pos[f] >= 0) {
            hits[pos[f]]++;
            CHECK(src[pos[f]] == f / k);
        }
    }
    for (int64_t r = 0; r < m; r++)
        CHECK(hits[r] == 1);
    free(hits);
    free(pos);
    free(src);
    free(rpos);
    free(rsrc);
    free(counts);
    free(rcounts);
    return m;
}

static void test_dispatch_plan(void)
{
    /* 7 tokens, 5 experts, k = 2; expert 3 gets no token; expert 0 is wanted by five
     * tokens, expert 4 by four. Capacity 2: tokens 4 and 5 lose both slots. */
    const int32_t idx[7 * 2] = {0, 1, 4, 0, 2, 0, 4, 1, 0, 4, 4, 0, 2, 1};
    CHECK_INT(plan_case("hand", idx, 7, 5, 2, -1), 14);
    CHECK_INT(plan_case("hand", idx, 7, 5, 2, 2), 2 + 2 + 2 + 0 + 2);
    CHECK_INT(plan_case("hand", idx, 7, 5, 2, 0), 0);
    CHECK_INT(plan_case("hand", idx, 7, 5, 2, 100), 14);
    {
        int32_t pos[14], src[14];
        int64_t counts[5];
        K->moe_dispatch_plan(K, pos, src, counts, idx, 7, 5, 2, 2);
        const int64_t want_counts[5] = {2, 2, 2, 0, 2};
        CHECK(memcmp(counts, want_counts, sizeof want_counts) == 0);
        /* expert 0's rows: token 0 slot 0, token 1 slot 1 (flattened order) */
        CHECK_INT(pos[0], 0);
        CHECK_INT(pos[3], 1);
        CHECK_INT(pos[5], -1); /* token 2's expert 0: third in line */
        /* token 4 (experts 0 and 4) and token 5 (4 and 0) are fully dropped */
        CHECK_INT(pos[8], -1);
        CHECK_INT(pos[9], -1);
        CHECK_INT(pos[10], -1);
        CHECK_INT(pos[11], -1);
        CHECK_INT(src[6], 1); /* expert 4: tokens 1 and 3 */
        CHECK_INT(src[7], 3);
    }
    /* random plans over sizes that are no multiple of anything, many ties per expert */
    for (int c = 0; c < 4; c++) {
        const int64_t n = 53 + 17 * c;
        const int E = 3 + 4 * c, k = 1 + c % 3;
        int32_t *r = xcalloc((size_t)(n * k), 4);
        for (int64_t t = 0; t < n; t++) /* distinct experts within a token, as top-k */
            for (int j = 0; j < k; j++) {
                int e, dup;
                do {
                    e = irand(E - 1); /* expert E-1 never chosen */
                    dup = 0;
                    for (int i = 0; i < j; i++)
                        dup |= r[t * k + i] == e;
                } while (dup);
                r[t * k + j] = e;
            }
        const int64_t caps[] = {-1, 0, 1, 5, n * k};
        for (int i = 0; i < 5; i++)
            plan_case("random", r, n, E, k, caps[i]);
        free(r);
    }
    /* no tokens: counts are zeroed */
    int64_t counts[3] = {7, 7, 7};
    K->moe_dispatch_plan(K, NULL, NULL, counts, NULL, 0, 3, 2, -1);
    CHECK(counts[0] == 0 && counts[1] == 0 && counts[2] == 0);
}

/* ---- Gather and combine ------------------------------------------------------------ */

typedef struct {
    int64_t n, m;
    int E, k;
    int32_t *idx, *pos, *src;
    int64_t *counts;
} plan;

/* A plan with capacity drops: tokens 0..3 all want experts 0 and 1, so with capacity 3
 * token 3 loses both slots; the others share experts 2..E-1 (E >= 4). */
static plan make_plan(int64_t n, int E, int k, int64_t cap)
{
    plan p = {.n = n, .E = E, .k = k};
    p.idx = xcalloc((size_t)(n * k), 4);
    p.pos = xcalloc((size_t)(n * k), 4);
    p.src = xcalloc((size_t)(n * k), 4);
    p.counts = xcalloc((size_t)E, 8);
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < k; j++)
            p.idx[t * k + j] = t < 4 ? j : 2 + (int32_t)((t + j) % (E - 2));
    K->moe_dispatch_plan(K, p.pos, p.src, p.counts, p.idx, n, E, k, cap);
    for (int e = 0; e < E; e++)
        p.m += p.counts[e];
    return p;
}

static void free_plan(plan *p)
{
    free(p->idx);
    free(p->pos);
    free(p->src);
    free(p->counts);
}

static void test_gather_combine(void)
{
    const int h = 13;
    plan p = make_plan(11, 5, 2, 3);
    const int64_t n = p.n, m = p.m;
    const int k = p.k;
    int dropped = 0, fully = 0;
    for (int64_t t = 0; t < n; t++) {
        int d = 0;
        for (int j = 0; j < k; j++)
            d += p.pos[t * k + j] < 0;
        dropped += d;
        fully += d == k;
    }
    CHECK(fully >= 1 && dropped > fully * k && m == n * k - dropped && m > 0);

    /* gather: an exact copy of each source row */
    float *x = frand(n * h, 1.0), *out = frand(m * h, 1.0);
    K->moe_gather_rows(K, out, x, p.src, m, h);
    for (int64_t i = 0; i < m; i++)
        CHECK(memcmp(out + i * h, x + (int64_t)p.src[i] * h, (size_t)h * 4) == 0);

    /* gather backward: dx[t] += Σ_j dout[pos[t,j]] */
    float *dout = frand(m * h, 1.0), *dx = frand(n * h, 1.0);
    double *want = xcalloc((size_t)(n * h), sizeof(double));
    for (int64_t i = 0; i < n * h; i++)
        want[i] = dx[i];
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < k; j++)
            for (int c = 0; c < h && p.pos[t * k + j] >= 0; c++)
                want[t * h + c] += dout[(int64_t)p.pos[t * k + j] * h + c];
    K->moe_gather_rows_backward(K, dx, dout, p.pos, n, k, h);
    check_err("gather_rows_backward", nerr(dx, want, n * h, 1e-6), FWD_TOL);

    /* combine forward: out[t] = Σ_j w·y[pos], written (0 for a fully dropped token) */
    float *y = frand(m * h, 1.0), *w = frand(n * k, 1.0), *comb = frand(n * h, 100.0);
    memset(want, 0, (size_t)(n * h) * sizeof(double));
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < k; j++)
            for (int c = 0; c < h && p.pos[t * k + j] >= 0; c++)
                want[t * h + c] += (double)w[t * k + j] * y[(int64_t)p.pos[t * k + j] * h + c];
    K->moe_combine_forward(K, comb, y, p.pos, w, n, k, h);
    check_err("combine_forward", nerr(comb, want, n * h, 1e-6), FWD_TOL);
    for (int64_t t = 0; t < n; t++) {
        int all = 1;
        for (int j = 0; j < k; j++)
            all &= p.pos[t * k + j] < 0;
        for (int c = 0; c < h && all; c++)
            CHECK(comb[t * h + c] == 0.0f);
    }

    /* combine backward: dy[pos] = w·dout[t], dw = dout[t]·y[pos], both written */
    float *dcomb = frand(n * h, 1.0), *dy = frand(m * h, 100.0), *dw = frand(n * k, 100.0);
    double *wdy = xcalloc((size_t)(m * h), sizeof(double)), *wdw = xcalloc((size_t)(n * k), 8);
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            const int32_t r = p.pos[t * k + j];
            for (int c = 0; c < h && r >= 0; c++) {
                wdy[(int64_t)r * h + c] = (double)w[t * k + j] * dcomb[t * h + c];
                wdw[t * k + j] += (double)dcomb[t * h + c] * y[(int64_t)r * h + c];
            }
        }
    K->moe_combine_backward(K, dy, dw, dcomb, y, p.pos, w, n, k, h);
    check_err("combine_backward dy", nerr(dy, wdy, m * h, 1e-6), FWD_TOL);
    check_err("combine_backward dw", nerr(dw, wdw, n * k, 1e-6), FWD_TOL);
    for (int64_t f = 0; f < n * k; f++)
        if (p.pos[f] < 0)
            CHECK(dw[f] == 0.0f);

    /* dy is the adjoint of the combine in y: <dcomb, combine(y)> = <dy, y> */
    double lhs = 0.0, rhs = 0.0;
    for (int64_t i = 0; i < n * h; i++)
        lhs += (double)dcomb[i] * comb[i];
    for (int64_t i = 0; i < m * h; i++)
        rhs += (double)dy[i] * y[i];
    CHECK_NEAR(lhs, rhs, 1e-5);
    CHECK(K->sync(K) == 0);
    free(x);
    free(out);
    free(dout);
    free(dx);
    free(want);
    free(y);
    free(w);
    free(comb);
    free(dcomb);
    free(dy);
    free(dw);
    free(wdy);
    free(wdw);
    free_plan(&p);
}

/* ---- Grouped linear layers --------------------------------------------------------- */

static void test_grouped_matmul(void)
{
    enum { G = 5, IC = 7, OC = 6 };
    const int64_t counts[G] = {3, 0, 5, 1, 0}; /* empty groups inside and at the end */
    int64_t m = 0;
    for (int g = 0; g < G; g++)
        m += counts[g];
    float *inp = frand(m * IC, 1.0), *w = frand((int64_t)G * OC * IC, 1.0);
    float *out = frand(m * OC, 1.0), *want = xcalloc((size_t)(m * OC), 4);
    K->matmul_grouped_forward(K, out, inp, w, counts, G, IC, OC);
    /* to the bit: matmul_forward on each group's rows */
    int64_t row = 0;
    for (int g = 0; g < G; g++) {
        if (counts[g])
            K->matmul_forward(K, want + row * OC, inp + row * IC, w + (int64_t)g * OC * IC,
                              NULL, counts[g], IC, OC);
        row += counts[g];
    }
    CHECK(memcmp(out, want, (size_t)(m * OC) * 4) == 0);
    /* and right: a double product */
    double *ref = xcalloc((size_t)(m * OC), sizeof(double));
    row = 0;
    for (int g = 0; g < G; row += counts[g], g++)
        for (int64_t r = row; r < row + counts[g]; r++)
            for (int o = 0; o < OC; o++)
                for (int i = 0; i < IC; i++)
                    ref[r * OC + o] += (double)inp[r * IC + i] * w[((int64_t)g * OC + o) * IC + i];
    check_err("matmul_grouped_forward", nerr(out, ref, m * OC, 1e-6), FWD_TOL);
    free(ref);

    /* backward: dinp and dw accumulate, per group as matmul_backward; empty groups'
     * dw untouched */
    float *dout = frand(m * OC, 1.0);
    float *dinp = frand(m * IC, 1.0), *dw = frand((int64_t)G * OC * IC, 1.0);
    float *dinp2 = fdup(dinp, m * IC), *dw2 = fdup(dw, (int64_t)G * OC * IC);
    float *dw0 = fdup(dw, (int64_t)G * OC * IC);
    K->matmul_grouped_backward(K, dinp, dw, dout, inp, w, counts, G, IC, OC);
    row = 0;
    for (int g = 0; g < G; g++) {
        const int64_t wo = (int64_t)g * OC * IC;
        if (counts[g])
            K->matmul_backward(K, dinp2 + row * IC, dw2 + wo, NULL, dout + row * OC,
                               inp + row * IC, w + wo, counts[g], IC, OC);
        row += counts[g];
    }
    CHECK(memcmp(dinp, dinp2, (size_t)(m * IC) * 4) == 0);
    CHECK(memcmp(dw, dw2, (size_t)G * OC * IC * 4) == 0);
    CHECK(memcmp(dw + 1 * OC * IC, dw0 + 1 * OC * IC, (size_t)OC * IC * 4) == 0);
    CHECK(memcmp(dw + 4 * OC * IC, dw0 + 4 * OC * IC, (size_t)OC * IC * 4) == 0);
    CHECK(memcmp(dw + 2 * OC * IC, dw0 + 2 * OC * IC, (size_t)OC * IC * 4) != 0);
    /* one of the two gradients alone gives the same bits for it */
    float *dw3 = fdup(dw0, (int64_t)G * OC * IC);
    K->matmul_grouped_backward(K, NULL, dw3, dout, inp, w, counts, G, IC, OC);
    CHECK(memcmp(dw3, dw2, (size_t)G * OC * IC * 4) == 0);
    CHECK(K->sync(K) == 0);
    free(inp);
    free(w);
    free(out);
    free(want);
    free(dout);
    free(dinp);
    free(dw);
    free(dinp2);
    free(dw2);
    free(dw0);
    free(dw3);
}

int main(void)
{
    K = pt_kernels_cpu(1);
    if (!K) {
        fprintf(stderr, "test_kernels_moe: pt_kernels_cpu failed\n");
        return 1;
    }
    test_route_forward();
    test_route_backward();
    test_score_colsum();
    test_dispatch_plan();
    test_gather_combine();
    test_grouped_matmul();
    pt_kernels_destroy(K);
    return pt_check_result();
}
