/*
 * The correction learned from measured runs (planner/calib.c) and the run record that
 * carries them (planner/runrec.c): a known compute scale (and a known full correction)
 * is recovered from synthetic runs; runs that a correction does not help are left
 * uncorrected; the leave-one-out error is each run predicted by the fit of the others,
 * checked against a closed form that never sees the run itself; one run gives its
 * compute scale unchecked, an implausible one none; applying a correction keeps the
 * breakdown summing to the step. Every bad field of a record is one error naming the
 * record and the field; a record reads back from its stored form.
 */
#include "check.h"
#include "planner.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A run whose zero-shot parts are (compute, comm, fixed) and whose measurement is
 * k_c·compute + k_m·comm + fixed + o, times (1 + noise). */
static pt_calib_point run(double compute, double comm, double fixed, double k_c, double k_m,
                          double o, double noise)
{
    double y = (k_c * compute + k_m * comm + fixed + o) * (1 + noise);
    return (pt_calib_point){compute, comm, fixed, y};
}

static void test_recovers_compute_scale(void)
{
    pt_calib_point v[6];
    static const double noise[6] = {0.01, -0.012, 0.008, -0.006, 0.011, -0.009};
    for (int i = 0; i < 6; i++)
        v[i] = run(1.0 + 0.7 * i, 0.05 * i, 0.0, 1.3, 1.0, 0.0, noise[i]);
    pt_calib c;
    pt_calib_fit(v, 6, &c);
    CHECK(c.applied && c.checked);
    CHECK_INT(c.form, PT_CALIB_COMPUTE);
    CHECK_NEAR(c.k_compute, 1.3, 0.02);
    CHECK(c.loo_err < 0.02 && c.zero_err > 0.2);
    CHECK_INT(c.runs, 6);
    /* exact data: the compute scale exactly, and no more parameters than it needs */
    for (int i = 0; i < 6; i++)
        v[i] = run(1.0 + 0.7 * i, 0.05 * i, 0.01, 1.3, 1.0, 0.0, 0);
    pt_calib_fit(v, 6, &c);
    CHECK_INT(c.form, PT_CALIB_COMPUTE);
    CHECK_NEAR(c.k_compute, 1.3, 1e-9);
    CHECK(c.loo_err < 1e-9);
}

static void test_recovers_full_form(void)
{
    pt_calib_point v[8];
    for (int i = 0; i < 8; i++)
        v[i] = run(0.5 + 0.4 * i, 0.05 + 0.3 * (i % 3), 0.002, 1.2, 2.0, 0.05, 0);
    pt_calib c;
    pt_calib_fit(v, 8, &c);
    CHECK_INT(c.form, PT_CALIB_FULL);
    CHECK_NEAR(c.k_compute, 1.2, 1e-6);
    CHECK_NEAR(c.k_comm, 2.0, 1e-6);
    CHECK_NEAR(c.overhead_s, 0.05, 1e-6);
    CHECK(c.loo_by_form[PT_CALIB_COMPUTE] > c.loo_err);
    CHECK(!isnan(c.loo_by_form[PT_CALIB_COMPUTE_OVERHEAD]));
    char text[128];
    pt_calib_text(&c, text, sizeof text);
    CHECK_STR_HAS(text, "compute x1.2, exposed communication x2, overhead 0.05 s");
    /* three runs allow two parameters at most: the full form is not tried */
    pt_calib_fit(v, 3, &c);
    CHECK(isnan(c.loo_by_form[PT_CALIB_FULL]));
}

