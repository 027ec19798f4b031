/*
 * The model as the runtime runs it (op lists dispatched to kernels): the gradient
 * of the loss with respect to parameters of every kind matches central finite
 * differences, for a GPT-2-shaped and a LLaMA-shaped model; recomputation (none,
 * selective, full) gives bit-identical gradients; the parameter table matches
 * the planner's count; and with a (fake) device timer, op spans take the device's
 * times after each step and validation batch, in order, within their instruction
 * (and, where a CUDA device is present, with the real one).
 */
#include "check.h"
#include "runtime.h"
/* white-box: the master weights and gradients, the chunks, the head's pool and the
 * device timers of a model */
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

/* kind 0: GPT-2 shaped; 1: LLaMA shaped; 2: LLaMA shaped with heads of 8 on h = 16
 * (head_dim apart from h/a: attention 32 wide); 3: that with q/k norms (Qwen3); 4: LLaMA
 * shaped with its second layer a mixture of 4 experts, top-2 renormalised, with the
 * load-balancing loss (Mixtral); 5: GPT shaped, every layer 4 GELU experts, top-2 of
 * sigmoid scores as they are, a capacity factor that drops copies */
static pt_model small(int kind)
{
    if (kind == 4) {
        pt_model m = small(1);
        m.moe = (pt_moe){.experts = 4, .top_k = 2, .expert_ffn = 12, .first_dense = 1,
                         .every = 1, .score = PT_ROUTER_SOFTMAX, .renorm = true,
                         .aux_loss = 0.05};
        return m;
    }
    if (kind == 5) {
        pt_model m = small(0);
        m.bias = false; /* ptrun's experts have none */
        m.moe = (pt_moe){.experts = 4, .top_k = 2, .expert_ffn = 12, .every = 1,
                         .score = PT_ROUTER_SIGMOID, .capacity = 0.75};
        return m;
    }
    bool llama = kind >= 1;
    pt_model m = {.name = "t", .layers = 2, .hidden = 16, .heads = 4, .kv_heads = llama ? 2 : 4,
                  .ffn = llama ? 24 : 64, .vocab = 32, .seq = 8,
                  .norm = llama ? PT_NORM_RMSNORM : PT_NORM_LAYERNORM,
                  .act = llama ? PT_ACT_SWIGLU : PT_ACT_GELU,
                  .pos = llama ? PT_POS_ROPE : PT_POS_LEARNED, .tied_embeddings = !llama,
                  .bias = !llama, .dropout = false, .head_dim = kind >= 2 ? 8 : 0,
                  .qk_norm = kind == 3};
    return m;
}

static const char *const kind_names[] = {"gpt", "llama", "llama head_dim 8",
                                         "llama head_dim 8 qk_norm", "llama moe",
                                         "gpt moe sigmoid capacity"};

static pt_plan plan_of(pt_model m, pt_recompute rc)
{
    pt_plan p = {.format_version = PT_PLAN_FORMAT_VERSION, .model = m};
    pt_err err;
    pt_cluster_get("dgx-a100-80g", &p.cluster, &err);
    p.cluster.nodes = 1;
    p.cluster.devices_per_node = 1;
    pt_train_default(&p.train, NULL);
    p.train.global_batch = 2;
    pt_run_opts_default(&p.run, &m);
    pt_layout_default(&p.layout);
    p.layout.mbs = 2;
    p.layout.n_micro = 1;
    p.layout.recompute = rc;
    return p;
}

typedef struct {
    int32_t tok[16], tgt[16];
} data;

static data make_data(void)
{
    data d;
    for (int i = 0; i < 16; i++) {
        d.tok[i] = (i * 7 + 3) % 32;
        d.tgt[i] = (i * 5 + 1) % 32;
    }
    return d;
}

/* The objective the gradients are of: the mean token loss, and with experts their
 * load-balancing loss, a mean over the 2 sequences (a training forward computes it). */
