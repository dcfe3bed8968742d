#!/usr/bin/env python3
"""Where the time of a communication-bound iteration goes: GEMM and Cholesky on the emulated
device (1000 GFLOP/s), 4 ranks on one host, against what the task graph needs.

Per configuration it prints, per rank and iteration: the bytes received against the minimum the
task graph needs on its block-cyclic grid (the distinct remote tiles the rank's tasks read), the
tiles received beyond that minimum, the iteration time against the compute bound (the larger of
the busiest rank's work and the critical path) and against a communication bound (the busiest
rank's minimum bytes at single-thread memcpy bandwidth; on a host with fewer cores than ranks,
all ranks' bytes share the cores), and the achieved transfer bandwidth (bytes received / iteration
time) next to memcpy's and process_vm_readv's (bench/copy_bandwidth.cpp).

With --baseline BUILD it runs the same configurations from a second build, round by round
interleaved, and prints per-round ratios of the iteration time.

  python3 bench/tile_moves.py --build build/default [--baseline build/base] [--rounds 3]

Prints a table and, as the last line, a JSON object with every number.
"""
import argparse
import functools
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import makespan, run_json  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GFLOPS = 1000.0
CONFIGS = [("gemm", 2048, 256), ("gemm", 3072, 512), ("cholesky", 4096, 256),
           ("cholesky", 6144, 512)]


def square_grid(ranks):
    """BlockCyclic2D::square_for: the most square P x Q with P <= Q."""
    p = int(ranks ** 0.5)
    while ranks % p:
        p -= 1
    return p, ranks // p


def owner(m, n, grid):
    p, q = grid
    return (m % p) * q + (n % q)


def gemm_graph(nt, t, grid):
    """Per rank: flops, and the distinct remote collection tiles its tasks read; the
    critical path (a chain of nt GEMMs)."""
    ranks = grid[0] * grid[1]
    flops = [0.0] * ranks
    needed = [set() for _ in range(ranks)]
    task = 2.0 * t ** 3
    for i in range(nt):
        for j in range(nt):
            r = owner(i, j, grid)
            for k in range(nt):
                flops[r] += task
                for tile in (("A", i, k), ("B", k, j)):
                    if owner(tile[1], tile[2], grid) != r:
                        needed[r].add(tile)
    return flops, [len(s) for s in needed], nt * task


def cholesky_graph(nt, t, grid):
    """Per rank: flops, and the distinct remote task outputs its tasks read (a tile sent to
    a rank once serves all its consumers there); the critical path."""
    ranks = grid[0] * grid[1]
    flops = [0.0] * ranks
    needed = [set() for _ in range(ranks)]
    cost = {"potrf": t ** 3 / 3.0, "trsm": float(t ** 3), "syrk": t * (t + 1.0) * t,
            "gemm": 2.0 * t ** 3}
    own = {"potrf": lambda k: owner(k[0], k[0], grid), "trsm": lambda k: owner(k[0], k[1], grid),
           "syrk": lambda k: owner(k[0], k[0], grid), "gemm": lambda k: owner(k[0], k[1], grid)}

    def preds(cls, key):
        if cls == "potrf":
            (k,) = key
            return [("syrk", (k, k - 1))] if k > 0 else []
        if cls == "trsm":
            m, k = key
            return ([("gemm", (m, k, k - 1))] if k > 0 else []) + [("potrf", (k,))]
        if cls == "syrk":
            m, k = key
            return ([("syrk", (m, k - 1))] if k > 0 else []) + [("trsm", (m, k))]
        m, n, k = key
        return ([("gemm", (m, n, k - 1))] if k > 0 else []) + [("trsm", (m, k)), ("trsm", (n, k))]

    tasks = [("potrf", (k,)) for k in range(nt)]
    tasks += [("trsm", (m, k)) for k in range(nt) for m in range(k + 1, nt)]
    tasks += [("syrk", (m, k)) for k in range(nt) for m in range(k + 1, nt)]
    tasks += [("gemm", (m, n, k)) for k in range(nt) for m in range(k + 2, nt)
              for n in range(k + 1, m)]
    for cls, key in tasks:
        r = own[cls](key)
        flops[r] += cost[cls]
        for p in preds(cls, key):
            if own[p[0]](p[1]) != r:
                needed[r].add(p)

    @functools.lru_cache(maxsize=None)
    def finish(cls, key):
        return cost[cls] + max((finish(*p) for p in preds(cls, key)), default=0.0)

    sys.setrecursionlimit(100000)
    critical = max(finish(cls, key) for cls, key in tasks)
    return flops, [len(s) for s in needed], critical


