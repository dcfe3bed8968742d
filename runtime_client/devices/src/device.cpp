#include "device.hpp"

#include <algorithm>

#include <string>

namespace bellows::runtime {

std::uint64_t ReadyTask::make_writable_slots_exclusive() {
  std::uint64_t copied = 0;
  for (std::size_t i = 0; i < tiles.size(); ++i) {
    if ((writable >> i & 1U) && tiles[i] && tiles[i].use_count() > 1) {
      tiles[i] = tiles[i]->clone();
      copied += tiles[i]->bytes();
    }
  }
  return copied;
}

Clock::time_point EmulatedLink::reserve(Clock::time_point earliest, std::uint64_t bytes) {
  if (bytes == 0 || (seconds_per_byte_ == 0.0 && latency_seconds_ == 0.0)) return earliest;
  const double seconds = latency_seconds_ + static_cast<double>(bytes) * seconds_per_byte_;
  std::lock_guard lock(mutex_);
  const auto begin = std::max(earliest, free_at_);
  free_at_ = begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  return free_at_;
}

void Device::push(std::unique_ptr<ReadyTask> task) {
  {
    std::lock_guard lock(mutex_);
    const Order order{task->priority, task->sequence};
    queue_.emplace(order, std::move(task));
  }
  ready_.notify_one();
}

std::unique_ptr<ReadyTask> Device::take_front_locked() {
  auto node = queue_.extract(queue_.begin());
  return std::move(node.mapped());
}

std::vector<std::unique_ptr<ReadyTask>> Device::steal_chosen(
    const std::function<std::vector<std::size_t>(const std::vector<const ReadyTask*>& queue)>&
        choose,
    std::size_t& left) {
  std::vector<std::unique_ptr<ReadyTask>> out;
  std::lock_guard lock(mutex_);
  std::vector<decltype(queue_)::iterator> positions;
  std::vector<const ReadyTask*> view;
  positions.reserve(queue_.size());
  view.reserve(queue_.size());
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    positions.push_back(it);
    view.push_back(it->second.get());
  }
  for (const std::size_t p : choose(view)) {
    if (p >= positions.size() || positions[p] == queue_.end()) continue;  // out of range, or twice
    if (positions[p]->second->migrated) continue;
    out.push_back(std::move(positions[p]->second));
    queue_.erase(positions[p]);
    positions[p] = queue_.end();
  }
  left = queue_.size();
  return out;
}

std::size_t Device::ready_count() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

std::size_t Device::discard_queued() {
  std::lock_guard lock(mutex_);
  const std::size_t dropped = queue_.size();
  queue_.clear();
  return dropped;
}

std::unique_ptr<ReadyTask> Device::pop_or_wait(UnitStats& unit_stats, bool takes_arrivals) {
  if (takes_arrivals) owner_.take_arrivals();
  std::unique_lock lock(mutex_);
  if (queue_.empty() && !stopping_) {
    const auto begin = Clock::now();
    bool gave_up = true;
    if (takes_arrivals) {
      // What it takes makes tasks ready through push(), which locks the queue.
      lock.unlock();
      gave_up = owner_.take_arrivals_while_idle([this] {
        std::lock_guard queue_lock(mutex_);
        return !queue_.empty() || stopping_;
      });
      lock.lock();
    }
    if (queue_.empty() && !stopping_) {
      sleeping_units_.fetch_add(1, std::memory_order_acq_rel);
      ready_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      sleeping_units_.fetch_sub(1, std::memory_order_acq_rel);
    }
    if (takes_arrivals && gave_up) owner_.unit_awake(true);
    unit_stats.totals.idle_seconds += seconds_between(begin, Clock::now());
  }
  if (queue_.empty()) return nullptr;
  auto task = take_front_locked();
  lock.unlock();
  owner_.ready_task_taken();
  return task;
}

std::unique_ptr<ReadyTask> Device::try_pop() {
  std::unique_lock lock(mutex_);
  if (queue_.empty()) return nullptr;
  auto task = take_front_locked();
  lock.unlock();
  owner_.ready_task_taken();
  return task;
}

bool Device::stop_requested() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

void Device::request_stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
}

void Device::reset_stop() {
  std::lock_guard lock(mutex_);
  stopping_ = false;
}

void Device::merge_stats(const UnitStats& unit_stats) {
  std::lock_guard lock(stats_mutex_);
  stats_.add(unit_stats.totals);
  for (std::size_t id = 0; id < unit_stats.tasks_by_class_id.size(); ++id) {
    if (unit_stats.tasks_by_class_id[id] != 0) {
      stats_.tasks_by_class[owner_.class_name(static_cast<TaskClassId>(id))] +=
          unit_stats.tasks_by_class_id[id];
    }
  }
}

RankStats Device::take_stats() {
  std::lock_guard lock(stats_mutex_);
  RankStats out = stats_;
  stats_ = RankStats{};
  return out;
}

void Device::finish(std::unique_ptr<ReadyTask> task, UnitStats& unit_stats, double busy_seconds,
                    double compute_seconds) {
  owner_.task_measured(task->key.task_class, task->flops, busy_seconds);
  owner_.device_task_measured(index_, task->key, task->flops,
                               compute_seconds < 0.0 ? busy_seconds : compute_seconds);
  unit_stats.totals.busy_seconds += busy_seconds;
  unit_stats.totals.tasks_executed += 1;
  if (index_ < unit_stats.totals.tasks_by_device.size()) unit_stats.totals.tasks_by_device[index_] += 1;
  unit_stats.totals.flops += task->flops;
  const auto id = task->key.task_class;
  if (unit_stats.tasks_by_class_id.size() <= id) unit_stats.tasks_by_class_id.resize(id + 1U);
  unit_stats.tasks_by_class_id[id] += 1;
  owner_.complete(std::move(task));
}

}  // namespace bellows::runtime
