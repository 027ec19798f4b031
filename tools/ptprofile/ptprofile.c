/*
 * ptprofile — measures this machine into the cost tables. It asks the planner which
 * op keys a model's layouts on a cluster will need (or sweeps a standard set), times
 * those GEMMs through OpenBLAS or the CUDA kernels (with --precision fp8 the layers' FP8
 * GEMMs through gemm_fp8: ptprofile_fp8.c), characterises the device (peak sgemm
 * rate, memory bandwidth), runs the collective profiler under mpirun, and writes
 * everything into costs.db, replacing older measurements of the same ops. Each sample
 * is committed as it is measured, so an interrupted run keeps its work and `--resume`
 * skips it.
 * Exit code: 0 done, 1 bad input or failure, 130 interrupted.
 */
#include "ptplan/ptplan.h" /* job: the model, cluster and layout that ptplan plans */
#include "ptprofile.h"
#include "kernels.h"
#include "ptconfig.h"
#include "cli.h"
#include "comm.h"

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const char usage_text[] =
    "usage: ptprofile [options]\n"
    "\n"
    "Measures this machine into the cost tables that ptplan predicts from: the GEMMs a\n"
    "model's layouts need (through OpenBLAS), the device's peak rate and memory\n"
    "bandwidth, and collectives (MPI, under mpirun) over sizes and group sizes.\n"
    "\n"
    "  --db FILE            cost table to write [$PT_COSTS_DB, else\n"
    "                       ~/.local/share/ptplan/costs.db]; created when missing\n"
    "  --model NAME|FILE    profile the op keys of this model's layouts [tiny]\n"
    "  --cluster NAME|FILE  ... on this cluster [local]\n"
    "  --nodes N --devices N --global-batch B --seq S --max-mbs N\n"
    "                       as for ptplan [1, the cluster's, 64, the model's, 8]\n"
    "  --precision P        fp8: plan the job with FP8 GEMMs, as ptplan --precision fp8,\n"
    "                       and time those (gemm_fp8 on operands quantized beforehand;\n"
    "                       ptplan prices their casts on top); else the backend's own\n"
    "                       [fp32 on cpu, bf16 on cuda]\n"
    "  --fp8-recipe R       with --precision fp8: current or delayed, as for ptplan\n"
    "  --fp8-emulate        with --precision fp8 on the CPU, which has no FP8: times the\n"
    "                       emulation (FP8 values multiplied in fp32) that ptrun's CPU\n"
    "                       backend runs, for plans made with ptplan --fp8-emulate\n"
    "  --data FILE          the tokens the model's other kernels are timed on, read as\n"
    "                       ptrun reads --data [ptrun's built-in corpus, " PT_TRAINER_DEFAULT_CORPUS "]:\n"
    "                       the embedding's backward depends on how often tokens repeat\n"
    "  --sweep              also time a standard set of square and skinny GEMMs\n"
    "  --quick              fewer repeats and a short collective sweep (1 KiB-16 MiB):\n"
    "                       enough for the default job in under a minute\n"
    "  --backend cpu|cuda   compute backend to measure [cpu]; cuda measures GPU 0 through\n"
    "                       the CUDA kernels and NCCL, filed under --cluster's device\n"
    "  --np N               ranks for the collectives [the cluster's devices per node,\n"
    "                       at least 2]\n"
    "  --no-collectives     skip the collectives (no mpirun needed)\n"
    "  --repeats N          timed repeats per point, median kept [5; 3 with --quick]\n"
    "  --soak-ms N          with --backend cuda, run each GEMM back to back for N ms\n"
    "                       before timing it, so that it is timed at the clock the GPU\n"
    "                       sustains under load, as in training [200; 0: none]\n"
    "  --max-gflop X        skip GEMMs above X GFLOP [50]\n"
    "  --resume             skip ops that already have a sample in the table\n"
    "  -h, --help           this text\n";

typedef struct {
    pt_kernels *kn;          /* the backend measured: CPU (OpenBLAS) or CUDA */
    const char *db, *model, *cluster, *backend, *data;
    const char *precision, *fp8_recipe; /* --precision, --fp8-recipe; NULL when not given */
    bool fp8_emulate;
    pt_tokens tokens;        /* --data's */
    int64_t nodes, devices, global_batch, seq, np, repeats, max_mbs, soak_ms;
    double max_gflop;
    bool sweep, quick, no_coll, resume;
} prof_opts;

