/*
 * JSON helpers shared by the spec readers (planner/model.c, planner/cluster.c) and
 * any later reader of the project's JSON files: reading a whole file, parsing with
 * positions in errors, typed getters for required fields that name the field by its
 * dotted path, the unknown-key check that catches typos, and a dumper whose reals
 * load back bit-identically. Contracts are in planner/specjson.h.
 */
#include "specjson.h"

#include <errno.h>
#include <limits.h>
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
    return root;
}

/* ---- Reading fields ---------------------------------------------------------- */

int pt_json_field_name(const pt_json_obj *o, const char *key, char *buf, size_t n)
{
    if (o->path[0])
        return snprintf(buf, n, "%s.%s", o->path, key);
    return snprintf(buf, n, "%s", key);
}

/* Writes a short JSON rendering of v into buf[n], cut with "..." when long.
 * (json_dumpb skips whole chunks that do not fit, so a long value is dumped in
 * full first and then cut.) */
static void value_text(const json_t *v, char *buf, size_t n)
{
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

static const json_t *required(const pt_json_obj *o, const char *key, pt_err *err)
{
    const json_t *v = json_object_get(o->obj, key);
    if (!v) {
        char name[192];
        pt_json_field_name(o, key, name, sizeof name);
        pt_err_set(err, "%s: missing field '%s'", o->origin, name);
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
    return pt_err_set(err, "%s: field '%s' = %s: %s", o->origin, name, value, what);
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

int pt_json_check_keys(const pt_json_obj *o, const char *const *keys, pt_err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o->obj, key, v) {
        if (key_listed(key, keys))
            continue;
        char name[192], expected[256];
        pt_json_field_name(o, key, name, sizeof name);
        join_keys(keys, expected, sizeof expected);
        return pt_err_set(err, "%s: unknown field '%s' (expected one of: %s)", o->origin,
                          name, expected);
    }
    return 0;
}

int pt_json_get_int(const pt_json_obj *o, const char *key, int64_t *out, pt_err *err)
{
    const json_t *v = required(o, key, err);
    if (!v)
        return -1;
    if (!json_is_integer(v))
        return type_error(o, key, v, "an integer", err);
    *out = (int64_t)json_integer_value(v);
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
    if (pt_json_field_name(o, key, child->path, sizeof child->path) >=
        (int)sizeof child->path)
        return field_error(o, key, v, "nested too deeply", err);
    return keys ? pt_json_check_keys(child, keys, err) : 0;
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
