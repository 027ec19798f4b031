/*
 * The CUDA emulator's runtime (cuda_runtime.h): the emulated device, its memory, streams,
 * events, kernel attributes and the error state, following NVIDIA's CUDA Runtime API
 * documentation for results and error codes. Device memory is host memory; what is
 * allocated is tracked so that frees, copies and memsets can be checked against it.
 * Everything here is guarded by one mutex except the last error, which is per host
 * thread as CUDA's is.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "emu_internal.h"

struct CUstream_st {
    unsigned flags;
};

struct CUevent_st {
    unsigned flags;
    bool recorded;
    double ms; /* host monotonic clock at the record */
};

namespace pt_emu {

namespace {

/* reported as totalGlobalMem; allocations beyond it fail as on the device */
constexpr size_t DEV_MEMORY = (size_t)80 << 30;

std::mutex mu;
std::map<uintptr_t, size_t> device_blocks; /* base -> bytes */
std::set<void *> host_blocks;
std::set<CUstream_st *> streams;
std::set<CUevent_st *> events;
std::unordered_map<const void *, size_t> smem_limits;
size_t device_bytes;
std::atomic<int> sticky{cudaSuccess};
thread_local cudaError_t last_error = cudaSuccess;

double now_ms()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* whether [p, p + bytes) lies inside one device allocation (caller holds mu) */
bool in_device(const void *p, size_t bytes)
{
    const uintptr_t a = (uintptr_t)p;
    auto it = device_blocks.upper_bound(a);
    if (it == device_blocks.begin())
        return false;
    --it;
    return a >= it->first && bytes <= it->second && a - it->first <= it->second - bytes;
}

/* the sticky error, recorded as the last one too, or cudaSuccess */
cudaError_t entry_check()
{
    const cudaError_t s = (cudaError_t)sticky.load();
    if (s != cudaSuccess)
        last_error = s;
    return s;
}

/* Create and Destroy of a stream or an event: a handle is valid while it is in live. */
template <typename T>
cudaError_t handle_create(std::set<T *> &live, T **out, bool flags_ok, const T &init)
{
    if (cudaError_t e = entry_check())
        return e;
    if (!out || !flags_ok)
        return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(mu);
    *out = new T(init);
    live.insert(*out);
    return cudaSuccess;
}

template <typename T> cudaError_t handle_destroy(std::set<T *> &live, T *h)
{
    if (cudaError_t e = entry_check())
        return e;
    std::lock_guard<std::mutex> lock(mu);
    if (!h || !live.erase(h))
        return set_error(cudaErrorInvalidResourceHandle);
    delete h;
    return cudaSuccess;
}

} // namespace

cudaError_t sticky_error() { return (cudaError_t)sticky.load(); }

void set_sticky(cudaError_t e) { sticky.store(e); }

cudaError_t set_error(cudaError_t e)
{
    if (e != cudaSuccess)
        last_error = e;
    return e;
}

bool stream_valid(cudaStream_t s)
{
    std::lock_guard<std::mutex> lock(mu);
    return s == NULL || streams.count(s) != 0;
}

cudaError_t library_call_check(cudaStream_t stream)
{
    if (cudaError_t e = entry_check())
        return e;
    return stream_valid(stream) ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}

size_t smem_limit(const void *kernel)
{
    std::lock_guard<std::mutex> lock(mu);
    auto it = smem_limits.find(kernel);
    return it == smem_limits.end() ? (size_t)DEV_SMEM_DEFAULT : it->second;
}

} // namespace pt_emu

using namespace pt_emu;

