/*
 * A mixture-of-experts layer's MLP on this rank (Shazeer et al. 2017; Fedus et al.
 * 2022): the planner's MoE ops (planner/ops.c's moe_forward and moe_backward) mapped to
 * the kernels' routing, dispatch and grouped GEMMs (kernels.h, "Mixture of experts")
 * and the communication layer's all-to-all with counts per rank.
 *
 * The way of a micro-batch's R tokens through one layer:
 *   router    logits = ln2 · Wr^T, the top k of each token's scores and their weights;
 *   aux       the load-balancing loss of each sequence (below), its gradient kept;
 *   permute   the dispatch plan: every kept (token, slot) copy gets a row, this rank's
 *             copies expert by expert (E experts), and the copies gathered in that order;
 *   dispatch  (ep > 1) the ep group's counts gathered; each rank's copies for the
 *             experts of rank j sent to j (all-to-all with counts per rank); what arrives
 *             (sending rank by sending rank) put in the order of this rank's E/ep
 *             experts;
 *   gather    (etp > 1) the etp group's rows gathered, rank by rank, each rank's
 *             padded to the group's most (P), so that every rank's slice of the local
 *             experts' MLPs sees every row of the group;
 *   experts   the grouped GEMMs of the local experts' gate and up projections, their
 *             activation, the down projection (etp > 1: one grouped GEMM per etp rank's
 *             rows, on this rank's fe/etp columns of each expert);
 *   scatter   (etp > 1) the down projection's partial sums summed over the etp group,
 *             each rank getting its own rows (a reduce-scatter of P rows a rank);
 *   combine   the rows back to the ranks that sent them, in their own order;
 *   unpermute each token's output: its copies' sum weighted by the router.
 * The backward mirrors it. With ep = 1 the copies never leave the rank and the expert
 * order is the dispatch plan's own. etp splits each expert's MLP as tp splits a dense
 * one (Megatron-Core's expert tensor parallelism): gate and up by output rows, down by
 * input columns (param_table.c).
 *
 * The load-balancing loss is per sequence, as DeepSeek-V3's sequence-wise balance
 * loss (and Megatron-Core's --moe-router-load-balancing-type seq_aux_loss): for a
 * sequence of S tokens, f_e = E·c_e/(k·S) (c_e its copies routed to expert e) and
 * P_e = Σ_t s_te / S, loss α·Σ_e f_e·P_e, averaged over the step's sequences. So it is
 * the same whichever way a step's sequences are split over ranks and micro-batches,
 * and every layout trains the same model. Its gradient of score s_te is α·f_e/(S·B)
 * for B sequences a step: α·f_e times the loss scale of one token (dloss).
 *
 * Buffers are sized for the most rows a layer can route to this rank
 * (pt_moe_recv_rows_max): dropless, every token of the ep group; a capacity factor
 * drops what passes its cap (counted). The experts' parameters lie at the start of
 * their chunk's buffer, each kind one (E/ep, out, in) array (param_table.c).
 */
#include "layer_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the host keeps between the ops of one layer and across the step. */
struct pt_moe {
    int ep, E, G, k;          /* ep group size, experts, local experts, top-k */
    int etp;                  /* etp group size */
    int64_t N;                /* most rows received (pt_moe_recv_rows_max) */
    int64_t cap;              /* the capacity's cap per expert, -1: dropless */
    int64_t *cnt;             /* (E) this rank's rows per expert */
    double *dcnt;             /* (ep·E, or etp·G where more) counts as doubles, gathered */
    int64_t *send, *recv;     /* (ep) rows to and from each rank of the ep group */
    int64_t *sendc, *recvc;   /* (ep) the all-to-all's counts of values */
    int64_t *gcnt;            /* (G) rows each local expert received */
    int32_t *perm, *invperm;  /* (N) host copies of the orders */
    int32_t *idx;             /* (R·k) the chosen experts, for the loss's counts */
    float *colsum;            /* (4·b·E) score sums per sequence, then the loss's gradient;
                                 the copies' counts per sequence after them; then each
                                 run's sums (aux_loss) */
    pt_moe_stats stats;
};

