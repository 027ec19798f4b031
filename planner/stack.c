/*
 * Software stacks: how a training framework executes a step. The same layout costs
 * different time under Megatron-LM of 2021-22 (unfused attention, gradients reduced
 * after the backward), Megatron-Core with Transformer Engine (flash attention, TP
 * communication overlap, overlapped bucketed reduction and parameter gathers), PyTorch
 * FSDP (per-layer gathers prefetched one layer ahead) and ptrun itself. This file owns
 * the built-ins, the JSON form and its checks; ops.c and sim.c price by it.
 *
 * JSON format (every field required, unknown fields refused; every problem of a file
 * is reported, not only the first; integers may be written as reals, 65536.0):
 *   {
 *     "name": "my-stack",                       at most 63 bytes
 *     "about": "what software, which version",  at most 255 bytes
 *     "attention": {
 *       "impl": "flash",                        ptrun | unfused | flash
 *       "efficiency": [                         flash: share of dense peak, first
 *         {"device": "H100", "fwd": 0.6, "bwd": 0.45},   matching device-name prefix
 *         {"device": "*", "fwd": 0.5, "bwd": 0.4}        wins ("*" matches any); at
 *       ]                                       most 8 entries, values in (0, 1]
 *     },
 *     "parallelism": {"tp": true, "pp": true, "cp": true, "sp": true,
 *                     "zero": [0, 1],           ZeRO stages offered
 *                     "cp_comm": ["p2p", "a2a"],   optional (default ["p2p"]): how cp
 *                                               may communicate (p2p, all_gather, a2a,
 *                                               a2a+p2p: the layout key cp_comm)
 *                     "cp_a2a_kv_replicate": false,   optional (default false): KV heads
 *                                               fewer than the all-to-all's degree are
 *                                               replicated (else they must divide by it)
 *                     "moe_dispatch": ["alltoall"],   optional (default: none, no mixture
 *                                               of experts): how tokens may reach the
 *                                               experts (alltoall, allgather, flex: the
 *                                               layout key moe_dispatch)
 *                     "recompute_modules": ["moe"]},  optional (default: none): modules a
 *                                               layout's recompute list may name
 *                                               (core_attn, layernorm, mlp, moe_act, moe)
 *     "overlap": {
 *       "tp": true,                             TP communication beside the GEMMs
 *       "tp_reduce_scatter": true,              ... the reduce-scatters too
 *       "tp_reach": 0.9,                        share of it hidden, [0, 1]
 *       "tp_backward_async": true,              optional (default false): without
 *                                               "tp" too, the column-parallel backward's
 *                                               gather and reduce-scatter beside its GEMMs
 *       "dp": ["none", "last"],                 dp_overlap values offered
 *       "dp_default": "last",
 *       "param_gather": true,                   ZeRO 1/2 gather beside the next forward
 *       "zero3_prefetch": 1,                    layers gathered ahead, 0..8
 *       "compute_slowdown": 0.05,               compute slower while NCCL shares SMs, [0, 1)
 *       "p2p": "overlapped"                     optional: overlapped | blocking | interleaved
 *     },
 *     "gradients": {"bucket_rule": "fixed", "bucket_bytes": 26214400,  0: --bucket-mib
 *                   "reduce_dtype": "fp32",      fp32 | bf16
 *                   "compression": false},       optional: runs compress=bf16|powersgd
 *     "loss": {"fused_xent": true, "vocab_multiple": 128,
 *              "vocab_per_tp": false},           optional: the multiple is x tp
 *     "step_overhead_s": 0.0,                   fixed time per step, >= 0
 *     "moe_host_sync_s": 0.0009,                optional (default 0): a mixture-of-experts
 *                                               layer's wait for its tokens' counts on the
 *                                               host, once a forward (and a recomputed
 *                                               dispatch): the device's idle time, 0 to 1
 *     "kernels": "eager",                       optional: fused (default) | eager
 *     "selective": "op",                        optional: attention (default) | op
 *     "grouped_gemm_streams": 4,                optional (default 1): a mixture of
 *                                               experts' grouped GEMM runs one GEMM an
 *                                               expert on this many streams at once
 *     "fused_epilogues": true,                  optional (default false): the residual
 *                                               add in the next norm's kernel, GELU and
 *                                               its derivative in the MLP GEMMs
 *     "ptrun_kernels": {                        optional (default: none): the kernels
 *       "gemm": ["gemm", "gemm_dgrad_write"],   that are ptrun's own calls, which a
 *       "attention": [                          profile of ptrun's kernels prices for
 *         {"device": "H100", "fwd": true, "bwd": false}   this stack too: GEMM roles
 *       ]                                       (pt_gemm_role_kind's names), and where
 *     },                                        its attention is ptrun's (first matching
 *                                               device prefix wins; at most 8)
 *     "fp8": {                                  optional (default: no FP8): the FP8
 *       "recipes": ["current", "delayed"],      recipes it runs (current, delayed,
 *       "default": "current",                   blockwise, rowwise), the one --precision
 *       "casts": "per_gemm"                     fp8 picks, and how its casts run:
 *     }                                         per_gemm | te (pt_fp8_casts)
 *   }
 */
#include "cost.h"
#include "internal.h"
#include "layout.h"
#include "specjson.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const attn_names[PT_ATTN_COUNT] = {"ptrun", "unfused", "flash"};
static const char *const bucket_names[PT_BUCKET_COUNT] = {"fixed", "megatron"};
static const char *const p2p_names[PT_P2P_COUNT] = {"overlapped", "blocking", "interleaved"};
static const char *const kernel_names[PT_KERNELS_COUNT] = {"fused", "eager"};
static const char *const selective_names[PT_SELECTIVE_COUNT] = {"attention", "op"};
static const char *const fp8_cast_names[PT_FP8_CASTS_COUNT] = {"per_gemm", "te"};

const char *pt_fp8_casts_name(pt_fp8_casts c)
{
    return (unsigned)c < PT_FP8_CASTS_COUNT ? fp8_cast_names[c] : "?";
}

const char *pt_kernel_style_name(pt_kernel_style k)
{
    return (unsigned)k < PT_KERNELS_COUNT ? kernel_names[k] : "?";
}

const char *pt_selective_name(pt_selective s)
{
    return (unsigned)s < PT_SELECTIVE_COUNT ? selective_names[s] : "?";
}

const char *pt_attn_impl_name(pt_attn_impl a)
{
    return (unsigned)a < PT_ATTN_COUNT ? attn_names[a] : "?";
}

#define BIT(x) (1u << (x))

/* ---- Which kernels are ptrun's -------------------------------------------------- */

/* A profile of ptrun's kernels (ptprofile --backend cuda, a shipped profile, a user's
 * costs.db with ptrun's traces) times cuBLAS GEMMs by role (costmodels/cost.h: operand
 * layout, output type and beta, epilogue) and cuDNN's fused flash attention. A stack's
 * kernel is priced from it where it is that same library call at the same shape and
 * dtype: cuBLAS picks its kernel from the problem (shapes, types, layouts, epilogue), not
 * from which framework asks, so Transformer Engine's, PyTorch's and Megatron's GEMMs of
 * a role run the kernel ptrun's of that role run. Where a framework makes another call
 * (a bf16 weight gradient written where ptrun adds into fp32; a bias added by a kernel of
 * its own) or runs another kernel (FlashAttention-2, Megatron-LM's unfused attention,
 * its own norms and activations), it is priced analytically: the profile never timed it. */
#define ROLE(r) (1u << (r))
#define ALL_GEMM_ROLES ((1u << PT_GEMM_ROLE_COUNT) - 1)

/* ---- Built-in stacks ---------------------------------------------------------- */

/* ptrun: what this project's runtime does, priced exactly as before stacks existed,
 * so that predictions of ptrun's own runs (and the calibration built on them) do not
 * move. Its attention kernels write the score matrix (runtime/, kernels/); buckets
 * are reduced as the last backward of a chunk fills them; ZeRO-3 gathers the next
 * layer beside the current one; the cross-entropy is one fused pair; the vocabulary
 * is padded to a multiple of 128 (planner/params.c). */
