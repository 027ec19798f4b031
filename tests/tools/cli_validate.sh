#!/bin/sh
# ptplan --validate against published training runs: every point of the public set
# (tests/validation/public-set.json) and of the hold-out set (holdout.json, runs the
# model was not tuned on) is evaluated, but those that need what ptplan does not plan
# (squared-ReLU: listed, not scored), and the public set's mean
# |error| stays under the bound below; the three ways of judging (zero-shot,
# leave-one-out, ranking) are consistent with the points, a point's leave-one-out
# prediction is the correction learned from the other points alone, and the ranking
# counts a crafted set's wrong pair; bad input is refused with one message naming the
# file and field; a point that cannot be evaluated is listed with the reason and exits
# 3; an ALiBi model is priced by the planner and refused by the runtime. The errors by
# stack and device that --validate prints are the error bands prediction_band gives a job
# (tools/ptplan/ptplan_band.c, through build/tests/test_ptplan_band). No timing involved.
#   usage: cli_validate.sh BUILD_DIR SOURCE_DIR
set -u
build="$1"
src="$2"

# ---- The error bounds (fractions). Tighten as the cost model improves. ------------
# A change that makes the predictions worse than a bound fails here. The figures each
# set reached, and the change that moved each one, are in docs/results/2026-11-cpu.md
# (the validation sections) and in the commit bodies of this file.
# Public set: mean |predicted/measured - 1| over every point, zero-shot.
PUBLIC_MEAN_ABS_ERROR_MAX=0.19
# Hold-out set: only a loose bound against gross regressions, so that no constant is
# tuned to it; every point must be evaluable.
HOLDOUT_MEAN_ABS_ERROR_MAX=0.20
# Leave-one-out on the public set: each point corrected from its neighbours (the other
# points of its source, device and stack), as a user's own runs correct a stack.
PUBLIC_LOO_MEAN_ABS_ERROR_MAX=0.055
# The four Qwen3-235B-A22B mixture-of-experts points on their own: the MoE issue's
# targets, zero-shot and leave-one-out.
MOE_MEAN_ABS_ERROR_MAX=0.15
MOE_LOO_MEAN_ABS_ERROR_MAX=0.08

. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"
ptplan="$build/ptplan"
val="$src/tests/validation"

