"""Warning and error lines in a test's logs that the test did not allow (the Python side of
tests/support/log_check.hpp): a line is at warning or error level when the first of its first
three "WORD: " fields that names a level is warning or error ("bellows run: warning: ...",
"bellowsd: error: ...", "bellows-transport: warning: ...")."""
import glob
import os

_LEVELS = {"warning": True, "error": True, "info": False, "debug": False, "notice": False}


def is_warning_or_error(line):
    rest = line
    for _ in range(3):
        word, sep, rest = rest.partition(": ")
        if not sep:
            return False
        level = _LEVELS.get(word.strip().lower())
        if level is not None:
            return level
    return False


def unexpected_lines(sources, allowed):
    """sources: {name: text}; allowed: substrings, each allowing the lines that contain it.
    Returns "name: line" for every warning or error line no allowance covers."""
    out = []
    for name, text in sources.items():
        for line in text.splitlines():
            if is_warning_or_error(line) and not any(a in line for a in allowed):
                out.append(f"{name}: {line}")
    return out


def job_logs(job_dir, run_stderr):
    """The `bellows run` stderr and every nodes/*/bellowsd.log of the job directory."""
    sources = {"bellows run stderr": run_stderr}
    for path in sorted(glob.glob(os.path.join(job_dir, "nodes", "*", "bellowsd.log"))):
        with open(path, errors="replace") as f:
            sources[os.path.relpath(path, job_dir)] = f.read()
    return sources


def job_log_problems(job_dir, run_stderr, allowed=()):
    """What is wrong with a finished job's logs: warning or error lines not in `allowed`. At a
    normal end each rank detaches from its daemon before its process goes (kRankDetached), so
    a daemon's "ended without leaving the job" is a rank that died: never allowed here."""
    return unexpected_lines(job_logs(job_dir, run_stderr), list(allowed))
