#!/bin/sh
# Runs the libFuzzer harnesses of tests/fuzz/ for longer than ctest does (docs/testing.md:
# Fuzzing): each for SECONDS, one at a time, from a corpus kept in BUILD/corpus/<format>/
# (seeded from tests/fuzz/corpus/<format>/, merged down to the inputs that add
# coverage after each run, so it grows from run to run). Prints per harness the
# inputs executed, libFuzzer's coverage (cov: edges, ft: features) and corpus size at
# the end, and any crash, whose input stays in BUILD/crashes/<format>/. Configures and
# builds BUILD with clang when its harnesses are missing.
#   usage: scripts/fuzz.sh [SECONDS [FORMAT...]]    (SECONDS 300; all formats)
#   env:   PT_FUZZ_BUILD (build-fuzz), PT_FUZZ_JOBS (cores for the build: all)
# Exit status: 0 when nothing crashed, 1 when a harness crashed, 2 on bad usage.
set -eu
cd "$(dirname "$0")/.."

seconds="${1:-300}"
[ $# -gt 0 ] && shift
case "$seconds" in
    ''|*[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS [FORMAT...]]" >&2; exit 2 ;;
esac
build="${PT_FUZZ_BUILD:-build-fuzz}"
formats="$*"
[ -n "$formats" ] || formats=$(ls tests/fuzz/corpus)
for f in $formats; do
    [ -f "tests/fuzz/fuzz_$f.c" ] || { echo "fuzz.sh: no harness tests/fuzz/fuzz_$f.c" >&2; exit 2; }
done

if [ ! -f "$build/CMakeCache.txt" ]; then
    CC="${CC:-clang}" cmake -S . -B "$build" -DPT_FUZZ=ON -DPT_SANITIZE=ON >/dev/null
fi
cmake --build "$build" --target fuzz_all -j "${PT_FUZZ_JOBS:-$(nproc)}" >/dev/null

crashed=0
printf '%-12s %10s %8s %8s %8s  %s\n' format executions cov ft corpus found
for f in $formats; do
    harness="$build/tests/fuzz/fuzz_$f"
    corpus="$build/corpus/$f" crashes="$build/crashes/$f" log="$build/logs/$f.log"
    mkdir -p "$corpus" "$crashes" "$build/logs"
    before=$(ls "$crashes" | wc -l)
    rc=0
    "$harness" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$crashes/" \
        "$corpus" "tests/fuzz/corpus/$f" >"$log" 2>&1 || rc=$?
    # the last status line: "#N <event> cov: C ft: F corp: ..."
    stats=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -n 1)
    cov=$(echo "$stats" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(echo "$stats" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    # keep only the inputs that add coverage
    merged="$corpus.merge"
    rm -rf "$merged"
    mkdir -p "$merged"
    if "$harness" -merge=1 -rss_limit_mb=2048 -timeout=10 "$merged" "$corpus" \
            >>"$log" 2>&1; then
        rm -rf "$corpus"
        mv "$merged" "$corpus"
    else
        rm -rf "$merged"
    fi
    found="nothing"
    if [ "$rc" -ne 0 ]; then
        crashed=1
        new=$(ls -t "$crashes" | head -n 1)
        why=$(grep -m 1 -E 'ERROR: |runtime error: |check failed' "$log" | cut -c 1-100)
        found="CRASH $crashes/$new ($(ls "$crashes" | wc -l) there, $before before): $why"
    fi
    printf '%-12s %10s %8s %8s %8s  %s\n' "$f" "${execs:-?}" "${cov:-?}" "${ft:-?}" \
        "$(ls "$corpus" | wc -l)" "$found"
done
[ "$crashed" -eq 0 ] || echo "fuzz.sh: logs in $build/logs/; minimize a crash with" \
    "HARNESS -minimize_crash=1 -runs=10000 FILE, then see docs/testing.md (Fuzzing)"
exit "$crashed"
