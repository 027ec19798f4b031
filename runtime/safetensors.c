/*
 * safetensors files: the format in which checkpoints hold parameters and optimizer
 * state, so that other tools (PyTorch, Hugging Face) can read them. This file owns
 * writing a file atomically and reading one back with every check the format allows.
 *
 * The format (https://github.com/huggingface/safetensors, README "Format"): an 8-byte
 * little-endian unsigned header size N, then N bytes of UTF-8 JSON mapping each tensor
 * name to {"dtype", "shape", "data_offsets": [begin, end]} plus an optional
 * "__metadata__" object of string to string, then the byte buffer. Offsets are relative
 * to the byte buffer; the tensors cover it contiguously, without holes or overlaps.
 * We pad the header with spaces so that the buffer starts at a multiple of 8 bytes, as
 * the reference writer does. Data are little-endian; they are written and read as they
 * lie in memory, which is right on every host we build for (x86-64, aarch64).
 *
 * Tensors are written in the order given and not padded between each other (the
 * format forbids holes), so a tensor's data are aligned to its element size only when
 * the caller puts larger elements first or sizes are multiples of 8. The reader keeps
 * the byte buffer in its own allocation, so offsets aligned in the file are aligned in
 * memory too.
 */
#include "runtime.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The largest header we accept; the reference reader's limit is 100 MB too. */
enum { ST_MAX_HEADER_BYTES = 100000000, ST_MAX_NDIM = 4 };

struct pt_st_file {
    char path[512];
    json_t *root;        /* the header, which owns the metadata strings */
    void *data;          /* the byte buffer after the header (malloc'd) */
    int64_t data_bytes;  /* what the file holds after the header (fstat), read or not */
    int n;
    pt_st_tensor *t;     /* n tensors, in the header's order */
    int64_t *begin;      /* n offsets of the tensors' data in the byte buffer */
    int64_t data_at;     /* where the byte buffer starts in the file */
    int fd;              /* opened with pt_st_open_header: the file, read by pt_st_read;
                            else -1 */
};

/* ---- Data types -------------------------------------------------------------------- */

/* Element sizes of the format's dtypes (safetensors' Dtype enum). */
static const struct {
    const char *name;
    int bytes;
} st_dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
    {"U16", 2}, {"U8", 1},  {"BOOL", 1},
};

/* Element size of dtype `name`, or 0 when the format has no such dtype. */
static int st_dtype_bytes(const char *name)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(name, st_dtypes[i].name) == 0)
            return st_dtypes[i].bytes;
    return 0;
}

/* Bytes of a tensor of `esize`-byte elements and this shape; -1 when a dimension is
 * negative or the product overflows. */
static int64_t st_shape_bytes(int ndim, const int64_t *shape, int esize)
{
    int64_t bytes = esize;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return -1;
        if (shape[i] > 0 && bytes > INT64_MAX / shape[i])
            return -1;
        bytes *= shape[i];
    }
    return bytes;
}

/* "(5, 6)"; "()" for a scalar. */
static const char *st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t len = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (len < cap)
        snprintf(buf + len, cap - len, ")");
    return buf;
}

/* An error about tensor `name` of file `path`: "<path>: tensor '<name>': <what>". */
__attribute__((format(printf, 4, 5)))
static int st_tensor_err(pt_err *err, const char *path, const char *name, const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pt_err_set(err, "%s: tensor '%.128s': %s", path, name, what);
}

/* ---- Writing ----------------------------------------------------------------------- */

/* Checks one tensor to be written: name, dtype, shape and byte count agree. */
/* pieces: the data come later (pt_st_create), so there are none yet. */
static int st_check_out(const char *path, const pt_st_tensor *t, bool pieces, pt_err *err)
{
    char shape[128];
    if (memchr(t->name, '\0', sizeof t->name) == NULL || t->name[0] == '\0' ||
        strcmp(t->name, "__metadata__") == 0)
        return pt_err_set(err, "%s: a tensor name is empty, unterminated or '__metadata__'",
                          path);
    int esize = st_dtype_bytes(t->dtype);
    if (esize == 0)
        return st_tensor_err(err, path, t->name, "unknown dtype '%.8s'", t->dtype);
    if (t->ndim < 0 || t->ndim > ST_MAX_NDIM)
        return st_tensor_err(err, path, t->name, "%d dimensions (0 to %d supported)", t->ndim,
                             ST_MAX_NDIM);
    int64_t want = st_shape_bytes(t->ndim, t->shape, esize);
    if (want < 0)
        return st_tensor_err(err, path, t->name, "invalid shape %s",
                             st_shape_str(shape, sizeof shape, t->ndim, t->shape));
    if ((uint64_t)want != (uint64_t)t->bytes)
        return st_tensor_err(err, path, t->name, "%zu bytes do not match shape %s of %s "
                             "(%" PRId64 " bytes)", t->bytes,
                             st_shape_str(shape, sizeof shape, t->ndim, t->shape), t->dtype, want);
    if (t->bytes > 0 && t->data == NULL && !pieces)
        return st_tensor_err(err, path, t->name, "no data");
    return 0;
}

