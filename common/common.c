/*
 * Error reporting for library code, checked arithmetic on sizes, and the names of the
 * data types: the small vocabulary every library of the project shares. Library functions fill a pt_err
 * and return -1; only tools/ print it and choose an exit code.
 */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int pt_err_set(pt_err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

bool pt_mul64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

bool pt_add64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

bool pt_prod64(const int64_t *factors, int n, int64_t *out)
{
    int64_t r = 1;
    for (int i = 0; i < n; i++)
        if (factors[i] < 0 || !pt_mul64(r, factors[i], &r))
            return false;
    *out = r;
    return true;
}

static const char *const dtype_names[PT_DTYPE_COUNT] = {"fp32", "tf32", "bf16", "fp16", "fp8"};

const char *pt_dtype_name(pt_dtype d)
{
    return (unsigned)d < PT_DTYPE_COUNT ? dtype_names[d] : "?";
}

int pt_dtype_parse(const char *text, pt_dtype *out, pt_err *err)
{
    for (int d = 0; d < PT_DTYPE_COUNT; d++)
        if (strcmp(text, dtype_names[d]) == 0) {
            *out = (pt_dtype)d;
            return 0;
        }
    return pt_err_set(err, "unknown data type '%s' (expected fp32, tf32, bf16, fp16 or fp8)",
                      text);
}
