/*
 * Reading a measured step out of another framework's training log, for ptcalib --run
 * FILE: the lines each framework prints once per logged interval, the first intervals
 * left out as warm-up (CALIB_LOG_SKIP), the median of the rest.
 *
 * Megatron-LM / Megatron-Core: training_log() in megatron/training/training.py (NVIDIA/
 * Megatron-LM, read at core_r0.8.0 and at d98e8a6) prints, every
 * --log-interval iterations, on the last rank,
 *   " [YYYY-MM-DD hh:mm:ss.ffffff] iteration       10/     100 | consumed samples: ...
 *    | elapsed time per iteration (ms): 1234.5 | ... | global batch size:   128 | ..."
 * where the elapsed time is the interval timer over the iterations since the last line
 * (its timestamp has no fraction of a second before core_r0.12); recent versions also
 * print iteration 1 alone and keep it in the next interval's timer. Validation lines
 * ("iteration 100 on validation set") carry no elapsed time and are not read. Under a
 * batch-size ramp-up the intervals of the final global batch are used.
 *
 * torchtitan: MetricsProcessor.log() in torchtitan/components/metrics.py (pytorch/
 * torchtitan at b5bcd76; train.py before the metrics component) prints at step
 * 1 and every metrics.log_freq steps
 *   "[titan] YYYY-MM-DD hh:mm:ss,fff - root - INFO - step: 10  loss:  7.1234  ...
 *    memory: 40.12GiB(50.00%)  tps: 1,234  tflops: 56.78  mfu: 12.34%"
 * colored with ANSI escapes unless disabled; tps is the tokens of this data-parallel
 * rank since the last line over the time times the non-data-parallel size (tp·pp·cp):
 * tokens per second per GPU. Older torchtitan versions write "wps" for the same figure.
 * "validate step:" lines are the validator's and are not read.
 */
#include "ptcalib.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *calib_log_format_name(run_format f)
{
    switch (f) {
    case RUNF_JSON: return "run record";
    case RUNF_MEGATRON: return "Megatron-LM log";
    case RUNF_TORCHTITAN: return "torchtitan log";
    case RUNF_AUTO: break;
    }
    return "file";
}

/* ---- One line -------------------------------------------------------------------------- */

/* Removes ANSI escape sequences (ESC [ ... final byte) from s, in place. */
static void strip_ansi(char *s)
{
    char *w = s;
    for (const char *r = s; *r;) {
        if (r[0] == '\033' && r[1] == '[') {
            r += 2;
            while (*r && !(*r >= '@' && *r <= '~'))
                r++;
            if (*r)
                r++;
            continue;
        }
        *w++ = *r++;
    }
    *w = 0;
}

/* The first "YYYY-MM-DD" in s into date (""), for the record's date. */
static void date_in(const char *s, char date[40])
{
    for (; *s; s++) {
        int i = 0;
        while (i < 10 && s[i] && (i == 4 || i == 7 ? s[i] == '-' : isdigit((unsigned char)s[i])))
            i++;
        if (i == 10) {
            snprintf(date, 40, "%.10s", s);
            return;
        }
    }
}

/* The number after `label` in line (commas between digits allowed: "1,234"); -1 when
 * the label is absent or no number follows. */
static int number_after(const char *line, const char *label, double *out)
{
    const char *p = strstr(line, label);
    if (!p)
        return -1;
    p += strlen(label);
    while (*p == ' ')
        p++;
    char buf[64];
    size_t n = 0;
    for (; *p && n + 1 < sizeof buf; p++) {
        if (*p == ',' && isdigit((unsigned char)p[1]))
            continue;
        if (!(isdigit((unsigned char)*p) || *p == '.' || *p == 'e' || *p == 'E' ||
              *p == '-' || *p == '+'))
            break;
        buf[n++] = *p;
    }
    buf[n] = 0;
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (!n || *end || errno)
        return -1;
    *out = v;
    return 0;
}

typedef struct {
    int64_t iteration;
    double value;
    int64_t batch; /* 0: not logged */
} interval;

/* A Megatron training line: 1 with *iv filled, 0 for any other line. */
static int megatron_line(const char *line, interval *iv)
{
    double ms, it, batch = 0;
    const char *at = strstr(line, "iteration");
    if (number_after(line, "elapsed time per iteration (ms):", &ms) || !at ||
        number_after(at, "iteration", &it))
        return 0;
    number_after(line, "global batch size:", &batch);
    *iv = (interval){(int64_t)it, ms / 1e3, (int64_t)batch};
    return 1;
}

/* A torchtitan training line ("step: N ... tps: X", or wps), not the validator's. */
static int titan_line(char *line, interval *iv)
{
    strip_ansi(line);
    double step, tps;
    const char *at = strstr(line, "step:");
    if (!at || strstr(line, "validate step:") || number_after(at, "step:", &step))
        return 0;
    if (number_after(at, "tps:", &tps) && number_after(at, "wps:", &tps))
        return 0;
    *iv = (interval){(int64_t)step, tps, 0};
    return 1;
}

