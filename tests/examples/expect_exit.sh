#!/usr/bin/env bash
# expect_exit.sh CODE REGEX -- COMMAND [ARGS...]
# Runs COMMAND and passes when it exits with exactly CODE and its combined stdout and
# stderr match the extended regular expression REGEX. Prints the output either way,
# then "expect_exit: PASS" or "expect_exit: FAIL: <reason>".
set -u

if [[ $# -lt 4 || "$3" != "--" ]]; then
  echo "usage: $0 CODE REGEX -- COMMAND [ARGS...]" >&2
  exit 64
fi
expected_code=$1
regex=$2
shift 3

output_file=$(mktemp)
trap 'rm -f "$output_file"' EXIT
"$@" >"$output_file" 2>&1
code=$?
cat "$output_file"

failures=()
if [[ "$code" != "$expected_code" ]]; then
  failures+=("exit code $code, expected $expected_code")
fi
if ! grep -Eq -e "$regex" "$output_file"; then
  failures+=("output does not match /$regex/")
fi
if [[ ${#failures[@]} -ne 0 ]]; then
  for f in "${failures[@]}"; do echo "expect_exit: FAIL: $f"; done
  exit 1
fi
echo "expect_exit: PASS (exit code $code, output matches /$regex/)"
exit 0
