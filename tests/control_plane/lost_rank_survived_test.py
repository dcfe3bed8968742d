#!/usr/bin/env python3
"""End-to-end test of a job that loses a rank and carries on, on the local backend with real
processes: `bellows run` of a GEMM on 3 nodes with buddy checkpoints at every iteration
(emulated device at 1 GFLOP/s per rank, computing, so the result is exact).

Once a few iterations ran, the rank of the last node is killed with SIGKILL. The survivors
notice it through MPI, agree on who is lost, rebuild their communicator and roll back to the
checkpoint (ElasticSession::recover); the job finishes all its iterations with a verified
result, `bellows run` exits 0, and the event log shows the failure detected, the survivors
told, and the job recovered. Nothing of the job is left.

With `--victim silent` nothing is killed: the last node's daemon and rank are stopped (SIGSTOP),
as a node whose network is cut goes silent. MPI fails nothing then; the controller's heartbeats
find the daemon gone within seconds, the node is lost (`node_lost`), its rank is killed as one
no daemon manages, and the survivors recover as after a death.

With `--heartbeat-timeout S` (with `--victim silent`) the job's policy sets
`recovery.heartbeat_timeout` to S seconds: the node must be found lost within S and its interval
plus 2 s, sooner than the default 5 s allows; the job, below its nodes.min of 3, then grows back
to 3 ranks.

With `--victim first` the rank killed is the job's first (rank 0, the process `bellows run`
started): the survivors recover as rank 0 and 1, `bellows run` goes on until their ranks end and
exits 0, and the job's report is in the log of the new first rank's node.

With `--on-node-loss shrink` (no policy: what a job without one does) the job ends on 2 ranks.
With `--on-node-loss replace` (a policy saying `recovery: {on_node_loss: replace}`), once the job
has recovered the controller asks for a node in place of the lost one: an expand by the policy
whose reason names the lost node and the failure, which completes, and the job ends on 3 ranks
again.

  lost_rank_survived_test.py --bellows PATH --app PATH [--on-node-loss shrink|replace]
                             [--victim last|first|silent] [--heartbeat-timeout S]
Prints "NAME: PASS" or "NAME: FAIL: why", NAME lost_rank_survived, lost_rank_replaced,
lost_first_rank_survived, lost_node_silent_survived or lost_node_silent_heartbeat.
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
from procfs import bellowsd_pid  # noqa: E402

ITERATIONS = 14
KILL_AT_ITERATION = 3


POLICY_REPLACE = """\
nodes:
  min: 2
  max: 3
recovery:
  on_node_loss: replace
"""


POLICY_HEARTBEAT = """\
nodes:
  min: 2
  max: 3
recovery:
  on_node_loss: shrink
  heartbeat_timeout: {ms}ms
