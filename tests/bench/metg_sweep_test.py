#!/usr/bin/env python3
"""bench/metg.py end to end on a tiny sweep: the shape of its report, efficiencies in (0, 1.05],
every task run once, the libbellows and MPI versions computing the same values, METG's
interpolation, bellows_metg's refusal of a bad sweep, a variant with every tile fetched
(the same values, twice the control messages), and a variant run by another program
(--variant-program). No timing is asserted.

  metg_sweep_test.py BUILD_DIR MPIEXEC
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
import metg  # noqa: E402

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"metg_sweep: FAIL: {what}", flush=True)


def check_interpolation():
    points = [{"task_us": 8.0, "efficiency": 0.9}, {"task_us": 4.0, "efficiency": 0.6},
              {"task_us": 2.0, "efficiency": 0.3}]
    us, how = metg.metg(points)
    check(how == "interpolated" and abs(us - 10.0 / 3.0) < 1e-12,
          f"METG between 4 us (0.6) and 2 us (0.3) is 3.333 us, got {us} ({how})")
    check(metg.metg(points[:2]) == (4.0, "below"), "every point above 50 %: below the smallest")
    check(metg.metg(points[2:]) == (2.0, "above"), "no point reaches 50 %: above the largest")


def check_bad_sweep(build, mpiexec):
    out = subprocess.run([mpiexec, "-n", "1", os.path.join(build, "bench", "bellows_metg"),
                          "--system", "bellows", "--largest-us", "1", "--smallest-us", "4"],
                         capture_output=True, text=True, timeout=60)
    check(out.returncode == 2, f"a sweep from 1 us up to 4 us exits 2, got {out.returncode}")
    check("--smallest-us: must not exceed --largest-us (1.000000), got 4.000000" in out.stderr,
          f"the refusal names --smallest-us and both values: {out.stderr!r}")


def check_sweep(build, mpiexec):
    out = subprocess.run([sys.executable, os.path.join(BENCH, "metg.py"), "--build", build,
                          "--mpiexec", mpiexec, "--rounds", "1", "--largest-us", "8",
                          "--smallest-us", "2", "--largest-iterations", "3000", "--steps", "30",
                          "--repeat", "1", "--empty-tasks", "20000"],
                         capture_output=True, text=True, timeout=240)
    check(out.returncode == 0, f"metg.py exits 0, got {out.returncode}: {out.stderr[-2000:]}")
    if out.returncode != 0:
        return
    lines = out.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    configs = [(c["system"], c["ranks"]) for c in report["configurations"]]
    check(configs == metg.CONFIGS, f"configurations {metg.CONFIGS}, got {configs}")
    check(report["dependencies"] == 3, "3 dependencies per task")
    check(any(line.startswith("METG(50 %) bellows 2r") for line in lines), "a METG line per configuration")
    check(report.get("empty_tasks_per_second_per_rank", 0) > 0, "empty tasks per second printed")
    by_config = {(c["system"], c["ranks"]): c for c in report["configurations"]}
    for (system, ranks), c in by_config.items():
        name = f"{system} on {ranks} rank(s)"
        points = c["points"]
        check(len(points) == 3, f"{name}: 3 points (8, 4, 2 us), got {len(points)}")
        check(c["metg"] in ("interpolated", "below", "above") and c["metg_us"] > 0,
              f"{name}: a METG, got {c['metg_us']} ({c['metg']})")
        for a, b in zip(points, points[1:]):
            check(abs(a["task_us"] / b["task_us"] - 2.0) < 0.01,
                  f"{name}: each point halves the task, got {a['task_us']} then {b['task_us']}")
        for p in points:
            check(all(0.0 < e <= 1.05 for e in p["efficiencies"]),
                  f"{name}: efficiencies in (0, 1.05], got {p['efficiencies']}")
            check(p["tasks"] == [30 * 4 * ranks] and p["tasks_executed"] == p["tasks"],
                  f"{name}: every one of the {30 * 4 * ranks} tasks ran once, got "
                  f"{p['tasks_executed']} of {p['tasks']}")
            if system == "bellows":
                messages = p["runtime"]["messages_per_task"]
                check((messages == 0) == (ranks == 1),
                      f"{name}: messages between ranks only on 2 ranks, got {messages} per task")
    for ranks in (1, 2):
        for b, m in zip(by_config[("bellows", ranks)]["points"], by_config[("mpi", ranks)]["points"]):
            check(b["checksums"] == m["checksums"],
                  f"{ranks} rank(s): libbellows and MPI compute the same values, got "
                  f"{b['checksums']} and {m['checksums']}")


def check_variant(build, mpiexec):
    """A variant with every tile fetched beside the default, where the stencil's 16-byte
    tiles travel in their activations: the same values, and twice the control messages."""
    out = subprocess.run([sys.executable, os.path.join(BENCH, "metg.py"), "--build", build,
                          "--mpiexec", mpiexec, "--rounds", "1", "--largest-us", "2",
                          "--smallest-us", "2", "--largest-iterations", "1000", "--steps", "30",
                          "--repeat", "1", "--empty-tasks", "20000", "--configs", "bellows 2r",
                          "--variant", "handshake=--eager-tile-bytes 0 --comm-poll-us 0"],
                         capture_output=True, text=True, timeout=240)
    check(out.returncode == 0, f"metg.py with a variant exits 0, got {out.returncode}: "
          f"{out.stderr[-2000:]}")
    if out.returncode != 0:
        return
    lines = out.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    names = [(c["system"], c["ranks"], c.get("variant")) for c in report["configurations"]]
    check(names == [("bellows", 2, None), ("bellows", 2, "handshake")],
          f"bellows 2r and its variant, got {names}")
    check(any(line.startswith("METG(50 %) bellows 2r handshake") for line in lines),
          "a METG line for the variant")
    check("handshake" in report.get("empty_tasks_per_second_per_rank_of_variant", {}),
          "an empty-task rate for the variant, which sets --comm-poll-us")
    if len(names) != 2:
        return
    carried, fetched = (c["points"][0] for c in report["configurations"])
    check(carried["checksums"] == fetched["checksums"],
          f"the same values with tiles carried and fetched: {carried['checksums']} and "
          f"{fetched['checksums']}")
    ratio = fetched["runtime"]["messages_per_task"] / carried["runtime"]["messages_per_task"]
    check(abs(ratio - 2.0) < 1e-9,
          f"fetching every tile takes twice the control messages, got {ratio:.3f} times")
    bad = subprocess.run([sys.executable, os.path.join(BENCH, "metg.py"), "--build", build,
                          "--variant", "no-equals-sign"], capture_output=True, text=True, timeout=60)
    check(bad.returncode == 2 and "--variant wants NAME=OPTIONS, got 'no-equals-sign'" in bad.stderr,
          f"a variant without options is refused by name: {bad.returncode} {bad.stderr[-300:]!r}")


def check_variant_program(build, mpiexec):
    """--variant-program: the variant runs the program it names (here a wrapper of the build's
    bellows_metg that leaves one line per rank in a file), the other configurations the build's;
    a name without its --variant, a missing program and a text without '=' are refused."""
    real = os.path.abspath(os.path.join(build, "bench", "bellows_metg"))
    with tempfile.TemporaryDirectory() as scratch:
        marks = os.path.join(scratch, "marks")
        wrapper = os.path.join(scratch, "wrapped_metg")
        with open(wrapper, "w") as f:
            f.write(f'#!/bin/sh\necho ran >> "{marks}"\nexec "{real}" "$@"\n')
        os.chmod(wrapper, 0o755)
        common = [sys.executable, os.path.join(BENCH, "metg.py"), "--build", build,
                  "--mpiexec", mpiexec]
        out = subprocess.run(common + ["--rounds", "1", "--largest-us", "2", "--smallest-us", "2",
                                       "--largest-iterations", "1000", "--steps", "30",
                                       "--repeat", "1", "--empty-tasks", "0",
                                       "--configs", "bellows 2r", "--variant", "wrapped=",
                                       "--variant-program", f"wrapped={wrapper}"],
                             capture_output=True, text=True, timeout=240)
        check(out.returncode == 0, f"metg.py with --variant-program exits 0, got "
              f"{out.returncode}: {out.stderr[-2000:]}")
        if out.returncode == 0:
            report = json.loads(out.stdout.strip().splitlines()[-1])
            configs = report["configurations"]
            check([c.get("program") for c in configs] == [None, wrapper],
                  f"only the variant names its program, got {[c.get('program') for c in configs]}")
            if len(configs) == 2:
                check(configs[0]["points"][0]["checksums"] == configs[1]["points"][0]["checksums"],
                      "the wrapped program computes the same values")
        ran = open(marks).read().split() if os.path.exists(marks) else []
        check(ran == ["ran", "ran"], f"the variant's 2 ranks ran the wrapper once each, got {ran}")
        for args, expected in (
                (["--variant", "a=", "--variant-program", f"b={wrapper}"],
                 "--variant-program 'b': no --variant of that name"),
                (["--variant", "a=", "--variant-program", "a=" + os.path.join(scratch, "none")],
                 f"--variant-program 'a': {os.path.join(scratch, 'none')!r} is not an executable file"),
                (["--variant", "a=", "--variant-program", "a"],
                 "--variant-program wants NAME=PATH, got 'a'")):
            bad = subprocess.run(common + args, capture_output=True, text=True, timeout=60)
            check(bad.returncode == 2 and expected in bad.stderr,
                  f"refused with {expected!r}: {bad.returncode} {bad.stderr[-300:]!r}")


def main():
    build, mpiexec = sys.argv[1], sys.argv[2]
    check_interpolation()
    check_bad_sweep(build, mpiexec)
    check_sweep(build, mpiexec)
    check_variant(build, mpiexec)
    check_variant_program(build, mpiexec)
    if failures:
        sys.exit(1)
    print("metg_sweep: PASS")


if __name__ == "__main__":
    main()
