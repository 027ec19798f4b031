#!/bin/sh
# What tracing costs: the default job (tiny, one rank) trained alternately with and
# without --trace, 5 runs each of 30 steps, comparing the median step time of the
# runs' steps 2..30 (from --log). Prints both and the overhead (target < 2%).
#   usage: bench/bench_trace.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export PT_COSTS_DB="$work/costs.db"
"$build/ptprofile" --quick --no-collectives >/dev/null 2>&1
"$build/ptplan" --devices 1 --out plan.json >/dev/null
for i in 1 2 3 4 5; do
    "$build/ptrun" plan.json --steps 30 --val-every 0 --sample 0 --quiet --log off$i.jsonl >/dev/null
    "$build/ptrun" plan.json --steps 30 --val-every 0 --sample 0 --quiet --log on$i.jsonl \
        --trace t.json >/dev/null
done
median() { cat "$@" | grep '"type":"step"' | grep -v '"step":1,' |
           sed 's/.*"time_s":\([^}]*\)}.*/\1/' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
off=$(median off*.jsonl)
on=$(median on*.jsonl)
spans=$(grep -o '"spans":[0-9]*' t.json | cut -d: -f2)
awk -v a="$off" -v b="$on" -v s="$spans" 'BEGIN {
    printf "median step: %.4f s without the trace, %.4f s with it (%d spans in 30 steps): overhead %+.2f%% (target < 2%%)\n", a, b, s, 100 * (b - a) / a }'