/* {"dtype": .., "shape": [..], "data_offsets": [begin, end]} */
static json_t *st_tensor_json(const pt_st_tensor *t, int64_t begin)
{
    json_t *shape = json_array();
    for (int i = 0; i < t->ndim; i++)
        json_array_append_new(shape, json_integer(t->shape[i]));
    return json_pack("{s:s, s:o, s:[I, I]}", "dtype", t->dtype, "shape", shape, "data_offsets",
                     (json_int_t)begin, (json_int_t)(begin + (int64_t)t->bytes));
}

static int st_meta_json(const char *path, const char *const *keys, const char *const *values,
                        int n_meta, json_t *root, pt_err *err)
{
    json_t *meta = json_object();
    json_object_set_new(root, "__metadata__", meta);
    for (int i = 0; i < n_meta; i++) {
        if (keys[i] && json_object_get(meta, keys[i]))
            return pt_err_set(err, "%s: metadata key '%.128s' appears twice", path, keys[i]);
        json_t *v = keys[i] && values[i] ? json_string(values[i]) : NULL;
        if (!v || json_object_set_new(meta, keys[i], v) != 0)
            return pt_err_set(err, "%s: metadata entry %d is NULL or not valid UTF-8", path, i);
    }
    return 0;
}

/* The header object of n tensors laid out one after the other, in the order given. */
static json_t *st_header_json(const char *path, const pt_st_tensor *t, int n,
                              const char *const *keys, const char *const *values, int n_meta,
                              bool pieces, pt_err *err)
{
    json_t *root = json_object();
    if (n_meta > 0 && st_meta_json(path, keys, values, n_meta, root, err) != 0)
        goto fail;
    int64_t offset = 0;
    for (int i = 0; i < n; i++) {
        if (st_check_out(path, &t[i], pieces, err) != 0)
            goto fail;
        if (json_object_get(root, t[i].name)) {
            st_tensor_err(err, path, t[i].name, "appears twice");
            goto fail;
        }
        json_t *entry = st_tensor_json(&t[i], offset);
        if (!entry || json_object_set_new(root, t[i].name, entry) != 0) {
            st_tensor_err(err, path, t[i].name, "name is not valid UTF-8");
            goto fail;
        }
        offset += (int64_t)t[i].bytes;
    }
    return root;
fail:
    json_decref(root);
    return NULL;
}

/* The length field and the header padded with spaces to a multiple of 8. */
static int st_put_header(FILE *fp, const char *header)
{
    size_t len = strlen(header), padded = (len + 7) / 8 * 8;
    unsigned char size[8];
    for (int i = 0; i < 8; i++)
        size[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    int ok = fwrite(size, 1, 8, fp) == 8 && fwrite(header, 1, len, fp) == len;
    for (size_t i = len; ok && i < padded; i++)
        ok = fputc(' ', fp) != EOF;
    return ok ? 0 : -1;
}

/* The header, then the data (pt_out_commit flushes and syncs). */
static int st_put(FILE *fp, const char *header, const pt_st_tensor *t, int n)
{
    int ok = st_put_header(fp, header) == 0;
    for (int i = 0; ok && i < n; i++)
        ok = t[i].bytes == 0 || fwrite(t[i].data, 1, t[i].bytes, fp) == t[i].bytes;
    return ok ? 0 : -1;
}

static int st_put_file(const char *path, const char *header, const pt_st_tensor *t, int n,
                       pt_err *err)
{
    pt_out o;
    if (pt_out_open(&o, path, err))
        return -1;
    if (st_put(o.f, header, t, n) != 0)
        return pt_out_fail(&o, errno, err);
    return pt_out_commit(&o, true, err);
}

/* The header's text, compact and in the order given. */
static char *st_header_text(const char *path, const pt_st_tensor *t, int n,
                            const char *const *keys, const char *const *values, int n_meta,
                            bool pieces, pt_err *err)
{
    json_t *root = st_header_json(path, t, n, keys, values, n_meta, pieces, err);
    if (!root)
        return NULL;
    char *header = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!header)
        pt_err_set(err, "%s: out of memory formatting the header", path);
    return header;
}

