/*
 * The communication layer under mpirun on 4 ranks (tests/run_mpi.sh 4 test_comm):
 * every collective, blocking and asynchronous, checked number by number over the
 * process groups of a tp = 2 × pp = 2 grid (groups of 1, 2 and 4 ranks, the tied-
 * embedding pair and the world), point-to-point transfers of floats and bytes, the
 * host collectives (f64 sums, broadcast, the world-wide AND, gathering bytes), all
 * twice: on host buffers (the CPU backend) and through the host-staging path that a
 * CUDA backend without NCCL takes (pt_comm_use_staging, here with the CPU backend's
 * copies); which backend table each selection picks (pt_comm_backend, pt_comm_library);
 * and a run of the first three ranks (pt_comm_sub, what ptprofile-coll measures
 * over), on host buffers and staged. Values are small integers, so every sum is exact
 * and compared exactly. The typed collectives (*_t) on bf16, f64 and fp32 over every
 * group (sizes 1, 2 and 4) and the first three ranks, with an odd count: bf16 values
 * with 8 significant bits whose sums are exact in fp32, so the expected bf16 result is
 * that sum rounded once to nearest even, computed here with rint (ties included) and
 * compared bit for bit. All-to-all with counts per rank (pt_comm_alltoallv_t) over
 * every group, fp32 and bf16, blocking and asynchronous, with counts that depend on
 * both ranks and are often 0, checked element by element, and bad counts refused. On
 * any other number of ranks (1 to 64: alone, a world of one; tests/run_mpi.sh 2 or 3)
 * it checks the typed collectives and the all-to-alls over the world only. It links
 * the communication layer alone (ptcomm), not the runtime.
 */
#include "check.h"
#include "comm.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 7 };

static pt_grid grid;
static int rank_, size_;

/* What world rank r contributes at index i (exact in fp32). */
static float val(int r, int64_t i) { return (float)(r * 1000 + i); }

/* The members of this rank's group of `kind` (PT_GROUP_COUNT: the embedding pair,
 * < 0: the world), ascending; returns how many, and this rank's index in *me. */
static int members(int kind, int64_t *m, int *me)
{
    if (kind < 0) {
        for (int r = 0; r < size_; r++)
            m[r] = r;
        *me = rank_;
        return size_;
    }
    if (kind < PT_GROUP_COUNT) {
        *me = pt_grid_group(&grid, (pt_group_kind)kind, rank_, m);
        return pt_grid_group_size(&grid, (pt_group_kind)kind);
    }
    int c[PT_NDIM];
    pt_grid_coords(&grid, rank_, c);
    int pp = grid.size[PT_DIM_PP];
    c[PT_DIM_PP] = 0;
    m[0] = pt_grid_rank(&grid, c);
    c[PT_DIM_PP] = pp - 1;
    m[1] = pt_grid_rank(&grid, c);
    *me = m[0] == rank_ ? 0 : 1;
    return pp > 1 ? 2 : 1;
}

static float *fbuf(int64_t n)
{
    float *p = calloc((size_t)n, sizeof *p);
    if (!p)
        abort();
    return p;
}

