/*
 * ptprofile's measurement of the model's other kernels — norms, attention, RoPE,
 * activations, residual adds, embedding, loss, the optimizer — in place: it builds
 * the runtime's model for a micro-batch size, runs training steps of the engine on
 * the run's data with the trace on, and turns the op spans into cost samples under
 * the planner's keys
 * (pt_trace_to_costdb). So the kernels are timed in the context, order and shapes
 * the planner prices them in. GEMMs are left to the standalone measurement (their
 * keys come from every layout, not only the single-rank ones this can run).
 */
#include "ptprofile.h"
#include "runtime.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A single-rank plan of the job's model with micro-batch size `mbs`. */
static pt_plan plan_for(const pt_model *m, const pt_cluster *c, const pt_train *t, int64_t mbs)
{
    pt_plan p = {.format_version = PT_PLAN_FORMAT_VERSION, .model = *m, .cluster = *c,
                 .train = *t};
    pt_run_opts_default(&p.run, m);
    pt_layout_default(&p.layout);
    p.layout.mbs = mbs;
    p.layout.n_micro = 1;
    p.train.global_batch = mbs;
    p.cluster.nodes = 1;
    p.cluster.devices_per_node = 1;
    return p;
}

/* Removes the GEMM spans, with or without an epilogue (measured on their own), so
 * only the other kernels remain. */
static void drop_gemms(pt_trace *tr)
{
    int64_t m, n, k;
    for (size_t i = 0; i < tr->n; i++)
        if (pt_prof_gemm_shape(tr->v[i].key, &m, &n, &k, NULL, NULL) == 0)
            tr->v[i].key[0] = '\0';
}

int pt_prof_model_kernels(pt_kernels *kn, const pt_model *m, const pt_cluster *c,
                          const pt_train *t, const pt_tokens *data, int64_t mbs, int repeats,
                          pt_costdb *db, int64_t *stored, pt_err *err)
{
    pt_plan p = plan_for(m, c, t, mbs);
    pt_trace tr;
    pt_net *net = NULL;
    pt_sched sched;
    pt_grid g;
    pt_dist d;
    pt_sampler sampler;
    memset(&sched, 0, sizeof sched);
    pt_trace_init(&tr, true);
    pt_grid_init(&g, &p.layout);
    /* whole steps of the engine, as ptrun runs them: the layers' ops and the step's end
     * (gradient norm, AdamW), on micro-batches of the run's data, whose repeats the
     * embedding's backward depends on. On a GPU an op returns once its kernels are
     * queued: the runtime times each op with the backend's device timers and retimes
     * its span at the end of each pass (pt_net_trace_resolve), so a span is the op's
     * device time, without waiting around it. */
    int rc = kn ? 0 : pt_err_set(err, "out of memory");
    if (rc == 0)
        rc = pt_sched_build(p.layout.schedule, p.layout.pp, p.layout.vp, (int)p.layout.n_micro,
                            &sched, err);
    if (rc == 0)
        rc = pt_dist_init(&d, NULL, &g, 0, err);
    if (rc == 0)
        rc = pt_sampler_init(&sampler, data, m->seq, p.run.seed, err);
    if (rc == 0)
        rc = pt_net_init(&net, &p, kn, 0, pt_sched_peak_in_flight(&sched, 0), p.run.seed, &tr,
                         err);
    /* one warm-up step, then `repeats` timed ones */
    for (int r = 0; rc == 0 && r <= repeats; r++) {
        pt_step_stats st;
        rc = pt_engine_step(net, &d, &sched, &sampler, &p, r, &st, err);
    }
    if (rc == 0)
        rc = pt_trace_expand(&tr, err);
    if (rc == 0) {
        drop_gemms(&tr);
        rc = pt_trace_to_costdb(&tr, db, c->device.name, PT_SOURCE_PROFILE, stored, err);
    }
    pt_net_free(net);
    pt_sched_free(&sched);
    pt_trace_free(&tr);
    return rc;
}

typedef struct {
    void *a, *b, *c, *aux, *bias;
    int64_t m, n, k;
    pt_gemm_role role;
    int batch; /* > 1: a batch of products stepping through b, c and bias (a forward's)
                * or a, c and aux (a weight gradient's), the other operand shared */
} gemm_args;

/* The batch's pointers: count of them from p, `step` bytes apart. */
static void batch_ptrs(void *p, size_t step, int count, void *out[PT_K_SHARED_MAX])
{
    for (int i = 0; i < count; i++)
        out[i] = p ? (char *)p + (size_t)i * step : NULL;
}

/* A batch of forwards or weight gradients (matmul_forward_shared, matmul_wgrad_shared)
 * in g's layout. */
