"""What the tests of `bellows run --attach` share: the line an attached controller prints once it
took a job over, its stderr read as it comes, and this process made the reaper of the job's
processes that outlive the killed `bellows run` (so no zombie is left behind)."""
import ctypes
import os
import re
import threading

PR_SET_CHILD_SUBREAPER = 36
TOOK_OVER = re.compile(r"bellows: took job (\S+) over: every daemon back in ([0-9.]+) s, every rank known in "
                       r"([0-9.]+) s")


class Lines:
    """The stderr of a process, read line by line on a thread of its own."""

    def __init__(self, stream):
        self.lines = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        for line in stream:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def find(self, pattern):
        """The first match of `pattern` in the lines read so far, or None."""
        with self.lock:
            return next((m for m in map(pattern.search, self.lines) if m), None)

    def text(self):
        """Every line, once the stream ended (or after 5 s)."""
        self.thread.join(timeout=5)
        with self.lock:
            return "\n".join(self.lines)


def become_subreaper():
    """Makes this process the parent of the orphans among its descendants; returns "" or why not."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return f"prctl(PR_SET_CHILD_SUBREAPER): errno {ctypes.get_errno()}"
    return ""


def reap():
    """Collects every ended child without waiting for the others."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
