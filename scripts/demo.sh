#!/usr/bin/env bash
# The main command: installs what is missing, builds, and runs a verified tiled GEMM
# and Cholesky across several MPI ranks with libbellows, then a GEMM that expands and
# shrinks while it runs (embedded local launcher, no Slurm).
#   scripts/demo.sh [RANKS]       (default 4 ranks)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ranks="${1:-4}"
bash "${root}/scripts/build.sh" default
mpiexec="${BELLOWS_DEPS_PREFIX:-/opt/bellows-deps}/mpich-4.0.2-ch3/bin/mpiexec"
bin="${root}/build/default/examples"
export OPENBLAS_NUM_THREADS=1
echo
echo "== GEMM C = A * B, n=2048, tile 256, ${ranks} ranks, 2 iterations =="
"${mpiexec}" -n "${ranks}" "${bin}/gemm" --n 2048 --tile 256 --iterations 2 --verify
echo
echo "== Cholesky A = L * L^T, n=3000 (not a multiple of the tile), tile 256, ${ranks} ranks =="
"${mpiexec}" -n "${ranks}" "${bin}/cholesky" --n 3000 --tile 256 --iterations 2 --verify
echo
echo "== Elastic GEMM: starts on ${ranks} ranks, +2 ranks before iteration 3, the 3 highest leave before 5 =="
echo "   (scripts/bellows-local; new ranks get work by stealing, leavers hand their tiles to backups)"
"${root}/scripts/bellows-local" -n "${ranks}" -- "${bin}/gemm" --n 2048 --tile 256 --iterations 6 \
  --steal on --resize "iter=3:+2,iter=5:-3" --verify
