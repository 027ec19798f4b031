/*
 * ptplan — the planner's command line. It lists the built-in specs and dumps them
 * as JSON, prints the process groups of a layout, evaluates one layout (validity
 * and per-rank memory), or enumerates every layout of a model on a cluster and
 * lists those that fit in device memory, counting the rejected ones by reason.
 * All the planning lives in planner/; this file parses options, prints, and picks
 * the exit code: 0 success, 1 bad input, 3 the evaluated layout is invalid or
 * does not fit.
 */
#include "planner.h"
#include "ptconfig.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_BAD_INPUT = 1, EXIT_REJECTED = 3 };

static const char usage_text[] =
    "usage: ptplan [options]\n"
    "\n"
    "Plans the parallel layout of a transformer training job. With no mode option it\n"
    "enumerates every layout of the model on the cluster and lists those that fit.\n"
    "\n"
    "What to plan (defaults in brackets):\n"
    "  --model NAME|FILE       built-in model or model JSON file [llama3-8b]\n"
    "  --cluster NAME|FILE     built-in cluster or cluster JSON file [dgx-h100]\n"
    "  --nodes N               number of nodes [the cluster's own]\n"
    "  --global-batch B        sequences per optimizer step [512]\n"
    "  --seq S                 sequence length [the model's own]\n"
    "  --precision P           bf16 (fp32 grads), bf16-grad16 or fp32\n"
    "                          [bf16 on GPUs, fp32 on CPUs]\n"
    "  --order ORDER           rank order, fastest first [tp-cp-dp-pp]\n"
    "  --max-mbs N             micro-batch sizes tried: powers of two up to N [8]\n"
    "  --mem-fraction F        share of device memory a layout may use [0.95]\n"
    "  --bucket-mib N          gradient-reduction bucket size in MiB [25]\n"
    "\n"
    "Modes:\n"
    "  --layout L [--explain]  evaluate one layout, e.g.\n"
    "                          \"tp=8,pp=4,vp=2,cp=1,dp=2,zero=1,mbs=1,recompute=selective,\n"
    "                          sp=1,schedule=interleaved\"; keys left out default to 1 / off,\n"
    "                          dp to what fills the cluster. --explain shows every rule\n"
    "                          broken with its values and the memory of each stage.\n"
    "  --groups L              print the process groups of layout L\n"
    "  --list-models           list the built-in models\n"
    "  --list-clusters         list the built-in clusters\n"
    "  --dump-model NAME|FILE  print a model spec as JSON (loads back identically)\n"
    "  --dump-cluster NAME|FILE print a cluster spec as JSON\n"
    "\n"
    "Output:\n"
    "  --json                  machine-readable JSON on stdout\n"
    "  --limit N               layouts listed [50 for text, all for --json; 0 = all]\n"
    "  -h, --help              this text\n"
    "  --version               version and build configuration\n"
    "\n"
    "Exit status: 0 success, 1 bad input, 3 the evaluated layout is invalid or does not\n"
    "fit (--layout).\n";

typedef struct {
    const char *model, *cluster, *layout, *groups, *dump_model, *dump_cluster;
    const char *precision, *order;
    int64_t nodes, global_batch, seq, max_mbs, limit, bucket_mib;
    double mem_fraction;
    bool explain, json, list_models, list_clusters;
} options;

static int fail(const char *fmt, const char *msg)
{
    fprintf(stderr, "ptplan: ");
    fprintf(stderr, fmt, msg);
    fputc('\n', stderr);
    return EXIT_BAD_INPUT;
}

