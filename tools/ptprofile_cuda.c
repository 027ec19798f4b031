/*
 * ptprofile's timer for the CUDA backend: GPU time of work queued on the kernel
 * backend's stream, measured with CUDA events as issue 4 asks and as NVIDIA's own
 * benchmarks do (nvbench, nccl-tests): host clocks around a synchronisation would add
 * launch latency and the synchronisation itself to every sample, which for the small
 * GEMMs of tensor-parallel layouts is a large share of the kernel's time.
 *
 * Warm-up runs first (the first GEMM of a shape pays for cuBLASLt's algorithm search
 * and the GPU's climb out of idle clocks), then every timed run is queued back to back
 * between its own pair of events, so the GPU never waits for the host between runs,
 * and the times are read once the last event has completed. Clocks are not locked:
 * the GPU boosts and throttles as it will in training, which is what the planner
 * predicts; the median of the repeats absorbs the drift.
 *
 * Plain C against cuda_runtime.h; compiled where the CUDA backend is.
 */
#include "ptprofile.h"

#include <cuda_runtime.h>
#include <string.h>

/* Warm-up runs before timing. */
enum { PT_PROF_WARMUP = 2, PT_PROF_MAX_REPEATS = 64 };

int pt_prof_cuda_time(pt_kernels *kn, void (*run)(pt_kernels *kn, void *arg), void *arg,
                      int repeats, double *times_s)
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
    for (int w = 0; w < PT_PROF_WARMUP; w++)
        run(kn, arg);
    if (kn->sync(kn))
        goto out;
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
