/*
 * Counter-based randomness: Philox4x32-10 (Salmon, Moraes, Dror & Shaw 2011,
 * "Parallel random numbers: as easy as 1, 2, 3", SC'11, §4.2; constants from their
 * Random123 library) and the dropout built on it. A dropout decision is a pure
 * function of (seed, tensor id, element index), so a mask does not depend on how a
 * tensor is split across ranks or threads, and the backward regenerates it instead
 * of storing it.
 */
#include "cpu.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

void pt_k_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

double pt_k_philox_unit(uint32_t word)
{
    return (double)(word >> 8) * (1.0 / 16777216.0);
}

/* the four uniforms of one Philox block: elements 4·blk .. 4·blk+3 of tensor_id */
static void dropout_block(uint64_t seed, uint64_t tensor_id, uint64_t blk, uint32_t r[4])
{
    uint32_t ctr[4] = {(uint32_t)blk, (uint32_t)(blk >> 32), (uint32_t)tensor_id,
                       (uint32_t)(tensor_id >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    pt_k_philox4x32_10(ctr, key, r);
}

static int dropout_keep_word(uint32_t word, float p)
{
    return pt_k_philox_unit(word) >= p; /* u is exact in float: as the CUDA kernel's test */
}

int pt_k_dropout_keep(uint64_t seed, uint64_t tensor_id, int64_t i, float p)
{
    uint32_t r[4];
    dropout_block(seed, tensor_id, (uint64_t)i / 4, r);
    return dropout_keep_word(r[i % 4], p);
}

/* out[i] = inp[i] · mask(offset + i) / (1 - p) (accumulating when acc) */
static void dropout_apply(float *out, const float *inp, int64_t n, float p, uint64_t seed,
                          uint64_t tensor_id, int64_t offset, int acc)
{
    const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    uint32_t r[4];
    int64_t blk = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t e = offset + i;
        if (e / 4 != blk) {
            blk = e / 4;
            dropout_block(seed, tensor_id, (uint64_t)blk, r);
        }
        float y = dropout_keep_word(r[e % 4], p) ? inp[i] * keep_scale : 0.0f;
        out[i] = acc ? out[i] + y : y;
    }
}

void pt_kcpu_dropout_forward(pt_kernels *kn,
                             float *out,            /* (n) */
                             const float *inp,      /* (n) */
                             int64_t n, float p, uint64_t seed, uint64_t tensor_id,
                             int64_t offset)
{
    (void)kn;
    dropout_apply(out, inp, n, p, seed, tensor_id, offset, 0);
}

void pt_kcpu_dropout_backward(pt_kernels *kn,
                              float *dinp,          /* (n) */
                              const float *dout,    /* (n) */
                              int64_t n, float p, uint64_t seed, uint64_t tensor_id,
                              int64_t offset)
{
    (void)kn;
    dropout_apply(dinp, dout, n, p, seed, tensor_id, offset, 1);
}
