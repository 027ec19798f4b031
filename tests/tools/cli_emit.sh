#!/bin/sh
# ptplan --emit: the plan as Megatron-LM arguments, NeMo overrides, a torchtitan TOML file
# and plan.json. Every flag, key and attribute emitted must be one of the names in
# tests/tools/emit_names/ (read from each framework's source, cited there), with the
# values the layout asks for; stdout holds the configuration alone; what a framework
# cannot run is refused (exit 3, the reason on stderr, nothing on stdout); bad uses of
# --emit are refused (exit 1).
#   usage: cli_emit.sh PATH/TO/ptplan
set -u
case "$1" in /*) ptplan="$1" ;; *) ptplan="$(pwd)/$1" ;; esac
names=$(cd "$(dirname "$0")" && pwd)/emit_names
. "$(dirname "$0")/cli_lib.sh"
# No user's cost table leaks in; plan.json lands in the scratch folder.
export PT_COSTS_DB="$tmp/no-such-costs.db"
cd "$tmp" || exit 1
command -v python3 >/dev/null || { echo "FAIL: cli_emit reads the output with python3"; exit 1; }

err_lacks() { ! grep -q -- "$1" "$tmp/err" || fail "stderr has '$1' ($2)"; }
out_line() { grep -qx -- "$1" "$tmp/out" || fail "stdout lacks the line '$1' ($2)"; }
out_lacks() { ! grep -q -- "$1" "$tmp/out" || fail "stdout has '$1' ($2)"; }
# refused FORMAT TEXT WHAT ARGS...: --emit FORMAT exits 3 with TEXT on stderr, no stdout.
refused() {
    fmt=$1 text=$2 what=$3; shift 3
    plan 3 "$@" --emit "$fmt" --no-out
    err_has "ptplan: --emit $fmt: .*$text" "$what"
    [ ! -s "$tmp/out" ] || fail "stdout not empty when --emit $fmt refuses ($what)"
}

# check FORMAT WHAT: stdout in that format, every name in emit_names/FORMAT.txt, and the
# words of flags with fixed choices listed beside them; prints one line per mistake.
cat >"$tmp/check.py" <<'PY'
import re, sys, tomllib
fmt, out_path, names_path = sys.argv[1:4]
names = {l.strip() for l in open(names_path) if l.strip() and not l.startswith("#")}
text = open(out_path).read()
bad = []
number = re.compile(r"-?[0-9][0-9.]*([eE][-+]?[0-9]+)?$")
def word(name, value, sep):
    if name + sep + "*" in names: # a flag that takes any text
        return
    if not number.match(value) and value not in ("True", "False", "None") \
            and name + sep + value not in names:
        bad.append("value %r of %s is not listed" % (value, name))
if fmt == "megatron":
    lines = text.splitlines()
    if not lines:
        bad.append("no arguments")
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        if line.endswith(" \\") == last:
            bad.append("line %d %s a ' \\' continuation: %r"
                       % (i + 1, "has" if last else "lacks", line))
        parts = line.removesuffix(" \\").split(" ")
        if len(parts) > 2 and parts[0] + " N..." in names: # a flag of several numbers
            parts[1:] = [p for p in parts[1:] if not number.match(p)] or [parts[1]]
        if len(parts) > 2 and parts[0] + " WORD..." in names: # several of its words
            for w in parts[2:]:
                word(parts[0], w, " ")
            parts = parts[:2]
        if not parts[0].startswith("--") or len(parts) > 2:
            bad.append("not one argument: %r" % line)
        elif parts[0] not in names:
            bad.append("unknown flag %s" % parts[0])
        elif len(parts) == 2:
            word(parts[0], parts[1], " ")
elif fmt == "nemo":
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if not eq or key not in names:
            bad.append("unknown override %r" % line)
        else:
            word(key, value, "=")
else:
    def keys(prefix, table): # nested tables ([quantize.linear.float8]) flattened
        for key, value in table.items():
            if isinstance(value, dict):
                yield from keys(prefix + key + ".", value)
            else:
                yield prefix + key, value
    for sec, table in tomllib.loads(text).items():
        for name, value in keys(sec + ".", table):
            if name not in names:
                bad.append("unknown key %s" % name)
            elif isinstance(value, str):
                word(name, value, " ")
for b in bad:
    print(b)
PY
check() {
    python3 "$tmp/check.py" "$1" "$tmp/out" "$names/$1.txt" >"$tmp/bad" 2>&1 ||
        echo "the output does not parse as $1" >>"$tmp/bad"
    while IFS= read -r line; do fail "--emit $1 ($2): $line"; done <"$tmp/bad"
}
# arg FLAG_AND_VALUE WHAT: a Megatron argument line (its " \" left off).
arg() { sed 's/ \\$//' "$tmp/out" | grep -qx -- "$1" || fail "--emit megatron lacks '$1' ($2)"; }
# recipe_listed: the recipe the NeMo note names is one of nemo.txt's.
recipe_listed() {
    r=$(sed -n 's/.*nemo llm pretrain --factory \([a-z0-9_]*\).*/\1/p' "$tmp/err")
    grep -qx "recipe $r" "$names/nemo.txt" || fail "--emit nemo names recipe '$r', not in nemo.txt"
}
no_arg() { ! sed 's/ \\$//' "$tmp/out" | grep -q -- "^$1" || fail "--emit megatron has '$1' ($2)"; }
# toml PYTHON_EXPR WHAT: an assertion on the torchtitan output, loaded as `t`.
toml() {
    python3 -c "import sys, tomllib; t = tomllib.load(open(sys.argv[1], 'rb')); assert $1, t" \
        "$tmp/out" 2>/dev/null || fail "--emit torchtitan: not $1 ($2)"
}

