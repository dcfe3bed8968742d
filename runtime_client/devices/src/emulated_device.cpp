// The emulated device: charges each task flops / rate seconds of modeled execution
// time without computing, so that GPU-like nodes can be studied on a small machine
// while queues, messages and data transfers stay real. With `compute` it also runs the
// task's CPU body within that time (a node of a stated speed with exact results).
//
// The compute seconds it reports (Device::finish, to the engine) are the modeled seconds,
// or with `compute` the larger of those and the body's own wall seconds: a body computed on
// the host's CPU may take far longer than a fast device's modeled time (a 256-tile GEMM is
// 34 us at 1000 GFLOP/s, milliseconds on a shared core), and the lane is then occupied until
// the body ends. Every consumer takes that value (the iteration's compute share, the device's
// cost model for the hybrid choice and offloading, the per-task seconds TeamLB weighs): it is
// what the device did. Reporting the modeled seconds alone made a modeled slowdown that the
// body's compute hides read as a slower rank, and TeamLB moved tiles onto ranks that then had
// more bodies to compute (docs/benchmarks.md, "A job that re-plans its teams, timed"). The
// lane's clock follows a body that overran too: the task's copies out start once it ended.
//
// Data movement: the device keeps track of which tiles are in its memory (Tile::residency).
// A task first moves in, over the host <-> device link (EmulatedLink), the inputs that have
// no valid copy there; a tile it writes then exists only in device memory, unless the task's
// successors need it on the host (ReadyTask::leaving: another rank, a collection), in which
// case it goes back over the link at the end of the task. Link time is charged on the lane
// like compute time, in, compute, out, one after the other (no overlap of copies and
// compute within a lane).

#include <algorithm>
#include <thread>
#include <utility>

#include "device.hpp"

namespace bellows::runtime {
namespace {

class EmulatedDevice final : public Device {
 public:
  EmulatedDevice(DeviceOwner& owner, double gflops, int lanes, bool compute,
                 std::shared_ptr<EmulatedLink> link, std::size_t index)
      : Device(owner, index),
        flops_per_second_(gflops * 1e9),
        lanes_(lanes < 1 ? 1 : lanes),
        compute_(compute),
        link_(std::move(link)),
        resident_(Tile::on_device(index)) {}
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

  void set_slowdown(double factor) override { slowdown_ = factor; }

 private:
  // Each lane keeps a modeled clock. While the lane is continuously busy, a task starts
  // at the modeled end of the previous one, not at the moment the thread woke up: sleep
  // overshoot and completion overhead are absorbed instead of accumulating. A computed body
  // that outlasts its modeled time moves that end to its own, so that the next task's busy
  // seconds do not count the overrun again.
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
      const double modeled = task->flops / flops_per_second_ * slowdown_;
      std::uint64_t in_bytes = 0, out_bytes = 0;
      for (std::size_t i = 0; i < task->tiles.size(); ++i) {
        const auto& t = task->tiles[i];
        if (!t || t->elements() == 0) continue;
        if (!(t->residency() & resident_)) in_bytes += t->bytes();
        if (task->leaving >> i & 1U && (task->writable >> i & 1U || !(t->residency() & Tile::kOnHost))) {
          out_bytes += t->bytes();
        }
      }
      const auto computing = link_->reserve(start, in_bytes);
      auto computed = computing + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(modeled));
      double compute_seconds = modeled;
      if (compute_) {
        unit.totals.copy_on_write_bytes += task->make_writable_slots_exclusive();
        views.clear();
        for (auto& t : task->tiles) views.push_back(t.get());
        const auto body_begin = Clock::now();
        task->task_class->execute_cpu(task->key, views);
        const auto body_end = Clock::now();
        compute_seconds = std::max(modeled, seconds_between(body_begin, body_end));
        computed = std::max(computed, body_end);
      }
      lane_clock = link_->reserve(computed, out_bytes);
      for (std::size_t i = 0; i < task->tiles.size(); ++i) {
        const auto& t = task->tiles[i];
        if (!t) continue;
        const bool back = task->leaving >> i & 1U;
        if (task->writable >> i & 1U) {
          t->set_residency(back ? resident_ | Tile::kOnHost : resident_);
        } else {
          t->add_residency(back ? resident_ | Tile::kOnHost : resident_);
        }
      }
      std::this_thread::sleep_until(lane_clock);
      unit.totals.modeled_seconds += modeled;
      unit.totals.tasks_on_device += 1;
      unit.totals.link_bytes += in_bytes + out_bytes;
      finish(std::move(task), unit, seconds_between(start, Clock::now()), compute_seconds);
    }
    merge_stats(unit);
  }

  // A lane that fell further behind than this (the host was busy elsewhere) restarts
  // its clock instead of running tasks back to back to catch up.
  static constexpr auto kMaxCatchUp = std::chrono::milliseconds(5);

  double flops_per_second_;
  double slowdown_ = 1.0;  // set between iterations; the lanes read it
  int lanes_;
  bool compute_;
  std::shared_ptr<EmulatedLink> link_;
  std::uint8_t resident_;  ///< this GPU's residency bit (Tile::on_device of its index)
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Device> make_emulated_device(DeviceOwner& owner, double gflops, int lanes, bool compute,
                                             std::shared_ptr<EmulatedLink> link,
                                             std::size_t index) {
  return std::make_unique<EmulatedDevice>(owner, gflops, lanes, compute, std::move(link), index);
}

}  // namespace bellows::runtime
