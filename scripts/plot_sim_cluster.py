#!/usr/bin/env python3
"""Compares the runs of bellows-sim-cluster: elasticity off against each policy file.

    plot_sim_cluster.py REPORT.json [REPORT.json ...] --out FILE.png [--title T]

Each REPORT holds JSON lines that bellows-sim-cluster printed (or wrote with --output), one
per workload (e.g. one per seed). Runs are grouped by policy file (elasticity off first);
each bar is the mean over the reports, its whiskers the smallest and largest. Four panels:
utilisation (node-seconds held, and the jobs' node-seconds at their submitted sizes, over the
cluster's), mean wait (all jobs, rigid jobs, malleable jobs), p95 wait, and mean bounded
slowdown. docs/sim.md, "A cluster of elastic and rigid jobs".

Exit codes: 0 plotted; 2 bad command line, unreadable or malformed report; 3 matplotlib
missing (Debian: python3-matplotlib, run with /usr/bin/python3).
"""

import argparse
import json
import os
import sys

PROG = "plot_sim_cluster.py"


def fail(message, code=2):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(code)


def read_reports(paths):
    """Every report line of the files, each a dict with its runs."""
    reports = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as e:
            fail(f"{path}: cannot be read: {e.strerror}")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                report = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{path}:{number}: not a JSON line: {e.msg}")
            if not isinstance(report, dict) or not isinstance(report.get("runs"), list):
                fail(f"{path}:{number}: not a bellows-sim-cluster report (no 'runs' list)")
            reports.append(report)
    if not reports:
        fail("the reports hold no line")
    return reports


def label(run):
    policy = run.get("policy")
    return "elasticity off" if policy is None else os.path.splitext(os.path.basename(policy))[0]


def group(reports):
    """{label: {measure: [value per report]}}, in the order the labels first appear."""
    measures = {
        "utilisation": lambda r: r["utilisation"],
        "work_utilisation": lambda r: r["work_utilisation"],
        "mean_wait": lambda r: r["mean_wait"] / 3600,
        "rigid_wait": lambda r: r["rigid"]["mean_wait"] / 3600,
        "malleable_wait": lambda r: r["malleable"]["mean_wait"] / 3600,
        "p95_wait": lambda r: r["p95_wait"] / 3600,
        "bsld": lambda r: r["mean_bounded_slowdown"],
        "rigid_bsld": lambda r: r["rigid"]["mean_bounded_slowdown"],
    }
    out = {}
    for report in reports:
        for run in report["runs"]:
            try:
                values = {name: get(run) for name, get in measures.items()}
            except (KeyError, TypeError) as e:
                fail(f"a run of policy {run.get('policy')!r} lacks {e}")
            entry = out.setdefault(label(run), {name: [] for name in measures})
            for name, value in values.items():
                entry[name].append(value)
    return out


def main():
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    reports = read_reports(args.reports)
    groups = group(reports)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is missing (Debian: apt install python3-matplotlib; run /usr/bin/python3)", 3)

    labels = list(groups)
    panels = [
        ("utilisation", [("utilisation", "nodes held"), ("work_utilisation", "submitted work")], "fraction of the cluster"),
        ("mean wait", [("mean_wait", "all"), ("rigid_wait", "rigid"), ("malleable_wait", "malleable")], "hours"),
        ("p95 wait", [("p95_wait", "all")], "hours"),
        ("mean bounded slowdown (tau 10 s)", [("bsld", "all"), ("rigid_bsld", "rigid")], "slowdown"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2))
    for ax, (title, series, unit) in zip(axes, panels):
        width = 0.8 / len(series)
        for s, (key, name) in enumerate(series):
            means, low, high = [], [], []
            for lab in labels:
                values = groups[lab][key]
                mean = sum(values) / len(values)
                means.append(mean)
                low.append(mean - min(values))
                high.append(max(values) - mean)
            xs = [i + (s - (len(series) - 1) / 2) * width for i in range(len(labels))]
            ax.bar(xs, means, width, yerr=[low, high], capsize=3, label=name)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right")
        ax.set_title(title)
        ax.set_ylabel(unit)
        if len(series) > 1:
            ax.legend(fontsize="small")
    first = reports[0]
    fig.suptitle(args.title or f"{first.get('jobs')} jobs on {first.get('nodes')} nodes, "
                               f"{len(reports)} workload(s)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"{PROG}: wrote {args.out}")


if __name__ == "__main__":
    main()
