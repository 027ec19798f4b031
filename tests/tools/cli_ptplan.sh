#!/bin/sh
# ptplan as a user runs it: listings, dumps that load back, one layout evaluated,
# the enumeration, process groups, and every bad input refused with one clear
# message and a non-zero exit.
#   usage: cli_ptplan.sh PATH/TO/ptplan
set -u
ptplan="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
# No user's cost table leaks in; plan.json lands in the scratch folder.
export PT_COSTS_DB="$tmp/no-such-costs.db"
cd "$tmp" || exit 1

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run EXPECTED_EXIT ARGS...: runs ptplan, keeping stdout in $tmp/out, stderr in $tmp/err.
run() {
    want=$1; shift
    "$ptplan" "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" = "$want" ] || fail "ptplan $* exited $got, want $want; stderr: $(cat "$tmp/err")"
}
out_has() { grep -q -- "$1" "$tmp/out" || fail "stdout lacks '$1' ($2)"; }
err_has() { grep -q -- "$1" "$tmp/err" || fail "stderr lacks '$1' ($2); got: $(cat "$tmp/err")"; }
one_line_error() {
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "want one error line ($1), got: $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] || fail "stdout not empty on error ($1)"
}

# ---- listings and dumps --------------------------------------------------------
run 0 --list-models
for m in tiny gpt2-124m gpt2-350m gpt2-774m gpt2-1.5b gpt3-1.3b gpt3-2.7b gpt3-6.7b \
         gpt3-13b gpt3-175b llama2-7b llama2-13b llama2-70b llama3-8b llama3-70b llama3-405b; do
    out_has "^$m " "--list-models lists $m"
done
out_has "^llama2-7b .* 6.74B" "llama2-7b has 6.74B parameters"
for m in tiny-moe tiny-qwen3-moe mixtral-8x7b mixtral-8x22b qwen3-30b-a3b qwen3-235b-a22b \
         gpt-oss-20b gpt-oss-120b; do
    out_has "^$m " "--list-models lists $m"
done
out_has "^mixtral-8x7b .* 2/8 .* 46.70B  *12.88B" "Mixtral: top-2 of 8, total and active"
out_has "^qwen3-235b-a22b .* 8/128 .* 235.09B  *22.19B" "Qwen3-235B: top-8 of 128"
out_has "^gpt-oss-120b .* 4/128 .* 116.83B" "gpt-oss-120b's published total"
run 0 --list-clusters
for c in dgx-a100-80g dgx-h100 local; do out_has "^$c " "--list-clusters lists $c"; done

for m in gpt3-175b llama3-405b tiny; do
    run 0 --dump-model "$m"
    cp "$tmp/out" "$tmp/$m.json"
    run 0 --dump-model "$tmp/$m.json"
    cmp -s "$tmp/out" "$tmp/$m.json" || fail "dumped $m does not load back identically"
done
run 0 --dump-cluster dgx-h100 --nodes 4
cp "$tmp/out" "$tmp/c.json"
out_has '"nodes": 4' "--nodes sizes the dumped cluster"
run 0 --dump-cluster "$tmp/c.json"
cmp -s "$tmp/out" "$tmp/c.json" || fail "dumped cluster does not load back identically"

# ---- software stacks ------------------------------------------------------------
run 0 --list-stacks
for s in ptrun megatron-lm megatron-core fsdp; do out_has "^$s " "--list-stacks lists $s"; done
for s in ptrun megatron-lm megatron-core fsdp; do
    run 0 --dump-stack "$s"
    cp "$tmp/out" "$tmp/stack-$s.json"
    run 0 --dump-stack "$tmp/stack-$s.json"
    cmp -s "$tmp/out" "$tmp/stack-$s.json" || fail "dumped stack $s does not load back identically"
done
# A stack from a file prices like the built-in it was dumped from.
run 0 --model llama3-8b --cluster dgx-h100 --stack megatron-core --layout "tp=2,pp=2,zero=1" --json
grep -v '"name"' "$tmp/out" >"$tmp/a"
run 0 --model llama3-8b --cluster dgx-h100 --stack "$tmp/stack-megatron-core.json" \
    --layout "tp=2,pp=2,zero=1" --json
grep -v '"name"' "$tmp/out" >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b" || fail "a dumped stack prices differently from its built-in"
grep -q '"about": "Megatron-Core' "$tmp/out" || fail "the JSON output names its stack"
out_has '"breakdown"' "predicted.breakdown in JSON"
# The breakdown in --explain, and stacks that price differently.
run 0 --model llama3-8b --cluster dgx-h100 --stack megatron-lm \
    --layout "tp=2,pp=2,zero=1,recompute=selective" --explain --no-out
out_has "attention" "--explain lists attention in the breakdown"
out_has "bubble" "--explain lists the bubble"
# Unsupported overlaps and parallelisms are refused, naming the key and the stack.
run 1 --model gpt2-124m --devices 2 --stack megatron-lm --layout "dp_overlap=last" --no-out
err_has "dp_overlap=last: stack 'megatron-lm' offers only none" "overlap the stack lacks"
one_line_error "overlap the stack lacks"
run 1 --model gpt2-124m --devices 2 --stack megatron-lm --layout "zero=1,param_overlap=1" --no-out
err_has "param_overlap=1: stack 'megatron-lm' does not overlap" "param overlap the stack lacks"
run 1 --model gpt2-124m --devices 2 --stack fsdp --layout "tp=2" --no-out
err_has "stack 'fsdp' has no tensor parallelism" "parallelism the stack lacks"
run 1 --model gpt2-124m --devices 2 --stack megatron-core --layout "zero=3" --no-out
err_has "stack 'megatron-core' does not offer ZeRO stage 3" "ZeRO stage the stack lacks"
run 1 --model gpt2-124m --devices 2 --layout "dp_overlap=sideways" --no-out
err_has "dp_overlap=sideways" "unknown dp_overlap"; one_line_error "unknown dp_overlap"
# Unknown and malformed stacks.
run 1 --stack no-such-stack --no-out
err_has "unknown stack 'no-such-stack'" "unknown stack"; one_line_error "unknown stack"
printf '{"name": "x",\n' >"$tmp/cut.json"
run 1 --stack "$tmp/cut.json" --no-out
err_has "cut.json:2" "truncated stack JSON with its line"; one_line_error "truncated stack"
python3 - "$tmp" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/stack-megatron-core.json"))
bad = [("reach", ("overlap", "tp_reach", 1.5)), ("mode", ("overlap", "dp", ["sideways"])),
       ("typo", ("attention", "typo", 1)), ("eff", ("attention", "impl", "magic")),
       ("p2p", ("overlap", "p2p", "sometimes")), ("vpt", ("loss", "vocab_per_tp", "yes")),
       ("bucket", ("gradients", "bucket_bytes", 1))]
for name, (sec, key, val) in bad:
    e = json.loads(json.dumps(d))
    e[sec][key] = val
    json.dump(e, open(sys.argv[1] + "/bad-%s.json" % name, "w"))
