/*
 * Span recording, merging the ranks' spans onto one clock, and the Chrome trace
 * writer and reader (the Trace Event Format's complete events, "ph": "X", with
 * microsecond timestamps, plus metadata events naming the processes and threads;
 * Google, "Trace Event Format", 2016).
 *
 * Recording runs for every op of every step (the default job: 8,000 spans a step, and
 * its steps are short: the code notes in docs/results/), so it stores 32 bytes a
 * span and interns what ran; the full spans, over 200 bytes each, exist only once the
 * run is over (bench/bench_trace.sh measures the cost).
 */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double pt_trace_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pt_trace_init(pt_trace *t, bool on)
{
    *t = (pt_trace){.on = on, .origin_s = pt_trace_now(), .step = -1, .first_step = -1};
}

void pt_trace_set_step(pt_trace *t, int64_t step)
{
    if (!t || !t->on)
        return;
    t->step = step > INT32_MAX ? INT32_MAX : (int32_t)step;
    if (t->first_step < 0)
        t->first_step = t->step;
}

/* ---- Recording ----------------------------------------------------------------------- */

/* What ran where: everything a span holds but its times, micro-batch and chunk. A run
 * has a few hundred distinct ones (its ops' keys and the instruction kinds), each
 * interned once; a recorded span names one by index. */
typedef struct {
    char name[48];   /* an instruction's kind ("fwd") when ins */
    char key[128];
    double flops, bytes;
    int32_t dtype, rank, stream, ins;
    uint64_t hash;
} site;

/* One recorded span. */
typedef struct {
    double t0_s, dur_s; /* t0 from the trace's origin */
    int32_t site;
    int32_t mb, chunk;  /* -1 when none */
    int32_t step;       /* the optimizer step it ran in (pt_trace_set_step); -1 before any */
    int32_t ins, op;    /* instruction index, op-list index; -1 when none */
} rec;

struct pt_trace_log {
    rec *r;
    size_t n, cap;
    site *s;
    size_t n_s, cap_s;
    int32_t *slot;      /* open addressing over sites: index + 1, 0 when empty */
    size_t n_slot;      /* a power of two, at least twice n_s */
};

/* The first allocation holds this many spans (2 MiB): about eight steps of the default
 * job before the array doubles. */
#define LOG_FIRST_CAP 65536

static void log_free(struct pt_trace_log *L)
{
    if (!L)
        return;
    free(L->r);
    free(L->s);
    free(L->slot);
    free(L);
}

void pt_trace_free(pt_trace *t)
{
    log_free(t->log);
    free(t->v);
    *t = (pt_trace){0};
}

/* A multiply-xorshift step over 64-bit words: recording hashes every span's name and
 * key, so a word at a time rather than FNV's byte at a time. */
static uint64_t mix(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x9e3779b97f4a7c15ull; /* 2^64 / golden ratio (Knuth, TAOCP 6.4) */
    return h ^ (h >> 29);
}

static uint64_t mix_text(uint64_t h, const char *s, size_t n)
{
    uint64_t w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        h = mix(h, w);
    }
    w = 0;
    memcpy(&w, s + i, n - i);
    return mix(h, w ^ n);
}

/* The hash of a site's text and numbers; *n_name and *n_key receive the lengths (cut to
 * fit the site's fields). */
static uint64_t site_hash(const char *name, size_t *n_name, const char *key, size_t *n_key,
                          const int32_t ints[4], const double nums[2])
{
    *n_name = strnlen(name, sizeof ((site *)0)->name - 1);
    *n_key = strnlen(key, sizeof ((site *)0)->key - 1);
    uint64_t w[4];
    memcpy(w, nums, 2 * sizeof *nums);
    memcpy(&w[2], ints, 4 * sizeof *ints);
    uint64_t h = mix_text(mix_text(0, name, *n_name), key, *n_key);
    for (int i = 0; i < 4; i++)
        h = mix(h, w[i]);
    return h;
}

static bool site_is(const site *x, uint64_t h, const char *name, size_t n_name,
                    const char *key, size_t n_key, const int32_t ints[4], const double nums[2])
{
    return x->hash == h && x->dtype == ints[0] && x->rank == ints[1] &&
           x->stream == ints[2] && x->ins == ints[3] && x->flops == nums[0] &&
           x->bytes == nums[1] && memcmp(x->name, name, n_name) == 0 && !x->name[n_name] &&
           memcmp(x->key, key, n_key) == 0 && !x->key[n_key];
}

