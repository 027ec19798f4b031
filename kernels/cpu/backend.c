/*
 * The CPU backend: fills the pt_kernels table with the fp32 OpenBLAS kernels of this
 * folder and provides host memory through it, so that the runtime drives CPU and CUDA
 * through the same calls. It also holds the data-type helpers of kernels.h, the
 * CUDA entry point used when the library is built without CUDA, and the reading of
 * the NVIDIA driver's release that the CUDA backend names in its description (plain
 * C, so that the CPU tests check it).
 */
#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

size_t pt_kdtype_bytes(pt_kdtype dt) { return dt == PT_KDTYPE_BF16 ? 2 : 4; }

const char *pt_kdtype_name(pt_kdtype dt) { return dt == PT_KDTYPE_BF16 ? "bf16" : "fp32"; }

static void cpu_destroy(pt_kernels *kn) { free(kn); }

static void *cpu_alloc(pt_kernels *kn, size_t bytes)
{
    (void)kn;
    /* aligned_alloc wants a size that is a multiple of the alignment (C11 7.22.3.1) */
    size_t rounded = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, rounded ? rounded : 64);
}

static void cpu_free(pt_kernels *kn, void *p)
{
    (void)kn;
    free(p);
}

static void cpu_copy(pt_kernels *kn, void *dst, const void *src, size_t bytes, pt_kcopy dir)
{
    (void)kn;
    (void)dir; /* host and "device" are the same memory */
    if (bytes)
        memmove(dst, src, bytes);
}

