#!/usr/bin/env python3
"""End to end on the Slurm cluster of separate hosts: an elastic job loses a whole node and
finishes.

  slurm_lost_node_e2e.py --dir DIR --local-slurm PATH --bellows CLI --app GEMM [--no-job-expansion]
                         [--heartbeat-timeout S] lost_node_replace | lost_node_shrink | lost_daemon
                         | lost_first_node | lost_first_node_cut | lost_first_node_cut_replace
                         | lost_node_cut_replace | lost_node_cut_shrink

--heartbeat-timeout (seconds, default 2; the policy's own default is 5) is the
recovery.heartbeat_timeout of the cut tests' policy: how long the controller's connection to
the cut-off node's daemon stays silent before the node counts as lost. The cut-off node's own
daemon follows it too (bellowsd --heartbeat-timeout): it ends the job's processes there about
2.4 times that long after the cut.

A GEMM with buddy checkpoints at every iteration, submitted `-N1 --elastic=1:3` (spank_bellows.so
submits it with Slurm's no-kill; with shrink, the elastic options are #SBATCH lines of its
script, with replace options on sbatch's command line: the plugin asks for no-kill on either
path), grows to 3 nodes by its policy (merged helper jobs, or
companion allocations with --no-job-expansion). Once it has run a few iterations on 3 nodes, its
last node dies: slurmctld sets it DOWN (`scontrol update State=DOWN`, what slurmctld does itself
once SlurmdTimeout has passed without an answer) and every process of that host is killed with
SIGKILL at once (its slurmd, slurmstepds, bellowsd, mpiexec and rank; the host's munged and
its namespace holder stay). Checks:

  - Slurm takes the node out of the job, or of the companion that held it, and the job runs on
    (squeue: RUNNING); without no-kill it would end NODE_FAIL;
  - the job recovers from its buddy checkpoints and finishes verified: on 3 ranks again with
    `recovery.on_node_loss: replace` (an expand by the policy whose reason names the lost node
    and the failure, granted on the cluster's idle node), on 2 ranks with `shrink`;
  - the event log shows the failure's phases (detected, agreed, recovered), naming the node;
  - sacct shows the job COMPLETED; nothing of the job is left on any host, nor on the dead one.

It prints kill -> detected, recovered and progress (the first iteration a surviving node
completed after the job recovered, from metrics.jsonl), and with replace kill -> the replacement
committed; `bench/slurm_recovery.py` takes medians of these. Afterwards the dead node's slurmd
is started again and the node resumed, so that the cluster's other tests find 4 idle nodes.

lost_daemon kills only the daemon of the last node (test_lost_daemon): what it started there
must go with it within seconds, while the job recovers.
"""

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import slurm_elastic_e2e
from slurm_cluster import ENDED, GROW_POLICY, check, describe, host_of, log, main, namespace
from slurm_elastic_e2e import ElasticJob, start_clean

ITERATIONS = 40
KILL_AFTER_ITERATIONS = 4  # on 3 nodes
# A `bellows status` answers this soon after a controller that took the job over published its
# endpoint: it looks for a new one every 0.2 s while it waits (the test asks every 0.2 s), where
# it used to wait for the old endpoint's reply for 5 s.
STATUS_AFTER_TAKEOVER = 2.5


def cut_off_ranks_end(heartbeat_timeout):
    """When the job's ranks (and their mpiexec) on a node cut off at time 0 end, in seconds:
    (earliest, latest). The node's daemon loses its controller's connection once nothing came
    for the heartbeat timeout T (the last heartbeat came up to a fifth of T before the cut),
    waits a grace of 0.4 T, then ends them once the controller's host has answered nothing for
    T (runtime::controller_loss_limits): at least 2.2 T; at most 2.4 T, a probe interval (up to
    1 s) and the teardown, for which 4 s more are allowed on a loaded 2-core host."""
    return 2.2 * heartbeat_timeout, 2.4 * heartbeat_timeout + 5.0


# The cut-off daemon itself exits up to this much later: once its ranks ended it asks slurmctld
# whether the job lost its batch host (bellows::daemon::end_job_if_batch_host_lost), which a
# cut-off node cannot reach; the question is bounded to 5 s.
DAEMON_AFTER_RANKS = 5.0 + 1.0


def cut_iterations(heartbeat_timeout):
    """Iterations of the cut tests' job: it must still run once the cut-off node's ranks have
    ended (at the latest cut_off_ranks_end()), so that the test sees Slurm keep it RUNNING then
    and the survivors finish while the node is still cut off. About 12 run before the cut (grown
    to 3 nodes, then KILL_AFTER_ITERATIONS more) and a few are redone after the recovery; an
    iteration takes 0.2-0.3 s here on 2 or 3 ranks (0.15 s on an idle host), so one every
    0.15 s covers the latest end: 85 iterations at 2 s (the job runs 20-25 s after the cut, the
    ranks there end 5-6 s after it), 133 at 5 s."""
    return 20 + round(cut_off_ranks_end(heartbeat_timeout)[1] / 0.15)