int pt_st_write(const char *path, const pt_st_tensor *t, int n, const char *const *meta_keys,
                const char *const *meta_values, int n_meta, pt_err *err)
{
    if (n < 0 || (n > 0 && !t) || (n_meta > 0 && (!meta_keys || !meta_values)))
        return pt_err_set(err, "%s: invalid tensor or metadata list", path);
    char *header = st_header_text(path, t, n, meta_keys, meta_values, n_meta, false, err);
    if (!header)
        return -1;
    int rc = st_put_file(path, header, t, n, err);
    free(header);
    return rc;
}

int pt_st_create(const char *path, const pt_st_tensor *t, int n, const char *const *meta_keys,
                 const char *const *meta_values, int n_meta, pt_err *err)
{
    if (n < 0 || (n > 0 && !t) || (n_meta > 0 && (!meta_keys || !meta_values)))
        return pt_err_set(err, "%s: invalid tensor or metadata list", path);
    char *header = st_header_text(path, t, n, meta_keys, meta_values, n_meta, true, err);
    if (!header)
        return -1;
    int64_t data = 0;
    for (int i = 0; i < n; i++)
        data += (int64_t)t[i].bytes; /* checked against their shapes: no overflow */
    off_t size = (off_t)(8 + (strlen(header) + 7) / 8 * 8) + (off_t)data;
    FILE *fp = fopen(path, "wb");
    int rc = fp && st_put_header(fp, header) == 0 && fflush(fp) == 0 &&
                     ftruncate(fileno(fp), size) == 0 && fsync(fileno(fp)) == 0
                 ? 0
                 : -1;
    int saved = errno;
    if (fp && fclose(fp) != 0 && rc == 0) {
        rc = -1;
        saved = errno;
    }
    free(header);
    if (rc != 0) {
        if (fp)
            remove(path);
        return pt_err_set(err, "cannot write '%s': %s", path, strerror(saved));
    }
    return 0;
}

/* ---- Reading: the file ------------------------------------------------------------- */

/* Reads `bytes` bytes; the error says the file ended early or why reading failed. */
static int st_get(FILE *fp, void *buf, size_t bytes, const char *path, pt_err *err)
{
    if (bytes == 0 || fread(buf, 1, bytes, fp) == bytes)
        return 0;
    if (ferror(fp))
        return pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    return pt_err_set(err, "%s: truncated file", path);
}

/* The header length field, checked against the file size. */
static int st_get_header_len(FILE *fp, const char *path, int64_t file_bytes, int64_t *len,
                             pt_err *err)
{
    unsigned char size[8];
    if (file_bytes < 8)
        return pt_err_set(err, "%s: truncated file: %" PRId64 " bytes, too short for the "
                          "8-byte header length", path, file_bytes);
    if (st_get(fp, size, 8, path, err) != 0)
        return -1;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | size[i];
    if (n > (uint64_t)(file_bytes - 8))
        return pt_err_set(err, "%s: header length %" PRIu64 " is larger than the rest of the "
                          "file (%" PRId64 " bytes): truncated or not a safetensors file",
                          path, n, file_bytes - 8);
    if (n > ST_MAX_HEADER_BYTES)
        return pt_err_set(err, "%s: header length %" PRIu64 " is over the limit of %d bytes",
                          path, n, ST_MAX_HEADER_BYTES);
    *len = (int64_t)n;
    return 0;
}

/* The header as JSON; the error gives the position of a syntax error. */
static int st_get_header(FILE *fp, pt_st_file *f, int64_t len, pt_err *err)
{
    char *text = malloc((size_t)len + 1);
    if (!text)
        return pt_err_set(err, "%s: out of memory for a %" PRId64 "-byte header", f->path, len);
    int rc = st_get(fp, text, (size_t)len, f->path, err);
    if (rc == 0) {
        json_error_t je;
        f->root = json_loadb(text, (size_t)len, JSON_REJECT_DUPLICATES, &je);
        if (!f->root)
            rc = pt_err_set(err, "%s: the header is not valid JSON: %s (byte %d of the header)",
                            f->path, je.text, je.position);
        else if (!json_is_object(f->root))
            rc = pt_err_set(err, "%s: the header is not a JSON object", f->path);
    }
    free(text);
    return rc;
}

