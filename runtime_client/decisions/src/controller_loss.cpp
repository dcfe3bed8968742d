#include <bellows/runtime/controller_loss.hpp>

namespace bellows::runtime {

ControllerLossAction on_controller_loss(const ControllerLossFacts& facts,
                                        const ControllerLossLimits& limits) noexcept {
  if (facts.lost_seconds < limits.grace_seconds) return ControllerLossAction::wait;
  if (facts.ranks_running == 0) return ControllerLossAction::stop;
  if (limits.unreachable_seconds > 0.0 && facts.unreachable_seconds >= limits.unreachable_seconds)
    return ControllerLossAction::end_ranks;
  return ControllerLossAction::keep_ranks;
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
