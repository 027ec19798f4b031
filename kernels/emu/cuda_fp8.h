/*
 * FP8 for the CUDA emulator (PT_CUDA_EMU): the storage types, enumerations and
 * conversions of NVIDIA's cuda_fp8.h that kernels/cuda/ uses, with the semantics the
 * CUDA Math API documents ("FP8 Conversion and Data Movement"): fp32 to E4M3 or E5M2
 * rounds to nearest, ties to even; __NV_SATFINITE takes what lies beyond the largest
 * finite value (infinities too) to that value with the input's sign, __NV_NOSAT to NaN
 * (E4M3, which has no infinity) or infinity (E5M2); a NaN becomes the NaN 0x7F, without
 * its sign (what the toolkit's own conversion gives). The two-element form puts .x in the
 * low byte. Written for this project from the documentation and the OCP 8-bit Floating
 * Point Specification (2023), not copied from the toolkit; host C++17 only.
 *
 * The decoder fp8_bits_to_float is the emulator's own (for its cuBLASLt's FP8 matmul,
 * emu_cublaslt.cpp); tests/kernels/test_emu.cpp holds it and the conversions to
 * kernels.h's pt_kfp8_to_f32 and pt_kfp8_from_f32.
 */
#ifndef PT_EMU_CUDA_FP8_H
#define PT_EMU_CUDA_FP8_H

#include <stdint.h>

#include "pt_emu_types.h"

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short __nv_fp8x2_storage_t;

typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

namespace pt_emu {

/* x rounded to the format (nearest, ties to even), as its byte */
inline uint8_t fp8_from_float(float x, bool satfinite, bool e5m2)
{
    const int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, emin = 1 - bias;
    const uint32_t max_code = e5m2 ? 0x7Bu : 0x7Eu; /* 57344 and 448 */
    const uint32_t u = bit_cast<uint32_t>(x), a = u & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (a > 0x7f800000u)
        return 0x7F;
    /* a = sig · 2^(e - 23) (fp32 subnormals, e = -127, end up as zero below) */
    const int e = (int)(a >> 23) - 127;
    const uint32_t sig = (a & 0x7fffffu) | 0x800000u;
    /* the quantum of the target binade is 2^(max(e, emin) - mbits): drop `shift` bits */
    const int shift = 23 - mbits + (e < emin ? emin - e : 0);
    if (shift > 25) /* below half the smallest subnormal */
        return sign;
    uint32_t k = sig >> shift;
    const uint32_t rest = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (k & 1u)))
        k++;
    /* k counts quanta: the code is the binade's first code plus k (a carry out of the
     * mantissa, or out of the subnormals, steps the exponent field as it should) */
    const int64_t code = (int64_t)(e < emin ? 0 : e + bias - 1) * (1 << mbits) + k;
    if (code > (int64_t)max_code)
        return satfinite ? (uint8_t)(sign | max_code) : (uint8_t)(sign | (e5m2 ? 0x7Cu : 0x7Fu));
    return (uint8_t)(sign | (uint8_t)code);
}

/* a byte's value, exact in fp32 */
inline float fp8_bits_to_float(uint8_t q, bool e5m2)
{
    const int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    const uint32_t sign = (uint32_t)(q & 0x80u) << 24;
    const uint32_t e = (q & 0x7Fu) >> mbits, m = q & ((1u << mbits) - 1u);
    const uint32_t top = e5m2 ? 31u : 15u;
    if (e == top && (e5m2 || m == 7u)) /* E4M3: S.1111.111 is NaN; E5M2: inf, NaN */
        return bit_cast<float>(e5m2 && m == 0u ? sign | 0x7f800000u : 0x7fc00000u);
    if (e == 0u) { /* m · 2^(1 - bias - mbits), built from an exact product */
        const float v = (float)m * bit_cast<float>((uint32_t)(127 + 1 - bias - mbits) << 23);
        return bit_cast<float>(bit_cast<uint32_t>(v) | sign);
    }
    return bit_cast<float>(sign | (e - (uint32_t)bias + 127u) << 23 | m << (23 - mbits));
}

} // namespace pt_emu

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t saturate,
                                                __nv_fp8_interpretation_t interp)
{
    return pt_emu::fp8_from_float(x, saturate == __NV_SATFINITE, interp == __NV_E5M2);
}

inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(float2 x, __nv_saturation_t saturate,
                                                     __nv_fp8_interpretation_t interp)
{
    return (__nv_fp8x2_storage_t)(__nv_cvt_float_to_fp8(x.x, saturate, interp) |
                                  __nv_cvt_float_to_fp8(x.y, saturate, interp) << 8);
}

#endif
