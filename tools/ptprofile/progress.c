/*
 * Progress for long measurements: on a terminal one line redrawn with a bar, the
 * count and an ETA from the work done so far; otherwise (logs, CI) one plain line
 * per step, so nothing is lost to carriage returns.
 */
#include "ptprofile.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void pt_progress_start(pt_progress *p, int64_t total, double work_total)
{
    *p = (pt_progress){.tty = isatty(fileno(stderr)) == 1, .total = total,
                       .start_s = pt_prof_now_s(), .work_total = work_total};
}

static void eta_text(const pt_progress *p, char *buf, size_t n)
{
    double spent = pt_prof_now_s() - p->start_s;
    if (p->work_done <= 0 || p->work_total <= 0) {
        snprintf(buf, n, "--:--");
        return;
    }
    double left = spent * (p->work_total - p->work_done) / p->work_done;
    int s = (int)(left + 0.5);
    snprintf(buf, n, "%d:%02d", s / 60, s % 60);
}

void pt_progress_step(pt_progress *p, double work, const char *what, const char *result)
{
    p->done++;
    p->work_done += work;
    char eta[16];
    eta_text(p, eta, sizeof eta);
    if (!p->tty) {
        fprintf(stderr, "ptprofile: %lld/%lld %s: %s (ETA %s)\n", (long long)p->done,
                (long long)p->total, what, result, eta);
        return;
    }
    const int width = 30;
    int filled = p->total ? (int)(width * p->done / p->total) : width;
    char bar[64];
    memset(bar, '#', (size_t)filled);
    memset(bar + filled, '.', (size_t)(width - filled));
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] %lld/%lld ETA %s  %-48.48s", bar, (long long)p->done,
            (long long)p->total, eta, what);
    fflush(stderr);
}

void pt_progress_end(pt_progress *p)
{
    if (p->tty && p->done)
        fputc('\n', stderr);
}
