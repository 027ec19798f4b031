/*
 * Tests of the CUDA emulator (kernels/emu/, the PT_CUDA_EMU build) on its own, with
 * kernels written here and launched through kernels/cuda/cuda.cuh's PT_LAUNCH:
 * - thread orders: a kernel with a missing __syncthreads gives wrong results in reverse
 *   and shuffled order (forward order hides it), and right ones in every order with the
 *   barrier; barriers that cannot complete (divergent __syncthreads, threads that
 *   returned, a shuffle missing a lane, mismatched collectives, a misaligned ldmatrix)
 *   end the launch with a sticky cudaErrorLaunchFailure and a report, never a hang;
 * - warp shuffles and votes against the CUDA Programming Guide's rules;
 * - bf16 conversions: round to nearest even, NaN kept, the CPU backend's bits;
 * - FP8 (cuda_fp8.h's stand-in): every byte's value and the rounding of every bf16
 *   pattern (and a million floats) against kernels.h's pt_kfp8_to_f32 / _from_f32;
 * - mma.m16n8k16 from fragments built by the PTX ISA's layout formulas, and from
 *   ldmatrix x4 / x4.trans, against a plain matrix product; cp.async groups, landing at
 *   issue or at the wait as the order says;
 * - the cuBLASLt stand-in against a naive GEMM over transposes, leading dimensions,
 *   output types, bias, in place and batches, its epilogues (GELU with its aux matrix,
 *   the GELU gradient, the bias gradient of B) against their definitions, and the
 *   statuses of bad arguments (an aux leading dimension that is no multiple of 8, a
 *   missing aux or bias-gradient pointer, a misaligned aux); its FP8 matmul (TN, scale
 *   pointers, bf16 out with a bias, fp32 out with beta = 1) bit for bit against the same
 *   sums, and the FP8 combinations it refuses as the real library does;
 * - CUB's radix sort: stability, bit ranges, signed keys, the temporary storage;
 * - the runtime: launch limits, shared memory limits, memory checks, events, streams.
 * Faults print their report on stderr; the test says beforehand which ones to expect.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <initializer_list>
#include <vector>

#include <cub/cub.cuh>

#include "check.h"
#include "cuda.cuh"
#include "cuda_fp8.h"
#include "pt_emu_test.h"

static const unsigned FULL = 0xffffffffu;

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand() /* [-1, 1) */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 0x2545F4914F6CDD1Dull) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

