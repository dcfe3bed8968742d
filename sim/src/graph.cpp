#include "bellows/sim/graph.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

namespace bellows::sim {

namespace {

std::string describe(const runtime::TaskKey& key, const std::vector<std::string>& names,
                     std::uint32_t class_index) {
  return names[class_index] + "(" + std::to_string(key.index[0]) + "," +
         std::to_string(key.index[1]) + "," + std::to_string(key.index[2]) + ")";
}

}  // namespace

SimGraph SimGraph::build(std::span<const runtime::TaskClass* const> classes, int ranks,
                         const std::function<std::uint64_t(const runtime::TileIndex&)>& tile_bytes,
                         const std::function<int(const runtime::TileIndex&)>& tile_owner) {
  using Kind = runtime::InputSource::Kind;
  SimGraph g;
  g.ranks_ = ranks;
  std::unordered_map<runtime::TaskKey, std::uint32_t> index;
  std::unordered_map<runtime::TileIndex, std::uint32_t> tile_index;
  const auto tile_of = [&](const runtime::TileIndex& t) {
    const auto [it, added] = tile_index.try_emplace(t, static_cast<std::uint32_t>(g.tiles_.size()));
    if (added) {
      const int owner = tile_owner(t);
      if (owner < 0 || owner >= ranks) {
        throw std::invalid_argument("tile (" + std::to_string(t.m) + "," + std::to_string(t.n) +
                                    ") of collection " + std::to_string(t.collection) +
                                    " is owned by rank " + std::to_string(owner) + " of " +
                                    std::to_string(ranks));
      }
      g.tiles_.push_back(SimTile{owner, tile_bytes(t)});
    }
    return it->second;
  };

  std::vector<const runtime::TaskClass*> class_of;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const runtime::TaskClass& cls = *classes[c];
    g.class_names_.emplace_back(cls.name());
    cls.for_each_task([&](const runtime::TaskKey& key) {
      SimTask t;
      t.key = key;
      t.class_index = static_cast<std::uint32_t>(c);
      t.owner = cls.owner(key);
      t.priority = cls.priority(key);
      t.flops = cls.flops(key);
      if (t.owner < 0 || t.owner >= ranks) {
        throw std::invalid_argument("task " + describe(key, g.class_names_, t.class_index) +
                                    " is owned by rank " + std::to_string(t.owner) + " of " +
                                    std::to_string(ranks));
      }
      if (!index.try_emplace(key, static_cast<std::uint32_t>(g.tasks_.size())).second) {
        throw std::invalid_argument("task " + describe(key, g.class_names_, t.class_index) +
                                    " is named twice");
      }
      g.tasks_.push_back(t);
      g.total_flops_ += t.flops;
      class_of.push_back(&cls);
    });
  }

