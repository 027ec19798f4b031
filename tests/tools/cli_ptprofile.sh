#!/bin/sh
# ptprofile as a user runs it: it measures the default model's GEMMs and this CPU
# into a fresh cost table, measuring again updates rather than duplicates, --resume
# skips what is there, ptplan then prices from the measurements, and bad input is
# refused with one clear message before anything is written.
#   usage: cli_ptprofile.sh BUILD_DIR [--with-collectives]
set -u
build="$1"
with_coll="${2:-}"
. "$(dirname "$0")/cli_lib.sh"
q() { sqlite3 "$tmp/c.db" "$1"; }

coll="--no-collectives"
[ "$with_coll" = "--with-collectives" ] && coll=""
run 0 "$build/ptprofile" --db "$tmp/c.db" --quick $coll
n1=$(q "SELECT count(*) FROM kernel_samples WHERE device = 'cpu' AND kind = 'gemm_bias'")
[ "$n1" -gt 10 ] || fail "GEMM samples stored ($n1)"
# each role of the layers' GEMMs is timed as the runtime calls it (planner/ops.c): the
# forwards with their biases (the default model has biases), the output head's without
# (an unpadded vocabulary), data gradients, weight gradients with the bias gradient,
# the output head's without; the first data gradient into a buffer, written; q, k and v
# batched (b=3) at tp = 1, forward and weight gradient
for kind in gemm gemm_gelu_bias gemm_dgrad gemm_dgrad_write gemm_dgelu gemm_wgrad_bias \
    gemm_wgrad; do
    [ "$(q "SELECT count(*) FROM kernel_samples WHERE kind = '$kind'")" -gt 0 ] ||
        fail "no $kind samples"
done
for kind in gemm_bias gemm_wgrad_bias; do
    n=$(q "SELECT count(*) FROM kernel_samples WHERE kind = '$kind' AND op_key LIKE '%:b=3,m=%'")
    [ "$n" -gt 0 ] || fail "no batched $kind samples"
done
[ "$(q "SELECT peak_flops_fp32 > 1e8 AND mem_bw_Bps > 1e8 FROM devices WHERE name = 'cpu'")" = 1 ] ||
    fail "the CPU's description is stored"
[ "$(q "SELECT status FROM profile_runs ORDER BY id DESC LIMIT 1")" = done ] ||
    fail "the run is recorded as done"
grep -q "GFLOP/s" "$tmp/err" || fail "progress lines name the rates"
if [ -z "$coll" ]; then
    [ "$(q "SELECT count(*) FROM coll_samples WHERE backend = 'mpi'")" -gt 10 ] ||
        fail "collective samples stored"
fi

# Measuring again updates the samples instead of adding repeats.
run 0 "$build/ptprofile" --db "$tmp/c.db" --quick --no-collectives
n2=$(q "SELECT count(*) FROM kernel_samples WHERE device = 'cpu' AND kind = 'gemm_bias'")
[ "$n2" = "$n1" ] || fail "a second run keeps $n1 GEMM samples, not $n2"
[ "$(q "SELECT count(*) FROM kernel_samples WHERE kind IN ('attn_fwd', 'layernorm_bwd')")" -gt 1 ] ||
    fail "the model's other kernels are measured too"
# whole training steps: the optimizer too, under the key the planner prices it by
[ "$(q "SELECT count(*) FROM kernel_samples WHERE op_key LIKE 'adam:fp32:n=%'")" = 1 ] ||
    fail "the optimizer step is measured"
[ "$(q "SELECT count(*) FROM profile_runs")" = 2 ] || fail "both runs are recorded"
# --resume measures nothing that is already there.
run 0 "$build/ptprofile" --db "$tmp/c.db" --quick --no-collectives --resume
grep -q "0 GEMMs" "$tmp/out" || fail "--resume re-measured GEMMs: $(cat "$tmp/out")"

# scripts/ship_profile.sh writes the table's profile of a device as SQL that loads into a
# fresh schema (as ptplan loads a shipped one), its runs dated, with the libraries added
ship="$(dirname "$0")/../../scripts/ship_profile.sh"
run 0 "$ship" "$tmp/c.db" cpu "test libraries 1.0"
cp "$tmp/out" "$tmp/cpu.sql"
# (.schema names SQLite's own sqlite_sequence, which the AUTOINCREMENT tables make)
sqlite3 "$tmp/c.db" .schema | grep -v '^CREATE TABLE sqlite_sequence' | sqlite3 "$tmp/s.db" &&
    sqlite3 -bail "$tmp/s.db" < "$tmp/cpu.sql" ||
    fail "ship_profile's SQL does not load"
