/*
 * Tokenizers (runtime/tokenizer*.c) on small files this test writes: GPT-2's
 * vocab.json + merges.txt, a tokenizer.json of GPT-2's kind and one of Llama 3's, and
 * tiktoken rank files. Known merge sequences give the expected ids (the
 * merge list's order, tiktoken's ranks of concatenations, tokenizer.json's
 * ignore_merges), both split patterns cut known strings as the real regular
 * expressions do (answers from Python's regex module), encoding then decoding gives
 * back ASCII, non-ASCII and arbitrary bytes exactly, Llama 3's special tokens decode,
 * text data load through a tokenizer, and every bad file is refused naming the file
 * and its line or field. argv[1] is a scratch folder.
 */
#include "check.h"
#include "runtime.h"
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *scratch = ".";

static void path_of(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/test_tok_%s", scratch, name);
}

static void write_text(const char *path, const char *text)
{
    check_write_file(path, text, strlen(text));
}

/* ---- Fixtures ------------------------------------------------------------------------- */

/* GPT-2's byte-level alphabet as openai/gpt-2 src/encoder.py bytes_to_unicode builds it:
 * the printable bytes first, each standing for itself, then the others in order from
 * U+0100. */
static uint32_t cp_of_byte[256];

static void make_alphabet(void)
{
    int bs[256], n = 0;
    bool listed[256] = {false};
    for (int b = '!'; b <= '~'; b++)
        listed[bs[n++] = b] = true;
    for (int b = 0xa1; b <= 0xac; b++)
        listed[bs[n++] = b] = true;
    for (int b = 0xae; b <= 0xff; b++)
        listed[bs[n++] = b] = true;
    for (int i = 0; i < n; i++)
        cp_of_byte[bs[i]] = (uint32_t)bs[i];
    int extra = 0;
    for (int b = 0; b < 256; b++)
        if (!listed[b])
            cp_of_byte[b] = 256 + (uint32_t)extra++;
}

static size_t utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    out[0] = (char)(0xe0 | cp >> 12);
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
}

/* The byte-level string of bytes b[0, n), JSON-escaped when json. */
static void bytelevel(const unsigned char *b, size_t n, bool json, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = cp_of_byte[b[i]];
        if (json && (cp == '"' || cp == '\\'))
            out[k++] = '\\';
        k += utf8_put(cp, out + k);
    }
    out[k] = '\0';
}

/* The tokens beyond the 256 bytes, in id order from 256, and the merges (each "a b" in
 * raw bytes, split at the '|'), in rank order, of the GPT-2 fixture. */
static const char *const gpt2_tokens[] = {"he", "ll", "hell", "hello", " w", "or", " wor",
                                          "bc", "ab", "xy", "yz", "\xc3\xa9",
                                          "<|endoftext|>"};
static const char *const gpt2_merges[] = {"h|e", "l|l", "he|ll", "hell|o", " |w", "o|r",
                                          " w|or", "b|c", "a|b", "x|y", "y|z", "\xc3|\xa9"};
enum { N_GPT2_TOKENS = 13, N_GPT2_MERGES = 12 };

/* vocab.json: byte b has id b; then gpt2_tokens. */
static char *vocab_json(void)
{
    size_t cap = 1 << 16, k = 0;
    char *s = malloc(cap), key[256];
    k += (size_t)snprintf(s + k, cap - k, "{");
    for (int b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        bytelevel(&byte, 1, true, key);
        k += (size_t)snprintf(s + k, cap - k, "%s\"%s\": %d", b ? ", " : "", key, b);
    }
    for (int i = 0; i < N_GPT2_TOKENS; i++) {
        bytelevel((const unsigned char *)gpt2_tokens[i], strlen(gpt2_tokens[i]), true, key);
        k += (size_t)snprintf(s + k, cap - k, ", \"%s\": %d", key, 256 + i);
    }
    snprintf(s + k, cap - k, "}");
    return s;
}

/* merge i as byte-level "a b" (json: escaped for a JSON string). */
static void merge_text(int i, bool json, char *out)
{
    const char *m = gpt2_merges[i], *bar = strchr(m, '|');
    char a[64], b[64];
    bytelevel((const unsigned char *)m, (size_t)(bar - m), json, a);
    bytelevel((const unsigned char *)bar + 1, strlen(bar + 1), json, b);
    sprintf(out, "%s %s", a, b);
}

