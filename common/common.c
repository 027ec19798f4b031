/*
 * Error reporting for library code, checked arithmetic on sizes, the names of the data
 * types, UTF-8 and JSON strings: the small vocabulary every library of the project
 * shares. Library functions fill a pt_err and return -1; only tools/ print it and
 * choose an exit code.
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

size_t pt_utf8_char(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t k = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
             : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (k == 0 || k > n)
        return 0;
    unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
    unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    if (s[1] < lo || s[1] > hi)
        return 0;
    uint32_t v = c & (0x7f >> k);
    for (size_t i = 1; i < k; i++) {
        if (i > 1 && (s[i] & 0xc0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    *cp = v;
    return k;
}

void pt_json_put_string(FILE *f, const char *s)
{
    const unsigned char *c = (const unsigned char *)s;
    size_t n = strlen(s);
    putc('"', f);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = pt_utf8_char(c + i, n - i, &cp);
        if (k == 0) {
            fputs("\\ufffd", f); /* the replacement character */
            i++;
        } else if (c[i] == '"' || c[i] == '\\') {
            fprintf(f, "\\%c", c[i]);
        } else if (c[i] < 0x20) {
            fprintf(f, "\\u%04x", c[i]);
        } else {
            fwrite(c + i, 1, k, f);
        }
        i += k;
    }
    putc('"', f);
}
