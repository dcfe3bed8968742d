#!/usr/bin/env python3
"""PMIx_Fence with collected data: across 2, 4 and 8 nodes of a job (`bellows run` on the local
backend, one rank per node, each fence relayed by the nodes' bellowsd through the controller)
against a fence among as many ranks of one node (bellows_pmix_fence_one_node: one bellowsd's
PMIx server, which completes the fence itself).

Every rank is pmix_fence_client (a PMIx-native C client) in its `bench` mode: --rounds times
Put --bytes bytes, Commit, PMIx_Fence with PMIX_COLLECT_DATA, timing each fence. The first
--warmup rounds of each rank are dropped; the table gives the median and 90th percentile over
the rest of every rank's fences, per run, the median of the runs' medians, and that median
against the one-node row of the same count in the same invocation (the same machine, minutes
apart). The load average is printed at the start and the end.

  python3 bench/pmix_fence.py --build build/default [--counts 2,4,8] [--rounds 200] [--bytes 64] [--runs 3]
                             [--only one-node|nodes] [--slurm DIR]

With --slurm DIR (a cluster of separate hosts started by `scripts/local-slurm start DIR --nodes 8
--plugin build/default/scheduler_plugin/spank_bellows.so`), each count also runs as a batch job
on that many hosts of it ("N separate hosts": `sbatch -N N --elastic=N:N` of `bellows run
--backend slurm`, the controller on tcp with CURVE), in the same turn as its one-node and
local-backend rows. Its files go under the build directory (every host sees it; not /tmp,
which is each host's own).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def fence_seconds(out, ranks, warmup):
    """Every rank's fence times after the warmup; exits naming what is missing or failed."""
    times = []
    for rank in range(ranks):
        path = Path(out) / f"rank-{rank}.json"
        if not path.exists():
            raise RuntimeError(f"rank {rank} wrote no result ({path})")
        r = json.loads(path.read_text())
        if r["status"] != "SUCCESS":
            raise RuntimeError(f"rank {rank}: a fence failed with {r['status']}")
        times += r["seconds"][warmup:]
    return times


def one_node(build, client, ranks, args, out):
    subprocess.run([os.path.join(build, "bench", "bellows_pmix_fence_one_node"), "--client", client, "--out", out,
                    "--ranks", str(ranks), "--rounds", str(args.rounds), "--bytes", str(args.bytes)],
                   check=True, timeout=300)


def across_nodes(build, client, nodes, args, out, top):
    run_dir = os.path.join(top, f"run-{nodes}-{os.path.basename(out)}")
    os.makedirs(run_dir)
    env = dict(os.environ, BELLOWS_RUN_DIR=run_dir, BELLOWS_LOCAL_POOL=os.path.join(run_dir, "pool.json"))
    r = subprocess.run([os.path.join(build, "cli", "bellows"), "run", "--nodes", f"{nodes}:{nodes}", "--pool",
                        str(nodes), "--quiet", "--", client, "bench", out, str(args.rounds), str(args.bytes)],
                       env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"bellows run exited {r.returncode}: {r.stderr[-1500:]}")


def job_state(env, job):
    out = subprocess.run(["scontrol", "-o", "show", "job", job], env=env, capture_output=True, text=True,
                         timeout=30).stdout
    m = re.search(r"\bJobState=(\S+)", out)
    return m.group(1) if m else "UNKNOWN"


