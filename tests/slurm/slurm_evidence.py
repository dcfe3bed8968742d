"""What a failed end-to-end Slurm test leaves for reading (slurm_cluster.main, on_failure):
the logs of its jobs and of the cluster, copied into the build tree before the next test run
removes them, and the lines worth reading first printed with the copy's path.

For each job: its batch output (the whole `bellows run` log, the program's output in it), its
job directory (events.jsonl, metrics.jsonl, every node's bellowsd.log), `scontrol show job`;
for the cluster: slurmctld's and every slurmd's log. Printed: the job's resizes that did not
commit, its last events, and of every log the lines at warning or error level (with a line
either side) and its last lines, the program's per-iteration lines left out.
"""

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

# A program's progress line ("  iteration 17: 0.0162 s, ..."): thousands of them hide the rest.
_PROGRESS = re.compile(r"^\s+iteration \d+:")
# Lines worth reading first: a level word in one of the first "WORD: " fields (bellows,
# bellowsd, Slurm's "error: ..."), or a word of trouble anywhere.
_LEVEL = re.compile(r"(^|: |\] )(warning|error|fatal)(: |\b)", re.IGNORECASE)
_TROUBLE = re.compile(r"abort|refused|revoked|died|killed|cancelled|timed? ?out|disconnect|"
                      r"did not|cannot|failed|unable|invalid", re.IGNORECASE)
# What slurmd says of every step on a node a job gained by expansion (select/linear), and
# slurmctld of every helper job merged away: not trouble.
_NOISE = ("zero processors allocated to step", "select_g_job_fini")
MAX_MATCHES = 30  # distinct lines of trouble printed per file (the first ones)
TAIL = 25         # last lines printed per file
TAIL_EVENTS = 12  # last events printed per job
WIDTH = 300       # characters printed of a line (the program's JSON report is one line)


def is_progress(line):
    return bool(_PROGRESS.match(line))


def failures_root(cluster_dir):
    """Where failed tests leave their copies: beside the cluster's directory in the build tree."""
    return Path(cluster_dir).parent / "failures"


def _read(path):
    try:
        return Path(path).read_text(errors="replace")
    except OSError as e:
        return f"(cannot read {path}: {e.strerror})\n"


def excerpt(text, since=None, matches=MAX_MATCHES, tail=TAIL):
    """The lines of `text` at warning or error level or naming trouble, each distinct one once
    (the first time, with the line before and after, and how often it came), then its last
    `tail` lines; progress lines left out. `since`: only Slurm log lines stamped at or after
    this "YYYY-MM-DDTHH:MM:SS" are considered."""
    lines = [_cut(line) for line in text.splitlines() if not _PROGRESS.match(line)]
    if since is not None:
        lines = [line for line in lines if not line.startswith("[") or line[1:20] >= since]
    first, counts = {}, {}
    for i, line in enumerate(lines):
        if (_LEVEL.search(line) or _TROUBLE.search(line)) and not any(noise in line for noise in _NOISE):
            first.setdefault(line, i)
            counts[line] = counts.get(line, 0) + 1
    hits = sorted(first.values())
    shown = set()
    for i in hits[:matches]:
        shown.update(range(max(0, i - 1), min(len(lines), i + 2)))
    out = []
    if shown:
        out.append(f"  -- {len(hits)} distinct line(s) of trouble" +
                   (f" (the first {matches})" if len(hits) > matches else "") + ", each where it first came:")
        previous = None
        for i in sorted(shown):
            if previous is not None and i > previous + 1:
                out.append("     ...")
            repeated = counts.get(lines[i], 1) if i in hits else 1
            out.append(f"     {lines[i]}" + (f"   [{repeated} times]" if repeated > 1 else ""))
            previous = i
    out.append(f"  -- last {min(tail, len(lines))} of {len(lines)} line(s):")
    out.extend(f"     {line}" for line in lines[-tail:])
    return out


def _cut(line):
    return line if len(line) <= WIDTH else f"{line[:WIDTH]} ... ({len(line)} characters)"


def describe_event(e):
    return _cut(f"{e.get('time', '?')} #{e.get('resize')} {e.get('kind')} {e.get('event')} "
            f"{e.get('from')} -> {e.get('to')} ({e.get('duration_s', 0):.3f} s): {e.get('detail', '')}")


def event_excerpt(path):
    """The events of resizes that did not commit, then the last events."""
    events = []
    for line in _read(path).splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            pass
    failed = {e["resize"] for e in events if e.get("to") == "aborted" or e.get("refused")}
    out = [f"  -- {len(events)} event(s); resize(s) that did not commit: {sorted(failed) or 'none'}"]
    out.extend(f"     {describe_event(e)}" for e in events if e.get("resize") in failed)
    out.append(f"  -- last {min(TAIL_EVENTS, len(events))} event(s):")
    out.extend(f"     {describe_event(e)}" for e in events[-TAIL_EVENTS:])
    return out


def keep(cluster, test, jobs):
    """Copies the evidence of a failed test (jobs: dicts with id, output, job_dir, began: a
    "YYYY-MM-DDTHH:MM:SS" UTC stamp) under failures_root(); prints the path and excerpts."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    where = failures_root(cluster.dir) / f"{cluster.dir.name}-{test}-{stamp}"
    where.mkdir(parents=True, exist_ok=True)
    lines = [f"evidence of the failure kept in {where}"]
    since = min((job["began"] for job in jobs), default=None)
    for job in jobs:
        # A job cancelled by the failing test writes its last lines as it ends.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and subprocess.run(
                ["squeue", "-h", "-j", job["id"]], env=cluster.env, capture_output=True,
                text=True).stdout.strip():
            time.sleep(0.2)
        mine = where / f"job-{job['id']}"
        mine.mkdir(exist_ok=True)
        if Path(job["output"]).exists():
            shutil.copy2(job["output"], mine / "bellows-run.log")
        if Path(job["job_dir"]).is_dir():
            shutil.copytree(job["job_dir"], mine / "job-dir", symlinks=True,
                            ignore=shutil.ignore_patterns("controller.key", "pmix"), dirs_exist_ok=True)
        shown = subprocess.run(["scontrol", "show", "job", job["id"]], env=cluster.env,
                               capture_output=True, text=True)
        (mine / "scontrol-show-job.txt").write_text(shown.stdout + shown.stderr)
        lines.append(f"== job {job['id']}: bellows run log ({mine / 'bellows-run.log'})")
        lines.extend(excerpt(_read(mine / "bellows-run.log")))
        lines.append(f"== job {job['id']}: controller events ({mine / 'job-dir' / 'events.jsonl'})")
        lines.extend(event_excerpt(mine / "job-dir" / "events.jsonl"))
        for log in sorted((mine / "job-dir" / "nodes").glob("*/bellowsd.log")):
            lines.append(f"== job {job['id']}: {log.parent.name}'s bellowsd.log ({log})")
            lines.extend(excerpt(_read(log), matches=20, tail=12))
    logs = where / "cluster-logs"
    logs.mkdir(exist_ok=True)
    for log in sorted((cluster.dir / "log").glob("slurm*.log")):
        shutil.copy2(log, logs / log.name)
        lines.append(f"== cluster: {log.name} since {since} ({logs / log.name})")
        lines.extend(excerpt(_read(logs / log.name), since=since, matches=15, tail=8))
    print("\n".join(f"slurm_e2e: {line}" for line in lines), flush=True)
