#!/usr/bin/env python3
"""tests/support/require_pass.py on small commands: it passes only when the text was printed
and the command exited 0, passes the output through, and forwards SIGTERM.

  require_pass_test.py REQUIRE_PASS
"""

import os
import signal
import subprocess
import sys
import time

REGEX = "demo: PASS"


def run(script, child_code):
    return subprocess.run([sys.executable, script, REGEX, "--", sys.executable, "-c", child_code],
                          capture_output=True, text=True, timeout=30)


def check(condition, why):
    if not condition:
        print(f"require_pass_test: FAIL: {why}")
        sys.exit(1)


def expect(script, child_code, code, last_line, printed=()):
    out = run(script, child_code)
    lines = out.stdout.splitlines()
    what = f"{child_code!r}: exit {out.returncode}, stdout {out.stdout!r}, stderr {out.stderr!r}"
    check(out.returncode == code, f"expected exit {code}; {what}")
    check(lines and lines[-1] == last_line, f"expected last line {last_line!r}; {what}")
    for text in printed:
        check(text in lines, f"{text!r} not passed through; {what}")


def alive(pid):
    """Whether pid runs (a zombie nobody reaped yet does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def main():
    script = sys.argv[1]
    quote = "import sys; print('out', flush=True); print('err', file=sys.stderr, flush=True); "
    expect(script, quote + "print('demo: PASS'); sys.exit(1)", 1,
           "require_pass: FAIL: exit status 1 after printing /demo: PASS/", ["out", "err", "demo: PASS"])
    expect(script, quote + "print('demo: FAIL')", 1,
           "require_pass: FAIL: /demo: PASS/ never printed (exit status 0)", ["out", "err"])
    expect(script, quote + "print('demo: PASS')", 0, "demo: PASS", ["out", "err"])
    expect(script, "import os, signal; print('demo: PASS', flush=True); os.kill(os.getpid(), signal.SIGKILL)",
           1, "require_pass: FAIL: killed by signal SIGKILL after printing /demo: PASS/")

    # SIGTERM to the wrapper reaches the command (which prints, then sleeps until killed);
    # its output streams through while it runs.
    sleeper = "import os, time; print('demo: PASS', os.getpid(), flush=True); time.sleep(60)"
    wrapper = subprocess.Popen([sys.executable, script, REGEX, "--", sys.executable, "-c", sleeper],
                               stdout=subprocess.PIPE, text=True)
    first = wrapper.stdout.readline().split()
    check(first[:2] == ["demo:", "PASS"], f"first line {first}")
    wrapper.send_signal(signal.SIGTERM)
    rest = wrapper.communicate(timeout=10)[0]
    check(wrapper.returncode == 1 and
          rest == "require_pass: FAIL: killed by signal SIGTERM after printing /demo: PASS/\n",
          f"after SIGTERM: exit {wrapper.returncode}, printed {rest!r}")

    # The wrapper killed (as ctest does at a timeout): the command dies with it.
    wrapper = subprocess.Popen([sys.executable, script, REGEX, "--", sys.executable, "-c", sleeper],
                               stdout=subprocess.PIPE, text=True)
    child = int(wrapper.stdout.readline().split()[2])
    wrapper.kill()
    wrapper.wait(timeout=10)
    for _ in range(100):
        if not alive(child):
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        check(False, f"the command (pid {child}) outlived the killed wrapper")
    print("require_pass_test: PASS")


if __name__ == "__main__":
    main()
