/*
 * ptrun — trains what a plan.json describes. It reads and validates the plan, loads
 * the data (a token file, or text through the byte-level tokenizer; by default a
 * text every Debian machine has), builds the model on the compute backend, and runs
 * the plan's schedule program step after step: one line (or a progress bar) per
 * step, the same figures as JSON lines, periodic validation, checkpoints written
 * atomically, a sample of generated text at the end, and optionally a Chrome trace
 * whose spans carry the planner's op keys. Under mpirun it runs data- and pipeline-
 * parallel layouts (ZeRO 0-2, AFAB, 1F1B, interleaved); rank 0 speaks for the run,
 * and a rank that fails ends every rank with its reason.
 * Exit code: 0 done, 1 bad input or failure, 2 the loss diverged (NaN or Inf).
 */
#include "runtime.h"
#include "ptconfig.h"
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Text shipped with every Debian system (package base-files): the built-in corpus. */
#define PT_DEFAULT_CORPUS "/usr/share/common-licenses/GPL-3"

static const char usage_text[] =
    "usage: ptrun PLAN.json [options]\n"
    "\n"
    "Trains the model of a plan written by ptplan, with its layout and settings;\n"
    "a plan for N ranks runs as: mpirun -np N ptrun PLAN.json\n"
    "\n"
    "  --data FILE          token file (llm.c format) or plain text; overrides the plan\n"
    "                       [the plan's, else " PT_DEFAULT_CORPUS "]\n"
    "  --steps N            optimizer steps [the plan's]\n"
    "  --val-every N        validation loss every N steps [25; 0 = only at the end]\n"
    "  --val-batches N      micro-batches per validation [8]\n"
    "  --checkpoint DIR     write a checkpoint to DIR (every --checkpoint-every steps and\n"
    "                       at the end)\n"
    "  --checkpoint-every N [0 = only at the end]\n"
    "  --resume DIR         continue from the newest complete checkpoint in DIR (or in\n"
    "                       the DIR.N, DIR.tmp-PID and DIR.old-PID an interrupted\n"
    "                       run left)\n"
    "  --keep-checkpoints K keep the K newest checkpoints: DIR, DIR.1 .. DIR.K-1 [2]\n"
    "  --spike-window N     a loss spike is a step whose loss is over --spike-factor\n"
    "                       times, or whose gradient norm is over --spike-grad-factor\n"
    "                       times, the median of the last N steps [32; checked from\n"
    "                       8 steps on]\n"
    "  --spike-factor X     [3]\n"
    "  --spike-grad-factor X [10]\n"
    "  --spike-action A     on a spike (or a NaN/Inf loss): stop, keeping the checkpoints\n"
    "                       from before it (exit 2); rollback: reload the newest\n"
    "                       checkpoint from before it, skip the batches since, and go on\n"
    "                       (at most 4 times); off: NaN/Inf stop, spikes are ignored\n"
    "                       [stop]\n"
    "  --log FILE           JSON lines: a header (plan, layout, versions), then one per\n"
    "                       step and validation, each with its time\n"
    "  --trace FILE         Chrome trace of every instruction and op of every rank, on one\n"
    "                       clock (Perfetto)\n"
    "  --trace-steps K      only the last K steps in the --trace file [all]\n"
    "  --sample N           generate N tokens at the end [64; 0 = none]\n"
    "  --stop-after N       stop (with a checkpoint, when asked for) after step N, as an\n"
    "                       interruption would; --resume continues the same run\n"
    "  --dropout P          dropout probability on the embedding and residual branches\n"
    "                       [the plan's training.dropout]\n"
    "  --threads N          BLAS threads of this rank [1]\n"
    "  --comm-timeout S     a rank that waits S seconds in one collective or transfer\n"
    "                       (a stalled or dead peer) reports it and ends the run\n"
    "                       [$PT_COMM_TIMEOUT, else 300; 0 = wait for ever]\n"
    "  --quiet              no per-step lines\n"
    "  --record             append this run to the cost table: predicted against measured\n"
    "                       step time, MFU and each rank's memory, per-op statistics of\n"
    "                       every rank, the last step's schedule, and (unless its GEMMs\n"
    "                       ran slower than profiled: a busy machine) its op timings as\n"
    "                       cost samples that ptcalib --forget RUN removes again\n"
    "  --db FILE            the cost table for --record [$PT_COSTS_DB, else\n"
    "                       ~/.local/share/ptplan/costs.db]\n"
    "  -h, --help           this text\n";

typedef struct {
    const char *plan, *data, *ckpt, *resume, *log, *trace, *db;
    bool record;
    int64_t steps, val_every, val_batches, ckpt_every, sample, threads, stop_after;
    int64_t trace_steps;      /* 0: every step */
    double dropout;           /* < 0: the plan's */
    double comm_timeout_s;    /* < 0: PT_COMM_TIMEOUT's or the default */
    int64_t keep_ckpt;        /* checkpoints kept: DIR, DIR.1, ... */
    int64_t spike_window;     /* steps whose median a spike is measured against */
    double spike_factor, spike_grad_factor; /* over the medians of loss, gradient norm */
    int spike_action;         /* SPIKE_* */
    bool quiet;
} options;

enum { SPIKE_OFF, SPIKE_STOP, SPIKE_ROLLBACK };

static int parse_options(int argc, char **argv, options *o)
{
    enum { O_DATA = 256, O_STEPS, O_VAL, O_VALB, O_CKPT, O_CKPTE, O_RESUME, O_LOG, O_TRACE,
           O_SAMPLE, O_THREADS, O_QUIET, O_STOP, O_RECORD, O_DB, O_DROPOUT, O_TRACE_STEPS,
           O_COMM_TIMEOUT };
    enum { O_KEEP = 512, O_SPIKE_WINDOW, O_SPIKE_FACTOR, O_SPIKE_GFACTOR, O_SPIKE_ACTION };
    static const struct option longopts[] = {
        {"data", 1, 0, O_DATA}, {"steps", 1, 0, O_STEPS}, {"val-every", 1, 0, O_VAL},
        {"val-batches", 1, 0, O_VALB}, {"checkpoint", 1, 0, O_CKPT},
        {"checkpoint-every", 1, 0, O_CKPTE}, {"resume", 1, 0, O_RESUME}, {"log", 1, 0, O_LOG},
        {"trace", 1, 0, O_TRACE}, {"sample", 1, 0, O_SAMPLE}, {"threads", 1, 0, O_THREADS},
        {"quiet", 0, 0, O_QUIET}, {"stop-after", 1, 0, O_STOP}, {"help", 0, 0, 'h'},
        {"trace-steps", 1, 0, O_TRACE_STEPS}, {"record", 0, 0, O_RECORD}, {"db", 1, 0, O_DB}, {"dropout", 1, 0, O_DROPOUT},
        {"comm-timeout", 1, 0, O_COMM_TIMEOUT},
        {"keep-checkpoints", 1, 0, O_KEEP}, {"spike-window", 1, 0, O_SPIKE_WINDOW},
        {"spike-factor", 1, 0, O_SPIKE_FACTOR}, {"spike-grad-factor", 1, 0, O_SPIKE_GFACTOR},
        {"spike-action", 1, 0, O_SPIKE_ACTION},
        {0, 0, 0, 0}};
    *o = (options){.val_every = 25, .val_batches = 8, .sample = 64, .threads = 1, .dropout = -1,
                   .comm_timeout_s = -1};
    o->keep_ckpt = 2;
    o->spike_window = 32;
    o->spike_factor = 3;
    o->spike_grad_factor = 10;
    o->spike_action = SPIKE_STOP;
    opterr = 0;
    int c, bad = 0;
    while (!bad && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_DATA: o->data = optarg; break;
        case O_STEPS: bad = pt_cli_int("ptrun", "--steps", optarg, 1, 1LL << 40, &o->steps); break;
        case O_VAL: bad = pt_cli_int("ptrun", "--val-every", optarg, 0, 1LL << 40, &o->val_every); break;
        case O_VALB: bad = pt_cli_int("ptrun", "--val-batches", optarg, 1, 1 << 20, &o->val_batches);
            break;
        case O_CKPT: o->ckpt = optarg; break;
        case O_CKPTE: bad = pt_cli_int("ptrun", "--checkpoint-every", optarg, 0, 1LL << 40, &o->ckpt_every);
            break;
        case O_RESUME: o->resume = optarg; break;
        case O_LOG: o->log = optarg; break;
        case O_TRACE: o->trace = optarg; break;
        case O_TRACE_STEPS:
            bad = pt_cli_int("ptrun", "--trace-steps", optarg, 1, 1LL << 40, &o->trace_steps);
            break;
        case O_SAMPLE: bad = pt_cli_int("ptrun", "--sample", optarg, 0, 1 << 20, &o->sample); break;
        case O_THREADS: bad = pt_cli_int("ptrun", "--threads", optarg, 1, 1024, &o->threads); break;
        case O_QUIET: o->quiet = true; break;
        case O_RECORD: o->record = true; break;
        case O_DB: o->db = optarg; break;
        case O_DROPOUT: bad = pt_cli_real("ptrun", "--dropout", optarg, 0, 0.99, &o->dropout); break;
        case O_COMM_TIMEOUT:
            bad = pt_cli_real("ptrun", "--comm-timeout", optarg, 0, 1e9, &o->comm_timeout_s);
            break;
        case O_STOP: bad = pt_cli_int("ptrun", "--stop-after", optarg, 1, 1LL << 40, &o->stop_after); break;
        case O_KEEP: bad = pt_cli_int("ptrun", "--keep-checkpoints", optarg, 1, 100, &o->keep_ckpt); break;
        case O_SPIKE_WINDOW:
            bad = pt_cli_int("ptrun", "--spike-window", optarg, 1, 1 << 20, &o->spike_window);
            break;
        case O_SPIKE_FACTOR:
            bad = pt_cli_real("ptrun", "--spike-factor", optarg, 1, 1e30, &o->spike_factor);
            break;
        case O_SPIKE_GFACTOR:
            bad = pt_cli_real("ptrun", "--spike-grad-factor", optarg, 1, 1e30,
                              &o->spike_grad_factor);
            break;
        case O_SPIKE_ACTION:
            o->spike_action = strcmp(optarg, "stop") == 0       ? SPIKE_STOP
                              : strcmp(optarg, "rollback") == 0 ? SPIKE_ROLLBACK
                              : strcmp(optarg, "off") == 0      ? SPIKE_OFF
                                                                : -1;
            if (o->spike_action < 0) {
                fprintf(stderr, "ptrun: --spike-action '%s': expected stop, rollback or off\n",
                        optarg);
                bad = 1;
            }
            break;
        case 'h': fputs(usage_text, stdout); exit(0);
        default:
            return pt_cli_bad_option("ptrun", c, argv[optind - 1]);
        }
    }
    if (bad)
        return -1;
    if (optind != argc - 1) {
        fprintf(stderr, optind < argc ? "ptrun: one plan file, please (see ptrun --help)\n"
                                      : "ptrun: which plan? usage: ptrun PLAN.json [options]\n");
        return -1;
    }
    o->plan = argv[optind];
    return 0;
}

