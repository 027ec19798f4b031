/*
 * Tests of the model and cluster specs (planner/model.c, planner/cluster.c,
 * planner/specjson.c): every built-in validates and survives a dump and reload
 * unchanged, a few published sizes are what the papers say, and every bad input —
 * malformed JSON, missing, unknown or mistyped fields, impossible sizes, unknown
 * names, missing files — is refused with a message naming the file, field and value.
 * Specs as users write them: optional peaks checked against the planned precision,
 * integers written as reals, the inter-node bandwidth from the NICs, and every
 * problem of a file reported at once (model and stack specs share the reader).
 * A cluster's NVLink domain: read, dumped and checked, and what reads it — the rule
 * that keeps a tensor-parallel group on NVLink, and the link a collective or a
 * pipeline send is priced on.
 *
 * Usage: test_specs DATA_DIR   (the tests/data folder with the JSON fixtures)
 */
#include "planner.h"

#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Helpers ----------------------------------------------------------------- */

static void data_path(const char *dir, const char *file, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%s", dir, file);
}

/* Returns a malloc'd copy of text with the first `from` replaced by `to`. */
static char *replace_once(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    if (!at) {
        fprintf(stderr, "replace_once: '%s' not in text\n", from);
        abort();
    }
    size_t head = (size_t)(at - text), nfrom = strlen(from), nto = strlen(to);
    char *out = malloc(strlen(text) - nfrom + nto + 1);
    if (!out)
        abort();
    memcpy(out, text, head);
    memcpy(out + head, to, nto);
    strcpy(out + head + nto, at + nfrom);
    return out;
}

static bool model_equal(const pt_model *x, const pt_model *y)
{
    return strcmp(x->name, y->name) == 0 && x->layers == y->layers &&
           x->hidden == y->hidden && x->heads == y->heads && x->kv_heads == y->kv_heads &&
           x->ffn == y->ffn && x->vocab == y->vocab && x->seq == y->seq &&
           x->norm == y->norm && x->act == y->act && x->pos == y->pos &&
           x->tied_embeddings == y->tied_embeddings && x->bias == y->bias &&
           x->dropout == y->dropout && x->head_dim == y->head_dim &&
           x->qk_norm == y->qk_norm && memcmp(&x->moe, &y->moe, sizeof x->moe) == 0 &&
           x->window == y->window && x->window_full_every == y->window_full_every &&
           x->attn_sinks == y->attn_sinks;
}

/* Bit-identical doubles: a dumped spec must load back exactly. */
static bool same_bits(double x, double y)
{
    return memcmp(&x, &y, sizeof x) == 0;
}

static bool link_equal(const pt_link *x, const pt_link *y)
{
    return strcmp(x->name, y->name) == 0 && same_bits(x->bw_Bps, y->bw_Bps) &&
           same_bits(x->latency_s, y->latency_s) && same_bits(x->busbw_Bps, y->busbw_Bps) &&
           same_bits(x->allreduce_busbw_Bps, y->allreduce_busbw_Bps) && x->nics == y->nics;
    /* the rate per NIC is not dumped (pt_cluster_to_json), only its bandwidth */
}

static bool cluster_equal(const pt_cluster *x, const pt_cluster *y)
{
    bool same = strcmp(x->name, y->name) == 0 && x->nodes == y->nodes &&
                x->devices_per_node == y->devices_per_node &&
                x->nvlink_domain == y->nvlink_domain &&
                strcmp(x->device.name, y->device.name) == 0 &&
                x->device.memory_bytes == y->device.memory_bytes &&
                same_bits(x->device.memory_bw_Bps, y->device.memory_bw_Bps) &&
                link_equal(&x->intra, &y->intra) && link_equal(&x->inter, &y->inter);
    for (int t = 0; t < PT_DTYPE_COUNT; t++)
        same = same && same_bits(x->device.peak_flops[t], y->device.peak_flops[t]);
    return same;
}

/* ---- Models ------------------------------------------------------------------ */

static void test_model_builtins_validate(void)
{
    CHECK_INT(pt_model_builtin_count(), 25);
    CHECK(pt_model_builtin(-1) == NULL);
    CHECK(pt_model_builtin(pt_model_builtin_count()) == NULL);
    for (int i = 0; i < pt_model_builtin_count(); i++) {
        const pt_model *m = pt_model_builtin(i);
        pt_err err = {""};
        if (pt_model_validate(m, m->name, &err))
            fprintf(stderr, "built-in model %s: %s\n", m->name, err.msg);
        CHECK_INT(pt_model_validate(m, m->name, &err), 0);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(m->name, pt_model_builtin(j)->name) != 0);
    }
}

static void test_model_round_trip(void)
{
    for (int i = 0; i < pt_model_builtin_count(); i++) {
        const pt_model *m = pt_model_builtin(i);
        pt_model back, by_name;
        pt_err err = {""};
        char *text = pt_model_to_json(m);
        CHECK(text && text[strlen(text) - 1] == '\n');
        CHECK_INT(pt_model_from_json(text, "<dump>", &back, &err), 0);
        CHECK(model_equal(m, &back));
        char *again = pt_model_to_json(&back);
        CHECK(again && strcmp(text, again) == 0);
        CHECK_INT(pt_model_get(m->name, &by_name, &err), 0);
        CHECK(model_equal(m, &by_name));
        free(text);
        free(again);
    }
}

