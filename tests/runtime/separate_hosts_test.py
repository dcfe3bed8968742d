#!/usr/bin/env python3
"""Ranks on different hosts share nothing but the network: the same-host transport (doorbells
and single-copy reads between processes) is used only between ranks whose host names agree.

Runs the GEMM example on 2 ranks twice, each rank in a UTS namespace of its own (unshare
--uts, with its own host name; needs root): first with both ranks named alike (one node: every
tile byte moves by the same-host transport), then named apart (two nodes: every tile byte goes
through MPI and none through the same-host transport). Both runs verify, and on both each
rank's bytes sent and received match its peer's.

  separate_hosts_test.py --mpiexec PATH --app PATH
Prints "separate_hosts: PASS" or "separate_hosts: FAIL: why".
"""
import argparse
import json
import os
import subprocess
import sys


def fail(message):
    print(f"separate_hosts: FAIL: {message}")
    sys.exit(1)


def run(args, hosts):
    """The report of a 2-rank GEMM whose rank r runs on a host named hosts[r]."""
    app = [args.app, "--n", "1024", "--tile", "128", "--iterations", "2", "--steal", "on",
           "--verify", "--quiet"]
    command = [args.mpiexec]
    for i, host in enumerate(hosts):
        if i:
            command.append(":")
        command += ["-n", "1", "unshare", "--uts", "sh", "-c",
                    f'hostname {host} && exec "$@"', "rank", *app]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    if proc.returncode != 0:
        fail(f"ranks on {hosts}: exit {proc.returncode}: {proc.stdout[-1500:]} {proc.stderr[-1500:]}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    report = json.loads(lines[-1])
    if not report["verified"]:
        fail(f"ranks on {hosts}: the result did not verify (residual {report['residual']})")
    stats = sorted(report["rank_stats"], key=lambda s: s["rank"])
    if [s["host"] for s in stats] != hosts:
        fail(f"the ranks' reports name the hosts {[s['host'] for s in stats]}, expected {hosts}")
    if [s["bytes_sent"] for s in stats] != [s["bytes_received"] for s in reversed(stats)]:
        fail(f"ranks on {hosts}: bytes sent and received do not match between the ranks: {stats}")
    return stats


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mpiexec", required=True)
    parser.add_argument("--app", required=True)
    args = parser.parse_args()
    if os.geteuid() != 0:
        fail("needs root (unshare --uts gives each rank a host name of its own)")

    one_node = run(args, ["node-a", "node-a"])
    for s in one_node:
        if s["bytes_received"] == 0 or s["bytes_received_same_host"] != s["bytes_received"] or \
                s["bytes_sent_same_host"] != s["bytes_sent"]:
            fail(f"ranks of one node did not move every tile by the same-host transport: {s}")
    print(f"separate_hosts: one node: rank 0 received {one_node[0]['bytes_received']} bytes, all by "
          f"the same-host transport")

    two_nodes = run(args, ["node-a", "node-b"])
    for s in two_nodes:
        if s["bytes_received"] == 0 or s["bytes_received_same_host"] != 0 or s["bytes_sent_same_host"] != 0:
            fail(f"ranks of two nodes moved bytes by the same-host transport: {s}")
    print(f"separate_hosts: two nodes: rank 0 received {two_nodes[0]['bytes_received']} bytes, all "
          f"through MPI")
    print("separate_hosts: PASS")


if __name__ == "__main__":
    main()
