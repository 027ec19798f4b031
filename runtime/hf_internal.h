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
                * row 2i + p of a head is their row p·d/2 + i */
} hf_how;

/* Which names a Hugging Face directory uses. */
typedef enum { HF_GPT2, HF_LLAMA } hf_family;

typedef struct {
    hf_family family;
    const char *prefix;  /* GPT-2: "transformer." (GPT2LMHeadModel.save_pretrained) or ""
                          * (the original openai-community/gpt2 files); LLaMA: unused */
    int64_t vocab;       /* rows of their embedding and head */
    int64_t positions;   /* GPT-2: rows of their position embedding */
} hf_layout;

/* One of our tensors and where it is in theirs. */
typedef struct {
    char hf[128];          /* their tensor */
    hf_how how;
    int ndim;              /* their shape */
    int64_t shape[2];
    int64_t col0;          /* HF_CONV1D: the first column (element, for a bias) of ours */
    int64_t head_dim;      /* HF_ROPE */
    int ours_ndim;         /* our whole tensor's shape; rows of the embedding and the head
                            * are the caller's (any count from the model's vocabulary up:
                            * pt_vocab_padded depends on tp), marked -1 here */
    int64_t ours_shape[2];
} hf_map;

/* The family whose names and functions model m has (GPT-2: LayerNorm, GELU, learned
 * positions, biases, no grouped-query attention; LLaMA: RMSNorm, SwiGLU, RoPE); the
 * error names the field that fits neither. */
int hf_family_of(const pt_model *m, hf_family *out, pt_err *err);

/* Where our tensor `name` of model m sits in a directory laid out as l; -1 with err
 * set for a name the model does not have. */
int hf_map_of(const pt_model *m, const hf_layout *l, const char *name, hf_map *out,
              pt_err *err);

/* Where row r of our tensor lies in theirs: the element of its first column and the
 * distance between its columns. false: a row of ours that theirs lacks (zero). */
bool hf_row(const hf_map *mp, int64_t r, int64_t *at, int64_t *stride);

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
