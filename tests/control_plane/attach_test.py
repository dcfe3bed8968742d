#!/usr/bin/env python3
"""End-to-end test of `bellows run --attach` on the local backend with real processes:
`bellows run`, one bellowsd per node, MPICH ranks.

A GEMM on 2 nodes (range 2:3, a policy without triggers) runs iterations of a few seconds
(the emulated device at 1 GFLOP/s per rank). Once its first iteration ended, `bellows run` is
killed with SIGKILL. `bellows run --attach latest` takes the job over: every daemon comes back
and every rank is known again, `bellows status` says who took the job over, and the policy
(its file removed: the job keeps its text) ticks again; a second `--attach` at the same time
is refused, naming the first. `bellows resize +1` then grows the job to 3 nodes under the new
controller and `bellows resize -1` shrinks it to 2 again, the job finishes verified, the
attached controller exits 0 (the job's status, from its first node's daemon), and the event
log shows the attach and the committed expand and shrink after it. An `--attach` to the ended
job is refused. Nothing of the job is left.

The test makes itself the subreaper of what `bellows run` started, so that the orphaned daemons
and the first rank's mpiexec become its children and are reaped.

  attach_test.py --bellows PATH --app PATH [--measure N | --lost-rank | --cooldown]
With --lost-rank: a 3-node GEMM with buddy checkpoints, taken over the same way, loses the rank
of its last node; the attached controller records the failure (its id continuing the log's),
the job recovers and finishes verified on 2 ranks ("attach_lost_rank: PASS").
With --cooldown: a 2-node GEMM under a policy that grows it whenever it may (cooldown 10m) is
grown to 3 by it, then taken over the same way: the attached controller's policy holds for the
rest of the cooldown and the job stays on 3 nodes ("attach_cooldown: PASS").
With --measure N it prints, for N kills and takeovers of fresh jobs, the time from `--attach`
to the controller knowing every node and rank again, and their median ("attach_bench: ...").
Prints "attach: PASS" or "attach: FAIL: why".
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402
from takeover import TOOK_OVER, Lines, become_subreaper, reap  # noqa: E402

# A policy with no trigger: it never resizes on its own, but ticks (and says why it holds).
POLICY = """\
nodes:
  min: 2
  max: 3
tick: 250ms
resize_timeout: 1m
"""
# --cooldown: a policy that grows the job whenever it may, with a long cooldown.
GROWING_POLICY = """\
nodes:
  min: 2
  max: 4
expand:
  ready_tasks_per_node_above: 1
