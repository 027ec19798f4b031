/*
 * Layer op lists: the ordered kernels and collectives of one micro-batch on one rank
 * for a transformer layer (forward and backward), the embedding and the head with its
 * loss; the table of per-kind facts; the FLOPs of a step. The step's end (gradient
 * buckets, PowerSGD, the optimizer) is built in ops_step.c with the same builders
 * (ops_internal.h). The simulator prices these ops from the cost tables; the runtime
 * executes the same ops and traces them under the same keys. A change of what a layer
 * does is made here and nowhere else. Each op is typed (step.h: its kind, the
 * parameters it uses, the buffers a collective moves), so the runtime needs no names
 * to find out what to do.
 *
 * Letters as in planner.h. On a rank, T = s_r·b tokens (s_r = s/c) flow through
 * a layer; with sequence parallelism the norms, dropouts and residual adds see
 * T/t of them. Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019):
 * QKV and MLP-up column-parallel, attention output and MLP-down row-parallel, one
 * all-reduce after each row-parallel GEMM in the forward and before each
 * column-parallel one in the backward; with sp the all-reduces become all-gather /
 * reduce-scatter pairs (Korthikanti et al. 2022, Sec. 4.2.2).
 *
 * Op keys (the cost-table keys; ptprofile and the runtime's traces must write the
 * same): "<kind>:<dtype>:<shape>", kinds gemm, attn_fwd, attn_bwd, layernorm_fwd/_bwd,
 * rmsnorm_fwd/_bwd, gelu_fwd/_bwd, swiglu_fwd/_bwd, rope_fwd/_bwd, add_fwd,
 * embed_fwd/_bwd, xent (fused; xent_max and xent_sumexp its vocab-parallel passes),
 * gemm_gelu and gemm_dgelu (a GEMM with the GELU or its derivative in its epilogue),
 * add_layernorm_fwd and add_rmsnorm_fwd (the residual add fused into the norm),
 * xent_fwd/_bwd (unfused); the unfused attention's bmm, softmax_fwd/_bwd and
 * dropout_fwd/_bwd, flash attention's flash_fwd/_bwd; ops_step.c's adam and the
 * gradient compression's kernels.
 */
#include "ops_internal.h"
#include "memory_model.h" /* pt_attn_shape_of: the head form after cp's all-to-all */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- Names ---------------------------------------------------------------------- */

/* Bits of pt_op_kind_info.lists: the lists a kind may stand in. Tensor-parallel
 * collectives stand in every list of a micro-batch (the embedding's and head's
 * vocabulary-parallel sums, a layer's); ZeRO's reduce-scatter in a layer's backward
 * (ZeRO 2/3) and at the step's end (what the backward left unreduced). */
#define IN_LAYER (1u << PT_LIST_LAYER)
#define IN_EMBED (1u << PT_LIST_EMBED)
#define IN_HEAD (1u << PT_LIST_HEAD)
#define IN_SYNC (1u << PT_LIST_GRAD_SYNC)
#define IN_STEP (1u << PT_LIST_STEP)
#define IN_MICRO_BATCH (IN_LAYER | IN_EMBED | IN_HEAD)

/* One entry a kind, in the enum's order (a designated initialiser each, so the order
 * of this table carries nothing). */
