/*
 * The per-rank memory model: how many bytes one rank of a layout needs at its peak,
 * broken down into model states (weights, gradients, optimizer), activations kept by
 * the pipeline schedule, the embedding and head, recomputation working space and
 * communication buffers. The enumerator (enum.c) calls pt_mem_rank_max() for every
 * candidate layout to decide whether it fits, so pt_mem_stage() is closed-form: no
 * allocation and no loops over layers, stages or micro-batches.
 *
 * Sources: model states after the ZeRO paper (Rajbhandari et al. 2020, "ZeRO: Memory
 * Optimizations Toward Training Trillion Parameter Models", Sec. 3.1 and 5, Fig. 1);
 * activations after Korthikanti et al. 2022 ("Reducing Activation Recomputation in
 * Large Transformer Models", Sec. 4, eq. 1-6), generalised to grouped-query attention,
 * SwiGLU, models without dropout, any activation width and context parallelism; the
 * in-flight counts of the pipeline schedules after Megatron-LM's
 * schedules.py (Narayanan et al. 2021).
 *
 * Letters as in planner.h; s_r = s/c is the sequence slice a context-parallel rank
 * holds, hd = h/a the head dimension, kvd = k·hd the K (or V) width, ab the bytes of
 * one activation element. Byte figures are doubles, counts int64_t.
 */
#include "memory_model.h"
#include "schedule.h"
#include "step.h"

#include <math.h>

/* ---- Model states ------------------------------------------------------------ */

pt_model_states pt_mem_model_states(double params, int shard, int stage, pt_precision p)
{
    /* ZeRO paper Fig. 1: stage 1 (P_os) shards the optimizer states, stage 2 (P_os+g)
     * also the gradients, stage 3 (P_os+g+p) also the weights, each over N_d ranks. */
    double n = shard < 1 ? 1.0 : (double)shard;
    pt_model_states s = {
        .weights_bytes = p.weight_bytes * params,
        .grads_bytes = p.grad_bytes * params,
        .optimizer_bytes = (double)(p.master_bytes + p.moment_bytes) * params,
    };
    if (stage >= 1)
        s.optimizer_bytes /= n;
    if (stage >= 2)
        s.grads_bytes /= n;
    if (stage >= 3)
        s.weights_bytes /= n;
    return s;
}

/* ---- Activations of one layer ------------------------------------------------ */

static int64_t pt_mem_pos(int64_t x)
{
    return x < 1 ? 1 : x;
}

/* The common factors of the activation terms of one layer on one rank. */
typedef struct {
    double ab;  /* bytes of one activation element */
    double sb;  /* s_r·b: tokens of one micro-batch on this rank before tp splits */
    double s;   /* full sequence: keys every local query attends to */
    double t;   /* tensor-parallel size */
    double rep; /* divisor of the terms replicated across tp: t with sp, else 1 */
    double lin; /* bytes of a linear layer's input it keeps for its backward: ab, or 1
                   under Transformer Engine's FP8 (pt_mem_te_fp8) */
} pt_mem_dims;

static pt_mem_dims pt_mem_dims_of(const pt_model *m, const pt_layout *l, pt_precision p)
{
    double t = (double)pt_mem_pos(l->tp);
    double s_r = (double)m->seq / (double)pt_mem_pos(l->cp);
    return (pt_mem_dims){.ab = p.act_bytes, .sb = s_r * (double)pt_mem_pos(l->mbs),
                         .s = (double)m->seq, .t = t, .rep = l->sp ? t : 1.0,
                         .lin = p.act_bytes};
}

/* Whether the layers' linear layers keep their inputs for the backward as Transformer
 * Engine does under FP8 (stack casts "te"), in one byte an element. At TE v1.8 (commit
 * 3ec998e9, transformer_engine/pytorch/module/): Linear (Megatron-Core's row-parallel
 * linear_proj and linear_fc2) saves the FP8 input, or its FP8 transpose, instead of the
 * bf16 input (linear.py, forward: saved_inputmat / saved_inputmat_t); LayerNormLinear
 * (linear_qkv and linear_fc1, the norm fused in) writes the norm's output in FP8 and
 * saves that (layernorm_linear.py: ln_out of dtype uint8 under fp8, in
 * save_for_backward), keeping the norm's input in bf16 for the norm's backward. What
 * stays in the storage precision: the norms' inputs, Q, K, V and the attention output
 * that flash attention keeps for its own backward (so the output projection's FP8 copy
 * comes on top of it), and the MLP's inner outputs the activation's backward reads
 * (GeLU's input; SwiGLU's gate and up outputs). Megatron-Core does not use
 * LayerNormMLP. */
static bool pt_mem_te_fp8(const pt_train *t)
{
    return pt_train_fp8(t) && t->stack.fp8_casts == PT_FP8_CASTS_TE;
}

