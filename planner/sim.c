/*
 * The step-time simulator. Pricing turns a layout's op lists (ops.c) into the cost
 * of each schedule instruction using the cost tables (costmodels/); the simulation
 * then walks the schedule programs of all pipeline ranks (sched.c) as a
 * discrete-event simulation. Each pipeline rank stands for all the tp·cp·dp ranks
 * of its stage, which run the same program on the same sizes.
 *
 * Per rank there is a compute stream, which runs forward and backward instructions
 * (tensor- and context-parallel communication inside them is exposed unless the op
 * list marks it overlapped, and then only what the compute does not hide), and a
 * data-parallel stream, which reduces gradient buckets as the last backward of a
 * chunk produces them (the overlap of Megatron-LM's --overlap-grad-reduce and
 * PyTorch DDP). Sends are posted when their producer finishes and arrive after the
 * link's transfer time; a receive waits for the arrival.
 */
#include "predict.h"
#include "schedule.h"

#include <jansson.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Cost arrays ----------------------------------------------------------------- */

int pt_sim_costs_alloc(pt_sim_costs *c, int pp, int vp)
{
    size_t v = (size_t)pp * (size_t)vp;
    *c = (pt_sim_costs){.pp = pp, .vp = vp};
    c->fwd_s = calloc(v, sizeof *c->fwd_s);
    c->bwd_s = calloc(v, sizeof *c->bwd_s);
    c->fwd_comm_s = calloc(v, sizeof *c->fwd_comm_s);
    c->bwd_comm_s = calloc(v, sizeof *c->bwd_comm_s);
    c->sync_s = calloc(v, sizeof *c->sync_s);
    c->sync_buckets = calloc(v, sizeof *c->sync_buckets);
    c->sync_compute_s = calloc(v, sizeof *c->sync_compute_s);
    c->p2p_s = calloc((size_t)pp, sizeof *c->p2p_s);
    c->optim_s = calloc((size_t)pp, sizeof *c->optim_s);
    c->optim_comm_s = calloc((size_t)pp, sizeof *c->optim_comm_s);
    c->optim_adam_s = calloc((size_t)pp, sizeof *c->optim_adam_s);
    c->bd_exposed = calloc(v * PT_BD_COUNT, sizeof *c->bd_exposed);
    c->bd_hidden = calloc(v * PT_BD_COUNT, sizeof *c->bd_hidden);
    c->dp_overlap = PT_DPO_LAST;
    if (!c->fwd_s || !c->bwd_s || !c->fwd_comm_s || !c->bwd_comm_s || !c->sync_s ||
        !c->sync_buckets || !c->sync_compute_s || !c->p2p_s || !c->optim_s || !c->optim_comm_s ||
        !c->optim_adam_s || !c->bd_exposed || !c->bd_hidden) {
        pt_sim_costs_free(c);
        return -1;
    }
    return 0;
}

void pt_sim_costs_free(pt_sim_costs *c)
{
    free(c->fwd_s);
    free(c->bwd_s);
    free(c->fwd_comm_s);
    free(c->bwd_comm_s);
    free(c->sync_s);
    free(c->sync_buckets);
    free(c->sync_compute_s);
    free(c->p2p_s);
    free(c->optim_s);
    free(c->optim_comm_s);
    free(c->optim_adam_s);
    free(c->bd_exposed);
    free(c->bd_hidden);
    *c = (pt_sim_costs){0};
}

void pt_cost_hw_of(const pt_cluster *c, pt_cost_hw *hw)
{
    *hw = (pt_cost_hw){0};
    snprintf(hw->device, sizeof hw->device, "%s", c->device.name);
    snprintf(hw->backend, sizeof hw->backend, "%s",
             strncmp(c->device.name, "cpu", 3) == 0 ? "mpi" : "nccl");
    memcpy(hw->peak_flops, c->device.peak_flops, sizeof hw->peak_flops);
    hw->mem_bw_Bps = c->device.memory_bw_Bps;
    hw->devices_per_node = c->devices_per_node;
    hw->intra_bw_Bps = c->intra.bw_Bps;
    hw->intra_latency_s = c->intra.latency_s;
    hw->inter_bw_Bps = c->inter.bw_Bps;
    hw->inter_latency_s = c->inter.latency_s;
    hw->sm_count = c->device.sm_count;
    hw->gemm_max_eff = c->device.gemm_max_eff;
    hw->gemm_max_eff_fp8 = c->device.gemm_max_eff_fp8;
    hw->intra_busbw_Bps = c->intra.busbw_Bps;
    hw->intra_allreduce_busbw_Bps = c->intra.allreduce_busbw_Bps;
    hw->inter_busbw_Bps = c->inter.busbw_Bps;
}

/* ---- Pricing ---------------------------------------------------------------------- */

static const char *const bd_names[PT_BD_COUNT] = {
    "gemm", "attention", "other_compute", "tp", "cp", "ep", "dp_zero", "pipeline_p2p",
    "optimizer", "overhead", "bubble"};

const char *pt_bd_name(pt_bd b)
{
    return (unsigned)b < PT_BD_COUNT ? bd_names[b] : "?";
}

typedef struct {
    const pt_costdb *db;
    pt_cost_hw hw;
    double *prov_s;
    const pt_stack *stack;
    bool ptrun;          /* the stack is ptrun's own: every kernel is ptrun's */
} pricer;

/* Whether op is a kernel ptrun runs, so that the cost tables (which hold ptrun's
 * kernels, as ptprofile and ptrun's traces timed them) price it: every kernel of ptrun's
 * stack; another stack's GEMMs of the roles it declares ptrun's, and its flash
 * attention where it declares that ptrun's on this device (planner/stack.c says which,
 * and why). */
static bool ptrun_kernel(const pricer *p, const pt_op *op)
{
    if (p->ptrun)
        return true;
    if (op->role != PT_GEMM_NONE)
        return pt_stack_ptrun_gemm(p->stack, op->role);
    if ((op->kind == PT_OPK_ATTN || op->kind == PT_OPK_ATTN_BWD) &&
        p->stack->attention != PT_ATTN_UNFUSED)
        return pt_stack_ptrun_attn(p->stack, p->hw.device, op->kind == PT_OPK_ATTN_BWD);
    return false;
}

