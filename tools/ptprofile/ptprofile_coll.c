/*
 * ptprofile-coll — measures collectives under mpirun for ptprofile, which spawns it
 * and reads its output file into costs.db. For each group size g it measures every
 * chosen collective at every size over the group of world ranks 0..g-1 while the
 * other ranks wait (one group at a time: concurrent disjoint groups would share, and
 * so disturb, the links being measured). With block placement of ranks on nodes the
 * small groups sit inside one node and the large ones cross nodes, which is what the
 * cost tables need.
 *
 * Each op runs through the communication layer (coll_comm.c), the calls ptrun makes,
 * so the cost tables price the code that trains. A sample is taken as nccl-tests
 * takes it, one op at a time: barrier, time the op on every rank, keep the slowest
 * rank's time; after one or two warm-up runs, the median over the repeats is written.
 * Bus bandwidth is nccl-tests' (pt_coll_busbw).
 *
 * Output (rank 0; a temporary beside FILE renamed to FILE when complete, removed on a
 * clean failure): JSON lines, a header then one line per sample,
 *   {"type":"header","backend":"mpi","library":"Open MPI v4.1.4, ...","host":"h",
 *    "world":4,"nodes":1,"started_at":"2025-01-01T00:00:00Z"}
 *   {"type":"coll","backend":"mpi","op":"allreduce","bytes":1024,"group":2,
 *    "ranks_per_node":2,"time_s":1.2e-05,"busbw_Bps":1.7e+08,"repeats":5}
 * Exit code: 0 success, 1 bad option or failure (one message on rank 0's stderr).
 */
#include "coll_bench.h"
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- Output file (rank 0) ------------------------------------------------------------ */

typedef struct {
    pt_out o;         /* the file, through a temporary renamed when complete */
    bool header;      /* the header line is written */
} pt_cb_out;

static int out_open(pt_cb_out *out, const char *path, pt_err *err)
{
    *out = (pt_cb_out){0};
    return pt_out_open(&out->o, path, err);
}

/* Writes obj as one line and releases it. */
static int out_line(pt_cb_out *out, json_t *obj, pt_err *err)
{
    char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                           JSON_REAL_PRECISION(9))
                     : NULL;
    json_decref(obj);
    int bad = !text || fprintf(out->o.f, "%s\n", text) < 0 || fflush(out->o.f) != 0;
    free(text);
    return bad ? pt_err_set(err, "cannot write '%s': %s", out->o.path, strerror(errno)) : 0;
}

static int out_commit(pt_cb_out *out, pt_err *err)
{
    return pt_out_commit(&out->o, false, err);
}

static void out_abandon(pt_cb_out *out)
{
    pt_out_discard(&out->o);
    *out = (pt_cb_out){0};
}

/* The header, once: written with the first group, whose comm names the library. */
static int out_header(pt_cb_out *out, const char *backend, const pt_cb_group *g,
                      const pt_cb_topo *topo, pt_err *err)
{
    if (out->header)
        return 0;
    out->header = true;
    char library[256], host[256] = "unknown", started[32];
    pt_cb_group_library(g, library, sizeof library);
    gethostname(host, sizeof host);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm utc;
    strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &utc));
    return out_line(out,
                    json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:s}", "type", "header",
                              "backend", backend, "library", library, "host", host,
                              "world", topo->world, "nodes", topo->nodes, "started_at",
                              started),
                    err);
}

/* ---- Progress (rank 0, stderr) --------------------------------------------------------- */

typedef struct {
    pt_cb_progress_mode mode; /* BAR, LINES or NONE (AUTO resolved) */
    int done, total;          /* (op, group) pairs */
    double start_s;  /* MPI_Wtime when measuring began */
} pt_cb_progress;