int pt_moe_init(pt_net *n, pt_err *err)
{
    const pt_model *m = &n->spec;
    if (m->moe.experts <= 0)
        return 0;
    pt_layer_dims d = pt_net_dims(n);
    struct pt_moe *x = calloc(1, sizeof *x);
    if (!(n->moe = x))
        return pt_err_set(err, "out of memory");
    x->ep = n->layout.ep > 1 ? n->layout.ep : 1;
    x->etp = n->layout.etp > 1 ? n->layout.etp : 1;
    x->E = (int)m->moe.experts;
    x->G = x->E / x->ep;
    x->k = (int)m->moe.top_k;
    x->N = pt_moe_recv_rows_max(m, &n->layout);
    x->cap = pt_moe_capacity_rows(m, d.R);
    if (x->N > INT32_MAX || d.R * x->k > INT32_MAX)
        return pt_err_set(err, "a mixture of experts' layer routes %lld rows to one rank: "
                               "more than its int32 row indices hold", (long long)x->N);
    x->cnt = calloc((size_t)x->E, sizeof *x->cnt);
    x->dcnt = calloc((size_t)(x->ep * x->E > x->etp * x->G ? x->ep * x->E : x->etp * x->G),
                     sizeof *x->dcnt);
    x->send = calloc((size_t)x->ep, sizeof *x->send);
    x->recv = calloc((size_t)x->ep, sizeof *x->recv);
    x->sendc = calloc((size_t)x->ep, sizeof *x->sendc);
    x->recvc = calloc((size_t)x->ep, sizeof *x->recvc);
    x->gcnt = calloc((size_t)x->G, sizeof *x->gcnt);
    x->perm = calloc((size_t)(x->N > 0 ? x->N : 1), sizeof *x->perm);
    x->invperm = calloc((size_t)(x->N > 0 ? x->N : 1), sizeof *x->invperm);
    x->idx = calloc((size_t)(d.R * x->k), sizeof *x->idx);
    x->colsum = calloc((size_t)(4 * d.b * x->E), sizeof *x->colsum);
    if (!x->cnt || !x->dcnt || !x->send || !x->recv || !x->sendc || !x->recvc || !x->gcnt || !x->perm || !x->invperm ||
        !x->idx || !x->colsum)
        return pt_err_set(err, "out of memory for the experts' routing tables");
    return 0;
}

void pt_moe_free(pt_net *n)
{
    struct pt_moe *x = n->moe;
    if (!x)
        return;
    free(x->cnt);
    free(x->dcnt);
    free(x->send);
    free(x->recv);
    free(x->sendc);
    free(x->recvc);
    free(x->gcnt);
    free(x->perm);
    free(x->invperm);
    free(x->idx);
    free(x->colsum);
    free(x);
    n->moe = NULL;
}

void pt_moe_take_stats(pt_net *n, pt_moe_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!n->moe)
        return;
    *out = n->moe->stats;
    memset(&n->moe->stats, 0, sizeof n->moe->stats);
}

/* ---- Counts and orders ---------------------------------------------------------------- */

int64_t pt_moe_layer_counts(const pt_net *n)
{
    int64_t E = n->spec.moe.experts, ep = n->layout.ep > 1 ? n->layout.ep : 1;
    int64_t etp = n->layout.etp > 1 ? n->layout.etp : 1;
    return E > 0 ? ep * E + etp * (E / ep) : 0;
}

/* The ep group's counts of layer row `ai` of the slot: rank j's rows for expert e at
 * [j·E + e]; after them the etp group's, rank r's rows for local expert g at
 * [ep·E + r·G + g]. */
static int64_t *slot_counts(const pt_layer_ctx *c)
{
    return c->A->moe_counts + (size_t)c->ai * (size_t)pt_moe_layer_counts(c->n);
}

/* From the ep group's counts: the rows this rank sends each rank and receives from it,
 * and each local expert's rows. Returns the rows received. */
static int64_t tally(struct pt_moe *x, const int64_t *all, int me)
{
    int64_t total = 0;
    for (int g = 0; g < x->G; g++)
        x->gcnt[g] = 0;
    for (int j = 0; j < x->ep; j++) {
        x->send[j] = x->recv[j] = 0;
        for (int g = 0; g < x->G; g++) {
            x->send[j] += all[(size_t)me * x->E + j * x->G + g];
            x->recv[j] += all[(size_t)j * x->E + me * x->G + g];
            x->gcnt[g] += all[(size_t)j * x->E + me * x->G + g];
        }
        total += x->recv[j];
    }
    return total;
}

/* The two orders of the received rows (ep > 1): they arrive sending rank by sending rank,
 * each rank's expert by expert; the GEMMs want them expert by expert, each expert's rank
 * by rank. perm[expert order] = arrival order, invperm the inverse; uploaded. */
static int orders(pt_layer_ctx *c, const int64_t *all, int me)
{
    struct pt_moe *x = c->n->moe;
    pt_kernels *kn = c->n->kn;
    int64_t em = 0, total;
    for (int g = 0; g < x->G; g++) {
        int64_t arrived = 0; /* where rank j's rows for expert g start on arrival */
        for (int j = 0; j < x->ep; j++) {
            int64_t before = 0;
            for (int h = 0; h < g; h++)
                before += all[(size_t)j * x->E + me * x->G + h];
            int64_t rows = all[(size_t)j * x->E + me * x->G + g];
            for (int64_t r = 0; r < rows; r++) {
                x->perm[em + r] = (int32_t)(arrived + before + r);
                x->invperm[arrived + before + r] = (int32_t)(em + r);
            }
            em += rows;
            arrived += x->recv[j];
        }
    }
    total = em;
    kn->copy(kn, c->S->moe_perm, x->perm, (size_t)total * sizeof *x->perm, PT_KCOPY_H2D);
    kn->copy(kn, c->S->moe_invperm, x->invperm, (size_t)total * sizeof *x->invperm,
             PT_KCOPY_H2D);
    /* the host tables are rewritten by the layer's next op */
    return kn->sync(kn) ? pt_err_set(c->err, "%s", kn->err) : 0;
}

