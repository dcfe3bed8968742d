#!/usr/bin/env python3
"""Runs an example application and checks the JSON object on the last line of its output.

check_report.py --app gemm --n 300 --tile 64 --ranks 2 --kernel cpu --iterations 1 \
    --verified true --tasks GEMM=125 -- mpiexec -n 2 ./gemm --n 300 ...
"""

import argparse
import math

from report_runner import command_after_dashes, failer, run_report

fail = failer("check_report")


def tasks_per_rank(app, n, tile, grid):
    """Tasks per rank of one iteration of the example on a PxQ grid (block-cyclic, each task on
    the owner of the tile it writes; tile divides n)."""
    p, q = (int(x) for x in grid.split("x"))
    t = n // tile
    counts = [0] * (p * q)

    def owner(m, c):
        return (m % p) * q + c % q

    if app == "gemm":
        for i in range(t):
            for j in range(t):
                counts[owner(i, j)] += t
    else:
        for k in range(t):
            counts[owner(k, k)] += 1                           # POTRF(k)
            for m in range(k + 1, t):
                counts[owner(m, k)] += 1                       # TRSM(m, k)
                counts[owner(m, m)] += 1                       # SYRK(m, k)
                for c in range(k + 1, m):
                    counts[owner(m, c)] += 1                   # GEMM(m, c, k)
    return counts


