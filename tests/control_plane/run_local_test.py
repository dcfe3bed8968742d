#!/usr/bin/env python3
"""End-to-end test of `bellows run` on the local backend: a real controller, one real bellowsd
per emulated node and real MPICH ranks. The policy grows the job from 2 to 4 nodes, an operator
shrinks it back with `bellows resize -2` (the nodes go back while the job runs), an
out-of-range request is refused with the reason, the application itself asks for one more node
near its end (bellows::runtime::request_resize) and gets it, the GEMM result verifies, the event
log holds the expected resizes, `bellows plot` draws them, and no process is left. The
controller's socket lives in the socket directory (BELLOWS_SOCKET_DIR, a private temporary
directory here), is named in the job directory's controller.endpoint, and is gone at the end.

  run_local_test.py --bellows PATH --app PATH [--run-dir-length N]

With --run-dir-length the job directory's path is made N characters long or more (a deep
project tree), far beyond the 107 characters a Unix socket's path may hold.
Prints "run_local: PASS" or "run_local: FAIL: why".
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
  max: 4
  step: 2
expand:
  ready_tasks_per_node_above: 1
tick: 250ms
hysteresis_ticks: 1
cooldown: 10m
resize_timeout: 1m
"""


def fail(why):
    print(f"run_local: FAIL: {why}", flush=True)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bellows", required=True)
    p.add_argument("--app", required=True)
    p.add_argument("--run-dir-length", type=int, default=0)
    a = p.parse_args()

    top = tempfile.mkdtemp(prefix="bellows-run-test-")
    run_dir = top
    while len(run_dir) < a.run_dir_length:
        run_dir = os.path.join(run_dir, "a-deep-project-directory")
    os.makedirs(run_dir, exist_ok=True)
    socket_root = os.path.join(top, "sockets")
    print(f"run_local: job files in {run_dir} ({len(run_dir)} characters), sockets in {socket_root}",
          flush=True)
    env = dict(os.environ, BELLOWS_RUN_DIR=run_dir, BELLOWS_SOCKET_DIR=socket_root,
               BELLOWS_LOCAL_POOL=os.path.join(top, "local-pool.json"), OPENBLAS_NUM_THREADS="1")
    policy = os.path.join(run_dir, "grow.yaml")
    with open(policy, "w") as f:
        f.write(POLICY)

    def bellows(*args):
        return subprocess.run([a.bellows, *args], env=env, capture_output=True, text=True, timeout=30)

    job = subprocess.Popen(
        [a.bellows, "run", "--nodes", "2:4", "--policy", policy, "--quiet", "--",
         a.app, "--n", "1536", "--tile", "256", "--iterations", "40", "--steal", "on", "--verify",
         "--ask-controller", "iter=36:+1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The policy sees ready tasks piling up on 2 nodes and grows the job to 4.
        deadline = time.time() + 90
        status = {}
        while time.time() < deadline:
            r = bellows("status", "--json")
            if r.returncode == 0:
                status = json.loads(r.stdout)
                if len(status["nodes"]) == 4 and status["active_resize"] is None:
                    break
            if job.poll() is not None:
                fail(f"the job ended before it grew: {job.stderr.read()[-2000:]}")
            time.sleep(0.2)
        else:
            fail(f"the job did not grow to 4 nodes within 90 s; last status {status}")
        if status["ranks"] != 4:
            fail(f"status says {status['ranks']} ranks after the expand, expected 4")
        # From a shell that knows only the job id (no BELLOWS_RUN_DIR): the running job's
        # socket directory names its job directory.
        elsewhere = dict(env)
        del elsewhere["BELLOWS_RUN_DIR"]
        r = subprocess.run([a.bellows, "status", status["job"], "--json"], env=elsewhere,
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0 or json.loads(r.stdout)["job"] != status["job"]:
            fail(f"bellows status {status['job']} without BELLOWS_RUN_DIR: {r.returncode} {r.stderr!r}")
        with open(os.path.join(run_dir, "latest", "controller.endpoint")) as f:
            endpoint = f.read().strip()
        expected_prefix = f"ipc://{socket_root}/{status['job']}-"
        if not endpoint.startswith(expected_prefix) or not endpoint.endswith("/controller.sock"):
            fail(f"controller.endpoint says {endpoint!r}, expected {expected_prefix}HASH/controller.sock")

        r = bellows("resize", "+1")
        if r.returncode != 1 or "may hold 2 to 4 nodes: +1 from 4 would make 5" not in r.stdout:
            fail(f"an out-of-range resize was not refused as expected: {r.returncode} {r.stdout!r}")

        r = bellows("resize", "-2", "--reason", "operator gives two nodes back")
        if r.returncode != 0 or "ranks on local2, local3 leave" not in r.stdout:
            fail(f"bellows resize -2: {r.returncode} {r.stdout!r} {r.stderr!r}")

        # The leaving ranks exit at once: the nodes go back while the job still runs.
        deadline = time.time() + 30
        while time.time() < deadline:
            r = bellows("status", "--json")
            if r.returncode != 0:
                fail(f"the job ended before its shrink completed: {r.stderr!r}")
            status = json.loads(r.stdout)
            if len(status["nodes"]) == 2 and status["active_resize"] is None:
                break
            time.sleep(0.2)
        else:
            fail(f"the shrink did not give the nodes back within 30 s; last status {status}")
        if status["ranks"] != 2:
            fail(f"status says {status['ranks']} ranks after the shrink, expected 2")

        out, err = job.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        job.kill()
        fail("the job did not end within its time")
    if job.returncode != 0:
        fail(f"bellows run exited {job.returncode}: {err[-3000:]}")
    report = json.loads(out.strip().splitlines()[-1])
    if not report.get("verified"):
        fail(f"the result did not verify: residual {report.get('residual')}")
    if report["ranks"] != 3:
        fail(f"the job ended on {report['ranks']} ranks, expected 3 (after its own +1)")
    if "asked the controller for +1 node(s) before iteration 36: accepted" not in out:
        fail(f"the application's request was not accepted: {out[-1500:]}")

    job_dir = os.path.realpath(os.path.join(run_dir, "latest"))
    # No warning or error in `bellows run`'s stderr or a daemon's log: the ranks detached at
    # their program's end, so no daemon saw a rank die.
    problems = job_log_problems(job_dir, err)
    if problems:
        fail("unexpected warnings or errors in the job's logs:\n  " + "\n  ".join(problems))
    with open(os.path.join(job_dir, "events.jsonl")) as f:
        events = [json.loads(line) for line in f if line.strip()]
    finals = {(e["resize"], e["kind"], e["requester"], e["to"]) for e in events
              if e["to"] in ("committed", "aborted") and not e["refused"]}
    expected = {(1, "expand", "policy", "committed"), (2, "shrink", "operator", "committed"),
                (3, "expand", "application", "committed")}
    if finals != expected:
        fail(f"final resize states {sorted(finals)}, expected {sorted(expected)}")
    reasons = {e["resize"]: e["reason"] for e in events if e["resize"]}
    if "expand.ready_tasks_per_node_above" not in reasons.get(1, ""):
        fail(f"the expand's reason does not name its trigger: {reasons.get(1)!r}")
    if reasons.get(2) != "operator gives two nodes back":
        fail(f"the shrink's reason is {reasons.get(2)!r}")
    if reasons.get(3) != "rank 0 asked for +1 node(s)":
        fail(f"the application's expand has the reason {reasons.get(3)!r}")
    refused = [e for e in events if e["refused"]]
    if refused:
        fail(f"refused events in the log: {refused}")
    if "resize #1: expand by 2 node(s) [local2,local3], asked by policy, committed" not in err:
        fail(f"the timeline at the end misses the expand: {err[-2000:]}")

    png = os.path.join(top, "timeline.png")
    r = bellows("plot", "--out", png)
    if r.returncode != 0 or not os.path.exists(png) or os.path.getsize(png) < 10000:
        fail(f"bellows plot: {r.returncode} {r.stdout!r} {r.stderr!r}")
    if "3 resizes" not in r.stdout:
        fail(f"bellows plot did not draw the 3 resizes: {r.stdout!r}")

    time.sleep(0.5)
    left = processes_mentioning(job_dir)
    if left:
        fail(f"processes of the job are left: {left}")
    if os.listdir(socket_root):
        fail(f"the job's socket directory is left: {os.listdir(socket_root)} in {socket_root}")
    shutil.rmtree(top)  # kept when the test fails: fail() exits before this
    print("run_local: PASS", flush=True)


if __name__ == "__main__":
    main()
