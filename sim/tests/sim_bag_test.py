#!/usr/bin/env python3
"""End-to-end checks of bellows-sim-bag: sim_bag_test.py BINARY."""
import json
import subprocess
import sys

BINARY = sys.argv[1]


def run(*args, expect=0):
    proc = subprocess.run([BINARY, "--quiet", *args], capture_output=True, text=True, timeout=50)
    if proc.returncode != expect:
        sys.exit(f"{' '.join(args)}: exit {proc.returncode}, expected {expect}\n{proc.stderr}")
    return proc


def bag(ranks, tasks, distribution="dtree", *extra):
    return json.loads(run("--ranks", str(ranks), "--tasks", str(tasks), "--distribution", distribution,
                          *extra).stdout)


def main():
    # Every index exactly once (the simulator checks that the ranges run tile [0, N) and
    # fails otherwise), and no makespan below the optimal bound.
    for ranks, tasks in ((1, 10), (4, 1000), (17, 5000), (64, 100000)):
        for distribution in ("dtree", "static"):
            r = bag(ranks, tasks, distribution)
            assert r["each_once"] is True, r
            assert r["makespan"] >= r["optimal"] * (1 - 1e-9), r
            assert r["optimal"] == max(r["work_bound"], r["task_bound"]), r
        assert abs(r["total_work"] - bag(ranks, tasks, "static")["total_work"]) < 1e-6 * r["total_work"]
    # One rank: no messages, the makespan is the whole bag.
    one = bag(1, 1000)
    assert one["requests"] == 0 and abs(one["makespan"] - one["total_work"]) < 1e-6 * one["total_work"], one
    # Equal speeds, light tail, 10^5 tasks on 64 ranks: Dtree within 2 % of optimal; the
    # static blocks' largest block sets their makespan, several % over.
    d = bag(64, 100000, "dtree", "--sigma", "0.5")
    s = bag(64, 100000, "static", "--sigma", "0.5")
    assert d["over_optimal"] < 0.02, d
    assert s["over_optimal"] > 2 * d["over_optimal"], (s, d)
    assert d["grants"] > 63 and d["bytes"] == 64 * d["messages"], d
    # A quarter of the nodes 4 x slower: the static blocks wait for the slow nodes (about
    # 2.3 x the optimum); Dtree pulls around them, with the shares following the speeds or
    # not (pulling, not the shares, is what evens the finish here: docs/sim.md).
    slow = ("--slow-fraction", "0.25", "--slow-factor", "4")
    ds = bag(64, 100000, "dtree", *slow)
    de = bag(64, 100000, "dtree", *slow, "--shares", "equal")
    ss = bag(64, 100000, "static", *slow)
    assert ds["slow_ranks"] == 16, ds
    assert ss["over_optimal"] > 1.0, ss
    assert ds["over_optimal"] < 0.1, ds
    assert de["over_optimal"] < 0.1 and not de["speed_shares"], de
    # Determinism: the same seed gives the same report (but the wall time); another seed
    # other costs.
    def same(r):
        return {k: v for k, v in r.items() if k not in ("wall_seconds", "events_per_second")}
    assert same(bag(64, 20000)) == same(bag(64, 20000))
    assert bag(64, 20000, "dtree", "--seed", "2")["total_work"] != bag(64, 20000)["total_work"]
    # Bad arguments: exit 2 and the option named.
    for args, text in ((["--ranks", "0"], "--ranks must be at least 1, got 0"),
                       (["--tasks", "0"], "--tasks must be at least 1, got 0"),
                       (["--distribution", "cyclic"], "--distribution must be dtree or static, got 'cyclic'"),
                       (["--shares", "x"], "--shares must be speed or equal, got 'x'"),
                       (["--mean-ms", "0"], "--mean-ms must be above 0, got 0"),
                       (["--sigma", "5"], "--sigma must be in [0, 4], got 5"),
                       (["--slow-fraction", "2"], "--slow-fraction must be in [0, 1], got 2"),
                       (["--slow-factor", "0.5"], "--slow-factor must be at least 1, got 0.5"),
                       (["--min-ask", "0"], "--min-ask must be at least 1, got 0"),
                       (["--serve-us", "-1"], "--serve-us must be at least 0, got -1"),
                       (["--first", "1.5"], "dtree: first must be in (0, 1], got 1.5"),
                       (["--ranks", "100", "--fan-out", "2"],
                        "dtree: 100 ranks do not fit a tree of fan-out 2 and height at most 3 (at most 15 ranks)")):
        err = run(*args, expect=2).stderr.strip()
        assert err == f"bellows-sim-bag: error: {text}", err
    print("sim_bag: PASS")


if __name__ == "__main__":
    main()
