#!/bin/sh
# ptrun's JSON-lines log and ptreport's pictures, by their structure (never by speed):
# the log opens with a header naming plan, layout, model, cluster, ranks, steps and
# build, a resumed run appends another, and every line is JSON with a UTC timestamp;
# ptreport labels each run with its layout, draws both timelines on one time scale and
# keeps the last validation point inside the loss chart; bad input is one clear error.
#   usage: cli_ptreport.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/costs.db"
# check WHAT PYTHON_CODE ARGS...: the code (argv[1:] = ARGS) exits non-zero, printing
# why, when WHAT does not hold
check() {
    what=$1 code=$2; shift 2
    why=$(python3 -c "$code" "$@" 2>&1) || fail "$what: $why"
}
layout1="tp=1,pp=1,vp=1,cp=1,dp=1,zero=0,recompute=none,sp=0,schedule=1f1b"

run 0 "$build/ptprofile" --quick --no-collectives
run 0 "$build/ptplan" --devices 1 --global-batch 8 --out "$tmp/plan.json"
run 0 "$build/ptplan" --devices 1 --global-batch 8 --out "$tmp/plan2.json" \
    --layout "$layout1,mbs=2"
run 0 "$build/ptrun" "$tmp/plan2.json" --steps 3 --val-every 0 --sample 0 --quiet --record
run 0 "$build/ptrun" "$tmp/plan.json" --steps 4 --val-every 2 --sample 0 --quiet --record \
    --log "$tmp/log.jsonl"

# The log: every line a JSON object with "time" in UTC, to the millisecond; the first
# the header, matching the plan and the run recorded from it
check "every log line is JSON with a UTC time" '
import json, re, sys
for n, line in enumerate(open(sys.argv[1]), 1):
    j = json.loads(line)
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", j.get("time", "")):
        sys.exit("line %d: time %r" % (n, j.get("time")))
' "$tmp/log.jsonl"
plan_id=$(sqlite3 "$tmp/costs.db" "SELECT plan_id FROM runs ORDER BY id DESC LIMIT 1")
check "the log opens with the run's header" '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
h, plan = lines[0], json.load(open(sys.argv[2]))
want = {"type": "header", "plan": sys.argv[2], "plan_id": sys.argv[3],
        "layout": plan["layout"]["string"], "model": plan["model"]["name"],
        "cluster": plan["cluster"]["name"], "world": 1, "steps": 4}
for k, v in want.items():
    if h.get(k) != v:
        sys.exit("%s is %r, want %r" % (k, h.get(k), v))
if not h.get("version", "").startswith("ptrun ") or "git_revision" not in h:
    sys.exit("no version or git revision: %r" % h)
if "resumed_from_step" in h or sum(l["type"] == "header" for l in lines) != 1:
    sys.exit("one header, not resumed")
kinds = [(l["type"], l.get("step")) for l in lines[1:]]
if kinds != [("step", 1), ("step", 2), ("val", 2), ("step", 3), ("step", 4), ("val", 4),
             ("params", 4)]:
    sys.exit("lines after the header: %r" % kinds)
' "$tmp/log.jsonl" "$tmp/plan.json" "$plan_id"

# a resumed run appends a second header that says from which step
run 0 "$build/ptrun" "$tmp/plan.json" --steps 4 --val-every 0 --sample 0 --quiet \
    --checkpoint "$tmp/ck" --stop-after 2 --log "$tmp/part.jsonl"
run 0 "$build/ptrun" "$tmp/plan.json" --steps 4 --val-every 0 --sample 0 --quiet \
    --resume "$tmp/ck" --log "$tmp/part.jsonl"
check "a resumed log has a second header" '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
heads = [i for i, l in enumerate(lines) if l["type"] == "header"]
if heads != [0, 3] or "resumed_from_step" in lines[0] or lines[3].get("resumed_from_step") != 2:
    sys.exit("headers at lines %r: %r" % (heads, [lines[i] for i in heads]))
steps = [l["step"] for l in lines if l["type"] == "step"]
if steps != [1, 2, 3, 4]:
    sys.exit("steps %r" % steps)
' "$tmp/part.jsonl"

# ptreport, with the recorded log also given by a relative path: drawn once
run 0 "$build/ptreport" --out "$tmp/report" --log log.jsonl
for p in mfu steptime ops timeline memory loss; do
    [ -s "$tmp/report/$p.png" ] && [ -s "$tmp/report/$p.svg" ] || fail "report draws $p"