/* Waits for the backend (the host is about to read what it copied back). */
static int wait_kernels(pt_layer_ctx *c)
{
    return c->n->kn->sync(c->n->kn) ? pt_err_set(c->err, "%s", c->n->kn->err) : 0;
}

static pt_comm_dtype act_comm(const pt_layer_ctx *c)
{
    return c->n->kn->act_dtype == PT_KDTYPE_BF16 ? PT_COMM_BF16 : PT_COMM_F32;
}

/* The busiest rank's and expert's rows over their means, from the ep group's counts. */
static void note_balance(struct pt_moe *x, const int64_t *all)
{
    double total = 0, rank_max = 0, expert_max = 0;
    for (int e = 0; e < x->E; e++) {
        double rows = 0;
        for (int j = 0; j < x->ep; j++)
            rows += (double)all[(size_t)j * x->E + e];
        total += rows;
        expert_max = rows > expert_max ? rows : expert_max;
    }
    for (int r = 0; r < x->ep; r++) {
        double rows = 0;
        for (int j = 0; j < x->ep; j++)
            for (int g = 0; g < x->G; g++)
                rows += (double)all[(size_t)j * x->E + r * x->G + g];
        rank_max = rows > rank_max ? rows : rank_max;
    }
    if (total <= 0)
        return;
    x->stats.imbalance += rank_max / (total / x->ep);
    x->stats.expert_max += expert_max / (total / x->E);
    x->stats.events += 1;
}

/* ---- The ops ---------------------------------------------------------------------------- */

static const float *weights(const pt_layer_ctx *c, pt_param_ref r, int slot, float **grad)
{
    pt_param_view v = pt_net_param_view(c->n, pt_net_param_row(c->n, c->li)[2 * r + slot]);
    if (grad)
        *grad = v.g;
    return v.w;
}

/* The k-th run of this rank's R rows that lie in one piece of one sequence: rows
 * [*lo, *hi) of its R, of sequence *seq of the micro-batch. A layer's T rows are the
 * sequences' pieces back to back, b·pieces runs of sc rows (piece p of sequence bi at
 * run p·b + bi: tensors.c's pt_net_cp_slice), this rank's R of them a run of rows with
 * sp. false past the last. */
static bool run_at(const pt_layer_ctx *c, int64_t k, int64_t *lo, int64_t *hi, int64_t *seq)
{
    const pt_layer_dims *d = &c->d;
    int64_t row0 = pt_layer_own_row0(c), first = row0 / d->sc;
    int64_t a = (first + k) * d->sc, b = a + d->sc;
    if (a >= row0 + d->R)
        return false;
    a = a > row0 ? a : row0;
    b = b < row0 + d->R ? b : row0 + d->R;
    *lo = a - row0;
    *hi = b - row0;
    *seq = (first + k) % d->b;
    return true;
}

/* The load-balancing loss of each sequence of the micro-batch (the top's formula): its
 * value into the step's figures and its gradient of the scores into L->moe_auxg. The
 * host reads the experts chosen and the scores' column sums over each run of a
 * sequence's rows here; with sp and cp a sequence's rows lie on several ranks, whose
 * sums and counts are added over tp and over cp first. One wait a layer. */
