/*
 * ptplan --emit: the layout ptplan chose (or --layout's) written as another trainer's own
 * configuration, so that the plan can be run where the training already lives:
 * Megatron-LM's pretrain_gpt.py arguments, NeMo 2 recipe overrides, a torchtitan TOML
 * file, or plan.json for ptrun. Each format first checks that its framework can run the
 * layout as planned (parallel sizes, sharding, schedule, rank order, precision, model);
 * what it cannot express is refused with the reason and nothing goes to stdout, and
 * what it runs differently (an overlap) is emitted as it runs it, with a note. stdout
 * holds the configuration alone; the layout, the prediction and the notes go to stderr.
 *
 * Every flag, key and attribute printed here is listed, with the framework's source
 * file and commit, in tests/tools/emit_names/ (megatron.txt, nemo.txt, torchtitan.txt);
 * tests/tools/cli_emit.sh fails on a name missing there, so a new name goes into both.
 */
#include "ptplan.h"
#include "specjson.h"
#include "ptconfig.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- The formats ------------------------------------------------------------------- */

typedef enum { EMIT_MEGATRON, EMIT_NEMO, EMIT_TORCHTITAN, EMIT_PTRUN, EMIT_COUNT } emit_kind;

enum { NOTE_MAX = 8, NOTE_CAP = 480, WHY_CAP = 640, LINE_CAP = 160 };

/* One emission: the job and layout, the refusal (first reason wins) and the notes. */
typedef struct {
    const job *j;
    const pt_candidate *c;  /* the layout and its prediction */
    const pt_layout *l;     /* &c->layout */
    emit_kind kind;
    char why[WHY_CAP];
    int n_notes;
    char notes[NOTE_MAX][NOTE_CAP];
} emitter;

typedef struct {
    const char *name;       /* the --emit value */
    const char *framework;  /* in messages */
    const char *stack;      /* the built-in stack that prices the layout as it runs it */
    const char *also;       /* another one that does, or NULL */
    void (*check)(emitter *e);
    int (*print)(const emitter *e, FILE *f);
} emit_format;

/* The formats, defined at the end of this file, after the functions they name. */
static const emit_format formats[EMIT_COUNT];

int emit_check_kind(const char *kind)
{
    for (int k = 0; k < EMIT_COUNT; k++)
        if (!strcmp(kind, formats[k].name))
            return 0;
    fprintf(stderr, "ptplan: --emit %s: expected megatron, nemo, torchtitan or ptrun\n", kind);
    return -1;
}