static int parse_options(int argc, char **argv, prof_opts *o)
{
    enum { O_DB = 256, O_MODEL, O_CLUSTER, O_NODES, O_GB, O_SEQ, O_SWEEP, O_QUICK, O_BACKEND,
           O_NP, O_NOCOLL, O_REPEATS, O_MAXGF, O_RESUME, O_DEVICES, O_MAXMBS, O_DATA,
           O_SOAK, O_PREC, O_FP8_RECIPE, O_FP8_EMULATE };
    static const struct option longopts[] = {
        {"db", 1, 0, O_DB}, {"model", 1, 0, O_MODEL}, {"cluster", 1, 0, O_CLUSTER},
        {"nodes", 1, 0, O_NODES}, {"global-batch", 1, 0, O_GB}, {"seq", 1, 0, O_SEQ},
        {"sweep", 0, 0, O_SWEEP}, {"quick", 0, 0, O_QUICK}, {"backend", 1, 0, O_BACKEND},
        {"np", 1, 0, O_NP}, {"no-collectives", 0, 0, O_NOCOLL}, {"repeats", 1, 0, O_REPEATS},
        {"max-gflop", 1, 0, O_MAXGF}, {"resume", 0, 0, O_RESUME}, {"help", 0, 0, 'h'},
        {"devices", 1, 0, O_DEVICES}, {"max-mbs", 1, 0, O_MAXMBS}, {"data", 1, 0, O_DATA},
        {"soak-ms", 1, 0, O_SOAK}, {"precision", 1, 0, O_PREC},
        {"fp8-recipe", 1, 0, O_FP8_RECIPE}, {"fp8-emulate", 0, 0, O_FP8_EMULATE}, {0, 0, 0, 0}};
    *o = (prof_opts){.model = "tiny", .cluster = "local", .backend = "cpu", .global_batch = 64,
                     .data = PT_TRAINER_DEFAULT_CORPUS,
                     .max_gflop = 50, .soak_ms = 200};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int bad = 0;
        int64_t gf;
        switch (c) {
        case O_DB: o->db = optarg; break;
        case O_MODEL: o->model = optarg; break;
        case O_CLUSTER: o->cluster = optarg; break;
        case O_NODES: bad = pt_cli_int("ptprofile", "--nodes", optarg, 1, 1 << 20, &o->nodes); break;
        case O_DEVICES: bad = pt_cli_int("ptprofile", "--devices", optarg, 1, 1 << 20, &o->devices); break;
        case O_MAXMBS: bad = pt_cli_int("ptprofile", "--max-mbs", optarg, 1, 1 << 20, &o->max_mbs); break;
        case O_GB: bad = pt_cli_int("ptprofile", "--global-batch", optarg, 1, 1LL << 30, &o->global_batch);
            break;
        case O_SEQ: bad = pt_cli_int("ptprofile", "--seq", optarg, 1, 1LL << 30, &o->seq); break;
        case O_SWEEP: o->sweep = true; break;
        case O_QUICK: o->quick = true; break;
        case O_BACKEND: o->backend = optarg; break;
        case O_NP: bad = pt_cli_int("ptprofile", "--np", optarg, 2, 4096, &o->np); break;
        case O_NOCOLL: o->no_coll = true; break;
        case O_REPEATS: bad = pt_cli_int("ptprofile", "--repeats", optarg, 1, 64, &o->repeats); break;
        case O_SOAK: bad = pt_cli_int("ptprofile", "--soak-ms", optarg, 0, 60000, &o->soak_ms); break;
        case O_MAXGF:
            bad = pt_cli_int("ptprofile", "--max-gflop", optarg, 1, 1 << 30, &gf);
            o->max_gflop = (double)gf;
            break;
        case O_RESUME: o->resume = true; break;
        case O_DATA: o->data = optarg; break;
        case O_PREC: o->precision = optarg; break;
        case O_FP8_RECIPE: o->fp8_recipe = optarg; break;
        case O_FP8_EMULATE: o->fp8_emulate = true; break;
        case 'h': fputs(usage_text, stdout); exit(0);
        default:
            return pt_cli_bad_option("ptprofile", c, argv[optind - 1]);
        }
        if (bad)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "ptprofile: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (strcmp(o->backend, "cpu") != 0 && strcmp(o->backend, "cuda") != 0) {
        fprintf(stderr, "ptprofile: --backend %s: expected cpu or cuda\n", o->backend);
        return -1;
    }
    if (!o->repeats)
        o->repeats = o->quick ? 3 : 5;
    return 0;
}

