"""What the end-to-end Slurm tests share: the cluster started by scripts/local-slurm, checks,
process inspection and the command-line runner (slurm_e2e.py, slurm_elastic_e2e.py)."""

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))
from log_lines import job_log_problems  # noqa: E402
from procfs import (describe, processes_below, processes_mentioning,  # noqa: E402
                    processes_with_environment, zombies_of)

# The process helpers the test scripts import from here.
__all__ = ["describe", "processes_below", "processes_mentioning", "zombies_of"]

NODES = 4
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


class TestFailure(Exception):
    pass


# The policy of the elastic tests that grow a job from 1 to 3 nodes as soon as it has work
# queued, and keep it there (no shrink by the policy: the tests shrink it by hand).
GROW_POLICY = """\
nodes:
  min: 1
  max: 3
  step: 2
expand:
  ready_tasks_per_node_above: 1
tick: 250ms
hysteresis_ticks: 1
cooldown: 10m
resize_timeout: 1m
"""


def check(condition, message):
    if not condition:
        raise TestFailure(message)


def check_job_logs(job_dir, output, allowed=()):
    """At the end of a `bellows run` job: no warning or error line in its batch output (`bellows
    run`'s stdout and stderr, the program's output in it) nor in any node's bellowsd.log under
    job_dir, other than those containing one of `allowed` (what the test provokes on purpose)."""
    daemon_logs = sorted(Path(job_dir).glob("nodes/*/bellowsd.log"))
    check(daemon_logs, f"no nodes/*/bellowsd.log in the job directory {job_dir}")
    problems = job_log_problems(str(job_dir), output, allowed)
    check(not problems, "unexpected warnings or errors in the job's logs:\n  " + "\n  ".join(problems))
    log(f"no unexpected warning or error in the batch output nor in the bellowsd.log of "
        f"{', '.join(p.parent.name for p in daemon_logs)}" + (f" (allowed: {list(allowed)})" if allowed else ""))


def log(message):
    print(f"slurm_e2e: {message}", flush=True)