/* A kernel's cost. ptrun's own stack: the cost tables' lookup (measured, interpolated
 * between the shapes ptprofile timed for its layouts, else analytic with the figures
 * ptcalib fitted to its kernels). Another stack's kernel that is ptrun's: what the
 * tables hold of that very shape under ptrun's key (pt_op_ptrun_twin; the same role's
 * sample, or another role's of the shape), since a cuBLAS GEMM or cuDNN attention of
 * another shape may run another kernel, whose rate interpolating in FLOPs between
 * ptrun's shapes would not tell. Everything else (a shape the tables lack, and the
 * stack's own kernels: its norms, activations, unfused or FlashAttention-2 attention, bf16
 * weight gradients...) is the analytic model with the stack's figures: the tables never
 * timed it, and their fits are of ptrun's kernels. */
static pt_cost price_kernel(const pricer *p, const pt_op *op)
{
    if (op->kind == PT_OPK_MOE_SYNC) /* host time: the stack's figure (planner/ops.c) */
        return (pt_cost){p->stack->moe_host_sync_s, PT_PROV_ANALYTIC};
    if (p->db && p->ptrun)
        return pt_cost_kernel(p->db, &p->hw, &op->kernel);
    pt_cost c;
    if (p->db && ptrun_kernel(p, op)) {
        pt_kernel_op twin;
        pt_op_ptrun_twin(op, &twin);
        if (pt_cost_kernel_sampled(p->db, &p->hw, &twin, &c) == 0)
            return c;
    }
    return (pt_cost){pt_cost_kernel_analytic(&p->hw, &op->kernel), PT_PROV_ANALYTIC};
}

/* An FP8 GEMM's scaling work (pt_fp8_work, planner/ops.c): each memory-bound pass
 * through the analytic roofline of its kernel (no table times these kernels apart), each
 * scale kernel a launch, each amax all-reduce of one float as the tables price a
 * collective of 4 bytes over tp (latency-bound). Added to the GEMM's own price, whose
 * key (dtype fp8) times the GEMM alone. */
static double price_fp8_work(const pricer *p, const pt_fp8_work *w)
{
    double t = 0;
    if (w->passes > 0) {
        pt_kernel_op pass = {.key = "fp8_cast", .dtype = PT_DTYPE_FP8,
                             .bytes = w->bytes / w->passes};
        t += w->passes * pt_cost_kernel_analytic(&p->hw, &pass);
    }
    if (w->launches > 0) {
        pt_kernel_op scale = {.key = "fp8_scale", .dtype = PT_DTYPE_FP32};
        t += w->launches * pt_cost_kernel_analytic(&p->hw, &scale);
    }
    if (w->amax_reduces > 0)
        t += w->amax_reduces * pt_cost_coll(p->db, &p->hw, &w->amax).time_s;
    if (w->amax_cp_reduces > 0)
        t += w->amax_cp_reduces * pt_cost_coll(p->db, &p->hw, &w->amax_cp).time_s;
    return t;
}

/* An op's cost: a kernel's as price_kernel says (with an FP8 GEMM's scaling work); a
 * collective's from the tables' collective samples for every stack, whose collectives
 * all go through the same library (NCCL on GPUs) as ptrun's. */
static pt_cost price_op(const pricer *p, const pt_op *op)
{
    if (op->cls != PT_OP_KERNEL)
        return pt_cost_coll(p->db, &p->hw, &op->coll);
    pt_cost c = price_kernel(p, op);
    if (op->fp8.passes > 0 || op->fp8.launches > 0 || op->fp8.amax_reduces > 0 ||
        op->fp8.amax_cp_reduces > 0)
        c.time_s += price_fp8_work(p, &op->fp8);
    return c;
}

/* Time of an op list on the compute stream and the part of it that is exposed
 * communication, with both by breakdown category, and by provenance (pt_prov) what
 * each op adds to the list's time: a kernel its time, a collective what of it is
 * exposed. */
typedef struct {
    double time_s, comm_s;
    double exposed[PT_BD_COUNT], hidden[PT_BD_COUNT];
    double prov[PT_PROV_COUNT];
} list_time;

/* The breakdown category of an op: its kind's (planner/ops.c's kind table). */
static pt_bd op_category(const pt_op *op)
{
    return pt_op_kind_info_of(op->kind)->category;
}

/* Overlapped communication is hidden behind the list's compute as far as that lasts;
 * TP communication only to the stack's reach (the chunk that starts a pipelined GEMM
 * is not hidden). While it runs, NCCL's kernels slow the compute they share the SMs
 * with by the stack's compute_slowdown. */
static list_time price_list(const pricer *p, const pt_oplist *o, double runs)
{
    list_time lt = {0};
    double compute = 0, exposed = 0, overlapped = 0, ovl[PT_BD_COUNT] = {0};
    double compute_prov[PT_PROV_COUNT] = {0}, ovl_prov[PT_PROV_COUNT] = {0};
    for (int i = 0; i < o->n; i++) {
        const pt_op *op = &o->op[i];
        pt_cost c = price_op(p, op);
        double t = c.time_s * op->count;
        pt_bd cat = op_category(op);
        if (op->cls == PT_OP_KERNEL) {
            compute += t;
            compute_prov[c.prov] += t;
            lt.exposed[cat] += t;
        } else if (op->overlapped) {
            double reach = op->group == PT_GROUP_TP ? p->stack->tp_overlap_reach : 1;
            overlapped += reach * t;
            ovl[cat] += reach * t;
            ovl_prov[c.prov] += reach * t;
            exposed += (1 - reach) * t;
            lt.exposed[cat] += (1 - reach) * t;
            lt.prov[c.prov] += (1 - reach) * t;
        } else {
            exposed += t;
            lt.exposed[cat] += t;
            lt.prov[c.prov] += t;
        }
    }
    double hidden_excess = overlapped > compute ? overlapped - compute : 0;
    double slow = p->stack->comm_compute_slowdown * fmin(overlapped, compute);
    for (int k = 0; k < PT_BD_COUNT; k++) {
        double share = overlapped > 0 ? ovl[k] / overlapped : 0;
        lt.exposed[k] += hidden_excess * share;
        lt.hidden[k] += ovl[k] - hidden_excess * share;
    }
    for (int k = PT_BD_GEMM; k <= PT_BD_OTHER && compute > 0; k++)
        lt.exposed[k] += slow * (lt.exposed[k] / compute);
    /* the slowdown is the compute's, the excess the overlapped collectives' */
    for (int k = 0; k < PT_PROV_COUNT; k++) {
        lt.prov[k] += compute_prov[k] * (compute > 0 ? 1 + slow / compute : 1);
        lt.prov[k] += overlapped > 0 ? hidden_excess * ovl_prov[k] / overlapped : 0;
        p->prov_s[k] += lt.prov[k] * runs;
    }
    lt.time_s = compute + slow + hidden_excess + exposed;
    lt.comm_s = exposed + hidden_excess;
    return lt;
}

