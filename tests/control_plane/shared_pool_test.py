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
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

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



def main():
    t = LocalJobTest("shared_pool")
    t.log(f"job files in {t.run_dir}")
    policy = t.write("yield.yaml", POLICY)
    status = t.status

    gemm = [t.args.app, "--kernel", "emulated", "--emulated-gflops", "10", "--emulated-compute", "on",
            "--tile", "256", "--steal", "on", "--verify", "--quiet"]
    job_a = t.start("--nodes", "2:4", "--pool", "4", "--policy", policy, "--quiet", "--", *gemm,
                    "--n", "1536", "--iterations", "60")
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
                t.fail(f"job A ended before it grew: {job_a.stderr.read()[-2000:]}")
            time.sleep(0.1)
        else:
            t.fail(f"job A did not grow onto the 4 nodes of the pool within 60 s; last status {s}")
        t.log(f"job {a_id} holds {s['nodes']}")

        job_b = t.start("--nodes", "2:2", "--pool", "4", "--quiet", "--", *gemm, "--n", "1024",
                        "--iterations", "4")
        b_out, b_err = job_b.communicate(timeout=120)
        if job_b.returncode != 0:
            t.fail(f"job B exited {job_b.returncode}: {b_err[-2000:]}")
        b_report = json.loads(b_out.strip().splitlines()[-1])
        if not b_report.get("verified") or b_report["ranks"] != 2:
            t.fail(f"job B: verified {b_report.get('verified')} on {b_report['ranks']} ranks")
        waited = [line for line in b_err.splitlines() if "waits for 2 node(s) of the local pool" in line]
        got = [line for line in b_err.splitlines() if "got local2, local3 after waiting" in line]
        if not waited or not got:
            t.fail(f"job B did not wait for and then get local2, local3: {b_err[-1500:]}")
        b_id = waited[0].split()[2]  # "bellows: job local-N waits for ..."
        t.log(waited[0].strip())
        t.log(got[0].strip())

        a_out, a_err = job_a.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        job_a.kill()
        if job_b is not None:
            job_b.kill()
        t.fail("a job did not end within its time")
    if job_a.returncode != 0:
        t.fail(f"job A exited {job_a.returncode}: {a_err[-2000:]}")
    a_report = json.loads(a_out.strip().splitlines()[-1])
    if not a_report.get("verified"):
        t.fail("job A did not verify")

    events = t.events(a_id)
    done = [(e["kind"], e["requester"], e["count"], e["reason"]) for e in events
            if e["to"] == "committed" and not e["refused"]]
    if len(done) < 2 or done[0][:3] != ("expand", "policy", 2) or done[1][:3] != ("shrink", "policy", 2) \
            or "shrink.pending_jobs_at_least" not in done[1][3]:
        t.fail(f"job A's committed resizes are {done}, expected a policy expand by 2 then a shrink "
             "by 2 for the pending job")
    t.log(f"job {a_id}: {done[1][3]}")
    refused = [e for e in events if e["refused"]]
    if refused:
        t.fail(f"refused events in job A's log: {refused}")

    with open(t.pool_file) as f:
        pool = json.load(f)
    if pool["nodes"] != ["", "", "", ""] or pool["waiting"]:
        t.fail(f"the pool is not idle at the end: {pool}")
    t.check_logs(a_id, a_err)
    t.check_logs(b_id, b_err)
    t.passed(t.job_dir(a_id), t.job_dir(b_id))


if __name__ == "__main__":
    main()
