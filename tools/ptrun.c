/*
 * ptrun — trains what a plan.json describes. The training itself is the runtime's
 * trainer (runtime/trainer.h: the plan's checks, the rank grid, data, model, steps
 * under the loss-spike guard, validation, checkpoints, sampling, the log, trace and
 * record); this file parses the options, calls the trainer in order and prints what
 * each call returns: one line (or none, --quiet) per step, validation losses, spikes
 * and rollbacks, a sample of generated text at the end (in any layout: rank 0 gathers
 * a split model to draw it), and the record. Under mpirun
 * rank 0 speaks for the run, and a rank that fails ends every rank with its reason.
 * Exit code: 0 done, 1 bad input or failure, 2 the loss diverged (NaN or Inf, or a
 * spike under --spike-action stop), 75 stopped by SIGTERM, SIGINT or SIGUSR1 after
 * finishing its step (and writing a checkpoint when --checkpoint is given): run again
 * with --resume to continue (75 is EX_TEMPFAIL of sysexits.h, "the user is invited to
 * retry"). Under mpirun every rank ends with the same code (a failing rank ends the
 * others with MPI_Abort of its code), and Open MPI's mpirun exits with it; but mpirun
 * that is itself sent SIGTERM or SIGINT exits 1 whatever its ranks do (it kills them a
 * second later), while SIGUSR1 it forwards to every rank and exits 75 with them. A
 * signal before the first step ends the process at once, as it would any program:
 * nothing is lost then, and a start stuck on a bad input can be stopped.
 */
