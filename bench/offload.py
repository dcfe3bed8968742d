#!/usr/bin/env python3
"""Proactive offloading: reactive stealing alone against proactive offloading plus stealing.

Three jobs, on the emulated device (each task costs flops / rate seconds of modeled time while
queues, messages and tile transfers stay real), at 10 GFLOP/s (the slow regime) and 1000
GFLOP/s (the GPU regime) per rank:
  - skewed: block-sparse GEMM, skewed pattern: the same imbalance every iteration;
  - slowed: dense GEMM, balanced until rank 1's device runs --slow-factor times slower from
    iteration --slow-from on (a noisy neighbour): the imbalance changes part-way;
  - skewed_slowed: the skewed job with rank 1 slowed the same way: an imbalance that changes
    part-way on top of one that does not;
  - cholesky_slowed: dense Cholesky with rank 1 slowed the same way: the slowed rank's tasks
    are on the critical path in turn.
Both configurations run interleaved in each round, and ratios are taken within a round,
because the machine is shared and noisy.

  python3 bench/offload.py --build build/default --rounds 3

Prints, per job and speed, the median makespan of each configuration (skewed: the median
iteration after the first; slowed: the sum of the iterations from the slowdown on), the
perfect-balance bound, each makespan over that bound, and the median over rounds of the
ratio reactive / proactive (> 1: offloading shortens the makespan). The bound of the skewed
job is the example's own (max(total modeled work / ranks, longest chain)); that of the slowed
jobs is the work of an iteration spread over the ranks' speeds (rank 1 at 1 / factor), and for
skewed_slowed at least the longest chain.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, run_json, makespan  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--speeds", default="10,1000", help="emulated GFLOP/s per rank")
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--bsp-n", type=int, default=4096, help="bspgemm order")
    ap.add_argument("--gemm-n", type=int, default=2048, help="gemm order")
    ap.add_argument("--cholesky-n", type=int, default=4096, help="cholesky order")
    ap.add_argument("--iterations", type=int, default=4, help="skewed job")
    ap.add_argument("--slow-iterations", type=int, default=6, help="slowed job")
    ap.add_argument("--slow-from", type=int, default=3)
    ap.add_argument("--slow-factor", type=float, default=3.0)
    ap.add_argument("--jobs", default="skewed,slowed",
                    help="any of skewed, slowed, skewed_slowed, cholesky_slowed")
    args = ap.parse_args()
    ex = os.path.join(args.build, "examples")
    speeds = [float(s) for s in args.speeds.split(",")]
    jobs = args.jobs.split(",")
    configurations = {"reactive": ["--steal", "on", "--offload", "off"],
                      "proactive": ["--steal", "on", "--offload", "on"]}

    def run(job, gflops, flags):
        common = ["--kernel", "emulated", "--emulated-gflops", f"{gflops:g}", "--tile",
                  str(args.tile), "--quiet"] + flags
        slowdown = ["--slow-rank", "1", "--slow-from", str(args.slow_from), "--slow-factor",
                    f"{args.slow_factor:g}"]
        skewed = [MPIEXEC, "-n", str(args.ranks), os.path.join(ex, "bspgemm"), "--n",
                  str(args.bsp_n), "--pattern", "skewed", "--density", "0.5"]
        if job == "skewed":
            cmd = skewed + ["--iterations", str(args.iterations)] + common
        elif job == "skewed_slowed":
            cmd = skewed + ["--iterations", str(args.slow_iterations)] + slowdown + common
        elif job == "cholesky_slowed":
            cmd = [MPIEXEC, "-n", str(args.ranks), os.path.join(ex, "cholesky"), "--n",
                   str(args.cholesky_n), "--iterations", str(args.slow_iterations)] + slowdown + common
        else:
            cmd = [MPIEXEC, "-n", str(args.ranks), os.path.join(ex, "gemm"), "--n",
                   str(args.gemm_n), "--iterations", str(args.slow_iterations)] + slowdown + common
        return run_json(cmd)

    def measure(job, gflops, report):
        """The job's makespan and its perfect-balance bound, seconds."""
        if job == "skewed":
            return makespan(report), report["balanced_bound_seconds"]
        slowed = report["iterations"][args.slow_from - 1:]
        time = sum(it["seconds"] for it in slowed)
        # One iteration's work at full speed, over the ranks' speeds summed (rank 1 slowed).
        speeds = args.ranks - 1 + 1.0 / args.slow_factor
        if job == "skewed_slowed":
            bound = max(report["work_seconds"] / speeds, report["critical_path_seconds"])
        elif job == "cholesky_slowed":
            flops = statistics.median(it["gflops"] * it["seconds"] * 1e9 for it in slowed)
            bound = flops / (gflops * 1e9) / speeds
        else:
            bound = 2.0 * args.gemm_n ** 3 / (gflops * 1e9) / speeds
        return time, len(slowed) * bound

    rows = {}     # (job, speed, label) -> per round
    ratios = {}   # (job, speed) -> per round
    moved = {}    # (job, speed) -> tasks offloaded per run
    held = {}     # (job, speed) -> iterations whose plan OffloadFeedback held back, per run
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for job in jobs:
            for gflops in speeds:
                times = {}
                for label, flags in configurations.items():
                    report = run(job, gflops, flags)
                    time, bound = measure(job, gflops, report)
                    times[label] = time
                    rows.setdefault((job, gflops, label), []).append(time)
                    rows.setdefault((job, gflops, f"{label} / bound"), []).append(time / bound)
                    if label == "proactive":
                        moved.setdefault((job, gflops), []).append(report["offload"]["tasks_offloaded"])
                        held.setdefault((job, gflops), []).append(
                            report["offload"].get("plans_held_back", 0))
                rows.setdefault((job, gflops, "perfect-balance bound"), []).append(bound)
                ratios.setdefault((job, gflops), []).append(times["reactive"] / times["proactive"])

    print(f"\n{args.ranks} ranks, tile {args.tile}; skewed: bspgemm n={args.bsp_n} density 0.5, "
          f"median of iterations 2..{args.iterations}; slowed: gemm n={args.gemm_n}, rank 1 "
          f"{args.slow_factor:g}x slower from iteration {args.slow_from}, iterations "
          f"{args.slow_from}..{args.slow_iterations} summed (skewed_slowed: the skewed job so "
          f"slowed); {args.rounds} interleaved rounds\n")
    print(f"{'measurement':<44}{'median':>10}   per round")
    for (job, gflops, label), values in rows.items():
        name = f"{job} {gflops:g} GFLOP/s {label}" + ("" if "/" in label else " (s)")
        print(f"{name:<44}{statistics.median(values):>10.4f}   " +
              " ".join(f"{v:.4f}" for v in values))
    print(f"\n{'reactive / proactive (same round)':<44}{'median':>10}  tasks offloaded/run"
          f"  plans held back/run  per round")
    for (job, gflops), values in ratios.items():
        name = f"{job} {gflops:g} GFLOP/s"
        print(f"{name:<44}{statistics.median(values):>10.3f}  "
              f"{statistics.median(moved[(job, gflops)]):>19.0f}  "
              f"{statistics.median(held[(job, gflops)]):>19.0f}  " +
              " ".join(f"{v:.3f}" for v in values))


if __name__ == "__main__":
    main()
