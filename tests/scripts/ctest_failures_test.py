#!/usr/bin/env python3
"""scripts/ctest_failures.py on a ctest log written here: it prints the end of the output of
exactly the failed tests, and says so when none failed.

  ctest_failures_test.py SCRIPT
"""

import subprocess
import sys
import tempfile
from pathlib import Path

LOG = """\
Start testing: Nov 21 16:29 UTC
----------------------------------------------------------
1/2 Testing: unit.passes
1/2 Test: unit.passes
Command: "/bin/true"
Output:
----------------------------------------------------------
all good
<end of output>
Test time =   0.01 sec
----------------------------------------------------------
Test Passed.

2/2 Testing: e2e.fails
2/2 Test: e2e.fails
Command: "/bin/false"
Output:
----------------------------------------------------------
{lines}
e2e: FAIL: sacct: [('RESIZING', 2), ('COMPLETED', 4)]
<end of output>
Test time =   3.20 sec
----------------------------------------------------------
Test Failed.
"""


def run(script, build_dir, *extra):
    return subprocess.run([sys.executable, script, str(build_dir), *extra], capture_output=True,
                          text=True, timeout=30)


def check(condition, why):
    if not condition:
        print(f"ctest_failures_test: FAIL: {why}")
        sys.exit(1)


def main():
    script = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        temporary = Path(tmp, "Testing", "Temporary")
        temporary.mkdir(parents=True)
        lines = "\n".join(f"line {i}" for i in range(1, 51))
        (temporary / "LastTest.log").write_text(LOG.replace("{lines}", lines))

        quiet = run(script, tmp)
        check(quiet.returncode == 0 and quiet.stdout.strip() == "ctest_failures: 0 failed test(s)",
              f"with no LastTestsFailed.log: {quiet.returncode} {quiet.stdout!r}")

        (temporary / "LastTestsFailed.log").write_text("2:e2e.fails\n")
        out = run(script, tmp, "--lines", "3")
        check(out.returncode == 0, f"exit {out.returncode}: {out.stderr}")
        expected = ("==== e2e.fails: the last 3 of 51 lines of its output\n"
                    "line 49\nline 50\n"
                    "e2e: FAIL: sacct: [('RESIZING', 2), ('COMPLETED', 4)]\n"
                    "ctest_failures: 1 failed test(s): e2e.fails\n")
        check(out.stdout == expected, f"printed {out.stdout!r}, expected {expected!r}")
        check("all good" not in out.stdout, "printed a passed test's output")

    with tempfile.TemporaryDirectory() as empty:
        missing = run(script, empty)
        check(missing.returncode == 1 and "no " in missing.stderr and "LastTest.log" in missing.stderr,
              f"without a log: {missing.returncode} {missing.stderr!r}")
    print("ctest_failures_test: PASS")


if __name__ == "__main__":
    main()
