/*
 * Tokenizers from the files a user has: byte-level BPE (Sennrich, Haddow and Birch,
 * "Neural Machine Translation of Rare Words with Subword Units", ACL 2016, over bytes
 * as GPT-2 does: Radford et al., "Language Models are Unsupervised Multitask Learners",
 * 2019) read from GPT-2's vocab.json + merges.txt, from a Hugging Face tokenizer.json,
 * or from a tiktoken rank file such as Llama 3's tokenizer.model. This file owns
 * reading and checking those files into one table of tokens (id -> bytes, bytes -> id,
 * the merge list) and decoding; tokenizer_encode.c pre-tokenizes and merges. Nothing
 * is downloaded, and nothing here keeps global state.
 */
#include "tokenizer_internal.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Ids at or above this are refused: the largest vocabularies in use have about 2^18
 * tokens, so a larger id is a corrupt file, not a tokenizer worth a table that big. */
enum { MAX_ID = 1 << 24 };
/* Tokenizer files are megabytes (Llama 3's tokenizer.json: 9 MB). */
#define MAX_FILE_BYTES ((int64_t)1 << 30)

/* ---- Small helpers ------------------------------------------------------------------ */

/* A token's bytes for a message: printable ASCII as it is, the rest as \xNN, at most
 * about 40 bytes of it. */
static const char *printable(const unsigned char *b, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 5 < cap; i++) {
        if (k > 40) {
            memcpy(out + k, "...", 3);
            k += 3;
            break;
        }
        if (b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\')
            out[k++] = (char)b[i];
        else
            k += (size_t)snprintf(out + k, cap - k, "\\x%02x", b[i]);
    }
    out[k] = '\0';
    return out;
}

/* The whole of a regular file, NUL-terminated (*n excludes the NUL). */
static int read_all(const char *path, char **buf, size_t *n, pt_err *err)
{
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fileno(f), &st) != 0)
        rc = pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = pt_err_set(err, "cannot read '%s': not a regular file", path);
    else if ((int64_t)st.st_size > MAX_FILE_BYTES)
        rc = pt_err_set(err, "%s: %lld bytes, more than a tokenizer file holds (%lld at most)",
                        path, (long long)st.st_size, (long long)MAX_FILE_BYTES);
    if (rc == 0) {
        size_t size = (size_t)st.st_size;
        *buf = malloc(size + 1);
        if (!*buf)
            rc = pt_err_set(err, "%s: out of memory for %zu bytes", path, size);
        else if (fread(*buf, 1, size, f) != size)
            rc = pt_err_set(err, "cannot read '%s': %s", path,
                            ferror(f) ? strerror(errno) : "the file shrank while being read");
        else {
            (*buf)[size] = '\0';
            *n = size;
        }
    }
    fclose(f);
    if (rc) {
        free(*buf);
        *buf = NULL;
    }
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

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

static uint64_t hash_bytes(const unsigned char *b, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_u64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL; /* splitmix64's mixer, as in data.c */
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ---- GPT-2's byte-level alphabet -------------------------------------------------------- */

/* bytes_to_unicode of openai/gpt-2 src/encoder.py: the printable bytes '!'..'~',
 * 0xa1..0xac and 0xae..0xff stand for themselves; the 68 others, in increasing order,
 * for U+0100 onwards (so the space 0x20 is U+0120 'Ġ'). */
static uint32_t bytelevel_cp(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae)
        return b;
    if (b <= 0x20)
        return 0x100 + b;
    if (b <= 0xa0)
        return 0x100 + 33 + (b - 0x7f);
    return 0x100 + 67; /* 0xad */
}

/* The byte code point cp stands for, or -1 when it is not in the alphabet. */
static int bytelevel_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff))
        return (int)cp;
    if (cp >= 0x100 && cp <= 0x120)
        return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142)
        return (int)(0x7f + cp - 0x121);
    if (cp == 0x143)
        return 0xad;
    return -1;
}

