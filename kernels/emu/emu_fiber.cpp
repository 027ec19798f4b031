/*
 * Fibers for the CUDA emulator: each emulated thread of a block runs on a stack of its
 * own and gives control back to the scheduler at every barrier. On x86-64 a switch is a
 * few instructions (the System V ABI's callee-saved registers, MXCSR and the x87 control
 * word pushed on the old stack, the stack pointer exchanged); a block of a few hundred
 * threads meeting at every warp shuffle switches millions of times, which ucontext's
 * swapcontext (a system call per switch, for the signal mask) would make slow. Other
 * machines, and builds with -DPT_EMU_UCONTEXT, use makecontext/swapcontext.
 *
 * Stacks: one per thread slot of a block (at most 1024), mapped on first use and kept
 * for the process, 256 KiB each with an inaccessible page below, so an overflow faults
 * instead of writing over a neighbour. Pages are committed as they are touched.
 */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu_internal.h"

namespace pt_emu {

namespace {

constexpr size_t STACK_BYTES = 256 * 1024;

char *stack_base[DEV_MAX_THREADS]; /* lowest usable byte of each slot's stack, or NULL */

char *stack_of(int slot)
{
    if (slot < 0 || slot >= (int)DEV_MAX_THREADS)
        return NULL;
    if (!stack_base[slot]) {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void *m = mmap(NULL, STACK_BYTES + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        if (mprotect(m, page, PROT_NONE) != 0) {
            munmap(m, STACK_BYTES + page);
            return NULL;
        }
        stack_base[slot] = (char *)m + page;
    }
    return stack_base[slot];
}

/* The top of a slot's stack, a little lower for each slot: stacks 256 KiB apart would
 * all start in the same cache sets, and every switch would evict another thread's top. */
char *stack_top(char *base, int slot)
{
    return base + STACK_BYTES - (size_t)(slot % 61) * 272;
}

} // namespace

#ifndef PT_EMU_FIBER_UCONTEXT

/* pt_emu_fiber_switch(void **save_sp, void *new_sp): push the callee-saved registers and
 * the floating-point control words, save rsp, load the other stack, pop its words and
 * return into it. pt_emu_fiber_entry: the first return of a new fiber lands here, with
 * the function in r13 and its argument in r12. */
asm(".text\n"
    ".globl pt_emu_fiber_switch\n"
    ".hidden pt_emu_fiber_switch\n"
    ".type pt_emu_fiber_switch, @function\n"
    "pt_emu_fiber_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size pt_emu_fiber_switch, .-pt_emu_fiber_switch\n"
    ".globl pt_emu_fiber_entry\n"
    ".hidden pt_emu_fiber_entry\n"
    ".type pt_emu_fiber_entry, @function\n"
    "pt_emu_fiber_entry:\n"
    "    movq %r12, %rdi\n"
    "    callq *%r13\n"
    "    ud2\n"
    ".size pt_emu_fiber_entry, .-pt_emu_fiber_entry\n");

extern "C" void pt_emu_fiber_switch(void **save_sp, void *new_sp);
extern "C" void pt_emu_fiber_entry(void);

fiber *fiber_start(fiber *f, int slot, void (*fn)(void *), void *arg)
{
    char *base = stack_of(slot);
    if (!base)
        return NULL;
    /* the top, 16-byte aligned: after the switch's final ret pops the entry address, rsp
     * is the top again, so the call in pt_emu_fiber_entry enters fn with rsp = 8 mod 16
     * as the ABI wants */
    uint64_t *sp = (uint64_t *)(((uintptr_t)stack_top(base, slot)) & ~(uintptr_t)15);
    uint32_t mxcsr = 0;
    uint16_t fpcw = 0;
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpcw));
    *--sp = (uint64_t)(uintptr_t)&pt_emu_fiber_entry;
    *--sp = 0;                        /* rbp */
    *--sp = 0;                        /* rbx */
    *--sp = (uint64_t)(uintptr_t)arg; /* r12 */
    *--sp = (uint64_t)(uintptr_t)fn;  /* r13 */
    *--sp = 0;                        /* r14 */
    *--sp = 0;                        /* r15 */
    *--sp = (uint64_t)mxcsr | (uint64_t)fpcw << 32; /* as the switch stores them */
    f->sp = sp;
    return f;
}

void fiber_switch(fiber *from, fiber *to) { pt_emu_fiber_switch(&from->sp, to->sp); }

#else

namespace {
/* makecontext passes int arguments only: the fiber's address goes in two halves */
void start_trampoline(unsigned hi, unsigned lo)
{
    fiber *f = (fiber *)(uintptr_t)((uint64_t)hi << 32 | lo);
    f->fn(f->arg);
}
} // namespace

fiber *fiber_start(fiber *f, int slot, void (*fn)(void *), void *arg)
{
    char *base = stack_of(slot);
    if (!base || getcontext(&f->uc) != 0)
        return NULL;
    f->uc.uc_stack.ss_sp = base;
    f->uc.uc_stack.ss_size = (size_t)(stack_top(base, slot) - base);
    f->uc.uc_link = NULL;
    f->fn = fn;
    f->arg = arg;
    const uint64_t addr = (uint64_t)(uintptr_t)f;
    makecontext(&f->uc, (void (*)())start_trampoline, 2, (unsigned)(addr >> 32),
                (unsigned)addr);
    return f;
}

void fiber_switch(fiber *from, fiber *to) { swapcontext(&from->uc, &to->uc); }

#endif

} // namespace pt_emu
