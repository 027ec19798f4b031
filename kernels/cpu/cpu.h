/*
 * The CPU backend's internal declarations: one function per slot of the pt_kernels
 * table, named pt_kcpu_<op>, defined in the file of its area (embed.c, norm.c,
 * matmul.c, rope.c, attention.c, act.c, loss.c, optim.c, rng.c, convert.c, fp8.c,
 * moe.c) and put into the table by backend.c. Shapes and contracts are those of
 * kernels.h.
 */
#ifndef PT_KERNELS_CPU_H
#define PT_KERNELS_CPU_H

#include "kernels.h"

/* Loops over independent rows or elements run on the backend's threads (--threads, the
 * same count OpenBLAS uses) when the build has OpenMP, and only when there is enough
 * work (PT_KCPU_PAR_MIN elements) to pay for waking them. Each iteration computes the
 * same numbers whichever thread runs it, so results do not depend on the thread count;
 * reductions across iterations stay serial (or fixed-size blocks, pt_kcpu_sumsq). */
#define PT_KCPU_PAR_MIN 32768
#ifdef _OPENMP
#define PT_KCPU_PRAGMA(x) _Pragma(#x)
#define PT_KCPU_PARALLEL_FOR(work) \
    PT_KCPU_PRAGMA(omp parallel for schedule(static) if ((work) >= 32768))
#else
#define PT_KCPU_PARALLEL_FOR(work)
#endif

/* embed.c */
void pt_kcpu_embed_forward(pt_kernels *kn, float *out, const int32_t *tokens,
                           const float *wte, const float *wpe, int b, int s, int h,
                           int v0, int vr, int pos0);
void pt_kcpu_embed_backward(pt_kernels *kn, float *dwte, float *dwpe, const float *dout,
                            const int32_t *tokens, int b, int s, int h, int v0, int vr,
                            int pos0);
/* norm.c */
void pt_kcpu_layernorm_forward(pt_kernels *kn, float *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *bias,
                               int64_t n, int h, float eps);
void pt_kcpu_layernorm_backward(pt_kernels *kn, float *dinp, float *dw, float *dbias,
                                const float *dout, const float *inp, const float *w,
                                const float *mean, const float *rstd, int64_t n, int h);
void pt_kcpu_rmsnorm_forward(pt_kernels *kn, float *out, float *rstd, const float *inp,
                             const float *w, int64_t n, int h, float eps);
void pt_kcpu_rmsnorm_backward(pt_kernels *kn, float *dinp, float *dw, const float *dout,
                              const float *inp, const float *w, const float *rstd,
                              int64_t n, int h);
/* matmul.c */
void pt_kcpu_matmul_forward(pt_kernels *kn, float *out, const float *inp, const float *w,
                            const float *bias, int64_t n, int ic, int oc);
void pt_kcpu_matmul_backward(pt_kernels *kn, float *dinp, float *dw, float *dbias,
                             const float *dout, const float *inp, const float *w,
                             int64_t n, int ic, int oc);
void pt_kcpu_gemm(pt_kernels *kn, int trans_a, int trans_b, int m, int n, int kk,
                  float alpha, const float *a, int lda, const float *b, int ldb,
                  float beta, float *c, int ldc);
/* compress.c */
void pt_kcpu_orthonormalize(pt_kernels *kn, float *p, int64_t rows, int cols, float eps);
/* fp8.c */
void pt_kcpu_fp8_amax(pt_kernels *kn, float *meta, const float *src, int64_t n);
void pt_kcpu_fp8_scale(pt_kernels *kn, float *meta, int fmt, int hist_len, float margin);
void pt_kcpu_fp8_amax_scale(pt_kernels *kn, float *meta, const float *src, int64_t n, int fmt);
void pt_kcpu_fp8_cast_dbias(pt_kernels *kn, uint8_t *dst, uint8_t *dst_t, const float *src,
                            int64_t rows, int cols, int fmt, float *meta, float *dbias);
void pt_kcpu_fp8_cast(pt_kernels *kn, uint8_t *dst, uint8_t *dst_t, const float *src,
                      int64_t rows, int cols, int fmt, float *meta);