static void check_group(pt_comm *c, int kind, bool async)
{
    int64_t m[64];
    int me, gs = members(kind, m, &me);
    pt_err err = {""};
    pt_comm_req *req[5] = {0};

    /* broadcast from the group's rank 0 (its lowest world rank) */
    float *bc = fbuf(N);
    for (int64_t i = 0; i < N; i++)
        bc[i] = val(rank_, i);
    CHECK_INT(pt_comm_broadcast(c, kind, bc, N, &err), 0);
    for (int64_t i = 0; i < N; i++)
        CHECK_INT(bc[i], val((int)m[0], i));
    free(bc);

    /* sum and max */
    float *sum = fbuf(N), *mx = fbuf(N);
    for (int64_t i = 0; i < N; i++)
        sum[i] = mx[i] = val(rank_, i);
    if (async) {
        CHECK_INT(pt_comm_iallreduce(c, kind, sum, N, &req[0], &err), 0);
        CHECK_INT(pt_comm_allreduce_max(c, kind, mx, N, &err), 0);
    } else {
        CHECK_INT(pt_comm_allreduce(c, kind, sum, N, &err), 0);
        CHECK_INT(pt_comm_allreduce_max(c, kind, mx, N, &err), 0);
    }

    /* reduce-scatter */
    float *rs_in = fbuf(N * gs), *rs_out = fbuf(N);
    for (int64_t i = 0; i < N * gs; i++)
        rs_in[i] = val(rank_, i);
    CHECK_INT(async ? pt_comm_ireducescatter(c, kind, rs_in, rs_out, N, &req[1], &err)
                    : pt_comm_reducescatter(c, kind, rs_in, rs_out, N, &err), 0);

    /* all-gather, from a separate buffer and in place */
    float *ag_in = fbuf(N), *ag_out = fbuf(N * gs), *ag_ip = fbuf(N * gs);
    for (int64_t i = 0; i < N; i++)
        ag_in[i] = ag_ip[me * N + i] = val(rank_, i);
    CHECK_INT(async ? pt_comm_iallgather(c, kind, ag_in, ag_out, N, &req[2], &err)
                    : pt_comm_allgather(c, kind, ag_in, ag_out, N, &err), 0);
    CHECK_INT(async ? pt_comm_iallgather(c, kind, ag_ip + me * N, ag_ip, N, &req[3], &err)
                    : pt_comm_allgather(c, kind, ag_ip + me * N, ag_ip, N, &err), 0);

    /* all-to-all: block j of what rank r sends holds r·1000 + j·100 + i */
    float *a_in = fbuf(N * gs), *a_out = fbuf(N * gs);
    for (int j = 0; j < gs; j++)
        for (int64_t i = 0; i < N; i++)
            a_in[j * N + i] = (float)(rank_ * 1000 + j * 100 + i);
    CHECK_INT(async ? pt_comm_ialltoall(c, kind, a_in, a_out, N, &req[4], &err)
                    : pt_comm_alltoall(c, kind, a_in, a_out, N, &err), 0);

    for (int k = 0; k < 5; k++)
        CHECK_INT(pt_comm_wait(c, req[k], &err), 0);
    if (err.msg[0])
        fprintf(stderr, "rank %d kind %d: %s\n", rank_, kind, err.msg);

    for (int64_t i = 0; i < N; i++) {
        float s = 0, x = 0, r = 0;
        for (int k = 0; k < gs; k++) {
            s += val((int)m[k], i);
            x = val((int)m[k], i) > x ? val((int)m[k], i) : x;
            r += val((int)m[k], me * N + i);
        }
        CHECK_INT(sum[i], s);
        CHECK_INT(mx[i], x);
        CHECK_INT(rs_out[i], r);
        for (int k = 0; k < gs; k++) {
            CHECK_INT(ag_out[k * N + i], val((int)m[k], i));
            CHECK_INT(ag_ip[k * N + i], val((int)m[k], i));
            CHECK_INT(a_out[k * N + i], (float)(m[k] * 1000 + me * 100 + i));
        }
    }
    free(sum), free(mx), free(rs_in), free(rs_out), free(ag_in), free(ag_out), free(ag_ip);
    free(a_in), free(a_out);
}

/* ---- Typed collectives (bf16, f64) ---------------------------------------------------- */

/* World rank r's bf16 at index i: sign, exponent 0 to 2, a 7-bit fraction; every
 * value a multiple of 2^-7 below 8 in magnitude, so sums of up to 4 are exact in fp32
 * (and in double). */
static uint16_t bf_bits(int r, int64_t i)
{
    unsigned sign = (r + i) % 5 == 0, ex = 127 + (unsigned)(i % 3);
    unsigned frac = (unsigned)(r * 37 + i * 11) % 128;
    return (uint16_t)(sign << 15 | ex << 7 | frac);
}

/* The 16 bits world rank `from` sends world rank `to` at index i in an all-to-all:
 * a hash that covers every bit pattern (bf16 NaNs, infinities and subnormals among
 * them), so a transfer that converts instead of moving shows. */