/* The attention core's s² terms (Korthikanti eq. 2: 5as²b with dropout, 2-byte
 * activations): softmax output, dropout mask (1 byte) and dropout output. With cp
 * the local s_r queries attend to all s keys. */
static double pt_mem_attention_core(const pt_model *m, const pt_mem_dims *d)
{
    double scores = (double)m->heads * d->sb * d->s / d->t; /* a·s_r·s·b / t elements */
    double bytes = d->ab * scores;
    if (m->dropout)
        bytes += scores + d->ab * scores;
    return bytes;
}

/* The busiest rank's share of the experts' copies over the mean: the imbalance, at most
 * the capacity factor where the model drops beyond it. */
static double pt_mem_moe_busiest(const pt_model *m, double imbalance)
{
    double F = imbalance > 1 ? imbalance : 1;
    return m->moe.capacity > 0 && F > m->moe.capacity ? m->moe.capacity : F;
}

/* The busiest rank's share over the mean of what a stage's n mixture-of-experts layers
 * keep together. Imbalance F is one layer's: which rank is busiest is decided in each
 * layer by its own router and experts, so a rank's excess over the mean in n layers
 * adds as n independent draws do, growing as sqrt(n) while the mean grows as n; the
 * stage's busiest rank keeps 1 + (F - 1)/sqrt(n) of the mean (F for one layer). Time
 * waits for each layer's busiest rank and takes F whole (planner/ops.c). */
static double pt_mem_moe_stage_imbalance(double F, int64_t n)
{
    return F > 1 && n > 1 ? 1 + (F - 1) / sqrt((double)n) : F;
}

/* What a mixture-of-experts layer's routed experts keep for the backward
 * (Megatron-Core's MoELayer with its alltoall dispatcher): the router's fp32 scores of
 * the R = s_r·b/rep tokens routed here, and of the N = F·etp·R·k copies the rank's
 * experts compute (the busiest rank's, imbalance F) the first GEMM's input (the
 * dispatched copies), its output (gate and up for SwiGLU), the second GEMM's input and
 * its output, which the weighted sum's backward reads for the router weights'
 * gradient. The copies before the dispatch are not kept (the permutation's backward
 * needs only the indices). Without act_out, the second GEMM's input (the activation's
 * output) is left out: recompute module moe_act rebuilds it from the first's output. */
static double pt_mem_moe_routed(const pt_model *m, const pt_layout *l, const pt_mem_dims *d,
                                double imbalance, bool act_out)
{
    double R = d->sb / d->rep, k = (double)m->moe.top_k, h = (double)m->hidden;
    double etp = (double)pt_mem_pos(l->etp), fe = (double)m->moe.expert_ffn / etp;
    double N = pt_mem_moe_busiest(m, imbalance) * etp * R * k;
    double up = m->act == PT_ACT_SWIGLU ? 2 * fe : fe;
    return 4 * R * (double)m->moe.experts +
           N * (d->lin * h + d->ab * up + (act_out ? d->lin * fe : 0) + d->ab * h);
}

/* A dense MLP's inside: GeLU's input and the second linear's input; SwiGLU's gate and up
 * outputs and the down projection's input (T). Recompute module mlp drops it. */
static double pt_mem_mlp_inner(const pt_model *m, const pt_mem_dims *d, double f)
{
    double inner = m->act == PT_ACT_SWIGLU ? 2.0 : 1.0;
    return (inner * d->ab + d->lin) * d->sb * f / d->t;
}

/* Everything else a layer keeps when nothing is recomputed (Korthikanti eq. 1-2,
 * with the attention core left out): terms marked R are replicated across tp
 * unless sequence parallelism splits them, T are split by tp. */
static double pt_mem_layer_linear(const pt_model *m, const pt_layout *l, const pt_mem_dims *d,
                                  bool moe, double imbalance)
{
    double h = (double)m->hidden;
    /* a mixture-of-experts layer's dense MLP is its shared experts' */
    double f = moe ? (double)(m->moe.shared_experts * m->moe.shared_ffn) : (double)m->ffn;
    double hd = (double)pt_model_head_dim(m), qd = (double)m->heads * hd;
    /* K (or V) width on one rank: k/t heads, or one replicated head when tp > k */
    double kvr = (double)pt_kv_heads_rank(m, (int)d->t) * hd;
    double sbh = d->sb * h;
    double mask = m->dropout ? sbh / d->rep : 0.0;     /* one 1-byte dropout mask, R */

    double bytes = 2 * d->ab * sbh / d->rep;           /* inputs of the two norms, R */
    bytes += d->lin * sbh / d->rep;                    /* QKV input, R */
    bytes += d->ab * d->sb * (qd / d->t + 2 * kvr);    /* Q, K, V, T */
    if (m->qk_norm)                                    /* ... before their norms, T */
        bytes += d->ab * d->sb * (qd / d->t + kvr);
    bytes += d->ab * d->sb * qd / d->t;                /* output-projection input, T */
    if (d->lin != d->ab)                               /* ... and its FP8 copy (TE) */
        bytes += d->lin * d->sb * qd / d->t;
    bytes += mask;                                     /* attention dropout mask, R */
    /* MLP first-linear input (a mixture's router and dispatch input), R; recompute
     * module layernorm drops a mixture's, whose pre-MLP norm is a module of its own */
    if (!(moe && pt_layout_recomputes(l, PT_RMOD_LAYERNORM)))
        bytes += d->lin * sbh / d->rep;
    if (!(!moe && pt_layout_recomputes(l, PT_RMOD_MLP)))
        bytes += pt_mem_mlp_inner(m, d, f);
    bytes += mask;                                     /* MLP dropout mask, R */
    if (moe && !pt_layout_recomputes(l, PT_RMOD_MOE))
        bytes += pt_mem_moe_routed(m, l, d, imbalance, !pt_layout_recomputes(l, PT_RMOD_MOE_ACT));
    return bytes;
}

