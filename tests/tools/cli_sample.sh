#!/bin/sh
# ptrun --sample in layouts that split the model (tp=2, pp=2, cp=2, dp=2 with ZeRO-3):
# rank 0 gathers the whole model and prints one 'sample:' line, whose tokens match the
# single-rank run of the same plan settings and seed. The weights of the layouts are not
# bit-identical (their sums are taken in other orders, so the parameters differ by fp32
# rounding), so identical text is not guaranteed:
# a token would differ where its uniform draw fell within that rounding of a boundary of
# the softmax's cumulative sum, and every token after it would follow another prompt.
# How often that happens was measured over many seeds, layouts and both models
# (docs/results/2026-11-cpu.md, "the figures behind the tests' tolerances"). Asserted:
# the first 24 of 32 tokens agree, and the run one step shorter differs within them, so
# the comparison is sharp enough to see one step of training. Both counts are printed.
#   usage: cli_sample.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
if ! command -v mpirun >/dev/null 2>&1; then
    echo "mpirun not found: skipped"
    exit 77
fi
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"
common="--val-every 0 --quiet --sample 32"

# plan NAME DEVICES LAYOUT: tiny for 4 steps of 8 sequences
plan() {
    run 0 "$build/ptplan" --model tiny --cluster local --devices "$2" --layout "$3" \
        --global-batch 8 --steps 4 --out "$tmp/$1.json"
}

# sample_of OUT: the sample's text, from 'sample: ' to the end of ptrun's output (the
# byte-level decoder writes newlines as they are, so it may span lines)
sample_of() { sed -n '/^sample: /,$p' "$1"; }

# same_tokens A B N: files A and B hold samples whose first N byte tokens agree (a
# token is one character, or one \xNN escape)
same_tokens() {
    python3 - "$1" "$2" "$3" <<'PY'
import re, sys
def tokens(path):
    text = open(path, encoding="latin-1").read()[len("sample: "):]
    return re.findall(r"\\x[0-9a-f]{2}|.", text, re.S)
a, b, n = tokens(sys.argv[1]), tokens(sys.argv[2]), int(sys.argv[3])
same = 0
while same < min(len(a), len(b)) and a[same] == b[same]:
    same += 1
print(same)
sys.exit(0 if len(a) >= n and same >= n else 1)
PY
}

plan one 1 "tp=1"
run 0 "$build/ptrun" "$tmp/one.json" $common
sample_of "$tmp/out" >"$tmp/one.txt"
[ -s "$tmp/one.txt" ] || fail "one rank prints a sample"
run 0 "$build/ptrun" "$tmp/one.json" $common --steps 3
sample_of "$tmp/out" >"$tmp/short.txt"
short=$(same_tokens "$tmp/one.txt" "$tmp/short.txt" 24) &&
    fail "a run one step shorter samples the same first 24 tokens: the comparison below " \
         "could not tell a wrong model from the right one"
echo "one step shorter: tokens equal to one rank's before the first difference: $short"

for layout in tp=2 pp=2 cp=2 dp=2,zero=3; do
    plan split 2 "$layout"
    run 0 timeout 300 $mpirun -np 2 "$build/ptrun" "$tmp/split.json" $common
    [ "$(grep -c '^sample: ' "$tmp/out")" = 1 ] ||
        fail "$layout: one 'sample:' line from rank 0: $(tail -3 "$tmp/out")"
    sample_of "$tmp/out" >"$tmp/split.txt"
    same=$(same_tokens "$tmp/one.txt" "$tmp/split.txt" 24) ||
        fail "$layout: the sample agrees with one rank's in its first $same tokens, not 24:" \
             "$(cat "$tmp/split.txt") against $(cat "$tmp/one.txt")"
    echo "$layout: tokens equal to one rank's before the first difference (or the end): $same"
done

# --sample 0 draws nothing, in a split layout too
plan split 2 tp=2
run 0 timeout 300 $mpirun -np 2 "$build/ptrun" "$tmp/split.json" --val-every 0 --quiet \
    --sample 0
grep -q '^sample' "$tmp/out" && fail "--sample 0 prints a sample"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all sampling checks passed"
