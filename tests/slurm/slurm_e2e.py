#!/usr/bin/env python3
"""End-to-end tests of the Slurm cluster started by scripts/local-slurm, with the SPANK
plugin spank_bellows.so loaded.

  slurm_e2e.py --dir DIR --local-slurm PATH [--plugin SO] [--bellows CLI] [--source ROOT] TEST

TEST is one of: start, stop (the CTest fixture pair), start_failure, sinfo_nodes_idle, srun_and_sacct,
sbatch_help, reject_bad_elastic, reject_bad_policy, elastic_job_environment,
policy_only_on_submit_host, expand_and_shrink. Each prints what it checks and ends with "slurm_e2e: PASS" or
"slurm_e2e: FAIL: <why>" (exit status 0 or 1). slurm_elastic_e2e.py runs elastic jobs on it.
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_cluster import NODES, check, describe, log, main, marked_processes, processes_below, start_failing


# ------------------------------------------------------------------ the fixture pair


def test_start(c, args):
    check(os.geteuid() == 0, "the Slurm tests need root (the daemons run as root)")
    for tool in ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "sbatch"):
        check(shutil.which(tool) or Path("/usr/sbin", tool).exists(),
              f"{tool} is not installed: run scripts/install-deps.sh")
    check(args.plugin and Path(args.plugin).is_file(), f"SPANK plugin {args.plugin} not found")
    pid_file = c.dir / "run" / "subreaper.pid"
    if pid_file.exists():  # a cluster left by an interrupted run
        c.run([c.local_slurm, "stop", str(c.dir)], ok=False)
    shutil.rmtree(c.dir, ignore_errors=True)
    shutil.rmtree(c.work, ignore_errors=True)
    result = c.run([c.local_slurm, "start", str(c.dir), "--nodes", str(NODES), "--plugin", args.plugin]
                   + (["--no-job-expansion"] if c.companion else [])
                   + (["--loopback"] if c.loopback else []), timeout=240, ok=False)
    print(result.stdout + result.stderr, end="")
    check(result.returncode == 0, f"local-slurm start exited with {result.returncode}")
    log(f"local-slurm start took {result.seconds:.2f} s")


def test_stop(c, args):
    pid_file = c.dir / "run" / "subreaper.pid"
    check((c.dir / "run" / "cluster.json").exists(), f"no cluster in {c.dir} to stop")
    # Without a pid file (the start failed) only the marker check below applies.
    keeper = int(pid_file.read_text()) if pid_file.exists() else None
    pids = [keeper] + processes_below(keeper) if keeper else []
    log(f"{len(pids)} processes of the cluster before stop: "
        + ", ".join(describe(p) for p in pids))
    sockets = (c.dir / "sockets").resolve()
    check(len(str(sockets)) < 40 and (sockets / "munge.socket.2").exists(),
          f"the cluster's sockets are not in a short directory: {sockets}")
    result = c.run([c.local_slurm, "stop", str(c.dir)], timeout=120, ok=False)
    print(result.stdout + result.stderr, end="")
    check(result.returncode == 0, f"local-slurm stop exited with {result.returncode}")
    log(f"local-slurm stop took {result.seconds:.2f} s")
    # The daemons were reaped by the subreaper; the subreaper itself by its parent (PID 1
    # once start has returned), which may take a moment.
    deadline = time.monotonic() + 10
    while True:
        left = [p for p in pids if Path(f"/proc/{p}").exists()]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    check(not left, "processes (or zombies) of the cluster left after stop: "
          + ", ".join(describe(p) for p in left))
    strays = marked_processes(c.dir)
    check(not strays, "processes started for the cluster still running: "
          + ", ".join(describe(p) for p in strays))
    check(not sockets.exists(), f"the socket directory {sockets} is left after stop")
    log("no daemon, slurmstepd, job task, zombie or socket directory of the cluster is left")


def test_start_failure(c, args):
    """A daemon that fails at start: start exits 1, names it, shows its log, stops the rest."""
    directory = c.dir.parent / "failing-cluster"
    fake = c.dir.parent / "failing-bin"
    began = time.monotonic()
    start_failing(c.local_slurm, directory, fake, "slurmdbd",
                  "#!/bin/sh\n"
                  "echo 'fatal: this slurmdbd fails on purpose' >> \"$(dirname \"$SLURM_CONF\")/../log/slurmdbd.log\"\n"
                  "exit 1\n", os.environ,
                  ("local-slurm: error: slurmdbd exited with status 1",
                   f"local-slurm: last lines of {directory}/log/slurmdbd.log:",
                   "fatal: this slurmdbd fails on purpose",
                   "local-slurm: stopping what was started"))
    check(not (directory / "run" / "subreaper.pid").exists(), "the subreaper's pid file is still there")
    deadline = time.monotonic() + 10
    while marked_processes(directory) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = marked_processes(directory)
    check(not left, "processes of the failed cluster left: " + ", ".join(describe(p) for p in left))
    sockets = (directory / "sockets").resolve()
    check(not sockets.exists(), f"the failed cluster's socket directory {sockets} is left")
    log(f"the failed start stopped munged and mariadbd ({time.monotonic() - began:.2f} s)")
    shutil.rmtree(fake, ignore_errors=True)


# ------------------------------------------------------------------ the tests


def test_sinfo_nodes_idle(c, args):
    states = c.wait_idle()
    check(sorted(states) == [f"n{i}" for i in range(1, NODES + 1)], f"nodes: {states}")
    out = c.run(["sinfo", "-h", "-o", "%D %T"]).stdout.split()
    check(out == [str(NODES), "idle"], f"sinfo says {out}, expected {NODES} idle nodes")
    log(f"sinfo: {NODES} nodes idle")


def test_srun_and_sacct(c, args):
    c.wait_idle()
    result = c.run_on_head(["srun", "-N", str(NODES), "--label", "-J", "e2e-hostname", "hostname"])
    lines = sorted(result.stdout.split("\n"))
    lines = [line for line in lines if line.strip()]
    check(len(lines) == NODES, f"srun -N{NODES} hostname printed {lines}")
    check(sorted(line.split(":")[0].strip() for line in lines) == [str(i) for i in range(NODES)],
          f"task labels: {lines}")
    log(f"srun -N{NODES} hostname: {len(lines)} tasks in {result.seconds:.3f} s")
    # The job record reaches slurmdbd asynchronously.
    deadline = time.monotonic() + 20
    while True:
        out = c.run(["sacct", "-n", "-X", "-P", "--name", "e2e-hostname",
                     "-o", "JobID,JobName,State,NNodes,NodeList"]).stdout.strip()
        if "COMPLETED" in out or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    rows = [row.split("|") for row in out.splitlines()]
    check(len(rows) == 1, f"sacct lists {rows}, expected the one e2e-hostname job")
    _, name, state, nnodes, nodelist = rows[0]
    check((name, state, nnodes, nodelist) == ("e2e-hostname", "COMPLETED", str(NODES), f"n[1-{NODES}]"),
          f"sacct: {rows[0]}")
    log(f"sacct: {'|'.join(rows[0])}")


def test_doctor(c, args):
    """bellows doctor on the test cluster: no problem; each check said, with the expand strategy
    a job uses (merge, or companion on a cluster without permit_job_expansion); exit 0. Then the
    same with slurm.conf out of reach: the one problem named, exit 1."""
    result = c.run([args.bellows, "doctor"], ok=False)
    print(result.stdout, end="")
    check(result.returncode == 0, f"bellows doctor exited {result.returncode}: {result.stderr}")
    lines = result.stdout.splitlines()
    for expected in ("ok       slurmctld: answers (cluster bellows, Slurm 22.05",
                     "ok       expand strategy: companion: Slurm does not permit job expansion "
                     "(SchedulerParameters=batch_sched_delay=0" if c.companion else
                     "ok       expand strategy: merge: Slurm permits job expansion (SchedulerParameters=permit_job_expansion",
                     "ok       accounting: slurmdbd (accounting_storage/slurmdbd)",
                     f"ok       SPANK plugin: loaded by {c.dir}/etc/plugstack.conf: required {args.plugin}",
                     "ok       node loss: elastic jobs run with Slurm's no-kill, which spank_bellows.so sets at "
                     "submission: a node that goes DOWN leaves the job, which runs on (slurmctld sets a node "
                     "that stops answering DOWN after SlurmdTimeout=300 sec;",
                     "warning  select plugin: select/linear",
                     "ok       munge: reachable (socket=",
                     "bellows doctor: 0 problem(s), 2 warning(s): elastic jobs can run here"):
        check(any(line.startswith(expected) for line in lines), f"no line starting '{expected}'")
    env = dict(c.env, SLURM_CONF=str(c.dir / "etc" / "missing.conf"))
    broken = subprocess.run([args.bellows, "doctor"], env=env, capture_output=True, text=True, timeout=60)
    check(broken.returncode == 1 and broken.stdout.startswith(
              f"problem  slurmctld: scontrol show config failed: SLURM_CONF={c.dir}/etc/missing.conf names no file"),
          f"bellows doctor without a slurm.conf: {broken.returncode} {broken.stdout!r}")
    log("bellows doctor: no problem on this cluster; without its slurm.conf: " +
        broken.stdout.splitlines()[0])


def test_sbatch_help(c, args):
    out = c.run(["sbatch", "--help"]).stdout
    check("Options provided by plugins:" in out, "sbatch --help has no plugin options section")
    section = " ".join(out.split("Options provided by plugins:")[1].split("\n\n")[0].split())
    for expected in ("--elastic=MIN:MAX Elastic job (Bellows): it may grow to MAX nodes and "
                     "shrink to MIN nodes while it runs",
                     "--elastic-policy=FILE Resize policy of an elastic job (Bellows), a YAML "
                     "file; check it with 'bellows policy check FILE'"):
        check(expected in section, f"sbatch --help lacks '{expected}'; plugin section: {section}")
    for tool in ("salloc", "srun"):
        check("--elastic-policy=FILE" in c.run([tool, "--help"]).stdout, f"{tool} --help lacks the options")
    log("sbatch, salloc and srun --help show --elastic and --elastic-policy")


def expect_rejected(c, args, cwd, expected_lines):
    result = c.run(["sbatch"] + args + ["--wrap", "true"], cwd=cwd, ok=False)
    check(result.returncode != 0, f"sbatch {' '.join(args)} was accepted: {result.stdout}")
    check("Submitted batch job" not in result.stdout, f"a job was submitted: {result.stdout}")
    got = result.stderr.splitlines()
    for line in expected_lines:
        check(f"sbatch: error: {line}" in got,
              f"sbatch {' '.join(args)}: expected the line 'sbatch: error: {line}' in:\n{result.stderr}")
    log(f"sbatch {' '.join(args)} refused in {result.seconds:.3f} s:\n  " + "\n  ".join(got))


def test_reject_bad_elastic(c, args):
    work = c.workdir("reject_bad_elastic")
    expect_rejected(c, ["--elastic=5:2"], work, ["--elastic=5:2: MIN (5) is greater than MAX (2)"])
    expect_rejected(c, ["--elastic=0:x"], work, ["--elastic=0:x: MIN must be at least 1, got 0"])
    # As an #SBATCH directive.
    (work / "job.sh").write_text("#!/bin/sh\n#SBATCH --elastic=4\ntrue\n")
    result = c.run(["sbatch", "job.sh"], cwd=work, ok=False)
    check(result.returncode != 0 and
          "sbatch: error: --elastic=4: expected MIN:MAX, e.g. --elastic=2:8" in result.stderr.splitlines(),
          f"#SBATCH --elastic=4 not refused as expected:\n{result.stdout}{result.stderr}")
    log("#SBATCH --elastic=4 refused")


def test_reject_bad_policy(c, args):
    work = c.workdir("reject_bad_policy")
    (work / "BAD.yaml").write_text("nodes:\n  min: 4\n  max: 2\nexpand:\n  busy_fraction_above: 2\n"
                                   "tick: 5\n")
    check_run = subprocess.run([args.bellows, "policy", "check", "BAD.yaml"], cwd=work,
                               capture_output=True, text=True)
    check(check_run.returncode == 2, f"bellows policy check BAD.yaml: {check_run.returncode}")
    expected = check_run.stderr.splitlines()
    check(len(expected) >= 2, f"bellows policy check BAD.yaml: {check_run.stderr}")
    expect_rejected(c, ["--elastic-policy=BAD.yaml"], work, expected)
    expect_rejected(c, ["--elastic-policy=missing.yaml"], work,
                    ["missing.yaml: cannot read the policy file: No such file or directory"])
    throughput = "policies/examples/throughput.yaml"
    expect_rejected(c, ["--elastic=2:3", f"--elastic-policy={throughput}"], args.source,
                    [f"--elastic=2:3 with --elastic-policy={throughput}: nodes.step (2) is larger "
                     "than nodes.max - nodes.min (1)"])


def test_elastic_job_environment(c, args):
    c.wait_idle()
    work = c.workdir("elastic_job_environment")
    policy = "policies/examples/cluster-friendly.yaml"
    script = work / "job.sh"
    script.write_text(f"""#!/bin/sh
