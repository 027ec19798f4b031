/*
 * The communication layer's front: the run's world (MPI, a file rendezvous, or a
 * world of one), one communicator per process group of the planner's rank grid, the
 * choice of backend, and every call the runtime makes, each of which handles what all
 * backends share (the group, a group of one, a world of one) and then calls the one
 * backend table chosen for its kind of buffer (comm_internal.h): comm_mpi.c for MPI
 * on host buffers and host staging, comm_nccl.c for NCCL.
 *
 * Groups are made with MPI_Comm_split, colouring each rank by the smallest world rank
 * of its group as pt_grid_group lists it and ordering by world rank, so group order is
 * the planner's; the NCCL communicators use the same order.
 */
#include "comm_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t pt_comm_type_bytes(pt_comm_type t)
{
    return t == PT_CT_F64 ? 8 : t == PT_CT_BYTE ? 1 : t == PT_CT_BF16 || t == PT_CT_BF16W ? 2 : 4;
}

/* What comm_nccl.c does with sends (nccl_send; keep the two together): each its own
 * operation on a send stream, after an event on the kernel stream, its copy in one of
 * send_slots slots used in turn. Four slots: the model check proves two enough for
 * every schedule (tests/comm/test_sched_nccl.c); the other two let a receiver fall a
 * transfer or two behind before a copy has to wait for it. */
const pt_p2p_issue pt_comm_nccl_p2p = {.policy = PT_P2P_SEND_STREAM, .send_slots = 4};

const char *pt_comm_op_name(pt_comm_op op)
{
    static const char *const names[] = {"all-reduce", "all-reduce (max)", "all-reduce (min)",
                                        "reduce-scatter", "all-gather", "all-to-all",
                                        "broadcast"};
    return names[op];
}

bool pt_comm_have_nccl(void)
{
#ifdef PT_COMM_HAVE_NCCL
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

/* This process's world rank as the launcher put it in the environment, for what is
 * said before MPI_Init returns; 0 when it does not say. */
static int launcher_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v);
    }
    return 0;
}

/* The world of a started MPI: rank, size and rank on this node, which the ranks
 * agree on in the world's first collective. */
static void meet_mpi(pt_comm *c, bool own)
{
    c->mpi = true;
    c->own_mpi = own;
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
}

/* MPI_Init and the world's first collective (meet_mpi), under a guard: both wait for
 * every rank, and neither can poll. */
static int init_mpi(pt_comm *c, int *argc, char ***argv, double start_timeout_s, pt_err *err)
{
    int inited = 0;
    MPI_Initialized(&inited);
    c->rank = launcher_rank();
    pt_comm_guard g;
    if (pt_comm_guard_start(&g, c, "MPI initialisation", start_timeout_s,
                            "--start-timeout", err))
        return -1;
    bool ok = inited || MPI_Init(argc, argv) == MPI_SUCCESS;
    if (ok)
        meet_mpi(c, !inited);
    pt_comm_guard_end(&g);
    return ok ? 0 : pt_err_set(err, "MPI_Init failed");
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
    c->dev = c->host = &pt_comm_be_unready; /* until NCCL is open (pt_comm_use_device) */
    c->rank = r->rank;
    c->size = r->size;
    c->local_rank = r->local_rank;
    return pt_rdv_barrier(&c->rdv, "join", err);
}

int pt_comm_init(int *argc, char ***argv, pt_comm **out, pt_err *err)
{
    pt_comm_opts o = {.timeout_s = -1, .start_timeout_s = -1};
    return pt_comm_init_with(argc, argv, &o, out, err);
}