static int aux_loss(pt_layer_ctx *c, bool again)
{
    pt_net *n = c->n;
    struct pt_moe *x = n->moe;
    pt_kernels *kn = n->kn;
    pt_layer_acts *L = &c->A->layer[c->ai];
    const pt_layer_dims *d = &c->d;
    int64_t S = d->s * d->cp, b = d->b, bE = b * x->E, lo, hi, seq, runs = 0;
    float *part = L->moe_auxg + 2 * bE; /* each run's sums, (runs, E) */
    for (; run_at(c, runs, &lo, &hi, &seq); runs++)
        kn->moe_score_colsum(kn, part + runs * x->E, L->moe_scores + lo * x->E, hi - lo, x->E);
    float *sums = x->colsum, *counts = x->colsum + bE; /* exact: counts below 2^24 */
    kn->copy(kn, sums + 2 * bE, part, (size_t)(runs * x->E) * sizeof(float), PT_KCOPY_D2H);
    kn->copy(kn, x->idx, L->moe_idx, (size_t)(d->R * x->k) * sizeof(int32_t), PT_KCOPY_D2H);
    if (wait_kernels(c))
        return -1;
    for (int64_t i = 0; i < 2 * bE; i++)
        sums[i] = 0;
    for (int64_t r = 0; run_at(c, r, &lo, &hi, &seq); r++) {
        for (int e = 0; e < x->E; e++)
            sums[seq * x->E + e] += x->colsum[2 * bE + r * x->E + e];
        for (int64_t t = lo; t < hi; t++)
            for (int j = 0; j < x->k; j++)
                counts[seq * x->E + x->idx[t * x->k + j]] += 1;
    }
    /* a sequence's rows on the other tp (sp) and cp ranks */
    for (int g = 0; g < 2; g++) {
        if ((g == 0 ? d->t : d->cp) == 1)
            continue;
        kn->copy(kn, L->moe_auxg, x->colsum, (size_t)(2 * bE) * sizeof(float), PT_KCOPY_H2D);
        if (pt_comm_allreduce(n->comm, g == 0 ? PT_GROUP_TP : PT_GROUP_CP, L->moe_auxg, 2 * bE,
                              c->err))
            return -1;
        kn->copy(kn, x->colsum, L->moe_auxg, (size_t)(2 * bE) * sizeof(float), PT_KCOPY_D2H);
        if (wait_kernels(c))
            return -1;
    }
    double alpha = n->spec.moe.aux_loss;
    for (int64_t i = 0; i < bE; i++) {
        double f = (double)x->E * (double)counts[i] / ((double)x->k * (double)S);
        /* every tp and cp rank holds the same figures: their rank 0 counts them */
        if (c->dloss > 0 && !again && d->tr == 0 && d->cr == 0)
            x->stats.aux += alpha * f * (double)sums[i] / (double)S;
        sums[i] = (float)(alpha * f * (double)c->A->dloss); /* the forward's scale */
    }
    kn->copy(kn, L->moe_auxg, sums, (size_t)bE * sizeof(float), PT_KCOPY_H2D);
    return wait_kernels(c); /* the host buffer is reused by the next layer */
}

/* Where this rank's rows for its local experts go in expert order: the experts' input,
 * or with etp > 1 the rows the etp group gathers from. */
static float *local_rows(const pt_layer_ctx *c)
{
    return c->n->moe->etp > 1 ? c->S->moe_em : c->A->layer[c->ai].moe_xr;
}

/* The dispatch plan and the copies gathered into expert order (the permute op). */
static int permute(pt_layer_ctx *c, const float *ln2, bool again)
{
    pt_net *n = c->n;
    struct pt_moe *x = n->moe;
    pt_kernels *kn = n->kn;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_scratch *S = c->S;
    int64_t R = c->d.R;
    kn->moe_dispatch_plan(kn, L->moe_pos, S->moe_src, S->moe_counts, L->moe_idx, R, x->E, x->k,
                          x->cap);
    kn->copy(kn, x->cnt, S->moe_counts, (size_t)x->E * sizeof *x->cnt, PT_KCOPY_D2H);
    if (wait_kernels(c))
        return -1;
    int64_t m = 0;
    for (int e = 0; e < x->E; e++)
        m += x->cnt[e];
    if (c->dloss > 0 && !again) {
        x->stats.dropped += (double)(R * x->k - m);
        x->stats.assigned += (double)(R * x->k);
    }
    int64_t *all = slot_counts(c);
    memcpy(all + (size_t)n->ep_rank * x->E, x->cnt, (size_t)x->E * sizeof *all);
    kn->moe_gather_rows(kn, x->ep > 1 ? S->moe_tok : local_rows(c), ln2, S->moe_src, m, c->d.h);
    if (x->ep == 1 && c->dloss > 0 && !again)
        note_balance(x, all);
    return 0;
}

static int exchange(pt_layer_ctx *c, const float *in, float *out, bool forward);

/* Every rank's n counts `mine` of group `kind` (this rank `rank` of `size`) into out
 * (size·n, group order), through the backend's `dev` (size·n doubles): the collectives
 * move backend memory, and doubles hold counts exactly. */
static int gather_counts(pt_layer_ctx *c, int kind, int rank, int size, const int64_t *mine,
                         int n, double *dev, int64_t *out)
{
    pt_kernels *kn = c->n->kn;
    double *host = c->n->moe->dcnt;
    for (int i = 0; i < n; i++)
        host[i] = (double)mine[i];
    kn->copy(kn, dev + (size_t)rank * n, host, (size_t)n * sizeof(double), PT_KCOPY_H2D);
    if (pt_comm_allgather_t(c->n->comm, kind, PT_COMM_F64, dev + (size_t)rank * n, dev, n,
                            c->err))
        return -1;
    kn->copy(kn, host, dev, (size_t)(size * n) * sizeof(double), PT_KCOPY_D2H);
    if (wait_kernels(c))
        return -1;
    for (int i = 0; i < size * n; i++)
        out[i] = (int64_t)host[i];
    return 0;
}