# ---- the names lists themselves ----------------------------------------------------
for f in megatron nemo torchtitan; do
    grep -q '^# commit: [0-9a-f]\{40\}' "$names/$f.txt" || fail "$f.txt names no commit"
    grep -q '^# repo: ' "$names/$f.txt" || fail "$f.txt names no repository"
done

# ---- tiny on the local cluster (stack ptrun, fp32) ----------------------------------
plan 0 --emit megatron --no-out
check megatron "tiny"
arg "--num-layers 4" "the model's layers"
arg "--normalization LayerNorm" "GPT-2's norm"
arg "--position-embedding-type learned_absolute" "GPT-2's positions"
no_arg "--swiglu" "GELU model"
no_arg "--untie-embeddings-and-output-weights" "tied model"
no_arg "--bf16" "fp32 run"
arg "--global-batch-size 64" "the batch"
err_has "ptplan: --emit megatron: layout tp=1,.*predicted .* s per step" "the summary line"
err_has "the prediction is for stack ptrun" "the stack note"
# the search's plan, the same one --out writes
plan 0 --out "$tmp/tiny.json"
best=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['layout']['string'])" \
       "$tmp/tiny.json")
plan 0 --emit megatron --no-out
err_has "layout $best," "--emit names the plan's layout"
plan 0 --layout "tp=2,sp=1" --emit megatron --no-out
check megatron "tp=2"
arg "--tensor-model-parallel-size 2" "tp=2"
arg "--sequence-parallel" "sp=1"
no_arg "--use-distributed-optimizer" "zero=0"
plan 0 --layout "zero=3,recompute=full" --emit megatron --no-out
check megatron "zero=3"
arg "--use-megatron-fsdp" "zero=3 runs as Megatron-FSDP"
arg "--data-parallel-sharding-strategy optim_grads_params" "zero=3"
arg "--ckpt-format fsdp_dtensor" "Megatron-FSDP's checkpoint format"
arg "--overlap-param-gather" "zero=3 gathers ahead"
arg "--recompute-granularity full" "recompute=full"
arg "--recompute-method uniform" "recompute=full"
arg "--recompute-num-layers 1" "recompute=full"
plan 0 --layout "zero=2,recompute=selective" --emit megatron --no-out
arg "--data-parallel-sharding-strategy optim_grads" "zero=2"
arg "--recompute-granularity selective" "recompute=selective"
no_arg "--recompute-method" "selective takes no method"
refused torchtitan "recompute=layernorm+mlp: a list of modules is Megatron-Core's --recompute-modules" \
    "torchtitan names no modules" --model tiny-llama --stack megatron-core --devices 1 --layout "recompute=mlp+layernorm"