def on_separate_hosts(build, client, nodes, args, out, slurm_env):
    """One batch job of `nodes` hosts of the cluster, each rank pmix_fence_client in bench mode."""
    work = os.path.dirname(out)
    bellows = os.path.abspath(os.path.join(build, "cli", "bellows"))
    command = f"{bellows} run --backend slurm --quiet -- {os.path.abspath(client)} bench {out} {args.rounds} {args.bytes}"
    name = os.path.basename(out)
    submitted = subprocess.run(["sbatch", "--parsable", f"-N{nodes}", f"--elastic={nodes}:{nodes}", "-J",
                                f"fence-{name}", "-D", work, "-o", f"{name}.out", "-t", "10",
                                f"--export=ALL,BELLOWS_RUN_DIR={work}/runs", "--wrap", command],
                               env=slurm_env, capture_output=True, text=True, timeout=60)
    if submitted.returncode != 0:
        raise RuntimeError(f"sbatch exited {submitted.returncode}: {submitted.stderr.strip()}")
    job = submitted.stdout.strip()
    deadline = time.monotonic() + 300
    while (state := job_state(slurm_env, job)) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job], env=slurm_env, timeout=30)
            raise RuntimeError(f"job {job} did not end within 300 s")
        time.sleep(0.2)
    if state != "COMPLETED":
        output = Path(work, f"{name}.out")
        raise RuntimeError(f"job {job} is {state}: {output.read_text()[-1500:] if output.exists() else ''}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/default")
    parser.add_argument("--counts", default="2,4,8")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--bytes", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["one-node", "nodes"], help="measure only one of the two")
    parser.add_argument("--slurm", metavar="DIR", help="also on the hosts of the local-slurm cluster in DIR")
    args = parser.parse_args()
    client = os.path.join(args.build, "tests", "daemon", "pmix_fence_client")
    counts = [int(c) for c in args.counts.split(",")]
    top = tempfile.mkdtemp(prefix="bellows-fence-bench-")
    hosts_top = None
    slurm_env = None
    if args.slurm:
        slurm_env = dict(os.environ, SLURM_CONF=os.path.join(os.path.abspath(args.slurm), "etc", "slurm.conf"))
        hosts_top = tempfile.mkdtemp(prefix="fence-bench-hosts-", dir=os.path.abspath(args.build))
    with open("/proc/loadavg") as f:
        print(f"load average at the start: {' '.join(f.read().split()[:3])}")
    print(f"PMIx_Fence with PMIX_COLLECT_DATA, {args.bytes} bytes put per rank, {args.rounds} rounds "
          f"({args.warmup} dropped), {args.runs} runs; milliseconds")
    print("| ranks | where | median | p90 | runs' medians | against one node |")
    print("|---|---|---|---|---|---|")
    one_node_median = {}
    try:
        for count in counts:
            places = [("one node", lambda out: one_node(args.build, client, count, args, out)),
                      (f"{count} nodes", lambda out: across_nodes(args.build, client, count, args, out, top))]
            if args.slurm:
                places.append((f"{count} separate hosts",
                               lambda out: on_separate_hosts(args.build, client, count, args, out, slurm_env)))
            for where, run in places:
                if args.only and (args.only == "one-node") != (where == "one node"):
                    continue
                medians = []
                p90s = []
                failure = None
                for index in range(args.runs):
                    base = hosts_top if where.endswith("hosts") else top
                    out = os.path.join(base, f"{count}-{where.replace(' ', '-')}-{index}")
                    os.makedirs(out)
                    try:
                        run(out)
                        times = sorted(fence_seconds(out, count, args.warmup))
                    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                        failure = str(e)
                        break
                    medians.append(statistics.median(times) * 1e3)
                    p90s.append(times[int(0.9 * (len(times) - 1))] * 1e3)
                if failure:
                    print(f"| {count} | {where} | - | - | failed: {failure} | - |")
                    continue
                median = statistics.median(medians)
                if where == "one node":
                    one_node_median[count] = median
                ratio = f"{median / one_node_median[count]:.1f}x" if count in one_node_median else "-"
                print(f"| {count} | {where} | {median:.3f} | {statistics.median(p90s):.3f} | "
                      f"{', '.join(f'{m:.3f}' for m in medians)} | {ratio} |", flush=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)
        if hosts_top:
            shutil.rmtree(hosts_top, ignore_errors=True)
        with open("/proc/loadavg") as f:
            print(f"load average at the end: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    sys.exit(main())
