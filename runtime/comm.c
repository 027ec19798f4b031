/*
 * The communication layer: the run's world, one communicator per process group of the
 * planner's rank grid, and every collective and transfer the engine uses, blocking and
 * asynchronous. This file owns the world (MPI, a file rendezvous, or a world of one),
 * the groups, the MPI backend on host buffers and host staging of device buffers over
 * MPI; comm_nccl.c adds NCCL for device buffers where the build found it.
 *
 * Groups are made with MPI_Comm_split, colouring each rank by the smallest world rank
 * of its group as pt_grid_group lists it and ordering by world rank, so group order is
 * the planner's; the NCCL communicators use the same order.
 *
 * Every MPI operation is started in its nonblocking form and waited for through the
 * watchdog (comm_watch.c, pt_comm_await), blocking calls included, so that no wait
 * outlasts the run's deadline.
 */
#include "comm_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mpi_fail(pt_err *err, int code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    return pt_err_set(err, "%s: %s", what, text);
}

size_t pt_comm_type_bytes(pt_comm_type t)
{
    return t == PT_CT_F64 ? 8 : t == PT_CT_BYTE ? 1 : 4;
}

static MPI_Datatype mpi_type(pt_comm_type t)
{
    return t == PT_CT_F32 ? MPI_FLOAT : t == PT_CT_F64 ? MPI_DOUBLE
           : t == PT_CT_I32 ? MPI_INT : MPI_BYTE;
}

const char *pt_comm_op_name(pt_comm_op op)
{
    static const char *const names[] = {"all-reduce", "all-reduce (max)", "all-reduce (min)",
                                        "reduce-scatter", "all-gather", "all-to-all",
                                        "broadcast"};
    return names[op];
}

bool pt_comm_have_nccl(void)
{
#ifdef PT_RT_HAVE_NCCL
    return true;
#else
    return false;
#endif
}

/* ---- The world ------------------------------------------------------------------------ */

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

static int init_mpi(pt_comm *c, int *argc, char ***argv, pt_err *err)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS)
        return pt_err_set(err, "MPI_Init failed");
    c->mpi = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    /* the ranks that share this node's memory are the ranks of this node (MPI 3.1,
     * MPI_COMM_TYPE_SHARED), ordered by world rank */
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                            &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_free(&node);
    }
    return 0;
}

/* A launcher without MPI: rank and world from its environment, the ranks met in the
 * rendezvous directory. */
static int init_file(pt_comm *c, const pt_rdv *r, pt_err *err)
{
    if (!r->dir[0]) {
        if (r->rank == 0)
            return 0; /* perhaps one process in a batch script: a world of one */
        return pt_err_set(err, "started as rank %d of %d (%s) but without MPI: launch through "
                               "MPI (mpirun; srun --mpi=pmix), or set PT_RENDEZVOUS to a "
                               "directory that every node shares so the ranks meet there",
                          r->rank, r->size, r->source);
    }
    if (!pt_comm_have_nccl())
        return pt_err_set(err, "rank %d of %d (%s) meets the others in %s without MPI, so "
                               "every collective must go through NCCL, which this build "
                               "lacks: launch through MPI (mpirun; srun --mpi=pmix)",
                          r->rank, r->size, r->source, r->dir);
    c->file = true;
    c->rdv = *r;
    c->rank = r->rank;
    c->size = r->size;
    c->local_rank = r->local_rank;
    return pt_rdv_barrier(&c->rdv, "join", err);
}

int pt_comm_init(int *argc, char ***argv, pt_comm **out, pt_err *err)
{
    pt_comm *c = calloc(1, sizeof *c);
    if (!c)
        return pt_err_set(err, "out of memory");
    for (int k = 0; k < PT_COMM_SLOTS; k++)
        c->group[k] = MPI_COMM_NULL;
    c->size = 1;
    c->step = -1;
    int rc = pt_comm_timeout_from_env(&c->timeout_s, err);
    pt_rdv r;
    if (rc == 0 && launched())
        rc = init_mpi(c, argc, argv, err);
    else if (rc == 0 && (rc = pt_rdv_from_env(&r, err)) == 0 && r.size > 1)
        rc = init_file(c, &r, err);
    if (rc) {
        free(c);
        return -1;
    }
    if (c->mpi)
        c->group[PT_COMM_WORLD] = MPI_COMM_WORLD;
    c->grp[PT_COMM_WORLD] = (pt_comm_group){.in = true, .rank = c->rank, .size = c->size};
    *out = c;
    return 0;
}

