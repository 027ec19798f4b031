/*
 * ptkernels — every compute op the runtime needs to train the GPT-2 family (learned
 * positions, LayerNorm, GELU, tied embeddings) and the LLaMA family (RoPE, RMSNorm,
 * SwiGLU, grouped-query attention, untied head), forward and backward, behind one
 * backend-neutral table of function pointers (in the manner of ggml's backends).
 * kernels/cpu/ fills it in C with OpenBLAS (fp32; the reference); kernels/cuda/ fills
 * it in CUDA C with cuBLASLt (bf16 data, fp32 accumulation) where nvcc is present.
 *
 * This library owns arithmetic only: no communication, no model structure. Ops that
 * parallel layouts split (vocab-parallel embedding and cross-entropy, attention over
 * one K/V block for context parallelism) expose the local pieces; the runtime
 * combines them across ranks.
 *
 * Dimension letters: the one legend of common/common.h (b micro-batch, s sequence,
 * h hidden, a heads, k KV heads, d head dim, f FFN size, v vocabulary, t tp size; n a
 * count of rows, usually b·s, or of elements, said where used).
 *
 * ---- The contract of the table ---------------------------------------------------
 *
 * Buffers. Every tensor is a raw pointer with its sizes passed explicitly, row-major,
 * the last dimension contiguous; each pointer parameter carries its shape in a
 * trailing comment. Pointers are the backend's memory (allocate and move data with
 * the table's alloc/free/copy/zero): host memory on CPU, device memory on CUDA.
 * The C type says the element type on CPU, where everything is fp32. On a backend
 * whose act_dtype is PT_KDTYPE_BF16, a `float *` parameter marked [act] in its shape
 * comment holds bf16 elements behind the same pointer type (weights, activations and
 * activation gradients); every parameter not marked [act] is fp32 on every backend
 * (weight gradients, norm statistics, log-sum-exp, losses, optimizer state, master
 * weights). The runtime sizes buffers with pt_kdtype_bytes(kn->act_dtype) and never
 * dereferences a device buffer.
 *
 * Gradients. Every *_backward ACCUMULATES (+=) into each gradient it produces, so
 * that gradient accumulation and branches that share an input (the residual stream,
 * tied embeddings) need no extra adds; the caller zeroes gradients once per step.
 * A NULL gradient pointer means "not needed" where the parameter's comment says
 * "or NULL". Gradient outputs must not alias inputs unless the comment says they may.
 * The exceptions: the fused cross-entropy WRITES dlogits (it is a forward and a
 * backward in one op, as in llm.c), attention_backward writes dq, dk and dv when
 * its accumulate argument is 0, and of the mixture-of-experts ops moe_route_backward
 * writes dlogits and moe_combine_backward writes dy and dw (each the only producer of
 * its gradient; their comments say so).
 *
 * Determinism. The same inputs on the same backend, thread count and machine give
 * bit-identical outputs: no floating-point atomics, every reduction in a fixed order.
 * On CPU, OpenBLAS splits a GEMM by thread count, so bit-identity holds for a fixed
 * thread count (set once with pt_kernels_cpu's argument); it is checked by the tests.
 * The one opt-out: the CUDA backend opened with PT_KCUDA_DETERMINISTIC=0 lets cuDNN's
 * attention backward sum dQ over key blocks with fp32 atomics (its about line says
 * so); nothing else changes.
 *
 * Errors. Ops return nothing: on CPU they cannot fail, and a device backend records
 * its first failure, which sync() returns (0 ok, -1 with kn->err filled). alloc
 * returns NULL on failure. Invalid sizes are the caller's bug, not a runtime error.
 */
#ifndef PT_KERNELS_H
#define PT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Data types ------------------------------------------------------------------ */

typedef enum { PT_KDTYPE_F32 = 0, PT_KDTYPE_BF16 = 1 } pt_kdtype;

size_t pt_kdtype_bytes(pt_kdtype dt);   /* 4 or 2 */
const char *pt_kdtype_name(pt_kdtype dt); /* "fp32", "bf16" */

typedef enum { PT_KCOPY_H2H, PT_KCOPY_H2D, PT_KCOPY_D2H, PT_KCOPY_D2D } pt_kcopy;

/* The 8-bit floating-point formats (OCP 8-bit Floating Point Specification, 2023;
 * Micikevicius et al. 2022, "FP8 Formats for Deep Learning"): E4M3 (bias 7, finite
 * max 448, the all-ones mantissa at the top exponent is NaN, no infinities) and E5M2
 * (bias 15, IEEE-like: max 57344, infinities and NaNs). */
typedef enum { PT_KFP8_E4M3 = 0, PT_KFP8_E5M2 = 1 } pt_kfp8;

/* A tensor's FP8 scaling state (fp8_* ops below): PT_KFP8_META floats, then the amax
 * history of delayed scaling (hist_len floats, newest first). */
enum {
    PT_KFP8_SCALE = 0,      /* multiplies x before the rounding */
    PT_KFP8_SCALE_INV = 1,  /* 1 / scale: multiplies the GEMM's accumulator */
    PT_KFP8_AMAX = 2,       /* max |x| seen since the last fp8_scale */
    PT_KFP8_OVER = 3,       /* elements saturated by fp8_cast (a count, accumulated) */
    PT_KFP8_UNDER = 4,      /* non-zero elements fp8_cast flushed to zero (a count) */
    PT_KFP8_META = 5,       /* floats before the history */
};

/* The largest finite value of format fmt: 448 or 57344. */
float pt_kfp8_max(pt_kfp8 fmt);
/* x rounded to format fmt (nearest, ties to even; saturated to ±max; a NaN to the
 * format's NaN with its sign kept, S.1111.111 or S.11111.11), as a byte, and a byte's
 * value (exact in float). */
uint8_t pt_kfp8_from_f32(float x, pt_kfp8 fmt);
float pt_kfp8_to_f32(uint8_t q, pt_kfp8 fmt);

/* orthonormalize's widest matrix (PowerSGD's largest rank, planner.h's
 * PT_POWERSGD_MAX_RANK) */
enum { PT_K_ORTHO_MAX_COLS = 1024 };
/* The most linear layers one matmul_forward_shared or matmul_wgrad_shared call takes. */
enum { PT_K_SHARED_MAX = 3 };

/* How a mixture-of-experts router turns a token's logits into expert scores
 * (moe_route_forward): a softmax over the experts (Shazeer et al. 2017; Mixtral,
 * DeepSeek-V2) or each logit's sigmoid (DeepSeek-V3). */
typedef enum { PT_KMOE_SOFTMAX = 0, PT_KMOE_SIGMOID = 1 } pt_kmoe_score;

/* ---- Descriptions the table's calls take ------------------------------------------- */

/* The largest shapes a model's ops run with on this rank, over every call of a step
 * (training, recomputation, validation): what reserve sizes the backend's temporaries
 * for. A field left 0 reserves nothing for the ops it covers. */
