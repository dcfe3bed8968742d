#!/usr/bin/env python3
"""The CUDA kernels on this host's GPU: gemm, cholesky and skewed bspgemm with every task on
the GPU (--kernel cuda), tile buffers pinned for the GPU's copies (--cuda-pinned on, the
default) against not (off), interleaved in each round; prints per configuration the median
iteration time and GFLOP/s of each, and the median over rounds of the ratio unpinned / pinned
within a round. Needs a CUDA GPU (nvidia-smi lists it).

  python3 bench/cuda_kernels.py --rounds 1
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, run_json, makespan  # noqa: E402

CONFIGS = [  # (app, n, tile, ranks)
    ("gemm", 8192, 512, 1), ("gemm", 8192, 512, 4), ("gemm", 8192, 1024, 4),
    ("cholesky", 8192, 512, 4), ("bspgemm", 8192, 512, 4),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=3)
    args = ap.parse_args()

    def run(app, n, tile, ranks, pinned):
        cmd = [MPIEXEC, "-n", str(ranks), os.path.join(args.build, "examples", app), "--n", str(n),
               "--tile", str(tile), "--kernel", "cuda", "--cuda-pinned", pinned,
               "--iterations", str(args.iterations), "--quiet"]
        if app == "bspgemm":
            cmd += ["--pattern", "skewed", "--density", "0.5"]
        report = run_json(cmd)
        seconds = makespan(report)
        gflops = statistics.median(it["gflops"] for it in report["iterations"][1:] or report["iterations"])
        return seconds, gflops

    results = {}  # (config, pinned) -> [(s, GFLOP/s)] per round
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for config in CONFIGS:
            for pinned in ("on", "off"):
                results.setdefault((config, pinned), []).append(run(*config, pinned))

    print(f"\n--kernel cuda, {args.iterations} iterations (median of 2..), {args.rounds} interleaved rounds\n")
    print(f"{'configuration':<34}{'pinned s':>10}{'GFLOP/s':>9}{'unpinned s':>12}{'GFLOP/s':>9}"
          f"{'unpinned/pinned':>17}")
    for config in CONFIGS:
        on, off = results[(config, "on")], results[(config, "off")]
        ratio = statistics.median(o[0] / p[0] for p, o in zip(on, off))
        app, n, tile, ranks = config
        print(f"{f'{app} n={n} tile {tile}, {ranks} ranks':<34}"
              f"{statistics.median(p[0] for p in on):>10.4f}{statistics.median(p[1] for p in on):>9.0f}"
              f"{statistics.median(o[0] for o in off):>12.4f}{statistics.median(o[1] for o in off):>9.0f}"
              f"{ratio:>17.2f}")


if __name__ == "__main__":
    main()
