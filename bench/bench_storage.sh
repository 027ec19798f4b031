#!/bin/sh
# What `ptrun --record` stores, and what it would store for a large job. Trains two jobs
# of the tiny model with --record into a fresh database (the default job, one rank; and
# tp=2 with sequence parallelism on two ranks under mpirun, whose layers run tensor-
# parallel collectives) for STEPS steps each, and prints per run the rows and bytes
# (SQLite's dbstat: the pages of each table and its indexes) of op_stats and spans, and
# the same per step. What the record holds does not grow with steps: op_stats has one
# row per (rank, op key) over the whole run, spans only the last step's instructions.
# Then extrapolates to a 70B model on 64 ranks (Llama 2 70B: 80 layers; tp=8, pp=8, dp=1,
# mbs=1, global batch 512: 512 micro-batches a rank), from the per-row bytes measured here:
#   op_stats rows = ranks x (op keys a rank has: its layer ops are shared by its layers,
#                   plus embedding, head, optimizer and one per collective name),
#   spans rows    = ranks x (6 x micro-batches x virtual stages + the step's others): a
#                   middle pipeline stage receives, runs and sends each micro-batch's
#                   activations and gradients (recv_act fwd send_act recv_grad bwd
#                   send_grad), plus the gradient reduction and the optimizer step.
# Target (issue 13): under 100 MB of database for 50 steps.
#   usage: bench/bench_storage.sh BUILD_DIR [STEPS (default 50)]
set -eu
build=$(cd "$1" && pwd)
steps="${2:-50}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export PT_COSTS_DB="$work/costs.db"
mpirun="mpirun -q --oversubscribe"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
echo "profiling (ptprofile --quick) ..." >&2
"$build/ptprofile" --quick --no-collectives >/dev/null 2>&1
"$build/ptplan" --devices 1 --out one.json >/dev/null
"$build/ptplan" --devices 2 --layout tp=2,sp=1 --out tp2.json >/dev/null
q() { sqlite3 "$PT_COSTS_DB" "$1"; }
# bytes that table $1 and its indexes use (pages less their unused space), before and
# after a run: the run's share
table_bytes() { q "SELECT coalesce(sum(pgsize - unused), 0) FROM dbstat WHERE name = '$1' OR name IN
                   (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = '$1')"; }
printf '%-22s %5s %5s %7s %9s %7s %9s %10s %10s\n' job ranks steps op_stats bytes spans bytes \
    "rows/step" "bytes/step"
for job in one tp2; do
    launch=""
    [ "$job" = tp2 ] && launch="$mpirun -np 2"
    os0=$(table_bytes op_stats) sp0=$(table_bytes spans)
    echo "training $job for $steps steps ..." >&2
    $launch "$build/ptrun" "$job.json" --steps "$steps" --val-every 0 --sample 0 --quiet \
        --record >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    id=$(q "SELECT max(id) FROM runs")
    os=$(q "SELECT count(*) FROM op_stats WHERE run_id = $id")
    sp=$(q "SELECT count(*) FROM spans WHERE run_id = $id")
    world=$(q "SELECT world FROM runs WHERE id = $id")
    osb=$(($(table_bytes op_stats) - os0)) spb=$(($(table_bytes spans) - sp0))
    echo "$job $world $os $osb $sp $spb" >>"$work/rows"
    label="default"
    [ "$job" = tp2 ] && label="tp=2,sp=1"
    printf '%-22s %5d %5d %7d %9d %7d %9d %10.1f %10.0f\n' "$label" "$world" "$steps" \
        "$os" "$osb" "$sp" "$spb" "$(echo "($os + $sp) / $steps" | bc -l)" \
        "$(echo "($osb + $spb) / $steps" | bc -l)"
done
# the tp=2 run: its bytes per row and its op keys per rank
set -- $(grep '^tp2 ' "$work/rows")
keys_rank=$(($3 / $2)) os_row=$(($4 / $3)) sp_row=$(($6 / $5))
other_rank=$(q "SELECT count(*) / $2 FROM spans WHERE run_id = (SELECT max(id) FROM runs)
                AND name NOT LIKE 'fwd %' AND name NOT LIKE 'bwd %'")
ranks=64 micro=512 vp=1
os_rows=$((ranks * keys_rank)) sp_rows=$((ranks * (6 * micro * vp + other_rank)))
total=$((os_rows * os_row + sp_rows * sp_row))
echo
echo "70B on $ranks ranks (tp=8, pp=8, 512 micro-batches a rank), from the tp=2 run's $keys_rank op keys a rank"
echo "(layer count does not add keys: layers share shapes), $os_row bytes an op_stats row, $sp_row a span row:"
printf '  op_stats %d rows, spans %d rows: %.1f MB a run, whatever its steps (target: under 100 MB for 50 steps)\n' \
    "$os_rows" "$sp_rows" "$(echo "$total / 1000000" | bc -l)"
