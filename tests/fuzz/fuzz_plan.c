/*
 * Fuzzes the plan.json reader (pt_plan_from_json: planner/plan.c, the text that
 * pt_plan_read reads from a file). A plan it accepts must read back to the same JSON
 * from the JSON pt_plan_json writes for it.
 */
#include "fuzz.h"
#include "planner.h"

/* The plan as the text plan.json holds; malloc'd. */
static char *plan_text(const pt_plan *p)
{
    json_t *j = pt_plan_json(p);
    FUZZ_CHECK(j != NULL);
    char *s = json_dumps(j, JSON_SORT_KEYS);
    json_decref(j);
    FUZZ_CHECK(s != NULL);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    pt_plan *p = malloc(2 * sizeof *p);
    if (!p)
        abort();
    pt_err err;
    if (pt_plan_from_json(text, "<fuzz>", &p[0], &err) == 0) {
        char *out = plan_text(&p[0]);
        FUZZ_CHECK(pt_plan_from_json(out, "<written>", &p[1], &err) == 0);
        char *again = plan_text(&p[1]);
        FUZZ_CHECK(strcmp(out, again) == 0);
        free(again);
        free(out);
    }
    free(p);
    free(text);
    return 0;
}
