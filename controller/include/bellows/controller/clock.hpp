#pragma once
// The time source of the controller: a monotonic clock for deadlines and durations, and
// wall time for the event log. Every part of the controller core reads time through a
// Clock, so that tests drive it with a fake clock instead of sleeping.

#include <chrono>

namespace bellows::controller {

/// Where the controller reads the time.
///
/// Thread safety: implementations must allow now() and wall_now() from any thread.
class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  /// Monotonic time: deadlines and the durations in the event log.
  [[nodiscard]] virtual time_point now() const = 0;
  /// Calendar time (UTC): the "time" field of the event log.
  [[nodiscard]] virtual std::chrono::system_clock::time_point wall_now() const = 0;
};

/// The real clocks: std::chrono::steady_clock and std::chrono::system_clock.
class SystemClock final : public Clock {
 public:
  [[nodiscard]] time_point now() const override { return std::chrono::steady_clock::now(); }
  [[nodiscard]] std::chrono::system_clock::time_point wall_now() const override {
    return std::chrono::system_clock::now();
  }
};

}  // namespace bellows::controller
