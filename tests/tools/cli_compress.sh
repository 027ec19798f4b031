#!/bin/sh
# Gradient compression (the layout's compress key; runtime/compress.c) as a user runs it,
# on tiny GPT-2 and tiny LLaMA under mpirun:
#  - compress=bf16 matches the uncompressed run: every loss of 20 steps, the validation
#    loss and the parameters' sum of squares within a relative 1e-5 (each gradient is
#    rounded once to bf16 on the wire and averaged in fp32; figures printed);
#  - compress=powersgd (rank 4, from step 10) reaches a validation loss within 1% of
#    the uncompressed run's after 100 steps, and differs from it (it compresses);
#  - a PowerSGD run stopped and resumed continues bit for bit (its errors and Q are in
#    the checkpoint), and without that state it would not;
#  - every rank allocates within 5% of the plan's memory;
#  - the layouts it does not apply to, and bad values, are refused with one clear line.
# With `cuda` (the emulation lane: -DPT_CUDA_EMU=ON, the CUDA kernels on the CPU; on a
# GPU machine the real device) it checks the CUDA backend's path instead, (f) below.
#   usage: cli_compress.sh BUILD_DIR [cuda]
set -u
build="$1"
mode="${2:-cpu}"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"

# plan NAME MODEL NP LAYOUT STEPS: a plan with 64 KiB buckets (several per chunk of
# these tiny models, so the buckets and PowerSGD's groups start during the backward)
# ($cluster, when set, names the cluster: a GPU one takes the CUDA backend)
cluster=""
plan() {
    "$build/ptplan" --model "$2" $cluster --devices "$3" --layout "$4" --global-batch 16 \
        --steps "$5" --out "$tmp/$1.json" >/dev/null 2>"$tmp/err" ||
        { fail "ptplan $2 $4: $(cat "$tmp/err")"; return 1; }
    sed -i 's/"bucket_bytes": *[0-9]*/"bucket_bytes": 65536/' "$tmp/$1.json"
}

# train NAME NP [ptrun options]: runs plan NAME, its log in $tmp/NAME.log
train() {
    name=$1 np=$2
    shift 2
    timeout 300 $mpirun -np "$np" "$build/ptrun" "$tmp/$name.json" --sample 0 --quiet \
        --log "$tmp/$name.log" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
        { fail "ptrun $name: $(tail -2 "$tmp/$name.err")"; return 1; }
    cat "$tmp/$name.out" "$tmp/$name.err" | awk -v name="$name" -v np="$np" '
        /^memory  rank / { n++; r = ($6 - $13) / $13; if (r < 0) r = -r
            if (r > 0.05) { print "FAIL: " name ": " $0; bad = 1 } }
        END { if (n != np) { print "FAIL: " name ": " n " memory lines"; bad = 1 }
              exit bad }' || fail "$name: memory differs from the plan"
}

# figures LOG: the training losses, the validation loss and the sum of squares
figures() { sed -n 's/.*"\(loss\|sumsq\)":\([^,}]*\).*/\2/p' "$1"; }
val_loss() { grep '"type":"val"' "$1" | tail -1 | sed 's/.*"loss":\([^,}]*\).*/\1/'; }

