/*
 * Fuzzes the cluster spec reader (pt_cluster_from_json: planner/cluster.c over
 * planner/specjson.c). A spec it accepts must also pass pt_cluster_validate, and must
 * read back unchanged from the JSON pt_cluster_to_json writes for it.
 */
#include "fuzz.h"
#include "planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    pt_cluster c;
    pt_err err;
    if (pt_cluster_from_json(text, "<fuzz>", &c, &err) == 0) {
        FUZZ_CHECK(pt_cluster_validate(&c, "<fuzz>", &err) == 0);
        char *out = pt_cluster_to_json(&c);
        pt_cluster back;
        FUZZ_CHECK(out && pt_cluster_from_json(out, "<written>", &back, &err) == 0);
        char *again = pt_cluster_to_json(&back);
        FUZZ_CHECK(again && strcmp(out, again) == 0);
        free(again);
        free(out);
    }
    free(text);
    return 0;
}