int pt_comm_init_with(int *argc, char ***argv, const pt_comm_opts *o, pt_comm **out,
                      pt_err *err)
{
    pt_comm *c = calloc(1, sizeof *c);
    if (!c)
        return pt_err_set(err, "out of memory");
    for (int k = 0; k < PT_COMM_SLOTS; k++)
        c->group[k] = MPI_COMM_NULL;
    c->size = 1;
    c->step = -1;
    c->dev = c->host = &pt_comm_be_mpi;
    c->note = o->note;
    c->note_arg = o->note_arg;
    c->timeout_s = o->timeout_s;
    int rc = o->timeout_s < 0 ? pt_comm_timeout_from_env(&c->timeout_s, err) : 0;
    pt_rdv r;
    int inited = 0;
    MPI_Initialized(&inited);
    if (rc == 0 && (launched() || inited))
        rc = init_mpi(c, argc, argv,
                      o->start_timeout_s < 0 ? PT_COMM_START_TIMEOUT_DEFAULT_S
                                             : o->start_timeout_s,
                      err);
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

void pt_comm_set_notes(pt_comm *c, pt_comm_note_fn note, void *arg)
{
    c->note = note;
    c->note_arg = arg;
}

void pt_comm_note(const pt_comm *c, const char *line)
{
    if (c->note)
        c->note(c->note_arg, line);
}

int pt_comm_rank(const pt_comm *c) { return c->rank; }
int pt_comm_size(const pt_comm *c) { return c->size; }
int pt_comm_local_rank(const pt_comm *c) { return c->local_rank; }

const char *pt_comm_backend(const pt_comm *c)
{
    if (c->size == 1)
        return "none";
    if (c->file)
        return c->nccl ? "nccl+file" : "none";
    return c->dev->name;
}

void pt_comm_library(const pt_comm *c, char *buf, size_t cap)
{
    if (c->dev->library && (c->mpi || c->nccl))
        c->dev->library(buf, cap);
    else
        snprintf(buf, cap, "none");
}

void pt_comm_nccl_library(char *buf, size_t cap)
{
#ifdef PT_COMM_HAVE_NCCL
    pt_comm_be_nccl.library(buf, cap);
#else
    if (cap)
        buf[0] = '\0';
#endif
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
    int rc = MPI_Comm_split(c->group[PT_COMM_WORLD], color, c->rank, &c->group[slot]);
    if (rc != MPI_SUCCESS)
        return pt_comm_mpi_fail(err, rc, "cannot build a process group");
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
    /* MPI_Comm_split waits for every rank of the world and cannot poll */
    pt_comm_guard guard;
    int rc = c->mpi ? pt_comm_guard_start(&guard, c, "building the process groups", c->timeout_s,
                                          "--comm-timeout or PT_COMM_TIMEOUT", err)
                    : 0;
    if (rc) {
        free(ranks);
        return -1;
    }
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
    if (c->mpi)
        pt_comm_guard_end(&guard);
    free(ranks);
    c->grouped = rc == 0;
    return rc;
}


/* ---- A world of the first ranks (ptprofile-coll) ----------------------------------------- */

int pt_comm_sub(pt_comm *c, int n, pt_comm **out, pt_err *err)
{
    *out = NULL;
    if (!c->mpi)
        return pt_err_set(err, "a run of the first %d ranks needs MPI (this one %s)", n,
                          c->file ? "met through a rendezvous directory" : "is one rank");
    if (n < 2 || n > c->size)
        return pt_err_set(err, "a run of the first %d ranks of a world of %d: want 2 to %d",
                          n, c->size, c->size);
    MPI_Comm comm = MPI_COMM_NULL;
    int rc = MPI_Comm_split(c->group[PT_COMM_WORLD], c->rank < n ? 0 : MPI_UNDEFINED, c->rank,
                            &comm);
    if (rc != MPI_SUCCESS)
        return pt_comm_mpi_fail(err, rc, "cannot build a run of the first ranks");
    if (comm == MPI_COMM_NULL)
        return 0;
    pt_comm *s = calloc(1, sizeof *s);
    if (!s) {
        MPI_Comm_free(&comm);
        return pt_err_set(err, "out of memory");
    }
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    for (int k = 0; k < PT_COMM_SLOTS; k++)
        s->group[k] = MPI_COMM_NULL;
    s->group[PT_COMM_WORLD] = comm;
    s->mpi = s->sub = s->grouped = true;
    s->rank = c->rank;
    s->size = n;
    s->local_rank = c->local_rank;
    s->grp[PT_COMM_WORLD] = (pt_comm_group){.in = true, .rank = s->rank, .size = n};
    s->dev = s->host = &pt_comm_be_mpi; /* until pt_comm_use_device on s */
    s->timeout_s = c->timeout_s;
    s->step = -1;
    s->note = c->note;
    s->note_arg = c->note_arg;
    *out = s;
    return 0;
}

/* ---- Selecting the device path ----------------------------------------------------------- */

int pt_comm_use_staging(pt_comm *c, pt_kernels *kn, pt_err *err)
{
    if (c->file)
        return pt_err_set(err, "rank %d of %d met the others through %s without MPI: device "
                               "buffers cannot be staged over MPI there",
                          c->rank, c->size, c->rdv.dir);
    c->kn = kn;
    c->dev = &pt_comm_be_staged;
    c->on_device = true;
    return 0;
}

#ifdef PT_COMM_HAVE_NCCL
/* NCCL for [backend] buffers: the communicators of every group, made here. In a run
 * without MPI, host buffers go through NCCL as well, and the directory is emptied
 * once every rank has read its ids. */
static int use_nccl(pt_comm *c, pt_err *err)
{
    if (!c->grouped)
        return pt_err_set(err, "internal: pt_comm_use_device before pt_comm_groups");
    if (pt_nccl_open(c, err))
        return -1;
    c->dev = &pt_comm_be_nccl;
    c->on_device = true;
    if (!c->file)
        return 0;
    c->host = &pt_comm_be_nccl_host;
    /* every rank has read its ids once all are past a world collective: only then may
     * the directory be emptied */
    if (!pt_comm_all_ok(c, true))
        return pt_err_set(err, "rendezvous in %s: the world's first NCCL collective failed",
                          c->rdv.dir);
    if (c->rank == 0)
        pt_rdv_cleanup(&c->rdv);
    return 0;
}
#endif

int pt_comm_use_device(pt_comm *c, pt_kernels *kn, pt_err *err)
{
    c->kn = kn;
    if (strcmp(kn->name, "cuda") != 0) {
        if (c->file)
            return pt_err_set(err, "rank %d of %d met the others through %s without MPI, so "
                                   "its collectives need NCCL, but the %s backend has no NCCL: "
                                   "launch CPU runs through MPI (mpirun; srun --mpi=pmix)",
                              c->rank, c->size, c->rdv.dir, kn->name);
        c->dev = &pt_comm_be_mpi;
        c->on_device = false;
        return 0;
    }
    const char *env = getenv("PT_COMM_NCCL");
    bool want_nccl = !(env && strcmp(env, "0") == 0);
    if (c->size == 1) {
        c->dev = &pt_comm_be_staged; /* only local copies, on the device */
        c->on_device = true;
        return 0;
    }
    if (c->file && !want_nccl)
        return pt_err_set(err, "PT_COMM_NCCL=0, but rank %d of %d has no MPI (it met the "
                               "others through %s): NCCL is its only way to communicate",
                          c->rank, c->size, c->rdv.dir);
#ifdef PT_COMM_HAVE_NCCL
    if (want_nccl && c->mpi) {
        /* NCCL refuses two ranks on one GPU: stage through host memory over MPI then */
        bool shared = false;
        if (pt_nccl_device_shared(c, &shared, err))
            return -1;
        if (shared) {
            if (c->rank == 0)
                pt_comm_note(c, "ranks share a GPU, which NCCL refuses: collectives are "
                                "staged through host memory over MPI");
            want_nccl = false;
        }
    }
    if (want_nccl)
        return use_nccl(c, err);
#endif
    return pt_comm_use_staging(c, kn, err);
}

/* Calls of a run without MPI before pt_comm_use_device has opened NCCL. */
static int unready_coll(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                        void *out, int64_t n, pt_comm_req **req, pt_err *err)
{
    (void)c, (void)slot, (void)t, (void)in, (void)out, (void)n, (void)req;
    return pt_err_set(err, "internal: a %s before pt_comm_use_device in a run without MPI",
                      pt_comm_op_name(op));
}

static int unready_send(pt_comm *c, int to, int tag, const void *buf, int64_t n,
                        pt_comm_type t, pt_err *err)
{
    (void)c, (void)to, (void)tag, (void)buf, (void)n, (void)t;
    return pt_err_set(err, "internal: a send before pt_comm_use_device in a run without MPI");
}

static int unready_recv(pt_comm *c, int from, int tag, void *buf, int64_t n, pt_comm_type t,
                        pt_err *err)
{
    (void)c, (void)from, (void)tag, (void)buf, (void)n, (void)t;
    return pt_err_set(err, "internal: a receive before pt_comm_use_device in a run without "
                           "MPI");
}

static int unready_flush(pt_comm *c, pt_err *err)
{
    (void)c, (void)err;
    return 0; /* nothing was sent */
}

const pt_comm_be pt_comm_be_unready = {
    .name = "none",
    .library = NULL,
    .coll = unready_coll,
    .alltoallv = NULL, /* refused by the front, as every call here */
    .wait = NULL, /* unready_coll starts nothing */
    .send = unready_send,
    .recv = unready_recv,
    .flush = unready_flush,
    .reserve = NULL,
    .gather = NULL,
    .close = NULL,
    .abort = NULL,
};

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

/* Every collective: the group, then the table of the buffers' kind. `backend`: the
 * buffers are [backend] memory, else [host]. */
static int coll(pt_comm *c, pt_comm_op op, int kind, pt_comm_type t, const void *in, void *out,
                int64_t n, bool backend, pt_comm_req **req, pt_err *err)
{
    if (req)
        *req = NULL;
    int slot = kind < 0 ? PT_COMM_WORLD : kind;
    if (slot >= PT_COMM_SLOTS)
        return pt_err_set(err, "internal: group kind %d", kind);
    const pt_comm_group *g = &c->grp[slot];
    if (!g->in || g->size <= 1) {
        local_op(c, op, t, in, out, n, backend && c->on_device);
        return 0;
    }
    const pt_comm_be *be = backend ? c->dev : c->host;
    return be->coll(c, op, slot, t, in, out, n, req, err);
}

/* The internal element type of t; -1 (with err set) when t is none. */
static int dtype(pt_comm_dtype t, pt_comm_type *ct, pt_err *err)
{
    switch (t) {
    case PT_COMM_F32:
        *ct = PT_CT_F32;
        return 0;
    case PT_COMM_BF16:
        *ct = PT_CT_BF16;
        return 0;
    case PT_COMM_F64:
        *ct = PT_CT_F64;
        return 0;
    case PT_COMM_BF16_WIRE:
        *ct = PT_CT_BF16W;
        return 0;
    }
    return pt_err_set(err, "internal: element type %d of a collective", (int)t);
}

/* A typed collective on [backend] buffers (req NULL: blocking). */
static int coll_t(pt_comm *c, pt_comm_op op, int kind, pt_comm_dtype t, const void *in,
                  void *out, int64_t n, pt_comm_req **req, pt_err *err)
{
    pt_comm_type ct = PT_CT_F32;
    if (req)
        *req = NULL;
    if (dtype(t, &ct, err))
        return -1;
    if (ct == PT_CT_BF16W && op != PT_CO_SUM && op != PT_CO_RS)
        return pt_err_set(err, "internal: a %s of bf16 on the wire (sums only)",
                          pt_comm_op_name(op));
    return coll(c, op, kind, ct, in, out, n, true, req, err);
}

int pt_comm_allreduce_t(pt_comm *c, int kind, pt_comm_dtype t, void *buf, int64_t n,
                        pt_err *err)
{
    return coll_t(c, PT_CO_SUM, kind, t, buf, buf, n, NULL, err);
}

int pt_comm_allreduce_max_t(pt_comm *c, int kind, pt_comm_dtype t, void *buf, int64_t n,
                            pt_err *err)
{
    return coll_t(c, PT_CO_MAX, kind, t, buf, buf, n, NULL, err);
}

int pt_comm_reducescatter_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                            int64_t n, pt_err *err)
{
    return coll_t(c, PT_CO_RS, kind, t, in, out, n, NULL, err);
}

