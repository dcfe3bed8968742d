#!/usr/bin/env python3
"""bench/message_log.py --replan-timed on one small round: the GEMM example with rank 1 slowed
four times re-plans with re-plans on and keeps its first plan with them off, the per-run table
and the total time's ratio are printed, and bad options are refused with their names. No timing
is asserted.

  message_log_replan_test.py BUILD_DIR
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench", "message_log.py")

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"message_log_replan: FAIL: {what}", flush=True)


def bench(build, *options, timeout=240):
    return subprocess.run([sys.executable, BENCH, "--build", build, "--replan-timed", *options],
                          capture_output=True, text=True, timeout=timeout)


def check_refusals(build):
    for options, text in ((["--slow-from", "2"], "--slow-from must be at least 3 with --replan-timed"),
                          (["--slow-rank", "4"], "--slow-rank must be a rank below --ranks 4, got 4"),
                          (["--load-window", "0"], "--load-window must be at least 1, got 0"),
                          (["--rounds", "0"], "--rounds must be at least 1, got 0")):
        out = bench(build, *options, timeout=30)
        check(out.returncode == 2, f"{options} exits 2, got {out.returncode}")
        check(text in out.stderr, f"{options} is refused with {text!r}: {out.stderr[-500:]!r}")


def check_round(build):
    out = bench(build, "--rounds", "1", "--iterations", "9", "--apps", "gemm", "--gflops", "10",
                "--n", "1024", "--tile", "256")
    check(out.returncode == 0, f"the bench exits 0, got {out.returncode}: {out.stderr[-2000:]}")
    if out.returncode != 0:
        return
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("gemm 10 GFLOP/s")]
    runs = {row[4]: row for row in rows if len(row) > 12}
    check(set(runs) == {"on", "off"}, f"one row per run, re-plans on and off: {rows}")
    if set(runs) == {"on", "off"}:
        check(runs["on"][12:14] == ["8", "re-plan"],
              f"with re-plans on the plan that holds is a re-plan before iteration 8: {runs['on']}")
        check(runs["off"][12:14] == ["2", "first"],
              f"with re-plans off the first plan holds, before iteration 2: {runs['off']}")
    ratio = [line for line in out.stdout.splitlines()[-2:] if line.startswith("gemm 10 GFLOP/s")]
    check(len(ratio) == 1, f"the total time's ratio, on over off, is printed: {out.stdout[-500:]!r}")


def main():
    build = sys.argv[1]
    check_refusals(build)
    check_round(build)
    print("message_log_replan: " + ("FAIL" if failures else "PASS"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
