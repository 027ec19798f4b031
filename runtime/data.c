/*
 * Token data: what the model reads and in which order. This file owns the token
 * files (llm.c's format, see runtime.h), plain text read through a tokenizer (the
 * byte-level one, token i is byte i, or a BPE tokenizer of runtime/tokenizer.c), the
 * rule that tells the two apart, the split of a corpus into training and validation
 * parts, and the sampler that maps every global sample index to one window of tokens.
 * The sampler is the reason every layout trains on the same data: a sample's window
 * depends only on (seed, global index), never on the rank or micro-batch that asks for
 * it, and its permutation is computed, not stored, so nothing about it has to be saved
 * in a checkpoint beyond the next global index.
 *
 * Token files are the format of llm.c (karpathy/llm.c, dev/data/data_common.py
 * HEADERS_INFO and write_datafile; llmc/dataloader.h reads the first kind): 256
 * little-endian int32 (magic, version, token count, the rest 0), then the tokens,
 * little-endian: uint16 after magic 20240520 and version 1 (GPT-2), uint32 after magic
 * 20240801 and version 7 (Llama 3).
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

/* ---- Token files ------------------------------------------------------------------- */

/* The token width (2 or 4) a magic number announces, or 0 when it is not llm.c's. */
static int magic_width(uint32_t magic)
{
    return magic == PT_TOKENS_MAGIC ? 2 : magic == PT_TOKENS_MAGIC_U32 ? 4 : 0;
}

/* The header of a file of `size` bytes whose first bytes (a whole header when there is
 * one) are in head, announcing tokens of `width` bytes: their count. */
static int check_header(const char *path, int64_t size, const unsigned char *head, int width,
                        int32_t *count, pt_err *err)
{
    int32_t magic = (int32_t)get_u32le(head);
    if (size < HEADER_BYTES)
        return pt_err_set(err,
                          "%s: starts with the token-file magic number %d but holds only "
                          "%lld bytes, fewer than the %d-byte header",
                          path, magic, (long long)size, HEADER_BYTES);
    int32_t version = (int32_t)get_u32le(head + 4);
    int32_t want = width == 2 ? PT_TOKENS_VERSION : PT_TOKENS_VERSION_U32;
    *count = (int32_t)get_u32le(head + 8);
    if (version != want)
        return pt_err_set(err,
                          "%s: token file version %d is not supported after magic %d "
                          "(llm.c writes version %d after %d, uint16 tokens, and version %d "
                          "after %d, uint32 tokens)",
                          path, version, magic, PT_TOKENS_VERSION, PT_TOKENS_MAGIC,
                          PT_TOKENS_VERSION_U32, PT_TOKENS_MAGIC_U32);
    if (*count < 0)
        return pt_err_set(err, "%s: header says %d tokens, a negative count", path, *count);
    int64_t body = size - HEADER_BYTES, need = (int64_t)width * *count;
    if (body < need)
        return pt_err_set(err, "%s: truncated: header says %d tokens, file holds %lld", path,
                          *count, (long long)(body / width));
    if (body > need)
        return pt_err_set(err,
                          "%s: header says %d tokens, but the file holds %lld bytes after "
                          "the header (%lld expected, %d per token)",
                          path, *count, (long long)body, (long long)need, width);
    if (*count == 0)
        return pt_err_set(err, "%s: holds no tokens (the header says 0)", path);
    if ((uint64_t)*count > SIZE_MAX / sizeof(uint32_t))
        return pt_err_set(err, "%s: %d tokens are too many to load", path, *count);
    return 0;
}

/* The tokens of an llm.c file, the stream just past its header. */
static int load_token_file(FILE *f, const char *path, int64_t size, const unsigned char *head,
                           int width, pt_tokens *out, pt_err *err)
{
    int32_t count = 0;
    if (check_header(path, size, head, width, &count, err))
        return -1;
    uint32_t *tok = malloc((size_t)count * sizeof *tok);
    if (!tok)
        return pt_err_set(err, "%s: out of memory for %d tokens", path, count);
    unsigned char buf[CHUNK_BYTES];
    for (int64_t at = 0; at < count;) {
        int64_t k = count - at < CHUNK_BYTES / width ? count - at : CHUNK_BYTES / width;
        if (fread(buf, (size_t)width, (size_t)k, f) != (size_t)k) {
            free(tok);
            return read_failed(f, path, err);
        }
        for (int64_t i = 0; i < k; i++)
            tok[at + i] = width == 2 ? (uint32_t)(buf[2 * i] | buf[2 * i + 1] << 8)
                                     : get_u32le(buf + 4 * i);
        at += k;
    }
    out->tok = tok;
    out->n = count;
    out->token_bytes = width;
    return 0;
}

/* ---- Text ---------------------------------------------------------------------------- */