/* Doubles the hash table and puts every site back. */
static int rehash(struct pt_trace_log *L)
{
    size_t n = L->n_slot ? 2 * L->n_slot : 1024;
    int32_t *slot = calloc(n, sizeof *slot);
    if (!slot)
        return -1;
    for (size_t i = 0; i < L->n_s; i++) {
        size_t j = L->s[i].hash & (n - 1);
        while (slot[j])
            j = (j + 1) & (n - 1);
        slot[j] = (int32_t)i + 1;
    }
    free(L->slot);
    L->slot = slot;
    L->n_slot = n;
    return 0;
}

/* The index of the site, interned here the first time it is seen; -1 when out of
 * memory. */
static int32_t site_of(struct pt_trace_log *L, const char *name, const char *key,
                       const int32_t ints[4], const double nums[2])
{
    size_t n_name, n_key;
    uint64_t h = site_hash(name, &n_name, key, &n_key, ints, nums);
    if (2 * (L->n_s + 1) > L->n_slot && rehash(L))
        return -1;
    size_t j = h & (L->n_slot - 1);
    for (; L->slot[j]; j = (j + 1) & (L->n_slot - 1))
        if (site_is(&L->s[L->slot[j] - 1], h, name, n_name, key, n_key, ints, nums))
            return L->slot[j] - 1;
    if (L->n_s == L->cap_s) {
        size_t cap = L->cap_s ? 2 * L->cap_s : 256;
        site *s = realloc(L->s, cap * sizeof *s);
        if (!s)
            return -1;
        L->s = s;
        L->cap_s = cap;
    }
    site *x = &L->s[L->n_s];
    memset(x, 0, sizeof *x);
    memcpy(x->name, name, n_name);
    memcpy(x->key, key, n_key);
    x->dtype = ints[0];
    x->rank = ints[1];
    x->stream = ints[2];
    x->ins = ints[3];
    x->flops = nums[0];
    x->bytes = nums[1];
    x->hash = h;
    L->slot[j] = (int32_t)L->n_s + 1;
    return (int32_t)L->n_s++;
}

/* A new span, its site interned; NULL (and t->oom) when out of memory. */
static rec *record(pt_trace *t, const char *name, const char *key, const int32_t ints[4],
                   const double nums[2], double t0, double t1)
{
    struct pt_trace_log *L = t->log;
    if (!L && !(L = t->log = calloc(1, sizeof *L)))
        goto oom;
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : LOG_FIRST_CAP;
        rec *r = realloc(L->r, cap * sizeof *r);
        if (!r)
            goto oom;
        L->r = r;
        L->cap = cap;
    }
    int32_t i = site_of(L, name, key, ints, nums);
    if (i < 0)
        goto oom;
    rec *r = &L->r[L->n++];
    *r = (rec){.t0_s = t0 - t->origin_s, .dur_s = t1 - t0, .site = i, .mb = -1, .chunk = -1,
               .step = t->step, .ins = -1, .op = -1};
    return r;
oom:
    t->oom = true;
    return NULL;
}

void pt_trace_sync(pt_trace *t)
{
    if (!t || !t->on)
        return;
    t->sync_s[t->n_sync < 2 ? t->n_sync++ : 1] = pt_trace_now();
}

void pt_trace_add_ins(pt_trace *t, int rank, int stream, const char *kind, int mb,
                      int chunk, int index, double t0, double t1)
{
    if (!t || !t->on)
        return;
    int32_t ints[4] = {PT_DTYPE_FP32, rank, stream, 1};
    double nums[2] = {0, 0};
    rec *ins = record(t, kind, "", ints, nums, t0, t1);
    if (!ins)
        return;
    ins->mb = mb;
    ins->chunk = chunk;
    ins->ins = index;
    /* The op spans of an instruction were recorded before it (its span ends after
     * theirs): they are the ones just before it that started no earlier, and each is
     * visited once. */
    const struct pt_trace_log *L = t->log;
    for (rec *r = ins; r-- > L->r;) {
        if (r->t0_s < ins->t0_s || r->mb >= 0 || L->s[r->site].rank != rank)
            break;
        r->mb = mb;
        r->chunk = chunk;
        r->ins = index;
    }
}