int pt_comm_rank(const pt_comm *c) { return c->rank; }
int pt_comm_size(const pt_comm *c) { return c->size; }
int pt_comm_local_rank(const pt_comm *c) { return c->local_rank; }

const char *pt_comm_backend(const pt_comm *c)
{
    if (c->size == 1)
        return "none";
    if (c->mem == PT_MEM_NCCL)
        return c->file ? "nccl+file" : "nccl";
    return c->mem == PT_MEM_STAGED ? "mpi+staging" : "mpi";
}

/* ---- Groups ----------------------------------------------------------------------------- */

/* This rank's place among `members` (n world ranks, any order, this rank among them):
 * rank by world rank, as MPI_Comm_split with key = world rank orders them. */
static pt_comm_group place_in(const pt_comm *c, const int64_t *members, int n)
{
    pt_comm_group g = {.in = true, .size = n, .leader = INT_MAX};
    for (int i = 0; i < n; i++) {
        if (members[i] < c->rank)
            g.rank++;
        if (members[i] < g.leader)
            g.leader = (int)members[i];
    }
    return g;
}

static int split(pt_comm *c, int slot, int color, pt_err *err)
{
    int rc = MPI_Comm_split(MPI_COMM_WORLD, color, c->rank, &c->group[slot]);
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, "cannot build a process group");
    if (c->group[slot] != MPI_COMM_NULL)
        MPI_Comm_set_errhandler(c->group[slot], MPI_ERRORS_RETURN);
    return 0;
}

/* Keeps the world ranks of slot's group (pt_grid_group's members, group order by
 * world rank) for the watchdog's report. */
static int keep_members(pt_comm *c, int slot, const int64_t *ranks, pt_err *err)
{
    int n = c->grp[slot].size;
    int *m = malloc((size_t)n * sizeof *m);
    if (!m)
        return pt_err_set(err, "out of memory");
    for (int i = 0; i < n; i++)
        m[i] = (int)ranks[i];
    /* group order is world order (place_in); pt_grid_group may list them otherwise */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && m[j - 1] > m[j]; j--) {
            int t = m[j];
            m[j] = m[j - 1];
            m[j - 1] = t;
        }
    free(c->members[slot]);
    c->members[slot] = m;
    return 0;
}

int pt_comm_groups(pt_comm *c, const pt_grid *g, pt_err *err)
{
    if (g->world != c->size)
        return pt_err_set(err, "the layout has %lld ranks, the run %d", (long long)g->world,
                          c->size);
    if (c->size == 1)
        return 0; /* every group of a world of one is this process alone */
    int64_t *ranks = malloc((size_t)c->size * sizeof *ranks);
    if (!ranks)
        return pt_err_set(err, "out of memory");
    int rc = 0;
    for (int k = 0; k < PT_GROUP_COUNT && rc == 0; k++) {
        pt_grid_group(g, (pt_group_kind)k, c->rank, ranks);
        c->grp[k] = place_in(c, ranks, pt_grid_group_size(g, (pt_group_kind)k));
        rc = keep_members(c, k, ranks, err);
        if (rc == 0 && c->mpi)
            rc = split(c, k, c->grp[k].leader, err);
    }
    /* The first and last stage of each pipeline hold the tied embedding. */
    int coords[PT_NDIM];
    pt_grid_coords(g, c->rank, coords);
    int pp = g->size[PT_DIM_PP];
    bool end = coords[PT_DIM_PP] == 0 || coords[PT_DIM_PP] == pp - 1;
    coords[PT_DIM_PP] = 0;
    ranks[0] = pt_grid_rank(g, coords);
    coords[PT_DIM_PP] = pp - 1;
    ranks[1] = pt_grid_rank(g, coords);
    c->grp[PT_COMM_EMBED] = end ? place_in(c, ranks, pp > 1 ? 2 : 1) : (pt_comm_group){0};
    if (rc == 0 && end)
        rc = keep_members(c, PT_COMM_EMBED, ranks, err);
    if (rc == 0 && c->mpi)
        rc = split(c, PT_COMM_EMBED, end ? (int)ranks[0] : MPI_UNDEFINED, err);
    free(ranks);
    c->grouped = rc == 0;
    return rc;
}