static const pt_model *model_named(const char *name)
{
    static pt_model m; /* test-only scratch */
    pt_err err = {""};
    if (pt_model_get(name, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        abort();
    }
    return &m;
}

static void test_model_published_sizes(void)
{
    const pt_model *m = model_named("llama3-405b");
    CHECK_INT(m->layers, 126);
    CHECK_INT(m->hidden, 16384);
    CHECK_INT(m->heads, 128);
    CHECK_INT(m->kv_heads, 8);
    CHECK_INT(m->ffn, 53248);
    CHECK_INT(m->vocab, 128256);
    CHECK_INT(m->seq, 8192);
    CHECK(m->norm == PT_NORM_RMSNORM && m->act == PT_ACT_SWIGLU && m->pos == PT_POS_ROPE);
    CHECK(!m->tied_embeddings && !m->bias && !m->dropout);

    m = model_named("gpt3-175b");
    CHECK_INT(m->layers, 96);
    CHECK_INT(m->hidden, 12288);
    CHECK_INT(m->heads, 96);
    CHECK_INT(m->ffn, 4 * 12288);
    CHECK_INT(m->seq, 2048);
    CHECK_INT(m->vocab, 50257);
    CHECK(m->norm == PT_NORM_LAYERNORM && m->act == PT_ACT_GELU && m->pos == PT_POS_LEARNED);
    CHECK(m->tied_embeddings && m->bias && m->dropout);

    CHECK_INT(model_named("gpt3-13b")->hidden, 5120);
    CHECK_INT(model_named("llama2-70b")->kv_heads, 8);
    CHECK_INT(model_named("llama2-7b")->ffn, 11008);
    CHECK_INT(model_named("llama2-13b")->vocab, 32000);
    CHECK_INT(model_named("gpt2-1.5b")->heads, 25);
    CHECK_INT(model_named("gpt2-124m")->seq, 1024);

    m = model_named("tiny");
    CHECK_INT(m->vocab, 256);
    CHECK_INT(m->ffn, 256);
    CHECK(m->tied_embeddings && m->pos == PT_POS_LEARNED);
    m = model_named("tiny-llama");
    CHECK_INT(m->kv_heads, 2);
    CHECK_INT(m->ffn, 192);
    CHECK(!m->tied_embeddings && m->act == PT_ACT_SWIGLU && m->norm == PT_NORM_RMSNORM);
}

/* The mixtures of experts: totals and active parameters as published (Mixtral of
 * Experts, Table 1 / Sec. 2: 46.7B and 12.9B, 141B and 39B; the Qwen3 report, Table 2:
 * 30.5B with 3.3B active, 235B with 22B), which layers are MoE layers, head_dim. */
static void test_model_moe_builtins(void)
{
    struct {
        const char *name;
        double total, active; /* billions, to the published rounding */
        double tol;
    } rows[] = {{"mixtral-8x7b", 46.7, 12.9, 0.05}, {"mixtral-8x22b", 141, 39, 0.5},
                {"qwen3-30b-a3b", 30.5, 3.3, 0.06}, {"qwen3-235b-a22b", 235, 22, 0.5}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const pt_model *m = model_named(rows[i].name);
        double total = (double)pt_model_params_total(m) / 1e9;
        double active = (double)pt_model_params_active(m) / 1e9;
        if (fabs(total - rows[i].total) > rows[i].tol ||
            fabs(active - rows[i].active) > rows[i].tol)
            fprintf(stderr, "%s: %.2fB total, %.2fB active\n", rows[i].name, total, active);
        CHECK(fabs(total - rows[i].total) <= rows[i].tol);
        CHECK(fabs(active - rows[i].active) <= rows[i].tol);
        CHECK_INT(pt_model_moe_layers(m, 0, m->layers), m->layers);
    }
    /* gpt-oss (its model card, Table 1: 20.91B and 116.83B total; 3.61B and 5.13B active,
     * counting one of the two vocabulary tables: ours counts both) */
    static const struct {
        const char *name;
        double total, active;
    } oss[] = {{"gpt-oss-20b", 20.91, 3.61}, {"gpt-oss-120b", 116.83, 5.13}};
    for (size_t i = 0; i < 2; i++) {
        const pt_model *g = model_named(oss[i].name);
        double table = (double)g->vocab * (double)g->hidden / 1e9;
        CHECK(fabs((double)pt_model_params_total(g) / 1e9 - oss[i].total) < 0.005);
        CHECK(fabs((double)pt_model_params_active(g) / 1e9 - table - oss[i].active) < 0.005);
        CHECK(g->window == 128 && g->attn_sinks && g->bias);
        CHECK(pt_model_layer_window(g, 0) && !pt_model_layer_window(g, 1));
        int64_t n[PT_LAYER_KINDS];
        pt_model_layer_kinds(g, 0, g->layers, n);
        CHECK(n[PT_LAYER_MOE | PT_LAYER_WINDOW] == g->layers / 2 &&
              n[PT_LAYER_MOE] == g->layers / 2 && n[0] == 0 && n[PT_LAYER_WINDOW] == 0);
        pt_model_layer_kinds(g, 3, 4, n); /* layers 3, 4, 5, 6: full, banded, full, banded */
        CHECK(n[PT_LAYER_MOE | PT_LAYER_WINDOW] == 2 && n[PT_LAYER_MOE] == 2);
    }
    pt_model qwen = *model_named("qwen3-235b-a22b"), *q = &qwen;
    CHECK_INT(pt_model_head_dim(q), 128); /* 64 heads of 128 on h = 4096 */
    CHECK(q->qk_norm && q->moe.top_k == 8 && q->moe.experts == 128);
    CHECK_INT(pt_model_head_dim(model_named("llama3-8b")), 128); /* h/a */
    /* tiny-moe: layer 0 dense, the rest MoE */
    pt_model tiny = *model_named("tiny-moe"), *t = &tiny;
    CHECK(!pt_model_layer_moe(t, 0) && pt_model_layer_moe(t, 1) && pt_model_layer_moe(t, 3));
    CHECK_INT(pt_model_moe_layers(t, 0, 4), 3);
    CHECK_INT(pt_model_moe_layers(t, 0, 1), 0);
    /* every 2nd from layer 2 of 6: layers 2 and 4 */
    pt_model e = *t;
    e.layers = 6;
    e.moe.first_dense = 2;
    e.moe.every = 2;
    CHECK(!pt_model_layer_moe(&e, 1) && pt_model_layer_moe(&e, 2) && !pt_model_layer_moe(&e, 3));
    CHECK_INT(pt_model_moe_layers(&e, 0, 6), 2);
    CHECK_INT(pt_model_moe_layers(model_named("llama3-8b"), 0, 32), 0);
    /* an expert's share: all experts whole, E/ep each split over etp */
    CHECK_INT(pt_params_experts(q, 1, 1), INT64_C(128) * 3 * 4096 * 1536);
    CHECK_INT(pt_params_experts(q, 32, 2), 4 * 3 * 4096 * 768);
}

/* A MoE spec's JSON: read back identically, and each contradiction one message. */
static void test_model_moe_json(void)
{
    const char *good =
        "{\"name\": \"m\", \"layers\": 6, \"hidden\": 64, \"heads\": 4, \"kv_heads\": 2, "
        "\"ffn\": 128, \"vocab\": 256, \"seq\": 64, \"norm\": \"rmsnorm\", "
        "\"activation\": \"swiglu\", \"positions\": \"rope\", \"tied_embeddings\": false, "
        "\"bias\": false, \"dropout\": false, \"head_dim\": 32, \"qk_norm\": true, "
        "\"moe\": {\"experts\": 8, \"top_k\": 2, \"expert_ffn\": 32, \"router\": \"sigmoid\", "
        "\"renorm\": false, \"shared_experts\": 1, \"shared_ffn\": 64, \"first_dense\": 1, "
        "\"every\": 2, \"aux_loss\": 0.01, \"capacity\": 1.25}, "
        "\"window\": {\"size\": 16, \"full_every\": 3}, \"attn_sinks\": true}";
    pt_model m, back;
    pt_err err = {""};
    CHECK_INT(pt_model_from_json(good, "<m>", &m, &err), 0);
    CHECK(m.head_dim == 32 && m.qk_norm && m.moe.score == PT_ROUTER_SIGMOID && !m.moe.renorm);
    CHECK(m.moe.shared_experts == 1 && m.moe.shared_ffn == 64 && m.moe.capacity == 1.25);
    CHECK_INT(pt_model_moe_layers(&m, 0, 6), 2); /* layers 2 and 4 */
    CHECK(m.window == 16 && m.window_full_every == 3 && m.attn_sinks);
    CHECK(pt_model_layer_window(&m, 0) && !pt_model_layer_window(&m, 2)); /* (2+1) % 3 */
    char *text = pt_model_to_json(&m);
    CHECK_INT(pt_model_from_json(text, "<dump>", &back, &err), 0);
    CHECK(model_equal(&m, &back));
    free(text);
    /* head_dim = h/a is the same spec as none */
    char *hd = replace_once(good, "\"head_dim\": 32", "\"head_dim\": 16");
    CHECK_INT(pt_model_from_json(hd, "<m>", &m, &err), 0);
    CHECK_INT(m.head_dim, 0);
    free(hd);
    struct {
        const char *from, *to, *needle;
    } bad[] = {
        {"\"top_k\": 2", "\"top_k\": 9", "field 'moe.top_k' = 9: more experts per token than"},
        {"\"experts\": 8", "\"experts\": 1", "a mixture needs at least 2 experts"},
        {"\"shared_ffn\": 64", "\"shared_ffn\": 0", "moe.shared_experts = 1 needs their inner"},
        {"\"shared_experts\": 1", "\"shared_experts\": 0", "without shared experts"},
        {"\"first_dense\": 1", "\"first_dense\": 6", "must leave a layer to the experts"},
        {"\"every\": 2", "\"every\": 7", "no layer from moe.first_dense = 1 on"},
        {"\"capacity\": 1.25", "\"capacity\": -1", "field 'moe.capacity' = -1"},
        {"\"aux_loss\": 0.01", "\"aux_loss\": -0.5", "field 'moe.aux_loss' = -0.5"},
        {"\"router\": \"sigmoid\"", "\"router\": \"relu\"", "expected one of softmax, sigmoid"},
        {"\"renorm\": false", "\"renorm\": false, \"topk\": 2",
         "unknown field 'moe.topk' (did you mean 'top_k'?)"},
        {"\"expert_ffn\": 32, ", "", "missing field 'moe.expert_ffn'"},
        {"\"head_dim\": 32", "\"head_dim\": 31", "needs an even head size, but head_dim = 31"},
        {"\"head_dim\": 32", "\"head_dim\": -4", "field 'head_dim' = -4"},
        {"\"size\": 16", "\"size\": 0", "field 'window.size' = 0: must be at least 1"},
        {"\"full_every\": 3", "\"full_every\": -1", "field 'window.full_every' = -1"},
        {"\"full_every\": 3", "\"every\": 3", "unknown field 'window.every'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *t = replace_once(good, bad[i].from, bad[i].to);
        err.msg[0] = 0;
        CHECK_INT(pt_model_from_json(t, "<m>", &m, &err), -1);
        CHECK_STR_HAS(err.msg, bad[i].needle);
        free(t);
    }
}

static void test_model_from_file(const char *dir)
{
    char path[512];
    data_path(dir, "model_good.json", path, sizeof path);
    pt_model m, n;
    pt_err err = {""};
    CHECK_INT(pt_model_get(path, &m, &err), 0);
    CHECK(strcmp(m.name, "test-model") == 0);
    CHECK_INT(m.layers, 16);
    CHECK_INT(m.kv_heads, 8);
    CHECK(m.tied_embeddings && m.pos == PT_POS_ROPE);
    CHECK_INT(pt_model_load_file(path, &n, &err), 0);
    CHECK(model_equal(&m, &n));
}

/* Loads dir/file, expects failure with a message holding the file's path and each
 * of the `needles`, and expects *out untouched. */
static void expect_model_file_error(const char *dir, const char *file, const char *needle1,
                                    const char *needle2)
{
    char path[512];
    data_path(dir, file, path, sizeof path);
    pt_model m;
    memset(&m, 0x5a, sizeof m);
    pt_model before = m;
    pt_err err = {""};
    CHECK_INT(pt_model_get(path, &m, &err), -1);
    CHECK(memcmp(&m, &before, sizeof m) == 0);
    CHECK_STR_HAS(err.msg, path);
    CHECK_STR_HAS(err.msg, needle1);
    if (needle2)
        CHECK_STR_HAS(err.msg, needle2);
}

static void test_model_bad_files(const char *dir)
{
    expect_model_file_error(dir, "model_malformed.json", "model_malformed.json:4:", NULL);
    expect_model_file_error(dir, "model_duplicate_key.json", "duplicate", ":16:");
    expect_model_file_error(dir, "model_not_object.json", "expected a JSON object", "array");
    expect_model_file_error(dir, "model_missing_field.json", "missing field 'ffn'", NULL);
    expect_model_file_error(dir, "model_unknown_field.json", "unknown field 'hiden'",
                            "(did you mean 'hidden'?)");
    expect_model_file_error(dir, "model_wrong_type.json", "field 'layers' = 12.5",
                            "expected an integer, got a real number");
    expect_model_file_error(dir, "model_string_size.json", "field 'vocab' = \"32000\"",
                            "expected an integer, got a string");
    expect_model_file_error(dir, "model_zero_heads.json", "field 'heads' = 0",
                            "must be at least 1");
    expect_model_file_error(dir, "model_negative_layers.json", "field 'layers' = -2",
                            "must be at least 1");
    expect_model_file_error(dir, "model_huge_vocab.json", "field 'vocab' = 1099511627776",
                            "must be at most");
    expect_model_file_error(dir, "model_hidden_heads.json",
                            "hidden (100) is not divisible by heads (3)", NULL);
    expect_model_file_error(dir, "model_kv_heads.json",
                            "heads (32) is not divisible by kv_heads (5)", NULL);
    expect_model_file_error(dir, "model_bad_norm.json", "field 'norm' = \"batchnorm\"",
                            "expected one of layernorm, rmsnorm");
}

/* Parses the tiny model's dump with `from` replaced by `to`; expects `needle`. */
static void expect_model_text_error(const char *from, const char *to, const char *needle)
{
    char *good = pt_model_to_json(pt_model_builtin(0));
    char *bad = replace_once(good, from, to);
    pt_model m;
    pt_err err = {""};
    CHECK_INT(pt_model_from_json(bad, "<string>", &m, &err), -1);
    CHECK_STR_HAS(err.msg, "<string>");
    CHECK_STR_HAS(err.msg, needle);
    free(good);
    free(bad);
}

static void test_model_bad_text(void)
{
    CHECK(strcmp(pt_model_builtin(0)->name, "tiny") == 0);
    expect_model_text_error("\"layers\": 4", "\"layers\": 4.5",
                            "field 'layers' = 4.5: expected an integer, got a real number");
    expect_model_text_error("\"bias\": true", "\"bias\": 1", "expected true or false");
    expect_model_text_error("\"name\": \"tiny\"", "\"name\": \"\"", "field 'name' is empty");
    expect_model_text_error("\"name\": \"tiny\"",
                            "\"name\": \"a-name-that-is-far-too-long-to-fit-in-the-"
                            "sixty-four-bytes-of-pt-model\"",
                            "= \"a-name-that-is-far-too-long-to-fit-in-the-sixty-four-bytes-...: "
                            "too long (70 bytes, at most 63)");
    expect_model_text_error("\"heads\": 4", "\"heads\": 4, \"heads\": 4", "<string>:5:");
    expect_model_text_error("\"kv_heads\": 4", "\"kv_heads\": 8",
                            "heads (4) is not divisible by kv_heads (8)");
    expect_model_text_error("\"activation\": \"gelu\"", "\"activation\": null",
                            "field 'activation' = null: expected a string, got null");

    /* RoPE rotates channel pairs within a head: h/a = 12/4 = 3 is odd. */
    pt_model m = *pt_model_builtin(0);
    pt_err err = {""};
    m.hidden = 12;
    m.pos = PT_POS_ROPE;
    CHECK_INT(pt_model_validate(&m, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "needs an even head size, but hidden/heads = 3");
}

static void test_model_bad_names(const char *dir)
{
    pt_model m;
    pt_err err = {""};
    CHECK_INT(pt_model_get("gpt5", &m, &err), -1);
    CHECK_STR_HAS(err.msg, "unknown model 'gpt5'");
    CHECK_STR_HAS(err.msg, "ptplan --list-models");

    CHECK_INT(pt_model_load_file("/nonexistent/model.json", &m, &err), -1);
    CHECK_STR_HAS(err.msg, "cannot read '/nonexistent/model.json': No such file");

    /* An existing path that is not a readable file is reported as such. */
    CHECK_INT(pt_model_get(dir, &m, &err), -1);
    CHECK_STR_HAS(err.msg, "cannot read");
    CHECK_STR_HAS(err.msg, dir);

    CHECK_INT(pt_model_from_json("", "<empty>", &m, &err), -1);
    CHECK_STR_HAS(err.msg, "<empty>:1:");

    m = *pt_model_builtin(0);
    m.norm = (pt_norm)7;
    CHECK_INT(pt_model_validate(&m, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "<struct>: field 'norm' = 7");
}

/* ---- Clusters ---------------------------------------------------------------- */

static void test_cluster_builtins(void)
{
    CHECK_INT(pt_cluster_builtin_count(), 6);
    pt_cluster c;
    CHECK_INT(pt_cluster_builtin(-1, &c), -1);
    CHECK_INT(pt_cluster_builtin(pt_cluster_builtin_count(), &c), -1);
    for (int i = 0; i < pt_cluster_builtin_count(); i++) {
        pt_cluster back, by_name;
        pt_err err = {""};
        CHECK_INT(pt_cluster_builtin(i, &c), 0);
        if (pt_cluster_validate(&c, c.name, &err))
            fprintf(stderr, "built-in cluster %s: %s\n", c.name, err.msg);
        CHECK_INT(pt_cluster_validate(&c, c.name, &err), 0);
        char *text = pt_cluster_to_json(&c);
        CHECK(text && text[strlen(text) - 1] == '\n');
        CHECK_INT(pt_cluster_from_json(text, "<dump>", &back, &err), 0);
        CHECK(cluster_equal(&c, &back));
        char *again = pt_cluster_to_json(&back);
        CHECK(again && strcmp(text, again) == 0);
        CHECK_INT(pt_cluster_get(c.name, &by_name, &err), 0);
        CHECK(cluster_equal(&c, &by_name));
        free(text);
        free(again);
    }
}

static void test_cluster_published_figures(void)
{
    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_get("dgx-h100", &c, &err), 0);
    CHECK_INT(pt_cluster_world(&c), 8);
    CHECK_INT(c.device.memory_bytes, INT64_C(85899345920));
    CHECK(c.device.peak_flops[PT_DTYPE_BF16] == 989.4e12);
    CHECK(c.device.peak_flops[PT_DTYPE_FP8] == 1978.9e12);
    CHECK(c.device.memory_bw_Bps == 3.35e12);
    CHECK(c.intra.bw_Bps == 450e9 && c.inter.bw_Bps == 50e9);

    CHECK_INT(pt_cluster_get("dgx-a100-80g", &c, &err), 0);
    CHECK(c.device.peak_flops[PT_DTYPE_TF32] == 156e12);
    CHECK(c.device.peak_flops[PT_DTYPE_FP8] == 0);
    CHECK(c.device.memory_bw_Bps == 2039e9);
    CHECK(c.intra.bw_Bps == 300e9 && c.inter.bw_Bps == 25e9);

    /* H200: the H100's compute and NVLink, more and faster memory. */
    CHECK_INT(pt_cluster_get("dgx-h200", &c, &err), 0);
    CHECK(strcmp(c.device.name, "H200-SXM5-141GB") == 0);
    CHECK_INT(pt_cluster_world(&c), 8);
    CHECK_INT(c.device.memory_bytes, INT64_C(141) << 30);
    CHECK(c.device.memory_bw_Bps == 4.8e12);
    CHECK(c.device.peak_flops[PT_DTYPE_BF16] == 989.4e12);
    CHECK(c.device.peak_flops[PT_DTYPE_FP8] == 1978.9e12);
    CHECK(c.intra.bw_Bps == 450e9 && c.inter.bw_Bps == 50e9 && c.inter.nics == 8);
    CHECK_INT(pt_cluster_nvlink_domain(&c), 8);

    /* B200: dense peaks, half of NVIDIA's sparse ones; NVLink 5. */
    CHECK_INT(pt_cluster_get("dgx-b200", &c, &err), 0);
    CHECK(strcmp(c.device.name, "B200-SXM6-180GB") == 0);
    CHECK_INT(pt_cluster_world(&c), 8);
    CHECK_INT(c.device.memory_bytes, INT64_C(180) << 30);
    CHECK(c.device.peak_flops[PT_DTYPE_BF16] == 2250e12);
    CHECK(c.device.peak_flops[PT_DTYPE_FP8] == 4500e12);
    CHECK(c.intra.bw_Bps == 900e9 && c.inter.bw_Bps == 50e9 && c.inter.nics == 8);
    CHECK_INT(pt_cluster_nvlink_domain(&c), 8);

    /* GB200 NVL72: a rack of 18 trays of 4 GPUs, one NVLink domain, a NIC per GPU. */
    CHECK_INT(pt_cluster_get("gb200-nvl72", &c, &err), 0);
    CHECK(strcmp(c.device.name, "GB200-186GB") == 0);
    CHECK_INT(c.nodes, 18);
    CHECK_INT(c.devices_per_node, 4);
    CHECK_INT(pt_cluster_world(&c), 72);
    CHECK_INT(pt_cluster_nvlink_domain(&c), 72);
    CHECK_INT(c.device.memory_bytes, INT64_C(186) << 30);
    CHECK(c.device.peak_flops[PT_DTYPE_BF16] == 2500e12);
    CHECK(c.device.peak_flops[PT_DTYPE_FP8] == 5000e12);
    CHECK(c.intra.bw_Bps == 900e9 && c.inter.nics == 4);
    CHECK(c.inter.bw_Bps == c.inter.nics * c.inter.nic_bw_Bps / c.devices_per_node);

    CHECK_INT(pt_cluster_get("local", &c, &err), 0);
    CHECK_INT(c.nodes, 1);
    CHECK(c.devices_per_node >= 1);
    CHECK(c.device.memory_bytes > 0);
    CHECK(strcmp(c.device.name, "cpu") == 0);
    for (int t = 0; t < PT_DTYPE_COUNT; t++)
        CHECK(c.device.peak_flops[t] == 0);
    CHECK(c.intra.bw_Bps == 0 && c.inter.latency_s == 0);
}

static void test_dtype_names(void)
{
    CHECK(strcmp(pt_dtype_name(PT_DTYPE_FP32), "fp32") == 0);
    CHECK(strcmp(pt_dtype_name(PT_DTYPE_TF32), "tf32") == 0);
    CHECK(strcmp(pt_dtype_name(PT_DTYPE_BF16), "bf16") == 0);
    CHECK(strcmp(pt_dtype_name(PT_DTYPE_FP16), "fp16") == 0);
    CHECK(strcmp(pt_dtype_name(PT_DTYPE_FP8), "fp8") == 0);
    CHECK(strcmp(pt_dtype_name(PT_DTYPE_COUNT), "?") == 0);
}

static void test_cluster_from_file(const char *dir)
{
    char path[512];
    data_path(dir, "cluster_good.json", path, sizeof path);
    pt_cluster c, d;
    pt_err err = {""};
    CHECK_INT(pt_cluster_get(path, &c, &err), 0);
    CHECK(strcmp(c.name, "test-cluster") == 0);
    CHECK_INT(pt_cluster_world(&c), 32);
    CHECK_INT(c.device.memory_bytes, INT64_C(40) << 30);
    CHECK(c.device.peak_flops[PT_DTYPE_FP8] == 0); /* written as the integer 0 */
    CHECK(c.inter.latency_s == 5e-6);
    CHECK_INT(pt_cluster_load_file(path, &d, &err), 0);
    CHECK(cluster_equal(&c, &d));
}

static void expect_cluster_file_error(const char *dir, const char *file, const char *needle1,
                                      const char *needle2)
{
    char path[512];
    data_path(dir, file, path, sizeof path);
    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_get(path, &c, &err), -1);
    CHECK_STR_HAS(err.msg, path);
    CHECK_STR_HAS(err.msg, needle1);
    if (needle2)
        CHECK_STR_HAS(err.msg, needle2);
}

static void test_cluster_bad_files(const char *dir)
{
    expect_cluster_file_error(dir, "cluster_malformed.json", "cluster_malformed.json:4:", NULL);
    expect_cluster_file_error(dir, "cluster_missing_device_field.json",
                              "missing field 'device.memory_bandwidth'", NULL);
    expect_cluster_file_error(dir, "cluster_negative_bandwidth.json",
                              "field 'inter_node.bandwidth' = -2.5e+10",
                              "must be finite and at least 0");
    expect_cluster_file_error(dir, "cluster_zero_nodes.json", "field 'nodes' = 0",
                              "must be at least 1");
    expect_cluster_file_error(dir, "cluster_wrong_type.json", "field 'nodes' = \"4\"",
                              "expected an integer");
    expect_cluster_file_error(dir, "cluster_unknown_flops.json",
                              "unknown field 'device.peak_flops.int8'",
                              "fp32, tf32, bf16, fp16, fp8");
    expect_cluster_file_error(dir, "cluster_huge_devices.json",
                              "field 'devices_per_node' = 1099511627776",
                              "out of range for a 32-bit integer");
}

static void expect_cluster_text_error(const char *from, const char *to, const char *needle)
{
    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_builtin(1, &c), 0);
    char *good = pt_cluster_to_json(&c);
    char *bad = replace_once(good, from, to);
    CHECK_INT(pt_cluster_from_json(bad, "<string>", &c, &err), -1);
    CHECK_STR_HAS(err.msg, "<string>");
    CHECK_STR_HAS(err.msg, needle);
    free(good);
    free(bad);
}

static void test_cluster_bad_input(void)
{
    expect_cluster_text_error("\"nodes\": 1", "\"nodes\": 1048577",
                              "field 'nodes' = 1048577: must be at most");
    expect_cluster_text_error("\"memory_bytes\": 85899345920", "\"memory_bytes\": 0",
                              "field 'device.memory_bytes' = 0: must be at least 1");
    expect_cluster_text_error("\"device\": {", "\"device\": 3, \"x\": {",
                              "unknown field 'x'");
    expect_cluster_text_error("\"device\": {", "\"gpu\": {", "unknown field 'gpu'");
    expect_cluster_text_error("\"intra_node\": {", "\"intra_node\": [], \"y\": {",
                              "unknown field 'y'");
    expect_cluster_text_error("\"latency\": 3e-6", "\"latency\": \"fast\"",
                              "field 'intra_node.latency' = \"fast\": expected a number");

    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_builtin(0, &c), 0);
    c.nodes = 1 << 20;
    c.devices_per_node = 1 << 11;
    CHECK_INT(pt_cluster_validate(&c, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "nodes x devices_per_node = 2147483648 devices");
    c.nodes = 1;
    c.intra.latency_s = NAN;
    CHECK_INT(pt_cluster_validate(&c, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "<struct>: field 'intra_node.latency' = nan");

    CHECK_INT(pt_cluster_get("dgx-b300", &c, &err), -1);
    CHECK_STR_HAS(err.msg, "unknown cluster 'dgx-b300'");
    CHECK_STR_HAS(err.msg, "did you mean 'dgx-b200'?");
    CHECK_STR_HAS(err.msg, "ptplan --list-clusters");
    CHECK_INT(pt_cluster_load_file("/nonexistent/cluster.json", &c, &err), -1);
    CHECK_STR_HAS(err.msg, "cannot read '/nonexistent/cluster.json': No such file");
}

/* ---- Specs as users write them ----------------------------------------------- */

/* Lines of a message (one per problem). */
static int lines_of(const char *msg)
{
    int n = 1;
    for (; *msg; msg++)
        n += *msg == '\n';
    return n;
}

/* Every line of msg starts with "origin: ". */
static bool lines_start_with(const char *msg, const char *origin)
{
    size_t n = strlen(origin);
    for (const char *line = msg; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, origin, n) != 0 || strncmp(line + n, ": ", 2) != 0)
            return false;
    return true;
}

/* A cluster as a user writes it: only the bf16 peak, memory as a real (40e9), and
 * the inter-node bandwidth left to the node's 4 NICs of 25 GB/s over 8 devices. */
static const char user_cluster[] =
    "{\"name\": \"user\", \"nodes\": 2, \"devices_per_node\": 8,\n"
    " \"device\": {\"name\": \"Z100\", \"memory_bytes\": 40e9, \"memory_bandwidth\": 2e12,\n"
    "            \"peak_flops\": {\"bf16\": 312e12}},\n"
    " \"intra_node\": {\"name\": \"nv\", \"bandwidth\": 3e11, \"latency\": 3e-6},\n"
    " \"inter_node\": {\"name\": \"ib\", \"latency\": 5e-6, \"nics\": 4, "
    "\"nic_bandwidth\": 25e9}}\n";

static void expect_user_cluster_error(const char *from, const char *to, const char *needle1,
                                      const char *needle2)
{
    char *bad = replace_once(user_cluster, from, to);
    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_from_json(bad, "my.json", &c, &err), -1);
    CHECK_STR_HAS(err.msg, "my.json: ");
    CHECK_STR_HAS(err.msg, needle1);
    if (needle2)
        CHECK_STR_HAS(err.msg, needle2);
    free(bad);
}

