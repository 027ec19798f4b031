#!/bin/sh
# ptconvert end to end, on checkpoints ptrun writes: tiny (GPT-2 shaped) and tiny-llama
# (grouped-query attention, RoPE, untied head) trained a few steps, converted to Hugging
# Face directories, and started from with ptrun --init-from: the losses of a run from
# the f32 export are those of a run from the checkpoint itself, to the bit (every tensor
# came back through the name, transpose and RoPE maps unchanged); a bf16 export is half
# the size and trains to nearly the same loss. The --checkpoint folder itself (newest
# step) is read like its step folder; refusals leave nothing behind.
# (tests/runtime/test_hf.c checks every element of both maps and each refusal's message.)
#   usage: cli_ptconvert.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"
train() { "$build/ptrun" "$@" --quiet --sample 0 --val-every 0; }

for model in tiny tiny-llama; do
    run 0 "$build/ptplan" --model "$model" --devices 1 --out "$model.json" --steps 3
    run 0 train "$model.json" --checkpoint "ck-$model"
    step=$(ls -d "ck-$model"/step_* | tail -1)
    [ -d "$step" ] || { fail "$model: ptrun wrote no step folder"; continue; }

    # the --checkpoint folder and its newest step folder give the same directory
    run 0 "$build/ptconvert" "ck-$model" "hf-$model"
    out_has "step 3 of model '$model'" "$model: the step and model are reported"
    run 0 "$build/ptconvert" "$step" "hf2-$model"
    cmp -s "hf-$model/model.safetensors" "hf2-$model/model.safetensors" ||
        fail "$model: the checkpoint folder and its step folder convert differently"
    grep -q '"vocab_size": 256' "hf-$model/config.json" || fail "$model: vocab_size in config.json"
    [ "$(ls "hf-$model")" = "config.json
model.safetensors" ] || fail "$model: the export holds $(ls "hf-$model")"

    # a run from the export is a run from the checkpoint, loss for loss
    run 0 train "$model.json" --steps 2 --init-from "$step" --log "from-ck-$model.jsonl"
    run 0 train "$model.json" --steps 2 --init-from "hf-$model" --log "from-hf-$model.jsonl"
    [ -n "$(losses "from-ck-$model.jsonl")" ] || fail "$model: no losses logged"
    [ "$(losses "from-ck-$model.jsonl")" = "$(losses "from-hf-$model.jsonl")" ] ||
        fail "$model: losses from the f32 export differ from the checkpoint's:
$(losses "from-ck-$model.jsonl") / $(losses "from-hf-$model.jsonl")"

    # bf16: half the bytes, nearly the same first loss
    run 0 "$build/ptconvert" "$step" "bf16-$model" --dtype bf16
    f32=$(wc -c <"hf-$model/model.safetensors")
    bf16=$(wc -c <"bf16-$model/model.safetensors")
    [ $((bf16 * 2)) -lt $((f32 + 8192)) ] && [ $((bf16 * 2)) -gt $((f32 - 8192)) ] ||
        fail "$model: bf16 file $bf16 bytes, f32 $f32"
    run 0 train "$model.json" --steps 1 --init-from "bf16-$model" --log "from-bf16-$model.jsonl"
    awk -v a="$(losses "from-ck-$model.jsonl" | head -1)" \
        -v b="$(losses "from-bf16-$model.jsonl" | head -1)" \
        'BEGIN { d = a - b; exit !(b != "" && d < 0.01 && d > -0.01) }' ||
        fail "$model: bf16 export's first loss far from the checkpoint's"
done

# refusals: one line, exit 1, the output folder not made or left as it was
run 1 "$build/ptconvert" ck-tiny hf-tiny
err_has "'hf-tiny' is not empty" "an existing export"
one_line_error "an existing export"
run 0 "$build/ptconvert" ck-tiny hf-tiny --force --dtype f16
grep -q '"torch_dtype": "float16"' hf-tiny/config.json || fail "--force rewrites config.json"
run 1 "$build/ptconvert" no-such-checkpoint fresh
err_has "no-such-checkpoint" "a missing checkpoint"
one_line_error "a missing checkpoint"
[ ! -e fresh ] || fail "a refused conversion made its output folder"
run 1 "$build/ptconvert" ck-tiny fresh --dtype fp8
err_has "--dtype 'fp8': expected f32, bf16 or f16" "an unknown dtype"
[ ! -e fresh ] || fail "a refused conversion made its output folder"
run 0 "$build/ptconvert" --help
out_has "usage: ptconvert CHECKPOINT OUT_DIR" "--help"

[ "$failures" -eq 0 ] && echo "cli_ptconvert: all checks passed"
exit "$failures"
