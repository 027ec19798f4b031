/*
 * test_kernels_cuda's mixture-of-experts cases (test_kernels_cuda.c says what the
 * program checks and how): the router forward and backward (softmax and sigmoid,
 * renormalised or not, with and without the load-balancing gradient), the column sum of
 * the scores, the dispatch plan, the row gather and the combine with their backwards,
 * and the grouped linear layers, each on the CPU and twice on the GPU.
 * Expert choices, plans and gathered rows must equal the CPU's bits: the logits of a row
 * are distinct multiples of 1/8 (exact in bf16), so no two scores are near a tie, and
 * rows with exactly equal logits check that ties go to the lower expert on both. The
 * grouped layers include groups of no rows, whose weight gradient must stay as it was.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_kernels_cuda.h"

/* Rows of distinct multiples of 1/8 in a shuffled order, centred; every fifth row has
 * groups of exactly equal logits instead (ties). */
static float *moe_logits(int64_t n, int E)
{
    float *x = xmalloc((size_t)(n * E) * sizeof(float));
    for (int64_t t = 0; t < n; t++) {
        float *row = x + t * E;
        for (int e = 0; e < E; e++)
            row[e] = t % 5 == 4 ? (float)((e * 7) % 3) * 0.5f - 0.5f
                                : (float)(e - E / 2) * (E > 64 ? 0.0625f : 0.125f);
        for (int e = E - 1; e > 0 && t % 5 != 4; e--) {
            int r = (int)((urand() + 1.0) * 0.5 * (e + 1)) % (e + 1);
            float tmp = row[e];
            row[e] = row[r];
            row[r] = tmp;
        }
    }
    return x;
}

/* k distinct experts per token from [0, E - 1): expert E - 1 never chosen */
static int32_t *moe_idx(int64_t n, int E, int k)
{
    int32_t *idx = xmalloc((size_t)(n * k) * sizeof(int32_t));
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = (int)((urand() + 1.0) * 0.5 * (E - 1)) % (E - 1);
                dup = 0;
                for (int i = 0; i < j; i++)
                    dup |= idx[t * k + i] == e;
            } while (dup);
            idx[t * k + j] = e;
        }
    return idx;
}

typedef struct {
    int64_t n, capacity;
    int E, k, h, score, renorm, aux;
} moe_arg;

/* ---- Router ------------------------------------------------------------------------------ */

static void op_route_forward(pt_kernels *kn, void **b, const void *p)
{
    const moe_arg *a = p;
    kn->moe_route_forward(kn, F(b[0]), (int32_t *)b[1], F(b[2]), CF(b[3]), a->n, a->E, a->k,
                          a->score, a->renorm);
}

static void op_route_backward(pt_kernels *kn, void **b, const void *p)
{
    const moe_arg *a = p;
    kn->moe_route_backward(kn, F(b[0]), CF(b[1]), a->aux ? CF(b[2]) : NULL, CF(b[3]),
                           (const int32_t *)b[4], CF(b[5]), a->n, a->E, a->k, a->score,
                           a->renorm);
}

static void route_case(int64_t n, int E, int k, int score, int renorm, int aux)
{
    moe_arg a = {.n = n, .E = E, .k = k, .score = score, .renorm = renorm, .aux = aux};
    float *logits = moe_logits(n, E);
    char what[96];
    snprintf(what, sizeof what, "moe_route_forward n=%lld E=%d k=%d %s%s", (long long)n, E,
             k, score == PT_KMOE_SIGMOID ? "sigmoid" : "softmax", renorm ? " renorm" : "");
    tbuf fw[] = {
        {"scores", F32, n * E, NULL, TOL_F32},
        {"idx", I32, n * k, NULL, EXACT},
        {"w", F32, n * k, NULL, TOL_F32},
        {"logits", ACT, n * E, logits, 0},
    };
    run_case(what, fw, NB(fw), op_route_forward, &a);

    /* the backward from the CPU's forward on the same bf16 logits */
    float *x = xmalloc((size_t)(n * E) * sizeof(float));
    for (int64_t i = 0; i < n * E; i++)
        x[i] = bf16_round(logits[i]);
    float *s = xmalloc((size_t)(n * E) * sizeof(float)), *w = xmalloc((size_t)(n * k) * 4);
    int32_t *idx = xmalloc((size_t)(n * k) * sizeof(int32_t));
    CPU->moe_route_forward(CPU, s, idx, w, x, n, E, k, score, renorm);
    float *dw = frand(n * k, 1.0), *aux_g = frand(E, 0.5), *junk = frand(n * E, 50.0);
    snprintf(what, sizeof what, "moe_route_backward n=%lld E=%d k=%d %s%s%s", (long long)n,
             E, k, score == PT_KMOE_SIGMOID ? "sigmoid" : "softmax", renorm ? " renorm" : "",
             aux ? " aux" : "");
    tbuf bw[] = {
        {"dlogits", ACT, n * E, junk, TOL_ELEM}, /* written: the junk must go */
        {"dw", F32, n * k, dw, 0},
        {"aux_g", F32, E, aux_g, 0},
        {"scores", F32, n * E, s, 0},
        {"idx", I32, n * k, idx, 0},
        {"w", F32, n * k, w, 0},
    };
    run_case(what, bw, NB(bw), op_route_backward, &a);
    free(logits);
    free(x);
    free(s);
    free(w);
    free(idx);
    free(dw);
    free(aux_g);
    free(junk);
}

