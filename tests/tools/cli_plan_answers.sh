#!/bin/sh
# The answers ptplan gives beside the layout: time to train and cost (--tokens,
# --gpu-hour-price), a global batch in tokens, cluster sizes side by side (--nodes list),
# the error band from the published runs, and a ranking that reads: layouts as --layout
# reads them (pasting one prices the same), variants folded into one row with a legend,
# --explain with the search, embedding and head memory on the stages that hold them.
#   usage: cli_plan_answers.sh PATH/TO/ptplan
set -u
ptplan="$1"
. "$(dirname "$0")/cli_lib.sh"
export PT_COSTS_DB="$tmp/no-such-costs.db"
unset PT_VALIDATION_SETS
cd "$tmp" || exit 1

# py CODE: runs python3 on the JSON in $tmp/out (as d); a failed assert fails the check.
py() {
    python3 -c "import json,sys
d=json.load(open('$tmp/out'))
$1" 2>"$tmp/py" || fail "$2: $(tail -1 "$tmp/py")"
}

h8="--model llama3-8b --cluster dgx-h100 --nodes 2 --global-batch 128 --stack megatron-core \
    --sim-top 50 --max-mbs 1 --no-out"

# ---- time to train and cost ---------------------------------------------------------
plan 0 $h8 --tokens 1T --gpu-hour-price 2.5 --top 3
out_has "^goal    1T tokens = 954k steps, at 2.5 per GPU-hour" "the goal in steps (1e12 / 2^20)"
out_has "^rank .* days .* GPU-h .* cost " "days, GPU-hours and cost columns"
out_has "^days, GPU-h: to train on --tokens" "the legend explains days"
plan 0 $h8 --tokens 1e12 --gpu-hour-price 2.5 --top 3 --json
py "
steps = -(-1e12 // (128 * 8192))
assert d['goal']['steps'] == steps, d['goal']
for c in d['layouts']:
    t, p = c['time_to_train'], c['predicted']
    assert abs(t['seconds'] - steps * p['step_time_s']) < 1e-6 * t['seconds'], t
    assert abs(t['days'] - t['seconds'] / 86400) < 1e-9 * t['days']
    assert abs(t['gpu_hours'] - t['seconds'] / 3600 * 16) < 1e-9 * t['gpu_hours']
    assert abs(t['cost'] - 2.5 * t['gpu_hours']) < 1e-9 * t['cost']" "time to train in JSON"
plan 0 $h8 --top 1 --json
py "assert d['goal'] is None and d['layouts'][0]['time_to_train'] is None" "no goal without --tokens"
plan 0 $h8 --tokens 300B --layout tp=2,zero=1
out_has "^to train on the goal: [0-9.]* days, [0-9.]*k\? GPU-hours$" "--layout: days and GPU-hours"
plan 1 $h8 --gpu-hour-price 2
err_has "give --tokens too" "a price without tokens"
for bad in 0 abc 5X 1e30 -3 ""; do
    plan 1 $h8 --tokens "$bad"
    err_has "expected a number of tokens" "--tokens '$bad'"
done

# ---- a global batch in tokens -------------------------------------------------------
plan 0 $h8 --global-batch 1M --top 1 --json          # 2^20 tokens = 128 sequences of 8192
py "assert d['global_batch'] == 128 and d['global_batch_tokens'] == 1 << 20, d['global_batch']" \
    "--global-batch 1M is 128 sequences"
cp "$tmp/out" "$tmp/by_tokens.json"
plan 0 $h8 --global-batch-tokens 1048576 --top 1 --json
cmp -s "$tmp/out" "$tmp/by_tokens.json" || fail "--global-batch-tokens 1048576 plans as 1M"
plan 0 $h8 --top 1
out_has "^train   global batch 128 sequences = 1.05M tokens" "the header prints both forms"
plan 1 $h8 --global-batch-tokens 1000000
err_has "1000000 tokens is not a whole number of 8192-token sequences (122.07); 999424 tokens are 122 sequences, 1007616 tokens 123" \
    "tokens that are no whole number of sequences"
plan 1 $h8 --global-batch 1.5
err_has "--global-batch 1.5: expected an integer" "a fraction of sequences"
plan 1 $h8 --global-batch 8388608
err_has "68.7G tokens a step, beyond any training run; --global-batch counts sequences" \
    "a batch meant in tokens, given in sequences"
# A layout whose schedule is beyond any real step is refused by a rule, not an error.
plan 3 --model tiny --devices 2 --global-batch 16777216 --layout pp=2,mbs=1 --no-out
out_has "schedule_size .*pp\*vp\*n_micro = 2\*1\*16777216" "schedule_size names its values"

# ---- cluster sizes side by side -----------------------------------------------------
plan 0 $h8 --nodes 4,1,2 --tokens 1T
out_has "^sizes   1, 2, 4 node(s) of 8 H100-SXM5-80GB" "sizes listed in order"
out_has "^     1      8 .* 100.0%  tp=" "the smallest size is the reference"
out_has "^     4     32 " "the largest size"
out_has "^no plan is written" "--nodes list writes no plan"
[ -f "$tmp/plan.json" ] && fail "--nodes list wrote plan.json"
plan 0 $h8 --nodes 1,2,4 --tokens 1T --json
py "
s = d['sizes']
assert [x['nodes'] for x in s] == [1, 2, 4] and d['reference_nodes'] == 1
per = [x['best']['predicted']['tokens_per_s'] / x['gpus'] for x in s]
for x, p in zip(s, per):
    assert abs(x['scaling_efficiency'] - p / per[0]) < 1e-9, x['scaling_efficiency']
    assert x['best']['time_to_train']['days'] > 0" "scaling efficiency is tokens/s per GPU"
# each size's best is what --nodes N ranks first
best2=$(python3 -c "import json; print(json.load(open('$tmp/out'))['sizes'][1]['best']['layout_text'])")
plan 0 $h8 --nodes 2 --top 1 --json
py "assert d['layouts'][0]['layout_text'] == '$best2', d['layouts'][0]['layout_text']" \
    "--nodes 1,2,4 picks for 2 nodes what --nodes 2 picks"
plan 3 --model llama3-405b --cluster dgx-h100 --nodes 1,2 --global-batch 8
err_has "no size has a layout that is valid and fits" "no size can run"
plan 1 $h8 --nodes 1,1
err_has "1 is listed twice" "a size twice"
plan 1 $h8 --nodes 1,x
err_has "--nodes x: expected an integer" "a bad size"
plan 1 $h8 --nodes 1,2 --layout tp=2
err_has "goes with the search alone" "--nodes list with --layout"

# ---- the error band -----------------------------------------------------------------
plan 0 $h8 --top 2 --json
py "
b = d['band']
assert b['runs'] > 0 and b['stack'] == 'megatron-core' and b['device'] == 'H100-SXM5-80GB', b
for c in d['layouts']:
    s = c['predicted']['step_time_s']
    assert abs(c['band']['step_time_lo_s'] - s / (1 + b['err_max'])) < 1e-9 * s
    assert abs(c['band']['step_time_hi_s'] - s / (1 + b['err_min'])) < 1e-9 * s" \
    "the band of each layout is its prediction over (1 + the published errors)"
plan 0 $h8 --top 2
out_has "^band    [0-9]* published runs of stack megatron-core on H100-SXM5-80GB" "the band line"
out_has "^rank 1 within the band of published runs: " "rank 1's range"
PT_VALIDATION_SETS="" plan 0 $h8 --top 1
out_has "^band    no error band" "no sets, no band"
plan 0 --model tiny --devices 1 --no-out --top 1
out_has "^band    no error band: no published run of stack ptrun on " "no runs of ptrun"

# ---- a ranking that reads -----------------------------------------------------------
plan 0 $h8 --top 6 --json
python3 -c "import json
for c in json.load(open('$tmp/out'))['layouts']:
    print(c['layout_text'], repr(c['predicted']['step_time_s']))" >"$tmp/rows"
[ -s "$tmp/rows" ] || fail "no rows to paste"
while read -r text step; do
    plan 0 $h8 --layout "$text" --json
    py "assert repr(d['predicted']['step_time_s']) == '$step', d['layout_text']" \
        "pasting '$text' into --layout prices it the same"
done <"$tmp/rows"
plan 0 --model llama3-70b --cluster dgx-h100 --nodes 8 --seq 8192 --global-batch 1024 \
    --stack megatron-core --sim-top 100 --max-mbs 1 --no-out --top 3 --json
py "
def key(t):
    kv = dict(x.split('=') for x in t.split(','))
    for k in ('vp', 'tp_overlap', 'dp_overlap', 'param_overlap', 'schedule'):
        kv.pop(k, None)
    return kv
rows = d['layouts']
assert any(r['variants'] for r in rows), 'no row has variants'
for r in rows:
    s, m = r['predicted']['step_time_s'], r['memory']['total_bytes']
    assert r['equivalent'] == len(r['variants']) + 1
    for v in r['variants']:
        near = abs(v['step_time_s'] - s) <= 0.01 * max(s, v['step_time_s'])
        same = abs(v['step_time_s'] - s) <= 0.005 * s and abs(v['memory_bytes'] - m) <= 0.005 * m
        assert (near and key(v['layout_text']) == key(r['layout_text'])) or same, v" \
    "variants differ only in vp and overlaps, within 1%"
plan 0 --model llama3-70b --cluster dgx-h100 --nodes 8 --seq 8192 --global-batch 1024 \
    --stack megatron-core --sim-top 100 --max-mbs 1 --no-out --top 3
out_has "^1 .* +[0-9][0-9]* *tp=" "a row with variants shows +k"
out_has "^priced from: where the step's priced time came from" "the legend explains the source"
out_has "^variants: +k more layouts within 1%" "the legend explains the variants"

# ---- --explain with the search ------------------------------------------------------
plan 0 $h8 --top 2 --explain
out_has "^--explain: the winner \[1\] against the runner-up \[2\]" "winner and runner-up"
out_has "^  \[2\] runner-up: tp=" "the runner-up as --layout reads it"
out_has "^they differ in: " "what differs"
out_has "^the runner-up's step is [0-9.]*% longer" "by how much"
plan 0 $h8 --top 2 --explain --json
py "
e = d['explain']
assert e['winner']['layout_text'] == d['layouts'][0]['layout_text']
assert e['runner_up']['layout_text'] == d['layouts'][1]['layout_text']
assert e['layout_differences'] and 'string' not in e['layout_differences']
dt = e['runner_up']['predicted']['step_time_s'] - e['winner']['predicted']['step_time_s']
assert dt >= 0" "--explain --json"

# ---- embedding and head memory ------------------------------------------------------
plan 0 --model llama3-8b --cluster dgx-h100 --layout tp=2,pp=4 --explain --no-out
awk '/^stage /{s=$2} /embedding\/head/{print s, $2}' "$tmp/out" >"$tmp/eh"
grep -q "^0: 0.00$" "$tmp/eh" && fail "stage 0 holds the embedding but shows none: $(cat "$tmp/eh")"
grep -q "^3: 0.00$" "$tmp/eh" && fail "stage 3 holds the head but shows none"
grep -q "^1: 0.00$" "$tmp/eh" || fail "a middle stage holds no embedding: $(cat "$tmp/eh")"
plan 0 --model llama3-8b --cluster dgx-h100 --layout tp=2,pp=4 --json --no-out
py "
p, m = d['memory_parts'], d['memory']
assert abs(sum(p.values()) - m['total_bytes']) <= 8, (sum(p.values()), m['total_bytes'])" \
    "the printed parts add up to the total"

# ---- did you mean -------------------------------------------------------------------
plan 1 --model llama3-70B
err_has "unknown model 'llama3-70B' .*did you mean 'llama3-70b'?" "a model name's typo"
plan 1 --cluster dgx-h10
err_has "did you mean 'dgx-h100'?" "a cluster name's typo"
plan 1 --stack megatron-cor
err_has "did you mean 'megatron-core'?" "a stack name's typo"
plan 1 --layout "tp=2,ppp=2"
err_has "unknown key 'ppp' (did you mean 'pp'?)" "a layout key's typo"
plan 1 --layout "tp=2,foo=1"
err_has "unknown key 'foo' (known: tp, sp," "no near key: the list"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all plan-answer checks passed"
