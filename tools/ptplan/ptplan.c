/*
 * ptplan — the planner's command line. It lists the built-in specs and dumps them
 * as JSON, prints the process groups of a layout, evaluates one layout (validity,
 * per-rank memory, predicted step time), or ranks every layout of a model on a
 * cluster by predicted step time and writes plan.json for the best. All the
 * planning lives in planner/; this file parses options, runs the spec and group modes
 * and calls the others: ptplan_rank.c holds the evaluation and ranking modes,
 * ptplan_compare.c --compare, ptplan_validate.c --validate; ptplan_job.c loads the job
 * and prints what the modes share.
 * Exit code: 0 success, 1 bad input, 3 nothing that can run, so no plan (the
 * evaluated layout, every layout of the search or every compared layout is invalid or
 * does not fit).
 */
#include "ptplan.h"
#include "ptconfig.h"
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: ptplan [options]\n"
    "\n"
    "Plans the parallel layout of a transformer training job. With no mode option it\n"
    "enumerates every layout of the model on the cluster, predicts the step time of\n"
    "those that fit, lists the fastest and writes plan.json for the best.\n"
    "\n"
    "What to plan (defaults in brackets):\n"
    "  --model NAME|FILE       built-in model or model JSON file [tiny]\n"
    "  --cluster NAME|FILE     built-in cluster or cluster JSON file [local: this\n"
    "                          machine, one rank per core, as ptprofile measured it]\n"
    "  --nodes N               number of nodes [the cluster's own]; a comma list\n"
    "                          (4,8,16,32) prints the best layout of each size side by\n"
    "                          side with its scaling efficiency, and writes no plan\n"
    "  --devices N             devices (ranks) per node [the cluster's own]\n"
    "  --global-batch B        sequences per optimizer step [64], or tokens with a unit:\n"
    "                          4M = 4 x 2^20 tokens (K, M, G are binary here), which must\n"
    "                          be a whole number of sequences\n"
    "  --global-batch-tokens N the same in tokens (4194304, 4M, 4Mi)\n"
    "  --tokens N              tokens to train on (1e12, 300B, 15T; K, M, B/G, T are\n"
    "                          decimal): adds days to train and GPU-hours to every layout\n"
    "  --gpu-hour-price P      price of one GPU-hour (any currency): adds the cost\n"
    "  --seq S                 sequence length [the model's own]\n"
    "  --precision P           bf16 (fp32 grads), bf16-grad16, fp32, or fp8: the\n"
    "                          transformer layers' linear layers in FP8 (E4M3 forward,\n"
    "                          E5M2 gradients) on top of the default storage precision,\n"
    "                          the rest in it [bf16 on GPUs, fp32 on CPUs]\n"
    "  --fp8-recipe R          with --precision fp8: current, delayed, blockwise or\n"
    "                          rowwise, as the stack offers [the stack's default: ptrun\n"
    "                          current, megatron-core delayed, fsdp current]\n"
    "  --fp8-emulate           with --precision fp8 on a device without FP8 (no\n"
    "                          peak_flops.fp8, as the CPU cluster): FP8 values computed\n"
    "                          in the storage precision, as ptrun's CPU backend does\n"
    "  --fp8-param-gather      with --precision fp8 on stack megatron-core: the linear\n"
    "                          weights held in FP8 and all-gathered as such by the\n"
    "                          distributed optimizer (Megatron-Core's --fp8-param-gather)\n"
    "  --moe-imbalance F       a mixture of experts: the busiest rank's share of the\n"
    "                          experts' tokens over the mean [1: balanced, as published\n"
    "                          benchmarks force the router]\n"
    "  --order ORDER           rank order, fastest first [tp-cp-dp-pp]\n"
    "  --max-mbs N             micro-batch sizes tried: powers of two up to N [8]\n"
    "  --mem-fraction F        share of device memory a layout may use [0.95]\n"
    "  --bucket-mib N          gradient-reduction bucket size in MiB [25; a stack with\n"
    "                          its own bucket rule uses that]\n"
    "  --stack NAME|FILE       the software that runs the step: ptrun, megatron-lm,\n"
    "                          megatron-core, fsdp or a stack JSON file [ptrun]; it\n"
    "                          decides attention, overlaps and the layouts tried\n"
    "  --db FILE               cost table [$PT_COSTS_DB, else ~/.local/share/ptplan/\n"
    "                          costs.db; analytic figures when that does not exist].\n"
    "                          Where it holds no samples of the cluster's device and the\n"
    "                          project ships a profile of it (costmodels/profiles/: the\n"
    "                          H100-SXM5-80GB of dgx-h100), it prices the kernels the\n"
    "                          stack runs as ptrun does (every one for ptrun; the GEMMs\n"
    "                          and attention a stack declares, docs/calibration.md)\n"
    "                          instead, and the header says so\n"
    "  --no-shipped-profile    never use a shipped profile (the analytic figures instead)\n"
    "  --no-calibration        plan zero-shot: leave out the correction learned from the\n"
    "                          runs of this stack on this device stored in the cost table\n"
    "                          (ptcalib --run FILE; docs/calibration.md), which is\n"
    "                          otherwise applied to every prediction and named in the\n"
    "                          header\n"
    "  --sim-top N             simulate the N best by estimate in full [1000; 0 = all]\n"
    "  --compress MODES        gradient compression the search tries where gradients go\n"
    "                          in buckets (ZeRO 0/1, dp*cp > 1): a comma list of none,\n"
    "                          bf16, powersgd [none,bf16]; none is always tried. PowerSGD\n"
    "                          changes what the optimizer sees (README: Gradient\n"
    "                          compression), so it is tried only when named\n"
    "\n"
    "Training settings written into plan.json:\n"
    "  --steps N  --lr X  --seed N  --data FILE\n"
    "                          [50; GPT-3's rate for the model's size, 1e-3 below 50M\n"
    "                          parameters; 1234; ptrun's built-in corpus]\n"
    "\n"
    "Modes:\n"
    "  (the search)            --explain: the winner and the runner-up side by side,\n"
    "                          with what differs between them and where the time goes\n"
    "  --layout L [--explain]  evaluate one layout, e.g.\n"
    "                          \"tp=8,pp=4,vp=2,cp=1,dp=2,zero=1,mbs=1,recompute=selective,\n"
    "                          sp=1,schedule=interleaved\"; keys left out default to 1 / off,\n"
    "                          dp to what fills the cluster. --explain shows every rule\n"
    "                          broken with its values and the memory of each stage.\n"
    "  --compare L1 L2 ...     price up to 16 layouts and print them side by side: memory\n"
    "                          per device and its parts, where the step's time goes, step\n"
    "                          time, tokens/s, MFU; an invalid layout's column names the\n"
    "                          rule it breaks, with its values below (--json: a \"layouts\"\n"
    "                          array as --layout --json shows one); writes no plan\n"
    "  --pipeline-layout P     the layers of each virtual pipeline stage in Megatron-Core's\n"
    "                          notation (--pipeline-model-parallel-layout), e.g.\n"
    "                          \"E|(t|)*126L\": stages split by '|', E embedding,\n"
    "                          t transformer layer, L output layer and loss, x*n and\n"
    "                          (...)*n repeat; vp follows from its stages over pp. With\n"
    "                          --layout or --compare it applies to each layout (as the\n"
    "                          layout key pipeline=P); the search tries it on every pp\n"
    "                          dividing its stages\n"
    "  --groups L              print the process groups of layout L\n"
    "  --list-layouts          print every layout the search would price (valid, run by\n"
    "                          the stack's software on these devices, fitting in memory),\n"
    "                          one a line in --layout's form, in enumeration order\n"
    "                          (--json: a JSON array of them); nothing is priced\n"
    "  --list-models           list the built-in models\n"
    "  --list-clusters         list the built-in clusters\n"
    "  --dump-model NAME|FILE  print a model spec as JSON (loads back identically)\n"
    "  --dump-cluster NAME|FILE print a cluster spec as JSON\n"
    "  --list-stacks           list the built-in software stacks\n"
    "  --dump-stack NAME|FILE  print a stack spec as JSON (loads back identically)\n"
    "  --validate FILE         predict every published run of FILE (e.g. tests/validation/\n"
    "                          public-set.json) and print predicted against measured step\n"
    "                          time, the error of each and the mean and largest error,\n"
    "                          three ways: zero-shot, leave-one-out (calibrated from the\n"
    "                          other runs of its source, device and stack) and the\n"
    "                          ranking of each source's runs (wrong pairs, Kendall's tau)\n"
    "                          (--db FILE: price with that cost table, else analytic)\n"
    "\n"
    "Output:\n"
    "  --json                  machine-readable JSON on stdout\n"
    "  --emit FORMAT           print, instead of the table, the chosen (or --layout)\n"
    "                          layout as its framework runs it: megatron (Megatron-LM /\n"
    "                          Megatron-Core command-line arguments), nemo (NeMo 2 recipe\n"
    "                          overrides), torchtitan (TOML sections) or ptrun (plan.json);\n"
    "                          a layout the framework cannot express is refused (exit 3)\n"
    "  --top K                 layouts listed, fastest first [10; 0 = all simulated]\n"
    "  --out FILE              plan.json of the best (or the --layout) layout [plan.json]\n"
    "  --no-out                do not write plan.json\n"
    "  --timeline FILE         predicted timeline of that layout as a Chrome trace\n"
    "                          (open in Perfetto or chrome://tracing)\n"
    "  -h, --help              this text\n"
    "  --version               version and build configuration\n"
    "\n"
    "Exit status: 0 success; 1 bad input (or an unwritable --out); 3 no plan, nothing\n"
    "can run: no layout of the search is valid and fits (the message names the rules\n"
    "that rejected them, with counts, or the memory), the --layout is invalid or does\n"
    "not fit, none of the --compare layouts is valid and fits, or a point of the set\n"
    "could not be evaluated (--validate). When no plan is written, a ptplan plan left\n"
    "at --out by an earlier run is removed (a file there that is not a plan is left\n"
    "alone), so that `ptplan ... && ptrun plan.json` never trains a stale plan.\n";