template <typename T> static T *dev_alloc(size_t n)
{
    T *p = NULL;
    CHECK_INT(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    return p;
}

template <typename T> static std::vector<T> download(const T *dev, size_t n)
{
    std::vector<T> h(n);
    CHECK_INT(cudaMemcpy(h.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
}

/* ---- Thread orders and a missing barrier --------------------------------------------------- */

/* each thread writes its slot, then reads its left neighbour's: correct only with the
 * barrier, since nothing else orders the write before the read */
__global__ void neighbour_kernel(int *out, int salt, int barrier)
{
    __shared__ int s[256];
    const int t = threadIdx.x;
    s[t] = 1000 * (int)blockIdx.x + 7 * t + salt;
    if (barrier)
        __syncthreads();
    out[blockIdx.x * blockDim.x + t] = t > 0 ? s[t - 1] : -1;
}

/* wrong outputs of two blocks of 256 threads (salt differs per launch, so values a
 * previous launch left in the static shared array are wrong too) */
static int neighbour_wrong(int barrier, int salt)
{
    int *out = dev_alloc<int>(512);
    PT_LAUNCH(2, 256, 0, 0, neighbour_kernel)(out, salt, barrier);
    CHECK_INT(cudaGetLastError(), cudaSuccess);
    std::vector<int> h = download(out, 512);
    int wrong = 0;
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 256; t++)
            wrong += h[b * 256 + t] != (t > 0 ? 1000 * b + 7 * (t - 1) + salt : -1);
    cudaFree(out);
    return wrong;
}

static void test_orders()
{
    int salt = 1;
    for (int order = pt_emu::ORDER_FORWARD; order <= pt_emu::ORDER_SHUFFLE; order++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            pt_emu::set_schedule(order, seed);
            CHECK_INT(neighbour_wrong(1, salt++), 0);
            const int wrong = neighbour_wrong(0, salt++);
            if (order == pt_emu::ORDER_FORWARD)
                CHECK_INT(wrong, 0); /* forward order hides the missing barrier */
            else if (!(wrong > 100)) {
                fprintf(stderr, "missing barrier: order %d seed %llu: only %d wrong\n", order,
                        (unsigned long long)seed, wrong);
                pt_check_failures++;
            }
        }
    pt_emu::set_schedule(pt_emu::ORDER_SHUFFLE, 0x5eed);
}

/* ---- Barriers that cannot complete --------------------------------------------------------- */

__global__ void divergent_barrier_kernel(int *out)
{
    if (threadIdx.x < 32)
        __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void barrier_after_return_kernel(int *out)
{
    if (threadIdx.x == 5)
        return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void shuffle_after_return_kernel(int *out)
{
    if (threadIdx.x % 32 == 3)
        return;
    out[threadIdx.x] = __shfl_xor_sync(FULL, (int)threadIdx.x, 1);
}

__global__ void mismatched_collectives_kernel(int *out)
{
    out[threadIdx.x] = threadIdx.x < 16 ? __shfl_xor_sync(FULL, 1, 1)
                                        : (int)__ballot_sync(FULL, 1);
}

__global__ void misaligned_ldmatrix_kernel(int *out)
{
    PT_DYNAMIC_SMEM(smem);
    uint32_t r[4];
    pt_emu::ldmatrix_x4(r, smem + 2 + 16 * (threadIdx.x % 8), false);
    out[threadIdx.x] = (int)r[0];
}

/* launches kernel (64 threads) and expects a fault whose report contains needle; the
 * error is sticky until cudaDeviceReset */
static void expect_fault(const char *what, void (*kernel)(int *), const char *needle)
{
    fprintf(stderr, "test_emu: expect a fault report: %s\n", what);
    int *out = dev_alloc<int>(64);
    PT_LAUNCH(1, 64, 256, 0, kernel)(out);
    CHECK_INT(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    CHECK_STR_HAS(pt_emu::last_fault(), needle);
    void *p = NULL;
    CHECK_INT(cudaMalloc(&p, 16), cudaErrorLaunchFailure);
    CHECK_INT(cudaGetLastError(), cudaErrorLaunchFailure);
    CHECK_INT(cudaGetLastError(), cudaErrorLaunchFailure); /* sticky: not cleared */
    PT_LAUNCH(1, 32, 0, 0, kernel)(out); /* nothing runs on a failed device */
    CHECK_INT(cudaDeviceReset(), cudaSuccess);
    CHECK_INT(cudaGetLastError(), cudaSuccess);
    CHECK_INT(cudaMalloc(&p, 16), cudaSuccess);
    CHECK_INT(cudaFree(p), cudaSuccess);
}

static void test_faults()
{
    expect_fault("__syncthreads in divergent code", divergent_barrier_kernel,
                 "32 wait at __syncthreads, 0 at warp collectives, 32 have returned");
    expect_fault("__syncthreads after a thread returned", barrier_after_return_kernel,
                 "63 wait at __syncthreads, 0 at warp collectives, 1 have returned");
    expect_fault("a shuffle a lane never reaches", shuffle_after_return_kernel,
                 "lanes 0x00000008 of it never came");
    expect_fault("a shuffle and a ballot at once", mismatched_collectives_kernel,
                 "while lanes");
    expect_fault("ldmatrix from a misaligned row", misaligned_ldmatrix_kernel,
                 "is not 16-byte aligned");
}

/* ---- Shuffles and votes -------------------------------------------------------------------- */

__global__ void shuffle_kernel(int *out)
{
    const int lane = threadIdx.x % 32, v = 100 * (int)threadIdx.x;
    int *o = out + threadIdx.x * 8;
    o[0] = __shfl_xor_sync(FULL, v, 5);
    o[1] = __shfl_down_sync(FULL, v, 3, 16);
    o[2] = __shfl_up_sync(FULL, v, 2, 8);
    o[3] = __shfl_sync(FULL, v, 23, 16);
    o[4] = (int)__ballot_sync(FULL, lane % 3 == 0);
    o[5] = __any_sync(FULL, lane == 31);
    o[6] = __all_sync(FULL, lane < 31);
    o[7] = __shfl_xor_sync(FULL, v, 16, 16);
}

static void test_shuffles()
{
    int *out = dev_alloc<int>(64 * 8);
    PT_LAUNCH(1, 64, 0, 0, shuffle_kernel)(out);
    std::vector<int> h = download(out, 64 * 8);
    for (int t = 0; t < 64; t++) {
        const int lane = t % 32, w = t - lane;
        const int *o = &h[t * 8];
        auto val = [&](int l) { return 100 * (w + l); };
        CHECK_INT(o[0], val(lane ^ 5));
        CHECK_INT(o[1], val(lane % 16 + 3 < 16 ? lane + 3 : lane));
        CHECK_INT(o[2], val(lane % 8 >= 2 ? lane - 2 : lane));
        CHECK_INT(o[3], val(lane / 16 * 16 + 23 % 16));
        CHECK_INT((unsigned)o[4], 0x49249249u);
        CHECK_INT(o[5], 1);
        CHECK_INT(o[6], 0);
        /* xor within width 16 may reach an earlier segment, not a later one */
        CHECK_INT(o[7], val(lane < 16 ? lane : lane ^ 16));
    }
    cudaFree(out);
}

/* ---- Indices ------------------------------------------------------------------------------- */

__global__ void index_kernel(int *out)
{
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int n = blockDim.x * blockDim.y * blockDim.z;
    int *o = out + 4 * (b * n + t);
    o[0] = (int)(threadIdx.x | threadIdx.y << 8 | threadIdx.z << 16);
    o[1] = (int)(blockIdx.x | blockIdx.y << 8 | blockIdx.z << 16);
    o[2] = (int)(blockDim.x | blockDim.y << 8 | blockDim.z << 16);
    o[3] = (int)(gridDim.x | gridDim.y << 8 | gridDim.z << 16);
}

static void test_indices()
{
    const dim3 grid(2, 3, 2), block(4, 3, 2);
    const int n = 2 * 3 * 2 * 4 * 3 * 2;
    int *out = dev_alloc<int>(4 * n);
    PT_LAUNCH(grid, block, 0, 0, index_kernel)(out);
    std::vector<int> h = download(out, 4 * n);
    int i = 0;
    for (unsigned bz = 0; bz < 2; bz++)
        for (unsigned by = 0; by < 3; by++)
            for (unsigned bx = 0; bx < 2; bx++)
                for (unsigned tz = 0; tz < 2; tz++)
                    for (unsigned ty = 0; ty < 3; ty++)
                        for (unsigned tx = 0; tx < 4; tx++, i++) {
                            CHECK_INT(h[4 * i], (int)(tx | ty << 8 | tz << 16));
                            CHECK_INT(h[4 * i + 1], (int)(bx | by << 8 | bz << 16));
                            CHECK_INT(h[4 * i + 2], 4 | 3 << 8 | 2 << 16);
                            CHECK_INT(h[4 * i + 3], 2 | 3 << 8 | 2 << 16);
                        }
    cudaFree(out);
}

/* ---- bf16 ---------------------------------------------------------------------------------- */

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_bf16()
{
    const struct {
        uint32_t in;
        uint16_t want;
    } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1 */
        {0x3f808000u, 0x3f80}, /* a tie, the even neighbour kept */
        {0x3f818000u, 0x3f82}, /* a tie, rounded up to the even neighbour */
        {0x3f808001u, 0x3f81}, /* above half */
        {0x3f807fffu, 0x3f80}, /* below half */
        {0xbf818000u, 0xbf82}, /* negative tie */
        {0x7f7fffffu, 0x7f80}, /* the largest float rounds to infinity */
        {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80}, {0x80000000u, 0x8000},
        {0x00000001u, 0x0000}, /* the smallest subnormal rounds to zero */
        {0x00018000u, 0x0002}, /* a subnormal tie */
    };
    for (const auto &c : cases)
        CHECK_INT(__bfloat16_as_ushort(__float2bfloat16(f32_of(c.in))), c.want);
    const uint32_t nans[] = {0x7fc00001u, 0xffa00000u, 0x7f800001u};
    for (uint32_t n : nans)
        CHECK(isnan(__bfloat162float(__float2bfloat16(f32_of(n)))));
    /* the backend's own rounding (cuda.cuh, pt_bf16_bits) and the CPU's agree with it */
    for (int i = 0; i < 100000; i++) {
        const float x = (float)(urand() * (i % 2 ? 1e3 : 1e-30));
        const uint16_t b = __bfloat16_as_ushort(__float2bfloat16(x));
        CHECK_INT(b, pt_k_bf16_from_f32(x));
        CHECK_INT(b, pt_bf16_bits(x));
    }
    for (uint32_t b = 0; b < 65536; b++) {
        const float f = __bfloat162float(__ushort_as_bfloat16((unsigned short)b));
        uint32_t u;
        memcpy(&u, &f, 4);
        CHECK_INT(u, b << 16);
    }
    const __nv_bfloat162 two = __floats2bfloat162_rn(1.0f, -2.0f);
    uint32_t bits;
    memcpy(&bits, &two, 4);
    CHECK_INT(bits, 0xc0003f80u); /* .x in the low half */
    const float2 back = __bfloat1622float2(two);
    CHECK(back.x == 1.0f && back.y == -2.0f);
}

/* ---- mma and ldmatrix ---------------------------------------------------------------------- */

static uint32_t pack16(uint16_t lo, uint16_t hi) { return (uint32_t)lo | (uint32_t)hi << 16; }

/* The fragments of lane l for A (16 x 16) and the two n-tiles of B (16 k x 16 n), both
 * row-major bf16 bits, by the PTX ISA's formulas (g = l / 4, t = l % 4). */
static void fragments(const uint16_t *A, const uint16_t *B, int l, uint32_t a[4], uint32_t b[4])
{
    const int g = l / 4, t = l % 4;
    a[0] = pack16(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]);
    a[1] = pack16(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]);
    a[2] = pack16(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]);
    a[3] = pack16(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
    for (int nt = 0; nt < 2; nt++) {
        const int col = nt * 8 + g;
        b[2 * nt] = pack16(B[2 * t * 16 + col], B[(2 * t + 1) * 16 + col]);
        b[2 * nt + 1] = pack16(B[(2 * t + 8) * 16 + col], B[(2 * t + 9) * 16 + col]);
    }
}

/* D (16 x 16) = A · B + C with the accumulator layout: c[0..1] = row g, columns 2t, 2t+1
 * of the n-tile; c[2..3] = row g + 8 */
__device__ void mma_both_tiles(float *D, const float *C, const uint32_t a[4], const uint32_t b[4])
{
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    for (int nt = 0; nt < 2; nt++) {
        const int c0 = nt * 8 + 2 * t;
        float c[4] = {C[g * 16 + c0], C[g * 16 + c0 + 1], C[(g + 8) * 16 + c0],
                      C[(g + 8) * 16 + c0 + 1]};
        pt_emu::mma_m16n8k16_bf16(c, a, b[2 * nt], b[2 * nt + 1]);
        D[g * 16 + c0] = c[0];
        D[g * 16 + c0 + 1] = c[1];
        D[(g + 8) * 16 + c0] = c[2];
        D[(g + 8) * 16 + c0 + 1] = c[3];
    }
}

__global__ void mma_direct_kernel(float *D, const uint16_t *A, const uint16_t *B, const float *C)
{
    uint32_t a[4], b[4];
    fragments(A, B, threadIdx.x, a, b);
    mma_both_tiles(D, C, a, b);
}

/* A and B through shared memory (rows 48 bytes apart) and ldmatrix, with the addresses
 * attention_tc.cu's frag_a and frag_b give; the fragments also go to frags */
__global__ void mma_ldmatrix_kernel(float *D, uint32_t *frags, const uint16_t *A,
                                    const uint16_t *B, const float *C)
{
    PT_DYNAMIC_SMEM(smem);
    constexpr int LDS = 24;
    uint16_t *As = (uint16_t *)smem, *Bs = As + 16 * LDS;
    const int lane = threadIdx.x;
    for (int e = lane; e < 256; e += 32) {
        As[e / 16 * LDS + e % 16] = A[e];
        Bs[e / 16 * LDS + e % 16] = B[e];
    }
    __syncwarp();
    uint32_t a[4], b[4];
    pt_emu::ldmatrix_x4(a, As + (lane & 15) * LDS + (lane >> 4) * 8, false);
    pt_emu::ldmatrix_x4(b, Bs + ((lane & 7) + ((lane >> 3) & 1) * 8) * LDS + (lane >> 4) * 8,
                        true);
    for (int i = 0; i < 4; i++) {
        frags[lane * 8 + i] = a[i];
        frags[lane * 8 + 4 + i] = b[i];
    }
    mma_both_tiles(D, C, a, b);
}

static void test_mma()
{
    std::vector<uint16_t> A(256), B(256);
    std::vector<float> C(256);
    for (int i = 0; i < 256; i++) {
        A[i] = pt_k_bf16_from_f32((float)urand());
        B[i] = pt_k_bf16_from_f32((float)urand());
        C[i] = (float)urand();
    }
    double want[256], scale = 0;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            double s = C[i * 16 + j];
            for (int k = 0; k < 16; k++)
                s += (double)pt_k_f32_from_bf16(A[i * 16 + k]) * pt_k_f32_from_bf16(B[k * 16 + j]);
            want[i * 16 + j] = s;
            scale = std::max(scale, fabs(s));
        }
    uint16_t *dA = dev_alloc<uint16_t>(256), *dB = dev_alloc<uint16_t>(256);
    float *dC = dev_alloc<float>(256), *dD = dev_alloc<float>(256);
    uint32_t *dF = dev_alloc<uint32_t>(256);
    cudaMemcpy(dA, A.data(), 512, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B.data(), 512, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, C.data(), 1024, cudaMemcpyHostToDevice);
    for (int way = 0; way < 2; way++) {
        if (way == 0)
            PT_LAUNCH(1, 32, 0, 0, mma_direct_kernel)(dD, dA, dB, dC);
        else
            PT_LAUNCH(1, 32, 2 * 16 * 24 * 2, 0, mma_ldmatrix_kernel)(dD, dF, dA, dB, dC);
        CHECK_INT(cudaGetLastError(), cudaSuccess);
        std::vector<float> D = download(dD, 256);
        for (int i = 0; i < 256; i++)
            if (!(fabs(D[i] - want[i]) <= 1e-6 * scale)) {
                fprintf(stderr, "mma (%s): D[%d][%d] = %g, want %g\n",
                        way ? "ldmatrix" : "fragments", i / 16, i % 16, D[i], want[i]);
                pt_check_failures++;
                break;
            }
    }
    std::vector<uint32_t> F = download(dF, 256);
    for (int l = 0; l < 32; l++) {
        uint32_t a[4], b[4];
        fragments(A.data(), B.data(), l, a, b);
        for (int i = 0; i < 4; i++) {
            CHECK_INT(F[l * 8 + i], a[i]);
            CHECK_INT(F[l * 8 + 4 + i], b[i]);
        }
    }
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaFree(dD);
    cudaFree(dF);
}

/* ---- cp.async ----------------------------------------------------------------------------- */

/* out[0..4]: dst before any wait, after waiting for all but the two newest groups, after
 * waiting for all */
__global__ void cp_async_kernel(int *out, const int4 *src)
{
    PT_DYNAMIC_SMEM(smem);
    int4 *dst = (int4 *)smem;
    for (int i = 0; i < 3; i++)
        dst[i] = int4{-1, -1, -1, -1};
    pt_emu::cp_async(&dst[0], &src[0], 16, 16);
    pt_emu::cp_async_commit();
    pt_emu::cp_async(&dst[1], &src[1], 16, 16);
    pt_emu::cp_async_commit();
    pt_emu::cp_async(&dst[2], &src[2], 16, 0); /* src-size 0: zeros, src not read */
    pt_emu::cp_async_commit();
    out[0] = dst[0].x;
    pt_emu::cp_async_wait(2);
    out[1] = dst[0].x;
    out[2] = dst[1].x;
    pt_emu::cp_async_wait(0);
    out[3] = dst[1].w;
    out[4] = dst[2].z;
}

/* data lands at the covering wait in reverse order, at once in forward order */
static void test_cp_async()
{
    const int4 host[3] = {{11, 12, 13, 14}, {21, 22, 23, 24}, {31, 32, 33, 34}};
    int4 *src = dev_alloc<int4>(3);
    int *out = dev_alloc<int>(5);
    cudaMemcpy(src, host, sizeof host, cudaMemcpyHostToDevice);
    const int lazy[5] = {-1, 11, -1, 24, 0}, eager[5] = {11, 11, 21, 24, 0};
    const int orders[2] = {pt_emu::ORDER_REVERSE, pt_emu::ORDER_FORWARD};
    for (int o = 0; o < 2; o++) {
        pt_emu::set_schedule(orders[o], 1);
        PT_LAUNCH(1, 1, 48, 0, cp_async_kernel)(out, src);
        std::vector<int> h = download(out, 5);
        for (int i = 0; i < 5; i++)
            CHECK_INT(h[i], o == 0 ? lazy[i] : eager[i]);
    }
    pt_emu::set_schedule(pt_emu::ORDER_SHUFFLE, 0x5eed);
    cudaFree(src);
    cudaFree(out);
}

/* ---- cuBLASLt ------------------------------------------------------------------------------ */

struct lt_case {
    int ta, tb, m, n, k, d_f32, bias, in_place, batch;
};

/* the end of a cuBLASLt test: its layouts, descriptors and device buffers (NULL: none) */
static void lt_free(std::initializer_list<cublasLtMatrixLayout_t> layouts,
                    std::initializer_list<cublasLtMatmulDesc_t> descs,
                    std::initializer_list<const void *> bufs)
{
    for (cublasLtMatrixLayout_t l : layouts)
        cublasLtMatrixLayoutDestroy(l);
    for (cublasLtMatmulDesc_t d : descs)
        cublasLtMatmulDescDestroy(d);
    for (const void *b : bufs)
        cudaFree((void *)b);
}

/* D = alpha · op(A) · op(B) + beta · C (+ bias) in double, column-major */
static void lt_naive(const lt_case &c, const std::vector<float> &A, int lda,
                     const std::vector<float> &B, int ldb, const std::vector<float> &C, int ldc,
                     const std::vector<float> &bias, float alpha, float beta, double *D)
{
    for (int j = 0; j < c.n; j++)
        for (int i = 0; i < c.m; i++) {
            double s = 0;
            for (int k = 0; k < c.k; k++)
                s += (double)(c.ta ? A[i * lda + k] : A[k * lda + i]) *
                     (c.tb ? B[k * ldb + j] : B[j * ldb + k]);
            D[j * c.m + i] = alpha * s + beta * C[j * ldc + i] + (c.bias ? bias[i] : 0.0f);
        }
}

static void test_lt_case(cublasLtHandle_t lt, const lt_case &c)
{
    const int lda = (c.ta ? c.k : c.m) + 3, ldb = (c.tb ? c.n : c.k) + 2, ldc = c.m + 1;
    const int a_cols = c.ta ? c.m : c.k, b_cols = c.tb ? c.k : c.n;
    const int64_t sa = (int64_t)lda * a_cols, sb = (int64_t)ldb * b_cols, sc = (int64_t)ldc * c.n;
    const size_t eb = c.d_f32 ? 4 : 2;
    const float alpha = 0.75f, beta = c.in_place ? 0.5f : -1.25f;
    /* host values, bf16-rounded where the device holds bf16 */
    auto rnd = [](bool to_bf16) {
        float x = (float)urand();
        return to_bf16 ? pt_k_f32_from_bf16(pt_k_bf16_from_f32(x)) : x;
    };
    std::vector<float> A(sa * c.batch), B(sb * c.batch), C(sc * c.batch), bias(c.m);
    for (float &x : A)
        x = rnd(true);
    for (float &x : B)
        x = rnd(true);
    for (float &x : C)
        x = rnd(!c.d_f32);
    for (float &x : bias)
        x = rnd(true);
    std::vector<uint16_t> Ab(A.size()), Bb(B.size()), Cb(C.size()), biasb(c.m);
    for (size_t i = 0; i < A.size(); i++)
        Ab[i] = pt_k_bf16_from_f32(A[i]);
    for (size_t i = 0; i < B.size(); i++)
        Bb[i] = pt_k_bf16_from_f32(B[i]);
    for (size_t i = 0; i < C.size(); i++)
        Cb[i] = pt_k_bf16_from_f32(C[i]);
    for (int i = 0; i < c.m; i++)
        biasb[i] = pt_k_bf16_from_f32(bias[i]);
    uint16_t *dA = dev_alloc<uint16_t>(A.size()), *dB = dev_alloc<uint16_t>(B.size());
    uint16_t *dbias = dev_alloc<uint16_t>(c.m);
    char *dC = dev_alloc<char>(C.size() * eb), *dD = c.in_place ? dC : dev_alloc<char>(C.size() * eb);
    cudaMemcpy(dA, Ab.data(), Ab.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, Bb.data(), Bb.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dbias, biasb.data(), biasb.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(dC, c.d_f32 ? (const void *)C.data() : (const void *)Cb.data(), C.size() * eb,
               cudaMemcpyHostToDevice);

    const cudaDataType ct = c.d_f32 ? CUDA_R_32F : CUDA_R_16BF;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc, ld;
    CHECK_INT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), 0);
    cublasOperation_t opa = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CHECK_INT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa), 0);
    CHECK_INT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb), 0);
    if (c.bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        const void *bp = dbias;
        cudaDataType bt = CUDA_R_16BF; /* D's type by default: fp32 D needs it said */
        CHECK_INT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                 sizeof epi), 0);
        CHECK_INT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                                 sizeof bp), 0);
        if (c.d_f32)
            CHECK_INT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                     &bt, sizeof bt), 0);
    }
    CHECK_INT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, c.ta ? c.k : c.m, a_cols, lda), 0);
    CHECK_INT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, c.tb ? c.n : c.k, b_cols, ldb), 0);
    CHECK_INT(cublasLtMatrixLayoutCreate(&lc, ct, c.m, c.n, ldc), 0);
    CHECK_INT(cublasLtMatrixLayoutCreate(&ld, ct, c.m, c.n, ldc), 0);
    if (c.batch > 1) {
        const int32_t bc = c.batch;
        const int64_t strides[4] = {sa, sb, sc, sc};
        cublasLtMatrixLayout_t ls[4] = {la, lb, lc, ld};
        for (int i = 0; i < 4; i++) {
            CHECK_INT(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                       &bc, sizeof bc), 0);
            CHECK_INT(cublasLtMatrixLayoutSetAttribute(
                          ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                          sizeof strides[i]), 0);
        }
    }
    cublasLtMatmulPreference_t pref;
    CHECK_INT(cublasLtMatmulPreferenceCreate(&pref), 0);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CHECK_INT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 1, &res, &found), 0);
    CHECK_INT(found, 1);
    CHECK_INT(res.state, CUBLAS_STATUS_SUCCESS);
    CHECK_INT(cublasLtMatmul(lt, desc, &alpha, dA, la, dB, lb, &beta, dC, lc, dD, ld, &res.algo,
                             NULL, 0, 0), 0);
    for (int b = 0; b < c.batch; b++) {
        std::vector<float> Ab1(A.begin() + b * sa, A.begin() + (b + 1) * sa);
        std::vector<float> Bb1(B.begin() + b * sb, B.begin() + (b + 1) * sb);
        std::vector<float> Cb1(C.begin() + b * sc, C.begin() + (b + 1) * sc);
        std::vector<double> want((size_t)c.m * c.n);
        lt_naive(c, Ab1, lda, Bb1, ldb, Cb1, ldc, bias, alpha, beta, want.data());
        double err = 0, scale = 1e-6;
        for (int j = 0; j < c.n; j++)
            for (int i = 0; i < c.m; i++) {
                const size_t at = (size_t)(b * sc + (int64_t)j * ldc + i);
                float got;
                if (c.d_f32)
                    cudaMemcpy(&got, dD + at * 4, 4, cudaMemcpyDeviceToHost);
                else {
                    uint16_t g;
                    cudaMemcpy(&g, dD + at * 2, 2, cudaMemcpyDeviceToHost);
                    got = pt_k_f32_from_bf16(g);
                }
                err = std::max(err, fabs(got - want[(size_t)j * c.m + i]));
                scale = std::max(scale, fabs(want[(size_t)j * c.m + i]));
            }
        /* bf16 output: half an ulp of 2^-8 relative; fp32: summation order only */
        const double tol = c.d_f32 ? 1e-5 : 4e-3;
        if (!(err / scale <= tol)) {
            fprintf(stderr, "cuBLASLt %c%c m%d n%d k%d %s%s%s batch %d: error %.3g > %.3g\n",
                    c.ta ? 'T' : 'N', c.tb ? 'T' : 'N', c.m, c.n, c.k, c.d_f32 ? "f32" : "bf16",
                    c.bias ? " bias" : "", c.in_place ? " in place" : "", b, err / scale, tol);
            pt_check_failures++;
        }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    lt_free({la, lb, lc, ld}, {desc}, {dA, dB, dbias, dC, c.in_place ? NULL : dD});
}

