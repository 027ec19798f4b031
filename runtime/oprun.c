/*
 * The one runner of the planner's op lists: a micro-batch's layer, embedding and head
 * lists (chunk.c, executed by layer.c's pt_layer_run_op), a chunk's gradient buckets
 * and the step's end (engine.c). It walks a list in order and owns how each op is
 * timed: every op is a span of the trace under its kind's name, a compute op on stream
 * 0 with its planner key, a collective on stream 1, so predicted and measured meet op
 * by op. What an op does is the executor's.
 *
 * The host clock around a call times what the call does on the host: the whole op on
 * the CPU, but only its launch on a device whose ops run asynchronously. There, when
 * the backend has device timers (pt_net.devtime), an event is recorded before and after
 * each compute op, without waiting; the span is recorded at launch, which keeps its
 * place among its instruction's spans, and pt_net_trace_resolve gives it the device's
 * times once the step's work is done (devtime.c says how they meet the host clock).
 * Collectives keep host times (they wait for the device first). PT_TRACE_SYNC=1
 * (pt_net.trace_sync) instead waits for the device around each op and keeps host
 * times.
 */
#include "model_internal.h"

static int sync_device(pt_net *n, pt_err *err)
{
    return n->trace_sync && n->kn->sync(n->kn) ? pt_err_set(err, "%s", n->kn->err) : 0;
}

int pt_net_run_list(pt_net *n, const pt_oplist *list, pt_op_exec exec, void *ctx, pt_err *err)
{
    bool device_timed = n->devtime && !n->trace_sync;
    for (int i = 0; i < list->n; i++) {
        const pt_op *op = &list->op[i];
        const char *name = pt_op_kind_name(op->kind);
        if (sync_device(n, err))
            return -1;
        bool kernel = op->cls == PT_OP_KERNEL;
        if (kernel && device_timed && pt_devtime_before(n, err))
            return -1;
        double t0 = pt_trace_now();
        int rc = exec(ctx, op, err);
        if (rc < 0)
            return -1;
        if (rc == PT_OP_NO_SPAN) /* nothing of its own to time */
            continue;
        if (!kernel) {
            pt_trace_add_coll(n->trace, n->rank, name, n->op_seq++, t0, pt_trace_now());
            continue;
        }
        if (sync_device(n, err))
            return -1;
        int64_t span = pt_trace_add_op(n->trace, n->rank, 0, name, &op->kernel, n->op_seq++,
                                       t0, pt_trace_now());
        if (device_timed && pt_devtime_after(n, span, err))
            return -1;
    }
    return 0;
}
