#!/bin/sh
# Spec files as users write them, through ptplan: a cluster that gives only the peak
# of the precision it plans, integers written as reals (40e9), the inter-node
# bandwidth derived from the node's NICs, and a file with several mistakes reported
# whole, one line per mistake naming the file and the field, with one non-zero exit.
# The clusters people buy now (DGX H200, DGX B200, GB200 NVL72), and an NVLink domain
# wider than a node: a GB200 NVL72 rack's tensor-parallel groups may span its trays.
#   usage: cli_specs.sh PATH/TO/ptplan
set -u
ptplan="$1"
. "$(dirname "$0")/cli_lib.sh"
cd "$tmp" || exit 1
# No user's cost table leaks in (its profile would fill the peaks a spec leaves out).
export PT_COSTS_DB="$tmp/no-such-costs.db"

# A node of 8 devices with only a bf16 peak, its memory as a real, and 4 NICs of
# 25 GB/s instead of a per-device inter-node bandwidth (4 x 25e9 / 8 = 12.5e9).
cat >"$tmp/bf16.json" <<'EOF'
{
  "name": "bf16-only",
  "nodes": 2,
  "devices_per_node": 8,
  "device": {"name": "Z100", "memory_bytes": 40e9, "memory_bandwidth": 2e12,
             "peak_flops": {"bf16": 312e12}},
  "intra_node": {"name": "nv", "bandwidth": 3e11, "latency": 3e-6},
  "inter_node": {"name": "ib", "latency": 5e-6, "nics": 4, "nic_bandwidth": 25e9}
}
EOF

# ---- the planned precision's peak ---------------------------------------------------
run 0 "$ptplan" --model tiny --cluster "$tmp/bf16.json" --precision bf16 --layout tp=1,dp=16
out_has "precision bf16" "bf16 planned on a bf16-only cluster"
out_has "x 8 Z100, 37.3 GiB each" "memory_bytes 40e9 read as 40,000,000,000 bytes"
run 0 "$ptplan" --model tiny --cluster "$tmp/bf16.json" --layout tp=1,dp=16
out_has "precision bf16" "the default precision of a bf16 device"
run 1 "$ptplan" --model tiny --cluster "$tmp/bf16.json" --precision fp32 --layout tp=1,dp=16
err_has "cluster 'bf16-only': field 'device.peak_flops.fp32' is absent or 0" \
    "fp32 refused naming the field"
err_has "precision fp32" "the refusal names the precision"
one_line_error "fp32 on a bf16-only cluster"
# A spec with no peak at all is not yet profiled, as `local`: planned from defaults.
sed 's/"peak_flops": {"bf16": 312e12}/"peak_flops": {}/' "$tmp/bf16.json" >"$tmp/none.json"
run 0 "$ptplan" --model tiny --cluster "$tmp/none.json" --precision fp32 --layout tp=1,dp=16

# ---- the NICs give the inter-node bandwidth; the dump loads back --------------------
run 0 "$ptplan" --dump-cluster "$tmp/bf16.json"
cp "$tmp/out" "$tmp/dumped.json"
out_has '"bandwidth": 1.25e10' "bandwidth derived from nics x nic_bandwidth / devices"
out_has '"nics": 4' "the NICs kept"
grep -q nic_bandwidth "$tmp/out" && fail "the dump states the bandwidth, not the NIC rate"
sed 's/"bandwidth": 1.25e10/"bandwidth": 2e10/' "$tmp/out" >"$tmp/edited.json"
run 0 "$ptplan" --dump-cluster "$tmp/edited.json"
out_has '"bandwidth": 2e10' "a dump whose bandwidth is edited loads with it"
out_has '"memory_bytes": 40000000000' "memory written as an integer"
run 0 "$ptplan" --dump-cluster "$tmp/dumped.json"
cmp -s "$tmp/out" "$tmp/dumped.json" || fail "dumped user cluster does not load back identically"
for c in dgx-a100-80g dgx-h100; do
    run 0 "$ptplan" --dump-cluster "$c"
    out_has '"nics": 8' "$c states its 8 compute NICs"
    cp "$tmp/out" "$tmp/$c.json"
    run 0 "$ptplan" --dump-cluster "$tmp/$c.json"
    cmp -s "$tmp/out" "$tmp/$c.json" || fail "dumped $c does not load back identically"
done
sed 's/"latency": 5e-6,/"bandwidth": 50e9, "latency": 5e-6,/' "$tmp/bf16.json" >"$tmp/nic-bad.json"
run 1 "$ptplan" --dump-cluster "$tmp/nic-bad.json"
err_has "nic-bad.json: field 'inter_node.bandwidth' = 5e+10 disagrees with nics x nic_bandwidth" \
    "a bandwidth the NICs cannot give"
one_line_error "inconsistent NICs"

