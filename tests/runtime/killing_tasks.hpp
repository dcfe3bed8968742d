#pragma once
// Any task class whose first task run once armed kills the process (the Cholesky job of
// teams_after_resize_test.cpp; loss_test_gemm.hpp's KillingGemm does the same for GEMM).

#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "bellows/runtime/task.hpp"

namespace bellows::test {

/// What a test adds to KillingTasks, each called on the worker thread that runs the task:
/// `on_run` as any task starts (before the kill), `may_kill` once armed, whether this task
/// kills (false: it runs, and the next one asks again; so a rank dies only once another got
/// somewhere, without holding up the tasks that wait for it). Empty: nothing, and every task
/// kills once armed.
struct KillingHooks {
  std::function<void()> on_run;
  std::function<bool()> may_kill;
};

/// `tasks` as they are, except that once `armed` the first of its tasks this rank runs waits
/// `pause_us` and SIGKILLs the process, and that every task first waits `task_us` (0: none),
/// as a slower kernel would, so that ready tasks queue up for thieves.
class KillingTasks final : public runtime::TaskClass {
 public:
  KillingTasks(std::unique_ptr<runtime::TaskClass> tasks, const std::atomic<bool>& armed, int pause_us,
               int task_us = 0, KillingHooks hooks = {})
      : TaskClass(tasks->id()),
        tasks_(std::move(tasks)),
        armed_(armed),
        pause_us_(pause_us),
        task_us_(task_us),
        hooks_(std::move(hooks)) {}

  [[nodiscard]] std::string_view name() const override { return tasks_->name(); }
  void for_each_task(const std::function<void(const runtime::TaskKey&)>& fn) const override {
    tasks_->for_each_task(fn);
  }
  [[nodiscard]] int owner(const runtime::TaskKey& key) const override { return tasks_->owner(key); }
  void inputs(const runtime::TaskKey& key, std::vector<runtime::InputSource>& out) const override {
    tasks_->inputs(key, out);
  }
  void successors(const runtime::TaskKey& key, int slot, std::vector<runtime::Successor>& out) const override {
    tasks_->successors(key, slot, out);
  }
  [[nodiscard]] double flops(const runtime::TaskKey& key) const override { return tasks_->flops(key); }
  [[nodiscard]] std::int64_t priority(const runtime::TaskKey& key) const override { return tasks_->priority(key); }
  void execute_cpu(const runtime::TaskKey& key, std::span<runtime::Tile* const> tiles) const override {
    if (hooks_.on_run) hooks_.on_run();
    if (armed_.load() && (!hooks_.may_kill || hooks_.may_kill())) {
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us_));
      ::raise(SIGKILL);  // in the iteration's tasks
    }
    if (task_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(task_us_));
    tasks_->execute_cpu(key, tiles);
  }

 private:
  std::unique_ptr<runtime::TaskClass> tasks_;
  const std::atomic<bool>& armed_;
  int pause_us_;
  int task_us_;
  KillingHooks hooks_;
};

/// Each of `classes` wrapped in KillingTasks, in order.
inline std::vector<std::unique_ptr<runtime::TaskClass>> killing(std::vector<std::unique_ptr<runtime::TaskClass>> classes,
                                                                const std::atomic<bool>& armed, int pause_us,
                                                                int task_us = 0, const KillingHooks& hooks = {}) {
  std::vector<std::unique_ptr<runtime::TaskClass>> out;
  for (auto& tasks : classes) {
    out.push_back(std::make_unique<KillingTasks>(std::move(tasks), armed, pause_us, task_us, hooks));
  }
  return out;
}

}  // namespace bellows::test
