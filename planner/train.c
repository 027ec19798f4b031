/*
 * Training settings: the precisions a job trains in (the bytes of a weight, its
 * gradient, master copy, Adam moments and an activation; their names) and the
 * defaults of a job's settings. The memory model (memory.c) and the op lists (ops.c)
 * both read pt_precision_of, so it lives here, beside the precision it describes, and
 * neither of them depends on the other for it.
 */
#include "spec.h"

#include <string.h>

static const char *const pt_prec_names[PT_PREC_COUNT] = {"bf16", "bf16-grad16", "fp32"};

pt_precision pt_precision_of(pt_prec_kind k)
{
    switch (k) {
    case PT_PREC_BF16_GRAD16: /* ZeRO paper Sec. 3.1: 2Ψ + 2Ψ + KΨ with K = 12 */
        return (pt_precision){.weight_bytes = 2, .grad_bytes = 2, .master_bytes = 4,
                              .moment_bytes = 8, .act_bytes = 2};
    case PT_PREC_FP32:
        return (pt_precision){.weight_bytes = 4, .grad_bytes = 4, .master_bytes = 0,
                              .moment_bytes = 8, .act_bytes = 4};
    case PT_PREC_BF16: /* gradients accumulated in fp32, as ptrun's CUDA backend does */
    default:
        return (pt_precision){.weight_bytes = 2, .grad_bytes = 4, .master_bytes = 4,
                              .moment_bytes = 8, .act_bytes = 2};
    }
}

pt_dtype pt_prec_dtype(pt_prec_kind k)
{
    return pt_precision_of(k).act_bytes == 4 ? PT_DTYPE_FP32 : PT_DTYPE_BF16;
}

const char *pt_prec_name(pt_prec_kind k)
{
    return (unsigned)k < PT_PREC_COUNT ? pt_prec_names[k] : "unknown";
}

int pt_prec_parse(const char *text, pt_prec_kind *out, pt_err *err)
{
    for (int k = 0; text && k < PT_PREC_COUNT; k++) {
        if (strcmp(text, pt_prec_names[k]) == 0) {
            *out = (pt_prec_kind)k;
            return 0;
        }
    }
    return pt_err_set(err, "unknown precision '%s' (expected bf16, bf16-grad16 or fp32)",
                      text ? text : "");
}

static const char *const pt_fp8_names[PT_FP8_COUNT] = {"off", "current", "delayed",
                                                        "blockwise", "rowwise"};

const char *pt_fp8_recipe_name(pt_fp8_recipe r)
{
    return (unsigned)r < PT_FP8_COUNT ? pt_fp8_names[r] : "unknown";
}

int pt_fp8_recipe_parse(const char *text, pt_fp8_recipe *out, pt_err *err)
{
    for (int r = 0; text && r < PT_FP8_COUNT; r++) {
        if (strcmp(text, pt_fp8_names[r]) == 0) {
            *out = (pt_fp8_recipe)r;
            return 0;
        }
    }
    return pt_err_set(err, "unknown FP8 recipe '%s' (expected off, current, delayed, "
                           "blockwise or rowwise)", text ? text : "");
}

void pt_train_default(pt_train *t, const pt_cluster *c)
{
    t->global_batch = 512;
    /* PyTorch DistributedDataParallel's bucket_cap_mb defaults to 25 (MiB). */
    t->bucket_bytes = 25 * 1024 * 1024;
    /* A device without bf16 throughput (the CPU backend) trains in fp32. */
    bool bf16 = c != NULL && c->device.peak_flops[PT_DTYPE_BF16] > 0;
    t->precision = bf16 ? PT_PREC_BF16 : PT_PREC_FP32;
    t->stack = *pt_stack_builtin(0); /* ptrun */
    /* Transformer Engine's DelayedScaling: amax_history_len = 1024 (TE 1.x's
     * transformer_engine/common/recipe/__init__.py). */
    t->fp8 = (pt_fp8){.recipe = PT_FP8_OFF, .history = 1024};
    t->calib = NULL;
}