PY
run 1 --stack "$tmp/bad-reach.json" --no-out
err_has "overlap.tp_reach' = 1.5" "tp_reach out of range"; one_line_error "tp_reach"
run 1 --stack "$tmp/bad-mode.json" --no-out
err_has "overlap.dp\[0\]" "unknown dp overlap in a stack"; one_line_error "stack dp mode"
run 1 --stack "$tmp/bad-typo.json" --no-out
err_has "unknown field 'attention.typo'" "misspelt stack field"; one_line_error "stack typo"
run 1 --stack "$tmp/bad-eff.json" --no-out
err_has "attention.impl" "unknown attention implementation"; one_line_error "attention impl"
run 1 --stack "$tmp/bad-p2p.json" --no-out
err_has "overlap.p2p" "unknown p2p mode"; one_line_error "p2p mode"
run 1 --stack "$tmp/bad-vpt.json" --no-out
err_has "loss.vocab_per_tp" "vocab_per_tp not a boolean"; one_line_error "vocab_per_tp"
run 1 --stack "$tmp/bad-bucket.json" --no-out
err_has "gradients.bucket_bytes' = 1: expected 0" "a 1-byte bucket"; one_line_error "bucket"
# "ptrun_kernels": the kernels a profile of ptrun's prices for the stack. An unknown GEMM
# role, or ptrun's attention named for unfused attention, is refused; left out, the stack
# runs none of ptrun's kernels.
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
d = json.load(open(t + "/stack-megatron-core.json"))
assert "gemm_wgrad" in d["ptrun_kernels"]["gemm"], d["ptrun_kernels"]
d["ptrun_kernels"]["gemm"] = ["gemm", "gemm_magic"]
json.dump(d, open(t + "/bad-ptk-role.json", "w"))
d = json.load(open(t + "/stack-megatron-lm.json"))
d["ptrun_kernels"]["attention"] = [{"device": "*", "fwd": True, "bwd": False}]
json.dump(d, open(t + "/bad-ptk-unfused.json", "w"))
d = json.load(open(t + "/stack-megatron-core.json"))
del d["ptrun_kernels"]
d["name"] = "no-ptk"
json.dump(d, open(t + "/no-ptk.json", "w"))
PY
run 1 --stack "$tmp/bad-ptk-role.json" --no-out
err_has "ptrun_kernels.gemm\[1\]': expected a GEMM role" "an unknown GEMM role"
one_line_error "ptrun_kernels role"
run 1 --stack "$tmp/bad-ptk-unfused.json" --no-out
err_has "ptrun_kernels.attention' names ptrun's attention kernel but 'attention.impl' is unfused" \
    "ptrun's attention for an unfused stack"
one_line_error "ptrun_kernels unfused"
run 0 --model llama3-8b --cluster dgx-h100 --stack "$tmp/no-ptk.json" --layout tp=8 --no-out
out_has "^        stack no-ptk runs none of ptrun's kernels" "ptrun_kernels left out: none"
# The optional top-level "kernels" and "selective": bad values are refused naming the
# field; left out, a stack runs fused kernels and Korthikanti's selective recomputation.
run 0 --dump-stack fsdp
cp "$tmp/out" "$tmp/fsdp.json"
python3 - "$tmp" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/fsdp.json"))
assert d["kernels"] == "eager" and d["selective"] == "op", d
assert d["fused_epilogues"] is False, d
for key, val in (("kernels", "sometimes"), ("selective", "partly"), ("fused_epilogues", "yes")):
    e = dict(d)
    e[key] = val
    json.dump(e, open(sys.argv[1] + "/bad-%s.json" % key, "w"))
e = dict(d)
del e["kernels"], e["selective"], e["fused_epilogues"]
json.dump(e, open(sys.argv[1] + "/fsdp-plain.json", "w"))
PY
run 1 --stack "$tmp/bad-kernels.json" --no-out
err_has "field 'kernels'" "unknown kernel style"; one_line_error "kernels"
run 1 --stack "$tmp/bad-selective.json" --no-out
err_has "field 'selective'" "unknown selective policy"; one_line_error "selective"
run 0 --dump-stack "$tmp/fsdp-plain.json"
out_has '"kernels": "fused"' "kernels default"; out_has '"selective": "attention"' "selective default"
out_has '"fused_epilogues": false' "fused_epilogues default"
run 1 --stack "$tmp/bad-fused_epilogues.json" --no-out
err_has "fused_epilogues" "fused_epilogues not a boolean"; one_line_error "fused_epilogues"
run 0 --dump-stack ptrun
out_has '"fused_epilogues": true' "ptrun fuses its epilogues"

# A model from a file plans like the built-in it was dumped from.
run 0 --model llama3-8b --cluster dgx-h100 --stack megatron-core --layout tp=8 --json
cp "$tmp/out" "$tmp/builtin.out"
run 0 --dump-model llama3-8b
cp "$tmp/out" "$tmp/l8.json"
run 0 --model "$tmp/l8.json" --cluster dgx-h100 --stack megatron-core --layout tp=8 --json
grep -v '"name"' "$tmp/out" >"$tmp/a"
grep -v '"name"' "$tmp/builtin.out" >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b" || fail "a model file plans differently from its built-in"

# ---- one layout ------------------------------------------------------------------
# (tp and ZeRO on GPUs, priced for Megatron-Core; ptrun's own under "layouts on GPUs")
run 0 --model llama3-8b --cluster dgx-h100 --stack megatron-core --layout "tp=4,dp=2,zero=1" \
    --global-batch 64 --json --out "$tmp/one.json"
out_has '"total_bytes"' "memory.total_bytes in --layout --json"
out_has '"step_time_s"' "predicted.step_time_s in --layout --json"
out_has '"mfu"' "predicted.mfu in --layout --json"
out_has '"bubble_fraction"' "predicted.bubble_fraction in --layout --json"
out_has '"exposed_comm_fraction"' "predicted.exposed_comm_fraction in --layout --json"
grep -q '"rank_order": "tp-cp-dp-pp"' "$tmp/one.json" || fail "--layout --out writes plan.json"
out_has '"weights_bytes"' "breakdown in --layout --json"
out_has '"valid": true' "valid layout"
out_has '"fits": true' "llama3-8b fits with tp=4, zero 1 over dp=2"

run 0 --model llama3-70b --cluster dgx-h100 --nodes 4 --global-batch 128 --stack megatron-core \
    --layout "tp=8,pp=4,vp=2,cp=1,dp=1,zero=0,mbs=1,recompute=selective,sp=1,schedule=interleaved" --explain
out_has "stage 3:" "--explain lists every stage"
out_has "predicted step" "the evaluated layout gets a step time"
out_has "fits: yes" "llama3-70b on 32 GPUs fits"

run 3 --model llama3-70b --cluster dgx-h100 --layout "tp=1,dp=8,zero=0"
out_has "fits: NO" "llama3-70b without sharding does not fit one GPU"
run 3 --model llama3-70b --cluster dgx-h100 --layout "tp=1,dp=8,zero=0" --explain
out_has "to fit, try" "--explain suggests what to change"

run 3 --model llama3-8b --cluster dgx-h100 --layout "tp=3,pp=1,dp=1" --explain
out_has "invalid" "tp=3 is invalid"
out_has "heads_tp .*heads (32) are not divisible by tp (3)" "heads rule explained"
out_has "world .*but the cluster has 8 ranks" "world rule explained"
# How cp communicates (cp_comm, cp_a2a): each bad use refused with its reason. tiny has
# 4 heads and 4 KV heads.
run 3 --model tiny --devices 8 --layout "cp=8,cp_comm=a2a" --explain --no-out
out_has "heads_cp_a2a .*heads per tp rank (4/1) are not divisible by the all-to-all degree 8 (cp_comm=a2a)" \
    "heads against the all-to-all degree explained"