# check_set FILE BOUND LOO_BOUND: every point evaluated (but those that need FP8 or
# MoE), mean |error| <= BOUND and leave-one-out mean |error| <= LOO_BOUND, fields
# present, the three ways consistent with the points.
check_set() {
    run 0 "$ptplan" --validate "$1" --json
    python3 - "$tmp/out" "$2" "$1" "$3" <<'PY' || fail "$1: see above"
import json, math, sys
r = json.load(open(sys.argv[1]))
bound, name = float(sys.argv[2]), sys.argv[3]
bad = [p for p in r["points"] if not p["evaluable"] and "needs" not in p]
assert r["not_evaluable"] == sum("needs" in p for p in r["points"])
for p in bad:
    print("point %d (%s) not evaluable: %s" % (p["index"], p["label"], p["reason"]))
errs = [abs(p["error"]) for p in r["points"] if p["evaluable"]]
for p in r["points"]:
    if p["evaluable"]:
        for k in ("measured_step_s", "predicted_step_s", "error", "predicted_mfu"):
            assert isinstance(p[k], float), (k, p)
        assert abs(p["predicted_step_s"] / p["measured_step_s"] - 1 - p["error"]) < 1e-9
assert abs(r["mean_abs_error"] - sum(errs) / len(errs)) < 1e-9
assert abs(r["max_abs_error"] - max(errs)) < 1e-12
z, l, k = r["zero_shot"], r["leave_one_out"], r["ranking"]
assert (z["points"], z["mean_abs_error"], z["max_abs_error"]) == \
    (len(errs), r["mean_abs_error"], r["max_abs_error"])
loo = [p["leave_one_out"] for p in r["points"] if p["evaluable"]]
lerrs = [abs(x["error"]) for x in loo if x["neighbours"]]
assert l["points"] == len(lerrs) and l["points"] + l["without_neighbours"] == len(errs)
if lerrs:
    assert abs(l["mean_abs_error"] - sum(lerrs) / len(lerrs)) < 1e-9
    assert abs(l["max_abs_error"] - max(lerrs)) < 1e-12
for p in r["points"]:
    x = p.get("leave_one_out")
    if x and x["neighbours"]:
        assert abs(x["predicted_step_s"] / p["measured_step_s"] - 1 - x["error"]) < 1e-9, p
        if not x["calibration"]["applied"]:
            assert x["predicted_step_s"] == p["predicted_step_s"], p
src = k["by_source"]
for key in ("points", "pairs", "pairs_compared", "wrong_pairs"):
    assert k[key] == sum(b[key] for b in src), key
assert k["points"] == len(errs) and k["wrong_pairs"] <= k["pairs_compared"] <= k["pairs"]
assert k["kendall_tau"] is None or -1 <= k["kendall_tau"] <= 1
print("%s: zero-shot mean |error| %.3f, max %.3f over %d points (bound %.2f); leave-one-out "
      "%s over %d; ranking: %d of %d pairs wrong, tau %s"
      % (name, r["mean_abs_error"], r["max_abs_error"], len(errs), bound,
         "%.3f, max %.3f" % (l["mean_abs_error"], l["max_abs_error"]) if lerrs else "-",
         len(lerrs), k["wrong_pairs"], k["pairs_compared"], k["kendall_tau"]))
loo_bound = float(sys.argv[4])
if lerrs and l["mean_abs_error"] > loo_bound:
    print("%s: leave-one-out mean |error| %.3f over the bound %.2f"
          % (name, l["mean_abs_error"], loo_bound))
sys.exit(1 if bad or r["mean_abs_error"] > bound or
         (lerrs and l["mean_abs_error"] > loo_bound) else 0)
PY
}
check_set "$val/public-set.json" "$PUBLIC_MEAN_ABS_ERROR_MAX" "$PUBLIC_LOO_MEAN_ABS_ERROR_MAX"
# ... and its mixture-of-experts points apart (the last run's --json output)
python3 - "$tmp/out" "$MOE_MEAN_ABS_ERROR_MAX" "$MOE_LOO_MEAN_ABS_ERROR_MAX" <<'PY' ||
import json, sys
r = json.load(open(sys.argv[1]))
moe = [p for p in r["points"] if p["evaluable"] and p["label"].startswith("qwen3-moe")]
assert len(moe) == 4, [p["label"] for p in moe]
zs = sum(abs(p["error"]) for p in moe) / 4
loo = sum(abs(p["leave_one_out"]["error"]) for p in moe) / 4
print("the four MoE points: zero-shot %.3f (bound %s), leave-one-out %.3f (bound %s)"
      % (zs, sys.argv[2], loo, sys.argv[3]))
sys.exit(0 if zs <= float(sys.argv[2]) and loo <= float(sys.argv[3]) else 1)
PY
    fail "the MoE points' mean errors are over their bounds"
check_set "$val/holdout.json" "$HOLDOUT_MEAN_ABS_ERROR_MAX" 1

# The text form: one line per point and the summary.
run 0 "$ptplan" --validate "$val/public-set.json"
out_has "mean |error|" "the text form ends with the mean and max error"
out_has "^leave-one-out: mean |error|" "the text form has the leave-one-out error"
out_has "^ranking: " "the text form has the ranking"
out_has "no leave-one-out prediction: #17 bloom" "a point without neighbours says so"
out_has "nemotron4-34 .*not evaluable: needs the squared-ReLU activation" \
    "a squared-ReLU point is listed as not evaluable"
out_has "qwen3-moe-h100-d .*qwen3-235b-a .*ep32 .*%" "a mixture-of-experts point is priced"
out_has "1 point is not evaluable until ptplan plans what it needs" "and counted apart"
out_has "nemo-fp8-h100  *llama2-7b .*%" "an FP8 point is priced (precision fp8)"
out_has " bloom-176b " "BLOOM (ALiBi) is listed"
[ "$(grep -c '%  ' "$tmp/out")" -ge 21 ] || fail "one line per point with its error"

