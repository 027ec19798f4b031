/*
 * JSON helpers shared by the spec readers (planner/model.c, planner/cluster.c) and
 * any later reader of the project's JSON files: reading a whole file, parsing with
 * positions in errors, typed getters for required fields that name the field by its
 * dotted path, the unknown-key check that catches typos and names the key meant, the
 * collector that lets a reader report every problem of a document at once, and a
 * dumper whose reals load back bit-identically. Contracts are in planner/specjson.h.
 */
#include "specjson.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Spec files are small; anything this big is a mistake (a token file, a dump). */
#define PT_JSON_MAX_FILE_BYTES ((size_t)64 << 20)

/* ---- Reading whole documents ------------------------------------------------- */

static int read_error(const char *path, const char *why, pt_err *err)
{
    return pt_err_set(err, "cannot read '%s': %s", path, why);
}

/* Appends the rest of stream `f` to the malloc'd buffer *text holding *len bytes. */
static int read_stream(FILE *f, const char *path, char **text, size_t *len, pt_err *err)
{
    size_t cap = 4096;
    char *buf = malloc(cap);
    if (!buf)
        return read_error(path, strerror(ENOMEM), err);
    for (;;) {
        size_t got = fread(buf + *len, 1, cap - *len - 1, f);
        *len += got;
        if (got == 0)
            break;
        if (*len + 1 == cap) {
            char *bigger = cap >= PT_JSON_MAX_FILE_BYTES ? NULL : realloc(buf, cap * 2);
            if (!bigger) {
                free(buf);
                return read_error(path, cap >= PT_JSON_MAX_FILE_BYTES ? "file larger than 64 MiB"
                                                                     : strerror(ENOMEM), err);
            }
            buf = bigger;
            cap *= 2;
        }
    }
    buf[*len] = '\0';
    *text = buf;
    return 0;
}

char *pt_json_read_file(const char *path, pt_err *err)
{
    FILE *f = pt_in_open(path, false, err); /* a pipe is read as a stream */
    if (!f)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    errno = 0;
    int rc = read_stream(f, path, &text, &len, err);
    if (rc == 0 && ferror(f)) {
        read_error(path, strerror(errno ? errno : EIO), err);
        free(text);
        text = NULL;
    }
    fclose(f);
    return text;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown value";
}

json_t *pt_json_parse_object(const char *text, const char *origin, pt_json_obj *top,
                             pt_err *err)
{
    if (!text) {
        pt_err_set(err, "%s: no JSON text", origin);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        pt_err_set(err, "%s:%d:%d: %s", origin, je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        pt_err_set(err, "%s: expected a JSON object at the top level, got %s", origin,
                   type_name(root));
        json_decref(root);
        return NULL;
    }
    top->obj = root;
    top->origin = origin;
    top->path[0] = '\0';
    top->errs = NULL;
    return root;
}

/* ---- Collecting problems ------------------------------------------------------ */

void pt_json_errs_init(pt_json_errs *e)
{
    memset(e, 0, sizeof *e);
}

void pt_json_errs_mark(pt_json_errs *e, const char *path)
{
    if (!path || pt_json_errs_has(e, path) || e->n_paths == PT_JSON_ERRS_PATHS)
        return;
    snprintf(e->paths[e->n_paths++], sizeof e->paths[0], "%s", path);
}

bool pt_json_errs_has(const pt_json_errs *e, const char *path)
{
    for (int i = 0; path && i < e->n_paths; i++) {
        size_t n = strlen(e->paths[i]);
        if (strncmp(path, e->paths[i], n) == 0 &&
            (path[n] == '\0' || path[n] == '.' || path[n] == '['))
            return true;
    }
    return false;
}

static int errs_vadd(pt_json_errs *e, const char *path, const char *fmt, va_list ap)
{
    if (pt_json_errs_has(e, path))
        return -1;
    pt_json_errs_mark(e, path);
    char line[sizeof ((pt_err *)0)->msg];
    vsnprintf(line, sizeof line, fmt, ap);
    e->count++;
    size_t n = strlen(line);
    if (e->lines == e->count - 1 && e->used + n + 1 < sizeof e->text) {
        memcpy(e->text + e->used, line, n);
        e->text[e->used + n] = '\n';
        e->used += n + 1;
        e->lines++;
    }
    return -1;
}

int pt_json_errs_add(pt_json_errs *e, const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errs_vadd(e, path, fmt, ap);
    va_end(ap);
    return -1;
}

/* "\norigin: and N more problems" into buf[n]; returns its length. */
static size_t more_line(const char *origin, int rest, char *buf, size_t n)
{
    int len = snprintf(buf, n, "\n%s: and %d more problem%s", origin, rest,
                       rest > 1 ? "s" : "");
    return len < 0 ? 0 : (size_t)len;
}

int pt_json_errs_finish(const pt_json_errs *e, const char *origin, pt_err *err)
{
    if (e->count == 0)
        return 0;
    char msg[sizeof err->msg], more[sizeof err->msg];
    size_t used = 0;
    const char *line = e->text;
    int shown = 0;
    for (; shown < e->lines; shown++) {
        size_t n = strcspn(line, "\n");
        int rest = e->count - shown - 1;
        size_t more_n = rest ? more_line(origin, rest, more, sizeof more) : 0;
        size_t sep = shown ? 1 : 0;
        if (used + sep + n + more_n >= sizeof msg) {
            if (shown)
                break;
            /* The first line is always shown, cut to leave room for the count. */
            n = more_n + 1 < sizeof msg ? sizeof msg - 1 - more_n : sizeof msg - 1;
            if (n > strcspn(line, "\n"))
                n = strcspn(line, "\n");
        }
        if (sep)
            msg[used++] = '\n';
        memcpy(msg + used, line, n);
        used += n;
        line += strcspn(line, "\n") + 1;
    }
    msg[used] = '\0';
    int rest = e->count - shown;
    if (rest)
        more_line(origin, rest, more, sizeof more);
    return pt_err_set(err, "%s%s", msg, rest ? more : "");
}

/* ---- Reading fields ---------------------------------------------------------- */

int pt_json_field_name(const pt_json_obj *o, const char *key, char *buf, size_t n)
{
    if (o->path[0])
        return snprintf(buf, n, "%s.%s", o->path, key);
    return snprintf(buf, n, "%s", key);
}

/* A real with the fewest significant digits that read back as the same double (at
 * most 17), so that 40.5e9 shows as 40500000000.0 and 1e300 as 1e+300, not as
 * 1.0000000000000001e+300; a "." is added where %g leaves an integral real bare. */
static void real_text(double x, char *buf, size_t n)
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    if (!strpbrk(buf, ".eEn") && strlen(buf) + 2 < n)
        strcat(buf, ".0");
}