static void write_gpt2_dir(const char *dir)
{
    mkdir(dir, 0755);
    char path[600], line[160];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    char *v = vocab_json();
    write_text(path, v);
    free(v);
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fprintf(f, "#version: 0.2\n");
    for (int i = 0; i < N_GPT2_MERGES; i++) {
        merge_text(i, false, line);
        fprintf(f, "%s\n", line);
    }
    fclose(f);
}

/* A tokenizer.json with GPT-2's vocabulary and merges (merges as "a b" strings). */
static void write_gpt2_json(const char *path, const char *pre_tokenizer, const char *model_extra)
{
    char *v = vocab_json(), line[160];
    size_t cap = 1 << 17, k = 0;
    char *s = malloc(cap);
    k += (size_t)snprintf(s + k, cap - k,
                          "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 268, \"content\": "
                          "\"<|endoftext|>\", \"special\": true}], \"normalizer\": null, "
                          "\"pre_tokenizer\": %s, \"decoder\": {\"type\": \"ByteLevel\"}, "
                          "\"model\": {\"type\": \"BPE\", \"dropout\": null, %s\"vocab\": %s, "
                          "\"merges\": [",
                          pre_tokenizer, model_extra, v);
    for (int i = 0; i < N_GPT2_MERGES; i++) {
        merge_text(i, true, line);
        k += (size_t)snprintf(s + k, cap - k, "%s\"%s\"", i ? ", " : "", line);
    }
    snprintf(s + k, cap - k, "]}}");
    write_text(path, s);
    free(s);
    free(v);
}

static const char gpt2_pre[] =
    "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true}";

/* A tokenizer.json of GPT-2's vocabulary with the given added_tokens, fields of the
 * model before its vocab, and merges. */
static void write_custom_json(const char *path, const char *added, const char *model_extra,
                              const char *merges)
{
    char *v = vocab_json();
    size_t cap = strlen(v) + 4096;
    char *s = malloc(cap);
    snprintf(s, cap, "{\"added_tokens\": %s, \"pre_tokenizer\": %s, \"model\": {\"type\": "
                     "\"BPE\", %s\"vocab\": %s, \"merges\": %s}}",
             added, gpt2_pre, model_extra, v, merges);
    write_text(path, s);
    free(s);
    free(v);
}
/* Llama 3's pre_tokenizer as its tokenizer.json writes it. */
static const char llama3_pre[] =
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
    "{\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
    "\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!"
    "\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
    "\"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": "
    "false}]}";

/* A tokenizer.json of Llama 3's kind: its pre_tokenizer, ignore_merges, merges as
 * pairs, a special token at 300 (ids 264..299 unused). */
static void write_llama3_json(const char *path)
{
    static const char *const tokens[] = {"he", "ll", "hell", "hello", "\thello", "12", "123",
                                         "45"};
    static const char *const merges[] = {"h|e", "l|l", "he|ll", "hell|o", "1|2", "12|3",
                                         "4|5"};
    size_t cap = 1 << 17, k = 0;
    char *s = malloc(cap), key[64], a[64], b[64];
    k += (size_t)snprintf(s + k, cap - k,
                          "{\"added_tokens\": [{\"id\": 300, \"content\": \"<|end_of_text|>\"}], "
                          "\"normalizer\": null, \"pre_tokenizer\": %s, \"model\": {\"type\": "
                          "\"BPE\", \"ignore_merges\": true, \"byte_fallback\": false, "
                          "\"vocab\": {",
                          llama3_pre);
    for (int i = 0; i < 256 + 8; i++) {
        unsigned char byte = (unsigned char)i;
        if (i < 256)
            bytelevel(&byte, 1, true, key);
        else
            bytelevel((const unsigned char *)tokens[i - 256], strlen(tokens[i - 256]), true, key);
        k += (size_t)snprintf(s + k, cap - k, "%s\"%s\": %d", i ? ", " : "", key, i);
    }
    k += (size_t)snprintf(s + k, cap - k, "}, \"merges\": [");
    for (int i = 0; i < 7; i++) {
        const char *bar = strchr(merges[i], '|');
        bytelevel((const unsigned char *)merges[i], (size_t)(bar - merges[i]), true, a);
        bytelevel((const unsigned char *)bar + 1, strlen(bar + 1), true, b);
        k += (size_t)snprintf(s + k, cap - k, "%s[\"%s\", \"%s\"]", i ? ", " : "", a, b);
    }
    snprintf(s + k, cap - k, "]}}");
    write_text(path, s);
    free(s);
}