static void expect_user_cluster_ok(const char *from, const char *to, pt_cluster *c)
{
    char *text = replace_once(user_cluster, from, to);
    pt_err err = {""};
    if (pt_cluster_from_json(text, "my.json", c, &err))
        fprintf(stderr, "%s\n", err.msg);
    CHECK_INT(pt_cluster_from_json(text, "my.json", c, &err), 0);
    free(text);
}

static void test_cluster_user_written(void)
{
    pt_cluster c, back;
    pt_err err = {""};
    CHECK_INT(pt_cluster_from_json(user_cluster, "my.json", &c, &err), 0);
    CHECK_INT(c.device.memory_bytes, INT64_C(40000000000));
    CHECK(c.device.peak_flops[PT_DTYPE_BF16] == 312e12);
    CHECK(c.device.peak_flops[PT_DTYPE_FP32] == 0 && c.device.peak_flops[PT_DTYPE_TF32] == 0 &&
          c.device.peak_flops[PT_DTYPE_FP16] == 0 && c.device.peak_flops[PT_DTYPE_FP8] == 0);
    CHECK_INT(c.inter.nics, 4);
    CHECK(c.inter.nic_bw_Bps == 25e9);
    CHECK(c.inter.bw_Bps == 4 * 25e9 / 8); /* derived: 12.5 GB/s per device */
    CHECK_INT(c.intra.nics, 0);

    /* The dump states the NICs and the bandwidth (not the rate per NIC, so that editing
     * the bandwidth of a dump is enough), and loads back identically. */
    char *text = pt_cluster_to_json(&c);
    CHECK_STR_HAS(text, "\"nics\": 4");
    CHECK(!strstr(text, "nic_bandwidth"));
    CHECK_STR_HAS(text, "\"bandwidth\": 1.25e10");
    CHECK_INT(pt_cluster_from_json(text, "<dump>", &back, &err), 0);
    CHECK(cluster_equal(&c, &back));
    char *again = pt_cluster_to_json(&back);
    CHECK(again && strcmp(text, again) == 0);
    free(text);
    free(again);

    /* Sized to 4 devices per node (ptplan --devices), the NICs no longer give the
     * bandwidth kept: the dump leaves nic_bandwidth out and still loads back. */
    c.devices_per_node = 4;
    text = pt_cluster_to_json(&c);
    CHECK(text && !strstr(text, "nic_bandwidth"));
    CHECK_STR_HAS(text, "\"nics\": 4");
    CHECK_INT(pt_cluster_from_json(text, "<dump>", &back, &err), 0);
    CHECK(back.inter.bw_Bps == 12.5e9 && back.inter.nic_bw_Bps == 0);
    free(text);

    /* A bandwidth given beside the NICs must agree with them. */
    expect_user_cluster_ok("\"latency\": 5e-6", "\"bandwidth\": 12.5e9, \"latency\": 5e-6", &c);
    CHECK(c.inter.bw_Bps == 12.5e9 && c.inter.nics == 4);
    /* The NIC count alone is a statement, not a derivation. */
    expect_user_cluster_ok(", \"nic_bandwidth\": 25e9", ", \"bandwidth\": 20e9", &c);
    CHECK(c.inter.bw_Bps == 20e9 && c.inter.nics == 4 && c.inter.nic_bw_Bps == 0);
}

