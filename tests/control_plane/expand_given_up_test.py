#!/usr/bin/env python3
"""End-to-end test of an expand given up because the rank it adds is lost, on the local backend
with real processes: `bellows run --nodes 2:3 --pool 3` of a GEMM (emulated device at 1 GFLOP/s
per rank, computing, so the result is exact), and an operator's `bellows resize +1`.

How the joining rank is lost, deterministically: every process of the job runs with
`--preload` (tests/support/joiner_dies_at_confirmation.c) in LD_PRELOAD. A rank the expand adds
(BELLOWS_JOIN_RESIZE in its environment names a resize, not the job's start) SIGKILLs itself in its first MPI_Ibarrier: the barrier that
confirms the grown communicator, posted once the accept and merge are done and before the new
rank's setup (docs/recovery.md, "A loss during the expand itself", phase `join`). No other process
or call is touched, and nothing of Bellows knows of the library.

Checked: the event log's refusal of the expand, "the job refused the resize: expand by 1 given
up: ranks {2} were lost while the new ranks of the expand joined ... only ranks the expand was
adding were lost ..."; the resize's node withdrawn and released (`bellows status` shows the job
on its 2 nodes with no resize under way while it runs on); the job finishes every iteration on 2
ranks, verified; `bellows run` exits 0; the pool's 3 nodes are free at the end; no process of
the job is left; no warning or error in the logs but the joining rank's death.

  expand_given_up_test.py --bellows PATH --app PATH(gemm) --preload PATH(.so)
Prints "expand_given_up: PASS" or "expand_given_up: FAIL: why".
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402
from procfs import bellowsd_pid  # noqa: E402

ITERATIONS = 24
RESIZE_AT_ITERATION = 2
EXPECTED_REFUSAL = ("the job refused the resize: expand by 1 given up: ranks {2} were lost while the new "
                    "ranks of the expand joined (the accept and merge, their setup), before every member "
                    "confirmed the grown communicator: only ranks the expand was adding were lost: the "
                    "expand is given up, and the ranks from before it carry on on their communicator, "
                    "nothing rolled back (")


def main():
    t = LocalJobTest("expand_given_up",
                     lambda parser: parser.add_argument("--preload", required=True,
                                                        help="the joiner_dies_at_confirmation library"))
    t.env["LD_PRELOAD"] = os.path.realpath(t.args.preload)
    # Under the asan preset the sanitizer's runtime would otherwise insist on coming first.
    t.env["ASAN_OPTIONS"] = ":".join(filter(None, [t.env.get("ASAN_OPTIONS"), "verify_asan_link_order=0"]))
    t.log(f"job files in {t.run_dir}")
    job = t.start("--nodes", "2:3", "--pool", "3", "--quiet", "--",
                  t.args.app, "--n", "768", "--tile", "128", "--iterations", str(ITERATIONS),
                  "--kernel", "emulated", "--emulated-gflops", "1", "--emulated-compute", "on", "--verify")

    def failing(why):
        t.kill_all(job)
        LocalJobTest.fail(t, why)

    t.fail = failing
    try:
        t.wait_for(job, f"iteration {RESIZE_AT_ITERATION} on 2 ranks",
                   lambda: (s := t.status_with_rank_pids(2)) and s["iteration"] >= RESIZE_AT_ITERATION, seconds=90)
        r = t.bellows("resize", "+1", "--reason", "a node whose rank is lost as it joins")
        if r.returncode != 0:
            t.fail(f"bellows resize +1: {r.returncode} {r.stdout!r} {r.stderr!r}")

        def refusal():
            lines = [e for e in t.events() if e["kind"] == "expand" and e["resize"] == 1 and e["refused"] is False
                     and e["to"] != "committed" and e["detail"].startswith("the job refused the resize")]
            return lines[0] if lines else None

        refused = t.wait_for(job, "the job's refusal of the expand in the event log", refusal, seconds=60,
                             why_not=lambda: f": resize 1 went {[(e['event'], e['to']) for e in t.events() if e['resize'] == 1]}")
        if not refused["detail"].startswith(EXPECTED_REFUSAL):
            t.fail(f"the refusal reads {refused['detail']!r}, expected it to begin {EXPECTED_REFUSAL!r}")
        t.log(f"refused: {refused['detail']!r} ({refused['event']} {refused['from']} -> {refused['to']})")

        def settled():
            s = t.status()
            return s if s and s["active_resize"] is None and len(s["nodes"]) == 2 and s["ranks"] == 2 else None

        status = t.wait_for(job, "the job back on 2 nodes with no resize under way", settled, seconds=30,
                            why_not=lambda: f": last status {t.status()}")
        if job.poll() is not None:
            t.fail("the job ended before its status could be read after the refusal")
        t.log(f"after the refusal, at iteration {status['iteration']}: nodes {status['nodes']}, "
              f"ranks {status['ranks']}")
        # The resize's node released while the job runs on: its daemon stopped, the node free.
        t.wait_for(job, "local2's daemon stopped", lambda: bellowsd_pid(t.job_dir(), "local2") is None, seconds=10)

        def pool_nodes():
            with open(t.pool_file) as f:
                return json.load(f)["nodes"]

        t.wait_for(job, "local2 free in the pool while the job runs", lambda: pool_nodes()[2] == "", seconds=10,
                   why_not=lambda: f": the pool's nodes {pool_nodes()}")
        out, err = job.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within 180 s of the refusal")
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}, expected 0; stderr {err[-2000:]!r}")
    report = t.report_after_loss(out, err, first_rank_lost=False)
    if report.get("verified") is not True:
        t.fail(f"the job's result is not verified: residual {report.get('residual')}")
    sizes = [i["ranks"] for i in report["iterations"]]
    if len(sizes) != ITERATIONS or set(sizes) != {2} or report["ranks"] != 2:
        t.fail(f"iterations ran on {sizes} ranks (job of {report['ranks']}), expected {ITERATIONS} iterations on 2")
    resizes = report.get("resizes", [])
    if (len(resizes) != 1 or resizes[0]["lost"] != [2] or resizes[0]["to_ranks"] != 2
            or not resizes[0].get("given_up", "").startswith("expand by 1 given up: ranks {2} were lost")):
        t.fail(f"the report's resizes are {resizes}, expected one expand given up that lost rank 2")
    events = t.events()
    path = [(e["event"], e["from"], e["to"]) for e in events if e["resize"] == 1]
    t.log(f"resize 1 went {path}")
    stamps = {e["event"]: e["time"] for e in events if e["resize"] == 1}
    t.log(f"resize 1 asked at {stamps.get('request')}, ranks added at {stamps.get('daemons_ready')}, refused at "
          f"{stamps.get('job_refused')}, its node released at {stamps.get('release_done')}")
    if any(to == "committed" for _, _, to in path) or path[-2:] != [
            ("job_refused", refused["from"], "aborting"), ("release_done", "aborting", "aborted")]:
        t.fail(f"resize 1 went {path}, expected it to end refused by the job, then its node released")
    # The joining rank was never a member: its death is no failure of the job. Its daemon may
    # see it die before the job's refusal comes (the expand is then called off first:
    # reconfiguring -> cancelling) or after (a refused word of a node no longer the job's).
    failures = [(e["event"], e["to"], e["detail"]) for e in events if e["kind"] == "failure" and not e["refused"]]
    if failures:
        t.fail(f"the joining rank's death was taken for a failure of the job: {failures}")
    stray = [e["detail"] for e in events if e["refused"] and "local2" not in e["detail"]]
    if stray:
        t.fail(f"refused events that are not about the joining node: {stray}")
    with open(t.pool_file) as f:
        pool = json.load(f)
    if pool["nodes"] != ["", "", ""] or pool["waiting"]:
        t.fail(f"the pool's 3 nodes are not free at the end: {pool}")
    t.check_logs("latest", err)
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
