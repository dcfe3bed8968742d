"""Separate hosts for scripts/local-slurm (`start --separate-hosts`): every node of the cluster
is a host of its own on this machine, the head is the machine itself.

- network: a bridge `bsbHASH` in the machine's network namespace carries the head's address
  10.213.X.254/24; node k is the network namespace `bellows-HASH-nk` (/run/netns), joined to
  the bridge by a veth pair (`bsvHASHk` on the bridge, `eth0` inside), address 10.213.X.k.
  X is the first /24 of 10.213.0.0/16 that no interface of the machine uses (picked under the
  start lock; the bridge holds it while the cluster runs). HASH: 8 hex digits of DIR's path,
  so the names differ from one cluster to the next and fit in 15 characters.
- node k also has its own UTS namespace (host name `nk`) and mount namespace: a private tmpfs
  on /tmp and on /dev/shm, DIR/run/hosts bind-mounted on /etc/hosts, and /run/netns
  unmounted (a node does not see the other nodes' namespaces). A holder process (`sleep
  infinity` after the set-up, pid in DIR/run/host-nk.pid) keeps the UTS and mount namespaces;
  every daemon of the node is started with `nsenter --net=/run/netns/NAME --uts=/proc/HOLDER/
  ns/uts --mount=/proc/HOLDER/ns/mnt` (not `ip netns exec`, which remounts /sys and hides
  /sys/fs/cgroup from slurmd).
- the head (slurmctld, slurmdbd, mariadbd, its munged) stays in the machine's network and UTS
  namespaces, in a mount namespace of its own whose only difference is the same hosts file:
  with `NoInAddrAny` a Slurm daemon or srun listens on the address its host name resolves to,
  and on this machine the host name resolves to 127.0.0.1, which the nodes cannot reach. The
  head's holder is DIR/run/host-head.pid.
- DIR is shared with every node, as a real cluster shares a home or project directory; when it
  lies under /tmp it is bind-mounted at the same path into each node's private /tmp (so are the
  SPANK plugin's directory and the repository local-slurm belongs to, whose build tree holds
  the programs jobs run).

Only the Python standard library is used.
"""

import ipaddress
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

SUBNET_FIRST = ipaddress.ip_network("10.213.0.0/24")
SUBNETS = 256  # 10.213.0.0/24 to 10.213.255.0/24
HEAD_HOST = 254  # the head's address in the node network is .254


class HostsError(Exception):
    pass


def names(digest):
    """Network names of the cluster whose DIR hashes to digest."""
    return {"bridge": f"bsb{digest}", "veth_prefix": f"bsv{digest}", "netns_prefix": f"bellows-{digest}-"}


def netns_name(digest, node):
    return f"bellows-{digest}-{node}"


def veth_name(digest, index):
    return f"bsv{digest}{index}"  # 3 + 8 + up to 1 digit: within IFNAMSIZ (15)


def stage_dir(digest):
    """An empty directory outside /tmp where a node prepares its private /tmp before moving it
    over /tmp (its own mount namespace only: it stays empty for everyone else)."""
    return Path("/run") / f"bellows-slurm-{digest}"


def ip(*args, check=True):
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise HostsError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def used_subnets():
    """The /24 networks of 10.213.0.0/16 that an address or route of this machine touches."""
    used = set()
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        for word in ip(*args, check=False).stdout.split():
            try:
                net = ipaddress.ip_interface(word).network
            except ValueError:
                continue
            for index in range(SUBNETS):
                candidate = subnet(index)
                if candidate.overlaps(net):
                    used.add(index)
    return used


def subnet(index):
    return ipaddress.ip_network((int(SUBNET_FIRST.network_address) + (index << 8), 24))


def pick_subnet():
    """The index X of the first free 10.213.X.0/24. Call with the start lock held: the bridge
    created next claims it."""
    used = used_subnets()
    for index in range(SUBNETS):
        if index not in used:
            return index
    raise HostsError("no free /24 in 10.213.0.0/16 for the node network")


def addresses(index, nodes):
    """The head's address and one per node (n1 -> .1, ...)."""
    base = int(subnet(index).network_address)
    head = str(ipaddress.ip_address(base + HEAD_HOST))
    return head, {node: str(ipaddress.ip_address(base + i)) for i, node in enumerate(nodes, 1)}


def hosts_text(head_name, head_address, node_addresses):
    lines = ["# Written by scripts/local-slurm: the hosts of one separate-hosts cluster.",
             "127.0.0.1\tlocalhost", f"{head_address}\t{head_name}"]
    lines += [f"{address}\t{node}" for node, address in node_addresses.items()]
    return "\n".join(lines) + "\n"