static int parse_count(const char *opt, const char *val, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (!*val || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "ptplan: %s %s: expected an integer from %lld to %lld\n", opt, val,
                (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_options(int argc, char **argv, options *o)
{
    enum { O_MODEL = 256, O_CLUSTER, O_NODES, O_GB, O_SEQ, O_PREC, O_ORDER, O_MAXMBS,
           O_MEMFRAC, O_BUCKET, O_LAYOUT, O_EXPLAIN, O_GROUPS, O_LM, O_LC, O_DM, O_DC,
           O_JSON, O_LIMIT, O_VERSION };
    static const struct option longopts[] = {
        {"model", 1, 0, O_MODEL}, {"cluster", 1, 0, O_CLUSTER}, {"nodes", 1, 0, O_NODES},
        {"global-batch", 1, 0, O_GB}, {"seq", 1, 0, O_SEQ}, {"precision", 1, 0, O_PREC},
        {"order", 1, 0, O_ORDER}, {"max-mbs", 1, 0, O_MAXMBS},
        {"mem-fraction", 1, 0, O_MEMFRAC}, {"bucket-mib", 1, 0, O_BUCKET},
        {"layout", 1, 0, O_LAYOUT}, {"explain", 0, 0, O_EXPLAIN}, {"groups", 1, 0, O_GROUPS},
        {"list-models", 0, 0, O_LM}, {"list-clusters", 0, 0, O_LC},
        {"dump-model", 1, 0, O_DM}, {"dump-cluster", 1, 0, O_DC}, {"json", 0, 0, O_JSON},
        {"limit", 1, 0, O_LIMIT}, {"help", 0, 0, 'h'}, {"version", 0, 0, O_VERSION},
        {0, 0, 0, 0}};
    *o = (options){.model = "llama3-8b", .cluster = "dgx-h100", .global_batch = 512,
                   .max_mbs = 8, .limit = -1, .mem_fraction = 0.95, .bucket_mib = 25};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_MODEL: o->model = optarg; break;
        case O_CLUSTER: o->cluster = optarg; break;
        case O_NODES: bad = parse_count("--nodes", optarg, 1, 1 << 20, &o->nodes); break;
        case O_GB: bad = parse_count("--global-batch", optarg, 1, 1LL << 30, &o->global_batch);
            break;
        case O_SEQ: bad = parse_count("--seq", optarg, 1, 1LL << 30, &o->seq); break;
        case O_PREC: o->precision = optarg; break;
        case O_ORDER: o->order = optarg; break;
        case O_MAXMBS: bad = parse_count("--max-mbs", optarg, 1, 1 << 20, &o->max_mbs); break;
        case O_BUCKET: bad = parse_count("--bucket-mib", optarg, 1, 1 << 20, &o->bucket_mib);
            break;
        case O_MEMFRAC: {
            char *end;
            o->mem_fraction = strtod(optarg, &end);
            if (!*optarg || *end || !(o->mem_fraction > 0 && o->mem_fraction <= 1)) {
                fprintf(stderr, "ptplan: --mem-fraction %s: expected a number in (0, 1]\n",
                        optarg);
                bad = 1;
            }
            break;
        }
        case O_LAYOUT: o->layout = optarg; break;
        case O_EXPLAIN: o->explain = true; break;
        case O_GROUPS: o->groups = optarg; break;
        case O_LM: o->list_models = true; break;
        case O_LC: o->list_clusters = true; break;
        case O_DM: o->dump_model = optarg; break;
        case O_DC: o->dump_cluster = optarg; break;
        case O_JSON: o->json = true; break;
        case O_LIMIT: bad = parse_count("--limit", optarg, 0, INT64_MAX, &o->limit); break;
        case 'h': fputs(usage_text, stdout); exit(0);
        case O_VERSION:
            printf("ptplan %s (CUDA backend: %s)\n", PT_VERSION, PT_HAVE_CUDA ? "yes" : "no");
            exit(0);
        case ':':
            fprintf(stderr, "ptplan: option %s needs a value (see ptplan --help)\n",
                    argv[optind - 1]);
            return -1;
        default:
            fprintf(stderr, "ptplan: unknown option '%s' (see ptplan --help)\n",
                    argv[optind - 1]);
            return -1;
        }
        if (bad)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "ptplan: unexpected argument '%s' (see ptplan --help)\n", argv[optind]);
        return -1;
    }
    int modes = (o->layout != NULL) + (o->groups != NULL) + o->list_models + o->list_clusters +
                (o->dump_model != NULL) + (o->dump_cluster != NULL);
    if (modes > 1) {
        fprintf(stderr, "ptplan: choose one of --layout, --groups, --list-models, "
                        "--list-clusters, --dump-model, --dump-cluster\n");
        return -1;
    }
    if (o->explain && !o->layout) {
        fprintf(stderr, "ptplan: --explain goes with --layout\n");
        return -1;
    }
    return 0;
}

/* ---- Printing helpers -------------------------------------------------------- */

static double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

static void print_json(json_t *j)
{
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (text) {
        fputs(text, stdout);
        fputc('\n', stdout);
        free(text);
    }
    json_decref(j);
}

/* Parses a spec text back into a json_t so it can be nested in other output. */
static json_t *spec_json(char *text)
{
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    return j ? j : json_null();
}