tick: 250ms
hysteresis_ticks: 1
cooldown: 10m
resize_timeout: 1m
"""
COOLDOWN_HOLD = re.compile(r"hold: cooldown after the last resize, ([0-9]+)(ms|s|m) left")
SECONDS_PER = {"ms": 0.001, "s": 1, "m": 60}



def gemm(t, iterations):
    return [t.args.app, "--n", "1536", "--tile", "256", "--iterations", str(iterations), "--kernel", "emulated",
            "--emulated-gflops", "1", "--emulated-compute", "on", "--verify"]


def start_and_kill(t, iterations, policy=()):
    """Starts a 2-node GEMM, waits for its first iteration, kills `bellows run`; returns the
    killed process (its stdout is the first rank's) and the job's id."""
    job = t.start("--nodes", "2:3", "--pool", "3", *policy, "--quiet", "--", *gemm(t, iterations))
    status = t.wait_for(job, "first iteration", lambda: (s := t.status()) and s["iteration"] >= 1 and s, seconds=60)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    t.log(f"bellows run (pid {job.pid}) of {status['job']} killed at iteration {status['iteration']}")
    return job, status["job"]


def attach(t):
    process = subprocess.Popen([t.args.bellows, "run", "--attach", "latest"], env=t.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    return process, Lines(process.stderr)


def wait_took_over(t, process, lines, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        m = lines.find(TOOK_OVER)
        if m:
            return m
        if process.poll() is not None:
            t.fail(f"bellows run --attach ended ({process.returncode}) before it took the job over: {lines.text()}")
        time.sleep(0.05)
    t.kill_all(process)
    t.fail(f"bellows run --attach did not take the job over within {seconds} s: {lines.text()}")


def measure(t, runs):
    """The time from --attach to every node and rank known again, over `runs` fresh jobs."""
    times = []
    for run in range(runs):
        job, _ = start_and_kill(t, iterations=3)
        process, lines = attach(t)
        m = wait_took_over(t, process, lines)
        times.append(float(m.group(3)))
        t.log(f"run {run + 1}: every daemon back in {float(m.group(2)):.3f} s, every rank known in "
              f"{float(m.group(3)):.3f} s")
        job.communicate(timeout=120)
        process.wait(timeout=60)
        reap()
    print(f"attach_bench: time from --attach to every node and rank known, {runs} runs: "
          + ", ".join(f"{s:.3f}" for s in times) + f" s; median {statistics.median(times):.3f} s", flush=True)


def job_end(t, job, process, lines, within):
    """Waits for the job and its attached controller to end; returns the job's last JSON report, the
    sizes of its iterations, the controller's exit status and its log."""
    try:
        out, _ = job.communicate(timeout=180)
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail_hung(process, f"the job or its attached controller did not end within 180 s{within}")
    reports = [line for line in out.strip().splitlines() if line.startswith("{")]
    if not reports:
        t.fail(f"the job printed no report; stdout {out[-1500:]!r}")
    report = json.loads(reports[-1])
    return report, [i["ranks"] for i in report["iterations"]], code, lines.text()


def lost_rank_after_attach(t):
    """A 3-node GEMM with buddy checkpoints whose controller is killed and taken over; then the
    rank of its last node is killed: the attached controller records the failure (its id after
    the log's), tells the survivors, the job recovers and finishes verified on 2 ranks."""
    t.name = "attach_lost_rank"
    job = t.start("--nodes", "3:3", "--pool", "3", "--quiet", "--", t.args.app, "--n", "768", "--tile", "128",
                  "--iterations", "14", "--kernel", "emulated", "--emulated-gflops", "1", "--emulated-compute", "on",
                  "--checkpoint", "on", "--checkpoint-every", "1", "--verify")
    t.wait_for(job, "first iteration on 3 ranks",
               lambda: (s := t.status_with_rank_pids(3)) and s["iteration"] >= 1, seconds=90)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    killed_events = t.events()
    process, lines = attach(t)
    wait_took_over(t, process, lines)
    status = t.wait_for(process, "every rank known after the takeover", lambda: t.status_with_rank_pids(3))
    victim = max(status["processes"], key=lambda p: p["rank"])
    os.kill(victim["pid"], signal.SIGKILL)
    t.log(f"killed rank {victim['rank']} (pid {victim['pid']}) on {victim['node']} under the attached controller")
    report, sizes, code, err = job_end(t, job, process, lines, " of the kill")
    if report.get("verified") is not True or sizes[-1] != 2:
        t.fail(f"the job's result: verified {report.get('verified')}, iterations on {sizes} ranks")
    if code != 0:
        t.fail(f"bellows run --attach exited {code}, expected 0: {err[-2000:]}")
    last_id = max([e["resize"] for e in killed_events] + [0])
    failures = [e for e in t.events()[len(killed_events):] if e["kind"] == "failure" and not e["refused"]]
    phases = [e["to"] for e in failures]
    if "detected" not in phases or "recovered" not in phases or min(e["resize"] for e in failures) <= last_id:
        t.fail(f"the failure under the attached controller: {[(e['resize'], e['to']) for e in failures]}, "
               f"expected detected ... recovered with an id after #{last_id}")
    t.log(f"the job finished verified on {sizes} ranks; failure #{failures[0]['resize']}: {phases}")
    t.check_logs("latest", err, allowed=["is gone (no connection for", "ended without leaving the job",
                                         "the rank launcher"])
    time.sleep(1)
    reap()
    t.passed(t.job_dir())


def cooldown_after_attach(t):
    """A 2-node GEMM under a policy that grows it whenever it may (cooldown 10m) grows to 3; its
    controller is killed and taken over: the attached controller's policy waits out the rest of
    the cooldown (its hold says so) and the job stays on 3 nodes, where an engine started
    afresh would grow it to 4 at its first tick."""
    t.name = "attach_cooldown"
    policy = t.write("grow.yaml", GROWING_POLICY)
    job = t.start("--nodes", "2:4", "--pool", "4", "--policy", policy, "--quiet", "--", *gemm(t, 8))
    t.wait_for(job, "the policy's expand to 3 nodes, committed",
               lambda: (s := t.status()) and len(s["nodes"]) == 3 and any(
                   r["kind"] == "expand" and r["state"] == "committed" for r in s["finished_resizes"]),
               seconds=90)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    killed_events = t.events()
    t.log("the policy grew the job to 3 nodes; bellows run killed")
    process, lines = attach(t)
    wait_took_over(t, process, lines)
    hold = t.wait_for(process, "a policy tick under the attached controller",
                      lambda: (s := t.status()) and s["policy_holds"], seconds=10)
    m = COOLDOWN_HOLD.fullmatch(hold)
    # The expand committed well under 100 s before: over 500 s of the 10 minutes are left.
    if not m or int(m.group(1)) * SECONDS_PER[m.group(2)] < 500:
        t.fail(f"the attached controller's policy holds with {hold!r}, expected the rest of the 10m cooldown")
    time.sleep(3)  # 12 ticks
    status = t.status()
    asked = [e for e in t.events()[len(killed_events):] if e["event"] == "request"]
    if status is None or len(status["nodes"]) != 3 or status["active_resize"] is not None or asked:
        t.fail(f"the job resized within the cooldown after the takeover: nodes {status and status['nodes']}, "
               f"active {status and status['active_resize']}, requests {asked}")
    t.log(f"the attached controller's policy holds: {status['policy_holds']}; the job stays on 3 nodes")
    report, sizes, code, err = job_end(t, job, process, lines, "")
    if report.get("verified") is not True or sizes[-1] != 3 or code != 0:
        t.fail(f"the job's end: verified {report.get('verified')}, iterations on {sizes} ranks, the attached "
               f"controller exited {code}: {err[-1500:]}")
    t.check_logs("latest", err, allowed=["is gone (no connection for"])
    time.sleep(1)
    reap()
    t.passed(t.job_dir())


def main():
    t = LocalJobTest("attach", lambda p: (p.add_argument("--measure", type=int, default=0),
                                          p.add_argument("--lost-rank", action="store_true"),
                                          p.add_argument("--cooldown", action="store_true")))
    why = become_subreaper()
    if why:
        t.fail(why)
    if t.args.lost_rank:
        lost_rank_after_attach(t)
        return
    if t.args.cooldown:
        cooldown_after_attach(t)
        return
    if t.args.measure > 0:
        measure(t, t.args.measure)
        t.passed(t.top)
        return
    t.log(f"job files in {t.run_dir}")
    policy = t.write("attach.yaml", POLICY)
    job, job_id = start_and_kill(t, iterations=10, policy=("--policy", policy))
    job_dir = t.job_dir()
    killed_events = t.events()
    os.remove(policy)  # the job keeps its policy's text: the file is not needed to take it over

    process, lines = attach(t)
    m = wait_took_over(t, process, lines)
    t.log(f"bellows run --attach (pid {process.pid}) took {m.group(1)} over: every daemon back in "
          f"{m.group(2)} s, every rank known in {m.group(3)} s")
    if m.group(1) != job_id:
        t.fail(f"took {m.group(1)} over, expected {job_id}")
    status = t.status()
    if status is None or status["nodes"] != ["local0", "local1"] or status["ranks"] != 2:
        t.fail(f"bellows status after the takeover: {status}")
    if [p["rank"] for p in status["processes"]] != [0, 1] or not all(p["pid"] for p in status["processes"]):
        t.fail(f"the attached controller does not know every rank: {status['processes']}")
    if status["attached"] != f"bellows run --attach, pid {process.pid}":
        t.fail(f"bellows status does not say who took the job over: {status['attached']!r}")
    shown = t.bellows("status")
    if f"  controller took the job over (bellows run --attach, pid {process.pid})" not in shown.stdout:
        t.fail(f"bellows status does not show the takeover: {shown.stdout!r}")

    if status["policy"] != policy:
        t.fail(f"bellows status after the takeover names the policy {status['policy']!r}, expected {policy!r}")
    holds = t.wait_for(process, "a policy tick under the attached controller",
                       lambda: (s := t.status()) and s["policy_holds"], seconds=10)
    t.log(f"the policy ticks under the attached controller ({holds})")

    second = t.bellows("run", "--attach", "latest")
    expected = (f"bellows run: the job in {job_dir} has a controller already (process {process.pid} holds "
                "controller.lock): one controller per job")
    if second.returncode != 1 or second.stderr.strip() != expected:
        t.fail(f"a second --attach: exit {second.returncode}, stderr {second.stderr!r}; expected exit 1 and "
               f"{expected!r}")
    t.log("a second --attach is refused: " + second.stderr.strip())

    grow = t.bellows("resize", "+1")
    if grow.returncode != 0:
        t.fail(f"bellows resize +1 under the attached controller: exit {grow.returncode}: {grow.stderr}")
    t.wait_for(process, "the job on 3 nodes",
               lambda: (s := t.status()) and len(s["nodes"]) == 3 and any(
                   r["kind"] == "expand" and r["state"] == "committed" for r in s["finished_resizes"]),
               seconds=90)
    t.log("bellows resize +1 grew the job to 3 nodes under the attached controller")
    shrink = t.bellows("resize", "-1")
    if shrink.returncode != 0:
        t.fail(f"bellows resize -1 under the attached controller: exit {shrink.returncode}: {shrink.stderr}")
    t.wait_for(process, "the job back on 2 nodes",
               lambda: (s := t.status()) and len(s["nodes"]) == 2 and any(
                   r["kind"] == "shrink" and r["state"] == "committed" for r in s["finished_resizes"]),
               seconds=90)
    t.log("bellows resize -1 shrank it to 2 nodes again")

    report, sizes, code, err = job_end(t, job, process, lines, "")
    if report.get("verified") is not True:
        t.fail(f"the job's result is not verified: residual {report.get('residual')}")
    if 3 not in sizes or sizes[-1] != 2:
        t.fail(f"the job ran on {sizes} ranks, expected 3 after the grow and 2 at the end")
    if code != 0:
        t.fail(f"bellows run --attach exited {code}, expected 0: {err[-2000:]}")
    if "its first rank ended after leaving the job (exit status 0)" not in err:
        t.fail(f"bellows run --attach does not say how the job ended: {err[-1500:]}")
    t.log(f"the job finished verified on {sizes} ranks; the attached "
          "controller exited 0")

    events = t.events()[len(killed_events):]
    attached = [e for e in events if e["event"] == "attached"]
    if len(attached) != 1 or attached[0]["reason"] != f"bellows run --attach, pid {process.pid}":
        t.fail(f"the event log does not show the attach: {attached}")
    last_id = max([e["resize"] for e in killed_events] + [0])
    committed = [(e["kind"], e["resize"]) for e in events if e["to"] == "committed" and not e["refused"]]
    ids = [resize for _, resize in committed]
    if [kind for kind, _ in committed] != ["expand", "shrink"] or min(ids) <= last_id or ids[0] >= ids[1]:
        t.fail(f"the event log does not show the expand and the shrink after the attach, with ids after "
               f"#{last_id}: {committed}")
    t.log(f"event log: attached, then expand #{ids[0]} and shrink #{ids[1]} committed")

    reap()
    ended = t.bellows("run", "--attach", "latest")
    if ended.returncode != 1 or not re.fullmatch(
            rf"bellows run: job {job_id} ended at \S+ \(its first rank ended after leaving the job \(exit status "
            r"0\)\): nothing to attach to", ended.stderr.strip()):
        t.fail(f"an --attach to the ended job: exit {ended.returncode}, stderr {ended.stderr!r}")
    t.log("an --attach to the ended job is refused: " + ended.stderr.strip())
    # What a batch script runs after its killed `bellows run`: it returns once the end is recorded.
    waited = t.bellows("wait", "latest")
    if waited.returncode != 0 or not re.fullmatch(
            rf"bellows wait: job {job_id} ended at \S+ \(its first rank ended after leaving the job \(exit status "
            r"0\)\): exit status 0", waited.stderr.strip()):
        t.fail(f"bellows wait on the ended job: exit {waited.returncode}, stderr {waited.stderr!r}")
    t.log(waited.stderr.strip())
    # The killed controller's loss, as the daemons saw it while nobody controlled the job.
    t.check_logs("latest", err, allowed=["is gone (no connection for"])
    time.sleep(1)
    reap()
    t.passed(job_dir)


if __name__ == "__main__":
    main()
