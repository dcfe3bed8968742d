#pragma once
// Who runs a task that a message made ready: the communication thread that handled the message,
// or a worker it wakes.
//
// On the path of a cross-rank dependency, waking a sleeping worker costs a thread wake-up, several
// microseconds on a loaded host, which the communication thread, awake already, does not pay. So
// when every worker of the rank sleeps (none would take the task sooner) and the tasks lately took
// little time (the thread is away from its messages no longer than that), the thread runs the task
// itself: at most one per pass of its loop, so that messages are answered between tasks. A task of
// unknown length (none has run yet) goes to a worker.
//
// Pure: the engine counts its sleeping workers and measures its tasks; this decides.

#include <optional>

#include "bellows/runtime/options.hpp"

namespace bellows::runtime {

/// What the communication thread knows when a message it handled makes a task ready.
struct TaskOnArrival {
  DeviceKind device = DeviceKind::cpu;  ///< the rank's device (only CPU workers qualify)
  int workers = 1;                      ///< the rank's CPU workers
  int sleeping_workers = 0;             ///< of them, those waiting for a ready task now
  std::optional<double> recent_task_seconds;  ///< what a task has taken lately (none yet: empty)
  double limit_seconds = 0.0;           ///< RuntimeOptions::comm_thread_task_us (0: never)
  bool holding = false;                 ///< the thread already took a task in this pass
};

/// True when the communication thread runs the task itself instead of waking a worker.
[[nodiscard]] bool comm_thread_runs_it(const TaskOnArrival& facts) noexcept;

}  // namespace bellows::runtime
