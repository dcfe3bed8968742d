#!/usr/bin/env python3
"""End-to-end tests of elastic jobs on the Slurm cluster started by scripts/local-slurm:
`bellows run --backend slurm` inside batch jobs submitted with the SPANK plugin's options.

  slurm_elastic_e2e.py --dir DIR --local-slurm PATH --bellows CLI --app GEMM --cholesky CHOLESKY TEST

TEST is one of: run_slurm, grow_and_yield, expand_not_granted, resize_cycles, cancel_grown. Each prints what
it checks and ends with "slurm_e2e: PASS" or "slurm_e2e: FAIL: <why>" (exit status 0 or 1).

With --no-job-expansion the cluster runs with Slurm's default SchedulerParameters: `bellows run`
then grows jobs by companion allocations (bellows-grow-JOBID), and the tests also check that
they show in squeue and sacct while the job is grown, that the daemons on their nodes run as
their steps, and that none is left after a shrink or at the end. Otherwise by merged helper jobs.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import slurm_evidence
from slurm_cluster import (ENDED, GROW_POLICY, NODES, check, check_job_logs, describe, host_of, log, main,
                           nodelist_names, processes_mentioning, processes_of, zombies_of)

SUBMITTED = []  # the jobs this test submitted: their logs are kept when it fails


class ElasticJob:
    """A batch job whose script is `bellows run --backend slurm --quiet -- PROGRAM`."""

    def __init__(self, c, args, work, name, sbatch_options, program, policy=None, run_dir_length=0,
                 directives=False, wait_after_run=False, run_options=()):
        """With directives, sbatch_options and the policy's option are #SBATCH lines of a job
        script (job.sh in work) rather than options on sbatch's command line. With
        wait_after_run, a `bellows run` that ends without success (killed) is followed by
        `bellows wait $SLURM_JOB_ID`: the batch script lives on until a controller that took the
        job over (bellows run --attach) records its end (docs/slurm.md). run_options go to
        `bellows run` before the program (e.g. --expand-strategy companion)."""
        self.c, self.args, self.work = c, args, work
        self.runs = work / "runs"
        while len(str(self.runs)) < run_dir_length:  # a deep project tree
            self.runs = self.runs / "a-deep-project-directory"
        self.env = dict(c.env, BELLOWS_RUN_DIR=str(self.runs))
        options = list(sbatch_options)
        if policy is not None:
            (work / "policy.yaml").write_text(policy)
            options.append("--elastic-policy=policy.yaml")
        command = " ".join([args.bellows, "run", "--backend", "slurm", "--quiet", *run_options, "--", program])
        if wait_after_run:
            command += f' || {args.bellows} wait "$SLURM_JOB_ID"'
        self.began = time.monotonic()
        self.began_stamp = time.strftime("%Y-%m-%dT%H:%M:%S")  # as Slurm's logs stamp their lines
        said = " ".join(options)
        if directives:
            said = "job.sh with #SBATCH " + said
            (work / "job.sh").write_text("#!/bin/sh\n" + "".join(f"#SBATCH {o}\n" for o in options) +
                                         ("" if wait_after_run else "exec ") + f"{command}\n")
            script, options = ["job.sh"], []
        else:
            script = ["--wrap", command]
        self.id = c.run(["sbatch", "--parsable", *options, "-J", name, "-D", str(work), "-o", "job.out",
                         "-t", "5", f"--export=ALL,BELLOWS_RUN_DIR={self.runs},OPENBLAS_NUM_THREADS=1",
                         *script], cwd=work).stdout.strip()
        self.job_dir = self.runs / self.id
        SUBMITTED.append(self)
        log(f"submitted job {self.id}: {said} {command}")

    def since(self):
        return time.monotonic() - self.began

    def state(self):
        return self.c.job_field(self.id, "JobState")

    def nodes(self):
        """The job's nodes now (empty unless it runs), with those of its running companions."""
        if self.state() != "RUNNING":
            return []
        own = nodelist_names(self.c, self.c.job_field(self.id, "NodeList"))
        return own + [n for comp in self.companions() if comp["state"] == "RUNNING" for n in comp["nodes"]]

    def companions(self):
        """The job's companion allocations in the queue: id, name, comment, state, nodes."""
        out = self.c.run(["squeue", "-h", "-n", f"bellows-grow-{self.id}", "-o", "%i|%j|%k|%T|%N"]).stdout
        rows = []
        for line in out.splitlines():
            if line.strip():
                job, name, comment, state, nodelist = line.split("|")
                rows.append({"id": job, "name": name, "comment": comment, "state": state,
                             "nodes": nodelist_names(self.c, nodelist) if nodelist else []})
        return rows

    def step_jobs(self):
        """Node -> the Slurm job (the job's own id, or a companion's) whose bellowsd step runs there."""
        ids = [self.id] + [comp["id"] for comp in self.companions()]
        out = self.c.run(["squeue", "-h", "-s", "-j", ",".join(ids), "-o", "%i %j %N"], ok=False).stdout
        return {fields[2]: fields[0].split(".")[0] for fields in (line.split() for line in out.splitlines())
                if len(fields) == 3 and fields[1] == "bellowsd"}

    def check_strategy(self):
        """bellows run said which strategy it chose, the one this cluster allows."""
        said = [line for line in self.output().splitlines() if " grows by " in line]
        expected = "companion allocations" if self.c.companion else "merging helper jobs"
        check(said and expected in said[0], f"bellows run does not say it grows by {expected}: {said}")
        log(f"bellows run: {said[0]}")

    def check_companions_seen(self, seen):
        """While grown, each companion was in squeue with its name and comment, and the daemons on
        its nodes ran as its steps; sacct lists it, COMPLETED (given back whole), or CANCELLED
        at the job's end."""
        if not self.c.companion:
            check(not seen, f"companions on a cluster that permits expansion: {seen}")
            return
        check(seen, f"no companion of job {self.id} was seen in squeue")
        for comp in seen.values():
            check(comp["name"] == f"bellows-grow-{self.id}" and comp["comment"] == f"bellows:companion-of:{self.id}",
                  f"companion {comp['id']}: name {comp['name']!r}, comment {comp['comment']!r}")
            # slurmdbd may hear of the steps first (the allocation's row then reads "allocation",
            # PENDING) when the companion lived for a second or less.
            deadline = time.monotonic() + 20
            while True:
                rows = [row.split("|") for row in self.c.run(
                    ["sacct", "-n", "-P", "-j", comp["id"], "-o", "JobID,JobName,State,NodeList"]).stdout.splitlines()]
                allocation = [row for row in rows if row[0] == comp["id"]]
                if (allocation and allocation[0][1] == f"bellows-grow-{self.id}" and
                        allocation[-1][2] in ("COMPLETED", "CANCELLED")) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            check(allocation and allocation[0][1] == f"bellows-grow-{self.id}" and
                  allocation[-1][2] in ("COMPLETED", "CANCELLED"), f"sacct -j {comp['id']}: {rows}")
            steps = {row[3] for row in rows if row[1] == "bellowsd"}
            check(steps and steps <= set(comp["nodes"]),
                  f"sacct -j {comp['id']}: bellowsd steps on {sorted(steps)}, expected on {comp['nodes']}")
        log(f"companions of job {self.id}: " + ", ".join(
            f"{comp['id']} on {','.join(comp['nodes'])}" for comp in seen.values()) +
            " (name, comment, bellowsd steps of their own; sacct lists them)")

    def watch_companions(self, seen, steps):
        """Records the companions in the queue and which Slurm job each daemon step runs in."""
        for comp in self.companions():
            if comp["state"] == "RUNNING":
                seen.setdefault(comp["id"], comp)
        for node, job in self.step_jobs().items():
            steps[node] = job

    def bellows(self, *command, timeout=30, login_shell=False):
        """Runs bellows COMMAND with the job's BELLOWS_RUN_DIR, or as from a login shell
        that knows only the job id."""
        env = self.c.env if login_shell else self.env
        return subprocess.run([self.args.bellows, *command], env=env, capture_output=True,
                              text=True, timeout=timeout)

    def status(self):
        """`bellows status JOB --json`, or None while the controller does not answer yet."""
        result = self.bellows("status", self.id, "--json")
        return json.loads(result.stdout) if result.returncode == 0 else None

    def settled_on(self, count):
        """True when the job holds count nodes, runs count ranks and no resize is in flight."""
        s = self.status()
        return (s is not None and s["active_resize"] is None and len(s["nodes"]) == count
                and s["ranks"] == count and len(self.nodes()) == count)

    def wait(self, what, condition, timeout):
        deadline = time.monotonic() + timeout
        while not condition():
            state = self.state()
            check(state in ("PENDING", "RUNNING"), f"job {self.id} ended {state} while waiting for "
                  f"{what}; output:\n{self.output_tail()}")
            check(time.monotonic() < deadline, f"job {self.id}: no {what} within {timeout} s")
            time.sleep(0.1)
        log(f"job {self.id}: {what} ({self.since():.2f} s after submission)")

    def wait_end(self, timeout):
        deadline = time.monotonic() + timeout
        while (state := self.state()) not in ENDED:
            check(time.monotonic() < deadline, f"job {self.id} still {state} after {timeout} s")
            time.sleep(0.2)
        log(f"job {self.id} {state} {self.since():.2f} s after submission")
        check(state == "COMPLETED", f"job {self.id} ended {state}; output:\n{self.output_tail()}")

    def cancel(self):
        self.c.run(["scancel", self.id], ok=False)

    def output(self):
        path = self.work / "job.out"
        return path.read_text() if path.exists() else ""

    def output_tail(self, count=15):
        """The last lines of the output that are not the program's per-iteration lines."""
        lines = [line for line in self.output().splitlines() if not slurm_evidence.is_progress(line)]
        return "\n".join(lines[-count:])

    def report(self, ranks=None, path=None):
        """The application's JSON line, from its output or from the file `path` it appended it
        to (--report): it must have verified (on `ranks` ranks if given)."""
        text = self.output() if path is None else (path.read_text() if path.exists() else "")
        reports = [line for line in text.splitlines() if line.startswith("{") and "verified" in line]
        check(reports, f"no report in {'the output' if path is None else path} of job {self.id}:\n{self.output_tail()}")
        report = json.loads(reports[-1])
        check(report.get("verified") is True, f"the result did not verify: {reports[-1][:400]}")
        check(ranks is None or report.get("ranks") == ranks, f"the job ended on {report.get('ranks')} ranks, expected {ranks}")
        log(f"{report['app']} verified on {report['ranks']} ranks")
        return report

    def events(self):
        path = self.job_dir / "events.jsonl"
        check(path.exists(), f"no event log {path}")
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def accounting(self):
        """sacct's rows of the job (one per size it had), once the last one is COMPLETED."""
        deadline = time.monotonic() + 20
        while True:
            rows = [row.split("|") for row in self.c.run(
                ["sacct", "-n", "-X", "-P", "-j", self.id, "-o", "JobID,State,NNodes"]).stdout.split()]
            rows = [row for row in rows if row[0] == self.id]
            if (rows and rows[-1][1] == "COMPLETED") or time.monotonic() > deadline:
                log(f"sacct -j {self.id}: {[f'{s}/{n}' for _, s, n in rows]}")
                return [(state, int(nodes)) for _, state, nodes in rows]
            time.sleep(0.2)

    def check_nothing_left(self):
        # A job cancelled at the end (a blocker) may still be COMPLETING for a moment.
        deadline = time.monotonic() + 30
        while (queue := self.c.run(["squeue", "-h", "-o", "%i %j %T"]).stdout.strip()) and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        check(not queue, f"jobs left in the queue 30 s after the test's end (a helper job or companion?): {queue}")
        self.c.wait_idle()
        time.sleep(0.5)
        left = processes_mentioning(str(self.job_dir))
        check(not left, "processes of the job are left: " + ", ".join(describe(p) for p in left))
        # Named after the job id and a hash of the job directory: other clusters on this host
        # (other build trees) have jobs of the same id.
        sockets = socket_root(self.c.env) / f"{self.id}-{fnv1a(str(self.job_dir.absolute()))}"
        check(not sockets.exists(), f"the controller's socket directory is left: {sockets}")
        log("no job, helper job, companion, step, process or socket of the run is left; every node is idle")

    def check_logs(self, allowed=()):
        """Once the job has ended: no warning or error in its batch output (bellows run's) nor
        in a node's bellowsd.log but those of `allowed`."""
        check_job_logs(self.job_dir, self.output(), allowed)