static void test_rejects_what_does_not_help(void)
{
    /* errors of +-20 % around the truth: a scale fitted to the others predicts each
     * held-out run worse than no correction */
    pt_calib_point v[6];
    for (int i = 0; i < 6; i++)
        v[i] = run(1.0 + 0.2 * i, 0.1, 0, 1.0, 1.0, 0, i % 2 ? 0.25 : -0.2);
    pt_calib c;
    pt_calib_fit(v, 6, &c);
    CHECK(!c.applied && c.checked);
    CHECK_INT(c.form, PT_CALIB_NONE);
    CHECK(c.k_compute == 1 && c.k_comm == 1 && c.overhead_s == 0);
    CHECK_STR_HAS(c.why, "no correction predicts held-out runs better");
    CHECK(c.loo_by_form[PT_CALIB_COMPUTE] >= c.zero_err);
    pt_sim_result r = {.step_time_s = 2, .tokens_per_s = 100, .mfu = 0.4};
    r.breakdown_s[PT_BD_GEMM] = 2;
    pt_calib_apply(&c, &r);
    CHECK(r.step_time_s == 2 && r.tokens_per_s == 100); /* a rejected fit changes nothing */
    pt_calib_fit(v, 0, &c);
    CHECK(!c.applied);
    CHECK_STR_HAS(c.why, "no runs");
}

/* The leave-one-out error of the compute form, by its closed form: with one parameter
 * the fit of runs S is k = sum a_j b_j / sum a_j^2, a_j = compute_j / y_j,
 * b_j = 1 - (comm_j + fixed_j) / y_j, over j in S; run i is predicted by S = all but i. */
static double loo_compute(const pt_calib_point *v, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++) {
        double ab = 0, aa = 0;
        for (int j = 0; j < n; j++) {
            if (j == i)
                continue;
            double a = v[j].compute_s / v[j].measured_s;
            ab += a * (1 - (v[j].comm_s + v[j].fixed_s) / v[j].measured_s);
            aa += a * a;
        }
        double k = ab / aa;
        sum += fabs((k * v[i].compute_s + v[i].comm_s + v[i].fixed_s) / v[i].measured_s - 1);
    }
    return sum / n;
}

static void test_loo_never_uses_the_point(void)
{
    /* one run far off the others: fitted with itself it would be predicted well */
    pt_calib_point v[4] = {run(1, 0.1, 0, 1.25, 1, 0, 0.01), run(2, 0.1, 0, 1.25, 1, 0, -0.01),
                           run(3, 0.2, 0, 1.25, 1, 0, 0.0), run(1.5, 0.1, 0, 2.5, 1, 0, 0)};
    pt_calib c;
    pt_calib_fit(v, 4, &c);
    CHECK_NEAR(c.loo_by_form[PT_CALIB_COMPUTE], loo_compute(v, 4), 1e-12);
    /* two runs: each predicted by the other's scale alone */
    pt_calib_fit(v, 2, &c);
    double k0 = (v[0].measured_s - v[0].comm_s) / v[0].compute_s;
    double k1 = (v[1].measured_s - v[1].comm_s) / v[1].compute_s;
    double want = (fabs((k1 * v[0].compute_s + v[0].comm_s) / v[0].measured_s - 1) +
                   fabs((k0 * v[1].compute_s + v[1].comm_s) / v[1].measured_s - 1)) / 2;
    CHECK_NEAR(c.loo_by_form[PT_CALIB_COMPUTE], want, 1e-12);
    CHECK_NEAR(c.loo_err, want, 1e-12);
    CHECK(c.applied);
}

static void test_one_run(void)
{
    pt_calib_point v = run(2, 0.5, 0.1, 1.4, 1, 0, 0);
    pt_calib c;
    pt_calib_fit(&v, 1, &c);
    CHECK(c.applied && !c.checked);
    CHECK_NEAR(c.k_compute, 1.4, 1e-12);
    CHECK(isnan(c.loo_err));
    CHECK_NEAR(pt_calib_step(&c, &v), v.measured_s, 1e-12);
    /* ten times slower than priced is no efficiency: the record or its model is wrong */
    v = run(2, 0.5, 0.1, 10, 1, 0, 0);
    pt_calib_fit(&v, 1, &c);
    CHECK(!c.applied);
    CHECK_STR_HAS(c.why, "compute scale of 10 is outside");
}

