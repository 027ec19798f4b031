/*
 * Mixture-of-experts ops on the CPU, the reference for the CUDA backend: the router's
 * scores and top-k with its backward, the dispatch plan (a counting sort of the
 * (token, slot) assignments by expert, stable in token order, with a capacity), the
 * row gather into expert order and the weighted combine back, with their backwards,
 * and the grouped linear layers as one matmul per group. Contracts in kernels.h.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Whether expert a (score sa) comes before expert b (score sb) in the top-k order:
 * larger score first, ties to the lower index. The CUDA backend orders the same way. */
static int moe_before(float sa, int a, float sb, int b)
{
    return sa > sb || (sa == sb && a < b);
}

/* s = softmax or sigmoid of one row of logits, in fp32 */
static void moe_scores_row(float *s, const float *x, int E, int score)
{
    if (score == PT_KMOE_SIGMOID) {
        for (int e = 0; e < E; e++)
            s[e] = 1.0f / (1.0f + expf(-x[e]));
        return;
    }
    float mx = x[0], sum = 0.0f;
    for (int e = 1; e < E; e++)
        mx = fmaxf(mx, x[e]);
    for (int e = 0; e < E; e++) {
        s[e] = expf(x[e] - mx);
        sum += s[e];
    }
    for (int e = 0; e < E; e++)
        s[e] /= sum;
}

void pt_kcpu_moe_route_forward(pt_kernels *kn,
                               float *scores,        /* (n, E) */
                               int32_t *idx,         /* (n, k) */
                               float *w,             /* (n, k) */
                               const float *logits,  /* (n, E) */
                               int64_t n, int E, int k, int score, int renorm)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * E)
    for (int64_t t = 0; t < n; t++) {
        float *s = scores + t * E;
        moe_scores_row(s, logits + t * E, E, score);
        /* the j-th choice: the first expert in the order among those after choice j-1 */
        int prev = -1;
        float sum = 0.0f;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if ((prev < 0 || moe_before(s[prev], prev, s[e], e)) &&
                    (best < 0 || moe_before(s[e], e, s[best], best)))
                    best = e;
            if (best < 0) /* scores that are not numbers: the caller's bug, kept in bounds */
                best = 0;
            idx[t * k + j] = best;
            w[t * k + j] = s[best];
            sum += s[best];
            prev = best;
        }
        if (renorm)
            for (int j = 0; j < k; j++)
                w[t * k + j] /= sum;
    }
}

/* ds[t,e] of one expert: aux_g[e] (or 0) plus dsel_j where e is choice j */
static float moe_ds(int e, const float *aux_g, const int32_t *idx, const float *dsel, int k)
{
    float ds = aux_g ? aux_g[e] : 0.0f;
    for (int j = 0; j < k; j++)
        if (idx[j] == e)
            ds += dsel[j];
    return ds;
}

void pt_kcpu_moe_route_backward(pt_kernels *kn,
                                float *dlogits,       /* (n, E), written */
                                const float *dw,      /* (n, k) */
                                const float *aux_g,   /* (E) or NULL */
                                const float *scores,  /* (n, E) */
                                const int32_t *idx,   /* (n, k) */
                                const float *w,       /* (n, k) */
                                int64_t n, int E, int k, int score, int renorm)
{
    float stack[64], *dsel = k <= 64 ? stack : malloc((size_t)k * sizeof *dsel);
    if (!dsel) {
        if (!kn->err[0])
            snprintf(kn->err, sizeof kn->err, "moe_route_backward: out of memory for %d "
                     "floats", k);
        return;
    }
    for (int64_t t = 0; t < n; t++) {
        const float *s = scores + t * E, *dwt = dw + t * k, *wt = w + t * k;
        const int32_t *it = idx + t * k;
        float sum = 0.0f, dot = 0.0f;
        for (int j = 0; j < k; j++) {
            sum += s[it[j]];
            dot += dwt[j] * wt[j];
        }
        for (int j = 0; j < k; j++)
            dsel[j] = renorm ? (dwt[j] - dot) / sum : dwt[j];
        float *dl = dlogits + t * E;
        if (score == PT_KMOE_SIGMOID) {
            for (int e = 0; e < E; e++)
                dl[e] = moe_ds(e, aux_g, it, dsel, k) * s[e] * (1.0f - s[e]);
            continue;
        }
        float g = 0.0f; /* Σ_e ds·s, e ascending */
        for (int e = 0; e < E; e++)
            g += moe_ds(e, aux_g, it, dsel, k) * s[e];
        for (int e = 0; e < E; e++)
            dl[e] = s[e] * (moe_ds(e, aux_g, it, dsel, k) - g);
    }
    if (dsel != stack)
        free(dsel);
}

void pt_kcpu_moe_score_colsum(pt_kernels *kn,
                              float *out,             /* (E), written */
                              const float *scores,    /* (n, E) */
                              int64_t n, int E)
{
    (void)kn;
    for (int e = 0; e < E; e++) {
        double acc = 0.0;
        for (int64_t t = 0; t < n; t++)
            acc += scores[t * E + e];
        out[e] = (float)acc;
    }
}

