/*
 * The trainer's checkpoints: what a rank's state is on disk (its stage's parameters as
 * fp32 master weights and its optimizer shard, in safetensors files of one temporary
 * directory that rank 0 commits only when every rank wrote its part), loading one back
 * after checking it belongs to this run, and resuming from the newest complete one.
 * The directory's own life (temporaries, renames, the kept copies) is checkpoint.c's.
 */
#include "trainer_internal.h"

#include <stdlib.h>
#include <string.h>

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
static void state_paths(const char *dir, const pt_trainer *r, char *model, char *optim, size_t n)
{
    if (r->world == 1)
        snprintf(model, n, "%s/model.safetensors", dir);
    else
        snprintf(model, n, "%s/model_rank%d.safetensors", dir, r->rank);
    snprintf(optim, n, "%s/optim_rank%d.safetensors", dir, r->rank);
}

static int write_state(const char *tmp, pt_trainer *r, const host_state *h, pt_err *err)
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

static int write_meta(const char *tmp, pt_trainer *r, int64_t step, pt_err *err)
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
 * succeeded, keeping the keep_ckpt newest (DIR, DIR.1, ...). */
int pt_trainer_save(pt_trainer *r, int64_t step, pt_err *err)
{
    const char *dir = r->o.ckpt;
    int keep = r->o.keep_ckpt;
    if (!dir)
        return pt_err_set(err, "no checkpoint directory was given");
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

static int read_state(const char *dir, pt_trainer *r, host_state *h, pt_err *err)
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
int pt_trainer_load_ckpt(pt_trainer *r, const char *path, const pt_ckpt_meta *meta, pt_err *err)
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

int pt_trainer_resume(pt_trainer *r, const char *dir, pt_trainer_resumed *out, pt_err *err)
{
    pt_ckpt_meta meta;
    memset(out, 0, sizeof *out);
    if (pt_ckpt_find(dir, r->config_hash, -1, out->path, sizeof out->path, &meta, err) ||
        pt_trainer_load_ckpt(r, out->path, &meta, err))
        return -1;
    r->start_step = r->next = meta.step;
    out->step = meta.step;
    out->data_pos = meta.data_pos;
    out->data_skip = r->data_skip;
    return 0;
}

int pt_trainer_test_spike(pt_trainer *r, int64_t step, pt_err *err)
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
