#!/bin/sh
# ptplan --validate against published training runs: every point of the public set
# (tests/validation/public-set.json) and of the hold-out set (holdout.json, runs the
# model was not tuned on) is evaluated, and the public set's mean |error| stays under
# the bound below; bad input is refused with one message naming the file and field;
# a point that cannot be evaluated is listed with the reason and exits 3; an ALiBi
# model is priced by the planner and refused by the runtime. No timing involved.
#   usage: cli_validate.sh BUILD_DIR SOURCE_DIR
set -u
build="$1"
src="$2"

# ---- The error bounds (fractions). Tighten as the cost model improves. ------------
# Public set: mean |predicted/measured - 1| over every point. At the commit that added
# this test the analytic model reached 0.250 (max 0.379); with the measured compute
# slowdown under overlapped NCCL (planner/stack.c) 0.231 (max 0.364); with eager
# PyTorch modules and torchtitan's per-op selective recomputation in the fsdp stack
# 0.202 (max 0.337).
PUBLIC_MEAN_ABS_ERROR_MAX=0.22
# Hold-out set: only a loose bound against gross regressions, so that no constant is
# tuned to it (0.163, max 0.389, when the test was added; 0.146, max 0.381, now);
# every point must be evaluable.
HOLDOUT_MEAN_ABS_ERROR_MAX=0.30

. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"
ptplan="$build/ptplan"
val="$src/tests/validation"

# check_set FILE BOUND: every point evaluated, mean |error| <= BOUND, fields present.
check_set() {
    run 0 "$ptplan" --validate "$1" --json
    python3 - "$tmp/out" "$2" "$1" <<'PY' || fail "$1: see above"
import json, sys
r = json.load(open(sys.argv[1]))
bound, name = float(sys.argv[2]), sys.argv[3]
bad = [p for p in r["points"] if not p["evaluable"]]
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
print("%s: mean |error| %.3f, max %.3f over %d points (bound %.2f)"
      % (name, r["mean_abs_error"], r["max_abs_error"], len(errs), bound))
sys.exit(1 if bad or r["mean_abs_error"] > bound else 0)
PY
}
check_set "$val/public-set.json" "$PUBLIC_MEAN_ABS_ERROR_MAX"
check_set "$val/holdout.json" "$HOLDOUT_MEAN_ABS_ERROR_MAX"

# The text form: one line per point and the summary.
run 0 "$ptplan" --validate "$val/public-set.json"
out_has "mean |error|" "the text form ends with the mean and max error"
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
out_has "21 points, cost table $tmp/costs.db" "--db names the cost table"
run 1 "$ptplan" --validate "$val/public-set.json" --db "$tmp/no-such.db"
err_has "no-such.db" "a missing --db is named"

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
assert sum(not p["evaluable"] for p in r.values()) == 4
PY
run 3 "$ptplan" --validate "$tmp/unevaluable.json"
out_has "NOT EVALUATED: invalid layout" "the text form lists the reason"
out_has "4 of 21 points could not be evaluated" "the text form counts them"

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
