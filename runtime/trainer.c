/*
 * The trainer: opens the run a plan.json describes on this rank and steps it. Opening
 * reads and checks the plan, computes the layout's rank grid once (the communicator's
 * groups, the engine's pipeline and this rank's part of the model all come from it),
 * loads the data, starts the compute backend its cluster's devices call for and builds
 * the model. A step runs the schedule program under the loss-spike guard, which may
 * roll back to a checkpoint. It owns validation and the weights' fingerprint;
 * checkpoints are trainer_ckpt.c's, sampling trainer_sample.c's, the log, trace and
 * record trainer_log.c's. Nothing here prints: tools/ptrun.c reports what each call
 * returns.
 */
#include "trainer_internal.h"
#include "specjson.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void pt_trainer_opts_default(pt_trainer_opts *o)
{
    *o = (pt_trainer_opts){.dropout = -1, .threads = 1, .keep_ckpt = 2, .val_batches = 8,
                           .spike_window = 32, .spike_factor = 3, .spike_grad_factor = 10,
                           .spike_action = PT_SPIKE_STOP, .version = "", .git_revision = ""};
}

static void spike_free(struct pt_spike_guard *g);

/* ---- Opening -------------------------------------------------------------------------- */

/* The plan against this run: its world size, ptrun's own stack and the options that
 * override it. */
static int check_plan(pt_trainer *r, pt_trainer_info *info, pt_err *err)
{
    pt_plan *p = &r->plan;
    const pt_stack *own = pt_stack_builtin(0);
    /* a kind of cp communication priced for another stack that ptrun does not run */
    if (p->layout.cp > 1 && !(own->cp_comms & (1u << p->layout.cp_comm))) {
        char kinds[64];
        pt_stack_cp_comms_text(own, kinds, sizeof kinds);
        return pt_err_set(err, "%s: layout cp_comm=%s (priced for stack '%s'): ptrun runs "
                               "cp_comm %s; plan with one of those", r->o.plan,
                          pt_cp_comm_name(p->layout.cp_comm), p->train.stack.name, kinds);
    }
    /* what the planner prices and ptrun's layers do not run yet */
    const pt_model *m = &p->model;
    if (m->window > 0 || m->attn_sinks)
        return pt_err_set(err, "%s: model %s has %s, which ptrun's runtime does not train "
                               "yet (the plan prices it for stack '%s')", r->o.plan, m->name,
                          m->window > 0 ? "banded attention (window)" : "attention sinks",
                          p->train.stack.name);
    /* a mixture of experts in a layout ptrun's experts do not train yet (a plan priced
     * for another stack) */
    pt_err why;
    if (m->moe.experts > 0 && pt_stack_check_model(own, m, &p->layout, &why))
        return pt_err_set(err, "%s: %s (the plan prices it for stack '%s')", r->o.plan,
                          why.msg, p->train.stack.name);
    if (m->moe.experts > 0 && pt_train_fp8(&p->train))
        return pt_err_set(err, "%s: model %s: ptrun trains experts without FP8 so far",
                          r->o.plan, m->name);
    int64_t world = pt_layout_world(&p->layout);
    if (world != r->world)
        return pt_err_set(err, "%s: the layout needs %lld ranks, but ptrun was started as %d "
                               "(launch with mpirun -np %lld)", r->o.plan, (long long)world,
                          r->world, (long long)world);
    /* A plan priced for another framework's stack trains here with ptrun's own
     * kernels: the layout is the same, the op lists are ptrun's. */
    if (!pt_stack_is_ptrun(&p->train.stack)) {
        snprintf(info->priced_stack, sizeof info->priced_stack, "%s", p->train.stack.name);
        p->train.stack = *own;
    }
    if (r->o.dropout >= 0)
        p->run.dropout = r->o.dropout;
    if (r->o.steps)
        p->run.steps = r->o.steps;
    if (r->o.data)
        snprintf(p->run.data, sizeof p->run.data, "%s", r->o.data);
    return 0;
}

/* The rank grid of the layout, once, and this rank's place in it: its process groups
 * (the communicator's), its pipeline (the engine's) and its part of the model. */
