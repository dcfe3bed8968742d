#!/usr/bin/env python3
"""End-to-end checks of bellows-sim: sim_cli_test.py BINARY CASE."""
import json
import subprocess
import sys

BINARY = sys.argv[1]


def run(*args, expect=0):
    proc = subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=50)
    if proc.returncode != expect:
        sys.exit(f"{' '.join(args)}: exit {proc.returncode}, expected {expect}\n{proc.stderr}")
    return proc


def report(*args):
    proc = run(*args, "--quiet")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_once(r):
    """Every task ran exactly once, and the makespan is no shorter than the bound."""
    ran = sum(s["tasks"] for s in r["rank_stats"])
    assert ran == r["tasks"], f"{ran} tasks ran of {r['tasks']}"
    assert r["sim"]["tasks_run_exactly_once"] is True
    stolen = r["steal"]["tasks_stolen"]
    assert stolen == r["steal"]["tasks_given"], (stolen, r["steal"]["tasks_given"])
    owned_minus_given = sum(s["tasks_owned"] - s["steal"]["tasks_given"] + s["steal"]["tasks_stolen"]
                            for s in r["rank_stats"])
    assert owned_minus_given == r["tasks"], owned_minus_given
    makespan, bound = r["sim"]["makespan_seconds"], r["sim"]["bound_seconds"]
    assert bound > 0 and makespan >= bound * (1 - 1e-9), (makespan, bound)
    # Sane: no slower than every task one after the other plus a transfer each at 5 GB/s.
    assert makespan < r["work_seconds"] + r["tasks"] * 3 * 512 * 1024 / 5e9 + 0.01, makespan
    assert r["sim"]["events"] > r["tasks"], r["sim"]["events"]


def without_wall(r):
    r = dict(r)
    r["sim"] = {k: v for k, v in r["sim"].items() if k not in ("wall_seconds", "events_per_second")}
    return r


def case_gemm_steal_off():
    r = report("--app", "gemm", "--n", "2048", "--tile", "256", "--ranks", "4", "--steal", "off")
    check_once(r)
    assert r["tasks"] == 512, r["tasks"]
    assert r["steal"]["requests_sent"] == 0
    # Each rank runs what it owns (2x2 grid, 8x8x8 tasks).
    assert all(s["tasks"] == 128 for s in r["rank_stats"]), [s["tasks"] for s in r["rank_stats"]]


def case_gemm_steal_on():
    for rule in ("on", "off"):
        r = report("--app", "gemm", "--n", "2048", "--tile", "256", "--ranks", "4", "--steal", "on",
                   "--steal-cost-rule", rule, "--gflops", "10")
        check_once(r)


def case_bspgemm_steals():
    # Skewed work at 10 GFLOP/s: tasks of milliseconds, so the cost rule lets thieves steal.
    args = ["--app", "bspgemm", "--pattern", "skewed", "--n", "4096", "--tile", "256", "--ranks", "8",
            "--gflops", "10"]
    off = report(*args, "--steal", "off")
    on = report(*args, "--steal", "on")
    check_once(off)
    check_once(on)
    assert on["steal"]["tasks_stolen"] > 0, on["steal"]
    assert on["sim"]["makespan_seconds"] < off["sim"]["makespan_seconds"], (
        on["sim"]["makespan_seconds"], off["sim"]["makespan_seconds"])
    rt = on["steal"]["round_trip_us"]
    assert 0 < rt["p50"] <= rt["p90"] <= rt["p99"], rt


def case_cholesky():
    r = report("--app", "cholesky", "--n", "2048", "--tile", "256", "--ranks", "4", "--steal", "on")
    check_once(r)
    assert r["tasks"] == 120, r["tasks"]  # 8 POTRF + 28 TRSM + 28 SYRK + 56 GEMM


def case_determinism():
    args = ["--app", "bspgemm", "--n", "4096", "--tile", "256", "--ranks", "8", "--gflops", "10",
            "--steal", "on", "--steal-seed", "7"]
    a, b = report(*args), report(*args)
    assert without_wall(a) == without_wall(b), "two runs with the same seed differ"


