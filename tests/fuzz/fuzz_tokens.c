/*
 * Fuzzes the token file loader (pt_tokens_load: runtime/data.c) on the input written
 * to a temporary file: an llm.c token file, or any other bytes as text. What it loads
 * then goes through what ptrun does with it: the vocabulary check, the validation
 * split and the sampler, whose windows must lie inside the tokens.
 */
#include "fuzz.h"
#include "runtime.h"

enum { SEQ = 4 }; /* s: short, so that small inputs reach the sampler */

/* One step of samples from the training split, checked against its bounds. */
static void sample(const pt_tokens *train)
{
    pt_sampler s;
    pt_err err;
    if (pt_sampler_init(&s, train, SEQ, 1234, &err) != 0)
        return;
    int32_t in[2 * SEQ], tgt[2 * SEQ]; /* (2, s) */
    for (int64_t g = 0; g < 3; g++) {
        int64_t at = pt_sampler_offset(&s, g);
        FUZZ_CHECK(at >= 0 && at + SEQ + 1 <= train->n);
    }
    pt_sampler_fill(&s, 0, 2, in, tgt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    fuzz_file(data, size, path);
    pt_tokens all;
    pt_err err;
    if (pt_tokens_load(path, &all, &err) == 0) {
        FUZZ_CHECK(all.n > 0 && all.tok);
        (void)pt_tokens_check_vocab(&all, 256, &err);
        pt_tokens train, val;
        if (pt_tokens_split(&all, 0.1, SEQ, &train, &val, &err) == 0) {
            sample(&train);
            pt_tokens_free(&train);
            pt_tokens_free(&val);
        }
        pt_tokens_free(&all);
    }
    unlink(path);
    return 0;
}