/* ---- Setting up --------------------------------------------------------------------------- */

typedef struct {
    pt_plan plan;
    pt_tokens all, train, val;
    pt_sampler train_s, val_s;
    pt_kernels *kn;
    pt_net net;
    pt_sched sched;
    pt_trace trace;
    FILE *log;
    int log_errno;              /* errno of the first failed --log line, 0 when none */
    double model_flops;       /* per step, all ranks, the planner's count */
    double peak_flops;        /* all the layout's devices */
    pt_comm *comm;
    pt_dist dist;
    pt_net_place place;       /* this rank's part of the model */
    int rank, world, stage;
    double *step_s;           /* the time of each step after this process's first */
    int64_t timed_steps, steps_run, cap_step_s;
    bool has_data;            /* the first and last stage read data; others none */
    int64_t start_step;
    int64_t data_skip;        /* samples skipped by spike rollbacks (train_s.skip) */
    bool spike_fired;         /* the PT_TEST_SPIKE_AT test hook has fired */
    char config_hash[17];
} run;

static int check_plan(const options *o, run *r, pt_err *err)
{
    pt_plan *p = &r->plan;
    int64_t world = pt_layout_world(&p->layout);
    if (world != r->world)
        return pt_err_set(err, "%s: the layout needs %lld ranks, but ptrun was started as %d "
                               "(launch with mpirun -np %lld)", o->plan, (long long)world,
                          r->world, (long long)world);
    /* A plan priced for another framework's stack trains here with ptrun's own
     * kernels: the layout is the same, the op lists are ptrun's. */
    const pt_stack *own = pt_stack_builtin(0);
    if (strcmp(p->train.stack.name, own->name) != 0) {
        if (r->rank == 0)
            fprintf(stderr, "ptrun: note: %s was priced for stack '%s'; ptrun trains it with "
                            "its own kernels (stack '%s'), so the measured step time is not "
                            "that prediction's (ptplan --stack ptrun predicts this run)\n",
                    o->plan, p->train.stack.name, own->name);
        p->train.stack = *own;
    }
    if (o->dropout >= 0)
        p->run.dropout = o->dropout;
    if (o->steps)
        p->run.steps = o->steps;
    if (o->data)
        snprintf(p->run.data, sizeof p->run.data, "%s", o->data);
    return 0;
}

/* The process groups of the layout, and this rank's place in them. */
static int place(run *r, pt_err *err)
{
    pt_grid g;
    pt_grid_init(&g, &r->plan.layout);
    if (r->comm && pt_comm_groups(r->comm, &g, err))
        return -1;
    int coords[PT_NDIM];
    pt_grid_coords(&g, r->rank, coords);
    r->stage = coords[PT_DIM_PP];
    /* the context-parallel ring: the ranks of this rank's cp group in order */
    int cp = g.size[PT_DIM_CP], cr = coords[PT_DIM_CP];
    int64_t *members = malloc((size_t)g.world * sizeof *members);
    if (!members)
        return pt_err_set(err, "out of memory");
    r->place = (pt_net_place){.stage = r->stage, .tp_rank = coords[PT_DIM_TP], .cp_rank = cr,
                              .dp_rank = (int)pt_grid_group(&g, PT_GROUP_DPCP, r->rank, members),
                              .dp_size = pt_grid_group_size(&g, PT_GROUP_DPCP),
                              .comm = r->world > 1 ? r->comm : NULL};
    free(members);
    coords[PT_DIM_CP] = (cr + 1) % cp;
    r->place.cp_next = (int)pt_grid_rank(&g, coords);
    coords[PT_DIM_CP] = (cr + cp - 1) % cp;
    r->place.cp_prev = (int)pt_grid_rank(&g, coords);
    r->has_data = r->stage == 0 || r->stage == r->plan.layout.pp - 1;
    return pt_dist_init(&r->dist, r->world > 1 ? r->comm : NULL, &g, r->rank, err);
}

static int load_data(run *r, pt_err *err)
{
    const pt_plan *p = &r->plan;
    const char *path = p->run.data[0] ? p->run.data : PT_DEFAULT_CORPUS;
    if (pt_tokens_load(path, &r->all, err) ||
        pt_tokens_check_vocab(&r->all, p->model.vocab, err) ||
        pt_tokens_split(&r->all, 0.1, p->model.seq, &r->train, &r->val, err) ||
        pt_sampler_init(&r->train_s, &r->train, p->model.seq, p->run.seed, err) ||
        pt_sampler_init(&r->val_s, &r->val, p->model.seq, p->run.seed ^ 0x5bd1e995ull, err))
        return -1;
    printf("data    %s: %lld tokens (%lld train, %lld validation)\n", path,
           (long long)r->all.n, (long long)r->train.n, (long long)r->val.n);
    return 0;
}