static void run_gemm_batch(pt_kernels *kn, const gemm_args *g)
{
    size_t ab = pt_kdtype_bytes(kn->act_dtype);
    void *c[PT_K_SHARED_MAX], *v[PT_K_SHARED_MAX], *x[PT_K_SHARED_MAX];
    int m = (int)g->m, n = (int)g->n, k = (int)g->k;
    if (g->role == PT_GEMM_FWD || g->role == PT_GEMM_FWD_BIAS) {
        batch_ptrs(g->c, (size_t)(g->m * n) * ab, g->batch, c);
        batch_ptrs(g->b, (size_t)n * k * ab, g->batch, x);
        batch_ptrs(g->bias, (size_t)n * ab, g->batch, v);
        kn->matmul_forward_shared(kn, g->batch, (float *const *)c, g->a,
                                  (const float *const *)x, (const float *const *)v, g->m, k, n);
    } else {
        batch_ptrs(g->c, (size_t)m * n * 4, g->batch, c);
        batch_ptrs(g->a, (size_t)(g->k * m) * ab, g->batch, x);
        batch_ptrs(g->aux, (size_t)m * 4, g->batch, v);
        kn->matmul_wgrad_shared(kn, g->batch, (float *const *)c, (float *const *)v,
                                (const float *const *)x, g->b, g->k, n, m);
    }
}

/* c (m, n) from a and b, the key's m, n and k in the runtime's call of each role:
 * - the forward c = a · b^T, a (m, k), b (n, k) (a layer's in and w), alone, with the
 *   GELU (aux the pre-activation it keeps) or with the residual (aux, added), each with
 *   a bias (n) or without;
 * - a data gradient c += a · b, a (m, k) the output's gradient, b (k, n) the weight,
 *   alone, or written (c = a · b), or written through the GELU's derivative at aux;
 * - a weight gradient c += a^T · b into fp32, a (k, m) the output's gradient, b (k, n)
 *   the input, with the bias gradient (aux, m fp32) or without. */
static void run_gemm(pt_kernels *kn, void *arg)
{
    gemm_args *g = arg;
    int m = (int)g->m, n = (int)g->n, k = (int)g->k;
    if (g->batch > 1) {
        run_gemm_batch(kn, g);
        return;
    }
    switch (g->role) {
    case PT_GEMM_FWD:
    case PT_GEMM_FWD_BIAS:
        kn->matmul_forward(kn, g->c, g->a, g->b, g->bias, g->m, k, n);
        break;
    case PT_GEMM_FWD_GELU:
    case PT_GEMM_FWD_GELU_BIAS:
        kn->matmul_forward_gelu(kn, g->c, g->aux, g->a, g->b, g->bias, g->m, k, n);
        break;
    case PT_GEMM_FWD_RES:
    case PT_GEMM_FWD_BIAS_RES:
        kn->matmul_forward_res(kn, g->c, g->a, g->b, g->bias, g->aux, g->m, k, n);
        break;
    case PT_GEMM_DGRAD:
        kn->matmul_backward(kn, g->c, NULL, NULL, g->a, NULL, g->b, g->m, n, k);
        break;
    case PT_GEMM_DGRAD_WRITE:
        kn->matmul_dgrad(kn, g->c, g->a, g->b, g->m, n, k);
        break;
    case PT_GEMM_DGRAD_DGELU:
        kn->matmul_backward_dgelu(kn, g->c, g->a, g->b, g->aux, g->m, n, k);
        break;
    case PT_GEMM_WGRAD:
    case PT_GEMM_WGRAD_BIAS:
        kn->matmul_backward(kn, NULL, g->c, g->aux, g->a, g->b, g->b, g->k, n, m);
        break;
    case PT_GEMM_NONE: /* not a role: pt_prof_gemm_shape never returns these */
    case PT_GEMM_ROLE_COUNT:
        break;
    }
}

/* Seconds of `repeats` runs of run(kn, arg) into times; how many were measured. On the
 * CUDA backend CUDA events time the GPU's work (ptprofile_cuda.c); elsewhere (ops that
 * finish before they return) the monotonic clock around each run and its sync. */
static int time_runs(pt_kernels *kn, void (*run)(pt_kernels *kn, void *arg), void *arg,
                     int repeats, double soak_s, double *times)
{
#ifdef PT_PROF_HAVE_CUDA
    if (strcmp(kn->name, "cuda") == 0)
        return pt_prof_cuda_time(kn, run, arg, repeats, soak_s, times);
#endif
    (void)soak_s;
    int done = 0;
    for (int r = -1; r < repeats && r < 64; r++) {
        double t0 = pt_prof_now_s();
        run(kn, arg);
        if (kn->sync(kn))
            return -1;
        if (r >= 0)
            times[done++] = pt_prof_now_s() - t0;
    }
    return done;
}

double pt_prof_time_backend(pt_kernels *kn, void (*run)(pt_kernels *kn, void *arg), void *arg,
                            int repeats, double soak_s, double *best_s)
{
    double times[64];
    int done = time_runs(kn, run, arg, repeats < 64 ? repeats : 64, soak_s, times);
    if (done <= 0)
        return -1;
    for (int i = 1; i < done; i++) /* insertion sort: a handful of values */
        for (int j = i; j > 0 && times[j - 1] > times[j]; j--) {
            double x = times[j];
            times[j] = times[j - 1];
            times[j - 1] = x;
        }
    *best_s = times[0];
    return done % 2 ? times[done / 2] : 0.5 * (times[done / 2 - 1] + times[done / 2]);
}

