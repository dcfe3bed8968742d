#!/usr/bin/env bash
# Rewrites the key reference in docs/policies.md (between its BEGIN/END markers) from the
# schema, with `bellows policy keys --markdown`. A unit test checks that the two agree.
#   scripts/update-policy-docs.sh [PATH_TO_BELLOWS]   (default: build/default/cli/bellows,
#                                                      else the first build/*/cli/bellows)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bellows="${1:-}"
if [[ -z "${bellows}" ]]; then
  for candidate in "${root}/build/default/cli/bellows" "${root}"/build/*/cli/bellows; do
    if [[ -x "${candidate}" ]]; then bellows="${candidate}"; break; fi
  done
fi
if [[ -z "${bellows}" || ! -x "${bellows}" ]]; then
  echo "update-policy-docs: no bellows binary; build the bellows_cli target or pass its path" >&2
  exit 2
fi
doc="${root}/docs/policies.md"
begin='<!-- BEGIN bellows policy keys --markdown -->'
end='<!-- END bellows policy keys --markdown -->'
grep -qxF -- "${begin}" "${doc}" && grep -qxF -- "${end}" "${doc}" || {
  echo "update-policy-docs: ${doc} lacks the BEGIN/END markers" >&2
  exit 2
}
generated="$(mktemp)"
trap 'rm -f "${generated}" "${generated}.doc"' EXIT
"${bellows}" policy keys --markdown > "${generated}"
awk -v begin="${begin}" -v end="${end}" -v generated="${generated}" '
  $0 == begin { print; while ((getline line < generated) > 0) print line; skipping = 1; next }
  $0 == end   { skipping = 0 }
  !skipping   { print }
' "${doc}" > "${generated}.doc"
mv "${generated}.doc" "${doc}"
echo "update-policy-docs: ${doc} updated from ${bellows}"