#define MAX_SEQ (INT64_C(1) << 30) /* --seq */

/* A count with an optional unit suffix: K, M, G (or B), T for 10^3, 10^6, 10^9, 10^12,
 * or, with `binary`, for 2^10, 2^20, 2^30, 2^40 (Ki, Mi, Gi, Ti are binary always). A
 * real is accepted ("1.5T", "1e12"). Returns the value, or -1 when text is not a count;
 * *suffixed says whether a suffix was given. */
static double parse_count(const char *text, bool binary, bool *suffixed)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    *suffixed = false;
    if (end == text || errno || !isfinite(v) || v < 0 || isspace((unsigned char)*text))
        return -1;
    static const char units[] = "KMGT";
    if (*end) {
        char u = (char)toupper((unsigned char)*end);
        if (u == 'B')
            u = 'G'; /* "15B tokens": billions */
        const char *at = strchr(units, u);
        if (!at || !u)
            return -1;
        end++;
        bool bin = binary;
        if (*end == 'i') {
            bin = true;
            end++;
        }
        if (*end)
            return -1;
        *suffixed = true;
        v *= pow(bin ? 1024.0 : 1000.0, (double)(at - units + 1));
    }
    return v;
}

/* --tokens: the tokens to train on, 1 to 10^18. */
static int parse_tokens(const char *text, double *out)
{
    bool suffixed;
    double v = parse_count(text, false, &suffixed);
    if (!(v >= 1 && v <= 1e18)) {
        fprintf(stderr, "ptplan: --tokens %s: expected a number of tokens from 1 to 1e18, "
                        "e.g. 1e12, 300B or 15T\n", text);
        return -1;
    }
    *out = v;
    return 0;
}

