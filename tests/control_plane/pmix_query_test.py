#!/usr/bin/env python3
"""End-to-end test of the PMIx queries bellowsd answers, on the local backend with real
processes: `bellows run` on 3 nodes, one bellowsd per node, MPICH ranks.

Once every rank reported (its rank and pid are in `bellows status`), `bellows-pmix-query` (a
PMIx tool in C: PMIx_tool_init with the daemon's server URI, then PMIx_Query_info) attaches to
the daemon of each node in turn. Each daemon answers for the whole job, and the answers match
`bellows status --json`: the namespace (the job's id), the job size, the process table (rank,
node and pid of every rank; the local table only this node's), the namespace info, the
allocation status, the node range and the policy. A key no daemon answers comes back
NOT-SUPPORTED, a namespace that is not the job's NOT-FOUND, a query of which only part is
answered (process sets: their number, but no names) PARTIAL-SUCCESS. The job then finishes
verified, no daemon logged a warning, and nothing of it is left.

  pmix_query_test.py --bellows PATH --app PATH --tool PATH
Prints "pmix_query: PASS" or "pmix_query: FAIL: why".
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

# A policy that never grows the job (its trigger is out of reach): the job keeps its 3 nodes,
# and the policy's file is what the daemons name.
POLICY = """\
nodes: {min: 2, max: 4, step: 1}
expand:
  ready_tasks_per_node_above: 1000000
tick: 250ms
"""

PMIX_SUCCESS = 0
PMIX_ERR_NOT_FOUND = -46
PMIX_ERR_NOT_SUPPORTED = -47
PMIX_QUERY_PARTIAL_SUCCESS = -104


def main():
    t = LocalJobTest("pmix_query", lambda p: p.add_argument("--tool", required=True))
    policy = t.write("hold.yaml", POLICY)
    t.log(f"job files in {t.run_dir}")
    # About 3.6 s an iteration on 2 ranks (emulated device at 1 GFLOP/s): time to query.
    job = t.start("--nodes", "3:3", "--pool", "3", "--policy", policy, "--quiet", "--",
                  t.args.app, "--n", "1536", "--tile", "256", "--iterations", "3", "--kernel",
                  "emulated", "--emulated-gflops", "1", "--emulated-compute", "on", "--verify")
    try:
        deadline = time.time() + 60
        status = None
        while time.time() < deadline:
            status = t.status()
            if status is not None and all(p["pid"] is not None for p in status.get("processes", [])):
                break
            time.sleep(0.2)
        else:
            t.fail_hung(job, f"not every rank reported its pid within 60 s; last status {status}")
        t.log(f"status: job {status['job']}, nodes {status['nodes']}, processes {status['processes']}")
        job_dir = t.job_dir(status["job"])
        for node in status["nodes"]:
            uri_file = os.path.join(job_dir, "nodes", node, "uri")
            r = subprocess.run([t.args.tool, "--uri", "file:" + uri_file], capture_output=True,
                               text=True, timeout=30)
            if r.returncode != 0:
                t.fail_hung(job, f"the tool on {node} exited {r.returncode}: {r.stderr!r}")
            check_answers(t, job, node, json.loads(r.stdout), status)
            t.log(f"{node}: every answer matches bellows status")
        try:
            stdout, stderr = job.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            t.fail_hung(job, "the job did not finish within 120 s")
    except BaseException:
        if job.poll() is None:
            job.kill()
        raise
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}: {stderr[-2000:]}")
    if '"verified":true' not in stdout:
        t.fail(f"the job's result did not verify: {stdout[-1000:]}")
    t.check_logs(status["job"], stderr)
    t.passed(job_dir)


def job_ranks_set_name(job, ranks):
    """The name the daemons give the process set of the job's ranks `ranks` (ascending):
    JOB.ranks.COUNT.HASH, HASH the 8 hex digits of FNV-1a over the ranks' bytes (docs/daemon.md)."""
    digest = 2166136261
    for rank in ranks:
        for byte in rank.to_bytes(4, "little"):
            digest = ((digest ^ byte) * 16777619) & 0xFFFFFFFF
    return f"{job}.ranks.{len(ranks)}.{digest:08x}"