void pt_trace_add(pt_trace *t, int rank, int stream, const char *name, const char *key,
                  double t0, double t1)
{
    if (!t || !t->on)
        return;
    int mb, chunk;
    const char *p = key && key[0] ? NULL : strstr(name, " mb");
    if (p && sscanf(p, " mb%d c%d", &mb, &chunk) == 2) {
        char kind[48];
        size_t n = (size_t)(p - name) < sizeof kind ? (size_t)(p - name) : sizeof kind - 1;
        memcpy(kind, name, n);
        kind[n] = 0;
        pt_trace_add_ins(t, rank, stream, kind, mb, chunk, -1, t0, t1);
        return;
    }
    int32_t ints[4] = {PT_DTYPE_FP32, rank, stream, 0};
    double nums[2] = {0, 0};
    record(t, name, key ? key : "", ints, nums, t0, t1);
}

int64_t pt_trace_add_op(pt_trace *t, int rank, int stream, const char *name,
                        const pt_kernel_op *op, int index, double t0, double t1)
{
    if (!t || !t->on)
        return -1;
    int32_t ints[4] = {(int32_t)op->dtype, rank, stream, 0};
    double nums[2] = {op->flops, op->bytes};
    rec *r = record(t, name, op->key, ints, nums, t0, t1);
    if (!r)
        return -1;
    r->op = index;
    return (int64_t)(r - t->log->r);
}

void pt_trace_add_coll(pt_trace *t, int rank, const char *name, int index, double t0,
                       double t1)
{
    if (!t || !t->on)
        return;
    int32_t ints[4] = {PT_DTYPE_FP32, rank, 1, 0};
    double nums[2] = {0, 0};
    rec *r = record(t, name, "", ints, nums, t0, t1);
    if (r)
        r->op = index;
}

void pt_trace_retime(pt_trace *t, int64_t span, double t0, double t1)
{
    if (!t || !t->on || !t->log || span < 0 || (uint64_t)span >= t->log->n || !(t1 >= t0))
        return;
    rec *r = &t->log->r[span];
    r->t0_s = t0 - t->origin_s;
    r->dur_s = t1 - t0;
}

/* A recorded span in full: its site's name (an instruction's with micro-batch and
 * chunk), key and figures. */
static void expand_one(const site *x, const rec *r, pt_span *s)
{
    memset(s, 0, sizeof *s);
    if (x->ins) /* kinds are a dozen letters at most (pt_ins_name) */
        snprintf(s->name, sizeof s->name, "%.24s mb%d c%d", x->name, (int)r->mb,
                 (int)r->chunk);
    else
        memcpy(s->name, x->name, sizeof s->name);
    memcpy(s->key, x->key, sizeof s->key);
    s->rank = x->rank;
    s->stream = x->stream;
    s->mb = r->mb;
    s->chunk = r->chunk;
    s->step = r->step;
    s->ins = r->ins;
    s->op = r->op;
    s->t0_s = r->t0_s;
    s->dur_s = r->dur_s;
    s->flops = x->flops;
    s->bytes = x->bytes;
    s->dtype = (pt_dtype)x->dtype;
}

static int grow_spans(pt_trace *t, size_t more, pt_err *err)
{
    if (t->n + more <= t->cap)
        return 0;
    size_t cap = t->n + more;
    pt_span *v = realloc(t->v, (cap ? cap : 1) * sizeof *v);
    if (!v)
        return pt_err_set(err, "out of memory for %zu spans", cap);
    t->v = v;
    t->cap = cap;
    return 0;
}

int pt_trace_expand(pt_trace *t, pt_err *err)
{
    struct pt_trace_log *L = t->log;
    if (!L)
        return 0;
    if (grow_spans(t, L->n, err))
        return -1;
    for (size_t i = 0; i < L->n; i++)
        expand_one(&L->s[L->r[i].site], &L->r[i], &t->v[t->n++]);
    log_free(L);
    t->log = NULL;
    return 0;
}

/* ---- Trace -> op statistics and cost samples ------------------------------------------ */

