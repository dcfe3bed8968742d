#!/usr/bin/env python3
"""Plots a libbellows trace: ready tasks and completed tasks per rank over time.

    plot_trace.py TRACE.jsonl --out PREFIX [--iteration I] [--title T]

writes PREFIX-ready.png (tasks ready to run on each rank over time) and
PREFIX-completed.png (tasks each rank has completed so far), the two views of John &
Milthorpe, "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work
Stealing", Figures 2-5.

The trace is what an application run with --trace FILE appends: one JSON object per line,
{"rank":R,"iteration":I,"t":SECONDS,"ready":N,"completed":M}, with t measured from the
start of iteration I on every rank. Without --iteration the highest iteration in the file
is plotted. Blank lines and resize lines ({"event":"resize",...}, docs/runtime.md) are
ignored. A trace file is appended to by every run: remove it
before a run whose trace is to be plotted alone.

Exit codes: 0 plotted; 2 bad command line, unreadable, malformed or empty trace, or an
iteration the trace does not hold; 3 matplotlib missing (Debian: python3-matplotlib).
"""

import argparse
import json
import math
import os
import sys

PROG = "plot_trace.py"
FIELDS = ("rank", "iteration", "t", "ready", "completed")


class TraceError(Exception):
    """A problem with the trace, already phrased for the user."""


def fail(message, code=2):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(code)


def is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_sample(text, where):
    """One trace line -> (rank, iteration, t, ready, completed), or None for a resize line;
    raises TraceError."""
    try:
        sample = json.loads(text)
    except json.JSONDecodeError as e:
        raise TraceError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(sample, dict):
        raise TraceError(f"{where}: expected a JSON object, got {type(sample).__name__}")
    if sample.get("event") == "resize":
        return None
    missing = [f for f in FIELDS if f not in sample]
    if missing:
        raise TraceError(f"{where}: missing field(s) {', '.join(missing)}")
    for field in ("rank", "iteration", "ready", "completed"):
        if not is_count(sample[field]):
            raise TraceError(f"{where}: '{field}' must be a non-negative integer, "
                             f"got {sample[field]!r}")
    t = sample["t"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise TraceError(f"{where}: 't' must be a non-negative number of seconds, got {t!r}")
    return sample["rank"], sample["iteration"], float(t), sample["ready"], sample["completed"]


def read_trace(path):
    """All samples of the file, as tuples; raises TraceError on the first bad line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise TraceError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text ({e.reason})") from None
    samples = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            sample = parse_sample(line, f"{path}:{number}")
            if sample is not None:
                samples.append(sample)
    if not samples:
        raise TraceError(f"{path}: empty trace (no samples)")
    return samples


def series_by_rank(samples, iteration):
    """{rank: (times, ready, completed)} for one iteration, in time order."""
    by_rank = {}
    for rank, it, t, ready, completed in samples:
        if it == iteration:
            by_rank.setdefault(rank, []).append((t, ready, completed))
    out = {}
    for rank in sorted(by_rank):
        points = sorted(by_rank[rank])
        out[rank] = tuple(list(column) for column in zip(*points))
    return out


def plot(series, column, ylabel, title, path):
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for rank, values in series.items():
        times, counts = values[0], values[column]
        label = f"rank {rank}"
        if column == 2:
            label += f" ({counts[-1]} tasks)"
        ax.step(times, counts, where="post", label=label, linewidth=1.2)
    ax.set_xlabel("time since the iteration started (s)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small", ncol=2 if len(series) > 8 else 1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog=PROG, description="Plot ready and completed tasks per rank from a libbellows trace.")
    parser.add_argument("trace", metavar="TRACE.jsonl", help="trace written by --trace FILE")
    parser.add_argument("--out", required=True, metavar="PREFIX",
                        help="write PREFIX-ready.png and PREFIX-completed.png")
    parser.add_argument("--iteration", type=int, metavar="I",
                        help="iteration to plot (default: the highest in the trace)")
    parser.add_argument("--title", metavar="T", help="title of both plots")
    args = parser.parse_args(argv)

    try:
        samples = read_trace(args.trace)
    except TraceError as e:
        fail(str(e))
    iterations = sorted({s[1] for s in samples})
    iteration = iterations[-1] if args.iteration is None else args.iteration
    if iteration not in iterations:
        fail(f"{args.trace}: no samples of iteration {iteration} "
             f"(the trace holds {', '.join(map(str, iterations))})")
    series = series_by_rank(samples, iteration)

    try:
        import matplotlib  # pylint: disable=import-outside-toplevel
    except ImportError:
        fail(f"matplotlib is not available to {sys.executable} "
             "(Debian: apt-get install python3-matplotlib)", code=3)
    matplotlib.use("Agg")

    title = args.title or f"{os.path.basename(args.trace)}, iteration {iteration}"
    directory = os.path.dirname(args.out)
    if directory:
        os.makedirs(directory, exist_ok=True)
    outputs = []
    for suffix, column, ylabel in (("ready", 1, "ready tasks"),
                                   ("completed", 2, "tasks completed")):
        path = f"{args.out}-{suffix}.png"
        plot(series, column, ylabel, f"{title}: {ylabel} per rank", path)
        outputs.append(path)
    print(f"{PROG}: {len(series)} ranks, iteration {iteration}: wrote {' and '.join(outputs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