static void test_apply(void)
{
    pt_sim_result r = {.step_time_s = 0, .tokens_per_s = 1000, .mfu = 0.5, .hfu = 0.6, .pp = 2};
    r.breakdown_s[PT_BD_GEMM] = 1.0;
    r.breakdown_s[PT_BD_ATTN] = 0.2;
    r.breakdown_s[PT_BD_BUBBLE] = 0.3;
    r.breakdown_s[PT_BD_TP] = 0.25;
    r.breakdown_s[PT_BD_DP] = 0.25;
    r.breakdown_s[PT_BD_OVERHEAD] = 0.1;
    r.hidden_s[PT_BD_DP] = 0.4;
    r.stage_busy_s[0] = r.stage_busy_s[1] = 1.2;
    for (int b = 0; b < PT_BD_COUNT; b++)
        r.step_time_s += r.breakdown_s[b];
    pt_calib c = {.form = PT_CALIB_FULL, .applied = true, .k_compute = 1.5, .k_comm = 2,
                  .overhead_s = 0.05};
    pt_calib_apply(&c, &r);
    double want = 1.5 * 1.5 + 2 * 0.5 + 0.1 + 0.05;
    CHECK_NEAR(r.step_time_s, want, 1e-12);
    double sum = 0;
    for (int b = 0; b < PT_BD_COUNT; b++)
        sum += r.breakdown_s[b];
    CHECK_NEAR(sum, want, 1e-12);
    CHECK_NEAR(r.tokens_per_s, 1000 * 2.1 / want, 1e-12);
    CHECK_NEAR(r.mfu, 0.5 * 2.1 / want, 1e-12);
    CHECK_NEAR(r.hfu, 0.6 * 2.1 / want, 1e-12);
    CHECK_NEAR(r.exposed_comm_fraction, 1.0 / want, 1e-12);
    CHECK_NEAR(r.hidden_s[PT_BD_DP], 0.8, 1e-12);
    CHECK_NEAR(r.stage_busy_s[1], 1.8, 1e-12);
}

/* ---- Run records ------------------------------------------------------------------- */

static const char good[] =
    "{\"format_version\": 1, \"model\": \"llama3-8b\", \"cluster\": \"dgx-h100\", "
    "\"nodes\": 1, \"stack\": \"megatron-core\", \"layout\": \"tp=2,pp=1,mbs=1\", "
    "\"global_batch\": 64, \"seq\": 4096, \"precision\": \"bf16\", "
    "\"measured\": {\"tokens_per_s_per_gpu\": 8000}, \"date\": \"2026-01-31\", "
    "\"software\": {\"name\": \"Megatron-LM\", \"version\": \"core_r0.12.0\"}, "
    "\"note\": \"a test\"}";

/* good[] with the text `from` replaced by `to`, read: the error's message, or "" */
static const char *read_edited(const char *from, const char *to)
{
    static char text[4096];
    static pt_err err;
    const char *at = strstr(good, from);
    CHECK(at != NULL);
    if (!at)
        return "";
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good), good, to, at + strlen(from));
    pt_runrec r;
    err.msg[0] = 0;
    if (pt_runrec_from_json(text, "run.json", NULL, &r, &err) == 0)
        return "";
    return err.msg;
}

