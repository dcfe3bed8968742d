#!/usr/bin/env python3
"""`bellows sim job|join|bag` runs the simulator's programs with the user's arguments:
sim_command_test.py BELLOWS BELLOWS_SIM."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BELLOWS, BELLOWS_SIM = sys.argv[1], sys.argv[2]


def run(cmd, expect):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=50)
    if proc.returncode != expect:
        sys.exit(f"{' '.join(cmd)}: exit {proc.returncode}, expected {expect}\n{proc.stdout}\n{proc.stderr}")
    return proc


def last_json(proc):
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    report["sim"] = {k: v for k, v in report["sim"].items() if k not in ("wall_seconds", "events_per_second")}
    return report


job = ["--app", "gemm", "--n", "2048", "--tile", "256", "--ranks", "4", "--steal", "on", "--quiet"]
through_bellows = last_json(run([BELLOWS, "sim", "job", *job], 0))
direct = last_json(run([BELLOWS_SIM, *job], 0))
assert through_bellows == direct, "bellows sim job and bellows-sim disagree"
assert through_bellows["kernel"] == "simulated" and through_bellows["ranks"] == 4

help_text = run([BELLOWS, "sim", "job", "--help"], 0).stdout
assert "--app" in help_text and "--ranks" in help_text, help_text

bad = run([BELLOWS, "sim", "job", "--app", "nonsense"], 2)
assert "bellows-sim: error:" in bad.stderr, bad.stderr

join = run([BELLOWS, "sim", "join", "--help"], 0).stdout
assert "bellows-sim-join" in join or "join" in join.lower(), join
bag = run([BELLOWS, "sim", "bag", "--help"], 0).stdout
assert "dtree" in bag.lower(), bag

missing = run([BELLOWS, "sim"], 2)
assert "sim: a command is required; commands: job, join, bag" in missing.stderr, missing.stderr
unknown = run([BELLOWS, "sim", "cluster"], 2)
assert "sim: unknown command 'cluster'; commands: job, join, bag" in unknown.stderr, unknown.stderr

# A `bellows` with no simulator beside it (or in a build tree) says what is missing.
with tempfile.TemporaryDirectory() as alone:
    lone = shutil.copy(BELLOWS, os.path.join(alone, "bellows"))
    proc = run([lone, "sim", "job", *job], 1)
    assert ("bellows sim job: bellows-sim was found neither next to bellows nor in the build tree's "
            "sim/ folder") in proc.stderr, proc.stderr
print("sim_command_test: PASS")