/* The ep group's counts gathered, this rank's copies sent to their experts' ranks and
 * what arrives put in expert order (the dispatch op; nothing to do with ep = 1). */
static int dispatch(pt_layer_ctx *c, bool again)
{
    pt_net *n = c->n;
    struct pt_moe *x = n->moe;
    pt_kernels *kn = n->kn;
    pt_scratch *S = c->S;
    if (x->ep == 1)
        return 0;
    int64_t *all = slot_counts(c);
    double *dev = (double *)(S->moe_counts + x->E); /* (ep·E) doubles, gathered */
    if (gather_counts(c, PT_GROUP_EP, n->ep_rank, x->ep, x->cnt, x->E, dev, all))
        return -1;
    int64_t got = tally(x, all, n->ep_rank);
    if (got > x->N)
        return pt_err_set(c->err, "internal: %lld rows routed to this rank's experts, its "
                                  "buffers hold %lld", (long long)got, (long long)x->N);
    if (exchange(c, S->moe_tok, S->moe_recv, true) || orders(c, all, n->ep_rank))
        return -1;
    kn->moe_gather_rows(kn, local_rows(c), S->moe_recv, S->moe_perm, got, c->d.h);
    if (c->dloss > 0 && !again)
        note_balance(x, all);
    return 0;
}

/* Rows moved between the ranks of the ep group: `forward` the way the copies went
 * (sending counts this rank's), else back (the counts swapped). */
static int exchange(pt_layer_ctx *c, const float *in, float *out, bool forward)
{
    struct pt_moe *x = c->n->moe;
    int64_t h = c->d.h;
    for (int j = 0; j < x->ep; j++) {
        x->sendc[j] = (forward ? x->send[j] : x->recv[j]) * h;
        x->recvc[j] = (forward ? x->recv[j] : x->send[j]) * h;
    }
    return pt_comm_alltoallv_t(c->n->comm, PT_GROUP_EP, act_comm(c), in, x->sendc, out,
                               x->recvc, c->err);
}

/* The counts of the slot's layer back into the tables (the backward, or an op after the
 * dispatch): rows received. */
static int64_t recall(pt_layer_ctx *c)
{
    pt_net *n = c->n;
    return tally(n->moe, slot_counts(c), n->ep_rank);
}

/* ---- Expert tensor parallelism ---------------------------------------------------------- */

/* The rows of run r (below): cnt[r·G + g] for each local expert g. */
static int64_t run_rows(const struct pt_moe *x, const int64_t *cnt, int r)
{
    int64_t rows = 0;
    for (int g = 0; g < x->G; g++)
        rows += cnt[r * x->G + g];
    return rows;
}

/* The experts' rows as the grouped GEMMs take them: etp runs (one without etp), run r
 * (rank r of the etp group's rows) from row r·P, cnt[r·G + g] rows for local expert g.
 * Returns P, the most rows of a run (with etp = 1, the rows received). */
static int64_t runs(pt_layer_ctx *c, const int64_t **cnt)
{
    struct pt_moe *x = c->n->moe;
    int64_t got = recall(c), P = 0;
    if (x->etp == 1) {
        *cnt = x->gcnt;
        return got;
    }
    *cnt = slot_counts(c) + (size_t)(x->ep * x->E);
    for (int r = 0; r < x->etp; r++) {
        int64_t rows = run_rows(x, *cnt, r);
        P = rows > P ? rows : P;
    }
    return P;
}

/* The etp group's rows per local expert gathered into the slot's table (the forward's
 * gather; the ops after it and the backward read them back). */
static int etp_counts(pt_layer_ctx *c)
{
    pt_net *n = c->n;
    struct pt_moe *x = n->moe;
    double *dev = (double *)(c->S->moe_counts + (size_t)((x->ep + 1) * x->E));
    recall(c);
    return gather_counts(c, PT_GROUP_ETP, n->etp_rank, x->etp, x->gcnt, x->G, dev,
                         slot_counts(c) + (size_t)(x->ep * x->E));
}

/* etp's gather (this rank's rows `in` into `out`, P rows a rank) or reduce-scatter (the
 * group's partial sums `in`, this rank's P rows of their sum into `out`). */
static int etp_move(pt_layer_ctx *c, const float *in, float *out, bool gather)
{
    const int64_t *cnt;
    int64_t P = runs(c, &cnt);
    if (P == 0) /* every rank of the group finds the same P: none calls */
        return 0;
    pt_comm *comm = c->n->comm;
    int64_t n = P * c->d.h;
    return gather ? pt_comm_allgather_t(comm, PT_GROUP_ETP, act_comm(c), in, out, n, c->err)
                  : pt_comm_reducescatter_t(comm, PT_GROUP_ETP, act_comm(c), in, out, n,
                                            c->err);
}