#include "runtime.h"
#include "ptconfig.h"
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: ptrun PLAN.json [options]\n"
    "\n"
    "Trains the model of a plan written by ptplan, with its layout and settings;\n"
    "a plan for N ranks runs as: mpirun -np N ptrun PLAN.json\n"
    "\n"
    "  --data FILE          token file (llm.c format) or plain text; overrides the plan\n"
    "                       [the plan's, else " PT_TRAINER_DEFAULT_CORPUS "]\n"
    "  --val-data FILE      validation data (token file or text), e.g. pttokenize's\n"
    "                       PREFIX_val.bin; --data is then trained on whole [the last\n"
    "                       10% of --data]\n"
    "  --tokenizer PATH     BPE tokenizer that encodes text data and decodes the sample:\n"
    "                       a folder with GPT-2's vocab.json and merges.txt, a\n"
    "                       tokenizer.json, or a tiktoken file (Llama 3's\n"
    "                       tokenizer.model) [byte-level]\n"
    "  --steps N            optimizer steps [the plan's]\n"
    "  --val-every N        validation loss every N steps [25; 0 = only at the end]\n"
    "  --val-batches N      micro-batches per validation [8]\n"
    "  --checkpoint DIR     write checkpoints into DIR, one folder per step\n"
    "                       (DIR/step_00000050: whole tensors in safetensors files that\n"
    "                       any layout reads; DIR/latest_checkpointed_iteration.txt names\n"
    "                       the newest), every --checkpoint-every steps, at the end and\n"
    "                       on SIGTERM/SIGINT\n"
    "  --checkpoint-every N [0 = only at the end]\n"
    "  --keep K             keep the K newest step folders [2] (--keep-checkpoints)\n"
    "  --resume DIR         continue from a checkpoint: DIR is a step folder, or a\n"
    "                       --checkpoint folder whose newest complete step is taken. Any\n"
    "                       layout, ZeRO stage, micro-batch or world size may have\n"
    "                       written it; the model, seed and data must be its own, other\n"
    "                       settings (--steps, lr, ...) may change and are listed\n"
    "  --init-from DIR      start from the weights alone (optimizer afresh, step 0): a\n"
    "                       checkpoint of ours, or a Hugging Face GPT-2, LLaMA, Qwen3,\n"
    "                       Mixtral or Qwen3-MoE folder (config.json and *.safetensors)\n"
    "                       whose sizes match the plan's\n"
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
    "  --log FILE           JSON lines, flushed as written: a header (plan and its hash,\n"
    "                       model and its size, layout, batch, versions), then one per\n"
    "                       step and validation, each with its time (ISO 8601 UTC and\n"
    "                       Unix seconds), tokens seen, allocated and peak RSS bytes\n"
    "  --trace FILE         Chrome trace of every instruction and op of every rank, on one\n"
    "                       clock (Perfetto)\n"
    "  --trace-steps K      only the last K steps in the --trace file [all]\n"
    "  --sample N           generate N tokens at the end and print them decoded as\n"
    "                       'sample: TEXT' [64; 0 = none]; under tp, pp, cp or ZeRO-3\n"
    "                       every rank sends its part of the weights to rank 0, which\n"
    "                       builds the whole model on its own (room for it needed) to\n"
    "                       draw them\n"
    "  --stop-after N       stop (with a checkpoint, when asked for) after step N, as an\n"
    "                       interruption would; --resume continues the same run\n"
    "  --dropout P          dropout probability on the embedding and residual branches\n"
    "                       [the plan's training.dropout]\n"
    "  --threads N          BLAS threads of this rank [1]\n"
    "  --comm-timeout S     a rank that waits S seconds in one collective or transfer\n"
    "                       (a stalled or dead peer) reports it and ends the run\n"
    "                       [$PT_COMM_TIMEOUT, else 300; 0 = wait for ever]\n"
    "  --start-timeout S    the same for MPI's start (MPI_Init and the first collective)\n"
    "                       [300; 0 = wait for ever]\n"
    "  --quiet              no per-step lines\n"
    "  --record             append this run to the cost table: predicted against measured\n"
    "                       step time, MFU and each rank's memory, per-op statistics of\n"
    "                       every rank, the last step's schedule, and (unless its GEMMs\n"
    "                       ran slower than profiled: a busy machine) its op timings as\n"
    "                       cost samples that ptcalib --forget RUN removes again\n"
    "  --db FILE            the cost table for --record [$PT_COSTS_DB, else\n"
    "                       ~/.local/share/ptplan/costs.db]\n"
    "  -h, --help           this text\n"
    "\n"
    "Exit status: 0 done (or stopped by --stop-after); 1 bad input or failure; 2 the\n"
    "loss diverged (NaN/Inf, or a spike under --spike-action stop); 75 stopped by\n"
    "SIGTERM, SIGINT or SIGUSR1 after a whole step (with a checkpoint under\n"
    "--checkpoint): --resume continues. mpirun exits with its ranks' status, except\n"
    "when mpirun itself gets SIGTERM or SIGINT (1): send it SIGUSR1 to stop with 75.\n";

typedef struct {
    const char *plan, *data, *ckpt, *resume, *init_from, *log, *trace, *db;
    const char *val_data, *tokenizer;
    pt_tokenizer *tk;         /* --tokenizer, loaded by main (which frees it) */
    bool record;
    int64_t steps, val_every, val_batches, ckpt_every, sample, threads, stop_after;
    int64_t trace_steps;      /* 0: every step */
    double dropout;           /* < 0: the plan's */
    double comm_timeout_s;    /* < 0: PT_COMM_TIMEOUT's or the default */
    double start_timeout_s;    /* < 0: the default */
    int64_t keep_ckpt;        /* checkpoints kept: DIR, DIR.1, ... */
    int64_t spike_window;     /* steps whose median a spike is measured against */
    double spike_factor, spike_grad_factor; /* over the medians of loss, gradient norm */
    int spike_action;         /* pt_spike_action, -1 when unknown */
    bool quiet;
} options;