static void op_colsum(pt_kernels *kn, void **b, const void *p)
{
    const moe_arg *a = p;
    kn->moe_score_colsum(kn, F(b[0]), CF(b[1]), a->n, a->E);
}

static void test_moe_router(void)
{
    for (int score = 0; score < 2; score++)
        for (int renorm = 0; renorm < 2; renorm++) {
            route_case(37, 8, 2, score, renorm, renorm);
            route_case(19, 40, 6, score, renorm, !renorm); /* E over a warp */
        }
    route_case(5, 64, 1, PT_KMOE_SOFTMAX, 1, 1);
    route_case(6, 160, 8, PT_KMOE_SIGMOID, 1, 1);
    route_case(3, 5, 5, PT_KMOE_SOFTMAX, 1, 0); /* k = E */
    for (int c = 0; c < 2; c++) {
        moe_arg a = {.n = c ? 300 : 7, .E = c ? 70 : 3};
        float *s = frand(a.n * a.E, 1.0), *junk = frand(a.E, 9.0);
        tbuf bufs[] = {
            {"out", F32, a.E, junk, TOL_F32},
            {"scores", F32, a.n * a.E, s, 0},
        };
        run_case(c ? "moe_score_colsum n=300 E=70" : "moe_score_colsum n=7 E=3", bufs,
                 NB(bufs), op_colsum, &a);
        free(s);
        free(junk);
    }
}

/* ---- Dispatch ----------------------------------------------------------------------------- */

static void op_plan(pt_kernels *kn, void **b, const void *p)
{
    const moe_arg *a = p;
    kn->moe_dispatch_plan(kn, (int32_t *)b[0], (int32_t *)b[1], (int64_t *)b[2],
                          (const int32_t *)b[3], a->n, a->E, a->k, a->capacity);
}

static void plan_case(int64_t n, int E, int k, int64_t capacity)
{
    moe_arg a = {.n = n, .E = E, .k = k, .capacity = capacity};
    int32_t *idx = moe_idx(n, E, k);
    char what[96];
    snprintf(what, sizeof what, "moe_dispatch_plan n=%lld E=%d k=%d cap=%lld", (long long)n,
             E, k, (long long)capacity);
    tbuf bufs[] = {
        {"pos", I32, n * k, NULL, EXACT},
        {"src", I32, n * k, NULL, EXACT},
        {"counts", I32, 2 * (int64_t)E, NULL, EXACT}, /* int64: compared as bytes */
        {"idx", I32, n * k, idx, 0},
    };
    run_case(what, bufs, NB(bufs), op_plan, &a);
    free(idx);
}

static void test_moe_plan(void)
{
    const int64_t caps[] = {-1, 0, 3, 40};
    for (int i = 0; i < 4; i++)
        plan_case(333, 16, 4, caps[i]);
    plan_case(100, 300, 8, -1); /* more experts than the bounds kernel's threads */
    plan_case(100, 300, 8, 2);
    plan_case(1, 2, 1, -1);
    plan_case(57, 2, 1, 20); /* one expert takes every token */
}

/* ---- Gather and combine ------------------------------------------------------------------- */

static void op_gather(pt_kernels *kn, void **b, const void *p)
{
    const moe_arg *a = p; /* n holds m here */
    kn->moe_gather_rows(kn, F(b[0]), CF(b[1]), (const int32_t *)b[2], a->n, a->h);
}

static void op_gather_bwd(pt_kernels *kn, void **b, const void *p)
{
    const moe_arg *a = p;
    kn->moe_gather_rows_backward(kn, F(b[0]), CF(b[1]), (const int32_t *)b[2], a->n, a->k,
                                 a->h);
}

static void op_combine(pt_kernels *kn, void **b, const void *p)
{
    const moe_arg *a = p;
    kn->moe_combine_forward(kn, F(b[0]), CF(b[1]), (const int32_t *)b[2], CF(b[3]), a->n,
                            a->k, a->h);
}

static void op_combine_bwd(pt_kernels *kn, void **b, const void *p)
{
    const moe_arg *a = p;
    kn->moe_combine_backward(kn, F(b[0]), F(b[1]), CF(b[2]), CF(b[3]), (const int32_t *)b[4],
                             CF(b[5]), a->n, a->k, a->h);
}

