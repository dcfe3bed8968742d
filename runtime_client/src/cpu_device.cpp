// The CPU device: worker threads that run task bodies on the host.

#include <thread>

#include "device.hpp"

namespace bellows::runtime {
namespace {

class CpuDevice final : public Device {
 public:
  CpuDevice(Engine& engine, int workers) : Device(engine), workers_(workers < 1 ? 1 : workers) {}
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

 private:
  void work() {
    UnitStats unit;
    std::vector<Tile*> views;
    while (auto task = pop_or_wait(unit)) {
      const auto begin = Clock::now();
      task->make_writable_slots_exclusive();
      views.clear();
      for (auto& t : task->tiles) views.push_back(t.get());
      task->task_class->execute_cpu(task->key, views);
      finish(std::move(task), unit, seconds_between(begin, Clock::now()));
    }
    merge_stats(unit);
  }

  int workers_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(Engine& engine, int workers) {
  return std::make_unique<CpuDevice>(engine, workers);
}

}  // namespace bellows::runtime