/* ---- Selecting the device path ----------------------------------------------------------- */

int pt_comm_use_staging(pt_comm *c, pt_kernels *kn, pt_err *err)
{
    if (c->file)
        return pt_err_set(err, "rank %d of %d met the others through %s without MPI: device "
                               "buffers cannot be staged over MPI there",
                          c->rank, c->size, c->rdv.dir);
    c->kn = kn;
    c->mem = PT_MEM_STAGED;
    return 0;
}

int pt_comm_use_device(pt_comm *c, pt_kernels *kn, pt_err *err)
{
    c->kn = kn;
    if (strcmp(kn->name, "cuda") != 0) {
        if (c->file)
            return pt_err_set(err, "rank %d of %d met the others through %s without MPI, so "
                                   "its collectives need NCCL, but the %s backend has no NCCL: "
                                   "launch CPU runs through MPI (mpirun; srun --mpi=pmix)",
                              c->rank, c->size, c->rdv.dir, kn->name);
        c->mem = PT_MEM_HOST;
        return 0;
    }
    const char *env = getenv("PT_COMM_NCCL");
    bool want_nccl = !(env && strcmp(env, "0") == 0);
    if (c->size == 1) {
        c->mem = PT_MEM_STAGED; /* only local copies, on the device */
        return 0;
    }
    if (c->file && !want_nccl)
        return pt_err_set(err, "PT_COMM_NCCL=0, but rank %d of %d has no MPI (it met the "
                               "others through %s): NCCL is its only way to communicate",
                          c->rank, c->size, c->rdv.dir);
#ifdef PT_RT_HAVE_NCCL
    if (want_nccl && c->mpi) {
        /* NCCL refuses two ranks on one GPU: stage through host memory over MPI then */
        bool shared = false;
        if (pt_nccl_device_shared(c, &shared, err))
            return -1;
        if (shared) {
            if (c->rank == 0)
                fprintf(stderr, "ptrun: ranks share a GPU, which NCCL refuses: collectives "
                                "are staged through host memory over MPI\n");
            want_nccl = false;
        }
    }
    if (want_nccl) {
        if (!c->grouped)
            return pt_err_set(err, "internal: pt_comm_use_device before pt_comm_groups");
        if (pt_nccl_open(c, err))
            return -1;
        c->mem = PT_MEM_NCCL;
        /* every rank has read its ids once all are past a world collective: only then
         * may the directory be emptied */
        if (c->file) {
            if (!pt_comm_all_ok(c, true))
                return pt_err_set(err, "rendezvous in %s: the world's first NCCL collective "
                                       "failed", c->rdv.dir);
            if (c->rank == 0)
                pt_rdv_cleanup(&c->rdv);
        }
        return 0;
    }
#endif
    c->mem = PT_MEM_STAGED;
    return 0;
}

/* ---- Collectives ------------------------------------------------------------------------- */

/* A group of one: the result is the input. */
static void local_op(pt_comm *c, pt_comm_op op, pt_comm_type t, const void *in, void *out,
                     int64_t n, bool dev)
{
    size_t bytes = (size_t)n * pt_comm_type_bytes(t);
    if (op == PT_CO_SUM || op == PT_CO_MAX || op == PT_CO_MIN || op == PT_CO_BCAST ||
        in == out || bytes == 0)
        return;
    if (dev)
        c->kn->copy(c->kn, out, in, bytes, PT_KCOPY_D2D);
    else
        memmove(out, in, bytes);
}

/* Frees a request's staging buffers and the request. */
static void req_free(pt_comm_req *r)
{
    if (!r)
        return;
    free(r->host_in);
    free(r->host_out);
    free(r);
}

/* Completes the MPI part of r: waits for its requests under the watchdog's deadline,
 * then copies the staged result to the device. */
static int mpi_finish(pt_comm *c, pt_comm_req *r, pt_err *err)
{
    int rc = r->n_mpi ? pt_comm_await(c, r->n_mpi, r->mpi, &r->what, err) : 0;
    r->n_mpi = 0;
    if (rc)
        return -1;
    if (r->dst && r->dst_bytes)
        c->kn->copy(c->kn, r->dst, r->host_out, r->dst_bytes, PT_KCOPY_H2D);
    return 0;
}

