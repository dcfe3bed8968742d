#!/usr/bin/env python3
"""End-to-end checks of bellows-sim-join: sim_join_test.py BINARY."""
import json
import math
import subprocess
import sys

BINARY = sys.argv[1]


def run(*args, expect=0):
    proc = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=50)
    if proc.returncode != expect:
        sys.exit(f"{' '.join(args)}: exit {proc.returncode}, expected {expect}\n{proc.stderr}")
    return proc


def join(k, protocol, n=4):
    return json.loads(run("--job-ranks", str(n), "--join", str(k), "--protocol", protocol).stdout)


def main():
    for k in (1, 2, 8, 13, 64):
        o = join(k, "ordinals")
        # Nobody meets rank 0 one to one: one message through the network (the group's connect
        # to the job); two files per merge of the tree (k - 1 merges), `group` and `accepting`.
        assert o["messages"] == 1 and o["files"] == 2 * k, o
        assert o["rendezvous_seconds"] == 0, o
        assert o["rounds"] == (math.ceil(math.log2(k)) if k > 1 else 0), o
        assert abs(o["seconds"] - (o["tree_seconds"] + o["final_merge_seconds"])) < 1e-9, o
        t = join(k, "tree")
        s = join(k, "sequential")
        # The protocol's messages: connect, plan, ports and table per new rank, one connect per
        # merge of the tree, the ready note and the final connect; one connect and one note
        # per new rank without the tree.
        assert t["rounds"] == math.ceil(math.log2(k)) if k > 1 else t["rounds"] == 0, t
        assert t["messages"] == 5 * k + 1, t
        assert s["messages"] == 2 * k and s["rounds"] == k, s
        assert abs(t["seconds"] - (t["rendezvous_seconds"] + t["tree_seconds"] + t["final_merge_seconds"])) < 1e-9, t
        assert t["seconds"] > 0 and s["seconds"] > 0
    # The tree's own rounds grow with log k: 6 rounds for 64 against 3 for 8.
    t8, t64 = join(8, "tree"), join(64, "tree")
    ratio = t64["tree_seconds"] / t8["tree_seconds"]
    assert 1.5 < ratio < 3.0, ratio
    # With ordinals the whole grow grows with log k: 1,024 (10 rounds) against 8 (3 rounds) takes
    # less than 10/3 times as long, where the tree's rendezvous alone is 128 times as long.
    o8, o1024 = join(8, "ordinals", n=1), join(1024, "ordinals", n=1)
    assert o1024["seconds"] / o8["seconds"] < 10 / 3, (o8["seconds"], o1024["seconds"])
    assert join(1024, "tree", n=1)["seconds"] > 1.5 * o1024["seconds"]
    # The file hand-off is on the critical path once per round and twice for the final join.
    slow = json.loads(run("--job-ranks", "1", "--join", "8", "--file-us", "10300").stdout)
    assert abs((slow["seconds"] - o8["seconds"]) - 5 * 0.01) < 1e-6, (slow["seconds"], o8["seconds"])
    # From the request: what does not depend on k, then the grow.
    whole = json.loads(run("--join", "8", "--fixed-us", "53000").stdout)
    assert abs(whole["request_to_first_task_seconds"] - (0.053 + whole["seconds"])) < 1e-9, whole
    # One accept and merge per new rank: at least linear in k.
    s8, s64 = join(8, "sequential"), join(64, "sequential")
    assert s64["seconds"] / s8["seconds"] > 7.5, (s8["seconds"], s64["seconds"])
    # Bad arguments: exit 2 and the option named.
    for args, text in ((["--join", "0"], "--join must be at least 1, got 0"),
                       (["--job-ranks", "0"], "--job-ranks must be at least 1, got 0"),
                       (["--protocol", "ring"], "--protocol must be ordinals, tree or sequential, got 'ring'"),
                       (["--accept-us", "-1"], "--accept-us must be at least 0, got -1"),
                       (["--file-us", "-2"], "--file-us must be at least 0, got -2"),
                       (["--fixed-us", "-3"], "--fixed-us must be at least 0, got -3")):
        err = run(*args, expect=2).stderr.strip()
        assert err == f"bellows-sim-join: error: {text}", err
    print("sim_join: PASS")


if __name__ == "__main__":
    main()