done
# every file index.md names (images, data, scripts) is in the report's folder
for f in $(grep -o '[(`][a-z_]*\.\(dat\|gp\|png\|svg\)[`)]' "$tmp/report/index.md" | tr -d '`()'); do
    [ -s "$tmp/report/$f" ] || fail "index.md names $f, which the report lacks"
done
# runs are labelled with their layouts: "#id tp1 pp1 dp1 mbs2" beside each MFU point
# and under each step time
sqlite3 -separator ' ' "$tmp/costs.db" "SELECT id, layout FROM runs" >"$tmp/runs"
check "runs are labelled with their layouts" '
import sys
def short(layout):
    v = dict(kv.split("=") for kv in layout.split(","))
    return "tp%s pp%s dp%s mbs%s" % (v["tp"], v["pp"], v["dp"], v["mbs"])
runs = [l.split(" ", 1) for l in open(sys.argv[1]).read().split("\n") if l]
if len(runs) != 2:
    sys.exit("%d runs recorded, want 2" % len(runs))
for name in sys.argv[2:]:
    text = open(name).read()
    for i, layout in runs:
        if "#%s " % i not in text or short(layout.strip()) + "\"" not in text:
            sys.exit("%s lacks run %s with %r" % (name, i, short(layout.strip())))
' "$tmp/runs" "$tmp/report/mfu.dat" "$tmp/report/steptime.dat"
grep -q "set bmargin" "$tmp/report/steptime.gp" &&
    grep -q "set rmargin" "$tmp/report/steptime.gp" ||
    fail "the step time chart leaves room for its turned labels"
grep -q "set bmargin" "$tmp/report/ops.gp" || fail "the per-op chart leaves room for its labels"
# one time scale for the predicted and the measured step, holding both
check "both timelines share one xrange that holds them" '
import re, sys
ranges = re.findall(r"^set xrange \[(\S+):(\S+)\]$", open(sys.argv[1]).read(), re.M)
if len(ranges) != 2 or ranges[0] != ranges[1]:
    sys.exit("xranges %r" % ranges)
for name in sys.argv[2:]:
    ends = [float(l.split()[3]) for l in open(name) if l[0] != "#"]
    if not ends or max(ends) > float(ranges[0][1]) or float(ranges[0][0]) != 0:
        sys.exit("%s: boxes end at %r, past [%s:%s]" % (name, max(ends or [0]), *ranges[0]))
' "$tmp/report/timeline.gp" "$tmp/report/timeline_predicted.dat" "$tmp/report/timeline_measured.dat"
# the loss chart's ranges hold every point with room: the last validation (step 4) is
# inside the border, not on it; each curve is named with its run's layout
check "the loss chart holds the last validation point" '
import json, re, sys
gp = open(sys.argv[1]).read()
x = [float(v) for v in re.search(r"set xrange \[(\S+):(\S+)\]", gp).groups()]
y = [float(v) for v in re.search(r"set yrange \[(\S+):(\S+)\]", gp).groups()]
lines = [json.loads(l) for l in open(sys.argv[2])]
for l in lines:
    if l["type"] in ("step", "val") and not (x[0] < l["step"] < x[1] and y[0] < l["loss"] < y[1]):
        sys.exit("%s at step %d (loss %g) is not inside x %r, y %r" % (l["type"], l["step"],
                                                                       l["loss"], x, y))
if gp.count("index") != 2 or "log.jsonl: tp1 pp1 dp1 mbs" not in gp:
    sys.exit("want one log, named with its layout: %s" % gp)
' "$tmp/report/loss.gp" "$tmp/log.jsonl"

# Nothing of the input is run as a command, by the shell or by gnuplot: an --out folder
# named like a shell command gets the report; a recorded layout and a log's header and
# file name holding quotes, backslashes, a newline and gnuplot's system() are drawn as
# text, gnuplot reading back each label as it was given (a double quote becomes a single
# one in a data column, a control character '?')
out="r';touch PWNED;'"
run 0 "$build/ptreport" --out "$out"
[ -s "$tmp/$out/index.md" ] && [ -s "$tmp/$out/loss.svg" ] ||
    fail "a report goes into a folder named like a shell command"
cp "$tmp/costs.db" "$tmp/odd.db"
lay='x'"'"'.system("touch PWNED2").'"'"' \ ^_@'
python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
lines[0]["layout"] = sys.argv[3]
open(sys.argv[2], "w").write("".join(json.dumps(l) + "\n" for l in lines))
' "$tmp/log.jsonl" "$tmp/odd.jsonl" "$lay"
cp "$tmp/odd.jsonl" "$tmp/'l'o\"g\\.jsonl"
sqlite3 "$tmp/odd.db" "UPDATE runs SET layout = 'x''.system(\"touch PWNED3\").'' \\ ' ||
                       char(10) || 'y', log_path = '$tmp/odd.jsonl'"