static void gather_combine_case(int64_t n, int E, int k, int h, int64_t capacity)
{
    /* the plan from the CPU (host memory there) */
    int32_t *idx = moe_idx(n, E, k);
    int32_t *pos = xmalloc((size_t)(n * k) * 4), *src = xmalloc((size_t)(n * k) * 4);
    int64_t *counts = xmalloc((size_t)E * 8), m = 0;
    CPU->moe_dispatch_plan(CPU, pos, src, counts, idx, n, E, k, capacity);
    for (int e = 0; e < E; e++)
        m += counts[e];
    moe_arg a = {.n = n, .E = E, .k = k, .h = h};
    moe_arg am = {.n = m, .h = h};
    float *x = frand(n * h, 1.0), *y = frand(m * h, 1.0), *w = frand(n * k, 1.0);
    float *dx = frand(n * h, 1.0), *dout = frand(m * h, 1.0), *dn = frand(n * h, 1.0);
    float *junk = frand((m > n ? m : n) * h, 30.0), *junkw = frand(n * k, 30.0);
    char what[96];
    snprintf(what, sizeof what, "moe_gather_rows m=%lld h=%d", (long long)m, h);
    tbuf g[] = {
        {"out", ACT, m * h, junk, EXACT},
        {"x", ACT, n * h, x, 0},
        {"src", I32, m, src, 0},
    };
    run_case(what, g, NB(g), op_gather, &am);
    snprintf(what, sizeof what, "moe_gather_rows_backward n=%lld k=%d h=%d", (long long)n, k,
             h);
    tbuf gb[] = {
        {"dx", ACT, n * h, dx, TOL_ELEM},
        {"dout", ACT, m * h, dout, 0},
        {"pos", I32, n * k, pos, 0},
    };
    run_case(what, gb, NB(gb), op_gather_bwd, &a);
    snprintf(what, sizeof what, "moe_combine_forward n=%lld k=%d h=%d", (long long)n, k, h);
    tbuf c[] = {
        {"out", ACT, n * h, junk, TOL_ELEM},
        {"y", ACT, m * h, y, 0},
        {"pos", I32, n * k, pos, 0},
        {"w", F32, n * k, w, 0},
    };
    run_case(what, c, NB(c), op_combine, &a);
    snprintf(what, sizeof what, "moe_combine_backward n=%lld k=%d h=%d", (long long)n, k, h);
    tbuf cb[] = {
        {"dy", ACT, m * h, junk, TOL_ELEM},
        {"dw", F32, n * k, junkw, TOL_F32},
        {"dout", ACT, n * h, dn, 0},
        {"y", ACT, m * h, y, 0},
        {"pos", I32, n * k, pos, 0},
        {"w", F32, n * k, w, 0},
    };
    run_case(what, cb, NB(cb), op_combine_bwd, &a);
    free(idx);
    free(pos);
    free(src);
    free(counts);
    free(x);
    free(y);
    free(w);
    free(dx);
    free(dout);
    free(dn);
    free(junk);
    free(junkw);
}

static void test_moe_gather_combine(void)
{
    gather_combine_case(61, 8, 2, 64, 12);  /* 16-byte rows; capacity drops */
    gather_combine_case(29, 5, 3, 13, -1);  /* odd width: one column a thread */
    gather_combine_case(40, 6, 4, 200, 9);  /* several drops, some tokens lose all */
}

/* ---- Grouped linear layers ---------------------------------------------------------------- */

typedef struct {
    const int64_t *counts;
    int G, ic, oc, with_dinp;
} grouped_arg;

static void op_grouped_fwd(pt_kernels *kn, void **b, const void *p)
{
    const grouped_arg *a = p;
    kn->matmul_grouped_forward(kn, F(b[0]), CF(b[1]), CF(b[2]), a->counts, a->G, a->ic, a->oc);
}

static void op_grouped_bwd(pt_kernels *kn, void **b, const void *p)
{
    const grouped_arg *a = p;
    kn->matmul_grouped_backward(kn, a->with_dinp ? F(b[0]) : NULL, F(b[1]), CF(b[2]), CF(b[3]),
                                CF(b[4]), a->counts, a->G, a->ic, a->oc);
}