/* ---- What to measure ------------------------------------------------------------------- */

/* A GEMM to time: its op as the planner prices it, and whether it is one of the layers'
 * FP8 GEMMs (timed through gemm_fp8). */
typedef struct {
    pt_kernel_op op;
    bool fp8;
} prof_gemm;

typedef struct {
    prof_gemm *v;
    int n, cap;
    bool oom;
} op_set;

static void op_set_add(op_set *s, const pt_kernel_op *op, bool fp8)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->v[i].op.key, op->key) == 0)
            return;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        prof_gemm *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) {
            s->oom = true;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (prof_gemm){*op, fp8};
}

/* Whether op is one of the layers' FP8 GEMMs (pt_train.fp8): its dtype says so (emulated
 * too), as does the scaling work that planner/ops.c gives FP8 GEMMs only. */
static bool is_fp8_gemm(const pt_op *op)
{
    return op->kernel.dtype == PT_DTYPE_FP8 || op->fp8.passes > 0;
}

typedef struct {
    const job *j;
    op_set *ops;
    uint64_t mbs_single; /* bit i: a fitting layout with tp = cp = 1 uses mbs 2^i */
} collect_ctx;

/* Every GEMM of a fitting layout's op lists, with or without an epilogue: the keys
 * ptplan will look up. */
static int collect_gemms(const pt_layout *l, const pt_memory *mem, bool fits, void *ctx)
{
    (void)mem;
    collect_ctx *c = ctx;
    if (!fits)
        return 0;
    if (l->tp == 1 && l->cp == 1 && (l->mbs & (l->mbs - 1)) == 0 && l->mbs < (1LL << 62))
        c->mbs_single |= (uint64_t)l->mbs;
    pt_opctx oc;
    pt_opctx_init(&oc, &c->j->m, l, &c->j->t, &c->j->c);
    pt_oplist o = {0};
    int64_t m, n, k, kinds[PT_LAYER_KINDS];
    int rc = pt_ops_embed(&oc, false, &o) || pt_ops_embed(&oc, true, &o) ||
             pt_ops_head(&oc, false, &o) || pt_ops_head(&oc, true, &o);
    /* every kind of layer the model has: a mixture of experts' GEMMs too */
    pt_model_layer_kinds(&c->j->m, 0, c->j->m.layers, kinds);
    for (int kind = 0; kind < PT_LAYER_KINDS && rc == 0; kind++) {
        if (kinds[kind] == 0)
            continue;
        oc.moe_layer = kind & PT_LAYER_MOE;
        oc.window_layer = kind & PT_LAYER_WINDOW;
        rc = pt_ops_layer(&oc, false, &o) || pt_ops_layer(&oc, true, &o);
    }
    for (int i = 0; rc == 0 && i < o.n; i++)
        if (o.op[i].cls == PT_OP_KERNEL &&
            pt_prof_gemm_shape(o.op[i].kernel.key, &m, &n, &k, NULL, NULL) == 0)
            op_set_add(c->ops, &o.op[i].kernel, is_fp8_gemm(&o.op[i]));
    pt_oplist_free(&o);
    return rc || c->ops->oom;
}

static void add_gemm(op_set *s, int64_t m, int64_t n, int64_t k)
{
    pt_kernel_op op = {.dtype = PT_DTYPE_FP32, .flops = 2.0 * (double)m * (double)n * (double)k,
                       .bytes = 4.0 * (double)(m * k + n * k + m * n)};
    snprintf(op.key, sizeof op.key, "gemm:fp32:m=%lld,n=%lld,k=%lld", (long long)m,
             (long long)n, (long long)k);
    op_set_add(s, &op, false);
}

/* Squares from 32 to 2048 and the skinny shapes of small-batch layers, so that
 * interpolation over FLOPs has samples on both sides of most questions. */
