#pragma once
// The engine behind bellows::runtime::Runtime: task instantiation from keys,
// dependency counting, completion and successor activation, iteration driving.

#include <atomic>
#include <memory>
#include <mpi.h>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/options.hpp"
#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/task.hpp"
#include "device.hpp"
#include "trace.hpp"

namespace bellows::runtime {

class CommEngine;

class Engine {
 public:
  Engine(MPI_Comm comm, RuntimeOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm communicator() const noexcept { return comm_; }
  [[nodiscard]] const RuntimeOptions& options() const noexcept { return options_; }

  void add_task_class(std::unique_ptr<TaskClass> task_class);
  void add_collection(TiledMatrix& collection);
  [[nodiscard]] const std::string& class_name(TaskClassId id) const { return class_names_.at(id); }
  [[nodiscard]] std::size_t class_count() const noexcept { return classes_.size(); }
  [[nodiscard]] const TaskClass& task_class(TaskClassId id) const;
  [[nodiscard]] TiledMatrix& collection(CollectionId id) const;

  IterationReport run_iteration();
  [[nodiscard]] const RankStats& stats() const noexcept { return total_stats_; }

  // ---- called from devices and the communication thread (thread-safe) ----

  /// The rank that runs `key`: the fixed mapping of its class.
  [[nodiscard]] int rank_of(const TaskKey& key) const;
  /// A predecessor's tile (or control token) for slot `slot` of local task `key`.
  void deliver(const TaskKey& key, int slot, TilePtr tile);
  /// A remote collection tile requested by instantiate() has arrived.
  void collection_tile_arrived(const TileIndex& index, TilePtr tile);
  /// A task's output written back into a local collection tile.
  void write_back(const TileIndex& index, TilePtr tile);
  /// A device ran `task`: activate its successors, count it done.
  void complete(std::unique_ptr<ReadyTask> task);
  /// True when every task this rank owns in the current iteration has run.
  [[nodiscard]] bool local_work_done() const noexcept {
    return local_remaining_.load(std::memory_order_acquire) == 0;
  }
  [[nodiscard]] std::size_t ready_count() const;
  [[nodiscard]] double iteration_clock() const;

 private:
  struct PendingTask {
    std::vector<TilePtr> tiles;
    std::uint32_t writable = 0;
    std::uint32_t control = 0;  // slots that receive control tokens only
    int missing = 0;
  };
  struct CollectionCacheEntry {
    TilePtr tile;  // null while the fetch is in flight
    std::vector<std::pair<TaskKey, int>> waiters;
  };

  /// Creates the pending record of a local task (lock held). Collection inputs that
  /// must be fetched are appended to `fetches`.
  PendingTask& instantiate(const TaskKey& key, std::vector<TileIndex>& fetches);
  void make_ready(const TaskKey& key, PendingTask&& pending);
  void request_fetches(const std::vector<TileIndex>& fetches);
  void prepare_local_tasks();

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  RuntimeOptions options_;

  std::vector<std::unique_ptr<TaskClass>> classes_;
  std::vector<std::string> class_names_;
  std::vector<TiledMatrix*> collections_;

  std::unique_ptr<Device> device_;
  std::unique_ptr<CommEngine> comm_engine_;
  std::unique_ptr<Trace> trace_;

  mutable std::mutex mutex_;  // guards pending_ and cache_
  std::unordered_map<TaskKey, PendingTask> pending_;
  std::unordered_map<TileIndex, CollectionCacheEntry> cache_;

  bool local_tasks_known_ = false;
  std::vector<TaskKey> local_roots_;  // local tasks with no predecessor
  std::int64_t local_task_count_ = 0;
  std::atomic<std::int64_t> local_remaining_{0};
  std::atomic<std::uint64_t> sequence_{0};

  int iteration_ = 0;
  Clock::time_point iteration_start_{};
  RankStats total_stats_;
};

}  // namespace bellows::runtime
