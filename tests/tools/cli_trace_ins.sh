#!/bin/sh
# Predicted and measured meet instruction by instruction: the simulator's timeline
# (ptplan --timeline) and ptrun's trace of the same plan give every span of a
# schedule instruction the index of that instruction in its rank's program (args.ins).
# For pp=2 (1F1B) and pp=2, vp=2 (interleaved) on two ranks, every forward, backward
# and optimizer step the simulator draws is in the last step of the measured trace at
# the same (rank, index) with the same micro-batch and chunk, and every measured
# forward and backward is in the timeline; the op spans of an instruction carry its
# index and their places 0, 1, 2, ... among its ops, the cross-entropy and the step's
# end (gradient norm, Adam) included; and under dp=2 every op of the gradient-bucket
# list is a span of its own.
#   usage: cli_trace_ins.sh BUILD_DIR
build=$1
. "$(dirname "$0")/cli_lib.sh"

for layout in "pp=2,mbs=2" "pp=2,vp=2,mbs=2"; do
    run 0 "$build/ptplan" --devices 2 --layout "$layout" --global-batch 8 --steps 2 \
        --out "$tmp/plan.json" --timeline "$tmp/predicted.json"
    run 0 $mpirun -np 2 "$build/ptrun" "$tmp/plan.json" --trace "$tmp/measured.json" \
        --val-every 0 --sample 0 --quiet
    python3 - "$tmp/predicted.json" "$tmp/measured.json" "$layout" <<'PY' ||
import json, re, sys
pred = json.load(open(sys.argv[1]))["traceEvents"]
meas = json.load(open(sys.argv[2]))["traceEvents"]
kinds = {"F": "fwd", "B": "bwd", "optimizer": "optim_step"}
p = {}
for e in pred:
    a = e.get("args", {})
    k = e["name"].split(" mb")[0].split(" c")[0]
    if "ins" in a and k in kinds:
        m = re.search(r"mb(\d+) c(\d+)", e["name"])
        p[(e["pid"], a["ins"])] = (kinds[k], m.groups() if m else None)
last = max(e["args"]["step"] for e in meas if "step" in e.get("args", {}))
m, ops = {}, {}
for e in meas:
    a = e.get("args", {})
    if a.get("step") != last or "ins" not in a:
        continue
    if "op" in a:
        ops.setdefault((e["pid"], a["ins"]), []).append((a["op"], e["name"]))
    else:
        k = e["name"].split(" mb")[0]
        mbc = (str(a["mb"]), str(a["chunk"])) if "mb" in a else None
        m[(e["pid"], a["ins"])] = (k, mbc)
bad = [f"{k}: predicted {v}, measured {m.get(k)}" for k, v in p.items() if m.get(k) != v]
bad += [f"{k}: measured {v}, not in the timeline" for k, v in m.items()
        if v[0] in ("fwd", "bwd") and k not in p]
for k, v in ops.items():
    v.sort()
    if [i for i, _ in v] != list(range(len(v))):
        bad.append(f"{k}: op indices {[i for i, _ in v]}")
    if k not in m:
        bad.append(f"{k}: ops of no instruction")
names = {name for v in ops.values() for _, name in v}
for want in ("xent", "adam", "grad_norm_allreduce"):
    if want not in names:
        bad.append(f"no {want} op span")
if len(p) < 8 or bad:
    print(f"{sys.argv[3]}: {len(p)} predicted instructions", *bad[:5], sep="\n  ")
    sys.exit(1)
print(f"{sys.argv[3]}: {len(p)} predicted instructions met in the trace, "
      f"{sum(map(len, ops.values()))} op spans indexed")
PY
        fail "$layout: timeline and trace do not meet instruction by instruction"
done

# Every op of a chunk's gradient-bucket list runs and is a span: with buckets of 100000
# bytes the tiny model's gradients are full buckets (one op run several times) and the
# rest (a second op), then the bf16 buckets are widened (bf16_convert); each rank's last
# step holds those spans, in the list's order, under its REDUCE_GRADS instruction.
run 0 "$build/ptplan" --devices 2 --layout "dp=2,zero=0,compress=bf16" --global-batch 8 \
    --steps 2 --out "$tmp/plan.json"
python3 - "$tmp/plan.json" <<'PY' || fail "could not set the plan's bucket size"
import json, sys
p = json.load(open(sys.argv[1]))
p["training"]["bucket_bytes"] = 100000
json.dump(p, open(sys.argv[1], "w"))
PY
run 0 $mpirun -np 2 "$build/ptrun" "$tmp/plan.json" --trace "$tmp/measured.json" \
    --val-every 0 --sample 0 --quiet
python3 - "$tmp/measured.json" <<'PY' || fail "dp=2: the bucket list's ops are not each a span"
import json, sys
meas = json.load(open(sys.argv[1]))["traceEvents"]
last = max(e["args"]["step"] for e in meas if "step" in e.get("args", {}))
want = ["dp_bucket", "dp_bucket", "bf16_convert"]
for rank in sorted({e["pid"] for e in meas if "args" in e}):
    ops = sorted((e["args"]["op"], e["name"]) for e in meas
                 if e["pid"] == rank and e.get("args", {}).get("step") == last
                 and "op" in e["args"] and e["name"] in ("dp_bucket", "bf16_convert"))
    if [n for _, n in ops] != want:
        print(f"rank {rank}: bucket-list spans {[n for _, n in ops]}, want {want}")
        sys.exit(1)
print("dp=2: every op of the bucket list is a span on each rank")
PY

[ "$failures" = 0 ] && echo "cli_trace_ins: all passed"
exit "$failures"
