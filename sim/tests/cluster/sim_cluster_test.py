#!/usr/bin/env python3
"""End-to-end checks of bellows-sim-cluster and its plot script:
sim_cluster_test.py BINARY BELLOWS POLICY_DIR PLOT_SCRIPT."""
import json
import os
import subprocess
import sys
import tempfile

BINARY, BELLOWS, POLICIES, PLOT = sys.argv[1:5]
# Debian's interpreter, whose python3-matplotlib the plot script uses.
PLOT_PYTHON = "/usr/bin/python3"


def run(*args, expect=0, program=None):
    command = [program or BINARY, *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=100)
    if proc.returncode != expect:
        sys.exit(f"{' '.join(command)}: exit {proc.returncode}, expected {expect}\n{proc.stderr}")
    return proc


def without_timing(report):
    """A copy of the report without what depends on the host's speed."""
    report = json.loads(json.dumps(report))
    report.pop("wall_seconds")
    for r in report["runs"]:
        r.pop("engine")
    return report


def main():
    small = ("--quiet", "--nodes", "32", "--jobs", "60", "--seed", "3")
    policy = os.path.join(POLICIES, "cluster-friendly.yaml")
    a = json.loads(run(*small, "--policy", policy).stdout)
    assert a["jobs"] == 60 and a["nodes"] == 32, a
    assert [r["policy"] for r in a["runs"]] == [None, policy], a
    off, on = a["runs"]
    assert off["elastic"] is False and on["elastic"] is True, a
    assert off["resizes"]["expands"] == 0 and off["engine"]["ticks"] == 0, off
    assert on["engine"]["ticks"] > 0, on
    for r in a["runs"]:
        assert 0 < r["utilisation"] <= 1, r
        assert r["p95_wait"] >= 0 and r["mean_wait"] >= 0 and r["mean_bounded_slowdown"] >= 1, r
        assert r["rigid"]["jobs"] + r["malleable"]["jobs"] == 60, r
        assert r["malleable"]["jobs"] == r["malleable_jobs"], r
    # Elasticity off: the nodes hold exactly the jobs' submitted node-seconds.
    assert abs(off["utilisation"] - off["work_utilisation"]) < 1e-9, off
    # The same seed gives the same report; another seed another one.
    b = json.loads(run(*small, "--policy", policy).stdout)
    assert without_timing(a) == without_timing(b)
    c = json.loads(run("--quiet", "--nodes", "32", "--jobs", "60", "--seed", "4").stdout)
    assert c["runs"][0]["makespan"] != b["runs"][0]["makespan"], (c, b)

    # An SWF file: comments skipped, the jobs' schedule in the report.
    with tempfile.TemporaryDirectory() as tmp:
        swf = os.path.join(tmp, "tiny.swf")
        with open(swf, "w") as f:
            f.write("; tiny\n"
                    "1 0 0 100 2 -1 -1 2 100 -1 1 1 1 1 1 1 -1 -1\n"
                    "2 0 0 50 4 -1 -1 4 50 -1 1 1 1 1 1 1 -1 -1\n"
                    "3 10 0 80 2 -1 -1 2 90 -1 1 1 1 1 1 1 -1 -1\n")
        r = json.loads(run("--quiet", "--nodes", "4", "--workload", swf, "--malleable-fraction", "0",
                           "--schedule").stdout)
        starts = {j["id"]: (j["start"], j["end"]) for j in r["runs"][0]["schedule"]}
        assert starts == {1: (0, 100), 2: (100, 150), 3: (10, 90)}, starts
        bad = os.path.join(tmp, "bad.swf")
        with open(bad, "w") as f:
            f.write("; header\n1 0 0 100 2 -1 -1 2 100 -1 1 1 1 1 1 1 -1\n")
        err = run("--workload", bad, expect=2).stderr
        assert err == f"bellows-sim-cluster: error: {bad}:2: expected 18 fields, found 17\n", err
        bad_policy = os.path.join(tmp, "bad.yaml")
        with open(bad_policy, "w") as f:
            f.write("tick: fast\n")
        err = run("--jobs", "5", "--policy", bad_policy, expect=2).stderr
        assert err.startswith(f"bellows-sim-cluster: error: --policy {bad_policy} is not a valid policy:\n  "
                              f"{bad_policy}:1:7: "), err

    err = run("--nodes", "0", expect=2).stderr
    assert err == "bellows-sim-cluster: error: --nodes must be at least 1, got 0\n", err
    err = run("--load", "-1", expect=2).stderr
    assert err.startswith("bellows-sim-cluster: error: --load must be in (0, 10]"), err
    # A progress bar when asked, on stderr; the JSON line alone on stdout.
    p = run("--nodes", "16", "--jobs", "20", "--progress")
    assert "jobs" in p.stderr and "elasticity off" in p.stderr and len(p.stdout.splitlines()) == 1, p.stderr

    # The plot: a PNG from two reports; a line that is not a report is refused by name.
    with tempfile.TemporaryDirectory() as tmp:
        reports = os.path.join(tmp, "reports.jsonl")
        with open(reports, "w") as f:
            f.write(json.dumps(a) + "\n" + json.dumps(b) + "\n")
        png = os.path.join(tmp, "cluster.png")
        plot = subprocess.run([PLOT_PYTHON, PLOT, reports, "--out", png], capture_output=True, text=True, timeout=60)
        if plot.returncode == 3:
            print("sim_cluster_test: matplotlib missing, plot not checked:", plot.stderr.strip())
        else:
            assert plot.returncode == 0, plot.stderr
            with open(png, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
        not_report = os.path.join(tmp, "other.jsonl")
        with open(not_report, "w") as f:
            f.write('{"runs": []}\n[1, 2]\n')
        plot = subprocess.run([PLOT_PYTHON, PLOT, not_report, "--out", png], capture_output=True, text=True, timeout=60)
        assert plot.returncode == 2, plot
        assert plot.stderr == (f"plot_sim_cluster.py: error: {not_report}:2: not a bellows-sim-cluster report "
                               "(no 'runs' list)\n"), plot.stderr

    # The same program under `bellows sim cluster`.
    via = json.loads(run("sim", "cluster", *small, "--policy", policy, program=BELLOWS).stdout)
    assert without_timing(via) == without_timing(a)
    print("sim_cluster_test: PASS")


if __name__ == "__main__":
    main()
