/*
 * The CUDA emulator's scheduler: runs a launch's blocks one after another, each thread of
 * the block a fiber, and implements what needs more than one thread: __syncthreads,
 * the warp collectives (shuffles, votes, __syncwarp, ldmatrix, mma) and cp.async, the
 * last per thread. pt_emu.h states the model; this file owns the launch in progress
 * (one at a time: launches from several host threads wait for each other).
 *
 * Scheduling: the threads of a block are ranked by the launch's order (forward, reverse,
 * or a permutation drawn per block from the seed), and the scheduler always resumes the
 * best-ranked thread that can run, until it blocks at a barrier or returns. So in
 * forward order warp 0 runs ahead to the next __syncthreads before warp 1 starts (its
 * lanes taking turns at each warp collective), in reverse order the last warp does, and
 * shuffled a random one: a missing barrier between warps, or between lanes, shows as a
 * wrong result under some order. When the last participant reaches a barrier, its
 * waiters can run again. Nothing able to run while threads remain is a barrier that
 * cannot complete: the launch stops there and reports where every thread waits. When a
 * cp.async's data lands is part of the schedule too (cp_async below). Threads hand over
 * to each other directly (yield); the scheduler's own context runs between blocks only,
 * and when nothing can run.
 *
 * Warp collectives: lane l of a warp writes its inputs to in[l] of the exchange slot of
 * the collective's parity (the lane's count of collectives so far, mod 2) and waits; the
 * lane that completes the set computes whatever needs every lane's inputs (ldmatrix,
 * mma) into out[], and each lane then reads its result. A lane cannot reach the
 * collective after next before every lane has left this one, so two slots suffice.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "emu_internal.h"
#include "pt_emu_test.h"

namespace pt_emu {

__thread thread_state *self;
__thread block_state *block;

namespace {

enum { RUNNABLE, WAIT_BLOCK, WAIT_WARP, EXITED };
enum { K_SYNCWARP, K_SHFL, K_VOTE, K_LDMATRIX, K_LDMATRIX_T, K_MMA };
const char *const KIND_NAME[] = {"__syncwarp", "a shuffle", "a vote",
                                 "ldmatrix",   "ldmatrix.trans", "mma.sync"};
const char *const ORDER_NAME[] = {"forward", "reverse", "shuffle"};
constexpr uint64_t DEFAULT_SEED = 0x5eed;

struct copy_op {
    void *dst;
    const void *src;
    int bytes, src_bytes;
};

struct emu_thread : thread_state {
    unsigned linear, lane, warp;
    unsigned rank; /* place in the block's order: lower runs first */
    int state;
    unsigned collectives; /* warp collectives entered; the low bit picks the slot */
    unsigned parity;      /* the slot of the collective it waits at */
    fiber ctx;
    std::deque<copy_op> pending; /* cp.async not yet complete, oldest first */
    std::deque<size_t> groups;   /* sizes of the committed groups among them, oldest first */
    size_t committed;            /* copies in those groups */
};

struct exchange {
    uint32_t in[32][10];
    uint32_t out[32][4];
};

struct emu_warp {
    uint32_t present;    /* lanes that exist (the last warp of a block may be partial) */
    uint32_t arrived[2]; /* lanes waiting at the collective of each slot */
    uint32_t mask[2];
    int kind[2];
    exchange slot[2];
};

/* the launch in progress */
struct grid_run {
    const char *name;
    dim3 grid, dim;
    size_t smem;
    unsigned nthreads, bar_arrived;
    unsigned alive; /* threads of the block that have not returned */
    std::vector<emu_thread> threads; /* DEV_MAX_THREADS, made once */
    std::vector<emu_warp> warps;
    std::vector<unsigned> order;     /* thread of each rank */
    emu_thread *by_rank[DEV_MAX_THREADS];
    uint64_t ready[DEV_MAX_THREADS / 64]; /* bit r: the thread of rank r can run */
    unsigned ready_words;            /* words of ready in use */
    uint64_t rng;                    /* per block: when shuffled copies land */
    block_state blk;
    fiber sched;
    entry_fn entry;
    void *args;
    bool faulted;
    std::string fault;
    unsigned char *smem_buf; /* DEV_SMEM_OPTIN bytes, made once */
};