def record_time(record):
    """A record's wall-clock time (ISO 8601, UTC, to the millisecond), seconds since the epoch."""
    stamp = datetime.datetime.strptime(record["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def holders(c):
    """Node -> the pid of the process that keeps its namespaces."""
    return {path.name[len("host-"):-len(".pid")]: int(path.read_text().split()[0])
            for path in (c.dir / "run").glob("host-n*.pid")}


def command_name(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def running(pid):
    """True while pid is a process that is neither a zombie nor gone (a killed process waits
    for its parent, or for PID 1 when its parent died with it, to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def processes_on(c, node):
    """Every process in the network namespace of `node` but its holder and munged."""
    holder = holders(c)[node]
    net = namespace(holder, "net")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (holder, os.getpid()):
            continue
        if namespace(entry.name, "net") != net:
            continue
        name = command_name(entry.name)
        if name is not None and name != "munged" and running(entry.name):
            found.append(int(entry.name))
    return found


class EndTimes:
    """When each of `pids` stopped running, in seconds after `start`: polled every 0.05 s on a
    thread of its own, so that the times stay true while the test waits for something else."""

    def __init__(self, pids, start):
        self.start = start
        self.pids = list(pids)
        self.ended = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while True:
            with self._lock:
                for pid in self.pids:
                    if pid not in self.ended and not running(pid):
                        self.ended[pid] = time.time() - self.start
                if len(self.ended) == len(self.pids):
                    return
            time.sleep(0.05)

    def wait(self, pids, deadline):
        """Waits until every one of `pids` ended or `deadline` (time.time()) passed; returns
        (the pids still running, the last end among the others in seconds after start)."""
        while True:
            with self._lock:
                left = [pid for pid in pids if pid not in self.ended]
                last = max((self.ended[pid] for pid in pids if pid in self.ended), default=None)
            if not left or time.time() >= deadline:
                return left, last
            time.sleep(0.05)


def kill_node(c, node, only=None):
    """SIGKILL to every process of `node` (slurmd, slurmstepd, bellowsd, mpiexec, rank, ...), or
    to those named `only`, at once, as a node that loses power. Returns what was killed."""
    killed = []
    for _ in range(3):  # a process that forked while the first ones were killed
        pids = [pid for pid in processes_on(c, node) if only is None or command_name(pid) == only]
        if not pids:
            break
        for pid in pids:
            try:
                text = describe(pid)
                os.kill(pid, signal.SIGKILL)
                killed.append(text)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return killed


def bring_back(c, node):
    """Starts the slurmd of `node` again on its host (under a subreaper of its own, as local-slurm
    starts daemons) and resumes the node; returns once every node is idle."""
    log_file = open(c.dir / "log" / f"slurmd-{node}-again.out", "a")
    subprocess.Popen([c.local_slurm, "exec", str(c.dir), "--host", node, "--",
                      str(c.dir / "bin" / "bellows-subreaper"), str(c.dir / "run" / f"subreaper-{node}-again.pid"),
                      "--", "slurmd", "-N", node], env=c.env, stdin=subprocess.DEVNULL, stdout=log_file,
                     stderr=log_file, start_new_session=True)
    deadline = time.monotonic() + 30
    while "down" in c.node_states().get(node, "") or "*" in c.node_states().get(node, ""):
        c.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], ok=False)
        check(time.monotonic() < deadline, f"{node} is {c.node_states().get(node)} 30 s after its slurmd started again")
        time.sleep(0.2)
    c.wait_idle(30)
    log(f"{node}: slurmd started again, the node resumed; every node idle")


def grown_to_three(job):
    """Waits until `job` settled on 3 nodes and 3 ranks (its policy grows it) and ran
    KILL_AFTER_ITERATIONS iterations on them; returns its `bellows status` then."""
    job.wait("3 nodes, 3 ranks", lambda: job.settled_on(3), 60)
    grown_at = job.status()["iteration"]
    job.wait(f"{KILL_AFTER_ITERATIONS} iterations on 3 nodes",
             lambda: job.status()["iteration"] >= grown_at + KILL_AFTER_ITERATIONS, 60)
    return job.status()


def check_requeued_without_companions(job, since, what):
    """The companion cluster's end of a job that lost its batch host: the job itself holds only
    its first node (the others are companions'), so Slurm requeues it (a batch job of one node
    whose node fails: NODE_FAIL without requeue), and the daemons cancel the companions they ran
    in. `what` happened to the batch host at `since` (time.time())."""
    deadline = time.monotonic() + 60
    while (state := job.state()) == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    check(state != "RUNNING", f"job {job.id} still RUNNING 60 s after {what}")
    log(f"job {job.id} {state} {time.time() - since:.2f} s after {what} (Slurm's doing)")
    deadline = time.monotonic() + 60
    while (comps := job.companions()) and time.monotonic() < deadline:
        time.sleep(0.2)
    check(not comps, f"companions of job {job.id} left 60 s after {what}: {comps}")
    log(f"its companions cancelled {time.time() - since:.2f} s after {what}")


def check_nothing_left_on(c, nodes):
    """Within 30 s no process of the job runs on `nodes` (their slurmd, and the subreaper a
    lost-node test before may have started it under, stay)."""
    deadline = time.monotonic() + 30
    while (left := [f"{node}: {describe(pid)}" for node in nodes for pid in processes_on(c, node)
                    if command_name(pid) not in ("slurmd", "bellows-subreap")]) and time.monotonic() < deadline:
        time.sleep(0.2)
    check(not left, f"processes of the job left on {nodes}: {left}")


def test_lost_daemon(c, args):
    """Only the daemon of the job's last node is killed (SIGKILL to its bellowsd; the node, its
    slurmd and the job's rank there live on). The controller finds the node lost, stops the
    daemon's step at once (srun cancels it: Slurm kills the rank and mpiexec that outlived
    bellowsd) and gives the node back; nothing of the job is left on it within seconds, while
    the job recovers on the others (on_node_loss: shrink) and finishes verified on 2 ranks."""
    work = start_clean(c, "lost_daemon")
    policy = GROW_POLICY + "recovery:\n  on_node_loss: shrink\n"
    job = ElasticJob(c, args, work, "e2e-lost-daemon", ["-N1", "--elastic=1:3"],
                     f"{args.app} --n 768 --tile 128 --iterations {ITERATIONS} --kernel emulated "
                     "--emulated-gflops 2 --emulated-compute on --checkpoint on --checkpoint-every 1 --verify",
                     policy=policy)
    try:
        victim = grown_to_three(job)["nodes"][-1]
        # What the job has there: not the node's slurmd, nor the subreaper a lost-node test
        # before may have started it under (bring_back).
        of_job = {pid: describe(pid) for pid in processes_on(c, victim)
                  if command_name(pid) not in ("slurmd", "bellows-subreap")}
        for program in ("bellowsd", "mpiexec", Path(args.app).name):
            check(any(program in text for text in of_job.values()), f"no {program} on {victim}: {of_job}")
        daemon = next(pid for pid in of_job if command_name(pid) == "bellowsd")
        killed_at = time.time()
        os.kill(daemon, signal.SIGKILL)
        log(f"killed the bellowsd of {victim} (pid {daemon}); its node had {'; '.join(of_job.values())}")
        deadline = time.monotonic() + 5
        while (left := [pid for pid in of_job if running(pid)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(not left, f"5 s after its daemon was killed, {victim} still runs "
              + ", ".join(describe(pid) for pid in left))
        gone_after = time.time() - killed_at
        check(job.state() == "RUNNING", f"job {job.id} is {job.state()} after the daemon of {victim} died")
        log(f"nothing of the job is left on {victim} {gone_after:.2f} s after its daemon was killed; "
            f"the job runs on {job.nodes()}")
        job.wait_end(120)
    finally:
        job.cancel()
    report = job.report(ranks=2)
    sizes = [i["ranks"] for i in report["iterations"]]
    check(len(sizes) == ITERATIONS and sizes[-1] == 2, f"iterations ran on {sizes} ranks, expected {ITERATIONS}")
    events = job.events()
    failures = [e for e in events if e["kind"] == "failure" and not e["refused"]]
    phases = [e["to"] for e in failures]
    check(phases[:1] == ["detected"] and "agreed" in phases and phases[-1] == "recovered",
          f"the failure's phases are {phases}, expected detected, agreed, ..., recovered")
    check(failures[0]["event"] == "node_lost" and failures[0]["nodes"] == [victim],
          f"the failure is {failures[0]['event']} of {failures[0]['nodes']}, expected node_lost of {victim}")
    stamps = {e["to"]: record_time(e) - killed_at for e in failures}
    log(f"failure {failures[0]['resize']}: kill -> detected {stamps['detected']:.2f} s, agreed "
        f"{stamps['agreed']:.2f} s, recovered {stamps['recovered']:.2f} s")
    check(stamps["agreed"] < 2.0, f"the survivors were told {stamps['agreed']:.2f} s after the kill, expected "
          "at once (the controller does not wait for a dead daemon's step to stop)")
    refused = [e["detail"] for e in events if e["refused"]]
    check(not refused, f"refused events in the log: {refused}")
    sizes = job.accounting()
    check(sizes and sizes[-1][0] == "COMPLETED", f"sacct: {sizes}, expected the job COMPLETED")
    job.check_nothing_left()
    job.check_logs(allowed=LOST_DAEMON_LINES)


def test_lost_node(c, args, action):
    work = start_clean(c, f"lost_node_{action}")
    policy = GROW_POLICY + f"recovery:\n  on_node_loss: {action}\n"
    job = ElasticJob(c, args, work, f"e2e-lost-{action}", ["-N1", "--elastic=1:3"],
                     f"{args.app} --n 768 --tile 128 --iterations {ITERATIONS} --kernel emulated "
                     "--emulated-gflops 2 --emulated-compute on --checkpoint on --checkpoint-every 1 --verify",
                     policy=policy, directives=action == "shrink")
    victim, before = None, None
    try:
        status = grown_to_three(job)
        victim = status["nodes"][-1]
        holder_of_victim = job.step_jobs().get(victim)
        check(holder_of_victim, f"no bellowsd step on {victim}: {job.step_jobs()}")
        before = {pid: describe(pid) for pid in processes_on(c, victim)}
        for program in ("slurmd", "bellowsd", Path(args.app).name):
            check(any(program in text for text in before.values()),
                  f"no {program} on {victim} before its death: {list(before.values())}")
        # Its slurmd first: one that still answers brings a DOWN node back at once
        # (ReturnToService=2), and Slurm would give it to the next job.
        killed_at = time.time()
        killed = kill_node(c, victim, only="slurmd")
        c.run(["scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=e2e: the node died"])
        killed += kill_node(c, victim)
        log(f"{victim} died at iteration {status['iteration']}: set DOWN, then killed what was left of "
            f"its {len(before)} processes ({'; '.join(before.values())}): {'; '.join(killed)}")
        check_runs_without(c, job, victim, holder_of_victim, "went down")
        ctld = (c.dir / "log" / "slurmctld.log").read_text(errors="replace")
        check(f"Removing failed node {victim} from JobId={holder_of_victim}" in ctld,
              f"slurmctld.log does not say it removed {victim} from job {holder_of_victim}")
        log(f"slurmctld: Removing failed node {victim} from JobId={holder_of_victim} (no-kill)")
        job.wait_end(120)
    finally:
        job.cancel()
        if victim is not None:
            left = processes_on(c, victim)
            check(not left, f"processes left on the dead {victim}: " + ", ".join(describe(p) for p in left))
            if before is not None:
                stayed = [describe(pid) for pid in before if running(pid)]
                check(not stayed, f"processes of the dead {victim} left elsewhere: {stayed}")
            log(f"nothing of the job is left on {victim} (its munged and namespace holder stay)")
            bring_back(c, victim)
    check_recovered(job, action, victim, killed_at, "kill")
    job.check_nothing_left()
    job.check_logs(allowed=LOST_NODE_LINES)


def check_runs_without(c, job, victim, holder_of_victim, what_happened):
    """Once `victim` is lost (`what_happened` to it): within 10 s it is out of the job, or of the
    companion `holder_of_victim` that held it (Slurm took a DOWN node out itself; the
    controller gives a cut-off one back), and the job, and that companion, are RUNNING."""
    deadline = time.monotonic() + 10
    while victim in job.nodes() and time.monotonic() < deadline:
        time.sleep(0.1)
    check(job.state() == "RUNNING", f"job {job.id} is {job.state()} after {victim} {what_happened}")
    check(victim not in job.nodes(), f"{victim} still listed by job {job.id} or its companions: {job.nodes()}")
    if holder_of_victim != job.id:
        comp = [row for row in job.companions() if row["id"] == holder_of_victim]
        check(comp and comp[0]["state"] == "RUNNING",
              f"companion {holder_of_victim} that held {victim} is not running on: {job.companions()}")
        log(f"companion {holder_of_victim} runs on without {victim}: {comp[0]['nodes']}")
    squeue = c.run(["squeue", "-h", "-j", job.id, "-o", "%T %N"]).stdout.strip()
    log(f"squeue after the loss: job {job.id} {squeue}")


def check_recovered(job, action, victim, lost_at, how, iterations=ITERATIONS):
    """Once the job has ended: it finished verified on the ranks `action` leaves, the event log
    shows the loss of `victim` detected, agreed and recovered (and with replace, the policy's
    expand that replaced it committed), sacct says COMPLETED. Prints the times from `lost_at`
    (the moment of the kill or the cut, as `how` says) that bench/slurm_recovery.py reads."""
    final_ranks = 3 if action == "replace" else 2
    report = job.report(ranks=final_ranks)
    sizes = [i["ranks"] for i in report["iterations"]]
    check(len(sizes) == iterations and 2 in sizes and sizes[-1] == final_ranks,
          f"iterations ran on {sizes} ranks, expected {iterations}, some on 2, the last on {final_ranks}")

    events = job.events()
    failures = [e for e in events if e["kind"] == "failure" and not e["refused"]]
    phases = [e["to"] for e in failures]
    check(phases[:1] == ["detected"] and "agreed" in phases and phases[-1] == "recovered",
          f"the failure's phases are {phases}, expected detected, agreed, ..., recovered")
    detected = failures[0]
    # The node Slurm took out of the job counts as given back, not as a failed release.
    refused = [e["detail"] for e in events if e["refused"]]
    check(not refused, f"refused events in the log: {refused}")
    check(detected["nodes"] == [victim], f"the failure names {detected['nodes']}, expected [{victim!r}]")
    log(f"failure {detected['resize']}: {[(e['event'], e['to']) for e in failures]}; {detected['detail']}")
    stamps = {e["to"]: record_time(e) - lost_at for e in failures}
    metrics = [m for m in job_metrics(job) if "time" in m]
    # The first iteration a surviving node completed once the job had rolled back.
    after = [m for m in metrics if record_time(m) - lost_at > stamps["recovered"] and m.get("node") != victim]
    progress = record_time(after[0]) - lost_at if after else None
    expands = [e for e in events if e["kind"] == "expand"]
    replacement = None
    if action == "replace":
        wanted = f"replacing {victim}, lost in failure {detected['resize']} (recovery.on_node_loss: replace)"
        asked = [e for e in expands if e["reason"] == wanted]
        done = [e for e in asked if e["to"] == "committed" and not e["refused"]]
        check(done and asked[0]["requester"] == "policy",
              f"no committed expand by the policy with reason {wanted!r}: "
              f"{[(e['reason'], e['to'], e['refused']) for e in expands]}")
        replacement = record_time(done[0]) - lost_at
        # The replacement was asked for elsewhere (ExcNodeList: the lost node) and granted so.
        requested = [e for e in asked if e["to"] == "requested"]
        check(requested and f", not {victim}" in requested[0]["detail"],
              f"the replacement's request does not exclude {victim}: "
              f"{requested[0]['detail'] if requested else [(e['to'], e['detail']) for e in asked]!r}")
        new_nodes = sorted({node for e in asked for node in e.get("nodes", [])})
        check(new_nodes and victim not in new_nodes,
              f"the replacement of {victim} was granted {new_nodes}, expected a node other than {victim}")
        log(f"replacement of {victim}: {[(e['event'], e['to']) for e in asked]} on {new_nodes}; "
            f"requested: {requested[0]['detail']}")
    else:
        late = [e for e in expands if record_time(e) > lost_at]
        check(not late, f"an expand after the loss with on_node_loss: shrink: {[(e['reason'], e['to']) for e in late]}")
    log("recovery: {} -> detected {:.2f} s, recovered {:.2f} s, progress {} s{}".format(
        how, stamps["detected"], stamps["recovered"], f"{progress:.2f}" if progress is not None else "none",
        f", replacement committed {replacement:.2f} s" if replacement is not None else ""))

    sizes = job.accounting()
    check(sizes and sizes[-1][0] == "COMPLETED", f"sacct: {sizes}, expected the job COMPLETED")


def veth_of(c, node):
    """The host's end of `node`'s veth pair, on the cluster's bridge: the node's network cable."""
    holder = holders(c)[node]
    inside = subprocess.run(["nsenter", f"--net=/proc/{holder}/ns/net", "ip", "-o", "link", "show", "eth0"],
                            capture_output=True, text=True, check=True).stdout
    peer = re.search(r"eth0@if(\d+)", inside)
    check(peer, f"eth0 of {node} is not one end of a veth pair: {inside.strip()}")
    for line in subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout.splitlines():
        index, name = line.split(":")[:2]
        if index.strip() == peer.group(1):
            return name.strip().split("@")[0]
    raise AssertionError(f"no link of index {peer.group(1)} (the peer of eth0 on {node}) on this host")


def set_link(name, state):
    subprocess.run(["ip", "link", "set", name, state], check=True, capture_output=True)


def reconnect(c, node, veth, before):
    """Brings the veth of `node` up again; once the node answers slurmctld, what Slurm still had
    of the job there ends, the node is idle again, and no process of the job is left on it.
    slurmctld, which could not reach the node while it was cut off (it sent the kill of the
    job's step there), counts it as not responding until it hears from its slurmd: at its next
    ping of the node, 45 s later here, or at once when the slurmd registers again, which a
    SIGHUP makes it do (it reads its configuration again and registers)."""
    set_link(veth, "up")
    log(f"{veth} up again: {node} is back on the network")
    deadline = time.monotonic() + 60
    while (stayed := [pid for pid in before if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    check(not stayed, f"60 s after {node} came back, processes of the job are still there: "
          + ", ".join(describe(pid) for pid in stayed))
    state = c.node_states().get(node)
    if state != "idle":
        slurmds = [pid for pid in processes_on(c, node) if command_name(pid) == "slurmd"]
        check(slurmds, f"no slurmd on {node} after it came back")
        for pid in slurmds:
            os.kill(pid, signal.SIGHUP)
        log(f"{node} is {state} to slurmctld: SIGHUP to its slurmd (pid {', '.join(map(str, slurmds))}) to register again")
    deadline = time.monotonic() + 60
    while c.node_states().get(node) != "idle":
        if "down" in c.node_states().get(node, ""):
            c.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], ok=False)
        check(time.monotonic() < deadline, f"{node} is {c.node_states().get(node)} 60 s after it came back")
        time.sleep(0.2)
    c.wait_idle(30)
    left = [describe(pid) for pid in processes_on(c, node)
            if command_name(pid) not in ("slurmd", "bellows-subreap")]
    check(not left, f"processes left on {node} after it came back: {left}")
    log(f"{node}: idle again, nothing of the job left on it")


def test_cut_node(c, args, action):
    """The job's last node is cut from the network (the host's end of its veth taken down): its
    processes live on, but nothing it sends arrives and nothing arrives for it. The controller's
    heartbeats find it lost and the survivors recover on the controller's word (MPI reports
    nothing: no connection is reset); the cut-off daemon, whose controller's host answers
    nothing, ends the job's processes there; the survivors finish and finalize while the node
    is still cut off (they shut their connections to it down); Slurm keeps the job RUNNING and
    then COMPLETED. Then the node is brought back and must be idle with nothing of the job."""
    work = start_clean(c, f"lost_node_cut_{action}")
    heartbeat_ms = round(args.heartbeat_timeout * 1000)
    policy = GROW_POLICY + f"recovery:\n  on_node_loss: {action}\n  heartbeat_timeout: {heartbeat_ms}ms\n"
    iterations = cut_iterations(args.heartbeat_timeout)
    earliest, latest = cut_off_ranks_end(args.heartbeat_timeout)
    job = ElasticJob(c, args, work, f"e2e-cut-{action}", ["-N1", "--elastic=1:3"],
                     f"{args.app} --n 768 --tile 128 --iterations {iterations} --kernel emulated "
                     "--emulated-gflops 2 --emulated-compute on --checkpoint on --checkpoint-every 1 --verify",
                     policy=policy, directives=action == "shrink")
    victim, veth, of_job = None, None, {}
    try:
        status = grown_to_three(job)
        victim = status["nodes"][-1]
        holder_of_victim = job.step_jobs().get(victim)
        check(holder_of_victim, f"no bellowsd step on {victim}: {job.step_jobs()}")
        # What the job has there (not the node's slurmd, nor a subreaper bring_back started).
        of_job = {pid: describe(pid) for pid in processes_on(c, victim)
                  if command_name(pid) not in ("slurmd", "bellows-subreap")}
        for program in ("bellowsd", "mpiexec", Path(args.app).name):
            check(any(program in text for text in of_job.values()), f"no {program} on {victim}: {list(of_job.values())}")
        veth = veth_of(c, victim)
        names = {pid: command_name(pid) for pid in of_job}
        ranks = [pid for pid, name in names.items() if name not in ("slurmstepd", "bellowsd")]
        daemons = [pid for pid, name in names.items() if name == "bellowsd"]
        cut_at = time.time()
        set_link(veth, "down")
        # Timed from now on, while check_runs_without waits for slurmctld (seconds, at times).
        ends = EndTimes(ranks + daemons, cut_at)
        log(f"{victim} cut from the network at iteration {status['iteration']} ({veth} down); it runs "
            f"{'; '.join(of_job.values())}")
        # The cut-off daemon ends the job's processes on its node: its connection to the
        # controller closes after the heartbeat timeout T (--heartbeat-timeout, the policy's
        # recovery.heartbeat_timeout), the controller counts as gone 0.4 T later, and its
        # host must have answered nothing for T more (cut_off_ranks_end). Nothing else can
        # end them while the node is cut off (slurmctld cannot reach it, and the daemon's words
        # go to the srun of its step on the batch host, so they are lost too: the timing is
        # the evidence). Its slurmstepd waits to report the step's end until it is back.
        # Meanwhile the controller gives the node back: the job runs on without it.
        check_runs_without(c, job, victim, holder_of_victim, "was cut off")
        left, ranks_gone_after = ends.wait(ranks, cut_at + latest)
        check(not left, f"{time.time() - cut_at:.2f} s after the cut, {victim} still runs "
              + ", ".join(describe(pid) for pid in left))
        check(ranks_gone_after >= earliest, f"the job's ranks on the cut-off {victim} ended {ranks_gone_after:.2f} s "
              f"after the cut, before its daemon could have found its controller's host silent ({earliest:.1f} s)")
        check(job.state() == "RUNNING", f"job {job.id} is {job.state()} once the ranks of the cut-off {victim} ended")
        left, gone_after = ends.wait(daemons, cut_at + ranks_gone_after + DAEMON_AFTER_RANKS)
        check(not left, f"{time.time() - cut_at:.2f} s after the cut, {DAEMON_AFTER_RANKS:g} s after its ranks, "
              f"{victim} still runs " + ", ".join(describe(pid) for pid in left))
        log(f"on the cut-off {victim}, the job's mpiexec and rank ended {ranks_gone_after:.2f} s after the cut "
            f"(heartbeat timeout {args.heartbeat_timeout:g} s; expected {earliest:.1f} to {latest:.1f} s), "
            f"its bellowsd {gone_after:.2f} s after it; job {job.id} was RUNNING then")
        # Still cut off: the survivors' MPI_Finalize must not wait for the node.
        job.wait_end(120)
        check(all(not running(pid) for pid in ranks + daemons), f"a process of the job came back on {victim}")
        log(f"job {job.id} ended while {victim} was still cut off")
    finally:
        job.cancel()
        if veth is not None:
            reconnect(c, victim, veth, of_job)
    check_recovered(job, action, victim, cut_at, "cut", iterations=iterations)
    job.check_nothing_left()
    job.check_logs(allowed=CUT_NODE_LINES)


def test_lost_first_node(c, args):
    """The job's first node (its batch host: the batch script and `bellows run`) dies, whole, as
    test_lost_node kills a node. Slurm 22.05 takes it out of the no-kill job and keeps the job
    RUNNING on the others without its batch script (docs/slurm.md, "The job's first node").

    On the merge cluster the job survives it: the daemon of the first node left (in slurmctld's
    order) says why in the job's output and starts `bellows run --attach` in the job's
    allocation on its own node; the other daemon follows the new controller's endpoint. Checks:
    the takeover is said in the output, `bellows status` answers again with the two nodes left,
    the job runs to its last iteration on them (the controller's metrics), the controller ends
    the Slurm job itself and says so, sacct shows it COMPLETED, the event log has the attached
    line naming the lost node, nothing of the job is left on any node, no node is drained.

    On a cluster that grows jobs by companions the job holds only its first node, so Slurm
    requeues it at once, and the daemons cancel the companions they ran in."""
    work = start_clean(c, "lost_first_node")
    policy = GROW_POLICY + "recovery:\n  on_node_loss: shrink\n"
    job = ElasticJob(c, args, work, "e2e-lost-first", ["-N1", "--elastic=1:3", "--time=10"],
                     f"{args.app} --n 768 --tile 128 --iterations {ITERATIONS} --kernel emulated "
                     "--emulated-gflops 2 --emulated-compute on --checkpoint on --checkpoint-every 1 --verify",
                     policy=policy)
    victim, killed_at = None, None
    try:
        status = grown_to_three(job)
        victim = status["nodes"][0]
        others = status["nodes"][1:]
        killed_at = time.time()
        # Everything of it at once, as a host that loses power, and only then DOWN in slurmctld:
        # a srun of the host still alive when slurmctld handles the node's failure may act on it.
        killed = kill_node(c, victim)
        c.run(["scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=e2e: the batch host died"])
        log(f"the batch host {victim} died at iteration {status['iteration']}: {'; '.join(killed)}")
        if args.no_job_expansion:
            check_requeued_without_companions(job, killed_at, "its batch host died")
        else:
            check_taken_over_after_first_node(c, job, victim, others, killed_at)
        check_nothing_left_on(c, others)
    finally:
        job.cancel()
        if victim is not None:
            bring_back(c, victim)
    job.check_nothing_left()


def check_taken_over_after_first_node(c, job, victim, others, killed_at, declared=False, replaced=False):
    """The merge cluster's half of test_lost_first_node, from the loss of `victim` (the job's
    first node) in slurmctld at `killed_at` on (its kill, or its DOWN after a cut): the takeover
    by the daemon of the first node left, the job's run to its end under the new controller, and
    that end in Slurm and in the job's files. With `declared` (the survivors could not find the
    loss themselves), the new controller's failure that tells them rank 0 on `victim` is lost:
    detected, agreed, recovered; with `replaced` (recovery.on_node_loss: replace), then the
    policy's expand that replaces `victim` by another node, committed."""
    # The first controller's endpoint: the takeover comes seconds after the loss.
    endpoint_file = job.job_dir / "controller.endpoint"
    old_endpoint = endpoint_file.read_text().strip()
    left_in_order = c.run(["scontrol", "show", "hostnames", ",".join(others)]).stdout.split()
    taker = left_in_order[0]
    said = f"the daemon of {taker}, the first of them, starts a controller that takes it over"
    deadline = time.monotonic() + 30
    while not (lines := [l for l in job.output().splitlines() if l.startswith("bellows: the job's first node")]):
        check(time.monotonic() < deadline, f"no takeover said in the job's output 30 s after {victim} was lost:\n"
              f"{job.output_tail()}")
        time.sleep(0.2)
    check(f"the job's first node {victim} (its batch host" in lines[0] and said in lines[0],
          f"the job's output says {lines[0]!r}, expected the first node {victim} lost and {said!r}")
    log(f"{time.time() - killed_at:.2f} s after {victim} was lost, the job's output: {lines[0]}")
    check(job.state() == "RUNNING", f"job {job.id} is {job.state()} after its first node died")
    said_at = time.time()
    deadline = time.monotonic() + 30
    while not ((s := job.status()) and sorted(s["nodes"]) == sorted(others)):
        check(time.monotonic() < deadline, f"bellows status does not show job {job.id} on {others} 30 s after "
              f"{victim} died: {s and s['nodes']}")
        time.sleep(0.2)
    answered_at = time.time()
    # The new controller publishes its endpoint once it has the job; a `bellows status` asked
    # before that follows it there at once (it used to wait out its 5 s bound on the old one).
    published_at = endpoint_file.stat().st_mtime
    check(endpoint_file.read_text().strip() != old_endpoint,
          f"the new controller answered at the old endpoint {old_endpoint}, expected one on {others[0]}")
    check(answered_at - published_at < STATUS_AFTER_TAKEOVER,
          f"bellows status answered {answered_at - published_at:.2f} s after the new controller published its "
          f"endpoint, expected within {STATUS_AFTER_TAKEOVER:g} s")
    log(f"{answered_at - killed_at:.2f} s after {victim} was lost, bellows status answers: nodes {s['nodes']}, "
        f"ranks {s['ranks']}, iteration {s['iteration']}; {answered_at - said_at:.2f} s after the takeover was "
        f"said, {answered_at - published_at:.2f} s after the new controller published its endpoint "
        f"({published_at - said_at:.2f} s after the takeover was said)")
    deadline = time.monotonic() + 120
    while (state := job.state()) not in ENDED:
        check(time.monotonic() < deadline, f"job {job.id} still {state} 120 s after its first node died")
        time.sleep(0.2)
    log(f"job {job.id} {state} {time.time() - killed_at:.2f} s after its first node died")
    ended = [l for l in job.output().splitlines() if "this controller ends Slurm job" in l]
    check(ended and f"its batch script died with {victim}; this controller ends Slurm job {job.id} "
          "with exit status 0" in ended[0], f"the job's output does not say how it ended:\n{job.output_tail()}")
    log(f"the job's output: {ended[0]}")
    sizes = job.accounting()
    check(sizes and sizes[-1][0] == "COMPLETED", f"sacct: {sizes}, expected the job COMPLETED")
    record = json.loads((job.job_dir / "job.json").read_text())
    check(record.get("exit_status") == 0 and record.get("ended_at"),
          f"job.json does not record the end with exit status 0: {record.get('ended_at')!r} "
          f"{record.get('end')!r} {record.get('exit_status')!r}")
    log(f"job.json: ended {record['ended_at']} ({record['end']}), exit status {record['exit_status']}")
    events = job.events()
    attached = [e for e in events if e["event"] == "attached"]
    check(len(attached) == 1 and f"after the job's first node {victim} (its batch host) was lost" in attached[0]["reason"],
          f"expected one attached line naming {victim} lost: {[(e['event'], e.get('reason')) for e in attached]}")
    log(f"event log: attached by {attached[0]['reason']}")
    after = [e for e in events[events.index(attached[0]):] if e["kind"] == "failure"]
    log(f"failure records after the takeover: {[(e['resize'], e['event'], e['to'], e['detail']) for e in after]}")
    if declared:
        phases = [e["to"] for e in after if not e["refused"]]
        check(phases == ["detected", "agreed", "recovered"],
              f"the failure after the takeover went {phases}, expected detected, agreed, recovered")
        check(after[0]["event"] == "node_lost" and after[0]["nodes"] == [victim]
              and f"lost rank 0 on {victim}" in after[0]["detail"],
              f"the failure after the takeover is {after[0]['event']} of {after[0]['nodes']} ({after[0]['detail']}), "
              f"expected node_lost of rank 0 on {victim}")
        recovered = after[-1]
        check(f"without the lost ones (rank 0 on {victim})" in recovered["detail"],
              f"the recovery's line does not name rank 0 on {victim}: {recovered['detail']}")
        stamps = {e["to"]: record_time(e) - killed_at for e in after}
        log(f"failure {recovered['resize']} declared by the new controller: {victim} lost -> detected "
            f"{stamps['detected']:.2f} s, agreed {stamps['agreed']:.2f} s, recovered {stamps['recovered']:.2f} s: "
            f"{recovered['detail']}")
    expands = [e for e in events[events.index(attached[0]):] if e["kind"] == "expand"]
    if replaced:
        failure = after[0]["resize"]
        wanted = f"replacing {victim}, lost in failure {failure} (recovery.on_node_loss: replace)"
        asked = [e for e in expands if e["reason"] == wanted]
        done = [e for e in asked if e["to"] == "committed" and not e["refused"]]
        check(done and asked[0]["requester"] == "policy",
              f"no committed expand by the policy with reason {wanted!r} after the takeover: "
              f"{[(e['reason'], e['to'], e['refused']) for e in expands]}")
        requested = [e for e in asked if e["to"] == "requested"]
        check(requested and f", not {victim}" in requested[0]["detail"],
              f"the replacement's request does not exclude {victim}: "
              f"{requested[0]['detail'] if requested else [(e['to'], e['detail']) for e in asked]!r}")
        new_nodes = sorted({node for e in asked for node in e.get("nodes", [])})
        check(new_nodes and victim not in new_nodes and not set(new_nodes) & set(others),
              f"the replacement of {victim} was granted {new_nodes}, expected a node other than {victim} "
              f"and {others}")
        log(f"replacement of {victim}: {[(e['event'], e['to']) for e in asked]} on {new_nodes}, committed "
            f"{record_time(done[0]) - killed_at:.2f} s after {victim} was lost; requested: {requested[0]['detail']}")
    else:
        check(not [e for e in expands if "replacing" in e["reason"]],
              f"a replacement after the takeover with on_node_loss: shrink: "
              f"{[(e['reason'], e['to']) for e in expands]}")
    # The survivors' iterations after the loss, as their reports reached the new controller.
    metrics = [m for m in job_metrics(job) if m.get("node") in others]
    last = max((m.get("iteration", -1) for m in metrics), default=-1)
    check(last >= ITERATIONS - 1, f"the nodes left reported iterations up to {last}, expected {ITERATIONS - 1}")
    log(f"the nodes left ran to iteration {last}")


