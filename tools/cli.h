/*
 * What the command-line tools share: parsing a numeric option value into one clear
 * error ("ptrun: --steps x: expected an integer from 1 to ..."), the tools'
 * unknown-option and missing-value messages, and where the cost table lives by
 * default.
 */
#ifndef PT_TOOLS_CLI_H
#define PT_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parses val into [lo, hi]; on failure prints "<prog>: <opt> <val>: expected ..." to
 * stderr and returns -1. */
int pt_cli_int(const char *prog, const char *opt, const char *val, int64_t lo, int64_t hi,
               int64_t *out);
int pt_cli_real(const char *prog, const char *opt, const char *val, double lo, double hi,
                double *out);
/* The message for getopt's ':' (missing value) or '?' (unknown option); returns -1. */
int pt_cli_bad_option(const char *prog, int code, const char *arg);
/* The cost table's default path: $PT_COSTS_DB, else ~/.local/share/ptplan/costs.db
 * (with make_dir, that folder and its parents are created). */
void pt_cli_default_db(char *buf, size_t n, bool make_dir);

#endif
