#!/usr/bin/env python3
"""End-to-end test of failures on the local backend with real processes: `bellows run` of a
3-node job, one bellowsd per node, and as the job's program a rank that only attaches to its
node's daemon and waits (control_channel_probe survive), so that the test depends on the control
plane alone, not on how a runtime recovers.

1. A rank other than the first is killed (SIGKILL). Its daemon sees the process go: the event
   log shows failure 1 (kind failure) detected on rank_died with rank 2 and node local2, then
   agreed once the surviving daemons were told; the survivors' program receives the lost rank
   (PMIx kRanksLost); `bellows status` shows the job degraded (lost node local2, rank 2) until
   the job's first rank reports that it recovered; local2 leaves the job.
2. A node's bellowsd is killed (SIGKILL). The controller sees its connection go: failure 2,
   node_lost on local1 with rank 1; the rank the daemon left behind is killed (it would run on
   unmanaged); the first rank receives the lost rank.
Each detection time (from the kill to the line in the event log) is printed and bounded. No
process of the job is left; `bellows plot` marks both failures.

  lost_ranks_test.py --bellows PATH --app PATH(control_channel_probe)
Prints "lost_ranks: PASS" or "lost_ranks: FAIL: why".
"""
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402
from procfs import gone, processes_mentioning  # noqa: E402

# Detection within: the daemon's watch of its ranks' pids (every 0.1 s) or the transport's
# connection event, then the controller's loop, with room for a loaded machine.
DETECTION_LIMIT_S = 3.0