/* MPI counts are ints: long reductions go in pieces. */
#define PT_CHUNK (INT_MAX / 2)

/* Starts op on MPI over comm with host buffers hin/hout, its requests into r: always
 * the nonblocking form, so that every wait polls under the watchdog's deadline. */
static int mpi_start(pt_comm_op op, MPI_Comm comm, int grank, pt_comm_type t, void *hin,
                     void *hout, int64_t n, pt_comm_req *r, pt_err *err)
{
    MPI_Datatype ty = mpi_type(t);
    size_t es = pt_comm_type_bytes(t);
    int rc = MPI_SUCCESS;
    if (op == PT_CO_SUM || op == PT_CO_MAX || op == PT_CO_MIN) {
        MPI_Op mop = op == PT_CO_SUM ? MPI_SUM : op == PT_CO_MAX ? MPI_MAX : MPI_MIN;
        for (int64_t off = 0; off < n && rc == MPI_SUCCESS; off += PT_CHUNK) {
            int cnt = (int)(n - off < PT_CHUNK ? n - off : PT_CHUNK);
            void *p = (char *)hout + off * (int64_t)es;
            if (r->n_mpi == (int)(sizeof r->mpi / sizeof *r->mpi)) {
                return pt_err_set(err, "an all-reduce of %lld elements is too large for MPI",
                                  (long long)n);
            } else {
                rc = MPI_Iallreduce(MPI_IN_PLACE, p, cnt, ty, mop, comm, &r->mpi[r->n_mpi]);
                r->n_mpi += rc == MPI_SUCCESS;
            }
        }
        return rc == MPI_SUCCESS ? 0 : mpi_fail(err, rc, pt_comm_op_name(op));
    }
    if (n > INT_MAX)
        return pt_err_set(err, "%s of %lld elements per rank is too large for MPI",
                          pt_comm_op_name(op), (long long)n);
    int cnt = (int)n;
    MPI_Request *q = &r->mpi[r->n_mpi];
    switch (op) {
    case PT_CO_BCAST:
        rc = MPI_Ibcast(hout, cnt, ty, 0, comm, q);
        break;
    case PT_CO_RS:
        rc = MPI_Ireduce_scatter_block(hin, hout, cnt, ty, MPI_SUM, comm, q);
        break;
    case PT_CO_AG:
        /* the input already in its place in the output: MPI's in-place form */
        if (hin == (char *)hout + (int64_t)grank * n * (int64_t)es)
            rc = MPI_Iallgather(MPI_IN_PLACE, 0, ty, hout, cnt, ty, comm, q);
        else
            rc = MPI_Iallgather(hin, cnt, ty, hout, cnt, ty, comm, q);
        break;
    default: /* PT_CO_A2A */
        rc = MPI_Ialltoall(hin, cnt, ty, hout, cnt, ty, comm, q);
        break;
    }
    if (rc != MPI_SUCCESS)
        return mpi_fail(err, rc, pt_comm_op_name(op));
    r->n_mpi++;
    return 0;
}

/* op over MPI; with `staged`, in and out are device buffers copied through host
 * memory. Blocking when reqp is NULL. */
