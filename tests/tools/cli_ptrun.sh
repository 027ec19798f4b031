#!/bin/sh
# ptrun as a user runs it: the default job (tiny on this machine's built-in text)
# starts at the loss of a uniform guess and learns; a run stopped and resumed from
# its checkpoint gives bit-identical losses; the trace carries the planner's op
# keys; and bad input is refused without overwriting anything.
#   usage: cli_ptrun.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"
# field N of the log line of step S: jq-free, the log's fields are in a fixed order
loss_at() { grep "\"type\":\"$2\",\"step\":$3," "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/; s/.*"loss":\([^}]*\)}.*/\1/'; }

# The README's job: profile this machine, plan the default model on one rank, train.
run 0 "$build/ptprofile" --quick --no-collectives
run 0 "$build/ptplan" --devices 1 --out "$tmp/plan.json" --top 1
[ -f "$tmp/plan.json" ] || fail "ptplan writes the default plan"

# The default run: loss at step 1 within 2% of ln(256) = 5.5452 (a uniform guess over
# the byte vocabulary), and validation loss below 3.4 after 100 steps (printed; the
# bound leaves room for other BLAS builds, whose sums are taken in other orders).
run 0 "$build/ptrun" "$tmp/plan.json" --steps 100 --val-every 50 --log "$tmp/log.jsonl" \
    --trace "$tmp/trace.json" --sample 32
first=$(loss_at "$tmp/log.jsonl" step 1)
awk -v l="$first" 'BEGIN { d = l - log(256); if (d < 0) d = -d; exit !(d / log(256) < 0.02) }' ||
    fail "step-1 loss $first is not within 2% of ln(256)"
val=$(loss_at "$tmp/log.jsonl" val 100)
awk -v l="$val" 'BEGIN { exit !(l < 3.4) }' || fail "validation loss $val after 100 steps is not below 3.4"
echo "default run: step-1 loss $first, validation loss $val after 100 steps (bound 3.4)"
grep -q "^sample: " "$tmp/out" || fail "a sample of text is printed"
# q, k and v of tiny (h = 64, with biases) on mbs x 64 tokens, one batched GEMM (qkv),
# under the planner's key
mbs=$(grep -o '"mbs": [0-9]*' "$tmp/plan.json" | head -1 | tr -dc '0-9')
grep -q "\"name\":\"qkv\",[^}]*\"key\":\"gemm_bias:fp32:b=3,m=$((mbs * 64)),n=64,k=64\"" \
    "$tmp/trace.json" || fail "trace spans carry the planner's op keys"
grep -q '"name":"attn_bwd"' "$tmp/trace.json" || fail "trace has the backward ops"
grep -q "MFU" "$tmp/out" || fail "steps print MFU"
# ptrun's MFU counts the planner's FLOPs: MFU x time = FLOPs / peak on both sides.
pm=$(grep -o '"mfu": [0-9.e-]*' "$tmp/plan.json" | head -1 | cut -d' ' -f2)
pt=$(grep -o '"step_time_s": [0-9.e-]*' "$tmp/plan.json" | head -1 | cut -d' ' -f2)
lm=$(grep '"step":2,' "$tmp/log.jsonl" | sed 's/.*"mfu":\([^,]*\),.*/\1/')
lt=$(grep '"step":2,' "$tmp/log.jsonl" | sed 's/.*"time_s":\([^}]*\)}.*/\1/')
awk -v a="$pm" -v b="$pt" -v c="$lm" -v d="$lt" \
    'BEGIN { x = a * b; y = c * d; e = (x - y) / x; if (e < 0) e = -e; exit !(x > 0 && e < 1e-3) }' ||
    fail "ptrun's MFU ($lm x $lt s) and the plan's ($pm x $pt s) count different FLOPs"

# The log: a header naming the plan (path and hash), the model with its size, the layout
# and the build; then on every line its time (ISO 8601 UTC and the same instant in Unix
# seconds), the tokens the weights have been trained on and the memory in use; a step
# line's time_s stays its last field (scripts read it up to the brace).
python3 - "$tmp/log.jsonl" "$tmp/plan.json" <<'PY' || fail "the log's header and per-line fields"
import datetime, json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
plan = json.load(open(sys.argv[2]))
h = lines[0]
assert h["type"] == "header" and h["plan"].endswith("/plan.json"), h
assert len(h["plan_id"]) == 16 and h["plan_created_by"].startswith("ptplan "), h
assert h["layout"] == plan["layout"]["string"] and h["version"], h
spec = h["model_spec"]
assert h["model"] == "tiny" and spec["layers"] == plan["model"]["layers"], h
assert spec["hidden"] == plan["model"]["hidden"] and spec["params"] > 0, h
tps = plan["training"]["global_batch"] * plan["model"]["seq"]
assert h["tokens_per_step"] == tps, (h["tokens_per_step"], tps)
utc = datetime.timezone.utc
last = 0
for l in lines:
    t = datetime.datetime.strptime(l["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=utc)
    assert abs(t.timestamp() - l["unix_s"]) < 0.0015, l
    assert l["unix_s"] >= last, ("time goes back", l)
    last = l["unix_s"]
    assert l["allocated_bytes"] == lines[0]["allocated_bytes"] > 0, l
    assert l["peak_rss_bytes"] > 0, l
    # a val or params line: after the steps of its step number
    want = 0 if l["type"] == "header" else l["step"] * tps
    assert l["tokens_seen"] == want, (l, want)
steps = [l for l in lines if l["type"] == "step"]
assert len(steps) == 100 and list(steps[-1])[-1] == "time_s", steps[-1]
PY

# --record: the run, predicted against measured, and its op timings (source trace) go
# into the cost table, and ptplan then prices that layout from them.
run 0 "$build/ptrun" "$tmp/plan.json" --steps 6 --val-every 0 --sample 0 --quiet --record \
    --db "$tmp/rec.db"
[ "$(sqlite3 "$tmp/rec.db" "SELECT count(*) FROM runs WHERE measured_step_s > 0 AND world = 1 \
      AND steps = 6 AND steps_timed = 5 AND model = 'tiny' AND predicted_step_s > 0")" = 1 ] ||
    fail "the run is recorded (steps run 6, timed 5)"
# Its op timings become samples under its id, unless the load check found the machine
# busy (this test does not depend on load: either way the run says which it was).
noisy=$(sqlite3 "$tmp/rec.db" "SELECT noisy FROM runs")
samples=$(sqlite3 "$tmp/rec.db" "SELECT count(*) FROM kernel_samples WHERE source = 'trace' AND run_id = 1")
if [ -n "$noisy" ]; then
    [ "$samples" = 0 ] || fail "a noisy run stores no samples ($samples)"
    grep -q "^noisy:  run 1 is not calibrated" "$tmp/out" || fail "ptrun says the run was noisy"
else
    [ "$samples" -gt 10 ] || fail "the run's op timings are recorded ($samples)"
    layout=$(grep -o '"string": "[^"]*"' "$tmp/plan.json" | head -1 | cut -d'"' -f4)
    run 0 "$build/ptplan" --db "$tmp/rec.db" --devices 1 --layout "$layout" --json --no-out
    measured=$(grep -A3 '"provenance"' "$tmp/out" | grep '"measured"' | head -1 | tr -dc '0-9.')
    awk -v m="$measured" 'BEGIN { exit !(m > 0.9) }' ||
        fail "the recorded layout is priced from the trace (measured share $measured)"
fi

# Stop after 6 of 12 steps with a checkpoint, resume: steps 7..12 match an
# uninterrupted run bit for bit.
run 0 "$build/ptrun" "$tmp/plan.json" --steps 12 --val-every 0 --sample 0 --quiet \
    --log "$tmp/full.jsonl"
run 0 "$build/ptrun" "$tmp/plan.json" --steps 12 --val-every 0 --sample 0 --quiet \
    --checkpoint "$tmp/ck" --stop-after 6 --log "$tmp/part.jsonl"
[ -f "$tmp/ck/step_00000006/meta.json" ] &&
    [ -f "$tmp/ck/step_00000006/model-00001-of-00001.safetensors" ] || fail "checkpoint written"
run 0 "$build/ptrun" "$tmp/plan.json" --steps 12 --val-every 0 --sample 0 --quiet \
    --resume "$tmp/ck" --log "$tmp/part.jsonl"
# the resumed run's header counts the 6 steps its checkpoint had taken
grep '"type":"header"' "$tmp/part.jsonl" | tail -1 >"$tmp/h2"
tps=$(grep -o '"tokens_per_step":[0-9]*' "$tmp/h2" | cut -d: -f2)
grep -q "\"resumed_from_step\":6" "$tmp/h2" && [ -n "$tps" ] &&
    grep -q "\"tokens_seen\":$((6 * tps))," "$tmp/h2" ||
    fail "a resumed run's header has the checkpoint's tokens seen: $(cat "$tmp/h2")"
for s in 7 9 12; do
    a=$(loss_at "$tmp/full.jsonl" step $s)
    b=$(loss_at "$tmp/part.jsonl" step $s)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "step $s: resumed loss $b differs from $a"
done
# Same plan, same seed: bit-identical losses.
run 0 "$build/ptrun" "$tmp/plan.json" --steps 12 --val-every 0 --sample 0 --quiet \
    --log "$tmp/again.jsonl"
[ "$(loss_at "$tmp/again.jsonl" step 12)" = "$(loss_at "$tmp/full.jsonl" step 12)" ] ||
    fail "the same run twice gives different losses"

# Dropout is applied: the same run with --dropout 0.1 has another step-1 loss (every
# layout matching one rank with dropout on, in mpi_equivalence.sh, would also hold if
# dropout were never applied at all).
run 0 "$build/ptrun" "$tmp/plan.json" --steps 1 --val-every 0 --sample 0 --quiet \
    --dropout 0.1 --log "$tmp/drop.jsonl"
[ -n "$(loss_at "$tmp/drop.jsonl" step 1)" ] &&
    [ "$(loss_at "$tmp/drop.jsonl" step 1)" != "$(loss_at "$tmp/full.jsonl" step 1)" ] ||
    fail "--dropout 0.1 leaves the step-1 loss as it was"

# ---- bad input -----------------------------------------------------------------------
run 1 "$build/ptrun" "$tmp/plan.json" --dropout 1
err_has "--dropout" "dropout probability out of range"
sed 's/"dropout": 0\(\.0\)*,/"dropout": -0.5,/' "$tmp/plan.json" >"$tmp/plan-drop.json"
run 1 "$build/ptrun" "$tmp/plan-drop.json"
err_has "dropout" "negative dropout in the plan"
run 0 "$build/ptplan" --devices 2 --out "$tmp/plan2.json" --top 1
run 1 "$build/ptrun" "$tmp/plan2.json"
err_has "needs 2 ranks, but ptrun was started as 1" "plan for another world size"
# a plan priced for Megatron-Core with a kind of cp communication ptrun does not run:
# refused before anything starts, naming the kinds it runs
run 0 "$build/ptplan" --devices 2 --stack megatron-core --layout "cp=2,cp_comm=all_gather" \
    --out "$tmp/plan-ag.json"
run 1 "$build/ptrun" "$tmp/plan-ag.json"
err_has "plan-ag.json: layout cp_comm=all_gather (priced for stack 'megatron-core'): ptrun runs cp_comm p2p, a2a, a2a+p2p" \
    "cp_comm=all_gather refused by ptrun"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "one error line for all_gather: $(cat "$tmp/err")"
# a mixture of experts priced for Megatron-Core in a layout ptrun's experts do not train
# yet (shared experts): refused before anything starts, naming the field
"$build/ptplan" --dump-model tiny-moe |
    sed 's/"shared_experts": 0/"shared_experts": 1/; s/"shared_ffn": 0/"shared_ffn": 64/' \
    >"$tmp/shared-moe.json"
run 0 "$build/ptplan" --model "$tmp/shared-moe.json" --devices 4 --stack megatron-core \
    --layout "dp=4,ep=2,etp=2" --out "$tmp/plan-moe.json"
run 1 "$build/ptrun" "$tmp/plan-moe.json"
err_has "plan-moe.json: model tiny-moe: stack 'ptrun' trains experts without shared experts so far (the plan prices it for stack 'megatron-core')" \
    "a mixture of experts with shared experts refused by ptrun"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "one error line for shared experts: $(cat "$tmp/err")"
# ... or with Megatron-Core's recompute modules, which ptrun does not run
run 0 "$build/ptplan" --model tiny-moe --devices 4 --stack megatron-core \
    --layout "dp=4,ep=2,recompute=layernorm+moe_act" --out "$tmp/plan-rmod.json"
run 1 "$build/ptrun" "$tmp/plan-rmod.json"
err_has "plan-rmod.json: layout recompute=layernorm+moe_act: stack 'ptrun' does not recompute module layernorm" \
    "recompute modules refused by ptrun"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "one error line for recompute modules: $(cat "$tmp/err")"
# ... and one it does train, on one rank: the routers' figures on the console and in
# the log
run 0 "$build/ptplan" --model tiny-moe --devices 1 --stack megatron-core --layout "mbs=2" \
    --global-batch 4 --steps 2 --out "$tmp/plan-moe1.json"
run 0 "$build/ptrun" "$tmp/plan-moe1.json" --val-every 0 --sample 0 --log "$tmp/moe.log"
out_has "step     2/2  loss .* aux 0.0[0-9]*  imbalance [0-9.]*" "the routers' loss and balance"
grep -q '"type":"moe","step":2,.*"moe_aux":0.0[0-9]*,"moe_dropped":0,"moe_imbalance":1,"moe_expert_max":[0-9.]*' "$tmp/moe.log" ||
    fail "the log's moe line: $(grep moe "$tmp/moe.log")"
# a plan edited to an uneven split of tiny's 4 layers that does not add up: refused
# before anything starts, with the numbers
run 0 "$build/ptplan" --devices 2 --layout "pp=2,first_layers=1,last_layers=3" \
    --out "$tmp/plan-split.json"
sed 's/first_layers=1/first_layers=2/; s/"first_layers": 1,/"first_layers": 2,/' \
    "$tmp/plan-split.json" >"$tmp/plan-split2.json"
grep -q '"first_layers": 2,' "$tmp/plan-split2.json" || fail "plan.json carries first_layers"
run 1 "$build/ptrun" "$tmp/plan-split2.json"
err_has "plan-split2.json: the layout is invalid (uneven_split): first_layers + last_layers = 2 + 3 = 5, but with pp = 2 they must add up to the model's 4 layers" \
    "hand-edited uneven split"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "one error line for the bad split: $(cat "$tmp/err")"
run 1 "$build/ptrun" "$tmp/plan.json" --data "$tmp/missing.txt"
err_has "missing.txt" "missing data file"
printf 'short' >"$tmp/short.txt"
run 1 "$build/ptrun" "$tmp/plan.json" --data "$tmp/short.txt"
err_has "short.txt" "too little data"
# a token file with an id beyond tiny's 256-token vocabulary
python3 - "$tmp/big.bin" <<'PY' 2>/dev/null || printf '' >"$tmp/big.bin"
import struct, sys
toks = [1, 2, 300] + [5] * 200
hdr = [20240520, 1, len(toks)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(toks), *toks))
PY
if [ -s "$tmp/big.bin" ]; then
    run 1 "$build/ptrun" "$tmp/plan.json" --data "$tmp/big.bin"
    err_has "token 300 at position 2" "token beyond the vocabulary"
fi
run 1 "$build/ptrun" "$tmp/plan.json" --resume "$tmp/no-such-ckpt"
err_has "no-such-ckpt" "unreadable checkpoint"
cp -r "$tmp/ck" "$tmp/ck-before"
echo "garbage" >"$tmp/ck/step_00000006/model-00001-of-00001.safetensors"
run 1 "$build/ptrun" "$tmp/plan.json" --steps 12 --resume "$tmp/ck"
err_has "model-00001-of-00001.safetensors" "damaged checkpoint"
cmp -s "$tmp/ck/step_00000006/meta.json" "$tmp/ck-before/step_00000006/meta.json" ||
    fail "a failed resume leaves the checkpoint alone"
run 0 "$build/ptplan" --devices 1 --out "$tmp/plan-other.json" --top 1 --seed 99
run 1 "$build/ptrun" "$tmp/plan-other.json" --steps 12 --resume "$tmp/ck-before"
err_has "training field 'seed': the checkpoint's is " "checkpoint of another run"
# a learning rate that makes the loss diverge: exit 2 with a clear message
run 0 "$build/ptplan" --devices 1 --out "$tmp/plan-hot.json" --top 1 --lr 1000
run 2 "$build/ptrun" "$tmp/plan-hot.json" --steps 30 --quiet --sample 0
err_has "stopping" "diverged loss"
run 1 "$build/ptrun" "$tmp/missing-plan.json"
err_has "missing-plan.json" "missing plan"
# a plan edited to sizes whose activation buffers cannot be addressed: refused with the
# sizes named, before any of it is allocated — at 2^52 tokens per micro-batch one
# buffer's size does not fit int64; at 2^50 each does, but not their sum over a slot
python3 - "$tmp/plan.json" "$tmp/plan-huge" <<'PY' 2>/dev/null
import json, re, sys
for log_mbs in (30, 28):
    d = json.load(open(sys.argv[1]))
    l = d["layout"]
    l["mbs"], l["n_micro"] = 1 << log_mbs, 1
    l["string"] = re.sub(r"mbs=\d+", "mbs=%d" % (1 << log_mbs), l["string"])
    d["training"]["global_batch"] = (1 << log_mbs) * l["dp"]
    d["model"]["seq"], d["model"]["positions"] = 1 << 22, "rope"
    json.dump(d, open("%s-%d.json" % (sys.argv[2], log_mbs), "w"))
PY
if [ -s "$tmp/plan-huge-30.json" ]; then
    head -c 8500000 /dev/zero | tr '\0' 'a' >"$tmp/huge.txt"
    run 1 "$build/ptrun" "$tmp/plan-huge-30.json" --data "$tmp/huge.txt" --steps 1
    err_has "of 4503599627370496 tokens (widest row" "activations too large to address"
    run 1 "$build/ptrun" "$tmp/plan-huge-28.json" --data "$tmp/huge.txt" --steps 1
    err_has "of 1125899906842624 tokens (widest row" "a slot too large to address"
fi
# Outputs that cannot be written are found before the first step, not after the last
run 1 "$build/ptrun" "$tmp/plan.json" --steps 3 --trace "$tmp/no-such-dir/trace.json"
err_has "--trace '$tmp/no-such-dir/trace.json' cannot be written" "unwritable trace"
grep -q "^step" "$tmp/out" && fail "an unwritable trace is found before training"
run 1 "$build/ptrun" "$tmp/plan.json" --steps 3 --record --db "$tmp/no-such-dir/costs.db"
err_has "no-such-dir/costs.db" "unwritable cost database"
grep -q "^step" "$tmp/out" && fail "an unwritable cost database is found before training"
# a log on a full disk: exit 1 and the cause, never a log cut mid-line with exit 0
if [ -c /dev/full ]; then
    run 1 "$build/ptrun" "$tmp/plan.json" --steps 3 --log /dev/full
    err_has "cannot write the log '/dev/full': No space left on device" "log on a full disk"
fi
run 1 "$build/ptrun"
err_has "which plan" "no plan given"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all ptrun checks passed"
