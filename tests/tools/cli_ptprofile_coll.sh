#!/bin/sh
# ptprofile-coll as ptprofile runs it, under mpirun on 2 and 4 ranks: the header,
# one sample per op × group × size with positive times, nothing left half-written,
# and every bad option refused by rank 0 with one clear message, a non-zero exit and
# no hang; --backend nccl refused here (built without NCCL, or no GPU); and the ops
# going through the communication layer (comm/): its PT_COMM_TIMEOUT read, its
# watchdog ending a run whose deadline no wait meets.
#   usage: cli_ptprofile_coll.sh PATH/TO/ptprofile-coll PATH/TO/mpirun
#
# mpirun flags (Open MPI 4.1, Debian 12, in a container, as root, on 2 cores):
#   --allow-run-as-root  Open MPI refuses root without it
#   --oversubscribe      more ranks than cores (-np 4 on 2 cores)
#   -q                   no "Primary job terminated normally, but 1 process returned
#                        a non-zero exit code" banner after an error: rank 0's
#                        message is then all of stderr
# The default transports (shared memory "vader", with its default single-copy
# mechanism) work here; no --mca setting is needed.
set -u
coll="$1"
mpirun="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Open MPI's session folders (as in cli_lib.sh): this test's own, and one per run of
# those started side by side below, whose jobs would otherwise race over one top folder.
export OMPI_MCA_orte_tmpdir_base="$tmp/mpi"
failures=0
cd "$tmp" || exit 1

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NP EXPECTED_EXIT ARGS...: stdout in $tmp/out, stderr in $tmp/err; 124 is a hang.
run() {
    np=$1 want=$2
    shift 2
    timeout 60 "$mpirun" --allow-run-as-root --oversubscribe -q -np "$np" "$coll" "$@" \
        >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" != 124 ] || fail "-np $np $* hung (killed after 60 s)"
    if [ "$want" = 0 ]; then
        [ "$got" = 0 ] || fail "-np $np $* exited $got, want 0; stderr: $(cat "$tmp/err")"
    else
        [ "$got" != 0 ] || fail "-np $np $* exited 0, want an error"
    fi
}

# refuse MESSAGE ARGS...: starts, in the background and in a folder of its own, a run
# on 2 ranks that must exit non-zero with MESSAGE as the one line of stderr (printed
# by rank 0 only) and leave no file named bad.jsonl* behind; check_refused checks
# them all once they are done. (They run four at a time: each mostly waits on mpirun,
# but each rank loads the kernel libraries the communication layer can use — CUDA's
# among them where the toolkit is installed — and sixteen at once under the
# sanitizers on two cores took more than the 60 s that tells a hang.)
cases=0
refuse() {
    [ "$cases" -gt 0 ] && [ $((cases % 4)) = 0 ] && wait
    cases=$((cases + 1))
    d="$tmp/refuse$cases"
    mkdir "$d"
    printf '%s\n' "$1" >"$d/msg"
    shift
    printf '%s ' "$@" >"$d/args"
    (cd "$d" && OMPI_MCA_orte_tmpdir_base="$d/mpi" timeout 60 "$mpirun" --allow-run-as-root \
        --oversubscribe -q -np 2 "$coll" "$@" >"$d/out" 2>"$d/err"; echo $? >"$d/rc") &
}
check_refused() {
    wait
    i=1
    while [ "$i" -le "$cases" ]; do
        d="$tmp/refuse$i" i=$((i + 1))
        what="-np 2 $(cat "$d/args")"
        case $(cat "$d/rc") in
        0) fail "$what: exited 0, want an error" ;;
        124) fail "$what: hung (killed after 60 s)" ;;
        esac
        grep -q -- "$(cat "$d/msg")" "$d/err" ||
            fail "$what: stderr lacks '$(cat "$d/msg")'; got: $(cat "$d/err")"
        [ "$(wc -l <"$d/err")" -eq 1 ] || fail "$what: want one error line, got: $(cat "$d/err")"
        ! ls "$d"/bad.jsonl* >/dev/null 2>&1 || fail "$what: left an output file"
    done
}

