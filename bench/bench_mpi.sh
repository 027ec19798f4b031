#!/bin/sh
# Multi-rank step time against the planner: after ptprofile --quick (GEMMs, kernels,
# MPI collectives), plan tiny on this machine as dp=2, pp=2, tp=2 and cp=2, train each under
# mpirun for a few steps, and print measured and predicted step time and their ratio.
# Figures, not a test: the two ranks share this machine's cores with everything else.
#   usage: bench/bench_mpi.sh BUILD_DIR [STEPS]
set -eu
build="$1"
steps="${2:-8}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PT_COSTS_DB="$tmp/costs.db"
cd "$tmp"
mpirun="mpirun -q --oversubscribe"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
"$build/ptprofile" --quick >/dev/null 2>&1
for layout in "dp=2" "pp=2" "tp=2" "tp=2,sp=1" "cp=2"; do
    "$build/ptplan" --devices 2 --layout "$layout,mbs=8" --out "$tmp/p.json" >/dev/null
    $mpirun -np 2 "$build/ptrun" "$tmp/p.json" --steps $((steps + 1)) --val-every 0 \
        --sample 0 --quiet --log "$tmp/log" >/dev/null
    predicted=$(grep -o '"step_time_s": [0-9.e-]*' "$tmp/p.json" | head -1 | cut -d' ' -f2)
    tail -n +2 "$tmp/log" | grep '"type":"step"' |
        sed 's/.*"time_s":\([^}]*\)}.*/\1/' |
        awk -v l="$layout" -v p="$predicted" '{ t += $1; n++ }
            END { m = t / n; printf "%-10s measured %.4f s/step, predicted %.4f s/step, " \
                  "measured/predicted %.2f (mean of %d steps)\n", l, m, p, m / p, n }'
done
