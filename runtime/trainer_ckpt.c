/*
 * The trainer's checkpoints, in whole tensors that any layout reads back: parameters
 * (fp32 master weights) and Adam moments saved by name in the unsplit shapes, the way
 * Hugging Face shards a model (model-0000k-of-0000n.safetensors with
 * model.safetensors.index.json mapping each tensor to its file; optim-… likewise, with
 * "<name>.exp_avg" and "<name>.exp_avg_sq"). One file of each per pipeline stage: the
 * stage's first rank creates it with its header and full size, then every rank writes
 * the pieces it holds at their places in the whole tensors (pwrite), so no rank gathers
 * the model or even a stage. Which copy writes: among tensor-parallel ranks holding the
 * same part, the first; of a tied embedding, the first stage's; among data-parallel
 * copies, rank 0 of the dp·cp group, except under ZeRO, where each rank writes the
 * moments it holds (and under ZeRO 2/3 the master weights of its shards).
 *
 * PowerSGD's state (compress=powersgd: runtime/compress.c) is each rank's own — its
 * error feedback differs between data-parallel ranks — so every rank writes it whole
 * to powersgd-<rank+1>-of-<world>.safetensors ("error" and "q", fp32, with the layout
 * in the metadata). A resume under the same layout and world reads it back, so the run
 * continues bit for bit; under another, the errors start from zero and Q afresh, and
 * the resume says so.
 *
 * Loading reads each rank's elements back from the whole tensors (pread), whatever
 * layout, ZeRO stage, micro-batch or world size wrote them, and checks that the model,
 * the seed and the training data are the checkpoint's; other settings may change and
 * are reported. --init-from loads only the weights, from a checkpoint of ours or a
 * Hugging Face directory (runtime/hf.c), through the same reader. The step folders'
 * own life (temporaries, renames, the tracker, --keep) is checkpoint.c's.
 */
#include "trainer_internal.h"
#include "hf.h"
#include "model_internal.h"
#include "specjson.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Host copies of the state a checkpoint holds (the backend's memory may be a GPU's). */
typedef struct {
    float *master, *m, *v;
} host_state;

static int host_state_alloc(host_state *h, const pt_net *net, bool moments, pt_err *err)
{
    memset(h, 0, sizeof *h);
    size_t opt = moments ? (size_t)net->opt_elems : 0;
    h->master = calloc((size_t)net->n_elems + 1, sizeof(float));
    h->m = calloc(opt + 1, sizeof(float));
    h->v = calloc(opt + 1, sizeof(float));
    return h->master && h->m && h->v ? 0 : pt_err_set(err, "out of memory for a checkpoint's "
                                                           "host copy of %lld parameters",
                                                      (long long)net->n_elems);
}

static void host_state_free(host_state *h)
{
    free(h->master);
    free(h->m);
    free(h->v);
}

/* ---- Runs: this rank's elements in the whole tensors ---------------------------------- */

/* A run of elements consecutive both in this rank's flat buffer and in one whole
 * tensor: parameter p, flat index of its first element, index in the whole tensor. */
typedef int (*run_fn)(void *ctx, const pt_param *p, int64_t flat, int64_t whole, int64_t len,
                      pt_err *err);

/* Calls fn for every run of flat elements [lo, hi) (of the parameters this rank writes,
 * with writers_only): one per parameter part split by rows or whole, one per row of a
 * part split by columns. */
static int for_runs(const pt_net *n, int64_t lo, int64_t hi, bool writers_only, run_fn fn,
                    void *ctx, pt_err *err)
{
    for (int k = 0; k < n->n_param; k++) {
        const pt_param *q = &n->param[k];
        int64_t a = lo > q->offset ? lo : q->offset;
        int64_t b = hi < q->offset + q->count ? hi : q->offset + q->count;
        if (a >= b || (writers_only && !pt_param_writer(n, q)))
            continue;
        int64_t cols = q->ndim == 2 && q->full_cols != q->shape[1] ? q->shape[1] : q->count;
        for (int64_t i = a - q->offset; i < b - q->offset;) {
            int64_t end = (i / cols + 1) * cols, stop = b - q->offset;
            end = end < stop ? end : stop;
            if (fn(ctx, q, q->offset + i, pt_param_whole_index(q, i), end - i, err))
                return -1;
            i = end;
        }
    }
    return 0;
}

/* ---- Writing --------------------------------------------------------------------------- */

/* "model-00002-of-00004.safetensors": stage 1 of 4 */
static void shard_name(char *out, size_t n, const char *kind, int stage, int pp)
{
    snprintf(out, n, "%s-%05d-of-%05d.safetensors", kind, stage + 1, pp);
}

static int64_t whole_count(const pt_net *n, const pt_param *p, int64_t shape[2])
{
    pt_param_whole_shape(n, p, shape);
    return shape[0] * (p->ndim == 2 ? shape[1] : 1);
}

/* The stage's first rank creates its model and optimizer files: every tensor this
 * stage writes, whole, zero-filled, with the header the other ranks read offsets from. */
/* The experts of the stage that other ranks of its ep group hold (ep > 1): each
 * tensor's name and shape, as param_table.c names them, into t (NULL: counted).
 * Returns the count. */