# The samples of FILE as "op bytes group ranks_per_node time_s busbw repeats" lines.
samples() {
    n='\([0-9]*\)' v='\([^,]*\)'
    re='^{"type":"coll","backend":"mpi","op":"\([a-z]*\)","bytes":'"$n"',"group":'"$n"
    re="$re"',"ranks_per_node":'"$n"',"time_s":'"$v"',"busbw_Bps":'"$v"',"repeats":'"$n"'}$'
    sed -n "s/$re/\1 \2 \3 \4 \5 \6 \7/p" "$1"
}

# expected NP: every "op bytes group" for --quick --max-bytes 64K on NP ranks. Sizes
# are 1K, 4K, 16K, 64K; all-gather, reduce-scatter and all-to-all round down to a
# multiple of 4·group bytes.
expected() {
    g=2
    while [ "$g" -le "$1" ]; do
        for op in allreduce allgather reducescatter alltoall broadcast sendrecv; do
            for b in 1024 4096 16384 65536; do
                case $op in
                allgather | reducescatter | alltoall) echo "$op $((b - b % (4 * g))) $g" ;;
                *) echo "$op $b $g" ;;
                esac
            done
        done
        g=$((g + 1))
    done | sort
}

# check_run NP: the output of a --quick run on NP ranks (one node).
check_run() {
    np=$1 f="$tmp/c$1.jsonl"
    [ -f "$f" ] || { fail "-np $np wrote no $f"; return; }
    ! ls "$f".tmp-* >/dev/null 2>&1 || fail "-np $np left a temporary: $(ls "$f".tmp-*)"
    header='^{"type":"header","backend":"mpi","library":"[^"]*MPI[^"]*","host":"[^"]*",'
    header="$header\"world\":$np,\"nodes\":1,\"started_at\":\"[0-9-]*T[0-9:]*Z\"}\$"
    head -n 1 "$f" | grep -q "$header" || fail "-np $np: bad header: $(head -n 1 "$f")"
    [ "$(samples "$f" | wc -l)" -eq "$(($(wc -l <"$f") - 1))" ] ||
        fail "-np $np: lines that are not samples: $(grep -v '"type":"coll"' "$f" | tail -n +2)"
    samples "$f" | awk '{print $1, $2, $3}' | sort >"$tmp/got"
    expected "$np" | diff "$tmp/got" - >"$tmp/diff" ||
        fail "-np $np: samples differ from every op × group × size: $(cat "$tmp/diff")"
    samples "$f" | awk '$4 != $3 || !($5 > 0) || !($6 > 0) || $7 != 3' >"$tmp/odd"
    [ ! -s "$tmp/odd" ] ||
        fail "-np $np: ranks_per_node != group, time or busbw <= 0, or repeats != 3 in" \
            "$(cat "$tmp/odd")"
    last=$((6 * (np - 1)))
    grep -q "sendrecv over $np ranks ($np per node): 4 sizes in .* \[$last/$last\]" "$tmp/err" ||
        fail "-np $np: progress lines missing; stderr: $(cat "$tmp/err")"
}

# ---- measuring -------------------------------------------------------------------------
for np in 2 4; do
    run "$np" 0 --out "$tmp/c$np.jsonl" --quick --max-bytes 64K --progress lines
    check_run "$np"
done

# A subset of ops and groups, and the cap: each point stops after one repeat.
run 4 0 --out "$tmp/s.jsonl" --ops sendrecv,allreduce --groups 4,2 --min-bytes 4096 \
    --max-bytes 16384 --max-seconds-per-point 1e-9 --progress none