/* The gradient of the layer's MLP output on this rank's rows: the residual stream's,
 * through the branch's dropout. */
static const float *branch_grad(pt_layer_ctx *c)
{
    pt_scratch *S = c->S;
    if (!pt_layer_dropping(c))
        return S->dres;
    c->n->kn->zero(c->n->kn, S->ddrop, pt_act_bytes(c, c->d.R * c->d.h));
    pt_layer_dropout_rows(c, S->ddrop, S->dres, pt_layer_own_row0(c), c->d.R, PT_DROP_MLP);
    return S->ddrop;
}

/* The router's backward from the weights' gradient (and the load-balancing loss's):
 * run by run of a sequence's rows where that loss has a gradient per sequence. */
static void route_backward(pt_layer_ctx *c)
{
    pt_net *n = c->n;
    struct pt_moe *x = n->moe;
    pt_kernels *kn = n->kn;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_scratch *S = c->S;
    const pt_layer_dims *d = &c->d;
    int score = n->spec.moe.score == PT_ROUTER_SIGMOID ? PT_KMOE_SIGMOID : PT_KMOE_SOFTMAX;
    bool renorm = n->spec.moe.renorm;
    int64_t lo = 0, hi = d->R, seq = 0;
    for (int64_t r = 0; L->moe_auxg ? run_at(c, r, &lo, &hi, &seq) : r == 0; r++) {
        kn->moe_route_backward(kn, pt_act_at(c, S->moe_logits, lo * x->E), S->moe_dw + lo * x->k,
                               L->moe_auxg ? L->moe_auxg + seq * x->E : NULL,
                               L->moe_scores + lo * x->E, L->moe_idx + lo * x->k,
                               L->moe_w + lo * x->k, hi - lo, x->E, x->k, score, renorm);
    }
}

/* The router's weight gradient: of this rank's rows, summed over tp where the ranks
 * hold other rows (sp), as a norm's under sp. */
static int router_wgrad(pt_layer_ctx *c, const float *ln2, const float *wr, float *dwr)
{
    pt_kernels *kn = c->n->kn;
    const pt_layer_dims *d = &c->d;
    int E = c->n->moe->E;
    if (d->t == 1) {
        kn->matmul_backward(kn, NULL, dwr, NULL, c->S->moe_logits, ln2, wr, d->R, d->h, E);
        return 0;
    }
    float *part = c->S->moe_drouter;
    kn->zero(kn, part, (size_t)E * (size_t)d->h * sizeof(float));
    kn->matmul_backward(kn, NULL, part, NULL, c->S->moe_logits, ln2, wr, d->R, d->h, E);
    /* the collective is ordered after the kernels on every backend (comm.h) */
    if (pt_comm_allreduce(c->n->comm, PT_GROUP_TP, part, (int64_t)E * d->h, c->err))
        return -1;
    kn->add_f32(kn, dwr, part, (int64_t)E * d->h);
    return 0;
}

/* One of the experts' GEMMs or their activation (forward or backward), run by run of
 * the rows (runs: etp of them, one without etp). The second GEMM's output and the
 * gradients of the experts' rows lie in the rows by expert, or with etp in the etp
 * group's rows, P a rank, before their reduce-scatter and after their gather. */
