#pragma once
// Who is left after ranks died, and how they are numbered: the survivors of a communicator keep
// their order, so the first survivor becomes rank 0 of the rebuilt communicator. The membership
// (rebuild.hpp, rebuild_without) carries it out; the dead set itself comes from the control
// plane's agreement, not from here.

#include <span>
#include <vector>

#include "bellows/runtime/shrink_plan.hpp"

namespace bellows::runtime {

/// The ranks of a communicator of `size` ranks that remain once the ranks in `dead` are gone,
/// in increasing order: element i is the old rank of the rebuilt communicator's rank i.
/// `dead` may be in any order. Throws std::invalid_argument naming the problem: `size` below 1,
/// a dead rank outside [0, size), a rank named twice, or every rank dead.
[[nodiscard]] std::vector<int> survivors_without(int size, std::span<const int> dead);

/// The rank that old rank `old_rank` has among `survivors` (survivors_without's result), -1 when
/// it is not among them.
[[nodiscard]] int survivor_rank(std::span<const int> survivors, int old_rank);
/// How a job that holds no tiles (a runtime with no collections: a bag of tasks) carries on
/// after `dead` died: nothing is restored and nothing rolls back, the survivors keep their
/// order (new_rank as survivors_without numbers them), and a dead rank hands nothing to anyone
/// (its backup is -1). Throws what survivors_without throws.
[[nodiscard]] ShrinkPlan plan_survivors_without_data(int size, std::span<const int> dead);

}  // namespace bellows::runtime