void pt_kcpu_gemm_fp8(pt_kernels *kn, float *c, int c_f32, float beta, const uint8_t *a,
                      int fmt_a, const float *meta_a, const uint8_t *b, int fmt_b,
                      const float *meta_b, const float *bias, int64_t m, int n, int k);
/* rope.c */
void pt_kcpu_rope_forward(pt_kernels *kn, float *out, const float *inp, int b, int s,
                          int nh, int d, int pos0, float theta);
void pt_kcpu_rope_backward(pt_kernels *kn, float *dinp, const float *dout, int b, int s,
                           int nh, int d, int pos0, float theta);
/* attention.c */
void pt_kcpu_attention_forward(pt_kernels *kn, float *out, float *lse, const float *q,
                               const float *k, const float *v, int b, int sq, int skv,
                               int a, int kh, int d, int q0, int k0, int causal);
void pt_kcpu_attention_backward(pt_kernels *kn, float *dq, float *dk, float *dv,
                                const float *dout, const float *q, const float *k,
                                const float *v, const float *out, const float *lse,
                                int b, int sq, int skv, int a, int kh, int d, int q0,
                                int k0, int causal, int accumulate);
void pt_kcpu_attention_combine(pt_kernels *kn, float *out, float *lse, const float *out2,
                               const float *lse2, int b, int sq, int a, int d);
/* act.c */
void pt_kcpu_gelu_forward(pt_kernels *kn, float *out, const float *inp, int64_t n);
void pt_kcpu_matmul_forward_res(pt_kernels *kn, float *out, const float *inp, const float *w,
                                const float *bias, const float *res, int64_t n, int ic, int oc);
void pt_kcpu_matmul_forward_gelu(pt_kernels *kn, float *out, float *pre, const float *inp,
                                 const float *w, const float *bias, int64_t n, int ic, int oc);
void pt_kcpu_matmul_dgrad(pt_kernels *kn, float *dinp, const float *dout, const float *w,
                          int64_t n, int ic, int oc);
void pt_kcpu_matmul_forward_shared(pt_kernels *kn, int count, float *const out[],
                                   const float *inp, const float *const w[],
                                   const float *const bias[], int64_t n, int ic, int oc);
void pt_kcpu_matmul_wgrad_shared(pt_kernels *kn, int count, float *const dw[],
                                 float *const dbias[], const float *const dout[],
                                 const float *inp, int64_t n, int ic, int oc);
void pt_kcpu_matmul_backward_dgelu(pt_kernels *kn, float *dpre, const float *dout,
                                   const float *w, const float *pre, int64_t n, int ic, int oc);
void pt_kcpu_residual_layernorm_forward(pt_kernels *kn, float *res, float *out, float *mean,
                                        float *rstd, const float *inp1, const float *inp2,
                                        const float *w, const float *bias, int64_t n, int h,
                                        float eps);
void pt_kcpu_residual_rmsnorm_forward(pt_kernels *kn, float *res, float *out, float *rstd,
                                      const float *inp1, const float *inp2, const float *w,
                                      int64_t n, int h, float eps);
void pt_kcpu_gelu_backward(pt_kernels *kn, float *dinp, const float *dout,
                           const float *inp, int64_t n);
void pt_kcpu_gelu_forward_amax(pt_kernels *kn, float *out, const float *inp, int64_t n,
                               float *meta);
void pt_kcpu_gelu_backward_amax(pt_kernels *kn, float *dinp, const float *dout,
                                const float *inp, int64_t n, float *meta);
void pt_kcpu_swiglu_forward(pt_kernels *kn, float *out, const float *gate,
                            const float *up, int64_t n, int f);
void pt_kcpu_swiglu_backward(pt_kernels *kn, float *dgate, float *dup, const float *dout,
                             const float *gate, const float *up, int64_t n, int f);
void pt_kcpu_residual_forward(pt_kernels *kn, float *out, const float *inp1,
                              const float *inp2, int64_t n);
