#!/usr/bin/env python3
"""--tile auto against hand-picked tiles: GEMM and Cholesky, side by side in interleaved rounds.

Every round runs each configuration once (A B C ... A B C ...), so that the host's drifting
load hits all of them alike, and prints per configuration the median GFLOP/s of the steady
iterations (after the first) and of the first; for --tile auto also the tile it chose and the
seconds its measuring took (before the first iteration, not in the GFLOP/s). The ratios are
taken in each round: auto over the best hand-picked tile of that round. The host's load
average is printed before and after.

  python3 bench/tile_auto.py --build build/default --n 4096 --rounds 3
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, run_json  # noqa: E402


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--gemm-tiles", default="256,512,1024")
    ap.add_argument("--cholesky-tiles", default="128,256,512")
    args = ap.parse_args()
    if args.iterations < 2:
        ap.error("--iterations must be at least 2 (the first is reported apart)")
    ex = os.path.join(args.build, "examples")

    def run(app, tile):
        j = run_json([MPIEXEC, "-n", str(args.ranks), os.path.join(ex, app), "--n", str(args.n),
                      "--tile", str(tile), "--iterations", str(args.iterations), "--quiet"])
        gflops = [it["gflops"] for it in j["iterations"]]
        auto = j.get("tile_auto", {})
        return {"steady": max(gflops[1:]), "first": gflops[0], "tile": j["tile"],
                "measuring": auto.get("measuring_seconds", 0.0)}

    configs = []
    for app, tiles in (("gemm", args.gemm_tiles), ("cholesky", args.cholesky_tiles)):
        for tile in tiles.split(",") + ["auto"]:
            configs.append((app, tile))
    samples = {c: [] for c in configs}
    load_before = load_average()
    for r in range(args.rounds):
        for app, tile in configs:
            s = run(app, tile)
            samples[(app, tile)].append(s)
            print(f"round {r + 1}: {app} tile {tile}: {s['steady']:.1f} GFLOP/s (first "
                  f"{s['first']:.1f}, tile {s['tile']})", file=sys.stderr, flush=True)
    load_after = load_average()

    print(f"\nN={args.n}, {args.ranks} ranks x 1 worker, {args.iterations} iterations, "
          f"{args.rounds} interleaved rounds; load average before {load_before}, after "
          f"{load_after}\n")
    print(f"{'configuration':24s} {'steady':>7s} {'first':>7s}   steady per round (GFLOP/s)"
          "   [auto: tile chosen, seconds measuring]")
    for (app, tile), vals in samples.items():
        steady = statistics.median(v["steady"] for v in vals)
        first = statistics.median(v["first"] for v in vals)
        line = f"{app + ' tile ' + tile:24s} {steady:7.1f} {first:7.1f}   " + \
            " ".join(f"{v['steady']:.1f}" for v in vals)
        if tile == "auto":
            line += "   [" + ", ".join(f"{v['tile']} {v['measuring']:.2f} s" for v in vals) + "]"
        print(line)
    print(f"\n{'ratio (same round)':44s} {'median':>7s}   per round")
    for app in ("gemm", "cholesky"):
        hand = [c for c in configs if c[0] == app and c[1] != "auto"]
        for key, label in (("steady", "steady"), ("first", "first iteration")):
            ratios = []
            for r in range(args.rounds):
                best = max(samples[c][r][key] for c in hand)
                ratios.append(samples[(app, "auto")][r][key] / best)
            print(f"{app + ' auto / best hand-picked, ' + label:44s} "
                  f"{statistics.median(ratios):7.2f}   " + " ".join(f"{x:.2f}" for x in ratios))


if __name__ == "__main__":
    main()
