/*
 * Token data (runtime/data.c): token files written and read back in llm.c's formats
 * (uint16 and uint32 tokens), plain text through the byte-level tokenizer, every
 * malformed file refused with a message that names it (a file with an unknown magic
 * number never trained as text), the vocabulary check, the train/validation split, byte
 * decoding, and the sampler — its per-epoch permutation a bijection keyed by seed
 * and epoch, its windows inside the data, and what a step reads independent of how
 * the batch is cut into pieces. argv[1] is a scratch folder.
 */
#include "check.h"
#include "runtime.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *scratch = ".";

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/test_data_%s", scratch, name);
}

/* A token-file header with the given fields, followed by `body` bytes of zeros. */
static void write_token_file(const char *path, int32_t magic, int32_t version, int32_t count,
                             size_t header_bytes, size_t body)
{
    size_t n = header_bytes + body;
    unsigned char *b = calloc(n ? n : 1, 1);
    int32_t fields[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            if ((size_t)(4 * i + k) < header_bytes)
                b[4 * i + k] = (unsigned char)((uint32_t)fields[i] >> (8 * k));
    check_write_file(path, b, n);
    free(b);
}

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* Loads a file that must be refused; the message must name it and say `what`. */
static void check_refused(const char *path, const char *what)
{
    pt_tokens t;
    pt_err err = {{0}};
    CHECK_INT(pt_tokens_load(path, &t, &err), -1);
    CHECK_STR_HAS(err.msg, path);
    CHECK_STR_HAS(err.msg, what);
    CHECK(t.tok == NULL && t.n == 0);
}

static void test_round_trip(void)
{
    char path[512];
    path_of(path, sizeof path, "rt.bin");
    enum { N = 100000 };   /* more than one write chunk */
    uint32_t *tok = malloc(N * sizeof *tok);
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)(i * 2654435761u >> 7);
    tok[0] = 50256;
    tok[1] = 65535;
    pt_err err = {{0}};
    CHECK_INT(pt_tokens_write(path, tok, N, 2, &err), 0);
    CHECK_INT(file_size(path), 1024 + 2 * N);

    /* The bytes on disk are llm.c's: little-endian header, then uint16 tokens. */
    FILE *f = fopen(path, "rb");
    unsigned char head[16];
    CHECK(f && fread(head, 1, 16, f) == 16);
    if (f)
        fclose(f);
    CHECK(head[0] == 0x88 && head[1] == 0xd8 && head[2] == 0x34 && head[3] == 0x01);
    CHECK(head[4] == 1 && head[5] == 0 && head[8] == (N & 0xff) && head[12] == 0);

    pt_tokens t;
    CHECK_INT(pt_tokens_load(path, &t, &err), 0);
    CHECK_INT(t.n, N);
    CHECK_INT(t.token_bytes, 2);
    CHECK(t.tok && memcmp(t.tok, tok, N * sizeof *tok) == 0);
    CHECK_STR_HAS(t.origin, path);
    pt_tokens_free(&t);
    CHECK(t.tok == NULL && t.n == 0);
    pt_tokens_free(&t);   /* twice is harmless */

    /* Nothing but the file itself is left in the folder (the temporary is renamed). */
    DIR *d = opendir(scratch);
    int strays = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        strays += strstr(e->d_name, "test_data_rt.bin.tmp") != NULL;
    if (d)
        closedir(d);
    CHECK_INT(strays, 0);

    /* Overwriting an existing file replaces it. */
    CHECK_INT(pt_tokens_write(path, tok + 5, 3, 2, &err), 0);
    CHECK_INT(pt_tokens_load(path, &t, &err), 0);
    CHECK_INT(t.n, 3);
    CHECK_INT(t.tok[2], tok[7]);
    pt_tokens_free(&t);

    /* uint32 tokens (Llama 3's vocabulary of 128256): llm.c's magic 20240801 and
     * version 7, 4 bytes per token, ids above 65535 kept whole. */
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)(i * 2654435761u) % 128256;
    tok[0] = 128255;
    tok[1] = 65536;
    tok[2] = 0x01020304;
    path_of(path, sizeof path, "rt32.bin");
    CHECK_INT(pt_tokens_write(path, tok, N, 4, &err), 0);
    CHECK_INT(file_size(path), 1024 + 4 * N);
    f = fopen(path, "rb");
    unsigned char head32[1032];
    CHECK(f && fread(head32, 1, sizeof head32, f) == sizeof head32);
    if (f)
        fclose(f);
    CHECK(head32[0] == 0xa1 && head32[1] == 0xd9 && head32[2] == 0x34 && head32[3] == 0x01);
    CHECK(head32[4] == 7 && head32[5] == 0 && head32[8] == (N & 0xff));
    CHECK(head32[1024] == 0xff && head32[1025] == 0xf4 && head32[1026] == 0x01 &&
          head32[1027] == 0);   /* 128255, little-endian */
    CHECK(head32[1028] == 0 && head32[1029] == 0 && head32[1030] == 1 && head32[1031] == 0);
    CHECK_INT(pt_tokens_load(path, &t, &err), 0);
    CHECK_INT(t.n, N);
    CHECK_INT(t.token_bytes, 4);
    CHECK(t.tok && memcmp(t.tok, tok, N * sizeof *tok) == 0);
    CHECK_INT(t.tok[2], 0x01020304);
    pt_tokens_free(&t);
    free(tok);

    CHECK_INT(pt_tokens_width(256), 2);
    CHECK_INT(pt_tokens_width(65536), 2);
    CHECK_INT(pt_tokens_width(65537), 4);
    CHECK_INT(pt_tokens_width(128256), 4);
}

