/*
 * Fuzzes the tokenizer readers (pt_tokenizer_load: runtime/tokenizer_read.c) and the
 * encoder and decoder they feed (tokenizer_encode.c, tokenizer.c). The input's first
 * byte, modulo 4, says which file of a temporary folder the rest becomes:
 *   0 ('0'): tokenizer.json, the folder loaded;
 *   1 ('1'): tokenizer.model, a tiktoken rank file, the folder loaded;
 *   2 ('2'): vocab.json and merges.txt, cut at the first NUL byte, the folder loaded;
 *   3 ('3'): a file named "tokenizer" given itself (JSON or tiktoken by its first byte).
 * A tokenizer it loads must encode a fixed text and the rest of the input into ids
 * below its vocabulary that decode to exactly those bytes (byte-level BPE loses
 * nothing), and free all it holds; a refusal must name the file (its folder).
 */
#include "fuzz.h"
#include "runtime.h"

/* ASCII words, contractions of both cases, digits, runs of spaces and newlines,
 * non-ASCII letters and punctuation ("naïve café — 日本語"), bytes that are not UTF-8,
 * a NUL. */
static const char fixed_text[] =
    "Hello, world! It's 12345 o'clock; THEY'LL see.\r\n\n  \t na\xc3\xafve caf\xc3\xa9 "
    "\xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e x\xff\xfe\xc3(\x80) tail   \0end";

/* Encodes text[0, n) and decodes it back: the same bytes, in at most n tokens, each
 * below the vocabulary; the printable form fits its buffer. */
static void round_trip(const pt_tokenizer *t, const char *text, size_t n)
{
    uint32_t *tok;
    int64_t count;
    pt_err err;
    FUZZ_CHECK(pt_tokenizer_encode(t, text, n, &tok, &count, &err) == 0);
    FUZZ_CHECK(count >= 0 && (uint64_t)count <= n && (count > 0) == (n > 0));
    for (int64_t i = 0; i < count; i++)
        FUZZ_CHECK((int64_t)tok[i] < pt_tokenizer_vocab(t));
    char *back;
    size_t len;
    FUZZ_CHECK(pt_tokenizer_decode(t, tok, count, &back, &len, &err) == 0);
    FUZZ_CHECK(len == n && memcmp(back, text, n) == 0 && back[n] == '\0');
    char shown[48];
    size_t k = pt_tokenizer_decode_text(t, (const int32_t *)tok, count, shown, sizeof shown);
    FUZZ_CHECK(k < sizeof shown && strlen(shown) == k);
    free(back);
    free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char dir[64] = "/tmp/ptfuzz-XXXXXX", path[96];
    if (!mkdtemp(dir))
        abort();
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    int mode = data[0] % 4;
    snprintf(path, sizeof path, "%s", dir);
    if (mode == 0) {
        fuzz_put(dir, "tokenizer.json", body, n);
    } else if (mode == 1) {
        fuzz_put(dir, "tokenizer.model", body, n);
    } else if (mode == 2) {
        const uint8_t *cut = memchr(body, '\0', n);
        size_t vocab_n = cut ? (size_t)(cut - body) : n;
        fuzz_put(dir, "vocab.json", body, vocab_n);
        fuzz_put(dir, "merges.txt", cut ? cut + 1 : body + n, cut ? n - vocab_n - 1 : 0);
    } else {
        fuzz_put(dir, "tokenizer", body, n);
        snprintf(path, sizeof path, "%s/tokenizer", dir);
    }
    pt_tokenizer *t = (pt_tokenizer *)&t;
    pt_err err = {{0}};
    if (pt_tokenizer_load(path, &t, &err) == 0) {
        FUZZ_CHECK(t && pt_tokenizer_vocab(t) >= 256);
        FUZZ_CHECK(strcmp(pt_tokenizer_origin(t), path) == 0);
        char line[256];
        pt_tokenizer_describe(t, line, sizeof line);
        FUZZ_CHECK(strstr(line, dir) != NULL);
        round_trip(t, fixed_text, sizeof fixed_text - 1);
        round_trip(t, (const char *)body, n);
        pt_tokenizer_free(t);
    } else {
        FUZZ_CHECK(t == NULL && err.msg[0] != '\0' && strstr(err.msg, dir) != NULL);
    }
    static const char *const names[] = {"tokenizer.json", "tokenizer.model", "vocab.json",
                                        "merges.txt", "tokenizer"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    return 0;
}
