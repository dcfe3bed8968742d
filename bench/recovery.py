#!/usr/bin/env python3
"""Recovery benchmark: how long a job under `bellows run` takes from a rank's death to progress
again, and how much work it redoes, on the local backend with real processes.

Each run starts `bellows run --nodes 3:3` of an example (GEMM or Cholesky) on the emulated device
computing at the given speed, with buddy checkpoints at every iteration boundary
(`--checkpoint-every 1`, so that at most one iteration is redone), and SIGKILLs the rank of the
last node (--victim last) or the job's first rank (--victim first, the process `bellows run`
started; the job's report then comes from the new first rank, in its node's log) once the job
has reported --kill-after iterations, at a random point of the next
iteration (uniform over its middle 80 %, from the last iteration's length; a death in the gap
between two iterations is a case of its own, see docs/runtime.md, "The resize API", and
docs/recovery.md). The job must finish with a
verified result on 2 ranks. From the kill's wall-clock time and the job's own records:

  - detected:  the controller's failure record (event log, `to: detected`) -- the daemon saw its
               rank die;
  - recovered: the first rank reported the job recovered (`to: recovered`): the survivors agreed,
               rebuilt their communicator and rolled back to the checkpoint;
  - progress:  the first iteration the survivors completed after the kill (the first metrics
               report of a surviving node after it in `metrics.jsonl`): the job progressing
               again;
  - redone:    iterations run twice (the iteration the kill interrupted is not counted);
  - rolled back, tasks re-run: from the job's report, the ranks that rolled back and the log
               bytes kept for their replay (its `recoveries`) and the tasks the survivors ran
               twice (`rank_stats[].tasks_rerun`).

With --team-sizes the job also logs messages between teams of T consecutive ranks (`--message-log
on --team-size T`; 0: no logging), one configuration per T, and --checkpoint-every K sets the
checkpoint interval: with more than one team only the lost rank's team and its buddy's roll
back (docs/teams.md, "Only the lost rank's team rolls back"), as the report's `recoveries` say.
With more than one team size it ends with each size's medians over the first's (recovery time,
progress time, tasks re-run per iteration redone): team roll-back against global, measured in
the same run.

Median over --rounds runs per configuration, every run printed. Targets (issue: "a lost node
does not take the job with it"): progress within 2 s of the kill on the local backend; work
redone at most one checkpoint interval.

  python3 bench/recovery.py --build build/default --rounds 3
  python3 bench/recovery.py --build build/default --apps gemm --gflops 10 --team-sizes 0,1,2 --checkpoint-every 3
"""
import argparse
import datetime
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_PROGRESS_SECONDS = 2.0


