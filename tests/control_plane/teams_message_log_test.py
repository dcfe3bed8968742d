#!/usr/bin/env python3
"""End-to-end test of the message log's size reaching the controller, on the local backend with
real processes: `bellows run` of a GEMM on 4 nodes with buddy checkpoints every 2 iterations and
team-based message logging in teams of 2 (docs/teams.md).

Every rank's metrics after each iteration carry its log's size (protocol::Metrics
message_log_on, message_log_bytes_held, message_log_entries_held). While the job runs,
`bellows status --json` shows each process's last (`processes[].message_log`), and plain
`bellows status` a line per process in the event log's words (`message log on n2: rank 1,
iteration 5: 589824 bytes in 12 entries held`). Once it ended:

- the event log holds one `message_log` line per rank and iteration (resize 0, no kind, the
  rank's node), whose bytes are the JSON report's `rank_stats[r].message_log.
  bytes_held_by_iteration[i - 1]` for rank r and iteration i, and whose last entries are the
  report's `entries_held`; some are not 0 (tiles cross the teams);
- `metrics.jsonl` carries the same numbers;
- `bellows events` prints each line, `bellows run`'s timeline counts them;
- the result verifies, nothing of the job is left, no unexpected warning.

  teams_message_log_test.py --bellows PATH --app PATH
Prints "teams_message_log: PASS" or "teams_message_log: FAIL: why".
"""
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from local_job import LocalJobTest  # noqa: E402

RANKS = 4
ITERATIONS = 8
DETAIL = re.compile(r"rank (\d+), iteration (\d+): (\d+) bytes in (\d+) entries held")
STATUS_LINE = re.compile(r"  message log on (\S+): rank (\d+), iteration (\d+): (\d+) bytes in (\d+) entries held")


