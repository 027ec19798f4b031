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

/* ---- Collecting problems ------------------------------------------------------ */

/* The problems found in one document, so that a reader reports all of them at once
 * rather than the first: each is one line "origin: ...", and those about a field are
 * recorded with its dotted path, so that a later problem about the same field, or a
 * field inside it, is not reported twice (a missing "device" makes every
 * "device.*" field missing too). Lives on the reader's stack; see pt_json_errs_finish
 * for how the lines become one pt_err. */
#define PT_JSON_ERRS_PATHS 64 /* above the fields of any spec */
typedef struct {
    int count;                       /* problems recorded */
    int lines;                       /* of which kept in text (the rest only counted) */
    size_t used;                     /* bytes of text, each kept line with its '\n' */
    char text[1024];
    int n_paths;
    char paths[PT_JSON_ERRS_PATHS][192];
} pt_json_errs;

void pt_json_errs_init(pt_json_errs *e);
/* Records a problem: the line fmt formats (naming the document and the field), about
 * field `path` (NULL when about no single field). Skipped when `path` or a field that
 * holds it already has a problem (pt_json_errs_has). Returns -1. */
int pt_json_errs_add(pt_json_errs *e, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Marks `path` as reported without a line of its own (a misspelt key's intended
 * field, which the misspelling's line already names). */
void pt_json_errs_mark(pt_json_errs *e, const char *path);
/* Whether `path`, or a field that holds it ("device" for "device.name"), has a
 * problem. */
bool pt_json_errs_has(const pt_json_errs *e, const char *path);
/* 0 when nothing was recorded. Else fills err with the recorded lines, one per line
 * ('\n' between them), in the order found, as many as fit in pt_err's message with a
 * last line "origin: and N more problems" for those that do not, and returns -1. */
int pt_json_errs_finish(const pt_json_errs *e, const char *origin, pt_err *err);

/* An object being read: the jansson object, the name of the document it came from
 * (a file name or "<string>") and its dotted path inside it ("" at the top level,
 * "device", "device.peak_flops", ...). Borrowed: the root owns `obj`. `errs`, when
 * not NULL, collects every problem the getters find (each still returns -1 and
 * fills err); objects read through pt_json_get_object inherit it. */
typedef struct {
    const json_t *obj;
    const char *origin;
    char path[128];
    pt_json_errs *errs;
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
 * Each returns 0 or -1 with err filled (and the problem recorded in o->errs). */

/* Fails on a key of `o` that is not in `keys` (NULL-terminated), naming it and the
 * closest expected key when one is close by edit distance ("did you mean"), else
 * listing the expected ones. Without a collector the first such key fails; with one
 * every such key is recorded, and a close key that `o` lacks is marked reported, so
 * that a misspelling is not also reported as the correct key missing. Call before
 * the getters. */
int pt_json_check_keys(const pt_json_obj *o, const char *const *keys, pt_err *err);

/* A JSON integer, or a real with no fractional part in int64_t's range (40e9 and
 * 40.5e9 are the integers 40000000000 and 40500000000; 40.5 and 1e300 are refused,
 * naming field and value). */
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
 * readers of nested specs do); fills `child` to read it. With a collector, unknown
 * keys are recorded but do not fail the call: -1 then means the object itself is
 * missing or not an object, and `child` must not be read. */
int pt_json_get_object(const pt_json_obj *o, const char *key, const char *const *keys,
                       pt_json_obj *child, pt_err *err);

/* A problem about field `key` of `o` (NULL: about `o` itself) that a reader finds
 * itself: formats the whole line (fmt names document and field) into err, records it
 * in o->errs when there is one, and returns -1. */
int pt_json_fail(const pt_json_obj *o, const char *key, pt_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes the full dotted name of `key` inside `o` ("device.name") into buf[n], cut
 * to fit; returns the length of the whole name, as snprintf does. */
int pt_json_field_name(const pt_json_obj *o, const char *key, char *buf, size_t n);

/* ---- Specs as parts of larger documents (plan.json) ------------------------- */

/* Read a model or cluster from object `o` (without validating sizes: call
 * pt_model_validate / pt_cluster_validate after). Every problem found is reported:
 * into o->errs when `o` has a collector, else all of them in err. */
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

/* The one of names[0..n-1] closest to `key` by edit distance (insertions, deletions,
 * substitutions, a swap of neighbours as one; case-insensitive), when within a third of
 * the longer name's length: the "did you mean" of a typo; NULL when none is that close. */
const char *pt_spec_closest(const char *key, const char *const *names, int n);

#endif
