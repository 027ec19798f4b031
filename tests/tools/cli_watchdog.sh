#!/bin/sh
# The communication watchdog end to end: a 2-rank run with one rank stopped (SIGSTOP)
# in the middle, data parallel (a gradient all-reduce) and pipeline parallel (a stage
# transfer). The other rank must report, at --comm-timeout 5, the operation, the step
# and the rank it waited on, and end the run with a non-zero exit; without the
# watchdog the run would wait for ever (the outer timeout of 60 s bounds the test, and
# a run still going then fails it). The start has a deadline of its own: with rank 1
# stopped before it starts MPI, rank 0 ends the run at --start-timeout 3 naming MPI's
# initialisation, instead of waiting in MPI_Init for ever. Skipped (77) where mpirun is
# missing.
#   usage: cli_watchdog.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
. "$(dirname "$0")/cli_lib.sh"
launcher=""
cleanup() {
    # a run the test failed to end: resume and end its ranks (those of this test only)
    for p in $(pgrep -f "^$build/ptrun $tmp/|^/bin/sh $tmp/stop-rank1.sh" 2>/dev/null); do
        kill -CONT "$p" 2>/dev/null
        kill -9 "$p" 2>/dev/null
    done
    [ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"

# stalled NAME LAYOUT WHICH: runs NAME on 2 ranks, stops the rank WHICH (first: world
# rank 0, last: world rank 1) once the run is under way, and leaves its exit
# status in $rc and its stderr in $tmp/NAME.err.
stalled() {
    name=$1 layout=$2 which=$3
    "$build/ptplan" --devices 2 --layout "$layout" --global-batch 16 --steps 100000 \
        --out "$tmp/$name.json" >/dev/null || { fail "$name: ptplan"; return; }
    timeout 60 $mpirun -np 2 "$build/ptrun" "$tmp/$name.json" --quiet --val-every 0 \
        --sample 0 --comm-timeout 5 >"$tmp/$name.out" 2>"$tmp/$name.err" &
    launcher=$!
    # under way: rank 0 has printed its plan summary and steps are running
    await_training "$tmp/$name.out" 100
    sleep 2
    want=1
    [ "$which" = first ] && want=0
    victim=$(rank_pid "$tmp/$name.json" "$want")
    if [ -z "$victim" ]; then
        fail "$name: no rank to stop (the run ended early: $(cat "$tmp/$name.err"))"
    else
        kill -STOP "$victim"
    fi
    wait "$launcher"
    rc=$?
    launcher=""
    [ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null
    [ "$rc" = 124 ] && fail "$name: the run with a stopped rank was still going after 60 s"
    [ "$rc" != 0 ] || fail "$name: the run with a stopped rank exited 0"
}

# (a) data parallel, rank 1 stopped: rank 0 names the gradient all-reduce over dp·cp
# or, when the stop lands after it, the step's world-wide reductions (loss, gradient norm,
# and the minimum by which all ranks agree to go on or stop after a signal)
stalled dp "dp=2,mbs=2" last
grep -q "ptrun: rank 0: comm timeout: all-reduce\( (m[a-z]*)\)\? of [0-9]* bytes over \(dp\*cp\|the world\) (2 ranks) in step [0-9]* (training) did not finish within 5 s, waiting on world rank(s) 1" \
    "$tmp/dp.err" || fail "dp: the report names the all-reduce, its group, step and peer: $(cat "$tmp/dp.err")"
[ "$(grep -c 'comm timeout' "$tmp/dp.err")" -ge 1 ] || fail "dp: no report"

# (b) pipeline parallel, either stage stopped: the other names what it waited in — the
# stage transfer (send or receive) or, when the stop lands at the end of a step, the
# all-reduce of the tied embedding between the first and last stage or the step's
# world-wide reductions (loss, gradient norm, the agreement to go on) — with the step
# and the stopped stage's rank
what="\(\(receive\|send\) of [0-9]* bytes \(from\|to\) world rank R\|all-reduce\( (m[a-z]*)\)\? of [0-9]* bytes over \(the tied-embedding pair\|the world\) (2 ranks)\)"
stalled pp1 "pp=2,mbs=2" last
grep -q "ptrun: rank 0: comm timeout: $(echo "$what" | sed 's/R/1/') in step [0-9]* (training) did not finish within 5 s, waiting on world rank(s) 1" \
    "$tmp/pp1.err" || fail "pp, last stage stopped: the report names the wait, step and peer: $(cat "$tmp/pp1.err")"
stalled pp0 "pp=2,mbs=2" first
grep -q "ptrun: rank 1: comm timeout: $(echo "$what" | sed 's/R/0/') in step [0-9]* (training) did not finish within 5 s, waiting on world rank(s) 0" \
    "$tmp/pp0.err" || fail "pp, first stage stopped: the report names the wait, step and peer: $(cat "$tmp/pp0.err")"

# (c) the start: rank 1 stops itself before it runs ptrun (so before MPI_Init); rank 0
# waits in MPI_Init for it until the deadline and ends the run naming the stage
printf '#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = 1 ] && kill -STOP $$\nexec "$@"\n' \
    >"$tmp/stop-rank1.sh"
timeout 60 $mpirun -np 2 /bin/sh "$tmp/stop-rank1.sh" "$build/ptrun" "$tmp/dp.json" --quiet \
    --sample 0 --start-timeout 3 >"$tmp/init.out" 2>"$tmp/init.err"
rc=$?
[ "$rc" = 124 ] && fail "init: the run with a rank stopped before MPI_Init was still going after 60 s"
[ "$rc" != 0 ] || fail "init: the run with a rank stopped before MPI_Init exited 0"
grep -q "^ptrun: rank 0: MPI initialisation did not complete within 3 s: a rank stalled or died" \
    "$tmp/init.err" || fail "init: the report names the stage and the deadline: $(cat "$tmp/init.err")"

# A bad deadline is refused, naming the option and the variable.
"$build/ptrun" "$tmp/dp.json" --comm-timeout soon >/dev/null 2>"$tmp/bad.err" &&
    fail "--comm-timeout soon is accepted"
grep -q -- "--comm-timeout" "$tmp/bad.err" || fail "--comm-timeout soon: $(cat "$tmp/bad.err")"
"$build/ptrun" "$tmp/dp.json" --start-timeout soon >/dev/null 2>"$tmp/bad.err" &&
    fail "--start-timeout soon is accepted"
grep -q -- "--start-timeout" "$tmp/bad.err" || fail "--start-timeout soon: $(cat "$tmp/bad.err")"
PT_COMM_TIMEOUT=-3 "$build/ptrun" "$tmp/dp.json" >/dev/null 2>"$tmp/bad.err" &&
    fail "PT_COMM_TIMEOUT=-3 is accepted"
grep -q "PT_COMM_TIMEOUT='-3'" "$tmp/bad.err" || fail "PT_COMM_TIMEOUT=-3: $(cat "$tmp/bad.err")"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "a stopped rank ends the run with a report naming the operation, step and peer, or MPI's start"