static void standard_sweep(op_set *s)
{
    for (int64_t x = 32; x <= 2048; x *= 2) {
        add_gemm(s, x, x, x);
        add_gemm(s, 4 * x, x, x);
        add_gemm(s, x, 4 * x, x);
    }
}

static int cmp_flops(const void *a, const void *b)
{
    double x = ((const prof_gemm *)a)->op.flops, y = ((const prof_gemm *)b)->op.flops;
    return (x > y) - (x < y);
}

/* ---- Measuring ----------------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int measure_gemms(const prof_opts *o, job *j, op_set *ops, const char *device,
                         int64_t *measured, double *best_rate, pt_err *err)
{
    double total = 0;
    for (int i = 0; i < ops->n; i++)
        total += ops->v[i].op.flops;
    pt_progress p;
    pt_progress_start(&p, ops->n, total);
    for (int i = 0; i < ops->n && !interrupted; i++) {
        const pt_kernel_op *op = &ops->v[i].op;
        bool fp8 = ops->v[i].fp8;
        int64_t m, n, k;
        pt_gemm_role role = PT_GEMM_FWD;
        int batch = 1;
        char result[64];
        if (o->resume && pt_costdb_has_kernel(j->db, device, op->key)) {
            pt_progress_step(&p, op->flops, op->key, "kept");
            continue;
        }
        if (op->flops > o->max_gflop * 1e9 ||
            pt_prof_gemm_shape(op->key, &m, &n, &k, &role, &batch)) {
            pt_progress_step(&p, op->flops, op->key, "skipped (over --max-gflop)");
            continue;
        }
        if (fp8 && (batch > 1 || !pt_prof_fp8_role(role))) {
            pt_progress_step(&p, op->flops, op->key, "skipped (no FP8 form in the runtime)");
            continue;
        }
        double best, soak_s = 1e-3 * (double)o->soak_ms;
        /* an FP8 GEMM through the kernel table's gemm_fp8 alone; the CPU's forward GEMMs
         * through OpenBLAS directly (with a time budget); its other roles and batches
         * through its kernel table, as the runtime calls them */
        double t = fp8 ? pt_prof_gemm_fp8(o->kn, m, n, k, role, o->repeats, soak_s, &best)
                   : strcmp(o->backend, "cuda") == 0 || role != PT_GEMM_FWD || batch > 1
                       ? pt_prof_gemm_backend(o->kn, batch, m, n, k, role, o->repeats, soak_s,
                                              &best)
                       : pt_prof_gemm(m, n, k, o->repeats, o->quick ? 0.5 : 2.0, &best);
        if (t <= 0)
            return pt_err_set(err, "timing %s: %s", op->key,
                              o->kn->err[0] ? o->kn->err : "out of memory");
        /* the device's fp32 peak (describe_device) from its fp32 GEMMs only */
        if (!fp8 && op->flops / best > *best_rate)
            *best_rate = op->flops / best;
        pt_kernel_op rec = *op; /* the key already names the data type measured */
        if (pt_costdb_put_kernel(j->db, device, &rec, t, PT_SOURCE_PROFILE, err))
            return -1;
        (*measured)++;
        snprintf(result, sizeof result, "%.3g ms, %.2f GFLOP/s%s", 1e3 * t, op->flops / t / 1e9,
                 fp8 && j->t.fp8.emulated ? " (FP8 emulated)" : "");
        pt_progress_step(&p, op->flops, op->key, result);
    }
    pt_progress_end(&p);
    fprintf(stderr, "ptprofile: %lld of %lld GEMM keys done in %.1f s\n", (long long)p.done,
            (long long)p.total, pt_prof_now_s() - p.start_s);
    return 0;
}