/* --global-batch: sequences (an integer), or tokens with a binary unit ("8M" = 8 x 2^20
 * tokens: batches are powers of two, and 4M is how the Llama 3 paper writes 1,024
 * sequences of 4,096); --global-batch-tokens: tokens, with or without a unit. The
 * tokens become sequences once the sequence length is known (load_job). */
static int parse_global_batch(const char *opt, const char *text, bool tokens, options *o)
{
    bool suffixed;
    double v = parse_count(text, true, &suffixed);
    if (!tokens && !suffixed)
        return pt_cli_int("ptplan", opt, text, 1, PT_MAX_GLOBAL_BATCH, &o->global_batch);
    double most = (double)PT_MAX_GLOBAL_BATCH * (double)MAX_SEQ;
    if (!(v >= 1 && v <= most) || v != floor(v)) {
        fprintf(stderr, "ptplan: %s %s: expected %sa whole number of tokens from 1 to %.0f, "
                        "e.g. 4M (4 x 2^20), 8Mi or 4194304\n", opt, text,
                tokens ? "" : "sequences (an integer) or ", most);
        return -1;
    }
    o->global_batch_tokens = (int64_t)v;
    return 0;
}

/* --nodes: one count, or a comma list of sizes to set side by side. */
static int parse_nodes(const char *text, options *o)
{
    o->n_nodes = 0;
    for (const char *p = text;; p++) {
        size_t len = strcspn(p, ",");
        char one[32];
        if (o->n_nodes == NODES_MAX || len >= sizeof one) {
            fprintf(stderr, "ptplan: --nodes %s: expected a node count or a comma list of at "
                            "most %d, e.g. 4,8,16\n", text, NODES_MAX);
            return -1;
        }
        snprintf(one, sizeof one, "%.*s", (int)len, p);
        int64_t *n = &o->nodes_list[o->n_nodes];
        if (pt_cli_int("ptplan", "--nodes", one, 1, 1 << 20, n))
            return -1;
        for (int i = 0; i < o->n_nodes; i++)
            if (o->nodes_list[i] == *n) {
                fprintf(stderr, "ptplan: --nodes %s: %lld is listed twice\n", text,
                        (long long)*n);
                return -1;
            }
        o->n_nodes++;
        p += len;
        if (!*p)
            break;
    }
    o->nodes = o->nodes_list[0];
    return 0;
}

