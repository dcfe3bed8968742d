#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole test suite.
#   scripts/test.sh [PRESET]      (default preset: "default"; "asan" for sanitizers)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
preset="${1:-default}"
bash "${root}/scripts/build.sh" "${preset}"
cd "${root}"
export OPENBLAS_NUM_THREADS=1
status=0
ctest --preset "${preset}" || status=$?
if [ "${status}" -ne 0 ]; then
  # The failures' output again, at the end of the log where it is read first.
  python3 "${root}/scripts/ctest_failures.py" "${root}/build/${preset}" || true
fi
exit "${status}"