def fnv1a(text):
    """FNV-1a, 32 bits, as 8 hex digits (transport/src/socket_directory.cpp)."""
    h = 2166136261
    for byte in text.encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return f"{h:08x}"


def socket_root(env):
    """Where a controller started with env binds its socket (transport/socket_directory.hpp)."""
    if env.get("BELLOWS_SOCKET_DIR"):
        return Path(env["BELLOWS_SOCKET_DIR"])
    if env.get("XDG_RUNTIME_DIR") and Path(env["XDG_RUNTIME_DIR"]).is_dir():
        return Path(env["XDG_RUNTIME_DIR"]) / "bellows"
    return Path(f"/tmp/bellows-{os.geteuid()}/sockets")


def committed(events):
    return [e for e in events if e["to"] == "committed" and not e["refused"]]


def daemon_steps(c, job):
    """The nodes on which job (an ElasticJob) runs a bellowsd step now, in it or its companions."""
    return sorted(job.step_jobs())


def own_sizes(c, sizes):
    """sacct's rows of a job that grew by companions: the job itself never changed size."""
    check(sizes == [("COMPLETED", 1)], f"sacct: {sizes}, expected the job COMPLETED on its 1 node "
          "(it grew by companion allocations)")


def start_clean(c, name):
    # select/linear may have lost count of nodes that joined and left a job by expansion
    # (docs/slurm.md, Troubleshooting): rebuild its books first.
    c.run(["scontrol", "reconfigure"])
    c.wait_idle()
    return c.workdir(name)


