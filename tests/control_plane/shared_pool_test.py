#!/usr/bin/env python3
"""End-to-end test of the local backend's one pool per host: two `bellows run` jobs share the
emulated nodes local0..local3 as two batch jobs share a cluster's nodes.

Job A (nodes 2:4) grows onto every node of the pool under its policy. Job B (nodes 2:2) is
started then: no node is idle, so it waits in the pool's queue, where A's policy sees it as
a pending job (shrink.pending_jobs_at_least: 1) and gives 2 nodes back. B starts on exactly
those nodes. Both GEMMs verify, A's event log shows the policy's expand and its shrink for the
pending job, and at the end every node of the pool is idle and no process is left.

  shared_pool_test.py --bellows PATH --app PATH
Prints "shared_pool: PASS" or "shared_pool: FAIL: why".
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
from procfs import processes_mentioning  # noqa: E402

POLICY = """\
nodes:
  min: 2
  max: 4
  step: 2
expand:
  combine: all
  idle_nodes_at_least: 2
  ready_tasks_per_node_above: 1
shrink:
  pending_jobs_at_least: 1
tick: 250ms
hysteresis_ticks: 1
cooldown: 1s
resize_timeout: 1m
"""


def fail(why):
    print(f"shared_pool: FAIL: {why}", flush=True)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bellows", required=True)
    p.add_argument("--app", required=True)
    a = p.parse_args()

    run_dir = tempfile.mkdtemp(prefix="bellows-shared-pool-test-")
    pool_file = os.path.join(run_dir, "local-pool.json")
    print(f"shared_pool: job files in {run_dir}", flush=True)
    env = dict(os.environ, BELLOWS_RUN_DIR=run_dir, BELLOWS_LOCAL_POOL=pool_file,
               OPENBLAS_NUM_THREADS="1")
    policy = os.path.join(run_dir, "yield.yaml")
    with open(policy, "w") as f:
        f.write(POLICY)

    def bellows(*args):
        return subprocess.run([a.bellows, *args], env=env, capture_output=True, text=True, timeout=30)

    def status(job):
        r = bellows("status", job, "--json")
        return json.loads(r.stdout) if r.returncode == 0 else None

    gemm = [a.app, "--kernel", "emulated", "--emulated-gflops", "10", "--emulated-compute", "on",
            "--tile", "256", "--steal", "on", "--verify", "--quiet"]
    job_a = subprocess.Popen([a.bellows, "run", "--nodes", "2:4", "--pool", "4", "--policy", policy,
                              "--quiet", "--", *gemm, "--n", "1536", "--iterations", "60"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_b = None
    try:
        deadline = time.time() + 60
        a_id, s = None, None
        while time.time() < deadline:
            s = status("latest") if a_id is None else status(a_id)
            if s is not None:
                a_id = s["job"]
                if len(s["nodes"]) == 4 and s["active_resize"] is None:
                    break
            if job_a.poll() is not None:
                fail(f"job A ended before it grew: {job_a.stderr.read()[-2000:]}")
            time.sleep(0.1)
        else:
            fail(f"job A did not grow onto the 4 nodes of the pool within 60 s; last status {s}")
        print(f"shared_pool: job {a_id} holds {s['nodes']}", flush=True)

        job_b = subprocess.Popen([a.bellows, "run", "--nodes", "2:2", "--pool", "4", "--quiet", "--",
                                  *gemm, "--n", "1024", "--iterations", "4"],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        b_out, b_err = job_b.communicate(timeout=120)
        if job_b.returncode != 0:
            fail(f"job B exited {job_b.returncode}: {b_err[-2000:]}")
        b_report = json.loads(b_out.strip().splitlines()[-1])
        if not b_report.get("verified") or b_report["ranks"] != 2:
            fail(f"job B: verified {b_report.get('verified')} on {b_report['ranks']} ranks")
        waited = [line for line in b_err.splitlines() if "waits for 2 node(s) of the local pool" in line]
        got = [line for line in b_err.splitlines() if "got local2, local3 after waiting" in line]
        if not waited or not got:
            fail(f"job B did not wait for and then get local2, local3: {b_err[-1500:]}")
        print(f"shared_pool: {waited[0].strip()}", flush=True)
        print(f"shared_pool: {got[0].strip()}", flush=True)

        a_out, a_err = job_a.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        job_a.kill()
        if job_b is not None:
            job_b.kill()
        fail("a job did not end within its time")
    if job_a.returncode != 0:
        fail(f"job A exited {job_a.returncode}: {a_err[-2000:]}")
    a_report = json.loads(a_out.strip().splitlines()[-1])
    if not a_report.get("verified"):
        fail("job A did not verify")

    with open(os.path.join(run_dir, a_id, "events.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    done = [(e["kind"], e["requester"], e["count"], e["reason"]) for e in events
            if e["to"] == "committed" and not e["refused"]]
    if len(done) < 2 or done[0][:3] != ("expand", "policy", 2) or done[1][:3] != ("shrink", "policy", 2) \
            or "shrink.pending_jobs_at_least" not in done[1][3]:
        fail(f"job A's committed resizes are {done}, expected a policy expand by 2 then a shrink "
             "by 2 for the pending job")
    print(f"shared_pool: job {a_id}: {done[1][3]}", flush=True)
    refused = [e for e in events if e["refused"]]
    if refused:
        fail(f"refused events in job A's log: {refused}")

    with open(pool_file) as f:
        pool = json.load(f)
    if pool["nodes"] != ["", "", "", ""] or pool["waiting"]:
        fail(f"the pool is not idle at the end: {pool}")
    time.sleep(0.5)
    left = processes_mentioning(run_dir)
    if left:
        fail(f"processes of the jobs are left: {left}")
    shutil.rmtree(run_dir)  # kept when the test fails: fail() exits before this
    print("shared_pool: PASS", flush=True)


if __name__ == "__main__":
    main()
