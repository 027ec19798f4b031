/*
 * Fuzzes the model spec reader (pt_model_from_json: planner/model.c over
 * planner/specjson.c). A spec it accepts must also pass pt_model_validate, and must
 * read back unchanged from the JSON pt_model_to_json writes for it.
 */
#include "fuzz.h"
#include "planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    pt_model m;
    pt_err err;
    if (pt_model_from_json(text, "<fuzz>", &m, &err) == 0) {
        FUZZ_CHECK(pt_model_validate(&m, "<fuzz>", &err) == 0);
        char *out = pt_model_to_json(&m);
        pt_model back;
        FUZZ_CHECK(out && pt_model_from_json(out, "<written>", &back, &err) == 0);
        char *again = pt_model_to_json(&back);
        FUZZ_CHECK(again && strcmp(out, again) == 0);
        free(again);
        free(out);
    }
    free(text);
    return 0;
}