#SBATCH --elastic=2:4
#SBATCH --elastic-policy={policy}
#SBATCH -N 1
#SBATCH -J e2e-elastic
#SBATCH -D {work}
#SBATCH -o {work}/job.out
env > {work}/batch.env
srun -N1 env > {work}/step.env
""")
    began = time.monotonic()
    # Submitted from the source tree: the policy path is relative to it.
    job = c.run(["sbatch", "--parsable", str(script)], cwd=args.source).stdout.strip()
    state = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"))
    log(f"job {job} {state} {time.monotonic() - began:.2f} s after submission")
    check(state == "COMPLETED", f"job {job} ended {state}; output:\n{(work / 'job.out').read_text()}")
    expected = {"BELLOWS_ELASTIC_MIN": "2", "BELLOWS_ELASTIC_MAX": "4",
                "BELLOWS_ELASTIC_POLICY": str(Path(args.source, policy).resolve())}
    for name in ("batch.env", "step.env"):
        env = dict(line.split("=", 1) for line in (work / name).read_text().splitlines() if "=" in line)
        got = {k: env.get(k) for k in expected}
        check(got == expected, f"{name} of job {job}: {got}, expected {expected}")
        log(f"{name}: " + " ".join(f"{k}={v}" for k, v in got.items()))


def test_policy_only_on_submit_host(c, args):
    """A policy file that exists only on the submit host (in its private /tmp): the job runs
    with the policy's content, which travelled with it, on a node that never sees the file, and
    the node stays in service. Then a job whose option reaches the node without the content
    (set only in the job's environment, as from a submit host whose plugin does not send it):
    slurmstepd refuses it without failing the plugin stack (which would drain the node), the
    batch task ends with status 1, the job ends FAILED 1:0 with the reasons in its output, and
    its node is idle again."""
    c.wait_idle()
    work = c.workdir("policy_only_on_submit_host")
    private = Path(tempfile.mkdtemp(prefix="bellows-e2e-policy-", dir="/tmp"))
    try:
        policy = private / "submit-host.yaml"
        text = "# only on the submit host\nnodes:\n  min: 1\n  max: 3\nexpand:\n  busy_fraction_above: 0.9\n"
        policy.write_text(text)
        seen = c.run_on_head(["srun", "-N1", "test", "-e", str(policy)], ok=False)
        check(seen.returncode != 0, f"a node sees {policy}: the test needs it on the submit host only")
        script = work / "job.sh"
        script.write_text(f"""#!/bin/sh
env > {work}/batch.env
srun -N1 env > {work}/step.env
""")

        def submit(name, option):
            job = c.run(["sbatch", "--parsable", "-N1", option, "-J", name,
                         "-D", str(work), "-o", f"{work}/{name}.out", str(script)]).stdout.strip()
            state = c.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"))
            node = c.job_field(job, "BatchHost")
            output = (work / f"{name}.out").read_text() if (work / f"{name}.out").exists() else ""
            exit_code = c.job_field(job, "ExitCode")
            log(f"job {job} ({name}) on {node}: {state} {exit_code}")
            return job, state, exit_code, node, output

        def node_in_service(node):
            deadline = time.monotonic() + 10
            while c.node_states().get(node) != "idle" and time.monotonic() < deadline:
                time.sleep(0.05)
            states = c.node_states()
            reason = c.run(["sinfo", "-h", "-n", node, "-o", "%E"]).stdout.strip()
            check(states.get(node) == "idle", f"{node} is {states.get(node)} ({reason}) after the job, not idle")
            return states

        job, state, exit_code, node, output = submit("e2e-private-policy", f"--elastic-policy={policy}")
        check(state == "COMPLETED" and exit_code == "0:0", f"job {job} ended {state} {exit_code}:\n{output}")
        expected = {"BELLOWS_ELASTIC_MIN": "1", "BELLOWS_ELASTIC_MAX": "3",
                    "BELLOWS_ELASTIC_POLICY": str(policy),
                    "BELLOWS_ELASTIC_POLICY_BASE64": base64.b64encode(text.encode()).decode()}
        for name in ("batch.env", "step.env"):
            env = dict(line.split("=", 1) for line in (work / name).read_text().splitlines() if "=" in line)
            got = {k: env.get(k) for k in expected}
            check(got == expected, f"{name} of job {job}: {got}, expected {expected}")
        log(f"the job ran with the policy's content ({len(text)} bytes) in its batch step and its step")
        node_in_service(node)
        log(f"{node} is idle after the job")

        (work / "batch.env").unlink()
        job, state, exit_code, node, output = submit(
            "e2e-policy-without-content", f"--export=ALL,_SLURM_SPANK_OPTION_bellows_elastic_policy={policy}")
        check(state == "FAILED" and exit_code == "1:0",
              f"job {job} ended {state} {exit_code}, expected FAILED 1:0:\n{output}")
        check(not (work / "batch.env").exists(), f"the batch script of job {job} ran")
        for line in (f"spank_bellows: error: --elastic-policy={policy}: the policy's content did not come "
                     "with the job (BELLOWS_ELASTIC_POLICY_BASE64 is not in its environment); the plugin "
                     "reads no policy file on a node: submit with sbatch, salloc or srun where "
                     "spank_bellows.so is loaded",
                     f"spank_bellows: error: job {job} cannot run on {node} as submitted: its task ends "
                     "with status 1 (the node stays in service)"):
            check(line in output.splitlines(), f"the output of job {job} lacks the line\n  {line}\nit holds:\n{output}")
        states = node_in_service(node)
        check(all(s == "idle" for s in states.values()), f"nodes after the refused job: {states}")
        log(f"job {job} FAILED with the reasons in its output; {node} idle, no node drained:\n  "
            + "\n  ".join(output.splitlines()))
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_expand_and_shrink(c, args):
    c.wait_idle()
    work = c.workdir("expand_and_shrink")
    timings = {}

    def timed(name, began):
        timings[name] = time.monotonic() - began

    began = time.monotonic()
    job = c.run(["sbatch", "--parsable", "-N1", "-J", "e2e-expand", "-D", str(work), "-o", "job.out",
                 "--wrap", "sleep 120"]).stdout.strip()
    c.wait_job_state(job, ("RUNNING",))
    timed("submit_to_running", began)
    batch_host = c.job_field(job, "BatchHost")
    check(c.job_field(job, "NumNodes") == "1", "the job does not start on 1 node")
    try:
        # 1. An expansion allocation without a step, depending on the job (expand:JOBID).
        began = time.monotonic()
        result = c.run(["salloc", "-N1", f"--dependency=expand:{job}", "--no-shell"])
        timed("expansion_allocation", began)
        words = (result.stdout + result.stderr).split()
        check("allocation" in words, f"salloc: {result.stdout}{result.stderr}")
        expansion = words[words.index("allocation") + 1]
        new_node = c.job_field(expansion, "NodeList")
        # 2. Merge: the expansion allocation gives its node to the job.
        began = time.monotonic()
        c.run(["scontrol", "update", f"JobId={expansion}", "NumNodes=0"])
        timed("merge", began)
        nodes = c.job_field(job, "NumNodes")
        nodelist = c.job_field(job, "NodeList")
        check(nodes == "2", f"job {job} has {nodes} nodes ({nodelist}) after the merge, expected 2")
        check(c.job_field(job, "JobState") == "RUNNING", "the job stopped running at the merge")
        log(f"job {job} expanded: {batch_host} + {new_node} -> NodeList={nodelist}")
        # A step on both nodes of the expanded job.
        began = time.monotonic()
        step = c.run_on_head(["srun", f"--jobid={job}", "-N2", "--overlap", "printenv", "SLURMD_NODENAME"])
        timed("step_on_2_nodes", began)
        check(sorted(step.stdout.split()) == sorted([batch_host, new_node]),
              f"step on the expanded job ran on {step.stdout.split()}")
        # 3. Shrink back to the batch host; the freed node goes idle.
        began = time.monotonic()
        c.run(["scontrol", "update", f"JobId={job}", "NumNodes=1"])
        timed("shrink", began)
        began = time.monotonic()
        deadline = began + 10
        while c.node_states().get(new_node) != "idle":
            check(time.monotonic() < deadline, f"{new_node} not idle 10 s after the shrink")
            time.sleep(0.01)
        timed("freed_node_idle", began)
        check(c.job_field(job, "NumNodes") == "1" and c.job_field(job, "NodeList") == batch_host,
              f"job {job} after the shrink: {c.job_field(job, 'NodeList')}")
        check(c.job_field(job, "JobState") == "RUNNING", "the job stopped running at the shrink")
        log(f"job {job} shrunk back to {batch_host}; {new_node} idle")
    finally:
        c.run(["scancel", job], ok=False)
    for name, seconds in timings.items():
        log(f"timing {name}: {seconds:.3f} s")
    print(json.dumps({"expand_and_shrink_seconds": {k: round(v, 4) for k, v in timings.items()}}))



TESTS = {
    "start": test_start,
    "stop": test_stop,
    "start_failure": test_start_failure,
    "sinfo_nodes_idle": test_sinfo_nodes_idle,
    "srun_and_sacct": test_srun_and_sacct,
    "sbatch_help": test_sbatch_help,
    "doctor": test_doctor,
    "reject_bad_elastic": test_reject_bad_elastic,
    "reject_bad_policy": test_reject_bad_policy,
    "elastic_job_environment": test_elastic_job_environment,
    "policy_only_on_submit_host": test_policy_only_on_submit_host,
    "expand_and_shrink": test_expand_and_shrink,
}


if __name__ == "__main__":
    sys.exit(main(__doc__, TESTS, fixture_tests=("start", "stop", "start_failure")))
