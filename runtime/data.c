/*
 * Token data: what the model reads and in which order. This file owns the token
 * files (llm.c's format, see runtime.h), plain text read through the byte-level
 * tokenizer (token i is byte i), the split of a corpus into training and validation
 * parts, and the sampler that maps every global sample index to one window of
 * tokens. The sampler is the reason every layout trains on the same data: a sample's
 * window depends only on (seed, global index), never on the rank or micro-batch
 * that asks for it, and its permutation is computed, not stored, so nothing about
 * it has to be saved in a checkpoint beyond the next global index.
 *
 * Token files are the format of llm.c (karpathy/llm.c, dev/data/data_common.py
 * write_datafile and llmc/dataloader.h): 256 little-endian int32 (magic 20240520,
 * version 1, token count, the rest 0), then the tokens as little-endian uint16.
 * llm.c's version 2 (uint32 tokens, for Llama 3) is refused by name.
 */
#include "runtime.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { HEADER_BYTES = PT_TOKENS_HEADER_INTS * 4, CHUNK_BYTES = 1 << 16 };

/* ---- Little-endian helpers -------------------------------------------------------- */

static uint32_t get_u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u32le(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* The error of a failed fread: the stream's errno, or the file having shrunk. */
static int read_failed(FILE *f, const char *path, pt_err *err)
{
    if (ferror(f))
        return pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    return pt_err_set(err, "cannot read '%s': the file shrank while being read", path);
}

/* ---- Loading ---------------------------------------------------------------------- */

/* The tokens of an llm.c file of `size` bytes whose header (when there is a whole one)
 * is in head. */
static int load_token_file(FILE *f, const char *path, int64_t size, const unsigned char *head,
                           pt_tokens *out, pt_err *err)
{
    if (size < HEADER_BYTES)
        return pt_err_set(err,
                          "%s: starts with the token-file magic number %d but holds only "
                          "%lld bytes, fewer than the %d-byte header",
                          path, PT_TOKENS_MAGIC, (long long)size, HEADER_BYTES);
    int32_t version = (int32_t)get_u32le(head + 4);
    int32_t count = (int32_t)get_u32le(head + 8);
    if (version != PT_TOKENS_VERSION)
        return pt_err_set(err,
                          "%s: token file version %d is not supported (only version %d: "
                          "uint16 tokens, as llm.c writes for GPT-2)",
                          path, version, PT_TOKENS_VERSION);
    if (count < 0)
        return pt_err_set(err, "%s: header says %d tokens, a negative count", path, count);
    int64_t body = size - HEADER_BYTES;
    if (body < 2 * (int64_t)count)
        return pt_err_set(err, "%s: truncated: header says %d tokens, file holds %lld", path,
                          count, (long long)(body / 2));
    if (body > 2 * (int64_t)count)
        return pt_err_set(err,
                          "%s: header says %d tokens, but the file holds %lld bytes after "
                          "the header (%lld expected, 2 per token)",
                          path, count, (long long)body, 2 * (long long)count);
    if (count == 0)
        return pt_err_set(err, "%s: holds no tokens (the header says 0)", path);

    uint16_t *tok = malloc((size_t)count * sizeof *tok);
    if (!tok)
        return pt_err_set(err, "%s: out of memory for %d tokens", path, count);
    if (fread(tok, 2, (size_t)count, f) != (size_t)count) {
        free(tok);
        return read_failed(f, path, err);
    }
    /* In place from little-endian: token i's two bytes are read before they are
     * overwritten, whatever the host's byte order. */
    unsigned char *b = (unsigned char *)tok;
    for (int64_t i = 0; i < count; i++)
        tok[i] = (uint16_t)(b[2 * i] | b[2 * i + 1] << 8);
    out->tok = tok;
    out->n = count;
    return 0;
}

/* Plain text through the byte-level tokenizer; the first `got` bytes are in head. */
static int load_text(FILE *f, const char *path, int64_t size, const unsigned char *head,
                     size_t got, pt_tokens *out, pt_err *err)
{
    if (size == 0)
        return pt_err_set(err, "%s: holds no tokens (the file is empty)", path);
    if ((uint64_t)size > SIZE_MAX / sizeof(uint16_t))
        return pt_err_set(err, "%s: %lld bytes are too many to load", path, (long long)size);
    uint16_t *tok = malloc((size_t)size * sizeof *tok);
    if (!tok)
        return pt_err_set(err, "%s: out of memory for %lld tokens", path, (long long)size);
    for (size_t i = 0; i < got; i++)
        tok[i] = head[i];
    unsigned char buf[CHUNK_BYTES];
    for (int64_t at = (int64_t)got; at < size;) {
        size_t want = size - at < CHUNK_BYTES ? (size_t)(size - at) : CHUNK_BYTES;
        if (fread(buf, 1, want, f) != want) {
            free(tok);
            return read_failed(f, path, err);
        }
        for (size_t i = 0; i < want; i++)
            tok[at + (int64_t)i] = buf[i];
        at += (int64_t)want;
    }
    out->tok = tok;
    out->n = size;
    return 0;
}

int pt_tokens_load(const char *path, pt_tokens *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f)
        return pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    struct stat st;
    int rc;
    if (fstat(fileno(f), &st) != 0) {
        rc = pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        rc = pt_err_set(err, "cannot read '%s': %s", path, strerror(EISDIR));
    } else if (!S_ISREG(st.st_mode)) {
        /* The size decides between formats and checks the header, so it must be known. */
        rc = pt_err_set(err, "cannot read '%s': not a regular file", path);
    } else {
        int64_t size = (int64_t)st.st_size;
        unsigned char head[HEADER_BYTES];
        size_t want = size < HEADER_BYTES ? (size_t)size : HEADER_BYTES;
        if (fread(head, 1, want, f) != want)
            rc = read_failed(f, path, err);
        else if (want >= 4 && get_u32le(head) == PT_TOKENS_MAGIC)
            rc = load_token_file(f, path, size, head, out, err);
        else
            rc = load_text(f, path, size, head, want, out, err);
    }
    fclose(f);
    if (rc == 0)
        snprintf(out->origin, sizeof out->origin, "%s", path);
    return rc;
}