/* Reads the header length and the header; the byte buffer's size comes from fstat, so
 * that the header is checked against the file before any data are read. */
static int st_load_header(FILE *fp, pt_st_file *f, pt_err *err)
{
    struct stat st;
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode))
        return pt_err_set(err, "cannot read '%s': not a regular file", f->path);
    int64_t len = 0;
    if (st_get_header_len(fp, f->path, (int64_t)st.st_size, &len, err) != 0 ||
        st_get_header(fp, f, len, err) != 0)
        return -1;
    f->data_bytes = (int64_t)st.st_size - 8 - len;
    f->data_at = 8 + len;
    return 0;
}

/* Reads the byte buffer, whose layout st_parse has checked, and points the tensors
 * into it. */
static int st_load_data(FILE *fp, pt_st_file *f, pt_err *err)
{
    f->data = malloc(f->data_bytes > 0 ? (size_t)f->data_bytes : 1);
    if (!f->data)
        return pt_err_set(err, "%s: out of memory for %" PRId64 " bytes of data", f->path,
                          f->data_bytes);
    if (st_get(fp, f->data, (size_t)f->data_bytes, f->path, err) != 0)
        return -1;
    for (int i = 0; i < f->n; i++)
        f->t[i].data = (const char *)f->data + f->begin[i];
    return 0;
}

/* ---- Reading: the header ----------------------------------------------------------- */

typedef struct {
    int64_t begin, end;
    int i;               /* tensor index */
} st_span;

/* An integer array of at most `max` entries: -1 when it is something else, -2 when an
 * entry is negative. */
static int st_get_ints(const json_t *a, int max, int64_t *out, int *n)
{
    if (!json_is_array(a) || json_array_size(a) > (size_t)max)
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v))
            return -1;
        out[i] = (int64_t)json_integer_value(v);
    }
    *n = (int)json_array_size(a);
    for (size_t i = 0; i < json_array_size(a); i++)
        if (out[i] < 0)
            return -2;
    return 0;
}

/* dtype and shape of one header entry. */
static int st_parse_type(const pt_st_file *f, const char *name, const json_t *v,
                         pt_st_tensor *t, pt_err *err)
{
    const json_t *dtype = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape");
    char text[128];
    if (!json_is_string(dtype))
        return st_tensor_err(err, f->path, name, "'dtype' missing or not a string");
    if (st_dtype_bytes(json_string_value(dtype)) == 0)
        return st_tensor_err(err, f->path, name, "unknown dtype '%.32s'",
                             json_string_value(dtype));
    strcpy(t->dtype, json_string_value(dtype));
    if (json_is_array(shape) && json_array_size(shape) > ST_MAX_NDIM)
        return st_tensor_err(err, f->path, name, "%zu dimensions (at most %d supported)",
                             json_array_size(shape), ST_MAX_NDIM);
    int rc = st_get_ints(shape, ST_MAX_NDIM, t->shape, &t->ndim);
    if (rc == -1)
        return st_tensor_err(err, f->path, name, "'shape' missing or not an array of integers");
    if (rc == -2)
        return st_tensor_err(err, f->path, name, "shape %s has a negative dimension",
                             st_shape_str(text, sizeof text, (int)json_array_size(shape),
                                          t->shape));
    return 0;
}

/* One header entry: name, dtype, shape and data_offsets, checked against each other and
 * the byte buffer. */
