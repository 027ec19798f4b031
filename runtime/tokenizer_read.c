/*
 * Reading tokenizer files into the table of tokenizer.c: GPT-2's vocab.json +
 * merges.txt, a Hugging Face tokenizer.json (byte-level BPE only: other models,
 * normalizers and pre-tokenizers are refused naming the field), a tiktoken rank file
 * (with Llama 3's special tokens for its 128000 ranks), and which of them a path is.
 * Every error names the file and its line or JSON field.
 */
#include "tokenizer_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- GPT-2's vocab.json + merges.txt ------------------------------------------------- */

/* A JSON file (keys of objects unique); the error names its line and column. */
static json_t *load_json(const char *path, pt_err *err)
{
    char *text;
    size_t n;
    if (pt_tok_read_all(path, &text, &n, err))
        return NULL;
    json_error_t je;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!root)
        pt_err_set(err, "%s: line %d, column %d: %s", path, je.line, je.column, je.text);
    return root;
}

/* The tokens of a vocabulary object {"byte-level string": id, ...} (vocab.json, or
 * model.vocab of tokenizer.json, named `field` in messages). */
static int add_vocab_object(pt_tokenizer *t, pt_tok_builder *b, json_t *vocab, const char *path,
                            const char *field, pt_err *err)
{
    char where[4200];
    if (!json_is_object(vocab))
        return pt_err_set(err, "%s: %s is not an object of token -> id", path, field);
    snprintf(where, sizeof where, "%s: %s", path, field);
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        size_t n = strlen(key);
        if (!json_is_integer(v)) {
            char shown[64];
            return pt_err_set(err, "%s: token \"%s\": the id is not a whole number", where,
                              pt_tok_printable((const unsigned char *)key, n, shown, sizeof shown));
        }
        unsigned char *bytes = pt_tok_scratch(b, n);
        size_t len;
        uint32_t bad;
        if (!bytes)
            return pt_err_set(err, "%s: out of memory", path);
        if (pt_tok_bytelevel_decode(key, n, bytes, &len, &bad))
            return pt_tok_bytelevel_error(where, key, n, bad, err);
        if (pt_tok_add(t, b, (int64_t)json_integer_value(v), bytes, len, false, where, err))
            return -1;
    }
    return 0;
}

/* The next line of text[0, n) from *at (without its "\n" or "\r\n"): its start and
 * length, *at moved past it. false at the end. */
static bool next_line(char **at, const char *text, size_t n, char **line, size_t *len)
{
    if (*at >= text + n)
        return false;
    char *end = memchr(*at, '\n', (size_t)(text + n - *at));
    char *next = end ? end + 1 : (char *)text + n;
    end = end ? end : (char *)text + n;
    if (end > *at && end[-1] == '\r')
        end--;
    *line = *at;
    *len = (size_t)(end - *at);
    *at = next;
    return true;
}

/* The lines of merges.txt: an optional "#version" line, then one merge per line, two
 * byte-level tokens separated by one space, in the order they were learnt. */
static int load_merges_txt(pt_tokenizer *t, pt_tok_builder *b, const char *path, pt_err *err)
{
    char *text;
    size_t n;
    if (pt_tok_read_all(path, &text, &n, err))
        return -1;
    size_t lines = 1;
    for (size_t i = 0; i < n; i++)
        lines += text[i] == '\n';
    int rc = pt_tok_pairs_reserve(t, lines, path, err);
    uint32_t rank = 0;
    int line = 0;
    char where[4200];
    char *at = text, *l;
    size_t len;
    while (rc == 0 && next_line(&at, text, n, &l, &len)) {
        char *end = l + len;
        line++;
        if (memchr(l, '\0', len)) {
            rc = pt_err_set(err, "%s: line %d: holds a NUL byte (is this merges.txt?)", path, line);
        } else if (len > 0 && !(line == 1 && len >= 8 && memcmp(l, "#version", 8) == 0)) {
            snprintf(where, sizeof where, "%s: line %d", path, line);
            char *space = memchr(l, ' ', len);
            if (!space || memchr(space + 1, ' ', (size_t)(end - space - 1)))
                rc = pt_err_set(err, "%s: expected two tokens separated by one space", where);
            else
                rc = pt_tok_add_merge_strings(t, b, l, (size_t)(space - l), space + 1,
                                       (size_t)(end - space - 1), rank++, where, err);
        }
    }
    free(text);
    return rc;
}

