// How a device whose stages overlap across tasks prices each task, and the compute seconds
// the emulated device reports with and without computing its tasks' bodies (device.hpp).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

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

namespace {

/// A device's owner that records what the device measured of each task.
class RecordingOwner final : public br::DeviceOwner {
 public:
  void ready_task_taken() override {}
  [[nodiscard]] const std::string& class_name(br::TaskClassId /*id*/) const override { return name_; }
  void task_measured(br::TaskClassId /*task_class*/, double /*flops*/, double seconds) override {
    std::lock_guard lock(mutex_);
    busy_seconds_.push_back(seconds);
  }
  void device_task_measured(std::size_t /*index*/, const br::TaskKey& /*key*/, double /*flops*/,
                            double compute_seconds) override {
    std::lock_guard lock(mutex_);
    compute_seconds_.push_back(compute_seconds);
  }
  void complete(std::unique_ptr<br::ReadyTask> /*task*/) override {
    {
      std::lock_guard lock(mutex_);
      ++completed_;
    }
    completed_changed_.notify_all();
  }
  void unit_awake(bool /*awake*/) override {}
  void take_arrivals() override {}
  bool take_arrivals_while_idle(const std::function<bool()>& /*woken*/) override { return true; }

  /// Waits (up to 60 s) until `count` tasks completed; returns whether they did.
  bool wait_for(int count) {
    std::unique_lock lock(mutex_);
    return completed_changed_.wait_for(lock, 60s, [&] { return completed_ >= count; });
  }
  [[nodiscard]] std::vector<double> compute_seconds() const {
    std::lock_guard lock(mutex_);
    return compute_seconds_;
  }
  [[nodiscard]] std::vector<double> busy_seconds() const {
    std::lock_guard lock(mutex_);
    return busy_seconds_;
  }

 private:
  std::string name_ = "SLEEP";
  mutable std::mutex mutex_;
  std::condition_variable completed_changed_;
  int completed_ = 0;
  std::vector<double> compute_seconds_;
  std::vector<double> busy_seconds_;
};

/// Tasks without slots whose CPU body sleeps for `body` (a body the host computes slower or
/// faster than the device's modeled time), counting the bodies run.
class SleepingTasks final : public br::TaskClass {
 public:
  explicit SleepingTasks(std::chrono::nanoseconds body) : TaskClass(0), body_(body) {}
  [[nodiscard]] std::string_view name() const override { return "SLEEP"; }
  void for_each_task(const std::function<void(const br::TaskKey&)>& /*fn*/) const override {}
  [[nodiscard]] int owner(const br::TaskKey& /*key*/) const override { return 0; }
  void inputs(const br::TaskKey& /*key*/, std::vector<br::InputSource>& /*out*/) const override {}
  void successors(const br::TaskKey& /*key*/, int /*slot*/, std::vector<br::Successor>& /*out*/) const override {}
  void execute_cpu(const br::TaskKey& /*key*/, std::span<br::Tile* const> /*tiles*/) const override {
    std::this_thread::sleep_for(body_);
    bodies_run_.fetch_add(1);
  }
  [[nodiscard]] int bodies_run() const { return bodies_run_.load(); }

 private:
  std::chrono::nanoseconds body_;
  mutable std::atomic<int> bodies_run_{0};
};

struct DeviceRun {
  std::vector<double> compute_seconds;  ///< per task, as the device reported them
  std::vector<double> busy_seconds;
  int bodies_run = 0;
};

/// Runs `tasks` tasks of `flops` each on an emulated device of `gflops` (one lane, a free
/// link, `slowdown` times its modeled time) whose tasks' bodies sleep for `body`.
DeviceRun run_emulated(double gflops, bool compute, double flops, std::chrono::nanoseconds body, int tasks,
                       double slowdown = 1.0) {
  RecordingOwner owner;
  const SleepingTasks sleeping(body);
  auto device = br::make_emulated_device(owner, gflops, 1, compute, std::make_shared<br::EmulatedLink>(0.0, 0.0));
  device->set_slowdown(slowdown);
  device->start();
  for (int i = 0; i < tasks; ++i) {
    auto task = std::make_unique<br::ReadyTask>();
    task->key = sleeping.key(i);
    task->task_class = &sleeping;
    task->flops = flops;
    task->sequence = static_cast<std::uint64_t>(i);
    device->push(std::move(task));
  }
  const bool completed = owner.wait_for(tasks);
  device->stop();
  EXPECT_TRUE(completed) << tasks << " tasks did not complete within 60 s";
  return DeviceRun{owner.compute_seconds(), owner.busy_seconds(), sleeping.bodies_run()};
}

}  // namespace