/* Writes a short JSON rendering of v into buf[n], cut with "..." when long.
 * (json_dumpb skips whole chunks that do not fit, so a long value is dumped in
 * full first and then cut.) */
static void value_text(const json_t *v, char *buf, size_t n)
{
    if (json_is_real(v) && n >= 32) {
        real_text(json_real_value(v), buf, n);
        return;
    }
    const size_t flags = JSON_ENCODE_ANY | JSON_COMPACT;
    size_t len = json_dumpb(v, NULL, 0, flags);
    char *full = len < n ? buf : malloc(len);
    if (!full || n < 4) {
        snprintf(buf, n, "%s", "?");
        return;
    }
    json_dumpb(v, full, len, flags);
    if (full == buf) {
        buf[len] = '\0';
        return;
    }
    memcpy(buf, full, n - 4);
    memcpy(buf + n - 4, "...", 4);
    free(full);
}

/* Records the problem line in o->errs when there is one (about field `name`, the
 * full dotted name; NULL: about no single field) and fills err with it. */
static int vfail(const pt_json_obj *o, const char *name, pt_err *err, const char *fmt,
                 va_list ap)
{
    char line[sizeof err->msg];
    vsnprintf(line, sizeof line, fmt, ap);
    if (o->errs)
        pt_json_errs_add(o->errs, name, "%s", line);
    return pt_err_set(err, "%s", line);
}