plan 0 --layout "pp=2,vp=2" --emit megatron --no-out
check megatron "vp=2"
arg "--num-virtual-stages-per-pipeline-rank 2" "vp=2"
plan 0 --layout "pp=2,first_layers=1" --emit megatron --no-out
arg "--decoder-first-pipeline-num-layers 1" "uneven stages"
no_arg "--decoder-last-pipeline-num-layers" "the last stage left to the rule"

# FP8: Megatron-LM's flags and NeMo's plugin arguments for Megatron-Core's recipes, the
# FP8 parameter gather among them; torchtitan's float8 converter
h100="--model tiny-llama --cluster dgx-h100 --devices 8 --layout dp=8,zero=1 --precision fp8"
plan 0 $h100 --stack megatron-core --fp8-param-gather --emit megatron --no-out
check megatron "fp8 delayed"
arg "--fp8-format hybrid" "E4M3 forward, E5M2 gradients"
arg "--fp8-recipe delayed" "megatron-core's default recipe"
arg "--fp8-amax-history-len 1024" "TE's history, not Megatron's default of 1"
arg "--fp8-amax-compute-algo max" "TE's algorithm"
arg "--fp8-param-gather" "FP8 weights gathered"
plan 0 $h100 --stack megatron-core --fp8-recipe current --emit megatron --no-out
arg "--fp8-recipe tensorwise" "current scaling is Megatron's tensorwise"
no_arg "--fp8-amax-history-len" "no history without delayed scaling"
no_arg "--fp8-param-gather" "weights gathered in bf16 unless asked"
plan 0 $h100 --stack megatron-core --fp8-param-gather --emit nemo --no-out
check nemo "fp8 delayed"
out_line "trainer.plugins.fp8=hybrid" "NeMo's FP8 format"
out_line "trainer.plugins.fp8_recipe=delayed" "NeMo's recipe"
out_line "trainer.plugins.fp8_amax_history_len=1024" "NeMo's history"
out_line "trainer.plugins.fp8_param_gather=true" "NeMo's FP8 parameter gather"
plan 0 --model tiny-llama --cluster dgx-h100 --devices 8 --layout dp=8,zero=3 --precision fp8 \
    --stack fsdp --emit torchtitan --no-out
check torchtitan "fp8 tensorwise"
toml "t['model']['converters'] == ['quantize.linear.float8']" "torchao's Float8Linear"
toml "t['quantize']['linear']['float8']['recipe_name'] == 'tensorwise'" "current is tensorwise"
toml "t['quantize']['linear']['float8']['filter_fqns'] == ['output']" "the head stays bf16"

# nemo refuses fp32; tiny-llama in bf16 runs
refused nemo "precision fp32" "NeMo trains bf16"
plan 0 --model tiny-llama --precision bf16 --emit nemo --no-out
check nemo "tiny-llama"
out_line "trainer.num_nodes=1" "one node"
out_line "model.config.normalization=RMSNorm" "Llama's norm"
out_line "model.config.gated_linear_unit=True" "SwiGLU"
out_line "trainer.strategy.virtual_pipeline_model_parallel_size=None" "vp=1 unsets the recipe's"
err_has "nemo llm pretrain --factory llama3_8b" "a Llama recipe for a Llama-shaped model"
recipe_listed
plan 0 --model gpt2-124m --cluster dgx-h100 --sim-top 20 --emit nemo --no-out
check nemo "gpt2-124m"
out_line "model.config.gated_linear_unit=False" "GELU"
out_line "model.config.share_embeddings_and_output_weights=True" "GPT-2's tied head"
err_has "nemo llm pretrain --factory gpt3_175b" "a GELU recipe for a model without one"
recipe_listed
plan 0 --model tiny-llama --precision bf16-grad16 --layout "zero=1" --emit nemo --no-out
check nemo "bf16-grad16"
out_line "trainer.plugins.grad_reduce_in_fp32=False" "bf16 gradients"
out_line "trainer.strategy.ddp.grad_reduce_in_fp32=False" "bf16 gradients"
out_line "optim.config.use_distributed_optimizer=True" "zero=1"
plan 0 --model tiny-llama --precision bf16-grad16 --layout "zero=1" --emit megatron --no-out
arg "--grad-reduce-in-bf16" "bf16 gradients"
arg "--bf16" "bf16"

