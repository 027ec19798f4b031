/*
 * Fuzzes the run-record reader (pt_runrec_from_json: planner/runrec.c, what ptcalib
 * --run FILE reads and costs.db's framework_runs stores). A record it accepts must
 * write a stored form that reads back, and writes again, to the same text.
 */
#include "fuzz.h"
#include "planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    pt_runrec *r = malloc(2 * sizeof *r);
    if (!r)
        abort();
    pt_err err;
    if (pt_runrec_from_json(text, "<fuzz>", NULL, &r[0], &err) == 0) {
        char *out = pt_runrec_to_json(&r[0]);
        FUZZ_CHECK(out != NULL);
        FUZZ_CHECK(pt_runrec_from_json(out, "<stored>", NULL, &r[1], &err) == 0);
        char *again = pt_runrec_to_json(&r[1]);
        FUZZ_CHECK(again != NULL && strcmp(out, again) == 0);
        FUZZ_CHECK(r[0].measured_step_s == r[1].measured_step_s);
        free(again);
        free(out);
    }
    free(r);
    free(text);
    return 0;
}