static void test_write_errors(void)
{
    uint32_t tok[4] = {1, 2, 3, 4};
    pt_err err = {{0}};
    char path[512];
    path_of(path, sizeof path, "no-such-dir/x.bin");
    CHECK_INT(pt_tokens_write(path, tok, 4, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "cannot write");
    CHECK_STR_HAS(err.msg, path);
    CHECK_STR_HAS(err.msg, "No such file or directory");

    path_of(path, sizeof path, "empty-write.bin");
    CHECK_INT(pt_tokens_write(path, tok, 0, 2, &err), -1);
    CHECK_STR_HAS(err.msg, "0 tokens");
    CHECK_INT(pt_tokens_write(path, tok, (int64_t)1 << 31, 4, &err), -1);
    CHECK_STR_HAS(err.msg, "2147483648 tokens");
    CHECK_INT(pt_tokens_write(path, tok, 4, 3, &err), -1);
    CHECK_STR_HAS(err.msg, "3-byte tokens");
    /* An id over 65535 in the uint16 format would be cut to 16 bits: refused. */
    tok[2] = 65536;
    CHECK_INT(pt_tokens_write(path, tok, 4, 2, &err), -1);
    CHECK_STR_HAS(err.msg, path);
    CHECK_STR_HAS(err.msg, "token 65536 at position 2 does not fit the uint16 format");
    FILE *f = fopen(path, "rb");
    CHECK(f == NULL);   /* refused before anything was written */
    if (f)
        fclose(f);
}

static void test_text(void)
{
    char path[512];
    path_of(path, sizeof path, "text.txt");
    const unsigned char text[] = {'H', 'i', '\n', 0xff, 0x01, 0xc8};
    check_write_file(path, text, sizeof text);
    pt_tokens t;
    pt_err err = {{0}};
    CHECK_INT(pt_tokens_load(path, &t, &err), 0);
    CHECK_INT(t.n, 6);
    CHECK_INT(t.token_bytes, 0);
    if (t.n == 6) {
        CHECK_INT(t.tok[0], 'H');
        CHECK_INT(t.tok[2], '\n');
        CHECK_INT(t.tok[3], 255);
        CHECK_INT(t.tok[4], 1);
        CHECK_INT(t.tok[5], 0xc8);
    }
    pt_tokens_free(&t);

    /* A text longer than one read chunk (a NUL byte past the first 1024 bytes is
     * text), and shorter than 4 bytes (no magic to test). */
    enum { N = 200000 };
    unsigned char *big = malloc(N);
    for (int i = 0; i < N; i++)
        big[i] = (unsigned char)(i * 7 + 3 + (i < 1024 && (i * 7 + 3) % 256 == 0));
    big[5000] = 0;
    check_write_file(path, big, N);
    CHECK_INT(pt_tokens_load(path, &t, &err), 0);
    CHECK_INT(t.n, N);
    int same = t.n == N;
    for (int i = 0; same && i < N; i++)
        same = t.tok[i] == big[i];
    CHECK(same);
    pt_tokens_free(&t);
    free(big);
    check_write_file(path, "ab", 2);
    CHECK_INT(pt_tokens_load(path, &t, &err), 0);
    CHECK_INT(t.n, 2);
    pt_tokens_free(&t);
}

static void test_bad_files(void)
{
    char path[512];
    path_of(path, sizeof path, "missing.bin");
    check_refused(path, "cannot read");
    check_refused(path, "No such file or directory");

    check_refused(scratch, "Is a directory");

    path_of(path, sizeof path, "empty.txt");
    check_write_file(path, "", 0);
    check_refused(path, "no tokens");

    path_of(path, sizeof path, "truncated.bin");
    write_token_file(path, PT_TOKENS_MAGIC, 1, 10, 1024, 18);
    check_refused(path, "truncated: header says 10 tokens, file holds 9");
    write_token_file(path, PT_TOKENS_MAGIC, 1, 10, 1024, 19);   /* half a token short */
    check_refused(path, "truncated: header says 10 tokens, file holds 9");

    path_of(path, sizeof path, "long.bin");
    write_token_file(path, PT_TOKENS_MAGIC, 1, 10, 1024, 22);
    check_refused(path, "header says 10 tokens, but the file holds 22 bytes");

    path_of(path, sizeof path, "version.bin");
    write_token_file(path, PT_TOKENS_MAGIC, 2, 10, 1024, 40);
    check_refused(path, "version 2 is not supported after magic 20240520");
    check_refused(path, "version 7 after 20240801");
    write_token_file(path, PT_TOKENS_MAGIC, 7, 10, 1024, 40);   /* uint32's version */
    check_refused(path, "version 7 is not supported after magic 20240520");
    write_token_file(path, PT_TOKENS_MAGIC_U32, 1, 10, 1024, 40);
    check_refused(path, "version 1 is not supported after magic 20240801");

    /* uint32 files: 4 bytes a token. */
    path_of(path, sizeof path, "truncated32.bin");
    write_token_file(path, PT_TOKENS_MAGIC_U32, 7, 10, 1024, 39);
    check_refused(path, "truncated: header says 10 tokens, file holds 9");
    write_token_file(path, PT_TOKENS_MAGIC_U32, 7, 10, 1024, 20);   /* a uint16 body */
    check_refused(path, "truncated: header says 10 tokens, file holds 5");
    write_token_file(path, PT_TOKENS_MAGIC_U32, 7, 10, 1024, 44);
    check_refused(path, "but the file holds 44 bytes after the header (40 expected, 4 per token)");
    write_token_file(path, PT_TOKENS_MAGIC_U32, 7, 0, 1024, 0);
    check_refused(path, "no tokens");

    /* An unknown magic number: never trained as text when the file is a .bin or
     * holds a NUL byte in its first 1024 bytes, as every token-file header does. */
    path_of(path, sizeof path, "magic.bin");
    write_token_file(path, 20240521, 1, 10, 1024, 20);
    check_refused(path, "not a token file: its magic number is 20240521 (0x0134d889), not "
                        "20240520 (llm.c, uint16 tokens) or 20240801 (uint32 tokens)");
    check_refused(path, "NUL byte at offset 5");
    check_write_file(path, "plain words", 11);   /* text, but named .bin */
    check_refused(path, "a .bin file is never read as text");
    check_write_file(path, "ab", 2);
    check_refused(path, "2 bytes, too few for the magic number 20240520 or 20240801");
    path_of(path, sizeof path, "magic.tok");
    write_token_file(path, 0x41414141, 0x41414141, 0x41414141, 1024, 20);
    check_refused(path, "its magic number is 1094795585 (0x41414141)");
    check_refused(path, "NUL byte at offset 12");
    check_write_file(path, "x\0y", 3);
    check_refused(path, "NUL byte at offset 1");

    path_of(path, sizeof path, "negative.bin");
    write_token_file(path, PT_TOKENS_MAGIC, 1, -5, 1024, 0);
    check_refused(path, "-5 tokens, a negative count");

    path_of(path, sizeof path, "zero.bin");
    write_token_file(path, PT_TOKENS_MAGIC, 1, 0, 1024, 0);
    check_refused(path, "no tokens");

    path_of(path, sizeof path, "short-header.bin");
    write_token_file(path, PT_TOKENS_MAGIC, 1, 10, 100, 0);
    check_refused(path, "holds only 100 bytes, fewer than the 1024-byte header");
    write_token_file(path, PT_TOKENS_MAGIC, 1, 10, 4, 0);
    check_refused(path, "holds only 4 bytes");
}

static void test_vocab(void)
{
    uint32_t tok[20] = {0};
    tok[17] = 300;
    tok[19] = 400;
    pt_tokens t = {.tok = tok, .n = 20};
    snprintf(t.origin, sizeof t.origin, "data.bin");
    pt_err err = {{0}};
    CHECK_INT(pt_tokens_check_vocab(&t, 256, &err), -1);
    CHECK_STR_HAS(err.msg, "data.bin: token 300 at position 17 is beyond the vocabulary (256)");
    CHECK_INT(pt_tokens_check_vocab(&t, 401, &err), 0);
    CHECK_INT(pt_tokens_check_vocab(&t, 400, &err), -1);
    CHECK_STR_HAS(err.msg, "token 400 at position 19");
    /* ids of a uint32 file against Llama 3's vocabulary */
    tok[3] = 128256;
    CHECK_INT(pt_tokens_check_vocab(&t, 128256, &err), -1);
    CHECK_STR_HAS(err.msg, "data.bin: token 128256 at position 3 is beyond the vocabulary "
                           "(128256)");
    CHECK_INT(pt_tokens_check_vocab(&t, 128257, &err), 0);
}

static void test_split(void)
{
    enum { N = 1000 };
    uint32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint32_t)i;
    pt_tokens all = {.tok = tok, .n = N, .token_bytes = 4};
    snprintf(all.origin, sizeof all.origin, "corpus.txt");
    pt_tokens train, val;
    pt_err err = {{0}};

    CHECK_INT(pt_tokens_split(&all, 0.1, 64, &train, &val, &err), 0);
    CHECK_INT(train.n, 900);
    CHECK_INT(val.n, 100);
    CHECK_INT(train.tok[0], 0);
    CHECK_INT(train.tok[899], 899);
    CHECK_INT(val.tok[0], 900);   /* the last tenth, in order */
    CHECK_INT(val.tok[99], 999);
    CHECK(train.tok != tok && val.tok != tok);
    CHECK_STR_HAS(train.origin, "corpus.txt");
    CHECK_STR_HAS(val.origin, "corpus.txt");
    CHECK(train.token_bytes == 4 && val.token_bytes == 4);
    pt_tokens_free(&train);
    pt_tokens_free(&val);

    /* A small fraction still gives validation one whole sequence. */
    CHECK_INT(pt_tokens_split(&all, 0.001, 64, &train, &val, &err), 0);
    CHECK_INT(val.n, 65);
    CHECK_INT(train.n, 935);
    pt_tokens_free(&train);
    pt_tokens_free(&val);

    /* Exactly enough for both sides, then one token short. */
    all.n = 130;
    CHECK_INT(pt_tokens_split(&all, 0.5, 64, &train, &val, &err), 0);
    CHECK_INT(train.n, 65);
    CHECK_INT(val.n, 65);
    pt_tokens_free(&train);
    pt_tokens_free(&val);
    all.n = 129;
    CHECK_INT(pt_tokens_split(&all, 0.5, 64, &train, &val, &err), -1);
    CHECK_STR_HAS(err.msg, "corpus.txt has 129 tokens, too few to split");
    CHECK_STR_HAS(err.msg, "takes 65 and training needs at least 65 (sequence 64 + 1)");
    CHECK(train.tok == NULL && val.tok == NULL);

    all.n = N;
    CHECK_INT(pt_tokens_split(&all, 0.99, 64, &train, &val, &err), -1);
    CHECK_STR_HAS(err.msg, "takes 990");
    CHECK_INT(pt_tokens_split(&all, 0, 64, &train, &val, &err), -1);
    CHECK_STR_HAS(err.msg, "validation fraction 0 is outside (0, 1)");
    CHECK_INT(pt_tokens_split(&all, 1, 64, &train, &val, &err), -1);
    CHECK_STR_HAS(err.msg, "outside (0, 1)");
    CHECK_INT(pt_tokens_split(&all, NAN, 64, &train, &val, &err), -1);
    CHECK_STR_HAS(err.msg, "outside (0, 1)");
    CHECK_INT(pt_tokens_split(&all, 0.1, 0, &train, &val, &err), -1);
    CHECK_STR_HAS(err.msg, "sequence length 0");
}