/* dst += scale · src, for the times and the breakdown of a list. */
static void list_add(list_time *dst, const list_time *src, double scale)
{
    dst->time_s += scale * src->time_s;
    dst->comm_s += scale * src->comm_s;
    for (int k = 0; k < PT_BD_COUNT; k++) {
        dst->exposed[k] += scale * src->exposed[k];
        dst->hidden[k] += scale * src->hidden[k];
    }
}

/* The lists of a micro-batch, each forward and backward: a layer of each kind
 * (pt_model_layer_kind: dense or a mixture of experts, full or banded attention), then
 * the embedding and the head. */
enum { E_FWD = 2 * PT_LAYER_KINDS, E_BWD, H_FWD, H_BWD, N_LISTS };
#define LAYER_LIST(kind, bwd) (2 * (kind) + (bwd))

/* Prices the op lists of one micro-batch: the layers of each kind the model has (kind k
 * runs runs[LAYER_LIST(k, 0)] times a step; none, not listed), embedding and head, both
 * ways. */
static int price_micro_batch(const pricer *p, const pt_opctx *ctx, const double runs[N_LISTS],
                             list_time out[N_LISTS])
{
    pt_oplist o = {0};
    int rc = 0;
    for (int id = 0; id < N_LISTS && rc == 0; id++) {
        o.n = 0;
        out[id] = (list_time){0};
        bool bwd = id % 2 == 1, layer = id < E_FWD;
        if (runs[id] == 0)
            continue;
        pt_opctx lc = *ctx;
        lc.moe_layer = (id / 2) & PT_LAYER_MOE;
        lc.window_layer = (id / 2) & PT_LAYER_WINDOW;
        rc = layer ? pt_ops_layer(&lc, bwd, &o)
             : id <= E_BWD ? pt_ops_embed(ctx, bwd, &o)
                           : pt_ops_head(ctx, bwd, &o);
        out[id] = price_list(p, &o, runs[id]);
    }
    pt_oplist_free(&o);
    return rc;
}

/* Parameters of virtual stage vs, and in *experts (may be NULL) the experts' of them. */
static double stage_params(const pt_model *m, const pt_layout *l, int vs, double *experts)
{
    int64_t e;
    double n = (double)pt_stage_params(m, l, vs, &e);
    if (experts)
        *experts = (double)e;
    return n;
}

/* The reduction of each virtual stage's gradient buckets; sync_prov[vs] gets its
 * collectives' time by provenance (their exposed part is known once the backward is
 * priced: sync_exposed), its compression's kernels go to prov_s whole. */
static int price_sync(const pricer *p, const pt_opctx *ctx, const pt_layout *l,
                      pt_sim_costs *out, double (*sync_prov)[PT_PROV_COUNT])
{
    int V = l->pp * l->vp;
    pt_oplist o = {0};
    double kernel_prov[PT_PROV_COUNT] = {0};
    for (int vs = 0; vs < V; vs++) {
        o.n = 0;
        double experts, before_experts = 0;
        double params = stage_params(ctx->m, l, vs, &experts) - pt_step_tied_out(ctx, vs, V);
        int64_t layers = pt_stage_layers(ctx->m, l, vs, NULL);
        /* a stage like the one before (the middle ones of a pipeline) costs the same */
        if (vs > 0 && params == stage_params(ctx->m, l, vs - 1, &before_experts) -
                                   pt_step_tied_out(ctx, vs - 1, V) &&
            experts == before_experts && layers == pt_stage_layers(ctx->m, l, vs - 1, NULL)) {
            out->sync_s[vs] = out->sync_s[vs - 1];
            out->sync_buckets[vs] = out->sync_buckets[vs - 1];
            out->sync_compute_s[vs] = out->sync_compute_s[vs - 1];
            for (int k = 0; k < PT_PROV_COUNT; k++) {
                sync_prov[vs][k] = sync_prov[vs - 1][k];
                p->prov_s[k] += kernel_prov[k];
            }
            continue;
        }
        if (pt_ops_grad_sync(ctx, params - experts, layers, &o) ||
            pt_ops_expert_sync(ctx, experts, &o)) {
            pt_oplist_free(&o);
            return -1;
        }
        double total = 0, compute = 0;
        int64_t buckets = 0;
        for (int k = 0; k < PT_PROV_COUNT; k++)
            kernel_prov[k] = 0;
        for (int i = 0; i < o.n; i++) {
            const pt_op *op = &o.op[i];
            pt_cost c = price_op(p, op);
            if (op->cls == PT_OP_KERNEL) { /* PowerSGD's compression */
                p->prov_s[c.prov] += c.time_s * op->count;
                kernel_prov[c.prov] += c.time_s * op->count;
                compute += c.time_s * op->count;
                continue;
            }
            sync_prov[vs][c.prov] += c.time_s * op->count;
            total += c.time_s * op->count;
            buckets += op->count;
        }
        out->sync_s[vs] = total;
        out->sync_buckets[vs] = buckets;
        out->sync_compute_s[vs] = compute;
    }
    pt_oplist_free(&o);
    return 0;
}

/* The step's end on each pipeline rank (pt_ops_optimizer): the collectives before
 * the update (tied embedding, what the backward left unreduced, the gradient norm)
 * exposed, the Adam kernel, and the all-gather of the updated weights (exposed after
 * it, or with param_overlap beside the next step's forward: see pt_sim_price). */