bool pt_span_is_op(const pt_span *s)
{
    return s->key[0] || (s->stream != 0 && !strstr(s->name, " mb"));
}

static int by_op_then_time(const void *a, const void *b)
{
    const pt_span *x = *(const pt_span *const *)a, *y = *(const pt_span *const *)b;
    int c = (x->rank > y->rank) - (x->rank < y->rank);
    if (!c)
        c = (x->stream > y->stream) - (x->stream < y->stream);
    if (!c)
        c = strcmp(x->key, y->key);
    if (!c)
        c = strcmp(x->name, y->name);
    return c ? c : (x->t0_s > y->t0_s) - (x->t0_s < y->t0_s);
}

int pt_trace_op_stats(const pt_trace *t, pt_op_stat **out, size_t *n_out, pt_err *err)
{
    *out = NULL;
    *n_out = 0;
    const pt_span **v = malloc((t->n ? t->n : 1) * sizeof *v);
    double *d = malloc((t->n ? t->n : 1) * sizeof *d);
    pt_op_stat *st = calloc(t->n ? t->n : 1, sizeof *st);
    if (!v || !d || !st) {
        free(v), free(d), free(st);
        return pt_err_set(err, "out of memory for the statistics of %zu spans", t->n);
    }
    size_t n = 0, ns = 0;
    for (size_t i = 0; i < t->n; i++)
        if (pt_span_is_op(&t->v[i]))
            v[n++] = &t->v[i];
    qsort(v, n, sizeof *v, by_op_then_time);
    for (size_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && v[b]->rank == v[a]->rank && v[b]->stream == v[a]->stream &&
                        !strcmp(v[b]->key, v[a]->key) && !strcmp(v[b]->name, v[a]->name);
             b++)
            ;
        /* the warm-up: the run's first step, or (a trace without steps) the first span */
        size_t m = 0;
        for (size_t k = a; k < b; k++)
            if (t->first_step >= 0 ? v[k]->step != t->first_step : k > a || b - a == 1)
                d[m++] = v[k]->dur_s > 0 ? v[k]->dur_s : 0;
        if (m == 0)
            continue;
        pt_op_stat *o = &st[ns++];
        o->rank = v[a]->rank;
        o->stream = v[a]->stream;
        memcpy(o->name, v[a]->name, sizeof o->name);
        memcpy(o->key, v[a]->key, sizeof o->key);
        o->dtype = v[a]->dtype;
        o->flops = v[a]->flops;
        o->bytes = v[a]->bytes;
        pt_robust_of(d, m, &o->st);
    }
    free(v);
    free(d);
    *out = st;
    *n_out = ns;
    return 0;
}

int pt_trace_to_costdb(const pt_trace *t, pt_costdb *db, const char *device, pt_source source,
                       int64_t *stored, pt_err *err)
{
    *stored = 0;
    pt_op_stat *st = NULL;
    pt_op_sample *smp = NULL;
    size_t n = 0, ns = 0;
    int rc = pt_trace_op_stats(t, &st, &n, err) || pt_op_samples(st, n, &smp, &ns, err)
                 ? -1
                 : pt_costdb_begin(db, err);
    for (size_t i = 0; rc == 0 && i < ns; i++) {
        if (!(smp[i].st.median_s > 0))
            continue; /* below the clock's resolution: nothing to learn */
        rc = pt_costdb_put_kernel(db, device, &smp[i].op, smp[i].st.median_s, source, err);
        if (rc == 0)
            (*stored)++;
    }
    if (rc == 0)
        rc = pt_costdb_commit(db, err);
    free(st);
    free(smp);
    return rc;
}

void pt_trace_keep_steps(pt_trace *t, int64_t steps)
{
    int32_t last = -1;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].step > last)
            last = t->v[i].step;
    if (steps < 1 || last < 0)
        return;
    int64_t from = (int64_t)last - steps + 1;
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].step >= from)
            t->v[k++] = t->v[i];
    t->n = k;
}

/* ---- Merging the ranks' traces ----------------------------------------------------------- */