static void test_decode(void)
{
    int32_t tok[] = {'a', ' ', '~', '\n', '\t', 0, 0x7f, 0xff, '\\', 300, 'z'};
    int n = (int)(sizeof tok / sizeof tok[0]);
    char buf[128];
    size_t len = pt_bytes_decode(tok, n, buf, sizeof buf);
    CHECK_STR_HAS(buf, "a ~\n\t\\x00\\x7f\\xff\\<tok 300>z");
    CHECK_INT(len, strlen(buf));
    CHECK_INT(len, 28);

    /* Truncation keeps whole items and the terminating NUL. */
    memset(buf, '#', sizeof buf);
    len = pt_bytes_decode(tok, n, buf, 9);   /* "a ~\n\t" (5) + "\x00" would need 10 */
    CHECK_INT(len, 5);
    CHECK(buf[5] == '\0' && buf[6] == '#');
    len = pt_bytes_decode(tok, n, buf, 10);
    CHECK_INT(len, 9);
    CHECK(strcmp(buf, "a ~\n\t\\x00") == 0);
    len = pt_bytes_decode(tok, n, buf, 1);
    CHECK_INT(len, 0);
    CHECK(buf[0] == '\0');
    buf[0] = '#';
    CHECK_INT(pt_bytes_decode(tok, n, buf, 0), 0);
    CHECK(buf[0] == '#');   /* cap 0: nothing written */
    CHECK_INT(pt_bytes_decode(tok, 0, buf, sizeof buf), 0);
    CHECK(buf[0] == '\0');
}

