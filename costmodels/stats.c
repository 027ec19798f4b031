/*
 * Robust statistics of repeated timings: the median and the median absolute deviation
 * (MAD), outliers by the modified z-score, and the merge of several ranks' summaries.
 * A run on a shared machine is pre-empted now and then; a pre-empted repeat of a 100 us
 * kernel can take milliseconds, which moves a mean by any amount but a median not at all.
 */
#include "cost.h"

#include <math.h>
#include <stdlib.h>

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of sorted v[0 .. n), n > 0. */
static double median_sorted(const double *v, size_t n)
{
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The median of v[0 .. n), n > 0 (sorts v). */
static double median_of(double *v, size_t n)
{
    qsort(v, n, sizeof *v, by_value);
    return median_sorted(v, n);
}

void pt_robust_of(double *v, size_t n, pt_robust *out)
{
    *out = (pt_robust){0};
    if (n == 0)
        return;
    qsort(v, n, sizeof *v, by_value);
    out->spans = (int64_t)n;
    out->median_s = median_sorted(v, n);
    out->min_s = v[0];
    out->max_s = v[n - 1];
    double *dev = malloc(n * sizeof *dev);
    if (dev) {
        for (size_t i = 0; i < n; i++)
            dev[i] = fabs(v[i] - out->median_s);
        out->mad_s = median_of(dev, n);
        free(dev);
    }
    /* modified z-score M = 0.6745 (x - median) / MAD (Iglewicz and Hoaglin): 0.6745 is
     * the MAD of the standard normal distribution. With MAD 0 (more than half the
     * repeats equal) only those equal to the median are kept. */
    double limit = out->mad_s > 0 ? PT_OUTLIER_Z * out->mad_s / 0.6745 : 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        out->total_s += v[i];
        if (fabs(v[i] - out->median_s) <= limit) {
            sum += v[i];
            out->kept++;
        }
    }
    out->mean_s = out->kept ? sum / (double)out->kept : out->median_s;
}

void pt_robust_merge(const pt_robust *const *v, size_t n, pt_robust *out)
{
    *out = (pt_robust){0};
    double *med = malloc((n ? n : 1) * sizeof *med), *mad = malloc((n ? n : 1) * sizeof *mad);
    size_t m = 0;
    double kept_sum = 0;
    for (size_t i = 0; i < n; i++) {
        const pt_robust *r = v[i];
        if (r->spans < 1)
            continue;
        if (med && mad)
            med[m] = r->median_s, mad[m] = r->mad_s;
        m++;
        out->min_s = out->spans && out->min_s < r->min_s ? out->min_s : r->min_s;
        out->max_s = out->max_s > r->max_s ? out->max_s : r->max_s;
        out->spans += r->spans;
        out->kept += r->kept;
        out->total_s += r->total_s;
        kept_sum += r->mean_s * (double)r->kept;
    }
    if (m && med && mad) {
        out->median_s = median_of(med, m);
        out->mad_s = median_of(mad, m);
    }
    out->mean_s = out->kept ? kept_sum / (double)out->kept : out->median_s;
    free(med);
    free(mad);
}
