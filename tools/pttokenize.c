/*
 * pttokenize — turns a text file into the token files that ptrun trains on (--data
 * PREFIX_train.bin --val-data PREFIX_val.bin): tokenized byte by byte (token i is byte
 * i, vocabulary 256) or with a BPE tokenizer the user has (--tokenizer: GPT-2's
 * vocab.json + merges.txt, a tokenizer.json, a tiktoken file), the last part split off
 * for validation, both written in llm.c's token-file format, uint16 when the
 * vocabulary fits, else uint32. Tokenizers live in runtime/tokenizer.c, the split and
 * the file format in runtime/data.c; this file parses options and reports. Exit status
 * 0 on success, 1 on any error, with nothing written then.
 */
#include "cli.h"
#include "runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: pttokenize INPUT OUTPUT_PREFIX [--tokenizer PATH] [--val-fraction F] [--seq S]\n"
    "\n"
    "Tokenizes the text INPUT and writes OUTPUT_PREFIX_train.bin and OUTPUT_PREFIX_val.bin\n"
    "in llm.c's token-file format (a 256-int32 header, then the tokens: uint16 after\n"
    "magic 20240520 when the vocabulary has at most 65536 ids, else uint32 after magic\n"
    "20240801), for ptrun --data OUTPUT_PREFIX_train.bin --val-data OUTPUT_PREFIX_val.bin.\n"
    "INPUT may also be a token file, which is split as it is.\n"
    "\n"
    "  --tokenizer PATH   BPE tokenizer: a folder with GPT-2's vocab.json and merges.txt,\n"
    "                     a Hugging Face tokenizer.json (byte-level BPE), or a tiktoken\n"
    "                     file (Llama 3's tokenizer.model) [byte by byte: token i is\n"
    "                     byte i, a vocabulary of 256]\n"
    "  --val-fraction F   share of the tokens, taken from the end, for validation [0.1]\n"
    "  --seq S            sequence length: each part gets at least S+1 tokens [64]\n"
    "  -h, --help         this text\n"
    "\n"
    "Exit status: 0 success, 1 error (nothing is written then).\n";

enum { EXIT_FAIL = 1, PATH_CAP = 4096 };

typedef struct {
    const char *input;
    const char *prefix;
    const char *tokenizer;   /* NULL: byte by byte */
    double val_fraction;
    int64_t seq;
} pt_tokenize_opts;

static int fail(const char *msg)
{
    fprintf(stderr, "pttokenize: %s\n", msg);
    return EXIT_FAIL;
}

/* The value of option argv[*i] (as "--opt V" or "--opt=V"), or NULL when missing. */
static const char *option_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (*i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static int matches(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=');
}

/* 0, 1 after --help, or -1 with the message in err. */
static int parse_args(int argc, char **argv, pt_tokenize_opts *o, pt_err *err)
{
    *o = (pt_tokenize_opts){.val_fraction = 0.1, .seq = 64};
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)
            return 1;
        if (matches(a, "--val-fraction")) {
            const char *v = option_value(argc, argv, &i, "--val-fraction");
            char *end;
            if (!v)
                return pt_err_set(err, "--val-fraction needs a value");
            errno = 0;
            double f = strtod(v, &end);
            if (end == v || *end || errno || !(f > 0 && f < 1))
                return pt_err_set(err, "--val-fraction '%s' is not a number in (0, 1)", v);
            o->val_fraction = f;
        } else if (matches(a, "--seq")) {
            const char *v = option_value(argc, argv, &i, "--seq");
            char *end;
            if (!v)
                return pt_err_set(err, "--seq needs a value");
            errno = 0;
            long long s = strtoll(v, &end, 10);
            if (end == v || *end || errno || s < 1 || s > (1LL << 30))
                return pt_err_set(err, "--seq '%s' is not a whole number from 1 to %lld", v,
                                  1LL << 30);
            o->seq = s;
        } else if (matches(a, "--tokenizer")) {
            const char *v = option_value(argc, argv, &i, "--tokenizer");
            if (!v || !*v)
                return pt_err_set(err, "--tokenizer needs a path");
            o->tokenizer = v;
        } else if (a[0] == '-' && a[1] != '\0') {
            return pt_err_set(err, "unknown option '%s' (try --help)", a);
        } else if (positional == 0) {
            o->input = a;
            positional++;
        } else if (positional == 1) {
            o->prefix = a;
            positional++;
        } else {
            return pt_err_set(err, "unexpected argument '%s' (try --help)", a);
        }
    }
    if (positional < 2)
        return pt_err_set(err, "expected INPUT and OUTPUT_PREFIX (try --help)");
    if (!*o->prefix)
        return pt_err_set(err, "OUTPUT_PREFIX is empty");
    return 0;
}