double pt_mem_layer_activations(const pt_model *m, const pt_layout *l, pt_precision p)
{
    return pt_mem_layer_activations_attn(m, l, p, PT_ATTN_PTRUN);
}

/* A layer of either kind (moe: a mixture-of-experts layer, its busiest rank at
 * `imbalance`). */
static double pt_mem_layer_activations_kind(const pt_model *m, const pt_layout *l,
                                            pt_precision p, pt_attn_impl attn, bool te_fp8,
                                            bool moe, double imbalance)
{
    pt_mem_dims d = pt_mem_dims_of(m, l, p);
    if (te_fp8)
        d.lin = 1;
    /* Full recomputation keeps only the layer input (Korthikanti Sec. 5: 2sbh). */
    if (l->recompute == PT_RECOMPUTE_FULL)
        return d.ab * d.sb * (double)m->hidden / d.rep;
    double bytes = pt_mem_layer_linear(m, l, &d, moe, imbalance);
    /* Selective recomputation drops the attention core (Korthikanti Sec. 5). Flash
     * attention keeps no score matrix at all, only the output (counted with the
     * output projection's input) and the softmax statistics: one fp32 log-sum-exp per
     * head and query (Dao et al. 2022, Alg. 2); its dropout mask is regenerated
     * from the RNG state. */
    if (attn == PT_ATTN_FLASH)
        bytes += 4.0 * (double)m->heads * d.sb / d.t;
    else if (!pt_layout_recomputes(l, PT_RMOD_CORE_ATTN))
        bytes += pt_mem_attention_core(m, &d);
    return bytes;
}

static double pt_mem_layer_activations_lin(const pt_model *m, const pt_layout *l,
                                           pt_precision p, pt_attn_impl attn, bool te_fp8)
{
    return pt_mem_layer_activations_kind(m, l, p, attn, te_fp8, false, 1);
}

double pt_mem_layer_activations_attn(const pt_model *m, const pt_layout *l, pt_precision p,
                                     pt_attn_impl attn)
{
    return pt_mem_layer_activations_lin(m, l, p, attn, false);
}

/* The activations one layer keeps under the stack's attention and selective policy.
 * torchtitan's per-op policy keeps the layer input, the attention output and its
 * fp32 softmax statistics, and the GEMM outputs the op lists say it does not rebuild
 * (pt_ops_op_policy_kept_elems). */
static double pt_mem_layer_kept(const pt_model *m, const pt_layout *l, const pt_train *t,
                                pt_precision p, bool moe, double imbalance)
{
    if (l->recompute != PT_RECOMPUTE_SELECTIVE || l->recompute_modules ||
        t->stack.selective != PT_SELECTIVE_OP)
        return pt_mem_layer_activations_kind(m, l, p, t->stack.attention, pt_mem_te_fp8(t),
                                             moe, imbalance);
    pt_mem_dims d = pt_mem_dims_of(m, l, p);
    pt_opctx c;
    pt_opctx_init(&c, m, l, t, NULL);
    c.moe_layer = moe;
    double gemm_out = pt_ops_op_policy_kept_elems(&c);
    if (gemm_out < 0) { /* out of memory listing the ops: count the whole layer kept */
        pt_layout none = *l;
        none.recompute = PT_RECOMPUTE_NONE;
        return pt_mem_layer_activations_attn(m, &none, p, t->stack.attention);
    }
    double h = (double)m->hidden, qd = (double)(m->heads * pt_model_head_dim(m));
    return d.ab * (d.sb * (h / d.rep + qd / d.t) + gemm_out) +
           4.0 * (double)m->heads * d.sb / d.t;
}

/* ---- One pipeline stage ------------------------------------------------------ */

/* How many micro-batches (or chunks) a stage holds activations for at its peak. */
typedef struct {
    int64_t in_flight;    /* micro-batches, or model chunks when interleaved */
    int64_t kept_layers;  /* layers whose activations they keep, over all of them */
    int64_t slot_layers;  /* layers of the largest of them (an activation slot's size) */
    int64_t mb_first;     /* micro-batches whose embedding output stage 0 keeps */
    int64_t mb_last;      /* micro-batches whose logits the last stage keeps */
} pt_mem_flight;

