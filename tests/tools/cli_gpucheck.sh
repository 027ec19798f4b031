#!/bin/sh
# scripts/gpucheck.sh and scripts/gpubundle.sh up to the GPU: on a machine without one the
# check still plans every job, says which steps it could not run and why, writes its
# summary and exits 1 (where there is a GPU, only what does not need one is checked); with a CUDA build, the bundle holds the tools, the libraries a
# bare GPU machine lacks and a relocatable mpirun, and the check runs from it.
#   usage: cli_gpucheck.sh SOURCE_DIR BUILD_DIR
set -u
src="$1"
build="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { grep -q -- "$2" "$1" || fail "$1 lacks '$2': $(head -c 2000 "$1")"; }

# what a step without a GPU says; on a machine with one, the steps run instead
gpu=0
nvidia-smi -L > /dev/null 2>&1 && gpu=1

# no bundle: the build's own binaries
GPUCHECK_BUNDLE=/nonexistent GPUCHECK_BUILD="$build" GPUCHECK_LIMIT_S=120 \
    "$src/scripts/gpucheck.sh" "$tmp/out" env mpi > "$tmp/log" 2>&1
rc=$?
[ "$gpu" = 1 ] || [ "$rc" = 1 ] || fail "gpucheck without a GPU exited $rc, want 1"
sum="$tmp/out/summary.md"
[ -f "$sum" ] || fail "no summary.md"
has "$sum" "## Machine"
has "$sum" "mpi_dp2.plan: ok"
has "$sum" "mpi_pp2.plan: ok"
# tensor, context parallelism and ZeRO are planned for the GPU as well
has "$sum" "mpi_tp2.plan: ok"
has "$sum" "mpi_cp2.plan: ok"
has "$sum" "mpi_cp2cp_comma2a.plan: ok"
has "$sum" "mpi_cp4cp_comma2ap2pcp_a2a2.plan: ok"
has "$sum" "mpi_dp2zero3.plan: ok"
if [ "$gpu" = 0 ]; then
    has "$sum" "mpi_dp1: FAILED"
    has "$tmp/out/mpi_dp1.log" "CUDA backend cannot start"
fi
# the plans are the two-rank layouts on the one node the check asks for
has "$tmp/out/mpi_dp2.json" '"dp": 2'
has "$tmp/out/mpi_pp2.json" '"pp": 2'
GPUCHECK_BUNDLE=/nonexistent "$src/scripts/gpucheck.sh" "$tmp/out2" nonsense > /dev/null 2>&1
[ $? = 1 ] || fail "an unknown stage is not an error"
has "$tmp/out2/summary.md" "unknown stage nonsense"
"$src/scripts/gpucheck.sh" > /dev/null 2>&1
[ $? = 2 ] || fail "gpucheck without OUTDIR is not a usage error"
# the fp8 stage trains both precisions on the checkout's own text (megabytes, so that
# 200 steps do not learn it by heart), planned here; another text must exist
GPUCHECK_BUNDLE=/nonexistent GPUCHECK_BUILD="$build" GPUCHECK_FP8_STEPS=2 GPUCHECK_PROFILE_FP8=0 \
    GPUCHECK_LIMIT_S=120 "$src/scripts/gpucheck.sh" "$tmp/out4" fp8 > /dev/null 2>&1
has "$tmp/out4/summary.md" "gpt2xl_bf16.plan: ok"
has "$tmp/out4/summary.md" "the runs' text: $tmp/out4/project.txt"
size=$(wc -c < "$tmp/out4/project.txt" 2>/dev/null || echo 0)
[ "$size" -gt 2000000 ] || fail "the fp8 stage's text is $size bytes, want megabytes"
grep -q "^int pt_fp8_forward" "$tmp/out4/project.txt" || fail "project.txt lacks runtime/fp8.c"
GPUCHECK_DATA="$tmp/none.txt" GPUCHECK_BUNDLE=/nonexistent "$src/scripts/gpucheck.sh" \
    "$tmp/out5" env > "$tmp/log5" 2>&1
[ $? = 2 ] || fail "a GPUCHECK_DATA that does not exist is not an error"
has "$tmp/log5" "GPUCHECK_DATA $tmp/none.txt: no such file"

if "$build/ptplan" --version | grep -q "CUDA backend: yes"; then
    "$src/scripts/gpubundle.sh" "$build" "$tmp/bundle" > "$tmp/blog" 2>&1 ||
        fail "gpubundle: $(tail -3 "$tmp/blog")"
    tar -tJf "$tmp/bundle/bundle.tar.xz" > "$tmp/list" 2>/dev/null
    for f in bin/ptrun bin/ptplan bin/test_kernels_cuda lib/libjansson.so.4 \
             lib/libsqlite3.so.0 lib/libopenblas.so.0 lib/libmpi.so.40 ompi/bin/mpirun \
             data/GPL-3; do
        grep -q "^\./$f\$" "$tmp/list" || fail "the bundle lacks $f"
    done
    grep -q "libcudart\|libnccl\|libcublas\|/libc\.so" "$tmp/list" &&
        fail "the bundle carries libraries the GPU machine has"
    # the check runs from the bundle: its ptplan plans, its test reports no GPU
    GPUCHECK_BUNDLE="$tmp/bundle/bundle.tar.xz" GPUCHECK_LIMIT_S=120 \
        "$src/scripts/gpucheck.sh" "$tmp/out3" env test > "$tmp/log3" 2>&1
    has "$tmp/out3/summary.md" "bundle: ptplan"
    [ "$gpu" = 1 ] || has "$tmp/out3/summary.md" "test_kernels_cuda: skipped, no GPU"
fi

[ "$failures" = 0 ] && echo "cli_gpucheck: all checks passed"
[ "$failures" = 0 ]