/* the statuses cuBLASLt documents for bad arguments, and the alignment contract */
static void test_lt_errors(cublasLtHandle_t lt)
{
    enum { M = 8, N = 4, K = 6 };
    uint16_t *A = dev_alloc<uint16_t>(M * K + 8), *B = dev_alloc<uint16_t>(K * N + 8);
    uint16_t *D = dev_alloc<uint16_t>(M * N + 8);
    cudaMemset(A, 0, (M * K + 8) * 2);
    cudaMemset(B, 0, (K * N + 8) * 2);
    const float one = 1.0f, zero = 0.0f;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld, bad_ld, wide, lf32;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, M, K, M);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, N, K);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, M, N, M);
    cublasLtMatrixLayoutCreate(&bad_ld, CUDA_R_16BF, M, N, M - 1);
    cublasLtMatrixLayoutCreate(&wide, CUDA_R_16BF, M, N + 1, M);
    cublasLtMatrixLayoutCreate(&lf32, CUDA_R_32F, M, K, M);
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, D, ld, D, ld, NULL, NULL, 0, 0),
              CUBLAS_STATUS_SUCCESS);
    CHECK_INT(cublasLtMatmul(NULL, desc, &one, A, la, B, lb, &zero, D, ld, D, ld, NULL, NULL, 0, 0),
              CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, D, wide, D, wide, NULL, NULL, 0,
                             0), CUBLAS_STATUS_INVALID_VALUE); /* n of D != n of B */
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, D, bad_ld, D, bad_ld, NULL, NULL,
                             0, 0), CUBLAS_STATUS_INVALID_VALUE); /* ld below the rows */
    CHECK_INT(cublasLtMatmul(lt, desc, &one, NULL, la, B, lb, &zero, D, ld, D, ld, NULL, NULL, 0, 0),
              CUBLAS_STATUS_INVALID_VALUE);
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A, la, B, lb, &one, NULL, ld, D, ld, NULL, NULL, 0, 0),
              CUBLAS_STATUS_INVALID_VALUE); /* beta != 0 needs C */
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A, lf32, B, lb, &zero, D, ld, D, ld, NULL, NULL, 0, 0),
              CUBLAS_STATUS_NOT_SUPPORTED); /* fp32 A with bf16 B */
    /* a transpose the sizes then contradict */
    cublasOperation_t t = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, D, ld, D, ld, NULL, NULL, 0, 0),
              CUBLAS_STATUS_INVALID_VALUE);
    cublasOperation_t n = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof n);
    /* attribute buffers of the wrong size */
    uint64_t big = 1;
    CHECK_INT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &big, sizeof big),
              CUBLAS_STATUS_INVALID_VALUE);
    /* an epilogue outside the stand-in, and the bias epilogue without its vector */
    cublasLtEpilogue_t gelu = CUBLASLT_EPILOGUE_GELU, bias = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu, sizeof gelu);
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, D, ld, D, ld, NULL, NULL, 0, 0),
              CUBLAS_STATUS_NOT_SUPPORTED);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &bias, sizeof bias);
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, D, ld, D, ld, NULL, NULL, 0, 0),
              CUBLAS_STATUS_INVALID_VALUE);
    size_t written = 0;
    uint32_t epi = 0;
    CHECK_INT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi,
                                             &written), 0);
    CHECK(epi == CUBLASLT_EPILOGUE_BIAS && written == sizeof epi);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    /* alignment: an algorithm found for 256-byte-aligned buffers refuses a 2-byte one;
     * one found with the alignment said works */
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CHECK_INT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &res, &found), 0);
    CHECK_INT(found, 1);
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A + 1, la, B, lb, &zero, D, ld, D, ld, &res.algo,
                             NULL, 0, 0), CUBLAS_STATUS_INVALID_VALUE);
    uint32_t two = 2;
    CHECK_INT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                   &two, sizeof two), 0);
    CHECK_INT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &res, &found), 0);
    CHECK_INT(cublasLtMatmul(lt, desc, &one, A + 1, la, B, lb, &zero, D, ld, D, ld, &res.algo,
                             NULL, 0, 0), CUBLAS_STATUS_SUCCESS);
    CHECK_INT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 0, &res, &found),
              CUBLAS_STATUS_INVALID_VALUE);
    CHECK_INT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, wide, wide, pref, 1, &res, &found),
              CUBLAS_STATUS_INVALID_VALUE);
    CHECK_INT(found, 0);
    cublasLtMatmulPreferenceDestroy(pref);
    lt_free({la, lb, ld, bad_ld, wide, lf32}, {desc}, {A, B, D});
}

