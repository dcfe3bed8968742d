#!/usr/bin/env python3
"""Runs an elastic example with --trace through scripts/bellows-local on a schedule of one
expand and one shrink, and checks the resize lines of the trace (docs/runtime.md): one line
per rank and resize, their kinds, roles and sizes, the time base shared with the samples, a
positive request-to-first-task latency on every new rank that matches the JSON report, and
tiles sent at the shrink = tiles received (leavers hand over all theirs; with the re-grid the
ranks that stay exchange some too).

  check_resize_trace.py --launcher scripts/bellows-local --app build/examples/gemm \\
      --ranks 3 --add 2 --expand-at 2 --shrink-at 4 -- ARGS

The shrink removes the 3 highest ranks (two of them added by the expand). Prints
"check_resize_trace: PASS" or "check_resize_trace: FAIL: why" lines.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


def run(cmd, timeout):
    """Runs cmd in its own process group; on timeout, kills that group and fails."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        check(False, f"no answer within {timeout} s (process group {proc.pid} killed)")
    return proc.returncode, out, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--add", type=int, default=2)
    ap.add_argument("--expand-at", type=int, default=2)
    ap.add_argument("--shrink-at", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    extra = a.args[1:] if a.args[:1] == ["--"] else a.args
    grown = a.ranks + a.add
    remove = 3
    final = grown - remove
    leavers = list(range(final, grown))

    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.jsonl")
        cmd = [a.launcher, "-n", str(a.ranks), "--", a.app, "--iterations", str(a.iterations),
               "--resize", f"iter={a.expand_at}:+{a.add},iter={a.shrink_at}:-{remove}",
               "--verify", "--quiet", "--trace", trace] + extra
        code, out, err = run(cmd, timeout=200)
        lines = []
        if os.path.exists(trace):
            with open(trace, encoding="utf-8") as f:
                lines = [json.loads(line) for line in f if line.strip()]

    def dump_and_fail():
        sys.stdout.write(out[-2000:])
        sys.stderr.write(err[-4000:])
        for message in failures:
            print(f"check_resize_trace: FAIL: {message}")
        return 1

    if not check(code == 0, f"exit code {code}"):
        return dump_and_fail()
    report = json.loads(out.strip().splitlines()[-1])
    check(report.get("verified") is True, "the job did not verify")

    samples = [x for x in lines if "event" not in x]
    resizes = [x for x in lines if x.get("event") == "resize"]
    sampled = {(s["rank"], s["iteration"]) for s in samples}
    check(len(resizes) == 2 * grown,
          f"{len(resizes)} resize lines, expected {grown} + {grown} (every rank of the grown "
          "job writes one per resize)")

    # The expand: one line per rank of the grown job, before iteration expand_at.
    expand = sorted((x for x in resizes if x.get("resize") == 1), key=lambda x: x["rank"])
    check([x["rank"] for x in expand] == list(range(grown)),
          f"expand lines from ranks {[x['rank'] for x in expand]}, expected 0..{grown - 1}")
    latencies = {}
    for x in expand:
        r = x["rank"]
        role = "member" if r < a.ranks else "new"
        check(x["kind"] == "expand", f"expand line of rank {r}: kind {x['kind']}")
        check(x["role"] == role, f"expand line of rank {r}: role {x['role']}, expected {role}")
        check((x["from_ranks"], x["to_ranks"]) == (a.ranks, grown),
              f"expand line of rank {r}: {x['from_ranks']} -> {x['to_ranks']} ranks, "
              f"expected {a.ranks} -> {grown}")
        check(x["iteration"] == a.expand_at,
              f"expand line of rank {r}: iteration {x['iteration']}, expected {a.expand_at}")
        check(x["t_request"] <= x["t_start"] <= x["t"] <= 0.0,
              f"expand line of rank {r}: expected t_request <= t_start <= t <= 0, got "
              f"{x['t_request']}, {x['t_start']}, {x['t']}")
        check((r, x["iteration"]) in sampled,
              f"rank {r} has no samples of iteration {x['iteration']} (time base of its line)")
        if role == "new":
            latency = x.get("request_to_first_task_seconds")
            if check(isinstance(latency, (int, float)) and latency > 0,
                     f"new rank {r}: request_to_first_task_seconds {latency!r}, expected > 0"):
                latencies[r] = latency
                check(x["t_first_task"] > 0.0, f"new rank {r}: t_first_task {x['t_first_task']}")
                check(abs(x["t_first_task"] - x["t_request"] - latency) < 2e-6,
                      f"new rank {r}: t_first_task - t_request != its latency")
        else:
            check(isinstance(x.get("spawn_seconds"), list), f"rank {r}: no spawn_seconds list")
            check(x.get("merge_seconds", -1) >= 0, f"rank {r}: no merge_seconds")
    reported = report["resizes"][0]["request_to_first_task_seconds"]
    for i, value in enumerate(reported):
        r = a.ranks + i
        if r in latencies:
            check(abs(latencies[r] - value) < 1e-5,
                  f"new rank {r}: latency {latencies[r]} in the trace, {value} in the report")

    # The shrink: leavers write theirs at once (time base: their last iteration), the
    # ranks that stay after the next iteration.
    shrink = sorted((x for x in resizes if x.get("resize") == 2), key=lambda x: x["rank"])
    check([x["rank"] for x in shrink] == list(range(grown)),
          f"shrink lines from ranks {[x['rank'] for x in shrink]}, expected 0..{grown - 1}")
    for x in shrink:
        r = x["rank"]
        leaves = r in leavers
        check(x["kind"] == "shrink", f"shrink line of rank {r}: kind {x['kind']}")
        check(x["role"] == ("leaves" if leaves else "stays"),
              f"shrink line of rank {r}: role {x['role']}")
        check((x["from_ranks"], x["to_ranks"]) == (grown, final),
              f"shrink line of rank {r}: {x['from_ranks']} -> {x['to_ranks']} ranks")
        check(x["remove"] == leavers, f"shrink line of rank {r}: remove {x['remove']}")
        expected = a.shrink_at - 1 if leaves else a.shrink_at
        check(x["iteration"] == expected,
              f"shrink line of rank {r}: iteration {x['iteration']}, expected {expected}")
        check((r, x["iteration"]) in sampled,
              f"rank {r} has no samples of iteration {x['iteration']}")
        check(x["t_request"] <= x["t_start"] <= x["t"],
              f"shrink line of rank {r}: times out of order")
        check(x["drain_seconds"] >= 0 and x["seconds"] > 0, f"shrink line of rank {r}: times")
    sent = sum(x["tiles_sent"] for x in shrink)
    received = sum(x["tiles_received"] for x in shrink)
    check(sent == received and sent > 0,
          f"tiles sent at the shrink {sent}, received {received}")
    # A leaver keeps nothing; ranks that stay may send too, as the job re-grids.
    check(all(x["tiles_sent"] > 0 for x in shrink if x["rank"] in leavers),
          "a leaving rank sent no tile")

    if failures:
        return dump_and_fail()
    print(f"check_resize_trace: {len(resizes)} resize lines, new ranks' latencies "
          + ", ".join(f"{latencies[r]:.3f} s" for r in sorted(latencies)))
    print("check_resize_trace: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
