/*
 * The error band of a prediction: how far ptplan missed when it predicted the published
 * training runs of the same software stack on the same device (the validation sets that
 * --validate reads), turned into the range of step times a new prediction implies. This
 * file finds the sets and sums up their errors; reading and pricing the runs is
 * ptplan_validate.c's (validate_band), so a band and --validate's table by stack and
 * device are the same numbers.
 *
 * The sets are read from the source tree at run time (PT_VALIDATION_DIR, compiled in),
 * not compiled into the binary as the shipped cost profiles are: ptplan runs from its
 * build tree, and read in place the band and `ptplan --validate tests/validation/...`
 * always see the same files, including the cluster and stack files the points name
 * relative to them. A binary moved away from its source tree finds no sets and says
 * so in the band's reason (PT_VALIDATION_SETS names others); that is not an error.
 */
#include "ptplan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void band_add(pred_band *b, double error)
{
    if (b->n == 0 || error < b->err_min)
        b->err_min = error;
    if (b->n == 0 || error > b->err_max)
        b->err_max = error;
    b->n++;
    b->err_mean += (error - b->err_mean) / b->n;
}

void band_range(const pred_band *b, double predicted_s, double *lo_s, double *hi_s)
{
    *lo_s = *hi_s = predicted_s;
    if (b->n == 0)
        return;
    /* error = predicted / measured - 1, so measured = predicted / (1 + error); every error
     * is above -1, a prediction and a measurement being positive */
    *lo_s = predicted_s / (1 + b->err_max);
    *hi_s = predicted_s / (1 + b->err_min);
}

/* Appends ", text" (or text, first) to buf of size n, truncating. */
static void append(char *buf, size_t n, const char *text)
{
    size_t used = strlen(buf);
    if (used < n)
        snprintf(buf + used, n - used, "%s%s", used ? ", " : "", text);
}

/* One set: left out and named in missing when it does not exist, else its runs added. */
static int band_of_set(const job *j, const char *file, pred_band *band, char *missing,
                       size_t n, pt_err *err)
{
    if (access(file, F_OK) != 0 && errno == ENOENT) {
        append(missing, n, file);
        return 0;
    }
    if (validate_band(file, j->db, band, err))
        return -1;
    const char *slash = strrchr(file, '/');
    append(band->sets, sizeof band->sets, slash ? slash + 1 : file);
    return 0;
}

/* PT_VALIDATION_SETS: each non-empty colon-separated name. */
static int band_of_env(const job *j, const char *list, pred_band *band, char *missing,
                       size_t n, pt_err *err)
{
    while (*list) {
        size_t len = strcspn(list, ":");
        char file[1024];
        snprintf(file, sizeof file, "%.*s", (int)len, list);
        if (len && band_of_set(j, file, band, missing, n, err))
            return -1;
        list += len + (list[len] == ':');
    }
    return 0;
}

static int band_of_tree(const job *j, pred_band *band, char *missing, size_t n, pt_err *err)
{
#ifdef PT_VALIDATION_DIR
    static const char *const sets[] = {"public-set.json", "holdout.json"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        char file[1024];
        snprintf(file, sizeof file, "%s/%s", PT_VALIDATION_DIR, sets[i]);
        if (band_of_set(j, file, band, missing, n, err))
            return -1;
    }
    return 0;
#else
    (void)j, (void)band, (void)err;
    snprintf(missing, n, "the validation sets (this ptplan was built without their folder)");
    return 0;
#endif
}

int prediction_band(const job *j, pred_band *band, pt_err *err)
{
    *band = (pred_band){0};
    snprintf(band->stack, sizeof band->stack, "%s", j->t.stack.name);
    snprintf(band->device, sizeof band->device, "%s", j->c.device.name);
    char missing[400] = "";
    const char *env = getenv("PT_VALIDATION_SETS");
    int rc = env ? band_of_env(j, env, band, missing, sizeof missing, err)
                 : band_of_tree(j, band, missing, sizeof missing, err);
    if (rc)
        return -1;
    size_t used = 0;
    if (missing[0])
        used = (size_t)snprintf(band->reason, sizeof band->reason,
                                "not found: %s (PT_VALIDATION_SETS names the sets)", missing);
    else if (env && !band->sets[0])
        used = (size_t)snprintf(band->reason, sizeof band->reason,
                                "PT_VALIDATION_SETS names no validation set");
    if (band->n == 0 && band->sets[0] && used < sizeof band->reason)
        snprintf(band->reason + used, sizeof band->reason - used,
                 "%sno published run of stack %s on %s in %s", used ? "; " : "", band->stack,
                 band->device, band->sets);
    return 0;
}
