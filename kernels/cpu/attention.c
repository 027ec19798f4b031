/*
 * Causal attention with grouped queries on the CPU, over one K/V block (so context
 * parallelism can run it per block and merge with attention_combine). Each (batch,
 * head) is processed in blocks of PT_ATTN_BQ query rows: a block's scores against
 * the keys it can see (at most PT_ATTN_BQ × skv floats, never the whole s×s matrix
 * at once) are formed by sgemm directly on the strided (b, s, a, d) layout, turned
 * into probabilities, and multiplied by V by sgemm. The backward recomputes the
 * probabilities from the saved log-sum-exp, as FlashAttention-2 (Dao 2023):
 *   P = exp(S - lse), D_i = dout_i · out_i, dS = P ∘ (dout · V^T - D),
 *   dV += P^T · dout, dQ += scale · dS · K, dK += scale · dS^T · Q.
 * Loops run in a fixed order and OpenBLAS adds into dK and dV, so results are
 * deterministic. Scratch comes from malloc; when it fails the op does nothing and
 * records the failure for sync().
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

enum { PT_ATTN_BQ = 64 };

/* the number of keys query row i can see: keys j with k0 + j <= q0 + i */
static int attn_visible(int i, int skv, int q0, int k0, int causal)
{
    if (!causal)
        return skv;
    int64_t nv = (int64_t)q0 + i - k0 + 1;
    return nv < 0 ? 0 : nv > skv ? skv : (int)nv;
}

static float *attn_scratch(pt_kernels *kn, size_t count)
{
    float *p = malloc((count ? count : 1) * sizeof(float));
    if (!p && !kn->err[0])
        snprintf(kn->err, sizeof kn->err, "attention: out of memory for %zu floats", count);
    return p;
}

