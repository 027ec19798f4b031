/*
 * What each of ptrun's compute backends can train: the one place that says so. The
 * enumeration (enum.c) skips a layout its backend does not run and counts it under
 * PT_REJECT_BACKEND, ptplan --layout refuses it with the same words, and the runtime's
 * trainer asks before it builds anything, so a plan ptplan writes for ptrun is one
 * ptrun runs. The backend follows from the cluster's device, as the runtime chooses it
 * (runtime/trainer.c): a device named "cpu..." trains on the CPU backend, any other on
 * the CUDA backend.
 */
#include "planner.h"

#include <stdio.h>
#include <string.h>

pt_backend pt_cluster_backend(const pt_cluster *c)
{
    return strncmp(c->device.name, "cpu", 3) == 0 ? PT_BACKEND_CPU : PT_BACKEND_CUDA;
}

const char *pt_backend_name(pt_backend b)
{
    return b == PT_BACKEND_CPU ? "cpu" : "cuda";
}

bool pt_stack_is_ptrun(const pt_stack *s)
{
    return strcmp(s->name, pt_stack_builtin(0)->name) == 0;
}

int pt_layout_supported(const pt_cluster *c, const pt_layout *l, pt_err *err)
{
    if (pt_cluster_backend(c) == PT_BACKEND_CPU)
        return 0;
    /* The CUDA backend keeps activations in bf16 and runs no collective on them yet
     * (tp, cp), and its optimizer step is not sharded (ZeRO >= 1 over dp*cp > 1 ranks). */
    bool sharded = l->zero >= 1 && (int64_t)l->dp * l->cp > 1;
    if (l->tp == 1 && l->cp == 1 && !sharded)
        return 0;
    if (!err) /* the enumeration asks only whether */
        return -1;
    char keys[96] = "";
    size_t n = 0;
    if (l->tp > 1)
        n += (size_t)snprintf(keys + n, sizeof keys - n, "tp=%d", l->tp);
    if (l->cp > 1 && n < sizeof keys)
        n += (size_t)snprintf(keys + n, sizeof keys - n, "%scp=%d", n ? "," : "", l->cp);
    if (sharded && n < sizeof keys)
        n += (size_t)snprintf(keys + n, sizeof keys - n, "%szero=%d", n ? "," : "", l->zero);
    return pt_err_set(err, "layout %s: ptrun's %s backend (device '%s') runs only dp and pp "
                           "with zero=0 so far (no tp, cp or ZeRO stage 1-3)", keys,
                      pt_backend_name(PT_BACKEND_CUDA), c->device.name);
}