def bellows(build, env, *args, timeout=30):
    return subprocess.run([os.path.join(build, "cli", "bellows"), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def record_time(record):
    """A record's wall-clock time, seconds since the epoch (the logs write it in ISO 8601, UTC,
    to the millisecond: 2026-11-27T22:13:07.796Z)."""
    stamp = datetime.datetime.strptime(record["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def one_run(args, app, gflops, team_size, seed):
    top = tempfile.mkdtemp(prefix="bellows-recovery-bench-")
    env = dict(os.environ, BELLOWS_RUN_DIR=top, BELLOWS_LOCAL_POOL=os.path.join(top, "pool.json"),
               OPENBLAS_NUM_THREADS="1")
    example = os.path.join(args.build, "examples", app)
    cmd = [os.path.join(args.build, "cli", "bellows"), "run", "--nodes", "3:3", "--pool", "3", "--quiet",
           "--", example, "--n", str(args.n), "--tile", str(args.tile), "--iterations", str(args.iterations),
           "--kernel", "emulated", "--emulated-gflops", str(gflops), "--emulated-compute", "on",
           "--checkpoint", "on", "--checkpoint-every", str(args.checkpoint_every), "--verify"]
    if team_size > 0:
        cmd += ["--message-log", "on", "--team-size", str(team_size)]
    job = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rng = random.Random(seed)
    try:
        job_dir = None
        deadline = time.time() + 120
        metrics = []
        while time.time() < deadline:
            if job.poll() is not None:
                raise RuntimeError(f"{app} ended before the kill: {job.stderr.read()[-1500:]}")
            latest = os.path.join(top, "latest")
            if job_dir is None and os.path.exists(latest):
                job_dir = os.path.realpath(latest)
            if job_dir is not None:
                metrics = read_jsonl(os.path.join(job_dir, "metrics.jsonl"))
                iterations = [m for m in metrics if m.get("iteration", 0) >= args.kill_after]
                if iterations:
                    break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"{app}: iteration {args.kill_after} not reported within 120 s")
        status = json.loads(bellows(args.build, env, "status", "latest", "--json").stdout)
        victim = (min if args.victim == "first" else max)(status["processes"], key=lambda p: p["rank"])
        seconds = [m["iteration_seconds"] for m in metrics if m.get("iteration_seconds")]
        iteration_seconds = seconds[-1] if seconds else 0.1
        since = time.time() - record_time(iterations[0])
        wait = max(0.0, rng.uniform(0.1, 0.9) * iteration_seconds - since)
        time.sleep(wait)
        killed_at = time.time()
        os.kill(victim["pid"], signal.SIGKILL)
        out, err = job.communicate(timeout=300)
    except BaseException:
        job.kill()
        job.communicate()
        raise
    if job.returncode != 0:
        raise RuntimeError(f"{app}: bellows run exited {job.returncode}: {err[-2000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    for log in sorted(Path(job_dir, "nodes").glob("*/bellowsd.log")):
        lines += [line for line in log.read_text().splitlines() if line.startswith('{"app"')]
    report = json.loads(lines[-1])
    if report.get("verified") is not True or report.get("ranks") != 2:
        raise RuntimeError(f"{app}: not verified on 2 ranks: ranks {report.get('ranks')}, "
                           f"residual {report.get('residual')}")
    events = read_jsonl(os.path.join(job_dir, "events.jsonl"))
    failures = {e["to"]: e for e in events if e.get("kind") == "failure" and not e.get("refused")}
    metrics = read_jsonl(os.path.join(job_dir, "metrics.jsonl"))
    # An iteration the survivors completed after the kill (the controller's node and rank
    # counts in a record change only once it has heard of the loss, so they are not used).
    after = [m for m in metrics if record_time(m) > killed_at and m.get("node") != victim["node"]]
    before = [m for m in metrics if record_time(m) <= killed_at]
    last_before = max((m.get("iteration", 0) for m in before), default=0)
    first_after = after[0].get("iteration", 0) if after else None
    shutil.rmtree(top, ignore_errors=True)
    recovery = (report.get("recoveries") or [{}])[0]
    return {
        "app": app, "gflops": gflops, "team_size": team_size, "victim": victim["rank"], "victim_node": victim["node"],
        "iteration_seconds": iteration_seconds,
        "kill_to_detected": record_time(failures["detected"]) - killed_at if "detected" in failures else None,
        "kill_to_recovered": record_time(failures["recovered"]) - killed_at if "recovered" in failures else None,
        "kill_to_progress": record_time(after[0]) - killed_at if after else None,
        "completed_before_kill": last_before,
        "first_iteration_after": first_after,
        "iterations_redone": (last_before + 1 - first_after) if first_after is not None else None,
        "iterations": len(report["iterations"]),
        "ranks_rolled_back": recovery.get("ranks_rolled_back"),
        "teams_rolled_back": recovery.get("teams_rolled_back"),
        "runtime_iterations_redone": recovery.get("iterations_redone"),
        "tasks_rerun": sum(r.get("tasks_rerun", 0) for r in report["rank_stats"]),
        "log_bytes_for_replay": recovery.get("log_bytes_for_replay"),
        "log_bytes_replayed": (report.get("message_log") or {}).get("bytes_replayed"),
        "tasks": sum(r.get("tasks", 0) for r in report["rank_stats"]),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--apps", default="gemm,cholesky")
    ap.add_argument("--gflops", default="10,1000", help="emulated device speeds")
    ap.add_argument("--n", type=int, default=1536)
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--kill-after", type=int, default=4, help="iterations reported before the kill")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--victim", choices=["last", "first"], default="last",
                    help="the rank killed: the last node's, or the job's first")
    ap.add_argument("--team-sizes", default="0",
                    help="message-logging team sizes, one configuration each (0: no message logging)")
    ap.add_argument("--checkpoint-every", type=int, default=1, help="iterations between checkpoints")
    args = ap.parse_args()
    team_sizes = [int(t) for t in args.team_sizes.split(",")]
    rows = []
    for round_index in range(args.rounds):
        for app in args.apps.split(","):
            for gflops in [float(g) for g in args.gflops.split(",")]:
                for team_size in team_sizes:
                    result = one_run(args, app, gflops, team_size, args.seed * 1000 + round_index)
                    result["round"] = round_index
                    rows.append(result)
                    print(json.dumps(result), flush=True)

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else float("nan")

    print()
    print(f"{'app':9} {'GF/s':>6} {'team':>4} {'iter s':>7} {'detected s':>11} {'recovered s':>12} "
          f"{'progress s':>11} {'redone':>7} {'rolled back':>11} {'re-run':>7}  (medians of {args.rounds}; "
          f"kill at a random point of an iteration; redone: the most; rolled back: ranks)")
    ok = True
    for app in args.apps.split(","):
        for gflops in [float(g) for g in args.gflops.split(",")]:
            for team_size in team_sizes:
                mine = [r for r in rows if r["app"] == app and r["gflops"] == gflops and r["team_size"] == team_size]
                progress = median([r["kill_to_progress"] for r in mine])
                redone = max(r["iterations_redone"] if r["iterations_redone"] is not None else 99 for r in mine)
                ok = ok and progress < TARGET_PROGRESS_SECONDS and redone <= args.checkpoint_every
                rolled = median([len(r["ranks_rolled_back"] or []) for r in mine])
                print(f"{app:9} {gflops:6.0f} {team_size or 'all':>4} {median([r['iteration_seconds'] for r in mine]):7.3f} "
                      f"{median([r['kill_to_detected'] for r in mine]):11.3f} "
                      f"{median([r['kill_to_recovered'] for r in mine]):12.3f} {progress:11.3f} {redone:7d} "
                      f"{rolled:11g} {median([r['tasks_rerun'] for r in mine]):7g}")
    if len(team_sizes) > 1:
        # Each team size against the first (0: no logging, every rank rolls back), medians of
        # the same run's configurations.
        def ratio(x, y):
            return x / y if y and y == y and x == x else float("nan")
        base = team_sizes[0]
        print(f"against team size {base or 'all'} (ratios of the medians): recovered s, progress s, "
              f"tasks re-run per iteration redone")
        for app in args.apps.split(","):
            for gflops in [float(g) for g in args.gflops.split(",")]:
                def medians(team_size):
                    mine = [r for r in rows if r["app"] == app and r["gflops"] == gflops and r["team_size"] == team_size]
                    return (median([r["kill_to_recovered"] for r in mine]), median([r["kill_to_progress"] for r in mine]),
                            median([r["tasks_rerun"] / r["runtime_iterations_redone"] for r in mine
                                    if r.get("runtime_iterations_redone")]))
                reference = medians(base)
                for team_size in team_sizes[1:]:
                    mine = medians(team_size)
                    print(f"{app:9} {gflops:6.0f} {team_size or 'all':>4} " +
                          " ".join(f"{ratio(m, r):7.2f}" for m, r in zip(mine, reference)))
    print(f"target: progress within {TARGET_PROGRESS_SECONDS} s of the kill, at most {args.checkpoint_every} "
          f"iteration(s) redone (a checkpoint every {args.checkpoint_every}): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
