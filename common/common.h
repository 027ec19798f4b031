/*
 * ptcommon — the small vocabulary every library of the project shares: the error type
 * that library functions fill instead of printing or exiting, checked arithmetic on
 * sizes, the data types, UTF-8 characters and JSON strings written by hand, and the one
 * legend of dimension letters, and opening files: inputs without waiting, outputs
 * without destroying what a path names.
 *
 * Dimension letters, used in comments (each tensor pointer's trailing shape comment),
 * variable names and formulas everywhere (planner, kernels, runtime):
 *   b  micro-batch size          s  sequence length        h  hidden size
 *   a  attention heads           k  key/value heads (GQA)  d  head dimension (h/a)
 *   f  FFN size                  v  vocabulary             L  layers
 *   t  tensor-parallel size      c  context-parallel size  p  pipeline size
 *   dp the data-parallel size, written out (d is the head dimension)
 *   T  tokens a layer sees on a rank (b·s/c)   R  its residual-stream rows (T, or T/t
 *      with sequence parallelism)             n  a count of rows or elements, said where used
 * Per-rank sizes carry their divisor in the shape comment: (T, f/t), (b, a/t, s).
 *
 * Errors: library functions return 0 on success and -1 on error, filling a pt_err
 * whose message names the file, field or value at fault; only tools/ print it and
 * choose an exit code.
 */
#ifndef PT_COMMON_H
#define PT_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Errors ----------------------------------------------------------- */

typedef struct {
    char msg[512];
} pt_err;

/* Formats msg into err (when err is non-NULL) and returns -1, so that callers
 * can write `return pt_err_set(err, "...", ...);`. */
int pt_err_set(pt_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- Checked arithmetic on sizes ----------------------------------------------- */

/* Every product or sum of sizes that reach us from user input (layout dimensions,
 * batch and micro-batch counts, sequence, model sizes, byte counts) goes through these:
 * false when the exact result does not fit in int64_t (then *out is left unchanged),
 * so a caller refuses the input instead of wrapping to a small, plausible number. The
 * documented limits (docs/ptplan.md, "Limits") keep valid inputs far from overflow; these catch
 * everything else. pt_prod64 multiplies n factors, all of which must be >= 0. */
bool pt_mul64(int64_t a, int64_t b, int64_t *out);
bool pt_add64(int64_t a, int64_t b, int64_t *out);
bool pt_prod64(const int64_t *factors, int n, int64_t *out);

/* ---- Data types ---------------------------------------------------------------- */

typedef enum { PT_DTYPE_FP32, PT_DTYPE_TF32, PT_DTYPE_BF16, PT_DTYPE_FP16, PT_DTYPE_FP8,
               PT_DTYPE_COUNT } pt_dtype;
const char *pt_dtype_name(pt_dtype d);   /* "fp32", "tf32", "bf16", "fp16", "fp8" */
int pt_dtype_parse(const char *text, pt_dtype *out, pt_err *err);

/* ---- Text ---------------------------------------------------------------------- */

/* The length of the well-formed UTF-8 character at s[0, n) (RFC 3629, section 4) and
 * its code point; 0 when the bytes there are not one. */
size_t pt_utf8_char(const unsigned char *s, size_t n, uint32_t *cp);
/* Writes s to f as a JSON string, quoted and escaped (RFC 8259, section 7). Bytes that
 * are not well-formed UTF-8 (a path on Linux need not be; a name cut to a fixed-size
 * field may end inside a character) are written as U+FFFD, so that what is written is
 * always JSON a reader accepts. */
void pt_json_put_string(FILE *f, const char *s);

/* ---- Files --------------------------------------------------------------------- */

/* Opens path for reading. A folder is refused, and with regular_only anything but a
 * regular file (an input whose size is read first), at once: a FIFO is refused rather
 * than waited on. Without it a FIFO or pipe is a stream, read as cat(1) reads it (the
 * open waits for a writer). err names path and why. */
FILE *pt_in_open(const char *path, bool regular_only, pt_err *err);

/* An output file being written (files.c says how each kind of path is treated):
 * write to f, then pt_out_commit, or pt_out_discard to leave the path as it was. */
typedef struct {
    FILE *f;
    const char *path; /* as given, for messages; not owned */
    char *target;     /* the name written: path with its symbolic links followed */
    char *tmp;        /* the temporary renamed over target; NULL when written in place */
} pt_out;

/* Opens path for writing: a regular file (or a new name, or a link's target) through a
 * unique temporary beside it; a character device, a FIFO with a reader, or one of this
 * process's descriptors (/dev/stdout, /dev/fd/N) in place. A folder, block device,
 * socket, a FIFO without a reader or a name too long for a temporary is refused with
 * err naming path, and nothing is created. */
int pt_out_open(pt_out *o, const char *path, pt_err *err);
/* Flushes (and with sync, fsyncs) what was written and renames the temporary over the
 * target; on any failure removes the temporary, leaves the target as it was and fills
 * err with path and the cause. Closes o in every case. */
int pt_out_commit(pt_out *o, bool sync, pt_err *err);
/* Closes o and removes its temporary: the target stays as it was. */
void pt_out_discard(pt_out *o);
/* pt_out_discard after a failed write, filling err with o's path and the cause e (the
 * write's errno; 0: "write error"); returns -1. */
int pt_out_fail(pt_out *o, int e, pt_err *err);
/* n bytes of text to path, whole or not at all (pt_out_open, fwrite, pt_out_commit
 * with sync). */
int pt_file_write_atomic(const char *path, const char *text, size_t n, pt_err *err);
/* Flushes stdout; on a write error (a full disk, a closed pipe) prints
 * "TOOL: cannot write the standard output: CAUSE" on stderr and returns -1, so that a
 * tool whose output was cut short does not exit 0. */
int pt_stdout_check(const char *tool);

#ifdef __cplusplus
}
#endif
#endif