static pt_mem_flight pt_mem_flight_of(const pt_model *m, const pt_layout *l, int stage,
                                      int64_t layers)
{
    int64_t pp = pt_mem_pos(l->pp), vp = pt_mem_pos(l->vp), n = pt_mem_pos(l->n_micro);
    if (l->schedule == PT_SCHED_AFAB) /* GPipe: every forward before any backward, */
        return (pt_mem_flight){n, n * layers, layers, n, n}; /* on a single stage too */
    if (pp == 1) /* gradient accumulation: one micro-batch's forward and backward at a time */
        return (pt_mem_flight){1, layers, layers, 1, 1};
    if (vp > 1) { /* the layout rules allow vp > 1 only with the interleaved schedule */
        /* Megatron's interleaved 1F1B: (p - stage - 1)·2 + (vp - 1)·p warm-up forwards
         * plus the steady state's first forward, each a chunk of this stage's layers/vp
         * (L/(p·vp) with the even split); at stage 0 that is L·(1 + (p-1)/(p·vp))
         * layers (Korthikanti Sec. 4.2.3). The chunk order (p micro-batches per chunk
         * in turn) keeps up to 2p micro-batches in flight on stage 0's first chunk, and
         * one on the last stage's last chunk. The k-th warm-up forward runs chunk
         * (k / p) mod vp (Megatron-LM's get_model_chunk_id), so with chunks of
         * different sizes (a pipeline layout) each counts its own layers. */
        int64_t chunks = (pp - stage - 1) * 2 + (vp - 1) * pp + 1;
        if (chunks > n * vp)
            chunks = n * vp;
        int64_t per[PT_CHUNK_MAX], kept = 0, most = 0;
        for (int64_t c = 0; c < vp && c < PT_CHUNK_MAX; c++) {
            per[c] = pt_stage_layers(m, l, (int)(c * pp + stage), NULL);
            most = per[c] > most ? per[c] : most;
        }
        int64_t rounds = chunks / (pp * vp), rest = chunks % (pp * vp);
        kept = rounds * pp * layers; /* whole rounds of p forwards through every chunk */
        for (int64_t k = 0; k < rest && vp <= PT_CHUNK_MAX; k++)
            kept += per[(k / pp) % vp];
        return (pt_mem_flight){chunks, kept, most, 2 * pp < n ? 2 * pp : n, 1};
    }
    /* 1F1B (PipeDream-Flush): stage i runs p - i warm-up forwards before its first
     * backward; the last stage runs each backward right after its forward. */
    int64_t k = pp - stage < n ? pp - stage : n;
    return (pt_mem_flight){k, k * layers, layers, pp < n ? pp : n, 1};
}

/* Embedding dropout mask on stage 0; final-norm input and fp32 logits for the
 * cross-entropy backward on the last stage (Korthikanti Sec. 4.3). */
static double pt_mem_embed_head(const pt_model *m, const pt_layout *l, const pt_stack *s,
                                const pt_mem_dims *d, bool first, bool last,
                                const pt_mem_flight *fl)
{
    double sbh = d->sb * (double)m->hidden;
    double bytes = 0;
    if (first && m->dropout)
        bytes += (double)fl->mb_first * sbh / d->rep;
    if (last) {
        double logits = 4.0 * d->sb * (double)pt_stack_vocab(s, m, l->tp) / d->t;
        bytes += (double)fl->mb_last * (d->ab * sbh / d->rep + logits);
    }
    return bytes;
}

/* Context parallelism's transfer buffers around attention, as Transformer Engine
 * holds them (context_parallel.py), by pt_cp_comm. The ring (p2p): the K and V blocks
 * being computed on and the next ones arriving. all_gather: at its peak, in the
 * backward, the K and V of the whole sequence gathered again and their gradients
 * before the reduce-scatter (AttnFuncWithCPAndKVAllGather keeps only the local blocks
 * between forward and backward). a2a: the all-to-all's outputs of q, k and v while its
 * inputs are still referenced (the backward's dq, dk, dv the same); assumed: the tensors
 * kept for the backward are the post-all-to-all q, k, v and output
 * (AttnFuncWithCPAndQKVOA2A's save_for_backward) in place of the pre-all-to-all ones,
 * the same elements, so the activations do not change. a2a+p2p: both, the ring's
 * blocks u times longer with 1/u of the heads, as many bytes as p2p's. KV heads sent
 * as runtime/attention.c does, replicated to u where fewer (TE refuses those
 * layouts). */