void pt_kcpu_attention_forward(pt_kernels *kn,
                               float *out,          /* (b, sq, a, d) */
                               float *lse,          /* (b, a, sq) */
                               const float *q,      /* (b, sq, a, d) */
                               const float *k,      /* (b, skv, kh, d) */
                               const float *v,      /* (b, skv, kh, d) */
                               int b, int sq, int skv, int a, int kh, int d,
                               int q0, int k0, int causal)
{
    float *sc = attn_scratch(kn, (size_t)PT_ATTN_BQ * skv); /* (bq, kmax) scores */
    if (!sc)
        return;
    const float scale = 1.0f / sqrtf((float)d);
    const int group = a / kh, ldq = a * d, ldk = kh * d;
    for (int bi = 0; bi < b; bi++)
        for (int hq = 0; hq < a; hq++) {
            int hk = hq / group;
            const float *kb = k + (int64_t)bi * skv * ldk + hk * d;
            const float *vb = v + (int64_t)bi * skv * ldk + hk * d;
            for (int i0 = 0; i0 < sq; i0 += PT_ATTN_BQ) {
                int bq = sq - i0 < PT_ATTN_BQ ? sq - i0 : PT_ATTN_BQ;
                int kmax = attn_visible(i0 + bq - 1, skv, q0, k0, causal);
                const float *qb = q + ((int64_t)bi * sq + i0) * ldq + hq * d;
                float *ob = out + ((int64_t)bi * sq + i0) * ldq + hq * d;
                float *lb = lse + ((int64_t)bi * a + hq) * sq + i0;
                if (kmax == 0) {
                    for (int r = 0; r < bq; r++) {
                        memset(ob + (int64_t)r * ldq, 0, (size_t)d * sizeof(float));
                        lb[r] = -INFINITY;
                    }
                    continue;
                }
                /* sc (bq, kmax) = scale · q_blk (bq, d) · k^T (d, kmax) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, kmax, d, scale, qb,
                            ldq, kb, ldk, 0.0f, sc, kmax);
                for (int r = 0; r < bq; r++) {
                    float *row = sc + (int64_t)r * kmax;
                    int nv = attn_visible(i0 + r, skv, q0, k0, causal);
                    if (nv == 0) {
                        memset(row, 0, (size_t)kmax * sizeof(float));
                        lb[r] = -INFINITY;
                        continue;
                    }
                    float mx = row[0];
                    for (int j = 1; j < nv; j++)
                        mx = row[j] > mx ? row[j] : mx;
                    float sum = 0.0f;
                    for (int j = 0; j < nv; j++) {
                        row[j] = expf(row[j] - mx);
                        sum += row[j];
                    }
                    float inv = 1.0f / sum;
                    for (int j = 0; j < nv; j++)
                        row[j] *= inv;
                    for (int j = nv; j < kmax; j++)
                        row[j] = 0.0f;
                    lb[r] = mx + logf(sum);
                }
                /* out_blk (bq, d) = p (bq, kmax) · v (kmax, d) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, d, kmax, 1.0f, sc,
                            kmax, vb, ldk, 0.0f, ob, ldq);
            }
        }
    free(sc);
}

void pt_kcpu_attention_backward(pt_kernels *kn,
                                float *dq,          /* (b, sq, a, d) */
                                float *dk,          /* (b, skv, kh, d) */
                                float *dv,          /* (b, skv, kh, d) */
                                const float *dout,  /* (b, sq, a, d) */
                                const float *q,     /* (b, sq, a, d) */
                                const float *k,     /* (b, skv, kh, d) */
                                const float *v,     /* (b, skv, kh, d) */
                                const float *out,   /* (b, sq, a, d) */
                                const float *lse,   /* (b, a, sq) */
                                int b, int sq, int skv, int a, int kh, int d,
                                int q0, int k0, int causal, int accumulate)
{
    if (!accumulate) { /* written: zeroed, then summed into as below */
        memset(dq, 0, (size_t)b * sq * a * d * sizeof(float));
        memset(dk, 0, (size_t)b * skv * kh * d * sizeof(float));
        memset(dv, 0, (size_t)b * skv * kh * d * sizeof(float));
    }
    float *p = attn_scratch(kn, (size_t)2 * PT_ATTN_BQ * skv); /* p and dp, (bq, kmax) */
    if (!p)
        return;
    float *dp = p + (size_t)PT_ATTN_BQ * skv;
    const float scale = 1.0f / sqrtf((float)d);
    const int group = a / kh, ldq = a * d, ldk = kh * d;
    for (int bi = 0; bi < b; bi++)
        for (int hq = 0; hq < a; hq++) {
            int hk = hq / group;
            int64_t koff = (int64_t)bi * skv * ldk + hk * d;
            for (int i0 = 0; i0 < sq; i0 += PT_ATTN_BQ) {
                int bq = sq - i0 < PT_ATTN_BQ ? sq - i0 : PT_ATTN_BQ;
                int kmax = attn_visible(i0 + bq - 1, skv, q0, k0, causal);
                if (kmax == 0)
                    continue;
                int64_t qoff = ((int64_t)bi * sq + i0) * ldq + hq * d;
                const float *lb = lse + ((int64_t)bi * a + hq) * sq + i0;
                /* p (bq, kmax) = exp(scale · q k^T - lse), zero where not visible */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, kmax, d, scale,
                            q + qoff, ldq, k + koff, ldk, 0.0f, p, kmax);
                /* dp (bq, kmax) = dout_blk (bq, d) · v^T (d, kmax) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bq, kmax, d, 1.0f,
                            dout + qoff, ldq, v + koff, ldk, 0.0f, dp, kmax);
                for (int r = 0; r < bq; r++) {
                    float *pr = p + (int64_t)r * kmax, *dpr = dp + (int64_t)r * kmax;
                    int nv = isinf(lb[r]) ? 0 : attn_visible(i0 + r, skv, q0, k0, causal);
                    const float *o = out + qoff + (int64_t)r * ldq;
                    const float *g = dout + qoff + (int64_t)r * ldq;
                    float dsum = 0.0f; /* D_r = dout_r · out_r */
                    for (int c = 0; c < d; c++)
                        dsum += g[c] * o[c];
                    for (int j = 0; j < nv; j++) {
                        pr[j] = expf(pr[j] - lb[r]);
                        dpr[j] = pr[j] * (dpr[j] - dsum); /* dS, unscaled */
                    }
                    for (int j = nv; j < kmax; j++)
                        pr[j] = dpr[j] = 0.0f;
                }
                /* dv (kmax, d) += p^T (kmax, bq) · dout_blk (bq, d) */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kmax, d, bq, 1.0f, p,
                            kmax, dout + qoff, ldq, 1.0f, dv + koff, ldk);
                /* dq_blk (bq, d) += scale · ds (bq, kmax) · k (kmax, d) */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, d, kmax, scale, dp,
                            kmax, k + koff, ldk, 1.0f, dq + qoff, ldq);
                /* dk (kmax, d) += scale · ds^T (kmax, bq) · q_blk (bq, d) */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kmax, d, bq, scale, dp,
                            kmax, q + qoff, ldq, 1.0f, dk + koff, ldk);
            }
        }
    free(p);
}

void pt_kcpu_attention_combine(pt_kernels *kn,
                               float *out,          /* (b, sq, a, d) in/out */
                               float *lse,          /* (b, a, sq) in/out */
                               const float *out2,   /* (b, sq, a, d) */
                               const float *lse2,   /* (b, a, sq) */
                               int b, int sq, int a, int d)
{
    (void)kn;
    for (int bi = 0; bi < b; bi++)
        for (int hq = 0; hq < a; hq++)
            for (int i = 0; i < sq; i++) {
                int64_t li = ((int64_t)bi * a + hq) * sq + i;
                int64_t oi = (((int64_t)bi * sq + i) * a + hq) * d;
                float l1 = lse[li], l2 = lse2[li];
                if (l2 == -INFINITY)
                    continue;
                if (l1 == -INFINITY) {
                    memcpy(out + oi, out2 + oi, (size_t)d * sizeof(float));
                    lse[li] = l2;
                    continue;
                }
                float mx = l1 > l2 ? l1 : l2;
                float l = mx + logf(expf(l1 - mx) + expf(l2 - mx));
                float w1 = expf(l1 - l), w2 = expf(l2 - l);
                for (int c = 0; c < d; c++)
                    out[oi + c] = w1 * out[oi + c] + w2 * out2[oi + c];
                lse[li] = l;
            }
}
