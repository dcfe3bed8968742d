#include "bellows/policy/scaling.hpp"

#include <algorithm>

#include "text.hpp"

namespace bellows::policy {

std::optional<ScalingPrediction> predict_expand(const ScalingInput& in) {
  if (in.nodes < 1 || in.added < 1 || in.lanes_per_rank == 0 || !(in.work_seconds > 0.0) ||
      !(in.iteration_seconds > 0.0)) {
    return std::nullopt;
  }
  const auto lanes = static_cast<double>(in.lanes_per_rank);
  const auto bound = [&](int p) {
    return std::max(in.work_seconds / (p * lanes), std::max(in.critical_path_seconds, 0.0));
  };
  ScalingPrediction out;
  out.bound_now = bound(in.nodes);
  out.bound_after = bound(in.nodes + in.added);
  out.unexplained_seconds = std::max(in.iteration_seconds - out.bound_now, 0.0);
  out.seconds_after = out.bound_after + out.unexplained_seconds;
  const double speedup = in.iteration_seconds / out.seconds_after;
  out.efficiency = (speedup - 1.0) / (static_cast<double>(in.added) / in.nodes);
  return out;
}

std::string describe(const ScalingInput& in, const ScalingPrediction& p) {
  using detail::format_number;
  return "iteration " + format_number(in.iteration_seconds) + " s now, " +
         format_number(p.seconds_after) + " s predicted on " + std::to_string(in.nodes + in.added) +
         " nodes (work " + format_number(in.work_seconds) + " s over " + std::to_string(in.nodes) +
         " x " + std::to_string(in.lanes_per_rank) + " lanes, critical path " +
         format_number(in.critical_path_seconds) + " s, unexplained " +
         format_number(p.unexplained_seconds) + " s)";
}

}  // namespace bellows::policy
