#!/bin/sh
# Regression check of the predictions: profiles this machine, trains a small matrix of
# layouts of the tiny model (at most 2 ranks, as many as CI's cores, so timings mean
# something), calibrates the cost tables from each run's trace (ptcalib), re-predicts
# every layout from the calibrated tables and prints the mean absolute percentage
# error (MAPE) of step time and of MFU, before and after calibration. A benchmark, not a
# test: its figures depend on the machine and its load (ptcalib --force calibrates from
# runs the load check finds noisy, and the script says how many were). Exits 1 only when
# a THRESHOLD_PCT is given and the calibrated MAPE of step time is above it.
#   usage: scripts/ptregress.sh BUILD_DIR [THRESHOLD_PCT]
# ctest checks calibration on a recorded fixture instead (tests/tools/cli_calib_fixture.sh).
set -eu
build=$(cd "$1" && pwd)
threshold="${2:-}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export PT_COSTS_DB="$work/costs.db"
mpi="mpirun --allow-run-as-root --oversubscribe -q"
"$build/ptprofile" --quick --no-collectives >/dev/null 2>&1
# layout  ranks
matrix="tp=1,pp=1,vp=1,cp=1,dp=1,zero=0,mbs=2,recompute=none,sp=0,schedule=1f1b 1
tp=1,pp=1,vp=1,cp=1,dp=1,zero=0,mbs=4,recompute=full,sp=0,schedule=1f1b 1
tp=1,pp=1,vp=1,cp=1,dp=2,zero=1,mbs=2,recompute=none,sp=0,schedule=1f1b 2
tp=1,pp=2,vp=1,cp=1,dp=1,zero=0,mbs=2,recompute=none,sp=0,schedule=1f1b 2"
# every layout planned from the profile alone, before any run is calibrated from
i=0
echo "$matrix" | while read -r layout n; do
    i=$((i + 1))
    "$build/ptplan" --devices "$n" --global-batch 16 --layout "$layout" --out "plan$i.json" \
        >/dev/null </dev/null
done
i=0
echo "$matrix" | while read -r layout n; do
    i=$((i + 1))
    # (mpirun reads stdin: every command here gets /dev/null, not the matrix)
    $mpi -np "$n" "$build/ptrun" "plan$i.json" --steps 6 --val-every 0 --sample 0 --quiet \
        --record --trace "trace$i.json" >/dev/null </dev/null
    "$build/ptcalib" --trace "trace$i.json" --plan "plan$i.json" --force >"calib$i.txt" </dev/null
    if grep -q "is noisy" "calib$i.txt"; then
        echo "run $i ($layout) was noisy: $(grep -o 'is noisy ([^;]*' "calib$i.txt")"
    fi
done
# re-predict every layout from the calibrated tables, against what its run measured
i=0
echo "$matrix" | while read -r layout n; do
    i=$((i + 1))
    "$build/ptcalib" --run "$i" --plan "plan$i.json" --no-store </dev/null | grep -A2 '^step of run' | tail -2
done >steps.txt
awk -v thr="$threshold" '
    /step time/ { n++; b += abs($(NF-8)); a += abs($NF) }
    /MFU/       { bm += abs($(NF-3)); am += abs($NF) }
    function abs(x) { gsub(/[()%+]/, "", x); x += 0; return x < 0 ? -x : x }
    END {
        printf "layouts %d\nstep time MAPE: %.1f%% as planned, %.1f%% re-predicted after calibration\n", n, b / n, a / n
        printf "MFU MAPE:       %.1f%% as planned, %.1f%% re-predicted after calibration\n", bm / n, am / n
        if (thr != "" && a / n > thr) { printf "FAIL: step time MAPE %.1f%% > %s%%\n", a / n, thr; exit 1 }
    }' steps.txt
