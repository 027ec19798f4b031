/*
 * The CUDA runtime of the emulator (PT_CUDA_EMU), implemented in emu_runtime.cpp: the
 * part of NVIDIA's CUDA Runtime API that kernels/cuda/ and its tests call, with the
 * documented results and error codes. One device, shaped like an H100 SXM (132 SMs,
 * 228 KiB of shared memory per SM, 227 KiB per block on request, 48 KiB without),
 * whose memory is host memory: cudaMalloc returns 256-byte-aligned blocks filled with
 * 0xff bytes (reading memory nobody wrote gives NaN), and copies and memsets check that
 * their device side lies inside one allocation. Every operation runs to completion
 * before it returns, so streams are always idle and events record the host's monotonic
 * clock; cudaEventElapsedTime is the host time between two records.
 *
 * Errors: a failing call returns its error and leaves it for cudaGetLastError (per host
 * thread); a kernel fault (pt_emu.h) is sticky, as on a GPU: every later call returns
 * it until cudaDeviceReset, which also frees every allocation, stream and event.
 * Including this header also brings the device side (pt_emu.h), as nvcc does.
 */
#ifndef PT_EMU_CUDA_RUNTIME_H
#define PT_EMU_CUDA_RUNTIME_H

#include <stddef.h>

#include "pt_emu_types.h"

/* ---- Types ------------------------------------------------------------------------------- */

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

enum {
    cudaEventDefault = 0x0,
    cudaEventBlockingSync = 0x1,
    cudaEventDisableTiming = 0x2,
};

enum {
    cudaStreamDefault = 0x0,
    cudaStreamNonBlocking = 0x1,
};

struct cudaUUID_t {
    char bytes[16];
};

/* The fields of cudaDeviceProp that the emulator fills (the toolkit's struct has more). */
struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    size_t totalConstMem;
    int major;
    int minor;
    int multiProcessorCount;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    size_t sharedMemPerBlockOptin;
    int memoryBusWidth;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
    int concurrentKernels;
    int asyncEngineCount;
    int unifiedAddressing;
    int integrated;
};

/* ---- Devices ------------------------------------------------------------------------------ */

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
/* the emulator's own number, CUDA's encoding (major·1000 + minor·10): 0.0 */
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);

/* ---- Errors -------------------------------------------------------------------------------- */

cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);

/* ---- Memory --------------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMallocHost(void **ptr, size_t bytes);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
/* height pieces of width bytes, one every spitch bytes of src and dpitch of dst */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream = 0);
cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream = 0);

template <typename T> cudaError_t cudaMalloc(T **ptr, size_t bytes)
{
    return cudaMalloc(reinterpret_cast<void **>(ptr), bytes);
}
template <typename T> cudaError_t cudaMallocHost(T **ptr, size_t bytes)
{
    return cudaMallocHost(reinterpret_cast<void **>(ptr), bytes);
}

/* ---- Streams and events ------------------------------------------------------------------- */

cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* ---- Kernels ------------------------------------------------------------------------------ */

/* MaxDynamicSharedMemorySize: 0 .. sharedMemPerBlockOptin; a launch asking for more
 * dynamic shared memory than its kernel's limit (48 KiB unless raised) fails with
 * cudaErrorInvalidConfiguration. */
cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value);
template <typename T> cudaError_t cudaFuncSetAttribute(T *func, cudaFuncAttribute attr, int value)
{
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(func), attr, value);
}

#include "pt_emu.h"

#endif
