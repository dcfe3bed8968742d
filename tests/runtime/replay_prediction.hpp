#pragma once
// What the ranks that keep their state at a team roll-back serve from their logs, predicted
// from the task graph as the job starts (docs/teams.md, "Only the lost rank's team rolls
// back"): the collection tiles the ranks re-running the window fetch from them
// (Engine::tile_to_serve) and the task outputs they send again as activations
// (Engine::replay_logged_outputs). Pure functions of ranks and tile reads; the recovery tests
// compare them with MessageLogStats::bytes_replayed.

#include <algorithm>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "bellows/runtime/task.hpp"

namespace bellows::testing::recovery {

/// A task's output as the job starts: the rank that owns its producer, and the ranks that
/// take it (the owners of its consumer tasks and the holders of the collection tiles it
/// writes), one entry per producer and output slot.
struct OutputTakers {
  int producer_rank = -1;
  std::vector<int> taker_ranks;
};

/// A tile of a collection that a task reads, as the job starts: the rank owning the task and
/// the rank holding the tile.
struct TileRead {
  int task_owner;
  int collection, m, n;
  int holder;
};

/// Per producer and output slot of `classes`, the ranks that take the output as the tasks and
/// tiles lie now: `holder_of(TileIndex)` names the rank holding a collection tile.
template <class HolderOf>
std::vector<OutputTakers> output_takers(const std::vector<std::unique_ptr<runtime::TaskClass>>& classes,
                                        HolderOf holder_of) {
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
        OutputTakers output{tasks->owner(key), {}};
        for (const runtime::Successor& next : successors) {
          output.taker_ranks.push_back(next.kind == runtime::Successor::Kind::task
                                           ? classes.at(next.consumer.task_class)->owner(next.consumer)
                                           : holder_of(next.tile));
        }
        outputs.push_back(std::move(output));
      }
    });
  }
  return outputs;
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