void pt_tokens_free(pt_tokens *t)
{
    if (!t)
        return;
    free(t->tok);
    t->tok = NULL;
    t->n = 0;
}

/* ---- Writing ---------------------------------------------------------------------- */

/* Header and tokens to an open file; 0, or -1 with errno set. */
static int write_body(FILE *f, const uint16_t *tok, int64_t n)
{
    unsigned char head[HEADER_BYTES] = {0};
    put_u32le(head, PT_TOKENS_MAGIC);
    put_u32le(head + 4, PT_TOKENS_VERSION);
    put_u32le(head + 8, (uint32_t)n);
    if (fwrite(head, 1, sizeof head, f) != sizeof head)
        return -1;
    unsigned char buf[CHUNK_BYTES];
    for (int64_t at = 0; at < n;) {
        int64_t k = n - at < CHUNK_BYTES / 2 ? n - at : CHUNK_BYTES / 2;
        for (int64_t i = 0; i < k; i++) {
            buf[2 * i] = (unsigned char)tok[at + i];
            buf[2 * i + 1] = (unsigned char)(tok[at + i] >> 8);
        }
        if (fwrite(buf, 2, (size_t)k, f) != (size_t)k)
            return -1;
        at += k;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        return -1;
    return 0;
}

int pt_tokens_write(const char *path, const uint16_t *tok, int64_t n, pt_err *err)
{
    /* The header holds the count as int32; an empty file would not load back. */
    if (n < 1 || n > INT32_MAX)
        return pt_err_set(err, "cannot write '%s': %lld tokens (a token file holds 1 to %d)",
                          path, (long long)n, INT32_MAX);
    size_t len = strlen(path) + 32;
    char *tmp = malloc(len);
    if (!tmp)
        return pt_err_set(err, "cannot write '%s': out of memory", path);
    snprintf(tmp, len, "%s.tmp-%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int e = errno;
        free(tmp);
        return pt_err_set(err, "cannot write '%s': %s", path, strerror(e));
    }
    int rc = write_body(f, tok, n);
    int e = errno;
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        e = errno;
    }
    if (rc != 0) {
        unlink(tmp);
        pt_err_set(err, "cannot write '%s': %s", path, strerror(e));
    }
    free(tmp);
    return rc;
}