static const pt_stack stack_ptrun = {
    .name = "ptrun",
    .about = "ptrun, this project's trainer (CPU: OpenBLAS + MPI; CUDA: cuBLASLt + NCCL)",
    .attention = PT_ATTN_PTRUN,
    .tp = true, .pp = true, .cp = true, .sp = true,
    /* runtime/attention.c: the ring, and the all-to-all inside groups with or without
     * the ring across them */
    .cp_comms = BIT(PT_CPC_P2P) | BIT(PT_CPC_A2A) | BIT(PT_CPC_A2A_P2P),
    .cp_a2a_kv_replicate = true,
    /* runtime/moe.c: the copies to the experts' ranks by an all-to-all with counts per
     * rank (pt_comm_alltoallv_t), within ptrun_moe_check's limits */
    .moe_dispatches = BIT(PT_MOED_ALLTOALL),
    .zero_stages = BIT(0) | BIT(1) | BIT(2) | BIT(3),
    .tp_overlap = true, .tp_overlap_reach = 1.0,
    .dp_overlap_modes = BIT(PT_DPO_LAST), .dp_overlap = PT_DPO_LAST,
    .param_overlap = false,
    .zero3_prefetch = 1,
    .comm_compute_slowdown = 0,
    .p2p = PT_P2P_OVERLAPPED, /* MPI_Isend, completed later (comm/comm_mpi.c) */
    .bucket_rule = PT_BUCKET_FIXED, .bucket_bytes = 0,
    .grad_reduce_dtype = PT_DTYPE_FP32,
    .compression = true, /* runtime/compress.c */
    .fused_xent = true,
    .vocab_multiple = 128,
    .step_overhead_s = 0,
    .fused_epilogues = true, /* runtime/layer.c: add1_norm2, mlp_up_gelu, mlp_down_dgrad_gelu */
    .ptrun_gemm_roles = ALL_GEMM_ROLES,
    .n_ptrun_attn = 1,
    .ptrun_attn = {{"*", true, true}},
    /* runtime/: per-tensor current and delayed scaling, each GEMM op quantizing its own
     * operands (kernels.h's fp8_* ops) */
    .fp8_recipes = BIT(PT_FP8_CURRENT) | BIT(PT_FP8_DELAYED),
    .fp8_default = PT_FP8_CURRENT,
    .fp8_casts = PT_FP8_CASTS_PER_GEMM,
};

/* Megatron-LM as it trained GPT-3-class models in 2021-22 (Narayanan et al., SC'21;
 * Korthikanti et al. 2022) and as Megatron-DeepSpeed forks ran it (BLOOM, MT-NLG):
 * - attention unfused: QK^T and scores x V as batched GEMMs with the fused
 *   scale-mask-softmax kernel (--masked-softmax-fusion) and dropout between them, the
 *   b·a·s² score matrix written and read by each (Korthikanti Sec. 4.1 counts it);
 * - gradients reduced after the last micro-batch's backward (its "local" DDP's
 *   allreduce_gradients() in train_step; DeepSpeed's pipeline engine likewise reduces
 *   after the backward of every micro-batch), in fp32 (main_grad accumulation);
 * - ZeRO-1 at most (the distributed optimizer; DeepSpeed's pipeline engine refuses
 *   ZeRO-2/3), no TP overlap, no context parallelism (added in Megatron-Core 2024);
 * - vocabulary-parallel cross-entropy in several kernels; vocabulary padded to a
 *   multiple of 128 x tp (--make-vocab-size-divisible-by 128);
 * - pipeline transfers block: Megatron-LM's p2p_communication._communicate posts the
 *   sends and receives with batch_isend_irecv and waits on every request (then
 *   synchronises the device) before the next forward or backward; DeepSpeed's
 *   pipeline engine sends with blocking torch.distributed send/recv;
 * - ptrun's kernels: the GEMMs through torch.matmul (forward and written data gradient:
 *   ptrun's roles gemm and gemm_dgrad_write); the weight gradient is written in the
 *   training dtype and added into main_grad by a kernel of its own (DeepSpeed's
 *   BF16Optimizer, and Megatron-LM before --gradient-accumulation-fusion), not added
 *   into fp32 by the GEMM as ptrun's gemm_wgrad; biases are added outside the GEMM
 *   (--bias-gelu-fusion, skip_bias_add); the attention is unfused. */
static const pt_stack stack_megatron_lm = {
    .name = "megatron-lm",
    .about = "Megatron-LM 2021-22 (Narayanan et al. SC'21, Korthikanti et al. 2022), "
             "Megatron-DeepSpeed: unfused attention, reduction after the backward",
    .attention = PT_ATTN_UNFUSED,
    .tp = true, .pp = true, .cp = false, .sp = true, .cp_comms = BIT(PT_CPC_P2P),
    .zero_stages = BIT(0) | BIT(1),
    .tp_overlap = false, .tp_overlap_reach = 0,
    .dp_overlap_modes = BIT(PT_DPO_NONE), .dp_overlap = PT_DPO_NONE,
    .param_overlap = false,
    .zero3_prefetch = 0,
    .comm_compute_slowdown = 0,
    .p2p = PT_P2P_BLOCKING,
    .bucket_rule = PT_BUCKET_FIXED, .bucket_bytes = 0,
    .grad_reduce_dtype = PT_DTYPE_FP32,
    .fused_xent = false,
    .vocab_multiple = 128, .vocab_per_tp = true,
    .step_overhead_s = 0,
    .ptrun_gemm_roles = ROLE(PT_GEMM_FWD) | ROLE(PT_GEMM_DGRAD_WRITE),
};

/* Megatron-Core (r0.8 and later) with Transformer Engine:
 * - flash attention through TE (cuDNN fused attention on Hopper; FlashAttention-2 on
 *   Ampere). Efficiencies: FlashAttention-2 reaches 60-72% of A100 peak forward and
 *   about 50% backward at head size 64-128 (Dao, "FlashAttention-2", 2023, Fig. 4-5);
 *   Hopper kernels of the FlashAttention-3 class (which cuDNN matches) reach 62-75%
 *   of H100 peak forward and 45-55% backward (Shah et al., "FlashAttention-3", 2024,
 *   Fig. 5-7);
 * - --tp-comm-overlap (TE userbuffers: all-gathers and reduce-scatters pipelined with
 *   the GEMMs; the chunk that starts a pipeline is not hidden: reach 0.8),
 *   --overlap-grad-reduce (buckets as the last micro-batch's backward fills them),
 *   --overlap-param-gather (the distributed optimizer's all-gather beside the next
 *   forward); without --tp-comm-overlap, TE's column-parallel modules still issue
 *   their backward's collectives asynchronously (transformer_engine/pytorch/module/
 *   layernorm_linear.py, v1.8: "Overlap input AG with dgrad", the sequence-parallel
 *   input gathered again with async_op=True while the data-gradient GEMM runs, and
 *   "Overlap dgrad-RS/AR with wgrad", the input gradient's reduce-scatter, or
 *   all-reduce without sp, issued async_op=True before the weight-gradient GEMM and
 *   waited on after it): tp_backward_async;
 * - the distributed optimizer's buckets hold max(40,000,000, 1,000,000 x dp)
 *   parameters (megatron/training/training.py, get_model);
 * - gradients reduced in fp32 unless --grad-reduce-in-bf16;
 * - pipeline transfers beside compute only in the interleaved schedule
 *   (overlap_p2p_comm, "only for interleaved" in its arguments); 1F1B waits on them;
 * - NCCL kernels take SMs, memory bandwidth and power from the compute they overlap:
 *   Lee et al., "Characterizing Compute-Communication Overlap in GPU-Accelerated
 *   Distributed Deep Learning" (arXiv:2507.03114, 2025) measured GPT and LLaMA layers
 *   on A100 and H100 (and MI250/MI210) with collectives overlapped and found the
 *   compute 18.9% slower on average (40% at most) than with no communication beside
 *   it; we charge that average on the compute that overlapped communication covers;
 * - ptrun's kernels: Transformer Engine's linear layers call cuBLASLt as ptrun does,
 *   the forward with or without the bias epilogue, the data gradient written, and with
 *   --gradient-accumulation-fusion (Megatron-Core's default) the weight gradient added
 *   into the fp32 main_grad with the bias gradient from the same call (ptrun's gemm,
 *   gemm_bias, gemm_dgrad_write, gemm_wgrad, gemm_wgrad_bias). Its attention on Hopper and
 *   Blackwell is cuDNN's fused flash attention (TE's FusedAttention backend), the forward
 *   ptrun's; its backward is not: TE lets cuDNN pick its non-deterministic engine (dQ
 *   added with atomics) unless NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 (Megatron-Core's
 *   --deterministic-mode sets it), where ptrun runs the deterministic one. */
