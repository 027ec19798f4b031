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
