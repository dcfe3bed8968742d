#!/usr/bin/env python3
"""End-to-end test of PMIx queries that meet a rank's death, on the local backend with real
processes: `bellows run` of a GEMM on 3 nodes with buddy checkpoints at every iteration, one
bellowsd per node, MPICH ranks.

Once the job runs on 3 ranks, `bellows-pmix-query` (a PMIx tool in C: PMIx_tool_init with a
daemon's server URI, then one PMIx_Query_info per key) attaches to the daemon of each node again
and again, one loop per node. Once every node answered, the rank of the last node is killed with
SIGKILL, and the queries go on until every surviving daemon answered the job's size 2 (the job
recovered on 2 ranks) and 2 s more, or the job ended. Every run of the tool ends within 5 s
(none waits for an answer that never comes: the tool would give up after 10 s) and either exits 0
with every query answered, its job size the job's before (3) or after the loss (2), or exits 1
with an error line that names the tool and says it could not attach (the last node's daemon
stops once its rank is gone, and refuses new tools as it stops). Before the kill every run exits
0 and answers 3; after it, every surviving daemon answers 2. The last node's daemon says who
stopped it and exits within 3 s of its stop signal, the queries in flight answered first
(docs/daemon.md, "Stopping"). The job then finishes verified, no daemon logged a warning but the
rank's loss, and nothing of it (tools included) is left.

  pmix_query_lost_rank_test.py --bellows PATH --app PATH --tool PATH
Prints "pmix_query_lost_rank: PASS" or "pmix_query_lost_rank: FAIL: why".
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

ITERATIONS = 14
# The queries one run of bellows-pmix-query asks and prints.
QUERIES = 15
KILL_AT_ITERATION = 2
# A run of the tool attaches, asks QUERIES queries and detaches in well under a second; one that
# takes this long is hung.
TOOL_SECONDS = 20
# Every run ends within this, the one that met the daemon's stop included; a query in flight
# that the daemon left unanswered would make the tool wait its own 10 s.
RUN_SECONDS = 5
# From the stop signal to the exit of the last node's daemon.
DAEMON_STOP_SECONDS = 3
PMIX_SUCCESS = 0


def main():
    t = LocalJobTest("pmix_query_lost_rank", lambda p: p.add_argument("--tool", required=True))
    job = t.start("--nodes", "3:3", "--pool", "3", "--quiet", "--",
                  t.args.app, "--n", "768", "--tile", "128", "--iterations", str(ITERATIONS),
                  "--kernel", "emulated", "--emulated-gflops", "1", "--emulated-compute", "on",
                  "--checkpoint", "on", "--checkpoint-every", "1", "--verify")
    try:
        status = t.wait_for(job, f"iteration {KILL_AT_ITERATION} with 3 ranks", lambda: (
            s if (s := t.status_with_rank_pids(3)) and s["iteration"] >= KILL_AT_ITERATION else None),
            seconds=90)
        job_dir = t.job_dir(status["job"])
        nodes = status["nodes"]
        victim = max(status["processes"], key=lambda p: p["rank"])
        survivors = [n for n in nodes if n != victim["node"]]
        runs = []  # one entry per run of the tool, from every node's loop
        problems = []  # what a loop found wrong; the test fails on the first
        killed = threading.Event()
        stop = threading.Event()

        def query_loop(node):
            """Runs the tool against `node`'s daemon until told to stop."""
            uri = "file:" + os.path.join(job_dir, "nodes", node, "uri")
            while not stop.is_set() and not problems:
                started = time.time()
                try:
                    r = subprocess.run([t.args.tool, "--uri", uri], capture_output=True, text=True,
                                       timeout=TOOL_SECONDS)
                    after_kill = killed.is_set()  # a run the kill overlapped counts as after it
                except subprocess.TimeoutExpired as e:
                    after_kill = killed.is_set()
                    log = Path(job_dir, "nodes", node, "bellowsd.log")
                    problems.append(f"the tool on {node} did not end within {TOOL_SECONDS} s "
                                    f"({'after' if after_kill else 'before'} the kill); it printed "
                                    f"{(e.stdout or b'')[-600:]!r}; the daemon's log ends "
                                    f"{log.read_text()[-1500:] if log.exists() else 'missing'!r}")
                    return
                size, problem = check_run(node, r, after_kill)
                if not problem and time.time() - started > RUN_SECONDS:
                    problem = (f"a run of the tool on {node} took {time.time() - started:.1f} s "
                               f"({'after' if after_kill else 'before'} the kill), more than "
                               f"{RUN_SECONDS} s: {tool_error(r.stderr)!r}")
                if problem:
                    problems.append(problem)
                    return
                runs.append({"node": node, "after_kill": after_kill, "rc": r.returncode, "size": size,
                             "seconds": time.time() - started, "error": tool_error(r.stderr)})

        loops = [threading.Thread(target=query_loop, args=(node,)) for node in nodes]
        for loop in loops:
            loop.start()
        try:
            # A round of answers from every node before the kill.
            first_round = time.time() + 30
            while not problems and not all(any(r["node"] == n for r in runs) for n in nodes):
                if time.time() > first_round:
                    problems.append(f"not every node's daemon answered within 30 s: {runs}")
                time.sleep(0.01)
            os.kill(victim["pid"], signal.SIGKILL)
            killed.set()
            killed_at = time.time()
            t.log(f"killed rank {victim['rank']} (pid {victim['pid']}) on {victim['node']}")
            settled_at = None
            while not problems and job.poll() is None and time.time() - killed_at < 180:
                answered_two = {r["node"] for r in runs if r["after_kill"] and r["size"] == 2}
                if settled_at is None and set(survivors) <= answered_two:
                    settled_at = time.time()
                    t.log(f"every surviving daemon answered job size 2, {settled_at - killed_at:.1f} s "
                          "after the kill")
                if settled_at is not None and time.time() - settled_at > 2:
                    break
                time.sleep(0.05)
        finally:
            stop.set()
            for loop in loops:
                loop.join()
        if problems:
            t.fail_hung(job, problems[0])
        before = [r for r in runs if not r["after_kill"]]
        if any(r["rc"] != 0 or r["size"] != 3 for r in before):
            t.fail_hung(job, f"a run before the kill did not answer job size 3: {before}")
        after = [r for r in runs if r["after_kill"]]
        answered_two = {r["node"] for r in after if r["size"] == 2}
        if not set(survivors) <= answered_two:
            t.fail_hung(job, f"not every surviving daemon ({survivors}) answered job size 2 after the "
                        f"kill: only {sorted(answered_two)}")
        failed = [r for r in after if r["rc"] != 0]
        t.log(f"{len(runs)} runs of the tool ({len(after)} after the kill, {len(failed)} of them "
              f"ended with a clear error); longest {max(r['seconds'] for r in runs):.2f} s")
        for error in sorted({r["error"] for r in failed}):
            t.log(f"{sum(r['error'] == error for r in failed)} x {error}")
        try:
            out, err = job.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            t.fail_hung(job, "the job did not end within 180 s of the queries")
    except BaseException:
        if job.poll() is None:
            t.kill_all(job)
        raise
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}, expected 0; stderr {err[-2000:]!r}")
    report = t.report_after_loss(out, err, first_rank_lost=False)
    if report.get("verified") is not True:
        t.fail(f"the job's result is not verified: residual {report.get('residual')}")
    t.check_logs(status["job"], err, allowed=["ended without leaving the job", "the rank launcher"])
    check_daemon_stop(t, Path(job_dir, "nodes", victim["node"], "bellowsd.log"))
    t.passed(job_dir)


