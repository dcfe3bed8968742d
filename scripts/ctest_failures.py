#!/usr/bin/env python3
"""Prints the end of each failed test's output from a ctest run, so that a long log ends
with why it failed (ctest prints a failed test's output where the test finished, among
hundreds of others).

  scripts/ctest_failures.py BUILD_DIR [--lines N]
reads BUILD_DIR/Testing/Temporary/LastTestsFailed.log and LastTest.log.
"""

import argparse
import re
import sys
from pathlib import Path


def outputs(log_text):
    """{name: output} of every test in LastTest.log."""
    found = {}
    # One block per test: "N/M Testing: NAME", a dashed line, the output, "<end of output>".
    for block in re.split(r"^\d+/\d+ Testing: ", log_text, flags=re.M)[1:]:
        name = block.split("\n", 1)[0].strip()
        dashes = "\n" + "-" * 58 + "\n"
        start = block.find(dashes)
        end = block.find("<end of output>")
        found[name] = block[start + len(dashes):end] if 0 <= start < end else block
    return found


def failed_names(failed_log):
    """The names in LastTestsFailed.log ("NUMBER:NAME" per line), in its order."""
    return [line.split(":", 1)[1].strip() for line in failed_log.splitlines() if ":" in line]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build_dir", type=Path)
    p.add_argument("--lines", type=int, default=40, help="lines of each output to print (default 40)")
    a = p.parse_args()
    temporary = a.build_dir / "Testing" / "Temporary"
    log = temporary / "LastTest.log"
    if not log.exists():
        print(f"ctest_failures: no {log}", file=sys.stderr)
        return 1
    failed_log = temporary / "LastTestsFailed.log"  # written by ctest only when a test failed
    names = failed_names(failed_log.read_text()) if failed_log.exists() else []
    found = outputs(log.read_text(errors="replace"))
    for name in names:
        lines = found.get(name, "(no output in LastTest.log)").rstrip("\n").splitlines()
        print(f"==== {name}: the last {min(a.lines, len(lines))} of {len(lines)} lines of its output")
        print("\n".join(lines[-a.lines:]))
    print(f"ctest_failures: {len(names)} failed test(s){': ' if names else ''}{', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
