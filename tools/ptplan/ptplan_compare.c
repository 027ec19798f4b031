/*
 * ptplan --compare: layouts the user names, priced and set side by side as one table
 * (a column each): memory per device with its parts, where the step's time goes,
 * step time, tokens/s and MFU; a layout the rules reject gets its column marked and a
 * line per broken rule with its values. It answers "which of these two would be
 * faster, and by how much" without a search; it writes no plan and no timeline.
 * Exit status: 0 when at least one layout can run (valid and fits), 3 when none can,
 * 1 when a layout string cannot be read.
 */
#include "ptplan.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* One compared layout: its figures when valid. */
typedef struct {
    const job *j;
    pt_layout l;
    uint32_t mask;           /* broken rules; 0 valid */
    pt_candidate c;
    bool fits;
} compared;

#define COL_W 13 /* width of a layout's column */
#define ROW_W 34 /* width of the row names */

/* ---- Text --------------------------------------------------------------------------- */

/* Prints one row: its name, then one cell per layout; cell() fills a valid layout's cell,
 * an invalid one shows "-". */
typedef void (*cell_fn)(const compared *x, const void *arg, char *buf, size_t n);

static void row(const char *name, const compared *v, int n, cell_fn cell, const void *arg)
{
    printf("%-*s", ROW_W, name);
    for (int i = 0; i < n; i++) {
        char buf[64] = "-";
        if (!v[i].mask)
            cell(&v[i], arg, buf, sizeof buf);
        printf(" %*s", COL_W, buf);
    }
    printf("\n");
}

static void cell_mem_part(const compared *x, const void *arg, char *buf, size_t n)
{
    const char *names[MEM_PARTS];
    double bytes[MEM_PARTS];
    memory_parts(x->j, &x->l, &x->c.memory, names, bytes);
    snprintf(buf, n, "%.4g", gib(bytes[*(const int *)arg]));
}

static void cell_mem_total(const compared *x, const void *arg, char *buf, size_t n)
{
    (void)arg;
    snprintf(buf, n, "%.4g", gib(x->c.memory.total_bytes));
}

static void cell_fits(const compared *x, const void *arg, char *buf, size_t n)
{
    double limit = *(const double *)arg;
    if (x->fits)
        snprintf(buf, n, "yes");
    else
        snprintf(buf, n, "NO +%.3g", gib(x->c.memory.total_bytes - limit));
}

static void cell_breakdown(const compared *x, const void *arg, char *buf, size_t n)
{
    double s = x->c.predicted.breakdown_s[*(const int *)arg];
    /* the simulator's sums leave rounding residues (1e-17 s of bubble without a pipeline) */
    snprintf(buf, n, "%.4g", fabs(s) < 1e-9 * x->c.predicted.step_time_s ? 0.0 : s);
}

static void cell_hidden(const compared *x, const void *arg, char *buf, size_t n)
{
    double hidden = 0;
    (void)arg;
    for (int k = 0; k < PT_BD_COUNT; k++)
        hidden += x->c.predicted.hidden_s[k];
    snprintf(buf, n, "%.4g", hidden);
}

/* The prediction's figures, by the offset of a double in pt_sim_result and a scale. */
typedef struct {
    const char *name;
    size_t offset;
    double scale;
    const char *format;
} figure;

static const figure figures[] = {
    {"step time, s", offsetof(pt_sim_result, step_time_s), 1, "%.4g"},
    {"tokens/s", offsetof(pt_sim_result, tokens_per_s), 1, "%.0f"},
    {"MFU %", offsetof(pt_sim_result, mfu), 100, "%.1f"},
    {"HFU %", offsetof(pt_sim_result, hfu), 100, "%.1f"},
    {"bubble %", offsetof(pt_sim_result, bubble_fraction), 100, "%.1f"},
    {"exposed communication %", offsetof(pt_sim_result, exposed_comm_fraction), 100, "%.1f"},
};

static void cell_figure(const compared *x, const void *arg, char *buf, size_t n)
{
    const figure *f = arg;
    double v = *(const double *)((const char *)&x->c.predicted + f->offset);
    snprintf(buf, n, f->format, f->scale * v);
}

static void cell_provenance(const compared *x, const void *arg, char *buf, size_t n)
{
    (void)arg;
    provenance_text(&x->c.predicted, buf, n);
}

/* The step time's range under the job's band. */
static void cell_band(const compared *x, const void *arg, char *buf, size_t n)
{
    (void)arg;
    double lo, hi;
    band_range(&x->j->band, x->c.predicted.step_time_s, &lo, &hi);
    snprintf(buf, n, "%.3g-%.3g", lo, hi);
}

/* Time to train on --tokens: days (arg 0), GPU-hours (1) or cost (2). */
static void cell_train(const compared *x, const void *arg, char *buf, size_t n)
{
    train_time t;
    train_time_of(x->j, pt_layout_world(&x->l), &x->c.predicted, &t);
    int what = *(const int *)arg;
    if (what == 0)
        snprintf(buf, n, "%.1f", t.days);
    else
        count_text(what == 1 ? t.gpu_hours : t.cost, buf, n);
}