/* the descriptors' attribute tables: a buffer of exactly the attribute's type, Get as Set
 * left it, the size query; unknown attributes, NULL objects and outputs refused */
static void test_lt_attributes()
{
    const cublasStatus_t BAD = CUBLAS_STATUS_INVALID_VALUE;
    CHECK_INT(cublasLtCreate(NULL), BAD);
    CHECK_INT(cublasLtMatmulDescCreate(NULL, CUBLAS_COMPUTE_32F, CUDA_R_32F), BAD);
    cublasLtMatmulDesc_t desc;
    CHECK_INT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), 0);
    /* the pointer mode takes its two values only; a refused one leaves it as it was */
    const int32_t device = CUBLASLT_POINTER_MODE_DEVICE, seven = 7;
    const cublasLtMatmulDescAttributes_t mode = CUBLASLT_MATMUL_DESC_POINTER_MODE;
    CHECK_INT(cublasLtMatmulDescSetAttribute(desc, mode, &device, sizeof device), 0);
    CHECK_INT(cublasLtMatmulDescSetAttribute(desc, mode, &seven, sizeof seven), BAD);
    CHECK_INT(cublasLtMatmulDescSetAttribute(desc, mode, NULL, sizeof seven), BAD);
    int32_t got = -1;
    size_t written = 0;
    CHECK_INT(cublasLtMatmulDescGetAttribute(desc, mode, &got, sizeof got, &written), 0);
    CHECK(got == CUBLASLT_POINTER_MODE_DEVICE && written == sizeof got);
    CHECK_INT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, NULL, 0,
                                             &written), 0);
    CHECK(written == sizeof(void *));
    CHECK_INT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &got,
                                             sizeof got, &written), BAD); /* int64_t */
    const cublasLtMatmulDescAttributes_t no_desc_attr = (cublasLtMatmulDescAttributes_t)5;
    CHECK_INT(cublasLtMatmulDescSetAttribute(desc, no_desc_attr, &got, sizeof got), BAD);
    CHECK_INT(cublasLtMatmulDescGetAttribute(desc, no_desc_attr, &got, sizeof got, &written), BAD);
    CHECK_INT(cublasLtMatmulDescGetAttribute(NULL, mode, &got, sizeof got, &written), BAD);
    CHECK_INT(cublasLtMatmulDescSetAttribute(NULL, mode, &device, sizeof device), BAD);
    cublasLtMatmulDescDestroy(desc);

    cublasLtMatrixLayout_t l;
    CHECK_INT(cublasLtMatrixLayoutCreate(NULL, CUDA_R_16BF, 4, 4, 4), BAD);
    CHECK_INT(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, 4, 4, 4), 0);
    const uint64_t rows = 8;
    const int32_t rows32 = 8;
    CHECK_INT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows),
              0);
    CHECK_INT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows32,
                                               sizeof rows32), BAD);
    CHECK_INT(cublasLtMatrixLayoutSetAttribute(l, (cublasLtMatrixLayoutAttribute_t)7, &rows,
                                               sizeof rows), BAD);
    CHECK_INT(cublasLtMatrixLayoutSetAttribute(NULL, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows,
                                               sizeof rows), BAD);
    cublasLtMatrixLayoutDestroy(l);

    cublasLtMatmulPreference_t pref;
    CHECK_INT(cublasLtMatmulPreferenceCreate(NULL), BAD);
    CHECK_INT(cublasLtMatmulPreferenceCreate(&pref), 0);
    const uint64_t ws = 1 << 20;
    const cublasLtMatmulPreferenceAttributes_t max_ws = CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES;
    CHECK_INT(cublasLtMatmulPreferenceSetAttribute(pref, max_ws, &ws, sizeof ws), 0);
    CHECK_INT(cublasLtMatmulPreferenceSetAttribute(pref, max_ws, &rows32, sizeof rows32), BAD);
    CHECK_INT(cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)2,
                                                   &rows32, sizeof rows32), BAD);
    CHECK_INT(cublasLtMatmulPreferenceSetAttribute(NULL, max_ws, &ws, sizeof ws), BAD);
    cublasLtMatmulPreferenceDestroy(pref);
}

