#!/usr/bin/env python3
"""An installation of this build serves an application the way DEVELOPERS.md says: `cmake
--install` into a fresh prefix, then the consumer project (find_package(Bellows), link
bellows::runtime) configures, builds and runs on one rank.

  install_test.py CMAKE BUILD_DIR CONSUMER_SOURCE MPIEXEC
"""
import os
import shutil
import subprocess
import sys
import tempfile


def run(what, cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        print(f"install_test: FAIL: {what} exited {proc.returncode}: {' '.join(cmd)}\n"
              f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        sys.exit(1)
    return proc


def main():
    cmake, build_dir, consumer, mpiexec = sys.argv[1:5]
    top = tempfile.mkdtemp(prefix="bellows-install-test-")
    try:
        prefix = os.path.join(top, "prefix")
        run("cmake --install", [cmake, "--install", build_dir, "--prefix", prefix])
        app_build = os.path.join(top, "build")
        run("configuring the consumer", [cmake, "-S", consumer, "-B", app_build,
                                          f"-DCMAKE_PREFIX_PATH={prefix}"])
        run("building the consumer", [cmake, "--build", app_build])
        out = run("the consumer", [mpiexec, "-n", "1", os.path.join(app_build, "consumer")],
                  env=dict(os.environ, OPENBLAS_NUM_THREADS="1"), timeout=60).stdout
        print(out.strip())
        if "backup of rank 2: rank 1" not in out:
            print(f"install_test: FAIL: unexpected output {out!r}")
            sys.exit(1)
    finally:
        shutil.rmtree(top, ignore_errors=True)
    print("install_test: PASS")


if __name__ == "__main__":
    main()