static int parse_options(int argc, char **argv, options *o)
{
    enum { O_DATA = 256, O_STEPS, O_VAL, O_VALB, O_CKPT, O_CKPTE, O_RESUME, O_LOG, O_TRACE,
           O_SAMPLE, O_THREADS, O_QUIET, O_STOP, O_RECORD, O_DB, O_DROPOUT, O_TRACE_STEPS,
           O_COMM_TIMEOUT, O_START_TIMEOUT };
    enum { O_KEEP = 512, O_SPIKE_WINDOW, O_SPIKE_FACTOR, O_SPIKE_GFACTOR, O_SPIKE_ACTION,
           O_INIT_FROM };
    enum { O_VAL_DATA = 768, O_TOKENIZER };
    static const struct option longopts[] = {
        {"data", 1, 0, O_DATA}, {"steps", 1, 0, O_STEPS}, {"val-every", 1, 0, O_VAL},
        {"val-batches", 1, 0, O_VALB}, {"checkpoint", 1, 0, O_CKPT},
        {"checkpoint-every", 1, 0, O_CKPTE}, {"resume", 1, 0, O_RESUME}, {"log", 1, 0, O_LOG},
        {"trace", 1, 0, O_TRACE}, {"sample", 1, 0, O_SAMPLE}, {"threads", 1, 0, O_THREADS},
        {"quiet", 0, 0, O_QUIET}, {"stop-after", 1, 0, O_STOP}, {"help", 0, 0, 'h'},
        {"trace-steps", 1, 0, O_TRACE_STEPS}, {"record", 0, 0, O_RECORD}, {"db", 1, 0, O_DB}, {"dropout", 1, 0, O_DROPOUT},
        {"comm-timeout", 1, 0, O_COMM_TIMEOUT}, {"start-timeout", 1, 0, O_START_TIMEOUT},
        {"keep-checkpoints", 1, 0, O_KEEP}, {"keep", 1, 0, O_KEEP},
        {"init-from", 1, 0, O_INIT_FROM}, {"spike-window", 1, 0, O_SPIKE_WINDOW},
        {"spike-factor", 1, 0, O_SPIKE_FACTOR}, {"spike-grad-factor", 1, 0, O_SPIKE_GFACTOR},
        {"spike-action", 1, 0, O_SPIKE_ACTION},
        {"val-data", 1, 0, O_VAL_DATA}, {"tokenizer", 1, 0, O_TOKENIZER},
        {0, 0, 0, 0}};
    pt_trainer_opts d; /* the trainer's defaults (runtime/trainer.c) */
    pt_trainer_opts_default(&d);
    *o = (options){.val_every = 25, .sample = 64, .val_batches = d.val_batches,
                   .threads = d.threads, .dropout = d.dropout, .comm_timeout_s = -1, .start_timeout_s = -1,
                   .keep_ckpt = d.keep_ckpt, .spike_window = d.spike_window,
                   .spike_factor = d.spike_factor, .spike_grad_factor = d.spike_grad_factor,
                   .spike_action = (int)d.spike_action};
    opterr = 0;
    int c, bad = 0;
    while (!bad && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_DATA: o->data = optarg; break;
        case O_VAL_DATA: o->val_data = optarg; break;
        case O_TOKENIZER: o->tokenizer = optarg; break;
        case O_STEPS: bad = pt_cli_int("ptrun", "--steps", optarg, 1, PT_MAX_STEPS, &o->steps); break;
        case O_VAL: bad = pt_cli_int("ptrun", "--val-every", optarg, 0, 1LL << 40, &o->val_every); break;
        case O_VALB: bad = pt_cli_int("ptrun", "--val-batches", optarg, 1, 1 << 20, &o->val_batches);
            break;
        case O_CKPT: o->ckpt = optarg; break;
        case O_CKPTE: bad = pt_cli_int("ptrun", "--checkpoint-every", optarg, 0, 1LL << 40, &o->ckpt_every);
            break;
        case O_RESUME: o->resume = optarg; break;
        case O_INIT_FROM: o->init_from = optarg; break;
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
        case O_DROPOUT: bad = pt_cli_real("ptrun", "--dropout", optarg, 0, PT_MAX_DROPOUT, &o->dropout); break;
        case O_COMM_TIMEOUT:
            bad = pt_cli_real("ptrun", "--comm-timeout", optarg, 0, 1e9, &o->comm_timeout_s);
            break;
        case O_START_TIMEOUT:
            bad = pt_cli_real("ptrun", "--start-timeout", optarg, 0, 1e9, &o->start_timeout_s);
            break;
        case O_STOP: bad = pt_cli_int("ptrun", "--stop-after", optarg, 1, PT_MAX_STEPS, &o->stop_after); break;
        case O_KEEP: bad = pt_cli_int("ptrun", "--keep", optarg, 1, 1000000, &o->keep_ckpt); break;
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
            o->spike_action = strcmp(optarg, "stop") == 0       ? PT_SPIKE_STOP
                              : strcmp(optarg, "rollback") == 0 ? PT_SPIKE_ROLLBACK
                              : strcmp(optarg, "off") == 0      ? PT_SPIKE_OFF
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
    if (o->resume && o->init_from) {
        fprintf(stderr, "ptrun: --resume and --init-from: one or the other (--resume continues "
                        "a run with its optimizer state, --init-from takes weights alone)\n");
        return -1;
    }
    if (optind != argc - 1) {
        fprintf(stderr, optind < argc ? "ptrun: one plan file, please (see ptrun --help)\n"
                                      : "ptrun: which plan? usage: ptrun PLAN.json [options]\n");
        return -1;
    }
    o->plan = argv[optind];
    return 0;
}

/* ---- Calling the trainer ---------------------------------------------------------------- */

/* The trainer's settings from the options (db and version: buffers they point into). */
static void trainer_opts(const options *o, int rank, char *db, size_t n_db, char *version,
                         size_t n_version, pt_trainer_opts *t)
{
    pt_trainer_opts_default(t);
    t->plan = o->plan;
    t->data = o->data;
    t->val_data = o->val_data;
    t->tokenizer = o->tk;
    t->steps = o->steps;
    t->dropout = o->dropout;
    t->threads = (int)o->threads;
    t->ckpt = o->ckpt;
    t->keep_ckpt = (int)o->keep_ckpt;
    t->log = o->log;
    t->resuming = o->resume != NULL;
    t->trace = o->trace;
    t->trace_steps = o->trace_steps;
    t->val_batches = o->val_batches;
    t->spike_window = o->spike_window;
    t->spike_factor = o->spike_factor;
    t->spike_grad_factor = o->spike_grad_factor;
    t->spike_action = (pt_spike_action)o->spike_action;
    t->kernel_note = pt_cli_note;
    t->kernel_note_arg = PT_CLI_KERNEL_NOTES;
    /* the build, in the words of ptplan --version */
    snprintf(version, n_version, "ptrun %s (CUDA backend: %s)", PT_VERSION,
             PT_CUDA_BACKEND_STATE);
    t->version = version;
    t->git_revision = PT_GIT_REVISION;
    if (o->record) { /* --db, else the default (rank 0 makes its folder) */
        if (o->db)
            snprintf(db, n_db, "%s", o->db);
        else
            pt_cli_default_db(db, n_db, rank == 0);
        t->record_db = db;
    }
}

/* FP8's warnings, each the first time it happens on this rank (whose figures are its
 * own layers'; "rank R:" says which where there are several): values saturated (a scale
 * too large for the tensor: delayed scaling's history lagging a growing tensor), and
 * more than PT_FP8_UNDERFLOW_WARN of them flushed to zero (a scale too small for its
 * small values). The log's fp8_* fields have every step's counts. */
#define PT_FP8_UNDERFLOW_WARN 0.01
static void report_fp8(const pt_trainer_step_result *s, pt_comm *comm)
{
    char who[32] = "";
    if (pt_comm_size(comm) > 1)
        snprintf(who, sizeof who, "rank %d: ", pt_comm_rank(comm));
    static bool said_over, said_under;
    if (!s->fp8 || s->fp8_elems <= 0)
        return;
    double under = s->fp8_underflow / (double)s->fp8_elems;
    if (s->fp8_overflow > 0 && !said_over) {
        said_over = true;
        fprintf(stderr, "ptrun: warning: %sstep %lld: %.0f of %lld FP8 values saturated "
                "(scales %.3g to %.3g); said once, the log's fp8_overflow counts each step\n",
                who, (long long)s->step, s->fp8_overflow, (long long)s->fp8_elems,
                s->fp8_scale_min, s->fp8_scale_max);
    }
    if (under > PT_FP8_UNDERFLOW_WARN && !said_under) {
        said_under = true;
        fprintf(stderr, "ptrun: warning: %sstep %lld: %.1f %% of %lld FP8 values flushed to "
                "zero (scales %.3g to %.3g); said once, the log's fp8_underflow counts each "
                "step\n", who, (long long)s->step, 100 * under, (long long)s->fp8_elems, s->fp8_scale_min,
                s->fp8_scale_max);
    }
}

static void report_step(const options *o, const pt_plan *p, const pt_trainer_step_result *s)
{
    if (o->quiet)
        return;
    printf("step %5lld/%lld  loss %.4f  lr %.3e  grad norm %.3f  %.0f tok/s", (long long)s->step,
           (long long)p->run.steps, s->stats.loss, s->stats.lr, s->stats.grad_norm,
           s->tokens_per_s);
    if (s->mfu > 0)
        printf("  MFU %.1f%%", 100 * s->mfu);
    if (p->model.moe.experts > 0) { /* the routers: their loss, balance and drops */
        printf("  aux %.4f  imbalance %.2f", s->stats.moe_aux,
               p->layout.ep > 1 ? s->stats.moe_imbalance : s->stats.moe_expert_max);
        if (s->stats.moe_dropped > 0)
            printf("  dropped %.2f%%", 100 * s->stats.moe_dropped);
    }
    printf("  ETA %d:%02d\n", (int)s->eta_s / 60, (int)s->eta_s % 60);
    fflush(stdout);
}

/* "NaN", "infinite" or "finite": what x is. */
static const char *finiteness(double x)
{
    return isnan(x) ? "NaN" : isinf(x) ? "infinite" : "finite";
}

/* What the loss-spike guard did about a step (rc: pt_trainer_step's). */
static void report_guard(const pt_trainer_step_result *s, int rc)
{
    const pt_step_stats *st = &s->stats;
    if (s->spike)
        printf("spike:  step %lld: loss %.4g (median %.4g of the last %lld steps, %.3gx), grad "
               "norm %.4g (median %.4g, %.3gx)\n", (long long)s->step, st->loss, s->median_loss,
               (long long)s->window, st->loss / s->median_loss, st->grad_norm,
               s->median_grad_norm, st->grad_norm / s->median_grad_norm);
    else if (s->nonfinite && (rc == 1 || rc < 0) && !isfinite(st->loss)) /* a rollback tried */
        printf("spike:  step %lld: the loss became %s (grad norm %g)\n", (long long)s->step,
               finiteness(st->loss), st->grad_norm);
    else if (s->nonfinite && (rc == 1 || rc < 0)) /* the loss finite, its gradient not */
        printf("spike:  step %lld: the gradient norm became %s (loss %.4g)\n",
               (long long)s->step, finiteness(st->grad_norm), st->loss);
    if (s->rolled_back)
        printf("rollback: back to %s (step %lld), skipping the %lld batches of steps %lld-%lld "
               "(data position now %lld)\n", s->rollback_path, (long long)s->rollback_to,
               (long long)(s->step - s->rollback_to), (long long)s->rollback_to + 1,
               (long long)s->step, (long long)s->rollback_data_pos);
}

static int validate(pt_trainer *t, int64_t step, pt_err *err)
{
    double loss;
    if (pt_trainer_evaluate(t, step, &loss, err))
        return -1;
    printf("step %5lld  validation loss %.4f\n", (long long)step, loss);
    return 0;
}

/* The signal that asked the run to stop (SIGTERM, SIGINT, SIGUSR1), 0 while none has. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
    signal(sig, SIG_DFL); /* a second one ends the process at once */
}