static int other_experts(const pt_net *n, pt_st_tensor *t)
{
    const pt_model *m = &n->spec;
    int ep = n->layout.ep > 1 ? n->layout.ep : 1, k = 0;
    if (m->moe.experts == 0 || ep == 1)
        return 0;
    int64_t G = m->moe.experts / ep, e0 = (int64_t)n->ep_rank * G, fe = m->moe.expert_ffn;
    static const char *const kinds[3] = {"gate", "up", "down"};
    for (int c = 0; c < n->layout.vp; c++)
        for (int64_t i = 0; i < n->chunk_layers[c]; i++) {
            int64_t l = n->chunk_first[c] + i;
            if (!pt_model_layer_moe(m, l))
                continue;
            for (int64_t e = 0; e < m->moe.experts; e++)
                for (int j = m->act == PT_ACT_SWIGLU ? 0 : 1; j < 3; j++, k++) {
                    if (e >= e0 && e < e0 + G) {
                        k--;
                        continue;
                    }
                    if (!t)
                        continue;
                    int64_t rows = j == 2 ? m->hidden : fe, cols = j == 2 ? fe : m->hidden;
                    t[k] = (pt_st_tensor){.ndim = 2, .shape = {rows, cols},
                                          .bytes = (size_t)(rows * cols) * sizeof(float)};
                    snprintf(t[k].name, sizeof t[k].name, "layers.%d.experts.%d.%s.w", (int)l,
                             (int)e, kinds[j]);
                    snprintf(t[k].dtype, sizeof t[k].dtype, "F32");
                }
        }
    return k;
}

static int create_files(const char *tmp, pt_trainer *r, int64_t step, pt_err *err)
{
    const pt_net *n = &r->net;
    /* every tensor of the stage: this rank's, and the experts its ep group's others hold */
    size_t total = (size_t)n->n_param + (size_t)other_experts(n, NULL);
    pt_st_tensor *mt = calloc(total + 1, sizeof *mt);
    pt_st_tensor *ot = calloc(2 * total + 1, sizeof *ot);
    int k = 0;
    for (int i = 0; mt && ot && i < n->n_param; i++) {
        const pt_param *q = &n->param[i];
        if (!pt_param_writer(n, q))
            continue;
        int64_t shape[2];
        size_t bytes = (size_t)whole_count(n, q, shape) * sizeof(float);
        mt[k] = (pt_st_tensor){.ndim = q->ndim, .shape = {shape[0], shape[1]}, .bytes = bytes};
        snprintf(mt[k].name, sizeof mt[k].name, "%s", q->name);
        snprintf(mt[k].dtype, sizeof mt[k].dtype, "F32");
        k++;
    }
    if (mt && ot)
        k += other_experts(n, mt + k);
    /* every exp_avg, then every exp_avg_sq: each in the order of the parameters, so a
     * rank's consecutive elements stay consecutive in the file (one write, not one per
     * tensor) */
    for (int j = 0; j < 2 && mt && ot; j++)
        for (int i = 0; i < k; i++) {
            ot[j * k + i] = mt[i];
            snprintf(ot[j * k + i].name, sizeof ot[j * k + i].name, "%s.%s", mt[i].name,
                     j ? "exp_avg_sq" : "exp_avg");
        }
    int rc = mt && ot ? 0 : pt_err_set(err, "out of memory");
    char path[4200], file[64], steps[24], layout[1024];
    snprintf(steps, sizeof steps, "%lld", (long long)step);
    pt_layout_format(&r->plan.layout, layout, sizeof layout);
    /* "format": "pt" is what Hugging Face's loaders look for in a PyTorch checkpoint */
    const char *keys[] = {"format", "producer", "model", "layout", "step", "plan_hash"};
    const char *vals[] = {"pt", "ptrun", r->plan.model.name, layout, steps, r->plan_hash};
    for (int j = 0; j < 2 && rc == 0; j++) {
        shard_name(file, sizeof file, j ? "optim" : "model", r->stage, r->plan.layout.pp);
        snprintf(path, sizeof path, "%s/%s", tmp, file);
        rc = pt_st_create(path, j ? ot : mt, j ? 2 * k : k, keys, vals, 6, err);
    }
    free(mt);
    free(ot);
    return rc;
}

/* A file of the checkpoint this rank writes pieces into. Pieces that follow each other
 * both in memory and in the file are gathered into one write (one per stream: the
 * master weights, or exp_avg and exp_avg_sq, which lie in two runs of the file). */
typedef struct {
    off_t at;
    const float *src;
    int64_t len;
} pending;

typedef struct {
    pt_st_file *hdr;
    int fd;
    pending p[2];
} piece_file;

static int piece_open(piece_file *f, const char *tmp, const char *kind, const pt_trainer *r,
                      pt_err *err)
{
    char path[4200], file[64];
    shard_name(file, sizeof file, kind, r->stage, r->plan.layout.pp);
    snprintf(path, sizeof path, "%s/%s", tmp, file);
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (pt_st_open_header(path, &f->hdr, err))
        return -1;
    if ((f->fd = open(path, O_WRONLY)) < 0)
        return pt_err_set(err, "cannot write '%s': %s", path, strerror(errno));
    return 0;
}

static int piece_flush(piece_file *f, pending *p, pt_err *err)
{
    size_t bytes = (size_t)p->len * sizeof(float), done = 0;
    while (done < bytes) {
        ssize_t put = pwrite(f->fd, (const char *)p->src + done, bytes - done, p->at + (off_t)done);
        if (put <= 0)
            return pt_err_set(err, "cannot write a checkpoint file: %s",
                              put < 0 ? strerror(errno) : "no progress");
        done += (size_t)put;
    }
    p->len = 0;
    return 0;
}