typedef struct {
    int64_t rows;        /* largest n (= b·s, tokens of a micro-batch here) of a norm
                          * backward, matmul_backward, embed_backward or attention */
    int64_t cols;        /* largest h of a norm backward, and oc of a matmul_backward
                          * with dbias (3h/t, f/t, v/t, h, ...) */
    int heads;           /* largest a (query heads here) of an attention_backward */
    int kv_heads;        /* its kh and d: the CUDA backend's cuDNN attention backward */
    int head_dim;        /* keeps bf16 dq, dk and dv in temporaries when it accumulates
                          * (context parallelism's blocks; reserve counts them always) */
    int attn_batch;      /* largest b and sq = skv of one attention_backward call: */
    int attn_seq;        /* cuDNN's backward keeps a b·a·sq·skv workspace (backend.cu) */
    int vocab_rows;      /* largest vr of an embed_backward with dwte (its h at most
                          * cols) */
    int adamw_tensors;   /* largest count of an adamw_multi */
    int64_t moe_assign;  /* largest n·k (tokens times experts per token) of a
                          * moe_dispatch_plan: the CUDA backend sorts them */
    int moe_experts;     /* its largest E */
} pt_k_scratch_shape;

/* One tensor (or slice of one) of an adamw_multi: the buffers of the per-tensor adamw
 * below, with its own weight decay. Pointers are backend memory. */
typedef struct {
    float *params;                 /* (n) fp32 master */
    uint16_t *params_bf16;         /* (n) bf16 or NULL */
    const float *grads;            /* (n) fp32 */
    float *m;                      /* (n) fp32 */
    float *v;                      /* (n) fp32 */
    int64_t n;
    float weight_decay;
} pt_k_adamw_tensor;

/* The step-wide arguments of an adamw_multi. The clipping factor is computed by the
 * backend from the global sum of squares, where the op runs:
 *     grad_scale = pt_k_clip_scale(sqrt(*sumsq / copies), max_norm),
 * the same float to the bit as the host computing it (1 when max_norm <= 0, and then
 * sumsq is not read and may be NULL). */
typedef struct {
    float lr, beta1, beta2, eps;
    int step;                      /* counts from 1 */
    double max_norm;               /* <= 0: no clipping */
    const double *sumsq;           /* (1) backend memory: the sum of squares of every
                                    * gradient over every rank (sumsq_acc, then the
                                    * caller's all-reduce), read when the op runs */
    double copies;                 /* > 0: how many times the sum counts each element
                                    * (replicas holding the same gradients) */
} pt_k_adamw_args;

/* ---- The backend table ------------------------------------------------------------ */

typedef struct pt_kernels pt_kernels;

struct pt_kernels {
    const char *name;          /* "cpu", "cuda" */
    pt_kdtype act_dtype;       /* element type of [act] buffers: fp32 on CPU, bf16 on CUDA */
    void *priv;                /* the backend's own context (handles, streams, scratch) */
    char err[256];             /* first failure of a device backend; "" when none */
    char about[256];           /* the device and the libraries a device backend runs
                                * through, for the records ptprofile keeps; "" on CPU */
    int nondeterministic;      /* 1: opened allowing kernels that are not bit-identical
                                * run to run (CUDA: PT_KCUDA_DETERMINISTIC=0), whose
                                * timings are not those of the deterministic kernels the
                                * cost tables price; 0 on CPU */
    /* Where a device backend's notes go: a fallback it took (cuDNN declining an
     * attention call, said once per direction) or a temporary reserve left out, one line
     * each without the newline, called on the thread that made the op's call. NULL (as
     * a backend opens) drops them: the caller sets both fields after opening, and
     * tools/ print each line on stderr as "ptkernels: note: LINE". */
    void (*note)(void *note_arg, const char *line);
    void *note_arg;

    /* -- Lifetime, memory and synchronisation -- */
    void (*destroy)(pt_kernels *kn);
    /* bytes of backend memory, 64-byte aligned, contents undefined; NULL on failure */
    void *(*alloc)(pt_kernels *kn, size_t bytes);
    void (*free)(pt_kernels *kn, void *p);
    void (*copy)(pt_kernels *kn, void *dst, const void *src, size_t bytes, pt_kcopy dir);
    void (*zero)(pt_kernels *kn, void *p, size_t bytes);
    /* rows pieces of row_bytes each, from src (one every src_pitch bytes) to dst (one
     * every dst_pitch bytes), both backend memory, queued as copy's D2D: a strided
     * gather or scatter in one call (cudaMemcpy2DAsync on CUDA). Pitches are at least
     * row_bytes; the pieces must not overlap. */
    void (*copy_rows)(pt_kernels *kn, void *dst, size_t dst_pitch, const void *src,
                      size_t src_pitch, size_t row_bytes, size_t rows);
    /* waits for queued work; 0, or -1 after any failure (message in kn->err) */
    int (*sync)(pt_kernels *kn);

    /* -- Temporaries (optional, both or neither: NULL on a backend whose ops allocate
     * nothing a step could wait on, as the CPU's) --
     * Some ops need device temporaries (the partial sums of a deterministic column
     * reduction, a sort's space, the descriptor table of adamw_multi). Without reserve
     * the backend grows them when a call needs more, which waits for the stream and
     * frees and allocates device memory: harmless in a test, a hang in a step whose
     * collectives run on another stream. So the runtime calls reserve once at setup,
     * before the first step, with the largest shapes of every op; reserve allocates
     * everything then (waiting for the stream) and marks the backend steady: from then
     * on no op allocates or frees device memory, and a call that would need more than
     * was reserved does nothing and records an error naming the shortfall (returned by
     * sync) instead of growing. Call reserve again between steps to grow (larger
     * validation batches); it never shrinks.
     * scratch_bytes says how many bytes of backend memory reserve holds for shape
     * (for the memory plan); reserve returns 0, or -1 with kn->err set. */
    size_t (*scratch_bytes)(pt_kernels *kn, const pt_k_scratch_shape *shape);
    int (*reserve)(pt_kernels *kn, const pt_k_scratch_shape *shape);

    /* -- Device timers (optional, all three or none: NULL on a backend whose ops
     * finish before they return, as the CPU's, where the host clock around a call is
     * its time) --
     * event_record records a timing event on the stream the ops run on, behind the
     * work queued so far, without waiting. *event names an event of the backend's
     * pool: a negative value asks for a free one, whose index is stored there; the
     * caller keeps it, records it again as often as it likes (every step: no event
     * is created after the first) and gives it back with event_release. 0, or -1
     * with kn->err set.
     * event_elapsed sets *ms to the milliseconds from event `from` to event `to`
     * (negative when `to` ran first), both recorded and complete: call it after
     * sync(). CUDA's resolution is about half a microsecond. 0, or -1 with kn->err
     * set (an index not handed out, an event not recorded).
     * event_release returns an event to the pool (a negative index is ignored); the
     * pool's events are destroyed with the backend. */
    int (*event_record)(pt_kernels *kn, int *event);
    int (*event_elapsed)(pt_kernels *kn, int from, int to, double *ms);
    void (*event_release)(pt_kernels *kn, int event);

    /* -- Token and position embedding (GPT-2: wte and wpe; LLaMA: wte only) --
     * out[b,s,:] = wte[tok - v0, :] (when v0 <= tok < v0 + vr, else 0)
     *            + wpe[pos0 + s, :] (when wpe is non-NULL).
     * Vocab-parallel: a rank holds rows [v0, v0+vr) of the vocabulary and out is a
     * partial sum the runtime all-reduces over tp, so pass wpe on one tp rank only.
     * pos0 is the position of the first token (context parallelism). */
    void (*embed_forward)(pt_kernels *kn,
                          float *out,              /* (b, s, h) [act] */
                          const int32_t *tokens,   /* (b, s) */
                          const float *wte,        /* (vr, h) [act] */
                          const float *wpe,        /* (>= pos0+s, h) [act] or NULL */
                          int b, int s, int h, int v0, int vr, int pos0);
    void (*embed_backward)(pt_kernels *kn,
                           float *dwte,            /* (vr, h) fp32 or NULL */
                           float *dwpe,            /* (>= pos0+s, h) fp32 or NULL */
                           const float *dout,      /* (b, s, h) [act] */
                           const int32_t *tokens,  /* (b, s) */
                           int b, int s, int h, int v0, int vr, int pos0);

