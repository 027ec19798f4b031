/*
 * Checkpoint directories, the Megatron-LM way (megatron/training/checkpointing.py: one
 * iter_NNNNNNN folder per saved iteration, and latest_checkpointed_iteration.txt, the
 * tracker, written last): under the --checkpoint folder DIR, one folder per step,
 * DIR/step_NNNNNNNN, holding meta.json (what wrote it, the model, the training
 * settings, where training stands) beside the safetensors files of whole tensors the
 * trainer writes (trainer_ckpt.c), and DIR/latest_checkpointed_iteration.txt naming the
 * newest step.
 *
 * A step is written into DIR/step_N.tmp-<pid> and synced; commit renames it to
 * DIR/step_N (a checkpoint of the same step already there is moved aside to
 * step_N.old-<pid> first and removed after), syncs DIR, then rewrites the tracker
 * (atomically) and removes the steps beyond --keep. Each move is one rename and
 * meta.json is written last and removed first, so a kill at any moment leaves every
 * complete checkpoint where pt_ckpt_find looks, never a half-written one under a
 * step_N name. pt_ckpt_find trusts the tracker when the step it names is complete and
 * otherwise takes the newest complete step folder.
 *
 * Nothing that is not ours is moved or removed: a step folder is ours when it holds
 * only a checkpoint's file names and a meta.json this build reads (or nothing), and
 * DIR is ours when it holds only the tracker, the lock file, step folders that are
 * ours and their temporaries. The next commit removes the orphaned temporaries of
 * killed runs, when they are ours, their process is gone and they are not newer.
 *
 * One run writes DIR at a time: it holds an flock on DIR/lock for its lifetime
 * (pt_ckpt_lock), which the kernel drops however the process ends. A newest step folder
 * whose meta.json is there but unreadable is reported, never passed over in silence
 * for an older one (pt_ckpt_find).
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
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The meta.json format this build writes and reads; a change of its fields bumps it.
 * 1: one folder per checkpoint, state per rank (ptrun before the whole-tensor format). */
enum { CKPT_FORMAT_VERSION = 2, CKPT_PATH_MAX = 4096 };

#define CKPT_TRACKER "latest_checkpointed_iteration.txt"
/* The lock file of the folder (pt_ckpt_lock). */
#define CKPT_LOCK "lock"

/* data_pos counts samples (sequences of the model's length, each a global sample index
 * of the sampler, runtime/data.c): the samples the steps that led to the checkpoint
 * read. Every step advances it by its global batch; a rollback leaves it where the
 * spike left it while the step goes back, so the batches of the steps it undid are
 * skipped, not read again; a resume under another global batch goes on from it. So it
 * is at least `step` (a step reads one sample at least) and at most this many samples
 * a step: the largest global batch four times over, which leaves room for the steps
 * rollbacks undid (three for every step kept, each of the largest batch). */
#define CKPT_STEP_SAMPLES_MAX (4 * PT_MAX_GLOBAL_BATCH)

static const char *const ckpt_fields[] = {
    "format_version", "step", "data_pos", "world", "layout", "config_hash", "plan_hash",
    "created_at", "model", "training", NULL};
static const char *const ckpt_training_fields[] = {
    "steps", "lr", "min_lr", "warmup_steps", "weight_decay", "grad_clip", "dropout", "seed",
    "data", "global_batch", "precision", "train_tokens", NULL};

/* ---- Files and directories --------------------------------------------------------- */

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

static int ckpt_is_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ckpt_is_file(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Whether process pid is gone (a pid of ours counts as gone: another process's files
 * with our pid are of one that ended before we started). */
static int ckpt_pid_gone(long pid)
{
    return pid == (long)getpid() || pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno != EPERM);
}

/* dir without trailing slashes; short enough for a step folder's name and its files. */
static int ckpt_base(const char *dir, char *out, pt_err *err)
{
    size_t len = dir ? strlen(dir) : 0;
    while (len > 1 && dir[len - 1] == '/')
        len--;
    if (len == 0 || len >= CKPT_PATH_MAX - 128)
        return pt_err_set(err, "checkpoint directory '%s': empty or too long", dir ? dir : "");
    memcpy(out, dir, len);
    out[len] = '\0';
    return 0;
}

/* "<base>/step_<8 digits>" and its sibling "<that>.<what>-<pid>" (what NULL: none);
 * base is short enough for them (ckpt_base), else out is "". */
