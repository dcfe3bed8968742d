#!/usr/bin/env python3
"""Tile GEMM and Cholesky on one GPU against the vendor libraries: cuBLAS DGEMM and cuSOLVER
DPOTRF of the same matrix (bellows_cuda_dense_reference), resident in GPU memory and with the
copies in and out, beside the examples with every task on the GPU (--kernel cuda, one rank),
whose tiles live in host memory: each iteration copies its inputs in and its results out, and
that time is counted. Runs the reference first, then each tile configuration, --rounds times
interleaved, and prints per configuration the median iteration time (iterations 2..), GFLOP/s
and the ratio to the library's resident and with-copies time. Needs a CUDA GPU.

  python3 bench/cuda_dense.py --n 16384 --rounds 2
  python3 bench/cuda_dense.py --baseline-build OTHER_BUILD   # also the examples of another build
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, run_json, makespan  # noqa: E402

# (app, tile, --cuda-streams); None: the build's default.
CONFIGS = [("gemm", 2048, 4), ("gemm", 2048, 1), ("gemm", 1024, 4),
           ("cholesky", 1024, 4), ("cholesky", 1024, 1), ("cholesky", 2048, 4), ("cholesky", 512, 4)]
OPERATION = {"gemm": "dgemm", "cholesky": "dpotrf"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--baseline-build", help="also run the examples of this build (tile, no --cuda-streams)")
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--cache-mib", type=int, default=16384, help="--cuda-cache-mib of every tile run")
    ap.add_argument("--only", default="", help="comma-separated apps to run (default: all)")
    args = ap.parse_args()
    apps = set(args.only.split(",")) if args.only else set(OPERATION)

    out = subprocess.run([os.path.join(args.build, "bench", "bellows_cuda_dense_reference"), "--n", str(args.n)],
                         check=True, capture_output=True, text=True)
    print(out.stdout, end="", file=sys.stderr)
    reference = {row["operation"]: row for row in json.loads(out.stdout.strip().splitlines()[-1])["reference"]}

    runs = [(label, build, app, tile, streams)
            for label, build in [("new", args.build)] + ([("baseline", args.baseline_build)] if args.baseline_build else [])
            for app, tile, streams in CONFIGS
            if app in apps and (label == "new" or streams == 4)]

    def run(build, app, tile, streams, label):
        cmd = [MPIEXEC, "-n", "1", os.path.join(build, "examples", app), "--n", str(args.n), "--tile", str(tile),
               "--kernel", "cuda", "--iterations", str(args.iterations), "--cuda-cache-mib", str(args.cache_mib),
               "--quiet"]
        if label == "new":
            cmd += ["--cuda-streams", str(streams)]
        report = run_json(cmd)
        gflops = statistics.median(it["gflops"] for it in report["iterations"][1:] or report["iterations"])
        copied = sum(r["link_bytes"] for r in report["rank_stats"]) / len(report["iterations"])
        return makespan(report), gflops, copied

    results = {}
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for label, build, app, tile, streams in runs:
            results.setdefault((label, app, tile, streams), []).append(run(build, app, tile, streams, label))

    print(f"\nn={args.n}, one rank, --kernel cuda, {args.iterations} iterations (median of 2..), "
          f"{args.rounds} rounds; tiles in host memory, copies counted; GB: copies per iteration\n")
    for operation in ("dgemm", "dpotrf"):
        row = reference[operation]
        print(f"{operation} (vendor) resident {row['resident_seconds']:.4f} s {row['resident_gflops']:.0f} GFLOP/s, "
              f"with copies {row['with_copies_seconds']:.4f} s {row['with_copies_gflops']:.0f} GFLOP/s")
    print(f"\n{'configuration':<34}{'s':>9}{'GFLOP/s':>9}{'GB':>7}{'x resident':>12}{'x with copies':>15}")
    for (label, app, tile, streams), rows in results.items():
        seconds = statistics.median(r[0] for r in rows)
        gflops = statistics.median(r[1] for r in rows)
        copied = statistics.median(r[2] for r in rows)
        ref = reference[OPERATION[app]]
        name = f"{label} {app} tile {tile}" + (f", {streams} streams" if label == "new" else "")
        print(f"{name:<34}{seconds:>9.4f}{gflops:>9.0f}{copied / 1e9:>7.1f}"
              f"{ref['resident_seconds'] / seconds:>12.3f}{ref['with_copies_seconds'] / seconds:>15.3f}")
    print(json.dumps({"reference": reference, "runs": [
        {"label": k[0], "app": k[1], "tile": k[2], "streams": k[3], "rounds": v} for k, v in results.items()]}))


if __name__ == "__main__":
    main()