static void base64(const unsigned char *b, size_t n, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) |
                     (i + 2 < n ? b[i + 2] : 0);
        out[k++] = a[w >> 18];
        out[k++] = a[(w >> 12) & 63];
        out[k++] = i + 1 < n ? a[(w >> 6) & 63] : '=';
        out[k++] = i + 2 < n ? a[w & 63] : '=';
    }
    out[k] = '\0';
}

/* A tiktoken file: byte b has rank b, then `extra` tokens from rank 256. */
static void write_tiktoken(const char *path, const char *const *extra, int n_extra)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    char b64[64];
    for (int b = 0; b < 256; b++) {
        unsigned char byte = (unsigned char)b;
        base64(&byte, 1, b64);
        fprintf(f, "%s %d\n", b64, b);
    }
    for (int i = 0; i < n_extra; i++) {
        base64((const unsigned char *)extra[i], strlen(extra[i]), b64);
        fprintf(f, "%s %d\n", b64, 256 + i);
    }
    fclose(f);
}

static pt_tokenizer *load_ok(const char *path)
{
    pt_tokenizer *t = NULL;
    pt_err err = {{0}};
    int rc = pt_tokenizer_load(path, &t, &err);
    CHECK_INT(rc, 0);
    if (rc)
        fprintf(stderr, "  loading %s: %s\n", path, err.msg);
    return t;
}

/* Loading path must fail, naming `file` and saying `what`. */
static void check_refused(const char *path, const char *file, const char *what)
{
    pt_tokenizer *t = (pt_tokenizer *)1;
    pt_err err = {{0}};
    CHECK_INT(pt_tokenizer_load(path, &t, &err), -1);
    CHECK(t == NULL);
    CHECK_STR_HAS(err.msg, file);
    CHECK_STR_HAS(err.msg, what);
}

/* text's tokens must be want[0, n). */
static void check_encodes(const pt_tokenizer *t, const char *text, const uint32_t *want, int n)
{
    uint32_t *tok = NULL;
    int64_t got = 0;
    pt_err err = {{0}};
    CHECK_INT(pt_tokenizer_encode(t, text, strlen(text), &tok, &got, &err), 0);
    CHECK_INT(got, n);
    bool same = got == n;
    for (int i = 0; same && i < n; i++)
        same = tok[i] == want[i];
    if (!same) {
        fprintf(stderr, "  \"%s\" encodes to", text);
        for (int64_t i = 0; i < got; i++)
            fprintf(stderr, " %u", (unsigned)tok[i]);
        fprintf(stderr, "\n");
    }
    CHECK(same);
    free(tok);
}

/* Encoding then decoding gives back text[0, n) exactly. */
static void check_round_trip(const pt_tokenizer *t, const char *text, size_t n)
{
    uint32_t *tok = NULL;
    int64_t count = 0;
    pt_err err = {{0}};
    CHECK_INT(pt_tokenizer_encode(t, text, n, &tok, &count, &err), 0);
    CHECK(count > 0 && (size_t)count <= n);
    for (int64_t i = 0; i < count; i++)
        CHECK(tok[i] < (uint32_t)pt_tokenizer_vocab(t));
    char *back = NULL;
    size_t len = 0;
    CHECK_INT(pt_tokenizer_decode(t, tok, count, &back, &len, &err), 0);
    CHECK_INT(len, n);
    CHECK(back && len == n && memcmp(back, text, n) == 0);
    free(back);
    free(tok);
}

static const char ascii_text[] =
    "Hello, World! It's 2024. They'll say: \"we've\" & 'I'M'\n\tTabs,  double  spaces, "
    "trailing   \r\n~`^{}[]|\\<>@#$%*()_+-=0123456789 12345678 end\n\n";
/* Latin with accents, dashes and quotes, CJK, emoji with a skin-tone modifier, Greek,
 * Cyrillic, Arabic, Devanagari, a fraction, a superscript, no-break and ideographic
 * spaces, a combining accent. */
static const char utf8_text[] =
    "caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 \xe2\x80\x9cquoted\xe2\x80\x9d \xe4\xb8\xad\xe6\x96"
    "\x87 \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xce\x95\xce\xbb\xce\xbb\xce\xac"
    "\xce\xb4\xce\xb1 \xd1\x80\xd1\x83\xd1\x81 \xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a \xe0\xa4\xb9"
    "\xe0\xa4\xbf\xe0\xa4\x82 \xc2\xbd x\xc2\xb2\xc2\xa0y\xe3\x80\x80" "e\xcc\x81";