static double loss_of(pt_net *n, const data *d)
{
    double sum = 0;
    pt_err err;
    bool moe = n->spec.moe.experts > 0;
    if (pt_net_forward(n, 0, d->tok, d->tgt, moe ? 1.0f / 16 : 0.0f, &sum, &err))
        fprintf(stderr, "forward: %s\n", err.msg);
    pt_moe_stats st;
    pt_moe_take_stats(n, &st);
    return sum / 16.0 + st.aux / 2;
}

/* A hash of the last forward's routing in slot 0: each MoE layer's chosen experts and
 * the rows of its copies (-1: dropped); 0 for a dense model. */
static uint64_t routing(const pt_net *n)
{
    uint64_t h = 0;
    if (n->spec.moe.experts == 0)
        return 0;
    int64_t rk = 16 * n->spec.moe.top_k; /* the test's 16 tokens */
    for (int64_t l = 0; l < n->n_layers; l++) {
        const pt_layer_acts *L = &n->slot[0]->layer[l];
        for (int64_t i = 0; L->moe_idx && i < rk; i++)
            h = (h ^ (uint64_t)(L->moe_idx[i] + 7 * (L->moe_pos[i] + 1))) * 1099511628211ull;
    }
    return h;
}

/* Analytic gradients (mean loss over the 16 tokens) into n->grad. */
static void gradients(pt_net *n, const data *d)
{
    double sum = 0;
    pt_err err;
    n->kn->zero(n->kn, n->grad, (size_t)n->n_elems * sizeof(float));
    if (pt_net_forward(n, 0, d->tok, d->tgt, 1.0f / 16, &sum, &err) ||
        pt_net_backward(n, 0, &err))
        fprintf(stderr, "training pass: %s\n", err.msg);
    pt_moe_stats st; /* its figures are not loss_of's */
    pt_moe_take_stats(n, &st);
}

static void check_fd(int kind)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    pt_plan p = plan_of(small(kind), PT_RECOMPUTE_NONE);
    pt_net *n;
    pt_err err;
    CHECK_INT(pt_net_init(&n, &p, kn, 0, 1, 42, NULL, &err), 0);
    data d = make_data();
    gradients(n, &d);
    uint64_t routed = routing(n);
    int compared = 0, skipped = 0;
    /* A few elements of every parameter: central differences of the fp32 loss, with a
     * step small enough that their O(eps²) truncation error stays near 2 % */
    const float eps = 5e-3f;
    double worst = 0;
    for (int i = 0; i < pt_net_param_count(n); i++) {
        const pt_param *q = pt_net_param_at(n, i);
        for (int64_t j = 0; j < q->count; j += q->count / 3 + 1) {
            float *w = n->master + q->offset + j, keep = *w;
            *w = keep + eps;
            double lp = loss_of(n, &d);
            uint64_t rp = routing(n);
            *w = keep - eps;
            double lm = loss_of(n, &d);
            *w = keep;
            /* a step that changes which experts a token goes to (or which copies a
             * capacity drops) jumps: the derivative does not see it, so it is not
             * compared (and counted) */
            if (rp != routing(n) || rp != routed) {
                skipped++;
                continue;
            }
            compared++;
            double fd = (lp - lm) / (2.0 * eps), g = n->grad[q->offset + j];
            double e = fabs(fd - g) / fmax(fabs(g), 1e-3);
            if (e > worst)
                worst = e;
            if (e > 0.05)
                fprintf(stderr, "%s %s[%lld]: analytic %.6g, finite differences %.6g\n",
                        kind_names[kind], q->name, (long long)j, g, fd);
            CHECK(e <= 0.05);
        }
    }
    if (getenv("PT_TEST_VERBOSE"))
        printf("%s: worst relative gradient error %.3g (%d elements, %d skipped: the step "
               "moved a token's experts)\n", kind_names[kind], worst, compared, skipped);
    CHECK(skipped * 10 <= compared); /* the experts' gradients are mostly compared */
    pt_net_free(n);
    pt_kernels_destroy(kn);
}