    /* -- LayerNorm (Ba et al. 2016): out = (inp - mean) * rstd * w + bias, per row,
     * rstd = 1/sqrt(var + eps) with the biased variance (PyTorch's LayerNorm). */
    void (*layernorm_forward)(pt_kernels *kn,
                              float *out,          /* (n, h) [act] */
                              float *mean,         /* (n) fp32, saved for backward */
                              float *rstd,         /* (n) fp32, saved for backward */
                              const float *inp,    /* (n, h) [act] */
                              const float *w,      /* (h) [act] */
                              const float *bias,   /* (h) [act] */
                              int64_t n, int h, float eps);
    void (*layernorm_backward)(pt_kernels *kn,
                               float *dinp,        /* (n, h) [act] */
                               float *dw,          /* (h) fp32 */
                               float *dbias,       /* (h) fp32 */
                               const float *dout,  /* (n, h) [act] */
                               const float *inp,   /* (n, h) [act] */
                               const float *w,     /* (h) [act] */
                               const float *mean,  /* (n) */
                               const float *rstd,  /* (n) */
                               int64_t n, int h);

    /* -- RMSNorm (Zhang & Sennrich 2019): out = inp * rstd * w,
     * rstd = 1/sqrt(mean(inp^2) + eps). */
    void (*rmsnorm_forward)(pt_kernels *kn,
                            float *out,            /* (n, h) [act] */
                            float *rstd,           /* (n) fp32, saved for backward */
                            const float *inp,      /* (n, h) [act] */
                            const float *w,        /* (h) [act] */
                            int64_t n, int h, float eps);
    void (*rmsnorm_backward)(pt_kernels *kn,
                             float *dinp,          /* (n, h) [act] */
                             float *dw,            /* (h) fp32 */
                             const float *dout,    /* (n, h) [act] */
                             const float *inp,     /* (n, h) [act] */
                             const float *w,       /* (h) [act] */
                             const float *rstd,    /* (n) */
                             int64_t n, int h);

    /* -- The residual add fused with the norm after it --
     * res = inp1 + inp2 (the residual stream, rounded to [act]), then the norm of res
     * into out: to the bit what residual_forward followed by layernorm_forward (or
     * rmsnorm_forward) on res gives on the same backend, in one pass over the rows (on
     * CUDA one kernel, 16-byte loads where h and the pointers allow). res may equal
     * inp1 or inp2; out must not alias any input. */
    void (*residual_layernorm_forward)(pt_kernels *kn,
                                       float *res,         /* (n, h) [act] inp1 + inp2 */
                                       float *out,         /* (n, h) [act] */
                                       float *mean,        /* (n) fp32 */
                                       float *rstd,        /* (n) fp32 */
                                       const float *inp1,  /* (n, h) [act] */
                                       const float *inp2,  /* (n, h) [act] */
                                       const float *w,     /* (h) [act] */
                                       const float *bias,  /* (h) [act] */
                                       int64_t n, int h, float eps);
    void (*residual_rmsnorm_forward)(pt_kernels *kn,
                                     float *res,           /* (n, h) [act] inp1 + inp2 */
                                     float *out,           /* (n, h) [act] */
                                     float *rstd,          /* (n) fp32 */
                                     const float *inp1,    /* (n, h) [act] */
                                     const float *inp2,    /* (n, h) [act] */
                                     const float *w,       /* (h) [act] */
                                     int64_t n, int h, float eps);

    /* -- Linear layer: out = inp · w^T + bias, with w stored (oc, ic) as in
     * PyTorch's Linear and llm.c. Rows n = b·s; ic, oc are the in and out features
     * (h, 3h/t, f/t, v/t, ... depending on the layer). Backward:
     * dinp += dout · w, dw += dout^T · inp, dbias += column sums of dout. */
    void (*matmul_forward)(pt_kernels *kn,
                           float *out,             /* (n, oc) [act] */
                           const float *inp,       /* (n, ic) [act] */
                           const float *w,         /* (oc, ic) [act] */
                           const float *bias,      /* (oc) [act] or NULL */
                           int64_t n, int ic, int oc);
    void (*matmul_backward)(pt_kernels *kn,
                            float *dinp,           /* (n, ic) [act] or NULL */
                            float *dw,             /* (oc, ic) fp32 or NULL */
                            float *dbias,          /* (oc) fp32 or NULL */
                            const float *dout,     /* (n, oc) [act] */
                            const float *inp,      /* (n, ic) [act] */
                            const float *w,        /* (oc, ic) [act] */
                            int64_t n, int ic, int oc);
    /* matmul_dgrad: a linear layer's input gradient WRITTEN, dinp = dout · w: the first
     * data gradient into a buffer, which matmul_backward (it adds) needs zeroed first,
     * a pass of memset and a read of the zeros more. On CUDA the product with beta = 0;
     * on CPU, to the bit, matmul_backward's dinp into a zeroed buffer. dinp must not
     * alias dout or w. */
    void (*matmul_dgrad)(pt_kernels *kn,
                         float *dinp,              /* (n, ic) [act], written */
                         const float *dout,        /* (n, oc) [act] */
                         const float *w,           /* (oc, ic) [act] */
                         int64_t n, int ic, int oc);
    /* -- Linear layers fused with the GELU around them (the MLP of GELU models) --
     * matmul_forward_gelu: pre = inp · w^T + bias and out = gelu(pre) in one op, the
     * MLP's up projection and its activation (pre is kept for the backward). On CUDA,
     * where the backend fuses (PT_KCUDA_EPILOGUES: by default on compute capability
     * 9.0 and newer) and cuBLASLt takes the call (oc a multiple of 8, pre and bias
     * 16-byte aligned, an algorithm offered), cuBLASLt's GELU_AUX_BIAS epilogue
     * (GELU_AUX without a bias) writes both from the GEMM: out is the GELU of the fp32
     * sum, pre that sum rounded (the separate ops take the GELU of the rounded pre).
     * Otherwise, and on CPU (to the bit), matmul_forward then gelu_forward. */
    void (*matmul_forward_gelu)(pt_kernels *kn,
                                float *out,        /* (n, oc) [act]: gelu(pre) */
                                float *pre,        /* (n, oc) [act] */
                                const float *inp,  /* (n, ic) [act] */
                                const float *w,    /* (oc, ic) [act] */
                                const float *bias, /* (oc) [act] or NULL */
                                int64_t n, int ic, int oc);
    /* matmul_forward_res: out = inp · w^T + bias + res, a row-parallel layer's output
     * with the residual add after it (tp = 1, nothing between the product and the add).
     * On CUDA, where the backend fuses and cuBLASLt takes the call (as
     * matmul_forward_gelu), res is the product's C with beta = 1: the fp32 sum plus res
     * is rounded once. Otherwise, and on CPU (to the bit), matmul_forward into out, then
     * residual_forward(out, out, res). out must not alias res, inp or w. */
    void (*matmul_forward_res)(pt_kernels *kn,
                               float *out,         /* (n, oc) [act] */
                               const float *inp,   /* (n, ic) [act] */
                               const float *w,     /* (oc, ic) [act] */
                               const float *bias,  /* (oc) [act] or NULL */
                               const float *res,   /* (n, oc) [act] */
                               int64_t n, int ic, int oc);
    /* matmul_backward_dgelu: the input gradient of a linear layer whose input was
     * gelu(pre), taken through the GELU: dpre = (dout · w) ⊙ gelu'(pre), WRITTEN (the
     * MLP's down projection's data gradient and the activation's backward in one op).
     * On CUDA, under the same conditions with ic a multiple of 8, cuBLASLt's DGELU
     * epilogue (dout · w is not rounded to bf16 before the product); otherwise the
     * product is written to dpre, rounded, and multiplied in place by gelu'(pre) with
     * gelu_backward's formula. On CPU, to the bit, matmul_backward's dinp into a zeroed
     * buffer, then gelu_backward into a zeroed dpre. dpre must not alias pre, dout or
     * w. */
    void (*matmul_backward_dgelu)(pt_kernels *kn,
                                  float *dpre,       /* (n, ic) [act], written */
                                  const float *dout, /* (n, oc) [act] */
                                  const float *w,    /* (oc, ic) [act] */
                                  const float *pre,  /* (n, ic) [act] */
                                  int64_t n, int ic, int oc);
    /* -- Linear layers of one input and one width (attention's q, k and v when they
     * are as wide: multi-head attention) --
     * matmul_forward_shared: out[i] = inp · w[i]^T + bias[i] for i < count;
     * matmul_wgrad_shared: dw[i] += dout[i]^T · inp and dbias[i] += the column sums of
     * dout[i] (dbias NULL, or its entries NULL, for none), the weight gradients of
     * matmul_backward. 1 <= count <= PT_K_SHARED_MAX. On CUDA, where the backend fuses
     * (as matmul_forward_gelu) and the pointers of each array lie at equal steps (a
     * layer's q, k and v weights and biases sit end to end in the parameter buffer,
     * its q, k and v activations in consecutive buffers), one strided-batched
     * cuBLASLt call with the input's batch stride 0 (the bias and BGRADB's bias
     * gradient stepped by CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE): one launch whose
     * count·tiles fill the GPU better than count launches of a third as many.
     * Otherwise, and on CPU (to the bit), count matmul_forward or matmul_backward
     * calls. */
    void (*matmul_forward_shared)(pt_kernels *kn, int count,
                                  float *const out[],        /* (n, oc) [act] each */
                                  const float *inp,          /* (n, ic) [act] */
                                  const float *const w[],    /* (oc, ic) [act] each */
                                  const float *const bias[], /* (oc) [act] each, or NULL */
                                  int64_t n, int ic, int oc);
    void (*matmul_wgrad_shared)(pt_kernels *kn, int count,
                                float *const dw[],           /* (oc, ic) fp32 each */
                                float *const dbias[],        /* (oc) fp32 each, or NULL */
                                const float *const dout[],   /* (n, oc) [act] each */
                                const float *inp,            /* (n, ic) [act] */
                                int64_t n, int ic, int oc);
    /* General GEMM, the transposes the layers do not cover (optional; may be NULL):
     * c = alpha · op(a) · op(b) + beta · c, op(x) = x or x^T, c (m, n) with leading
     * dimension ldc; a is (m, kk) or (kk, m) when transposed, likewise b. Row-major. */
    void (*gemm)(pt_kernels *kn, int trans_a, int trans_b, int m, int n, int kk,
                 float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc);   /* all [act] */

