/*
 * plan.json tests: a plan written and read back is the same plan; the file is
 * written whole or not at all; and every kind of damage a hand edit can do is
 * refused with a message naming the file and the field.
 *   usage: test_plan SCRATCH_DIR
 */
#include "check.h"
#include "planner.h"

#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

/* The sample plans: bf16 on DGX A100, or (fp8_sample) FP8 with delayed scaling on DGX
 * H100. */
static bool fp8_sample;

static pt_plan sample_plan(void)
{
    pt_plan p = {.format_version = PT_PLAN_FORMAT_VERSION, .created_by = "test"};
    pt_err err;
    CHECK_INT(pt_model_get("gpt2-124m", &p.model, &err), 0);
    CHECK_INT(pt_cluster_get(fp8_sample ? "dgx-h100" : "dgx-a100-80g", &p.cluster, &err), 0);
    pt_train_default(&p.train, &p.cluster);
    if (fp8_sample)
        p.train.fp8 = (pt_fp8){.recipe = PT_FP8_DELAYED, .history = 16};
    p.train.global_batch = 64;
    pt_run_opts_default(&p.run, &p.model);
    snprintf(p.run.data, sizeof p.run.data, "tokens.bin");
    pt_layout_default(&p.layout);
    CHECK_INT(pt_layout_parse("tp=2,pp=2,vp=2,dp=2,zero=1,sp=1,recompute=selective", 8, 64,
                              &p.layout, &err), 0);
    pt_candidate c;
    CHECK_INT(pt_evaluate(&p.model, &p.cluster, &p.train, NULL, &p.layout, NULL, &c, &err), 0);
    p.memory = c.memory;
    p.predicted = c.predicted;
    pt_costdb_identity(NULL, &p.costs);
    return p;
}

static void test_round_trip(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/plan_rt.json", dir);
    pt_plan p = sample_plan(), back;
    pt_err err;
    CHECK_INT(pt_plan_write(&p, path, &err), 0);
    CHECK_INT(pt_plan_read(path, &back, &err), 0);
    char a[256], b[256];
    pt_layout_format(&p.layout, a, sizeof a);
    pt_layout_format(&back.layout, b, sizeof b);
    CHECK(strcmp(a, b) == 0);
    CHECK_INT(back.layout.n_micro, p.layout.n_micro);
    CHECK(strcmp(back.model.name, "gpt2-124m") == 0);
    CHECK_INT(back.cluster.devices_per_node, 8);
    CHECK(back.cluster.inter.nics == 8 && back.cluster.inter.nic_bw_Bps == 0); /* not kept */
    CHECK_INT(back.train.global_batch, 64);
    CHECK_INT(back.run.seed, 1234);
    CHECK(strcmp(back.run.data, "tokens.bin") == 0);
    CHECK(back.predicted.step_time_s == p.predicted.step_time_s);
    CHECK(back.predicted.mfu == p.predicted.mfu);
    CHECK(back.memory.total_bytes == llround(p.memory.total_bytes));
    CHECK(strcmp(back.costs.fingerprint, p.costs.fingerprint) == 0);
    /* No temporary file is left behind. */
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    for (struct dirent *e; d && (e = readdir(d));)
        CHECK(strncmp(e->d_name, "plan_rt.json.tmp", 16) != 0);
    if (d)
        closedir(d);
    /* Writing into a missing folder fails cleanly. */
    snprintf(path, sizeof path, "%s/no/such/dir/plan.json", dir);
    CHECK_INT(pt_plan_write(&p, path, &err), -1);
    CHECK_STR_HAS(err.msg, "no/such/dir");
}

/* Writes the sample plan with `from` replaced by `to` and expects `needle` in the
 * error reading it. */