/* What must not change between a checkpoint and the run resuming from it. */
static void config_hash(const pt_plan *p, char out[17])
{
    char *model = pt_model_to_json(&p->model);
    char text[2048], layout[256];
    pt_layout_format(&p->layout, layout, sizeof layout);
    snprintf(text, sizeof text, "%s|%s|%lld|%s|%.17g|%.17g|%lld|%lld|%.17g|%.17g|%.17g|%llu|%s",
             model ? model : "", layout, (long long)p->train.global_batch,
             pt_prec_name(p->train.precision), p->run.lr, p->run.min_lr,
             (long long)p->run.warmup_steps, (long long)p->run.steps, p->run.weight_decay,
             p->run.grad_clip, p->run.dropout, (unsigned long long)p->run.seed, p->run.data);
    free(model);
    uint64_t h = 1469598103934665603ull;
    for (const char *s = text; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

static int build(const options *o, run *r, pt_err *err)
{
    pt_plan *p = &r->plan;
    if (strncmp(p->cluster.device.name, "cpu", 3) == 0) {
        r->kn = pt_kernels_cpu((int)o->threads);
        if (!r->kn)
            return pt_err_set(err, "cannot start the CPU backend (out of memory)");
    } else {
        char why[256] = "";
        /* one GPU per rank: the node's ranks take the GPUs this process sees in turn
         * (modulo their count, so srun --gpus-per-task, CUDA_VISIBLE_DEVICES and several
         * ranks sharing one GPU all work) */
        int seen = pt_kernels_cuda_devices();
        int local = r->comm ? pt_comm_local_rank(r->comm) : 0;
        r->kn = pt_kernels_cuda(seen > 0 ? local % seen : local, why, sizeof why);
        if (!r->kn)
            return pt_err_set(err, "%s: the plan is for %s devices, but the CUDA backend cannot "
                                   "start: %s", o->plan, p->cluster.device.name, why);
    }
    /* What the device path does not run yet: collectives on bf16 activations (tp, cp)
     * and the sharded optimizer step, which works on host buffers. */
    bool sharded = p->layout.zero >= 1 && r->place.dp_size > 1;
    if (r->kn->act_dtype != PT_KDTYPE_F32 && (p->layout.tp > 1 || p->layout.cp > 1 || sharded))
        return pt_err_set(err, "%s: tp = %d, cp = %d, zero = %d over %d data-parallel ranks: "
                               "the %s backend runs dp (ZeRO 0) and pp only so far", o->plan,
                          p->layout.tp, p->layout.cp, p->layout.zero, r->place.dp_size,
                          r->kn->name);
    /* device buffers travel through NCCL, or staged through host memory, from now on
     * (collective: every rank builds its backend here) */
    if (r->comm && pt_comm_use_device(r->comm, r->kn, err))
        return -1;
    if (pt_sched_build(p->layout.schedule, p->layout.pp, p->layout.vp, (int)p->layout.n_micro,
                       &r->sched, err))
        return -1;
    int slots = pt_sched_peak_in_flight(&r->sched, r->stage);
    pt_trace_init(&r->trace, o->trace != NULL || o->record);
    /* the first of the two barriers the merged trace aligns the ranks' clocks on */
    if (r->trace.on && pt_comm_all_ok(r->comm, true))
        pt_trace_sync(&r->trace);
    if (pt_net_init_at(&r->net, p, r->kn, &r->place, slots, p->run.seed, &r->trace, err))
        return -1;
    r->net.rank = r->rank;
    pt_opctx c;
    pt_opctx_init(&c, &p->model, &p->layout, &p->train, &p->cluster);
    r->model_flops = pt_step_model_flops(&c);
    r->peak_flops = pt_peak_flops_total(&p->cluster, &p->train);
    config_hash(p, r->config_hash);
    return 0;
}

/* ---- Checkpoints -------------------------------------------------------------------------- */

/* Host copies of the state a checkpoint holds (the backend's memory may be a GPU's). */
typedef struct {
    float *master, *m, *v;
} host_state;

static int host_state_alloc(host_state *h, const pt_net *net)
{
    h->master = malloc((size_t)net->n_elems * sizeof(float));
    h->m = malloc((size_t)net->opt_elems * sizeof(float));
    h->v = malloc((size_t)net->opt_elems * sizeof(float));
    return h->master && h->m && h->v ? 0 : -1;
}

static void host_state_free(host_state *h)
{
    free(h->master);
    free(h->m);
    free(h->v);
}

/* A rank's files in a checkpoint: model.safetensors and optim_rank0.safetensors for
 * one rank; with several, each rank its own (its stage's parameters, its optimizer
 * shard), model_rank<r> and optim_rank<r>. */
static void state_paths(const char *dir, const run *r, char *model, char *optim, size_t n)
{
    if (r->world == 1)
        snprintf(model, n, "%s/model.safetensors", dir);
    else
        snprintf(model, n, "%s/model_rank%d.safetensors", dir, r->rank);
    snprintf(optim, n, "%s/optim_rank%d.safetensors", dir, r->rank);
}

static int write_state(const char *tmp, run *r, const host_state *h, pt_err *err)
{
    pt_net *n = &r->net;
    char path[1100];
    pt_st_tensor *t = calloc((size_t)n->n_param, sizeof *t);
    if (!t)
        return pt_err_set(err, "out of memory");
    for (int i = 0; i < n->n_param; i++) {
        const pt_param *q = &n->param[i];
        t[i] = (pt_st_tensor){.ndim = q->ndim, .shape = {q->shape[0], q->shape[1]},
                              .data = h->master + q->offset,
                              .bytes = (size_t)q->count * sizeof(float)};
        snprintf(t[i].name, sizeof t[i].name, "%s", q->name);
        snprintf(t[i].dtype, sizeof t[i].dtype, "F32");
    }
    size_t bytes = (size_t)n->opt_elems * sizeof(float);
    pt_st_tensor adam[2] = {{.name = "adam.m", .dtype = "F32", .ndim = 1, .shape = {n->opt_elems},
                             .data = h->m, .bytes = bytes},
                            {.name = "adam.v", .dtype = "F32", .ndim = 1, .shape = {n->opt_elems},
                             .data = h->v, .bytes = bytes}};
    char seed[32], optim[1100];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)r->plan.run.seed);
    const char *keys[] = {"sampler_seed"}, *vals[] = {seed};
    state_paths(tmp, r, path, optim, sizeof path);
    int rc = pt_st_write(path, t, n->n_param, NULL, NULL, 0, err);
    if (rc == 0)
        rc = pt_st_write(optim, adam, 2, keys, vals, 1, err);
    free(t);
    return rc;
}

static int write_meta(const char *tmp, run *r, int64_t step, pt_err *err)
{
    /* the data position: the step's first sample, past the samples rollbacks skipped */
    pt_ckpt_meta meta = {.format_version = 1, .step = step, .world = r->world,
                         .data_pos = step * r->plan.train.global_batch + r->data_skip};
    pt_layout_format(&r->plan.layout, meta.layout, sizeof meta.layout);
    snprintf(meta.config_hash, sizeof meta.config_hash, "%s", r->config_hash);
    return pt_ckpt_meta_write(tmp, &meta, err);
}

/* Every rank writes its files into one temporary directory that rank 0 made; rank 0
 * then writes meta.json and renames the directory into place, only if every rank
 * succeeded, keeping the `keep` newest (DIR, DIR.1, ...). */
static int save_checkpoint(const char *dir, int keep, run *r, int64_t step, pt_err *err)
{
    host_state h;
    char tmp[1024] = "";
    int rc = host_state_alloc(&h, &r->net) ? pt_err_set(err, "out of memory") : 0;
    if (rc == 0)
        rc = pt_net_get_state(&r->net, h.master, h.m, h.v, err);
    if (rc == 0 && r->rank == 0)
        rc = pt_ckpt_begin(dir, tmp, sizeof tmp, err);
    if (!pt_comm_all_ok(r->comm, rc == 0) || pt_comm_bcast(r->comm, tmp, sizeof tmp, err)) {
        host_state_free(&h);
        return rc ? rc : pt_err_set(err, "another rank could not start the checkpoint");
    }
    rc = write_state(tmp, r, &h, err);
    host_state_free(&h);
    bool all = pt_comm_all_ok(r->comm, rc == 0);
    if (r->rank == 0) {
        if (all && (rc = write_meta(tmp, r, step, err)) == 0)
            rc = pt_ckpt_commit(tmp, dir, keep, err);
        else
            pt_ckpt_abort(tmp);
    }
    if (!pt_comm_all_ok(r->comm, rc == 0) && rc == 0)
        rc = pt_err_set(err, "another rank could not write its part of checkpoint %s", dir);
    return rc;
}

static int load_tensor(const pt_st_file *f, const char *name, int ndim, const int64_t *shape,
                       float *dst, size_t bytes, pt_err *err)
{
    const pt_st_tensor *t;
    if (pt_st_get(f, name, "F32", ndim, shape, &t, err))
        return -1;
    memcpy(dst, t->data, bytes);
    return 0;
}