static int load_gpt2_files(pt_tokenizer *t, const char *vocab_path, const char *merges_path,
                           pt_err *err)
{
    json_t *vocab = load_json(vocab_path, err);
    if (!vocab)
        return -1;
    pt_tok_builder b = {0};
    t->format = PT_TOK_GPT2_FILES;
    t->split = PT_SPLIT_GPT2;
    t->merge = PT_MERGE_LIST;
    int rc = add_vocab_object(t, &b, vocab, vocab_path, "the vocabulary", err);
    json_decref(vocab);
    if (rc == 0)
        rc = pt_tok_build(t, &b, vocab_path, err);
    if (rc == 0)
        rc = load_merges_txt(t, &b, merges_path, err);
    pt_tok_builder_free(&b);
    return rc;
}

/* ---- Hugging Face tokenizer.json ----------------------------------------------------- */

/* The split patterns as tokenizer.json writes them in a Split pre-tokenizer's
 * pattern.Regex (after JSON unescaping). */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char llama3_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *type_of(json_t *o)
{
    const char *s = json_string_value(json_object_get(o, "type"));
    return s ? s : "(none)";
}

/* A ByteLevel pre-tokenizer: without a prefix space; whether it splits by GPT-2's
 * pattern itself (use_regex, true when absent). */
static int byte_level_step(json_t *o, const char *path, const char *field, bool *use_regex,
                           pt_err *err)
{
    json_t *prefix = json_object_get(o, "add_prefix_space");
    if (json_is_true(prefix))
        return pt_err_set(err, "%s: %s.add_prefix_space is true; only tokenizers that add no "
                               "space before the text are supported", path, field);
    json_t *re = json_object_get(o, "use_regex");
    *use_regex = !re || json_is_true(re);
    return 0;
}

/* Which split pattern the pre_tokenizer is: ByteLevel alone (GPT-2's tokenizer.json),
 * or a Sequence of a Split by GPT-2's or Llama 3's pattern and a ByteLevel that does
 * not split again (Llama 3's). Anything else is refused, naming what it is. */
static int classify_pre_tokenizer(json_t *pre, const char *path, pt_split_pattern *out,
                                  pt_err *err)
{
    bool use_regex = false;
    if (!pre || json_is_null(pre))
        return pt_err_set(err, "%s: no pre_tokenizer: not a byte-level BPE tokenizer (GPT-2's "
                               "and Llama 3's have a ByteLevel one)", path);
    if (strcmp(type_of(pre), "ByteLevel") == 0) {
        if (byte_level_step(pre, path, "pre_tokenizer", &use_regex, err))
            return -1;
        if (!use_regex)
            return pt_err_set(err, "%s: pre_tokenizer is ByteLevel with use_regex false: it "
                                   "does not split the text, which is not supported", path);
        *out = PT_SPLIT_GPT2;
        return 0;
    }
    json_t *steps = json_object_get(pre, "pretokenizers");
    if (strcmp(type_of(pre), "Sequence") != 0 || json_array_size(steps) != 2 ||
        strcmp(type_of(json_array_get(steps, 0)), "Split") != 0 ||
        strcmp(type_of(json_array_get(steps, 1)), "ByteLevel") != 0)
        return pt_err_set(err, "%s: pre_tokenizer is \"%s\"; supported are ByteLevel (GPT-2) "
                               "and a Sequence of Split and ByteLevel (Llama 3)", path,
                          type_of(pre));
    json_t *split = json_array_get(steps, 0);
    const char *re = json_string_value(json_object_get(json_object_get(split, "pattern"),
                                                       "Regex"));
    const char *behavior = json_string_value(json_object_get(split, "behavior"));
    if (!re || !(strcmp(re, gpt2_regex) == 0 || strcmp(re, llama3_regex) == 0)) {
        char shown[64];
        return pt_err_set(err, "%s: pre_tokenizer.pretokenizers[0].pattern.Regex \"%s\" is "
                               "neither GPT-2's nor Llama 3's split pattern", path,
                          re ? pt_tok_printable((const unsigned char *)re, strlen(re), shown,
                                         sizeof shown) : "(none)");
    }
    if (!behavior || strcmp(behavior, "Isolated") != 0 ||
        json_is_true(json_object_get(split, "invert")))
        return pt_err_set(err, "%s: pre_tokenizer.pretokenizers[0] must keep each match as "
                               "a piece (behavior Isolated, invert false)", path);
    if (byte_level_step(json_array_get(steps, 1), path, "pre_tokenizer.pretokenizers[1]",
                        &use_regex, err))
        return -1;
    if (use_regex)
        return pt_err_set(err, "%s: pre_tokenizer.pretokenizers[1] (ByteLevel) splits again "
                               "(use_regex true), which is not supported", path);
    *out = strcmp(re, gpt2_regex) == 0 ? PT_SPLIT_GPT2 : PT_SPLIT_LLAMA3;
    return 0;
}

