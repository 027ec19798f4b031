#!/bin/sh
# ptprofile --backend cuda in the emulation build (the CUDA kernels on the CPU): the
# GEMMs of every role and the model's other kernels are stored under the cluster's
# device name, and the host keeps all of OpenMP's threads for the runtime's host loops
# (OpenBLAS's one-thread setting for the CPU's measurement is OpenMP's too: on one
# thread GPT-2 1.5B's initial weights took 103 s per micro-batch size on an H100).
#   usage: cli_ptprofile_cuda.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
q() { sqlite3 "$tmp/g.db" "$1"; }

OMP_NUM_THREADS=2 run 0 "$build/ptprofile" --db "$tmp/g.db" --backend cuda --model tiny \
    --cluster dgx-h100 --devices 1 --global-batch 2 --max-mbs 2 --no-collectives --quick
# 8 keys: with tp = 1 the residual adds are the GEMMs' (gemm_bias_res), so neither
# add_fwd nor the add-and-norm kernel is among the model's other kernels
err_has "kernels of tiny at micro-batch 2: 8 op keys in .* (host on 2 threads)" \
    "the runtime's host loops keep OpenMP's threads"
for kind in gemm gemm_bias gemm_gelu_bias gemm_bias_res gemm_dgrad gemm_dgelu gemm_wgrad_bias \
            gemm_wgrad attn_fwd layernorm_bwd adam; do
    [ "$(q "SELECT count(*) FROM kernel_samples WHERE device = 'H100-SXM5-80GB' AND kind = '$kind'")" -gt 0 ] ||
        fail "no $kind samples under the cluster's device"
done
[ "$(q "SELECT count(*) FROM kernel_samples WHERE device = 'cpu'")" = 0 ] ||
    fail "nothing is filed under the CPU"
[ "$(q "SELECT status FROM profile_runs ORDER BY id DESC LIMIT 1")" = done ] ||
    fail "the run is recorded as done"
# the device and the CUDA libraries it ran through, as the shipped profiles date them
# (the driver's release where /proc/driver/nvidia/version exists: not in emulation)
q "SELECT versions FROM profile_runs" |
    grep -Eq "\(compute capability 9\.0, 132 SMs\); (driver [0-9.]+, )?CUDA driver API .*, runtime .*; cuBLASLt " ||
    fail "the run records the device and the CUDA libraries: $(q "SELECT versions FROM profile_runs")"

# FP8 (--precision fp8): the layers' GEMMs under their fp8 keys, timed as gemm_fp8 alone
# in each role the runtime calls it in, then priced from the table by ptplan --precision
# fp8; the same table without them leaves them to the analytic model
OMP_NUM_THREADS=2 run 0 "$build/ptprofile" --db "$tmp/g.db" --backend cuda --model tiny \
    --cluster dgx-h100 --devices 1 --global-batch 2 --max-mbs 2 --no-collectives --quick \
    --precision fp8 --resume
out_has "layouts of tiny on dgx-h100 in bf16+fp8(current)" "the run names the precision"
err_has "gemm_dgrad_write:fp8:m=.*GFLOP/s" "FP8 GEMMs are timed"
grep -q "FP8 emulated" "$tmp/err" && fail "the CUDA backend's FP8 GEMMs are not emulated"
# tiny has biases: its forwards carry them, and its weight gradients leave them to the
# data gradients' casts (planner/ops.c's fp8_dbias_in_dgrad); the fused forms (GELU,
# residual) have no FP8 form, and the planner lists none with FP8
for kind in gemm_bias gemm_dgrad gemm_dgrad_write gemm_wgrad; do
    [ "$(q "SELECT count(*) FROM kernel_samples WHERE device = 'H100-SXM5-80GB' AND kind = '$kind' AND dtype = 'fp8' AND op_key LIKE '$kind:fp8:m=%'")" -gt 0 ] ||
        fail "no fp8 $kind samples"
done
[ "$(q "SELECT count(*) FROM kernel_samples WHERE dtype = 'fp8' AND kind IN ('gemm_gelu_bias', 'gemm_bias_res', 'gemm_dgelu', 'gemm_wgrad_bias')")" = 0 ] ||
    fail "no fused GEMM forms in FP8, and no weight gradient with its bias's"
# "MEASURED ANALYTIC": the shares of ptplan --precision fp8's step priced from db $1
fp8_priced() {
    run 0 "$build/ptplan" --model tiny --cluster dgx-h100 --devices 1 --global-batch 2 \
        --precision fp8 --db "$1" --layout tp=1,pp=1,dp=1,mbs=2 --explain --no-out
    sed -n "s/^priced from: \([0-9.]*\)% measured, .* \([0-9.]*\)% analytic$/\1 \2/p" "$tmp/out"
}
cp "$tmp/g.db" "$tmp/nofp8.db"
sqlite3 "$tmp/nofp8.db" "DELETE FROM kernel_samples WHERE dtype = 'fp8'"
set -- $(fp8_priced "$tmp/g.db") $(fp8_priced "$tmp/nofp8.db")
[ $# = 4 ] && awk -v m="$1" -v a="$2" -v a0="$4" 'BEGIN { exit !(m > 0 && a < a0) }' ||
    fail "the FP8 GEMMs are priced from the table (with their samples, without: $*)"

# a recorded run's op timings become cost samples, unless its backend ran with
# PT_KCUDA_DETERMINISTIC=0: the tables price the deterministic kernels, so that run is
# kept and its samples are not (whatever the load check finds: no timing decides this)
run 0 "$build/ptplan" --model tiny --cluster dgx-h100 --devices 1 --global-batch 2 \
    --out "$tmp/plan.json"
run 0 env PT_KCUDA_DETERMINISTIC=0 "$build/ptrun" "$tmp/plan.json" --steps 3 --record \
    --db "$tmp/g.db" --val-every 0 --sample 0
out_has "not calibrated into the tables: it ran with nondeterministic kernels" \
    "a nondeterministic run's timings are not calibrated into the tables"
[ "$(q "SELECT count(*) FROM kernel_samples WHERE source = 'trace'")" = 0 ] ||
    fail "no cost samples from the nondeterministic run"
run 0 "$build/ptrun" "$tmp/plan.json" --steps 3 --record --db "$tmp/g.db" --val-every 0 \
    --sample 0
grep -q "nondeterministic" "$tmp/out" && fail "the deterministic run is not called nondeterministic"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all ptprofile --backend cuda checks passed"
