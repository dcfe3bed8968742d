#!/usr/bin/env python3
"""End-to-end test of the standard PMIx events bellowsd raises, on the local backend with real
processes: `bellows run` of a 3-node job whose ranks only attach to their node's daemon and wait
(control_channel_probe survive), and `bellows-pmix-query --events`, a PMIx tool in C that
registers a handler for the standard codes, attached to the daemon of local0 (a node that
survives everything below).

1. Rank 2 is killed (SIGKILL): the tool receives PMIX_ERR_PROC_ABORTED_BY_SIG when the
   controller learnt the signal, else PMIX_EVENT_PROC_TERMINATED, naming (job, 2) as the
   process table names it, on host local2, and nothing else.
2. The bellowsd of local1 is killed (SIGKILL): PMIX_EVENT_NODE_DOWN with host local1 and rank 1
   affected, then PMIX_EVENT_PROC_TERMINATED for rank 1 on local1.
3. The job ends: PMIX_EVENT_JOB_END for the job's namespace (rank wildcard), after which the
   tool exits 0.
The tool prints exactly these events, in this order. No process of the job is left.

  pmix_events_test.py --bellows PATH --app PATH(control_channel_probe) --tool PATH
Prints "pmix_events: PASS" or "pmix_events: FAIL: why".
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402
from procfs import bellowsd_pid  # noqa: E402

PROC_TERMINATED = "PMIX_EVENT_PROC_TERMINATED"
ABORTED_BY_SIG = "PMIX_ERR_PROC_ABORTED_BY_SIG"
NODE_DOWN = "PMIX_EVENT_NODE_DOWN"
JOB_END = "PMIX_EVENT_JOB_END"
CODES = {PROC_TERMINATED: -201, ABORTED_BY_SIG: -402, NODE_DOWN: -231, JOB_END: -145}


class ToolOutput:
    """The tool's stdout, one JSON object a line, read as it comes."""

    def __init__(self, tool):
        self.lines = []
        self.raw = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(tool,), daemon=True)
        self._thread.start()

    def _read(self, tool):
        for line in tool.stdout:
            with self._lock:
                self.raw.append(line.rstrip("\n"))
                try:
                    self.lines.append(json.loads(line))
                except json.JSONDecodeError:
                    pass

    def events(self):
        with self._lock:
            return [line for line in self.lines if "event" in line]

    def registered(self):
        with self._lock:
            return any(line.get("registered") for line in self.lines)