err_has "breaks 1 rule(s): heads_cp_a2a" "heads rule named"
run 3 --model tiny --devices 8 --layout "cp=8,cp_comm=a2a+p2p,cp_a2a=3" --explain --no-out
out_has "cp_a2a .*cp_a2a = 3 does not divide cp = 8" "cp_a2a not dividing cp explained"
run 3 --model tiny --devices 8 --layout "cp_comm=a2a" --explain --no-out
out_has "cp_comm_no_cp .*cp_comm=a2a with cp = 1" "cp_comm without cp explained"
run 1 --model tiny --devices 8 --layout "cp=4,cp_comm=a2a,cp_a2a=2" --no-out
err_has "cp_a2a applies only with cp_comm=a2a+p2p (cp_comm=a2a, whose all-to-all spans all of cp)" \
    "cp_a2a with a2a"
one_line_error "cp_a2a with a2a"
run 1 --model tiny --devices 8 --layout "cp=4,cp_comm=a2a+p2p" --no-out
err_has "cp_comm=a2a+p2p needs cp_a2a=N" "a2a+p2p without cp_a2a"; one_line_error "no cp_a2a"
run 1 --model tiny --devices 8 --layout "cp=4,cp_comm=ring" --no-out
err_has "cp_comm=ring" "unknown cp_comm"; one_line_error "unknown cp_comm"
run 1 --model tiny --devices 8 --layout "cp=2,cp_comm=all_gather" --no-out
err_has "layout cp_comm=all_gather: stack 'ptrun' does not communicate context parallelism that way (it runs: p2p, a2a, a2a+p2p)" \
    "ptrun runs no all-gather"
one_line_error "ptrun all_gather"
# A stack file says which kinds it runs; a bad kind or an empty list is refused.
python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
d = json.load(open(t + "/stack-megatron-core.json"))
assert d["parallelism"]["cp_comm"] == ["p2p", "all_gather", "a2a", "a2a+p2p"], d["parallelism"]
for name, kinds in (("p2p", ["p2p"]), ("ring", ["p2p", "ring"]), ("none", [])):
    d["parallelism"]["cp_comm"] = kinds
    json.dump(d, open(t + "/cpc-%s.json" % name, "w"))
PY
run 1 --model tiny --devices 8 --stack "$tmp/cpc-p2p.json" --layout "cp=2,cp_comm=a2a" --no-out
err_has "stack 'megatron-core' does not communicate context parallelism that way (it runs: p2p)" \
    "a stack file without a2a"
one_line_error "stack without a2a"
run 1 --stack "$tmp/cpc-ring.json" --no-out
err_has "parallelism.cp_comm\[1\]': expected one of p2p, all_gather, a2a, a2a+p2p" "unknown kind in a stack"
one_line_error "stack cp_comm kind"
run 1 --stack "$tmp/cpc-none.json" --no-out
err_has "parallelism.cp_comm': empty" "no kind in a stack"; one_line_error "stack cp_comm empty"
# Every kind priced side by side: the cp row shows what each leaves exposed.
run 0 --model llama3-8b --cluster dgx-h100 --nodes 2 --seq 131072 --stack megatron-core \
    --compare "cp=16,zero=1,recompute=full" "cp=16,cp_comm=all_gather,zero=1,recompute=full" \
    "cp=8,cp_comm=a2a,zero=1,recompute=full" "cp=16,cp_comm=a2a+p2p,cp_a2a=8,zero=1,recompute=full"
out_has "cp=16,cp_comm=a2a+p2p,cp_a2a=8,dp=1" "compare names cp_comm and cp_a2a"
out_has "^  cp (exposed) *0 *[0-9.]* *[0-9.]* *[0-9.]*$" "the ring hides its transfers; the others expose theirs"
# ptrun runs the all-to-all over all 16 ranks, its 8 KV heads replicated to pairs;
# Transformer Engine replicates none, so megatron-core refuses it with the reason.
run 0 --model llama3-8b --cluster dgx-h100 --nodes 2 --seq 131072 \
    --compare "cp=16,zero=3,recompute=full" "cp=16,cp_comm=a2a,zero=3,recompute=full"
out_has "^  cp (exposed) *0 *[1-9][0-9.]*$" "ptrun's a2a over two nodes exposes what the ring hides"
run 1 --model llama3-8b --cluster dgx-h100 --nodes 2 --seq 131072 --stack megatron-core \
    --layout "cp=16,cp_comm=a2a,zero=1" --no-out
err_has "stack 'megatron-core' needs the KV heads per tp rank (8) divisible by the all-to-all's degree 16: it replicates none" \
    "TE's all-to-all replicates no KV heads"
one_line_error "megatron-core a2a with replicated KV heads"
# The search tries each kind the stack runs where it may be the fastest: a2a+p2p with the
# all-to-all filling a node (the cp ranks of 8 GPUs: 8/tp), pure a2a inside a node and
# where it sends fewer bytes than the ring (32 heads, 8 KV heads: cp >= 4 at tp = 1).
run 0 --model llama3-8b --cluster dgx-h100 --nodes 2 --seq 65536 --global-batch 16 --list-layouts
out_has "tp=1,.*cp=8,.*cp_comm=a2a$" "the search tries a2a in a node"
grep -q "tp=1,.*cp=16,.*cp_comm=a2a$" "$tmp/out" && fail "the search tries a2a across nodes beside a2a+p2p"
grep -q "tp=1,.*cp=2,.*cp_comm=a2a$" "$tmp/out" && fail "the search tries a2a where the ring sends less"
out_has "tp=1,.*cp=16,.*cp_comm=a2a+p2p,cp_a2a=8$" "the search tries a2a+p2p in groups of 8"
out_has "tp=2,.*cp=8,.*cp_comm=a2a+p2p,cp_a2a=4$" "... of 4 with tp=2"
grep -q "cp_comm=all_gather" "$tmp/out" && fail "ptrun's search tries all_gather"
grep -q "cp=1,.*cp_comm=" "$tmp/out" && fail "a layout without cp names a cp_comm"
run 3 --model llama3-8b --cluster dgx-h100 --layout "tp=2,pp=2,zero=2" --json
out_has '"reason": "zero_pp"' "zero_pp reason in JSON"
out_has '"valid": false' "invalid in JSON"

# Uneven pipeline stages: Llama 3 405B's 7, 8 x 14, 7 is valid (it does not fit without
# sharding or sp: 87 GiB on the busiest stage, 52 GiB with zero=1); splits that leave no
# valid division are refused with the numbers that do not work.
l405="tp=8,pp=16,dp=64,first_layers=7,last_layers=7,mbs=1,recompute=full"
run 3 --model llama3-405b --cluster dgx-h100 --nodes 1024 --global-batch 2048 --seq 8192 \
    --stack megatron-core --layout "$l405" --explain --no-out
out_has "first_layers=7,last_layers=7" "the canonical layout string carries the split"
out_has "stage 0: 7 layers" "the first stage holds 7 layers"
out_has "stage 1: 8 layers" "a middle stage holds 8 layers"
out_has "stage 15: 7 layers" "the last stage holds 7 layers"
out_has "fits: NO" "llama3-405b's layout without sharding does not fit"
grep -q "invalid" "$tmp/out" && fail "llama3-405b's 7/8/7 split is valid"
run 0 --model llama3-405b --cluster dgx-h100 --nodes 1024 --global-batch 2048 --seq 8192 \
    --stack megatron-core --layout "$l405,zero=1" --no-out
