#!/usr/bin/env python3
"""Elastic benchmark: a running job that expands or shrinks, against a static job at the final
size, in the same run (the paper's Tables IV-VI in shape).

Every job is started by scripts/bellows-local on the emulated device (GPU-like ranks: each task
costs flops / rate seconds of modeled time, while queues, messages and tile moves are real) with
work stealing on. An elastic job resizes before iteration --resize-at; its performance after
the resize is the median of the iterations after the first one that follows the resize (that
one is where new ranks steal their first work, and after it their tasks are pinned to them).
A static job runs at the final size from the start (median of its iterations but the first).

  python3 bench/elastic.py --build build/default --base 8 --adds 2,4,8 --shrink-base 16 --removes 2,4,8

Prints, per configuration, the iteration times, performance elastic / static, and for expands
the time from the request to the first task on the new ranks. With --compare-build DIR, each
elastic job also runs with the binaries of DIR (another build, e.g. of an earlier commit) right
after the one of --build, against the same static job. With --compare-env NAME=VALUE, each
elastic job also runs with that environment variable set (e.g. an MPICH cvar), right after the
one without. --rounds repeats everything and prints every round. For expands, the phases of the
grow as rank 0 saw them follow: the slowest spawn, the wait until the new processes were one
group, forming that group, the one accept and merge, and the pause of the job (grow plus
expand_onto: the time between two iterations that the resize cost the running job).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import run_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--apps", default="gemm,cholesky")
    ap.add_argument("--base", type=int, default=8, help="ranks before an expand")
    ap.add_argument("--adds", default="2,4,8")
    ap.add_argument("--shrink-base", type=int, default=16, help="ranks before a shrink (GEMM)")
    ap.add_argument("--removes", default="2,4,8")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--gflops", type=float, default=10.0)
    ap.add_argument("--iterations", type=int, default=7)
    ap.add_argument("--resize-at", type=int, default=3, help="the resize comes before this iteration")
    ap.add_argument("--compare-build", default=None, help="also run each elastic job with this build")
    ap.add_argument("--rebalance", choices=["on", "off"], default=None,
                    help="pass --rebalance to the --build binaries (default: theirs)")
    ap.add_argument("--compare-env", default=None, metavar="NAME=VALUE",
                    help="also run each elastic job with this environment variable set")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    compare_env = None
    if args.compare_env:
        name, eq, value = args.compare_env.partition("=")
        if not name or not eq:
            ap.error(f"--compare-env must look like NAME=VALUE, got {args.compare_env!r}")
        compare_env = {name: value}
    launcher = os.path.join(ROOT, "scripts", "bellows-local")
    common = ["--n", str(args.n), "--tile", str(args.tile), "--kernel", "emulated",
              "--emulated-gflops", str(args.gflops), "--iterations", str(args.iterations),
              "--steal", "on", "--quiet"]

    def job(app, ranks, resize=None, build=None, env=None):
        build = build or args.build
        cmd = [launcher, "-n", str(ranks), "--", os.path.join(build, "examples", app)] + common
        if resize:
            cmd += ["--resize", resize]
        if args.rebalance and build == args.build:
            cmd += ["--rebalance", args.rebalance]
        return run_json(cmd, env, timeout=900)

    def steady(report, first):
        # iterations are 1-based in --resize; skip the first `first` of them
        times = [it["seconds"] for it in report["iterations"][first:]]
        return statistics.median(times)

    builds = [("", args.build, None)]
    if args.compare_build:
        builds.append((" [compare]", args.compare_build, None))
    if compare_env:
        builds.append((" [" + args.compare_env + "]", args.build, compare_env))
    configs = [(app, "+", add) for app in args.apps.split(",")
               for add in [int(a) for a in args.adds.split(",") if a]]
    configs += [("gemm", "-", remove) for remove in [int(r) for r in args.removes.split(",") if r]]
    rows = []
    for rnd in range(args.rounds):
        for app, sign, delta in configs:
            base = args.base if sign == "+" else args.shrink_base
            final = base + delta if sign == "+" else base - delta
            print(f"round {rnd + 1}: {app}: {base} {sign}{delta} ...", file=sys.stderr, flush=True)
            static = job(app, final)
            t_static = steady(static, 1)
            for tag, build, env in builds:
                elastic = job(app, base, f"iter={args.resize_at}:{sign}{delta}", build, env)
                t_elastic = steady(elastic, args.resize_at)  # iterations after the first after the resize
                resize = elastic["resizes"][0]
                latency = None
                if sign == "+":
                    latency = max(x for x in resize["request_to_first_task_seconds"] if x is not None)
                target = 0.90 if sign == "-" or delta > 4 else 0.95
                rows.append((rnd + 1, f"{app} {base} {sign}{delta}{tag}", t_elastic, t_static,
                             t_static / t_elastic, target, latency, resize))

    print(f"\nemulated device {args.gflops:g} GFLOP/s per rank, n={args.n}, tile {args.tile}, "
          f"{args.iterations} iterations, resize before iteration {args.resize_at}, stealing on\n")
    width = max([30] + [len(row[1]) for row in rows])
    print(f"{'round':>5s} {'configuration':{width}s} {'elastic s':>10s} {'static s':>9s} {'elastic/static perf':>20s} "
          f"{'target':>7s}          {'request->first task s':>22s} {'grow s':>7s} {'tasks moved':>11s}"
          f"   phases s: {'spawn':>5s} {'wait':>5s} {'group':>5s} {'merge':>5s} {'pause':>5s}")
    for rnd, name, te, ts, ratio, target, latency, resize in rows:
        lat = (f"{latency:.3f}" + (" (<=0.5 met)" if latency <= 0.5 else " (<=0.5 NOT met)")) \
            if latency is not None else ""
        grow = f"{resize['grow_seconds']:.3f}" if "grow_seconds" in resize else ""
        moved = str(resize.get("tasks_migrated", ""))
        phases = ""
        if "grow_seconds" in resize:
            spawn = max(resize["spawn_seconds"], default=0.0)
            merge = sum(resize["merge_seconds"])
            pause = resize["grow_seconds"] + resize["expand_onto_seconds"]
            phases = (f"             {spawn:5.3f} {resize['wait_seconds']:5.3f} "
                      f"{resize['group_seconds']:5.3f} {merge:5.3f} {pause:5.3f}")
        print(f"{rnd:5d} {name:{width}s} {te:10.4f} {ts:9.4f} {ratio:20.3f} {'>=' + str(target):>7s}"
              f"{'  met' if ratio >= target else '  NOT met':9s} {lat:>22s} {grow:>7s} {moved:>11s}"
              f"{phases}")


if __name__ == "__main__":
    main()
