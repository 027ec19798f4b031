#!/bin/sh
# ptrun's data as a user gives it: pttokenize's two files trained with --data
# PREFIX_train.bin --val-data PREFIX_val.bin (training reads the first whole, validation
# only the second), the same tokens in llm.c's uint32 format training to the same
# losses, a BPE tokenizer (--tokenizer) encoding text data and decoding the sample, and
# bad data or tokenizers refused with one clear message before any step.
#   usage: cli_ptrun_data.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db" # no cost table: the plan's figures are analytic

# tokens FILE: the uint16 tokens of a token file, one per line.
tokens() { od -An -v -tu2 -j1024 "$1" | tr -s ' ' '\n' | grep -v '^$'; }
# to_u32 FILE OUT [FIRST]: FILE's tokens (after FIRST, when given) in llm.c's uint32
# format: magic 20240801, version 7, the count, zeros to 1024 bytes, 4 bytes a token.
to_u32() {
    { [ $# -gt 2 ] && echo "$3"; tokens "$1"; } | awk '
        function le(v,   s, i) { s = ""; for (i = 0; i < 4; i++) { s = s sprintf("\\%03o", v % 256); v = int(v / 256) } return s }
        { t[n++] = $1 }
        END {
            printf "%s%s%s", le(20240801), le(7), le(n)
            for (i = 12; i < 1024; i++) printf "\\000"
            for (i = 0; i < n; i++) printf "%s", le(t[i])
        }' >"$tmp/u32.fmt"
    printf "$(cat "$tmp/u32.fmt")" >"$2"
}
# loss_of LOG TYPE STEP: the loss of a log line
loss_of() { grep "\"type\":\"$2\",\"step\":$3," "$1" | sed 's/.*"loss":\([^,}]*\).*/\1/'; }
# untrained WHAT: the run printed no step (it was refused before training)
untrained() { ! grep -q '^step' "$tmp/out" || fail "$1: it trained before refusing"; }

run 0 "$build/ptplan" --devices 1 --out "$tmp/plan.json" --top 1   # tiny: v 256, s 64
awk 'BEGIN { for (i = 0; i < 60; i++) printf "the quick brown fox jumps over the lazy dog %d. ", i }' \
    >"$tmp/corpus.txt"
run 0 "$build/pttokenize" "$tmp/corpus.txt" "$tmp/c"
out_has "train with: ptrun PLAN.json --data $tmp/c_train.bin --val-data $tmp/c_val.bin" \
    "pttokenize says how to train on its files"
ntrain=$(tokens "$tmp/c_train.bin" | wc -l)
nval=$(tokens "$tmp/c_val.bin" | wc -l)
steps="--steps 2 --val-every 0 --quiet"

# ---- --val-data ----------------------------------------------------------------------
run 0 "$build/ptrun" "$tmp/plan.json" $steps --sample 0 --data "$tmp/c_train.bin" \
    --val-data "$tmp/c_val.bin" --log "$tmp/a.jsonl"
out_has "data    $tmp/c_train.bin: $ntrain tokens (train); $tmp/c_val.bin: $nval tokens (validation)" \
    "the training file is used whole, the validation file for validation"
# Validation reads --val-data alone: another file changes the validation loss, not the
# training losses.
awk 'BEGIN { for (i = 0; i < 40; i++) printf "%d zebras quietly vex wild jugglers; ", i }' \
    >"$tmp/other.txt"
run 0 "$build/ptrun" "$tmp/plan.json" $steps --sample 0 --data "$tmp/c_train.bin" \
    --val-data "$tmp/other.txt" --log "$tmp/b.jsonl"
[ "$(loss_of "$tmp/a.jsonl" step 2)" = "$(loss_of "$tmp/b.jsonl" step 2)" ] ||
    fail "the validation file changed the training losses"
[ "$(loss_of "$tmp/a.jsonl" val 2)" != "$(loss_of "$tmp/b.jsonl" val 2)" ] ||
    fail "validation did not read --val-data (same loss on another file)"
# Without --val-data the last 10% of --data validates, as before.
nv=$(awk -v n="$ntrain" 'BEGIN { v = int(n * 0.1 + 0.5); if (v < 65) v = 65; print v }')
run 0 "$build/ptrun" "$tmp/plan.json" $steps --sample 0 --data "$tmp/c_train.bin"
out_has "data    $tmp/c_train.bin: $ntrain tokens ($((ntrain - nv)) train, $nv validation)" \
    "without --val-data a tenth is split off"

# ---- llm.c's uint32 format (Llama 3's) trains on the same tokens ------------------------
to_u32 "$tmp/c_train.bin" "$tmp/c32_train.bin"
to_u32 "$tmp/c_val.bin" "$tmp/c32_val.bin"
[ "$(wc -c <"$tmp/c32_train.bin")" -eq $((1024 + 4 * ntrain)) ] || fail "uint32 file size"
run 0 "$build/ptrun" "$tmp/plan.json" $steps --sample 0 --data "$tmp/c32_train.bin" \
    --val-data "$tmp/c32_val.bin" --log "$tmp/c.jsonl"
for s in 1 2; do
    [ "$(loss_of "$tmp/a.jsonl" step $s)" = "$(loss_of "$tmp/c.jsonl" step $s)" ] ||
        fail "step $s: uint32 tokens train differently from the same uint16 tokens"
done
[ "$(loss_of "$tmp/a.jsonl" val 2)" = "$(loss_of "$tmp/c.jsonl" val 2)" ] ||
    fail "uint32 validation tokens differ from the same uint16 ones"

# ---- --tokenizer ---------------------------------------------------------------------
# A tiktoken file of the 256 bytes alone (byte b has rank b): it encodes text to the
# byte-level tokenizer's tokens, so the run is the same, and the sample is decoded by
# it (bytes over 0x7f as they are, where the byte-level decoding shows \xNN).
for b in $(seq 0 255); do
    printf "%s %d\n" "$(printf "\\$(printf %03o "$b")" | base64)" "$b"
done >"$tmp/bytes.tiktoken"
run 0 "$build/ptrun" "$tmp/plan.json" $steps --sample 48 --data "$tmp/corpus.txt" \
    --log "$tmp/d.jsonl"
grep -a '^sample: ' "$tmp/out" >"$tmp/sample.bytes"
run 0 "$build/ptrun" "$tmp/plan.json" $steps --sample 48 --data "$tmp/corpus.txt" \
    --tokenizer "$tmp/bytes.tiktoken" --log "$tmp/e.jsonl"
out_has "tokens  $tmp/bytes.tiktoken (tiktoken ranks): a vocabulary of 256 ids" \
    "the tokenizer is reported"
grep -a '^sample: ' "$tmp/out" >"$tmp/sample.tok"
[ "$(loss_of "$tmp/d.jsonl" step 2)" = "$(loss_of "$tmp/e.jsonl" step 2)" ] ||
    fail "a tokenizer of the 256 bytes encoded the text differently"
escapes=$(LC_ALL=C grep -o '\\x[89a-f][0-9a-f]' "$tmp/sample.bytes" | wc -l)
raw=$(LC_ALL=C tr -cd '\200-\377' <"$tmp/sample.tok" | wc -c)
[ "$escapes" -gt 0 ] || fail "the sample has no byte over 0x7f to tell the decodings apart"
[ "$raw" -eq "$escapes" ] ||
    fail "the tokenizer's sample has $raw raw bytes over 0x7f, the byte-level one $escapes escapes"
[ "$(LC_ALL=C sed 's/\\x[89a-f][0-9a-f]/#/g' "$tmp/sample.bytes")" = \
  "$(LC_ALL=C tr '\200-\377' '#' <"$tmp/sample.tok")" ] ||
    fail "the samples differ beyond how bytes over 0x7f are shown"

# ---- refused before training ----------------------------------------------------------
printf 'aGU= 256\n' | cat "$tmp/bytes.tiktoken" - >"$tmp/he.tiktoken"
run 1 "$build/ptrun" "$tmp/plan.json" $steps --tokenizer "$tmp/he.tiktoken"
err_has "tokenizer $tmp/he.tiktoken: its vocabulary of 257 ids is larger than model tiny's of 256" \
    "the tokenizer and both vocabularies"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "one error line for a tokenizer too large: $(cat "$tmp/err")"
untrained "a tokenizer larger than the model"
run 1 "$build/ptrun" "$tmp/plan.json" $steps --tokenizer "$tmp/none.model"
err_has "cannot read '$tmp/none.model'" "a missing tokenizer"
one_line_error "a missing tokenizer"
printf '{"model": {"type": "WordPiece"}}' >"$tmp/wp.json"
run 1 "$build/ptrun" "$tmp/plan.json" $steps --tokenizer "$tmp/wp.json"
err_has "wp.json: model.type is \"WordPiece\"; only BPE" "another model type"
to_u32 "$tmp/c_train.bin" "$tmp/big_train.bin" 300
run 1 "$build/ptrun" "$tmp/plan.json" $steps --data "$tmp/big_train.bin"
err_has "big_train.bin: token 300 at position 0 is beyond the vocabulary (256)" "an id beyond the model"
untrained "an id beyond the model"
run 1 "$build/ptrun" "$tmp/plan.json" $steps --data "$tmp/c_train.bin" --val-data "$tmp/nope.bin"
err_has "cannot read '$tmp/nope.bin': No such file or directory" "a missing --val-data"
# a FIFO nobody writes: refused at once (it would block the open for ever)
mkfifo "$tmp/fifo.bin"
run 1 timeout 60 "$build/ptrun" "$tmp/plan.json" $steps --data "$tmp/fifo.bin"
err_has "cannot read '$tmp/fifo.bin': it is a FIFO or pipe" "a FIFO as --data"
untrained "a FIFO as --data"
printf 'not tokens' >"$tmp/words.bin"
run 1 "$build/ptrun" "$tmp/plan.json" $steps --data "$tmp/c_train.bin" --val-data "$tmp/words.bin"
err_has "words.bin: not a token file: its magic number is 544501614 (0x20746f6e)" "an unknown magic"
untrained "an unknown magic"
# 38 tokens of c_val.bin under a header that says so: fewer than one sequence
head -c $((1024 + 2 * 38)) "$tmp/c_val.bin" >"$tmp/short.bin"
printf '\046\000\000\000' | dd of="$tmp/short.bin" bs=1 seek=8 conv=notrunc 2>/dev/null
run 1 "$build/ptrun" "$tmp/plan.json" $steps --data "$tmp/c_train.bin" --val-data "$tmp/short.bin"
err_has "short.bin has 38 tokens, fewer than one sequence of 64 + 1" "validation data too short"

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "cli_ptrun_data: all passed"
