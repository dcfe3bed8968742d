#!/usr/bin/env python3
"""require_pass.py REGEX -- COMMAND [ARGS...]

Runs COMMAND and passes (exits 0) only when COMMAND exits 0 and its output matched REGEX.
CTest's PASS_REGULAR_EXPRESSION alone ignores the exit status; tests registered with
bellows_add_pass_test (tests/CMakeLists.txt) run under this script instead.

COMMAND's stdout and stderr are passed through, in the order it wrote them, to this
script's stdout; REGEX is searched in them together (Python's re.search, '.' matching
newlines as in CTest). On failure the last line says why:
  require_pass: FAIL: exit status 3 after printing /REGEX/
  require_pass: FAIL: /REGEX/ never printed (exit status 0)
SIGTERM, SIGINT and SIGHUP are forwarded to COMMAND; COMMAND killed by a signal fails.
Should this script be killed (CTest kills a test that runs past its timeout with
SIGKILL), COMMAND is killed with it.
"""
import ctypes
import os
import re
import signal
import subprocess
import sys


LINUX = sys.platform.startswith("linux")
libc = ctypes.CDLL(None) if LINUX else None


def die_with_parent():
    # Runs in the child before exec: prctl(PR_SET_PDEATHSIG, SIGKILL), SIGKILL once this
    # script dies.
    libc.prctl(1, signal.SIGKILL)


def describe(status):
    if status >= 0:
        return f"exit status {status}"
    try:
        return f"killed by signal {signal.Signals(-status).name}"
    except ValueError:
        return f"killed by signal {-status}"


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(f"usage: {argv[0]} REGEX -- COMMAND [ARGS...]", file=sys.stderr)
        return 64
    regex, command = argv[1], argv[3:]
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 preexec_fn=die_with_parent if LINUX else None)
    except OSError as e:
        print(f"require_pass: FAIL: cannot run {command[0]}: {e.strerror}", flush=True)
        return 127
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda signum, _: child.send_signal(signum))

    output = bytearray()
    while chunk := os.read(child.stdout.fileno(), 65536):
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        output += chunk
    status = child.wait()

    matched = re.search(regex.encode(), output, re.DOTALL) is not None
    if status == 0 and matched:
        return 0
    if matched:
        print(f"require_pass: FAIL: {describe(status)} after printing /{regex}/", flush=True)
    else:
        print(f"require_pass: FAIL: /{regex}/ never printed ({describe(status)})", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