/* Fills count elements of the backend's activation type at dst with values in
 * [-1, 1) from the project's Philox stream (pt_k_philox4x32_10) keyed by seed: one
 * chunk of random values, repeated (generating every element on the host took seconds
 * per shape of GPT-2's head). GEMM inputs are never zeros: a multiplier fed zeros
 * toggles few bits and can run faster than on real data, and the profile is to predict
 * training (inside training steps the GEMMs ran well over their zero-fed profiled
 * times: the code notes in docs/results/). */
int pt_prof_fill_random(pt_kernels *kn, void *dst, int64_t count, uint32_t seed)
{
    enum { CHUNK = 1 << 20 };
    size_t eb = pt_kdtype_bytes(kn->act_dtype);
    int64_t chunk = count < CHUNK ? count : CHUNK;
    void *host = malloc((size_t)(chunk > 0 ? chunk : 1) * eb);
    if (!host)
        return -1;
    const uint32_t key[2] = {seed, 0x70726f66u /* "prof" */};
    for (int64_t i = 0; i < chunk; i += 4) {
        uint32_t ctr[4] = {(uint32_t)(i / 4), 0, 0, 0}, out[4];
        pt_k_philox4x32_10(ctr, key, out);
        for (int64_t j = 0; j < 4 && i + j < chunk; j++) {
            float v = (float)(2.0 * pt_k_philox_unit(out[j]) - 1.0);
            if (eb == 2)
                ((uint16_t *)host)[i + j] = pt_k_bf16_from_f32(v);
            else
                ((float *)host)[i + j] = v;
        }
    }
    for (int64_t at = 0; at < count; at += chunk) {
        int64_t n = count - at < chunk ? count - at : chunk;
        kn->copy(kn, (char *)dst + (size_t)at * eb, host, (size_t)n * eb, PT_KCOPY_H2D);
    }
    int rc = kn->sync(kn); /* host is read until the copies are done */
    free(host);
    return rc;
}

/* Median seconds of the backend's matmul in role `role` (run_gemm) on random inputs
 * after warm-up; *best_s the fastest run. */
double pt_prof_gemm_backend(pt_kernels *kn, int batch, int64_t m, int64_t n, int64_t k,
                            pt_gemm_role role, int repeats, double soak_s, double *best_s)
{
    size_t ab = pt_kdtype_bytes(kn->act_dtype);
    /* a batch: the stepped operands `batch` times over, end to end */
    size_t nb = batch > 1 ? (size_t)batch : 1;
    bool wgrad = role == PT_GEMM_WGRAD || role == PT_GEMM_WGRAD_BIAS;
    /* aux: the pre-activation (m, n) beside a GELU, the residual (m, n) added, the bias
     * gradient (m) fp32; bias: a forward's (n) */
    bool gelu = role == PT_GEMM_FWD_GELU || role == PT_GEMM_FWD_GELU_BIAS ||
                role == PT_GEMM_DGRAD_DGELU;
    bool res = pt_gemm_role_adds_residual(role);
    size_t aux = gelu || res ? (size_t)(m * n) * ab
                             : role == PT_GEMM_WGRAD_BIAS ? nb * (size_t)m * 4 : 0;
    bool bias = role == PT_GEMM_FWD_BIAS || role == PT_GEMM_FWD_GELU_BIAS ||
                role == PT_GEMM_FWD_BIAS_RES;
    /* the weight gradient's a (the output's gradient) and the forward's b (the weight)
     * are a batch's stepped multipliers */
    int64_t na = (wgrad ? (int64_t)nb : 1) * m * k, nw = (wgrad ? 1 : (int64_t)nb) * n * k;
    size_t c_bytes = nb * (size_t)(m * n) * (wgrad ? 4 : ab);
    gemm_args g = {kn->alloc(kn, (size_t)na * ab), kn->alloc(kn, (size_t)nw * ab),
                   kn->alloc(kn, c_bytes), aux ? kn->alloc(kn, aux) : NULL,
                   bias ? kn->alloc(kn, nb * (size_t)n * ab) : NULL, m, n, k, role,
                   (int)nb};
    double t = -1;
    /* an output that the call adds into starts from zeros: only the multiplier's
     * inputs (and a bias) need to be random */
    if (g.a && g.b && g.c && (g.aux || !aux) && (g.bias || !bias) &&
        pt_prof_fill_random(kn, g.a, na, 1) == 0 && pt_prof_fill_random(kn, g.b, nw, 2) == 0 &&
        (!aux || wgrad || pt_prof_fill_random(kn, g.aux, m * n, 3) == 0) &&
        (!bias || pt_prof_fill_random(kn, g.bias, (int64_t)nb * n, 4) == 0)) {
        kn->zero(kn, g.c, c_bytes);
        if (aux && wgrad)
            kn->zero(kn, g.aux, aux);
        t = pt_prof_time_backend(kn, run_gemm, &g, repeats, soak_s, best_s);
    }
    kn->free(kn, g.a);
    kn->free(kn, g.b);
    kn->free(kn, g.c);
    kn->free(kn, g.aux);
    kn->free(kn, g.bias);
    return t;
}
