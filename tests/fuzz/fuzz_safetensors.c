/*
 * Fuzzes the safetensors reader (pt_st_open: runtime/safetensors.c) on the input
 * written to a temporary file. For a file it accepts, every tensor must be found by
 * name with its own dtype and shape, and every byte of its data must be readable
 * (AddressSanitizer checks that the data lie inside the file's buffer).
 */
#include "fuzz.h"
#include "runtime.h"

/* Reads every byte of t's data, so that a tensor pointing outside its buffer faults. */
static size_t sum_bytes(const pt_st_tensor *t)
{
    size_t sum = 0;
    const unsigned char *b = t->data;
    for (size_t i = 0; i < t->bytes; i++)
        sum += b[i];
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    fuzz_file(data, size, path);
    pt_st_file *f;
    pt_err err;
    if (pt_st_open(path, &f, &err) == 0) {
        for (int i = 0; i < pt_st_count(f); i++) {
            const pt_st_tensor *t = pt_st_at(f, i), *found;
            FUZZ_CHECK(t && t->ndim >= 0 && t->ndim <= 4);
            FUZZ_CHECK(pt_st_get(f, t->name, t->dtype, t->ndim, t->shape, &found, &err) == 0);
            FUZZ_CHECK(sum_bytes(found) <= 255 * found->bytes);
        }
        (void)pt_st_meta(f, "format");
        pt_st_close(f);
    }
    unlink(path);
    return 0;
}
