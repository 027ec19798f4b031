/*
 * Test-only controls of the CUDA emulator (PT_CUDA_EMU), for tests/kernels/test_emu.cpp
 * (and the call count for test_kernels_cuda_gemm.c):
 * choose the scheduling order in-process instead of through PT_EMU_ORDER and
 * PT_EMU_SEED, and read the report of the last kernel fault. Not for the backend.
 */
#ifndef PT_EMU_TEST_H
#define PT_EMU_TEST_H

#include <stdint.h>

/* How many cublasLtMatmul calls the emulator's cuBLASLt has run (emu_cublaslt.cpp):
 * one batched call or one per product tells which path an op took. C linkage, for the
 * C tests too. */
#ifdef __cplusplus
extern "C"
#endif
uint64_t pt_emu_lt_matmuls(void);

#ifdef __cplusplus
namespace pt_emu {

enum { ORDER_FORWARD, ORDER_REVERSE, ORDER_SHUFFLE };

/* The order threads run in between barriers, for every later launch; seed picks the
 * shuffles (each block of each launch gets its own permutation from it). */
void set_schedule(int order, uint64_t seed);
/* The report of the last kernel fault (what stderr got), "" when there was none. */
const char *last_fault();

} // namespace pt_emu
#endif

#endif