static void check_all_round_trips(const pt_tokenizer *t)
{
    check_round_trip(t, ascii_text, strlen(ascii_text));
    check_round_trip(t, utf8_text, strlen(utf8_text));
    unsigned char every[512]; /* every byte, invalid UTF-8 and NUL included, twice */
    for (int i = 0; i < 512; i++)
        every[i] = (unsigned char)(i < 256 ? i : 511 - i);
    check_round_trip(t, (const char *)every, sizeof every);
    check_round_trip(t, " ", 1);
}

/* ---- Tests ------------------------------------------------------------------------------- */

/* Pieces of text under pattern p, joined by '|', against want. */
static void check_split(pt_split_pattern p, const char *text, const char *want)
{
    char got[512];
    size_t k = 0, len = strlen(text);
    for (size_t at = 0; at < len;) {
        size_t end = pt_split_next(p, (const unsigned char *)text, len, at);
        CHECK(end > at && end <= len);
        if (end <= at || end > len)
            return;
        if (at)
            got[k++] = '|';
        memcpy(got + k, text + at, end - at);
        k += end - at;
        at = end;
    }
    got[k] = '\0';
    if (strcmp(got, want) != 0)
        fprintf(stderr, "  split %s\n   got  \"%s\"\n   want \"%s\"\n",
                p == PT_SPLIT_GPT2 ? "gpt2" : "llama3", got, want);
    CHECK(strcmp(got, want) == 0);
}

/* The answers are Python's regex.findall with each real pattern (regex 2026.5.9). */
static void test_split_patterns(void)
{
    const char *a = "Hello world, it's 2024!  Ok?\n\n  bye";
    check_split(PT_SPLIT_GPT2, a, "Hello| world|,| it|'s| 2024|!| | Ok|?|\n\n | bye");
    check_split(PT_SPLIT_LLAMA3, a, "Hello| world|,| it|'s| |202|4|!| | Ok|?\n\n| | bye");
    const char *b = "Hello world, IT'S 12345!\n\n  (ok)\r\n\tx";
    check_split(PT_SPLIT_GPT2, b, "Hello| world|,| IT|'|S| 12345|!|\n\n | (|ok|)|\r\n|\t|x");
    check_split(PT_SPLIT_LLAMA3, b, "Hello| world|,| IT|'S| |123|45|!\n\n| | (|ok|)\r\n|\tx");
    /* café — naïve<NBSP>中文 😀! */
    const char *c = "caf\xc3\xa9 \xe2\x80\x94 na\xc3\xafve\xc2\xa0\xe4\xb8\xad\xe6\x96\x87 "
                    "\xf0\x9f\x98\x80!";
    check_split(PT_SPLIT_GPT2, c,
                "caf\xc3\xa9| \xe2\x80\x94| na\xc3\xafve|\xc2\xa0|\xe4\xb8\xad\xe6\x96\x87| "
                "\xf0\x9f\x98\x80!");
    check_split(PT_SPLIT_LLAMA3, c,
                "caf\xc3\xa9| \xe2\x80\x94| na\xc3\xafve|\xc2\xa0\xe4\xb8\xad\xe6\x96\x87| "
                "\xf0\x9f\x98\x80!");

    size_t k;
    CHECK_INT(pt_char_at((const unsigned char *)"\xe2\x80\x94", 3, 0, &k), PT_CH_OTHER);
    CHECK_INT(k, 3);
    CHECK_INT(pt_char_at((const unsigned char *)"\xe3\x80\x80", 3, 0, &k), PT_CH_SPACE);
    CHECK_INT(pt_char_at((const unsigned char *)"\xd9\xa3", 2, 0, &k), PT_CH_NUMBER);
    CHECK_INT(pt_char_at((const unsigned char *)"\xce\xbb", 2, 0, &k), PT_CH_LETTER);
    /* a lone continuation byte, and a sequence cut short: one byte, a letter */
    CHECK_INT(pt_char_at((const unsigned char *)"\x80", 1, 0, &k), PT_CH_LETTER);
    CHECK_INT(k, 1);
    CHECK_INT(pt_char_at((const unsigned char *)"\xe2\x80", 2, 0, &k), PT_CH_LETTER);
    CHECK_INT(k, 1);
    CHECK_INT(pt_char_at((const unsigned char *)"\xed\xa0\x80", 3, 0, &k), PT_CH_LETTER);
    CHECK_INT(k, 1); /* a UTF-16 surrogate is not UTF-8 */
}

