#!/bin/sh
# How ptrun ends, and what Open MPI's mpirun then returns: mpirun exits with the status
# its ranks end with (the code of a rank's MPI_Abort, or the one every rank exits with),
# except when it is itself sent SIGTERM or SIGINT.
#  - A loss that diverges under mpirun: exit 2, as on one rank (each rank aborts with
#    the run's code, not MPI_Abort's usual 1).
#  - SIGUSR1 to mpirun, which forwards it to every rank: the step finishes, a checkpoint
#    is written, every rank and so mpirun exits 75 (the way docs/ptrun.md gives to stop
#    a run under mpirun for --resume).
#  - SIGTERM to mpirun: mpirun exits 1, whatever its ranks return (Open MPI's own code
#    for a job it was told to end; it also kills the ranks a second later).
#  - A signal before the first step ends ptrun at once: here ptrun waits reading its
#    plan from a FIFO whose writer has sent a part and goes quiet, when SIGTERM comes
#    (the signal was caught there, and did nothing, before the fix).
#  - The loss-spike guard names what became non-finite: at a huge learning rate the
#    gradient norm becomes NaN while the loss is still finite.
# Every run is bounded by timeout. Skipped (77) where mpirun is missing.
#   usage: cli_stops.sh BUILD_DIR
set -u
build=$(cd "$1" && pwd)
command -v mpirun >/dev/null 2>&1 || { echo "mpirun not found: skipped"; exit 77; }
. "$(dirname "$0")/cli_lib.sh"
cleanup() {
    # a run the test failed to end (those of this test only)
    for p in $(pgrep -f "^$build/ptrun $tmp/" 2>/dev/null); do
        kill -9 "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"

# await_line FILE REGEX: waits (60 s at most) until FILE has a line matching REGEX
await_line() {
    for _ in $(seq 1 300); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

# signalled NAME SIGNAL: a long dp=2 run under mpirun, sent SIGNAL at mpirun once its
# steps are running; leaves mpirun's exit status in $rc
signalled() {
    timeout 120 $mpirun -np 2 "$build/ptrun" "$tmp/long.json" --sample 0 --val-every 0 \
        --checkpoint "$tmp/$1" >"$tmp/$1.out" 2>"$tmp/$1.err" &
    waiter=$!
    await_line "$tmp/$1.out" "^step" || fail "$1: no step within 60 s: $(cat "$tmp/$1.err")"
    kill "-$2" "$(pgrep -P "$waiter")"
    wait "$waiter"
    rc=$?
}

"$build/ptplan" --devices 2 --layout dp=2,mbs=2 --global-batch 16 --steps 30 --lr 1000 \
    --out hot2.json >/dev/null || fail "ptplan: the diverging plan"
"$build/ptplan" --devices 2 --layout dp=2,mbs=2 --global-batch 16 --steps 100000 \
    --out long.json >/dev/null || fail "ptplan: the long plan"
"$build/ptplan" --devices 1 --top 1 --steps 8 --out one.json >/dev/null ||
    fail "ptplan: the one-rank plan"
"$build/ptplan" --devices 1 --top 1 --steps 8 --lr 1000 --out hot1.json >/dev/null ||
    fail "ptplan: the one-rank diverging plan"

# 1. a diverged loss under mpirun: 2, with the reason
run 2 timeout 120 $mpirun -np 2 "$build/ptrun" hot2.json --quiet --sample 0
err_has "stopping" "diverged loss under mpirun"

# 2. SIGUSR1 to mpirun: every rank finishes its step and checkpoints; mpirun exits 75
signalled usr1 USR1
[ "$rc" = 75 ] || fail "SIGUSR1 to mpirun: exit $rc, want 75: $(tail -3 "$tmp/usr1.err")"
at=$(sed -n 's/^interrupted after step \([0-9]*\) (SIGUSR1); --resume continues$/\1/p' usr1.out)
[ -n "$at" ] && grep -q "^checkpoint step $at written: $tmp/usr1/step_" usr1.out ||
    fail "SIGUSR1 to mpirun: the ranks stop after a step with a checkpoint: $(tail -3 usr1.out)"

# 3. SIGTERM to mpirun: Open MPI's mpirun exits 1 (docs/ptrun.md says so)
signalled term TERM
[ "$rc" = 1 ] || fail "SIGTERM to mpirun: exit $rc, want Open MPI's 1: $(tail -3 "$tmp/term.err")"

# 4. SIGTERM before the first step ends ptrun at once (killed by it: 128 + 15)
rm -f fifo
mkfifo fifo || fail "mkfifo"
{ head -c 64 "$tmp/one.json"; sleep 60; } >fifo &
writer=$!
timeout 120 "$build/ptrun" fifo --quiet --sample 0 >early.out 2>early.err &
waiter=$!
# until ptrun waits in the read of the rest of its plan (where the kernel shows it;
# else a while, far past the start of main)
sleep 0.5
pid=$(pgrep -P "$waiter")
for _ in $(seq 1 300); do
    case "$(cat "/proc/$pid/wchan" 2>/dev/null)" in
    *pipe_read*|pipe_wait) break ;; # by kernel: pipe_read, anon_pipe_read, pipe_wait
    ""|0) sleep 3; break ;;
    esac
    sleep 0.2
done
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    fail "early: ptrun ended before the signal (does it still wait for its plan's rest?): $(cat early.err)"
else
    kill -TERM "$pid"
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && fail "early: ptrun still runs 20 s after SIGTERM before its first step"
    kill -9 "$pid" 2>/dev/null
fi
wait "$waiter"
rc=$?
[ "$rc" = 143 ] || fail "early: SIGTERM before the first step: exit $rc, want 143 (killed by it)"
grep -q "^step" early.out && fail "early: a step ran"
pkill -P "$writer" 2>/dev/null # its sleep, which holds the FIFO open
kill "$writer" 2>/dev/null

# 5. the guard's line names the gradient norm when the loss is still finite
run 2 "$build/ptrun" hot1.json --quiet --sample 0 --val-every 0 --spike-action rollback \
    --checkpoint hot1 --checkpoint-every 1
out_has "^spike:  step [0-9]*: the gradient norm became NaN (loss [0-9.e+]*)$" "NaN gradient norm"
grep -q "the loss became finite" "$tmp/out" "$tmp/err" && fail "the guard says the loss 'became finite'"
err_has "the gradient norm became NaN at step [0-9]* (loss [0-9.e+]*): stopping" "the stop names the gradient norm"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "ptrun ends with 2 and 75 under mpirun, at once before training, and names what diverged"