int pt_comm_allgather_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                        int64_t n, pt_err *err)
{
    return coll_t(c, PT_CO_AG, kind, t, in, out, n, NULL, err);
}

int pt_comm_alltoall_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                       int64_t n, pt_err *err)
{
    return coll_t(c, PT_CO_A2A, kind, t, in, out, n, NULL, err);
}

/* Checks n counts of all-to-all with counts per rank (`which`: "send" or "receive"):
 * none negative, and their sum in elements of es bytes within int64 bytes, into
 * *total. */
static int a2av_counts(const char *which, const int64_t *counts, int n, size_t es,
                       int64_t *total, pt_err *err)
{
    if (!counts)
        return pt_err_set(err, "internal: an all-to-all without %s counts", which);
    int64_t sum = 0, most = INT64_MAX / (int64_t)es;
    for (int i = 0; i < n; i++) {
        if (counts[i] < 0)
            return pt_err_set(err, "all-to-all: %s count %lld for group rank %d is negative",
                              which, (long long)counts[i], i);
        if (counts[i] > most - sum)
            return pt_err_set(err, "all-to-all: %s counts overflow at group rank %d (%lld "
                                   "elements after %lld, of %zu bytes each)",
                              which, i, (long long)counts[i], (long long)sum, es);
        sum += counts[i];
    }
    *total = sum;
    return 0;
}