/* ---- Checks and split ------------------------------------------------------------- */

int pt_tokens_check_vocab(const pt_tokens *t, int64_t vocab, pt_err *err)
{
    for (int64_t i = 0; i < t->n; i++)
        if (t->tok[i] >= vocab)
            return pt_err_set(err,
                              "%s: token %d at position %lld is beyond the vocabulary (%lld)",
                              t->origin, t->tok[i], (long long)i, (long long)vocab);
    return 0;
}

/* A copy of tok[from, from + n) named after the part it is. */
static int copy_part(const pt_tokens *all, int64_t from, int64_t n, const char *part,
                     pt_tokens *out, pt_err *err)
{
    out->tok = malloc((size_t)n * sizeof *out->tok);
    if (!out->tok)
        return pt_err_set(err, "%s: out of memory for %lld tokens", all->origin, (long long)n);
    memcpy(out->tok, all->tok + from, (size_t)n * sizeof *out->tok);
    out->n = n;
    /* The origin is truncated for very long paths; it only labels messages. */
    int w = (int)sizeof out->origin - (int)strlen(part) - 4;
    snprintf(out->origin, sizeof out->origin, "%.*s (%s)", w, all->origin, part);
    return 0;
}

int pt_tokens_split(const pt_tokens *all, double val_fraction, int64_t seq, pt_tokens *train,
                    pt_tokens *val, pt_err *err)
{
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    if (!(val_fraction > 0 && val_fraction < 1))
        return pt_err_set(err, "validation fraction %g is outside (0, 1)", val_fraction);
    if (seq < 1)
        return pt_err_set(err, "sequence length %lld must be at least 1", (long long)seq);
    int64_t need = seq + 1;
    int64_t n_val = llround((double)all->n * val_fraction);
    if (n_val < need)
        n_val = need;
    int64_t n_train = all->n - n_val;
    if (n_train < need)
        return pt_err_set(err,
                          "%s has %lld tokens, too few to split: validation (fraction %g) "
                          "takes %lld and training needs at least %lld (sequence %lld + 1)",
                          all->origin, (long long)all->n, val_fraction, (long long)n_val,
                          (long long)need, (long long)seq);
    if (copy_part(all, 0, n_train, "train", train, err) != 0)
        return -1;
    if (copy_part(all, n_train, n_val, "val", val, err) != 0) {
        pt_tokens_free(train);
        return -1;
    }
    return 0;
}

/* ---- Byte-level decoding ---------------------------------------------------------- */

/* Ids outside 0..255 are not bytes (a token file for a larger vocabulary); they are
 * shown as <tok N> so that a reader sees them without guessing. */
size_t pt_bytes_decode(const int32_t *tok, int64_t n, char *buf, size_t cap)
{
    if (cap == 0)
        return 0;
    size_t len = 0;
    for (int64_t i = 0; i < n; i++) {
        char item[32];
        int32_t t = tok[i];
        size_t k;
        if ((t >= 0x20 && t < 0x7f) || t == '\n' || t == '\t') {
            item[0] = (char)t;
            k = 1;
        } else if (t >= 0 && t <= 0xff) {
            k = (size_t)snprintf(item, sizeof item, "\\x%02x", (unsigned)t);
        } else {
            k = (size_t)snprintf(item, sizeof item, "<tok %ld>", (long)t);
        }
        if (k > cap - 1 - len)   /* whole items only: never half an escape */
            break;
        memcpy(buf + len, item, k);
        len += k;
    }
    buf[len] = '\0';
    return len;
}

