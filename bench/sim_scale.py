#!/usr/bin/env python3
"""Stealing at scale on the simulator: skewed bspgemm on 64, 256 and 1,024 simulated nodes.

For each node count and device speed, runs bellows-sim with stealing off and on (the cost
rule on) and prints makespan / perfect-balance bound, steal success rate, round-trip
percentiles, simulated events per second and wall time. The matrix grows with the nodes
(weak scaling: about the same tasks per node).

  python3 bench/sim_scale.py [--bin build/default/sim/bellows-sim] [--nodes 64 256 1024]
                             [--gflops 1000 10] [--tile 512] [--tasks-per-node 125]
                             [--steal off on] [--sim-arg=--link-concurrency=1 ...]
  python3 bench/sim_scale.py --million

--million is the simulator's speed target: 1,024 nodes and about 10^6 tasks (skewed bspgemm,
n = 81,408: 159 x 159 tiles of 512, 1,002,921 tasks), stealing on, at 10 and 1000 GFLOP/s,
with a node link moving one tile at a time (--link-concurrency 1) and 4 tile requests out per
rank (--fetch-window 4): docs/sim.md, "Speed of the simulator". `cpu s` is the simulator's
own CPU time (user + system), which a host shared with other work does not inflate as it
does the wall time.
"""
import argparse
import json
import resource
import subprocess
import sys
import time


def size_for(nodes, tile, tasks_per_node, density):
    # Skewed bspgemm has about density^2 * T^3 products for T tiles per side.
    tiles = round((nodes * tasks_per_node / (density * density)) ** (1.0 / 3.0))
    return max(tiles, 2) * tile


def run(binary, args, timeout):
    start = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([binary, *args, "--quiet"], capture_output=True, text=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"bellows-sim {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["_wall"] = time.monotonic() - start
    report["_cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="build/default/sim/bellows-sim")
    p.add_argument("--nodes", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--gflops", type=float, nargs="+", default=[1000.0, 10.0])
    p.add_argument("--tile", type=int, default=512)
    p.add_argument("--density", type=float, default=0.5)
    p.add_argument("--tasks-per-node", type=int, default=125)
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--steal", nargs="+", default=["off", "on"], choices=["off", "on"])
    p.add_argument("--sim-arg", action="append", default=[],
                   help="extra bellows-sim argument (repeatable), e.g. --sim-arg=--link-concurrency=1")
    p.add_argument("--million", action="store_true",
                   help="1,024 nodes, about 10^6 tasks, stealing on, 10 and 1000 GFLOP/s, link concurrency 1, "
                        "fetch window 4")
    p.add_argument("--json", help="append every report (one JSON line each) to FILE")
    a = p.parse_args()
    if a.million:
        a.nodes, a.tasks_per_node, a.gflops, a.steal = [1024], 977, [10.0, 1000.0], ["on"]
        a.sim_arg += ["--link-concurrency=1", "--fetch-window=4"]
    if a.sim_arg:
        print("# bellows-sim " + " ".join(a.sim_arg))

    header = (f"{'nodes':>5} {'GF/s':>5} {'n':>6} {'tasks':>7} {'steal':>5} {'makespan s':>10} "
              f"{'/bound':>6} {'/own':>5} {'req':>6} {'success':>7} {'stolen':>6} "
              f"{'p50 us':>7} {'p90 us':>7} {'p99 us':>8} {'events':>8} {'ev/s':>7} {'wall s':>7} {'cpu s':>7}")
    print(header)
    print("-" * len(header))
    sys.stdout.flush()
    for gflops in a.gflops:
        for nodes in a.nodes:
            n = size_for(nodes, a.tile, a.tasks_per_node, a.density)
            for steal in a.steal:
                args = ["--app", "bspgemm", "--pattern", "skewed", "--density", str(a.density),
                        "--n", str(n), "--tile", str(a.tile), "--ranks", str(nodes),
                        "--gflops", str(gflops), "--steal", steal, *a.sim_arg]
                r = run(a.bin, args, a.timeout)
                if a.json:
                    with open(a.json, "a") as f:
                        f.write(json.dumps(r) + "\n")
                s, st = r["sim"], r["steal"]
                rt = st["round_trip_us"]
                print(f"{nodes:>5} {gflops:>5g} {n:>6} {r['tasks']:>7} {steal:>5} "
                      f"{s['makespan_seconds']:>10.5f} {s['makespan_over_bound']:>6.2f} "
                      f"{s['makespan_over_max_rank_work']:>5.2f} {st['requests_sent']:>6} "
                      f"{s['steal_success_rate']:>7.3f} {st['tasks_stolen']:>6} {rt['p50']:>7.1f} "
                      f"{rt['p90']:>7.1f} {rt['p99']:>8.1f} {s['events']:>8} "
                      f"{s['events_per_second']:>7.0f} {s['wall_seconds']:>7.1f} {r['_cpu']:>7.1f}")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