static double pt_mem_cp_comm(const pt_model *m, const pt_layout *l, const pt_mem_dims *d)
{
    double hd = (double)pt_model_head_dim(m);
    double kvr = (double)pt_kv_heads_rank(m, l->tp) * hd, blocks = 2 * (2 * d->ab * d->sb * kvr);
    pt_attn_shape at = pt_attn_shape_of(m, l);
    if (l->cp_comm == PT_CPC_ALLGATHER)
        return 4 * d->ab * d->sb * (double)l->cp * kvr;
    if (at.u <= 1)
        return blocks;
    /* q, k and v received: u members' shares of the head form's heads */
    double a2a = d->ab * d->sb * (double)(at.u * (at.heads + 2 * at.kv_heads)) * hd;
    return a2a + (at.r > 1 ? blocks : 0);
}

/* Buffers the collectives and point-to-point transfers of the stage keep. */
static double pt_mem_comm(const pt_model *m, const pt_layout *l, const pt_train *tr,
                          pt_precision p, const pt_mem_dims *d, double params,
                          double grads_bytes)
{
    double bytes = 0, bucket = (double)tr->bucket_bytes;
    int64_t shard = pt_mem_pos(l->dp) * pt_mem_pos(l->cp);
    if (shard > 1) {
        /* Two gradient buckets in flight: one reducing while the next fills. ZeRO-2/3
         * reduce-scatter full gradient buckets before keeping their own shard. */
        double g = l->zero >= 2 ? params * p.grad_bytes : grads_bytes;
        bytes += 2 * (bucket < g ? bucket : g);
        if (l->zero >= 3) /* parameters of the current and the prefetched layer */
            bytes += 2.0 * (double)pt_params_layer(m, l->tp) * p.weight_bytes;
    }
    double sbh = d->sb * (double)m->hidden;
    if (l->sp && l->tp > 1) /* all-gathered input of a linear layer */
        bytes += d->ab * sbh;
    if (l->pp > 1) /* send and receive buffers of the stage boundary */
        bytes += 2 * d->ab * sbh / d->rep;
    if (l->cp > 1)
        bytes += pt_mem_cp_comm(m, l, d);
    if (pt_model_moe_layers(m, 0, m->layers) > 0) {
        /* the dispatch's send and receive buffers of the busiest rank's copies */
        double F = pt_mem_moe_busiest(m, tr->moe_imbalance);
        bytes += 2 * d->ab * F * (d->sb / d->rep) * (double)m->moe.top_k * (double)m->hidden;
    }
    return bytes;
}

/* ---- ptrun's own stack ----------------------------------------------------------- */

static double pt_mem_ceil_div(int64_t a, int64_t b)
{
    return (double)((a + b - 1) / b);
}

/* Elements one rank owns of ZeRO 1's buckets (runtime/param_table.c's zero1_buckets): in
 * each of the stage's chunks, buckets of bucket_elems from the end down and the rest,
 * each padded to a multiple of N and shared N ways; a tied embedding's copy (first and
 * last stage, pp > 1) is a bucket of its own. */
static double pt_mem_zero1_shares(const pt_model *m, const pt_layout *l, int64_t bucket_elems,
                                  int stage, int64_t N, double *expert_shares)
{
    int64_t pp = pt_mem_pos(l->pp), vp = pt_mem_pos(l->vp), V = pp * vp;
    int64_t B = bucket_elems, edp = pt_layout_edp(l);
    int64_t tied = m->tied_embeddings && pp > 1
                       ? pt_vocab_padded(m, l->tp) / pt_mem_pos(l->tp) * m->hidden : 0;
    double shares = 0;
    *expert_shares = 0;
    for (int64_t c = 0; c < vp; c++) {
        int64_t vs = c * pp + stage, experts;
        bool first = vs == 0, last = vs == V - 1;
        int64_t len = pt_stage_params(m, l, (int)vs, &experts) - experts;
        if ((first || last) && tied) {
            len -= tied;
            shares += pt_bucket_shares(tied, tied, N); /* one bucket of its own */
        }
        shares += pt_bucket_shares(len, B, N);
        /* a mixture of experts: the experts' buckets over their own group */
        *expert_shares += pt_bucket_shares(experts, B, edp);
    }
    return shares;
}

/* ptrun's model states, as runtime/param_table.c and zero.c allocate them (fp32 elements
 * of the flat parameter buffer). ZeRO 0 keeps master weights, gradients and both
 * moments whole (plus the working weights in the activation dtype when that is not
 * fp32). ZeRO 1 keeps the moments of its share of every gradient bucket, and (`comm`)
 * the buckets' padded copies it reduce-scatters and its reduced shares. ZeRO 2 and 3 cut
 * the parameters into segments, each layer one and the embedding and head pieces one
 * each, sharded on their own (ceil(len/N) per rank): gradient and moment shards, two
 * windows layers' gradients accumulate in (one reduce-scattering while the next
 * fills) with the shares they reduce into, the embedding's and head's weights and
 * gradients whole (FSDP's root unit), and a staging buffer of the largest padded
 * segment; stage 3 keeps the layers' weights as master shards and gathers them into
 * two windows (the current layer and the prefetched next), stage 2 keeps every weight
 * whole. */
