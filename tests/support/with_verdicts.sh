#!/usr/bin/env bash
# with_verdicts.sh COMMAND [ARGS...]
# Runs COMMAND (mpiexec -n 1 TEST ...) with BELLOWS_TEST_VERDICT_DIR set to a new directory
# in which every process of the test writes PID.started as it starts and PID.verdict as it
# ends (tests/support/verdict.hpp). Then checks that every process that started passed:
# one that failed or left no verdict (crashed, killed) makes this script exit 1 with a line
# "verdicts: FAIL: ..." naming it; otherwise it prints "verdicts: N processes passed" and
# exits with COMMAND's code. A process still running once COMMAND returned gets 10 s to end.
set -u

dir=$(mktemp -d "${TMPDIR:-/tmp}/bellows-verdicts-XXXXXX")
trap 'rm -rf "$dir"' EXIT
BELLOWS_TEST_VERDICT_DIR=$dir "$@"
code=$?

failures=0
count=0
for started in "$dir"/*.started; do
  [[ -e "$started" ]] || break
  count=$((count + 1))
  pid=$(basename "$started" .started)
  role=$(head -n 1 "$started")
  verdict_file="$dir/$pid.verdict"
  for _ in $(seq 100); do
    [[ -e "$verdict_file" ]] || ! kill -0 "$pid" 2>/dev/null && break
    sleep 0.1
  done
  if [[ ! -e "$verdict_file" ]]; then
    echo "verdicts: FAIL: $role (pid $pid) left no verdict: it crashed, was killed or aborted"
    failures=$((failures + 1))
  elif [[ "$(head -n 1 "$verdict_file")" != "PASS" ]]; then
    echo "verdicts: FAIL: $role (pid $pid): $(head -n 1 "$verdict_file")"
    failures=$((failures + 1))
  fi
done
if [[ $count -eq 0 ]]; then
  echo "verdicts: FAIL: no process of the test reported (was BELLOWS_TEST_VERDICT_DIR passed on?)"
  exit 1
fi
if [[ $failures -ne 0 ]]; then
  exit 1
fi
echo "verdicts: $count processes passed"
exit "$code"