out_has "fits: yes" "llama3-405b's layout fits with zero=1"
# Pipeline layouts in Megatron-Core's notation: Meta's 405B with the embedding and the
# loss on virtual stages of their own (126 't' pasted one by one) is valid; the search
# offers it; bad layouts get one message each.
big405="--model llama3-405b --cluster dgx-h100 --nodes 1024 --global-batch 2048 --seq 8192"
meta="E|$(printf 't|%.0s' $(seq 126))L"
run 0 $big405 --stack megatron-core --layout "tp=8,sp=1,pp=16,vp=8,dp=64,zero=1,mbs=1,recompute=full" \
    --pipeline-layout "$meta" --explain --out "$tmp/p405.json"
out_has "pipeline=E|(t|)\*126L" "the layout string carries the pipeline layout, compressed"
out_has "fits: yes" "Meta's pipeline layout fits with full recomputation"
grep -q '"pipeline_layout": "E|(t|)\*126L"' "$tmp/p405.json" || fail "plan.json carries the pipeline layout"
run 0 $big405 --stack megatron-core --layout "tp=8,sp=1,pp=16,dp=64,zero=1,mbs=1,recompute=full,pipeline=E|(t|)*126L" \
    --json --no-out
out_has '"vp": 8' "vp follows from the pipeline layout's 128 stages over pp=16"
out_has '"pipeline_layout": "E|(t|)\*126L"' "--json carries the pipeline layout"
run 0 --model llama3-405b --cluster dgx-h100 --nodes 16 --global-batch 2048 --seq 8192 \
    --stack megatron-core --top 40 --no-out
out_has "pipeline=E|(t|)\*126L" "the search tries the balanced layout with the embedding and loss alone"
run 3 $big405 --layout "tp=8,pp=16,dp=64" --pipeline-layout "E|(t|)*125L" --no-out
out_has "pipeline_layout .*127 virtual stages, not a multiple of pp (16)" "too few units"
run 3 $big405 --layout "tp=8,pp=2,dp=512" --pipeline-layout "Et*62|t*65L" --no-out
out_has "holds 127 transformer layers (t), the model has 126" "too many layers"
run 1 $big405 --layout "tp=8,pp=16,dp=64" --pipeline-layout "tE|(t|)*125L"
err_has "ptplan: --pipeline-layout: .*'E' must come first" "an E that is not first"
run 1 $big405 --layout "tp=8,pp=16,dp=64" --pipeline-layout "Et*3|(tt|)*29,m|L"
err_has "'m' (a multi-token-prediction layer, virtual stage 30) is not modelled" "MTP refused"
run 3 $big405 --layout "tp=8,pp=4,dp=256" --pipeline-layout "Et*63||t*63|L" --no-out
out_has "leaves pipeline rank 1 with nothing" "a rank with nothing at all"
run 1 $big405 --layout "tp=8,pp=16,first_layers=7,pipeline=E|(t|)*126L"
err_has "give one" "pipeline= with first_layers"
[ ! -e plan.json ] || fail "no plan written for a bad pipeline layout"

run 3 --model llama3-405b --cluster dgx-h100 --nodes 1024 --global-batch 2048 \
    --layout "tp=8,pp=16,dp=64" --no-out
out_has "layers_pp .*layers (126) are not divisible by pp\*vp = 16\*1" "126 layers on 16 stages"
run 3 --model gpt2-124m --devices 2 --layout "pp=2,first_layers=1,last_layers=1" --no-out
out_has "uneven_split .*1 + 1 = 2, but with pp = 2 they must add up to the model's 12 layers" \
    "pp=2 split that does not add up"
out_has "invalid: 1 rule(s) broken" "one rule broken by the bad split"
run 3 --model gpt2-124m --devices 4 --layout "pp=4,first_layers=5,last_layers=4" --no-out
out_has "uneven_split .*the 3 layers that first_layers = 5, last_layers = 4 leave do not" \
    "middle layers that do not divide"
run 3 --model gpt2-124m --devices 2 --layout "pp=2,vp=2,first_layers=3,last_layers=9" --no-out
out_has "uneven_split .*first_layers (3) is not divisible by vp (2)" "chunks of a stage"
run 3 --model gpt2-124m --devices 1 --layout "first_layers=4" --json --no-out
out_has '"reason": "uneven_split"' "uneven_split reason in JSON"
run 1 --model gpt2-124m --devices 2 --layout "pp=2,first_layers=-1"
err_has "first_layers=-1" "negative first_layers"
one_line_error "negative first_layers"

# ---- layouts on GPUs -----------------------------------------------------------
# ptrun's CUDA backend trains every valid layout, like its CPU backend: a plan for ptrun
# on GPUs may use tp, cp and ZeRO, the search offers them, no reason is named "backend",
# and a plan priced for another stack is written without a note about ptrun.
run 0 --model llama3-8b --cluster dgx-h100 --layout "tp=4,dp=2,zero=1" --global-batch 64 \
    --out "$tmp/gpu.json"
out_has "wrote $tmp/gpu.json" "a plan for ptrun with tp and ZeRO on GPUs"
[ -s "$tmp/gpu.json" ] || fail "the plan for ptrun with tp=4,dp=2,zero=1 was not written"
[ ! -s "$tmp/err" ] || fail "a note for a plan ptrun trains: $(cat "$tmp/err")"
run 0 --model llama3-8b --cluster dgx-h100 --stack megatron-core --layout "tp=2,pp=2,zero=1" \
    --out "$tmp/mc.json"
[ -s "$tmp/mc.json" ] || fail "the plan for megatron-core was not written"
[ ! -s "$tmp/err" ] || fail "a note on a plan for another stack: $(cat "$tmp/err")"
run 0 --model gpt2-124m --cluster dgx-a100-80g --global-batch 64 --top 3 --no-out
grep -q "^  backend" "$tmp/out" && fail "the search counts no layout under \"backend\""
run 0 --model gpt2-124m --cluster dgx-a100-80g --global-batch 64 --list-layouts
grep -q "^tp=[2-8]," "$tmp/out" || fail "--list-layouts lists tp for ptrun on GPUs"
grep -q ",cp=[2-8]," "$tmp/out" || fail "--list-layouts lists cp for ptrun on GPUs"
grep -q ",zero=[1-3]," "$tmp/out" || fail "--list-layouts lists ZeRO for ptrun on GPUs"
run 0 --model tiny --devices 2 --list-layouts
out_has "^tp=2,sp=1,pp=1,vp=1,cp=1,dp=1,zero=0," "--list-layouts lists tp on the CPU"
first=$(head -1 "$tmp/out")
run 0 --model tiny --devices 2 --list-layouts --json
out_has "\"$first\"" "--list-layouts --json lists the same"
run 0 --model tiny --devices 2 --layout "$first" --no-out
out_has "fits: yes" "a listed layout evaluates as valid and fitting"
run 1 --list-layouts --layout tp=1
err_has "choose one" "--list-layouts is a mode of its own"

