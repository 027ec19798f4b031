#!/bin/sh
# Makes the calibration fixture of the deterministic tests (tests/data/calib): this
# machine profiled (ptprofile --quick), two recorded runs of the tiny model with
# different layouts (A: one rank, mbs=2; B: the same with full recomputation, a different schedule of
# the same op shapes),
# their plans, and the database as SQL text without the samples and fits the runs
# stored — the tables as profiled plus each run's record and per-op statistics, so that
# a test calibrates from run A and checks the prediction of the held-out run B.
#   usage: bench/make_calib_fixture.sh BUILD_DIR [OUT_DIR (default tests/data/calib)]
set -eu
build=$(cd "$1" && pwd)
out=$(mkdir -p "${2:-$(dirname "$0")/../tests/data/calib}" && cd "${2:-$(dirname "$0")/../tests/data/calib}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export PT_COSTS_DB="$work/costs.db"
"$build/ptprofile" --quick --no-collectives >/dev/null
# both plans from the profile alone, before either run stores samples
base="tp=1,pp=1,vp=1,cp=1,dp=1,zero=0,mbs=2,sp=0,schedule=1f1b"
"$build/ptplan" --devices 1 --global-batch 16 --layout "$base,recompute=none" --out plan_a.json >/dev/null
"$build/ptplan" --devices 1 --global-batch 16 --layout "$base,recompute=full" --out plan_b.json >/dev/null
for name in a b; do
    "$build/ptrun" "plan_$name.json" --steps 8 --val-every 0 --sample 0 --quiet --record >/dev/null
done
sqlite3 costs.db "DELETE FROM kernel_samples WHERE source = 'trace'; DELETE FROM kernel_fits;
                  DELETE FROM link_fits; UPDATE runs SET plan_path = '', host = 'fixture';
                  DELETE FROM profile_runs; VACUUM"
sqlite3 costs.db .dump >"$out/costs.sql"
cp plan_a.json plan_b.json "$out/"
echo "wrote $out: costs.sql ($(wc -c <"$out/costs.sql") bytes), plan_a.json, plan_b.json"
sqlite3 costs.db "SELECT id, layout, measured_step_s, predicted_step_s, gemm_ratio FROM runs"