/* The device description: measured peak and bandwidth; links from the collectives. */
static int describe_device(const prof_opts *o, job *j, const char *device, double best_rate,
                           double link_bw, double link_lat, pt_err *err)
{
    pt_cost_hw hw;
    pt_cost_hw_of(&j->c, &hw);
    snprintf(hw.device, sizeof hw.device, "%s", device);
    /* The peak is the best rate seen: no measured GEMM may beat it, or MFU would
     * pass 100%. */
    double probe = pt_prof_cpu_peak_flops(o->quick ? 3 : 5);
    hw.peak_flops[PT_DTYPE_FP32] = probe > best_rate ? probe : best_rate;
    hw.mem_bw_Bps = pt_prof_cpu_mem_bw(o->quick ? (64LL << 20) : (256LL << 20), o->repeats);
    if (link_bw > 0) {
        hw.intra_bw_Bps = link_bw;
        hw.intra_latency_s = link_lat;
    }
    printf("device %s: sgemm %.2f GFLOP/s per core, memory %.2f GB/s", device,
           hw.peak_flops[PT_DTYPE_FP32] / 1e9, hw.mem_bw_Bps / 1e9);
    if (link_bw > 0)
        printf(", shared-memory link %.2f GB/s, %.1f us", link_bw / 1e9, 1e6 * link_lat);
    printf("\n");
    return pt_costdb_add_device(j->db, &hw, err);
}

/* The threads the runtime's host loops (the initial weights) run on. */
static int host_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* ---- Main ------------------------------------------------------------------------------------ */

static int open_db(const prof_opts *o, job *j, pt_err *err)
{
    if (o->db)
        snprintf(j->db_path, sizeof j->db_path, "%s", o->db);
    else
        pt_cli_default_db(j->db_path, sizeof j->db_path, true);
    return pt_costdb_open(j->db_path, PT_COSTDB_CREATE, &j->db, err);
}

/* --precision, --fp8-recipe and --fp8-emulate into j->t (its storage precision the
 * backend's, its stack ptrun's), as ptplan reads them: fp8 adds FP8 GEMMs to the
 * backend's storage precision, the only other word taken (its kernels run in it). */
static int load_precision(const prof_opts *o, job *j, pt_err *err)
{
    pt_train *t = &j->t;
    pt_err why;
    bool fp8 = o->precision && strcmp(o->precision, "fp8") == 0;
    if (!fp8 && (o->fp8_recipe || o->fp8_emulate))
        return pt_err_set(err, "%s goes with --precision fp8",
                          o->fp8_recipe ? "--fp8-recipe" : "--fp8-emulate");
    if (!fp8) {
        pt_prec_kind p = t->precision;
        if (o->precision && (pt_prec_parse(o->precision, &p, &why) || p != t->precision))
            return pt_err_set(err, "--precision %s: --backend %s measures its kernels in %s "
                                   "(--precision fp8 adds FP8 GEMMs to it)", o->precision,
                              o->backend, pt_prec_name(t->precision));
        return 0;
    }
    t->fp8.emulated = o->fp8_emulate;
    t->fp8.recipe = (pt_fp8_recipe)t->stack.fp8_default;
    if (o->fp8_recipe && (pt_fp8_recipe_parse(o->fp8_recipe, &t->fp8.recipe, &why) ||
                          t->fp8.recipe == PT_FP8_OFF))
        return pt_err_set(err, "--fp8-recipe: unknown FP8 recipe '%s' (expected current, "
                               "delayed, blockwise or rowwise)", o->fp8_recipe);
    /* the CPU has no FP8 peak: there FP8 is emulated, and must be asked for as such */
    if (pt_train_check_fp8(t, &j->c, &why))
        return pt_err_set(err, "--precision fp8: %s", why.msg);
    if (!o->kn->fp8_amax || !o->kn->fp8_scale || !o->kn->fp8_cast || !o->kn->gemm_fp8)
        return pt_err_set(err, "--precision fp8: the %s backend has no FP8 kernels",
                          o->kn->name);
    return 0;
}

