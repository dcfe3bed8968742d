"""What the end-to-end tests of `bellows run` on the local backend share: their command line
(--bellows, --app), a private directory holding the job files and the host's local pool (so
that a test never meets another's jobs), the environment, `bellows` subcommands, the event
log, the final checks (no process of the job left, no unexpected warning in its logs), and how
a test says "NAME: PASS" or "NAME: FAIL: why".
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from log_lines import job_log_problems
from procfs import processes_mentioning


class LocalJobTest:
    def __init__(self, name, configure=None):
        """`configure(parser)` adds the test's own options."""
        self.name = name
        parser = argparse.ArgumentParser()
        parser.add_argument("--bellows", required=True)
        parser.add_argument("--app", required=True)
        if configure is not None:
            configure(parser)
        self.args = parser.parse_args()
        self.top = tempfile.mkdtemp(prefix=f"bellows-{name.replace('_', '-')}-test-")
        self.run_dir = self.top
        self.pool_file = os.path.join(self.top, "local-pool.json")
        self.env = dict(os.environ, BELLOWS_RUN_DIR=self.run_dir, BELLOWS_LOCAL_POOL=self.pool_file,
                        OPENBLAS_NUM_THREADS="1")

    def log(self, text):
        print(f"{self.name}: {text}", flush=True)

    def fail(self, why):
        self.log(f"FAIL: {why}")
        sys.exit(1)

    def use_run_dir(self, run_dir):
        """Keeps the job files in `run_dir` (inside the test's directory) instead."""
        os.makedirs(run_dir, exist_ok=True)
        self.run_dir = run_dir
        self.env["BELLOWS_RUN_DIR"] = run_dir

    def write(self, name, text):
        path = os.path.join(self.top, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def bellows(self, *args, env=None):
        return subprocess.run([self.args.bellows, *args], env=env or self.env, capture_output=True,
                              text=True, timeout=30)

    def start(self, *args):
        """`bellows run ARGS` in the background."""
        return subprocess.Popen([self.args.bellows, "run", *args], env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def status(self, job="latest"):
        """`bellows status JOB --json`, or None while the controller does not answer."""
        r = self.bellows("status", job, "--json")
        return json.loads(r.stdout) if r.returncode == 0 else None

    def status_with_rank_pids(self, ranks, job="latest"):
        """`bellows status` once it lists `ranks` processes, each with its pid; None before."""
        status = self.status(job)
        if status and len(status.get("processes", [])) == ranks and all(p["pid"] for p in status["processes"]):
            return status
        return None

    def report_after_loss(self, out, err, first_rank_lost):
        """The job's JSON report (its last line that starts with "{") after a rank was lost. When
        the first rank was lost, the new first rank printed it into its node's log (its
        daemon's output), and `bellows run` (`err`, its stderr) must say it carried on."""
        lines = [line for line in out.strip().splitlines() if line.startswith("{")]
        if first_rank_lost:
            if lines:
                self.fail(f"a report on bellows run's output although its first rank was killed: {lines[-1][:200]}")
            for log in sorted(Path(self.job_dir(), "nodes").glob("*/bellowsd.log")):
                lines += [line for line in log.read_text().splitlines() if line.startswith('{"app"')]
            if "the job's first rank (pid" not in err or "the job goes on on its other nodes" not in err:
                self.fail(f"bellows run did not say it carried on without the first rank: {err[-1500:]!r}")
        if not lines:
            self.fail(f"the job printed no report; stdout {out[-1500:]!r} stderr {err[-1500:]!r}")
        return json.loads(lines[-1])

    def job_dir(self, job="latest"):
        return os.path.realpath(os.path.join(self.run_dir, job))

    def events(self, job="latest"):
        with open(os.path.join(self.job_dir(job), "events.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]

    def check_logs(self, job, run_stderr, allowed=()):
        """No warning or error in `bellows run`'s stderr nor in a daemon's log: the ranks detach
        at their program's end, so no daemon saw a rank die."""
        problems = job_log_problems(self.job_dir(job), run_stderr, allowed)
        if problems:
            self.fail("unexpected warnings or errors in the job's logs:\n  " + "\n  ".join(problems))

    def wait_for(self, job, what, check, seconds=30, poll=0.05, why_not=lambda: ""):
        """Calls `check` every `poll` seconds until it returns something true, and returns that;
        fails when `job` (a `bellows run`) ends first, or after `seconds` (the text of
        `why_not()` appended)."""
        deadline = time.time() + seconds
        while time.time() < deadline:
            value = check()
            if value:
                return value
            if job.poll() is not None:
                self.fail(f"the job ended while waiting for {what}: {job.stderr.read()[-2000:]}")
            time.sleep(poll)
        self.fail(f"no {what} within {seconds} s{why_not()}")

    def kill_all(self, *started):
        """Kills `started` (Popen objects; None is skipped) and every process of the test's
        jobs, which killing `bellows run` alone leaves behind."""
        for process in started:
            if process is not None:
                process.kill()
        for pid in processes_mentioning(self.top):
            try:
                os.kill(pid, 9)
            except OSError:
                pass

    def fail_hung(self, job, why):
        """Kills `job` (a `bellows run` that did not end in time) and every process of the
        test's jobs, then fails with `why`."""
        self.kill_all(job)
        self.fail(why)

    def passed(self, *job_dirs):
        """No process of the jobs is left; the test's directory goes; PASS."""
        time.sleep(0.5)
        for job_dir in job_dirs:
            left = processes_mentioning(job_dir)
            if left:
                self.fail(f"processes of the job are left: {left}")
        shutil.rmtree(self.top)  # kept when the test fails: fail() exits before this
        self.log("PASS")
