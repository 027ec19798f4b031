/*
 * Fault injection for the test build of ptrun and ptreport (ptrun_fault, ptreport_fault,
 * linked with -Wl,--wrap for the calls below): the N-th call that writes, flushes,
 * closes a written file, syncs or renames fails, and so does every later one, as on a
 * disk that has just filled up. SQLite's tests fail the N-th I/O for every N the same
 * way; tests/cli_fault.sh runs every N and checks that nothing is lost or half-written
 * and that the failure is reported.
 *
 * Environment:
 *   PT_FAULT_AT=N     the N-th call (from 1) fails, and every later one; unset: none
 *   PT_FAULT_COUNT=F  at exit, the number of calls counted is written to file F (how
 *                     many N a test has to try)
 * Failed calls set errno to ENOSPC (EIO for fsync) and return their failure value;
 * fclose still closes the stream (the descriptor must not leak).
 *
 * Allocations (malloc, calloc, realloc in the project's own code; the shared libraries'
 * are not wrapped) have a counter of their own, for running out of memory:
 *   PT_FAULT_ALLOC_AT=N      the N-th allocation fails (NULL, ENOMEM), and every later one
 *   PT_FAULT_ALLOC_COUNT=F   at exit, the number of allocations counted is written to F
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
size_t __real_fwrite(const void *p, size_t size, size_t n, FILE *f);
int __real_fputs(const char *s, FILE *f);
int __real_fflush(FILE *f);
int __real_fclose(FILE *f);
int __real_fsync(int fd);
int __real_rename(const char *from, const char *to);

static long calls, fail_at = -1;
static const char *count_file;

static void write_count(void)
{
    FILE *f = fopen(count_file, "w");
    if (f) {
        fprintf(f, "%ld\n", calls);
        __real_fclose(f);
    }
}

/* Counts one call; true when it must fail. */
static int fault(int err)
{
    static int ready;
    if (!ready) {
        ready = 1;
        const char *at = getenv("PT_FAULT_AT");
        fail_at = at ? atol(at) : -1;
        count_file = getenv("PT_FAULT_COUNT");
        if (count_file)
            atexit(write_count);
    }
    calls++;
    if (fail_at > 0 && calls >= fail_at) {
        errno = err;
        return 1;
    }
    return 0;
}

/* Writes to stdout and stderr are not counted: the report of a failure must get out. */
static int counted(FILE *f)
{
    return f != stdout && f != stderr;
}

size_t __wrap_fwrite(const void *p, size_t size, size_t n, FILE *f)
{
    return counted(f) && fault(ENOSPC) ? 0 : __real_fwrite(p, size, n, f);
}

int __wrap_fputs(const char *s, FILE *f)
{
    return counted(f) && fault(ENOSPC) ? EOF : __real_fputs(s, f);
}

int __wrap_fflush(FILE *f)
{
    return f && counted(f) && fault(ENOSPC) ? EOF : __real_fflush(f);
}

int __wrap_fclose(FILE *f)
{
    if (counted(f) && fault(ENOSPC)) {
        __real_fclose(f);
        errno = ENOSPC;
        return EOF;
    }
    return __real_fclose(f);
}

int __wrap_fsync(int fd)
{
    return fault(EIO) ? -1 : __real_fsync(fd);
}

int __wrap_rename(const char *from, const char *to)
{
    return fault(ENOSPC) ? -1 : __real_rename(from, to);
}

/* ---- allocations ---------------------------------------------------------------- */

static long allocs, alloc_fail_at = -2;
static const char *alloc_count_file;

static void write_alloc_count(void)
{
    FILE *f = fopen(alloc_count_file, "w");
    if (f) {
        fprintf(f, "%ld\n", allocs);
        __real_fclose(f);
    }
}

static int alloc_fault(void)
{
    if (alloc_fail_at == -2) {
        const char *at = getenv("PT_FAULT_ALLOC_AT");
        alloc_fail_at = at ? atol(at) : -1;
        alloc_count_file = getenv("PT_FAULT_ALLOC_COUNT");
        if (alloc_count_file)
            atexit(write_alloc_count);
    }
    allocs++;
    if (alloc_fail_at > 0 && allocs >= alloc_fail_at) {
        errno = ENOMEM;
        return 1;
    }
    return 0;
}

void *__wrap_malloc(size_t n)
{
    return alloc_fault() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
    return alloc_fault() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
    return alloc_fault() ? NULL : __real_realloc(p, n);
}