static int load(prof_opts *o, job *j, pt_err *err)
{
    memset(j, 0, sizeof *j);
    if (pt_model_get(o->model, &j->m, err) || pt_cluster_get(o->cluster, &j->c, err))
        return -1;
    if (o->nodes)
        j->c.nodes = (int)o->nodes;
    if (o->devices)
        j->c.devices_per_node = (int)o->devices;
    if (o->seq) {
        j->m.seq = o->seq;
        if (pt_model_validate(&j->m, "--seq", err))
            return -1;
    }
    pt_train_default(&j->t, &j->c);
    j->t.global_batch = o->global_batch;
    pt_enum_opts_default(&j->eo);
    if (o->max_mbs)
        j->eo.max_mbs = o->max_mbs;
    if (strcmp(o->backend, "cpu") == 0) {
        if (strncmp(j->c.device.name, "cpu", 3) != 0)
            return pt_err_set(err, "--backend cpu measures this machine's CPU, but cluster "
                                   "'%s' has %s devices: use --cluster local", j->c.name,
                              j->c.device.name);
        j->t.precision = PT_PREC_FP32;
        o->kn = pt_kernels_cpu(1);
    } else {
        if (strncmp(j->c.device.name, "cpu", 3) == 0)
            return pt_err_set(err, "--backend cuda: name the GPU cluster this device belongs to "
                                   "(e.g. --cluster dgx-h100); its samples are filed under that "
                                   "device's name");
        char why[256] = "";
        o->kn = pt_kernels_cuda(0, why, sizeof why);
        if (!o->kn)
            return pt_err_set(err, "--backend cuda: %s", why[0] ? why : "no CUDA device");
    }
    if (!o->kn)
        return pt_err_set(err, "out of memory");
    o->kn->note = pt_cli_note;
    o->kn->note_arg = PT_CLI_KERNEL_NOTES;
    if (load_precision(o, j, err))
        return -1;
    /* the model's other kernels run on these: refused here, before the table is touched */
    if (pt_tokens_load(o->data, &o->tokens, err) ||
        pt_tokens_check_vocab(&o->tokens, j->m.vocab, err))
        return -1;
    if (o->tokens.n <= j->m.seq)
        return pt_err_set(err, "--data %s: %lld tokens, fewer than one sequence of %s "
                               "(%lld + 1)", o->data, (long long)o->tokens.n, j->m.name,
                          (long long)j->m.seq);
    return 0;
}

static pt_coll_job coll_job(const prof_opts *o, const job *j, const char *self_dir)
{
    return (pt_coll_job){.np = o->np ? (int)o->np
                                     : (j->c.devices_per_node > 1 ? j->c.devices_per_node : 2),
                         .quick = o->quick, .repeats = o->repeats,
                         .backend = strcmp(o->backend, "cuda") == 0 ? "nccl" : "mpi",
                         .self_dir = self_dir};
}

static int run(const prof_opts *o, job *j, const char *self_dir, pt_err *err)
{
    const char *device = j->c.device.name;
    char scratch[512];
    snprintf(scratch, sizeof scratch, "%s", j->db_path);
    pt_coll_job cj = coll_job(o, j, self_dir);
    cj.scratch = dirname(scratch);
    bool colls = !o->no_coll && !(o->resume && pt_costdb_count_colls(j->db, cj.backend) > 0);
    op_set ops = {0};
    collect_ctx cc = {.j = j, .ops = &ops};
    pt_enum_counts counts;
    pt_enum_layouts(&j->m, &j->c, &j->t, &j->eo, collect_gemms, &cc, &counts);
    if (o->sweep)
        standard_sweep(&ops);
    if (ops.oom) {
        free(ops.v);
        return pt_err_set(err, "out of memory collecting op keys");
    }
    qsort(ops.v, (size_t)ops.n, sizeof *ops.v, cmp_flops);
    char prec[64];
    pt_train_precision_text(&j->t, prec, sizeof prec);
    printf("ptprofile: %d GEMM shapes from %lld layouts of %s on %s in %s%s -> %s\n", ops.n,
           (long long)counts.fit, j->m.name, j->c.name, prec,
           o->sweep ? " and the sweep" : "", j->db_path);
    fflush(stdout);
    int64_t measured = 0, stored = 0;
    double link_bw = 0, link_lat = 0, best_rate = 0;
    char library[256] = "";
    int rc = measure_gemms(o, j, &ops, device, &measured, &best_rate, err);
    free(ops.v);
    int64_t kernels = 0;
    for (int b = 0; rc == 0 && !interrupted && b < 63; b++) {
        if (!(cc.mbs_single >> b & 1))
            continue;
        int64_t stored_now = 0;
        double t0 = pt_prof_now_s();
        rc = pt_prof_model_kernels(o->kn, &j->m, &j->c, &j->t, &o->tokens, (int64_t)1 << b,
                                   o->repeats, j->db, &stored_now, err);
        kernels += stored_now;
        fprintf(stderr, "ptprofile: kernels of %s at micro-batch %lld: %lld op keys in %.1f s "
                "(host on %d thread%s)\n", j->m.name, 1LL << b, (long long)stored_now,
                pt_prof_now_s() - t0, host_threads(), host_threads() == 1 ? "" : "s");
    }
    if (rc == 0 && !interrupted && colls) {
        printf("ptprofile: %s collectives on %d ranks\n", cj.backend, cj.np);
        fflush(stdout);
        rc = pt_prof_collectives(&cj, j->db, library, sizeof library, &stored, &link_bw,
                                 &link_lat, err);
        if (rc == 0 && library[0])
            printf("ptprofile: collectives measured through %s\n", library);
    }
    /* A CPU's figures are measured here; a GPU's stay its datasheet's. */
    if (rc == 0 && !interrupted && strcmp(o->backend, "cpu") == 0)
        rc = describe_device(o, j, device, best_rate, link_bw, link_lat, err);
    if (rc == 0)
        printf("ptprofile: %lld GEMMs, %lld other kernels and %lld collective points measured "
               "into %s%s\n", (long long)measured, (long long)kernels, (long long)stored,
               j->db_path,
               interrupted ? " before the interruption (--resume continues)" : "");
    return rc;
}

