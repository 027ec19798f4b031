/*
 * What the command-line tools share: parsing a numeric option value into one clear
 * error ("ptrun: --steps x: expected an integer from 1 to ..."), the tools'
 * unknown-option and missing-value messages, printing the libraries' notes, where the
 * cost table lives by default, and an exit code that counts a failed write of stdout.
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
/* A library's note (pt_kernels.note, pt_comm_set_notes) as one line on stderr,
 * "PREFIX: LINE", flushed at once (a note may come just before the process ends);
 * prefix is the callback's argument: a string that outlives the library's use of it,
 * one of these. */
void pt_cli_note(void *prefix, const char *line);
#define PT_CLI_KERNEL_NOTES ((void *)"ptkernels: note")
/* The communication layer's notes: "ptrun: LINE" in every tool that opens a comm (the
 * prefix they have always had, ptprofile-coll's included). */
#define PT_CLI_COMM_NOTES ((void *)"ptrun")
/* The cost table's default path: $PT_COSTS_DB, else ~/.local/share/ptplan/costs.db
 * (with make_dir, that folder and its parents are created). */
void pt_cli_default_db(char *buf, size_t n, bool make_dir);
/* A tool's exit code: rc, or 1 when rc is 0 but what it wrote on stdout was cut short
 * (a full disk, a closed pipe), said on stderr; every main returns through it. */
int pt_cli_exit(const char *prog, int rc);

#endif