# ---- Bad input: one message naming file and field, exit 1 ------------------------
run 1 "$ptplan" --validate "$tmp/no-such.json"
one_line_error "missing file"
err_has "cannot read validation set '$tmp/no-such.json'" "a missing file is named"

printf '{"points": [ {"source": "x",\n' >"$tmp/malformed.json"
run 1 "$ptplan" --validate "$tmp/malformed.json"
one_line_error "malformed JSON"
err_has "malformed.json:2:" "malformed JSON names file and line"

# derive FILE PYTHON: a copy of the public set edited by a Python statement on `d`.
derive() {
    python3 - "$val/public-set.json" "$tmp/$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(d, open(sys.argv[2], "w"), indent=1)
PY
}
# the derived files sit in $tmp, so the cluster files they name are copied beside them
cp -r "$val/clusters" "$val/stacks" "$tmp/"

derive no_model.json 'del d["points"][3]["model"]'
run 1 "$ptplan" --validate "$tmp/no_model.json"
one_line_error "point without model"
err_has "no_model.json: points\[3\].model: missing" "a point without a model names it"

derive no_ffn.json 'del d["points"][0]["model"]["ffn"]'
run 1 "$ptplan" --validate "$tmp/no_ffn.json"
err_has "points\[0\].model.ffn: missing" "a model without ffn names the field"

derive bad_type.json 'd["points"][2]["gpus"] = "64"'
run 1 "$ptplan" --validate "$tmp/bad_type.json"
err_has "points\[2\].gpus: expected an integer" "a mistyped field is named"

derive unknown_stack.json 'd["points"][1]["ptplan"]["stack"] = "deepspeed-zero9"'
run 1 "$ptplan" --validate "$tmp/unknown_stack.json"
one_line_error "unknown stack"
err_has "points\[1\].ptplan.stack: unknown stack 'deepspeed-zero9'" "an unknown stack is named"

derive unknown_cluster.json 'd["points"][7]["ptplan"]["cluster"] = "clusters/nope.json"'
run 1 "$ptplan" --validate "$tmp/unknown_cluster.json"
err_has "points\[7\].ptplan.cluster:" "an unknown cluster file is named"

derive no_why.json 'd["points"][18]["ptplan"]["assume"]["mbs"] = {"value": 1}'
run 1 "$ptplan" --validate "$tmp/no_why.json"
err_has "points\[18\].ptplan.assume.mbs: expected {\"value\": ..., \"why\"" "an assumption needs its reason"

derive unknown_assume.json 'd["points"][18]["ptplan"]["assume"]["mbz"] = {"value": 1, "why": "typo"}'
run 1 "$ptplan" --validate "$tmp/unknown_assume.json"
err_has "ptplan.assume.mbz: unknown assumption" "an unknown assumption is named"

derive bad_imbalance.json 'd["points"][32]["ptplan"]["assume"]["moe_imbalance"]["value"] = 0.5'
run 1 "$ptplan" --validate "$tmp/bad_imbalance.json"
err_has "points\[32\].ptplan.assume.moe_imbalance: expected a number from 1 to 64" \
    "an imbalance below 1 is refused"
# the assumed imbalance prices the busiest rank: #32 as trained (1.6) against balanced
derive balanced.json 'd["points"][32]["ptplan"]["assume"]["moe_imbalance"]["value"] = 1'
run 0 "$ptplan" --validate "$tmp/balanced.json" --json
cp "$tmp/out" "$tmp/balanced.out"
run 0 "$ptplan" --validate "$val/public-set.json" --json
python3 - "$tmp/balanced.out" "$tmp/out" <<'PY' || fail "moe_imbalance 1.6 prices #32 slower than 1"
import json, sys
one, trained = (json.load(open(f))["points"][32] for f in sys.argv[1:3])
assert "moe_imbalance" in trained["assumed"], trained["assumed"]
assert trained["predicted_step_s"] > 1.1 * one["predicted_step_s"], (one, trained)
PY