/* ---- Spec modes -------------------------------------------------------------- */

static int list_models(bool json)
{
    json_t *arr = json_array();
    if (!json)
        printf("%-12s %4s %6s %4s %4s %6s %7s %5s %-9s %-6s %-7s %8s\n", "name", "L", "h",
               "a", "k", "f", "v", "s", "norm", "act", "pos", "params");
    for (int i = 0; i < pt_model_builtin_count(); i++) {
        const pt_model *m = pt_model_builtin(i);
        if (json) {
            json_array_append_new(arr, spec_json(pt_model_to_json(m)));
            continue;
        }
        printf("%-12s %4lld %6lld %4lld %4lld %6lld %7lld %5lld %-9s %-6s %-7s %7.2fB\n",
               m->name, (long long)m->layers, (long long)m->hidden, (long long)m->heads,
               (long long)m->kv_heads, (long long)m->ffn, (long long)m->vocab,
               (long long)m->seq, m->norm == PT_NORM_RMSNORM ? "rmsnorm" : "layernorm",
               m->act == PT_ACT_SWIGLU ? "swiglu" : "gelu",
               m->pos == PT_POS_ROPE ? "rope" : "learned",
               (double)pt_model_params_total(m) / 1e9);
    }
    if (json)
        print_json(arr);
    else
        json_decref(arr);
    return 0;
}

static int list_clusters(bool json)
{
    json_t *arr = json_array();
    if (!json)
        printf("%-14s %5s %7s  %-22s %9s %10s %11s %11s\n", "name", "nodes", "dev/node",
               "device", "mem GiB", "bf16 TF/s", "intra GB/s", "inter GB/s");
    for (int i = 0; i < pt_cluster_builtin_count(); i++) {
        pt_cluster c;
        if (pt_cluster_builtin(i, &c))
            continue;
        if (json) {
            json_array_append_new(arr, spec_json(pt_cluster_to_json(&c)));
            continue;
        }
        printf("%-14s %5d %7d   %-22s %9.1f %10.1f %11.1f %11.1f\n", c.name, c.nodes,
               c.devices_per_node, c.device.name, gib((double)c.device.memory_bytes),
               c.device.peak_flops[PT_DTYPE_BF16] / 1e12, c.intra.bw_Bps / 1e9,
               c.inter.bw_Bps / 1e9);
    }
    if (json)
        print_json(arr);
    else
        json_decref(arr);
    return 0;
}

static int dump_model(const char *name)
{
    pt_model m;
    pt_err err;
    if (pt_model_get(name, &m, &err))
        return fail("%s", err.msg);
    char *text = pt_model_to_json(&m);
    fputs(text, stdout);
    free(text);
    return 0;
}

static int dump_cluster(const char *name, int64_t nodes)
{
    pt_cluster c;
    pt_err err;
    if (pt_cluster_get(name, &c, &err))
        return fail("%s", err.msg);
    if (nodes)
        c.nodes = (int)nodes;
    char *text = pt_cluster_to_json(&c);
    fputs(text, stdout);
    free(text);
    return 0;
}

/* ---- Loading what to plan ---------------------------------------------------- */

typedef struct {
    pt_model m;
    pt_cluster c;
    pt_train t;
    pt_enum_opts eo;
} job;

static int load_job(const options *o, job *j)
{
    pt_err err;
    if (pt_model_get(o->model, &j->m, &err) || pt_cluster_get(o->cluster, &j->c, &err))
        return fail("%s", err.msg);
    if (o->nodes)
        j->c.nodes = (int)o->nodes;
    if (o->seq) {
        j->m.seq = o->seq;
        if (pt_model_validate(&j->m, "--seq", &err))
            return fail("%s", err.msg);
    }
    pt_train_default(&j->t, &j->c);
    j->t.global_batch = o->global_batch;
    j->t.bucket_bytes = o->bucket_mib << 20;
    if (o->precision && pt_prec_parse(o->precision, &j->t.precision, &err))
        return fail("--precision: %s", err.msg);
    pt_enum_opts_default(&j->eo);
    j->eo.max_mbs = o->max_mbs;
    j->eo.mem_fraction = o->mem_fraction;
    if (o->order && pt_order_parse(o->order, j->eo.order, &err))
        return fail("--order: %s", err.msg);
    return 0;
}

