#!/bin/sh
# Training throughput on this CPU, one rank: tokens/s and MFU (against the sgemm
# rate ptprofile measured) for tiny and gpt2-124m on one thread, and gpt2-124m at
# micro-batch 4, sequence 64 on two threads (--threads 2), a few steps each after a
# warm-up step. Prints figures; not a test.
#   usage: bench/bench_ptrun.sh BUILD_DIR [STEPS]
set -eu
build="$1"
steps="${2:-4}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PT_COSTS_DB="$tmp/costs.db"
cd "$tmp"
"$build/ptprofile" --quick --no-collectives >/dev/null 2>&1
bench() {
    model=$1 threads=$2; shift 2
    "$build/ptprofile" --quick --no-collectives --model "$model" --devices 1 "$@" >/dev/null 2>&1 || true
    "$build/ptplan" --model "$model" --devices 1 --out "$tmp/$model.json" --top 1 "$@" >/dev/null
    "$build/ptrun" "$tmp/$model.json" --steps $((steps + 1)) --val-every 0 --sample 0 \
        --threads "$threads" \
        --quiet --log "$tmp/$model.jsonl" >/dev/null
    # skip the first (warm-up) step
    tail -n +2 "$tmp/$model.jsonl" | grep '"type":"step"' | awk -v m="$model" -F'[,:]' '
        { for (i = 1; i < NF; i++) { if ($i == "\"tokens_per_s\"") t += $(i+1);
                                    if ($i == "\"mfu\"") u += $(i+1) } n++ }
        END { printf "%-10s %8.0f tokens/s  MFU %5.1f%% (mean of %d steps)\n", m, t/n, 100*u/n, n }' \
        | sed "s/^/[$threads thread(s)] /"
    grep -o '"step_time_s": [0-9.e-]*' "$tmp/$model.json" | head -1 |
        awk -v m="$model" '{ printf "%-10s predicted step %s s\n", m, $2 }'
}
bench tiny 1
bench gpt2-124m 1 --seq 256 --global-batch 4 --max-mbs 4
bench gpt2-124m 2 --seq 64 --global-batch 4 --max-mbs 4
