#!/usr/bin/env python3
"""Foundation benchmark: libbellows GEMM and Cholesky against ScaLAPACK and OpenBLAS.

Runs every configuration in interleaved rounds (A B C ... A B C ...) on the same
machine, so that the machine's drifting speed hits all of them alike, and prints
per-configuration medians plus the ratios of each round, and their medians.

  python3 bench/foundation.py --build build/default --rounds 3

`--variant-examples NAME=DIR` runs the Cholesky (and, unless --only cholesky, GEMM) of another
build as well, in the same rounds: DIR holds that build's `cholesky` and `gemm` (copied aside
before a change), and the table gets its rows and the same-round ratios of this build to it:

  cp build/default/examples/{cholesky,gemm} /tmp/before/   # before the change, then rebuild
  python3 bench/foundation.py --variant-examples before=/tmp/before --only cholesky --rounds 5

`--autogroup-nice V` starts every rank (and the OpenBLAS process) with nice value V for its
scheduler autogroup, as bench/metg.py does: on a host shared with other work, the measured
processes then get the cores they ask for. Beside each libbellows row the script prints where
its ranks' time went (per rank: idle share of the wall time, CPU of the communication threads).

The "one rank" rows run the same job as one rank with as many workers as the other rows have
ranks: how Bellows runs a node's share of a job (one rank per node, a worker per core), against
the same references; their ratios carry no target (the targets are for ranks x 1 core).
The "OpenBLAS tiles" rows run the same build with BELLOWS_TILE_GEMM=openblas: every tile product
and triangular solve calls OpenBLAS instead of the micro-kernel over operands packed once per
tile. The "tile auto" row lets the cost model choose the tile and the grid (`--tile auto`: from
the kernels' speeds measured at start-up, docs/benchmarks.md), beside the hand-picked tile 256.

Every configuration prints a JSON object as its last line; this script reads it.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (MPIEXEC, add_example_arguments, autogroup_prefix,  # noqa: E402
                          check_example_arguments, run_json)

def parse_variant(text):
    """NAME=DIR -> (name, dir); raises ValueError naming what is wrong."""
    name, sep, directory = text.partition("=")
    if not sep or not name.strip() or not directory:
        raise ValueError(f"--variant-examples wants NAME=DIR, got {text!r}")
    return name.strip(), directory


def where_time_went(report):
    """Per rank of a libbellows report: idle seconds over wall seconds (all iterations), and the
    CPU seconds of its communication and copy threads over wall seconds."""
    wall = sum(it["seconds"] for it in report["iterations"])
    return [(r["idle_seconds"] / wall, r["comm_cpu_seconds"] / wall) for r in report["rank_stats"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_example_arguments(ap)
    ap.add_argument("--only", choices=["all", "cholesky", "gemm"], default="all",
                    help="run only the Cholesky or only the GEMM configurations (and their "
                    "references)")
    ap.add_argument("--variant-examples", action="append", default=[],
                    help="NAME=DIR: DIR holds another build's cholesky and gemm, run in the same "
                    "rounds (repeatable)")
    args = ap.parse_args()
    check_example_arguments(ap, args)
    variants = []
    for text in args.variant_examples:
        try:
            name, directory = parse_variant(text)
        except ValueError as e:
            ap.error(str(e))
        for app in (["cholesky"] if args.only == "cholesky" else ["gemm"] if args.only == "gemm"
                    else ["cholesky", "gemm"]):
            if not os.access(os.path.join(directory, app), os.X_OK):
                ap.error(f"--variant-examples {name!r}: no executable {app} in {directory!r}")
        variants.append((name, directory))
    ex = os.path.join(args.build, "examples")
    ref = os.path.join(args.build, "bench", "reference")
    n, p = str(args.n), str(args.ranks)
    prefix = autogroup_prefix(args, "foundation-rank")
    shares = {}

    def bellows(app, tile, same_host="on", examples=ex, label=None, steal="off", one_rank=False,
                tile_gemm="packed"):
        # one_rank: a single rank with as many workers as the other runs have ranks (how a
        # node runs its share of a job: one rank per node), against the same references.
        ranks, workers = ("1", p) if one_rank else (p, "1")
        j = run_json([MPIEXEC, "-n", ranks] + prefix + [os.path.join(examples, app), "--n", n,
                      "--tile", str(tile), "--iterations", "3", "--same-host", same_host,
                      "--steal", steal, "--workers", workers, "--quiet"],
                     env_extra={"BELLOWS_TILE_GEMM": tile_gemm})
        if label:
            shares.setdefault(label, []).append(where_time_went(j))
        return max(it["gflops"] for it in j["iterations"][1:])  # first iteration warms up

    def scalapack(op, tile):
        j = run_json([MPIEXEC, "-n", p] + prefix + [os.path.join(ref, "bellows_scalapack_reference"),
                      "--op", op, "--n", n, "--tile", str(tile), "--repeat", "3"])
        return j["best_gflops"]

    def openblas(op):
        j = run_json(prefix + [os.path.join(ref, "bellows_blas_reference"), "--op", op, "--n", n,
                      "--threads", p, "--repeat", "3"])
        return j["best_gflops"]

    def overhead():
        j = run_json([MPIEXEC, "-n", p] + prefix + [os.path.join(args.build, "bench",
                      "bellows_task_overhead"), "--tasks-per-rank", "1000000", "--repeat", "3"])
        return j["best_tasks_per_second_per_rank"]

    gemm_configs = [
        ("bellows gemm tile 256", lambda: bellows("gemm", 256)),
        ("bellows gemm tile 512", lambda: bellows("gemm", 512)),
        ("bellows gemm tile 1024", lambda: bellows("gemm", 1024, label="bellows gemm tile 1024")),
        ("bellows gemm 512 MPI only", lambda: bellows("gemm", 512, "off")),
        ("bellows gemm 1024, one rank", lambda: bellows("gemm", 1024, one_rank=True)),
        ("bellows gemm 1024, OpenBLAS tiles", lambda: bellows("gemm", 1024, tile_gemm="openblas")),
        ("scalapack pdgemm nb 256", lambda: scalapack("gemm", 256)),
        ("scalapack pdgemm nb 512", lambda: scalapack("gemm", 512)),
        ("openblas dgemm 2 threads", lambda: openblas("gemm")),
    ]
    # Cholesky with work stealing between the ranks (--steal on): a rank whose core other work
    # takes for a while no longer holds up the other one (docs/benchmarks.md).
    cholesky_configs = [
        ("bellows cholesky tile 256",
         lambda: bellows("cholesky", 256, label="bellows cholesky tile 256", steal="on")),
        ("bellows cholesky tile auto",
         lambda: bellows("cholesky", "auto", label="bellows cholesky tile auto", steal="on")),
        ("bellows cholesky 256 steal off",
         lambda: bellows("cholesky", 256, label="bellows cholesky 256 steal off")),
        ("bellows cholesky 256 MPI only", lambda: bellows("cholesky", 256, "off", steal="on")),
        ("bellows cholesky 256, one rank", lambda: bellows("cholesky", 256, one_rank=True)),
        ("bellows cholesky 256, OpenBLAS tiles",
         lambda: bellows("cholesky", 256, steal="on", tile_gemm="openblas")),
        ("scalapack pdpotrf nb 256", lambda: scalapack("potrf", 256)),
        ("scalapack pdpotrf nb 128", lambda: scalapack("potrf", 128)),
        ("openblas dpotrf 2 threads", lambda: openblas("potrf")),
    ]
    for name, directory in variants:
        cholesky_configs.insert(1, (f"bellows cholesky tile 256 {name}",
                                    lambda d=directory, l=f"bellows cholesky tile 256 {name}":
                                    bellows("cholesky", 256, examples=d, label=l,
                                            steal="on")))
        gemm_configs.insert(3, (f"bellows gemm tile 1024 {name}",
                                lambda d=directory, l=f"bellows gemm tile 1024 {name}":
                                bellows("gemm", 1024, examples=d, label=l)))
    configs = ((gemm_configs if args.only != "cholesky" else []) +
               (cholesky_configs if args.only != "gemm" else []) +
               ([("bellows empty tasks/s/rank", overhead)] if args.only == "all" else []))
    samples = {name: [] for name, _ in configs}
    load_before = os.getloadavg()[0]
    for r in range(args.rounds):
        for name, fn in configs:
            samples[name].append(fn())
            print(f"round {r + 1}: {name}: {samples[name][-1]:.1f}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()[0]

    def ratio(a, b):
        return [x / y for x, y in zip(samples[a], samples[b])]

    def best_of(*names):
        return [max(v) for v in zip(*(samples[x] for x in names))]

    ratios = []
    if args.only != "gemm":
        scalapack_potrf = best_of("scalapack pdpotrf nb 256", "scalapack pdpotrf nb 128")
        ratios += [
            ("cholesky tile 256 / best ScaLAPACK PDPOTRF", 1.2,
             [a / b for a, b in zip(samples["bellows cholesky tile 256"], scalapack_potrf)]),
            ("cholesky tile 256 / OpenBLAS 2-thread DPOTRF", 1.0,
             ratio("bellows cholesky tile 256", "openblas dpotrf 2 threads")),
            ("cholesky tile auto / best ScaLAPACK PDPOTRF", 1.2,
             [a / b for a, b in zip(samples["bellows cholesky tile auto"], scalapack_potrf)]),
            ("cholesky tile auto / OpenBLAS 2-thread DPOTRF", 1.0,
             ratio("bellows cholesky tile auto", "openblas dpotrf 2 threads")),
            ("cholesky 256: same-host transport / MPI only", None,
             ratio("bellows cholesky tile 256", "bellows cholesky 256 MPI only")),
            ("cholesky 256: steal on / steal off", None,
             ratio("bellows cholesky tile 256", "bellows cholesky 256 steal off")),
            ("cholesky 256, one rank / OpenBLAS DPOTRF", None,
             ratio("bellows cholesky 256, one rank", "openblas dpotrf 2 threads")),
            ("cholesky 256, one rank / best ScaLAPACK", None,
             [a / b for a, b in zip(samples["bellows cholesky 256, one rank"], scalapack_potrf)]),
            ("cholesky 256: ranks x 1 worker / one rank", None,
             ratio("bellows cholesky tile 256", "bellows cholesky 256, one rank")),
            ("cholesky 256: packed tiles / OpenBLAS tiles", None,
             ratio("bellows cholesky tile 256", "bellows cholesky 256, OpenBLAS tiles")),
        ]
        for name, _ in variants:
            ratios.append((f"cholesky tile 256: this build / {name}", None,
                           ratio("bellows cholesky tile 256", f"bellows cholesky tile 256 {name}")))
    if args.only != "cholesky":
        bellows_gemm = best_of("bellows gemm tile 256", "bellows gemm tile 512",
                               "bellows gemm tile 1024")
        scalapack_gemm = best_of("scalapack pdgemm nb 256", "scalapack pdgemm nb 512")
        ratios += [
            ("best GEMM / best ScaLAPACK PDGEMM", 1.8,
             [a / b for a, b in zip(bellows_gemm, scalapack_gemm)]),
            ("gemm tile 256 / ScaLAPACK PDGEMM nb 256", None,
             ratio("bellows gemm tile 256", "scalapack pdgemm nb 256")),
            ("best GEMM / OpenBLAS 2-thread DGEMM", 0.95,
             [a / b for a, b in zip(bellows_gemm, samples["openblas dgemm 2 threads"])]),
            ("gemm 512: same-host transport / MPI only", None,
             ratio("bellows gemm tile 512", "bellows gemm 512 MPI only")),
            ("gemm 1024, one rank / OpenBLAS DGEMM", None,
             ratio("bellows gemm 1024, one rank", "openblas dgemm 2 threads")),
            ("gemm 1024: packed tiles / OpenBLAS tiles", None,
             ratio("bellows gemm tile 1024", "bellows gemm 1024, OpenBLAS tiles")),
        ]
        for name, _ in variants:
            ratios.append((f"gemm tile 1024: this build / {name}", None,
                           ratio("bellows gemm tile 1024", f"bellows gemm tile 1024 {name}")))
    favoured = ("" if args.autogroup_nice is None
                else f", measured processes at autogroup nice {args.autogroup_nice}")
    print(f"\nN={args.n}, {args.ranks} ranks x 1 thread (\"one rank\": 1 rank x {args.ranks} "
          f"workers; OpenBLAS: {args.ranks} threads), "
          f"{args.rounds} interleaved rounds; load average (1 min) {load_before:.1f} before, "
          f"{load_after:.1f} after{favoured}\n")
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
    if "bellows empty tasks/s/rank" in samples:
        e = statistics.median(samples["bellows empty tasks/s/rank"])
        print(f"{'empty tasks per second per rank':46s} {e:7.0f} {'>=1000000':>7s}" +
              ("  met" if e >= 1000000 else "  NOT met"))
    print("\nwhere the ranks' time went (median over rounds; per rank: idle = workers waiting for "
          "a ready task, comm = CPU of the communication and copy threads, both over wall time)")
    for label, runs in shares.items():
        per_rank = list(zip(*runs))
        print(f"{label:46s} " + "  ".join(
            f"rank {r}: idle {statistics.median(x[0] for x in v):5.1%} "
            f"comm {statistics.median(x[1] for x in v):5.1%}" for r, v in enumerate(per_rank)))


if __name__ == "__main__":
    main()