/* ---- Finding the format ---------------------------------------------------------------- */

int calib_log_format(const char *path, run_format fmt, run_format *out, pt_err *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    *out = fmt;
    char *line = NULL;
    size_t cap = 0;
    bool first = true;
    interval iv;
    while (fmt == RUNF_AUTO && *out == RUNF_AUTO && getline(&line, &cap, f) >= 0) {
        const char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (first && *p) {
            first = false;
            if (*p == '{')
                *out = RUNF_JSON;
        }
        if (megatron_line(line, &iv))
            *out = RUNF_MEGATRON;
        else if (titan_line(line, &iv))
            *out = RUNF_TORCHTITAN;
    }
    free(line);
    fclose(f);
    if (*out == RUNF_AUTO)
        return pt_err_set(err, "%s: neither a run record (a JSON object) nor a training log "
                               "ptcalib reads: no Megatron-LM line with 'elapsed time per "
                               "iteration (ms)' and no torchtitan line with 'step: ... tps:'; "
                               "--format json|megatron|torchtitan says which it is", path);
    return 0;
}

/* ---- Reading a log ------------------------------------------------------------------------ */

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The intervals of the log's last run (a restart numbers its iterations from below the
 * last one's), in order, into *v. */
static int collect(FILE *f, run_format fmt, interval **v, size_t *n, log_reading *out,
                   pt_err *err, const char *path)
{
    char *line = NULL;
    size_t cap = 0, room = 0;
    *v = NULL;
    *n = 0;
    while (getline(&line, &cap, f) >= 0) {
        interval iv;
        int got = fmt == RUNF_MEGATRON ? megatron_line(line, &iv) : titan_line(line, &iv);
        if (!got)
            continue;
        if (!out->date[0])
            date_in(line, out->date);
        if (*n && iv.iteration <= (*v)[*n - 1].iteration) {
            *n = 0; /* a new run in the same file: read the last */
            out->restarted = true;
            out->date[0] = 0;
            date_in(line, out->date);
        }
        if (*n == room) {
            room = room ? 2 * room : 256;
            interval *g = realloc(*v, room * sizeof *g);
            if (!g) {
                free(line);
                return pt_err_set(err, "%s: out of memory", path);
            }
            *v = g;
        }
        (*v)[(*n)++] = iv;
    }
    free(line);
    return 0;
}

int calib_read_log(const char *path, run_format fmt, int64_t skip, log_reading *out,
                   pt_err *err)
{
    *out = (log_reading){.meas = fmt == RUNF_MEGATRON ? PT_MEAS_STEP_S
                                                      : PT_MEAS_TOKENS_PER_S_PER_GPU};
    FILE *f = fopen(path, "r");
    if (!f)
        return pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    interval *v;
    size_t n;
    int rc = collect(f, fmt, &v, &n, out, err, path);
    fclose(f);
    if (rc)
        return -1;
    const char *what = fmt == RUNF_MEGATRON ? "Megatron-LM training line ('iteration N/M | "
                                              "... | elapsed time per iteration (ms): X')"
                                            : "torchtitan training line ('step: N ... tps: X')";
    if (n == 0) {
        free(v);
        return pt_err_set(err, "%s: no %s: not a %s, or its training never logged",
                          path, what, calib_log_format_name(fmt));
    }
    if ((int64_t)n <= skip) {
        free(v);
        return pt_err_set(err, "%s: no usable interval: the log holds %zu logged interval%s "
                               "and the first %lld are left out as warm-up (--skip sets how "
                               "many; run longer, or log more often)", path, n,
                          n == 1 ? "" : "s", (long long)skip);
    }
    /* the intervals after the warm-up at the final batch size (a ramp-up's are not the
     * run's step) */
    int64_t batch = v[n - 1].batch;
    double *x = malloc(n * sizeof *x);
    size_t m = 0;
    for (size_t i = (size_t)skip; x && i < n; i++) {
        if (v[i].batch != batch || !(v[i].value > 0))
            continue;
        if (!m)
            out->first = v[i].iteration;
        out->last = v[i].iteration;
        x[m++] = v[i].value;
    }
    free(v);
    if (!x)
        return pt_err_set(err, "%s: out of memory", path);
    if (m == 0) {
        free(x);
        return pt_err_set(err, "%s: no usable interval after the first %lld (warm-up): every "
                               "one logs a zero time or rate", path, (long long)skip);
    }
    qsort(x, m, sizeof *x, by_value);
    out->value = m % 2 ? x[m / 2] : (x[m / 2 - 1] + x[m / 2]) / 2;
    out->intervals = (int64_t)m;
    out->skipped = skip;
    out->global_batch = batch;
    free(x);
    return 0;
}