std::mutex launch_mutex;
grid_run G;
uint64_t launch_count;
int order_mode = -1;
uint64_t order_seed = DEFAULT_SEED;
bool trace; /* PT_EMU_TRACE: every launch on stderr */
std::string last_report;

emu_thread *cur()
{
    if (!self) {
        fprintf(stderr, "pt_emu: a device function was called outside a kernel\n");
        abort();
    }
    return static_cast<emu_thread *>(self);
}

emu_thread *next_ready();

/* The running thread t stops (it blocked at a barrier, or returned): the first thread of
 * the order that can run takes over at once, t itself when that is t (no switch); the
 * scheduler only when nothing can run (the block is done, or stuck) or after a fault.
 * Returns when t runs again. */
void yield(emu_thread *t)
{
    emu_thread *next = G.faulted ? NULL : next_ready();
    if (next == t)
        return;
    if (!next) {
        fiber_switch(&t->ctx, &G.sched);
        return;
    }
    self = next;
    fiber_switch(&t->ctx, &next->ctx);
}

void set_state(emu_thread *t, int state)
{
    t->state = state;
    const uint64_t bit = 1ull << (t->rank % 64);
    if (state == RUNNABLE)
        G.ready[t->rank / 64] |= bit;
    else
        G.ready[t->rank / 64] &= ~bit;
}

/* the first thread in the block's order that can run, or NULL */
emu_thread *next_ready()
{
    for (unsigned i = 0; i < G.ready_words; i++)
        if (G.ready[i])
            return G.by_rank[i * 64 + (unsigned)__builtin_ctzll(G.ready[i])];
    return NULL;
}

void set_fault(const char *fmt, va_list ap)
{
    if (G.faulted)
        return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    char where[160];
    snprintf(where, sizeof where, "kernel %s, block (%u,%u,%u) of (%u,%u,%u): ", G.name,
             G.blk.idx.x, G.blk.idx.y, G.blk.idx.z, G.grid.x, G.grid.y, G.grid.z);
    G.fault = std::string(where) + msg;
    G.faulted = true;
}

/* A fault found by the running thread: recorded, and the thread never runs again. */
[[noreturn]] __attribute__((format(printf, 1, 2))) void fault_here(const char *fmt, ...)
{
    emu_thread *t = cur();
    va_list ap;
    va_start(ap, fmt);
    set_fault(fmt, ap);
    va_end(ap);
    set_state(t, EXITED);
    yield(t);
    abort(); /* never resumed */
}

__attribute__((format(printf, 1, 2))) void fault_sched(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_fault(fmt, ap);
    va_end(ap);
}

/* ---- Schedule ---------------------------------------------------------------------------- */

void read_env_once()
{
    if (order_mode >= 0)
        return;
    order_mode = ORDER_SHUFFLE;
    const char *tr = getenv("PT_EMU_TRACE");
    trace = tr && tr[0] && strcmp(tr, "0") != 0;
    const char *o = getenv("PT_EMU_ORDER");
    if (o && o[0]) {
        int found = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(o, ORDER_NAME[i]) == 0)
                found = i;
        if (found < 0)
            fprintf(stderr, "pt_emu: PT_EMU_ORDER=%s is not forward, reverse or shuffle; "
                            "using shuffle\n", o);
        else
            order_mode = found;
    }
    const char *s = getenv("PT_EMU_SEED");
    if (s && s[0]) {
        char *end = NULL;
        unsigned long long v = strtoull(s, &end, 0);
        if (*end)
            fprintf(stderr, "pt_emu: PT_EMU_SEED=%s is not a number; using %" PRIu64 "\n", s,
                    DEFAULT_SEED);
        else
            order_seed = v;
    }
}

uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void make_order(uint64_t launch_no, uint64_t block_no)
{
    const unsigned n = G.nthreads;
    G.order.resize(n);
    for (unsigned k = 0; k < n; k++)
        G.order[k] = order_mode == ORDER_REVERSE ? n - 1 - k : k;
    uint64_t s = order_seed ^ launch_no * 0xD1B54A32D192ED03ull ^ block_no * 0x8CB92BA72F3D8DD7ull;
    if (order_mode == ORDER_SHUFFLE)
        for (unsigned k = n - 1; k > 0; k--) { /* Fisher-Yates */
            unsigned j = (unsigned)(splitmix64(&s) % (k + 1));
            unsigned tmp = G.order[k];
            G.order[k] = G.order[j];
            G.order[j] = tmp;
        }
    for (unsigned k = 0; k < n; k++) {
        G.threads[G.order[k]].rank = k;
        G.by_rank[k] = &G.threads[G.order[k]];
    }
    G.ready_words = (n + 63) / 64;
    G.rng = s;
}

/* ---- Blocks ------------------------------------------------------------------------------ */

void land(const copy_op &c)
{
    memcpy(c.dst, c.src, (size_t)c.src_bytes);
    memset((char *)c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
}

void complete_copies(emu_thread *t, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        land(t->pending.front());
        t->pending.pop_front();
    }
}

void thread_main(void *p)
{
    emu_thread *t = static_cast<emu_thread *>(p);
    G.entry(G.args);
    /* a thread that returns with copies in flight: they land (nothing reads them) */
    complete_copies(t, t->pending.size());
    G.alive--;
    set_state(t, EXITED);
    yield(t);
    abort(); /* never resumed */
}

void describe_deadlock()
{
    unsigned at_block = 0, exited = 0, at_warp = 0;
    std::string warps;
    for (unsigned i = 0; i < G.nthreads; i++) {
        const int s = G.threads[i].state;
        at_block += s == WAIT_BLOCK;
        exited += s == EXITED;
        at_warp += s == WAIT_WARP;
    }
    for (size_t w = 0; w < G.warps.size(); w++)
        for (int p = 0; p < 2; p++)
            if (G.warps[w].arrived[p]) {
                char line[200];
                snprintf(line, sizeof line,
                         "; warp %zu: lanes 0x%08x wait at %s with mask 0x%08x, lanes 0x%08x "
                         "of it never came", w, G.warps[w].arrived[p], KIND_NAME[G.warps[w].kind[p]],
                         G.warps[w].mask[p],
                         G.warps[w].mask[p] & G.warps[w].present & ~G.warps[w].arrived[p]);
                warps += line;
            }
    fault_sched("a barrier cannot complete: of %u threads, %u wait at __syncthreads, %u at warp "
                "collectives, %u have returned (a barrier in divergent code, or after some "
                "threads returned)%s",
                G.nthreads, at_block, at_warp, exited, warps.c_str());
}

bool run_block(uint3 idx, uint64_t launch_no, uint64_t block_no)
{
    G.blk.idx = idx;
    if (G.smem)
        memset(G.smem_buf, 0xff, G.smem); /* NaN as fp32 and bf16: unwritten reads show */
    make_order(launch_no, block_no);
    memset(G.ready, 0, sizeof G.ready);
    for (unsigned i = 0; i < G.nthreads; i++) {
        emu_thread &t = G.threads[i];
        t.collectives = 0;
        t.pending.clear();
        t.groups.clear();
        t.committed = 0;
        if (!fiber_start(&t.ctx, (int)i, thread_main, &t)) {
            fault_sched("cannot map the stack of thread %u", i);
            return false;
        }
        set_state(&t, RUNNABLE);
    }
    for (emu_warp &w : G.warps)
        w.arrived[0] = w.arrived[1] = 0;
    G.bar_arrived = 0;
    G.alive = G.nthreads;
    /* the threads hand over to each other (yield); control comes back here when the
     * block is done, stuck, or faulted */
    self = next_ready();
    fiber_switch(&G.sched, &static_cast<emu_thread *>(self)->ctx);
    self = NULL;
    if (G.faulted)
        return false;
    if (G.alive) {
        describe_deadlock();
        return false;
    }
    return true;
}

