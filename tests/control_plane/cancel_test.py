#!/usr/bin/env python3
"""End-to-end test of a resize called off after the job was told of it, on the local backend
with real processes: a controller, one bellowsd per node, MPICH ranks.

A GEMM on 2 nodes runs iterations of about 3.6 s (the emulated device at 1 GFLOP/s per rank).
Right after an iteration boundary an operator asks for +1 node under a policy whose
resize_timeout is 1 s: the node is granted and its daemon started within that second, the job
is told (reconfiguring), but it carries resizes out only between iterations, so the deadline
passes first. The controller calls the resize off (cancelling, Abort with the resize's id);
at the next boundary the job's first rank finds the request still queued, drops it
(ElasticJob::cancel) and answers `cancelled`; the controller then gives the node back. The
job and the controller agree: 2 nodes, 2 ranks, no refused event, the node idle again.

  cancel_test.py --bellows PATH --app PATH
Prints "cancel: PASS" or "cancel: FAIL: why".
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from log_lines import job_log_problems  # noqa: E402
from procfs import processes_mentioning  # noqa: E402

POLICY = """\
nodes:
  min: 2
  max: 3
resize_timeout: 1s
"""


def fail(why):
    print(f"cancel: FAIL: {why}", flush=True)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bellows", required=True)
    p.add_argument("--app", required=True)
    a = p.parse_args()

    run_dir = tempfile.mkdtemp(prefix="bellows-cancel-test-")
    print(f"cancel: job files in {run_dir}", flush=True)
    env = dict(os.environ, BELLOWS_RUN_DIR=run_dir, OPENBLAS_NUM_THREADS="1",
               BELLOWS_LOCAL_POOL=os.path.join(run_dir, "local-pool.json"))
    policy = os.path.join(run_dir, "cancel.yaml")
    with open(policy, "w") as f:
        f.write(POLICY)

    def bellows(*args):
        return subprocess.run([a.bellows, *args], env=env, capture_output=True, text=True, timeout=30)

    job = subprocess.Popen(
        [a.bellows, "run", "--nodes", "2:3", "--pool", "3", "--policy", policy, "--quiet", "--",
         a.app, "--n", "1536", "--tile", "256", "--iterations", "3", "--kernel", "emulated",
         "--emulated-gflops", "1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Right after the first iteration's end: the next boundary is one iteration away.
        deadline = time.time() + 60
        status = {}
        while time.time() < deadline:
            r = bellows("status", "--json")
            if r.returncode == 0:
                status = json.loads(r.stdout)
                if status["iteration"] >= 1:
                    break
            if job.poll() is not None:
                fail(f"the job ended before its first iteration did: {job.stderr.read()[-2000:]}")
            time.sleep(0.05)
        else:
            fail(f"no iteration reported within 60 s; last status {status}")
        asked = time.time()
        r = bellows("resize", "+1", "--reason", "called off by its deadline")
        if r.returncode != 0:
            fail(f"bellows resize +1: {r.returncode} {r.stdout!r} {r.stderr!r}")
        out, err = job.communicate(timeout=120)
        ended = time.time()
    except subprocess.TimeoutExpired:
        job.kill()
        fail("the job did not end within its time")
    if job.returncode != 0:
        fail(f"bellows run exited {job.returncode}: {err[-3000:]}")
    print(f"cancel: +1 asked {ended - asked:.1f} s before the job ended", flush=True)

    job_dir = os.path.realpath(os.path.join(run_dir, "latest"))
    with open(os.path.join(job_dir, "events.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    path = [(e["event"], e["from"], e["to"]) for e in events if e["resize"] == 1]
    expected = [("request", "none", "requested"), ("rm_granted", "requested", "granted"),
                ("daemons_ready", "granted", "reconfiguring"),
                ("resize_deadline", "reconfiguring", "cancelling"),
                ("job_cancelled", "cancelling", "aborting"), ("release_done", "aborting", "aborted")]
    if path != expected:
        fail(f"resize 1 went {path}, expected {expected}")
    refused = [e for e in events if e["refused"]]
    if refused:
        fail(f"refused events in the log: {refused}")
    print("cancel: " + " -> ".join(f"{to} ({event})" for event, _, to in path), flush=True)

    if "bellows: resize 1 called off by the controller (the controller called the expansion off): dropped" \
            not in err:
        fail(f"the job did not say it dropped resize 1: {err[-2000:]}")
    report = json.loads(out.strip().splitlines()[-1])
    if report["ranks"] != 2 or any(i["ranks"] != 2 for i in report["iterations"]):
        fail(f"the job ran on {[i['ranks'] for i in report['iterations']]} ranks, expected 2 throughout")
    if "ended on 2 node(s)" not in err:
        fail(f"the controller does not end on 2 nodes: {err[-1500:]}")
    # No warning or error in `bellows run`'s stderr or a daemon's log (the withdrawn node's
    # included): the ranks detached at their program's end, so no daemon saw a rank die.
    problems = job_log_problems(job_dir, err)
    if problems:
        fail("unexpected warnings or errors in the job's logs:\n  " + "\n  ".join(problems))

    time.sleep(0.5)
    left = processes_mentioning(job_dir)
    if left:
        fail(f"processes of the job are left: {left}")
    shutil.rmtree(run_dir)  # kept when the test fails: fail() exits before this
    print("cancel: PASS", flush=True)


if __name__ == "__main__":
    main()
