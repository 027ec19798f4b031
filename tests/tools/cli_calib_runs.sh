#!/bin/sh
# Learning from measured runs of other frameworks, as a user does it: ptcalib --run stores
# a run record (and runs read from a Megatron-LM and a torchtitan log, warm-up left out,
# the median taken) in a cost table under ids fN; ptplan with that table says in its
# header that it is calibrated and predicts another step time (--json: "calibration");
# --no-calibration plans zero-shot; ptcalib --forget fN (--dry-run first) removes the run
# and ptplan's prediction is again the zero-shot one, to the digit. Three runs whose
# errors a correction removes are calibrated from (with a leave-one-out error), three
# whose errors it does not are stored but not applied. Bad input is one clear error each.
# Nothing is timed.
#   usage: cli_calib_runs.sh BUILD_DIR SOURCE_DIR
set -u
build="$1"
src="$2"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/default.db"
calib="$build/ptcalib"
ptplan="$build/ptplan"
runs="$src/tests/data/runs"
db="$tmp/costs.db"
job="--model llama3-8b --cluster dgx-h100 --nodes 1 --stack megatron-core --global-batch 64
     --seq 4096 --no-out --db $db"
layout="tp=2,sp=1,zero=1,mbs=1"
step() { grep '^predicted step' "$tmp/out" | sed 's/^predicted step \([^ ]*\) s.*/\1/'; }

# ---- A run record ----------------------------------------------------------------------
sqlite3 "$db" <"$src/tests/data/calib/costs.sql"
# shellcheck disable=SC2086
plan 0 $job --layout "$layout"
zero=$(step)
grep -q '^calib' "$tmp/out" && fail "no stored run: no calib line"
run 0 "$calib" --run "$runs/record.json" --db "$db"
out_has "measured 3.70" "the record's step time (tokens/s per GPU converted)"
out_has "zero-shot prediction" "the record is priced zero-shot"
out_has "stored in $db as run f1 (ptcalib --forget f1 removes it)" "stored with its id"
out_has "calibration of megatron-core on H100-SXM5-80GB from 1 run" "the correction it gives"
[ "$(sqlite3 "$db" "SELECT stack || ' ' || device || ' ' || gpus FROM framework_runs")" = \
  "megatron-core H100-SXM5-80GB 8" ] || fail "framework_runs holds the run by stack and device"
# shellcheck disable=SC2086
plan 0 $job --layout "$layout"
out_has "^calib   calibrated from 1 run of megatron-core on H100-SXM5-80GB (compute x" \
    "the header says the prediction is calibrated"
one=$(step)
[ "$one" != "$zero" ] || fail "the calibrated step differs from the zero-shot one ($one)"
python3 -c "import sys; sys.exit(abs(float('$one') / 3.7013 - 1) > 0.002)" ||
    fail "calibrated from its one run, the run's own layout is predicted as it measured: $one"
# shellcheck disable=SC2086
plan 0 $job --layout "$layout" --no-calibration
out_has "^calib   --no-calibration" "--no-calibration says so"
[ "$(step)" = "$zero" ] || fail "--no-calibration plans zero-shot"
# shellcheck disable=SC2086
plan 0 $job --layout "$layout" --json
python3 - "$tmp/out" <<'PY' || fail "--json carries the calibration"
import json, sys
c = json.load(open(sys.argv[1]))["calibration"]
assert c["applied"] and c["runs_used"] == 1 and c["form"] == "compute" and not c["checked"], c
assert c["stack"] == "megatron-core" and c["device"] == "H100-SXM5-80GB" and c["runs"] == "f1"
assert c["k_compute"] > 1 and c["leave_one_out_error"] is None, c
PY
# other stacks and devices are not calibrated by it
plan 0 --model llama3-8b --cluster dgx-h100 --nodes 1 --stack fsdp --global-batch 64 \
    --seq 4096 --no-out --db "$db" --layout dp=8,zero=3
grep -q '^calib' "$tmp/out" && fail "a run of megatron-core does not calibrate fsdp"

# ---- Forgetting it -----------------------------------------------------------------------
run 0 "$calib" --forget f1 --dry-run --db "$db"
out_has "dry run: nothing changed" "--dry-run"
[ "$(sqlite3 "$db" "SELECT count(*) FROM framework_runs")" = 1 ] || fail "--dry-run keeps the run"
run 0 "$calib" --forget f1 --db "$db"
out_has "^removed" "--forget fN removes"
[ "$(sqlite3 "$db" "SELECT count(*) FROM framework_runs")" = 0 ] || fail "the run is gone"
# shellcheck disable=SC2086
plan 0 $job --layout "$layout"
grep -q '^calib' "$tmp/out" && fail "after --forget: no calib line"
[ "$(step)" = "$zero" ] || fail "after --forget: the zero-shot prediction, to the digit"
run 1 "$calib" --forget f1 --db "$db"
err_has "no stored framework run f1 to forget" "forgetting twice"

