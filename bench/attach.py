#!/usr/bin/env python3
"""Takeover benchmark: the time from `bellows run --attach` to the new controller knowing every
node and rank of a running job again, on the local backend with real processes.

Each run starts a 2-node GEMM under `bellows run`, kills `bellows run` (SIGKILL) after the first
iteration, and starts `bellows run --attach latest`, which prints how long its daemons took to
say hello again and its ranks to be known (their last reports, sent again by their daemons).
The runs are those of tests/control_plane/attach_test.py --measure; the median is printed.

  python3 bench/attach.py --build build/default --rounds 3
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build/default")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    build = Path(args.build)
    test = Path(__file__).resolve().parent.parent / "tests" / "control_plane" / "attach_test.py"
    env = dict(os.environ)
    env.setdefault("MPIEXEC", "/opt/bellows-deps/mpich-4.0.2-ch3/bin/mpiexec")
    result = subprocess.run([sys.executable, str(test), "--bellows", str(build / "cli" / "bellows"), "--app",
                             str(build / "examples" / "gemm"), "--measure", str(args.rounds)], env=env)
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()