# torchtitan runs llama3 only; tiny-llama is one without a flavor
refused torchtitan "model 'tiny' has LayerNorm, GELU" "GPT-2-shaped model"
plan 0 --model tiny-llama --layout "zero=3,recompute=selective" --emit torchtitan --no-out
check torchtitan "tiny-llama zero=3"
toml "t['parallelism']['data_parallel_shard_degree'] == 2" "zero=3 shards over dp"
toml "t['parallelism']['data_parallel_replicate_degree'] == 1" "zero=3"
toml "t['parallelism']['fsdp_reshard_after_forward'] == 'always'" "zero=3 reshards"
toml "t['activation_checkpoint'] == {'mode': 'selective', 'selective_ac_option': 'op'}" \
     "per-op selective recomputation"
toml "t['training']['mixed_precision_param'] == 'float32'" "fp32"
toml "'flavor' not in t['model']" "no flavor of tiny-llama's shape"
err_has "matches no llama3 flavor" "the flavor note"
plan 0 --model tiny-llama --layout "zero=2" --emit torchtitan --no-out
toml "t['parallelism']['fsdp_reshard_after_forward'] == 'never'" "zero=2 keeps the gathered weights"
plan 0 --model tiny-llama --layout "zero=0" --emit torchtitan --no-out
toml "t['parallelism']['data_parallel_replicate_degree'] == 2" "zero=0 is DDP"
toml "t['parallelism']['data_parallel_shard_degree'] == 1" "zero=0 is DDP"
plan 0 --model tiny-llama --layout "pp=2,schedule=afab" --emit torchtitan --no-out
check torchtitan "afab"
toml "t['parallelism']['pipeline_parallel_schedule'] == 'GPipe'" "afab is GPipe"
toml "t['parallelism']['pipeline_parallel_layers_per_stage'] == 2" "4 layers over 2 stages"
toml "t['parallelism']['pipeline_parallel_first_stage_less_layers'] == 0" "an even split"
refused torchtitan "zero=1" "no optimizer-only sharding" --model tiny-llama --layout "zero=1"
refused torchtitan "DDP runs alone" "DDP with tp" --model tiny-llama --devices 4 \
    --layout "tp=2,sp=1,zero=0"
refused torchtitan "sp=0 with tp=2" "TP is sequence-parallel" --model tiny-llama \
    --devices 4 --layout "tp=2,zero=3"
refused torchtitan "shards the parameters over the context" "cp without FSDP" \
    --model tiny-llama --layout "cp=2,zero=0"
refused torchtitan "precision bf16-grad16" "fp32 reductions only" --model tiny-llama \
    --precision bf16-grad16 --layout "zero=3"

# refusals every framework shares
refused megatron "compress=bf16" "no gradient compression" --layout "zero=1,compress=bf16"
refused nemo "compress=bf16" "no gradient compression" --layout "zero=1,compress=bf16"
refused torchtitan "compress=bf16" "no gradient compression" --model tiny-llama \
    --layout "zero=0,compress=bf16"
refused megatron "schedule=afab with pp=2" "no GPipe in Megatron" --layout "pp=2,schedule=afab"
plan 0 --dump-model tiny
sed 's/"learned"/"alibi"/' "$tmp/out" >"$tmp/alibi.json"
grep -q '"alibi"' "$tmp/alibi.json" || fail "no ALiBi model made from tiny"
refused megatron "ALiBi" "Megatron has no ALiBi" --model "$tmp/alibi.json"

