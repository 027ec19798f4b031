/*
 * Fault injection for the test build of ptrun and ptreport (ptrun_fault, ptreport_fault,
 * linked with -Wl,--wrap for the calls below): the N-th call that writes (fwrite, fputs,
 * pwrite), sizes (ftruncate), flushes, closes a written file, syncs or renames fails, and so does every later one, as on a
 * disk that has just filled up. SQLite's tests fail the N-th I/O for every N the same
 * way; tests/tools/cli_fault.sh runs every N and checks that nothing is lost or half-written
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
ssize_t __real_pwrite(int fd, const void *p, size_t n, off_t at);
int __real_ftruncate(int fd, off_t size);

/* One kind of call counted: the N-th and later ones fail (N from `at_env`), and the
 * count is written at exit to the file `count_env` names. */
typedef struct {
    const char *at_env, *count_env;
    long calls, fail_at;
    const char *count_file;
    int ready;
} counter;

static counter io = {"PT_FAULT_AT", "PT_FAULT_COUNT", 0, -1, NULL, 0};
static counter mem = {"PT_FAULT_ALLOC_AT", "PT_FAULT_ALLOC_COUNT", 0, -1, NULL, 0};

static void write_count(const counter *c)
{
    FILE *f = c->count_file ? fopen(c->count_file, "w") : NULL;
    if (f) {
        fprintf(f, "%ld\n", c->calls);
        __real_fclose(f);
    }
}

static void write_counts(void)
{
    write_count(&io);
    write_count(&mem);
}

/* Counts one call of c's kind; true (errno = err) when it must fail. */
static int hit(counter *c, int err)
{
    static int registered;
    if (!c->ready) {
        c->ready = 1;
        const char *at = getenv(c->at_env);
        c->fail_at = at ? atol(at) : -1;
        c->count_file = getenv(c->count_env);
        if (c->count_file && !registered) {
            registered = 1;
            atexit(write_counts);
        }
    }
    c->calls++;
    if (c->fail_at > 0 && c->calls >= c->fail_at) {
        errno = err;
        return 1;
    }
    return 0;
}

static int fault(int err)
{
    return hit(&io, err);
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

/* a checkpoint's pieces (runtime/trainer_ckpt.c) and the files they go into */
ssize_t __wrap_pwrite(int fd, const void *p, size_t n, off_t at)
{
    return fault(ENOSPC) ? -1 : __real_pwrite(fd, p, n, at);
}

int __wrap_ftruncate(int fd, off_t size)
{
    return fault(ENOSPC) ? -1 : __real_ftruncate(fd, size);
}

/* ---- allocations ---------------------------------------------------------------- */

static int alloc_fault(void)
{
    return hit(&mem, ENOMEM);
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