static const pt_stack stack_megatron_core = {
    .name = "megatron-core",
    .about = "Megatron-Core r0.8+ with Transformer Engine: flash attention, TP comm "
             "overlap, overlapped grad reduce and param gather, distributed optimizer",
    .attention = PT_ATTN_FLASH,
    .n_attn_eff = 3,
    .attn_eff = {{"A100", 0.62, 0.50}, {"H100", 0.62, 0.48}, {"*", 0.5, 0.4}},
    .tp = true, .pp = true, .cp = true, .sp = true,
    /* --cp-comm-type's four kinds (megatron/core/transformer/transformer_config.py) */
    .cp_comms = BIT(PT_CPC_P2P) | BIT(PT_CPC_ALLGATHER) | BIT(PT_CPC_A2A) | BIT(PT_CPC_A2A_P2P),
    /* Transformer Engine's all-to-all hands out whole KV heads (context_parallel.py,
     * AttnFuncWithCPAndQKVOA2A: "num_heads % cp_size == 0 for Q, K, V") */
    .cp_a2a_kv_replicate = false,
    /* --moe-token-dispatcher-type alltoall, allgather and flex (DeepEP) (megatron/
     * core/transformer/transformer_config.py) */
    .moe_dispatches = BIT(PT_MOED_ALLTOALL) | BIT(PT_MOED_ALLGATHER) | BIT(PT_MOED_FLEX),
    /* --moe-grouped-gemm: Transformer Engine's GroupedLinear, one cuBLAS GEMM an expert
     * over its compute streams (common/gemm/cublaslt_gemm.cu, multi_stream_cublas_gemm;
     * common/util/multi_stream.cpp: num_compute_streams = 4) */
    .grouped_gemm_streams = 4,
    /* --recompute-granularity selective --recompute-modules (transformer_config.py) */
    .recompute_modules = BIT(PT_RMOD_CORE_ATTN) | BIT(PT_RMOD_LAYERNORM) | BIT(PT_RMOD_MLP) |
                         BIT(PT_RMOD_MOE_ACT) | BIT(PT_RMOD_MOE),
    .zero_stages = BIT(0) | BIT(1),
    .tp_overlap = true, .tp_overlap_rs = true, .tp_overlap_reach = 0.8,
    .tp_backward_async = true,
    .dp_overlap_modes = BIT(PT_DPO_NONE) | BIT(PT_DPO_LAST), .dp_overlap = PT_DPO_LAST,
    .param_overlap = true,
    .zero3_prefetch = 0,
    .comm_compute_slowdown = 0.189,
    .p2p = PT_P2P_INTERLEAVED,
    .bucket_rule = PT_BUCKET_MEGATRON, .bucket_bytes = 0,
    .grad_reduce_dtype = PT_DTYPE_FP32,
    .fused_xent = false,
    .vocab_multiple = 128, .vocab_per_tp = true,
    .step_overhead_s = 0,
    /* Learned from runs, as no source times it: the least-squares fit, in relative error,
     * of the Megatron-Core MoE model zoo's four forced-balance long-context rows of
     * Qwen3-235B-A22B on 256 H100 (best_practice/qwen3/readme.md; not in the validation
     * set), whose dispatch runs twice a layer and micro-batch (recompute layernorm moe);
     * docs/results/2026-11-cpu.md has the fit and each row held out */
    .moe_host_sync_s = 0.00088,
    .ptrun_gemm_roles = ROLE(PT_GEMM_FWD) | ROLE(PT_GEMM_FWD_BIAS) |
                        ROLE(PT_GEMM_DGRAD_WRITE) | ROLE(PT_GEMM_WGRAD) |
                        ROLE(PT_GEMM_WGRAD_BIAS),
    .n_ptrun_attn = 4,
    .ptrun_attn = {{"H100", true, false}, {"H200", true, false}, {"B200", true, false},
                   {"GB200", true, false}},
    /* Megatron-Core's --fp8-recipe (TransformerConfig.fp8_recipe, megatron/core/
     * transformer/transformer_config.py): tensorwise (per-tensor current scaling),
     * delayed (the default), blockwise, mxfp8 (Blackwell only, not planned here) and
     * custom; --fp8-format hybrid is E4M3 forward, E5M2 gradients. TE quantizes as
     * pt_fp8_casts' "te" says (transformer_engine/pytorch/module/linear.py: the weight
     * workspace updated on the first micro-batch only, is_first_microbatch; the input
     * kept for the backward as its column-wise FP8 copy). */
    .fp8_recipes = BIT(PT_FP8_CURRENT) | BIT(PT_FP8_DELAYED) | BIT(PT_FP8_BLOCKWISE),
    .fp8_default = PT_FP8_DELAYED,
    .fp8_casts = PT_FP8_CASTS_TE,
};

/* PyTorch FSDP (FULL_SHARD; SHARD_GRAD_OP is ZeRO-2, NO_SHARD plain DDP) with
 * FlashAttention-2 as llm-foundry and torchtitan run it, data parallelism only:
 * - each FSDP unit (a transformer layer) is all-gathered before its forward and again
 *   before its backward, with the next unit's gather issued one ahead
 *   (backward_prefetch=BACKWARD_PRE, forward prefetch through the limit_all_gathers
 *   rate limiter: one unit in flight); gradients are reduce-scattered per unit during
 *   the backward of every micro-batch (FSDP docs, "FullyShardedDataParallel");
 * - FlashAttention-2 on Hopper lacks the Hopper-specific instructions: 35% of H100
 *   peak forward and about 28% backward (Shah et al. 2024, Fig. 5-7, FA2 curves);
 *   on A100 as Dao 2023 measured (see megatron-core);
 * - gradients reduced in fp32 (torchtitan's mixed_precision_reduce default);
 * - the vocabulary is not padded (Hugging Face-style embeddings);
 * - NCCL's collectives run concurrently with compute on the same SMs: 18.9% of the
 *   overlapped compute, as measured by Lee et al. 2025 (see megatron-core);
 * - eager PyTorch modules: torchtitan's Llama (its model.py, after
 *   facebookresearch/llama) computes RMSNorm as x.float(), pow, mean, rsqrt, a product,
 *   type_as and the weight product, RoPE through view_as_complex(x.float()) times the
 *   frequencies and type_as, SwiGLU as silu(w1 x) * w3 x: each a kernel of its own
 *   (ops.c counts their bytes); llm-foundry's MPT uses F.layer_norm and nn.GELU, one
 *   kernel per direction, so eager costs it nothing more;
 * - recompute=selective is torchtitan's per-op policy (selective_ac_option "op",
 *   torchtitan/parallelisms/parallelize_llama.py, _save_list and the mm count): the
 *   outputs of the attention kernel and of every other matmul are kept, everything
 *   else is recomputed before the backward;
 * - ptrun's kernels: nn.Linear's forward (at::mm, and addmm with cuBLASLt's bias epilogue)
 *   and its input gradient (written) are ptrun's gemm, gemm_bias and gemm_dgrad_write;
 *   autograd writes the weight gradient in bf16 (FSDP casts and reduces it afterwards),
 *   where ptrun's gemm_wgrad adds into fp32. The attention is FlashAttention-2 (the
 *   flash-attn package; torch's SDPA, whose cuDNN backend is opt-in from PyTorch 2.5,
 *   pytorch/pytorch#138522), not cuDNN's. */
static const pt_stack stack_fsdp = {
    .name = "fsdp",
    .about = "PyTorch FSDP full shard with FlashAttention-2 (llm-foundry, torchtitan 1D)",
    .attention = PT_ATTN_FLASH,
    .n_attn_eff = 3,
    .attn_eff = {{"A100", 0.62, 0.50}, {"H100", 0.35, 0.28}, {"*", 0.4, 0.3}},
    .tp = false, .pp = false, .cp = false, .sp = false, .cp_comms = BIT(PT_CPC_P2P),
    .zero_stages = BIT(0) | BIT(2) | BIT(3),
    .tp_overlap = false, .tp_overlap_reach = 0,
    .dp_overlap_modes = BIT(PT_DPO_LAST) | BIT(PT_DPO_BACKWARD), .dp_overlap = PT_DPO_LAST,
    .param_overlap = false,
    .zero3_prefetch = 1,
    .comm_compute_slowdown = 0.189,
    .p2p = PT_P2P_OVERLAPPED, /* no pipeline */
    .bucket_rule = PT_BUCKET_FIXED, .bucket_bytes = 0,
    .grad_reduce_dtype = PT_DTYPE_FP32,
    .fused_xent = false,
    .vocab_multiple = 1,
    .step_overhead_s = 0,
    .kernels = PT_KERNELS_EAGER,
    .selective = PT_SELECTIVE_OP,
    .ptrun_gemm_roles = ROLE(PT_GEMM_FWD) | ROLE(PT_GEMM_FWD_BIAS) | ROLE(PT_GEMM_DGRAD_WRITE),
    /* torchtitan's float8 converter (torchao's Float8Linear; torchtitan/config/
     * job_config.py, Float8Linear.recipe_name at v0.2.2): dynamic per-tensor scaling
     * ("tensorwise", the default without a recipe name) and "rowwise"; each linear's
     * GEMMs quantize their own operands (torchao/float8/float8_linear.py) */
    .fp8_recipes = BIT(PT_FP8_CURRENT) | BIT(PT_FP8_ROWWISE),
    .fp8_default = PT_FP8_CURRENT,
    .fp8_casts = PT_FP8_CASTS_PER_GEMM,
};

static const pt_stack *const builtins[] = {&stack_ptrun, &stack_megatron_lm,
                                           &stack_megatron_core, &stack_fsdp};

int pt_stack_builtin_count(void)
{
    return (int)(sizeof builtins / sizeof builtins[0]);
}

const pt_stack *pt_stack_builtin(int i)
{
    return i >= 0 && i < pt_stack_builtin_count() ? builtins[i] : NULL;
}

int64_t pt_stack_vocab(const pt_stack *s, const pt_model *m, int tp)
{
    return pt_vocab_round(m, tp, s->vocab_multiple, s->vocab_per_tp);
}