# ---- clusters people buy now; the NVLink domain --------------------------------------
run 0 "$ptplan" --list-clusters
for c in dgx-h200 dgx-b200 gb200-nvl72; do out_has "^$c " "--list-clusters lists $c"; done
out_has "^gb200-nvl72 *18 *4 *GB200-186GB " "a GB200 NVL72 rack: 18 trays of 4 GPUs"
for c in dgx-h200 dgx-b200 gb200-nvl72; do
    run 0 "$ptplan" --dump-cluster "$c"
    cp "$tmp/out" "$tmp/$c.json"
    run 0 "$ptplan" --dump-cluster "$tmp/$c.json"
    cmp -s "$tmp/out" "$tmp/$c.json" || fail "dumped $c does not load back identically"
done
grep -q '"nvlink_domain": 72' "$tmp/gb200-nvl72.json" || fail "gb200-nvl72 dumps its 72-GPU domain"
grep -q nvlink_domain "$tmp/dgx-h200.json" && fail "dgx-h200's domain is its node: not written"
# Llama 3 70B on one rack, 18 trays x 4 = 72 GPUs, plans; a tp group of 8 spans two
# trays inside the rack's NVLink domain, and is refused where each tray is its own.
run 0 "$ptplan" --model llama3-70b --cluster gb200-nvl72 --nodes 18 --no-out
out_has "cluster gb200-nvl72: 18 node(s) x 4 GB200-186GB" "a rack of GB200 trays"
out_has "^1 " "a best layout on 72 GB200s"
run 0 "$ptplan" --model llama3-70b --cluster gb200-nvl72 --nodes 18 --global-batch 72 \
    --layout tp=8,dp=9,zero=1,sp=1 --no-out
grep -v nvlink_domain "$tmp/gb200-nvl72.json" >"$tmp/trays.json"
run 3 "$ptplan" --model llama3-70b --cluster "$tmp/trays.json" --global-batch 72 \
    --layout tp=8,dp=9,zero=1,sp=1 --no-out
out_has "tp_spans_nodes .*a tp group of 8 ranks spans NVLink domains of 4 devices (one node" \
    "tp=8 over 4-GPU nodes, each its own domain"
sed 's/"nvlink_domain": 72/"nvlink_domain": 70/' "$tmp/gb200-nvl72.json" >"$tmp/domain.json"
run 1 "$ptplan" --dump-cluster "$tmp/domain.json"
err_has "domain.json: field 'nvlink_domain' = 70: must be a positive multiple of devices_per_node (4)" \
    "an NVLink domain that is not whole nodes"
one_line_error "bad nvlink_domain"

# ---- integers written as reals -------------------------------------------------------
sed 's/40e9/40000000000.5/' "$tmp/bf16.json" >"$tmp/frac.json"
run 1 "$ptplan" --dump-cluster "$tmp/frac.json"
err_has "frac.json: field 'device.memory_bytes' = 40000000000.5: expected an integer" \
    "a fractional size refused"
one_line_error "fractional size"
sed 's/40e9/1e300/' "$tmp/bf16.json" >"$tmp/huge.json"
run 1 "$ptplan" --dump-cluster "$tmp/huge.json"
err_has "huge.json: field 'device.memory_bytes' = 1e+300: out of range for a 64-bit integer" \
    "a size beyond int64 refused"

# ---- every mistake of a file at once -------------------------------------------------
# Three mistakes: a misspelt field, a peak that is not a number, a missing latency.
sed -e 's/"memory_bytes"/"memroy_bytes"/' -e 's/"bf16": 312e12/"bf16": "fast"/' \
    -e 's/"latency": 3e-6//' -e 's/"bandwidth": 3e11,/"bandwidth": 3e11/' \
    "$tmp/bf16.json" >"$tmp/three.json"
run 1 "$ptplan" --model tiny --cluster "$tmp/three.json"
err_has "three.json: unknown field 'device.memroy_bytes' (did you mean 'memory_bytes'?)" \
    "misspelt field with the one meant"
err_has "three.json: field 'device.peak_flops.bf16' = \"fast\": expected a number" \
    "mistyped peak"
err_has "three.json: missing field 'intra_node.latency'" "missing latency"
[ "$(wc -l <"$tmp/err")" -eq 3 ] || fail "want 3 error lines, got: $(cat "$tmp/err")"
[ "$(grep -c "three.json: " "$tmp/err")" -eq 3 ] || fail "each line names the file: $(cat "$tmp/err")"
[ ! -s "$tmp/out" ] || fail "stdout not empty on error (three mistakes)"

# The model reader is the same: a misspelling and a mistyped size, both reported.
run 0 "$ptplan" --dump-model tiny
sed -e 's/"hidden"/"hiden"/' -e 's/"layers": 4/"layers": "four"/' "$tmp/out" >"$tmp/model.json"
run 1 "$ptplan" --model "$tmp/model.json"
err_has "model.json: unknown field 'hiden' (did you mean 'hidden'?)" "model typo"
err_has "model.json: field 'layers' = \"four\": expected an integer" "model mistyped size"
[ "$(wc -l <"$tmp/err")" -eq 2 ] || fail "want 2 model error lines, got: $(cat "$tmp/err")"

[ "$failures" -eq 0 ] && echo "cli_specs: all checks passed"
exit "$failures"