/* ---- Devices --------------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return set_error(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version)
{
    if (!version)
        return set_error(cudaErrorInvalidValue);
    *version = 0;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    return cudaDriverGetVersion(version);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device)
{
    if (!prop)
        return set_error(cudaErrorInvalidValue);
    if (device != 0)
        return set_error(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "NVIDIA H100 80GB HBM3 (pt_emu, on the CPU)");
    /* a fixed UUID, so that tools keying on it see one device */
    memcpy(prop->uuid.bytes, "pt_emu-h100-0000", 16);
    prop->totalGlobalMem = DEV_MEMORY;
    prop->sharedMemPerBlock = DEV_SMEM_DEFAULT;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = (int)DEV_MAX_THREADS;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 0x7fffffff;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->totalConstMem = 65536;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = (int)DEV_SM_COUNT;
    prop->l2CacheSize = 50 << 20;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->sharedMemPerMultiprocessor = DEV_SMEM_PER_SM;
    prop->regsPerMultiprocessor = 65536;
    prop->sharedMemPerBlockOptin = DEV_SMEM_OPTIN;
    prop->memoryBusWidth = 5120;
    prop->concurrentKernels = 1;
    prop->asyncEngineCount = 3;
    prop->unifiedAddressing = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    return device == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int *device)
{
    if (!device)
        return set_error(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return entry_check(); }

cudaError_t cudaDeviceReset(void)
{
    std::lock_guard<std::mutex> lock(mu);
    for (auto &b : device_blocks)
        free((void *)b.first);
    device_blocks.clear();
    device_bytes = 0;
    for (void *p : host_blocks)
        free(p);
    host_blocks.clear();
    for (CUstream_st *s : streams)
        delete s;
    streams.clear();
    for (CUevent_st *e : events)
        delete e;
    events.clear();
    smem_limits.clear();
    sticky.store(cudaSuccess);
    last_error = cudaSuccess;
    return cudaSuccess;
}

/* ---- Errors ---------------------------------------------------------------------------------- */

cudaError_t cudaGetLastError(void)
{
    const cudaError_t s = sticky_error();
    const cudaError_t e = s != cudaSuccess ? s : last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    const cudaError_t s = sticky_error();
    return s != cudaSuccess ? s : last_error;
}

const char *cudaGetErrorName(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
        return "unspecified launch failure (pt_emu: a kernel fault, reported on stderr)";
    }
    return "unrecognized error code";
}

/* ---- Memory ----------------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **ptr, size_t bytes)
{
    if (cudaError_t e = entry_check())
        return e;
    if (!ptr)
        return set_error(cudaErrorInvalidValue);
    *ptr = NULL;
    if (!bytes)
        return cudaSuccess;
    const size_t rounded = (bytes + 255) / 256 * 256;
    std::lock_guard<std::mutex> lock(mu);
    if (rounded < bytes || rounded > DEV_MEMORY - device_bytes)
        return set_error(cudaErrorMemoryAllocation);
    void *p = aligned_alloc(256, rounded);
    if (!p)
        return set_error(cudaErrorMemoryAllocation);
    memset(p, 0xff, rounded); /* NaN as fp32 and bf16: reads of unwritten memory show */
    device_blocks[(uintptr_t)p] = bytes;
    device_bytes += rounded;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
    if (cudaError_t e = entry_check())
        return e;
    if (!ptr)
        return cudaSuccess;
    std::lock_guard<std::mutex> lock(mu);
    auto it = device_blocks.find((uintptr_t)ptr);
    if (it == device_blocks.end())
        return set_error(cudaErrorInvalidValue);
    device_bytes -= (it->second + 255) / 256 * 256;
    device_blocks.erase(it);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes)
{
    if (cudaError_t e = entry_check())
        return e;
    if (!ptr)
        return set_error(cudaErrorInvalidValue);
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256 + (bytes ? 0 : 256));
    if (!p) {
        *ptr = NULL;
        return set_error(cudaErrorMemoryAllocation);
    }
    std::lock_guard<std::mutex> lock(mu);
    host_blocks.insert(p);
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr)
{
    if (cudaError_t e = entry_check())
        return e;
    if (!ptr)
        return cudaSuccess;
    std::lock_guard<std::mutex> lock(mu);
    if (!host_blocks.erase(ptr))
        return set_error(cudaErrorInvalidValue);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    if (cudaError_t e = entry_check())
        return e;
    if (!free_bytes || !total_bytes)
        return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(mu);
    *free_bytes = DEV_MEMORY - device_bytes;
    *total_bytes = DEV_MEMORY;
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    if (cudaError_t e = library_call_check(stream))
        return e;
    if (!bytes)
        return cudaSuccess;
    if (!dst || !src)
        return set_error(cudaErrorInvalidValue);
    {
        std::lock_guard<std::mutex> lock(mu);
        bool ok = true;
        switch (kind) {
        case cudaMemcpyHostToHost:
            break;
        case cudaMemcpyHostToDevice:
            ok = in_device(dst, bytes);
            break;
        case cudaMemcpyDeviceToHost:
            ok = in_device(src, bytes);
            break;
        case cudaMemcpyDeviceToDevice:
            ok = in_device(dst, bytes) && in_device(src, bytes);
            break;
        case cudaMemcpyDefault:
            /* unified addressing: each side is device memory or host memory, whole */
            break;
        default:
            return set_error(cudaErrorInvalidMemcpyDirection);
        }
        if (!ok)
            return set_error(cudaErrorInvalidValue);
    }
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream)
{
    /* the runtime refuses a pitch narrower than a row (cudaErrorInvalidPitchValue) */
    if (height && width && (dpitch < width || spitch < width))
        return set_error(cudaErrorInvalidValue);
    for (size_t r = 0; r < height; r++)
        if (cudaError_t e = cudaMemcpyAsync((char *)dst + r * dpitch,
                                            (const char *)src + r * spitch, width, kind, stream))
            return e;
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    return cudaMemcpyAsync(dst, src, bytes, kind, 0);
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream)
{
    if (cudaError_t e = library_call_check(stream))
        return e;
    if (!bytes)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(mu);
        if (!in_device(ptr, bytes))
            return set_error(cudaErrorInvalidValue);
    }
    memset(ptr, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *ptr, int value, size_t bytes)
{
    return cudaMemsetAsync(ptr, value, bytes, 0);
}