static void ckpt_step_path(const char *base, int64_t step, const char *what, char *out)
{
    int n = what ? snprintf(out, CKPT_PATH_MAX, "%s/step_%08" PRId64 ".%s-%ld", base, step,
                            what, (long)getpid())
                 : snprintf(out, CKPT_PATH_MAX, "%s/step_%08" PRId64, base, step);
    if (n < 0 || n >= CKPT_PATH_MAX)
        out[0] = '\0';
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

/* Every number of the metadata against what it can mean. */
static int ckpt_meta_ranges(const char *path, const pt_ckpt_meta *m, pt_err *err)
{
    const pt_run_opts *r = &m->run;
    if (r->steps < 1 || r->steps > PT_MAX_STEPS)
        return pt_err_set(err, "%s: field 'training.steps' = %" PRId64 ": expected 1 to %" PRId64,
                          path, r->steps, PT_MAX_STEPS);
    if (m->step < 0 || m->step > r->steps)
        return pt_err_set(err, "%s: field 'step' = %" PRId64 ": expected 0 to the run's "
                          "training.steps, %" PRId64, path, m->step, r->steps);
    if (r->warmup_steps < 0 || r->warmup_steps > PT_MAX_STEPS)
        return pt_err_set(err, "%s: field 'training.warmup_steps' = %" PRId64 ": expected 0 to "
                          "%" PRId64, path, r->warmup_steps, PT_MAX_STEPS);
    if (m->global_batch < 1 || m->global_batch > PT_MAX_GLOBAL_BATCH)
        return pt_err_set(err, "%s: field 'training.global_batch' = %" PRId64 ": expected 1 to "
                          "%" PRId64, path, m->global_batch, PT_MAX_GLOBAL_BATCH);
    if (m->world < 1 || m->world > PT_MAX_WORLD)
        return pt_err_set(err, "%s: field 'world' = %" PRId64 ": expected 1 to %" PRId64, path,
                          m->world, (int64_t)PT_MAX_WORLD);
    if (m->train_tokens < 0)
        return pt_err_set(err, "%s: field 'training.train_tokens' = %" PRId64 ": expected a "
                          "count, at least 0", path, m->train_tokens);
    /* the ranges of a plan's settings */
    const double reals[] = {r->lr, r->min_lr, r->weight_decay, r->grad_clip, r->dropout};
    static const double most_real[] = {PT_MAX_LR, PT_MAX_LR, PT_MAX_LR, PT_MAX_GRAD_CLIP,
                                       PT_MAX_DROPOUT};
    static const char *const names[] = {"lr", "min_lr", "weight_decay", "grad_clip", "dropout"};
    for (int i = 0; i < 5; i++)
        if (!(reals[i] >= 0 && reals[i] <= most_real[i]))
            return pt_err_set(err, "%s: field 'training.%s' = %g: expected 0 to %g", path,
                              names[i], reals[i], most_real[i]);
    int64_t most;
    if (!pt_mul64(m->step, CKPT_STEP_SAMPLES_MAX, &most))
        most = INT64_MAX;
    if (m->data_pos < m->step)
        return pt_err_set(err, "%s: data_pos %" PRId64 " is below step %" PRId64 ": each step "
                          "reads one sample at least", path, m->data_pos, m->step);
    if (m->data_pos > most)
        return pt_err_set(err, "%s: data_pos %" PRId64 " is beyond what step %" PRId64 " can "
                          "have read (at most %" PRId64 ": %" PRId64 " samples a step, four "
                          "times the largest global batch)", path, m->data_pos, m->step, most,
                          CKPT_STEP_SAMPLES_MAX);
    return 0;
}

static int ckpt_meta_check(const char *path, const pt_ckpt_meta *m, pt_err *err)
{
    if (memchr(m->layout, '\0', sizeof m->layout) == NULL || m->layout[0] == '\0')
        return pt_err_set(err, "%s: field 'layout': empty or unterminated", path);
    if (memchr(m->config_hash, '\0', sizeof m->config_hash) == NULL ||
        !ckpt_hash_ok(m->config_hash))
        return pt_err_set(err, "%s: field 'config_hash': expected 1 to 16 hexadecimal digits",
                          path);
    if (memchr(m->plan_hash, '\0', sizeof m->plan_hash) == NULL || !ckpt_hash_ok(m->plan_hash))
        return pt_err_set(err, "%s: field 'plan_hash': expected 1 to 16 hexadecimal digits",
                          path);
    if (memchr(m->precision, '\0', sizeof m->precision) == NULL ||
        memchr(m->run.data, '\0', sizeof m->run.data) == NULL)
        return pt_err_set(err, "%s: field 'training': unterminated string", path);
    return ckpt_meta_ranges(path, m, err);
}

/* The current UTC time as ISO 8601, "2024-05-20T12:34:56Z". */
static void ckpt_now(char *buf, size_t cap)
{
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm) == NULL || strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, cap, "unknown");
}

static json_t *ckpt_training_json(const pt_ckpt_meta *m)
{
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)m->run.seed);
    return json_pack("{s:I, s:f, s:f, s:I, s:f, s:f, s:f, s:s, s:s, s:I, s:s, s:I}", "steps",
                     (json_int_t)m->run.steps, "lr", m->run.lr, "min_lr", m->run.min_lr,
                     "warmup_steps", (json_int_t)m->run.warmup_steps, "weight_decay",
                     m->run.weight_decay, "grad_clip", m->run.grad_clip, "dropout",
                     m->run.dropout, "seed", seed, "data", m->run.data, "global_batch",
                     (json_int_t)m->global_batch, "precision", m->precision, "train_tokens",
                     (json_int_t)m->train_tokens);
}

