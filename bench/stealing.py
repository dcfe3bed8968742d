#!/usr/bin/env python3
"""Work-stealing benchmark: what stealing buys on an imbalanced block-sparse GEMM, what it
costs on balanced dense GEMM and Cholesky, and how long a steal takes.

All runs use the emulated device (GPU-like nodes: each task costs flops / rate seconds of
modeled time while queues, messages and tile transfers stay real), so that 4 and 8 ranks
can share this machine's cores. Stealing on and off run interleaved in each round, and the
ratios are taken within a round, because the machine is shared and noisy.

  python3 bench/stealing.py --build build/default --rounds 2

Prints a table and, per target, the median of the per-round ratios:
  - bspgemm skewed, stealing on: makespan / perfect-balance bound (bound from the example's
    own report: max(total modeled work / (ranks x lanes), longest chain));
  - bspgemm skewed: makespan off / on (the speedup);
  - dense GEMM and Cholesky: makespan on / off (the cost on a balanced run);
  - steal round trip / (MPI ping-pong latency + one tile's transfer time), for requests the
    first victim answered (median over all ranks' requests); a request forwarded
    h times visits h + 1 victims one after the other, and its round trip is listed apart.
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
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ranks", default="4,8", help="rank counts for bspgemm")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--gflops", type=float, default=10.0, help="emulated device speed")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--dense-ranks", type=int, default=4)
    ap.add_argument("--dense-n", type=int, default=4096)
    args = ap.parse_args()
    ex = os.path.join(args.build, "examples")
    bench = os.path.join(args.build, "bench")
    emulated = ["--kernel", "emulated", "--emulated-gflops", str(args.gflops),
                "--iterations", str(args.iterations), "--quiet"]

    def bspgemm(ranks, steal):
        return run_json([MPIEXEC, "-n", str(ranks), os.path.join(ex, "bspgemm"),
                         "--n", str(args.n), "--tile", str(args.tile), "--pattern", "skewed",
                         "--density", "0.5", "--steal", steal] + emulated)

    def dense(app, steal):
        return run_json([MPIEXEC, "-n", str(args.dense_ranks), os.path.join(ex, app),
                         "--n", str(args.dense_n), "--tile", str(args.tile), "--steal", steal]
                        + emulated)

    def pingpong():
        return run_json([MPIEXEC, "-n", "2", os.path.join(bench, "bellows_pingpong"),
                         "--tile", str(args.tile), "--repeat", "200"])

    rank_counts = [int(r) for r in args.ranks.split(",")]
    rows = {}     # configuration -> list of values per round
    ratios = {}   # ratio name -> list per round

    def add(table, key, value):
        table.setdefault(key, []).append(value)

    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        pp = pingpong()
        yardstick_us = pp["latency_us"] + pp["tile_transfer_us"]
        add(rows, "mpi ping-pong latency (us)", pp["latency_us"])
        add(rows, f"mpi transfer of one {args.tile}x{args.tile} tile (us)", pp["tile_transfer_us"])
        for ranks in rank_counts:
            off = bspgemm(ranks, "off")
            on = bspgemm(ranks, "on")
            t_off, t_on = makespan(off), makespan(on)
            bound = on["balanced_bound_seconds"]
            add(rows, f"bspgemm skewed {ranks} ranks, steal off (s)", t_off)
            add(rows, f"bspgemm skewed {ranks} ranks, steal on (s)", t_on)
            add(rows, f"bspgemm skewed {ranks} ranks, perfect-balance bound (s)", bound)
            add(rows, f"bspgemm skewed {ranks} ranks, busiest rank's own work (s)",
                on["max_rank_work_seconds"])
            add(ratios, f"bspgemm {ranks} ranks: steal on / perfect balance", t_on / bound)
            add(ratios, f"bspgemm {ranks} ranks: speedup off / on", t_off / t_on)
            st = on["steal"]  # all ranks: counters summed, round trips pooled
            add(rows, f"bspgemm skewed {ranks} ranks, tasks stolen per run", st["tasks_stolen"])
            add(rows, f"bspgemm skewed {ranks} ranks, steal requests per run",
                st["requests_sent"])
            if st["round_trip_us"]["count"]:
                add(rows, f"steal round trip, all requests, {ranks} ranks, p50 (us)",
                    st["round_trip_us"]["p50"])
            if st["direct_round_trip_us"]["count"]:
                rt = st["direct_round_trip_us"]["p50"]
                add(rows, f"steal round trip, answered by the first victim, {ranks} ranks, "
                          f"p50 (us)", rt)
                add(rows, f"steal round trip, answered by the first victim, {ranks} ranks, "
                          f"p90 (us)", st["direct_round_trip_us"]["p90"])
                add(ratios, f"steal round trip {ranks} ranks / (latency + tile)", rt / yardstick_us)
        for app in ("gemm", "cholesky"):
            off = dense(app, "off")
            on = dense(app, "on")
            t_off, t_on = makespan(off), makespan(on)
            add(rows, f"{app} {args.dense_ranks} ranks, steal off (s)", t_off)
            add(rows, f"{app} {args.dense_ranks} ranks, steal on (s)", t_on)
            add(ratios, f"{app} {args.dense_ranks} ranks: steal on / off", t_on / t_off)

    print(f"\nemulated device {args.gflops:g} GFLOP/s per rank, tile {args.tile}, bspgemm n={args.n} "
          f"density 0.5, dense n={args.dense_n}, {args.iterations} iterations (median of 2..), "
          f"{args.rounds} interleaved rounds\n")
    width = max(len(k) for k in rows) + 2
    print(f"{'measurement':<{width}}{'median':>12}   per round")
    for key, values in rows.items():
        print(f"{key:<{width}}{statistics.median(values):>12.4f}   " +
              " ".join(f"{v:.4f}" for v in values))

    targets = {
        "steal on / perfect balance": ("<=", 1.10),
        "speedup off / on": (">=", 1.16),
        "steal on / off": ("<=", 1.02),
        "/ (latency + tile)": ("<=", 3.0),
    }
    width = max(len(k) for k in ratios) + 2
    print(f"\n{'ratio (same round)':<{width}}{'median':>8}  target   per round")
    for key, values in ratios.items():
        med = statistics.median(values)
        op, goal = next(t for suffix, t in targets.items() if key.endswith(suffix))
        met = med <= goal if op == "<=" else med >= goal
        print(f"{key:<{width}}{med:>8.3f}  {op}{goal:<5}  " + " ".join(f"{v:.3f}" for v in values)
              + ("  met" if met else "  NOT met"))


if __name__ == "__main__":
    main()
