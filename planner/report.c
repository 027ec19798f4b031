/*
 * JSON forms of the planner's results: a layout and a memory breakdown. ptplan's
 * --json output and plan.json both use these, so the field names are written once.
 */
#include "plan_json.h"

#include <math.h>

json_t *pt_layout_json(const pt_layout *l)
{
    char text[1024], order[32];
    pt_layout_format(l, text, sizeof text);
    pt_order_format(l->order, order, sizeof order);
    json_t *o = json_pack("{s:s, s:i, s:b, s:b, s:s, s:b, s:i, s:i, s:I, s:I, s:i, s:i, s:i, s:s, "
                     "s:i, s:I, s:I, s:I, s:s, s:s, s:s, s:I}",
                     "string", text, "tp", l->tp, "sp", l->sp, "tp_overlap", l->tp_overlap,
                     "dp_overlap", pt_dp_overlap_name(l->dp_overlap),
                     "param_overlap", l->param_overlap, "pp", l->pp, "vp", l->vp,
                     "first_layers", (json_int_t)l->first_layers,
                     "last_layers", (json_int_t)l->last_layers,
                     "cp", l->cp, "dp", l->dp, "zero", l->zero,
                     "compress", pt_compress_name(l->compress),
                     "powersgd_rank", l->powersgd_rank,
                     "powersgd_start", (json_int_t)l->powersgd_start, "mbs", (json_int_t)l->mbs,
                     "n_micro", (json_int_t)l->n_micro,
                     "recompute", pt_recompute_name(l->recompute),
                     "schedule", pt_schedule_name(l->schedule), "order", order,
                     "world", (json_int_t)pt_layout_world(l));
    if (o && l->recompute == PT_RECOMPUTE_SELECTIVE && l->recompute_modules) {
        char mods[64];
        pt_layout_recompute_text(l, mods, sizeof mods);
        json_object_set_new(o, "recompute_modules", json_string(mods));
    }
    if (o && l->cp_comm != PT_CPC_P2P)
        json_object_set_new(o, "cp_comm", json_string(pt_cp_comm_name(l->cp_comm)));
    if (o && l->cp_comm == PT_CPC_A2A_P2P)
        json_object_set_new(o, "cp_a2a", json_integer(l->cp_a2a));
    if (o && (l->ep > 1 || l->etp > 1)) {
        json_object_set_new(o, "ep", json_integer(l->ep));
        json_object_set_new(o, "etp", json_integer(l->etp));
        json_object_set_new(o, "moe_dispatch",
                            json_string(pt_moe_dispatch_name(l->moe_dispatch)));
    }
    if (o && l->pipe.n) {
        char pipe[PT_PIPE_TEXT_MAX];
        pt_pipe_format(&l->pipe, pipe, sizeof pipe);
        json_object_set_new(o, "pipeline_layout", json_string(pipe));
    }
    return o;
}

/* Byte figures are written as whole bytes: the model's fractions of a byte (a
 * shard of an odd count) mean nothing to a reader. */
static json_t *whole(double x)
{
    return json_integer((json_int_t)llround(x));
}

json_t *pt_memory_json(const pt_memory *mem)
{
    return json_pack("{s:i, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                     "stage", mem->stage, "layers", (json_int_t)mem->layers,
                     "in_flight", (json_int_t)mem->in_flight, "params", whole(mem->params),
                     "weights_bytes", whole(mem->weights_bytes),
                     "grads_bytes", whole(mem->grads_bytes),
                     "optimizer_bytes", whole(mem->optimizer_bytes),
                     "activations_bytes", whole(mem->activations_bytes),
                     "embed_head_bytes", whole(mem->embed_head_bytes),
                     "recompute_bytes", whole(mem->recompute_bytes),
                     "comm_bytes", whole(mem->comm_bytes),
                     "total_bytes", whole(mem->total_bytes));
}