/* From the first step on, SIGTERM (a scheduler's preemption, kill), SIGINT (Ctrl-C)
 * and SIGUSR1 (what mpirun forwards to every rank without ending them: it kills its
 * ranks a second after a SIGTERM or SIGINT of its own) let the step finish. Before,
 * each keeps its default action and ends the process at once: opening, resuming or
 * loading weights has nothing to keep, and may be stuck on a bad input. */
static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

static const char *signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
}

/* Writes a checkpoint of step and says where. Collective. */
static int save(pt_trainer *t, int64_t step, pt_err *err)
{
    if (pt_trainer_save(t, step, err))
        return -1;
    printf("checkpoint step %lld written: %s\n", (long long)step, pt_trainer_saved_path(t));
    return 0;
}

/* The steps, validation and checkpoints of the run: 0 done, 2 stopped by the loss-spike
 * guard (err says why), 3 stopped by --stop-after, 4 stopped by a signal, -1 failure.
 * Collective. */
static int train(const options *o, pt_trainer *t, pt_comm *comm, pt_err *err)
{
    const pt_plan *p = pt_trainer_plan(t);
    int64_t steps = p->run.steps;
    catch_stop_signals();
    while (pt_trainer_next_step(t) < steps) {
        pt_trainer_step_result s;
        int rc = pt_trainer_step(t, &s, err);
        report_guard(&s, rc);
        if (rc == 1) /* rolled back: on from the checkpoint's step */
            continue;
        if (rc)
            return rc;
        report_fp8(&s, comm);
        report_step(o, p, &s);
        int64_t step = s.step;
        bool saved = o->ckpt && o->ckpt_every && step % o->ckpt_every == 0;
        if (o->val_every && step % o->val_every == 0 && validate(t, step, err))
            return -1;
        if (saved && save(t, step, err))
            return -1;
        /* a signal to any rank stops every rank after the same step */
        if (!pt_comm_all_ok(comm, stop_signal == 0) && step < steps) {
            if (o->ckpt && !saved && save(t, step, err))
                return -1;
            printf("interrupted after step %lld (%s)%s\n", (long long)step,
                   stop_signal ? signal_name(stop_signal) : "another rank was signalled",
                   o->ckpt ? "; --resume continues" : "; no --checkpoint, so nothing was "
                   "saved");
            return 4;
        }
        if (o->stop_after && step == o->stop_after && step < steps) {
            if (o->ckpt && !saved && save(t, step, err))
                return -1;
            printf("stopped after step %lld as asked%s\n", (long long)step,
                   o->ckpt ? "; --resume continues" : "");
            return 3;
        }
    }
    double sumsq;
    if (pt_trainer_fingerprint(t, &sumsq, err))
        return -1;
    bool just_validated = o->val_every && steps % o->val_every == 0;
    if (!just_validated && validate(t, steps, err))
        return -1;
    bool just_saved = o->ckpt_every && steps % o->ckpt_every == 0;
    if (o->ckpt && !just_saved && save(t, steps, err))
        return -1;
    return 0;
}