double pt_stack_attn_eff(const pt_stack *s, const char *device, bool backward)
{
    for (int i = 0; i < s->n_attn_eff && i < PT_STACK_MAX_ATTN_EFF; i++) {
        const pt_attn_eff *e = &s->attn_eff[i];
        if (strcmp(e->device, "*") == 0 || strncmp(device, e->device, strlen(e->device)) == 0)
            return backward ? e->bwd : e->fwd;
    }
    return 0;
}

bool pt_stack_ptrun_gemm(const pt_stack *s, int role)
{
    return role >= 0 && role < PT_GEMM_ROLE_COUNT && (s->ptrun_gemm_roles & ROLE(role));
}

bool pt_stack_ptrun_attn(const pt_stack *s, const char *device, bool backward)
{
    for (int i = 0; i < s->n_ptrun_attn && i < PT_STACK_MAX_ATTN_EFF; i++) {
        const pt_ptrun_attn *e = &s->ptrun_attn[i];
        if (strcmp(e->device, "*") == 0 || strncmp(device, e->device, strlen(e->device)) == 0)
            return backward ? e->bwd : e->fwd;
    }
    return false;
}

/* ---- Lookup ------------------------------------------------------------------- */

int pt_stack_get(const char *name, pt_stack *out, pt_err *err)
{
    if (!name)
        return pt_err_set(err, "no stack name given; see ptplan --list-stacks");
    for (int i = 0; i < pt_stack_builtin_count(); i++)
        if (strcmp(builtins[i]->name, name) == 0) {
            *out = *builtins[i];
            return 0;
        }
    struct stat st;
    if (stat(name, &st) == 0)
        return pt_stack_load_file(name, out, err);
    char names[160] = "";
    for (int i = 0; i < pt_stack_builtin_count(); i++) {
        strncat(names, builtins[i]->name, sizeof names - strlen(names) - 1);
        if (i + 1 < pt_stack_builtin_count())
            strncat(names, ", ", sizeof names - strlen(names) - 1);
    }
    const char *list[16];
    int n = 0;
    for (int i = 0; i < pt_stack_builtin_count() && n < 16; i++)
        list[n++] = builtins[i]->name;
    const char *meant = pt_spec_closest(name, list, n);
    if (meant)
        return pt_err_set(err, "unknown stack '%s' (not a built-in and no such file); did you "
                               "mean '%s'? built-ins: %s", name, meant, names);
    return pt_err_set(err, "unknown stack '%s' (not a built-in and no such file); built-ins: "
                           "%s", name, names);
}

int pt_stack_load_file(const char *path, pt_stack *out, pt_err *err)
{
    char *text = pt_json_read_file(path, err);
    if (!text)
        return -1;
    int rc = pt_stack_from_json(text, path, out, err);
    free(text);
    return rc;
}

/* ---- Reading ------------------------------------------------------------------- */

static const char *const top_keys[] = {"name", "about", "attention", "parallelism", "overlap",
                                       "gradients", "loss", "step_overhead_s", "kernels",
                                       "selective", "fused_epilogues", "ptrun_kernels", "fp8",
                                       "grouped_gemm_streams", "moe_host_sync_s",
                                       NULL};
static const char *const fp8_keys[] = {"recipes", "default", "casts", NULL};
static const char *const attn_keys[] = {"impl", "efficiency", NULL};
static const char *const eff_keys[] = {"device", "fwd", "bwd", NULL};
static const char *const par_keys[] = {"tp", "pp", "cp", "sp", "zero", "cp_comm",
                                       "cp_a2a_kv_replicate", "moe_dispatch",
                                       "recompute_modules", NULL};
static const char *const ovl_keys[] = {"tp", "tp_reduce_scatter", "tp_reach", "tp_backward_async",
                                       "dp", "dp_default", "param_gather", "zero3_prefetch",
                                       "compute_slowdown", "p2p", NULL};
static const char *const grad_keys[] = {"bucket_rule", "bucket_bytes", "reduce_dtype",
                                        "compression", NULL};
static const char *const loss_keys[] = {"fused_xent", "vocab_multiple", "vocab_per_tp", NULL};
static const char *const ptk_keys[] = {"gemm", "attention", NULL};
static const char *const ptk_attn_keys[] = {"device", "fwd", "bwd", NULL};

/* An array field of `o` of at most `max` entries; NULL (a problem recorded) if not. */
static const json_t *get_array(const pt_json_obj *o, const char *key, size_t max, pt_err *err)
{
    char name[160];
    pt_json_field_name(o, key, name, sizeof name);
    const json_t *v = json_object_get(o->obj, key);
    if (!v)
        pt_json_fail(o, key, err, "%s: missing field '%s'", o->origin, name);
    else if (!json_is_array(v))
        pt_json_fail(o, key, err, "%s: field '%s': expected an array", o->origin, name);
    else if (json_array_size(v) > max)
        pt_json_fail(o, key, err, "%s: field '%s' has %zu entries, at most %zu allowed",
                     o->origin, name, json_array_size(v), max);
    else
        return v;
    return NULL;
}

static int read_attn_eff(const pt_json_obj *a, const json_t *item, int i, pt_attn_eff *x,
                         pt_err *err)
{
    pt_json_obj e = {.obj = item, .origin = a->origin, .errs = a->errs};
    snprintf(e.path, sizeof e.path, "attention.efficiency[%d]", i);
    if (!json_is_object(item))
        return pt_json_fail(&e, NULL, err, "%s: field '%s': expected an object", a->origin,
                            e.path);
    int bad = pt_json_check_keys(&e, eff_keys, err);
    bad |= pt_json_get_string(&e, "device", x->device, sizeof x->device, err);
    bad |= pt_json_get_real(&e, "fwd", &x->fwd, err);
    bad |= pt_json_get_real(&e, "bwd", &x->bwd, err);
    return bad ? -1 : 0;
}

static int read_attention(const pt_json_obj *top, pt_stack *s, pt_err *err)
{
    pt_json_obj a;
    int impl = 0;
    if (pt_json_get_object(top, "attention", attn_keys, &a, err))
        return -1;
    int bad = pt_json_get_enum(&a, "impl", attn_names, PT_ATTN_COUNT, &impl, err);
    s->attention = (pt_attn_impl)impl;
    const json_t *arr = get_array(&a, "efficiency", PT_STACK_MAX_ATTN_EFF, err);
    if (!arr)
        return -1;
    s->n_attn_eff = (int)json_array_size(arr);
    for (int i = 0; i < s->n_attn_eff; i++)
        bad |= read_attn_eff(&a, json_array_get(arr, (size_t)i), i, &s->attn_eff[i], err);
    return bad ? -1 : 0;
}

/* The names of the set bits of `mask` (names[k] for bit k < count) as a JSON array of
 * strings (NULL when out of memory). */
static json_t *bit_names_json(unsigned mask, int count, const char *const *names)
{
    json_t *arr = json_array();
    for (int k = 0; arr && k < count; k++)
        if (mask & BIT(k) && json_array_append_new(arr, json_string(names[k]))) {
            json_decref(arr);
            return NULL;
        }
    return arr;
}

/* A list of names (names[k] for k < count) as a bit set. */
static int read_name_set(const pt_json_obj *o, const char *key, const char *const *names,
                         int count, unsigned *out, pt_err *err)
{
    const json_t *arr = get_array(o, key, (size_t)count, err);
    if (!arr)
        return -1;
    *out = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const char *v = json_string_value(json_array_get(arr, i));
        int k = 0;
        while (v && k < count && strcmp(v, names[k]) != 0)
            k++;
        if (!v || k == count) {
            char choices[128];
            pt_join_all_names(count, names, choices, sizeof choices);
            return pt_json_fail(o, key, err, "%s: field '%s.%s[%zu]': expected one of %s",
                                o->origin, o->path, key, i, choices);
        }
        *out |= BIT(k);
    }
    return 0;
}

