#!/usr/bin/env python3
"""Recovery benchmark: how long a job under `bellows run` takes from a rank's death to progress
again, and how much work it redoes, on the local backend with real processes.

Each run starts `bellows run --nodes R:R` (R from --ranks, 3 unless told; a rank per node) of
an example (GEMM or Cholesky) on the emulated device computing at the given speed, with buddy
checkpoints at every iteration boundary (`--checkpoint-every 1`, so that at most one iteration
is redone), and SIGKILLs the rank's process (found under the pid `bellows status` gives, which
may be its launcher's) of the last node (--victim last) or the job's first rank (--victim first, the process `bellows run`
started; the job's report then comes from the new first rank, in its node's log) once the job
has reported --kill-after iterations, at a random point of the next
iteration (uniform over its middle 80 %, from the last iteration's length; a death in the gap
between two iterations is a case of its own, see docs/runtime.md, "The resize API", and
docs/recovery.md). The job must finish with a
verified result on R - 1 ranks. From the kill's wall-clock time and the job's own records:

  - detected:  the controller's failure record (event log, `to: detected`) -- the daemon saw its
               rank die;
  - recovered: the first rank reported the job recovered (`to: recovered`): the survivors agreed,
               rebuilt their communicator and rolled back to the checkpoint;
  - progress:  the first iteration the survivors completed after the kill (the first metrics
               report of a surviving node after it in `metrics.jsonl`): the job progressing
               again;
  - caught up: the first metrics report of the iteration the kill interrupted (the report's
               `recoveries[0].interrupted_iteration`): the lost work redone;
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
the same run. A team size of R or more is one team (every rank rolls back) and is left out for
that rank count. With several rank counts (--ranks 8,16) every round runs each rank count, app,
speed and team size in turn, so that the host's load falls alike on all; each run records the
host's load average as it starts. Then, per rank count, a table side by side: ranks rolled
back, tasks re-run, recovery time, kill to progress, each with its ratio to the first team size
(0: global roll-back) as the median of the same round's ratios.

Median over --rounds runs per configuration, every run printed. Targets (issue: "a lost node
does not take the job with it"): progress within 2 s of the kill on the local backend; work
redone at most one checkpoint interval.

  python3 bench/recovery.py --build build/default --rounds 3
  python3 bench/recovery.py --build build/default --apps gemm --gflops 10 --team-sizes 0,1,2 --checkpoint-every 3
  python3 bench/recovery.py --build build/default --apps gemm --ranks 8,16 --team-sizes 0,1,4,8 \
      --checkpoint-every 3 --n 512 --tile 64 --iterations 30
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


def read_jsonl_so_far(path):
    """The records of a JSON-lines file the job is still appending to: a line still being
    written is left for the next read (seen once each in 38 runs on 8 and 16 ranks: a line cut
    short, and a line whose first bytes were no JSON yet; either ended the bench)."""
    records = []
    if not os.path.exists(path):
        return records
    with open(path) as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def record_time(record):
    """A record's wall-clock time, seconds since the epoch (the logs write it in ISO 8601, UTC,
    to the millisecond: 2026-11-27T22:13:07.796Z)."""
    stamp = datetime.datetime.strptime(record["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp()


def rank_process(pid, app):
    """The process of the example under `pid`: `pid` itself, or a descendant of it (`bellows
    status` may still name the rank's launcher, mpiexec, whose proxy started the rank)."""
    children = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
        except (OSError, IndexError):
            continue
    todo = [pid]
    while todo:
        candidate = todo.pop(0)
        try:
            argv0 = (Path("/proc") / str(candidate) / "cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            argv0 = ""
        if os.path.basename(argv0) == app:
            return candidate
        todo += children.get(candidate, [])
    raise RuntimeError(f"{app}: no process of the example under pid {pid}")


def one_run(args, ranks, app, gflops, team_size, seed):
    top = tempfile.mkdtemp(prefix="bellows-recovery-bench-")
    try:
        return run_in(top, args, ranks, app, gflops, team_size, seed)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def run_in(top, args, ranks, app, gflops, team_size, seed):
    env = dict(os.environ, BELLOWS_RUN_DIR=top, BELLOWS_LOCAL_POOL=os.path.join(top, "pool.json"),
               OPENBLAS_NUM_THREADS="1")
    example = os.path.join(args.build, "examples", app)
    load_at_start = os.getloadavg()[0]
    cmd = [os.path.join(args.build, "cli", "bellows"), "run", "--nodes", f"{ranks}:{ranks}", "--pool", str(ranks),
           "--quiet",
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
                metrics = read_jsonl_so_far(os.path.join(job_dir, "metrics.jsonl"))
                iterations = [m for m in metrics if m.get("iteration", 0) >= args.kill_after]
                if iterations:
                    break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"{app}: iteration {args.kill_after} not reported within 120 s")
        status = json.loads(bellows(args.build, env, "status", "latest", "--json").stdout)
        # Processes whose rank is not known yet (a join still settling) are not candidates.
        ranked = [p for p in status["processes"] if p.get("rank") is not None]
        if len(ranked) != ranks:
            raise RuntimeError(f"{app}: {len(ranked)} of {ranks} ranks known to `bellows status` at the kill")
        victim = (min if args.victim == "first" else max)(ranked, key=lambda p: p["rank"])
        seconds = [m["iteration_seconds"] for m in metrics if m.get("iteration_seconds")]
        iteration_seconds = seconds[-1] if seconds else 0.1
        since = time.time() - record_time(iterations[0])
        wait = max(0.0, rng.uniform(0.1, 0.9) * iteration_seconds - since)
        time.sleep(wait)
        victim_pid = rank_process(victim["pid"], app)
        killed_at = time.time()
        try:
            os.kill(victim_pid, signal.SIGKILL)
        except ProcessLookupError:
            raise RuntimeError(f"{app}: rank {victim['rank']}'s process {victim_pid} ended before the kill") from None
        out, err = job.communicate(timeout=300)
    except BaseException:
        job.kill()
        job.communicate()
        raise
    if job.returncode != 0:
        # The ranks' own errors, from their nodes' logs, say why.
        errors = sorted({line for log in Path(job_dir, "nodes").glob("*/*.log")
                         for line in log.read_text(errors="replace").splitlines() if f"{app}: error:" in line})
        raise RuntimeError(f"{app}: bellows run exited {job.returncode}: " + "\n".join(errors) + "\n" + err[-2000:])
    lines = [line for line in out.splitlines() if line.startswith("{")]
    for log in sorted(Path(job_dir, "nodes").glob("*/bellowsd.log")):
        lines += [line for line in log.read_text().splitlines() if line.startswith('{"app"')]
    report = json.loads(lines[-1])
    if report.get("ranks") == ranks:
        raise RuntimeError(f"{app}: the job ended on {ranks} ranks: the kill ended no rank before its last "
                           f"iteration")
    if report.get("verified") is not True or report.get("ranks") != ranks - 1:
        raise RuntimeError(f"{app}: not verified on {ranks - 1} ranks: ranks {report.get('ranks')}, "
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
    recovery = (report.get("recoveries") or [{}])[0]
    # The interrupted iteration completed (a metrics record's `iteration` counts iterations
    # from 1, the runtime's from 0): the work lost redone. Not from the records before the
    # kill, which reach the controller late on a loaded host.
    interrupted = recovery.get("interrupted_iteration")
    caught_up = [m for m in after if interrupted is not None and m.get("iteration", 0) > interrupted]
    return {
        "ranks": ranks, "load": load_at_start, "app": app, "gflops": gflops, "team_size": team_size, "victim": victim["rank"], "victim_node": victim["node"],
        "iteration_seconds": iteration_seconds,
        "kill_to_detected": record_time(failures["detected"]) - killed_at if "detected" in failures else None,
        "kill_to_recovered": record_time(failures["recovered"]) - killed_at if "recovered" in failures else None,
        "kill_to_progress": record_time(after[0]) - killed_at if after else None,
        "kill_to_caught_up": record_time(caught_up[0]) - killed_at if caught_up else None,
        "completed_before_kill": last_before,
        "first_iteration_after": first_after,
        "iterations_redone": (last_before + 1 - first_after) if first_after is not None else None,
        "iterations": len(report["iterations"]),
        "ranks_rolled_back": recovery.get("ranks_rolled_back"),
        "teams_rolled_back": recovery.get("teams_rolled_back"),
        "rolled_back_globally_because": recovery.get("rolled_back_globally_because"),
        "runtime_iterations_redone": recovery.get("iterations_redone"),
        "interrupted_iteration": interrupted,
        "tasks_rerun": sum(r.get("tasks_rerun", 0) for r in report["rank_stats"]),
        "tasks_rerun_by_rank": [r.get("tasks_rerun", 0) for r in report["rank_stats"]],
        "runtime_recover_seconds": recovery.get("seconds"),
        "log_bytes_for_replay": recovery.get("log_bytes_for_replay"),
        "log_bytes_replayed": (report.get("message_log") or {}).get("bytes_replayed"),
        "tasks": sum(r.get("tasks", 0) for r in report["rank_stats"]),
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def ratio(x, y):
    return x / y if x is not None and y and y == y and x == x else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", default="3", help="rank counts (one node each), one configuration each")
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
    rank_counts = [int(r) for r in args.ranks.split(",")]
    apps = args.apps.split(",")
    speeds = [float(g) for g in args.gflops.split(",")]

    def sizes_for(ranks):  # a team of every rank is global roll-back: left out
        return [t for t in team_sizes if t < ranks]

    rows, failed = [], []
    for round_index in range(args.rounds):
        for ranks in rank_counts:
            for app in apps:
                for gflops in speeds:
                    for team_size in sizes_for(ranks):
                        try:
                            result = one_run(args, ranks, app, gflops, team_size, args.seed * 1000 + round_index)
                        except RuntimeError as error:
                            # A job that did not recover is counted and told, not hidden.
                            lines = [line for line in str(error).splitlines() if "error:" in line] or [str(error)]
                            failed.append({"round": round_index, "ranks": ranks, "app": app, "gflops": gflops,
                                           "team_size": team_size, "why": lines[0][-300:]})
                            print(json.dumps(failed[-1]), flush=True)
                            continue
                        result["round"] = round_index
                        rows.append(result)
                        print(json.dumps(result), flush=True)

    def of(ranks, app, gflops, team_size):
        return [r for r in rows if r["ranks"] == ranks and r["app"] == app and r["gflops"] == gflops and
                r["team_size"] == team_size]

    print()
    print(f"{'ranks':>5} {'app':9} {'GF/s':>6} {'team':>4} {'iter s':>7} {'detected s':>11} {'recovered s':>12} "
          f"{'progress s':>11} {'redone':>7} {'rolled back':>11} {'re-run':>7}  (medians of {args.rounds}; "
          f"kill at a random point of an iteration; redone: the most; rolled back: ranks)")
    ok = True
    for ranks in rank_counts:
        for app in apps:
            for gflops in speeds:
                for team_size in sizes_for(ranks):
                    mine = of(ranks, app, gflops, team_size)
                    progress = median([r["kill_to_progress"] for r in mine])
                    redone = max(r["iterations_redone"] if r["iterations_redone"] is not None else 99 for r in mine)
                    ok = ok and progress < TARGET_PROGRESS_SECONDS and redone <= args.checkpoint_every
                    rolled = median([len(r["ranks_rolled_back"] or []) for r in mine])
                    print(f"{ranks:5d} {app:9} {gflops:6.0f} {team_size or 'all':>4} "
                          f"{median([r['iteration_seconds'] for r in mine]):7.3f} "
                          f"{median([r['kill_to_detected'] for r in mine]):11.3f} "
                          f"{median([r['kill_to_recovered'] for r in mine]):12.3f} {progress:11.3f} {redone:7d} "
                          f"{rolled:11g} {median([r['tasks_rerun'] for r in mine]):7g}")
    if len(team_sizes) > 1:
        # Side by side, each team size against the first (0: no logging, every rank rolls back):
        # per round the ratio of the two runs of that round, then the median over the rounds.
        base = team_sizes[0]
        measures = [("redone", lambda r: r["runtime_iterations_redone"]),
                    ("rolled back", lambda r: len(r["ranks_rolled_back"] or [])),
                    ("re-run/redone", lambda r: r["tasks_rerun"] / r["runtime_iterations_redone"]
                     if r.get("runtime_iterations_redone") else None),
                    ("recover s", lambda r: r["runtime_recover_seconds"]),
                    ("recovered s", lambda r: r["kill_to_recovered"]),
                    ("progress s", lambda r: r["kill_to_progress"]),
                    ("caught up s", lambda r: r["kill_to_caught_up"])]
        print(f"\nagainst team size {base or 'all'} (global roll-back): each measure's median, then the median of "
              f"the same round's ratios; re-run/redone: tasks re-run per iteration redone; recover s: "
              f"the runtime's recover(); from the kill: recovered s (the first rank's report), progress s (the "
              f"first iteration completed), caught up s (the first past the last completed before the kill)")
        print(f"{'ranks':>5} {'app':9} {'GF/s':>6} {'team':>4} " +
              " ".join(f"{name:>14} {'ratio':>5}" for name, _ in measures))
        for ranks in rank_counts:
            for app in apps:
                for gflops in speeds:
                    reference = {r["round"]: r for r in of(ranks, app, gflops, base)}
                    for team_size in sizes_for(ranks):
                        mine = of(ranks, app, gflops, team_size)
                        cells = []
                        for _, measure in measures:
                            values = [measure(r) for r in mine]
                            ratios = [ratio(measure(r), measure(reference[r["round"]])) for r in mine
                                      if r["round"] in reference]
                            cells.append(f"{median(values):14.3f} {median(ratios):5.2f}")
                        print(f"{ranks:5d} {app:9} {gflops:6.0f} {team_size or 'all':>4} " + " ".join(cells))
    for f in failed:
        print(f"FAILED: round {f['round']}, {f['ranks']} ranks, {f['app']} {f['gflops']:g} GFLOP/s, "
              f"team size {f['team_size'] or 'all'}: {f['why']}")
    print(f"{len(failed)} of {len(failed) + len(rows)} runs did not end verified")
    loads = [r["load"] for r in rows]
    print(f"host load average (1 min) as the runs started: median {median(loads):.2f}, "
          f"{min(loads):.2f} to {max(loads):.2f}, on {os.cpu_count()} cores")
    print(f"target: progress within {TARGET_PROGRESS_SECONDS} s of the kill, at most {args.checkpoint_every} "
          f"iteration(s) redone (a checkpoint every {args.checkpoint_every}): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