# ---- nothing to plan -------------------------------------------------------------------
# Nothing fits: exit 3, the advice says memory is why (with the smallest layout's need)
# and suggests more devices, and no plan is written.
run 3 --model gpt3-175b --devices 1 --out "$tmp/nofit.json"
out_has "0 fit in memory" "nothing fits: the summary says so"
out_has "12 valid but too big" "nothing fits: how many were too big"
err_has "no plan written: no layout fits: none of the 12 valid layouts fits in the" \
    "nothing fits: the advice says memory is why"
err_has "the smallest needs [0-9.]* GiB" "nothing fits: what the smallest layout needs"
err_has "Try more devices (--nodes, --devices)" "nothing fits: more devices are suggested"
[ -e "$tmp/nofit.json" ] && fail "nothing fits: no plan is written"
run 3 --model gpt3-175b --devices 1 --no-out --json
out_has '"advice": "no layout fits: none of the 12 valid layouts' "the advice in --json"
# Every layout broken by a rule (tiny on 7 ranks: 4 heads, 4 layers, sequence 64, global
# batch 64; on 5, 4 layers and the embedding make 5 units, one a stage): the advice names the rules with the counts of the table and the job's sizes,
# and suggests no more devices; a plan of an earlier run at --out is removed.
run 0 --devices 1 --top 1 --out "$tmp/stale.json"
[ -f "$tmp/stale.json" ] || fail "a plan to go stale is written"
run 3 --devices 7 --out "$tmp/stale.json"
for rule in "heads_tp (4 heads)" "layers_pp (4 layers)" "batch_dp (global batch 64)" \
            "seq_cp (sequence 64)"; do
    n=$(awk -v k="${rule%% *}" '$1 == k { print $2 }' "$tmp/out")
    [ -n "$n" ] || fail "the table counts layouts under ${rule%% *}"
    err_has "[:,] $n by $rule" "the advice names $rule with the table's count"
done
err_has "no plan written: no valid layout: all [0-9]* layouts of 7 ranks were rejected: " \
    "every layout rejected by the rules"
grep -q "more devices\|more nodes" "$tmp/err" && fail "rules, not memory: no more devices advised"
[ -e "$tmp/stale.json" ] && fail "the plan of an earlier run is removed when none is written"
err_has "removed '$tmp/stale.json', the plan of an earlier run" "the removal is reported"
# ptplan ... && ptrun plan.json stops at ptplan
"$ptplan" --devices 7 --out "$tmp/stale.json" >/dev/null 2>&1 && fail "ptplan && ptrun would run"
# A file at --out that is not a plan (no created_by of ptplan) is left as it was.
printf '{"format_version": 1, "note": "mine"}\n' >"$tmp/mine.json"
cp "$tmp/mine.json" "$tmp/mine.orig"
run 3 --devices 7 --out "$tmp/mine.json"
cmp -s "$tmp/mine.json" "$tmp/mine.orig" || fail "a file that is not a plan is not touched"
err_has "'$tmp/mine.json' is not a ptplan plan: left untouched" "the file left alone is named"
# --no-out looks at no file; --layout that is invalid or does not fit removes a stale plan.
run 0 --devices 1 --top 1 --out "$tmp/stale.json"
run 3 --devices 7 --no-out --out "$tmp/stale.json"
[ -f "$tmp/stale.json" ] || fail "--no-out leaves --out alone"
err_has "^ptplan: no valid layout" "--no-out: the advice without 'no plan written'"
run 3 --devices 2 --layout "tp=3,dp=1" --out "$tmp/stale.json"
err_has "no plan written: the layout breaks 5 rule(s): world heads_tp" "--layout names its rules"
[ -e "$tmp/stale.json" ] && fail "an invalid --layout removes the stale plan"
run 0 --devices 1 --top 1 --out "$tmp/stale.json"
run 3 --model llama3-70b --cluster dgx-h100 --layout "tp=1,dp=8,zero=0" --out "$tmp/stale.json"
err_has "no plan written: the layout needs [0-9.]* GiB per device" "--layout that does not fit"
[ -e "$tmp/stale.json" ] && fail "a --layout that does not fit removes the stale plan"

# ---- --compare --------------------------------------------------------------------------
# Layouts side by side: a column each with the figures of --layout, and a rejected one
# names its rule; writes no plan.
run 0 --devices 2 --compare "tp=2" "pp=2" "dp=2,mbs=64" "tp=3,dp=1" --out "$tmp/cmp.json"
out_has "^  \[1\] tp=2,pp=1,dp=1,mbs=1$" "the first layout as --layout reads it"
out_has "^  \[2\] tp=1,pp=2,dp=1,mbs=1$" "the second layout"
out_has "^valid  *yes  *yes  *no: batch_dp  *no: 5 rules$" "valid row: one rule named, or the count"
out_has "^\[3\] rejected:" "the rejected layout's rules listed"
out_has "batch_dp .*global batch (64) is not divisible by mbs\*dp = 64\*2" "its rule with values"
out_has "^\[4\] rejected:" "the other rejected layout"
out_has "heads_tp .*attention heads (4) are not divisible by tp (3)" "heads rule with values"
for r in "  weights" "  activations" "  total" "  gemm" "  bubble" "step time, s" "tokens/s" \
         "MFU %" "exposed communication %" "priced from"; do
    out_has "^$r  " "--compare has the row '$r'"
done
[ -e "$tmp/cmp.json" ] && fail "--compare writes no plan"
st=$(awk '/^step time, s/ { print $5, $6, $7 }' "$tmp/out")   # [2], [3], [4]
case "$st" in [0-9]*" - -") ;; *) fail "step times of a valid and two rejected layouts: $st" ;; esac
run 0 --devices 2 --compare "tp=2" "pp=2" --json
python3 - "$tmp/out" "$ptplan" <<'PY' || fail "--compare --json: the figures of --layout --json"
import json, subprocess, sys
d = json.load(open(sys.argv[1]))
assert d["runnable"] == 2, d["runnable"]
for got, text in zip(d["layouts"], ["tp=2", "pp=2"]):
    one = json.loads(subprocess.run([sys.argv[2], "--devices", "2", "--layout", text, "--json",
                                     "--no-out"], capture_output=True, check=True).stdout)
    assert got["predicted"]["step_time_s"] == one["predicted"]["step_time_s"], text
    assert got["memory"] == one["memory"], text
PY
run 3 --devices 2 --compare "tp=3,dp=1" --json
out_has '"reason": "heads_tp"' "--compare --json: the rejected layout's rules"
out_has '"runnable": 0' "--compare --json: none runnable"
err_has "the compared layout cannot run" "--compare: none can run"
run 1 --devices 2 --compare "tp=2" "foo=1"
err_has "--compare: layout 2 'foo=1': .*unknown key 'foo'" "an unreadable layout is named"
one_line_error "--compare with an unreadable layout"
run 1 --devices 2 --compare "tp=2" --timeline "$tmp/t.json"
err_has "--compare writes no timeline" "--compare with --timeline"
run 1 --devices 2 --compare "tp=2" --layout "tp=2"
err_has "choose one" "--compare is a mode of its own"

# ---- ranking ----------------------------------------------------------------------
run 0 --model gpt2-124m --cluster dgx-a100-80g --global-batch 64 --top 5 --out "$tmp/best.json" \
    --timeline "$tmp/best.trace.json"
