/*
 * Checkpoint directories: meta.json (what wrote the checkpoint and where training
 * stands), next to the safetensors files of parameters and per-rank optimizer state
 * that the trainer writes with pt_st_write (safetensors.c). This file owns meta.json
 * and the way a checkpoint replaces the previous one: everything is written into
 * <dir>.tmp-<pid>, and only when that is complete does commit move the old <dir> aside
 * to <dir>.old-<pid>, rename the new one into place and remove the old one. A crash at
 * any moment leaves either the old or the new checkpoint under <dir> (or, between the
 * two renames, the old one under <dir>.old-<pid>), never a half-written one.
 */
#include "runtime.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The meta.json format this build writes and reads; a change of its fields bumps it. */
enum { CKPT_FORMAT_VERSION = 1, CKPT_PATH_MAX = 4096 };

static const char *const ckpt_fields[] = {"format_version", "layout", "step", "data_pos",
                                          "config_hash", "world", "created_at"};

/* ---- Files and directories --------------------------------------------------------- */

/* Writes text to path through a temporary file renamed when complete. */
static int ckpt_write_atomic(const char *path, const char *text, pt_err *err)
{
    char tmp[CKPT_PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return pt_err_set(err, "%s: path too long", path);
    FILE *fp = fopen(tmp, "wb");
    if (!fp)
        return pt_err_set(err, "cannot write '%s': %s", tmp, strerror(errno));
    size_t len = strlen(text);
    int ok = fwrite(text, 1, len, fp) == len && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    int saved = errno;
    if (fclose(fp) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        saved = errno;
    }
    if (!ok) {
        remove(tmp);
        return pt_err_set(err, "cannot write '%s': %s", path, strerror(saved));
    }
    return 0;
}

/* Removes path: a file or link, or a directory with everything in it (links are
 * removed, not followed). Returns -1 with errno set when something stays. */
static int ckpt_remove(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int rc = 0;
    const struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        char child[CKPT_PATH_MAX];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) >= (int)sizeof child) {
            errno = ENAMETOOLONG;
            rc = -1;
        } else {
            rc = ckpt_remove(child);
        }
    }
    int saved = errno;
    closedir(d);
    errno = saved;
    return rc == 0 ? rmdir(path) : -1;
}

static int ckpt_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* dir without trailing slashes, so that "<dir>.tmp-<pid>" is a sibling of dir. */
static int ckpt_base(const char *dir, char *out, pt_err *err)
{
    size_t len = dir ? strlen(dir) : 0;
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len == 0 || len >= CKPT_PATH_MAX)
        return pt_err_set(err, "checkpoint directory '%s': empty or too long", dir ? dir : "");
    memcpy(out, dir, len);
    out[len] = '\0';
    return 0;
}

/* "<base>.<what>-<pid>" */
static int ckpt_sibling(const char *base, const char *what, char *out, pt_err *err)
{
    if (snprintf(out, CKPT_PATH_MAX, "%s.%s-%ld", base, what, (long)getpid()) >= CKPT_PATH_MAX)
        return pt_err_set(err, "checkpoint directory '%s': path too long", base);
    return 0;
}

/* ---- meta.json: writing ------------------------------------------------------------ */

/* A config hash is 1 to 16 hexadecimal digits. */
static int ckpt_hash_ok(const char *h)
{
    size_t len = strnlen(h, 17);
    for (size_t i = 0; i < len; i++)
        if (!isxdigit((unsigned char)h[i]))
            return 0;
    return len >= 1 && len <= 16;
}

static int ckpt_meta_check(const char *path, const pt_ckpt_meta *m, pt_err *err)
{
    if (memchr(m->layout, '\0', sizeof m->layout) == NULL || m->layout[0] == '\0')
        return pt_err_set(err, "%s: field 'layout': empty or unterminated", path);
    if (memchr(m->config_hash, '\0', sizeof m->config_hash) == NULL ||
        !ckpt_hash_ok(m->config_hash))
        return pt_err_set(err, "%s: field 'config_hash': expected 1 to 16 hexadecimal digits",
                          path);
    if (m->step < 0 || m->data_pos < 0)
        return pt_err_set(err, "%s: field 'step' = %" PRId64 ", 'data_pos' = %" PRId64 ": "
                          "expected values >= 0", path, m->step, m->data_pos);
    if (m->world < 1)
        return pt_err_set(err, "%s: field 'world' = %" PRId64 ": expected at least 1", path,
                          m->world);
    return 0;
}