/* Tokens 0, 1, 2, ... (mod 65536) with exactly w windows of length seq, and `extra`
 * tokens after the last window, too few for another. */
static pt_tokens counting_tokens(int64_t w, int64_t seq, int64_t extra)
{
    pt_tokens t = {.n = w * seq + 1 + extra};
    t.tok = malloc((size_t)t.n * sizeof *t.tok);
    for (int64_t i = 0; i < t.n; i++)
        t.tok[i] = (uint32_t)i;
    snprintf(t.origin, sizeof t.origin, "counting");
    return t;
}

/* Window order of epoch e, as window indices. */
static void epoch_order(const pt_sampler *s, int64_t e, int64_t *order)
{
    for (int64_t i = 0; i < s->windows; i++)
        order[i] = pt_sampler_offset(s, e * s->windows + i) / s->seq;
}

static int same_order(const int64_t *a, const int64_t *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

static void test_permutation(void)
{
    const int64_t ws[] = {1, 2, 3, 7, 64, 1000, 4097};
    for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++) {
        int64_t w = ws[k], seq = 3;
        pt_tokens t = counting_tokens(w, seq, (w % 2) ? seq - 1 : 0);
        pt_sampler s, s2, s3;
        pt_err err = {{0}};
        CHECK_INT(pt_sampler_init(&s, &t, seq, 1234, &err), 0);
        CHECK_INT(s.windows, w);
        CHECK_INT(pt_sampler_init(&s2, &t, seq, 1234, &err), 0);
        CHECK_INT(pt_sampler_init(&s3, &t, seq, 1235, &err), 0);
        int64_t *o0 = malloc((size_t)w * sizeof *o0), *o1 = malloc((size_t)w * sizeof *o1);
        int64_t *o2 = malloc((size_t)w * sizeof *o2);
        char *seen = calloc((size_t)w, 1);
        for (int64_t e = 0; e < 3; e++) {
            epoch_order(&s, e, o0);
            memset(seen, 0, (size_t)w);
            int bijective = 1;
            for (int64_t i = 0; i < w; i++) {
                if (o0[i] < 0 || o0[i] >= w || seen[o0[i]]) {
                    bijective = 0;
                    break;
                }
                seen[o0[i]] = 1;
            }
            if (!bijective)
                fprintf(stderr, "W = %lld, epoch %lld: not a permutation\n", (long long)w,
                        (long long)e);
            CHECK(bijective);
        }
        epoch_order(&s, 0, o0);
        epoch_order(&s2, 0, o1);
        CHECK(same_order(o0, o1, w));   /* same seed, same order */
        if (w >= 64) {
            epoch_order(&s, 1, o1);
            CHECK(!same_order(o0, o1, w));   /* epochs differ */
            epoch_order(&s3, 0, o2);
            CHECK(!same_order(o0, o2, w));   /* seeds differ */
            int64_t fixed = 0;
            for (int64_t i = 0; i < w; i++)
                fixed += o0[i] == i;
            CHECK(fixed < 8);   /* shuffled, not the identity (about 1 expected) */
        }
        free(o0);
        free(o1);
        free(o2);
        free(seen);
        free(t.tok);
    }
}

