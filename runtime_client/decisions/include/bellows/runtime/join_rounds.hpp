#pragma once
// The rounds of the join tree (docs/runtime.md, "Joins"): the k processes a grow adds, numbered
// by their ordinal 0..k-1, become one group in ceil(log2 k) rounds. In round r (step s = 2^r)
// the group that starts at a multiple of 2s accepts the group that starts s after it, which
// connects; the merged group starts where the accepting one did. The grows carry the rounds out
// (membership: join_tree.cpp, join_by_ordinal.cpp) and the simulator times them
// (sim/src/join.cpp); both take them from here.

#include <vector>

namespace bellows::runtime {

/// One round of the join tree as one process takes part in it.
struct JoinRound {
  int round = 0;              ///< 0, 1, ...: the step is 2^round
  int accepting_leader = 0;   ///< first ordinal of the group that accepts
  int connecting_leader = 0;  ///< first ordinal of the group that connects
  bool accepts = false;       ///< the process's own group is the accepting one
  int own_size = 0;           ///< processes in the process's group before the merge
  int partner_size = 0;       ///< processes in the other group

  /// The first ordinal of the process's own group: the one that speaks for it this round.
  [[nodiscard]] int own_leader() const { return accepts ? accepting_leader : connecting_leader; }
  /// The first ordinal of the other group.
  [[nodiscard]] int partner_leader() const { return accepts ? connecting_leader : accepting_leader; }
};

/// Rounds of the join tree for `count` new processes: ceil(log2 count), 0 for one. Throws
/// std::invalid_argument for a count below 1.
[[nodiscard]] int join_round_count(int count);

/// The rounds in which the group of new process `ordinal` of `count` merges with another, in
/// order; a round in which its group has no partner is left out. After a round in which its
/// group connects, the process is a member of the merged group and takes part in that group's
/// later rounds under the merged group's leader. Throws
/// std::invalid_argument for a count below 1 or an ordinal outside [0, count).
[[nodiscard]] std::vector<JoinRound> join_rounds(int ordinal, int count);

/// True when new process `ordinal` of `count` leads the accepting group of round `round`, so
/// that it opens the port of that round.
[[nodiscard]] bool leads_accept_in_round(int ordinal, int count, int round);

}  // namespace bellows::runtime