/* The current UTC time as ISO 8601, "2024-05-20T12:34:56Z". */
static void ckpt_now(char *buf, size_t cap)
{
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "unknown");
}

int pt_ckpt_meta_write(const char *dir, const pt_ckpt_meta *m, pt_err *err)
{
    char path[CKPT_PATH_MAX], created[32];
    if (snprintf(path, sizeof path, "%s/meta.json", dir) >= (int)sizeof path)
        return pt_err_set(err, "%s: path too long", dir);
    if (ckpt_meta_check(path, m, err) != 0)
        return -1;
    ckpt_now(created, sizeof created);
    json_t *o = json_pack("{s:i, s:s, s:I, s:I, s:s, s:I, s:s}", "format_version",
                          CKPT_FORMAT_VERSION, "layout", m->layout, "step", (json_int_t)m->step,
                          "data_pos", (json_int_t)m->data_pos, "config_hash", m->config_hash,
                          "world", (json_int_t)m->world, "created_at", created);
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!text)
        return pt_err_set(err, "%s: cannot format (layout not valid UTF-8?)", path);
    size_t len = strlen(text);
    char *line = realloc(text, len + 2);
    if (!line) {
        free(text);
        return pt_err_set(err, "%s: out of memory", path);
    }
    memcpy(line + len, "\n", 2);
    int rc = ckpt_write_atomic(path, line, err);
    free(line);
    return rc;
}

/* ---- meta.json: reading ------------------------------------------------------------ */

static const char *ckpt_type(const json_t *v)
{
    static const char *const names[] = {"an object", "an array", "a string", "an integer",
                                        "a real", "true", "false", "null"};
    return names[json_typeof(v)];
}

static const json_t *ckpt_field(const char *path, const json_t *o, const char *name,
                                pt_err *err)
{
    const json_t *v = json_object_get(o, name);
    if (!v)
        pt_err_set(err, "%s: missing field '%s'", path, name);
    return v;
}