def case_cpu():
    # The ranks' CPU: a tile counts as arrived after its CPU work; ranks sharing few cores
    # wait for each other; a victim's serving CPU lengthens the round trips.
    base = ["--app", "gemm", "--n", "1536", "--tile", "256", "--ranks", "8", "--gflops", "1000"]
    free = report(*base, "--steal", "off")
    own = report(*base, "--steal", "off", "--tile-cpu-us", "90")
    shared = report(*base, "--steal", "off", "--tile-cpu-us", "90", "--host-cores", "2")
    for r in (free, own, shared):
        check_once(r)
    m = [r["sim"]["makespan_seconds"] for r in (free, own, shared)]
    assert m[0] < m[1] < m[2], m
    tiles = sum(s["bytes_received"] for s in own["rank_stats"]) / (256 * 256 * 8)
    cpu = sum(s["comm_cpu_seconds"] for s in own["rank_stats"])
    assert abs(cpu - tiles * 90e-6) < 1e-9, (cpu, tiles)
    # 8 ranks' CPU on 2 cores takes at least its total over the 2 cores.
    assert m[2] >= cpu / 2, (m[2], cpu)
    on = ["--app", "bspgemm", "--n", "3072", "--tile", "256", "--ranks", "4", "--gflops", "10", "--steal", "on"]
    served = report(*on)
    unserved = report(*on, "--serve-cpu", "off")
    assert served["sim"]["serve_cpu_us"] == 40 and unserved["sim"]["serve_cpu_us"] == 0
    assert served["steal"]["round_trip_us"]["p50"] >= unserved["steal"]["round_trip_us"]["p50"] + 40, (
        served["steal"]["round_trip_us"], unserved["steal"]["round_trip_us"])


def case_iterations():
    # Several iterations: every task runs once in each; what the ranks learned (cost models,
    # compute shares) carries over; the makespan is the median of all but the first.
    args = ["--app", "bspgemm", "--n", "3072", "--tile", "256", "--ranks", "4", "--gflops", "10",
            "--steal", "on"]
    one = report(*args)
    three = report(*args, "--iterations", "3")
    assert len(one["iterations"]) == 1 and len(three["iterations"]) == 3
    assert three["iterations"][0]["seconds"] == one["iterations"][0]["seconds"], "the first iteration differs"
    assert sum(s["tasks"] for s in three["rank_stats"]) == 3 * three["tasks"]
    assert sum(s["tasks_owned"] for s in three["rank_stats"]) == 3 * three["tasks"]
    its = three["iterations"]
    assert all(0 < it["mean_compute_share"] <= it["busiest_compute_share"] <= 1 for it in its), its
    median = sorted(it["seconds"] for it in its[1:])
    assert abs(three["sim"]["makespan_seconds"] - (median[0] + median[1]) / 2) < 1e-12
    assert three["sim"]["first_iteration_seconds"] == its[0]["seconds"]


def case_trace():
    # --trace writes what a real run's --trace writes: per rank and iteration, samples of the
    # tasks ready and the tasks completed so far, in order of time.
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.jsonl")
        r = report("--app", "bspgemm", "--n", "3072", "--tile", "256", "--ranks", "4", "--gflops", "10",
                   "--steal", "on", "--iterations", "2", "--trace", path)
        lines = [json.loads(line) for line in open(path) if line.strip()]
    assert lines, "an empty trace"
    assert all(set(line) == {"rank", "iteration", "t", "ready", "completed"} for line in lines), lines[0]
    assert {line["rank"] for line in lines} == {0, 1, 2, 3}
    assert {line["iteration"] for line in lines} == {0, 1}
    for rank in range(4):
        for iteration in (0, 1):
            rows = [x for x in lines if x["rank"] == rank and x["iteration"] == iteration]
            assert [x["t"] for x in rows] == sorted(x["t"] for x in rows), (rank, iteration)
            assert [x["completed"] for x in rows] == sorted(x["completed"] for x in rows), (rank, iteration)
            assert all(x["ready"] >= 0 for x in rows)
    ran = {(s["rank"]): s["tasks"] for s in r["rank_stats"]}
    for iteration in (0, 1):
        last = sum(max(x["completed"] for x in lines if x["rank"] == rank and x["iteration"] == iteration)
                   for rank in range(4))
        assert last == r["tasks"], (iteration, last, r["tasks"])
    assert sum(ran.values()) == 2 * r["tasks"]