static void test_gpt2_files(void)
{
    char dir[512];
    path_of(dir, sizeof dir, "gpt2");
    write_gpt2_dir(dir);
    pt_tokenizer *t = load_ok(dir);
    if (!t)
        return;
    CHECK_INT(pt_tokenizer_vocab(t), 269);
    CHECK(strcmp(pt_tokenizer_origin(t), dir) == 0);
    char about[1024];
    pt_tokenizer_describe(t, about, sizeof about);
    CHECK_STR_HAS(about, "vocab.json + merges.txt");
    CHECK_STR_HAS(about, "a vocabulary of 269 ids: 269 tokens (0 special)");
    CHECK_STR_HAS(about, "GPT-2's split");
    /* hello: h e -> he, l l -> ll, he ll -> hell, hell o -> hello (256..259); " world":
     * Ġ w -> Ġw (260), o r -> or (261), Ġw or -> Ġwor (262), then l and d */
    check_encodes(t, "hello world", (const uint32_t[]){259, 262, 'l', 'd'}, 4);
    /* the merge list's order decides: "b c" (rank 7) before "a b" (rank 8), "x y"
     * (rank 9) before "y z" (rank 10) */
    check_encodes(t, "abc", (const uint32_t[]){'a', 263}, 2);
    check_encodes(t, "xyz", (const uint32_t[]){265, 'z'}, 2);
    /* é's two bytes merge (rank 11); "café" is one piece */
    check_encodes(t, "caf\xc3\xa9", (const uint32_t[]){'c', 'a', 'f', 267}, 4);
    /* <|endoftext|> is an ordinary vocab.json entry no merge reaches */
    check_encodes(t, "<|", (const uint32_t[]){'<', '|'}, 2);
    check_all_round_trips(t);

    uint32_t *tok = (uint32_t *)1;
    int64_t n = -1;
    pt_err err = {{0}};
    CHECK_INT(pt_tokenizer_encode(t, "", 0, &tok, &n, &err), 0);
    CHECK(tok == NULL && n == 0);

    /* decoding: ids that are no token are errors, or <tok N> in printable text */
    char *text = NULL;
    size_t len;
    CHECK_INT(pt_tokenizer_decode(t, (const uint32_t[]){259, 269}, 2, &text, &len, &err), -1);
    CHECK_STR_HAS(err.msg, "token 269 at position 1 is not in the vocabulary of");
    CHECK_STR_HAS(err.msg, dir);
    CHECK(text == NULL);
    CHECK_INT(pt_tokenizer_decode(t, (const uint32_t[]){268, 262}, 2, &text, &len, &err), 0);
    CHECK(text && strcmp(text, "<|endoftext|> wor") == 0);
    free(text);
    char buf[64];
    const int32_t ids[] = {259, 1, 9, 10, 127, 262, -3, 5000, 268};
    len = pt_tokenizer_decode_text(t, ids, 9, buf, sizeof buf);
    CHECK(strcmp(buf, "hello\\x01\t\n\\x7f wor<tok -3><tok 5000><|endoftext|>") == 0);
    CHECK_INT(len, strlen(buf));
    len = pt_tokenizer_decode_text(t, ids, 9, buf, 10); /* "hello\x01" fits, "\t" not */
    CHECK(strcmp(buf, "hello\\x01") == 0);
    CHECK_INT(len, 9);
    len = pt_tokenizer_decode_text(t, ids, 9, buf, 5); /* "hello" needs 6: none */
    CHECK_INT(len, 0);
    CHECK(buf[0] == '\0');
    pt_tokenizer_free(t);
}

