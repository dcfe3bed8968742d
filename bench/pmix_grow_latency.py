#!/usr/bin/env python3
"""Time from a grow's request to the first task on the new rank, asked two ways on the local
backend: by a PMIx tool (`bellows-pmix-control extend 1`: PMIx_Allocation_request EXTEND to the
daemon of the job's first node) and by an operator (`bellows resize +1`).

Each measurement is a job of its own: `bellows run --nodes 1:2` of a GEMM on the emulated device
(n 1024, tile 256, 8 GFLOP/s: about 0.27 s an iteration on one rank), asked to grow once its
first rank reported its second iteration; the job then runs its remaining iterations on 2 ranks
and prints its JSON report. The report's resize says when the job's first rank was told of the
grow (`requested_unix_seconds`) and how long from then the new rank took to its first task
(`request_to_first_task_seconds`); their sum less the time just before the request's process
was started is the latency measured. Both ways start a process (the tool attaches to the daemon
by PMIx, `bellows resize` connects to the controller), alternate, and run `--rounds` times each.

  python3 bench/pmix_grow_latency.py --build build/default [--gemm PATH] [--rounds 3]
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


def run_one(build, gemm, way, top, index):
    run_dir = os.path.join(top, f"{way}-{index}")
    os.makedirs(run_dir)
    env = dict(os.environ, BELLOWS_RUN_DIR=run_dir, BELLOWS_LOCAL_POOL=os.path.join(run_dir, "pool.json"),
               OPENBLAS_NUM_THREADS="1")
    bellows = os.path.join(build, "cli", "bellows")
    job = subprocess.Popen([bellows, "run", "--nodes", "1:2", "--pool", "2", "--quiet", "--", gemm, "--quiet",
                            "--n", "1024", "--tile", "256", "--iterations", "24", "--kernel", "emulated",
                            "--emulated-gflops", "8"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        r = subprocess.run([bellows, "status", "--json"], env=env, capture_output=True, text=True)
        if r.returncode == 0 and json.loads(r.stdout).get("iteration", 0) >= 2:
            break
        time.sleep(0.05)
    else:
        job.kill()
        sys.exit(f"{way} {index}: the job did not reach its second iteration within 60 s")
    uri = "file:" + os.path.join(run_dir, "latest", "nodes", "local0", "uri")
    issued = time.time()
    if way == "pmix":
        r = subprocess.run([os.path.join(build, "tools", "bellows-pmix-control"), "--uri", uri, "--wait", "60",
                            "extend", "1"], capture_output=True, text=True, env=env)
    else:
        r = subprocess.run([bellows, "resize", "+1"], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        job.kill()
        sys.exit(f"{way} {index}: the request failed ({r.returncode}): {r.stdout} {r.stderr}")
    out, err = job.communicate(timeout=120)
    reports = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    resizes = [r for report in reports for r in report.get("resizes", []) if "add" in r]
    if job.returncode != 0 or len(resizes) != 1:
        sys.exit(f"{way} {index}: job exit {job.returncode}, resizes {resizes}: {err[-1500:]}")
    resize = resizes[0]
    first_task = resize["requested_unix_seconds"] + max(resize["request_to_first_task_seconds"])
    return first_task - issued, first_task - resize["requested_unix_seconds"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True, help="the build directory (build/default)")
    parser.add_argument("--gemm", help="the GEMM example (default: BUILD/examples/gemm)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    top = tempfile.mkdtemp(prefix="bellows-grow-latency-")
    results = {"pmix": [], "operator": []}
    try:
        for index in range(args.rounds):
            for way in ("pmix", "operator"):
                total, in_job = run_one(args.build, args.gemm or os.path.join(args.build, "examples", "gemm"), way,
                                        top, index)
                results[way].append((total, in_job))
                print(f"round {index + 1} {way:8s}: request -> first task on the new rank {total:.3f} s "
                      f"(of which job told -> first task {in_job:.3f} s)", flush=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print(f"{'asked by':28s} {'request -> first task, median (range)':40s} job told -> first task, median")
    for way, label in (("pmix", "PMIx_Allocation_request"), ("operator", "bellows resize +1")):
        totals = [t for t, _ in results[way]]
        in_job = [j for _, j in results[way]]
        print(f"{label:28s} {statistics.median(totals):.3f} s ({min(totals):.3f}-{max(totals):.3f}){'':18s}"
              f"{statistics.median(in_job):.3f} s")


if __name__ == "__main__":
    main()
