/*
 * Checkpoint directories: meta.json (what wrote the checkpoint and where training
 * stands), next to the safetensors files of parameters and per-rank optimizer state
 * that the trainer writes with pt_st_write (safetensors.c). This file owns meta.json
 * and the way a checkpoint replaces the previous ones: everything is written into
 * <dir>.tmp-<pid> and synced; only when that is complete does commit move the kept
 * ones a place down (<dir>.<keep-1> aside to <dir>.old-<pid>, ..., <dir> to <dir>.1),
 * rename the new one to <dir>, sync the parent folder and remove the one moved aside.
 * Each move is one rename, so a kill at any moment leaves every complete checkpoint
 * under one of the names pt_ckpt_find searches (<dir>, <dir>.<N>, <dir>.tmp-<pid>,
 * <dir>.old-<pid>), never a half-written one under <dir>: meta.json is written last
 * and removed first.
 *
 * Nothing that is not ours is moved or removed: a folder is ours when it holds only a
 * checkpoint's file names and (for <dir> and the kept copies) a meta.json this build
 * reads, or nothing at all. The next commit removes the orphaned temporaries of killed
 * runs, when they are ours, their process is gone and they are not newer.
 */
#include "runtime.h"
#include "specjson.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
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

/* Writes text to path through a temporary file renamed when complete (the project's
 * one atomic writer, planner/specjson.c). */