/* Each rank's model memory beside the planner's prediction for its stage (every rank
 * prints its own line on stderr when there are several; rank 0 on stdout). */
static void report_memory(const pt_trainer *t)
{
    pt_trainer_memory m;
    pt_trainer_memory_of(t, &m);
    double mib = 1024.0 * 1024.0;
    char line[256];
    snprintf(line, sizeof line, "memory  rank %d (stage %d): %.2f MiB allocated by the model; "
             "planned %.2f MiB (without communication buffers %.2f)", m.rank, m.stage,
             m.allocated_bytes / mib, m.planned_bytes / mib,
             (m.planned_bytes - m.planned_comm_bytes) / mib);
    if (m.rank == 0)
        printf("%s\n", line);
    else
        fprintf(stderr, "%s\n", line);
}

static void report_record(const pt_trainer_record *r)
{
    printf("recorded in %s: run %lld (%.4g s/step measured, the median of %lld steps; %.4g "
           "predicted), %d ranks' memory, %zu op statistics, %zu spans of the last step\n",
           r->db, (long long)r->run_id, r->measured_step_s, (long long)r->steps_timed,
           r->predicted_step_s, r->world, r->n_stats, r->n_spans);
    if (r->noisy[0])
        printf("noisy:  run %lld is not calibrated into the tables: %s; its statistics are "
               "kept (ptcalib --run %lld --force uses them anyway)\n", (long long)r->run_id,
               r->noisy, (long long)r->run_id);
    else if (r->gemm_ratio > 0)
        printf("        %lld op timings stored as cost samples of run %lld (GEMMs at %.2fx "
               "the profiled time; ptcalib --forget %lld removes them)\n",
               (long long)r->samples, (long long)r->run_id, r->gemm_ratio,
               (long long)r->run_id);
    else /* no GEMM sample compared with a profile: the table has none, or the run's
          * GEMMs were FP8, whose spans hold their casts and are not stored */
        printf("        %lld op timings stored as cost samples of run %lld (no GEMM among "
               "them to compare with the profile; ptcalib --forget %lld removes them)\n",
               (long long)r->samples, (long long)r->run_id, (long long)r->run_id);
}