/* All-to-all with counts per rank on [backend] buffers (req NULL: blocking): the
 * counts checked here for every backend, a group of one copied locally. */
static int a2av(pt_comm *c, int kind, pt_comm_dtype t, const void *in,
                const int64_t *send_counts, void *out, const int64_t *recv_counts,
                pt_comm_req **req, pt_err *err)
{
    pt_comm_type ct = PT_CT_F32;
    if (req)
        *req = NULL;
    if (dtype(t, &ct, err))
        return -1;
    if (ct == PT_CT_BF16W)
        return pt_err_set(err, "internal: an all-to-all of bf16 on the wire (sums only)");
    int slot = kind < 0 ? PT_COMM_WORLD : kind;
    if (slot >= PT_COMM_SLOTS)
        return pt_err_set(err, "internal: group kind %d", kind);
    const pt_comm_group *g = &c->grp[slot];
    int n = g->in && g->size > 1 ? g->size : 1;
    size_t es = pt_comm_type_bytes(ct);
    int64_t sent = 0, received = 0;
    if (a2av_counts("send", send_counts, n, es, &sent, err) ||
        a2av_counts("receive", recv_counts, n, es, &received, err))
        return -1;
    if (n == 1) {
        if (sent != received)
            return pt_err_set(err, "all-to-all in a group of one: %lld elements sent, %lld "
                                   "received", (long long)sent, (long long)received);
        local_op(c, PT_CO_A2A, ct, in, out, sent, c->on_device);
        return 0;
    }
    if (!c->dev->alltoallv)
        return pt_err_set(err, "internal: no all-to-all with counts per rank on the %s "
                               "backend", c->dev->name);
    return c->dev->alltoallv(c, slot, ct, in, send_counts, out, recv_counts, req, err);
}