static void test_tokenizer_json(void)
{
    char path[512];
    path_of(path, sizeof path, "gpt2-tokenizer.json");
    write_gpt2_json(path, gpt2_pre, "");
    pt_tokenizer *t = load_ok(path);
    if (t) {
        CHECK_INT(pt_tokenizer_vocab(t), 269);
        check_encodes(t, "hello world", (const uint32_t[]){259, 262, 'l', 'd'}, 4);
        check_encodes(t, "abc", (const uint32_t[]){'a', 263}, 2);
        check_encodes(t, "caf\xc3\xa9", (const uint32_t[]){'c', 'a', 'f', 267}, 4);
        check_encodes(t, "\thello", (const uint32_t[]){'\t', 259}, 2); /* GPT-2's split */
        check_all_round_trips(t);
        pt_tokenizer_free(t);
    }

    path_of(path, sizeof path, "llama3-tokenizer.json");
    write_llama3_json(path);
    t = load_ok(path);
    if (!t)
        return;
    CHECK_INT(pt_tokenizer_vocab(t), 301);
    char about[1024];
    pt_tokenizer_describe(t, about, sizeof about);
    CHECK_STR_HAS(about, "tokenizer.json");
    CHECK_STR_HAS(about, "a vocabulary of 301 ids: 265 tokens (1 special)");
    CHECK_STR_HAS(about, "Llama 3's split");
    /* Llama 3's split keeps "\thello" one piece, a token itself (ignore_merges) */
    check_encodes(t, "\thello", (const uint32_t[]){260}, 1);
    check_encodes(t, "hello", (const uint32_t[]){259}, 1);
    /* numbers in threes: 123 (1 2 -> 12, 12 3 -> 123) and 45 */
    check_encodes(t, "12345", (const uint32_t[]){262, 263}, 2);
    /* the special token decodes, but text is never encoded as it */
    check_encodes(t, "<|", (const uint32_t[]){'<', '|'}, 2);
    char *text = NULL;
    size_t len;
    pt_err err = {{0}};
    CHECK_INT(pt_tokenizer_decode(t, (const uint32_t[]){259, 300}, 2, &text, &len, &err), 0);
    CHECK(text && strcmp(text, "hello<|end_of_text|>") == 0);
    free(text);
    CHECK_INT(pt_tokenizer_decode(t, (const uint32_t[]){280}, 1, &text, &len, &err), -1);
    CHECK_STR_HAS(err.msg, "token 280 at position 0 is not in the vocabulary");
    check_all_round_trips(t);
    pt_tokenizer_free(t);
}

static void test_tiktoken(void)
{
    char path[512];
    path_of(path, sizeof path, "ranks.tiktoken");
    static const char *const extra[] = {"he", "ll", "hell", "hello", " w", "or", " wor", "ab",
                                        "bc"};
    write_tiktoken(path, extra, 9);
    pt_tokenizer *t = load_ok(path);
    if (!t)
        return;
    CHECK_INT(pt_tokenizer_vocab(t), 265);
    char about[1024];
    pt_tokenizer_describe(t, about, sizeof about);
    CHECK_STR_HAS(about, "tiktoken");
    check_encodes(t, "hello world", (const uint32_t[]){259, 262, 'l', 'd'}, 4);
    check_encodes(t, "hellos", (const uint32_t[]){259, 's'}, 2);
    /* tiktoken merges the pair whose bytes together have the lowest rank: ab (263)
     * before bc (264) */
    check_encodes(t, "abc", (const uint32_t[]){263, 'c'}, 2);
    check_all_round_trips(t);
    pt_tokenizer_free(t);

    /* Llama 3's tokenizer.model has 128000 ranks; its 256 special tokens follow. */
    path_of(path, sizeof path, "llama3.model");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    char b64[16];
    for (int r = 0; r < 128000; r++) {
        unsigned char b[3] = {(unsigned char)r, (unsigned char)(r >> 8), (unsigned char)(r >> 16)};
        base64(b, r < 256 ? 1 : 3, b64);
        fprintf(f, "%s %d\n", b64, r);
    }
    fclose(f);
    t = load_ok(path);
    if (!t)
        return;
    CHECK_INT(pt_tokenizer_vocab(t), 128256);
    char *text = NULL;
    size_t len;
    pt_err err = {{0}};
    CHECK_INT(pt_tokenizer_decode(t, (const uint32_t[]){128000, 'h', 128009, 128006, 128255},
                                  5, &text, &len, &err), 0);
    CHECK(text && strcmp(text, "<|begin_of_text|>h<|eot_id|><|start_header_id|>"
                               "<|reserved_special_token_250|>") == 0);
    free(text);
    pt_tokenizer_free(t);
}

