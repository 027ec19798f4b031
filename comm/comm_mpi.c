/*
 * The MPI backends of the communication layer: collectives and transfers on host
 * buffers (pt_comm_be_mpi: the CPU backend, and the host calls of every run under
 * MPI), and on device buffers copied through host memory with the kernel backend's
 * copy (pt_comm_be_staged: a CUDA backend without NCCL, or ranks sharing a GPU).
 * comm.c picks the table; this file never asks which backend it is.
 *
 * Every MPI operation is started in its nonblocking form and waited for through the
 * watchdog (comm_watch.c, pt_comm_await), blocking calls included, so that no wait
 * outlasts the run's deadline. Operations go over the comm's own communicators
 * (group[PT_COMM_WORLD] is its world: MPI_COMM_WORLD, or the communicator of a
 * pt_comm_sub). MPI has no bf16: bf16 reductions run in fp32 and are rounded once at
 * the end (bf16_stage); bf16 that are only moved travel as 16-bit words.
 */
#include "comm_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pt_comm_mpi_fail(pt_err *err, int code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, text, &len);
    return pt_err_set(err, "%s: %s", what, text);
}

/* bf16 travels as 16-bit words: PT_CT_BF16 only moved, never reduced by MPI
 * (bf16_stage widens its reductions), PT_CT_BF16W reduced by bf16_sum. */
static MPI_Datatype mpi_type(pt_comm_type t)
{
    return t == PT_CT_F32 ? MPI_FLOAT : t == PT_CT_F64 ? MPI_DOUBLE
           : t == PT_CT_I32                      ? MPI_INT
           : t == PT_CT_BF16 || t == PT_CT_BF16W ? MPI_UINT16_T
                                                 : MPI_BYTE;
}

/* MPI's user function for PT_CT_BF16W: inout[i] = bf16(f32(in[i]) + f32(inout[i])),
 * rounded to nearest even as ncclBfloat16 sums round. */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = pt_k_bf16_from_f32(pt_k_f32_from_bf16(a[i]) + pt_k_f32_from_bf16(b[i]));
}

/* The MPI operation of a reduction: MPI's own, or bf16_sum (created at its first use
 * and kept until MPI_Finalize frees it). */
static int reduce_op(pt_comm_op op, pt_comm_type t, MPI_Op *mop, pt_err *err)
{
    static MPI_Op bf16_op = MPI_OP_NULL;
    if (t == PT_CT_BF16W) {
        if (op != PT_CO_SUM && op != PT_CO_RS)
            return pt_err_set(err, "internal: a %s of bf16 on the wire", pt_comm_op_name(op));
        int rc = bf16_op == MPI_OP_NULL ? MPI_Op_create(bf16_sum, 1, &bf16_op) : MPI_SUCCESS;
        if (rc != MPI_SUCCESS)
            return pt_comm_mpi_fail(err, rc, "creating MPI's bf16 sum");
        *mop = bf16_op;
        return 0;
    }
    *mop = op == PT_CO_MAX ? MPI_MAX : op == PT_CO_MIN ? MPI_MIN : MPI_SUM;
    return 0;
}

static void mpi_library(char *buf, size_t cap)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    version[strcspn(version, "\r\n")] = '\0'; /* the first line names the library */
    snprintf(buf, cap, "%s", version);
}

/* ---- Collectives ------------------------------------------------------------------------- */

/* Frees a request's staging buffers and the request. */
static void req_free(pt_comm_req *r)
{
    if (!r)
        return;
    free(r->host_in);
    free(r->host_out);
    free(r->host_b16);
    free(r->v_counts);
    free(r);
}

/* Completes the MPI part of r: waits for its requests under the watchdog's deadline,
 * rounds a bf16 reduction's fp32 result to bf16, then copies a staged result to the
 * device. */