static int st_parse_tensor(const pt_st_file *f, const char *name, const json_t *v,
                           pt_st_tensor *t, st_span *span, pt_err *err)
{
    char shape[128];
    int64_t off[2] = {0, 0};
    int n_off = 0;
    if (strlen(name) >= sizeof t->name)
        return st_tensor_err(err, f->path, name, "name longer than %zu bytes",
                             sizeof t->name - 1);
    strcpy(t->name, name);
    if (!json_is_object(v))
        return st_tensor_err(err, f->path, name, "expected an object with dtype, shape and "
                             "data_offsets");
    if (st_parse_type(f, name, v, t, err) != 0)
        return -1;
    int rc = st_get_ints(json_object_get(v, "data_offsets"), 2, off, &n_off);
    if (rc == -2)
        return st_tensor_err(err, f->path, name, "data_offsets [%" PRId64 ", %" PRId64 "] "
                             "are negative", off[0], off[1]);
    if (rc != 0 || n_off != 2)
        return st_tensor_err(err, f->path, name, "'data_offsets' missing or not two integers");
    int64_t want = st_shape_bytes(t->ndim, t->shape, st_dtype_bytes(t->dtype));
    st_shape_str(shape, sizeof shape, t->ndim, t->shape);
    if (off[1] < off[0] || want < 0 || off[1] - off[0] != want)
        return st_tensor_err(err, f->path, name, "data_offsets [%" PRId64 ", %" PRId64 "] do "
                             "not match shape %s of %s (%" PRId64 " bytes)", off[0], off[1],
                             shape, t->dtype, want);
    if (off[1] > f->data_bytes)
        return st_tensor_err(err, f->path, name, "data_offsets [%" PRId64 ", %" PRId64 "] "
                             "run past the end of the data (%" PRId64 " bytes): truncated "
                             "file?", off[0], off[1], f->data_bytes);
    t->data = NULL; /* st_load_data points it into the buffer */
    t->bytes = (size_t)want;
    span->begin = off[0];
    span->end = off[1];
    return 0;
}

static int st_span_cmp(const void *a, const void *b)
{
    const st_span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->i - y->i;
}

/* The tensors cover the byte buffer exactly: sorted by offset, each starts where the
 * previous one ends (the format allows neither holes nor overlaps). */
static int st_check_cover(const pt_st_file *f, st_span *span, pt_err *err)
{
    qsort(span, (size_t)f->n, sizeof *span, st_span_cmp);
    int64_t at = 0;
    for (int k = 0; k < f->n; k++) {
        const char *name = f->t[span[k].i].name;
        if (span[k].begin < at)
            return st_tensor_err(err, f->path, name, "data_offsets [%" PRId64 ", %" PRId64 "] "
                                 "overlap tensor '%.128s' [%" PRId64 ", %" PRId64 "]",
                                 span[k].begin, span[k].end, f->t[span[k - 1].i].name,
                                 span[k - 1].begin, span[k - 1].end);
        if (span[k].begin > at)
            return st_tensor_err(err, f->path, name, "data_offsets [%" PRId64 ", %" PRId64 "] "
                                 "leave a hole: bytes [%" PRId64 ", %" PRId64 ") belong to no "
                                 "tensor", span[k].begin, span[k].end, at, span[k].begin);
        at = span[k].end;
    }
    if (at != f->data_bytes)
        return pt_err_set(err, "%s: bytes [%" PRId64 ", %" PRId64 ") at the end of the data "
                          "belong to no tensor", f->path, at, f->data_bytes);
    return 0;
}

/* "__metadata__" is an object of strings. */
static int st_check_meta(const pt_st_file *f, const json_t *meta, pt_err *err)
{
    const char *key;
    const json_t *v;
    if (!json_is_object(meta))
        return pt_err_set(err, "%s: '__metadata__' is not an object", f->path);
    json_object_foreach((json_t *)meta, key, v)
        if (!json_is_string(v))
            return pt_err_set(err, "%s: metadata '%.128s' is not a string", f->path, key);
    return 0;
}

/* Fills f->t from the header and checks the layout of the data. */
static int st_parse(pt_st_file *f, pt_err *err)
{
    const json_t *meta = json_object_get(f->root, "__metadata__");
    if (meta && st_check_meta(f, meta, err) != 0)
        return -1;
    size_t n = json_object_size(f->root) - (meta != NULL);
    f->t = calloc(n + 1, sizeof *f->t);
    f->begin = calloc(n + 1, sizeof *f->begin);
    st_span *span = calloc(n + 1, sizeof *span);
    if (!f->t || !f->begin || !span) {
        free(span);
        return pt_err_set(err, "%s: out of memory for %zu tensors", f->path, n);
    }
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(f->root, key, v) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        span[f->n].i = f->n;
        rc = st_parse_tensor(f, key, v, &f->t[f->n], &span[f->n], err);
        if (rc != 0)
            break;
        f->begin[f->n] = span[f->n].begin;
        f->n++;
    }
    if (rc == 0)
        rc = st_check_cover(f, span, err);
    free(span);
    return rc;
}

/* ---- Reading: the interface -------------------------------------------------------- */

/* Opens and checks a file; with `load` its data are read too, else the file stays open
 * for pt_st_read. */
