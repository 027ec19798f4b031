/*
 * Where a micro-batch's tensors live on this rank: the sizes of one micro-batch through
 * a layer (pt_layer_dims, the shape the planner priced, split over tp and cp); the
 * activation slots, the head's buffers and the gradient scratch, each carved from one
 * backend allocation by the planner's list of ptrun's buffers (planner/buffers.c,
 * pt_buffers_of, which the memory model sums); the pool of slots the engine takes from
 * and gives back to; and the parameters the ops name (pt_param_ref), resolved once
 * into views of the parameter buffer or, under ZeRO 2/3, of its windows (zero.c). What
 * the ops compute on these buffers is layer.c's; net.c allocates them with the model.
 */
#include "model_internal.h"

#include <math.h>
#include <string.h>

/* ---- Sizes ------------------------------------------------------------------------------ */

pt_layer_dims pt_net_dims(const pt_net *n)
{
    const pt_model *m = &n->spec;
    const pt_layout *l = &n->layout;
    int t = l->tp;
    pt_rank_shape r = pt_rank_shape_of(m, l); /* the sizes the planner priced */
    pt_layer_dims d = {.b = l->mbs, .s = m->seq / l->cp, .T = r.tokens, .R = r.rows,
                       .h = (int)m->hidden, .a = (int)r.heads, .kh = (int)r.kv_heads,
                       .d = (int)r.head_dim, .f = (int)r.ffn, .v = (int)r.vocab, .t = t,
                       .tr = n->tp_rank, .cp = l->cp, .cr = n->cp_rank,
                       .sp = l->sp && t > 1};
    d.kv_share = pt_kv_head_copies(m, t);
    d.sc = d.cp > 1 ? d.s / 2 : d.s;
    pt_attn_shape at = pt_attn_shape_of(m, l); /* the head form the planner priced */
    d.u = at.u;
    d.ha = (int)at.heads;
    d.hkh = (int)at.kv_heads;
    return d;
}

pt_layer_dims pt_dims_attn(const pt_layer_dims *d)
{
    if (d->u <= 1)
        return *d;
    pt_layer_dims h = *d;
    int u = d->u;
    h.cp = d->cp / u;
    h.cr = d->cr / u;
    h.s = u * d->s;
    h.T = u * d->T;
    h.sc = h.cp > 1 ? u * d->sc : h.s;
    h.a = d->ha;
    h.kh = d->hkh;
    h.u = 1;
    return h;
}

int64_t pt_net_act_elems(const pt_net *n)
{
    pt_layer_dims d = pt_net_dims(n);
    return d.R * d.h;
}

int64_t pt_net_p2p_bytes(const pt_net *n)
{
    pt_layer_dims d = pt_net_dims(n);
    int64_t ab = (int64_t)pt_kdtype_bytes(n->kn->act_dtype);
    int64_t stage = d.R * d.h * ab;                      /* a stage boundary's activations */
    pt_layer_dims h = pt_dims_attn(&d); /* the ring's blocks: K, V and their gradients */
    int64_t ring = h.cp > 1 ? 4 * h.T * h.kh * h.d * ab : 0;
    return stage > ring ? stage : ring;
}

/* Context parallelism with causal load balancing (Megatron-LM's context parallel,
 * Liu et al. 2023's ring attention): the sequence is cut into 2·cp chunks and cp
 * rank i holds chunks i and 2·cp-1-i, so every rank gets the same share of the
 * causal triangle. Position of the first token of this rank's piece p (0 or 1). */
int64_t pt_dims_piece_pos(const pt_layer_dims *d, int cr, int piece)
{
    if (d->cp == 1)
        return 0;
    return (piece == 0 ? cr : 2 * d->cp - 1 - cr) * d->sc;
}

int pt_dims_pieces(const pt_layer_dims *d)
{
    return d->cp > 1 ? 2 : 1;
}

/* A rank's tokens are laid out chunk by chunk: rows [p·b·sc, (p+1)·b·sc) are chunk p
 * of each of the b sequences, (b, sc) — without cp, simply (b, s). So every op over a
 * chunk is one call on b sequences. */
