#pragma once
// What resize_controller.cpp and failure_handling.cpp share of ResizeController's insides:
// a failure as the controller keeps it (what it shows, FailureView, and its times), and
// guarded().

#include "bellows/controller/resize_controller.hpp"

#include <memory>
#include <utility>

namespace bellows::controller {

struct ResizeController::Failure {
  FailureView view;
  JobReport found_by;          ///< the rank_died or node_lost report that found it
  Clock::time_point detected;
  Clock::time_point entered;   ///< when it entered its state
  Clock::time_point deadline;  ///< when its recovery is given up
};

// Wraps a callback handed to the resource manager or the job so that it does nothing once
// the controller is gone.
template <typename Callback>
auto ResizeController::guarded(Callback callback) {
  return [alive = std::weak_ptr<int>(alive_), callback = std::move(callback)](auto&&... args) {
    if (alive.expired()) return;
    callback(std::forward<decltype(args)>(args)...);
  };
}

}  // namespace bellows::controller
