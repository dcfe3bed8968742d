#!/usr/bin/env python3
"""Runs an example through scripts/bellows-local on a random resize schedule drawn from a fixed
seed, and checks that the job verified and that its report lists exactly the scheduled resizes
(sizes before and after each one, ranks added or removed) and each iteration's rank count.

  random_resize.py --seed 7 --launcher scripts/bellows-local --app build/examples/gemm -- ARGS

Prints "random_resize: PASS" or "random_resize: FAIL: why".
"""
import argparse
import json
import random
import subprocess
import sys


def schedule(seed, ranks, iterations, max_ranks):
    """Between 2 and iterations - 1 resizes, each +1/+2 or -1/-2, keeping 1..max_ranks ranks."""
    rng = random.Random(seed)
    steps, size = [], ranks
    points = sorted(rng.sample(range(2, iterations + 1), rng.randint(2, iterations - 1)))
    for it in points:
        choices = [d for d in (-2, -1, 1, 2) if 1 <= size + d <= max_ranks]
        delta = rng.choice(choices)
        steps.append((it, delta))
        size += delta
    return steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=6)
    ap.add_argument("--max-ranks", type=int, default=5)
    ap.add_argument("--tasks-per-iteration", type=int, required=True,
                    help="checks that every task ran once per iteration, leavers included")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    extra = a.args[1:] if a.args[:1] == ["--"] else a.args
    steps = schedule(a.seed, a.ranks, a.iterations, a.max_ranks)
    text = ",".join(f"iter={it}:{d:+d}" for it, d in steps)
    cmd = [a.launcher, "-n", str(a.ranks), "--", a.app, "--iterations", str(a.iterations),
           "--resize", text, "--verify", "--quiet"] + extra
    print("random_resize: schedule", text, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    def fail(why):
        sys.stdout.write(out.stdout[-2000:])
        sys.stderr.write(out.stderr[-4000:])
        print(f"random_resize: FAIL: {why}")
        return 1

    if out.returncode != 0:
        return fail(f"exit code {out.returncode}")
    try:
        report = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        return fail(f"no JSON report ({e})")
    if report.get("verified") is not True:
        return fail("the result did not verify")
    resizes = report.get("resizes", [])
    if len(resizes) != len(steps):
        return fail(f"{len(resizes)} resizes reported, {len(steps)} scheduled")
    size = a.ranks
    expected_ranks = []
    it_sizes = {}
    for (it, delta), r in zip(steps, resizes):
        if r["before_iteration"] != it or r["from_ranks"] != size or r["to_ranks"] != size + delta:
            return fail(f"resize {r} does not match iter={it}:{delta:+d} from {size} ranks")
        if delta > 0 and r.get("add") != delta:
            return fail(f"resize {r} should add {delta}")
        if delta < 0 and r.get("remove") != list(range(size + delta, size)):
            return fail(f"resize {r} should remove the {-delta} highest ranks")
        size += delta
        it_sizes[it] = size
    size = a.ranks
    for i in range(1, a.iterations + 1):
        size = it_sizes.get(i, size)
        expected_ranks.append(size)
    got = [x["ranks"] for x in report["iterations"]]
    if got != expected_ranks:
        return fail(f"iteration rank counts {got}, expected {expected_ranks}")
    ran = sum(r["tasks"] for r in report["rank_stats"]) + \
        sum(r.get("tasks_run_by_leaving_ranks", 0) for r in resizes)
    if ran != a.tasks_per_iteration * a.iterations:
        return fail(f"{ran} tasks ran over all ranks (leavers included), expected "
                    f"{a.tasks_per_iteration} x {a.iterations}")
    print("random_resize: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
