#!/bin/sh
# The register and shared-memory budget of the CUDA kernels (ctest label cuda, registered
# where nvcc exists): compiles every kernels/cuda/*.cu for sm_90 with ptxas's report
# (-Xptxas -v), prints each function's registers, stack frame, spill stores and loads and
# static shared memory, and fails when any function spills (a spill is local memory
# traffic in the inner loops), uses more than 255 registers (the sm_90 limit per thread),
# or more than 227 KiB of static shared memory (the sm_90 per-block limit; dynamic shared
# memory is checked when the backend starts, against the device's opt-in limit).
# attention_cudnn.cu is compiled when nvcc finds cudnn.h with the flags given.
#   usage: ptxas_budget.sh NVCC KERNELS_DIR [NVCC_FLAGS...]
set -eu
nvcc="$1"
kdir="$2"
shift 2
smem_limit=$((227 * 1024))
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

demangle=cat
for d in "$(dirname "$nvcc")/cu++filt" c++filt; do
    if command -v "$d" >/dev/null 2>&1; then
        demangle="$d"
        break
    fi
done

for src in "$kdir"/cuda/*.cu; do
    name="$(basename "$src")"
    if [ "$name" = attention_cudnn.cu ] &&
       ! printf '#include <cudnn.h>\n' | "$nvcc" "$@" -E -x cu - >/dev/null 2>&1; then
        echo "ptxas_budget: $name skipped: cudnn.h not found with the flags given"
        continue
    fi
    if ! "$nvcc" -std=c++17 -arch=sm_90 -Xptxas -v -DPT_KERNELS_HAVE_CUDA \
           -I"$kdir" -I"$kdir/cuda" "$@" -c -o "$work/$name.o" "$src" \
           >"$work/$name.log" 2>&1; then
        cat "$work/$name.log"
        echo "ptxas_budget: $name does not compile"
        exit 1
    fi
    # one line per function: file, mangled name, registers, stack, spill stores and
    # loads, static shared memory
    awk -v file="$name" '
        /Function properties for / { fn = $NF; stack[fn] = 0; st[fn] = 0; ld[fn] = 0 }
        /bytes stack frame/ {
            for (i = 1; i <= NF; i++) {
                if ($(i + 1) == "bytes" && $(i + 2) == "stack") stack[fn] = $i
                if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) == "stores,") st[fn] = $i
                if ($(i + 1) == "bytes" && $(i + 2) == "spill" && $(i + 3) == "loads") ld[fn] = $i
            }
        }
        /Compiling entry function/ { entry = $0; sub(/.*function \047/, "", entry); sub(/\047.*/, "", entry) }
        /Used [0-9]+ registers/ {
            regs = 0; smem = 0
            for (i = 1; i <= NF; i++) {
                if ($i == "Used") regs = $(i + 1)
                if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem = $i
            }
            f = entry != "" ? entry : fn
            printf "%s %s %d %d %d %d %d\n", file, f, regs, stack[f] + 0, st[f] + 0, ld[f] + 0, smem
            printed[f] = 1
            entry = ""
        }
        END { # device functions compiled on their own (called, not inlined): no register line
            for (f in stack)
                if (!printed[f])
                    printf "%s %s %d %d %d %d %d\n", file, f, 0, stack[f], st[f], ld[f], 0
        }' "$work/$name.log" >>"$work/table"
done

[ -s "$work/table" ] || { echo "ptxas_budget: ptxas reported no function"; exit 1; }
printf '%-16s %5s %6s %6s %6s %7s  %s\n' file regs stack spillS spillL smem kernel
fail=0
while read -r file fn regs stack st ld smem; do
    pretty="$(printf '%s\n' "$fn" | "$demangle" | cut -c1-90)"
    verdict=""
    if [ "$st" -gt 0 ] || [ "$ld" -gt 0 ]; then verdict=" SPILLS"; fi
    if [ "$regs" -gt 255 ]; then verdict="$verdict REGISTERS"; fi
    if [ "$smem" -gt "$smem_limit" ]; then verdict="$verdict SHARED"; fi
    [ -n "$verdict" ] && fail=1
    printf '%-16s %5d %6d %6d %6d %7d  %s%s\n' "$file" "$regs" "$stack" "$st" "$ld" "$smem" \
        "$pretty" "$verdict"
done <"$work/table"
if [ "$fail" -ne 0 ]; then
    echo "ptxas_budget: FAILED: spills, more than 255 registers, or more than $smem_limit bytes of static shared memory (marked above)"
    exit 1
fi
echo "ptxas_budget: every function within budget"
