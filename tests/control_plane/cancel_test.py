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
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

POLICY = """\
nodes:
  min: 2
  max: 3
resize_timeout: 1s
"""



def main():
    t = LocalJobTest("cancel")
    t.log(f"job files in {t.run_dir}")
    policy = t.write("cancel.yaml", POLICY)

    job = t.start("--nodes", "2:3", "--pool", "3", "--policy", policy, "--quiet", "--",
                  t.args.app, "--n", "1536", "--tile", "256", "--iterations", "3", "--kernel", "emulated",
                  "--emulated-gflops", "1")
    try:
        # Right after the first iteration's end: the next boundary is one iteration away.
        deadline = time.time() + 60
        status = {}
        while time.time() < deadline:
            r = t.bellows("status", "--json")
            if r.returncode == 0:
                status = json.loads(r.stdout)
                if status["iteration"] >= 1:
                    break
            if job.poll() is not None:
                t.fail(f"the job ended before its first iteration did: {job.stderr.read()[-2000:]}")
            time.sleep(0.05)
        else:
            t.fail(f"no iteration reported within 60 s; last status {status}")
        asked = time.time()
        r = t.bellows("resize", "+1", "--reason", "called off by its deadline")
        if r.returncode != 0:
            t.fail(f"bellows resize +1: {r.returncode} {r.stdout!r} {r.stderr!r}")
        out, err = job.communicate(timeout=120)
        ended = time.time()
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within its time")
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}: {err[-3000:]}")
    t.log(f"+1 asked {ended - asked:.1f} s before the job ended")
    events = t.events()
    path = [(e["event"], e["from"], e["to"]) for e in events if e["resize"] == 1]
    expected = [("request", "none", "requested"), ("rm_granted", "requested", "granted"),
                ("daemons_ready", "granted", "reconfiguring"),
                ("resize_deadline", "reconfiguring", "cancelling"),
                ("job_cancelled", "cancelling", "aborting"), ("release_done", "aborting", "aborted")]
    if path != expected:
        t.fail(f"resize 1 went {path}, expected {expected}")
    refused = [e for e in events if e["refused"]]
    if refused:
        t.fail(f"refused events in the log: {refused}")
    t.log(" -> ".join(f"{to} ({event})" for event, _, to in path))

    if "bellows: resize 1 called off by the controller (the resize passed its limit of 1 s): dropped" \
            not in err:
        t.fail(f"the job did not say it dropped resize 1: {err[-2000:]}")
    report = json.loads(out.strip().splitlines()[-1])
    if report["ranks"] != 2 or any(i["ranks"] != 2 for i in report["iterations"]):
        t.fail(f"the job ran on {[i['ranks'] for i in report['iterations']]} ranks, expected 2 throughout")
    if "ended on 2 node(s)" not in err:
        t.fail(f"the controller does not end on 2 nodes: {err[-1500:]}")
    t.check_logs("latest", err)  # the withdrawn node's daemon log included
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
