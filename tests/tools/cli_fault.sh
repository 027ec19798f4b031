#!/bin/sh
# Fault injection (tests/fault/fault.c): ptrun and ptreport with the N-th write, flush,
# close, sync or rename failing, and every later one (a disk that has just filled up),
# for every N the run makes; likewise ptrun's N-th allocation (memory run out). Whatever N, nothing is lost or half-written: the run either
# succeeds whole or exits 1 or 2 with one "ptrun:" / "ptreport:" line naming the cause
# (never a crash or a sanitizer report), the checkpoint it resumed from or a newer
# complete one is still found by --resume, a log that is not whole is reported as such,
# and an earlier report in --out is left as it was, with no empty or staging files.
#   usage: cli_fault.sh BUILD_DIR [STRIDE]
# STRIDE > 1 tries every STRIDE-th N only (the sanitizer lane, where each run is slow).
build="$1"
stride="${2:-1}"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1

# the exit of the last command and its stderr's shape: a clean success or a clean error
clean_end() { # WHAT RC
    case "$2" in
    0) ;;
    1|2) [ "$(wc -l <"$tmp/err")" -ge 1 ] && grep -q "^$3: " "$tmp/err" ||
             fail "$1: exit $2 without a '$3:' message: $(cat "$tmp/err")" ;;
    *) fail "$1: exit $2 (a crash or sanitizer report?): $(tail -3 "$tmp/err")" ;;
    esac
}

# ---- checkpoints and the log ---------------------------------------------------------
# A small batch (two micro-batches a step) and one validation batch: the same code paths
# as the defaults' batch of 64 and full validation, which repeat them more often, and
# each of the few hundred runs below takes less than half the time.
"$build/ptplan" --devices 1 --out plan.json --top 1 --steps 3 --global-batch 16 >/dev/null ||
    fail "ptplan writes the plan"
"$build/ptrun" plan.json --stop-after 2 --checkpoint ck0 --quiet --sample 0 --val-every 0 \
    >/dev/null 2>&1 || fail "the first two steps and their checkpoint"
# a complete checkpoint is still there to resume from, whatever failed before
resumable() { # WHAT
    "$build/ptrun" plan.json --resume ck --quiet --sample 0 --val-every 0 --val-batches 1 \
        >/dev/null 2>"$tmp/err2" ||
        fail "$1: no checkpoint to resume from: $(cat "$tmp/err2")"
}
go() { # [VAR] N: resume from ck0's copy, train step 3 with its checkpoint and a log,
       # the N-th I/O call failing (or, with VAR=PT_FAULT_ALLOC, the N-th allocation)
    var=PT_FAULT
    [ $# = 2 ] && { var=$1; shift; }
    rm -rf ck ck.* log.jsonl
    cp -r ck0 ck
    env "${var}_AT=$1" "${var}_COUNT=$tmp/count" "$build/tests/ptrun_fault" plan.json \
        --resume ck --checkpoint ck --checkpoint-every 1 --log log.jsonl --quiet --sample 0 \
        --val-every 0 --val-batches 1 >"$tmp/out" 2>"$tmp/err"
}
go 0
[ $? = 0 ] || fail "the fault build runs clean without a fault: $(cat "$tmp/err")"
calls=$(cat "$tmp/count" 2>/dev/null || echo 0)
[ "$calls" -gt 10 ] || fail "the run counts its writes, renames and syncs ($calls)"
n=1
while [ "$n" -le "$calls" ]; do
    go "$n"
    rc=$?
    clean_end "ptrun with fault $n of $calls" "$rc" ptrun
    if [ "$rc" = 0 ]; then
        # a whole log: every line a complete JSON object
        awk '!/^\{.*\}$/ { bad = 1 } END { exit bad }' log.jsonl ||
            fail "fault $n: exit 0 but the log has a cut line"
    fi
    resumable "fault $n (exit $rc)"
    n=$((n + stride))
done
echo "checkpoint and log: $calls fault points, every ${stride}th tried"

# ---- allocations: every malloc, calloc and realloc of the project's code in a run that
# resumes and writes a checkpoint fails from the N-th on; the run ends cleanly ("out of
# memory ..." or the like, exit 1 or 2) or succeeds, and a checkpoint stays resumable
go PT_FAULT_ALLOC 0
[ $? = 0 ] || fail "the fault build runs clean without an allocation failure"
allocs=$(cat "$tmp/count" 2>/dev/null || echo 0)
[ "$allocs" -gt 50 ] || fail "the run counts its allocations ($allocs)"
n=1
while [ "$n" -le "$allocs" ]; do
    go PT_FAULT_ALLOC "$n"
    rc=$?
    clean_end "ptrun with allocation $n of $allocs failing" "$rc" ptrun
    resumable "allocation $n (exit $rc)"
    n=$((n + stride))
done
echo "allocations: $allocs fault points, every ${stride}th tried"

# ---- the report ------------------------------------------------------------------------
if command -v gnuplot >/dev/null 2>&1; then
    export PT_COSTS_DB="$tmp/costs.db"
    "$build/ptrun" plan.json --steps 3 --quiet --sample 0 --val-every 0 --record \
        --db "$tmp/costs.db" >/dev/null 2>&1 || fail "a recorded run for the report"
    "$build/ptreport" --db "$tmp/costs.db" --out rep >/dev/null 2>&1 || fail "a first report"
    cp rep/index.md index-good.md
    find rep -type f -empty | sort >empty-good # an empty loss.dat: no run has a log
    PT_FAULT_COUNT="$tmp/count" "$build/tests/ptreport_fault" --db "$tmp/costs.db" --out rep2 \
        >/dev/null 2>&1 || fail "the fault build of ptreport runs clean without a fault"
    calls=$(cat "$tmp/count" 2>/dev/null || echo 0)
    [ "$calls" -gt 5 ] || fail "ptreport counts its writes ($calls)"
    n=1
    while [ "$n" -le "$calls" ]; do
        PT_FAULT_AT=$n "$build/tests/ptreport_fault" --db "$tmp/costs.db" --out rep \
            >"$tmp/out" 2>"$tmp/err"
        rc=$?
        clean_end "ptreport with fault $n of $calls" "$rc" ptreport
        [ "$rc" = 0 ] || cmp -s rep/index.md index-good.md ||
            fail "fault $n: a failed report changed the earlier one"
        ls -A rep | grep -q "^\.ptreport-" && fail "fault $n: a staging folder is left"
        find rep -type f -empty | sort | cmp -s - empty-good ||
            fail "fault $n: empty files are left: $(find rep -type f -empty)"
        n=$((n + stride))
    done
    echo "report: $calls fault points, every ${stride}th tried"
fi

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all fault-injection checks passed"
