#!/usr/bin/env python3
"""End-to-end test of PMIx_Job_control, on the local backend with real processes: `bellows run`
of a 3-node job whose ranks only attach to their node's daemon and wait (control_channel_probe
survive), and `bellows-pmix-control` (a PMIx tool in C: PMIx_tool_init with the server URI,
PMIx_Job_control_nb) attached to the daemon of local0.

1. Bad calls fail with the standard's statuses and the daemon logs why: a target of another
   namespace and a rank the job does not have are BAD-PARAM, a directive Bellows does not carry
   out (pmix.jctrl.pause) NOT-SUPPORTED; nothing is signalled.
2. SIGSTOP to rank 1 stops its process (state T), SIGCONT runs it again: the controller sent the
   signal through local1's daemon, and the event log records both with who asked (the tool and
   its node). SIGCONT to every rank reaches each node's daemon.
3. PMIX_JOB_CTRL_TERMINATE of rank 2 ends its process (SIGTERM): a failure, as any rank lost,
   which the job recovers from (its first rank reports it recovered); bellows status lists it.
4. The job then ends normally; no process is left.

  pmix_job_control_test.py --bellows PATH --app PATH(control_channel_probe) --tool PATH
Prints "pmix_job_control: PASS" or "pmix_job_control: FAIL: why".
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402
from procfs import gone  # noqa: E402

PMIX_SUCCESS = 0
PMIX_ERR_BAD_PARAM = -27
PMIX_ERR_NOT_SUPPORTED = -47


def state_of(pid):
    """The process state letter of pid (R, S, T, ...), or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split()[0]


def main():
    t = LocalJobTest("pmix_job_control", lambda p: p.add_argument("--tool", required=True))
    out = Path(t.top) / "ranks"
    out.mkdir()
    job = t.start("--nodes", "3:3", "--pool", "3", "--quiet", "--", t.args.app, "survive", str(out), "120")

    def failing(why):
        t.kill_all(job)
        LocalJobTest.fail(t, why)

    t.fail = failing
    status = t.wait_for(job, "the 3 ranks' pids in bellows status", lambda: t.status_with_rank_pids(3), 60)
    job_id = status["job"]
    pids = {p["rank"]: p["pid"] for p in status["processes"]}
    job_dir = t.job_dir()
    uri = "file:" + os.path.join(job_dir, "nodes", "local0", "uri")

    def tool(*args):
        r = subprocess.run([t.args.tool, "--uri", uri, "--wait", "30", *args], capture_output=True, text=True,
                           timeout=60)
        lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        if r.returncode != 0 or len(lines) != 1:
            t.fail(f"bellows-pmix-control {' '.join(args)} exited {r.returncode}: {r.stderr!r}; printed {lines}")
        return lines[0]

    def daemon_log(node):
        return Path(job_dir, "nodes", node, "bellowsd.log").read_text()

    # 1. Bad calls.
    for args, code, logged in [
        (("signal", "no-such-job", "1", "19"), PMIX_ERR_BAD_PARAM, f"target no-such-job:1 is not of job {job_id}"),
        (("signal", job_id, "7", "19"), PMIX_ERR_BAD_PARAM, f"job {job_id} has no rank 7 to signal (ranks as last "
                                                            "reported: 0,1,2)"),
        (("directive", job_id, "1", "pmix.jctrl.pause"), PMIX_ERR_NOT_SUPPORTED,
         "job control directive pmix.jctrl.pause is not supported (only pmix.jctrl.sig and pmix.jctrl.term)"),
    ]:
        answer = tool(*args)
        if answer["status"] != code:
            t.fail(f"{' '.join(args)}: status {answer['status']} ({answer['status_name']}), expected {code}")
        t.wait_for(job, f"the daemon's reason for refusing {' '.join(args)}", lambda: logged in daemon_log("local0"), 10)
    if any(state_of(pid) in ("T", None) for pid in pids.values()):
        t.fail(f"a refused call changed a rank: {[(pid, state_of(pid)) for pid in pids.values()]}")
    t.log("bad target, missing rank and unknown directive refused with their reasons")

    # 2. Stop and continue rank 1.
    answer = tool("signal", job_id, "1", "19")
    if answer["status"] != PMIX_SUCCESS:
        t.fail(f"SIGSTOP to rank 1: {answer}")
    t.wait_for(job, "rank 1 stopped", lambda: state_of(pids[1]) == "T", 10)
    if tool("signal", job_id, "1", "18")["status"] != PMIX_SUCCESS:
        t.fail("SIGCONT to rank 1 failed")
    t.wait_for(job, "rank 1 running again", lambda: state_of(pids[1]) in ("R", "S"), 10)
    signals = [e for e in t.events() if e["event"] == "job_control" and not e["refused"]]
    reasons = [e["reason"] for e in signals]
    if len(signals) != 2 or not all(r.startswith("PMIx_Job_control from bellowsd.tool.") and " on local0: signal " in r
                                    for r in reasons) or signals[0]["nodes"] != ["local1"]:
        t.fail(f"the event log does not record the two signals with who asked: {signals}")
    if f"sent signal 19 to rank 1" not in daemon_log("local1"):
        t.fail("local1's daemon does not log the signal it sent")
    t.log(f"rank 1 stopped and continued; logged: {reasons[0]}")
    # SIGCONT to every rank (harmless to running ones): the daemon of each node signals its rank.
    if tool("signal", job_id, "all", "18")["status"] != PMIX_SUCCESS:
        t.fail("SIGCONT to every rank failed")
    last = [e for e in t.events() if e["event"] == "job_control"][-1]
    if last["refused"] or sorted(last["nodes"]) != ["local0", "local1", "local2"] or not last["reason"].endswith(
            ": signal 18 to every rank"):
        t.fail(f"a signal to every rank is not logged with the 3 nodes signalled: {last}")
    t.wait_for(job, "every daemon's log of the signal", lambda: all(
        "sent signal 18 to rank " in daemon_log(node) for node in ("local0", "local1", "local2")), 10)

    # 3. Terminate rank 2: a failure the job recovers from.
    answer = tool("terminate", job_id, "2")
    if answer["status"] != PMIX_SUCCESS:
        t.fail(f"terminate rank 2: {answer}")
    t.wait_for(job, "rank 2's process gone", lambda: gone(pids[2]), 10)
    failure = t.wait_for(job, "the failure of rank 2 in bellows status",
                         lambda: (s := t.status()) and next((f for f in s["failures"] if 2 in f["ranks"]), None), 30)
    (out / "recover").touch()  # the job's first rank reports the failure recovered
    t.wait_for(job, "the job's recovery", lambda: (s := t.status()) and s["degraded"] is None, 30)
    if "ended after PMIx_Job_control's signal 15" not in daemon_log("local2"):
        t.fail("local2's daemon does not say its rank ended of the job control's SIGTERM")
    t.log(f"rank 2 terminated: failure {failure['id']} ({failure['reason']}), recovered")

    # 4. The job ends.
    (out / "stop").touch()
    try:
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail("the job did not end within 60 s")
    if job.returncode != 0:
        t.fail(f"bellows run ended with {job.returncode}: {err[-2000:]}")
    time.sleep(0.2)
    t.check_logs("latest", err, allowed=["job control from", "the rank launcher"])
    del t.fail
    t.passed(job_dir)


if __name__ == "__main__":
    main()
