#!/usr/bin/env python3
"""Stop benchmark: the time from a bellowsd's stop signal (SIGTERM) to its exit, with no tool
attached, with one tool attached and idle (`bellows-pmix-query --events`, waiting for events),
and with tools querying it (`bellows-pmix-query` runs in LOOPS loops, each run attaching, asking
its 14 queries and detaching), on one host with real processes.

Each round starts a bellowsd of its own (no controller), lets the tools run for 0.5 s, sends
SIGTERM and waits up to 20 s for the daemon's exit (a daemon still there then is killed and
counted as hung). For the querying tools it also reports the longest run of the tool that ended
after the signal (a run whose query got no answer gives up after 10 s) and the runs that ended
otherwise than with status 0 or 1.

  python3 bench/daemon_stop.py --build build/default --rounds 10 [--loops 4]
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path


def one_stop(bellowsd, tool, mode, loops):
    """(seconds from SIGTERM to the daemon's exit or None when it hung, the daemon's exit
    status, the longest tool run ending after the signal, runs ending with a status but 0 or 1)."""
    top = tempfile.mkdtemp(prefix="bellows-daemon-stop-")
    uri = os.path.join(top, "uri")
    with open(os.path.join(top, "bellowsd.log"), "w") as log:
        daemon = subprocess.Popen([bellowsd, "--tmpdir", os.path.join(top, "pmix"), "--uri-file", uri,
                                   "--node-name", "n1"], stderr=log)
    deadline = time.time() + 20
    while not os.path.exists(uri):
        if time.time() > deadline:
            daemon.kill()
            raise SystemExit(f"bellowsd wrote no URI file within 20 s (log in {top})")
        time.sleep(0.005)
    runs = []
    stop = threading.Event()

    def query_loop():
        while not stop.is_set():
            started = time.time()
            run = subprocess.Popen([tool, "--uri", "file:" + uri], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
            try:
                run.wait(timeout=30)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
            runs.append((started, time.time(), run.returncode))

    idle = None
    if mode == "idle tool":
        idle = subprocess.Popen([tool, "--uri", "file:" + uri, "--events", "60"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        idle.stdout.readline()  # {"registered": true}
    threads = [threading.Thread(target=query_loop) for _ in range(loops if mode == "querying tools" else 0)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    signalled = time.time()
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=20)
        took = time.time() - signalled
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()
        took = None
    stop.set()
    for thread in threads:
        thread.join()
    if idle is not None:
        try:
            idle.wait(timeout=15)
        except subprocess.TimeoutExpired:
            idle.kill()
            idle.wait()
    shutil.rmtree(top, ignore_errors=True)
    after = [end - max(start, signalled) for start, end, _ in runs if end > signalled]
    odd = sum(1 for _, _, rc in runs if rc not in (0, 1))
    return took, daemon.returncode, max(after, default=0.0), odd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build/default")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--loops", type=int, default=4)
    args = parser.parse_args()
    build = Path(args.build)
    bellowsd, tool = str(build / "daemon" / "bellowsd"), str(build / "tools" / "bellows-pmix-query")
    print(f"{'attached':<16}{'median s':>10}{'max s':>8}{'hung':>6}{'exit!=0':>9}"
          f"{'longest tool run after SIGTERM s':>34}{'odd tool ends':>15}")
    for mode in ("none", "idle tool", "querying tools"):
        results = [one_stop(bellowsd, tool, mode, args.loops) for _ in range(args.rounds)]
        times = [r[0] for r in results if r[0] is not None]
        hung = sum(1 for r in results if r[0] is None)
        failed = sum(1 for r in results if r[1] != 0)
        print(f"{mode:<16}{statistics.median(times) if times else float('nan'):>10.3f}"
              f"{max(times) if times else float('nan'):>8.3f}{hung:>6}{failed:>9}"
              f"{max(r[2] for r in results):>34.2f}{sum(r[3] for r in results):>15}", flush=True)


if __name__ == "__main__":
    main()