# ------------------------------------------------------------------ operator shrink




def check_on_their_hosts(c, args, job, nodes):
    """On a cluster of separate hosts: one bellowsd and one rank of the job in each node's network
    namespace (the node's own host), the rank with the node's host name."""
    holders = {f"n{i}": int((c.dir / "run" / f"host-n{i}.pid").read_text().split()[0]) for i in range(1, NODES + 1)}
    deadline = time.monotonic() + 10
    while True:
        daemons = sorted(filter(None, (host_of(p, holders) for p in processes_of(job.job_dir, "bellowsd"))))
        ranks = sorted(filter(None, (host_of(p, holders) for p in processes_of(job.job_dir, args.app))))
        if (daemons == sorted(nodes) and ranks == sorted(nodes)) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    check(daemons == sorted(nodes), f"bellowsd processes on the hosts {daemons}, expected one on each of {nodes}")
    check(ranks == sorted(nodes), f"ranks on the hosts {ranks}, expected one on each of {nodes}")
    log(f"one bellowsd and one rank in the network namespace of each of {nodes}")


def test_run_slurm(c, args):
    """bellows run --backend slurm in a batch job: the policy grows the job from 1 to 3 nodes
    under its own job id, the daemons run as steps on the job's nodes, an operator shrinks it
    back to its batch host (bellows resize -2), the GEMM verifies. The job directory's path
    has 200 characters and more (BELLOWS_RUN_DIR in a deep project tree)."""
    outside = subprocess.run([args.bellows, "run", "--backend", "slurm", "--", "true"],
                             env={k: v for k, v in c.env.items() if k != "SLURM_JOB_ID"},
                             capture_output=True, text=True, timeout=30)
    check(outside.returncode == 2 and
          "bellows run --backend slurm runs inside a Slurm job" in outside.stderr,
          f"outside a job: exit {outside.returncode}, {outside.stderr!r}")
    log(f"outside a job: {outside.stderr.strip()}")
    work = start_clean(c, "run_slurm")
    job = ElasticJob(c, args, work, "e2e-run", ["-N1", "--elastic=1:3"],
                     f"{args.app} --n 1536 --tile 256 --iterations 60 --steal on --verify",
                     policy=GROW_POLICY, run_dir_length=200)
    log(f"job directory {job.job_dir} ({len(str(job.job_dir))} characters)")
    steps = set()
    seen, step_jobs = {}, {}
    try:
        def grown():
            steps.update(daemon_steps(c, job))
            job.watch_companions(seen, step_jobs)
            return job.settled_on(3)
        job.wait("3 nodes, 3 ranks", grown, 60)
        grown_to = job.nodes()
        job.watch_companions(seen, step_jobs)
        if c.separate_hosts:
            check_on_their_hosts(c, args, job, grown_to)
        # From a login shell with the job id only: the job's comment names its directory.
        login = job.bellows("status", job.id, "--json", login_shell=True)
        check(login.returncode == 0 and json.loads(login.stdout)["nodes"] == grown_to,
              f"bellows status {job.id} from a login shell: {login.returncode} {login.stdout} {login.stderr}")
        log(f"bellows status {job.id} from a login shell: nodes {json.loads(login.stdout)['nodes']}")
        time.sleep(1.1)  # sacct keeps one row per size and start second: keep the sizes apart
        shrunk = job.bellows("resize", "-2", "--job", job.id, "--reason", "operator gives two nodes back")
        log(f"bellows resize -2: {shrunk.stdout.strip()} {shrunk.stderr.strip()}")
        check(shrunk.returncode == 0, f"bellows resize -2 failed: {shrunk}")
        job.wait("1 node again", lambda: job.settled_on(1), 30)
        shrunk_to = job.nodes()
        check(not job.companions(), f"companions left after the shrink: {job.companions()}")
        job.wait_end(150)
    finally:
        job.cancel()
    check(shrunk_to == grown_to[:1], f"after the shrink job {job.id} ran on {shrunk_to}, expected "
          f"its batch host {grown_to[0]}")
    log(f"daemon steps seen on {sorted(steps)}")
    check(sorted(steps) == sorted(grown_to), f"expected bellowsd steps on {grown_to}, saw {sorted(steps)}")
    job.check_strategy()
    job.check_companions_seen(seen)
    for node in grown_to:
        holder = next((comp["id"] for comp in seen.values() if node in comp["nodes"]), job.id)
        check(step_jobs.get(node) == holder, f"the daemon on {node} ran in job {step_jobs.get(node)}, "
              f"expected {holder}")
    log(f"daemon steps by Slurm job: {step_jobs}")
    job.report(ranks=1)

    events = job.events()
    done = committed(events)
    check(any(e["kind"] == "expand" and e["requester"] == "policy" for e in done),
          f"no committed policy expand: {events}")
    check(any(e["kind"] == "shrink" and e["requester"] == "operator" for e in done),
          f"no committed operator shrink: {events}")
    check(not [e for e in events if e["to"] == "aborted"], f"aborted resizes: {events}")
    # Every daemon reached the controller over tcp with the job's key (a real cluster's nodes
    # cannot reach a Unix socket of the batch host).
    endpoint = (job.job_dir / "controller.endpoint").read_text().strip()
    key_mode = (job.job_dir / "controller.key").stat().st_mode & 0o777
    check(endpoint.startswith("tcp://") and key_mode == 0o600,
          f"controller.endpoint {endpoint!r}, controller.key mode {key_mode:o}: expected tcp:// and 0600")
    for node in grown_to:
        text = (job.job_dir / "nodes" / node / "bellowsd.log").read_text()
        check(f"registered with the controller at {endpoint}" in text,
              f"the daemon on {node} did not register at {endpoint}:\n{text}")
    # The ranks of the nodes the job grew onto were started by those nodes' daemons.
    for node in grown_to[1:]:
        text = (job.job_dir / "nodes" / node / "bellowsd.log").read_text()
        check("started the rank of resize" in text, f"the daemon on {node} started no rank:\n{text}")
    log(f"every daemon registered with the controller at {endpoint} (job key 0600)")
    # The daemons of the released nodes stopped on the SIGINT srun forwarded, not killed.
    for node in grown_to[1:]:
        text = (job.job_dir / "nodes" / node / "bellowsd.log").read_text()
        check(re.search(r"received signal 2 \(SIGINT\)( from [^:]+)?: stopping", text) is not None
              and "Killed" not in text,
              f"the daemon on {node} did not stop cleanly:\n{text}")
    log(f"event log: committed {[(e['resize'], e['kind'], e['requester']) for e in done]}")
    login = job.bellows("events", job.id, login_shell=True)
    check(login.returncode == 0 and "operator gives two nodes back" in login.stdout,
          f"bellows events {job.id} from a login shell: {login.returncode} {login.stdout} {login.stderr}")
    missing = job.bellows("status", "999999", login_shell=True)
    check(missing.returncode != 0 and "no job 999999" in missing.stderr, f"status of no job: {missing}")
    log(f"from a login shell: bellows events {job.id} lists the resizes; job 999999: {missing.stderr.strip()}")
    # One row per size of the job: RESIZING on 1 node, RESIZING on 3, COMPLETED on 1 (the
    # first two share a row when the policy grew the job within the second it started).
    sizes = job.accounting()
    if c.companion:
        own_sizes(c, sizes)
    else:
        check(sizes in ([("RESIZING", 1), ("RESIZING", 3), ("COMPLETED", 1)], [("RESIZING", 3), ("COMPLETED", 1)]),
              f"sacct: {sizes}")
    job.check_nothing_left()
    job.check_logs()


