#!/bin/sh
# The tools' output files never replace what is not theirs: a character device (stand-ins
# of /dev/null and /dev/full made with mknod where allowed; /dev/null itself) is written
# in place and stays a device; /dev/stdout and a link like it write through the shell's
# redirection and stay links; a link to a file elsewhere writes that file and stays a
# link; a link planted at the old fixed temporary name is not followed; a path longer
# than the old 1,024-byte temporary buffer destroys no neighbour; a FIFO nobody reads is
# refused at once and a folder is refused; and standard output cut short (a full disk)
# is an error, not exit 0.
#   usage: cli_outputs.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"
plan() { "$build/ptplan" --devices 1 --top 1 "$@"; }
is_chr() { [ -c "$1" ] && [ ! -L "$1" ] || fail "$1 is no longer a character device ($2)"; }
is_link() { [ -L "$1" ] || fail "$1 is no longer a symbolic link ($2)"; }

run 0 plan --out plan.json
[ -f plan.json ] || fail "ptplan writes plan.json"

# Stand-ins of /dev/null and /dev/full (mem(4): character devices 1,3 and 1,7).
if mknod -m 666 null c 1 3 2>/dev/null && mknod -m 666 full c 1 7 2>/dev/null; then
    run 0 "$build/ptrun" plan.json --steps 1 --trace ./null
    is_chr null "ptrun --trace"
    run 1 "$build/ptrun" plan.json --steps 1 --trace ./full
    err_has "cannot write './full': No space left on device" "ptrun --trace onto a full device"
    is_chr full "ptrun --trace"
    run 0 plan --layout tp=1 --out ./null --timeline ./null
    is_chr null "ptplan --out and --timeline"
    run 1 plan --out ./full
    err_has "cannot write './full': No space left on device" "ptplan --out onto a full device"
    is_chr full "ptplan --out"
    printf 'some text to tokenize, long enough for two parts of a sequence of eight.\n' >text
    ln -s full tok_train.bin
    run 1 "$build/pttokenize" text tok --seq 8
    err_has "No space left on device" "pttokenize onto a full device"
    is_chr full "pttokenize"
    is_link tok_train.bin "pttokenize"
else
    echo "note: mknod is not allowed here: the device stand-ins are not tried"
fi
run 0 "$build/ptrun" plan.json --steps 1 --trace /dev/null
is_chr /dev/null "ptrun --trace /dev/null"

# /dev/stdout, and a link to this process's descriptor 1 as /dev/stdout is one: the
# output goes where the shell's redirection points, and the links stay links.
ln -s /proc/self/fd/1 my_stdout
plan --out /dev/stdout >f 2>"$tmp/err" || fail "ptplan --out /dev/stdout: $(cat "$tmp/err")"
grep -q '"format_version"' f || fail "ptplan --out /dev/stdout > f: no plan in f"
grep -q '^model ' f || fail "ptplan --out /dev/stdout > f: the table is gone from f"
plan --out my_stdout >f 2>"$tmp/err" || fail "ptplan --out my_stdout: $(cat "$tmp/err")"
grep -q '"format_version"' f || fail "ptplan --out my_stdout > f: no plan in f"
is_link my_stdout "ptplan --out"
plan --layout tp=1 --no-out --timeline /dev/stdout >g 2>"$tmp/err" ||
    fail "ptplan --timeline /dev/stdout: $(cat "$tmp/err")"
grep -q traceEvents g || fail "ptplan --timeline /dev/stdout > g: no trace in g"
"$build/ptrun" plan.json --steps 1 --trace my_stdout >t 2>"$tmp/err" ||
    fail "ptrun --trace my_stdout: $(cat "$tmp/err")"
grep -q traceEvents t || fail "ptrun --trace my_stdout > t: no trace in t"
grep -q '^train ' t || fail "ptrun --trace my_stdout > t: ptrun's own lines are gone from t"
is_link my_stdout "ptrun --trace"
is_link /dev/stdout "the real one"

# A link to a file elsewhere: that file is written, the link stays.
mkdir plans
ln -s plans/kept.json link.json
run 0 plan --out link.json
is_link link.json "ptplan --out through a link"
grep -q '"format_version"' plans/kept.json || fail "ptplan --out link.json writes the link's target"

# A link planted where the trace's temporary once was (a fixed name): not followed.
echo keep >victim
ln -s victim trace.json.tmp
run 0 "$build/ptrun" plan.json --steps 1 --trace trace.json
[ "$(cat victim)" = keep ] || fail "a link at trace.json.tmp was followed and its target overwritten"
grep -q traceEvents trace.json || fail "ptrun --trace trace.json wrote no trace"

# A path of 1,021 bytes (its old temporary, cut at 1,023, named the neighbour P.t).
long=$tmp
while [ ${#long} -lt 900 ]; do long="$long/$(printf '%0100d' 0)"; done
mkdir -p "$long"
pad=$((1021 - ${#long} - 1 - 5))
name=$(printf "%0${pad}d" 0).json
p="$long/$name"
[ ${#p} -eq 1021 ] || fail "the long path has ${#p} bytes, want 1021"
echo keep >"$p.t"
run 0 "$build/ptrun" plan.json --steps 1 --trace "$p"
[ "$(cat "$p.t")" = keep ] || fail "a --trace of 1,021 bytes destroyed its neighbour"
grep -q traceEvents "$p" || fail "a --trace of 1,021 bytes was not written"

# A FIFO nobody reads (as --out or --log): refused at once, not waited on; a folder:
# refused.
mkfifo pipe
run 1 timeout 60 "$build/ptplan" --devices 1 --top 1 --out pipe
err_has "cannot write 'pipe': it is a FIFO and no process reads it" "ptplan --out FIFO"
run 1 timeout 60 "$build/ptrun" plan.json --steps 1 --log pipe
err_has "cannot write 'pipe': it is a FIFO and no process reads it" "ptrun --log FIFO"
mkdir folder
run 1 plan --out folder
err_has "cannot write 'folder': it is a folder" "ptplan --out folder"
[ -d folder ] || fail "ptplan --out folder removed the folder"

# Standard output onto a full disk: an error on stderr and a non-zero exit.
if [ -w /dev/full ]; then
    plan --json --no-out >/dev/full 2>"$tmp/err" && fail "ptplan --json > /dev/full exited 0"
    err_has "ptplan: cannot write the standard output: No space left on device" "ptplan > /dev/full"
    "$build/ptplan" --list-models >/dev/full 2>"$tmp/err" && fail "ptplan --list-models > /dev/full exited 0"
fi

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "cli_outputs: all checks passed"
