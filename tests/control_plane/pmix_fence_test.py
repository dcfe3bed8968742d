#!/usr/bin/env python3
"""End-to-end test of PMIx fences and direct modex across the job's nodes, on the local backend
with real processes: `bellows run` of pmix_fence_client (a PMIx-native C client, one rank per
node, every rank a client of its node's bellowsd in the job's one namespace).

1. `check` on 3 and on 4 nodes: every rank's PMIx_Fence with PMIX_COLLECT_DATA succeeds and its
   PMIx_Get of every rank's key finds "early-R"; the fence without collecting succeeds and the
   Gets of every rank's late key (by direct modex through the controller) find "late-R"; a Get of
   a rank the job does not have is NOT-FOUND. `bellows run` exits 0; no warning in the logs.
2. `victim` on 3 nodes: after a first fence, rank VICTIM stays out of the second fence and is
   killed (SIGKILL) while the others wait in it; every survivor's PMIx_Fence returns
   PMIX_ERR_PROC_TERM_WO_SYNC within 10 s of the kill, never hanging.
No process of the jobs is left.

  pmix_fence_test.py --bellows PATH --app PATH(pmix_fence_client)
Prints "pmix_fence: PASS" or "pmix_fence: FAIL: why".
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

PROC_TERM_WO_SYNC = -200
FENCE_FAILURE_LIMIT_S = 10.0


def results(out, ranks):
    """The ranks' result files, or None while one is missing."""
    found = {}
    for rank in range(ranks):
        path = out / f"rank-{rank}.json"
        if not path.exists():
            return None
        found[rank] = json.loads(path.read_text())
    return found


def check_job(t, nodes):
    out = Path(t.top) / f"check-{nodes}"
    out.mkdir()
    job = t.start("--nodes", f"{nodes}:{nodes}", "--pool", str(nodes), "--quiet", "--", t.args.app, "check", str(out))
    try:
        _, err = job.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, f"the {nodes}-node check job did not end within 90 s")
    got = results(out, nodes)
    if got is None:
        t.fail(f"{nodes} nodes: not every rank wrote its result: {sorted(p.name for p in out.iterdir())}; "
               f"bellows run said {err[-2000:]!r}")
    for rank, r in got.items():
        expected = {"size": nodes, "fence_collect": "SUCCESS", "early_ok": nodes, "fence_plain": "SUCCESS",
                    "late_ok": nodes, "missing_rank_get": "NOT-FOUND"}
        wrong = {k: r.get(k) for k, v in expected.items() if r.get(k) != v}
        if wrong:
            t.fail(f"{nodes} nodes, rank {rank}: {wrong}, expected {expected}: {r}")
    if job.returncode != 0:
        t.fail(f"{nodes} nodes: bellows run ended with {job.returncode}: {err[-2000:]}")
    t.check_logs("latest", err)
    fences = [r["fence_collect_seconds"] for r in got.values()]
    t.log(f"{nodes} nodes: fence with collected data ok on every rank ({max(fences) * 1e3:.2f} ms at most), "
          f"every peer's key found, direct modex of the late keys ok, an absent rank NOT-FOUND")
    return t.job_dir()


def victim_job(t, nodes, victim):
    out = Path(t.top) / "victim"
    out.mkdir()
    job = t.start("--nodes", f"{nodes}:{nodes}", "--pool", str(nodes), "--quiet", "--", t.args.app, "victim",
                  str(out), str(victim))
    path = out / f"rank-{victim}.json"
    t.wait_for(job, "the victim's first fence", path.exists, seconds=60)
    pid = json.loads(path.read_text())["pid"]
    time.sleep(0.5)  # the survivors are in the second fence by now
    survivors = [r for r in range(nodes) if r != victim]
    if any((out / f"rank-{r}.json").exists() for r in survivors):
        t.kill_all(job)
        t.fail("a survivor's second fence ended before the victim was killed")
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    t.wait_for(job, "the survivors' fence results",
               lambda: all((out / f"rank-{r}.json").exists() for r in survivors), seconds=30)
    for rank in survivors:
        r = json.loads((out / f"rank-{rank}.json").read_text())
        if r.get("first_fence") != "SUCCESS":
            t.fail(f"rank {rank}'s first fence: {r}")
        if r.get("second_fence_code") != PROC_TERM_WO_SYNC:
            t.fail(f"rank {rank}'s fence under the kill returned {r.get('second_fence')} "
                   f"({r.get('second_fence_code')}), expected PMIX_ERR_PROC_TERM_WO_SYNC ({PROC_TERM_WO_SYNC}): {r}")
        after = r["ended_at"] - killed_at
        if after > FENCE_FAILURE_LIMIT_S:
            t.fail(f"rank {rank}'s fence ended {after:.1f} s after the kill (limit {FENCE_FAILURE_LIMIT_S} s)")
        t.log(f"rank {rank}: fence failed with {r['second_fence']} {after:.2f} s after rank {victim} was killed")
    try:
        _, err = job.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        t.fail_hung(job, "the victim job did not end within 60 s of its fence's failure")
    t.check_logs("latest", err, allowed=["ended without leaving the job", "the rank launcher", "failed (PROC TERMINATED WITHOUT SYNC)",
                                         "is lost"])
    return t.job_dir()


def main():
    t = LocalJobTest("pmix_fence")
    job_dirs = [check_job(t, 3), check_job(t, 4), victim_job(t, 3, 2)]
    t.passed(*job_dirs)


if __name__ == "__main__":
    main()
