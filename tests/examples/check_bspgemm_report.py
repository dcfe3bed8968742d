#!/usr/bin/env python3
"""Runs bspgemm and checks the sparsity and modeled-work fields of its JSON report.

check_bspgemm_report.py --ranks 2 --pattern skewed [--tasks 125] [--a-nonzero 25]
    [--gflops 4 --lanes 1 [--no-migration]] -- mpiexec -n 2 ./bspgemm ...

--gflops/--lanes (an emulated run): work_seconds equals flops / rate, the balanced bound
is max(work / (ranks * lanes), critical path), and the busiest rank owns at least the
mean. --no-migration (a run with --steal off): every iteration took at least
max_rank_work_seconds, as the emulated device never runs a task faster than modeled.
Prints "check_bspgemm_report: PASS" or "check_bspgemm_report: FAIL: ...".
"""

import argparse
import math

from report_runner import command_after_dashes, failer, run_report

fail = failer("check_bspgemm_report")


def close(x, y, rel=1e-9):
    return math.isclose(x, y, rel_tol=rel, abs_tol=1e-12)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--pattern", required=True)
    parser.add_argument("--tasks", type=int, help="expected task count")
    parser.add_argument("--a-nonzero", type=int, help="expected nonzero tiles of A")
    parser.add_argument("--b-nonzero", type=int, help="expected nonzero tiles of B")
    parser.add_argument("--gflops", type=float, help="emulated rate: check the modeled work")
    parser.add_argument("--lanes", type=int, default=1)
    parser.add_argument("--no-migration", action="store_true",
                        help="iterations cannot beat the busiest rank's modeled work")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    report, output = run_report(command_after_dashes(args.command, fail), fail)

    problems = []

    def expect(condition, message):
        if not condition:
            problems.append(message)

    keys = ["pattern", "density", "k", "a_nonzero_tiles", "b_nonzero_tiles", "tasks", "flops"]
    model = ["work_seconds", "critical_path_seconds", "balanced_bound_seconds",
             "max_rank_work_seconds"]
    for key in keys + (model if args.gflops else []):
        expect(key in report, f"key '{key}' missing")
    if not args.gflops:
        for key in model:
            expect(key not in report, f"key '{key}' present without an emulated kernel")
    if problems:
        fail("; ".join(problems), output)

    expect(report["pattern"] == args.pattern, f"pattern {report['pattern']!r}")
    tasks_run = sum(s.get("tasks_by_class", {}).get("BSPGEMM", 0) for s in report["rank_stats"])
    expect(tasks_run == report["tasks"] * len(report["iterations"]),
           f"rank_stats count {tasks_run} BSPGEMM tasks, the report says {report['tasks']} "
           f"per iteration")
    for name, want in (("tasks", args.tasks), ("a_nonzero_tiles", args.a_nonzero),
                       ("b_nonzero_tiles", args.b_nonzero)):
        if want is not None:
            expect(report[name] == want, f"{name} {report[name]}, expected {want}")

    if args.gflops:
        work = report["work_seconds"]
        critical = report["critical_path_seconds"]
        bound = report["balanced_bound_seconds"]
        busiest = report["max_rank_work_seconds"]
        mean = work / (args.ranks * args.lanes)
        expect(close(work, report["flops"] / (args.gflops * 1e9)),
               f"work_seconds {work} != flops / rate {report['flops'] / (args.gflops * 1e9)}")
        expect(0 < critical <= work, f"critical_path_seconds {critical} not in (0, {work}]")
        expect(close(bound, max(mean, critical)),
               f"balanced_bound_seconds {bound} != max({mean}, {critical})")
        expect(busiest >= mean * (1 - 1e-9), f"max_rank_work_seconds {busiest} < mean {mean}")
        if args.no_migration:
            for i, it in enumerate(report["iterations"]):
                expect(it["seconds"] >= busiest * (1 - 1e-3),
                       f"iteration {i} took {it['seconds']} s, less than the busiest rank's "
                       f"modeled work {busiest} s")

    if problems:
        fail("; ".join(problems), output)
    print(output.rstrip().splitlines()[-1])
    print("check_bspgemm_report: PASS")


if __name__ == "__main__":
    main()
