/*
 * Fuzzes the stack spec reader (pt_stack_from_json: planner/stack.c over planner/specjson.c).
 * A spec it accepts must also pass pt_stack_validate, and must read back unchanged from
 * the JSON pt_stack_to_json writes for it (FUZZ_SPEC_HARNESS, fuzz.h).
 */
#include "fuzz.h"
#include "planner.h"

FUZZ_SPEC_HARNESS(stack)
