"""End-to-end tests of `scripts/local-slurm start --separate-hosts`: every node a host of its own
(network, UTS and mount namespaces), and nothing of it left after stop.

  separate_hosts               a 4-node cluster in a directory with a path longer than 150
                               characters: host names per node, a network namespace per slurmd,
                               private /tmp, TCP between nodes by name, nothing listening on all
                               interfaces, job expansion permitted; beside it a second cluster
                               with --no-job-expansion (its own range, names and ports); both
                               stopped, nothing left
  separate_hosts_start_failure a slurmd that exits 1: start says so and leaves nothing behind
  separate_hosts_elastic       an elastic GEMM (`bellows run --backend slurm`) grows from n1 onto
                               two other hosts and shrinks back: daemons on tcp, each rank started
                               by its node's daemon inside that node's namespaces, tiles between
                               nodes through MPI only, status from another node and from the
                               machine's shell, nothing of the job left on the released hosts
  separate_hosts_pmix_client   pmix_native_client, a PMIx-native program in C, as the program of
                               `bellows run --backend slurm` on one, three and four hosts (one
                               job after the other, the last on every node): every rank a PMIx
                               client of its host's daemon in the job's namespace, with its
                               job-wide rank, the job's size, nodes and map, its host
  separate_hosts_pmix_grow     pmix_elastic_client, a PMIx-native program in C, as the program of
                               `bellows run --backend slurm --pmix-native` on two hosts, grown
                               by `bellows resize +1`, shrunk by `-1` and grown by `+1` again
                               (ranks 0, 1 and 3, or the two that stayed and 3): after each change every
                               rank of the job reads its size, node count and nodes and fences
                               with collected data among the job's ranks and over the whole
                               namespace; the leaver exits 0, the job completes
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from slurm_cluster import (GROW_POLICY, Cluster, check, check_job_logs, describe, host_of, log, main,  # noqa: E402
                           marked_processes, namespace, processes_below, processes_of, start_failing)

NODES = 4
NODE_NAMES = [f"n{i}" for i in range(1, NODES + 1)]
MIN_DIR_LENGTH = 150

# Lines of the daemons' logs that a first start writes and that say nothing is wrong.
EXPECTED_LOG_LINES = [
    r"slurmctld\.log:.*error: Could not open (node|job|reservation|trigger) state file .*: No such file or directory",
    r"slurmctld\.log:.*error: NOTE: Trying backup state save file\. .* (lost|Lost)!?",
    r"slurmctld\.log:.*error: No fed_mgr state file \(.*\) to recover",
    r"slurmdbd\.log:.*error: Database settings not recommended values: innodb_buffer_pool_size",
    r"mariadbd\.(log|out):.*\[Warning\] 'proxies_priv' entry '@% root@.*' ignored in --skip-name-resolve mode\.",
    r"mariadbd\.(log|out):.*\[Warning\] Could not increase number of max_open_files to more than \d+ "
    r"\(request: \d+\)",
    # slurmctld's start-up check of the clock: on a loaded host 1000 calls take longer than it
    # likes. The host's load, not the cluster.
    r"slurmctld\.log:.*error: High latency for 1000 calls to gettimeofday\(\): \d+ microseconds",
]


def long_dir(base, name):
    """base/name padded so that its path is longer than MIN_DIR_LENGTH characters."""
    path = Path(base).resolve() / name
    padding = max(0, MIN_DIR_LENGTH + 1 - len(str(path)) - 1)
    return path / ("p" * padding) if padding else path


def cluster_in(directory, args):
    return Cluster(SimpleNamespace(dir=directory, local_slurm=args.local_slurm))


def start(c, *options):
    shutil.rmtree(c.dir, ignore_errors=True)
    result = c.run([c.local_slurm, "start", str(c.dir), "--separate-hosts", "--nodes", str(NODES), *options],
                   timeout=120, ok=False)
    print(result.stdout + result.stderr, end="")
    check(result.returncode == 0, f"local-slurm start {c.dir} exited with {result.returncode}")
    lines = result.stdout.splitlines()
    check(re.fullmatch(rf"local-slurm: starting {NODES} nodes in {re.escape(str(c.dir))} \(ports \d+-\d+, "
                       r"separate hosts on 10\.213\.\d+\.0/24\)", lines[0]), f"first line: {lines[0]}")
    idle = re.fullmatch(rf"local-slurm: {NODES} nodes idle in ([0-9.]+) s after the slurmd launch; "
                        r"cluster up in ([0-9.]+) s \(.*\)", lines[1])
    check(idle, f"second line: {lines[1]}")
    log(f"{c.dir.name[:20]}...: {NODES} nodes idle {idle.group(1)} s after the slurmd launch, "
        f"cluster up in {idle.group(2)} s (start took {result.seconds:.2f} s)")
    check(float(idle.group(1)) < 10, f"the nodes took {idle.group(1)} s to become idle")
    return json.loads((c.dir / "run" / "cluster.json").read_text())


def on_head(c, command, timeout=60, ok=True):
    """srun and salloc listen on the address of their host's name: they run on the head."""
    return c.run([c.local_slurm, "exec", str(c.dir), "--", *command], timeout=timeout, ok=ok)