static void test_record_reads_back(void)
{
    pt_runrec r, back;
    pt_err err;
    CHECK(pt_runrec_from_json(good, "run.json", NULL, &r, &err) == 0);
    CHECK_INT(r.layout.tp, 2);
    CHECK_INT(r.layout.dp, 4);
    CHECK_INT(r.model.seq, 4096);
    CHECK(strcmp(r.model_ref, "llama3-8b") == 0 && strcmp(r.stack_ref, "megatron-core") == 0);
    CHECK_NEAR(r.measured_step_s, 64.0 * 4096 / (8000.0 * 8), 1e-12);
    CHECK_NEAR(pt_runrec_speed(&r, r.measured_step_s), 8000, 1e-12);
    char *text = pt_runrec_to_json(&r);
    CHECK(text != NULL);
    CHECK(text && pt_runrec_from_json(text, "stored", NULL, &back, &err) == 0);
    CHECK(back.measured_step_s == r.measured_step_s && back.layout.dp == 4);
    CHECK(strcmp(back.note, "a test") == 0 && strcmp(back.version, "core_r0.12.0") == 0);
    free(text);
    /* an inline model is stored inline and reads back the same */
    char *model = pt_model_to_json(pt_model_builtin(2));
    char inl[8192];
    snprintf(inl, sizeof inl, "%.*s%s%s", (int)(strstr(good, "\"llama3-8b\"") - good), good,
             model, strstr(good, "\"llama3-8b\"") + strlen("\"llama3-8b\""));
    free(model);
    CHECK(pt_runrec_from_json(inl, "run.json", NULL, &r, &err) == 0);
    CHECK(r.model_ref[0] == 0 && strcmp(r.model.name, "gpt2-124m") == 0);
    text = pt_runrec_to_json(&r);
    CHECK(text && pt_runrec_from_json(text, "stored", NULL, &back, &err) == 0);
    CHECK(back.model.hidden == 768 && back.model.seq == 4096);
    free(text);
    /* the measurement in tokens/s of all GPUs */
    const char *alt = read_edited("{\"tokens_per_s_per_gpu\": 8000}", "{\"tokens_per_s\": 64000}");
    CHECK(alt[0] == 0);
    /* a zero-shot prediction of the record: positive and its own */
    pt_candidate c;
    CHECK(pt_runrec_predict(&r, NULL, &c, &err) == 0);
    CHECK(c.predicted.step_time_s > 0);
}

