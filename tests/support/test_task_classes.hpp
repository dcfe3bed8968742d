#pragma once
// Small task classes for runtime tests: independent roots, and a control-dependency
// chain whose links may cross ranks.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "bellows/runtime/task.hpp"

namespace bellows::testing {

/// `count` tasks with no inputs (all roots), task i on rank i % ranks.
class IndependentTasks final : public runtime::TaskClass {
 public:
  IndependentTasks(runtime::TaskClassId id, int count, double flops_each, int ranks,
                   std::string name = "INDEPENDENT")
      : TaskClass(id), count_(count), flops_(flops_each), ranks_(ranks), name_(std::move(name)) {}

  std::string_view name() const override { return name_; }
  void for_each_task(const std::function<void(const runtime::TaskKey&)>& fn) const override {
    for (int i = 0; i < count_; ++i) fn(key(i));
  }
  int owner(const runtime::TaskKey& k) const override { return k.index[0] % ranks_; }
  void inputs(const runtime::TaskKey&, std::vector<runtime::InputSource>&) const override {}
  void successors(const runtime::TaskKey&, int, std::vector<runtime::Successor>&) const override {}
  double flops(const runtime::TaskKey&) const override { return flops_; }
  void execute_cpu(const runtime::TaskKey&, std::span<runtime::Tile* const> tiles) const override {
    if (!tiles.empty()) bad_calls.fetch_add(1);
    executed.fetch_add(1);
  }

  mutable std::atomic<int> executed{0};
  mutable std::atomic<int> bad_calls{0};

 private:
  int count_;
  double flops_;
  int ranks_;
  std::string name_;
};

/// CHAIN(0) -> CHAIN(1) -> ... -> CHAIN(length-1), task i on rank i % ranks. Every link
/// is a control dependency: the head has no inputs (its slot 0 carries the control
/// token), and slot 0 of every later task is a control slot, empty when it runs.
class ChainTasks final : public runtime::TaskClass {
 public:
  ChainTasks(runtime::TaskClassId id, int length, double flops_each, int ranks)
      : TaskClass(id), length_(length), flops_(flops_each), ranks_(ranks) {}

  std::string_view name() const override { return "CHAIN"; }
  void for_each_task(const std::function<void(const runtime::TaskKey&)>& fn) const override {
    for (int i = 0; i < length_; ++i) fn(key(i));
  }
  int owner(const runtime::TaskKey& k) const override { return k.index[0] % ranks_; }
  void inputs(const runtime::TaskKey& k, std::vector<runtime::InputSource>& out) const override {
    const int i = k.index[0];
    if (i > 0) out.push_back(runtime::InputSource::control_from(key(i - 1), 0));
  }
  void successors(const runtime::TaskKey& k, int slot,
                  std::vector<runtime::Successor>& out) const override {
    const int i = k.index[0];
    if (slot == 0 && i + 1 < length_) out.push_back(runtime::Successor::to_task(key(i + 1), 0));
  }
  double flops(const runtime::TaskKey&) const override { return flops_; }
  void execute_cpu(const runtime::TaskKey& k, std::span<runtime::Tile* const> tiles) const override {
    const int i = k.index[0];
    std::lock_guard lock(mutex_);
    order_.push_back(i);
    const std::size_t expected_slots = i == 0 ? 0 : 1;
    if (tiles.size() != expected_slots || (expected_slots == 1 && tiles[0] != nullptr)) {
      ++bad_slots_;
    }
  }

  std::vector<int> order() const {
    std::lock_guard lock(mutex_);
    return order_;
  }
  /// Tasks whose slots were not as declared (slot count, or a tile in a control slot).
  int bad_slots() const {
    std::lock_guard lock(mutex_);
    return bad_slots_;
  }
  void clear() {
    std::lock_guard lock(mutex_);
    order_.clear();
    bad_slots_ = 0;
  }

 private:
  int length_;
  double flops_;
  int ranks_;
  mutable std::mutex mutex_;
  mutable std::vector<int> order_;
  mutable int bad_slots_ = 0;
};

/// PRODUCER(0) fills a 1 x 1 scratch tile; CONSUMER(0) depends on it through a control
/// slot, which by the contract of InputSource::Kind::control stays empty (nullptr).
class DataIntoControlSlot final : public runtime::TaskClass {
 public:
  DataIntoControlSlot(runtime::TaskClassId id, int ranks) : TaskClass(id), ranks_(ranks) {}

  std::string_view name() const override { return "DATA_INTO_CONTROL"; }
  void for_each_task(const std::function<void(const runtime::TaskKey&)>& fn) const override {
    fn(key(0));
    fn(key(1));
  }
  int owner(const runtime::TaskKey& k) const override { return k.index[0] % ranks_; }
  void inputs(const runtime::TaskKey& k, std::vector<runtime::InputSource>& out) const override {
    out.push_back(k.index[0] == 0 ? runtime::InputSource::scratch_tile(1, 1)
                                  : runtime::InputSource::control_from(key(0), 0));
  }
  void successors(const runtime::TaskKey& k, int slot,
                  std::vector<runtime::Successor>& out) const override {
    if (slot == 0 && k.index[0] == 0) out.push_back(runtime::Successor::to_task(key(1), 0));
  }
  void execute_cpu(const runtime::TaskKey& k, std::span<runtime::Tile* const> tiles) const override {
    if (k.index[0] == 0) {
      tiles[0]->at(0, 0) = 1.0;
    } else {
      consumer_saw_tile.store(tiles.size() == 1 && tiles[0] != nullptr);
      consumer_ran.store(true);
    }
  }

  mutable std::atomic<bool> consumer_ran{false};
  mutable std::atomic<bool> consumer_saw_tile{false};

 private:
  int ranks_;
};

}  // namespace bellows::testing