/* What one rank sends to rank 0, followed by its sites and its recorded spans. */
typedef struct {
    uint32_t magic;      /* PACK_MAGIC: the buffer is a packed trace of this build */
    int32_t n_sync;
    int32_t first_step;  /* the run's first (warm-up) step on this rank */
    double origin_s, sync_s[2];
    pt_run_rank mem;
    uint64_t n_sites, n_spans;
} pack_header;

#define PACK_MAGIC 0x70747433u /* "ptt3" */

int pt_trace_pack(const pt_trace *t, const pt_run_rank *mem, void **buf, int64_t *n,
                  pt_err *err)
{
    const struct pt_trace_log *L = t->log;
    size_t n_sites = L ? L->n_s : 0, n_spans = L ? L->n : 0;
    size_t bytes = sizeof(pack_header) + n_sites * sizeof(site) + n_spans * sizeof(rec);
    pack_header h = {.magic = PACK_MAGIC, .n_sync = t->n_sync, .first_step = t->first_step,
                     .origin_s = t->origin_s,
                     .sync_s = {t->sync_s[0], t->sync_s[1]}, .mem = *mem,
                     .n_sites = n_sites, .n_spans = n_spans};
    char *b = malloc(bytes);
    if (!b)
        return pt_err_set(err, "out of memory packing %zu spans", n_spans);
    memcpy(b, &h, sizeof h);
    if (n_sites)
        memcpy(b + sizeof h, L->s, n_sites * sizeof(site));
    if (n_spans)
        memcpy(b + sizeof h + n_sites * sizeof(site), L->r, n_spans * sizeof(rec));
    *buf = b;
    *n = (int64_t)bytes;
    return 0;
}

/* The clocks. Every rank times its spans with its own CLOCK_MONOTONIC, whose zero
 * differs between hosts and whose rate differs by a few parts per million. All ranks
 * record the instant they leave a barrier at the start of the run (s0) and again at the
 * end (s1); leaving a barrier happens at nearly the same real time on every rank (within
 * the barrier's exit skew, microseconds over shared memory or InfiniBand). A local time
 * t of rank r is mapped onto rank 0's clock by the straight line through those two
 * pairs of instants, g(t) = S0 + (t - s0) · (S1 - S0) / (s1 - s0), which removes the
 * offset and a constant drift — the linear offset interpolation that trace analysers
 * use (Becker, Rabenseifner, Wolf, Linford, "Scalable timestamp synchronization for
 * event traces of message-passing applications", Parallel Computing 35(12), 2009,
 * sec. 2). With one barrier only the offset is removed. */
static double align(double t, const pack_header *me, const pack_header *r0)
{
    if (me->n_sync < 1 || r0->n_sync < 1)
        return t; /* no reference: a single rank, or a trace without barriers */
    double rate = 1.0;
    if (me->n_sync >= 2 && r0->n_sync >= 2 && me->sync_s[1] > me->sync_s[0])
        rate = (r0->sync_s[1] - r0->sync_s[0]) / (me->sync_s[1] - me->sync_s[0]);
    return r0->sync_s[0] + (t - me->sync_s[0]) * rate;
}

static int by_rank_then_time(const void *a, const void *b)
{
    const pt_span *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->t0_s > y->t0_s) - (x->t0_s < y->t0_s);
}

/* Whether a packed buffer of `size` bytes holds what its header announces, and every
 * span names one of its sites. */
static bool pack_ok(const pack_header *h, const char *body, int64_t size)
{
    if (h->magic != PACK_MAGIC || h->n_sync < 0 || h->n_sync > 2 ||
        h->n_sites > (uint64_t)INT32_MAX || h->n_spans > (uint64_t)size ||
        (int64_t)(sizeof *h + h->n_sites * sizeof(site) + h->n_spans * sizeof(rec)) != size)
        return false;
    const char *spans = body + h->n_sites * sizeof(site);
    for (uint64_t i = 0; i < h->n_spans; i++) {
        rec r;
        memcpy(&r, spans + i * sizeof r, sizeof r);
        if (r.site < 0 || (uint64_t)r.site >= h->n_sites)
            return false;
    }
    return true;
}