void pt_kcpu_moe_dispatch_plan(pt_kernels *kn,
                               int32_t *pos,          /* (n, k) */
                               int32_t *src,          /* (n·k) */
                               int64_t *counts,       /* (E) */
                               const int32_t *idx,    /* (n, k) */
                               int64_t n, int E, int k, int64_t capacity)
{
    /* next[e]: expert e's next row; end[e]: one past its last kept row */
    int64_t *next = malloc(2 * (size_t)(E > 0 ? E : 1) * sizeof *next), *end = next + E;
    if (!next) {
        if (!kn->err[0])
            snprintf(kn->err, sizeof kn->err, "moe_dispatch_plan: out of memory for %d "
                     "experts", E);
        return;
    }
    const int64_t nk = n * k;
    memset(counts, 0, (size_t)E * sizeof *counts);
    for (int64_t f = 0; f < nk; f++)
        counts[idx[f]]++;
    int64_t row = 0;
    for (int e = 0; e < E; e++) {
        if (capacity >= 0 && counts[e] > capacity)
            counts[e] = capacity;
        next[e] = row;
        row += counts[e];
        end[e] = row;
    }
    /* in flattened order, so that each expert's rows follow (t, j) order */
    for (int64_t f = 0; f < nk; f++) {
        const int e = idx[f];
        if (next[e] < end[e]) {
            pos[f] = (int32_t)next[e];
            src[next[e]++] = (int32_t)(f / k);
        } else {
            pos[f] = -1;
        }
    }
    free(next);
}

void pt_kcpu_moe_gather_rows(pt_kernels *kn,
                             float *out,              /* (m, h) */
                             const float *x,          /* (n, h) */
                             const int32_t *src,      /* (m) */
                             int64_t m, int h)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(m * h)
    for (int64_t i = 0; i < m; i++)
        memcpy(out + i * h, x + (int64_t)src[i] * h, (size_t)h * sizeof(float));
}

void pt_kcpu_moe_gather_rows_backward(pt_kernels *kn,
                                      float *dx,            /* (n, h), += */
                                      const float *dout,    /* (m, h) */
                                      const int32_t *pos,   /* (n, k) */
                                      int64_t n, int k, int h)
{
    (void)kn;
    /* each element gets its slots' rows added in j order, as the CUDA kernel adds them */
    PT_KCPU_PARALLEL_FOR(n * k * h)
    for (int64_t t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            const int32_t p = pos[t * k + j];
            if (p < 0)
                continue;
            const float *row = dout + (int64_t)p * h;
            float *d = dx + t * h;
            for (int c = 0; c < h; c++)
                d[c] += row[c];
        }
}

void pt_kcpu_moe_combine_forward(pt_kernels *kn,
                                 float *out,          /* (n, h), written */
                                 const float *y,      /* (m, h) */
                                 const int32_t *pos,  /* (n, k) */
                                 const float *w,      /* (n, k) */
                                 int64_t n, int k, int h)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * k * h)
    for (int64_t t = 0; t < n; t++) {
        float *o = out + t * h;
        memset(o, 0, (size_t)h * sizeof(float));
        for (int j = 0; j < k; j++) {
            const int32_t p = pos[t * k + j];
            if (p < 0)
                continue;
            const float wj = w[t * k + j], *row = y + (int64_t)p * h;
            for (int c = 0; c < h; c++)
                o[c] += wj * row[c];
        }
    }
}

void pt_kcpu_moe_combine_backward(pt_kernels *kn,
                                  float *dy,           /* (m, h), written */
                                  float *dw,           /* (n, k), written */
                                  const float *dout,   /* (n, h) */
                                  const float *y,      /* (m, h) */
                                  const int32_t *pos,  /* (n, k) */
                                  const float *w,      /* (n, k) */
                                  int64_t n, int k, int h)
{
    (void)kn;
    PT_KCPU_PARALLEL_FOR(n * k * h)
    for (int64_t t = 0; t < n; t++) {
        const float *d = dout + t * h;
        for (int j = 0; j < k; j++) {
            const int32_t p = pos[t * k + j];
            if (p < 0) {
                dw[t * k + j] = 0.0f;
                continue;
            }
            const float wj = w[t * k + j], *row = y + (int64_t)p * h;
            float *dr = dy + (int64_t)p * h, dot = 0.0f;
            for (int c = 0; c < h; c++) {
                dr[c] = wj * d[c];
                dot += d[c] * row[c];
            }
            dw[t * k + j] = dot;
        }
    }
}

void pt_kcpu_matmul_grouped_forward(pt_kernels *kn,
                                    float *out,             /* (m, oc) */
                                    const float *inp,       /* (m, ic) */
                                    const float *w,         /* (G, oc, ic) */
                                    const int64_t *counts,  /* (G) host */
                                    int G, int ic, int oc)
{
    int64_t row = 0;
    for (int g = 0; g < G; g++) {
        if (counts[g] > 0)
            pt_kcpu_matmul_forward(kn, out + row * oc, inp + row * ic,
                                   w + (int64_t)g * oc * ic, NULL, counts[g], ic, oc);
        row += counts[g] > 0 ? counts[g] : 0;
    }
}

void pt_kcpu_matmul_grouped_backward(pt_kernels *kn,
                                     float *dinp,            /* (m, ic) or NULL */
                                     float *dw,              /* (G, oc, ic) or NULL */
                                     const float *dout,      /* (m, oc) */
                                     const float *inp,       /* (m, ic) */
                                     const float *w,         /* (G, oc, ic) */
                                     const int64_t *counts,  /* (G) host */
                                     int G, int ic, int oc)
{
    int64_t row = 0;
    for (int g = 0; g < G; g++) {
        const int64_t wo = (int64_t)g * oc * ic;
        if (counts[g] > 0)
            pt_kcpu_matmul_backward(kn, dinp ? dinp + row * ic : NULL, dw ? dw + wo : NULL,
                                    NULL, dout + row * oc, inp + row * ic, w + wo,
                                    counts[g], ic, oc);
        row += counts[g] > 0 ? counts[g] : 0;
    }
}