# (f) the CUDA backend's path: PowerSGD (rank 8, from step 2, ZeRO 1) on it against
# the same plan on the CPU backend, every loss and the validation loss within a
# relative 1e-3 and not equal (the CUDA path keeps activations in bf16); it
# compresses (it differs from the uncompressed CUDA run); and a run stopped and resumed
# continues bit for bit (the orthonormalisation's sums have a fixed order)
if [ "$mode" = cuda ]; then
    export PT_COMM_NCCL=0 # several ranks share the (emulated) GPU: staged through MPI
    lay="dp=2,zero=1,mbs=2,compress=powersgd,powersgd_start=2,powersgd_rank=8"
    plan cpu tiny 2 "$lay" 8 && train cpu 2 --val-every 8
    cluster="--cluster dgx-h100 --nodes 1"
    plan gpu tiny 2 "$lay" 8 && train gpu 2 --val-every 8 && cp "$tmp/gpu.log" "$tmp/full.log"
    plan none tiny 2 "dp=2,zero=1,mbs=2" 8 && train none 2 --val-every 8
    { losses "$tmp/cpu.log"; val_loss "$tmp/cpu.log"; } >"$tmp/cpu.fig"
    { losses "$tmp/full.log"; val_loss "$tmp/full.log"; } >"$tmp/gpu.fig"
    paste "$tmp/cpu.fig" "$tmp/gpu.fig" | awk '
        { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d; n++ }
        END { printf "powersgd on CUDA: worst relative difference from the CPU %.2e over %d losses\n", w, n
              exit !(n == 9 && w <= 1e-3 && w > 0) }' ||
        fail "PowerSGD on CUDA: not within 1e-3 of the CPU's, or the same (not the CUDA path)"
    [ "$(val_loss "$tmp/full.log")" != "$(val_loss "$tmp/none.log")" ] ||
        fail "PowerSGD on CUDA made no difference to the uncompressed run"
    rm -rf "$tmp/ck"
    train gpu 2 --val-every 8 --checkpoint "$tmp/ck" --stop-after 5
    train gpu 2 --val-every 8 --resume "$tmp/ck"
    [ "$(figures "$tmp/full.log" | tail -5)" = "$(figures "$tmp/gpu.log" | tail -5)" ] ||
        fail "the resumed PowerSGD run on CUDA differs from the uninterrupted one"
    if [ "$failures" -gt 0 ]; then
        echo "$failures failure(s)"
        exit 1
    fi
    echo "gradient compression on CUDA: PowerSGD as on the CPU, and resumes bit for bit"
    exit 0
fi

# (a) bf16 against the uncompressed run, over 20 steps
for case in "2 dp=2,mbs=2" "4 dp=4,mbs=2" "4 dp=2,pp=2,zero=1,mbs=2"; do
    np=${case%% *} lay=${case#* }
    plan ref tiny "$np" "$lay" 20 && train ref "$np" --val-every 20 || continue
    plan bf tiny "$np" "$lay,compress=bf16" 20 && train bf "$np" --val-every 20 || continue
    figures "$tmp/ref.log" >"$tmp/ref.fig"
    figures "$tmp/bf.log" >"$tmp/bf.fig"
    paste "$tmp/ref.fig" "$tmp/bf.fig" | awk -v name="$lay" '
        { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > w) w = d; n++ }
        END { printf "bf16 %-28s worst relative difference %.2e over %d figures\n", name, w, n
              exit !(n == 22 && w <= 1e-5) }' || fail "bf16 $lay differs from uncompressed"
done

# (b) PowerSGD's validation loss after 100 steps, against the uncompressed run's
for model in tiny tiny-llama; do
    plan ref "$model" 2 "dp=2,mbs=2" 100 && train ref 2 --val-every 100 || continue
    plan ps "$model" 2 "dp=2,mbs=2,compress=powersgd" 100 && train ps 2 --val-every 100 ||
        continue
    a=$(val_loss "$tmp/ref.log") b=$(val_loss "$tmp/ps.log")
    awk -v a="$a" -v b="$b" -v m="$model" 'BEGIN {
        r = (b - a) / a
        printf "powersgd %-10s validation loss %.4f against %.4f uncompressed (%+.2f%%)\n", m, b, a, 100 * r
        exit !(r <= 0.01 && r >= -0.01 && (b != a)) }' ||
        fail "powersgd $model: validation loss $b against $a uncompressed"
done

# (c) a PowerSGD run stopped and resumed continues bit for bit (ZeRO 1: its shares too)
for lay in "dp=2,mbs=2" "dp=2,zero=1,mbs=2"; do
    plan r tiny 2 "$lay,compress=powersgd,powersgd_start=3" 20 || continue
    rm -rf "$tmp/ck"
    train r 2 --val-every 0 && cp "$tmp/r.log" "$tmp/full.log"
    train r 2 --val-every 0 --checkpoint "$tmp/ck" --stop-after 8
    ls "$tmp/ck/step_00000008/powersgd-00002-of-00002.safetensors" >/dev/null 2>&1 ||
        fail "$lay: the checkpoint holds no PowerSGD state"
    train r 2 --val-every 0 --resume "$tmp/ck" && cp "$tmp/r.log" "$tmp/resumed.log"
    [ "$(figures "$tmp/full.log" | tail -13)" = "$(figures "$tmp/resumed.log" | tail -13)" ] ||
        fail "$lay: the resumed PowerSGD run differs from the uninterrupted one"
    # without the state the run goes on, says so, and differs
    rm -f "$tmp/ck/step_00000008/powersgd-"*
    train r 2 --val-every 0 --resume "$tmp/ck/step_00000008"
    grep -q "PowerSGD's errors and Q restart" "$tmp/r.out" ||
        fail "$lay: a resume without PowerSGD's state does not say so"
    [ "$(figures "$tmp/full.log" | tail -1)" != "$(figures "$tmp/r.log" | tail -1)" ] ||
        fail "$lay: PowerSGD's state made no difference to the resumed run"
