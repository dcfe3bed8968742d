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

/// CHAIN(0) -> CHAIN(1) -> ... -> CHAIN(length-1), task i on rank i % ranks. Links are
/// control dependencies (slot 0 of task i > 0 is empty). A task without slots never has
/// its successors asked for, so the head carries a 1 x 1 scratch tile in slot 0, which
/// travels to CHAIN(1) as data; every later link is a pure control token.
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
    out.push_back(i == 0 ? runtime::InputSource::scratch_tile(1, 1)
                         : runtime::InputSource::control_from(key(i - 1), 0));
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
    const bool expect_tile = i <= 1;  // the head's scratch tile, and its copy at CHAIN(1)
    const bool has_tile = tiles.size() == 1 && tiles[0] != nullptr;
    if (tiles.size() != 1 || has_tile != expect_tile ||
        (has_tile && (tiles[0]->rows() != 1 || tiles[0]->cols() != 1))) {
      ++bad_slots_;
    }
  }

  std::vector<int> order() const {
    std::lock_guard lock(mutex_);
    return order_;
  }
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

}  // namespace bellows::testing