static int place(pt_trainer *r, pt_err *err)
{
    pt_grid *g = &r->grid;
    pt_grid_init(g, &r->plan.layout);
    if (pt_comm_groups(r->comm, g, err))
        return -1;
    int coords[PT_NDIM];
    pt_grid_coords(g, r->rank, coords);
    r->stage = coords[PT_DIM_PP];
    int cr = coords[PT_DIM_CP];
    int64_t *members = malloc((size_t)r->world * sizeof *members); /* any group's */
    if (!members)
        return pt_err_set(err, "out of memory");
    r->place = (pt_net_place){.stage = r->stage, .tp_rank = coords[PT_DIM_TP], .cp_rank = cr,
                              .dp_rank = pt_grid_group(g, PT_GROUP_DPCP, r->rank, members),
                              .dp_size = pt_grid_group_size(g, PT_GROUP_DPCP),
                              .ep_rank = pt_grid_group(g, PT_GROUP_EP, r->rank, members),
                              .edp_rank = pt_grid_group(g, PT_GROUP_EDP, r->rank, members),
                              .etp_rank = pt_grid_group(g, PT_GROUP_ETP, r->rank, members),
                              .comm = r->world > 1 ? r->comm : NULL};
    free(members);
    /* the context-parallel ring's neighbours */
    r->place.cp_next = (int)pt_grid_cp_ring_peer(g, r->rank, 1);
    r->place.cp_prev = (int)pt_grid_cp_ring_peer(g, r->rank, -1);
    r->has_data = r->stage == 0 || r->stage == r->plan.layout.pp - 1;
    return pt_dist_init(&r->dist, r->world > 1 ? r->comm : NULL, g, r->rank, err);
}

/* The training and validation tokens: with val_data two files, each read whole, else
 * one file whose last 10% validate. Text goes through the options' tokenizer, whose
 * vocabulary must fit the model's. */
static int load_data(pt_trainer *r, pt_trainer_info *info, pt_err *err)
{
    const pt_plan *p = &r->plan;
    const pt_tokenizer *tk = r->o.tokenizer;
    const char *path = p->run.data[0] ? p->run.data : PT_TRAINER_DEFAULT_CORPUS;
    const char *val = r->o.val_data;
    if (tk && pt_tokenizer_vocab(tk) > p->model.vocab)
        return pt_err_set(err, "tokenizer %s: its vocabulary of %lld ids is larger than model "
                               "%s's of %lld", pt_tokenizer_origin(tk),
                          (long long)pt_tokenizer_vocab(tk), p->model.name,
                          (long long)p->model.vocab);
    if (val ? pt_tokens_load_with(path, tk, &r->train, err) ||
                  pt_tokens_check_vocab(&r->train, p->model.vocab, err) ||
                  pt_tokens_load_with(val, tk, &r->val, err) ||
                  pt_tokens_check_vocab(&r->val, p->model.vocab, err)
            : pt_tokens_load_with(path, tk, &r->all, err) ||
                  pt_tokens_check_vocab(&r->all, p->model.vocab, err) ||
                  pt_tokens_split(&r->all, 0.1, p->model.seq, &r->train, &r->val, err))
        return -1;
    if (pt_sampler_init(&r->train_s, &r->train, p->model.seq, p->run.seed, err) ||
        pt_sampler_init(&r->val_s, &r->val, p->model.seq, p->run.seed ^ 0x5bd1e995ull, err))
        return -1;
    snprintf(info->data_path, sizeof info->data_path, "%s", path);
    snprintf(info->val_path, sizeof info->val_path, "%s", val ? val : "");
    info->tokens = r->train.n + r->val.n;
    info->train_tokens = r->train.n;
    info->val_tokens = r->val.n;
    return 0;
}

static void fnv_hex(const char *text, size_t n, char out[17])
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)text[i]) * 1099511628211ull;
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* What a checkpoint must share with a run resuming from it: the model and the seed
 * (trainer_ckpt.c checks them field by field; the hash picks among checkpoints), and
 * the hash of the plan file's text, which checkpoints record. */
