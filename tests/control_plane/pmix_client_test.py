#!/usr/bin/env python3
"""End-to-end test of the job's PMIx namespace on the local backend: `bellows run --nodes N:N`
of pmix_native_client, a PMIx-native program in C (PMIx_Init as a client, no Bellows library).
Every rank, the first included (which `bellows run` starts itself), is a client of its node's
daemon in one namespace named after the job, with its job-wide rank:

- each rank 0..N-1 wrote its file, the namespace is the job's id for all of them;
- PMIX_JOB_SIZE, PMIX_UNIV_SIZE and PMIX_NUM_NODES are N, PMIX_LOCAL_SIZE 1 and
  PMIX_LOCAL_PEERS its own rank, PMIX_LOCAL_RANK and PMIX_NODE_RANK 0;
- PMIX_HOSTNAME is its node (the first node for rank 0, BELLOWS_NODE for the others), and the
  job map resolved (PMIx_Resolve_nodes, PMIx_Resolve_peers) is the job's N nodes in order,
  rank r alone on node r;
- the fence with collected data among the ranks of its node succeeded and it got its key back;
  its event handler registered; no PMIx call failed;
- `bellows run` exits 0, no warning in the job's logs, no process left.

  pmix_client_test.py --bellows PATH --app PATH(pmix_native_client) --nodes N
Prints "pmix_client: PASS" or "pmix_client: FAIL: why".
"""
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402


def main():
    t = LocalJobTest("pmix_client", lambda p: p.add_argument("--nodes", type=int, required=True))
    n = t.args.nodes
    out = Path(t.top) / "ranks"
    out.mkdir()
    job = t.start("--nodes", f"{n}:{n}", "--pool", str(n), "--quiet", "--", t.args.app, str(out))
    try:
        stdout, stderr = job.communicate(timeout=120)
    except Exception:
        t.fail_hung(job, "bellows run did not end within 120 s")
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}: {stderr[-2000:]}")
    job_id = os.path.basename(t.job_dir())
    nodes = [f"local{i}" for i in range(n)]
    found = sorted(out.glob("rank-*.json"))
    if len(found) != n:
        t.fail(f"{len(found)} rank files for {n} ranks: {[p.name for p in found]}; stderr {stderr[-1500:]}")
    for rank in range(n):
        path = out / f"rank-{rank}.json"
        if not path.exists():
            t.fail(f"rank {rank} wrote no file; there are {[p.name for p in found]}")
        got = json.loads(path.read_text())
        expected = {
            "nspace": job_id, "rank": rank, "job_size": n, "univ_size": n, "num_nodes": n, "local_size": 1,
            "local_peers": [str(rank)], "local_rank": 0, "node_rank": 0, "hostname": nodes[rank],
            "bellows_node": "" if rank == 0 else nodes[rank], "nodes": nodes,
            "peers_by_node": {node: [i] for i, node in enumerate(nodes)}, "fence": True, "local_keys": 1,
            "event_handler": True, "failure": "",
        }
        for key, value in expected.items():
            if got.get(key) != value:
                t.fail(f"rank {rank}: {key} is {got.get(key)!r}, expected {value!r}: {got}")
        t.log(f"rank {rank} on {got['hostname']}: job size {got['job_size']}, fence "
              f"{got['fence_seconds'] * 1e6:.0f} us")
    t.check_logs("latest", stderr)
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
