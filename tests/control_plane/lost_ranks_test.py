#!/usr/bin/env python3
"""End-to-end test of failures on the local backend with real processes: `bellows run` of a
4-node job, one bellowsd per node, and as the job's program a rank that only attaches to its
node's daemon and waits (control_channel_probe survive), so that the test depends on the control
plane alone, not on how a runtime recovers.

1. A rank other than the first is killed (SIGKILL). Its daemon sees the process go: the event
   log shows failure 1 (kind failure) detected on rank_died with rank 3 and node local3, then
   agreed once the surviving daemons were told; the survivors' program receives the lost rank
   (PMIx kRanksLost); `bellows status` shows the job degraded (lost node local3, rank 3) until
   the job's first rank reports that it recovered; local3 leaves the job.
2. A node's bellowsd is killed (SIGKILL). The controller sees its connection go: failure 2,
   node_lost on local2 with rank 2; the rank the daemon left behind is killed (it would run on
   unmanaged); the first rank receives the lost rank.
3. A whole node lost: local1's daemon and rank killed at once: one failure, rank 1 on local1.
4. In a second job, the first rank killed: a failure like the others. `bellows run` says the job
   goes on on its other node and waits for that rank, which does not recover (it only waits):
   once it ends, the job ends, the failure given up and `bellows run` exiting with the first
   rank's status (9: its mpiexec's).
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
from procfs import bellowsd_pid as daemon_pid, gone  # noqa: E402

# Detection within: the daemon's watch of its ranks' pids (every 0.1 s) or the transport's
# connection event, then the controller's loop, with room for a loaded machine.
DETECTION_LIMIT_S = 3.0


def wait_for(t, job, what, check, seconds=30):
    return t.wait_for(job, what, check, seconds, poll=0.02)


def failure_lines(t, failure):
    return [e for e in t.events() if e["kind"] == "failure" and e["resize"] == failure and not e["refused"]]


def event_seconds(event):
    return datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


def rank_file(out, rank):
    path = out / f"rank-{rank}"
    return path.read_text() if path.exists() else ""


def check_failure(t, job, failure, event, node, rank, killed_at):
    """The failure's lines: detected on `event`, then agreed; returns the detection time."""
    lines = wait_for(t, job, f"failure {failure} agreed in the event log",
                     lambda: (ls := failure_lines(t, failure)) and any(e["to"] == "agreed" for e in ls) and ls)
    first = lines[0]
    if (first["event"], first["from"], first["to"], first["nodes"]) != (event, "none", "detected", [node]):
        t.fail(f"failure {failure} begins with {first}, expected {event} none -> detected on {node}")
    if f"lost rank {rank} on {node}" not in first["detail"]:
        t.fail(f"failure {failure} does not name rank {rank} on {node}: {first['detail']!r}")
    if [(e["event"], e["to"]) for e in lines[:2]] != [(event, "detected"), ("survivors_told", "agreed")]:
        t.fail(f"failure {failure}'s lines: {[(e['event'], e['to']) for e in lines]}")
    detection = event_seconds(first) - killed_at
    if not 0 <= detection <= DETECTION_LIMIT_S:
        t.fail(f"failure {failure} detected {detection:.3f} s after the kill, limit {DETECTION_LIMIT_S} s")
    return detection


def start_job(t, out, nodes):
    """`bellows run` of `nodes` nodes whose ranks only attach and wait; while it runs, a failed
    check kills it and every process of the test's jobs. Returns the job, its directory and
    each node's rank pid, once every rank reported its rank (node localN runs rank N)."""
    out.mkdir()
    job = t.start("--nodes", f"{nodes}:{nodes}", "--pool", str(nodes), "--quiet", "--", t.args.app,
                  "survive", str(out), "120")

    def failing(why):
        t.kill_all(job)
        LocalJobTest.fail(t, why)

    t.fail = failing
    status = wait_for(t, job, f"the {nodes} ranks' pids in bellows status",
                      lambda: t.status_with_rank_pids(nodes))
    ranks = {p["node"]: p["rank"] for p in status["processes"]}
    if ranks != {f"local{i}": i for i in range(nodes)}:
        t.fail(f"the ranks are {ranks}, expected local0..{nodes - 1} to run ranks 0..{nodes - 1}")
    if status["degraded"] is not None:
        t.fail(f"a job without failure shows degraded: {status['degraded']}")
    return job, t.job_dir(), {p["node"]: p["pid"] for p in status["processes"]}


