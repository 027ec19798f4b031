#!/bin/sh
# pttokenize as a user runs it: a small text split into llm.c token files whose bytes
# are checked, a real document (the GPL-3 text where Debian ships it), a token file
# re-split as it is, and every bad input refused with one clear message, a non-zero
# exit and no output file left behind.
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
printf '\000\001\377\200hello world\n' >"$tmp/bin.txt"
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
