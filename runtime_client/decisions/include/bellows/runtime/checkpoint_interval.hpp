#pragma once
// When to checkpoint: the interval that loses the least time to checkpoints and to work
// redone after failures, from the measured cost of one checkpoint and the mean time between
// failures of the job's nodes.
//
// Young, "A first order approximation to the optimum checkpoint interval", Communications
// of the ACM 17(9), 1974: tau = sqrt(2 C M) for a checkpoint of cost C and a mean time
// between failures M. Daly, "A higher order estimate of the optimum checkpoint interval for
// restart dumps", Future Generation Computer Systems 22(3), 2006, section 4: where C is not
// small against M,
//
//   tau = sqrt(2 C M) * (1 + sqrt(C / (2 M)) / 3 + (C / (2 M)) / 9) - C   for C < 2 M,
//   tau = M                                                               for C >= 2 M,
//
// which is sqrt(2 C M) - C to first order. tau is the compute time between the ends of two
// checkpoints. A job on n nodes, each failing independently with mean time M_node between
// failures, fails with M = M_node / n.
//
// Pure arithmetic: the runtime measures C and the iteration time and calls these.

#include <string>

namespace bellows::runtime {

/// The optimum interval between checkpoints.
struct CheckpointInterval {
  double job_mean_time_between_failures = 0.0;  ///< M = node M / nodes, seconds
  double seconds = 0.0;                         ///< Daly's tau, seconds of computation
  /// tau in iterations of the measured length, rounded to the nearest, at least 1: a
  /// checkpoint every `iterations` iteration boundaries.
  long iterations = 1;
};

/// The interval for a checkpoint that costs `checkpoint_seconds` (>= 0, as measured: the
/// time the checkpoint added to its iteration), nodes failing with mean time between
/// failures `node_mean_time_between_failures_seconds` (> 0) each, a job on `nodes` (>= 1)
/// nodes and iterations of `iteration_seconds` (> 0). Throws std::invalid_argument naming
/// the value that is not finite or out of range, e.g. "checkpoint_interval: the iteration
/// time must be a finite number of seconds above 0, got 0".
[[nodiscard]] CheckpointInterval checkpoint_interval(double checkpoint_seconds,
                                                     double node_mean_time_between_failures_seconds,
                                                     int nodes, double iteration_seconds);

/// Whether to checkpoint at this iteration boundary: `iterations_since_checkpoint` have
/// completed since the last complete checkpoint and that reaches `interval_iterations`, or
/// the job was resized since (its buddies and tiles changed, so the copies held no longer
/// match the layout it runs on), or it has no complete checkpoint yet.
[[nodiscard]] bool checkpoint_due(long iterations_since_checkpoint, long interval_iterations,
                                  bool resized_since_checkpoint, bool has_checkpoint) noexcept;

}  // namespace bellows::runtime