def check_tile_auto(report, output, args, expect):
    """--tile auto: the choice of tile and grid in the report, the least predicted time of every
    tile on every grid, and the run made with it (task counts, per rank)."""
    auto = report.get("tile_auto")
    if not isinstance(auto, dict):
        expect(False, "key 'tile_auto' missing")
        return
    expect(auto.get("chosen") == report["tile"],
           f"tile_auto.chosen {auto.get('chosen')!r}, but the run's tile is {report['tile']}")
    candidates = auto.get("candidates", [])
    tiles = [c.get("tile") for c in candidates]
    if args.tile_candidates:
        wanted = [int(t) for t in args.tile_candidates.split(",")]
        expect(tiles == wanted, f"tile_auto candidates {tiles}, expected {wanted}")
    grids = auto.get("grids", [])
    if args.tile_grids:
        wanted = args.tile_grids.split(",")
        expect(grids == wanted, f"tile_auto grids {grids}, expected {wanted}")
    grid = auto.get("grid")
    expect(grid in grids, f"chosen grid {grid!r} is not one of {grids}")
    expect(report["tile"] in tiles, f"chosen tile {report['tile']} is not a candidate {tiles}")
    for c in candidates:
        expect(c.get("gemm_gflops", 0) > 0 and c.get("predicted_seconds", 0) > 0,
               f"candidate {c.get('tile')}: speed {c.get('gemm_gflops')!r}, predicted "
               f"{c.get('predicted_seconds')!r}")
    predictions = auto.get("predictions", [])
    pairs = [(p.get("tile"), p.get("grid")) for p in predictions]
    expected_pairs = [(t, g) for t in tiles for g in grids]
    expect(pairs == expected_pairs,
           f"tile_auto predictions for {pairs}, expected every tile on every grid {expected_pairs}")
    overhead = auto.get("task_overhead", {})
    expect(auto.get("task_overhead_us", -1) >= 0 and overhead.get("tile") == min(tiles or [0])
           and 0 < overhead.get("measuring_seconds", 0) < 2.0,
           f"task overhead {auto.get('task_overhead_us')!r} us, probe {overhead!r}: expected at "
           f"least 0, measured at the smallest candidate in under 2 s")
    predicted = [p["predicted_seconds"] for p in predictions if p.get("predicted_seconds")]
    chosen = [p for p in predictions if (p.get("tile"), p.get("grid")) == (report["tile"], grid)]
    if predicted and chosen:
        expect(chosen[0]["predicted_seconds"] <= min(predicted) * 1.02 + 1e-12,
               f"chosen tile {report['tile']} on {grid} predicted {chosen[0]['predicted_seconds']}"
               f" s, best {min(predicted)} s")
        model_tasks = [c.get("tasks") for c in candidates if c.get("tile") == report["tile"]][0]
        ran = sum(sum(s.get("tasks_by_class", {}).values()) for s in report.get("rank_stats", []))
        expect(ran == model_tasks * args.iterations,
               f"{ran} tasks ran, the model counted {model_tasks} per iteration")
        per_rank = {s.get("rank"): sum(s.get("tasks_by_class", {}).values())
                    for s in report.get("rank_stats", [])}
        wanted = tasks_per_rank(args.app, args.n, report["tile"], grid)
        got = [per_rank.get(r, 0) for r in range(len(wanted))]
        expect(got == [w * args.iterations for w in wanted],
               f"tasks per rank {got}, expected {wanted} per iteration on grid {grid}")
    if "--quiet" not in args.command:
        expect(f"tile auto: {report['tile']} of " in output and f", grid {grid} of " in output,
               f"no line 'tile auto: {report['tile']} of ..., grid {grid} of ...' in the output")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--app", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--tile", required=True,
                        help="the tile order, or auto: the report's tile_auto names the chosen "
                             "tile, the candidates (--tile-candidates), their speeds and "
                             "predicted times, and the run's task count is the chosen tile's")
    parser.add_argument("--tile-candidates",
                        help="with --tile auto: the candidate sizes, comma-separated")
    parser.add_argument("--tile-grids",
                        help="with --tile auto: the grids chosen among, comma-separated PxQ")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--iterations", type=int, required=True)
    parser.add_argument("--verified", choices=["true", "false"], required=True)
    parser.add_argument("--link-gbps", type=float,
                        help="the emulated device's host <-> device link the report names")
    parser.add_argument("--gpus-used", type=int,
                        help="every rank's first N devices (its GPUs) each ran a task, and the "
                             "per-device counts add up to its tasks")
    parser.add_argument("--tasks", action="append", default=[],
                        help="CLASS=COUNT per iteration, summed over rank_stats")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    report, output = run_report(command_after_dashes(args.command, fail), fail)

    problems = []

    def expect(condition, message):
        if not condition:
            problems.append(message)

    for key in ("app", "n", "tile", "ranks", "kernel", "iterations", "verified", "residual",
                "rank_stats"):
        expect(key in report, f"key '{key}' missing")
    if problems:
        fail("; ".join(problems), output)

    expect(report["app"] == args.app, f"app {report['app']!r}, expected {args.app!r}")
    expect(report["n"] == args.n, f"n {report['n']}, expected {args.n}")
    if args.tile == "auto":
        check_tile_auto(report, output, args, expect)
    else:
        expect(report["tile"] == int(args.tile), f"tile {report['tile']}, expected {args.tile}")
    expect(report["ranks"] == args.ranks, f"ranks {report['ranks']}, expected {args.ranks}")
    expect(report["kernel"] == args.kernel, f"kernel {report['kernel']!r}, expected {args.kernel!r}")

    if args.link_gbps is not None:
        expect(report.get("emulated_link_gbps") == args.link_gbps,
               f"emulated_link_gbps {report.get('emulated_link_gbps')!r}, expected {args.link_gbps}")

    iterations = report["iterations"]
    expect(isinstance(iterations, list) and len(iterations) == args.iterations,
           f"{len(iterations)} iterations, expected {args.iterations}")
    for i, it in enumerate(iterations):
        seconds, gflops = it.get("seconds"), it.get("gflops")
        expect(isinstance(seconds, (int, float)) and seconds > 0,
               f"iterations[{i}].seconds = {seconds!r}")
        expect(isinstance(gflops, (int, float)) and gflops > 0 and math.isfinite(gflops),
               f"iterations[{i}].gflops = {gflops!r}")
        expect(it.get("ranks") == args.ranks, f"iterations[{i}].ranks = {it.get('ranks')!r}")

    verified = args.verified == "true"
    expect(report["verified"] is verified, f"verified {report['verified']!r}, expected {verified}")
    residual = report["residual"]
    if verified:
        expect(isinstance(residual, (int, float)) and 0 <= residual and math.isfinite(residual),
               f"residual {residual!r} is not a finite number")
    else:
        expect(residual is None, f"residual {residual!r}, expected null without --verify")

    stats = report["rank_stats"]
    expect(len(stats) == args.ranks, f"{len(stats)} rank_stats entries, expected {args.ranks}")
    expect(sorted(s.get("rank") for s in stats) == list(range(args.ranks)),
           "rank_stats ranks are not 0..ranks-1")
    for spec in args.tasks:
        name, count = spec.split("=")
        total = sum(s.get("tasks_by_class", {}).get(name, 0) for s in stats)
        expected = int(count) * args.iterations
        expect(total == expected, f"{total} {name} tasks in rank_stats, expected {expected}")
    if args.gpus_used is not None:
        for s in stats:
            by_device = s.get("tasks_by_device", [])
            expect(len(by_device) >= args.gpus_used and all(c > 0 for c in by_device[:args.gpus_used]),
                   f"rank {s.get('rank')}: tasks_by_device {by_device}, expected its {args.gpus_used} GPUs each to run tasks")
            expect(sum(by_device) == s.get("tasks"),
                   f"rank {s.get('rank')}: tasks_by_device {by_device} do not add up to its {s.get('tasks')} tasks")
    all_tasks = sum(s.get("tasks", 0) for s in stats)
    by_class = sum(sum(s.get("tasks_by_class", {}).values()) for s in stats)
    expect(all_tasks == by_class, f"rank_stats tasks {all_tasks} != sum by class {by_class}")
    sent = sum(s.get("bytes_sent", 0) for s in stats)
    received = sum(s.get("bytes_received", 0) for s in stats)
    expect(sent == received, f"bytes sent {sent} != bytes received {received}")

    if problems:
        fail("; ".join(problems), output)
    print(output.rstrip().splitlines()[-1])
    print("check_report: PASS")


if __name__ == "__main__":
    main()