done

# (d) --explain prices the layout under each compression: bf16 halves the reduction's
# bytes, so over a slow network (10 Gb Ethernet between nodes) it saves time, and the
# JSON form carries the same rows
"$build/ptplan" --dump-cluster dgx-a100-80g |
    sed 's/"nodes": *1,/"nodes": 4,/; s/"bandwidth": *2.5e+*10/"bandwidth": 1.25e9/;
         s/"bus_bandwidth": *2.3e+*10/"bus_bandwidth": 1.1e9/' >"$tmp/slow.json"
run 0 "$build/ptplan" --model gpt2-1.5b --cluster "$tmp/slow.json" --global-batch 512 \
    --layout "dp=32,mbs=8" --explain --no-out
out_has "^gradient compression" "the --explain table"
out_has "^  none .*0.0%  <- this layout" "the layout's own row"
awk '$1 == "bf16" { s = $5 + 0 } END { exit !(s > 10) }' "$tmp/out" ||
    fail "bf16 saves over 10% of the step over 10 GbE: $(grep -A4 '^gradient compression' "$tmp/out")"
run 0 "$build/ptplan" --model gpt2-1.5b --cluster "$tmp/slow.json" --global-batch 512 \
    --layout "dp=32,mbs=8" --explain --json --no-out
python3 -c '
import json, sys
rows = json.load(open(sys.argv[1]))["compression"]
assert len(rows) == 3, rows
assert rows[0]["saves"] == 0 and "compress=" not in rows[0]["layout"], rows[0]
assert "compress=bf16" in rows[1]["layout"] and rows[1]["saves"] > 0.1, rows[1]
assert "compress=powersgd" in rows[2]["layout"], rows[2]
' "$tmp/out" || fail "--explain --json: the compression rows"

# (e) where it does not apply, and bad values: one line naming the rule or key
run 3 "$build/ptplan" --devices 2 --layout "dp=2,zero=2,compress=bf16" --out "$tmp/x.json"
err_has "compress_zero" "compression with ZeRO 2"
run 3 "$build/ptplan" --devices 1 --layout "compress=powersgd" --out "$tmp/x.json"
err_has "compress_no_dp" "compression on one rank"
run 1 "$build/ptplan" --devices 2 --layout "dp=2,powersgd_rank=8" --out "$tmp/x.json"
err_has "powersgd_rank applies only with compress=powersgd" "rank without PowerSGD"
one_line_error "rank without PowerSGD"
run 1 "$build/ptplan" --devices 2 --layout "dp=2,compress=gzip" --out "$tmp/x.json"
err_has "compress=gzip: expected one of none, bf16, powersgd" "unknown compression"
run 1 "$build/ptplan" --devices 2 --layout "dp=2,compress=powersgd,powersgd_rank=0" \
    --out "$tmp/x.json"
err_has "powersgd_rank=0: expected an integer from 1 to 1024" "rank 0"
run 1 "$build/ptplan" --devices 2 --compress bf16,zip --no-out
err_has "'zip' is not a compression" "--compress zip"
one_line_error "--compress zip"
run 1 "$build/ptplan" --devices 2 --stack megatron-lm --layout "dp=2,compress=bf16" \
    --out "$tmp/x.json"
err_has "stack 'megatron-lm' does not compress gradients" "a stack without compression"
# a plan edited to a compression its layout string does not say
plan e tiny 2 "dp=2,mbs=2" 2 &&
    sed 's/"compress": *"none"/"compress": "bf16"/' "$tmp/e.json" >"$tmp/e2.json"
run 1 "$build/ptrun" "$tmp/e2.json"
err_has "field 'layout.string'" "a plan whose compress disagrees with its layout string"
sed 's/"compress": *"none"/"compress": "lz4"/' "$tmp/e.json" >"$tmp/e3.json"
run 1 "$build/ptrun" "$tmp/e3.json"
err_has "compress" "a plan with an unknown compression"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "gradient compression: bf16 matches, PowerSGD converges and resumes bit for bit"