out_has "layouts enumerated" "enumeration summary"
out_has "heads_tp" "rejection counts by reason"
out_has "^rank  *step s" "ranking table"
out_has "^5 " "--top 5 lists 5 layouts"
grep -q "^6 " "$tmp/out" && fail "--top 5 lists no sixth layout"
out_has "analytic" "provenance column"
out_has "wrote $tmp/best.json" "plan.json written"
grep -q '"format_version": 1' "$tmp/best.json" || fail "plan.json has its format version"
grep -q '"step_time_s"' "$tmp/best.json" || fail "plan.json has the prediction"
grep -q '"traceEvents"' "$tmp/best.trace.json" || fail "--timeline writes a Chrome trace"
ls "$tmp" | grep -q "\.tmp-" && fail "plan.json and the timeline leave no temporary files"
# A full disk (/dev/full): a clear error and exit 1, never "wrote"; the device itself is
# written in place, not replaced by a renamed file.
if [ -c /dev/full ]; then
    run 1 --model tiny --devices 1 --no-out --timeline /dev/full
    err_has "timeline: cannot write '/dev/full': No space left" "timeline on a full disk"
    grep -q "wrote /dev/full" "$tmp/out" && fail "a failed timeline is not reported as written"
    [ -c /dev/full ] || fail "--timeline /dev/full replaced the device"
    run 1 --model tiny --devices 1 --out /dev/full
    err_has "cannot write '/dev/full'" "plan.json on a full disk"
fi
# The best layout's step time is the first row's, and no listed row is faster.
awk '/^[0-9]+ +[0-9.]+ +[0-9]/{print $2}' "$tmp/out" >"$tmp/times"
sort -g -c "$tmp/times" || fail "layouts are listed fastest first"
run 0 --model gpt2-124m --cluster dgx-a100-80g --global-batch 64 --json --top 3 --no-out
out_has '"enumerated"' "counts in enumeration JSON"
out_has '"rejected"' "rejected in enumeration JSON"
[ "$(grep -c '"total_bytes"' "$tmp/out")" -eq 3 ] || fail "--json --top 3 lists 3 layouts"
[ "$(grep -c '"step_time_s"' "$tmp/out")" -eq 3 ] || fail "--json layouts carry predictions"
run 0 --model llama3-70b --cluster dgx-h100 --nodes 2 --global-batch 64 --order tp-dp-cp-pp \
    --top 1 --no-out
out_has "rank order tp-dp-cp-pp" "--order is used"
rm -f "$tmp/plan.json"
run 0   # the built-in default job
out_has "layouts enumerated" "the default job runs"
[ -f "$tmp/plan.json" ] || fail "the default job writes plan.json"

# ---- the shipped profile -----------------------------------------------------------
# With no cost table, dgx-h100's device is priced from the profile the project ships
# (costmodels/profiles/H100-SXM5-80GB.sql), and the header says so and what it was
# measured on; --no-shipped-profile prices everything analytically. Another stack is
# priced from the profile where it runs ptrun's kernels (planner/stack.c), and the
# header says which, the prediction which share of its step was measured, interpolated
# and analytic; a stack that runs none of them is priced analytically.
h1="--model gpt2-124m --cluster dgx-h100 --devices 1 --global-batch 64 --layout tp=1,mbs=64 --no-out"
run 0 $h1
out_has "^costs   the shipped profile of H100-SXM5-80GB (costmodels/profiles/H100-SXM5-80GB.sql)" \
    "the shipped profile is named"
out_has "^        measured 20..-..-.. by .* ptprofile runs; .*driver" "its date and libraries"
out_has "^priced from: \([1-9][0-9]\|100\)% measured, [0-9]*% interpolated, [0-9]% analytic" \
    "priced from the profile"
shipped_step=$(sed -n 's/^predicted step \([0-9.]*\) s.*/\1/p' "$tmp/out")
run 0 $h1 --no-shipped-profile
out_has "^costs   no cost table" "--no-shipped-profile: no table"
out_has "^priced from: 0% measured, 0% interpolated, 100% analytic" "--no-shipped-profile: analytic"
analytic_step=$(sed -n 's/^predicted step \([0-9.]*\) s.*/\1/p' "$tmp/out")
[ -n "$shipped_step" ] && [ "$shipped_step" != "$analytic_step" ] ||
    fail "the profile changes the prediction ($shipped_step against $analytic_step)"
# dgx-h200's device has a profile of its own (H200-SXM5-141GB.sql), with FP8 GEMMs and
# the FP8 run's kernels at this batch
h2="--model gpt2-1.5b --cluster dgx-h200 --devices 1 --global-batch 16 --layout tp=1,mbs=16 --no-out"
run 0 $h2
out_has "^costs   the shipped profile of H200-SXM5-141GB (costmodels/profiles/H200-SXM5-141GB.sql)" \
    "dgx-h200: the H200's profile is named"
out_has "^priced from: 100% measured, 0% interpolated, 0% analytic" "dgx-h200: all measured"
run 0 $h2 --precision fp8
out_has "^priced from: 100% measured, 0% interpolated, 0% analytic" \
    "dgx-h200 in FP8: its FP8 GEMMs and kernels measured"
mc="--model gpt2-1.5b --cluster dgx-h100 --devices 1 --global-batch 16 --stack megatron-core"
run 0 $mc --layout mbs=8 --no-out
out_has "^costs   the shipped profile of H100-SXM5-80GB" "another stack: the profile too"
out_has "^        stack megatron-core: ptrun's kernels priced from the table: GEMMs gemm, .*gemm_dgrad_write and its attention forward; its own kernels analytically" \
    "the header names the kernels of the stack the profile prices"
out_has "^priced from: [1-9][0-9]*% measured, [0-9]*% interpolated, [1-9][0-9]*% analytic" \
    "megatron-core's step at the profiled shapes: measured and analytic shares"
mc_step=$(sed -n 's/^predicted step \([0-9.]*\) s.*/\1/p' "$tmp/out")
run 0 $mc --layout mbs=8 --no-out --no-shipped-profile
out_has "^priced from: 0% measured, 0% interpolated, 100% analytic" "megatron-core analytic"
[ "$mc_step" != "$(sed -n 's/^predicted step \([0-9.]*\) s.*/\1/p' "$tmp/out")" ] ||
    fail "the profile changes megatron-core's prediction"
run 0 --model llama3-8b --cluster dgx-h100 --stack megatron-core --layout tp=8 --no-out
out_has "^priced from: 0% measured, 0% interpolated, 100% analytic" \
    "shapes the profile lacks are analytic for another stack"
run 0 --dump-stack megatron-lm
python3 - "$tmp/out" "$tmp/own.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"], d["ptrun_kernels"] = "own-kernels", {"gemm": [], "attention": []}
json.dump(d, open(sys.argv[2], "w"))
PY
run 0 --model llama3-8b --cluster dgx-h100 --stack "$tmp/own.json" --layout tp=8 --no-out
out_has "^        stack own-kernels runs none of ptrun's kernels" "a stack of its own kernels"
out_has "^priced from: 0% measured, 0% interpolated, 100% analytic" "... is priced analytically"
run 0 $h1 --json
[ "$(python3 -c 'import json,sys; c=json.load(sys.stdin)["cost_table"]; print(c["shipped"], c["about"][:8], c["passed_over"])' <"$tmp/out")" = "True measured None" ] ||
    fail "--json: cost_table says shipped, what it was measured on, and no table passed over"