static double limit_bytes(const job *j)
{
    return j->eo.mem_fraction * (double)j->c.device.memory_bytes;
}

static json_t *job_json(const job *j)
{
    return json_pack("{s:o, s:o, s:I, s:s, s:I}", "model", spec_json(pt_model_to_json(&j->m)),
                     "cluster", spec_json(pt_cluster_to_json(&j->c)), "global_batch",
                     (json_int_t)j->t.global_batch, "precision", pt_prec_name(j->t.precision),
                     "memory_limit_bytes", (json_int_t)llround(limit_bytes(j)));
}

static void print_job_header(const job *j)
{
    char order[32];
    pt_order_format(j->eo.order, order, sizeof order);
    printf("model   %s: %.2fB parameters, %lld layers, hidden %lld, seq %lld\n", j->m.name,
           (double)pt_model_params_total(&j->m) / 1e9, (long long)j->m.layers,
           (long long)j->m.hidden, (long long)j->m.seq);
    printf("cluster %s: %d node(s) x %d %s, %.1f GiB each; layouts may use %.0f%% = %.1f "
           "GiB\n", j->c.name, j->c.nodes, j->c.devices_per_node, j->c.device.name,
           gib((double)j->c.device.memory_bytes), 100 * j->eo.mem_fraction,
           gib(limit_bytes(j)));
    printf("train   global batch %lld, precision %s, rank order %s\n\n",
           (long long)j->t.global_batch, pt_prec_name(j->t.precision), order);
}

/* ---- --groups ---------------------------------------------------------------- */

static int show_groups(const options *o)
{
    job j;
    pt_err err;
    pt_layout l;
    if (load_job(o, &j))
        return EXIT_BAD_INPUT;
    pt_layout_default(&l);
    if (o->order)
        memcpy(l.order, j.eo.order, sizeof l.order);
    if (pt_layout_parse(o->groups, pt_cluster_world(&j.c), 0, &l, &err))
        return fail("--groups: %s", err.msg);
    pt_grid g;
    pt_grid_init(&g, &l);
    char order[32];
    pt_order_format(l.order, order, sizeof order);
    json_t *root = json_pack("{s:I, s:s, s:{s:i, s:i, s:i, s:i}}", "world", (json_int_t)g.world,
                             "order", order, "sizes", "tp", l.tp, "cp", l.cp, "dp", l.dp, "pp",
                             l.pp);
    json_t *groups = json_object();
    if (!o->json)
        printf("world %lld = tp %d x cp %d x dp %d x pp %d, rank order %s\n", (long long)g.world,
               l.tp, l.cp, l.dp, l.pp, order);
    int64_t *ranks = malloc((size_t)g.world * sizeof *ranks);
    for (int k = 0; k < PT_GROUP_COUNT; k++) {
        int size = pt_grid_group_size(&g, (pt_group_kind)k);
        json_t *list = json_array();
        if (!o->json)
            printf("%-5s groups (%lld of %d):", pt_group_name((pt_group_kind)k),
                   (long long)(g.world / size), size);
        for (int64_t r = 0; r < g.world; r++) {
            pt_grid_group(&g, (pt_group_kind)k, r, ranks);
            if (ranks[0] != r)
                continue;
            json_t *members = json_array();
            for (int i = 0; i < size; i++)
                json_array_append_new(members, json_integer(ranks[i]));
            json_array_append_new(list, members);
            if (!o->json) {
                printf(" [");
                for (int i = 0; i < size; i++)
                    printf("%s%lld", i ? "," : "", (long long)ranks[i]);
                printf("]");
            }
        }
        if (!o->json)
            printf("\n");
        json_object_set_new(groups, pt_group_name((pt_group_kind)k), list);
    }
    free(ranks);
    json_object_set_new(root, "groups", groups);
    if (o->json)
        print_json(root);
    else
        json_decref(root);
    return 0;
}

/* ---- --layout ---------------------------------------------------------------- */

static void print_memory(const pt_memory *mem, double limit)
{
    static const char *const names[] = {"weights", "gradients", "optimizer", "activations",
                                        "embedding/head", "recompute", "comm buffers"};
    const double v[] = {mem->weights_bytes, mem->grads_bytes, mem->optimizer_bytes,
                        mem->activations_bytes, mem->embed_head_bytes, mem->recompute_bytes,
                        mem->comm_bytes};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        printf("  %-15s %9.2f GiB\n", names[i], gib(v[i]));
    printf("  %-15s %9.2f GiB of %.2f GiB usable\n", "total", gib(mem->total_bytes), gib(limit));
}