/* none, selective and full recomputation run the same kernels on the same values. */
static void check_recompute(int kind)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    data d = make_data();
    float *ref = NULL;
    int64_t count = 0;
    for (int rc = PT_RECOMPUTE_NONE; rc <= PT_RECOMPUTE_FULL; rc++) {
        pt_plan p = plan_of(small(kind), (pt_recompute)rc);
        pt_net *n;
        pt_err err;
        CHECK_INT(pt_net_init(&n, &p, kn, 0, 1, 42, NULL, &err), 0);
        gradients(n, &d);
        if (!ref) {
            count = pt_net_elems(n);
            ref = malloc((size_t)count * sizeof *ref);
            memcpy(ref, n->grad, (size_t)count * sizeof *ref);
        } else {
            CHECK(memcmp(ref, n->grad, (size_t)count * sizeof *ref) == 0);
        }
        pt_net_free(n);
    }
    free(ref);
    pt_kernels_destroy(kn);
}

/* Same seed, same weights; the initialisation does not depend on the layout's
 * micro-batching (slots) and differs with the seed. */
static void check_init(void)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    pt_plan p = plan_of(small(0), PT_RECOMPUTE_NONE);
    pt_net *a, *b, *c;
    pt_err err;
    CHECK_INT(pt_net_init(&a, &p, kn, 0, 1, 7, NULL, &err), 0);
    CHECK_INT(pt_net_init(&b, &p, kn, 0, 3, 7, NULL, &err), 0);
    CHECK_INT(pt_net_init(&c, &p, kn, 0, 1, 8, NULL, &err), 0);
    size_t bytes = (size_t)pt_net_elems(a) * sizeof(float);
    CHECK(memcmp(a->master, b->master, bytes) == 0);
    CHECK(memcmp(a->master, c->master, bytes) != 0);
    const pt_param *ln = pt_net_param(a, "layers.1.norm2.w");
    CHECK(ln && a->master[ln->offset] == 1.0f);
    const pt_param *wte = pt_net_param(a, "wte");
    CHECK(wte && wte->shape[0] == 128 && wte->shape[1] == 16); /* 32 padded to 128 */
    CHECK(pt_net_param_at(a, 0) == wte && !pt_net_param_at(a, -1) &&
          !pt_net_param_at(a, pt_net_param_count(a)));
    pt_net_free(a);
    pt_net_free(b);
    pt_net_free(c);
    pt_kernels_destroy(kn);
}

/* Uneven stages: 6 layers on pp=2, vp=2 with first_layers=2, last_layers=4. Rank 0
 * holds layers 0 and 3 (chunks of 1), rank 1 layers 1, 2 and 4, 5 (chunks of 2), each
 * initialised as the same-named parameter of the whole model on one rank. */
static void check_uneven_stages(void)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    pt_model m = small(1);
    m.layers = 6;
    pt_plan whole = plan_of(m, PT_RECOMPUTE_NONE);
    pt_plan p = whole;
    p.cluster.devices_per_node = 2;
    p.layout.pp = 2;
    p.layout.vp = 2;
    p.layout.schedule = PT_SCHED_INTERLEAVED;
    p.layout.n_micro = 2;
    p.train.global_batch = 4;
    p.layout.first_layers = 2;
    p.layout.last_layers = 4;
    CHECK_INT(pt_layout_check(&m, &p.cluster, 4, &p.layout, NULL), 0);
    pt_net *one, *st[2];
    pt_err err;
    CHECK_INT(pt_net_init(&one, &whole, kn, 0, 1, 7, NULL, &err), 0);
    static const int64_t chunk[2] = {1, 2}, first[2][2] = {{0, 3}, {1, 4}};
    static const bool holds[2][6] = {{1, 0, 0, 1, 0, 0}, {0, 1, 1, 0, 1, 1}};
    for (int r = 0; r < 2; r++) {
        CHECK_INT(pt_net_init(&st[r], &p, kn, r, 2, 7, NULL, &err), 0);
        CHECK_INT(st[r]->chunk_layers[0], chunk[r]);
        CHECK_INT(st[r]->chunk_layers[1], chunk[r]);
        CHECK_INT(st[r]->n_layers, 2 * chunk[r]);
        CHECK_INT(st[r]->chunk_first[0], first[r][0]);
        CHECK_INT(st[r]->chunk_first[1], first[r][1]);
        for (int l = 0; l < 6; l++) {
            char name[48];
            snprintf(name, sizeof name, "layers.%d.mlp_up.w", l);
            const pt_param *q = pt_net_param(st[r], name), *w = pt_net_param(one, name);
            CHECK(!q == !holds[r][l]);
            if (q && w)
                CHECK(memcmp(st[r]->master + q->offset, one->master + w->offset,
                             (size_t)q->count * sizeof(float)) == 0);
        }
    }
    CHECK(pt_net_param(st[0], "wte") && !pt_net_param(st[1], "wte"));
    CHECK(pt_net_param(st[1], "lm_head.w") && !pt_net_param(st[0], "lm_head.w"));
    /* together the stages hold the whole model's parameters */
    CHECK_INT(pt_net_elems(st[0]) + pt_net_elems(st[1]), pt_net_elems(one));
    pt_net_free(one);
    pt_net_free(st[0]);
    pt_net_free(st[1]);
    pt_kernels_destroy(kn);
}