# ------------------------------------------------------------------ queue pressure


YIELD_POLICY = """\
nodes:
  min: 2
  max: 6
  step: 2
expand:
  combine: all
  idle_nodes_at_least: 2
  ready_tasks_per_node_above: 1
shrink:
  pending_jobs_at_least: 1
tick: 250ms
hysteresis_ticks: 1
cooldown: 1s
resize_timeout: 1m
"""


def test_grow_and_yield(c, args):
    """An elastic Cholesky submitted with -N1 --elastic=2:6 grows to its minimum before it
    starts, then onto the idle nodes (policy); a rigid job that needs two nodes makes the
    policy (pending jobs) shrink it, and the rigid job runs on the nodes it gave back."""
    work = start_clean(c, "grow_and_yield")
    job = ElasticJob(c, args, work, "e2e-elastic", ["-N1", "--elastic=2:6"],
                     f"{args.cholesky} --n 2048 --tile 256 --iterations 90 --steal on --verify",
                     policy=YIELD_POLICY)
    rigid = None
    seen, step_jobs = {}, {}
    try:
        job.wait("its minimum of 2 nodes", lambda: len(job.nodes()) >= 2, 60)
        job.wait("every node of the cluster (4 nodes, 4 ranks)", lambda: job.settled_on(4), 60)
        job.watch_companions(seen, step_jobs)
        states = c.node_states()
        check(all(s == "allocated" for s in states.values()), f"sinfo with the job on 4 nodes: {states}")
        grown_to = job.nodes()
        check(sorted(daemon_steps(c, job)) == sorted(grown_to),
              f"bellowsd steps on {daemon_steps(c, job)}, expected {grown_to}")

        asked = time.monotonic()
        rigid = c.run(["sbatch", "--parsable", "-N2", "-J", "e2e-rigid", "-D", str(work), "-o", "rigid.out",
                       "--wrap", "srun -N2 printenv SLURMD_NODENAME; sleep 2"]).stdout.strip()
        log(f"submitted rigid job {rigid} (-N2) while every node is the elastic job's")
        job.wait("2 nodes again after the rigid job queued", lambda: job.settled_on(2), 30)
        kept = job.nodes()
        left_companions = [n for comp in job.companions() for n in comp["nodes"]]
        check(not set(left_companions) & set(grown_to) - set(kept),
              f"companions still hold released nodes: {job.companions()}")
        released = sorted(set(grown_to) - set(kept))
        check(kept[0] == grown_to[0], f"the batch host {grown_to[0]} was given back: kept {kept}")
        state = c.wait_job_state(rigid, ("RUNNING",) + ENDED, timeout=30)
        log(f"rigid job {rigid} {state} {time.monotonic() - asked:.2f} s after its submission")
        rigid_nodes = nodelist_names(c, c.job_field(rigid, "NodeList"))
        check(sorted(rigid_nodes) == released, f"rigid job {rigid} runs on {rigid_nodes}, the elastic "
              f"job gave back {released}")
        left = [p for node in released for p in processes_mentioning(str(job.job_dir / "nodes" / node))]
        check(not left, "processes of the elastic job left on the released nodes: "
              + ", ".join(describe(p) for p in left))
        check(sorted(daemon_steps(c, job)) == sorted(kept),
              f"bellowsd steps on {daemon_steps(c, job)}, expected {kept}")
        log(f"the elastic job gave back {released}; rigid job {rigid} runs there, nothing of the "
            "elastic job is left on them")
        c.wait_job_state(rigid, ENDED, timeout=30)
        job.wait_end(150)
    finally:
        job.cancel()
        if rigid:
            c.run(["scancel", rigid], ok=False)
    check(c.job_field(rigid, "JobState") == "COMPLETED", f"rigid job {rigid}: {c.job_field(rigid, 'JobState')}")
    ran_on = sorted((work / "rigid.out").read_text().split())
    check(ran_on == released, f"the rigid job's step ran on {ran_on}, expected {released}")
    report = job.report()
    job.check_strategy()
    job.check_companions_seen(seen)
    events = job.events()
    done = committed(events)
    expands = [e for e in done if e["kind"] == "expand"]
    shrinks = [e for e in done if e["kind"] == "shrink"]
    check(expands and expands[0]["requester"] == "policy", f"no committed policy expand: {events}")
    check(shrinks and shrinks[0]["requester"] == "policy" and "pending" in shrinks[0]["reason"],
          f"no committed policy shrink for the pending job: {events}")
    log(f"shrink: {shrinks[0]['reason']}")
    # One row per size and start second: the start on 1 node, the growth to 2 (0.4 s later)
    # and the one to 4 may share a second, and so may a last growth and the job's end.
    sizes = job.accounting()
    if c.companion:
        own_sizes(c, sizes)
        check(report["ranks"] >= 2, f"ended on {report['ranks']} ranks, below its minimum")
        job.check_nothing_left()
        job.check_logs()
        return
    check(sizes[0][1] in (1, 2) and ("RESIZING", 4) in sizes and sizes[-1][0] == "COMPLETED" and
          all(state == "RESIZING" for state, _ in sizes[:-1]) and all(nodes in (1, 2, 4) for _, nodes in sizes),
          f"sacct: {sizes}, expected (1) -> 2 -> 4 -> ... -> COMPLETED")
    # The rigid job's end lets the policy grow the job again. The Cholesky may end while that
    # growth is under way (the nodes merged into the job, its ranks not started): the growth
    # then ends aborted (the first rank gone, or job_ended) and never commits.
    regrowth = [e for e in events if e["kind"] == "expand" and e["resize"] > shrinks[0]["resize"]]
    cut_short = regrowth and not [e for e in regrowth if e["to"] == "committed"]
    check(report["ranks"] == sizes[-1][1] or (cut_short and report["ranks"] < sizes[-1][1]),
          f"ended on {report['ranks']} ranks, sacct says {sizes[-1][1]} nodes; events after the "
          f"shrink: {regrowth}")
    job.check_nothing_left()
    job.check_logs()