/* Opens the trainer and says what it found: the plan, and the data this rank reads
 * (each as far as opening got). db and version hold strings the trainer keeps using. */
static int open_run(const options *o, pt_comm *comm, char (*db)[512], char (*version)[64],
                    pt_trainer **t, pt_err *err)
{
    pt_trainer_opts to;
    pt_trainer_info info;
    int rank = pt_comm_rank(comm);
    trainer_opts(o, rank, *db, sizeof *db, *version, sizeof *version, &to);
    int rc = pt_trainer_open(t, &to, comm, &info, err);
    if (info.priced_stack[0] && rank == 0)
        fprintf(stderr, "ptrun: note: %s was priced for stack '%s'; ptrun trains it with "
                        "its own kernels (stack '%s'), so the measured step time is not "
                        "that prediction's (ptplan --stack ptrun predicts this run)\n",
                o->plan, info.priced_stack, pt_stack_builtin(0)->name);
    if (info.layout[0]) {
        const pt_plan *p = pt_trainer_plan(*t);
        printf("plan    %s: %s on %s, %s\n", o->plan, p->model.name, p->cluster.name,
               info.layout);
    }
    if (info.data_path[0] && info.val_path[0])
        printf("data    %s: %lld tokens (train); %s: %lld tokens (validation)\n",
               info.data_path, (long long)info.train_tokens, info.val_path,
               (long long)info.val_tokens);
    else if (info.data_path[0])
        printf("data    %s: %lld tokens (%lld train, %lld validation)\n", info.data_path,
               (long long)info.tokens, (long long)info.train_tokens, (long long)info.val_tokens);
    if (info.device[0] && rank == 0)
        printf("device  %s\n", info.device);
    if (o->tk && rank == 0) {
        char about[1024];
        pt_tokenizer_describe(o->tk, about, sizeof about);
        printf("tokens  %s\n", about);
    }
    return rc;
}