static void config_hash(pt_trainer *r)
{
    const pt_plan *p = &r->plan;
    char *model = pt_model_to_json(&p->model);
    char text[2048];
    snprintf(text, sizeof text, "%s|%llu", model ? model : "", (unsigned long long)p->run.seed);
    free(model);
    fnv_hex(text, strlen(text), r->config_hash);
    pt_err ignored;
    char *plan = pt_json_read_file(r->o.plan, &ignored);
    fnv_hex(plan ? plan : "", plan ? strlen(plan) : 0, r->plan_hash);
    free(plan);
}

/* The compute backend of the plan's devices (pt_cluster_backend), and the way device
 * buffers travel from then on. Collective. */
static int start_backend(pt_trainer *r, pt_err *err)
{
    pt_plan *p = &r->plan;
    if (pt_cluster_backend(&p->cluster) == PT_BACKEND_CPU) {
        r->kn = pt_kernels_cpu(r->o.threads);
        if (!r->kn)
            return pt_err_set(err, "cannot start the CPU backend (out of memory)");
    } else {
        char why[256] = "";
        /* one GPU per rank: the node's ranks take the GPUs this process sees in turn
         * (modulo their count, so srun --gpus-per-task, CUDA_VISIBLE_DEVICES and several
         * ranks sharing one GPU all work) */
        int seen = pt_kernels_cuda_devices();
        int local = pt_comm_local_rank(r->comm);
        r->kn = pt_kernels_cuda(seen > 0 ? local % seen : local, why, sizeof why);
        if (!r->kn)
            return pt_err_set(err, "%s: the plan is for %s devices, but the CUDA backend cannot "
                                   "start: %s", r->o.plan, p->cluster.device.name, why);
    }
    r->kn->note = r->o.kernel_note;
    r->kn->note_arg = r->o.kernel_note_arg;
    /* device buffers travel through NCCL, or staged through host memory, from now on
     * (collective: every rank builds its backend here); in a run without MPI the
     * ranks' first collectives come after this */
    return pt_comm_use_device(r->comm, r->kn, err);
}

/* The schedule program and this rank's part of the model. Collective. */
static int build(pt_trainer *r, pt_err *err)
{
    pt_plan *p = &r->plan;
    if (pt_sched_build(p->layout.schedule, p->layout.pp, p->layout.vp, (int)p->layout.n_micro,
                       &r->sched, err))
        return -1;
    int slots = pt_sched_peak_in_flight(&r->sched, r->stage);
    pt_trace_init(&r->trace, r->o.trace != NULL || r->o.record_db != NULL);
    /* the first of the two barriers the merged trace aligns the ranks' clocks on */
    if (r->trace.on && pt_comm_all_ok(r->comm, true))
        pt_trace_sync(&r->trace);
    /* a net that fails half-way is freed too (pt_net_release takes any state
     * pt_net_build leaves) */
    r->net_built = true;
    if (pt_net_build(&r->net, p, r->kn, &r->place, slots, p->run.seed, &r->trace, err))
        return -1;
    r->net.rank = r->rank;
    /* the send pool, allocated now rather than inside the first step */
    if (pt_comm_reserve_sends(r->comm, pt_net_p2p_bytes(&r->net), err))
        return -1;
    pt_opctx c;
    pt_opctx_init(&c, &p->model, &p->layout, &p->train, &p->cluster);
    r->model_flops = pt_step_model_flops(&c);
    r->peak_flops = pt_peak_flops_total(&p->cluster, &p->train);
    config_hash(r);
    return 0;
}

int pt_trainer_agree(pt_trainer *r, int rc, const char *what, pt_err *err)
{
    if (pt_comm_all_ok(r->comm, rc == 0))
        return 0;
    char msg[sizeof err->msg] = "";
    pt_err ignored;
    if (r->rank == 0 && rc)
        memcpy(msg, err->msg, sizeof msg);
    if (pt_comm_bcast(r->comm, msg, sizeof msg, &ignored) == 0 && msg[0])
        memcpy(err->msg, msg, sizeof msg);
    else if (rc == 0)
        pt_err_set(err, "another rank could not %s", what);
    return -1;
}

/* What this run writes that another run could be writing at the same time: the
 * checkpoint folder (refused when it is not ours, else locked by rank 0:
 * pt_ckpt_lock) and the log (locked: pt_trainer_log_claim). Both stay this run's until
 * it ends. A checkpoint that cannot be written, would replace what is not ours, or is
 * another run's is refused now, on every rank, not after training. Collective. */
