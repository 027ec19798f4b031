#!/bin/sh
# Every layout ptplan offers, ptrun trains: for the built-in tiny model on this machine's
# CPU cluster (ptplan --devices N) at world sizes 1, 2 and 4, ptplan --list-layouts names
# the layouts the search would price; each is written as a plan (ptplan --layout ...
# --out) and trained for one step under mpirun with that many ranks, which must exit 0
# with a finite loss. What ptplan writes and ptrun cannot run fails here.
#
# World 1 runs every layout. Worlds 2 and 4 have 192 and 912 (one launch is seconds on
# two busy cores), so they run a deterministic subset that covers every grid (tp, cp,
# pp, dp), vp and ZeRO stage: the layouts are grouped by those (11 groups at world 2, 32
# at world 4), and from the k-th group (in ptplan's order) the layout at index k modulo
# the group's size is run, so sp, overlaps, schedule, uneven splits, micro-batch size
# and recomputation rotate over the groups. PT_EVERY_LAYOUT=all runs every layout of
# every world (over an hour on two cores).
#   usage: cli_every_layout.sh BUILD_DIR
set -u
build="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
export PT_COSTS_DB="$tmp/none.db" # analytic figures: no user's cost table leaks in

# pick WORLD < all layouts > chosen: every layout at world 1 or with PT_EVERY_LAYOUT=all,
# else the subset described above.
pick() {
    if [ "$1" = 1 ] || [ "${PT_EVERY_LAYOUT:-}" = all ]; then
        cat
        return
    fi
    cat >"$tmp/all"
    awk '{ s = $0; sub(/,order=.*/, "", s); sub(/sp=[01],/, "", s); sub(/,mbs=.*/, "", s) }
         NR == FNR { size[s]++; next }
         !(s in ord) { ord[s] = n++ }
         { if (seen[s]++ == ord[s] % size[s]) print }' "$tmp/all" "$tmp/all"
}

total=0
for world in 1 2 4; do
    "$build/ptplan" --devices "$world" --list-layouts >"$tmp/layouts" 2>"$tmp/err" ||
        { fail "ptplan --devices $world --list-layouts: $(cat "$tmp/err")"; continue; }
    listed=$(wc -l <"$tmp/layouts")
    [ "$listed" -gt 0 ] || fail "ptplan lists no layout for world $world"
    pick "$world" <"$tmp/layouts" >"$tmp/chosen"
    ran=0
    while IFS= read -r layout; do
        ran=$((ran + 1))
        plan="$tmp/plan-$world-$ran.json"
        if ! "$build/ptplan" --devices "$world" --layout "$layout" --out "$plan" \
                </dev/null >"$tmp/out" 2>"$tmp/err"; then
            fail "ptplan refuses the layout it listed: $layout: $(tail -3 "$tmp/out" "$tmp/err")"
            continue
        fi
        launch="$build/ptrun"
        [ "$world" -gt 1 ] && launch="$mpirun -np $world $build/ptrun"
        # shellcheck disable=SC2086
        if ! $launch "$plan" --steps 1 --val-every 0 --val-batches 1 --sample 4 \
                </dev/null >"$tmp/out" 2>"$tmp/err"; then
            fail "world $world, $layout: ptrun failed: $(tail -3 "$tmp/err")"
            continue
        fi
        loss=$(sed -n 's/^step *1\/1 *loss *\([^ ]*\) .*/\1/p' "$tmp/out")
        awk -v l="$loss" 'BEGIN { exit !(l != "" && l + 0 == l && l > 0 && l < 100) }' ||
            fail "world $world, $layout: no finite loss line (got '$loss')"
        rm -f "$plan"
    done <"$tmp/chosen"
    echo "world $world: ran $ran of the $listed layouts ptplan lists"
    total=$((total + ran))
done
echo "$total layouts trained"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "every layout run passed"