def case_transfer_limits():
    """--fetch-window bounds a rank's tile requests out at once; --link-concurrency holds tiles
    back, never control messages (they have a network of their own); the same work is done."""
    common = ("--app", "bspgemm", "--pattern", "skewed", "--n", "4096", "--tile", "256", "--ranks", "16",
              "--gflops", "1000")
    limits = ("--fetch-window", "2", "--link-concurrency", "1")
    free = report(*common, "--steal", "off")
    limited = report(*common, "--steal", "off", *limits)
    stealing = report(*common, "--steal", "on", *limits)
    for r in (free, limited, stealing):
        check_once(r)
    assert free["sim"]["fetch_window"] == 0 and free["sim"]["link_concurrency"] == 0, free["sim"]
    assert limited["sim"]["fetch_window"] == 2 and limited["sim"]["link_concurrency"] == 1, limited["sim"]
    assert free["sim"]["most_tile_requests_out"] > 2, free["sim"]["most_tile_requests_out"]
    assert limited["sim"]["most_tile_requests_out"] == 2, limited["sim"]["most_tile_requests_out"]
    assert all(s["most_tile_requests_out"] <= 2 for s in limited["rank_stats"])
    # The same activities, in another order: every tile is still requested and moved.
    assert limited["sim"]["events"] == free["sim"]["events"], (limited["sim"]["events"], free["sim"]["events"])
    assert sum(s["bytes_received"] for s in limited["rank_stats"]) == sum(s["bytes_received"] for s in free["rank_stats"])
    ratio = limited["sim"]["makespan_seconds"] / free["sim"]["makespan_seconds"]
    assert 0.8 < ratio < 1.2, ratio
    # Steal requests and replies do not queue behind tiles: a round trip (5 us each way, 40 us
    # of serving a visit, up to 2 forwards) stays far below one tile's 0.1 ms times the tiles held back.
    assert stealing["steal"]["requests_sent"] > 0, stealing["steal"]
    assert stealing["steal"]["round_trip_us"]["p99"] < 400, stealing["steal"]["round_trip_us"]


def case_bad_arguments():
    cases = [
        (["--ranks", "0"], "bellows-sim: error: --ranks must be at least 1, got 0"),
        (["--app", "lu"], "bellows-sim: error: --app must be gemm, cholesky or bspgemm, got 'lu'"),
        (["--steal", "maybe"], "bellows-sim: error: --steal must be on or off, got 'maybe'"),
        (["--gflops", "0"], "bellows-sim: error: --gflops must be positive, got 0"),
        (["--app", "bspgemm", "--density", "1.5"], "bellows-sim: error: --density must be in (0, 1], got 1.5"),
        (["--n", "128", "--tile", "256"], "bellows-sim: error: --tile 256 is larger than the matrix (--n 128)"),
        (["--ranks", "x"], "bellows-sim: error: Could not convert: --ranks = x"),
        (["--iterations", "0"], "bellows-sim: error: --iterations must be at least 1, got 0"),
        (["--host-cores", "-1"], "bellows-sim: error: --host-cores must be at least 0, got -1"),
        (["--serve-cpu", "x"], "bellows-sim: error: --serve-cpu must be on or off, got 'x'"),
        (["--link-concurrency", "-1"], "bellows-sim: error: --link-concurrency must be at least 0, got -1"),
        (["--fetch-window", "-2"], "bellows-sim: error: --fetch-window must be at least 0, got -2"),
        (["--no-such-option"], "bellows-sim: error: The following argument was not expected: --no-such-option"),
    ]
    for args, text in cases:
        proc = run(*args, expect=2)
        assert text in proc.stderr, f"{args}: {proc.stderr!r} lacks {text!r}"


if __name__ == "__main__":
    globals()["case_" + sys.argv[2]]()
    print("ok")
