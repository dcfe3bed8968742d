#pragma once
// What a bag of tasks (task_bag.hpp) runs again after ranks were lost: every index whose result
// no survivor holds. A rank keeps the ranges its workers finished, merged (BagFinishedRanges);
// the digests of those tasks live in its memory alone, so a lost rank takes with it the tasks
// it finished as well as those it held, had granted on, or was running. The survivors gather
// their finished ranges and each computes the same complement (plan_bag_rerun), which they run
// as a new bag; what they finished is not redone, and since each index was given to at most
// one rank, each index of the complement runs once more and no other does.
//
// Pure functions of values: no MPI, threads, clock or I/O.

#include <cstdint>
#include <span>
#include <vector>

#include "bellows/runtime/dtree.hpp"

namespace bellows::runtime {

/// The ranges of a bag's indices one rank finished, ascending, disjoint and merged where they
/// touch.
class BagFinishedRanges {
 public:
  /// Records `range` as finished (nothing for an empty range). Throws std::invalid_argument
  /// when it overlaps what is already recorded (an index finished twice on one rank) or ends
  /// before it begins.
  void add(IndexRange range);
  [[nodiscard]] std::span<const IndexRange> ranges() const noexcept { return ranges_; }
  /// Indices recorded.
  [[nodiscard]] std::int64_t tasks() const noexcept { return tasks_; }

 private:
  std::vector<IndexRange> ranges_;
  std::int64_t tasks_ = 0;
};

/// A range a surviving rank finished, as the survivors gather them.
struct BagFinished {
  int rank = -1;  ///< the survivor that holds its results (for error texts)
  IndexRange range;
  friend bool operator==(const BagFinished&, const BagFinished&) = default;
};

/// What the survivors run again.
struct BagRerun {
  std::vector<IndexRange> ranges;  ///< ascending, disjoint, merged where they touch
  std::int64_t tasks = 0;          ///< indices in `ranges`: run again
  std::int64_t kept = 0;           ///< indices the survivors finished: not redone
};

/// The indices of `bag` (the run's ranges, ascending and disjoint) that no range of `finished`
/// covers. Throws std::invalid_argument, naming the rank and the range, when a finished range
/// ends before it begins or is not inside the bag's ranges, when two finished ranges overlap
/// (an index run twice: both ranks and ranges named), and when the bag's own ranges are not
/// ascending and disjoint.
[[nodiscard]] BagRerun plan_bag_rerun(std::span<const IndexRange> bag,
                                      std::span<const BagFinished> finished);

}  // namespace bellows::runtime