static int price_optimizer(const pricer *p, const pt_opctx *ctx, const pt_layout *l,
                           pt_sim_costs *out, double *gather_s,
                           double (*gather_prov)[PT_PROV_COUNT])
{
    int V = l->pp * l->vp;
    pt_oplist o = {0};
    for (int r = 0; r < l->pp; r++) {
        pt_step_params sp = {0};
        for (int c = 0; c < l->vp; c++) {
            double experts;
            sp.params += stage_params(ctx->m, l, c * l->pp + r, &experts);
            sp.experts += experts;
            if (ctx->t->fp8.param_gather && pt_train_fp8(ctx->t))
                sp.fp8_linear += (double)pt_stage_layers(ctx->m, l, c * l->pp + r, NULL) *
                                 pt_layer_linear_elems(ctx->m, l->tp, NULL);
        }
        if (r == 0)
            sp.edge += (double)pt_params_embedding(ctx->m, l->tp);
        if (r == l->pp - 1)
            sp.edge += (double)pt_params_head(ctx->m, l->tp, l->pp);
        sp.tied = pt_step_tied(ctx, r == 0 ? 0 : (l->vp - 1) * l->pp + r, V);
        o.n = 0;
        if (pt_ops_optimizer(ctx, &sp, &o)) {
            pt_oplist_free(&o);
            return -1;
        }
        double adam = 0, gather = 0, before = 0;
        for (int i = 0; i < o.n; i++) {
            const pt_op *op = &o.op[i];
            pt_cost c = price_op(p, op);
            double t = c.time_s * op->count;
            if (op->kind == PT_OPK_ZERO_ALLGATHER) { /* exposed or not: pt_sim_price */
                gather += t;
                gather_prov[r][c.prov] += t;
                continue;
            }
            p->prov_s[c.prov] += t;
            if (op->cls == PT_OP_KERNEL)
                adam += t;
            else
                before += t;
        }
        out->optim_adam_s[r] = adam;
        gather_s[r] = gather;
        out->optim_s[r] = before + adam + (l->param_overlap ? 0 : gather);
        out->optim_comm_s[r] = before + (l->param_overlap ? 0 : gather);
    }
    pt_oplist_free(&o);
    return 0;
}

/* Activations (or their gradients) between adjacent stages, on the link the two
 * ranks share: NVLink inside an NVLink domain (pt_cluster_nvlink_domain: the node, or
 * a GB200 NVL72 rack), the network across. */
static void price_p2p(const pricer *p, const pt_opctx *ctx, const pt_cluster *c,
                      const pt_layout *l, pt_sim_costs *out)
{
    if (l->pp == 1)
        return;
    const pt_model *m = ctx->m;
    double tokens = (double)(m->seq / l->cp * l->mbs) / (l->sp ? l->tp : 1);
    double bytes = ctx->prec.act_bytes * tokens * (double)m->hidden;
    pt_grid g;
    pt_grid_init(&g, l);
    int coords[PT_NDIM] = {0};
    for (int r = 0; r < l->pp; r++) {
        coords[PT_DIM_PP] = r;
        int64_t a = pt_grid_rank(&g, coords);
        coords[PT_DIM_PP] = (r + 1) % l->pp;
        int64_t b = pt_grid_rank(&g, coords);
        int domain = pt_cluster_nvlink_domain(c);
        bool same_domain = a / domain == b / domain;
        pt_coll_op op = {.op = PT_COLL_SENDRECV, .bytes = bytes, .group = 2,
                         .ranks_per_node = same_domain ? 2 : 1};
        pt_cost cost = pt_cost_coll(p->db, &p->hw, &op);
        out->p2p_s[r] = cost.time_s;
        p->prov_s[cost.prov] += cost.time_s * (double)l->n_micro * 2;
    }
}

/* Adds to prov the gradient buckets' time by provenance, as far as it is exposed: all of
 * it when the reduction waits for the step's end (dp_overlap none), else what of it
 * outlasts the backward it runs beside (the chunk's last one, or with dp_overlap
 * backward each micro-batch's), as pt_sim_estimate charges it. */
static void sync_exposed(const pt_layout *l, const pt_sim_costs *c,
                         double (*sync_prov)[PT_PROV_COUNT], double *prov)
{
    for (int vs = 0; vs < l->pp * l->vp; vs++) {
        double t = c->sync_s[vs], beside = fmax(0, t - c->bwd_s[vs]);
        double exposed = l->dp_overlap == PT_DPO_NONE       ? t
                         : l->dp_overlap == PT_DPO_BACKWARD ? beside * (double)l->n_micro
                                                            : beside;
        for (int k = 0; k < PT_PROV_COUNT && t > 0; k++)
            prov[k] += sync_prov[vs][k] * exposed / t;
    }
}

/* ---- The memo of a search ----------------------------------------------------------- */

/* What a micro-batch's op lists depend on, besides the model, cluster, training and cost
 * tables a search holds fixed: the rank grid (tp, cp, pp, dp, order: each group's ranks
 * per NVLink domain) and the layout keys the lists read. Layouts that differ only in how
 * the layers are split over stages (vp, first_layers, last_layers, pipeline), their
 * schedule, the data-parallel overlaps or gradient compression price the same lists. */
typedef struct {
    int32_t tp, cp, pp, dp, ep, etp, cp_a2a, zero;
    int64_t mbs, n_micro;
    int32_t sp, tp_overlap, recompute, cp_comm, moe_dispatch;
    int32_t order[PT_NDIM];
} memo_key;

typedef struct {
    memo_key key;
    bool used;
    list_time lt[N_LISTS];
    pt_cost first_gather;   /* the ZeRO-3 gather a pass starts with (time 0: none) */
    double model_flops, hardware_flops;
} memo_entry;

struct pt_sim_memo {
    const pt_model *m;      /* what the entries were priced for */
    const pt_cluster *c;
    const pt_train *t;
    const pt_costdb *db;
    memo_entry *e;
    size_t cap, n;
};

pt_sim_memo *pt_sim_memo_new(const pt_model *m, const pt_cluster *c, const pt_train *t,
                             const pt_costdb *db)
{
    pt_sim_memo *memo = calloc(1, sizeof *memo);
    if (memo)
        *memo = (pt_sim_memo){.m = m, .c = c, .t = t, .db = db};
    return memo;
}

void pt_sim_memo_free(pt_sim_memo *memo)
{
    if (memo)
        free(memo->e);
    free(memo);
}

static memo_key key_of(const pt_layout *l)
{
    memo_key k;
    memset(&k, 0, sizeof k); /* padding too: keys are compared and hashed as bytes */
    k.tp = l->tp, k.cp = l->cp, k.pp = l->pp, k.dp = l->dp, k.ep = l->ep, k.etp = l->etp;
    k.cp_a2a = l->cp_a2a, k.zero = l->zero, k.mbs = l->mbs, k.n_micro = l->n_micro;
    k.sp = l->sp, k.tp_overlap = l->tp_overlap, k.recompute = (int32_t)l->recompute;
    k.cp_comm = (int32_t)l->cp_comm, k.moe_dispatch = (int32_t)l->moe_dispatch;
    for (int i = 0; i < PT_NDIM; i++)
        k.order[i] = (int32_t)l->order[i];
    return k;
}

