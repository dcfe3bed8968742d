#include <bellows/runtime/controller_loss.hpp>

#include <algorithm>

namespace bellows::runtime {

ControllerLossAction on_controller_loss(const ControllerLossFacts& facts,
                                        const ControllerLossLimits& limits) noexcept {
  if (facts.lost_seconds < limits.grace_seconds) return ControllerLossAction::wait;
  if (facts.ranks_running == 0) return ControllerLossAction::stop;
  if (limits.unreachable_seconds > 0.0 && facts.unreachable_seconds >= limits.unreachable_seconds &&
      !facts.kept_for_takeover)
    return ControllerLossAction::end_ranks;
  return ControllerLossAction::keep_ranks;
}

ControllerLossLimits controller_loss_limits(double heartbeat_timeout_seconds) noexcept {
  constexpr double kDefaultTimeout = 5.0;
  constexpr double kShortestProbe = 0.25;
  constexpr double kLongestProbe = 1.0;
  // Negated test: a NaN timeout takes the default too.
  const double timeout = !(heartbeat_timeout_seconds > 0.0) ? kDefaultTimeout : heartbeat_timeout_seconds;
  const double heartbeat_interval = timeout / 5.0;  // transport::heartbeat_interval_for
  ControllerLossLimits limits;
  limits.grace_seconds = 2.0 * heartbeat_interval;
  limits.unreachable_seconds = timeout;
  limits.probe_interval_seconds = std::clamp(heartbeat_interval, kShortestProbe, kLongestProbe);
  return limits;
}

const char* to_string(ControllerLossAction action) noexcept {
  switch (action) {
    case ControllerLossAction::wait: return "wait";
    case ControllerLossAction::keep_ranks: return "keep_ranks";
    case ControllerLossAction::end_ranks: return "end_ranks";
    case ControllerLossAction::stop: return "stop";
  }
  return "unknown";
}

}  // namespace bellows::runtime
