#!/usr/bin/env python3
"""Checks scripts/plot_trace.py: PNGs from a good trace, exit code 2 and a message naming
file and line for bad ones.

    plot_trace_test.py PLOT_TRACE.py [-- COMMAND...]

Without COMMAND the trace is synthetic (3 ranks, 2 iterations). With COMMAND (an example
run, e.g. mpiexec -n 2 bspgemm ... ), "--trace FILE" is appended to it and its trace is
plotted. Runs plot_trace.py with the interpreter running this test. Prints
"plot_trace_test: PASS" or "plot_trace_test: FAIL: ..." lines.
"""

import json
import os
import subprocess
import sys
import tempfile

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def plot(script, trace, prefix, *extra):
    proc = subprocess.run([sys.executable, script, trace, "--out", prefix, *extra],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    sys.stdout.write(proc.stdout)
    return proc


def expect_pngs(script, trace, prefix, *extra):
    proc = plot(script, trace, prefix, *extra)
    check(proc.returncode == 0, f"plotting {trace}: exit code {proc.returncode}")
    for suffix in ("ready", "completed"):
        path = f"{prefix}-{suffix}.png"
        if not os.path.isfile(path):
            check(False, f"{path} was not written")
            continue
        with open(path, "rb") as f:
            check(f.read(8) == PNG_MAGIC, f"{path} does not start with the PNG signature")


def expect_error(script, trace, prefix, pattern):
    proc = plot(script, trace, prefix)
    check(proc.returncode == 2, f"{trace}: exit code {proc.returncode}, expected 2")
    check(pattern in proc.stdout, f"{trace}: message does not contain {pattern!r}")
    check(not os.path.exists(f"{prefix}-ready.png"), f"{trace}: a plot was written anyway")


def synthetic_trace(path):
    with open(path, "w", encoding="utf-8") as f:
        for iteration in (1, 2):
            for rank in range(3):
                completed = 0
                for step in range(20):
                    completed += rank + 1
                    sample = {"rank": rank, "iteration": iteration, "t": step * 0.01 + rank * 1e-3,
                              "ready": max(0, 10 - step + rank), "completed": completed}
                    f.write(json.dumps(sample, separators=(",", ":")) + "\n")
            f.write("\n")
        # A resize line is not a sample: the plot skips it.
        f.write('{"event":"resize","resize":1,"kind":"expand","rank":0,"iteration":2,'
                '"t":-0.01}\n')


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 64
    script = sys.argv[1]
    command = sys.argv[3:] if sys.argv[2:3] == ["--"] else []
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.jsonl")
        if command:
            proc = subprocess.run(command + ["--trace", trace], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=100)
            sys.stdout.write(proc.stdout)
            check(proc.returncode == 0, f"{' '.join(command)}: exit code {proc.returncode}")
            expect_pngs(script, trace, os.path.join(tmp, "run"))
        else:
            synthetic_trace(trace)
            expect_pngs(script, trace, os.path.join(tmp, "plots", "last"))
            expect_pngs(script, trace, os.path.join(tmp, "first"), "--iteration", "1",
                        "--title", "synthetic")
            proc = plot(script, trace, os.path.join(tmp, "none"), "--iteration", "7")
            check(proc.returncode == 2 and "no samples of iteration 7" in proc.stdout,
                  "a missing iteration is not refused with exit code 2")

            bad = os.path.join(tmp, "bad.jsonl")
            with open(bad, "w", encoding="utf-8") as f:
                f.write('{"rank":0,"iteration":1,"t":0.0,"ready":1,"completed":0}\n')
                f.write('{"rank":0,"iteration":1,"t":0.1,"ready":1\n')
            expect_error(script, bad, os.path.join(tmp, "bad"), f"{bad}:2: not JSON")

            missing = os.path.join(tmp, "missing.jsonl")
            with open(missing, "w", encoding="utf-8") as f:
                f.write('{"rank":0,"iteration":1,"t":0.0,"ready":1}\n')
            expect_error(script, missing, os.path.join(tmp, "missing"),
                         f"{missing}:1: missing field(s) completed")

            negative = os.path.join(tmp, "negative.jsonl")
            with open(negative, "w", encoding="utf-8") as f:
                f.write('{"rank":0,"iteration":1,"t":0.0,"ready":-1,"completed":0}\n')
            expect_error(script, negative, os.path.join(tmp, "negative"),
                         f"{negative}:1: 'ready' must be a non-negative integer")

            empty = os.path.join(tmp, "empty.jsonl")
            with open(empty, "w", encoding="utf-8") as f:
                f.write("\n")
            expect_error(script, empty, os.path.join(tmp, "empty"), f"{empty}: empty trace")

            absent = os.path.join(tmp, "absent.jsonl")
            expect_error(script, absent, os.path.join(tmp, "absent"), f"cannot read {absent}")
    for f in failures:
        print(f"plot_trace_test: FAIL: {f}")
    if failures:
        return 1
    print("plot_trace_test: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
