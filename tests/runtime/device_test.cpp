// How a device whose stages overlap across tasks prices each task (device.hpp).

#include <gtest/gtest.h>

#include <chrono>

#include "device.hpp"

namespace br = bellows::runtime;
using namespace std::chrono_literals;

namespace {

const br::Clock::time_point kOrigin{};

}  // namespace

// Three tasks started together, 1 ms apart at the end (a pipeline: the streams run them in
// turn): each costs its 1 ms, not its 1, 2 and 3 ms from start to end.
TEST(OverlappedTaskSeconds, TasksInFlightTogetherCostTheirShareOfTheBusyTime) {
  const auto start = kOrigin + 10ms;
  br::Clock::time_point previous_end{};
  double sum = 0.0;
  for (int i = 1; i <= 3; ++i) {
    const auto end = start + i * 1ms;
    const double seconds = br::overlapped_task_seconds(start, previous_end, end);
    EXPECT_NEAR(seconds, 1e-3, 1e-12) << "task " << i;
    sum += seconds;
    previous_end = end;
  }
  EXPECT_NEAR(sum, 3e-3, 1e-12) << "the tasks sum to the time the device was busy";
}

// A task that starts after the device went idle costs all of its own time.
TEST(OverlappedTaskSeconds, ATaskAfterIdleTimeCostsItsWholeTime) {
  EXPECT_NEAR(br::overlapped_task_seconds(kOrigin + 5ms, kOrigin + 2ms, kOrigin + 7ms), 2e-3, 1e-12);
  EXPECT_NEAR(br::overlapped_task_seconds(kOrigin + 5ms, br::Clock::time_point{}, kOrigin + 7ms), 2e-3,
              1e-12)
      << "before any task ended";
}