int pt_trace_merge(const void *all, const int64_t *sizes, int world, pt_trace *out,
                   pt_run_rank *mem, pt_err *err)
{
    pt_trace_init(out, true);
    if (world < 1 || world > PT_TRACE_MAX_RANKS)
        return pt_err_set(err, "cannot merge the traces of %d ranks", world);
    const char *p = all;
    pack_header r0 = {0};
    size_t total = 0;
    for (int r = 0; r < world; r++) {
        pack_header h;
        if (sizes[r] < (int64_t)sizeof h)
            return pt_err_set(err, "the trace of rank %d is damaged (%lld bytes)", r,
                              (long long)sizes[r]);
        memcpy(&h, p, sizeof h);
        if (!pack_ok(&h, p + sizeof h, sizes[r]))
            return pt_err_set(err, "the trace of rank %d is damaged or from another build", r);
        if (r == 0)
            r0 = h;
        total += h.n_spans;
        p += sizes[r];
    }
    if (grow_spans(out, total, err))
        return -1;
    out->origin_s = r0.origin_s;
    out->world = world;
    out->first_step = r0.first_step;
    p = all;
    for (int r = 0; r < world; r++) {
        pack_header h;
        memcpy(&h, p, sizeof h);
        const char *sites = p + sizeof h, *spans = sites + h.n_sites * sizeof(site);
        for (size_t i = 0; i < h.n_spans; i++) {
            rec x;
            site y;
            memcpy(&x, spans + i * sizeof x, sizeof x);
            memcpy(&y, sites + (size_t)x.site * sizeof y, sizeof y);
            pt_span *s = &out->v[out->n++];
            expand_one(&y, &x, s);
            double t0 = align(h.origin_s + s->t0_s, &h, &r0);
            double t1 = align(h.origin_s + s->t0_s + s->dur_s, &h, &r0);
            s->t0_s = t0 - r0.origin_s;
            s->dur_s = t1 - t0;
            s->rank = r; /* the rank that sent it, whatever it wrote */
        }
        if (mem) {
            mem[r] = h.mem;
            mem[r].rank = r;
        }
        p += sizes[r];
    }
    qsort(out->v, out->n, sizeof *out->v, by_rank_then_time);
    return 0;
}

/* ---- Plan identity --------------------------------------------------------------------- */

int pt_trace_plan_id(const char *path, char out[17], pt_err *err)
{
    FILE *f = pt_in_open(path, false, err);
    if (!f)
        return -1;
    /* 64-bit FNV-1a (Fowler, Noll, Vo; http://www.isthe.com/chongo/tech/comp/fnv/) */
    uint64_t h = 14695981039346656037ull;
    int c;
    while ((c = getc(f)) != EOF)
        h = (h ^ (unsigned char)c) * 1099511628211ull;
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return pt_err_set(err, "cannot read plan '%s'", path);
    snprintf(out, 17, "%016" PRIx64, h);
    return 0;
}

/* ---- Chrome trace writer ----------------------------------------------------------------- */

/* The writer prints the JSON itself, one event after the other, instead of building a
 * jansson tree of every span first: a run's trace has hundreds of thousands of spans.
 * The file is one compact line, without spaces (jansson's JSON_COMPACT form, which
 * tools/ and tests/ grep). */

static void put_meta(FILE *f, const char *sep, const char *what, int rank, int tid,
                     const char *name)
{
    fprintf(f, "%s{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", sep,
            what, rank, tid);
    pt_json_put_string(f, name);
    fputs("}}", f);
}

/* Times in microseconds to the nanosecond, what the clocks resolve. */
static void put_span(FILE *f, const char *sep, const pt_span *s)
{
    fprintf(f, "%s{\"name\":", sep);
    pt_json_put_string(f, s->name);
    fprintf(f, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,\"args\":{",
            s->t0_s * 1e6, s->dur_s * 1e6, s->rank, s->stream);
    fprintf(f, "\"step\":%d", s->step);
    if (s->mb >= 0)
        fprintf(f, ",\"mb\":%d,\"chunk\":%d", s->mb, s->chunk);
    if (s->ins >= 0)
        fprintf(f, ",\"ins\":%d", s->ins);
    if (s->op >= 0)
        fprintf(f, ",\"op\":%d", s->op);
    if (s->key[0]) {
        fputs(",\"key\":", f);
        pt_json_put_string(f, s->key);
        fprintf(f, ",\"flops\":%.17g,\"bytes\":%.17g,\"dtype\":\"%s\"", s->flops, s->bytes,
                pt_dtype_name(s->dtype));
    }
    fputs("}}", f);
}