static int read_parallelism(const pt_json_obj *top, pt_stack *s, pt_err *err)
{
    pt_json_obj p;
    if (pt_json_get_object(top, "parallelism", par_keys, &p, err))
        return -1;
    int bad = pt_json_get_bool(&p, "tp", &s->tp, err);
    bad |= pt_json_get_bool(&p, "pp", &s->pp, err);
    bad |= pt_json_get_bool(&p, "cp", &s->cp, err);
    bad |= pt_json_get_bool(&p, "sp", &s->sp, err);
    const json_t *arr = get_array(&p, "zero", 4, err);
    if (!arr)
        return -1;
    s->zero_stages = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 3)
            return pt_json_fail(&p, "zero", err, "%s: field 'parallelism.zero[%zu]': "
                                "expected a ZeRO stage 0..3", p.origin, i);
        s->zero_stages |= BIT(json_integer_value(v));
    }
    s->cp_comms = BIT(PT_CPC_P2P);
    s->cp_a2a_kv_replicate = false;
    if (json_object_get(p.obj, "cp_a2a_kv_replicate"))
        bad |= pt_json_get_bool(&p, "cp_a2a_kv_replicate", &s->cp_a2a_kv_replicate, err);
    if (json_object_get(p.obj, "cp_comm")) {
        if (read_name_set(&p, "cp_comm", pt_cp_comm_names, PT_CPC_COUNT, &s->cp_comms, err))
            return -1;
        if (!s->cp_comms) {
            char all[64];
            pt_join_all_names(PT_CPC_COUNT, pt_cp_comm_names, all, sizeof all);
            return pt_json_fail(&p, "cp_comm", err, "%s: field 'parallelism.cp_comm': empty "
                                "(list at least one of %s)", p.origin, all);
        }
    }
    s->recompute_modules = 0;
    if (json_object_get(p.obj, "recompute_modules")) {
        bad |= read_name_set(&p, "recompute_modules", pt_rmod_names, PT_RMOD_COUNT,
                             &s->recompute_modules, err);
    }
    s->moe_dispatches = 0;
    if (json_object_get(p.obj, "moe_dispatch")) {
        const json_t *kinds = get_array(&p, "moe_dispatch", PT_MOED_COUNT, err);
        if (!kinds)
            return -1;
        for (size_t i = 0; i < json_array_size(kinds); i++) {
            const char *v = json_string_value(json_array_get(kinds, i));
            int k = 0;
            while (v && k < PT_MOED_COUNT &&
                   strcmp(v, pt_moe_dispatch_name((pt_moe_dispatch)k)) != 0)
                k++;
            if (!v || k == PT_MOED_COUNT)
                return pt_json_fail(&p, "moe_dispatch", err, "%s: field "
                                    "'parallelism.moe_dispatch[%zu]': expected alltoall, "
                                    "allgather or flex", p.origin, i);
            s->moe_dispatches |= BIT(k);
        }
    }
    return bad ? -1 : 0;
}

static int read_overlap(const pt_json_obj *top, pt_stack *s, pt_err *err)
{
    pt_json_obj o;
    int dflt = 0, p2p = PT_P2P_OVERLAPPED;
    if (pt_json_get_object(top, "overlap", ovl_keys, &o, err))
        return -1;
    int bad = pt_json_get_bool(&o, "tp", &s->tp_overlap, err);
    bad |= pt_json_get_bool(&o, "tp_reduce_scatter", &s->tp_overlap_rs, err);
    bad |= pt_json_get_real(&o, "tp_reach", &s->tp_overlap_reach, err);
    if (json_object_get(o.obj, "tp_backward_async"))
        bad |= pt_json_get_bool(&o, "tp_backward_async", &s->tp_backward_async, err);
    bad |= read_name_set(&o, "dp", pt_dp_overlap_names, PT_DPO_COUNT, &s->dp_overlap_modes, err);
    bad |= pt_json_get_enum(&o, "dp_default", pt_dp_overlap_names, PT_DPO_COUNT, &dflt, err);
    bad |= pt_json_get_bool(&o, "param_gather", &s->param_overlap, err);
    bad |= pt_json_get_int32(&o, "zero3_prefetch", &s->zero3_prefetch, err);
    bad |= pt_json_get_real(&o, "compute_slowdown", &s->comm_compute_slowdown, err);
    if (json_object_get(o.obj, "p2p"))
        bad |= pt_json_get_enum(&o, "p2p", p2p_names, PT_P2P_COUNT, &p2p, err);
    s->dp_overlap = (pt_dp_overlap)dflt;
    s->p2p = (pt_p2p_mode)p2p;
    return bad ? -1 : 0;
}

static int read_gradients(const pt_json_obj *top, pt_stack *s, pt_err *err)
{
    pt_json_obj g;
    int rule = 0, dt = 0;
    static const char *const dtypes[] = {"fp32", "bf16"};
    if (pt_json_get_object(top, "gradients", grad_keys, &g, err))
        return -1;
    int bad = pt_json_get_enum(&g, "bucket_rule", bucket_names, PT_BUCKET_COUNT, &rule, err);
    bad |= pt_json_get_int(&g, "bucket_bytes", &s->bucket_bytes, err);
    bad |= pt_json_get_enum(&g, "reduce_dtype", dtypes, 2, &dt, err);
    if (json_object_get(g.obj, "compression"))
        bad |= pt_json_get_bool(&g, "compression", &s->compression, err);
    s->bucket_rule = (pt_bucket_rule)rule;
    s->grad_reduce_dtype = dt ? PT_DTYPE_BF16 : PT_DTYPE_FP32;
    return bad ? -1 : 0;
}

static int read_loss(const pt_json_obj *top, pt_stack *s, pt_err *err)
{
    pt_json_obj l;
    if (pt_json_get_object(top, "loss", loss_keys, &l, err))
        return -1;
    int bad = pt_json_get_bool(&l, "fused_xent", &s->fused_xent, err);
    bad |= pt_json_get_int(&l, "vocab_multiple", &s->vocab_multiple, err);
    if (json_object_get(l.obj, "vocab_per_tp"))
        bad |= pt_json_get_bool(&l, "vocab_per_tp", &s->vocab_per_tp, err);
    return bad ? -1 : 0;
}

/* "ptrun_kernels": the GEMM roles by their kinds' names, and the devices where the
 * attention is ptrun's. */
static int read_ptrun_gemm(const pt_json_obj *k, pt_stack *s, pt_err *err)
{
    const json_t *arr = get_array(k, "gemm", PT_GEMM_ROLE_COUNT, err);
    if (!arr)
        return -1;
    s->ptrun_gemm_roles = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const char *v = json_string_value(json_array_get(arr, i));
        int r = v ? pt_gemm_role_of(v) : PT_GEMM_NONE;
        if (r < 0 || strcmp(v, pt_gemm_role_kind((pt_gemm_role)r)) != 0)
            return pt_json_fail(k, "gemm", err, "%s: field 'ptrun_kernels.gemm[%zu]': expected "
                                "a GEMM role of ptrun's (gemm, gemm_bias, gemm_dgrad_write, "
                                "gemm_wgrad, ...)", k->origin, i);
        s->ptrun_gemm_roles |= ROLE(r);
    }
    return 0;
}

static int read_ptrun_attn(const pt_json_obj *k, pt_stack *s, pt_err *err)
{
    const json_t *arr = get_array(k, "attention", PT_STACK_MAX_ATTN_EFF, err);
    if (!arr)
        return -1;
    int bad = 0;
    s->n_ptrun_attn = (int)json_array_size(arr);
    for (int i = 0; i < s->n_ptrun_attn; i++) {
        pt_ptrun_attn *x = &s->ptrun_attn[i];
        pt_json_obj e = {.obj = json_array_get(arr, (size_t)i), .origin = k->origin,
                         .errs = k->errs};
        snprintf(e.path, sizeof e.path, "ptrun_kernels.attention[%d]", i);
        if (!json_is_object(e.obj)) {
            bad |= pt_json_fail(&e, NULL, err, "%s: field '%s': expected an object",
                                k->origin, e.path);
            continue;
        }
        bad |= pt_json_check_keys(&e, ptk_attn_keys, err);
        bad |= pt_json_get_string(&e, "device", x->device, sizeof x->device, err);
        bad |= pt_json_get_bool(&e, "fwd", &x->fwd, err);
        bad |= pt_json_get_bool(&e, "bwd", &x->bwd, err);
    }
    return bad ? -1 : 0;
}

static int read_ptrun_kernels(const pt_json_obj *top, pt_stack *s, pt_err *err)
{
    pt_json_obj k;
    if (pt_json_get_object(top, "ptrun_kernels", ptk_keys, &k, err))
        return -1;
    int bad = read_ptrun_gemm(&k, s, err);
    bad |= read_ptrun_attn(&k, s, err);
    return bad ? -1 : 0;
}

/* "fp8": the recipes (a list of names), the default and the casts. */
static int read_fp8(const pt_json_obj *top, pt_stack *s, pt_err *err)
{
    pt_json_obj f;
    if (pt_json_get_object(top, "fp8", fp8_keys, &f, err))
        return -1;
    int dflt = PT_FP8_OFF, casts = PT_FP8_CASTS_PER_GEMM;
    int bad = pt_json_get_enum(&f, "default", pt_fp8_recipe_names, PT_FP8_COUNT, &dflt, err);
    bad |= pt_json_get_enum(&f, "casts", fp8_cast_names, PT_FP8_CASTS_COUNT, &casts, err);
    const json_t *arr = get_array(&f, "recipes", PT_FP8_COUNT - 1, err);
    if (!arr)
        return -1;
    s->fp8_recipes = 0;
    for (size_t i = 0; i < json_array_size(arr); i++) {
        pt_fp8_recipe r;
        pt_err why;
        const char *v = json_string_value(json_array_get(arr, i));
        if (!v || pt_fp8_recipe_parse(v, &r, &why) || r == PT_FP8_OFF)
            return pt_json_fail(&f, "recipes", err, "%s: field 'fp8.recipes[%zu]': expected "
                                "one of current, delayed, blockwise, rowwise", f.origin, i);
        s->fp8_recipes |= BIT(r);
    }
    s->fp8_default = dflt;
    s->fp8_casts = (pt_fp8_casts)casts;
    return bad ? -1 : 0;
}