class Cluster:
    def __init__(self, args):
        self.dir = Path(args.dir).resolve()
        self.local_slurm = args.local_slurm
        self.env = dict(os.environ, SLURM_CONF=str(self.dir / "etc" / "slurm.conf"))
        self.work = self.dir.parent / ("work" if self.dir.name == "cluster" else f"work-{self.dir.name}")
        # Started with `local-slurm start --no-job-expansion`: Slurm's default SchedulerParameters,
        # so elastic jobs grow by companion allocations rather than by merging helper jobs.
        self.companion = getattr(args, "no_job_expansion", False)
        # Started with `local-slurm start --loopback`: every node is this host.
        self.loopback = getattr(args, "loopback", False)

    @property
    def separate_hosts(self):
        """Every node is a host of its own (local-slurm's default; not --loopback)."""
        return not self.loopback

    def run_on_head(self, args, timeout=60, ok=True):
        """A command that listens on its host's address (srun, salloc): on a cluster of separate
        hosts it runs on the head (local-slurm exec), whose host name the nodes can reach."""
        prefix = [self.local_slurm, "exec", str(self.dir), "--"] if self.separate_hosts else []
        return self.run(prefix + list(args), timeout=timeout, ok=ok)

    def run(self, args, cwd=None, timeout=60, ok=True):
        """Runs a command against the cluster; with ok=True a non-zero exit fails the test."""
        began = time.monotonic()
        result = subprocess.run(args, env=self.env, cwd=cwd, capture_output=True, text=True,
                                timeout=timeout)
        result.seconds = time.monotonic() - began
        if ok and result.returncode != 0:
            raise TestFailure(f"{' '.join(args)} exited with {result.returncode}:\n"
                              f"{result.stdout}{result.stderr}")
        return result

    def node_states(self):
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %T"]).stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def wait_idle(self, timeout=20):
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            if len(states) == NODES and all(s == "idle" for s in states.values()):
                return states
            if time.monotonic() > deadline:
                raise TestFailure(f"nodes not all idle after {timeout} s: {states}")
            time.sleep(0.05)

    def job_field(self, job, field):
        out = self.run(["scontrol", "-o", "show", "job", str(job)]).stdout
        for item in out.split():
            if item.startswith(field + "="):
                return item.split("=", 1)[1]
        raise TestFailure(f"scontrol show job {job} has no {field}: {out}")

    def wait_job_state(self, job, states, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_field(job, "JobState")
            if state in states:
                return state
            if time.monotonic() > deadline:
                raise TestFailure(f"job {job} is {state} after {timeout} s, expected {states}")
            time.sleep(0.02)

    def workdir(self, name):
        path = self.work / name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path


# ------------------------------------------------------------------ processes


def namespace(pid, kind):
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def processes_of(job_dir, program):
    """Pids of the processes whose command line names `program` and whose environment or
    command line names the job directory (the ranks and daemons of one job)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if program in cmdline.split(" ", 1)[0] and str(job_dir) in cmdline + environ:
            found.append(int(entry.name))
    return found


def host_of(pid, holders):
    """The node whose network namespace the process lives in (holders: node -> holder pid)."""
    net = namespace(pid, "net")
    return next((node for node, holder in holders.items() if namespace(holder, "net") == net), None)


def start_failing(local_slurm, directory, fake, daemon, script, env, expected_lines, options=(), timeout=240):
    """`local-slurm start directory` with a fake `daemon` first in PATH (`script` is its shell
    text; it lives in `fake`, which must not be under /tmp, as a node cannot see the machine's
    /tmp): start must exit 1 and print each of expected_lines. Returns when start returned."""
    shutil.rmtree(fake, ignore_errors=True)
    fake.mkdir(parents=True)
    (fake / daemon).write_text(script)
    (fake / daemon).chmod(0o755)
    shutil.rmtree(directory, ignore_errors=True)
    env = dict(env, PATH=f"{fake}:{os.environ.get('PATH', '')}")
    result = subprocess.run([local_slurm, "start", str(directory), *options], env=env, capture_output=True,
                            text=True, timeout=timeout)
    output = result.stdout + result.stderr
    print(output, end="")
    check(result.returncode == 1, f"local-slurm start exited with {result.returncode}, expected 1")
    for expected in expected_lines:
        check(expected in output.splitlines(), f"the output lacks the line '{expected}'")


def marked_processes(directory):
    """Every process started for the cluster in directory carries this entry."""
    return processes_with_environment(f"BELLOWS_LOCAL_SLURM_DIR={directory}")


def nodelist_names(c, nodelist):
    return c.run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def main(doc, tests, fixture_tests=(), on_failure=None):
    """Runs the test named on the command line; tests in fixture_tests need no running cluster.
    on_failure(cluster, args), when given, keeps the evidence of a failure (slurm_evidence.py)."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--dir", required=True, help="the cluster directory")
    parser.add_argument("--local-slurm", required=True, help="scripts/local-slurm")
    parser.add_argument("--plugin", help="spank_bellows.so")
    parser.add_argument("--bellows", help="the bellows command")
    parser.add_argument("--source", help="the source tree (policies/examples/ is read from it)")
    parser.add_argument("--app", help="the gemm example")
    parser.add_argument("--cholesky", help="the cholesky example")
    parser.add_argument("--native-client", help="pmix_native_client, a PMIx-native program in C")
    parser.add_argument("--elastic-client", help="pmix_elastic_client, a PMIx-native program in C that grows")
    parser.add_argument("--no-job-expansion", action="store_true",
                        help="the cluster runs (start: is started) without permit_job_expansion")
    parser.add_argument("--loopback", action="store_true",
                        help="every node of the cluster is this host (start: local-slurm start --loopback)")
    parser.add_argument("--heartbeat-timeout", type=float, default=2.0,
                        help="seconds: the recovery.heartbeat_timeout of the jobs' policy, where a test "
                             "writes it (lost_node_cut_*; 2 s, so that a cut is found, and the cut-off "
                             "node's processes end, within seconds)")
    parser.add_argument("test", choices=sorted(tests))
    args = parser.parse_args()
    cluster = Cluster(args)
    try:
        if args.test not in fixture_tests:
            check((cluster.dir / "run" / "subreaper.pid").exists(),
                  f"no cluster running in {cluster.dir} (the slurm.cluster_start fixture failed?)")
        tests[args.test](cluster, args)
    except TestFailure as failure:
        why = str(failure)
    except subprocess.TimeoutExpired as timeout:
        why = f"{' '.join(timeout.cmd)} did not finish within {timeout.timeout} s"
    else:
        log("PASS")
        return 0
    if on_failure is not None:
        try:
            on_failure(cluster, args)
        except Exception as e:  # the failure itself is what the test reports
            log(f"could not keep the evidence of the failure: {type(e).__name__}: {e}")
    log(f"FAIL: {why}")
    return 1
