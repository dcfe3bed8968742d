#!/usr/bin/env python3
"""Simulated against real runs: bellows-sim next to the real examples at 4, 8 and 16 ranks.

For each app (gemm, cholesky, bspgemm --pattern skewed), rank count, emulated device speed
(GFLOP/s) and stealing setting (off, on), runs the real example under Bellows' mpiexec
(--kernel emulated, OPENBLAS_NUM_THREADS=1, several iterations; the steady iteration time is
the median of the iterations after the warm-up: iterations_for) and bellows-sim with the same graph
(app, n, tile, pattern, density, seed), iterations and stealing options, and prints:

  real and simulated makespan (s), sim / real, within 10 %?;
  tasks stolen and steal requests, real (per iteration: the run's total over its iterations)
  and simulated (its iterations' total over their number), within 20 %?

The machine has 2 cores: 16 ranks (and, less so, 8) are oversubscribed, each rank running a
main thread, a communication thread and a lane thread; the emulated device's lanes sleep
(they do not compute), so what the oversubscription slows is the ranks' CPU work
(communication, copies, scheduling), which simulated nodes each do on a core of their own.
The `cpu` columns show the CPU time per rank and iteration of the communication and copy
threads (comm_cpu_seconds; simulated: what the model charges) over the iteration time; `host`
the real run's whole CPU time (getrusage of the children: every rank and thread, start-up
included) over its wall time and the host's cores: near 1, the run was CPU-bound.

Real runs are repeated --rounds times, interleaved with the simulations; the real makespan is
the median over rounds.

  python3 bench/sim_validate.py [--build build/default] [--quick] [--rounds 2]
      [--apps gemm cholesky bspgemm] [--ranks 4 8 16] [--gflops 10 1000] [--json FILE]
      [--sim-arg=--steal-request-visit-cost-us=40 ...]
  python3 bench/sim_validate.py --resimulate FILE [--sim-arg=...]

--resimulate FILE takes the real reports and the measured platform from an earlier run's
--json FILE and runs only the simulator again: the same real runs against another version or
setting of the simulator, without the noise of new real runs.
"""
import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import MPIEXEC, run_json, makespan  # noqa: E402

# Graph parameters per app: sized so that a real run takes a few seconds at most at
# 10 GFLOP/s on 4 ranks (tile 256: a 33.5 MFLOP GEMM task runs 3.4 ms at 10 GFLOP/s and
# 34 us at 1000).
APPS = {
    "gemm": {"n": 2048, "tile": 256, "extra": []},
    "cholesky": {"n": 3072, "tile": 256, "extra": []},
    "bspgemm": {"n": 3072, "tile": 256, "extra": ["--pattern", "skewed", "--density", "0.5", "--seed", "42"]},
}
QUICK = {
    "gemm": {"n": 1536, "tile": 256, "extra": []},
    "cholesky": {"n": 2048, "tile": 256, "extra": []},
    "bspgemm": {"n": 2048, "tile": 256, "extra": ["--pattern", "skewed", "--density", "0.5", "--seed", "42"]},
}
MAKESPAN_BOUND = 0.10
STEAL_BOUND = 0.20


def iterations_for(gflops):
    """Iterations per run, and how many of the first are left out as warm-up. A real run's
    first iterations pay page faults and first reads of peers' slabs (bench_common.makespan);
    at 1000 GFLOP/s the iteration time falls for about 4-8 iterations (tens of ms each)."""
    return (6, 2) if gflops < 100 else (16, 8)