static size_t key_hash(const memo_key *k)
{
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return (size_t)h;
}

/* The entry of key k: found (*hit), or a new one to fill; NULL when out of memory. */
static memo_entry *memo_slot(pt_sim_memo *memo, const memo_key *k, bool *hit)
{
    if (2 * (memo->n + 1) > memo->cap) { /* at most half full */
        size_t cap = memo->cap ? 2 * memo->cap : 1024;
        memo_entry *e = calloc(cap, sizeof *e);
        if (!e)
            return NULL;
        for (size_t i = 0; i < memo->cap; i++) {
            if (!memo->e[i].used)
                continue;
            size_t j = key_hash(&memo->e[i].key) & (cap - 1);
            while (e[j].used)
                j = (j + 1) & (cap - 1);
            e[j] = memo->e[i];
        }
        free(memo->e);
        memo->e = e;
        memo->cap = cap;
    }
    size_t j = key_hash(k) & (memo->cap - 1);
    while (memo->e[j].used && memcmp(&memo->e[j].key, k, sizeof *k) != 0)
        j = (j + 1) & (memo->cap - 1);
    *hit = memo->e[j].used;
    return &memo->e[j];
}

/* A micro-batch's lists priced (lt), the gather a ZeRO-3 pass starts with, the step's
 * FLOPs: from the memo where a layout of the same lists was priced, else priced and
 * kept there. The provenance each list adds to the step is added here either way. */
static int price_layers(pricer *p, const pt_opctx *ctx, pt_sim_memo *memo, double n,
                        list_time lt[N_LISTS], pt_cost *first_gather, double *model_flops,
                        double *hw_flops)
{
    const pt_model *m = ctx->m;
    const pt_layout *l = ctx->l;
    double runs[N_LISTS];
    int64_t kinds[PT_LAYER_KINDS];
    pt_model_layer_kinds(m, 0, m->layers, kinds);
    for (int id = 0; id < N_LISTS; id++)
        runs[id] = id < E_FWD ? n * (double)kinds[id / 2] : n;
    memo_key k = key_of(l);
    bool hit = false;
    memo_entry *e = memo ? memo_slot(memo, &k, &hit) : NULL;
    if (hit) {
        for (int id = 0; id < N_LISTS; id++) {
            lt[id] = e->lt[id];
            for (int j = 0; j < PT_PROV_COUNT; j++)
                p->prov_s[j] += lt[id].prov[j] * runs[id];
        }
        *first_gather = e->first_gather;
        *model_flops = e->model_flops;
        *hw_flops = e->hardware_flops;
        return 0;
    }
    if (price_micro_batch(p, ctx, runs, lt))
        return -1;
    *first_gather = (pt_cost){0};
    if (l->zero == 3 && ctx->t->stack.zero3_prefetch > 0) {
        pt_oplist o = {0};
        if (pt_ops_layer(ctx, false, &o) == 0)
            for (int i = 0; i < o.n; i++)
                if (o.op[i].kind == PT_OPK_ZERO3_ALLGATHER) {
                    *first_gather = pt_cost_coll(p->db, &p->hw, &o.op[i].coll);
                    break;
                }
        pt_oplist_free(&o);
    }
    *model_flops = pt_step_model_flops(ctx);
    *hw_flops = pt_step_hardware_flops(ctx);
    if (e) {
        e->key = k;
        e->used = true;
        memcpy(e->lt, lt, sizeof e->lt);
        e->first_gather = *first_gather;
        e->model_flops = *model_flops;
        e->hardware_flops = *hw_flops;
        memo->n++;
    }
    return 0;
}

int pt_sim_price(const pt_model *m, const pt_cluster *c, const pt_train *t,
                 const pt_costdb *db, const pt_layout *l, pt_sim_costs *out, pt_err *err)
{
    return pt_sim_price_memo(m, c, t, db, l, NULL, out, err);
}