/* Reads every field of `top` (which has a collector) into s, recording each problem. */
static int read_stack(const pt_json_obj *top, pt_stack *s, pt_err *err)
{
    int kernels = PT_KERNELS_FUSED, selective = PT_SELECTIVE_ATTENTION;
    int bad = pt_json_check_keys(top, top_keys, err);
    bad |= pt_json_get_string(top, "name", s->name, sizeof s->name, err);
    bad |= pt_json_get_string(top, "about", s->about, sizeof s->about, err);
    bad |= read_attention(top, s, err);
    bad |= read_parallelism(top, s, err);
    bad |= read_overlap(top, s, err);
    bad |= read_gradients(top, s, err);
    bad |= read_loss(top, s, err);
    bad |= pt_json_get_real(top, "step_overhead_s", &s->step_overhead_s, err);
    s->moe_host_sync_s = 0;
    if (json_object_get(top->obj, "moe_host_sync_s"))
        bad |= pt_json_get_real(top, "moe_host_sync_s", &s->moe_host_sync_s, err);
    if (json_object_get(top->obj, "fused_epilogues"))
        bad |= pt_json_get_bool(top, "fused_epilogues", &s->fused_epilogues, err);
    s->grouped_gemm_streams = 1;
    if (json_object_get(top->obj, "grouped_gemm_streams")) {
        bad |= pt_json_get_int32(top, "grouped_gemm_streams", &s->grouped_gemm_streams, err);
        if (s->grouped_gemm_streams < 1 || s->grouped_gemm_streams > 64)
            bad |= pt_json_fail(top, "grouped_gemm_streams", err, "%s: field "
                                "'grouped_gemm_streams' = %d: expected 1 to 64", top->origin,
                                s->grouped_gemm_streams);
    }
    if (json_object_get(top->obj, "kernels"))
        bad |= pt_json_get_enum(top, "kernels", kernel_names, PT_KERNELS_COUNT, &kernels, err);
    if (json_object_get(top->obj, "selective"))
        bad |= pt_json_get_enum(top, "selective", selective_names, PT_SELECTIVE_COUNT,
                                &selective, err);
    if (json_object_get(top->obj, "ptrun_kernels"))
        bad |= read_ptrun_kernels(top, s, err);
    if (json_object_get(top->obj, "fp8"))
        bad |= read_fp8(top, s, err);
    s->kernels = (pt_kernel_style)kernels;
    s->selective = (pt_selective)selective;
    return bad ? -1 : 0;
}

static void stack_check(const pt_stack *s, const char *origin, pt_json_errs *e);

int pt_stack_from_json(const char *text, const char *origin, pt_stack *out, pt_err *err)
{
    pt_json_obj top;
    json_t *root = pt_json_parse_object(text, origin, &top, err);
    if (!root)
        return -1;
    pt_stack s;
    memset(&s, 0, sizeof s);
    pt_json_errs errs;
    pt_json_errs_init(&errs);
    top.errs = &errs;
    read_stack(&top, &s, err);
    json_decref(root);
    /* The values read are checked too; a field already reported is not again. */
    stack_check(&s, origin, &errs);
    int rc = pt_json_errs_finish(&errs, origin, err);
    if (rc == 0)
        *out = s;
    return rc;
}

/* ---- Checks --------------------------------------------------------------------- */

static void in_range(const char *origin, const char *field, double v, double lo, double hi,
                     bool lo_open, pt_json_errs *e)
{
    if (!(isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi))
        pt_json_errs_add(e, field, "%s: field '%s' = %g: expected a value in %s%g, %g]", origin,
                         field, v, lo_open ? "(" : "[", lo, hi);
}

static void stack_check_enums(const pt_stack *s, const char *origin, pt_json_errs *e)
{
    if (!memchr(s->name, '\0', sizeof s->name) || !s->name[0])
        pt_json_errs_add(e, "name", "%s: field 'name' is empty", origin);
    if ((unsigned)s->attention >= PT_ATTN_COUNT)
        pt_json_errs_add(e, "attention.impl", "%s: field 'attention.impl': not a known "
                         "implementation", origin);
    if ((unsigned)s->p2p >= PT_P2P_COUNT)
        pt_json_errs_add(e, "overlap.p2p", "%s: field 'overlap.p2p': not a known mode", origin);
    if ((unsigned)s->kernels >= PT_KERNELS_COUNT)
        pt_json_errs_add(e, "kernels", "%s: field 'kernels': not fused or eager", origin);
    if ((unsigned)s->selective >= PT_SELECTIVE_COUNT)
        pt_json_errs_add(e, "selective", "%s: field 'selective': not attention or op", origin);
}

static void stack_check_attention(const pt_stack *s, const char *origin, pt_json_errs *e)
{
    if (s->attention == PT_ATTN_FLASH && s->n_attn_eff == 0)
        pt_json_errs_add(e, "attention.efficiency", "%s: field 'attention.efficiency' is "
                         "empty: flash attention needs at least one entry (\"device\": \"*\" "
                         "matches any)", origin);
    for (int i = 0; i < s->n_attn_eff; i++) {
        char f[64];
        snprintf(f, sizeof f, "attention.efficiency[%d].fwd", i);
        in_range(origin, f, s->attn_eff[i].fwd, 0, 1, true, e);
        snprintf(f, sizeof f, "attention.efficiency[%d].bwd", i);
        in_range(origin, f, s->attn_eff[i].bwd, 0, 1, true, e);
        snprintf(f, sizeof f, "attention.efficiency[%d].device", i);
        if (!s->attn_eff[i].device[0])
            pt_json_errs_add(e, f, "%s: field '%s' is empty", origin, f);
    }
}

static void stack_check_ptrun_kernels(const pt_stack *s, const char *origin, pt_json_errs *e)
{
    if (s->ptrun_gemm_roles & ~ALL_GEMM_ROLES)
        pt_json_errs_add(e, "ptrun_kernels.gemm", "%s: field 'ptrun_kernels.gemm': not GEMM "
                         "roles of ptrun's", origin);
    if (s->n_ptrun_attn < 0 || s->n_ptrun_attn > PT_STACK_MAX_ATTN_EFF)
        pt_json_errs_add(e, "ptrun_kernels.attention", "%s: field 'ptrun_kernels.attention' "
                         "has %d entries: at most %d", origin, s->n_ptrun_attn,
                         PT_STACK_MAX_ATTN_EFF);
    bool any = false;
    for (int i = 0; i < s->n_ptrun_attn && i < PT_STACK_MAX_ATTN_EFF; i++) {
        char f[64];
        snprintf(f, sizeof f, "ptrun_kernels.attention[%d].device", i);
        if (!memchr(s->ptrun_attn[i].device, '\0', sizeof s->ptrun_attn[i].device) ||
            !s->ptrun_attn[i].device[0])
            pt_json_errs_add(e, f, "%s: field '%s' is empty", origin, f);
        any |= s->ptrun_attn[i].fwd || s->ptrun_attn[i].bwd;
    }
    /* ptrun's attention is one fused kernel each way; Megatron-LM's unfused attention is
     * several of its own */
    if (any && s->attention == PT_ATTN_UNFUSED)
        pt_json_errs_add(e, "ptrun_kernels.attention", "%s: field 'ptrun_kernels.attention' "
                         "names ptrun's attention kernel but 'attention.impl' is unfused "
                         "(kernels of its own)", origin);
}

static void stack_check_fp8(const pt_stack *s, const char *origin, pt_json_errs *e)
{
    unsigned all = ((1u << PT_FP8_COUNT) - 1) & ~BIT(PT_FP8_OFF);
    if (s->fp8_recipes & ~all)
        pt_json_errs_add(e, "fp8.recipes", "%s: field 'fp8.recipes': not FP8 recipes",
                         origin);
    if ((unsigned)s->fp8_casts >= PT_FP8_CASTS_COUNT)
        pt_json_errs_add(e, "fp8.casts", "%s: field 'fp8.casts': not per_gemm or te", origin);
    if (s->fp8_recipes == 0 && s->fp8_default != PT_FP8_OFF)
        pt_json_errs_add(e, "fp8.default", "%s: field 'fp8.default' = \"%s\" but "
                         "'fp8.recipes' is empty", origin, pt_fp8_recipe_name(s->fp8_default));
    else if (s->fp8_recipes != 0 && ((unsigned)s->fp8_default >= PT_FP8_COUNT ||
                                     !(s->fp8_recipes & BIT(s->fp8_default))))
        pt_json_errs_add(e, "fp8.default", "%s: field 'fp8.default' = \"%s\" is not in "
                         "'fp8.recipes'", origin, pt_fp8_recipe_name(s->fp8_default));
}

