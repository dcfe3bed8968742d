// The CPU device: worker threads that run task bodies on the host.

#include <thread>
#include <utility>

#include "device.hpp"

namespace bellows::runtime {
namespace {

class CpuDevice final : public Device {
 public:
  CpuDevice(DeviceOwner& owner, int workers, std::size_t index, std::shared_ptr<EmulatedLink> link)
      : Device(owner, index), workers_(workers < 1 ? 1 : workers), link_(std::move(link)) {}
  ~CpuDevice() override { stop(); }

  void start() override {
    reset_stop();
    for (int w = 0; w < workers_; ++w) threads_.emplace_back([this] { work(); });
  }

  void stop() override {
    request_stop();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  bool run_on_caller(std::unique_ptr<ReadyTask>& task) override {
    UnitStats unit;
    std::vector<Tile*> views;
    run(std::move(task), unit, views);
    unit.totals.tasks_on_comm_thread += 1;  // the engine's communication thread is the caller
    merge_stats(unit);
    return true;
  }

 private:
  void work() {
    UnitStats unit;
    std::vector<Tile*> views;
    owner_.unit_awake(true);
    while (auto task = pop_or_wait(unit, true)) run(std::move(task), unit, views);
    owner_.unit_awake(false);
    merge_stats(unit);
  }

  void run(std::unique_ptr<ReadyTask> task, UnitStats& unit, std::vector<Tile*>& views) {
    const auto begin = Clock::now();
    if (link_) unit.totals.link_bytes += bring_back(*task, begin);
    const auto computing = Clock::now();
    unit.totals.copy_on_write_bytes += task->make_writable_slots_exclusive();
    views.clear();
    for (auto& t : task->tiles) views.push_back(t.get());
    task->task_class->execute_cpu(task->key, views);
    const auto end = Clock::now();
    if (link_) {
      for (std::size_t i = 0; i < task->tiles.size(); ++i) {
        if (!task->tiles[i]) continue;
        if (task->writable >> i & 1U) {
          task->tiles[i]->set_residency(Tile::kOnHost);
        } else {
          task->tiles[i]->add_residency(Tile::kOnHost);
        }
      }
    }
    finish(std::move(task), unit, seconds_between(begin, end), seconds_between(computing, end));
  }

  // Waits until the inputs whose only valid copy is in device memory are back on the host.
  // Returns the bytes moved.
  std::uint64_t bring_back(const ReadyTask& task, Clock::time_point now) {
    std::uint64_t bytes = 0;
    for (const auto& t : task.tiles) {
      if (t && t->elements() != 0 && !(t->residency() & Tile::kOnHost)) bytes += t->bytes();
    }
    if (bytes != 0) std::this_thread::sleep_until(link_->reserve(now, bytes));
    return bytes;
  }

  int workers_;
  std::shared_ptr<EmulatedLink> link_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(DeviceOwner& owner, int workers, std::size_t index,
                                        std::shared_ptr<EmulatedLink> link) {
  return std::make_unique<CpuDevice>(owner, workers, index, std::move(link));
}

}  // namespace bellows::runtime
