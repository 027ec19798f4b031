#!/bin/sh
# Packs a CUDA build of this project for a GPU machine that has the NVIDIA driver, the
# CUDA libraries (cudart, cuBLAS/cuBLASLt, NCCL), PyTorch and Python but no package
# manager: one archive, BUNDLE_DIR/bundle.tar.xz (about 20 MB), that scripts/gpucheck.sh
# unpacks there. What travels:
#   bin/   ptrun, ptplan, ptprofile, ptprofile-coll, ptcalib, the GPU test and benchmark
#   lib/   every shared library those need that such a machine lacks: jansson, SQLite,
#          OpenBLAS (with libgfortran), Open MPI's libraries, hwloc, libevent, PMIx
#   data/  the default corpus (Debian's GPL-3 text), for the CPU run's first loss
#   ompi/  Open MPI's launcher (mpirun), its plugins and help texts, relocatable
#          through OPAL_PREFIX (Open MPI FAQ, "relocating an installation"); PMIx's
#          plugins through PMIX_INSTALL_PREFIX
# What does not travel (the machine's own copies are used): glibc, libstdc++, libgcc,
# the CUDA driver, cudart, cuBLAS, cuBLASLt, cuDNN and NCCL, which are hundreds of MB.
#   usage: scripts/gpubundle.sh [BUILD_DIR [BUNDLE_DIR]]   (build, .gpu)
# The build must have the CUDA backend (ptplan --version says so); BUNDLE_DIR is
# ignored by git (.git/info/exclude) so that it can travel with the device tool's carry.
set -eu
cd "$(dirname "$0")/.."
build="${1:-build}"
out="${2:-.gpu}"

if ! "$build/ptplan" --version 2>/dev/null | grep -q "CUDA backend: yes"; then
    echo "gpubundle: $build has no CUDA build (run scripts/setup.sh $build on a machine with nvcc)" >&2
    exit 1
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/ompi/bin"

bins="$build/ptrun $build/ptplan $build/ptprofile $build/ptprofile-coll $build/ptcalib \
$build/bench_kernels_cuda $build/tests/test_kernels_cuda $build/tests/test_kernels"
for b in $bins; do
    [ -x "$b" ] || { echo "gpubundle: missing $b" >&2; exit 1; }
    cp "$b" "$stage/bin/"
done
# the default corpus, which a GPU machine's image may lack
mkdir -p "$stage/data" && cp /usr/share/common-licenses/GPL-3 "$stage/data/"
cp "$(readlink -f /usr/bin/mpirun)" "$stage/ompi/bin/mpirun"
cp "$(command -v orted)" "$stage/ompi/bin/orted"

# Open MPI's tree, laid out under a prefix as Debian installs it under /usr, so that
# OPAL_PREFIX=<that prefix> finds plugins, help texts and settings; PMIx likewise
ompi_lib=/usr/lib/x86_64-linux-gnu/openmpi
mkdir -p "$stage/ompi/lib/x86_64-linux-gnu/openmpi/lib" "$stage/ompi/share" "$stage/ompi/etc"
cp -a "$ompi_lib/lib/openmpi3" "$stage/ompi/lib/x86_64-linux-gnu/openmpi/lib/"
cp -a /usr/share/openmpi "$stage/ompi/share/"
cp -a /etc/openmpi "$stage/ompi/etc/"
[ -d /usr/lib/x86_64-linux-gnu/pmix2 ] && cp -aL /usr/lib/x86_64-linux-gnu/pmix2 "$stage/pmix2"

# the shared libraries all of that needs, less what the GPU machine has of its own
skip='linux-vdso|ld-linux|/libc\.so|/libm\.so|/libdl\.so|/libpthread\.so|/librt\.so|/libstdc\+\+|/libgcc_s|/libcuda\.so|/libcudart|/libcublas|/libnccl|/libcudnn|/libnvidia'
objs=$(find "$stage" -type f \( -perm -u+x -o -name '*.so*' \))
for o in $objs; do
    ldd "$o" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | grep -Ev "$skip" | while read -r lib; do
    cp -L "$lib" "$stage/lib/"
done

mkdir -p "$out"
tar -C "$stage" -cf - . | xz -T0 -6 > "$out/bundle.tar.xz"
case $out in
/*) ;; # outside the tree: nothing for git to ignore
*)
    exclude="$(git rev-parse --git-path info/exclude 2>/dev/null || echo .git/info/exclude)"
    mkdir -p "$(dirname "$exclude")"
    grep -qx "/$out/" "$exclude" 2>/dev/null || echo "/$out/" >> "$exclude"
    ;;
esac
echo "gpubundle: $out/bundle.tar.xz ($(du -h "$out/bundle.tar.xz" | cut -f1)):" \
     "$(ls "$stage/bin" | tr '\n' ' ')and $(ls "$stage/lib" | wc -l) libraries"