# A table with no samples of the device is passed over, and the header says so; one
# with samples of it is used.
ptprofile="$(dirname "$ptplan")/ptprofile"
if "$ptprofile" --db "$tmp/cpu.db" --model tiny --quick --no-collectives >/dev/null 2>&1; then
    run 0 $h1 --db "$tmp/cpu.db"
    out_has "^costs   the shipped profile of H100-SXM5-80GB" "a CPU-only table: the profile"
    out_has "(used instead of $tmp/cpu.db, which has no samples of H100-SXM5-80GB)" \
        "the table passed over is named"
    sqlite3 "$tmp/cpu.db" "INSERT INTO kernel_samples(device, op_key, kind, dtype, flops, bytes,
        time_s, source, created_at) VALUES ('H100-SXM5-80GB', 'gemm:bf16:m=65536,n=768,k=768',
        'gemm', 'bf16', 77309411328, 201326592, 1e-4, 'profile', 'x')"
    run 0 $h1 --db "$tmp/cpu.db"
    out_has "^costs   $tmp/cpu.db: " "a table with samples of the device is the one used"
else
    fail "ptprofile made no cost table for the passed-over check"
fi

# ---- process groups ---------------------------------------------------------------
run 0 --groups "tp=2,pp=4,dp=2"
out_has "^tp    groups (8 of 2): \[0,1\] \[2,3\]" "tp groups of the 16-rank example"
out_has "^dp    groups (8 of 2): \[0,2\] \[1,3\] \[4,6\] \[5,7\]" "dp groups"
out_has "^pp    groups (4 of 4): \[0,4,8,12\] \[1,5,9,13\]" "pp groups"
run 0 --groups "tp=2,pp=4,dp=2" --json
out_has '"world": 16' "groups JSON"
! grep -q "^ep " "$tmp/out" || fail "no expert groups without ep or etp"
run 0 --groups "tp=2,sp=1,dp=4,pp=2,ep=4"
out_has "^experts: etp 1 x ep 4 x edp 2" "the experts' grid"
out_has "^ep    groups (4 of 4): \[0,1,2,3\] \[4,5,6,7\] \[8,9,10,11\]" "ep groups fold over tp and dp"
out_has "^edp   groups (8 of 2): \[0,4\] \[1,5\]" "edp groups"

# ---- mixtures of experts ------------------------------------------------------------
# planned under a stack that runs them, refused by one that does not, one message each
run 0 --model tiny-moe --devices 8 --stack megatron-core --global-batch 64 --no-out --top 3
out_has "tiny-moe: .* (.* active: top 2 of 8 experts)" "total and active in the header"
out_has ",ep=[248]" "the search splits the experts"
# ptrun's own stack: experts over ep folded onto dp, within what its runtime trains
run 0 --model tiny-moe --devices 8 --no-out --top 3
out_has ",ep=[248]" "ptrun's search splits the experts"
! grep -q "compress=" "$tmp/out" || fail "no gradient compression for a mixture of experts"
run 0 --model tiny-moe --devices 8 --layout "dp=8,ep=4,etp=2" --no-out
out_has "layout  tp=1,.*ep=4,etp=2" "ptrun's experts split over etp"
run 0 --model tiny-moe --devices 8 --layout "dp=8,ep=2,zero=3" --no-out
out_has "layout  tp=1,.*ep=2,zero=3" "ptrun's experts under ZeRO 3"
run 0 --dump-model tiny-moe
sed 's/"shared_experts": 0/"shared_experts": 1/; s/"shared_ffn": 0/"shared_ffn": 64/' "$tmp/out" \
    >"$tmp/shared.json"
run 1 --model "$tmp/shared.json" --devices 2 --layout "dp=2,ep=2" --no-out
err_has "model tiny-moe: stack 'ptrun' trains experts without shared experts so far" \
    "shared experts refused by ptrun's stack"
run 1 --model tiny --moe-imbalance 1.5 --no-out
err_has "applies to a mixture of experts; model tiny has none" "imbalance on a dense model"
one_line_error "imbalance on a dense model"
run 1 --model tiny-moe --stack megatron-core --moe-imbalance 0.5 --no-out
err_has "moe-imbalance 0.5: expected a number from 1 to 1024" "imbalance below 1"
run 3 --model tiny-moe --devices 8 --stack megatron-core --layout "dp=8,ep=3" --no-out
out_has "experts_ep  *experts (8) are not divisible by ep (3)" "ep not dividing the experts"
err_has "breaks 2 rule(s): ep_fold experts_ep" "its rules named"
run 3 --model tiny --devices 8 --stack megatron-core --layout "dp=8,ep=2" --no-out
out_has "ep_dense  *ep = 2, etp = 1: model tiny has no experts to split" "ep on a dense model"
run 1 --model tiny-moe --devices 8 --stack fsdp --layout "dp=8,ep=2" --no-out
err_has "is a mixture of experts, which stack 'fsdp' does not run" "a stack without MoE"
run 0 --dump-model tiny-moe
sed 's/"top_k": 2/"top_k": 9/' "$tmp/out" >"$tmp/topk.json"
run 1 --model "$tmp/topk.json"
err_has "field 'moe.top_k' = 9: more experts per token than the 8 experts" "top_k > experts"
one_line_error "top_k > experts"

# ---- bad input ---------------------------------------------------------------------
run 1 --model no-such-model
err_has "unknown model 'no-such-model'" "unknown model"; one_line_error "unknown model"
run 1 --cluster no-such-cluster
err_has "no-such-cluster" "unknown cluster"; one_line_error "unknown cluster"
printf '{\n  "name": "x",\n  "layers": 2,,\n}\n' >"$tmp/bad.json"
run 1 --model "$tmp/bad.json"
err_has "bad.json:3:" "malformed JSON reports line"; one_line_error "malformed JSON"
run 0 --dump-model tiny
grep -v '"ffn"' "$tmp/out" >"$tmp/noffn.json"
run 1 --model "$tmp/noffn.json"
err_has "ffn" "missing field named"; one_line_error "missing field"
sed 's/"layers": 4/"layers": 4, "layerz": 4/' "$tmp/tiny.json" >"$tmp/typo.json"
run 1 --model "$tmp/typo.json"
err_has "layerz" "unknown field named"; one_line_error "unknown field"
sed 's/"hidden": 64/"hidden": 0/' "$tmp/tiny.json" >"$tmp/zero.json"
run 1 --model "$tmp/zero.json"
err_has "hidden" "impossible size named"; one_line_error "impossible size"
run 1 --cluster dgx-h100 --layout "tp=2,foo=1"
err_has "unknown key 'foo'" "unknown layout key"; one_line_error "unknown layout key"
run 1 --cluster dgx-h100 --layout "tp=x"
err_has "tp=x" "bad layout value"; one_line_error "bad layout value"
run 1 --cluster dgx-h100 --layout ""
err_has "layout: empty" "empty layout"; one_line_error "empty layout"
run 1 --cluster dgx-h100 --layout "tp= 1,,"
err_has "'tp= 1': write key=value with no blank" "blank in a layout"; one_line_error "blank in a layout"
# four dimensions at their per-key maximum: 2^80 ranks, refused rather than wrapped
run 1 --model tiny --devices 4 --layout "tp=1048576,pp=1048576,cp=1048576,dp=1048576"
err_has "is more than 1073741824 ranks" "a world size beyond the limit"
one_line_error "a world size beyond the limit"
run 1 --cluster dgx-h100 --layout "tp=3"
err_has "does not divide the world size 8" "underivable dp"; one_line_error "underivable dp"
run 1 --nodes 0
err_has "nodes" "zero nodes"; one_line_error "zero nodes"
run 1 --global-batch -5
err_has "global-batch" "negative batch"; one_line_error "negative batch"
run 1 --seq 0
err_has "seq" "zero sequence"; one_line_error "zero sequence"
run 1 --precision fp7
err_has "fp7" "unknown precision"; one_line_error "unknown precision"
run 1 --order tp-dp-pp
err_has "rank order" "bad order"; one_line_error "bad order"
run 1 --mem-fraction 1.5
err_has "mem-fraction" "bad fraction"; one_line_error "bad fraction"
run 1 --bogus
err_has "unknown option '--bogus'" "unknown option"; one_line_error "unknown option"
run 1 --model
err_has "needs a value" "missing value"; one_line_error "missing value"
run 1 --cluster dgx-h100 --layout tp=1 --groups tp=1
err_has "choose one" "two modes"
run 1 --explain --groups tp=1
err_has "--explain goes with --layout or the search" "explain with another mode"
run 1 --dump-model "$tmp/missing.json"
err_has "missing.json" "missing file"; one_line_error "missing file"
run 1 --db "$tmp/missing.db" --top 1
err_has "missing.db" "missing cost table"; one_line_error "missing cost table"
echo "not a database" >"$tmp/garbage.db"
run 1 --db "$tmp/garbage.db" --top 1
err_has "garbage.db" "corrupt cost table"; one_line_error "corrupt cost table"
run 1 --top -1
err_has "top" "negative top"; one_line_error "negative top"
run 1 --lr abc
err_has "lr" "bad learning rate"; one_line_error "bad learning rate"
run 1 --out "$tmp/no/such/dir/plan.json" --model gpt2-124m --cluster dgx-a100-80g --top 1
err_has "no/such/dir" "unwritable plan"
run 0 --help
out_has "usage: ptplan" "help"