def check_answers(t, job, node, answers, status):
    """The tool's answers on `node` against `bellows status` (the job did not change since)."""
    queries = {q["name"]: q for q in answers["queries"]}

    def expect(name, status_code, results=None):
        q = queries.get(name)
        if q is None:
            t.fail_hung(job, f"{node}: the tool printed no query {name}")
        if q["status"] != status_code:
            t.fail_hung(job, f"{node}: {name} answered {q['status_name']} ({q['status']}), "
                        f"expected {status_code}: {q}")
        if results is not None and q["results"] != results:
            t.fail_hung(job, f"{node}: {name} answered {q['results']}, expected {results}")
        return q["results"]

    job_id = status["job"]
    nodes = status["nodes"]
    low, high = status["node_range"]
    if answers["nspace"] != job_id:
        t.fail_hung(job, f"{node}: the tool took namespace {answers['nspace']!r}, not {job_id!r}")
    expect("namespaces", PMIX_SUCCESS, {"pmix.qry.ns": job_id})
    expect("job_size", PMIX_SUCCESS, {"pmix.job.size": status["ranks"]})
    table = [{"nspace": job_id, "rank": p["rank"], "host": p["node"], "pid": p["pid"],
              "state": "PROC EXECUTING"} for p in sorted(status["processes"], key=lambda p: p["rank"])]
    expect("proc_table", PMIX_SUCCESS, {"pmix.qry.ptable": table})
    # Asked again: the tool's library compares it with the table it cached (and crashed on
    # entries without an executable name).
    expect("proc_table_again", PMIX_SUCCESS, {"pmix.qry.ptable": table})
    expect("local_proc_table", PMIX_SUCCESS,
           {"pmix.qry.lptable": [e for e in table if e["host"] == node]})
    for entry in table:
        if not os.path.exists(f"/proc/{entry['pid']}"):
            t.fail_hung(job, f"{node}: the process table names pid {entry['pid']}, which is not running")
    expect("namespace_info", PMIX_SUCCESS, {"pmix.qry.nsinfo": [{"pmix.job.arr": [
        {"pmix.nspace": job_id}, {"pmix.job.size": status["ranks"]},
        {"pmix.num.nodes": len(nodes)}, {"pmix.nlist": ",".join(nodes)}]}]})
    if status["active_resize"] is not None:
        t.fail_hung(job, f"a resize started although the policy holds: {status['active_resize']}")
    expect("alloc_status", PMIX_SUCCESS, {"pmix.query.alloc":
           f"job {job_id} holds {len(nodes)} node(s) of {low}:{high} ({','.join(nodes)}); "
           "no resize in flight"})
    # The one process set the daemons define: the job's ranks now.
    pset = job_ranks_set_name(job_id, sorted(p["rank"] for p in status["processes"]))
    expect("num_psets", PMIX_SUCCESS, {"pmix.qry.psetnum": 1})
    expect("pset_names", PMIX_SUCCESS, {"pmix.qry.psets": pset})
    expect("psets", PMIX_SUCCESS, {"pmix.qry.psetnum": 1, "pmix.qry.psets": pset})
    expect("bellows", PMIX_SUCCESS, {"bellows.query.resize": "none",
                                     "bellows.query.node_range": f"{low}:{high}",
                                     "bellows.query.policy": status["policy"]})
    expect("unknown_key", PMIX_ERR_NOT_SUPPORTED, {})
    expect("other_namespace", PMIX_ERR_NOT_FOUND, {})
    # Part answered: PMIx 4.2.2 hands a tool no results with any status but success.
    expect("half_answered", PMIX_QUERY_PARTIAL_SUCCESS, {})
    supported = expect("supported_keys", PMIX_SUCCESS)["pmix.qry.keys"].split(",")
    for key in ("pmix.qry.ns", "pmix.qry.ptable", "pmix.query.alloc", "bellows.query.resize"):
        if key not in supported:
            t.fail_hung(job, f"{node}: {key} is missing from the supported keys {supported}")


if __name__ == "__main__":
    main()