/* Text data through a tokenizer: the tokens of the whole file. */
static void test_data_with_tokenizer(void)
{
    char dir[512], path[512];
    path_of(dir, sizeof dir, "gpt2");
    pt_tokenizer *t = load_ok(dir);
    if (!t)
        return;
    path_of(path, sizeof path, "corpus.txt");
    write_text(path, "hello world abc");
    pt_tokens data;
    pt_err err = {{0}};
    CHECK_INT(pt_tokens_load_with(path, t, &data, &err), 0);
    CHECK_INT(data.token_bytes, 0);
    /* " abc": b c merge, and no merge joins the space and a */
    const uint32_t want[] = {259, 262, 'l', 'd', ' ', 'a', 263};
    CHECK_INT(data.n, 7);
    CHECK(data.n == 7 && memcmp(data.tok, want, sizeof want) == 0);
    CHECK_STR_HAS(data.origin, path);
    pt_tokens_free(&data);
    /* a token file is read as it is, whatever the tokenizer */
    path_of(path, sizeof path, "corpus.bin");
    CHECK_INT(pt_tokens_write(path, want, 7, 2, &err), 0);
    CHECK_INT(pt_tokens_load_with(path, t, &data, &err), 0);
    CHECK(data.n == 7 && memcmp(data.tok, want, sizeof want) == 0);
    CHECK_INT(data.token_bytes, 2);
    pt_tokens_free(&data);
    pt_tokenizer_free(t);
}

