#!/bin/sh
# ptconvert end to end, on checkpoints ptrun writes: tiny (GPT-2 shaped), tiny-llama
# (grouped-query attention, RoPE, untied head), tiny-qwen3-moe (Qwen3-MoE: q/k norms,
# 16 experts) and tiny-mixtral (tiny-moe with experts in every layer, as Mixtral has
# them) trained a few steps, converted to Hugging Face directories, and started from
# with ptrun --init-from: the losses of a run from the f32 export are those of a run
# from the checkpoint itself, to the bit (every tensor came back through the name,
# transpose, RoPE and expert maps unchanged); a bf16 export is half the size and trains
# to nearly the same loss. The --checkpoint folder itself (newest step) is read like
# its step folder; refusals leave nothing behind.
# (tests/runtime/test_hf.c checks every element of both maps and each refusal's message.)
#   usage: cli_ptconvert.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"
train() { "$build/ptrun" "$@" --quiet --sample 0 --val-every 0; }
# a safetensors file's tensor data: its size less the 8-byte header length and the header
tensor_bytes() {
    echo $(($(wc -c <"$1") - 8 - $(od -An -t u8 -N 8 "$1" | tr -d ' ')))
}

# Mixtral has no dense layer: tiny-moe's first one made sparse, as a spec file
"$build/ptplan" --dump-model tiny-moe |
    sed 's/"name": "tiny-moe"/"name": "tiny-mixtral"/; s/"first_dense": 1/"first_dense": 0/' \
        >tiny-mixtral-spec.json
grep -q '"first_dense": 0' tiny-mixtral-spec.json || fail "tiny-mixtral's spec file"

for model in tiny tiny-llama tiny-qwen3-moe tiny-mixtral; do
    spec=$model
    [ "$model" = tiny-mixtral ] && spec=tiny-mixtral-spec.json
    run 0 "$build/ptplan" --model "$spec" --devices 1 --out "$model.json" --steps 3
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
    case $model in
    tiny-qwen3-moe) type=qwen3_moe ;; tiny-mixtral) type=mixtral ;; tiny) type=gpt2 ;;
    *) type=llama ;;
    esac
    grep -q "\"model_type\": \"$type\"" "hf-$model/config.json" || fail "$model: model_type $type"
    [ "$(ls "hf-$model")" = "config.json
model.safetensors" ] || fail "$model: the export holds $(ls "hf-$model")"

    # a run from the export is a run from the checkpoint, loss for loss
    run 0 train "$model.json" --steps 2 --init-from "$step" --log "from-ck-$model.jsonl"
    run 0 train "$model.json" --steps 2 --init-from "hf-$model" --log "from-hf-$model.jsonl"
    [ -n "$(losses "from-ck-$model.jsonl")" ] || fail "$model: no losses logged"
    [ "$(losses "from-ck-$model.jsonl")" = "$(losses "from-hf-$model.jsonl")" ] ||
        fail "$model: losses from the f32 export differ from the checkpoint's:
$(losses "from-ck-$model.jsonl") / $(losses "from-hf-$model.jsonl")"

    # bf16: half the bytes of tensor data, nearly the same first loss
    run 0 "$build/ptconvert" "$step" "bf16-$model" --dtype bf16
    f32=$(tensor_bytes "hf-$model/model.safetensors")
    bf16=$(tensor_bytes "bf16-$model/model.safetensors")
    [ "$f32" -gt 0 ] && [ $((bf16 * 2)) -eq "$f32" ] ||
        fail "$model: bf16 tensors $bf16 bytes, f32 $f32"
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