def test_lost_first_node_cut(c, args, action="shrink"):
    """The job's first node (its batch host) dies as a real host does: silently. Its veth is
    taken down first and only then is every process of it killed, so that nothing of its death
    (no refused connection, no reset) reaches anyone: the other nodes' daemons find their
    controller's host answering nothing, as they would a host that lost its power.

    slurmctld sets a silent node DOWN once it has not answered for SlurmdTimeout (300 s on this
    cluster, Slurm's default); the test does it for slurmctld (`scontrol update State=DOWN`)
    DOWN_AFTER_CUT seconds after the cut: past the moment the daemons used to end their ranks
    (cut_off_ranks_end, 2.2-2.4 heartbeat timeouts, with its slack), well within the takeover
    grace they keep them for (1.5 SlurmdTimeouts: runtime::takeover_grace_seconds). Checks: the
    job's ranks on the other nodes still run when n1 goes DOWN; then, as in test_lost_first_node,
    on the merge cluster the daemon of the first node left takes the job over and it runs to its
    end, COMPLETED; on the companion cluster Slurm requeues the job once its only node is DOWN
    and the daemons, told so by slurmctld, end their ranks and cancel the companions. Nothing
    left, no node drained; the node is idle again once it is back.

    With `action` replace (recovery.on_node_loss: replace), the loss the new controller declares
    counts as any lost node's: once the job recovered, the controller asks Slurm for a node
    other than the lost one, which joins the job; it finishes verified on 3 ranks again."""
    work = start_clean(c, f"lost_first_node_cut_{action}")
    heartbeat_ms = round(args.heartbeat_timeout * 1000)
    policy = GROW_POLICY + f"recovery:\n  on_node_loss: {action}\n  heartbeat_timeout: {heartbeat_ms}ms\n"
    down_after = cut_off_ranks_end(args.heartbeat_timeout)[1] + 3.0
    # The first rank's output is lost with n1's sruns: the survivors' new first rank appends
    # its report to a file of the shared work directory too.
    report_file = work / "report.jsonl"
    job = ElasticJob(c, args, work, "e2e-lost-first-cut", ["-N1", "--elastic=1:3", "--time=10"],
                     f"{args.app} --n 768 --tile 128 --iterations {ITERATIONS} --kernel emulated "
                     "--emulated-gflops 2 --emulated-compute on --checkpoint on --checkpoint-every 1 --verify "
                     f"--report {report_file}",
                     policy=policy)
    victim, veth = None, None
    try:
        status = grown_to_three(job)
        victim = status["nodes"][0]
        others = status["nodes"][1:]
        app = Path(args.app).name
        ranks = {pid: f"{node}: {describe(pid)}" for node in others for pid in processes_on(c, node)
                 if command_name(pid) == app[:15]}
        check(len(ranks) == len(others), f"expected one rank on each of {others}: {list(ranks.values())}")
        veth = veth_of(c, victim)
        cut_at = time.time()
        set_link(veth, "down")
        killed = kill_node(c, victim)
        log(f"the batch host {victim} cut from the network at iteration {status['iteration']} ({veth} down), "
            f"then killed: {'; '.join(killed)}")
        while time.time() < cut_at + down_after:
            time.sleep(0.2)
        gone = [text for pid, text in ranks.items() if not running(pid)]
        check(not gone, f"{down_after:.1f} s after {victim} went silent, before slurmctld set it DOWN, ranks of the "
              f"job ended: {gone}")
        down_at = time.time()
        c.run(["scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=e2e: the batch host went silent"])
        log(f"{down_at - cut_at:.2f} s after the cut, the job's ranks on {others} still run; {victim} set DOWN "
            "(slurmctld would after SlurmdTimeout)")
        if args.no_job_expansion:
            check_requeued_without_companions(job, down_at, "its batch host went DOWN")
        else:
            check_taken_over_after_first_node(c, job, victim, others, down_at, declared=True,
                                              replaced=action == "replace")
            job.report(ranks=len(others) + (1 if action == "replace" else 0), path=report_file)
        # With replace, the node that replaced the victim too.
        check_nothing_left_on(c, [node for node in holders(c) if node != victim] if action == "replace" else others)
    finally:
        job.cancel()
        if veth is not None:
            set_link(veth, "up")
            log(f"{veth} up again: {victim} is back on the network")
        if victim is not None:
            bring_back(c, victim)
    job.check_nothing_left()