def copy_bandwidth(build):
    out = subprocess.run([os.path.join(build, "bench", "bellows_copy_bandwidth"),
                          "--sizes-kib", "512,2048", "--seconds", "0.3"],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["gbytes_per_s"]


def run(build, app, n, t, ranks, iterations):
    cmd = [os.path.join(ROOT, "scripts", "bellows-local"), "-n", str(ranks), "--",
           os.path.join(build, "examples", app), "--n", str(n), "--tile", str(t),
           "--kernel", "emulated", "--emulated-gflops", str(GFLOPS),
           "--iterations", str(iterations), "--steal", "off", "--quiet"]
    return run_json(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "default"))
    ap.add_argument("--baseline", help="a second build to compare with, round by round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--only", help="run only this app (gemm or cholesky)")
    args = ap.parse_args()

    bandwidth = copy_bandwidth(args.build)
    cores = os.cpu_count() or 1
    builds = [("new", args.build)] + ([("base", args.baseline)] if args.baseline else [])
    grid = square_grid(args.ranks)
    results = []
    for app, n, t in CONFIGS:
        if args.only and app != args.only:
            continue
        nt = n // t
        tile_bytes = t * t * 8
        flops, tiles, critical = (gemm_graph if app == "gemm" else cholesky_graph)(nt, t, grid)
        compute_bound = max(max(flops), critical) / (GFLOPS * 1e9)
        bw = bandwidth["%dKiB" % (tile_bytes // 1024)]
        memcpy = bw["memcpy_streaming"] * 1e9
        min_bytes = [c * tile_bytes for c in tiles]
        comm_bound = max(max(min_bytes) / memcpy,
                         sum(min_bytes) / (memcpy * min(cores, args.ranks)))
        seconds = {name: [] for name, _ in builds}
        stats = {name: None for name, _ in builds}
        for _ in range(args.rounds):
            for name, build in builds:
                report = run(build, app, n, t, args.ranks, args.iterations)
                seconds[name].append(makespan(report))
                stats[name] = report["rank_stats"]
        row = {"app": app, "n": n, "tile": t, "grid": "%dx%d" % grid,
               "min_bytes_per_rank": min_bytes, "compute_bound_s": compute_bound,
               "comm_bound_s": comm_bound, "memcpy_gbytes_per_s": bw["memcpy_streaming"],
               "process_vm_readv_gbytes_per_s": bw["process_vm_readv_streaming"]}
        for name, _ in builds:
            ranks = stats[name]
            received = [s["bytes_received"] / args.iterations for s in ranks]
            it = statistics.median(seconds[name])
            row[name] = {
                "seconds": seconds[name], "median_s": it,
                "bytes_received_per_rank": received,
                "extra_tiles_per_rank": [(r - m) / tile_bytes for r, m in zip(received, min_bytes)],
                "achieved_gbytes_per_s": statistics.mean(received) / it / 1e9,
                "measured_transfer_gbytes_per_s": statistics.mean(
                    s["cost"]["transfer_gbytes_per_s"] for s in ranks),
                "comm_cpu_ms_per_iteration": statistics.mean(
                    s["comm_cpu_seconds"] for s in ranks) / args.iterations * 1e3,
            }
        if args.baseline:
            row["ratio_new_over_base"] = [a / b for a, b in zip(seconds["new"], seconds["base"])]
        results.append(row)

        print("%s n=%d tile=%d grid %s: minimum %.1f MiB/rank/iteration, compute bound %.1f ms, "
              "comm bound %.1f ms (memcpy %.1f GB/s, process_vm_readv %.1f GB/s)" % (
                  app, n, t, row["grid"], max(min_bytes) / 2 ** 20, compute_bound * 1e3,
                  comm_bound * 1e3, bw["memcpy_streaming"], bw["process_vm_readv_streaming"]))
        for name, _ in builds:
            r = row[name]
            print("  %-4s iteration %6.1f ms (rounds %s) | received %.1f MiB/rank (max), "
                  "extra tiles %s | achieved %.2f GB/s/rank, per transfer %.2f GB/s | "
                  "comm cpu %.1f ms/rank" % (
                      name, r["median_s"] * 1e3, [round(s * 1e3, 1) for s in r["seconds"]],
                      max(r["bytes_received_per_rank"]) / 2 ** 20,
                      [round(x, 1) for x in r["extra_tiles_per_rank"]], r["achieved_gbytes_per_s"],
                      r["measured_transfer_gbytes_per_s"], r["comm_cpu_ms_per_iteration"]))
        if args.baseline:
            ratios = row["ratio_new_over_base"]
            print("  new/base per round %s, median %.2f" % (
                [round(x, 2) for x in ratios], statistics.median(ratios)))
        sys.stdout.flush()
    print(json.dumps({"cores": cores, "copy_gbytes_per_s": bandwidth, "configs": results}))


if __name__ == "__main__":
    main()
