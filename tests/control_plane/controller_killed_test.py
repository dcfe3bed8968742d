#!/usr/bin/env python3
"""End-to-end test of a job whose controller dies, on the local backend with real processes:
`bellows run`, one bellowsd per node, MPICH ranks.

A GEMM on 2 nodes runs iterations of about 3.6 s (the emulated device at 1 GFLOP/s per rank).
Once its first iteration ended, `bellows run` is killed with SIGKILL: nothing tells the
daemons. The job runs on at its size and finishes verified (its first rank, which `bellows run`
started, prints the report on the stdout it inherited). Each bellowsd notices that its
controller is gone, says so, serves its node's rank until it ends, then exits with status 0
within a bounded time, saying why; nothing of the job is left.

The test makes itself the subreaper of what `bellows run` started, so that the orphaned daemons
become its children: it reaps them and reads their exit status.

  controller_killed_test.py --bellows PATH --app PATH
Prints "controller_killed: PASS" or "controller_killed: FAIL: why".
"""
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402
from procfs import processes_mentioning  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
# How long after the job's ranks ended every daemon must be gone: the daemon's grace for a
# lost controller (2 s) and its watch (0.1 s), with room for a loaded machine.
DAEMON_EXIT_LIMIT_S = 10.0


def daemon_pids(job_dir):
    """pid -> node of each bellowsd of the job (its command line names the job directory)."""
    out = {}
    for pid in processes_mentioning(job_dir):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0].decode()) == "bellowsd":
            words = [a.decode() for a in argv]
            out[pid] = words[words.index("--node-name") + 1] if "--node-name" in words else "?"
    return out


def reap(statuses):
    """Reaps every child that ended: pid -> (exit status or -signal, when)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        statuses[pid] = (os.waitstatus_to_exitcode(status), time.monotonic())


def main():
    t = LocalJobTest("controller_killed")
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        t.fail(f"prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}")
    t.log(f"job files in {t.run_dir}")
    job = t.start("--nodes", "2:2", "--pool", "2", "--quiet", "--",
                  t.args.app, "--n", "1536", "--tile", "256", "--iterations", "3", "--kernel", "emulated",
                  "--emulated-gflops", "1", "--emulated-compute", "on", "--verify")
    statuses = {}
    try:
        deadline = time.time() + 60
        status = None
        while time.time() < deadline:
            status = t.status()
            if status is not None and status["iteration"] >= 1:
                break
            if job.poll() is not None:
                t.fail(f"the job ended before its first iteration did: {job.stderr.read()[-2000:]}")
            time.sleep(0.05)
        else:
            t.fail(f"no iteration reported within 60 s; last status {status}")
        job_dir = t.job_dir()
        daemons = daemon_pids(job_dir)
        if sorted(daemons.values()) != ["local0", "local1"]:
            t.fail(f"expected the daemons of local0 and local1, found {daemons}")
        os.kill(job.pid, signal.SIGKILL)
        killed = time.monotonic()
        t.log(f"bellows run (pid {job.pid}) killed at iteration {status['iteration']}; daemons "
              + ", ".join(f"{node} pid {pid}" for pid, node in sorted(daemons.items())))
        # The first rank holds the stdout and stderr bellows run had: they end when it does.
        out, err = job.communicate(timeout=120)
        ranks_ended = time.monotonic()
        deadline = ranks_ended + DAEMON_EXIT_LIMIT_S
        while time.monotonic() < deadline and not all(pid in statuses for pid in daemons):
            reap(statuses)
            time.sleep(0.05)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within 120 s of its controller's death")
    if job.returncode != -signal.SIGKILL:
        t.fail(f"bellows run ended with {job.returncode}, expected -9 (killed)")

    report = t.report_after_loss(out, err, first_rank_lost=False)
    if report.get("verified") is not True:
        t.fail(f"the job's result is not verified: residual {report.get('residual')}")
    if report["ranks"] != 2 or any(i["ranks"] != 2 for i in report["iterations"]):
        t.fail(f"the job ran on {[i['ranks'] for i in report['iterations']]} ranks, expected 2 throughout")
    t.log(f"the job finished verified on 2 ranks {ranks_ended - killed:.1f} s after its controller died")

    missing = {pid: node for pid, node in daemons.items() if pid not in statuses}
    if missing:
        t.fail(f"daemons still running {DAEMON_EXIT_LIMIT_S:.0f} s after the job's ranks ended: {missing}")
    for pid, node in sorted(daemons.items()):
        code, when = statuses[pid]
        if code != 0:
            t.fail(f"the daemon of {node} (pid {pid}) ended with {code}, expected 0")
        t.log(f"the daemon of {node} exited 0, {max(0.0, when - ranks_ended):.2f} s after the job's ranks ended")

    endpoint = Path(job_dir, "controller.endpoint").read_text().strip()
    for node in ("local0", "local1"):
        text = Path(job_dir, "nodes", node, "bellowsd.log").read_text()
        said = [line for line in text.splitlines() if endpoint in line and "is gone" in line]
        gone = re.compile(r"bellowsd: warning: the controller at \S+ is gone \(no connection for "
                          rf"[0-9.]+ s\): the ranks of node {node} run on \(\d+ attached, \d+ started "
                          r"here running\); the daemon exits once they end")
        stopped = re.compile(rf"bellowsd: info: the controller at \S+ is gone and no rank of node {node} "
                             r"runs \(no connection for [0-9.]+ s\): stopping")
        if not any(gone.fullmatch(line) for line in said) or not any(stopped.fullmatch(line) for line in said):
            t.fail(f"the daemon of {node} does not say that its controller is gone, then that it "
                   f"stops: {said}")
        t.log(f"{node}: the controller is gone" + " / ".join(line.split(" is gone", 1)[1] for line in said))
    # Warnings the controller's death explains; the ranks detached at their end as usual.
    t.check_logs("latest", err, allowed=["is gone (no connection for"])
    reap(statuses)
    # A killed controller cannot remove the directory of its socket: the test does.
    if endpoint.startswith("ipc://"):
        sockets = os.path.dirname(endpoint[len("ipc://"):])
        if os.path.isdir(sockets):
            shutil.rmtree(sockets)
            t.log(f"removed the killed controller's socket directory {sockets}")
    t.passed(job_dir)


if __name__ == "__main__":
    main()