    /* -- Rotary position embedding (Su et al. 2021, RoFormer), on q (nh = a) and on
     * k (nh = k): each pair (x[2i], x[2i+1]) of a head is rotated by the angle
     * (pos0 + s) · theta^(-2i/d), as in Meta's LLaMA. theta is 10000 in LLaMA 2,
     * 500000 in LLaMA 3. out may equal inp (in place). Positions below 2^24 and d at
     * most 512 (the CUDA backend's fp32 angles; a larger d is recorded as an error). */
    void (*rope_forward)(pt_kernels *kn,
                         float *out,               /* (b, s, nh, d) [act] */
                         const float *inp,         /* (b, s, nh, d) [act] */
                         int b, int s, int nh, int d, int pos0, float theta);
    void (*rope_backward)(pt_kernels *kn,
                          float *dinp,             /* (b, s, nh, d) [act], not dout */
                          const float *dout,       /* (b, s, nh, d) [act] */
                          int b, int s, int nh, int d, int pos0, float theta);

    /* -- Causal attention with grouped queries over one K/V block --
     * Query head j attends with KV head j / (a/k) (a % k == 0; k == a is MHA, k == 1
     * is MQA). Queries sit at positions [q0, q0+sq), keys at [k0, k0+skv); with
     * causal != 0, query i sees key j when k0 + j <= q0 + i. Scores are scaled by
     * 1/sqrt(d). lse is the natural log of the softmax denominator of each row
     * (log-sum-exp of its scaled scores); a row that sees no key gets out = 0 and
     * lse = -INFINITY. For context parallelism, run the forward on each K/V block
     * and merge the results with attention_combine.
     * The backward recomputes probabilities from q, k and lse (as FlashAttention-2,
     * Dao 2023) and needs the FINAL out and lse of the whole row (after combining
     * every block), so that each K/V block's backward is exact on its own. With
     * accumulate != 0 the backward adds into dq, dk and dv (the rule above; context
     * parallelism's blocks); with 0 it WRITES them and never reads their old contents
     * (one block: no zeroing beforehand, and the cuDNN backward writes them directly
     * rather than into temporaries added afterwards). */
    void (*attention_forward)(pt_kernels *kn,
                              float *out,          /* (b, sq, a, d) [act] */
                              float *lse,          /* (b, a, sq) fp32 */
                              const float *q,      /* (b, sq, a, d) [act] */
                              const float *k,      /* (b, skv, k, d) [act] */
                              const float *v,      /* (b, skv, k, d) [act] */
                              int b, int sq, int skv, int a, int kh, int d,
                              int q0, int k0, int causal);
    void (*attention_backward)(pt_kernels *kn,
                               float *dq,          /* (b, sq, a, d) [act] */
                               float *dk,          /* (b, skv, k, d) [act] */
                               float *dv,          /* (b, skv, k, d) [act] */
                               const float *dout,  /* (b, sq, a, d) [act] */
                               const float *q,     /* (b, sq, a, d) [act] */
                               const float *k,     /* (b, skv, k, d) [act] */
                               const float *v,     /* (b, skv, k, d) [act] */
                               const float *out,   /* (b, sq, a, d) [act] final */
                               const float *lse,   /* (b, a, sq) final */
                               int b, int sq, int skv, int a, int kh, int d,
                               int q0, int k0, int causal, int accumulate);
    /* Merges the result of another K/V block into (out, lse), in place:
     * lse' = log(exp(lse) + exp(lse2)), out' = out·exp(lse - lse') + out2·exp(lse2 - lse').
     * Combining in a fixed block order keeps results deterministic. */
    void (*attention_combine)(pt_kernels *kn,
                              float *out,          /* (b, sq, a, d) [act] in/out */
                              float *lse,          /* (b, a, sq) in/out */
                              const float *out2,   /* (b, sq, a, d) [act] */
                              const float *lse2,   /* (b, a, sq) */
                              int b, int sq, int a, int d);

