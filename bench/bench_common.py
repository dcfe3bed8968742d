"""What the benchmark scripts share: Bellows' mpiexec, running an example for its JSON report,
and the steady iteration time of a report."""
import json
import math
import os
import statistics
import subprocess

MPIEXEC = os.path.join(os.environ.get("BELLOWS_DEPS_PREFIX", "/opt/bellows-deps"),
                       "mpich-4.0.2-ch3", "bin", "mpiexec")


def run_json(cmd, env_extra=None, timeout=600):
    """Runs an example (OPENBLAS_NUM_THREADS=1, plus env_extra) and returns the JSON object on
    the last line of its output."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", **(env_extra or {}))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=timeout)
    return json.loads(out.stdout.strip().splitlines()[-1])


def makespan(report, warmup=1):
    """Median iteration time, leaving out the first `warmup` iterations (they pay the warm-up:
    on a virtual machine whose page tables the hypervisor shadows, the first read of each page
    of a peer's tile slab through a new mapping runs at about a tenth of memcpy's speed, and
    bspgemm at 1000 GFLOP/s takes about 8 iterations to reach its steady state; see
    docs/stealing-at-gpu-speed.md). At least the last iteration is kept."""
    seconds = [it["seconds"] for it in report["iterations"]]
    return statistics.median(seconds[min(warmup, len(seconds) - 1):])


def mean_after_first(report):
    """Mean iteration time over the iterations after the first (which pays the warm-up, and with
    checkpoints on, the first checkpoint); the only one when there is one."""
    seconds = [it["seconds"] for it in report["iterations"]]
    return statistics.mean(seconds[1:] if len(seconds) > 1 else seconds)


def print_rounds(rows, ratios, target):
    """Prints each measurement's median and its value in every round, then each same-round
    ratio's median against `target` (met when at most `target`) with its rounds."""
    width = max(len(k) for k in rows) + 2
    print(f"{'measurement':<{width}}{'median':>12}   per round")
    for key, values in rows.items():
        print(f"{key:<{width}}{statistics.median(values):>12.4f}   " +
              " ".join(f"{v:.4f}" for v in values))
    width = max(len(k) for k in ratios) + 2
    print(f"\n{'ratio (same round)':<{width}}{'median':>8}  target   per round")
    for key, values in ratios.items():
        med = statistics.median(values)
        print(f"{key:<{width}}{med:>8.3f}  <={target:<5}  " + " ".join(f"{v:.3f}" for v in values)
              + ("  met" if med <= target else "  NOT met"))


# Two-sided 95 % quantiles of Student's t by degrees of freedom (1..30); 1.96 beyond.
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042]


def ratio_interval(values):
    """The geometric mean of same-round ratios and its 95 % confidence interval (a t interval
    on their logarithms, the rounds taken as independent): (mean, low, high); the interval is
    (nan, nan) with fewer than two rounds."""
    logs = [math.log(v) for v in values]
    mean = statistics.mean(logs)
    if len(logs) < 2:
        return math.exp(mean), float("nan"), float("nan")
    half = (_T95[len(logs) - 2] if len(logs) - 1 <= len(_T95) else 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def print_ratio_intervals(ratios, target):
    """Per same-round ratio: the rounds, the geometric mean with its 95 % interval, the rounds
    above 1, and what the interval says of `target` (below it, above it, or cannot tell)."""
    width = max(len(k) for k in ratios) + 2
    print(f"\n{'ratio (same round)':<{width}}{'rounds':>6} {'geo mean':>9} {'95 % interval':>17} "
          f"{'above 1':>8}  against {target}")
    for key, values in ratios.items():
        mean, low, high = ratio_interval(values)
        verdict = ("below" if high < target else "above" if low > target else "cannot tell") if high == high else "-"
        above = sum(1 for v in values if v > 1.0)
        print(f"{key:<{width}}{len(values):>6} {mean:>9.3f} {low:>8.3f} to {high:<6.3f} {above:>5}/{len(values):<2}  "
              f"{verdict}")


def add_example_arguments(ap, rounds=3, n=4096, ranks=2):
    """The arguments of the benchmarks that run the GEMM and Cholesky examples in interleaved
    rounds (foundation.py, tile_auto.py): --build, --rounds, --n, --ranks, --autogroup-nice."""
    ap.add_argument("--build", default="build/default",
                    help="the build directory whose examples and references run")
    ap.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds")
    ap.add_argument("--n", type=int, default=n, help="matrix order")
    ap.add_argument("--ranks", type=int, default=ranks, help="MPI ranks of each run")
    ap.add_argument("--autogroup-nice", type=int, default=None,
                    help="start the measured processes with this nice value for their scheduler "
                    "autogroup (a negative value needs root)")


def check_example_arguments(ap, args):
    """Refuses (ap.error) a round, matrix order or rank count below 1, naming the option."""
    for option, value in (("--rounds", args.rounds), ("--n", args.n), ("--ranks", args.ranks)):
        if value < 1:
            ap.error(f"{option} must be at least 1, got {value}")


def autogroup_prefix(args, name):
    """The command prefix that starts a process with --autogroup-nice's value for its scheduler
    autogroup, as bench/metg.py does: on a host shared with other work, the measured processes
    then get the cores they ask for. Empty without the option."""
    if args.autogroup_nice is None:
        return []
    return ["/bin/sh", "-c", f'echo {args.autogroup_nice} > /proc/self/autogroup && exec "$@"',
            name]


def load_average():
    """The host's load averages over 1, 5 and 15 minutes, as /proc/loadavg writes them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