static int mpi_op(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                  void *out, int64_t n, bool staged, pt_comm_req **reqp, pt_err *err)
{
    const pt_comm_group *g = &c->grp[slot];
    size_t es = pt_comm_type_bytes(t);
    int64_t n_in, n_out;
    pt_comm_op_sizes(op, n, g->size, &n_in, &n_out);
    pt_comm_req stack = {0}, *r = reqp ? calloc(1, sizeof *r) : &stack;
    if (!r)
        return pt_err_set(err, "out of memory");
    r->what = (pt_comm_wait_for){.op = pt_comm_op_name(op), .slot = slot,
                                 .bytes = (n_in > n_out ? n_in : n_out) * (int64_t)es};
    void *hin = (void *)in, *hout = out;
    int rc = 0;
    if (staged) {
        size_t out_bytes = (size_t)n_out * es;
        r->host_out = hout = malloc(out_bytes ? out_bytes : 1);
        if (op == PT_CO_AG) {
            hin = (char *)hout + (int64_t)g->rank * n * (int64_t)es;
        } else if (op == PT_CO_RS || op == PT_CO_A2A) {
            r->host_in = hin = malloc(n_in ? (size_t)n_in * es : 1);
        } else {
            hin = hout; /* in place */
        }
        if (!hout || !hin) {
            rc = pt_err_set(err, "out of memory staging a %s of %lld bytes",
                            pt_comm_op_name(op), (long long)(n_out * (int64_t)es));
        } else {
            c->kn->copy(c->kn, hin, op == PT_CO_RS || op == PT_CO_A2A || op == PT_CO_AG ? in
                                                                                        : out,
                        (size_t)(op == PT_CO_AG ? n : n_in) * es, PT_KCOPY_D2H);
            r->dst = out;
            r->dst_bytes = out_bytes;
        }
    }
    if (rc == 0)
        rc = mpi_start(op, c->group[slot], g->rank, t, hin, hout, n, r, err);
    if (rc == 0 && !reqp)
        rc = mpi_finish(c, r, err);
    if (rc != 0 || !reqp) {
        if (reqp) {
            req_free(r);
        } else {
            free(stack.host_in);
            free(stack.host_out);
        }
        return rc;
    }
    *reqp = r;
    return 0;
}

/* Every collective: picks the path. `backend`: the buffers are [backend] memory. */
static int coll(pt_comm *c, pt_comm_op op, int kind, pt_comm_type t, const void *in, void *out,
                int64_t n, bool backend, pt_comm_req **req, pt_err *err)
{
    if (req)
        *req = NULL;
    int slot = kind < 0 ? PT_COMM_WORLD : kind;
    if (slot >= PT_COMM_SLOTS)
        return pt_err_set(err, "internal: group kind %d", kind);
    const pt_comm_group *g = &c->grp[slot];
    bool dev = backend && c->mem != PT_MEM_HOST;
    if (!g->in || g->size <= 1) {
        local_op(c, op, t, in, out, n, dev);
        return 0;
    }
#ifdef PT_RT_HAVE_NCCL
    if (dev && c->mem == PT_MEM_NCCL)
        return pt_nccl_coll(c, op, slot, t, in, out, n, req, err);
    if (c->file && c->nccl && !req)
        return pt_nccl_host_coll(c, op, slot, t, in, out, n, err);
#endif
    if (c->file)
        return pt_err_set(err, "internal: a %s before pt_comm_use_device in a run without MPI",
                          pt_comm_op_name(op));
    return mpi_op(c, op, slot, t, in, out, n, dev && c->mem == PT_MEM_STAGED, req, err);
}

int pt_comm_allreduce(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err)
{
    return coll(c, PT_CO_SUM, kind, PT_CT_F32, buf, buf, n, true, NULL, err);
}

int pt_comm_allreduce_f64(pt_comm *c, int kind, double *buf, int64_t n, pt_err *err)
{
    return coll(c, PT_CO_SUM, kind, PT_CT_F64, buf, buf, n, false, NULL, err);
}

int pt_comm_allreduce_max(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err)
{
    return coll(c, PT_CO_MAX, kind, PT_CT_F32, buf, buf, n, true, NULL, err);
}

int pt_comm_reducescatter(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                          pt_err *err)
{
    return coll(c, PT_CO_RS, kind, PT_CT_F32, in, out, n, true, NULL, err);
}

int pt_comm_allgather(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                      pt_err *err)
{
    return coll(c, PT_CO_AG, kind, PT_CT_F32, in, out, n, true, NULL, err);
}

int pt_comm_alltoall(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                     pt_err *err)
{
    return coll(c, PT_CO_A2A, kind, PT_CT_F32, in, out, n, true, NULL, err);
}

int pt_comm_iallreduce(pt_comm *c, int kind, float *buf, int64_t n, pt_comm_req **req,
                       pt_err *err)
{
    return coll(c, PT_CO_SUM, kind, PT_CT_F32, buf, buf, n, true, req, err);
}

int pt_comm_ireducescatter(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                           pt_comm_req **req, pt_err *err)
{
    return coll(c, PT_CO_RS, kind, PT_CT_F32, in, out, n, true, req, err);
}

int pt_comm_iallgather(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                       pt_comm_req **req, pt_err *err)
{
    return coll(c, PT_CO_AG, kind, PT_CT_F32, in, out, n, true, req, err);
}