static int read_state(const char *dir, run *r, host_state *h, pt_err *err)
{
    pt_net *n = &r->net;
    char path[1100], optim[1100];
    pt_st_file *f;
    state_paths(dir, r, path, optim, sizeof path);
    if (pt_st_open(path, &f, err))
        return -1;
    int rc = 0;
    for (int i = 0; i < n->n_param && rc == 0; i++) {
        const pt_param *q = &n->param[i];
        rc = load_tensor(f, q->name, q->ndim, q->shape, h->master + q->offset,
                         (size_t)q->count * sizeof(float), err);
    }
    pt_st_close(f);
    if (rc == 0 && (rc = pt_st_open(optim, &f, err)) == 0) {
        int64_t shape[1] = {n->opt_elems};
        size_t bytes = (size_t)n->opt_elems * sizeof(float);
        rc = load_tensor(f, "adam.m", 1, shape, h->m, bytes, err) ||
             load_tensor(f, "adam.v", 1, shape, h->v, bytes, err);
        pt_st_close(f);
    }
    return rc ? -1 : 0;
}

/* Loads the checkpoint at path, whose meta.json pt_ckpt_find read, after checking that
 * it belongs to this run, and takes its data position. Collective when the model's
 * state is (pt_net_set_state). */
static int load_checkpoint(const char *path, const pt_ckpt_meta *meta, run *r, pt_err *err)
{
    char layout[256];
    int64_t first = meta->step * r->plan.train.global_batch;
    pt_layout_format(&r->plan.layout, layout, sizeof layout);
    if (strcmp(meta->layout, layout) != 0)
        return pt_err_set(err, "%s: the checkpoint was written by layout %s; this plan's is %s",
                          path, meta->layout, layout);
    if (strcmp(meta->config_hash, r->config_hash) != 0)
        return pt_err_set(err, "%s: the checkpoint was written for another model or other "
                               "training settings (config hash %s, this plan %s)", path,
                          meta->config_hash, r->config_hash);
    if (meta->world != r->world)
        return pt_err_set(err, "%s: the checkpoint was written by %lld ranks, this run has %d",
                          path, (long long)meta->world, r->world);
    if (meta->step > r->plan.run.steps)
        return pt_err_set(err, "%s/meta.json: field 'step' = %lld is beyond the plan's "
                               "run.steps (%lld)", path, (long long)meta->step,
                          (long long)r->plan.run.steps);
    /* data_pos is the step's first sample plus what spike rollbacks skipped */
    if (meta->data_pos < first || meta->data_pos - first > (1LL << 50))
        return pt_err_set(err, "%s/meta.json: field 'data_pos' = %lld does not fit step %lld "
                               "(expected at least step x global batch = %lld, and at most "
                               "2^50 skipped samples more)", path, (long long)meta->data_pos,
                          (long long)meta->step, (long long)first);
    host_state h;
    int rc = host_state_alloc(&h, &r->net) ? pt_err_set(err, "out of memory") : 0;
    if (rc == 0)
        rc = read_state(path, r, &h, err);
    if (rc == 0)
        rc = pt_net_set_state(&r->net, h.master, h.m, h.v, err);
    host_state_free(&h);
    if (rc == 0) {
        r->data_skip = meta->data_pos - first;
        r->train_s.skip = r->data_skip;
    }
    return rc;
}

/* Continues from the newest complete checkpoint of dir: dir itself, or where a commit
 * that was interrupted left a newer one (pt_ckpt_find). */
static int resume(const char *dir, run *r, pt_err *err)
{
    pt_ckpt_meta meta;
    char path[4096];
    if (pt_ckpt_find(dir, r->config_hash, -1, path, sizeof path, &meta, err) ||
        load_checkpoint(path, &meta, r, err))
        return -1;
    r->start_step = meta.step;
    printf("resumed %s at step %lld", path, (long long)meta.step);
    if (r->data_skip)
        printf(", data position %lld (%lld samples skipped)", (long long)meta.data_pos,
               (long long)r->data_skip);
    printf("\n");
    return 0;
}

/* ---- The JSON-lines log --------------------------------------------------------------------- */

/* Now, in UTC, ISO 8601 with milliseconds: "2026-11-23T10:00:00.123Z". */
static void utc_now(char out[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ts.tv_nsec / 1000000));
}

/* Starts a line of --log and returns the log to write its fields into, each with its
 * leading comma, before the closing "}\n"; NULL without a log. The line starts
 * {"type":TYPE, "step":STEP (when STEP >= 0), "time":now. type and step lead, in this
 * order: tests and scripts find a step's line by the text "type":"step","step":N, and
 * read its last field up to the closing brace (tests/tools/cli_ptrun.sh, mpi_equivalence.sh). */
static FILE *log_begin(run *r, const char *type, int64_t step)
{
    if (!r->log)
        return NULL;
    char now[32];
    utc_now(now);
    fprintf(r->log, "{\"type\":\"%s\"", type);
    if (step >= 0)
        fprintf(r->log, ",\"step\":%lld", (long long)step);
    fprintf(r->log, ",\"time\":\"%s\"", now);
    return r->log;
}

/* Whether every line of --log reached its file: a full disk sets the stream's error flag
 * and cuts the log mid-line, which must not pass as a complete log. */
static int log_check(const options *o, run *r, pt_err *err)
{
    if (!r->log)
        return 0;
    errno = 0;
    if (fflush(r->log) == 0 && !ferror(r->log))
        return 0;
    int e = r->log_errno ? r->log_errno : errno;
    return pt_err_set(err, "cannot write the log '%s': %s; it is incomplete", o->log,
                      e ? strerror(e) : "write error");
}

/* Ends a line of --log, keeping the cause of the first failure for log_check. */
static void log_end(run *r, FILE *f)
{
    errno = 0;
    if ((fputs("}\n", f) < 0 || ferror(f)) && !r->log_errno)
        r->log_errno = errno ? errno : EIO;
}

/* A whole line of --log: log_begin, then the fields `fields` formats. */
__attribute__((format(printf, 4, 5)))
static void log_line(run *r, const char *type, int64_t step, const char *fields, ...)
{
    FILE *f = log_begin(r, type, step);
    if (!f)
        return;
    va_list ap;
    va_start(ap, fields);
    vfprintf(f, fields, ap);
    va_end(ap);
    log_end(r, f);
}

/* ,"key":"value" with value escaped as a JSON string (paths and names may hold quotes). */
static void log_string(FILE *f, const char *key, const char *value)
{
    fprintf(f, ",\"%s\":\"", key);
    for (const unsigned char *c = (const unsigned char *)value; *c; c++)
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    fputc('"', f);
}

/* ---- Training ------------------------------------------------------------------------------ */

static void report_step(const options *o, run *r, int64_t step, const pt_step_stats *s,
                        double elapsed)
{
    const pt_plan *p = &r->plan;
    double tokens = (double)(p->train.global_batch * p->model.seq);
    double mfu = r->peak_flops > 0 ? r->model_flops / (s->time_s * r->peak_flops) : 0;
    int64_t done = step + 1 - r->start_step, left = p->run.steps - step - 1;
    double eta = done > 0 ? elapsed / (double)done * (double)left : 0;
    if (!o->quiet) {
        printf("step %5lld/%lld  loss %.4f  lr %.3e  grad norm %.3f  %.0f tok/s", (long long)step + 1,
               (long long)p->run.steps, s->loss, s->lr, s->grad_norm, tokens / s->time_s);
        if (mfu > 0)
            printf("  MFU %.1f%%", 100 * mfu);
        printf("  ETA %d:%02d\n", (int)eta / 60, (int)eta % 60);
        fflush(stdout);
    }
    log_line(r, "step", step + 1, ",\"loss\":%.17g,\"lr\":%.17g,\"grad_norm\":%.17g,"
             "\"tokens_per_s\":%.6g,\"mfu\":%.6g,\"time_s\":%.6g", s->loss, s->lr, s->grad_norm,
             tokens / s->time_s, mfu, s->time_s);
}

static int validate(const options *o, run *r, int64_t step, pt_err *err)
{
    double loss;
    if (pt_engine_eval(&r->net, &r->dist, r->has_data ? &r->val_s : NULL, o->val_batches, &loss,
                       err))
        return -1;
    printf("step %5lld  validation loss %.4f\n", (long long)step, loss);
    log_line(r, "val", step, ",\"loss\":%.17g", loss);
    return 0;
}

