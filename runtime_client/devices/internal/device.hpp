#pragma once
// Execution devices of a rank and their ready-task queues.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bellows/runtime/options.hpp"
#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/task.hpp"

namespace bellows::runtime {

struct ReadyTask;

/// What a device tells the engine that feeds it, and asks of it. The engine implements it;
/// a unit test may implement it alone.
///
/// Thread safety: every method is called from the devices' execution units, concurrently.
class DeviceOwner {
 public:
  /// A ready task left a device's queue for an execution unit.
  virtual void ready_task_taken() = 0;
  /// The name of a task class (for the statistics).
  [[nodiscard]] virtual const std::string& class_name(TaskClassId id) const = 0;
  /// A task of `task_class` with `flops` kept its device busy for `seconds`.
  virtual void task_measured(TaskClassId task_class, double flops, double seconds) = 0;
  /// The same task's compute time on device `index` (its data movement left out).
  virtual void device_task_measured(std::size_t index, const TaskKey& key, double flops,
                                    double compute_seconds) = 0;
  /// A task has run: its outputs are ready for their consumers.
  virtual void complete(std::unique_ptr<ReadyTask> task) = 0;

  // What arrives from other ranks, taken by a host execution unit (a CPU worker) itself while it
  // is awake instead of by a thread it would have to wake (Engine: the same-host mailboxes,
  // RuntimeOptions::workers_read_mail). Each is called by the unit's own thread.

  /// The unit is awake (it started, or woke from its sleep) or is about to sleep or end.
  virtual void unit_awake(bool awake) = 0;
  /// Between two tasks of an awake unit: takes what arrived, if anything did.
  virtual void take_arrivals() = 0;
  /// The unit found no ready task: takes arrivals until `woken()` (a ready task, or stop)
  /// or the owner gives up. Returns true when it gave up, having called unit_awake(false)
  /// and taken what arrived until then; false when woken, still awake.
  virtual bool take_arrivals_while_idle(const std::function<bool()>& woken) = 0;

 protected:
  ~DeviceOwner() = default;
};

using Clock = std::chrono::steady_clock;
inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// What a task cost a device that overlaps the stages of successive tasks (the CUDA device:
/// copies in, kernel, copies out, on three streams): from its start to its end, less what
/// came before the previous task's end, when the device was still busy with that one. Over
/// a run of tasks these sum to the time the device was busy; a task's own start-to-end time
/// would also count the tasks ahead of it in the streams.
inline double overlapped_task_seconds(Clock::time_point started, Clock::time_point previous_end,
                                      Clock::time_point end) {
  return seconds_between(std::max(started, previous_end), end);
}

/// A task whose inputs are all present on this rank.
struct ReadyTask {
  TaskKey key{};
  const TaskClass* task_class = nullptr;
  std::vector<TilePtr> tiles;     ///< one per slot; nullptr for control slots
  std::uint32_t writable = 0;     ///< bit i set: slot i is read_write
  std::int64_t priority = 0;
  std::uint64_t sequence = 0;     ///< FIFO among equal priorities
  double flops = 0.0;
  bool migrated = false;          ///< stolen from another rank: never stolen again
  std::uint32_t leaving = 0;      ///< bit i set: after the task, slot i's tile is needed on
                                  ///< the host (another rank or a collection); devices
                                  ///< emulated, hybrid and cuda
  std::uint32_t to_other_ranks = 0;  ///< bit i set: slot i's tile goes to another rank (a task
                                     ///< or a collection there); a subset of `leaving`
  std::size_t device_index = 0;   ///< the engine's device that runs it
  double predicted_seconds = 0.0; ///< what the choice charged to that device's backlog

  /// Gives every writable slot a tile that nobody else references (copy on write); returns
  /// the bytes copied.
  std::uint64_t make_writable_slots_exclusive();
};

/// The host <-> device link of the emulated device: transfers take latency + bytes / rate
/// and use the link one at a time, in the order they reserve it.
///
/// Thread safety: reserve() may be called from any thread.
class EmulatedLink {
 public:
  /// gbps <= 0: a free link (every transfer takes no time).
  EmulatedLink(double gbps, double latency_seconds)
      : seconds_per_byte_(gbps > 0.0 ? 1.0 / (gbps * 1e9) : 0.0),
        latency_seconds_(gbps > 0.0 ? latency_seconds : 0.0) {}
  /// When a transfer of `bytes` that may start at `earliest` ends (`earliest` for 0 bytes).
  Clock::time_point reserve(Clock::time_point earliest, std::uint64_t bytes);
  [[nodiscard]] double seconds_per_byte() const noexcept { return seconds_per_byte_; }
  [[nodiscard]] double latency_seconds() const noexcept { return latency_seconds_; }