static int evaluate_layout(const options *o)
{
    job j;
    pt_err err;
    pt_layout l;
    if (load_job(o, &j))
        return EXIT_BAD_INPUT;
    pt_layout_default(&l);
    memcpy(l.order, j.eo.order, sizeof l.order);
    if (pt_layout_parse(o->layout, pt_cluster_world(&j.c), j.t.global_batch, &l, &err))
        return fail("--layout: %s", err.msg);
    uint32_t mask;
    int broken = pt_layout_check(&j.m, &j.c, j.t.global_batch, &l, &mask);
    pt_memory mem = {0};
    if (broken == 0)
        pt_mem_rank_max(&j.m, &l, &j.t, &mem);
    bool fits = broken == 0 && mem.total_bytes <= limit_bytes(&j);
    char text[256], why[256];
    pt_layout_format(&l, text, sizeof text);

    if (o->json) {
        json_t *root = job_json(&j);
        json_t *rej = json_array();
        for (int r = 0; r < PT_REJECT_COUNT; r++)
            if (mask & (1u << r)) {
                pt_reject_explain((pt_reject)r, &j.m, &j.c, j.t.global_batch, &l, why,
                                  sizeof why);
                json_array_append_new(rej, json_pack("{s:s, s:s}", "reason",
                                                     pt_reject_name((pt_reject)r), "detail",
                                                     why));
            }
        json_t *stages = json_array();
        for (int s = 0; o->explain && broken == 0 && s < l.pp; s++) {
            pt_memory sm;
            pt_mem_stage(&j.m, &l, &j.t, s, &sm);
            json_array_append_new(stages, pt_memory_json(&sm));
        }
        json_object_set_new(root, "layout", pt_layout_json(&l));
        json_object_set_new(root, "valid", json_boolean(broken == 0));
        json_object_set_new(root, "rejected", rej);
        json_object_set_new(root, "fits", json_boolean(fits));
        json_object_set_new(root, "memory", broken ? json_null() : pt_memory_json(&mem));
        if (o->explain)
            json_object_set_new(root, "stages", stages);
        else
            json_decref(stages);
        print_json(root);
        return fits ? 0 : EXIT_REJECTED;
    }

    print_job_header(&j);
    printf("layout  %s\n        world %lld = tp %d x cp %d x pp %d x dp %d; %lld micro-batches "
           "of %lld per step\n", text, (long long)pt_layout_world(&l), l.tp, l.cp, l.pp, l.dp,
           (long long)l.n_micro, (long long)l.mbs);
    if (broken) {
        printf("invalid: %d rule(s) broken\n", broken);
        for (int r = 0; r < PT_REJECT_COUNT; r++)
            if (mask & (1u << r)) {
                pt_reject_explain((pt_reject)r, &j.m, &j.c, j.t.global_batch, &l, why,
                                  sizeof why);
                printf("  %-18s %s\n", pt_reject_name((pt_reject)r), why);
            }
        if (!o->explain)
            printf("(--explain shows more)\n");
        return EXIT_REJECTED;
    }
    printf("memory per rank, largest stage (%d of %d: %lld layers, %lld in flight):\n",
           mem.stage, l.pp, (long long)mem.layers, (long long)mem.in_flight);
    print_memory(&mem, limit_bytes(&j));
    if (fits)
        printf("fits: yes (%.2f GiB to spare)\n", gib(limit_bytes(&j) - mem.total_bytes));
    else
        printf("fits: NO, over by %.2f GiB\n", gib(mem.total_bytes - limit_bytes(&j)));
    if (o->explain) {
        for (int s = 0; s < l.pp; s++) {
            pt_memory sm;
            pt_mem_stage(&j.m, &l, &j.t, s, &sm);
            printf("\nstage %d: %lld layers, %.3f B parameters on this rank, %lld micro-batch "
                   "chunks in flight\n", s, (long long)sm.layers, sm.params / 1e9,
                   (long long)sm.in_flight);
            print_memory(&sm, limit_bytes(&j));
        }
        if (!fits)
            printf("\nto fit, try a larger zero stage, recompute=selective or full, sp=1, a "
                   "smaller mbs, or more tp/pp\n");
    }
    return fits ? 0 : EXIT_REJECTED;
}

