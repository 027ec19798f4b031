#!/bin/sh
# What tracing costs, as the ratio of step times with and without --trace, on two jobs:
# the default job (tiny on `local`, one rank) with 64 micro-batches of 1 (about 8,000
# spans a step) and tiny as pp=2 on two ranks under mpirun (about 4,000 spans a step on each).
# Each job is trained ROUNDS times without and ROUNDS times with --trace, alternating
# (off-on, then on-off, so that a machine slowing down or speeding up charges both
# alike); a run's step time is the median of its steps 2..STEPS (from --log), and the
# overhead is the median over the rounds of (with / without) - 1, which a shared, noisy
# machine moves far less than a single pair of runs. Also prints the trace's spans and
# size. Target: under 2 % (issue 9).
#   usage: bench/bench_trace.sh BUILD_DIR [ROUNDS [STEPS]]     (defaults 7, 20)
set -eu
build=$(cd "$1" && pwd)
rounds="${2:-7}"
steps="${3:-20}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export PT_COSTS_DB="$work/costs.db"
mpirun="mpirun -q --oversubscribe"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
"$build/ptprofile" --quick --no-collectives >/dev/null 2>&1
"$build/ptplan" --devices 1 --layout mbs=1 --out one.json >/dev/null  # what ptplan picks on a
# slow profile; a faster one may pick mbs = 8, a tenth of the spans
"$build/ptplan" --devices 2 --layout pp=2 --out pp2.json >/dev/null

# The median step time of a log's steps 2.. (the first pays for warming up).
run_median() { grep '"type":"step"' "$1" | grep -v '"step":1,' |
               sed 's/.*"time_s":\([^}]*\)}.*/\1/' | sort -g |
               awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# One run of job $1 (one or pp2) with ("on") or without ("off") the trace: prints its
# median step time.
one_run() {
    launch=""
    [ "$1" = pp2 ] && launch="$mpirun -np 2"
    trace=""
    [ "$2" = on ] && trace="--trace $work/$1.trace.json"
    $launch "$build/ptrun" "$1.json" --steps "$steps" --val-every 0 --sample 0 --quiet \
        --log "$work/$1.log" $trace >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    run_median "$work/$1.log"
}

# Rounds of job $1; prints one line with the overhead.
measure() {
    : > "$work/$1.pairs"
    for i in $(seq "$rounds"); do
        if [ $((i % 2)) = 1 ]; then
            off=$(one_run "$1" off); on=$(one_run "$1" on)
        else
            on=$(one_run "$1" on); off=$(one_run "$1" off)
        fi
        echo "$off $on" >> "$work/$1.pairs"
    done
    spans=$(grep -o '"spans":[0-9]*' "$work/$1.trace.json" | cut -d: -f2)
    bytes=$(wc -c < "$work/$1.trace.json")
    off=$(cut -d' ' -f1 "$work/$1.pairs" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    awk '{ print $2 / $1 }' "$work/$1.pairs" | sort -g |
        awk -v job="$2" -v off="$off" -v s="$spans" -v b="$bytes" -v st="$steps" '
        { r[NR] = $1 }
        END {
            m = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
            printf "%-24s %.4f s/step without the trace; with it x%.4f: overhead %+.2f%% " \
                   "(median of %d alternating pairs, %.3f..%.3f; %d spans in %d steps, " \
                   "%.1f MB of JSON; target < 2%%)\n", job, off, m, 100 * (m - 1), NR,
                   r[1], r[NR], s, st, b / 1e6 }'
}

measure one "default (1 rank)"
measure pp2 "pp=2 (2 ranks, mpirun)"