[ ! -s "$tmp/err" ] || fail "--progress none printed: $(cat "$tmp/err")"
samples "$tmp/s.jsonl" | awk '{print $1, $2, $3, $7}' | sort >"$tmp/got"
printf '%s\n' "allreduce 16384 2 1" "allreduce 16384 4 1" "allreduce 4096 2 1" \
    "allreduce 4096 4 1" "allreduce 8192 2 1" "allreduce 8192 4 1" "sendrecv 16384 2 1" \
    "sendrecv 16384 4 1" "sendrecv 4096 2 1" "sendrecv 4096 4 1" "sendrecv 8192 2 1" \
    "sendrecv 8192 4 1" | diff "$tmp/got" - >"$tmp/diff" ||
    fail "--ops/--groups/--max-seconds-per-point: wrong samples: $(cat "$tmp/diff")"

run 2 0 --help
grep -q '^usage: mpirun -np N ptprofile-coll' "$tmp/out" || fail "--help prints no usage"

# ---- refused -----------------------------------------------------------------------------
refuse "unknown option '--bogus'" --out bad.jsonl --bogus
refuse "option '--ops' needs a value" --out bad.jsonl --ops
refuse "--out FILE is required" --quick
refuse "unknown collective 'gather'" --out bad.jsonl --ops allreduce,gather
refuse "--groups 3: larger than the world of 2 ranks" --out bad.jsonl --groups 2,3
refuse "--groups '1': want an integer from 2" --out bad.jsonl --groups 1
refuse "--min-bytes 2: want at least 4" --out bad.jsonl --min-bytes 2
refuse "--max-bytes '1x': want a byte count" --out bad.jsonl --max-bytes 1x
refuse "--max-bytes 1024 is smaller than --min-bytes 4096" --out bad.jsonl --min-bytes 4K \
    --max-bytes 1024
refuse "--repeats '0': want an integer from 1" --out bad.jsonl --repeats 0
refuse "--max-seconds-per-point 'soon'" --out bad.jsonl --max-seconds-per-point soon
refuse "--backend 'gloo': want mpi or nccl" --out bad.jsonl --backend gloo
refuse "--progress 'loud'" --out bad.jsonl --progress loud
refuse "unexpected argument 'extra'" --out bad.jsonl extra
refuse "cannot write 'no-such-dir/bad.jsonl': No such file" --out no-such-dir/bad.jsonl --quick
# No GPU in this test's world: NCCL is either not built or finds no device.
refuse "built without NCCL\|no CUDA device: --backend nccl needs a GPU" --out bad.jsonl \
    --backend nccl --quick
check_refused

# The collectives are the communication layer's (comm/), the code ptrun runs: its
# deadline (PT_COMM_TIMEOUT) is read and a bad one refused, and a deadline no wait can
# meet ends the run with the watchdog's report.
export PT_COMM_TIMEOUT=soon
run 2 1 --out "$tmp/t.jsonl" --quick
grep -q "PT_COMM_TIMEOUT='soon': expected seconds" "$tmp/err" ||
    fail "PT_COMM_TIMEOUT=soon: stderr: $(cat "$tmp/err")"
[ ! -e "$tmp/t.jsonl" ] || fail "PT_COMM_TIMEOUT=soon wrote an output file"
PT_COMM_TIMEOUT=0.000001
run 2 1 --out "$tmp/t.jsonl" --quick --max-bytes 64K --progress none
grep -q "comm timeout: .* did not finish within 0 s" "$tmp/err" ||
    fail "PT_COMM_TIMEOUT=0.000001: no watchdog report; stderr: $(cat "$tmp/err")"
[ ! -e "$tmp/t.jsonl" ] || fail "PT_COMM_TIMEOUT=0.000001 left an output file"
unset PT_COMM_TIMEOUT

# One rank is not a group.
run 1 1 --out "$tmp/one.jsonl" --quick
grep -q "needs at least 2 ranks" "$tmp/err" || fail "-np 1: stderr: $(cat "$tmp/err")"
[ ! -e "$tmp/one.jsonl" ] || fail "-np 1 wrote an output file"

[ "$failures" = 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "cli_ptprofile_coll: all checks passed"