def wait_for(t, job, what, check, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = check()
        if value:
            return value
        if job.poll() is not None:
            t.fail(f"the job ended while waiting for {what}: {job.stderr.read()[-2000:]}")
        time.sleep(0.02)
    t.fail_hung(job, f"no {what} within {seconds} s")


def failure_lines(t, failure):
    return [e for e in t.events() if e["kind"] == "failure" and e["resize"] == failure and not e["refused"]]


def event_seconds(event):
    return datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def rank_file(out, rank):
    path = out / f"rank-{rank}"
    return path.read_text() if path.exists() else ""


def daemon_pid(job_dir, node):
    for pid in processes_mentioning(job_dir):
        try:
            argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == "bellowsd" and "--node-name" in argv and \
                argv[argv.index("--node-name") + 1] == node:
            return pid
    return None


def check_failure(t, job, failure, event, node, rank, killed_at):
    """The failure's lines: detected on `event`, then agreed; returns the detection time."""
    lines = wait_for(t, job, f"failure {failure} agreed in the event log",
                     lambda: (ls := failure_lines(t, failure)) and ls[-1]["to"] == "agreed" and ls)
    first = lines[0]
    if (first["event"], first["from"], first["to"], first["nodes"]) != (event, "none", "detected", [node]):
        t.fail(f"failure {failure} begins with {first}, expected {event} none -> detected on {node}")
    if f"lost rank {rank} on {node}" not in first["detail"]:
        t.fail(f"failure {failure} does not name rank {rank} on {node}: {first['detail']!r}")
    if [(e["event"], e["to"]) for e in lines] != [(event, "detected"), ("survivors_told", "agreed")]:
        t.fail(f"failure {failure}'s lines: {[(e['event'], e['to']) for e in lines]}")
    detection = event_seconds(first) - killed_at
    if not 0 <= detection <= DETECTION_LIMIT_S:
        t.fail(f"failure {failure} detected {detection:.3f} s after the kill, limit {DETECTION_LIMIT_S} s")
    return detection


def main():
    t = LocalJobTest("lost_ranks")
    out = Path(t.top) / "ranks"
    out.mkdir()
    job = t.start("--nodes", "3:3", "--pool", "3", "--quiet", "--", t.args.app, "survive", str(out), "120")
    try:
        job_dir = t.job_dir()
        status = wait_for(t, job, "the three ranks' pids in bellows status",
                          lambda: (s := t.status()) and all(p["pid"] for p in s["processes"])
                          and len(s["processes"]) == 3 and s)
        pids = {p["node"]: p["pid"] for p in status["processes"]}
        ranks = {p["node"]: p["rank"] for p in status["processes"]}
        if ranks != {"local0": 0, "local1": 1, "local2": 2}:
            t.fail(f"the ranks are {ranks}, expected local0..2 to run ranks 0..2")
        if status["degraded"] is not None:
            t.fail(f"a job without failure shows degraded: {status['degraded']}")

        # 1. Rank 2 killed.
        killed_at = time.time()
        os.kill(pids["local2"], signal.SIGKILL)
        detection = check_failure(t, job, 1, "rank_died", "local2", 2, killed_at)
        t.log(f"rank 2 (pid {pids['local2']}) killed: failure 1 detected {detection * 1000:.0f} ms later")
        for rank in (0, 1):
            wait_for(t, job, f"rank {rank} told of the lost rank 2",
                     lambda: "lost failure=1 ranks=2 nodes=local2 reason=a rank on local2 died: rank 2" in
                     rank_file(out, rank))
        status = t.status()
        if status["degraded"] != {"lost_nodes": ["local2"], "lost_ranks": [2], "failures": [1]}:
            t.fail(f"bellows status does not show the job degraded by failure 1: {status['degraded']}")
        if status["nodes"] != ["local0", "local1"]:
            t.fail(f"local2 is still a node of the job: {status['nodes']}")
        text = t.bellows("status").stdout
        if "degraded   lost nodes [local2], lost ranks [2] (failure #1, not recovered)" not in text:
            t.fail(f"bellows status does not say the job is degraded:\n{text}")
        (out / "recover").touch()
        wait_for(t, job, "failure 1 recovered", lambda: failure_lines(t, 1)[-1]["to"] == "recovered")
        status = t.status()
        if status["degraded"] is not None or status["failures"][0]["state"] != "recovered":
            t.fail(f"the job still shows degraded after it recovered: {status['degraded']}")
        t.log("the survivors were told, bellows status showed the job degraded, then recovered")

        # 2. The daemon of local1 killed: a lost node, whose rank must not run on.
        daemon = daemon_pid(job_dir, "local1")
        if daemon is None:
            t.fail("no bellowsd of local1 found")
        killed_at = time.time()
        os.kill(daemon, signal.SIGKILL)
        detection = check_failure(t, job, 2, "node_lost", "local1", 1, killed_at)
        t.log(f"the daemon of local1 (pid {daemon}) killed: failure 2 detected {detection * 1000:.0f} ms later")
        wait_for(t, job, "rank 0 told of the lost rank 1",
                 lambda: "lost failure=2 ranks=1 nodes=local1 reason=the daemon of local1 went away" in
                 rank_file(out, 0))
        wait_for(t, job, "the rank of local1 gone", lambda: gone(pids["local1"]), seconds=5)
        wait_for(t, job, "failure 2 recovered", lambda: failure_lines(t, 2)[-1]["to"] == "recovered")
        status = t.status()
        if status["nodes"] != ["local0"] or len(status["failures"]) != 2:
            t.fail(f"after two failures: nodes {status['nodes']}, failures {status['failures']}")

        (out / "stop").touch()
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within 60 s of its first rank being told to stop")
    if job.returncode != 0:
        t.fail(f"bellows run ended with {job.returncode}: {err[-2000:]}")
    if "killed its rank (pid" not in err:
        t.fail(f"bellows run does not say it killed the rank of local1:\n{err[-2000:]}")
    # The deaths the test caused, as the daemons and the controller saw them.
    t.check_logs("latest", err, allowed=["ended without leaving the job", "the rank launcher"])
    png = os.path.join(t.top, "timeline.png")
    r = t.bellows("plot", "--out", png)
    if r.returncode != 0 or "0 resizes, 2 failures" not in r.stdout:
        t.fail(f"bellows plot did not mark the 2 failures: {r.returncode} {r.stdout!r} {r.stderr!r}")
    t.passed(job_dir)


if __name__ == "__main__":
    main()