# ---- FP8 (--precision fp8, --fp8-recipe, --fp8-emulate) ----------------------------
run 0 --model tiny --cluster dgx-h100 --layout dp=8 --precision fp8 --no-out
out_has "precision bf16+fp8(current)" "an FP8 plan's header names storage and recipe"
out_has "MFU [0-9.]*% (of the bf16 peak)" "an FP8 plan's MFU says which peak"
run 0 --model tiny --cluster dgx-h100 --layout dp=8 --precision fp8 --stack megatron-core \
    --no-out
out_has "precision bf16+fp8(delayed)" "megatron-core's default recipe is delayed"
run 0 --model tiny --precision fp8 --fp8-emulate --fp8-recipe delayed --layout dp=1 \
    --devices 1 --out "$tmp/fp8.json"
out_has "precision fp32+fp8(delayed, emulated)" "the CPU cluster emulates FP8 over fp32"
python3 -c "import json, sys; f = json.load(open(sys.argv[1]))['training']['fp8']; \
assert f == {'recipe': 'delayed', 'amax_history': 1024, 'emulated': True, \
             'param_gather': False}, f" "$tmp/fp8.json" ||
    fail "plan.json's training.fp8"
run 0 --model tiny --layout dp=1 --devices 1 --out "$tmp/bf16.json"
python3 -c "import json, sys; assert 'fp8' not in json.load(open(sys.argv[1]))['training']" \
    "$tmp/bf16.json" || fail "plan.json has no training.fp8 without FP8"
run 1 --model tiny --cluster dgx-a100-80g --precision fp8 --no-out
one_line_error "FP8 on a device without an FP8 peak"
err_has "FP8 on cluster 'dgx-a100-80g': its device A100-SXM4-80GB has no FP8 peak (device.peak_flops.fp8 is 0); ask for emulation (ptplan --fp8-emulate)" \
    "a device without FP8 is named with the field"
run 1 --model tiny --cluster dgx-h100 --precision fp8 --fp8-recipe blockwise --no-out
one_line_error "a recipe the stack lacks"
err_has "FP8 recipe 'blockwise': stack 'ptrun' runs current, delayed" "the recipes it runs"
run 1 --model tiny --cluster dgx-h100 --precision fp8 --stack fsdp --fp8-recipe delayed --no-out
err_has "FP8 recipe 'delayed': stack 'fsdp' runs current, rowwise" "fsdp's recipes"
run 1 --model tiny --cluster dgx-h100 --precision fp8 --fp8-recipe weekly --no-out
one_line_error "an unknown recipe"
err_has "unknown FP8 recipe 'weekly' (expected current, delayed, blockwise or rowwise)" \
    "an unknown recipe is named"
run 1 --model tiny --cluster dgx-h100 --fp8-recipe current --no-out
one_line_error "--fp8-recipe without --precision fp8"
err_has "ptplan: --fp8-recipe goes with --precision fp8 (the precision is bf16)" \
    "--fp8-recipe alone"
run 1 --model tiny --cluster dgx-h100 --precision bf16 --fp8-emulate --no-out
err_has "ptplan: --fp8-emulate goes with --precision fp8 (the precision is bf16)" \
    "--fp8-emulate alone"
run 1 --model tiny --cluster dgx-h100 --precision fp8 --fp8-emulate --no-out
one_line_error "emulation on a device with FP8"
err_has "FP8 emulation is for a device without FP8: cluster 'dgx-h100'" \
    "emulation where FP8 runs is refused"
run 1 --model tiny --cluster dgx-h100 --precision fp8 --stack megatron-lm --no-out
err_has "stack 'megatron-lm' trains no layer in FP8" "a stack without FP8"
# Megatron-Core's FP8 parameter gather: the linear weights held in FP8 (their bf16 copy
# and TE's cached FP8 copy replaced), gathered as one byte each; other stacks refuse it
run 0 --model tiny-llama --cluster dgx-h100 --layout dp=8,zero=1 --precision fp8 \
    --stack megatron-core --json --no-out
w16=$(python3 -c "import json, sys; print(json.load(sys.stdin)['memory']['weights_bytes'])" <"$tmp/out")
run 0 --model tiny-llama --cluster dgx-h100 --layout dp=8,zero=1 --precision fp8 \
    --stack megatron-core --fp8-param-gather --json --no-out
w8=$(python3 -c "import json, sys; print(json.load(sys.stdin)['memory']['weights_bytes'])" <"$tmp/out")
python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); assert 0 < b < a, (a, b)" \
    "$w16" "$w8" || fail "FP8 parameter gather holds less weight memory ($w16 -> $w8)"
run 1 --model tiny --cluster dgx-h100 --precision fp8 --fp8-param-gather --no-out
one_line_error "FP8 parameter gather on ptrun"
err_has "FP8 parameter gather: stack 'ptrun' gathers its weights in bf16" "ptrun refuses it"
run 1 --model tiny --cluster dgx-h100 --fp8-param-gather --no-out
err_has "ptplan: --fp8-param-gather goes with --precision fp8" "--fp8-param-gather alone"
run 1 --model tiny --precision fp9 --no-out
err_has "unknown precision 'fp9' (expected bf16, bf16-grad16, fp32 or fp8)" "fp8 is listed"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all ptplan command-line checks passed"