/* A byte-level string (a vocab.json key, one side of a merge) to the bytes it stands
 * for, into out (at least n bytes); *bad_cp is the first character outside the
 * alphabet (UINT32_MAX: not UTF-8). */
static int bytelevel_decode(const char *s, size_t n, unsigned char *out, size_t *out_n,
                            uint32_t *bad_cp)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t len = pt_utf8_char((const unsigned char *)s + i, n - i, &cp);
        int b = len ? bytelevel_byte(cp) : -1;
        if (b < 0) {
            *bad_cp = len ? cp : UINT32_MAX;
            return -1;
        }
        out[k++] = (unsigned char)b;
        i += len;
    }
    *out_n = k;
    return 0;
}

/* The message for a string s[0, n) that bytelevel_decode refused. */
static int bytelevel_error(const char *where, const char *s, size_t n, uint32_t bad_cp,
                           pt_err *err)
{
    char shown[64];
    printable((const unsigned char *)s, n, shown, sizeof shown);
    if (bad_cp == UINT32_MAX)
        return pt_err_set(err, "%s: token \"%s\" is not UTF-8", where, shown);
    return pt_err_set(err, "%s: token \"%s\" holds U+%04X, which is not one of GPT-2's "
                           "byte-level characters (is this a byte-level BPE vocabulary?)",
                      where, shown, (unsigned)bad_cp);
}

/* ---- Building the table ------------------------------------------------------------- */

/* The tokens as they are read, before their count is known. */
typedef struct {
    uint32_t id;
    int32_t len;
    bool special;
    int64_t at;        /* in the tokenizer's pool */
} entry;

typedef struct {
    entry *e;
    size_t n, cap;
    unsigned char *scratch, *sides; /* a decoded string; the two sides of a merge */
    size_t scratch_cap, sides_cap;
} builder;

static void builder_free(builder *b)
{
    free(b->e);
    free(b->scratch);
    free(b->sides);
}

/* *buf with room for n bytes (NULL when out of memory). */
static unsigned char *grow(unsigned char **buf, size_t *cap, size_t n)
{
    if (n >= *cap) {
        unsigned char *s = n < SIZE_MAX ? realloc(*buf, n + 1) : NULL;
        if (!s)
            return NULL;
        *buf = s;
        *cap = n + 1;
    }
    return *buf;
}

static unsigned char *scratch_for(builder *b, size_t n)
{
    return grow(&b->scratch, &b->scratch_cap, n);
}

/* Adds token `id` with bytes[0, n); `where` names its place for messages. */
static int add_token(pt_tokenizer *t, builder *b, int64_t id, const unsigned char *bytes,
                     size_t n, bool special, const char *where, pt_err *err)
{
    char shown[64];
    if (id < 0 || id >= MAX_ID)
        return pt_err_set(err, "%s: token \"%s\" has id %lld, outside 0 to %d", where,
                          printable(bytes, n, shown, sizeof shown), (long long)id, MAX_ID - 1);
    if (n == 0 || n > INT32_MAX)
        return pt_err_set(err, "%s: id %lld is an empty token", where, (long long)id);
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        entry *e = cap <= SIZE_MAX / sizeof *e ? realloc(b->e, cap * sizeof *e) : NULL;
        if (!e)
            return pt_err_set(err, "%s: out of memory", where);
        b->e = e;
        b->cap = cap;
    }
    if (n > SIZE_MAX - t->pool_bytes)
        return pt_err_set(err, "%s: out of memory", where);
    if (t->pool_bytes + n > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
        while (cap < t->pool_bytes + n)
            cap = cap <= SIZE_MAX / 2 ? 2 * cap : SIZE_MAX;
        unsigned char *p = realloc(t->pool, cap);
        if (!p)
            return pt_err_set(err, "%s: out of memory", where);
        t->pool = p;
        t->pool_cap = cap;
    }
    memcpy(t->pool + t->pool_bytes, bytes, n);
    b->e[b->n++] = (entry){.id = (uint32_t)id, .len = (int32_t)n, .special = special,
                           .at = (int64_t)t->pool_bytes};
    t->pool_bytes += n;
    return 0;
}