/* Activation slots hold one model chunk each (the memory model's unit): one more slot
 * costs the same on a stage of two one-layer chunks (pp=2, vp=2, 4 layers) as on a
 * stage of one one-layer chunk (pp=2, 2 layers). A slot holding every chunk of the rank
 * would cost twice as much with vp=2. Only the last stage keeps the head's buffers: as
 * many as the schedule has last-chunk micro-batches in flight (1F1B: one). */
static void check_slots_per_chunk(void)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    pt_err err;
    int64_t per_slot[2];
    for (int vp = 1; vp <= 2; vp++) {
        pt_model m = small(0);
        m.layers = 2 * vp;
        pt_plan p = plan_of(m, PT_RECOMPUTE_NONE);
        p.cluster.devices_per_node = 2;
        p.layout.pp = 2;
        p.layout.vp = vp;
        p.layout.schedule = vp > 1 ? PT_SCHED_INTERLEAVED : PT_SCHED_1F1B;
        p.layout.n_micro = 2;
        p.train.global_batch = 4;
        CHECK_INT(pt_layout_check(&m, &p.cluster, 4, &p.layout, NULL), 0);
        pt_net *a, *b;
        CHECK_INT(pt_net_init(&a, &p, kn, 0, 3, 7, NULL, &err), 0);
        CHECK_INT(pt_net_init(&b, &p, kn, 0, 4, 7, NULL, &err), 0);
        per_slot[vp - 1] = pt_net_bytes(b) - pt_net_bytes(a);
        CHECK(per_slot[vp - 1] > 0);
        CHECK(a->head == NULL && a->n_head == 0); /* stage 0 has no head */
        pt_net_free(a);
        pt_net_free(b);
        CHECK_INT(pt_net_init(&a, &p, kn, 1, 3, 7, NULL, &err), 0);
        CHECK_INT(a->n_head, 1);
        /* the pool: distinct slots for what is in flight, a full pool refuses, a slot
         * given back is taken again */
        int s0 = pt_net_slot_take(a, 0, 0, &err), s1 = pt_net_slot_take(a, 1, 0, &err);
        CHECK(s0 >= 0 && s1 >= 0 && s0 != s1);
        CHECK_INT(pt_net_slot_take(a, 0, 0, &err), s0);
        CHECK_INT(pt_net_slot_of(a, 1, 0), s1);
        int s2 = pt_net_slot_take(a, 0, vp - 1 == 0 ? 0 : 1, &err);
        if (vp == 1) { /* (0, 0) again: its slot */
            CHECK_INT(s2, s0);
        } else {
            CHECK(s2 >= 0 && s2 != s0 && s2 != s1);
            CHECK_INT(pt_net_slot_take(a, 1, 1, &err), -1);
            CHECK_STR_HAS(err.msg, "activation slots are in use");
        }
        pt_net_slot_give(a, 0, 0);
        CHECK_INT(pt_net_slot_of(a, 0, 0), -1);
        CHECK_INT(pt_net_slot_take(a, 1, vp - 1, &err) >= 0, 1);
        CHECK_INT(pt_net_slot_take(a, 5, 0, &err), -1); /* outside the step */
        pt_net_free(a);
    }
    CHECK_INT(per_slot[1], per_slot[0]);
    pt_kernels_destroy(kn);
}

