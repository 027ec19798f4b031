/*
 * The CUDA emulator's basic types (kernels/emu/, the PT_CUDA_EMU build): the vector
 * types of CUDA's vector_types.h that kernels/cuda/ uses (uint3, dim3, float2, uint4,
 * ...), with CUDA's sizes and alignments, the handle and error types that both the
 * device side (pt_emu.h) and the runtime (cuda_runtime.h) need, and the bit cast that
 * the intrinsics, the bf16 conversions and the scheduler's warp collectives share. Written for this
 * project from NVIDIA's documentation, not copied from the toolkit; host C++17 only.
 */
#ifndef PT_EMU_TYPES_H
#define PT_EMU_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- Vector types (CUDA Programming Guide, "Built-in Vector Types") ------------------- */

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) int2 {
    int x, y;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(16) double2 {
    double x, y;
};

static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}

/* ---- Bits ----------------------------------------------------------------------------- */

namespace pt_emu {

/* v's bits as a To of the same size (C++20's std::bit_cast) */
template <typename To, typename From> inline To bit_cast(const From &v)
{
    static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
    To r;
    memcpy(&r, &v, sizeof r);
    return r;
}

} // namespace pt_emu

/* ---- Errors and handles (CUDA Runtime API, "Data types") ------------------------------ */

/* The codes the emulator returns, with the toolkit's values so that printed numbers mean
 * the same thing. */
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#endif