# ------------------------------------------------------------------ not granted


# No condition: the job resizes only when asked. A resize may take 4 s, so Slurm is given
# 2 s to grant (controller.rm_answer_grace, 2 s, is kept for its answer).
ASKED_ONLY_POLICY = """\
nodes:
  min: 1
  max: 2
resize_timeout: 4s
"""


def test_expand_not_granted(c, args):
    """Every other node is busy: an expansion (bellows resize +1) is not granted, the helper
    job is cancelled, the event log says why, and the job finishes at its size. (The policy
    itself never asks while the partition has no idle node.)"""
    work = start_clean(c, "expand_not_granted")
    blocker = c.run(["sbatch", "--parsable", f"-N{NODES - 1}", "-J", "e2e-blocker", "-D", str(work),
                     "-o", "/dev/null", "--wrap", "sleep 300"]).stdout.strip()
    job = None
    try:
        c.wait_job_state(blocker, ("RUNNING",))
        job = ElasticJob(c, args, work, "e2e-wants-more", ["-N1", "--elastic=1:2"],
                         f"{args.app} --n 1024 --tile 256 --iterations 200 --verify", policy=ASKED_ONLY_POLICY)
        job.wait("the controller", lambda: job.settled_on(1), 60)
        asked = job.bellows("resize", "+1", "--job", job.id, "--reason", "more nodes, please")
        check(asked.returncode == 0, f"bellows resize +1: {asked.returncode} {asked.stderr}")
        log(f"bellows resize +1: {asked.stdout.strip()}")

        def expand_ended():
            return any(e["kind"] == "expand" and e["to"] == "aborted" for e in job.events())
        job.wait("the expand aborted", expand_ended, 30)
        queue = c.run(["squeue", "-h", "-o", "%i %j %T"]).stdout.split("\n")
        check(sorted(line.split()[0] for line in queue if line.strip()) == sorted([blocker, job.id]),
              f"the queue holds more than the two jobs (a helper job or companion left?): {queue}")
        check(len(job.nodes()) == 1 and job.state() == "RUNNING", f"job {job.id}: {job.state()} on {job.nodes()}")
        job.wait_end(150)
    finally:
        if job:
            job.cancel()
        c.run(["scancel", blocker], ok=False)
    job.report(ranks=1)
    events = job.events()
    aborted = [e for e in events if e["kind"] == "expand" and e["to"] == "aborted"]
    check(len(aborted) == 1, f"expected one aborted expand: {events}")
    why = aborted[0]["detail"]
    log(f"event log: expand {aborted[0]['from']} -> aborted on {aborted[0]['event']}: {why}")
    kind = "companion job" if c.companion else "helper job"
    check(aborted[0]["event"] == "rm_timeout" and "no idle node" in why and "cancelled it" in why
          and kind in why, f"the event log does not say why (a {kind}): {aborted[0]}")
    job.check_strategy()
    check(not committed(events), f"committed resizes: {events}")
    sizes = job.accounting()
    check(sizes == [("COMPLETED", 1)], f"sacct: {sizes}")
    job.check_nothing_left()
    job.check_logs()


