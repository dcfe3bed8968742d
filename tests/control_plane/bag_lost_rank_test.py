#!/usr/bin/env python3
"""End-to-end test of the bag example losing a rank under `bellows run` on the local backend:
3 nodes, one rank each, the sweep's tasks distributed by Dtree on the emulated device.

Once the job reported a few iterations, and after a further random delay (so that the kill
lands at a moment the test does not choose: inside a run of the bag, or between two), the rank
of the last node is killed with SIGKILL. The survivors' TaskBag notices it, agrees on who is
lost, rebuilds the communicator and re-runs what the lost rank had not finished; the job carries
on on the survivors' communicator (ElasticSession::adopt_survivors) and reports its recovery.
Checked: `bellows run` exits 0, the sweep is verified (the digests' sum and the count of tasks
run equal a failure-free sweep's: every task ran exactly once), an iteration names the lost
rank, the later ones ran on 2 ranks, the event log's failure goes detected ... recovered and
names the rank and its node, no warning or error in the logs but the lost rank's, no process
left.

With `--victim first` the rank killed is the job's first (rank 0, the process `bellows run`
started): the survivors carry on as ranks 0 and 1, `bellows run` waits for them and exits 0,
and the job's report is in the log of the new first rank's node.

BELLOWS_TEST_SEED fixes the delay; the seed is printed.

  bag_lost_rank_test.py --bellows PATH --app PATH [--victim last|first]
Prints "NAME: PASS" or "NAME: FAIL: why", NAME bag_lost_rank or bag_lost_first_rank.
"""
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

TASKS = 60000
ITERATIONS = 60
FIRST_KILL_ITERATION = 3
LONGEST_DELAY_SECONDS = 1.5


def main():
    def options(parser):
        parser.add_argument("--victim", choices=["last", "first"], default="last")

    t = LocalJobTest("bag_lost_rank", options)
    first = t.args.victim == "first"
    t.name = "bag_lost_first_rank" if first else "bag_lost_rank"
    seed = int(os.environ.get("BELLOWS_TEST_SEED", random.SystemRandom().randrange(1 << 30)))
    delay = random.Random(seed).uniform(0.0, LONGEST_DELAY_SECONDS)
    t.log(f"seed {seed} (BELLOWS_TEST_SEED): the kill comes {delay:.3f} s after iteration "
          f"{FIRST_KILL_ITERATION} was reported")
    # 60 iterations of 1,000 tasks of 200 us on average: about 0.07 s each on 3 ranks.
    job = t.start("--nodes", "3:3", "--pool", "3", "--quiet", "--",
                  t.args.app, "--tasks", str(TASKS), "--iterations", str(ITERATIONS),
                  "--kernel", "emulated", "--emulated-gflops", "5", "--verify", "--quiet")
    try:
        status = t.wait_for(job, f"iteration {FIRST_KILL_ITERATION} with 3 ranks",
                            lambda: (lambda s: s if s and s["iteration"] >= FIRST_KILL_ITERATION else None)(
                                t.status_with_rank_pids(3)),
                            seconds=90)
        victim = (min if first else max)(status["processes"], key=lambda p: p["rank"])
        if (victim["rank"] == 0) != first:
            t.fail(f"no rank {'0' if first else 'but the first'} to kill: {status['processes']}")
        time.sleep(delay)
        if job.poll() is not None:
            t.fail(f"the job ended before the kill: {job.stderr.read()[-2000:]}")
        os.kill(victim["pid"], signal.SIGKILL)
        t.log(f"killed rank {victim['rank']} (pid {victim['pid']}) on {victim['node']}, "
              f"{delay:.3f} s after iteration {status['iteration']} was reported")
        out, err = job.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within 120 s of the kill")
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}, expected 0; stderr {err[-3000:]!r}")
    report = t.report_after_loss(out, err, first_rank_lost=first)
    if report.get("verified") is not True or report.get("tasks_run") != TASKS:
        t.fail(f"the sweep is not verified: verified {report.get('verified')}, "
               f"{report.get('tasks_run')} of {TASKS} tasks run, digest {report.get('digest')}")
    # The first rank records each iteration's report; a new first rank, from the loss on.
    rounds = report["iterations"]
    numbers = [r["iteration"] for r in rounds]
    sizes = [r["ranks_in_job"] for r in rounds]
    lossy = [r for r in rounds if r.get("lost_ranks")]
    if len(lossy) != 1 or lossy[0]["lost_ranks"] != [victim["rank"]]:
        t.fail(f"iterations that lost ranks: {[(r['iteration'], r['lost_ranks']) for r in lossy]}, "
               f"expected one that lost rank {victim['rank']}")
    loss = lossy[0]
    first_reported = loss["iteration"] if first else 1
    if numbers != list(range(first_reported, ITERATIONS + 1)) or report["ranks"] != 2:
        t.fail(f"the report has iterations {numbers} (job of {report['ranks']} ranks), expected "
               f"{first_reported} to {ITERATIONS} on 2 ranks")
    if any(size != (2 if n >= loss["iteration"] else 3) for n, size in zip(numbers, sizes)):
        t.fail(f"iterations {numbers[0]}.. ran on {sizes} ranks, expected 3 before iteration "
               f"{loss['iteration']} and 2 from it on")
    recovery = loss["recoveries"][0]
    t.log(f"the sweep finished verified; iteration {loss['iteration']} lost rank {victim['rank']}: "
          f"{recovery['kept_tasks']} tasks kept, {recovery['rerun_tasks']} re-run, recovered in "
          f"{recovery['seconds']:.3f} s; the run took {loss['seconds']:.3f} s, the others on 2 ranks a median "
          f"{statistics.median(r['seconds'] for r in rounds if r['ranks_in_job'] == 2 and r is not loss):.3f} s")

    failures = [e for e in t.events() if e["kind"] == "failure" and not e["refused"]]
    phases = [e["to"] for e in failures]
    if "detected" not in phases or "recovered" not in phases:
        t.fail(f"the event log's failure lines go through {phases}, expected detected ... recovered")
    detected = next(e for e in failures if e["to"] == "detected")
    if f"lost rank {victim['rank']} on {victim['node']}" not in detected["detail"]:
        t.fail(f"the failure does not name rank {victim['rank']} on {victim['node']}: {detected['detail']!r}")
    recovered = next(e for e in failures if e["to"] == "recovered")
    if "nothing rolled back" not in recovered["detail"]:
        t.fail(f"the recovery does not say the job carried on without rolling back: {recovered['detail']!r}")
    t.log(f"failure lines: {[(e['event'], e['to']) for e in failures]}; recovered: {recovered['detail']!r}")
    t.check_logs("latest", err, allowed=["ended without leaving the job", "the rank launcher"])
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
