#!/usr/bin/env python3
"""End-to-end test of the bag example under `bellows run` on the local backend: a controller,
one bellowsd per node, MPICH ranks, the tasks distributed by Dtree.

The job starts on 2 nodes; its policy grows it to 3 while its ranks are busy (the bag's
iterations publish the busy fraction of its workers); an operator then gives one node back
(`bellows resize -1`) while the job runs. Checked: both resizes commit, the job ends verified
(every task of the sweep ran exactly once: the digests' sum) on 2 ranks, iterations ran on 3
ranks in between, no warning or error in the logs, no process left.

  bag_run_test.py --bellows PATH --app PATH
Prints "bag_run: PASS" or "bag_run: FAIL: why".
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
  max: 3
expand:
  busy_fraction_above: 0.3
tick: 250ms
hysteresis_ticks: 1
cooldown: 10m
resize_timeout: 1m
"""


def main():
    t = LocalJobTest("bag_run")
    t.log(f"job files in {t.run_dir}")
    policy = t.write("bag.yaml", POLICY)
    # 80 iterations of 1,000 tasks of 200 us on average: 0.1 s each on 2 ranks, 8 s in all.
    job = t.start("--nodes", "2:3", "--pool", "3", "--policy", policy, "--quiet", "--",
                  t.args.app, "--tasks", "80000", "--iterations", "80", "--kernel", "emulated",
                  "--emulated-gflops", "5", "--verify", "--quiet")
    try:
        deadline = time.time() + 90
        status = None
        while time.time() < deadline:
            status = t.status()
            if status and len(status["nodes"]) == 3 and status["active_resize"] is None:
                break
            if job.poll() is not None:
                t.fail(f"the job ended before it grew: {job.stderr.read()[-2000:]}")
            time.sleep(0.1)
        else:
            t.fail(f"the job did not grow to 3 nodes within 90 s; last status {status}")
        r = t.bellows("resize", "-1", "--reason", "operator gives a node back")
        if r.returncode != 0:
            t.fail(f"bellows resize -1: {r.returncode} {r.stdout!r} {r.stderr!r}")
        out, err = job.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within 180 s")
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}: {err[-3000:]}")
    committed = [e["resize"] for e in t.events() if e.get("to") == "committed"]
    if len(committed) != 2:
        t.fail(f"resizes committed: {committed}, expected an expand and a shrink")
    report = json.loads(out.strip().splitlines()[-1])
    if not report["verified"] or report["tasks_run"] != 80000:
        t.fail(f"the sweep was not verified: verified {report['verified']}, {report['tasks_run']} tasks run")
    sizes = [i["ranks_in_job"] for i in report["iterations"]]
    if 3 not in sizes or report["ranks"] != 2:
        t.fail(f"iterations ran on {sizes} ranks, expected 3 in between and 2 at the end")
    t.log(f"ranks per iteration {sizes}")
    t.check_logs("latest", err)
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