int pt_comm_alltoallv_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in,
                        const int64_t *send_counts, void *out, const int64_t *recv_counts,
                        pt_err *err)
{
    return a2av(c, kind, t, in, send_counts, out, recv_counts, NULL, err);
}

int pt_comm_ialltoallv_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in,
                         const int64_t *send_counts, void *out, const int64_t *recv_counts,
                         pt_comm_req **req, pt_err *err)
{
    return a2av(c, kind, t, in, send_counts, out, recv_counts, req, err);
}

int pt_comm_iallreduce_t(pt_comm *c, int kind, pt_comm_dtype t, void *buf, int64_t n,
                         pt_comm_req **req, pt_err *err)
{
    return coll_t(c, PT_CO_SUM, kind, t, buf, buf, n, req, err);
}

int pt_comm_ireducescatter_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                             int64_t n, pt_comm_req **req, pt_err *err)
{
    return coll_t(c, PT_CO_RS, kind, t, in, out, n, req, err);
}

int pt_comm_iallgather_t(pt_comm *c, int kind, pt_comm_dtype t, const void *in, void *out,
                         int64_t n, pt_comm_req **req, pt_err *err)
{
    return coll_t(c, PT_CO_AG, kind, t, in, out, n, req, err);
}

/* The fp32 calls: the typed ones with PT_COMM_F32 (broadcast has no typed form yet). */
int pt_comm_allreduce(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err)
{
    return pt_comm_allreduce_t(c, kind, PT_COMM_F32, buf, n, err);
}

int pt_comm_allreduce_f64(pt_comm *c, int kind, double *buf, int64_t n, pt_err *err)
{
    return coll(c, PT_CO_SUM, kind, PT_CT_F64, buf, buf, n, false, NULL, err);
}

int pt_comm_allreduce_max(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err)
{
    return pt_comm_allreduce_max_t(c, kind, PT_COMM_F32, buf, n, err);
}

int pt_comm_reducescatter(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                          pt_err *err)
{
    return pt_comm_reducescatter_t(c, kind, PT_COMM_F32, in, out, n, err);
}

int pt_comm_allgather(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                      pt_err *err)
{
    return pt_comm_allgather_t(c, kind, PT_COMM_F32, in, out, n, err);
}

int pt_comm_alltoall(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                     pt_err *err)
{
    return pt_comm_alltoall_t(c, kind, PT_COMM_F32, in, out, n, err);
}

