/*
 * ptconvert — a checkpoint of ptrun as a Hugging Face model directory (config.json and
 * model.safetensors that transformers' GPT2LMHeadModel, LlamaForCausalLM,
 * Qwen3ForCausalLM, MixtralForCausalLM or Qwen3MoeForCausalLM loads).
 * This file reads the checkpoint — its meta.json's model and the whole tensors its
 * model.safetensors.index.json names — and reports; the names, layouts, dtypes and the
 * careful writing are runtime/hf_export.c's (pt_hf_export). Exit status 0 on success,
 * 1 on any error, with nothing written then.
 */
#include "cli.h"
#include "hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: ptconvert CHECKPOINT OUT_DIR [--dtype f32|bf16|f16] [--force]\n"
    "\n"
    "Writes a checkpoint of ptrun as a Hugging Face model directory: OUT_DIR/config.json\n"
    "(GPT2LMHeadModel, LlamaForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM or\n"
    "Qwen3MoeForCausalLM, as the model's shape says, with its sizes and its unpadded\n"
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

/* Rows of the checkpoint's embedding: the vocabulary padded as the layout that wrote
 * it padded it (pt_vocab_padded: to 128, then to its tp). */
static int vocab_rows(const pt_ckpt_meta *m, int64_t *rows, pt_err *err)
{
    pt_layout l;
    pt_layout_default(&l);
    if (pt_layout_parse(m->layout, 0, 0, &l, err))
        return -1;
    *rows = pt_vocab_padded(&m->model, l.tp);
    return 0;
}

static int tool_main(int argc, char **argv)
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
    pt_ckpt_meta meta;
    const pt_model *m = &meta.model;
    pt_wsrc *src = NULL;
    int64_t rows = 0;
    pt_hf_written info;
    rc = pt_ckpt_find(o.ckpt, NULL, -1, dir, sizeof dir, &meta, &err) ||
         pt_model_validate(m, dir, &err) || pt_ckpt_src_open(dir, false, &src, &err) ||
         vocab_rows(&meta, &rows, &err) ||
         pt_hf_export(o.out, m, rows, src, o.dtype, o.force, &info, &err);
    if (src)
        src->close(src);
    if (rc != 0)
        return fail(err.msg);
    printf("%s: step %lld of model '%s'\n%s: %s, %d tensors, %.2f MiB of %s, vocabulary %lld "
           "(of %lld rows)\n", dir, (long long)meta.step, m->name, o.out, info.family, info.tensors,
           (double)info.bytes / (1024.0 * 1024.0), o.dtype, (long long)m->vocab,
           (long long)rows);
    return 0;
}

int main(int argc, char **argv)
{
    return pt_cli_exit("ptconvert", tool_main(argc, argv));
}