static int claim_outputs(pt_trainer *r, pt_err *err)
{
    const pt_trainer_opts *o = &r->o;
    int rc = 0;
    if (o->ckpt && r->rank == 0)
        rc = pt_ckpt_check_target(o->ckpt, o->keep_ckpt, err) ||
             pt_ckpt_lock(o->ckpt, &r->ckpt_hold, err);
    if (rc == 0 && o->log)
        rc = pt_trainer_log_claim(r, err);
    return pt_trainer_agree(r, rc, "claim its checkpoint folder or log", err);
}

int pt_trainer_check_skip(const pt_trainer *r, int64_t skip, int64_t from, pt_err *err)
{
    int64_t batch = r->plan.train.global_batch, steps = r->plan.run.steps, first, end;
    pt_err why;
    if (!pt_mul64(from, batch, &first) || !pt_mul64(steps, batch, &end) ||
        pt_sampler_check_skip(skip, first, end, &why))
        return pt_err_set(err, "steps %lld to %lld of %lld samples, %lld samples further on, "
                               "would read past the last global sample index (%lld)",
                          (long long)from, (long long)steps, (long long)batch, (long long)skip,
                          (long long)INT64_MAX);
    return 0;
}

int pt_trainer_open(pt_trainer **out, const pt_trainer_opts *o, pt_comm *comm,
                    pt_trainer_info *info, pt_err *err)
{
    memset(info, 0, sizeof *info);
    pt_trainer *r = calloc(1, sizeof *r);
    *out = r;
    if (!r)
        return pt_err_set(err, "out of memory");
    r->o = *o;
    r->comm = comm;
    r->rank = pt_comm_rank(comm);
    r->world = pt_comm_size(comm);
    r->ckpt_hold.fd = r->log_fd = -1;
    if (pt_plan_read(o->plan, &r->plan, err) || check_plan(r, info, err) || place(r, err))
        return -1;
    pt_err why;
    if (pt_trainer_check_skip(r, 0, 0, &why)) /* the plan's own steps and batch */
        return pt_err_set(err, "%s: %s", o->plan, why.msg);
    pt_layout_format(&r->plan.layout, info->layout, sizeof info->layout);
    info->has_data = r->has_data;
    /* the outputs are claimed before anything slow (the data, the model): a run refused
     * for another's folder or log says so in its first seconds */
    if (start_backend(r, err) || claim_outputs(r, err) ||
        (r->has_data && load_data(r, info, err)) || build(r, err))
        return -1;
    snprintf(info->device, sizeof info->device, "%s", r->kn->about);
    return 0;
}

const pt_plan *pt_trainer_plan(const pt_trainer *t) { return &t->plan; }

void pt_trainer_close(pt_trainer *r)
{
    if (!r)
        return;
    if (r->net_built)
        pt_net_release(&r->net);
    pt_kernels_destroy(r->kn);
    pt_sched_free(&r->sched);
    pt_tokens_free(&r->all);
    pt_tokens_free(&r->train);
    pt_tokens_free(&r->val);
    pt_trace_free(&r->trace);
    free(r->step_s);
    spike_free(r->guard);
    pt_trainer_log_close(r);
    pt_ckpt_unlock(&r->ckpt_hold);
    free(r);
}

void pt_trainer_memory_of(const pt_trainer *r, pt_trainer_memory *out)
{
    pt_memory mem;
    pt_mem_stage(&r->plan.model, &r->plan.layout, &r->plan.train, r->stage, &mem);
    *out = (pt_trainer_memory){.rank = r->rank, .stage = r->stage,
                               .allocated_bytes = (double)r->net.bytes,
                               .planned_bytes = mem.total_bytes,
                               .planned_comm_bytes = mem.comm_bytes};
}

int64_t pt_trainer_next_step(const pt_trainer *r) { return r->next; }

/* ---- The loss-spike guard ------------------------------------------------------------------ */

