#!/usr/bin/env python3
"""Team-based message logging benchmark: the failure-free overhead of logging on top of buddy
checkpoints on dense GEMM and Cholesky, and the log's memory with TeamLB's teams, teams of one
rank and teams of consecutive ranks, measured in the runs and against what plan_teams() predicts
for the same task graph (bellows_teams_bench).

Every rank names a node of its own (BELLOWS_NODE, one mpiexec segment per rank), so that each has
a buddy on another node. The ranks run the emulated device computing (--kernel emulated
--emulated-compute on) at each speed given, with a checkpoint every --checkpoint-every
iterations, so that the log holds up to that many iterations. Per round, interleaved because the
machine is shared and noisy:

  - checkpoints alone (the baseline of every ratio);
  - logging with teams of 1 rank (every message between ranks logged), of --team-size
    consecutive ranks, and of TeamLB's teams for --team-size (TeamUnit::ranks, the plan's rank
    teams with the tiles where the block-cyclic layout puts them: its moves are not applied);
  - logging with TeamLB applied by the runtime (--team-plan on): consecutive teams for the
    first iteration, then the plan from the measured task times, its tile moves carried out at the
    second iteration's start, which takes a fresh checkpoint;
  - with --steal on (unless --no-steal): checkpoints alone, logging with stealing kept inside the
    teams, and logging with stealing across teams, each task given to another team logged as a
    determinant.

Ratios are each run's mean iteration time (iterations 2..) over the same round's baseline; the
median over the rounds is printed, and the geometric mean of the rounds' ratios with its 95 %
interval (bench_common.ratio_interval), which says whether the overhead is below the target,
above it, or cannot be told from the host's noise. Because that interval is wide on a shared
host, the log's cost is also measured where it is paid: each rank's time in the log's own work
(rank_stats[].message_log.seconds) over the iteration time, printed per cell and team kind as
the median and largest over rounds and ranks beside the wall-clock ratio. Each round runs the configurations in an
order rotated by one from the round before, so that none always follows the same neighbour.
With --overhead-only it runs checkpoints alone, teams of 1 and consecutive teams only (no
TeamLB, no stealing), so that more rounds fit, and takes each run's median iteration time
(iterations 2..) rather than the mean, so that a burst of the host's other work in one
iteration does not decide a round. Target for the overhead: under 3 %. The log's size: bytes
logged per rank and iteration (mean over ranks and iterations), and the largest log a rank held
(after any iteration), each against teams of one rank; predicted: bellows_teams_bench's bytes per
rank for the same graph, rank count and team size (one iteration's messages), measured/predicted.
For TeamLB applied: the log after the second iteration (the first under the plan, which the
fresh checkpoint started empty) against the runtime's own plan's prediction.

Memory, as counts the host's load cannot move (rank_stats[].memory): per rank and iteration
after --warmup, the minor page faults, the tile buffers that took fresh pages, and the most
tile bytes in use at once; and for the first round, per iteration, the iteration's time, faults
and fresh buffers. The log holds up to --checkpoint-every iterations of tiles, so its memory is
taken in the first iterations and reused from then on: --also-warmup N (with --overhead-only)
also gives the same runs' ratios over iterations N+1.., after that warm-up.

  python3 bench/message_log.py --build build/default --rounds 3
  python3 bench/message_log.py --build build/default --overhead-only --rounds 12 --iterations 8
  python3 bench/message_log.py --build build/default --overhead-only --apps cholesky --gflops 1000 \
      --rounds 15 --iterations 14 --also-warmup 4

With --replan-timed it times a job that re-plans instead: logging in --team-size teams with
TeamLB applied (--team-plan on, a window of --load-window iterations), rank --slow-rank
--slow-factor times slower from iteration --slow-from on, run with re-plans on and off in the
same rounds (their order alternating). Per run it prints the iterations' median times after the
first plan before the slowdown, from the slowdown until the re-plan, and after the re-plan (the
off run split at the same iterations as the on run of its round); the re-plan iteration (which
moves the tiles and completes a fresh checkpoint first) against the iteration before it and the
median after it; the team_plan JSON's iteration, gain and slowness; the bytes logged per rank
and iteration before the slowdown and after the re-plan; and the ratio of the job's total time
(all iterations) with re-plans on over off, median and range over the rounds.

  python3 bench/message_log.py --build build/default --replan-timed --rounds 3 --iterations 12
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import (MPIEXEC, load_average, makespan, mean_after_first,  # noqa: E402
                          print_ratio_intervals, print_rounds, run_json)

TARGET = 1.03


def log_sizes(report):
    """Per rank: mean bytes logged per iteration, and the largest log held; both averaged."""
    stats = report["rank_stats"]
    iterations = len(report["iterations"])
    logged = statistics.mean(s["message_log"]["bytes_logged"] / iterations for s in stats)
    peak = statistics.mean(s["message_log"]["peak_bytes_held"] for s in stats)
    determinants = sum(s["message_log"]["determinants_logged"] for s in stats)
    return logged, peak, determinants


def log_time_shares(report):
    """Per rank: the time it spent in the message log's own work (rank_stats[].message_log.seconds:
    recording, trimming, the tiles kept as an iteration starts) over the run's iteration time
    (all iterations, the same on every rank)."""
    run_seconds = sum(it["seconds"] for it in report["iterations"])
    return [s["message_log"]["seconds"] / run_seconds for s in report["rank_stats"]]


def memory_counts(report, warmup):
    """Per rank, over the iterations after the first `warmup` (rank_stats[].memory): minor page
    faults and fresh tile buffers per iteration, and the most tile bytes in use at once (each
    the mean over ranks); counts the host's load cannot move."""
    stats = report["rank_stats"]

    def per_iteration(key):
        return statistics.mean(statistics.mean(s["memory"][key][warmup:] or s["memory"][key][-1:])
                               for s in stats)
    return {"minor page faults": per_iteration("minor_page_faults_by_iteration"),
            "fresh tile buffers": per_iteration("tile_buffers_fresh_by_iteration"),
            "tile MB in use, peak": statistics.mean(s["memory"]["peak_tile_bytes_in_use"] for s in stats) / 1e6}


