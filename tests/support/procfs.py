"""Processes as /proc shows them, for tests that check what they started is gone:
tests/slurm/slurm_cluster.py, tests/control_plane/run_local_test.py,
tests/tools/subreaper_test.py."""

import os
from pathlib import Path


def _stat(pid):
    """(comm, state, ppid) of pid, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return text[text.find("(") + 1:text.rfind(")")], fields[0], int(fields[1])


def _other_pids():
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) != os.getpid()]


def describe(pid):
    """'PID COMM [STATE]', or 'PID (gone)'."""
    stat = _stat(pid)
    return f"{pid} {stat[0]} [{stat[1]}]" if stat else f"{pid} (gone)"


def gone(pid):
    """True when pid no longer exists (a zombie still does)."""
    return _stat(pid) is None


def children_of(pid):
    """(pid, state) of each direct child of pid."""
    return [(entry, stat[1]) for entry in _other_pids() if (stat := _stat(entry)) and stat[2] == pid]


def processes_below(pid):
    """Every descendant of pid."""
    children = {}
    for entry in _other_pids():
        if stat := _stat(entry):
            children.setdefault(stat[2], []).append(entry)
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def zombies_of(parents):
    """Zombie processes whose parent is one of parents."""
    return [pid for pid in _other_pids() if (stat := _stat(pid)) and stat[1] == "Z" and stat[2] in parents]


def processes_mentioning(text):
    """Pids whose command line or environment contains text."""
    found = []
    for pid in _other_pids():
        for name in ("cmdline", "environ"):
            try:
                if text.encode() in Path(f"/proc/{pid}/{name}").read_bytes():
                    found.append(pid)
                    break
            except OSError:
                pass
    return found


def processes_with_environment(entry):
    """Pids whose environment holds exactly the entry NAME=VALUE."""
    found = []
    for pid in _other_pids():
        try:
            if entry.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(pid)
        except OSError:
            pass
    return found


def bellowsd_pid(job_dir, node):
    """The pid of the bellowsd of `node` in the job of `job_dir` (its --node-name), or None."""
    for pid in processes_mentioning(job_dir):
        try:
            argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == "bellowsd" and "--node-name" in argv and \
                argv[argv.index("--node-name") + 1] == node:
            return pid
    return None
