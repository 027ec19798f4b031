/*
 * ptplan's error bands (tools/ptplan/ptplan_band.c), as the ranking calls them. Checks
 * band_add and band_range on known errors, then, given a stack and a cluster, prints the
 * band prediction_band gives a job of that stack on that cluster's device (the sets from
 * PT_VALIDATION_SETS or the source tree) as one JSON object, for tests/tools/
 * cli_validate.sh to hold against --validate's table by stack and device.
 *   usage: test_ptplan_band [STACK CLUSTER [PREDICTED_S]]
 * Exit status: 0; 1 when prediction_band fails (its message on stderr), or a check fails.
 */
#include "check.h"
#include "ptplan.h"

#include <stdlib.h>
#include <time.h>

/* The sums on errors whose band is known by hand. */
static void check_arithmetic(void)
{
    pred_band b = {0};
    double lo, hi;
    band_range(&b, 2.0, &lo, &hi);
    CHECK(lo == 2.0 && hi == 2.0); /* no runs: no range */
    band_add(&b, -0.05);
    CHECK_INT(b.n, 1);
    CHECK(b.err_min == -0.05 && b.err_max == -0.05 && b.err_mean == -0.05);
    band_add(&b, -0.2);
    band_add(&b, 0.1);
    CHECK_INT(b.n, 3);
    CHECK(b.err_min == -0.2 && b.err_max == 0.1);
    CHECK_NEAR(b.err_mean, -0.05, 1e-12);
    /* predicted 0.8 s by a model that ran 20% fast to 10% slow: measured 0.8/1.1 .. 1 s */
    band_range(&b, 0.8, &lo, &hi);
    CHECK_NEAR(lo, 0.8 / 1.1, 1e-12);
    CHECK_NEAR(hi, 1.0, 1e-12);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int probe(const char *stack, const char *cluster, double predicted_s)
{
    job j = {0};
    pt_err err;
    if (pt_stack_get(stack, &j.t.stack, &err) || pt_cluster_get(cluster, &j.c, &err)) {
        fprintf(stderr, "test_ptplan_band: %s\n", err.msg);
        return 1;
    }
    pred_band b;
    double t0 = now_s();
    int rc = prediction_band(&j, &b, &err);
    double seconds = now_s() - t0;
    if (rc) {
        CHECK_INT(rc, -1);
        fprintf(stderr, "test_ptplan_band: %s\n", err.msg);
        return 1;
    }
    double lo, hi;
    band_range(&b, predicted_s, &lo, &hi);
    json_t *o = json_pack("{s:s, s:s, s:i, s:f, s:f, s:f, s:s, s:s, s:f, s:f, s:f}", "stack",
                          b.stack, "device", b.device, "n", b.n, "err_min", b.err_min,
                          "err_max", b.err_max, "err_mean", b.err_mean, "sets", b.sets,
                          "reason", b.reason, "lo_s", lo, "hi_s", hi, "seconds", seconds);
    print_json(o);
    return 0;
}

int main(int argc, char **argv)
{
    check_arithmetic();
    int rc = 0;
    if (argc >= 3)
        rc = probe(argv[1], argv[2], argc > 3 ? atof(argv[3]) : 1.0);
    return rc ? rc : pt_check_result();
}