static void print_table(const job *j, const compared *v, int n, const char *const *labels)
{
    double limit = limit_bytes(j);
    for (int i = 0; i < n; i++) {
        char text[1024];
        layout_text(j, &v[i].l, text, sizeof text);
        printf("  [%d] %s%s\n", i + 1, labels ? labels[i] : "", text);
    }
    printf("\n%-*s", ROW_W, "");
    for (int i = 0; i < n; i++) {
        char head[16];
        snprintf(head, sizeof head, "[%d]", i + 1);
        printf(" %*s", COL_W, head);
    }
    printf("\n%-*s", ROW_W, "valid");
    for (int i = 0; i < n; i++) {
        char cell[64] = "yes";
        if (v[i].mask && __builtin_popcount(v[i].mask) == 1)
            snprintf(cell, sizeof cell, "no: %s", pt_reject_name((pt_reject)__builtin_ctz(v[i].mask)));
        else if (v[i].mask)
            snprintf(cell, sizeof cell, "no: %d rules", __builtin_popcount(v[i].mask));
        printf(" %*s", COL_W, cell);
    }
    printf("\nmemory per device, GiB (largest stage)\n");
    const char *names[MEM_PARTS];
    double unused[MEM_PARTS];
    memory_parts(j, &v[0].l, &v[0].c.memory, names, unused);
    for (int k = 0; k < MEM_PARTS; k++) {
        char name[64];
        snprintf(name, sizeof name, "  %s", names[k]);
        row(name, v, n, cell_mem_part, &k);
    }
    row("  total", v, n, cell_mem_total, NULL);
    char fits[64];
    snprintf(fits, sizeof fits, "  fits in %.3g GiB", gib(limit));
    row(fits, v, n, cell_fits, &limit);
    printf("time per step, s (the rank that ends it)\n");
    for (int k = 0; k < PT_BD_COUNT; k++) {
        bool any = false;
        for (int i = 0; i < n; i++)
            any |= !v[i].mask && v[i].c.predicted.breakdown_s[k] != 0;
        char name[64];
        snprintf(name, sizeof name, "  %s%s", pt_bd_name((pt_bd)k),
                 k >= PT_BD_TP && k <= PT_BD_P2P ? " (exposed)" : "");
        if (any)
            row(name, v, n, cell_breakdown, &k);
    }
    row("  communication hidden by compute", v, n, cell_hidden, NULL);
    for (size_t f = 0; f < sizeof figures / sizeof *figures; f++)
        row(figures[f].name, v, n, cell_figure, &figures[f]);
    if (j->band.n > 0)
        row("step time in the band, s", v, n, cell_band, NULL);
    row("priced from", v, n, cell_provenance, NULL);
    if (j->tokens > 0) {
        static const int what[3] = {0, 1, 2};
        char name[64], goal[32];
        count_text(j->tokens, goal, sizeof goal);
        snprintf(name, sizeof name, "days to train on %s tokens", goal);
        row(name, v, n, cell_train, &what[0]);
        row("GPU-hours", v, n, cell_train, &what[1]);
        if (j->gpu_hour_price >= 0)
            row("cost", v, n, cell_train, &what[2]);
    }
    for (int i = 0; i < n; i++)
        if (v[i].mask) {
            printf("\n[%d] rejected:\n", i + 1);
            print_rules(j, &v[i].l, v[i].mask);
        }
}

void print_side_by_side(const job *j, const pt_candidate *c, int n, const char *const *labels)
{
    compared v[COMPARE_MAX];
    if (n > COMPARE_MAX)
        n = COMPARE_MAX;
    for (int i = 0; i < n; i++)
        v[i] = (compared){.j = j, .l = c[i].layout, .c = c[i],
                          .fits = c[i].memory.total_bytes <= limit_bytes(j)};
    print_table(j, v, n, labels);
}

/* ---- JSON and the mode ------------------------------------------------------------------ */

static void print_compare_json(const job *j, const compared *v, int n, int runnable)
{
    json_t *root = job_json(j), *list = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(list, layout_result_json(j, &v[i].l, v[i].mask, &v[i].c,
                                                        v[i].fits));
    json_object_set_new(root, "layouts", list);
    json_object_set_new(root, "runnable", json_integer(runnable));
    print_json(root);
}

/* Reads, checks and prices every layout of --compare into v; 0, or the exit status. */
static int price_all(const options *o, const job *j, compared *v)
{
    pt_err err;
    for (int i = 0; i < o->n_compare; i++) {
        compared *x = &v[i];
        x->j = j;
        if (parse_job_layout(j, o->compare[i], &x->l, &err)) {
            fprintf(stderr, "ptplan: --compare: layout %d '%s': %s\n", i + 1, o->compare[i],
                    err.msg);
            return EXIT_BAD_INPUT;
        }
        pt_layout_check(&j->m, &j->c, j->t.global_batch, &x->l, &x->mask);
        if (!x->mask && pt_evaluate(&j->m, &j->c, &j->t, j->db, &x->l, NULL, &x->c, &err))
            return pt_tool_fail("%s", err.msg);
        x->fits = !x->mask && x->c.memory.total_bytes <= limit_bytes(j);
    }
    return 0;
}

int compare_layouts(const options *o)
{
    job j;
    if (load_job(o, &j)) {
        free_job(&j);
        return EXIT_BAD_INPUT;
    }
    compared *v = calloc((size_t)o->n_compare, sizeof *v);
    int rc = v ? price_all(o, &j, v) : pt_tool_fail("%s", "out of memory");
    if (rc == 0) {
        int runnable = 0;
        for (int i = 0; i < o->n_compare; i++)
            runnable += v[i].fits;
        if (o->json)
            print_compare_json(&j, v, o->n_compare, runnable);
        else {
            print_job_header(&j);
            printf("layouts compared:\n");
            print_table(&j, v, o->n_compare, NULL);
        }
        if (runnable == 0) {
            fflush(stdout); /* the verdict after the table, where both go to one terminal */
            if (o->n_compare == 1)
                fprintf(stderr, "ptplan: the compared layout cannot run: it is invalid or does "
                                "not fit\n");
            else
                fprintf(stderr, "ptplan: none of the %d compared layouts can run: each is "
                                "invalid or does not fit\n", o->n_compare);
            rc = EXIT_REJECTED;
        }
    }
    free(v);
    free_job(&j);
    return rc;
}
