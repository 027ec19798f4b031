/*
 * PowerSGD's arithmetic (runtime/compress.c, pt_psgd_local_*) on the CPU backend, on
 * matrices whose answers are known: the orthonormalisation gives orthonormal columns
 * (and leaves a zero column zero); a matrix of rank r comes back whole from one rank-r
 * step, with no error left; warm-started steps converge to the best rank-r
 * approximation, whose error is the sum of the squared singular values past r
 * (Eckart–Young); over two ranks the errors sum to what the reduction missed and both
 * ranks decompress the same sum; and with error feedback the outputs of T steps on a
 * fixed gradient add up to T times it less the last error (nothing is lost); and a
 * matrix wider than the orthonormalisation takes is a recorded failure, left as it was;
 * and matrices group as the rule shared with the planner says.
 */
#include "check.h"
#include "runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A fixed pseudo-random value in [-1, 1) (a linear congruential sequence). */
static float rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 4503599627370496.0 - 1.0);
}

static void fill(float *x, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd(&seed);
}

static double frob2(const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

static void test_orthonormalize(pt_kernels *kn)
{
    enum { R = 50, C = 4 };
    float p[R * C];
    fill(p, R * C, 7);
    for (int r = 0; r < R; r++)
        p[r * C + 2] = 0; /* a zero column */
    kn->orthonormalize(kn, p, R, C, 1e-8f);
    for (int i = 0; i < C; i++)
        for (int j = 0; j < C; j++) {
            double dot = 0;
            for (int r = 0; r < R; r++)
                dot += (double)p[r * C + i] * p[r * C + j];
            double want = i == j && i != 2 ? 1.0 : 0.0;
            CHECK(fabs(dot - want) < 1e-5);
        }
    for (int r = 0; r < R; r++)
        CHECK(p[r * C + 2] == 0.0f);
}

/* M = A B^T of rank 2 comes back from one rank-2 step with no error. */
static void test_exact_low_rank(pt_kernels *kn)
{
    enum { M_ = 30, N_ = 20, K = 2 };
    float a[M_ * K], b[N_ * K], m[M_ * N_], want[M_ * N_], e[M_ * N_] = {0};
    float q[N_ * K], p[M_ * K];
    fill(a, M_ * K, 1);
    fill(b, N_ * K, 2);
    fill(q, N_ * K, 3);
    for (int i = 0; i < M_; i++)
        for (int j = 0; j < N_; j++)
            m[i * N_ + j] = a[i * K] * b[j * K] + a[i * K + 1] * b[j * K + 1];
    memcpy(want, m, sizeof m);
    pt_psgd_local_p(kn, m, e, q, p, M_, N_, K);
    pt_psgd_local_q(kn, m, p, q, M_, N_, K);
    pt_psgd_local_done(kn, m, e, p, q, M_, N_, K, 1);
    double d = 0;
    for (int i = 0; i < M_ * N_; i++)
        d += ((double)m[i] - want[i]) * ((double)m[i] - want[i]);
    CHECK(sqrt(d / frob2(want, M_ * N_)) < 1e-5);
    CHECK(sqrt(frob2(e, M_ * N_) / frob2(want, M_ * N_)) < 1e-5);
}

/* Warm-started rank-2 steps on a matrix with singular values 5, 4, 3, 2, 1, 0.5: the
 * approximation's squared error tends to 3² + 2² + 1² + 0.5² = 14.25. */
static void test_best_rank(pt_kernels *kn)
{
    enum { M_ = 8, N_ = 6, K = 2 };
    const float sv[N_] = {5, 4, 3, 2, 1, 0.5f};
    float g[M_ * N_] = {0}, m[M_ * N_], q[N_ * K], p[M_ * K];
    /* rows permuted so that the factors are not the unit vectors the columns are */
    const int row_of[N_] = {3, 0, 6, 1, 7, 4};
    for (int j = 0; j < N_; j++)
        g[row_of[j] * N_ + j] = sv[j];
    fill(q, N_ * K, 5);
    double err = 0;
    for (int step = 0; step < 40; step++) {
        memcpy(m, g, sizeof g);
        pt_psgd_local_p(kn, m, NULL, q, p, M_, N_, K);
        pt_psgd_local_q(kn, m, p, q, M_, N_, K);
        pt_psgd_local_done(kn, m, NULL, p, q, M_, N_, K, 1);
        err = 0;
        for (int i = 0; i < M_ * N_; i++)
            err += ((double)g[i] - m[i]) * ((double)g[i] - m[i]);
    }
    CHECK_NEAR(err, 14.25, 1e-4);
}

/* Two ranks: P and Q summed between the steps as the all-reduces would. */
static void test_two_ranks(pt_kernels *kn)
{
    enum { M_ = 12, N_ = 10, K = 1, MN = M_ * N_ };
    float m1[MN], m2[MN], sum[MN], e1[MN], e2[MN], q1[N_ * K], q2[N_ * K], p1[M_ * K],
        p2[M_ * K];
    fill(m1, MN, 11);
    fill(m2, MN, 12);
    fill(e1, MN, 13); /* errors left by an earlier step */
    fill(e2, MN, 14);
    for (int i = 0; i < MN; i++) {
        e1[i] *= 0.1f;
        e2[i] *= 0.1f;
        sum[i] = m1[i] + e1[i] + m2[i] + e2[i]; /* what the reduction should deliver */
    }
    fill(q1, N_ * K, 15);
    memcpy(q2, q1, sizeof q1); /* the same warm start on both */
    pt_psgd_local_p(kn, m1, e1, q1, p1, M_, N_, K);
    pt_psgd_local_p(kn, m2, e2, q2, p2, M_, N_, K);
    for (int i = 0; i < M_ * K; i++)
        p1[i] = p2[i] = p1[i] + p2[i];
    pt_psgd_local_q(kn, m1, p1, q1, M_, N_, K);
    pt_psgd_local_q(kn, m2, p2, q2, M_, N_, K);
    for (int i = 0; i < N_ * K; i++)
        q1[i] = q2[i] = q1[i] + q2[i];
    pt_psgd_local_done(kn, m1, e1, p1, q1, M_, N_, K, 2);
    pt_psgd_local_done(kn, m2, e2, p2, q2, M_, N_, K, 2);
    double missed = 0, same = 0;
    for (int i = 0; i < MN; i++) {
        double d = (double)e1[i] + e2[i] - ((double)sum[i] - m1[i]);
        missed += d * d;
        same += ((double)m1[i] - m2[i]) * ((double)m1[i] - m2[i]);
    }
    CHECK(sqrt(missed / frob2(sum, MN)) < 1e-6);
    CHECK(same == 0);
    /* rank 1 of a random 12 x 10 sum misses a good part of it: the errors carry it */
    CHECK(frob2(e1, MN) + frob2(e2, MN) > 0.1 * frob2(sum, MN) / 4);
}

/* Error feedback over T steps of a fixed gradient g: sum of outputs = T g - e_T. */
static void test_feedback(pt_kernels *kn)
{
    enum { M_ = 16, N_ = 9, K = 2, MN = M_ * N_, T = 100 };
    float g[MN], m[MN], e[MN] = {0}, q[N_ * K], p[M_ * K];
    double total[MN] = {0};
    fill(g, MN, 21);
    fill(q, N_ * K, 22);
    for (int t = 0; t < T; t++) {
        memcpy(m, g, sizeof g);
        pt_psgd_local_p(kn, m, e, q, p, M_, N_, K);
        pt_psgd_local_q(kn, m, p, q, M_, N_, K);
        pt_psgd_local_done(kn, m, e, p, q, M_, N_, K, 1);
        for (int i = 0; i < MN; i++)
            total[i] += m[i];
    }
    double d = 0, ref = 0;
    for (int i = 0; i < MN; i++) {
        double want = (double)T * g[i] - e[i];
        d += (total[i] - want) * (total[i] - want);
        ref += want * want;
    }
    CHECK(sqrt(d / ref) < 1e-5);
    /* and the mean output approaches g: the error stays bounded while T grows (measured
     * 2.83, 2.78 and 2.84 times |g| after 25, 100 and 400 steps; an error that kept what
     * each step missed without passing it on would be about T times the first one) */
    CHECK(sqrt(frob2(e, MN) / frob2(g, MN)) < 4);
}

/* Wider than PT_K_ORTHO_MAX_COLS: the backend records the failure and leaves p as it
 * was (kernels.h). */
static void test_too_wide(void)
{
    enum { C = PT_K_ORTHO_MAX_COLS + 1 };
    pt_kernels *kn = pt_kernels_cpu(1);
    CHECK(kn != NULL);
    if (!kn)
        return;
    static float p[2 * C], before[2 * C];
    fill(p, 2 * C, 31);
    memcpy(before, p, sizeof p);
    kn->orthonormalize(kn, p, 2, C, 1e-8f);
    CHECK(memcmp(p, before, sizeof p) == 0);
    CHECK(kn->sync(kn) == -1);
    char want[80];
    snprintf(want, sizeof want, "orthonormalize: %d columns, at most %d", C,
             PT_K_ORTHO_MAX_COLS);
    CHECK(strstr(kn->err, want) != NULL);
    pt_kernels_destroy(kn);
}

/* PowerSGD's grouping rule (pt_psgd_group_closes, shared by the runtime and the
 * planner): with 25-element buckets, matrices of 10, 10, 5, 30 and 5 elements make the
 * groups {10, 10, 5} (a bucket exactly closes it) and {30}, and the last 5 opens a third
 * that stays open. */
static void test_groups(void)
{
    const int64_t cols[] = {10, 10, 5, 30, 5};
    const bool closes[] = {false, false, true, true, false};
    const int64_t left[] = {10, 20, 0, 0, 5};
    int64_t acc = 0;
    for (int i = 0; i < 5; i++) {
        CHECK(pt_psgd_group_closes(&acc, 1, cols[i], 25) == closes[i]);
        CHECK(acc == left[i]);
    }
}

int main(void)
{
    test_groups();
    pt_kernels *kn = pt_kernels_cpu(1);
    CHECK(kn != NULL);
    if (!kn)
        return pt_check_result();
    CHECK(kn->gemm_f32 != NULL && kn->orthonormalize != NULL);
    test_orthonormalize(kn);
    test_exact_low_rank(kn);
    test_best_rank(kn);
    test_two_ranks(kn);
    test_feedback(kn);
    test_too_wide();
    pt_kernels_destroy(kn);
    return pt_check_result();
}