# ---- Llama 3 70B on 8 DGX H100, as Megatron-Core runs it ----------------------------
big="--model llama3-70b --cluster dgx-h100 --nodes 8 --seq 8192 --global-batch 1024 --stack megatron-core"
l70="tp=4,sp=1,pp=4,vp=10,cp=2,zero=1,tp_overlap=1"
# shellcheck disable=SC2086 # $big: the options, one word each
plan 0 $big --layout "$l70" --emit megatron --no-out
check megatron "70B --layout"
arg "--tensor-model-parallel-size 4" "tp=4"
arg "--pipeline-model-parallel-size 4" "pp=4"
arg "--num-virtual-stages-per-pipeline-rank 10" "vp=10"
arg "--context-parallel-size 2" "cp=2"
arg "--sequence-parallel" "sp=1"
arg "--tp-comm-overlap" "tp_overlap=1"
arg "--use-distributed-optimizer" "zero=1"
no_arg "--use-megatron-fsdp" "zero=1 is the distributed optimizer"
arg "--overlap-grad-reduce" "megatron-core's dp_overlap=last"
arg "--overlap-param-gather" "megatron-core's param_overlap"
arg "--micro-batch-size 1" "mbs=1"
arg "--global-batch-size 1024" "the batch"
arg "--seq-length 8192" "the sequence"
arg "--num-layers 80" "Llama 3 70B"
arg "--hidden-size 8192" "Llama 3 70B"
arg "--ffn-hidden-size 28672" "Llama 3 70B"
arg "--num-attention-heads 64" "Llama 3 70B"
arg "--group-query-attention" "GQA"
arg "--num-query-groups 8" "8 KV heads"
arg "--position-embedding-type rope" "RoPE"
arg "--normalization RMSNorm" "RMSNorm"
arg "--swiglu" "SwiGLU"
arg "--disable-bias-linear" "no biases"
arg "--untie-embeddings-and-output-weights" "untied head"
arg "--bf16" "bf16"
arg "--train-iters 50" "--steps"
arg "--seed 1234" "--seed"
no_arg "--use-tp-pp-dp-mapping" "the default order"
err_has "layout tp=4,sp=1,pp=4,vp=10,cp=2,dp=2,zero=1" "the summary names the layout"
err_lacks "the prediction is for stack" "priced as Megatron-Core runs it"
plan 0 $big --layout "$l70" --order tp-cp-pp-dp --emit megatron --no-out
arg "--use-tp-pp-dp-mapping" "order tp-cp-pp-dp"
refused megatron "order=cp-tp-dp-pp" "an order Megatron lacks" $big --layout "$l70" \
    --order cp-tp-dp-pp
plan 0 $big --layout "tp=4,sp=1,pp=4,vp=10,cp=2,zero=1,dp_overlap=none" --emit megatron --no-out
no_arg "--overlap-grad-reduce" "dp_overlap=none"
no_arg "--overlap-param-gather" "Megatron gathers ahead only with --overlap-grad-reduce"
err_has "param_overlap=1 with dp_overlap=none" "the note says so"
plan 0 $big --layout "tp=8,sp=1,pp=8,first_layers=7,last_layers=7" --emit megatron --no-out
arg "--decoder-first-pipeline-num-layers 7" "first_layers=7"
arg "--decoder-last-pipeline-num-layers 7" "last_layers=7"