def pid_of(c, name):
    return int((c.dir / "run" / f"{name}.pid").read_text().split()[0])


def listening_everywhere(pids):
    """'PID ADDRESS:PORT' for each TCP socket of pids that listens on 0.0.0.0 or ::."""
    found = []
    for pid in pids:
        inodes = set()
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
            tables = [Path(f"/proc/{pid}/net/{t}").read_text().splitlines()[1:] for t in ("tcp", "tcp6")]
        except OSError:
            continue  # gone meanwhile
        for row in (line.split() for table in tables for line in table):
            local, state, inode = row[1], row[3], row[9]
            address, port = local.split(":")
            if state == "0A" and inode in inodes and set(address) == {"0"}:
                found.append(f"{describe(pid)} *:{int(port, 16)}")
    return found


def unexpected_log_lines(directory):
    found = []
    for path in sorted((directory / "log").iterdir()):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("$ "):  # the command line local-slurm ran
                continue
            if re.search(r"error|fatal|warn", line, re.IGNORECASE):
                entry = f"{path.name}:{line}"
                if not any(re.search(pattern, entry) for pattern in EXPECTED_LOG_LINES):
                    found.append(entry)
    return found


def leftovers(directory, digest, pids):
    """What of a stopped cluster is still there."""
    left = [describe(p) for p in pids if Path(f"/proc/{p}").exists()]
    left += [describe(p) for p in marked_processes(directory)]
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"netns {line.split()[0]}" for line in netns.splitlines() if digest in line]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    left += [f"link {line.split(':')[1].strip()}" for line in links.splitlines() if digest in line]
    left += [f"mount {line.split()[4]}" for line in Path("/proc/self/mountinfo").read_text().splitlines()
             if digest in line]
    left += [str(p) for p in (Path(f"/tmp/bellows-slurm-{digest}"), Path(f"/run/bellows-slurm-{digest}"))
             if p.exists()]
    return left