cudaError_t check_launch(const void *kernel, dim3 grid, dim3 dim, size_t smem, cudaStream_t st)
{
    if (sticky_error() != cudaSuccess)
        return sticky_error();
    if (!stream_valid(st))
        return cudaErrorInvalidResourceHandle;
    /* CUDA C++ Programming Guide, "Features and Technical Specifications", cc 9.0 */
    const uint64_t threads = (uint64_t)dim.x * dim.y * dim.z;
    if (!dim.x || !dim.y || !dim.z || dim.x > 1024 || dim.y > 1024 || dim.z > 64 ||
        threads > DEV_MAX_THREADS)
        return cudaErrorInvalidConfiguration;
    if (!grid.x || !grid.y || !grid.z || grid.x > 0x7fffffffu || grid.y > 65535 ||
        grid.z > 65535)
        return cudaErrorInvalidConfiguration;
    if (smem > smem_limit(kernel))
        return cudaErrorInvalidConfiguration;
    return cudaSuccess;
}

void setup(const char *name, dim3 grid, dim3 dim, size_t smem, entry_fn entry, void *args)
{
    if (G.threads.empty()) {
        G.threads.resize(DEV_MAX_THREADS);
        G.smem_buf = (unsigned char *)aligned_alloc(128, DEV_SMEM_OPTIN);
        if (!G.smem_buf) {
            fprintf(stderr, "pt_emu: out of host memory for shared memory\n");
            abort();
        }
    }
    G.name = name;
    G.grid = grid;
    G.dim = dim;
    G.smem = smem;
    G.entry = entry;
    G.args = args;
    G.faulted = false;
    G.fault.clear();
    G.nthreads = dim.x * dim.y * dim.z;
    G.blk.dim = dim;
    G.blk.grid = grid;
    G.blk.smem = G.smem_buf;
    for (unsigned i = 0; i < G.nthreads; i++) {
        emu_thread &t = G.threads[i];
        t.idx = uint3{i % dim.x, i / dim.x % dim.y, i / (dim.x * dim.y)};
        t.linear = i;
        t.lane = i % 32;
        t.warp = i / 32;
    }
    G.warps.resize((G.nthreads + 31) / 32);
    for (size_t w = 0; w < G.warps.size(); w++) {
        const unsigned lanes = G.nthreads - (unsigned)w * 32;
        G.warps[w].present = lanes >= 32 ? 0xffffffffu : (1u << lanes) - 1u;
    }
}

/* ---- Warp collectives ---------------------------------------------------------------------- */

exchange *warp_enter(emu_thread *t, unsigned mask, int kind)
{
    emu_warp *w = &G.warps[t->warp];
    if (!(mask >> t->lane & 1u))
        fault_here("thread %u (warp %u lane %u) calls %s with mask 0x%08x, which leaves it out",
                   t->linear, t->warp, t->lane, KIND_NAME[kind], mask);
    const unsigned p = t->collectives++ & 1u;
    if (!w->arrived[p]) {
        w->mask[p] = mask;
        w->kind[p] = kind;
    } else if (w->mask[p] != mask || w->kind[p] != kind) {
        fault_here("warp %u: lane %u calls %s with mask 0x%08x while lanes 0x%08x wait at %s "
                   "with mask 0x%08x", t->warp, t->lane, KIND_NAME[kind], mask, w->arrived[p],
                   KIND_NAME[w->kind[p]], w->mask[p]);
    }
    t->parity = p;
    return &w->slot[p];
}

/* Arrives at the collective entered last; the lane completing it runs complete (which
 * sees every participating lane's inputs) before anyone reads a result. */