plan 0 $big --layout "$l70" --emit nemo --no-out
check nemo "70B --layout"
out_line "trainer.num_nodes=8" "8 nodes"
out_line "trainer.devices=8" "8 GPUs a node"
out_line "trainer.strategy.tensor_model_parallel_size=4" "tp=4"
out_line "trainer.strategy.pipeline_model_parallel_size=4" "pp=4"
out_line "trainer.strategy.virtual_pipeline_model_parallel_size=10" "vp=10"
out_line "trainer.strategy.context_parallel_size=2" "cp=2"
out_line "trainer.strategy.sequence_parallel=True" "sp=1"
out_line "trainer.strategy.ddp.overlap_grad_reduce=True" "dp_overlap=last"
out_line "optim.config.use_distributed_optimizer=True" "zero=1"
out_line "data.micro_batch_size=1" "mbs=1"
out_line "data.global_batch_size=1024" "the batch"
out_line "data.seq_length=8192" "the sequence"
out_line "model.config.num_query_groups=8" "GQA"
err_has "nemo llm pretrain --factory llama3_70b" "the model's recipe"
recipe_listed
err_has "MegatronCommOverlapCallback" "tp_overlap is a callback"
plan 0 $big --layout "tp=8,sp=1,pp=8,first_layers=7,last_layers=7" --emit nemo --no-out
out_line "trainer.strategy.num_layers_in_first_pipeline_stage=7" "first_layers=7"
out_line "trainer.strategy.num_layers_in_last_pipeline_stage=7" "last_layers=7"
# How cp communicates: --cp-comm-type (p2p, the default, left out) and a2a+p2p's group
# sizes; NeMo's model config takes the kind but builds no hierarchical groups; Transformer
# Engine replicates no KV heads (Llama 3 70B's 8 over tp=8 leave 1 a rank).
plan 0 $big --layout "tp=4,sp=1,pp=4,cp=2,cp_comm=a2a,zero=1" --emit megatron --no-out
check megatron "cp_comm=a2a"
arg "--cp-comm-type a2a" "cp_comm=a2a"
no_arg "--hierarchical-context-parallel-sizes" "a2a has no groups"
plan 0 $big --layout "tp=2,sp=1,pp=4,cp=8,cp_comm=a2a+p2p,cp_a2a=4,zero=1" --emit megatron --no-out
check megatron "cp_comm=a2a+p2p"
arg "--cp-comm-type a2a+p2p" "cp_comm=a2a+p2p"
arg "--hierarchical-context-parallel-sizes 4 2" "the all-to-all's groups first, then the ring's"
plan 0 $big --layout "tp=4,sp=1,pp=4,cp=2,cp_comm=all_gather,zero=1" --emit megatron --no-out
arg "--cp-comm-type all_gather" "cp_comm=all_gather"
plan 0 $big --layout "tp=4,sp=1,pp=4,cp=2,zero=1" --emit megatron --no-out
no_arg "--cp-comm-type" "p2p is Megatron's default"
plan 0 $big --layout "tp=4,sp=1,pp=4,cp=2,cp_comm=all_gather,zero=1" --emit nemo --no-out
check nemo "cp_comm=all_gather"
out_line "model.config.cp_comm_type=all_gather" "NeMo's cp_comm_type"
refused nemo "cp_comm=a2a+p2p: NeMo builds Megatron-Core's process groups without" \
    "NeMo has no hierarchical cp groups" $big --layout "tp=2,sp=1,pp=4,cp=8,cp_comm=a2a+p2p,cp_a2a=4,zero=1"
refused torchtitan "cp_comm=a2a: torchtitan's context parallelism is ring attention" \
    "torchtitan has no all-to-all over heads" $big --stack ptrun --layout "tp=4,sp=1,cp=2,cp_comm=a2a,zero=3"
# a layout ptrun runs (it replicates KV heads), emitted for Megatron-LM: refused there
refused megatron "cp_comm=a2a: Transformer Engine's all-to-all needs the KV heads per tp rank (1) divisible by its degree 2" \
    "TE replicates no KV heads" $big --stack ptrun --layout "tp=8,sp=1,pp=2,cp=2,cp_comm=a2a,zero=1,recompute=full"

refused torchtitan "zero=1" "no optimizer-only sharding" $big --layout "$l70"
# A mixture of experts for Megatron-LM: the experts, the router, q/k norms and head_dim,
# the experts' split and dispatcher; NeMo and torchtitan refuse it
moe="--model qwen3-235b-a22b --cluster dgx-h100 --nodes 32 --stack megatron-core --global-batch 2048"
plan 0 $moe --layout "tp=2,sp=1,pp=8,dp=16,ep=32,moe_dispatch=flex,zero=1,recompute=full,first_layers=11,last_layers=11" \
    --emit megatron --no-out
