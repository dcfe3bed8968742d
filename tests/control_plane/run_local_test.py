#!/usr/bin/env python3
"""End-to-end test of `bellows run` on the local backend: a real controller, one real bellowsd
per emulated node and real MPICH ranks. The policy grows the job from 2 to 4 nodes, an operator
shrinks it back with `bellows resize -2` (the nodes go back while the job runs), an
out-of-range request is refused with the reason, the application itself asks for one more node
near its end (bellows::runtime::request_resize) and gets it, the GEMM result verifies, the event
log holds the expected resizes, `bellows plot` draws them, and no process is left. The
controller's socket lives in the socket directory (BELLOWS_SOCKET_DIR, a private temporary
directory here), is named in the job directory's controller.endpoint, and is gone at the end.

  run_local_test.py --bellows PATH --app PATH [--run-dir-length N] [--listen tcp:ADDRESS]

With --run-dir-length the job directory's path is made N characters long or more (a deep
project tree), far beyond the 107 characters a Unix socket's path may hold. With --listen the
controller listens on tcp (bellows run --listen): the daemons and the `bellows` commands
reach it there with the job's CURVE key from the job directory (controller.key, 0600).
Prints "run_local: PASS" or "run_local: FAIL: why".
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
  max: 4
  step: 2
expand:
  ready_tasks_per_node_above: 1
tick: 250ms
hysteresis_ticks: 1
cooldown: 10m
resize_timeout: 1m
"""