/* One more layout for --compare. */
static int add_compare(options *o, const char *layout)
{
    if (o->n_compare == COMPARE_MAX) {
        fprintf(stderr, "ptplan: --compare sets at most %d layouts side by side\n",
                COMPARE_MAX);
        return -1;
    }
    o->compare[o->n_compare++] = layout;
    return 0;
}

/* --compress: "none,bf16,powersgd" into a bit per mode (none always set). */
static int parse_compress(const char *text, unsigned *modes)
{
    *modes = 1u << PT_COMPRESS_NONE;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, ",");
        int k = 0;
        while (k < PT_COMPRESS_COUNT && (strlen(pt_compress_name((pt_compress)k)) != len ||
                                         strncmp(p, pt_compress_name((pt_compress)k), len)))
            k++;
        if (k == PT_COMPRESS_COUNT) {
            fprintf(stderr, "ptplan: --compress %s: '%.*s' is not a compression (expected "
                            "a comma list of none, bf16, powersgd)\n", text, (int)len, p);
            return -1;
        }
        *modes |= 1u << k;
        p += len + (p[len] == ',');
    }
    return 0;
}

static int parse_options(int argc, char **argv, options *o)
{
    enum { O_MODEL = 256, O_CLUSTER, O_NODES, O_GB, O_SEQ, O_PREC, O_ORDER, O_MAXMBS,
           O_MEMFRAC, O_BUCKET, O_LAYOUT, O_EXPLAIN, O_GROUPS, O_LM, O_LC, O_DM, O_DC,
           O_JSON, O_TOP, O_VERSION, O_DB, O_OUT, O_NOOUT, O_TIMELINE, O_SIMTOP, O_STEPS,
           O_LR, O_SEED, O_DATA, O_DEVICES, O_STACK, O_LS, O_DS, O_VALIDATE, O_LL,
           O_COMPARE, O_COMPRESS, O_NOSHIPPED, O_EMIT, O_TOKENS, O_PRICE, O_GBT, O_PIPE,
           O_NOCALIB, O_FP8_RECIPE, O_FP8_EMULATE, O_FP8_PARAM_GATHER, O_MOE_IMB };
    static const struct option longopts[] = {
        {"model", 1, 0, O_MODEL}, {"cluster", 1, 0, O_CLUSTER}, {"nodes", 1, 0, O_NODES},
        {"global-batch", 1, 0, O_GB}, {"seq", 1, 0, O_SEQ}, {"precision", 1, 0, O_PREC},
        {"order", 1, 0, O_ORDER}, {"max-mbs", 1, 0, O_MAXMBS},
        {"mem-fraction", 1, 0, O_MEMFRAC}, {"bucket-mib", 1, 0, O_BUCKET},
        {"layout", 1, 0, O_LAYOUT}, {"explain", 0, 0, O_EXPLAIN}, {"groups", 1, 0, O_GROUPS},
        {"list-models", 0, 0, O_LM}, {"list-clusters", 0, 0, O_LC},
        {"dump-model", 1, 0, O_DM}, {"dump-cluster", 1, 0, O_DC}, {"json", 0, 0, O_JSON},
        {"top", 1, 0, O_TOP}, {"help", 0, 0, 'h'}, {"version", 0, 0, O_VERSION},
        {"db", 1, 0, O_DB}, {"out", 1, 0, O_OUT}, {"no-out", 0, 0, O_NOOUT},
        {"timeline", 1, 0, O_TIMELINE}, {"sim-top", 1, 0, O_SIMTOP}, {"steps", 1, 0, O_STEPS},
        {"lr", 1, 0, O_LR}, {"seed", 1, 0, O_SEED}, {"data", 1, 0, O_DATA}, {"devices", 1, 0, O_DEVICES},
        {"stack", 1, 0, O_STACK}, {"list-stacks", 0, 0, O_LS}, {"dump-stack", 1, 0, O_DS},
        {"validate", 1, 0, O_VALIDATE}, {"list-layouts", 0, 0, O_LL},
        {"compare", 1, 0, O_COMPARE}, {"compress", 1, 0, O_COMPRESS},
        {"no-shipped-profile", 0, 0, O_NOSHIPPED}, {"emit", 1, 0, O_EMIT},
        {"tokens", 1, 0, O_TOKENS}, {"gpu-hour-price", 1, 0, O_PRICE},
        {"global-batch-tokens", 1, 0, O_GBT}, {"pipeline-layout", 1, 0, O_PIPE},
        {"no-calibration", 0, 0, O_NOCALIB}, {"fp8-recipe", 1, 0, O_FP8_RECIPE},
        {"fp8-emulate", 0, 0, O_FP8_EMULATE}, {"fp8-param-gather", 0, 0, O_FP8_PARAM_GATHER},
        {"moe-imbalance", 1, 0, O_MOE_IMB},
        {0, 0, 0, 0}};
    *o = (options){.model = "tiny", .cluster = "local", .global_batch = 64,
                   .max_mbs = 8, .top = 10, .mem_fraction = 0.95, .bucket_mib = 25,
                   .out = "plan.json", .sim_top = 1000, .steps = 50, .seed = 1234,
                   .compress_modes = 1u << PT_COMPRESS_NONE | 1u << PT_COMPRESS_BF16,
                   .gpu_hour_price = -1, .moe_imbalance = 1};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_MODEL: o->model = optarg; break;
        case O_CLUSTER: o->cluster = optarg; break;
        case O_STACK: o->stack = optarg; break;
        case O_LS: o->list_stacks = true; break;
        case O_DS: o->dump_stack = optarg; break;
        case O_VALIDATE: o->validate = optarg; break;
        case O_LL: o->list_layouts = true; break;
        case O_COMPARE: bad = add_compare(o, optarg); break;
        case O_COMPRESS: bad = parse_compress(optarg, &o->compress_modes); break;
        case O_NODES: bad = parse_nodes(optarg, o); break;
        case O_TOKENS: bad = parse_tokens(optarg, &o->tokens); break;
        case O_PRICE:
            bad = pt_cli_real("ptplan", "--gpu-hour-price", optarg, 0, 1e9, &o->gpu_hour_price);
            break;
        case O_GBT: bad = parse_global_batch("--global-batch-tokens", optarg, true, o); break;
        case O_DEVICES: bad = pt_cli_int("ptplan", "--devices", optarg, 1, 1 << 20, &o->devices); break;
        case O_GB:
            o->global_batch_tokens = 0;
            bad = parse_global_batch("--global-batch", optarg, false, o);
            break;
        case O_SEQ: bad = pt_cli_int("ptplan", "--seq", optarg, 1, MAX_SEQ, &o->seq); break;
        case O_PREC: o->precision = optarg; break;
        case O_FP8_RECIPE: o->fp8_recipe = optarg; break;
        case O_FP8_EMULATE: o->fp8_emulate = true; break;
        case O_FP8_PARAM_GATHER: o->fp8_param_gather = true; break;
        case O_MOE_IMB:
            bad = pt_cli_real("ptplan", "--moe-imbalance", optarg, 1, 1024, &o->moe_imbalance);
            break;
        case O_ORDER: o->order = optarg; break;
        case O_MAXMBS: bad = pt_cli_int("ptplan", "--max-mbs", optarg, 1, 1 << 20, &o->max_mbs); break;
        case O_BUCKET: bad = pt_cli_int("ptplan", "--bucket-mib", optarg, 1, 1 << 20, &o->bucket_mib);
            break;
        case O_MEMFRAC:
            bad = pt_cli_real("ptplan", "--mem-fraction", optarg, 1e-9, 1, &o->mem_fraction);
            break;
        case O_LAYOUT: o->layout = optarg; break;
        case O_PIPE: o->pipeline = optarg; break;
        case O_EXPLAIN: o->explain = true; break;
        case O_GROUPS: o->groups = optarg; break;
        case O_LM: o->list_models = true; break;
        case O_LC: o->list_clusters = true; break;
        case O_DM: o->dump_model = optarg; break;
        case O_DC: o->dump_cluster = optarg; break;
        case O_JSON: o->json = true; break;
        case O_TOP: bad = pt_cli_int("ptplan", "--top", optarg, 0, INT64_MAX, &o->top); break;
        case O_DB: o->db = optarg; break;
        case O_NOSHIPPED: o->no_shipped = true; break;
        case O_NOCALIB: o->no_calibration = true; break;
        case O_OUT: o->out = optarg; break;
        case O_NOOUT: o->no_out = true; break;
        case O_EMIT:
            o->emit = optarg;
            bad = emit_check_kind(optarg);
            break;
        case O_TIMELINE: o->timeline = optarg; break;
        case O_SIMTOP: bad = pt_cli_int("ptplan", "--sim-top", optarg, 0, INT64_MAX, &o->sim_top); break;
        case O_STEPS: bad = pt_cli_int("ptplan", "--steps", optarg, 1, PT_MAX_STEPS, &o->steps); break;
        case O_SEED: bad = pt_cli_int("ptplan", "--seed", optarg, 0, INT64_MAX, &o->seed); break;
        case O_DATA: o->data = optarg; break;
        case O_LR: bad = pt_cli_real("ptplan", "--lr", optarg, 1e-12, PT_MAX_LR, &o->lr); break;
        case 'h': fputs(usage_text, stdout); exit(0);
        case O_VERSION:
            printf("ptplan %s (CUDA backend: %s)\n", PT_VERSION, PT_CUDA_BACKEND_STATE);
            exit(0);
        default:
            return pt_cli_bad_option("ptplan", c, argv[optind - 1]);
        }
        if (bad)
            return -1;
    }
    /* --compare's further layouts: getopt has moved them, and every other word that is
     * not an option, behind the options */
    for (; optind < argc && o->n_compare > 0; optind++)
        if (add_compare(o, argv[optind]))
            return -1;
    if (optind < argc) {
        fprintf(stderr, "ptplan: unexpected argument '%s' (see ptplan --help)\n", argv[optind]);
        return -1;
    }
    int modes = (o->layout != NULL) + (o->groups != NULL) + o->list_models + o->list_clusters +
                (o->dump_model != NULL) + (o->dump_cluster != NULL) + o->list_stacks +
                (o->dump_stack != NULL) + (o->validate != NULL) + o->list_layouts +
                (o->n_compare > 0);
    if (modes > 1) {
        fprintf(stderr, "ptplan: choose one of --layout, --groups, --list-models, "
                        "--list-clusters, --list-stacks, --dump-model, --dump-cluster, "
                        "--dump-stack, --validate, --list-layouts, --compare\n");
        return -1;
    }
    if (o->n_compare > 0 && o->timeline) {
        fprintf(stderr, "ptplan: --compare writes no timeline: --timeline goes with --layout "
                        "or the search\n");
        return -1;
    }
    if (o->emit && (o->json || o->groups || o->list_models || o->list_clusters ||
                    o->list_stacks || o->dump_model || o->dump_cluster || o->dump_stack ||
                    o->validate || o->list_layouts || o->n_compare)) {
        fprintf(stderr, "ptplan: --emit goes with the search or --layout (and not with "
                        "--json: it writes the configuration on stdout)\n");
        return -1;
    }
    if (o->gpu_hour_price >= 0 && o->tokens == 0) {
        fprintf(stderr, "ptplan: --gpu-hour-price prices the GPU-hours of --tokens: give "
                        "--tokens too\n");
        return -1;
    }
    if (o->n_nodes > 1 && (modes > 0 || o->emit || o->timeline || o->explain)) {
        fprintf(stderr, "ptplan: --nodes with several sizes sets the best layout of each "
                        "side by side: it goes with the search alone (not with a mode, "
                        "--emit, --timeline or --explain)\n");
        return -1;
    }
    if (o->explain && !o->layout && modes > 0) {
        fprintf(stderr, "ptplan: --explain goes with --layout or the search\n");
        return -1;
    }
    return 0;
}