static int fail(const pt_json_obj *o, const char *name, pt_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(const pt_json_obj *o, const char *name, pt_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(o, name, err, fmt, ap);
    va_end(ap);
    return -1;
}

int pt_json_fail(const pt_json_obj *o, const char *key, pt_err *err, const char *fmt, ...)
{
    char name[192];
    if (key)
        pt_json_field_name(o, key, name, sizeof name);
    else
        snprintf(name, sizeof name, "%s", o->path);
    va_list ap;
    va_start(ap, fmt);
    vfail(o, name[0] ? name : NULL, err, fmt, ap);
    va_end(ap);
    return -1;
}

static const json_t *required(const pt_json_obj *o, const char *key, pt_err *err)
{
    const json_t *v = json_object_get(o->obj, key);
    if (!v) {
        char name[192];
        pt_json_field_name(o, key, name, sizeof name);
        fail(o, name, err, "%s: missing field '%s'", o->origin, name);
    }
    return v;
}

/* "origin: field 'name' = <value>: <what>" */
static int field_error(const pt_json_obj *o, const char *key, const json_t *v,
                       const char *what, pt_err *err)
{
    char name[192], value[64];
    pt_json_field_name(o, key, name, sizeof name);
    value_text(v, value, sizeof value);
    return fail(o, name, err, "%s: field '%s' = %s: %s", o->origin, name, value, what);
}

static int type_error(const pt_json_obj *o, const char *key, const json_t *v,
                      const char *want, pt_err *err)
{
    char what[96];
    snprintf(what, sizeof what, "expected %s, got %s", want, type_name(v));
    return field_error(o, key, v, what, err);
}

static bool key_listed(const char *key, const char *const *keys)
{
    for (; *keys; keys++)
        if (strcmp(key, *keys) == 0)
            return true;
    return false;
}

static void join_keys(const char *const *keys, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; keys[i] && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", keys[i]);
}

/* Names longer than this are never close to a key (no key is this long). */
#define PT_JSON_KEY_MAX 64

static bool same_char(char x, char y)
{
    return tolower((unsigned char)x) == tolower((unsigned char)y);
}

/* The optimal string alignment distance between a and b (Levenshtein's insertions,
 * deletions and substitutions, and a swap of two neighbours as one edit: "memroy"
 * is one edit from "memory"), case-insensitive. */
static int edit_distance(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    int d[PT_JSON_KEY_MAX + 1][PT_JSON_KEY_MAX + 1];
    for (size_t i = 0; i <= na; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= nb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        for (size_t j = 1; j <= nb; j++) {
            int best = d[i - 1][j - 1] + !same_char(a[i - 1], b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && same_char(a[i - 1], b[j - 2]) &&
                same_char(a[i - 2], b[j - 1]) && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[na][nb];
}

const char *pt_spec_closest(const char *key, const char *const *names, int n)
{
    size_t nk = strlen(key);
    if (nk > PT_JSON_KEY_MAX)
        return NULL;
    const char *best = NULL;
    int best_d = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]);
        if (len > PT_JSON_KEY_MAX)
            continue;
        int d = edit_distance(key, names[i]);
        /* Within a third of the longer name: "hiden" (1 of 6) and "memroy_bytes"
         * (1 of 12) are typos, "gpu" for "device" is not. */
        int longer = (int)(len > nk ? len : nk);
        if (d * 3 <= longer && (!best || d < best_d)) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

/* The closest of `keys` (NULL-terminated) to `key` (pt_spec_closest). */
static const char *closest_key(const char *key, const char *const *keys)
{
    int n = 0;
    while (keys[n])
        n++;
    return pt_spec_closest(key, keys, n);
}

int pt_json_check_keys(const pt_json_obj *o, const char *const *keys, pt_err *err)
{
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach((json_t *)o->obj, key, v) {
        if (key_listed(key, keys))
            continue;
        char name[192], expected[256];
        pt_json_field_name(o, key, name, sizeof name);
        const char *meant = closest_key(key, keys);
        /* No later problem is about an unknown key: its path is not kept (NULL). */
        if (meant)
            rc = fail(o, NULL, err, "%s: unknown field '%s' (did you mean '%s'?)", o->origin,
                      name, meant);
        else {
            join_keys(keys, expected, sizeof expected);
            rc = fail(o, NULL, err, "%s: unknown field '%s' (expected one of: %s)", o->origin,
                      name, expected);
        }
        if (!o->errs)
            return rc;
        /* The misspelling's line names the field meant: not also "missing". */
        if (meant && !json_object_get(o->obj, meant)) {
            pt_json_field_name(o, meant, name, sizeof name);
            pt_json_errs_mark(o->errs, name);
        }
    }
    return rc;
}

/* 2^63, the first double above int64_t's range (exact as a double). */
#define PT_JSON_INT64_LIMIT 9223372036854775808.0

int pt_json_get_int(const pt_json_obj *o, const char *key, int64_t *out, pt_err *err)
{
    const json_t *v = required(o, key, err);
    if (!v)
        return -1;
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (!json_is_real(v))
        return type_error(o, key, v, "an integer", err);
    /* 40e9 is a real in JSON: taken when it names an integer exactly. */
    double x = json_real_value(v);
    if (x != floor(x))
        return field_error(o, key, v, "expected an integer, got a real number with a "
                                      "fractional part", err);
    if (!(x >= -PT_JSON_INT64_LIMIT && x < PT_JSON_INT64_LIMIT))
        return field_error(o, key, v, "out of range for a 64-bit integer", err);
    *out = (int64_t)x;
    return 0;
}

int pt_json_get_int32(const pt_json_obj *o, const char *key, int *out, pt_err *err)
{
    int64_t v = 0;
    if (pt_json_get_int(o, key, &v, err))
        return -1;
    if (v < INT_MIN || v > INT_MAX)
        return field_error(o, key, json_object_get(o->obj, key),
                           "out of range for a 32-bit integer", err);
    *out = (int)v;
    return 0;
}

int pt_json_get_real(const pt_json_obj *o, const char *key, double *out, pt_err *err)
{
    const json_t *v = required(o, key, err);
    if (!v)
        return -1;
    if (!json_is_number(v))
        return type_error(o, key, v, "a number", err);
    *out = json_number_value(v);
    return 0;
}

int pt_json_get_bool(const pt_json_obj *o, const char *key, bool *out, pt_err *err)
{
    const json_t *v = required(o, key, err);
    if (!v)
        return -1;
    if (!json_is_boolean(v))
        return type_error(o, key, v, "true or false", err);
    *out = json_is_true(v);
    return 0;
}

int pt_json_get_string(const pt_json_obj *o, const char *key, char *buf, size_t n,
                       pt_err *err)
{
    const json_t *v = required(o, key, err);
    if (!v)
        return -1;
    if (!json_is_string(v))
        return type_error(o, key, v, "a string", err);
    size_t len = json_string_length(v);
    if (strlen(json_string_value(v)) != len)
        return field_error(o, key, v, "contains a NUL character", err);
    if (len >= n) {
        char what[64];
        snprintf(what, sizeof what, "too long (%zu bytes, at most %zu)", len, n - 1);
        return field_error(o, key, v, what, err);
    }
    memcpy(buf, json_string_value(v), len + 1);
    return 0;
}

int pt_json_get_enum(const pt_json_obj *o, const char *key, const char *const *names,
                     int count, int *out, pt_err *err)
{
    const json_t *v = required(o, key, err);
    if (!v)
        return -1;
    if (!json_is_string(v))
        return type_error(o, key, v, "a string", err);
    for (int i = 0; i < count; i++) {
        if (strcmp(json_string_value(v), names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    char what[256] = "expected one of ";
    size_t used = strlen(what);
    for (int i = 0; i < count && used < sizeof what; i++)
        used += (size_t)snprintf(what + used, sizeof what - used, "%s%s", i ? ", " : "",
                                 names[i]);
    return field_error(o, key, v, what, err);
}

int pt_json_get_object(const pt_json_obj *o, const char *key, const char *const *keys,
                       pt_json_obj *child, pt_err *err)
{
    const json_t *v = required(o, key, err);
    if (!v)
        return -1;
    if (!json_is_object(v))
        return type_error(o, key, v, "an object", err);
    child->obj = v;
    child->origin = o->origin;
    child->errs = o->errs;
    if (pt_json_field_name(o, key, child->path, sizeof child->path) >=
        (int)sizeof child->path)
        return field_error(o, key, v, "nested too deeply", err);
    if (!keys)
        return 0;
    int rc = pt_json_check_keys(child, keys, err);
    return o->errs ? 0 : rc;
}

/* ---- Writing ----------------------------------------------------------------- */

int pt_json_set(json_t *obj, const char *key, json_t *value)
{
    if (!value)
        return -1;
    return json_object_set_new(obj, key, value) ? -1 : 0;
}

/* Dumps root with reals at `digits` significant digits into a malloc'd text that
 * ends with a newline; *len gets its length without the NUL. */
static char *dump_digits(const json_t *root, int digits, size_t *len)
{
    size_t flags = JSON_INDENT(2) | JSON_REAL_PRECISION(digits);
    size_t n = json_dumpb(root, NULL, 0, flags);
    char *text = n ? malloc(n + 2) : NULL;
    if (!text)
        return NULL;
    json_dumpb(root, text, n, flags);
    text[n] = '\n';
    text[n + 1] = '\0';
    *len = n + 1;
    return text;
}

static bool loads_back_equal(const json_t *root, const char *text, size_t len)
{
    json_t *back = json_loadb(text, len, 0, NULL);
    bool same = back && json_equal(root, back);
    json_decref(back);
    return same;
}

char *pt_json_dump(const json_t *root)
{
    /* %.17g always round-trips a double; fewer digits read better ("3e-06", not
     * "3.0000000000000001e-06") and are used whenever the whole document still loads
     * back equal, which json_equal checks bit for bit on reals. */
    for (int digits = 1; digits <= 17; digits++) {
        size_t len;
        char *text = dump_digits(root, digits, &len);
        if (!text || digits == 17 || loads_back_equal(root, text, len))
            return text;
        free(text);
    }
    return NULL;
}