    /* -- Activations and the residual stream -- */
    /* GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2. */
    void (*gelu_forward)(pt_kernels *kn,
                         float *out,               /* (n) [act] */
                         const float *inp,         /* (n) [act] */
                         int64_t n);
    void (*gelu_backward)(pt_kernels *kn,
                          float *dinp,             /* (n) [act] */
                          const float *dout,       /* (n) [act] */
                          const float *inp,        /* (n) [act] */
                          int64_t n);
    /* The GELU before an FP8 cast of its output (runtime/fp8.c): gelu_forward, and
     * gelu_backward with dinp WRITTEN (0 + dout · gelu'(inp), what gelu_backward adds into
     * a zeroed buffer), each also taking the FP8 amax of its output as stored:
     * meta[AMAX] = max |out| (NaN ignored; what it held is dropped), the value zero and
     * fp8_amax on the output would leave, without reading the output again. Optional. */
    void (*gelu_forward_amax)(pt_kernels *kn,
                              float *out,          /* (n) [act] */
                              const float *inp,    /* (n) [act] */
                              int64_t n,
                              float *meta);        /* PT_KFP8_META+ fp32 */
    void (*gelu_backward_amax)(pt_kernels *kn,
                               float *dinp,        /* (n) [act], written */
                               const float *dout,  /* (n) [act] */
                               const float *inp,   /* (n) [act] */
                               int64_t n,
                               float *meta);       /* PT_KFP8_META+ fp32 */
    /* SwiGLU (Shazeer 2020): out = silu(gate) · up, silu(x) = x / (1 + e^-x). */
    void (*swiglu_forward)(pt_kernels *kn,
                           float *out,             /* (n, f) [act] */
                           const float *gate,      /* (n, f) [act] */
                           const float *up,        /* (n, f) [act] */
                           int64_t n, int f);
    void (*swiglu_backward)(pt_kernels *kn,
                            float *dgate,          /* (n, f) [act] */
                            float *dup,            /* (n, f) [act] */
                            const float *dout,     /* (n, f) [act] */
                            const float *gate,     /* (n, f) [act] */
                            const float *up,       /* (n, f) [act] */
                            int64_t n, int f);
    /* out = inp1 + inp2; out may equal inp1 or inp2. Backward: dinp1 += dout,
     * dinp2 += dout. */
    void (*residual_forward)(pt_kernels *kn,
                             float *out,           /* (n) [act] */
                             const float *inp1,    /* (n) [act] */
                             const float *inp2,    /* (n) [act] */
                             int64_t n);
    void (*residual_backward)(pt_kernels *kn,
                              float *dinp1,        /* (n) [act] */
                              float *dinp2,        /* (n) [act] */
                              const float *dout,   /* (n) [act] */
                              int64_t n);
    /* Inverted dropout with probability p (kept elements scaled by 1/(1-p)). Element
     * i of the slice is element offset + i of the whole tensor tensor_id; its mask
     * is pt_k_dropout_keep(seed, tensor_id, offset + i, p), so it never depends on
     * how the tensor is split across ranks. The backward regenerates the mask.
     * Optional (may be NULL). */
    void (*dropout_forward)(pt_kernels *kn,
                            float *out,            /* (n) [act], may equal inp */
                            const float *inp,      /* (n) [act] */
                            int64_t n, float p, uint64_t seed, uint64_t tensor_id,
                            int64_t offset);
    void (*dropout_backward)(pt_kernels *kn,
                             float *dinp,          /* (n) [act] */
                             const float *dout,    /* (n) [act] */
                             int64_t n, float p, uint64_t seed, uint64_t tensor_id,
                             int64_t offset);

