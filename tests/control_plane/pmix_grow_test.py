#!/usr/bin/env python3
"""End-to-end test of a PMIx-native program through real grows and shrinks, on the local backend:
`bellows run --pmix-native --nodes 2:4` of pmix_elastic_client (PMIx_Init as a client, no
Bellows library), whose ranks are the members of the job's newest process set. At the start and
after each resize every rank of the job logs what it read (PMIX_JOB_SIZE, PMIX_NUM_NODES and
PMIX_NODE_LIST with PMIX_GET_REFRESH_CACHE), a fence with collected data among all the job's
ranks, with every member's key got back, and one over the whole namespace (PMIX_RANK_WILDCARD).

1. The start: ranks 0 and 1 read size 2, nodes local0,local1; their fence works.
2. `bellows resize +1`: the grow commits once rank 2's client connected; ranks 0, 1 (on the old
   nodes) and 2 (whose PMIx_Init found the grown job) read size 3, the nodes with local2, and
   fence among the 3.
3. PMIx_Allocation_request EXTEND 1 from a tool (bellows-pmix-control) on local0's daemon:
   SUCCESS at once, PMIX_NOTIFY_ALLOC_COMPLETE committed; 4 ranks on 4 nodes, the same checks.
4. RELEASE 1 from the tool, then `bellows resize -1`: each time the leaving rank, left out of the
   new set, logs "left" and exits 0, which commits the shrink; the others read the smaller job
   (size, node count, nodes without the leaver's) and fence among themselves.
5. `bellows resize +1` after the shrinks: the new rank gets number 4 (a number that left is not
   given again) on a node a rank left, so the job is ranks 0, 1 and 4 (or the two that stayed
   and 4); they read size 3 and their nodes and fence with collected data among themselves.
   Rank 4 reads the job without the departed numbers from its PMIx_Init on, so none of its
   fences is refused, and it is its node's local and node rank 0; its PMIX_JOB_SIZE is the
   numbers given (5), as PMIx 4.2.2 gives a client past the size none of its own info.
Every rank logs its PMIX_LOCAL_RANK and PMIX_NODE_RANK too: 0 (one rank per node).
6. The job ends 0 once told to (OUT/stop), no warning in its logs, nothing left.

  pmix_grow_test.py --bellows PATH --app PATH(pmix_elastic_client) --tool PATH(bellows-pmix-control)
Prints "pmix_grow: PASS" or "pmix_grow: FAIL: why".
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

PMIX_SUCCESS = 0
PMIX_NOTIFY_ALLOC_COMPLETE = -105


def main():
    t = LocalJobTest("pmix_grow", lambda p: p.add_argument("--tool", required=True))
    out = Path(t.top) / "ranks"
    out.mkdir()
    job = t.start("--pmix-native", "--nodes", "2:4", "--pool", "4", "--quiet", "--", t.args.app, str(out))

    def failing(why):
        t.kill_all(job)
        LocalJobTest.fail(t, why)

    t.fail = failing

    def log_of(rank):
        path = out / f"rank-{rank}.log"
        return path.read_text().splitlines() if path.exists() else []

    def expect_job(ranks, nodes_of, what, seconds=60, numbers_given=None):
        """Every rank of `ranks` logged the job of those ranks on the nodes nodes_of[rank]. A rank
        started with a number not below the job's size reads the numbers given as the size
        (PMIx 4.2.2 gives such a client none of its own info otherwise: docs/daemon.md)."""
        members = ",".join(str(r) for r in ranks)

        def line(rank):
            size = numbers_given if numbers_given is not None and rank >= len(ranks) else len(ranks)
            # One rank per node: each is its node's local and node rank 0, a rank started on a
            # node that another number left included (PRRTE counts the job's ranks on the node).
            return (f"members {members} size {size} num_nodes {len(ranks)} nodes "
                    + ",".join(nodes_of[r] for r in ranks)
                    + f" local_rank 0 node_rank 0 fence ok keys {len(ranks)} wildcard ok")

        t.wait_for(job, f"{what}: every rank logging {line(ranks[0])!r}",
                   lambda: all(log_of(r) and log_of(r)[-1] == line(r) for r in ranks), seconds,
                   why_not=lambda: "; logs: " + "; ".join(f"{r}: {log_of(r)}" for r in range(5)))
        past = f" (ranks numbered {len(ranks)} or more: {numbers_given}, the numbers given)" if numbers_given else ""
        t.log(f"{what}: ranks {members} read size {len(ranks)}{past}, their nodes and local rank 0, and fenced "
              f"among themselves and over the namespace")

    def finished(kind, count):
        s = t.status()
        if s is None or s["active_resize"] is not None:
            return None
        done = [r for r in s["finished_resizes"] if r["kind"] == kind and r["state"] == "committed"]
        return s if len(done) >= count else None

    def resize(delta):
        r = t.bellows("resize", delta)
        if r.returncode != 0:
            t.fail(f"bellows resize {delta}: exit {r.returncode}: {r.stderr}")

    uri = "file:" + os.path.join(t.job_dir(), "nodes", "local0", "uri")

    def tool(*args):
        r = subprocess.run([t.args.tool, "--uri", uri, "--wait", "60", *args], capture_output=True, text=True,
                           timeout=90)
        lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        if r.returncode != 0:
            t.fail(f"bellows-pmix-control {' '.join(args)} exited {r.returncode}: {r.stderr!r}; printed {lines}")
        calls = [line for line in lines if line.get("call") == args[0]]
        events = [line for line in lines if "event" in line]
        if len(calls) != 1 or calls[0]["status"] != PMIX_SUCCESS or len(events) != 1 or \
                events[0]["code"] != PMIX_NOTIFY_ALLOC_COMPLETE or events[0].get("outcome") != "committed":
            t.fail(f"{' '.join(args)}: expected SUCCESS then PMIX_NOTIFY_ALLOC_COMPLETE committed, got {lines}")
        return events[0]["time"] - calls[0]["time"]

    nodes_of = {r: f"local{r}" for r in range(4)}
    expect_job([0, 1], nodes_of, "the start")

    started = time.time()
    resize("+1")
    grown = t.wait_for(job, "the grow committed", lambda: finished("expand", 1), 60)
    if grown["nodes"] != ["local0", "local1", "local2"] or grown["ranks"] != 3:
        t.fail(f"after resize +1 bellows status shows nodes {grown['nodes']} and {grown['ranks']} ranks")
    t.log(f"resize +1 committed {time.time() - started:.2f} s after it was asked")
    expect_job([0, 1, 2], nodes_of, "after resize +1")

    seconds = tool("extend", "1", "--req-id", "native-grow")
    t.wait_for(job, "4 nodes in bellows status", lambda: (s := finished("expand", 2)) and len(s["nodes"]) == 4, 30)
    t.log(f"EXTEND 1: committed {seconds:.2f} s after the request returned")
    expect_job([0, 1, 2, 3], nodes_of, "after EXTEND 1")

    remaining = [0, 1, 2, 3]
    for step, (how, count) in enumerate([("release", 1), ("resize", 2)], start=1):
        before = set(t.status()["nodes"])
        if how == "release":
            tool("release", "1")
        else:
            resize("-1")
        s = t.wait_for(job, f"shrink {step} committed", lambda: (s := finished("shrink", count)) and
                       len(s["nodes"]) == len(before) - 1 and s, 60)
        gone = sorted(before - set(s["nodes"]))
        leaver = next(r for r in remaining if nodes_of[r] in gone)
        remaining.remove(leaver)
        if s["ranks"] != len(remaining):
            t.fail(f"after shrink {step} bellows status shows {s['ranks']} ranks, expected {len(remaining)}")
        if log_of(leaver)[-1:] != ["left"]:
            t.fail(f"rank {leaver} on {gone} was shrunk away but its log ends {log_of(leaver)[-2:]}")
        expect_job(remaining, nodes_of, f"after the {how} (rank {leaver} on {gone[0]} left)")

    # A grow after the shrinks: the new rank gets the next number (4), not a number that left,
    # so the job's ranks have a gap; the fence with collected data among them still completes.
    before = set(t.status()["nodes"])
    resize("+1")
    s = t.wait_for(job, "the grow after the shrinks committed", lambda: (s := finished("expand", 3)) and
                   len(s["nodes"]) == len(before) + 1 and s, 60)
    if s["ranks"] != len(remaining) + 1:
        t.fail(f"after the grow bellows status shows {s['ranks']} ranks, expected {len(remaining) + 1}")
    nodes_of[4] = sorted(set(s["nodes"]) - before)[0]
    left_from = {nodes_of[r] for r in range(4) if r not in remaining}
    if nodes_of[4] not in left_from:
        t.fail(f"rank 4 started on {nodes_of[4]}, not on a node a rank left ({sorted(left_from)})")
    expect_job(remaining + [4], nodes_of, f"after the grow after the shrinks (rank 4 on {nodes_of[4]})",
               numbers_given=5)

    (out / "stop").write_text("")
    try:
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail("the job did not end within 60 s of its ranks being told to stop")
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}: {err[-2000:]}")
    committed = [(e["kind"], e["to"]) for e in t.events() if e["to"] == "committed" and not e["refused"]]
    if committed != [("expand", "committed")] * 2 + [("shrink", "committed")] * 2 + [("expand", "committed")]:
        t.fail(f"the event log's commits are {committed}, expected 2 expands, 2 shrinks, then an expand")
    t.check_logs("latest", err)
    del t.fail
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
