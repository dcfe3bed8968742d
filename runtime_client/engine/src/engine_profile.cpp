// The iteration's task graph for scaling predictions (task_graph.hpp), built from the task
// classes and weighted by the cost model.

#include <unordered_map>
#include <vector>

#include "engine.hpp"

namespace bellows::runtime {

GraphProfile Engine::graph_profile() const {
  if (!task_graph_) {
    auto graph = std::make_unique<TaskGraph>();
    std::unordered_map<TaskKey, std::size_t> index;
    std::vector<TaskKey> keys;
    for (const auto& cls : classes_) {
      cls->for_each_task([&](const TaskKey& key) {
        index.emplace(key, graph->add_task(key.task_class, cls->flops(key)));
        keys.push_back(key);
      });
    }
    std::vector<InputSource> inputs;
    for (std::size_t t = 0; t < keys.size(); ++t) {
      inputs.clear();
      classes_[keys[t].task_class]->inputs(keys[t], inputs);
      for (const auto& input : inputs) {
        if (!input.from_predecessor()) continue;
        if (const auto it = index.find(input.producer); it != index.end()) graph->add_dependency(it->second, t);
      }
    }
    task_graph_ = std::move(graph);
  }
  std::lock_guard lock(cost_mutex_);
  return task_graph_->profile([this](std::uint32_t task_class, double flops) {
    return cost_model_.task_seconds(task_class, flops);
  });
}

}  // namespace bellows::runtime
