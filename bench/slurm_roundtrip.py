#!/usr/bin/env python3
"""Resize round trips of an elastic job on a real Slurm, against the raw Slurm operations.

  python3 bench/slurm_roundtrip.py --build build [--rounds 5] [--cluster DIR]

Starts a 4-node Slurm with scripts/local-slurm (or uses the running one in --cluster DIR), then
measures in one run, each --rounds times:

  raw expand    salloc --dependency=expand:JOB --no-shell, scontrol update NumNodes=0 (merge),
                srun --overlap on the new node: the first process there
  raw shrink    scontrol update JobId=JOB NodeList=BATCH_HOST until the node shows idle in sinfo
  bellows expand  in `bellows run --backend slurm -- gemm` (no policy: bellows resize +1 is the
                decision): from the controller accepting the resize (its event log) to the first
                task executed on the new rank (the application's telemetry), through the grant,
                bellowsd started as a step on the node, the MPI join and the first steal
  bellows shrink  bellows resize -1: from the controller accepting it to the node idle in sinfo,
                through the drain, the leaving rank's exit and the release

A round waits 1.1 s before each resize so that no node comes back to the job within the second it
left (Slurm would refuse a step there, see docs/slurm.md). Prints every round and the medians,
and the ratios Bellows / raw.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_EXPAND_S = 2.0
TARGET_SHRINK_S = 1.0


class Slurm:
    def __init__(self, directory):
        self.env = dict(os.environ, SLURM_CONF=str(Path(directory) / "etc" / "slurm.conf"),
                        OPENBLAS_NUM_THREADS="1")

    def run(self, *args, env=None, check=True):
        result = subprocess.run(list(args), env=env or self.env, capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            sys.exit(f"slurm_roundtrip: {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    def field(self, job, name):
        for item in self.run("scontrol", "-o", "show", "job", str(job)).split():
            if item.startswith(name + "="):
                return item.split("=", 1)[1]
        return ""

    def nodes_of(self, job):
        return self.run("scontrol", "show", "hostnames", self.field(job, "NodeList")).split()

    def node_state(self, node):
        return self.run("sinfo", "-h", "-n", node, "-o", "%T").strip()

    def wait(self, what, condition, timeout=60):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                sys.exit(f"slurm_roundtrip: no {what} within {timeout} s")
            time.sleep(0.01)

    def wait_idle(self, node):
        """Polls sinfo until node is idle; returns the wall-clock time it was first seen idle."""
        self.wait(f"{node} idle", lambda: self.node_state(node) == "idle", 20)
        return time.time()

    def submit(self, *args):
        return self.run("sbatch", "--parsable", *args).strip()


def raw_rounds(slurm, rounds):
    """One sleeping job; each round expands it by one node and shrinks it back."""
    job = slurm.submit("-N1", "-J", "raw-resize", "-o", "/dev/null", "--wrap", "sleep 600")
    expands, shrinks = [], []
    try:
        slurm.wait("raw job running", lambda: slurm.field(job, "JobState") == "RUNNING")
        batch_host = slurm.nodes_of(job)[0]
        for _ in range(rounds):
            time.sleep(1.1)
            began = time.monotonic()
            out = subprocess.run(["salloc", "-N1", f"--dependency=expand:{job}", "--no-shell"],
                                 env=slurm.env, capture_output=True, text=True, timeout=60)
            words = (out.stdout + out.stderr).split()
            helper = words[words.index("allocation") + 1]
            slurm.run("scontrol", "update", f"JobId={helper}", "NumNodes=0")
            slurm.wait("merge", lambda: len(slurm.nodes_of(job)) == 2)
            node = [n for n in slurm.nodes_of(job) if n != batch_host][0]
            slurm.run("srun", f"--jobid={job}", "--overlap", "-N1", "-w", node, "true")
            expands.append(time.monotonic() - began)
            time.sleep(1.1)
            began_wall = time.time()
            slurm.run("scontrol", "update", f"JobId={job}", f"NodeList={batch_host}")
            shrinks.append(slurm.wait_idle(node) - began_wall)
    finally:
        slurm.run("scancel", job, check=False)
    return expands, shrinks


def parse_time(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def bellows_rounds(slurm, build, rounds, work):
    """One elastic GEMM under bellows run; each round: bellows resize +1, then -1."""
    bellows = build / "cli" / "bellows"
    runs = work / "runs"
    env = dict(slurm.env, BELLOWS_RUN_DIR=str(runs))
    iterations = 500 + 450 * rounds  # about 25 ms each on one rank: outlasts the rounds
    job = slurm.submit("-N1", "--elastic=1:2", "-J", "bellows-resize", "-D", str(work), "-o", "job.out",
                       f"--export=ALL,BELLOWS_RUN_DIR={runs},OPENBLAS_NUM_THREADS=1", "--wrap",
                       f"{bellows} run --backend slurm --quiet -- {build / 'examples' / 'gemm'} --n 768 "
                       f"--tile 256 --iterations {iterations} --verify")

    def status():
        out = subprocess.run([str(bellows), "status", job, "--json"], env=env, capture_output=True, text=True)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def settled(count):
        s = status()
        return s is not None and s["active_resize"] is None and s["ranks"] == count and len(s["nodes"]) == count

    def resize(delta):
        out = subprocess.run([str(bellows), "resize", delta, "--job", job], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"slurm_roundtrip: bellows resize {delta}: {out.stderr.strip()}")

    idle_at = []
    try:
        slurm.wait("the controller", lambda: settled(1), 60)
        batch_host = slurm.nodes_of(job)[0]
        for _ in range(rounds):
            time.sleep(1.1)
            resize("+1")
            slurm.wait("expand", lambda: settled(2), 30)
            node = [n for n in slurm.nodes_of(job) if n != batch_host][0]
            time.sleep(1.1)
            resize("-1")
            idle_at.append(slurm.wait_idle(node))
            slurm.wait("shrink", lambda: settled(1), 30)
        slurm.wait("the job's end", lambda: slurm.field(job, "JobState") not in ("RUNNING", "PENDING"), 300)
    finally:
        slurm.run("scancel", job, check=False)
    if slurm.field(job, "JobState") != "COMPLETED":
        sys.exit(f"slurm_roundtrip: job {job} ended {slurm.field(job, 'JobState')}: see {work}/job.out")

    events = [json.loads(line) for line in (runs / job / "events.jsonl").read_text().splitlines() if line.strip()]
    decided = {e["resize"]: parse_time(e["time"]) for e in events if e["event"] == "request" and not e["refused"]}
    kinds = {e["resize"]: e["kind"] for e in events}
    report = [json.loads(line) for line in (work / "job.out").read_text().splitlines()
              if line.startswith("{") and '"verified"' in line][-1]
    if not report.get("verified"):
        sys.exit("slurm_roundtrip: the GEMM did not verify")
    first_task = {r["id"]: r["requested_unix_seconds"] + r["request_to_first_task_seconds"][0]
                  for r in report.get("resizes", []) if "add" in r}
    expand_ids = sorted(i for i, k in kinds.items() if k == "expand")
    shrink_ids = sorted(i for i, k in kinds.items() if k == "shrink")
    expands = [first_task[i] - decided[i] for i in expand_ids]
    shrinks = [idle - decided[i] for i, idle in zip(shrink_ids, idle_at)]
    phases = phase_table(events)
    return expands, shrinks, phases


def phase_table(events):
    """Median seconds spent in each state of the resizes, by kind."""
    spent = {}
    for e in events:
        if e["from"] != "none" and not e["refused"]:
            spent.setdefault((e["kind"], e["from"]), []).append(e["duration_s"])
    return {key: statistics.median(values) for key, values in sorted(spent.items())}


def row(name, values, unit="s"):
    per_round = " ".join(f"{v:.3f}" for v in values)
    return f"{name:<44} {statistics.median(values):8.3f} {unit}   {per_round}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="the build tree (cli/bellows, examples/gemm)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cluster", help="a running local-slurm cluster directory (default: start one)")
    args = ap.parse_args()
    build = Path(args.build).resolve()
    work = Path(tempfile.mkdtemp(prefix="bellows-roundtrip-"))
    directory = Path(args.cluster) if args.cluster else work / "cluster"
    local_slurm = ROOT / "scripts" / "local-slurm"
    if not args.cluster:
        # --loopback: the raw side runs salloc and srun from this shell (docs/slurm.md).
        subprocess.run([str(local_slurm), "start", str(directory), "--nodes", "4", "--loopback", "--plugin",
                        str(build / "scheduler_plugin" / "spank_bellows.so")], check=True,
                       stdout=subprocess.DEVNULL)
    slurm = Slurm(directory)
    try:
        slurm.run("scontrol", "reconfigure")
        slurm.wait("4 idle nodes", lambda: slurm.run("sinfo", "-h", "-o", "%D %T").split() == ["4", "idle"])
        raw_expand, raw_shrink = raw_rounds(slurm, args.rounds)
        expand, shrink, phases = bellows_rounds(slurm, build, args.rounds, work)
    finally:
        if not args.cluster:
            subprocess.run([str(local_slurm), "stop", str(directory)], stdout=subprocess.DEVNULL)
    print(f"Slurm 22.05, 4 local nodes, {args.rounds} rounds; load average {os.getloadavg()[0]:.2f}")
    print(f"{'measurement':<44} {'median':>10}   per round")
    print(row("raw expand: salloc + merge + first srun", raw_expand))
    print(row("raw shrink: scontrol update -> node idle", raw_shrink))
    print(row("bellows expand: decision -> first task", expand))
    print(row("bellows shrink: decision -> node idle", shrink))
    ratio_expand = statistics.median(expand) / statistics.median(raw_expand)
    ratio_shrink = statistics.median(shrink) / statistics.median(raw_shrink)
    print(f"{'bellows / raw, expand':<44} {ratio_expand:8.2f}")
    print(f"{'bellows / raw, shrink':<44} {ratio_shrink:8.2f}")
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    print(f"target: expand < {TARGET_EXPAND_S} s {met(statistics.median(expand) < TARGET_EXPAND_S)}, "
          f"shrink < {TARGET_SHRINK_S} s {met(statistics.median(shrink) < TARGET_SHRINK_S)}")
    print("median seconds per state of the controller's resizes:")
    for (kind, state), seconds in phases.items():
        print(f"  {kind:<7} {state:<14} {seconds:.3f}")
    print(json.dumps({"raw_expand_s": raw_expand, "raw_shrink_s": raw_shrink, "expand_s": expand,
                      "shrink_s": shrink}))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
