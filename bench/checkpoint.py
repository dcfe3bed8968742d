#!/usr/bin/env python3
"""Buddy-checkpoint benchmark: the failure-free overhead of checkpointing on dense GEMM and
Cholesky, checkpoints on against off.

Every rank names a node of its own (BELLOWS_NODE, one mpiexec segment per rank), so that each
has a buddy on another node and every checkpoint sends each rank's tiles to it. The ranks run
the emulated device computing (--kernel emulated --emulated-compute on) at each speed given.
Three runs per configuration and round, interleaved in each round because the machine is shared
and noisy; ratios are taken within a round, and their median over the rounds is printed:

  - every iteration / off: a checkpoint at every boundary (--checkpoint-every 1), the most
    a checkpoint can cost an iteration: what overlapping the sends with the iteration leaves;
  - Young/Daly / off: the interval the runtime picks from the measured cost and a node's
    mean time between failures (--checkpoint-mtbf, default a year);

each as the mean iteration time over the iterations after the first (which every
configuration with checkpoints starts with one, and which pays the warm-up). A run of a few
iterations at Young/Daly's interval takes no checkpoint after the first, so its ratio shows the
machine's noise; the amortized ratio spreads what a checkpoint added to an iteration (every
iteration - off) over the interval instead. Also printed:
what one checkpoint moved and cost on the slowest rank (posting at the boundary, waiting at
the end of the iteration that carried it) against the iteration time. Target: under 3 %.

  python3 bench/checkpoint.py --build build/default --rounds 3
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, mean_after_first, print_rounds, run_json  # noqa: E402

TARGET = 1.03


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--gflops", default="10,1000", help="emulated device speeds")
    ap.add_argument("--mtbf", type=float, default=365 * 24 * 3600.0,
                    help="a node's mean time between failures, seconds, for the Young/Daly runs")
    ap.add_argument("--apps", default="gemm,cholesky")
    args = ap.parse_args()
    ex = os.path.join(args.build, "examples")

    def run(app, gflops, checkpoint):
        common = ["--n", str(args.n), "--tile", str(args.tile), "--iterations",
                  str(args.iterations), "--kernel", "emulated", "--emulated-gflops", str(gflops),
                  "--emulated-compute", "on", "--quiet"] + checkpoint
        cmd = [MPIEXEC]
        for rank in range(args.ranks):
            if rank:
                cmd.append(":")
            cmd += ["-n", "1", "-env", "BELLOWS_NODE", f"node{rank}",
                    os.path.join(ex, app)] + common
        return run_json(cmd)

    configurations = {
        "off": ["--checkpoint", "off"],
        "every iteration": ["--checkpoint", "on", "--checkpoint-every", "1"],
        "Young/Daly": ["--checkpoint", "on", "--checkpoint-mtbf", str(args.mtbf)],
    }
    speeds = [float(g) for g in args.gflops.split(",")]
    apps = args.apps.split(",")
    rows = {}    # measurement -> values per round
    ratios = {}  # ratio -> values per round

    def add(table, key, value):
        table.setdefault(key, []).append(value)

    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for app in apps:
            for gflops in speeds:
                label = f"{app} {gflops:g} GFLOP/s"
                times = {}
                for name, flags in configurations.items():
                    report = run(app, gflops, flags)
                    times[name] = mean_after_first(report)
                    add(rows, f"{label}, checkpoints {name}: iteration (s)", times[name])
                    cp = report["checkpoint"]
                    if name == "every iteration":
                        taken = max(cp["checkpoints"], 1)
                        per_checkpoint = (cp["post_seconds"] + cp["wait_seconds"]) / taken
                        add(rows, f"{label}: bytes sent per checkpoint, all ranks (MB)",
                            cp["bytes_sent"] / taken / 1e6)
                        add(rows, f"{label}: posting + waiting per checkpoint, slowest rank (ms)",
                            per_checkpoint * 1e3)
                        add(rows, f"{label}: of which waiting at the iteration's end (ms)",
                            cp["wait_seconds"] / taken * 1e3)
                        add(ratios, f"{label}: checkpoint's own time / iteration",
                            1.0 + per_checkpoint / times["off"])
                    if name == "Young/Daly":
                        add(rows, f"{label}: Young/Daly checkpoints in {args.iterations} iterations",
                            cp["checkpoints"])
                        add(rows, f"{label}: Young/Daly interval (iterations)",
                            cp["interval_iterations"])
                add(ratios, f"{label}: every iteration / off", times["every iteration"] / times["off"])
                add(ratios, f"{label}: Young/Daly / off", times["Young/Daly"] / times["off"])
                # What a checkpoint costs an iteration, all interference included, spread over
                # the interval Young/Daly picked: the overhead of that interval over a long run.
                extra = max(times["every iteration"] - times["off"], 0.0)
                interval = max(rows[f"{label}: Young/Daly interval (iterations)"][-1], 1)
                add(ratios, f"{label}: Young/Daly amortized (1 + extra per checkpoint / "
                            f"(interval x iteration))", 1.0 + extra / (interval * times["off"]))

    print(f"\n{args.ranks} ranks, one node each, emulated device computing, n={args.n} "
          f"tile={args.tile}, {args.iterations} iterations (mean of 2..), {args.rounds} "
          f"interleaved rounds, node MTBF {args.mtbf:g} s for Young/Daly\n")
    print_rounds(rows, ratios, TARGET)


if __name__ == "__main__":
    main()