static int mpi_finish(pt_comm *c, pt_comm_req *r, pt_err *err)
{
    int rc = r->n_mpi ? pt_comm_await(c, r->n_mpi, r->mpi, &r->what, err) : 0;
    r->n_mpi = 0;
    if (rc)
        return -1;
    const float *sum = r->host_out;
    uint16_t *b16 = r->b16_to;
    for (int64_t i = 0; b16 && i < r->b16_n; i++)
        b16[i] = pt_k_bf16_from_f32(sum[i]);
    if (r->dst && r->dst_bytes)
        c->kn->copy(c->kn, r->dst, b16 ? (void *)b16 : r->host_out, r->dst_bytes,
                    PT_KCOPY_H2D);
    return 0;
}

/* The end of an operation started into r (rc: how the start went): blocking
 * (reqp NULL, r on the caller's stack) it completes now and r's buffers are freed;
 * else r goes to *reqp, or is freed when the start failed. */
static int mpi_settle(pt_comm *c, pt_comm_req *r, int rc, pt_comm_req **reqp, pt_err *err)
{
    if (rc == 0 && !reqp)
        rc = mpi_finish(c, r, err);
    if (rc == 0 && reqp) {
        *reqp = r;
        return 0;
    }
    if (reqp) {
        req_free(r);
    } else {
        free(r->host_in);
        free(r->host_out);
        free(r->host_b16);
        free(r->v_counts);
    }
    return rc;
}

/* MPI counts are ints: long reductions go in pieces. */
#define PT_CHUNK (INT_MAX / 2)

/* Starts a reduction (sum, max, min) in place on hout, in pieces of PT_CHUNK. */
static int mpi_start_reduce(pt_comm_op op, MPI_Comm comm, pt_comm_type t, void *hout,
                            int64_t n, pt_comm_req *r, pt_err *err)
{
    MPI_Datatype ty = mpi_type(t);
    size_t es = pt_comm_type_bytes(t);
    MPI_Op mop = MPI_OP_NULL; /* set by reduce_op; gcc -O3 cannot tell */
    if (reduce_op(op, t, &mop, err))
        return -1;
    int rc = MPI_SUCCESS;
    for (int64_t off = 0; off < n && rc == MPI_SUCCESS; off += PT_CHUNK) {
        int cnt = (int)(n - off < PT_CHUNK ? n - off : PT_CHUNK);
        void *p = (char *)hout + off * (int64_t)es;
        if (r->n_mpi == (int)(sizeof r->mpi / sizeof *r->mpi))
            return pt_err_set(err, "an all-reduce of %lld elements is too large for MPI",
                              (long long)n);
        rc = MPI_Iallreduce(MPI_IN_PLACE, p, cnt, ty, mop, comm, &r->mpi[r->n_mpi]);
        r->n_mpi += rc == MPI_SUCCESS;
    }
    return rc == MPI_SUCCESS ? 0 : pt_comm_mpi_fail(err, rc, pt_comm_op_name(op));
}

/* Starts op on MPI over comm with host buffers hin/hout, its requests into r: always
 * the nonblocking form, so that every wait polls under the watchdog's deadline. */
