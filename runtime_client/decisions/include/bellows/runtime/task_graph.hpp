#pragma once
// One iteration's task graph reduced to what a scaling prediction needs: how much compute it
// holds and how long its longest chain of dependent tasks is.
//
// With W the summed compute seconds of every task and C the critical path (the longest
// chain, each task weighted by its compute seconds), no schedule on p ranks of L lanes each
// runs an iteration faster than max(W / (p L), C) (Graham's bound, communication left out).
// The policy engine turns the two into a predicted efficiency before it grows a job
// (bellows/policy/scaling.hpp); a job whose graph is bound by C gains nothing from nodes.
//
// Nothing here sends a message, reads a clock or takes a lock. The engine
// (runtime_client/engine/src/engine.cpp) builds the graph once from its task classes and weights
// it with the cost model's predictions each time it is asked.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace bellows::runtime {

/// W and C of one iteration (see the file comment).
struct GraphProfile {
  std::size_t tasks = 0;
  double work_seconds = 0.0;           ///< W: every task's compute seconds, summed
  double critical_path_seconds = 0.0;  ///< C: the longest chain's compute seconds
};

/// The structure of a task graph: tasks (by class and flops) and their dependencies.
class TaskGraph {
 public:
  /// Adds a task; returns its index (0, 1, ... in the order of the calls).
  std::size_t add_task(std::uint32_t task_class, double flops);
  /// Task `after` needs task `before` to have run. Throws std::out_of_range for an index
  /// not added.
  void add_dependency(std::size_t before, std::size_t after);
  [[nodiscard]] std::size_t size() const noexcept { return tasks_.size(); }

  /// W and C with each task taking seconds(task_class, flops). Throws
  /// std::invalid_argument when the dependencies form a cycle, naming a task that never
  /// becomes ready.
  [[nodiscard]] GraphProfile profile(
      const std::function<double(std::uint32_t task_class, double flops)>& seconds) const;

 private:
  struct Task {
    std::uint32_t task_class = 0;
    double flops = 0.0;
    std::vector<std::size_t> successors;
    std::size_t predecessors = 0;
  };
  std::vector<Task> tasks_;
};

}  // namespace bellows::runtime