/* Draws a token from softmax(logits / temperature) with a uniform u in [0, 1). */
static int draw(const float *logits, int64_t v, double temperature, double u)
{
    double max = logits[0], sum = 0;
    for (int64_t j = 1; j < v; j++)
        max = logits[j] > max ? logits[j] : max;
    for (int64_t j = 0; j < v; j++)
        sum += exp((logits[j] - max) / temperature);
    double x = u * sum;
    for (int64_t j = 0; j < v; j++) {
        x -= exp((logits[j] - max) / temperature);
        if (x <= 0)
            return (int)j;
    }
    return (int)(v - 1);
}

/* Generates `count` tokens after a prompt from the validation data, each drawn at
 * temperature 0.8 with a Philox stream keyed by the run's seed (so the same run
 * prints the same text), the window sliding once it is full. */
static int sample_text(run *r, int64_t count, pt_err *err)
{
    const pt_plan *p = &r->plan;
    int64_t s = p->model.seq, T = p->layout.mbs * s, v = p->model.vocab;
    int64_t vp = pt_vocab_padded(&p->model, p->layout.tp) / p->layout.tp;
    int64_t prompt = s / 2, total = prompt + count;
    int32_t *seq = calloc((size_t)total, sizeof *seq), *win = calloc((size_t)T, sizeof *win);
    pt_kernels *kn = r->net.kn;
    size_t ab = pt_kdtype_bytes(kn->act_dtype);
    float *row = malloc((size_t)vp * sizeof *row);
    uint16_t *b16 = malloc((size_t)vp * sizeof *b16);
    if (!seq || !win || !row || !b16) {
        free(seq);
        free(win);
        free(row);
        free(b16);
        return pt_err_set(err, "out of memory");
    }
    for (int64_t i = 0; i < prompt; i++)
        seq[i] = r->val.tok[i];
    int rc = 0;
    for (int64_t len = prompt; len < total && rc == 0; len++) {
        int64_t w = len < s ? len : s; /* the last w tokens, at the start of row 0 */
        memcpy(win, seq + len - w, (size_t)w * sizeof *win);
        double ignored = 0;
        rc = pt_net_forward(&r->net, 0, win, win, 0.0f, &ignored, err);
        /* the logits of the last position, to the host (bf16 on a GPU backend) */
        const char *dev = (const char *)pt_net_last_logits(&r->net, 0) + (size_t)((w - 1) * vp) * ab;
        if (ab == 4) {
            kn->copy(kn, row, dev, (size_t)vp * 4, PT_KCOPY_D2H);
        } else {
            kn->copy(kn, b16, dev, (size_t)vp * 2, PT_KCOPY_D2H);
            for (int64_t j = vp - 1; j >= 0; j--)
                row[j] = pt_k_f32_from_bf16(b16[j]);
        }
        if (kn->sync(kn))
            rc = pt_err_set(err, "%s", kn->err);
        const float *logits = row;
        uint32_t ctr[4] = {(uint32_t)len, 0, 0, 0}, key[2] = {(uint32_t)p->run.seed, 7}, x[4];
        pt_k_philox4x32_10(ctr, key, x);
        seq[len] = draw(logits, v, 0.8, (double)(x[0] >> 8) / 16777216.0);
    }
    if (rc == 0) {
        char text[4096];
        pt_bytes_decode(seq + prompt, count, text, sizeof text);
        printf("sample: %s\n", v <= 256 ? text : "(token ids; the tokenizer is byte-level)");
    }
    free(seq);
    free(win);
    free(row);
    free(b16);
    return rc;
}

/* Keeps a step's time for the run's median. */
static int keep_step_time(run *r, double time_s, pt_err *err)
{
    if (r->timed_steps == r->cap_step_s) {
        int64_t cap = r->cap_step_s ? 2 * r->cap_step_s : 256;
        double *v = realloc(r->step_s, (size_t)cap * sizeof *v);
        if (!v)
            return pt_err_set(err, "out of memory for %lld step times", (long long)cap);
        r->step_s = v;
        r->cap_step_s = cap;
    }
    r->step_s[r->timed_steps++] = time_s;
    return 0;
}

/* ---- The loss-spike guard ------------------------------------------------------------------ */

/* A loss spike: a step whose loss, or gradient norm, is far above the median of the
 * steps before it. Large runs see them (PaLM: Chowdhery et al. 2022, section 5.1, which
 * restarted from a checkpoint about 100 steps before the spike and skipped 200-500
 * batches); a diverging run passes through them before its loss becomes NaN, so a
 * checkpoint written after one may already be damaged. The guard measures each step
 * against the medians of the last --spike-window healthy steps, once it has
 * SPIKE_MIN_STEPS of them (the first steps' losses fall fast), and a spiking step is
 * never checkpointed. The decision is the same on every rank: the loss and gradient
 * norm are the global batch's, summed over ranks. */
enum { SPIKE_MIN_STEPS = 8, SPIKE_MAX_ROLLBACKS = 4 };

typedef struct {
    double *loss, *gnorm, *scratch;   /* the last `window` healthy steps, a ring */
    int64_t window, n, next;
    double loss_median, gnorm_median; /* of the ring, as the last check found them */
    int rollbacks;
} spike_guard;

static int spike_init(spike_guard *g, int64_t window, pt_err *err)
{
    *g = (spike_guard){.window = window};
    g->loss = calloc((size_t)window, sizeof *g->loss);
    g->gnorm = calloc((size_t)window, sizeof *g->gnorm);
    g->scratch = calloc((size_t)window, sizeof *g->scratch);
    return g->loss && g->gnorm && g->scratch ? 0 : pt_err_set(err, "out of memory");
}