/* ---- cuBLASLt's epilogues ---------------------------------------------------------------- */

static double gelu_ref(double x) /* tanh approximation, in double */
{
    const double s = 0.7978845608028654;
    return 0.5 * x * (1.0 + tanh(s * (x + 0.044715 * x * x * x)));
}

static double gelu_grad_ref(double x)
{
    const double s = 0.7978845608028654, th = tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3 * 0.044715 * x * x);
}

static float bf16_value(float x) { return pt_k_f32_from_bf16(pt_k_bf16_from_f32(x)); }

/* A column-major (M, K) · (K, N) product with D's rows M = 20 and the aux matrix's
 * leading dimension 24 (a multiple of 8 above the rows), run with one epilogue; the
 * buffers are bf16 on the device, values in [-2, 2) so that the GELU sees both sides. */
struct epi_fixture {
    enum { M = 20, N = 7, K = 13, AUX_LD = 24 };
    std::vector<float> A, B, bias, pre; /* bf16-rounded host values; pre: (AUX_LD, N) */
    uint16_t *dA, *dB, *dbias, *dpre, *dD;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;

    epi_fixture() : A(M * K), B(K * N), bias(M), pre(AUX_LD * N)
    {
        std::vector<float> *all[] = {&A, &B, &bias, &pre};
        for (std::vector<float> *v : all)
            for (float &x : *v)
                x = bf16_value((float)(2 * urand()));
        dA = upload(A);
        dB = upload(B);
        dbias = upload(bias);
        dpre = upload(pre);
        dD = dev_alloc<uint16_t>(M * N);
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, M, K, M);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, N, K);
        cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, M, N, M);
    }
    ~epi_fixture() { lt_free({la, lb, ld}, {desc}, {dA, dB, dbias, dpre, dD}); }
    static uint16_t *upload(const std::vector<float> &v)
    {
        std::vector<uint16_t> h(v.size());
        for (size_t i = 0; i < v.size(); i++)
            h[i] = pt_k_bf16_from_f32(v[i]);
        uint16_t *d = dev_alloc<uint16_t>(v.size());
        cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
        return d;
    }
    /* the product of element (i, j) as the stand-in sums it: fp32, in order of k */
    float product(int i, int j) const
    {
        float acc = 0.0f;
        for (int k = 0; k < K; k++)
            acc += A[k * M + i] * B[j * K + k];
        return acc;
    }
    void set(cublasLtMatmulDescAttributes_t attr, const void *buf, size_t bytes)
    {
        CHECK_INT(cublasLtMatmulDescSetAttribute(desc, attr, buf, bytes), 0);
    }
    void epilogue(cublasLtEpilogue_t e) { set(CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e); }
    void aux(const void *p, int64_t ldv)
    {
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p);
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldv, sizeof ldv);
    }
    cublasStatus_t run(cublasLtHandle_t lt)
    {
        const float one = 1.0f, zero = 0.0f;
        return cublasLtMatmul(lt, desc, &one, dA, la, dB, lb, &zero, dD, ld, dD, ld, NULL, NULL,
                              0, 0);
    }
};

/* D (bf16) against want within half an ulp of bf16 and a little fp32 */
static void check_bf16_near(const char *what, const uint16_t *dD, const std::vector<double> &want)
{
    std::vector<uint16_t> got = download(dD, want.size());
    double err = 0, scale = 1e-6;
    for (size_t i = 0; i < want.size(); i++) {
        err = std::max(err, fabs(pt_k_f32_from_bf16(got[i]) - want[i]));
        scale = std::max(scale, fabs(want[i]));
    }
    if (!(err / scale <= 4e-3)) {
        fprintf(stderr, "cuBLASLt %s: error %.3g > 4e-3\n", what, err / scale);
        pt_check_failures++;
    }
}

/* GELU_AUX_BIAS: aux = the biased fp32 sum rounded to bf16 (bits), D = its GELU, tanh
 * form, from the fp32 sum; GELU_AUX with an fp32 aux: the sum itself (bits) */
static void test_lt_gelu_aux(cublasLtHandle_t lt)
{
    typedef epi_fixture F;
    F f;
    f.epilogue(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    const void *bp = f.dbias;
    f.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
    uint16_t *aux = dev_alloc<uint16_t>(F::AUX_LD * F::N);
    cudaMemset(aux, 0, F::AUX_LD * F::N * 2);
    f.aux(aux, F::AUX_LD);
    CHECK_INT(f.run(lt), CUBLAS_STATUS_SUCCESS);
    std::vector<uint16_t> got_aux = download(aux, F::AUX_LD * F::N);
    std::vector<double> want(F::M * F::N);
    int bad = 0;
    for (int j = 0; j < F::N; j++)
        for (int i = 0; i < F::AUX_LD; i++) {
            const uint16_t g = got_aux[j * F::AUX_LD + i];
            if (i >= F::M) { /* past D's rows: untouched */
                bad += g != 0;
                continue;
            }
            const float v = f.product(i, j) + f.bias[i];
            bad += g != pt_k_bf16_from_f32(v);
            want[j * F::M + i] = gelu_ref(v);
        }
    CHECK_INT(bad, 0);
    check_bf16_near("GELU_AUX_BIAS", f.dD, want);

    F g; /* GELU_AUX, the aux matrix in fp32 */
    g.epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
    float *aux32 = dev_alloc<float>(F::AUX_LD * F::N);
    const int32_t f32 = CUDA_R_32F;
    g.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &f32, sizeof f32);
    g.aux(aux32, F::AUX_LD);
    CHECK_INT(g.run(lt), CUBLAS_STATUS_SUCCESS);
    std::vector<float> got32 = download(aux32, F::AUX_LD * F::N);
    bad = 0;
    for (int j = 0; j < F::N; j++)
        for (int i = 0; i < F::M; i++) {
            const float v = g.product(i, j);
            bad += memcmp(&got32[j * F::AUX_LD + i], &v, 4) != 0;
            want[j * F::M + i] = gelu_ref(v);
        }
    CHECK_INT(bad, 0);
    check_bf16_near("GELU_AUX fp32 aux", g.dD, want);
    cudaFree(aux);
    cudaFree(aux32);
}

/* DGELU: D = the fp32 product times gelu'(aux), aux read with its leading dimension */
static void test_lt_dgelu(cublasLtHandle_t lt)
{
    typedef epi_fixture F;
    F f;
    f.epilogue(CUBLASLT_EPILOGUE_DGELU);
    f.aux(f.dpre, F::AUX_LD);
    CHECK_INT(f.run(lt), CUBLAS_STATUS_SUCCESS);
    std::vector<double> want(F::M * F::N);
    for (int j = 0; j < F::N; j++)
        for (int i = 0; i < F::M; i++)
            want[j * F::M + i] = f.product(i, j) * gelu_grad_ref(f.pre[j * F::AUX_LD + i]);
    check_bf16_near("DGELU", f.dD, want);
}

/* BGRADB on a weight-gradient product (fp32 D += A · B^T, as matmul.cu's dw): the bias
 * gradient, fp32 by default (D's type), is the column sums of op(B) over k in order of k
 * (bits), and D is what the plain product gives (bits) */
static void test_lt_bgradb(cublasLtHandle_t lt)
{
    enum { M = 12, N = 9, K = 70 };
    std::vector<float> A(M * K), Bt(N * K), C(M * N);
    for (float &x : A)
        x = bf16_value((float)urand());
    for (float &x : Bt)
        x = bf16_value((float)urand());
    for (float &x : C)
        x = (float)urand();
    uint16_t *dA = epi_fixture::upload(A), *dB = epi_fixture::upload(Bt);
    float *dC = dev_alloc<float>(M * N), *dC2 = dev_alloc<float>(M * N);
    float *grad = dev_alloc<float>(N);
    cudaMemcpy(dC, C.data(), M * N * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dC2, C.data(), M * N * 4, cudaMemcpyHostToDevice);
    cublasLtMatmulDesc_t plain, desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulDescCreate(&plain, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t t = CUBLAS_OP_T;
    cublasLtMatmulDescSetAttribute(plain, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BGRADB;
    CHECK_INT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                             sizeof epi), 0);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, M, K, M);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, N, K, N); /* B^T stored (N, K) */
    cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M);
    const float one = 1.0f;
    /* the bias-gradient pointer is required */
    CHECK_INT(cublasLtMatmul(lt, desc, &one, dA, la, dB, lb, &one, dC, lc, dC, lc, NULL, NULL, 0,
                             0), CUBLAS_STATUS_INVALID_VALUE);
    void *gp = grad;
    CHECK_INT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &gp,
                                             sizeof gp), 0);
    CHECK_INT(cublasLtMatmul(lt, desc, &one, dA, la, dB, lb, &one, dC, lc, dC, lc, NULL, NULL, 0,
                             0), CUBLAS_STATUS_SUCCESS);
    CHECK_INT(cublasLtMatmul(lt, plain, &one, dA, la, dB, lb, &one, dC2, lc, dC2, lc, NULL, NULL,
                             0, 0), CUBLAS_STATUS_SUCCESS);
    std::vector<float> got = download(grad, N), d1 = download(dC, M * N), d2 = download(dC2, M * N);
    int bad = 0;
    for (int j = 0; j < N; j++) {
        float s = 0.0f;
        for (int k = 0; k < K; k++)
            s += Bt[k * N + j];
        bad += memcmp(&got[j], &s, 4) != 0;
    }
    CHECK_INT(bad, 0);
    CHECK(memcmp(d1.data(), d2.data(), M * N * 4) == 0);
    lt_free({la, lb, lc}, {plain, desc}, {dA, dB, dC, dC2, grad});
}

