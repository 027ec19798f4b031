/*
 * Internal to planner/: the JSON reading and writing helpers that the model and
 * cluster specs (and later plan.json) share, so that every JSON file the project
 * reads reports errors the same way: "origin:line:column: ..." for malformed text,
 * "origin: field 'device.memory_bytes' ..." for a missing, unknown or mistyped field.
 * Built on jansson. Not part of the public header.
 */
#ifndef PT_SPECJSON_H
#define PT_SPECJSON_H

#include "spec.h"

#include <jansson.h>

/* An object being read: the jansson object, the name of the document it came from
 * (a file name or "<string>") and its dotted path inside it ("" at the top level,
 * "device", "device.peak_flops", ...). Borrowed: the root owns `obj`. */
typedef struct {
    const json_t *obj;
    const char *origin;
    char path[128];
} pt_json_obj;

/* ---- Reading whole documents ------------------------------------------------- */

/* Reads the file at `path` into a malloc'd, NUL-terminated text (caller frees).
 * NULL on error: "cannot read 'path': <strerror>". */
char *pt_json_read_file(const char *path, pt_err *err);

/* Parses `text` (duplicate keys rejected) and requires an object at the top level.
 * Returns the new root (caller json_decref's it) and fills `top` to read it; NULL on
 * error with "origin:line:column: <jansson's message>". */
json_t *pt_json_parse_object(const char *text, const char *origin, pt_json_obj *top,
                             pt_err *err);

/* ---- Reading fields ---------------------------------------------------------- */
/* Every getter requires the field: a missing one is "origin: missing field 'x'", a
 * value of the wrong type "origin: field 'x' = <value>: expected <type>, got <type>".
 * Each returns 0 or -1 with err filled. */

/* Fails on the first key of `o` that is not in `keys` (NULL-terminated), naming it
 * and listing the expected ones. Call before the getters so that a misspelt key is
 * reported as unknown rather than as the correct key missing. */
int pt_json_check_keys(const pt_json_obj *o, const char *const *keys, pt_err *err);

/* A JSON integer (12.5 and 12.0 are refused). */
int pt_json_get_int(const pt_json_obj *o, const char *key, int64_t *out, pt_err *err);
/* A JSON integer that also fits in an int. */
int pt_json_get_int32(const pt_json_obj *o, const char *key, int *out, pt_err *err);
/* A JSON integer or real. */
int pt_json_get_real(const pt_json_obj *o, const char *key, double *out, pt_err *err);
int pt_json_get_bool(const pt_json_obj *o, const char *key, bool *out, pt_err *err);
/* A string that fits in buf[n] with its NUL and holds no NUL of its own. */
int pt_json_get_string(const pt_json_obj *o, const char *key, char *buf, size_t n,
                       pt_err *err);
/* A string equal to one of names[0..count); *out is its index. */
int pt_json_get_enum(const pt_json_obj *o, const char *key, const char *const *names,
                     int count, int *out, pt_err *err);
/* An object whose keys are all in `keys` (NULL: the caller checks them, as the
 * readers of nested specs do); fills `child` to read it. */
int pt_json_get_object(const pt_json_obj *o, const char *key, const char *const *keys,
                       pt_json_obj *child, pt_err *err);

/* Writes the full dotted name of `key` inside `o` ("device.name") into buf[n], cut
 * to fit; returns the length of the whole name, as snprintf does. */
int pt_json_field_name(const pt_json_obj *o, const char *key, char *buf, size_t n);

/* ---- Specs as parts of larger documents (plan.json) ------------------------- */

/* Read a model or cluster from object `o` (without validating sizes: call
 * pt_model_validate / pt_cluster_validate after). */
int pt_model_read_obj(const pt_json_obj *o, pt_model *m, pt_err *err);
int pt_cluster_read_obj(const pt_json_obj *o, pt_cluster *c, pt_err *err);
/* New JSON objects of the specs (NULL when out of memory); the texts of
 * pt_model_to_json / pt_cluster_to_json are these, dumped. */
json_t *pt_model_json_obj(const pt_model *m);
json_t *pt_cluster_json_obj(const pt_cluster *c);

/* ---- Writing ----------------------------------------------------------------- */

/* Sets obj[key] = value, taking ownership of value. Returns -1 when value is NULL
 * (a failed json_* constructor) or the set fails, so callers can OR the results. */
int pt_json_set(json_t *obj, const char *key, json_t *value);

/* Dumps `root` as a malloc'd text: 2-space indent, keys in insertion order, a
 * trailing newline, and reals with the fewest digits (at most 17) that make every
 * real of the document load back bit-identically. NULL when out of memory. */
char *pt_json_dump(const json_t *root);

#endif