int pt_comm_ialltoall(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                      pt_comm_req **req, pt_err *err)
{
    return coll(c, PT_CO_A2A, kind, PT_CT_F32, in, out, n, true, req, err);
}

int pt_comm_wait(pt_comm *c, pt_comm_req *req, pt_err *err)
{
    if (!req)
        return 0;
#ifdef PT_RT_HAVE_NCCL
    if (req->event)
        return pt_nccl_wait(c, req, err);
#endif
    int rc = mpi_finish(c, req, err);
    req_free(req);
    return rc;
}

int pt_comm_bcast(pt_comm *c, void *buf, int64_t n, pt_err *err)
{
    return coll(c, PT_CO_BCAST, -1, PT_CT_BYTE, buf, buf, n, false, NULL, err);
}

bool pt_comm_all_ok(pt_comm *c, bool ok)
{
    int v = ok; /* the minimum of 0/1 is their AND */
    if (coll(c, PT_CO_MIN, -1, PT_CT_I32, &v, &v, 1, false, NULL, NULL))
        return false;
    return v != 0;
}

/* ---- Gathering bytes to rank 0 ------------------------------------------------------------ */

static int gather_mpi(pt_comm *c, const void *buf, int64_t n, void **all, int64_t *sizes,
                      pt_err *err)
{
    if (n > INT_MAX)
        return pt_err_set(err, "a gather of %lld bytes is too large for MPI", (long long)n);
    int mine = (int)n, *counts = NULL, *displs = NULL;
    if (c->rank == 0 && (!(counts = calloc((size_t)c->size, sizeof *counts)) ||
                         !(displs = calloc((size_t)c->size, sizeof *displs)))) {
        free(counts);
        return pt_err_set(err, "out of memory");
    }
    pt_comm_wait_for what = {.op = "gather", .slot = PT_COMM_WORLD, .bytes = n};
    MPI_Request q;
    int rc = MPI_Igather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD, &q);
    if (rc == MPI_SUCCESS && pt_comm_await(c, 1, &q, &what, err)) {
        free(counts);
        free(displs);
        return -1;
    }
    int64_t total = 0;
    for (int r = 0; c->rank == 0 && r < c->size; r++) {
        displs[r] = (int)total;
        sizes[r] = counts[r];
        total += counts[r];
    }
    if (rc == MPI_SUCCESS && total > INT_MAX) {
        free(counts);
        free(displs);
        return pt_err_set(err, "a gather of %lld bytes is too large for MPI", (long long)total);
    }
    if (rc == MPI_SUCCESS && c->rank == 0 && !(*all = malloc(total > 0 ? (size_t)total : 1)))
        rc = MPI_ERR_NO_MEM;
    if (rc == MPI_SUCCESS)
        rc = MPI_Igatherv(buf, mine, MPI_BYTE, *all, counts, displs, MPI_BYTE, 0,
                          MPI_COMM_WORLD, &q);
    bool late = rc == MPI_SUCCESS && pt_comm_await(c, 1, &q, &what, err);
    free(counts);
    free(displs);
    if (late) {
        free(*all);
        *all = NULL;
        return -1;
    }
    if (rc != MPI_SUCCESS) {
        free(*all);
        *all = NULL;
        return mpi_fail(err, rc, "gather");
    }
    return 0;
}

/* Without MPI: every rank's size, then every rank's bytes padded to the largest, gathered
 * everywhere (NCCL has no gather) and packed on rank 0. */
static int gather_collective(pt_comm *c, const void *buf, int64_t n, void **all,
                             int64_t *sizes, pt_err *err)
{
    int64_t *len = calloc((size_t)c->size, sizeof *len);
    if (!len)
        return pt_err_set(err, "out of memory");
    len[c->rank] = n;
    int rc = coll(c, PT_CO_AG, -1, PT_CT_BYTE, &len[c->rank], len, sizeof *len, false, NULL,
                  err);
    int64_t most = 0;
    for (int r = 0; rc == 0 && r < c->size; r++)
        most = len[r] > most ? len[r] : most;
    char *pad = rc == 0 ? calloc((size_t)(most * c->size) + 1, 1) : NULL;
    if (rc == 0 && !pad)
        rc = pt_err_set(err, "out of memory gathering %lld bytes from %d ranks",
                        (long long)most, c->size);
    if (rc == 0) {
        memcpy(pad + most * c->rank, buf, (size_t)n);
        rc = coll(c, PT_CO_AG, -1, PT_CT_BYTE, pad + most * c->rank, pad, most, false, NULL,
                  err);
    }
    if (rc == 0 && c->rank == 0) {
        int64_t at = 0;
        for (int r = 0; r < c->size; r++) {
            memmove(pad + at, pad + most * r, (size_t)len[r]);
            sizes[r] = len[r];
            at += len[r];
        }
        *all = pad;
        pad = NULL;
    }
    free(pad);
    free(len);
    return rc;
}