void pt_kcpu_residual_backward(pt_kernels *kn, float *dinp1, float *dinp2,
                               const float *dout, int64_t n);
/* rng.c */
void pt_kcpu_dropout_forward(pt_kernels *kn, float *out, const float *inp, int64_t n,
                             float p, uint64_t seed, uint64_t tensor_id, int64_t offset);
void pt_kcpu_dropout_backward(pt_kernels *kn, float *dinp, const float *dout, int64_t n,
                              float p, uint64_t seed, uint64_t tensor_id, int64_t offset);
/* loss.c */
void pt_kcpu_crossentropy(pt_kernels *kn, float *losses, float *dlogits,
                          const float *logits, const int32_t *targets, int64_t n, int v,
                          float dloss);
void pt_kcpu_ce_local_max(pt_kernels *kn, float *lmax, const float *logits, int64_t n,
                          int vr);
void pt_kcpu_ce_local_sumexp(pt_kernels *kn, float *lsum, const float *logits,
                             const float *gmax, int64_t n, int vr);
void pt_kcpu_ce_local_target(pt_kernels *kn, float *ltarget, const float *logits,
                             const int32_t *targets, int64_t n, int vr, int v0);
void pt_kcpu_ce_finalize(pt_kernels *kn, float *losses, float *dlogits,
                         const float *logits, const int32_t *targets, const float *gmax,
                         const float *gsum, const float *gtarget, int64_t n, int vr,
                         int v0, float dloss);
/* optim.c */
void pt_kcpu_adamw(pt_kernels *kn, float *params, uint16_t *params_bf16,
                   const float *grads, float *m, float *v, int64_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int step,
                   float grad_scale);
double pt_kcpu_sumsq(pt_kernels *kn, const float *x, int64_t n);
/* moe.c */
void pt_kcpu_moe_route_forward(pt_kernels *kn, float *scores, int32_t *idx, float *w,
                               const float *logits, int64_t n, int E, int k, int score,
                               int renorm);
void pt_kcpu_moe_route_backward(pt_kernels *kn, float *dlogits, const float *dw,
                                const float *aux_g, const float *scores, const int32_t *idx,
                                const float *w, int64_t n, int E, int k, int score,
                                int renorm);
void pt_kcpu_moe_score_colsum(pt_kernels *kn, float *out, const float *scores, int64_t n,
                              int E);
void pt_kcpu_moe_dispatch_plan(pt_kernels *kn, int32_t *pos, int32_t *src, int64_t *counts,
                               const int32_t *idx, int64_t n, int E, int k,
                               int64_t capacity);
void pt_kcpu_moe_gather_rows(pt_kernels *kn, float *out, const float *x, const int32_t *src,
                             int64_t m, int h);
void pt_kcpu_moe_gather_rows_backward(pt_kernels *kn, float *dx, const float *dout,
                                      const int32_t *pos, int64_t n, int k, int h);
void pt_kcpu_moe_combine_forward(pt_kernels *kn, float *out, const float *y,
                                 const int32_t *pos, const float *w, int64_t n, int k, int h);
void pt_kcpu_moe_combine_backward(pt_kernels *kn, float *dy, float *dw, const float *dout,
                                  const float *y, const int32_t *pos, const float *w,
                                  int64_t n, int k, int h);
void pt_kcpu_matmul_grouped_forward(pt_kernels *kn, float *out, const float *inp,
                                    const float *w, const int64_t *counts, int G, int ic,
                                    int oc);
void pt_kcpu_matmul_grouped_backward(pt_kernels *kn, float *dinp, float *dw,
                                     const float *dout, const float *inp, const float *w,
                                     const int64_t *counts, int G, int ic, int oc);
/* convert.c */
void pt_kcpu_f32_to_bf16(pt_kernels *kn, uint16_t *dst, const float *src, int64_t n);
void pt_kcpu_bf16_to_f32(pt_kernels *kn, float *dst, const uint16_t *src, int64_t n);
void pt_kcpu_add_f32(pt_kernels *kn, float *dst, const float *src, int64_t n);

#endif
