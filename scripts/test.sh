#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole test suite.
#   scripts/test.sh [PRESET]      (default preset: "default"; "asan" for sanitizers)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
preset="${1:-default}"
bash "${root}/scripts/build.sh" "${preset}"
cd "${root}"
export OPENBLAS_NUM_THREADS=1
ctest --preset "${preset}"
