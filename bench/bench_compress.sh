#!/bin/sh
# Gradient compression, predicted and measured. Figures, not a test.
#  1. Predicted: GPT-2 1.5B on 4 nodes of 8 A100s whose nodes talk over 10 Gb Ethernet
#     (1.25 GB/s line rate per node, IEEE 802.3ae; here per device, as if each GPU had
#     such a port), data parallel over all 32, where the gradient reduction is exposed:
#     ptplan's step time, exposed reduction and tokens/s with compress=none, bf16 and
#     PowerSGD at ranks 1, 4 and 32, and what each saves against none.
#  2. Measured on this machine under mpirun (2 ranks): a small model's gradient bytes
#     per step and rank put on the wire (summed from the --trace spans of the buckets and
#     of PowerSGD's all-reduces, steps after powersgd_start) and its measured step time,
#     for each compression, and their ratios to none. Shared-memory MPI on one machine
#     is fast, so here compression's own work can cost more than the bytes it saves;
#     the first part is where it pays. The runs ignore loss spikes (--spike-action
#     off): they measure bytes and time, and PowerSGD at rank 1 from step 2 spikes on
#     this model at step 14 (gradient norm 293 against a median of 3.9), which would
#     stop the run and the benchmark.
#   usage: bench/bench_compress.sh BUILD_DIR [STEPS]
set -eu
build="$1"
steps="${2:-16}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export PT_COSTS_DB="$tmp/none.db"
mpirun="mpirun -q --oversubscribe"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"

# ---- 1. predicted ----
"$build/ptplan" --dump-cluster dgx-a100-80g |
    sed 's/"name": *"dgx-a100-80g"/"name": "a100-10gbe"/; s/"nodes": *1,/"nodes": 4,/;
         s/"HDR-InfiniBand-200G"/"10GbE"/; s/"bandwidth": *2.5e+*10/"bandwidth": 1.25e9/;
         s/"latency": *5e-0*6/"latency": 2e-5/; s/"bus_bandwidth": *2.3e+*10/"bus_bandwidth": 1.1e9/' \
    >"$tmp/a100-10gbe.json"
grep -q '"bandwidth": 1.25e9' "$tmp/a100-10gbe.json" || { echo "cluster edit failed" >&2; exit 1; }
base="dp=32,mbs=8,zero=0"
echo "predicted: gpt2-1.5b, global batch 512, 4 x 8 A100 over 10 GbE, $base"
"$build/ptplan" --model gpt2-1.5b --cluster "$tmp/a100-10gbe.json" --global-batch 512 \
    --json --compare "$base" "$base,compress=bf16" "$base,compress=powersgd,powersgd_rank=1" \
    "$base,compress=powersgd" "$base,compress=powersgd,powersgd_rank=32" >"$tmp/cmp.json"
python3 - "$tmp/cmp.json" <<'PY' 2>/dev/null || sed -n '1,40p' "$tmp/cmp.json"
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["layouts"]
none = rows[0]["predicted"]["step_time_s"]
print("  %-34s %9s %11s %11s %9s" % ("compress", "step s", "dp exposed", "tokens/s", "saved"))
for r in rows:
    p = r["predicted"]
    s = r["layout"]["string"]
    c = s.split("compress=")[1].split(",")[0] if "compress=" in s else "none"
    if c == "powersgd":
        c += " rank " + s.split("powersgd_rank=")[1].split(",")[0]
    dp = p.get("breakdown", {}).get("dp_zero", {})
    dp = dp.get("exposed_s", 0) if isinstance(dp, dict) else dp
    print("  %-34s %9.3f %11.3f %11.0f %8.1f%%" % (c, p["step_time_s"], dp, p["tokens_per_s"],
                                                 100 * (none - p["step_time_s"]) / none))
PY

# ---- 2. measured ----
cat >"$tmp/small.json" <<'JSON'
{"name": "small", "layers": 4, "hidden": 256, "heads": 4, "kv_heads": 4, "ffn": 1024,
 "vocab": 2048, "seq": 64, "norm": "layernorm", "activation": "gelu",
 "positions": "learned", "tied_embeddings": true, "bias": true, "dropout": false}
JSON
echo
echo "measured on this machine: the small model above (3.7M parameters), dp=2 under mpirun,"
echo "last $steps of $((steps + 4)) steps (PowerSGD from step 2)"
ref_bytes="" ref_time=""
for c in none bf16 "powersgd,powersgd_rank=1,powersgd_start=2" \
         "powersgd,powersgd_rank=4,powersgd_start=2" "powersgd,powersgd_rank=32,powersgd_start=2"; do
    "$build/ptplan" --model "$tmp/small.json" --devices 2 --global-batch 16 \
        --layout "dp=2,mbs=8,compress=$c" --steps $((steps + 4)) --out "$tmp/p.json" >/dev/null
    $mpirun -np 2 "$build/ptrun" "$tmp/p.json" --val-every 0 --sample 0 --quiet --spike-action off \
        --log "$tmp/log" --trace "$tmp/trace.json" --trace-steps "$steps" >/dev/null \
        2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
    # rank 0's bytes: the starts of buckets and of PowerSGD's all-reduces ("... N B")
    bytes=$(grep -o '"name":"\(bucket start\|powersgd start\)[^"]*B","ph":"X","ts":[0-9.]*,"dur":[0-9.]*,"pid":0,' \
                "$tmp/trace.json" | sed 's/.* \([0-9]*\) B".*/\1/' | awk '{ s += $1 } END { print s + 0 }')
    time=$(tail -n "$steps" "$tmp/log" | grep '"type":"step"' | sed 's/.*"time_s":\([^}]*\)}.*/\1/' |
           awk '{ t += $1; n++ } END { print t / n }')
    [ -z "$ref_bytes" ] && ref_bytes=$bytes ref_time=$time
    awk -v c="${c%%,powersgd_start=2}" -v b="$bytes" -v t="$time" -v rb="$ref_bytes" -v rt="$ref_time" \
        -v n="$steps" 'BEGIN {
        printf "  %-30s %10.0f B/step/rank (%.3f of none)  %.4f s/step (%.2f of none)\n",
               c, b / n, b / rb, t, t / rt }'
done
