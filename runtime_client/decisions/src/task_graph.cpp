#include "bellows/runtime/task_graph.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bellows::runtime {

std::size_t TaskGraph::add_task(std::uint32_t task_class, double flops) {
  tasks_.push_back(Task{task_class, flops, {}, 0});
  return tasks_.size() - 1;
}

void TaskGraph::add_dependency(std::size_t before, std::size_t after) {
  if (before >= tasks_.size() || after >= tasks_.size()) {
    throw std::out_of_range("TaskGraph: dependency " + std::to_string(before) + " -> " +
                            std::to_string(after) + " names a task not added (" +
                            std::to_string(tasks_.size()) + " tasks)");
  }
  tasks_[before].successors.push_back(after);
  ++tasks_[after].predecessors;
}

GraphProfile TaskGraph::profile(
    const std::function<double(std::uint32_t task_class, double flops)>& seconds) const {
  GraphProfile out;
  out.tasks = tasks_.size();
  // Kahn's order: a task becomes ready when its last predecessor has finished; start[t] is
  // the longest chain of predecessors that ends just before t.
  std::vector<std::size_t> waiting(tasks_.size());
  std::vector<double> start(tasks_.size(), 0.0);
  std::vector<std::size_t> ready;
  for (std::size_t t = 0; t < tasks_.size(); ++t) {
    waiting[t] = tasks_[t].predecessors;
    if (waiting[t] == 0) ready.push_back(t);
  }
  std::size_t done = 0;
  while (!ready.empty()) {
    const std::size_t t = ready.back();
    ready.pop_back();
    ++done;
    const double cost = seconds(tasks_[t].task_class, tasks_[t].flops);
    const double finish = start[t] + cost;
    out.work_seconds += cost;
    out.critical_path_seconds = std::max(out.critical_path_seconds, finish);
    for (const std::size_t s : tasks_[t].successors) {
      start[s] = std::max(start[s], finish);
      if (--waiting[s] == 0) ready.push_back(s);
    }
  }
  if (done != tasks_.size()) {
    const auto on_cycle = static_cast<std::size_t>(
        std::find_if(waiting.begin(), waiting.end(), [](std::size_t w) { return w > 0; }) -
        waiting.begin());
    throw std::invalid_argument("TaskGraph: the dependencies form a cycle (task " +
                                std::to_string(on_cycle) + " never becomes ready)");
  }
  return out;
}

}  // namespace bellows::runtime
