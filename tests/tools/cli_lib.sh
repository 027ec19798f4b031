# Sourced by the command-line tests (". tests/tools/cli_lib.sh"): a scratch folder removed
# on exit, a failure count, and the checks they share.
#   run WANT CMD ARGS...  runs CMD, keeping stdout in $tmp/out and stderr in $tmp/err,
#                         and fails unless it exits WANT
#   err_has TEXT WHAT / out_has TEXT WHAT   grep -- TEXT in $tmp/err / $tmp/out
#   one_line_error WHAT   stderr is one line and stdout empty
#   plan WANT ARGS...     run WANT "$ptplan" ARGS... (the caller sets $ptplan)
#   $mpirun               mpirun as the multi-rank tests launch it
#   await_training OUT N  waits (N times 0.2 s at most) until ptrun's stdout in OUT
#                         shows training under way (its '^train' summary line)
#   rank_pid PLAN RANK    the process id of ptrun's MPI rank RANK running PLAN
#   losses LOG            the step losses in ptrun's log LOG, one a line
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Open MPI (4.1) keeps each mpirun job's session folder in one top folder per user,
# /tmp/ompi.HOST.UID, which a job ending removes when it finds it empty; a job starting
# meanwhile then fails to create its own folder there ("ORTE_ERROR_LOG: Error in file
# ... session_dir.c"). Tests running side by side (ctest -j) keep theirs apart.
export OMPI_MCA_orte_tmpdir_base="$tmp/mpi"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() {
    want=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" = "$want" ] || fail "$* exited $got, want $want; stderr: $(tail -3 "$tmp/err")"
}
plan() {
    want_=$1; shift
    run "$want_" "$ptplan" "$@"
}
err_has() { grep -q -- "$1" "$tmp/err" || fail "stderr lacks '$1' ($2): $(cat "$tmp/err")"; }
out_has() { grep -q -- "$1" "$tmp/out" || fail "stdout lacks '$1' ($2)"; }
one_line_error() {
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "want one error line ($1), got: $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] || fail "stdout not empty on error ($1)"
}
losses() { grep '"type":"step"' "$1" | sed 's/.*"loss":\([^,}]*\).*/\1/'; }
mpirun="mpirun -q --oversubscribe"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
await_training() {
    for _ in $(seq 1 "$2"); do
        grep -q '^train' "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}
# by the rank Open MPI puts in each process's environment, not by process id order,
# which a wrapped pid counter would reverse
rank_pid() {
    for p in $(pgrep -f "^$build/ptrun $1"); do
        r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        [ "$r" = "$2" ] && { echo "$p"; return 0; }
    done
    return 1
}
