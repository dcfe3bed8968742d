#!/usr/bin/env python3
"""Hybrid device choice against the static mappings, on a workload of mixed fill.

One rank with one CPU worker and the emulated device (one lane, a host <-> device link of
--link-gbps). The workload is bspgemm with thin k slabs (--thin-fraction of them hold only
--thin-width nonzero columns of A / rows of B, stored dense): their products are cheap to
compute and as expensive to move as the full ones, which are compute-heavy. Runs, interleaved
in each round:

  cpu      every task on the CPU worker (--kernel cpu, today's static CPU mapping)
  device   every task on the emulated device (--kernel emulated, today's static device mapping)
  hybrid   each task where DeviceChoice predicts it finishes first (--kernel hybrid)

and prints per round the ratio best static / hybrid (same round), and its median (target
>= 1.3). The emulated device does not compute here (the CPU worker does, for real), so the
results are not verified; the tests check hybrid's results with --emulated-compute on.

  python3 bench/device_choice.py --rounds 3
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
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--k", type=int, default=8192, help="inner dimension")
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--density", type=float, default=0.5)
    ap.add_argument("--pattern", default="random")
    ap.add_argument("--thin-fraction", type=float, default=0.5)
    ap.add_argument("--thin-width", type=int, default=4)
    ap.add_argument("--gflops", type=float, default=200.0, help="emulated device speed")
    ap.add_argument("--link-gbps", type=float, default=12.0)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--modes", default="cpu,device,hybrid")
    args = ap.parse_args()
    kernels = {"cpu": "cpu", "device": "emulated", "hybrid": "hybrid"}
    modes = args.modes.split(",")

    def run(mode):
        cmd = [MPIEXEC, "-n", "1", os.path.join(args.build, "examples", "bspgemm"),
               "--n", str(args.n), "--k", str(args.k), "--tile", str(args.tile),
               "--pattern", args.pattern, "--density", str(args.density),
               "--thin-fraction", str(args.thin_fraction), "--thin-width", str(args.thin_width),
               "--kernel", kernels[mode], "--workers", "1", "--emulated-lanes", "1",
               "--emulated-gflops", str(args.gflops), "--emulated-link-gbps", str(args.link_gbps),
               "--iterations", str(args.iterations), "--quiet"]
        return run_json(cmd)

    times = {m: [] for m in modes}
    on_device = {m: [] for m in modes}
    link = {m: [] for m in modes}
    ratios = []
    tasks = 0
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for mode in modes:
            report = run(mode)
            tasks = report["tasks"]
            times[mode].append(makespan(report))
            stats = report["rank_stats"][0]
            on_device[mode].append(stats.get("tasks_on_device", 0) / max(args.iterations, 1))
            link[mode].append(stats.get("link_bytes", 0) / max(args.iterations, 1) / 1e6)
        if "hybrid" in modes and len(modes) > 1:
            best = min(times[m][-1] for m in modes if m != "hybrid")
            ratios.append(best / times["hybrid"][-1])

    print(f"\nbspgemm {args.pattern} n={args.n} k={args.k} tile={args.tile} density {args.density}, "
          f"thin fraction {args.thin_fraction} width {args.thin_width}, {tasks} tasks; 1 rank: 1 CPU "
          f"worker + emulated device {args.gflops:g} GFLOP/s, link {args.link_gbps:g} GB/s; "
          f"{args.iterations} iterations (median of 2..), {args.rounds} interleaved rounds\n")
    print(f"{'mapping':<10}{'median s':>10}  {'on device':>10}  {'link MB':>9}   per round")
    for m in modes:
        print(f"{m:<10}{statistics.median(times[m]):>10.4f}  {statistics.median(on_device[m]):>10.0f}  "
              f"{statistics.median(link[m]):>9.1f}   " + " ".join(f"{v:.4f}" for v in times[m]))
    if ratios:
        med = statistics.median(ratios)
        print(f"\nbest static / hybrid (same round): median {med:.3f}, target >= 1.3, per round " +
              " ".join(f"{v:.3f}" for v in ratios) + ("  met" if med >= 1.3 else "  NOT met"))


if __name__ == "__main__":
    main()