int pt_sim_price_memo(const pt_model *m, const pt_cluster *c, const pt_train *t,
                      const pt_costdb *db, const pt_layout *l, pt_sim_memo *memo,
                      pt_sim_costs *out, pt_err *err)
{
    /* a memo serves the model, cluster, training and tables it was made for only */
    if (memo && (memo->m != m || memo->c != c || memo->t != t || memo->db != db))
        memo = NULL;
    if (pt_sim_costs_alloc(out, l->pp, l->vp))
        return pt_err_set(err, "out of memory pricing layout");
    pricer p = {.db = db, .prov_s = out->prov_s, .stack = &t->stack,
                .ptrun = pt_stack_is_ptrun(&t->stack)};
    pt_cost_hw_of(c, &p.hw);
    pt_opctx ctx;
    pt_opctx_init(&ctx, m, l, t, c);
    int V = l->pp * l->vp;
    double n = (double)l->n_micro;
    list_time lt[N_LISTS];
    double *gather_s = calloc((size_t)l->pp, sizeof *gather_s);
    /* the step-end collectives' time by provenance, counted where exposed (below) */
    double(*sync_prov)[PT_PROV_COUNT] = calloc((size_t)V, sizeof *sync_prov);
    double(*gather_prov)[PT_PROV_COUNT] = calloc((size_t)l->pp, sizeof *gather_prov);
    pt_cost first_cost;
    double model_flops, hw_flops;
    if (!gather_s || !sync_prov || !gather_prov ||
        price_layers(&p, &ctx, memo, n, lt, &first_cost, &model_flops, &hw_flops) ||
        price_sync(&p, &ctx, l, out, sync_prov) ||
        price_optimizer(&p, &ctx, l, out, gather_s, gather_prov)) {
        free(gather_s);
        free(sync_prov);
        free(gather_prov);
        pt_sim_costs_free(out);
        return pt_err_set(err, "out of memory pricing layout");
    }
    /* ZeRO-3 prefetches the next layer's weights beside the current layer; the first
     * layer of each pass has nothing before it to hide behind. */
    list_time first_gather = {0};
    if (first_cost.time_s > 0) {
        first_gather.time_s = first_gather.comm_s = first_cost.time_s;
        first_gather.exposed[PT_BD_DP] = first_cost.time_s;
        p.prov_s[first_cost.prov] += first_cost.time_s * 2 * n * V; /* each pass of each chunk */
    }
    for (int vs = 0; vs < V; vs++) {
        int64_t first, layers = pt_stage_layers(m, l, vs, &first);
        int64_t kinds[PT_LAYER_KINDS];
        pt_model_layer_kinds(m, first, layers, kinds);
        list_time f = {0}, b = {0};
        for (int k = 0; k < PT_LAYER_KINDS; k++) {
            list_add(&f, &lt[LAYER_LIST(k, 0)], (double)kinds[k]);
            list_add(&b, &lt[LAYER_LIST(k, 1)], (double)kinds[k]);
        }
        list_add(&f, &first_gather, 1);
        list_add(&b, &first_gather, 1);
        if (vs == 0) {
            list_add(&f, &lt[E_FWD], 1);
            list_add(&b, &lt[E_BWD], 1);
        }
        if (vs == V - 1) {
            list_add(&f, &lt[H_FWD], 1);
            list_add(&b, &lt[H_BWD], 1);
        }
        out->fwd_s[vs] = f.time_s;
        out->bwd_s[vs] = b.time_s;
        out->fwd_comm_s[vs] = f.comm_s;
        out->bwd_comm_s[vs] = b.comm_s;
        for (int k = 0; k < PT_BD_COUNT; k++) {
            out->bd_exposed[(size_t)vs * PT_BD_COUNT + k] = f.exposed[k] + b.exposed[k];
            out->bd_hidden[(size_t)vs * PT_BD_COUNT + k] = f.hidden[k] + b.hidden[k];
        }
    }
    /* param_overlap: the gather of the updated weights runs beside the next step's
     * first forward of each chunk (Megatron-Core's --overlap-param-gather issues it
     * bucket by bucket as the forward reaches them); what that forward does not
     * cover is exposed. */
    for (int r = 0; r < l->pp; r++) {
        double fwd = 0;
        for (int c = 0; c < l->vp; c++)
            fwd += out->fwd_s[c * l->pp + r];
        double exposed = !l->param_overlap ? gather_s[r]
                         : gather_s[r] > fwd ? gather_s[r] - fwd : 0;
        if (l->param_overlap) {
            out->optim_s[r] += exposed;
            out->optim_comm_s[r] += exposed;
        }
        for (int k = 0; k < PT_PROV_COUNT && gather_s[r] > 0; k++)
            p.prov_s[k] += gather_prov[r][k] * exposed / gather_s[r];
    }
    sync_exposed(l, out, sync_prov, p.prov_s);
    free(gather_s);
    free(sync_prov);
    free(gather_prov);
    out->dp_overlap = l->dp_overlap;
    out->p2p_blocking = l->pp > 1 && (t->stack.p2p == PT_P2P_BLOCKING ||
                                      (t->stack.p2p == PT_P2P_INTERLEAVED && l->vp == 1));
    out->overhead_s = t->stack.step_overhead_s;
    price_p2p(&p, &ctx, c, l, out);
    out->model_flops = model_flops;
    out->hardware_flops = hw_flops;
    return 0;
}

double pt_sim_estimate(const pt_layout *l, const pt_sim_costs *costs)
{
    /* Busiest rank's compute, plus the warm-up and cool-down of the pipeline
     * ((p-1)/vp micro-batch times, Narayanan et al. 2021), plus the optimizer, plus
     * the reduction where it is not overlapped (or exceeds the backward it overlaps). */
    double busiest = 0, mean = 0, optim = 0, p2p = 0, sync = 0;
    for (int r = 0; r < l->pp; r++) {
        double per_mb = 0, bwd = 0, red = 0, comp = 0;
        for (int c = 0; c < l->vp; c++) {
            per_mb += costs->fwd_s[c * l->pp + r] + costs->bwd_s[c * l->pp + r];
            bwd += costs->bwd_s[c * l->pp + r];
            red += costs->sync_s[c * l->pp + r];
            comp += costs->sync_compute_s[c * l->pp + r];
        }
        busiest = fmax(busiest, per_mb * (double)l->n_micro + comp);
        mean += per_mb / l->pp;
        optim = fmax(optim, costs->optim_s[r]);
        p2p = fmax(p2p, costs->p2p_s[r]);
        if (costs->dp_overlap == PT_DPO_NONE)
            sync = fmax(sync, red);
        else if (costs->dp_overlap == PT_DPO_BACKWARD)
            sync = fmax(sync, (red - bwd) * (double)l->n_micro);
        else
            sync = fmax(sync, red - bwd / l->vp);
    }
    /* Blocking sends hold each micro-batch's chunk for two transfers. */
    double blocked = costs->p2p_blocking ? 2.0 * (double)l->n_micro * l->vp * p2p : 0;
    return busiest + blocked + (l->pp - 1) * (mean / l->vp + 2 * p2p) + optim +
           fmax(0, sync) + costs->overhead_s;
}

/* ---- Simulation ------------------------------------------------------------------- */

/* State of one pipeline rank while its program runs. */
typedef struct {
    int pc;
    double clock;          /* compute stream free */
    double dp_free;        /* data-parallel stream free */
    double first_fwd, last_bwd_end, busy, comm, end;
    double dp_wait;        /* the optimizer step's wait for the reduction */
    double p2p_blocked;    /* compute held by blocking sends */
    double sync_total;     /* reduction time issued on the data-parallel stream */
    double *bwd_start, *bwd_end; /* [vp] last backward of each chunk */
    bool *pending;         /* [vp] dp_overlap=none: reductions held for the step's end */
} rank_state;

typedef struct {
    const pt_layout *l;
    const pt_sim_costs *c;
    const pt_sched *s;
    int V;
    double *act, *grad;    /* [n·V] arrival time of inputs / output gradients; NAN: not sent */
    rank_state *rs;
    json_t *trace;
} sim;

/* A timeline span; `ins` is the index of the instruction of rank's program it
 * belongs to (-1: none, the buckets), the index ptrun's trace gives the spans of the
 * same instruction (args.ins), so that predicted and measured meet one to one. */