/* The model object's settings: BPE, none of the options that make it something other
 * than plain byte-level merging. */
static int check_bpe_model(pt_tokenizer *t, json_t *model, const char *path, pt_err *err)
{
    if (!json_is_object(model))
        return pt_err_set(err, "%s: no \"model\" object (is this a tokenizer.json?)", path);
    if (strcmp(type_of(model), "BPE") != 0)
        return pt_err_set(err, "%s: model.type is \"%s\"; only BPE models (byte-level, as "
                               "GPT-2's and Llama 3's) are supported", path, type_of(model));
    if (json_is_true(json_object_get(model, "byte_fallback")))
        return pt_err_set(err, "%s: model.byte_fallback is true: a SentencePiece-style BPE "
                               "(as Llama 2's), not a byte-level one", path);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *s = json_string_value(json_object_get(model, affixes[i]));
        if (s && *s)
            return pt_err_set(err, "%s: model.%s is \"%s\": not a byte-level BPE", path,
                              affixes[i], s);
    }
    json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return pt_err_set(err, "%s: model.dropout is %g: BPE dropout merges at random, and "
                               "tokenizing here is deterministic", path,
                          json_number_value(dropout));
    t->whole_piece_first = json_is_true(json_object_get(model, "ignore_merges"));
    return 0;
}

/* model.merges: strings "a b" (tokenizers before 0.20) or pairs ["a", "b"]. */
static int add_json_merges(pt_tokenizer *t, pt_tok_builder *b, json_t *merges, const char *path,
                           pt_err *err)
{
    if (!json_is_array(merges))
        return pt_err_set(err, "%s: model.merges is not an array", path);
    if (pt_tok_pairs_reserve(t, json_array_size(merges), path, err))
        return -1;
    size_t i;
    json_t *m;
    char where[4200];
    json_array_foreach(merges, i, m) {
        snprintf(where, sizeof where, "%s: model.merges[%zu]", path, i);
        const char *a, *c;
        size_t na, nc;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *space = strchr(a, ' ');
            if (!space || strchr(space + 1, ' '))
                return pt_err_set(err, "%s: expected two tokens separated by one space", where);
            na = (size_t)(space - a);
            c = space + 1;
            nc = strlen(c);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            c = json_string_value(json_array_get(m, 1));
            na = strlen(a);
            nc = strlen(c);
        } else {
            return pt_err_set(err, "%s: expected \"a b\" or [\"a\", \"b\"]", where);
        }
        if (pt_tok_add_merge_strings(t, b, a, na, c, nc, (uint32_t)i, where, err))
            return -1;
    }
    return 0;
}

/* added_tokens: [{"id": N, "content": "..."}, ...], decoded as their content. */
static int add_added_tokens(pt_tokenizer *t, pt_tok_builder *b, json_t *added, const char *path,
                            pt_err *err)
{
    if (!added || json_is_null(added))
        return 0;
    if (!json_is_array(added))
        return pt_err_set(err, "%s: added_tokens is not an array", path);
    size_t i;
    json_t *a;
    char where[4200];
    json_array_foreach(added, i, a) {
        json_t *id = json_object_get(a, "id");
        const char *content = json_string_value(json_object_get(a, "content"));
        snprintf(where, sizeof where, "%s: added_tokens[%zu]", path, i);
        if (!json_is_integer(id))
            return pt_err_set(err, "%s.id: not a whole number", where);
        if (!content)
            return pt_err_set(err, "%s.content: not a string", where);
        if (pt_tok_add(t, b, (int64_t)json_integer_value(id), (const unsigned char *)content,
                      strlen(content), true, where, err))
            return -1;
    }
    return 0;
}

