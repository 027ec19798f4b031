#!/bin/sh
# pttokenize as a user runs it: a small text split into llm.c token files whose bytes
# are checked, a real document (the GPL-3 text where Debian ships it), a token file
# re-split as it is, BPE tokenizers the test writes (a tiktoken rank file, and a
# tokenizer.json whose vocabulary needs uint32 tokens), and every bad input refused with
# one clear message, a non-zero exit and no output file left behind.
#   usage: cli_pttokenize.sh PATH/TO/pttokenize
set -u
tok="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
cd "$tmp" || exit 1

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run EXPECTED_EXIT ARGS...: runs pttokenize, keeping stdout in $tmp/out, stderr in $tmp/err.
run() {
    want=$1; shift
    "$tok" "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" = "$want" ] || fail "pttokenize $* exited $got, want $want; stderr: $(cat "$tmp/err")"
}
out_has() { grep -q -- "$1" "$tmp/out" || fail "stdout lacks '$1' ($2); got: $(cat "$tmp/out")"; }
err_has() { grep -q -- "$1" "$tmp/err" || fail "stderr lacks '$1' ($2); got: $(cat "$tmp/err")"; }
# refused WHAT MESSAGE ARGS...: exit 1, one line on stderr, nothing on stdout, no .bin left.
refused() {
    what=$1; msg=$2; shift 2
    rm -f "$tmp"/*.bin
    run 1 "$@"
    err_has "$msg" "$what"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "want one error line ($what), got: $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] || fail "stdout not empty on error ($what)"
    for f in "$tmp"/*.bin "$tmp"/*.tmp-*; do
        [ -e "$f" ] && fail "$f left behind ($what)"
    done
}
# tokens FILE: the uint16 tokens of a token file, one per line.
tokens() { od -An -v -tu2 -j1024 "$1" | tr -s ' ' '\n' | grep -v '^$'; }
# header FILE: magic, version and count.
header() { od -An -v -td4 -N12 "$1" | tr -s ' ' ' ' | sed 's/^ //'; }
# bytes FILE: the file's bytes as unsigned numbers, one per line.
bytes() { od -An -v -tu1 "$1" | tr -s ' ' '\n' | grep -v '^$'; }

# ---- help ------------------------------------------------------------------------
run 0 --help
out_has "usage: pttokenize INPUT OUTPUT_PREFIX" "--help shows the usage"
out_has "--val-fraction" "--help lists --val-fraction"
run 0 -h
out_has "usage:" "-h shows the usage"

# ---- a small text, byte by byte --------------------------------------------------
printf 'abcdefghijklmnopqrst' >"$tmp/small.txt"    # 20 bytes
run 0 "$tmp/small.txt" "$tmp/small" --val-fraction 0.25 --seq 4
out_has "small.txt: 20 tokens" "the input's count"
out_has "small_train.bin: 15 tokens" "the training count"
out_has "small_val.bin: 5 tokens" "the validation count"
[ "$(header "$tmp/small_train.bin")" = "20240520 1 15" ] ||
    fail "train header is '$(header "$tmp/small_train.bin")'"
[ "$(header "$tmp/small_val.bin")" = "20240520 1 5" ] ||
    fail "val header is '$(header "$tmp/small_val.bin")'"
[ "$(wc -c <"$tmp/small_train.bin")" -eq $((1024 + 2 * 15)) ] || fail "train file size"
[ "$(wc -c <"$tmp/small_val.bin")" -eq $((1024 + 2 * 5)) ] || fail "val file size"
[ "$(tokens "$tmp/small_val.bin" | tr '\n' ' ')" = "112 113 114 115 116 " ] ||
    fail "val tokens are '$(tokens "$tmp/small_val.bin" | tr '\n' ' ')', want the bytes of pqrst"
[ "$(tokens "$tmp/small_train.bin" | head -1)" = 97 ] || fail "train starts with 'a'"
# --opt=value works too, and defaults give validation at least seq+1 tokens.
run 0 "$tmp/small.txt" "$tmp/eq" --val-fraction=0.5 --seq=2
out_has "eq_val.bin: 10 tokens" "--val-fraction=0.5"

# Bytes outside ASCII are tokens 128..255.
printf '\033\001\377\200hello world\n' >"$tmp/bin.txt"
run 0 "$tmp/bin.txt" "$tmp/bin" --val-fraction 0.5 --seq 2
tokens "$tmp/bin_train.bin" >"$tmp/t1"
tokens "$tmp/bin_val.bin" >>"$tmp/t1"
bytes "$tmp/bin.txt" >"$tmp/t2"
cmp -s "$tmp/t1" "$tmp/t2" || fail "tokens of bin.txt are not its bytes"

# ---- a token file as input is split as it is --------------------------------------
run 0 "$tmp/small_train.bin" "$tmp/again" --val-fraction 0.2 --seq 4
out_has "small_train.bin: 15 tokens" "a token file is read as tokens, not bytes"
out_has "again_val.bin: 5 tokens" "and split by count"
[ "$(tokens "$tmp/again_val.bin" | tr '\n' ' ')" = "107 108 109 110 111 " ] ||
    fail "re-split val tokens are '$(tokens "$tmp/again_val.bin" | tr '\n' ' ')'"

# ---- BPE tokenizers ------------------------------------------------------------------
# tiktoken ranks: byte b has rank b, then "he" 256 and "the" 257.
for b in $(seq 0 255); do
    printf "%s %d\n" "$(printf "\\$(printf %03o "$b")" | base64)" "$b"
done >"$tmp/ranks.tiktoken"
printf 'aGU= 256\ndGhl 257\n' >>"$tmp/ranks.tiktoken"
printf 'the hehe hello' >"$tmp/he.txt"
run 0 "$tmp/he.txt" "$tmp/he" --tokenizer "$tmp/ranks.tiktoken" --val-fraction 0.5 --seq 2
out_has "tokenizer $tmp/ranks.tiktoken (tiktoken ranks): a vocabulary of 258 ids" "the tokenizer is named"
out_has "he.txt: 9 tokens" "the text's token count"
out_has "uint16 tokens (magic 20240520)" "a vocabulary of 258 fits uint16"
out_has "train with: ptrun PLAN.json --data $tmp/he_train.bin --val-data $tmp/he_val.bin --tokenizer $tmp/ranks.tiktoken" \
    "the ptrun command for these files"
# "the" is a token; " hehe" is " ", he, he after merging (the space has no merge);
# " hello" is " ", he, l, l, o
[ "$(tokens "$tmp/he_train.bin" | tr '\n' ' ')$(tokens "$tmp/he_val.bin" | tr '\n' ' ')" = \
  "257 32 256 256 32 256 108 108 111 " ] ||
    fail "tiktoken tokens are '$(tokens "$tmp/he_train.bin" | tr '\n' ' ')$(tokens "$tmp/he_val.bin" | tr '\n' ' ')'"

# tokenizer.json: GPT-2's byte-level alphabet as JSON escapes (bytes_to_unicode of
# openai/gpt-2 src/encoder.py), the merge "h e", and a special token at id 70000: a
# vocabulary beyond 65536, so the files hold uint32 tokens (llm.c's Llama 3 format).
awk 'BEGIN {
    n = 0; printf "{\"added_tokens\": [{\"id\": 70000, \"content\": \"<|big|>\"}], "
    printf "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
    printf "\"add_prefix_space\": false}, \"model\": {\"type\": \"BPE\", \"vocab\": {"
    for (b = 0; b < 256; b++) {
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) cp = b
        else cp = 256 + n++
        printf "\"\\u%04x\": %d, ", cp, b
    }
    printf "\"he\": 256}, \"merges\": [\"h e\"]}}\n"
}' >"$tmp/tokenizer.json"
run 0 "$tmp/he.txt" "$tmp/big" --tokenizer "$tmp/tokenizer.json" --val-fraction 0.5 --seq 2
out_has "a vocabulary of 70001 ids: 258 tokens (1 special)" "added tokens count in the vocabulary"
out_has "he.txt: 10 tokens" "the text through GPT-2's split and the merge"
out_has "uint32 tokens (magic 20240801)" "a vocabulary beyond 65536 needs uint32"
[ "$(header "$tmp/big_train.bin")" = "20240801 7 5" ] ||
    fail "uint32 train header is '$(header "$tmp/big_train.bin")', want llm.c's 20240801 7 5"
[ "$(wc -c <"$tmp/big_train.bin")" -eq $((1024 + 4 * 5)) ] || fail "uint32 train file size"
tokens32() { od -An -v -tu4 -j1024 "$1" | tr -s ' ' '\n' | grep -v '^$' | tr '\n' ' '; }
[ "$(tokens32 "$tmp/big_train.bin")$(tokens32 "$tmp/big_val.bin")" = \
  "116 256 32 256 256 32 256 108 108 111 " ] ||
    fail "uint32 tokens of he.txt are '$(tokens32 "$tmp/big_train.bin")$(tokens32 "$tmp/big_val.bin")'"
mkdir "$tmp/in" && cp "$tmp/he_train.bin" "$tmp/in/"   # refused() removes $tmp/*.bin
head -256 "$tmp/ranks.tiktoken" >"$tmp/bytes.tiktoken"     # the bytes alone: 256 ids
# A token file given with --tokenizer is split as it is, in its own width.
run 0 "$tmp/big_train.bin" "$tmp/big2" --tokenizer "$tmp/tokenizer.json" --val-fraction 0.4 --seq 1
out_has "big2_val.bin: 2 tokens" "a uint32 token file re-split"
[ "$(header "$tmp/big2_val.bin")" = "20240801 7 2" ] || fail "re-split keeps uint32"

# ---- a real document ---------------------------------------------------------------
gpl=/usr/share/common-licenses/GPL-3
if [ -r "$gpl" ]; then
    n=$(wc -c <"$gpl")
    run 0 "$gpl" "$tmp/gpl"
    val=$(awk -v n="$n" 'BEGIN { v = int(n * 0.1 + 0.5); if (v < 65) v = 65; print v }')
    out_has "GPL-3: $n tokens" "the GPL's byte count"
    out_has "gpl_val.bin: $val tokens" "a tenth for validation"
    out_has "gpl_train.bin: $((n - val)) tokens" "the rest for training"
    tokens "$tmp/gpl_train.bin" >"$tmp/t1"
    tokens "$tmp/gpl_val.bin" >>"$tmp/t1"
    bytes "$gpl" >"$tmp/t2"
    cmp -s "$tmp/t1" "$tmp/t2" || fail "the GPL's tokens are not its bytes"
else
    echo "note: $gpl not found; the real-document case is skipped"
fi

# ---- bad input ---------------------------------------------------------------------
refused "missing input" "cannot read '$tmp/nope.txt': No such file or directory" \
    "$tmp/nope.txt" "$tmp/x"
: >"$tmp/empty.txt"
refused "empty input" "empty.txt: holds no tokens" "$tmp/empty.txt" "$tmp/x"
refused "a folder as input" "Is a directory" "$tmp" "$tmp/x"
refused "fraction 0" "--val-fraction '0' is not a number in (0, 1)" \
    "$tmp/small.txt" "$tmp/x" --val-fraction 0
refused "fraction 1" "--val-fraction '1'" "$tmp/small.txt" "$tmp/x" --val-fraction 1
refused "fraction 1.5" "--val-fraction '1.5'" "$tmp/small.txt" "$tmp/x" --val-fraction 1.5
refused "fraction -0.1" "--val-fraction '-0.1'" "$tmp/small.txt" "$tmp/x" --val-fraction -0.1
refused "fraction text" "--val-fraction 'abc'" "$tmp/small.txt" "$tmp/x" --val-fraction abc
refused "fraction nan" "--val-fraction 'nan'" "$tmp/small.txt" "$tmp/x" --val-fraction nan
refused "fraction missing" "--val-fraction needs a value" "$tmp/small.txt" "$tmp/x" --val-fraction
refused "seq 0" "--seq '0' is not a whole number" "$tmp/small.txt" "$tmp/x" --seq 0
refused "seq 2.5" "--seq '2.5'" "$tmp/small.txt" "$tmp/x" --seq 2.5
refused "too little text" "small.txt has 20 tokens, too few to split" \
    "$tmp/small.txt" "$tmp/x"
refused "unknown option" "unknown option '--vocab'" "$tmp/small.txt" "$tmp/x" --vocab 5
refused "one argument" "expected INPUT and OUTPUT_PREFIX" "$tmp/small.txt"
refused "three arguments" "unexpected argument 'extra'" "$tmp/small.txt" "$tmp/x" extra
refused "tokenizer missing" "--tokenizer needs a path" "$tmp/small.txt" "$tmp/x" --tokenizer
refused "tokenizer absent" "cannot read '$tmp/none.model'" "$tmp/small.txt" "$tmp/x" \
    --tokenizer "$tmp/none.model"
printf 'YQ== 0\nYg== one\n' >"$tmp/bad.tiktoken"
refused "bad tiktoken line" "bad.tiktoken: line 2: the rank \"one\" is not a whole number" \
    "$tmp/small.txt" "$tmp/x" --tokenizer "$tmp/bad.tiktoken"
printf '{"model": {"type": "Unigram"}}' >"$tmp/uni.json"
refused "tokenizer.json of another model" "uni.json: model.type is \"Unigram\"; only BPE" \
    "$tmp/small.txt" "$tmp/x" --tokenizer "$tmp/uni.json"
refused "token ids beyond the tokenizer" "he_train.bin: token 257 at position 0 is beyond the vocabulary (256)" \
    "$tmp/in/he_train.bin" "$tmp/x" --tokenizer "$tmp/bytes.tiktoken" --seq 1
# Binary files that are not token files are refused, never read as text.
printf 'text\000with a NUL' >"$tmp/nul.txt"
refused "a NUL byte" "nul.txt: not a token file: its magic number is 1954047348 (0x74786574)" \
    "$tmp/nul.txt" "$tmp/x"
err_has "not text: it holds a NUL byte at offset 4" "the NUL's offset"
printf 'plain text in a .bin file' >"$tmp/in/words.bin"
refused "a .bin file of text" "words.bin: not a token file" "$tmp/in/words.bin" "$tmp/x"
err_has "a .bin file is never read as text" "why a .bin file is not text"
refused "output folder missing" "cannot write '$tmp/no/dir_train.bin': No such file" \
    "$tmp/small.txt" "$tmp/no/dir" --seq 2
touch "$tmp/plain"
refused "output under a file" "cannot write '$tmp/plain/x_train.bin': Not a directory" \
    "$tmp/small.txt" "$tmp/plain/x" --seq 2
# The second file fails after the first was written: the first is removed again.
mkdir "$tmp/half_val.bin"
run 1 "$tmp/small.txt" "$tmp/half" --seq 2
err_has "cannot write '$tmp/half_val.bin'" "validation file that cannot be written"
[ ! -e "$tmp/half_train.bin" ] || fail "half_train.bin left behind when the val file failed"
for f in "$tmp"/half_*.tmp-*; do [ -e "$f" ] && fail "$f left behind"; done

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "cli_pttokenize: all passed"