static void pt_mem_ptrun_states(const pt_model *m, const pt_layout *l, int stage, int64_t layers,
                                pt_precision p, int64_t bucket_elems, pt_memory *out)
{
    int64_t pp = pt_mem_pos(l->pp), N = pt_mem_pos(l->dp) * pt_mem_pos(l->cp);
    bool first = stage == 0, last = stage == pp - 1;
    double P = (double)pt_rank_params(m, l, stage, NULL), f32 = 4.0;
    double work = p.act_bytes == 4 ? 0.0 : (double)p.act_bytes; /* working weights */
    /* compress=bf16 (runtime/compress.c): the buckets' bf16 copies beside the fp32 ones */
    double bf16 = l->compress == PT_COMPRESS_BF16 && N > 1 ? 2.0 : 0.0;
    if (l->compress == PT_COMPRESS_POWERSGD && N > 1 && l->zero <= 1) {
        /* compress=powersgd: the errors of the compressed matrices and the packed
         * uncompressed rest (together the elements the buckets reduce: the stage's, less
         * ZeRO 1's tied copy) and every matrix's P and Q */
        int64_t compressed, factors;
        pt_psgd_layer(m, l->tp, l->powersgd_rank, &compressed, &factors);
        double tied = l->zero == 1 && m->tied_embeddings && pp > 1 && (first || last)
                          ? (double)(pt_vocab_padded(m, l->tp) / pt_mem_pos(l->tp) * m->hidden)
                          : 0;
        out->comm_bytes += f32 * (P - tied + (double)layers * (double)factors);
    }
    if (l->zero == 0 || N == 1) {
        out->weights_bytes = (f32 + work) * P;
        out->grads_bytes = f32 * P;
        out->optimizer_bytes = 2 * f32 * P;
        out->comm_bytes += bf16 * P;
        return;
    }
    if (l->zero == 1) { /* bucket shares, and the buckets' padded copies */
        double experts, shares = pt_mem_zero1_shares(m, l, bucket_elems, stage, N, &experts);
        out->weights_bytes = (f32 + work) * P;
        out->grads_bytes = f32 * P;
        out->optimizer_bytes = 2 * f32 * (shares + experts);
        out->comm_bytes += (f32 + bf16) * (shares * (double)N + shares) +
                           f32 * experts * (double)(pt_layout_edp(l) + 1);
        return;
    }
    /* a layer is a segment of its own (a mixture's MoE layer without its experts); a
     * chunk's experts one more, kept whole and sharded over their expert-data-parallel
     * group (ZeRO 2/3 reject pp > 1: the stage is one chunk of every layer) */
    int64_t emb = first ? pt_params_embedding(m, l->tp) : 0;
    int64_t head = last ? pt_params_head(m, l->tp, (int)pp) : 0, experts = 0, edp = 1;
    int64_t moe = pt_model_moe_layers(m, 0, layers);
    pt_rank_params(m, l, stage, &experts);
    if (experts > 0)
        edp = pt_layout_edp(l);
    double dense_shard = pt_mem_ceil_div(pt_params_layer(m, l->tp), N);
    double moe_shard = moe > 0 ? pt_mem_ceil_div(pt_params_moe_layer_dense(m, l->tp), N) : 0;
    double layer_shards = (double)(layers - moe) * dense_shard + (double)moe * moe_shard;
    double layer_shard = layers - moe > 0 ? dense_shard : 0;
    layer_shard = moe_shard > layer_shard ? moe_shard : layer_shard; /* the largest */
    double whole = (double)(emb + head + experts);
    double shards = layer_shards + (emb ? pt_mem_ceil_div(emb, N) : 0) +
                    (head ? pt_mem_ceil_div(head, N) : 0) +
                    (experts ? pt_mem_ceil_div(experts, edp) : 0);
    double window = layer_shard * (double)N, staging = window;
    int64_t pieces[3] = {emb, head, experts};
    for (int i = 0; i < 3; i++) {
        int64_t r = i == 2 ? edp : N;
        if (pt_mem_ceil_div(pieces[i], r) * (double)r > staging)
            staging = pt_mem_ceil_div(pieces[i], r) * (double)r;
    }
    bool gather = l->zero >= 3;
    out->weights_bytes = f32 * (gather ? whole + layer_shards : P);
    double windows = layers > 0 ? 2 * window : 0; /* two of each, used in turn */
    out->grads_bytes = f32 * (shards + windows + whole);
    out->optimizer_bytes = 2 * f32 * shards;
    out->comm_bytes += f32 * ((gather ? windows : 0) + staging + 2 * layer_shard);
}

/* Memory of a stage under ptrun's own stack: exactly the buffers ptrun allocates —
 * the model states above, one activation slot per micro-batch chunk the schedule
 * keeps in flight, the head's buffers for the micro-batches whose loss waits for its
 * backward, the backward's scratch (reported as the working space of recomputation),
 * all from planner/buffers.c's list, and the stage boundary's send and receive
 * copies that the communication layer keeps. */