# ------------------------------------------------------------------ cycles


def log_rank_stacks(job, app):
    """Logs where each rank of the job is (every thread's innermost frames, by gdb where it is
    installed): for a resize that does not finish, which call each rank waits in."""
    if shutil.which("gdb") is None:
        log("gdb is not installed: no stacks of the ranks")
        return
    for pid in processes_of(job.job_dir, app):
        try:
            out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt 15"],
                                 capture_output=True, text=True, timeout=30).stdout
        except subprocess.TimeoutExpired:
            out = "(gdb did not answer in 30 s)"
        frames = [line for line in out.splitlines() if line.startswith(("Thread ", "#", "("))]
        log(f"stacks of {describe(pid)}:\n  " + "\n  ".join(frames))


CYCLES = 20
CYCLE_ITERATIONS = 3000  # 20-45 ms each, quiet to loaded: outlasts the 20-25 s of cycles


def test_resize_cycles(c, args):
    """20 expand/shrink cycles (bellows resize +1, then -1) on one running job: each one
    commits, no zombie, no helper job or node is left, the result verifies."""
    work = start_clean(c, "resize_cycles")
    job = ElasticJob(c, args, work, "e2e-cycles", ["-N1", "--elastic=1:2"],
                     f"{args.app} --n 768 --tile 256 --iterations {CYCLE_ITERATIONS} --verify")
    try:
        job.wait("the controller", lambda: job.settled_on(1), 60)
        began = time.monotonic()
        for cycle in range(1, CYCLES + 1):
            for delta, size in (("+1", 2), ("-1", 1)):
                asked = job.bellows("resize", delta, "--job", job.id, "--reason", f"cycle {cycle}")
                check(asked.returncode == 0, f"cycle {cycle}: bellows resize {delta}: {asked.stderr}")
                deadline = time.monotonic() + 30
                while not job.settled_on(size):
                    check(job.state() == "RUNNING", f"cycle {cycle}: job {job.id} ended before the "
                          f"{CYCLES} cycles; output:\n{job.output_tail()}")
                    if time.monotonic() >= deadline:
                        log_rank_stacks(job, args.app)
                        check(False, f"cycle {cycle}: {delta} not done in 30 s: {job.status()}")
                    time.sleep(0.05)
        log(f"{CYCLES} cycles in {time.monotonic() - began:.1f} s")
        controller = [p for p in processes_mentioning(f"BELLOWS_RUN_DIR={job.runs}") if
                      "bellows" in describe(p) and "run" in Path(f"/proc/{p}/cmdline").read_text()]
        zombies = zombies_of(set(controller))
        check(not zombies, "zombies under the controller: " + ", ".join(describe(p) for p in zombies))
        queue = c.run(["squeue", "-h", "-o", "%i %j %T"]).stdout.split("\n")
        check([line.split()[0] for line in queue if line.strip()] == [job.id],
              f"the queue holds more than the job (a helper job or companion left?): {queue}")
        check(daemon_steps(c, job) == job.nodes(), f"bellowsd steps on {daemon_steps(c, job)}")
        log(f"after the cycles: no zombie under the controller {controller}, no helper job, "
            f"one bellowsd step")
        job.wait_end(150)
    finally:
        job.cancel()
    job.report(ranks=1)
    events = job.events()
    done = committed(events)
    check(len(done) == 2 * CYCLES and not [e for e in events if e["to"] == "aborted"],
          f"{len(done)} committed resizes, expected {2 * CYCLES}: {[e for e in events if e['to'] == 'aborted']}")
    job.check_strategy()
    sizes = job.accounting()
    if c.companion:
        own_sizes(c, sizes)
        # One companion per expansion, each given back whole at its shrink.
        rows = [row.split("|") for row in c.run(["sacct", "-n", "-X", "-P", "--name", f"bellows-grow-{job.id}",
                                                 "-o", "JobID,State,NNodes"]).stdout.split()]
        check(len(rows) == CYCLES and all(row[1] == "COMPLETED" and row[2] == "1" for row in rows),
              f"sacct --name bellows-grow-{job.id}: {rows}, expected {CYCLES} companions COMPLETED on 1 node")
        log(f"sacct: {CYCLES} companions of job {job.id}, each COMPLETED on 1 node")
        job.check_nothing_left()
        job.check_logs()
        return
    # slurmdbd keeps one row per size and start second: resizes within one second share a row.
    check(sizes[-1] == ("COMPLETED", 1) and all(s in (("RESIZING", 1), ("RESIZING", 2)) for s in sizes[:-1])
          and len(sizes) > CYCLES / 2, f"sacct: {sizes}")
    job.check_nothing_left()
    job.check_logs()