check megatron "qwen3-235b ep=32"
arg "--num-experts 128" "the experts"
arg "--moe-router-topk 8" "top-k"
arg "--moe-ffn-hidden-size 1536" "the experts' FFN"
arg "--kv-channels 128" "head_dim apart from hidden/heads"
arg "--qk-layernorm" "q/k norms"
arg "--expert-model-parallel-size 32" "ep"
arg "--expert-tensor-parallel-size 1" "etp written (Megatron's default is tp)"
arg "--moe-token-dispatcher-type flex" "DeepEP"
arg "--moe-flex-dispatcher-backend deepep" "its backend"
no_arg "--moe-layer-freq" "every layer an MoE layer is the default"
# the model zoo's recompute modules, in Megatron-Core's words
plan 0 $moe --layout "tp=2,sp=1,pp=8,dp=16,ep=32,moe_dispatch=flex,zero=1,recompute=layernorm+moe_act,first_layers=11,last_layers=11" \
    --emit megatron --no-out
check megatron "qwen3-235b recompute modules"
arg "--recompute-granularity selective" "a list of modules is selective"
arg "--recompute-modules layernorm moe_act" "the modules"
refused nemo "model 'qwen3-235b-a22b' is a mixture of experts" "NeMo's MoE recipes not written" \
    $moe --layout "tp=2,sp=1,pp=8,dp=16,ep=32,zero=1,recompute=full,first_layers=11,last_layers=11"
plan 0 $big --layout "tp=8,sp=1,pp=8" --emit torchtitan --no-out
check torchtitan "70B tp=8 pp=8"
toml "t['model'] == {'name': 'llama3', 'flavor': '70B'}" "Llama 3 70B is the 70B flavor"
toml "t['parallelism']['tensor_parallel_degree'] == 8" "tp=8"
toml "t['parallelism']['pipeline_parallel_degree'] == 8" "pp=8"
toml "t['parallelism']['pipeline_parallel_schedule'] == '1F1B'" "1f1b"
toml "t['parallelism']['pipeline_parallel_layers_per_stage'] == 10" "80 layers over 8 stages"
toml "t['training']['local_batch_size'] == 1024" "1024 micro-batches through the pipeline"
toml "t['training']['seq_len'] == 8192" "the sequence"
toml "t['training']['mixed_precision_param'] == 'bfloat16'" "bf16"
err_has "stack fsdp, the nearest to torchtitan, would not run it" "fsdp runs no tp"
plan 0 $big --layout "tp=8,sp=1,pp=8,vp=2" --emit torchtitan --no-out
toml "t['parallelism']['pipeline_parallel_schedule'] == 'Interleaved1F1B'" "interleaved"
toml "t['parallelism']['pipeline_parallel_layers_per_stage'] == 5" "80 layers over 16 stages"
plan 0 $big --layout "tp=8,sp=1,pp=8,tp_overlap=1" --emit torchtitan --no-out
check torchtitan "async TP"
toml "t['parallelism']['enable_async_tensor_parallel'] is True" "tp_overlap is async TP"
toml "t['compile']['enable'] is True" "async TP needs torch.compile"
plan 0 $big --layout "tp=8,sp=1,pp=8,first_layers=7,last_layers=7" --emit torchtitan --no-out
check torchtitan "uneven stages"
toml "[len([m for m in p if m.startswith('layers.')]) for p in t['parallelism']['module_fqns_per_model_part']] == [7] + [11] * 6 + [7]" \
     "7, 11 x 6, 7 layers"
toml "sum(t['parallelism']['module_fqns_per_model_part'], []) == ['tok_embeddings'] + ['layers.%d' % i for i in range(80)] + ['norm', 'output']" \
     "every module once, in order"

# A pipeline layout (Megatron-Core's notation): Megatron reads it as given and derives
# vp from it, NeMo as a strategy argument, torchtitan as the modules of each stage.
pipe="Et*4|(t*5|)*14t*6L" # 80 layers on 16 virtual stages: pp=8, vp=2
plan 0 $big --layout "tp=4,sp=1,pp=8,zero=1,recompute=full" --pipeline-layout "$pipe" --emit megatron --no-out
check megatron "pipeline layout"
sed 's/ \\$//' "$tmp/out" | grep -qxF -- "--pipeline-model-parallel-layout \"$pipe\"" ||
    fail "--emit megatron lacks the pipeline layout as Megatron-Core reads it"
