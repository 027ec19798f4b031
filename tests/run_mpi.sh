#!/bin/sh
# Runs a test program on NP ranks under mpirun; exits 77 (ctest's skip code, see
# SKIP_RETURN_CODE) when mpirun is missing. As root Open MPI needs its consent
# (--allow-run-as-root); --oversubscribe lets NP exceed this machine's cores.
# Open MPI's session folders go to a scratch folder of this run's own (as in
# tests/tools/cli_lib.sh: jobs sharing /tmp/ompi.HOST.UID race when run side by side).
#   usage: run_mpi.sh NP PROGRAM [ARGS...]
np=$1
shift
if ! command -v mpirun >/dev/null 2>&1; then
    echo "mpirun not found: skipped"
    exit 77
fi
set -- mpirun -q --oversubscribe -np "$np" "$@"
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
export OMPI_MCA_orte_tmpdir_base="$tmp"
timeout 300 "$@"