static int st_open(const char *path, bool load, pt_st_file **out, pt_err *err)
{
    *out = NULL;
    pt_st_file *f = calloc(1, sizeof *f);
    if (!f)
        return pt_err_set(err, "%s: out of memory", path);
    f->fd = -1;
    snprintf(f->path, sizeof f->path, "%s", path);
    FILE *fp = pt_in_open(path, true, err);
    if (!fp) {
        pt_st_close(f);
        return -1;
    }
    /* the header and every offset are checked against the file's size before any data
     * are read: a damaged header of a large (or sparse) file is refused at once */
    int rc = st_load_header(fp, f, err);
    if (rc == 0)
        rc = st_parse(f, err);
    if (rc == 0 && load)
        rc = st_load_data(fp, f, err);
    if (rc == 0 && !load && (f->fd = dup(fileno(fp))) < 0)
        rc = pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    fclose(fp);
    if (rc != 0) {
        pt_st_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

int pt_st_open(const char *path, pt_st_file **out, pt_err *err)
{
    return st_open(path, true, out, err);
}

int pt_st_open_header(const char *path, pt_st_file **out, pt_err *err)
{
    return st_open(path, false, out, err);
}

int64_t pt_st_file_offset(const pt_st_file *f, const pt_st_tensor *t)
{
    int64_t i = t - f->t;
    return i >= 0 && i < f->n ? f->data_at + f->begin[i] : -1;
}

int pt_st_read(const pt_st_file *f, const pt_st_tensor *t, int64_t offset, size_t bytes,
               void *dst, pt_err *err)
{
    int64_t i = t - f->t;
    if (i < 0 || i >= f->n || offset < 0 || (uint64_t)offset > t->bytes ||
        bytes > t->bytes - (uint64_t)offset)
        return pt_err_set(err, "%s: tensor '%.128s': bytes [%" PRId64 ", +%zu) are outside "
                          "its %zu", f->path, t->name, offset, bytes, t->bytes);
    if (f->fd < 0) {
        memcpy(dst, (const char *)t->data + offset, bytes);
        return 0;
    }
    off_t at = (off_t)(f->data_at + f->begin[i] + offset);
    for (size_t done = 0; done < bytes;) {
        ssize_t got = pread(f->fd, (char *)dst + done, bytes - done, at + (off_t)done);
        if (got <= 0)
            return pt_err_set(err, "cannot read '%s': %s", f->path,
                              got < 0 ? strerror(errno) : "the file is shorter than its header says");
        done += (size_t)got;
    }
    return 0;
}

int pt_st_count(const pt_st_file *f)
{
    return f->n;
}

const pt_st_tensor *pt_st_at(const pt_st_file *f, int i)
{
    return i >= 0 && i < f->n ? &f->t[i] : NULL;
}

int pt_st_get(const pt_st_file *f, const char *name, const char *dtype, int ndim,
              const int64_t *shape, const pt_st_tensor **out, pt_err *err)
{
    char have[128], want[128];
    const pt_st_tensor *t = NULL;
    for (int i = 0; i < f->n && !t; i++)
        if (strcmp(f->t[i].name, name) == 0)
            t = &f->t[i];
    if (!t)
        return pt_err_set(err, "%s: no tensor '%.128s'", f->path, name);
    if (dtype && strcmp(dtype, t->dtype) != 0)
        return st_tensor_err(err, f->path, name, "dtype %s in the file, %.16s expected",
                             t->dtype, dtype);
    if (ndim >= 0 && !shape && ndim != t->ndim)
        return st_tensor_err(err, f->path, name, "%d dimensions in the file, %d expected",
                             t->ndim, ndim);
    int same = ndim == t->ndim;
    for (int i = 0; same && shape && i < ndim; i++)
        same = shape[i] == t->shape[i];
    if (ndim >= 0 && shape && !same)
        return st_tensor_err(err, f->path, name, "shape %s in the file, %s expected",
                             st_shape_str(have, sizeof have, t->ndim, t->shape),
                             st_shape_str(want, sizeof want, ndim > 8 ? 8 : ndim, shape));
    *out = t;
    return 0;
}

const char *pt_st_meta(const pt_st_file *f, const char *key)
{
    return json_string_value(json_object_get(json_object_get(f->root, "__metadata__"), key));
}

void pt_st_close(pt_st_file *f)
{
    if (!f)
        return;
    json_decref(f->root);
    if (f->fd >= 0)
        close(f->fd);
    free(f->data);
    free(f->t);
    free(f->begin);
    free(f);
}
