#!/usr/bin/env python3
"""End-to-end test of `bellows run --attach` taking a PMIx-native job over, on the local backend:
`bellows run --pmix-native --nodes 2:3` of pmix_elastic_client (PMIx_Init as a client, no Bellows
library), whose ranks are the members of the job's newest process set and fence with collected
data among themselves and over the whole namespace after each change.

1. The start: ranks 0 and 1 read size 2, nodes local0,local1, and fence.
2. `bellows run` is killed (SIGKILL). Its daemons keep the job's namespace and its ranks run on:
   the first node's daemon, which only registered the first rank (`bellows run` started it),
   watches it by its pid and does not stop under it.
3. `bellows run --attach latest` takes the job over: every daemon back and every rank known (the
   job map from job.json), `bellows status` shows 2 ranks on local0, local1.
4. `bellows resize +1` under the attached controller: the grow commits once rank 2's client
   connected (the next number after those the record gives), and ranks 0, 1 and 2 read size 3
   and fence across the 3 nodes (through the attached controller's fence book) and over the
   namespace.
5. `bellows resize -1`: the leaving rank, left out of the new set, exits 0, which commits the
   shrink; the two that stay read size 2 and fence among themselves and over the namespace
   (which no longer holds the departed number).
6. OUT/stop: every rank ends; the attached controller sees the first rank's process go (it is
   not its parent) and exits 0, saying so; the event log shows the attach, then the expand and
   the shrink committed; nothing is left.

  pmix_attach_test.py --bellows PATH --app PATH(pmix_elastic_client)
Prints "pmix_attach: PASS" or "pmix_attach: FAIL: why".
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402
from takeover import TOOK_OVER, Lines, become_subreaper, reap  # noqa: E402




def main():
    t = LocalJobTest("pmix_attach")
    why = become_subreaper()
    if why:
        t.fail(why)
    out = Path(t.top) / "ranks"
    out.mkdir()
    job = t.start("--pmix-native", "--nodes", "2:3", "--pool", "3", "--quiet", "--", t.args.app, str(out))
    attached = None

    def failing(why):
        t.kill_all(job, attached)
        LocalJobTest.fail(t, why)

    t.fail = failing

    def log_of(rank):
        path = out / f"rank-{rank}.log"
        return path.read_text().splitlines() if path.exists() else []

    def expect_job(process, ranks, nodes_of, what, seconds=60):
        """Every rank of `ranks` logged the job of those ranks on the nodes nodes_of[rank]."""
        members = ",".join(str(r) for r in ranks)
        line = (f"members {members} size {len(ranks)} num_nodes {len(ranks)} nodes "
                + ",".join(nodes_of[r] for r in ranks)
                + f" local_rank 0 node_rank 0 fence ok keys {len(ranks)} wildcard ok")
        t.wait_for(process, f"{what}: every rank logging {line!r}",
                   lambda: all(log_of(r) and log_of(r)[-1] == line for r in ranks), seconds,
                   why_not=lambda: "; logs: " + "; ".join(f"{r}: {log_of(r)}" for r in range(4)))
        t.log(f"{what}: ranks {members} read size {len(ranks)} and their nodes, and fenced among themselves "
              "and over the namespace")

    def committed(kind, count):
        s = t.status()
        if s is None or s["active_resize"] is not None:
            return None
        done = [r for r in s["finished_resizes"] if r["kind"] == kind and r["state"] == "committed"]
        return s if len(done) >= count else None

    nodes_of = {r: f"local{r}" for r in range(3)}
    expect_job(job, [0, 1], nodes_of, "the start")
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    killed_events = t.events()
    job_id = os.path.basename(t.job_dir())
    t.log(f"bellows run (pid {job.pid}) of {job_id} killed")
    # Longer than a daemon's grace without its controller (2 s): the first node's daemon must
    # still run, though no rank of its own start or attached through libbellows runs there.
    time.sleep(3)

    attached = subprocess.Popen([t.args.bellows, "run", "--attach", "latest"], env=t.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    lines = Lines(attached.stderr)
    m = t.wait_for(attached, "the takeover with every rank known", lambda: lines.find(TOOK_OVER), 30,
                   why_not=lambda: f"; its stderr: {lines.text()[-2000:]}")
    t.log(f"bellows run --attach took {m.group(1)} over: every daemon back in {m.group(2)} s, every rank known in "
          f"{m.group(3)} s")
    status = t.status()
    if status is None or status["nodes"] != ["local0", "local1"] or status["ranks"] != 2:
        t.fail(f"bellows status after the takeover: {status}")

    grow = t.bellows("resize", "+1")
    if grow.returncode != 0:
        t.fail(f"bellows resize +1 under the attached controller: exit {grow.returncode}: {grow.stderr}")
    s = t.wait_for(attached, "the grow committed", lambda: committed("expand", 1), 60)
    if s["nodes"] != ["local0", "local1", "local2"] or s["ranks"] != 3:
        t.fail(f"after resize +1 bellows status shows nodes {s['nodes']} and {s['ranks']} ranks")
    expect_job(attached, [0, 1, 2], nodes_of, "after resize +1 under the attached controller")

    shrink = t.bellows("resize", "-1")
    if shrink.returncode != 0:
        t.fail(f"bellows resize -1 under the attached controller: exit {shrink.returncode}: {shrink.stderr}")
    s = t.wait_for(attached, "the shrink committed", lambda: (s := committed("shrink", 1)) and len(s["nodes"]) == 2
                   and s, 60)
    gone = sorted({"local0", "local1", "local2"} - set(s["nodes"]))
    leaver = next(r for r in (0, 1, 2) if nodes_of[r] in gone)
    if s["ranks"] != 2 or log_of(leaver)[-1:] != ["left"]:
        t.fail(f"after resize -1: {s['ranks']} ranks, rank {leaver}'s log ends {log_of(leaver)[-2:]}")
    remaining = [r for r in (0, 1, 2) if r != leaver]
    expect_job(attached, remaining, nodes_of, f"after resize -1 (rank {leaver} on {gone[0]} left)")

    (out / "stop").write_text("")
    try:
        code = attached.wait(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail_hung(attached, "the attached controller did not end within 60 s of the ranks being told to stop")
    err = lines.text()
    if code != 0:
        t.fail(f"bellows run --attach exited {code}, expected 0: {err[-2000:]}")
    if "its first rank's process (pid" not in err:
        t.fail(f"bellows run --attach does not say how the job ended: {err[-1500:]}")
    events = t.events()[len(killed_events):]
    attach_lines = [e for e in events if e["event"] == "attached"]
    last_id = max([e["resize"] for e in killed_events] + [0])
    commits = [(e["kind"], e["resize"]) for e in events if e["to"] == "committed" and not e["refused"]]
    if len(attach_lines) != 1 or [kind for kind, _ in commits] != ["expand", "shrink"] or \
            min(resize for _, resize in commits) <= last_id:
        t.fail(f"the event log after the kill: attached {attach_lines}, commits {commits} (ids after #{last_id} "
               "expected)")
    t.log(f"the attached controller exited 0; event log: attached, then expand #{commits[0][1]} and shrink "
          f"#{commits[1][1]} committed")
    # The killed controller's loss, as the daemons saw it while nobody controlled the job.
    t.check_logs("latest", err, allowed=["is gone (no connection for"])
    del t.fail
    time.sleep(1)
    reap()
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
