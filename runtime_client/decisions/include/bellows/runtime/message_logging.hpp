#pragma once
// Team-based message logging, the decisions (Meneses, Kale and Bronevetsky, "Dynamic Load
// Balance for Optimized Message Logging in Fault Tolerant HPC Applications", section III):
// which ranks form a team, which tiles a sender keeps in its log, when a checkpoint releases
// them, whom a rank may steal from, and which ranks roll back when ranks are lost.
//
// A logged tile is named by what produced it, as a receiver names it: the producing task's
// key and output slot (or the collection tile, for a tile served from a collection), and the
// iteration that produced it, its version. A task graph makes exactly one tile per (key,
// version), so a receiver that already holds it recognises a replayed copy.
//
// Nothing here sends a message, reads a clock or takes a lock; every rank decides alike.

#include <span>
#include <vector>

#include "bellows/runtime/options.hpp"

namespace bellows::runtime {

/// Per rank of a job of `ranks` ranks: its team, 0 .. teams-1. From `options.rank_team` when
/// it names exactly `ranks` ranks, else consecutive ranks in teams of `options.team_size`
/// (0: one team; more than `ranks`: one team), or, for a rank_team of another rank count (the
/// job grew or shrank since the plan), of the plan's largest team. Teams are renumbered in
/// order of their first rank. Throws std::invalid_argument, naming the value, for ranks < 1 or
/// options that validate() refuses.
[[nodiscard]] std::vector<int> resolve_teams(const MessageLogOptions& options, int ranks);

/// Whether a tile sent from rank `from` to rank `to` is logged: they are in different teams.
/// Throws std::invalid_argument for a rank outside `rank_team`.
[[nodiscard]] bool logs_message(std::span<const int> rank_team, int from, int to);

/// Whether a log entry of iteration `entry_iteration` is released once the checkpoint at the
/// boundary after iteration `checkpoint_iteration` is complete: a roll-back to that
/// checkpoint replays the iterations after it only.
[[nodiscard]] constexpr bool released_by_checkpoint(long entry_iteration,
                                                    long checkpoint_iteration) noexcept {
  return entry_iteration <= checkpoint_iteration;
}

/// The ranks `rank` may steal from and forward requests to: the other ranks of its team,
/// ascending; every other rank when `steal_across_teams`. Throws std::invalid_argument for a
/// rank outside `rank_team`.
[[nodiscard]] std::vector<int> steal_partners(std::span<const int> rank_team, int rank,
                                              bool steal_across_teams);

/// The ranks that roll back to the checkpoint when the ranks `lost` are lost: every rank of a
/// team that lost one, ascending (section III: the other teams keep their state, and their
/// logs feed the replay). Throws std::invalid_argument for a rank outside `rank_team`.
[[nodiscard]] std::vector<int> ranks_rolling_back(std::span<const int> rank_team,
                                                  std::span<const int> lost);

}  // namespace bellows::runtime