def check_daemon_stop(t, log_path):
    """The log of the killed rank's daemon says who stopped it and that it exited within
    DAEMON_STOP_SECONDS of the signal."""
    text = log_path.read_text()
    if not re.search(r"^bellowsd: info: received signal 15 \(SIGTERM\) from (pid \d+ \(.+\)|the daemon itself): stopping$", text,
                     re.MULTILINE):
        t.fail(f"{log_path} does not say who sent the stop signal: {text[-1500:]!r}")
    stopped = re.search(r"^bellowsd: info: stopped, ([0-9.]+) s after the stop signal$", text, re.MULTILINE)
    if not stopped:
        t.fail(f"{log_path} does not say that the daemon stopped: {text[-1500:]!r}")
    seconds = float(stopped.group(1))
    if seconds > DAEMON_STOP_SECONDS:
        t.fail(f"the killed rank's daemon stopped {seconds} s after its stop signal, more than "
               f"{DAEMON_STOP_SECONDS} s: {text[-1500:]!r}")
    closed = re.search(r"^bellowsd: info: stopping the PMIx server: (.*)$", text, re.MULTILINE)
    t.log(f"the killed rank's daemon stopped {seconds:.3f} s after its stop signal"
          + (f" ({closed.group(1)})" if closed else ""))


def tool_error(stderr):
    """The tool's own error line in `stderr` (the first that names the tool), or ""."""
    return next((line for line in stderr.splitlines() if line.startswith("bellows-pmix-query: ")), "")


def check_run(node, r, after_kill):
    """(the job size one run of the tool on `node` answered, or None when it ended with a clear
    error, which is allowed only after the kill; what is wrong, or None)."""
    when = "after" if after_kill else "before"
    if r.returncode != 0:
        # PMIx's own "PMIX ERROR: ..." lines may come first; the tool's says what failed.
        if not after_kill or r.returncode != 1 or not tool_error(r.stderr):
            return None, f"the tool on {node} exited {r.returncode} ({when} the kill): {r.stderr!r}"
        if "no answer from the PMIx server" in tool_error(r.stderr):
            return None, f"the daemon of {node} left a call of the tool unanswered: {tool_error(r.stderr)!r}"
        return None, None
    try:
        answers = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        return None, f"the tool on {node} printed no JSON ({e}): {r.stdout[-1000:]!r}"
    queries = {q["name"]: q for q in answers["queries"]}
    if len(queries) != QUERIES:
        return None, f"the tool on {node} answered {len(queries)} queries, expected {QUERIES}: {sorted(queries)}"
    size = queries["job_size"]
    if size["status"] != PMIX_SUCCESS or size["results"].get("pmix.job.size") not in (2, 3):
        return None, f"{node} answered job size {size} ({when} the kill), expected 3 or 2"
    return size["results"]["pmix.job.size"], None


if __name__ == "__main__":
    main()
