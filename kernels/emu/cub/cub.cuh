/*
 * The CUB of the CUDA emulator (PT_CUDA_EMU): the one algorithm kernels/cuda/ uses,
 * cub::DeviceRadixSort::SortPairs (device/device_radix_sort.cuh).
 */
#ifndef PT_EMU_CUB_CUH
#define PT_EMU_CUB_CUH

#include "device/device_radix_sort.cuh"

#endif
