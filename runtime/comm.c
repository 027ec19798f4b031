/*
 * The MPI communication backend: a world and one communicator per process group of
 * the planner's rank grid. Groups are made with MPI_Comm_split, colouring each rank
 * by the smallest world rank of its group as pt_grid_group lists it and ordering by
 * world rank, so group order is the planner's. Host buffers, fp32 sums.
 */
#include "runtime.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One more than the grid's group kinds: the tied-embedding pair. */
enum { PT_COMM_EMBED = PT_GROUP_COUNT, PT_COMM_KINDS };

typedef struct {
    MPI_Request req;
    float *copy;
} pending_send;

struct pt_comm {
    bool mpi;          /* false: a single process started without a launcher */
    int rank, size;
    MPI_Comm group[PT_COMM_KINDS];
    pending_send *sends;
    int n_sends, cap_sends;
};

static int mpi_fail(pt_err *err, int code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    return pt_err_set(err, "%s: %s", what, text);
}

/* Whether a launcher (mpirun, a PMI/PMIx resource manager) started this process. */
static bool launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK",
                                       "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i]))
            return true;
    return false;
}

int pt_comm_init(int *argc, char ***argv, pt_comm **out, pt_err *err)
{
    pt_comm *c = calloc(1, sizeof *c);
    if (!c)
        return pt_err_set(err, "out of memory");
    for (int k = 0; k < PT_COMM_KINDS; k++)
        c->group[k] = MPI_COMM_NULL;
    c->size = 1;
    /* A process started on its own is a world of one: no MPI at all. */
    c->mpi = launched();
    if (c->mpi) {
        int inited = 0;
        MPI_Initialized(&inited);
        if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS) {
            free(c);
            return pt_err_set(err, "MPI_Init failed");
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    }
    *out = c;
    return 0;
}

int pt_comm_rank(const pt_comm *c) { return c->rank; }
int pt_comm_size(const pt_comm *c) { return c->size; }

static int split(pt_comm *c, int kind, int color, pt_err *err)
{
    int rc = MPI_Comm_split(MPI_COMM_WORLD, color, c->rank, &c->group[kind]);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "cannot build a process group");
    if (c->group[kind] != MPI_COMM_NULL)
        MPI_Comm_set_errhandler(c->group[kind], MPI_ERRORS_RETURN);
    return 0;
}

int pt_comm_groups(pt_comm *c, const pt_grid *g, pt_err *err)
{
    if (g->world != c->size)
        return pt_err_set(err, "the layout has %lld ranks, the run %d", (long long)g->world,
                          c->size);
    if (!c->mpi)
        return 0; /* every group of a world of one is this process alone */
    int64_t *ranks = malloc((size_t)c->size * sizeof *ranks);
    if (!ranks)
        return pt_err_set(err, "out of memory");
    int rc = 0;
    for (int k = 0; k < PT_GROUP_COUNT && rc == 0; k++) {
        pt_grid_group(g, (pt_group_kind)k, c->rank, ranks);
        rc = split(c, k, (int)ranks[0], err);
    }
    /* The first and last stage of each pipeline hold the tied embedding. */
    int coords[PT_NDIM];
    pt_grid_coords(g, c->rank, coords);
    int pp = g->size[PT_DIM_PP];
    bool end = coords[PT_DIM_PP] == 0 || coords[PT_DIM_PP] == pp - 1;
    if (rc == 0) {
        coords[PT_DIM_PP] = 0;
        rc = split(c, PT_COMM_EMBED, end ? (int)pt_grid_rank(g, coords) : MPI_UNDEFINED, err);
    }
    free(ranks);
    return rc;
}

static MPI_Comm comm_of(const pt_comm *c, int kind)
{
    if (!c->mpi)
        return MPI_COMM_NULL;
    return kind < 0 ? MPI_COMM_WORLD : c->group[kind];
}

/* MPI counts are ints: long buffers go in pieces. */
#define PT_CHUNK (INT_MAX / 2)

int pt_comm_allreduce(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err)
{
    MPI_Comm comm = comm_of(c, kind);
    if (comm == MPI_COMM_NULL)
        return 0;
    for (int64_t off = 0; off < n; off += PT_CHUNK) {
        int cnt = (int)(n - off < PT_CHUNK ? n - off : PT_CHUNK);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, comm);
        if (rc != MPI_SUCCESS)
            return mpi_fail(err, rc, "all-reduce");
    }
    return 0;
}

