/*
 * The transformer executed from the planner's op lists. pt_ops_layer, pt_ops_embed
 * and pt_ops_head (planner/ops.c) say which ops a micro-batch runs and in what
 * order, under which cost-table keys; this file maps each op, by its name, to its
 * kernel call on this model's buffers, and times it into the trace under the same
 * key. So the runtime cannot run a layer differently from what the planner priced:
 * an op the planner lists and this file does not know is an error, not a skip.
 *
 * Backward passes accumulate: kernels add into gradients (kernels.h), the residual
 * stream's gradient dres flows through each layer in place (a norm's backward adds
 * its input gradient into dres, which is exactly the residual connection's), and
 * scratch buffers are zeroed where their accumulation starts.
 */
#include "model_internal.h"

#include <math.h>
#include <string.h>

/* ---- Sizes ------------------------------------------------------------------------------ */

typedef struct {
    int64_t b, s, T;          /* micro-batch, sequence on this rank (s/cp), tokens */
    int64_t R;                /* rows of the residual stream here: T, or T/t with sp */
    int64_t sc;               /* cp: one sequence chunk, s/(2·cp); s without cp */
    int h, a, kh, d, f, v;    /* per rank: a, kh, f and v already divided by t */
    int t, tr, cp, cr;        /* tp size and rank, cp size and rank */
    int kv_share;             /* tp ranks sharing one KV head (tp > k), else 1 */
    bool sp;
} dims;

static dims dims_of(const pt_net *n)
{
    const pt_model *m = &n->spec;
    const pt_layout *l = &n->layout;
    int t = l->tp;
    pt_rank_shape r = pt_rank_shape_of(m, l); /* the sizes the planner priced */
    dims d = {.b = l->mbs, .s = m->seq / l->cp, .T = r.tokens, .R = r.rows, .h = (int)m->hidden,
              .a = (int)r.heads, .kh = (int)r.kv_heads, .d = (int)r.head_dim, .f = (int)r.ffn,
              .v = (int)r.vocab, .t = t, .tr = n->tp_rank, .cp = l->cp, .cr = n->cp_rank,
              .sp = l->sp && t > 1};
    d.kv_share = pt_kv_head_copies(m, t);
    d.sc = d.cp > 1 ? d.s / 2 : d.s;
    return d;
}

int64_t pt_net_act_elems(const pt_net *n)
{
    dims d = dims_of(n);
    return d.R * d.h;
}

int64_t pt_net_p2p_bytes(const pt_net *n)
{
    dims d = dims_of(n);
    int64_t ab = (int64_t)pt_kdtype_bytes(n->kn->act_dtype);
    int64_t stage = d.R * d.h * ab;                      /* a stage boundary's activations */
    int64_t ring = d.cp > 1 ? 4 * d.T * d.kh * d.d * ab : 0; /* K, V and their gradients */
    return stage > ring ? stage : ring;
}

/* Context parallelism with causal load balancing (Megatron-LM's context parallel,
 * Liu et al. 2023's ring attention): the sequence is cut into 2·cp chunks and cp
 * rank i holds chunks i and 2·cp-1-i, so every rank gets the same share of the
 * causal triangle. Position of the first token of this rank's piece p (0 or 1). */
static int64_t piece_pos(const dims *d, int cr, int piece)
{
    if (d->cp == 1)
        return 0;
    return (piece == 0 ? cr : 2 * d->cp - 1 - cr) * d->sc;
}

static int pieces(const dims *d)
{
    return d->cp > 1 ? 2 : 1;
}

/* A rank's tokens are laid out chunk by chunk: rows [p·b·sc, (p+1)·b·sc) are chunk p
 * of each of the b sequences, (b, sc) — without cp, simply (b, s). So every op over a
 * chunk is one call on b sequences. */
void pt_net_cp_slice(const pt_net *n, const int32_t *full, int32_t *local)
{
    dims d = dims_of(n);
    int64_t s = n->spec.seq;
    for (int p = 0; p < pieces(&d); p++)
        for (int64_t bi = 0; bi < d.b; bi++)
            memcpy(local + (p * d.b + bi) * d.sc, full + bi * s + piece_pos(&d, d.cr, p),
                   (size_t)d.sc * sizeof *local);
}

/* ---- Allocation of slots and scratch ---------------------------------------------------- */

/* The kernels' own temporaries, sized once for the largest op of this rank (kernels.h:
 * reserve), so that no op allocates or waits inside a step; and the device scalar of
 * the gradient norm. Every op runs on at most T rows (validation and sampling take the
 * micro-batch's shape); the widest biased or normalised rows are the fused QKV, the
 * MLP's (twice f for SwiGLU's gate and up) and the vocabulary slice. The optimizer's
 * tensors number at most one per parameter plus one per range cut (a ZeRO segment or
 * bucket share cuts at most one parameter in two). */
static int reserve_kernels(pt_net *n, const dims *d, pt_err *err)
{
    pt_kernels *kn = n->kn;
    if (!(n->gsq = kn->alloc(kn, 2 * sizeof *n->gsq)))
        return pt_err_set(err, "out of memory");
    n->lsum = n->gsq + 1;
    n->bytes += (int64_t)(2 * sizeof *n->gsq);
    if (!kn->reserve)
        return 0;
    int64_t cols = d->h, qkv = (int64_t)(d->a + 2 * d->kh) * d->d;
    cols = qkv > cols ? qkv : cols;
    cols = 2 * (int64_t)d->f > cols ? 2 * (int64_t)d->f : cols;
    cols = d->v > cols ? d->v : cols;
    int64_t ranges = n->zero ? pt_zero_segments(n) : n->n_z1 > 0 ? n->n_z1 : 1;
    /* attention_bwd's calls: (b, sc, sc), sc being s without cp and a chunk with it */
    pt_k_scratch_shape sh = {.rows = d->T, .cols = cols, .heads = d->a, .kv_heads = d->kh,
                             .head_dim = d->d, .attn_batch = (int)d->b,
                             .attn_seq = (int)d->sc, .vocab_rows = d->v,
                             .adamw_tensors = (int)(n->n_param + ranges)};
    /* the backend's, like cuBLASLt's workspace: not in the model's bytes, which the
     * memory model predicts */
    if (kn->reserve(kn, &sh))
        return pt_err_set(err, "the %s backend's temporaries: %s", kn->name, kn->err);
    return 0;
}

/* Hands out consecutive pieces of one allocation (or, with base NULL, only counts; a
 * count past half the address space sets `overflow`: the plan's sizes come from a file
 * a user may have edited, so the sums are checked rather than trusted). */
typedef struct {
    char *base;
    size_t used;
    bool overflow;
} carve;

static float *take(carve *c, int64_t elems, size_t elem_bytes)
{
    int64_t bytes;
    if (c->overflow || elems < 0 || !pt_mul64(elems, (int64_t)elem_bytes, &bytes) ||
        !pt_add64(bytes, 63, &bytes) || (uint64_t)bytes > SIZE_MAX / 2 - c->used) {
        c->overflow = true;
        return NULL;
    }
    float *p = c->base ? (float *)(c->base + c->used) : NULL;
    c->used += (size_t)bytes & ~(size_t)63;
    return p;
}

/* The buffer list this rank carves (planner/buffers.c, which the memory model sums). */
static void buffers_of(const pt_net *n, pt_buffers *B)
{
    pt_buffers_of(&n->spec, &n->layout, (int)pt_kdtype_bytes(n->kn->act_dtype),
                  n->spec.dropout || n->dropout > 0, B);
}

/* Buffer b of the list, or NULL when the list has none (absent in this layout). */
static float *take_buf(carve *c, const pt_buffers *B, pt_buf b)
{
    if (B->elems[b] == 0)
        return NULL;
    return take(c, B->elems[b], (size_t)B->bytes[b]);
}

static void carve_layer(carve *c, const pt_buffers *B, pt_layer_acts *L)
{
    L->ln1 = take_buf(c, B, PT_BUF_LN1);
    L->ln1_mean = take_buf(c, B, PT_BUF_LN1_MEAN);
    L->ln1_rstd = take_buf(c, B, PT_BUF_LN1_RSTD);
    L->q = take_buf(c, B, PT_BUF_Q);
    L->k = take_buf(c, B, PT_BUF_K);
    L->v = take_buf(c, B, PT_BUF_V);
    L->att = take_buf(c, B, PT_BUF_ATT);
    L->lse = take_buf(c, B, PT_BUF_LSE);
    L->x2 = take_buf(c, B, PT_BUF_X2);
    L->ln2 = take_buf(c, B, PT_BUF_LN2);
    L->ln2_mean = take_buf(c, B, PT_BUF_LN2_MEAN);
    L->ln2_rstd = take_buf(c, B, PT_BUF_LN2_RSTD);
    L->gate = take_buf(c, B, PT_BUF_GATE);
    L->up = take_buf(c, B, PT_BUF_UP);
    L->act = take_buf(c, B, PT_BUF_ACT);
}

/* Lays out one slot: one chunk's layers; with full recomputation all layers share one
 * set of views (pt_buffers_slot counts the same). */
static void carve_slot(carve *c, const pt_net *n, pt_acts *A)
{
    pt_buffers B;
    buffers_of(n, &B);
    int64_t L = n->chunk_layers;
    A->tokens = (int32_t *)take_buf(c, &B, PT_BUF_TOKENS);
    A->targets = (int32_t *)take_buf(c, &B, PT_BUF_TARGETS);
    for (int64_t l = 0; l < L + 1; l++) /* the chunk's input and its layers' outputs */
        A->x[l] = take_buf(c, &B, PT_BUF_X);
    bool shared = n->layout.recompute == PT_RECOMPUTE_FULL;
    for (int64_t l = 0; l < L; l++) {
        if (shared && l > 0)
            A->layer[l] = A->layer[0];
        else
            carve_layer(c, &B, &A->layer[l]);
    }
}

static void carve_head(carve *c, const pt_net *n, pt_head_acts *H)
{
    pt_buffers B;
    buffers_of(n, &B);
    H->lnf = take_buf(c, &B, PT_BUF_LNF);
    H->lnf_mean = take_buf(c, &B, PT_BUF_LNF_MEAN);
    H->lnf_rstd = take_buf(c, &B, PT_BUF_LNF_RSTD);
    H->logits = take_buf(c, &B, PT_BUF_LOGITS);
    H->losses = take_buf(c, &B, PT_BUF_LOSSES);
    H->vmask = B.elems[PT_BUF_VMASK] ? take_buf(c, &B, PT_BUF_VMASK) : NULL;
}

/* Scratch the layout needs: gathers and reduce-scatters with sp, dropout's branch
 * gradient, vocab-parallel loss statistics with tp, the K/V ring with cp. Without sp
 * the gathered views are the buffers themselves. */
