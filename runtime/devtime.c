/*
 * Device times of op spans. On a backend whose ops run asynchronously (CUDA) the host
 * clock around an op's call measures its launch; its work runs later, on the device.
 * With the backend's timers (kernels.h: event_record, event_elapsed, event_release)
 * run_list (layer.c) records an event before and after each compute op and records
 * the op's span at launch, as on the CPU, so that the span keeps its place among its
 * instruction's spans and takes that instruction's micro-batch and chunk. This file
 * keeps the (span, events) pairs pending and, once the work is done (the step's end:
 * pt_net_trace_resolve), puts each span on the host clock. Nothing waits for the
 * device between ops.
 *
 * The clock. Before the first op after a resolve, the stream is waited for and an
 * anchor event recorded on the idle stream; its host time is the middle of the clock
 * readings just before and after the record. Each op's start is the anchor's host
 * time plus the device's time from the anchor to the op's first event, its duration
 * the device's time between its two events. The wait is once per step, before its
 * first op, where the stream is idle or nearly so (the previous step ended with a
 * wait; at most the step's token upload is queued). The errors: the anchor's host
 * time is off by the event's launch latency, a few microseconds, the same for every
 * span of the step (their order and durations do not move); CUDA's elapsed times are
 * float milliseconds with about 0.5 µs resolution, so a start rounds by under a
 * microsecond up to ~8 s from the anchor, and a duration, taken from its own pair of
 * events, by far less.
 *
 * Events are the backend's: the net keeps their indices from step to step (op i of a
 * resolve period uses events ev[2i] and ev[2i+1]), so that after the first step no
 * event and no memory is allocated, and gives them back when it is freed.
 */
#include "model_internal.h"

#include <stdlib.h>

struct pt_devtime {
    int anchor;          /* event index of the anchor; -1 until created */
    double anchor_s;     /* host clock (pt_trace_now) at the anchor */
    bool anchored;       /* the anchor is recorded for the pending ops */
    int *ev;             /* [2·cap] event indices of each op's start and end; -1 until
                            created */
    int64_t *span;       /* [cap] the pending ops' trace handles (-1: none recorded) */
    int n, cap;          /* pending ops; entries of span (and pairs of ev) */
};

int pt_devtime_init(pt_net *n, pt_err *err)
{
    pt_kernels *kn = n->kn;
    if (!n->trace || !n->trace->on || n->trace_sync || !kn->event_record ||
        !kn->event_elapsed || !kn->event_release)
        return 0;
    struct pt_devtime *D = calloc(1, sizeof *D);
    if (!D)
        return pt_err_set(err, "out of memory for the device timers");
    D->anchor = -1;
    n->devtime = D;
    return 0;
}

void pt_devtime_free(pt_net *n)
{
    struct pt_devtime *D = n->devtime;
    if (D) {
        pt_kernels *kn = n->kn;
        kn->event_release(kn, D->anchor);
        for (int i = 0; i < 2 * D->cap; i++)
            kn->event_release(kn, D->ev[i]);
        free(D->ev);
        free(D->span);
        free(D);
    }
    n->devtime = NULL;
}

static int grow(struct pt_devtime *D)
{
    int cap = D->cap ? 2 * D->cap : 256;
    int *ev = realloc(D->ev, 2 * (size_t)cap * sizeof *ev);
    if (!ev)
        return -1;
    D->ev = ev;
    for (int i = 2 * D->cap; i < 2 * cap; i++)
        ev[i] = -1;
    int64_t *span = realloc(D->span, (size_t)cap * sizeof *span);
    if (!span)
        return -1;
    D->span = span;
    D->cap = cap;
    return 0;
}

int pt_devtime_before(pt_net *n, pt_err *err)
{
    struct pt_devtime *D = n->devtime;
    pt_kernels *kn = n->kn;
    if (!D->anchored) {
        if (kn->sync(kn))
            return pt_err_set(err, "%s", kn->err);
        double h0 = pt_trace_now();
        if (kn->event_record(kn, &D->anchor))
            return pt_err_set(err, "%s", kn->err);
        D->anchor_s = 0.5 * (h0 + pt_trace_now());
        D->anchored = true;
    }
    if (D->n == D->cap && grow(D))
        return pt_err_set(err, "out of memory for the device timers of %d ops", D->n + 1);
    return kn->event_record(kn, &D->ev[2 * D->n]) ? pt_err_set(err, "%s", kn->err) : 0;
}

int pt_devtime_after(pt_net *n, int64_t span, pt_err *err)
{
    struct pt_devtime *D = n->devtime;
    pt_kernels *kn = n->kn;
    if (kn->event_record(kn, &D->ev[2 * D->n + 1]))
        return pt_err_set(err, "%s", kn->err);
    D->span[D->n++] = span;
    return 0;
}

int pt_net_trace_resolve(pt_net *n, pt_err *err)
{
    struct pt_devtime *D = n->devtime;
    if (!D || !D->anchored)
        return 0;
    pt_kernels *kn = n->kn;
    int rc = kn->sync(kn) ? pt_err_set(err, "%s", kn->err) : 0;
    for (int i = 0; rc == 0 && i < D->n; i++) {
        double start_ms, dur_ms;
        if (kn->event_elapsed(kn, D->anchor, D->ev[2 * i], &start_ms) ||
            kn->event_elapsed(kn, D->ev[2 * i], D->ev[2 * i + 1], &dur_ms)) {
            rc = pt_err_set(err, "%s", kn->err);
            break;
        }
        double t0 = D->anchor_s + start_ms * 1e-3;
        pt_trace_retime(n->trace, D->span[i], t0, t0 + dur_ms * 1e-3);
    }
    /* after a failure the rest keep their launch times */
    D->n = 0;
    D->anchored = false;
    return rc;
}