int64_t pt_tok_find(const pt_tokenizer *t, const unsigned char *b, size_t n)
{
    size_t mask = t->find_cap - 1;
    for (size_t i = (size_t)hash_bytes(b, n) & mask;; i = (i + 1) & mask) {
        uint32_t slot = t->find[i];
        if (slot == 0)
            return -1;
        uint32_t id = slot - 1;
        if ((size_t)t->len[id] == n && memcmp(t->pool + t->at[id], b, n) == 0)
            return id;
    }
}

/* Adds id to the bytes -> id table; -1 when its bytes are there already (*other). */
static int find_insert(pt_tokenizer *t, uint32_t id, uint32_t *other)
{
    const unsigned char *b = t->pool + t->at[id];
    size_t n = (size_t)t->len[id], mask = t->find_cap - 1;
    for (size_t i = (size_t)hash_bytes(b, n) & mask;; i = (i + 1) & mask) {
        uint32_t slot = t->find[i];
        if (slot == 0) {
            t->find[i] = id + 1;
            return 0;
        }
        if ((size_t)t->len[slot - 1] == n && memcmp(t->pool + t->at[slot - 1], b, n) == 0) {
            *other = slot - 1;
            return -1;
        }
    }
}

/* The id tables from the entries: ordinary tokens first (each id and each byte string
 * once), then the special ones, which only decode; a special one may repeat an ordinary
 * token (GPT-2's tokenizer.json lists <|endoftext|> in both), but not take its id with
 * other bytes. Every single byte must be a token. */
static int build_tables(pt_tokenizer *t, builder *b, const char *where, pt_err *err)
{
    if (b->n == 0)
        return pt_err_set(err, "%s: holds no tokens", where);
    uint32_t top = 0;
    for (size_t i = 0; i < b->n; i++)
        top = b->e[i].id > top ? b->e[i].id : top;
    t->vocab = (int64_t)top + 1;
    t->at = malloc((size_t)t->vocab * sizeof *t->at);
    t->len = malloc((size_t)t->vocab * sizeof *t->len);
    uint8_t *special = calloc((size_t)t->vocab, 1);
    int64_t ordinary = 0;
    for (size_t i = 0; i < b->n; i++)
        ordinary += !b->e[i].special;
    t->find_cap = pow2_at_least(2 * (size_t)ordinary + 2);
    t->find = calloc(t->find_cap, sizeof *t->find);
    if (!t->at || !t->len || !special || !t->find) {
        free(special);
        return pt_err_set(err, "%s: out of memory for %lld ids", where, (long long)t->vocab);
    }
    for (int64_t i = 0; i < t->vocab; i++)
        t->len[i] = -1;
    char a_shown[64], b_shown[64];
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++)
        for (size_t i = 0; i < b->n && rc == 0; i++) {
            const entry *e = &b->e[i];
            if (e->special != (pass == 1))
                continue;
            const unsigned char *bytes = t->pool + e->at;
            int32_t had = t->len[e->id];
            bool same = had == e->len && memcmp(t->pool + t->at[e->id], bytes, (size_t)had) == 0;
            if (had >= 0 && (!e->special || special[e->id] || !same)) {
                rc = pt_err_set(err, "%s: id %u is given to \"%s\" and to \"%s\"", where,
                                (unsigned)e->id,
                                printable(t->pool + t->at[e->id], (size_t)had, a_shown,
                                          sizeof a_shown),
                                printable(bytes, (size_t)e->len, b_shown, sizeof b_shown));
                break;
            }
            t->n_tokens += had < 0;
            t->n_special += e->special;
            special[e->id] = e->special;
            t->at[e->id] = e->at;
            t->len[e->id] = e->len;
            uint32_t other;
            if (!e->special && find_insert(t, e->id, &other) != 0)
                rc = pt_err_set(err, "%s: token \"%s\" appears twice, as ids %u and %u", where,
                                printable(bytes, (size_t)e->len, a_shown, sizeof a_shown),
                                (unsigned)other, (unsigned)e->id);
        }
    free(special);
    for (unsigned c = 0; c < 256 && rc == 0; c++) {
        unsigned char byte = (unsigned char)c;
        int64_t id = pt_tok_find(t, &byte, 1);
        if (id < 0 && t->format == PT_TOK_TIKTOKEN)
            rc = pt_err_set(err, "%s: no token for the byte 0x%02x (a byte-level vocabulary "
                                 "holds all 256 bytes)", where, c);
        else if (id < 0)
            rc = pt_err_set(err, "%s: no token for the byte 0x%02x (\"\\u%04x\" in the "
                                 "byte-level alphabet; the vocabulary must hold all 256)",
                            where, c, (unsigned)bytelevel_cp(c));
        else
            t->byte_id[c] = (uint32_t)id;
    }
    return rc;
}

