/*
 * ptconvert — a checkpoint of ptrun as a Hugging Face model directory (config.json and
 * model.safetensors that transformers' GPT2LMHeadModel or LlamaForCausalLM loads).
 * This file reads the checkpoint — its meta.json's model and the whole tensors its
 * model.safetensors.index.json names — and reports; the names, layouts, dtypes and the
 * careful writing are runtime/hf_export.c's (pt_hf_export). Exit status 0 on success,
 * 1 on any error, with nothing written then.
 */
#include "hf.h"
#include "specjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage_text[] =
    "usage: ptconvert CHECKPOINT OUT_DIR [--dtype f32|bf16|f16] [--force]\n"
    "\n"
    "Writes a checkpoint of ptrun as a Hugging Face model directory: OUT_DIR/config.json\n"
    "(GPT2LMHeadModel or LlamaForCausalLM with the model's sizes and its unpadded\n"
    "vocabulary) and OUT_DIR/model.safetensors (Hugging Face's tensor names and layouts).\n"
    "CHECKPOINT is a step folder (meta.json, model.safetensors.index.json and its shards),\n"
    "or a --checkpoint folder of ptrun, whose newest complete step is taken.\n"
    "\n"
    "  --dtype D    f32, bf16 or f16: the tensors' type in model.safetensors [f32]\n"
    "  --force      write into an OUT_DIR that is not empty (replacing its config.json\n"
    "               and model.safetensors; other files stay)\n"
    "  -h, --help   this text\n"
    "\n"
    "Exit status: 0 success, 1 error (nothing is written then).\n";

enum { EXIT_FAIL = 1, PATH_CAP = 4096 };

typedef struct {
    const char *ckpt, *out;
    const char *dtype;   /* "F32", "BF16" or "F16" */
    bool force;
} convert_opts;

static int fail(const char *msg)
{
    fprintf(stderr, "ptconvert: %s\n", msg);
    return EXIT_FAIL;
}

/* 0, 1 after --help, or -1 with the message in err. */
static int parse_args(int argc, char **argv, convert_opts *o, pt_err *err)
{
    static const char *const dtypes[][2] = {{"f32", "F32"}, {"bf16", "BF16"}, {"f16", "F16"}};
    *o = (convert_opts){.dtype = "F32"};
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (!strcmp(a, "--force")) {
            o->force = true;
        } else if (!strcmp(a, "--dtype") || !strncmp(a, "--dtype=", 8)) {
            const char *v = a[7] == '=' ? a + 8 : i + 1 < argc ? argv[++i] : NULL;
            if (!v)
                return pt_err_set(err, "--dtype needs a value (f32, bf16 or f16)");
            o->dtype = NULL;
            for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
                if (!strcmp(v, dtypes[k][0]))
                    o->dtype = dtypes[k][1];
            if (!o->dtype)
                return pt_err_set(err, "--dtype '%s': expected f32, bf16 or f16", v);
        } else if (a[0] == '-' && a[1] != '\0') {
            return pt_err_set(err, "unknown option '%s' (try --help)", a);
        } else if (positional < 2) {
            *(positional++ ? &o->out : &o->ckpt) = a;
        } else {
            return pt_err_set(err, "unexpected argument '%s' (try --help)", a);
        }
    }
    if (positional < 2)
        return pt_err_set(err, "expected CHECKPOINT and OUT_DIR (try --help)");
    if (!*o->out)
        return pt_err_set(err, "OUT_DIR is empty");
    return 0;
}

/* ---- The checkpoint: a source of whole tensors ----------------------------------------- */

/* Our checkpoint's step folder: the weight map of model.safetensors.index.json (Hugging
 * Face's index format, runtime/trainer_ckpt.c writes it) and its shards, opened by their
 * headers as tensors are asked for. */
typedef struct {
    pt_wsrc base;
    char dir[PATH_CAP];
    char index[PATH_CAP + 64];
    json_t *map;
    char (*file_name)[256];
    pt_st_file **file;
    int n_files;
} ckpt_src;

static int ckpt_file(ckpt_src *s, const char *name, pt_st_file **out, pt_err *err)
{
    for (int i = 0; i < s->n_files; i++)
        if (!strcmp(s->file_name[i], name)) {
            *out = s->file[i];
            return 0;
        }
    char path[PATH_CAP + 300];
    if (!name[0] || strchr(name, '/') || !strcmp(name, "..") || strlen(name) >= 256)
        return pt_err_set(err, "%s: names file '%.80s', which is not a file of its folder",
                          s->index, name);
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    void *names = realloc(s->file_name, (size_t)(s->n_files + 1) * sizeof *s->file_name);
    if (names)
        s->file_name = names;
    void *files = realloc(s->file, (size_t)(s->n_files + 1) * sizeof *s->file);
    if (files)
        s->file = files;
    if (!names || !files)
        return pt_err_set(err, "out of memory");
    if (pt_st_open_header(path, out, err))
        return -1;
    snprintf(s->file_name[s->n_files], 256, "%s", name);
    s->file[s->n_files++] = *out;
    return 0;
}

/* The F32 tensor `name` (any shape when shape is NULL). */
static int ckpt_tensor(ckpt_src *s, const char *name, int ndim, const int64_t *shape,
                       pt_st_file **f, const pt_st_tensor **t, pt_err *err)
{
    const json_t *file = json_object_get(s->map, name);
    if (!file)
        return pt_err_set(err, "%s: no tensor '%s' in its weight_map", s->index, name);
    return ckpt_file(s, json_string_value(file), f, err) ||
                   pt_st_get(*f, name, "F32", ndim, shape, t, err)
               ? -1
               : 0;
}