static uint16_t word_bits(int from, int to, int64_t i)
{
    uint32_t h = (uint32_t)from * 2654435761u ^ (uint32_t)to * 40503u ^ (uint32_t)i * 97u;
    return (uint16_t)(h ^ h >> 16);
}

static double bf_value(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int ties; /* expected sums that fell halfway between two bf16 */

/* x (exact in fp32) rounded to bf16, to nearest with ties to even, by arithmetic
 * rather than bits: the 8 significant bits of bf16 are a quantum of 2^(k-8) for x in
 * [2^(k-1), 2^k); rint rounds halfway cases to even. */
static uint16_t bf_round(double x)
{
    if (x == 0)
        return signbit(x) ? 0x8000 : 0;
    int k;
    frexp(x, &k);
    double q = ldexp(1.0, k - 8), y = x / q;
    ties += fabs(y - trunc(y)) == 0.5;
    float f = (float)(rint(y) * q);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    CHECK_INT(u & 0xffff, 0); /* the rounded value is a bf16 */
    return (uint16_t)(u >> 16);
}

/* rank r's f64 at i: exact sums */
static double f64_val(int r, int64_t i) { return r * 1000.0 + (double)i + 0.25; }

static void *xalloc(size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p)
        abort();
    return p;
}

/* Every typed call over the group `kind` of c, whose members (world ranks, group
 * order) are m[0..gs-1], this rank m[me]; n elements per rank. */
