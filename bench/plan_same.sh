#!/bin/sh
# Checks that two builds of ptplan predict the same, to the digit: a refactoring of the
# planner, the simulator or the cost models must leave every figure unchanged. It runs
# the search (every built-in stack on several built-in models and clusters), a dozen
# --layout and --compare evaluations, --validate on the published runs and one
# --timeline with each build, and compares the outputs byte for byte. Pricing is
# analytic (an empty cost table) except where a cluster has a shipped profile, which
# both builds read from the same source tree.
#   usage: bench/plan_same.sh OLD_BUILD NEW_BUILD      (exit 0: identical; 1: they differ)
#          bench/plan_same.sh --write BUILD DIR        (only write BUILD's outputs into DIR)
set -eu
cd "$(dirname "$0")/.."

usage() { echo "usage: bench/plan_same.sh OLD_BUILD NEW_BUILD | --write BUILD DIR" >&2; exit 2; }

# snapshot BUILD DIR: one file per ptplan call in DIR.
snapshot() {
    b="$1"; out="$2"
    [ -x "$b/ptplan" ] || { echo "plan_same: no ptplan in $b" >&2; exit 2; }
    mkdir -p "$out"
    db=/nonexistent/plan_same/costs.db  # no cost table: analytic, and the same text
    n=0
    run() {  # run NAME ARGS...: ptplan's stdout and exit status into DIR/NAME
        name="$1"; shift
        n=$((n + 1))
        rc=0
        PT_COSTS_DB="$db" "$b/ptplan" --no-out "$@" >"$out/$name" 2>&1 || rc=$?
        echo "exit $rc" >>"$out/$name"
    }
    for stack in ptrun megatron-lm megatron-core fsdp; do
        run "search-$stack-gpt2-124m" --json --top 20 --stack $stack --model gpt2-124m --cluster dgx-h100
        run "search-$stack-llama3-70b" --json --top 20 --stack $stack --model llama3-70b \
            --cluster dgx-h100 --nodes 8 --seq 8192 --global-batch 1024
        run "search-$stack-gpt3-175b" --json --top 20 --stack $stack --model gpt3-175b \
            --cluster dgx-a100-80g --nodes 16 --global-batch 1536
        run "search-$stack-llama2-7b" --json --top 20 --stack $stack --model llama2-7b \
            --cluster dgx-a100-80g --precision bf16-grad16
    done
    run search-tiny-local --json --top 0 --model tiny --cluster local
    run search-tiny-llama-local --json --top 0 --model tiny-llama --cluster local --devices 2
    run search-gpt2-1.5b-compress --json --top 20 --model gpt2-1.5b --cluster dgx-a100-80g \
        --nodes 4 --compress none,bf16,powersgd
    run search-text-gpt2-350m --top 10 --model gpt2-350m --cluster dgx-h100 --nodes 2
    i=0
    for l in "tp=8,pp=4,vp=2,dp=2,zero=1,mbs=1,recompute=selective,sp=1,schedule=interleaved" \
             "tp=4,pp=2,cp=2,dp=8,zero=1,mbs=1,sp=1" \
             "tp=2,pp=8,dp=4,zero=0,mbs=2,recompute=full,schedule=1f1b" \
             "tp=8,pp=8,dp=1,zero=1,mbs=1,schedule=afab" \
             "dp=64,zero=3,mbs=1,recompute=full" \
             "dp=64,zero=2,mbs=1,recompute=selective" \
             "tp=8,cp=8,zero=1,mbs=1,sp=1" \
             "tp=4,pp=4,vp=4,dp=4,zero=1,mbs=1,sp=1,schedule=interleaved,compress=bf16" \
             "tp=8,pp=2,dp=4,zero=0,mbs=1,compress=powersgd,powersgd_rank=4" \
             "tp=1,pp=16,vp=5,dp=4,mbs=1,schedule=interleaved" \
             "tp=8,pp=8" \
             "tp=16,dp=4,mbs=1"; do
        i=$((i + 1))
        for stack in ptrun megatron-core; do
            run "layout-$i-$stack" --json --explain --stack $stack --model llama3-70b \
                --cluster dgx-h100 --nodes 8 --seq 8192 --global-batch 1024 --layout "$l"
        done
        run "layout-$i-gpt3-text" --explain --model gpt3-175b --cluster dgx-a100-80g \
            --nodes 8 --layout "$l"
    done
    run compare-gpt2-1.5b --json --model gpt2-1.5b --cluster dgx-h100 --compare \
        "dp=8,zero=1,mbs=4" "tp=2,dp=4,mbs=4,sp=1" "pp=2,dp=4,mbs=2,schedule=1f1b" \
        "cp=2,dp=4,mbs=4" "dp=8,zero=3,mbs=8,recompute=full"
    run compare-tiny-text --model tiny --cluster local --compare "dp=2" "tp=2" "pp=2" "cp=2"
    for v in tests/validation/public-set.json tests/validation/holdout.json; do
        run "validate-$(basename "$v" .json)" --validate "$v"
    done
    n=$((n + 1))
    bin=$(cd "$b" && pwd)/ptplan
    (cd "$out" && PT_COSTS_DB="$db" "$bin" --no-out --model gpt2-124m --cluster dgx-h100 \
        --layout "pp=2,dp=4,mbs=2,schedule=1f1b" --timeline timeline.json \
        >timeline.out 2>&1) || echo "exit $?" >>"$out/timeline.out"
    (cd "$out" && PT_COSTS_DB="$db" "$bin" --devices 1 --out plan.json >/dev/null 2>&1) ||
        echo "ptplan --out failed" >"$out/plan.json"
    echo "plan_same: $n ptplan calls of $b into $out" >&2
}

if [ "${1:-}" = "--write" ]; then
    [ $# -eq 3 ] || usage
    snapshot "$2" "$3"
    exit 0
fi
[ $# -eq 2 ] || usage
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
snapshot "$1" "$tmp/old"
snapshot "$2" "$tmp/new"
if diff -r "$tmp/old" "$tmp/new" >"$tmp/diff"; then
    echo "plan_same: identical ($(ls "$tmp/old" | wc -l) outputs)"
else
    head -60 "$tmp/diff"
    echo "plan_same: the builds' predictions differ" >&2
    exit 1
fi
