/*
 * Checks ptprofile against reality: takes the largest GEMM ptprofile stored for the
 * CPU in a cost table, times the same cblas_sgemm call here, independently of
 * ptprofile's code, and prints both rates and their ratio (the target is within
 * 10%). Also prints the stored peak sgemm rate of the device description.
 *   usage: bench_profile_check COSTS_DB
 */
#include <cblas.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of `reps` runs after a warm-up (ptprofile keeps the median; the best is the
 * conventional figure for a rate, and the two should be close on a quiet core). */
static double time_sgemm(int m, int n, int k, int reps, double *median_s)
{
    float *a = calloc((size_t)m * k, sizeof *a), *b = calloc((size_t)n * k, sizeof *b);
    float *c = calloc((size_t)m * n, sizeof *c);
    double t[32], best = 1e30;
    for (int i = 0; i < m * k; i++)
        a[i] = (float)(i % 7) * 0.125f;
    for (int i = 0; i < n * k; i++)
        b[i] = (float)(i % 5) * 0.25f;
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a, k, b, k, 0.0f,
                    c, n);
        double dt = now_s() - t0;
        if (r >= 0)
            t[r] = dt, best = dt < best ? dt : best;
    }
    for (int i = 1; i < reps; i++) /* insertion sort for the median */
        for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *median_s = t[reps / 2];
    free(a);
    free(b);
    free(c);
    return best;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bench_profile_check COSTS_DB\n");
        return 1;
    }
    sqlite3 *db;
    sqlite3_stmt *st;
    if (sqlite3_open_v2(argv[1], &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db,
                           "SELECT op_key, flops, time_s FROM kernel_samples WHERE device = 'cpu'"
                           " AND kind = 'gemm' AND source = 'profile' ORDER BY flops DESC"
                           " LIMIT 1", -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench_profile_check: %s: %s\n", argv[1], sqlite3_errmsg(db));
        return 1;
    }
    if (sqlite3_step(st) != SQLITE_ROW) {
        fprintf(stderr, "bench_profile_check: %s holds no CPU GEMM samples (run ptprofile)\n",
                argv[1]);
        return 1;
    }
    const char *key = (const char *)sqlite3_column_text(st, 0);
    double flops = sqlite3_column_double(st, 1), stored = sqlite3_column_double(st, 2);
    int m, n, k;
    if (sscanf(key, "gemm:fp32:m=%d,n=%d,k=%d", &m, &n, &k) != 3) {
        fprintf(stderr, "bench_profile_check: unexpected key %s\n", key);
        return 1;
    }
    openblas_set_num_threads(1);
    double median;
    double best = time_sgemm(m, n, k, 9, &median);
    printf("%s: ptprofile stored %.2f GFLOP/s; measured here %.2f GFLOP/s (median), %.2f "
           "(best); ratio stored/here %.3f (target within 10%%: %s)\n", key,
           flops / stored / 1e9, flops / median / 1e9, flops / best / 1e9, median / stored,
           median / stored > 0.9 && median / stored < 1.1 ? "met" : "MISSED");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return 0;
}
