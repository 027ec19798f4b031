/*
 * Internals shared by the CUDA emulator's sources (the .cpp files of kernels/emu/), not part of any
 * interface: the fibers that carry emulated threads (emu_fiber.cpp), and the runtime's
 * error state, handles and per-kernel limits that the scheduler (emu_sched.cpp) and the
 * cuBLASLt stand-in (emu_cublaslt.cpp) consult (emu_runtime.cpp).
 */
#ifndef PT_EMU_INTERNAL_H
#define PT_EMU_INTERNAL_H

#include <stddef.h>

#include "cuda_runtime.h"

#if !defined(__x86_64__) || defined(PT_EMU_UCONTEXT)
#define PT_EMU_FIBER_UCONTEXT 1
#include <ucontext.h>
#endif

namespace pt_emu {

/* ---- Fibers (emu_fiber.cpp) --------------------------------------------------------------- */

/* A saved execution context: a stack pointer (x86-64, a few instructions to switch) or a
 * ucontext_t elsewhere. */
struct fiber {
#ifdef PT_EMU_FIBER_UCONTEXT
    ucontext_t uc;
    void (*fn)(void *);
    void *arg;
#else
    void *sp;
#endif
};

/* Prepares f to run fn(arg) on stack number slot (one per thread of a block, kept for
 * the process, with a guard page below) when first switched to. fn must never return:
 * it switches away for good instead. NULL when the stack cannot be mapped. */
fiber *fiber_start(fiber *f, int slot, void (*fn)(void *), void *arg);
/* Saves the running context in from and continues to. */
void fiber_switch(fiber *from, fiber *to);

/* ---- Runtime state (emu_runtime.cpp) ------------------------------------------------------ */

/* The sticky error, cudaSuccess when none. */
cudaError_t sticky_error();
/* Records a kernel fault: sticky from now on (until cudaDeviceReset). */
void set_sticky(cudaError_t e);
/* Records error for cudaGetLastError (when not cudaSuccess) and returns it. */
cudaError_t set_error(cudaError_t e);
/* Whether s is 0 (the legacy default stream) or a live stream. */
bool stream_valid(cudaStream_t s);
/* The sticky error, or cudaErrorInvalidResourceHandle for a bad stream, recorded for
 * cudaGetLastError; else cudaSuccess: what a call on a stream (the runtime's, CUB's)
 * checks first. */
cudaError_t library_call_check(cudaStream_t stream);
/* The dynamic shared memory limit of kernel (cudaFuncSetAttribute, else 48 KiB). */
size_t smem_limit(const void *kernel);

/* H100 SXM figures (NVIDIA H100 Tensor Core GPU Architecture whitepaper, table 3, and the
 * CUDA C++ Programming Guide's table of compute capability 9.0). */
enum : size_t {
    DEV_SM_COUNT = 132,
    DEV_SMEM_DEFAULT = 48 * 1024,
    DEV_SMEM_OPTIN = 227 * 1024,
    DEV_SMEM_PER_SM = 228 * 1024,
    DEV_MAX_THREADS = 1024,
};

} // namespace pt_emu

#endif