// At 1000 GFLOP/s a task of 1 MFLOP is modeled as 1 us; its body, computed on the host, takes
// 20 ms. The device reports the body's seconds, four orders of magnitude above the modeled
// ones, and a lane slowed four times reports the same: a modeled slowdown the body hides does
// not read as a slower device.
TEST(EmulatedDevice, ABodyLongerThanItsModeledTimeReportsTheBodysSeconds) {
  constexpr double kGflops = 1000.0, kFlops = 1e6;
  constexpr auto kBody = 20ms;
  constexpr double kModeled = kFlops / (kGflops * 1e9);
  for (const double slowdown : {1.0, 4.0}) {
    const auto run = run_emulated(kGflops, true, kFlops, kBody, 3, slowdown);
    EXPECT_EQ(run.bodies_run, 3);
    ASSERT_EQ(run.compute_seconds.size(), 3U);
    ASSERT_EQ(run.busy_seconds.size(), 3U);
    for (std::size_t i = 0; i < run.compute_seconds.size(); ++i) {
      EXPECT_GE(run.compute_seconds[i], 0.020) << "task " << i << ", slowdown " << slowdown
                                               << ": the body slept 20 ms";
      EXPECT_GT(run.compute_seconds[i], 1000.0 * kModeled * slowdown) << "task " << i;
      EXPECT_GE(run.busy_seconds[i], run.compute_seconds[i]) << "task " << i << ": busy includes computing";
    }
  }
}

// At 1 GFLOP/s a task of 5e7 flops is modeled as 50 ms; its body takes no time to speak of.
// The device reports exactly the modeled seconds, and waits them out.
TEST(EmulatedDevice, ABodyWithinItsModeledTimeReportsTheModeledSeconds) {
  constexpr double kGflops = 1.0, kFlops = 5e7;
  const double modeled = kFlops / (kGflops * 1e9);
  const auto run = run_emulated(kGflops, true, kFlops, 0ns, 2);
  EXPECT_EQ(run.bodies_run, 2);
  ASSERT_EQ(run.compute_seconds.size(), 2U);
  for (std::size_t i = 0; i < run.compute_seconds.size(); ++i) {
    EXPECT_DOUBLE_EQ(run.compute_seconds[i], modeled) << "task " << i;
    EXPECT_GE(run.busy_seconds[i], 0.9 * modeled) << "task " << i << ": the lane waited out its modeled time";
  }
}

// Without computing, the device runs no body and reports the modeled seconds, slowdown
// included, whatever the body would have taken.
TEST(EmulatedDevice, WithoutComputingItReportsTheModeledSecondsAndRunsNoBody) {
  constexpr double kGflops = 1000.0, kFlops = 1e6;
  const auto run = run_emulated(kGflops, false, kFlops, 20ms, 3, 4.0);
  EXPECT_EQ(run.bodies_run, 0);
  ASSERT_EQ(run.compute_seconds.size(), 3U);
  for (std::size_t i = 0; i < run.compute_seconds.size(); ++i) {
    EXPECT_DOUBLE_EQ(run.compute_seconds[i], kFlops / (kGflops * 1e9) * 4.0) << "task " << i;
  }
}