"""


def main():
    def options(parser):
        parser.add_argument("--on-node-loss", choices=["shrink", "replace"], default="shrink")
        parser.add_argument("--victim", choices=["last", "first", "silent"], default="last")
        parser.add_argument("--heartbeat-timeout", type=float,
                            help="seconds: recovery.heartbeat_timeout of the job's policy (--victim silent)")

    t = LocalJobTest("lost_rank", options)
    replace = t.args.on_node_loss == "replace"
    first = t.args.victim == "first"
    silent = t.args.victim == "silent"
    heartbeat = t.args.heartbeat_timeout
    t.name = ("lost_rank_replaced" if replace else "lost_first_rank_survived" if first
              else "lost_node_silent_heartbeat" if silent and heartbeat is not None
              else "lost_node_silent_survived" if silent else "lost_rank_survived")
    if heartbeat is not None and (not silent or replace):
        t.fail("--heartbeat-timeout goes with --victim silent and --on-node-loss shrink")
    policy = ["--policy", t.write("replace.yaml", POLICY_REPLACE)] if replace else []
    if heartbeat is not None:
        policy = ["--policy", t.write("heartbeat.yaml", POLICY_HEARTBEAT.format(ms=round(heartbeat * 1000)))]
    # Under a policy, `--nodes 3:3` is its nodes.min: the job grows back to 3 once recovered.
    final_ranks = 3 if replace or heartbeat is not None else 2
    job = t.start("--nodes", "3:3", "--pool", "3", *policy, "--quiet", "--",
                  t.args.app, "--n", "768", "--tile", "128", "--iterations", str(ITERATIONS),
                  "--kernel", "emulated", "--emulated-gflops", "1", "--emulated-compute", "on",
                  "--checkpoint", "on", "--checkpoint-every", "1", "--verify")
    try:
        deadline = time.time() + 90
        status = None
        while time.time() < deadline:
            status = t.status_with_rank_pids(3)
            if status and status["iteration"] >= KILL_AT_ITERATION:
                break
            if job.poll() is not None:
                t.fail(f"the job ended before iteration {KILL_AT_ITERATION}: {job.stderr.read()[-2000:]}")
            time.sleep(0.05)
        else:
            t.fail_hung(job, f"iteration {KILL_AT_ITERATION} with 3 ranks not reported within 90 s; last {status}")
        victim = (min if first else max)(status["processes"], key=lambda p: p["rank"])
        if (victim["rank"] == 0) != first:
            t.fail(f"no rank {'0' if first else 'but the first'} to kill: {status['processes']}")
        if silent:
            daemon = bellowsd_pid(t.job_dir(), victim["node"])
            if daemon is None:
                t.fail(f"no bellowsd of {victim['node']} found")
            stopped_at = time.time()
            os.kill(victim["pid"], signal.SIGSTOP)
            os.kill(daemon, signal.SIGSTOP)
            t.log(f"stopped rank {victim['rank']} (pid {victim['pid']}) and the daemon of {victim['node']} "
                  f"(pid {daemon}) at iteration {status['iteration']}")
        else:
            os.kill(victim["pid"], signal.SIGKILL)
            t.log(f"killed rank {victim['rank']} (pid {victim['pid']}) on {victim['node']} at iteration "
                  f"{status['iteration']}")
        out, err = job.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within 180 s of the kill")
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}, expected 0; stderr {err[-2000:]!r}")
    report = t.report_after_loss(out, err, first_rank_lost=first)
    if report.get("verified") is not True:
        t.fail(f"the job's result is not verified: residual {report.get('residual')}")
    sizes = [i["ranks"] for i in report["iterations"]]
    if len(sizes) != ITERATIONS or 2 not in sizes or sizes[-1] != final_ranks or report["ranks"] != final_ranks:
        t.fail(f"iterations ran on {sizes} ranks (job of {report['ranks']}), expected {ITERATIONS} "
               f"iterations, some on 2 ranks, ending on {final_ranks}")
    t.log(f"the job finished verified: iterations on {sizes} ranks")

    failures = [e for e in t.events() if e["kind"] == "failure" and not e["refused"]]
    phases = [e["to"] for e in failures]
    if "detected" not in phases or "recovered" not in phases:
        t.fail(f"the event log's failure lines go through {phases}, expected detected ... recovered")
    detected = next(e for e in failures if e["to"] == "detected")
    if silent:
        if detected["event"] != "node_lost":
            t.fail(f"the silent node's failure is {detected['event']}, expected node_lost")
        stamp = datetime.strptime(detected["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
        silence = stamp.timestamp() - stopped_at
        timeout = heartbeat if heartbeat is not None else 5.0
        # The timeout plus at most its interval (a fifth of it); for a timeout set shorter than
        # the default, sooner than the default could have found the node.
        earliest, latest = (0.8 * timeout, 1.2 * timeout + 2.0) if heartbeat is not None else (4.0, 12.0)
        if not earliest <= silence <= latest:
            t.fail(f"the silent node was found lost {silence:.1f} s after it stopped, expected the "
                   f"controller's heartbeat timeout ({timeout:g} s) plus at most its interval "
                   f"({earliest:.1f} to {latest:.1f} s)")
        t.log(f"the silent node was found lost {silence:.1f} s after it stopped")
    if f"lost rank {victim['rank']} on {victim['node']}" not in detected["detail"]:
        t.fail(f"the failure does not name rank {victim['rank']} on {victim['node']}: {detected['detail']!r}")
    t.log(f"failure lines: {[(e['event'], e['to']) for e in failures]}")
    # Per failure, in the event log and the report: who rolled back and how much was redone.
    recovered = next(e for e in failures if e["to"] == "recovered")
    if ("ranks {0, 1, 2} of teams {0} rolled back, " not in recovered["detail"]
            or "completed iterations redone" not in recovered["detail"]):
        t.fail(f"the recovery does not say every rank rolled back and the iterations redone: {recovered['detail']!r}")
    recoveries = report.get("recoveries", [])
    if len(recoveries) != 1 or recoveries[0]["ranks_rolled_back"] != [0, 1, 2] \
            or recoveries[0]["teams_rolled_back"] != [0] or recoveries[0]["lost"] != [victim["rank"]]:
        t.fail(f"the report's recoveries are {recoveries}, expected one that lost rank {victim['rank']} and "
               f"rolled back ranks [0, 1, 2] of team 0")
    if recoveries[0].get("log_bytes_for_replay") != 0:  # every rank rolled back: no log serves a replay
        t.fail(f"the report's recovery kept {recoveries[0].get('log_bytes_for_replay')} log bytes for the "
               f"replay with every rank rolled back, expected 0: {recoveries[0]}")
    redone = recoveries[0]["iterations_redone"]
    if redone != recoveries[0]["interrupted_iteration"] - 1 - recoveries[0]["rolled_back_to"]:
        t.fail(f"the report's recovery redid {redone} iterations: {recoveries[0]}")
    if not replace:  # a replacement joins knowing no loss: only the survivors count their re-runs
        rerun = sum(r["tasks_rerun"] for r in report["rank_stats"])
        tasks_per_iteration = (768 // 128) ** 3
        if rerun != tasks_per_iteration * redone:
            t.fail(f"the survivors re-ran {rerun} tasks, expected {tasks_per_iteration} x {redone} iterations redone")
    t.log(f"recovered: {recovered['detail']!r}")
    expands = [e for e in t.events() if e["kind"] == "expand"]
    if replace:
        wanted = f"replacing {victim['node']}, lost in failure {detected['resize']} (recovery.on_node_loss: replace)"
        asked = [e for e in expands if e["reason"] == wanted]
        if not asked or asked[0]["requester"] != "policy" or not any(e["to"] == "committed" for e in asked):
            t.fail(f"no completed expand by the policy with reason {wanted!r}: "
                   f"{[(e['reason'], e['to'], e['refused']) for e in expands]}")
        t.log(f"replacement: {[(e['event'], e['to']) for e in asked]}")
    elif heartbeat is not None:
        wanted = "expand by 1: the job has 2 nodes, below nodes.min (3)"
        if not any(e["reason"] == wanted and e["to"] == "committed" for e in expands):
            t.fail(f"no committed expand with reason {wanted!r}: {[(e['reason'], e['to']) for e in expands]}")
    elif expands:
        t.fail(f"an expand without on_node_loss replace: {[(e['reason'], e['to']) for e in expands]}")
    t.check_logs("latest", err, allowed=["ended without leaving the job", "the rank launcher"])
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
