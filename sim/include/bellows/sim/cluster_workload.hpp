#pragma once
// A batch workload of rigid and malleable jobs for the cluster simulation (bellows-sim-cluster,
// docs/sim.md, "A cluster of elastic and rigid jobs"): read from a Standard Workload Format
// file or generated from a seed, and a share of its jobs made malleable from a seed.
//
// Pure functions of their arguments (no clock, no I/O but read_swf_file); deterministic by
// seed on every platform: the random numbers are a counter-based hash (splitmix64), not the
// standard library's distributions.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bellows::sim {

/// How a malleable job's speed grows with its nodes: Amdahl's law with a serial fraction f,
/// speedup(n) = 1 / (f + (1 - f) / n).
struct AmdahlSpeedup {
  double serial_fraction = 0.0;

  [[nodiscard]] double at(int nodes) const noexcept {
    return 1.0 / (serial_fraction + (1.0 - serial_fraction) / static_cast<double>(nodes));
  }
};

/// One job of the workload.
struct ClusterJob {
  /// The SWF job number, or 1, 2, ... for a generated workload.
  long long id = 0;
  /// Seconds from the workload's start.
  double submit = 0.0;
  /// Nodes the job asks for: a rigid job runs on exactly these, a malleable one starts on them.
  int nodes = 1;
  /// Seconds it runs on `nodes`.
  double runtime = 0.0;
  /// The user's time limit, the batch scheduler's estimate (at least runtime).
  double requested = 0.0;
  /// Malleable jobs may be resized between min_nodes and max_nodes (nodes lies in between);
  /// rigid ones have min_nodes = max_nodes = nodes.
  bool malleable = false;
  int min_nodes = 1;
  int max_nodes = 1;
  AmdahlSpeedup speedup;
};

/// A workload in submit order (ties in file or generation order), with what was left out.
struct ClusterWorkload {
  std::vector<ClusterJob> jobs;
  /// SWF lines of jobs that did not run (run time or size 0 or -1: cancelled before start).
  int skipped_not_run = 0;
  /// SWF jobs larger than the cluster.
  int skipped_too_large = 0;
};

/// How SWF processors become nodes, and which jobs fit.
struct SwfOptions {
  /// Processors of one node: a job of P processors asks for ceil(P / cores_per_node) nodes.
  int cores_per_node = 1;
  /// The simulated cluster's nodes; larger jobs are skipped and counted.
  int cluster_nodes = 128;
};

/// Parses SWF text (the Parallel Workloads Archive's format: 18 whitespace-separated fields
/// per job line; lines starting with ';' are comments; -1 is a missing value). Uses field 2
/// (submit time), 4 (run time), 5 (allocated processors; field 8, requested processors, when
/// it is -1) and 9 (requested time; the run time when it is -1 or smaller). Submit times are
/// made relative to the first job's. Throws std::invalid_argument naming `name`, the line and
/// the field, e.g. "trace.swf:7: field 4 (run time) is not a number: 'x'".
[[nodiscard]] ClusterWorkload parse_swf(std::string_view text, std::string_view name, const SwfOptions& options);

/// Reads the file and parses it as parse_swf; a file that cannot be read throws
/// std::invalid_argument("PATH: cannot be read").
[[nodiscard]] ClusterWorkload read_swf_file(const std::string& path, const SwfOptions& options);

/// A synthetic workload's parameters (the defaults are the benchmark's).
struct SyntheticOptions {
  int jobs = 500;
  std::uint64_t seed = 1;
  int cluster_nodes = 128;
  /// Offered load: the jobs' node-seconds over the cluster's during the submissions.
  double load = 0.9;
  /// Sizes are powers of two from 1 to cluster_nodes * max_size_fraction (at least 1), each
  /// power equally likely.
  double max_size_fraction = 0.25;
  /// Run times are log-uniform in [min_runtime, max_runtime] seconds.
  double min_runtime = 60.0;
  double max_runtime = 14400.0;
  /// The time limit is the run time times a factor uniform in [1, max_overestimate].
  double max_overestimate = 3.0;
};

/// Generates the workload: sizes, run times and limits as above, arrivals a Poisson process
/// whose rate gives `load`. Every job rigid (make_malleable chooses). Throws
/// std::invalid_argument for options out of range, naming the option.
[[nodiscard]] ClusterWorkload generate_workload(const SyntheticOptions& options);

/// Which jobs are malleable and how they scale.
struct MalleableOptions {
  /// Share of the jobs made malleable, each job drawn on its own.
  double fraction = 1.0 / 3.0;
  std::uint64_t seed = 1;
  /// A malleable job of n nodes may run on max(1, n / range_factor) to
  /// min(cluster_nodes, n * range_factor) nodes.
  int range_factor = 2;
  /// Amdahl serial fraction, uniform in [serial_min, serial_max].
  double serial_min = 0.01;
  double serial_max = 0.1;
  int cluster_nodes = 128;
};

/// Makes a share of the workload's jobs malleable (a job keeps its choice whatever the
/// others are: the draw is a hash of the seed and the job's position). Throws
/// std::invalid_argument for options out of range, naming the option.
void make_malleable(ClusterWorkload& workload, const MalleableOptions& options);

}  // namespace bellows::sim
