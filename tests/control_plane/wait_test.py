#!/usr/bin/env python3
"""End-to-end test of `bellows wait` on the local backend: it returns the job's exit status, as
the controller that ended the job recorded it in job.json, and says why.

- A program that exits 3 under `bellows run`: `bellows run` exits 3, job.json records the end
  with exit status 3, and `bellows wait` returns 3, printing
  `bellows wait: job J ended at T (its first rank exited with status 3): exit status 3`.
- The batch script's form, `bellows run ... -- PROG || bellows wait JOB`, fails with 3.
- A GEMM that finishes verified: `bellows wait` returns 0 and says so.
- job.json as an older `bellows` wrote it (no exit_status, no companions, no expand_strategy):
  `bellows wait` reads it, returns 0 and says that the exit status was not recorded.
No process of the jobs is left.

  wait_test.py --bellows PATH --app PATH (the GEMM example)
Prints "wait: PASS" or "wait: FAIL: why".
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

ENDED = r"bellows wait: job (local-\d+) ended at \S+ \((.*)\): exit status (\d+)"


def run_job(t, program):
    """`bellows run` of `program` on one node to its end; returns its exit status and stderr."""
    job = t.start("--nodes", "1:1", "--pool", "1", "--quiet", "--", *program)
    try:
        _, err = job.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        job.kill()
        t.fail(f"bellows run of {program} did not end within 120 s")
    return job.returncode, err


def wait(t, expected_status, expected_how):
    """`bellows wait latest` of an ended job: its exit status and what it says."""
    waited = t.bellows("wait", "latest")
    line = waited.stderr.strip()
    m = re.fullmatch(ENDED, line)
    if waited.returncode != expected_status or not m or m.group(2) != expected_how or \
            int(m.group(3)) != expected_status:
        t.fail(f"bellows wait: exit {waited.returncode}, stderr {waited.stderr!r}; expected exit {expected_status} "
               f"and 'ended at T ({expected_how}): exit status {expected_status}'")
    t.log(f"bellows wait returned {waited.returncode}: {line}")


def main():
    t = LocalJobTest("wait")
    t.log(f"job files in {t.run_dir}")

    code, err = run_job(t, ["/bin/sh", "-c", "exit 3"])
    if code != 3:
        t.fail(f"bellows run of a program exiting 3 exited {code}: {err[-1500:]}")
    record = json.loads(Path(t.job_dir(), "job.json").read_text())
    if record.get("exit_status") != 3 or record["end"] != "its first rank exited with status 3" or not record["ended_at"]:
        t.fail(f"job.json after the program exited 3: exit_status {record.get('exit_status')!r}, end {record['end']!r}, "
               f"ended_at {record['ended_at']!r}")
    wait(t, 3, "its first rank exited with status 3")

    # What a batch script runs, so that a killed `bellows run` does not end the job.
    bellows = shlex.quote(t.args.bellows)
    script = f"{bellows} run --nodes 1:1 --pool 1 --quiet -- /bin/sh -c 'exit 3' || {bellows} wait latest"
    batch = subprocess.run(["/bin/sh", "-c", script], env=t.env, capture_output=True, text=True, timeout=120)
    if batch.returncode != 3 or not re.search(ENDED, batch.stderr):
        t.fail(f"the batch script's form exited {batch.returncode}, expected 3: {batch.stderr[-1500:]}")
    t.log("`bellows run ... || bellows wait latest` of a program exiting 3 exits 3")

    code, err = run_job(t, [t.args.app, "--n", "512", "--tile", "256", "--iterations", "1", "--verify"])
    if code != 0:
        t.fail(f"bellows run of a GEMM exited {code}: {err[-1500:]}")
    wait(t, 0, "its first rank exited with status 0")

    # job.json as an older bellows left it: the fields added since are absent.
    path = Path(t.job_dir(), "job.json")
    record = json.loads(path.read_text())
    for key in ("exit_status", "companions", "expand_strategy"):
        del record[key]
    path.write_text(json.dumps(record))
    waited = t.bellows("wait", "latest")
    expected = (f"bellows wait: job {record['job']} ended at {record['ended_at']} (its first rank exited with status "
                f"0); its exit status was not recorded ({path} was written by an older bellows): returning 0")
    if waited.returncode != 0 or waited.stderr.strip() != expected:
        t.fail(f"bellows wait on an older job.json: exit {waited.returncode}, stderr {waited.stderr!r}; expected "
               f"exit 0 and {expected!r}")
    t.log("an older job.json: " + waited.stderr.strip())
    t.passed(t.top)


if __name__ == "__main__":
    main()
