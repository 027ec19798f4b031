/*
 * bf16 for the CUDA emulator (PT_CUDA_EMU): the __nv_bfloat16 and __nv_bfloat162 types
 * and the conversions kernels/cuda/ uses, with the semantics of NVIDIA's CUDA Math API
 * ("Bfloat16 Precision Conversion and Data Movement"): fp32 to bf16 rounds to nearest,
 * ties to even; a NaN stays a NaN (the canonical quiet NaN 0x7fff, as cvt.rn.bf16.f32
 * gives); bf16 to fp32 is exact. An __nv_bfloat162 holds .x in its low 16 bits.
 */
#ifndef PT_EMU_CUDA_BF16_H
#define PT_EMU_CUDA_BF16_H

#include <stdint.h>

#include "pt_emu_types.h"

namespace pt_emu {

/* fp32 -> bf16 bits, round to nearest even, NaN -> 0x7fff */
inline uint16_t bf16_bits_rn(float f)
{
    const uint32_t u = bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;
    const uint32_t lower = u & 0xffffu, upper = u >> 16;
    /* round up above the half-way point, and at it when the kept part is odd */
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u)))
        return (uint16_t)(upper + 1u);
    return (uint16_t)upper;
}

inline float bf16_bits_to_float(uint16_t b) { return bit_cast<float>((uint32_t)b << 16); }

} // namespace pt_emu

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(pt_emu::bf16_bits_rn(f)) {}
    __nv_bfloat16(double f) : __x(pt_emu::bf16_bits_rn((float)f)) {}
    operator float() const { return pt_emu::bf16_bits_to_float(__x); }
};

struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__nv_bfloat162) == 4, "bf16 sizes");

inline float __bfloat162float(__nv_bfloat16 b) { return pt_emu::bf16_bits_to_float(b.__x); }
inline __nv_bfloat16 __float2bfloat16(float f)
{
    __nv_bfloat16 b;
    b.__x = pt_emu::bf16_bits_rn(f);
    return b;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u)
{
    __nv_bfloat16 b;
    b.__x = u;
    return b;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }

inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 lo, __nv_bfloat16 hi)
{
    return __nv_bfloat162{lo, hi};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
    return __nv_bfloat162{__float2bfloat16(lo), __float2bfloat16(hi)};
}
inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return __floats2bfloat162_rn(v.x, v.y); }
inline float2 __bfloat1622float2(__nv_bfloat162 v)
{
    return float2{__bfloat162float(v.x), __bfloat162float(v.y)};
}
inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }

#endif