static int mpi_start(pt_comm_op op, MPI_Comm comm, int grank, pt_comm_type t, void *hin,
                     void *hout, int64_t n, pt_comm_req *r, pt_err *err)
{
    if (op == PT_CO_SUM || op == PT_CO_MAX || op == PT_CO_MIN)
        return mpi_start_reduce(op, comm, t, hout, n, r, err);
    if (n > INT_MAX)
        return pt_err_set(err, "%s of %lld elements per rank is too large for MPI",
                          pt_comm_op_name(op), (long long)n);
    MPI_Datatype ty = mpi_type(t);
    size_t es = pt_comm_type_bytes(t);
    int cnt = (int)n, rc;
    MPI_Request *q = &r->mpi[r->n_mpi];
    MPI_Op sum = MPI_OP_NULL;
    if (op == PT_CO_RS && reduce_op(op, t, &sum, err))
        return -1;
    switch (op) {
    case PT_CO_BCAST:
        rc = MPI_Ibcast(hout, cnt, ty, 0, comm, q);
        break;
    case PT_CO_RS:
        rc = MPI_Ireduce_scatter_block(hin, hout, cnt, ty, sum, comm, q);
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
        return pt_comm_mpi_fail(err, rc, pt_comm_op_name(op));
    r->n_mpi++;
    return 0;
}

/* Host buffers for a staged op: the output (and for reduce-scatter and all-to-all a
 * separate input; all-gather's input is its place in the output; the reductions and
 * broadcast work in place), filled from the device buffers. */
static int stage_in(pt_comm *c, pt_comm_op op, const pt_comm_group *g, pt_comm_type t,
                    const void *in, void *out, int64_t n, pt_comm_req *r, void **hin,
                    void **hout, pt_err *err)
{
    size_t es = pt_comm_type_bytes(t);
    int64_t n_in, n_out;
    pt_comm_op_sizes(op, n, g->size, &n_in, &n_out);
    size_t out_bytes = (size_t)n_out * es;
    bool separate = op == PT_CO_RS || op == PT_CO_A2A;
    r->host_out = *hout = malloc(out_bytes ? out_bytes : 1);
    if (op == PT_CO_AG)
        *hin = *hout ? (char *)*hout + (int64_t)g->rank * n * (int64_t)es : NULL;
    else if (separate)
        r->host_in = *hin = malloc(n_in ? (size_t)n_in * es : 1);
    else
        *hin = *hout;
    if (!*hout || !*hin)
        return pt_err_set(err, "out of memory staging a %s of %lld bytes",
                          pt_comm_op_name(op), (long long)(n_out * (int64_t)es));
    c->kn->copy(c->kn, *hin, separate || op == PT_CO_AG ? in : out,
                (size_t)(op == PT_CO_AG ? n : n_in) * es, PT_KCOPY_D2H);
    r->dst = out;
    r->dst_bytes = out_bytes;
    return 0;
}

/* A bf16 reduction (sum, max, min, reduce-scatter): MPI has no bf16 type, so the input
 * is widened to fp32 on the host (exactly), MPI reduces fp32 into r->host_out, and
 * mpi_finish rounds the result once to bf16 into out (with `staged` through
 * r->host_b16 and a copy to the device). The bf16 are read from in now, written to out
 * at completion. */
static int bf16_stage(pt_comm *c, pt_comm_op op, const pt_comm_group *g, const void *in,
                      void *out, int64_t n, bool staged, pt_comm_req *r, void **hin,
                      void **hout, pt_err *err)
{
    int64_t n_in, n_out;
    pt_comm_op_sizes(op, n, g->size, &n_in, &n_out);
    bool separate = op == PT_CO_RS;
    float *w_in = malloc(n_in ? (size_t)n_in * sizeof *w_in : 1);
    float *w_out = separate ? malloc(n_out ? (size_t)n_out * sizeof *w_out : 1) : w_in;
    uint16_t *h16 = staged ? malloc((size_t)(n_in > n_out ? n_in : n_out) * 2 + 2) : NULL;
    if (separate)
        r->host_in = w_in;
    r->host_out = w_out;
    r->host_b16 = h16;
    if (!w_in || !w_out || (staged && !h16))
        return pt_err_set(err, "out of memory widening a bf16 %s of %lld elements",
                          pt_comm_op_name(op), (long long)n_in);
    const uint16_t *src = in;
    if (staged) {
        c->kn->copy(c->kn, h16, in, (size_t)n_in * 2, PT_KCOPY_D2H);
        src = h16;
    }
    for (int64_t i = 0; i < n_in; i++)
        w_in[i] = pt_k_f32_from_bf16(src[i]);
    r->b16_to = staged ? (void *)h16 : out;
    r->b16_n = n_out;
    if (staged) {
        r->dst = out;
        r->dst_bytes = (size_t)n_out * 2;
    }
    *hin = w_in;
    *hout = w_out;
    return 0;
}

static bool reduces(pt_comm_op op)
{
    return op == PT_CO_SUM || op == PT_CO_MAX || op == PT_CO_MIN || op == PT_CO_RS;
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
    bool widen = t == PT_CT_BF16 && reduces(op);
    int rc = widen    ? bf16_stage(c, op, g, in, out, n, staged, r, &hin, &hout, err)
             : staged ? stage_in(c, op, g, t, in, out, n, r, &hin, &hout, err)
                      : 0;
    if (rc == 0)
        rc = mpi_start(op, c->group[slot], g->rank, widen ? PT_CT_F32 : t, hin, hout, n, r,
                       err);
    return mpi_settle(c, r, rc, reqp, err);
}

/* MPI_Ialltoallv's counts and displacements from int64 counts (g->size each, checked
 * >= 0 by the front), as four int arrays in one allocation: send counts, send
 * displacements (prefix sums), receive counts, receive displacements. Errors: a block
 * or its offset beyond INT_MAX elements, before anything is sent or staged. */
static int v_layout(const pt_comm_group *g, const int64_t *send_counts,
                    const int64_t *recv_counts, int **out, pt_err *err)
{
    int n = g->size;
    int *v = malloc(4 * (size_t)n * sizeof *v);
    if (!v)
        return pt_err_set(err, "out of memory");
    const int64_t *counts[2] = {send_counts, recv_counts};
    for (int k = 0; k < 2; k++) {
        int64_t at = 0;
        for (int i = 0; i < n; i++) {
            if (counts[k][i] > INT_MAX || at > INT_MAX) {
                free(v);
                return pt_err_set(err, "all-to-all: %s block for group rank %d of %lld elements "
                                       "at offset %lld: MPI's counts and offsets end at %d "
                                       "elements",
                                  k ? "receive" : "send", i, (long long)counts[k][i],
                                  (long long)at, INT_MAX);
            }
            v[2 * k * n + i] = (int)counts[k][i];
            v[(2 * k + 1) * n + i] = (int)at;
            at += counts[k][i];
        }
    }
    *out = v;
    return 0;
}

/* All-to-all with counts per rank over MPI (MPI_Ialltoallv); with `staged`, in and out
 * are device buffers copied through host memory. Blocking when reqp is NULL. */
static int mpi_alltoallv(pt_comm *c, int slot, pt_comm_type t, const void *in,
                         const int64_t *send_counts, void *out, const int64_t *recv_counts,
                         bool staged, pt_comm_req **reqp, pt_err *err)
{
    const pt_comm_group *g = &c->grp[slot];
    size_t es = pt_comm_type_bytes(t);
    int64_t n_in = 0, n_out = 0;
    for (int i = 0; i < g->size; i++) {
        n_in += send_counts[i];
        n_out += recv_counts[i];
    }
    pt_comm_req stack = {0}, *r = reqp ? calloc(1, sizeof *r) : &stack;
    if (!r)
        return pt_err_set(err, "out of memory");
    r->what = (pt_comm_wait_for){.op = pt_comm_op_name(PT_CO_A2A), .slot = slot,
                                 .bytes = (n_in > n_out ? n_in : n_out) * (int64_t)es};
    const void *hin = in;
    void *hout = out;
    int rc = v_layout(g, send_counts, recv_counts, &r->v_counts, err);
    if (rc == 0 && staged) {
        r->host_in = malloc(n_in ? (size_t)n_in * es : 1);
        r->host_out = malloc(n_out ? (size_t)n_out * es : 1);
        if (!r->host_in || !r->host_out)
            rc = pt_err_set(err, "out of memory staging an all-to-all of %lld bytes",
                            (long long)r->what.bytes);
    }
    if (rc == 0 && staged) {
        c->kn->copy(c->kn, r->host_in, in, (size_t)n_in * es, PT_KCOPY_D2H);
        hin = r->host_in;
        hout = r->host_out;
        r->dst = out;
        r->dst_bytes = (size_t)n_out * es;
    }
    if (rc == 0) {
        int n = g->size, *v = r->v_counts;
        MPI_Datatype ty = mpi_type(t);
        int m = MPI_Ialltoallv(hin, v, v + n, ty, hout, v + 2 * n, v + 3 * n, ty,
                               c->group[slot], &r->mpi[0]);
        if (m == MPI_SUCCESS)
            r->n_mpi = 1;
        else
            rc = pt_comm_mpi_fail(err, m, "all-to-all");
    }
    return mpi_settle(c, r, rc, reqp, err);
}

static int host_coll(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                     void *out, int64_t n, pt_comm_req **req, pt_err *err)
{
    return mpi_op(c, op, slot, t, in, out, n, false, req, err);
}

static int staged_coll(pt_comm *c, pt_comm_op op, int slot, pt_comm_type t, const void *in,
                       void *out, int64_t n, pt_comm_req **req, pt_err *err)
{
    return mpi_op(c, op, slot, t, in, out, n, true, req, err);
}

static int host_alltoallv(pt_comm *c, int slot, pt_comm_type t, const void *in,
                          const int64_t *send_counts, void *out, const int64_t *recv_counts,
                          pt_comm_req **req, pt_err *err)
{
    return mpi_alltoallv(c, slot, t, in, send_counts, out, recv_counts, false, req, err);
}

static int staged_alltoallv(pt_comm *c, int slot, pt_comm_type t, const void *in,
                            const int64_t *send_counts, void *out, const int64_t *recv_counts,
                            pt_comm_req **req, pt_err *err)
{
    return mpi_alltoallv(c, slot, t, in, send_counts, out, recv_counts, true, req, err);
}

static int mpi_wait(pt_comm *c, pt_comm_req *req, pt_err *err)
{
    int rc = mpi_finish(c, req, err);
    req_free(req);
    return rc;
}

/* ---- Gathering bytes to rank 0 ------------------------------------------------------------ */

static int mpi_gather(pt_comm *c, const void *buf, int64_t n, void **all, int64_t *sizes,
                      pt_err *err)
{
    if (n > INT_MAX)
        return pt_err_set(err, "a gather of %lld bytes is too large for MPI", (long long)n);
    MPI_Comm world = c->group[PT_COMM_WORLD];
    int mine = (int)n, *counts = NULL, *displs = NULL;
    if (c->rank == 0 && (!(counts = calloc((size_t)c->size, sizeof *counts)) ||
                         !(displs = calloc((size_t)c->size, sizeof *displs)))) {
        free(counts);
        return pt_err_set(err, "out of memory");
    }
    pt_comm_wait_for what = {.op = "gather", .slot = PT_COMM_WORLD, .bytes = n};
    MPI_Request q;
    int rc = MPI_Igather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, world, &q);
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
        rc = MPI_Igatherv(buf, mine, MPI_BYTE, *all, counts, displs, MPI_BYTE, 0, world, &q);
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
        return pt_comm_mpi_fail(err, rc, "gather");
    }
    return 0;
}