static void grouped_case(const int64_t *counts, int G, int ic, int oc)
{
    int64_t m = 0;
    for (int g = 0; g < G; g++)
        m += counts[g];
    const int64_t wn = (int64_t)G * oc * ic;
    float *inp = frand(m * ic, 1.0), *w = frand(wn, 0.5), *dout = frand(m * oc, 1.0);
    float *dinp = frand(m * ic, 1.0), *dw = frand(wn, 1.0);
    grouped_arg a = {counts, G, ic, oc, 1};
    char what[96];
    snprintf(what, sizeof what, "matmul_grouped_forward G=%d m=%lld %dx%d", G, (long long)m,
             ic, oc);
    tbuf f[] = {
        {"out", ACT, m * oc, NULL, TOL_GEMM},
        {"inp", ACT, m * ic, inp, 0},
        {"w", ACT, wn, w, 0},
    };
    run_case(what, f, NB(f), op_grouped_fwd, &a);
    snprintf(what, sizeof what, "matmul_grouped_backward G=%d m=%lld %dx%d", G, (long long)m,
             ic, oc);
    tbuf bw[] = {
        {"dinp", ACT, m * ic, dinp, TOL_GEMM},
        {"dw", F32, wn, dw, TOL_F32_GEMM},
        {"dout", ACT, m * oc, dout, 0},
        {"inp", ACT, m * ic, inp, 0},
        {"w", ACT, wn, w, 0},
    };
    run_case(what, bw, NB(bw), op_grouped_bwd, &a);
    /* dw alone, and an empty group's dw left as it was, bit for bit, on the GPU */
    a.with_dinp = 0;
    float *out[MAXBUF] = {0};
    if (!run_on(GPU, bw, NB(bw), op_grouped_bwd, &a, out)) {
        int64_t off = 0;
        for (int g = 0; g < G; off += (int64_t)oc * ic, g++)
            if (counts[g] == 0)
                CHECK(memcmp(out[1] + off, dw + off, (size_t)oc * ic * sizeof(float)) == 0);
            else
                CHECK(memcmp(out[1] + off, dw + off, (size_t)oc * ic * sizeof(float)) != 0);
    }
    for (int i = 0; i < MAXBUF; i++)
        free(out[i]);
    free(inp);
    free(w);
    free(dout);
    free(dinp);
    free(dw);
}

static void test_moe_grouped(void)
{
    const int64_t c1[] = {5, 0, 17, 1, 0, 9}, c2[] = {0, 3, 0}, c3[] = {0, 0};
    grouped_case(c1, 6, 24, 40);
    grouped_case(c2, 3, 13, 7); /* widths cuBLASLt's 16-byte alignment does not suit */
    grouped_case(c3, 2, 16, 16); /* nothing at all */
}

/* reserve counts the plan's sort (moe_assign, moe_experts): a plan at the reserved size
 * runs without growing the scratch, a larger one is refused with the shortfall named. */
static void test_moe_reserve(void)
{
    pt_k_scratch_shape none = {0}, sh = {.moe_assign = 70000, .moe_experts = 64};
    /* over the 1 MiB floor: four int32 arrays of 70000 alone are 1.1 MB */
    CHECK(pt_k_scratch_bytes(GPU, &sh) >= (size_t)4 * 70000 * 4);
    CHECK(pt_k_scratch_bytes(GPU, &none) == 0);
    pt_kernels *kn = own_backend(NULL, NULL);
    if (!kn)
        return;
    CHECK(kn->reserve(kn, &sh) == 0);
    const int64_t n = 17500;
    const int k = 4, E = 64;
    int32_t *idx = moe_idx(2 * n, E, k);
    int32_t *didx = kn->alloc(kn, (size_t)(2 * n * k) * 4);
    int32_t *pos = kn->alloc(kn, (size_t)(2 * n * k) * 4);
    int32_t *src = kn->alloc(kn, (size_t)(2 * n * k) * 4);
    int64_t *counts = kn->alloc(kn, (size_t)E * 8), host[64];
    CHECK(didx && pos && src && counts);
    if (didx && pos && src && counts) {
        kn->copy(kn, didx, idx, (size_t)(2 * n * k) * 4, PT_KCOPY_H2D);
        kn->moe_dispatch_plan(kn, pos, src, counts, didx, n, E, k, -1);
        kn->copy(kn, host, counts, sizeof host, PT_KCOPY_D2H);
        CHECK(kn->sync(kn) == 0);
        int64_t m = 0;
        for (int e = 0; e < E; e++)
            m += host[e];
        CHECK_INT(m, n * k);
        kn->moe_dispatch_plan(kn, pos, src, counts, didx, 2 * n, E, k, -1);
        CHECK(kn->sync(kn) == -1);
        CHECK_STR_HAS(kn->err, "reserve");
    }
    kn->free(kn, didx);
    kn->free(kn, pos);
    kn->free(kn, src);
    kn->free(kn, counts);
    free(idx);
    pt_kernels_destroy(kn);
}

void test_moe(void)
{
    test_moe_router();
    test_moe_plan();
    test_moe_reserve();
    test_moe_gather_combine();
    test_moe_grouped();
}

int failures_moe(void) { return pt_check_failures; }
