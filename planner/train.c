/*
 * Training settings: the precisions a job trains in (the bytes of a weight, its
 * gradient, master copy, Adam moments and an activation; their names) and the
 * defaults of a job's settings. The memory model (memory.c) and the op lists (ops.c)
 * both read pt_precision_of, so it lives here, beside the precision it describes, and
 * neither of them depends on the other for it.
 */
#include "internal.h"
#include "spec.h"

#include <stdio.h>
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

const char *const pt_fp8_recipe_names[PT_FP8_COUNT] = {"off", "current", "delayed", "blockwise",
                                                      "rowwise"};

int64_t pt_fp8_meta_floats(const pt_model *m, const pt_fp8 *f, int64_t layers)
{
    if (f->recipe == PT_FP8_OFF)
        return 0;
    int linears;
    pt_layer_linear_elems(m, 1, &linears);
    int64_t stride = PT_FP8_META_FLOATS + (f->recipe == PT_FP8_DELAYED ? f->history : 0);
    return layers * linears * 3 * stride;
}

const char *pt_fp8_recipe_name(pt_fp8_recipe r)
{
    return (unsigned)r < PT_FP8_COUNT ? pt_fp8_recipe_names[r] : "unknown";
}

int pt_fp8_recipe_parse(const char *text, pt_fp8_recipe *out, pt_err *err)
{
    for (int r = 0; text && r < PT_FP8_COUNT; r++) {
        if (strcmp(text, pt_fp8_recipe_names[r]) == 0) {
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
    /* Transformer Engine's DelayedScaling: amax_history_len = 1024 with
     * amax_compute_algo "max" (transformer_engine/common/recipe/__init__.py, the
     * DelayedScaling dataclass); Megatron-Core's own --fp8-amax-history-len defaults to
     * 1 (TransformerConfig.fp8_amax_history_len) and is set explicitly by --emit. */
    t->fp8 = (pt_fp8){.recipe = PT_FP8_OFF, .history = 1024};
    t->calib = NULL;
    t->moe_imbalance = 1;
}

int pt_train_check_fp8(const pt_train *t, const pt_cluster *c, pt_err *err)
{
    const pt_fp8 *f = &t->fp8;
    if (f->recipe == PT_FP8_OFF)
        return 0;
    char list[96];
    if ((unsigned)f->recipe >= PT_FP8_COUNT) {
        pt_join_all_names(PT_FP8_COUNT, pt_fp8_recipe_names, list, sizeof list);
        return pt_err_set(err, "FP8 recipe %d is not one of %s", (int)f->recipe, list);
    }
    pt_join_names(t->stack.fp8_recipes & ~(1u << PT_FP8_OFF), PT_FP8_COUNT, pt_fp8_recipe_names,
                  ", ", list, sizeof list);
    if (!t->stack.fp8_recipes)
        return pt_err_set(err, "FP8 recipe '%s': stack '%s' trains no layer in FP8",
                          pt_fp8_recipe_name(f->recipe), t->stack.name);
    if (!(t->stack.fp8_recipes & (1u << f->recipe)))
        return pt_err_set(err, "FP8 recipe '%s': stack '%s' runs %s", pt_fp8_recipe_name(f->recipe),
                          t->stack.name, list);
    if (f->param_gather && t->stack.fp8_casts != PT_FP8_CASTS_TE)
        return pt_err_set(err, "FP8 parameter gather: stack '%s' gathers its weights in %s "
                               "and quantizes them after the gather; Megatron-Core's "
                               "--fp8-param-gather is stack megatron-core's",
                          t->stack.name, pt_prec_name(t->precision));
    if (f->history < 1 || f->history > PT_FP8_MAX_HISTORY)
        return pt_err_set(err, "FP8 amax history %d: expected 1 to %d", f->history,
                          PT_FP8_MAX_HISTORY);
    bool peak = c->device.peak_flops[PT_DTYPE_FP8] > 0;
    if (f->emulated && peak)
        return pt_err_set(err, "FP8 emulation is for a device without FP8: cluster '%s' has "
                               "device.peak_flops.fp8 = %g (plan FP8 without emulation)",
                          c->name, c->device.peak_flops[PT_DTYPE_FP8]);
    if (!f->emulated && !peak)
        return pt_err_set(err, "FP8 on cluster '%s': its device %s has no FP8 peak "
                               "(device.peak_flops.fp8 is 0); ask for emulation (ptplan "
                               "--fp8-emulate) or plan in %s", c->name, c->device.name,
                          pt_prec_name(t->precision));
    return 0;
}

void pt_train_precision_text(const pt_train *t, char *buf, size_t n)
{
    if (!pt_train_fp8(t))
        snprintf(buf, n, "%s", pt_prec_name(t->precision));
    else
        snprintf(buf, n, "%s+fp8(%s%s%s)", pt_prec_name(t->precision),
                 pt_fp8_recipe_name(t->fp8.recipe), t->fp8.emulated ? ", emulated" : "",
                 t->fp8.param_gather ? ", FP8 weights gathered" : "");
}

int pt_train_precision_parse(const char *text, pt_train *t, pt_err *err)
{
    if (!text || strncmp(text, "fp8", 3) != 0 || (text[3] != 0 && text[3] != ':')) {
        if (pt_prec_parse(text, &t->precision, err) == 0)
            return 0;
        return pt_err_set(err, "unknown precision '%s' (expected bf16, bf16-grad16, fp32, fp8 "
                               "or fp8:RECIPE)", text ? text : "");
    }
    pt_fp8_recipe r = (pt_fp8_recipe)t->stack.fp8_default;
    if (text[3] == ':' && (pt_fp8_recipe_parse(text + 4, &r, err) || r == PT_FP8_OFF))
        return pt_err_set(err, "unknown precision '%s': the FP8 recipe is current, delayed, "
                               "blockwise or rowwise", text);
    if (r == PT_FP8_OFF)
        return pt_err_set(err, "precision '%s': stack '%s' trains no layer in FP8", text,
                          t->stack.name);
    t->fp8.recipe = r;
    return 0;
}

void pt_train_precision_word(const pt_train *t, char *buf, size_t n)
{
    if (!pt_train_fp8(t))
        snprintf(buf, n, "%s", pt_prec_name(t->precision));
    else if ((int)t->fp8.recipe == t->stack.fp8_default)
        snprintf(buf, n, "fp8");
    else
        snprintf(buf, n, "fp8:%s", pt_fp8_recipe_name(t->fp8.recipe));
}
