#!/usr/bin/env bash
# The main command: installs what is missing, builds, and runs an elastic GEMM under
# `bellows run` on the embedded local backend (emulated nodes on this host, no Slurm): the
# job starts on 2 nodes, the policy grows it to 6 when tasks pile up, an operator
# (`bellows resize -4`) gives 4 nodes back, the result is verified, and the resize timeline
# is printed.
#   scripts/demo.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "${root}/scripts/build.sh" default
build="${root}/build/default"
export OPENBLAS_NUM_THREADS=1
export BELLOWS_RUN_DIR="${BELLOWS_RUN_DIR:-$(mktemp -d /tmp/bellows-demo.XXXXXX)}"
bellows="${build}/cli/bellows"

echo
echo "== bellows run: elastic GEMM (n=2048, tile 256, 30 iterations), nodes 2:6, policy local-demo.yaml =="
"${bellows}" run --nodes 2:6 --policy "${root}/policies/examples/local-demo.yaml" -- \
  "${build}/examples/gemm" --n 2048 --tile 256 --iterations 30 --steal on --verify &
job=$!

# The operator: once the policy has grown the job to 6 nodes, give 4 of them back.
nodes_now() { "${bellows}" status --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["nodes"]))' 2>/dev/null || echo 0; }
for _ in $(seq 1 600); do
  kill -0 "${job}" 2>/dev/null || break
  if [[ "$(nodes_now)" == 6 ]]; then
    sleep 3
    echo "== operator: bellows resize -4 =="
    "${bellows}" resize -4 --reason "operator: give 4 nodes back" || true
    break
  fi
  sleep 0.2
done
wait "${job}"
echo
echo "== bellows events (the job's event log) =="
"${bellows}" events | tail -n 3
