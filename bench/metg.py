#!/usr/bin/env python3
"""METG of a 3-dependency stencil: libbellows against hand-written MPI, on 1 and 2 ranks.

METG(50 %) is Task Bench's "minimum effective task granularity" (Slaughter et al., SC 2020):
the smallest task duration at which useful compute still fills half of the cores' wall time.
Each configuration sweeps the task duration from --largest-us down to --smallest-us, halving
it (bench/metg.cpp); the configurations run in interleaved rounds (A B C D A B C D ...), so
that the machine's drifting load hits all of them alike, and the table holds each point's
median efficiency over the rounds. METG is interpolated linearly in the task duration between
the two points whose median efficiencies bracket 50 %.

  python3 bench/metg.py --build build/default --rounds 5

Prints the table, the METG line of each configuration, where libbellows' time goes at the
smallest points, empty tasks per second per rank (bench/task_overhead.cpp), and, as the last
line, a JSON object with all of it.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, run_json  # noqa: E402

CONFIGS = [("bellows", 1), ("bellows", 2), ("mpi", 1), ("mpi", 2)]
THRESHOLD = 0.5


def metg(points, threshold=THRESHOLD):
    """The task duration (us) where efficiency crosses `threshold`, from points ordered from
    the largest task to the smallest: interpolated between the last point at or above it and
    the next one. Returns (us, how): how is "interpolated", "below" (every point is at or above
    the threshold: METG is under the smallest point, which is returned) or "above" (no point
    reaches it: METG is over the largest point, which is returned)."""
    if not points:
        raise ValueError("metg: no points")
    if points[0]["efficiency"] < threshold:
        return points[0]["task_us"], "above"
    for big, small in zip(points, points[1:]):
        if big["efficiency"] >= threshold > small["efficiency"]:
            share = (threshold - small["efficiency"]) / (big["efficiency"] - small["efficiency"])
            return small["task_us"] + share * (big["task_us"] - small["task_us"]), "interpolated"
    return points[-1]["task_us"], "below"


def describe_metg(us, how):
    if how == "above":
        return f"> {us:.2f} us (no point reaches 50 %)"
    if how == "below":
        return f"< {us:.2f} us (every point is at or above 50 %)"
    return f"{us:.2f} us"


def median_points(runs):
    """Per point: the median over rounds of task_us, efficiency and libbellows' counters."""
    out = []
    for same_point in zip(*(run["points"] for run in runs)):
        point = {"task_us": statistics.median(p["task_us"] for p in same_point),
                 "efficiency": statistics.median(p["efficiency"] for p in same_point),
                 "efficiencies": [p["efficiency"] for p in same_point],
                 "tasks": [p["tasks"] for p in same_point],
                 "tasks_executed": [p["tasks_executed"] for p in same_point],
                 "checksums": [p["checksum"] for p in same_point]}
        if "runtime" in same_point[0]:
            point["runtime"] = {key: statistics.median(p["runtime"][key] for p in same_point)
                                for key in same_point[0]["runtime"]}
        out.append(point)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--mpiexec", default=MPIEXEC)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--largest-us", type=float, default=256.0)
    ap.add_argument("--smallest-us", type=float, default=0.5)
    ap.add_argument("--seconds-per-point", type=float, default=0.1)
    ap.add_argument("--width-per-rank", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="timesteps of every point (0: from "
                    "--seconds-per-point)")
    ap.add_argument("--largest-iterations", type=int, default=0,
                    help="busy-loop iterations of the first point (0: from --largest-us)")
    ap.add_argument("--empty-tasks", type=int, default=1000000,
                    help="tasks per rank of the empty-task run on 2 ranks (0: none)")
    ap.add_argument("--extra", default="", help="more options for bellows_metg, space-separated")
    ap.add_argument("--autogroup-nice", type=int, default=None,
                    help="start each rank with this nice value for its scheduler autogroup (hydra "
                    "starts each rank in a session, so an autogroup, of its own; a negative value "
                    "needs root): on a host shared with other work, the ranks then get the cores "
                    "they ask for")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    program = os.path.join(args.build, "bench", "bellows_metg")
    prefix = []
    if args.autogroup_nice is not None:
        prefix = ["/bin/sh", "-c", f'echo {args.autogroup_nice} > /proc/self/autogroup && exec "$@"',
                  "metg-rank"]
    overhead_program = os.path.join(args.build, "bench", "bellows_task_overhead")

    def sweep(system, ranks):
        cmd = [args.mpiexec, "-n", str(ranks)] + prefix + [program, "--system", system, "--quiet",
               "--largest-us", str(args.largest_us), "--smallest-us", str(args.smallest_us),
               "--seconds-per-point", str(args.seconds_per_point),
               "--width-per-rank", str(args.width_per_rank), "--repeat", str(args.repeat)]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        if args.largest_iterations:
            cmd += ["--largest-iterations", str(args.largest_iterations)]
        return run_json(cmd + args.extra.split())

    def empty_tasks():
        j = run_json([args.mpiexec, "-n", "2"] + prefix + [overhead_program, "--tasks-per-rank",
                      str(args.empty_tasks), "--repeat", "3"])
        return j["best_tasks_per_second_per_rank"]

    load_before = os.getloadavg()[0]
    runs = {config: [] for config in CONFIGS}
    empty = []
    for r in range(args.rounds):
        for system, ranks in CONFIGS:
            j = sweep(system, ranks)
            runs[(system, ranks)].append(j)
            print(f"round {r + 1}: {system} {ranks} rank(s): " +
                  " ".join(f"{p['efficiency']:.2f}" for p in j["points"]), file=sys.stderr, flush=True)
        if args.empty_tasks:
            empty.append(empty_tasks())

    load_after = os.getloadavg()[0]
    names = {config: f"{config[0]} {config[1]}r" for config in CONFIGS}
    medians = {config: median_points(runs[config]) for config in CONFIGS}
    first = runs[CONFIGS[0]][0]
    favoured = "" if args.autogroup_nice is None else f", ranks at autogroup nice {args.autogroup_nice}"
    print(f"\nMETG, stencil with 3 dependencies (clipped at the edges), width {args.width_per_rank} "
          f"per rank, 1 core per rank, {args.rounds} interleaved rounds, median efficiency per point; "
          f"load average (1 min) {load_before:.1f} before, {load_after:.1f} after{favoured}\n")
    print(f"{'task us':>9s} " + " ".join(f"{names[c]:>11s}" for c in CONFIGS))
    for i, point in enumerate(medians[CONFIGS[0]]):
        print(f"{point['task_us']:9.3f} " +
              " ".join(f"{medians[c][i]['efficiency']:11.3f}" for c in CONFIGS))
    result = {"app": "metg_sweep", "rounds": args.rounds, "width_per_rank": args.width_per_rank,
              "load_average": [load_before, load_after],
              "dependencies": first["dependencies"], "configurations": []}
    print()
    for config in CONFIGS:
        us, how = metg(medians[config])
        print(f"METG(50 %) {names[config]:11s} {describe_metg(us, how)}")
        result["configurations"].append({"system": config[0], "ranks": config[1],
                                         "metg_us": us, "metg": how, "points": medians[config]})
    print("\nlibbellows per task (medians): busy = worker from taking the task to the end of "
          "its body; idle = workers waiting for a ready task; comm = CPU of the communication "
          "and copy threads")
    print(f"{'':11s} {'task us':>9s} {'busy us':>9s} {'idle us':>9s} {'comm us':>9s} "
          f"{'wall us':>9s} {'msgs':>6s}")
    for config in CONFIGS:
        if config[0] != "bellows":
            continue
        for point in medians[config][-3:]:
            rt = point["runtime"]
            wall = point["task_us"] / point["efficiency"]  # core-microseconds per task
            print(f"{names[config]:11s} {point['task_us']:9.3f} {rt['busy_us_per_task']:9.3f} "
                  f"{rt['idle_us_per_task']:9.3f} {rt['comm_cpu_us_per_task']:9.3f} {wall:9.3f} "
                  f"{rt['messages_per_task']:6.2f}")
    if empty:
        e = statistics.median(empty)
        result["empty_tasks_per_second_per_rank"] = e
        print(f"\nempty tasks per second per rank, 2 ranks (median of {len(empty)}): {e:.0f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
