/*
 * ptplanner — the planning library. This umbrella header includes its parts, one
 * header per concern, each opening with what it declares:
 *
 *   spec.h          model, cluster and software-stack specs, compute backends and the
 *                   training settings (precision, batch, buckets)
 *   layout.h        the layout space and its validity rules
 *   grid.h          the rank grid and its process groups
 *   memory_model.h  the per-rank memory model and ptrun's per-micro-batch buffers
 *   step.h          the typed ops of a step: layer, embedding and head lists, gradient
 *                   buckets, PowerSGD, the optimizer; the op-kind table; step FLOPs
 *   schedule.h      the pipeline ranks' schedule programs and their NCCL transfers
 *   predict.h       enumeration, pricing, simulation and search
 *   calib.h         run records of any framework and the correction learned from them
 *   plan_json.h     plan.json and the JSON forms of results (the only part that
 *                   includes <jansson.h>)
 *
 * Other libraries and the tools include this header; the planner's own files include
 * the parts they use.
 *
 * Dimension letters: the one legend of common/common.h (b, s, h, a, k, d, f, v, L, t,
 * c, p; dp written out).
 *
 * Errors: library functions never exit or print. They return 0 on success and -1
 * on error, filling a pt_err (common/common.h) whose message names the file, field
 * or value at fault; tools/ decides what to do with it.
 */
#ifndef PT_PLANNER_H
#define PT_PLANNER_H

#include "spec.h"
#include "layout.h"
#include "grid.h"
#include "memory_model.h"
#include "step.h"
#include "schedule.h"
#include "predict.h"
#include "calib.h"
#include "plan_json.h"

#endif