static void refuse(emitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void refuse(emitter *e, const char *fmt, ...)
{
    if (e->why[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->why, sizeof e->why, fmt, ap);
    va_end(ap);
}

static void note(emitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(emitter *e, const char *fmt, ...)
{
    if (e->n_notes == NOTE_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->notes[e->n_notes++], NOTE_CAP, fmt, ap);
    va_end(ap);
}

/* ---- What the formats share ---------------------------------------------------------- */

/* A real as Python's float(), argparse and TOML read it back: the fewest digits that
 * give the same double, with a point or an exponent so that it never reads as an int. */
static const char *real(char buf[32], double x)
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, 32, "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    if (!strpbrk(buf, ".eE"))
        strcat(buf, ".0");
    return buf;
}

static int dim_size(const pt_layout *l, pt_dim d)
{
    switch (d) {
    case PT_DIM_TP: return l->tp;
    case PT_DIM_CP: return l->cp;
    case PT_DIM_DP: return l->dp;
    case PT_DIM_PP: return l->pp;
    case PT_NDIM: break;
    }
    return 1;
}

/* Whether the layout's rank order is `want` (fastest first) once the dimensions of size
 * 1, which place no rank, are left out of both. */
static bool order_is(const pt_layout *l, const pt_dim want[PT_NDIM])
{
    pt_dim have[PT_NDIM], need[PT_NDIM];
    int nh = 0, nn = 0;
    for (int i = 0; i < PT_NDIM; i++) {
        if (dim_size(l, l->order[i]) > 1)
            have[nh++] = l->order[i];
        if (dim_size(l, want[i]) > 1)
            need[nn++] = want[i];
    }
    return nh == nn && !memcmp(have, need, (size_t)nh * sizeof *have);
}

static void refuse_order(emitter *e, const char *theirs)
{
    char ours[64];
    pt_order_format(e->l->order, ours, sizeof ours);
    refuse(e, "order=%s: %s; plan with --order tp-cp-dp-pp", ours, theirs);
}

/* Whether the data-parallel gradients go in buckets (ZeRO 0/1 over dp·cp > 1): the
 * layouts whose dp_overlap the planner varies (planner/enum.c). */
static bool dp_buckets(const pt_layout *l)
{
    return l->zero <= 1 && (int64_t)l->dp * l->cp > 1;
}

static void refuse_compress(emitter *e, const char *theirs)
{
    refuse(e, "compress=%s: %s, and compression changes the gradients the optimizer sees; "
              "plan with --compress none",
           pt_compress_name(e->l->compress), theirs);
}

/* ---- Megatron-LM and NeMo (both run Megatron-Core) ------------------------------------ */

/* Megatron-Core's rank orders (core/parallel_state.py: order "tp-cp-ep-dp-pp", and
 * "tp-cp-ep-pp-dp" with use_tp_pp_dp_mapping), fastest first, without ep. */
static const pt_dim megatron_order[PT_NDIM] = {PT_DIM_TP, PT_DIM_CP, PT_DIM_DP, PT_DIM_PP};
static const pt_dim megatron_tp_pp_dp[PT_NDIM] = {PT_DIM_TP, PT_DIM_CP, PT_DIM_PP, PT_DIM_DP};

static void check_megatron_core(emitter *e)
{
    const pt_layout *l = e->l;
    if (e->j->m.pos == PT_POS_ALIBI)
        refuse(e, "model '%s' has ALiBi positions: Megatron-Core has no ALiBi "
                  "(--position-embedding-type offers learned_absolute, rope, yarn, mrope, "
                  "relative and none)", e->j->m.name);
    if (l->compress != PT_COMPRESS_NONE)
        refuse_compress(e, "Megatron-Core has no gradient compression (--grad-reduce-in-bf16 "
                           "accumulates the gradients in bf16 as well)");
    if (l->schedule == PT_SCHED_AFAB && l->pp > 1)
        refuse(e, "schedule=afab with pp=%d: Megatron-Core runs a pipeline 1F1B, interleaved "
                  "with virtual stages (core/pipeline_parallel/schedules.py), and has no "
                  "all-forward-all-backward schedule; plan with schedule=1f1b", l->pp);
    if (!order_is(l, megatron_order) && !order_is(l, megatron_tp_pp_dp))
        refuse_order(e, "Megatron-Core orders ranks tp-cp-dp-pp, or tp-cp-pp-dp with "
                        "--use-tp-pp-dp-mapping");
    if (dp_buckets(l) && l->dp_overlap == PT_DPO_BACKWARD)
        note(e, "dp_overlap=backward: Megatron-Core reduces each bucket once per step, as the "
                "last micro-batch's backward fills it (--overlap-grad-reduce, dp_overlap=last); "
                "emitted as that");
    if (l->param_overlap && l->zero == 1 && l->dp_overlap == PT_DPO_NONE)
        note(e, "param_overlap=1 with dp_overlap=none: Megatron-LM takes --overlap-param-gather "
                "only with --overlap-grad-reduce (training/arguments.py); the parameter "
                "all-gather is emitted unoverlapped");
    /* Transformer Engine's all-to-all hands out whole KV heads and replicates none
     * (context_parallel.py, AttnFuncWithCPAndQKVOA2A: "cp_comm_type='a2a' requires
     * num_heads % cp_size == 0 for Q, K, V"); ptrun replicates them, so the layout rule
     * lets fewer KV heads than the all-to-all degree through. */
    int u = pt_layout_a2a(l);
    int64_t kv_local = pt_kv_heads_rank(&e->j->m, l->tp);
    if (u > 1 && kv_local % u)
        refuse(e, "cp_comm=%s: Transformer Engine's all-to-all needs the KV heads per tp rank "
                  "(%lld) divisible by its degree %d, and replicates none (context_parallel.py: "
                  "\"num_heads %% cp_size == 0 for Q, K, V\"); plan with more tp, a smaller "
                  "all-to-all or cp_comm=p2p", pt_cp_comm_name(l->cp_comm), (long long)kv_local,
               u);
    /* Megatron-Core's sigmoid router always renormalises its top-k scores (core/
     * transformer/moe/moe_utils.py, topk_routing_with_score_function) */
    if (e->j->m.window > 0 || e->j->m.attn_sinks)
        refuse(e, "model '%s' has %s, which this emitter does not write for Megatron-Core "
                  "(its window_size, window_attn_skip_freq and softmax_type)", e->j->m.name,
               e->j->m.window > 0 ? "banded attention" : "attention sinks");
    const pt_moe *x = &e->j->m.moe;
    if (x->experts > 0 && x->score == PT_ROUTER_SIGMOID && !x->renorm && x->top_k > 1)
        refuse(e, "model '%s' routes by sigmoid without renormalising its top-%lld scores: "
                  "Megatron-Core's sigmoid router renormalises them whenever top-k > 1",
               e->j->m.name, (long long)x->top_k);
    const pt_fp8 *f8 = &e->j->t.fp8;
    if (f8->recipe == PT_FP8_ROWWISE)
        refuse(e, "FP8 recipe rowwise: Megatron-Core's --fp8-recipe offers tensorwise, delayed, "
                  "mxfp8, blockwise and custom (core/transformer/transformer_config.py, "
                  "fp8_recipe), no per-row scaling; plan with --fp8-recipe current or delayed");
    if (f8->recipe != PT_FP8_OFF && f8->emulated)
        refuse(e, "emulated FP8: Transformer Engine runs FP8 on devices with FP8 tensor cores "
                  "only (compute capability 8.9 and later)");
}

/* Megatron-Core's name of an FP8 recipe (TransformerConfig.fp8_recipe: per-tensor current
 * scaling is "tensorwise"). */
static const char *megatron_fp8_recipe(pt_fp8_recipe r)
{
    return r == PT_FP8_CURRENT ? "tensorwise" : pt_fp8_recipe_name(r);
}

/* What Megatron-Core's DDP runs for the layout: the overlap of the gradient reduction
 * and of the parameter all-gather (ZeRO 2/3 run as Megatron-FSDP, which overlaps both). */
static bool megatron_grad_overlap(const pt_layout *l)
{
    return l->zero >= 2 || (dp_buckets(l) && l->dp_overlap != PT_DPO_NONE);
}

static bool megatron_param_overlap(const pt_layout *l)
{
    return l->zero == 3 || (l->param_overlap && megatron_grad_overlap(l));
}

/* Megatron-FSDP's --data-parallel-sharding-strategy for ZeRO 2/3 (docs/user-guide/
 * parallelism-guide.md: optim_grads is ZeRO-2, optim_grads_params ZeRO-3). */
static const char *fsdp_strategy(int zero)
{
    return zero == 3 ? "optim_grads_params" : "optim_grads";
}

static bool bf16_grads(const job *j)
{
    return j->t.precision == PT_PREC_BF16_GRAD16 ||
           (j->t.precision == PT_PREC_BF16 && j->t.stack.grad_reduce_dtype == PT_DTYPE_BF16);
}

static double hidden_dropout(const job *j)
{
    return j->m.dropout ? j->run.dropout : 0;
}

/* ---- Megatron-LM: pretrain_gpt.py arguments -------------------------------------------- */

/* Arguments one a line, each but the last followed by " \" (shell continuation). */
typedef struct {
    FILE *f;
    char prev[LINE_CAP];
    bool has;
} argout;

static void arg(argout *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(argout *a, const char *fmt, ...)
{
    if (a->has)
        fprintf(a->f, "%s \\\n", a->prev);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->prev, sizeof a->prev, fmt, ap);
    va_end(ap);
    a->has = true;
}

/* A mixture of experts in TransformerConfig's words (core/transformer/
 * transformer_config.py): the experts, top-k, their FFN size, the router (softmax after
 * the top-k renormalises, --moe-router-pre-softmax does not), the load-balancing loss,
 * a capacity with the drop by position ptrun's kernels use, shared experts as one
 * MLP of their summed size, and which layers are MoE layers as --moe-layer-freq's list
 * pattern (arguments.py, moe_freq_type). TE's grouped GEMM for the experts. */
static void megatron_moe(argout *a, const pt_model *m)
{
    const pt_moe *x = &m->moe;
    char r[32];
    if (x->experts == 0)
        return;
    arg(a, "--num-experts %lld", (long long)x->experts);
    arg(a, "--moe-router-topk %lld", (long long)x->top_k);
    arg(a, "--moe-ffn-hidden-size %lld", (long long)x->expert_ffn);
    arg(a, "--moe-router-score-function %s", x->score == PT_ROUTER_SIGMOID ? "sigmoid" : "softmax");
    if (x->score == PT_ROUTER_SOFTMAX && !x->renorm)
        arg(a, "--moe-router-pre-softmax");
    if (x->aux_loss > 0) {
        arg(a, "--moe-router-load-balancing-type aux_loss");
        arg(a, "--moe-aux-loss-coeff %s", real(r, x->aux_loss));
    } else {
        arg(a, "--moe-router-load-balancing-type none");
    }
    if (x->capacity > 0) {
        arg(a, "--moe-expert-capacity-factor %s", real(r, x->capacity));
        arg(a, "--moe-token-drop-policy position");
    }
    if (x->shared_experts > 0)
        arg(a, "--moe-shared-expert-intermediate-size %lld",
            (long long)(x->shared_experts * x->shared_ffn));
    if (x->first_dense > 0 || x->every > 1) {
        char pattern[LINE_CAP] = "[";
        size_t n = 1;
        for (int64_t i = 0; i < m->layers && n + 4 < sizeof pattern; i++)
            n += (size_t)snprintf(pattern + n, sizeof pattern - n, "%s%d", i ? "," : "",
                                  pt_model_layer_moe(m, i) ? 1 : 0);
        snprintf(pattern + n, sizeof pattern - n, "]");
        arg(a, "--moe-layer-freq \"%s\"", pattern);
    }
    arg(a, "--moe-grouped-gemm");
}

static void megatron_model(argout *a, const job *j)
{
    const pt_model *m = &j->m;
    char r[32];
    arg(a, "--num-layers %lld", (long long)m->layers);
    arg(a, "--hidden-size %lld", (long long)m->hidden);
    arg(a, "--ffn-hidden-size %lld", (long long)m->ffn);
    arg(a, "--num-attention-heads %lld", (long long)m->heads);
    if (m->kv_heads != m->heads) {
        arg(a, "--group-query-attention");
        arg(a, "--num-query-groups %lld", (long long)m->kv_heads);
    }
    arg(a, "--seq-length %lld", (long long)m->seq);
    arg(a, "--max-position-embeddings %lld", (long long)m->seq);
    arg(a, "--position-embedding-type %s", m->pos == PT_POS_ROPE ? "rope" : "learned_absolute");
    arg(a, "--normalization %s", m->norm == PT_NORM_RMSNORM ? "RMSNorm" : "LayerNorm");
    if (m->act == PT_ACT_SWIGLU)
        arg(a, "--swiglu");
    if (!m->bias)
        arg(a, "--disable-bias-linear");
    if (!m->tied_embeddings)
        arg(a, "--untie-embeddings-and-output-weights");
    if (m->head_dim > 0)
        arg(a, "--kv-channels %lld", (long long)m->head_dim);
    if (m->qk_norm)
        arg(a, "--qk-layernorm");
    megatron_moe(a, m);
    /* Megatron pads the tokenizer's vocabulary to a multiple of this times tp */
    arg(a, "--make-vocab-size-divisible-by %lld", (long long)j->t.stack.vocab_multiple);
    arg(a, "--hidden-dropout %s", real(r, hidden_dropout(j)));
    arg(a, "--attention-dropout %s", real(r, 0));
}

static void megatron_parallel(argout *a, const pt_layout *l, const pt_model *m)
{
    arg(a, "--tensor-model-parallel-size %d", l->tp);
    /* the experts' split (etp written always: Megatron-Core's default is tp) and the
     * dispatcher; flex with DeepEP's backend */
    if (m->moe.experts > 0) {
        arg(a, "--expert-model-parallel-size %d", l->ep);
        arg(a, "--expert-tensor-parallel-size %d", l->etp);
        arg(a, "--moe-token-dispatcher-type %s", pt_moe_dispatch_name(l->moe_dispatch));
        if (l->moe_dispatch == PT_MOED_FLEX)
            arg(a, "--moe-flex-dispatcher-backend deepep");
    }
    arg(a, "--pipeline-model-parallel-size %d", l->pp);
    arg(a, "--context-parallel-size %d", l->cp);
    /* TransformerConfig.cp_comm_type's words, p2p (the default) left out; a2a+p2p's
     * group sizes, the all-to-all's first (ModelParallelConfig's
     * hierarchical_context_parallel_sizes; training/arguments.py asserts them with
     * a2a+p2p) */
    if (l->cp > 1 && l->cp_comm != PT_CPC_P2P)
        arg(a, "--cp-comm-type %s", pt_cp_comm_name(l->cp_comm));
    if (l->cp > 1 && l->cp_comm == PT_CPC_A2A_P2P)
        arg(a, "--hierarchical-context-parallel-sizes %d %d", l->cp_a2a, l->cp / l->cp_a2a);
    /* a pipeline layout gives vp itself, and arguments.py refuses both; otherwise the
     * option that also takes uneven stages (training/arguments.py) */
    if (l->pipe.n) {
        char pipe[PT_PIPE_TEXT_MAX];
        pt_pipe_format(&l->pipe, pipe, sizeof pipe);
        arg(a, "--pipeline-model-parallel-layout \"%s\"", pipe);
    } else if (l->vp > 1) {
        arg(a, "--num-virtual-stages-per-pipeline-rank %d", l->vp);
    }
    if (l->first_layers)
        arg(a, "--decoder-first-pipeline-num-layers %lld", (long long)l->first_layers);
    if (l->last_layers)
        arg(a, "--decoder-last-pipeline-num-layers %lld", (long long)l->last_layers);
    if (!order_is(l, megatron_order))
        arg(a, "--use-tp-pp-dp-mapping");
    if (l->sp)
        arg(a, "--sequence-parallel");
    if (l->tp_overlap)
        arg(a, "--tp-comm-overlap");
}

static void megatron_data_parallel(argout *a, const pt_layout *l)
{
    if (l->zero >= 1)
        arg(a, "--use-distributed-optimizer");
    if (l->zero >= 2) {
        arg(a, "--use-megatron-fsdp");
        arg(a, "--data-parallel-sharding-strategy %s", fsdp_strategy(l->zero));
        arg(a, "--ckpt-format fsdp_dtensor");
    }
    if (megatron_grad_overlap(l))
        arg(a, "--overlap-grad-reduce");
    if (megatron_param_overlap(l))
        arg(a, "--overlap-param-gather");
}

/* The layout's recompute modules (pt_layout_recompute_text) joined by `sep`, in buf. */
static const char *recompute_list(const pt_layout *l, char sep, char *buf, size_t n)
{
    pt_layout_recompute_text(l, buf, n);
    for (char *c = buf; *c; c++)
        if (*c == '+')
            *c = sep;
    return buf;
}

static void megatron_recompute(argout *a, const pt_layout *l)
{
    pt_recompute r = l->recompute;
    if (r == PT_RECOMPUTE_SELECTIVE) { /* recompute_modules' default: core_attn */
        arg(a, "--recompute-granularity selective");
        if (l->recompute_modules) /* the layout's list, space-separated */
            arg(a, "--recompute-modules %s", recompute_list(l, ' ', (char[64]){0}, 64));
    } else if (r == PT_RECOMPUTE_FULL) { /* every layer, from its input */
        arg(a, "--recompute-granularity full");
        arg(a, "--recompute-method uniform");
        arg(a, "--recompute-num-layers 1");
    }
}

static void megatron_training(argout *a, const job *j, const pt_layout *l)
{
    char r[32];
    arg(a, "--micro-batch-size %lld", (long long)l->mbs);
    arg(a, "--global-batch-size %lld", (long long)j->t.global_batch);
    if (j->t.precision != PT_PREC_FP32)
        arg(a, "--bf16");
    if (pt_train_fp8(&j->t)) { /* hybrid: E4M3 forward, E5M2 gradients */
        arg(a, "--fp8-format hybrid");
        arg(a, "--fp8-recipe %s", megatron_fp8_recipe(j->t.fp8.recipe));
        if (j->t.fp8.recipe == PT_FP8_DELAYED) { /* Megatron's defaults are 1, most_recent */
            arg(a, "--fp8-amax-history-len %d", j->t.fp8.history);
            arg(a, "--fp8-amax-compute-algo max");
        }
        /* megatron/training/arguments.py: "Keep the compute param in fp8 ... and perform
         * the param all-gather in fp8" */
        if (j->t.fp8.param_gather)
            arg(a, "--fp8-param-gather");
    }
    if (bf16_grads(j))
        arg(a, "--grad-reduce-in-bf16");
    arg(a, "--train-iters %lld", (long long)j->run.steps);
    arg(a, "--lr %s", real(r, j->run.lr));
    arg(a, "--min-lr %s", real(r, j->run.min_lr));
    arg(a, "--lr-decay-style cosine");
    arg(a, "--lr-warmup-iters %lld", (long long)j->run.warmup_steps);
    arg(a, "--weight-decay %s", real(r, j->run.weight_decay));
    arg(a, "--clip-grad %s", real(r, j->run.grad_clip));
    arg(a, "--seed %llu", (unsigned long long)j->run.seed);
}

static int print_megatron(const emitter *e, FILE *f)
{
    argout a = {.f = f};
    megatron_model(&a, e->j);
    megatron_parallel(&a, e->l, &e->j->m);
    megatron_data_parallel(&a, e->l);
    megatron_recompute(&a, e->l);
    megatron_training(&a, e->j, e->l);
    fprintf(f, "%s\n", a.prev);
    return 0;
}

/* ---- NeMo 2: NeMo-Run overrides of a recipe ------------------------------------------- */

/* The recipe (nemo/collections/llm/recipes/) of a built-in model, or NULL. */
static const char *nemo_recipe_of(const pt_model *m)
{
    static const char *const table[][2] = {
        {"llama2-7b", "llama2_7b"},   {"llama3-8b", "llama3_8b"},
        {"llama3-70b", "llama3_70b"}, {"llama3-405b", "llama31_405b"},
        {"gpt3-175b", "gpt3_175b"},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(m->name, table[i][0]))
            return table[i][1];
    return NULL;
}

static void check_nemo(emitter *e)
{
    check_megatron_core(e);
    if (e->j->m.moe.experts > 0)
        refuse(e, "model '%s' is a mixture of experts, whose NeMo recipes this emitter does "
                  "not write; emit for Megatron-LM (--emit megatron)", e->j->m.name);
    if (e->l->cp > 1 && e->l->cp_comm == PT_CPC_A2A_P2P)
        refuse(e, "cp_comm=a2a+p2p: NeMo builds Megatron-Core's process groups without the "
                  "hierarchical context-parallel groups it needs (nemo/lightning/"
                  "_strategy_lib.py, init_model_parallel, passes no "
                  "hierarchical_context_parallel_sizes); plan with cp_comm=a2a or p2p, or "
                  "emit for Megatron-LM");
    if (e->j->t.precision == PT_PREC_FP32)
        refuse(e, "precision %s: NeMo's recipes train in bf16-mixed (recipes/precision/"
                  "mixed_precision.py offers bf16_mixed and fp16_mixed), and the plugin's "
                  "params_dtype, a torch dtype, is no override; plan with --precision %s",
               pt_prec_name(PT_PREC_FP32), pt_prec_name(PT_PREC_BF16));
    if (e->l->tp_overlap)
        note(e, "tp_overlap=1: NeMo turns it on with MegatronCommOverlapCallback("
                "tp_comm_overlap=True) in trainer.callbacks, which no override adds (a "
                "recipe's performance_mode=True adds it)");
    const pt_model *m = &e->j->m;
    const char *recipe = nemo_recipe_of(m);
    if (recipe)
        note(e, "run with: nemo llm pretrain --factory %s <these overrides>", recipe);
    else
        note(e, "run with: nemo llm pretrain --factory %s <these overrides> (a recipe of the "
                "same %s architecture; the overrides set the shape of model '%s')",
             m->act == PT_ACT_SWIGLU ? "llama3_8b" : "gpt3_175b",
             m->act == PT_ACT_SWIGLU ? "SwiGLU" : "GELU", m->name);
}

static const char *py_bool(bool b) { return b ? "True" : "False"; }

static void nemo_strategy(FILE *f, const pt_layout *l)
{
    const char *s = "trainer.strategy";
    fprintf(f, "%s.tensor_model_parallel_size=%d\n", s, l->tp);
    fprintf(f, "%s.pipeline_model_parallel_size=%d\n", s, l->pp);
    if (l->vp > 1)
        fprintf(f, "%s.virtual_pipeline_model_parallel_size=%d\n", s, l->vp);
    else
        fprintf(f, "%s.virtual_pipeline_model_parallel_size=None\n", s);
    fprintf(f, "%s.context_parallel_size=%d\n", s, l->cp);
    fprintf(f, "%s.sequence_parallel=%s\n", s, py_bool(l->sp));
    if (l->first_layers)
        fprintf(f, "%s.num_layers_in_first_pipeline_stage=%lld\n", s, (long long)l->first_layers);
    if (l->last_layers)
        fprintf(f, "%s.num_layers_in_last_pipeline_stage=%lld\n", s, (long long)l->last_layers);
    if (l->pipe.n) {
        char pipe[PT_PIPE_TEXT_MAX];
        pt_pipe_format(&l->pipe, pipe, sizeof pipe);
        fprintf(f, "%s.pipeline_model_parallel_layout=\"%s\"\n", s, pipe);
    }
    fprintf(f, "%s.use_tp_pp_dp_mapping=%s\n", s, py_bool(!order_is(l, megatron_order)));
    if (l->zero >= 2) {
        fprintf(f, "%s.fsdp=megatron\n", s);
        fprintf(f, "%s.save_ckpt_format=fsdp_dtensor\n", s);
        fprintf(f, "%s.ddp.data_parallel_sharding_strategy=%s\n", s, fsdp_strategy(l->zero));
    }
}

static void nemo_precision(FILE *f, const job *j, const pt_layout *l)
{
    bool fp32_grads = !bf16_grads(j);
    fprintf(f, "trainer.strategy.ddp.overlap_grad_reduce=%s\n", py_bool(megatron_grad_overlap(l)));
    fprintf(f, "trainer.strategy.ddp.overlap_param_gather=%s\n",
            py_bool(megatron_param_overlap(l)));
    fprintf(f, "trainer.strategy.ddp.grad_reduce_in_fp32=%s\n", py_bool(fp32_grads));
    fprintf(f, "trainer.plugins.precision=bf16-mixed\n");
    fprintf(f, "trainer.plugins.grad_reduce_in_fp32=%s\n", py_bool(fp32_grads));
    const pt_fp8 *f8 = &j->t.fp8;
    if (f8->recipe == PT_FP8_OFF)
        return;
    /* MegatronMixedPrecision's fp8 arguments, passed on to Megatron-Core's
     * TransformerConfig (nemo/lightning/pytorch/plugins/mixed_precision.py) */
    fprintf(f, "trainer.plugins.fp8=hybrid\n");
    fprintf(f, "trainer.plugins.fp8_recipe=%s\n", megatron_fp8_recipe(f8->recipe));
    if (f8->recipe == PT_FP8_DELAYED) {
        fprintf(f, "trainer.plugins.fp8_amax_history_len=%d\n", f8->history);
        fprintf(f, "trainer.plugins.fp8_amax_compute_algo=max\n");
    }
    if (f8->param_gather) /* MegatronMixedPrecision(fp8_param_gather=...) */
        fprintf(f, "trainer.plugins.fp8_param_gather=true\n");
}

static void nemo_optim(FILE *f, const job *j, const pt_layout *l)
{
    char r[32];
    fprintf(f, "optim.config.bf16=True\n");
    fprintf(f, "optim.config.use_distributed_optimizer=%s\n", py_bool(l->zero >= 1));
    fprintf(f, "optim.config.lr=%s\n", real(r, j->run.lr));
    fprintf(f, "optim.config.weight_decay=%s\n", real(r, j->run.weight_decay));
    fprintf(f, "optim.config.clip_grad=%s\n", real(r, j->run.grad_clip));
    fprintf(f, "optim.lr_scheduler.max_steps=%lld\n", (long long)j->run.steps);
    fprintf(f, "optim.lr_scheduler.warmup_steps=%lld\n", (long long)j->run.warmup_steps);
    fprintf(f, "optim.lr_scheduler.min_lr=%s\n", real(r, j->run.min_lr));
}

static void nemo_model(FILE *f, const job *j)
{
    const pt_model *m = &j->m;
    const char *c = "model.config";
    char r[32];
    fprintf(f, "%s.num_layers=%lld\n", c, (long long)m->layers);
    fprintf(f, "%s.hidden_size=%lld\n", c, (long long)m->hidden);
    fprintf(f, "%s.ffn_hidden_size=%lld\n", c, (long long)m->ffn);
    fprintf(f, "%s.num_attention_heads=%lld\n", c, (long long)m->heads);
    fprintf(f, "%s.num_query_groups=%lld\n", c, (long long)m->kv_heads);
    fprintf(f, "%s.seq_length=%lld\n", c, (long long)m->seq);
    fprintf(f, "%s.normalization=%s\n", c, m->norm == PT_NORM_RMSNORM ? "RMSNorm" : "LayerNorm");
    fprintf(f, "%s.gated_linear_unit=%s\n", c, py_bool(m->act == PT_ACT_SWIGLU));
    fprintf(f, "%s.position_embedding_type=%s\n", c,
            m->pos == PT_POS_ROPE ? "rope" : "learned_absolute");
    fprintf(f, "%s.add_bias_linear=%s\n", c, py_bool(m->bias));
    fprintf(f, "%s.share_embeddings_and_output_weights=%s\n", c, py_bool(m->tied_embeddings));
    fprintf(f, "%s.make_vocab_size_divisible_by=%lld\n", c, (long long)j->t.stack.vocab_multiple);
    fprintf(f, "%s.hidden_dropout=%s\n", c, real(r, hidden_dropout(j)));
    fprintf(f, "%s.attention_dropout=%s\n", c, real(r, 0));
}

/* TransformerConfig.cp_comm_type, p2p (its default with cp) left out. */
static void nemo_cp_comm(FILE *f, const pt_layout *l)
{
    if (l->cp > 1 && l->cp_comm != PT_CPC_P2P)
        fprintf(f, "model.config.cp_comm_type=%s\n", pt_cp_comm_name(l->cp_comm));
}

static void nemo_recompute(FILE *f, const pt_layout *l)
{
    static const char *const gran[PT_RECOMPUTE_COUNT] = {"None", "selective", "full"};
    pt_recompute r = l->recompute;
    fprintf(f, "model.config.recompute_granularity=%s\n", gran[r]);
    if (r == PT_RECOMPUTE_SELECTIVE && l->recompute_modules)
        fprintf(f, "model.config.recompute_modules=[%s]\n",
                recompute_list(l, ',', (char[64]){0}, 64));
    fprintf(f, "model.config.recompute_method=%s\n", r == PT_RECOMPUTE_FULL ? "uniform" : "None");
    fprintf(f, "model.config.recompute_num_layers=%s\n", r == PT_RECOMPUTE_FULL ? "1" : "None");
}

static int print_nemo(const emitter *e, FILE *f)
{
    const job *j = e->j;
    fprintf(f, "trainer.num_nodes=%d\n", j->c.nodes);
    fprintf(f, "trainer.devices=%d\n", j->c.devices_per_node);
    fprintf(f, "trainer.max_steps=%lld\n", (long long)j->run.steps);
    nemo_strategy(f, e->l);
    nemo_precision(f, j, e->l);
    nemo_optim(f, j, e->l);
    fprintf(f, "data.seq_length=%lld\n", (long long)j->m.seq);
    fprintf(f, "data.micro_batch_size=%lld\n", (long long)e->l->mbs);
    fprintf(f, "data.global_batch_size=%lld\n", (long long)j->t.global_batch);
    nemo_model(f, j);
    nemo_cp_comm(f, e->l);
    nemo_recompute(f, e->l);
    return 0;
}

/* ---- torchtitan: a TOML job file (v0.2.2, the last release that reads one) ------------- */

/* torchtitan's mesh, fastest first: tp, cp, dp_shard, dp_replicate, pp
 * (distributed/parallel_dims.py) — ours with dp in the place of both dp dimensions. */
static const pt_dim titan_order[PT_NDIM] = {PT_DIM_TP, PT_DIM_CP, PT_DIM_DP, PT_DIM_PP};

/* The llama3 flavors of torchtitan/models/llama3/__init__.py by their shape (the FFN as
 * its ffn_dim_multiplier and multiple_of make it). */
static const char *titan_flavor(const pt_model *m)
{
    static const struct {
        const char *flavor;
        int64_t layers, hidden, heads, kv_heads, ffn;
    } table[] = {
        {"8B", 32, 4096, 32, 8, 14336},
        {"70B", 80, 8192, 64, 8, 28672},
        {"405B", 126, 16384, 128, 8, 53248},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (m->layers == table[i].layers && m->hidden == table[i].hidden &&
            m->heads == table[i].heads && m->kv_heads == table[i].kv_heads &&
            m->ffn == table[i].ffn)
            return table[i].flavor;
    return NULL;
}

/* torchtitan trains its llama3: RMSNorm, SwiGLU, RoPE, no biases, an untied output, no
 * dropout. */
static void check_titan_model(emitter *e)
{
    const pt_model *m = &e->j->m;
    char differs[256] = "";
    size_t n = 0;
    if (m->moe.experts > 0)
        n += (size_t)snprintf(differs + n, sizeof differs - n, ", experts");
    if (m->qk_norm || m->head_dim > 0)
        n += (size_t)snprintf(differs + n, sizeof differs - n, ", %s",
                              m->qk_norm ? "q/k norms" : "a head_dim other than hidden/heads");
    if (m->norm != PT_NORM_RMSNORM)
        n += (size_t)snprintf(differs + n, sizeof differs - n, ", LayerNorm");
    if (m->act != PT_ACT_SWIGLU)
        n += (size_t)snprintf(differs + n, sizeof differs - n, ", GELU");
    if (m->pos != PT_POS_ROPE)
        n += (size_t)snprintf(differs + n, sizeof differs - n, ", %s positions",
                              m->pos == PT_POS_ALIBI ? "ALiBi" : "learned");
    if (m->bias)
        n += (size_t)snprintf(differs + n, sizeof differs - n, ", biases");
    if (m->tied_embeddings)
        n += (size_t)snprintf(differs + n, sizeof differs - n, ", a tied head");
    if (hidden_dropout(e->j) > 0)
        snprintf(differs + n, sizeof differs - n, ", dropout");
    if (differs[0])
        refuse(e, "model '%s' has %s: torchtitan trains its llama3 (models/llama3), with "
                  "RMSNorm, SwiGLU, RoPE, no biases, an untied output and no dropout",
               m->name, differs + 2);
    else if (!titan_flavor(m))
        note(e, "model '%s' matches no llama3 flavor of torchtitan (8B, 70B, 405B): add one "
                "of its shape to llama3_args (models/llama3/__init__.py) and name it in "
                "[model] flavor", m->name);
    if (e->l->recompute == PT_RECOMPUTE_SELECTIVE && e->l->recompute_modules) {
        char rec[64];
        pt_layout_recompute_text(e->l, rec, sizeof rec);
        refuse(e, "recompute=%s: a list of modules is Megatron-Core's --recompute-modules; "
                  "torchtitan's activation checkpointing is none, selective (per op or per "
                  "layer) or full", rec);
    }
}

static void check_titan_sharding(emitter *e)
{
    const pt_layout *l = e->l;
    if (l->zero == 1)
        refuse(e, "zero=1: torchtitan shards with FSDP2 (fully_shard): parameters, gradients "
                  "and optimizer states (zero=3), or with the parameters kept gathered from "
                  "the forward to the backward (zero=2); it has no optimizer-only sharding; plan "
                  "with zero=2 or 3");
    if (l->zero == 0 && l->cp > 1)
        refuse(e, "zero=0 with cp=%d: torchtitan shards the parameters over the context-"
                  "parallel ranks (FSDP over dp_shard x cp, models/llama3/infra/parallelize.py); "
                  "plan with zero=3", l->cp);
    if (l->zero == 0 && l->dp > 1 && (l->tp > 1 || l->pp > 1))
        refuse(e, "zero=0 with dp=%d and tp=%d, pp=%d: torchtitan's DDP runs alone (\"DDP has "
                  "not supported > 1D parallelism\", models/llama3/infra/parallelize.py); plan "
                  "with zero=3, or with dp=1", l->dp, l->tp, l->pp);
    if (l->zero == 0 && l->dp > 1 && l->n_micro > 1 && l->dp_overlap != PT_DPO_BACKWARD)
        note(e, "dp_overlap=%s: torchtitan's DDP reduces the gradients of every micro-batch "
                "(its accumulation loop has no no_sync), which dp_overlap=backward prices "
                "(--stack fsdp)", pt_dp_overlap_name(l->dp_overlap));
}

static void check_torchtitan(emitter *e)
{
    const pt_layout *l = e->l;
    check_titan_model(e);
    check_titan_sharding(e);
    if (l->tp > 1 && !l->sp)
        refuse(e, "sp=0 with tp=%d: torchtitan's tensor parallelism always runs the norms "
                  "sequence-parallel (SequenceParallel in apply_tp); plan with sp=1", l->tp);
    if (e->j->t.precision == PT_PREC_BF16_GRAD16)
        refuse(e, "precision %s: torchtitan reduces gradients in float32 only "
                  "(training.mixed_precision_reduce); plan with --precision %s",
               pt_prec_name(PT_PREC_BF16_GRAD16), pt_prec_name(PT_PREC_BF16));
    if (l->compress != PT_COMPRESS_NONE)
        refuse_compress(e, "torchtitan has no gradient compression");
    if (l->cp > 1 && l->cp_comm != PT_CPC_P2P)
        refuse(e, "cp_comm=%s: torchtitan's context parallelism is ring attention "
                  "(PyTorch's context_parallel; context_parallel_rotate_method only says how "
                  "the K/V blocks rotate), with no all-to-all over heads; plan with "
                  "cp_comm=p2p", pt_cp_comm_name(l->cp_comm));
    if (!order_is(l, titan_order))
        refuse_order(e, "torchtitan's device mesh orders ranks tp-cp-dp-pp "
                        "(distributed/parallel_dims.py)");
    const pt_fp8 *f8 = &e->j->t.fp8;
    if (f8->recipe == PT_FP8_DELAYED || f8->recipe == PT_FP8_BLOCKWISE)
        refuse(e, "FP8 recipe %s: torchtitan's float8 converter offers tensorwise and rowwise "
                  "(config/job_config.py, Float8Linear.recipe_name); plan with --fp8-recipe "
                  "current or rowwise", pt_fp8_recipe_name(f8->recipe));
    if (f8->recipe != PT_FP8_OFF && f8->emulated)
        refuse(e, "emulated FP8: ptplan emulates FP8 for ptrun's CPU backend; torchtitan "
                  "trains on GPUs");
    if (l->tp_overlap)
        note(e, "tp_overlap=1 is torchtitan's async TP, which runs under torch.compile: "
                "[compile] enable = true is set, and the prediction prices no compilation");
}

static void titan_model(FILE *f, const job *j)
{
    const char *flavor = titan_flavor(&j->m);
    fprintf(f, "[model]\nname = \"llama3\"\n");
    if (flavor)
        fprintf(f, "flavor = \"%s\"\n", flavor);
    if (pt_train_fp8(&j->t)) /* torchao's Float8Linear in place of nn.Linear */
        fprintf(f, "converters = [\"quantize.linear.float8\"]\n");
}

/* The float8 converter's recipe (Float8Linear.recipe_name: tensorwise, rowwise), with the
 * output layer left in bf16 as ptplan plans it (filter_fqns). */
static void titan_float8(FILE *f, const job *j)
{
    if (!pt_train_fp8(&j->t))
        return;
    fprintf(f, "\n[quantize.linear.float8]\n");
    fprintf(f, "recipe_name = \"%s\"\n",
            j->t.fp8.recipe == PT_FP8_ROWWISE ? "rowwise" : "tensorwise");
    fprintf(f, "filter_fqns = [\"output\"]\n");
}

static void titan_training(FILE *f, const job *j, const pt_layout *l)
{
    char r[32];
    /* with a pipeline, local_batch_size / pipeline_parallel_microbatch_size micro-batches
     * go through it per step; without, global / (local x dp) are accumulated (train.py) */
    int64_t local = l->pp > 1 ? l->mbs * l->n_micro : l->mbs;
    fprintf(f, "\n[training]\n");
    fprintf(f, "local_batch_size = %lld\n", (long long)local);
    fprintf(f, "global_batch_size = %lld\n", (long long)j->t.global_batch);
    fprintf(f, "seq_len = %lld\n", (long long)j->m.seq);
    fprintf(f, "steps = %lld\n", (long long)j->run.steps);
    fprintf(f, "max_norm = %s\n", real(r, j->run.grad_clip));
    fprintf(f, "mixed_precision_param = \"%s\"\n",
            j->t.precision == PT_PREC_FP32 ? "float32" : "bfloat16");
    fprintf(f, "mixed_precision_reduce = \"float32\"\n");
}

/* The module names of torchtitan's llama3 (models/llama3/model/model.py) on each virtual
 * stage, in the order its looped schedules give stage s to pipeline rank s mod p. */
static void titan_stage_modules(FILE *f, const job *j, const pt_layout *l)
{
    int stages = l->pp * l->vp;
    fprintf(f, "module_fqns_per_model_part = [");
    for (int vs = 0; vs < stages; vs++) {
        int64_t first, n = pt_stage_layers(&j->m, l, vs, &first);
        fprintf(f, "%s[", vs ? ", " : "");
        const char *sep = "";
        if (vs == 0) {
            fprintf(f, "\"tok_embeddings\"");
            sep = ", ";
        }
        for (int64_t i = first; i < first + n; i++, sep = ", ")
            fprintf(f, "%s\"layers.%lld\"", sep, (long long)i);
        if (vs == stages - 1)
            fprintf(f, "%s\"norm\", \"output\"", sep);
        fprintf(f, "]");
    }
    fprintf(f, "]\n");
}

static void titan_pipeline(FILE *f, const job *j, const pt_layout *l)
{
    static const char *const schedule[PT_SCHED_COUNT] = {"GPipe", "1F1B", "Interleaved1F1B"};
    fprintf(f, "pipeline_parallel_degree = %d\n", l->pp);
    if (l->pp == 1)
        return;
    fprintf(f, "pipeline_parallel_schedule = \"%s\"\n", schedule[l->schedule]);
    fprintf(f, "pipeline_parallel_microbatch_size = %lld\n", (long long)l->mbs);
    if (l->first_layers || l->last_layers || l->pipe.n) {
        titan_stage_modules(f, j, l);
        return;
    }
    /* the even split: no layer less on the ends for the embedding and the output */
    fprintf(f, "pipeline_parallel_layers_per_stage = %lld\n",
            (long long)(j->m.layers / ((int64_t)l->pp * l->vp)));
    fprintf(f, "pipeline_parallel_first_stage_less_layers = 0\n");
    fprintf(f, "pipeline_parallel_last_stage_less_layers = 0\n");
}

static void titan_parallelism(FILE *f, const job *j, const pt_layout *l)
{
    bool sharded = l->zero >= 2;
    fprintf(f, "\n[parallelism]\n");
    fprintf(f, "data_parallel_replicate_degree = %d\n", sharded ? 1 : l->dp);
    fprintf(f, "data_parallel_shard_degree = %d\n", sharded ? l->dp : 1);
    if (sharded) /* ZeRO-3 reshards after the forward; ZeRO-2 keeps the gathered weights */
        fprintf(f, "fsdp_reshard_after_forward = \"%s\"\n", l->zero == 3 ? "always" : "never");
    fprintf(f, "tensor_parallel_degree = %d\n", l->tp);
    fprintf(f, "enable_async_tensor_parallel = %s\n", l->tp_overlap ? "true" : "false");
    fprintf(f, "context_parallel_degree = %d\n", l->cp);
    titan_pipeline(f, j, l);
}

static void titan_recompute(FILE *f, const pt_layout *l)
{
    static const char *const mode[PT_RECOMPUTE_COUNT] = {"none", "selective", "full"};
    fprintf(f, "\n[activation_checkpoint]\nmode = \"%s\"\n", mode[l->recompute]);
    if (l->recompute == PT_RECOMPUTE_SELECTIVE) /* per-op, as stack fsdp prices it */
        fprintf(f, "selective_ac_option = \"op\"\n");
    if (l->tp_overlap) /* async TP needs the compiled model (tensor_parallel.py) */
        fprintf(f, "\n[compile]\nenable = true\n");
}

static void titan_optim(FILE *f, const job *j)
{
    char r[32];
    fprintf(f, "\n[optimizer]\n");
    fprintf(f, "lr = %s\n", real(r, j->run.lr));
    fprintf(f, "weight_decay = %s\n", real(r, j->run.weight_decay));
    fprintf(f, "\n[lr_scheduler]\n");
    fprintf(f, "warmup_steps = %lld\n", (long long)j->run.warmup_steps);
    fprintf(f, "decay_type = \"cosine\"\n");
    fprintf(f, "min_lr_factor = %s\n", real(r, j->run.lr > 0 ? j->run.min_lr / j->run.lr : 0));
    fprintf(f, "\n[debug]\nseed = %llu\n", (unsigned long long)j->run.seed);
}

static int print_torchtitan(const emitter *e, FILE *f)
{
    titan_model(f, e->j);
    titan_training(f, e->j, e->l);
    titan_parallelism(f, e->j, e->l);
    titan_recompute(f, e->l);
    titan_float8(f, e->j);
    titan_optim(f, e->j);
    return 0;
}

/* ---- ptrun: plan.json ----------------------------------------------------------------- */

static void check_ptrun(emitter *e) { (void)e; }

/* The plan as --out writes it: the fields must match write_plan in ptplan_rank.c. */
static int print_ptrun(const emitter *e, FILE *f)
{
    const job *j = e->j;
    const pt_candidate *c = e->c;
    pt_plan p = {.format_version = PT_PLAN_FORMAT_VERSION, .model = j->m, .cluster = j->c,
                 .layout = c->layout, .train = j->t, .run = j->run, .memory = c->memory,
                 .predicted = c->predicted};
    snprintf(p.created_by, sizeof p.created_by, "ptplan %s", PT_VERSION);
    pt_costdb_identity(j->db, &p.costs);
    json_t *root = pt_plan_json(&p);
    char *text = root ? pt_json_dump(root) : NULL;
    json_decref(root);
    if (!text)
        return pt_tool_fail("%s", "--emit ptrun: out of memory writing the plan");
    fputs(text, f);
    free(text);
    return 0;
}

static const emit_format formats[EMIT_COUNT] = {
    {"megatron", "Megatron-LM", "megatron-core", "megatron-lm", check_megatron_core,
     print_megatron},
    {"nemo", "NeMo", "megatron-core", "megatron-lm", check_nemo, print_nemo},
    {"torchtitan", "torchtitan", "fsdp", NULL, check_torchtitan, print_torchtitan},
    {"ptrun", "ptrun", "ptrun", NULL, check_ptrun, print_ptrun},
};

/* ---- Emitting ------------------------------------------------------------------------ */

static emit_kind kind_of(const char *name)
{
    for (int k = 0; k < EMIT_COUNT; k++)
        if (!strcmp(name, formats[k].name))
            return (emit_kind)k;
    return EMIT_COUNT;
}

/* That the prediction is for another framework's stack, and which built-in stack prices
 * the layout as this framework runs it, or why that stack cannot. */
static void print_stack_note(const emitter *e)
{
    const emit_format *fm = &formats[e->kind];
    pt_stack s;
    pt_err err;
    fprintf(stderr, "ptplan: --emit %s: note: the prediction is for stack %s; ", fm->name,
            e->j->t.stack.name);
    if (pt_stack_get(fm->stack, &s, &err) == 0 && pt_stack_check_layout(&s, e->l, &err) == 0)
        fprintf(stderr, "--stack %s prices the layout as %s runs it\n", fm->stack,
                fm->framework);
    else
        fprintf(stderr, "stack %s, the nearest to %s, would not run it (%s)\n", fm->stack,
                fm->framework, err.msg);
}

/* The layout and its prediction, the stack it was priced for and the notes, on stderr. */
static void print_summary(const emitter *e)
{
    const pt_candidate *c = e->c;
    const emit_format *fm = &formats[e->kind];
    const char *stack = e->j->t.stack.name;
    char text[1024], mfu[32] = "unknown";
    pt_layout_format(e->l, text, sizeof text);
    if (c->predicted.mfu > 0)
        snprintf(mfu, sizeof mfu, "%.1f%%", 100 * c->predicted.mfu);
    fprintf(stderr, "ptplan: --emit %s: layout %s, predicted %.4g s per step, MFU %s "
                    "(stack %s)\n",
            fm->name, text, c->predicted.step_time_s, mfu, stack);
    if (strcmp(stack, fm->stack) && (!fm->also || strcmp(stack, fm->also)))
        print_stack_note(e);
    for (int i = 0; i < e->n_notes; i++)
        fprintf(stderr, "ptplan: --emit %s: note: %s\n", fm->name, e->notes[i]);
}

int emit_plan(const options *o, const job *j, const pt_candidate *c)
{
    emitter e = {.j = j, .c = c, .l = &c->layout, .kind = kind_of(o->emit)};
    if (e.kind == EMIT_COUNT) {
        emit_check_kind(o->emit);
        return EXIT_BAD_INPUT;
    }
    const emit_format *fm = &formats[e.kind];
    fm->check(&e);
    if (e.why[0]) {
        fflush(stdout);
        fprintf(stderr, "ptplan: --emit %s: %s\n", fm->name, e.why);
        return EXIT_REJECTED;
    }
    int rc = fm->print(&e, stdout);
    if (rc)
        return rc;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ptplan: --emit %s: cannot write the configuration to stdout: %s\n",
                fm->name, strerror(errno));
        return EXIT_BAD_INPUT;
    }
    print_summary(&e);
    return 0;
}