def end_job(t, job):
    """Waits for `bellows run` to end; returns its stderr."""
    try:
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within 60 s")
    del t.fail  # the job ended: LocalJobTest's own again
    return err


def main():
    t = LocalJobTest("lost_ranks")
    out = Path(t.top) / "ranks"
    job, job_dir, pids = start_job(t, out, 4)

    # 1. Rank 3 killed.
    killed_at = time.time()
    os.kill(pids["local3"], signal.SIGKILL)
    detection = check_failure(t, job, 1, "rank_died", "local3", 3, killed_at)
    t.log(f"rank 3 (pid {pids['local3']}) killed: failure 1 detected {detection * 1000:.0f} ms later")
    for rank in (0, 1, 2):
        wait_for(t, job, f"rank {rank} told of the lost rank 3",
                 lambda: "lost failure=1 ranks=3 nodes=local3 reason=a rank on local3 died: " in rank_file(out, rank))
    status = t.status()
    if status["degraded"] != {"lost_nodes": ["local3"], "lost_ranks": [3], "failures": [1]}:
        t.fail(f"bellows status does not show the job degraded by failure 1: {status['degraded']}")
    if status["nodes"] != ["local0", "local1", "local2"]:
        t.fail(f"local3 is still a node of the job: {status['nodes']}")
    text = t.bellows("status").stdout
    if "degraded   lost nodes [local3], lost ranks [3] (failure #1, not recovered)" not in text:
        t.fail(f"bellows status does not say the job is degraded:\n{text}")
    (out / "recover").touch()
    wait_for(t, job, "failure 1 recovered", lambda: failure_lines(t, 1)[-1]["to"] == "recovered")
    status = t.status()
    if status["degraded"] is not None or status["failures"][0]["state"] != "recovered":
        t.fail(f"the job still shows degraded after it recovered: {status['degraded']}")
    t.log("the survivors were told, bellows status showed the job degraded, then recovered")

    # 2. The daemon of local2 killed: a lost node, whose rank must not run on.
    daemon = daemon_pid(job_dir, "local2")
    if daemon is None:
        t.fail("no bellowsd of local2 found")
    killed_at = time.time()
    os.kill(daemon, signal.SIGKILL)
    detection = check_failure(t, job, 2, "node_lost", "local2", 2, killed_at)
    t.log(f"the daemon of local2 (pid {daemon}) killed: failure 2 detected {detection * 1000:.0f} ms later")
    wait_for(t, job, "rank 0 told of the lost rank 2",
             lambda: "lost failure=2 ranks=2 nodes=local2 reason=the daemon of local2 went away" in rank_file(out, 0))
    wait_for(t, job, "the rank of local2 gone", lambda: gone(pids["local2"]), seconds=5)
    wait_for(t, job, "failure 2 recovered", lambda: failure_lines(t, 2)[-1]["to"] == "recovered")

    # 3. A whole node lost: the daemon and the rank of local1 killed at once. One failure.
    daemon = daemon_pid(job_dir, "local1")
    if daemon is None:
        t.fail("no bellowsd of local1 found")
    killed_at = time.time()
    os.kill(pids["local1"], signal.SIGKILL)
    os.kill(daemon, signal.SIGKILL)
    lines = wait_for(t, job, "failure 3 agreed",
                     lambda: (ls := failure_lines(t, 3)) and any(e["to"] == "agreed" for e in ls) and ls)
    if lines[0]["event"] not in ("rank_died", "node_lost") or lines[0]["nodes"] != ["local1"] or \
            "lost rank 1 on local1" not in lines[0]["detail"]:
        t.fail(f"failure 3 does not name rank 1 on local1: {lines[0]}")
    t.log(f"local1 lost (daemon and rank killed): failure 3 ({lines[0]['event']}) detected "
          f"{(event_seconds(lines[0]) - killed_at) * 1000:.0f} ms later")
    wait_for(t, job, "rank 0 told of the lost rank 1",
             lambda: "lost failure=3 ranks=1 nodes=local1" in rank_file(out, 0))
    wait_for(t, job, "failure 3 recovered", lambda: failure_lines(t, 3)[-1]["to"] == "recovered")
    time.sleep(0.5)  # what else comes of local1's loss: refused, no failure of its own
    status = t.status()
    if status["nodes"] != ["local0"] or len(status["failures"]) != 3:
        t.fail(f"after three failures: nodes {status['nodes']}, failures {status['failures']}")

    (out / "stop").touch()
    err = end_job(t, job)
    if job.returncode != 0:
        t.fail(f"bellows run ended with {job.returncode}: {err[-2000:]}")
    if "failure #1: lost 1 node(s) [local3], recovered after" not in err:
        t.fail(f"the timeline at the end does not sum failure 1 up:\n{err[-2000:]}")
    if "killed its rank (pid" not in err:
        t.fail(f"bellows run does not say it killed the rank of local2:\n{err[-2000:]}")
    # The deaths the test caused, as the daemons and the controller saw them.
    t.check_logs("latest", err, allowed=["ended without leaving the job", "the rank launcher"])
    png = os.path.join(t.top, "timeline.png")
    r = t.bellows("plot", "--out", png)
    if r.returncode != 0 or "0 resizes, 3 failures" not in r.stdout:
        t.fail(f"bellows plot did not mark the 3 failures: {r.returncode} {r.stdout!r} {r.stderr!r}")
    first_job = job_dir

    # 4. The job's first rank killed (a job of its own): detected like any rank; the job goes on
    # on local1 until its rank ends, which never reports a recovery: the failure is given up.
    out = Path(t.top) / "ranks-2"
    job, job_dir, pids = start_job(t, out, 2)
    killed_at = time.time()
    os.kill(pids["local0"], signal.SIGKILL)
    wait_for(t, job, "failure 1 agreed",
             lambda: (ls := failure_lines(t, 1)) and any(e["to"] == "agreed" for e in ls))
    time.sleep(0.5)
    if job.poll() is not None:
        t.fail(f"bellows run ended with its first rank although local1's rank runs: {job.stderr.read()[-1500:]}")
    (out / "stop").touch()
    err = end_job(t, job)
    if "the job's first rank (pid" not in err or "the job goes on on its other nodes" not in err:
        t.fail(f"bellows run did not say it went on without its first rank:\n{err[-1500:]}")
    if job.returncode != signal.SIGKILL:
        t.fail(f"bellows run exited {job.returncode}, expected {int(signal.SIGKILL)}: the first rank's "
               "mpiexec's status (hydra exits with the number of the signal that killed its rank)")
    lines = failure_lines(t, 1)
    if not lines or lines[0]["event"] != "rank_died" or "lost rank 0 on local0" not in lines[0]["detail"] or \
            lines[-1]["to"] != "given_up":
        t.fail(f"the first rank's death is not a failure given up with the job: {lines}; {err[-1500:]}")
    t.log(f"rank 0 (pid {pids['local0']}) killed: failure detected {(event_seconds(lines[0]) - killed_at) * 1000:.0f}"
          f" ms later; bellows run ended with {job.returncode}, the failure {lines[-1]['to']}")
    t.passed(first_job, job_dir)


if __name__ == "__main__":
    main()