/* ---- Device times of op spans ------------------------------------------------------
 * A fake device timer on the CPU backend (kernels.h's event_record, event_elapsed):
 * the r-th event recorded in the test is at T(r) = 0.01·r(r+1)/2 ms, so the gap from
 * event r-1 to r, 0.01·r ms, differs for every event, and an op's duration says which
 * pair of events it was given. A resolve period records its anchor (event a), then a
 * start and an end event per op: op k of the period lasts T(a+2+2k) - T(a+1+2k) =
 * 0.01·(a+2+2k) ms and starts T(a+1+2k) - T(a) after the anchor. */

static struct {
    double at_ms[8192];       /* device time of each pool event's last record */
    int pool;                 /* events created */
    int free[8192], n_free;   /* released, handed out again first */
    int records;              /* events recorded */
    bool fail_record, fail_elapsed;
} fake;

static double fake_T(int r)
{
    return 0.01 * r * (r + 1) / 2.0;
}

static int fake_record(pt_kernels *kn, int *event)
{
    if (fake.fail_record || (*event < 0 && fake.pool == 8192)) {
        snprintf(kn->err, sizeof kn->err, "fake: record failed");
        return -1;
    }
    if (*event < 0)
        *event = fake.n_free ? fake.free[--fake.n_free] : fake.pool++;
    fake.at_ms[*event] = fake_T(fake.records++);
    return 0;
}

static void fake_release(pt_kernels *kn, int event)
{
    (void)kn;
    if (event >= 0)
        fake.free[fake.n_free++] = event;
}

static int fake_elapsed(pt_kernels *kn, int from, int to, double *ms)
{
    if (fake.fail_elapsed || from < 0 || to < 0 || from >= fake.pool || to >= fake.pool) {
        snprintf(kn->err, sizeof kn->err, "fake: elapsed failed");
        return -1;
    }
    *ms = fake.at_ms[to] - fake.at_ms[from];
    return 0;
}

static bool is_op(const pt_span *s)
{
    return s->key[0] && s->stream == 0;
}

/* Checks `ops` op spans of an expanded trace from span *at on, one resolve period
 * whose anchor was event a: each op has its scripted duration and start, the ops
 * follow one another, and each takes the micro-batch and chunk of the instruction
 * recorded after it. Moves *at to the next op span after them. */
static void check_period(const pt_trace *t, size_t *at, int a, int ops)
{
    int k = 0;
    size_t since = *at; /* the ops since the last instruction */
    double t0_first = 0, prev_end = -1e300;
    for (; *at < t->n; (*at)++) {
        const pt_span *s = &t->v[*at];
        if (!s->key[0] && strstr(s->name, " mb")) { /* an instruction */
            for (size_t j = since; j < *at; j++)
                if (is_op(&t->v[j])) {
                    CHECK_INT(t->v[j].mb, s->mb);
                    CHECK_INT(t->v[j].chunk, s->chunk);
                }
            since = *at + 1;
            continue;
        }
        if (!is_op(s))
            continue;
        if (k == ops)
            break;
        if (k == 0)
            t0_first = s->t0_s;
        double dur_ms = 0.01 * (a + 2 + 2 * k);
        double start_ms = fake_T(a + 1 + 2 * k) - fake_T(a + 1);
        CHECK(fabs(s->dur_s - dur_ms * 1e-3) < 1e-9);
        CHECK(fabs((s->t0_s - t0_first) - start_ms * 1e-3) < 1e-9);
        CHECK(s->t0_s >= prev_end - 1e-12);
        prev_end = s->t0_s + s->dur_s;
        k++;
    }
    CHECK_INT(k, ops);
}

/* One rank of plan p on kn with a trace on: its schedule of n_micro micro-batches, its
 * place (no communicator) and its net. */
