#!/bin/sh
# Writes the profile of one device in a cost table (ptprofile --backend cuda; e.g.
# scripts/gpucheck.sh's OUTDIR/h100.db) as the SQL text the project ships and compiles
# into ptplan (costmodels/profiles/DEVICE.sql; costmodels/embed.cmake): the ptprofile
# runs that measured it, dated, with the libraries they ran on, then its kernel samples
# (the profile's own only: samples from training runs' traces stay out). A run that
# never finished (killed, say, and --resume'd later) is marked interrupted.
#   usage: scripts/ship_profile.sh DB DEVICE [LIBRARIES] > costmodels/profiles/DEVICE.sql
#   LIBRARIES is added to each run's versions where ptprofile did not record them
#   (it records the CUDA libraries since 2026-11-27).
set -eu
[ $# -ge 2 ] || { echo "usage: scripts/ship_profile.sh DB DEVICE [LIBRARIES]" >&2; exit 2; }
db=$1 device=$2 libs=${3:-}
[ -f "$db" ] || { echo "ship_profile: $db: no such file" >&2; exit 1; }
q() { sqlite3 -bail "$db" "$1"; }
sq() { printf '%s' "$1" | sed "s/'/''/g"; }
n=$(q "SELECT count(*) FROM kernel_samples WHERE device = '$(sq "$device")' AND source = 'profile'")
[ "$n" -gt 0 ] || { echo "ship_profile: $db has no profiled samples of '$device'" >&2; exit 1; }
# the whole text first, then printed: a failing query leaves no half-written profile
sql=$(printf -- "-- The profile of %s that ptplan uses where the cost table has no samples of it\n" "$device" &&
  printf -- "-- (costmodels/profiles/README.md). Written by scripts/ship_profile.sh from %s:\n" "$(basename "$db")" &&
  printf -- "-- %s kernel samples. Edit by measuring again, not by hand.\n" "$n" &&
  q "SELECT printf('INSERT INTO profile_runs(started_at, finished_at, host, device, backend, versions, command, status) VALUES (%Q, %Q, %Q, %Q, %Q, %Q, %Q, %Q);',
           started_at, finished_at, host, device, backend,
           versions || CASE WHEN '$(sq "$libs")' = '' OR versions LIKE '%CUDA%' THEN ''
                            ELSE '; ' || '$(sq "$libs")' END,
           command, CASE WHEN status = 'running' THEN 'interrupted' ELSE status END)
   FROM profile_runs WHERE device = '$(sq "$device")' ORDER BY id" &&
  q "SELECT printf('INSERT INTO kernel_samples(device, op_key, kind, dtype, flops, bytes, time_s, source, created_at, spread_s, spans) VALUES (%Q, %Q, %Q, %Q, %!.17g, %!.17g, %!.17g, ''profile'', %Q, %!.17g, %d);',
           device, op_key, kind, dtype, flops, bytes, time_s, created_at, spread_s, spans)
   FROM kernel_samples WHERE device = '$(sq "$device")' AND source = 'profile'
   ORDER BY kind, flops, op_key") || exit 1
printf '%s\n' "$sql"