# What the loss itself makes the job's logs say, with why it comes: the srun of the dead
# node's daemon step hears from slurmctld that its node failed, into that daemon's log.
LOST_NODE_LINES = ["srun: error: Node failure on "]
# The srun of the killed daemon's step says its task was killed, into that daemon's log; and
# when the controller's SIGTERM to that srun (it cancels the step) reaches the node's slurmstepd
# before the task's end does, slurmstepd says the step was cancelled there too (1 run of 4).
LOST_DAEMON_LINES = [": task 0: Killed", "error: *** STEP "]
# The srun of the cut-off node's daemon step, told to stop (SIGTERM) once the node is lost, waits
# for a step that cannot answer, and says so into that daemon's log.
CUT_NODE_LINES = ["srun: error: Timed out waiting for job step to complete"]


def job_metrics(job):
    path = job.job_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


TESTS = {
    "lost_node_replace": lambda c, args: test_lost_node(c, args, "replace"),
    "lost_node_shrink": lambda c, args: test_lost_node(c, args, "shrink"),
    "lost_daemon": test_lost_daemon,
    "lost_first_node": test_lost_first_node,
    "lost_first_node_cut": test_lost_first_node_cut,
    "lost_first_node_cut_replace": lambda c, args: test_lost_first_node_cut(c, args, "replace"),
    "lost_node_cut_replace": lambda c, args: test_cut_node(c, args, "replace"),
    "lost_node_cut_shrink": lambda c, args: test_cut_node(c, args, "shrink"),
}


if __name__ == "__main__":
    sys.exit(main(__doc__, TESTS, on_failure=slurm_elastic_e2e.keep_evidence))