static int traced_rank(const pt_plan *p, pt_kernels *kn, int n_micro, pt_sched *s,
                       pt_dist *d, pt_trace *tr, pt_net **n, pt_err *err)
{
    pt_trace_init(tr, true);
    if (pt_sched_build(p->layout.schedule, 1, 1, n_micro, s, err))
        return -1;
    pt_grid g;
    pt_grid_init(&g, &p->layout);
    if (pt_dist_init(d, NULL, &g, 0, err))
        return -1;
    return pt_net_init(n, p, kn, 0, pt_sched_peak_in_flight(s, 0), 42, tr, err);
}

static void check_device_times(void)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    kn->event_record = fake_record;
    kn->event_elapsed = fake_elapsed;
    kn->event_release = fake_release;
    memset(&fake, 0, sizeof fake);
    pt_plan p = plan_of(small(0), PT_RECOMPUTE_NONE);
    p.layout.n_micro = 2;
    p.train.global_batch = 4;
    pt_err err;
    pt_sched s;
    pt_dist d;
    pt_trace tr;
    pt_net *n;
    CHECK_INT(traced_rank(&p, kn, 2, &s, &d, &tr, &n, &err), 0);
    CHECK(n->devtime != NULL);

    /* two steps: the second records the first's events again and creates none */
    pt_step_stats st;
    CHECK_INT(pt_engine_step(n, &d, &s, NULL, &p, 0, &st, &err), 0);
    int after_one = fake.records, pool = fake.pool;
    CHECK(after_one > 1 && pool == after_one);
    CHECK_INT(pt_engine_step(n, &d, &s, NULL, &p, 1, &st, &err), 0);
    CHECK_INT(fake.records, 2 * after_one);
    CHECK_INT(fake.pool, pool);
    /* validation: resolved after its batch, with its own anchor */
    double loss;
    CHECK_INT(pt_engine_eval(n, &d, NULL, 1, &loss, &err), 0);
    int eval_anchor = 2 * after_one;

    CHECK_INT(pt_trace_expand(&tr, &err), 0);
    int ops = (after_one - 1) / 2, step_ops[2] = {0, 0}, eval_ops = 0;
    for (size_t i = 0; i < tr.n; i++)
        if (is_op(&tr.v[i])) {
            if (tr.v[i].ins < 0) /* validation runs outside the schedule's instructions */
                eval_ops++;
            else if (tr.v[i].step == 0 || tr.v[i].step == 1)
                step_ops[tr.v[i].step]++;
        }
    /* every op of a step (the step's end's Adam included) got its pair of events;
     * validation ran one micro-batch's forward ops */
    CHECK_INT(1 + 2 * step_ops[0], after_one);
    CHECK_INT(step_ops[1], ops);
    CHECK(eval_ops > 0 && eval_ops < ops);
    CHECK_INT(fake.records, eval_anchor + 1 + 2 * eval_ops);
    if (getenv("PT_TEST_VERBOSE"))
        printf("device times: %d ops a step, %d in validation, %d events\n", ops, eval_ops,
               fake.pool);
    size_t at = 0;
    check_period(&tr, &at, 0, ops);
    check_period(&tr, &at, after_one, ops);
    check_period(&tr, &at, eval_anchor, eval_ops);

    /* a failing timer fails the step with the backend's message */
    fake.fail_record = true;
    CHECK_INT(pt_engine_step(n, &d, &s, NULL, &p, 2, &st, &err), -1);
    CHECK_STR_HAS(err.msg, "fake: record failed");
    fake.fail_record = false;
    kn->err[0] = '\0';
    CHECK_INT(pt_net_trace_resolve(n, &err), 0); /* what the failed step left */
    fake.fail_elapsed = true;
    CHECK_INT(pt_engine_step(n, &d, &s, NULL, &p, 3, &st, &err), -1);
    CHECK_STR_HAS(err.msg, "fake: elapsed failed");
    fake.fail_elapsed = false;
    kn->err[0] = '\0';
    CHECK_INT(pt_net_trace_resolve(n, &err), 0); /* nothing left pending */
    pt_net_free(n);
    CHECK_INT(fake.n_free, fake.pool); /* every event given back */
    pt_trace_free(&tr);
    /* and taken again by the next net (one forward pass, resolved at its end) */
    pt_trace_init(&tr, true);
    CHECK_INT(pt_net_init(&n, &p, kn, 0, 2, 42, &tr, &err), 0);
    data dd = make_data();
    CHECK_INT(pt_net_forward(n, 0, dd.tok, dd.tgt, 0.0f, &loss, &err), 0);
    CHECK_INT(fake.pool, pool);
    CHECK_INT(fake.n_free, pool - (1 + 2 * eval_ops));
    pt_net_free(n);
    pt_trace_free(&tr);

    /* PT_TRACE_SYNC=1 waits around each op and keeps host times: no device timers */
    pt_trace_init(&tr, true);
    setenv("PT_TRACE_SYNC", "1", 1);
    CHECK_INT(pt_net_init(&n, &p, kn, 0, 2, 42, &tr, &err), 0);
    unsetenv("PT_TRACE_SYNC");
    CHECK(n->devtime == NULL && n->trace_sync);
    pt_net_free(n);
    pt_trace_free(&tr);
    /* nor without a trace */
    CHECK_INT(pt_net_init(&n, &p, kn, 0, 2, 42, NULL, &err), 0);
    CHECK(n->devtime == NULL);
    pt_net_free(n);
    pt_sched_free(&s);
    pt_kernels_destroy(kn);
}