/* Over many seeds, the first window of an epoch is spread evenly over [0, 7): the
 * Feistel rounds mix even a domain of 16 values. */
static void test_permutation_spread(void)
{
    pt_tokens t = counting_tokens(7, 2, 0);
    int hits[7] = {0};
    pt_sampler s;
    pt_err err = {{0}};
    for (uint64_t seed = 0; seed < 7000; seed++) {
        CHECK_INT(pt_sampler_init(&s, &t, 2, seed, &err), 0);
        hits[pt_sampler_offset(&s, 0) / 2]++;
    }
    for (int i = 0; i < 7; i++)
        CHECK(hits[i] > 800 && hits[i] < 1200);   /* 1000 each expected, sd about 30 */
    free(t.tok);
}

static void test_sampler(void)
{
    enum { SEQ = 16 };
    pt_tokens t = counting_tokens(50, SEQ, 7);
    for (int64_t i = 0; i < t.n; i++)
        t.tok[i] = (uint16_t)(i * 40503u);   /* distinct values: a window is recognisable */
    pt_sampler s;
    pt_err err = {{0}};
    CHECK_INT(pt_sampler_init(&s, &t, SEQ, 42, &err), 0);
    CHECK_INT(s.windows, 50);

    int in_bounds = 1;
    for (int64_t g = 0; g < 1000; g++) {
        int64_t off = pt_sampler_offset(&s, g);
        in_bounds &= off >= 0 && off % SEQ == 0 && off + SEQ < t.n;
    }
    CHECK(in_bounds);

    /* Targets are the inputs shifted by one, both read from the sample's window. */
    enum { COUNT = 8 };
    int32_t in[COUNT * SEQ], tg[COUNT * SEQ];
    int64_t first = 47;   /* straddles the end of epoch 0 */
    pt_sampler_fill(&s, first, COUNT, in, tg);
    int ok = 1;
    for (int i = 0; i < COUNT; i++) {
        int64_t off = pt_sampler_offset(&s, first + i);
        for (int j = 0; j < SEQ; j++) {
            ok &= in[i * SEQ + j] == (int32_t)t.tok[off + j];
            ok &= tg[i * SEQ + j] == (int32_t)t.tok[off + j + 1];
            if (j + 1 < SEQ)
                ok &= tg[i * SEQ + j] == in[i * SEQ + j + 1];
        }
    }
    CHECK(ok);

    /* Layout independence: one fill of 8 samples equals two of 4, and eight of 1. */
    int32_t in2[COUNT * SEQ], tg2[COUNT * SEQ];
    pt_sampler_fill(&s, first, 4, in2, tg2);
    pt_sampler_fill(&s, first + 4, 4, in2 + 4 * SEQ, tg2 + 4 * SEQ);
    CHECK(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);
    memset(in2, 0, sizeof in2);
    for (int i = 0; i < COUNT; i++)
        pt_sampler_fill(&s, first + i, 1, in2 + i * SEQ, tg2 + i * SEQ);
    CHECK(memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0);

    /* The same seed on another sampler reads the same; another seed does not. */
    pt_sampler s2;
    CHECK_INT(pt_sampler_init(&s2, &t, SEQ, 42, &err), 0);
    pt_sampler_fill(&s2, first, COUNT, in2, tg2);
    CHECK(memcmp(in, in2, sizeof in) == 0);
    CHECK_INT(pt_sampler_init(&s2, &t, SEQ, 43, &err), 0);
    pt_sampler_fill(&s2, first, COUNT, in2, tg2);
    CHECK(memcmp(in, in2, sizeof in) != 0);
    free(t.tok);

    /* Too little data for one sequence, and a sequence of nothing. */
    uint32_t few[65] = {0};
    pt_tokens small = {.tok = few, .n = 40};
    snprintf(small.origin, sizeof small.origin, "data.bin");
    CHECK_INT(pt_sampler_init(&s, &small, 64, 1, &err), -1);
    CHECK_STR_HAS(err.msg, "data.bin has 40 tokens, fewer than one sequence of 64 + 1");
    small.n = 64;
    CHECK_INT(pt_sampler_init(&s, &small, 64, 1, &err), -1);
    small.n = 65;
    CHECK_INT(pt_sampler_init(&s, &small, 64, 1, &err), 0);
    CHECK_INT(s.windows, 1);
    CHECK_INT(pt_sampler_offset(&s, 5), 0);
    CHECK_INT(pt_sampler_init(&s, &small, 0, 1, &err), -1);
    CHECK_STR_HAS(err.msg, "sequence length 0 must be at least 1");
}

