// The emulated device: charges each task flops / rate seconds of modeled execution
// time without computing, so that GPU-like nodes can be studied on a small machine
// while queues, messages and data transfers stay real. With `compute` it also runs the
// task's CPU body within that time (a node of a stated speed with exact results).

#include <thread>

#include "device.hpp"

namespace bellows::runtime {
namespace {

class EmulatedDevice final : public Device {
 public:
  EmulatedDevice(Engine& engine, double gflops, int lanes, bool compute)
      : Device(engine), flops_per_second_(gflops * 1e9), lanes_(lanes < 1 ? 1 : lanes), compute_(compute) {}
  ~EmulatedDevice() override { stop(); }

  void start() override {
    reset_stop();
    for (int l = 0; l < lanes_; ++l) threads_.emplace_back([this] { run_lane(); });
  }

  void stop() override {
    request_stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  // Each lane keeps a modeled clock. While the lane is continuously busy, a task starts
  // at the modeled end of the previous one, not at the moment the thread woke up: sleep
  // overshoot and completion overhead are absorbed instead of accumulating.
  void run_lane() {
    UnitStats unit;
    Clock::time_point lane_clock{};
    std::vector<Tile*> views;
    for (;;) {
      const double idle_before = unit.totals.idle_seconds;
      auto task = pop_or_wait(unit);
      if (!task) break;
      const auto now = Clock::now();
      const bool waited = unit.totals.idle_seconds != idle_before;
      const auto start = (waited || lane_clock < now - kMaxCatchUp) ? now : lane_clock;
      const double modeled = task->flops / flops_per_second_;
      lane_clock = start + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(modeled));
      if (compute_) {
        task->make_writable_slots_exclusive();
        views.clear();
        for (auto& t : task->tiles) views.push_back(t.get());
        task->task_class->execute_cpu(task->key, views);
      }
      std::this_thread::sleep_until(lane_clock);
      unit.totals.modeled_seconds += modeled;
      finish(std::move(task), unit, seconds_between(start, Clock::now()));
    }
    merge_stats(unit);
  }

  // A lane that fell further behind than this (the host was busy elsewhere) restarts
  // its clock instead of running tasks back to back to catch up.
  static constexpr auto kMaxCatchUp = std::chrono::milliseconds(5);

  double flops_per_second_;
  int lanes_;
  bool compute_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Device> make_emulated_device(Engine& engine, double gflops, int lanes, bool compute) {
  return std::make_unique<EmulatedDevice>(engine, gflops, lanes, compute);
}

}  // namespace bellows::runtime
