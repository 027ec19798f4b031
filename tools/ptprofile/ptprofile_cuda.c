/*
 * ptprofile's timer for the CUDA backend: GPU time of work queued on the kernel
 * backend's stream, measured with CUDA events as issue 4 asks and as NVIDIA's own
 * benchmarks do (nvbench, nccl-tests): host clocks around a synchronisation would add
 * launch latency and the synchronisation itself to every sample, which for the small
 * GEMMs of tensor-parallel layouts is a large share of the kernel's time.
 *
 * Warm-up runs first (the first GEMM of a shape pays for cuBLASLt's algorithm search
 * and the GPU's climb out of idle clocks), then the op runs back to back for `soak_s`
 * seconds, then every timed run is queued back to back between its own pair of
 * events, so the GPU never waits for the host between runs, and the times are read
 * once the last event has completed. Clocks are not locked: the GPU boosts and
 * throttles as it will in training, which is what the planner predicts.
 *
 * The soak is there because a training step holds the GPU at its power limit and a
 * burst of a few runs does not: profiled in short bursts, the GPU kept a higher clock
 * than in training, the step's GEMMs took longer than their profiled times and the
 * prediction fell short (scripts/gpucheck.sh samples the clocks and power;
 * the code notes in docs/results/). The soak brings the GPU to the clock it
 * sustains under that op before it is timed.
 *
 * Plain C against cuda_runtime.h; compiled where the CUDA backend is.
 */
#include "ptprofile.h"

#include <cuda_runtime.h>
#include <string.h>

/* Warm-up runs before timing. */
enum { PT_PROF_WARMUP = 2, PT_PROF_MAX_REPEATS = 64 };

/* Runs of the soak at most, whatever a run's time: a bound on the host's launches. */
enum { PT_PROF_MAX_SOAK_RUNS = 100000 };

int pt_prof_cuda_time(pt_kernels *kn, void (*run)(pt_kernels *kn, void *arg), void *arg,
                      int repeats, double soak_s, double *times_s)
{
    if (strcmp(kn->name, "cuda") != 0 || repeats < 1)
        return -1;
    if (repeats > PT_PROF_MAX_REPEATS)
        repeats = PT_PROF_MAX_REPEATS;
    /* kernels/cuda/cuda.cuh keeps the stream first in the backend's context so that
     * code outside the backend can order its work after the kernels */
    cudaStream_t stream = *(cudaStream_t *)kn->priv;
    cudaEvent_t ev[PT_PROF_MAX_REPEATS + 1];
    int made = 0, done = -1;
    for (; made <= repeats; made++)
        if (cudaEventCreate(&ev[made]) != cudaSuccess)
            goto out;
    /* the last warm-up run, between events 0 and 1, sizes the soak */
    for (int w = 0; w < PT_PROF_WARMUP; w++) {
        if (w == PT_PROF_WARMUP - 1 && cudaEventRecord(ev[0], stream) != cudaSuccess)
            goto out;
        run(kn, arg);
    }
    if (cudaEventRecord(ev[1], stream) != cudaSuccess ||
        cudaEventSynchronize(ev[1]) != cudaSuccess || kn->sync(kn))
        goto out;
    if (soak_s > 0) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, ev[0], ev[1]) != cudaSuccess)
            goto out;
        double runs = ms > 0 ? soak_s / (1e-3 * (double)ms) : PT_PROF_MAX_SOAK_RUNS;
        long n = runs < PT_PROF_MAX_SOAK_RUNS ? (long)runs + 1 : PT_PROF_MAX_SOAK_RUNS;
        for (long i = 0; i < n; i++) /* no synchronisation: the timed runs follow at once */
            run(kn, arg);
    }
    /* run r lies between events r and r + 1 */
    if (cudaEventRecord(ev[0], stream) != cudaSuccess)
        goto out;
    for (int r = 0; r < repeats; r++) {
        run(kn, arg);
        if (cudaEventRecord(ev[r + 1], stream) != cudaSuccess)
            goto out;
    }
    if (cudaEventSynchronize(ev[repeats]) != cudaSuccess || kn->sync(kn))
        goto out;
    for (int r = 0; r < repeats; r++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, ev[r], ev[r + 1]) != cudaSuccess)
            goto out;
        times_s[r] = 1e-3 * (double)ms;
    }
    done = repeats;
out:
    for (int i = 0; i < made; i++)
        cudaEventDestroy(ev[i]);
    cudaGetLastError(); /* leave no sticky error for the backend's next sync */
    return done;
}