derive no_cluster.json 'del d["points"][0]["ptplan"]["cluster"]; del d["points"][15]["ptplan"]["cluster"]'
run 1 "$ptplan" --validate "$tmp/no_cluster.json"
err_has "points\[15\].ptplan.cluster: missing, and gpu 'h100-hbm2e-96gb-500w' has no built-in" \
    "a GPU without a built-in cluster needs ptplan.cluster"
derive gpu_cluster.json 'del d["points"][0]["ptplan"]["cluster"]'
run 0 "$ptplan" --validate "$tmp/gpu_cluster.json" --json
grep -q '"cluster": "dgx-h100"' "$tmp/out" || fail "gpu h100-sxm picks the built-in dgx-h100"

# --db: priced from a cost table (the calibration fixture's CPU samples match no GPU
# here, so the figures stay analytic) and named in the output
sqlite3 "$tmp/costs.db" <"$src/tests/data/calib/costs.sql"
run 0 "$ptplan" --validate "$val/public-set.json" --db "$tmp/costs.db"
out_has "33 points, cost table $tmp/costs.db" "--db names the cost table"
run 1 "$ptplan" --validate "$val/public-set.json" --db "$tmp/no-such.db"
err_has "no-such.db" "a missing --db is named"

# Each point is priced with its device's table, as ptplan prices a job: the profile the
# project ships of H100-SXM5-80GB, for every stack (the kernels it runs as ptrun does, of
# the profiled shapes: GPT-2 1.5B's here), analytic elsewhere; --no-shipped-profile
# prices all analytically.
derive shipped.json '
p = d["points"][0]
p["model"].update(name="gpt2-1.5b-like", layers=48, hidden=1600, heads=25, kv_heads=25,
                  ffn=6400, vocab=50257, seq=1024, bias=True)
p.update(mbs=8, global_batch=64, zero="ZeRO-1 equivalent")
p["ptplan"]["stack"] = "megatron-core"
d["points"] = [p, d["points"][7]]'
run 0 "$ptplan" --validate "$tmp/shipped.json" --json
python3 - "$tmp/out" <<'PY' || fail "--validate prices an H100 point from the shipped profile"
import json, sys
r = json.load(open(sys.argv[1]))
assert "shipped profile of H100-SXM5-80GB" in r["costs"], r["costs"]
h100, a100 = (p["predicted"]["provenance"] for p in r["points"])
assert h100["measured"] > 0 and h100["analytic"] < 1, h100
assert a100["analytic"] == 1, a100
PY
run 0 "$ptplan" --validate "$tmp/shipped.json" --json --no-shipped-profile
python3 - "$tmp/out" <<'PY' || fail "--no-shipped-profile prices every point analytically"
import json, sys
r = json.load(open(sys.argv[1]))
assert all(p["predicted"]["provenance"]["analytic"] == 1 for p in r["points"]), r["points"]
PY

derive empty.json 'd["points"] = []'
run 1 "$ptplan" --validate "$tmp/empty.json"
err_has "non-empty array 'points'" "an empty set is refused"

run 1 "$ptplan" --validate "$val/public-set.json" --layout tp=1
err_has "choose one of" "--validate is a mode of its own"

# ---- Points that cannot be evaluated: listed with the reason, exit 3 ---------------
derive unevaluable.json '
d["points"][18]["ptplan"]["assume"].pop("mbs")
d["points"][0]["dp"] = 7
d["points"][17]["ptplan"]["assume"]["mbs"] = {"value": 1, "why": "contradicts the source"}
d["points"][5]["zero"] = "some sharding"'
run 3 "$ptplan" --validate "$tmp/unevaluable.json" --json
python3 - "$tmp/out" <<'PY' || fail "unevaluable points are listed with their reasons"
import json, sys
r = {p["index"]: p for p in json.load(open(sys.argv[1]))["points"]}
want = {18: "the source gives no mbs", 0: "invalid layout", 17: "the source gives mbs = 2",
        5: "names no ZeRO stage"}