/* Room for n merges in the merge table. */
static int pairs_reserve(pt_tokenizer *t, size_t n, const char *where, pt_err *err)
{
    t->pair_cap = pow2_at_least(2 * n + 2);
    t->pair_key = calloc(t->pair_cap, sizeof *t->pair_key);
    t->pair_rank = malloc(t->pair_cap * sizeof *t->pair_rank);
    t->pair_made = malloc(t->pair_cap * sizeof *t->pair_made);
    if (!t->pair_key || !t->pair_rank || !t->pair_made)
        return pt_err_set(err, "%s: out of memory for %zu merges", where, n);
    return 0;
}

bool pt_tok_pair(const pt_tokenizer *t, uint32_t a, uint32_t b, uint32_t *rank,
                 uint32_t *made)
{
    if (!t->pair_cap)
        return false;
    uint64_t key = ((uint64_t)a << 32 | b) + 1, mask = t->pair_cap - 1;
    for (uint64_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (t->pair_key[i] == 0)
            return false;
        if (t->pair_key[i] == key) {
            *rank = t->pair_rank[i];
            *made = t->pair_made[i];
            return true;
        }
    }
}

/* Merge number `rank`: the tokens with bytes a and b make the token a + b, all three
 * in the vocabulary. `where` names the line or element. */
static int add_merge(pt_tokenizer *t, builder *bd, const unsigned char *a, size_t na,
                     const unsigned char *b, size_t nb, uint32_t rank, const char *where,
                     pt_err *err)
{
    char shown[64];
    int64_t ia = pt_tok_find(t, a, na), ib = pt_tok_find(t, b, nb);
    if (ia < 0 || ib < 0)
        return pt_err_set(err, "%s: \"%s\" is not in the vocabulary", where,
                          ia < 0 ? printable(a, na, shown, sizeof shown)
                                 : printable(b, nb, shown, sizeof shown));
    unsigned char *ab = scratch_for(bd, na + nb);
    if (!ab)
        return pt_err_set(err, "%s: out of memory", where);
    memcpy(ab, a, na);
    memcpy(ab + na, b, nb);
    int64_t made = pt_tok_find(t, ab, na + nb);
    if (made < 0)
        return pt_err_set(err, "%s: the merged token \"%s\" is not in the vocabulary", where,
                          printable(ab, na + nb, shown, sizeof shown));
    uint64_t key = ((uint64_t)ia << 32 | (uint64_t)ib) + 1, mask = t->pair_cap - 1;
    for (uint64_t i = hash_u64(key) & mask;; i = (i + 1) & mask) {
        if (t->pair_key[i] == key)
            return pt_err_set(err, "%s: the merge repeats merge %u", where,
                              (unsigned)t->pair_rank[i] + 1);
        if (t->pair_key[i] == 0) {
            t->pair_key[i] = key;
            t->pair_rank[i] = rank;
            t->pair_made[i] = (uint32_t)made;
            return 0;
        }
    }
}