/* A loss spike: a step whose loss, or gradient norm, is far above the median of the
 * steps before it. Large runs see them (PaLM: Chowdhery et al. 2022, section 5.1, which
 * restarted from a checkpoint about 100 steps before the spike and skipped 200-500
 * batches); a diverging run passes through them before its loss becomes NaN, so a
 * checkpoint written after one may already be damaged. The guard measures each step
 * against the medians of the last spike_window healthy steps, once it has
 * SPIKE_MIN_STEPS of them (the first steps' losses fall fast), and a spiking step is
 * never checkpointed. The decision is the same on every rank: the loss and gradient
 * norm are the global batch's, summed over ranks. */
enum { SPIKE_MIN_STEPS = 8, SPIKE_MAX_ROLLBACKS = 4 };

struct pt_spike_guard {
    double *loss, *gnorm, *scratch;   /* the last `window` healthy steps, a ring */
    int64_t window, n, next;
    double loss_median, gnorm_median; /* of the ring, as the last check found them */
    int rollbacks;
};

static int spike_init(pt_trainer *r, pt_err *err)
{
    struct pt_spike_guard *g = calloc(1, sizeof *g);
    r->guard = g;
    if (!g)
        return pt_err_set(err, "out of memory");
    g->window = r->o.spike_window;
    g->loss = calloc((size_t)g->window, sizeof *g->loss);
    g->gnorm = calloc((size_t)g->window, sizeof *g->gnorm);
    g->scratch = calloc((size_t)g->window, sizeof *g->scratch);
    return g->loss && g->gnorm && g->scratch ? 0 : pt_err_set(err, "out of memory");
}


