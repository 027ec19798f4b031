/*
 * Benchmark of the layout enumeration: how many layouts per second are enumerated
 * and given memory figures, and how long all layouts of llama3-405b on 16,384 H100s
 * (2,048 dgx-h100 nodes) at global batch 2048 take. Target: under 1 s on a 2-core
 * development machine. Prints figures; it is not a test and never fails on time.
 */
#include "planner.h"

#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs one enumeration `reps` times and prints its figures; returns the best time. */
static double bench(const char *model, const char *cluster, int nodes, int64_t global_batch,
                    int reps)
{
    pt_model m;
    pt_cluster c;
    pt_err err;
    if (pt_model_get(model, &m, &err) || pt_cluster_get(cluster, &c, &err)) {
        fprintf(stderr, "bench_enum: %s\n", err.msg);
        exit(1);
    }
    c.nodes = nodes;
    pt_train t;
    pt_train_default(&t, &c);
    t.global_batch = global_batch;
    pt_enum_opts o;
    pt_enum_opts_default(&o);
    pt_enum_counts n = {0};
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        pt_enum_layouts(&m, &c, &t, &o, NULL, NULL, &n);
        double dt = now_s() - t0;
        if (dt < best)
            best = dt;
    }
    printf("%-12s on %5d x %-12s gb %5lld: %9lld layouts (%8lld valid, %7lld fit) in %8.4f s "
           "= %10.0f layouts/s, %10.0f valid with memory/s\n",
           model, nodes, cluster, (long long)global_batch, (long long)n.enumerated,
           (long long)n.valid, (long long)n.fit, best, (double)n.enumerated / best,
           (double)n.valid / best);
    return best;
}

int main(void)
{
    bench("gpt2-124m", "dgx-a100-80g", 1, 256, 5);
    bench("llama3-70b", "dgx-h100", 64, 1024, 3);
    double t = bench("llama3-405b", "dgx-h100", 2048, 2048, 3);
    printf("llama3-405b on 16,384 H100s at global batch 2048: %.3f s (target < 1 s: %s)\n", t,
           t < 1.0 ? "met" : "MISSED");
    return 0;
}