/* One merge given as its two byte-level strings. */
static int add_merge_strings(pt_tokenizer *t, builder *bd, const char *a, size_t na,
                             const char *b, size_t nb, uint32_t rank, const char *where,
                             pt_err *err)
{
    if (na == 0 || nb == 0)
        return pt_err_set(err, "%s: expected two tokens separated by one space", where);
    unsigned char *sides = na <= SIZE_MAX - nb ? grow(&bd->sides, &bd->sides_cap, na + nb) : NULL;
    if (!sides)
        return pt_err_set(err, "%s: out of memory", where);
    size_t la, lb;
    uint32_t bad;
    if (bytelevel_decode(a, na, sides, &la, &bad))
        return bytelevel_error(where, a, na, bad, err);
    if (bytelevel_decode(b, nb, sides + la, &lb, &bad))
        return bytelevel_error(where, b, nb, bad, err);
    return add_merge(t, bd, sides, la, sides + la, lb, rank, where, err);
}

/* ---- GPT-2's vocab.json + merges.txt ------------------------------------------------- */

/* A JSON file (keys of objects unique); the error names its line and column. */
static json_t *load_json(const char *path, pt_err *err)
{
    char *text;
    size_t n;
    if (read_all(path, &text, &n, err))
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
static int add_vocab_object(pt_tokenizer *t, builder *b, json_t *vocab, const char *path,
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
                              printable((const unsigned char *)key, n, shown, sizeof shown));
        }
        unsigned char *bytes = scratch_for(b, n);
        size_t len;
        uint32_t bad;
        if (!bytes)
            return pt_err_set(err, "%s: out of memory", path);
        if (bytelevel_decode(key, n, bytes, &len, &bad))
            return bytelevel_error(where, key, n, bad, err);
        if (add_token(t, b, (int64_t)json_integer_value(v), bytes, len, false, where, err))
            return -1;
    }
    return 0;
}

/* The lines of merges.txt: an optional "#version" line, then one merge per line, two
 * byte-level tokens separated by one space, in the order they were learnt. */