 private:
  double seconds_per_byte_;
  double latency_seconds_;
  std::mutex mutex_;
  Clock::time_point free_at_{};
};

/// Counters of one execution unit (a worker thread, an emulated lane, a GPU manager).
struct UnitStats {
  RankStats totals;                               ///< tasks_by_class left empty here
  std::vector<std::uint64_t> tasks_by_class_id;   ///< indexed by TaskClassId
};

/// A device: a ready queue (the "device queue" of John & Milthorpe,
/// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
/// CCGrid 2024, section III-A, the only queue stealing may take from) and the execution
/// units that drain it.
///
/// Thread safety: push/ready_count are safe from any thread; start/stop are called by
/// the engine's iteration driver only.
class Device {
 public:
  explicit Device(DeviceOwner& owner, std::size_t index = 0) : owner_(owner), index_(index) {}
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  /// Starts the execution units for one iteration.
  virtual void start() = 0;
  /// Asks the execution units to stop once the iteration is over, and joins them.
  virtual void stop() = 0;
  /// From the next start() on, every task takes `factor` times its modeled time
  /// (RuntimeOptions::emulated_slowdown). Only the emulated device models time; the others
  /// ignore it. Between iterations only.
  virtual void set_slowdown(double /*factor*/) {}

  void push(std::unique_ptr<ReadyTask> task);
  /// Drops every queued task (an abandoned iteration: a peer was lost); those an execution
  /// unit already holds still finish. Returns how many were dropped.
  std::size_t discard_queued();
  [[nodiscard]] std::size_t ready_count() const;
  /// Takes queued tasks for a thief: those `choose` picks, asked under the queue's lock
  /// (StealPolicy::choose_gifts decides). `choose` sees the queue front to back (the next
  /// task to run first, the back holding the lowest priority) and returns positions in that
  /// list; a task that was itself stolen is never taken. `left` receives the queue length
  /// afterwards. Tasks already handed to an execution unit (staging, running, staging out)
  /// are never taken.
  std::vector<std::unique_ptr<ReadyTask>> steal_chosen(
      const std::function<std::vector<std::size_t>(const std::vector<const ReadyTask*>& queue)>&
          choose,
      std::size_t& left);
  /// Statistics of the units since the last take_stats().
  RankStats take_stats();
  /// Execution units waiting for a ready task now.
  [[nodiscard]] int sleeping_units() const noexcept { return sleeping_units_.load(std::memory_order_acquire); }
  /// Runs `task` on the calling thread as an execution unit would, its completion included,
  /// and returns true; false (task untouched) when this device cannot (only CPU workers can).
  virtual bool run_on_caller(std::unique_ptr<ReadyTask>& /*task*/) { return false; }

 protected:
  /// Blocks until a task is ready (returns it) or stop was requested (returns null).
  /// Time spent blocked is counted as idle. `takes_arrivals`: the caller is a host unit that
  /// takes arrivals between tasks and before it sleeps (DeviceOwner::take_arrivals); it has
  /// called unit_awake(true) when it started and calls unit_awake(false) when it ends.
  std::unique_ptr<ReadyTask> pop_or_wait(UnitStats& unit_stats, bool takes_arrivals = false);
  /// Returns a ready task if one is queued, without blocking.
  std::unique_ptr<ReadyTask> try_pop();
  [[nodiscard]] bool stop_requested() const;
  void request_stop();
  void reset_stop();
  void merge_stats(const UnitStats& unit_stats);
  /// Runs the engine's completion for a task the unit has executed. `compute_seconds`:
  /// the part of `busy_seconds` spent computing (the rest moved data); negative: all of it.
  void finish(std::unique_ptr<ReadyTask> task, UnitStats& unit_stats, double busy_seconds,
              double compute_seconds = -1.0);

  DeviceOwner& owner_;  ///< the engine that feeds this device
  std::size_t index_;  ///< position among the engine's devices

 private:
  // Ordered so that begin() is the next task to run (highest priority, then FIFO) and
  // the back holds what a thief takes first.
  struct Order {
    std::int64_t priority;
    std::uint64_t sequence;
    bool operator<(const Order& o) const noexcept {
      if (priority != o.priority) return priority > o.priority;
      return sequence < o.sequence;
    }
  };
  std::unique_ptr<ReadyTask> take_front_locked();

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::map<Order, std::unique_ptr<ReadyTask>> queue_;
  bool stopping_ = false;
  std::atomic<int> sleeping_units_{0};  ///< changed under mutex_
  std::mutex stats_mutex_;
  RankStats stats_;
};

/// `link`: when not null, the workers bring back over it the inputs whose only valid copy is
/// in device memory (Tile::residency) before running a task (device hybrid).
std::unique_ptr<Device> make_cpu_device(DeviceOwner& owner, int workers, std::size_t index = 0,
                                        std::shared_ptr<EmulatedLink> link = nullptr);
/// `compute`: also run each task's CPU body (RuntimeOptions::emulated_compute); a task's
/// compute seconds (DeviceOwner::device_task_measured) are then the larger of its modeled
/// seconds and its body's wall seconds, else the modeled seconds. `link`
/// carries the inputs not resident in device memory in, and the outputs marked `leaving`
/// out (not null).
std::unique_ptr<Device> make_emulated_device(DeviceOwner& owner, double gflops, int lanes, bool compute,
                                             std::shared_ptr<EmulatedLink> link,
                                             std::size_t index = 0);
/// The GPU of CUDA ordinal `ordinal`, with `options`' cuda_* settings, the rank's GPU `index`
/// (its residency bit: Tile::on_device(index)). Throws std::runtime_error when CUDA is not
/// built in or no GPU is usable.
std::unique_ptr<Device> make_cuda_device(DeviceOwner& owner, int ordinal, const RuntimeOptions& options,
                                         std::size_t index = 0);
/// The CUDA GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 without CUDA.
[[nodiscard]] int visible_cuda_devices();

}  // namespace bellows::runtime