static void pt_mem_stage_ptrun(const pt_model *m, const pt_layout *l, int stage,
                               int64_t layers, const pt_mem_flight *fl, pt_precision p,
                               int64_t bucket_elems, bool fp8, pt_memory *out)
{
    pt_buffers B;
    pt_buffers_of(m, l, (int)p.act_bytes, m->dropout, &B);
    if (fp8) /* the quantized operands of one GEMM at a time, in the scratch */
        pt_buffers_fp8(m, l, &B);
    int64_t pp = pt_mem_pos(l->pp), slots = fl->in_flight;
    if (slots < pt_mem_pos(l->vp)) /* evaluation runs each chunk in a slot of its own */
        slots = pt_mem_pos(l->vp);
    pt_mem_ptrun_states(m, l, stage, layers, p, bucket_elems, out);
    out->activations_bytes =
        (double)slots * pt_buffers_slot(&B, fl->slot_layers, l->recompute == PT_RECOMPUTE_FULL);
    out->embed_head_bytes = stage == pp - 1 ? (double)fl->mb_last * pt_buffers_head(&B) : 0;
    out->recompute_bytes = pt_buffers_scratch(&B);
    if (l->pp > 1) {
        pt_mem_dims d = pt_mem_dims_of(m, l, p);
        out->comm_bytes += 2 * d.ab * d.sb * (double)m->hidden / d.rep;
    }
    if (B.overflow)
        out->activations_bytes = HUGE_VAL;
}

/* What FP8 training keeps beside the model states, on a stage of `layers` layers,
 * counted with the weights. ptrun: its scaling state, pt_fp8_meta_floats floats
 * (train.c, the size runtime/fp8.c allocates). Transformer Engine
 * (stack casts "te"): the FP8 weights and their transposes cached for the step
 * (linear.py's weight workspace), one byte each per weight element; its meta blocks
 * are left out (a few KiB a layer). At TE v1.8 (linear.py, get_fp8_workspace with
 * with_transpose while gradients are on, cache_name "weight" whenever the caller passes
 * is_first_microbatch, as Megatron-Core's TE wrappers do) the transpose is cached with
 * the weight: 2 bytes an element, for the tp shard of every layer of the stage; the
 * distributed optimizer shards the fp32 master weights and moments only, not these.
 * With the FP8 parameter gather (fp8_model_init) the linear weights themselves are FP8,
 * one byte where the model states count the bf16 weight's two, and their transpose
 * takes the other: nothing beyond the states, two bytes an element less than without.
 * The inputs TE keeps in FP8 for the backward are activations (pt_mem_te_fp8). torchao
 * (casts "per_gemm" of another stack) keeps nothing counted here. */
static double pt_mem_fp8_states(const pt_model *m, const pt_layout *l, const pt_train *t,
                                int64_t layers)
{
    if (!pt_train_fp8(t))
        return 0;
    if (t->stack.fp8_casts == PT_FP8_CASTS_TE)
        return (t->fp8.param_gather ? 0.0 : 2.0) * pt_layer_linear_elems(m, l->tp, NULL) *
               (double)layers;
    if (!pt_stack_is_ptrun(&t->stack))
        return 0;
    return 4.0 * (double)pt_fp8_meta_floats(m, &t->fp8, layers);
}

