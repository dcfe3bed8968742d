#pragma once
// Consistency checks of a parameterized task graph, on the task classes alone (no
// runtime, no MPI): every dependency is declared on both ends, every producer exists,
// owners are valid ranks, and the graph has no cycle.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bellows/runtime/task.hpp"

namespace bellows::testing {

struct PtgReport {
  std::vector<std::string> errors;                       ///< empty when consistent
  std::map<std::string, std::size_t> tasks_per_class;    ///< by class name
  std::unordered_map<runtime::TaskKey, int> predecessor_inputs;  ///< task + control slots
  std::unordered_map<runtime::TaskKey, int> owner;
  /// Write-backs per collection tile (collection, m, n).
  std::map<std::tuple<int, int, int>, int> write_backs;
  /// read_write flows whose producer and consumer run on different ranks.
  std::vector<std::string> moving_read_write_flows;
  std::size_t topologically_ordered = 0;                 ///< equals the task count when acyclic
  std::size_t total_tasks = 0;
};

inline std::string describe_key(const std::vector<const runtime::TaskClass*>& classes,
                                const runtime::TaskKey& key) {
  std::string name = key.task_class < classes.size()
                         ? std::string(classes[key.task_class]->name())
                         : "class#" + std::to_string(key.task_class);
  return name + "(" + std::to_string(key.index[0]) + "," + std::to_string(key.index[1]) + "," +
         std::to_string(key.index[2]) + ")";
}

/// classes[i] must have id i. ranks: the communicator size the owners must fit.
inline PtgReport check_ptg(const std::vector<const runtime::TaskClass*>& classes, int ranks) {
  using runtime::InputSource;
  using runtime::Successor;
  using runtime::TaskKey;
  PtgReport r;
  const auto err = [&](std::string text) {
    if (r.errors.size() < 50) r.errors.push_back(std::move(text));
  };
  const auto name = [&](const TaskKey& k) { return describe_key(classes, k); };

  std::vector<TaskKey> all;
  std::unordered_set<TaskKey> known;
  for (std::size_t id = 0; id < classes.size(); ++id) {
    if (classes[id]->id() != id) err("class at position " + std::to_string(id) + " has another id");
    classes[id]->for_each_task([&](const TaskKey& key) {
      if (key.task_class != id) err(name(key) + " enumerated by class " + std::to_string(id));
      if (!known.insert(key).second) err(name(key) + " enumerated twice");
      all.push_back(key);
      ++r.tasks_per_class[std::string(classes[id]->name())];
    });
  }
  r.total_tasks = all.size();

  std::unordered_map<TaskKey, std::vector<InputSource>> inputs;
  for (const auto& key : all) {
    auto& in = inputs[key];
    classes[key.task_class]->inputs(key, in);
    const int owner = classes[key.task_class]->owner(key);
    r.owner[key] = owner;
    if (owner < 0 || owner >= ranks) {
      err(name(key) + " owned by rank " + std::to_string(owner) + " of " + std::to_string(ranks));
    }
  }

  std::unordered_map<TaskKey, std::vector<TaskKey>> consumers;  // for the cycle check
  std::unordered_map<TaskKey, int> indegree;
  std::vector<Successor> succ;
  for (const auto& key : all) {
    const auto& in = inputs[key];
    int predecessors = 0;
    for (std::size_t slot = 0; slot < in.size(); ++slot) {
      const auto& s = in[slot];
      if (!s.from_predecessor()) continue;
      ++predecessors;
      if (!known.count(s.producer)) {
        err(name(key) + " slot " + std::to_string(slot) + " names unknown producer " +
            name(s.producer));
        continue;
      }
      succ.clear();
      classes[s.producer.task_class]->successors(s.producer, s.producer_slot, succ);
      const auto matches = std::count_if(succ.begin(), succ.end(), [&](const Successor& x) {
        return x.kind == Successor::Kind::task && x.consumer == key && x.consumer_slot == slot;
      });
      if (matches != 1) {
        err(name(key) + " slot " + std::to_string(slot) + " expects " + name(s.producer) +
            " slot " + std::to_string(s.producer_slot) + ", which lists it " +
            std::to_string(matches) + " times");
      }
      // A task without inputs still has slot 0 (a control token).
      const std::size_t producer_slots = std::max<std::size_t>(inputs[s.producer].size(), 1);
      if (s.producer_slot >= producer_slots) {
        err(name(key) + " reads slot " + std::to_string(s.producer_slot) + " of " +
            name(s.producer) + ", which has only " + std::to_string(producer_slots));
      }
    }
    r.predecessor_inputs[key] = predecessors;
    indegree[key] = predecessors;

    const std::size_t output_slots = std::max<std::size_t>(in.size(), 1);
    for (std::size_t slot = 0; slot < output_slots; ++slot) {
      succ.clear();
      classes[key.task_class]->successors(key, static_cast<int>(slot), succ);
      for (const auto& s : succ) {
        if (s.kind == Successor::Kind::collection) {
          ++r.write_backs[{s.tile.collection, s.tile.m, s.tile.n}];
          continue;
        }
        consumers[key].push_back(s.consumer);
        if (!known.count(s.consumer)) {
          err(name(key) + " slot " + std::to_string(slot) + " feeds unknown task " +
              name(s.consumer));
          continue;
        }
        const auto& cin = inputs[s.consumer];
        if (s.consumer_slot >= cin.size()) {
          err(name(key) + " feeds slot " + std::to_string(s.consumer_slot) + " of " +
              name(s.consumer) + ", which has " + std::to_string(cin.size()) + " slots");
          continue;
        }
        const auto& c = cin[s.consumer_slot];
        if (!c.from_predecessor() || !(c.producer == key) || c.producer_slot != slot) {
          err(name(key) + " slot " + std::to_string(slot) + " feeds " + name(s.consumer) +
              " slot " + std::to_string(s.consumer_slot) + ", which does not name it");
          continue;
        }
        if (c.kind == InputSource::Kind::task && c.access == runtime::Access::read_write &&
            r.owner[key] != r.owner[s.consumer]) {
          r.moving_read_write_flows.push_back(name(key) + " -> " + name(s.consumer));
        }
      }
    }
  }

  // Kahn's algorithm: every task is reached exactly when the graph has no cycle.
  std::deque<TaskKey> ready;
  for (const auto& key : all) {
    if (indegree[key] == 0) ready.push_back(key);
  }
  while (!ready.empty()) {
    const TaskKey key = ready.front();
    ready.pop_front();
    ++r.topologically_ordered;
    for (const auto& c : consumers[key]) {
      auto it = indegree.find(c);
      if (it != indegree.end() && --it->second == 0) ready.push_back(c);
    }
  }
  if (r.topologically_ordered != all.size()) {
    err("only " + std::to_string(r.topologically_ordered) + " of " + std::to_string(all.size()) +
        " tasks can ever run (cycle or missing producer)");
  }
  return r;
}

}  // namespace bellows::testing