static int experts(pt_layer_ctx *c, pt_op_kind kind)
{
    pt_net *n = c->n;
    struct pt_moe *x = n->moe;
    pt_kernels *kn = n->kn;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_scratch *S = c->S;
    int h = c->d.h, G = x->G, fe = (int)(n->spec.moe.expert_ffn / x->etp);
    bool swiglu = n->spec.act == PT_ACT_SWIGLU;
    float *dw1, *dw1u = NULL, *dw2;
    const float *w1 = weights(c, PT_PARAM_EXPERT_FC1, 0, &dw1);
    const float *w1u = swiglu ? weights(c, PT_PARAM_EXPERT_FC1, 1, &dw1u) : NULL;
    const float *w2 = weights(c, PT_PARAM_EXPERT_FC2, 0, &dw2);
    /* without SwiGLU the first projection is the up one alone: its output is up */
    float *fc1_out = swiglu ? L->gate : L->up, *dfc1 = swiglu ? S->dgate : S->dup;
    /* the second GEMM's output and the experts' rows' gradients */
    float *rows_out = x->etp > 1 ? S->moe_eg : x->ep > 1 ? S->moe_em : L->moe_yp;
    float *drows = x->etp > 1 ? S->moe_eg : S->moe_em;
    const int64_t *cnt;
    int64_t P = runs(c, &cnt), span = P * x->etp; /* the rows the buffers cover */
    if (kind == PT_OPK_EXPERT_FC2_DGRAD) /* the gradients below accumulate */
        kn->zero(kn, S->dact, pt_act_bytes(c, span * fe));
    if (kind == PT_OPK_EXPERT_ACT_BWD) {
        kn->zero(kn, S->dup, pt_act_bytes(c, span * fe));
        if (swiglu)
            kn->zero(kn, S->dgate, pt_act_bytes(c, span * fe));
    }
    if (kind == PT_OPK_EXPERT_FC1_DGRAD)
        kn->zero(kn, drows, pt_act_bytes(c, span * h));
    for (int r = 0; r < x->etp; r++) {
        const int64_t *gc = cnt + (size_t)r * G;
        int64_t rows = x->etp == 1 ? P : run_rows(x, cnt, r), o = (int64_t)r * P;
        if (rows == 0)
            continue;
#define AT(buf, cols) pt_act_at(c, (buf), o * (int64_t)(cols))
        switch (kind) {
        case PT_OPK_EXPERT_FC1:
            kn->matmul_grouped_forward(kn, AT(fc1_out, fe), AT(L->moe_xr, h), w1, gc, G, h, fe);
            if (swiglu)
                kn->matmul_grouped_forward(kn, AT(L->up, fe), AT(L->moe_xr, h), w1u, gc, G, h,
                                           fe);
            break;
        case PT_OPK_EXPERT_ACT:
            if (swiglu)
                kn->swiglu_forward(kn, AT(L->act, fe), AT(L->gate, fe), AT(L->up, fe), rows, fe);
            else
                kn->gelu_forward(kn, AT(L->act, fe), AT(L->up, fe), rows * fe);
            break;
        case PT_OPK_EXPERT_FC2:
            kn->matmul_grouped_forward(kn, AT(rows_out, h), AT(L->act, fe), w2, gc, G, fe, h);
            break;
        case PT_OPK_EXPERT_FC2_DGRAD:
            kn->matmul_grouped_backward(kn, AT(S->dact, fe), NULL, AT(drows, h), AT(L->act, fe),
                                        w2, gc, G, fe, h);
            break;
        case PT_OPK_EXPERT_FC2_WGRAD:
            kn->matmul_grouped_backward(kn, NULL, dw2, AT(drows, h), AT(L->act, fe), w2, gc, G,
                                        fe, h);
            break;
        case PT_OPK_EXPERT_ACT_BWD:
            if (swiglu)
                kn->swiglu_backward(kn, AT(S->dgate, fe), AT(S->dup, fe), AT(S->dact, fe),
                                    AT(L->gate, fe), AT(L->up, fe), rows, fe);
            else
                kn->gelu_backward(kn, AT(S->dup, fe), AT(S->dact, fe), AT(L->up, fe), rows * fe);
            break;
        case PT_OPK_EXPERT_FC1_DGRAD:
            kn->matmul_grouped_backward(kn, AT(drows, h), NULL, AT(dfc1, fe), AT(L->moe_xr, h),
                                        w1, gc, G, h, fe);
            if (swiglu)
                kn->matmul_grouped_backward(kn, AT(drows, h), NULL, AT(S->dup, fe),
                                            AT(L->moe_xr, h), w1u, gc, G, h, fe);
            break;
        case PT_OPK_EXPERT_FC1_WGRAD:
            kn->matmul_grouped_backward(kn, NULL, dw1, AT(dfc1, fe), AT(L->moe_xr, h), w1, gc,
                                        G, h, fe);
            if (swiglu)
                kn->matmul_grouped_backward(kn, NULL, dw1u, AT(S->dup, fe), AT(L->moe_xr, h),
                                            w1u, gc, G, h, fe);
            break;
        default:
            return pt_err_set(c->err, "internal: op '%s' is not one of the experts' GEMMs",
                              pt_op_kind_name(kind));
        }
#undef AT
    }
    return 0;
}