static void test_bad_files(void)
{
    char dir[512], path[600], other[600];
    path_of(dir, sizeof dir, "bad");
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/vocab.json", dir); /* a previous run's */
    remove(path);
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    remove(path);
    check_refused(dir, dir, "a folder without vocab.json and merges.txt, tokenizer.json or "
                            "tokenizer.model");
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    char *v = vocab_json();
    write_text(path, v);
    check_refused(dir, dir, "holds vocab.json but not merges.txt");
    /* vocab.json given on its own */
    check_refused(path, path, "a vocabulary alone (vocab.json); give the folder");

    /* merges.txt, line by line */
    snprintf(other, sizeof other, "%s/merges.txt", dir);
    write_text(other, "#version: 0.2\nh e\nl l x\n");
    check_refused(dir, other, "line 3: expected two tokens separated by one space");
    write_text(other, "h e\r\n\r\nq\xc4\xa0 z\n");   /* CRLF and a blank line are fine */
    check_refused(dir, other, "line 3: \"q \" is not in the vocabulary");
    write_text(other, "h e\nhe l\n");
    check_refused(dir, other, "line 2: the merged token \"hel\" is not in the vocabulary");
    write_text(other, "h e\nh e\n");
    check_refused(dir, other, "line 2: the merge repeats merge 1");
    write_text(other, "h e\nh \xd0\x80\n");
    check_refused(dir, other, "line 2: token \"\\xd0\\x80\" holds U+0400, which is not one of "
                              "GPT-2's byte-level characters");
    write_text(other, "h e\nh \xff\n");
    check_refused(dir, other, "line 2: token \"\\xff\" is not UTF-8");
    write_text(other, "h e\n");

    /* vocab.json, by field */
    write_text(path, "{\"a\": 1,\n \"b\": }");
    check_refused(dir, path, "line 2, column");
    write_text(path, "[1, 2]");
    check_refused(dir, path, "not an object of token -> id");
    write_text(path, "{\"a\": \"one\"}");
    check_refused(dir, path, "token \"a\": the id is not a whole number");
    write_text(path, "{\"a\": -1}");
    check_refused(dir, path, "token \"a\" has id -1, outside 0 to 16777215");
    write_text(path, "{\"a\": 1, \"b\": 1}");
    check_refused(dir, path, "id 1 is given to \"a\" and to \"b\"");
    write_text(path, "{\"a\": 1, \"a\": 2}");
    check_refused(dir, path, "duplicate object key");
    write_text(path, "{\"\\u0400\": 1}");
    check_refused(dir, path, "holds U+0400");
    /* all 256 bytes but one */
    char *hole = strstr(v, "\"A\": 65, ");
    CHECK(hole != NULL);
    if (hole)
        memmove(hole, hole + 9, strlen(hole + 9) + 1);
    write_text(path, v);
    check_refused(dir, path, "no token for the byte 0x41");
    free(v);

    /* tokenizer.json */
    path_of(path, sizeof path, "bad-tokenizer.json");
    write_text(path, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
    check_refused(path, path, "model.type is \"WordPiece\"; only BPE models");
    write_text(path, "{\"version\": \"1.0\"}");
    check_refused(path, path, "no \"model\" object");
    write_text(path, "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\"}}");
    check_refused(path, path, "normalizer is \"NFC\"");
    write_text(path, "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true}}");
    check_refused(path, path, "model.byte_fallback is true");
    write_text(path, "{\"model\": {\"type\": \"BPE\", \"continuing_subword_prefix\": \"##\"}}");
    check_refused(path, path, "model.continuing_subword_prefix is \"##\"");
    write_text(path, "{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": "
                     "\"BPE\"}}");
    check_refused(path, path, "pre_tokenizer is \"Whitespace\"");
    write_text(path, "{\"model\": {\"type\": \"BPE\"}}");
    check_refused(path, path, "no pre_tokenizer");
    write_text(path, "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true}, "
                     "\"model\": {\"type\": \"BPE\"}}");
    check_refused(path, path, "pre_tokenizer.add_prefix_space is true");
    write_text(path, "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
                     "\"Split\", \"pattern\": {\"Regex\": \"\\\\p{N}+\"}, \"behavior\": "
                     "\"Isolated\"}, {\"type\": \"ByteLevel\", \"use_regex\": false}]}, "
                     "\"model\": {\"type\": \"BPE\"}}");
    check_refused(path, path, "pre_tokenizer.pretokenizers[0].pattern.Regex \"\\x5cp{N}+\" "
                              "is neither GPT-2's nor Llama 3's");
    write_custom_json(path, "[]", "", "1");
    check_refused(path, path, "model.merges is not an array");
    write_custom_json(path, "[]", "", "[\"h e\", 7]");
    check_refused(path, path, "model.merges[1]: expected \"a b\" or [\"a\", \"b\"]");
    write_custom_json(path, "[]", "", "[\"h e x\"]");
    check_refused(path, path, "model.merges[0]: expected two tokens separated by one space");
    write_custom_json(path, "[]", "", "[[\"h\", \"e\"], [\"he\", \"q\"]]");
    check_refused(path, path, "model.merges[1]: the merged token \"heq\" is not in the "
                              "vocabulary");
    write_custom_json(path, "[{\"id\": \"x\", \"content\": \"<s>\"}]", "", "[]");
    check_refused(path, path, "added_tokens[0].id: not a whole number");
    write_custom_json(path, "[{\"id\": 400}]", "", "[]");
    check_refused(path, path, "added_tokens[0].content: not a string");
    write_custom_json(path, "[{\"id\": 104, \"content\": \"<s>\"}]", "", "[]");
    check_refused(path, path, "id 104 is given to \"h\" and to \"<s>\"");
    write_custom_json(path, "[]", "\"dropout\": 0.1, ", "[]");
    check_refused(path, path, "model.dropout is 0.1");
    write_custom_json(path, "[]", "", "[]"); /* no merges at all: a valid tokenizer */
    pt_tokenizer *t = load_ok(path);
    if (t)
        check_encodes(t, "he", (const uint32_t[]){'h', 'e'}, 2);
    pt_tokenizer_free(t);

    /* tiktoken */
    path_of(path, sizeof path, "bad.tiktoken");
    write_text(path, "YQ== 0\nYg== 1\nYw!= 2\n");
    check_refused(path, path, "line 3: \"Yw!=\" is not base64");
    write_text(path, "YQ== 0\nYg==\n");
    check_refused(path, path, "line 2: expected the token's bytes in base64, a space and its rank");
    write_text(path, "YQ== 0\nYg== one\n");
    check_refused(path, path, "line 2: the rank \"one\" is not a whole number");
    write_text(path, "YQ== 0\nYQ== 1\n");
    check_refused(path, path, "token \"a\" appears twice, as ids 0 and 1");
    write_text(path, "YQ== 99999999\n");
    check_refused(path, path, "line 1: rank 99999999 is beyond 16777215");
    write_text(path, "YQ== 0\n");
    check_refused(path, path, "no token for the byte 0x00");
    check_write_file(path, "\x0a\x05<unk>\x00\x01", 10); /* the start of a SentencePiece model */
    check_refused(path, path, "binary data, not a tiktoken rank file");
    path_of(path, sizeof path, "missing.model");
    check_refused(path, path, "cannot read");
}

int main(int argc, char **argv)
{
    if (argc > 1)
        scratch = argv[1];
    make_alphabet();
    test_split_patterns();
    test_gpt2_files();
    test_tokenizer_json();
    test_tiktoken();
    test_data_with_tokenizer();
    test_bad_files();
    return pt_check_result();
}