    /* -- Mixture of experts (MoE): routing, dispatch, combine, grouped linear layers --
     * Letters of this section: n tokens (rows), E experts, k experts per token (top-k;
     * not the KV heads here), m dispatched rows (at most n·k), h hidden, G groups.
     * A layer runs: moe_route_forward (scores, the chosen experts and their weights) ->
     * moe_dispatch_plan (each (token, slot) assignment's row, experts' rows back to
     * back) -> moe_gather_rows (tokens into expert order) -> matmul_grouped_forward per
     * expert weight (one group per expert, counts copied to the host) -> ... ->
     * moe_combine_forward (the weighted sum back in token order); the backwards run in
     * reverse. Index buffers (idx, pos, src) are int32, counts int64, all backend memory
     * allocated with alloc (sizes in bytes). All are deterministic: no atomics, every
     * sum in the order stated. Inputs outside the ranges said (an idx outside [0, E),
     * logits that are not finite) are the caller's bug.
     *
     * moe_route_forward: per token t, s = softmax(logits[t,:]) (fp32, the row's maximum
     * subtracted first) or s = sigmoid(logits[t,:]) elementwise (score, pt_kmoe_score);
     * idx[t, 0..k) = the experts of the k largest s, in descending order of s, ties to
     * the lower expert index; sel_j = s[idx[t,j]]; w[t,j] = sel_j / Σ_j sel_j (fp32, j
     * ascending) when renorm, else sel_j. scores = s, WRITTEN, kept for the backward
     * and the load-balancing loss. 1 <= k <= E. */
    void (*moe_route_forward)(pt_kernels *kn,
                              float *scores,        /* (n, E) fp32, written */
                              int32_t *idx,         /* (n, k), written */
                              float *w,             /* (n, k) fp32, written */
                              const float *logits,  /* (n, E) [act] */
                              int64_t n, int E, int k,
                              int score,            /* pt_kmoe_score */
                              int renorm);
    /* moe_route_backward: dlogits WRITTEN (the router's one gradient), from dw, the
     * gradient of the weights w, and aux_g, a gradient of every s[t,e] that is the same
     * for every token (the auxiliary load-balancing loss's, Switch Transformer's
     * α·E·f_e/n; NULL for none). With S = Σ_j sel_j (recomputed from scores and idx as
     * the forward sums it): dsel_j = (dw_j − Σ_i dw_i·w_i) / S when renorm, else dw_j;
     * ds[t,e] = aux_g[e] (or 0) + dsel_j where e == idx[t,j]; then dlogits =
     * s ⊙ (ds − Σ_e ds·s) for the softmax, ds ⊙ s ⊙ (1 − s) for the sigmoid. The top-k
     * choice itself has no gradient. scores, idx and w are the forward's. */
    void (*moe_route_backward)(pt_kernels *kn,
                               float *dlogits,      /* (n, E) [act], WRITTEN */
                               const float *dw,     /* (n, k) fp32 */
                               const float *aux_g,  /* (E) fp32 or NULL */
                               const float *scores, /* (n, E) fp32 */
                               const int32_t *idx,  /* (n, k) */
                               const float *w,      /* (n, k) fp32 */
                               int64_t n, int E, int k, int score, int renorm);
    /* moe_score_colsum: out[e] = Σ_t scores[t,e], WRITTEN, summed in double in a fixed
     * order and rounded once (the load-balancing loss's mean router probability per
     * expert, Switch Transformer's P_e, before the division by n and the sum over
     * ranks). */
    void (*moe_score_colsum)(pt_kernels *kn,
                             float *out,            /* (E) fp32, written */
                             const float *scores,   /* (n, E) fp32 */
                             int64_t n, int E);
    /* moe_dispatch_plan: orders the n·k assignments (t, j) by expert, ascending, and
     * within an expert by flattened index t·k + j (a stable sort). An assignment whose
     * place among its expert's is >= capacity is dropped (capacity < 0: no limit,
     * "dropless"): pos[t,j] = -1 and it gets no row. Otherwise pos[t,j] = its row: the
     * kept rows of expert 0 first, then expert 1, ..., back to back with no gaps, and
     * src[row] = t. counts[e] = rows kept for expert e (the caller copies them to the
     * host for matmul_grouped_*: m = Σ counts). All outputs WRITTEN, src's first m
     * entries only. On CUDA a stable radix sort (CUB) on device scratch: reserve counts
     * it through pt_k_scratch_shape's moe_assign and moe_experts. */
    void (*moe_dispatch_plan)(pt_kernels *kn,
                              int32_t *pos,         /* (n, k), written */
                              int32_t *src,         /* (n·k): rows [0, m) written */
                              int64_t *counts,      /* (E), written */
                              const int32_t *idx,   /* (n, k), in [0, E) */
                              int64_t n, int E, int k, int64_t capacity);
    /* moe_gather_rows: out[i,:] = x[src[i],:] for i < m, an exact copy (the tokens in
     * expert order). Backward: dx[t,:] += Σ_j dout[pos[t,j],:] over j ascending,
     * skipping pos = -1, summed in fp32 from dx's value and rounded once; ACCUMULATED,
     * a gather per token through pos (the inverse of src), so no atomics. */
    void (*moe_gather_rows)(pt_kernels *kn,
                            float *out,             /* (m, h) [act] */
                            const float *x,         /* (n, h) [act] */
                            const int32_t *src,     /* (m) */
                            int64_t m, int h);
    void (*moe_gather_rows_backward)(pt_kernels *kn,
                                     float *dx,          /* (n, h) [act], += */
                                     const float *dout,  /* (m, h) [act] */
                                     const int32_t *pos, /* (n, k) */
                                     int64_t n, int k, int h);
    /* moe_combine_forward: out[t,:] = Σ_j w[t,j]·y[pos[t,j],:], j ascending, in fp32 from
     * 0, skipping dropped slots (pos = -1; a token with every slot dropped gets 0),
     * WRITTEN (the residual add is the caller's). Backward, both WRITTEN (the only
     * producers of these gradients): dy[pos[t,j],:] = w[t,j]·dout[t,:], and
     * dw[t,j] = Σ_c dout[t,c]·y[pos[t,j],c] in fp32 (0 for a dropped slot). Every row
     * of dy is some pos exactly once (the plan's rows), so all of dy is written. */
    void (*moe_combine_forward)(pt_kernels *kn,
                                float *out,         /* (n, h) [act], written */
                                const float *y,     /* (m, h) [act] */
                                const int32_t *pos, /* (n, k) */
                                const float *w,     /* (n, k) fp32 */
                                int64_t n, int k, int h);
    void (*moe_combine_backward)(pt_kernels *kn,
                                 float *dy,          /* (m, h) [act], written */
                                 float *dw,          /* (n, k) fp32, written */
                                 const float *dout,  /* (n, h) [act] */
                                 const float *y,     /* (m, h) [act] */
                                 const int32_t *pos, /* (n, k) */
                                 const float *w,     /* (n, k) fp32 */
                                 int64_t n, int k, int h);
    /* matmul_grouped_forward: G linear layers over rows that lie in G groups back to
     * back, counts[g] rows each (m = Σ counts): group g's rows times w[g]^T, w stored
     * (oc, ic) per group as matmul_forward's. matmul_grouped_backward: matmul_backward
     * per group without a bias, dinp += dout·w[g] on the group's rows, dw[g] +=
     * dout^T·inp over them. A group of 0 rows does nothing (its dw is left as it is).
     * counts is HOST memory, read before the call returns. On CPU each group is exactly
     * matmul_forward / matmul_backward on its rows (to the bit); on CUDA the same
     * cuBLASLt calls per non-empty group (kernels/README.md says why not a grouped
     * GEMM). */
    void (*matmul_grouped_forward)(pt_kernels *kn,
                                   float *out,             /* (m, oc) [act] */
                                   const float *inp,       /* (m, ic) [act] */
                                   const float *w,         /* (G, oc, ic) [act] */
                                   const int64_t *counts,  /* (G) HOST memory */
                                   int G, int ic, int oc);
    void (*matmul_grouped_backward)(pt_kernels *kn,
                                    float *dinp,           /* (m, ic) [act] or NULL */
                                    float *dw,             /* (G, oc, ic) fp32 or NULL */
                                    const float *dout,     /* (m, oc) [act] */
                                    const float *inp,      /* (m, ic) [act] */
                                    const float *w,        /* (G, oc, ic) [act] */
                                    const int64_t *counts, /* (G) HOST memory */
                                    int G, int ic, int oc);

    /* -- Softmax cross-entropy fused with the logits (one rank holds all of v) --
     * losses[i] = logsumexp(logits[i,:]) - logits[i, targets[i]];
     * dlogits[i,:] = (softmax(logits[i,:]) - onehot(targets[i])) · dloss, WRITTEN
     * (dlogits may equal logits; NULL computes the loss only). A negative target
     * marks a padded row: loss 0 and zero gradient. dloss is dL/dloss_i, usually
     * 1/(b·s) for a mean loss. */
    void (*crossentropy)(pt_kernels *kn,
                         float *losses,            /* (n) fp32 */
                         float *dlogits,           /* (n, v) [act] or NULL */
                         const float *logits,      /* (n, v) [act] */
                         const int32_t *targets,   /* (n) */
                         int64_t n, int v, float dloss);
    /* Vocab-parallel cross-entropy (Megatron-LM, Shoeybi et al. 2019) without
     * gathering logits. A rank holds columns [v0, v0+vr). The runtime does:
     *   1. ce_local_max          -> all-reduce(max) over tp   -> gmax
     *   2. ce_local_sumexp(gmax) -> all-reduce(sum) over tp   -> gsum
     *      ce_local_target       -> all-reduce(sum) over tp   -> gtarget
     *   3. ce_finalize(gmax, gsum, gtarget): losses and this slice's dlogits.
     * Every rank then holds the same losses. */
    void (*ce_local_max)(pt_kernels *kn,
                         float *lmax,              /* (n) fp32, written */
                         const float *logits,      /* (n, vr) [act] */
                         int64_t n, int vr);
    void (*ce_local_sumexp)(pt_kernels *kn,
                            float *lsum,           /* (n) fp32: sum exp(x - gmax), written */
                            const float *logits,   /* (n, vr) [act] */
                            const float *gmax,     /* (n) */
                            int64_t n, int vr);
    void (*ce_local_target)(pt_kernels *kn,
                            float *ltarget,        /* (n) fp32: target logit or 0, written */
                            const float *logits,   /* (n, vr) [act] */
                            const int32_t *targets,/* (n) */
                            int64_t n, int vr, int v0);
    void (*ce_finalize)(pt_kernels *kn,
                        float *losses,             /* (n) fp32, written */
                        float *dlogits,            /* (n, vr) [act] or NULL, written */
                        const float *logits,       /* (n, vr) [act] */
                        const int32_t *targets,    /* (n) */
                        const float *gmax,         /* (n) */
                        const float *gsum,         /* (n) */
                        const float *gtarget,      /* (n) */
                        int64_t n, int vr, int v0, float dloss);