no_arg "--num-virtual-stages-per-pipeline-rank" "arguments.py refuses vp beside a layout"
arg "--pipeline-model-parallel-size 8" "pp=8"
plan 0 $big --layout "tp=4,sp=1,pp=8,zero=1,recompute=full" --pipeline-layout "$pipe" --emit nemo --no-out
check nemo "pipeline layout"
grep -qxF -- "trainer.strategy.pipeline_model_parallel_layout=\"$pipe\"" "$tmp/out" ||
    fail "--emit nemo lacks the pipeline layout as NeMo takes it"
out_line "trainer.strategy.virtual_pipeline_model_parallel_size=2" "vp=2 from 16 stages"
plan 0 $big --layout "tp=8,sp=1,pp=8" --pipeline-layout "$pipe" --emit torchtitan --no-out
check torchtitan "pipeline layout"
toml "[len([m for m in p if m.startswith('layers.')]) for p in t['parallelism']['module_fqns_per_model_part']] == [4] + [5] * 14 + [6]" \
     "4, 5 x 14, 6 layers"
toml "t['parallelism']['module_fqns_per_model_part'][0][0] == 'tok_embeddings' and t['parallelism']['module_fqns_per_model_part'][-1][-2:] == ['norm', 'output']" \
     "the embedding opens the first stage, the head closes the last"
toml "t['parallelism']['pipeline_parallel_schedule'] == 'Interleaved1F1B'" "vp=2 from 16 stages"
# the search, kept short
plan 0 $big --sim-top 50 --emit megatron --no-out
check megatron "70B search"
cp "$tmp/err" "$tmp/search.err"
cp "$tmp/out" "$tmp/search.out"
plan 0 $big --sim-top 50 --out "$tmp/70b.json"
python3 - "$tmp/70b.json" "$tmp/search.out" "$tmp/search.err" <<'PY' || fail "--emit megatron of the search is not the plan's layout"
import json, sys
l = json.load(open(sys.argv[1]))["layout"]
args = open(sys.argv[2]).read().replace(" \\\n", "\n").splitlines()
want = ["--tensor-model-parallel-size %d" % l["tp"], "--pipeline-model-parallel-size %d" % l["pp"],
        "--context-parallel-size %d" % l["cp"], "--micro-batch-size %d" % l["mbs"]]
if l["vp"] > 1:
    want.append("--num-virtual-stages-per-pipeline-rank %d" % l["vp"])
missing = [w for w in want if w not in args]
assert not missing, missing
assert "layout " + l["string"] + "," in open(sys.argv[3]).read()
PY
plan 0 $big --sim-top 50 --emit nemo --no-out
check nemo "70B search"

# ---- ptrun: plan.json --------------------------------------------------------------
plan 0 --emit ptrun --no-out
cp "$tmp/out" "$tmp/emitted.json"
python3 - "$tmp/emitted.json" "$tmp/tiny.json" <<'PY' || fail "--emit ptrun is not the plan --out writes"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a == b, "differ"
PY
# with --out, the plan there and the same on stdout, and nothing else on stdout
plan 0 --emit ptrun --out "$tmp/both.json"
python3 - "$tmp/out" "$tmp/both.json" <<'PY' || fail "--emit ptrun --out: stdout is not the plan written"
import json, sys
assert json.load(open(sys.argv[1])) == json.load(open(sys.argv[2]))
PY
plan 0 --emit megatron --out "$tmp/m.json" --timeline "$tmp/m-trace.json"
[ -s "$tmp/m.json" ] || fail "--emit with --out writes no plan"
out_lacks "^wrote" "--emit keeps the configuration alone on stdout"

# ---- bad uses ------------------------------------------------------------------------
plan 1 --emit foo
err_has "--emit foo: expected megatron, nemo, torchtitan or ptrun" "unknown format"
[ ! -s "$tmp/out" ] || fail "stdout not empty for --emit foo"
plan 1 --emit megatron --json
err_has "not with --json" "--emit and --json"
[ ! -s "$tmp/out" ] || fail "stdout not empty for --emit with --json"
plan 3 --devices 6 --layout "tp=3" --emit megatron --no-out
err_has "heads_tp" "an invalid layout names its rules"
[ ! -s "$tmp/out" ] || fail "stdout not empty for an invalid --layout"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all ptplan --emit checks passed"
