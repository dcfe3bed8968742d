#pragma once
// Who takes a leaving rank's data at a shrink, and how the ranks that stay are numbered
// afterwards. The engine (engine_mapping.cpp) counts the tiles each rank holds and carries
// the plan out; every rank computes the same plan from the same counts. The same backup
// rule (choose_backup) picks each rank's checkpoint buddy (buddies.hpp), and a recovery
// plan (recovery_plan.hpp) is a ShrinkPlan whose lost ranks' backups are their buddies.

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

namespace bellows::runtime {

/// The outcome of plan_shrink(), indexed by rank numbers before the shrink.
struct ShrinkPlan {
  /// Per rank: itself when it stays; for a leaver, the staying rank that takes its tiles
  /// (and, without rebalancing, its place on the grid).
  std::vector<int> backup;
  /// Per rank: its number after the shrink, -1 for a leaver. Survivors keep their order.
  std::vector<int> new_rank;

  [[nodiscard]] bool leaves(int rank) const noexcept {
    return rank >= 0 && new_rank[static_cast<std::size_t>(rank)] < 0;
  }
};

/// The backup rule, for one rank: among the ranks `eligible` accepts (never `rank` itself),
/// the one whose `load` is least, ties to the first after `rank` in ring order; -1 when no
/// rank is eligible. plan_shrink() picks leavers' backups with it, choose_buddies() the
/// holders of checkpoints.
[[nodiscard]] int choose_backup(std::span<const long> load, int rank,
                                const std::function<bool(int)>& eligible);

/// The plan for removing `leaving` from `held.size()` ranks, where `held[r]` is the number of
/// tiles (over all collections) rank r holds now. Each leaver's backup is the staying rank
/// that holds the least data, the leaver's own tiles counted as soon as it is chosen (ties:
/// the first after the leaver in ring order), chosen leaver by leaver in rank order, so that
/// removing a block of ranks spreads their data instead of piling it on one neighbour.
/// Throws std::invalid_argument naming the rank when a leaver is rank 0 (it stays), out of
/// range, or named twice.
[[nodiscard]] ShrinkPlan plan_shrink(std::span<const long> held, std::span<const int> leaving);

}  // namespace bellows::runtime