static int piece_close(piece_file *f, int rc, const char *tmp, pt_err *err)
{
    for (int i = 0; i < 2 && f->fd >= 0; i++)
        if (rc == 0 && f->p[i].len > 0)
            rc = piece_flush(f, &f->p[i], err);
    if (f->fd >= 0 && rc == 0 && fsync(f->fd) != 0)
        rc = pt_err_set(err, "cannot sync a checkpoint file in '%s': %s", tmp, strerror(errno));
    if (f->fd >= 0 && close(f->fd) != 0 && rc == 0)
        rc = pt_err_set(err, "cannot write a checkpoint file in '%s': %s", tmp, strerror(errno));
    pt_st_close(f->hdr);
    f->fd = -1;
    f->hdr = NULL;
    return rc;
}

/* len floats from src to elements [whole, whole + len) of tensor `name` of f, through
 * stream s. */
static int piece_put(piece_file *f, int s, const char *name, int64_t whole, const float *src,
                     int64_t len, pt_err *err)
{
    const pt_st_tensor *t;
    if (pt_st_get(f->hdr, name, "F32", -1, NULL, &t, err))
        return -1;
    off_t at = (off_t)(pt_st_file_offset(f->hdr, t) + whole * (int64_t)sizeof(float));
    pending *p = &f->p[s];
    if (p->len > 0 && p->at + (off_t)(p->len * (int64_t)sizeof(float)) == at &&
        p->src + p->len == src) {
        p->len += len;
        return 0;
    }
    if (p->len > 0 && piece_flush(f, p, err))
        return -1;
    *p = (pending){at, src, len};
    return 0;
}

typedef struct {
    piece_file model, optim;
    const host_state *h;
    const pt_net_span *span;  /* the moments' span being written (or read) */
    pt_wsrc *src;             /* reading */
    const pt_net *net;
} run_ctx;

static int put_master(void *ctx, const pt_param *p, int64_t flat, int64_t whole, int64_t len,
                      pt_err *err)
{
    run_ctx *c = ctx;
    return piece_put(&c->model, 0, p->name, whole, c->h->master + flat, len, err);
}

static int put_moments(void *ctx, const pt_param *p, int64_t flat, int64_t whole, int64_t len,
                       pt_err *err)
{
    run_ctx *c = ctx;
    char name[128];
    int64_t at = c->span->opt_at + (flat - c->span->lo);
    snprintf(name, sizeof name, "%s.exp_avg", p->name);
    if (piece_put(&c->optim, 0, name, whole, c->h->m + at, len, err))
        return -1;
    snprintf(name, sizeof name, "%s.exp_avg_sq", p->name);
    return piece_put(&c->optim, 1, name, whole, c->h->v + at, len, err);
}

/* Under ZeRO 0 every replica holds the same elements: fn over those this rank writes,
 * the experts where it is the first of their expert-data-parallel group, the rest where
 * it is the first of dp·cp. */
static int for_own_runs(run_ctx *c, const pt_trainer *r, run_fn fn, pt_err *err)
{
    const pt_net *n = c->net;
    for (int ch = 0; ch < n->layout.vp; ch++) {
        int64_t a = n->chunk_begin[ch], x = n->experts_end[ch], b = n->chunk_end[ch];
        if (r->place.edp_rank == 0 && x > a && for_runs(n, a, x, true, fn, c, err))
            return -1;
        if (r->place.dp_rank == 0 && b > x && for_runs(n, x, b, true, fn, c, err))
            return -1;
    }
    return 0;
}

/* This rank's pieces: master weights and moments it is the writer of. */
static int write_pieces(const char *tmp, pt_trainer *r, const host_state *h, pt_err *err)
{
    pt_net *n = &r->net;
    bool first = r->place.dp_rank == 0, sharded = n->opt_ranks > 1 || n->zero;
    pt_net_span *spans = NULL;
    int n_spans = 0;
    run_ctx c = {.h = h, .model.fd = -1, .optim.fd = -1, .net = n};
    int rc = pt_net_opt_spans(n, r->place.dp_rank, &spans, &n_spans, err);
    if (rc == 0)
        rc = piece_open(&c.model, tmp, "model", r, err) || piece_open(&c.optim, tmp, "optim", r, err);
    /* ZeRO 0 and 1: master weights from the first replica of each element; ZeRO 0 its
     * moments too */
    if (rc == 0 && !n->zero) {
        c.span = &spans[0]; /* ZeRO 0: the whole buffer */
        rc = for_own_runs(&c, r, put_master, err) ||
             (!sharded && for_own_runs(&c, r, put_moments, err));
        first = false; /* written */
    }
    /* ZeRO 2/3: each rank's shards */
    for (int s = 0; rc == 0 && n->zero && s < n_spans; s++)
        rc = for_runs(n, spans[s].lo, spans[s].hi, true, put_master, &c, err);
    for (int s = 0; rc == 0 && (sharded || first) && s < n_spans; s++) {
        c.span = &spans[s];
        rc = for_runs(n, spans[s].lo, spans[s].hi, true, put_moments, &c, err);
    }
    rc = piece_close(&c.model, rc, tmp, err);
    rc = piece_close(&c.optim, rc, tmp, err);
    free(spans);
    return rc ? -1 : 0;
}

/* kind.safetensors.index.json (Hugging Face's format): every tensor of the pp files
 * and the file it is in. */
