/*
 * A minimal assertion kit for the unit tests: each CHECK prints the failing
 * expression with file and line and counts the failure; a test's main returns
 * pt_check_result() so that ctest sees a non-zero exit when anything failed.
 */
#ifndef PT_TEST_CHECK_H
#define PT_TEST_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int pt_check_failures;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);    \
            pt_check_failures++;                                                        \
        }                                                                               \
    } while (0)

#define CHECK_INT(got, want)                                                            \
    do {                                                                                \
        long long g_ = (long long)(got), w_ = (long long)(want);                        \
        if (g_ != w_) {                                                                 \
            fprintf(stderr, "%s:%d: %s = %lld, want %lld\n", __FILE__, __LINE__, #got,  \
                    g_, w_);                                                            \
            pt_check_failures++;                                                        \
        }                                                                               \
    } while (0)

/* Relative tolerance check: |got - want| <= rel * |want|. */
#define CHECK_NEAR(got, want, rel)                                                      \
    do {                                                                                \
        double g_ = (double)(got), w_ = (double)(want);                                 \
        if (!(fabs(g_ - w_) <= (rel) * fabs(w_))) {                                     \
            fprintf(stderr, "%s:%d: %s = %.10g, want %.10g (rel %g)\n", __FILE__,       \
                    __LINE__, #got, g_, w_, (double)(rel));                             \
            pt_check_failures++;                                                        \
        }                                                                               \
    } while (0)

#define CHECK_STR_HAS(hay, needle)                                                      \
    do {                                                                                \
        const char *h_ = (hay);                                                         \
        if (!h_ || !strstr(h_, (needle))) {                                             \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__,        \
                    __LINE__, h_ ? h_ : "(null)", (needle));                            \
            pt_check_failures++;                                                        \
        }                                                                               \
    } while (0)

#define CHECK_STR(got, want)                                                            \
    do {                                                                                \
        const char *g_ = (got), *w_ = (want);                                           \
        if (!g_ || strcmp(g_, w_) != 0) {                                               \
            fprintf(stderr, "%s:%d: \"%s\", want \"%s\"\n", __FILE__, __LINE__,        \
                    g_ ? g_ : "(null)", w_);                                            \
            pt_check_failures++;                                                        \
        }                                                                               \
    } while (0)

static inline int pt_check_result(void)
{
    if (pt_check_failures)
        fprintf(stderr, "%d check(s) failed\n", pt_check_failures);
    return pt_check_failures ? 1 : 0;
}

/* Writes n bytes to a new file at path, counting a failure when it cannot. */
static inline void check_write_file(const char *path, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK(fwrite(bytes, 1, n, f) == n);
    CHECK(fclose(f) == 0);
}

#endif