void pt_mem_stage(const pt_model *m, const pt_layout *l, const pt_train *t, int stage,
                  pt_memory *out)
{
    pt_precision p = pt_precision_of(t->precision);
    int64_t pp = pt_mem_pos(l->pp);
    if (stage < 0)
        stage = 0;
    if (stage > pp - 1)
        stage = (int)(pp - 1);
    bool first = stage == 0, last = stage == pp - 1;
    int64_t layers = pt_rank_layers(m, l, stage), experts;

    int64_t params = pt_rank_params(m, l, stage, &experts);
    int64_t shard = pt_mem_pos(l->dp) * pt_mem_pos(l->cp);
    /* the experts' states are sharded over their own group, the rest over dp×cp */
    pt_model_states ms = pt_mem_model_states((double)(params - experts), (int)shard, l->zero, p);
    pt_model_states es = pt_mem_model_states((double)experts, pt_layout_edp(l), l->zero, p);
    ms.weights_bytes += es.weights_bytes;
    ms.grads_bytes += es.grads_bytes;
    ms.optimizer_bytes += es.optimizer_bytes;

    pt_mem_dims d = pt_mem_dims_of(m, l, p);
    pt_mem_flight fl = pt_mem_flight_of(m, l, stage, layers);
    /* ptrun's own buffers (planner/buffers.c) */
    if (t->stack.attention == PT_ATTN_PTRUN) {
        *out = (pt_memory){.stage = stage, .params = (double)params, .layers = layers,
                           .in_flight = fl.in_flight};
        pt_mem_stage_ptrun(m, l, stage, layers, &fl, p, t->bucket_bytes / 4, pt_train_fp8(t),
                           out);
        out->weights_bytes += pt_mem_fp8_states(m, l, t, layers);
        out->total_bytes = out->weights_bytes + out->grads_bytes + out->optimizer_bytes +
                           out->activations_bytes + out->embed_head_bytes +
                           out->recompute_bytes + out->comm_bytes;
        return;
    }
    double act = pt_mem_layer_kept(m, l, t, p, false, 1);
    /* the stage's mixture-of-experts layers keep their own: a layer of the stage's
     * average (exact when its layers are all of one kind) */
    int64_t moe = 0;
    for (int64_t c = 0; c < pt_mem_pos(l->vp); c++) {
        int64_t f, n = pt_stage_layers(m, l, (int)(c * pp + stage), &f);
        moe += pt_model_moe_layers(m, f, n);
    }
    double act_moe = moe > 0 ? pt_mem_layer_kept(m, l, t, p, true,
                                                 pt_mem_moe_stage_imbalance(t->moe_imbalance, moe))
                             : 0;
    if (moe > 0 && layers > 0)
        act = (act * (double)(layers - moe) + act_moe * (double)moe) / (double)layers;

    /* What one layer's recomputation holds at once: the whole layer rebuilt (full, or
     * the per-op policy), or the attention core's score matrix (which flash never
     * writes), and a recomputed module's inside (a mixture's routed block, a dense
     * MLP). */
    double recompute = 0;
    bool op_policy = l->recompute == PT_RECOMPUTE_SELECTIVE && !l->recompute_modules &&
                     t->stack.selective == PT_SELECTIVE_OP;
    if (l->recompute == PT_RECOMPUTE_FULL || op_policy) {
        pt_layout none = *l;
        none.recompute = PT_RECOMPUTE_NONE;
        recompute = pt_mem_layer_activations_attn(m, &none, p, t->stack.attention);
        if (moe > 0)
            recompute = fmax(recompute, pt_mem_layer_activations_kind(
                                            m, &none, p, t->stack.attention, false, true,
                                            t->moe_imbalance));
    } else if (pt_layout_recomputes(l, PT_RMOD_CORE_ATTN) &&
               t->stack.attention != PT_ATTN_FLASH) {
        recompute = pt_mem_attention_core(m, &d);
    }
    if (moe > 0 && pt_layout_recomputes(l, PT_RMOD_MOE))
        recompute = fmax(recompute, pt_mem_moe_routed(m, l, &d, t->moe_imbalance, true));
    if (layers > moe && pt_layout_recomputes(l, PT_RMOD_MLP))
        recompute = fmax(recompute, pt_mem_mlp_inner(m, &d, (double)m->ffn));

    *out = (pt_memory){
        .stage = stage,
        .weights_bytes = ms.weights_bytes,
        .grads_bytes = ms.grads_bytes,
        .optimizer_bytes = ms.optimizer_bytes,
        .activations_bytes = (double)fl.kept_layers * act,
        .embed_head_bytes = pt_mem_embed_head(m, l, &t->stack, &d, first, last, &fl),
        .recompute_bytes = recompute,
        .comm_bytes = pt_mem_comm(m, l, t, p, &d, (double)params, ms.grads_bytes),
        .params = (double)params,
        .layers = layers,
        .in_flight = fl.in_flight,
    };
    out->weights_bytes += pt_mem_fp8_states(m, l, t, layers);
    out->total_bytes = out->weights_bytes + out->grads_bytes + out->optimizer_bytes +
                       out->activations_bytes + out->embed_head_bytes +
                       out->recompute_bytes + out->comm_bytes;
}

void pt_mem_rank_max(const pt_model *m, const pt_layout *l, const pt_train *t,
                     pt_memory *out)
{
    /* Three stages suffice when the middle stages are alike. Stage 0 holds the
     * embedding, stage p-1 the head, and with first_layers/last_layers their own
     * number of layers. The middle stages 1..p-2 then hold the same layers
     * (pt_stage_layers), parameters and buffers, and the activations they keep in
     * flight never grow with the stage index: constant under all-forward-all-backward,
     * min(p - i, n) under 1F1B and min(2(p - i - 1) + (vp - 1)p + 1, n·vp) chunks
     * under interleaving. So stage 1 bounds every middle stage. A pipeline layout
     * whose middle stages differ is asked stage by stage. */
    int64_t pp = pt_mem_pos(l->pp);
    pt_mem_stage(m, l, t, 0, out);
    bool alike = pt_pipe_middle_alike(m, l);
    for (int64_t r = 1; r < pp; r++) {
        if (alike && r > 1 && r < pp - 1)
            continue;
        pt_memory s;
        pt_mem_stage(m, l, t, (int)r, &s);
        if (s.total_bytes > out->total_bytes)
            *out = s;
    }
}
