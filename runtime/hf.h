/*
 * Weights from elsewhere and to elsewhere: a source of whole parameter tensors by the
 * runtime's names, read from a Hugging Face model directory (runtime/hf.c) or from a
 * checkpoint of ours (runtime/trainer_ckpt.c), for ptrun --init-from and --resume; and
 * the export of a model's tensors as a Hugging Face GPT-2, LLaMA, Qwen3, Mixtral or
 * Qwen3-MoE directory (runtime/hf_export.c, tools/ptconvert.c). The name and layout map
 * between the two lives in runtime/hf_map.c.
 */
#ifndef PT_HF_H
#define PT_HF_H

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- A source of whole tensors -------------------------------------------------------- */

/* A source of whole parameter tensors under the runtime's names (pt_param.name) and
 * whole shapes (the unsplit tensor's). read copies elements [lo, lo + count) of the
 * whole row-major fp32 tensor `name` to dst; it is called many times per tensor
 * (e.g. once per row of a column-split part), so an implementation caches the last
 * converted tensor. Returns 0, or -1 with err naming the file and tensor. */
typedef struct pt_wsrc pt_wsrc;
struct pt_wsrc {
    int (*read)(pt_wsrc *s, const char *name, int ndim, const int64_t *shape, int64_t lo,
                int64_t count, float *dst, pt_err *err);
    void (*close)(pt_wsrc *s);
};

/* Our checkpoint in step folder dir (runtime/trainer_ckpt.c): the tensors of its
 * model.safetensors.index.json and, with `with_optim`, of optim.safetensors.index.json
 * ("<name>.exp_avg", "<name>.exp_avg_sq"), read by their files' headers as asked for.
 * The caller closes it. */
int pt_ckpt_src_open(const char *dir, bool with_optim, pt_wsrc **out, pt_err *err);

/* ---- Hugging Face directories --------------------------------------------------------- */

/* Opens a Hugging Face model directory: config.json (model_type gpt2, llama, qwen3,
 * mixtral or qwen3_moe, the one that spec's shape names: GPT-2 or LLaMA; LLaMA's with q/k
 * norms Qwen3, with experts Mixtral, with both Qwen3-MoE) and model.safetensors or
 * model.safetensors.index.json with its shards (F32, F16 or BF16 tensors, converted to
 * fp32). Checks config.json against spec and names the field and both values on a
 * mismatch (hidden size, layers, heads, kv heads, head_dim, ffn, vocab (HF vocab must
 * be <= ours), norm type/eps if known, activation, positions, tied embeddings, bias;
 * experts, top-k, expert ffn, renormalisation and which layers are sparse); fields
 * config.json leaves out take transformers' defaults (GPT2Config, LlamaConfig,
 * Qwen3Config, MixtralConfig, Qwen3MoeConfig). Every tensor the model needs is checked
 * to be there, with its dtype and shape, before it returns. The source maps names as
 * runtime/hf_map.c says: GPT-2's Conv1D weights transposed and c_attn split into q, k
 * and v; q and k rows (and Qwen3's q_norm and k_norm, which together are our qk_norm)
 * permuted back from Hugging Face's rotate-half RoPE to our interleaved one; rows of
 * wte and lm_head past the Hugging Face vocabulary (the padding of pt_vocab_padded)
 * zero; wpe the first seq rows of theirs. The caller closes it. */
int pt_hf_open(const char *dir, const pt_model *spec, pt_wsrc **out, pt_err *err);

/* What pt_hf_export wrote. */
typedef struct {
    const char *family;   /* model_type: "gpt2", "llama", "qwen3", "mixtral", "qwen3_moe" */
    int tensors;
    int64_t bytes;        /* of tensor data in model.safetensors */
} pt_hf_written;

/* Writes model `spec`, its tensors read from src (whole tensors under our names; wte and
 * lm_head with vocab_rows >= spec->vocab rows, the rows past spec->vocab padding and
 * dropped), as the Hugging Face directory out_dir: config.json (GPT2LMHeadModel,
 * LlamaForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM or Qwen3MoeForCausalLM with
 * the model's sizes, the unpadded vocabulary, n_positions or max_position_embeddings
 * the model's seq; the family pt_hf_open would read) and model.safetensors (their names
 * and layouts, the inverse of pt_hf_open's map; dtype "F32", "BF16" or "F16", rounded
 * to nearest even). Every tensor is read and converted before anything is written;
 * each file is written to a temporary name and renamed, config.json last. out_dir is
 * created when absent; one that holds anything is refused unless `force`, which
 * replaces config.json and model.safetensors (removing config.json first, so an
 * interrupted export leaves no config.json beside other weights) and leaves other files
 * alone. A spec that fits none of the families, or has what its family's config.json
 * cannot say, is refused naming the field. info may be NULL. */
int pt_hf_export(const char *out_dir, const pt_model *spec, int64_t vocab_rows, pt_wsrc *src,
                 const char *dtype, bool force, pt_hf_written *info, pt_err *err);

#ifdef __cplusplus
}
#endif
#endif