void pt_net_cp_slice(const pt_net *n, const int32_t *full, int32_t *local)
{
    pt_layer_dims d = pt_net_dims(n);
    int64_t s = n->spec.seq;
    for (int p = 0; p < pt_dims_pieces(&d); p++)
        for (int64_t bi = 0; bi < d.b; bi++)
            memcpy(local + (p * d.b + bi) * d.sc,
                   full + bi * s + pt_dims_piece_pos(&d, d.cr, p),
                   (size_t)d.sc * sizeof *local);
}

/* ---- Allocation of slots and scratch ---------------------------------------------------- */

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
    if (n->fp8.recipe != PT_FP8_OFF)
        pt_buffers_fp8(&n->spec, &n->layout, B);
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
    L->atth = take_buf(c, B, PT_BUF_ATTH);
    L->x2 = take_buf(c, B, PT_BUF_X2);
    L->ln2 = take_buf(c, B, PT_BUF_LN2);
    L->ln2_mean = take_buf(c, B, PT_BUF_LN2_MEAN);
    L->ln2_rstd = take_buf(c, B, PT_BUF_LN2_RSTD);
    L->gate = take_buf(c, B, PT_BUF_GATE);
    L->up = take_buf(c, B, PT_BUF_UP);
    L->act = take_buf(c, B, PT_BUF_ACT);
    L->qkn = take_buf(c, B, PT_BUF_QKN);
    L->qkn_rstd = take_buf(c, B, PT_BUF_QKN_RSTD);
    L->moe_scores = take_buf(c, B, PT_BUF_MOE_SCORES);
    L->moe_idx = (int32_t *)take_buf(c, B, PT_BUF_MOE_IDX);
    L->moe_w = take_buf(c, B, PT_BUF_MOE_W);
    L->moe_pos = (int32_t *)take_buf(c, B, PT_BUF_MOE_POS);
    L->moe_auxg = take_buf(c, B, PT_BUF_MOE_AUXG);
    L->moe_xr = take_buf(c, B, PT_BUF_MOE_XR);
    L->moe_yp = take_buf(c, B, PT_BUF_MOE_YP);
}

/* Lays out one slot: one chunk's layers; with full recomputation all layers share one
 * set of views (pt_buffers_slot counts the same). */
static void carve_slot(carve *c, const pt_net *n, pt_acts *A)
{
    pt_buffers B;
    buffers_of(n, &B);
    int64_t L = n->slot_layers;
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
    S->dqkn = take_buf(c, &B, PT_BUF_DQKN);
    S->dqknorm = take_buf(c, &B, PT_BUF_DQKNORM);
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
    S->a2a_send = take_buf(c, &B, PT_BUF_A2A_SEND);
    S->a2a_recv = take_buf(c, &B, PT_BUF_A2A_RECV);
    S->hdatt = take_buf(c, &B, PT_BUF_HDATT);
    S->hdq = take_buf(c, &B, PT_BUF_HDQ);
    S->hdk = take_buf(c, &B, PT_BUF_HDK);
    S->hdv = take_buf(c, &B, PT_BUF_HDV);
    S->moe_logits = take_buf(c, &B, PT_BUF_MOE_LOGITS);
    S->moe_src = (int32_t *)take_buf(c, &B, PT_BUF_MOE_SRC);
    S->moe_counts = (int64_t *)take_buf(c, &B, PT_BUF_MOE_COUNTS);
    S->moe_tok = take_buf(c, &B, PT_BUF_MOE_TOK);
    S->moe_recv = take_buf(c, &B, PT_BUF_MOE_RECV);
    S->moe_em = take_buf(c, &B, PT_BUF_MOE_EM);
    S->moe_eg = take_buf(c, &B, PT_BUF_MOE_EG);
    S->moe_dw = take_buf(c, &B, PT_BUF_MOE_DW);
    S->moe_perm = (int32_t *)take_buf(c, &B, PT_BUF_MOE_PERM);
    S->moe_invperm = (int32_t *)take_buf(c, &B, PT_BUF_MOE_INVPERM);
    S->moe_drouter = take_buf(c, &B, PT_BUF_MOE_DROUTER);
    S->fp8_a = (uint8_t *)take_buf(c, &B, PT_BUF_FP8_A);
    S->fp8_b = (uint8_t *)take_buf(c, &B, PT_BUF_FP8_B);
    S->fp8_w = (uint8_t *)take_buf(c, &B, PT_BUF_FP8_W);
}