run 0 "$build/ptreport" --db "$tmp/odd.db" --out "$tmp/odd"
run 0 "$build/ptreport" --db "$tmp/odd.db" --out "$tmp/odd2" --log "$tmp/'l'o\"g\\.jsonl"
grep -qF "title 'odd.jsonl: x'.\"'\".'.system(\"touch PWNED2\").'.\"'\".' \\ ^_@'," \
    "$tmp/odd/loss.gp" || fail "a log's layout is one quoted string in loss.gp"
grep -qF "title ''.\"'\".'l'.\"'\".'o\"g\\.jsonl: x'.\"'\".'.system(" "$tmp/odd2/loss.gp" ||
    fail "a log's file name is one quoted string in loss.gp"
check "gnuplot reads the labels back as they were given" '
import subprocess, sys
def gnuplot(folder, commands):
    return subprocess.run(["gnuplot", "-e", commands], cwd=folder, capture_output=True,
                          text=True).stderr
odd, odd2, lay = sys.argv[1:]
for folder, text in ((odd, "odd.jsonl: " + lay), (odd2, "\x27l\x27o\"g\\.jsonl: " + lay)):
    gp = open(folder + "/loss.gp").read()
    title = gp.split(" lc 1 title ", 1)[1].split(", \x27\x27 index")[0]
    got = gnuplot(folder, "print " + title)
    if got != text + "\n":
        sys.exit("%s/loss.gp: the title %s reads as %r, want %r" % (folder, title, got, text))
lay = "x\x27.system(\x27touch PWNED3\x27).\x27 \\ ?y"
for name, cols, text in (("mfu.dat", "2:3:4", "#1 " + lay), ("steptime.dat", "1:3:4", lay)):
    got = gnuplot(odd, "set table $t; plot \x27%s\x27 using %s with labels; unset table; "
                       "print $t" % (name, cols))
    if text + "\"" not in got:
        sys.exit("%s/%s: want the label %r in what gnuplot read: %s" % (odd, name, text, got))
' "$tmp/odd" "$tmp/odd2" "$lay"
[ -z "$(find "$tmp" -name 'PWNED*')" ] || fail "no input is run: $(find "$tmp" -name 'PWNED*')"

# bad input
run 1 "$build/ptreport" --out "$tmp/r2" --log "$tmp/missing.jsonl"
err_has "cannot read the log '$tmp/missing.jsonl'" "a --log file that is not there"
run 1 "$build/ptreport" --out "$tmp/r2" --log "$tmp/plan.json"
err_has "plan.json: no training steps in it" "a --log file that is not a log"
# a failed report changes nothing: the folder made for it is gone, an earlier report in
# the same folder stays whole, and no staging folder or empty file is left behind
[ -e "$tmp/r2" ] && fail "a failed report leaves no folder it made"
cp "$tmp/report/index.md" "$tmp/index-before.md"
run 1 "$build/ptreport" --out "$tmp/report" --log "$tmp/plan.json"
cmp -s "$tmp/report/index.md" "$tmp/index-before.md" ||
    fail "a failed report leaves the earlier one in its folder alone"
ls -A "$tmp/report" | grep -q "^\.ptreport-" && fail "a failed report leaves no staging folder"
[ -z "$(find "$tmp/report" -type f -empty)" ] || fail "a failed report leaves no empty files"
run 1 "$build/ptreport" --out /dev/null/report
err_has "cannot create '/dev/null/report'" "an output folder that cannot be made"
long=$(printf '%01000d' 0)
run 1 "$build/ptreport" --out "$tmp/$long"
err_has "the path is too long" "an --out too long for the staging folder's name"
[ ! -e "$tmp/$long" ] || fail "an --out too long is not created"
run 1 "$build/ptreport" --db "$tmp/none.db" --out "$tmp/r2"
err_has "none.db" "a cost database that is not there"
run 1 "$build/ptreport" --bogus
err_has "bogus" "an unknown option"
run 1 "$build/ptrun" "$tmp/plan.json" --steps 2 --sample 0 --quiet --log "$tmp/no/log.jsonl"
err_has "cannot write '$tmp/no/log.jsonl'" "a log that cannot be written"

[ "$failures" = 0 ] && echo "cli_ptreport: all passed"
exit "$failures"