void warp_wait(emu_thread *t, void (*complete)(exchange *x, uint32_t lanes))
{
    emu_warp *w = &G.warps[t->warp];
    const unsigned p = t->parity;
    w->arrived[p] |= 1u << t->lane;
    set_state(t, WAIT_WARP);
    const uint32_t lanes = w->mask[p] & w->present;
    if (w->arrived[p] == lanes) {
        if (complete)
            complete(&w->slot[p], lanes);
        w->arrived[p] = 0;
        for (unsigned l = 0; l < 32; l++)
            if (lanes >> l & 1u)
                set_state(&G.threads[t->warp * 32 + l], RUNNABLE);
    }
    yield(t);
}

void need_full_warp(uint32_t lanes, const char *what)
{
    if (lanes != 0xffffffffu)
        fault_here("%s needs all 32 lanes of the warp, got lanes 0x%08x", what, lanes);
}

uint32_t pack_b16(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

const uint16_t *ldmatrix_rows(exchange *x, int m, int r)
{
    const uint16_t *p;
    memcpy(&p, x->in[8 * m + r], sizeof p);
    return p;
}

void ldmatrix_check(exchange *x, uint32_t lanes)
{
    need_full_warp(lanes, "ldmatrix");
    for (int l = 0; l < 32; l++)
        if ((uintptr_t)ldmatrix_rows(x, l / 8, l % 8) % 16)
            fault_here("ldmatrix: lane %d's row address %p is not 16-byte aligned", l,
                       (const void *)ldmatrix_rows(x, l / 8, l % 8));
}

void ldmatrix_complete(exchange *x, uint32_t lanes)
{
    ldmatrix_check(x, lanes);
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, c = 2 * (l % 4);
        for (int m = 0; m < 4; m++) {
            const uint16_t *row = ldmatrix_rows(x, m, g);
            x->out[l][m] = pack_b16(row[c], row[c + 1]);
        }
    }
}

void ldmatrix_trans_complete(exchange *x, uint32_t lanes)
{
    ldmatrix_check(x, lanes);
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, c = 2 * (l % 4);
        for (int m = 0; m < 4; m++)
            x->out[l][m] = pack_b16(ldmatrix_rows(x, m, c)[g], ldmatrix_rows(x, m, c + 1)[g]);
    }
}

float bf16_lo(uint32_t v) { return bit_cast<float>(v << 16); }
float bf16_hi(uint32_t v) { return bit_cast<float>(v & 0xffff0000u); }
float as_float(uint32_t v) { return bit_cast<float>(v); }
uint32_t float_bits(float f) { return bit_cast<uint32_t>(f); }

/* in[l] = a[0..3], b0, b1, c[0..3] of lane l; the layouts of pt_emu.h */
void mma_complete(exchange *x, uint32_t lanes)
{
    need_full_warp(lanes, "mma.sync");
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        const uint32_t *in = x->in[l];
        for (int h = 0; h < 2; h++) { /* h = 1: columns (k) 8 further */
            A[g][2 * t + 8 * h] = bf16_lo(in[2 * h]);
            A[g][2 * t + 1 + 8 * h] = bf16_hi(in[2 * h]);
            A[g + 8][2 * t + 8 * h] = bf16_lo(in[2 * h + 1]);
            A[g + 8][2 * t + 1 + 8 * h] = bf16_hi(in[2 * h + 1]);
            B[2 * t + 8 * h][g] = bf16_lo(in[4 + h]);
            B[2 * t + 1 + 8 * h][g] = bf16_hi(in[4 + h]);
        }
        C[g][2 * t] = as_float(in[6]);
        C[g][2 * t + 1] = as_float(in[7]);
        C[g + 8][2 * t] = as_float(in[8]);
        C[g + 8][2 * t + 1] = as_float(in[9]);
    }
    float D[16][8];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 8; j++) {
            float s = 0.0f;
            for (int k = 0; k < 16; k++)
                s += A[i][k] * B[k][j];
            D[i][j] = s + C[i][j];
        }
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, t = l % 4;
        x->out[l][0] = float_bits(D[g][2 * t]);
        x->out[l][1] = float_bits(D[g][2 * t + 1]);
        x->out[l][2] = float_bits(D[g + 8][2 * t]);
        x->out[l][3] = float_bits(D[g + 8][2 * t + 1]);
    }
}

} // namespace