int pt_comm_allreduce_f64(pt_comm *c, int kind, double *buf, int64_t n, pt_err *err)
{
    MPI_Comm comm = comm_of(c, kind);
    if (comm == MPI_COMM_NULL)
        return 0;
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, comm);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, rc, "all-reduce");
}

int pt_comm_reducescatter(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                          pt_err *err)
{
    MPI_Comm comm = comm_of(c, kind);
    if (comm == MPI_COMM_NULL) {
        memmove(out, in, (size_t)n * sizeof *out);
        return 0;
    }
    if (n > INT_MAX)
        return pt_err_set(err, "reduce-scatter of %lld elements per rank is too large for MPI",
                          (long long)n);
    int rc = MPI_Reduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, comm);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, rc, "reduce-scatter");
}

int pt_comm_allgather(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                      pt_err *err)
{
    MPI_Comm comm = comm_of(c, kind);
    if (comm == MPI_COMM_NULL) {
        memmove(out, in, (size_t)n * sizeof *out);
        return 0;
    }
    int r;
    MPI_Comm_rank(comm, &r);
    if (n > INT_MAX)
        return pt_err_set(err, "all-gather of %lld elements per rank is too large for MPI",
                          (long long)n);
    int rc = in == out + (int64_t)r * n
                 ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_FLOAT, out, (int)n, MPI_FLOAT, comm)
                 : MPI_Allgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, comm);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, rc, "all-gather");
}

int pt_comm_recv(pt_comm *c, int from, int tag, float *buf, int64_t n, pt_err *err)
{
    if (!c->mpi)
        return pt_err_set(err, "internal: a receive in a world of one");
    int rc = MPI_Recv(buf, (int)n, MPI_FLOAT, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, rc, "receive");
}

int pt_comm_bcast(pt_comm *c, void *buf, int64_t n, pt_err *err)
{
    if (!c->mpi)
        return 0;
    int rc = MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpi_fail(err, rc, "broadcast");
}

bool pt_comm_all_ok(pt_comm *c, bool ok)
{
    if (!c->mpi)
        return ok;
    int mine = ok, all = 0;
    if (MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD) != MPI_SUCCESS)
        return false;
    return all != 0;
}

int pt_comm_isend(pt_comm *c, int to, int tag, const float *buf, int64_t n, pt_err *err)
{
    if (!c->mpi)
        return pt_err_set(err, "internal: a send in a world of one");
    if (c->n_sends == c->cap_sends) {
        int cap = c->cap_sends ? 2 * c->cap_sends : 16;
        pending_send *v = realloc(c->sends, (size_t)cap * sizeof *v);
        if (!v)
            return pt_err_set(err, "out of memory");
        c->sends = v;
        c->cap_sends = cap;
    }
    pending_send *p = &c->sends[c->n_sends];
    if (!(p->copy = malloc((size_t)n * sizeof *p->copy)))
        return pt_err_set(err, "out of memory for a send of %lld floats", (long long)n);
    memcpy(p->copy, buf, (size_t)n * sizeof *p->copy);
    int rc = MPI_Isend(p->copy, (int)n, MPI_FLOAT, to, tag, MPI_COMM_WORLD, &p->req);
    if (rc != MPI_SUCCESS) {
        free(p->copy);
        return mpi_fail(err, rc, "send");
    }
    c->n_sends++;
    return 0;
}

int pt_comm_wait_sends(pt_comm *c, pt_err *err)
{
    int bad = MPI_SUCCESS;
    for (int i = 0; i < c->n_sends; i++) {
        int rc = MPI_Wait(&c->sends[i].req, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            bad = rc;
        free(c->sends[i].copy);
    }
    c->n_sends = 0;
    return bad == MPI_SUCCESS ? 0 : mpi_fail(err, bad, "completing sends");
}

void pt_comm_abort(pt_comm *c, const char *why)
{
    fprintf(stderr, "ptrun: rank %d: %s\n", c ? c->rank : 0, why);
    fflush(stderr);
    if (!c || !c->mpi)
        exit(1);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void pt_comm_finalize(pt_comm *c)
{
    if (!c)
        return;
    bool mpi = c->mpi;
    if (mpi)
        pt_comm_wait_sends(c, NULL);
    free(c->sends);
    for (int k = 0; k < PT_COMM_KINDS; k++)
        if (c->group[k] != MPI_COMM_NULL)
            MPI_Comm_free(&c->group[k]);
    free(c);
    if (mpi)
        MPI_Finalize();
}
