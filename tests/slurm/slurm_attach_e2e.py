#!/usr/bin/env python3
"""End to end on the Slurm cluster of separate hosts: the controller of an elastic job
(`bellows run` in its batch script) is killed, and another takes the job over from inside the
allocation.

  slurm_attach_e2e.py --dir DIR --local-slurm PATH --bellows CLI --app GEMM [--no-job-expansion] attach
  slurm_attach_e2e.py --dir DIR --local-slurm PATH --bellows CLI --app GEMM attach_forced_companion

A GEMM submitted `-N1 --elastic=1:4` is grown to 3 nodes by `bellows resize +2` (a merged
helper job, or a companion allocation with --no-job-expansion). It has no policy: every
resize is the operator's (control_plane_attach_cooldown checks a policy's cooldown across a
takeover). Its batch script is

    bellows run --backend slurm --quiet -- GEMM ... || bellows wait "$SLURM_JOB_ID"

so that a killed `bellows run` does not end the job: the script waits until a controller that
took the job over records its end. Once the job ran 2 iterations on 3 nodes, `bellows run`
is SIGKILLed. Checks:

  - the job runs on (squeue RUNNING; its daemons and ranks still there);
  - `bellows run --attach` is refused outside the job's allocation (no SLURM_JOB_ID), and on a
    node of the job other than its first, whose daemons cannot reach it there (merge: "an
    address this host does not have"; companion: that node is another Slurm job's, "inside
    another job's allocation"), each naming the command that works;
  - `srun --jobid J --overlap -N1 -w FIRST bellows run --attach J` takes the job over: every
    daemon back, `bellows status` shows the 3 nodes, 3 ranks and a pid for each, and who took
    the job over;
  - the attached controller says it grows the job the way the job record says
    (`expand_strategy` "auto": merging, or companion allocations with --no-job-expansion);
    attach_forced_companion: `bellows run --expand-strategy companion` on a cluster that
    permits the merge, and the attached controller grows by companions all the same, "forced";
  - `bellows resize +1` under the attached controller grows the job with Slurm to 4 nodes
    (merge: the job's own node list gains the node; companion: a new companion allocation
    holds it) and the record keeps the new node (and companion);
  - `bellows resize -2` then shrinks it with Slurm (the job's node list, or its companions',
    loses both nodes; a companion left with none is completed) to its first 2 nodes: the
    daemon the attached controller started ends as any other, the one the killed controller
    started is told to stop;
  - the job finishes verified, the attached controller exits 0, the batch script's
    `bellows wait` reports the end with exit status 0, sacct says COMPLETED; the event log has the attach, then
    the operator's expand and shrink committed after it; nothing of the job is left; no node is drained.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import slurm_elastic_e2e
from slurm_cluster import check, describe, log, main, nodelist_names
from slurm_elastic_e2e import ElasticJob, start_clean
from slurm_lost_node_e2e import command_name, processes_on, running

ITERATIONS = 150


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def attach(c, job, node, slurm_job, output):
    """`srun --jobid SLURM_JOB --overlap -N1 -w NODE bellows run --attach JOB`, run on the head,
    its output into `output`; returns the Popen."""
    return subprocess.Popen([c.local_slurm, "exec", str(c.dir), "--", "srun", f"--jobid={slurm_job}", "--overlap",
                             "-N1", "-n1", "-w", node, "--quiet", job.args.bellows, "run", "--attach", job.id],
                            env=job.env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)


def grow_under_attached(c, job, nodes_before, by_companion):
    """`bellows resize +1` under the attached controller: the job grows with Slurm to 4 nodes
    (merge: the job's own node list gains the node; by_companion: a new companion allocation
    holds it), the new rank joins, and the job record keeps the node (and its companion).
    Returns the new companion's id (None for a merge)."""
    companions_before = {comp["id"] for comp in job.companions()}
    own_before = nodelist_names(c, c.job_field(job.id, "NodeList"))
    grown = job.bellows("resize", "+1", "--job", job.id, "--reason", "operator adds a node")
    check(grown.returncode == 0, f"bellows resize +1 under the attached controller failed: {grown}")
    job.wait("4 nodes after the grow", lambda: job.settled_on(4), 60)
    status = job.status()
    added = status["nodes"][3]
    check(status["nodes"][:3] == nodes_before and added not in nodes_before and sorted(job.nodes()) ==
          sorted(status["nodes"]), f"after the grow status lists {status['nodes']}, Slurm gives {job.nodes()}")
    own = nodelist_names(c, c.job_field(job.id, "NodeList"))
    new_companions = [comp for comp in job.companions() if comp["id"] not in companions_before]
    record = json.loads((job.job_dir / "job.json").read_text())
    if by_companion:
        check(own == own_before and len(new_companions) == 1 and new_companions[0]["nodes"] == [added]
              and new_companions[0]["comment"] == f"bellows:companion-of:{job.id}",
              f"after the grow: job {job.id} on {own} (before {own_before}), new companions {new_companions}, "
              f"expected one holding {added}")
        check({"id": new_companions[0]["id"], "nodes": [added]} in record["companions"],
              f"job.json lists companions {record['companions']}, not {new_companions[0]['id']} on {added}")
        how = f"a new companion {new_companions[0]['id']} holds {added}"
    else:
        check(sorted(own) == sorted(own_before + [added]) and not new_companions and not record["companions"],
              f"after the grow: job {job.id} on {own} (before {own_before}), companions {new_companions}")
        how = f"Slurm merged {added} into job {job.id} ({','.join(own)})"
    check(record["nodes"] == status["nodes"], f"job.json lists {record['nodes']}, status {status['nodes']}")
    check(job.step_jobs().get(added) == (new_companions[0]["id"] if by_companion else job.id),
          f"the bellowsd step of {added} runs in {job.step_jobs().get(added)}")
    log(f"grown by the attached controller: {how}; its daemon runs as a step there")
    return new_companions[0]["id"] if by_companion else None


