#pragma once
// What the ranks that keep their state at a team roll-back serve from their logs, predicted
// from the task graph as the job starts (docs/teams.md, "Only the lost rank's team rolls
// back"): the collection tiles the ranks re-running the window fetch from them
// (Engine::tile_to_serve) and the task outputs they send again as activations
// (Engine::replay_logged_outputs). Pure functions of ranks and tile reads; the recovery tests
// compare them with MessageLogStats::bytes_replayed.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/task.hpp"

namespace bellows::testing::recovery {

/// A task's output as the job starts: the rank that owns its producer, and the ranks that
/// take it (the owners of its consumer tasks and the holders of the collection tiles it
/// writes), one entry per producer and output slot.
struct OutputTakers {
  int producer_rank = -1;
  std::vector<int> taker_ranks;
  std::vector<bool> taker_is_task;  ///< per taker: a consumer task (or a collection tile written)
  bool pinned = false;              ///< its producer or a consumer task is pinned (output_takers' `pinned`)
};

/// A tile of a collection that a task reads, as the job starts: the rank owning the task and
/// the rank holding the tile.
struct TileRead {
  int task_owner;
  int collection, m, n;
  int holder;
};

/// Per producer and output slot of `classes`, the ranks that take the output as the tasks and
/// tiles lie now: `holder_of(TileIndex)` names the rank holding a collection tile, and a task
/// in `pinned` (Runtime::pinned(): stolen by a new rank without a re-grid) runs on the rank
/// it is pinned to instead of its tile's owner.
template <class HolderOf>
std::vector<OutputTakers> output_takers(const std::vector<std::unique_ptr<runtime::TaskClass>>& classes,
                                        HolderOf holder_of,
                                        const std::unordered_map<runtime::TaskKey, int>& pinned = {}) {
  const auto rank_of = [&](const runtime::TaskClass& tasks, const runtime::TaskKey& key) {
    const auto it = pinned.find(key);
    return it != pinned.end() ? it->second : tasks.owner(key);
  };
  std::vector<OutputTakers> outputs;
  std::vector<runtime::InputSource> inputs;
  std::vector<runtime::Successor> successors;
  for (const auto& tasks : classes) {
    tasks->for_each_task([&](const runtime::TaskKey& key) {
      inputs.clear();
      tasks->inputs(key, inputs);
      for (int slot = 0; slot < static_cast<int>(inputs.size()); ++slot) {
        successors.clear();
        tasks->successors(key, slot, successors);
        OutputTakers output{rank_of(*tasks, key), {}, {}, pinned.count(key) != 0};
        for (const runtime::Successor& next : successors) {
          const bool task = next.kind == runtime::Successor::Kind::task;
          output.taker_ranks.push_back(task ? rank_of(*classes.at(next.consumer.task_class), next.consumer)
                                            : holder_of(next.tile));
          output.taker_is_task.push_back(task);
          output.pinned = output.pinned || (task && pinned.count(next.consumer) != 0);
        }
        outputs.push_back(std::move(output));
      }
    });
  }
  return outputs;
}

/// The task graph of a job as it starts, as the recovery tests predict from it.
struct JobGraph {
  std::vector<long> tasks_per_rank;                ///< each rank's tasks per iteration
  long task_outputs_between_teams = 0;             ///< outputs that go to a task of another team
  std::vector<std::uint64_t> tiles_held_at_start;  ///< each rank's tiles over the collections
  std::vector<TileRead> tile_reads;                ///< per task, the collection tiles it reads
  std::vector<OutputTakers> outputs;               ///< output_takers()
};

/// Walks `classes` over `ranks` ranks and the tiles of `collections`: `holder_of(TileIndex)`
/// names a tile's holder, `team_of(rank)` a rank's team.
template <class HolderOf, class TeamOf>
JobGraph job_graph(const std::vector<std::unique_ptr<runtime::TaskClass>>& classes,
                   const std::vector<const runtime::TiledMatrix*>& collections, int ranks, HolderOf holder_of,
                   TeamOf team_of) {
  JobGraph graph;
  graph.tasks_per_rank.assign(static_cast<std::size_t>(ranks), 0);
  graph.tiles_held_at_start.assign(static_cast<std::size_t>(ranks), 0);
  for (const runtime::TiledMatrix* m : collections) {
    for (int n = 0; n < m->tile_cols(); ++n) {
      for (int i = 0; i < m->tile_rows(); ++i) {
        if (m->kept(i, n)) ++graph.tiles_held_at_start.at(static_cast<std::size_t>(m->owner(i, n)));
      }
    }
  }
  std::vector<runtime::InputSource> inputs;
  for (const auto& tasks : classes) {
    tasks->for_each_task([&](const runtime::TaskKey& key) {
      const int owner = tasks->owner(key);
      ++graph.tasks_per_rank.at(static_cast<std::size_t>(owner));
      inputs.clear();
      tasks->inputs(key, inputs);
      for (const runtime::InputSource& input : inputs) {
        if (input.kind != runtime::InputSource::Kind::collection) continue;
        graph.tile_reads.push_back(
            TileRead{owner, input.tile.collection, input.tile.m, input.tile.n, holder_of(input.tile)});
      }
    });
  }
  graph.outputs = output_takers(classes, holder_of);
  for (const OutputTakers& output : graph.outputs) {
    for (std::size_t t = 0; t < output.taker_ranks.size(); ++t) {
      const bool to_other_team = team_of(output.taker_ranks[t]) != team_of(output.producer_rank);
      graph.task_outputs_between_teams += output.taker_is_task[t] && to_other_team ? 1 : 0;
    }
  }
  return graph;
}

/// The copies of task outputs rank `rank`, one that kept its state, drops per iteration redone
/// when the replay sends to it too (MessageLogOptions::replay_to_ranks_kept, ReceivedVersions):
/// one per output of a producer of a rank that rolled back (`rolled_back`, sorted) it takes.
inline long copies_dropped_per_iteration(const std::vector<OutputTakers>& outputs, const std::vector<int>& rolled_back,
                                         int rank) {
  long copies = 0;
  for (const OutputTakers& output : outputs) {
    if (output.producer_rank == rank ||
        !std::binary_search(rolled_back.begin(), rolled_back.end(), output.producer_rank)) {
      continue;
    }
    const auto& takers = output.taker_ranks;
    copies += std::find(takers.begin(), takers.end(), rank) != takers.end() ? 1 : 0;
  }
  return copies;
}

/// The rank that runs rank `rank`'s tasks after a recovery from losing `lost` (sorted): the
/// rank itself, or for a lost rank its buddy, which took its tiles.
inline int runner_after_loss(int rank, const std::vector<int>& lost, const std::vector<int>& buddies) {
  if (!std::binary_search(lost.begin(), lost.end(), rank)) return rank;
  return rank >= 0 && rank < static_cast<int>(buddies.size()) ? buddies[static_cast<std::size_t>(rank)] : -1;
}

/// The task outputs the ranks that kept their state send again per iteration redone, summed
/// over them: each output of a producer they own, once per rank now running a taker of a rank
/// that rolled back (`rolled_back`, sorted; Engine::replay_logged_outputs sends one
/// activation per producer, slot and receiving rank). The sum does not depend on stealing
/// inside the teams that kept their state: a stolen producer's output is logged by its thief.
inline long outputs_replayed(const std::vector<OutputTakers>& outputs, const std::vector<int>& rolled_back,
                             const std::vector<int>& lost, const std::vector<int>& buddies) {
  const auto rolled = [&](int r) { return std::binary_search(rolled_back.begin(), rolled_back.end(), r); };
  long sent = 0;
  for (const OutputTakers& output : outputs) {
    if (rolled(output.producer_rank)) continue;
    std::set<int> receivers;
    for (const int taker : output.taker_ranks) {
      if (rolled(taker)) receivers.insert(runner_after_loss(taker, lost, buddies));
    }
    sent += static_cast<long>(receivers.size());
  }
  return sent;
}

/// The collection tiles rank `holder` (one that kept its state) serves from its log per
/// iteration redone: each tile it holds that a task of a rank that rolled back reads.
struct TilesServed {
  long as_placed = 0;  ///< once per rank running such a task where the job put it
  long fewest = 0;     ///< once, whichever rank re-running the window reads it
  long most = 0;       ///< once per rank re-running the window (stealing may spread the readers)
};

inline TilesServed tiles_served(const std::vector<TileRead>& reads, int holder, const std::vector<int>& rolled_back,
                                const std::vector<int>& lost, const std::vector<int>& buddies) {
  std::set<std::tuple<int, int, int, int>> as_placed;  // (collection, m, n, rank running the task)
  std::set<std::tuple<int, int, int>> tiles;
  for (const TileRead& read : reads) {
    if (read.holder != holder || !std::binary_search(rolled_back.begin(), rolled_back.end(), read.task_owner)) {
      continue;
    }
    as_placed.emplace(read.collection, read.m, read.n, runner_after_loss(read.task_owner, lost, buddies));
    tiles.emplace(read.collection, read.m, read.n);
  }
  const long replaying = static_cast<long>(rolled_back.size()) - static_cast<long>(lost.size());
  return TilesServed{static_cast<long>(as_placed.size()), static_cast<long>(tiles.size()),
                     static_cast<long>(tiles.size()) * std::max(replaying, 1L)};
}

}  // namespace bellows::testing::recovery