/* the aux matrix's rules: leading dimension a multiple of 8 and at least D's rows, a
 * pointer present, aligned as when the heuristic ran; no batches */
static void test_lt_epilogue_errors(cublasLtHandle_t lt)
{
    typedef epi_fixture F;
    F f;
    f.epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t res;
    int found = -1;
    f.aux(f.dpre, 20); /* D's rows, but no multiple of 8 */
    CHECK_INT(f.run(lt), CUBLAS_STATUS_INVALID_VALUE);
    CHECK_INT(cublasLtMatmulAlgoGetHeuristic(lt, f.desc, f.la, f.lb, f.ld, f.ld, pref, 1, &res,
                                             &found), CUBLAS_STATUS_INVALID_VALUE);
    CHECK_INT(found, 0);
    f.aux(f.dpre, 16); /* a multiple of 8 below the rows */
    CHECK_INT(f.run(lt), CUBLAS_STATUS_INVALID_VALUE);
    f.aux(NULL, F::AUX_LD); /* no aux matrix */
    CHECK_INT(f.run(lt), CUBLAS_STATUS_INVALID_VALUE);
    /* an algorithm found for a 16-byte-aligned aux refuses one 2 bytes further */
    f.aux(f.dpre, F::AUX_LD);
    CHECK_INT(cublasLtMatmulAlgoGetHeuristic(lt, f.desc, f.la, f.lb, f.ld, f.ld, pref, 1, &res,
                                             &found), 0);
    CHECK_INT(found, 1);
    const float one = 1.0f, zero = 0.0f;
    f.aux(f.dpre + 1, F::AUX_LD);
    CHECK_INT(cublasLtMatmul(lt, f.desc, &one, f.dA, f.la, f.dB, f.lb, &zero, f.dD, f.ld, f.dD,
                             f.ld, &res.algo, NULL, 0, 0), CUBLAS_STATUS_INVALID_VALUE);
    f.aux(f.dpre, F::AUX_LD);
    CHECK_INT(cublasLtMatmul(lt, f.desc, &one, f.dA, f.la, f.dB, f.lb, &zero, f.dD, f.ld, f.dD,
                             f.ld, &res.algo, NULL, 0, 0), CUBLAS_STATUS_SUCCESS);
    int64_t ld = 0;
    size_t written = 0;
    CHECK_INT(cublasLtMatmulDescGetAttribute(f.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld,
                                             sizeof ld, &written), 0);
    CHECK(ld == F::AUX_LD && written == sizeof ld);
    /* an aux type outside bf16 and fp32; then batches, which have no aux stride here */
    const int32_t f16 = CUDA_R_16F, unset = -1, two = 2;
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &f16, sizeof f16);
    CHECK_INT(f.run(lt), CUBLAS_STATUS_NOT_SUPPORTED);
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &unset, sizeof unset);
    cublasLtMatrixLayout_t ls[3] = {f.la, f.lb, f.ld};
    for (cublasLtMatrixLayout_t l : ls)
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two);
    CHECK_INT(f.run(lt), CUBLAS_STATUS_NOT_SUPPORTED);
    cublasLtMatmulPreferenceDestroy(pref);
}

/* ---- FP8 ------------------------------------------------------------------------------------ */

/* cuda_fp8.h's stand-in against kernels.h's reference: every byte's value, and the
 * rounding of every bf16 bit pattern at four scales (so that mantissas below bf16's
 * last bit occur), a million random floats around the formats' ranges and the edges
 * (ties at the largest values, half the smallest subnormal), both saturation modes.
 * The stand-in's NaN is 0x7F without a sign, where the reference keeps the sign. */
static void test_fp8_formats()
{
    for (int f = 0; f < 2; f++) {
        const bool e5m2 = f == PT_KFP8_E5M2;
        int bad = 0;
        for (int q = 0; q < 256; q++) {
            float got = pt_emu::fp8_bits_to_float((uint8_t)q, e5m2);
            float want = pt_kfp8_to_f32((uint8_t)q, (pt_kfp8)f);
            bad += isnan(want) ? !isnan(got) : memcmp(&got, &want, sizeof got) != 0;
        }
        CHECK_INT(bad, 0);
        const __nv_fp8_interpretation_t interp = e5m2 ? __NV_E5M2 : __NV_E4M3;
        auto agree = [&](float x) {
            uint8_t got = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, interp);
            uint8_t want = pt_kfp8_from_f32(x, (pt_kfp8)f);
            return isnan(x) ? got == 0x7F : got == want;
        };
        const float scales[4] = {1.0f, 1.0f + 1.0f / 1024, 0.3f, 3.0e-3f};
        for (float sc : scales)
            for (uint32_t b = 0; b < 65536; b++)
                bad += !agree(f32_of(b << 16) * sc);
        for (int i = 0; i < 1000000; i++)
            bad += !agree((float)(urand() * ldexp(1.0, (int)(urand() * 40.0) - 8)));
        const float max = pt_kfp8_max((pt_kfp8)f);
        const float edges[] = {max, max * 1.0625f, max * 1.0703125f, max * 1.125f, max * 1.25f,
                               e5m2 ? 0x1p-17f : 0x1p-10f, e5m2 ? 0x1.8p-17f : 0x1.8p-10f,
                               INFINITY, 0.0f};
        for (float x : edges)
            bad += !agree(x) + !agree(-x);
        CHECK_INT(bad, 0);
        /* beyond the largest value without saturation: NaN (E4M3) or infinity (E5M2) */
        CHECK_INT(__nv_cvt_float_to_fp8(2 * max, __NV_NOSAT, interp), e5m2 ? 0x7C : 0x7F);
        CHECK_INT(__nv_cvt_float_to_fp8(-2 * max, __NV_NOSAT, interp), e5m2 ? 0xFC : 0xFF);
        CHECK_INT(__nv_cvt_float_to_fp8(-NAN, __NV_SATFINITE, interp), 0x7F);
        CHECK_INT(__nv_cvt_float2_to_fp8x2(make_float2(1.0f, -2.0f), __NV_SATFINITE, interp),
                  pt_kfp8_from_f32(1.0f, (pt_kfp8)f) | pt_kfp8_from_f32(-2.0f, (pt_kfp8)f) << 8);
    }
}

/* An FP8 matmul in the TN format: D (M, N) = op(A) · B, A (K, M) E4M3 transposed, B
 * (K, N) E5M2, with the scales from device pointers, against the same sums done here
 * in the same order (bit for bit): bf16 D with a bias, and fp32 D with beta = 1. Then
 * what the stand-in refuses, as its header lists. */
struct fp8_fixture {
    enum { M = 32, N = 8, K = 48 };
    std::vector<uint8_t> A, B;
    std::vector<float> C, bias;
    uint8_t *dA, *dB;
    float *dscale, *dC32;
    uint16_t *dbias, *dC16;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld16, ld32;

    fp8_fixture() : A(K * M), B(K * N), C(M * N), bias(M)
    {
        for (uint8_t &q : A)
            q = pt_kfp8_from_f32((float)(urand() * 300.0), PT_KFP8_E4M3);
        for (uint8_t &q : B)
            q = pt_kfp8_from_f32((float)(urand() * 0.01), PT_KFP8_E5M2);
        for (float &x : C)
            x = (float)urand();
        for (float &x : bias)
            x = pt_k_f32_from_bf16(pt_k_bf16_from_f32((float)urand()));
        dA = dev_alloc<uint8_t>(A.size());
        dB = dev_alloc<uint8_t>(B.size());
        dscale = dev_alloc<float>(2);
        dC32 = dev_alloc<float>(C.size());
        dbias = dev_alloc<uint16_t>(M);
        dC16 = dev_alloc<uint16_t>(C.size());
        const float scales[2] = {0.0625f, 3.0f};
        std::vector<uint16_t> bb(M);
        for (int i = 0; i < M; i++)
            bb[i] = pt_k_bf16_from_f32(bias[i]);
        cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice);
        cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice);
        cudaMemcpy(dscale, scales, sizeof scales, cudaMemcpyHostToDevice);
        cudaMemcpy(dC32, C.data(), C.size() * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dbias, bb.data(), M * 2, cudaMemcpyHostToDevice);
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        const cublasOperation_t t = CUBLAS_OP_T;
        set(CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
        const void *sa = dscale, *sb = dscale + 1;
        set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
        set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
        cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, K, M, K);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E5M2, K, N, K);
        cublasLtMatrixLayoutCreate(&ld16, CUDA_R_16BF, M, N, M);
        cublasLtMatrixLayoutCreate(&ld32, CUDA_R_32F, M, N, M);
    }
    ~fp8_fixture() { lt_free({la, lb, ld16, ld32}, {desc}, {dA, dB, dscale, dC32, dbias, dC16}); }
    void set(cublasLtMatmulDescAttributes_t attr, const void *v, size_t bytes)
    {
        CHECK_INT(cublasLtMatmulDescSetAttribute(desc, attr, v, bytes), 0);
    }
    /* the heuristic's status for D of layout ld (A's and B's layouts by default) */
    cublasStatus_t heuristic(cublasLtHandle_t lt, cublasLtMatrixLayout_t ld,
                             cublasLtMatrixLayout_t a = NULL, cublasLtMatrixLayout_t b = NULL)
    {
        cublasLtMatmulPreference_t pref;
        cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, desc, a ? a : la, b ? b : lb, ld,
                                                           ld, pref, 1, &res, &found);
        cublasLtMatmulPreferenceDestroy(pref);
        return st == CUBLAS_STATUS_SUCCESS && found != 1 ? CUBLAS_STATUS_INTERNAL_ERROR : st;
    }
    /* D(i, j) as the stand-in must compute it */
    float want(int i, int j, float beta, bool with_bias) const
    {
        float acc = 0.0f;
        for (int k = 0; k < K; k++)
            acc += pt_kfp8_to_f32(A[i * K + k], PT_KFP8_E4M3) *
                   pt_kfp8_to_f32(B[j * K + k], PT_KFP8_E5M2);
        float v = 1.0f * (0.0625f * 3.0f * acc);
        if (beta != 0.0f)
            v += beta * C[j * M + i];
        return with_bias ? v + bias[i] : v;
    }
};

