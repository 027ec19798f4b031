/*
 * Fuzzes the cluster spec reader (pt_cluster_from_json: planner/cluster.c over planner/specjson.c).
 * A spec it accepts must also pass pt_cluster_validate, and must read back unchanged from
 * the JSON pt_cluster_to_json writes for it (FUZZ_SPEC_HARNESS, fuzz.h).
 */
#include "fuzz.h"
#include "planner.h"

FUZZ_SPEC_HARNESS(cluster)
