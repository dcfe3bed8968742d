#!/usr/bin/env python3
"""Stealing on against off where moving a tile costs about as much as running it.

At the emulated device's default 1000 GFLOP/s per rank a tile task runs in 0.03-0.3 ms, about
what moving its tiles takes. Runs gemm, cholesky and skewed bspgemm with stealing off and on,
interleaved in each round, for every build given (e.g. the build before the cost rule and the
one after), and prints the median over rounds of the ratio off / on within a round (>= 0.98:
stealing costs nothing; the machine is shared and noisy, so only ratios within a round count).
Each configuration's times are also given against two bounds, from its steal-off runs: the
perfect-balance bound (an iteration's flops over all ranks at the emulated rate) and a
communication bound (the most bytes a rank received per iteration over that rank's measured
transfer bandwidth, CostModel's fit), so that what is left over both is visible.

  python3 bench/steal_cost.py --builds build/base,build/default --tiles 256,512 --rounds 3

--variants runs stealing on in several ways beside each other, to find where an overhead comes
from, e.g. --variants "on=;noask=--steal-device-threshold 0 --steal-node-threshold 0" (ranks that
give but never ask).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, run_json, makespan  # noqa: E402

def iteration_bounds(report, gflops):
    """(perfect-balance s, communication s) of one iteration of `report` (see the docstring)."""
    iterations = report["iterations"]
    flops = statistics.median(it["gflops"] * it["seconds"] * 1e9 for it in iterations)
    balance = flops / (report["ranks"] * gflops * 1e9)
    comm = 0.0
    for rank in report["rank_stats"]:
        rate = rank["cost"]["transfer_gbytes_per_s"] * 1e9
        if rate > 0:
            comm = max(comm, rank["bytes_received"] / len(iterations) / rate)
    return balance, comm


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--builds", default="build/default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--tiles", default="256,512")
    ap.add_argument("--n", type=int, default=8192, help="gemm and cholesky order")
    ap.add_argument("--bsp-n", type=int, default=4096, help="bspgemm order")
    ap.add_argument("--gflops", type=float, default=1000.0)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1,
                    help="iterations left out of each run's median (default 1)")
    ap.add_argument("--apps", default="gemm,cholesky,bspgemm")
    ap.add_argument("--variants", default="on=",
                    help="label=extra flags of a steal-on run, ';' between variants")
    args = ap.parse_args()
    variants = {}
    for item in args.variants.split(";"):
        label, _, flags = item.partition("=")
        variants[label.strip()] = flags.split()
    builds = args.builds.split(",")
    tiles = [int(t) for t in args.tiles.split(",")]
    apps = args.apps.split(",")

    def run(build, app, tile, steal, extra=()):
        n = args.bsp_n if app == "bspgemm" else args.n
        cmd = [MPIEXEC, "-n", str(args.ranks), os.path.join(build, "examples", app),
               "--n", str(n), "--tile", str(tile), "--steal", steal, "--kernel", "emulated",
               "--emulated-gflops", str(args.gflops), "--iterations", str(args.iterations),
               "--quiet"]
        if app == "bspgemm":
            cmd += ["--pattern", "skewed", "--density", "0.5"]
        return run_json(cmd + list(extra))

    times = {}   # (app, tile, label) -> per round
    ratios = {}  # (app, tile, build) -> per round
    stolen = {}  # (app, tile, build) -> per round
    requests = {}  # (app, tile, build) -> per round
    bounds = {}  # (app, tile) -> per round: (perfect-balance s, communication s)
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for tile in tiles:
            for app in apps:
                off_report = run(builds[-1], app, tile, "off")
                off = makespan(off_report, args.warmup)
                times.setdefault((app, tile, "off"), []).append(off)
                bounds.setdefault((app, tile), []).append(iteration_bounds(off_report, args.gflops))
                for build in builds:
                    for variant, extra in variants.items():
                        name = build if len(variants) == 1 else f"{build} {variant}"
                        report = run(build, app, tile, "on", extra)
                        on = makespan(report, args.warmup)
                        times.setdefault((app, tile, f"on {name}"), []).append(on)
                        ratios.setdefault((app, tile, name), []).append(off / on)
                        stolen.setdefault((app, tile, name), []).append(
                            report["steal"]["tasks_stolen"])
                        requests.setdefault((app, tile, name), []).append(
                            report["steal"].get("requests_sent", 0))

    print(f"\nemulated device {args.gflops:g} GFLOP/s per rank, {args.ranks} ranks, gemm/cholesky "
          f"n={args.n}, bspgemm skewed n={args.bsp_n} density 0.5, {args.iterations} iterations "
          f"(median of {args.warmup + 1}..), {args.rounds} interleaved rounds\n")
    print(f"{'configuration':<44}{'median s':>10}   per round")
    for (app, tile, label), values in times.items():
        name = f"{app} tile {tile} steal {label}"
        print(f"{name:<44}{statistics.median(values):>10.4f}   " +
              " ".join(f"{v:.4f}" for v in values))
    print(f"\n{'bounds (steal-off runs, median)':<44}{'balance s':>10}{'comm s':>10}"
          f"{'off/balance':>12}{'off/comm':>10}{'on/balance':>12}{'on/comm':>10}")
    for (app, tile), values in bounds.items():
        balance = statistics.median(b for b, _ in values)
        comm = statistics.median(c for _, c in values)
        off = statistics.median(times[(app, tile, "off")])
        last = builds[-1] if len(variants) == 1 else f"{builds[-1]} {next(iter(variants))}"
        on = statistics.median(times[(app, tile, f"on {last}")])
        print(f"{app + ' tile ' + str(tile):<44}{balance:>10.4f}{comm:>10.4f}{off / balance:>12.2f}"
              f"{off / comm if comm > 0 else float('inf'):>10.2f}{on / balance:>12.2f}"
              f"{on / comm if comm > 0 else float('inf'):>10.2f}")
    print(f"\n{'ratio off / on (same round)':<44}{'median':>8}  target  stolen/run  requests/run  per round")
    for (app, tile, build), values in ratios.items():
        med = statistics.median(values)
        name = f"{app} tile {tile} {build}"
        print(f"{name:<44}{med:>8.3f}  >=0.98  {statistics.median(stolen[(app, tile, build)]):>10.0f}  "
              f"{statistics.median(requests[(app, tile, build)]):>12.0f}  "
              + " ".join(f"{v:.3f}" for v in values) + ("  met" if med >= 0.98 else "  NOT met"))


if __name__ == "__main__":
    main()
