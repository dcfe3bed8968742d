#!/usr/bin/env python3
"""End-to-end test of `bellows status` while the job directory names a controller that answers
nothing, as it does between a controller's death and the publication of the endpoint of the one
that takes the job over (docs/slurm.md, "The job's first node"), on the local backend.

A GEMM on one node. Once its rank runs, its `controller.endpoint` is replaced by an
endpoint where nothing listens:
- `bellows status` then fails after its 5 s bound, saying the controller did not answer;
- a `bellows status` started there, with the real endpoint published again 1 s later, follows
  it and answers with the job within FOLLOW_LIMIT_S of its start (it used to wait out the 5 s at
  the endpoint it read first, and fail).
The job then finishes verified, exit status 0; no warning in its logs, nothing left.

  status_follows_endpoint_test.py --bellows PATH --app PATH (the GEMM example)
Prints "status_follows_endpoint: PASS" or "status_follows_endpoint: FAIL: why".
"""
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

# The real endpoint comes back 1 s after the start; `bellows status` looks every 0.2 s.
REPUBLISH_AFTER_S = 1.0
FOLLOW_LIMIT_S = 3.0


def publish(path, endpoint):
    """Replaces the endpoint file at once, as the controller does (write, then rename)."""
    fresh = path.with_name(path.name + ".test")
    fresh.write_text(endpoint + "\n")
    os.replace(fresh, path)


def main():
    t = LocalJobTest("status_follows_endpoint")
    # A GEMM of about 16 s (0.27 GFLOP an iteration on the emulated device at 1 GFLOP/s).
    job = t.start("--nodes", "1:1", "--pool", "1", "--quiet", "--", t.args.app, "--n", "512", "--tile", "128",
                  "--iterations", "60", "--kernel", "emulated", "--emulated-gflops", "1", "--emulated-compute", "on",
                  "--verify")
    try:
        # The daemon read the endpoint and registered, its rank runs: nothing of the job reads
        # controller.endpoint again while it is replaced.
        first = t.wait_for(job, "the job's rank in bellows status", lambda: t.status_with_rank_pids(1))
        endpoint_file = Path(t.job_dir(), "controller.endpoint")
        endpoint = endpoint_file.read_text().strip()
        gone = endpoint.rsplit("/", 1)[0] + "/gone.sock"
        t.log(f"job {first['job']} answers at {endpoint}; publishing {gone}, where nothing listens")

        publish(endpoint_file, gone)
        began = time.monotonic()
        silent = t.bellows("status", "latest", "--json")
        took = time.monotonic() - began
        if silent.returncode == 0 or "did not answer" not in silent.stderr:
            t.fail(f"bellows status at {gone}: exit {silent.returncode}, stderr {silent.stderr!r}; expected it "
                   "to fail saying the controller did not answer")
        t.log(f"bellows status at {gone} failed after {took:.2f} s: {silent.stderr.strip()}")

        began = time.monotonic()
        asking = subprocess.Popen([t.args.bellows, "status", "latest", "--json"], env=t.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(REPUBLISH_AFTER_S)
        publish(endpoint_file, endpoint)
        out, err = asking.communicate(timeout=30)
        took = time.monotonic() - began
        if asking.returncode != 0 or f'"job": "{first["job"]}"' not in out:
            t.fail(f"bellows status with {endpoint} published again after {REPUBLISH_AFTER_S:g} s: exit "
                   f"{asking.returncode}, stderr {err!r}, stdout {out[:300]!r}")
        if took > FOLLOW_LIMIT_S:
            t.fail(f"bellows status answered {took:.2f} s after its start, {endpoint} published again after "
                   f"{REPUBLISH_AFTER_S:g} s: expected within {FOLLOW_LIMIT_S:g} s")
        t.log(f"bellows status answered {took:.2f} s after its start, {endpoint} published again after "
              f"{REPUBLISH_AFTER_S:g} s")

        out, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within 60 s")
    if job.returncode != 0 or '"verified":true' not in out:
        t.fail(f"bellows run exited {job.returncode}: stderr {err[-1500:]!r}, stdout {out[-500:]!r}")
    t.check_logs("latest", err)
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
