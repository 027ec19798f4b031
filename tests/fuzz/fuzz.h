/*
 * What the libFuzzer harnesses of tests/fuzz/ share: the fuzz input as a C string for
 * the parsers that read text, and as a temporary file for those that only take a path.
 * Nothing here keeps state between inputs; every harness frees what it made.
 */
#ifndef PT_FUZZ_H
#define PT_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The input as a malloc'd NUL-terminated string (cut at an embedded NUL, as a C
 * parser sees it); the caller frees. Aborts when out of memory: a harness has no
 * better answer. */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Writes the input to a new file /tmp/ptfuzz-XXXXXX whose name goes into path[64];
 * the caller unlinks it. Aborts when the file cannot be written (a full /tmp is no
 * finding). */
static inline void fuzz_file(const uint8_t *data, size_t size, char path[64])
{
    snprintf(path, 64, "/tmp/ptfuzz-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    for (size_t at = 0; at < size;) {
        ssize_t n = write(fd, data + at, size - at);
        if (n <= 0)
            abort();
        at += (size_t)n;
    }
    close(fd);
}

/* Writes data[0, size) as the file dir/name, for the parsers that read a folder.
 * Aborts when it cannot (a full /tmp is no finding). */
static inline void fuzz_put(const char *dir, const char *name, const void *data, size_t size)
{
    char path[256];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        abort();
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
}

/* An assertion of the property a harness checks beyond "no crash" (a spec written
 * out reads back the same): a failure aborts, which libFuzzer reports as a crash. */
#define FUZZ_CHECK(cond)                                                             \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* The harness of a spec reader (model, cluster, stack: pt_<T>_from_json,
 * pt_<T>_validate, pt_<T>_to_json over planner/specjson.c): a spec it accepts must also
 * validate, and must read back unchanged from the JSON written for it. */
#define FUZZ_SPEC_HARNESS(T)                                                         \
    int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)                     \
    {                                                                                \
        char *text = fuzz_text(data, size);                                          \
        pt_##T v;                                                                    \
        pt_err err;                                                                  \
        if (pt_##T##_from_json(text, "<fuzz>", &v, &err) == 0) {                     \
            FUZZ_CHECK(pt_##T##_validate(&v, "<fuzz>", &err) == 0);                  \
            char *out = pt_##T##_to_json(&v);                                        \
            pt_##T back;                                                             \
            FUZZ_CHECK(out && pt_##T##_from_json(out, "<written>", &back, &err) == 0); \
            char *again = pt_##T##_to_json(&back);                                   \
            FUZZ_CHECK(again && strcmp(out, again) == 0);                            \
            free(again);                                                             \
            free(out);                                                               \
        }                                                                            \
        free(text);                                                                  \
        return 0;                                                                    \
    }

#endif
