#!/usr/bin/env python3
"""PMIx_Fence with collected data: across 2, 4 and 8 nodes of a job (`bellows run` on the local
backend, one rank per node, each fence relayed by the nodes' bellowsd through the controller)
against a fence among as many ranks of one node (bellows_pmix_fence_one_node: one bellowsd's
PMIx server, which completes the fence itself).

Every rank is pmix_fence_client (a PMIx-native C client) in its `bench` mode: --rounds times
Put --bytes bytes, Commit, PMIx_Fence with PMIX_COLLECT_DATA, timing each fence. The first
--warmup rounds of each rank are dropped; the table gives the median and 90th percentile over
the rest of every rank's fences, per run, and the median of the runs' medians.

  python3 bench/pmix_fence.py --build build/default [--counts 2,4,8] [--rounds 200] [--bytes 64] [--runs 3]
                             [--only one-node|nodes]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build/default")
    parser.add_argument("--counts", default="2,4,8")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--bytes", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["one-node", "nodes"], help="measure only one of the two")
    args = parser.parse_args()
    client = os.path.join(args.build, "tests", "daemon", "pmix_fence_client")
    counts = [int(c) for c in args.counts.split(",")]
    top = tempfile.mkdtemp(prefix="bellows-fence-bench-")
    print(f"PMIx_Fence with PMIX_COLLECT_DATA, {args.bytes} bytes put per rank, {args.rounds} rounds "
          f"({args.warmup} dropped), {args.runs} runs; milliseconds")
    print("| ranks | where | median | p90 | runs' medians |")
    print("|---|---|---|---|---|")
    try:
        for count in counts:
            for where, run in (("one node", lambda out: one_node(args.build, client, count, args, out)),
                               (f"{count} nodes", lambda out: across_nodes(args.build, client, count, args, out, top))):
                if args.only and (args.only == "one-node") != (where == "one node"):
                    continue
                medians = []
                p90s = []
                failure = None
                for index in range(args.runs):
                    out = os.path.join(top, f"{count}-{where.replace(' ', '-')}-{index}")
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
                    print(f"| {count} | {where} | - | - | failed: {failure} |")
                    continue
                print(f"| {count} | {where} | {statistics.median(medians):.3f} | {statistics.median(p90s):.3f} | "
                      f"{', '.join(f'{m:.3f}' for m in medians)} |", flush=True)
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