  std::vector<runtime::InputSource> specs;
  std::vector<runtime::Successor> succ;
  std::uint64_t predecessor_edges = 0, successor_edges = 0;
  for (std::size_t i = 0; i < g.tasks_.size(); ++i) {
    SimTask& t = g.tasks_[i];
    const runtime::TaskClass& cls = *class_of[i];
    specs.clear();
    cls.inputs(t.key, specs);
    t.first_input = static_cast<std::uint32_t>(g.inputs_.size());
    t.input_count = static_cast<std::uint32_t>(specs.size());
    for (const auto& s : specs) {
      SimInput in;
      in.kind = s.kind;
      in.writable = s.access == runtime::Access::read_write;
      in.producer_slot = s.producer_slot;
      switch (s.kind) {
        case Kind::collection:
          in.ref = tile_of(s.tile);
          in.bytes = g.tiles_[in.ref].bytes;
          break;
        case Kind::scratch:
          in.bytes = static_cast<std::uint64_t>(s.rows) * static_cast<std::uint64_t>(s.cols) * sizeof(double);
          break;
        case Kind::task:
        case Kind::control: {
          const auto it = index.find(s.producer);
          if (it == index.end()) {
            throw std::invalid_argument("task " + describe(t.key, g.class_names_, t.class_index) +
                                        " names a producer that is no task");
          }
          in.ref = it->second;
          ++t.predecessor_slots;
          ++predecessor_edges;
          break;
        }
      }
      g.inputs_.push_back(in);
    }
    t.first_successor = static_cast<std::uint32_t>(g.successors_.size());
    const int slots = std::max<int>(static_cast<int>(specs.size()), 1);
    for (int slot = 0; slot < slots; ++slot) {
      succ.clear();
      cls.successors(t.key, slot, succ);
      for (const auto& s : succ) {
        SimSuccessor out;
        out.slot = static_cast<std::uint8_t>(slot);
        if (s.kind == runtime::Successor::Kind::task) {
          const auto it = index.find(s.consumer);
          if (it == index.end()) {
            throw std::invalid_argument("task " + describe(t.key, g.class_names_, t.class_index) +
                                        " names a successor that is no task");
          }
          out.ref = it->second;
          out.consumer_slot = s.consumer_slot;
          ++successor_edges;
        } else {
          out.to_task = false;
          out.ref = tile_of(s.tile);
        }
        g.successors_.push_back(out);
      }
    }
    t.successor_count = static_cast<std::uint32_t>(g.successors_.size()) - t.first_successor;
  }
  if (predecessor_edges != successor_edges) {
    throw std::invalid_argument("the task classes' successors do not mirror their inputs: " +
                                std::to_string(predecessor_edges) + " input slots from predecessors, " +
                                std::to_string(successor_edges) + " successor slots");
  }

  // Kahn's order; then each input slot filled by a predecessor holds what that slot held.
  std::vector<std::uint32_t> waiting(g.tasks_.size());
  for (std::size_t i = 0; i < g.tasks_.size(); ++i) waiting[i] = g.tasks_[i].predecessor_slots;
  g.order_.reserve(g.tasks_.size());
  for (std::size_t i = 0; i < g.tasks_.size(); ++i) {
    if (waiting[i] == 0) g.order_.push_back(static_cast<std::uint32_t>(i));
  }
  for (std::size_t head = 0; head < g.order_.size(); ++head) {
    const SimTask& t = g.tasks_[g.order_[head]];
    for (const auto& s : g.successors(t)) {
      if (!s.to_task) continue;
      SimTask& c = g.tasks_[s.ref];
      SimInput& in = g.inputs_[c.first_input + s.consumer_slot];
      if (in.kind == Kind::task) in.bytes = g.output_bytes(t, s.slot);
      if (--waiting[s.ref] == 0) g.order_.push_back(s.ref);
    }
  }
  if (g.order_.size() != g.tasks_.size()) {
    for (std::size_t i = 0; i < g.tasks_.size(); ++i) {
      if (waiting[i] > 0) {
        throw std::invalid_argument("the dependencies form a cycle: task " +
                                    describe(g.tasks_[i].key, g.class_names_, g.tasks_[i].class_index) +
                                    " never becomes ready");
      }
    }
  }
  return g;
}

std::uint64_t SimGraph::output_bytes(const SimTask& t, int slot) const {
  if (slot < 0 || static_cast<std::uint32_t>(slot) >= t.input_count) return 0;  // a control token
  return inputs_[t.first_input + static_cast<std::uint32_t>(slot)].bytes;
}

double SimGraph::critical_path_seconds(double seconds_per_flop, double overhead_seconds) const {
  std::vector<double> finish(tasks_.size(), 0.0);
  std::vector<double> start(tasks_.size(), 0.0);
  double longest = 0.0;
  for (const std::uint32_t i : order_) {
    const SimTask& t = tasks_[i];
    finish[i] = start[i] + overhead_seconds + t.flops * seconds_per_flop;
    longest = std::max(longest, finish[i]);
    for (const auto& s : successors(t)) {
      if (s.to_task) start[s.ref] = std::max(start[s.ref], finish[i]);
    }
  }
  return longest;
}

}  // namespace bellows::sim