static void test_cluster_nics_refused(void)
{
    expect_user_cluster_error("\"latency\": 5e-6", "\"bandwidth\": 50e9, \"latency\": 5e-6",
                              "field 'inter_node.bandwidth' = 5e+10 disagrees with nics x "
                              "nic_bandwidth / devices_per_node = 4 x 2.5e+10 / 8 = 1.25e+10",
                              NULL);
    expect_user_cluster_error("\"nics\": 4, ", "",
                              "field 'inter_node.nic_bandwidth' needs 'inter_node.nics'",
                              "missing field 'inter_node.bandwidth' (or give 'inter_node.nics' "
                              "and 'inter_node.nic_bandwidth')");
    expect_user_cluster_error(", \"nic_bandwidth\": 25e9", "",
                              "missing field 'inter_node.bandwidth'", NULL);
    expect_user_cluster_error("\"nics\": 4", "\"nics\": 0",
                              "field 'inter_node.nics' = 0: must be at least 1", NULL);
    expect_user_cluster_error("\"nics\": 4", "\"nics\": 2.5", "field 'inter_node.nics' = 2.5",
                              "expected an integer");
    expect_user_cluster_error("\"nic_bandwidth\": 25e9", "\"nic_bandwidth\": 0",
                              "field 'inter_node.nic_bandwidth' = 0: must be finite and "
                              "greater than 0", NULL);
    expect_user_cluster_error("\"bandwidth\": 3e11,", "\"bandwidth\": 3e11, \"nics\": 8,",
                              "unknown field 'intra_node.nics'", NULL);

    /* The same rules on a spec built in code. */
    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_builtin(1, &c), 0);
    c.inter.nics = 0;
    CHECK_INT(pt_cluster_validate(&c, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "<struct>: field 'inter_node.nic_bandwidth' needs 'inter_node.nics'");
    CHECK_INT(pt_cluster_builtin(1, &c), 0);
    c.intra.nics = 2;
    CHECK_INT(pt_cluster_validate(&c, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "only inter_node states NICs");
    c.intra.nics = 0;
    c.inter.nics = -1;
    CHECK_INT(pt_cluster_validate(&c, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "field 'inter_node.nics' = -1: must be at least 0");
}

static void test_cluster_builtin_nics(void)
{
    /* DGX H100: 8 ConnectX-7 at 400 Gb/s; DGX A100: 8 ConnectX-6 at 200 Gb/s; one per
     * GPU, so each GPU's share is one NIC's rate. */
    pt_cluster c;
    CHECK_INT(pt_cluster_builtin(1, &c), 0);
    CHECK(strcmp(c.name, "dgx-h100") == 0);
    CHECK(c.inter.nics == 8 && c.inter.nic_bw_Bps == 400e9 / 8);
    CHECK(c.inter.bw_Bps == c.inter.nics * c.inter.nic_bw_Bps / c.devices_per_node);
    CHECK_INT(pt_cluster_builtin(0, &c), 0);
    CHECK(strcmp(c.name, "dgx-a100-80g") == 0);
    CHECK(c.inter.nics == 8 && c.inter.nic_bw_Bps == 200e9 / 8);
    CHECK(c.inter.bw_Bps == c.inter.nics * c.inter.nic_bw_Bps / c.devices_per_node);
    char *text = pt_cluster_to_json(&c);
    CHECK_STR_HAS(text, "\"nics\": 8");
    CHECK(!strstr(text, "nic_bandwidth")); /* the dump states the bandwidth itself */
    free(text);
}

static void test_cluster_precision(void)
{
    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_from_json(user_cluster, "my.json", &c, &err), 0);
    CHECK_INT(pt_cluster_check_precision(&c, PT_PREC_BF16, &err), 0);
    CHECK_INT(pt_cluster_check_precision(&c, PT_PREC_BF16_GRAD16, &err), 0);
    CHECK_INT(pt_cluster_check_precision(&c, PT_PREC_FP32, &err), -1);
    CHECK_STR_HAS(err.msg, "cluster 'user'");
    CHECK_STR_HAS(err.msg, "field 'device.peak_flops.fp32' is absent or 0");
    CHECK_STR_HAS(err.msg, "precision fp32");
    CHECK(pt_prec_dtype(PT_PREC_FP32) == PT_DTYPE_FP32);
    CHECK(pt_prec_dtype(PT_PREC_BF16) == PT_DTYPE_BF16);
    CHECK(pt_prec_dtype(PT_PREC_BF16_GRAD16) == PT_DTYPE_BF16);

    /* An fp32-only device cannot plan bf16. */
    c.device.peak_flops[PT_DTYPE_BF16] = 0;
    c.device.peak_flops[PT_DTYPE_FP32] = 20e12;
    CHECK_INT(pt_cluster_check_precision(&c, PT_PREC_FP32, &err), 0);
    CHECK_INT(pt_cluster_check_precision(&c, PT_PREC_BF16, &err), -1);
    CHECK_STR_HAS(err.msg, "field 'device.peak_flops.bf16' is absent or 0");
    CHECK_STR_HAS(err.msg, "precision bf16 computes in bf16");
    CHECK_INT(pt_cluster_check_precision(&c, PT_PREC_BF16_GRAD16, &err), -1);
    CHECK_STR_HAS(err.msg, "precision bf16-grad16");

    /* No peak at all is a spec not yet profiled (`local`): any precision is planned. */
    CHECK_INT(pt_cluster_get("local", &c, &err), 0);
    CHECK_INT(pt_cluster_check_precision(&c, PT_PREC_FP32, &err), 0);
    CHECK_INT(pt_cluster_check_precision(&c, PT_PREC_BF16, &err), 0);
    for (int i = 0; i < 2; i++) {
        CHECK_INT(pt_cluster_builtin(i, &c), 0);
        for (int p = 0; p < PT_PREC_COUNT; p++)
            CHECK_INT(pt_cluster_check_precision(&c, (pt_prec_kind)p, &err), 0);
    }
}

/* Integers written as reals: taken when integral and in range, refused otherwise. */
static void test_integer_reals(void)
{
    expect_user_cluster_error("40e9", "40000000000.5",
                              "my.json: field 'device.memory_bytes' = 40000000000.5: expected "
                              "an integer, got a real number with a fractional part", NULL);
    expect_user_cluster_error("40e9", "4.05", "field 'device.memory_bytes' = 4.05: expected "
                              "an integer, got a real number with a fractional part", NULL);
    expect_user_cluster_error("40e9", "1e300", "field 'device.memory_bytes' = 1e+300: out of "
                              "range for a 64-bit integer", NULL);
    expect_user_cluster_error("40e9", "-1e300", "field 'device.memory_bytes' = -1e+300: out "
                              "of range for a 64-bit integer", NULL);
    expect_user_cluster_error("40e9", "9223372036854775808.0",
                              "= 9.223372036854776e+18: out of range for a 64-bit integer", NULL);
    /* -2^63 is the last real in range: read, then refused as a size. */
    expect_user_cluster_error("40e9", "-9223372036854775808.0",
                              "field 'device.memory_bytes' = -9223372036854775808: must be at "
                              "least 1", NULL);
    expect_user_cluster_error("\"devices_per_node\": 8", "\"devices_per_node\": 1e10",
                              "field 'devices_per_node' = 1e+10: out of range for a "
                              "32-bit integer", NULL);
    pt_cluster c;
    expect_user_cluster_ok("\"nodes\": 2", "\"nodes\": 2.0e1", &c);
    CHECK_INT(c.nodes, 20);
    /* 40.5e9 names the integer 40,500,000,000: taken. */
    expect_user_cluster_ok("40e9", "40.5e9", &c);
    CHECK_INT(c.device.memory_bytes, INT64_C(40500000000));

    /* Model and stack specs share the reader. */
    char *good = pt_model_to_json(pt_model_builtin(0));
    char *text = replace_once(good, "\"seq\": 64", "\"seq\": 6.4e1");
    pt_model m;
    pt_err err = {""};
    CHECK_INT(pt_model_from_json(text, "<string>", &m, &err), 0);
    CHECK_INT(m.seq, 64);
    free(text);
    free(good);
    good = pt_stack_to_json(pt_stack_builtin(0));
    text = replace_once(good, "\"vocab_multiple\": 128", "\"vocab_multiple\": 1.28e2");
    pt_stack s;
    CHECK_INT(pt_stack_from_json(text, "<string>", &s, &err), 0);
    CHECK_INT(s.vocab_multiple, 128);
    free(text);
    free(good);

    /* overlap.tp_backward_async: dumped and read back; optional, false when left out. */
    pt_stack core;
    CHECK_INT(pt_stack_get("megatron-core", &core, &err), 0);
    CHECK(core.tp_backward_async);
    good = pt_stack_to_json(&core);
    CHECK_INT(pt_stack_from_json(good, "<string>", &s, &err), 0);
    CHECK(s.tp_backward_async);
    text = replace_once(good, "\"tp_backward_async\": true,", "");
    CHECK_INT(pt_stack_from_json(text, "<string>", &s, &err), 0);
    CHECK(!s.tp_backward_async);
    free(text);
    text = replace_once(good, "\"tp_backward_async\": true", "\"tp_backward_async\": 1");
    CHECK_INT(pt_stack_from_json(text, "s.json", &s, &err), -1);
    CHECK_STR_HAS(err.msg, "tp_backward_async");
    free(text);
    free(good);
}

/* One file with several problems: every one reported, a line each. */
static void test_cluster_all_errors(void)
{
    char *t1 = replace_once(user_cluster, "\"memory_bytes\"", "\"memroy_bytes\"");
    char *t2 = replace_once(t1, "\"bf16\": 312e12", "\"bf16\": \"lots\"");
    char *t3 = replace_once(t2, "\"latency\": 3e-6", "\"latency\": -3e-6");
    char *t4 = replace_once(t3, "\"nodes\": 2", "\"nodes\": 0, \"gpus\": 16");
    char *t5 = replace_once(t4, ", \"latency\": 5e-6", "");
    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_from_json(t5, "my.json", &c, &err), -1);
    CHECK_STR_HAS(err.msg, "my.json: unknown field 'gpus' (expected one of: name, nodes, ");
    CHECK_STR_HAS(err.msg, "my.json: unknown field 'device.memroy_bytes' (did you mean "
                           "'memory_bytes'?)");
    CHECK_STR_HAS(err.msg, "my.json: field 'device.peak_flops.bf16' = \"lots\": expected a "
                           "number, got a string");
    CHECK_STR_HAS(err.msg, "my.json: missing field 'inter_node.latency'");
    CHECK_STR_HAS(err.msg, "my.json: field 'nodes' = 0: must be at least 1");
    CHECK_STR_HAS(err.msg, "my.json: field 'intra_node.latency' = -3e-06: must be finite");
    /* The misspelling is not also reported as the field it meant missing, nor the
     * mistyped peak as out of range. */
    CHECK(!strstr(err.msg, "missing field 'device.memory_bytes'"));
    CHECK(!strstr(err.msg, "device.memory_bytes' = 0"));
    CHECK(!strstr(err.msg, "peak_flops.bf16' = 0"));
    CHECK_INT(lines_of(err.msg), 6);
    CHECK(lines_start_with(err.msg, "my.json"));
    free(t1);
    free(t2);
    free(t3);
    free(t4);
    free(t5);

    /* A missing object is one problem, not one per field inside it. */
    t1 = replace_once(user_cluster, "\"intra_node\"", "\"intra_nod\"");
    CHECK_INT(pt_cluster_from_json(t1, "my.json", &c, &err), -1);
    CHECK_STR_HAS(err.msg, "unknown field 'intra_nod' (did you mean 'intra_node'?)");
    CHECK_INT(lines_of(err.msg), 1);
    free(t1);

    /* More problems than pt_err holds: as many lines as fit, then how many more. */
    char many[4096] = "{";
    for (int i = 0; i < 30; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"unrelated_%02d\": 1",
                 i ? ", " : "", i);
    strcat(many, "}");
    CHECK_INT(pt_cluster_from_json(many, "my.json", &c, &err), -1);
    CHECK(strlen(err.msg) < sizeof err.msg - 1);
    const char *last = strrchr(err.msg, '\n');
    int more = 0;
    CHECK(last && sscanf(last, "\nmy.json: and %d more problems", &more) == 1);
    /* 30 unknown fields and 6 missing ones (name ... inter_node) */
    CHECK_INT(lines_of(err.msg) - 1 + more, 36);
    CHECK(lines_of(err.msg) >= 3);
    CHECK(lines_start_with(err.msg, "my.json"));

    /* Values checked on a spec built in code are all reported too. */
    CHECK_INT(pt_cluster_builtin(1, &c), 0);
    c.nodes = 0;
    c.intra.latency_s = NAN;
    c.device.gemm_max_eff = 2;
    c.device.gemm_max_eff_fp8 = -0.5;
    CHECK_INT(pt_cluster_validate(&c, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "<struct>: field 'nodes' = 0");
    CHECK_STR_HAS(err.msg, "<struct>: field 'intra_node.latency' = nan");
    CHECK_STR_HAS(err.msg, "<struct>: field 'device.gemm_max_efficiency' = 2");
    CHECK_STR_HAS(err.msg, "<struct>: field 'device.gemm_max_efficiency_fp8' = -0.5");
    CHECK_INT(lines_of(err.msg), 4);
}

static void test_model_stack_all_errors(void)
{
    char *good = pt_model_to_json(pt_model_builtin(0));
    char *t1 = replace_once(good, "\"hidden\"", "\"hiden\"");
    char *t2 = replace_once(t1, "\"layers\": 4", "\"layers\": \"x\"");
    char *t3 = replace_once(t2, "\"vocab\": 256", "\"vocab\": 0");
    pt_model m;
    pt_err err = {""};
    CHECK_INT(pt_model_from_json(t3, "m.json", &m, &err), -1);
    CHECK_STR_HAS(err.msg, "m.json: unknown field 'hiden' (did you mean 'hidden'?)");
    CHECK_STR_HAS(err.msg, "m.json: field 'layers' = \"x\": expected an integer, got a string");
    CHECK_STR_HAS(err.msg, "m.json: field 'vocab' = 0: must be at least 1");
    CHECK_INT(lines_of(err.msg), 3);
    free(good);
    free(t1);
    free(t2);
    free(t3);

    good = pt_stack_to_json(pt_stack_builtin(0));
    t1 = replace_once(good, "\"tp_reach\"", "\"tp_raech\"");
    t2 = replace_once(t1, "\"fused_xent\"", "\"fused_xnet\"");
    t3 = replace_once(t2, "\"step_overhead_s\": 0", "\"step_overhead_s\": -1");
    pt_stack s;
    CHECK_INT(pt_stack_from_json(t3, "s.json", &s, &err), -1);
    CHECK_STR_HAS(err.msg, "s.json: unknown field 'overlap.tp_raech' (did you mean "
                           "'tp_reach'?)");
    CHECK_STR_HAS(err.msg, "s.json: unknown field 'loss.fused_xnet' (did you mean "
                           "'fused_xent'?)");
    CHECK_STR_HAS(err.msg, "s.json: field 'step_overhead_s' = -1: expected a value in [0, 3600]");
    CHECK_INT(lines_of(err.msg), 3);
    free(good);
    free(t1);
    free(t2);
    free(t3);
}

/* A stack's moe_host_sync_s: optional (0 where left out, as in ptrun's), written where
 * set and read back the same; a negative, a value over a second or a string is one
 * error naming the field. */
static void test_stack_moe_host_sync(void)
{
    pt_err err = {""};
    pt_stack s;
    char *own = pt_stack_to_json(pt_stack_builtin(0));
    CHECK(strstr(own, "moe_host_sync_s") == NULL);
    CHECK_INT(pt_stack_from_json(own, "s.json", &s, &err), 0);
    CHECK(s.moe_host_sync_s == 0);
    char *set = replace_once(own, "\"name\"", "\"moe_host_sync_s\": 0.0025, \"name\"");
    CHECK_INT(pt_stack_from_json(set, "s.json", &s, &err), 0);
    CHECK(s.moe_host_sync_s == 0.0025);
    char *again = pt_stack_to_json(&s);
    pt_stack back;
    CHECK_INT(pt_stack_from_json(again, "s.json", &back, &err), 0);
    CHECK(back.moe_host_sync_s == 0.0025);
    const char *bad[3][2] = {
        {"-0.001", "s.json: field 'moe_host_sync_s' = -0.001: expected a value in [0, 1]"},
        {"2", "s.json: field 'moe_host_sync_s' = 2: expected a value in [0, 1]"},
        {"\"1ms\"", "s.json: field 'moe_host_sync_s'"}};
    for (int i = 0; i < 3; i++) {
        char to[64];
        snprintf(to, sizeof to, "\"moe_host_sync_s\": %s, \"name\"", bad[i][0]);
        char *text = replace_once(own, "\"name\"", to);
        err.msg[0] = '\0';
        CHECK_INT(pt_stack_from_json(text, "s.json", &s, &err), -1);
        CHECK_STR_HAS(err.msg, bad[i][1]);
        CHECK_INT(lines_of(err.msg), 1);
        free(text);
    }
    free(own);
    free(set);
    free(again);
}

/* ---- NVLink domains ---------------------------------------------------------- */

/* The NVLink domain of a spec: written only when wider than the node, read back the
 * same, and a value equal to the node read as the node itself. */
static void test_nvlink_domain_json(void)
{
    pt_cluster c, back;
    pt_err err = {""};
    CHECK_INT(pt_cluster_get("gb200-nvl72", &c, &err), 0);
    char *text = pt_cluster_to_json(&c);
    CHECK_STR_HAS(text, "\"devices_per_node\": 4,\n  \"nvlink_domain\": 72,");
    CHECK_INT(pt_cluster_from_json(text, "<dump>", &back, &err), 0);
    CHECK_INT(back.nvlink_domain, 72);
    CHECK(cluster_equal(&c, &back));
    free(text);
    CHECK_INT(pt_cluster_get("dgx-h100", &c, &err), 0);
    CHECK_INT(c.nvlink_domain, 0);
    CHECK_INT(pt_cluster_nvlink_domain(&c), 8);
    text = pt_cluster_to_json(&c);
    CHECK(!strstr(text, "nvlink_domain"));
    free(text);

    /* Two 8-GPU nodes joined by one NVLink fabric; "nvlink_domain": 8 is the node. */
    expect_user_cluster_ok("\"devices_per_node\": 8", "\"devices_per_node\": 8, "
                           "\"nvlink_domain\": 16", &c);
    CHECK_INT(c.nvlink_domain, 16);
    CHECK_INT(pt_cluster_nvlink_domain(&c), 16);
    expect_user_cluster_ok("\"devices_per_node\": 8", "\"devices_per_node\": 8, "
                           "\"nvlink_domain\": 8", &c);
    CHECK_INT(c.nvlink_domain, 0);
    CHECK_INT(pt_cluster_nvlink_domain(&c), 8);
    text = pt_cluster_to_json(&c);
    CHECK(!strstr(text, "nvlink_domain"));
    free(text);
    /* A domain wider than the cluster: part of a rack. */
    expect_user_cluster_ok("\"devices_per_node\": 8", "\"devices_per_node\": 8, "
                           "\"nvlink_domain\": 72", &c);
    CHECK_INT(pt_cluster_nvlink_domain(&c), 72);
    /* A node resized after reading (ptplan --devices) keeps "the node" the node. */
    expect_user_cluster_ok("\"devices_per_node\": 8", "\"devices_per_node\": 8", &c);
    c.devices_per_node = 4;
    CHECK_INT(pt_cluster_nvlink_domain(&c), 4);
}

/* A bad "nvlink_domain": one line naming the file, the field and the rule. */
static void expect_domain_error(const char *value, const char *needle)
{
    char to[96];
    snprintf(to, sizeof to, "\"devices_per_node\": 8, \"nvlink_domain\": %s", value);
    char *bad = replace_once(user_cluster, "\"devices_per_node\": 8", to);
    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_from_json(bad, "my.json", &c, &err), -1);
    CHECK_STR_HAS(err.msg, needle);
    CHECK_INT(lines_of(err.msg), 1);
    CHECK(lines_start_with(err.msg, "my.json"));
    free(bad);
}

