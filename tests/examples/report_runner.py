"""What the report checks share: run an example, read the JSON object on the last line of
its output, and fail with a message that the test's regular expressions recognise."""

import json
import subprocess
import sys


def failer(name):
    """Returns fail(message, output=""): prints the output, then "NAME: FAIL: message", and
    exits 1."""
    def fail(message, output=""):
        if output:
            sys.stdout.write(output)
        print(f"{name}: FAIL: {message}")
        sys.exit(1)
    return fail


def command_after_dashes(remainder, fail):
    """The command given after "--" (argparse.REMAINDER)."""
    command = remainder[1:] if remainder[:1] == ["--"] else remainder
    if not command:
        fail("no command given")
    return command


def run_report(command, fail, timeout=100):
    """Runs command (stderr into stdout) and returns (report, output); fails on a non-zero
    exit code or when the last non-empty line is not a JSON object."""
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    output = proc.stdout
    if proc.returncode != 0:
        fail(f"exit code {proc.returncode}", output)
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        fail("no output")
    try:
        report = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        fail(f"last line is not JSON: {e}", output)
    if not isinstance(report, dict):
        fail("no JSON report", output)
    return report, output