static void check_typed(pt_comm *c, int kind, const int64_t *m, int gs, int me, int64_t n)
{
    pt_err err = {""};
    size_t nn = (size_t)n, ng = (size_t)(n * gs);
    uint16_t *sum = xalloc(nn * 2), *mx = xalloc(nn * 2), *asum = xalloc(nn * 2);
    uint16_t *rs_in = xalloc(ng * 2), *rs_out = xalloc(nn * 2), *ars_out = xalloc(nn * 2);
    uint16_t *ag_in = xalloc(nn * 2), *ag_out = xalloc(ng * 2), *ag_ip = xalloc(ng * 2);
    uint16_t *aag_out = xalloc(ng * 2);
    double *d = xalloc(nn * 8), *dmax = xalloc(nn * 8), *drs_in = xalloc(ng * 8);
    double *drs_out = xalloc(nn * 8), *dasum = xalloc(nn * 8);
    float *f = xalloc(nn * 4);
    for (int64_t i = 0; i < n; i++) {
        sum[i] = mx[i] = asum[i] = ag_in[i] = ag_ip[me * n + i] = bf_bits(rank_, i);
        d[i] = dmax[i] = dasum[i] = f64_val(rank_, i);
        f[i] = val(rank_, i);
    }
    for (int64_t i = 0; i < n * gs; i++) {
        rs_in[i] = bf_bits(rank_, i);
        drs_in[i] = f64_val(rank_, i);
    }
    pt_comm_req *req[3] = {0};
    CHECK_INT(pt_comm_iallreduce_t(c, kind, PT_COMM_BF16, asum, n, &req[0], &err), 0);
    CHECK_INT(pt_comm_allreduce_t(c, kind, PT_COMM_BF16, sum, n, &err), 0);
    CHECK_INT(pt_comm_ireducescatter_t(c, kind, PT_COMM_BF16, rs_in, ars_out, n, &req[1],
                                       &err), 0);
    CHECK_INT(pt_comm_allreduce_max_t(c, kind, PT_COMM_BF16, mx, n, &err), 0);
    CHECK_INT(pt_comm_iallgather_t(c, kind, PT_COMM_BF16, ag_in, aag_out, n, &req[2], &err),
              0);
    CHECK_INT(pt_comm_reducescatter_t(c, kind, PT_COMM_BF16, rs_in, rs_out, n, &err), 0);
    CHECK_INT(pt_comm_allgather_t(c, kind, PT_COMM_BF16, ag_in, ag_out, n, &err), 0);
    CHECK_INT(pt_comm_allgather_t(c, kind, PT_COMM_BF16, ag_ip + me * n, ag_ip, n, &err), 0);
    /* all-to-all moves any 16 bits unchanged, NaNs and subnormals among them */
    uint16_t *a_in = xalloc(ng * 2), *a_out = xalloc(ng * 2);
    for (int j = 0; j < gs; j++)
        for (int64_t i = 0; i < n; i++)
            a_in[j * n + i] = word_bits(rank_, (int)m[j], i);
    CHECK_INT(pt_comm_alltoall_t(c, kind, PT_COMM_BF16, a_in, a_out, n, &err), 0);
    for (int k = 0; k < 3; k++)
        CHECK_INT(pt_comm_wait(c, req[k], &err), 0);
    pt_comm_req *dreq = NULL;
    CHECK_INT(pt_comm_iallreduce_t(c, kind, PT_COMM_F64, dasum, n, &dreq, &err), 0);
    CHECK_INT(pt_comm_wait(c, dreq, &err), 0);
    CHECK_INT(pt_comm_allreduce_t(c, kind, PT_COMM_F64, d, n, &err), 0);
    CHECK_INT(pt_comm_allreduce_max_t(c, kind, PT_COMM_F64, dmax, n, &err), 0);
    CHECK_INT(pt_comm_reducescatter_t(c, kind, PT_COMM_F64, drs_in, drs_out, n, &err), 0);
    CHECK_INT(pt_comm_allreduce_t(c, kind, PT_COMM_F32, f, n, &err), 0);
    if (err.msg[0])
        fprintf(stderr, "rank %d kind %d typed: %s\n", rank_, kind, err.msg);

    for (int64_t i = 0; i < n; i++) {
        double s = 0, x = -1e300, r = 0, ds = 0, dx = -1e300, dr = 0;
        float fs = 0;
        for (int k = 0; k < gs; k++) {
            int w = (int)m[k];
            s += bf_value(bf_bits(w, i));
            x = fmax(x, bf_value(bf_bits(w, i)));
            r += bf_value(bf_bits(w, me * n + i));
            ds += f64_val(w, i);
            dx = fmax(dx, f64_val(w, i));
            dr += f64_val(w, me * n + i);
            fs += val(w, i);
        }
        uint16_t want_sum = bf_round(s), want_rs = bf_round(r);
        CHECK_INT(sum[i], want_sum);
        CHECK_INT(asum[i], want_sum);
        CHECK_INT(bf_value(mx[i]), x);
        CHECK_INT(mx[i], bf_round(x));
        CHECK_INT(rs_out[i], want_rs);
        CHECK_INT(ars_out[i], want_rs);
        for (int k = 0; k < gs; k++) {
            CHECK_INT(ag_out[k * n + i], bf_bits((int)m[k], i));
            CHECK_INT(aag_out[k * n + i], bf_bits((int)m[k], i));
            CHECK_INT(ag_ip[k * n + i], bf_bits((int)m[k], i));
            CHECK_INT(a_out[k * n + i], word_bits((int)m[k], rank_, i));
        }
        CHECK(d[i] == ds && dasum[i] == ds && dmax[i] == dx && drs_out[i] == dr);
        CHECK_INT(f[i], fs);
    }
    free(sum), free(mx), free(asum), free(rs_in), free(rs_out), free(ars_out);
    free(ag_in), free(ag_out), free(ag_ip), free(aag_out), free(a_in), free(a_out);
    free(d), free(dmax), free(drs_in), free(drs_out), free(dasum), free(f);
}

/* ---- All-to-all with counts per rank ------------------------------------------------ */

/* Elements world rank `from` sends world rank `to` in round `salt`: 0 to 3, so some
 * pairs (a rank and itself among them) exchange nothing. */
static int64_t a2av_count(int from, int to, int salt)
{
    return (from * 3 + to * 5 + salt) % 4;
}

/* One all-to-all with counts per rank over the group (members m, this rank m[me]) of
 * element type t (fp32 or bf16), blocking or asynchronous, checked element by element;
 * out has a guard element past its end that must stay untouched. With `none`, every
 * count is 0. */
