#!/usr/bin/env python3
"""End-to-end test of PMIx_Allocation_request answered in two phases, on the local backend with
real processes: `bellows run` of a GEMM on 1 node (nodes 1:3, no policy), one bellowsd per node,
MPICH ranks, and `bellows-pmix-control` (a PMIx tool in C: PMIx_tool_init with the daemon's
server URI, an event handler for PMIX_NOTIFY_ALLOC_COMPLETE, PMIx_Allocation_request) attached
to the daemon of local0.

1. EXTEND 1 with the request id grow-1: the call returns SUCCESS at once carrying grow-1, then
   PMIX_NOTIFY_ALLOC_COMPLETE comes with grow-1, the resize's id and outcome committed, by which
   time `bellows status` shows the job on 2 nodes with 2 ranks.
2. RELEASE 1 without an id: the daemon gives it one (local0.N), echoed in the reply and the
   event; committed, and the job is back on local0 alone.
3. EXTEND 1 cancelled at once (directive PMIX_ALLOC_REQ_CANCEL naming the request): the cancel
   returns SUCCESS, the event's outcome is cancelled, the job stays on 1 node, no resize is in
   flight, no node is left unreleased, and the event log records the resize's cancel_requested
   and its end aborted.
4. EXTEND 5 (past the job's 3 nodes) is refused at once (NOT-AVAILABLE) and no event follows.
5. PMIx_Job_control terminating the whole job ends it as a SIGTERM to `bellows run` would; the
   event log names the tool and its node as who asked, and nothing of the job is left.

  pmix_allocate_test.py --bellows PATH --app PATH(gemm) --tool PATH(bellows-pmix-control)
Prints "pmix_allocate: PASS" or "pmix_allocate: FAIL: why".
"""
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

PMIX_SUCCESS = 0
PMIX_ERR_NOT_AVAILABLE = -64
PMIX_NOTIFY_ALLOC_COMPLETE = -105