    /* -- Optimizer --
     * AdamW (Loshchilov & Hutter 2019; decoupled weight decay) on fp32 master
     * weights, fused: g = grads · grad_scale (the clipping factor, 1 for none);
     * m = beta1·m + (1-beta1)·g; v = beta2·v + (1-beta2)·g²;
     * param -= lr · (m/(1-beta1^step) / (sqrt(v/(1-beta2^step)) + eps) + weight_decay·param).
     * step counts from 1. params_bf16, when non-NULL, receives the updated weights
     * rounded to bf16 (the CUDA backend's compute copy). */
    void (*adamw)(pt_kernels *kn,
                  float *params,                   /* (n) fp32 master */
                  uint16_t *params_bf16,           /* (n) bf16 or NULL */
                  const float *grads,              /* (n) fp32 */
                  float *m,                        /* (n) fp32 */
                  float *v,                        /* (n) fp32 */
                  int64_t n, float lr, float beta1, float beta2, float eps,
                  float weight_decay, int step, float grad_scale);
    /* Sum of squares of a fp32 buffer, accumulated in double in a fixed order and
     * returned to the host. The global norm is sqrt of the sum over every gradient
     * buffer and rank; see pt_k_clip_scale. */
    double (*sumsq)(pt_kernels *kn,
                    const float *x,                /* (n) fp32 */
                    int64_t n);
    /* The optimizer step without the host: sumsq_acc adds the sum of squares of x to
     * *acc, a double in backend memory, without waiting; the sum over x is the one
     * sumsq returns (the same blocks in the same order), so after *acc = 0 and calls
     * on buffers x1, x2, ... *acc holds 0 + sumsq(x1) + sumsq(x2) + ... to the bit on
     * the same backend. The caller all-reduces *acc over ranks on the device, then
     * adamw_multi applies AdamW to count tensors in one pass (one launch on CUDA), with
     * the clipping factor of pt_k_adamw_args computed from *a->sumsq where it runs.
     * Each tensor's results equal adamw's on its buffers with that grad_scale, bit for
     * bit. The list t is host memory, read before the call returns; the tensors must
     * not overlap. On CUDA the list goes to a device table without waiting; the table
     * grows when count does, which after reserve is an error (see reserve). */
    void (*sumsq_acc)(pt_kernels *kn,
                      const float *x,              /* (n) fp32 */
                      int64_t n,
                      double *acc);                /* (1) fp64, += */
    /* sum_acc adds the plain sum of x to *acc (backend memory) the same way, without
     * waiting: the step's token losses, read by the host once the step is done. */
    void (*sum_acc)(pt_kernels *kn,
                    const float *x,                /* (n) fp32 */
                    int64_t n,
                    double *acc);                  /* (1) fp64, += */
    void (*adamw_multi)(pt_kernels *kn,
                        const pt_k_adamw_tensor *t, /* (count) host memory */
                        int count,
                        const pt_k_adamw_args *a);

    /* dst += src elementwise, fp32 backend memory (ZeRO's gradient shards, a
     * norm's weight gradient summed over tp); dst and src do not overlap. */
    void (*add_f32)(pt_kernels *kn,
                    float *dst,                    /* (n) fp32 */
                    const float *src,              /* (n) fp32 */
                    int64_t n);

    /* -- A second stream (optional; NULL on a backend with one queue, the CPU's). Ops
     * queued after stream_select(kn, 1) run on the backend's side stream, after
     * everything queued before on its main stream; stream_select(kn, 0) queues on the
     * main stream again without waiting for the side stream; stream_join makes the
     * main stream wait for what the side stream holds. Collectives on [backend]
     * buffers follow the stream current when they are called (comm/comm_nccl.c). sync
     * waits for both. PowerSGD's compression runs there beside the backward. -- */
    void (*stream_select)(pt_kernels *kn, int side);
    void (*stream_join)(pt_kernels *kn);

    /* -- Gradient compression (PowerSGD, runtime/compress.c). Optional: without both,
     * compress=powersgd is refused on the backend. -- */
    /* gemm on fp32 operands and result (fp32 backend memory): c = alpha · op(a) · op(b)
     * + beta · c, row-major, as gemm above, with fp32 products (no TF32). */
    void (*gemm_f32)(pt_kernels *kn, int trans_a, int trans_b, int m, int n, int kk,
                     float alpha, const float *a, int lda, const float *b, int ldb,
                     float beta, float *c, int ldc);
    /* Orthonormalises the columns of p in place, in column order, by Gram–Schmidt
     * twice (classical Gram–Schmidt with one re-orthogonalisation; "twice is enough":
     * Giraud, Langou, Rozložník, "The loss of orthogonality in the Gram-Schmidt
     * process", Comput. Math. Appl. 50, 2005): twice, the dot products d_j of column i
     * with every earlier column j are taken (summed in double, rounded to float), then
     * each row's p[r][i] -= d_j · p[r][j] for j in order; then column i is divided by
     * its norm (summed in double) + eps, so a zero column stays zero. A pass's dot
     * products do not depend on each other, so a device spreads them over all its
     * blocks, where modified Gram–Schmidt (PyTorch's PowerSGD hook) needs one pass
     * over the rows per pair of columns, in order. cols <= PT_K_ORTHO_MAX_COLS (more is
     * a failure recorded in kn->err, p untouched). */
    void (*orthonormalize)(pt_kernels *kn,
                           float *p,               /* (rows, cols) fp32, row-major */
                           int64_t rows, int cols, float eps);