int pt_comm_broadcast(pt_comm *c, int kind, float *buf, int64_t n, pt_err *err)
{
    return coll(c, PT_CO_BCAST, kind, PT_CT_F32, buf, buf, n, true, NULL, err);
}

int pt_comm_iallreduce(pt_comm *c, int kind, float *buf, int64_t n, pt_comm_req **req,
                       pt_err *err)
{
    return pt_comm_iallreduce_t(c, kind, PT_COMM_F32, buf, n, req, err);
}

int pt_comm_ireducescatter(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                           pt_comm_req **req, pt_err *err)
{
    return pt_comm_ireducescatter_t(c, kind, PT_COMM_F32, in, out, n, req, err);
}

int pt_comm_iallgather(pt_comm *c, int kind, const float *in, float *out, int64_t n,
                       pt_comm_req **req, pt_err *err)
{
    return pt_comm_iallgather_t(c, kind, PT_COMM_F32, in, out, n, req, err);
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
    /* only [backend] calls are asynchronous: their table started req */
    return c->dev->wait(c, req, err);
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
    return c->host->gather ? c->host->gather(c, buf, n, all, sizes, err)
                           : gather_collective(c, buf, n, all, sizes, err);
}

/* ---- Point to point ------------------------------------------------------------------------ */

int pt_comm_recv(pt_comm *c, int from, int tag, float *buf, int64_t n, pt_err *err)
{
    if (c->size == 1)
        return pt_err_set(err, "internal: a receive in a world of one");
    return c->dev->recv(c, from, tag, buf, n, PT_CT_F32, err);
}

int pt_comm_isend(pt_comm *c, int to, int tag, const float *buf, int64_t n, pt_err *err)
{
    if (c->size == 1)
        return pt_err_set(err, "internal: a send in a world of one");
    return c->dev->send(c, to, tag, buf, n, PT_CT_F32, err);
}

int pt_comm_recv_bytes(pt_comm *c, int from, int tag, void *buf, int64_t bytes, pt_err *err)
{
    if (c->size == 1)
        return pt_err_set(err, "internal: a receive in a world of one");
    return c->dev->recv(c, from, tag, buf, bytes, PT_CT_BYTE, err);
}

int pt_comm_isend_bytes(pt_comm *c, int to, int tag, const void *buf, int64_t bytes,
                        pt_err *err)
{
    if (c->size == 1)
        return pt_err_set(err, "internal: a send in a world of one");
    return c->dev->send(c, to, tag, buf, bytes, PT_CT_BYTE, err);
}

int pt_comm_wait_sends(pt_comm *c, pt_err *err)
{
    return c->dev->flush(c, err);
}

int pt_comm_reserve_sends(pt_comm *c, int64_t bytes, pt_err *err)
{
    if (bytes < 0)
        return pt_err_set(err, "internal: room for sends of %lld bytes", (long long)bytes);
    return c->dev->reserve ? c->dev->reserve(c, bytes, err) : 0;
}

/* ---- The end ------------------------------------------------------------------------------- */

void pt_comm_abort(pt_comm *c, int status, const char *why)
{
    if (c && c->note) {
        char line[1024];
        snprintf(line, sizeof line, "rank %d: %s", c->rank, why);
        c->note(c->note_arg, line);
    }
    if (c && c->file)
        pt_rdv_abort(&c->rdv, why); /* the ranks waiting in the directory see it */
    if (c && c->dev->abort)
        c->dev->abort(c);
    if (!c || !c->mpi)
        exit(status);
    MPI_Abort(MPI_COMM_WORLD, status); /* Open MPI's mpirun exits with it */
}

void pt_comm_finalize(pt_comm *c)
{
    if (!c)
        return;
    bool end_mpi = c->own_mpi;
    /* drops sends still queued or posted: after an error a peer may never take them,
     * and the kernel backend may be gone already */
    if (c->dev->close)
        c->dev->close(c);
    if (c->host != c->dev && c->host->close)
        c->host->close(c);
    free(c->sends);
    for (int k = 0; k < PT_COMM_WORLD; k++)
        if (c->group[k] != MPI_COMM_NULL)
            MPI_Comm_free(&c->group[k]);
    if (c->sub)
        MPI_Comm_free(&c->group[PT_COMM_WORLD]);
    for (int k = 0; k < PT_COMM_SLOTS; k++)
        free(c->members[k]);
    free(c);
    if (end_mpi)
        MPI_Finalize();
}
