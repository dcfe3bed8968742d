#!/usr/bin/env python3
"""Joins that scale: an operator's `bellows resize +K` on a GEMM started on 1 node of the local
backend, for K = 1, 2, 4, 8: the time from the request to the first task on the last new rank,
and the phases of the grow as the job's rank 0 saw them.

Each job is `bellows run --nodes 1:K+1` of the gemm example (emulated device at 100 GFLOP/s, stealing on, so
that a new rank runs a task as soon as it has joined); once it has run a few iterations on one
node, `bellows resize +K` asks for K nodes, whose daemons start ranks that join the job (each
told its ordinal by the controller: grow by ordinals; with --compare-build of an older build,
whatever that build does). The example's JSON report gives, per resize, the request-to-first-task
time of every new rank and the grow's phases as rank 0 saw them: the wait until the new
processes were one group (their start included: a grow begins when the job reaches an
iteration's end, often before every new rank has started), their own join tree, and the accept
and merge of the job.

  python3 bench/join.py --build build/default [--adds 1,2,4,8] [--rounds 3]

With --compare-build DIR, each job also runs with the binaries of DIR (another build, e.g. of an
earlier commit), right after the one of --build.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(build, add, iterations):
    top = tempfile.mkdtemp(prefix="bellows-join-bench-")
    env = dict(os.environ, BELLOWS_RUN_DIR=top, BELLOWS_LOCAL_POOL=os.path.join(top, "pool.json"),
               OPENBLAS_NUM_THREADS="1")
    bellows = os.path.join(build, "cli", "bellows")
    gemm = os.path.join(build, "examples", "gemm")
    job = subprocess.Popen([bellows, "run", "--nodes", f"1:{add + 1}", "--quiet", "--", gemm,
                            "--n", "2048", "--tile", "256", "--iterations", str(iterations),
                            "--kernel", "emulated", "--emulated-gflops", "100", "--steal", "on"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            r = subprocess.run([bellows, "status", "--json"], env=env, capture_output=True, text=True)
            if r.returncode == 0:
                status = json.loads(r.stdout)
                if status.get("ranks") == 1 and status.get("iteration", 0) >= 2:
                    break
            if job.poll() is not None:
                raise RuntimeError(f"the job ended before the resize: {job.stderr.read()[-2000:]}")
            time.sleep(0.1)
        r = subprocess.run([bellows, "resize", f"+{add}"], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"bellows resize +{add}: {r.stdout} {r.stderr}")
        out, err = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    if job.returncode != 0:
        raise RuntimeError(f"bellows run exited {job.returncode}: {err[-2000:]}")
    report = json.loads(out.strip().splitlines()[-1])
    shutil.rmtree(top, ignore_errors=True)
    grows = [r for r in report.get("resizes", []) if r.get("add")]
    if len(grows) != 1:
        raise RuntimeError(f"expected one expand in the report, got {report.get('resizes')}")
    return grows[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--compare-build", default="")
    ap.add_argument("--adds", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=30)
    args = ap.parse_args()
    builds = [("this", args.build)] + ([("compare", args.compare_build)] if args.compare_build else [])
    adds = [int(a) for a in args.adds.split(",")]
    results = {}
    for rnd in range(args.rounds):
        for add in adds:
            for name, build in builds:
                g = run_once(build, add, args.iterations)
                firsts = [t for t in g.get("request_to_first_task_seconds", []) if isinstance(t, (int, float))]
                results.setdefault((name, add), []).append(g)
                print(f"round {rnd + 1} {name:8s} +{add}: request to last new rank's first task "
                      f"{max(firsts) if firsts else float('nan'):.3f} s (all: "
                      f"{', '.join(f'{t:.3f}' for t in firsts)}); grow {g.get('grow_seconds', 0):.3f} s "
                      f"= wait {g.get('wait_seconds', 0):.3f} (group {g.get('group_seconds', 0):.3f}) "
                      f"+ merge {sum(g.get('merge_seconds', [])):.3f} over "
                      f"{len(g.get('merge_seconds', []))} accept(s), {len(g.get('accept_seconds', []))} "
                      f"one-to-one accept(s) at rank 0", flush=True)
    print("\nmedian over rounds: request to the last new rank's first task, s")
    header = f"{'K':>3s}" + "".join(f" {name:>10s}" for name, _ in builds)
    print(header)
    for add in adds:
        row = f"{add:>3d}"
        for name, _ in builds:
            lasts = [max(t for t in g["request_to_first_task_seconds"] if isinstance(t, (int, float)))
                     for g in results[(name, add)]]
            row += f" {statistics.median(lasts):>10.3f}"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