def main():
    def options(p):
        p.add_argument("--run-dir-length", type=int, default=0)
        p.add_argument("--listen", default="")
    t = LocalJobTest("run_local", options)
    run_dir = t.top
    while len(run_dir) < t.args.run_dir_length:
        run_dir = os.path.join(run_dir, "a-deep-project-directory")
    t.use_run_dir(run_dir)
    socket_root = os.path.join(t.top, "sockets")
    t.env["BELLOWS_SOCKET_DIR"] = socket_root
    t.log(f"job files in {run_dir} ({len(run_dir)} characters), sockets in {socket_root}")
    policy = t.write("grow.yaml", POLICY)

    listen = ["--listen", t.args.listen] if t.args.listen else []
    job = t.start("--nodes", "2:4", "--policy", policy, "--quiet", *listen, "--",
                  t.args.app, "--n", "1536", "--tile", "256", "--iterations", "40", "--steal", "on",
                  "--verify", "--ask-controller", "iter=36:+1")
    try:
        # The policy sees ready tasks piling up on 2 nodes and grows the job to 4.
        deadline = time.time() + 90
        status = {}
        while time.time() < deadline:
            r = t.bellows("status", "--json")
            if r.returncode == 0:
                status = json.loads(r.stdout)
                if len(status["nodes"]) == 4 and status["active_resize"] is None:
                    break
            if job.poll() is not None:
                t.fail(f"the job ended before it grew: {job.stderr.read()[-2000:]}")
            time.sleep(0.2)
        else:
            t.fail(f"the job did not grow to 4 nodes within 90 s; last status {status}")
        if status["ranks"] != 4:
            t.fail(f"status says {status['ranks']} ranks after the expand, expected 4")
        # From a shell that knows only the job id (no BELLOWS_RUN_DIR): the running job's
        # socket directory names its job directory.
        elsewhere = dict(t.env)
        del elsewhere["BELLOWS_RUN_DIR"]
        r = t.bellows("status", status["job"], "--json", env=elsewhere)
        if r.returncode != 0 or json.loads(r.stdout)["job"] != status["job"]:
            t.fail(f"bellows status {status['job']} without BELLOWS_RUN_DIR: {r.returncode} {r.stderr!r}")
        with open(os.path.join(run_dir, "latest", "controller.endpoint")) as f:
            endpoint = f.read().strip()
        if t.args.listen:
            address = t.args.listen.split(":", 1)[1]
            if not endpoint.startswith(f"tcp://{address}:") or endpoint.endswith(":*"):
                t.fail(f"controller.endpoint says {endpoint!r}, expected tcp://{address}:PORT")
            key = os.path.join(run_dir, "latest", "controller.key")
            if not os.path.isfile(key) or os.stat(key).st_mode & 0o777 != 0o600:
                t.fail(f"the job's key {key} is missing or not 0600")
        else:
            expected_prefix = f"ipc://{socket_root}/{status['job']}-"
            if not endpoint.startswith(expected_prefix) or not endpoint.endswith("/controller.sock"):
                t.fail(f"controller.endpoint says {endpoint!r}, expected {expected_prefix}HASH/controller.sock")
        for node in ("local0", "local1", "local2", "local3"):
            with open(os.path.join(run_dir, "latest", "nodes", node, "bellowsd.log")) as f:
                log = f.read()
            if f"registered with the controller at {endpoint}" not in log:
                t.fail(f"the daemon of {node} did not register at {endpoint}: {log[-1500:]}")

        r = t.bellows("resize", "+1")
        if r.returncode != 1 or "may hold 2 to 4 nodes: +1 from 4 would make 5" not in r.stdout:
            t.fail(f"an out-of-range resize was not refused as expected: {r.returncode} {r.stdout!r}")

        r = t.bellows("resize", "-2", "--reason", "operator gives two nodes back")
        if r.returncode != 0 or "ranks on local2, local3 leave" not in r.stdout:
            t.fail(f"bellows resize -2: {r.returncode} {r.stdout!r} {r.stderr!r}")

        # The leaving ranks exit at once: the nodes go back while the job still runs.
        deadline = time.time() + 30
        while time.time() < deadline:
            r = t.bellows("status", "--json")
            if r.returncode != 0:
                t.fail(f"the job ended before its shrink completed: {r.stderr!r}")
            status = json.loads(r.stdout)
            if len(status["nodes"]) == 2 and status["active_resize"] is None:
                break
            time.sleep(0.2)
        else:
            t.fail(f"the shrink did not give the nodes back within 30 s; last status {status}")
        if status["ranks"] != 2:
            t.fail(f"status says {status['ranks']} ranks after the shrink, expected 2")

        out, err = job.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within its time")
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}: {err[-3000:]}")
    report = json.loads(out.strip().splitlines()[-1])
    if not report.get("verified"):
        t.fail(f"the result did not verify: residual {report.get('residual')}")
    if report["ranks"] != 3:
        t.fail(f"the job ended on {report['ranks']} ranks, expected 3 (after its own +1)")
    if "asked the controller for +1 node(s) before iteration 36: accepted" not in out:
        t.fail(f"the application's request was not accepted: {out[-1500:]}")

    job_dir = t.job_dir()
    t.check_logs("latest", err)
    events = t.events()
    finals = {(e["resize"], e["kind"], e["requester"], e["to"]) for e in events
              if e["to"] in ("committed", "aborted") and not e["refused"]}
    expected = {(1, "expand", "policy", "committed"), (2, "shrink", "operator", "committed"),
                (3, "expand", "application", "committed")}
    if finals != expected:
        t.fail(f"final resize states {sorted(finals)}, expected {sorted(expected)}")
    reasons = {e["resize"]: e["reason"] for e in events if e["resize"]}
    if "expand.ready_tasks_per_node_above" not in reasons.get(1, ""):
        t.fail(f"the expand's reason does not name its trigger: {reasons.get(1)!r}")
    if reasons.get(2) != "operator gives two nodes back":
        t.fail(f"the shrink's reason is {reasons.get(2)!r}")
    if reasons.get(3) != "rank 0 asked for +1 node(s)":
        t.fail(f"the application's expand has the reason {reasons.get(3)!r}")
    refused = [e for e in events if e["refused"]]
    if refused:
        t.fail(f"refused events in the log: {refused}")
    if "resize #1: expand by 2 node(s) [local2,local3], asked by policy, committed" not in err:
        t.fail(f"the timeline at the end misses the expand: {err[-2000:]}")

    png = os.path.join(t.top, "timeline.png")
    r = t.bellows("plot", "--out", png)
    if r.returncode != 0 or not os.path.exists(png) or os.path.getsize(png) < 10000:
        t.fail(f"bellows plot: {r.returncode} {r.stdout!r} {r.stderr!r}")
    if "3 resizes" not in r.stdout:
        t.fail(f"bellows plot did not draw the 3 resizes: {r.stdout!r}")

    if os.listdir(socket_root):
        t.fail(f"the job's socket directory is left: {os.listdir(socket_root)} in {socket_root}")
    t.passed(job_dir)


if __name__ == "__main__":
    main()
