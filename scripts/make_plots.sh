#!/usr/bin/env bash
# Traces an imbalanced block-sparse GEMM with work stealing off and on, and plots ready
# and completed tasks per rank over time (the views of the paper's Figures 2-5).
#
#   scripts/make_plots.sh BUILD_DIR [OUT_DIR]      (OUT_DIR default: docs/plots)
#
# Writes OUT_DIR/bspgemm-PATTERN-steal-{off,on}-{ready,completed}.png and the JSON report
# of each run as OUT_DIR/bspgemm-PATTERN-steal-{off,on}.json. The run is set by
#   RANKS=8 N=4096 TILE=256 PATTERN=skewed DENSITY=0.5 GFLOPS=10 LANES=1 SEED=42 ITERATION=2
# (emulated kernel, so the result does not depend on the host's speed), and
#   MPIEXEC   default: ${BELLOWS_DEPS_PREFIX:-/opt/bellows-deps}/mpich-4.0.2-ch3/bin/mpiexec
#   PYTHON    an interpreter with matplotlib; default: the first of python3, /usr/bin/python3
#             that has it
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: $0 BUILD_DIR [OUT_DIR]" >&2
  exit 2
fi
build="$1"
out="${2:-${root}/docs/plots}"
bin="${build}/examples/bspgemm"
if [[ ! -x "${bin}" ]]; then
  echo "make_plots.sh: error: ${bin} not found; build the bspgemm target first" >&2
  exit 2
fi
mpiexec="${MPIEXEC:-${BELLOWS_DEPS_PREFIX:-/opt/bellows-deps}/mpich-4.0.2-ch3/bin/mpiexec}"
python="${PYTHON:-}"
if [[ -z "${python}" ]]; then
  for candidate in python3 /usr/bin/python3; do
    if command -v "${candidate}" >/dev/null && "${candidate}" -c "import matplotlib" 2>/dev/null; then
      python="${candidate}"
      break
    fi
  done
fi
if [[ -z "${python}" ]]; then
  echo "make_plots.sh: error: no python3 with matplotlib (Debian: apt-get install python3-matplotlib)" >&2
  exit 2
fi

ranks="${RANKS:-8}" n="${N:-4096}" tile="${TILE:-256}" pattern="${PATTERN:-skewed}"
density="${DENSITY:-0.5}" gflops="${GFLOPS:-10}" lanes="${LANES:-1}" seed="${SEED:-42}"
iteration="${ITERATION:-2}"
export OPENBLAS_NUM_THREADS=1
mkdir -p "${out}"
work="$(mktemp -d /tmp/bellows-plots.XXXXXX)"
trap 'rm -rf "${work}"' EXIT

for steal in off on; do
  name="bspgemm-${pattern}-steal-${steal}"
  trace="${work}/${name}.jsonl"
  # --iterations covers the iteration plotted; the trace file is fresh for every run.
  "${mpiexec}" -n "${ranks}" "${bin}" --n "${n}" --tile "${tile}" --pattern "${pattern}" \
    --density "${density}" --seed "${seed}" --kernel emulated --emulated-gflops "${gflops}" \
    --emulated-lanes "${lanes}" --iterations "${iteration}" --steal "${steal}" \
    --trace "${trace}" --quiet | tail -n 1 > "${out}/${name}.json"
  "${python}" "${root}/scripts/plot_trace.py" "${trace}" --out "${out}/${name}" \
    --iteration "${iteration}" \
    --title "BSpGEMM ${pattern} ${density}, n=${n}, tile ${tile}, ${ranks} ranks, steal ${steal}"
  "${python}" - "${out}/${name}.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
it = r["iterations"][-1]["seconds"]
print(f"  {sys.argv[1]}: iteration {it:.3f} s; modeled: balanced bound "
      f"{r['balanced_bound_seconds']:.3f} s, busiest rank {r['max_rank_work_seconds']:.3f} s, "
      f"all work {r['work_seconds']:.3f} s")
PY
done