static void check_a2av_once(pt_comm *c, int kind, const int64_t *m, int gs, pt_comm_dtype t,
                            int salt, bool async, bool none)
{
    pt_err err = {""};
    int64_t sc[64], rc[64], n_in = 0, n_out = 0;
    for (int j = 0; j < gs; j++) {
        sc[j] = none ? 0 : a2av_count(rank_, (int)m[j], salt);
        rc[j] = none ? 0 : a2av_count((int)m[j], rank_, salt);
        n_in += sc[j];
        n_out += rc[j];
    }
    bool f32 = t == PT_COMM_F32;
    size_t es = f32 ? 4 : 2;
    char *in = xalloc((size_t)n_in * es), *out = xalloc((size_t)(n_out + 1) * es);
    for (int j = 0, at = 0; j < gs; j++)
        for (int64_t i = 0; i < sc[j]; i++, at++) {
            if (f32)
                ((float *)in)[at] = (float)(rank_ * 10000 + m[j] * 100 + i);
            else
                ((uint16_t *)in)[at] = word_bits(rank_, (int)m[j], i + salt);
        }
    memset(out, 0x5a, (size_t)(n_out + 1) * es);
    pt_comm_req *req = NULL;
    CHECK_INT(async ? pt_comm_ialltoallv_t(c, kind, t, in, sc, out, rc, &req, &err)
                    : pt_comm_alltoallv_t(c, kind, t, in, sc, out, rc, &err), 0);
    memset(sc, 0xff, sizeof sc); /* the counts may be reused once the call returns */
    CHECK_INT(pt_comm_wait(c, req, &err), 0);
    if (err.msg[0])
        fprintf(stderr, "rank %d kind %d all-to-all with counts: %s\n", rank_, kind, err.msg);
    for (int k = 0, at = 0; k < gs; k++)
        for (int64_t i = 0; i < rc[k]; i++, at++) {
            if (f32)
                CHECK_INT(((float *)out)[at], m[k] * 10000 + rank_ * 100 + i);
            else
                CHECK_INT(((uint16_t *)out)[at], word_bits((int)m[k], rank_, i + salt));
        }
    for (size_t b = 0; b < es; b++)
        CHECK_INT((unsigned char)out[(size_t)n_out * es + b], 0x5a);
    free(in), free(out);
}

/* Bad counts, refused on every rank of the group alike (so that no rank waits for the
 * others): a negative count, counts whose bytes overflow int64, PT_COMM_BF16_WIRE; in
 * a group of one, send and receive counts that differ; with `mpi` (the MPI paths), a
 * block beyond MPI's int counts and, in groups of three or more, an offset beyond
 * them. No buffer is touched: each is refused before anything moves. */
static void check_a2av_refused(pt_comm *c, int kind, int gs, int me, bool mpi)
{
    pt_err err = {""};
    int64_t sc[64] = {0}, rc[64] = {0};
    char buf[8] = {0};
    sc[gs - 1] = -3;
    CHECK(pt_comm_alltoallv_t(c, kind, PT_COMM_F32, buf, sc, buf + 4, rc, &err) != 0);
    char want[96];
    snprintf(want, sizeof want, "send count -3 for group rank %d is negative", gs - 1);
    CHECK_STR_HAS(err.msg, want);
    sc[gs - 1] = 0;
    rc[0] = -1;
    CHECK(pt_comm_alltoallv_t(c, kind, PT_COMM_BF16, buf, sc, buf + 4, rc, &err) != 0);
    CHECK_STR_HAS(err.msg, "receive count -1 for group rank 0 is negative");
    rc[0] = 0;
    for (int j = 0; j < gs; j++)
        sc[j] = INT64_MAX / 8 / gs + 1; /* the sum of fp64 bytes passes INT64_MAX */
    CHECK(pt_comm_alltoallv_t(c, kind, PT_COMM_F64, buf, sc, buf + 4, rc, &err) != 0);
    CHECK_STR_HAS(err.msg, "send counts overflow");
    for (int j = 0; j < gs; j++)
        sc[j] = 0;
    CHECK(pt_comm_alltoallv_t(c, kind, PT_COMM_BF16_WIRE, buf, sc, buf + 4, rc, &err) != 0);
    CHECK_STR_HAS(err.msg, "on the wire");
    if (gs == 1) {
        sc[0] = 2;
        rc[0] = 1;
        CHECK(pt_comm_alltoallv_t(c, kind, PT_COMM_BF16, buf, sc, buf + 4, rc, &err) != 0);
        CHECK_STR_HAS(err.msg, "group of one: 2 elements sent, 1 received");
        return;
    }
    if (!mpi)
        return;
    /* each rank sends its successor more than an int's worth and receives as much
     * from its predecessor: refused before the transfer, on host buffers or staged */
    sc[(me + 1) % gs] = (int64_t)INT_MAX + 1;
    rc[(me + gs - 1) % gs] = (int64_t)INT_MAX + 1;
    CHECK(pt_comm_alltoallv_t(c, kind, PT_COMM_BF16, buf, sc, buf + 4, rc, &err) != 0);
    CHECK_STR_HAS(err.msg, "MPI's counts and offsets end at 2147483647");
    if (gs < 3)
        return;
    for (int j = 0; j < gs; j++)
        sc[j] = rc[j] = 0;
    sc[0] = INT_MAX;
    sc[1] = 1; /* group rank 2's block starts past INT_MAX */
    CHECK(pt_comm_alltoallv_t(c, kind, PT_COMM_F32, buf, sc, buf + 4, rc, &err) != 0);
    CHECK_STR_HAS(err.msg, "send block for group rank 2 of 0 elements at offset 2147483648");
}