def stop(c, digest):
    keeper = pid_of(c, "subreaper")
    pids = [keeper] + processes_below(keeper)
    result = c.run([c.local_slurm, "stop", str(c.dir)], timeout=120, ok=False)
    print(result.stdout + result.stderr, end="")
    check(result.returncode == 0, f"local-slurm stop exited with {result.returncode}")
    check(re.fullmatch(rf"local-slurm: stopped the cluster in {re.escape(str(c.dir))} in [0-9.]+ s; no process, "
                       r"namespace or socket directory of it left\n", result.stdout), f"stop said: {result.stdout}")
    log(f"local-slurm stop took {result.seconds:.2f} s")
    deadline = time.monotonic() + 10  # PID 1 reaps the subreaper
    while (left := leftovers(c.dir, digest, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    check(not left, "left after stop: " + ", ".join(left))
    again = c.run([c.local_slurm, "stop", str(c.dir)], timeout=60, ok=False)
    check(again.returncode == 0, f"a second stop exited with {again.returncode}: {again.stdout}{again.stderr}")


def scheduler_parameters(c):
    for line in c.run(["scontrol", "show", "config"]).stdout.splitlines():
        if line.startswith("SchedulerParameters"):
            return line.split("=", 1)[1].strip()
    return None


def check_hosts(c, cluster, digest):
    separate = cluster["separate_hosts"]
    addresses = {n: separate["nodes"][n] for n in NODE_NAMES}
    network = separate["network"]
    check(addresses == {n: network.replace(".0/24", f".{i}") for i, n in enumerate(NODE_NAMES, 1)},
          f"node addresses {addresses} in {network}")
    status = c.run([c.local_slurm, "status", str(c.dir)]).stdout
    for node in NODE_NAMES:
        check(re.search(rf"^  node {node} +{re.escape(addresses[node])} +netns bellows-{digest}-{node}$", status,
                        re.MULTILINE), f"status lacks the line of {node}:\n{status}")

    # One host name per node, from a step on each.
    result = on_head(c, ["srun", "-N", str(NODES), "-l", "hostname"])
    lines = sorted(line for line in result.stdout.splitlines() if line.strip())
    check(lines == [f"{i}: {n}" for i, n in enumerate(NODE_NAMES)], f"srun -N{NODES} -l hostname: {lines}")
    log(f"srun -N{NODES} -l hostname: {' '.join(lines)} ({result.seconds:.2f} s)")

    # A network, UTS and mount namespace per slurmd, none of them the test's.
    slurmds = {n: pid_of(c, f"slurmd-{n}") for n in NODE_NAMES}
    for kind in ("net", "uts", "mnt"):
        spaces = {n: os.readlink(f"/proc/{pid}/ns/{kind}") for n, pid in slurmds.items()}
        own = os.readlink(f"/proc/self/ns/{kind}")
        check(len(set(spaces.values())) == NODES and own not in spaces.values(),
              f"{kind} namespaces of the slurmds {spaces}, the test's {own}")
    log("each slurmd has its own network, UTS and mount namespace")

    # Private /tmp: a file a step writes on n1 is not on n2, nor in the test's /tmp.
    probe = f"/tmp/bellows-separate-hosts-probe-{digest}"
    on_head(c, ["srun", "-w", "n1", "-N1", "sh", "-c", f"echo written-on-n1 > {probe}"])
    seen = on_head(c, ["srun", "-w", "n1", "-N1", "cat", probe]).stdout.strip()
    check(seen == "written-on-n1", f"n1 reads back {seen!r}")
    absent = on_head(c, ["srun", "-w", "n2", "-N1", "sh", "-c", f"test -e {probe} && echo there || echo absent"])
    check(absent.stdout.strip() == "absent", f"n2 sees n1's {probe}: {absent.stdout!r}")
    check(not Path(probe).exists(), f"the test sees n1's {probe}")
    log(f"{probe} written on n1 is not on n2 nor on the head")

    # TCP from n1 to n2 by name; the port passes through DIR, which every node shares.
    port_file = c.dir / "run" / "probe.port"
    port_file.unlink(missing_ok=True)
    server = ("import socket, sys\n"
              "s = socket.socket(); s.bind(('n2', 0)); s.listen(1)\n"
              f"open('{port_file}.tmp', 'w').write(str(s.getsockname()[1]))\n"
              f"__import__('os').rename('{port_file}.tmp', '{port_file}')\n"
              "conn, peer = s.accept()\n"
              "print(socket.gethostname(), 'got', conn.recv(100).decode(), 'from', peer[0])\n")
    listener = subprocess.Popen([c.local_slurm, "exec", str(c.dir), "--", "srun", "-w", "n2", "-N1",
                                 "python3", "-c", server], env=c.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() and listener.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        check(port_file.exists(), f"the listener on n2 wrote no port (status {listener.poll()})")
        client = ("import socket\n"
                  f"c = socket.create_connection(('n2', {port_file.read_text()}), timeout=10)\n"
                  "c.sendall(('hello from ' + socket.gethostname()).encode())\n")
        on_head(c, ["srun", "-w", "n1", "-N1", "python3", "-c", client])
        out, err = listener.communicate(timeout=30)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    expected = f"n2 got hello from n1 from {addresses['n1']}"
    check(out.strip() == expected, f"the listener on n2 printed {out!r} {err!r}, expected {expected!r}")
    log(f"TCP n1 -> n2 by name: {expected}")

    # Nothing of the cluster listens on all interfaces.
    wide = listening_everywhere(marked_processes(c.dir))
    check(not wide, "listening on all interfaces: " + ", ".join(wide))





def test_separate_hosts_pmix_grow(c, args):
    check(os.geteuid() == 0, "the Slurm tests need root (the daemons run as root)")
    check(args.bellows and args.elastic_client and args.plugin, "needs --bellows, --elastic-client and --plugin")
    first = cluster_in(long_dir(c.dir, "pmix-grow"), args)
    if (first.dir / "run" / "cluster.json").exists():
        first.run([first.local_slurm, "stop", str(first.dir)], ok=False)
    cluster = start(first, "--plugin", args.plugin)
    digest = cluster["separate_hosts"]["bridge"][3:]
    work = first.dir.parent / "pmix-grow-work"
    shutil.rmtree(work, ignore_errors=True)
    out = work / "ranks"  # shared by every host, as a home directory is
    out.mkdir(parents=True)
    runs = work / "runs"
    job = None

    def status():
        result = subprocess.run([args.bellows, "status", job, "--json"], env=first.env, capture_output=True,
                                text=True, timeout=30)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def log_of(rank):
        path = out / f"rank-{rank}.log"
        return path.read_text().splitlines() if path.exists() else []

    def expect_job(ranks, nodes, what, numbers_given=None):
        """Every rank of `ranks` (on `nodes`, in rank order) logged that job and its fences. A rank
        started with a number not below the job's size reads the numbers given as the size
        (PMIx 4.2.2 gives such a client none of its own info otherwise: docs/daemon.md)."""
        def line(rank):
            size = numbers_given if numbers_given is not None and rank >= len(ranks) else len(ranks)
            # One rank per host: each is its host's local and node rank 0 (the rank that joins on
            # the host another rank left too).
            return (f"members {','.join(map(str, ranks))} size {size} num_nodes {len(ranks)} nodes "
                    f"{','.join(nodes)} local_rank 0 node_rank 0 fence ok keys {len(ranks)} wildcard ok")
        deadline = time.monotonic() + 60
        while not all(log_of(r)[-1:] == [line(r)] for r in ranks):
            check(time.monotonic() < deadline, f"{what}: not every rank logged {line(ranks[0])!r} within 60 s: "
                  + "; ".join(f"{r}: {log_of(r)}" for r in range(4)))
            time.sleep(0.2)
        past = f" (ranks numbered {len(ranks)} or more: {numbers_given}, the numbers given)" if numbers_given else ""
        log(f"{what}: ranks {ranks} on {nodes} read size {len(ranks)}{past}, their nodes and local rank 0, fenced "
            f"among themselves and over the namespace")

    def resized_to(count, what):
        deadline = time.monotonic() + 60
        while not ((s := status()) and len(s["nodes"]) == count and s["ranks"] == count
                   and s["active_resize"] is None):
            check(time.monotonic() < deadline, f"job {job} did not {what} to {count} nodes within 60 s: {s}")
            time.sleep(0.3)
        return s

    def resize(delta):
        r = subprocess.run([args.bellows, "resize", delta, "--job", job, "--reason", "pmix grow test"],
                           env=first.env, capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, f"bellows resize {delta}: {r.stdout}{r.stderr}")

    try:
        command = f"{args.bellows} run --backend slurm --pmix-native --quiet -- {args.elastic_client} {out}"
        job = first.run(["sbatch", "--parsable", "-N2", "--elastic=2:3", "-J", "hosts-pmix-grow", "-D", str(work),
                         "-o", "job.out", "-t", "5", f"--export=ALL,BELLOWS_RUN_DIR={runs}", "--wrap", command],
                        cwd=work).stdout.strip()
        log(f"submitted job {job}: {command}")
        s = resized_to(2, "start")
        expect_job([0, 1], s["nodes"], "the start")
        resize("+1")
        grown = resized_to(3, "grow")
        expect_job([0, 1, 2], grown["nodes"], "after resize +1")
        resize("-1")
        shrunk = resized_to(2, "shrink")
        gone = sorted(set(grown["nodes"]) - set(shrunk["nodes"]))
        check(len(gone) == 1, f"the shrink left nodes {shrunk['nodes']} of {grown['nodes']}")
        leaver = grown["nodes"].index(gone[0])
        staying = [r for r in range(3) if r != leaver]
        deadline = time.monotonic() + 30
        while log_of(leaver)[-1:] != ["left"]:
            check(time.monotonic() < deadline, f"rank {leaver} on {gone[0]} was shrunk away but its log ends "
                  f"{log_of(leaver)[-2:]}")
            time.sleep(0.2)
        expect_job(staying, [grown["nodes"][r] for r in staying], f"after resize -1 (rank {leaver} on {gone[0]} left)")
        # A grow after the shrink: rank 3 (a number that left is not given again) joins.
        resize("+1")
        again = resized_to(3, "grow again")
        joined = sorted(set(again["nodes"]) - set(shrunk["nodes"]))
        check(len(joined) == 1, f"the second grow left nodes {again['nodes']} after {shrunk['nodes']}")
        nodes_of = {r: grown["nodes"][r] for r in staying} | {3: joined[0]}
        expect_job(staying + [3], [nodes_of[r] for r in staying + [3]], "after resize +1 again (rank 3 joins)",
                   numbers_given=4)
        (out / "stop").write_text("")
        deadline = time.monotonic() + 60
        while first.job_field(job, "JobState") not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            check(time.monotonic() < deadline, f"job {job} did not end within 60 s of its ranks being told to stop")
            time.sleep(0.3)
        state = first.job_field(job, "JobState")
        check(state == "COMPLETED", f"job {job} is {state}:\n{(work / 'job.out').read_text()[-3000:]}")
        log(f"job {job} completed")
    finally:
        if job:
            first.run(["scancel", job], ok=False)
        stop(first, digest)
    # Rank 3 reads the job without the departed rank from its PMIx_Init on: no fence is refused.
    check_job_logs(runs / job, (work / "job.out").read_text())


def test_separate_hosts_elastic(c, args):
    check(os.geteuid() == 0, "the Slurm tests need root (the daemons run as root)")
    check(args.bellows and args.app and args.plugin, "needs --bellows, --app and --plugin")
    cluster_dir = long_dir(c.dir, "elastic")
    first = cluster_in(cluster_dir, args)
    if (first.dir / "run" / "cluster.json").exists():
        first.run([first.local_slurm, "stop", str(first.dir)], ok=False)
    cluster = start(first, "--plugin", args.plugin)
    digest = cluster["separate_hosts"]["bridge"][3:]
    addresses = cluster["separate_hosts"]["nodes"]
    holders = {node: pid_of(first, f"host-{node}") for node in NODE_NAMES}
    work = first.dir.parent / "elastic-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "grow.yaml").write_text(GROW_POLICY)
    runs = work / "runs"  # shared by every host, as a home directory is
    job = None
    try:
        command = (f"{args.bellows} run --backend slurm --quiet -- {args.app} --n 1536 --tile 256 "
                   f"--iterations 150 --verify")
        job = first.run(["sbatch", "--parsable", "-N1", "--elastic=1:3", "--elastic-policy=grow.yaml", "-J",
                         "hosts-elastic", "-D", str(work), "-o", "job.out", "-t", "5",
                         f"--export=ALL,BELLOWS_RUN_DIR={runs},OPENBLAS_NUM_THREADS=1", "--wrap", command],
                        cwd=work).stdout.strip()
        job_dir = runs / job
        log(f"submitted job {job}: {command}")

        def status(where=None):
            """bellows status JOB --json from the machine's shell (the submit host) or a node."""
            line = [args.bellows, "status", job, "--json"]
            if where:
                line = [first.local_slurm, "exec", str(first.dir), "--host", where, "--", *line]
            result = subprocess.run(line, env=first.env, capture_output=True, text=True, timeout=30)
            return json.loads(result.stdout) if result.returncode == 0 else None

        deadline = time.monotonic() + 60
        while not ((s := status()) and len(s["nodes"]) == 3 and s["ranks"] == 3 and s["active_resize"] is None):
            check(time.monotonic() < deadline, f"job {job} did not grow to 3 nodes within 60 s: {s}")
            time.sleep(0.3)
        grown = s["nodes"]
        check(grown[0] == "n1" and len(set(grown)) == 3, f"the job grew onto {grown}")
        log(f"job {job} grew from n1 onto {grown[1:]}")

        endpoint = (job_dir / "controller.endpoint").read_text().strip()
        check(endpoint.startswith(f"tcp://{addresses['n1']}:"), f"the controller listens at {endpoint}")
        daemons = {host_of(pid, holders): pid for pid in processes_of(job_dir, "bellowsd")}
        check(sorted(n for n in daemons if n) == sorted(grown),
              f"bellowsd processes by host: {daemons}, expected one on each of {grown}")
        ranks = {}
        for pid in processes_of(job_dir, args.app):
            ranks.setdefault(host_of(pid, holders), []).append(pid)
        check(sorted(n for n in ranks if n) == sorted(grown) and all(len(p) == 1 for p in ranks.values()),
              f"gemm ranks by host: {ranks}, expected one on each of {grown}")
        for node, (pid,) in ranks.items():
            name = subprocess.run(["nsenter", "-t", str(pid), "-u", "hostname"], capture_output=True,
                                  text=True).stdout.strip()
            check(name == node and namespace(pid, "uts") == namespace(holders[node], "uts")
                  and namespace(pid, "mnt") == namespace(holders[node], "mnt"),
                  f"the rank on {node} (pid {pid}) has host name {name!r} and other namespaces than its node")
        for node in grown:
            text = (job_dir / "nodes" / node / "bellowsd.log").read_text()
            check(f"registered with the controller at {endpoint}" in text,
                  f"the daemon of {node} did not register at {endpoint}:\n{text}")
        for node in grown[1:]:
            text = (job_dir / "nodes" / node / "bellowsd.log").read_text()
            check("started the rank of resize 1" in text, f"the daemon of {node} started no rank:\n{text}")
        log(f"daemons registered at {endpoint}; one rank per host, in its node's network, UTS and "
            f"mount namespaces, started by the node's daemon")
        from_node = status("n3")
        check(from_node and from_node["nodes"] == grown, f"bellows status {job} on n3: {from_node}")
        log(f"bellows status {job} answers on n3 and on the machine's shell")

        shrink = subprocess.run([args.bellows, "resize", "-2", "--job", job, "--reason", "hosts back"],
                                env=first.env, capture_output=True, text=True, timeout=30)
        check(shrink.returncode == 0, f"bellows resize -2: {shrink.stdout}{shrink.stderr}")
        deadline = time.monotonic() + 30
        while not ((s := status()) and s["nodes"] == ["n1"] and s["active_resize"] is None):
            check(time.monotonic() < deadline, f"job {job} did not shrink back to n1 within 30 s: {s}")
            time.sleep(0.3)
        deadline = time.monotonic() + 10
        while (left := [pid for pid in processes_of(job_dir, args.app) + processes_of(job_dir, "bellowsd")
                        if host_of(pid, holders) in grown[1:]]) and time.monotonic() < deadline:
            time.sleep(0.1)
        check(not left, "processes of the job left on the released hosts: " + ", ".join(describe(p) for p in left))
        log(f"shrunk back to n1: nothing of the job left on {grown[1:]}")

        deadline = time.monotonic() + 120
        while first.job_field(job, "JobState") not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            check(time.monotonic() < deadline, f"job {job} did not end within 120 s")
            time.sleep(0.3)
        out = (work / "job.out").read_text()
        state = first.job_field(job, "JobState")
        check(state == "COMPLETED", f"job {job} is {state}:\n{out[-3000:]}")
        report = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
        check(report["verified"], f"the GEMM did not verify: {report.get('residual')}")
        grown_iterations = [it for it in report["iterations"] if it["ranks"] == 3]
        check(grown_iterations, "no iteration ran on 3 ranks")
        check([r["host"] for r in report["rank_stats"]] == ["n1"],
              f"the report names the hosts {[r['host'] for r in report['rank_stats']]}, expected n1 at the end")
        same_host = sum(r["bytes_received_same_host"] + r["bytes_sent_same_host"] for r in report["rank_stats"])
        # The ranks at the end (n1's) report their whole run, iterations on 3 hosts included.
        moved = sum(r["bytes_received"] + r["bytes_sent"] for r in report["rank_stats"])
        check(same_host == 0 and moved > 0,
              f"tiles between hosts: {moved} bytes moved, {same_host} through the same-host transport")
        log(f"gemm verified; {len(grown_iterations)} iterations on 3 hosts; {moved} tile bytes sent or received "
            f"by the ranks at the end, all through MPI")
    finally:
        if job:
            first.run(["scancel", job], ok=False)
        stop(first, digest)
    # What Slurm logs for the merge of an expansion's helper job (docs/slurm.md, "Known quirks").
    merge_lines = [r"slurmctld\.log:.*error: select_g_job_fini\(JobId=\d+\): No error",
                   r"slurmd-n\d\.log:.*error: cons_res: zero processors allocated to step"]
    unexpected = [line for line in unexpected_log_lines(first.dir)
                  if not any(re.search(pattern, line) for pattern in merge_lines)]
    check(not unexpected, "unexpected lines in the logs:\n" + "\n".join(unexpected))
    check_job_logs(job_dir, (work / "job.out").read_text())


# The job sizes of separate_hosts_pmix_client, one job after the other on the same cluster; the
# last takes every node of it.
PMIX_CLIENT_JOB_NODES = (1, 3, NODES)


def run_native_client_job(first, args, work, node_count):
    """`bellows run --backend slurm` of pmix_native_client on node_count hosts of the running
    cluster, once all of its nodes are idle; checks what each rank read and the job's logs and
    returns the job id."""
    states = first.wait_idle(timeout=30)
    check(len(states) >= node_count, f"{node_count} nodes wanted, the cluster has {sorted(states)}")
    out = work / f"ranks-{node_count}"  # shared by every host, as a home directory is
    out.mkdir(parents=True)
    runs = work / "runs"
    output = f"job-{node_count}.out"
    command = f"{args.bellows} run --backend slurm --quiet -- {args.native_client} {out}"
    job = first.run(["sbatch", "--parsable", f"-N{node_count}", "-J", f"hosts-pmix-client-{node_count}",
                     "-D", str(work), "-o", output, "-t", "5", f"--export=ALL,BELLOWS_RUN_DIR={runs}",
                     "--wrap", command], cwd=work).stdout.strip()
    log(f"submitted job {job} on {node_count} of {len(states)} idle nodes: {command}")
    began = time.monotonic()
    try:
        first.wait_job_state(job, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=60)
    finally:
        first.run(["scancel", job], ok=False)
    seconds = time.monotonic() - began
    state = first.job_field(job, "JobState")
    check((work / output).exists(), f"job {job} ({node_count} nodes) is {state} and wrote no {work / output}")
    text = (work / output).read_text()
    check(state == "COMPLETED", f"job {job} ({node_count} nodes) is {state}:\n{text[-3000:]}")
    found = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(node_count)
             if (out / f"rank-{rank}.json").exists()]
    check(len(found) == node_count,
          f"{len(found)} of {node_count} ranks wrote their file: {sorted(p.name for p in out.iterdir())}")
    nodes = found[0]["nodes"]
    check(len(nodes) == node_count and len(set(nodes)) == node_count and set(nodes) <= set(NODE_NAMES),
          f"the job map's nodes on {node_count} hosts are {nodes}")
    for rank, got in enumerate(found):
        expected = {"nspace": job, "rank": rank, "job_size": node_count, "univ_size": node_count,
                    "num_nodes": node_count, "local_size": 1, "local_peers": [str(rank)], "local_rank": 0,
                    "node_rank": 0, "hostname": nodes[rank], "nodes": nodes,
                    "peers_by_node": {node: [i] for i, node in enumerate(nodes)},
                    "fence": True, "local_keys": 1, "event_handler": True, "failure": ""}
        wrong = {key: got.get(key) for key, value in expected.items() if got.get(key) != value}
        check(not wrong, f"rank {rank} of {node_count}: {wrong}, expected {expected}")
    log(f"{node_count} rank(s) on {nodes} in {seconds:.1f} s: each a PMIx client of its host's daemon in "
        f"namespace {job}, its own rank, the job's size and map")
    check_job_logs(runs / job, text)
    return job


def test_separate_hosts_pmix_client(c, args):
    check(os.geteuid() == 0, "the Slurm tests need root (the daemons run as root)")
    check(args.bellows and args.native_client and args.plugin, "needs --bellows, --native-client and --plugin")
    first = cluster_in(long_dir(c.dir, "pmix-client"), args)
    if (first.dir / "run" / "cluster.json").exists():
        first.run([first.local_slurm, "stop", str(first.dir)], ok=False)
    cluster = start(first, "--plugin", args.plugin)
    digest = cluster["separate_hosts"]["bridge"][3:]
    work = first.dir.parent / "pmix-client-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        jobs = [run_native_client_job(first, args, work, node_count) for node_count in PMIX_CLIENT_JOB_NODES]
        check(len(set(jobs)) == len(PMIX_CLIENT_JOB_NODES), f"the jobs' namespaces are not distinct: {jobs}")
    finally:
        stop(first, digest)


def test_separate_hosts(c, args):
    check(os.geteuid() == 0, "the Slurm tests need root (the daemons run as root)")
    began = time.monotonic()
    first = cluster_in(long_dir(c.dir, "expanding"), args)
    second = cluster_in(long_dir(c.dir, "rigid"), args)
    check(len(str(first.dir)) > MIN_DIR_LENGTH, f"{first.dir} is not longer than {MIN_DIR_LENGTH}")
    for other in (first, second):  # left by an interrupted run
        if (other.dir / "run" / "cluster.json").exists():
            other.run([other.local_slurm, "stop", str(other.dir)], ok=False)
    plugin = ["--plugin", args.plugin] if args.plugin else []
    cluster = start(first, *plugin)
    digest = cluster["separate_hosts"]["bridge"][3:]
    try:
        check_hosts(first, cluster, digest)
        parameters = scheduler_parameters(first)
        check("permit_job_expansion" in parameters.split(","), f"SchedulerParameters = {parameters}")

        # A second cluster beside the first, without job expansion.
        other = start(second, "--no-job-expansion")
        other_digest = other["separate_hosts"]["bridge"][3:]
        try:
            check(other_digest != digest and other["separate_hosts"]["network"] != cluster["separate_hosts"]["network"]
                  and other["port_base"] != cluster["port_base"],
                  f"the second cluster shares names, range or ports with the first: {other} {cluster}")
            parameters = scheduler_parameters(second)
            check(parameters == "batch_sched_delay=0", f"--no-job-expansion: SchedulerParameters = {parameters}")
            result = on_head(second, ["srun", "-N", str(NODES), "-l", "hostname"])
            check(sorted(result.stdout.split()) == sorted([f"{i}:" for i in range(NODES)] + NODE_NAMES),
                  f"srun on the second cluster: {result.stdout!r}")
            log(f"a second cluster on {other['separate_hosts']['network']}, ports {other['port_base']}, "
                f"SchedulerParameters={parameters}")
        finally:
            stop(second, other_digest)
    finally:
        stop(first, digest)
    unexpected = unexpected_log_lines(first.dir) + unexpected_log_lines(second.dir)
    check(not unexpected, "unexpected lines in the logs:\n" + "\n".join(unexpected))
    log(f"both clusters stopped, nothing left ({time.monotonic() - began:.1f} s in all)")


def test_separate_hosts_start_failure(c, args):
    """A slurmd that exits 1 (first in PATH, in a directory every node sees): start exits 1,
    names it, shows its log and removes every process, namespace and directory it made."""
    failing = cluster_in(long_dir(c.dir, "failing"), args)
    fake = c.dir / "failing-bin"
    began = time.monotonic()
    start_failing(failing.local_slurm, failing.dir, fake, "slurmd",
                  "#!/bin/sh\n"
                  "echo \"fatal: this slurmd on $(hostname) fails on purpose\" "
                  ">> \"$(dirname \"$SLURM_CONF\")/../log/slurmd-$2.log\"\n"
                  "exit 1\n", failing.env,
                  ("local-slurm: error: slurmd -N n1 exited with status 1",
                   f"local-slurm: last lines of {failing.dir}/log/slurmd-n1.log:",
                   "fatal: this slurmd on n1 fails on purpose",
                   "local-slurm: stopping what was started"),
                  options=("--separate-hosts",), timeout=120)
    digest = json.loads((failing.dir / "run" / "cluster.json").read_text())["separate_hosts"]["bridge"][3:]
    deadline = time.monotonic() + 10
    while (left := leftovers(failing.dir, digest, [])) and time.monotonic() < deadline:
        time.sleep(0.1)
    check(not left, "left after the failed start: " + ", ".join(left))
    check(not (failing.dir / "run" / "subreaper.pid").exists(), "the subreaper's pid file is still there")
    log(f"the failed start removed what it had made ({time.monotonic() - began:.2f} s)")
    shutil.rmtree(fake, ignore_errors=True)


if __name__ == "__main__":
    tests = {"separate_hosts": test_separate_hosts, "separate_hosts_start_failure": test_separate_hosts_start_failure,
             "separate_hosts_elastic": test_separate_hosts_elastic,
             "separate_hosts_pmix_client": test_separate_hosts_pmix_client,
             "separate_hosts_pmix_grow": test_separate_hosts_pmix_grow}
    sys.exit(main(__doc__, tests, fixture_tests=tuple(tests)))
