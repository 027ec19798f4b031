/*
 * Token and position embedding on the CPU, including the vocab-parallel form in
 * which a rank holds rows [v0, v0+vr) of the token table and produces a partial
 * sum. The backward scatters into the tables token by token in order, so repeated
 * tokens accumulate in a fixed order (no atomics).
 */
#include <string.h>

#include "cpu.h"

void pt_kcpu_embed_forward(pt_kernels *kn,
                           float *out,              /* (b, s, h) */
                           const int32_t *tokens,   /* (b, s) */
                           const float *wte,        /* (vr, h) */
                           const float *wpe,        /* (>= pos0+s, h) or NULL */
                           int b, int s, int h, int v0, int vr, int pos0)
{
    (void)kn;
    for (int bi = 0; bi < b; bi++)
        for (int si = 0; si < s; si++) {
            float *o = out + ((int64_t)bi * s + si) * h;
            int tok = tokens[(int64_t)bi * s + si] - v0;
            const float *pe = wpe ? wpe + (int64_t)(pos0 + si) * h : NULL;
            if (tok >= 0 && tok < vr) {
                const float *te = wte + (int64_t)tok * h;
                for (int i = 0; i < h; i++)
                    o[i] = pe ? te[i] + pe[i] : te[i];
            } else if (pe) {
                memcpy(o, pe, (size_t)h * sizeof(float));
            } else {
                memset(o, 0, (size_t)h * sizeof(float));
            }
        }
}

void pt_kcpu_embed_backward(pt_kernels *kn,
                            float *dwte,            /* (vr, h) or NULL */
                            float *dwpe,            /* (>= pos0+s, h) or NULL */
                            const float *dout,      /* (b, s, h) */
                            const int32_t *tokens,  /* (b, s) */
                            int b, int s, int h, int v0, int vr, int pos0)
{
    (void)kn;
    for (int bi = 0; bi < b; bi++)
        for (int si = 0; si < s; si++) {
            const float *g = dout + ((int64_t)bi * s + si) * h;
            int tok = tokens[(int64_t)bi * s + si] - v0;
            if (dwte && tok >= 0 && tok < vr) {
                float *dte = dwte + (int64_t)tok * h;
                for (int i = 0; i < h; i++)
                    dte[i] += g[i];
            }
            if (dwpe) {
                float *dpe = dwpe + (int64_t)(pos0 + si) * h;
                for (int i = 0; i < h; i++)
                    dpe[i] += g[i];
            }
        }
}
