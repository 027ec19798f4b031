/*
 * Fuzzes the model spec reader (pt_model_from_json: planner/model.c over planner/specjson.c).
 * A spec it accepts must also pass pt_model_validate, and must read back unchanged from
 * the JSON pt_model_to_json writes for it (FUZZ_SPEC_HARNESS, fuzz.h).
 */
#include "fuzz.h"
#include "planner.h"

FUZZ_SPEC_HARNESS(model)
