/*
 * Internal to the tokenizers (runtime/tokenizer.c: the table of tokens and decoding;
 * tokenizer_read.c: the files; tokenizer_encode.c: pre-tokenizing and merging): the
 * table a loaded tokenizer holds, how the readers fill it, and the pre-tokenizer on its
 * own for tests/runtime/test_tokenizer.c.
 */
#ifndef PT_TOKENIZER_INTERNAL_H
#define PT_TOKENIZER_INTERNAL_H

#include "runtime.h"

/* The three kinds of file (pt_tokenizer_load). */
typedef enum { PT_TOK_GPT2_FILES, PT_TOK_HF_JSON, PT_TOK_TIKTOKEN } pt_tokenizer_format;

/* The pre-tokenizers: GPT-2's split pattern (openai/gpt-2, src/encoder.py)
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * and Llama 3's (meta-llama/llama3, llama/tokenizer.py pat_str; also cl100k_base's)
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
typedef enum { PT_SPLIT_GPT2, PT_SPLIT_LLAMA3 } pt_split_pattern;

/* How the pairs of a piece are ranked (tokenizer_encode.c): by the merge list of
 * merges.txt / tokenizer.json (pair (a, b) has the rank of its line and makes the token
 * the list's vocabulary names), or as tiktoken does, by the rank of the concatenated
 * bytes, which is also the merged token's id. */
typedef enum { PT_MERGE_LIST, PT_MERGE_CONCAT } pt_merge_rule;

struct pt_tokenizer {
    char origin[512];             /* the path it was read from, for messages */
    pt_tokenizer_format format;
    pt_split_pattern split;
    pt_merge_rule merge;
    bool whole_piece_first;       /* a piece that is itself a token is not merged
                                     (tiktoken; tokenizer.json's model.ignore_merges) */
    int64_t vocab;                /* v: the highest id + 1 */
    int64_t n_tokens;             /* ids that are tokens (v minus the gaps) */
    int64_t n_special;            /* of which special (decoded, never encoded) */
    /* id -> its bytes: pool[at[id], at[id] + len[id]); len -1 where no token has the id */
    int64_t *at;                  /* (v) */
    int32_t *len;                 /* (v) */
    unsigned char *pool;
    size_t pool_bytes, pool_cap;
    /* bytes -> id of the ordinary (BPE) tokens: open addressing, 0 empty, else id + 1 */
    uint32_t *find;
    size_t find_cap;              /* a power of two */
    /* merge list: key (a << 32 | b) + 1, 0 empty; its rank and the token it makes */
    uint64_t *pair_key;
    uint32_t *pair_rank, *pair_made;
    size_t pair_cap;              /* a power of two */
    uint32_t byte_id[256];        /* the token of each single byte */
};

/* Ids at or above this are refused: the largest vocabularies in use have about 2^18
 * tokens, so a larger id is a corrupt file, not a tokenizer worth a table that big. */
enum { PT_TOK_MAX_ID = 1 << 24 };

/* ---- Filling the table (tokenizer.c, for tokenizer_read.c) -------------------------- */

/* A token as read, before the count of ids is known. */
typedef struct {
    uint32_t id;
    int32_t len;
    bool special;
    int64_t at;        /* in the tokenizer's pool */
} pt_tok_entry;

/* What a reader gathers: the tokens so far and scratch buffers. Zero-initialised. */
typedef struct {
    pt_tok_entry *e;
    size_t n, cap;
    unsigned char *scratch, *sides; /* a decoded string; the two sides of a merge */
    size_t scratch_cap, sides_cap;
} pt_tok_builder;

void pt_tok_builder_free(pt_tok_builder *b);
/* The builder's scratch buffer with room for n bytes; NULL when out of memory. */
unsigned char *pt_tok_scratch(pt_tok_builder *b, size_t n);
/* Adds token `id` (below PT_TOK_MAX_ID) with bytes[0, n) (not empty); special tokens
 * only decode. `where` names its place (file and line or field) for messages. */
int pt_tok_add(pt_tokenizer *t, pt_tok_builder *b, int64_t id, const unsigned char *bytes,
               size_t n, bool special, const char *where, pt_err *err);
/* Builds the id and byte tables from the tokens added, once all are: each id and each
 * ordinary token's bytes once, all 256 single bytes present (t->format set first). */
int pt_tok_build(pt_tokenizer *t, pt_tok_builder *b, const char *where, pt_err *err);
/* Room in the merge table for n merges (after pt_tok_build). */
int pt_tok_pairs_reserve(pt_tokenizer *t, size_t n, const char *where, pt_err *err);
/* Merge number `rank`, given as its two byte-level strings a[0, na) and b[0, nb): both
 * and their concatenation must be tokens, and the pair new. */
int pt_tok_add_merge_strings(pt_tokenizer *t, pt_tok_builder *bd, const char *a, size_t na,
                             const char *b, size_t nb, uint32_t rank, const char *where,
                             pt_err *err);
/* A byte-level string (a vocab.json key, one side of a merge) to the bytes it stands
 * for, into out (at least n bytes); *bad_cp is the first character outside GPT-2's
 * alphabet (UINT32_MAX: the string is not UTF-8). */
int pt_tok_bytelevel_decode(const char *s, size_t n, unsigned char *out, size_t *out_n,
                            uint32_t *bad_cp);
/* The message for a string s[0, n) that pt_tok_bytelevel_decode refused. */
int pt_tok_bytelevel_error(const char *where, const char *s, size_t n, uint32_t bad_cp,
                           pt_err *err);
/* A token's bytes for a message: printable ASCII as it is, the rest as \xNN, at most
 * about 40 bytes of it, into out (cap >= 64). */
const char *pt_tok_printable(const unsigned char *b, size_t n, char *out, size_t cap);
/* The whole of a regular file of at most 1 GiB, NUL-terminated (*n excludes the NUL). */
int pt_tok_read_all(const char *path, char **buf, size_t *n, pt_err *err);

/* ---- Looking up (tokenizer.c, for tokenizer_encode.c) -------------------------------- */

/* The id of the ordinary token with bytes b[0, n), or -1. */
int64_t pt_tok_find(const pt_tokenizer *t, const unsigned char *b, size_t n);
/* Whether the merge list merges (a, b); its rank and the token made. */
bool pt_tok_pair(const pt_tokenizer *t, uint32_t a, uint32_t b, uint32_t *rank,
                 uint32_t *made);

/* ---- Pre-tokenization (tokenizer_encode.c) --------------------------------------- */

/* Character classes of the split patterns' \p{L}, \p{N} and \s. */
typedef enum { PT_CH_LETTER, PT_CH_NUMBER, PT_CH_SPACE, PT_CH_OTHER } pt_char_class;

/* The class of the character at text[at] (at < len) and its length in bytes. */
pt_char_class pt_char_at(const unsigned char *text, size_t len, size_t at, size_t *bytes);
/* The end of the piece that starts at text[at] (at < len) under the pattern: always
 * beyond at. */
size_t pt_split_next(pt_split_pattern p, const unsigned char *text, size_t len, size_t at);

#endif
