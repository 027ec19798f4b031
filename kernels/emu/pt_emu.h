/*
 * The device side of the CUDA emulator (PT_CUDA_EMU): what nvcc gives every .cu file
 * without an include, so that the .cu files of kernels/cuda/ compile as host C++ with g++ and run on
 * the CPU. cuda_runtime.h includes this header, as nvcc's implicit headers are.
 *
 * Execution model (emu_sched.cpp). A launch runs its blocks one after another; each
 * thread of a block is a fiber with its own stack. Threads run until they reach a
 * barrier (__syncthreads, a warp collective) or return; between barriers they run in an
 * order chosen per launch: forward, reverse or a seeded shuffle (PT_EMU_ORDER,
 * PT_EMU_SEED; shuffle with a fixed seed by default), the first thread of the order
 * that can run always going first, so warps run ahead of each other and a missing
 * barrier changes results under some order. A barrier
 * that cannot complete (threads exited, or waiting at another barrier) ends the launch
 * with cudaErrorLaunchFailure, sticky as a real kernel fault is, and a report on stderr.
 * PT_EMU_TRACE=1 prints every launch (kernel, grid, block, shared memory) on stderr.
 *
 * What maps to what: __global__, __device__, __host__ and __launch_bounds__ disappear;
 * __forceinline__ is inline; __shared__ is static (one block runs at a time, and a
 * block's shared arrays start with what the previous block left, never zeros one could
 * rely on); dynamic shared memory is a per-block buffer filled with 0xff bytes (NaN as
 * fp32 and bf16) at the start of each block, reached through PT_DYNAMIC_SMEM
 * (kernels/cuda/cuda.cuh); threadIdx, blockIdx, blockDim and gridDim read the running
 * fiber's state; the fast-math intrinsics are libm's functions. Warp collectives
 * (shuffles, votes, __syncwarp, ldmatrix, mma) exchange values through two slots per
 * warp used alternately, so that a lane that runs ahead to the next collective never
 * overwrites a slot a slower lane still reads. Masks must name the same lanes at every
 * collective of a warp between two full-warp ones.
 *
 * Not emulated: timing, the memory model (every access is immediately visible, nothing
 * is cached or reordered), atomics, textures, cooperative groups, clusters.
 */
#ifndef PT_EMU_H
#define PT_EMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "pt_emu_types.h"

/* ---- Qualifiers --------------------------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static

/* ---- Built-in variables --------------------------------------------------------------------- */

namespace pt_emu {

/* the part of an emulated thread that kernels read */
struct thread_state {
    uint3 idx;
};

/* the block running now */
struct block_state {
    uint3 idx;
    dim3 dim, grid;
    unsigned char *smem; /* dynamic shared memory, the launch's smem bytes */
};

/* Set by the scheduler before it switches to a thread; only valid inside a kernel. */
extern __thread thread_state *self;
extern __thread block_state *block;

inline unsigned char *dynamic_smem() { return block->smem; }

} // namespace pt_emu

#define threadIdx (static_cast<const uint3 &>(::pt_emu::self->idx))
#define blockIdx (static_cast<const uint3 &>(::pt_emu::block->idx))
#define blockDim (static_cast<const dim3 &>(::pt_emu::block->dim))
#define gridDim (static_cast<const dim3 &>(::pt_emu::block->grid))
static constexpr int warpSize = 32;

/* ---- Barriers and warp collectives (emu_sched.cpp) ------------------------------------------ */

namespace pt_emu {

enum { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR };
enum { VOTE_BALLOT, VOTE_ANY, VOTE_ALL };

/* Every thread of the block must reach it. */
void syncthreads();
/* Every lane of mask must reach it. */
void syncwarp(unsigned mask);
/* A shuffle of 64 bits; mode is one of SHFL_*, arg the source lane, delta or lane mask,
 * width a power of two up to 32, as the CUDA Programming Guide's __shfl_*_sync. */
uint64_t shfl_bits(unsigned mask, uint64_t v, int mode, int arg, int width);
/* __ballot_sync (VOTE_BALLOT), __any_sync, __all_sync. */
unsigned vote(unsigned mask, int pred, int mode);

template <typename T> inline T shfl(unsigned mask, T v, int mode, int arg, int width)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "shuffles move values of up to 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = shfl_bits(mask, bits, mode, arg, width);
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}

/* ---- PTX operations of kernels/cuda/attention_tc.cu's wrappers (PTX ISA 8.x) -------------- */

/* cp.async.cg.shared.global [dst], [src], cp_bytes, src_bytes: copies src_bytes and
 * zero-fills the rest. The data lands at once in forward order, when a cp_async_wait
 * covers its group (or the thread returns) in reverse order, and either way, drawn per
 * copy, when shuffled: the two ends of the window in which a GPU may write it. */
void cp_async(void *dst, const void *src, int cp_bytes, int src_bytes);
/* cp.async.commit_group: the copies issued since the last commit form a group. */
void cp_async_commit();
/* cp.async.wait_group n: all committed groups but the newest n are complete. */
void cp_async_wait(int n);
/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: a warp collective; lane l gives the
 * address of row l % 8 of matrix l / 8 (16-byte aligned) and receives in r[i] two b16
 * elements of matrix i (the lower-indexed one in the low half): row l / 4, columns
 * 2(l % 4) and 2(l % 4) + 1, or with trans column l / 4, rows 2(l % 4) and 2(l % 4) + 1. */