static void spike_free(spike_guard *g)
{
    free(g->loss);
    free(g->gnorm);
    free(g->scratch);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double spike_median(spike_guard *g, const double *v)
{
    memcpy(g->scratch, v, (size_t)g->n * sizeof *v);
    qsort(g->scratch, (size_t)g->n, sizeof *v, cmp_double);
    return g->n % 2 ? g->scratch[g->n / 2]
                    : 0.5 * (g->scratch[g->n / 2 - 1] + g->scratch[g->n / 2]);
}

/* Whether step s spikes; the medians it was measured against stay in g. */
static bool spike_check(const options *o, spike_guard *g, const pt_step_stats *s)
{
    if (g->n < SPIKE_MIN_STEPS && g->n < g->window)
        return false;
    g->loss_median = spike_median(g, g->loss);
    g->gnorm_median = spike_median(g, g->gnorm);
    return s->loss > o->spike_factor * g->loss_median ||
           s->grad_norm > o->spike_grad_factor * g->gnorm_median;
}

static void spike_push(spike_guard *g, const pt_step_stats *s)
{
    g->loss[g->next] = s->loss;
    g->gnorm[g->next] = s->grad_norm;
    g->next = (g->next + 1) % g->window;
    g->n += g->n < g->window;
}

/* Test hook (tests/tools/cli_checkpoint.sh), not an option: PT_TEST_SPIKE_AT=N multiplies
 * every parameter by 100 just before step N runs the first time in this process, so
 * that step's loss and gradients really explode, deterministically; a rollback must
 * undo it by reloading the weights. Collective, like every call here. */
static int test_spike_hook(run *r, int64_t step, pt_err *err)
{
    const char *at = getenv("PT_TEST_SPIKE_AT");
    if (!at || r->spike_fired || atoll(at) != step + 1)
        return 0;
    r->spike_fired = true;
    host_state h;
    int rc = host_state_alloc(&h, &r->net) ? pt_err_set(err, "out of memory") : 0;
    if (rc == 0)
        rc = pt_net_get_state(&r->net, h.master, h.m, h.v, err);
    for (int64_t i = 0; rc == 0 && i < r->net.n_elems; i++)
        h.master[i] *= 100.0f;
    if (rc == 0)
        rc = pt_net_set_state(&r->net, h.master, h.m, h.v, err);
    host_state_free(&h);
    return rc;
}

/* "checkpoint DIR.1 (step 40, from before it) is kept", or why there is none. */
static void kept_checkpoint(const options *o, const run *r, int64_t bad, char *out, size_t n)
{
    pt_ckpt_meta meta;
    pt_err ignored;
    char path[4096];
    if (!o->ckpt)
        snprintf(out, n, "no checkpoint was asked for");
    else if (pt_ckpt_find(o->ckpt, r->config_hash, bad, path, sizeof path, &meta, &ignored))
        snprintf(out, n, "no checkpoint from before it is in %s", o->ckpt);
    else
        snprintf(out, n, "checkpoint %s (step %lld, from before it) is kept", path,
                 (long long)meta.step);
}

/* Back to the newest checkpoint from before step `bad` (1-based: the spike's), with the
 * data position just past the spike's batch, so that the batches of the steps since
 * that checkpoint are skipped. Returns the checkpoint's step, or -1. Collective. */
static int64_t rollback(const options *o, run *r, int64_t bad, pt_err *err)
{
    pt_ckpt_meta meta;
    char path[4096];
    int64_t batch = r->plan.train.global_batch;
    int64_t past = bad * batch + r->data_skip; /* the data position after the spike */
    if (!o->ckpt)
        return pt_err_set(err, "--spike-action rollback needs --checkpoint"), -1;
    if (pt_ckpt_find(o->ckpt, r->config_hash, bad, path, sizeof path, &meta, err) ||
        load_checkpoint(path, &meta, r, err))
        return -1;
    r->data_skip = past - meta.step * batch;
    r->train_s.skip = r->data_skip;
    printf("rollback: back to %s (step %lld), skipping the %lld batches of steps %lld-%lld "
           "(data position now %lld)\n", path, (long long)meta.step,
           (long long)(bad - meta.step), (long long)meta.step + 1, (long long)bad,
           (long long)past);
    log_line(r, "rollback", bad, ",\"to_step\":%lld,\"batches_skipped\":%lld,"
             "\"data_pos\":%lld", (long long)meta.step, (long long)(bad - meta.step),
             (long long)past);
    return meta.step;
}

/* What to do about step `step` (0-based) whose figures are s: 0 go on, 1 rolled back
 * (*step is then the checkpoint's step - 1, for the loop's increment), 2 stop (err
 * says why), -1 failure. */
static int guard_step(const options *o, run *r, spike_guard *g, int64_t *step,
                      const pt_step_stats *s, pt_err *err)
{
    int64_t bad = *step + 1;
    bool finite = isfinite(s->loss) && isfinite(s->grad_norm);
    bool spike = finite && o->spike_action != SPIKE_OFF && spike_check(o, g, s);
    char kept[4200];
    if (finite && !spike) {
        spike_push(g, s);
        return 0;
    }
    if (spike) {
        printf("spike:  step %lld: loss %.4g (median %.4g of the last %lld steps, %.3gx), grad "
               "norm %.4g (median %.4g, %.3gx)\n", (long long)bad, s->loss, g->loss_median,
               (long long)g->n, s->loss / g->loss_median, s->grad_norm, g->gnorm_median,
               s->grad_norm / g->gnorm_median);
        log_line(r, "spike", bad, ",\"loss\":%.17g,\"grad_norm\":%.17g,\"median_loss\":%.17g,"
                 "\"median_grad_norm\":%.17g", s->loss, s->grad_norm, g->loss_median,
                 g->gnorm_median);
    }
    pt_ckpt_meta before;
    pt_err none;
    char path[4096];
    bool can_roll = o->spike_action == SPIKE_ROLLBACK && g->rollbacks < SPIKE_MAX_ROLLBACKS &&
                    o->ckpt && pt_ckpt_find(o->ckpt, r->config_hash, bad, path, sizeof path,
                                            &before, &none) == 0;
    if (can_roll) {
        if (!spike)
            printf("spike:  step %lld: the loss became %s (grad norm %g)\n", (long long)bad,
                   isnan(s->loss) ? "NaN" : !isfinite(s->loss) ? "infinite" : "finite",
                   s->grad_norm);
        g->rollbacks++;
        int64_t to = rollback(o, r, bad, err);
        if (to < 0)
            return -1;
        *step = to - 1;
        return 1;
    }
    kept_checkpoint(o, r, bad, kept, sizeof kept);
    if (!finite)
        pt_err_set(err, "the loss became %s at step %lld (grad norm %g): stopping; %s",
                   isnan(s->loss) ? "NaN" : !isfinite(s->loss) ? "infinite" : "finite",
                   (long long)bad, s->grad_norm, kept);
    else
        pt_err_set(err, "loss spike at step %lld: loss %.4g, %.3gx the median %.4g of the last "
                        "%lld steps (grad norm %.4g, median %.4g): stopping%s; %s",
                   (long long)bad, s->loss, s->loss / g->loss_median, g->loss_median,
                   (long long)g->n, s->grad_norm, g->gnorm_median,
                   g->rollbacks ? " after the most rollbacks allowed" : "", kept);
    return 2;
}

static int train(const options *o, run *r, pt_err *err)
{
    const pt_plan *p = &r->plan;
    double t0 = pt_trace_now();
    int keep = (int)o->keep_ckpt;
    spike_guard g;
    if (spike_init(&g, o->spike_window, err)) {
        spike_free(&g);
        return -1;
    }
    int rc = 0;
    for (int64_t step = r->start_step; step < p->run.steps && rc == 0; step++) {
        pt_step_stats s;
        pt_comm_set_context(r->comm, step + 1, "training"); /* for the watchdog's report */
        if (test_spike_hook(r, step, err) ||
            pt_engine_step(&r->net, &r->dist, &r->sched, r->has_data ? &r->train_s : NULL, p,
                           step, &s, err)) {
            rc = -1;
            break;
        }
        int guard = guard_step(o, r, &g, &step, &s, err);
        if (guard == 1)
            continue;
        if (guard) {
            rc = guard;
            break;
        }
        report_step(o, r, step, &s, pt_trace_now() - t0);
        r->steps_run++;
        if (step > r->start_step && keep_step_time(r, s.time_s, err)) /* not the warm-up */
            rc = -1;
        else if (o->val_every && (step + 1) % o->val_every == 0 && validate(o, r, step + 1, err))
            rc = -1;
        else if (o->ckpt && o->ckpt_every && (step + 1) % o->ckpt_every == 0 &&
                 save_checkpoint(o->ckpt, keep, r, step + 1, err))
            rc = -1;
        else if (o->stop_after && step + 1 == o->stop_after && step + 1 < p->run.steps) {
            if (o->ckpt && !(o->ckpt_every && (step + 1) % o->ckpt_every == 0) &&
                save_checkpoint(o->ckpt, keep, r, step + 1, err))
                rc = -1;
            else {
                printf("stopped after step %lld as asked%s\n", (long long)step + 1,
                       o->ckpt ? "; --resume continues" : "");
                rc = 3;
            }
        }
    }
    spike_free(&g);
    if (rc)
        return rc;
    double sumsq = pt_engine_param_sumsq(&r->net, &r->dist, err);
    if (sumsq < 0)
        return -1;
    log_line(r, "params", p->run.steps, ",\"sumsq\":%.17g", sumsq);
    bool just_validated = o->val_every && p->run.steps % o->val_every == 0;
    if (!just_validated && validate(o, r, p->run.steps, err))
        return -1;
    bool just_saved = o->ckpt_every && p->run.steps % o->ckpt_every == 0;
    if (o->ckpt && !just_saved && save_checkpoint(o->ckpt, keep, r, p->run.steps, err))
        return -1;
    return 0;
}

static void cleanup(run *r)
{
    pt_net_free(&r->net);
    pt_kernels_destroy(r->kn);
    pt_sched_free(&r->sched);
    pt_tokens_free(&r->all);
    pt_tokens_free(&r->train);
    pt_tokens_free(&r->val);
    pt_trace_free(&r->trace);
    free(r->step_s);
    if (r->log)
        fclose(r->log);
}

/* Each rank's model memory beside the planner's prediction for its stage (every rank
 * prints its own line on stderr when there are several; rank 0 on stdout). */
static void report_memory(run *r)
{
    pt_memory mem;
    pt_mem_stage(&r->plan.model, &r->plan.layout, &r->plan.train, r->stage, &mem);
    double mib = 1024.0 * 1024.0;
    char line[256];
    snprintf(line, sizeof line, "memory  rank %d (stage %d): %.2f MiB allocated by the model; "
             "planned %.2f MiB (without communication buffers %.2f)", r->rank, r->stage,
             (double)r->net.bytes / mib, mem.total_bytes / mib,
             (mem.total_bytes - mem.comm_bytes) / mib);
    if (r->rank == 0)
        printf("%s\n", line);
    else
        fprintf(stderr, "%s\n", line);
}

/* ---- Trace and record --------------------------------------------------------------------- */

/* This rank's memory: the planner's figure for its stage, what its model allocated on
 * the backend, and the process's peak resident set (Linux reports ru_maxrss in KiB). */
static pt_run_rank rank_memory(const run *r)
{
    pt_memory mem;
    struct rusage ru;
    pt_mem_stage(&r->plan.model, &r->plan.layout, &r->plan.train, r->stage, &mem);
    double rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : 0;
    return (pt_run_rank){.rank = r->rank, .stage = r->stage,
                         .predicted_memory_bytes = mem.total_bytes,
                         .measured_memory_bytes = (double)r->net.bytes, .peak_rss_bytes = rss};
}

/* The absolute form of path (as given when it cannot be resolved), for the record: a
 * report made elsewhere finds the files. */
static void absolute_path(const char *path, char *out, size_t cap)
{
    char cwd[4096];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd) ||
        snprintf(out, cap, "%s/%s", cwd, path) >= (int)cap)
        snprintf(out, cap, "%s", path);
}