# ---- Logs ----------------------------------------------------------------------------------
run 0 "$calib" --run "$runs/megatron.log" --db "$db" --model llama3-8b --cluster dgx-h100 \
    --nodes 1 --stack megatron-core --layout "$layout" --seq 4096
out_has "Megatron-LM log .*: the median of 9 logged intervals (iterations 20-100), the first 2 left out as warm-up: 3.7013 s a step" \
    "Megatron: warm-up left out, the median of the rest"
out_has "global batch 64 x seq 4096" "Megatron: the logged global batch"
out_has "2026-01-15, Megatron-LM unknown" "Megatron: the log's date"
out_has "as run f2" "a second id, never reused"
run 0 "$calib" --run "$runs/megatron.log" --no-store --db "$db" --model llama3-8b \
    --cluster dgx-h100 --nodes 1 --stack megatron-core --layout "$layout" --seq 4096 --skip 0
out_has "the median of 11 logged intervals (iterations 1-100), the first 0" "--skip 0"
out_has "not stored (--no-store)" "--no-store"
[ "$(sqlite3 "$db" "SELECT count(*) FROM framework_runs")" = 1 ] || fail "--no-store stores nothing"
run 0 "$calib" --run "$runs/torchtitan.log" --db "$db" --model llama3-8b --cluster dgx-h100 \
    --nodes 1 --stack fsdp --layout dp=8,zero=3 --global-batch 16 --seq 8192 \
    --software torchtitan@0.2.1 --note "from the fixture"
out_has "torchtitan log .*: the median of 9 logged intervals (iterations 20-100), the first 2 left out as warm-up: 6201 tokens/s per GPU" \
    "torchtitan: colors stripped, the validator's line left out, the median"
out_has "torchtitan 0.2.1; from the fixture" "--software and --note"
out_has "calibration of fsdp on H100-SXM5-80GB from 1 run" "keyed by its own stack"
run 0 "$calib" --run "$runs/torchtitan.log" --format torchtitan --no-store --db "$db" \
    --model llama3-8b --cluster dgx-h100 --nodes 1 --stack fsdp --layout dp=8,zero=3 \
    --global-batch 16 --seq 8192
sqlite3 "$db" "DELETE FROM framework_runs"

# ---- Three runs: a correction that predicts held-out runs, and one that does not ----------
# records of three layouts measured 1.2x and 1.25x their zero-shot step (the correction
# removes that), then +20/-20/+20 % (it cannot)
records() { # FACTORS...: one record per layout, measured = factor x zero-shot step
    i=0
    for l in tp=2,sp=1,zero=1,mbs=1 tp=4,sp=1,zero=1,mbs=1 tp=2,sp=1,zero=1,mbs=2; do
        i=$((i + 1))
        eval "f=\${$i}"
        # shellcheck disable=SC2086
        "$ptplan" $job --layout "$l" --no-calibration --json >"$tmp/p.json" ||
            fail "pricing $l"
        python3 - "$tmp/p.json" "$l" "$f" "$tmp/r$i.json" <<'PY'
import json, sys
step = json.load(open(sys.argv[1]))["predicted"]["step_time_s"]
json.dump({"format_version": 1, "model": "llama3-8b", "cluster": "dgx-h100", "nodes": 1,
           "stack": "megatron-core", "layout": sys.argv[2], "global_batch": 64, "seq": 4096,
           "precision": "bf16", "measured": {"step_s": step * float(sys.argv[3])},
           "date": "2026-02-01", "software": {"name": "Megatron-LM", "version": "x"}},
          open(sys.argv[4], "w"))
PY
        run 0 "$calib" --run "$tmp/r$i.json" --db "$db"
    done
}
records 1.2 1.25 1.22
# shellcheck disable=SC2086
plan 0 $job --layout "$layout"
out_has "^calib   calibrated from 3 runs of megatron-core on H100-SXM5-80GB (compute x1.2[0-9]*; leave-one-out error [0-9.]* % vs 1[0-9.]* % uncalibrated)" \
    "three runs: calibrated, with the held-out error against the uncalibrated one"