void ldmatrix_x4(uint32_t r[4], const void *p, bool trans);
/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with d = c: a warp collective,
 * c += a · b with the fragment layouts of the PTX ISA's "Matrix Fragments for
 * mma.m16n8k16 with floating point type" (g = lane / 4, t = lane % 4):
 * a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..];
 * b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g];
 * c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1].
 * Products summed in fp32 over k in order, then added to c. */
void mma_m16n8k16_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

/* ---- Launches ---------------------------------------------------------------------------- */

typedef void (*entry_fn)(void *args);

/* Runs kernel over grid x block threads with smem bytes of dynamic shared memory on
 * stream, each thread calling entry(args). An invalid configuration is recorded for
 * cudaGetLastError and nothing runs; a fault ends the launch (see above). name is for
 * reports. Launches from several host threads run one at a time. */
void run(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem,
         cudaStream_t stream, entry_fn entry, void *args);

/* What PT_LAUNCH builds: holds the configuration; calling it with the kernel's arguments
 * (converted to the kernel's parameter types, as a <<<>>> launch does) runs the grid. */
template <typename... P> class launcher {
  public:
    launcher(void (*fn)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
             const char *name)
        : fn_(fn), grid_(grid), block_(block), smem_(smem), stream_(stream), name_(name)
    {
    }
    void operator()(P... args) const
    {
        call c{fn_, std::tuple<P...>(args...)};
        run(reinterpret_cast<const void *>(fn_), name_, grid_, block_, smem_, stream_,
            &call::enter, &c);
    }

  private:
    struct call {
        void (*fn)(P...);
        std::tuple<P...> args;
        /* each thread gets its own copies of the arguments, on its own stack */
        static void enter(void *p)
        {
            call *c = static_cast<call *>(p);
            std::apply(c->fn, c->args);
        }
    };
    void (*fn_)(P...);
    dim3 grid_, block_;
    size_t smem_;
    cudaStream_t stream_;
    const char *name_;
};

template <typename... P>
launcher<P...> launch(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, const char *name,
                      void (*fn)(P...))
{
    return launcher<P...>(fn, grid, block, smem, stream, name);
}

} // namespace pt_emu

/* ---- Intrinsics (CUDA Math API and Programming Guide) ----------------------------------------- */

inline void __syncthreads() { pt_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { pt_emu::syncwarp(mask); }

template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    return pt_emu::shfl(mask, v, pt_emu::SHFL_IDX, src, width);
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return pt_emu::shfl(mask, v, pt_emu::SHFL_UP, (int)delta, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return pt_emu::shfl(mask, v, pt_emu::SHFL_DOWN, (int)delta, width);
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    return pt_emu::shfl(mask, v, pt_emu::SHFL_XOR, lane_mask, width);
}
inline unsigned __ballot_sync(unsigned mask, int pred)
{
    return pt_emu::vote(mask, pred, pt_emu::VOTE_BALLOT);
}
inline int __any_sync(unsigned mask, int pred) { return (int)pt_emu::vote(mask, pred, pt_emu::VOTE_ANY); }
inline int __all_sync(unsigned mask, int pred) { return (int)pt_emu::vote(mask, pred, pt_emu::VOTE_ALL); }

inline unsigned __float_as_uint(float x) { return pt_emu::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned u) { return pt_emu::bit_cast<float>(u); }
inline int __float_as_int(float x) { return pt_emu::bit_cast<int>(x); }
inline float __int_as_float(int i) { return pt_emu::bit_cast<float>(i); }
inline long long __double_as_longlong(double x) { return pt_emu::bit_cast<long long>(x); }
inline double __longlong_as_double(long long u) { return pt_emu::bit_cast<double>(u); }

inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++, x >>= 1)
        r = r << 1 | (x & 1u);
    return r;
}

inline float __expf(float x) { return expf(x); }
inline float __exp2f(float x) { return exp2f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x > 1.0f ? 1.0f : x >= 0.0f ? x : 0.0f; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }

template <typename T> inline T __ldg(const T *p) { return *p; }

/* min and max over mixed integer types, as CUDA's overloads (the wider type wins);
 * floating point as fminf / fmaxf (a NaN loses) */
template <typename A, typename B>
inline typename std::common_type<A, B>::type min(A a, B b)
{
    typedef typename std::common_type<A, B>::type T;
    if constexpr (std::is_floating_point<T>::value)
        return fmin((T)a, (T)b);
    else
        return (T)b < (T)a ? (T)b : (T)a;
}
template <typename A, typename B>
inline typename std::common_type<A, B>::type max(A a, B b)
{
    typedef typename std::common_type<A, B>::type T;
    if constexpr (std::is_floating_point<T>::value)
        return fmax((T)a, (T)b);
    else
        return (T)a < (T)b ? (T)b : (T)a;
}

#endif