def memory_series(report):
    """Per iteration: its time (ms), and the mean over ranks of its minor page faults and fresh
    tile buffers."""
    stats = report["rank_stats"]
    out = {key: [statistics.mean(values) for values in zip(*(s["memory"][key] for s in stats))]
           for key in ("minor_page_faults_by_iteration", "tile_buffers_fresh_by_iteration")}
    out["ms"] = [it["seconds"] * 1e3 for it in report["iterations"]]
    return out


def predicted_logs(build, app, ranks, n, tile, team_size, gflops):
    """bellows_teams_bench's row for the graph: bytes logged per rank per iteration for teams of
    one, consecutive teams and TeamLB's teams (tiles unmoved), and TeamLB's rank teams."""
    out = subprocess.run([os.path.join(build, "bench", "bellows_teams_bench"), "--tiles",
                          str(n // tile), "--tile", str(tile), "--ranks", str(ranks),
                          "--team-sizes", str(team_size), "--gflops", str(gflops)],
                         check=True, capture_output=True, text=True)
    rows = json.loads(out.stdout.strip().splitlines()[-1])["rows"]
    row = next(r for r in rows if r["graph"] == app and r["team_size"] == team_size)
    return {"team of 1": row["log_bytes_per_rank_every_message"],
            "consecutive": row["log_bytes_per_rank_consecutive"],
            "TeamLB": row["log_bytes_per_rank_teamlb_before_moves"]}, row["rank_team_teamlb"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build/default")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--team-size", type=int, default=2)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--tile", type=int, default=256)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--checkpoint-every", type=int, default=3)
    ap.add_argument("--gflops", default="10,1000", help="emulated device speeds")
    ap.add_argument("--apps", default="gemm,cholesky")
    ap.add_argument("--no-steal", action="store_true", help="leave out the stealing runs")
    ap.add_argument("--overhead-only", action="store_true",
                    help="checkpoints alone, teams of 1 and consecutive teams only: the failure-free overhead")
    ap.add_argument("--warmup", type=int, default=1,
                    help="iterations left out of each run's time and memory counts (the first pays the warm-up)")
    ap.add_argument("--also-warmup", type=int, default=0,
                    help="with --overhead-only: also the same runs' ratios leaving out this many iterations "
                         "(e.g. until the log has been released once: --checkpoint-every + 1)")
    ap.add_argument("--replan-timed", action="store_true",
                    help="time a job whose rank slows down with TeamLB's re-plans on and off")
    ap.add_argument("--slow-rank", type=int, default=1, help="with --replan-timed: the slowed rank")
    ap.add_argument("--slow-from", type=int, default=5,
                    help="with --replan-timed: the first slowed iteration (counting from 1)")
    ap.add_argument("--slow-factor", type=float, default=4.0,
                    help="with --replan-timed: how many times longer the slowed rank's tasks take")
    ap.add_argument("--load-window", type=int, default=3,
                    help="with --replan-timed: TeamLB's window of iterations")
    args = ap.parse_args()
    for option, value, least in (("--rounds", args.rounds, 1), ("--ranks", args.ranks, 2),
                                 ("--iterations", args.iterations, 1), ("--slow-from", args.slow_from, 1),
                                 ("--load-window", args.load_window, 1)):
        if value < least:
            ap.error(f"{option} must be at least {least}, got {value}")
    if args.replan_timed and not 0 <= args.slow_rank < args.ranks:
        ap.error(f"--slow-rank must be a rank below --ranks {args.ranks}, got {args.slow_rank}")
    if args.replan_timed and args.slow_from < 3:
        ap.error(f"--slow-from must be at least 3 with --replan-timed (iteration 2 applies the first plan), "
                 f"got {args.slow_from}")
    ex = os.path.join(args.build, "examples")

    def run(app, gflops, flags):
        common = ["--n", str(args.n), "--tile", str(args.tile), "--iterations",
                  str(args.iterations), "--kernel", "emulated", "--emulated-gflops", str(gflops),
                  "--emulated-compute", "on", "--quiet", "--checkpoint", "on",
                  "--checkpoint-every", str(args.checkpoint_every)] + flags
        cmd = [MPIEXEC]
        for rank in range(args.ranks):
            if rank:
                cmd.append(":")
            cmd += ["-n", "1", "-env", "BELLOWS_NODE", f"node{rank}",
                    os.path.join(ex, app)] + common
        return run_json(cmd)

    speeds = [float(g) for g in args.gflops.split(",")]
    apps = args.apps.split(",")
    t = args.team_size
    if args.replan_timed:
        replan_timed(args, run, apps, speeds)
        return
    rows, ratios = {}, {}
    shares = {}  # (cell, team kind) -> the log's share of the iteration time, every rank and round
    series = {}  # (cell, configuration) -> the first round's memory counts per iteration
    by_iteration = {}  # (cell, configuration) -> per round, its iteration times over the same round's baseline's

    def add(table, key, value):
        table.setdefault(key, []).append(value)

    plans = {}
    teams_applied = {}
    for app in apps:
        for gflops in speeds:
            plans[(app, gflops)] = (({}, []) if args.overhead_only else
                                    predicted_logs(args.build, app, args.ranks, args.n, args.tile, t, gflops))
    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        add(rows, "host load average (1 min) at the round's start", os.getloadavg()[0])
        for app in apps:
            for gflops in speeds:
                label = f"{app} {gflops:g} GFLOP/s"
                predicted, teamlb = plans[(app, gflops)]
                teams_flag = ",".join(str(x) for x in teamlb)
                configurations = {
                    "checkpoints": [],
                    "team of 1": ["--message-log", "on", "--team-size", "1"],
                    "consecutive": ["--message-log", "on", "--team-size", str(t)],
                    "TeamLB": ["--message-log", "on", "--teams", teams_flag],
                    "TeamLB applied": ["--message-log", "on", "--team-size", str(t),
                                       "--team-plan", "on"],
                }
                if args.overhead_only:
                    for name in ("TeamLB", "TeamLB applied"):
                        del configurations[name]
                if not args.no_steal and not args.overhead_only:
                    steal = ["--steal", "on"]
                    configurations.update({
                        "steal: checkpoints": steal,
                        "steal: in teams": steal + ["--message-log", "on", "--team-size", str(t)],
                        "steal: across teams": steal + ["--message-log", "on", "--team-size",
                                                        str(t), "--steal-across-teams", "on"],
                    })
                times, sizes, later, seconds = {}, {}, {}, {}
                names = list(configurations)
                shift = rnd % len(names)
                for name in names[shift:] + names[:shift]:
                    flags = configurations[name]
                    report = run(app, gflops, flags)
                    times[name] = (makespan(report, args.warmup) if args.overhead_only
                                   else mean_after_first(report))
                    if args.also_warmup and args.overhead_only:
                        later[name] = makespan(report, args.also_warmup)
                    add(rows, f"{label}, {name}: iteration (ms)", times[name] * 1e3)
                    sizes[name] = log_sizes(report)
                    seconds[name] = [it["seconds"] for it in report["iterations"]]
                    for what, value in memory_counts(report, args.warmup).items():
                        add(rows, f"{label}, {name}: {what} per rank"
                            + ("" if what.startswith("tile MB") else f" per iteration ({args.warmup + 1}..)"), value)
                    if rnd == 0:
                        series[(label, name)] = memory_series(report)
                    add(rows, f"{label}, {name}: copied on write per rank per iteration (MB)",
                        statistics.mean(s["copy_on_write_bytes"] for s in report["rank_stats"])
                        / len(report["iterations"]) / 1e6)
                    if name != "checkpoints" and not name.startswith("steal: checkpoints"):
                        rank_shares = log_time_shares(report)
                        shares.setdefault((label, name), []).extend(rank_shares)
                        add(rows, f"{label}, {name}: log's own time / iteration time, median rank (%)",
                            statistics.median(rank_shares) * 100)
                    if name == "TeamLB applied" and "team_plan" in report:
                        plan = report["team_plan"]
                        after = statistics.mean(s["message_log"]["bytes_held_by_iteration"][1]
                                                for s in report["rank_stats"])
                        expected = statistics.mean(plan["predicted_logged_bytes"])
                        add(rows, f"{label}, TeamLB applied: logged per rank, iteration 2 (MB)",
                            after / 1e6)
                        add(rows, f"{label}, TeamLB applied: logged / team of 1", after / sizes["team of 1"][0])
                        if expected > 0:
                            add(rows, f"{label}, TeamLB applied: measured / predicted", after / expected)
                        add(rows, f"{label}, TeamLB applied: tiles moved", plan["tiles_moved"])
                        add(rows, f"{label}, TeamLB applied: worst team's I before",
                            plan["imbalance_before"])
                        add(rows, f"{label}, TeamLB applied: worst team's I after", plan["imbalance_after"])
                        teams_applied[(app, gflops)] = plan["rank_team"]
                for name in configurations:
                    base = "steal: checkpoints" if name.startswith("steal") else "checkpoints"
                    if name != base:
                        by_iteration.setdefault((label, name), []).append(
                            [a / b for a, b in zip(seconds[name], seconds[base])])
                        add(ratios, f"{label}: {name} / {base}", times[name] / times[base])
                        if name in later:
                            add(ratios, f"{label}: {name} / {base}, iterations {args.also_warmup + 1}..",
                                later[name] / later[base])
                for name in ("team of 1", "consecutive", "TeamLB"):
                    if name not in sizes:
                        continue
                    logged, peak, _ = sizes[name]
                    add(rows, f"{label}, {name}: logged per rank per iteration (MB)", logged / 1e6)
                    add(rows, f"{label}, {name}: largest log held, mean rank (MB)", peak / 1e6)
                    if sizes["team of 1"][0] > 0:
                        add(rows, f"{label}, {name}: logged / team of 1", logged / sizes["team of 1"][0])
                    if predicted.get(name, 0) > 0:
                        add(rows, f"{label}, {name}: measured / predicted", logged / predicted[name])
                if not args.no_steal and not args.overhead_only:
                    add(rows, f"{label}: determinants logged, stealing across teams",
                        sizes["steal: across teams"][2])
    print(f"TeamLB teams ({t} ranks each): " + "; ".join(
        f"{a} {g:g}: {plans[(a, g)][1]}" for a in apps for g in speeds) +
          "; applied by the runtime: " + "; ".join(f"{k[0]} {k[1]:g}: {v}"
                                                   for k, v in teams_applied.items()),
          file=sys.stderr)

    print(f"\n{args.ranks} ranks, one node each, emulated device computing, n={args.n} "
          f"tile={args.tile}, {args.iterations} iterations "
          f"({'median' if args.overhead_only else 'mean'} of 2..), a checkpoint every "
          f"{args.checkpoint_every} iterations, teams of {t}, {args.rounds} interleaved rounds\n")
    print(f"host load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print_rounds(rows, ratios, TARGET)
    print_ratio_intervals(ratios, TARGET)
    print_log_time_shares(shares, ratios)
    print_memory_series(series)
    print_iteration_ratios(by_iteration)


def logged_by_iteration(report):
    """Per iteration, the bytes logged per rank (mean over ranks): the growth of the log held
    after it (rank_stats[].message_log.bytes_held_by_iteration), or all of it where a checkpoint
    or a plan released the log before the iteration."""
    series = [s["message_log"]["bytes_held_by_iteration"] for s in report["rank_stats"]]
    held = [statistics.mean(values) for values in zip(*series)]
    return [h - p if h >= p else h for p, h in zip([0.0] + held, held)]


def replan_timed(args, run, apps, speeds):
    """--replan-timed: per app and speed, runs with re-plans on and off in the same rounds and
    prints per run the phases' iteration times, the re-plan's own iteration, the plan that holds
    and the log per iteration, then the job's total time on over off."""
    flags = ["--message-log", "on", "--team-size", str(args.team_size), "--team-plan", "on",
             "--load-window", str(args.load_window), "--slow-rank", str(args.slow_rank),
             "--slow-from", str(args.slow_from), "--slow-factor", f"{args.slow_factor:g}"]
    totals = {}  # (app, gflops) -> per round, total time with re-plans on over off
    lines = []
    loads = []

    def median_ms(seconds, first, last):
        """The median of iterations first..last (counting from 1, inclusive) in ms, or nan."""
        part = seconds[first - 1:last]
        return statistics.median(part) * 1e3 if part else float("nan")

    for rnd in range(args.rounds):
        print(f"round {rnd + 1}/{args.rounds} ...", file=sys.stderr, flush=True)
        loads.append(os.getloadavg()[0])
        for app in apps:
            for gflops in speeds:
                reports = {}
                order = ("on", "off") if rnd % 2 == 0 else ("off", "on")
                for replan in order:
                    reports[replan] = run(app, gflops, flags + ["--replan", replan])
                plan = reports["on"].get("team_plan", {})
                replanned = plan.get("replanned", False)
                at = plan["before_iteration"] if replanned else None
                for replan in ("on", "off"):
                    report = reports[replan]
                    seconds = [it["seconds"] for it in report["iterations"]]
                    logged = logged_by_iteration(report)
                    holds = report.get("team_plan", {})
                    last = len(seconds)
                    end = at - 1 if at else last
                    row = {"round": rnd + 1, "app": app, "gflops": gflops, "replan": replan,
                           "total_s": sum(seconds),
                           "before_ms": median_ms(seconds, 3, args.slow_from - 1),
                           "slowed_ms": median_ms(seconds, args.slow_from, end),
                           "after_ms": median_ms(seconds, at + 1, last) if at else float("nan"),
                           "replan_iteration_ms": seconds[at - 1] * 1e3 if at else float("nan"),
                           "iteration_before_it_ms": seconds[at - 2] * 1e3 if at else float("nan"),
                           "plan_before_iteration": holds.get("before_iteration"),
                           "replanned": holds.get("replanned"),
                           "predicted_gain": holds.get("predicted_gain"),
                           "rank_slowness": holds.get("rank_slowness"),
                           "tiles_moved": holds.get("tiles_moved"),
                           "logged_before_MB": (statistics.mean(logged[2:args.slow_from - 1] or [float("nan")])
                                                / 1e6),
                           "logged_after_MB": (statistics.mean(logged[at:] or [float("nan")]) / 1e6
                                               if at else float("nan"))}
                    lines.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
                totals.setdefault((app, gflops), []).append(
                    sum(it["seconds"] for it in reports["on"]["iterations"]) /
                    sum(it["seconds"] for it in reports["off"]["iterations"]))

    print(f"\n{args.ranks} ranks, one node each, emulated device computing, n={args.n} tile={args.tile}, "
          f"{args.iterations} iterations, a checkpoint every {args.checkpoint_every} iterations, teams of "
          f"{args.team_size}, TeamLB applied with a window of {args.load_window}, rank {args.slow_rank} "
          f"{args.slow_factor:g}x slower from iteration {args.slow_from}, {args.rounds} rounds "
          f"(re-plans on and off alternating first)")
    print("host load average (1 min) at each round's start: " + " ".join(f"{v:.2f}" for v in loads)
          + f"; at the end: {load_average()} on {os.cpu_count()} cores")
    print("\nper run: iteration medians (ms): before = 3..slow-from-1, slowed = slow-from..re-plan-1, "
          "after = re-plan+1..; the re-plan's iteration and the one before it (ms); the plan that holds "
          "(before iteration, re-plan?, predicted gain, slowness, tiles moved); "
          "logged per rank and iteration (MB) before and after")
    header = (f"{'cell':<22}{'rnd':>4}{'replan':>7}{'total s':>9}{'before':>8}{'slowed':>8}{'after':>8}"
              f"{'re-plan':>9}{'prior':>8}  {'plan':<44}{'log MB':>14}")
    print(header)
    for r in lines:
        plan = (f"it {r['plan_before_iteration']} {'re-plan' if r['replanned'] else 'first'} "
                f"gain {r['predicted_gain'] or 0:.2f} moved {r['tiles_moved']} "
                f"{[round(v, 2) for v in r['rank_slowness'] or []]}")
        print(f"{r['app'] + ' ' + format(r['gflops'], 'g') + ' GFLOP/s':<22}{r['round']:>4}{r['replan']:>7}"
              f"{r['total_s']:>9.2f}{r['before_ms']:>8.0f}{r['slowed_ms']:>8.0f}{r['after_ms']:>8.0f}"
              f"{r['replan_iteration_ms']:>9.0f}{r['iteration_before_it_ms']:>8.0f}  {plan:<44}"
              f"{r['logged_before_MB']:>7.2f}{r['logged_after_MB']:>7.2f}")
    print("\ntotal job time, re-plans on / off (same round): median [range] per round")
    for (app, gflops), values in totals.items():
        print(f"{app + ' ' + format(gflops, 'g') + ' GFLOP/s':<22}{statistics.median(values):>7.3f} "
              f"[{min(values):.3f}, {max(values):.3f}]   " + " ".join(f"{v:.3f}" for v in values))


def print_log_time_shares(shares, ratios):
    """The log's cost where it is paid, per cell and team kind: its own time as a share of the
    iteration time (median and largest over rounds and ranks), beside the wall-clock ratio's
    median over the rounds."""
    print("\nthe log's own time (rank_stats[].message_log.seconds) / iteration time, "
          "over rounds and ranks; wall clock: median same-round ratio to checkpoints alone")
    width = max(len(f"{cell}, {name}") for cell, name in shares) + 2
    print(f"{'cell, teams':<{width}}{'median %':>10}{'max %':>8}{'wall ratio':>12}   < 3 %")
    for (cell, name), values in shares.items():
        base = "steal: checkpoints" if name.startswith("steal") else "checkpoints"
        wall = ratios.get(f"{cell}: {name} / {base}")
        median = statistics.median(values) * 100
        print(f"{cell + ', ' + name:<{width}}{median:>10.3f}{max(values) * 100:>8.3f}"
              f"{statistics.median(wall) if wall else float('nan'):>12.3f}   "
              f"{'yes' if median < 3 else 'no'}")


def print_memory_series(series):
    """The first round's minor page faults and fresh tile buffers per iteration (mean over the
    ranks, rank_stats[].memory): where a configuration takes fresh memory, and for how long."""
    print("\nper iteration, first round: iteration time (ms) | mean over ranks "
          "(rank_stats[].memory): minor page faults | fresh tile buffers")
    width = max(len(f"{cell}, {name}") for cell, name in series) + 2
    for (cell, name), counts in series.items():
        ms = " ".join(f"{v:.0f}" for v in counts["ms"])
        faults = " ".join(f"{v:.0f}" for v in counts["minor_page_faults_by_iteration"])
        fresh = " ".join(f"{v:.1f}" for v in counts["tile_buffers_fresh_by_iteration"])
        print(f"{cell + ', ' + name:<{width}}{ms} | {faults} | {fresh}")


def print_iteration_ratios(by_iteration):
    """Per iteration: the median over the rounds of its time over the same iteration's in the
    same round's baseline: which iterations a configuration makes slower."""
    print("\nper iteration: median over rounds of (iteration time) / (the same iteration, same round, "
          "checkpoints alone)")
    width = max(len(f"{cell}, {name}") for cell, name in by_iteration) + 2
    for (cell, name), rounds in by_iteration.items():
        medians = [statistics.median(values) for values in zip(*rounds)]
        print(f"{cell + ', ' + name:<{width}}" + " ".join(f"{v:.2f}" for v in medians))


if __name__ == "__main__":
    main()
