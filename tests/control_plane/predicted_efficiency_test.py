#!/usr/bin/env python3
"""End-to-end test of expand.predicted_efficiency_above under `bellows run` on the local backend
(a real controller, bellowsd per node, MPICH ranks). The job's first rank reports its task
graph (work, critical path, lanes); the policy predicts what an expand would bring before it
asks for nodes.

1. A Cholesky of 4 x 4 tiles on 2 nodes: its critical path is most of its work, so adding nodes
   is predicted to bring nothing. Its trigger fires at every tick, yet the job is never grown,
   and `bellows status` says why (the predicted efficiency against the threshold).
2. A GEMM whose work spreads (its critical path is one tile's k chain): the same policy grows it
   from 2 to 4 nodes, and the expand's reason gives the prediction.

  predicted_efficiency_test.py --bellows PATH --app GEMM --cholesky CHOLESKY
Prints "predicted_efficiency: PASS" or "predicted_efficiency: FAIL: why".
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
  busy_fraction_above: 0
  predicted_efficiency_above: 0.3
tick: 250ms
hysteresis_ticks: 1
cooldown: 10m
resize_timeout: 1m
"""
GUARD = "expand.predicted_efficiency_above: "


def finish(t, job, what):
    try:
        out, err = job.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, f"the {what} did not end within its time")
    if job.returncode != 0:
        t.fail(f"bellows run ({what}) exited {job.returncode}: {err[-3000:]}")
    report = json.loads(out.strip().splitlines()[-1])
    if not report.get("verified"):
        t.fail(f"the {what}'s result did not verify: residual {report.get('residual')}")
    return report, err


def main():
    t = LocalJobTest("predicted_efficiency", lambda p: p.add_argument("--cholesky", required=True))
    policy = t.write("guarded.yaml", POLICY)
    common = ["--kernel", "emulated", "--emulated-gflops", "10", "--emulated-compute", "on", "--steal", "on",
              "--verify", "--quiet"]

    # 1. Bound by its critical path: held.
    job = t.start("--nodes", "2:4", "--policy", policy, "--quiet", "--", t.args.cholesky,
                  "--n", "1024", "--tile", "256", "--iterations", "400", *common)
    held = None
    seen = set()
    deadline = time.time() + 60
    while time.time() < deadline and job.poll() is None:
        status = t.status()
        if status:
            seen.add(status.get("policy_holds"))
        if status and status.get("policy_holds") and GUARD in status["policy_holds"]:
            held = status
            if status["iteration"] >= 20:
                break
        time.sleep(0.25)
    if held is None:
        t.fail(f"the policy never held an expand on its prediction; it held for {sorted(map(str, seen))}")
    reason = held["policy_holds"]
    if "expand fired (expand.busy_fraction_above" not in reason or "<= 0.3" not in reason:
        t.fail(f"the hold does not say that the fired expand was predicted not to pay: {reason!r}")
    if len(held["nodes"]) != 2:
        t.fail(f"the Cholesky job has {len(held['nodes'])} nodes, expected 2: {held}")
    t.log(f"held: {reason}")
    report, err = finish(t, job, "Cholesky")
    if report["ranks"] != 2:
        t.fail(f"the Cholesky job ended on {report['ranks']} ranks, expected 2")
    cholesky_dir = t.job_dir()
    t.check_logs("latest", err)
    expands = [e for e in t.events() if e.get("kind") == "expand"]
    if expands:
        t.fail(f"the Cholesky job was grown: {expands}")

    # 2. Work that spreads: grown, with the prediction in the reason.
    job = t.start("--nodes", "2:4", "--policy", policy, "--quiet", "--", t.args.app,
                  "--n", "1536", "--tile", "256", "--iterations", "30", *common)
    report, err = finish(t, job, "GEMM")
    if report["ranks"] != 4:
        t.fail(f"the GEMM job ended on {report['ranks']} ranks, expected 4")
    t.check_logs("latest", err)
    reasons = [e["reason"] for e in t.events() if e.get("kind") == "expand" and e.get("to") == "committed"]
    if len(reasons) != 1 or GUARD not in reasons[0] or " > 0.3 " not in reasons[0]:
        t.fail(f"the GEMM's expand reasons {reasons!r} do not give the prediction")
    t.log(f"grown: {reasons[0]}")
    t.passed(cholesky_dir, t.job_dir())


if __name__ == "__main__":
    main()
