#include "bellows/runtime/task_on_arrival.hpp"

namespace bellows::runtime {

bool comm_thread_runs_it(const TaskOnArrival& facts) noexcept {
  if (facts.limit_seconds <= 0.0 || facts.holding || facts.device != DeviceKind::cpu) return false;
  if (facts.workers < 1 || facts.sleeping_workers < facts.workers) return false;
  return facts.recent_task_seconds.has_value() && *facts.recent_task_seconds <= facts.limit_seconds;
}

}  // namespace bellows::runtime