int pt_ckpt_meta_write(const char *dir, const pt_ckpt_meta *m, pt_err *err)
{
    char path[CKPT_PATH_MAX], created[32];
    if (snprintf(path, sizeof path, "%s/meta.json", dir) >= (int)sizeof path)
        return pt_err_set(err, "%s: path too long", dir);
    if (ckpt_meta_check(path, m, err) != 0)
        return -1;
    if (m->created_at[0] && memchr(m->created_at, '\0', sizeof m->created_at))
        snprintf(created, sizeof created, "%s", m->created_at);
    else
        ckpt_now(created, sizeof created);
    json_t *o = json_pack("{s:i, s:I, s:I, s:I, s:s, s:s, s:s, s:s}", "format_version",
                          CKPT_FORMAT_VERSION, "step", (json_int_t)m->step, "data_pos",
                          (json_int_t)m->data_pos, "world", (json_int_t)m->world, "layout",
                          m->layout, "config_hash", m->config_hash, "plan_hash", m->plan_hash,
                          "created_at", created);
    int bad = !o || pt_json_set(o, "model", pt_model_json_obj(&m->model)) ||
              pt_json_set(o, "training", ckpt_training_json(m));
    char *text = bad ? NULL : pt_json_dump(o);
    json_decref(o);
    if (!text)
        return pt_err_set(err, "%s: cannot format (a string not valid UTF-8?)", path);
    int rc = pt_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* ---- meta.json: reading ------------------------------------------------------------ */

static int ckpt_get_min(const pt_json_obj *o, const char *key, int64_t min, int64_t *out,
                        pt_err *err)
{
    if (pt_json_get_int(o, key, out, err))
        return -1;
    if (*out < min)
        return pt_err_set(err, "%s: field '%s' = %" PRId64 ": expected at least %" PRId64,
                          o->origin, key, *out, min);
    return 0;
}

static int ckpt_get_hash(const pt_json_obj *o, const char *key, char out[17], pt_err *err)
{
    char buf[64];
    if (pt_json_get_string(o, key, buf, sizeof buf, err))
        return -1;
    if (!ckpt_hash_ok(buf))
        return pt_err_set(err, "%s: field '%s' = \"%.20s\": expected 1 to 16 hexadecimal "
                          "digits", o->origin, key, buf);
    memcpy(out, buf, strlen(buf) + 1);
    return 0;
}

static int ckpt_training_read(const pt_json_obj *top, pt_ckpt_meta *m, pt_err *err)
{
    pt_json_obj t;
    char seed[32], *end;
    if (pt_json_get_object(top, "training", ckpt_training_fields, &t, err) ||
        ckpt_get_min(&t, "steps", 0, &m->run.steps, err) ||
        pt_json_get_real(&t, "lr", &m->run.lr, err) ||
        pt_json_get_real(&t, "min_lr", &m->run.min_lr, err) ||
        ckpt_get_min(&t, "warmup_steps", 0, &m->run.warmup_steps, err) ||
        pt_json_get_real(&t, "weight_decay", &m->run.weight_decay, err) ||
        pt_json_get_real(&t, "grad_clip", &m->run.grad_clip, err) ||
        pt_json_get_real(&t, "dropout", &m->run.dropout, err) ||
        pt_json_get_string(&t, "seed", seed, sizeof seed, err) ||
        pt_json_get_string(&t, "data", m->run.data, sizeof m->run.data, err) ||
        ckpt_get_min(&t, "global_batch", 1, &m->global_batch, err) ||
        pt_json_get_string(&t, "precision", m->precision, sizeof m->precision, err) ||
        ckpt_get_min(&t, "train_tokens", 0, &m->train_tokens, err))
        return -1;
    errno = 0;
    unsigned long long v = strtoull(seed, &end, 10);
    if (!isdigit((unsigned char)seed[0]) || *end || errno)
        return pt_err_set(err, "%s: field 'training.seed' = \"%s\": expected a decimal "
                          "unsigned 64-bit integer", top->origin, seed);
    m->run.seed = v;
    return 0;
}

int pt_ckpt_meta_read(const char *dir, pt_ckpt_meta *m, pt_err *err)
{
    char path[CKPT_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/meta.json", dir) >= (int)sizeof path)
        return pt_err_set(err, "%s: path too long", dir);
    char *text = pt_json_read_file(path, err);
    if (!text)
        return -1;
    pt_json_obj top, mo;
    json_t *root = pt_json_parse_object(text, path, &top, err);
    free(text);
    if (!root)
        return -1;
    memset(m, 0, sizeof *m);
    int64_t version = 0;
    int rc = pt_json_get_int(&top, "format_version", &version, err);
    if (rc == 0 && version != CKPT_FORMAT_VERSION)
        rc = pt_err_set(err, "%s: format_version %" PRId64 " is not the one this build reads "
                        "(%d)%s", path, version, CKPT_FORMAT_VERSION,
                        version == 1 ? ": a checkpoint of an older ptrun, which kept each "
                                       "rank's state in its own layout; it cannot be read "
                                       "into whole tensors"
                                     : "");
    m->format_version = (int)version;
    if (rc == 0)
        rc = pt_json_check_keys(&top, ckpt_fields, err) ||
             ckpt_get_min(&top, "step", 0, &m->step, err) ||
             ckpt_get_min(&top, "data_pos", 0, &m->data_pos, err) ||
             ckpt_get_min(&top, "world", 1, &m->world, err) ||
             pt_json_get_string(&top, "layout", m->layout, sizeof m->layout, err) ||
             ckpt_get_hash(&top, "config_hash", m->config_hash, err) ||
             ckpt_get_hash(&top, "plan_hash", m->plan_hash, err) ||
             pt_json_get_string(&top, "created_at", m->created_at, sizeof m->created_at, err) ||
             pt_json_get_object(&top, "model", NULL, &mo, err) ||
             pt_model_read_obj(&mo, &m->model, err) || ckpt_training_read(&top, m, err);
    if (rc == 0 && m->layout[0] == '\0')
        rc = pt_err_set(err, "%s: field 'layout' is empty", path);
    if (rc == 0)
        rc = ckpt_meta_ranges(path, m, err);
    json_decref(root);
    return rc ? -1 : 0;
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

/* name = prefix + digits + suffix; *value: the number (NULL: not wanted). */
static int ckpt_numbered(const char *name, const char *prefix, const char *suffix,
                         int64_t *value)
{
    size_t p = strlen(prefix), n = strlen(name), q = strlen(suffix);
    if (n <= p + q || n - p - q > 18 || strncmp(name, prefix, p) != 0 ||
        strcmp(name + n - q, suffix) != 0)
        return 0;
    int64_t v = 0;
    for (size_t i = p; i < n - q; i++) {
        if (!isdigit((unsigned char)name[i]))
            return 0;
        v = v * 10 + (name[i] - '0');
    }
    if (value)
        *value = v;
    return 1;
}

/* s is what follows ".tmp-" in the name of a file being written: the writer's pid,
 * optionally followed by "." and 6 letters or digits (pt_file_write_atomic names its
 * temporaries PATH.tmp-<pid>.<6 random alphanumerics>; earlier builds PATH.tmp-<pid>);
 * *pid: that pid (NULL: not wanted). */
static int ckpt_tmp_tail(const char *s, long *pid)
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    size_t digits = strspn(s, "0123456789");
    const char *rest = s + digits;
    if (digits == 0 || digits > 18 ||
        (*rest && (rest[0] != '.' || strlen(rest + 1) != 6 || strspn(rest + 1, alnum) != 6)))
        return 0;
    if (pid)
        *pid = strtol(s, NULL, 10);
    return 1;
}

/* "model-00001-of-00004.safetensors" (Hugging Face's shard names) for `kind`. */
static int ckpt_shard_name(const char *name, const char *kind)
{
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%s-", kind);
    const char *of = strstr(name, "-of-");
    if (!of || (size_t)(of - name) >= 64)
        return 0;
    char first[64];
    memcpy(first, name, (size_t)(of - name));
    first[of - name] = '\0';
    return ckpt_numbered(first, prefix, "", NULL) &&
           ckpt_numbered(of + 1, "of-", ".safetensors", NULL);
}

/* A file name a step folder holds (trainer_ckpt.c writes them): meta.json, the model's
 * and the optimizer's index and shards, PowerSGD's state files, or one of those with
 * the ".tmp-<pid>[.XXXXXX]" of a file being written (ckpt_tmp_tail). */
static int ckpt_our_file(const char *name)
{
    char plain[256];
    const char *t = strstr(name, ".tmp-");
    size_t len = t && ckpt_tmp_tail(t + 5, NULL) ? (size_t)(t - name) : strlen(name);
    if (len >= sizeof plain)
        return 0;
    memcpy(plain, name, len);
    plain[len] = '\0';
    return strcmp(plain, "meta.json") == 0 || strcmp(plain, "model.safetensors.index.json") == 0 ||
           strcmp(plain, "optim.safetensors.index.json") == 0 ||
           ckpt_shard_name(plain, "model") || ckpt_shard_name(plain, "optim") ||
           ckpt_shard_name(plain, "powersgd");
}

/* Whether path is a folder (not a link) that holds only a checkpoint's files; *files
 * is how many it holds. */
static int ckpt_only_ours(const char *path, int *files)
{
    *files = 0;
    if (!ckpt_is_dir(path))
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

/* A step folder ptrun wrote: only a checkpoint's files, and a meta.json this build
 * reads; or an empty folder, which holds nothing to lose. */
static int ckpt_is_ours(const char *path)
{
    pt_ckpt_meta m;
    pt_err ignored;
    int files;
    if (!ckpt_only_ours(path, &files))
        return 0;
    return files == 0 || pt_ckpt_meta_read(path, &m, &ignored) == 0;
}

/* What an entry of the checkpoint folder is. */
enum { ENT_OTHER, ENT_TRACKER, ENT_TRACKER_TMP, ENT_LOCK, ENT_STEP, ENT_TMP, ENT_OLD };

/* step_N, step_N.tmp-<pid>, step_N.old-<pid>, the tracker, its temporaries
 * (ckpt_tmp_tail) and the lock file; *step and *pid where they apply. */
static int ckpt_entry(const char *name, int64_t *step, long *pid)
{
    *step = -1;
    *pid = 0;
    size_t tl = strlen(CKPT_TRACKER);
    if (strcmp(name, CKPT_TRACKER) == 0)
        return ENT_TRACKER;
    if (strncmp(name, CKPT_TRACKER, tl) == 0 && strncmp(name + tl, ".tmp-", 5) == 0 &&
        ckpt_tmp_tail(name + tl + 5, pid))
        return ENT_TRACKER_TMP;
    if (strcmp(name, CKPT_LOCK) == 0)
        return ENT_LOCK;
    if (ckpt_numbered(name, "step_", "", step))
        return ENT_STEP;
    const char *dot = strchr(name, '.');
    if (!dot || (size_t)(dot - name) >= 64)
        return ENT_OTHER;
    char stem[64];
    memcpy(stem, name, (size_t)(dot - name));
    stem[dot - name] = '\0';
    if (!ckpt_numbered(stem, "step_", "", step) || strlen(dot) < 6 || !ckpt_digits(dot + 5))
        return ENT_OTHER;
    *pid = strtol(dot + 5, NULL, 10);
    return strncmp(dot, ".tmp-", 5) == 0 ? ENT_TMP : strncmp(dot, ".old-", 5) == 0 ? ENT_OLD
                                                                                  : ENT_OTHER;
}

/* Calls visit for every entry of the checkpoint folder base with its kind; stops when
 * visit returns non-zero and returns that. */
static int ckpt_entries(const char *base,
                        int (*visit)(const char *path, int kind, int64_t step, long pid,
                                     void *ctx),
                        void *ctx)
{
    DIR *d = opendir(base);
    if (!d)
        return 0;
    int rc = 0;
    const struct dirent *e;
    char path[CKPT_PATH_MAX];
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        int64_t step;
        long pid;
        int kind = ckpt_entry(e->d_name, &step, &pid);
        size_t nb = strlen(base), ne = strlen(e->d_name);
        if (nb + 1 + ne >= sizeof path) { /* a name too long for a path: none of ours */
            kind = ENT_OTHER;
            ne = sizeof path - nb - 2;
        }
        memcpy(path, base, nb);
        path[nb] = '/';
        memcpy(path + nb + 1, e->d_name, ne);
        path[nb + 1 + ne] = '\0';
        rc = visit(path, kind, step, pid, ctx);
    }
    closedir(d);
    return rc;
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

/* ---- One writer per folder -------------------------------------------------------------- */

/* "ptrun pid 1234 on host h" from the lock file's text ("pid 1234 host h\n", what
 * pt_ckpt_lock writes), or what stands in for it when the holder has not written it
 * yet. */
static void ckpt_holder(int fd, char *out, size_t cap)
{
    char text[320], host[256];
    long pid;
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    if (sscanf(text, "pid %ld host %255s", &pid, host) == 2)
        snprintf(out, cap, "ptrun pid %ld on host %s", pid, host);
    else
        snprintf(out, cap, "another process that has not written its pid yet");
}

int pt_ckpt_lock(const char *dir, pt_ckpt_hold *h, pt_err *err)
{
    char base[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 16];
    *h = (pt_ckpt_hold){.fd = -1};
    if (ckpt_base(dir, base, err) != 0)
        return -1;
    snprintf(h->dir, sizeof h->dir, "%s", base);
    snprintf(path, sizeof path, "%s/" CKPT_LOCK, base);
    /* again when the folder vanished in between: a run that made it, failed and removed
     * it (pt_ckpt_unlock) */
    for (int tries = 0; h->fd < 0 && tries < 3; tries++) {
        if (mkdir(base, 0777) == 0)
            h->made_dir = true;
        else if (errno != EEXIST)
            return pt_err_set(err, "cannot create checkpoint folder '%s': %s", base,
                              strerror(errno));
        /* O_NOFOLLOW: a link planted under the lock's name is not followed into a file
         * elsewhere; O_CLOEXEC: a program ptrun starts does not inherit the lock */
        h->fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (h->fd < 0 && errno != ENOENT)
            break;
    }
    if (h->fd < 0) {
        int e = errno;
        pt_ckpt_unlock(h); /* removes the folder when it made it */
        return pt_err_set(err, "cannot open the lock file '%s' of checkpoint folder '%s': %s",
                          path, base, strerror(e));
    }
    if (flock(h->fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[320];
        ckpt_holder(h->fd, holder, sizeof holder);
        h->made_dir = false; /* the lock is another's: nothing here is ours to remove */
        pt_ckpt_unlock(h);
        if (e == EWOULDBLOCK)
            return pt_err_set(err, "checkpoint folder '%s' is in use by %s (lock file "
                              "%s): one run writes a folder at a time; wait for that run to "
                              "end, or give this one another --checkpoint", base, holder, path);
        return pt_err_set(err, "cannot lock the lock file '%s' of checkpoint folder '%s': %s",
                          path, base, strerror(e));
    }
    /* ours until the process ends: the kernel drops the lock when it exits or is killed,
     * so a crashed run leaves a lock file that the next run simply takes. (On NFS the
     * lock is an fcntl lock, which closing any descriptor of the file drops: nothing
     * else in ptrun opens the lock file.) */
    char host[256] = "", text[320];
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "unknown");
    int n = snprintf(text, sizeof text, "pid %ld host %s\n", (long)getpid(), host);
    if (ftruncate(h->fd, 0) != 0 || pwrite(h->fd, text, (size_t)n, 0) != n) {
        int e = errno;
        pt_ckpt_unlock(h);
        return pt_err_set(err, "cannot write the lock file '%s': %s", path, strerror(e));
    }
    return 0;
}

/* Whether folder dir holds nothing but the lock file (or nothing at all). */
static int ckpt_only_lock(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int others = 0;
    const struct dirent *e;
    while ((e = readdir(d)) != NULL)
        others += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
                  strcmp(e->d_name, CKPT_LOCK) != 0;
    closedir(d);
    return others == 0;
}

void pt_ckpt_unlock(pt_ckpt_hold *h)
{
    if (!h)
        return;
    /* a folder this run made and wrote no checkpoint into goes again, its lock file
     * first and while the lock is held: a run that opened the file meanwhile is
     * refused, one that comes after makes both anew */
    if (h->made_dir && ckpt_only_lock(h->dir)) {
        char path[CKPT_PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/" CKPT_LOCK, h->dir);
        unlink(path);
        rmdir(h->dir);
    }
    if (h->fd >= 0)
        close(h->fd);
    *h = (pt_ckpt_hold){.fd = -1};
}

/* ---- Finding the newest checkpoint ------------------------------------------------------ */

typedef struct {
    const char *hash;         /* preferred config hash, or NULL */
    int64_t below;            /* only steps below this; < 0: any */
    int found, found_match;
    char path[CKPT_PATH_MAX];
    pt_ckpt_meta meta;
    int64_t damaged;          /* the newest step folder whose meta.json is there but
                                 cannot be read, -1: none */
    pt_err why;               /* and why */
} ckpt_search;

/* Takes the checkpoint at path when it is complete (has a meta.json this build reads)
 * and newer than the best so far; one of the preferred config hash beats any other.
 * `step` is the step its folder's name says (step_N; -1: a temporary, taken only when
 * complete): a step folder whose meta.json is there but unreadable, or says another
 * step, is damaged, and the newest damaged one is kept in s. */
static void ckpt_consider(ckpt_search *s, const char *path, int64_t step)
{
    pt_ckpt_meta m;
    pt_err why;
    char meta[CKPT_PATH_MAX + 16];
    if (step >= 0 && s->below >= 0 && step >= s->below)
        return;
    int rc = pt_ckpt_meta_read(path, &m, &why);
    if (rc == 0 && step >= 0 && m.step != step)
        rc = pt_err_set(&why, "%s/meta.json: field 'step' = %" PRId64 ", but its folder is "
                        "the checkpoint of step %" PRId64, path, m.step, step);
    snprintf(meta, sizeof meta, "%s/meta.json", path);
    if (rc != 0 && step > s->damaged && ckpt_exists(meta)) {
        s->damaged = step;
        s->why = why;
    }
    if (rc != 0 || (s->below >= 0 && m.step >= s->below))
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

static int ckpt_consider_entry(const char *path, int kind, int64_t step, long pid, void *ctx)
{
    (void)pid;
    if (kind == ENT_STEP || kind == ENT_TMP || kind == ENT_OLD)
        ckpt_consider(ctx, path, kind == ENT_STEP ? step : -1);
    return 0;
}

/* The error for a damaged newest step folder: its own error, the folder, and how to
 * resume from the one before it on purpose. Falling back to an older step without a
 * word would train on from there as if nothing were wrong, and hide the damage. */
static int ckpt_damaged(const ckpt_search *s, const char *base, pt_err *err)
{
    char older[CKPT_PATH_MAX + 160];
    if (s->found)
        snprintf(older, sizeof older, "or resume from an older one by naming it: --resume %s "
                 "(step %" PRId64 ")", s->path, s->meta.step);
    else
        snprintf(older, sizeof older, "there is no complete one before it");
    return pt_err_set(err, "%s; it is the newest checkpoint in '%s': repair or remove it, %s",
                      s->why.msg, base, older);
}

/* The step the tracker of base names, or -1. */
static int64_t ckpt_tracker_step(const char *base)
{
    char path[CKPT_PATH_MAX], text[32] = "";
    if (snprintf(path, sizeof path, "%s/" CKPT_TRACKER, base) >= (int)sizeof path)
        return -1;
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    while (n > 0 && isspace((unsigned char)text[n - 1]))
        text[--n] = '\0';
    return ckpt_digits(text) && n <= 18 ? strtoll(text, NULL, 10) : -1;
}

int pt_ckpt_find(const char *dir, const char *config_hash, int64_t below_step, char *found,
                 size_t n, pt_ckpt_meta *m, pt_err *err)
{
    char base[CKPT_PATH_MAX], meta[CKPT_PATH_MAX + 16];
    if (ckpt_base(dir, base, err) != 0)
        return -1;
    ckpt_search s = {.hash = config_hash, .below = below_step, .damaged = -1};
    snprintf(meta, sizeof meta, "%s/meta.json", base);
    if (ckpt_exists(meta)) { /* a step folder itself */
        if (pt_ckpt_meta_read(base, &s.meta, err) != 0)
            return -1;
        if (below_step >= 0 && s.meta.step >= below_step)
            return pt_err_set(err, "%s: step %" PRId64 " is not before step %" PRId64, base,
                              s.meta.step, below_step);
        s.found = 1;
        snprintf(s.path, sizeof s.path, "%s", base);
    } else if (!ckpt_is_dir(base)) {
        return pt_err_set(err, "cannot read checkpoint folder '%s': %s", base,
                          ckpt_exists(base) ? "not a folder" : strerror(ENOENT));
    } else {
        int64_t latest = ckpt_tracker_step(base);
        char path[CKPT_PATH_MAX];
        if (latest >= 0 && (below_step < 0 || latest < below_step)) {
            ckpt_step_path(base, latest, NULL, path);
            ckpt_consider(&s, path, latest);
        }
        /* the tracker's step when it is complete; else (a kill between the renames and
         * the tracker, a folder removed by hand) the newest complete one */
        if (!s.found || (s.hash && !s.found_match))
            ckpt_entries(base, ckpt_consider_entry, &s);
        if (s.damaged >= 0 && (!s.found || s.damaged > s.meta.step))
            return ckpt_damaged(&s, base, err);
    }
    if (!s.found) {
        if (below_step >= 0)
            return pt_err_set(err, "%s: no complete checkpoint from before step %" PRId64, base,
                              below_step);
        return pt_err_set(err, "%s: no complete checkpoint (no step_N folder with a meta.json "
                          "of format %d)", base, CKPT_FORMAT_VERSION);
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
    char meta[CKPT_PATH_MAX + 16];
    if (snprintf(meta, sizeof meta, "%s/meta.json", path) < (int)sizeof meta &&
        unlink(meta) != 0 && errno != ENOENT)
        return -1;
    return ckpt_remove(path);
}

typedef struct {
    char bad[CKPT_PATH_MAX];  /* the first entry that is not ours */
} ckpt_audit;

static int ckpt_audit_one(const char *path, int kind, int64_t step, long pid, void *ctx)
{
    ckpt_audit *a = ctx;
    int files;
    (void)step;
    (void)pid;
    int ours = kind == ENT_TRACKER || kind == ENT_TRACKER_TMP || kind == ENT_LOCK
                   ? ckpt_is_file(path)
               : kind == ENT_STEP || kind == ENT_TMP || kind == ENT_OLD
                   ? ckpt_only_ours(path, &files)
                   : 0;
    if (!ours)
        snprintf(a->bad, sizeof a->bad, "%s", path);
    return !ours;
}

int pt_ckpt_check_target(const char *dir, int keep, pt_err *err)
{
    char base[CKPT_PATH_MAX], meta[CKPT_PATH_MAX + 16];
    if (ckpt_base(dir, base, err) != 0)
        return -1;
    if (keep < 1)
        return pt_err_set(err, "%s: keep %d checkpoints? at least 1", base, keep);
    if (!ckpt_exists(base))
        return pt_path_writable(base, err);
    if (!ckpt_is_dir(base))
        return pt_err_set(err, "checkpoint directory '%s' exists and is not a folder", base);
    snprintf(meta, sizeof meta, "%s/meta.json", base);
    if (ckpt_exists(meta))
        return pt_err_set(err, "checkpoint directory '%s' holds a meta.json: it is one "
                          "checkpoint (of an older ptrun, or a step folder), not a folder of "
                          "them; give --checkpoint a folder of its own", base);
    ckpt_audit a = {""};
    if (ckpt_entries(base, ckpt_audit_one, &a) != 0)
        return pt_err_set(err, "checkpoint directory '%s' holds '%s', which is not a "
                          "checkpoint written by ptrun: refusing to write beside it; choose "
                          "another --checkpoint or move it away", base, a.bad);
    char probe[CKPT_PATH_MAX + 64];
    if (snprintf(probe, sizeof probe, "%s/" CKPT_TRACKER, base) >= (int)sizeof probe)
        return pt_err_set(err, "%s: path too long", base);
    return pt_path_writable(probe, err);
}

int pt_ckpt_begin(const char *dir, int64_t step, char *tmp, size_t n, pt_err *err)
{
    char base[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    int files;
    if (ckpt_base(dir, base, err) != 0)
        return -1;
    if (step < 0)
        return pt_err_set(err, "%s: checkpoint of step %" PRId64 "?", base, step);
    if (mkdir(base, 0777) != 0 && errno != EEXIST)
        return pt_err_set(err, "cannot create checkpoint folder '%s': %s", base, strerror(errno));
    ckpt_step_path(base, step, "tmp", path);
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

/* A complete step folder of ours, for pruning. */
typedef struct {
    int64_t step;
    char path[CKPT_PATH_MAX];
} ckpt_kept;

typedef struct {
    int64_t step;             /* of the checkpoint just committed */
    ckpt_kept *older;         /* complete step folders before it */
    int n_older, cap;
} ckpt_sweep;

/* Removes an orphan of ours (a step_N.tmp-<pid> or step_N.old-<pid> of a process that
 * is gone, holding only a checkpoint's files, and either incomplete or not newer than
 * the checkpoint just committed; a temporary of the tracker of a process that is gone)
 * and lists the step folders before the new one. */
static int ckpt_sweep_one(const char *path, int kind, int64_t step, long pid, void *ctx)
{
    ckpt_sweep *w = ctx;
    pt_ckpt_meta m;
    pt_err ignored;
    int files;
    if (kind == ENT_TRACKER_TMP && ckpt_is_file(path) && ckpt_pid_gone(pid)) {
        unlink(path);
        return 0;
    }
    if (kind == ENT_STEP && step < w->step && ckpt_is_ours(path)) {
        if (w->n_older == w->cap) {
            int cap = w->cap ? 2 * w->cap : 16;
            ckpt_kept *v = realloc(w->older, (size_t)cap * sizeof *v);
            if (!v)
                return 0;
            w->older = v;
            w->cap = cap;
        }
        w->older[w->n_older].step = step;
        snprintf(w->older[w->n_older++].path, CKPT_PATH_MAX, "%s", path);
        return 0;
    }
    if ((kind != ENT_TMP && kind != ENT_OLD) || !ckpt_only_ours(path, &files))
        return 0;
    if (!ckpt_pid_gone(pid))
        return 0; /* a live process's, perhaps a run writing the same checkpoint */
    if (pt_ckpt_meta_read(path, &m, &ignored) == 0 && m.step > w->step)
        return 0;
    ckpt_remove_ours(path);
    return 0;
}

static int ckpt_kept_newer(const void *a, const void *b)
{
    int64_t x = ((const ckpt_kept *)a)->step, y = ((const ckpt_kept *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

int pt_ckpt_commit(const char *tmp, const char *dir, int keep, pt_err *err)
{
    char base[CKPT_PATH_MAX], final[CKPT_PATH_MAX], old[CKPT_PATH_MAX];
    pt_ckpt_meta m;
    if (ckpt_base(dir, base, err) != 0)
        return -1;
    if (keep < 1)
        return pt_err_set(err, "%s: keep %d checkpoints? at least 1", base, keep);
    if (pt_ckpt_meta_read(tmp, &m, err) != 0)
        return pt_err_set(err, "refusing to commit '%s': it has no meta.json this build reads, "
                          "so it is not a complete checkpoint", tmp);
    ckpt_step_path(base, m.step, NULL, final);
    ckpt_step_path(base, m.step, "old", old);
    /* the files' data were synced as they were written; now their names */
    if (ckpt_sync_dir(tmp, err) != 0)
        return -1;
    if (ckpt_exists(final)) { /* the same step again (after a rollback or a resume) */
        if (!ckpt_is_ours(final))
            return pt_err_set(err, "'%s' exists and is not a checkpoint written by ptrun: "
                              "refusing to replace it", final);
        if (ckpt_exists(old) && ckpt_remove_ours(old) != 0)
            return pt_err_set(err, "cannot remove the stale '%s': %s", old, strerror(errno));
        if (rename(final, old) != 0)
            return pt_err_set(err, "cannot move '%s' aside: %s", final, strerror(errno));
    }
    if (rename(tmp, final) != 0) {
        int saved = errno;
        if (ckpt_exists(old))
            rename(old, final);
        return pt_err_set(err, "cannot rename '%s' to '%s': %s", tmp, final, strerror(saved));
    }
    char tracker[CKPT_PATH_MAX + 64], text[32];
    if (snprintf(tracker, sizeof tracker, "%s/" CKPT_TRACKER, base) >= (int)sizeof tracker)
        return pt_err_set(err, "%s: path too long", base);
    snprintf(text, sizeof text, "%" PRId64 "\n", m.step);
    if (ckpt_sync_dir(base, err) != 0 || pt_file_write_atomic(tracker, text, strlen(text), err) ||
        ckpt_sync_dir(base, err) != 0)
        return -1;
    /* The new checkpoint is in place: failing to remove an old one or an orphan leaves
     * garbage under a name nothing reads, not an error for training. Step folders after
     * the new one (of a run rolled back, or resumed from an older step) are kept. */
    ckpt_remove_ours(old);
    ckpt_sweep w = {.step = m.step};
    ckpt_entries(base, ckpt_sweep_one, &w);
    if (w.n_older > 1)
        qsort(w.older, (size_t)w.n_older, sizeof *w.older, ckpt_kept_newer);
    for (int i = keep - 1; i < w.n_older; i++)
        ckpt_remove_ours(w.older[i].path);
    free(w.older);
    return 0;
}

void pt_ckpt_abort(const char *tmp)
{
    int files;
    if (!tmp || !tmp[0] || !ckpt_only_ours(tmp, &files))
        return;
    const char *t = strrchr(tmp, '.');
    if (t && strncmp(t, ".tmp-", 5) == 0 && ckpt_digits(t + 5))
        ckpt_remove_ours(tmp);
}