static void expect_damage(const char *dir, const char *from, const char *to, const char *needle)
{
    pt_plan p = sample_plan();
    json_t *j = pt_plan_json(&p);
    char *text = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    json_decref(j);
    char *at = strstr(text, from);
    if (!at) {
        fprintf(stderr, "fixture lacks '%s'\n", from);
        pt_check_failures++;
        free(text);
        return;
    }
    size_t n = strlen(text) + strlen(to) + 1;
    char *edited = malloc(n);
    snprintf(edited, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    char path[512];
    snprintf(path, sizeof path, "%s/plan_bad.json", dir);
    FILE *f = fopen(path, "w");
    fputs(edited, f);
    fclose(f);
    pt_plan back;
    pt_err err = {""};
    CHECK_INT(pt_plan_read(path, &back, &err), -1);
    CHECK_STR_HAS(err.msg, "plan_bad.json");
    CHECK_STR_HAS(err.msg, needle);
    free(text);
    free(edited);
}

static void test_damage(const char *dir)
{
    expect_damage(dir, "\"format_version\": 1", "\"format_version\": 2", "format_version 2");
    expect_damage(dir, "\"tp\": 2", "\"tp\": 3", "layout.string");
    expect_damage(dir, "\"string\": \"tp=2", "\"string\": \"tp=4", "layout.string");
    expect_damage(dir, "\"zero\": 1", "\"zero\": 7", "layout.zero");
    expect_damage(dir, "\"recompute\": \"selective\"",
                  "\"recompute\": \"selective\", \"recompute_modules\": \"norm+act\"",
                  "field 'layout.recompute_modules' = \"norm+act\": expected modules joined by "
                  "'+'");
    expect_damage(dir, "\"recompute\": \"selective\"",
                  "\"recompute\": \"full\", \"recompute_modules\": \"moe\"",
                  "with recompute \"selective\"");
    /* a list the layout string does not say */
    expect_damage(dir, "\"recompute\": \"selective\"",
                  "\"recompute\": \"selective\", \"recompute_modules\": \"moe\"",
                  "layout.string");
    expect_damage(dir, "\"schedule\": \"interleaved\",\n \"rank_order\"",
                  "\"schedule\": \"1f1b\",\n \"rank_order\"", "disagrees with layout.schedule");
    expect_damage(dir, "\"global_batch\": 64", "\"global_batch\": 65", "invalid (batch_dp)");
    expect_damage(dir, "\"global_batch\": 64", "\"global_batch\": 128", "n_micro");
    /* one call per gradient element made a two-step run take minutes */
    expect_damage(dir, "\"bucket_bytes\": 26214400", "\"bucket_bytes\": 1",
                  "training.bucket_bytes");
    expect_damage(dir, "\"precision\": \"bf16\"", "\"precision\": \"fp4\"", "training.precision");
    expect_damage(dir, "\"heads\": 12", "\"heads\": 7", "heads");
    /* the cluster has no peak for the precision the plan trains in */
    expect_damage(dir, "\"bf16\": 312000000000000.0", "\"bf16\": 0",
                  "cluster 'dgx-a100-80g': field 'device.peak_flops.bf16' is absent or 0");
    expect_damage(dir, "\"bf16\": 312000000000000.0,", "",
                  "field 'device.peak_flops.bf16' is absent or 0 (unsupported), but precision "
                  "bf16 computes in bf16");
    /* every problem of the cluster, not only the first */
    expect_damage(dir, "\"memory_bytes\": 85899345920", "\"memroy_bytes\": 8.5e10, \"nics\": 1",
                  "unknown field 'cluster.device.memroy_bytes' (did you mean 'memory_bytes'?)\n");
    expect_damage(dir, "\"memory_bytes\": 85899345920", "\"memroy_bytes\": 8.5e10, \"nics\": 1",
                  "plan_bad.json: unknown field 'cluster.device.nics' (expected one of: name, ");
    /* min_lr written with a 9 in front: 9.6e-4 against lr 6e-4, a rate that would climb */
    expect_damage(dir, "\"min_lr\": ", "\"min_lr\": 9", "'training.min_lr' = 0.00096 is above");
    expect_damage(dir, "\"steps\": 50", "\"steps\": 0", "training.steps");
    expect_damage(dir, "\"steps\": 50", "\"steps\": \"many\"", "training.steps");
    expect_damage(dir, "\"mfu\": ", "\"mfu\": -1, \"x\": ", "predicted");
    expect_damage(dir, "\"fingerprint\"", "\"fingerprintz\"", "fingerprintz");
    expect_damage(dir, "\"layout\": {", "\"layout\": 5, \"old\": {", "layout");
    expect_damage(dir, "{", "{,", "plan_bad.json:1:");
    /* a world size beyond the limit (or beyond int64: 2^30 per field allows 2^120) is
     * refused before anything uses it, not wrapped to a small number */
    expect_damage(dir, "\"cp\": 1,\n  \"dp\": 2", "\"cp\": 1073741824,\n  \"dp\": 1073741824",
                  "their product (the world size) is more than 1073741824 ranks");
    pt_plan p;
    pt_err err;
    CHECK_INT(pt_plan_read("/no/such/plan.json", &p, &err), -1);
    CHECK_STR_HAS(err.msg, "/no/such/plan.json");
}

/* training.fp8: written only when on, read back, and each bad field named. */
static void test_fp8(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/plan_fp8.json", dir);
    pt_plan p = sample_plan(), back;
    pt_err err;
    json_t *j = pt_plan_json(&p);
    json_t *f = json_object_get(json_object_get(j, "training"), "fp8");
    CHECK(f && strcmp(json_string_value(json_object_get(f, "recipe")), "delayed") == 0);
    CHECK_INT(json_integer_value(json_object_get(f, "amax_history")), 16);
    CHECK(json_is_false(json_object_get(f, "emulated")));
    json_decref(j);
    CHECK_INT(pt_plan_write(&p, path, &err), 0);
    CHECK_INT(pt_plan_read(path, &back, &err), 0);
    CHECK_INT(back.train.fp8.recipe, PT_FP8_DELAYED);
    CHECK_INT(back.train.fp8.history, 16);
    CHECK(!back.train.fp8.emulated);
    /* a recipe outside the enum (no reader writes one) is refused with the recipes' names */
    pt_train odd = back.train;
    odd.fp8.recipe = PT_FP8_COUNT;
    CHECK_INT(pt_train_check_fp8(&odd, &back.cluster, &err), -1);
    CHECK_STR_HAS(err.msg, "is not one of off, current, delayed, blockwise, "
                           "rowwise");
    const char *fp8 = "\"fp8\": {\n   \"recipe\": \"delayed\",\n   \"amax_history\": 16,\n"
                      "   \"emulated\": false,\n   \"param_gather\": false\n  }";
    expect_damage(dir, "\"recipe\": \"delayed\"", "\"recipe\": \"weekly\"",
                  "'training.fp8.recipe' = \"weekly\": expected current, delayed");
    expect_damage(dir, "\"recipe\": \"delayed\"", "\"recipe\": \"off\"",
                  "'training.fp8.recipe' = \"off\"");
    expect_damage(dir, "\"amax_history\": 16", "\"amax_history\": 0",
                  "'training.fp8.amax_history' = 0: expected 1 to");
    expect_damage(dir, "\"amax_history\": 16", "\"amax_history\": \"long\"",
                  "training.fp8.amax_history");
    expect_damage(dir, "\"emulated\": false", "\"emulated\": 0", "training.fp8.emulated");
    expect_damage(dir, "\"emulated\": false", "\"emulated\": false, \"margin\": 0",
                  "training.fp8.margin");
    expect_damage(dir, fp8, "\"fp8\": \"delayed\"", "training.fp8");
    expect_damage(dir, "\"param_gather\": false", "\"param_gather\": \"yes\"",
                  "training.fp8.param_gather");
    /* the FP8 parameter gather on a stack that has none (the sample's, ptrun's) */
    expect_damage(dir, "\"param_gather\": false", "\"param_gather\": true",
                  "FP8 parameter gather: stack");
    /* emulation asked for on a device with FP8 */
    expect_damage(dir, "\"emulated\": false", "\"emulated\": true",
                  "FP8 emulation is for a device without FP8");
    /* absent: off */
    fp8_sample = false;
    p = sample_plan();
    j = pt_plan_json(&p);
    CHECK(json_object_get(json_object_get(j, "training"), "fp8") == NULL);
    json_decref(j);
    CHECK_INT(pt_plan_write(&p, path, &err), 0);
    CHECK_INT(pt_plan_read(path, &back, &err), 0);
    CHECK_INT(back.train.fp8.recipe, PT_FP8_OFF);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    test_round_trip(dir);
    test_damage(dir);
    fp8_sample = true;
    test_fp8(dir);
    return pt_check_result();
}