static void stack_check_overlap(const pt_stack *s, const char *origin, pt_json_errs *e)
{
    in_range(origin, "overlap.tp_reach", s->tp_overlap_reach, 0, 1, false, e);
    in_range(origin, "overlap.compute_slowdown", s->comm_compute_slowdown, 0, 0.99, false, e);
    if (s->tp_overlap_rs && !s->tp_overlap)
        pt_json_errs_add(e, "overlap.tp_reduce_scatter", "%s: field "
                         "'overlap.tp_reduce_scatter' is true but 'overlap.tp' is false",
                         origin);
    if (s->tp_overlap && !s->sp)
        pt_json_errs_add(e, "overlap.tp", "%s: field 'overlap.tp' is true but "
                         "'parallelism.sp' is false: TP overlap pipelines sequence-parallel "
                         "collectives", origin);
    if (!s->dp_overlap_modes) {
        char all[64];
        pt_join_all_names(PT_DPO_COUNT, pt_dp_overlap_names, all, sizeof all);
        pt_json_errs_add(e, "overlap.dp", "%s: field 'overlap.dp' is empty: list at least one "
                         "of %s", origin, all);
    } else if ((unsigned)s->dp_overlap < PT_DPO_COUNT &&
             !(s->dp_overlap_modes & BIT(s->dp_overlap)))
        pt_json_errs_add(e, "overlap.dp_default", "%s: field 'overlap.dp_default' = \"%s\" is "
                         "not in 'overlap.dp'", origin, pt_dp_overlap_names[s->dp_overlap]);
    if (s->zero3_prefetch < 0 || s->zero3_prefetch > 8)
        pt_json_errs_add(e, "overlap.zero3_prefetch", "%s: field 'overlap.zero3_prefetch' = "
                         "%d: expected 0..8", origin, s->zero3_prefetch);
}

/* Records every problem of s, skipping fields e already has one for. */
static void stack_check(const pt_stack *s, const char *origin, pt_json_errs *e)
{
    stack_check_enums(s, origin, e);
    stack_check_attention(s, origin, e);
    if (!(s->zero_stages & 0xf))
        pt_json_errs_add(e, "parallelism.zero", "%s: field 'parallelism.zero' offers no ZeRO "
                         "stage", origin);
    stack_check_overlap(s, origin, e);
    stack_check_ptrun_kernels(s, origin, e);
    stack_check_fp8(s, origin, e);
    in_range(origin, "step_overhead_s", s->step_overhead_s, 0, 3600, false, e);
    in_range(origin, "moe_host_sync_s", s->moe_host_sync_s, 0, 1, false, e);
    if (s->bucket_bytes < 0 || (s->bucket_bytes > 0 && s->bucket_bytes < PT_MIN_BUCKET_BYTES) ||
        s->bucket_bytes > (INT64_C(1) << 40))
        pt_json_errs_add(e, "gradients.bucket_bytes", "%s: field 'gradients.bucket_bytes' = "
                         "%lld: expected 0 (the training's bucket) or 65536 up to 2^40",
                         origin, (long long)s->bucket_bytes);
    if (s->vocab_multiple < 1 || s->vocab_multiple > 65536)
        pt_json_errs_add(e, "loss.vocab_multiple", "%s: field 'loss.vocab_multiple' = %lld: "
                         "expected 1..65536", origin, (long long)s->vocab_multiple);
}

int pt_stack_validate(const pt_stack *s, const char *origin, pt_err *err)
{
    pt_json_errs errs;
    pt_json_errs_init(&errs);
    stack_check(s, origin, &errs);
    return pt_json_errs_finish(&errs, origin, err);
}

void pt_stack_cp_comms_text(const pt_stack *s, char *buf, size_t n)
{
    pt_join_names(s->cp_comms, PT_CPC_COUNT, pt_cp_comm_names, ", ", buf, n);
}

void pt_stack_moe_dispatch_text(const pt_stack *s, char *buf, size_t n)
{
    pt_join_names(s->moe_dispatches, PT_MOED_COUNT, pt_moe_dispatch_names, ", ", buf, n);
}

int pt_stack_check_layout(const pt_stack *s, const pt_layout *l, pt_err *err)
{
    if (l->tp > 1 && !s->tp)
        return pt_err_set(err, "layout tp=%d: stack '%s' has no tensor parallelism", l->tp,
                          s->name);
    if (l->pp > 1 && !s->pp)
        return pt_err_set(err, "layout pp=%d: stack '%s' has no pipeline parallelism", l->pp,
                          s->name);
    if (l->cp > 1 && !s->cp)
        return pt_err_set(err, "layout cp=%d: stack '%s' has no context parallelism", l->cp,
                          s->name);
    if (l->cp > 1 && !(s->cp_comms & BIT(l->cp_comm))) {
        char kinds[64];
        pt_stack_cp_comms_text(s, kinds, sizeof kinds);
        return pt_err_set(err, "layout cp_comm=%s: stack '%s' does not communicate context "
                          "parallelism that way (it runs: %s)", pt_cp_comm_name(l->cp_comm),
                          s->name, kinds);
    }
    if (l->sp && !s->sp)
        return pt_err_set(err, "layout sp=1: stack '%s' has no sequence parallelism", s->name);
    if ((l->ep > 1 || l->etp > 1) && !s->moe_dispatches)
        return pt_err_set(err, "layout %s=%d: stack '%s' has no expert parallelism",
                          l->ep > 1 ? "ep" : "etp", l->ep > 1 ? l->ep : l->etp, s->name);
    if (s->moe_dispatches && l->ep > 1 && !(s->moe_dispatches & BIT(l->moe_dispatch))) {
        char kinds[64];
        pt_stack_moe_dispatch_text(s, kinds, sizeof kinds);
        return pt_err_set(err, "layout moe_dispatch=%s: stack '%s' does not dispatch tokens "
                          "that way (it runs: %s)", pt_moe_dispatch_name(l->moe_dispatch),
                          s->name, kinds);
    }
    if (l->recompute == PT_RECOMPUTE_SELECTIVE && l->recompute_modules &&
        (l->recompute_modules & ~s->recompute_modules)) {
        char text[64];
        pt_layout_recompute_text(l, text, sizeof text);
        int r = 0;
        while (r < PT_RMOD_COUNT && !((l->recompute_modules & ~s->recompute_modules) & BIT(r)))
            r++;
        return pt_err_set(err, "layout recompute=%s: stack '%s' does not recompute module %s "
                          "(%s)", text, s->name, pt_rmod_name((pt_rmod)r),
                          s->recompute_modules ? "it names other modules"
                                               : "lists of modules are Megatron-Core's "
                                                 "--recompute-modules; here use none, "
                                                 "selective or full");
    }
    if (!(s->zero_stages & BIT(l->zero)))
        return pt_err_set(err, "layout zero=%d: stack '%s' does not offer ZeRO stage %d",
                          l->zero, s->name, l->zero);
    if (l->tp_overlap && !s->tp_overlap)
        return pt_err_set(err, "layout tp_overlap=1: stack '%s' does not overlap TP "
                               "communication", s->name);
    if (!(s->dp_overlap_modes & BIT(l->dp_overlap))) {
        char modes[64];
        pt_join_names(s->dp_overlap_modes, PT_DPO_COUNT, pt_dp_overlap_names, ", ", modes,
                      sizeof modes);
        return pt_err_set(err, "layout dp_overlap=%s: stack '%s' offers only %s",
                          pt_dp_overlap_names[l->dp_overlap], s->name, modes);
    }
    if (l->param_overlap && !s->param_overlap)
        return pt_err_set(err, "layout param_overlap=1: stack '%s' does not overlap the "
                               "parameter all-gather", s->name);
    if (l->param_overlap && l->zero != 1 && l->zero != 2)
        return pt_err_set(err, "layout param_overlap=1 with zero=%d: only ZeRO 1 and 2 gather "
                               "parameters after the optimizer step", l->zero);
    if (l->compress != PT_COMPRESS_NONE && !s->compression)
        return pt_err_set(err, "layout compress=%s: stack '%s' does not compress gradients",
                          pt_compress_name(l->compress), s->name);
    return 0;
}

/* ---- Writing ---------------------------------------------------------------------- */