/* ---- Sampler ---------------------------------------------------------------------- */

/* splitmix64's output function: a bijective 64-bit mixer whose every output bit
 * depends on every input bit (Steele, Lea and Flood, "Fast Splittable Pseudorandom
 * Number Generators", OOPSLA 2014; constants from Vigna's splitmix64.c,
 * https://prng.di.unimi.it/splitmix64.c). */
static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Rounds of the Feistel network: Luby and Rackoff showed 4 suffice for a random
 * round function; more help the small domains of tiny data sets mix. */
enum { FEISTEL_ROUNDS = 8 };

/* perm_e(x) for x in [0, w): a balanced Feistel network over the 2^(2h) >= w values
 * of two h-bit halves, which is a bijection whatever the round function, restricted
 * to [0, w) by cycle walking — re-encrypting until the value lands inside, which
 * stays a bijection because x's cycle under the network returns to [0, w) (Black and
 * Rogaway, "Ciphers with Arbitrary Finite Domains", CT-RSA 2002). The domain is at
 * most 4w, so the walk takes under four passes on average. */
static int64_t permute(int64_t x, int64_t w, uint64_t seed, uint64_t epoch)
{
    if (w <= 1)
        return 0;
    int bits = 1;
    while (bits < 63 && ((int64_t)1 << bits) < w)
        bits++;
    int h = (bits + 1) / 2;
    uint64_t mask = ((uint64_t)1 << h) - 1;
    uint64_t key = mix64(mix64(seed) ^ epoch);
    uint64_t round_key[FEISTEL_ROUNDS];
    for (int i = 0; i < FEISTEL_ROUNDS; i++)
        round_key[i] = mix64(key + (uint64_t)i);
    uint64_t v = (uint64_t)x;
    do {
        uint64_t l = v >> h, r = v & mask;
        for (int i = 0; i < FEISTEL_ROUNDS; i++) {
            uint64_t f = mix64(round_key[i] ^ r) & mask;
            uint64_t next_r = l ^ f;
            l = r;
            r = next_r;
        }
        v = l << h | r;
    } while (v >= (uint64_t)w);
    return (int64_t)v;
}

int pt_sampler_init(pt_sampler *s, const pt_tokens *data, int64_t seq, uint64_t seed,
                    pt_err *err)
{
    memset(s, 0, sizeof *s);
    if (seq < 1)
        return pt_err_set(err, "sequence length %lld must be at least 1", (long long)seq);
    /* Window w reads tok[w·s, w·s + s]: inputs its first s, targets its last s. */
    int64_t windows = data->n > 0 ? (data->n - 1) / seq : 0;
    if (windows < 1)
        return pt_err_set(err, "%s has %lld tokens, fewer than one sequence of %lld + 1",
                          data->origin, (long long)data->n, (long long)seq);
    s->data = data;
    s->seq = seq;
    s->windows = windows;
    s->seed = seed;
    return 0;
}

int64_t pt_sampler_offset(const pt_sampler *s, int64_t g)
{
    int64_t epoch = g / s->windows;
    return permute(g % s->windows, s->windows, s->seed, (uint64_t)epoch) * s->seq;
}

void pt_sampler_fill(const pt_sampler *s, int64_t first, int count,
                     int32_t *inputs,    /* (count, s) */
                     int32_t *targets)   /* (count, s) */
{
    const uint16_t *tok = s->data->tok;
    for (int i = 0; i < count; i++) {
        const uint16_t *win = tok + pt_sampler_offset(s, s->skip + first + i);
        int32_t *in = inputs + (int64_t)i * s->seq, *tg = targets + (int64_t)i * s->seq;
        for (int64_t j = 0; j < s->seq; j++) {
            in[j] = win[j];
            tg[j] = win[j + 1];
        }
    }
}
