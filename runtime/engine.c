/*
 * The engine: one optimizer step is this rank's schedule program (planner/sched.c)
 * executed instruction by instruction — forward and backward of micro-batches drawn
 * from the sampler, gradient reduction, clipping and AdamW — the same program the
 * simulator timed. Every instruction is a span in the trace.
 */
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double pt_lr_at(const pt_run_opts *r, int64_t step)
{
    if (r->warmup_steps > 0 && step < r->warmup_steps)
        return r->lr * (double)(step + 1) / (double)r->warmup_steps;
    int64_t decay = r->steps - r->warmup_steps;
    if (decay <= 1)
        return r->lr;
    double x = (double)(step - r->warmup_steps) / (double)(decay - 1);
    if (x > 1)
        x = 1;
    /* cosine from lr to min_lr (Loshchilov & Hutter 2017, SGDR, without restarts) */
    const double pi = 3.14159265358979323846;
    return r->min_lr + 0.5 * (r->lr - r->min_lr) * (1.0 + cos(pi * x));
}

/* Token buffers for one micro-batch of the plan. */
typedef struct {
    int32_t *inputs, *targets;
} batch;

static int batch_alloc(batch *b, int64_t tokens)
{
    b->inputs = malloc((size_t)tokens * sizeof *b->inputs);
    b->targets = malloc((size_t)tokens * sizeof *b->targets);
    return b->inputs && b->targets ? 0 : -1;
}

static void batch_free(batch *b)
{
    free(b->inputs);
    free(b->targets);
}

/* Global index of the first sample of micro-batch mb of this rank's step: the data-
 * parallel ranks take consecutive shares of the global batch (one rank here). */
static int64_t first_sample(const pt_plan *p, int64_t step, int mb)
{
    return step * p->train.global_batch + (int64_t)mb * p->layout.mbs;
}

/* The activation slot of micro-batch mb: micro-batches in flight take the slots in
 * turn; the schedule never keeps more in flight than there are slots. */
static int slot_of(const pt_net *n, int mb)
{
    return mb % n->n_slots;
}

static int optimizer_step(pt_net *n, const pt_plan *p, int64_t step, pt_step_stats *out)
{
    pt_kernels *kn = n->kn;
    double sumsq = kn->sumsq(kn, n->grad, n->n_elems);
    out->grad_norm = sqrt(sumsq);
    out->lr = pt_lr_at(&p->run, step);
    float scale = pt_k_clip_scale(out->grad_norm, p->run.grad_clip);
    /* AdamW per parameter: weight decay on matrices only (GPT-2/llm.c practice). */
    for (int i = 0; i < n->n_param; i++) {
        const pt_param *q = &n->param[i];
        uint16_t *b16 = n->w == n->master ? NULL : (uint16_t *)n->w + q->offset;
        kn->adamw(kn, n->master + q->offset, b16, n->grad + q->offset, n->m + q->offset,
                  n->v + q->offset, q->count, (float)out->lr, 0.9f, 0.95f, 1e-8f,
                  q->decay ? (float)p->run.weight_decay : 0.0f, (int)step + 1, scale);
    }
    kn->zero(kn, n->grad, (size_t)n->n_elems * sizeof(float));
    return kn->sync(kn);
}

static int run_instruction(pt_net *n, const pt_ins *in, const pt_sampler *data,
                           const pt_plan *p, int64_t step, batch *b, double *loss_sum,
                           pt_step_stats *out, pt_err *err)
{
    int64_t tokens_per_step = p->train.global_batch * p->model.seq;
    switch (in->kind) {
    case PT_INS_FWD:
        pt_sampler_fill(data, first_sample(p, step, in->mb), (int)p->layout.mbs, b->inputs,
                        b->targets);
        return pt_net_forward(n, slot_of(n, in->mb), b->inputs, b->targets,
                              1.0f / (float)tokens_per_step, loss_sum, err);
    case PT_INS_BWD:
        return pt_net_backward(n, slot_of(n, in->mb), err);
    case PT_INS_REDUCE_GRADS:
        return 0; /* one data-parallel rank: nothing to reduce */
    case PT_INS_OPTIM_STEP:
        return optimizer_step(n, p, step, out) ? pt_err_set(err, "%s", n->kn->err) : 0;
    default:
        return pt_err_set(err, "instruction %s needs pipeline parallelism, which this runtime "
                               "does not run yet", pt_ins_name(in->kind));
    }
}

int pt_engine_step(pt_net *n, const pt_sched *s, const pt_sampler *data, const pt_plan *p,
                   int64_t step, pt_step_stats *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    double t0 = pt_trace_now(), loss_sum = 0;
    batch b;
    if (batch_alloc(&b, p->layout.mbs * p->model.seq)) {
        batch_free(&b);
        return pt_err_set(err, "out of memory");
    }
    const pt_prog *prog = &s->prog[0];
    int rc = 0;
    for (int i = 0; i < prog->n && rc == 0; i++) {
        const pt_ins *in = &prog->ins[i];
        double ti = pt_trace_now();
        rc = run_instruction(n, in, data, p, step, &b, &loss_sum, out, err);
        char name[48];
        snprintf(name, sizeof name, "%s mb%d", pt_ins_name(in->kind), in->mb);
        pt_trace_add(n->trace, n->rank, 0, name, NULL, ti, pt_trace_now());
    }
    batch_free(&b);
    out->loss = loss_sum / (double)(p->train.global_batch * p->model.seq);
    out->time_s = pt_trace_now() - t0;
    return rc;
}

int pt_engine_eval(pt_net *n, const pt_sampler *data, int64_t batches, double *loss,
                   pt_err *err)
{
    int64_t rows = n->layout.mbs, tokens = rows * n->spec.seq;
    batch b;
    if (batch_alloc(&b, tokens)) {
        batch_free(&b);
        return pt_err_set(err, "out of memory");
    }
    double sum = 0;
    int rc = 0;
    for (int64_t i = 0; i < batches && rc == 0; i++) {
        /* Validation samples in a fixed order: windows 0, 1, ... of epoch 0's order. */
        pt_sampler_fill(data, i * rows, (int)rows, b.inputs, b.targets);
        rc = pt_net_forward(n, 0, b.inputs, b.targets, 0.0f, &sum, err);
    }
    batch_free(&b);
    *loss = sum / (double)(batches * tokens);
    return rc;
}
