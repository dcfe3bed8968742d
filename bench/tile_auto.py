#!/usr/bin/env python3
"""--tile auto against every hand-picked tile and grid: GEMM and Cholesky in interleaved rounds.

Every round runs each configuration once (A B C ... A B C ...), so that the host's drifting
load hits all of them alike: per example each hand-picked tile on each process grid of the rank
count (--grid PxQ), and --tile auto, which chooses both (docs/runtime.md, "The tile size from
measured kernel speeds"). It prints per configuration the median GFLOP/s of the steady
iterations (the best after the first) and of the first; for --tile auto also the tile and grid
it chose, the per-task overhead it measured and the seconds its measuring took (before the first
iteration, not in the GFLOP/s). The ratios are taken in each round: auto over the best
hand-picked configuration of that round, and auto over the hand-picked run of the tile and grid
it chose (the same configuration twice: what the host's noise alone makes of a ratio). The
host's load averages are printed before and after.

  python3 bench/tile_auto.py --build build/default --n 4096 --rounds 3
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (MPIEXEC, add_example_arguments, autogroup_prefix,  # noqa: E402
                          check_example_arguments, load_average, run_json)


def grids_of(ranks):
    """Every PxQ grid of `ranks` ranks, as --grid spells it."""
    return [f"{p}x{ranks // p}" for p in range(1, ranks + 1) if ranks % p == 0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_example_arguments(ap)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--gemm-tiles", default="256,512,1024")
    ap.add_argument("--cholesky-tiles", default="128,256,512")
    ap.add_argument("--grids", default=None,
                    help="the hand-picked grids, comma-separated PxQ (default: every grid of "
                    "--ranks)")
    ap.add_argument("--only", choices=["all", "cholesky", "gemm"], default="all")
    args = ap.parse_args()
    check_example_arguments(ap, args)
    if args.iterations < 2:
        ap.error("--iterations must be at least 2 (the first is reported apart)")
    grids = args.grids.split(",") if args.grids else grids_of(args.ranks)
    ex = os.path.join(args.build, "examples")
    prefix = autogroup_prefix(args, "tile-auto-rank")

    def run(app, tile, grid):
        j = run_json([MPIEXEC, "-n", str(args.ranks)] + prefix +
                     [os.path.join(ex, app), "--n", str(args.n), "--tile", str(tile),
                      "--iterations", str(args.iterations), "--quiet"] +
                     (["--grid", grid] if grid else []))
        gflops = [it["gflops"] for it in j["iterations"]]
        auto = j.get("tile_auto", {})
        return {"steady": max(gflops[1:]), "first": gflops[0], "tile": j["tile"],
                "grid": auto.get("grid", grid), "measuring": auto.get("measuring_seconds", 0.0),
                "overhead_us": auto.get("task_overhead_us", 0.0)}

    apps = [a for a in ("gemm", "cholesky") if args.only in ("all", a)]
    configs = []
    for app in apps:
        for tile in (args.gemm_tiles if app == "gemm" else args.cholesky_tiles).split(","):
            for grid in grids:
                configs.append((app, tile, grid))
        configs.append((app, "auto", None))
    samples = {c: [] for c in configs}
    load_before = load_average()
    for r in range(args.rounds):
        for app, tile, grid in configs:
            s = run(app, tile, grid)
            samples[(app, tile, grid)].append(s)
            print(f"round {r + 1}: {app} tile {tile} grid {grid or 'auto'}: {s['steady']:.1f} "
                  f"GFLOP/s (first {s['first']:.1f}, tile {s['tile']} grid {s['grid']})",
                  file=sys.stderr, flush=True)
    load_after = load_average()

    def name(app, tile, grid):
        return f"{app} tile {tile} grid {grid or 'auto'}"

    print(f"\nN={args.n}, {args.ranks} ranks x 1 worker, {args.iterations} iterations, "
          f"{args.rounds} interleaved rounds; load average before {load_before}, after "
          f"{load_after} ({os.cpu_count()} cores)\n")
    print(f"{'configuration':32s} {'steady':>7s} {'first':>7s}   steady per round (GFLOP/s)"
          "   [auto: tile grid chosen, task overhead, seconds measuring]")
    for key, vals in samples.items():
        steady = statistics.median(v["steady"] for v in vals)
        first = statistics.median(v["first"] for v in vals)
        line = f"{name(*key):32s} {steady:7.1f} {first:7.1f}   " + \
            " ".join(f"{v['steady']:.1f}" for v in vals)
        if key[1] == "auto":
            line += "   [" + ", ".join(f"{v['tile']} {v['grid']} {v['overhead_us']:.0f} us "
                                       f"{v['measuring']:.2f} s" for v in vals) + "]"
        print(line)
    print(f"\n{'ratio (same round)':58s} {'median':>7s}   per round")
    for app in apps:
        hand = [c for c in configs if c[0] == app and c[1] != "auto"]
        auto = samples[(app, "auto", None)]
        for key, label in (("steady", "steady"), ("first", "first iteration")):
            best, same = [], []
            for r in range(args.rounds):
                best.append(auto[r][key] / max(samples[c][r][key] for c in hand))
                twin = (app, str(auto[r]["tile"]), auto[r]["grid"])
                if twin in samples:
                    same.append(auto[r][key] / samples[twin][r][key])
            print(f"{app + ' auto / best hand-picked, ' + label:58s} "
                  f"{statistics.median(best):7.2f}   " + " ".join(f"{x:.2f}" for x in best))
            if same:
                print(f"{app + ' auto / hand-picked run of its choice, ' + label:58s} "
                      f"{statistics.median(same):7.2f}   " + " ".join(f"{x:.2f}" for x in same))


if __name__ == "__main__":
    main()