[ "$(sqlite3 "$tmp/s.db" "SELECT count(*) FROM kernel_samples")" = \
  "$(q "SELECT count(*) FROM kernel_samples WHERE device = 'cpu' AND source = 'profile'")" ] ||
    fail "ship_profile keeps every profiled sample of the device"
[ "$(sqlite3 "$tmp/s.db" "SELECT count(*) FROM profile_runs WHERE versions LIKE '%; test libraries 1.0'")" = \
  "$(q "SELECT count(*) FROM profile_runs WHERE device = 'cpu'")" ] ||
    fail "ship_profile adds the libraries to each run"
run 1 "$ship" "$tmp/c.db" no-such-device
err_has "has no profiled samples of 'no-such-device'" "ship_profile: unknown device"

# ptplan prices a GEMM-heavy step (a small model of wide layers) from measured data:
# most of the priced time is measured, and MFU is against the measured peak.
cat >"$tmp/wide.json" <<'JSON'
{"name": "wide", "layers": 2, "hidden": 512, "heads": 8, "kv_heads": 8, "ffn": 2048,
 "vocab": 256, "seq": 128, "norm": "layernorm", "activation": "gelu",
 "positions": "learned", "tied_embeddings": true, "bias": true, "dropout": false}
JSON
run 0 "$build/ptprofile" --db "$tmp/c.db" --model "$tmp/wide.json" --global-batch 8 --quick \
    --no-collectives
run 0 "$build/ptplan" --db "$tmp/c.db" --model "$tmp/wide.json" --global-batch 8 --json \
    --top 1 --no-out
measured=$(grep -A3 '"provenance"' "$tmp/out" | grep '"measured"' | head -1 | tr -dc '0-9.')
awk -v m="$measured" 'BEGIN { exit !(m > 0.6) }' || fail "measured share $measured <= 0.6"
mfu=$(grep '"mfu"' "$tmp/out" | head -1 | tr -dc '0-9.e-')
awk -v m="$mfu" 'BEGIN { exit !(m > 0 && m <= 1) }' || fail "MFU $mfu is not in (0, 1]"

# FP8 on the CPU is emulated (FP8 values decoded to fp32 and multiplied by OpenBLAS):
# asked for as such (--fp8-emulate, as ptplan), timed through the kernel table's
# gemm_fp8 under the plan's fp8 keys and data type (fp8: an FP8 GEMM's, emulated or
# not), and said so; without --fp8-emulate it is refused before anything is written
run 0 "$build/ptprofile" --db "$tmp/e.db" --devices 1 --global-batch 2 --max-mbs 2 --quick \
    --no-collectives --precision fp8 --fp8-emulate
out_has "in fp32+fp8(current, emulated)" "the run names the emulated precision"
err_has "gemm_dgrad_write:fp8:m=.*(FP8 emulated)" "emulated FP8 GEMMs are said to be"
[ "$(sqlite3 "$tmp/e.db" "SELECT count(*) FROM kernel_samples WHERE kind = 'gemm_wgrad' AND op_key LIKE 'gemm_wgrad:fp8:%' AND dtype = 'fp8'")" -gt 0 ] ||
    fail "emulated FP8 GEMMs stored under their keys"
# ... the weight gradients without their bias gradients, which ptrun sums in the data
# gradients' casts (planner/ops.c's fp8_dbias_in_dgrad)
[ "$(sqlite3 "$tmp/e.db" "SELECT count(*) FROM kernel_samples WHERE op_key LIKE 'gemm_wgrad_bias:fp8:%'")" -eq 0 ] ||
    fail "FP8 weight gradients profiled with their bias gradients"
# ptplan --fp8-emulate prices them from the table; the table without them, analytically
cp "$tmp/e.db" "$tmp/e0.db"
sqlite3 "$tmp/e0.db" "DELETE FROM kernel_samples WHERE op_key LIKE '%:fp8:%'"
for db in e e0; do
    run 0 "$build/ptplan" --db "$tmp/$db.db" --devices 1 --global-batch 2 --precision fp8 \
        --fp8-emulate --layout tp=1,pp=1,dp=1,mbs=2 --explain --no-out
    sed -n 's/^priced from: .* \([0-9.]*\)% analytic$/\1/p' "$tmp/out" >"$tmp/$db.analytic"
