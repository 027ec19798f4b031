/*
 * bf16 <-> fp32 on the CPU. bf16 is the top half of an IEEE binary32; rounding to
 * it is to nearest with ties to even (the rounding of PyTorch and CUDA's
 * __float2bfloat16_rn), with NaN kept a NaN (rounding could otherwise carry a NaN
 * payload into the exponent and make it Inf).
 */
#include <string.h>

#include "cpu.h"

uint16_t pt_k_bf16_from_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)       /* NaN: keep the sign, force quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);            /* round half to even */
    return (uint16_t)(u >> 16);
}

float pt_k_f32_from_bf16(uint16_t x)
{
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void pt_kcpu_f32_to_bf16(pt_kernels *kn,
                         uint16_t *dst,             /* (n) */
                         const float *src,          /* (n) */
                         int64_t n)
{
    (void)kn;
    for (int64_t i = 0; i < n; i++)
        dst[i] = pt_k_bf16_from_f32(src[i]);
}

void pt_kcpu_bf16_to_f32(pt_kernels *kn,
                         float *dst,                /* (n) */
                         const uint16_t *src,       /* (n) */
                         int64_t n)
{
    (void)kn;
    for (int64_t i = 0; i < n; i++)
        dst[i] = pt_k_f32_from_bf16(src[i]);
}

void pt_kcpu_add_f32(pt_kernels *kn,
                     float *dst,                    /* (n) */
                     const float *src,              /* (n) */
                     int64_t n)
{
    (void)kn;
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}
