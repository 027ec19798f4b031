# Sourced by the command-line tests (". tests/cli_lib.sh"): a scratch folder removed
# on exit, a failure count, and the checks they share.
#   run WANT CMD ARGS...  runs CMD, keeping stdout in $tmp/out and stderr in $tmp/err,
#                         and fails unless it exits WANT
#   err_has TEXT WHAT / out_has TEXT WHAT   grep -- TEXT in $tmp/err / $tmp/out
#   one_line_error WHAT   stderr is one line and stdout empty
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() {
    want=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" = "$want" ] || fail "$* exited $got, want $want; stderr: $(tail -3 "$tmp/err")"
}
err_has() { grep -q -- "$1" "$tmp/err" || fail "stderr lacks '$1' ($2): $(cat "$tmp/err")"; }
out_has() { grep -q -- "$1" "$tmp/out" || fail "stdout lacks '$1' ($2)"; }
one_line_error() {
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "want one error line ($1), got: $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] || fail "stdout not empty on error ($1)"
}
