/*
 * The model as the runtime runs it (op lists dispatched to kernels): the gradient
 * of the loss with respect to parameters of every kind matches central finite
 * differences, for a GPT-2-shaped and a LLaMA-shaped model; recomputation (none,
 * selective, full) gives bit-identical gradients; and the parameter table matches
 * the planner's count.
 */
#include "check.h"
#include "runtime.h"

#include <stdlib.h>

static pt_model small(bool llama)
{
    pt_model m = {.name = "t", .layers = 2, .hidden = 16, .heads = 4, .kv_heads = llama ? 2 : 4,
                  .ffn = llama ? 24 : 64, .vocab = 32, .seq = 8,
                  .norm = llama ? PT_NORM_RMSNORM : PT_NORM_LAYERNORM,
                  .act = llama ? PT_ACT_SWIGLU : PT_ACT_GELU,
                  .pos = llama ? PT_POS_ROPE : PT_POS_LEARNED, .tied_embeddings = !llama,
                  .bias = !llama, .dropout = false};
    return m;
}

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

static double loss_of(pt_net *n, const data *d)
{
    double sum = 0;
    pt_err err;
    if (pt_net_forward(n, 0, d->tok, d->tgt, 0.0f, &sum, &err))
        fprintf(stderr, "forward: %s\n", err.msg);
    return sum / 16.0;
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
}

static void check_fd(bool llama)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    pt_plan p = plan_of(small(llama), PT_RECOMPUTE_NONE);
    pt_net n;
    pt_err err;
    CHECK_INT(pt_net_init(&n, &p, kn, 0, 1, 42, NULL, &err), 0);
    data d = make_data();
    gradients(&n, &d);
    /* A few elements of every parameter: central differences of the fp32 loss, with a
     * step small enough that their O(eps²) truncation error stays near 2 % */
    const float eps = 5e-3f;
    double worst = 0;
    for (int i = 0; i < n.n_param; i++) {
        const pt_param *q = &n.param[i];
        for (int64_t j = 0; j < q->count; j += q->count / 3 + 1) {
            float *w = n.master + q->offset + j, keep = *w;
            *w = keep + eps;
            double lp = loss_of(&n, &d);
            *w = keep - eps;
            double lm = loss_of(&n, &d);
            *w = keep;
            double fd = (lp - lm) / (2.0 * eps), g = n.grad[q->offset + j];
            double e = fabs(fd - g) / fmax(fabs(g), 1e-3);
            if (e > worst)
                worst = e;
            if (e > 0.05)
                fprintf(stderr, "%s %s[%lld]: analytic %.6g, finite differences %.6g\n",
                        llama ? "llama" : "gpt", q->name, (long long)j, g, fd);
            CHECK(e <= 0.05);
        }
    }
    if (getenv("PT_TEST_VERBOSE"))
        printf("%s: worst relative gradient error %.3g\n", llama ? "llama" : "gpt", worst);
    pt_net_free(&n);
    pt_kernels_destroy(kn);
}

/* none, selective and full recomputation run the same kernels on the same values. */
static void check_recompute(bool llama)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    data d = make_data();
    float *ref = NULL;
    int64_t count = 0;
    for (int rc = PT_RECOMPUTE_NONE; rc <= PT_RECOMPUTE_FULL; rc++) {
        pt_plan p = plan_of(small(llama), (pt_recompute)rc);
        pt_net n;
        pt_err err;
        CHECK_INT(pt_net_init(&n, &p, kn, 0, 1, 42, NULL, &err), 0);
        gradients(&n, &d);
        if (!ref) {
            count = n.n_elems;
            ref = malloc((size_t)count * sizeof *ref);
            memcpy(ref, n.grad, (size_t)count * sizeof *ref);
        } else {
            CHECK(memcmp(ref, n.grad, (size_t)count * sizeof *ref) == 0);
        }
        pt_net_free(&n);
    }
    free(ref);
    pt_kernels_destroy(kn);
}

/* Same seed, same weights; the initialisation does not depend on the layout's
 * micro-batching (slots) and differs with the seed. */
static void check_init(void)
{
    pt_kernels *kn = pt_kernels_cpu(1);
    pt_plan p = plan_of(small(false), PT_RECOMPUTE_NONE);
    pt_net a, b, c;
    pt_err err;
    CHECK_INT(pt_net_init(&a, &p, kn, 0, 1, 7, NULL, &err), 0);
    CHECK_INT(pt_net_init(&b, &p, kn, 0, 3, 7, NULL, &err), 0);
    CHECK_INT(pt_net_init(&c, &p, kn, 0, 1, 8, NULL, &err), 0);
    CHECK(memcmp(a.master, b.master, (size_t)a.n_elems * sizeof(float)) == 0);
    CHECK(memcmp(a.master, c.master, (size_t)a.n_elems * sizeof(float)) != 0);
    const pt_param *ln = pt_net_param(&a, "layers.1.norm2.w");
    CHECK(ln && a.master[ln->offset] == 1.0f);
    const pt_param *wte = pt_net_param(&a, "wte");
    CHECK(wte && wte->shape[0] == 128 && wte->shape[1] == 16); /* 32 padded to 128 */
    pt_net_free(&a);
    pt_net_free(&b);
    pt_net_free(&c);
    pt_kernels_destroy(kn);
}

int main(void)
{
    check_fd(false);
    check_fd(true);
    check_recompute(false);
    check_recompute(true);
    check_init();
    return pt_check_result();
}