/* The widest per-token row any buffer has (values). */
static int64_t widest_row(const pt_layer_dims *d)
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
static bool buffer_sizes_fit(const pt_layer_dims *d)
{
    int64_t row, lse;
    return pt_prod64((int64_t[]){d->T, widest_row(d), 8}, 3, &row) &&
           pt_prod64((int64_t[]){d->b, d->a, d->s}, 3, &lse) && lse <= d->T * widest_row(d);
}

static int too_large(pt_err *err, const pt_net *n, const pt_layer_dims *d, int slots)
{
    return pt_err_set(err, "the activations of %d micro-batch(es) of %lld tokens (widest row "
                           "%lld values, %lld layers) are more bytes than this machine can "
                           "address", slots, (long long)d->T, (long long)widest_row(d),
                      (long long)n->n_layers);
}

static int alloc_slot(pt_net *n, const pt_layer_dims *d, int slots, pt_acts **out, pt_err *err)
{
    pt_acts *A = calloc(1, sizeof *A);
    int64_t L = n->slot_layers;
    size_t counts = (size_t)(L * pt_moe_layer_counts(n));
    *out = NULL;
    if (!A || !(A->x = calloc((size_t)(L + 1), sizeof *A->x)) ||
        !(A->layer = calloc((size_t)L, sizeof *A->layer)) ||
        (counts && !(A->moe_counts = calloc(counts, sizeof *A->moe_counts)))) {
        if (A) {
            free(A->x);
            free(A->layer);
        }
        free(A);
        return pt_err_set(err, "out of memory");
    }
    carve c = {0};
    carve_slot(&c, n, A);
    if (c.overflow) {
        free(A->x);
        free(A->layer);
        free(A->moe_counts);
        free(A);
        return too_large(err, n, d, slots);
    }
    n->bytes += (int64_t)c.used;
    c.base = n->kn->alloc(n->kn, c.used);
    if (!c.base) {
        free(A->x);
        free(A->layer);
        free(A->moe_counts);
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
static int fill_vocab_mask(pt_net *n, const pt_layer_dims *d, pt_head_acts *H, pt_err *err)
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

static int alloc_head(pt_net *n, const pt_layer_dims *d, pt_head_acts **out, pt_err *err)
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
    free(A->moe_counts);
    free(A);
}
int pt_tensors_check(const pt_net *n, int slots, pt_err *err)
{
    pt_layer_dims d = pt_net_dims(n);
    pt_buffers B;
    buffers_of(n, &B);
    if (B.overflow || !buffer_sizes_fit(&d))
        return too_large(err, n, &d, slots);
    return 0;
}

int pt_tensors_alloc(pt_net *n, int slots, pt_err *err)
{
    pt_layer_dims d = pt_net_dims(n);
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
    return 0;
}

void pt_tensors_free(pt_net *n)
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

/* ---- Parameters, resolved once ------------------------------------------------------------- */

/* The row of n->pref for layer li of this rank (0 .. n_layers-1), or with li < 0 the
 * parameters outside the layers: weight and bias of each pt_param_ref. */
const pt_param *const *pt_net_param_row(const pt_net *n, int64_t li)
{
    return n->pref + (size_t)(li < 0 ? n->n_layers : li) * PT_PARAM_COUNT * 2;
}

/* The experts' rows of layer l: their first projection's weights (the local experts'
 * gate weights, then in the second slot their up weights; the up weights first and
 * alone without SwiGLU) and their second's, each slot the first local expert's tensor,
 * the others after it (param_table.c's expert_params). */
static void resolve_experts(pt_net *n, int64_t l, pt_param_ref r, const pt_param **row)
{
    int64_t e0 = (int64_t)n->ep_rank * (n->spec.moe.experts / (n->layout.ep > 1 ? n->layout.ep : 1));
    bool swiglu = n->spec.act == PT_ACT_SWIGLU;
    const char *kinds[2] = {r == PT_PARAM_EXPERT_FC2 ? "down" : swiglu ? "gate" : "up",
                            r == PT_PARAM_EXPERT_FC1 && swiglu ? "up" : NULL};
    char name[64];
    for (int i = 0; i < 2; i++) {
        if (!kinds[i])
            continue;
        snprintf(name, sizeof name, "layers.%d.experts.%d.%s.w", (int)l, (int)e0, kinds[i]);
        row[2 * r + i] = pt_net_param(n, name);
    }
}

/* Fills n->pref from the parameter table's names, once: the ops name their parameters
 * by pt_param_ref, which the layer's row maps to the table's entry. */
int pt_net_resolve_params(pt_net *n, pt_err *err)
{
    size_t rows = (size_t)n->n_layers + 1;
    n->pref = calloc(rows * PT_PARAM_COUNT * 2, sizeof *n->pref);
    if (!n->pref)
        return pt_err_set(err, "out of memory");
    char name[64];
    for (int64_t li = 0; li <= n->n_layers; li++) {
        bool layer = li < n->n_layers;
        int c = 0; /* the chunk of local layer li */
        while (layer && c + 1 < n->layout.vp && li >= n->chunk_li[c + 1])
            c++;
        int64_t l = layer ? n->chunk_first[c] + (li - n->chunk_li[c]) : -1;
        const pt_param **row = n->pref + (size_t)li * PT_PARAM_COUNT * 2;
        for (int r = PT_PARAM_NONE + 1; r < PT_PARAM_COUNT; r++) {
            const char *base = pt_param_ref_name((pt_param_ref)r);
            if (pt_param_ref_in_layer((pt_param_ref)r) != layer)
                continue;
            if (r == PT_PARAM_WTE || r == PT_PARAM_WPE ||
                (r == PT_PARAM_HEAD && n->spec.tied_embeddings)) {
                /* the output head's weight is the token embedding when tied */
                row[2 * r] = pt_net_param(n, r == PT_PARAM_HEAD ? "wte" : base);
                continue;
            }
            if (r == PT_PARAM_EXPERT_FC1 || r == PT_PARAM_EXPERT_FC2) {
                if (layer && pt_model_layer_moe(&n->spec, l))
                    resolve_experts(n, l, (pt_param_ref)r, row);
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

pt_param_view pt_net_param_view(const pt_net *n, const pt_param *p)
{
    if (!p)
        return (pt_param_view){NULL, NULL};
    if (n->zero)
        return (pt_param_view){pt_zero_weight((pt_net *)n, p), pt_zero_grad((pt_net *)n, p)};
    size_t ab = pt_kdtype_bytes(n->kn->act_dtype);
    return (pt_param_view){(const float *)((const char *)n->w + (size_t)p->offset * ab),
                   n->grad + p->offset};
}

/* ---- A micro-batch's buffers, for the engine and the chunk drivers ----------------------- */

/* The head's buffers of the micro-batch in slot A: a pool indexed by micro-batch (the
 * last chunk's micro-batches in flight are consecutive). */
pt_head_acts *pt_net_head_of(const pt_net *n, const pt_acts *A)
{
    return n->head ? n->head[A->mb % n->n_head] : NULL;
}
float *pt_net_chunk_input(pt_net *n, int slot)
{
    return n->slot[slot]->x[0];
}

float *pt_net_chunk_output(pt_net *n, int slot, int chunk)
{
    return n->slot[slot]->x[n->chunk_layers[chunk]];
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

const float *pt_net_last_logits(const pt_net *n, int slot)
{
    const pt_head_acts *H = pt_net_head_of(n, n->slot[slot]);
    return H ? H->logits : NULL;
}
