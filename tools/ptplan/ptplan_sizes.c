/*
 * ptplan --nodes N1,N2,...: the same training job planned on clusters of several sizes,
 * the best layout of each set side by side — step time, tokens/s, MFU, memory, the
 * time and GPU-hours to train on --tokens (and the cost with --gpu-hour-price) — with
 * the scaling efficiency of each size against the smallest that can run: its tokens/s
 * per GPU over the smallest's. It answers "how many nodes should I rent" in one call.
 * It writes no plan (the sizes would need one each): plan one with --nodes N.
 * Exit status: 0 when some size has a plan, 3 when none has, 1 on bad input.
 */
#include "ptplan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One cluster size and its best layout. */
typedef struct {
    int64_t nodes, world;
    bool planned;            /* a layout is valid and fits */
    pt_candidate best;
    char why[1024];          /* not planned: why */
} size_result;

/* Plans one size: the job of the options with --nodes `nodes`; keeps the job in *keep
 * (when not NULL; free_job frees it) for the header. */
static int plan_size(const options *o, int64_t nodes, size_result *out, job *keep)
{
    options one = *o;
    one.nodes = nodes;
    one.n_nodes = 1;
    job j;
    pt_search_result r;
    int rc = search_job(&one, &j, &r);
    if (rc)
        return rc;
    *out = (size_result){.nodes = nodes, .world = pt_cluster_world(&j.c)};
    out->planned = r.n_best > 0;
    if (out->planned)
        out->best = r.best[0];
    else
        no_layout_advice(&j, &r.counts, out->why, sizeof out->why);
    pt_search_free(&r);
    if (keep)
        *keep = j;
    else
        free_job(&j);
    return 0;
}

static int by_nodes(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* tokens/s per GPU of size s over that of the reference size. */
static double scaling(const size_result *s, const size_result *ref)
{
    double per = s->best.predicted.tokens_per_s / (double)s->world;
    double ref_per = ref->best.predicted.tokens_per_s / (double)ref->world;
    return ref_per > 0 ? per / ref_per : 0;
}

static void print_sizes(const job *j, const size_result *v, int n, const size_result *ref)
{
    bool train = j->tokens > 0, cost = train && j->gpu_hour_price >= 0;
    printf("%6s %6s %9s %10s %6s %7s", "nodes", "GPUs", "step s", "tokens/s", "MFU%", "GiB");
    if (train)
        printf(" %8s %8s", "days", "GPU-h");
    if (cost)
        printf(" %8s", "cost");
    printf(" %8s  %s\n", "scaling", "best layout (as --layout reads it)");
    for (int i = 0; i < n; i++) {
        const size_result *s = &v[i];
        printf("%6lld %6lld", (long long)s->nodes, (long long)s->world);
        if (!s->planned) {
            printf("  no plan: %s\n", s->why);
            continue;
        }
        const pt_sim_result *p = &s->best.predicted;
        printf(" %9.4g %10.0f %6.1f %7.3g", p->step_time_s, p->tokens_per_s, 100 * p->mfu,
               gib(s->best.memory.total_bytes));
        train_time t;
        train_time_of(j, s->world, p, &t);
        char text[1024];
        if (train) {
            count_text(t.gpu_hours, text, sizeof text);
            printf(" %8.1f %8s", t.days, text);
        }
        if (cost) {
            count_text(t.cost, text, sizeof text);
            printf(" %8s", text);
        }
        layout_text(j, &s->best.layout, text, sizeof text);
        printf(" %7.1f%%  %s\n", 100 * scaling(s, ref), text);
    }
    printf("\nscaling: tokens/s per GPU against the %lld-node plan's (100%% = linear)\n",
           (long long)ref->nodes);
    if (train)
        printf("days, GPU-h: to train on --tokens at that step time\n");
    printf("no plan is written: plan one size with --nodes N\n");
}

static void print_sizes_json(const job *j, const size_result *v, int n, const size_result *ref)
{
    json_t *root = job_json(j), *list = json_array();
    for (int i = 0; i < n; i++) {
        const size_result *s = &v[i];
        json_t *e = json_pack("{s:I, s:I}", "nodes", (json_int_t)s->nodes, "gpus",
                              (json_int_t)s->world);
        if (s->planned) {
            json_object_set_new(e, "best", candidate_json(j, &s->best));
            json_object_set_new(e, "scaling_efficiency", json_real(scaling(s, ref)));
        } else {
            json_object_set_new(e, "best", json_null());
            json_object_set_new(e, "advice", json_string(s->why));
        }
        json_array_append_new(list, e);
    }
    json_object_set_new(root, "sizes", list);
    json_object_set_new(root, "reference_nodes", ref ? json_integer(ref->nodes) : json_null());
    print_json(root);
}

int sweep_sizes(const options *o)
{
    int n = o->n_nodes;
    int64_t nodes[NODES_MAX];
    memcpy(nodes, o->nodes_list, (size_t)n * sizeof *nodes);
    qsort(nodes, (size_t)n, sizeof *nodes, by_nodes);
    size_result *v = calloc((size_t)n, sizeof *v);
    job first;
    memset(&first, 0, sizeof first);
    if (!v)
        return pt_tool_fail("%s", "out of memory");
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!o->json)
            fprintf(stderr, "ptplan: planning %lld node(s) (%d of %d)\n", (long long)nodes[i],
                    i + 1, n);
        rc = plan_size(o, nodes[i], &v[i], i == 0 ? &first : NULL);
    }
    const size_result *ref = NULL;
    for (int i = 0; i < n && !ref; i++)
        if (v[i].planned)
            ref = &v[i];
    if (rc == 0 && o->json) {
        print_sizes_json(&first, v, n, ref);
    } else if (rc == 0) {
        print_job_header(&first);
        printf("sizes  ");
        for (int i = 0; i < n; i++)
            printf(" %lld%s", (long long)nodes[i], i + 1 < n ? "," : " node(s) of ");
        printf("%d %s\n\n", first.c.devices_per_node, first.c.device.name);
        if (ref)
            print_sizes(&first, v, n, ref);
    }
    if (rc == 0 && !ref) {
        fflush(stdout);
        fprintf(stderr, "ptplan: no size has a layout that is valid and fits: %s\n", v[0].why);
        rc = EXIT_REJECTED;
    }
    free_job(&first);
    free(v);
    return rc;
}
