#!/usr/bin/env python3
"""bellows-subreaper: orphans are re-parented to it and reaped (no zombie), it stays while
they run, exits by itself with its command's status when nothing is left, and on SIGTERM
stops what is left (SIGKILL for what ignores SIGTERM) and removes its pid file.

  subreaper_test.py PATH-TO-bellows-subreaper
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from procfs import children_of, describe, gone  # noqa: E402


def fail(message):
    print(f"subreaper_test: FAIL: {message}", flush=True)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def main():
    subreaper = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        pidfile = Path(tmp) / "keeper.pid"
        # The command leaves three orphans: one exits at once, one runs 30 s, one ignores
        # SIGTERM; then the command exits 3.
        script = ("sleep 0.1 & sleep 30 & "
                  "sh -c 'trap \"\" TERM; sleep 30' & exit 3")
        keeper = subprocess.Popen([subreaper, str(pidfile), "--", "sh", "-c", script],
                                  env=dict(os.environ, BELLOWS_SUBREAPER_GRACE_S="0.5"))
        check(wait_for(pidfile.exists, 5), "no pid file")
        check(int(pidfile.read_text()) == keeper.pid, "the pid file does not hold its pid")
        # The command and the short orphan are reaped; the two long ones are its children.
        check(wait_for(lambda: len(children_of(keeper.pid)) == 2 and
                       all(state != "Z" for _, state in children_of(keeper.pid)), 5),
              f"expected 2 live re-parented children, got {children_of(keeper.pid)}")
        check(keeper.poll() is None, "it exited while orphans were still running")
        orphans = [pid for pid, _ in children_of(keeper.pid)]
        print(f"subreaper_test: orphans {orphans} re-parented to {keeper.pid}; no zombie", flush=True)
        began = time.monotonic()
        keeper.send_signal(signal.SIGTERM)
        code = keeper.wait(timeout=10)
        took = time.monotonic() - began
        check(code == 0, f"exit status {code} after SIGTERM, expected 0")
        check(not pidfile.exists(), "the pid file is still there after SIGTERM")
        check(wait_for(lambda: all(gone(p) for p in orphans), 5),
              f"orphans left after SIGTERM: {[describe(p) for p in orphans if not gone(p)]}")
        check(took >= 0.4, f"SIGTERM-ignoring orphan killed after {took:.2f} s, before the grace")
        print(f"subreaper_test: SIGTERM stopped both orphans in {took:.2f} s (SIGKILL after the "
              "0.5 s grace for the one that ignores SIGTERM)", flush=True)

        # Nothing left to keep: it exits by itself with its command's status.
        keeper = subprocess.Popen([subreaper, str(pidfile), "--", "sh", "-c", "sleep 0.2 & exit 3"])
        code = keeper.wait(timeout=10)
        check(code == 3, f"exit status {code} when nothing is left, expected the command's 3")
        check(not pidfile.exists(), "the pid file is still there after it exited")

        result = subprocess.run([subreaper, str(pidfile)], capture_output=True, text=True)
        check(result.returncode == 2 and "usage:" in result.stderr, f"usage error: {result}")
    print("subreaper_test: PASS", flush=True)


if __name__ == "__main__":
    main()