for i, text in want.items():
    assert not r[i]["evaluable"] and text in r[i]["reason"], (i, r[i])
assert sum(not p["evaluable"] and "needs" not in p for p in r.values()) == 4
PY
run 3 "$ptplan" --validate "$tmp/unevaluable.json"
out_has "NOT EVALUATED: invalid layout" "the text form lists the reason"
out_has "4 of 33 points could not be evaluated" "the text form counts them"
derive bad_needs.json 'd["points"][21]["ptplan"]["needs"] = ["fp16"]'
run 1 "$ptplan" --validate "$tmp/bad_needs.json"
one_line_error "unknown need"
err_has "points\[21\].ptplan.needs: expected a list of moe, relu2" "an unknown need is named"

# ---- Leave-one-out: never the point itself --------------------------------------------
# Two points of one source: each is predicted with the compute scale of the other alone
# (one run: k = (measured - exposed communication - fixed) / compute of that run).
derive two.json 'd["points"] = [d["points"][i] for i in (15, 16)]'
run 0 "$ptplan" --validate "$tmp/two.json" --json
python3 - "$tmp/out" <<'PY' || fail "leave-one-out of two points: each from the other alone"
import json, sys
r = json.load(open(sys.argv[1]))
def parts(p):
    b = {k: v["exposed_s"] for k, v in p["predicted"]["breakdown"].items()}
    comm = b["tp"] + b["cp"] + b.get("ep", 0) + b["dp_zero"] + b["pipeline_p2p"]
    return p["predicted_step_s"] - comm - b["overhead"], comm, b["overhead"]
a, b = r["points"]
for me, other in ((a, b), (b, a)):
    c, m, f = parts(other)
    k = (other["measured_step_s"] - m - f) / c
    x = me["leave_one_out"]
    assert x["neighbours"] == 1 and x["calibration"]["form"] == "compute", x
    assert abs(x["calibration"]["k_compute"] - k) < 1e-9 * k, (x, k)
    c, m, f = parts(me)
    assert abs(x["predicted_step_s"] - (k * c + m + f)) < 1e-9 * me["measured_step_s"], (x, k)
    assert abs(x["error"]) > 1e-6  # not its own measurement
PY

# ---- Ranking: a crafted set whose answer is known ----------------------------------------
# Three MPT points of one source, their measured speeds set to the predicted speeds with
# the fastest two swapped: that pair is ordered wrongly (they differ by more than 10 %),
# the other two are not; Kendall's tau = (2 - 1) / 3.
derive rank3.json 'd["points"] = [d["points"][i] for i in (5, 0, 3)]'
run 0 "$ptplan" --validate "$tmp/rank3.json" --json
python3 - "$tmp/out" "$tmp/rank3.json" <<'PY' || fail "crafting the ranking set"
import json, sys
r, d = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
speed = [p["predicted_tokens_per_s_per_gpu"] for p in r["points"]]
assert speed[0] > 1.1 * speed[1] > 1.21 * speed[2], speed
swap = [speed[1], speed[0], speed[2]]
for p, s in zip(d["points"], swap):
    p["measured"] = {"tokens_per_s_per_gpu": s}
json.dump(d, open(sys.argv[2], "w"), indent=1)
PY
run 0 "$ptplan" --validate "$tmp/rank3.json" --json
python3 - "$tmp/out" <<'PY' || fail "the ranking counts the swapped pair"
import json, sys
k = json.load(open(sys.argv[1]))["ranking"]
assert (k["pairs"], k["pairs_compared"], k["wrong_pairs"]) == (3, 3, 1), k
assert abs(k["kendall_tau"] - 1 / 3) < 1e-12, k
assert k["by_source"][0]["wrong"] == [[0, 1]], k
PY
run 0 "$ptplan" --validate "$tmp/rank3.json"
out_has "1 of 3 pairs whose measured speeds" "the text form counts the wrong pair"
out_has "#0/#1" "and names it"

