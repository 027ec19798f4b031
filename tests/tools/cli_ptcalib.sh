#!/bin/sh
# The loop closed, as a user runs it: a recorded 2-rank pipeline run gives one merged
# trace (both ranks, micro-batches and steps on the spans) and its per-op statistics,
# last step and ranks' memory in costs.db; ptcalib turns them into samples and judged
# fits and prints predicted against measured; ptcalib --forget gives back exactly the
# prediction made before the run; ptreport draws the report; bad input (a trace of
# another plan, a truncated trace, a database without runs, an unknown run) is one
# clear error each. Nothing here depends on how fast or how busy the machine is: the
# live run may be judged noisy (--force calibrates from it anyway), and what is
# asserted is structure and exact restoration; cli_calib_fixture checks the numbers
# on a recorded fixture.
#   usage: cli_ptcalib.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/costs.db"
q() { sqlite3 "$tmp/costs.db" "$1"; }
mpi="mpirun --allow-run-as-root --oversubscribe -q -np 2"

run 0 "$build/ptprofile" --quick --no-collectives
layout="tp=1,pp=2,vp=1,cp=1,dp=1,zero=0,mbs=2,recompute=none,sp=0,schedule=1f1b"
run 0 "$build/ptplan" --devices 2 --global-batch 8 --out "$tmp/plan.json" --layout "$layout"
"$build/ptplan" --devices 2 --global-batch 8 --no-out --layout "$layout" | grep '^predicted' \
    >"$tmp/before.txt"
run 0 $mpi "$build/ptrun" "$tmp/plan.json" --steps 4 --val-every 0 --sample 0 --quiet \
    --record --trace "$tmp/trace.json" --log "$tmp/log.jsonl"
[ -f "$tmp/trace.json.rank1" ] && fail "one merged trace, not one file per rank"
# both ranks' tracks in one file, spans carrying micro-batch and chunk
grep -q '"pid":1' "$tmp/trace.json" || fail "the merged trace holds rank 1's spans"
grep -q '"mb":3,"chunk":0' "$tmp/trace.json" || grep -q '"chunk":0,"mb":3' "$tmp/trace.json" ||
    fail "spans carry micro-batch and chunk"
grep -q '"step":3' "$tmp/trace.json" || fail "spans carry their step"
# the database keeps the last step's schedule (one forward of micro-batch 0 per rank),
# per-op statistics of both ranks, and the steps run and timed
[ "$(q "SELECT count(*) FROM spans WHERE name LIKE 'fwd mb0 %' GROUP BY rank" | tr '\n' ' ')" = "1 1 " ] ||
    fail "the last step's instructions of both ranks are stored"
[ "$(q "SELECT count(DISTINCT rank) FROM op_stats WHERE op_key LIKE 'gemm_bias:%' AND kept >= 1")" = 2 ] ||
    fail "op statistics of both ranks are stored"
[ "$(q "SELECT steps || ' ' || steps_timed FROM runs")" = "4 3" ] || fail "runs.steps is the steps run"
[ "$(q "SELECT count(*) FROM run_ranks WHERE measured_memory_bytes > 0 AND peak_rss_bytes > \
      measured_memory_bytes AND predicted_memory_bytes > 0")" = 2 ] || fail "both ranks' memory recorded"
# only the schedule's instructions, each once: 4 micro-batches through a 2-stage 1F1B
# pipeline are 4 x (fwd, bwd, and a send and a receive) a rank, plus reduce_grads and
# optim_step; the ops inside them are in op_stats
[ "$(q "SELECT count(*) FROM spans WHERE name LIKE '% mb%' GROUP BY rank" | tr '\n' ' ')" = "18 18 " ] ||
    fail "spans: the last step's 18 instructions a rank ($(q "SELECT rank, name FROM spans" | tr '\n' ' '))"
[ "$(q "SELECT count(*) FROM spans WHERE name NOT LIKE '% mb%'")" = 0 ] ||
    fail "spans holds only instructions"
# a GEMM ratio was measured (the profile has the run's GEMM shapes)
[ "$(q "SELECT gemm_ratio > 0 FROM runs")" = 1 ] || fail "the load check ran"
[ "$(q "SELECT length(plan_id) FROM runs")" = 16 ] || fail "the run names its plan"

