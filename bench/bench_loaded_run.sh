#!/bin/sh
# Issue 13's scenario: profile an idle machine, predict a layout, record one training
# run while every core is busy with another program, predict again. The second
# prediction must stay within 10% of the first, or the run must be marked noisy (and
# its timings kept out of the tables) with a message; `ptcalib --forget` must then give
# back the first prediction exactly. Prints both predictions, what ptrun said about the
# load, and what --forget restored. A benchmark: what the load does depends on the
# machine (run it on an otherwise idle one, so that the profile is clean).
#   usage: bench/bench_loaded_run.sh BUILD_DIR [BUSY_LOOPS (default: one per core)]
set -eu
build=$(cd "$1" && pwd)
loops="${2:-$(nproc)}"
work=$(mktemp -d)
busy=""
cleanup() { [ -n "$busy" ] && kill $busy 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"
export PT_COSTS_DB="$work/costs.db"
mpirun="mpirun -q --oversubscribe"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
layout="mbs=4"
# the predicted step time of one rank at micro-batch 4 (to the digit), as ptplan --json gives it
predict() { "$build/ptplan" --devices 1 --layout "$layout" --no-out --json |
            grep -o '"step_time_s": *[0-9.e+-]*' | sed 's/.*: *//'; }
echo "profiling the idle machine (ptprofile --quick) ..." >&2
"$build/ptprofile" --quick --no-collectives >/dev/null 2>&1
"$build/ptplan" --devices 2 --out run.json >/dev/null
before=$(predict)
echo "before the run:       $before s/step"
echo "training $(grep -o '"string": *"[^"]*"' run.json | head -1) on 2 ranks with $loops busy loops ..." >&2
for i in $(seq "$loops"); do
    sh -c 'while :; do :; done' &
    busy="$busy $!"
done
$mpirun -np 2 "$build/ptrun" run.json --steps 20 --val-every 0 --sample 0 --quiet --record \
    >"$work/out" 2>&1
kill $busy
busy=""
grep -i "noisy\|load" "$work/out" | sed 's/^/ptrun: /' || true
after=$(predict)
echo "after the loaded run: $after s/step: $(awk -v a="$before" -v b="$after" \
      'BEGIN { printf "%+.1f", 100 * (b - a) / a }')% (target: within 10%, or the run marked noisy)"
sqlite3 "$PT_COSTS_DB" "SELECT 'run ' || id || ': GEMMs ' || printf('%.2f', gemm_ratio) ||
    'x the profile; noisy: ' || CASE noisy WHEN '' THEN 'no' ELSE noisy END FROM runs"
id=$(sqlite3 "$PT_COSTS_DB" "SELECT max(id) FROM runs")
if [ -n "$(sqlite3 "$PT_COSTS_DB" "SELECT noisy FROM runs WHERE id = $id")" ]; then
    # what taking the noisy run anyway would have done, and that --forget undoes it
    "$build/ptcalib" --run "$id" --force >/dev/null
    echo "had it been taken (ptcalib --run $id --force): $(predict) s/step"
fi
"$build/ptcalib" --forget "$id" | tail -2
restored=$(predict)
echo "after --forget $id:     $restored s/step"
[ "$restored" = "$before" ] && echo "restored exactly" || echo "NOT restored exactly"