/* Plain text through the byte-level tokenizer; the first `got` bytes are in head. */
static int load_bytes(FILE *f, const char *path, int64_t size, const unsigned char *head,
                      size_t got, pt_tokens *out, pt_err *err)
{
    uint32_t *tok = malloc((size_t)size * sizeof *tok);
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

/* Plain text through the BPE tokenizer tk: the whole file, then encoded. */
static int load_encoded(FILE *f, const char *path, int64_t size, const unsigned char *head,
                        size_t got, const pt_tokenizer *tk, pt_tokens *out, pt_err *err)
{
    char *text = malloc((size_t)size);
    if (!text)
        return pt_err_set(err, "%s: out of memory for %lld bytes", path, (long long)size);
    memcpy(text, head, got);
    size_t rest = (size_t)size - got;
    if (fread(text + got, 1, rest, f) != rest) {
        free(text);
        return read_failed(f, path, err);
    }
    pt_err why;
    int rc = pt_tokenizer_encode(tk, text, (size_t)size, &out->tok, &out->n, &why);
    free(text);
    if (rc)
        return pt_err_set(err, "%s: %s", path, why.msg);
    return 0;
}

static bool is_bin_name(const char *path)
{
    size_t n = strlen(path);
    return n >= 4 && strcmp(path + n - 4, ".bin") == 0;
}

/* The error for a file that is neither: no magic number of ours, and a .bin name or a
 * NUL byte among the first `got` bytes (head). Binary data read as text would train
 * without complaint on the bytes of a header, which is the mistake this catches. */
static int not_tokens(const char *path, const unsigned char *head, size_t got, pt_err *err)
{
    const unsigned char *nul = memchr(head, 0, got);
    char why[64];
    if (nul)
        snprintf(why, sizeof why, "it holds a NUL byte at offset %zu", (size_t)(nul - head));
    else
        snprintf(why, sizeof why, "a .bin file is never read as text");
    if (got < 4)
        return pt_err_set(err, "%s: not a token file (%zu bytes, too few for the magic number "
                               "%d or %d of llm.c's token files) and not text (%s)",
                          path, got, PT_TOKENS_MAGIC, PT_TOKENS_MAGIC_U32, why);
    uint32_t magic = get_u32le(head);
    return pt_err_set(err, "%s: not a token file: its magic number is %d (0x%08x), not %d "
                           "(llm.c, uint16 tokens) or %d (uint32 tokens); and not text: %s",
                      path, (int32_t)magic, (unsigned)magic, PT_TOKENS_MAGIC,
                      PT_TOKENS_MAGIC_U32, why);
}

/* ---- Loading ---------------------------------------------------------------------- */

/* The contents of the open file f of `size` bytes, by the rule of runtime.h. */
static int load_open(FILE *f, const char *path, int64_t size, const pt_tokenizer *tk,
                     pt_tokens *out, pt_err *err)
{
    unsigned char head[HEADER_BYTES];
    size_t got = size < HEADER_BYTES ? (size_t)size : HEADER_BYTES;
    if (fread(head, 1, got, f) != got)
        return read_failed(f, path, err);
    int width = got >= 4 ? magic_width(get_u32le(head)) : 0;
    if (width)
        return load_token_file(f, path, size, head, width, out, err);
    if (is_bin_name(path) || memchr(head, 0, got))
        return not_tokens(path, head, got, err);
    if (size == 0)
        return pt_err_set(err, "%s: holds no tokens (the file is empty)", path);
    if ((uint64_t)size > SIZE_MAX / sizeof(uint32_t))
        return pt_err_set(err, "%s: %lld bytes are too many to load", path, (long long)size);
    if (tk)
        return load_encoded(f, path, size, head, got, tk, out, err);
    return load_bytes(f, path, size, head, got, out, err);
}

int pt_tokens_load_with(const char *path, const pt_tokenizer *tk, pt_tokens *out, pt_err *err)
{
    memset(out, 0, sizeof *out);
    /* The size decides between formats and checks the header, so it must be known: a
     * regular file only. */
    FILE *f = pt_in_open(path, true, err);
    if (!f)
        return -1;
    struct stat st;
    int rc;
    if (fstat(fileno(f), &st) != 0)
        rc = pt_err_set(err, "cannot read '%s': %s", path, strerror(errno));
    else
        rc = load_open(f, path, (int64_t)st.st_size, tk, out, err);
    fclose(f);
    if (rc == 0)
        snprintf(out->origin, sizeof out->origin, "%s", path);
    else
        memset(out, 0, sizeof *out);
    return rc;
}

int pt_tokens_load(const char *path, pt_tokens *out, pt_err *err)
{
    return pt_tokens_load_with(path, NULL, out, err);
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

int pt_tokens_width(int64_t vocab)
{
    return vocab <= 65536 ? 2 : 4;
}

/* Header and tokens to an open file; 0, or -1 with errno set. */
static int write_body(FILE *f, const uint32_t *tok, int64_t n, int width)
{
    unsigned char head[HEADER_BYTES] = {0};
    put_u32le(head, width == 2 ? PT_TOKENS_MAGIC : PT_TOKENS_MAGIC_U32);
    put_u32le(head + 4, width == 2 ? PT_TOKENS_VERSION : PT_TOKENS_VERSION_U32);
    put_u32le(head + 8, (uint32_t)n);
    if (fwrite(head, 1, sizeof head, f) != sizeof head)
        return -1;
    unsigned char buf[CHUNK_BYTES];
    for (int64_t at = 0; at < n;) {
        int64_t k = n - at < CHUNK_BYTES / width ? n - at : CHUNK_BYTES / width;
        for (int64_t i = 0; i < k; i++) {
            if (width == 4) {
                put_u32le(buf + 4 * i, tok[at + i]);
            } else {
                buf[2 * i] = (unsigned char)tok[at + i];
                buf[2 * i + 1] = (unsigned char)(tok[at + i] >> 8);
            }
        }
        if (fwrite(buf, (size_t)width, (size_t)k, f) != (size_t)k)
            return -1;
        at += k;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        return -1;
    return 0;
}

int pt_tokens_write(const char *path, const uint32_t *tok, int64_t n, int token_bytes,
                    pt_err *err)
{
    if (token_bytes != 2 && token_bytes != 4)
        return pt_err_set(err, "cannot write '%s': %d-byte tokens (llm.c's files hold 2 or 4)",
                          path, token_bytes);
    /* The header holds the count as int32; an empty file would not load back. */
    if (n < 1 || n > INT32_MAX)
        return pt_err_set(err, "cannot write '%s': %lld tokens (a token file holds 1 to %d)",
                          path, (long long)n, INT32_MAX);
    for (int64_t i = 0; token_bytes == 2 && i < n; i++)
        if (tok[i] > UINT16_MAX)
            return pt_err_set(err, "cannot write '%s': token %u at position %lld does not fit "
                                   "the uint16 format (a vocabulary over 65536 needs uint32)",
                              path, (unsigned)tok[i], (long long)i);
    pt_out o;
    if (pt_out_open(&o, path, err))
        return -1;
    if (write_body(o.f, tok, n, token_bytes) != 0)
        return pt_out_fail(&o, errno, err);
    return pt_out_commit(&o, false, err);
}

/* ---- Checks and split ------------------------------------------------------------- */

int pt_tokens_check_vocab(const pt_tokens *t, int64_t vocab, pt_err *err)
{
    for (int64_t i = 0; i < t->n; i++)
        if (t->tok[i] >= vocab)
            return pt_err_set(err,
                              "%s: token %u at position %lld is beyond the vocabulary (%lld)",
                              t->origin, (unsigned)t->tok[i], (long long)i, (long long)vocab);
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
    out->token_bytes = all->token_bytes;
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

int pt_sampler_check_skip(int64_t skip, int64_t first, int64_t end, pt_err *err)
{
    int64_t lo, hi;
    if (first < 0 || end < first)
        return pt_err_set(err, "samples [%lld, %lld): not a range of sample indices",
                          (long long)first, (long long)end);
    if (!pt_add64(first, skip, &lo) || !pt_add64(end, skip, &hi) || lo < 0)
        return pt_err_set(err, "samples %lld to %lld, %lld further on, are not global sample "
                               "indices (0 to %lld)", (long long)first, (long long)end,
                          (long long)skip, (long long)INT64_MAX);
    return 0;
}

int64_t pt_sampler_offset(const pt_sampler *s, int64_t g)
{
    /* floor division: every g, even one below 0, is a window of some epoch, so no index
     * can send the permutation's cycle walk outside [0, W) */
    int64_t epoch = g / s->windows, x = g % s->windows;
    if (x < 0) {
        x += s->windows;
        epoch--;
    }
    return permute(x, s->windows, s->seed, (uint64_t)epoch) * s->seq;
}

void pt_sampler_fill(const pt_sampler *s, int64_t first, int count,
                     int32_t *inputs,    /* (count, s) */
                     int32_t *targets)   /* (count, s) */
{
    const uint32_t *tok = s->data->tok;
    for (int i = 0; i < count; i++) {
        /* skip + first + i: a global index for the samples pt_sampler_check_skip
         * accepted; in unsigned arithmetic, which wraps instead of overflowing, for
         * any others */
        uint64_t g = (uint64_t)s->skip + (uint64_t)first + (uint64_t)i;
        const uint32_t *win = tok + pt_sampler_offset(s, (int64_t)g);
        int32_t *in = inputs + (int64_t)i * s->seq, *tg = targets + (int64_t)i * s->seq;
        for (int64_t j = 0; j < s->seq; j++) {
            in[j] = (int32_t)win[j];   /* below the model's vocabulary: checked on load */
            tg[j] = (int32_t)win[j + 1];
        }
    }
}