/* All-to-all with counts per rank over the group `kind`: fp32 and bf16, blocking and
 * asynchronous, three rounds of counts (rank-dependent, zeros among them) and one of
 * no elements at all; then the refused counts. */
static void check_a2av(pt_comm *c, int kind, const int64_t *m, int gs, int me, bool mpi)
{
    for (int salt = 0; salt < 3; salt++)
        for (int async = 0; async < 2; async++) {
            check_a2av_once(c, kind, m, gs, PT_COMM_F32, salt, async, false);
            check_a2av_once(c, kind, m, gs, PT_COMM_BF16, salt, async, false);
        }
    check_a2av_once(c, kind, m, gs, PT_COMM_F32, 0, false, true);
    check_a2av_once(c, kind, m, gs, PT_COMM_BF16, 0, true, true);
    check_a2av_refused(c, kind, gs, me, mpi);
}

/* check_typed over the group `kind` of the 4-rank grid, and an element type no
 * collective knows refused. */
static void check_typed_group(pt_comm *c, int kind)
{
    int64_t m[64];
    int me, gs = members(kind, m, &me);
    check_typed(c, kind, m, gs, me, N);
    check_a2av(c, kind, m, gs, me, true);
    pt_err err = {""};
    float one = 1;
    CHECK(pt_comm_allreduce_t(c, kind, (pt_comm_dtype)7, &one, 1, &err) != 0);
    CHECK_STR_HAS(err.msg, "element type 7");
}

/* Floats and bytes around the ring of world ranks; two messages per pair, told apart
 * by tag and received in the order sent. */
static void check_p2p(pt_comm *c)
{
    pt_err err = {""};
    int to = (rank_ + 1) % size_, from = (rank_ + size_ - 1) % size_;
    float f[N], got[N];
    unsigned char b[13], gb[13];
    for (int i = 0; i < N; i++)
        f[i] = val(rank_, i);
    for (int i = 0; i < 13; i++)
        b[i] = (unsigned char)(rank_ * 16 + i);
    CHECK_INT(pt_comm_isend(c, to, 1, f, N, &err), 0);
    for (int i = 0; i < N; i++)
        f[i] = -1; /* the send took a copy: the buffer is free again */
    CHECK_INT(pt_comm_isend_bytes(c, to, 2, b, 13, &err), 0);
    CHECK_INT(pt_comm_recv(c, from, 1, got, N, &err), 0);
    CHECK_INT(pt_comm_recv_bytes(c, from, 2, gb, 13, &err), 0);
    CHECK_INT(pt_comm_wait_sends(c, &err), 0);
    for (int i = 0; i < N; i++)
        CHECK_INT(got[i], val(from, i));
    for (int i = 0; i < 13; i++)
        CHECK_INT(gb[i], from * 16 + i);
}