# ---- Error bands: --validate's table by stack and device, and prediction_band ------
# A set of three fsdp runs on A100-SXM4-80GB (one on a cluster file of that device; the
# first neither the lowest error nor the highest), one megatron-lm run and an fsdp run
# that cannot be evaluated. The table holds the errors of
# the evaluated runs by (stack, device); test_ptplan_band prints the band that
# prediction_band gives a job (the sets from PT_VALIDATION_SETS), which must be the same.
derive band_set.json 'd["points"] = [d["points"][i] for i in (13, 7, 12, 18, 14)]
d["points"][4]["dp"] = 7'
run 3 "$ptplan" --validate "$tmp/band_set.json" --json
cp "$tmp/out" "$tmp/band_set.out"
python3 - "$tmp/band_set.out" <<'PY' || fail "the table by stack and device sums up the points"
import json, sys
r = json.load(open(sys.argv[1]))
t = r["by_stack_device"]
assert [(b["stack"], b["device"], b["n"]) for b in t] == \
    [("fsdp", "A100-SXM4-80GB", 3), ("megatron-lm", "A100-SXM4-80GB", 1)], t
for b in t:
    errs = [p["error"] for p in r["points"] if p["evaluable"] and p["stack"] == b["stack"]]
    assert b["min_error"] == min(errs) and b["max_error"] == max(errs), (b, errs)
    assert abs(b["mean_error"] - sum(errs) / len(errs)) < 1e-12, (b, errs)
PY
run 3 "$ptplan" --validate "$tmp/band_set.json"
out_has "^by stack and device" "the text form has the table by stack and device"
python3 - "$tmp/band_set.out" "$tmp/out" <<'PY' || fail "the text table prints the JSON's numbers"
import json, sys
for b in json.load(open(sys.argv[1]))["by_stack_device"]:
    want = "%-24s %-24s %4d %+9.1f%% %+6.1f%% %+6.1f%%" % (b["stack"], b["device"], b["n"],
        100 * b["mean_error"], 100 * b["min_error"], 100 * b["max_error"])
    assert want in open(sys.argv[2]).read().splitlines(), want
PY

probe="$build/tests/test_ptplan_band"
# band SETS STACK CLUSTER: prediction_band's band for a job of STACK on CLUSTER, predicted
# 10 s, with PT_VALIDATION_SETS=SETS ("-" leaves it unset: the source tree's sets)
band() {
    if [ "$1" = - ]; then
        run 0 env -u PT_VALIDATION_SETS "$probe" "$2" "$3" 10
    else
        run 0 env PT_VALIDATION_SETS="$1" "$probe" "$2" "$3" 10
    fi
}
# band_is WHAT N GROUP SETS REASON: the band printed has N runs and, GROUP (an index into
# the table of band_set.json, "-" for none) given, that group's numbers; its sets are
# SETS and its reason holds REASON ("": is empty)
band_is() {
    python3 - "$tmp/out" "$tmp/band_set.out" "$2" "$3" "$4" "$5" <<'PY' || fail "band: $1"
import json, sys
b = json.load(open(sys.argv[1]))
n, group, sets, reason = int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
assert b["n"] == n and b["sets"] == sets, b
assert (reason in b["reason"]) if reason else b["reason"] == "", b
if group != "-":
    t = json.load(open(sys.argv[2]))["by_stack_device"][int(group)]
    assert (b["stack"], b["device"]) == (t["stack"], t["device"]), (b, t)
    assert b["err_min"] == t["min_error"] and b["err_max"] == t["max_error"], (b, t)
    assert abs(b["err_mean"] - t["mean_error"]) < 1e-12, (b, t)
if n:
    assert abs(b["lo_s"] - 10 / (1 + b["err_max"])) < 1e-12, b
    assert abs(b["hi_s"] - 10 / (1 + b["err_min"])) < 1e-12, b
    assert b["lo_s"] <= b["hi_s"], b
else:
    assert b["lo_s"] == b["hi_s"] == 10, b
PY
}
band "$tmp/band_set.json" fsdp dgx-a100-80g
band_is "fsdp on A100 as --validate's table" 3 0 band_set.json ""
band "$tmp/band_set.json" fsdp "$tmp/clusters/a100-80g-roce-1600g.json"
band_is "a cluster file is matched by its device" 3 0 band_set.json ""
band "$tmp/band_set.json" megatron-lm dgx-a100-80g
band_is "megatron-lm on A100" 1 1 band_set.json ""
band "$tmp/band_set.json:$tmp/band_set.json" megatron-lm dgx-a100-80g
band_is "the sets' runs are counted together" 2 - "band_set.json, band_set.json" ""
band "$tmp/band_set.json" ptrun dgx-a100-80g
band_is "an unknown stack" 0 - band_set.json \
    "no published run of stack ptrun on A100-SXM4-80GB in band_set.json"