int pt_comm_gather_bytes(pt_comm *c, const void *buf, int64_t n, void **all, int64_t *sizes,
                         pt_err *err)
{
    *all = NULL;
    if (c->size == 1) {
        if (!(*all = malloc(n > 0 ? (size_t)n : 1)))
            return pt_err_set(err, "out of memory");
        memcpy(*all, buf, (size_t)n);
        sizes[0] = n;
        return 0;
    }
    return c->mpi ? gather_mpi(c, buf, n, all, sizes, err)
                  : gather_collective(c, buf, n, all, sizes, err);
}

/* ---- Point to point ------------------------------------------------------------------------ */

static int recv_typed(pt_comm *c, int from, int tag, void *buf, int64_t n, pt_comm_type t,
                      pt_err *err)
{
    if (c->size == 1)
        return pt_err_set(err, "internal: a receive in a world of one");
    size_t bytes = (size_t)n * pt_comm_type_bytes(t);
#ifdef PT_RT_HAVE_NCCL
    if (c->mem == PT_MEM_NCCL)
        return pt_nccl_recv(c, from, buf, (int64_t)bytes, err);
#endif
    if (!c->mpi)
        return pt_err_set(err, "internal: a receive before pt_comm_use_device in a run "
                               "without MPI");
    if (n > INT_MAX)
        return pt_err_set(err, "a receive of %lld elements is too large for MPI", (long long)n);
    bool staged = c->mem == PT_MEM_STAGED;
    void *h = staged ? malloc(bytes ? bytes : 1) : buf;
    if (!h)
        return pt_err_set(err, "out of memory staging a receive of %zu bytes", bytes);
    pt_comm_wait_for what = {.op = "receive", .slot = -1, .peer = from, .bytes = (int64_t)bytes};
    MPI_Request q;
    int rc = MPI_Irecv(h, (int)n, mpi_type(t), from, tag, MPI_COMM_WORLD, &q);
    if (rc != MPI_SUCCESS) {
        if (staged)
            free(h);
        return mpi_fail(err, rc, "receive");
    }
    /* a missed deadline under timeout_returns leaves the receive posted: keep h */
    if (pt_comm_await(c, 1, &q, &what, err))
        return -1;
    if (staged) {
        c->kn->copy(c->kn, buf, h, bytes, PT_KCOPY_H2D);
        free(h);
    }
    return 0;
}

static int isend_typed(pt_comm *c, int to, int tag, const void *buf, int64_t n,
                       pt_comm_type t, pt_err *err)
{
    if (c->size == 1)
        return pt_err_set(err, "internal: a send in a world of one");
    size_t bytes = (size_t)n * pt_comm_type_bytes(t);
#ifdef PT_RT_HAVE_NCCL
    if (c->mem == PT_MEM_NCCL)
        return pt_nccl_send(c, to, buf, (int64_t)bytes, err);
#endif
    if (!c->mpi)
        return pt_err_set(err, "internal: a send before pt_comm_use_device in a run "
                               "without MPI");
    if (n > INT_MAX)
        return pt_err_set(err, "a send of %lld elements is too large for MPI", (long long)n);
    if (c->n_sends == c->cap_sends) {
        int cap = c->cap_sends ? 2 * c->cap_sends : 16;
        pt_comm_send *v = realloc(c->sends, (size_t)cap * sizeof *v);
        if (!v)
            return pt_err_set(err, "out of memory");
        c->sends = v;
        c->cap_sends = cap;
    }
    pt_comm_send *p = &c->sends[c->n_sends];
    if (!(p->copy = malloc(bytes ? bytes : 1)))
        return pt_err_set(err, "out of memory for a send of %zu bytes", bytes);
    if (c->mem == PT_MEM_STAGED)
        c->kn->copy(c->kn, p->copy, buf, bytes, PT_KCOPY_D2H);
    else
        memcpy(p->copy, buf, bytes);
    p->what = (pt_comm_wait_for){.op = "send", .slot = -1, .peer = to, .bytes = (int64_t)bytes};
    int rc = MPI_Isend(p->copy, (int)n, mpi_type(t), to, tag, MPI_COMM_WORLD, &p->req);
    if (rc != MPI_SUCCESS) {
        free(p->copy);
        return mpi_fail(err, rc, "send");
    }
    c->n_sends++;
    return 0;
}

