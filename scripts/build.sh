#!/usr/bin/env bash
# Installs what is missing (scripts/install-deps.sh) and builds Bellows with a CMake
# preset (default: "default", output in build/<preset>).
#   scripts/build.sh [PRESET]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
preset="${1:-default}"
bash "${root}/scripts/install-deps.sh"
cd "${root}"
cmake --preset "${preset}" > "${root}/build-${preset}-configure.log" 2>&1 || {
  cat "${root}/build-${preset}-configure.log"; exit 1; }
grep -E '^-- bellows:' "${root}/build-${preset}-configure.log" || true
rm -f "${root}/build-${preset}-configure.log"
cmake --build --preset "${preset}" -- -j"$(nproc)"