def main():
    t = LocalJobTest("pmix_allocate", lambda p: p.add_argument("--tool", required=True))
    t.log(f"job files in {t.run_dir}")
    # Iterations of about 0.25 s on one rank (emulated device at 8 GFLOP/s), many of them: the
    # job runs until the tool terminates it.
    job = t.start("--nodes", "1:3", "--pool", "3", "--quiet", "--", t.args.app, "--n", "1024", "--tile", "256",
                  "--iterations", "100000", "--kernel", "emulated", "--emulated-gflops", "8")

    def failing(why):
        t.kill_all(job)
        LocalJobTest.fail(t, why)

    t.fail = failing
    status = t.wait_for(job, "the first rank's pid in bellows status", lambda: t.status_with_rank_pids(1), 60)
    job_id = status["job"]
    job_dir = t.job_dir()
    uri = "file:" + os.path.join(job_dir, "nodes", "local0", "uri")

    def tool(*args, seconds=90):
        r = subprocess.run([t.args.tool, "--uri", uri, "--wait", "60", *args], capture_output=True, text=True,
                           timeout=seconds)
        lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        if r.returncode != 0:
            t.fail(f"bellows-pmix-control {' '.join(args)} exited {r.returncode}: {r.stderr!r}; printed {lines}")
        return lines

    def expect_grant(lines, call, request_id, outcome, nodes):
        """The call's SUCCESS with request_id, then its ALLOC_COMPLETE with outcome; returns the
        resize's id and the seconds from the call's return to the event."""
        calls = [line for line in lines if line.get("call") == call]
        events = [line for line in lines if "event" in line]
        if len(calls) != 1 or calls[0]["status"] != PMIX_SUCCESS:
            t.fail(f"{call}: expected one SUCCESS, got {lines}")
        if request_id is not None and calls[0].get("request_id") != request_id:
            t.fail(f"{call}: the reply carries request id {calls[0].get('request_id')!r}, expected {request_id!r}")
        given = calls[0].get("request_id", "")
        if len(events) != 1 or events[0]["code"] != PMIX_NOTIFY_ALLOC_COMPLETE:
            t.fail(f"{call}: expected one PMIX_NOTIFY_ALLOC_COMPLETE, got {lines}")
        event = events[0]
        if event.get("request_id") != given or event.get("outcome") != outcome:
            t.fail(f"{call}: the event names request {event.get('request_id')!r} with outcome "
                   f"{event.get('outcome')!r}, expected {given!r} and {outcome!r}: {event}")
        if not event.get("alloc_id", "").isdigit():
            t.fail(f"{call}: the event names no resize (PMIX_ALLOC_ID): {event}")
        now = t.status()
        if now is None or now["nodes"] != nodes or now["active_resize"] is not None:
            t.fail(f"{call}: after {outcome} bellows status shows {now}, expected nodes {nodes} and no resize")
        return int(event["alloc_id"]), event["time"] - calls[0]["time"]

    # 1. EXTEND with the requester's id.
    grown, seconds = expect_grant(tool("extend", "1", "--req-id", "grow-1"), "extend", "grow-1", "committed",
                                  ["local0", "local1"])
    t.wait_for(job, "the new rank's pid in bellows status", lambda: t.status_with_rank_pids(2), 30)
    t.log(f"extend: resize {grown} committed {seconds:.2f} s after the request returned")

    # 2. RELEASE with an id the daemon gives.
    lines = tool("release", "1")
    given = next((line.get("request_id", "") for line in lines if line.get("call") == "release"), "")
    if not given.startswith("local0."):
        t.fail(f"release: the daemon gave no request id of its node (local0.N): {lines}")
    released, seconds = expect_grant(lines, "release", given, "committed", ["local0"])
    t.log(f"release: request {given}, resize {released} committed {seconds:.2f} s after the request returned")

    # 3. EXTEND cancelled at once.
    lines = tool("extend", "1", "--req-id", "grow-2", "--cancel")
    cancels = [line for line in lines if line.get("call") == "cancel"]
    if len(cancels) != 1 or cancels[0]["status"] != PMIX_SUCCESS:
        t.fail(f"cancel: expected one SUCCESS, got {lines}")
    cancelled, _ = expect_grant(lines, "extend", "grow-2", "cancelled", ["local0"])
    now = t.status()
    if now["unreleased_nodes"] or now["ranks"] != 1:
        t.fail(f"cancel: the job keeps {now['ranks']} rank(s) and unreleased nodes {now['unreleased_nodes']}")
    records = [e for e in t.events() if e["resize"] == cancelled]
    if not any(e["event"] == "cancel_requested" and not e["refused"] and "grow-2" in e["detail"] for e in records):
        t.fail(f"cancel: no cancel_requested naming grow-2 in the event log for resize {cancelled}: {records}")
    if records[-1]["to"] != "aborted":
        t.fail(f"cancel: resize {cancelled} ends {records[-1]['to']}, not aborted: {records}")
    t.log(f"cancel: resize {cancelled} cancelled ({' -> '.join(e['to'] for e in records)})")

    # 4. Past the node range: refused at once, no event.
    lines = tool("extend", "5")
    if len(lines) != 1 or lines[0]["status"] != PMIX_ERR_NOT_AVAILABLE:
        t.fail(f"extend 5: expected NOT-AVAILABLE alone, got {lines}")

    # 5. The whole job terminated.
    lines = tool("terminate", job_id, "all")
    if len(lines) != 1 or lines[0]["status"] != PMIX_SUCCESS:
        t.fail(f"terminate {job_id}:*: expected SUCCESS, got {lines}")
    try:
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail("the job did not end within 60 s of its termination")
    if "terminated by PMIx_Job_control from bellowsd.tool." not in err:
        t.fail(f"bellows run does not say why it stopped: {err[-2000:]}")
    controls = [e for e in t.events() if e["event"] == "job_control"]
    if len(controls) != 1 or controls[0]["refused"] or not controls[0]["reason"].startswith(
            "PMIx_Job_control from bellowsd.tool.") or " on local0: terminate every rank" not in controls[0]["reason"]:
        t.fail(f"the event log does not record the termination with who asked: {controls}")
    t.log(f"terminate: {controls[0]['reason']}; bellows run exited {job.returncode}")
    t.check_logs("latest", err, allowed=["refused (NOT_AVAILABLE)", "the rank launcher"])
    del t.fail
    t.passed(job_dir)


if __name__ == "__main__":
    main()