static void check_host(pt_comm *c)
{
    pt_err err = {""};
    double d[2] = {rank_ + 0.5, 1};
    CHECK_INT(pt_comm_allreduce_f64(c, -1, d, 2, &err), 0);
    CHECK_NEAR(d[0], size_ * (size_ - 1) / 2.0 + 0.5 * size_, 0);
    CHECK_NEAR(d[1], size_, 0);
    char text[32];
    snprintf(text, sizeof text, "from rank %d", rank_);
    CHECK_INT(pt_comm_bcast(c, text, sizeof text, &err), 0);
    CHECK_STR_HAS(text, "from rank 0");
    CHECK(pt_comm_all_ok(c, true));
    CHECK(!pt_comm_all_ok(c, rank_ != 2));
    /* rank r sends r + 1 bytes of value r */
    unsigned char mine[8];
    memset(mine, rank_, sizeof mine);
    void *all = NULL;
    int64_t sizes[8] = {0};
    CHECK_INT(pt_comm_gather_bytes(c, mine, rank_ + 1, &all, sizes, &err), 0);
    if (rank_ == 0 && all) {
        const unsigned char *p = all;
        for (int r = 0; r < size_; r++) {
            CHECK_INT(sizes[r], r + 1);
            for (int i = 0; i <= r; i++)
                CHECK_INT(*p++, r);
        }
    } else {
        CHECK(rank_ != 0 || all);
        CHECK(rank_ == 0 || !all);
    }
    free(all);
}

/* The first three ranks as a run of their own: rank 3 is left out; collectives,
 * broadcast and the ring of transfers go over the three only, on host buffers and
 * staged (kn). */
static void check_sub(pt_comm *c, pt_kernels *kn)
{
    pt_err err = {""};
    pt_comm *s = NULL;
    CHECK(pt_comm_sub(c, 1, &s, &err) != 0 && !s);
    CHECK_STR_HAS(err.msg, "want 2 to 4");
    CHECK(pt_comm_sub(c, 5, &s, &err) != 0 && !s);
    err.msg[0] = '\0';
    CHECK_INT(pt_comm_sub(c, 3, &s, &err), 0);
    CHECK(rank_ == 3 ? !s : s != NULL);
    if (!s)
        return;
    CHECK_INT(pt_comm_size(s), 3);
    CHECK_INT(pt_comm_rank(s), rank_);
    CHECK(strcmp(pt_comm_backend(s), "mpi") == 0);
    for (int staged = 0; staged < 2; staged++) {
        if (staged) {
            CHECK_INT(pt_comm_use_staging(s, kn, &err), 0);
            CHECK(strcmp(pt_comm_backend(s), "mpi+staging") == 0);
        }
        float sum[N], ag[3 * N], ring[N];
        for (int i = 0; i < N; i++)
            sum[i] = val(rank_, i);
        CHECK_INT(pt_comm_allreduce(s, -1, sum, N, &err), 0);
        CHECK_INT(pt_comm_allgather(s, -1, sum, ag, N, &err), 0);
        CHECK_INT(pt_comm_broadcast(s, -1, sum, N, &err), 0);
        CHECK_INT(pt_comm_isend(s, (rank_ + 1) % 3, 0, sum, N, &err), 0);
        CHECK_INT(pt_comm_recv(s, (rank_ + 2) % 3, 0, ring, N, &err), 0);
        CHECK_INT(pt_comm_wait_sends(s, &err), 0);
        for (int i = 0; i < N; i++) {
            float want = val(0, i) + val(1, i) + val(2, i);
            CHECK_INT(sum[i], want);
            CHECK_INT(ring[i], want);
            for (int k = 0; k < 3; k++)
                CHECK_INT(ag[k * N + i], want);
        }
        const int64_t first3[3] = {0, 1, 2};
        check_typed(s, -1, first3, 3, rank_, 5);
        check_a2av(s, -1, first3, 3, rank_, true);
    }
    CHECK(pt_comm_all_ok(s, true));
    if (err.msg[0])
        fprintf(stderr, "rank %d, first three ranks: %s\n", rank_, err.msg);
    pt_comm_finalize(s); /* MPI stays up for c */
}