int pt_moe_run_op(pt_layer_ctx *c, const pt_op *op, const float *in, float *out)
{
    pt_net *n = c->n;
    struct pt_moe *x = n->moe;
    pt_kernels *kn = n->kn;
    pt_layer_acts *L = &c->A->layer[c->ai];
    pt_scratch *S = c->S;
    const pt_layer_dims *d = &c->d;
    int h = d->h, E = x ? x->E : 0, k = x ? x->k : 0;
    if (!x || !L->moe_scores)
        return pt_err_set(c->err, "internal: op '%s' on a rank without experts' buffers",
                          pt_op_kind_name(op->kind));
    int64_t R = d->R;
    bool ep = x->ep > 1, again = op->recompute;
    float *dwr;
    const float *wr = weights(c, PT_PARAM_ROUTER, 0, &dwr);
    int64_t got = 0;
    switch (op->kind) {
    case PT_OPK_ROUTER:
        kn->matmul_forward(kn, S->moe_logits, in, wr, NULL, R, h, E);
        return 0;
    case PT_OPK_MOE_ROUTE:
        kn->moe_route_forward(kn, L->moe_scores, L->moe_idx, L->moe_w, S->moe_logits, R, E, k,
                              n->spec.moe.score == PT_ROUTER_SIGMOID ? PT_KMOE_SIGMOID
                                                                     : PT_KMOE_SOFTMAX,
                              n->spec.moe.renorm);
        return 0;
    case PT_OPK_MOE_AUX:
        return L->moe_auxg ? aux_loss(c, again) : 0;
    case PT_OPK_MOE_PERMUTE:
        return permute(c, L->ln2, again);
    case PT_OPK_MOE_DISPATCH:
        return dispatch(c, again);
    case PT_OPK_ETP_ALLGATHER:
        return etp_counts(c) || etp_move(c, S->moe_em, L->moe_xr, true) ? -1 : 0;
    case PT_OPK_EXPERT_FC1:
    case PT_OPK_EXPERT_ACT:
    case PT_OPK_EXPERT_FC2:
    case PT_OPK_EXPERT_FC2_DGRAD:
    case PT_OPK_EXPERT_FC2_WGRAD:
    case PT_OPK_EXPERT_ACT_BWD:
    case PT_OPK_EXPERT_FC1_DGRAD:
    case PT_OPK_EXPERT_FC1_WGRAD:
        return experts(c, op->kind);
    case PT_OPK_ETP_REDUCESCATTER:
        return etp_move(c, S->moe_eg, ep ? S->moe_em : L->moe_yp, false);
    case PT_OPK_MOE_COMBINE:
        if (!ep)
            return 0;
        got = recall(c);
        if (orders(c, slot_counts(c), n->ep_rank))
            return -1;
        kn->moe_gather_rows(kn, S->moe_recv, S->moe_em, S->moe_invperm, got, h);
        return exchange(c, S->moe_recv, L->moe_yp, false);
    case PT_OPK_MOE_UNPERMUTE:
        kn->moe_combine_forward(kn, c->A->x[c->xi + 1], L->moe_yp, L->moe_pos, L->moe_w, R, k, h);
        return 0;
    /* the backward */
    case PT_OPK_MOE_UNPERMUTE_BWD:
        kn->moe_combine_backward(kn, ep ? S->moe_tok : S->moe_em, S->moe_dw, branch_grad(c),
                                 L->moe_yp, L->moe_pos, L->moe_w, R, k, h);
        return 0;
    case PT_OPK_MOE_COMBINE_BWD:
        if (!ep)
            return 0;
        got = recall(c);
        if (exchange(c, S->moe_tok, S->moe_recv, true) || orders(c, slot_counts(c), n->ep_rank))
            return -1;
        kn->moe_gather_rows(kn, S->moe_em, S->moe_recv, S->moe_perm, got, h);
        return 0;
    case PT_OPK_ETP_ALLGATHER_BWD: /* the reduce-scatter's gradient */
        return etp_move(c, S->moe_em, S->moe_eg, true);
    case PT_OPK_ETP_REDUCESCATTER_BWD: /* the gather's: the partial sums of the rows' */
        return etp_move(c, S->moe_eg, S->moe_em, false);
    case PT_OPK_MOE_DISPATCH_BWD:
        if (!ep)
            return 0;
        got = recall(c);
        if (orders(c, slot_counts(c), n->ep_rank))
            return -1;
        kn->moe_gather_rows(kn, S->moe_recv, S->moe_em, S->moe_invperm, got, h);
        return exchange(c, S->moe_recv, S->moe_tok, false);
    case PT_OPK_MOE_PERMUTE_BWD:
        /* the first gradient of the norm's output: written here, added to by the router's */
        kn->zero(kn, S->dlns, pt_act_bytes(c, R * h));
        kn->moe_gather_rows_backward(kn, S->dlns, ep ? S->moe_tok : S->moe_em, L->moe_pos, R, k,
                                     h);
        return 0;
    case PT_OPK_MOE_ROUTE_BWD:
        route_backward(c);
        return 0;
    case PT_OPK_ROUTER_DGRAD:
        kn->matmul_backward(kn, out ? out : S->dlns, NULL, NULL, S->moe_logits, NULL, wr, R, h, E);
        return 0;
    case PT_OPK_ROUTER_WGRAD:
        return router_wgrad(c, in, wr, dwr);
    default:
        break;
    }
    return pt_err_set(c->err, "internal: op '%s' is not a mixture of experts' op ptrun runs",
                      pt_op_kind_name(op->kind));
}