static void put_trace(FILE *f, const pt_trace *t)
{
    int max_rank = -1;
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].rank > max_rank)
            max_rank = t->v[i].rank;
    if (t->world > max_rank + 1)
        max_rank = t->world - 1;
    fputs("{\"traceEvents\":[", f);
    for (int r = 0; r <= max_rank; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank %d", r);
        put_meta(f, r ? "," : "", "process_name", r, 0, name);
        put_meta(f, ",", "thread_name", r, 0, "compute");
        put_meta(f, ",", "thread_name", r, 1, "communication");
    }
    for (size_t i = 0; i < t->n; i++)
        put_span(f, i || max_rank >= 0 ? "," : "", &t->v[i]);
    fprintf(f, "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"format\":\"%s\",\"plan_id\":",
            PT_TRACE_FORMAT);
    pt_json_put_string(f, t->plan_id);
    fputs(",\"plan\":", f);
    pt_json_put_string(f, t->plan_path);
    fprintf(f, ",\"world\":%d,\"first_step\":%d,\"spans\":%zu}}",
            t->world > 0 ? t->world : max_rank + 1, (int)t->first_step, t->n);
}

int pt_trace_write_chrome(const pt_trace *t, const char *path, pt_err *err)
{
    pt_out o;
    if (pt_out_open(&o, path, err))
        return -1;
    setvbuf(o.f, NULL, _IOFBF, 1 << 20);
    put_trace(o.f, t);
    return pt_out_commit(&o, false, err);
}

/* ---- Chrome trace reader --------------------------------------------------------------- */

/* One "X" event into a span; -1 with err naming the event when a field is wrong. */
static int read_event(const char *path, size_t i, json_t *e, pt_span *s, pt_err *err)
{
    json_t *args = json_object_get(e, "args");
    const char *name = json_string_value(json_object_get(e, "name"));
    json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur");
    json_t *pid = json_object_get(e, "pid"), *tid = json_object_get(e, "tid");
    memset(s, 0, sizeof *s);
    if (!name || !json_is_number(ts) || !json_is_number(dur) || !json_is_integer(pid) ||
        !json_is_integer(tid) || json_integer_value(pid) < 0 ||
        json_integer_value(pid) >= PT_TRACE_MAX_RANKS)
        return pt_err_set(err, "%s: traceEvents[%zu]: a span needs name, ts, dur and a rank "
                               "(pid) in 0..%d", path, i, PT_TRACE_MAX_RANKS - 1);
    if (strlen(name) >= sizeof s->name)
        return pt_err_set(err, "%s: traceEvents[%zu]: name '%.40s...' is longer than the %zu "
                               "bytes a span name holds", path, i, name, sizeof s->name - 1);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->rank = (int)json_integer_value(pid);
    s->stream = (int)json_integer_value(tid);
    s->t0_s = json_number_value(ts) * 1e-6;
    s->dur_s = json_number_value(dur) * 1e-6;
    s->mb = s->chunk = s->step = s->ins = s->op = -1;
    const char *idx_names[2] = {"ins", "op"};
    int *idx[2] = {&s->ins, &s->op};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(args, idx_names[k]);
        if (json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX)
            *idx[k] = (int)json_integer_value(v);
    }
    json_t *step = json_object_get(args, "step");
    if (json_is_integer(step) && json_integer_value(step) >= -1 &&
        json_integer_value(step) <= INT32_MAX)
        s->step = (int)json_integer_value(step);
    json_t *mb = json_object_get(args, "mb"), *chunk = json_object_get(args, "chunk");
    if (json_is_integer(mb) && json_is_integer(chunk)) {
        s->mb = (int)json_integer_value(mb);
        s->chunk = (int)json_integer_value(chunk);
    }
    const char *key = json_string_value(json_object_get(args, "key"));
    if (key) {
        const char *dtype = json_string_value(json_object_get(args, "dtype"));
        if (strlen(key) >= sizeof s->key) /* cut short, it would price another op */
            return pt_err_set(err, "%s: traceEvents[%zu] ('%s'): key '%.40s...' is longer "
                                   "than the %zu bytes an op key holds", path, i, name, key,
                              sizeof s->key - 1);
        snprintf(s->key, sizeof s->key, "%s", key);
        s->flops = json_number_value(json_object_get(args, "flops"));
        s->bytes = json_number_value(json_object_get(args, "bytes"));
        if (pt_dtype_parse(dtype ? dtype : "", &s->dtype, NULL))
            return pt_err_set(err, "%s: traceEvents[%zu] ('%s'): unknown dtype '%s'", path, i,
                              name, dtype ? dtype : "");
    }
    return 0;
}