static int ckpt_write_atomic(const char *path, const char *text, pt_err *err)
{
    return pt_file_write_atomic(path, text, strlen(text), err);
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

/* dir without trailing slashes, so that "<dir>.tmp-<pid>" is a sibling of dir; short
 * enough for the siblings' suffixes and for "/meta.json". */
static int ckpt_base(const char *dir, char *out, pt_err *err)
{
    size_t len = dir ? strlen(dir) : 0;
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len == 0 || len >= CKPT_PATH_MAX - 64)
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

/* ---- What is ours --------------------------------------------------------------------- */

/* s is one or more decimal digits. */
static int ckpt_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

/* name = prefix + digits + suffix */
static int ckpt_numbered(const char *name, const char *prefix, const char *suffix)
{
    size_t p = strlen(prefix), n = strlen(name), q = strlen(suffix);
    if (n <= p + q || strncmp(name, prefix, p) != 0 || strcmp(name + n - q, suffix) != 0)
        return 0;
    for (size_t i = p; i < n - q; i++)
        if (!isdigit((unsigned char)name[i]))
            return 0;
    return 1;
}

/* A file name a checkpoint holds: meta.json, model.safetensors, model_rank<N>.safetensors,
 * optim_rank<N>.safetensors (the names runtime/trainer_ckpt.c's state_paths gives), or one of
 * those with the ".tmp-<pid>" of a file being written. */
static int ckpt_our_file(const char *name)
{
    char plain[256];
    const char *t = strstr(name, ".tmp-");
    size_t len = t && ckpt_digits(t + 5) ? (size_t)(t - name) : strlen(name);
    if (len >= sizeof plain)
        return 0;
    memcpy(plain, name, len);
    plain[len] = '\0';
    return strcmp(plain, "meta.json") == 0 || strcmp(plain, "model.safetensors") == 0 ||
           ckpt_numbered(plain, "model_rank", ".safetensors") ||
           ckpt_numbered(plain, "optim_rank", ".safetensors");
}

/* Whether path is a folder (not a link) that holds only a checkpoint's files; *files
 * is how many it holds. */
static int ckpt_only_ours(const char *path, int *files)
{
    struct stat st;
    *files = 0;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0;
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int ours = 1;
    const struct dirent *e;
    while (ours && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        ours = ckpt_our_file(e->d_name);
        ++*files;
    }
    closedir(d);
    return ours;
}

/* A checkpoint folder ptrun wrote: only a checkpoint's files, and a meta.json this
 * build reads; or an empty folder, which holds nothing to lose. */
static int ckpt_is_ours(const char *path)
{
    pt_ckpt_meta m;
    pt_err ignored;
    int files;
    if (!ckpt_only_ours(path, &files))
        return 0;
    return files == 0 || pt_ckpt_meta_read(path, &m, &ignored) == 0;
}

/* ---- Durability ------------------------------------------------------------------------ */

/* Flushes a folder's entries (names created, renamed or removed in it) to disk. File
 * systems that cannot sync a folder (EINVAL) keep their entries anyway. */
static int ckpt_sync_dir(const char *path, pt_err *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return pt_err_set(err, "cannot open folder '%s' to sync it: %s", path, strerror(errno));
    int rc = fsync(fd) == 0 || errno == EINVAL || errno == ENOTSUP ? 0 : -1;
    int saved = errno;
    close(fd);
    return rc ? pt_err_set(err, "cannot sync folder '%s': %s", path, strerror(saved)) : 0;
}

/* The folder that holds base ("." for a bare name) and base's own name in it. */
static void ckpt_split(const char *base, char *parent, const char **name)
{
    const char *slash = strrchr(base, '/');
    if (!slash) {
        strcpy(parent, ".");
        *name = base;
    } else if (slash == base) {
        strcpy(parent, "/");
        *name = base + 1;
    } else {
        memcpy(parent, base, (size_t)(slash - base));
        parent[slash - base] = '\0';
        *name = slash + 1;
    }
}

int pt_path_writable(const char *path, pt_err *err)
{
    char parent[CKPT_PATH_MAX], probe[CKPT_PATH_MAX];
    const char *name;
    size_t len = path ? strlen(path) : 0;
    while (len > 1 && path[len - 1] == '/')
        len--;
    if (len == 0 || len >= CKPT_PATH_MAX)
        return pt_err_set(err, "cannot write '%s': empty or too long a path", path ? path : "");
    char base[CKPT_PATH_MAX];
    memcpy(base, path, len);
    base[len] = '\0';
    ckpt_split(base, parent, &name);
    if (snprintf(probe, sizeof probe, "%s/.%s.probe-%ld", parent, name, (long)getpid()) >=
        (int)sizeof probe)
        return pt_err_set(err, "cannot write '%s': path too long", path);
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return pt_err_set(err, "cannot write '%s': its folder '%s': %s", path, parent,
                          strerror(errno));
    close(fd);
    unlink(probe);
    return 0;
}

/* ---- Siblings: the kept copies and the temporaries of commits --------------------------- */

enum { SIB_KEPT, SIB_TMP, SIB_OLD };

/* Calls visit for every sibling of base in its folder: <base>.<N> (kept copies,
 * n = N), <base>.tmp-<pid> and <base>.old-<pid> (n = pid). Stops when visit returns
 * non-zero and returns that. */
static int ckpt_siblings(const char *base,
                         int (*visit)(const char *path, int kind, long n, void *ctx), void *ctx)
{
    char parent[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    const char *name;
    ckpt_split(base, parent, &name);
    size_t len = strlen(name);
    DIR *d = opendir(parent);
    if (!d)
        return 0;
    int rc = 0;
    const struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        const char *rest = e->d_name + len;
        if (strncmp(e->d_name, name, len) != 0 || rest[0] != '.')
            continue;
        int kind = ckpt_digits(rest + 1)                         ? SIB_KEPT
                   : strncmp(rest, ".tmp-", 5) == 0 && ckpt_digits(rest + 5) ? SIB_TMP
                   : strncmp(rest, ".old-", 5) == 0 && ckpt_digits(rest + 5) ? SIB_OLD
                                                                              : -1;
        /* named as base is ("ck.tmp-1" beside "ck", not "./ck.tmp-1") */
        if (kind < 0 || snprintf(path, sizeof path, "%.*s%s", (int)(name - base), base,
                                 e->d_name) >= (int)sizeof path)
            continue;
        rc = visit(path, kind, strtol(rest + (kind == SIB_KEPT ? 1 : 5), NULL, 10), ctx);
    }
    closedir(d);
    return rc;
}

/* ---- Finding the newest checkpoint ------------------------------------------------------ */

typedef struct {
    const char *hash;         /* preferred config hash, or NULL */
    int64_t below;            /* only steps below this; < 0: any */
    const char *skip;         /* a folder not to consider (however it is named), or NULL */
    int orphans_only;         /* only <base>.tmp-* and <base>.old-* */
    int found, found_match;
    char path[CKPT_PATH_MAX];
    pt_ckpt_meta meta;
} ckpt_search;

/* Takes the checkpoint at path when it is complete (has a meta.json this build reads)
 * and newer than the best so far; one of the preferred config hash beats any other. */
static void ckpt_consider(ckpt_search *s, const char *path)
{
    pt_ckpt_meta m;
    pt_err ignored;
    if ((s->skip && strcmp(path, s->skip) == 0) || pt_ckpt_meta_read(path, &m, &ignored) != 0 ||
        (s->below >= 0 && m.step >= s->below))
        return;
    struct stat a, b;
    if (s->skip && stat(s->skip, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        return;
    int match = !s->hash || strcmp(m.config_hash, s->hash) == 0;
    if (s->found && (s->found_match > match ||
                     (s->found_match == match && m.step <= s->meta.step)))
        return;
    s->found = 1;
    s->found_match = match;
    s->meta = m;
    snprintf(s->path, sizeof s->path, "%s", path);
}

static int ckpt_consider_sibling(const char *path, int kind, long n, void *ctx)
{
    ckpt_search *s = ctx;
    (void)n;
    if (!s->orphans_only || kind != SIB_KEPT)
        ckpt_consider(s, path);
    return 0;
}

int pt_ckpt_find(const char *dir, const char *config_hash, int64_t below_step, char *found,
                 size_t n, pt_ckpt_meta *m, pt_err *err)
{
    char base[CKPT_PATH_MAX];
    if (ckpt_base(dir, base, err) != 0)
        return -1;
    ckpt_search s = {.hash = config_hash, .below = below_step};
    ckpt_consider(&s, base);
    ckpt_siblings(base, ckpt_consider_sibling, &s);
    if (!s.found) {
        if (below_step >= 0)
            return pt_err_set(err, "%s: no complete checkpoint from before step %" PRId64
                              " (looked at it, %s.<N>, %s.tmp-* and %s.old-*)", base,
                              below_step, base, base, base);
        /* the reason the checkpoint itself cannot be read says most */
        if (pt_ckpt_meta_read(base, m, err) != 0)
            return -1;
        return pt_err_set(err, "%s: no complete checkpoint", base);
    }
    if (strlen(s.path) >= n)
        return pt_err_set(err, "%s: buffer of %zu bytes too small for the path", s.path, n);
    memcpy(found, s.path, strlen(s.path) + 1);
    *m = s.meta;
    return 0;
}

/* ---- Replacing a checkpoint -------------------------------------------------------- */

/* Removes a checkpoint folder of ours: meta.json first, so that one killed half-way
 * through is never taken for complete. */
static int ckpt_remove_ours(const char *path)
{
    char meta[CKPT_PATH_MAX];
    if (snprintf(meta, sizeof meta, "%s/meta.json", path) < (int)sizeof meta &&
        unlink(meta) != 0 && errno != ENOENT)
        return -1;
    return ckpt_remove(path);
}

int pt_ckpt_check_target(const char *dir, int keep, pt_err *err)
{
    char base[CKPT_PATH_MAX], slot[CKPT_PATH_MAX];
    if (ckpt_base(dir, base, err) != 0)
        return -1;
    for (int i = 0; i < keep || i == 0; i++) {
        if (i == 0)
            snprintf(slot, sizeof slot, "%s", base);
        else if (snprintf(slot, sizeof slot, "%s.%d", base, i) >= (int)sizeof slot)
            return pt_err_set(err, "checkpoint directory '%s': path too long", base);
        if (ckpt_exists(slot) && !ckpt_is_ours(slot))
            return pt_err_set(err, "checkpoint directory '%s' exists and is not a checkpoint "
                              "written by ptrun (no meta.json of this format, or other files "
                              "in it): refusing to replace it; choose another --checkpoint "
                              "or move it away", slot);
    }
    return pt_path_writable(base, err);
}

int pt_ckpt_begin(const char *dir, char *tmp, size_t n, pt_err *err)
{
    char base[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    int files;
    if (ckpt_base(dir, base, err) != 0 || ckpt_sibling(base, "tmp", path, err) != 0)
        return -1;
    if (strlen(path) >= n)
        return pt_err_set(err, "%s: buffer of %zu bytes too small for the path", path, n);
    /* one of an earlier process with our pid: removed when it holds only our files */
    if (ckpt_exists(path) && !ckpt_only_ours(path, &files))
        return pt_err_set(err, "'%s' exists and is not a checkpoint's temporary folder: "
                          "refusing to remove it", path);
    if (ckpt_remove_ours(path) != 0)
        return pt_err_set(err, "cannot remove the stale '%s': %s", path, strerror(errno));
    if (mkdir(path, 0777) != 0)
        return pt_err_set(err, "cannot create '%s': %s", path, strerror(errno));
    memcpy(tmp, path, strlen(path) + 1);
    return 0;
}

/* "<base>.<i>" for i >= 1, base itself for 0. */
static void ckpt_slot(const char *base, int i, char *out)
{
    /* base is short enough for any suffix (ckpt_base) */
    if (snprintf(out, CKPT_PATH_MAX, i == 0 ? "%s" : "%s.%d", base, i) >= CKPT_PATH_MAX)
        out[0] = '\0';
}

/* Where rotation moves slot i: the next slot, or `old` for the last of the keep. */
static void ckpt_slot_next(const char *base, int i, int keep, const char *old, char *out)
{
    if (i == keep - 1)
        snprintf(out, CKPT_PATH_MAX, "%s", old);
    else
        ckpt_slot(base, i + 1, out);
}

/* Moves the checkpoints in the slots <base>, <base>.1, ... one place down to make room
 * for a new <base>, the oldest to `old` (removed after the commit). Every step is one
 * rename, so a kill at any point leaves each complete checkpoint under a name
 * pt_ckpt_find looks at. */
static int ckpt_rotate(const char *base, int keep, const char *old, pt_err *err)
{
    char from[CKPT_PATH_MAX], to[CKPT_PATH_MAX];
    for (int i = 0; i < keep; i++) {
        ckpt_slot(base, i, from);
        if (ckpt_exists(from) && !ckpt_is_ours(from))
            return pt_err_set(err, "'%s' exists and is not a checkpoint written by ptrun: "
                              "refusing to replace it", from);
    }
    if (ckpt_exists(old) && ckpt_remove_ours(old) != 0)
        return pt_err_set(err, "cannot remove the stale '%s': %s", old, strerror(errno));
    for (int i = keep - 1; i >= 0; i--) {
        ckpt_slot(base, i, from);
        ckpt_slot_next(base, i, keep, old, to);
        if (ckpt_exists(from) && rename(from, to) != 0)
            return pt_err_set(err, "cannot move '%s' aside to '%s': %s", from, to,
                              strerror(errno));
    }
    return 0;
}

/* Where a commit was killed between its renames, no <base> exists: the newest complete
 * temporary of that commit becomes <base> again before the next rotation, so that it is
 * kept rather than taken for an orphan. */
static int ckpt_recover(const char *base, const char *tmp, pt_err *err)
{
    if (ckpt_exists(base))
        return 0;
    ckpt_search s = {.below = -1, .skip = tmp, .orphans_only = 1};
    ckpt_siblings(base, ckpt_consider_sibling, &s);
    if (s.found && ckpt_is_ours(s.path) && rename(s.path, base) != 0)
        return pt_err_set(err, "cannot move '%s' back to '%s': %s", s.path, base,
                          strerror(errno));
    return 0;
}

typedef struct {
    int64_t step;             /* of the checkpoint just committed */
} ckpt_sweep;

/* Removes an orphan of ours: <base>.tmp-<pid> or <base>.old-<pid> of a process that is
 * gone, holding only a checkpoint's files, and either incomplete or not newer than the
 * checkpoint just committed. Anything else is left alone. */
static int ckpt_sweep_one(const char *path, int kind, long pid, void *ctx)
{
    const ckpt_sweep *w = ctx;
    pt_ckpt_meta m;
    pt_err ignored;
    int files;
    if (kind == SIB_KEPT || !ckpt_only_ours(path, &files))
        return 0;
    if (pid != (long)getpid() && pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM))
        return 0; /* a live process's, perhaps a run writing the same checkpoint */
    if (pt_ckpt_meta_read(path, &m, &ignored) == 0 && m.step > w->step)
        return 0;
    ckpt_remove_ours(path);
    return 0;
}

/* Puts the new checkpoint in place; the old ones, rotated, come back when that fails. */
static int ckpt_swap(const char *tmp, const char *base, int keep, const char *old,
                     pt_err *err)
{
    if (ckpt_recover(base, tmp, err) != 0 || ckpt_rotate(base, keep, old, err) != 0)
        return -1;
    if (rename(tmp, base) != 0) {
        int saved = errno;
        char from[CKPT_PATH_MAX], to[CKPT_PATH_MAX];
        for (int i = 0; i < keep; i++) { /* back up the slots again */
            ckpt_slot(base, i, to);
            ckpt_slot_next(base, i, keep, old, from);
            if (ckpt_exists(from) && rename(from, to) != 0)
                return pt_err_set(err, "cannot rename '%s' to '%s': %s; the previous "
                                  "checkpoint is in '%s'", tmp, base, strerror(saved), from);
        }
        return pt_err_set(err, "cannot rename '%s' to '%s': %s", tmp, base, strerror(saved));
    }
    return 0;
}

int pt_ckpt_commit(const char *tmp, const char *dir, int keep, pt_err *err)
{
    char base[CKPT_PATH_MAX], old[CKPT_PATH_MAX], meta[CKPT_PATH_MAX], parent[CKPT_PATH_MAX];
    const char *name;
    pt_ckpt_meta m;
    if (ckpt_base(dir, base, err) != 0)
        return -1;
    if (keep < 1)
        return pt_err_set(err, "%s: keep %d checkpoints? at least 1", base, keep);
    if (snprintf(meta, sizeof meta, "%s/meta.json", tmp) >= (int)sizeof meta)
        return pt_err_set(err, "%s: path too long", tmp);
    if (pt_ckpt_meta_read(tmp, &m, err) != 0)
        return pt_err_set(err, "refusing to commit '%s' as '%s': it has no meta.json, so it "
                          "is not a complete checkpoint", tmp, base);
    ckpt_split(base, parent, &name);
    /* the files' data were synced as they were written; now their names */
    if (ckpt_sync_dir(tmp, err) != 0 || ckpt_sibling(base, "old", old, err) != 0 ||
        ckpt_swap(tmp, base, keep, old, err) != 0)
        return -1;
    int rc = ckpt_sync_dir(parent, err);
    /* The new checkpoint is in place: failing to remove the old one or an orphan leaves
     * garbage under a name nothing reads, not an error for training. */
    ckpt_remove_ours(old);
    ckpt_sweep w = {.step = m.step};
    ckpt_siblings(base, ckpt_sweep_one, &w);
    return rc;
}

void pt_ckpt_abort(const char *tmp)
{
    int files;
    if (!tmp || !tmp[0] || !ckpt_only_ours(tmp, &files))
        return;
    const char *t = strrchr(tmp, '.');
    if ((t && strncmp(t, ".tmp-", 5) == 0 && ckpt_digits(t + 5)) || ckpt_is_ours(tmp))
        ckpt_remove_ours(tmp);
}
