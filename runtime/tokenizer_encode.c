/*
 * Encoding with a loaded tokenizer (tokenizer_read.c): the text is cut into pieces by the
 * tokenizer's split pattern, and each piece, as bytes, is merged pair by pair, the
 * pair of lowest rank first (leftmost among equals), until no pair of neighbours has a
 * rank. This is the merge loop of Hugging Face's tokenizers (models/bpe/word.rs,
 * merge_all: a heap of (rank, position)) and of tiktoken (byte_pair_merge), which give
 * the same tokens.
 *
 * The split patterns are implemented by hand rather than by a regex engine, following
 * the alternation of each pattern in order (the first alternative that matches at a
 * position wins, as in a backtracking regex). \s, \p{L} and \p{N} are exact for ASCII
 * and for the Unicode White_Space characters; for other non-ASCII characters they are
 * an approximation: the punctuation, symbol, mark and digit blocks in `not_letters`
 * below (Latin-1, combining diacritics, general punctuation, currency, arrows and
 * mathematical symbols, box drawing, dingbats, CJK punctuation, fullwidth forms,
 * emoji, ...) count as what they are, and every other non-ASCII character counts as a
 * letter, as does each byte that is not part of well-formed UTF-8. Text in other
 * scripts with their own digits or marks may then be cut into fewer pieces than the
 * real pattern would; the tokens still decode to exactly the text.
 */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- Character classes --------------------------------------------------------------- */

enum { L = PT_CH_LETTER, N = PT_CH_NUMBER, S = PT_CH_SPACE, O = PT_CH_OTHER };

/* Non-ASCII code points that are not letters, sorted (Unicode Character Database,
 * DerivedGeneralCategory.txt, for the blocks named above; White_Space from
 * PropList.txt in full). */
static const struct {
    uint32_t lo, hi;
    uint8_t cls;
} not_letters[] = {
    {0x80, 0x84, O},       {0x85, 0x85, S},       {0x86, 0x9f, O},       {0xa0, 0xa0, S},
    {0xa1, 0xa9, O},       {0xab, 0xb1, O},       {0xb2, 0xb3, N},       {0xb4, 0xb4, O},
    {0xb6, 0xb8, O},       {0xb9, 0xb9, N},       {0xbb, 0xbb, O},       {0xbc, 0xbe, N},
    {0xbf, 0xbf, O},       {0xd7, 0xd7, O},       {0xf7, 0xf7, O},       {0x300, 0x36f, O},
    {0x37e, 0x37e, O},     {0x387, 0x387, O},     {0x483, 0x489, O},     {0x591, 0x5c7, O},
    {0x600, 0x61f, O},     {0x64b, 0x65f, O},     {0x660, 0x669, N},     {0x66a, 0x66d, O},
    {0x670, 0x670, O},     {0x6d4, 0x6d4, O},     {0x6d6, 0x6ed, O},     {0x6f0, 0x6f9, N},
    {0x900, 0x903, O},     {0x93a, 0x93c, O},     {0x93e, 0x94f, O},     {0x951, 0x957, O},
    {0x962, 0x965, O},     {0x966, 0x96f, N},     {0x970, 0x970, O},     {0xe31, 0xe31, O},
    {0xe34, 0xe3f, O},     {0xe47, 0xe4f, O},     {0xe50, 0xe59, N},     {0xe5a, 0xe5b, O},
    {0x1680, 0x1680, S},   {0x2000, 0x200a, S},   {0x200b, 0x2027, O},   {0x2028, 0x2029, S},
    {0x202a, 0x202e, O},   {0x202f, 0x202f, S},   {0x2030, 0x205e, O},   {0x205f, 0x205f, S},
    {0x2060, 0x206f, O},   {0x2070, 0x2070, N},   {0x2074, 0x2079, N},   {0x207a, 0x207e, O},
    {0x2080, 0x2089, N},   {0x208a, 0x208e, O},   {0x20a0, 0x20ff, O},   {0x2100, 0x2101, O},
    {0x2103, 0x2106, O},   {0x2108, 0x2109, O},   {0x2114, 0x2114, O},   {0x2116, 0x2118, O},
    {0x211e, 0x2123, O},   {0x2125, 0x2125, O},   {0x2127, 0x2127, O},   {0x2129, 0x2129, O},
    {0x212e, 0x212e, O},   {0x213a, 0x213b, O},   {0x2140, 0x2144, O},   {0x214a, 0x214d, O},
    {0x214f, 0x214f, O},   {0x2150, 0x2182, N},   {0x2185, 0x2189, N},   {0x218a, 0x245f, O},
    {0x2460, 0x249b, N},   {0x249c, 0x24e9, O},   {0x24ea, 0x24ff, N},   {0x2500, 0x2775, O},
    {0x2776, 0x2793, N},   {0x2794, 0x2bff, O},   {0x2e00, 0x2e7f, O},   {0x2ff0, 0x2fff, O},
    {0x3000, 0x3000, S},   {0x3001, 0x3004, O},   {0x3007, 0x3007, N},   {0x3008, 0x3020, O},
    {0x3021, 0x3029, N},   {0x302a, 0x3030, O},   {0x3036, 0x3037, O},   {0x3038, 0x303a, N},
    {0x303d, 0x303f, O},   {0x309b, 0x309c, O},   {0x30a0, 0x30a0, O},   {0x30fb, 0x30fb, O},
    {0xfe00, 0xfe19, O},   {0xfe20, 0xfe6b, O},   {0xfeff, 0xfeff, O},   {0xff01, 0xff0f, O},
    {0xff10, 0xff19, N},   {0xff1a, 0xff20, O},   {0xff3b, 0xff40, O},   {0xff5b, 0xff65, O},
    {0xffe0, 0xffee, O},   {0xfff9, 0xfffd, O},   {0x1f000, 0x1faff, O}, {0xe0000, 0xe007f, O},
    {0xe0100, 0xe01ef, O},
};