static int load_hf_json(pt_tokenizer *t, const char *path, json_t *root, pt_err *err)
{
    t->format = PT_TOK_HF_JSON;
    t->merge = PT_MERGE_LIST;
    json_t *model = json_object_get(root, "model"), *norm = json_object_get(root, "normalizer");
    if (check_bpe_model(t, model, path, err))
        return -1;
    if (norm && !json_is_null(norm))
        return pt_err_set(err, "%s: normalizer is \"%s\"; only tokenizers without a "
                               "normalizer (as GPT-2's and Llama 3's) are supported", path,
                          type_of(norm));
    if (classify_pre_tokenizer(json_object_get(root, "pre_tokenizer"), path, &t->split, err))
        return -1;
    pt_tok_builder b = {0};
    int rc = add_vocab_object(t, &b, json_object_get(model, "vocab"), path, "model.vocab", err);
    if (rc == 0)
        rc = add_added_tokens(t, &b, json_object_get(root, "added_tokens"), path, err);
    if (rc == 0)
        rc = pt_tok_build(t, &b, path, err);
    if (rc == 0)
        rc = add_json_merges(t, &b, json_object_get(model, "merges"), path, err);
    pt_tok_builder_free(&b);
    return rc;
}

/* ---- tiktoken rank files ----------------------------------------------------------------- */

/* The value of a base64 character (RFC 4648, section 4), or -1. */
static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes s[0, n) (padded to a multiple of 4 with '=') into out (at least 3n/4 bytes). */
static int b64_decode(const char *s, size_t n, unsigned char *out, size_t *out_n)
{
    if (n == 0 || n % 4)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            unsigned char c = (unsigned char)s[i + j];
            bool last = i + 4 == n;
            if (c == '=' && last && j >= 2 && (j == 3 || s[i + 3] == '=')) {
                v[j] = 0;
                pad++;
            } else if ((v[j] = b64_value(c)) < 0) {
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        out[k++] = (unsigned char)(w >> 16);
        if (pad < 2)
            out[k++] = (unsigned char)(w >> 8);
        if (pad < 1)
            out[k++] = (unsigned char)w;
    }
    *out_n = k;
    return 0;
}

/* Llama 3's special tokens, ids 128000 to 128255, which its tokenizer.model does not
 * hold: Meta's code appends them (meta-llama/llama3, llama/tokenizer.py, Tokenizer:
 * num_reserved_special_tokens = 256). */
enum { LLAMA3_RANKS = 128000, LLAMA3_SPECIALS = 256 };

static int add_llama3_specials(pt_tokenizer *t, pt_tok_builder *b, const char *path, pt_err *err)
{
    static const char *const named[10] = {
        "<|begin_of_text|>",           "<|end_of_text|>",
        "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
        "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
        "<|start_header_id|>",          "<|end_header_id|>",
        "<|reserved_special_token_4|>", "<|eot_id|>"};
    char name[48];
    for (int i = 0; i < LLAMA3_SPECIALS; i++) {
        if (i < 10)
            snprintf(name, sizeof name, "%s", named[i]);
        else /* reserved tokens 5 .. 250 */
            snprintf(name, sizeof name, "<|reserved_special_token_%d|>", i - 5);
        if (pt_tok_add(t, b, LLAMA3_RANKS + i, (const unsigned char *)name, strlen(name), true,
                      path, err))
            return -1;
    }
    return 0;
}

/* One line of a rank file: base64 bytes, spaces, a decimal rank. */
static int tiktoken_line(pt_tokenizer *t, pt_tok_builder *b, const char *at, size_t len,
                         const char *where, pt_err *err)
{
    const char *space = memchr(at, ' ', len);
    if (!space)
        return pt_err_set(err, "%s: expected the token's bytes in base64, a space and its rank",
                          where);
    const char *r = space;
    while (r < at + len && *r == ' ')
        r++;
    int64_t rank = 0;
    const char *digits = r;
    for (; r < at + len && *r >= '0' && *r <= '9'; r++)
        if ((rank = rank * 10 + (*r - '0')) >= PT_TOK_MAX_ID)
            return pt_err_set(err, "%s: rank %.*s is beyond %d", where,
                              (int)(at + len - digits), digits, PT_TOK_MAX_ID - 1);
    if (r == digits || r != at + len)
        return pt_err_set(err, "%s: the rank \"%.*s\" is not a whole number", where,
                          (int)(at + len - digits), digits);
    size_t n64 = (size_t)(space - at), n;
    unsigned char *bytes = pt_tok_scratch(b, n64);
    if (!bytes)
        return pt_err_set(err, "%s: out of memory", where);
    if (b64_decode(at, n64, bytes, &n))
        return pt_err_set(err, "%s: \"%.*s\" is not base64", where, n64 > 40 ? 40 : (int)n64,
                          at);
    return pt_tok_add(t, b, rank, bytes, n, false, where, err);
}