    /* -- FP8 linear layers (optional: all four or none; without them FP8 plans are
     * refused on the backend). FP8 values are bytes of the OCP 8-bit formats (pt_kfp8):
     * E4M3 (finite max 448, no infinities) for weights and activations, E5M2 (max
     * 57344) for gradients in the hybrid recipes. A tensor is quantized with a
     * per-tensor scale: q = fp8(x · scale), rounded to nearest even and saturated to
     * ±max (a NaN stays NaN), and a GEMM of quantized operands multiplies the fp32
     * accumulator by both inverse scales, as cuBLASLt's FP8 matmul with its A and B
     * scale pointers does. Every FP8 value is exact in bf16 and fp32, so the CPU
     * computes the same products exactly and sums them in fp32.
     * The FP8 ops run on the main stream (the CUDA backend's partial sums share one
     * buffer). A tensor's scaling state is a `meta` block of PT_KFP8_META + history floats of
     * backend memory (the layout below), which the ops read and update where they run,
     * without the host; the runtime reads the blocks back once a step for its log. --
     *
     * fp8_amax: meta[AMAX] = max(meta[AMAX], max |src|) (NaN ignored). */
    void (*fp8_amax)(pt_kernels *kn,
                     float *meta,                  /* PT_KFP8_META+ fp32 */
                     const float *src,             /* (n) [act] */
                     int64_t n);
    /* fp8_scale: the scale from the amax. hist_len 0 (current scaling: Transformer
     * Engine's Float8CurrentScaling, torchtitan's tensorwise): a = meta[AMAX].
     * hist_len > 0 (delayed scaling, TE's DelayedScaling with amax_compute_algo "max"):
     * the history shifts by one, hist[0] = meta[AMAX], and a = max over the history.
     * Then scale = fmt's max / a / 2^margin (margin a whole number, so that 2^margin is
     * exact on every backend), or 1 when a is 0 or not finite (or the scale would be);
     * scale_inv = 1 / scale; meta[AMAX] = 0 for the next use. */
    void (*fp8_scale)(pt_kernels *kn,
                      float *meta,                 /* PT_KFP8_META + hist_len fp32 */
                      int fmt,                     /* pt_kfp8 */
                      int hist_len, float margin);
    /* fp8_amax_scale: current scaling's amax and scale at once: meta[AMAX] = max |src|
     * (NaN ignored; what it held is dropped), then fp8_scale(meta, fmt, 0, 0), so meta
     * ends as zero, fp8_amax and fp8_scale leave it, with fewer kernels. Optional: the
     * runtime makes those three calls where it is NULL. */
    void (*fp8_amax_scale)(pt_kernels *kn,
                           float *meta,            /* PT_KFP8_META+ fp32 */
                           const float *src,       /* (n) [act] */
                           int64_t n,
                           int fmt);               /* pt_kfp8 */
    /* fp8_cast: q = fp8(src · meta[SCALE]) into dst (rows, cols) and, when dst_t is
     * non-NULL, its transpose into dst_t (cols, rows) (Hopper's FP8 GEMMs read both
     * operands K-major, so a data gradient needs the weight's transpose and a weight
     * gradient both operands'). dst may be NULL when only dst_t is wanted. It also
     * max-accumulates |src| into meta[AMAX] (the fused amax of delayed scaling) and
     * adds to meta[OVER] the elements saturated (|x · scale| at or past the midpoint
     * between max and the step above it: 464 for E4M3, 61440 for E5M2, where rounding
     * would have gone past max; what lies below rounds to max anyway) and to meta[UNDER]
     * the non-zero ones that became zero (integer counts, exact below 2^24). */
    void (*fp8_cast)(pt_kernels *kn,
                     uint8_t *dst,                 /* (rows, cols) fp8 or NULL */
                     uint8_t *dst_t,               /* (cols, rows) fp8 or NULL */
                     const float *src,             /* (rows, cols) [act] */
                     int64_t rows, int cols,
                     int fmt,                      /* pt_kfp8 */
                     float *meta);                 /* PT_KFP8_META+ fp32 */
    /* fp8_cast_dbias: fp8_cast, and dbias += the column sums of src (the bias gradient
     * of an output gradient, summed from its unquantized values as matmul_backward's
     * dbias: Transformer Engine's fused cast-transpose-dbias), in the pass that reads
     * src for the cast. Optional: the runtime calls fp8_cast and matmul_backward's bias
     * gradient where it is NULL. */
    void (*fp8_cast_dbias)(pt_kernels *kn,
                           uint8_t *dst,           /* (rows, cols) fp8 or NULL */
                           uint8_t *dst_t,         /* (cols, rows) fp8 or NULL */
                           const float *src,       /* (rows, cols) [act] */
                           int64_t rows, int cols,
                           int fmt,                /* pt_kfp8 */
                           float *meta,            /* PT_KFP8_META+ fp32 */
                           float *dbias);          /* (cols) fp32 */
    /* gemm_fp8: c = a · b^T · meta_a[SCALE_INV] · meta_b[SCALE_INV] (+ bias in every
     * row) + beta · c, products and sums in fp32, c rounded once: the TN layout, a
     * (m, k) and b (n, k) both K-major. c is [act] when c_f32 is 0 (a forward's output,
     * a data gradient), else fp32 (a weight gradient, beta 1 to accumulate). */
    void (*gemm_fp8)(pt_kernels *kn,
                     float *c,                     /* (m, n) [act], or fp32 if c_f32 */
                     int c_f32, float beta,
                     const uint8_t *a,             /* (m, k) fp8 */
                     int fmt_a,                    /* pt_kfp8 */
                     const float *meta_a,          /* PT_KFP8_META+ fp32 */
                     const uint8_t *b,             /* (n, k) fp8 */
                     int fmt_b,
                     const float *meta_b,
                     const float *bias,            /* (n) [act] or NULL */
                     int64_t m, int n, int k);

    /* -- Conversions (round to nearest even; NaN stays NaN). Optional. -- */
    void (*f32_to_bf16)(pt_kernels *kn,
                        uint16_t *dst,             /* (n) bf16 */
                        const float *src,          /* (n) fp32 */
                        int64_t n);
    void (*bf16_to_f32)(pt_kernels *kn,
                        float *dst,                /* (n) fp32 */
                        const uint16_t *src,       /* (n) bf16 */
                        int64_t n);
};

/* ---- Backends ---------------------------------------------------------------------- */

/* The CPU backend (fp32, OpenBLAS). threads > 0 fixes OpenBLAS's thread count (a
 * process-wide setting of OpenBLAS; results are bit-identical run to run for a fixed
 * count); threads <= 0 leaves OpenBLAS's default. The caller owns the result and
 * releases it with pt_kernels_destroy. NULL when out of memory. */
pt_kernels *pt_kernels_cpu(int threads);

/* The CUDA backend on a device. NULL when the library was built without CUDA or the
 * device cannot be opened; err (cap bytes, may be NULL) then says why. */
pt_kernels *pt_kernels_cuda(int device, char *err, size_t cap);

/* The NVIDIA driver's release ("580.159.04") into out (cap bytes) from the text of
 * /proc/driver/nvidia/version, whose first line names it among other words ("NVRM
 * version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Release Build ..."): the first
 * word of that line made of digits and dots, with a dot inside. 0, or -1 with out
 * empty when that line has none (or it does not fit). */
int pt_nvidia_driver_release(const char *text, char *out, size_t cap);

/* How many CUDA devices this process sees (after CUDA_VISIBLE_DEVICES and a launcher's
 * binding); 0 without CUDA, without a device, or when the driver cannot be asked. */
int pt_kernels_cuda_devices(void);

/* Calls kn->destroy; NULL is a no-op. */
void pt_kernels_destroy(pt_kernels *kn);

/* ---- Host helpers (plain C, any backend) ---------------------------------------------- */

/* Philox4x32-10 (Salmon, Moraes, Dror & Shaw 2011, "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11): a counter-based generator; ten rounds of the 4x32 bijection
 * keyed by key, applied to ctr. The same function the CUDA backend uses (curand's
 * Philox4_32_10 gives the same stream for the same counter and key). */
void pt_k_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* A uniform in [0, 1) from one Philox word: its top 24 bits times 2^-24, exact in
 * float and double (the CUDA backend's dropout computes the same in float). */
double pt_k_philox_unit(uint32_t word);

/* The dropout decision for element i of tensor tensor_id under seed: counter
 * (i/4 low, i/4 high, tensor_id low, tensor_id high), key (seed low, seed high),
 * uniform u = pt_k_philox_unit(word i%4); the element is kept when u >= p.
 * Returns 1 to keep, 0 to drop. */
int pt_k_dropout_keep(uint64_t seed, uint64_t tensor_id, int64_t i, float p);

/* bf16 <-> fp32 for one value: round to nearest, ties to even; NaN maps to a quiet
 * NaN with the same sign; infinities and signed zeros are kept. */
uint16_t pt_k_bf16_from_f32(float x);
float pt_k_f32_from_bf16(uint16_t x);

/* The factor that clips a gradient of global L2 norm `norm` to max_norm:
 * min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_; 1 when
 * max_norm <= 0 (clipping off). */
float pt_k_clip_scale(double norm, double max_norm);

/* kn->scratch_bytes(kn, shape), or 0 on a backend without temporaries. */
size_t pt_k_scratch_bytes(pt_kernels *kn, const pt_k_scratch_shape *shape);

#ifdef __cplusplus
}
#endif

#endif