/* ---- Streams and events ------------------------------------------------------------------------ */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags)
{
    return handle_create(streams, stream, flags <= cudaStreamNonBlocking, CUstream_st{flags});
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) { return handle_destroy(streams, stream); }

/* every operation has finished when its call returns: a valid stream is always idle */
cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return library_call_check(stream); }

cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags)
{
    if (cudaError_t e = library_call_check(stream))
        return e;
    std::lock_guard<std::mutex> lock(mu);
    if (!events.count(event))
        return set_error(cudaErrorInvalidResourceHandle);
    return flags ? set_error(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags)
{
    return handle_create(events, event, flags <= (cudaEventBlockingSync | cudaEventDisableTiming),
                         CUevent_st{flags, false, 0.0});
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) { return handle_destroy(events, event); }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    if (cudaError_t e = library_call_check(stream))
        return e;
    std::lock_guard<std::mutex> lock(mu);
    if (!events.count(event))
        return set_error(cudaErrorInvalidResourceHandle);
    event->recorded = true;
    event->ms = now_ms();
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    if (cudaError_t e = entry_check())
        return e;
    std::lock_guard<std::mutex> lock(mu);
    return events.count(event) ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return cudaEventSynchronize(event); }

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (cudaError_t e = entry_check())
        return e;
    if (!ms)
        return set_error(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(mu);
    if (!events.count(start) || !events.count(end))
        return set_error(cudaErrorInvalidResourceHandle);
    /* an event never recorded, or created without timing, has no time */
    if (!start->recorded || !end->recorded || (start->flags & cudaEventDisableTiming) ||
        (end->flags & cudaEventDisableTiming))
        return set_error(cudaErrorInvalidResourceHandle);
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

/* ---- Kernels ------------------------------------------------------------------------------------ */

cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value)
{
    if (cudaError_t e = entry_check())
        return e;
    if (!func)
        return set_error(cudaErrorInvalidDevicePointer);
    switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize: {
        if (value < 0 || (size_t)value > DEV_SMEM_OPTIN)
            return set_error(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> lock(mu);
        smem_limits[func] = (size_t)value;
        return cudaSuccess;
    }
    case cudaFuncAttributePreferredSharedMemoryCarveout:
        /* a hint for the split of L1 and shared memory: nothing to split here */
        return value >= -1 && value <= 100 ? cudaSuccess : set_error(cudaErrorInvalidValue);
    }
    return set_error(cudaErrorInvalidValue);
}