def real_run(a, app, params, ranks, gflops, steal):
    cmd = [MPIEXEC, "-n", str(ranks), os.path.join(a.build, "examples", app),
           "--n", str(params["n"]), "--tile", str(params["tile"]), *params["extra"],
           "--kernel", "emulated", "--emulated-gflops", str(gflops),
           "--iterations", str(iterations_for(gflops)[0]), "--steal", steal, "--quiet"]
    start = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = run_json(cmd, timeout=a.timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report["_wall"] = time.monotonic() - start
    # The whole run's CPU (every rank and thread, start-up included) over the host's cores.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report["_host_cpu_share"] = cpu / (report["_wall"] * (os.cpu_count() or 1))
    return report


def calibrate(a):
    """The simulated platform's parameters, measured on this machine before the runs (none
    of them from the runs compared): MPI ping-pong latency and one tile's transfer
    (bellows_pingpong, 2 ranks), and the CPU the communication and copy threads spend per
    tile a rank receives (comm_cpu_seconds over tiles received, GEMM n=2048 tile 256 on 2
    ranks at 1000 GFLOP/s, stealing off, 8 iterations: 2 ranks, so each has a core)."""
    tile = 256
    # The least of three medians: the host is shared, and a ping-pong whose ranks wait for
    # a core measures the other jobs.
    pps = [run_json([MPIEXEC, "-n", "2", os.path.join(a.build, "bench", "bellows_pingpong"),
                     "--tile", str(tile), "--repeat", "200"]) for _ in range(3)]
    pp = {"latency_us": min(p["latency_us"] for p in pps), "tile_bytes": pps[0]["tile_bytes"],
          "tile_transfer_us": min(p["tile_transfer_us"] for p in pps)}
    r = run_json([MPIEXEC, "-n", "2", os.path.join(a.build, "examples", "gemm"), "--n", "2048",
                  "--tile", str(tile), "--kernel", "emulated", "--emulated-gflops", "1000",
                  "--iterations", "8", "--steal", "off", "--quiet"])
    tile_bytes = tile * tile * 8
    per_tile = [s["comm_cpu_seconds"] / (s["bytes_received"] / tile_bytes) for s in r["rank_stats"]
                if s["bytes_received"] > 0]
    return {"latency_us": max(pp["latency_us"], 0.01),
            "bandwidth_gbps": pp["tile_bytes"] / (pp["tile_transfer_us"] * 1e3),
            "tile_cpu_us": statistics.median(per_tile) * 1e6,
            "host_cores": os.cpu_count() or 1}


def platform_args(cal, shared):
    return ["--latency-us", f"{cal['latency_us']:.3f}", "--bandwidth-gbps", f"{cal['bandwidth_gbps']:.2f}",
            "--tile-cpu-us", f"{cal['tile_cpu_us']:.1f}",
            "--host-cores", str(cal["host_cores"] if shared else 0)]


def sim_run(a, app, params, ranks, gflops, steal, platform):
    cmd = [os.path.join(a.build, "sim", "bellows-sim"), "--app", app,
           "--n", str(params["n"]), "--tile", str(params["tile"]), *params["extra"],
           "--ranks", str(ranks), "--gflops", str(gflops), "--steal", steal,
           "--iterations", str(iterations_for(gflops)[0]), "--quiet", *platform,
           *a.sim_arg]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def per_iteration(report, key):
    return report["steal"][key] / max(1, len(report["iterations"]))


def steady(report, gflops):
    """The steady iteration time: the median of the iterations after the warm-up."""
    return makespan(report, warmup=iterations_for(gflops)[1])


def within(sim, real, bound):
    if real == 0:
        return sim == 0
    return abs(sim - real) <= bound * real


def comm_cpu_share(report):
    """CPU seconds of the communication and copy threads per rank and iteration, over the
    median iteration time."""
    its = len(report["iterations"])
    cpu = statistics.mean(r.get("comm_cpu_seconds", 0.0) for r in report["rank_stats"]) / its
    return cpu / makespan(report) if makespan(report) > 0 else 0.0


def run_cells(a, cells, real, sims, own, rounds, apps, started):
    """Real runs, --rounds of each cell interleaved, and the simulator once per cell."""
    cal = calibrate(a)
    a.calibration = cal
    print(f"calibration: {cal}", file=sys.stderr, flush=True)
    for rnd in range(rounds):
        for i, cell in enumerate(cells):
            app, ranks, gflops, steal = cell
            print(f"round {rnd + 1}/{rounds}, {i + 1}/{len(cells)}: {app} {ranks} ranks {gflops:g} GF/s "
                  f"steal {steal} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
            r = real_run(a, app, apps[app], ranks, gflops, steal)
            real[cell].append(r)
            if cell not in sims:  # the simulator is deterministic: once per cell
                sims[cell] = sim_run(a, app, apps[app], ranks, gflops, steal, platform_args(cal, True))
                own[cell] = sim_run(a, app, apps[app], ranks, gflops, steal, platform_args(cal, False))
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps({"cell": list(cell), "real": r}) + "\n")
                    if rnd == 0:
                        f.write(json.dumps({"cell": list(cell), "sim": sims[cell]}) + "\n")
                        f.write(json.dumps({"cell": list(cell), "sim_own": own[cell]}) + "\n")


def recorded(a):
    """The cells, real reports and platform of an earlier run's --json FILE (--resimulate)."""
    real, cal = {}, None
    with open(a.resimulate) as f:
        for line in f:
            entry = json.loads(line)
            cell = tuple(entry["cell"])
            if cell[0] not in a.apps or cell[1] not in a.ranks or cell[2] not in a.gflops or cell[3] not in a.steal:
                continue
            if "real" in entry:
                real.setdefault(cell, []).append(entry["real"])
            elif "sim" in entry and cal is None:
                s = entry["sim"]["sim"]
                cal = {"latency_us": s["platform"]["latency_us"], "bandwidth_gbps": s["platform"]["bandwidth_gbps"],
                       "tile_cpu_us": s["tile_cpu_us"], "host_cores": s["host_cores"]}
    if not real or cal is None:
        sys.exit(f"{a.resimulate}: no real and simulated reports of the cells asked for")
    return list(real), real, cal


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build/default")
    p.add_argument("--apps", nargs="+", default=list(APPS), choices=list(APPS))
    p.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--gflops", type=float, nargs="+", default=[10.0, 1000.0])
    p.add_argument("--steal", nargs="+", default=["off", "on"], choices=["off", "on"])
    p.add_argument("--rounds", type=int, default=2, help="real runs per cell, interleaved (median)")
    p.add_argument("--quick", action="store_true", help="smaller graphs, one round")
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--json", help="append every report (real and simulated, one JSON line each) to FILE")
    p.add_argument("--resimulate", metavar="FILE",
                   help="run only the simulator, against the real reports and platform in an earlier --json FILE")
    p.add_argument("--sim-arg", action="append", default=[],
                   help="extra bellows-sim argument (repeatable), e.g. --sim-arg=--task-overhead-us=2")
    a = p.parse_args()
    apps = QUICK if a.quick else APPS
    rounds = 1 if a.quick else a.rounds

    if a.resimulate:
        cells, real, cal = recorded(a)
        rounds = max(len(r) for r in real.values())
        apps = {}
        for (app, *_), rs in real.items():
            apps[app] = next(t[app] for t in (APPS, QUICK) if t[app]["n"] == rs[0]["n"])
    else:
        cells = [(app, ranks, gflops, steal) for app in a.apps for gflops in a.gflops
                 for ranks in a.ranks for steal in a.steal]
        real = {c: [] for c in cells}
    sims, own = {}, {}
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    if a.resimulate:
        for cell in cells:
            app, ranks, gflops, steal = cell
            sims[cell] = sim_run(a, app, apps[app], ranks, gflops, steal, platform_args(cal, True))
            own[cell] = sim_run(a, app, apps[app], ranks, gflops, steal, platform_args(cal, False))
    else:
        run_cells(a, cells, real, sims, own, rounds, apps, started)
        cal = a.calibration
    print(f"# {datetime.date.today().isoformat()}: python3 bench/sim_validate.py "
          f"{' '.join(sys.argv[1:])}".rstrip())
    print("# sizes: " + ", ".join(f"{app} n={apps[app]['n']} tile={apps[app]['tile']}"
                                  f"{' ' + ' '.join(apps[app]['extra']) if apps[app]['extra'] else ''}"
                                  for app in a.apps))
    print(f"# platform (measured here, before the runs): latency {cal['latency_us']:.2f} us, "
          f"{cal['bandwidth_gbps']:.1f} GB/s (MPI ping-pong, one 256 tile), {cal['tile_cpu_us']:.0f} us of "
          f"communication CPU per tile received (gemm, 2 ranks); sim: all ranks share the host's "
          f"{cal['host_cores']} cores; own: a core per rank")
    print(f"# makespan: the steady iteration time, median of iterations 3-6 at 10 GF/s, 9-16 at 1000 "
          f"(real: median over {rounds} round(s)); steals: per iteration, all iterations; "
          f"cpu: communication CPU per rank over the iteration time; host: the real run's CPU "
          f"(all ranks and threads, start-up included) over its wall time and the {os.cpu_count()} cores")
    print(f"# load average (1 min) before the runs {load_before:.1f}, after {os.getloadavg()[0]:.1f}")
    header = (f"{'app':<8} {'ranks':>5} {'GF/s':>5} {'steal':>5} | {'real s':>8} {'sim s':>8} {'sim/real':>8} "
              f"{'10%':>4} {'own s':>8} {'own/real':>8} | {'stolen r':>8} {'stolen s':>8} {'req r':>7} {'req s':>7} {'20%':>4} | "
              f"{'cpu r':>6} {'cpu s':>6} {'host':>5}")
    print(header)
    print("-" * len(header))
    met_time = met_steal = 0
    for cell in cells:
        app, ranks, gflops, steal = cell
        rs = real[cell]
        s = sims[cell]
        t_real = statistics.median(steady(r, gflops) for r in rs)
        t_sim = steady(s, gflops)
        t_own = steady(own[cell], gflops)
        stolen_r = statistics.median(per_iteration(r, "tasks_stolen") for r in rs)
        req_r = statistics.median(per_iteration(r, "requests_sent") for r in rs)
        stolen_s = per_iteration(s, "tasks_stolen")
        req_s = per_iteration(s, "requests_sent")
        ok_t = within(t_sim, t_real, MAKESPAN_BOUND)
        ok_s = steal == "off" or within(round(stolen_s, 1), round(stolen_r, 1), STEAL_BOUND)
        met_time += ok_t
        met_steal += ok_s
        cpu = statistics.median(comm_cpu_share(r) for r in rs)
        cpu_sim = comm_cpu_share(s)
        host = statistics.median(r["_host_cpu_share"] for r in rs)
        print(f"{app:<8} {ranks:>5} {gflops:>5g} {steal:>5} | {t_real:>8.4f} {t_sim:>8.4f} "
              f"{t_sim / t_real:>8.3f} {'yes' if ok_t else 'no':>4} {t_own:>8.4f} {t_own / t_real:>8.3f} | {stolen_r:>8.1f} {stolen_s:>8.1f} "
              f"{req_r:>7.1f} {req_s:>7.1f} {('yes' if ok_s else 'no') if steal == 'on' else '-':>4} | "
              f"{cpu:>6.3f} {cpu_sim:>6.3f} {host:>5.2f}")
    print(f"makespan within {MAKESPAN_BOUND:.0%}: {met_time}/{len(cells)} cells; tasks stolen within "
          f"{STEAL_BOUND:.0%}: {met_steal}/{len(cells)} (stealing off counts as met)")
    print(f"wall time {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