static void carve_scratch(carve *c, const pt_net *n, pt_scratch *S)
{
    pt_buffers B;
    buffers_of(n, &B);
    S->dres = take_buf(c, &B, PT_BUF_DRES);
    S->dln = take_buf(c, &B, PT_BUF_DLN);
    S->dlns = B.elems[PT_BUF_DLNS] ? take_buf(c, &B, PT_BUF_DLNS) : S->dln;
    S->gath = take_buf(c, &B, PT_BUF_GATH);
    S->gdres = B.elems[PT_BUF_GDRES] ? take_buf(c, &B, PT_BUF_GDRES) : S->dres;
    S->rout = take_buf(c, &B, PT_BUF_ROUT);
    S->ddrop = take_buf(c, &B, PT_BUF_DDROP);
    /* the weight gradients of q, k and v read (dq, dk, dv) without RoPE, (dqr, dkr, dv)
     * with it: each set end to end (qkv_shared) */
    S->dq = take_buf(c, &B, PT_BUF_DQ);
    S->dk = take_buf(c, &B, PT_BUF_DK);
    S->dqr = take_buf(c, &B, PT_BUF_DQR);
    S->dkr = take_buf(c, &B, PT_BUF_DKR);
    S->dv = take_buf(c, &B, PT_BUF_DV);
    S->datt = take_buf(c, &B, PT_BUF_DATT);
    S->dgate = take_buf(c, &B, PT_BUF_DGATE);
    S->dup = take_buf(c, &B, PT_BUF_DUP);
    S->dact = take_buf(c, &B, PT_BUF_DACT);
    S->ce = take_buf(c, &B, PT_BUF_CE);
    S->dnorm = take_buf(c, &B, PT_BUF_DNORM);
    S->dkv = take_buf(c, &B, PT_BUF_DKV);
    S->ring[0] = take_buf(c, &B, PT_BUF_RING0);
    S->ring[1] = take_buf(c, &B, PT_BUF_RING1);
    S->part = take_buf(c, &B, PT_BUF_PART);
    S->part_lse = take_buf(c, &B, PT_BUF_PART_LSE);
}

/* The widest per-token row any buffer has (values). */
static int64_t widest_row(const dims *d)
{
    int64_t w = d->h;
    int64_t rows[] = {(int64_t)d->a * d->d, (int64_t)d->kh * d->d, d->f, d->v, 4};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        w = rows[i] > w ? rows[i] : w;
    return w;
}

/* Whether each buffer's size can be computed: carve_slot and carve_scratch take at most
 * tokens x the widest row (or b·a·s, which is no larger) values of at most 8 bytes per
 * buffer, products they form in int64 before take checks the sums. */
static bool buffer_sizes_fit(const dims *d)
{
    int64_t row, lse;
    return pt_prod64((int64_t[]){d->T, widest_row(d), 8}, 3, &row) &&
           pt_prod64((int64_t[]){d->b, d->a, d->s}, 3, &lse) && lse <= d->T * widest_row(d);
}

static int too_large(pt_err *err, const pt_net *n, const dims *d, int slots)
{
    return pt_err_set(err, "the activations of %d micro-batch(es) of %lld tokens (widest row "
                           "%lld values, %lld layers) are more bytes than this machine can "
                           "address", slots, (long long)d->T, (long long)widest_row(d),
                      (long long)n->n_layers);
}

static int alloc_slot(pt_net *n, const dims *d, int slots, pt_acts **out, pt_err *err)
{
    pt_acts *A = calloc(1, sizeof *A);
    int64_t L = n->chunk_layers;
    *out = NULL;
    if (!A || !(A->x = calloc((size_t)(L + 1), sizeof *A->x)) ||
        !(A->layer = calloc((size_t)L, sizeof *A->layer))) {
        if (A)
            free(A->x);
        free(A);
        return pt_err_set(err, "out of memory");
    }
    carve c = {0};
    carve_slot(&c, n, A);
    if (c.overflow) {
        free(A->x);
        free(A->layer);
        free(A);
        return too_large(err, n, d, slots);
    }
    n->bytes += (int64_t)c.used;
    c.base = n->kn->alloc(n->kn, c.used);
    if (!c.base) {
        free(A->x);
        free(A->layer);
        free(A);
        return pt_err_set(err, "out of memory for the activations of %d micro-batches of "
                               "%lld tokens", slots, (long long)d->T);
    }
    A->mem = c.base;
    c.used = 0;
    carve_slot(&c, n, A);
    *out = A;
    return 0;
}

/* The head's bias over this rank's slice of the padded vocabulary (PT_BUF_VMASK, one
 * per head buffer set, as the memory model counts it): 0 for the model's tokens, -inf
 * for the rows pt_vocab_padded adds (GPT-2's 50257 become 50304), so the softmax gives
 * the padding nothing and the loss is the unpadded model's, as a Hugging Face model
 * loaded with --init-from computes it (llm.c's cross-entropy likewise runs over the
 * real vocabulary only). Their logits' gradient is then 0: the padded rows are never
 * trained. Absent when the vocabulary is not padded. */
static int fill_vocab_mask(pt_net *n, const dims *d, pt_head_acts *H, pt_err *err)
{
    if (!H->vmask)
        return 0;
    int64_t real = n->spec.vocab - (int64_t)d->tr * d->v;
    float *host = malloc((size_t)d->v * sizeof *host);
    if (!host)
        return pt_err_set(err, "out of memory for the vocabulary's padding mask");
    for (int64_t i = 0; i < d->v; i++)
        host[i] = i < real ? 0.0f : -INFINITY;
    int rc = pt_net_upload_weights(n->kn, H->vmask, host, d->v, err);
    free(host);
    return rc;
}

static int alloc_head(pt_net *n, const dims *d, pt_head_acts **out, pt_err *err)
{
    pt_head_acts *H = calloc(1, sizeof *H);
    if (!(*out = H))
        return pt_err_set(err, "out of memory");
    carve c = {0};
    carve_head(&c, n, H);
    if (c.overflow)
        return too_large(err, n, d, n->n_head);
    n->bytes += (int64_t)c.used;
    if (!(H->mem = c.base = n->kn->alloc(n->kn, c.used)))
        return pt_err_set(err, "out of memory for the logits of %d micro-batch(es) of %lld "
                               "tokens", n->n_head, (long long)d->T);
    c.used = 0;
    carve_head(&c, n, H);
    return fill_vocab_mask(n, d, H, err);
}

static void free_slot(pt_net *n, pt_acts *A)
{
    if (!A)
        return;
    n->kn->free(n->kn, A->mem);
    free(A->x);
    free(A->layer);
    free(A);
}

static int resolve_params(pt_net *n, pt_err *err);

/* The planner's lists this rank runs: a layer's, the embedding's and the head's (here),
 * each chunk's gradient buckets over its reduced range and the step's end (the engine),
 * the latter from the same parameter counts the simulator gives them (planner/sim.c). */
static int build_op_lists(pt_net *n, const pt_plan *p)
{
    pt_opctx c;
    pt_opctx_init(&c, &n->spec, &n->layout, &p->train, &p->cluster);
    c.tp_rank = n->tp_rank; /* its row-parallel forwards add no bias unless it is rank 0 */
    int rc = 0;
    for (int i = 0; i < 6 && rc == 0; i++) {
        bool bwd = i % 2;
        rc = i < 2 ? pt_ops_layer(&c, bwd, &n->ops[i])
             : i < 4 ? pt_ops_embed(&c, bwd, &n->ops[i])
                     : pt_ops_head(&c, bwd, &n->ops[i]);
    }
    const pt_layout *l = &n->layout;
    int V = l->pp * l->vp;
    pt_step_params sp = {.params = (double)n->n_elems};
    for (int ch = 0; ch < l->vp && rc == 0; ch++) {
        int vs = ch * l->pp + n->stage;
        double chunk = (double)(n->chunk_end[ch] - n->chunk_begin[ch]);
        rc = pt_ops_grad_sync(&c, chunk - pt_step_tied_out(&c, vs, V), n->chunk_layers,
                              &n->ops_sync[ch]);
        if (vs == 0 || vs == V - 1)
            sp.tied = pt_step_tied(&c, vs, V);
    }
    if (n->stage == 0)
        sp.edge += (double)pt_params_embedding(&n->spec, l->tp);
    if (n->stage == l->pp - 1)
        sp.edge += (double)pt_params_head(&n->spec, l->tp, l->pp);
    return rc ? rc : pt_ops_optimizer(&c, &sp, &n->ops_step);
}

int pt_net_alloc_runtime(pt_net *n, const pt_plan *p, int slots, pt_err *err)
{
    dims d = dims_of(n);
    if (n->dropout > 0 && (!n->kn->dropout_forward || !n->kn->dropout_backward))
        return pt_err_set(err, "dropout %g: the %s backend has no dropout kernels",
                          (double)n->dropout, n->kn->name);
    if ((d.t > 1 || d.cp > 1) && !n->comm)
        return pt_err_set(err, "internal: tp = %d, cp = %d needs a communicator", d.t, d.cp);
    if (d.sp && d.T % d.t)
        return pt_err_set(err, "sequence parallelism: %lld tokens per micro-batch do not "
                               "split over tp = %d", (long long)d.T, d.t);
    if (d.cp > 1 && n->spec.seq % (2 * d.cp))
        return pt_err_set(err, "context parallelism: sequence %lld does not split into "
                               "2·cp = %d chunks", (long long)n->spec.seq, 2 * d.cp);
    pt_buffers B;
    buffers_of(n, &B);
    if (B.overflow || !buffer_sizes_fit(&d))
        return too_large(err, n, &d, slots);
    if (build_op_lists(n, p))
        return pt_err_set(err, "out of memory building the op lists");
    if (resolve_params(n, err))
        return -1;
    /* evaluation runs each of the rank's chunks in a slot of its own */
    if (slots < n->layout.vp)
        slots = n->layout.vp;
    int n_mc = (int)(n->layout.n_micro * n->layout.vp);
    n->slot = calloc((size_t)slots, sizeof *n->slot);
    n->slot_busy = calloc((size_t)slots, sizeof *n->slot_busy);
    n->slot_map = malloc((size_t)n_mc * sizeof *n->slot_map);
    pt_scratch *S = calloc(1, sizeof *S);
    if (!n->slot || !n->slot_busy || !n->slot_map || !S) {
        free(S);
        return pt_err_set(err, "out of memory");
    }
    n->scratch = S;
    n->n_slots = slots;
    pt_net_slots_reset(n);
    for (int i = 0; i < slots; i++)
        if (alloc_slot(n, &d, slots, &n->slot[i], err))
            return -1;
    if (n->stage == n->layout.pp - 1) { /* the head's buffers */
        pt_sched s;
        if (pt_sched_build(n->layout.schedule, n->layout.pp, n->layout.vp,
                           (int)n->layout.n_micro, &s, err))
            return -1;
        n->n_head = pt_sched_peak_in_flight_chunk(&s, n->stage, n->layout.vp - 1);
        pt_sched_free(&s);
        n->n_head = n->n_head < 1 ? 1 : n->n_head;
        if (!(n->head = calloc((size_t)n->n_head, sizeof *n->head)))
            return pt_err_set(err, "out of memory");
        for (int i = 0; i < n->n_head; i++)
            if (alloc_head(n, &d, (pt_head_acts **)&n->head[i], err))
                return -1;
    }
    carve c = {0};
    carve_scratch(&c, n, S);
    if (c.overflow)
        return too_large(err, n, &d, slots);
    n->bytes += (int64_t)c.used;
    if (!(c.base = n->kn->alloc(n->kn, c.used)))
        return pt_err_set(err, "out of memory for gradient scratch (%zu bytes)", c.used);
    S->mem = c.base;
    c.used = 0;
    carve_scratch(&c, n, S);
    return reserve_kernels(n, &d, err);
}