def main():
    t = LocalJobTest("teams_message_log")
    job = t.start("--nodes", f"{RANKS}:{RANKS}", "--pool", str(RANKS), "--quiet", "--",
                  t.args.app, "--n", "768", "--tile", "128", "--iterations", str(ITERATIONS),
                  "--kernel", "emulated", "--emulated-gflops", "1", "--emulated-compute", "on",
                  "--checkpoint", "on", "--checkpoint-every", "2",
                  "--message-log", "on", "--team-size", "2", "--verify")
    try:
        def logging_processes():
            status = t.status()
            if not status:
                return None
            logs = [p for p in status.get("processes", []) if p.get("message_log")]
            return logs if len(logs) == RANKS else None
        running = t.wait_for(job, "every process's message log in bellows status", logging_processes, seconds=90)
        for p in running:
            if set(p["message_log"]) != {"iteration", "bytes_held", "entries_held"} or p["message_log"]["iteration"] < 1:
                t.fail(f"bellows status shows a message log that is not an iteration's: {p}")
        # Plain `bellows status`: a line per process, its node and rank those of the JSON.
        plain = t.bellows("status", "latest")
        if plain.returncode != 0:
            t.fail(f"bellows status exited {plain.returncode}: {plain.stderr}")
        shown = {}
        for line in plain.stdout.splitlines():
            if line.startswith("  message log"):
                match = STATUS_LINE.fullmatch(line)
                if not match or int(match.group(3)) < 1:
                    t.fail(f"bellows status prints a message log line not in its form: {line!r}")
                shown[match.group(1)] = int(match.group(2))
        expected_shown = {p["node"]: p["rank"] for p in running}
        if shown != expected_shown:
            t.fail(f"bellows status prints the message logs of {shown} (node: rank), its JSON those of "
                   f"{expected_shown}: {plain.stdout}")
        out, err = job.communicate(timeout=180)
    except BaseException:
        t.kill_all(job)
        raise
    if job.returncode != 0:
        t.fail(f"bellows run exited {job.returncode}: {err[-2000:]}")
    report = t.report_after_loss(out, err, first_rank_lost=False)
    if not report.get("verified"):
        t.fail(f"the result did not verify: residual {report.get('residual')}")
    stats = {s["rank"]: s["message_log"] for s in report["rank_stats"]}
    if sorted(stats) != list(range(RANKS)):
        t.fail(f"the report's rank_stats name ranks {sorted(stats)}, expected 0..{RANKS - 1}")

    lines = [e for e in t.events() if e["event"] == "message_log"]
    seen = {}
    for e in lines:
        match = DETAIL.fullmatch(e["detail"])
        if not match:
            t.fail(f"a message_log line whose detail is not in its form: {e}")
        if e["resize"] != 0 or e["kind"] is not None or e["refused"] or len(e["nodes"]) != 1:
            t.fail(f"a message_log line that is not a rank's report: {e}")
        rank, iteration, held, entries = (int(g) for g in match.groups())
        if (rank, iteration) in seen:
            t.fail(f"rank {rank}'s message log of iteration {iteration} is in the event log twice")
        seen[(rank, iteration)] = (held, entries, e["nodes"][0])
    expected = {(r, i) for r in range(RANKS) for i in range(1, ITERATIONS + 1)}
    if set(seen) != expected:
        t.fail(f"message_log lines for (rank, iteration) {sorted(seen)}, expected {sorted(expected)}")

    nonzero = 0
    for (rank, iteration), (held, entries, node) in sorted(seen.items()):
        by_iteration = stats[rank]["bytes_held_by_iteration"]
        if len(by_iteration) != ITERATIONS:
            t.fail(f"rank {rank}'s bytes_held_by_iteration has {len(by_iteration)} entries, expected {ITERATIONS}")
        if held != by_iteration[iteration - 1]:
            t.fail(f"rank {rank}, iteration {iteration}: the event log says {held} bytes held, the report "
                   f"{by_iteration[iteration - 1]:.0f}")
        if (held == 0) != (entries == 0):
            t.fail(f"rank {rank}, iteration {iteration}: {held} bytes in {entries} entries")
        nonzero += held > 0
    for rank in range(RANKS):
        held, entries, _ = seen[(rank, ITERATIONS)]
        if entries != stats[rank]["entries_held"] or held != stats[rank]["bytes_held"]:
            t.fail(f"rank {rank} after the last iteration: the event log says {held} bytes in {entries} entries, "
                   f"the report {stats[rank]['bytes_held']} in {stats[rank]['entries_held']}")
    if nonzero == 0:
        t.fail("no rank's log held a byte: no tile crossed the teams")
    nodes_of_ranks = {rank: node for (rank, _), (_, _, node) in seen.items()}
    if len(set(nodes_of_ranks.values())) != RANKS:
        t.fail(f"the ranks' message_log lines name nodes {nodes_of_ranks}, one node per rank expected")

    with open(os.path.join(t.job_dir(), "metrics.jsonl")) as f:
        metrics = [json.loads(line) for line in f if line.strip()]
    by_node_iteration = {(m["node"], m["iteration"]): m for m in metrics}
    for (rank, iteration), (held, entries, node) in seen.items():
        m = by_node_iteration.get((node, iteration))
        if m is None or (m["message_log_on"], m["message_log_bytes_held"], m["message_log_entries_held"]) != (
                1, held, entries):
            t.fail(f"metrics.jsonl of {node}, iteration {iteration}: {m}, expected {held} bytes in {entries} entries")

    printed = t.bellows("events", "latest")
    if printed.returncode != 0:
        t.fail(f"bellows events exited {printed.returncode}: {printed.stderr}")
    shown = [line for line in printed.stdout.splitlines() if " message log on " in line]
    if len(shown) != len(lines):
        t.fail(f"bellows events prints {len(shown)} message log lines, the event log holds {len(lines)}")
    summary = f"message log: {len(lines)} reports of the ranks' log sizes (bellows events shows them)"
    if summary not in err:
        t.fail(f"bellows run's timeline does not count the message log's reports ({summary!r}): {err[-1500:]}")
    t.log(f"{len(lines)} message_log lines, {nonzero} with bytes held, equal to the report's bytes_held_by_iteration")
    t.check_logs("latest", err)
    t.passed(t.job_dir())


if __name__ == "__main__":
    main()
