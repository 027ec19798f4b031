#!/bin/sh
# One fuzz test (tests/fuzz/CMakeLists.txt): the harness runs every file of
# regressions/<format>/ once, then fuzzes for SECONDS from corpus/<format>/. New inputs
# go to a fresh folder in the build tree, never into the source tree; a crash fails
# the test and its input stays in BUILD_DIR/crashes/<format>/ (minimize it with
# `HARNESS -minimize_crash=1 -runs=10000 FILE`, then add it to regressions/<format>/).
#   usage: run_fuzz.sh HARNESS SOURCE_DIR BUILD_DIR FORMAT SECONDS
set -eu
harness=$1 src=$2 build=$3 format=$4 seconds=$5

regressions=$(find "$src/regressions/$format" -type f 2>/dev/null | sort)
if [ -n "$regressions" ]; then
    echo "== regressions/$format"
    # shellcheck disable=SC2086 # one argument per file (names have no spaces)
    "$harness" -rss_limit_mb=2048 -timeout=10 $regressions
fi

work="$build/work/$format" crashes="$build/crashes/$format"
rm -rf "$work"
mkdir -p "$work" "$crashes"
echo "== fuzzing $format for ${seconds}s from corpus/$format"
"$harness" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$work" "$src/corpus/$format"