void pt_net_free_runtime(pt_net *n)
{
    for (int i = 0; i < n->n_slots; i++)
        free_slot(n, n->slot[i]);
    free(n->slot);
    free(n->slot_busy);
    free(n->slot_map);
    for (int i = 0; n->head && i < n->n_head; i++) {
        pt_head_acts *H = n->head[i];
        if (H && n->kn)
            n->kn->free(n->kn, H->mem);
        free(H);
    }
    free(n->head);
    n->head = NULL;
    n->slot_busy = NULL;
    n->slot_map = NULL;
    pt_scratch *S = n->scratch;
    if (S && n->kn)
        n->kn->free(n->kn, S->mem);
    free(S);
    if (n->kn)
        n->kn->free(n->kn, n->gsq);
    n->gsq = n->lsum = NULL;
    free(n->adam);
    n->adam = NULL;
    n->adam_cap = 0;
    for (int i = 0; i < 6; i++)
        pt_oplist_free(&n->ops[i]);
    for (int i = 0; i < 64; i++)
        pt_oplist_free(&n->ops_sync[i]);
    pt_oplist_free(&n->ops_step);
    free(n->pref);
    n->pref = NULL;
    n->slot = NULL;
    n->scratch = NULL;
}

/* ---- The slot pool ----------------------------------------------------------------------- */

void pt_net_slots_reset(pt_net *n)
{
    for (int64_t i = 0; n->slot_map && i < n->layout.n_micro * n->layout.vp; i++)
        n->slot_map[i] = -1;
    for (int i = 0; n->slot_busy && i < n->n_slots; i++)
        n->slot_busy[i] = false;
}

static int64_t pair_index(const pt_net *n, int mb, int chunk)
{
    return (int64_t)mb * n->layout.vp + chunk;
}

static bool pair_valid(const pt_net *n, int mb, int chunk)
{
    return mb >= 0 && mb < n->layout.n_micro && chunk >= 0 && chunk < n->layout.vp;
}

int pt_net_slot_of(const pt_net *n, int mb, int chunk)
{
    return pair_valid(n, mb, chunk) ? n->slot_map[pair_index(n, mb, chunk)] : -1;
}

int pt_net_slot_take(pt_net *n, int mb, int chunk, pt_err *err)
{
    if (!pair_valid(n, mb, chunk))
        return pt_err_set(err, "internal: micro-batch %d of chunk %d is outside the step", mb,
                          chunk);
    int have = pt_net_slot_of(n, mb, chunk);
    if (have >= 0)
        return have;
    for (int i = 0; i < n->n_slots; i++)
        if (!n->slot_busy[i]) {
            n->slot_busy[i] = true;
            n->slot_map[pair_index(n, mb, chunk)] = i;
            return i;
        }
    return pt_err_set(err, "internal: all %d activation slots are in use when micro-batch %d "
                           "of chunk %d starts (the schedule keeps more in flight than "
                           "planned)", n->n_slots, mb, chunk);
}

void pt_net_slot_give(pt_net *n, int mb, int chunk)
{
    int s = pt_net_slot_of(n, mb, chunk);
    if (s < 0)
        return;
    n->slot_busy[s] = false;
    n->slot_map[pair_index(n, mb, chunk)] = -1;
}

/* ---- The op context ---------------------------------------------------------------------- */

typedef struct {
    pt_net *n;
    pt_acts *A;
    pt_scratch *S;
    dims d;
    int64_t l;      /* layer (global index, names its parameters), -1 outside */
    int64_t next_l; /* the layer this pass runs next (-1: none): ZeRO-3 prefetches it */
    int64_t li;     /* the layer's index on this rank (its parameters' row) */
    int64_t ai;     /* its index in the chunk's slot (its activations) */
    int64_t xi;     /* index in A->x of the layer's input (ai) */
    pt_head_acts *H; /* the head's buffers of this micro-batch (last stage) */
    float dloss;
    const float *col_in; /* (T, h) input of the next column-parallel GEMMs */
    pt_comm_req *gather; /* tp_overlap: the all-gather into col_in still in flight */
    const float *gather_shard; /* its source: this rank's (R, h) rows */
    pt_err *err;
} ctx;

static const float kEps = 1e-5f;
/* RoPE base: LLaMA 2's 10000 (the model spec does not carry LLaMA 3's 500000 yet). */
static const float kRopeTheta = 10000.0f;

static size_t act_bytes(const ctx *c, int64_t elems)
{
    return (size_t)elems * pt_kdtype_bytes(c->n->kn->act_dtype);
}

/* Element i of a (rows, cols) [act] buffer. */
static float *at_elem(const ctx *c, const float *buf, int64_t i)
{
    return (float *)((const char *)buf + act_bytes(c, i));
}

/* ---- Dropout -------------------------------------------------------------------------------- */

/* Dropout sites of a layer; the embedding's is site 0 of layer -1. */
enum { DROP_EMBED, DROP_ATTN, DROP_MLP };

