/*
 * Tokenizers from the files a user has: byte-level BPE (Sennrich, Haddow and Birch,
 * "Neural Machine Translation of Rare Words with Subword Units", ACL 2016, over bytes
 * as GPT-2 does: Radford et al., "Language Models are Unsupervised Multitask Learners",
 * 2019) read from GPT-2's vocab.json + merges.txt, from a Hugging Face tokenizer.json,
 * or from a tiktoken rank file such as Llama 3's tokenizer.model. This file owns the
 * one table of tokens those files are read into (id -> bytes, bytes -> id, the merge
 * list) with its checks, GPT-2's byte-level alphabet, and decoding; tokenizer_read.c
 * parses the three kinds of file, tokenizer_encode.c pre-tokenizes and merges.
 * Nothing is downloaded, and nothing here keeps global state.
 */
#include "tokenizer_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Tokenizer files are megabytes (Llama 3's tokenizer.json: 9 MB). */
#define MAX_FILE_BYTES ((int64_t)1 << 30)

/* ---- Small helpers ------------------------------------------------------------------ */

const char *pt_tok_printable(const unsigned char *b, size_t n, char *out, size_t cap)
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

int pt_tok_read_all(const char *path, char **buf, size_t *n, pt_err *err)
{
    *buf = NULL;
    FILE *f = pt_in_open(path, true, err);
    if (!f)
        return -1;
    struct stat st;
    int rc = 0;
    if (fstat(fileno(f), &st) != 0)
        rc = pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
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

int pt_tok_bytelevel_decode(const char *s, size_t n, unsigned char *out, size_t *out_n,
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

int pt_tok_bytelevel_error(const char *where, const char *s, size_t n, uint32_t bad_cp,
                           pt_err *err)
{
    char shown[64];
    pt_tok_printable((const unsigned char *)s, n, shown, sizeof shown);
    if (bad_cp == UINT32_MAX)
        return pt_err_set(err, "%s: token \"%s\" is not UTF-8", where, shown);
    return pt_err_set(err, "%s: token \"%s\" holds U+%04X, which is not one of GPT-2's "
                           "byte-level characters (is this a byte-level BPE vocabulary?)",
                      where, shown, (unsigned)bad_cp);
}

/* ---- Building the table ------------------------------------------------------------- */

void pt_tok_builder_free(pt_tok_builder *b)
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

unsigned char *pt_tok_scratch(pt_tok_builder *b, size_t n)
{
    return grow(&b->scratch, &b->scratch_cap, n);
}

int pt_tok_add(pt_tokenizer *t, pt_tok_builder *b, int64_t id, const unsigned char *bytes,
                     size_t n, bool special, const char *where, pt_err *err)
{
    char shown[64];
    if (id < 0 || id >= PT_TOK_MAX_ID)
        return pt_err_set(err, "%s: token \"%s\" has id %lld, outside 0 to %d", where,
                          pt_tok_printable(bytes, n, shown, sizeof shown), (long long)id, PT_TOK_MAX_ID - 1);
    if (n == 0 || n > INT32_MAX)
        return pt_err_set(err, "%s: id %lld is an empty token", where, (long long)id);
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        pt_tok_entry *e = cap <= SIZE_MAX / sizeof *e ? realloc(b->e, cap * sizeof *e) : NULL;
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
    b->e[b->n++] = (pt_tok_entry){.id = (uint32_t)id, .len = (int32_t)n, .special = special,
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
int pt_tok_build(pt_tokenizer *t, pt_tok_builder *b, const char *where, pt_err *err)
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
            const pt_tok_entry *e = &b->e[i];
            if (e->special != (pass == 1))
                continue;
            const unsigned char *bytes = t->pool + e->at;
            int32_t had = t->len[e->id];
            bool same = had == e->len && memcmp(t->pool + t->at[e->id], bytes, (size_t)had) == 0;
            if (had >= 0 && (!e->special || special[e->id] || !same)) {
                rc = pt_err_set(err, "%s: id %u is given to \"%s\" and to \"%s\"", where,
                                (unsigned)e->id,
                                pt_tok_printable(t->pool + t->at[e->id], (size_t)had, a_shown,
                                          sizeof a_shown),
                                pt_tok_printable(bytes, (size_t)e->len, b_shown, sizeof b_shown));
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
                                pt_tok_printable(bytes, (size_t)e->len, a_shown, sizeof a_shown),
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

int pt_tok_pairs_reserve(pt_tokenizer *t, size_t n, const char *where, pt_err *err)
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
static int add_merge(pt_tokenizer *t, pt_tok_builder *bd, const unsigned char *a, size_t na,
                     const unsigned char *b, size_t nb, uint32_t rank, const char *where,
                     pt_err *err)
{
    char shown[64];
    int64_t ia = pt_tok_find(t, a, na), ib = pt_tok_find(t, b, nb);
    if (ia < 0 || ib < 0)
        return pt_err_set(err, "%s: \"%s\" is not in the vocabulary", where,
                          ia < 0 ? pt_tok_printable(a, na, shown, sizeof shown)
                                 : pt_tok_printable(b, nb, shown, sizeof shown));
    unsigned char *ab = pt_tok_scratch(bd, na + nb);
    if (!ab)
        return pt_err_set(err, "%s: out of memory", where);
    memcpy(ab, a, na);
    memcpy(ab + na, b, nb);
    int64_t made = pt_tok_find(t, ab, na + nb);
    if (made < 0)
        return pt_err_set(err, "%s: the merged token \"%s\" is not in the vocabulary", where,
                          pt_tok_printable(ab, na + nb, shown, sizeof shown));
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

int pt_tok_add_merge_strings(pt_tokenizer *t, pt_tok_builder *bd, const char *a, size_t na,
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
    if (pt_tok_bytelevel_decode(a, na, sides, &la, &bad))
        return pt_tok_bytelevel_error(where, a, na, bad, err);
    if (pt_tok_bytelevel_decode(b, nb, sides + la, &lb, &bad))
        return pt_tok_bytelevel_error(where, b, nb, bad, err);
    return add_merge(t, bd, sides, la, sides + la, lb, rank, where, err);
}

/* ---- The tokenizer ----------------------------------------------------------------- */

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

const char *pt_tokenizer_origin(const pt_tokenizer *t) { return t->origin; }

void pt_tokenizer_describe(const pt_tokenizer *t, char *buf, size_t cap)
{
    static const char *const formats[] = {"GPT-2 vocab.json + merges.txt", "tokenizer.json",
                                          "tiktoken ranks"};
    snprintf(buf, cap, "%s (%s): a vocabulary of %lld ids: %lld tokens (%lld special); %s "
             "split", t->origin, formats[t->format], (long long)t->vocab, (long long)t->n_tokens,
             (long long)t->n_special, t->split == PT_SPLIT_GPT2 ? "GPT-2's" : "Llama 3's");
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
