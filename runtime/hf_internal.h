/*
 * Internal to runtime/hf*.c (and tests/runtime/test_hf.c): how each of our parameter
 * tensors sits in a Hugging Face tensor, the 16-bit float conversions, and the list of
 * our parameter names. runtime/hf.c reads Hugging Face tensors into ours through this
 * map, runtime/hf_export.c writes ours into theirs through the same map, so the two
 * directions cannot disagree. Not part of the public header (runtime/hf.h).
 */
#ifndef PT_HF_INTERNAL_H
#define PT_HF_INTERNAL_H

#include "hf.h"

/* The runtime's RMSNorm/LayerNorm epsilon and RoPE base: must match kEps and
 * kRopeTheta in runtime/layer.c (a Hugging Face config with other values computes
 * another function, so it is refused). */
#define PT_HF_NORM_EPS 1e-5
#define PT_HF_ROPE_THETA 10000.0

/* How our tensor is laid out in its Hugging Face tensor. */
typedef enum {
    HF_COPY,   /* the same layout, row for row; our rows past the Hugging Face tensor's are
                * zero (the padded vocabulary), theirs past ours are not used (GPT-2's
                * positions beyond our sequence length) */
    HF_CONV1D, /* GPT-2's Conv1D (transformers/pytorch_utils.py: y = x·W + b, W of shape
                * (in, out)): ours (out, in) is columns [col0, col0 + out) of theirs,
                * transposed; a 1-D bias is elements [col0, col0 + out) */
    HF_ROPE,   /* q and k of LLaMA: rows permuted within each head of head_dim rows.
                * Our kernels rotate pairs (2i, 2i+1) as Meta's LLaMA does
                * (kernels/cpu/rope.c); Hugging Face rotates (i, i + d/2) ("rotate_half",
                * models/llama/modeling_llama.py) and its convert_llama_weights_to_hf.py
                * permutes Meta's rows w.view(heads, d/2, 2, in).transpose(1, 2): our
                * row 2i + p of a head is their row p·d/2 + i. Qwen3's q_norm and
                * k_norm gains (models/qwen3/modeling_qwen3.py: an RMSNorm over each
                * head, before RoPE) multiply those rows element by element, so they are
                * permuted alike, as one head of d elements */
} hf_how;

/* Which names a Hugging Face directory uses: transformers' model_type (models/gpt2,
 * models/llama, models/qwen3, models/mixtral, models/qwen3_moe). */
typedef enum { HF_GPT2, HF_LLAMA, HF_QWEN3, HF_MIXTRAL, HF_QWEN3_MOE } hf_family;

typedef struct {
    hf_family family;
    const char *prefix;  /* GPT-2: "transformer." (GPT2LMHeadModel.save_pretrained) or ""
                          * (the original openai-community/gpt2 files); others: unused */
    int64_t vocab;       /* rows of their embedding and head */
    int64_t positions;   /* GPT-2: rows of their position embedding */
} hf_layout;

/* A run of our tensor's rows and where it lies in one of their tensors (for a 1-D
 * tensor of ours, a row is an element). */
typedef struct {
    char hf[128];          /* their tensor */
    hf_how how;
    int ndim;              /* their shape */
    int64_t shape[2];
    int64_t col0;          /* HF_CONV1D: the first column (element, for a bias) of ours */
    int64_t head_dim;      /* HF_ROPE */
    int64_t row0;          /* our first row here; the part holds our rows up to the next
                            * part's row0, the last part to our tensor's end */
} hf_part;

/* The most parts one tensor of ours is made of: Qwen3's q_norm and k_norm are our one
 * qk_norm. */
enum { HF_PARTS_MAX = 2 };

/* One of our tensors and where it is in theirs: parts[0 .. parts) in order of our rows,
 * the first from row 0. */
typedef struct {
    hf_part part[HF_PARTS_MAX];
    int parts;
    int ours_ndim;         /* our whole tensor's shape; rows of the embedding and the head
                            * are the caller's (any count from the model's vocabulary up:
                            * pt_vocab_padded depends on tp), marked -1 here */
    int64_t ours_shape[2];
} hf_map;

/* The family whose names and functions model m has (GPT-2: LayerNorm, GELU, learned
 * positions, biases, no grouped-query attention; LLaMA: RMSNorm, SwiGLU, RoPE; Qwen3:
 * LLaMA's with q/k norms; Mixtral: LLaMA's with a mixture of experts in every layer;
 * Qwen3-MoE: Qwen3's with a mixture of experts); the error names the field that fits
 * none (or that the family's config.json cannot say). */
int hf_family_of(const pt_model *m, hf_family *out, pt_err *err);

/* The family's model_type ("gpt2", ...), its class (architectures[0]: "GPT2LMHeadModel",
 * ...) and its shape in words, for messages. */
const char *hf_family_type(hf_family f);
const char *hf_family_class(hf_family f);
const char *hf_family_shape(hf_family f);

/* Where our tensor `name` of model m sits in a directory laid out as l; -1 with err
 * set for a name the model does not have. */
int hf_map_of(const pt_model *m, const hf_layout *l, const char *name, hf_map *out,
              pt_err *err);

/* Where row r of our tensor lies in theirs: the part that holds it, the element of its
 * first column in that part's tensor and the distance between its columns. false: a
 * row of ours that theirs lacks (zero). */
bool hf_row(const hf_map *mp, int64_t r, int *part, int64_t *at, int64_t *stride);

/* Our parameter names of model m in the order they lie on one rank
 * (pt_model_param_table: runtime/param_table.c's own table). *names is malloc'd (*n
 * of them); -1 when out of memory. */
int hf_param_names(const pt_model *m, char (**names)[48], int *n, pt_err *err);

/* 16-bit floats: IEEE binary16 and bfloat16, to fp32 exactly, and from fp32 rounded to
 * nearest even (overflow to infinity, NaN stays NaN). */
float hf_f16_to_f32(uint16_t h);
float hf_bf16_to_f32(uint16_t h);
uint16_t hf_f32_to_f16(float f);
uint16_t hf_f32_to_bf16(float f);

#endif