static void spike_free(struct pt_spike_guard *g)
{
    if (!g)
        return;
    free(g->loss);
    free(g->gnorm);
    free(g->scratch);
    free(g);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double spike_median(struct pt_spike_guard *g, const double *v)
{
    memcpy(g->scratch, v, (size_t)g->n * sizeof *v);
    qsort(g->scratch, (size_t)g->n, sizeof *v, cmp_double);
    return g->n % 2 ? g->scratch[g->n / 2]
                    : 0.5 * (g->scratch[g->n / 2 - 1] + g->scratch[g->n / 2]);
}

/* Whether step s spikes; the medians it was measured against stay in g. */
static bool spike_check(const pt_trainer_opts *o, struct pt_spike_guard *g,
                        const pt_step_stats *s)
{
    if (g->n < SPIKE_MIN_STEPS && g->n < g->window)
        return false;
    g->loss_median = spike_median(g, g->loss);
    g->gnorm_median = spike_median(g, g->gnorm);
    return s->loss > o->spike_factor * g->loss_median ||
           s->grad_norm > o->spike_grad_factor * g->gnorm_median;
}

static void spike_push(struct pt_spike_guard *g, const pt_step_stats *s)
{
    g->loss[g->next] = s->loss;
    g->gnorm[g->next] = s->grad_norm;
    g->next = (g->next + 1) % g->window;
    g->n += g->n < g->window;
}

/* "checkpoint DIR.1 (step 40, from before it) is kept", or why there is none (a
 * damaged one named). */
static void kept_checkpoint(const pt_trainer *r, int64_t bad, char *out, size_t n)
{
    pt_ckpt_meta meta;
    pt_err why;
    char path[4096];
    if (!r->o.ckpt)
        snprintf(out, n, "no checkpoint was asked for");
    else if (pt_ckpt_find(r->o.ckpt, r->config_hash, bad, path, sizeof path, &meta, &why))
        snprintf(out, n, "no checkpoint from before it can be taken (%s)", why.msg);
    else
        snprintf(out, n, "checkpoint %s (step %lld, from before it) is kept", path,
                 (long long)meta.step);
}

/* Back to the newest checkpoint from before step `bad` (1-based: the spike's), with the
 * data position just past the spike's batch, so that the batches of the steps since
 * that checkpoint are skipped. Collective. */
static int rollback(pt_trainer *r, int64_t bad, pt_trainer_step_result *res, pt_err *err)
{
    pt_ckpt_meta meta;
    int64_t batch = r->plan.train.global_batch;
    /* the data position after the spike, and the offset that keeps it from the
     * checkpoint's step on: in range for every step already checked
     * (pt_trainer_check_skip), the offset checked for the steps to come */
    int64_t past = bad * batch + r->data_skip, skip;
    pt_err why;
    if (pt_ckpt_find(r->o.ckpt, r->config_hash, bad, res->rollback_path,
                     sizeof res->rollback_path, &meta, err) ||
        pt_trainer_load_ckpt(r, res->rollback_path, &meta, err))
        return -1;
    skip = past - meta.step * batch;
    if (pt_trainer_check_skip(r, skip, meta.step, &why))
        return pt_err_set(err, "cannot roll back to %s: %s", res->rollback_path, why.msg);
    r->data_skip = skip;
    r->train_s.skip = skip;
    res->rolled_back = true;
    res->rollback_to = meta.step;
    res->rollback_data_pos = past;
    r->next = meta.step; /* before the line: its tokens_seen are the checkpoint's */
    pt_trainer_log_line(r, "rollback", bad, ",\"to_step\":%lld,\"batches_skipped\":%lld,"
                        "\"data_pos\":%lld", (long long)meta.step,
                        (long long)(bad - meta.step), (long long)past);
    return 0;
}

/* What to do about the step just run, whose figures are in res: 0 go on, 1 rolled back,
 * 2 stop (err says why), -1 failure. */
static int guard_step(pt_trainer *r, pt_trainer_step_result *res, pt_err *err)
{
    struct pt_spike_guard *g = r->guard;
    const pt_step_stats *s = &res->stats;
    int64_t bad = res->step;
    bool finite = isfinite(s->loss) && isfinite(s->grad_norm);
    bool spike = finite && r->o.spike_action != PT_SPIKE_OFF && spike_check(&r->o, g, s);
    if (finite && !spike) {
        spike_push(g, s);
        return 0;
    }
    res->nonfinite = !finite;
    if (spike) {
        res->spike = true;
        res->median_loss = g->loss_median;
        res->median_grad_norm = g->gnorm_median;
        res->window = g->n;
        pt_trainer_log_line(r, "spike", bad, ",\"loss\":%.17g,\"grad_norm\":%.17g,"
                            "\"median_loss\":%.17g,\"median_grad_norm\":%.17g", s->loss,
                            s->grad_norm, g->loss_median, g->gnorm_median);
    }
    pt_ckpt_meta before;
    pt_err none;
    char path[4096];
    bool can_roll = r->o.spike_action == PT_SPIKE_ROLLBACK && g->rollbacks < SPIKE_MAX_ROLLBACKS &&
                    r->o.ckpt && pt_ckpt_find(r->o.ckpt, r->config_hash, bad, path, sizeof path,
                                              &before, &none) == 0;
    if (can_roll) {
        g->rollbacks++;
        return rollback(r, bad, res, err) ? -1 : 1;
    }
    char kept[4200];
    kept_checkpoint(r, bad, kept, sizeof kept);
    if (!finite && !isfinite(s->loss))
        pt_err_set(err, "the loss became %s at step %lld (grad norm %g): stopping; %s",
                   isnan(s->loss) ? "NaN" : "infinite", (long long)bad, s->grad_norm, kept);
    else if (!finite) /* the loss finite, its gradient not */
        pt_err_set(err, "the gradient norm became %s at step %lld (loss %.4g): stopping; %s",
                   isnan(s->grad_norm) ? "NaN" : "infinite", (long long)bad, s->loss, kept);
    else
        pt_err_set(err, "loss spike at step %lld: loss %.4g, %.3gx the median %.4g of the last "
                        "%lld steps (grad norm %.4g, median %.4g): stopping%s; %s",
                   (long long)bad, s->loss, s->loss / g->loss_median, g->loss_median,
                   (long long)g->n, s->grad_norm, g->gnorm_median,
                   g->rollbacks ? " after the most rollbacks allowed" : "", kept);
    return 2;
}

/* ---- Steps ---------------------------------------------------------------------------- */

/* Keeps a step's time for the run's median. */
static int keep_step_time(pt_trainer *r, double time_s, pt_err *err)
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

int pt_trainer_step(pt_trainer *r, pt_trainer_step_result *res, pt_err *err)
{
    const pt_plan *p = &r->plan;
    int64_t step = r->next;
    memset(res, 0, sizeof *res);
    res->step = step + 1;
    if (!r->guard) {
        r->t0 = pt_trace_now();
        if (spike_init(r, err))
            return -1;
    }
    pt_comm_set_context(r->comm, step + 1, "training"); /* for the watchdog's report */
    if (pt_trainer_test_spike(r, step, err) ||
        pt_engine_step(&r->net, &r->dist, &r->sched, r->has_data ? &r->train_s : NULL, p, step,
                       &res->stats, err))
        return -1;
    int guard = guard_step(r, res, err);
    if (guard)
        return guard;
    if (r->net.fp8.recipe != PT_FP8_OFF) {
        pt_fp8_stats f;
        if (pt_fp8_step_stats(&r->net, &f, err))
            return -1;
        res->fp8 = true;
        res->fp8_scale_min = f.scale_min;
        res->fp8_scale_max = f.scale_max;
        res->fp8_overflow = f.overflow;
        res->fp8_underflow = f.underflow;
        res->fp8_elems = f.elems;
        res->fp8_amax_elems = f.amax_elems;
    }
    const pt_step_stats *s = &res->stats;
    double tokens = (double)(p->train.global_batch * p->model.seq);
    res->tokens_per_s = tokens / s->time_s;
    res->mfu = r->peak_flops > 0 ? r->model_flops / (s->time_s * r->peak_flops) : 0;
    int64_t done = step + 1 - r->start_step, left = p->run.steps - step - 1;
    double elapsed = pt_trace_now() - r->t0;
    res->eta_s = done > 0 ? elapsed / (double)done * (double)left : 0;
    r->steps_run++;
    r->next = step + 1; /* before the line: its tokens_seen count this step */
    if (res->fp8)
        pt_trainer_log_line(r, "step", step + 1, ",\"loss\":%.17g,\"lr\":%.17g,"
                            "\"grad_norm\":%.17g,\"tokens_per_s\":%.6g,\"mfu\":%.6g,"
                            "\"fp8_scale_min\":%.6g,\"fp8_scale_max\":%.6g,"
                            "\"fp8_overflow\":%.0f,\"fp8_underflow\":%.0f,\"fp8_values\":%lld,"
                            "\"fp8_amax_values\":%lld,\"time_s\":%.6g", s->loss, s->lr,
                            s->grad_norm, res->tokens_per_s, res->mfu, res->fp8_scale_min,
                            res->fp8_scale_max, res->fp8_overflow, res->fp8_underflow,
                            (long long)res->fp8_elems, (long long)res->fp8_amax_elems,
                            s->time_s);
    else
        pt_trainer_log_line(r, "step", step + 1, ",\"loss\":%.17g,\"lr\":%.17g,"
                            "\"grad_norm\":%.17g,\"tokens_per_s\":%.6g,\"mfu\":%.6g,"
                            "\"time_s\":%.6g", s->loss, s->lr, s->grad_norm,
                            res->tokens_per_s, res->mfu, s->time_s);
    if (p->model.moe.experts > 0) /* what the routers did (runtime/moe.c) */
        pt_trainer_log_line(r, "moe", step + 1, ",\"moe_aux\":%.17g,\"moe_dropped\":%.6g,"
                            "\"moe_imbalance\":%.6g,\"moe_expert_max\":%.6g", s->moe_aux,
                            s->moe_dropped, s->moe_imbalance, s->moe_expert_max);
    /* the process's first step is its warm-up, not timed */
    if (step > r->start_step && keep_step_time(r, s->time_s, err))
        return -1;
    return 0;
}

int pt_trainer_evaluate(pt_trainer *r, int64_t step, double *loss, pt_err *err)
{
    if (pt_engine_eval(&r->net, &r->dist, r->has_data ? &r->val_s : NULL, r->o.val_batches,
                       loss, err))
        return -1;
    pt_trainer_log_line(r, "val", step, ",\"loss\":%.17g", *loss);
    return 0;
}

int pt_trainer_fingerprint(pt_trainer *r, double *sumsq, pt_err *err)
{
    *sumsq = pt_engine_param_sumsq(&r->net, &r->dist, err);
    if (*sumsq < 0)
        return -1;
    pt_trainer_log_line(r, "params", r->plan.run.steps, ",\"sumsq\":%.17g", *sumsq);
    return 0;
}