/* Writes both parts in tokens of `width` bytes, or neither: when the second file
 * fails, the first is removed. */
static int write_parts(const char *train_path, const pt_tokens *train, const char *val_path,
                       const pt_tokens *val, int width, pt_err *err)
{
    if (pt_tokens_write(train_path, train->tok, train->n, width, err) != 0)
        return -1;
    if (pt_tokens_write(val_path, val->tok, val->n, width, err) != 0) {
        unlink(train_path);
        return -1;
    }
    return 0;
}

static int tool_main(int argc, char **argv)
{
    pt_tokenize_opts o;
    pt_err err = {{0}};
    int rc = parse_args(argc, argv, &o, &err);
    if (rc == 1) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (rc != 0)
        return fail(err.msg);

    char train_path[PATH_CAP], val_path[PATH_CAP];
    if (snprintf(train_path, sizeof train_path, "%s_train.bin", o.prefix) >= PATH_CAP ||
        snprintf(val_path, sizeof val_path, "%s_val.bin", o.prefix) >= PATH_CAP)
        return fail("OUTPUT_PREFIX is too long");

    pt_tokenizer *tk = NULL;
    if (o.tokenizer && pt_tokenizer_load(o.tokenizer, &tk, &err) != 0)
        return fail(err.msg);
    pt_tokens all = {0}, train = {0}, val = {0};
    int64_t vocab = tk ? pt_tokenizer_vocab(tk) : 256;
    rc = pt_tokens_load_with(o.input, tk, &all, &err);
    /* a token file keeps its width, and must suit the tokenizer when one is given */
    if (rc == 0 && all.token_bytes && tk)
        rc = pt_tokens_check_vocab(&all, vocab, &err);
    int width = all.token_bytes ? all.token_bytes : pt_tokens_width(vocab);
    if (rc == 0)
        rc = pt_tokens_split(&all, o.val_fraction, o.seq, &train, &val, &err);
    if (rc == 0)
        rc = write_parts(train_path, &train, val_path, &val, width, &err);
    if (rc == 0) {
        char about[1024];
        if (tk) {
            pt_tokenizer_describe(tk, about, sizeof about);
            printf("tokenizer %s\n", about);
        }
        printf("%s: %lld tokens\n%s: %lld tokens\n%s: %lld tokens\n", o.input,
               (long long)all.n, train_path, (long long)train.n, val_path, (long long)val.n);
        printf("format: llm.c token files, %s tokens (magic %d)\n",
               width == 2 ? "uint16" : "uint32",
               width == 2 ? PT_TOKENS_MAGIC : PT_TOKENS_MAGIC_U32);
        printf("train with: ptrun PLAN.json --data %s --val-data %s%s%s\n", train_path,
               val_path, tk ? " --tokenizer " : "", tk ? o.tokenizer : "");
    }
    pt_tokenizer_free(tk);
    pt_tokens_free(&all);
    pt_tokens_free(&train);
    pt_tokens_free(&val);
    return rc == 0 ? 0 : fail(err.msg);
}

int main(int argc, char **argv)
{
    return pt_cli_exit("pttokenize", tool_main(argc, argv));
}