/* Runs the sampler at indices near both ends of int64 in a child process, which must
 * end within seconds: every index is some epoch's window (an index that wrapped below
 * 0 once sent the permutation's cycle walk looping for ever). */
static int sampler_ends_in_child(const pt_sampler *s)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        int32_t in[4 * 16], tg[4 * 16];
        int ok = 1;
        const int64_t g[] = {INT64_MAX, INT64_MAX - 1, INT64_MIN, -1, -51};
        for (int i = 0; i < 5; i++) {
            int64_t off = pt_sampler_offset(s, g[i]);
            ok &= off >= 0 && off % s->seq == 0 && off + s->seq < s->data->n;
        }
        pt_sampler far = *s;
        far.skip = INT64_MAX - 2; /* skip + first + i passes INT64_MAX */
        pt_sampler_fill(&far, 0, 4, in, tg);
        _exit(ok ? 0 : 3);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The range of indices a run may ask for, checked before it skips samples (a
 * checkpoint's data position, a rollback), and the sampler safe at any index. */
static void test_sampler_limits(void)
{
    pt_err err = {{0}};
    CHECK_INT(pt_sampler_check_skip(0, 0, 100, &err), 0);
    CHECK_INT(pt_sampler_check_skip(-5, 10, 20, &err), 0); /* a larger batch after a resume */
    CHECK_INT(pt_sampler_check_skip(INT64_MAX - 100, 0, 100, &err), 0);
    CHECK_INT(pt_sampler_check_skip(INT64_MAX - 99, 0, 100, &err), -1);
    CHECK_INT(pt_sampler_check_skip(9223372036854775797, 0, 64, &err), -1);
    CHECK_STR_HAS(err.msg, "samples 0 to 64, 9223372036854775797 further on, are not global "
                           "sample indices (0 to 9223372036854775807)");
    CHECK_INT(pt_sampler_check_skip(-20, 10, 20, &err), -1);
    CHECK_INT(pt_sampler_check_skip(0, 5, 3, &err), -1);
    CHECK_STR_HAS(err.msg, "samples [5, 3): not a range");

    enum { SEQ = 16 };
    pt_tokens t = counting_tokens(50, SEQ, 7);
    pt_sampler s;
    CHECK_INT(pt_sampler_init(&s, &t, SEQ, 42, &err), 0);
    CHECK_INT(sampler_ends_in_child(&s), 0);
    /* floor division: index -1 is the last window of epoch -1, and an epoch's windows
     * are each read once */
    int64_t seen[50] = {0};
    for (int64_t g = -50; g < 0; g++)
        seen[pt_sampler_offset(&s, g) / SEQ]++;
    int once = 1;
    for (int i = 0; i < 50; i++)
        once &= seen[i] == 1;
    CHECK(once);
    free(t.tok);
}

/* What a loaded text file feeds the model: its own bytes. */
static void test_text_to_samples(void)
{
    char path[512];
    path_of(path, sizeof path, "sample.txt");
    const char *text = "the quick brown fox jumps over the lazy dog\n";
    check_write_file(path, text, strlen(text));
    pt_tokens t;
    pt_err err = {{0}};
    CHECK_INT(pt_tokens_load(path, &t, &err), 0);
    pt_sampler s;
    CHECK_INT(pt_sampler_init(&s, &t, 4, 7, &err), 0);
    CHECK_INT(s.windows, (int64_t)(strlen(text) - 1) / 4);
    int32_t in[4], tg[4];
    pt_sampler_fill(&s, 3, 1, in, tg);
    int64_t off = pt_sampler_offset(&s, 3);
    char buf[16];
    pt_bytes_decode(in, 4, buf, sizeof buf);
    CHECK(strncmp(buf, text + off, 4) == 0);
    pt_tokens_free(&t);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        scratch = argv[1];
    test_round_trip();
    test_write_errors();
    test_text();
    test_bad_files();
    test_vocab();
    test_split();
    test_decode();
    test_permutation();
    test_permutation_spread();
    test_sampler();
    test_sampler_limits();
    test_text_to_samples();
    return pt_check_result();
}
