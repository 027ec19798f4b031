#!/bin/sh
# All-to-all against all-reduce on this machine's MPI: ptprofile-coll (the
# communication layer's own calls, on host buffers) under mpirun on 2 and on 4 ranks,
# each size from 64 KiB to 16 MiB per rank, and for each size the bus bandwidth of the
# two collectives side by side with their ratio (all-to-all / all-reduce). Bus
# bandwidth follows nccl-tests (pt_coll_busbw, costmodels/names.c): the per-rank bytes
# over the time, times 2(n-1)/n for all-reduce and (n-1)/n for all-to-all, so that both
# read as the link bandwidth a ring implementation achieves. Each figure is
# ptprofile-coll's median over the repeats of the slowest rank's time. Figures, not a
# test: the ranks share this machine's cores with everything else.
#   usage: bench/bench_coll.sh BUILD_DIR [MAX_BYTES]
set -eu
build="$1"
max="${2:-16M}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpirun="mpirun -q --oversubscribe"
[ "$(id -u)" = 0 ] && mpirun="$mpirun --allow-run-as-root"
printf '%-5s %10s %14s %14s %9s\n' ranks bytes "all-reduce" "all-to-all" "a2a/ar"
printf '%-5s %10s %14s %14s %9s\n' "" "per rank" "busbw GB/s" "busbw GB/s" ""
for np in 2 4; do
    $mpirun -np "$np" "$build/ptprofile-coll" --out "$tmp/coll-$np.jsonl" --ops allreduce,alltoall \
        --groups "$np" --repeats 10 --min-bytes 64K --max-bytes "$max" --progress none >/dev/null
    grep '"type":"coll"' "$tmp/coll-$np.jsonl" |
        sed 's/.*"op":"\([a-z]*\)","bytes":\([0-9]*\),"group":\([0-9]*\),.*"busbw_Bps":\([0-9.e+-]*\),.*/\1 \2 \3 \4/' |
        awk '{ bw[$1, $2] = $4; if (!($2 in seen)) { seen[$2] = 1; sizes[n++] = $2 }; g = $3 }
            END {
                for (i = 0; i < n; i++) {
                    b = sizes[i]; ar = bw["allreduce", b]; a2a = bw["alltoall", b]
                    printf "%-5d %7d KiB %14.3f %14.3f %9.2f\n", g, b / 1024, ar / 1e9,
                           a2a / 1e9, (ar > 0 ? a2a / ar : 0)
                }
            }'
done
