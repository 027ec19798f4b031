/*
 * Rotary position embedding on the CPU (Su et al. 2021, RoFormer; pairs (2i, 2i+1)
 * as in Meta's LLaMA). The rotation is orthogonal, so the backward applies the
 * transposed rotation to the output gradient. d must be even. Angles are computed
 * in double from the absolute position, so a sequence chunk at offset pos0 (context
 * parallelism) rotates exactly as the same rows of the whole sequence.
 */
#include <math.h>

#include "cpu.h"

void pt_kcpu_rope_forward(pt_kernels *kn,
                          float *out,               /* (b, s, nh, d) */
                          const float *inp,         /* (b, s, nh, d) */
                          int b, int s, int nh, int d, int pos0, float theta)
{
    (void)kn;
    for (int si = 0; si < s; si++)
        for (int i = 0; i < d / 2; i++) {
            double freq = pow((double)theta, -2.0 * i / d);
            double angle = (double)(pos0 + si) * freq;
            float c = (float)cos(angle), sn = (float)sin(angle);
            for (int bi = 0; bi < b; bi++)
                for (int hi = 0; hi < nh; hi++) {
                    int64_t off = (((int64_t)bi * s + si) * nh + hi) * d + 2 * i;
                    float x0 = inp[off], x1 = inp[off + 1];
                    out[off] = x0 * c - x1 * sn;
                    out[off + 1] = x0 * sn + x1 * c;
                }
        }
}

void pt_kcpu_rope_backward(pt_kernels *kn,
                           float *dinp,             /* (b, s, nh, d) */
                           const float *dout,       /* (b, s, nh, d) */
                           int b, int s, int nh, int d, int pos0, float theta)
{
    (void)kn;
    for (int si = 0; si < s; si++)
        for (int i = 0; i < d / 2; i++) {
            double freq = pow((double)theta, -2.0 * i / d);
            double angle = (double)(pos0 + si) * freq;
            float c = (float)cos(angle), sn = (float)sin(angle);
            for (int bi = 0; bi < b; bi++)
                for (int hi = 0; hi < nh; hi++) {
                    int64_t off = (((int64_t)bi * s + si) * nh + hi) * d + 2 * i;
                    float g0 = dout[off], g1 = dout[off + 1];
                    /* the transpose of [[c, -sn], [sn, c]] */
                    dinp[off] += g0 * c + g1 * sn;
                    dinp[off + 1] += -g0 * sn + g1 * c;
                }
        }
}