def companion_state(c, companion):
    """sacct's state of the companion allocation, once it has ended (up to 20 s)."""
    deadline = time.monotonic() + 20
    while True:
        rows = [row.split("|") for row in c.run(["sacct", "-n", "-X", "-P", "-j", companion, "-o",
                                                 "JobID,State"]).stdout.split()]
        states = [state for job, state in rows if job == companion]
        if (states and states[-1] in ("COMPLETED", "CANCELLED", "FAILED")) or time.monotonic() > deadline:
            return states[-1] if states else None
        time.sleep(0.2)


def test_attach(c, args, forced=None):
    """forced: the strategy `bellows run --expand-strategy` forces (None: auto)."""
    work = start_clean(c, "attach")
    job = ElasticJob(c, args, work, "e2e-attach", ["-N1", "--elastic=1:4"],
                     f"{args.app} --n 768 --tile 128 --iterations {ITERATIONS} --kernel emulated "
                     "--emulated-gflops 2 --emulated-compute on --verify",
                     wait_after_run=True, run_options=("--expand-strategy", forced) if forced else ())
    by_companion = c.companion or forced == "companion"
    attached = None
    added_companion = None
    attach_out = work / "attach.out"
    try:
        job.wait("the controller", lambda: job.settled_on(1), 60)
        grown = job.bellows("resize", "+2", "--job", job.id, "--reason", "operator grows the job to 3")
        check(grown.returncode == 0, f"bellows resize +2 failed: {grown}")
        job.wait("3 nodes, 3 ranks", lambda: job.settled_on(3), 60)
        grown_at = job.status()["iteration"]
        job.wait("2 iterations on 3 nodes", lambda: job.status()["iteration"] >= grown_at + 2, 60)
        before = job.status()
        first, second = before["nodes"][0], before["nodes"][1]
        holder_of_second = job.step_jobs().get(second)
        check(holder_of_second, f"no bellowsd step on {second}: {job.step_jobs()}")
        controllers = [pid for pid in processes_on(c, first) if command_name(pid) == "bellows"
                       and b"--backend" in cmdline(pid) and b"run" in cmdline(pid)]
        check(len(controllers) == 1, f"expected one bellows run on {first}: {[describe(p) for p in controllers]}")
        ranks = {p["node"]: p["pid"] for p in before["processes"]}
        os.kill(controllers[0], signal.SIGKILL)
        killed_at = time.time()
        log(f"killed bellows run (pid {controllers[0]}) on {first} at iteration {before['iteration']}")
        deadline = time.monotonic() + 10
        while running(controllers[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(not running(controllers[0]), f"bellows run (pid {controllers[0]}) still runs 10 s after SIGKILL")
        time.sleep(1.0)
        check(job.state() == "RUNNING", f"job {job.id} is {job.state()} after its controller was killed; "
              f"output:\n{job.output_tail()}")
        check(job.status() is None, "bellows status answered with no controller")
        check(sorted(job.nodes()) == sorted(before["nodes"]),
              f"job {job.id} holds {job.nodes()} after its controller died, expected {before['nodes']}")
        log(f"job {job.id} runs on without its controller on {job.nodes()}")

        outside = job.bellows("run", "--attach", job.id)
        check(outside.returncode == 1 and "outside its allocation (no SLURM_JOB_ID)" in outside.stderr and
              f"srun --jobid {job.id} --overlap -N1 -w {first} bellows run --attach {job.id}" in outside.stderr,
              f"--attach outside the allocation: exit {outside.returncode}, {outside.stderr!r}")
        log(f"outside the allocation: {outside.stderr.strip()}")
        with open(work / "attach-elsewhere.out", "w") as out:
            elsewhere = attach(c, job, second, holder_of_second, out)
            status = elsewhere.wait(timeout=30)
        said = (work / "attach-elsewhere.out").read_text()
        expected = (f"an address this host does not have ({second})" if holder_of_second == job.id
                    else f"inside another job's allocation (SLURM_JOB_ID={holder_of_second})")
        check(status != 0 and expected in said and f"-w {first} bellows run --attach {job.id}" in said,
              f"--attach on {second}: exit {status}, expected {expected!r} in {said!r}")
        log(f"on {second}: {said.strip().splitlines()[0]}")

        output = open(attach_out, "w")
        attach_at = time.time()
        attached = attach(c, job, first, job.id, output)
        deadline = time.monotonic() + 20
        while f"took job {job.id} over: every daemon back" not in attach_out.read_text():
            check(attached.poll() is None, f"bellows run --attach exited {attached.poll()}:\n{attach_out.read_text()}")
            check(time.monotonic() < deadline, f"no takeover within 20 s:\n{attach_out.read_text()}")
            time.sleep(0.1)
        took = [line for line in attach_out.read_text().splitlines() if "took job" in line]
        log(f"{time.time() - attach_at:.2f} s after srun ... --attach began: {took[0]}")
        status = job.status()
        check(status is not None and status["nodes"] == before["nodes"] and status["ranks"] == 3,
              f"status after the takeover: {status}")
        check({p["node"]: p["pid"] for p in status["processes"]} == ranks,
              f"status after the takeover lists {status['processes']}, expected the ranks' pids {ranks}")
        check(status["attached"] and status["attached"].startswith("bellows run --attach, pid "),
              f"status does not say who took the job over: {status['attached']!r}")
        log(f"status: nodes {status['nodes']}, ranks {status['ranks']}, rank pids {ranks}, {status['attached']}")
        record = json.loads((job.job_dir / "job.json").read_text())
        strategy = [line for line in attach_out.read_text().splitlines() if " grows by " in line]
        expected = "companion allocations" if by_companion else "merging helper jobs"
        if forced:
            expected += f" it spans (bellows-grow-JOBID): forced (--expand-strategy {forced})"
        check(record["expand_strategy"] == (forced or "auto") and strategy and expected in strategy[0],
              f"job.json's expand_strategy {record['expand_strategy']!r}; the attached controller said {strategy}, "
              f"expected it to grow by {expected}")
        log(f"attached controller: {strategy[0]}")

        added_companion = grow_under_attached(c, job, before["nodes"], by_companion)
        grown_nodes = job.status()["nodes"]

        shrunk = job.bellows("resize", "-2", "--job", job.id, "--reason", "operator gives two nodes back")
        check(shrunk.returncode == 0, f"bellows resize -2 under the attached controller failed: {shrunk}")
        job.wait("2 nodes after the shrink", lambda: job.settled_on(2), 30)
        after = job.status()["nodes"]
        check(after == before["nodes"][:2] and sorted(job.nodes()) == sorted(after),
              f"after the shrink the job holds {job.nodes()}, status {after}, expected {before['nodes'][:2]}")
        left_companions = [comp for comp in job.companions() if comp["state"] == "RUNNING"]
        check(not any(grown_nodes[3] in comp["nodes"] for comp in left_companions),
              f"{grown_nodes[3]} is still held by a companion after the shrink: {left_companions}")
        log(f"shrunk by the attached controller: Slurm gives job {job.id} {job.nodes()}, companions {left_companions}")
        # The daemon of the node the attached controller added is its own srun's: stopped by
        # its launcher, not told to over its link as the killed controller's daemons are.
        said = (job.job_dir / "nodes" / grown_nodes[3] / "bellowsd.log").read_text()
        check("controller says stop" not in said and grown_nodes[3] not in job.step_jobs(),
              f"the daemon of {grown_nodes[3]} (steps {job.step_jobs()}):\n{said[-1500:]}")
        # The daemon of the third node was started by the killed controller's srun: the new one
        # tells it to stop.
        leaver = before["nodes"][2]
        said = (job.job_dir / "nodes" / leaver / "bellowsd.log").read_text()
        check("controller says stop: its node left the job" in said,
              f"the daemon of {leaver} was not told to stop when its node left:\n{said[-1500:]}")
        job.wait_end(120)
        check(attached.wait(timeout=30) == 0, f"bellows run --attach exited {attached.returncode}:\n"
              f"{attach_out.read_text()[-2000:]}")
    finally:
        if attached is not None and attached.poll() is None:
            attached.send_signal(signal.SIGTERM)
            try:
                attached.wait(timeout=20)
            except subprocess.TimeoutExpired:
                attached.kill()
                attached.wait()
        job.cancel()
    report = job.report(ranks=2)
    check(len(report["iterations"]) == ITERATIONS, f"{len(report['iterations'])} iterations, expected {ITERATIONS}")
    waited = [line for line in job.output().splitlines() if line.startswith("bellows wait: ")]
    check(waited and f"job {job.id} ended at " in waited[0] and waited[0].endswith(
        "(its first rank ended after leaving the job (exit status 0)): exit status 0"),
        f"the batch script's bellows wait said {waited}")
    log(f"batch script: {waited[0]}")
    events = job.events()
    attaches = [i for i, e in enumerate(events) if e["event"] == "attached"]
    check(len(attaches) == 1, f"expected one attached line in the event log: {[e['event'] for e in events]}")
    after_attach = events[attaches[0]:]
    committed_after = [(i, e["kind"]) for i, e in enumerate(after_attach)
                       if e["requester"] == "operator" and e["to"] == "committed" and not e["refused"]]
    check([kind for _, kind in committed_after] == ["expand", "shrink"],
          f"expected an operator expand then an operator shrink committed after the attach, got "
          f"{committed_after}: {after_attach}")
    before_attach = [e["kind"] for e in events[:attaches[0]] if e["to"] == "committed"]
    check(before_attach == ["expand"], f"committed before the attach: {before_attach}, expected one expand")
    log(f"event log: expand committed, attached, then " + ", ".join(kind for _, kind in committed_after) +
        " committed")
    refused = [e["detail"] for e in events if e["refused"]]
    check(not refused, f"refused events in the log: {refused}")
    record = json.loads((job.job_dir / "job.json").read_text())
    check(record["ended_at"] and record["nodes"] == before["nodes"][:2],
          f"job.json at the end: nodes {record['nodes']}, ended_at {record['ended_at']!r}")
    sizes = job.accounting()
    check(sizes and sizes[-1][0] == "COMPLETED", f"sacct: {sizes}, expected the job COMPLETED")
    if added_companion:
        state = companion_state(c, added_companion)
        check(state == "COMPLETED", f"sacct -j {added_companion} (the companion of the grow): {state}")
        log(f"the companion {added_companion} of the grow under the attached controller: {state}")
    job.check_nothing_left()
    states = c.node_states()
    check(all(state == "idle" for state in states.values()), f"node states at the end: {states}")
    log(f"every node idle, none drained: {states}")
    job.check_logs(allowed=ATTACH_LINES)


# What the killed controller makes the logs say: each daemon finds its controller gone (its ranks
# run on) until the new controller binds the job's endpoint again.
ATTACH_LINES = [" is gone (no connection for "]

TESTS = {"attach": test_attach,
         "attach_forced_companion": lambda c, args: test_attach(c, args, forced="companion")}


if __name__ == "__main__":
    sys.exit(main(__doc__, TESTS, on_failure=slurm_elastic_e2e.keep_evidence))