static int read_spans(const char *path, json_t *events, pt_trace *out, pt_err *err)
{
    size_t n = json_array_size(events);
    out->v = malloc((n ? n : 1) * sizeof *out->v);
    if (!out->v)
        return pt_err_set(err, "%s: out of memory for %zu events", path, n);
    out->cap = n;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(events, i);
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (ph && strcmp(ph, "X") == 0 && read_event(path, i, e, &out->v[out->n++], err))
            return -1;
    }
    return 0;
}

int pt_trace_read_chrome(const char *path, pt_trace *out, pt_err *err)
{
    pt_trace_init(out, true);
    json_error_t je;
    FILE *f = pt_in_open(path, false, err);
    if (!f)
        return -1;
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    if (!root)
        return pt_err_set(err, "%s:%d:%d: not a complete JSON trace (truncated?): %s", path,
                          je.line, je.column, je.text);
    json_t *other = json_object_get(root, "otherData");
    json_t *events = json_object_get(root, "traceEvents");
    const char *format = json_string_value(json_object_get(other, "format"));
    const char *plan_id = json_string_value(json_object_get(other, "plan_id"));
    const char *plan = json_string_value(json_object_get(other, "plan"));
    json_t *world = json_object_get(other, "world"), *spans = json_object_get(other, "spans");
    int rc = 0;
    if (!json_is_array(events))
        rc = pt_err_set(err, "%s: not a Chrome trace (no traceEvents array)", path);
    else if (!format || strcmp(format, PT_TRACE_FORMAT) != 0)
        rc = pt_err_set(err, "%s: otherData.format is '%s', not '%s': not a trace written by "
                             "ptrun", path, format ? format : "(missing)", PT_TRACE_FORMAT);
    else if (!plan_id || !json_is_integer(world) || !json_is_integer(spans) ||
             json_integer_value(world) < 1 || json_integer_value(world) > PT_TRACE_MAX_RANKS)
        rc = pt_err_set(err, "%s: otherData needs plan_id, world (1..%d) and spans", path,
                        PT_TRACE_MAX_RANKS);
    else if (strlen(plan_id) >= sizeof out->plan_id)
        rc = pt_err_set(err, "%s: otherData.plan_id '%.40s' is longer than the %zu bytes of "
                             "a plan identity", path, plan_id, sizeof out->plan_id - 1);
    else if (plan && strlen(plan) >= sizeof out->plan_path)
        rc = pt_err_set(err, "%s: otherData.plan is longer than %zu bytes", path,
                        sizeof out->plan_path - 1);
    if (rc == 0) {
        snprintf(out->plan_id, sizeof out->plan_id, "%s", plan_id);
        snprintf(out->plan_path, sizeof out->plan_path, "%s", plan ? plan : "");
        out->world = (int)json_integer_value(world);
        json_t *first = json_object_get(other, "first_step");
        if (json_is_integer(first) && json_integer_value(first) >= -1 &&
            json_integer_value(first) <= INT32_MAX)
            out->first_step = (int32_t)json_integer_value(first);
        rc = read_spans(path, events, out, err);
    }
    if (rc == 0 && (json_int_t)out->n != json_integer_value(spans))
        rc = pt_err_set(err, "%s: the trace holds %zu spans but announces %lld: it was cut "
                             "short or edited", path, out->n,
                        (long long)json_integer_value(spans));
    for (size_t i = 0; rc == 0 && i < out->n; i++)
        if (out->v[i].rank >= out->world)
            rc = pt_err_set(err, "%s: a span of rank %d in a trace of %d ranks", path,
                            out->v[i].rank, out->world);
    json_decref(root);
    if (rc)
        pt_trace_free(out);
    return rc;
}
