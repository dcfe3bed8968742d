#pragma once
// Who is left after ranks died, and how they are numbered: the survivors of a communicator keep
// their order, so the first survivor becomes rank 0 of the rebuilt communicator. The membership
// (rebuild.hpp, rebuild_without) carries it out; the dead set itself comes from the control
// plane's agreement, not from here.

#include <span>
#include <vector>

namespace bellows::runtime {

/// The ranks of a communicator of `size` ranks that remain once the ranks in `dead` are gone,
/// in increasing order: element i is the old rank of the rebuilt communicator's rank i.
/// `dead` may be in any order. Throws std::invalid_argument naming the problem: `size` below 1,
/// a dead rank outside [0, size), a rank named twice, or every rank dead.
[[nodiscard]] std::vector<int> survivors_without(int size, std::span<const int> dead);

/// The rank that old rank `old_rank` has among `survivors` (survivors_without's result), -1 when
/// it is not among them.
[[nodiscard]] int survivor_rank(std::span<const int> survivors, int old_rank);

}  // namespace bellows::runtime