static uint64_t mix64(uint64_t x)
{
    /* splitmix64's finaliser (Steele et al. 2014) */
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The dropout tensor of one sample's branch: keyed by step, global sample, layer and
 * site; elements inside it by position · h + feature, the sample's own coordinates. */
static uint64_t drop_tensor(const ctx *c, int64_t sample, int site)
{
    uint64_t k = mix64((uint64_t)c->A->step * 0x9E3779B97F4A7C15ull ^ (uint64_t)sample);
    return mix64(k ^ ((uint64_t)(c->l + 1) << 8 | (uint64_t)site));
}

/* Dropout on local token rows [row0, row0 + rows) of a (T, h) tensor laid out from
 * `buf` (which holds row row0 first): forward in place, or backward accumulating
 * the gradient `dout` into `buf`. Rows are cut into runs of consecutive positions of
 * one sample, each one kernel call with its offset in the whole sequence. */
static void dropout_rows(ctx *c, float *buf, const float *dout, int64_t row0, int64_t rows,
                         int site)
{
    pt_kernels *kn = c->n->kn;
    const dims *d = &c->d;
    for (int64_t r = row0; r < row0 + rows;) {
        /* row r is position j of chunk p of sequence bi (pt_net_cp_slice's layout) */
        int p = (int)(r / (d->b * d->sc));
        int64_t bi = r / d->sc % d->b, j = r % d->sc;
        int64_t len = d->sc - j; /* to the end of this chunk */
        if (len > row0 + rows - r)
            len = row0 + rows - r;
        int64_t pos = piece_pos(d, d->cr, p) + j;
        uint64_t id = drop_tensor(c, c->A->first_sample + bi, site);
        float *out = at_elem(c, buf, (r - row0) * d->h);
        if (dout)
            kn->dropout_backward(kn, out, at_elem(c, dout, (r - row0) * d->h), len * d->h,
                                 c->n->dropout, c->n->seed, id, pos * d->h);
        else
            kn->dropout_forward(kn, out, out, len * d->h, c->n->dropout, c->n->seed, id,
                                pos * d->h);
        r += len;
    }
}

static bool dropping(const ctx *c)
{
    return c->n->dropout > 0 && c->A->train;
}

/* First local token row of this rank's residual-stream rows. */
static int64_t own_row0(const ctx *c)
{
    return c->d.sp ? (int64_t)c->d.tr * c->d.R : 0;
}

/* ---- Parameters, resolved once ------------------------------------------------------------- */

/* A parameter's weights (in w, [act]) and its gradient (fp32); NULL when the model has no
 * such parameter (a bias of a model without biases) or this rank does not hold it. */
typedef struct {
    const float *w;
    float *g;
} pview;

/* The row of n->pref for layer li of this rank (0 .. n_layers-1), or with li < 0 the
 * parameters outside the layers: weight and bias of each pt_param_ref. */
static const pt_param *const *param_row(const pt_net *n, int64_t li)
{
    return n->pref + (size_t)(li < 0 ? n->n_layers : li) * PT_PARAM_COUNT * 2;
}

/* Fills n->pref from the parameter table's names, once: the ops name their parameters
 * by pt_param_ref, which the layer's row maps to the table's entry. */
static int resolve_params(pt_net *n, pt_err *err)
{
    size_t rows = (size_t)n->n_layers + 1;
    n->pref = calloc(rows * PT_PARAM_COUNT * 2, sizeof *n->pref);
    if (!n->pref)
        return pt_err_set(err, "out of memory");
    char name[64];
    for (int64_t li = 0; li <= n->n_layers; li++) {
        bool layer = li < n->n_layers;
        int64_t l = layer ? n->chunk_first[li / n->chunk_layers] + li % n->chunk_layers : -1;
        const pt_param **row = n->pref + (size_t)li * PT_PARAM_COUNT * 2;
        for (int r = PT_PARAM_NONE + 1; r < PT_PARAM_COUNT; r++) {
            const char *base = pt_param_ref_name((pt_param_ref)r);
            if ((r <= PT_PARAM_MLP_DOWN) != layer) /* the layers' come first (planner.h) */
                continue;
            if (r == PT_PARAM_WTE || r == PT_PARAM_WPE ||
                (r == PT_PARAM_HEAD && n->spec.tied_embeddings)) {
                /* the output head's weight is the token embedding when tied */
                row[2 * r] = pt_net_param(n, r == PT_PARAM_HEAD ? "wte" : base);
                continue;
            }
            for (int bias = 0; bias < 2; bias++) {
                if (layer)
                    snprintf(name, sizeof name, "layers.%lld.%s.%c", (long long)l, base,
                             bias ? 'b' : 'w');
                else
                    snprintf(name, sizeof name, "%s.%c", base, bias ? 'b' : 'w');
                row[2 * r + bias] = pt_net_param(n, name);
            }
        }
    }
    return 0;
}

static pview view_of(const pt_net *n, const pt_param *p)
{
    if (!p)
        return (pview){NULL, NULL};
    if (n->zero)
        return (pview){pt_zero_weight((pt_net *)n, p), pt_zero_grad((pt_net *)n, p)};
    size_t ab = pt_kdtype_bytes(n->kn->act_dtype);
    return (pview){(const float *)((const char *)n->w + (size_t)p->offset * ab),
                   n->grad + p->offset};
}

/* The weight (bias false) or the bias of parameters `r` of the running layer, or outside
 * the layers when none runs. */
static pview param(const ctx *c, pt_param_ref r, bool bias)
{
    return view_of(c->n, param_row(c->n, c->l < 0 ? -1 : c->li)[2 * r + bias]);
}

/* ---- Forward ops -------------------------------------------------------------------------- */

/* A norm's forward of the rank's rows of inp. With skip (add1_norm2), inp is a branch's
 * output and the residual add runs in the norm's kernel first: inp += skip, then the
 * norm of the sum, the same values as residual_forward then the norm. */
static void norm_fwd(ctx *c, pt_param_ref which, float *inp, const float *skip, float *out,
                     float *mean, float *rstd)
{
    pt_kernels *kn = c->n->kn;
    pview w = param(c, which, false), b = param(c, which, true);
    bool rms = c->n->spec.norm == PT_NORM_RMSNORM;
    int64_t R = c->d.R;
    int h = c->d.h;
    if (skip && rms)
        kn->residual_rmsnorm_forward(kn, inp, out, rstd, inp, skip, w.w, R, h, kEps);
    else if (skip)
        kn->residual_layernorm_forward(kn, inp, out, mean, rstd, inp, skip, w.w, b.w, R, h,
                                       kEps);
    else if (rms)
        kn->rmsnorm_forward(kn, out, rstd, inp, w.w, R, h, kEps);
    else
        kn->layernorm_forward(kn, out, mean, rstd, inp, w.w, b.w, R, h, kEps);
    c->col_in = out; /* what the next column-parallel GEMMs read (gathered with sp) */
}

/* A linear layer's forward or weight gradient over rows [row0, row0 + rows) of the
 * (T, ic) input, whose first row is at inp. */
typedef struct {
    const float *w, *bias;  /* weights (oc, ic) [act], bias or NULL */
    float *out;             /* forward: (T, oc) [act]; NULL for a weight gradient */
    float *pre;             /* forward with the GELU in the epilogue: (T, oc) [act] the
                             * product before it (out is then its GELU); else NULL */
    const float *res;       /* forward with the residual add in its epilogue: (T, oc)
                             * [act] added to the product (matmul_forward_res); else NULL */
    float *dw, *dbias;      /* weight gradient: (oc, ic) and (oc) fp32 */
    const float *dout;      /* weight gradient: (T, oc) [act] */
    int ic, oc;
} rows_gemm;

static void gemm_rows(ctx *c, const rows_gemm *g, int64_t row0, int64_t rows, const float *inp)
{
    pt_kernels *kn = c->n->kn;
    if (g->pre)
        kn->matmul_forward_gelu(kn, at_elem(c, g->out, row0 * g->oc),
                                at_elem(c, g->pre, row0 * g->oc), inp, g->w, g->bias, rows,
                                g->ic, g->oc);
    else if (g->res)
        kn->matmul_forward_res(kn, at_elem(c, g->out, row0 * g->oc), inp, g->w, g->bias,
                               at_elem(c, g->res, row0 * g->oc), rows, g->ic, g->oc);
    else if (g->out)
        kn->matmul_forward(kn, at_elem(c, g->out, row0 * g->oc), inp, g->w, g->bias, rows, g->ic,
                           g->oc);
    else
        kn->matmul_backward(kn, NULL, g->dw, g->dbias, at_elem(c, g->dout, row0 * g->oc), inp,
                            g->w, rows, g->ic, g->oc);
}

/* Waits for an overlapped all-gather still in flight. */
static int finish_gather(ctx *c)
{
    if (!c->gather)
        return 0;
    pt_comm_req *r = c->gather;
    c->gather = NULL;
    return pt_comm_wait(c->n->comm, r, c->err);
}

/* A GEMM over the T rows of `inp`. When inp is the gathered input of an all-gather
 * still in flight (tp_overlap), this rank's own rows go first, from the shard it had
 * before the gather, and the other ranks' rows after the wait: the gather runs
 * beside the first part, the decomposition of Megatron-LM's TP communication overlap
 * (Wang et al. 2023). Per-row results are the same either way; a weight gradient's
 * sum over rows is taken in another order. */
static int gemm_over_rows(ctx *c, const rows_gemm *g, const float *inp)
{
    const dims *d = &c->d;
    if (!c->gather || inp != c->col_in) {
        gemm_rows(c, g, 0, d->T, inp);
        return 0;
    }
    int64_t r0 = (int64_t)d->tr * d->R, r1 = r0 + d->R;
    gemm_rows(c, g, r0, d->R, c->gather_shard);
    if (finish_gather(c))
        return -1;
    if (r0 > 0)
        gemm_rows(c, g, 0, r0, inp);
    if (r1 < d->T)
        gemm_rows(c, g, r1, d->T - r1, at_elem(c, inp, r1 * g->ic));
    return 0;
}

/* A linear layer's forward. A row-parallel layer's bias is added by tp rank 0 only, as
 * its partial outputs are summed over tp afterwards (the op's key says which call:
 * planner/ops.c's gemm, from the rank's pt_opctx.tp_rank). */
static int linear_fwd(ctx *c, pt_param_ref which, float *out, const float *inp, int ic, int oc,
                      bool row_parallel)
{
    pview w = param(c, which, false), b = param(c, which, true);
    const float *bias = row_parallel && c->d.tr != 0 ? NULL : b.w;
    rows_gemm g = {.w = w.w, .bias = bias, .out = out, .ic = ic, .oc = oc};
    return gemm_over_rows(c, &g, inp);
}

static void residual_add(ctx *c, float *branch, const float *skip, int site);

/* A row-parallel layer's forward whose op adds the residual stream `res` (the plan's
 * gemm_res roles: tp = 1, planner/ops.c's residual_in_gemm): out = inp · w^T + bias +
 * res in the GEMM (matmul_forward_res). A run that drops does the product, the branch's
 * dropout and the add apart, as without the fusion. */
static int linear_res_fwd(ctx *c, pt_param_ref which, float *out, const float *inp,
                          const float *res, int ic, int oc, int site)
{
    if (dropping(c)) {
        if (linear_fwd(c, which, out, inp, ic, oc, true))
            return -1;
        residual_add(c, out, res, site);
        return 0;
    }
    pview w = param(c, which, false), b = param(c, which, true);
    rows_gemm g = {.w = w.w, .bias = b.w, .out = out, .res = res, .ic = ic, .oc = oc};
    return gemm_over_rows(c, &g, inp);
}

/* Whether a forward GEMM op adds the residual in its epilogue (its key's role). */
static bool adds_residual(const pt_op *op)
{
    return pt_gemm_role_adds_residual(pt_gemm_role_of(op->kernel.key));
}

/* A column-parallel linear layer with the GELU after it in its epilogue (mlp_up_gelu):
 * pre = inp · w^T + bias, act = gelu(pre). */
static int linear_gelu_fwd(ctx *c, pt_param_ref which, float *act, float *pre, const float *inp,
                           int ic, int oc)
{
    pview w = param(c, which, false), b = param(c, which, true);
    rows_gemm g = {.w = w.w, .bias = b.w, .out = act, .pre = pre, .ic = ic, .oc = oc};
    return gemm_over_rows(c, &g, inp);
}

/* Where a row-parallel GEMM writes its (T, h) partial sum: in place of the residual
 * rows it becomes (summed over tp there), or, with sp, into a buffer that the
 * reduce-scatter then spreads over the ranks' rows. */
static float *row_out(ctx *c, float *rows)
{
    return c->d.sp ? c->S->rout : rows;
}

/* RoPE on every sequence chunk of this rank at its position in the whole sequence. */
static void rope_all(ctx *c, float *t, int nh, bool backward, float *grad_out)
{
    pt_kernels *kn = c->n->kn;
    const dims *d = &c->d;
    for (int p = 0; p < pieces(d); p++) {
        int64_t off = p * d->b * d->sc * nh * d->d;
        int pos0 = (int)piece_pos(d, d->cr, p);
        if (backward)
            kn->rope_backward(kn, at_elem(c, grad_out, off), at_elem(c, t, off), (int)d->b,
                              (int)d->sc, nh, d->d, pos0, kRopeTheta);
        else
            kn->rope_forward(kn, at_elem(c, t, off), at_elem(c, t, off), (int)d->b, (int)d->sc,
                             nh, d->d, pos0, kRopeTheta);
    }
}

static int attention_fwd(ctx *c);
static int attention_bwd(ctx *c);

/* A branch's dropout before its residual add (in place), when the model drops. */
static void drop_branch(ctx *c, float *branch, int site)
{
    if (dropping(c))
        dropout_rows(c, branch, NULL, own_row0(c), c->d.R, site);
}

/* The residual add after a branch, with the branch's dropout first. */
static void residual_add(ctx *c, float *branch, const float *skip, int site)
{
    drop_branch(c, branch, site);
    c->n->kn->residual_forward(c->n->kn, branch, branch, skip, c->d.R * c->d.h);
}

/* ---- Backward ops -------------------------------------------------------------------------- */

/* A linear layer's weight (and bias) gradients from dout and its input inp, added. */
static int linear_wgrad(ctx *c, pt_param_ref which, const float *dout, const float *inp, int ic,
                        int oc)
{
    pview w = param(c, which, false), b = param(c, which, true);
    rows_gemm g = {.w = w.w, .dw = w.g, .dbias = b.g, .dout = dout, .ic = ic, .oc = oc};
    return gemm_over_rows(c, &g, inp);
}

/* A linear layer's data gradient into dinp (T, ic): written where the plan's key says
 * so (gemm_dgrad_write: the first data gradient into its buffer, planner/ops.c), else
 * added to what the buffer holds. */
static int linear_dgrad(ctx *c, const pt_op *op, float *dinp, const float *dout, int ic, int oc)
{
    pt_kernels *kn = c->n->kn;
    const float *w = param(c, op->param, false).w;
    if (pt_gemm_role_of(op->kernel.key) == PT_GEMM_DGRAD_WRITE)
        kn->matmul_dgrad(kn, dinp, dout, w, c->d.T, ic, oc);
    else
        kn->matmul_backward(kn, dinp, NULL, NULL, dout, NULL, w, c->d.T, ic, oc);
    return 0;
}

/* A norm's backward. With sequence parallelism each tp rank sees only its rows, so
 * the weight gradients of this micro-batch are summed over tp before they are added
 * (Korthikanti et al. 2022) — here, so that every ZeRO stage finds them complete. */
static int norm_bwd(ctx *c, pt_param_ref which, float *dinp, const float *dout,
                    const float *inp, const float *mean, const float *rstd)
{
    pt_kernels *kn = c->n->kn;
    pview w = param(c, which, false), b = param(c, which, true);
    int h = c->d.h;
    float *dw = w.g, *db = b.g;
    if (c->d.sp) {
        dw = c->S->dnorm;
        db = b.g ? c->S->dnorm + h : NULL;
        kn->zero(kn, c->S->dnorm, 2 * (size_t)h * sizeof(float));
    }
    if (c->n->spec.norm == PT_NORM_RMSNORM)
        kn->rmsnorm_backward(kn, dinp, dw, dout, inp, w.w, rstd, c->d.R, h);
    else
        kn->layernorm_backward(kn, dinp, dw, db, dout, inp, w.w, mean, rstd, c->d.R, h);
    if (!c->d.sp)
        return 0;
    /* the collective is ordered after the kernels on every backend (comm.h) */
    if (pt_comm_allreduce(c->n->comm, PT_GROUP_TP, c->S->dnorm, 2 * (int64_t)h, c->err))
        return -1;
    kn->add_f32(kn, w.g, dw, h);
    if (db)
        kn->add_f32(kn, b.g, db, h);
    return 0;
}

/* q, k and v of one input and one width as one call each way (the plan's qkv and
 * qkv_wgrad: planner/ops.c's shared_qkv, tp = 1, each oc wide): the forward into out,
 * or with dout the weight gradients (kernels.h's matmul_forward_shared, matmul_wgrad_shared; they
 * batch where the pointers lie at equal steps: the parameters sit (w, b) after (w, b),
 * and carve_slot and carve_scratch lay q, k, v and the gradients the wgrad reads end to
 * end). */
static int qkv_shared(ctx *c, float *const out[3], const float *const dout[3], int oc)
{
    pt_kernels *kn = c->n->kn;
    const dims *d = &c->d;
    static const pt_param_ref refs[3] = {PT_PARAM_Q, PT_PARAM_K, PT_PARAM_V};
    const float *w[3], *bias[3];
    float *dw[3], *dbias[3];
    for (int i = 0; i < 3; i++) {
        pview pw = param(c, refs[i], false), pb = param(c, refs[i], true);
        w[i] = pw.w;
        dw[i] = pw.g;
        bias[i] = pb.w;
        dbias[i] = pb.g;
    }
    if (finish_gather(c))
        return -1;
    if (out)
        kn->matmul_forward_shared(kn, 3, out, c->col_in, w, bias, d->T, d->h, oc);
    else
        kn->matmul_wgrad_shared(kn, 3, dw, dbias, dout, c->col_in, d->T, d->h, oc);
    return 0;
}

/* The gradient of a row-parallel layer's output: the residual stream's (T, h)
 * (gathered with sp), through the branch's dropout when there is one. Called by the
 * data-gradient op, which runs first; the weight-gradient op reuses the result. */
static const float *branch_grad(ctx *c, int site, bool first)
{
    const float *g = c->S->gdres;
    if (!dropping(c))
        return g;
    if (first) {
        c->n->kn->zero(c->n->kn, c->S->ddrop, act_bytes(c, c->d.T * c->d.h));
        dropout_rows(c, c->S->ddrop, g, 0, c->d.T, site);
    }
    return c->S->ddrop;
}

/* The weight gradients of K or V when one KV head is shared by several tp ranks
 * (tp > k): each rank's share comes from its own query heads, and the head's
 * gradient is the sum over the ranks sharing it. Each rank writes its share into its
 * head's slot of a buffer of every head, the buffer is summed over tp (the other
 * heads' ranks add into the other slots), and each rank takes its head's slot. */
static int kv_wgrad_shared(ctx *c, pt_param_ref which, const float *dout)
{
    pt_kernels *kn = c->n->kn;
    const dims *d = &c->d;
    pview w = param(c, which, false), b = param(c, which, true);
    int kvd = d->kh * d->d;
    int64_t part = (int64_t)kvd * (d->h + 1), heads = c->n->spec.kv_heads;
    float *mine = c->S->dkv + (d->tr / d->kv_share) * part;
    if (finish_gather(c))
        return -1;
    kn->zero(kn, c->S->dkv, (size_t)(heads * part) * sizeof(float));
    kn->matmul_backward(kn, NULL, mine, b.g ? mine + (int64_t)kvd * d->h : NULL, dout, c->col_in,
                        w.w, d->T, d->h, kvd);
    if (pt_comm_allreduce(c->n->comm, PT_GROUP_TP, c->S->dkv, heads * part, c->err))
        return -1;
    kn->add_f32(kn, w.g, mine, (int64_t)kvd * d->h);
    if (b.g)
        kn->add_f32(kn, b.g, mine + (int64_t)kvd * d->h, kvd);
    return 0;
}

/* Once the MLP's up (and gate) gradients are complete: the MLP block's weight
 * gradients read the second norm's output (its input gradient is written by the first
 * data gradient, linear_dgrad). */
static void begin_mlp_input_grad(ctx *c, const pt_layer_acts *L)
{
    c->col_in = L->ln2;
}

/* ---- Attention, with the context-parallel ring ---------------------------------------------- */

/* Chunk p, (b, sc, nh, d), of a (T, nh, d) tensor laid out chunk by chunk, and its
 * (b, a, sc) log-sum-exp block (lse is (2, b, a, sc) with cp). */
static float *chunk_of(const ctx *c, const float *t, int p, int nh)
{
    return at_elem(c, t, p * c->d.b * c->d.sc * nh * c->d.d);
}

static float *lse_of(const ctx *c, float *lse, int p)
{
    return lse + p * c->d.b * c->d.a * c->d.sc;
}

/* Ring messages: tags above the pipeline's (which are below 2^14). */
static int tag_ring(int step, bool backward)
{
    return 0x4000 + (backward ? 0x1000 : 0) + (step & 0xfff);
}

/* Whether query chunk qp of this rank sees any key of chunk kp of rank src. */
static bool visible(const dims *d, int src, int qp, int kp)
{
    return piece_pos(d, src, kp) <= piece_pos(d, d->cr, qp) + d->sc - 1;
}

/* Forward: attention of the local queries over the K/V chunks of every cp rank,
 * which travel around the ring (this rank sends the block it holds on while it
 * computes with it), results combined by running maximum and sum in ring order. */
static int attention_fwd(ctx *c)
{
    pt_kernels *kn = c->n->kn;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_scratch *S = c->S;
    const dims *d = &c->d;
    if (d->cp == 1) {
        kn->attention_forward(kn, L->att, L->lse, L->q, L->k, L->v, (int)d->b, (int)d->s,
                              (int)d->s, d->a, d->kh, d->d, 0, 0, 1);
        return 0;
    }
    int64_t kv = d->T * d->kh * d->d;
    float *cur = S->ring[0], *next = S->ring[1];
    kn->copy(kn, cur, L->k, act_bytes(c, kv), PT_KCOPY_D2D);
    kn->copy(kn, at_elem(c, cur, kv), L->v, act_bytes(c, kv), PT_KCOPY_D2D);
    for (int j = 0; j < d->cp; j++) {
        int src = (d->cr - j + d->cp) % d->cp;
        if (j < d->cp - 1 && pt_comm_isend_bytes(c->n->comm, c->n->cp_next, tag_ring(j, false),
                                                 cur, (int64_t)act_bytes(c, 2 * kv), c->err))
            return -1;
        const float *k = cur, *v = at_elem(c, cur, kv);
        for (int qp = 0; qp < 2; qp++)
            for (int kp = 0; kp < 2; kp++) {
                if (!visible(d, src, qp, kp))
                    continue;
                bool first = j == 0 && kp == 0; /* the diagonal chunk: always seen */
                float *out = first ? chunk_of(c, L->att, qp, d->a) : S->part;
                float *lse = first ? lse_of(c, L->lse, qp) : S->part_lse;
                kn->attention_forward(kn, out, lse, chunk_of(c, L->q, qp, d->a),
                                      chunk_of(c, k, kp, d->kh), chunk_of(c, v, kp, d->kh),
                                      (int)d->b, (int)d->sc, (int)d->sc, d->a, d->kh, d->d,
                                      (int)piece_pos(d, d->cr, qp), (int)piece_pos(d, src, kp), 1);
                if (!first)
                    kn->attention_combine(kn, chunk_of(c, L->att, qp, d->a),
                                          lse_of(c, L->lse, qp), S->part, S->part_lse, (int)d->b,
                                          (int)d->sc, d->a, d->d);
            }
        if (j < d->cp - 1) {
            if (pt_comm_recv_bytes(c->n->comm, c->n->cp_prev, tag_ring(j, false), next,
                                   (int64_t)act_bytes(c, 2 * kv), c->err))
                return -1;
            float *t = cur;
            cur = next;
            next = t;
        }
    }
    return 0;
}

/* Backward: each K/V chunk travels the ring again with its gradients, which every
 * rank adds its queries' share to; after a full turn a block is home with the
 * whole of its dK and dV. */
static int attention_bwd(ctx *c)
{
    pt_kernels *kn = c->n->kn;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_scratch *S = c->S;
    const dims *d = &c->d;
    int qd = d->a * d->d;
    int64_t kv = d->T * d->kh * d->d;
    if (d->cp == 1) { /* one block: written, not added to (no zeroing first) */
        kn->attention_backward(kn, S->dq, S->dk, S->dv, S->datt, L->q, L->k, L->v, L->att,
                               L->lse, (int)d->b, (int)d->s, (int)d->s, d->a, d->kh, d->d, 0,
                               0, 1, 0);
    } else {
        kn->zero(kn, S->dq, act_bytes(c, d->T * qd));
        float *cur = S->ring[0], *next = S->ring[1];
        kn->copy(kn, cur, L->k, act_bytes(c, kv), PT_KCOPY_D2D);
        kn->copy(kn, at_elem(c, cur, kv), L->v, act_bytes(c, kv), PT_KCOPY_D2D);
        kn->zero(kn, at_elem(c, cur, 2 * kv), act_bytes(c, 2 * kv));
        for (int j = 0; j < d->cp; j++) {
            int src = (d->cr - j + d->cp) % d->cp;
            float *k = cur, *v = at_elem(c, cur, kv), *dk = at_elem(c, cur, 2 * kv),
                  *dv = at_elem(c, cur, 3 * kv);
            for (int qp = 0; qp < 2; qp++)
                for (int kp = 0; kp < 2; kp++) {
                    if (!visible(d, src, qp, kp))
                        continue;
                    kn->attention_backward(
                        kn, chunk_of(c, S->dq, qp, d->a), chunk_of(c, dk, kp, d->kh),
                        chunk_of(c, dv, kp, d->kh), chunk_of(c, S->datt, qp, d->a),
                        chunk_of(c, L->q, qp, d->a), chunk_of(c, k, kp, d->kh),
                        chunk_of(c, v, kp, d->kh), chunk_of(c, L->att, qp, d->a),
                        lse_of(c, L->lse, qp), (int)d->b, (int)d->sc, (int)d->sc, d->a, d->kh,
                        d->d, (int)piece_pos(d, d->cr, qp), (int)piece_pos(d, src, kp), 1, 1);
                }
            /* on: K, V and their gradients; the last hop takes only the gradients home */
            bool last = j == d->cp - 1;
            float *from = last ? dk : cur, *into = last ? at_elem(c, next, 2 * kv) : next;
            int64_t count = last ? 2 * kv : 4 * kv;
            int64_t bytes = (int64_t)act_bytes(c, count);
            if (pt_comm_isend_bytes(c->n->comm, c->n->cp_next, tag_ring(j, true), from, bytes,
                                    c->err) ||
                pt_comm_recv_bytes(c->n->comm, c->n->cp_prev, tag_ring(j, true), into, bytes,
                                   c->err))
                return -1;
            float *t = cur;
            cur = next;
            next = t;
        }
        kn->copy(kn, S->dk, at_elem(c, cur, 2 * kv), act_bytes(c, kv), PT_KCOPY_D2D);
        kn->copy(kn, S->dv, at_elem(c, cur, 3 * kv), act_bytes(c, kv), PT_KCOPY_D2D);
    }
    c->col_in = L->ln1; /* the q, k and v data gradients write, then add to, S->dln */
    return 0;
}

/* ---- The buffers an op names -------------------------------------------------------------- */

/* The buffer `t` of the running layer (or of the embedding or head), or NULL for what is
 * not one buffer of the micro-batch (parameters, the K/V ring, gradient buckets: their
 * ops move them themselves). */
static float *tensor(ctx *c, pt_tensor t)
{
    pt_acts *A = c->A;
    pt_scratch *S = c->S;
    pt_head_acts *H = c->H;
    pt_layer_acts *L = c->l >= 0 ? &A->layer[c->ai] : NULL;
    switch (t) {
    case PT_TEN_ATTN_RES: return L ? L->x2 : NULL;
    case PT_TEN_MLP_RES: return L ? A->x[c->xi + 1] : NULL;
    case PT_TEN_EMBED_RES: return A->x[0];
    case PT_TEN_ROW_PARTIAL: return S->rout;
    case PT_TEN_LN1: return L ? L->ln1 : NULL;
    case PT_TEN_LN2: return L ? L->ln2 : NULL;
    case PT_TEN_LNF: return H ? H->lnf : NULL;
    case PT_TEN_GATHERED: return S->gath;
    case PT_TEN_DRES: return S->dres;
    case PT_TEN_DRES_GATHERED: return S->gdres;
    case PT_TEN_DLN: return S->dln;
    case PT_TEN_DLN_ROWS: return S->dlns;
    case PT_TEN_XENT_MAX: return S->ce;
    case PT_TEN_XENT_SUMS: return S->ce ? S->ce + c->d.T : NULL;
    case PT_TEN_NONE:
    case PT_TEN_KV:
    case PT_TEN_LAYER_WEIGHTS:
    case PT_TEN_LAYER_GRADS:
    case PT_TEN_GRADS:
    case PT_TEN_EMBED_GRAD:
    case PT_TEN_WEIGHTS:
    case PT_TEN_COUNT:
        break;
    }
    return NULL;
}

/* ---- Collectives inside a micro-batch ------------------------------------------------------ */


/* Megatron-LM's f and g operators (Shoeybi et al. 2019) and their sequence-parallel
 * forms (Korthikanti et al. 2022), on the buffers the op names: the partial sums of a
 * row-parallel output (all-reduced in place, or reduce-scattered from the (T, h) partial
 * output into this rank's rows), a column-parallel input's gradient, the norm output the
 * column-parallel GEMMs read (gathered, beside the next GEMM with tp_overlap) and the
 * residual gradient a row-parallel backward reads (gathered). */
static int tp_collective(ctx *c, const pt_op *op)
{
    pt_comm *comm = c->n->comm;
    const dims *d = &c->d;
    float *src = tensor(c, op->src), *dst = tensor(c, op->dst);
    int64_t Rh = d->R * d->h;
    /* [act] buffers: bf16 on the CUDA backend, summed by the collective in that type
     * (Megatron-LM's tensor-parallel all-reduces run in the compute dtype) */
    pt_comm_dtype t = c->n->kn->act_dtype == PT_KDTYPE_BF16 ? PT_COMM_BF16 : PT_COMM_F32;
    if (!src || !dst)
        return pt_err_set(c->err, "internal: %s moves %s into %s, which this op list does "
                                  "not hold here", pt_op_kind_name(op->kind),
                          pt_tensor_name(op->src), pt_tensor_name(op->dst));
    /* the overlapped gather that may be in flight finished first (the kernels that
     * wrote the input need no wait: every backend orders a collective after the work
     * queued before it, comm.h) */
    if (finish_gather(c))
        return -1;
    if (op->kind == PT_OPK_TP_ALLREDUCE)
        return pt_comm_allreduce_t(comm, PT_GROUP_TP, t, dst, d->T * d->h, c->err);
    if (op->kind == PT_OPK_SP_REDUCESCATTER)
        return pt_comm_reducescatter_t(comm, PT_GROUP_TP, t, src, dst, Rh, c->err);
    if (op->dst != PT_TEN_GATHERED) /* the residual gradient */
        return pt_comm_allgather_t(comm, PT_GROUP_TP, t, src, dst, Rh, c->err);
    int rc;
    if (op->overlapped) { /* tp_overlap: the next GEMM starts on this rank's rows */
        c->gather_shard = src;
        rc = pt_comm_iallgather_t(comm, PT_GROUP_TP, t, src, dst, Rh, &c->gather, c->err);
    } else
        rc = pt_comm_allgather_t(comm, PT_GROUP_TP, t, src, dst, Rh, c->err);
    c->col_in = dst;
    return rc;
}

/* The vocab-parallel loss statistics (kernels.h): the row maxima (max-reduced), then the
 * sums of exponentials and target logits (summed), over tp. */
static int xent_allreduce(ctx *c, const pt_op *op)
{
    float *buf = tensor(c, op->dst);
    if (!buf)
        return pt_err_set(c->err, "internal: %s without the loss statistics' buffer (tp = 1)",
                          pt_op_kind_name(op->kind));
    if (finish_gather(c)) /* as tp_collective */
        return -1;
    if (op->kind == PT_OPK_XENT_MAX_ALLREDUCE)
        return pt_comm_allreduce_max(c->n->comm, PT_GROUP_TP, buf, c->d.T, c->err);
    return pt_comm_allreduce(c->n->comm, PT_GROUP_TP, buf, 2 * c->d.T, c->err);
}

/* ---- Embedding and cross-entropy ------------------------------------------------------------ */

static void embed(ctx *c, bool fwd)
{
    pt_kernels *kn = c->n->kn;
    const dims *d = &c->d;
    pview wte = param(c, PT_PARAM_WTE, false), wpe = param(c, PT_PARAM_WPE, false);
    int v0 = d->tr * d->v;
    /* The positions are added by one tp rank: the partial lookups are summed. */
    const float *pos = d->tr == 0 ? wpe.w : NULL;
    float *out = fwd ? row_out(c, c->A->x[0]) : NULL;
    const float *dout = c->S->gdres;
    for (int p = 0; p < pieces(d); p++) { /* each chunk at its place in the sequence */
        int64_t row = p * d->b * d->sc;
        int pos0 = (int)piece_pos(d, d->cr, p);
        if (fwd)
            kn->embed_forward(kn, at_elem(c, out, row * d->h), c->A->tokens + row, wte.w, pos,
                              (int)d->b, (int)d->sc, d->h, v0, d->v, pos0);
        else
            kn->embed_backward(kn, wte.g, wpe.g, at_elem(c, dout, row * d->h),
                               c->A->tokens + row, (int)d->b, (int)d->sc, d->h, v0, d->v, pos0);
    }
}

/* The fused cross-entropy: the loss, and in a training forward (dloss > 0) the logits'
 * gradient in place of the logits. With tp > 1 the row statistics are the ones
 * xent_max, xent_sumexp and their all-reduces left in the scratch. */
static void xent(ctx *c)
{
    pt_kernels *kn = c->n->kn;
    pt_acts *A = c->A;
    pt_head_acts *H = c->H;
    const dims *d = &c->d;
    float *dlogits = c->dloss > 0 ? H->logits : NULL;
    if (d->t == 1) {
        kn->crossentropy(kn, H->losses, dlogits, H->logits, A->targets, d->T, d->v, c->dloss);
        return;
    }
    float *mx = c->S->ce, *sum = mx + d->T, *tgt = sum + d->T;
    kn->ce_finalize(kn, H->losses, dlogits, H->logits, A->targets, mx, sum, tgt, d->T, d->v,
                    d->tr * d->v, c->dloss);
}

/* ---- One op ----------------------------------------------------------------------------- */

static int priced_only(ctx *c, const pt_op *op)
{
    return pt_err_set(c->err, "internal: op '%s' describes another stack's kernels; ptrun "
                              "trains with its own (plans are re-listed for stack 'ptrun')",
                      pt_op_kind_name(op->kind));
}

static int outside_micro_batch(ctx *c, const pt_op *op)
{
    return pt_err_set(c->err, "internal: op '%s' belongs to the step's end, not to a "
                              "micro-batch's op list", pt_op_kind_name(op->kind));
}

/* Runs op `op` of the running list on the context's micro-batch and layer: 0, or -1
 * with the error set. One case per kind (-Wswitch-enum: a kind the planner gains and
 * this switch lacks does not compile). Backward ops accumulate (see the top). */
static int run_op(ctx *c, const pt_op *op)
{
    pt_kernels *kn = c->n->kn;
    pt_acts *A = c->A;
    pt_scratch *S = c->S;
    const dims *d = &c->d;
    pt_layer_acts *L = c->l >= 0 ? &A->layer[c->ai] : NULL;
    pt_head_acts *H = c->H;
    float *x = L ? A->x[c->xi] : NULL, *y = L ? A->x[c->xi + 1] : NULL;
    /* the chunk's output, which the head reads (in the last chunk's slot) */
    float *xl = A->x[c->n->chunk_layers];
    int qd = d->a * d->d, kvd = d->kh * d->d;
    int64_t Tf = d->T * d->f;
    pt_param_ref w = op->param;
    /* Without RoPE the projections' gradients are the attention's directly. */
    bool rope = c->n->spec.pos == PT_POS_ROPE;
    float *gq = rope ? S->dqr : S->dq, *gk = rope ? S->dkr : S->dk;
    if (!L && op->kind <= PT_OPK_ATTN_SCORES_WGRAD)
        return pt_err_set(c->err, "internal: layer op '%s' outside a layer",
                          pt_op_kind_name(op->kind));
    if (!H && op->kind >= PT_OPK_FINAL_NORM && op->kind <= PT_OPK_XENT_ALLREDUCE)
        return pt_err_set(c->err, "internal: head op '%s' on a stage without the head",
                          pt_op_kind_name(op->kind));
    switch (op->kind) {
    /* a layer's forward */
    case PT_OPK_NORM1:
        norm_fwd(c, w, x, NULL, L->ln1, L->ln1_mean, L->ln1_rstd);
        return 0;
    case PT_OPK_Q: return linear_fwd(c, w, L->q, c->col_in, d->h, qd, false);
    case PT_OPK_K: return linear_fwd(c, w, L->k, c->col_in, d->h, kvd, false);
    case PT_OPK_V: return linear_fwd(c, w, L->v, c->col_in, d->h, kvd, false);
    case PT_OPK_QKV: {
        float *const out[3] = {L->q, L->k, L->v};
        return qkv_shared(c, out, NULL, qd);
    }
    case PT_OPK_ROPE:
        rope_all(c, L->q, d->a, false, NULL);
        rope_all(c, L->k, d->kh, false, NULL);
        return 0;
    case PT_OPK_ATTN: return attention_fwd(c);
    case PT_OPK_ATTN_OUT:
        if (adds_residual(op))
            return linear_res_fwd(c, w, L->x2, L->att, x, qd, d->h, DROP_ATTN);
        return linear_fwd(c, w, row_out(c, L->x2), L->att, qd, d->h, true);
    case PT_OPK_ADD1:
        residual_add(c, L->x2, x, DROP_ATTN);
        return 0;
    case PT_OPK_NORM2:
        norm_fwd(c, w, L->x2, NULL, L->ln2, L->ln2_mean, L->ln2_rstd);
        return 0;
    case PT_OPK_MLP_GATE: return linear_fwd(c, w, L->gate, c->col_in, d->h, d->f, false);
    case PT_OPK_MLP_UP: return linear_fwd(c, w, L->up, c->col_in, d->h, d->f, false);
    case PT_OPK_ACT:
        if (c->n->spec.act == PT_ACT_SWIGLU)
            kn->swiglu_forward(kn, L->act, L->gate, L->up, d->T, d->f);
        else
            kn->gelu_forward(kn, L->act, L->up, Tf);
        return 0;
    case PT_OPK_MLP_DOWN:
        if (adds_residual(op))
            return linear_res_fwd(c, w, y, L->act, L->x2, d->f, d->h, DROP_MLP);
        return linear_fwd(c, w, row_out(c, y), L->act, d->f, d->h, true);
    case PT_OPK_ADD2:
        residual_add(c, y, L->x2, DROP_MLP);
        return 0;
    /* fused forms */
    case PT_OPK_ADD1_NORM2:
        drop_branch(c, L->x2, DROP_ATTN); /* then the add in the norm's kernel */
        norm_fwd(c, w, L->x2, x, L->ln2, L->ln2_mean, L->ln2_rstd);
        return 0;
    case PT_OPK_MLP_UP_GELU: return linear_gelu_fwd(c, w, L->act, L->up, c->col_in, d->h, d->f);
    case PT_OPK_MLP_DOWN_DGRAD_GELU: {
        /* dup = (gradient of the down projection's output · w) ⊙ gelu'(up), written */
        pview wd = param(c, w, false);
        kn->matmul_backward_dgelu(kn, S->dup, branch_grad(c, DROP_MLP, true), wd.w, L->up, d->T,
                                  d->f, d->h);
        begin_mlp_input_grad(c, L);
        return 0;
    }
    /* its backward: the MLP half */
    case PT_OPK_MLP_DOWN_DGRAD:
        return linear_dgrad(c, op, S->dact, branch_grad(c, DROP_MLP, true), d->f, d->h);
    case PT_OPK_MLP_DOWN_WGRAD:
        return linear_wgrad(c, w, branch_grad(c, DROP_MLP, false), L->act, d->f, d->h);
    case PT_OPK_ACT_BWD:
        kn->zero(kn, S->dup, act_bytes(c, Tf));
        if (c->n->spec.act == PT_ACT_SWIGLU) {
            kn->zero(kn, S->dgate, act_bytes(c, Tf));
            kn->swiglu_backward(kn, S->dgate, S->dup, S->dact, L->gate, L->up, d->T, d->f);
        } else
            kn->gelu_backward(kn, S->dup, S->dact, L->up, Tf);
        begin_mlp_input_grad(c, L);
        return 0;
    case PT_OPK_MLP_GATE_DGRAD: return linear_dgrad(c, op, S->dln, S->dgate, d->h, d->f);
    case PT_OPK_MLP_UP_DGRAD: return linear_dgrad(c, op, S->dln, S->dup, d->h, d->f);
    case PT_OPK_MLP_GATE_WGRAD:
        return linear_wgrad(c, w, S->dgate, c->col_in, d->h, d->f);
    case PT_OPK_MLP_UP_WGRAD: return linear_wgrad(c, w, S->dup, c->col_in, d->h, d->f);
    case PT_OPK_NORM2_BWD:
        return norm_bwd(c, w, S->dres, S->dlns, L->x2, L->ln2_mean, L->ln2_rstd);
    /* the attention half */
    case PT_OPK_ATTN_OUT_DGRAD:
        return linear_dgrad(c, op, S->datt, branch_grad(c, DROP_ATTN, true), qd, d->h);
    case PT_OPK_ATTN_OUT_WGRAD:
        return linear_wgrad(c, w, branch_grad(c, DROP_ATTN, false), L->att, qd, d->h);
    case PT_OPK_ATTN_BWD: return attention_bwd(c);
    case PT_OPK_ROPE_BWD:
        kn->zero(kn, S->dqr, act_bytes(c, d->T * qd));
        kn->zero(kn, S->dkr, act_bytes(c, d->T * kvd));
        rope_all(c, S->dq, d->a, true, S->dqr);
        rope_all(c, S->dk, d->kh, true, S->dkr);
        return 0;
    case PT_OPK_Q_DGRAD: return linear_dgrad(c, op, S->dln, gq, d->h, qd);
    case PT_OPK_K_DGRAD: return linear_dgrad(c, op, S->dln, gk, d->h, kvd);
    case PT_OPK_V_DGRAD: return linear_dgrad(c, op, S->dln, S->dv, d->h, kvd);
    case PT_OPK_Q_WGRAD: return linear_wgrad(c, w, gq, c->col_in, d->h, qd);
    case PT_OPK_K_WGRAD:
        if (d->kv_share > 1)
            return kv_wgrad_shared(c, w, gk);
        return linear_wgrad(c, w, gk, c->col_in, d->h, kvd);
    case PT_OPK_V_WGRAD:
        if (d->kv_share > 1)
            return kv_wgrad_shared(c, w, S->dv);
        return linear_wgrad(c, w, S->dv, c->col_in, d->h, kvd);
    case PT_OPK_QKV_WGRAD: {
        const float *const dout[3] = {gq, gk, S->dv};
        return qkv_shared(c, NULL, dout, qd);
    }
    case PT_OPK_NORM1_BWD:
        return norm_bwd(c, w, S->dres, S->dlns, x, L->ln1_mean, L->ln1_rstd);
    /* other stacks' kernels */
    case PT_OPK_ATTN_SCORES:
    case PT_OPK_ATTN_SOFTMAX:
    case PT_OPK_ATTN_DROPOUT:
    case PT_OPK_ATTN_CTX:
    case PT_OPK_ATTN_CTX_DGRAD:
    case PT_OPK_ATTN_CTX_WGRAD:
    case PT_OPK_ATTN_DROPOUT_BWD:
    case PT_OPK_ATTN_SOFTMAX_BWD:
    case PT_OPK_ATTN_SCORES_DGRAD:
    case PT_OPK_ATTN_SCORES_WGRAD:
    case PT_OPK_XENT_BWD:
    case PT_OPK_XENT_ALLREDUCE:
        return priced_only(c, op);
    /* embedding and head */
    case PT_OPK_EMBED:
        embed(c, true);
        return 0;
    case PT_OPK_EMBED_BWD:
        embed(c, false);
        return 0;
    case PT_OPK_FINAL_NORM:
        norm_fwd(c, w, xl, NULL, H->lnf, H->lnf_mean, H->lnf_rstd);
        return 0;
    case PT_OPK_LOGITS: {
        rows_gemm g = {.w = param(c, w, false).w, .bias = H->vmask, .out = H->logits,
                       .ic = d->h, .oc = d->v};
        return gemm_over_rows(c, &g, c->col_in);
    }
    case PT_OPK_LOGITS_DGRAD:
        c->col_in = H->lnf;
        return linear_dgrad(c, op, S->dln, H->logits, d->h, d->v);
    case PT_OPK_LOGITS_WGRAD: {
        pview hw = param(c, w, false);
        rows_gemm g = {.w = hw.w, .dw = hw.g, .dout = H->logits, .ic = d->h, .oc = d->v};
        return gemm_over_rows(c, &g, c->col_in);
    }
    case PT_OPK_FINAL_NORM_BWD:
        return norm_bwd(c, w, S->dres, S->dlns, xl, H->lnf_mean, H->lnf_rstd);
    case PT_OPK_XENT:
        xent(c);
        return 0;
    case PT_OPK_XENT_MAX:
        kn->ce_local_max(kn, S->ce, H->logits, d->T, d->v);
        return 0;
    case PT_OPK_XENT_SUMEXP:
        kn->ce_local_sumexp(kn, S->ce + d->T, H->logits, S->ce, d->T, d->v);
        kn->ce_local_target(kn, S->ce + 2 * d->T, H->logits, A->targets, d->T, d->v,
                            d->tr * d->v);
        return 0;
    case PT_OPK_XENT_MAX_ALLREDUCE:
    case PT_OPK_XENT_SUM_ALLREDUCE:
        return xent_allreduce(c, op);
    /* tensor and context parallelism */
    case PT_OPK_TP_ALLREDUCE:
    case PT_OPK_SP_ALLGATHER:
    case PT_OPK_SP_REDUCESCATTER:
        return tp_collective(c, op);
    case PT_OPK_CP_RING:
    case PT_OPK_CP_RING_BWD:
        /* The K/V blocks travel inside the attention ops, beside their compute, as the
         * op's `overlapped` prices them. */
        return 0;
    /* ZeRO inside the layers */
    case PT_OPK_ZERO3_ALLGATHER: return pt_zero_gather_layer(c->n, c->l, c->next_l, c->err);
    case PT_OPK_ZERO_REDUCESCATTER:
        return c->n->zero ? pt_zero_reduce_layer(c->n, c->l, c->err) : 0;
    /* the step's end: the engine's (runtime/engine.c) */
    case PT_OPK_DP_BUCKET:
    case PT_OPK_EMBED_ALLREDUCE:
    case PT_OPK_GRAD_NORM:
    case PT_OPK_ADAM:
    case PT_OPK_ZERO_ALLGATHER:
    case PT_OPK_BF16_CONVERT:
    case PT_OPK_PSGD_ERROR:
    case PT_OPK_PSGD_P:
    case PT_OPK_PSGD_ORTH:
    case PT_OPK_PSGD_Q:
    case PT_OPK_PSGD_DECOMPRESS:
    case PT_OPK_PSGD_ALLREDUCE_P:
    case PT_OPK_PSGD_ALLREDUCE_Q:
        return outside_micro_batch(c, op);
    case PT_OPK_COUNT:
        break;
    }
    return pt_err_set(c->err, "internal: op kind %d", (int)op->kind);
}

/* ---- Running op lists ---------------------------------------------------------------------- */

typedef enum { LIST_LAYER_FWD, LIST_LAYER_BWD, LIST_EMBED_FWD, LIST_EMBED_BWD, LIST_HEAD_FWD,
               LIST_HEAD_BWD } list_id;

/* Runs an op list in order, each op a span of the trace under its kind's name: a compute
 * op on stream 0 with its planner key, a collective on stream 1. The host clock around a
 * call times what the call does on the host: the whole op on the CPU, but only its launch
 * on a device whose ops run asynchronously. There, when the backend has device timers
 * (n->devtime), an event is recorded before and after each compute op, without
 * waiting; the span is recorded at launch, which keeps its place among its
 * instruction's spans, and pt_net_trace_resolve gives it the device's times once the
 * step's work is done (devtime.c says how they meet the host clock). Collectives keep
 * host times (they wait for the device first). PT_TRACE_SYNC=1 (n->trace_sync) instead
 * waits for the device around each op and keeps host times. */
static int run_list(ctx *c, list_id id)
{
    pt_net *n = c->n;
    const pt_oplist *list = &n->ops[id];
    bool device_timed = n->devtime && !n->trace_sync;
    for (int i = 0; i < list->n; i++) {
        const pt_op *op = &list->op[i];
        const char *name = pt_op_kind_name(op->kind);
        if (n->trace_sync && n->kn->sync(n->kn))
            return pt_err_set(c->err, "%s", n->kn->err);
        if (op->cls == PT_OP_COLL) {
            double t0 = pt_trace_now();
            if (run_op(c, op))
                return -1;
            pt_trace_add_coll(n->trace, n->rank, name, n->op_seq++, t0, pt_trace_now());
            continue;
        }
        if (device_timed && pt_devtime_before(n, c->err))
            return -1;
        double t0 = pt_trace_now();
        if (run_op(c, op))
            return -1;
        if (n->trace_sync && n->kn->sync(n->kn))
            return pt_err_set(c->err, "%s", n->kn->err);
        int64_t span = pt_trace_add_op(n->trace, n->rank, 0, name, &op->kernel, n->op_seq++,
                                       t0, pt_trace_now());
        if (device_timed && pt_devtime_after(n, span, c->err))
            return -1;
    }
    return finish_gather(c);
}

/* The head's buffers of the micro-batch in slot A: a pool indexed by micro-batch (the
 * last chunk's micro-batches in flight are consecutive). */
static pt_head_acts *head_of(const pt_net *n, const pt_acts *A)
{
    return n->head ? n->head[A->mb % n->n_head] : NULL;
}

static ctx context(pt_net *n, int slot, float dloss, pt_err *err)
{
    return (ctx){.n = n, .A = n->slot[slot], .H = head_of(n, n->slot[slot]), .S = n->scratch,
                 .d = dims_of(n), .l = -1, .dloss = dloss, .err = err};
}

/* Points the context at layer i of chunk `chunk`. */
static void at_layer(ctx *c, int chunk, int64_t i)
{
    const pt_net *n = c->n;
    c->l = n->chunk_first[chunk] + i;
    c->next_l = -1;
    c->li = chunk * n->chunk_layers + i;
    c->ai = c->xi = i;
    c->col_in = NULL;
}

static bool first_vs(const pt_net *n, int chunk)
{
    return chunk == 0 && n->stage == 0;
}

static bool last_vs(const pt_net *n, int chunk)
{
    return chunk == n->layout.vp - 1 && n->stage == n->layout.pp - 1;
}

float *pt_net_chunk_input(pt_net *n, int slot)
{
    return n->slot[slot]->x[0];
}

float *pt_net_chunk_output(pt_net *n, int slot)
{
    return n->slot[slot]->x[n->chunk_layers];
}

float *pt_net_dres(pt_net *n)
{
    return ((pt_scratch *)n->scratch)->dres;
}

void pt_net_set_batch(pt_net *n, int slot, int mb, int64_t step, int64_t first_sample,
                      bool train)
{
    pt_acts *A = n->slot[slot];
    A->mb = mb;
    A->step = step;
    A->first_sample = first_sample;
    A->train = train;
}

/* Adds the micro-batch's token losses to *loss_sum (backend memory) where the kernels
 * run; every tp rank holds the same losses, and tp rank 0 counts them. */
static void sum_losses(ctx *c, double *loss_sum)
{
    if (c->d.tr == 0)
        c->n->kn->sum_acc(c->n->kn, c->H->losses, c->d.T, loss_sum);
}

int pt_net_forward_chunk(pt_net *n, int slot, int chunk, const int32_t *tokens,
                         const int32_t *targets, float dloss, double *loss_sum, pt_err *err)
{
    ctx c = context(n, slot, dloss, err);
    pt_kernels *kn = n->kn;
    size_t tb = (size_t)c.d.T * sizeof(int32_t);
    if (dloss == 0)
        c.A->train = false; /* evaluation never drops */
    if (first_vs(n, chunk)) {
        kn->copy(kn, c.A->tokens, tokens, tb, PT_KCOPY_H2D);
        if (run_list(&c, LIST_EMBED_FWD))
            return -1;
        if (dropping(&c))
            dropout_rows(&c, c.A->x[0], NULL, own_row0(&c), c.d.R, DROP_EMBED);
    }
    for (int64_t i = 0; i < n->chunk_layers; i++) {
        at_layer(&c, chunk, i);
        c.next_l = i + 1 < n->chunk_layers ? c.l + 1 : -1;
        if (run_list(&c, LIST_LAYER_FWD))
            return -1;
    }
    c.l = -1;
    c.col_in = NULL;
    if (!last_vs(n, chunk))
        return 0;
    kn->copy(kn, c.A->targets, targets, tb, PT_KCOPY_H2D);
    if (run_list(&c, LIST_HEAD_FWD))
        return -1;
    sum_losses(&c, loss_sum);
    return 0;
}

/* Calls the engine's pt_net.grad_done, when it asked, once elements [lo, chunk end) of
 * the chunk's gradient are final for this micro-batch: lo is the first element of
 * layer l, or the one past its last with `past`, or with l < 0 the chunk's first. A
 * layer's parameters are one contiguous range of the buffer, the head's at the
 * chunk's end and the embedding's at its start (build_table in runtime/model.c). */
static int grads_done(ctx *c, int chunk, int64_t l, bool past)
{
    pt_net *n = c->n;
    if (!n->grad_done)
        return 0;
    int64_t lo = n->chunk_end[chunk], hi = n->chunk_begin[chunk];
    const pt_param *const *row = param_row(n, c->li); /* the layer's, resolved at allocation */
    for (int i = 0; l >= 0 && i < 2 * PT_PARAM_COUNT; i++) {
        const pt_param *q = row[i];
        if (!q)
            continue;
        lo = q->offset < lo ? q->offset : lo;
        hi = q->offset + q->count > hi ? q->offset + q->count : hi;
    }
    return n->grad_done(n->grad_done_ctx, chunk, l < 0 ? n->chunk_begin[chunk] : past ? hi : lo,
                        c->err);
}

int pt_net_backward_chunk(pt_net *n, int slot, int chunk, pt_err *err)
{
    ctx c = context(n, slot, 0, err);
    if (last_vs(n, chunk)) {
        n->kn->zero(n->kn, c.S->dres, act_bytes(&c, c.d.R * c.d.h));
        if (run_list(&c, LIST_HEAD_BWD))
            return -1;
        at_layer(&c, chunk, n->chunk_layers - 1);
        if (grads_done(&c, chunk, c.l, true))
            return -1;
    }
    for (int64_t i = n->chunk_layers - 1; i >= 0; i--) {
        at_layer(&c, chunk, i);
        c.next_l = i > 0 ? c.l - 1 : -1;
        if (n->zero && pt_zero_begin_backward(n, c.l, err))
            return -1;
        if (run_list(&c, LIST_LAYER_BWD) || grads_done(&c, chunk, c.l, false))
            return -1;
    }
    c.l = -1;
    c.col_in = NULL;
    if (first_vs(n, chunk)) {
        if (dropping(&c)) { /* the embedding's dropout, in place on the gradient */
            pt_scratch *S = c.S;
            n->kn->zero(n->kn, S->ddrop, act_bytes(&c, c.d.R * c.d.h));
            dropout_rows(&c, S->ddrop, S->dres, own_row0(&c), c.d.R, DROP_EMBED);
            n->kn->copy(n->kn, S->dres, S->ddrop, act_bytes(&c, c.d.R * c.d.h), PT_KCOPY_D2D);
        }
        if (run_list(&c, LIST_EMBED_BWD) || grads_done(&c, chunk, -1, false))
            return -1;
    }
    return 0;
}

int pt_net_forward(pt_net *n, int slot, const int32_t *tokens, const int32_t *targets,
                   float dloss, double *loss_sum, pt_err *err)
{
    if (n->layout.pp != 1 || n->layout.vp != 1) /* the layout rules keep vp > 1 to pp > 1 */
        return pt_err_set(err, "internal: the whole-model forward needs one pipeline stage of "
                               "one chunk");
    pt_kernels *kn = n->kn;
    kn->zero(kn, n->lsum, sizeof *n->lsum);
    if (pt_net_forward_chunk(n, slot, 0, tokens, targets, dloss, n->lsum, err))
        return -1;
    double sum = 0;
    kn->copy(kn, &sum, n->lsum, sizeof sum, PT_KCOPY_D2H);
    if (kn->sync(kn))
        return pt_err_set(err, "%s", kn->err);
    *loss_sum += sum;
    return pt_net_trace_resolve(n, err);
}

int pt_net_backward(pt_net *n, int slot, pt_err *err)
{
    if (n->layout.pp != 1 || n->layout.vp != 1)
        return pt_err_set(err, "internal: the whole-model backward needs one pipeline stage "
                               "of one chunk");
    if (pt_net_backward_chunk(n, slot, 0, err))
        return -1;
    if (n->kn->sync(n->kn))
        return pt_err_set(err, "%s", n->kn->err);
    return pt_net_trace_resolve(n, err);
}

const float *pt_net_last_logits(const pt_net *n, int slot)
{
    const pt_head_acts *H = head_of(n, n->slot[slot]);
    return H ? H->logits : NULL;
}
