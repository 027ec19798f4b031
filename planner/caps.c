/*
 * Which of ptrun's compute backends trains a cluster's devices, and which stack is
 * ptrun's own. The backend follows from the cluster's device, as the runtime chooses it
 * (runtime/trainer.c): a device named "cpu..." trains on the CPU backend, any other on
 * the CUDA backend. Both train every layout pt_layout_check accepts, so no layout is
 * refused for its backend.
 */
#include "spec.h"

#include <string.h>

pt_backend pt_cluster_backend(const pt_cluster *c)
{
    return strncmp(c->device.name, "cpu", 3) == 0 ? PT_BACKEND_CPU : PT_BACKEND_CUDA;
}

bool pt_stack_is_ptrun(const pt_stack *s)
{
    return strcmp(s->name, pt_stack_builtin(0)->name) == 0;
}
