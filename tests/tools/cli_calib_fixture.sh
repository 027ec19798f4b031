#!/bin/sh
# Calibration on recorded runs (tests/data/calib, made by bench/make_calib_fixture.sh on
# this project's 2-core machine): nothing is timed here, so every figure is the same on
# every machine and under any load. Calibrating from run A stores its samples under its
# id and only fits that pass their checks; it lowers the error of the prediction of the
# held-out run B (another layout of the same op shapes) without touching B; a second
# calibration of A changes nothing; forgetting A restores B's prediction to the digit.
#   usage: cli_calib_fixture.sh BUILD_DIR SOURCE_DIR
set -u
build="$1"
data="$2/tests/data/calib"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
db="$tmp/costs.db"
q() { sqlite3 "$db" "$1"; }
sqlite3 "$db" <"$data/costs.sql" || { echo "FAIL: cannot load the fixture"; exit 1; }
calib() { "$build/ptcalib" --db "$db" "$@" 2>"$tmp/err"; }
# "plan predicted X s (+e%); re-predicted ... Y s (+f%)": the two errors, unsigned
errors() { grep '^  step time' | sed 's/.*(\([-+][0-9.]*\)%).*(\([-+][0-9.]*\)%)$/\1 \2/' | tr -d '+-'; }

calib --run 2 --plan "$data/plan_b.json" --no-store >"$tmp/b0" || fail "B before: $(cat "$tmp/err")"
set -- $(errors <"$tmp/b0")
b_planned=${1:-x} b_before=${2:-x}
# The fixture's runs were recorded on the idle 2-core machine: their GEMMs took 1.11x
# the profile and their spans 1.10x their medians, within the load check. A copy of
# run A whose spans took twice as long in all (pre-empted) is refused without --force:
cp "$db" "$tmp/noisy.db"
sqlite3 "$tmp/noisy.db" "UPDATE op_stats SET total_s = 2 * total_s WHERE run_id = 1"
"$build/ptcalib" --db "$tmp/noisy.db" --run 1 --plan "$data/plan_a.json" >/dev/null 2>"$tmp/err" &&
    fail "a noisy run is refused"
grep -q "run 1 is noisy: its ops took .* --force" "$tmp/err" || fail "the refusal says why: $(cat "$tmp/err")"
[ "$(sqlite3 "$tmp/noisy.db" "SELECT count(*) FROM kernel_samples WHERE run_id = 1")" = 0 ] ||
    fail "refused: nothing stored"
calib --run 1 --plan "$data/plan_a.json" >"$tmp/a" || fail "calibrating from A: $(cat "$tmp/err")"
grep -q "load check: the run's GEMMs took" "$tmp/a" || fail "the load check is printed"
[ "$(q "SELECT count(*) > 10 FROM kernel_samples WHERE run_id = 1")" = 1 ] || fail "A's samples stored"
[ "$(q "SELECT count(*) FROM kernel_samples WHERE run_id = 2")" = 0 ] || fail "B is held out"
# only plausible fits are stored: no efficiency above 100%, no large residual
[ "$(q "SELECT count(*) FROM kernel_fits WHERE eff > 1 OR rms_rel_err > 0.25")" = 0 ] ||
    fail "an implausible fit was stored: $(q "SELECT class, eff, rms_rel_err FROM kernel_fits")"
grep -q "not stored: efficiency .* is above 100%" "$tmp/a" ||
    fail "a fit above 100% is reported, not stored ($(grep -c 'not stored' "$tmp/a") refused)"
calib --run 2 --plan "$data/plan_b.json" --no-store >"$tmp/b1" || fail "B after: $(cat "$tmp/err")"
set -- $(errors <"$tmp/b1")
b_after=${2:-x}
awk -v p="$b_planned" -v b="$b_before" -v a="$b_after" 'BEGIN { exit !(p == b && a + 0 < b + 0) }' ||
    fail "calibrating from A lowers the error on held-out B (as planned $b_planned%, before $b_before%, after $b_after%)"
# calibrating from A again: the same samples and fits in force, so the same prediction
fits=$(q "SELECT count(*) FROM kernel_fits")
calib --run 1 --plan "$data/plan_a.json" >/dev/null || fail "calibrating from A again"
calib --run 2 --plan "$data/plan_b.json" --no-store >"$tmp/b2"
[ "$(grep '^  step time' "$tmp/b1")" = "$(grep '^  step time' "$tmp/b2")" ] ||
    fail "a second calibration of A changes B's prediction"
[ "$(q "SELECT count(*) FROM kernel_fits")" -le "$fits" ] || fail "fits piled up"
# forgetting A: B is predicted exactly as before
calib --forget 1 >"$tmp/f" || fail "forgetting A: $(cat "$tmp/err")"
calib --run 2 --plan "$data/plan_b.json" --no-store >"$tmp/b3"
[ "$(grep '^  step time' "$tmp/b0")" = "$(grep '^  step time' "$tmp/b3")" ] ||
    fail "after --forget 1, B is predicted as before: $(grep '^  step time' "$tmp/b0" "$tmp/b3")"

[ "$failures" = 0 ] && echo "cli_calib_fixture: all passed (B's error: planned $b_planned%, after calibrating from A $b_after%)"
exit "$failures"