/* {"gemm": [...], "attention": [...]}; NULL when out of memory. */
static json_t *ptrun_kernels_json(const pt_stack *s)
{
    json_t *o = json_object(), *gemm = json_array(), *attn = json_array();
    int bad = !o || !gemm || !attn;
    for (int r = 0; !bad && r < PT_GEMM_ROLE_COUNT; r++)
        if (pt_stack_ptrun_gemm(s, r))
            bad |= json_array_append_new(gemm, json_string(pt_gemm_role_kind((pt_gemm_role)r)));
    for (int i = 0; !bad && i < s->n_ptrun_attn; i++)
        bad |= json_array_append_new(attn, json_pack("{s:s, s:b, s:b}", "device",
                                                     s->ptrun_attn[i].device, "fwd",
                                                     s->ptrun_attn[i].fwd, "bwd",
                                                     s->ptrun_attn[i].bwd));
    if (!bad) {
        bad |= pt_json_set(o, "gemm", json_incref(gemm));
        bad |= pt_json_set(o, "attention", json_incref(attn));
    }
    json_decref(gemm);
    json_decref(attn);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* {"recipes": [...], "default": ..., "casts": ...}; NULL when out of memory. */
static json_t *fp8_json(const pt_stack *s)
{
    json_t *list = bit_names_json(s->fp8_recipes & ~BIT(PT_FP8_OFF), PT_FP8_COUNT,
                                  pt_fp8_recipe_names);
    if (!list)
        return NULL;
    return json_pack("{s:o, s:s, s:s}", "recipes", list, "default",
                     pt_fp8_recipe_name(s->fp8_default), "casts",
                     pt_fp8_casts_name(s->fp8_casts));
}

char *pt_stack_to_json(const pt_stack *s)
{
    json_t *root = json_object(), *attn = json_object(), *eff = json_array(),
           *par = json_object(), *zero = json_array(), *ovl = json_object(),
           *dp = bit_names_json(s->dp_overlap_modes, PT_DPO_COUNT, pt_dp_overlap_names),
           *grad = json_object(), *loss = json_object(),
           *ptk = ptrun_kernels_json(s);
    int bad = !root || !attn || !eff || !par || !zero || !ovl || !dp || !grad || !loss || !ptk;
    for (int i = 0; !bad && i < s->n_attn_eff; i++)
        bad |= json_array_append_new(eff, json_pack("{s:s, s:f, s:f}", "device",
                                                    s->attn_eff[i].device, "fwd",
                                                    s->attn_eff[i].fwd, "bwd",
                                                    s->attn_eff[i].bwd));
    for (int z = 0; !bad && z < 4; z++)
        if (s->zero_stages & BIT(z))
            bad |= json_array_append_new(zero, json_integer(z));
    if (!bad) {
        bad |= pt_json_set(attn, "impl", json_string(pt_attn_impl_name(s->attention)));
        bad |= pt_json_set(attn, "efficiency", json_incref(eff));
        bad |= pt_json_set(par, "tp", json_boolean(s->tp));
        bad |= pt_json_set(par, "pp", json_boolean(s->pp));
        bad |= pt_json_set(par, "cp", json_boolean(s->cp));
        bad |= pt_json_set(par, "sp", json_boolean(s->sp));
        bad |= pt_json_set(par, "zero", json_incref(zero));
        bad |= pt_json_set(par, "cp_comm",
                           bit_names_json(s->cp_comms, PT_CPC_COUNT, pt_cp_comm_names));
        bad |= pt_json_set(par, "cp_a2a_kv_replicate", json_boolean(s->cp_a2a_kv_replicate));
        if (s->moe_dispatches)
            bad |= pt_json_set(par, "moe_dispatch", bit_names_json(s->moe_dispatches,
                                                                   PT_MOED_COUNT,
                                                                   pt_moe_dispatch_names));
        if (s->recompute_modules)
            bad |= pt_json_set(par, "recompute_modules",
                               bit_names_json(s->recompute_modules, PT_RMOD_COUNT,
                                              pt_rmod_names));
        bad |= pt_json_set(ovl, "tp", json_boolean(s->tp_overlap));
        bad |= pt_json_set(ovl, "tp_reduce_scatter", json_boolean(s->tp_overlap_rs));
        bad |= pt_json_set(ovl, "tp_reach", json_real(s->tp_overlap_reach));
        bad |= pt_json_set(ovl, "tp_backward_async", json_boolean(s->tp_backward_async));
        bad |= pt_json_set(ovl, "dp", json_incref(dp));
        bad |= pt_json_set(ovl, "dp_default", json_string(pt_dp_overlap_names[s->dp_overlap]));
        bad |= pt_json_set(ovl, "param_gather", json_boolean(s->param_overlap));
        bad |= pt_json_set(ovl, "zero3_prefetch", json_integer(s->zero3_prefetch));
        bad |= pt_json_set(ovl, "compute_slowdown", json_real(s->comm_compute_slowdown));
        bad |= pt_json_set(ovl, "p2p", json_string(p2p_names[s->p2p]));
        bad |= pt_json_set(grad, "bucket_rule", json_string(bucket_names[s->bucket_rule]));
        bad |= pt_json_set(grad, "bucket_bytes", json_integer(s->bucket_bytes));
        bad |= pt_json_set(grad, "reduce_dtype",
                           json_string(s->grad_reduce_dtype == PT_DTYPE_BF16 ? "bf16" : "fp32"));
        bad |= pt_json_set(grad, "compression", json_boolean(s->compression));
        bad |= pt_json_set(loss, "fused_xent", json_boolean(s->fused_xent));
        bad |= pt_json_set(loss, "vocab_multiple", json_integer(s->vocab_multiple));
        bad |= pt_json_set(loss, "vocab_per_tp", json_boolean(s->vocab_per_tp));
        bad |= pt_json_set(root, "name", json_string(s->name));
        bad |= pt_json_set(root, "about", json_string(s->about));
        bad |= pt_json_set(root, "attention", json_incref(attn));
        bad |= pt_json_set(root, "parallelism", json_incref(par));
        bad |= pt_json_set(root, "overlap", json_incref(ovl));
        bad |= pt_json_set(root, "gradients", json_incref(grad));
        bad |= pt_json_set(root, "loss", json_incref(loss));
        bad |= pt_json_set(root, "step_overhead_s", json_real(s->step_overhead_s));
        bad |= pt_json_set(root, "kernels", json_string(pt_kernel_style_name(s->kernels)));
        bad |= pt_json_set(root, "selective", json_string(pt_selective_name(s->selective)));
        bad |= pt_json_set(root, "fused_epilogues", json_boolean(s->fused_epilogues));
        if (s->grouped_gemm_streams > 1)
            bad |= pt_json_set(root, "grouped_gemm_streams",
                               json_integer(s->grouped_gemm_streams));
        if (s->moe_host_sync_s > 0)
            bad |= pt_json_set(root, "moe_host_sync_s", json_real(s->moe_host_sync_s));
        bad |= pt_json_set(root, "ptrun_kernels", json_incref(ptk));
        if (s->fp8_recipes)
            bad |= pt_json_set(root, "fp8", fp8_json(s));
    }
    char *text = bad ? NULL : pt_json_dump(root);
    json_t *all[] = {root, attn, eff, par, zero, ovl, dp, grad, loss, ptk};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        json_decref(all[i]);
    return text;
}

/* What ptrun's experts (runtime/moe.c) train so far: experts without biases or shared
 * experts. tp with sp and cp fold into ep and etp as Megatron-Core's parallel folding
 * does, and every ZeRO stage shards the experts' state over their expert-data-parallel
 * group. One message per limit, naming the key. */
static int ptrun_moe_check(const pt_stack *s, const pt_model *m, pt_err *err)
{
    if (m->moe.shared_experts > 0 || m->bias)
        return pt_err_set(err, "model %s: stack '%s' trains experts without %s so far",
                          m->name, s->name, m->bias ? "biases" : "shared experts");
    return 0;
}

int pt_stack_check_model(const pt_stack *s, const pt_model *m, const pt_layout *l, pt_err *err)
{
    if (m->moe.experts > 0 && !s->moe_dispatches)
        return pt_err_set(err, "model %s is a mixture of experts, which stack '%s' does not "
                          "run (stacks that do: megatron-core, ptrun)", m->name, s->name);
    if (m->moe.experts > 0 && pt_stack_is_ptrun(s) && ptrun_moe_check(s, m, err))
        return -1;
    if ((m->window > 0 || m->attn_sinks) && s->attention != PT_ATTN_FLASH)
        return pt_err_set(err, "model %s has %s, which the attention of stack '%s' does not "
                          "run (stacks with flash attention do: megatron-core, fsdp)", m->name,
                          m->window > 0 ? "banded attention (window)" : "attention sinks",
                          s->name);
    if (m->moe.experts > 0 && l->compress != PT_COMPRESS_NONE)
        return pt_err_set(err, "layout compress=%s: gradient compression is not planned for "
                          "a mixture of experts (model %s)", pt_compress_name(l->compress),
                          m->name);
    if (pt_stack_check_layout(s, l, err))
        return -1;
    int u = pt_layout_a2a(l);
    int64_t kv = pt_kv_heads_rank(m, l->tp);
    /* (KV heads that neither divide by the degree nor divide it break a layout rule) */
    if (u > 1 && kv % u && u % kv == 0 && !s->cp_a2a_kv_replicate)
        return pt_err_set(err, "layout cp_comm=%s: stack '%s' needs the KV heads per tp rank "
                          "(%lld) divisible by the all-to-all's degree %d: it replicates "
                          "none; use more tp, a smaller all-to-all or cp_comm=p2p",
                          pt_cp_comm_name(l->cp_comm), s->name, (long long)kv, u);
    return 0;
}

int pt_layout_parse_stack(const char *text, int64_t world, int64_t global_batch,
                          const pt_stack *s, pt_layout *l, pt_err *err)
{
    l->dp_overlap = s->dp_overlap;
    if (pt_layout_parse(text, world, global_batch, l, err))
        return -1;
    /* a key is given when it starts the text or follows a comma */
    bool given = strncmp(text, "param_overlap=", 14) == 0 || strstr(text, ",param_overlap=");
    if (!given && s->param_overlap && (l->zero == 1 || l->zero == 2))
        l->param_overlap = true;
    return pt_stack_check_layout(s, l, err);
}