def create_network(digest, index, node_addresses):
    """The bridge with the head's address, and per node a network namespace joined to it."""
    n = names(digest)
    head = str(ipaddress.ip_address(int(subnet(index).network_address) + HEAD_HOST))
    ip("link", "add", n["bridge"], "type", "bridge")
    ip("addr", "add", f"{head}/24", "dev", n["bridge"])
    ip("link", "set", n["bridge"], "up")
    for i, (node, address) in enumerate(node_addresses.items(), 1):
        ns, veth, peer = netns_name(digest, node), veth_name(digest, i), f"bsp{digest}{i}"
        ip("netns", "add", ns)
        ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", ns)
        ip("-n", ns, "link", "set", peer, "name", "eth0")
        ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        ip("link", "set", veth, "master", n["bridge"], "up")


def network_leftovers(digest):
    """What of the cluster's network exists: namespaces, links, mounts (as text lines)."""
    n = names(digest)
    found = [f"netns {name}" for name in ip("netns", "list", check=False).stdout.split()
             if name.startswith(n["netns_prefix"])]
    for line in ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name == n["bridge"] or name.startswith(n["veth_prefix"]) or name.startswith(f"bsp{digest}"):
            found.append(f"link {name}")
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        mounts = []
    found += [f"mount {line.split()[4]}" for line in mounts if digest in line.split()[4]]
    if stage_dir(digest).exists():
        found.append(f"directory {stage_dir(digest)}")
    return found


def remove_network(digest):
    """Removes the veths, the bridge and the namespaces by name; idempotent. A veth is deleted
    from the bridge side, so it goes even when a mount namespace elsewhere still pins its
    node's network namespace."""
    n = names(digest)
    for line in ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(n["veth_prefix"]) or name.startswith(f"bsp{digest}"):
            ip("link", "del", name, check=False)
    ip("link", "del", n["bridge"], check=False)
    for name in ip("netns", "list", check=False).stdout.split():
        if name.startswith(n["netns_prefix"]):
            ip("netns", "del", name, check=False)
    try:
        stage_dir(digest).rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        pass  # reported by network_leftovers


def shared_binds(paths):
    """The paths (resolved, deduplicated, outermost first) that lie under /tmp: a node's private
    /tmp must show them at the same path."""
    under_tmp = sorted({Path(p).resolve() for p in paths if p and Path(p).resolve().is_relative_to("/tmp")})
    outer = []
    for p in under_tmp:
        if not any(p.is_relative_to(o) for o in outer):
            outer.append(p)
    return outer


def node_setup_script(node, digest, hosts_file, pid_file, binds, private_dirs):
    """The shell the node's holder runs in its new UTS and mount namespaces."""
    q = shlex.quote
    stage = q(str(stage_dir(digest)))
    lines = ["set -e",
             # The other nodes' network namespaces are files under /run/netns: not a node's business.
             "if mountpoint -q /run/netns; then umount -R -l /run/netns; fi",
             f"hostname {q(node)}",
             f"mount -t tmpfs -o mode=1777,size=1g bellows-{q(node)}-tmp {stage}"]
    for path in binds:
        inner = f"{stage}/{q(str(path.relative_to('/tmp')))}"
        lines += [f"mkdir -p {inner}", f"mount --bind {q(str(path))} {inner}"]
    lines += [f"mount --move {stage} /tmp",
              f"mount -t tmpfs -o mode=1777,size=1g bellows-{q(node)}-shm /dev/shm",
              f"mount --bind {q(str(hosts_file))} /etc/hosts"]
    lines += [f"mkdir -p -m 0755 {q(str(d))}" for d in private_dirs]
    lines += [f"echo $$ > {q(str(pid_file))}.tmp", f"mv {q(str(pid_file))}.tmp {q(str(pid_file))}",
              "exec sleep infinity"]
    return "\n".join(lines) + "\n"


def head_setup_script(hosts_file, pid_file):
    q = shlex.quote
    return "\n".join([
        "set -e",
        "if mountpoint -q /run/netns; then umount -R -l /run/netns; fi",
        f"mount --bind {q(str(hosts_file))} /etc/hosts",
        f"echo $$ > {q(str(pid_file))}.tmp", f"mv {q(str(pid_file))}.tmp {q(str(pid_file))}",
        "exec sleep infinity"]) + "\n"


def node_holder_args(digest, node, script):
    return ["nsenter", f"--net=/run/netns/{netns_name(digest, node)}", "unshare", "--uts", "--mount",
            "--propagation", "private", "sh", "-c", script]


def head_holder_args(script):
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]


def enter_node(digest, node, holder):
    """The prefix that runs a command on node (its network, UTS and mount namespaces)."""
    return ["nsenter", f"--net=/run/netns/{netns_name(digest, node)}", f"--uts=/proc/{holder}/ns/uts",
            f"--mount=/proc/{holder}/ns/mnt"]


def enter_head(holder):
    return ["nsenter", f"--mount=/proc/{holder}/ns/mnt"]


def read_holder(pid_file):
    """The holder's pid while it runs (a `sleep` process), else None."""
    try:
        pid = int(Path(pid_file).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "sleep":
            return None
    except OSError:
        return None
    return pid


def stop_holder(pid_file):
    pid = read_holder(pid_file)
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    Path(pid_file).unlink(missing_ok=True)


def namespace_of(pid, kind="net"):
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None
