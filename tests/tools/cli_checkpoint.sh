#!/bin/sh
# ptrun's checkpoints as a user meets them: a --checkpoint folder that is not ours (or
# cannot be written) is refused before training and left alone; each save is a step
# folder (DIR/step_NNNNNNNN, whole tensors with an index, meta.json with the model and
# the settings) named by the tracker, a line says so, and the --keep newest stay;
# --resume continues bit for bit, may run longer (--steps) and says what changed; a
# checkpoint of another model or seed is refused naming the field and both values;
# SIGTERM finishes the step, writes a checkpoint, says so and exits 75; --init-from
# takes the weights alone; a loss spike (provoked by the test hook PT_TEST_SPIKE_AT,
# which multiplies the weights by 100 before that step) stops the run keeping the
# checkpoints from before it, or rolls back past it and trains on. One run writes a
# folder and a log at a time: a second is refused naming the holder (a lock held from
# the shell, a real first run stopped with SIGSTOP, a run under mpirun), and a run
# killed with SIGKILL leaves nothing to clean up before --resume. A number in meta.json
# that cannot be is refused, naming it; a damaged newest meta.json is
# refused, naming the step to resume from instead.
#   usage: cli_checkpoint.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"
loss_at() { grep "\"type\":\"step\",\"step\":$2," "$1" | tail -1 | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
meta_field() { grep "\"$2\"" "$1/meta.json" | head -1 | tr -dc '0-9'; }
train() { "$build/ptrun" plan.json --quiet --sample 0 --val-every 0 --checkpoint-every 10 "$@"; }
step_dir() { printf '%s/step_%08d' "$1" "$2"; }
# await_step LOG N: until the log shows step N (60 s at most; the checks that follow
# rely only on the step the run then reports)
await_step() {
    n=0
    while [ "$n" -lt 600 ] && ! grep -q "\"type\":\"step\",\"step\":$2," "$1" 2>/dev/null; do
        sleep 0.1
        n=$((n + 1))
    done
}
# interrupt NAME VICTIM CMD...: runs CMD in the background (stdout NAME.out, stderr
# NAME.err; it logs to NAME.jsonl), sends SIGTERM once the log shows step 3 to VICTIM
# ("self": CMD's own process; a number: that MPI rank of plan2.json) and leaves CMD's
# exit status in $rc. CMD runs under a 300 s timeout (status 124, which fails every
# check after), so a run that ignores the signal cannot hang the test.
interrupt() {
    name=$1 victim=$2
    shift 2
    timeout 300 "$@" >"$name.out" 2>"$name.err" &
    pid=$!
    await_step "$name.jsonl" 3
    if [ "$victim" = self ]; then
        pkill -TERM -P "$pid"
    else
        target=$(rank_pid plan2.json "$victim") && kill -TERM "$target"
    fi
    wait "$pid"
    rc=$?
}

run 0 "$build/ptplan" --model tiny --devices 1 --out plan.json --steps 40
[ -f plan.json ] || fail "ptplan writes the plan"

# 1. A folder or file that is not a checkpoint folder: refused naming it, before
# training, and left as it was.
mkdir mine && echo precious >mine/notes.txt && echo weights >mine/model.safetensors
run 1 train --checkpoint mine
err_has "checkpoint directory 'mine' holds 'mine/" "foreign folder"
err_has "which is not a checkpoint written by ptrun" "foreign folder, why"
grep -q "^step\|^train" "$tmp/out" && fail "refused before training"
[ "$(cat mine/notes.txt)" = precious ] && [ "$(cat mine/model.safetensors)" = weights ] ||
    fail "the folder that is not ours is left alone"
[ "$(ls -a | grep -c '^mine')" = 1 ] || fail "nothing is made beside it: $(ls)"
echo text >afile
run 1 train --checkpoint afile
err_has "'afile' exists and is not a folder" "a file as --checkpoint"
[ "$(cat afile)" = text ] || fail "the file is left alone"
run 1 train --checkpoint no/such/folder/ck
err_has "cannot write 'no/such/folder/ck'" "unwritable checkpoint path"
grep -q "^train" "$tmp/out" && fail "an unwritable checkpoint is refused before training"
run 1 train --keep 0
err_has "--keep" "--keep 0"
run 1 train --spike-action maybe
err_has "expected stop, rollback or off" "unknown --spike-action"
run 1 train --resume ck --init-from ck
err_has "--resume and --init-from: one or the other" "--resume with --init-from"

# 2. A step folder per save, the two newest kept, the tracker naming the last; each
# save says where it went; the files describe themselves.
run 0 train --checkpoint ck --log full.jsonl
out_has "checkpoint step 10 written: ck/step_00000010" "a line per checkpoint"
out_has "checkpoint step 40 written: ck/step_00000040" "the last checkpoint's line"
[ "$(meta_field "$(step_dir ck 40)" step)" = 40 ] && [ "$(meta_field "$(step_dir ck 30)" step)" = 30 ] ||
    fail "ck holds steps 40 and 30"
[ ! -e "$(step_dir ck 20)" ] || fail "only two are kept: $(ls ck)"
[ "$(cat ck/latest_checkpointed_iteration.txt)" = 40 ] || fail "the tracker names step 40"
s40=$(step_dir ck 40)
for f in meta.json model.safetensors.index.json optim.safetensors.index.json \
    model-00001-of-00001.safetensors optim-00001-of-00001.safetensors; do
    [ -s "$s40/$f" ] || fail "the step folder holds $f: $(ls "$s40")"
done
grep -q '"hidden": 64' "$s40/meta.json" && grep -q '"layout": "' "$s40/meta.json" &&
    grep -q '"plan_hash": "' "$s40/meta.json" && grep -q '"lr": ' "$s40/meta.json" ||
    fail "meta.json holds the model, the layout, the plan hash and the settings"
grep -q '"layers.3.mlp_down.w": "model-00001-of-00001.safetensors"' "$s40/model.safetensors.index.json" ||
    fail "the index maps each tensor to its file"
head -c 4096 "$s40/model-00001-of-00001.safetensors" |
    grep -aq '"__metadata__":{"format":"pt","producer":"ptrun","model":"tiny","layout":"tp=1,.*","step":"40","plan_hash":"[0-9a-f]\{16\}"}' ||
    fail "the safetensors files carry __metadata__"
grep -q '"wte.exp_avg_sq"' "$s40/optim.safetensors.index.json" || fail "Adam's moments by name"

# 3. Stopped half-way, resumed: bit for bit the same run; a longer run from the last
# checkpoint says what changed.
run 0 train --checkpoint half --stop-after 20
run 0 train --checkpoint half --resume half --log part.jsonl
out_has "resumed half/step_00000020 at step 20 (written by " "resume names the step folder"
for s in 21 30 40; do
    a=$(loss_at full.jsonl $s)
    b=$(loss_at part.jsonl $s)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "step $s: resumed loss $b differs from $a"
done
run 0 train --resume ck --steps 50 --log longer.jsonl
out_has "changed since the checkpoint: steps 40 -> 50" "a longer run says so"
[ -n "$(loss_at longer.jsonl 50)" ] || fail "the longer run reaches step 50"
run 0 train --resume "$(step_dir ck 30)" --log from30.jsonl
out_has "resumed ck/step_00000030 at step 30" "a step folder given directly"

# 4. What must match: the model (named field, both values), the seed, the step.
"$build/ptplan" --dump-model tiny | sed 's/"layers": *4,/"layers": 6,/' >tiny6.json
run 0 "$build/ptplan" --model tiny6.json --devices 1 --out plan6.json --steps 40
run 1 "$build/ptrun" plan6.json --quiet --sample 0 --resume ck
err_has "written for another model: model field 'layers': the checkpoint's is 4, this plan's 6" \
    "a checkpoint of another model"
cp -r "$s40" bad
sed -i 's/"seed": "[0-9]*"/"seed": "7"/' bad/meta.json
run 1 train --resume bad
err_has "training field 'seed': the checkpoint's is 7, this plan's" "another seed"
cp "$s40/meta.json" bad/meta.json
sed -i 's/"step": 40/"step": 999/; s/"steps": 40/"steps": 999/; s/"data_pos": [0-9]*/"data_pos": 99900/' \
    bad/meta.json
run 1 train --resume bad
err_has "bad/meta.json: field 'step' = 999 is beyond this run's 40 steps" "step beyond the run"

# 5. SIGTERM: the step finishes, a checkpoint is written and named, exit 75; --resume
# continues from it. (A long run is stopped once its log shows step 3; the test only
# relies on the step the run reports.)
interrupt sig self "$build/ptrun" plan.json --sample 0 --val-every 0 --steps 100000 \
    --checkpoint sig --log sig.jsonl
[ "$rc" = 75 ] || fail "SIGTERM: exit status $rc, expected 75 ($(tail -2 sig.err))"
at=$(sed -n 's/^interrupted after step \([0-9]*\) (SIGTERM); --resume continues$/\1/p' sig.out)
[ -n "$at" ] || fail "SIGTERM: a line says where the run stopped: $(tail -3 sig.out)"
if [ -n "$at" ]; then
    grep -q "^checkpoint step $at written: sig/step_$(printf %08d "$at")" sig.out ||
        fail "SIGTERM: the checkpoint of step $at is written and named"
    run 0 "$build/ptrun" plan.json --quiet --sample 0 --val-every 0 --resume sig \
        --steps $((at + 2))
    out_has "resumed sig/step_$(printf %08d "$at") at step $at" "the interrupted run resumes"
fi

# Under mpirun, SIGTERM to one rank stops every rank after the same step: the others
# are told, the checkpoint is written, mpirun exits 75.
run 0 "$build/ptplan" --devices 2 --layout dp=2,mbs=2 --global-batch 16 --out plan2.json \
    --steps 100000
# (Open MPI's components keep about 120 KB per rank that they never free, which
# LeakSanitizer would report at exit in the sanitizer build: this run, as every other
# multi-rank test's, goes without leak detection; the one-rank runs above keep it.)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    interrupt sig2 1 $mpirun -np 2 "$build/ptrun" plan2.json --sample 0 --val-every 0 \
    --checkpoint sig2 --log sig2.jsonl
[ "$rc" = 75 ] || fail "SIGTERM to rank 1: mpirun exits $rc, expected 75 ($(tail -2 sig2.err))"
at=$(sed -n 's/^interrupted after step \([0-9]*\) (another rank was signalled); --resume continues$/\1/p' sig2.out)
[ -n "$at" ] && grep -q "^checkpoint step $at written: sig2/step_" sig2.out ||
    fail "SIGTERM to rank 1: rank 0 stops after the same step with a checkpoint: $(tail -3 sig2.out)"

# 6. --init-from: the weights of a checkpoint, the optimizer afresh from step 0: the
# first step's loss is the trained model's, far below a fresh start's.
run 0 train --init-from ck --log init.jsonl --steps 2
out_has "weights from ck/step_00000040 (step 40), optimizer afresh at step 0" "init-from says what"
awk -v a="$(loss_at init.jsonl 1)" -v b="$(loss_at full.jsonl 1)" 'BEGIN { exit !(a < b - 0.5) }' ||
    fail "--init-from starts from the trained weights (step 1 loss $(loss_at init.jsonl 1), fresh $(loss_at full.jsonl 1))"
run 1 "$build/ptrun" plan6.json --quiet --sample 0 --init-from ck
err_has "model field 'layers'" "--init-from of another model"

# 7. A vocabulary that needs padding (200 tokens in 256 rows): the padded rows are
# masked out of the loss, so their gradient is exactly 0 and so are their Adam moments;
# the real rows' are not.
"$build/ptplan" --dump-model tiny | sed 's/"vocab": *256,/"vocab": 200,/' >tiny200.json
run 0 "$build/ptplan" --model tiny200.json --devices 1 --out plan200.json --steps 3
run 0 "$build/ptrun" plan200.json --quiet --sample 0 --val-every 0 --checkpoint v200
f=v200/step_00000003/optim-00001-of-00001.safetensors
hlen=$(od -An -tu8 -N8 "$f" | tr -dc '0-9')
begin=$(head -c $((8 + hlen)) "$f" | grep -ao '"wte.exp_avg":{[^}]*}' | sed 's/.*"data_offsets":\[\([0-9]*\),.*/\1/')
floats() { od -An -v -tf4 -j "$1" -N "$2" "$f" | tr -s ' ' '\n' | grep -v '^$'; }
if [ -n "$hlen" ] && [ -n "$begin" ]; then
    at=$((8 + hlen + begin))
    floats $((at + 200 * 64 * 4)) $((56 * 64 * 4)) | awk '$1 != 0 { bad = 1 } END { exit bad || NR != 56 * 64 }' ||
        fail "the padded vocabulary rows get no gradient (their exp_avg is not all 0)"
    floats "$at" $((200 * 64 * 4)) | awk '$1 != 0 { n++ } END { exit !(n > 1000) }' ||
        fail "the real vocabulary rows are trained"
else
    fail "wte.exp_avg in $f's header"
fi

# 8. A spike at step 25 stops the run (exit 2), keeping the checkpoints from before it
# (steps 20 and 10): the spiking step is not checkpointed.
rm -rf ck
PT_TEST_SPIKE_AT=25 run 2 train --checkpoint ck
err_has "loss spike at step 25" "the spike is named"
err_has "stopping; checkpoint ck/step_00000020 (step 20, from before it) is kept" "the kept checkpoint is named"
out_has "spike:  step 25: loss" "a line says what happened"
[ -e "$(step_dir ck 20)" ] && [ -e "$(step_dir ck 10)" ] && [ ! -e "$(step_dir ck 30)" ] ||
    fail "the checkpoints from before the spike are kept"
PT_TEST_SPIKE_AT=25 run 0 train --spike-action off
grep -q "^spike" "$tmp/out" && fail "--spike-action off reports no spike"

# 9. Rollback: back to step 20, the batches of steps 21-25 skipped, on to step 40 with
# a finite loss; the data position is in meta.json, and a run stopped after the
# rollback resumes from it bit for bit.
rm -rf ck
PT_TEST_SPIKE_AT=25 run 0 train --checkpoint ck --spike-action rollback --log roll.jsonl
out_has "rollback: back to ck/step_00000020 (step 20), skipping the 5 batches of steps 21-25" "the rollback is reported"
last=$(loss_at roll.jsonl 40)
awk -v l="$last" 'BEGIN { exit !(l > 0 && l < 5) }' || fail "training goes on to a finite loss ($last)"
b=$(grep -o '"global_batch": [0-9]*' plan.json | head -1 | tr -dc '0-9')
[ "$(meta_field "$(step_dir ck 40)" data_pos)" = $((45 * b)) ] || fail "data_pos counts the 5 skipped batches"
[ "$(loss_at roll.jsonl 21)" != "$(loss_at full.jsonl 21)" ] || fail "step 21 runs on other data"
rm -rf ck
PT_TEST_SPIKE_AT=25 run 0 train --checkpoint ck --spike-action rollback --stop-after 30
run 0 train --checkpoint ck --resume ck --spike-action rollback --log roll2.jsonl
out_has "data position $((35 * b))" "resume reports the data position"
for s in 31 40; do
    [ "$(loss_at roll.jsonl $s)" = "$(loss_at roll2.jsonl $s)" ] ||
        fail "step $s after a rollback: the resumed run differs"
done

# 10. One run writes a checkpoint folder, and one a log, at a time. A second run given
# either is refused before training, naming the folder and the pid and host its lock
# file names, or the log; the first run's folder and log are left as they were.
# (a) The lock held from the shell (flock(1)), with a lock file naming another holder.
mkdir held && printf 'pid 4242 host elsewhere\n' >held/lock
if command -v flock >/dev/null; then
    flock held/lock sh -c 'touch held.taken; exec sleep 120' &
    holder=$!
    n=0
    while [ ! -e held.taken ] && [ "$n" -lt 300 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    run 1 train --checkpoint held --log held.jsonl
    err_has "checkpoint folder 'held' is in use by ptrun pid 4242 on host elsewhere (lock file held/lock)" \
        "a folder another holds"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "one line says why: $(cat "$tmp/err")"
    grep -q "^train" "$tmp/out" && fail "a folder in use is refused before training"
    [ "$(cat held/lock)" = "pid 4242 host elsewhere" ] && [ "$(ls held)" = lock ] ||
        fail "the refused run changes nothing in the folder: $(ls held)"
    [ ! -e held.jsonl ] || fail "the refused run leaves no log behind"
    # every rank of a run under mpirun fails, none hangs
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        timeout 120 $mpirun -np 2 "$build/ptrun" plan2.json --quiet --sample 0 --steps 2 \
        --checkpoint held >mpi.out 2>mpi.err
    rc=$?
    [ "$rc" != 0 ] && [ "$rc" != 124 ] ||
        fail "mpirun -np 2 on a folder in use: exit $rc, want a failure ($(tail -2 mpi.err))"
    grep -q "checkpoint folder 'held' is in use by ptrun pid 4242 on host elsewhere" mpi.err ||
        fail "mpirun -np 2 on a folder in use: the reason is said: $(tail -3 mpi.err)"
    pkill -P "$holder"
    wait "$holder"
else
    echo "note: no flock(1): the lock is not held from the shell here"
fi
# (b) A real first run, stopped (SIGSTOP) while it holds both: a second ptrun on its
# folder, on its folder as --resume and --checkpoint, and on its log, is refused.
timeout 300 "$build/ptrun" plan.json --quiet --sample 0 --val-every 0 --steps 100000 \
    --checkpoint-every 1 --checkpoint busy --log busy.jsonl >busy.out 2>busy.err &
first=$!
await_step busy.jsonl 3
victim=$(pgrep -P "$first")
kill -STOP "$victim"
lines=$(wc -l <busy.jsonl)
at=$(cat busy/latest_checkpointed_iteration.txt)
folders=$(ls busy)
host=$(uname -n)
run 1 train --checkpoint busy --log other.jsonl --checkpoint-every 1
err_has "checkpoint folder 'busy' is in use by ptrun pid $victim on host $host (lock file busy/lock)" \
    "a second ptrun on the folder"
run 1 train --checkpoint busy --resume busy
err_has "checkpoint folder 'busy' is in use by ptrun pid $victim" "--resume and --checkpoint on a folder in use"
run 1 train --checkpoint other --log busy.jsonl
err_has "log 'busy.jsonl' is in use by another running ptrun (pid $victim on this host)" "a second ptrun on the log, its holder named"
[ ! -e other ] && [ ! -e other.jsonl ] || fail "the refused runs leave nothing behind"
[ "$(wc -l <busy.jsonl)" = "$lines" ] || fail "the refused run does not cut the first run's log"
[ "$(ls busy)" = "$folders" ] || fail "the refused runs change nothing in the folder: $(ls busy)"
# reading is not writing: a folder in use may be resumed from into another
run 0 train --resume busy --checkpoint copy --steps $((at + 1))
out_has "resumed busy/step_$(printf %08d "$at") at step $at" "--resume from a folder in use"
kill -CONT "$victim"
kill -TERM "$victim"
wait "$first"
rc=$?
[ "$rc" = 75 ] || fail "the first run goes on and stops at SIGTERM: exit $rc ($(tail -2 busy.err))"
last=$(sed -n 's/^interrupted after step \([0-9]*\) (SIGTERM).*/\1/p' busy.out)
python3 - busy.jsonl "$last" <<'PY' || fail "the first run's log is whole: one header, steps 1 to $last"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l["step"] for l in lines if l["type"] == "step"]
assert [l["type"] for l in lines].count("header") == 1 and lines[0]["type"] == "header"
assert steps == list(range(1, int(sys.argv[2]) + 1)), steps
PY
[ "$(cat busy/latest_checkpointed_iteration.txt)" = "$last" ] &&
    [ "$(meta_field "$(step_dir busy "$last")" step)" = "$last" ] &&
    [ "$(meta_field "$(step_dir busy $((last - 1)))" step)" = $((last - 1)) ] ||
    fail "the first run's checkpoints are its own: $(ls busy)"
# (c) A run killed with SIGKILL leaves its lock file; the next run takes it, no
# manual step.
timeout 300 "$build/ptrun" plan.json --quiet --sample 0 --val-every 0 --steps 100000 \
    --checkpoint-every 1 --checkpoint crashed --log crashed.jsonl >crashed.out 2>&1 &
first=$!
await_step crashed.jsonl 3
victim=$(pgrep -P "$first")
kill -KILL "$victim"
wait "$first" 2>/dev/null
grep -q "^pid $victim host " crashed/lock || fail "the killed run's lock file stays: $(cat crashed/lock)"
at=$(cat crashed/latest_checkpointed_iteration.txt)
run 0 train --checkpoint crashed --resume crashed --log crashed.jsonl --steps $((at + 2))
out_has "resumed crashed/step_$(printf %08d "$at") at step $at" "a killed run's folder resumes"
grep -q "^pid [0-9]* host " crashed/lock && ! grep -q "^pid $victim " crashed/lock ||
    fail "the lock file names the run that took it: $(cat crashed/lock)"

# 11. A number in meta.json that cannot be (a data position of 2^63 - 11, which once
# hung ptrun at 100% CPU): refused, naming the file, field and value (a run that hangs
# again is ended by the timeout and fails the check of its exit status).
mkdir corrupt && cp -r "$(step_dir ck 40)" corrupt/
sed -i 's/"data_pos": [0-9]*/"data_pos": 9223372036854775797/' corrupt/step_00000040/meta.json
run 1 timeout 60 "$build/ptrun" plan.json --quiet --sample 0 --resume corrupt/step_00000040 \
    --steps 50
err_has "corrupt/step_00000040/meta.json: data_pos 9223372036854775797 is beyond what step 40 can have read (at most 171798691840" \
    "a data position beyond the steps"
sed -i 's/"data_pos": [0-9]*/"data_pos": 39/' corrupt/step_00000040/meta.json
run 1 train --resume corrupt/step_00000040
err_has "data_pos 39 is below step 40" "a data position below the step"
# a step of 2^31 may have read that far; the steps this run has left from there may not
mv corrupt/step_00000040 corrupt/step_2147483648
sed -i 's/"data_pos": [0-9]*/"data_pos": 9223372036854775797/; s/"step": 40/"step": 2147483648/; s/"steps": 40/"steps": 2147483648/' \
    corrupt/step_2147483648/meta.json
run 1 timeout 60 "$build/ptrun" plan.json --quiet --sample 0 --resume corrupt/step_2147483648 \
    --steps 2147483650
err_has "corrupt/step_2147483648/meta.json: data_pos 9223372036854775797 cannot go on under this run: steps 2147483648 to 2147483650 of 64 samples" \
    "a data position this run's steps would overflow"

# 12. The newest checkpoint's meta.json damaged: --resume DIR refuses with its parse
# error and says how to resume from the one before, which resumes when named.
mkdir dmg && cp -r "$(step_dir ck 30)" "$(step_dir ck 40)" ck/latest_checkpointed_iteration.txt dmg/
printf '{"format_version": 2, "step": ' >dmg/step_00000040/meta.json
run 1 train --resume dmg
err_has "dmg/step_00000040/meta.json:" "the damaged file is named"
err_has "it is the newest checkpoint in 'dmg': repair or remove it, or resume from an older one by naming it: --resume dmg/step_00000030 (step 30)" \
    "how to resume from the one before"
run 0 train --resume dmg/step_00000030 --steps 31
out_has "resumed dmg/step_00000030 at step 30" "the one before, named"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all checkpoint checks passed"
