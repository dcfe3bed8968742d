#!/usr/bin/env bash
# The main command: installs what is missing, builds, and runs an elastic GEMM under
# `bellows run` on the embedded local backend (emulated nodes on this host, no Slurm): the
# job starts on 2 nodes, the policy grows it to 6 when tasks pile up, an operator
# (`bellows resize -4`) gives 4 nodes back, the result is verified, the resize timeline is
# printed, and the job's speed on each size.
#
# Every node is modeled as a node of 8 GFLOP/s (the emulated device, which also computes each
# task on this host's CPU within its modeled time, so the result is exact): 6 such nodes need
# about 48 GFLOP/s of the host, which 2 cores give, so the job runs up to 3x faster on 6 nodes
# than on 2. With real BLAS on every "node" instead, 6 nodes would share the same 2 cores and
# the job could not get faster by growing.
#   scripts/demo.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "${root}/scripts/build.sh" default
build="${root}/build/default"
export OPENBLAS_NUM_THREADS=1
export BELLOWS_RUN_DIR="${BELLOWS_RUN_DIR:-$(mktemp -d /tmp/bellows-demo.XXXXXX)}"
bellows="${build}/cli/bellows"

echo
node_gflops=8
echo "== bellows run: elastic GEMM (n=2048, tile 256, 30 iterations), nodes 2:6 of ${node_gflops} GFLOP/s each, policy local-demo.yaml =="
report="${BELLOWS_RUN_DIR}/gemm-report.txt"
"${bellows}" run --nodes 2:6 --policy "${root}/policies/examples/local-demo.yaml" -- \
  "${build}/examples/gemm" --n 2048 --tile 256 --iterations 30 --steal on --verify \
  --kernel emulated --emulated-gflops "${node_gflops}" --emulated-compute on > "${report}" &
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
cat "${report}"
echo
echo "== bellows events (the job's event log) =="
"${bellows}" events | tail -n 3
echo
echo "== what growing did =="
python3 - "${report}" "${node_gflops}" <<'PY'
import json, statistics, sys
report = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
node = float(sys.argv[2])
by_size = {}
for it in report["iterations"][1:]:  # the first iteration warms up
    by_size.setdefault(it["ranks"], []).append(it["gflops"])
for size in sorted(by_size):
    median = statistics.median(by_size[size])
    print(f"  {size} nodes: {median:5.1f} GFLOP/s median over {len(by_size[size])} iterations "
          f"({median / (size * node):.0%} of {size} x {node:g} GFLOP/s)")
if len(by_size) > 1:
    low, high = min(by_size), max(by_size)
    ratio = statistics.median(by_size[high]) / statistics.median(by_size[low])
    print(f"  growing from {low} to {high} nodes made the job {ratio:.2f}x faster "
          f"(ideal {high / low:.2f}x); result verified: {report['verified']}")
PY