# ------------------------------------------------------------------ cancelled while grown


def test_cancel_grown(c, args):
    """scancel of a job the policy grew to 3 nodes: bellows run stops the program, its daemons
    and (on a cluster without permit_job_expansion) completes its companion; nothing of the job
    is left in the queue within seconds."""
    work = start_clean(c, "cancel_grown")
    job = ElasticJob(c, args, work, "e2e-cancel", ["-N1", "--elastic=1:3"],
                     f"{args.app} --n 2048 --tile 256 --iterations 400 --verify", policy=GROW_POLICY)
    seen, step_jobs = {}, {}
    try:
        job.wait("3 nodes, 3 ranks", lambda: job.settled_on(3), 60)
        job.watch_companions(seen, step_jobs)
        job.cancel()
        asked = time.monotonic()
        deadline = asked + 15
        while (queue := c.run(["squeue", "-h", "-o", "%i %j %T"]).stdout.strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        check(not queue, f"left in the queue 15 s after scancel {job.id}: {queue}")
        log(f"scancel {job.id}: the queue is empty {time.monotonic() - asked:.2f} s later")
    finally:
        job.cancel()
    job.check_strategy()
    job.check_companions_seen(seen)
    job.check_nothing_left()
    # scancel: slurmstepd writes "error: *** JOB N ON NODE CANCELLED AT TIME ***" into the batch
    # output and "*** STEP N.K ON NODE CANCELLED AT TIME ***" into each daemon step's output,
    # which is its bellowsd.log.
    allowed = ["CANCELLED AT"]
    # The job's ranks die with it: a daemon that outlives its rank by a moment reports the
    # rank's launcher (mpiexec) as ended with a failure ("warning: the rank launcher
    # bellows-rank-n3-1:0 (pid 5085) exited with status 17"); one killed first says nothing.
    allowed.append("warning: the rank launcher ")
    if c.companion:
        # The srun of a companion's daemon step runs in the batch step, under bellows run: the
        # SIGTERM of scancel reaches it with the rest of the batch step, and srun ends its step
        # with SIGKILL on SIGTERM, so the daemon on a companion node is killed, not stopped, and
        # srun says so in that daemon's log ("srun: error: n2: task 0: Killed").
        allowed.append(": task 0: Killed")
    job.check_logs(allowed=allowed)


TESTS = {
    "run_slurm": test_run_slurm,
    "grow_and_yield": test_grow_and_yield,
    "expand_not_granted": test_expand_not_granted,
    "resize_cycles": test_resize_cycles,
    "cancel_grown": test_cancel_grown,
}


def keep_evidence(c, args):
    slurm_evidence.keep(c, args.test, [{"id": job.id, "output": job.work / "job.out", "job_dir": job.job_dir,
                                        "began": job.began_stamp} for job in SUBMITTED])


if __name__ == "__main__":
    sys.exit(main(__doc__, TESTS, on_failure=keep_evidence))