# ptcalib from the trace file and from the database: samples, fits, the per-op table
run 0 "$build/ptcalib" --trace "$tmp/trace.json" --force
grep -q "attn_fwd:fp32" "$tmp/out" || fail "ptcalib prints the per-op table"
grep -q "^xent:fp32:" "$tmp/out" || fail "the fused cross-entropy is one op, one row"
grep -q "xent_bwd" "$tmp/out" && fail "no cross-entropy backward: the forward writes the gradient"
grep -q "step time  measured" "$tmp/out" || fail "ptcalib prints the step's figures"
grep -q "load check: " "$tmp/out" || fail "ptcalib prints the load check"
grep -Eq "^      (stored: in force|not stored: )" "$tmp/out" || fail "ptcalib judges each fit"
[ "$(q "SELECT count(*) FROM kernel_samples WHERE source = 'trace' AND run_id = 1")" -gt 0 ] ||
    fail "the run's samples are stored under its id"
run 0 "$build/ptcalib" --run 1 --no-store --force
# forgetting the run gives back the tables, and the prediction, as they were before it
run 0 "$build/ptcalib" --forget 1 --dry-run
grep -q "dry run: nothing changed" "$tmp/out" || fail "--dry-run says nothing changed"
[ "$(q "SELECT count(*) FROM kernel_samples WHERE run_id = 1")" -gt 0 ] || fail "--dry-run keeps"
run 0 "$build/ptcalib" --forget 1
[ "$(q "SELECT count(*) FROM kernel_samples WHERE run_id = 1") $(q "SELECT count(*) FROM kernel_fits WHERE run_id = 1") $(q "SELECT forgotten FROM runs")" = "0 0 1" ] ||
    fail "--forget removes the run's samples and fits and marks it"
"$build/ptplan" --devices 2 --global-batch 8 --no-out --layout "$layout" | grep '^predicted' \
    >"$tmp/after.txt"
cmp -s "$tmp/before.txt" "$tmp/after.txt" ||
    fail "the prediction after --forget is the one before the run: $(cat "$tmp/before.txt" "$tmp/after.txt")"
run 1 "$build/ptcalib" --forget 99
err_has "no run 99 to forget" "forgetting an unknown run"
run 1 "$build/ptcalib" --dry-run
err_has "goes with --forget" "--dry-run alone"
run 1 "$build/ptcalib" --forget 1 --run 1
err_has "--forget takes only" "--forget with a calibration option"
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

# Each rank's spans are keyed by the call it makes: under tp=2 a row-parallel layer's
# bias is added by tp rank 0 only, so rank 1's attn_out and mlp_down are plain GEMMs
# (planner/ops.c's keys of that rank's lists), its q keeps its bias.
run 0 "$build/ptplan" --devices 2 --global-batch 4 --out "$tmp/tp2.json" --layout tp=2,mbs=2
run 0 $mpi "$build/ptrun" "$tmp/tp2.json" --steps 2 --val-every 0 --sample 0 --quiet \
    --record --db "$tmp/tp2.db" --trace "$tmp/tp2trace.json"
keys=$(sqlite3 "$tmp/tp2.db" "SELECT DISTINCT rank || ' ' || substr(op_key, 1, instr(op_key, ':') - 1)
    FROM op_stats WHERE name = 'attn_out'" | sort | tr '\n' ',')
[ "$keys" = "0 gemm_bias,1 gemm," ] || fail "tp=2 attn_out keys by rank: $keys"
[ "$(sqlite3 "$tmp/tp2.db" "SELECT count(DISTINCT rank) FROM op_stats WHERE op_key = 'gemm_bias:fp32:m=128,n=32,k=64'")" = 2 ] ||
    fail "tp=2: both ranks' q projections keep their bias"

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
sqlite3 "$tmp/noruns.db" "DELETE FROM spans; DELETE FROM run_ranks; DELETE FROM op_stats; DELETE FROM runs"
run 1 "$build/ptcalib" --db "$tmp/noruns.db" --trace "$tmp/trace.json"
err_has "noruns.db: no runs recorded" "a database without runs"
run 1 "$build/ptreport" --db "$tmp/noruns.db" --out "$tmp/r2"
err_has "noruns.db: no runs recorded" "ptreport on a database without runs"
run 1 "$build/ptcalib" --run 99
err_has "no run 99" "an unknown run"

[ "$failures" = 0 ] && echo "cli_ptcalib: all passed"
exit "$failures"
