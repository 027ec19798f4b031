/*
 * Fuzzes the stack spec reader (pt_stack_from_json: planner/stack.c over
 * planner/specjson.c). A spec it accepts must also pass pt_stack_validate, and must
 * read back unchanged from the JSON pt_stack_to_json writes for it.
 */
#include "fuzz.h"
#include "planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    pt_stack s;
    pt_err err;
    if (pt_stack_from_json(text, "<fuzz>", &s, &err) == 0) {
        FUZZ_CHECK(pt_stack_validate(&s, "<fuzz>", &err) == 0);
        char *out = pt_stack_to_json(&s);
        pt_stack back;
        FUZZ_CHECK(out && pt_stack_from_json(out, "<written>", &back, &err) == 0);
        char *again = pt_stack_to_json(&back);
        FUZZ_CHECK(again && strcmp(out, again) == 0);
        free(again);
        free(out);
    }
    free(text);
    return 0;
}
