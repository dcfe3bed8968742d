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

`--variant NAME=OPTIONS` adds libbellows on 2 ranks with more bellows_metg options, in the same
rounds (e.g. `--variant "handshake=--eager-tile-bytes 0"`; its empty-task run gets the options
bellows_task_overhead knows, --comm-poll-us), and `--configs` picks which of the four base
configurations run. `--variant-program NAME=PATH` runs variant NAME with another build's
bellows_metg (e.g. one built before a change, copied aside), so that two builds share the rounds:

  python3 bench/metg.py --variant "before=" --variant-program before=/tmp/bellows_metg.before

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
# bellows_metg's options that bellows_task_overhead also takes (each with one value).
EMPTY_TASK_OPTIONS = ("--comm-poll-us", "--workers-read-mail", "--worker-poll-us")


def parse_variant(text):
    """NAME=OPTIONS -> (name, [options]); raises ValueError naming what is wrong."""
    name, sep, options = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"--variant wants NAME=OPTIONS, got {text!r}")
    return name.strip(), options.split()


def empty_task_options(options):
    """The part of bellows_metg's `options` that bellows_task_overhead takes."""
    out = []
    for i, option in enumerate(options):
        if option in EMPTY_TASK_OPTIONS and i + 1 < len(options):
            out += [option, options[i + 1]]
    return out


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
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=OPTIONS: libbellows on 2 ranks with these bellows_metg options as "
                    "one more configuration (repeatable)")
    ap.add_argument("--variant-program", action="append", default=[],
                    help="NAME=PATH: variant NAME runs this bellows_metg instead of the build's "
                    "(repeatable)")
    ap.add_argument("--configs", default="bellows 1r,bellows 2r,mpi 1r,mpi 2r",
                    help="which base configurations run, comma-separated")
    ap.add_argument("--autogroup-nice", type=int, default=None,
                    help="start each rank with this nice value for its scheduler autogroup (hydra "
                    "starts each rank in a session, so an autogroup, of its own; a negative value "
                    "needs root): on a host shared with other work, the ranks then get the cores "
                    "they ask for")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    names = {config: f"{config[0]} {config[1]}r" for config in CONFIGS}
    wanted = [name.strip() for name in args.configs.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in names.values()]
    if unknown:
        ap.error(f"--configs: unknown configuration(s) {unknown}, known: {list(names.values())}")
    configs = [config for config in CONFIGS if names[config] in wanted]
    extra = {config: [] for config in configs}
    for text in args.variant:
        try:
            name, options = parse_variant(text)
        except ValueError as e:
            ap.error(str(e))
        config = ("bellows", 2, name)
        if config in extra:
            ap.error(f"--variant {name!r} given twice")
        configs.append(config)
        names[config] = f"bellows 2r {name}"
        extra[config] = options
    if not configs:
        ap.error("--configs and --variant leave no configuration to run")
    program = os.path.join(args.build, "bench", "bellows_metg")
    program_of = {}
    for text in args.variant_program:
        name, sep, path = text.partition("=")
        name = name.strip()
        if not sep or not name or not path:
            ap.error(f"--variant-program wants NAME=PATH, got {text!r}")
        if ("bellows", 2, name) not in extra:
            ap.error(f"--variant-program {name!r}: no --variant of that name")
        if not os.access(path, os.X_OK):
            ap.error(f"--variant-program {name!r}: {path!r} is not an executable file")
        program_of[name] = path
    prefix = []
    if args.autogroup_nice is not None:
        prefix = ["/bin/sh", "-c", f'echo {args.autogroup_nice} > /proc/self/autogroup && exec "$@"',
                  "metg-rank"]
    overhead_program = os.path.join(args.build, "bench", "bellows_task_overhead")

    def sweep(config):
        system, ranks = config[0], config[1]
        own_program = program_of.get(config[2], program) if len(config) == 3 else program
        cmd = [args.mpiexec, "-n", str(ranks)] + prefix + [own_program, "--system", system, "--quiet",
               "--largest-us", str(args.largest_us), "--smallest-us", str(args.smallest_us),
               "--seconds-per-point", str(args.seconds_per_point),
               "--width-per-rank", str(args.width_per_rank), "--repeat", str(args.repeat)]
        if args.steps:
            cmd += ["--steps", str(args.steps)]
        if args.largest_iterations:
            cmd += ["--largest-iterations", str(args.largest_iterations)]
        return run_json(cmd + args.extra.split() + extra[config])

    def empty_tasks(options):
        j = run_json([args.mpiexec, "-n", "2"] + prefix + [overhead_program, "--tasks-per-rank",
                      str(args.empty_tasks), "--repeat", "3"] + options)
        return j["best_tasks_per_second_per_rank"]

    # One empty-task run per distinct set of options it takes: the base one, then the variants'.
    empty_runs = {"": []}
    for config in configs:
        if len(config) == 3 and empty_task_options(extra[config]):
            empty_runs[config[2]] = []

    load_before = os.getloadavg()[0]
    runs = {config: [] for config in configs}
    for r in range(args.rounds):
        for config in configs:
            j = sweep(config)
            runs[config].append(j)
            print(f"round {r + 1}: {names[config]}: " +
                  " ".join(f"{p['efficiency']:.2f}" for p in j["points"]), file=sys.stderr, flush=True)
        if args.empty_tasks:
            for variant in empty_runs:
                options = empty_task_options(extra[("bellows", 2, variant)]) if variant else []
                empty_runs[variant].append(empty_tasks(options))

    load_after = os.getloadavg()[0]
    medians = {config: median_points(runs[config]) for config in configs}
    first = runs[configs[0]][0]
    favoured = "" if args.autogroup_nice is None else f", ranks at autogroup nice {args.autogroup_nice}"
    print(f"\nMETG, stencil with 3 dependencies (clipped at the edges), width {args.width_per_rank} "
          f"per rank, 1 core per rank, {args.rounds} interleaved rounds, median efficiency per point; "
          f"load average (1 min) {load_before:.1f} before, {load_after:.1f} after{favoured}\n")
    width = max(11, *(len(names[c]) for c in configs))
    print(f"{'task us':>9s} " + " ".join(f"{names[c]:>{width}s}" for c in configs))
    for i, point in enumerate(medians[configs[0]]):
        print(f"{point['task_us']:9.3f} " +
              " ".join(f"{medians[c][i]['efficiency']:{width}.3f}" for c in configs))
    result = {"app": "metg_sweep", "rounds": args.rounds, "width_per_rank": args.width_per_rank,
              "load_average": [load_before, load_after],
              "dependencies": first["dependencies"], "configurations": []}
    print()
    for config in configs:
        us, how = metg(medians[config])
        print(f"METG(50 %) {names[config]:{width}s} {describe_metg(us, how)}")
        entry = {"system": config[0], "ranks": config[1], "metg_us": us, "metg": how,
                 "points": medians[config]}
        if len(config) == 3:
            entry["variant"] = config[2]
            entry["options"] = extra[config]
            if config[2] in program_of:
                entry["program"] = program_of[config[2]]
        result["configurations"].append(entry)
    print("\nlibbellows per task (medians): busy = worker from taking the task to the end of "
          "its body; idle = workers waiting for a ready task; comm = CPU of the communication "
          "and copy threads")
    print(f"{'':{width}s} {'task us':>9s} {'busy us':>9s} {'idle us':>9s} {'comm us':>9s} "
          f"{'wall us':>9s} {'msgs':>6s}")
    for config in configs:
        if config[0] != "bellows":
            continue
        for point in medians[config][-3:]:
            rt = point["runtime"]
            wall = point["task_us"] / point["efficiency"]  # core-microseconds per task
            print(f"{names[config]:{width}s} {point['task_us']:9.3f} {rt['busy_us_per_task']:9.3f} "
                  f"{rt['idle_us_per_task']:9.3f} {rt['comm_cpu_us_per_task']:9.3f} {wall:9.3f} "
                  f"{rt['messages_per_task']:6.2f}")
    if args.empty_tasks:
        print()
        for variant, rates in empty_runs.items():
            e = statistics.median(rates)
            if variant:
                result.setdefault("empty_tasks_per_second_per_rank_of_variant", {})[variant] = e
            else:
                result["empty_tasks_per_second_per_rank"] = e
            label = f" ({variant})" if variant else ""
            print(f"empty tasks per second per rank, 2 ranks{label} (median of {len(rates)}): "
                  f"{e:.0f}  per round: " + " ".join(f"{x:.0f}" for x in rates))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