static int write_index(const char *tmp, const char *kind, int pp, pt_err *err)
{
    json_t *map = json_object(), *root = json_object();
    int64_t total = 0;
    int rc = map && root ? 0 : pt_err_set(err, "out of memory");
    for (int k = 0; k < pp && rc == 0; k++) {
        char path[4200], file[64];
        pt_st_file *f;
        shard_name(file, sizeof file, kind, k, pp);
        snprintf(path, sizeof path, "%s/%s", tmp, file);
        if ((rc = pt_st_open_header(path, &f, err)) != 0)
            break;
        for (int i = 0; i < pt_st_count(f) && rc == 0; i++) {
            const pt_st_tensor *t = pt_st_at(f, i);
            total += (int64_t)t->bytes;
            rc = pt_json_set(map, t->name, json_string(file));
        }
        pt_st_close(f);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.safetensors.index.json", tmp, kind);
    char *text = NULL;
    if (rc == 0 && (pt_json_set(root, "metadata", json_pack("{s:I}", "total_size",
                                                            (json_int_t)total)) ||
                    json_object_set(root, "weight_map", map) ||
                    !(text = pt_json_dump(root))))
        rc = pt_err_set(err, "%s: out of memory", path);
    if (rc == 0)
        rc = pt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    json_decref(map);
    json_decref(root);
    return rc;
}

static int write_meta(const char *tmp, pt_trainer *r, int64_t step, pt_err *err)
{
    const pt_plan *p = &r->plan;
    /* the data position: the step's first sample, past the samples rollbacks skipped */
    pt_ckpt_meta meta = {.format_version = 2, .step = step, .world = r->world,
                         .data_pos = step * p->train.global_batch + r->data_skip,
                         .model = p->model, .run = p->run, .global_batch = p->train.global_batch,
                         .train_tokens = r->train.n};
    pt_layout_format(&p->layout, meta.layout, sizeof meta.layout);
    snprintf(meta.config_hash, sizeof meta.config_hash, "%s", r->config_hash);
    snprintf(meta.plan_hash, sizeof meta.plan_hash, "%s", r->plan_hash);
    snprintf(meta.precision, sizeof meta.precision, "%s", pt_prec_name(p->train.precision));
    return pt_ckpt_meta_write(tmp, &meta, err);
}

/* ---- PowerSGD's state: a file per rank ---------------------------------------------------- */

static void psgd_path(char *buf, size_t n, const char *dir, const pt_trainer *r)
{
    snprintf(buf, n, "%s/powersgd-%05d-of-%05d.safetensors", dir, r->rank + 1, r->world);
}

static int save_psgd(const char *tmp, pt_trainer *r, pt_err *err)
{
    int64_t ne, nq;
    if (!pt_compress_state_sizes(&r->net, &ne, &nq))
        return 0;
    float *e = malloc((size_t)(ne + 1) * sizeof *e), *q = malloc((size_t)(nq + 1) * sizeof *q);
    if (!e || !q) {
        free(e);
        free(q);
        return pt_err_set(err, "out of memory for PowerSGD's state (%lld elements)",
                          (long long)(ne + nq));
    }
    bool ready = pt_compress_state_get(&r->net, e, q);
    pt_st_tensor t[2] = {{.name = "error", .dtype = "F32", .ndim = 1, .shape = {ne}, .data = e,
                          .bytes = (size_t)ne * sizeof *e},
                         {.name = "q", .dtype = "F32", .ndim = 1, .shape = {nq}, .data = q,
                          .bytes = (size_t)nq * sizeof *q}};
    char layout[1024], rank[24], world[24], path[4200];
    pt_layout_format(&r->plan.layout, layout, sizeof layout);
    snprintf(rank, sizeof rank, "%d", r->rank);
    snprintf(world, sizeof world, "%d", r->world);
    const char *keys[] = {"format", "layout", "rank", "world", "q_ready"};
    const char *vals[] = {"ptrun powersgd 1", layout, rank, world, ready ? "1" : "0"};
    psgd_path(path, sizeof path, tmp, r);
    int rc = pt_st_write(path, t, 2, keys, vals, 5, err);
    free(e);
    free(q);
    return rc;
}

/* Reads this rank's PowerSGD state back when the checkpoint was written under this
 * layout and world (on every rank, or on none: Q must agree over the group), else
 * restarts it and notes that in the resume's note. Collective. */
static int load_psgd(pt_trainer *r, const char *dir, const pt_ckpt_meta *meta, pt_err *err)
{
    int64_t ne, nq;
    if (!pt_compress_state_sizes(&r->net, &ne, &nq))
        return 0;
    char layout[1024], path[4200];
    pt_layout_format(&r->plan.layout, layout, sizeof layout);
    psgd_path(path, sizeof path, dir, r);
    bool same = strcmp(meta->layout, layout) == 0 && meta->world == r->world &&
                access(path, F_OK) == 0;
    pt_st_file *f = NULL;
    const pt_st_tensor *e = NULL, *q = NULL;
    int rc = 0;
    if (same && (rc = pt_st_open(path, &f, err)) == 0)
        rc = pt_st_get(f, "error", "F32", 1, &ne, &e, err) ||
             pt_st_get(f, "q", "F32", 1, &nq, &q, err);
    bool all = pt_comm_all_ok(r->comm, same && rc == 0);
    if (all) {
        const char *ready = pt_st_meta(f, "q_ready");
        pt_compress_state_set(&r->net, e->data, q->data, ready && strcmp(ready, "1") == 0);
    } else {
        pt_compress_state_set(&r->net, NULL, NULL, false);
        size_t used = strlen(r->resume_note);
        snprintf(r->resume_note + used, sizeof r->resume_note - used,
                 "%sPowerSGD's errors and Q restart (%s)", used ? "; " : "",
                 rc ? "a rank could not read its state" : "the checkpoint's layout or world "
                                                          "differs, or it has no such state");
    }
    pt_st_close(f);
    /* a damaged file of this layout is an error; a missing or foreign one a restart */
    if (!pt_comm_all_ok(r->comm, rc == 0))
        return rc ? -1 : pt_err_set(err, "another rank could not read its PowerSGD state");
    return 0;
}

/* ---- Delayed FP8 scaling's state: a file per rank --------------------------------------- */

static void fp8_path(char *buf, size_t n, const char *dir, const pt_trainer *r)
{
    snprintf(buf, n, "%s/fp8-%05d-of-%05d.safetensors", dir, r->rank + 1, r->world);
}

/* "delayed/1024": the recipe and history a state file is for. */
static void fp8_kind(const pt_trainer *r, char *buf, size_t n)
{
    snprintf(buf, n, "%s/%d", pt_fp8_recipe_name(r->plan.train.fp8.recipe),
             r->plan.train.fp8.history);
}

static int save_fp8(const char *tmp, pt_trainer *r, pt_err *err)
{
    int64_t nf = pt_fp8_state_floats(&r->net);
    if (nf == 0)
        return 0;
    float *st = malloc((size_t)nf * sizeof *st);
    if (!st)
        return pt_err_set(err, "out of memory for the FP8 scaling state (%lld floats)",
                          (long long)nf);
    int rc = pt_fp8_state_get(&r->net, st, err);
    pt_st_tensor t = {.name = "scaling", .dtype = "F32", .ndim = 1, .shape = {nf}, .data = st,
                      .bytes = (size_t)nf * sizeof *st};
    char layout[1024], kind[64], rank[24], world[24], path[4200];
    pt_layout_format(&r->plan.layout, layout, sizeof layout);
    fp8_kind(r, kind, sizeof kind);
    snprintf(rank, sizeof rank, "%d", r->rank);
    snprintf(world, sizeof world, "%d", r->world);
    const char *keys[] = {"format", "layout", "fp8", "rank", "world"};
    const char *vals[] = {"ptrun fp8 1", layout, kind, rank, world};
    fp8_path(path, sizeof path, tmp, r);
    if (rc == 0)
        rc = pt_st_write(path, &t, 1, keys, vals, 5, err);
    free(st);
    return rc;
}

/* Restores this rank's delayed-scaling state when the checkpoint was written under this
 * layout, world, recipe and history (on every rank, or on none: the tp ranks' scales
 * must agree), else starts it afresh and says so in the resume's note. Collective. */
static int load_fp8(pt_trainer *r, const char *dir, const pt_ckpt_meta *meta, pt_err *err)
{
    int64_t nf = pt_fp8_state_floats(&r->net);
    if (nf == 0)
        return 0;
    char layout[1024], kind[64], path[4200];
    pt_layout_format(&r->plan.layout, layout, sizeof layout);
    fp8_kind(r, kind, sizeof kind);
    fp8_path(path, sizeof path, dir, r);
    bool same = strcmp(meta->layout, layout) == 0 && meta->world == r->world &&
                access(path, F_OK) == 0;
    pt_st_file *f = NULL;
    const pt_st_tensor *t = NULL;
    int rc = 0;
    if (same && (rc = pt_st_open(path, &f, err)) == 0) {
        const char *k = pt_st_meta(f, "fp8");
        same = k && strcmp(k, kind) == 0;
        if (same)
            rc = pt_st_get(f, "scaling", "F32", 1, &nf, &t, err);
    }
    bool all = pt_comm_all_ok(r->comm, same && rc == 0);
    int set = pt_fp8_state_set(&r->net, all ? t->data : NULL, err);
    if (!all) {
        size_t used = strlen(r->resume_note);
        snprintf(r->resume_note + used, sizeof r->resume_note - used,
                 "%sFP8 delayed scaling's amax histories restart (%s)", used ? "; " : "",
                 rc ? "a rank could not read its state"
                    : "the checkpoint's layout, world, recipe or history differs, or it has "
                      "no such state");
    }
    pt_st_close(f);
    /* a damaged file of this layout is an error; a missing or foreign one a restart */
    if (!pt_comm_all_ok(r->comm, rc == 0 && set == 0))
        return rc || set ? -1 : pt_err_set(err, "another rank could not read its FP8 state");
    return 0;
}

/* Every rank writes its pieces into one temporary folder that rank 0 made, into files
 * each stage's first rank created; rank 0 then writes the indexes and meta.json and
 * commits the folder, only if every rank succeeded. */
int pt_trainer_save(pt_trainer *r, int64_t step, pt_err *err)
{
    const char *dir = r->o.ckpt;
    if (!dir)
        return pt_err_set(err, "no checkpoint directory was given");
    host_state h;
    char tmp[4096] = "";
    int rc = host_state_alloc(&h, &r->net, true, err);
    if (rc == 0)
        rc = pt_net_get_own_master(&r->net, h.master, err) ||
             pt_net_get_state(&r->net, NULL, h.m, h.v, err);
    if (rc == 0 && r->rank == 0)
        rc = pt_ckpt_begin(dir, step, tmp, sizeof tmp, err);
    if (!pt_comm_all_ok(r->comm, rc == 0) || pt_comm_bcast(r->comm, tmp, sizeof tmp, err)) {
        host_state_free(&h);
        return rc ? rc : pt_err_set(err, "another rank could not start the checkpoint");
    }
    bool leader = r->place.tp_rank == 0 && r->place.dp_rank == 0;
    if (leader)
        rc = create_files(tmp, r, step, err);
    if (pt_comm_all_ok(r->comm, rc == 0)) {
        rc = write_pieces(tmp, r, &h, err);
        if (rc == 0)
            rc = save_psgd(tmp, r, err);
        if (rc == 0)
            rc = save_fp8(tmp, r, err);
    }
    else if (rc == 0)
        rc = pt_err_set(err, "another rank could not create its checkpoint files in %s", tmp);
    host_state_free(&h);
    bool all = pt_comm_all_ok(r->comm, rc == 0);
    if (r->rank == 0) {
        if (all && (rc = write_index(tmp, "model", r->plan.layout.pp, err)) == 0 &&
            (rc = write_index(tmp, "optim", r->plan.layout.pp, err)) == 0 &&
            (rc = write_meta(tmp, r, step, err)) == 0)
            rc = pt_ckpt_commit(tmp, dir, r->o.keep_ckpt, err);
        else
            pt_ckpt_abort(tmp);
    }
    if (!pt_comm_all_ok(r->comm, rc == 0) && rc == 0)
        rc = pt_err_set(err, "another rank could not write its part of checkpoint %s", dir);
    if (rc == 0)
        snprintf(r->saved_path, sizeof r->saved_path, "%s/step_%08lld", dir, (long long)step);
    return rc;
}

/* ---- Reading: a checkpoint of ours as a source of whole tensors ------------------------ */

typedef struct {
    pt_wsrc base;
    char dir[4096];
    json_t *map[2];           /* the model's and the optimizer's weight maps */
    char (*name)[64];         /* files opened so far */
    pt_st_file **file;
    int n_files;
} ckpt_src;

static int ckpt_src_file(ckpt_src *s, const char *file, pt_st_file **out, pt_err *err)
{
    for (int i = 0; i < s->n_files; i++)
        if (strcmp(s->name[i], file) == 0) {
            *out = s->file[i];
            return 0;
        }
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", s->dir, file);
    if (strchr(file, '/') || strlen(file) >= 64)
        return pt_err_set(err, "%s: the index names file '%.80s', which is not a file of this "
                          "folder", s->dir, file);
    void *nn = realloc(s->name, (size_t)(s->n_files + 1) * sizeof *s->name);
    if (nn)
        s->name = nn;
    void *nf = realloc(s->file, (size_t)(s->n_files + 1) * sizeof *s->file);
    if (nf)
        s->file = nf;
    if (!nn || !nf)
        return pt_err_set(err, "out of memory");
    if (pt_st_open_header(path, out, err))
        return -1;
    snprintf(s->name[s->n_files], 64, "%s", file);
    s->file[s->n_files++] = *out;
    return 0;
}

static int ckpt_src_read(pt_wsrc *base, const char *name, int ndim, const int64_t *shape,
                         int64_t lo, int64_t count, float *dst, pt_err *err)
{
    ckpt_src *s = (ckpt_src *)base;
    const json_t *file = NULL;
    for (int i = 0; i < 2 && !file; i++)
        file = s->map[i] ? json_object_get(s->map[i], name) : NULL;
    if (!json_is_string(file))
        return pt_err_set(err, "%s: no tensor '%s' in its index%s", s->dir, name,
                          s->map[1] ? "es" : " (model.safetensors.index.json)");
    pt_st_file *f;
    const pt_st_tensor *t;
    if (ckpt_src_file(s, json_string_value(file), &f, err) ||
        pt_st_get(f, name, "F32", ndim, shape, &t, err))
        return -1;
    return pt_st_read(f, t, lo * (int64_t)sizeof(float), (size_t)count * sizeof(float), dst,
                      err);
}

static void ckpt_src_close(pt_wsrc *base)
{
    ckpt_src *s = (ckpt_src *)base;
    for (int i = 0; i < s->n_files; i++)
        pt_st_close(s->file[i]);
    json_decref(s->map[0]);
    json_decref(s->map[1]);
    free(s->name);
    free(s->file);
    free(s);
}

/* kind.safetensors.index.json's weight map, checked to be an object of strings. */
static json_t *read_index(const char *dir, const char *kind, pt_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.safetensors.index.json", dir, kind);
    char *text = pt_json_read_file(path, err);
    pt_json_obj top;
    json_t *root = text ? pt_json_parse_object(text, path, &top, err) : NULL;
    free(text);
    json_t *map = root ? json_object_get(root, "weight_map") : NULL;
    const char *key;
    json_t *v;
    int ok = json_is_object(map);
    json_object_foreach(ok ? map : NULL, key, v) ok = ok && json_is_string(v);
    if (root && !ok)
        pt_err_set(err, "%s: field 'weight_map': expected an object of file names", path);
    if (ok)
        json_incref(map);
    json_decref(root);
    return ok ? map : NULL;
}

int pt_ckpt_src_open(const char *dir, bool with_optim, pt_wsrc **out, pt_err *err)
{
    ckpt_src *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return pt_err_set(err, "out of memory");
    s->base = (pt_wsrc){ckpt_src_read, ckpt_src_close};
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    if (!(s->map[0] = read_index(dir, "model", err)) ||
        (with_optim && !(s->map[1] = read_index(dir, "optim", err)))) {
        ckpt_src_close(&s->base);
        return -1;
    }
    *out = &s->base;
    return 0;
}

/* ---- Reading into this rank's state ----------------------------------------------------- */

static int get_master(void *ctx, const pt_param *p, int64_t flat, int64_t whole, int64_t len,
                      pt_err *err)
{
    run_ctx *c = ctx;
    int64_t shape[2];
    pt_param_whole_shape(c->net, p, shape);
    return c->src->read(c->src, p->name, p->ndim, shape, whole, len, c->h->master + flat, err);
}

static int get_moments(void *ctx, const pt_param *p, int64_t flat, int64_t whole, int64_t len,
                       pt_err *err)
{
    run_ctx *c = ctx;
    int64_t shape[2], at = c->span->opt_at + (flat - c->span->lo);
    char name[128];
    pt_param_whole_shape(c->net, p, shape);
    snprintf(name, sizeof name, "%s.exp_avg", p->name);
    if (c->src->read(c->src, name, p->ndim, shape, whole, len, c->h->m + at, err))
        return -1;
    snprintf(name, sizeof name, "%s.exp_avg_sq", p->name);
    return c->src->read(c->src, name, p->ndim, shape, whole, len, c->h->v + at, err);
}

/* Sets this rank's master weights (and with `moments` its Adam moments; else they
 * restart at zero) from src. Collective when the model's state is (pt_net_set_state). */
static int load_from(pt_trainer *r, pt_wsrc *src, bool moments, pt_err *err)
{
    pt_net *n = &r->net;
    host_state h;
    pt_net_span *spans = NULL;
    int n_spans = 0;
    run_ctx c = {.src = src, .net = n, .h = &h};
    int rc = host_state_alloc(&h, n, moments, err);
    if (rc == 0)
        rc = for_runs(n, 0, n->n_elems, false, get_master, &c, err);
    if (rc == 0 && moments)
        rc = pt_net_opt_spans(n, r->place.dp_rank, &spans, &n_spans, err);
    for (int s = 0; rc == 0 && s < n_spans; s++) {
        c.span = &spans[s];
        rc = for_runs(n, spans[s].lo, spans[s].hi, false, get_moments, &c, err);
    }
    free(spans);
    /* every rank sets its state, or none: pt_net_set_state is collective under ZeRO */
    if (!pt_comm_all_ok(r->comm, rc == 0)) {
        host_state_free(&h);
        return rc ? -1 : pt_err_set(err, "another rank could not read its part of the "
                                         "checkpoint");
    }
    rc = pt_net_set_state(n, h.master, moments ? h.m : NULL, moments ? h.v : NULL, err);
    host_state_free(&h);
    return rc;
}

/* ---- Checking a checkpoint against this run ------------------------------------------- */

/* The first field of the model spec (its name aside, which is a label) where the
 * checkpoint's and the plan's differ, said with both values; "" when they agree. */
static void model_diff(const pt_model *ck, const pt_model *plan, char *out, size_t n)
{
    json_t *a = pt_model_json_obj(ck), *b = pt_model_json_obj(plan);
    const char *key;
    json_t *vb;
    out[0] = '\0';
    json_object_foreach(b, key, vb) {
        const json_t *va = json_object_get(a, key);
        if (strcmp(key, "name") == 0 || (va && json_equal(va, vb)))
            continue;
        char *ta = va ? json_dumps(va, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        char *tb = json_dumps(vb, JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(out, n, "model field '%s': the checkpoint's is %s, this plan's %s", key,
                 ta ? ta : "absent", tb ? tb : "?");
        free(ta);
        free(tb);
        break;
    }
    json_decref(a);
    json_decref(b);
}

/* Appends "name A -> B" to the note when the settings differ. */
static void note_real(char *note, size_t n, const char *name, double ck, double now)
{
    size_t len = strlen(note);
    if (ck != now && len < n)
        snprintf(note + len, n - len, "%s%s %g -> %g", len ? ", " : "", name, ck, now);
}

static void note_text(char *note, size_t n, const char *name, const char *ck, const char *now)
{
    size_t len = strlen(note);
    if (strcmp(ck, now) != 0 && len < n)
        snprintf(note + len, n - len, "%s%s %s -> %s", len ? ", " : "", name, ck, now);
}

/* What must match for the run to go on (the model, the seed and the training data,
 * which decide the weights' meaning and the sample order); what changes is noted. */
static int check_meta(pt_trainer *r, const char *path, const pt_ckpt_meta *m, bool weights_only,
                      pt_err *err)
{
    const pt_plan *p = &r->plan;
    char diff[512], layout[1024];
    model_diff(&m->model, &p->model, diff, sizeof diff);
    if (diff[0])
        return pt_err_set(err, "%s: written for another model: %s", path, diff);
    if (weights_only)
        return 0;
    if (m->run.seed != p->run.seed)
        return pt_err_set(err, "%s: training field 'seed': the checkpoint's is %llu, this "
                               "plan's %llu (the seed orders the data and keys dropout; "
                               "--init-from takes the weights alone)", path,
                          (unsigned long long)m->run.seed, (unsigned long long)p->run.seed);
    if (m->train_tokens != r->train.n)
        return pt_err_set(err, "%s: training field 'train_tokens': the checkpoint was trained "
                               "on %lld tokens (%s), this run's data have %lld (%s); other "
                               "data would not continue its sample order (--init-from takes "
                               "the weights alone)", path, (long long)m->train_tokens,
                          m->run.data[0] ? m->run.data : "the built-in corpus",
                          (long long)r->train.n, p->run.data[0] ? p->run.data : "the built-in "
                                                                                "corpus");
    if (m->step > p->run.steps)
        return pt_err_set(err, "%s/meta.json: field 'step' = %lld is beyond this run's %lld "
                               "steps (--steps runs longer)", path, (long long)m->step,
                          (long long)p->run.steps);
    r->resume_note[0] = '\0';
    pt_layout_format(&p->layout, layout, sizeof layout);
    char *note = r->resume_note;
    size_t n = sizeof r->resume_note;
    note_text(note, n, "layout", m->layout, layout);
    note_real(note, n, "world", (double)m->world, r->world);
    note_real(note, n, "steps", (double)m->run.steps, (double)p->run.steps);
    note_real(note, n, "global batch", (double)m->global_batch, (double)p->train.global_batch);
    note_real(note, n, "lr", m->run.lr, p->run.lr);
    note_real(note, n, "min lr", m->run.min_lr, p->run.min_lr);
    note_real(note, n, "warmup", (double)m->run.warmup_steps, (double)p->run.warmup_steps);
    note_real(note, n, "weight decay", m->run.weight_decay, p->run.weight_decay);
    note_real(note, n, "grad clip", m->run.grad_clip, p->run.grad_clip);
    note_real(note, n, "dropout", m->run.dropout, p->run.dropout);
    note_text(note, n, "precision", m->precision, pt_prec_name(p->train.precision));
    return 0;
}

/* The sample offset that continues the checkpoint's data position under this run's
 * global batch (data_pos - step x batch: the step's first sample, whatever the batch
 * that wrote it), checked so that every sample the steps from the checkpoint's to this
 * run's last read is a global index (the meta's own bounds, pt_ckpt_meta_read, leave
 * that to the run, whose steps and batch they do not know). */
static int resume_skip(const pt_trainer *r, const char *path, const pt_ckpt_meta *m,
                       int64_t *skip, pt_err *err)
{
    int64_t at, batch = r->plan.train.global_batch;
    pt_err why;
    if (!pt_mul64(m->step, batch, &at) || !pt_add64(m->data_pos, -at, skip))
        pt_err_set(&why, "step %lld times the global batch %lld overflows", (long long)m->step,
                   (long long)batch);
    else if (pt_trainer_check_skip(r, *skip, m->step, &why) == 0)
        return 0;
    return pt_err_set(err, "%s/meta.json: data_pos %lld cannot go on under this run: %s", path,
                      (long long)m->data_pos, why.msg);
}

/* Loads the checkpoint at path, whose meta.json pt_ckpt_find read, after checking that
 * it can continue this run, and takes its data position. Collective. */
int pt_trainer_load_ckpt(pt_trainer *r, const char *path, const pt_ckpt_meta *meta, pt_err *err)
{
    pt_wsrc *src = NULL;
    int64_t skip = 0;
    int rc = check_meta(r, path, meta, false, err) || resume_skip(r, path, meta, &skip, err);
    if (rc == 0)
        rc = pt_ckpt_src_open(path, true, &src, err);
    /* the checks and the files are the same on every rank: all fail or none */
    if (!pt_comm_all_ok(r->comm, rc == 0)) {
        if (src)
            src->close(src);
        return rc ? -1 : pt_err_set(err, "another rank could not open checkpoint %s", path);
    }
    rc = load_from(r, src, true, err);
    src->close(src);
    if (!pt_comm_all_ok(r->comm, rc == 0))
        return rc ? -1 : pt_err_set(err, "another rank could not load checkpoint %s", path);
    rc = load_psgd(r, path, meta, err);
    if (rc == 0)
        rc = load_fp8(r, path, meta, err);
    if (rc == 0) {
        r->data_skip = skip;
        r->train_s.skip = skip;
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
    snprintf(out->layout, sizeof out->layout, "%s", meta.layout);
    out->world = meta.world;
    snprintf(out->changed, sizeof out->changed, "%s", r->resume_note);
    return 0;
}

int pt_trainer_init_from(pt_trainer *r, const char *dir, pt_trainer_initialized *out,
                         pt_err *err)
{
    char config[4200], meta_path[4200];
    pt_ckpt_meta meta;
    pt_wsrc *src = NULL;
    memset(out, 0, sizeof *out);
    snprintf(config, sizeof config, "%s/config.json", dir);
    snprintf(meta_path, sizeof meta_path, "%s/meta.json", dir);
    struct stat st;
    int rc;
    if (stat(config, &st) == 0 && stat(meta_path, &st) != 0) {
        out->hugging_face = true;
        snprintf(out->path, sizeof out->path, "%s", dir);
        rc = pt_hf_open(dir, &r->plan.model, &src, err);
    } else {
        rc = pt_ckpt_find(dir, NULL, -1, out->path, sizeof out->path, &meta, err) ||
             check_meta(r, out->path, &meta, true, err) ||
             pt_ckpt_src_open(out->path, false, &src, err);
        out->step = meta.step;
    }
    if (!pt_comm_all_ok(r->comm, rc == 0)) {
        if (src)
            src->close(src);
        return rc ? -1 : pt_err_set(err, "another rank could not open %s", dir);
    }
    rc = load_from(r, src, false, err);
    src->close(src);
    return rc;
}

const char *pt_trainer_saved_path(const pt_trainer *r)
{
    return r->saved_path;
}

int pt_trainer_test_spike(pt_trainer *r, int64_t step, pt_err *err)
{
    const char *at = getenv("PT_TEST_SPIKE_AT");
    if (!at || r->spike_fired || atoll(at) != step + 1)
        return 0;
    r->spike_fired = true;
    float *w = malloc((size_t)r->net.n_elems * sizeof *w + 1);
    int rc = w ? pt_net_get_state(&r->net, w, NULL, NULL, err) : pt_err_set(err, "out of memory");
    for (int64_t i = 0; rc == 0 && i < r->net.n_elems; i++)
        w[i] *= 100.0f;
    if (rc == 0)
        rc = pt_net_set_state(&r->net, w, NULL, NULL, err);
    free(w);
    return rc;
}