int pt_comm_recv(pt_comm *c, int from, int tag, float *buf, int64_t n, pt_err *err)
{
    return recv_typed(c, from, tag, buf, n, PT_CT_F32, err);
}

int pt_comm_isend(pt_comm *c, int to, int tag, const float *buf, int64_t n, pt_err *err)
{
    return isend_typed(c, to, tag, buf, n, PT_CT_F32, err);
}

int pt_comm_recv_bytes(pt_comm *c, int from, int tag, void *buf, int64_t bytes, pt_err *err)
{
    return recv_typed(c, from, tag, buf, bytes, PT_CT_BYTE, err);
}

int pt_comm_isend_bytes(pt_comm *c, int to, int tag, const void *buf, int64_t bytes,
                        pt_err *err)
{
    return isend_typed(c, to, tag, buf, bytes, PT_CT_BYTE, err);
}

static int wait_mpi_sends(pt_comm *c, pt_err *err)
{
    int rc = 0, done = 0;
    for (; done < c->n_sends && rc == 0; done++) {
        rc = pt_comm_await(c, 1, &c->sends[done].req, &c->sends[done].what, err);
        if (rc == 0)
            free(c->sends[done].copy);
    }
    /* after an error the sends not completed stay posted (MPI may still read their
     * copies): they are kept for a later wait, or for pt_comm_finalize */
    if (rc)
        done--;
    if (done > 0 && c->n_sends > done)
        memmove(c->sends, c->sends + done, (size_t)(c->n_sends - done) * sizeof *c->sends);
    c->n_sends -= done;
    return rc;
}

/* At the end: the sends that completed are freed without waiting for the others (after
 * an error a peer may never receive them); those MPI may still read stay allocated. */
static void drop_mpi_sends(pt_comm *c)
{
    for (int i = 0; i < c->n_sends; i++) {
        int complete = 0;
        if (MPI_Test(&c->sends[i].req, &complete, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
            complete)
            free(c->sends[i].copy);
    }
    c->n_sends = 0;
}

int pt_comm_wait_sends(pt_comm *c, pt_err *err)
{
    if (wait_mpi_sends(c, err))
        return -1;
#ifdef PT_RT_HAVE_NCCL
    if (c->mem == PT_MEM_NCCL)
        return pt_nccl_flush(c, err);
#endif
    return 0;
}

/* ---- The end ------------------------------------------------------------------------------- */

void pt_comm_abort(pt_comm *c, const char *why)
{
    fprintf(stderr, "ptrun: rank %d: %s\n", c ? c->rank : 0, why);
    fflush(stderr);
    if (c && c->file)
        pt_rdv_abort(&c->rdv, why); /* the ranks waiting in the directory see it */
#ifdef PT_RT_HAVE_NCCL
    if (c && c->nccl)
        pt_nccl_abort(c);
#endif
    if (!c || !c->mpi)
        exit(1);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void pt_comm_finalize(pt_comm *c)
{
    if (!c)
        return;
    bool mpi = c->mpi;
    drop_mpi_sends(c);
#ifdef PT_RT_HAVE_NCCL
    if (c->nccl) /* drops sends still queued: the kernel backend may be gone already */
        pt_nccl_close(c);
#endif
    free(c->sends);
    for (int k = 0; k < PT_COMM_WORLD; k++)
        if (c->group[k] != MPI_COMM_NULL)
            MPI_Comm_free(&c->group[k]);
    for (int k = 0; k < PT_COMM_SLOTS; k++)
        free(c->members[k]);
    free(c);
    if (mpi)
        MPI_Finalize();
}