/* ---- Device functions (pt_emu.h) ------------------------------------------------------------ */

void syncthreads()
{
    emu_thread *t = cur();
    set_state(t, WAIT_BLOCK);
    if (++G.bar_arrived == G.nthreads) {
        G.bar_arrived = 0;
        for (unsigned i = 0; i < G.nthreads; i++)
            if (G.threads[i].state == WAIT_BLOCK)
                set_state(&G.threads[i], RUNNABLE);
    }
    yield(t);
}

void syncwarp(unsigned mask)
{
    emu_thread *t = cur();
    warp_enter(t, mask, K_SYNCWARP);
    warp_wait(t, NULL);
}

uint64_t shfl_bits(unsigned mask, uint64_t v, int mode, int arg, int width)
{
    emu_thread *t = cur();
    if (width < 1 || width > 32 || (width & (width - 1)))
        fault_here("a shuffle of width %d (a power of two up to 32)", width);
    exchange *x = warp_enter(t, mask, K_SHFL);
    memcpy(x->in[t->lane], &v, sizeof v);
    warp_wait(t, NULL);
    /* CUDA C++ Programming Guide, "Warp Shuffle Functions": a source outside the
     * lane's width-segment gives the lane its own value (xor may reach down, not up) */
    const unsigned lane = t->lane, base = lane & ~(unsigned)(width - 1);
    unsigned src = lane;
    switch (mode) {
    case SHFL_IDX:
        src = base + ((unsigned)arg & (unsigned)(width - 1));
        break;
    case SHFL_UP:
        if (arg >= 0 && lane - base >= (unsigned)arg)
            src = lane - (unsigned)arg;
        break;
    case SHFL_DOWN:
        if (arg >= 0 && lane - base + (unsigned)arg < (unsigned)width)
            src = lane + (unsigned)arg;
        break;
    default:
        src = lane ^ (unsigned)arg;
        if (src >= base + (unsigned)width)
            src = lane;
        break;
    }
    const uint32_t lanes = mask & G.warps[t->warp].present;
    if (!(lanes >> src & 1u))
        fault_here("warp %u: lane %u shuffles from lane %u, which is not in the shuffle (mask "
                   "0x%08x)", t->warp, lane, src, mask);
    uint64_t r;
    memcpy(&r, x->in[src], sizeof r);
    return r;
}

unsigned vote(unsigned mask, int pred, int mode)
{
    emu_thread *t = cur();
    exchange *x = warp_enter(t, mask, K_VOTE);
    x->in[t->lane][0] = pred != 0;
    warp_wait(t, NULL);
    const uint32_t lanes = mask & G.warps[t->warp].present;
    unsigned ballot = 0;
    for (unsigned l = 0; l < 32; l++)
        if ((lanes >> l & 1u) && x->in[l][0])
            ballot |= 1u << l;
    if (mode == VOTE_ANY)
        return ballot != 0;
    if (mode == VOTE_ALL)
        return ballot == lanes;
    return ballot;
}

void cp_async(void *dst, const void *src, int cp_bytes, int src_bytes)
{
    emu_thread *t = cur();
    if (cp_bytes != 4 && cp_bytes != 8 && cp_bytes != 16)
        fault_here("cp.async of %d bytes (4, 8 or 16)", cp_bytes);
    if (src_bytes < 0 || src_bytes > cp_bytes)
        fault_here("cp.async: src-size %d outside 0..%d", src_bytes, cp_bytes);
    if ((uintptr_t)dst % (unsigned)cp_bytes || (src_bytes && (uintptr_t)src % (unsigned)cp_bytes))
        fault_here("cp.async of %d bytes from %p to %p: addresses must be %d-byte aligned",
                   cp_bytes, src, dst, cp_bytes);
    const copy_op c{dst, src, cp_bytes, src_bytes};
    /* when the data lands is part of the schedule: at once in forward order (a missing
     * barrier before the buffer is overwritten shows), at the covering wait in reverse
     * order (a read before the wait shows), either, per copy, when shuffled */
    if (order_mode == ORDER_FORWARD || (order_mode == ORDER_SHUFFLE && (splitmix64(&G.rng) & 1)))
        land(c);
    else
        t->pending.push_back(c);
}

