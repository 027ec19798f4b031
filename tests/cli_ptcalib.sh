#!/bin/sh
# The loop closed, as a user runs it: a recorded 2-rank pipeline run gives one merged
# trace (both ranks, on one clock, micro-batches on the spans) and its spans and ranks'
# memory in costs.db; ptcalib turns them into samples and fits and prints predicted
# against measured; ptreport draws the report; bad input (a trace of another plan, a
# truncated trace, a database without runs) is one clear error each.
#   usage: cli_ptcalib.sh BUILD_DIR
set -u
build="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/costs.db"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() {
    want=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" = "$want" ] || fail "$* exited $got, want $want; stderr: $(tail -3 "$tmp/err")"
}
err_has() { grep -q -- "$1" "$tmp/err" || fail "stderr lacks '$1' ($2): $(cat "$tmp/err")"; }
q() { sqlite3 "$tmp/costs.db" "$1"; }
mpi="mpirun --allow-run-as-root --oversubscribe -q -np 2"

run 0 "$build/ptprofile" --quick --no-collectives
run 0 "$build/ptplan" --devices 2 --global-batch 8 --out "$tmp/plan.json" --layout \
    "tp=1,pp=2,vp=1,cp=1,dp=1,zero=0,mbs=2,recompute=none,sp=0,schedule=1f1b"
run 0 $mpi "$build/ptrun" "$tmp/plan.json" --steps 4 --val-every 0 --sample 0 --quiet \
    --record --trace "$tmp/trace.json" --log "$tmp/log.jsonl"
[ -f "$tmp/trace.json.rank1" ] && fail "one merged trace, not one file per rank"
# both ranks' tracks in one file, spans carrying micro-batch and chunk
grep -q '"pid":1' "$tmp/trace.json" || fail "the merged trace holds rank 1's spans"
grep -q '"mb":3,"chunk":0' "$tmp/trace.json" || grep -q '"chunk":0,"mb":3' "$tmp/trace.json" ||
    fail "spans carry micro-batch and chunk"
# aligned clocks: rank 1 (stage 2) cannot start its first forward before rank 0 finished
# the first forward and sent it
first=$(q "SELECT min(start_s) FROM spans WHERE rank = 1 AND name LIKE 'fwd mb0 %'")
sent=$(q "SELECT min(start_s) FROM spans WHERE rank = 0 AND name LIKE 'send_act mb0 %'")
awk -v a="$first" -v b="$sent" 'BEGIN { exit !(a != "" && b != "" && a + 0 >= b - 1e-4) }' ||
    fail "rank 1's first forward ($first s) starts after rank 0 sent it ($sent s)"
[ "$(q "SELECT count(*) FROM run_ranks WHERE measured_memory_bytes > 0 AND peak_rss_bytes > \
      measured_memory_bytes AND predicted_memory_bytes > 0")" = 2 ] || fail "both ranks' memory recorded"
[ "$(q "SELECT count(DISTINCT rank) FROM spans")" = 2 ] || fail "spans of both ranks stored"
[ "$(q "SELECT length(plan_id) FROM runs")" = 16 ] || fail "the run names its plan"

# ptcalib from the trace file and from the database: samples, fits, the per-op table
run 0 "$build/ptcalib" --trace "$tmp/trace.json"
grep -q "attn_fwd:fp32" "$tmp/out" || fail "ptcalib prints the per-op table"
grep -q "step time  measured" "$tmp/out" || fail "ptcalib prints the step's figures"
[ "$(q "SELECT count(*) FROM kernel_fits WHERE class = 'gemm' AND eff > 0.05 AND eff < 2")" = 1 ] ||
    fail "the GEMM efficiency is fitted and stored ($(q "SELECT * FROM kernel_fits"))"
run 0 "$build/ptcalib" --run 1 --no-store
# the fits change what the planner prices analytically: a GEMM shape nobody measured
run 0 "$build/ptplan" --devices 2 --global-batch 8 --no-out --layout \
    "tp=1,pp=2,vp=1,cp=1,dp=1,zero=0,mbs=2,recompute=none,sp=0,schedule=1f1b"

# ptreport: every picture in both formats, and an index linking them
run 0 "$build/ptreport" --out "$tmp/report"
for p in mfu steptime ops timeline memory loss; do
    [ -s "$tmp/report/$p.png" ] && [ -s "$tmp/report/$p.svg" ] || fail "report draws $p"
    grep -q "($p.png)" "$tmp/report/index.md" || fail "index links $p"
done
grep -q "report/index.md" "$tmp/out" || fail "ptreport says where the report is"

# bad input
"$build/ptplan" --devices 2 --global-batch 16 --out "$tmp/other.json" --layout \
    "tp=1,pp=2,vp=1,cp=1,dp=1,zero=0,mbs=2,recompute=none,sp=0,schedule=1f1b" >/dev/null
run 1 "$build/ptcalib" --trace "$tmp/trace.json" --plan "$tmp/other.json"
err_has "was recorded from another plan" "a trace of another plan"
err_has "other.json" "the error names the plan"
head -c 20000 "$tmp/trace.json" > "$tmp/cut.json"
run 1 "$build/ptcalib" --trace "$tmp/cut.json"
err_has "cut.json:1:" "a truncated trace names file and position"
err_has "truncated" "a truncated trace says so"
cp "$tmp/costs.db" "$tmp/noruns.db"
sqlite3 "$tmp/noruns.db" "DELETE FROM spans; DELETE FROM run_ranks; DELETE FROM runs"
run 1 "$build/ptcalib" --db "$tmp/noruns.db" --trace "$tmp/trace.json"
err_has "noruns.db: no runs recorded" "a database without runs"
run 1 "$build/ptreport" --db "$tmp/noruns.db" --out "$tmp/r2"
err_has "noruns.db: no runs recorded" "ptreport on a database without runs"
run 1 "$build/ptcalib" --run 99
err_has "no run 99" "an unknown run"

[ "$failures" = 0 ] && echo "cli_ptcalib: all passed"
exit "$failures"
