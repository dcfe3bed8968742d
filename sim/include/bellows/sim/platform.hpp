#pragma once
// The simulated machine: nodes with one device each, on a star of private full-duplex links
// through a switch (a SimGrid <cluster>), written as SimGrid platform XML.
//
// The defaults are numbers measured on the development machine (docs/sim.md, "Platform"):
// one-way latency of an 8-byte MPI message over TCP, MPI bandwidth of 1 MiB messages, and
// the runtime's own per-task cost on the emulated device.

#include <string>
#include <vector>

namespace bellows::sim {

struct PlatformOptions {
  /// Device speed of each node, GFLOP/s (the emulated device's --emulated-gflops).
  double gflops = 1000.0;
  /// Tasks a node's device runs at once (the emulated device's lanes): cores of the host.
  int lanes = 1;
  /// One-way latency of a message between two nodes, microseconds: each node's link
  /// carries half of it (the switch adds none).
  double latency_us = 5.0;
  /// Each node's link to the switch, GB/s (1e9 bytes per second), each way.
  double bandwidth_gbps = 5.0;
  /// The switch's backbone, GB/s, shared by every flow; 0: none (a non-blocking switch).
  double backbone_gbps = 0.0;
};

/// An empty string when the options are usable, else what is wrong (naming the option).
[[nodiscard]] std::string validate(const PlatformOptions& options);

/// A value as the simulator's texts write it (printf's %.9g).
[[nodiscard]] std::string format_number(double value);

/// Host names, in rank order: node-0, node-1, ...
[[nodiscard]] std::string host_name(int node);

/// SimGrid platform XML (DTD 4.1) for `nodes` nodes.
[[nodiscard]] std::string platform_xml(const PlatformOptions& options, int nodes);

/// Writes platform_xml(options, nodes) to `path`, or to a fresh file in /tmp when `path` is
/// empty, and returns the path written. Throws std::runtime_error when it cannot.
std::string write_platform(const PlatformOptions& options, int nodes, const std::string& path = {});

/// The arguments every simulation starts SimGrid's engine with (argv[0] = `program`): the
/// platform's latencies and bandwidths as written (the CM02 network model, no TCP correction
/// factors), no acknowledgement traffic, warnings and errors only in SimGrid's log.
[[nodiscard]] std::vector<std::string> simgrid_arguments(const std::string& program);

}  // namespace bellows::sim