static void test_nvlink_domain_refused(void)
{
    const char *whole = ": must be a positive multiple of devices_per_node (8): the devices "
                        "one NVLink fabric joins are whole nodes";
    char needle[256];
    const char *values[] = {"12", "4", "0", "-8"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        snprintf(needle, sizeof needle, "my.json: field 'nvlink_domain' = %s%s", values[i],
                 whole);
        expect_domain_error(values[i], needle);
    }
    expect_domain_error("16.5", "my.json: field 'nvlink_domain' = 16.5: expected an integer");
    expect_domain_error("\"rack\"", "my.json: field 'nvlink_domain' = \"rack\": expected an "
                                    "integer");
    expect_domain_error("1e10", "my.json: field 'nvlink_domain' = 1e+10: out of range for a "
                                "32-bit integer");
    expect_user_cluster_error("\"devices_per_node\": 8", "\"devices_per_node\": 8, "
                              "\"nvlink_domian\": 16",
                              "unknown field 'nvlink_domian' (did you mean 'nvlink_domain'?)",
                              NULL);

    /* The same rules on a spec built in code (and in a plan.json, which validates). */
    pt_cluster c;
    pt_err err = {""};
    CHECK_INT(pt_cluster_get("gb200-nvl72", &c, &err), 0);
    c.nvlink_domain = 70;
    CHECK_INT(pt_cluster_validate(&c, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "<struct>: field 'nvlink_domain' = 70: must be a positive multiple "
                           "of devices_per_node (4)");
    CHECK_INT(lines_of(err.msg), 1);
    c.nvlink_domain = -72;
    CHECK_INT(pt_cluster_validate(&c, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "<struct>: field 'nvlink_domain' = -72");
    c.nvlink_domain = (1 << 30) + 4;
    CHECK_INT(pt_cluster_validate(&c, "<struct>", &err), -1);
    CHECK_STR_HAS(err.msg, "<struct>: field 'nvlink_domain' = 1073741828: must be at most "
                           "1073741824");
}

/* The rejections of one layout of Llama 3 70B (global batch 1152, divisible by every dp
 * below) on a built-in cluster of `nodes` nodes and the given NVLink domain (-1: the
 * built-in's own). */
static uint32_t rejects(const char *cluster, int nodes, int domain, const char *layout)
{
    pt_model m;
    pt_cluster c;
    pt_layout l;
    pt_err err = {""};
    CHECK_INT(pt_model_get("llama3-70b", &m, &err), 0);
    CHECK_INT(pt_cluster_get(cluster, &c, &err), 0);
    c.nodes = nodes;
    if (domain >= 0)
        c.nvlink_domain = domain;
    pt_layout_default(&l);
    if (pt_layout_parse(layout, pt_cluster_world(&c), 1152, &l, &err)) {
        fprintf(stderr, "%s: %s\n", layout, err.msg);
        pt_check_failures++;
        return 0;
    }
    uint32_t mask = 0;
    pt_layout_check(&m, &c, 1152, &l, &mask);
    return mask;
}

#define SPANS (1u << PT_REJECT_TP_SPANS_NODES)

/* A tensor-parallel group must stay inside one NVLink domain: a node of a DGX, but a
 * whole rack of a GB200 NVL72, whose groups may span its 4-GPU trays. */
static void test_nvlink_domain_tp_rule(void)
{
    /* tp=16: two DGX H100 nodes, but one NVLink domain on 4 GB200 trays. */
    CHECK(rejects("dgx-h100", 2, -1, "tp=16") & SPANS);
    CHECK(!(rejects("gb200-nvl72", 4, -1, "tp=16") & SPANS));
    /* tp=8 over two trays of a rack: allowed; with the domain the tray, not. */
    CHECK_INT(rejects("gb200-nvl72", 18, -1, "tp=8,dp=9"), 0);
    CHECK(rejects("gb200-nvl72", 18, 0, "tp=8,dp=9") & SPANS);
    /* On two racks, tp=16 groups of the default order cross the first rack's end
     * (ranks 64..79), tp=8 ones never do (8 divides 72). */
    CHECK(rejects("gb200-nvl72", 36, -1, "tp=16,dp=9") & SPANS);
    CHECK(!(rejects("gb200-nvl72", 36, -1, "tp=8,dp=18") & SPANS));
    /* dp fastest: a tp pair on ranks r and r+36 shares a rack, one on r and r+72 not. */
    CHECK(!(rejects("gb200-nvl72", 18, -1, "tp=2,dp=36,order=dp-tp-cp-pp") & SPANS));
    CHECK(rejects("gb200-nvl72", 36, -1, "tp=2,dp=72,order=dp-tp-cp-pp") & SPANS);

    /* The explanation names the domain and its nodes. */
    pt_model m;
    pt_cluster c;
    pt_layout l;
    pt_err err = {""};
    char why[256];
    CHECK_INT(pt_model_get("llama3-70b", &m, &err), 0);
    CHECK_INT(pt_cluster_get("gb200-nvl72", &c, &err), 0);
    c.nodes = 36;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=16,dp=9", pt_cluster_world(&c), 1152, &l, &err), 0);
    pt_reject_explain(PT_REJECT_TP_SPANS_NODES, &m, &c, 1152, &l, why, sizeof why);
    CHECK_STR_HAS(why, "a tp group of 16 ranks spans NVLink domains of 72 devices (18 nodes "
                       "of 4 each)");
    CHECK_INT(pt_cluster_get("dgx-h100", &c, &err), 0);
    c.nodes = 2;
    pt_reject_explain(PT_REJECT_TP_SPANS_NODES, &m, &c, 1152, &l, why, sizeof why);
    CHECK_STR_HAS(why, "a tp group of 16 ranks spans NVLink domains of 8 devices (one node "
                       "each)");
}

/* Collectives and pipeline sends are priced on NVLink inside a domain: the ranks of a
 * group that share rank 0's domain are what the cost model calls its ranks per node. */
static void test_nvlink_domain_pricing(void)
{
    pt_model m;
    pt_cluster c;
    pt_layout l;
    pt_train t;
    pt_opctx ctx;
    pt_err err = {""};
    CHECK_INT(pt_model_get("llama3-70b", &m, &err), 0);
    CHECK_INT(pt_cluster_get("gb200-nvl72", &c, &err), 0);
    c.nodes = 36;
    pt_train_default(&t, &c);
    t.global_batch = 1152;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=8,dp=18", pt_cluster_world(&c), 1152, &l, &err), 0);
    pt_opctx_init(&ctx, &m, &l, &t, &c);
    CHECK_INT(ctx.ranks_per_node[PT_GROUP_TP], 8); /* two trays, one domain */
    CHECK_INT(ctx.ranks_per_node[PT_GROUP_DP], 9); /* ranks 0, 8, .., 64 of 0, 8, .., 136 */
    CHECK_INT(ctx.world_ranks_per_node, 72);
    c.nvlink_domain = 0; /* were the tray the domain */
    pt_opctx_init(&ctx, &m, &l, &t, &c);
    CHECK_INT(ctx.ranks_per_node[PT_GROUP_TP], 4);
    CHECK_INT(ctx.ranks_per_node[PT_GROUP_DP], 1);
    CHECK_INT(ctx.world_ranks_per_node, 4);

    /* A pipeline send between trays of one rack goes over NVLink: far faster than
     * over the trays' NICs. */
    c.nvlink_domain = 72;
    c.nodes = 18;
    pt_train_default(&t, &c);
    t.global_batch = 1152;
    pt_layout_default(&l);
    CHECK_INT(pt_layout_parse("tp=4,pp=2,dp=9", pt_cluster_world(&c), 1152, &l, &err), 0);
    pt_sim_costs rack, trays;
    CHECK_INT(pt_sim_price(&m, &c, &t, NULL, &l, &rack, &err), 0);
    c.nvlink_domain = 0;
    CHECK_INT(pt_sim_price(&m, &c, &t, NULL, &l, &trays, &err), 0);
    CHECK(rack.p2p_s[0] > 0 && rack.p2p_s[0] * 4 < trays.p2p_s[0]);
    pt_sim_costs_free(&rack);
    pt_sim_costs_free(&trays);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    test_model_builtins_validate();
    test_model_round_trip();
    test_model_published_sizes();
    test_model_moe_builtins();
    test_model_moe_json();
    test_model_from_file(dir);
    test_model_bad_files(dir);
    test_model_bad_text();
    test_model_bad_names(dir);
    test_cluster_builtins();
    test_cluster_published_figures();
    test_dtype_names();
    test_cluster_from_file(dir);
    test_cluster_bad_files(dir);
    test_cluster_bad_input();
    test_cluster_user_written();
    test_cluster_nics_refused();
    test_cluster_builtin_nics();
    test_cluster_precision();
    test_integer_reals();
    test_cluster_all_errors();
    test_model_stack_all_errors();
    test_stack_moe_host_sync();
    test_nvlink_domain_json();
    test_nvlink_domain_refused();
    test_nvlink_domain_tp_rule();
    test_nvlink_domain_pricing();
    return pt_check_result();
}
