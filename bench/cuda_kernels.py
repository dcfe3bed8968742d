#!/usr/bin/env python3
"""The CUDA kernels on this host's GPU: gemm, cholesky and skewed bspgemm with every task on
the GPU (--kernel cuda), in two configurations interleaved in each round:
  --compare cache   (default) tiles kept in GPU memory between tasks (--cuda-cache-mib 2048, the
                    default) against every task copying all its tiles (--cuda-cache-mib 0);
  --compare pinned  tile buffers pinned for the GPU's copies (--cuda-pinned on, the default)
                    against not (off);
  --compare steal   stealing off against on (the cost rule decides each steal), tiles cached.
Prints per configuration the median iteration time, GFLOP/s, bytes copied between host and
GPU per iteration (summed over the ranks) and tasks stolen per run of each, and the median over rounds of the ratio
second / first within a round. Needs a CUDA GPU (nvidia-smi lists it).

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
COMPARISONS = {  # name -> ((label, flags), (label, flags))
    "cache": (("cached", ["--cuda-cache-mib", "2048"]), ("uncached", ["--cuda-cache-mib", "0"])),
    "pinned": (("pinned", ["--cuda-pinned", "on"]), ("unpinned", ["--cuda-pinned", "off"])),
    "steal": (("steal off", ["--steal", "off"]), ("steal on", ["--steal", "on"])),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--compare", choices=sorted(COMPARISONS), default="cache")
    args = ap.parse_args()
    first, second = COMPARISONS[args.compare]

    def run(app, n, tile, ranks, flags):
        cmd = [MPIEXEC, "-n", str(ranks), os.path.join(args.build, "examples", app), "--n", str(n),
               "--tile", str(tile), "--kernel", "cuda", "--iterations", str(args.iterations),
               "--quiet"] + flags
        if app == "bspgemm":
            cmd += ["--pattern", "skewed", "--density", "0.5"]
        report = run_json(cmd)
        seconds = makespan(report)
        gflops = statistics.median(it["gflops"] for it in report["iterations"][1:] or report["iterations"])
        copied = sum(r["link_bytes"] for r in report["rank_stats"]) / len(report["iterations"])
        return seconds, gflops, copied, report.get("steal", {}).get("tasks_stolen", 0)

    results = {}  # (config, label) -> [(s, GFLOP/s, bytes)] per round
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        for config in CONFIGS:
            for label, flags in (first, second):
                results.setdefault((config, label), []).append(run(*config, flags))

    a, b = first[0], second[0]
    print(f"\n--kernel cuda, {args.iterations} iterations (median of 2..), {args.rounds} interleaved "
          f"rounds; GB: host <-> GPU copies per iteration\n")
    print(f"{'configuration':<34}{a + ' s':>11}{'GFLOP/s':>9}{'GB':>7}{'stolen':>8}{b + ' s':>13}"
          f"{'GFLOP/s':>9}{'GB':>7}{'stolen':>8}{b + ' / ' + a:>22}")
    for config in CONFIGS:
        x, y = results[(config, a)], results[(config, b)]
        ratio = statistics.median(q[0] / p[0] for p, q in zip(x, y))
        app, n, tile, ranks = config

        def med(rows, k):
            return statistics.median(r[k] for r in rows)
        print(f"{f'{app} n={n} tile {tile}, {ranks} ranks':<34}"
              f"{med(x, 0):>11.4f}{med(x, 1):>9.0f}{med(x, 2) / 1e9:>7.1f}{med(x, 3):>8.0f}"
              f"{med(y, 0):>13.4f}{med(y, 1):>9.0f}{med(y, 2) / 1e9:>7.1f}{med(y, 3):>8.0f}{ratio:>22.3f}")


if __name__ == "__main__":
    main()
