#!/usr/bin/env python3
"""Foundation benchmark: libbellows GEMM and Cholesky against ScaLAPACK and OpenBLAS.

Runs every configuration in interleaved rounds (A B C ... A B C ...) on the same
machine, so that the machine's drifting speed hits all of them alike, and prints
per-configuration medians plus the ratios of each round, and their medians.

  python3 bench/foundation.py --build build/default --rounds 3

Every configuration prints a JSON object as its last line; this script reads it.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, run_json  # noqa: E402

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    ex = os.path.join(args.build, "examples")
    ref = os.path.join(args.build, "bench", "reference")
    n, p = str(args.n), str(args.ranks)

    def bellows(app, tile, same_host="on"):
        j = run_json([MPIEXEC, "-n", p, os.path.join(ex, app), "--n", n, "--tile", str(tile),
                      "--iterations", "3", "--same-host", same_host, "--quiet"])
        return max(it["gflops"] for it in j["iterations"][1:])  # first iteration warms up

    def scalapack(op, tile):
        j = run_json([MPIEXEC, "-n", p, os.path.join(ref, "bellows_scalapack_reference"),
                      "--op", op, "--n", n, "--tile", str(tile), "--repeat", "3"])
        return j["best_gflops"]

    def openblas(op):
        j = run_json([os.path.join(ref, "bellows_blas_reference"), "--op", op, "--n", n,
                      "--threads", p, "--repeat", "3"])
        return j["best_gflops"]

    def overhead():
        j = run_json([MPIEXEC, "-n", p, os.path.join(args.build, "bench", "bellows_task_overhead"),
                      "--tasks-per-rank", "1000000", "--repeat", "3"])
        return j["best_tasks_per_second_per_rank"]

    configs = [
        ("bellows gemm tile 256", lambda: bellows("gemm", 256)),
        ("bellows gemm tile 512", lambda: bellows("gemm", 512)),
        ("bellows gemm tile 1024", lambda: bellows("gemm", 1024)),
        ("bellows gemm 512 MPI only", lambda: bellows("gemm", 512, "off")),
        ("scalapack pdgemm nb 256", lambda: scalapack("gemm", 256)),
        ("scalapack pdgemm nb 512", lambda: scalapack("gemm", 512)),
        ("openblas dgemm 2 threads", lambda: openblas("gemm")),
        ("bellows cholesky tile 256", lambda: bellows("cholesky", 256)),
        ("bellows cholesky 256 MPI only", lambda: bellows("cholesky", 256, "off")),
        ("scalapack pdpotrf nb 256", lambda: scalapack("potrf", 256)),
        ("scalapack pdpotrf nb 128", lambda: scalapack("potrf", 128)),
        ("openblas dpotrf 2 threads", lambda: openblas("potrf")),
        ("bellows empty tasks/s/rank", overhead),
    ]
    samples = {name: [] for name, _ in configs}
    for r in range(args.rounds):
        for name, fn in configs:
            samples[name].append(fn())
            print(f"round {r + 1}: {name}: {samples[name][-1]:.1f}", file=sys.stderr, flush=True)

    def ratio(a, b):
        return [x / y for x, y in zip(samples[a], samples[b])]

    def best_of(*names):
        return [max(v) for v in zip(*(samples[x] for x in names))]

    bellows_gemm = best_of("bellows gemm tile 256", "bellows gemm tile 512", "bellows gemm tile 1024")
    scalapack_gemm = best_of("scalapack pdgemm nb 256", "scalapack pdgemm nb 512")
    scalapack_potrf = best_of("scalapack pdpotrf nb 256", "scalapack pdpotrf nb 128")
    ratios = [
        ("cholesky tile 256 / best ScaLAPACK PDPOTRF", 1.2,
         [a / b for a, b in zip(samples["bellows cholesky tile 256"], scalapack_potrf)]),
        ("cholesky tile 256 / OpenBLAS 2-thread DPOTRF", 0.9,
         ratio("bellows cholesky tile 256", "openblas dpotrf 2 threads")),
        ("best GEMM / best ScaLAPACK PDGEMM", 1.8,
         [a / b for a, b in zip(bellows_gemm, scalapack_gemm)]),
        ("gemm tile 256 / ScaLAPACK PDGEMM nb 256", None,
         ratio("bellows gemm tile 256", "scalapack pdgemm nb 256")),
        ("best GEMM / OpenBLAS 2-thread DGEMM", None,
         [a / b for a, b in zip(bellows_gemm, samples["openblas dgemm 2 threads"])]),
        ("cholesky 256: same-host transport / MPI only", None,
         ratio("bellows cholesky tile 256", "bellows cholesky 256 MPI only")),
        ("gemm 512: same-host transport / MPI only", None,
         ratio("bellows gemm tile 512", "bellows gemm 512 MPI only")),
    ]
    print(f"\nN={args.n}, {args.ranks} ranks x 1 thread (OpenBLAS: {args.ranks} threads), "
          f"{args.rounds} interleaved rounds\n")
    print(f"{'configuration':34s} {'median':>10s}   per round (GFLOP/s; tasks/s for empty tasks)")
    for name, _ in configs:
        vals = samples[name]
        print(f"{name:34s} {statistics.median(vals):10.1f}   " + " ".join(f"{v:.1f}" for v in vals))
    print(f"\n{'ratio (same round)':46s} {'median':>7s} {'target':>7s}   per round")
    for name, target, vals in ratios:
        t = f">={target}" if target else ""
        ok = "" if target is None else ("  met" if statistics.median(vals) >= target else "  NOT met")
        print(f"{name:46s} {statistics.median(vals):7.2f} {t:>7s}   " +
              " ".join(f"{v:.2f}" for v in vals) + ok)
    e = statistics.median(samples["bellows empty tasks/s/rank"])
    print(f"{'empty tasks per second per rank':46s} {e:7.0f} {'>=500000':>7s}" +
          ("  met" if e >= 500000 else "  NOT met"))


if __name__ == "__main__":
    main()