static pt_char_class class_of(uint32_t cp)
{
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))
            return PT_CH_LETTER;
        if (cp >= '0' && cp <= '9')
            return PT_CH_NUMBER;
        if (cp == ' ' || (cp >= '\t' && cp <= '\r'))
            return PT_CH_SPACE;
        return PT_CH_OTHER;
    }
    size_t lo = 0, hi = sizeof not_letters / sizeof *not_letters;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < not_letters[mid].lo)
            hi = mid;
        else if (cp > not_letters[mid].hi)
            lo = mid + 1;
        else
            return (pt_char_class)not_letters[mid].cls;
    }
    return PT_CH_LETTER;
}

pt_char_class pt_char_at(const unsigned char *text, size_t len, size_t at, size_t *bytes)
{
    if (text[at] < 0x80) {
        *bytes = 1;
        return class_of(text[at]);
    }
    uint32_t cp;
    size_t k = pt_utf8_char(text + at, len - at, &cp);
    if (k == 0) { /* not UTF-8: one byte, a letter */
        *bytes = 1;
        return PT_CH_LETTER;
    }
    *bytes = k;
    return class_of(cp);
}

/* ---- The split patterns --------------------------------------------------------------- */

/* The end of the run of characters of class c from at. */
static size_t run_of(const unsigned char *s, size_t len, size_t at, pt_char_class c)
{
    size_t k;
    while (at < len && pt_char_at(s, len, at, &k) == c)
        at += k;
    return at;
}

static bool is_class(const unsigned char *s, size_t len, size_t at, pt_char_class c)
{
    size_t k;
    return at < len && pt_char_at(s, len, at, &k) == c;
}