/* ---- Spec modes -------------------------------------------------------------- */

/* "0.50M" or "46.70B" */
static void params_text(double n, char *buf, size_t size)
{
    snprintf(buf, size, n >= 1e9 ? "%.2fB" : "%.2fM", n >= 1e9 ? n / 1e9 : n / 1e6);
}

static int list_models(bool json)
{
    json_t *arr = json_array();
    if (!json)
        printf("%-15s %4s %6s %4s %4s %6s %7s %5s %-9s %-6s %-7s %7s %8s %8s\n", "name", "L",
               "h", "a", "k", "f", "v", "s", "norm", "act", "pos", "experts", "params",
               "active");
    for (int i = 0; i < pt_model_builtin_count(); i++) {
        const pt_model *m = pt_model_builtin(i);
        if (json) {
            json_array_append_new(arr, spec_json(pt_model_to_json(m)));
            continue;
        }
        char experts[32] = "-", total[16], active[16];
        if (m->moe.experts > 0)
            snprintf(experts, sizeof experts, "%lld/%lld", (long long)m->moe.top_k,
                     (long long)m->moe.experts);
        params_text((double)pt_model_params_total(m), total, sizeof total);
        params_text((double)pt_model_params_active(m), active, sizeof active);
        printf("%-15s %4lld %6lld %4lld %4lld %6lld %7lld %5lld %-9s %-6s %-7s %7s %8s %8s\n",
               m->name, (long long)m->layers, (long long)m->hidden, (long long)m->heads,
               (long long)m->kv_heads, (long long)m->ffn, (long long)m->vocab,
               (long long)m->seq, m->norm == PT_NORM_RMSNORM ? "rmsnorm" : "layernorm",
               m->act == PT_ACT_SWIGLU ? "swiglu" : "gelu",
               m->pos == PT_POS_ROPE ? "rope" : "learned", experts, total, active);
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

static int list_stacks(bool json)
{
    json_t *arr = json_array();
    if (!json)
        printf("%-14s %-8s %-14s %-13s %-6s %s\n", "name", "attn", "parallelism", "zero",
               "dp ovl", "about");
    for (int i = 0; i < pt_stack_builtin_count(); i++) {
        const pt_stack *s = pt_stack_builtin(i);
        if (json) {
            json_array_append_new(arr, spec_json(pt_stack_to_json(s)));
            continue;
        }
        char par[32] = "dp", zero[16] = "";
        if (s->tp)
            strcat(par, s->sp ? ",tp,sp" : ",tp");
        if (s->pp)
            strcat(par, ",pp");
        if (s->cp)
            strcat(par, ",cp");
        for (int z = 0; z < 4; z++)
            if (s->zero_stages & (1u << z))
                snprintf(zero + strlen(zero), sizeof zero - strlen(zero), "%s%d",
                         zero[0] ? "," : "", z);
        printf("%-14s %-8s %-14s %-13s %-6s %s\n", s->name, pt_attn_impl_name(s->attention),
               par, zero, pt_dp_overlap_name(s->dp_overlap), s->about);
    }
    if (json)
        print_json(arr);
    else
        json_decref(arr);
    return 0;
}

static int dump_stack(const char *name)
{
    pt_stack s;
    pt_err err;
    if (pt_stack_get(name, &s, &err))
        return pt_tool_fail("%s", err.msg);
    char *text = pt_stack_to_json(&s);
    if (!text)
        return pt_tool_fail("%s", "out of memory");
    fputs(text, stdout);
    free(text);
    return 0;
}

static int dump_model(const char *name)
{
    pt_model m;
    pt_err err;
    if (pt_model_get(name, &m, &err))
        return pt_tool_fail("%s", err.msg);
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
        return pt_tool_fail("%s", err.msg);
    if (nodes)
        c.nodes = (int)nodes;
    char *text = pt_cluster_to_json(&c);
    fputs(text, stdout);
    free(text);
    return 0;
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
    free_job(&j);
    if (pt_layout_parse(o->groups, pt_cluster_world(&j.c), 0, &l, &err))
        return pt_tool_fail("--groups: %s", err.msg);
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
    if (!o->json && (l.ep > 1 || l.etp > 1))
        printf("experts: etp %d x ep %d x edp %d over each stage's tp*cp*dp ranks (parallel "
               "folding)\n", g.etp, g.ep, g.edp);
    int64_t *ranks = malloc((size_t)g.world * sizeof *ranks);
    for (int k = 0; k < PT_GROUP_COUNT; k++) {
        /* the all-to-all groups are the cp groups with a2a, and none without */
        if (k == PT_GROUP_CPA2A && l.cp_comm != PT_CPC_A2A_P2P)
            continue;
        /* the experts' groups only where the layout splits experts */
        if ((k == PT_GROUP_EP || k == PT_GROUP_ETP || k == PT_GROUP_EDP) && l.ep == 1 &&
            l.etp == 1)
            continue;
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

static int tool_main(int argc, char **argv)
{
    options o;
    if (parse_options(argc, argv, &o))
        return EXIT_BAD_INPUT;
    if (o.list_models)
        return list_models(o.json);
    if (o.list_clusters)
        return list_clusters(o.json);
    if (o.list_stacks)
        return list_stacks(o.json);
    if (o.dump_stack)
        return dump_stack(o.dump_stack);
    if (o.dump_model)
        return dump_model(o.dump_model);
    if (o.dump_cluster)
        return dump_cluster(o.dump_cluster, o.nodes);
    if (o.groups)
        return show_groups(&o);
    if (o.layout)
        return evaluate_layout(&o);
    if (o.validate)
        return validate_set(&o);
    if (o.list_layouts)
        return list_layouts(&o);
    if (o.n_compare)
        return compare_layouts(&o);
    if (o.n_nodes > 1)
        return sweep_sizes(&o);
    return rank_layouts(&o);
}

int main(int argc, char **argv)
{
    return pt_cli_exit("ptplan", tool_main(argc, argv));
}