static int load_tiktoken(pt_tokenizer *t, const char *path, pt_err *err)
{
    char *text;
    size_t n;
    if (pt_tok_read_all(path, &text, &n, err))
        return -1;
    t->format = PT_TOK_TIKTOKEN;
    t->split = PT_SPLIT_LLAMA3;
    t->merge = PT_MERGE_CONCAT;
    t->whole_piece_first = true; /* tiktoken's byte_pair_encode looks the piece up first */
    int rc = 0;
    if (memchr(text, '\0', n))
        rc = pt_err_set(err, "%s: binary data, not a tiktoken rank file (a SentencePiece "
                             "model, as Llama 2's tokenizer.model, is not supported)", path);
    pt_tok_builder b = {0};
    char where[4200];
    int line = 0;
    char *at = text, *l;
    size_t len;
    while (rc == 0 && next_line(&at, text, n, &l, &len)) {
        snprintf(where, sizeof where, "%s: line %d", path, ++line);
        if (len > 0)
            rc = tiktoken_line(t, &b, l, len, where, err);
    }
    free(text);
    if (rc == 0 && b.n == LLAMA3_RANKS)
        rc = add_llama3_specials(t, &b, path, err);
    if (rc == 0)
        rc = pt_tok_build(t, &b, path, err);
    pt_tok_builder_free(&b);
    return rc;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- Loading ---------------------------------------------------------------------------- */

/* path/name into buf; false when it does not fit. */
static bool join(char *buf, size_t cap, const char *dir, const char *name)
{
    return (size_t)snprintf(buf, cap, "%s/%s", dir, name) < cap;
}

/* A JSON file given as the tokenizer: tokenizer.json, or a vocab.json on its own. */
static int load_json_file(pt_tokenizer *t, const char *path, pt_err *err)
{
    json_t *root = load_json(path, err);
    if (!root)
        return -1;
    int rc;
    json_t *first = json_is_object(root) ? json_object_iter_value(json_object_iter(root)) : NULL;
    if (json_is_object(root) && !json_object_get(root, "model") && json_is_integer(first))
        rc = pt_err_set(err, "%s: a vocabulary alone (vocab.json); give the folder that holds "
                             "it and merges.txt", path);
    else if (!json_is_object(root))
        rc = pt_err_set(err, "%s: not a tokenizer.json (the top level is not an object)", path);
    else
        rc = load_hf_json(t, path, root, err);
    json_decref(root);
    return rc;
}

/* A folder: vocab.json + merges.txt, else tokenizer.json, else tokenizer.model. */
static int load_dir(pt_tokenizer *t, const char *dir, pt_err *err)
{
    char vocab[4096], merges[4096], hf[4096], model[4096];
    if (!join(vocab, sizeof vocab, dir, "vocab.json") ||
        !join(merges, sizeof merges, dir, "merges.txt") ||
        !join(hf, sizeof hf, dir, "tokenizer.json") ||
        !join(model, sizeof model, dir, "tokenizer.model"))
        return pt_err_set(err, "%s: the path is too long", dir);
    bool v = exists(vocab), m = exists(merges);
    if (v && m)
        return load_gpt2_files(t, vocab, merges, err);
    if (exists(hf))
        return load_json_file(t, hf, err);
    if (exists(model))
        return load_tiktoken(t, model, err);
    if (v || m)
        return pt_err_set(err, "%s: holds %s but not %s", dir, v ? "vocab.json" : "merges.txt",
                          v ? "merges.txt" : "vocab.json");
    return pt_err_set(err, "%s: a folder without vocab.json and merges.txt, tokenizer.json "
                           "or tokenizer.model", dir);
}

/* Whether a file's first non-blank byte is '{'. */
static int starts_as_json(const char *path, bool *json, pt_err *err)
{
    FILE *f = pt_in_open(path, true, err);
    if (!f)
        return -1;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r')
        ;
    *json = c == '{';
    fclose(f);
    return 0;
}

int pt_tokenizer_load(const char *path, pt_tokenizer **out, pt_err *err)
{
    *out = NULL;
    pt_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return pt_err_set(err, "%s: out of memory", path);
    snprintf(t->origin, sizeof t->origin, "%s", path);
    bool json = false;
    int rc;
    if (is_dir(path))
        rc = load_dir(t, path, err);
    else if ((rc = starts_as_json(path, &json, err)) == 0)
        rc = json ? load_json_file(t, path, err) : load_tiktoken(t, path, err);
    if (rc) {
        pt_tokenizer_free(t);
        return -1;
    }
    *out = t;
    return 0;
}