/* ---- Point to point ------------------------------------------------------------------------ */

/* A receive into buf; with `staged`, buf is device memory filled from a host copy. */
static int mpi_recv(pt_comm *c, int from, int tag, void *buf, int64_t n, pt_comm_type t,
                    bool staged, pt_err *err)
{
    if (n > INT_MAX)
        return pt_err_set(err, "a receive of %lld elements is too large for MPI", (long long)n);
    size_t bytes = (size_t)n * pt_comm_type_bytes(t);
    void *h = staged ? malloc(bytes ? bytes : 1) : buf;
    if (!h)
        return pt_err_set(err, "out of memory staging a receive of %zu bytes", bytes);
    pt_comm_wait_for what = {.op = "receive", .slot = -1, .peer = from, .bytes = (int64_t)bytes};
    MPI_Request q;
    int rc = MPI_Irecv(h, (int)n, mpi_type(t), from, tag, c->group[PT_COMM_WORLD], &q);
    if (rc != MPI_SUCCESS) {
        if (staged)
            free(h);
        return pt_comm_mpi_fail(err, rc, "receive");
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

/* A send of a private copy of buf (read from the device with `staged`), completed by
 * mpi_flush. */
static int mpi_send(pt_comm *c, int to, int tag, const void *buf, int64_t n, pt_comm_type t,
                    bool staged, pt_err *err)
{
    if (n > INT_MAX)
        return pt_err_set(err, "a send of %lld elements is too large for MPI", (long long)n);
    size_t bytes = (size_t)n * pt_comm_type_bytes(t);
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
    if (staged)
        c->kn->copy(c->kn, p->copy, buf, bytes, PT_KCOPY_D2H);
    else
        memcpy(p->copy, buf, bytes);
    p->what = (pt_comm_wait_for){.op = "send", .slot = -1, .peer = to, .bytes = (int64_t)bytes};
    int rc = MPI_Isend(p->copy, (int)n, mpi_type(t), to, tag, c->group[PT_COMM_WORLD],
                       &p->req);
    if (rc != MPI_SUCCESS) {
        free(p->copy);
        return pt_comm_mpi_fail(err, rc, "send");
    }
    c->n_sends++;
    return 0;
}

static int host_recv(pt_comm *c, int from, int tag, void *buf, int64_t n, pt_comm_type t,
                     pt_err *err)
{
    return mpi_recv(c, from, tag, buf, n, t, false, err);
}

static int staged_recv(pt_comm *c, int from, int tag, void *buf, int64_t n, pt_comm_type t,
                       pt_err *err)
{
    return mpi_recv(c, from, tag, buf, n, t, true, err);
}

static int host_send(pt_comm *c, int to, int tag, const void *buf, int64_t n, pt_comm_type t,
                     pt_err *err)
{
    return mpi_send(c, to, tag, buf, n, t, false, err);
}

static int staged_send(pt_comm *c, int to, int tag, const void *buf, int64_t n,
                       pt_comm_type t, pt_err *err)
{
    return mpi_send(c, to, tag, buf, n, t, true, err);
}

static int mpi_flush(pt_comm *c, pt_err *err)
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
static void mpi_close(pt_comm *c)
{
    for (int i = 0; i < c->n_sends; i++) {
        int complete = 0;
        if (MPI_Test(&c->sends[i].req, &complete, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
            complete)
            free(c->sends[i].copy);
    }
    c->n_sends = 0;
}

/* ---- The tables ------------------------------------------------------------------------------ */

const pt_comm_be pt_comm_be_mpi = {
    .name = "mpi",
    .library = mpi_library,
    .coll = host_coll,
    .alltoallv = host_alltoallv,
    .wait = mpi_wait,
    .send = host_send,
    .recv = host_recv,
    .flush = mpi_flush,
    .reserve = NULL, /* each send mallocs its host copy */
    .gather = mpi_gather,
    .close = mpi_close,
    .abort = NULL, /* MPI_Abort, which pt_comm_abort calls for every MPI run */
};

const pt_comm_be pt_comm_be_staged = {
    .name = "mpi+staging",
    .library = mpi_library,
    .coll = staged_coll,
    .alltoallv = staged_alltoallv,
    .wait = mpi_wait,
    .send = staged_send,
    .recv = staged_recv,
    .flush = mpi_flush,
    .reserve = NULL, /* each send mallocs its host copy */
    .gather = NULL, /* [host] only: the host table's */
    .close = mpi_close,
    .abort = NULL,
};