/* 's|'t|'re|'ve|'m|'ll|'d at `at` (ASCII case folded when fold): its end, or 0. */
static size_t contraction(const unsigned char *s, size_t len, size_t at, bool fold)
{
    static const char *const tails[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    if (s[at] != '\'')
        return 0;
    for (int i = 0; i < 7; i++) {
        size_t n = strlen(tails[i]);
        if (at + 1 + n > len)
            continue;
        size_t j = 0;
        for (; j < n; j++) {
            unsigned char c = s[at + 1 + j];
            if (fold && c >= 'A' && c <= 'Z')
                c = (unsigned char)(c - 'A' + 'a');
            if (c != (unsigned char)tails[i][j])
                break;
        }
        if (j == n)
            return at + 1 + n;
    }
    return 0;
}

/* \s+(?!\S)|\s+ at a whitespace character: the run of whitespace, less its last
 * character when more than one precede a non-space (that one starts the next piece). */
static size_t trailing_space(const unsigned char *s, size_t len, size_t at)
{
    size_t last = at, end = at, k;
    while (end < len && pt_char_at(s, len, end, &k) == PT_CH_SPACE) {
        last = end;
        end += k;
    }
    return end < len && last > at ? last : end;
}

/* ' ?X+' for X the class c: the run of c after an optional space, or 0. */
static size_t space_then_run(const unsigned char *s, size_t len, size_t at, pt_char_class c)
{
    size_t from = s[at] == ' ' ? at + 1 : at;
    return is_class(s, len, from, c) ? run_of(s, len, from, c) : 0;
}

static size_t split_gpt2(const unsigned char *s, size_t len, size_t at)
{
    size_t end;
    if ((end = contraction(s, len, at, false)) ||
        (end = space_then_run(s, len, at, PT_CH_LETTER)) ||
        (end = space_then_run(s, len, at, PT_CH_NUMBER)) ||
        (end = space_then_run(s, len, at, PT_CH_OTHER)))
        return end;
    return trailing_space(s, len, at);
}

static bool is_cr_lf(unsigned char c) { return c == '\r' || c == '\n'; }

static size_t split_llama3(const unsigned char *s, size_t len, size_t at)
{
    size_t end, k;
    if ((end = contraction(s, len, at, true)))
        return end;
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    pt_char_class c = pt_char_at(s, len, at, &k);
    if (c == PT_CH_LETTER)
        return run_of(s, len, at, PT_CH_LETTER);
    if (c != PT_CH_NUMBER && !is_cr_lf(s[at]) && is_class(s, len, at + k, PT_CH_LETTER))
        return run_of(s, len, at + k, PT_CH_LETTER);
    /* \p{N}{1,3} */
    if (c == PT_CH_NUMBER) {
        end = at;
        for (int i = 0; i < 3 && end < len && pt_char_at(s, len, end, &k) == PT_CH_NUMBER; i++)
            end += k;
        return end;
    }
    /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
    if ((end = space_then_run(s, len, at, PT_CH_OTHER))) {
        while (end < len && is_cr_lf(s[end]))
            end++;
        return end;
    }
    /* \s*[\r\n]+: the whitespace run up to its last \r or \n */
    if (c == PT_CH_SPACE) {
        size_t last_crlf = 0;
        for (end = at; end < len && pt_char_at(s, len, end, &k) == PT_CH_SPACE; end += k)
            if (is_cr_lf(s[end]))
                last_crlf = end + 1;
        if (last_crlf)
            return last_crlf;
    }
    return trailing_space(s, len, at);
}

size_t pt_split_next(pt_split_pattern p, const unsigned char *text, size_t len, size_t at)
{
    return p == PT_SPLIT_GPT2 ? split_gpt2(text, len, at) : split_llama3(text, len, at);
}

/* ---- Merging a piece ------------------------------------------------------------------- */

/* A candidate merge of the symbol at `pos` with its right neighbour, whose ids were
 * a and b when it was found (it is stale once they have changed). */
typedef struct {
    uint32_t rank, pos, a, b, made;
} candidate;

/* Per-piece working memory, reused from piece to piece. */
typedef struct {
    uint32_t *id;          /* (m) the symbol starting at byte i; DEAD inside a symbol */
    int64_t *next;         /* (m) the next symbol's start, m at the end */
    int64_t *prev;         /* (m) the previous symbol's start, -1 at the start */
    candidate *heap;       /* min-heap by (rank, pos) */
    size_t heap_n, cap;    /* cap: bytes the arrays hold */
} scratch;

#define DEAD UINT32_MAX

static bool before(const candidate *x, const candidate *y)
{
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static void heap_push(scratch *w, candidate c)
{
    size_t i = w->heap_n++;
    w->heap[i] = c;
    while (i > 0 && before(&w->heap[i], &w->heap[(i - 1) / 2])) {
        candidate t = w->heap[i];
        w->heap[i] = w->heap[(i - 1) / 2];
        w->heap[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static candidate heap_pop(scratch *w)
{
    candidate top = w->heap[0];
    w->heap[0] = w->heap[--w->heap_n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->heap_n && before(&w->heap[l], &w->heap[m]))
            m = l;
        if (r < w->heap_n && before(&w->heap[r], &w->heap[m]))
            m = r;
        if (m == i)
            break;
        candidate t = w->heap[i];
        w->heap[i] = w->heap[m];
        w->heap[m] = t;
        i = m;
    }
    return top;
}

static int scratch_reserve(scratch *w, size_t m)
{
    if (m <= w->cap)
        return 0;
    /* the heap holds the m - 1 first pairs and at most two per merge, m - 1 merges */
    if (m > SIZE_MAX / (3 * sizeof(candidate)))
        return -1;
    uint32_t *id = realloc(w->id, m * sizeof *id);
    if (id)
        w->id = id;
    int64_t *next = realloc(w->next, m * sizeof *next);
    if (next)
        w->next = next;
    int64_t *prev = realloc(w->prev, m * sizeof *prev);
    if (prev)
        w->prev = prev;
    candidate *heap = realloc(w->heap, 3 * m * sizeof *heap);
    if (heap)
        w->heap = heap;
    if (!id || !next || !prev || !heap)
        return -1;
    w->cap = m;
    return 0;
}

/* Pushes the merge of the symbol at pos with its right neighbour, when it has one. */
static void consider(const pt_tokenizer *t, scratch *w, const unsigned char *s, size_t m,
                     int64_t pos)
{
    if (pos < 0 || w->next[pos] >= (int64_t)m)
        return;
    int64_t right = w->next[pos];
    uint32_t a = w->id[pos], b = w->id[right], rank, made;
    if (t->merge == PT_MERGE_LIST) {
        if (!pt_tok_pair(t, a, b, &rank, &made))
            return;
    } else { /* tiktoken: the rank of the two symbols' bytes together, which are
              * contiguous in the piece */
        int64_t id = pt_tok_find(t, s + pos, (size_t)(w->next[right] - pos));
        if (id < 0)
            return;
        rank = made = (uint32_t)id;
    }
    heap_push(w, (candidate){.rank = rank, .pos = (uint32_t)pos, .a = a, .b = b, .made = made});
}

/* The tokens of piece s[0, m) appended to out. */
static void merge_piece(const pt_tokenizer *t, scratch *w, const unsigned char *s, size_t m,
                        uint32_t *out, int64_t *n)
{
    int64_t id;
    if (t->whole_piece_first && (id = pt_tok_find(t, s, m)) >= 0) {
        out[(*n)++] = (uint32_t)id;
        return;
    }
    for (size_t i = 0; i < m; i++) {
        w->id[i] = t->byte_id[s[i]];
        w->next[i] = (int64_t)i + 1;
        w->prev[i] = (int64_t)i - 1;
    }
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < m; i++)
        consider(t, w, s, m, (int64_t)i);
    while (w->heap_n) {
        candidate c = heap_pop(w);
        int64_t right = w->next[c.pos];
        if (w->id[c.pos] != c.a || right >= (int64_t)m || w->id[right] != c.b)
            continue; /* stale: a neighbour has merged since */
        w->id[c.pos] = c.made;
        w->id[right] = DEAD;
        w->next[c.pos] = w->next[right];
        if (w->next[right] < (int64_t)m)
            w->prev[w->next[right]] = c.pos;
        consider(t, w, s, m, w->prev[c.pos]);
        consider(t, w, s, m, c.pos);
    }
    for (int64_t i = 0; i < (int64_t)m; i = w->next[i])
        out[(*n)++] = w->id[i];
}

int pt_tokenizer_encode(const pt_tokenizer *t, const char *text, size_t len, uint32_t **tok,
                        int64_t *n, pt_err *err)
{
    const unsigned char *s = (const unsigned char *)text;
    *tok = NULL;
    *n = 0;
    scratch w = {0};
    size_t cap = 0;
    uint32_t *out = NULL;
    int rc = 0;
    for (size_t at = 0; at < len && rc == 0;) {
        size_t end = pt_split_next(t->split, s, len, at), m = end - at;
        if (m >= DEAD) { /* positions in the merge heap are 32-bit */
            rc = pt_err_set(err, "encoding %zu bytes: a piece of %zu bytes without a break is "
                                 "too long", len, m);
            break;
        }
        /* a piece of m bytes gives at most m tokens */
        if ((uint64_t)*n + m > cap) {
            size_t want = cap ? cap : 1024;
            while (want < (size_t)*n + m)
                want = want <= SIZE_MAX / 2 ? 2 * want : SIZE_MAX;
            uint32_t *o = want <= SIZE_MAX / sizeof *o ? realloc(out, want * sizeof *o) : NULL;
            if (!o) {
                rc = pt_err_set(err, "encoding %zu bytes: out of memory for %zu tokens", len,
                                want);
                break;
            }
            out = o;
            cap = want;
        }
        if (scratch_reserve(&w, m) != 0) {
            rc = pt_err_set(err, "encoding %zu bytes: out of memory for a piece of %zu", len, m);
            break;
        }
        merge_piece(t, &w, s + at, m, out, n);
        at = end;
    }
    free(w.id);
    free(w.next);
    free(w.prev);
    free(w.heap);
    if (rc) {
        free(out);
        *n = 0;
        return -1;
    }
    *tok = out;
    return 0;
}