/* ---- Enumeration ------------------------------------------------------------- */

typedef struct {
    const options *o;
    const job *j;
    int64_t listed, limit;
    json_t *list;
} lister;

static int list_layout(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    lister *ls = ctx;
    if (!fits)
        return 0;
    if (ls->limit && ls->listed >= ls->limit)
        return 0;
    ls->listed++;
    if (ls->o->json) {
        json_array_append_new(ls->list, json_pack("{s:o, s:o}", "layout", pt_layout_json(l),
                                                  "memory", pt_memory_json(mem)));
        return 0;
    }
    printf("%3d %2d %3d %3d %3d %5d %4d %4lld %5lld %-9s %-11s %7.1f %6.1f %6.1f %7.1f %6.1f "
           "%7.1f\n", l->tp, l->sp, l->pp, l->vp, l->cp, l->dp, l->zero, (long long)l->mbs,
           (long long)l->n_micro, pt_recompute_name(l->recompute), pt_schedule_name(l->schedule),
           gib(mem->weights_bytes), gib(mem->grads_bytes), gib(mem->optimizer_bytes),
           gib(mem->activations_bytes),
           gib(mem->embed_head_bytes + mem->recompute_bytes + mem->comm_bytes),
           gib(mem->total_bytes));
    return 0;
}

static int enumerate(const options *o)
{
    job j;
    if (load_job(o, &j))
        return EXIT_BAD_INPUT;
    lister ls = {.o = o, .j = &j, .limit = o->limit >= 0 ? o->limit : (o->json ? 0 : 50)};
    ls.list = json_array();
    if (!o->json) {
        print_job_header(&j);
        printf("layouts that fit (enumeration order; ranking by step time comes with the "
               "simulator):\n");
        printf("%3s %2s %3s %3s %3s %5s %4s %4s %5s %-9s %-11s %7s %6s %6s %7s %6s %7s\n",
               "tp", "sp", "pp", "vp", "cp", "dp", "zero", "mbs", "nmb", "recompute",
               "schedule", "weights", "grads", "optim", "activ", "other", "GiB");
    }
    pt_enum_counts n;
    pt_enum_layouts(&j.m, &j.c, &j.t, &j.eo, list_layout, &ls, &n);
    if (o->json) {
        json_t *root = job_json(&j);
        json_t *rej = json_object();
        for (int r = 0; r < PT_REJECT_COUNT; r++)
            if (n.rejected[r])
                json_object_set_new(rej, pt_reject_name((pt_reject)r),
                                    json_integer(n.rejected[r]));
        json_object_set_new(root, "counts",
                            json_pack("{s:I, s:I, s:I, s:I, s:I}", "enumerated",
                                      (json_int_t)n.enumerated, "valid", (json_int_t)n.valid,
                                      "fit", (json_int_t)n.fit, "too_big",
                                      (json_int_t)n.too_big, "listed", (json_int_t)ls.listed));
        json_object_set_new(root, "rejected", rej);
        json_object_set_new(root, "layouts", ls.list);
        print_json(root);
        return 0;
    }
    json_decref(ls.list);
    if (n.fit > ls.listed)
        printf("... %lld more (--limit 0 lists all)\n", (long long)(n.fit - ls.listed));
    printf("\n%lld layouts enumerated: %lld valid, %lld fit in memory, %lld valid but too big\n",
           (long long)n.enumerated, (long long)n.valid, (long long)n.fit, (long long)n.too_big);
    printf("rejected by first rule broken:\n");
    for (int r = 0; r < PT_REJECT_COUNT; r++)
        if (n.rejected[r])
            printf("  %-18s %9lld  %s\n", pt_reject_name((pt_reject)r),
                   (long long)n.rejected[r], pt_reject_describe((pt_reject)r));
    if (n.fit == 0)
        printf("no layout fits: try more nodes, a smaller --global-batch or --seq\n");
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    if (parse_options(argc, argv, &o))
        return EXIT_BAD_INPUT;
    if (o.list_models)
        return list_models(o.json);
    if (o.list_clusters)
        return list_clusters(o.json);
    if (o.dump_model)
        return dump_model(o.dump_model);
    if (o.dump_cluster)
        return dump_cluster(o.dump_cluster, o.nodes);
    if (o.groups)
        return show_groups(&o);
    if (o.layout)
        return evaluate_layout(&o);
    return enumerate(&o);
}