static int go(const options *o, pt_comm *comm, pt_trainer **tp, pt_err *err)
{
    static char db[512], version[64]; /* the trainer's, until it is closed */
    if (open_run(o, comm, &db, &version, tp, err))
        return 1;
    pt_trainer *t = *tp;
    const pt_plan *p = pt_trainer_plan(t);
    if (o->resume) {
        pt_trainer_resumed r;
        if (pt_trainer_resume(t, o->resume, &r, err))
            return 1;
        printf("resumed %s at step %lld (written by %s on %lld ranks), data position %lld\n",
               r.path, (long long)r.step, r.layout, (long long)r.world, (long long)r.data_pos);
        if (r.changed[0])
            printf("changed since the checkpoint: %s\n", r.changed);
    }
    if (o->init_from) {
        pt_trainer_initialized r;
        if (pt_trainer_init_from(t, o->init_from, &r, err))
            return 1;
        if (r.hugging_face)
            printf("weights from %s (Hugging Face), optimizer afresh\n", r.path);
        else
            printf("weights from %s (step %lld), optimizer afresh at step 0\n", r.path,
                   (long long)r.step);
    }
    if (pt_trainer_start(t, err))
        return 1;
    report_memory(t);
    printf("train   %lld steps of %lld sequences of %lld tokens, predicted %.3g s/step\n",
           (long long)p->run.steps, (long long)p->train.global_batch, (long long)p->model.seq,
           p->predicted.step_time_s);
    int rc = train(o, t, comm, err);
    if ((rc == 0 || rc == 3 || rc == 4) && pt_trainer_log_check(t, err))
        return 1;
    if (rc == 3) /* --stop-after: an interruption on purpose */
        return 0;
    if (rc == 4)
        return 75;
    if (rc)
        return rc < 0 ? 1 : rc;
    pt_trainer_record rec;
    if ((o->record || o->trace) && pt_trainer_trace_and_record(t, &rec, err))
        return 1;
    if ((o->record || o->trace) && rec.recorded)
        report_record(&rec);
    /* every rank takes part (a layout that splits the model gathers it on rank 0);
     * rank 0 writes */
    if (o->sample) {
        char text[4096];
        if (pt_trainer_sample(t, o->sample, text, sizeof text, err))
            return 1;
        if (pt_comm_rank(comm) == 0)
            printf("sample: %s\n", text);
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* a line at a time, also into a file or pipe: a long run's progress shows as it
     * happens and survives the run being killed */
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* the options first: --start-timeout bounds MPI's start */
    options o;
    if (parse_options(argc, argv, &o))
        return 1;
    pt_comm *comm;
    pt_err err = {""};
    /* the comm's notes and pt_comm_abort's reason, on stderr */
    pt_comm_opts co = {.timeout_s = o.comm_timeout_s, .start_timeout_s = o.start_timeout_s,
                       .note = pt_cli_note, .note_arg = PT_CLI_COMM_NOTES};
    if (pt_comm_init_with(&argc, &argv, &co, &comm, &err)) {
        fprintf(stderr, "ptrun: %s\n", err.msg);
        return 1;
    }
    int rank = pt_comm_rank(comm), world = pt_comm_size(comm);
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) /* rank 0 speaks for the run */
        fprintf(stderr, "ptrun: rank %d: cannot silence stdout\n", rank);
    if (rank != 0)
        o.log = NULL;
    pt_trainer *t = NULL;
    /* the tokenizer outlives the trainer, which uses it until it is closed */
    int rc = o.tokenizer && pt_tokenizer_load(o.tokenizer, &o.tk, &err) ? 1
                                                                          : go(&o, comm, &t, &err);
    /* stopped by a signal (75), every rank after the same step: not a failure to spread */
    if (rc && rc != 75 && world > 1)
        pt_comm_abort(comm, rc, err.msg); /* every rank down with rc, none hangs */
    if (rc && rc != 75)
        fprintf(stderr, "ptrun: %s\n", err.msg);
    pt_trainer_close(t);
    pt_tokenizer_free(o.tk);
    pt_comm_finalize(comm);
    return pt_cli_exit("ptrun", rc);
}
