/*
 * Benchmark of the whole search: enumerate, price every layout that fits, simulate
 * the best 1,000 by estimate in full and rank them. Targets on a 2-core development
 * machine: llama3-405b on 2,048 dgx-h100 nodes at global batch 2048, sequence 8192,
 * under 10 s; llama3-8b on one node under 0.5 s; qwen3-235b-a22b (ep and etp searched)
 * on 32 nodes under 10 s. Prints figures; never fails on time.
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

static void bench(const char *model, int nodes, int64_t global_batch, const char *stack,
                  double target_s)
{
    pt_model m;
    pt_cluster c;
    pt_err err;
    pt_train t;
    if (pt_model_get(model, &m, &err) || pt_cluster_get("dgx-h100", &c, &err) ||
        pt_stack_get(stack, &t.stack, &err)) {
        fprintf(stderr, "bench_search: %s\n", err.msg);
        exit(1);
    }
    c.nodes = nodes;
    pt_stack keep = t.stack;
    pt_train_default(&t, &c);
    t.stack = keep;
    t.global_batch = global_batch;
    pt_enum_opts o;
    pt_enum_opts_default(&o);
    double t0 = now_s();
    pt_search_result r;
    if (pt_search(&m, &c, &t, &o, NULL, 1000, &r, &err)) {
        fprintf(stderr, "bench_search: %s\n", err.msg);
        exit(1);
    }
    double dt = now_s() - t0;
    printf("%-15s on %4d dgx-h100 nodes, stack %s, gb %lld, seq %lld: %lld layouts, %lld fit and "
           "priced, %lld simulated in full; %.3f s (target < %.1f s: %s); best %.3f s/step, "
           "MFU %.1f%%\n", model, nodes, stack, (long long)global_batch, (long long)m.seq,
           (long long)r.counts.enumerated, (long long)r.priced, (long long)r.n_best, dt,
           target_s, dt < target_s ? "met" : "MISSED",
           r.n_best ? r.best[0].predicted.step_time_s : 0,
           r.n_best ? 100 * r.best[0].predicted.mfu : 0);
    pt_search_free(&r);
}

int main(void)
{
    /* ptrun (no overlap choices but tp_overlap) and megatron-core (every overlap key
     * enumerated: the largest search) */
    for (int s = 0; s < 2; s++) {
        const char *stack = s ? "megatron-core" : "ptrun";
        bench("llama3-8b", 1, 512, stack, 0.5);
        bench("llama3-70b", 64, 1024, stack, 10);
        bench("llama3-405b", 2048, 2048, stack, 10);
    }
    /* a mixture of experts with ep and etp in the space: Qwen3-235B-A22B on 32 nodes,
     * the Megatron-Core MoE model zoo's scale (its stack: ptrun does not plan experts) */
    bench("qwen3-235b-a22b", 32, 2048, "megatron-core", 10);
    return 0;
}