static int ckpt_get_int(const char *path, const json_t *o, const char *name, int64_t min,
                        int64_t *out, pt_err *err)
{
    const json_t *v = ckpt_field(path, o, name, err);
    if (!v)
        return -1;
    if (!json_is_integer(v))
        return pt_err_set(err, "%s: field '%s': expected an integer, got %s", path, name,
                          ckpt_type(v));
    if (json_integer_value(v) < min)
        return pt_err_set(err, "%s: field '%s' = %" JSON_INTEGER_FORMAT ": expected at least "
                          "%" PRId64, path, name, json_integer_value(v), min);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int ckpt_get_str(const char *path, const json_t *o, const char *name, char *out,
                        size_t cap, pt_err *err)
{
    const json_t *v = ckpt_field(path, o, name, err);
    if (!v)
        return -1;
    if (!json_is_string(v))
        return pt_err_set(err, "%s: field '%s': expected a string, got %s", path, name,
                          ckpt_type(v));
    if (json_string_length(v) >= cap || json_string_length(v) == 0)
        return pt_err_set(err, "%s: field '%s': empty or longer than %zu bytes", path, name,
                          cap - 1);
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

/* Every field is one this format has; a misspelt one would otherwise go unnoticed. */
static int ckpt_known_fields(const char *path, const json_t *o, pt_err *err)
{
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        size_t i = 0, n = sizeof ckpt_fields / sizeof ckpt_fields[0];
        while (i < n && strcmp(key, ckpt_fields[i]) != 0)
            i++;
        if (i == n)
            return pt_err_set(err, "%s: unknown field '%.64s' (expected format_version, "
                              "layout, step, data_pos, config_hash, world, created_at)",
                              path, key);
    }
    return 0;
}

static int ckpt_meta_parse(const char *path, const json_t *o, pt_ckpt_meta *m, pt_err *err)
{
    int64_t version;
    char created[64];
    if (!json_is_object(o))
        return pt_err_set(err, "%s: expected a JSON object at the top level, got %s", path,
                          ckpt_type(o));
    if (ckpt_get_int(path, o, "format_version", 0, &version, err) != 0)
        return -1;
    if (version != CKPT_FORMAT_VERSION)
        return pt_err_set(err, "%s: format_version %" PRId64 " is not the one this build "
                          "reads (%d)", path, version, CKPT_FORMAT_VERSION);
    m->format_version = (int)version;
    if (ckpt_known_fields(path, o, err) != 0 ||
        ckpt_get_str(path, o, "layout", m->layout, sizeof m->layout, err) != 0 ||
        ckpt_get_int(path, o, "step", 0, &m->step, err) != 0 ||
        ckpt_get_int(path, o, "data_pos", 0, &m->data_pos, err) != 0 ||
        ckpt_get_str(path, o, "config_hash", m->config_hash, sizeof m->config_hash, err) != 0 ||
        ckpt_get_int(path, o, "world", 1, &m->world, err) != 0 ||
        ckpt_get_str(path, o, "created_at", created, sizeof created, err) != 0)
        return -1;
    if (!ckpt_hash_ok(m->config_hash))
        return pt_err_set(err, "%s: field 'config_hash' = \"%s\": expected hexadecimal digits",
                          path, m->config_hash);
    return 0;
}

int pt_ckpt_meta_read(const char *dir, pt_ckpt_meta *m, pt_err *err)
{
    char path[CKPT_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/meta.json", dir) >= (int)sizeof path)
        return pt_err_set(err, "%s: path too long", dir);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    json_error_t je;
    json_t *o = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
    fclose(fp);
    if (!o)
        return pt_err_set(err, "%s:%d:%d: %s", path, je.line, je.column, je.text);
    memset(m, 0, sizeof *m);
    int rc = ckpt_meta_parse(path, o, m, err);
    json_decref(o);
    return rc;
}

/* ---- Replacing a checkpoint -------------------------------------------------------- */

int pt_ckpt_begin(const char *dir, char *tmp, size_t n, pt_err *err)
{
    char base[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    if (ckpt_base(dir, base, err) != 0 || ckpt_sibling(base, "tmp", path, err) != 0)
        return -1;
    if (strlen(path) >= n)
        return pt_err_set(err, "%s: buffer of %zu bytes too small for the path", path, n);
    if (ckpt_remove(path) != 0)
        return pt_err_set(err, "cannot remove the stale '%s': %s", path, strerror(errno));
    if (mkdir(path, 0777) != 0)
        return pt_err_set(err, "cannot create '%s': %s", path, strerror(errno));
    memcpy(tmp, path, strlen(path) + 1);
    return 0;
}

/* Puts the new checkpoint in place; the old one, moved aside to `old`, comes back when
 * that fails. */
static int ckpt_swap(const char *tmp, const char *base, const char *old, pt_err *err)
{
    int had_old = ckpt_exists(base);
    if (had_old && ckpt_remove(old) != 0)
        return pt_err_set(err, "cannot remove the stale '%s': %s", old, strerror(errno));
    if (had_old && rename(base, old) != 0)
        return pt_err_set(err, "cannot move '%s' aside to '%s': %s", base, old,
                          strerror(errno));
    if (rename(tmp, base) != 0) {
        int saved = errno;
        if (had_old && rename(old, base) != 0)
            return pt_err_set(err, "cannot rename '%s' to '%s': %s; the previous checkpoint "
                              "is in '%s'", tmp, base, strerror(saved), old);
        return pt_err_set(err, "cannot rename '%s' to '%s': %s", tmp, base, strerror(saved));
    }
    return 0;
}

int pt_ckpt_commit(const char *tmp, const char *dir, pt_err *err)
{
    char base[CKPT_PATH_MAX], old[CKPT_PATH_MAX], meta[CKPT_PATH_MAX];
    struct stat st;
    if (ckpt_base(dir, base, err) != 0)
        return -1;
    if (snprintf(meta, sizeof meta, "%s/meta.json", tmp) >= (int)sizeof meta)
        return pt_err_set(err, "%s: path too long", tmp);
    if (stat(meta, &st) != 0 || !S_ISREG(st.st_mode))
        return pt_err_set(err, "refusing to commit '%s' as '%s': it has no meta.json, so it "
                          "is not a complete checkpoint", tmp, base);
    if (ckpt_sibling(base, "old", old, err) != 0 || ckpt_swap(tmp, base, old, err) != 0)
        return -1;
    /* The new checkpoint is in place: failing to remove the old one leaves garbage
     * under a name nothing reads, not an error for training. */
    ckpt_remove(old);
    return 0;
}

void pt_ckpt_abort(const char *tmp)
{
    if (tmp && tmp[0])
        ckpt_remove(tmp);
}