def main():
    t = LocalJobTest("pmix_events", lambda p: p.add_argument("--tool", required=True))
    out = Path(t.top) / "ranks"
    out.mkdir()
    job = t.start("--nodes", "3:3", "--pool", "3", "--quiet", "--", t.args.app, "survive", str(out), "120")
    tool = None

    def failing(why):
        t.kill_all(job, tool)
        LocalJobTest.fail(t, why)

    t.fail = failing

    def wait_for(what, check, seconds=30):
        return t.wait_for(job, what, check, seconds,
                          why_not=lambda: f"; the tool printed {output.raw if tool else []}")

    output = None
    status = wait_for("the 3 ranks' pids in bellows status", lambda: t.status_with_rank_pids(3), seconds=60)
    job_id = status["job"]
    pids = {p["node"]: p["pid"] for p in status["processes"]}
    ranks = {p["node"]: p["rank"] for p in status["processes"]}
    if ranks != {"local0": 0, "local1": 1, "local2": 2}:
        t.fail(f"the ranks are {ranks}, expected local0..2 to run ranks 0..2")
    job_dir = t.job_dir()
    tool = subprocess.Popen([t.args.tool, "--uri", "file:" + os.path.join(job_dir, "nodes", "local0", "uri"),
                             "--events", "90"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    output = ToolOutput(tool)
    wait_for("registration of the tool's event handler", output.registered)

    def check_event(event, name, rank, host):
        """`event` is `name` for (job, rank) on `host` (rank None: the whole job)."""
        if event["event"] != name or event["code"] != CODES[name]:
            t.fail(f"expected {name} ({CODES[name]}), got {event}")
        expected = [{"nspace": job_id, "rank": "wildcard" if rank is None else rank}]
        if event["affected"] != expected:
            t.fail(f"{name} names {event['affected']}, expected {expected}: {event}")
        if event.get("hostname") != host:
            t.fail(f"{name} names host {event.get('hostname')!r}, expected {host!r}: {event}")
        if event["source"].split(":")[0] != "bellowsd":
            t.fail(f"{name} comes from {event['source']}, not the daemon: {event}")

    # 1. Rank 2 killed.
    os.kill(pids["local2"], signal.SIGKILL)
    events = wait_for("the event of rank 2's death", lambda: (e := output.events()) and e)
    lost = events[0]
    if lost["event"] == ABORTED_BY_SIG:
        if "killed by signal 9" not in lost.get("text", ""):
            t.fail(f"{ABORTED_BY_SIG} does not say which signal: {lost}")
    elif "exit_code" in lost and "exit status" not in lost.get("text", ""):
        t.fail(f"{PROC_TERMINATED} carries an exit code its text does not give: {lost}")
    check_event(lost, lost["event"] if lost["event"] == ABORTED_BY_SIG else PROC_TERMINATED, 2, "local2")
    if "a rank on local2 died" not in lost.get("text", ""):
        t.fail(f"the event's text is not the controller's reason: {lost}")
    t.log(f"rank 2 killed: {lost['event']} ({lost.get('text')})")
    (out / "recover").touch()  # the job's first rank reports each failure recovered

    # 2. The daemon of local1 killed: its node is down, its rank lost with it.
    daemon = bellowsd_pid(job_dir, "local1")
    if daemon is None:
        t.fail("no bellowsd of local1 found")
    os.kill(daemon, signal.SIGKILL)
    events = wait_for("the events of local1's loss", lambda: (e := output.events()) and len(e) >= 3 and e)
    check_event(events[1], NODE_DOWN, 1, "local1")
    check_event(events[2], PROC_TERMINATED, 1, "local1")
    for event in events[1:3]:
        if event.get("text") != "the daemon of local1 went away" or "exit_code" in event:
            t.fail(f"the events of a lost node carry no exit code and the controller's reason: {event}")
    t.log("the daemon of local1 killed: NODE_DOWN for local1, then PROC_TERMINATED for rank 1")
    time.sleep(0.5)  # what else comes of local1's loss (its rank killed by bellows run): no event
    if len(output.events()) != 3:
        t.fail(f"expected 3 events so far, the tool printed {output.events()}")

    # 3. The job ends.
    (out / "stop").touch()
    try:
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail("the job did not end within 60 s")
    try:
        tool.wait(timeout=30)
    except subprocess.TimeoutExpired:
        t.fail(f"the tool did not exit within 30 s of the job's end; it printed {output.raw}")
    output._thread.join(timeout=5)
    tool_err = tool.stderr.read()
    if tool.returncode != 0:
        t.fail(f"the tool exited {tool.returncode} (3: no {JOB_END}): {tool_err!r}; it printed {output.raw}")
    events = output.events()
    if [e["event"] for e in events] != [lost["event"], NODE_DOWN, PROC_TERMINATED, JOB_END]:
        t.fail(f"the tool printed {[e['event'] for e in events]}, expected "
               f"{[lost['event'], NODE_DOWN, PROC_TERMINATED, JOB_END]}: {events}")
    check_event(events[3], JOB_END, None, None)
    if events[3].get("text") != "the job ended":
        t.fail(f"{JOB_END} does not carry the controller's reason: {events[3]}")
    t.log(f"the job ended: {JOB_END} for {job_id}")
    if job.returncode != 0:
        t.fail(f"bellows run ended with {job.returncode}: {err[-2000:]}")
    # The deaths the test caused, as the daemons and the controller saw them.
    t.check_logs("latest", err, allowed=["ended without leaving the job", "the rank launcher"])
    del t.fail
    t.passed(job_dir)


if __name__ == "__main__":
    main()
