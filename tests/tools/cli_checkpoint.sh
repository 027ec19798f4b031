#!/bin/sh
# ptrun's checkpoints as a user meets them: a --checkpoint that is not ours (or cannot
# be written) is refused before training and left alone; the K newest are kept;
# --resume finds the newest complete one where an interrupted commit left it, checks
# meta.json's step and data position, and continues bit for bit; orphaned temporaries
# of ours are removed, nothing else is; a loss spike (provoked by the test hook
# PT_TEST_SPIKE_AT, which multiplies the weights by 100 before that step) stops the run
# keeping the checkpoints from before it, or rolls back past it and trains on.
#   usage: cli_checkpoint.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db"
loss_at() { grep "\"type\":\"step\",\"step\":$2," "$1" | tail -1 | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
meta_field() { grep "\"$2\"" "$1/meta.json" | tr -dc '0-9'; }
train() { "$build/ptrun" plan.json --quiet --sample 0 --val-every 0 --checkpoint-every 10 "$@"; }

run 0 "$build/ptplan" --model tiny --devices 1 --out plan.json --steps 40
[ -f plan.json ] || fail "ptplan writes the plan"

# 1. A folder or file that is not a checkpoint: refused naming it, before training,
# and left as it was (an earlier ptrun moved it aside and deleted it).
mkdir mine && echo precious >mine/notes.txt && echo weights >mine/model.safetensors
run 1 train --checkpoint mine
err_has "checkpoint directory 'mine' exists and is not a checkpoint written by ptrun" "foreign folder"
grep -q "^step\|^train" "$tmp/out" && fail "refused before training"
[ "$(cat mine/notes.txt)" = precious ] && [ "$(cat mine/model.safetensors)" = weights ] ||
    fail "the folder that is not ours is left alone"
[ "$(ls -a | grep -c '^mine')" = 1 ] || fail "nothing is made beside it: $(ls)"
echo text >afile
run 1 train --checkpoint afile
err_has "'afile' exists and is not a checkpoint" "a file as --checkpoint"
[ "$(cat afile)" = text ] || fail "the file is left alone"
mkdir -p kept && echo x >kept.1
run 1 train --checkpoint kept --keep-checkpoints 2
err_has "'kept.1' exists and is not a checkpoint" "a kept copy's name taken"
run 1 train --checkpoint no/such/folder/ck
err_has "cannot write 'no/such/folder/ck'" "unwritable checkpoint path"
grep -q "^train" "$tmp/out" && fail "an unwritable checkpoint is refused before training"
run 1 train --keep-checkpoints 0
err_has "keep-checkpoints" "--keep-checkpoints 0"
run 1 train --spike-action maybe
err_has "expected stop, rollback or off" "unknown --spike-action"

# 2. An empty folder may be used; the two newest are kept.
mkdir ck
run 0 train --checkpoint ck --log full.jsonl
[ "$(meta_field ck step)" = 40 ] && [ "$(meta_field ck.1 step)" = 30 ] ||
    fail "ck holds step 40, ck.1 step 30"
[ ! -e ck.2 ] || fail "only two are kept"

# 3. A kill between a commit's renames leaves the newest as ck.tmp-PID (here: of a
# process that is gone): --resume takes it and continues bit for bit, and the next
# commit puts it back in line; orphans of ours go, one that is not ours stays.
rm -rf ck ck.1
run 0 train --checkpoint ck --stop-after 20
mv ck ck.tmp-99999999
mkdir ck.tmp-99999998 && echo half >ck.tmp-99999998/optim_rank0.safetensors.tmp-5
mkdir ck.tmp-99999997 && echo mine >ck.tmp-99999997/notes.txt
run 0 train --checkpoint ck --resume ck --log part.jsonl
out_has "resumed ck.tmp-99999999 at step 20" "resume finds the interrupted commit's checkpoint"
for s in 21 30 40; do
    a=$(loss_at full.jsonl $s)
    b=$(loss_at part.jsonl $s)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "step $s: resumed loss $b differs from $a"
done
[ "$(meta_field ck step)" = 40 ] && [ "$(meta_field ck.1 step)" = 30 ] ||
    fail "after the resumed run: ck step 40, ck.1 step 30"
[ ! -e ck.tmp-99999999 ] && [ ! -e ck.tmp-99999998 ] || fail "orphans of ours are removed: $(ls)"
[ "$(cat ck.tmp-99999997/notes.txt)" = mine ] || fail "a folder that is not ours stays"

# 4. meta.json's step and data position are checked against the plan.
cp -r ck bad
sed -i 's/"step": 40/"step": 999/' bad/meta.json
run 1 train --resume bad
err_has "bad/meta.json: field 'step' = 999 is beyond the plan's run.steps (40)" "step beyond the plan"
cp ck/meta.json bad/meta.json
sed -i 's/"data_pos": [0-9]*/"data_pos": 5/' bad/meta.json
run 1 train --resume bad
err_has "bad/meta.json: field 'data_pos' = 5 does not fit step 40" "data_pos before the step's"

# 5. A spike at step 25 stops the run (exit 2), keeping the checkpoints from before it
# (steps 20 and 10): the spiking step is not checkpointed.
rm -rf ck ck.1
PT_TEST_SPIKE_AT=25 run 2 train --checkpoint ck
err_has "loss spike at step 25" "the spike is named"
err_has "stopping; checkpoint ck (step 20, from before it) is kept" "the kept checkpoint is named"
out_has "spike:  step 25: loss" "a line says what happened"
[ "$(meta_field ck step)" = 20 ] && [ "$(meta_field ck.1 step)" = 10 ] ||
    fail "the checkpoints from before the spike are kept"
# with the guard off the run trains on through it
rm -rf ck ck.1
PT_TEST_SPIKE_AT=25 run 0 train --spike-action off
grep -q "^spike" "$tmp/out" && fail "--spike-action off reports no spike"

# 6. Rollback: back to step 20, the batches of steps 21-25 skipped, on to step 40 with
# a finite loss; the data position is in meta.json, and a run stopped after the
# rollback resumes from it bit for bit.
PT_TEST_SPIKE_AT=25 run 0 train --checkpoint ck --spike-action rollback --log roll.jsonl
out_has "rollback: back to ck (step 20), skipping the 5 batches of steps 21-25" "the rollback is reported"
last=$(loss_at roll.jsonl 40)
awk -v l="$last" 'BEGIN { exit !(l > 0 && l < 5) }' || fail "training goes on to a finite loss ($last)"
[ "$(meta_field ck step)" = 40 ] || fail "the last checkpoint is step 40"
b=$(grep -o '"global_batch": [0-9]*' plan.json | head -1 | tr -dc '0-9')
[ "$(meta_field ck data_pos)" = $((45 * b)) ] || fail "data_pos counts the 5 skipped batches"
[ "$(loss_at roll.jsonl 21)" != "$(loss_at full.jsonl 21)" ] || fail "step 21 runs on other data"
rm -rf ck ck.1
PT_TEST_SPIKE_AT=25 run 0 train --checkpoint ck --spike-action rollback --stop-after 30
run 0 train --checkpoint ck --resume ck --spike-action rollback --log roll2.jsonl
out_has "samples skipped" "resume reports the skipped data"
for s in 31 40; do
    [ "$(loss_at roll.jsonl $s)" = "$(loss_at roll2.jsonl $s)" ] ||
        fail "step $s after a rollback: the resumed run differs"
done

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all checkpoint checks passed"