static void span(sim *S, int rank, int tid, const char *name, int mb, int chunk, int ins,
                 double t0, double dur)
{
    if (!S->trace)
        return;
    char label[48];
    if (mb >= 0)
        snprintf(label, sizeof label, "%s mb%d c%d", name, mb, chunk);
    else
        snprintf(label, sizeof label, "%s c%d", name, chunk);
    json_t *e = json_pack("{s:s, s:s, s:f, s:f, s:i, s:i}", "name", label, "ph", "X", "ts",
                          t0 * 1e6, "dur", dur * 1e6, "pid", rank, "tid", tid);
    if (e && ins >= 0)
        json_object_set_new(e, "args", json_pack("{s:i}", "ins", ins));
    json_array_append_new(S->trace, e);
}

/* Reduces a chunk's gradient buckets on the data-parallel stream, one after another,
 * the buckets becoming ready evenly over [t0, t1]. */
static void reduce_buckets(sim *S, int r, int chunk, double t0, double t1)
{
    rank_state *st = &S->rs[r];
    int vs = chunk * S->l->pp + r;
    int64_t nb = S->c->sync_buckets[vs];
    if (nb < 1)
        return;
    double dur = S->c->sync_s[vs] / (double)nb;
    if (nb > 64) {
        /* Bucket i is ready at t0 + (t1 - t0)(i + 1)/nb and the stream runs them in
         * order: the last ends at the largest of (free + nb·dur) and (ready_i +
         * (nb - i)·dur), which is linear in i, so at i = 0 or i = nb - 1. One span. */
        double first = t0 + (t1 - t0) / (double)nb;
        double start = fmax(first, st->dp_free);
        double end = fmax(start + (double)nb * dur, t1 + dur);
        st->dp_free = end;
        st->sync_total += (double)nb * dur;
        span(S, r, 1, "reduce", -1, chunk, -1, start, end - start);
        return;
    }
    for (int64_t i = 0; i < nb; i++) {
        double ready = t0 + (t1 - t0) * (double)(i + 1) / (double)nb;
        double start = fmax(ready, st->dp_free);
        st->dp_free = start + dur;
        st->sync_total += dur;
        span(S, r, 1, "reduce", -1, chunk, -1, start, dur);
    }
}

/* A chunk's gradients are final. dp_overlap=last: its buckets became ready over its
 * last backward; none: they wait for the step's last backward (the optimizer step
 * starts them); backward: every micro-batch's backward already reduced its own. */
static void reduce_grads(sim *S, int r, int chunk)
{
    rank_state *st = &S->rs[r];
    if (S->c->dp_overlap == PT_DPO_LAST)
        reduce_buckets(S, r, chunk, st->bwd_start[chunk], st->bwd_end[chunk]);
    else if (S->c->dp_overlap == PT_DPO_NONE)
        st->pending[chunk] = true;
}

/* Runs one instruction of rank r if it can; returns false when it must wait. */
static bool step(sim *S, int r)
{
    rank_state *st = &S->rs[r];
    const pt_ins *in = &S->s->prog[r].ins[st->pc];
    int pp = S->l->pp, vs = in->chunk * pp + r;
    size_t slot = (size_t)in->mb * (size_t)S->V + (size_t)vs;
    switch (in->kind) {
    case PT_INS_RECV_ACT:
    case PT_INS_RECV_GRAD: {
        double at = in->kind == PT_INS_RECV_ACT ? S->act[slot] : S->grad[slot];
        if (isnan(at))
            return false;
        st->clock = fmax(st->clock, at);
        break;
    }
    case PT_INS_FWD:
    case PT_INS_BWD: {
        bool fwd = in->kind == PT_INS_FWD;
        double dur = fwd ? S->c->fwd_s[vs] : S->c->bwd_s[vs];
        if (fwd && st->first_fwd < 0)
            st->first_fwd = st->clock;
        if (!fwd) {
            st->bwd_start[in->chunk] = st->clock;
            st->bwd_end[in->chunk] = st->clock + dur;
            st->last_bwd_end = st->clock + dur;
            if (S->c->dp_overlap == PT_DPO_BACKWARD)
                reduce_buckets(S, r, in->chunk, st->clock, st->clock + dur);
        }
        span(S, r, 0, fwd ? "F" : "B", in->mb, in->chunk, st->pc, st->clock, dur);
        st->clock += dur;
        st->busy += dur;
        st->comm += fwd ? S->c->fwd_comm_s[vs] : S->c->bwd_comm_s[vs];
        break;
    }
    case PT_INS_SEND_ACT:   /* to virtual stage vs + 1 over the link r -> r + 1 */
    case PT_INS_SEND_GRAD: { /* to virtual stage vs - 1 over the link r - 1 -> r */
        bool act = in->kind == PT_INS_SEND_ACT;
        double t = S->c->p2p_s[act ? r : (r + pp - 1) % pp];
        if (act)
            S->act[slot + 1] = st->clock + t;
        else
            S->grad[slot - 1] = st->clock + t;
        if (S->c->p2p_blocking) { /* the sender's compute waits for the delivery */
            span(S, r, 0, act ? "send" : "send grad", in->mb, in->chunk, st->pc, st->clock, t);
            st->clock += t;
            st->comm += t;
            st->p2p_blocked += t;
        }
        break;
    }
    case PT_INS_REDUCE_GRADS: {
        /* gradient compression's work (bf16's conversions, PowerSGD's kernels), charged
         * whole here: on the CPU the host runs it between the backward's layers; on the
         * GPU PowerSGD's runs on a side stream beside the backward but shares its SMs,
         * so this is an upper bound there */
        double comp = S->c->sync_compute_s[vs];
        if (comp > 0) {
            span(S, r, 0, "compress", -1, in->chunk, st->pc, st->clock, comp);
            st->clock += comp;
            st->busy += comp;
        }
        reduce_grads(S, r, in->chunk);
        break;
    }
    default: { /* PT_INS_OPTIM_STEP: after every reduction */
        for (int c = 0; c < S->l->vp; c++)
            if (st->pending[c]) {
                reduce_buckets(S, r, c, st->clock, st->clock);
                st->pending[c] = false;
            }
        double start = fmax(st->clock, st->dp_free);
        st->dp_wait = start - st->clock;
        st->comm += start - st->clock + S->c->optim_comm_s[r];
        span(S, r, 0, "optimizer", -1, 0, st->pc, start, S->c->optim_s[r]);
        st->clock = start + S->c->optim_s[r] + S->c->overhead_s;
        st->end = st->clock;
        break;
    }
    }
    st->pc++;
    return true;
}