static int load_merges_txt(pt_tokenizer *t, builder *b, const char *path, pt_err *err)
{
    char *text;
    size_t n;
    if (read_all(path, &text, &n, err))
        return -1;
    size_t lines = 1;
    for (size_t i = 0; i < n; i++)
        lines += text[i] == '\n';
    int rc = pairs_reserve(t, lines, path, err);
    uint32_t rank = 0;
    int line = 0;
    char where[4200];
    for (char *at = text; rc == 0 && at < text + n;) {
        char *end = memchr(at, '\n', (size_t)(text + n - at));
        char *next = end ? end + 1 : text + n;
        end = end ? end : text + n;
        line++;
        if (end > at && end[-1] == '\r')
            end--;
        size_t len = (size_t)(end - at);
        if (memchr(at, '\0', len)) {
            rc = pt_err_set(err, "%s: line %d: holds a NUL byte (is this merges.txt?)", path, line);
        } else if (len > 0 && !(line == 1 && len >= 8 && memcmp(at, "#version", 8) == 0)) {
            snprintf(where, sizeof where, "%s: line %d", path, line);
            char *space = memchr(at, ' ', len);
            if (!space || memchr(space + 1, ' ', (size_t)(end - space - 1)))
                rc = pt_err_set(err, "%s: expected two tokens separated by one space", where);
            else
                rc = add_merge_strings(t, b, at, (size_t)(space - at), space + 1,
                                       (size_t)(end - space - 1), rank++, where, err);
        }
        at = next;
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
    builder b = {0};
    t->format = PT_TOK_GPT2_FILES;
    t->split = PT_SPLIT_GPT2;
    t->merge = PT_MERGE_LIST;
    int rc = add_vocab_object(t, &b, vocab, vocab_path, "the vocabulary", err);
    json_decref(vocab);
    if (rc == 0)
        rc = build_tables(t, &b, vocab_path, err);
    if (rc == 0)
        rc = load_merges_txt(t, &b, merges_path, err);
    builder_free(&b);
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
    bool use_regex;
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
                          re ? printable((const unsigned char *)re, strlen(re), shown,
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
static int add_json_merges(pt_tokenizer *t, builder *b, json_t *merges, const char *path,
                           pt_err *err)
{
    if (!json_is_array(merges))
        return pt_err_set(err, "%s: model.merges is not an array", path);
    if (pairs_reserve(t, json_array_size(merges), path, err))
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
        if (add_merge_strings(t, b, a, na, c, nc, (uint32_t)i, where, err))
            return -1;
    }
    return 0;
}

/* added_tokens: [{"id": N, "content": "..."}, ...], decoded as their content. */
static int add_added_tokens(pt_tokenizer *t, builder *b, json_t *added, const char *path,
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
        if (add_token(t, b, (int64_t)json_integer_value(id), (const unsigned char *)content,
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
    builder b = {0};
    int rc = add_vocab_object(t, &b, json_object_get(model, "vocab"), path, "model.vocab", err);
    if (rc == 0)
        rc = add_added_tokens(t, &b, json_object_get(root, "added_tokens"), path, err);
    if (rc == 0)
        rc = build_tables(t, &b, path, err);
    if (rc == 0)
        rc = add_json_merges(t, &b, json_object_get(model, "merges"), path, err);
    builder_free(&b);
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

static int add_llama3_specials(pt_tokenizer *t, builder *b, const char *path, pt_err *err)
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
        if (add_token(t, b, LLAMA3_RANKS + i, (const unsigned char *)name, strlen(name), true,
                      path, err))
            return -1;
    }
    return 0;
}

/* One line of a rank file: base64 bytes, spaces, a decimal rank. */
static int tiktoken_line(pt_tokenizer *t, builder *b, const char *at, size_t len,
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
        if ((rank = rank * 10 + (*r - '0')) >= MAX_ID)
            return pt_err_set(err, "%s: rank %.*s is beyond %d", where,
                              (int)(at + len - digits), digits, MAX_ID - 1);
    if (r == digits || r != at + len)
        return pt_err_set(err, "%s: the rank \"%.*s\" is not a whole number", where,
                          (int)(at + len - digits), digits);
    size_t n64 = (size_t)(space - at), n;
    unsigned char *bytes = scratch_for(b, n64);
    if (!bytes)
        return pt_err_set(err, "%s: out of memory", where);
    if (b64_decode(at, n64, bytes, &n))
        return pt_err_set(err, "%s: \"%.*s\" is not base64", where, n64 > 40 ? 40 : (int)n64,
                          at);
    return add_token(t, b, rank, bytes, n, false, where, err);
}

static int load_tiktoken(pt_tokenizer *t, const char *path, pt_err *err)
{
    char *text;
    size_t n;
    if (read_all(path, &text, &n, err))
        return -1;
    t->format = PT_TOK_TIKTOKEN;
    t->split = PT_SPLIT_LLAMA3;
    t->merge = PT_MERGE_CONCAT;
    t->whole_piece_first = true; /* tiktoken's byte_pair_encode looks the piece up first */
    int rc = 0;
    if (memchr(text, '\0', n))
        rc = pt_err_set(err, "%s: binary data, not a tiktoken rank file (a SentencePiece "
                             "model, as Llama 2's tokenizer.model, is not supported)", path);
    builder b = {0};
    char where[4200];
    int line = 0;
    for (char *at = text; rc == 0 && at < text + n;) {
        char *end = memchr(at, '\n', (size_t)(text + n - at));
        char *next = end ? end + 1 : text + n;
        end = end ? end : text + n;
        line++;
        if (end > at && end[-1] == '\r')
            end--;
        snprintf(where, sizeof where, "%s: line %d", path, line);
        if (end > at)
            rc = tiktoken_line(t, &b, at, (size_t)(end - at), where, err);
        at = next;
    }
    free(text);
    if (rc == 0 && b.n == LLAMA3_RANKS)
        rc = add_llama3_specials(t, &b, path, err);
    if (rc == 0)
        rc = build_tables(t, &b, path, err);
    builder_free(&b);
    return rc;
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
    FILE *f = fopen(path, "rb");
    if (!f)
        return pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
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

void pt_tokenizer_free(pt_tokenizer *t)
{
    if (!t)
        return;
    free(t->at);
    free(t->len);
    free(t->pool);
    free(t->find);
    free(t->pair_key);
    free(t->pair_rank);
    free(t->pair_made);
    free(t);
}

int64_t pt_tokenizer_vocab(const pt_tokenizer *t) { return t->vocab; }

void pt_tokenizer_describe(const pt_tokenizer *t, char *buf, size_t cap)
{
    static const char *const formats[] = {"GPT-2 vocab.json + merges.txt", "tokenizer.json",
                                          "tiktoken ranks"};
    snprintf(buf, cap, "%s (%s): %lld tokens, %lld of them special; %s split", t->origin,
             formats[t->format], (long long)t->n_tokens, (long long)t->n_special,
             t->split == PT_SPLIT_GPT2 ? "GPT-2's" : "Llama 3's");
}

/* ---- Decoding ------------------------------------------------------------------------------ */

int pt_tokenizer_decode(const pt_tokenizer *t, const uint32_t *tok, int64_t n, char **out,
                        size_t *len, pt_err *err)
{
    *out = NULL;
    *len = 0;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        if ((int64_t)tok[i] >= t->vocab || t->len[tok[i]] < 0)
            return pt_err_set(err, "token %u at position %lld is not in the vocabulary of %s",
                              (unsigned)tok[i], (long long)i, t->origin);
        if ((size_t)t->len[tok[i]] > SIZE_MAX - 1 - total)
            return pt_err_set(err, "decoding %lld tokens: too many bytes", (long long)n);
        total += (size_t)t->len[tok[i]];
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return pt_err_set(err, "decoding %lld tokens: out of memory for %zu bytes",
                          (long long)n, total);
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        memcpy(buf + k, t->pool + t->at[tok[i]], (size_t)t->len[tok[i]]);
        k += (size_t)t->len[tok[i]];
    }
    buf[k] = '\0';
    *out = buf;
    *len = k;
    return 0;
}

/* Control bytes other than newline and tab are shown as \xNN. */
static bool shown_escaped(unsigned char c)
{
    return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f;
}

size_t pt_tokenizer_decode_text(const pt_tokenizer *t, const int32_t *tok, int64_t n, char *buf,
                                size_t cap)
{
    if (cap == 0)
        return 0;
    size_t len = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = tok[i];
        if (id < 0 || id >= t->vocab || t->len[id] < 0) {
            char item[32];
            size_t k = (size_t)snprintf(item, sizeof item, "<tok %ld>", (long)id);
            if (k > cap - 1 - len) /* whole tokens only */
                break;
            memcpy(buf + len, item, k);
            len += k;
            continue;
        }
        const unsigned char *b = t->pool + t->at[id];
        size_t k = 0;
        for (int32_t j = 0; j < t->len[id]; j++)
            k += shown_escaped(b[j]) ? 4 : 1;
        if (k > cap - 1 - len)
            break;
        for (int32_t j = 0; j < t->len[id]; j++) {
            if (shown_escaped(b[j]))
                len += (size_t)snprintf(buf + len, cap - len, "\\x%02x", b[j]);
            else
                buf[len++] = (char)b[j];
        }
    }
    buf[len] = '\0';
    return len;
}
