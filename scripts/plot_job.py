#!/usr/bin/env python3
"""Plots a job run by `bellows run` on one timeline: the job's GFLOP/s and each node's ready
tasks (from the ranks' metrics), the number of nodes, and each resize from its request to its
final state (from the event log).

    plot_job.py JOB_DIR --out FILE.png [--title T]

JOB_DIR holds events.jsonl and metrics.jsonl (what `bellows run` writes). Exit codes: 0
plotted; 2 bad command line or unreadable, malformed or empty files; 3 matplotlib missing
(Debian: python3-matplotlib).
"""

import argparse
import datetime
import json
import os
import sys

PROG = "plot_job.py"


def fail(message, code=2):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(code)


def seconds(stamp):
    """"2026-11-21T11:12:33.115Z" -> POSIX seconds."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def read_lines(path, required):
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    missing = [k for k in required if k not in row]
                    if missing:
                        raise ValueError(f"missing {', '.join(missing)}")
                    row["t"] = seconds(row["time"])
                except ValueError as e:
                    fail(f"{path}:{number}: {e}")
                rows.append(row)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    return rows


def main():
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("job_dir")
    p.add_argument("--out", required=True)
    p.add_argument("--title", default=None)
    a = p.parse_args()
    metrics = read_lines(os.path.join(a.job_dir, "metrics.jsonl"),
                         ("time", "node", "ready_tasks", "job_gflops", "nodes"))
    events = read_lines(os.path.join(a.job_dir, "events.jsonl"),
                        ("time", "resize", "kind", "event", "from", "to", "refused"))
    if not metrics:
        fail(f"{a.job_dir}/metrics.jsonl holds no metrics: did the job run an iteration?")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("matplotlib is missing (Debian: python3-matplotlib)", 3)

    t0 = min([m["t"] for m in metrics] + [e["t"] for e in events])
    fig, (ax_rate, ax_ready, ax_nodes) = plt.subplots(3, 1, sharex=True, figsize=(10, 7.5))
    rate = [(m["t"] - t0, m["job_gflops"]) for m in metrics if m["job_gflops"] > 0]
    if rate:
        ax_rate.plot(*zip(*rate), marker="o", markersize=3)
    ax_rate.set_ylabel("job GFLOP/s")
    for node in sorted({m["node"] for m in metrics}):
        points = [(m["t"] - t0, m["ready_tasks"]) for m in metrics if m["node"] == node]
        ax_ready.plot(*zip(*points), marker=".", label=node)
    ax_ready.set_ylabel("ready tasks\n(mean per iteration)")
    ax_ready.legend(fontsize="small", ncol=4)
    steps = [(m["t"] - t0, m["nodes"]) for m in metrics]
    ax_nodes.step(*zip(*steps), where="post", color="black", label="nodes held")
    ranks = [(m["t"] - t0, m["ranks"]) for m in metrics if m.get("ranks", 0) > 0]
    if ranks:
        ax_nodes.step(*zip(*ranks), where="post", color="tab:blue", linestyle="--",
                      label="ranks running")
    ax_nodes.set_ylabel("nodes / ranks")
    ax_nodes.legend(fontsize="small", loc="upper right")
    ax_nodes.set_xlabel("seconds since the job started")

    # Each resize: a span from its request to its final state, labelled; each failure (kind
    # "failure") likewise, from its detection to its recovery, with a line where it was detected.
    spans = {}
    for e in events:
        if e["refused"] or not e["resize"]:
            continue
        s = spans.setdefault(e["resize"], {"kind": e["kind"], "start": e["t"], "end": e["t"],
                                           "to": e["to"], "requester": e.get("requester")})
        s["end"], s["to"] = e["t"], e["to"]
    for rid, s in sorted(spans.items()):
        color = {"expand": "tab:green", "failure": "black"}.get(s["kind"], "tab:red")
        for ax in (ax_rate, ax_ready, ax_nodes):
            ax.axvspan(s["start"] - t0, max(s["end"], s["start"] + 0.05) - t0, color=color, alpha=0.2)
            if s["kind"] == "failure":
                ax.axvline(s["start"] - t0, color="black", linewidth=1.5)
        who = "lost" if s["kind"] == "failure" else s["requester"]
        ax_nodes.annotate(f"#{rid} {s['kind']} ({who}): {s['to']}", (s["start"] - t0, 0.02),
                          xycoords=("data", "axes fraction"), fontsize="small", rotation=90,
                          va="bottom")
    resizes = sum(1 for s in spans.values() if s["kind"] != "failure")
    fig.suptitle(a.title or f"bellows job {os.path.basename(os.path.normpath(a.job_dir))}")
    fig.tight_layout()
    fig.savefig(a.out, dpi=100)
    print(f"{PROG}: wrote {a.out} ({len(metrics)} metrics reports, {resizes} resizes, {len(spans) - resizes} failures)")


if __name__ == "__main__":
    main()
