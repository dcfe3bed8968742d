#!/usr/bin/env python3
"""End-to-end test of an expand asked for before the job's first iteration, on the local
backend with real processes: a controller, one bellowsd per node, MPICH ranks.

A GEMM starts on 1 node and takes a few seconds to set up (n=6144: its matrices are generated
before the first iteration). An operator asks for +1 node as soon as the controller answers:
the node is granted and its rank started while the job's first rank is still setting up. The
job carries the expand out before its second iteration, not its first (a rank added before
the first would join at iteration 0, where the initial ranks join, and could not be told from
them). Checked: the expand commits, before iteration 2 (1-based, the report's count); the job
ends on 2 ranks, with every iteration after the expand on 2; no warning or error in the logs.

With --first-daemon-late S (and --bellowsd PATH), the daemon of the job's first node, local0,
starts S seconds late (`bellows run` starts a wrapper that waits, named by BELLOWS_BELLOWSD), so
that the expand's new daemon registers first, as it may on a loaded host: the controller must
hold the expand's order for local0 until that daemon registered (once a death of local0, the
expand called off). Checked too: the expand's daemon came up before local0's daemon started.

  early_expand_test.py --bellows PATH --app PATH [--first-daemon-late S --bellowsd PATH]
Prints "early_expand: PASS" or "early_expand: FAIL: why".
"""
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

POLICY = """\
nodes:
  min: 1
  max: 2
"""


def configure(parser):
    parser.add_argument("--first-daemon-late", type=float, default=0.0,
                        help="seconds the daemon of the job's first node starts late")
    parser.add_argument("--bellowsd", help="the bellowsd that the late start runs")


def start_first_daemon_late(t):
    """Has `bellows run` start its daemons through a wrapper that holds local0's back for
    --first-daemon-late seconds and writes when it let it go (seconds since the epoch) to the
    file it returns."""
    started = os.path.join(t.top, "first-daemon-started")
    wrapper = t.write("late-first-daemon.sh", f"""#!/bin/sh
case " $* " in *" --node-name local0 "*) sleep {t.args.first_daemon_late:g}; date +%s.%N > '{started}' ;; esac
exec '{t.args.bellowsd}' "$@"
""")
    os.chmod(wrapper, 0o755)
    t.env["BELLOWS_BELLOWSD"] = wrapper
    return started


def event_time(event):
    stamp = datetime.datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def main():
    t = LocalJobTest("early_expand", configure)
    t.log(f"job files in {t.run_dir}")
    late_file = None
    if t.args.first_daemon_late > 0:
        if not t.args.bellowsd:
            t.fail("--first-daemon-late needs --bellowsd")
        late_file = start_first_daemon_late(t)
    policy = t.write("early.yaml", POLICY)
    job = t.start("--nodes", "1:2", "--pool", "2", "--policy", policy, "--quiet", "--",
                  t.args.app, "--n", "6144", "--tile", "512", "--iterations", "4", "--kernel", "emulated",
                  "--emulated-gflops", "2000")
    try:
        deadline = time.time() + 60
        while t.status() is None:
            if job.poll() is not None:
                t.fail(f"bellows run ended before its controller answered: {job.stderr.read()[-2000:]}")
            if time.time() > deadline:
                t.fail("the controller did not answer within 60 s")
            time.sleep(0.02)
        r = t.bellows("resize", "+1", "--reason", "before the first iteration")
        if r.returncode != 0:
            t.fail(f"bellows resize +1: {r.returncode} {r.stdout!r} {r.stderr!r}")
        told_at_iteration = None
        while told_at_iteration is None and time.time() < deadline and job.poll() is None:
            status = t.status()
            if status and status.get("active_resize") and status["active_resize"]["state"] == "reconfiguring":
                told_at_iteration = status["iteration"]
            time.sleep(0.02)
        t.log(f"the job was told of the expand when it had reported {told_at_iteration} iterations")
        out, err = job.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the job did not end within 180 s (an expand before the first iteration hangs the job)")
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}: {err[-3000:]}")
    path = [(e["event"], e["to"]) for e in t.events() if e["resize"] == 1]
    if not path or path[-1][1] != "committed":
        t.fail(f"resize 1 went {path}, expected it to commit")
    if late_file is not None:
        # The order the test is about: the expand's daemon up while local0's had not started.
        ready = [event_time(e) for e in t.events() if e["resize"] == 1 and e["event"] == "daemons_ready"]
        first_started = float(Path(late_file).read_text())
        if not ready or ready[0] >= first_started:
            t.fail(f"the expand's daemon came up at {ready}, not before local0's daemon started at "
                   f"{first_started:.3f}: nothing was decided before the first node's daemon registered")
        t.log(f"the expand's daemon came up {first_started - ready[0]:.2f} s before local0's daemon started")
    report = json.loads(out.strip().splitlines()[-1])
    resizes = report.get("resizes", [])
    if len(resizes) != 1 or resizes[0]["to_ranks"] != 2 or resizes[0]["before_iteration"] < 2:
        t.fail(f"the job's resizes: {resizes}, expected one to 2 ranks before iteration 2 or later")
    after = report["iterations"][resizes[0]["before_iteration"] - 1:]
    if report["ranks"] != 2 or any(i["ranks"] != 2 for i in after):
        t.fail(f"iterations ran on {[i['ranks'] for i in report['iterations']]} ranks, expected 2 "
               f"from iteration {resizes[0]['before_iteration']}")
    t.log(f"expand carried out before iteration {resizes[0]['before_iteration']}; ranks per iteration "
          f"{[i['ranks'] for i in report['iterations']]}")
    t.check_logs("latest", err)
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