static void check_all(pt_comm *c, const char *path)
{
    int before = pt_check_failures;
    const int kinds[] = {PT_GROUP_TP, PT_GROUP_CP, PT_GROUP_DP, PT_GROUP_PP, PT_GROUP_DPCP,
                         PT_GROUP_TPCP, PT_GROUP_COUNT, -1};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        check_group(c, kinds[k], false);
        check_group(c, kinds[k], true);
        check_typed_group(c, kinds[k]);
    }
    check_p2p(c);
    check_host(c);
    if (pt_check_failures == before)
        printf("rank %d: %s: every collective and transfer right\n", rank_, path);
}

/* Any world but 4 ranks (alone: a world of one; tests/run_mpi.sh 1, 2 or 3): the typed
 * collectives and the all-to-alls over the world, on host buffers and staged. */
static int check_world(pt_comm *c)
{
    pt_err err = {""};
    int64_t m[64];
    for (int r = 0; r < size_; r++)
        m[r] = r;
    pt_kernels *kn = pt_kernels_cpu(1);
    CHECK(kn != NULL);
    CHECK_INT(pt_comm_use_device(c, kn, &err), 0);
    for (int staged = 0; staged < 2; staged++) {
        if (staged)
            CHECK_INT(pt_comm_use_staging(c, kn, &err), 0);
        int before = pt_check_failures;
        check_typed(c, -1, m, size_, rank_, N);
        check_a2av(c, -1, m, size_, rank_, true);
        if (pt_check_failures == before)
            printf("rank %d of %d: %s: the typed collectives and all-to-alls right\n", rank_,
                   size_, staged ? "host staging" : "host buffers");
    }
    bool ok = pt_comm_all_ok(c, pt_check_failures == 0);
    pt_kernels_destroy(kn);
    pt_comm_finalize(c);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    pt_comm *c = NULL;
    pt_err err = {""};
    if (pt_comm_init(&argc, &argv, &c, &err)) {
        fprintf(stderr, "test_comm: %s\n", err.msg);
        return 1;
    }
    rank_ = pt_comm_rank(c);
    size_ = pt_comm_size(c);
    if (size_ > 64) {
        fprintf(stderr, "test_comm: run me on 4 ranks (tests/run_mpi.sh 4 test_comm), or on "
                        "1 to 64 for the world's collectives alone, not %d\n", size_);
        pt_comm_finalize(c);
        return 1;
    }
    if (size_ != 4)
        return check_world(c);
    pt_layout l;
    pt_layout_default(&l);
    l.tp = 2;
    l.pp = 2;
    l.dp = 1;
    l.cp = 1;
    pt_grid_init(&grid, &l);
    CHECK_INT(pt_comm_groups(c, &grid, &err), 0);

    /* a grid for another world is refused */
    pt_layout wrong = l;
    wrong.dp = 2;
    pt_grid g8;
    pt_grid_init(&g8, &wrong);
    CHECK(pt_comm_groups(c, &g8, &err) != 0);
    CHECK_STR_HAS(err.msg, "the layout has 8 ranks, the run 4");

    pt_kernels *kn = pt_kernels_cpu(1);
    CHECK(kn != NULL);
    CHECK_INT(pt_comm_use_device(c, kn, &err), 0); /* the CPU backend: nothing changes */
    CHECK(strcmp(pt_comm_backend(c), "mpi") == 0);
    char library[256];
    pt_comm_library(c, library, sizeof library);
    CHECK_STR_HAS(library, "MPI");
    check_all(c, "host buffers");
    check_sub(c, kn);

    CHECK_INT(pt_comm_use_staging(c, kn, &err), 0);
    CHECK(strcmp(pt_comm_backend(c), "mpi+staging") == 0);
    check_all(c, "host staging");

    CHECK(ties > 0); /* the bf16 sums exercised rounding halfway cases */
    bool ok = pt_comm_all_ok(c, pt_check_failures == 0);
    pt_kernels_destroy(kn);
    pt_comm_finalize(c);
    return ok ? 0 : 1;
}