done
awk -v a="$(cat "$tmp/e.analytic")" -v a0="$(cat "$tmp/e0.analytic")" \
    'BEGIN { exit !(a != "" && a0 != "" && a + 0 < a0 + 0) }' ||
    fail "emulated FP8 GEMMs priced from the table ($(cat "$tmp/e.analytic")% analytic, without them $(cat "$tmp/e0.analytic")%)"
run 1 "$build/ptprofile" --db "$tmp/d.db" --precision fp8 --no-collectives
err_has "precision fp8: FP8 on cluster 'local': its device cpu has no FP8 peak" \
    "FP8 on the CPU without --fp8-emulate"
run 1 "$build/ptprofile" --db "$tmp/d.db" --precision fp8 --fp8-emulate \
    --fp8-recipe blockwise --no-collectives
err_has "FP8 recipe 'blockwise': stack 'ptrun' runs current, delayed" "a recipe ptrun lacks"
run 1 "$build/ptprofile" --db "$tmp/d.db" --fp8-recipe delayed --no-collectives
err_has "fp8-recipe goes with --precision fp8" "--fp8-recipe without fp8"
run 1 "$build/ptprofile" --db "$tmp/d.db" --precision bf16 --no-collectives
err_has "precision bf16: --backend cpu measures its kernels in fp32" "a precision not measured"
[ -e "$tmp/d.db" ] && fail "no database is created for a refused precision"

# Bad input: one clear message, non-zero exit, nothing written.
run 1 "$build/ptprofile" --db "$tmp/no/such/dir/c.db" --quick --no-collectives
err_has "no/such/dir" "unwritable database"
[ -e "$tmp/no" ] && fail "nothing is created for an unwritable database"
run 1 "$build/ptprofile" --db "$tmp/d.db" --model no-such-model
err_has "unknown model 'no-such-model'" "unknown model"
[ -e "$tmp/d.db" ] && fail "no database is created for an unknown model"
run 1 "$build/ptprofile" --db "$tmp/d.db" --backend cuda
err_has "name the GPU cluster" "the CUDA backend needs a GPU cluster"
if ! nvidia-smi >/dev/null 2>&1; then
    run 1 "$build/ptprofile" --db "$tmp/d.db" --backend cuda --cluster dgx-h100
    err_has "backend cuda: " "no GPU for --backend cuda"
    [ -e "$tmp/d.db" ] && fail "no database is created without a GPU"
fi
run 1 "$build/ptprofile" --db "$tmp/d.db" --backend tpu
err_has "expected cpu or cuda" "unknown backend"
run 1 "$build/ptprofile" --db "$tmp/d.db" --cluster dgx-h100
err_has "use --cluster local" "GPU cluster with the CPU backend"
run 1 env PATH=/nonexistent "$build/ptprofile" --db "$tmp/d.db" --quick
err_has "mpirun not found" "mpirun missing"
[ -e "$tmp/d.db" ] && fail "no database is created when mpirun is missing"
run 1 "$build/ptprofile" --repeats 0
err_has "repeats" "bad repeats"
run 1 "$build/ptprofile" --soak-ms -5
err_has "soak-ms -5: expected an integer from 0 to 60000" "bad --soak-ms"
run 1 "$build/ptprofile" --db "$tmp/d.db" --data "$tmp/no-such-corpus.txt" --no-collectives
err_has "no-such-corpus.txt" "missing --data"
[ -e "$tmp/d.db" ] && fail "no database is created for missing --data"
printf 'too short' >"$tmp/short.txt"
run 1 "$build/ptprofile" --db "$tmp/d.db" --data "$tmp/short.txt" --no-collectives
err_has "data $tmp/short.txt: 9 tokens, fewer than one sequence of tiny" "--data too short"
[ -e "$tmp/d.db" ] && fail "no database is created for a too short --data"
# a token file with an id beyond tiny's 256-token vocabulary (the format ptrun reads)
python3 - "$tmp/big.bin" <<'PY' || fail "cannot write the token file"
import struct, sys
toks = [1, 2, 300] + [5] * 200
hdr = [20240520, 1, len(toks)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(toks), *toks))
PY
run 1 "$build/ptprofile" --db "$tmp/d.db" --data "$tmp/big.bin" --no-collectives
err_has "token 300 at position 2 is beyond the vocabulary" "--data beyond the vocabulary"
[ -e "$tmp/d.db" ] && fail "no database is created for --data beyond the vocabulary"
run 1 "$build/ptplan" --db "$tmp/garbage.db"
err_has "garbage.db" "missing database for ptplan"

if [ "$failures" -gt 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all ptprofile command-line checks passed"