static void progress_step(pt_cb_progress *p, pt_coll op, int group, int rpn, int points,
                          double op_s)
{
    p->done++;
    if (p->mode == PT_CB_PROGRESS_NONE)
        return;
    if (p->mode == PT_CB_PROGRESS_LINES) {
        fprintf(stderr, "ptprofile-coll: %s over %d ranks (%d per node): %d sizes in "
                "%.2f s [%d/%d]\n", pt_coll_name(op), group, rpn, points, op_s, p->done,
                p->total);
        return;
    }
    char bar[21];
    int filled = 20 * p->done / p->total;
    for (int i = 0; i < 20; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[20] = '\0';
    double left_s = (MPI_Wtime() - p->start_s) * (p->total - p->done) / p->done;
    fprintf(stderr, "\rptprofile-coll: [%s] %d/%d %-13s group %-4d ETA %dm%02ds ", bar,
            p->done, p->total, pt_coll_name(op), group, (int)left_s / 60, (int)left_s % 60);
    if (p->done == p->total)
        fputc('\n', stderr);
}

/* ---- Measuring ------------------------------------------------------------------------- */

/* What every member of one group measures with. */
typedef struct {
    const pt_cb_opts *o;
    pt_cb_group *group; /* the op's comm and buffers */
    MPI_Comm comm;  /* the group's ranks, for the barriers and the slowest time */
    int rank, size; /* in the group */
    double *times;  /* [o->repeats], the slowest rank's time of each repeat */
} pt_cb_bench;

/* One run of op on every member. Returns the slowest member's time: on every member
 * with `everywhere`, else on the group's rank 0 only. A failed run may leave other
 * members inside the collective, so it ends the whole job. */
static double timed_run(const pt_cb_bench *b, pt_coll op, int64_t bytes, bool everywhere)
{
    double t = 0, slowest = 0;
    pt_err err;
    MPI_Barrier(b->comm);
    if (pt_cb_group_run(b->group, op, bytes, &t, &err) != 0) {
        fprintf(stderr, "ptprofile-coll: rank %d: %s\n", b->rank, err.msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (everywhere)
        MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, b->comm);
    else
        MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, b->comm);
    return slowest;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Measures one point; on the group's rank 0 gives the median time and the repeats it
 * took. The first warm-up's time (the same on every member) sets how many runs fit
 * in --max-seconds-per-point: a second warm-up only when time is to spare, and at
 * least one timed repeat whatever the cap. */
static void measure_point(const pt_cb_bench *b, pt_coll op, int64_t bytes, double *time_s,
                          int *repeats)
{
    double warm_s = timed_run(b, op, bytes, true);
    double fit = warm_s > 0 ? floor(b->o->max_seconds_per_point / warm_s) - 1 : 1e9;
    if (fit > b->o->repeats)
        timed_run(b, op, bytes, true);
    int n = fit < 1 ? 1 : fit < b->o->repeats ? (int)fit : b->o->repeats;
    for (int i = 0; i < n; i++)
        b->times[i] = timed_run(b, op, bytes, false);
    *time_s = median(b->times, n);
    *repeats = n;
}

static json_t *sample_json(const char *backend, pt_coll op, int64_t bytes, int group,
                           int rpn, double time_s, int repeats)
{
    return json_pack("{s:s, s:s, s:s, s:I, s:i, s:i, s:f, s:f, s:i}", "type", "coll",
                     "backend", backend, "op", pt_coll_name(op), "bytes", (json_int_t)bytes,
                     "group", group, "ranks_per_node", rpn, "time_s", time_s, "busbw_Bps",
                     pt_coll_busbw(op, group, (double)bytes, time_s), "repeats", repeats);
}

/* Every size of one op. Rank 0 writes each sample; after a write error it measures
 * on (the other members are inside the same loop) and returns the error, on rank 0
 * only, for the caller to agree on. */
static int measure_op(const pt_cb_bench *b, pt_coll op, int rpn, pt_cb_out *out,
                      int *points, pt_err *err)
{
    int rc = 0;
    *points = 0;
    for (int64_t size = b->o->min_bytes; size <= b->o->max_bytes; size *= b->o->step) {
        int64_t bytes = pt_cb_round_bytes(op, b->size, size);
        if (bytes == 0)
            continue;
        double time_s;
        int repeats;
        measure_point(b, op, bytes, &time_s, &repeats);
        ++*points;
        if (rc == 0 && b->rank == 0)
            rc = out_line(out, sample_json(b->o->backend, op, bytes, b->size, rpn, time_s,
                                           repeats), err);
    }
    return rc;
}

/* What the whole run shares; out and progress are rank 0's (NULL elsewhere). */
typedef struct {
    const pt_cb_opts *o;
    const pt_cb_comm *cc;
    const pt_cb_topo *topo;
    pt_cb_out *out;
    pt_cb_progress *progress;
} pt_cb_run;

/* Collective over comm (world ranks 0..g-1, group's ranks), agreed. */
static int measure_group(const pt_cb_run *run, MPI_Comm comm, pt_cb_group *group,
                         pt_err *err)
{
    pt_cb_bench b = {.o = run->o, .group = group, .comm = comm};
    MPI_Comm_rank(comm, &b.rank);
    MPI_Comm_size(comm, &b.size);
    int rpn = pt_cb_topo_ranks_per_node(run->topo, b.size);
    b.times = malloc(sizeof *b.times * (size_t)run->o->repeats);
    int rc = b.times ? pt_cb_group_open(group, run->o->max_bytes, err)
                     : pt_err_set(err, "out of memory");
    if (rc == 0 && b.rank == 0)
        rc = out_header(run->out, run->o->backend, group, run->topo, err);
    if (pt_cb_agree(comm, rc, err) != 0) {
        free(b.times);
        return -1;
    }
    for (int c = 0; rc == 0 && c < PT_COLL_COUNT; c++) {
        if (!run->o->ops[c])
            continue;
        double t0 = MPI_Wtime();
        int points;
        rc = pt_cb_agree(comm, measure_op(&b, (pt_coll)c, rpn, run->out, &points, err), err);
        if (rc == 0 && b.rank == 0)
            progress_step(run->progress, (pt_coll)c, b.size, rpn, points, MPI_Wtime() - t0);
    }
    free(b.times);
    return rc;
}

/* Collective over the world, agreed: every group in turn; the ranks outside a group
 * wait for it in the agreement that ends it. */
static int measure_groups(const pt_cb_run *run, pt_err *err)
{
    for (int i = 0; i < run->o->ngroups; i++) {
        int g = run->o->groups[i];
        MPI_Comm comm;
        MPI_Comm_split(MPI_COMM_WORLD, run->topo->rank < g ? 0 : MPI_UNDEFINED,
                       run->topo->rank, &comm);
        pt_cb_group *group = NULL;
        int rc = pt_cb_agree(MPI_COMM_WORLD, pt_cb_group_split(run->cc, g, &group, err), err);
        if (rc == 0 && comm != MPI_COMM_NULL)
            rc = measure_group(run, comm, group, err);
        pt_cb_group_close(group);
        if (comm != MPI_COMM_NULL)
            MPI_Comm_free(&comm);
        if (pt_cb_agree(MPI_COMM_WORLD, rc, err) != 0)
            return -1;
    }
    return 0;
}

static int count_ops(const pt_cb_opts *o)
{
    int n = 0;
    for (int c = 0; c < PT_COLL_COUNT; c++)
        n += o->ops[c];
    return n;
}

/* Collective over the world, agreed: opens the output, measures, and commits it. */
static int measure_all(const pt_cb_opts *o, const pt_cb_comm *cc, const pt_cb_topo *topo,
                       pt_err *err)
{
    pt_cb_out out = {0};
    pt_cb_progress progress = {.mode = o->progress, .total = o->ngroups * count_ops(o)};
    if (progress.mode == PT_CB_PROGRESS_AUTO)
        progress.mode = isatty(STDERR_FILENO) ? PT_CB_PROGRESS_BAR : PT_CB_PROGRESS_LINES;
    bool root = topo->rank == 0;
    pt_cb_run run = {o, cc, topo, root ? &out : NULL, root ? &progress : NULL};
    int rc = root ? out_open(&out, o->out, err) : 0;
    if (pt_cb_agree(MPI_COMM_WORLD, rc, err) == 0) {
        progress.start_s = MPI_Wtime();
        rc = measure_groups(&run, err);
    } else
        rc = -1;
    if (root && rc == 0)
        rc = out_commit(&out, err);
    if (root && rc != 0)
        out_abandon(&out);
    return pt_cb_agree(MPI_COMM_WORLD, rc, err);
}

/* ---- Main ------------------------------------------------------------------------------- */

/* Every rank runs this; all return the same exit code. */
static int profile(int argc, char **argv, int world, pt_err *err)
{
    pt_cb_opts o;
    if (pt_cb_opts_parse(argc, argv, world, &o, err) != 0)
        return 1;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (o.help) {
        if (rank == 0)
            pt_cb_usage(stdout);
        return 0;
    }
    pt_cb_topo topo;
    pt_cb_comm cc;
    int rc = pt_cb_topo_init(&topo, err);
    if (rc == 0) {
        int opened = pt_cb_comm_open(&cc, o.backend, &topo, err);
        rc = pt_cb_agree(MPI_COMM_WORLD, opened, err);
        if (rc == 0)
            rc = measure_all(&o, &cc, &topo, err);
        if (opened == 0)
            pt_cb_comm_close(&cc);
        pt_cb_topo_free(&topo);
    }
    pt_cb_opts_free(&o);
    return rc == 0 ? 0 : 1;
}

static int tool_main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int world, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    pt_err err = {{0}};
    int rc = profile(argc, argv, world, &err);
    if (rc != 0 && rank == 0)
        fprintf(stderr, "ptprofile-coll: %s\n", err.msg);
    MPI_Finalize();
    return rc;
}

int main(int argc, char **argv)
{
    return pt_cli_exit("ptprofile-coll", tool_main(argc, argv));
}