/* The same on the CUDA backend where a device is present: after a step, every op span
 * lasts a non-negative time, the spans follow one another (the device runs them in
 * order on one stream) within the step, and their sum fits in the step's time. */
static void check_device_times_cuda(void)
{
    char why[256] = "";
    pt_kernels *kn = pt_kernels_cuda(0, why, sizeof why);
    if (!kn) {
        printf("device times on CUDA: skipped (%s)\n", why);
        return;
    }
    pt_plan p = plan_of(small(1), PT_RECOMPUTE_NONE);
    pt_err err;
    pt_sched s;
    pt_dist d;
    pt_trace tr;
    pt_net *n;
    int rc = traced_rank(&p, kn, 1, &s, &d, &tr, &n, &err);
    CHECK_INT(rc, 0);
    CHECK(rc || n->devtime != NULL);
    pt_step_stats st;
    double t_begin = 0, t_end = 0;
    for (int step = 0; rc == 0 && step < 2; step++) {
        t_begin = pt_trace_now();
        CHECK_INT(rc = pt_engine_step(n, &d, &s, NULL, &p, step, &st, &err), 0);
        t_end = pt_trace_now();
    }
    if (rc)
        fprintf(stderr, "CUDA step: %s\n", err.msg);
    CHECK_INT(pt_trace_expand(&tr, &err), 0);
    double prev_end = -1e300, busy = 0;
    int ops = 0;
    for (size_t i = 0; rc == 0 && i < tr.n; i++) {
        const pt_span *sp = &tr.v[i];
        if (!is_op(sp) || sp->step != 1)
            continue;
        double t0 = sp->t0_s + tr.origin_s;
        CHECK(sp->dur_s >= 0);
        CHECK(sp->t0_s >= prev_end - 1e-6); /* float milliseconds from the anchor */
        CHECK(t0 >= t_begin - 1e-4 && t0 + sp->dur_s <= t_end + 1e-4);
        prev_end = sp->t0_s + sp->dur_s;
        busy += sp->dur_s;
        ops++;
    }
    if (getenv("PT_TEST_VERBOSE"))
        printf("device times on CUDA: %d ops, %.1f us busy in a step of %.1f us\n", ops,
               1e6 * busy, 1e6 * (t_end - t_begin));
    CHECK(rc || (ops > 0 && busy > 0 && busy <= t_end - t_begin));
    pt_net_free(n);
    pt_trace_free(&tr);
    pt_sched_free(&s);
    pt_kernels_destroy(kn);
}

int main(void)
{
    for (int kind = 0; kind < 6; kind++) {
        check_fd(kind);
        check_recompute(kind);
    }
    check_init();
    check_uneven_stages();
    check_slots_per_chunk();
    check_device_times();
    check_device_times_cuda();
    return pt_check_result();
}