static void test_lt_fp8(cublasLtHandle_t lt)
{
    typedef fp8_fixture F;
    F f;
    const float one = 1.0f, zero = 0.0f;
    /* bf16 D with the bias epilogue (the bias type left at its default, D's bf16) */
    const cublasLtEpilogue_t bias = CUBLASLT_EPILOGUE_BIAS, none = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bp = f.dbias;
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, &bias, sizeof bias);
    f.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
    CHECK_INT(f.heuristic(lt, f.ld16), 0);
    CHECK_INT(cublasLtMatmul(lt, f.desc, &one, f.dA, f.la, f.dB, f.lb, &zero, f.dC16, f.ld16,
                             f.dC16, f.ld16, NULL, NULL, 0, 0), 0);
    std::vector<uint16_t> d16(F::M * F::N);
    cudaMemcpy(d16.data(), f.dC16, d16.size() * 2, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int j = 0; j < F::N; j++)
        for (int i = 0; i < F::M; i++)
            bad += d16[j * F::M + i] != pt_k_bf16_from_f32(f.want(i, j, 0.0f, true));
    CHECK_INT(bad, 0);
    /* fp32 D: the default bias type (fp32) is refused, a bf16 bias taken; then no bias
     * and beta = 1 */
    CHECK_INT(f.heuristic(lt, f.ld32), CUBLAS_STATUS_NOT_SUPPORTED);
    const int32_t bf16 = CUDA_R_16BF;
    f.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bf16, sizeof bf16);
    CHECK_INT(f.heuristic(lt, f.ld32), 0);
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, &none, sizeof none);
    CHECK_INT(cublasLtMatmul(lt, f.desc, &one, f.dA, f.la, f.dB, f.lb, &one, f.dC32, f.ld32,
                             f.dC32, f.ld32, NULL, NULL, 0, 0), 0);
    std::vector<float> d32(F::M * F::N);
    cudaMemcpy(d32.data(), f.dC32, d32.size() * 4, cudaMemcpyDeviceToHost);
    for (int j = 0; j < F::N; j++)
        for (int i = 0; i < F::M; i++) {
            float w = f.want(i, j, 1.0f, false);
            bad += memcmp(&d32[j * F::M + i], &w, 4) != 0;
        }
    CHECK_INT(bad, 0);

    /* refusals: E5M2 x E5M2, an FP8 operand with a bf16 one, not TN, an epilogue beyond
     * DEFAULT and BIAS, a leading dimension that is no multiple of 16 bytes, a preference
     * alignment below 16 */
    const cublasStatus_t NO = CUBLAS_STATUS_NOT_SUPPORTED;
    cublasLtMatrixLayout_t a52, a16, odd, b_odd;
    cublasLtMatrixLayoutCreate(&a52, CUDA_R_8F_E5M2, F::K, F::M, F::K);
    cublasLtMatrixLayoutCreate(&a16, CUDA_R_16BF, F::K, F::M, F::K);
    cublasLtMatrixLayoutCreate(&odd, CUDA_R_8F_E4M3, F::K, F::M, F::K + 1);
    cublasLtMatrixLayoutCreate(&b_odd, CUDA_R_8F_E5M2, F::K, F::N, F::K + 8);
    CHECK_INT(f.heuristic(lt, f.ld16, a52), NO);
    CHECK_INT(f.heuristic(lt, f.ld16, a16), NO);
    CHECK_INT(f.heuristic(lt, f.ld16, odd), NO);
    CHECK_INT(f.heuristic(lt, f.ld16, NULL, b_odd), NO);
    const cublasOperation_t n = CUBLAS_OP_N, t = CUBLAS_OP_T;
    f.set(CUBLASLT_MATMUL_DESC_TRANSB, &t, sizeof t);
    CHECK_INT(f.heuristic(lt, f.ld16), NO);
    f.set(CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof n);
    f.set(CUBLASLT_MATMUL_DESC_TRANSA, &n, sizeof n);
    CHECK_INT(f.heuristic(lt, f.ld16), NO);
    f.set(CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    const cublasLtEpilogue_t gelu = CUBLASLT_EPILOGUE_GELU_AUX;
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu, sizeof gelu);
    CHECK_INT(f.heuristic(lt, f.ld16), NO);
    f.set(CUBLASLT_MATMUL_DESC_EPILOGUE, &none, sizeof none);
    CHECK_INT(f.heuristic(lt, f.ld16), 0);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    const uint32_t eight = 8;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &eight,
                                         sizeof eight);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    CHECK_INT(cublasLtMatmulAlgoGetHeuristic(lt, f.desc, f.la, f.lb, f.ld16, f.ld16, pref, 1,
                                             &res, &found), NO);
    CHECK_INT(found, 0);
    cublasLtMatmulPreferenceDestroy(pref);
    /* scale pointers with bf16 operands: INVALID_VALUE when it runs */
    cublasLtMatrixLayout_t b16;
    cublasLtMatrixLayoutCreate(&b16, CUDA_R_16BF, F::K, F::N, F::K);
    CHECK_INT(cublasLtMatmul(lt, f.desc, &one, f.dC16, a16, f.dC16, b16, &zero, f.dC16, f.ld16,
                             f.dC16, f.ld16, NULL, NULL, 0, 0), CUBLAS_STATUS_INVALID_VALUE);
    lt_free({a52, a16, odd, b_odd, b16}, {}, {});
}

static void test_cublaslt()
{
    cublasLtHandle_t lt;
    CHECK_INT(cublasLtCreate(&lt), 0);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int f32 = 0; f32 < 2; f32++) {
                test_lt_case(lt, lt_case{ta, tb, 19, 23, 29, f32, 0, 0, 1});
                test_lt_case(lt, lt_case{ta, tb, 70, 9, 33, f32, 1, 0, 1});
            }
    test_lt_case(lt, lt_case{0, 1, 65, 17, 40, 0, 1, 1, 1}); /* in place, bias */
    test_lt_case(lt, lt_case{1, 0, 12, 5, 7, 1, 0, 0, 3});   /* strided batches */
    test_lt_errors(lt);
    test_lt_attributes();
    test_lt_gelu_aux(lt);
    test_lt_dgelu(lt);
    test_lt_bgradb(lt);
    test_lt_epilogue_errors(lt);
    test_lt_fp8(lt);
    CHECK_INT(cublasLtDestroy(lt), 0);
}

/* ---- CUB's radix sort ---------------------------------------------------------------------- */

template <typename K>
static void sort_case(std::vector<K> keys, int begin_bit, int end_bit)
{
    const int n = (int)keys.size();
    std::vector<int32_t> pos(n);
    for (int i = 0; i < n; i++)
        pos[i] = i;
    K *dk = dev_alloc<K>(n), *dks = dev_alloc<K>(n);
    int32_t *dv = dev_alloc<int32_t>(n), *dvs = dev_alloc<int32_t>(n);
    cudaMemcpy(dk, keys.data(), n * sizeof(K), cudaMemcpyHostToDevice);
    cudaMemcpy(dv, pos.data(), n * 4, cudaMemcpyHostToDevice);
    size_t bytes = 0;
    CHECK_INT(cub::DeviceRadixSort::SortPairs(NULL, bytes, dk, dks, dv, dvs, n, begin_bit,
                                              end_bit), cudaSuccess);
    CHECK(bytes > 0);
    char *tmp = dev_alloc<char>(bytes);
    size_t less = bytes - 1;
    CHECK_INT(cub::DeviceRadixSort::SortPairs(tmp, less, dk, dks, dv, dvs, n, begin_bit, end_bit),
              cudaErrorInvalidValue);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK_INT(cub::DeviceRadixSort::SortPairs(tmp, bytes, dk, dks, dv, dvs, n, begin_bit, end_bit),
              cudaSuccess);
    /* the reference: a stable sort by the same bits, as numbers for signed keys */
    typedef typename std::make_unsigned<K>::type U;
    const U flip = std::is_signed<K>::value ? (U)((U)1 << (sizeof(K) * 8 - 1)) : 0;
    const U mask = end_bit - begin_bit >= (int)sizeof(K) * 8
                       ? (U)~(U)0
                       : (U)(((U)1 << (end_bit - begin_bit)) - 1);
    auto bits = [&](K k) { return (U)(((U)k ^ flip) >> begin_bit & mask); };
    std::vector<int32_t> want = pos;
    std::stable_sort(want.begin(), want.end(),
                     [&](int32_t a, int32_t b) { return bits(keys[a]) < bits(keys[b]); });
    std::vector<K> gk = download(dks, n);
    std::vector<int32_t> gv = download(dvs, n);
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += gv[i] != want[i] || gk[i] != keys[want[i]];
    CHECK_INT(bad, 0);
    cudaFree(dk);
    cudaFree(dks);
    cudaFree(dv);
    cudaFree(dvs);
    cudaFree(tmp);
}