band "$tmp/band_set.json" fsdp dgx-h100
band_is "an unknown device" 0 - band_set.json \
    "no published run of stack fsdp on H100-SXM5-80GB in band_set.json"
band "$tmp/no-such.json" fsdp dgx-a100-80g
band_is "a missing set" 0 - "" "not found: $tmp/no-such.json"
band "$tmp/band_set.json::$tmp/no-such.json" fsdp dgx-a100-80g
band_is "a missing set beside one that is read" 3 0 band_set.json "not found: $tmp/no-such.json"
band "" fsdp dgx-a100-80g
band_is "PT_VALIDATION_SETS empty" 0 - "" "PT_VALIDATION_SETS names no validation set"
run 1 env PT_VALIDATION_SETS="$tmp/band_set.json:$tmp/malformed.json" "$probe" fsdp dgx-a100-80g
err_has "malformed.json:2:" "a malformed set is an error"
run 1 env PT_VALIDATION_SETS="$tmp/no_model.json" "$probe" fsdp dgx-a100-80g
err_has "no_model.json: points\[3\].model: missing" "a set that --validate refuses is an error"

# Without PT_VALIDATION_SETS: the source tree's two sets, their tables combined.
run 0 "$ptplan" --validate "$val/public-set.json" --json
cp "$tmp/out" "$tmp/public.out"
run 0 "$ptplan" --validate "$val/holdout.json" --json
cp "$tmp/out" "$tmp/holdout.out"
band - fsdp dgx-h100
python3 - "$tmp/out" "$tmp/public.out" "$tmp/holdout.out" <<'PY' || fail "the default sets' band"
import json, sys
b = json.load(open(sys.argv[1]))
t = [g for f in sys.argv[2:] for g in json.load(open(f))["by_stack_device"]
     if (g["stack"], g["device"]) == ("fsdp", "H100-SXM5-80GB")]
assert len(t) == 2 and b["sets"] == "public-set.json, holdout.json" and b["reason"] == "", b
assert b["n"] == sum(g["n"] for g in t) > 0, (b, t)
assert b["err_min"] == min(g["min_error"] for g in t), (b, t)
assert b["err_max"] == max(g["max_error"] for g in t), (b, t)
assert abs(b["err_mean"] - sum(g["n"] * g["mean_error"] for g in t) / b["n"]) < 1e-12, (b, t)
PY

# ---- ALiBi: priced by the planner, refused by the runtime --------------------------
cat >"$tmp/alibi.json" <<'EOF'
{"name": "tiny-alibi", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "ffn": 256,
 "vocab": 256, "seq": 64, "norm": "layernorm", "activation": "gelu", "positions": "alibi",
 "tied_embeddings": true, "bias": true, "dropout": false}
EOF
run 0 "$ptplan" --dump-model "$tmp/alibi.json"
out_has '"positions": "alibi"' "alibi loads and dumps back"
run 0 "$ptplan" --model "$tmp/alibi.json" --devices 1 --layout tp=1 --out "$tmp/plan.json"
[ -f "$tmp/plan.json" ] || fail "an ALiBi model is planned"
run 1 "$build/ptrun" "$tmp/plan.json" --steps 1
err_has "positions 'alibi' are not implemented by the runtime" "ptrun refuses ALiBi"

[ "$failures" -eq 0 ] && echo "cli_validate: all checks passed"
exit "$failures"