static int tool_main(int argc, char **argv)
{
    prof_opts o;
    if (parse_options(argc, argv, &o))
        return 1;
    char self[1024] = ".";
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0)
        self[len] = '\0';
    const char *self_dir = dirname(self);
    job j;
    pt_err err;
    /* Everything that can be refused is refused before the table is touched. */
    pt_coll_job cj;
    if (load(&o, &j, &err) ||
        (!o.no_coll && (cj = coll_job(&o, &j, self_dir), pt_prof_coll_check(&cj, &err))) ||
        open_db(&o, &j, &err)) {
        fprintf(stderr, "ptprofile: %s\n", err.msg);
        pt_kernels_destroy(o.kn);
        pt_tokens_free(&o.tokens);
        return 1;
    }
    pt_profile_run pr = {.backend = "mpi"};
    if (strcmp(o.backend, "cuda") == 0)
        snprintf(pr.backend, sizeof pr.backend, "nccl");
    gethostname(pr.host, sizeof pr.host - 1);
    snprintf(pr.device, sizeof pr.device, "%s", j.c.device.name);
    /* The CPU is measured one core at a time; for a GPU the host's threads stay all
     * OpenMP's: the runtime draws the model's initial weights on them for each
     * micro-batch size (pt_net_init), which on one thread is slow for a large model
     * (the code notes in docs/results/) */
    char nccl[64] = "";
    if (strcmp(o.backend, "cuda") == 0)
        pt_comm_nccl_library(nccl, sizeof nccl);
    snprintf(pr.versions, sizeof pr.versions, "ptprofile %s; %s%s%s%s%s", PT_VERSION,
             pt_prof_cpu_init(strcmp(o.backend, "cpu") == 0 ? 1 : 0),
             o.kn->about[0] ? "; " : "", o.kn->about, nccl[0] ? "; " : "", nccl);
    for (int i = 0; i < argc; i++)
        snprintf(pr.command + strlen(pr.command), sizeof pr.command - strlen(pr.command),
                 "%s%s", i ? " " : "", argv[i]);
    int64_t run_id;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    int rc = pt_costdb_run_begin(j.db, &pr, &run_id, &err);
    if (rc == 0)
        rc = run(&o, &j, self_dir, &err);
    if (rc)
        fprintf(stderr, "ptprofile: %s\n", err.msg);
    pt_err end_err;
    if (pt_costdb_run_end(j.db, run_id, rc ? "failed" : interrupted ? "interrupted" : "done",
                          &end_err))
        fprintf(stderr, "ptprofile: %s\n", end_err.msg);
    pt_costdb_close(j.db);
    pt_kernels_destroy(o.kn);
    pt_tokens_free(&o.tokens);
    return rc ? 1 : interrupted ? 130 : 0;
}

int main(int argc, char **argv)
{
    return pt_cli_exit("ptprofile", tool_main(argc, argv));
}
