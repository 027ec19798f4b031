/*
 * CUB's cub::DeviceRadixSort::SortPairs for the CUDA emulator (PT_CUDA_EMU), after the
 * CUB documentation: a stable sort of (key, value) pairs by the key bits
 * [begin_bit, end_bit), with the two-phase temporary storage protocol (a call with
 * d_temp_storage = NULL only writes the bytes needed; a later call must bring at least
 * that many). Signed integer keys order as numbers (the sign bit is flipped first, as
 * CUB does). It runs on the host at once: an LSD radix sort, 8 bits per pass, whose
 * ping-pong buffers live in the temporary storage. Integer keys only.
 */
#ifndef PT_EMU_CUB_DEVICE_RADIX_SORT_CUH
#define PT_EMU_CUB_DEVICE_RADIX_SORT_CUH

#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "../../cuda_runtime.h"

namespace pt_emu {
/* The sticky error, or cudaErrorInvalidResourceHandle for a bad stream, recorded for
 * cudaGetLastError; else cudaSuccess: what a library call checks first (emu_runtime.cpp). */
cudaError_t library_call_check(cudaStream_t stream);
/* Records e for cudaGetLastError and returns it. */
cudaError_t set_error(cudaError_t e);
} // namespace pt_emu

namespace cub {

struct DeviceRadixSort {
    template <typename KeyT, typename ValueT, typename NumItemsT>
    static cudaError_t SortPairs(void *d_temp_storage, size_t &temp_storage_bytes,
                                 const KeyT *d_keys_in, KeyT *d_keys_out,
                                 const ValueT *d_values_in, ValueT *d_values_out,
                                 NumItemsT num_items, int begin_bit = 0,
                                 int end_bit = (int)sizeof(KeyT) * 8, cudaStream_t stream = 0)
    {
        static_assert(std::is_integral<KeyT>::value, "the emulated radix sort takes integer keys");
        typedef typename std::make_unsigned<KeyT>::type U;
        const size_t n = num_items > 0 ? (size_t)num_items : 0;
        const size_t keys_bytes = (n * sizeof(KeyT) + 255) / 256 * 256;
        const size_t values_bytes = (n * sizeof(ValueT) + 255) / 256 * 256;
        const size_t need = 2 * (keys_bytes + values_bytes) + 256;
        if (!d_temp_storage) {
            temp_storage_bytes = need;
            return cudaSuccess;
        }
        if (cudaError_t e = pt_emu::library_call_check(stream))
            return e;
        if (temp_storage_bytes < need || num_items < 0 || begin_bit < 0 ||
            end_bit > (int)sizeof(KeyT) * 8 || begin_bit > end_bit)
            return pt_emu::set_error(cudaErrorInvalidValue);
        char *t = (char *)d_temp_storage;
        KeyT *k0 = (KeyT *)t, *k1 = (KeyT *)(t + keys_bytes);
        ValueT *v0 = (ValueT *)(t + 2 * keys_bytes), *v1 = (ValueT *)(t + 2 * keys_bytes + values_bytes);
        memcpy(k0, d_keys_in, n * sizeof(KeyT));
        memcpy(v0, d_values_in, n * sizeof(ValueT));
        const U flip = std::is_signed<KeyT>::value ? (U)((U)1 << (sizeof(KeyT) * 8 - 1)) : (U)0;
        for (int bit = begin_bit; bit < end_bit; bit += 8) {
            const int width = end_bit - bit < 8 ? end_bit - bit : 8;
            const U digit_mask = (U)((1u << width) - 1u);
            size_t count[257] = {0};
            for (size_t i = 0; i < n; i++)
                count[(((U)k0[i] ^ flip) >> bit & digit_mask) + 1]++;
            for (int d = 0; d < 256; d++)
                count[d + 1] += count[d];
            for (size_t i = 0; i < n; i++) { /* in input order: stable */
                const size_t to = count[((U)k0[i] ^ flip) >> bit & digit_mask]++;
                k1[to] = k0[i];
                v1[to] = v0[i];
            }
            KeyT *tk = k0;
            k0 = k1;
            k1 = tk;
            ValueT *tv = v0;
            v0 = v1;
            v1 = tv;
        }
        memcpy(d_keys_out, k0, n * sizeof(KeyT));
        memcpy(d_values_out, v0, n * sizeof(ValueT));
        return cudaSuccess;
    }
};

} // namespace cub

#endif
