#pragma once
// How much an expand is predicted to speed a job up, from its task graph, before it is made.
//
// The job's first rank reports its iteration's task graph as the cost model weighs it
// (protocol::Metrics: graph_work_seconds W, graph_critical_path_seconds C, lanes_per_rank L;
// runtime::GraphProfile). On p nodes (one rank each) no schedule runs an iteration faster than
//
//   bound(p) = max(W / (p L), C)
//
// What the measured iteration time T spends beyond bound(p) (tiles moving, waiting on
// messages, a device that does not reach its rate) is taken to stay as it is when nodes are
// added: the prediction is conservative for communication, which a job on more nodes does
// not do less of. Adding k nodes to p:
//
//   T' = bound(p + k) + max(T - bound(p), 0)
//   E  = (T / T' - 1) / (k / p)
//
// the same efficiency the policy measures after an expand (engine.hpp), predicted before it.
// E near 1: the work spreads over the new nodes; near 0: the job is bound by its critical
// path, or by what the graph does not explain, and the nodes would sit idle.
//
// Pure functions, no clock.

#include <cstdint>
#include <optional>
#include <string>

namespace bellows::policy {

/// What a prediction starts from.
struct ScalingInput {
  int nodes = 1;                       ///< p
  int added = 1;                       ///< k
  double iteration_seconds = 0.0;      ///< T, measured
  double work_seconds = 0.0;           ///< W
  double critical_path_seconds = 0.0;  ///< C
  std::uint64_t lanes_per_rank = 1;    ///< L
};

struct ScalingPrediction {
  double bound_now = 0.0;           ///< bound(p)
  double bound_after = 0.0;         ///< bound(p + k)
  double unexplained_seconds = 0.0; ///< max(T - bound(p), 0)
  double seconds_after = 0.0;       ///< T'
  double efficiency = 0.0;          ///< E
};

/// The prediction, or nullopt when the input cannot give one: no graph reported (W = 0 or
/// L = 0), no iteration measured (T = 0), or nodes < 1 or added < 1.
[[nodiscard]] std::optional<ScalingPrediction> predict_expand(const ScalingInput& in);

/// "iteration 0.43 s now, 0.29 s predicted on 6 nodes (work 1.7 s over 4 x 1 lanes, critical
/// path 0.05 s, unexplained 0.01 s)".
[[nodiscard]] std::string describe(const ScalingInput& in, const ScalingPrediction& p);

}  // namespace bellows::policy