static void cpu_copy_rows(pt_kernels *kn, void *dst, size_t dst_pitch, const void *src,
                          size_t src_pitch, size_t row_bytes, size_t rows)
{
    (void)kn;
    for (size_t r = 0; r < rows && row_bytes; r++)
        memcpy((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, row_bytes);
}

static void cpu_zero(pt_kernels *kn, void *p, size_t bytes)
{
    (void)kn;
    if (bytes)
        memset(p, 0, bytes);
}

/* CPU ops run synchronously; the only failure is running out of scratch memory */
static int cpu_sync(pt_kernels *kn) { return kn->err[0] ? -1 : 0; }

/* optim.c: the multi-tensor optimizer step (declared here rather than in cpu.h while
 * that header is being changed alongside; they belong with pt_kcpu_adamw there) */
void pt_kcpu_sumsq_acc(pt_kernels *kn, const float *x, int64_t n, double *acc);
void pt_kcpu_sum_acc(pt_kernels *kn, const float *x, int64_t n, double *acc);
void pt_kcpu_adamw_multi(pt_kernels *kn, const pt_k_adamw_tensor *t, int count,
                         const pt_k_adamw_args *a);

/* scratch_bytes and reserve stay NULL: CPU ops take host memory, which no collective
 * waits on */
static const pt_kernels cpu_table = {
    .name = "cpu",
    .act_dtype = PT_KDTYPE_F32,
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .copy_rows = cpu_copy_rows,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .embed_forward = pt_kcpu_embed_forward,
    .embed_backward = pt_kcpu_embed_backward,
    .layernorm_forward = pt_kcpu_layernorm_forward,
    .layernorm_backward = pt_kcpu_layernorm_backward,
    .rmsnorm_forward = pt_kcpu_rmsnorm_forward,
    .rmsnorm_backward = pt_kcpu_rmsnorm_backward,
    .matmul_forward = pt_kcpu_matmul_forward,
    .matmul_backward = pt_kcpu_matmul_backward,
    .matmul_forward_gelu = pt_kcpu_matmul_forward_gelu,
    .matmul_forward_res = pt_kcpu_matmul_forward_res,
    .matmul_dgrad = pt_kcpu_matmul_dgrad,
    .matmul_forward_shared = pt_kcpu_matmul_forward_shared,
    .matmul_wgrad_shared = pt_kcpu_matmul_wgrad_shared,
    .matmul_backward_dgelu = pt_kcpu_matmul_backward_dgelu,
    .residual_layernorm_forward = pt_kcpu_residual_layernorm_forward,
    .residual_rmsnorm_forward = pt_kcpu_residual_rmsnorm_forward,
    .gemm = pt_kcpu_gemm,
    .gemm_f32 = pt_kcpu_gemm, /* the CPU backend's [act] is fp32 */
    .orthonormalize = pt_kcpu_orthonormalize,
    .rope_forward = pt_kcpu_rope_forward,
    .rope_backward = pt_kcpu_rope_backward,
    .attention_forward = pt_kcpu_attention_forward,
    .attention_backward = pt_kcpu_attention_backward,
    .attention_combine = pt_kcpu_attention_combine,
    .gelu_forward = pt_kcpu_gelu_forward,
    .gelu_backward = pt_kcpu_gelu_backward,
    .gelu_forward_amax = pt_kcpu_gelu_forward_amax,
    .gelu_backward_amax = pt_kcpu_gelu_backward_amax,
    .swiglu_forward = pt_kcpu_swiglu_forward,
    .swiglu_backward = pt_kcpu_swiglu_backward,
    .residual_forward = pt_kcpu_residual_forward,
    .residual_backward = pt_kcpu_residual_backward,
    .dropout_forward = pt_kcpu_dropout_forward,
    .dropout_backward = pt_kcpu_dropout_backward,
    .crossentropy = pt_kcpu_crossentropy,
    .ce_local_max = pt_kcpu_ce_local_max,
    .ce_local_sumexp = pt_kcpu_ce_local_sumexp,
    .ce_local_target = pt_kcpu_ce_local_target,
    .ce_finalize = pt_kcpu_ce_finalize,
    .adamw = pt_kcpu_adamw,
    .sumsq = pt_kcpu_sumsq,
    .sumsq_acc = pt_kcpu_sumsq_acc,
    .sum_acc = pt_kcpu_sum_acc,
    .adamw_multi = pt_kcpu_adamw_multi,
    .f32_to_bf16 = pt_kcpu_f32_to_bf16,
    .bf16_to_f32 = pt_kcpu_bf16_to_f32,
    .add_f32 = pt_kcpu_add_f32,
    .moe_route_forward = pt_kcpu_moe_route_forward,
    .moe_route_backward = pt_kcpu_moe_route_backward,
    .moe_score_colsum = pt_kcpu_moe_score_colsum,
    .moe_dispatch_plan = pt_kcpu_moe_dispatch_plan,
    .moe_gather_rows = pt_kcpu_moe_gather_rows,
    .moe_gather_rows_backward = pt_kcpu_moe_gather_rows_backward,
    .moe_combine_forward = pt_kcpu_moe_combine_forward,
    .moe_combine_backward = pt_kcpu_moe_combine_backward,
    .matmul_grouped_forward = pt_kcpu_matmul_grouped_forward,
    .matmul_grouped_backward = pt_kcpu_matmul_grouped_backward,
    .fp8_amax = pt_kcpu_fp8_amax,
    .fp8_scale = pt_kcpu_fp8_scale,
    .fp8_amax_scale = pt_kcpu_fp8_amax_scale,
    .fp8_cast_dbias = pt_kcpu_fp8_cast_dbias,
    .fp8_cast = pt_kcpu_fp8_cast,
    .gemm_fp8 = pt_kcpu_gemm_fp8,
};

pt_kernels *pt_kernels_cpu(int threads)
{
    pt_kernels *kn = malloc(sizeof *kn);
    if (!kn)
        return NULL;
    *kn = cpu_table;
    kn->err[0] = '\0';
    if (threads > 0) {
        openblas_set_num_threads(threads);
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
    }
    return kn;
}

size_t pt_k_scratch_bytes(pt_kernels *kn, const pt_k_scratch_shape *shape)
{
    return kn->scratch_bytes ? kn->scratch_bytes(kn, shape) : 0;
}

void pt_kernels_destroy(pt_kernels *kn)
{
    if (kn)
        kn->destroy(kn);
}

int pt_nvidia_driver_release(const char *text, char *out, size_t cap)
{
    if (!out || cap == 0)
        return -1;
    out[0] = '\0';
    if (!text)
        return -1;
    size_t line = strcspn(text, "\n");
    for (size_t w = 0; w < line;) {
        size_t e = w;
        bool number = true, dot = false;
        while (e < line && text[e] != ' ' && text[e] != '\t') {
            dot |= text[e] == '.';
            number &= text[e] == '.' || (text[e] >= '0' && text[e] <= '9');
            e++;
        }
        /* digits first and last: "580.159.04", not "x86_64", "9." or "..." */
        if (e > w && number && dot && text[w] != '.' && text[e - 1] != '.' && e - w < cap) {
            memcpy(out, text + w, e - w);
            out[e - w] = '\0';
            return 0;
        }
        w = e + 1;
    }
    return -1;
}

/* kernels/cuda/ defines the real one and sets PT_KERNELS_HAVE_CUDA when it is built. */
#ifndef PT_KERNELS_HAVE_CUDA
pt_kernels *pt_kernels_cuda(int device, char *err, size_t cap)
{
    if (err && cap)
        snprintf(err, cap, "CUDA device %d: ptkernels was built without CUDA", device);
    return NULL;
}

int pt_kernels_cuda_devices(void) { return 0; }
#endif