/* Round-robin over the ranks, each running until it waits for a receive. */
static int run_programs(sim *S, pt_err *err)
{
    int pp = S->l->pp;
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < pp; r++)
            while (S->rs[r].pc < S->s->prog[r].n && step(S, r))
                progress = true;
    }
    for (int r = 0; r < pp; r++)
        if (S->rs[r].pc < S->s->prog[r].n)
            return pt_err_set(err, "simulation stalled: pipeline rank %d waits at "
                                   "instruction %d", r, S->rs[r].pc);
    return 0;
}

/* Where rank `crit`'s step went: its forward and backward by category (the priced
 * lists, n_micro times), the reduction's wait and the optimizer's exposed gather as
 * DP, the optimizer kernel, the overhead; its idle time is the pipeline's: the
 * transfers on the warm-up and cool-down chain (2(p-1) of them) as p2p, the rest bubble. */
static void breakdown(const sim *S, int crit, pt_sim_result *out)
{
    const pt_layout *l = S->l;
    const pt_sim_costs *c = S->c;
    const rank_state *st = &S->rs[crit];
    double n = (double)l->n_micro, *e = out->breakdown_s, *h = out->hidden_s;
    for (int ch = 0; ch < l->vp; ch++) {
        size_t vs = (size_t)(ch * l->pp + crit);
        for (int k = 0; k < PT_BD_COUNT; k++) {
            e[k] += n * c->bd_exposed[vs * PT_BD_COUNT + k];
            h[k] += n * c->bd_hidden[vs * PT_BD_COUNT + k];
        }
    }
    e[PT_BD_DP] += st->dp_wait + c->optim_comm_s[crit];
    for (int ch = 0; ch < l->vp; ch++) /* gradient compression's compute */
        e[PT_BD_DP] += c->sync_compute_s[ch * l->pp + crit];
    h[PT_BD_DP] += fmax(0, st->sync_total - st->dp_wait);
    e[PT_BD_OPTIM] += c->optim_adam_s[crit];
    e[PT_BD_OVERHEAD] += c->overhead_s;
    double accounted = 0;
    for (int k = 0; k < PT_BD_COUNT; k++)
        accounted += e[k];
    double idle = fmax(0, st->end - accounted), p2p = 0;
    for (int r = 0; r < l->pp; r++)
        p2p = fmax(p2p, c->p2p_s[r]);
    double chain = l->pp > 1 ? 2.0 * (l->pp - 1) * p2p : 0;
    e[PT_BD_P2P] = fmin(idle, st->p2p_blocked + chain);
    h[PT_BD_P2P] = l->pp > 1 && !c->p2p_blocking ? 2.0 * n * l->vp * p2p - e[PT_BD_P2P] : 0;
    if (h[PT_BD_P2P] < 0)
        h[PT_BD_P2P] = 0;
    e[PT_BD_BUBBLE] = idle - e[PT_BD_P2P];
}

static void summarise(const sim *S, int64_t tokens, double peak, pt_sim_result *out)
{
    const pt_layout *l = S->l;
    *out = (pt_sim_result){.pp = l->pp};
    int crit = 0;
    for (int r = 0; r < l->pp; r++) {
        const rank_state *st = &S->rs[r];
        if (st->end > S->rs[crit].end)
            crit = r;
        double span_s = st->last_bwd_end - st->first_fwd;
        if (st->busy > 0)
            out->bubble_fraction = fmax(out->bubble_fraction, (span_s - st->busy) / st->busy);
        if (r < 64)
            out->stage_busy_s[r] = st->busy;
    }
    double t = S->rs[crit].end;
    out->step_time_s = t;
    out->tokens_per_s = t > 0 ? (double)tokens / t : 0;
    out->exposed_comm_fraction = t > 0 ? S->rs[crit].comm / t : 0;
    if (peak > 0 && t > 0) {
        out->mfu = S->c->model_flops / (t * peak);
        out->hfu = S->c->hardware_flops / (t * peak);
    }
    breakdown(S, crit, out);
    double total = 0;
    for (int p = 0; p < PT_PROV_COUNT; p++)
        total += S->c->prov_s[p];
    for (int p = 0; p < PT_PROV_COUNT; p++)
        out->prov_share[p] = total > 0 ? S->c->prov_s[p] / total : 0;
}

int pt_sim_run(const pt_layout *l, const pt_sim_costs *costs, int64_t tokens_per_step,
               double peak_flops_total, json_t *trace, pt_sim_result *out, pt_err *err)
{
    pt_sched s;
    if (pt_sched_build(l->schedule, l->pp, l->vp, (int)l->n_micro, &s, err))
        return -1;
    int rc = pt_sim_run_sched(l, &s, costs, tokens_per_step, peak_flops_total, trace, out, err);
    pt_sched_free(&s);
    return rc;
}

int pt_sim_run_sched(const pt_layout *l, const pt_sched *s, const pt_sim_costs *costs,
                     int64_t tokens_per_step, double peak_flops_total, json_t *trace,
                     pt_sim_result *out, pt_err *err)
{
    int V = l->pp * l->vp;
    size_t slots = (size_t)l->n_micro * (size_t)V;
    sim S = {.l = l, .c = costs, .s = s, .V = V, .trace = trace};
    S.act = malloc(slots * sizeof *S.act);
    S.grad = malloc(slots * sizeof *S.grad);
    S.rs = calloc((size_t)l->pp, sizeof *S.rs);
    double *chunk_times = calloc(2 * (size_t)V, sizeof *chunk_times);
    bool *pending = calloc((size_t)V, sizeof *pending);
    int rc = -1;
    if (!S.act || !S.grad || !S.rs || !chunk_times || !pending) {
        pt_err_set(err, "out of memory simulating %lld micro-batches", (long long)l->n_micro);
        goto done;
    }
    for (size_t i = 0; i < slots; i++)
        S.act[i] = S.grad[i] = NAN;
    for (int r = 0; r < l->pp; r++) {
        S.rs[r].first_fwd = -1;
        S.rs[r].bwd_start = chunk_times + (size_t)r * l->vp;
        S.rs[r].bwd_end = chunk_times + (size_t)V + (size_t)r * l->vp;
        S.rs[r].pending = pending + (size_t)r * l->vp;
    }
    rc = run_programs(&S, err);
    if (rc == 0)
        summarise(&S, tokens_per_step, peak_flops_total, out);
done:
    free(S.act);
    free(S.grad);
    free(S.rs);
    free(chunk_times);
    free(pending);
    return rc;
}
