#!/usr/bin/env python3
"""Bag-of-tasks benchmark: the makespan of a heavy-tailed parameter sweep (the bag example)
distributed by Dtree, by random-victim stealing and in static blocks, against the
perfect-balance bound, on 2 to 8 ranks of this machine with the emulated device.

Every task is charged its modeled time (its work in flops over --emulated-gflops) while the
distribution's messages are real MPI between the ranks, so that 8 ranks share this machine's
cores. The bound of a run is what no distribution can beat by more than its largest task:
total modeled work / (ranks x workers, a slowed rank counted at its speed) + the largest
single task (the example's report computes it per iteration). Each job runs the bag twice
(--iterations 2, a new bag of --tasks each time): the first run weighs Dtree's shares evenly,
since no speed has been measured yet; the second weighs them by the speeds measured in the
first (a slowed rank's included). The three distributions run interleaved in each round,
because the machine is shared and noisy; the table gives the medians over the rounds.

  python3 bench/bag.py --build build/default --rounds 3

Prints, per case (rank count, slowed rank or none) and distribution: the median makespan of
the second run, its bound and its excess over the bound, and the first run's excess; then
whether Dtree's second run came within --target of the bound in every case.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, run_json  # noqa: E402

DISTRIBUTIONS = ("dtree", "steal", "static")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--tasks", type=int, default=20000, help="tasks per run")
    ap.add_argument("--iterations", type=int, default=2, help="runs per job (the last is reported)")
    ap.add_argument("--costs", default="lognormal", help="lognormal or pareto")
    ap.add_argument("--cost-shape", type=float, default=1.5, help="sigma or alpha")
    ap.add_argument("--mean-task-mflop", type=float, default=1.0)
    ap.add_argument("--gflops", type=float, default=5.0, help="emulated device speed")
    ap.add_argument("--slow-factor", type=float, default=3.0,
                    help="the slowed case: rank 1 runs its tasks this many times slower")
    ap.add_argument("--target", type=float, default=0.05)
    args = ap.parse_args()
    bag = os.path.join(args.build, "examples", "bag")

    def run(ranks, distribution, slow, seed):
        cmd = [MPIEXEC, "-n", str(ranks), bag, "--tasks", str(args.tasks * args.iterations),
               "--iterations", str(args.iterations), "--costs", args.costs,
               "--cost-shape", str(args.cost_shape), "--mean-task-mflop", str(args.mean_task_mflop),
               "--kernel", "emulated", "--emulated-gflops", str(args.gflops),
               "--distribution", distribution, "--seed", str(seed), "--verify", "--quiet"]
        if slow:
            cmd += ["--slow-rank", "1", "--slow-factor", str(args.slow_factor)]
        report = run_json(cmd)
        if not report["verified"]:
            sys.exit(f"bag: {distribution} on {ranks} ranks was not verified: {report}")
        return report

    cases = [(int(r), slow) for r in args.ranks.split(",") for slow in (False, True)]
    results = {(case, d): [] for case in cases for d in DISTRIBUTIONS}
    for round_index in range(args.rounds):
        for case in cases:
            for d in DISTRIBUTIONS:
                # The same bag in every distribution of a round; a new one each round.
                report = run(case[0], d, case[1], 42 + round_index)
                results[(case, d)].append(report)
        print(f"round {round_index + 1} of {args.rounds} done", file=sys.stderr, flush=True)

    print(f"bag: {args.tasks} tasks, {args.costs} (shape {args.cost_shape}), mean "
          f"{args.mean_task_mflop} MFLOP at {args.gflops} GFLOP/s emulated "
          f"({args.mean_task_mflop * 1e3 / args.gflops:.0f} us), {args.rounds} rounds, medians")
    print(f"{'ranks':>5} {'slowed':>7} {'distribution':>12} {'makespan s':>11} {'bound s':>8} "
          f"{'largest s':>9} {'over bound':>10} {'first run':>10}")
    worst_dtree = 0.0
    for case in cases:
        for d in DISTRIBUTIONS:
            last = [r["iterations"][-1] for r in results[(case, d)]]
            first = [r["iterations"][0] for r in results[(case, d)]]
            over = statistics.median(i["over_bound"] for i in last)
            makespan = statistics.median(i["seconds"] for i in last)
            bound = statistics.median(i["bound_seconds"] for i in last)
            largest = statistics.median(i["largest_task_seconds"] for i in last)
            over_first = statistics.median(i["over_bound"] for i in first)
            slowed = f"x{args.slow_factor:g}" if case[1] else "none"
            print(f"{case[0]:>5} {slowed:>7} {d:>12} {makespan:>11.3f} {bound:>8.3f} "
                  f"{largest:>9.4f} {100 * over:>+9.1f}% {100 * over_first:>+9.1f}%")
            if d == "dtree":
                worst_dtree = max(worst_dtree, over)
    verdict = "met" if worst_dtree <= args.target else "NOT met"
    print(f"Dtree's last run within {100 * args.target:.0f} % of the bound in every case: {verdict} "
          f"(worst median {100 * worst_dtree:+.1f} %)")


if __name__ == "__main__":
    main()