/* Gathers every rank's spans and memory to rank 0 (collective: every rank calls it) and
 * merges them there onto rank 0's clock, after the second clock barrier. On rank 0
 * `merged` and `mem` (world entries) are filled; elsewhere they stay empty. */
static int gather_trace(const options *o, run *r, pt_trace *merged, pt_run_rank *mem,
                        pt_err *err)
{
    void *mine = NULL, *all = NULL;
    int64_t n = 0, *sizes = calloc((size_t)r->world, sizeof *sizes);
    pt_run_rank me = rank_memory(r);
    pt_trace_init(merged, false);
    if (!sizes)
        return pt_err_set(err, "out of memory");
    pt_comm_all_ok(r->comm, true);
    pt_trace_sync(&r->trace);
    int rc = pt_trace_pack(&r->trace, &me, &mine, &n, err);
    if (rc == 0)
        rc = pt_comm_gather_bytes(r->comm, mine, n, &all, sizes, err);
    if (rc == 0 && r->rank == 0 && (rc = pt_trace_merge(all, sizes, r->world, merged, mem, err)) == 0) {
        if (pt_trace_plan_id(o->plan, merged->plan_id, err))
            rc = -1;
        else
            absolute_path(o->plan, merged->plan_path, sizeof merged->plan_path);
    }
    free(mine);
    free(all);
    free(sizes);
    return rc;
}

/* The spans of the schedule's instructions in the last step: the measured timeline the
 * report draws beside the simulator's, which has the same instructions. The ops inside
 * them, collectives included, are summed up by op_stats instead: a layer's tensor-
 * parallel collectives alone grow with layers x micro-batches (tiny at tp = 2 with sp,
 * 4 layers and 8 micro-batches, ran 520 a step on each rank: bench/bench_storage.sh),
 * which would make this table grow with layers x micro-batches x ranks. *out malloc'd
 * (NULL when none). */
static int last_step_spans(const pt_trace *t, pt_span **out, size_t *n, pt_err *err)
{
    int last = -1;
    *out = NULL;
    *n = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].step > last)
            last = t->v[i].step;
    for (size_t i = 0; i < t->n; i++)
        *n += t->v[i].step == last && !pt_span_is_op(&t->v[i]);
    if (*n && !(*out = malloc(*n * sizeof **out)))
        return pt_err_set(err, "out of memory for %zu spans", *n);
    size_t k = 0;
    for (size_t i = 0; i < t->n && *out; i++)
        if (t->v[i].step == last && !pt_span_is_op(&t->v[i]))
            (*out)[k++] = t->v[i];
    return 0;
}

/* The load check: whether this run's GEMMs ran as fast as the profile says they do.
 * Fills rec's gemm_ratio and, when they ran slower than PT_NOISY_GEMM_RATIO, rec->noisy. */
static void load_check(const pt_op_sample *smp, size_t n, const char *path, const pt_plan *p,
                       pt_run_record *rec)
{
    pt_costdb *profile;
    pt_cost_hw hw;
    pt_cluster c = p->cluster;
    int keys = 0;
    if (pt_costdb_open(path, PT_COSTDB_READ | PT_COSTDB_PROFILE_ONLY, &profile, NULL))
        return;
    pt_cluster_apply_profile(&c, profile);
    pt_cost_hw_of(&c, &hw);
    rec->gemm_ratio = pt_gemm_ratio(smp, n, profile, &hw, &keys);
    pt_costdb_close(profile);
    double excess = pt_span_excess(smp, n);
    if (excess > PT_NOISY_EXCESS)
        snprintf(rec->noisy, sizeof rec->noisy,
                 "its ops took %.2fx what their medians account for (pre-empted: more than "
                 "%.2fx means the machine was busy)", excess, PT_NOISY_EXCESS);
    else if (rec->gemm_ratio > PT_NOISY_GEMM_RATIO)
        snprintf(rec->noisy, sizeof rec->noisy,
                 "its GEMMs took %.2fx the profiled time (median of %d shapes; more than "
                 "%.2fx means the machine was busier than when it was profiled)",
                 rec->gemm_ratio, keys, PT_NOISY_GEMM_RATIO);
}

/* The cost database of --record: --db, else the default (created with its folder). */
static void db_path(const options *o, char *path, size_t n)
{
    if (o->db)
        snprintf(path, n, "%s", o->db);
    else
        pt_cli_default_db(path, n, true);
}

/* Appends the run, its ranks' memory, its per-op statistics and its last step's
 * schedule to the cost table and, unless the load check finds it noisy, its op timings
 * as kernel samples (source trace) under its id. */
static int record_run(const options *o, run *r, const pt_trace *merged, const pt_run_rank *mem,
                      pt_err *err)
{
    if (r->timed_steps == 0)
        return pt_err_set(err, "--record needs at least two steps to time");
    const pt_plan *p = &r->plan;
    double *d = malloc((size_t)r->timed_steps * sizeof *d);
    if (!d)
        return pt_err_set(err, "out of memory");
    pt_robust steps;
    memcpy(d, r->step_s, (size_t)r->timed_steps * sizeof *d);
    pt_robust_of(d, (size_t)r->timed_steps, &steps);
    free(d);
    /* the median step, and the MFU of that step: one pre-empted step moves neither */
    pt_run_record rec = {.world = r->world, .steps = r->steps_run,
                         .steps_timed = r->timed_steps,
                         .predicted_step_s = p->predicted.step_time_s,
                         .measured_step_s = steps.median_s,
                         .predicted_mfu = p->predicted.mfu,
                         .measured_mfu = r->peak_flops > 0
                                             ? r->model_flops / (steps.median_s * r->peak_flops)
                                             : 0,
                         .predicted_memory_bytes = p->memory.total_bytes};
    for (int i = 0; i < r->world; i++) /* the largest rank, as the plan predicts it */
        if (mem[i].measured_memory_bytes > rec.measured_memory_bytes)
            rec.measured_memory_bytes = mem[i].measured_memory_bytes;
    gethostname(rec.host, sizeof rec.host - 1);
    snprintf(rec.git_revision, sizeof rec.git_revision, "%s", PT_GIT_REVISION);
    snprintf(rec.model, sizeof rec.model, "%s", p->model.name);
    snprintf(rec.cluster, sizeof rec.cluster, "%s", p->cluster.name);
    pt_layout_format(&p->layout, rec.layout, sizeof rec.layout);
    snprintf(rec.plan_id, sizeof rec.plan_id, "%s", merged->plan_id);
    snprintf(rec.plan_path, sizeof rec.plan_path, "%s", merged->plan_path);
    if (o->log)
        absolute_path(o->log, rec.log_path, sizeof rec.log_path);
    if (o->trace)
        absolute_path(o->trace, rec.trace_path, sizeof rec.trace_path);
    char path[512];
    db_path(o, path, sizeof path);
    pt_costdb *db = NULL;
    pt_op_stat *stats = NULL;
    pt_op_sample *smp = NULL;
    size_t n_stats = 0, n_smp = 0;
    int64_t ops = 0, id = 0;
    if (r->log)
        fflush(r->log);
    pt_cost_hw hw;
    pt_cluster c = p->cluster;
    int rc = pt_costdb_open(path, PT_COSTDB_CREATE, &db, err);
    if (rc == 0) {
        pt_cluster_apply_profile(&c, db);
        pt_cost_hw_of(&c, &hw);
        rc = pt_trace_op_stats(merged, &stats, &n_stats, err) ||
                     pt_op_samples(stats, n_stats, &smp, &n_smp, err)
                 ? -1
                 : 0;
    }
    if (rc == 0)
        load_check(smp, n_smp, path, p, &rec);
    pt_span *spans = NULL;
    size_t n_spans = 0;
    if (rc == 0)
        rc = last_step_spans(merged, &spans, &n_spans, err);
    /* the run and its samples in one transaction: a failure (a full disk) leaves neither */
    if (rc == 0)
        rc = pt_costdb_begin(db, err);
    if (rc == 0)
        rc = pt_costdb_record_run(db, &rec, mem, r->world, stats, n_stats, spans, n_spans,
                                  &id, err);
    free(spans);
    if (rc == 0 && !rec.noisy[0])
        rc = pt_costdb_put_run_samples(db, hw.device, id, smp, n_smp, &ops, err);
    if (rc == 0)
        rc = pt_costdb_commit(db, err);
    else
        pt_costdb_rollback(db, NULL);
    pt_costdb_close(db);
    free(stats);
    free(smp);
    if (rc)
        return rc;
    printf("recorded in %s: run %lld (%.4g s/step measured, the median of %lld steps; %.4g "
           "predicted), %d ranks' memory, %zu op statistics, %zu spans of the last step\n",
           path, (long long)id, rec.measured_step_s, (long long)rec.steps_timed,
           rec.predicted_step_s, r->world, n_stats, n_spans);
    if (rec.noisy[0])
        printf("noisy:  run %lld is not calibrated into the tables: %s; its statistics are "
               "kept (ptcalib --run %lld --force uses them anyway)\n", (long long)id,
               rec.noisy, (long long)id);
    else
        printf("        %lld op timings stored as cost samples of run %lld (GEMMs at %.2fx "
               "the profiled time; ptcalib --forget %lld removes them)\n", (long long)ops,
               (long long)id, rec.gemm_ratio, (long long)id);
    return 0;
}