static void test_sort()
{
    std::vector<int32_t> small(1000), noisy(777), mixed(500);
    for (int32_t &k : small) /* a few keys, many repeats: stability matters */
        k = (int32_t)((urand() + 1.0) * 18.5);
    for (int32_t &k : noisy) /* high bits outside the sorted range */
        k = (int32_t)((urand() + 1.0) * 32) + 64 * (int32_t)((urand() + 1.0) * 1000);
    for (int32_t &k : mixed)
        k = (int32_t)(urand() * 2e9);
    sort_case(small, 0, 6);
    sort_case(noisy, 0, 6);
    sort_case(mixed, 0, 32);
    sort_case(mixed, 3, 20);
    std::vector<uint64_t> wide(300);
    for (uint64_t &k : wide)
        k = (uint64_t)((urand() + 1.0) * 1e18);
    sort_case(wide, 0, 64);
}

/* ---- Launch limits and the runtime --------------------------------------------------------- */

__global__ void mark_kernel(int *out) { out[threadIdx.x] = 1; }

__global__ void smem_kernel(int *out, int bytes)
{
    PT_DYNAMIC_SMEM(smem);
    if (threadIdx.x == 0)
        out[0] = smem[0] == 0xff && smem[bytes - 1] == 0xff; /* poisoned, all of it */
}

static void test_launch_limits()
{
    int *out = dev_alloc<int>(2048);
    cudaMemset(out, 0, 2048 * 4);
    const struct {
        dim3 grid, block;
    } bad[] = {{1, 1025}, {1, dim3(32, 33)}, {1, dim3(1, 1, 65)}, {dim3(1, 65536), 32},
               {0, 32}, {1, 0}};
    for (const auto &b : bad) {
        PT_LAUNCH(b.grid, b.block, 0, 0, mark_kernel)(out);
        CHECK_INT(cudaGetLastError(), cudaErrorInvalidConfiguration);
        CHECK_INT(cudaGetLastError(), cudaSuccess); /* not sticky */
    }
    PT_LAUNCH(1, 1024, 0, 0, mark_kernel)(out);
    CHECK_INT(cudaGetLastError(), cudaSuccess);
    std::vector<int> h = download(out, 2048);
    CHECK_INT(std::count(h.begin(), h.end(), 1), 1024);
    /* dynamic shared memory: 48 KiB unless raised, up to the opt-in limit */
    PT_LAUNCH(1, 32, 48 * 1024 + 1, 0, smem_kernel)(out, 48 * 1024 + 1);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    CHECK_INT(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   227 * 1024 + 1), cudaErrorInvalidValue);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK_INT(cudaFuncSetAttribute(smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   200000), cudaSuccess);
    PT_LAUNCH(1, 32, 200000, 0, smem_kernel)(out, 200000);
    CHECK_INT(cudaGetLastError(), cudaSuccess);
    CHECK_INT(download(out, 1)[0], 1);
    PT_LAUNCH(1, 32, 200001, 0, smem_kernel)(out, 200001);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    PT_LAUNCH(1, 32, 0, (cudaStream_t)out, mark_kernel)(out); /* not a stream */
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    cudaFree(out);
}

static void test_runtime()
{
    int count = 0;
    CHECK_INT(cudaGetDeviceCount(&count), cudaSuccess);
    CHECK_INT(count, 1);
    cudaDeviceProp prop;
    CHECK_INT(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    CHECK_INT(prop.multiProcessorCount, 132);
    CHECK_INT(prop.sharedMemPerBlockOptin, 227 * 1024);
    CHECK_INT(prop.sharedMemPerMultiprocessor, 228 * 1024);
    CHECK_INT(prop.warpSize, 32);
    CHECK(prop.major == 9 && prop.minor == 0);
    CHECK_INT(cudaSetDevice(1), cudaErrorInvalidDevice);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidDevice);
    CHECK_INT(cudaGetLastError(), cudaSuccess);

    /* memory: aligned, filled with 0xff, copies and frees checked against allocations */
    unsigned char *p = NULL;
    CHECK_INT(cudaMalloc(&p, 1000), cudaSuccess);
    CHECK((uintptr_t)p % 256 == 0);
    std::vector<unsigned char> host(1001, 7);
    CHECK_INT(download(p, 1000)[999], 0xff);
    CHECK_INT(cudaMemcpy(p, host.data(), 1000, cudaMemcpyHostToDevice), cudaSuccess);
    CHECK_INT(cudaMemcpy(p, host.data(), 1001, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    CHECK_INT(cudaMemcpy(host.data(), p + 1, 1000, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    CHECK_INT(cudaMemcpy(host.data(), p, 10, (cudaMemcpyKind)9), cudaErrorInvalidMemcpyDirection);
    CHECK_INT(cudaMemset(p + 10, 0, 990), cudaSuccess);
    CHECK_INT(cudaMemset(p + 10, 0, 991), cudaErrorInvalidValue);
    CHECK_INT(cudaFree(p + 16), cudaErrorInvalidValue);
    CHECK_INT(cudaFree(p), cudaSuccess);
    CHECK_INT(cudaFree(p), cudaErrorInvalidValue);
    void *huge = NULL;
    CHECK_INT(cudaMalloc(&huge, (size_t)1 << 60), cudaErrorMemoryAllocation);
    CHECK_INT(cudaGetLastError(), cudaErrorMemoryAllocation);
    CHECK_INT(cudaMalloc(&huge, 16), cudaSuccess); /* not sticky */
    cudaFree(huge);

    /* events: host times of the records, in order; no time without a record or timing */
    cudaEvent_t e0, e1, untimed;
    cudaStream_t st;
    CHECK_INT(cudaStreamCreate(&st), cudaSuccess);
    CHECK_INT(cudaEventCreate(&e0), cudaSuccess);
    CHECK_INT(cudaEventCreate(&e1), cudaSuccess);
    CHECK_INT(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
    float ms = -1;
    CHECK_INT(cudaEventElapsedTime(&ms, e0, e1), cudaErrorInvalidResourceHandle);
    CHECK_INT(cudaEventRecord(e0, st), cudaSuccess);
    int *out = dev_alloc<int>(1024);
    PT_LAUNCH(64, 1024, 0, st, mark_kernel)(out);
    CHECK_INT(cudaEventRecord(e1, st), cudaSuccess);
    CHECK_INT(cudaEventRecord(untimed, st), cudaSuccess);
    CHECK_INT(cudaStreamWaitEvent(st, e1, 0), cudaSuccess);
    CHECK_INT(cudaStreamSynchronize(st), cudaSuccess);
    CHECK_INT(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
    CHECK(ms > 0);
    CHECK_INT(cudaEventElapsedTime(&ms, e1, e0), cudaSuccess);
    CHECK(ms < 0);
    CHECK_INT(cudaEventElapsedTime(&ms, e0, untimed), cudaErrorInvalidResourceHandle);
    CHECK_INT(cudaEventDestroy(untimed), cudaSuccess);
    CHECK_INT(cudaEventDestroy(untimed), cudaErrorInvalidResourceHandle);
    CHECK_INT(cudaEventDestroy(e0), cudaSuccess);
    CHECK_INT(cudaEventDestroy(e1), cudaSuccess);
    CHECK_INT(cudaStreamDestroy(st), cudaSuccess);
    CHECK_INT(cudaStreamSynchronize(st), cudaErrorInvalidResourceHandle);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    /* a destroyed stream is refused by the calls on it; flags outside the documented ones */
    CHECK_INT(cudaStreamDestroy(st), cudaErrorInvalidResourceHandle);
    CHECK_INT(cudaMemsetAsync(out, 0, 4, st), cudaErrorInvalidResourceHandle);
    CHECK_INT(cudaMemcpyAsync(out, out + 1, 4, cudaMemcpyDeviceToDevice, st),
              cudaErrorInvalidResourceHandle);
    CHECK_INT(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking + 1), cudaErrorInvalidValue);
    CHECK_INT(cudaStreamCreateWithFlags(NULL, cudaStreamDefault), cudaErrorInvalidValue);
    CHECK_INT(cudaEventCreateWithFlags(&e0, 4), cudaErrorInvalidValue);
    CHECK_INT(cudaGetLastError(), cudaErrorInvalidValue);
    cudaFree(out);
}

int main(void)
{
    test_runtime();
    test_launch_limits();
    test_indices();
    test_orders();
    test_shuffles();
    test_bf16();
    test_fp8_formats();
    test_mma();
    test_cp_async();
    test_cublaslt();
    test_sort();
    test_faults(); /* last: each resets the device */
    return pt_check_result();
}
