#!/bin/sh
# Installs the Debian packages the build needs (when missing; as root, or through
# sudo), then configures and builds the project.
#   usage: scripts/setup.sh [BUILD_DIR [CMAKE_ARGS...]]     (BUILD_DIR defaults to build)
set -eu
cd "$(dirname "$0")/.."

# clang and its runtimes build the fuzz harnesses (-DPT_FUZZ=ON): Debian 12's clang-14
# only recommends libclang-rt-14-dev, which holds libFuzzer and the sanitizers.
# libopenblas-openmp-dev: OpenBLAS on the OpenMP threads the CPU kernels use
# (kernels/CMakeLists.txt). g++: the CUDA emulation lane (-DPT_CUDA_EMU=ON) compiles
# kernels/cuda/ as C++.
packages="cmake make gcc g++ pkg-config libjansson-dev libsqlite3-dev sqlite3 libopenblas-dev libopenblas-openmp-dev libopenmpi-dev openmpi-bin gnuplot-nox clang libclang-rt-14-dev python3"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
fi

build="${1:-build}"
[ $# -gt 0 ] && shift
cmake -S . -B "$build" "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
