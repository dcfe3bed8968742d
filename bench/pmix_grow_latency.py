#!/usr/bin/env python3
"""Time from a grow's request to the first task on the new rank, asked three ways on the local
backend: by a PMIx tool (`bellows-pmix-control extend 1`: PMIx_Allocation_request EXTEND to the
daemon of the job's first node), by an operator (`bellows resize +1`) and by the job's policy
(POLICY below: a busy-fraction trigger that fires once the job has been busy for a while, with
`nodes.max` 2, so it grows the job once).

Each measurement is a job of its own: `bellows run --nodes 1:2` of a GEMM on the emulated device
(n 1024, tile 256, 8 GFLOP/s: about 0.27 s an iteration on one rank), asked to grow once its
first rank reported its second iteration (the policy's job grows when its trigger fires, after
about as long); the job then runs its remaining iterations on 2 ranks
and prints its JSON report. The report's resize says when the job's first rank was told of the
grow (`requested_unix_seconds`) and how long from then the new rank took to its first task
(`request_to_first_task_seconds`); their sum less the time just before the request's process
was started is the latency measured. The first two start a process (the tool attaches to the
daemon by PMIx, `bellows resize` connects to the controller). The policy's grow starts no process
and is not timed by this script: it is asked when the controller's engine decides, so its
latency runs from the time of the resize's first line in the job's event log (events.jsonl,
milliseconds) to the first task. That same measure, controller's record -> first task, is given
for all three. The three alternate in each round and run `--rounds` times each.

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
from datetime import datetime, timezone

WAYS = ("pmix", "operator", "policy")
LABELS = {"pmix": "PMIx_Allocation_request", "operator": "bellows resize +1", "policy": "policy (busy fraction)"}

# Grows the job once: the engine looks every 100 ms and fires once the nodes' mean busy fraction
# was above 0.5 on 5 ticks in a row (0.5 s at the least, about two iterations of the GEMM below);
# nodes.max 2 and the cooldown keep it from doing more.
POLICY = """\
nodes:
  min: 1
  max: 2
expand:
  busy_fraction_above: 0.5
tick: 100ms
hysteresis_ticks: 5
cooldown: 10m
resize_timeout: 1m
"""


def unix_seconds(event_time):
    """The event log's time (2026-11-28T10:59:30.123Z, UTC) in seconds since the epoch."""
    return datetime.strptime(event_time, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def controller_recorded(run_dir, way, index):
    """When the controller recorded the grow: the time of its resize's first event log line."""
    path = os.path.join(run_dir, "latest", "events.jsonl")
    events = [json.loads(line) for line in open(path) if line.strip()]
    grows = [e for e in events if e.get("kind") == "expand"]
    if not grows:
        sys.exit(f"{way} {index}: no expand in {path}: {events}")
    resize = grows[0]["resize"]
    return min(unix_seconds(e["time"]) for e in grows if e["resize"] == resize), grows[0].get("requester")


def run_one(build, gemm, way, top, index):
    run_dir = os.path.join(top, f"{way}-{index}")
    os.makedirs(run_dir)
    env = dict(os.environ, BELLOWS_RUN_DIR=run_dir, BELLOWS_LOCAL_POOL=os.path.join(run_dir, "pool.json"),
               OPENBLAS_NUM_THREADS="1")
    bellows = os.path.join(build, "cli", "bellows")
    policy = []
    if way == "policy":
        policy_file = os.path.join(run_dir, "grow-once.yaml")
        with open(policy_file, "w") as f:
            f.write(POLICY)
        policy = ["--policy", policy_file]
    job = subprocess.Popen([bellows, "run", "--nodes", "1:2", "--pool", "2", *policy, "--quiet", "--", gemm, "--quiet",
                            "--n", "1024", "--tile", "256", "--iterations", "24", "--kernel", "emulated",
                            "--emulated-gflops", "8"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    deadline = time.time() + 60
    while way != "policy" and time.time() < deadline:
        r = subprocess.run([bellows, "status", "--json"], env=env, capture_output=True, text=True)
        if r.returncode == 0 and json.loads(r.stdout).get("iteration", 0) >= 2:
            break
        time.sleep(0.05)
    if way != "policy" and time.time() >= deadline:
        job.kill()
        sys.exit(f"{way} {index}: the job did not reach its second iteration within 60 s")
    uri = "file:" + os.path.join(run_dir, "latest", "nodes", "local0", "uri")
    issued = time.time()
    r = None
    if way == "pmix":
        r = subprocess.run([os.path.join(build, "tools", "bellows-pmix-control"), "--uri", uri, "--wait", "60",
                            "extend", "1"], capture_output=True, text=True, env=env)
    elif way == "operator":
        r = subprocess.run([bellows, "resize", "+1"], capture_output=True, text=True, env=env)
    if r is not None and r.returncode != 0:
        job.kill()
        sys.exit(f"{way} {index}: the request failed ({r.returncode}): {r.stdout} {r.stderr}")
    out, err = job.communicate(timeout=120)
    reports = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    resizes = [r for report in reports for r in report.get("resizes", []) if "add" in r]
    if job.returncode != 0 or len(resizes) != 1:
        sys.exit(f"{way} {index}: job exit {job.returncode}, resizes {resizes}: {err[-1500:]}")
    resize = resizes[0]
    first_task = resize["requested_unix_seconds"] + max(resize["request_to_first_task_seconds"])
    recorded, requester = controller_recorded(run_dir, way, index)
    expected_requester = {"pmix": "application", "operator": "operator", "policy": "policy"}[way]
    if requester != expected_requester:
        sys.exit(f"{way} {index}: the grow was asked by {requester}, expected {expected_requester}")
    total = None if way == "policy" else first_task - issued
    return total, first_task - recorded, first_task - resize["requested_unix_seconds"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True, help="the build directory (build/default)")
    parser.add_argument("--gemm", help="the GEMM example (default: BUILD/examples/gemm)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    top = tempfile.mkdtemp(prefix="bellows-grow-latency-")
    results = {way: [] for way in WAYS}
    try:
        for index in range(args.rounds):
            for way in WAYS:
                total, recorded, in_job = run_one(args.build, args.gemm or os.path.join(args.build, "examples", "gemm"),
                                                  way, top, index)
                results[way].append((total, recorded, in_job))
                asked = "(no process)" if total is None else f"{total:.3f} s"
                print(f"round {index + 1} {way:8s}: request -> first task on the new rank {asked}, controller's "
                      f"record -> first task {recorded:.3f} s, job told -> first task {in_job:.3f} s", flush=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)

    def median_and_range(values):
        return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"

    print(f"{'asked by':26s} {'request -> first task':26s} {'recorded -> first task':26s} job told -> first task "
          f"(medians, ranges)")
    for way in WAYS:
        totals = [t for t, _, _ in results[way] if t is not None]
        print(f"{LABELS[way]:26s} {median_and_range(totals) if totals else '-':26s} "
              f"{median_and_range([r for _, r, _ in results[way]]):26s} "
              f"{median_and_range([j for _, _, j in results[way]])}")
    policy = statistics.median(r for _, r, _ in results["policy"])
    for way in ("pmix", "operator"):
        ratio = statistics.median(r for _, r, _ in results[way]) / policy
        print(f"recorded -> first task, {LABELS[way]} / policy: {ratio:.2f}")
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
