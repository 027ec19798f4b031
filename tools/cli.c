/*
 * Helpers the command-line tools share (see cli.h).
 */
#include "cli.h"
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

int pt_cli_int(const char *prog, const char *opt, const char *val, int64_t lo, int64_t hi,
               int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(val, &end, 10);
    if (!*val || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "%s: %s %s: expected an integer from %lld to %lld\n", prog, opt, val,
                (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

int pt_cli_real(const char *prog, const char *opt, const char *val, double lo, double hi,
                double *out)
{
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    if (!*val || *end || errno || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s %s: expected a number from %g to %g\n", prog, opt, val, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

void pt_cli_note(void *prefix, const char *line)
{
    fprintf(stderr, "%s: %s\n", (const char *)prefix, line);
    fflush(stderr);
}

int pt_cli_bad_option(const char *prog, int code, const char *arg)
{
    if (code == ':')
        fprintf(stderr, "%s: option %s needs a value (see %s --help)\n", prog, arg, prog);
    else
        fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", prog, arg, prog);
    return -1;
}

void pt_cli_default_db(char *buf, size_t n, bool make_dir)
{
    const char *env = getenv("PT_COSTS_DB"), *home = getenv("HOME");
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return;
    }
    char dir[400];
    snprintf(dir, sizeof dir, "%s/.local/share/ptplan", home ? home : ".");
    if (make_dir) { /* the folder and its parents */
        for (char *p = dir + 1; *p; p++)
            if (*p == '/') {
                *p = '\0';
                mkdir(dir, 0755);
                *p = '/';
            }
        mkdir(dir, 0755);
    }
    snprintf(buf, n, "%s/costs.db", dir);
}

int pt_cli_exit(const char *prog, int rc)
{
    return pt_stdout_check(prog) != 0 && rc == 0 ? 1 : rc;
}