static int ckpt_read(pt_wsrc *base, const char *name, int ndim, const int64_t *shape,
                     int64_t lo, int64_t count, float *dst, pt_err *err)
{
    ckpt_src *s = (ckpt_src *)base;
    pt_st_file *f;
    const pt_st_tensor *t;
    if (lo < 0 || count < 0 || lo > INT64_MAX / 4 - count)
        return pt_err_set(err, "%s: tensor '%s': elements [%lld, +%lld) asked for", s->dir,
                          name, (long long)lo, (long long)count);
    return ckpt_tensor(s, name, ndim, shape, &f, &t, err) ||
                   pt_st_read(f, t, lo * 4, (size_t)count * 4, dst, err)
               ? -1
               : 0;
}

static void ckpt_close(pt_wsrc *base)
{
    ckpt_src *s = (ckpt_src *)base;
    for (int i = 0; i < s->n_files; i++)
        pt_st_close(s->file[i]);
    json_decref(s->map);
    free(s->file_name);
    free(s->file);
    free(s);
}

static int ckpt_open(const char *dir, ckpt_src **out, pt_err *err)
{
    ckpt_src *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s)
        return pt_err_set(err, "out of memory");
    s->base = (pt_wsrc){ckpt_read, ckpt_close};
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    snprintf(s->index, sizeof s->index, "%s/model.safetensors.index.json", dir);
    char *text = pt_json_read_file(s->index, err);
    pt_json_obj top;
    json_t *root = text ? pt_json_parse_object(text, s->index, &top, err) : NULL;
    free(text);
    json_t *map = root ? json_object_get(root, "weight_map") : NULL;
    const char *key;
    json_t *v;
    bool ok = json_is_object(map);
    json_object_foreach(ok ? map : NULL, key, v) ok = ok && json_is_string(v);
    if (root && !ok)
        pt_err_set(err, "%s: field 'weight_map': expected an object of file names", s->index);
    if (ok)
        s->map = json_incref(map);
    json_decref(root);
    if (!ok) {
        ckpt_close(&s->base);
        return -1;
    }
    *out = s;
    return 0;
}

/* ---- meta.json --------------------------------------------------------------------------- */

/* The model of the checkpoint in step folder dir, and its step (-1 when not said). */
static int ckpt_model(const char *dir, pt_model *m, long long *step, pt_err *err)
{
    char path[PATH_CAP + 16];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    char *text = pt_json_read_file(path, err);
    pt_json_obj top, mo;
    json_t *root = text ? pt_json_parse_object(text, path, &top, err) : NULL;
    free(text);
    if (!root)
        return -1;
    memset(m, 0, sizeof *m);
    int rc = pt_json_get_object(&top, "model", NULL, &mo, err) ||
             pt_model_read_obj(&mo, m, err) || pt_model_validate(m, path, err);
    const json_t *s = json_object_get(root, "step");
    *step = json_is_integer(s) ? (long long)json_integer_value(s) : -1;
    json_decref(root);
    return rc ? -1 : 0;
}

/* The step folder: ckpt itself when it has a meta.json, else the newest complete step
 * of a --checkpoint folder. */
static int find_step(const char *ckpt, char *dir, size_t n, pt_err *err)
{
    char meta[PATH_CAP + 16];
    struct stat st;
    if ((size_t)snprintf(meta, sizeof meta, "%s/meta.json", ckpt) >= sizeof meta ||
        strlen(ckpt) >= n)
        return pt_err_set(err, "%s: path too long", ckpt);
    if (stat(meta, &st) == 0) {
        snprintf(dir, n, "%s", ckpt);
        return 0;
    }
    pt_ckpt_meta m;
    return pt_ckpt_find(ckpt, NULL, -1, dir, n, &m, err);
}

/* Rows of the checkpoint's embedding: the vocabulary padded as the run padded it. */
static int vocab_rows(ckpt_src *s, int64_t *rows, pt_err *err)
{
    pt_st_file *f;
    const pt_st_tensor *t;
    if (ckpt_tensor(s, "wte", 2, NULL, &f, &t, err))
        return -1;
    *rows = t->shape[0];
    return 0;
}

int main(int argc, char **argv)
{
    convert_opts o;
    pt_err err = {{0}};
    int rc = parse_args(argc, argv, &o, &err);
    if (rc == 1) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (rc != 0)
        return fail(err.msg);

    char dir[PATH_CAP];
    pt_model m;
    long long step;
    ckpt_src *src = NULL;
    int64_t rows = 0;
    pt_hf_written info;
    rc = find_step(o.ckpt, dir, sizeof dir, &err) || ckpt_model(dir, &m, &step, &err) ||
         ckpt_open(dir, &src, &err) || vocab_rows(src, &rows, &err) ||
         pt_hf_export(o.out, &m, rows, &src->base, o.dtype, o.force, &info, &err);
    if (src)
        ckpt_close(&src->base);
    if (rc != 0)
        return fail(err.msg);
    printf("%s: step %lld of model '%s'\n%s: %s, %d tensors, %.2f MiB of %s, vocabulary %lld "
           "(of %lld rows)\n", dir, step, m.name, o.out, info.family, info.tensors,
           (double)info.bytes / (1024.0 * 1024.0), o.dtype, (long long)m.vocab,
           (long long)rows);
    return 0;
}