out_has "runs f[0-9]*, f[0-9]*, f[0-9]*" "the header names the runs"
sqlite3 "$db" "DELETE FROM framework_runs"
records 1.2 0.8 1.2
# shellcheck disable=SC2086
plan 0 $job --layout "$layout"
out_has "^calib   3 runs of megatron-core on H100-SXM5-80GB are stored, but a correction from them did not predict held-out runs better" \
    "a correction that does not help held-out runs is not applied"
[ "$(step)" = "$zero" ] || fail "a rejected correction leaves the zero-shot prediction"
# a stored record that cannot be priced any more is left out, named
sqlite3 "$db" "UPDATE framework_runs SET record = replace(record, '\"llama3-8b\"', '\"no-such-model\"') WHERE id = (SELECT max(id) FROM framework_runs)"
# shellcheck disable=SC2086
plan 0 $job --layout "$layout"
out_has "left out, cannot be priced now: f[0-9]*: stored run f[0-9]*: field 'model': unknown model 'no-such-model'" \
    "a stored run that no longer reads is named"

# ---- Bad input -----------------------------------------------------------------------------
run 1 "$calib" --run "$tmp/no-such.json" --db "$db"
one_line_error "a missing file"
err_has "--run $tmp/no-such.json: no such file, and not a run id" "neither a file nor an id"
run 1 "$calib" --run "$runs/record.json" --model llama3-8b --db "$db"
one_line_error "a record with log options"
err_has "is a run record: it says itself what --model would" "a record describes itself"
run 1 "$calib" --run "$runs/megatron.log" --model llama3-8b --cluster dgx-h100 --nodes 1 \
    --stack megatron-core --db "$db"
err_has "megatron.log is a Megatron-LM log: give what it does not say of the run: --layout" \
    "a log needs its layout"
run 1 "$calib" --run "$runs/megatron.log" --model llama3-8b --cluster dgx-h100 --nodes 1 \
    --stack megatron-core --layout "$layout" --global-batch 32 --db "$db"
err_has "--global-batch 32, but .*megatron.log logs a global batch size of 64" "a contradiction"
run 1 "$calib" --run "$runs/megatron.log" --model llama3-8b --cluster dgx-h100 --nodes 1 \
    --stack megatron-core --layout "$layout" --skip 11 --db "$db"
err_has "megatron.log: no usable interval: the log holds 11 logged intervals and the first 11" \
    "a log with nothing after its warm-up"
run 1 "$calib" --run "$runs/megatron.log" --format torchtitan --model llama3-8b \
    --cluster dgx-h100 --nodes 1 --stack megatron-core --layout "$layout" --global-batch 64 \
    --db "$db"
err_has "megatron.log: no torchtitan training line" "the wrong --format"
printf 'starting\nloss 3.2\n' >"$tmp/other.log"
run 1 "$calib" --run "$tmp/other.log" --db "$db"
one_line_error "a file of no known kind"
err_has "other.log: neither a run record (a JSON object) nor a training log" "named"
head -5 "$runs/megatron.log" | sed 's/elapsed time per iteration (ms): [0-9.]*/elapsed time per iteration (ms): 0.0/' \
    >"$tmp/zero.log"
run 1 "$calib" --run "$tmp/zero.log" --model llama3-8b --cluster dgx-h100 --nodes 1 \
    --stack megatron-core --layout "$layout" --skip 0 --db "$db"
err_has "zero.log: no usable interval after the first 0" "a log of zero times"
sed 's/"2026-01-15"/"15.01.2026"/' "$runs/record.json" >"$tmp/bad.json"
run 1 "$calib" --run "$tmp/bad.json" --db "$db"
one_line_error "a bad record field"
err_has "bad.json: field 'date' = \"15.01.2026\"" "the record's file and field"
sed 's/"measured"/"measure"/' "$runs/record.json" >"$tmp/bad.json"
run 1 "$calib" --run "$tmp/bad.json" --db "$db"
err_has "bad.json: unknown field 'measure' (did you mean 'measured'?)" "did you mean"
run 1 "$calib" --forget fx --db "$db"
err_has "--forget fx: expected a run id (4) or a stored run of another framework (f4)" "a bad fID"
run 1 "$calib" --model llama3-8b
err_has "describe the run of --run FILE" "log options without a log"
run 1 "$calib" --run "$runs/record.json" --format yaml
err_has "--format yaml: expected json, megatron or torchtitan" "an unknown format"
run 1 "$calib" --forget f2 --no-store
err_has "--forget takes only --dry-run and --db" "--forget fN with another option"

[ "$failures" -eq 0 ] && echo "cli_calib_runs: all checks passed"
exit "$failures"