void cp_async_commit()
{
    emu_thread *t = cur();
    const size_t n = t->pending.size() - t->committed;
    t->groups.push_back(n);
    t->committed += n;
}

void cp_async_wait(int n)
{
    emu_thread *t = cur();
    if (n < 0)
        fault_here("cp.async.wait_group %d", n);
    while (t->groups.size() > (size_t)n) {
        const size_t g = t->groups.front();
        t->groups.pop_front();
        complete_copies(t, g);
        t->committed -= g;
    }
}

void ldmatrix_x4(uint32_t r[4], const void *p, bool trans)
{
    emu_thread *t = cur();
    exchange *x = warp_enter(t, 0xffffffffu, trans ? K_LDMATRIX_T : K_LDMATRIX);
    memcpy(x->in[t->lane], &p, sizeof p);
    warp_wait(t, trans ? ldmatrix_trans_complete : ldmatrix_complete);
    memcpy(r, x->out[t->lane], 4 * sizeof(uint32_t));
}

void mma_m16n8k16_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    emu_thread *t = cur();
    exchange *x = warp_enter(t, 0xffffffffu, K_MMA);
    uint32_t *in = x->in[t->lane];
    memcpy(in, a, 4 * sizeof(uint32_t));
    in[4] = b0;
    in[5] = b1;
    for (int i = 0; i < 4; i++)
        in[6 + i] = float_bits(c[i]);
    warp_wait(t, mma_complete);
    for (int i = 0; i < 4; i++)
        c[i] = as_float(x->out[t->lane][i]);
}

/* ---- Launches ------------------------------------------------------------------------------ */

void run(const void *kernel, const char *name, dim3 grid, dim3 dim, size_t smem,
         cudaStream_t stream, entry_fn entry, void *args)
{
    std::lock_guard<std::mutex> lock(launch_mutex);
    const cudaError_t e = check_launch(kernel, grid, dim, smem, stream);
    if (e != cudaSuccess) {
        set_error(e);
        return;
    }
    read_env_once();
    if (trace)
        fprintf(stderr, "pt_emu: launch %s grid (%u,%u,%u) block (%u,%u,%u) smem %zu\n", name,
                grid.x, grid.y, grid.z, dim.x, dim.y, dim.z, smem);
    setup(name, grid, dim, smem, entry, args);
    const uint64_t launch_no = launch_count++;
    block = &G.blk;
    uint64_t block_no = 0;
    for (unsigned z = 0; z < grid.z && !G.faulted; z++)
        for (unsigned y = 0; y < grid.y && !G.faulted; y++)
            for (unsigned x = 0; x < grid.x; x++, block_no++)
                if (!run_block(uint3{x, y, z}, launch_no, block_no))
                    break;
    block = NULL;
    self = NULL;
    if (G.faulted) {
        char sched[96];
        snprintf(sched, sizeof sched, " [PT_EMU_ORDER=%s PT_EMU_SEED=%" PRIu64 "]",
                 ORDER_NAME[order_mode], order_seed);
        last_report = G.fault + sched;
        fprintf(stderr, "pt_emu: %s\n", last_report.c_str());
        set_sticky(cudaErrorLaunchFailure);
    }
}

/* ---- Test controls (pt_emu_test.h) --------------------------------------------------------- */

void set_schedule(int order, uint64_t seed)
{
    std::lock_guard<std::mutex> lock(launch_mutex);
    read_env_once(); /* PT_EMU_TRACE still counts */
    order_mode = order >= ORDER_FORWARD && order <= ORDER_SHUFFLE ? order : ORDER_SHUFFLE;
    order_seed = seed;
}

const char *last_fault() { return last_report.c_str(); }

} // namespace pt_emu
