#!/usr/bin/env python3
"""Recovery under Slurm: how long an elastic job takes from the death of a whole node to
progress again, and to a replacement node, on a cluster of separate hosts.

Each round runs the end-to-end test tests/slurm/slurm_lost_node_e2e.py (a GEMM with buddy
checkpoints at every iteration, grown to 3 nodes, whose last node is set DOWN and has every
process killed, or with --cut is cut from the network: its veth taken down; the job must finish
verified and COMPLETED) and reads the times it prints, from the kill or the cut, by the job's
own records:

  - detected:    the controller's failure record (the dead node's daemon connection closed);
  - recovered:   the first rank's report that the job recovered (rolled back on the survivors);
  - progress:    the first iteration a surviving node completed after that;
  - replacement: with `replace`, the expand that brought a new node in, committed;
  - with --cut, ranks_ended and daemon_ended: the job's mpiexec and rank on the cut-off node
    ended, and its bellowsd exited (the test watches their pids).

Median over --rounds runs, every run printed. Target (issue: "a lost node does not take the job
with it"): progress again within 5 s under Slurm with a replacement node.

  python3 bench/slurm_recovery.py --build build/default --cluster DIR [--no-job-expansion] [--cut]
                                  [--heartbeat-timeout S] [--action replace|shrink] [--rounds 3]

With --cut, --heartbeat-timeout S (default 5) is written into the job's policy as
recovery.heartbeat_timeout: the cut-off node is detected about S seconds after the cut.

DIR is a cluster that `scripts/local-slurm start DIR --plugin build/default/scheduler_plugin/spank_bellows.so`
started (with --no-job-expansion for companion allocations); the test leaves it as it found it.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

TARGET_SECONDS = 5.0
ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"recovery: (?:kill|cut) -> detected ([\d.]+) s, recovered ([\d.]+) s, progress ([\d.]+|none) s"
                  r"(?:, replacement committed ([\d.]+) s)?")
CUT_END = re.compile(r"the job's mpiexec and rank ended ([\d.]+) s after the cut .*, its bellowsd ([\d.]+) s after it")


def one_run(args):
    build = Path(args.build).resolve()
    command = [sys.executable, str(ROOT / "tests" / "slurm" / "slurm_lost_node_e2e.py"),
               "--dir", str(Path(args.cluster).resolve()), "--local-slurm", str(ROOT / "scripts" / "local-slurm"),
               "--plugin", str(build / "scheduler_plugin" / "spank_bellows.so"),
               "--bellows", str(build / "cli" / "bellows"), "--app", str(build / "examples" / "gemm"),
               *(["--no-job-expansion"] if args.no_job_expansion else []),
               "--heartbeat-timeout", str(args.heartbeat_timeout),
               f"lost_node_cut_{args.action}" if args.cut else f"lost_node_{args.action}"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=360)
    found = [LINE.search(line) for line in result.stdout.splitlines()]
    found = [m for m in found if m]
    if result.returncode != 0 or not found:
        tail = "\n".join(result.stdout.splitlines()[-15:])
        raise RuntimeError(f"the lost-node test ({command[-1]}) failed (exit {result.returncode}):\n{tail}")
    m = found[-1]
    value = lambda text: None if text in (None, "none") else float(text)  # noqa: E731
    ended = [e for e in (CUT_END.search(line) for line in result.stdout.splitlines()) if e]
    return {"detected": value(m.group(1)), "recovered": value(m.group(2)), "progress": value(m.group(3)),
            "replacement": value(m.group(4)),
            "ranks_ended": value(ended[-1].group(1)) if ended else None,
            "daemon_ended": value(ended[-1].group(2)) if ended else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--cluster", required=True, help="a running local-slurm cluster directory")
    ap.add_argument("--no-job-expansion", action="store_true", help="the cluster grows jobs by companions")
    ap.add_argument("--action", choices=["replace", "shrink"], default="replace", help="recovery.on_node_loss")
    ap.add_argument("--cut", action="store_true",
                    help="cut the node from the network (its veth down) instead of killing it")
    ap.add_argument("--heartbeat-timeout", type=float, default=5.0,
                    help="seconds: recovery.heartbeat_timeout of the job's policy, with --cut (0.5 to 60)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not 0.5 <= args.heartbeat_timeout <= 60:
        ap.error(f"--heartbeat-timeout must be between 0.5 and 60 seconds, got {args.heartbeat_timeout}")
    if args.heartbeat_timeout != 5.0 and not args.cut:
        ap.error("--heartbeat-timeout applies to --cut only (a killed node's connections close at once)")
    rows = []
    for round_index in range(args.rounds):
        row = one_run(args)
        rows.append(row)
        print(f"round {round_index}: " + ", ".join(
            f"{key} {value:.2f} s" for key, value in row.items() if value is not None), flush=True)

    def median(key):
        values = [r[key] for r in rows if r[key] is not None]
        return statistics.median(values) if values else float("nan")

    strategy = "companion" if args.no_job_expansion else "merge"
    heartbeat = f", heartbeat timeout {args.heartbeat_timeout:g} s" if args.cut else ""
    print(f"\n{strategy}, on_node_loss {args.action}, node {'cut off' if args.cut else 'killed'}{heartbeat}, "
          f"medians of {args.rounds}: detected {median('detected'):.2f} s, "
          f"recovered {median('recovered'):.2f} s, progress {median('progress'):.2f} s"
          + (f", replacement committed {median('replacement'):.2f} s" if args.action == "replace" else "")
          + (f"; on the cut-off node, ranks ended {median('ranks_ended'):.2f} s, bellowsd {median('daemon_ended'):.2f} s"
             if args.cut else ""))
    worst = max((r["replacement"] if args.action == "replace" else r["progress"]) or float("inf") for r in rows)
    print(f"target: progress{' on a replacement node' if args.action == 'replace' else ''} within "
          f"{TARGET_SECONDS:.0f} s of the {'cut' if args.cut else 'kill'}: {'met' if worst < TARGET_SECONDS else 'NOT met'} (worst {worst:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