static void test_record_errors(void)
{
    static const struct {
        const char *from, *to, *want;
    } cases[] = {
        {"\"model\"", "\"modle\"", "unknown field 'modle' (did you mean 'model'?)"},
        {"\"note\": \"a test\"", "\"nots\": 1", "unknown field 'nots' (did you mean 'note'?)"},
        {"\"format_version\": 1", "\"format_version\": 2", "field 'format_version' = 2"},
        {"\"llama3-8b\"", "\"llama9\"", "field 'model': unknown model 'llama9'"},
        {"\"dgx-h100\"", "\"dgx-h900\"", "field 'cluster': unknown cluster 'dgx-h900'"},
        {"\"megatron-core\"", "\"megatron-cor\"", "field 'stack': unknown stack"},
        {"\"llama3-8b\"", "{\"name\": \"m\", \"layers\": 2}", "model.hidden"},
        {"\"nodes\": 1", "\"nodes\": 0", "field 'nodes' = 0: expected 1 to"},
        {"\"nodes\": 1", "\"nodes\": \"1\"", "field 'nodes'"},
        {"\"tp=2,pp=1,mbs=1\"", "\"tp=2,pq=1\"", "field 'layout' = \"tp=2,pq=1\""},
        {"\"tp=2,pp=1,mbs=1\"", "\"tp=2,mbs=3\"", "is not a valid layout of llama3-8b on 8 GPUs"},
        {"\"global_batch\": 64", "\"global_batch\": -4", "field 'global_batch' = -4"},
        {"\"seq\": 4096", "\"seq\": 0", "field 'seq' = 0"},
        {"\"bf16\"", "\"fp9\"", "field 'precision' = \"fp9\""},
        {"{\"tokens_per_s_per_gpu\": 8000}", "{}", "field 'measured': expected exactly one"},
        {"{\"tokens_per_s_per_gpu\": 8000}", "{\"step_s\": 1, \"tokens_per_s\": 2}",
         "expected exactly one"},
        {"{\"tokens_per_s_per_gpu\": 8000}", "{\"step_s\": -1}", "field 'measured.step_s' = -1"},
        {"{\"tokens_per_s_per_gpu\": 8000}", "{\"steps\": 1}", "did you mean 'step_s'"},
        {"\"2026-01-31\"", "\"31/01/2026\"", "field 'date' = \"31/01/2026\""},
        {"\"2026-01-31\"", "\"2026-13-01\"", "field 'date'"},
        {", \"version\": \"core_r0.12.0\"", "", "missing field 'software.version'"},
        {"\"Megatron-LM\"", "\"\"", "field 'software.name': expected a non-empty string"},
        {"\"note\": \"a test\"", "\"note\": 3", "field 'note'"},
        {"\"measured\"", "\"measure\"", "did you mean 'measured'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *msg = read_edited(cases[i].from, cases[i].to);
        CHECK_STR_HAS(msg, cases[i].want);
        CHECK_STR_HAS(msg, "run.json");
        /* one error, one line (an inline spec, as a spec file, names every field) */
        CHECK(strchr(msg, '\n') == NULL || strstr(cases[i].to, "layers"));
    }
    pt_runrec r;
    pt_err err;
    CHECK(pt_runrec_from_json("{\"format_version\": 1,", "run.json", NULL, &r, &err) != 0);
    CHECK_STR_HAS(err.msg, "run.json:1:");
    CHECK(pt_runrec_read("/no/such/run.json", &r, &err) != 0);
    CHECK_STR_HAS(err.msg, "/no/such/run.json");
}

/* ---- Storage (costmodels/runs.c) ------------------------------------------------------ */

static void test_storage(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/test_calib.db", dir);
    remove(path);
    pt_costdb *db = NULL;
    pt_err err;
    CHECK(pt_costdb_open(path, PT_COSTDB_CREATE, &db, &err) == 0);
    if (!db)
        return;
    pt_runrec r;
    CHECK(pt_runrec_from_json(good, "run.json", NULL, &r, &err) == 0);
    char *text = pt_runrec_to_json(&r);
    pt_framework_run f = {.gpus = 8, .measured_step_s = r.measured_step_s, .record = text};
    snprintf(f.stack, sizeof f.stack, "%s", r.train.stack.name);
    snprintf(f.device, sizeof f.device, "%s", r.cluster.device.name);
    snprintf(f.source, sizeof f.source, "run.json");
    int64_t id1 = 0, id2 = 0;
    CHECK(pt_costdb_add_framework_run(db, &f, &id1, &err) == 0);
    snprintf(f.stack, sizeof f.stack, "fsdp");
    CHECK(pt_costdb_add_framework_run(db, &f, &id2, &err) == 0);
    CHECK(id1 == 1 && id2 == 2);
    pt_framework_run *v;
    size_t n;
    CHECK(pt_costdb_framework_runs(db, "megatron-core", "H100-SXM5-80GB", &v, &n, &err) == 0);
    CHECK(n == 1 && v[0].id == 1 && strcmp(v[0].record, text) == 0 && v[0].created_at[0]);
    pt_costdb_framework_runs_free(v, n);
    CHECK(pt_costdb_framework_runs(db, NULL, NULL, &v, &n, &err) == 0 && n == 2);
    pt_costdb_framework_runs_free(v, n);
    /* a dry run: forgotten inside a transaction rolled back */
    CHECK(pt_costdb_begin(db, &err) == 0 && pt_costdb_forget_framework_run(db, 2, &err) == 0);
    CHECK(pt_costdb_rollback(db, &err) == 0);
    CHECK(pt_costdb_forget_framework_run(db, 2, &err) == 0);
    CHECK(pt_costdb_forget_framework_run(db, 2, &err) != 0);
    CHECK_STR_HAS(err.msg, "no stored framework run f2");
    CHECK(pt_costdb_framework_runs(db, NULL, NULL, &v, &n, &err) == 0 && n == 1);
    pt_costdb_framework_runs_free(v, n);
    pt_costdb_close(db);
    /* the in-memory table holds none and stores none */
    CHECK(pt_costdb_open(NULL, 0, &db, &err) == 0);
    CHECK(pt_costdb_framework_runs(db, NULL, NULL, &v, &n, &err) == 0 && n == 0 && !v);
    CHECK(pt_costdb_add_framework_run(db, &f, NULL, &err) != 0);
    pt_costdb_close(db);
    free(text);
    remove(path);
}

int main(int argc, char **argv)
{
    test_recovers_compute_scale();
    test_recovers_full_form();
    test_rejects_what_does_not_help();
    test_loo_never_uses_the_point();
    test_one_run();
    test_apply();
    test_record_reads_back();
    test_record_errors();
    test_storage(argc > 1 ? argv[1] : ".");
    return pt_check_result();
}