/* Merges the ranks' traces on rank 0, writes it as one Chrome trace (--trace) and
 * records the run (--record). Collective. */
static int trace_and_record(const options *o, run *r, pt_err *err)
{
    pt_trace merged;
    pt_run_rank *mem = calloc((size_t)r->world, sizeof *mem);
    int rc = mem ? gather_trace(o, r, &merged, mem, err) : pt_err_set(err, "out of memory");
    if (rc == 0 && r->rank == 0 && o->record)
        rc = record_run(o, r, &merged, mem, err);
    if (rc == 0 && r->rank == 0 && o->trace) {
        pt_trace_keep_steps(&merged, o->trace_steps); /* after the record's statistics */
        rc = pt_trace_write_chrome(&merged, o->trace, err);
    }
    pt_trace_free(&merged);
    free(mem);
    return rc;
}

/* Whether one rank holds the whole model and runs it alone (no pipeline stages, no
 * collectives inside a layer, no ZeRO-3 gathers): what generating a sample on rank 0
 * needs. */
static bool whole_model_here(const pt_layout *l)
{
    return l->pp == 1 && l->tp == 1 && l->cp == 1 && l->zero < 3;
}

/* The log's first line, and again where a resumed run appends to it: what ran (the plan
 * file and its identity, layout, model, cluster, ranks, steps) and which build ran it. */
static int log_header(const options *o, run *r, pt_err *err)
{
    const pt_plan *p = &r->plan;
    char id[17], path[4096], layout[256], version[64];
    if (pt_trace_plan_id(o->plan, id, err))
        return -1;
    absolute_path(o->plan, path, sizeof path);
    pt_layout_format(&p->layout, layout, sizeof layout);
    /* the build, in the words of ptplan --version */
    snprintf(version, sizeof version, "ptrun %s (CUDA backend: %s)", PT_VERSION,
             PT_HAVE_CUDA ? "yes" : "no");
    FILE *f = log_begin(r, "header", -1);
    log_string(f, "plan", path);
    log_string(f, "plan_id", id);
    log_string(f, "plan_created_by", p->created_by);
    log_string(f, "layout", layout);
    log_string(f, "model", p->model.name);
    log_string(f, "cluster", p->cluster.name);
    fprintf(f, ",\"world\":%d,\"steps\":%lld", r->world, (long long)p->run.steps);
    log_string(f, "version", version);
    log_string(f, "git_revision", PT_GIT_REVISION);
    if (o->resume)
        fprintf(f, ",\"resumed_from_step\":%lld", (long long)r->start_step);
    log_end(r, f);
    return log_check(o, r, err); /* an unwritable log is found before training */
}

/* The outputs of the end of the run, checked before training so that an unwritable
 * trace or cost database is found in the first second, not after the last step. */
static int outputs_writable(const options *o, run *r, pt_err *err)
{
    if (r->rank != 0)
        return 0;
    pt_err why;
    if (o->trace && pt_path_writable(o->trace, &why))
        return pt_err_set(err, "--trace '%s' cannot be written (%s)", o->trace, why.msg);
    if (!o->record)
        return 0;
    char path[512];
    db_path(o, path, sizeof path);
    pt_costdb *db = NULL;
    int rc = pt_costdb_open(path, PT_COSTDB_CREATE, &db, err);
    pt_costdb_close(db);
    return rc;
}

static int go(const options *o, run *r, pt_err *err)
{
    if (pt_plan_read(o->plan, &r->plan, err) || check_plan(o, r, err) || place(r, err))
        return 1;
    /* a checkpoint that cannot be written, or would replace what is not ours, is
     * refused now, not after training */
    if (o->ckpt && r->rank == 0 && pt_ckpt_check_target(o->ckpt, (int)o->keep_ckpt, err))
        return 1;
    char layout[256];
    pt_layout_format(&r->plan.layout, layout, sizeof layout);
    printf("plan    %s: %s on %s, %s\n", o->plan, r->plan.model.name, r->plan.cluster.name, layout);
    if ((r->has_data && load_data(r, err)) || build(o, r, err))
        return 1;
    if (o->resume && resume(o->resume, r, err))
        return 1;
    if (o->log && !(r->log = fopen(o->log, r->start_step ? "a" : "w"))) {
        pt_err_set(err, "cannot write '%s': %s", o->log, strerror(errno));
        return 1;
    }
    if (r->log) {
        setvbuf(r->log, NULL, _IOLBF, 0); /* a line at a time: the log can be followed live */
        if (log_header(o, r, err))
            return 1;
    }
    if (outputs_writable(o, r, err))
        return 1;
    report_memory(r);
    printf("train   %lld steps of %lld sequences of %lld tokens, predicted %.3g s/step\n",
           (long long)r->plan.run.steps, (long long)r->plan.train.global_batch,
           (long long)r->plan.model.seq, r->plan.predicted.step_time_s);
    int rc = train(o, r, err);
    if ((rc == 0 || rc == 3) && log_check(o, r, err))
        return 1;
    if (rc == 3) /* --stop-after: an interruption on purpose */
        return 0;
    if (rc)
        return rc < 0 ? 1 : rc;
    if ((o->record || o->trace) && trace_and_record(o, r, err))
        return 1;
    /* the whole model is on every rank only without pipelining; rank 0 writes */
    if (o->sample && whole_model_here(&r->plan.layout) && r->rank == 0 &&
        sample_text(r, o->sample, err))
        return 1;
    return 0;
}

int main(int argc, char **argv)
{
    /* a line at a time, also into a file or pipe: a long run's progress shows as it
     * happens and survives the run being killed */
    setvbuf(stdout, NULL, _IOLBF, 0);
    run r;
    memset(&r, 0, sizeof r);
    pt_err err = {""};
    if (pt_comm_init(&argc, &argv, &r.comm, &err)) {
        fprintf(stderr, "ptrun: %s\n", err.msg);
        return 1;
    }
    r.rank = pt_comm_rank(r.comm);
    r.world = pt_comm_size(r.comm);
    options o;
    if (parse_options(argc, argv, &o)) {
        pt_comm_finalize(r.comm);
        return 1;
    }
    if (r.rank != 0 && !freopen("/dev/null", "w", stdout)) /* rank 0 speaks for the run */
        fprintf(stderr, "ptrun: rank %d: cannot silence stdout\n", r.rank);
    if (r.rank != 0)
        o.log = NULL;
    if (o.comm_timeout_s >= 0)
        pt_comm_set_timeout(r.comm, o.comm_timeout_s);
    int rc = go(&o, &r, &err);
    if (rc && r.world > 1)
        pt_comm_abort(r.comm, err.msg); /* takes every rank down, none hangs */
    if (rc)
        fprintf(stderr, "ptrun: %s\n", err.msg);
    cleanup(&r);
    pt_comm_finalize(r.comm);
    return rc;
}
