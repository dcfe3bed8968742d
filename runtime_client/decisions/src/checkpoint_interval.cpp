#include "bellows/runtime/checkpoint_interval.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace bellows::runtime {
namespace {

std::string shown(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

// Iteration counts beyond this are as good as never; it keeps the conversion to long exact.
constexpr double kMostIterations = 1e15;

}  // namespace

CheckpointInterval checkpoint_interval(double checkpoint_seconds,
                                       double node_mean_time_between_failures_seconds, int nodes,
                                       double iteration_seconds) {
  if (!std::isfinite(checkpoint_seconds) || checkpoint_seconds < 0) {
    throw std::invalid_argument(
        "checkpoint_interval: the checkpoint cost must be a finite number of seconds, at "
        "least 0, got " + shown(checkpoint_seconds));
  }
  if (!std::isfinite(node_mean_time_between_failures_seconds) ||
      node_mean_time_between_failures_seconds <= 0) {
    throw std::invalid_argument(
        "checkpoint_interval: a node's mean time between failures must be a finite number of "
        "seconds above 0, got " + shown(node_mean_time_between_failures_seconds));
  }
  if (nodes < 1) {
    throw std::invalid_argument("checkpoint_interval: the job must have at least 1 node, got " +
                                std::to_string(nodes));
  }
  if (!std::isfinite(iteration_seconds) || iteration_seconds <= 0) {
    throw std::invalid_argument(
        "checkpoint_interval: the iteration time must be a finite number of seconds above 0, "
        "got " + shown(iteration_seconds));
  }
  CheckpointInterval out;
  const double c = checkpoint_seconds;
  const double m = node_mean_time_between_failures_seconds / nodes;
  out.job_mean_time_between_failures = m;
  if (c >= 2 * m) {
    out.seconds = m;
  } else {
    const double ratio = c / (2 * m);
    out.seconds = std::sqrt(2 * c * m) * (1 + std::sqrt(ratio) / 3 + ratio / 9) - c;
  }
  const double in_iterations = std::round(out.seconds / iteration_seconds);
  out.iterations = in_iterations < 1 ? 1 : static_cast<long>(std::fmin(in_iterations, kMostIterations));
  return out;
}

bool checkpoint_due(long iterations_since_checkpoint, long interval_iterations,
                    bool resized_since_checkpoint, bool has_checkpoint) noexcept {
  return !has_checkpoint || resized_since_checkpoint ||
         iterations_since_checkpoint >= interval_iterations;
}

}  // namespace bellows::runtime