#define KERNEL(k, n, in, cat) [k] = {n, PT_OP_KERNEL, in, cat, false}
#define PRICED(k, n, cat) [k] = {n, PT_OP_KERNEL, IN_LAYER, cat, true}
#define COLL(k, n, in, cat) [k] = {n, PT_OP_COLL, in, cat, false}
static const pt_op_kind_info kind_info[PT_OPK_COUNT] = {
    /* a layer's forward */
    KERNEL(PT_OPK_NORM1, "norm1", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_Q, "q", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_K, "k", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_V, "v", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_ROPE, "rope", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_ATTN, "attn", IN_LAYER, PT_BD_ATTN),
    KERNEL(PT_OPK_ATTN_OUT, "attn_out", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_ADD1, "add1", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_NORM2, "norm2", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_MLP_GATE, "mlp_gate", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_MLP_UP, "mlp_up", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_ACT, "act", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_MLP_DOWN, "mlp_down", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_ADD2, "add2", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_ADD1_NORM2, "add1_norm2", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_MLP_UP_GELU, "mlp_up_gelu", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_QKV, "qkv", IN_LAYER, PT_BD_GEMM),
    /* its backward */
    KERNEL(PT_OPK_MLP_DOWN_DGRAD, "mlp_down_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_MLP_DOWN_WGRAD, "mlp_down_wgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_ACT_BWD, "act_bwd", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_MLP_GATE_DGRAD, "mlp_gate_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_MLP_UP_DGRAD, "mlp_up_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_MLP_GATE_WGRAD, "mlp_gate_wgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_MLP_UP_WGRAD, "mlp_up_wgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_NORM2_BWD, "norm2_bwd", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_ATTN_OUT_DGRAD, "attn_out_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_ATTN_OUT_WGRAD, "attn_out_wgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_ATTN_BWD, "attn_bwd", IN_LAYER, PT_BD_ATTN),
    KERNEL(PT_OPK_ROPE_BWD, "rope_bwd", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_Q_DGRAD, "q_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_K_DGRAD, "k_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_V_DGRAD, "v_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_Q_WGRAD, "q_wgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_K_WGRAD, "k_wgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_V_WGRAD, "v_wgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_NORM1_BWD, "norm1_bwd", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_MLP_DOWN_DGRAD_GELU, "mlp_down_dgrad_gelu", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_QKV_WGRAD, "qkv_wgrad", IN_LAYER, PT_BD_GEMM),
    /* unfused attention: batched GEMMs and element kernels, priced as attention */
    PRICED(PT_OPK_ATTN_SCORES, "attn_scores", PT_BD_ATTN),
    PRICED(PT_OPK_ATTN_SOFTMAX, "attn_softmax", PT_BD_ATTN),
    PRICED(PT_OPK_ATTN_DROPOUT, "attn_dropout", PT_BD_ATTN),
    PRICED(PT_OPK_ATTN_CTX, "attn_ctx", PT_BD_ATTN),
    PRICED(PT_OPK_ATTN_CTX_DGRAD, "attn_ctx_dgrad", PT_BD_ATTN),
    PRICED(PT_OPK_ATTN_CTX_WGRAD, "attn_ctx_wgrad", PT_BD_ATTN),
    PRICED(PT_OPK_ATTN_DROPOUT_BWD, "attn_dropout_bwd", PT_BD_ATTN),
    PRICED(PT_OPK_ATTN_SOFTMAX_BWD, "attn_softmax_bwd", PT_BD_ATTN),
    PRICED(PT_OPK_ATTN_SCORES_DGRAD, "attn_scores_dgrad", PT_BD_ATTN),
    PRICED(PT_OPK_ATTN_SCORES_WGRAD, "attn_scores_wgrad", PT_BD_ATTN),
    /* embedding and head */
    KERNEL(PT_OPK_EMBED, "embed", IN_EMBED, PT_BD_OTHER),
    KERNEL(PT_OPK_EMBED_BWD, "embed_bwd", IN_EMBED, PT_BD_OTHER),
    KERNEL(PT_OPK_FINAL_NORM, "final_norm", IN_HEAD, PT_BD_OTHER),
    KERNEL(PT_OPK_LOGITS, "logits", IN_HEAD, PT_BD_GEMM),
    KERNEL(PT_OPK_LOGITS_DGRAD, "logits_dgrad", IN_HEAD, PT_BD_GEMM),
    KERNEL(PT_OPK_LOGITS_WGRAD, "logits_wgrad", IN_HEAD, PT_BD_GEMM),
    KERNEL(PT_OPK_FINAL_NORM_BWD, "final_norm_bwd", IN_HEAD, PT_BD_OTHER),
    /* cross-entropy; the unfused form's backward and its all-reduce are priced only */
    KERNEL(PT_OPK_XENT, "xent", IN_HEAD, PT_BD_OTHER),
    KERNEL(PT_OPK_XENT_MAX, "xent_max", IN_HEAD, PT_BD_OTHER),
    KERNEL(PT_OPK_XENT_SUMEXP, "xent_sumexp", IN_HEAD, PT_BD_OTHER),
    COLL(PT_OPK_XENT_MAX_ALLREDUCE, "xent_max_allreduce", IN_HEAD, PT_BD_TP),
    COLL(PT_OPK_XENT_SUM_ALLREDUCE, "xent_sum_allreduce", IN_HEAD, PT_BD_TP),
    [PT_OPK_XENT_BWD] = {"xent_bwd", PT_OP_KERNEL, IN_HEAD, PT_BD_OTHER, true},
    [PT_OPK_XENT_ALLREDUCE] = {"xent_allreduce", PT_OP_COLL, IN_HEAD, PT_BD_TP, true},
    /* tensor and context parallelism */
    COLL(PT_OPK_TP_ALLREDUCE, "tp_allreduce", IN_MICRO_BATCH, PT_BD_TP),
    COLL(PT_OPK_SP_ALLGATHER, "sp_allgather", IN_MICRO_BATCH, PT_BD_TP),
    COLL(PT_OPK_SP_REDUCESCATTER, "sp_reducescatter", IN_MICRO_BATCH, PT_BD_TP),
    COLL(PT_OPK_CP_RING, "cp_ring", IN_LAYER, PT_BD_CP),
    COLL(PT_OPK_CP_RING_BWD, "cp_ring_bwd", IN_LAYER, PT_BD_CP),
    COLL(PT_OPK_CP_A2A_Q, "cp_a2a_q", IN_LAYER, PT_BD_CP),
    COLL(PT_OPK_CP_A2A_KV, "cp_a2a_kv", IN_LAYER, PT_BD_CP),
    COLL(PT_OPK_CP_A2A_OUT, "cp_a2a_out", IN_LAYER, PT_BD_CP),
    COLL(PT_OPK_CP_A2A_DOUT, "cp_a2a_dout", IN_LAYER, PT_BD_CP),
    COLL(PT_OPK_CP_A2A_DQ, "cp_a2a_dq", IN_LAYER, PT_BD_CP),
    COLL(PT_OPK_CP_A2A_DKV, "cp_a2a_dkv", IN_LAYER, PT_BD_CP),
    /* cp_comm=all_gather: Transformer Engine's, which ptrun does not run */
    [PT_OPK_CP_ALLGATHER] = {"cp_allgather", PT_OP_COLL, IN_LAYER, PT_BD_CP, true},
    [PT_OPK_CP_REDUCESCATTER] = {"cp_reducescatter", PT_OP_COLL, IN_LAYER, PT_BD_CP, true},
    /* a mixture-of-experts layer */
    KERNEL(PT_OPK_ROUTER, "router", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_MOE_ROUTE, "moe_route", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_MOE_AUX, "moe_aux", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_MOE_PERMUTE, "moe_permute", IN_LAYER, PT_BD_OTHER),
    COLL(PT_OPK_MOE_DISPATCH, "moe_dispatch", IN_LAYER, PT_BD_EP),
    COLL(PT_OPK_ETP_ALLGATHER, "etp_allgather", IN_LAYER, PT_BD_EP),
    KERNEL(PT_OPK_EXPERT_FC1, "expert_fc1", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_EXPERT_ACT, "expert_act", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_EXPERT_FC2, "expert_fc2", IN_LAYER, PT_BD_GEMM),
    COLL(PT_OPK_ETP_REDUCESCATTER, "etp_reducescatter", IN_LAYER, PT_BD_EP),
    COLL(PT_OPK_MOE_COMBINE, "moe_combine", IN_LAYER, PT_BD_EP),
    KERNEL(PT_OPK_MOE_UNPERMUTE, "moe_unpermute", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_MOE_UNPERMUTE_BWD, "moe_unpermute_bwd", IN_LAYER, PT_BD_OTHER),
    COLL(PT_OPK_MOE_COMBINE_BWD, "moe_combine_bwd", IN_LAYER, PT_BD_EP),
    COLL(PT_OPK_ETP_ALLGATHER_BWD, "etp_allgather_bwd", IN_LAYER, PT_BD_EP),
    KERNEL(PT_OPK_EXPERT_FC2_DGRAD, "expert_fc2_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_EXPERT_FC2_WGRAD, "expert_fc2_wgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_EXPERT_ACT_BWD, "expert_act_bwd", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_EXPERT_FC1_DGRAD, "expert_fc1_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_EXPERT_FC1_WGRAD, "expert_fc1_wgrad", IN_LAYER, PT_BD_GEMM),
    COLL(PT_OPK_ETP_REDUCESCATTER_BWD, "etp_reducescatter_bwd", IN_LAYER, PT_BD_EP),
    COLL(PT_OPK_MOE_DISPATCH_BWD, "moe_dispatch_bwd", IN_LAYER, PT_BD_EP),
    KERNEL(PT_OPK_MOE_PERMUTE_BWD, "moe_permute_bwd", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_MOE_ROUTE_BWD, "moe_route_bwd", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_ROUTER_DGRAD, "router_dgrad", IN_LAYER, PT_BD_GEMM),
    KERNEL(PT_OPK_ROUTER_WGRAD, "router_wgrad", IN_LAYER, PT_BD_GEMM),
    PRICED(PT_OPK_MOE_SYNC, "moe_sync", PT_BD_OVERHEAD),
    KERNEL(PT_OPK_QK_NORM, "qk_norm", IN_LAYER, PT_BD_OTHER),
    KERNEL(PT_OPK_QK_NORM_BWD, "qk_norm_bwd", IN_LAYER, PT_BD_OTHER),
    /* data parallelism, ZeRO and the optimizer */
    COLL(PT_OPK_ZERO3_ALLGATHER, "zero3_allgather", IN_LAYER, PT_BD_DP),
    COLL(PT_OPK_ZERO_REDUCESCATTER, "zero_reducescatter", IN_LAYER | IN_STEP, PT_BD_DP),
    COLL(PT_OPK_DP_BUCKET, "dp_bucket", IN_SYNC, PT_BD_DP),
    COLL(PT_OPK_EMBED_ALLREDUCE, "embed_allreduce", IN_STEP, PT_BD_DP),
    COLL(PT_OPK_GRAD_NORM, "grad_norm_allreduce", IN_STEP, PT_BD_DP),
    KERNEL(PT_OPK_ADAM, "adam", IN_STEP, PT_BD_OTHER),
    COLL(PT_OPK_ZERO_ALLGATHER, "zero_allgather", IN_STEP, PT_BD_DP),
    /* gradient compression, in a chunk's gradient-bucket list */
    KERNEL(PT_OPK_BF16_CONVERT, "bf16_convert", IN_SYNC, PT_BD_OTHER),
    KERNEL(PT_OPK_PSGD_ERROR, "powersgd_error", IN_SYNC, PT_BD_OTHER),
    KERNEL(PT_OPK_PSGD_P, "powersgd_p", IN_SYNC, PT_BD_OTHER),
    KERNEL(PT_OPK_PSGD_ORTH, "powersgd_orth", IN_SYNC, PT_BD_OTHER),
    KERNEL(PT_OPK_PSGD_Q, "powersgd_q", IN_SYNC, PT_BD_OTHER),
    KERNEL(PT_OPK_PSGD_DECOMPRESS, "powersgd_decompress", IN_SYNC, PT_BD_OTHER),
    COLL(PT_OPK_PSGD_ALLREDUCE_P, "powersgd_allreduce_p", IN_SYNC, PT_BD_DP),
    COLL(PT_OPK_PSGD_ALLREDUCE_Q, "powersgd_allreduce_q", IN_SYNC, PT_BD_DP),
};
#undef KERNEL
#undef PRICED
#undef COLL

const pt_op_kind_info *pt_op_kind_info_of(pt_op_kind k)
{
    static const pt_op_kind_info unknown = {"?", PT_OP_KERNEL, 0, PT_BD_OTHER, false};
    return (unsigned)k < PT_OPK_COUNT && kind_info[k].name ? &kind_info[k] : &unknown;
}

const char *pt_op_kind_name(pt_op_kind k)
{
    return pt_op_kind_info_of(k)->name;
}

bool pt_op_kind_in(pt_op_kind k, pt_list_kind list)
{
    return (unsigned)list < PT_LIST_COUNT && (pt_op_kind_info_of(k)->lists >> list & 1u);
}

static const char *const param_names[PT_PARAM_COUNT] = {
    [PT_PARAM_NORM1] = "norm1", [PT_PARAM_Q] = "q", [PT_PARAM_K] = "k", [PT_PARAM_V] = "v",
    [PT_PARAM_ATTN_OUT] = "attn_out", [PT_PARAM_NORM2] = "norm2",
    [PT_PARAM_MLP_GATE] = "mlp_gate", [PT_PARAM_MLP_UP] = "mlp_up",
    [PT_PARAM_MLP_DOWN] = "mlp_down", [PT_PARAM_FINAL_NORM] = "final_norm",
    [PT_PARAM_HEAD] = "lm_head", [PT_PARAM_WTE] = "wte", [PT_PARAM_WPE] = "wpe",
    [PT_PARAM_ROUTER] = "router", [PT_PARAM_EXPERT_FC1] = "experts.fc1",
    [PT_PARAM_EXPERT_FC2] = "experts.fc2", [PT_PARAM_QK_NORM] = "qk_norm",
};

bool pt_param_ref_in_layer(pt_param_ref r)
{
    return (r >= PT_PARAM_NORM1 && r <= PT_PARAM_MLP_DOWN) ||
           (r >= PT_PARAM_ROUTER && r <= PT_PARAM_QK_NORM);
}

const char *pt_param_ref_name(pt_param_ref r)
{
    return r > PT_PARAM_NONE && r < PT_PARAM_COUNT ? param_names[r] : NULL;
}

static const char *const tensor_names[PT_TEN_COUNT] = {
    [PT_TEN_NONE] = "none", [PT_TEN_ATTN_RES] = "attn_res", [PT_TEN_MLP_RES] = "mlp_res",
    [PT_TEN_EMBED_RES] = "embed_res", [PT_TEN_ROW_PARTIAL] = "row_partial",
    [PT_TEN_LN1] = "ln1", [PT_TEN_LN2] = "ln2", [PT_TEN_LNF] = "lnf",
    [PT_TEN_GATHERED] = "gathered", [PT_TEN_DRES] = "dres",
    [PT_TEN_DRES_GATHERED] = "dres_gathered", [PT_TEN_DLN] = "dln",
    [PT_TEN_DLN_ROWS] = "dln_rows", [PT_TEN_XENT_MAX] = "xent_max",
    [PT_TEN_XENT_SUMS] = "xent_sums", [PT_TEN_KV] = "kv",
    [PT_TEN_LAYER_WEIGHTS] = "layer_weights", [PT_TEN_LAYER_GRADS] = "layer_grads",
    [PT_TEN_GRADS] = "grads", [PT_TEN_EMBED_GRAD] = "embed_grad", [PT_TEN_WEIGHTS] = "weights",
};

const char *pt_tensor_name(pt_tensor t)
{
    return t >= 0 && t < PT_TEN_COUNT ? tensor_names[t] : "?";
}

/* ---- The list ------------------------------------------------------------------ */

void pt_oplist_free(pt_oplist *o)
{
    free(o->op);
    *o = (pt_oplist){0};
}

/* ---- Context --------------------------------------------------------------------- */

/* Ranks of rank 0's group of `kind` that share NVLink domain 0: with uniform groups,
 * the ranks per domain of every group of that kind. */
static int group_ranks_per_node(const pt_grid *g, pt_group_kind kind, int nvlink_domain)
{
    int size = pt_grid_group_size(g, kind);
    int64_t *ranks = malloc((size_t)size * sizeof *ranks);
    if (!ranks)
        return 1;
    int n = pt_grid_group_below(g, kind, 0, nvlink_domain, ranks);
    free(ranks);
    return n;
}

void pt_opctx_init(pt_opctx *c, const pt_model *m, const pt_layout *l, const pt_train *t,
                   const pt_cluster *cl)
{
    *c = (pt_opctx){.m = m, .l = l, .t = t, .prec = pt_precision_of(t->precision),
                    .moe_imbalance = t->moe_imbalance >= 1 ? t->moe_imbalance : 1};
    /* the layer lists of the first layer's kind; a model with both kinds asks for the
     * other by setting moe_layer */
    c->moe_layer = pt_model_layer_moe(m, 0);
    c->window_layer = pt_model_layer_window(m, 0);
    c->dtype = pt_prec_dtype(t->precision);
    pt_grid g;
    pt_grid_init(&g, l);
    /* A collective's "node" (pt_coll_op.ranks_per_node: the ranks on the fast link) is
     * the NVLink domain, which on a GB200 NVL72 rack spans 18 nodes. */
    int dom = cl ? pt_cluster_nvlink_domain(cl) : (int)g.world;
    for (int k = 0; k < PT_GROUP_COUNT; k++)
        c->ranks_per_node[k] = group_ranks_per_node(&g, (pt_group_kind)k, dom);
    /* The first and last stage of rank 0's pipeline share a domain when the pipeline
     * group's ends do. */
    int coords[PT_NDIM] = {0};
    coords[PT_DIM_PP] = l->pp - 1;
    c->embed_ranks_per_node = pt_grid_rank(&g, coords) / dom == 0 ? 2 : 1;
    c->world_ranks_per_node = g.world < dom ? (int)g.world : dom;
    if (cl)
        snprintf(c->device, sizeof c->device, "%s", cl->device.name);
}

/* ---- Op builders ---------------------------------------------------------------- */

/* ---- FP8 GEMMs ---- */

/* Whether the GEMM of `param` runs in FP8: a transformer layer's linear layer when the
 * training asks for FP8; the output head, the embedding and attention stay in the
 * storage precision, as Transformer Engine's recipes (only te.Linear-family modules
 * run under fp8_autocast; Megatron-Core's output layer is a plain
 * ColumnParallelLinear) and torchtitan (float8's filter_fqns keeps "output") run them. */
static bool fp8_param(const builder *b, pt_param_ref param)
{
    if (!pt_train_fp8(b->c->t))
        return false;
    switch (param) {
    case PT_PARAM_Q: case PT_PARAM_K: case PT_PARAM_V: case PT_PARAM_ATTN_OUT:
    case PT_PARAM_MLP_GATE: case PT_PARAM_MLP_UP: case PT_PARAM_MLP_DOWN:
    case PT_PARAM_EXPERT_FC1: case PT_PARAM_EXPERT_FC2: /* TE's GroupedLinear */
        return true;
    default:
        return false;
    }
}

typedef enum { FP8_FWD, FP8_DGRAD, FP8_WGRAD } fp8_pass;

static fp8_pass fp8_pass_of(pt_gemm_role role)
{
    switch (role) {
    case PT_GEMM_DGRAD: case PT_GEMM_DGRAD_DGELU: case PT_GEMM_DGRAD_WRITE: return FP8_DGRAD;
    case PT_GEMM_WGRAD: case PT_GEMM_WGRAD_BIAS: return FP8_WGRAD;
    default: return FP8_FWD;
    }
}

/* A memory-bound pass over `elems` elements moving `per_elem` bytes each. */
static void fp8_pass_add(pt_fp8_work *w, double elems, double per_elem, double share)
{
    w->bytes += share * elems * per_elem;
    w->passes += share;
}

/* Whether ptrun's GELU takes the amax of what it writes for the FP8 cast after it
 * (pt_fp8_work.take_amax and taken_a; kernels.h's gelu_forward_amax, gelu_backward_amax):
 * current scaling, a GELU MLP, and the consumer (the down projection's input, the up
 * projection's output gradient) an FP8 layer. */
static bool gelu_takes_amax(const builder *b, pt_param_ref consumer)
{
    return b->c->m->act != PT_ACT_SWIGLU && b->c->t->fp8.recipe == PT_FP8_CURRENT &&
           pt_stack_is_ptrun(&b->c->t->stack) && fp8_param(b, consumer);
}

/* Whether each micro-batch's backward on a rank follows its own forward with no other
 * forward between: one micro-batch in flight at a time. */
static bool one_in_flight(const pt_layout *l)
{
    return l->pp == 1 && (l->schedule != PT_SCHED_AFAB || l->n_micro == 1);
}

/* ptrun's runtime (and torchao's Float8Linear): each GEMM op quantizes its own two
 * operands, A (m, k) and B (n, k) in the TN layout every role is called in (kernels.h's
 * gemm_fp8): forward X (T, ic) and W (oc, ic); data gradient dY (T, oc) and W^T (ic, oc),
 * written as the transpose only; weight gradient dY^T (oc, T) and X^T (ic, T), transposes
 * only. Per operand: current scaling reads it once for its amax (fp8_amax) and runs
 * fp8_scale; then fp8_cast reads it and writes one byte per element (the transpose
 * instead where that is what the GEMM reads); delayed scaling takes the amax inside the
 * cast (no amax pass) and runs fp8_scale too. Where a rank holds a slice of an operand
 * its amax is all-reduced (max) before the scale is taken (the scale must be the same on
 * every rank for the slices to be one tensor): over tp the weight, the input X of a
 * row-parallel layer and the output gradient dY of a column-parallel one; over cp every
 * activation (X, dY: the sequence's rows). Current scaling reduces before every cast;
 * delayed scaling only where a use pushes its amax into the history (the forward's X
 * and W, the data gradient's dY: runtime/fp8.c's push). Under current scaling ptrun
 * reuses casts (runtime/fp8.c's operand_in): k and v take q's input (in the forward,
 * and its transpose in the weight gradients: fp8_input_cast), and a data gradient whose
 * layer's weight gradient comes right after it (fp8_dy_kept) writes dY's transpose beside
 * its rows (one more byte an element), which that weight gradient takes (fp8_dy_held).
 * torchao's Float8Linear casts per GEMM and reuses nothing. */
static void fp8_per_gemm(const builder *b, pt_op *op, int64_t m, int64_t n, int64_t k,
                         bool row_parallel)
{
    pt_fp8_work *w = &op->fp8;
    double ab = b->c->prec.act_bytes;
    double elems[2] = {(double)m * (double)k, (double)n * (double)k};
    bool amax_pass = b->c->t->fp8.recipe != PT_FP8_DELAYED;
    fp8_pass p = fp8_pass_of(op->role);
    /* which operands this GEMM casts (a: X, dY or dY^T; b: W, W^T or X^T), and the
     * bytes an element of a's cast writes */
    bool reuse = b->c->t->fp8.recipe == PT_FP8_CURRENT && pt_stack_is_ptrun(&b->c->t->stack);
    bool cast_a = !(reuse && ((p == FP8_FWD && b->fp8_input_cast) ||
                              (p == FP8_WGRAD && b->fp8_dy_held)));
    bool cast_b = !(reuse && p == FP8_WGRAD && b->fp8_input_cast);
    double a_writes = reuse && p == FP8_DGRAD && b->fp8_dy_kept ? 2 : 1;
    w->reuse_a = !cast_a;
    w->reuse_b = !cast_b;
    w->dy_both = a_writes == 2;
    /* ptrun's re-casts whose scale is known (known_a, known_b; the runtime's memo
     * confirms each): no amax pass, no scale, no reduction. The data gradient's W^T (the
     * forward took its amax); the weight gradient's dY^T (the data gradient just before
     * did) and its X^T where the forward's amax is still the last one taken there
     * (one_in_flight). */
    bool known_a = cast_a && reuse && p == FP8_WGRAD;
    bool known_b = cast_b && reuse &&
                   (p == FP8_DGRAD || (p == FP8_WGRAD && one_in_flight(b->c->l)));
    /* a scale taken from a fresh amax, and reduced where the operand is sliced */
    bool amax_a = cast_a && amax_pass && !known_a, amax_b = cast_b && amax_pass && !known_b;
    /* the amaxes the GELU takes as it writes them (gelu_takes_amax): the scale is still
     * taken, without a pass over the tensor */
    bool after_gelu = (p == FP8_FWD && op->kind == PT_OPK_MLP_DOWN) ||
                      (p == FP8_DGRAD && op->kind == PT_OPK_MLP_UP_DGRAD);
    bool taken_a = amax_a && after_gelu && gelu_takes_amax(b, op->param);
    w->known_a = known_a;
    w->known_b = known_b;
    w->taken_a = taken_a;
    for (int i = 0; i < 2; i++) {
        if (!(i == 0 ? cast_a : cast_b))
            continue;
        bool amax = i == 0 ? amax_a : amax_b;
        if (amax && !(i == 0 && taken_a))
            fp8_pass_add(w, elems[i], ab, 1);
        fp8_pass_add(w, elems[i], ab + (i == 0 ? a_writes : 1), 1);
        w->launches += amax || !amax_pass; /* the scale kernel */
    }
    int sharded, rows;
    switch (p) { /* (a reused cast is not reduced again) */
    case FP8_FWD: /* X (tp when row-parallel; cp) and W (tp), both pushed */
        sharded = (cast_a && row_parallel) + 1;
        rows = cast_a;
        break;
    case FP8_DGRAD: /* dY, pushed (tp when column-parallel; cp); W^T (tp) */
        sharded = !row_parallel + amax_b;
        rows = 1;
        break;
    default: /* dY^T (tp when column-parallel; cp) and X^T (tp when row-parallel; cp) */
        sharded = (amax_a && !row_parallel) + (amax_b && row_parallel);
        rows = amax_a + amax_b;
        break;
    }
    pt_grid g;
    pt_grid_init(&g, b->c->l);
    int tp = pt_grid_group_size(&g, PT_GROUP_TP), cp = pt_grid_group_size(&g, PT_GROUP_CP);
    if (tp > 1) {
        w->amax_reduces = sharded;
        w->amax = (pt_coll_op){.op = PT_COLL_ALLREDUCE, .bytes = 4, .group = tp,
                               .ranks_per_node = b->c->ranks_per_node[PT_GROUP_TP]};
    }
    if (cp > 1) {
        w->amax_cp_reduces = rows;
        w->amax_cp = (pt_coll_op){.op = PT_COLL_ALLREDUCE, .bytes = 4, .group = cp,
                                  .ranks_per_node = b->c->ranks_per_node[PT_GROUP_CP]};
    }
}

/* Transformer Engine's linear modules (transformer_engine/pytorch/module/linear.py and
 * layernorm_linear.py): the forward quantizes the module's input once, writing the FP8
 * rows and their transpose in one fused cast-transpose kernel (the transpose is what
 * the weight gradient reads, and what the module keeps for its backward); the weight is
 * quantized with its transpose on the first micro-batch of a step only and cached for
 * the others (is_first_microbatch), so each micro-batch carries 1/n_micro of it; the
 * backward quantizes the output gradient with its transpose once per module (the data
 * and the weight gradient read the two). Delayed scaling takes the amax inside those
 * kernels; current scaling (Float8CurrentScaling) reads each tensor once more for its
 * amax first. The weight gradient quantizes nothing. q, k and v (gate and up) are one
 * module on one input in Megatron-Core (linear_qkv, linear_fc1): their input is quantized
 * once, with the first projection. TE's reduction of the amaxes over the model's ranks
 * (one small all-reduce of the whole amax buffer per step) is left out. */
static void fp8_te(builder *b, pt_op *op, int64_t m, int64_t n, int64_t k)
{
    pt_fp8_work *w = &op->fp8;
    double ab = b->c->prec.act_bytes, n_micro = (double)(b->c->l->n_micro > 0 ? b->c->l->n_micro : 1);
    bool amax_pass = b->c->t->fp8.recipe == PT_FP8_CURRENT;
    double per = ab + 2; /* read, write the FP8 rows and their transpose */
    switch (fp8_pass_of(op->role)) {
    case FP8_FWD: {
        double x = (double)m * (double)k, wt = (double)n * (double)k;
        if (!b->fp8_input_cast) {
            if (amax_pass)
                fp8_pass_add(w, x, ab, 1);
            fp8_pass_add(w, x, per, 1);
        }
        if (amax_pass)
            fp8_pass_add(w, wt, ab, 1 / n_micro);
        fp8_pass_add(w, wt, per, 1 / n_micro);
        break;
    }
    case FP8_DGRAD: { /* dY is (m, k) = (T, oc) */
        double dy = (double)m * (double)k;
        if (amax_pass)
            fp8_pass_add(w, dy, ab, 1);
        fp8_pass_add(w, dy, per, 1);
        break;
    }
    case FP8_WGRAD:
        break;
    }
}

/* Whether ptrun sums FP8 linear layer param's bias gradient in its data gradient's cast
 * of the output gradient (pt_fp8_work.dbias, kernels.h's fp8_cast_dbias): where the
 * layer has a bias, but for K and V when tp ranks share a KV head, whose bias gradients
 * are summed over tp apart (runtime/layer.c's kv_wgrad_shared). */
static bool fp8_dbias_in_dgrad(const builder *b, pt_param_ref param)
{
    bool kv = param == PT_PARAM_K || param == PT_PARAM_V;
    return fp8_param(b, param) && pt_stack_is_ptrun(&b->c->t->stack) && b->c->m->bias &&
           !(kv && pt_kv_head_copies(b->c->m, b->c->l->tp) > 1);
}

static void fp8_work(builder *b, pt_op *op, pt_param_ref param, int64_t m, int64_t n,
                     int64_t k)
{
    bool row_parallel = param == PT_PARAM_ATTN_OUT || param == PT_PARAM_MLP_DOWN ||
                        param == PT_PARAM_EXPERT_FC2;
    if (b->c->t->stack.fp8_casts == PT_FP8_CASTS_TE)
        fp8_te(b, op, m, n, k);
    else
        fp8_per_gemm(b, op, m, n, k, row_parallel);
    /* the bias gradient rides the cast's read of dY: no pass of its own */
    op->fp8.dbias = fp8_pass_of(op->role) == FP8_DGRAD && fp8_dbias_in_dgrad(b, param);
}

/* A GEMM of the layers in one of its roles (pt_gemm_role, costmodels/cost.h: the key's
 * kind names the runtime's call) and its traffic: the inputs read; the output written,
 * with the GELU the pre-activation written too (kept for the backward), a data gradient
 * read and written (it adds into its output), through the GELU's derivative written
 * and the saved pre-activation read; a weight gradient's fp32 output read and written,
 * and the bias gradient's with it. The roles are priced apart because the libraries
 * pick other kernels for each (operand layouts, output type, epilogue), which run at
 * other speeds than the forward GEMM of the same m, n and k (the code notes in
 * docs/results/). */
static pt_op *gemm_batch(builder *b, pt_op_kind kind, pt_param_ref param, int batch,
                         int64_t m, int64_t n, int64_t k, pt_gemm_role role)
{
    pt_op *op = add_op(b, kind);
    if (!op)
        return NULL;
    /* a batch of `batch` products of one shape (the layers of one input and one width:
     * kernels.h's matmul_forward_shared, matmul_wgrad_shared), each counted as if alone,
     * the shared operand read by each */
    double ab = b->c->prec.act_bytes;
    bool fp8 = fp8_param(b, param);
    double out = (double)batch * (double)m * (double)n;
    /* FP8 operands are one byte an element; the output stays in the role's type */
    double ins = (double)batch * (fp8 ? 1 : ab) * ((double)m * (double)k + (double)k * (double)n);
    op->param = param;
    /* an FP8 GEMM's dtype is fp8 emulated or not (its trace spans are told apart by it);
     * emulated, on a device without an FP8 peak, the analytic model prices it at the
     * storage precision's (costmodels/analytic.c, peak_for) */
    op->kernel.dtype = fp8 ? PT_DTYPE_FP8 : b->c->dtype;
    op->kernel.flops = 2.0 * (double)batch * (double)m * (double)n * (double)k;
    /* a forward with a bias (the model's, or the head's vocabulary mask) is another call:
     * cuBLASLt's bias epilogue, which reads the bias too, and is priced and profiled as
     * a role of its own. A row-parallel layer's bias is added by tp rank 0 only (its
     * partial outputs are summed over tp afterwards): the other ranks' call has none.
     * The runtime adds a bias exactly where the role has one (pt_gemm_role_has_bias). */
    bool row_parallel = param == PT_PARAM_ATTN_OUT || param == PT_PARAM_MLP_DOWN ||
                        param == PT_PARAM_EXPERT_FC2;
    bool bias = param == PT_PARAM_HEAD ? pt_vocab_mask_elems(b->c->m, b->c->l->tp) > 0
                                       : b->c->m->bias && !(row_parallel && b->c->tp_rank != 0);
    /* ptrun's FP8 layers sum the bias gradient in the data gradient's cast: the weight
     * gradient's call has none (fp8_dbias_in_dgrad) */
    if (role == PT_GEMM_WGRAD_BIAS && fp8 && fp8_dbias_in_dgrad(b, param))
        role = PT_GEMM_WGRAD;
    if (bias && role == PT_GEMM_FWD)
        role = PT_GEMM_FWD_BIAS;
    else if (bias && role == PT_GEMM_FWD_GELU)
        role = PT_GEMM_FWD_GELU_BIAS;
    else if (bias && role == PT_GEMM_FWD_RES)
        role = PT_GEMM_FWD_BIAS_RES;
    switch (role) {
    case PT_GEMM_FWD: op->kernel.bytes = ins + ab * out; break;
    case PT_GEMM_FWD_BIAS: op->kernel.bytes = ins + ab * out + ab * (double)batch * n; break;
    case PT_GEMM_FWD_RES: op->kernel.bytes = ins + 2 * ab * out; break; /* res read too */
    case PT_GEMM_FWD_BIAS_RES:
    case PT_GEMM_FWD_GELU_BIAS:
        op->kernel.bytes = ins + 2 * ab * out + ab * (double)batch * n;
        break;
    case PT_GEMM_DGRAD_WRITE: op->kernel.bytes = ins + ab * out; break;
    case PT_GEMM_FWD_GELU:
    case PT_GEMM_DGRAD:
    case PT_GEMM_DGRAD_DGELU: op->kernel.bytes = ins + 2 * ab * out; break;
    case PT_GEMM_WGRAD: op->kernel.bytes = ins + 8 * out; break;
    default: /* PT_GEMM_WGRAD_BIAS: and the bias gradient's fp32 */
        op->kernel.bytes = ins + 8 * out + 8 * (double)batch * m;
        break;
    }
    op->role = role;
    op->out_elems = out;
    /* a batch's key names its count first: "gemm_bias:bf16:b=3,m=...,n=...,k=..." */
    char count[24] = "";
    if (batch > 1)
        snprintf(count, sizeof count, "b=%d,", batch);
    snprintf(op->kernel.key, sizeof op->kernel.key, "%s:%s:%sm=%lld,n=%lld,k=%lld",
             pt_gemm_role_kind(role), pt_dtype_name(fp8 ? PT_DTYPE_FP8 : b->c->dtype), count,
             (long long)m, (long long)n, (long long)k);
    if (fp8)
        fp8_work(b, op, param, m, n, k);
    return op;
}

static pt_op *gemm(builder *b, pt_op_kind kind, pt_param_ref param, int64_t m, int64_t n,
                   int64_t k, pt_gemm_role role)
{
    return gemm_batch(b, kind, param, 1, m, n, k, role);
}

/* Names the tensor a kernel op reads (src) or writes (dst), where it is not the op's
 * own: op may be NULL (out of memory, already counted). */
static void reads(pt_op *op, pt_tensor t)
{
    if (op)
        op->src = t;
}

static void writes(pt_op *op, pt_tensor t)
{
    if (op)
        op->dst = t;
}

/* The weight gradient's role: with the bias gradient where the model's projections
 * have biases (the output head has none). */
static pt_gemm_role wgrad_role(const builder *b, pt_param_ref param)
{
    return b->c->m->bias && param != PT_PARAM_HEAD ? PT_GEMM_WGRAD_BIAS : PT_GEMM_WGRAD;
}

/* ---- Sizes ---------------------------------------------------------------------- */

typedef struct {
    int64_t tokens;  /* T = s_r·b */
    int64_t rows;    /* tokens a norm or residual add sees: T, or T/t with sp */
    int64_t h, f, t, hd, kvr; /* kvr: K (or V) width on one rank */
    int64_t qd;      /* Q width on one rank: a·d/t (h/t unless head_dim says) */
    double ab;       /* bytes per activation element */
} dims;

pt_rank_shape pt_rank_shape_of(const pt_model *m, const pt_layout *l)
{
    pt_rank_shape s = {.tokens = m->seq / l->cp * l->mbs, .heads = m->heads / l->tp,
                       .kv_heads = pt_kv_heads_rank(m, l->tp),
                       .head_dim = pt_model_head_dim(m),
                       .ffn = m->ffn / l->tp, .vocab = pt_vocab_padded(m, l->tp) / l->tp};
    s.rows = l->sp ? s.tokens / l->tp : s.tokens;
    return s;
}

static dims dims_of(const pt_opctx *c)
{
    const pt_model *m = c->m;
    const pt_layout *l = c->l;
    pt_rank_shape s = pt_rank_shape_of(m, l);
    dims d = {.tokens = s.tokens, .rows = s.rows, .h = m->hidden, .f = m->ffn, .t = l->tp,
              .hd = s.head_dim, .kvr = s.kv_heads * s.head_dim, .qd = s.heads * s.head_dim,
              .ab = c->prec.act_bytes};
    /* a mixture-of-experts layer's dense MLP is its shared experts' (or none) */
    if (c->moe_layer)
        d.f = m->moe.shared_experts * m->moe.shared_ffn;
    return d;
}

static void shape_rows(char *buf, size_t n, int64_t rows, int64_t cols)
{
    snprintf(buf, n, "rows=%lld,cols=%lld", (long long)rows, (long long)cols);
}

/* ---- Eager PyTorch modules ------------------------------------------------------ */

/* Whether the stack runs norms, RoPE and the gated activation operator by operator. */
static bool eager(const builder *b)
{
    return b->c->t->stack.kernels == PT_KERNELS_EAGER;
}

/* Bytes per element of torchtitan's RMSNorm (its model.py: _norm(x.float()).type_as(x)
 * * weight, _norm = x * rsqrt(x.pow(2).mean(-1) + eps)), a = activation bytes, each
 * kernel reading its inputs and writing its output once (per-row values left out).
 * Forward: x.float() a+4, pow 4+4, mean 4, the product with rsqrt 4+4, type_as 4+a,
 * the weight product a+a: 28 + 4a. Backward (autograd in reverse): the weight
 * product's input gradient 2a and weight gradient 4a (product and sum), type_as back
 * to fp32 a+4, the rsqrt product's input gradient 8 and row gradient 16 (product and
 * sum), pow's 2x·g 16 (two kernels), the two gradients of x added 12, the cast back
 * 4+a: 60 + 8a. */
static double eager_rmsnorm_bytes(double a, bool backward)
{
    return backward ? 60 + 8 * a : 28 + 4 * a;
}

/* Bytes per element of q and k through torchtitan's RoPE (view_as_complex of
 * x.float(), a complex product with the frequencies, type_as): a+4, 4+4, 4+a forward;
 * the same three kernels backward. */
static double eager_rope_bytes(double a)
{
    return 16 + 2 * a;
}

/* Bytes per element of f through silu(w1 x) * w3 x: forward silu 2a and the product
 * 3a; backward the product's two gradients 3a each and silu's 3a. */
static double eager_swiglu_bytes(double a, bool backward)
{
    return backward ? 9 * a : 5 * a;
}

/* A norm over the rank's rows; with_add: the forward with the residual add before it
 * in the same kernel (add1_norm2), which also reads the branch and the stream and
 * writes their sum (two more passes) instead of reading a sum written before. */
static void norm_op(builder *b, const dims *d, pt_op_kind name, pt_param_ref param,
                    bool backward, bool with_add)
{
    char shape[64];
    char kind[32];
    snprintf(kind, sizeof kind, "%s%s_%s", with_add ? "add_" : "",
             b->c->m->norm == PT_NORM_RMSNORM ? "rmsnorm" : "layernorm",
             backward ? "bwd" : "fwd");
    shape_rows(shape, sizeof shape, d->rows, d->h);
    /* forward reads x, writes y; backward reads x and dy, writes dx */
    double elems = (double)d->rows * (double)d->h;
    double per_elem = d->ab * (backward ? 3 : 2);
    if (eager(b) && b->c->m->norm == PT_NORM_RMSNORM)
        per_elem = eager_rmsnorm_bytes(d->ab, backward);
    if (with_add)
        per_elem += 2 * d->ab;
    pt_op *op = membound(b, name, kind, per_elem * elems, shape);
    if (op)
        op->param = param;
    if (!backward) /* the norm's output, which the column-parallel GEMMs read */
        writes(op, param == PT_PARAM_NORM1 ? PT_TEN_LN1
                   : param == PT_PARAM_NORM2 ? PT_TEN_LN2 : PT_TEN_LNF);
}

static void norm(builder *b, const dims *d, pt_op_kind name, pt_param_ref param, bool backward)
{
    norm_op(b, d, name, param, backward, false);
}

static void residual_add(builder *b, const dims *d, pt_op_kind name)
{
    char shape[64];
    shape_rows(shape, sizeof shape, d->rows, d->h);
    /* dropout (when present) and the residual add, fused: read two, write one */
    membound(b, name, "add_fwd", 3 * d->ab * (double)d->rows * (double)d->h, shape);
}

/* Whether the stack fuses epilogues (see pt_stack.fused_epilogues), and whether the
 * model's MLP has the GELU those fuse into the GEMMs. */
static bool fused_epilogues(const builder *b)
{
    return b->c->t->stack.fused_epilogues;
}

/* The GEMM epilogue forms (the GELU or its derivative, the residual, q, k and v as one
 * batched call): not with FP8, whose GEMMs ptrun calls as plain gemm_fp8 (kernels.h), so
 * that its op list names only ops its runtime runs in FP8. */
static bool gemm_epilogues(const builder *b)
{
    return fused_epilogues(b) && !pt_train_fp8(b->c->t);
}

static bool fused_gelu(const builder *b)
{
    return gemm_epilogues(b) && b->c->m->act == PT_ACT_GELU;
}

/* The residual add after attention and the second norm as one kernel: it reads the
 * branch and the residual stream and writes the sum (the stream the MLP's residual
 * adds to) and the normalised rows, against the separate ops' 3 + 2 passes. With
 * dropout, the branch's dropout still runs before it (priced inside it, as add_fwd
 * prices it). */
static void residual_norm(builder *b, const dims *d)
{
    norm_op(b, d, PT_OPK_ADD1_NORM2, PT_PARAM_NORM2, false, true);
}

/* What the column-parallel GEMMs reading the norm output `norm_out` read: that output,
 * or with sp its gathered rows (tp_gather_input). */
static pt_tensor column_input(const builder *b, pt_tensor norm_out)
{
    return b->c->l->sp ? PT_TEN_GATHERED : norm_out;
}

/* Bytes per element of a sequence-parallel all-gather feeding the GEMMs of `param`:
 * Transformer Engine gathers what its FP8 GEMMs read, already quantized, one byte an
 * element (v1.8, transformer_engine/pytorch/module/layernorm_linear.py: with FP8 the
 * norm writes its output in FP8 and gather_along_first_dim gathers that, in the
 * forward and again for the weight gradient; module/base.py, grad_output_preprocess:
 * a row-parallel module's output gradient is cast to FP8 and then gathered; and
 * initialize_ub: "AllGather buffers use fp8 when using fp8 recipe" under
 * userbuffers); the reduce-scatters stay in the GEMMs' output type. ptrun gathers in
 * the storage precision and quantizes per GEMM afterwards (fp8_per_gemm). */
static double gather_bytes(const builder *b, const dims *d, pt_param_ref param)
{
    bool te = b->c->t->stack.fp8_casts == PT_FP8_CASTS_TE;
    return te && fp8_param(b, param) && !b->c->t->fp8.emulated ? 1.0 : d->ab;
}

/* Gathers the sequence-parallel shards of a norm output before a column-parallel
 * GEMM (sp), or nothing: without sp Megatron's "f" is the identity forward. With
 * tp_overlap the gather runs beside the GEMM that reads it (which starts on the
 * rank's own rows), as Megatron-LM's TP communication overlap does — but not before
 * ptrun's FP8 GEMMs, which quantize the whole gathered input with its amax and so wait
 * for the gather (runtime/fp8.c).
 * `param` is the first projection reading it (gather_bytes). */
static void tp_gather_input(builder *b, const dims *d, pt_tensor norm_out, pt_param_ref param,
                            bool overlapped)
{
    if (fp8_param(b, param) && pt_stack_is_ptrun(&b->c->t->stack))
        overlapped = false;
    if (b->c->l->sp)
        coll(b, PT_OPK_SP_ALLGATHER, (moves){norm_out, PT_TEN_GATHERED}, PT_COLL_ALLGATHER,
             PT_GROUP_TP, gather_bytes(b, d, param) * (double)d->tokens * (double)d->h, 1,
             overlapped);
}

/* Whether the stack pipelines every sequence-parallel collective with its GEMM
 * (Transformer Engine's userbuffers: all-gathers and reduce-scatters), not only the
 * input gathers (ptrun). */
static bool tp_overlap_all(const builder *b)
{
    return b->c->l->tp_overlap && b->c->t->stack.tp_overlap_rs;
}

/* Gathers the residual-stream gradient's shards before the row-parallel backward of
 * `param` (or the embedding's); overlapped only by a stack that overlaps all TP
 * collectives. */
static void tp_enter(builder *b, const dims *d, pt_param_ref param)
{
    if (b->c->l->sp)
        coll(b, PT_OPK_SP_ALLGATHER, (moves){PT_TEN_DRES, PT_TEN_DRES_GATHERED},
             PT_COLL_ALLGATHER, PT_GROUP_TP,
             gather_bytes(b, d, param) * (double)d->tokens * (double)d->h, 1,
             tp_overlap_all(b));
}

/* After a row-parallel GEMM that wrote the partial sums of the residual rows `res`:
 * all-reduce them in place ("g"), or with sp reduce-scatter them there from the (T, h)
 * partial output. */
static void tp_exit(builder *b, const dims *d, pt_tensor res)
{
    double bytes = d->ab * (double)d->tokens * (double)d->h;
    if (b->c->l->sp)
        coll(b, PT_OPK_SP_REDUCESCATTER, (moves){PT_TEN_ROW_PARTIAL, res},
             PT_COLL_REDUCESCATTER, PT_GROUP_TP, bytes, 1, tp_overlap_all(b));
    else
        coll(b, PT_OPK_TP_ALLREDUCE, (moves){res, res}, PT_COLL_ALLREDUCE, PT_GROUP_TP, bytes,
             1, false);
}

/* The attention core as the stack runs it. Model FLOPs count the full (not causal)
 * score matrix, as the MFU convention does; a flash kernel skips the masked half.
 * sq queries on this rank attend to sk = s keys (all of them with cp). After cp's
 * all-to-all of degree u (pt_layout_a2a) the kernel runs on u times the queries with
 * 1/u of the heads: the same FLOPs in another shape, which is the one its cost is
 * looked up under. */
typedef struct {
    double b, heads, kv, sq, sk, hd;
    double w;    /* a banded layer's window (pt_model.window, at most s); 0: full */
    double band; /* keys each query attends on average in the band: (s·w - w(w-1)/2)/s */
} attn_dims;

static attn_dims attn_dims_of(const builder *b, const dims *d)
{
    const pt_model *m = b->c->m;
    const pt_layout *l = b->c->l;
    pt_attn_shape at = pt_attn_shape_of(m, l);
    attn_dims a = {(double)l->mbs, (double)at.heads, (double)at.kv_heads,
                   (double)(m->seq / l->cp * at.u), (double)m->seq, (double)d->hd, 0, 0};
    if (b->c->window_layer) {
        double s = (double)m->seq, w = fmin((double)m->window, s);
        a.w = w;
        a.band = (s * w - w * (w - 1) / 2) / s;
    }
    return a;
}

static void attn_key(builder *b, pt_op *op, const char *kind, const attn_dims *a)
{
    char w[32] = "";
    if (a->w > 0)
        snprintf(w, sizeof w, ",w=%.0f", a->w);
    snprintf(op->kernel.key, sizeof op->kernel.key,
             "%s:%s:b=%.0f,a=%.0f,kv=%.0f,sq=%.0f,sk=%.0f,d=%.0f%s", kind,
             pt_dtype_name(b->c->dtype), a->b, a->heads, a->kv, a->sq, a->sk, a->hd, w);
}

/* How the attention kernels' keys count FLOPs, per b·a·sq·sk·hd: QK^T and scores·V,
 * 2·2 per query-key pair and head dimension in the forward. ptrun's keys count the
 * whole score matrix, its backward twice the forward; flash attention's count the
 * causal half it computes, its backward (which recomputes the scores: 5 matrix products
 * against the forward's 2) 2.5 times its forward. pt_op_ptrun_twin converts between
 * them, so that a profile of ptrun's kernels prices another stack's flash attention
 * where it is ptrun's kernel. */
#define ATTN_FWD_FLOPS 4.0
#define PTRUN_ATTN_BWD_OVER_FWD 2.0
#define FLASH_ATTN_CAUSAL 0.5
#define FLASH_ATTN_BWD_OVER_FWD 2.5

/* ptrun's kernels: QK^T and scores·V, 2·2·sq·sk·hd per head and sequence (backward
 * twice that); Q, K, V and output plus the materialised scores written and read (the
 * memory model keeps them too: Korthikanti's 5as²b). */
static void attention_ptrun(builder *b, const dims *d, bool backward)
{
    attn_dims a = attn_dims_of(b, d);
    pt_op *op = add_op(b, backward ? PT_OPK_ATTN_BWD : PT_OPK_ATTN);
    if (!op)
        return;
    double fwd = ATTN_FWD_FLOPS * a.b * a.heads * a.sq * a.sk * a.hd;
    op->kernel.dtype = b->c->dtype;
    op->kernel.flops = backward ? PTRUN_ATTN_BWD_OVER_FWD * fwd : fwd;
    double qkvo = a.b * (2.0 * a.sq * a.heads + 2.0 * a.sk * a.kv) * a.hd;
    double scores = a.b * a.heads * a.sq * a.sk;
    op->kernel.bytes = d->ab * (qkvo + 3 * scores) * (backward ? 2 : 1);
    attn_key(b, op, backward ? "attn_bwd" : "attn_fwd", &a);
}

/* Flash attention (Dao et al. 2022; FlashAttention-2, Dao 2023): one kernel, no score
 * matrix. Causal masking skips the blocks above the diagonal: half the FLOPs (the
 * papers' own convention). The backward recomputes the scores: 5 matrix products
 * against the forward's 2, 2.5x its FLOPs. Memory traffic: Q, K, V, O (forward), and
 * Q, K, V, O, dO, dQ, dK, dV (backward). Its efficiency is the stack's for the device. */
static void attention_flash(builder *b, const dims *d, bool backward)
{
    attn_dims a = attn_dims_of(b, d);
    pt_op *op = add_op(b, backward ? PT_OPK_ATTN_BWD : PT_OPK_ATTN);
    if (!op)
        return;
    /* a banded layer (gpt-oss, Mistral's sliding windows): each query meets the keys of
     * its band only, the blocks outside skipped as the causal mask's are */
    double pairs = a.w > 0 ? a.sq * a.band : FLASH_ATTN_CAUSAL * a.sq * a.sk;
    double fwd = ATTN_FWD_FLOPS * a.b * a.heads * pairs * a.hd;
    double q = a.b * a.sq * a.heads * a.hd, kv = a.b * a.sk * a.kv * a.hd;
    op->kernel.dtype = b->c->dtype;
    op->kernel.flops = backward ? FLASH_ATTN_BWD_OVER_FWD * fwd : fwd;
    op->kernel.bytes = d->ab * (backward ? 4 * q + 4 * kv : 2 * q + 2 * kv);
    op->kernel.efficiency = pt_stack_attn_eff(&b->c->t->stack, b->c->device, backward);
    attn_key(b, op, backward ? "flash_bwd" : "flash_fwd", &a);
}

/* One batched GEMM of the unfused attention: b·heads products of m x k by k x n. */
static void bmm(builder *b, pt_op_kind name, double batch, double m, double n, double k)
{
    pt_op *op = add_op(b, name);
    if (!op)
        return;
    op->kernel.dtype = b->c->dtype;
    op->kernel.flops = 2.0 * batch * m * n * k;
    op->kernel.bytes = b->c->prec.act_bytes * batch * (m * k + k * n + m * n);
    snprintf(op->kernel.key, sizeof op->kernel.key, "bmm:%s:b=%.0f,m=%.0f,n=%.0f,k=%.0f",
             pt_dtype_name(b->c->dtype), batch, m, n, k);
}

/* Megatron-LM's unfused attention (Shoeybi et al. 2019; Korthikanti et al. 2022,
 * Sec. 4.1): the score GEMM QK^T, the fused scale-mask-softmax kernel, dropout on the
 * probabilities (when the model has dropout) and the context GEMM, each through
 * memory: the b·a·sq·sk score matrix is written and read by every step. The
 * backward mirrors it: two GEMMs per product, the dropout and softmax backward. */
static void attention_unfused(builder *b, const dims *d, bool backward)
{
    attn_dims a = attn_dims_of(b, d);
    double batch = a.b * a.heads, scores = batch * a.sq * a.sk, ab = d->ab;
    char shape[96];
    snprintf(shape, sizeof shape, "b=%.0f,sq=%.0f,sk=%.0f", batch, a.sq, a.sk);
    bool drop = b->c->m->dropout;
    if (!backward) {
        bmm(b, PT_OPK_ATTN_SCORES, batch, a.sq, a.sk, a.hd);
        membound(b, PT_OPK_ATTN_SOFTMAX, "softmax_fwd", 2 * ab * scores, shape);
        if (drop) /* reads the probabilities, writes them and a 1-byte mask */
            membound(b, PT_OPK_ATTN_DROPOUT, "dropout_fwd", (2 * ab + 1) * scores, shape);
        bmm(b, PT_OPK_ATTN_CTX, batch, a.sq, a.hd, a.sk);
        return;
    }
    bmm(b, PT_OPK_ATTN_CTX_DGRAD, batch, a.sq, a.sk, a.hd);  /* dP = dO V^T */
    bmm(b, PT_OPK_ATTN_CTX_WGRAD, batch, a.sk, a.hd, a.sq);  /* dV = P^T dO */
    if (drop)
        membound(b, PT_OPK_ATTN_DROPOUT_BWD, "dropout_bwd", (2 * ab + 1) * scores, shape);
    membound(b, PT_OPK_ATTN_SOFTMAX_BWD, "softmax_bwd", 3 * ab * scores, shape);
    bmm(b, PT_OPK_ATTN_SCORES_DGRAD, batch, a.sq, a.hd, a.sk); /* dQ = dS K */
    bmm(b, PT_OPK_ATTN_SCORES_WGRAD, batch, a.sk, a.hd, a.sq); /* dK = dS^T Q */
}

void pt_op_ptrun_twin(const pt_op *op, pt_kernel_op *out)
{
    *out = op->kernel;
    bool fwd = strncmp(op->kernel.key, "flash_fwd:", 10) == 0;
    if (!fwd && strncmp(op->kernel.key, "flash_bwd:", 10) != 0)
        return;
    /* the same shape after the kind: "flash_fwd:bf16:b=..." -> "attn_fwd:bf16:b=..." */
    snprintf(out->key, sizeof out->key, "attn_%s", op->kernel.key + strlen("flash_"));
    double full = op->kernel.flops / FLASH_ATTN_CAUSAL /
                  (fwd ? 1.0 : FLASH_ATTN_BWD_OVER_FWD); /* the whole forward */
    out->flops = fwd ? full : PTRUN_ATTN_BWD_OVER_FWD * full;
    out->efficiency = 0;
}

static void attention_core(builder *b, const dims *d, bool backward)
{
    switch (b->c->t->stack.attention) {
    case PT_ATTN_FLASH: attention_flash(b, d, backward); break;
    case PT_ATTN_UNFUSED: attention_unfused(b, d, backward); break;
    default: attention_ptrun(b, d, backward); break;
    }
}

/* ---- Context parallelism around the attention core (pt_cp_comm) ---- */

/* The ring: K/V blocks travel c_r - 1 hops around the ring of c_r = c/u members (u the
 * all-to-all degree: 1 with p2p), each hop beside the attention of the block before
 * (Liu et al. 2023, "Ring Attention with Blockwise Transformers"); in the backward the
 * blocks travel again with their gradients. After a2a+p2p's all-to-all a block is
 * u·T tokens of the k/(t·u) KV heads (or one, replicated). The members are every u-th
 * rank of the cp group, so the ring spans NVLink domains exactly when u fills them:
 * u·(members per domain) = the cp group's ranks per domain. */
static void cp_ring(builder *b, const dims *d, bool backward)
{
    pt_attn_shape at = pt_attn_shape_of(b->c->m, b->c->l);
    int u = at.u, members = at.r;
    if (members < 2)
        return;
    double kv_bytes = 2.0 * d->ab * (double)at.tokens * (double)at.kv_heads * (double)d->hd;
    pt_op *op = coll(b, backward ? PT_OPK_CP_RING_BWD : PT_OPK_CP_RING,
                     (moves){PT_TEN_KV, PT_TEN_KV}, PT_COLL_SENDRECV, PT_GROUP_CP,
                     backward ? 2 * kv_bytes : kv_bytes, members - 1, true);
    if (op && u > 1) {
        int per_domain = b->c->ranks_per_node[PT_GROUP_CP] / u;
        op->coll.group = members;
        op->coll.ranks_per_node = per_domain < 1 ? 1 : per_domain;
    }
}

/* One all-to-all of cp's degree-u exchange (DeepSpeed-Ulysses, Jacobs et al. 2023):
 * each rank holds T tokens of `heads` heads and ends with u·T tokens of heads/u, so
 * its buffer, the per-rank bytes of nccl-tests' convention (costmodels/cost.h), is
 * T·heads·hd elements, (u-1)/u of them sent. Blocking: nothing computes beside it
 * (runtime/attention.c and Transformer Engine's flash_attn_a2a_communicate wait for
 * it). The strided copies that pack and unpack the head slices around it are left
 * out, as the ring's block copies are. */
static void cp_a2a(builder *b, const dims *d, pt_op_kind kind, pt_tensor t, double heads,
                   int count)
{
    double bytes = d->ab * (double)d->tokens * heads * (double)d->hd;
    coll(b, kind, (moves){t, t}, PT_COLL_ALLTOALL, PT_GROUP_CPA2A, bytes, count, false);
}

/* The heads of one rank's buffer in the all-to-all: its a/t query heads, and for K
 * (or V) u times the head form's KV heads: its k/t, or u where fewer are replicated to
 * u first (runtime/attention.c; Transformer Engine asserts k/t % u == 0 instead,
 * context_parallel.py's AttnFuncWithCPAndQKVOA2A). */
static double a2a_q_heads(const builder *b)
{
    pt_attn_shape at = pt_attn_shape_of(b->c->m, b->c->l);
    return (double)(at.u * at.heads);
}

static double a2a_kv_heads(const builder *b)
{
    pt_attn_shape at = pt_attn_shape_of(b->c->m, b->c->l);
    return (double)(at.u * at.kv_heads);
}

/* K and V gathered over cp before attention (cp_comm=all_gather: Transformer Engine's
 * AttnFuncWithCPAndKVAllGather, context_parallel.py, gathers each with
 * gather_along_first_dim and keeps only the local blocks for the backward, which gathers
 * them again): the whole gathered buffer, c·T tokens, as nccl-tests counts an
 * all-gather. Blocking. */
static void cp_allgather(builder *b, const dims *d, pt_op_kind kind, pt_coll what)
{
    double bytes = d->ab * (double)(d->tokens * b->c->l->cp) * (double)d->kvr;
    coll(b, kind, (moves){PT_TEN_KV, PT_TEN_KV}, what, PT_GROUP_CP, bytes, 2, false);
}

/* Forward, before the attention core: the all-to-alls of q, k and v (a2a, a2a+p2p),
 * the ring (p2p, and a2a+p2p across the all-to-all groups) or the all-gather of K and
 * V (all_gather). */
static void cp_forward_in(builder *b, const dims *d)
{
    const pt_layout *l = b->c->l;
    if (l->cp == 1)
        return;
    if (l->cp_comm == PT_CPC_ALLGATHER) {
        cp_allgather(b, d, PT_OPK_CP_ALLGATHER, PT_COLL_ALLGATHER);
        return;
    }
    if (pt_layout_a2a(l) > 1) {
        cp_a2a(b, d, PT_OPK_CP_A2A_Q, PT_TEN_NONE, a2a_q_heads(b), 1);
        cp_a2a(b, d, PT_OPK_CP_A2A_KV, PT_TEN_KV, a2a_kv_heads(b), 2);
    }
    cp_ring(b, d, false);
}

/* Forward, after it: the output's all-to-all back to "my tokens, all heads". */
static void cp_forward_out(builder *b, const dims *d)
{
    if (b->c->l->cp > 1 && pt_layout_a2a(b->c->l) > 1)
        cp_a2a(b, d, PT_OPK_CP_A2A_OUT, PT_TEN_NONE, a2a_q_heads(b), 1);
}

/* Backward, before the attention core's backward (and its selective recomputation):
 * the output gradient's all-to-all in; all_gather's K and V gathered again. */
static void cp_backward_in(builder *b, const dims *d)
{
    const pt_layout *l = b->c->l;
    if (l->cp == 1)
        return;
    if (l->cp_comm == PT_CPC_ALLGATHER)
        cp_allgather(b, d, PT_OPK_CP_ALLGATHER, PT_COLL_ALLGATHER);
    else if (pt_layout_a2a(l) > 1)
        cp_a2a(b, d, PT_OPK_CP_A2A_DOUT, PT_TEN_NONE, a2a_q_heads(b), 1);
}

/* Backward, after it: the ring's blocks and gradients; dq, dk and dv back through the
 * all-to-all (the gradients of replicated KV heads summed after it); all_gather's dK and
 * dV reduce-scattered to their blocks' owners. */
static void cp_backward_out(builder *b, const dims *d)
{
    const pt_layout *l = b->c->l;
    if (l->cp == 1)
        return;
    if (l->cp_comm == PT_CPC_ALLGATHER) {
        cp_allgather(b, d, PT_OPK_CP_REDUCESCATTER, PT_COLL_REDUCESCATTER);
        return;
    }
    cp_ring(b, d, true);
    if (pt_layout_a2a(l) > 1) {
        cp_a2a(b, d, PT_OPK_CP_A2A_DQ, PT_TEN_NONE, a2a_q_heads(b), 1);
        cp_a2a(b, d, PT_OPK_CP_A2A_DKV, PT_TEN_KV, a2a_kv_heads(b), 2);
    }
}

/* q/k normalisation (Qwen3; Megatron-Core's --qk-layernorm): the model's norm over
 * each head of q and of k, the (T, a·d/t + kvr) columns read and written (backward:
 * read two, write one), before RoPE and after its backward. */
static void qk_norm(builder *b, const dims *d, bool backward)
{
    if (!b->c->m->qk_norm)
        return;
    char shape[64];
    int64_t cols = d->qd + d->kvr;
    shape_rows(shape, sizeof shape, d->tokens * (cols / d->hd), d->hd);
    pt_op *op = membound(b, backward ? PT_OPK_QK_NORM_BWD : PT_OPK_QK_NORM,
                         backward ? "rmsnorm_bwd" : "rmsnorm_fwd",
                         (backward ? 3 : 2) * d->ab * (double)d->tokens * (double)cols, shape);
    if (op)
        op->param = PT_PARAM_QK_NORM;
}

static void rope(builder *b, const dims *d, bool backward)
{
    if (b->c->m->pos != PT_POS_ROPE)
        return;
    char shape[64];
    int64_t cols = d->qd + d->kvr;
    shape_rows(shape, sizeof shape, d->tokens, cols);
    double per_elem = eager(b) ? eager_rope_bytes(d->ab) : 2 * d->ab;
    membound(b, backward ? PT_OPK_ROPE_BWD : PT_OPK_ROPE, backward ? "rope_bwd" : "rope_fwd",
             per_elem * (double)d->tokens * (double)cols, shape);
}

static void activation(builder *b, const dims *d, bool backward)
{
    bool swiglu = b->c->m->act == PT_ACT_SWIGLU;
    char shape[64];
    int64_t cols = d->f / d->t;
    shape_rows(shape, sizeof shape, d->tokens, cols);
    /* GeLU reads one and writes one (backward: reads two, writes one); SwiGLU reads
     * gate and up and writes one (backward: reads three, writes two). */
    double n = (swiglu ? (backward ? 5 : 3) : (backward ? 3 : 2));
    if (swiglu && eager(b))
        n = eager_swiglu_bytes(d->ab, backward) / d->ab;
    const char *kind = swiglu ? (backward ? "swiglu_bwd" : "swiglu_fwd")
                              : (backward ? "gelu_bwd" : "gelu_fwd");
    pt_op *op = membound(b, backward ? PT_OPK_ACT_BWD : PT_OPK_ACT, kind,
                         n * d->ab * (double)d->tokens * (double)cols, shape);
    if (op)
        op->fp8.take_amax = gelu_takes_amax(b, backward ? PT_PARAM_MLP_UP : PT_PARAM_MLP_DOWN);
}

/* ZeRO-3 gathers a layer's weights before using them, prefetching beside compute. */
/* A layer's parameters on this rank: those sharded and reduced over dp×cp, and a
 * mixture-of-experts layer's experts, over the expert-data-parallel group. */
static void layer_params(const pt_opctx *c, double *dense, double *experts)
{
    const pt_layout *l = c->l;
    *dense = c->moe_layer ? (double)pt_params_moe_layer_dense(c->m, l->tp)
                          : (double)pt_params_layer(c->m, l->tp);
    *experts = c->moe_layer ? (double)pt_params_experts(c->m, l->ep, l->etp) : 0;
}

static void zero3_gather(builder *b)
{
    const pt_opctx *c = b->c;
    if (c->l->zero < 3)
        return;
    double dense, experts;
    layer_params(c, &dense, &experts);
    /* prefetched beside the previous layer's compute, or blocking without prefetch */
    coll(b, PT_OPK_ZERO3_ALLGATHER, (moves){PT_TEN_LAYER_WEIGHTS, PT_TEN_LAYER_WEIGHTS},
         PT_COLL_ALLGATHER, PT_GROUP_DPCP, dense * c->prec.weight_bytes, 1,
         c->t->stack.zero3_prefetch > 0);
    /* (ptrun keeps the experts whole under ZeRO 3 and gathers them at the step:
     * pt_ops_optimizer) */
    if (experts > 0 && !pt_stack_is_ptrun(&c->t->stack))
        coll(b, PT_OPK_ZERO3_ALLGATHER, (moves){PT_TEN_LAYER_WEIGHTS, PT_TEN_LAYER_WEIGHTS},
             PT_COLL_ALLGATHER, PT_GROUP_EDP, experts * c->prec.weight_bytes, 1,
             c->t->stack.zero3_prefetch > 0);
}

/* ---- Mixture of experts ---------------------------------------------------------- */

/* The sizes of a mixture-of-experts layer on one rank. R tokens reach the router here
 * (the sequence-parallel rows: T/t, sp being required with tp > 1), each sending k
 * copies. Balanced, every rank's E/ep experts receive as many copies as it sends, R·k,
 * and with etp > 1 the etp group's copies are gathered: N = etp·R·k rows through the
 * experts' GEMMs, N/G per expert; the busiest rank (imbalance F, at most the capacity
 * factor where the model drops beyond it) computes and receives F times that, and the
 * step waits for it at the combine. */
typedef struct {
    double R, k, E, G, F, N, fe, up, h, ab;
    int ep, etp;
    bool allgather;
} moe_dims;

static moe_dims moe_dims_of(const builder *b, const dims *d)
{
    const pt_model *m = b->c->m;
    const pt_layout *l = b->c->l;
    moe_dims x = {.R = (double)d->rows, .k = (double)m->moe.top_k, .E = (double)m->moe.experts,
                  .ep = l->ep, .etp = l->etp, .h = (double)d->h, .ab = d->ab,
                  .allgather = l->moe_dispatch == PT_MOED_ALLGATHER};
    x.G = x.E / l->ep;
    x.F = b->c->moe_imbalance >= 1 ? b->c->moe_imbalance : 1;
    /* a capacity factor caps what the busiest expert takes: the rest are dropped */
    if (m->moe.capacity > 0 && x.F > m->moe.capacity)
        x.F = m->moe.capacity;
    x.N = x.F * l->etp * x.R * x.k;
    x.fe = (double)m->moe.expert_ffn / l->etp;
    x.up = m->act == PT_ACT_SWIGLU ? 2 * x.fe : x.fe;
    return x;
}

/* One of the experts' GEMMs: G products of one shape, one an expert, on the stack's
 * streams at once (pt_stack.grouped_gemm_streams: Transformer Engine's GroupedLinear
 * runs one cuBLAS GEMM an expert over 4 streams, ptrun's kernels one after another), so
 * that the tiles of as many products share the GPU's waves: G/s runs of a batch of s
 * (s the largest divisor of G up to the streams). */
static pt_op *expert_gemm(builder *b, pt_op_kind kind, pt_param_ref param, const moe_dims *x,
                          int64_t m, int64_t n, int64_t k, pt_gemm_role role)
{
    int G = (int)x->G, streams = b->c->t->stack.grouped_gemm_streams, s = 1;
    for (int d = 1; d <= G && d <= streams; d++)
        if (G % d == 0)
            s = d;
    pt_op *op = gemm_batch(b, kind, param, s, m, n, k, role);
    if (op)
        op->count = G / s;
    return op;
}

/* Rows of one expert's GEMM, whole rows. */
static int64_t moe_group_rows(const moe_dims *x)
{
    return (int64_t)ceil(x->N / x->G);
}

static pt_op *moe_membound(builder *b, pt_op_kind kind, const char *name, double bytes,
                           double rows, double cols)
{
    char shape[64];
    shape_rows(shape, sizeof shape, (int64_t)ceil(rows), (int64_t)cols);
    return membound(b, kind, name, bytes, shape);
}

/* Of a token's k experts, drawn without repeats from E spread evenly over `nodes`
 * nodes, how many other nodes hold at least one: (nodes-1)·(1 - C(E-E/nodes, k)/C(E, k))
 * (the balanced router's choice, every expert equally likely). */
static double moe_remote_nodes(double E, double k, int nodes)
{
    double none = 1, per = E / nodes;
    for (int i = 0; i < (int)k; i++)
        none *= (E - per - i) / (E - i);
    return (nodes - 1) * (1 - (none > 0 ? none : 0));
}

/* DeepEP's way (moe_dispatch=flex) where the ep group spans nodes: each token once
 * over the network to every other node holding one of its experts (an all-to-all
 * among the group's nodes, one rank a node, of R·D tokens each: D = moe_remote_nodes),
 * then every copy to its expert's GPU over NVLink (an all-to-all inside the node of
 * the R·k copies a rank receives); the combine sums a node's copies before sending
 * them back, the same bytes the other way. */
static void moe_flex(builder *b, const moe_dims *x, pt_op_kind kind, int nodes, int ppn)
{
    double D = moe_remote_nodes(x->E, x->k, nodes);
    pt_op *op = coll(b, kind, (moves){PT_TEN_NONE, PT_TEN_NONE}, PT_COLL_ALLTOALL, PT_GROUP_EP,
                     x->ab * x->F * x->R * D * x->h * nodes / (nodes - 1), 1, false);
    if (op) {
        op->coll.group = nodes;
        op->coll.ranks_per_node = 1;
    }
    if (ppn > 1) {
        op = coll(b, kind, (moves){PT_TEN_NONE, PT_TEN_NONE}, PT_COLL_ALLTOALL, PT_GROUP_EP,
                  x->ab * x->F * x->R * x->k * x->h, 1, false);
        if (op)
            op->coll.group = op->coll.ranks_per_node = ppn;
    }
}

/* etp's gather of its group's copies (N rows) before the experts, or the reduce-scatter
 * of their partial sums after them. */
static void moe_etp(builder *b, const moe_dims *x, pt_op_kind etp_kind)
{
    if (etp_kind != PT_OPK_COUNT)
        coll(b, etp_kind, (moves){PT_TEN_NONE, PT_TEN_NONE},
             etp_kind == PT_OPK_ETP_ALLGATHER || etp_kind == PT_OPK_ETP_ALLGATHER_BWD
                 ? PT_COLL_ALLGATHER
                 : PT_COLL_REDUCESCATTER,
             PT_GROUP_ETP, x->ab * x->N * x->h, 1, false);
}

/* The way to the experts and back: the all-to-all of the copies over ep (per-rank
 * bytes as nccl-tests count them: the busiest rank's F·R·k rows), DeepEP's (flex:
 * moe_flex) where the group spans nodes, or the allgather dispatcher's gather of the ep
 * group's tokens and the reduce-scatter of their sums; with etp > 1, etp's collective
 * after the ep one on the way to the experts and before it on the way back. */
static void moe_to_experts(builder *b, const moe_dims *x, pt_op_kind kind, pt_op_kind etp_kind)
{
    int ppn = b->c->ranks_per_node[PT_GROUP_EP];
    /* on the way back (the combine, the dispatch's backward) etp's reduce-scatter comes
     * first: the experts' partial sums are summed before they leave */
    bool back = kind == PT_OPK_MOE_COMBINE || kind == PT_OPK_MOE_DISPATCH_BWD;
    if (back)
        moe_etp(b, x, etp_kind);
    if (b->c->l->moe_dispatch == PT_MOED_FLEX && ppn < x->ep && ppn > 0 && x->ep % ppn == 0)
        moe_flex(b, x, kind, x->ep / ppn, ppn);
    else if (x->allgather)
        coll(b, kind, (moves){PT_TEN_NONE, PT_TEN_NONE},
             kind == PT_OPK_MOE_DISPATCH || kind == PT_OPK_MOE_COMBINE_BWD ? PT_COLL_ALLGATHER
                                                                            : PT_COLL_REDUCESCATTER,
             PT_GROUP_EP, x->ab * x->ep * x->R * x->h, 1, false);
    else
        coll(b, kind, (moves){PT_TEN_NONE, PT_TEN_NONE}, PT_COLL_ALLTOALL, PT_GROUP_EP,
             x->ab * x->F * x->R * x->k * x->h, 1, false);
    if (!back)
        moe_etp(b, x, etp_kind);
}

/* The expert activation over N rows of fe columns: as the dense MLP's (activation). */
static void moe_act(builder *b, const moe_dims *x, bool backward)
{
    bool swiglu = b->c->m->act == PT_ACT_SWIGLU;
    double n = swiglu ? (backward ? 5 : 3) : (backward ? 3 : 2);
    moe_membound(b, backward ? PT_OPK_EXPERT_ACT_BWD : PT_OPK_EXPERT_ACT,
                 swiglu ? (backward ? "swiglu_bwd" : "swiglu_fwd")
                        : (backward ? "gelu_bwd" : "gelu_fwd"),
                 n * x->ab * x->N * x->fe, x->N, x->fe);
}

/* Rows the permutation reads and writes: R tokens into R·k copies (alltoall), or the
 * ep group's gathered tokens into this rank's experts' copies (allgather). */
static void moe_permute_rows(const moe_dims *x, double *in, double *out)
{
    *in = x->allgather ? x->ep * x->R : x->R;
    *out = x->allgather ? x->N / x->etp : x->R * x->k;
}

/* The stack's wait for the routed tokens' counts before the dispatch (a stack whose
 * moe_host_sync_s is 0 has none of its own): Megatron-Core's dispatchers copy them to the
 * host and wait, since the all-to-all's split sizes and the grouped GEMM's groups are
 * host values (token_dispatcher.py's cuda_sync_point; fused_a2a.py: DeepEP's dispatch
 * has the CPU wait for the GPU's counts). The device runs dry there and idles until the
 * host has launched the next kernels: host time, priced as the stack's figure, whatever
 * the layer's shape. Once a forward, and again where a recomputation runs the dispatch. */
static void moe_host_sync(builder *b)
{
    if (b->c->t->stack.moe_host_sync_s > 0) /* no bytes: sim.c prices it by the stack */
        membound(b, PT_OPK_MOE_SYNC, "moe_sync", 0, "host");
}

/* How ptrun's experts run their GEMMs (runtime/moe.c): SwiGLU's gate and up projections
 * as two grouped calls of fe columns each, where a stack that fuses them (Megatron-Core's
 * linear_fc1) runs one of 2·fe; and every data gradient added into a buffer zeroed first,
 * where the others write it. */
typedef struct {
    int64_t fc1_n;      /* the columns of one first-projection call */
    int fc1_calls;      /* such calls an expert */
    pt_gemm_role dgrad; /* the data gradients' role */
} expert_calls;

static expert_calls expert_calls_of(const builder *b, const moe_dims *x)
{
    if (pt_stack_is_ptrun(&b->c->t->stack) && x->up > x->fe)
        return (expert_calls){(int64_t)x->fe, 2, PT_GEMM_DGRAD};
    if (pt_stack_is_ptrun(&b->c->t->stack))
        return (expert_calls){(int64_t)x->up, 1, PT_GEMM_DGRAD};
    return (expert_calls){(int64_t)x->up, 1, PT_GEMM_DGRAD_WRITE};
}

/* expert_gemm for the first projection, `calls` products an expert */
static void expert_fc1(builder *b, pt_op_kind kind, const moe_dims *x, int64_t m, int64_t n,
                       int64_t k, pt_gemm_role role, int calls)
{
    pt_op *op = expert_gemm(b, kind, PT_PARAM_EXPERT_FC1, x, m, n, k, role);
    if (op)
        op->count *= calls;
}

static void moe_forward(builder *b, const dims *d)
{
    const pt_model *m = b->c->m;
    moe_dims x = moe_dims_of(b, d);
    bool etp = x.etp > 1;
    int64_t rows = moe_group_rows(&x), R = d->rows;
    reads(gemm(b, PT_OPK_ROUTER, PT_PARAM_ROUTER, R, (int64_t)x.E, d->h, PT_GEMM_FWD),
          PT_TEN_LN2);
    /* the logits read, the fp32 scores written, the k indices and weights */
    moe_membound(b, PT_OPK_MOE_ROUTE, "moe_route_fwd", x.R * x.E * (x.ab + 4) + 8 * x.R * x.k,
                 x.R, x.E);
    if (m->moe.aux_loss > 0) /* the scores' column sums */
        moe_membound(b, PT_OPK_MOE_AUX, "moe_aux_fwd", 4 * x.R * x.E, x.R, x.E);
    double in, out;
    moe_permute_rows(&x, &in, &out);
    if (!x.allgather)
        moe_membound(b, PT_OPK_MOE_PERMUTE, "moe_permute_fwd", x.ab * x.h * (in + out), out,
                     x.h);
    moe_host_sync(b);
    moe_to_experts(b, &x, PT_OPK_MOE_DISPATCH, etp ? PT_OPK_ETP_ALLGATHER : PT_OPK_COUNT);
    if (x.allgather)
        moe_membound(b, PT_OPK_MOE_PERMUTE, "moe_permute_fwd", x.ab * x.h * (in + out), out,
                     x.h);
    expert_calls ec = expert_calls_of(b, &x);
    expert_fc1(b, PT_OPK_EXPERT_FC1, &x, rows, ec.fc1_n, d->h, PT_GEMM_FWD, ec.fc1_calls);
    moe_act(b, &x, false);
    expert_gemm(b, PT_OPK_EXPERT_FC2, PT_PARAM_EXPERT_FC2, &x, rows, d->h, (int64_t)x.fe,
                PT_GEMM_FWD);
    moe_to_experts(b, &x, PT_OPK_MOE_COMBINE, etp ? PT_OPK_ETP_REDUCESCATTER : PT_OPK_COUNT);
    /* the copies read with their weights, the tokens' sums written */
    moe_membound(b, PT_OPK_MOE_UNPERMUTE, "moe_unpermute_fwd", x.ab * x.h * (out + x.R), x.R,
                 x.h);
}

static void moe_backward(builder *b, const dims *d)
{
    moe_dims x = moe_dims_of(b, d);
    bool etp = x.etp > 1;
    int64_t rows = moe_group_rows(&x), R = d->rows;
    double in, out;
    moe_permute_rows(&x, &in, &out);
    /* the output's gradient and the copies read (the weights' gradients), the copies'
     * gradients written */
    moe_membound(b, PT_OPK_MOE_UNPERMUTE_BWD, "moe_unpermute_bwd",
                 x.ab * x.h * (x.R + 2 * out), out, x.h);
    moe_to_experts(b, &x, PT_OPK_MOE_COMBINE_BWD, etp ? PT_OPK_ETP_ALLGATHER_BWD : PT_OPK_COUNT);
    expert_calls ec = expert_calls_of(b, &x);
    expert_gemm(b, PT_OPK_EXPERT_FC2_DGRAD, PT_PARAM_EXPERT_FC2, &x, rows, (int64_t)x.fe, d->h,
                ec.dgrad);
    expert_gemm(b, PT_OPK_EXPERT_FC2_WGRAD, PT_PARAM_EXPERT_FC2, &x, d->h, (int64_t)x.fe, rows,
                wgrad_role(b, PT_PARAM_EXPERT_FC2));
    moe_act(b, &x, true);
    expert_fc1(b, PT_OPK_EXPERT_FC1_DGRAD, &x, rows, d->h, ec.fc1_n, ec.dgrad, ec.fc1_calls);
    expert_fc1(b, PT_OPK_EXPERT_FC1_WGRAD, &x, ec.fc1_n, d->h, rows,
               wgrad_role(b, PT_PARAM_EXPERT_FC1), ec.fc1_calls);
    if (x.allgather)
        moe_membound(b, PT_OPK_MOE_PERMUTE_BWD, "moe_permute_bwd",
                     x.ab * x.h * (out + 2 * in), in, x.h);
    moe_to_experts(b, &x, PT_OPK_MOE_DISPATCH_BWD,
                   etp ? PT_OPK_ETP_REDUCESCATTER_BWD : PT_OPK_COUNT);
    if (!x.allgather) /* the copies' gradients summed into the tokens' (added to) */
        moe_membound(b, PT_OPK_MOE_PERMUTE_BWD, "moe_permute_bwd",
                     x.ab * x.h * (out + 2 * in), in, x.h);
    /* the weights' gradients and the scores read, the logits' gradient written */
    moe_membound(b, PT_OPK_MOE_ROUTE_BWD, "moe_route_bwd", x.R * x.E * (x.ab + 4) + 8 * x.R * x.k,
                 x.R, x.E);
    writes(gemm(b, PT_OPK_ROUTER_DGRAD, PT_PARAM_ROUTER, R, d->h, (int64_t)x.E, PT_GEMM_DGRAD),
           PT_TEN_DLN_ROWS);
    reads(gemm(b, PT_OPK_ROUTER_WGRAD, PT_PARAM_ROUTER, (int64_t)x.E, d->h, R,
               wgrad_role(b, PT_PARAM_ROUTER)),
          PT_TEN_LN2);
}

/* ---- Transformer layer ---------------------------------------------------------- */

/* The column-parallel projections of a block, each its own GEMM on the same input:
 * q, k and v of attention (separate, so the attention kernel reads contiguous
 * heads), gate and up of SwiGLU, up of GELU, the output head. */
typedef struct {
    pt_op_kind fwd, dgrad, wgrad;
    pt_param_ref param;
    int64_t n_out; /* output features on this rank */
    pt_gemm_role fwd_role; /* PT_GEMM_FWD, or PT_GEMM_FWD_GELU with the GELU fused */
} proj;

static int attention_projs(const dims *d, proj p[3])
{
    p[0] = (proj){PT_OPK_Q, PT_OPK_Q_DGRAD, PT_OPK_Q_WGRAD, PT_PARAM_Q, d->qd,
                  PT_GEMM_FWD};
    p[1] = (proj){PT_OPK_K, PT_OPK_K_DGRAD, PT_OPK_K_WGRAD, PT_PARAM_K, d->kvr, PT_GEMM_FWD};
    p[2] = (proj){PT_OPK_V, PT_OPK_V_DGRAD, PT_OPK_V_WGRAD, PT_PARAM_V, d->kvr, PT_GEMM_FWD};
    return 3;
}

static int mlp_projs(const builder *b, const dims *d, proj p[2])
{
    proj up = {PT_OPK_MLP_UP, PT_OPK_MLP_UP_DGRAD, PT_OPK_MLP_UP_WGRAD, PT_PARAM_MLP_UP,
               d->f / d->t, PT_GEMM_FWD};
    if (fused_gelu(b)) { /* the GELU in the up projection's epilogue */
        up.fwd = PT_OPK_MLP_UP_GELU;
        up.fwd_role = PT_GEMM_FWD_GELU;
    }
    if (b->c->m->act == PT_ACT_SWIGLU) {
        p[0] = (proj){PT_OPK_MLP_GATE, PT_OPK_MLP_GATE_DGRAD, PT_OPK_MLP_GATE_WGRAD,
                      PT_PARAM_MLP_GATE, d->f / d->t, PT_GEMM_FWD};
        p[1] = up;
        return 2;
    }
    p[0] = up;
    return 1;
}

/* Whether attention's q, k and v run as one batched GEMM in the forward (qkv) and in
 * the weight gradient (qkv_wgrad), kernels.h's matmul_forward_shared and
 * matmul_wgrad_shared: where the stack fuses, the three are as wide (multi-head
 * attention; grouped queries make k and v narrower) and tp = 1 (with tp > 1 the
 * runtime may cut a GEMM's rows around an overlapped gather). A small projection's
 * weight gradient has fewer output tiles than the GPU has SMs (GPT-2 124M's 768 x 768
 * is 36 tiles of 128 x 128 for an H100's 132 SMs, the batch of three 108), so one
 * batched call fills more of the GPU than three. The data gradients stay three GEMMs
 * adding into one input gradient: a batch's products cannot be summed. */
static bool shared_qkv(const builder *b, const dims *d)
{
    return gemm_epilogues(b) && b->c->l->tp == 1 && d->kvr == d->qd;
}

/* The column-parallel projections reading the norm output `in`; with `batched` their
 * forwards as one batched GEMM (shared_qkv), keyed by the first's op and parameter. */
static void column_parallel_fwd(builder *b, const dims *d, pt_tensor in, const proj *p, int np,
                                pt_op_kind batched)
{
    tp_gather_input(b, d, in, p[0].param, b->c->l->tp_overlap);
    pt_tensor src = column_input(b, in);
    if (batched != PT_OPK_COUNT) {
        reads(gemm_batch(b, batched, p[0].param, np, d->tokens, p[0].n_out, d->h,
                         p[0].fwd_role), src);
        return;
    }
    for (int i = 0; i < np; i++) {
        b->fp8_input_cast = i > 0; /* one input, quantized once */
        reads(gemm(b, p[i].fwd, p[i].param, d->tokens, p[i].n_out, d->h, p[i].fwd_role), src);
    }
    b->fp8_input_cast = false;
}

/* Backward of the column-parallel projections of one input: the data gradients
 * (summed into one: the first written, the others added), with sp the input gathered
 * again for the weight gradients (Megatron keeps it sharded), the weight gradients
 * (with `batched` as one batched GEMM, shared_qkv), then one reduce-scatter (sp) or
 * all-reduce of the input gradient. A stack with tp_backward_async runs the gather
 * beside the data gradients and the reduction beside the weight gradients whether or
 * not the layout overlaps TP communication. */
static void column_parallel_bwd(builder *b, const dims *d, pt_tensor in, const proj *p, int np,
                                pt_op_kind batched)
{
    bool async = b->c->t->stack.tp_backward_async;
    /* ptrun: a single projection's data gradient writes dY's transpose for its weight
     * gradient; of several, the later data gradients' casts would overwrite it */
    b->fp8_dy_kept = np == 1 && pt_stack_is_ptrun(&b->c->t->stack);
    for (int i = 0; i < np; i++)
        writes(gemm(b, p[i].dgrad, p[i].param, d->tokens, d->h, p[i].n_out,
                    i == 0 ? PT_GEMM_DGRAD_WRITE : PT_GEMM_DGRAD), PT_TEN_DLN);
    b->fp8_dy_kept = false;
    tp_gather_input(b, d, in, p[0].param, b->c->l->tp_overlap || async);
    pt_tensor src = column_input(b, in);
    if (batched != PT_OPK_COUNT)
        reads(gemm_batch(b, batched, p[0].param, np, p[0].n_out, d->h, d->tokens,
                         wgrad_role(b, p[0].param)), src);
    for (int i = 0; batched == PT_OPK_COUNT && i < np; i++) {
        /* ptrun: the input's transpose cast once; a single projection's weight gradient
         * right after its data gradient */
        b->fp8_input_cast = i > 0;
        b->fp8_dy_held = np == 1 && pt_stack_is_ptrun(&b->c->t->stack);
        reads(gemm(b, p[i].wgrad, p[i].param, p[i].n_out, d->h, d->tokens,
                   wgrad_role(b, p[i].param)), src);
    }
    b->fp8_input_cast = b->fp8_dy_held = false;
    double bytes = d->ab * (double)d->tokens * (double)d->h;
    if (b->c->l->sp)
        coll(b, PT_OPK_SP_REDUCESCATTER, (moves){PT_TEN_DLN, PT_TEN_DLN_ROWS},
             PT_COLL_REDUCESCATTER, PT_GROUP_TP, bytes, 1, tp_overlap_all(b) || async);
    else
        coll(b, PT_OPK_TP_ALLREDUCE, (moves){PT_TEN_DLN, PT_TEN_DLN}, PT_COLL_ALLREDUCE,
             PT_GROUP_TP, bytes, 1, async);
}

/* Backward of a row-parallel GEMM (input width k_in = n_in/t): with sp the incoming
 * gradient is first gathered; then data and weight gradients. With PT_GEMM_DGRAD_DGELU
 * the data gradient goes on through the GELU before the layer in the GEMM's epilogue. */
static void row_parallel_bwd(builder *b, const dims *d, pt_op_kind dgrad, pt_op_kind wgrad,
                             pt_param_ref param, int64_t k_in, pt_gemm_role dgrad_role)
{
    tp_enter(b, d, param);
    b->fp8_dy_kept = pt_stack_is_ptrun(&b->c->t->stack);
    gemm(b, dgrad, param, d->tokens, k_in, d->h, dgrad_role);
    b->fp8_dy_kept = false;
    b->fp8_dy_held = pt_stack_is_ptrun(&b->c->t->stack); /* the dgrad's transposed dY */
    gemm(b, wgrad, param, d->h, k_in, d->tokens, wgrad_role(b, param));
    b->fp8_dy_held = false;
}

/* Whether the residual adds ride the row-parallel GEMMs before them (matmul_forward_res:
 * the product's addend, so the stream is read in the GEMM's epilogue instead of by an
 * add kernel): where the stack fuses and nothing comes between product and add, i.e.
 * tp = 1 (with tp the partial products are summed over the ranks first). A run that
 * drops (ptrun --dropout) does the product, the dropout and the add apart under the
 * GEMM's op (runtime/layer.c); the price leaves the dropout out, as add_fwd's does. */
static bool residual_in_gemm(const builder *b)
{
    return gemm_epilogues(b) && b->c->l->tp == 1;
}

/* The dense MLP from the second norm's output to its (reduced) output. */
static void mlp_forward(builder *b, const dims *d, const proj *mlp, int nm,
                        pt_gemm_role row_role)
{
    column_parallel_fwd(b, d, PT_TEN_LN2, mlp, nm, PT_OPK_COUNT);
    if (!fused_gelu(b))
        activation(b, d, false);
    gemm(b, PT_OPK_MLP_DOWN, PT_PARAM_MLP_DOWN, d->tokens, d->h, d->f / d->t, row_role);
    tp_exit(b, d, PT_TEN_MLP_RES);
}

static void layer_forward(builder *b, const dims *d)
{
    proj attn[3], mlp[2];
    int na = attention_projs(d, attn), nm = mlp_projs(b, d, mlp);
    bool res = residual_in_gemm(b);
    pt_gemm_role row_role = res ? PT_GEMM_FWD_RES : PT_GEMM_FWD;
    zero3_gather(b);
    norm(b, d, PT_OPK_NORM1, PT_PARAM_NORM1, false);
    column_parallel_fwd(b, d, PT_TEN_LN1, attn, na,
                        shared_qkv(b, d) ? PT_OPK_QKV : PT_OPK_COUNT);
    qk_norm(b, d, false);
    rope(b, d, false);
    cp_forward_in(b, d);
    attention_core(b, d, false);
    cp_forward_out(b, d);
    gemm(b, PT_OPK_ATTN_OUT, PT_PARAM_ATTN_OUT, d->tokens, d->h, d->qd, row_role);
    tp_exit(b, d, PT_TEN_ATTN_RES);
    if (res) {
        norm(b, d, PT_OPK_NORM2, PT_PARAM_NORM2, false);
    } else if (fused_epilogues(b)) {
        residual_norm(b, d);
    } else {
        residual_add(b, d, PT_OPK_ADD1);
        norm(b, d, PT_OPK_NORM2, PT_PARAM_NORM2, false);
    }
    if (b->c->moe_layer) { /* the shared experts (when there are), then the routed */
        if (d->f > 0)
            mlp_forward(b, d, mlp, nm, PT_GEMM_FWD);
        moe_forward(b, d);
        residual_add(b, d, PT_OPK_ADD2);
        return;
    }
    mlp_forward(b, d, mlp, nm, row_role);
    if (!res)
        residual_add(b, d, PT_OPK_ADD2);
}

static bool attention_core_kind(pt_op_kind k)
{
    return k == PT_OPK_ATTN || k == PT_OPK_ATTN_SCORES || k == PT_OPK_ATTN_SOFTMAX ||
           k == PT_OPK_ATTN_DROPOUT || k == PT_OPK_ATTN_CTX;
}

/* Whether torchtitan's per-op policy keeps a forward kernel's output: its save list
 * holds the attention kernel and matmuls, and its matmul count drops every second one
 * (torchtitan/parallelisms/parallelize_llama.py); `gemms` counts the GEMMs seen. */
static bool op_policy_keeps(const pt_op *op, int *gemms)
{
    if (attention_core_kind(op->kind))
        return true;
    return op->out_elems > 0 && ++*gemms % 2 == 1;
}

/* torchtitan's per-op selective recomputation before a layer's backward: the kernels
 * whose outputs the policy did not keep run again; collectives are not repeated (the
 * ZeRO-3 gather is the backward's own). The memory model keeps the other outputs
 * (pt_ops_op_policy_kept_elems). */
static void recompute_op_policy(builder *b, const dims *d)
{
    pt_oplist *o = b->out;
    int start = o->n, keep = start, gemms = 0;
    b->recompute = true;
    layer_forward(b, d);
    b->recompute = false;
    for (int i = start; i < o->n; i++) {
        const pt_op *op = &o->op[i];
        if (op->cls == PT_OP_KERNEL && !op_policy_keeps(op, &gemms))
            o->op[keep++] = *op;
    }
    o->n = keep;
}

double pt_ops_op_policy_kept_elems(const pt_opctx *c)
{
    pt_oplist o = {0};
    builder b = {.c = c, .out = &o};
    dims d = dims_of(c);
    layer_forward(&b, &d);
    double elems = b.failed ? -1 : 0;
    int gemms = 0;
    for (int i = 0; !b.failed && i < o.n; i++)
        if (o.op[i].cls == PT_OP_KERNEL && op_policy_keeps(&o.op[i], &gemms))
            elems += o.op[i].out_elems;
    pt_oplist_free(&o);
    return elems;
}

/* Megatron-Core's recompute modules (a layout's recompute list) before the backward
 * that needs them: a mixture's pre-MLP norm (its own module; the other norms are fused
 * into the GEMMs after them, which keep their inputs), then its routed block whole
 * (router, dispatch, experts, combine: the block's forward again, its all-to-alls
 * included) or only the experts' activation; a dense layer's MLP, its tensor-parallel
 * gather and reduction included. The core attention's comes just before its backward
 * (layer_backward). */
static void recompute_modules(builder *b, const dims *d, const proj *mlp, int nm)
{
    const pt_layout *l = b->c->l;
    bool moe = b->c->moe_layer;
    b->recompute = true;
    if (moe && pt_layout_recomputes(l, PT_RMOD_LAYERNORM))
        norm(b, d, PT_OPK_NORM2, PT_PARAM_NORM2, false);
    if (moe && pt_layout_recomputes(l, PT_RMOD_MOE)) {
        moe_forward(b, d);
    } else if (moe && pt_layout_recomputes(l, PT_RMOD_MOE_ACT)) {
        moe_dims x = moe_dims_of(b, d);
        moe_act(b, &x, false);
    }
    if (!moe && pt_layout_recomputes(l, PT_RMOD_MLP))
        mlp_forward(b, d, mlp, nm, residual_in_gemm(b) ? PT_GEMM_FWD_RES : PT_GEMM_FWD);
    b->recompute = false;
}

static void layer_backward(builder *b, const dims *d)
{
    const pt_opctx *c = b->c;
    proj attn[3], mlp[2];
    int na = attention_projs(d, attn), nm = mlp_projs(b, d, mlp);
    bool selective = c->l->recompute == PT_RECOMPUTE_SELECTIVE;
    bool op_policy = selective && !c->l->recompute_modules &&
                     c->t->stack.selective == PT_SELECTIVE_OP;
    if (c->l->recompute == PT_RECOMPUTE_FULL) {
        b->recompute = true; /* the whole forward again, gathers included */
        layer_forward(b, d);
        b->recompute = false;
    } else {
        zero3_gather(b); /* ZeRO-3 freed the weights after the forward */
        if (op_policy)
            recompute_op_policy(b, d);
        else
            recompute_modules(b, d, mlp, nm);
    }
    if (c->moe_layer)
        moe_backward(b, d);
    if (!c->moe_layer || d->f > 0) {
        if (fused_gelu(b)) {
            row_parallel_bwd(b, d, PT_OPK_MLP_DOWN_DGRAD_GELU, PT_OPK_MLP_DOWN_WGRAD,
                             PT_PARAM_MLP_DOWN, d->f / d->t, PT_GEMM_DGRAD_DGELU);
        } else {
            row_parallel_bwd(b, d, PT_OPK_MLP_DOWN_DGRAD, PT_OPK_MLP_DOWN_WGRAD,
                             PT_PARAM_MLP_DOWN, d->f / d->t, PT_GEMM_DGRAD_WRITE);
            activation(b, d, true);
        }
        column_parallel_bwd(b, d, PT_TEN_LN2, mlp, nm, PT_OPK_COUNT);
    }
    norm(b, d, PT_OPK_NORM2_BWD, PT_PARAM_NORM2, true);
    row_parallel_bwd(b, d, PT_OPK_ATTN_OUT_DGRAD, PT_OPK_ATTN_OUT_WGRAD, PT_PARAM_ATTN_OUT,
                     d->qd, PT_GEMM_DGRAD_WRITE);
    cp_backward_in(b, d);
    if (!op_policy && pt_layout_recomputes(c->l, PT_RMOD_CORE_ATTN)) {
        b->recompute = true; /* the attention core, just before its backward */
        attention_core(b, d, false);
        b->recompute = false;
    }
    attention_core(b, d, true);
    cp_backward_out(b, d);
    rope(b, d, true);
    qk_norm(b, d, true);
    column_parallel_bwd(b, d, PT_TEN_LN1, attn, na,
                        shared_qkv(b, d) ? PT_OPK_QKV_WGRAD : PT_OPK_COUNT);
    norm(b, d, PT_OPK_NORM1_BWD, PT_PARAM_NORM1, true);
    if (c->l->zero >= 2) { /* ZeRO-2/3 reduce-scatter each layer's gradients at once */
        double dense, experts;
        layer_params(c, &dense, &experts);
        coll(b, PT_OPK_ZERO_REDUCESCATTER, (moves){PT_TEN_LAYER_GRADS, PT_TEN_LAYER_GRADS},
             PT_COLL_REDUCESCATTER, PT_GROUP_DPCP, dense * pt_grad_reduce_bytes(c), 1, true);
        /* (ptrun reduces its experts, kept whole, at the step: pt_ops_optimizer) */
        if (experts > 0 && !pt_stack_is_ptrun(&c->t->stack))
            coll(b, PT_OPK_ZERO_REDUCESCATTER, (moves){PT_TEN_LAYER_GRADS, PT_TEN_LAYER_GRADS},
                 PT_COLL_REDUCESCATTER, PT_GROUP_EDP, experts * pt_grad_reduce_bytes(c), 1,
                 true);
    }
}

int pt_ops_layer(const pt_opctx *c, bool backward, pt_oplist *out)
{
    builder b = {.c = c, .out = out};
    dims d = dims_of(c);
    if (backward)
        layer_backward(&b, &d);
    else
        layer_forward(&b, &d);
    return finish(&b);
}

/* ---- Embedding and head --------------------------------------------------------- */

int pt_ops_embed(const pt_opctx *c, bool backward, pt_oplist *out)
{
    builder b = {.c = c, .out = out};
    dims d = dims_of(c);
    char shape[64];
    shape_rows(shape, sizeof shape, d.tokens, d.h);
    double bytes = d.ab * (double)d.tokens * (double)d.h;
    /* Vocabulary-parallel embedding: each rank looks up its slice of the vocabulary
     * and the partial outputs are summed (reduce-scattered with sp). */
    pt_op *op;
    if (!backward) {
        op = membound(&b, PT_OPK_EMBED, "embed_fwd", 2 * bytes, shape);
        tp_exit(&b, &d, PT_TEN_EMBED_RES);
    } else {
        tp_enter(&b, &d, PT_PARAM_WTE);
        op = membound(&b, PT_OPK_EMBED_BWD, "embed_bwd", 2 * bytes, shape);
    }
    if (op)
        op->param = PT_PARAM_WTE;
    return finish(&b);
}

/* The longest row of logits the fused cross-entropy holds on chip while it makes three
 * passes over it: a CUDA block's shared memory on compute capability 9.0, 227 KiB
 * (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability";
 * kernels/cuda/loss.cu's row kernel); a CPU core's L2 holds it too (1 MiB a core on
 * the development machine's AMD EPYC, lscpu), where kernels/cpu/loss.c's passes run.
 * The cluster files give no device's shared memory: on compute capability 8.0 (163 KiB
 * a block) rows of 163-227 KiB run the three-pass kernel though counted as one pass. */
#define XENT_ROW_ON_CHIP_BYTES (227.0 * 1024)

/* The cross-entropy after the logits GEMM. Fused (ptrun; Megatron-Core's loss fusion):
 * the forward also writes the logits' gradient, so there is no backward op: with the
 * whole vocabulary one op over the logits in the activation type (row maximum, then sum
 * of exponentials and target, then the gradient), reading each row from memory once
 * where it fits on chip and three times where not, and writing the gradient;
 * vocabulary-parallel, those passes as ops of their own around the two all-reduces of
 * the row statistics over tp (the maxima, then the sums and target logits: Megatron-LM's
 * vocab-parallel loss). Unfused (Megatron-LM's cross-entropy in PyTorch ops): the cast
 * to fp32, the max, the exponentials and their sum, the normalised softmax kept for the
 * backward: four passes of fp32 forward, one all-reduce of three floats per token; the
 * backward's one-hot subtraction and scaling, and the cast back: three. */
static void xent_forward(builder *b, const dims *d, int64_t v, const char *shape)
{
    double elems = (double)d->tokens * (double)v, rows = 4.0 * (double)d->tokens;
    double logits = b->c->prec.act_bytes * elems;
    if (!b->c->t->stack.fused_xent) {
        membound(b, PT_OPK_XENT, "xent_fwd", 4 * 4.0 * elems, shape);
        coll(b, PT_OPK_XENT_ALLREDUCE, (moves){PT_TEN_XENT_SUMS, PT_TEN_XENT_SUMS},
             PT_COLL_ALLREDUCE, PT_GROUP_TP, 3 * rows, 1, false);
        return;
    }
    if (b->c->l->tp == 1) {
        bool on_chip = b->c->prec.act_bytes * (double)v <= XENT_ROW_ON_CHIP_BYTES;
        membound(b, PT_OPK_XENT, "xent", (on_chip ? 2 : 4) * logits, shape);
        return;
    }
    membound(b, PT_OPK_XENT_MAX, "xent_max", logits, shape);
    coll(b, PT_OPK_XENT_MAX_ALLREDUCE, (moves){PT_TEN_XENT_MAX, PT_TEN_XENT_MAX},
         PT_COLL_ALLREDUCE, PT_GROUP_TP, rows, 1, false);
    membound(b, PT_OPK_XENT_SUMEXP, "xent_sumexp", logits, shape);
    coll(b, PT_OPK_XENT_SUM_ALLREDUCE, (moves){PT_TEN_XENT_SUMS, PT_TEN_XENT_SUMS},
         PT_COLL_ALLREDUCE, PT_GROUP_TP, 2 * rows, 1, false);
    membound(b, PT_OPK_XENT, "xent", 2 * logits, shape);
}

int pt_ops_head(const pt_opctx *c, bool backward, pt_oplist *out)
{
    builder b = {.c = c, .out = out};
    dims d = dims_of(c);
    int64_t v = pt_stack_vocab(&c->t->stack, c->m, c->l->tp) / c->l->tp;
    char shape[64];
    shape_rows(shape, sizeof shape, d.tokens, v);
    proj head = {PT_OPK_LOGITS, PT_OPK_LOGITS_DGRAD, PT_OPK_LOGITS_WGRAD, PT_PARAM_HEAD, v,
                 PT_GEMM_FWD};
    if (!backward) {
        norm(&b, &d, PT_OPK_FINAL_NORM, PT_PARAM_FINAL_NORM, false);
        column_parallel_fwd(&b, &d, PT_TEN_LNF, &head, 1, PT_OPK_COUNT);
        xent_forward(&b, &d, v, shape);
    } else {
        if (!c->t->stack.fused_xent)
            membound(&b, PT_OPK_XENT_BWD, "xent_bwd", 3 * 4.0 * (double)d.tokens * (double)v,
                     shape);
        column_parallel_bwd(&b, &d, PT_TEN_LNF, &head, 1, PT_OPK_COUNT);
        norm(&b, &d, PT_OPK_FINAL_NORM_BWD, PT_PARAM_FINAL_NORM, true);
    }
    return finish(&b);
}

/* ---- FLOPs of a step -------------------------------------------------------------- */

static double list_flops(const pt_oplist *o, bool with_recompute)
{
    double f = 0;
    for (int i = 0; i < o->n; i++)
        if (o->op[i].cls == PT_OP_KERNEL && (with_recompute || !o->op[i].recompute))
            f += o->op[i].kernel.flops * o->op[i].count;
    return f;
}

static double step_flops(const pt_opctx *c, bool with_recompute)
{
    pt_oplist o = {0};
    double per_mb = 0; /* one micro-batch on one rank of every stage, all layers */
    int64_t kinds[PT_LAYER_KINDS];
    pt_model_layer_kinds(c->m, 0, c->m->layers, kinds);
    for (int kind = 0; kind < PT_LAYER_KINDS; kind++) { /* each kind of layer there is */
        int64_t layers = kinds[kind];
        if (layers == 0)
            continue;
        pt_opctx lc = *c;
        lc.moe_layer = kind & PT_LAYER_MOE;
        lc.window_layer = kind & PT_LAYER_WINDOW;
        /* model FLOPs count the balanced routing, whatever the busiest rank runs */
        lc.moe_imbalance = 1;
        o.n = 0;
        pt_ops_layer(&lc, false, &o);
        pt_ops_layer(&lc, true, &o);
        per_mb += (double)layers * list_flops(&o, with_recompute);
    }
    o.n = 0;
    pt_ops_embed(c, false, &o);
    pt_ops_embed(c, true, &o);
    pt_ops_head(c, false, &o);
    pt_ops_head(c, true, &o);
    per_mb += list_flops(&o, with_recompute);
    pt_oplist_free(&o);
    /* Each micro-batch's work is split over the tp·cp ranks of a stage; dp replicas
     * each run n_micro micro-batches. */
    const pt_layout *l = c->l;
    return per_mb * l->tp * l->cp * (double)l->dp * (double)l->n_micro;
}

double pt_step_model_flops(const pt_opctx *c) { return step_flops(c, false); }
double pt_step_hardware_flops(const pt_opctx *c) { return step_flops(c, true); }
