#pragma once
// After a recovery that rolled back only some teams (recovery_plan.hpp, teams_rolling_back):
// which iterations those teams re-run alone, which log entries the other teams send them, and
// how a receiver recognises a message it already holds (Meneses, Kale and Bronevetsky,
// "Dynamic Load Balance for Optimized Message Logging in Fault Tolerant HPC Applications",
// section II: the late messages are replayed from the senders' logs, the early ones are
// suppressed at their receivers).
//
// The iterations: a loss interrupts iteration `interrupted`; every rank completed the
// iterations before it. The teams that roll back restart after their checkpoint c and re-run
// c + 1 .. interrupted - 1 alone, fed by the other teams' logs; then every rank runs the
// interrupted iteration again together (the others dropped their part of it: it never
// completed, and its messages from the lost ranks never came), which is the first completed
// run of that iteration, not a re-run.
//
// Nothing here sends a message, reads a clock or takes a lock; every rank decides alike.

#include <array>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "bellows/runtime/shrink_plan.hpp"

namespace bellows::runtime {

/// The iterations that the teams rolling back re-run alone.
struct ReplayWindow {
  long checkpoint_iteration = 0;  ///< c: the boundary the teams rolling back restart after
  long interrupted_iteration = 0; ///< the iteration the loss interrupted

  [[nodiscard]] long first() const noexcept { return checkpoint_iteration + 1; }
  [[nodiscard]] long last() const noexcept { return interrupted_iteration - 1; }
  /// interrupted - 1 - c: how many iterations a rank that rolls back runs twice.
  [[nodiscard]] long iterations() const noexcept { return last() < first() ? 0 : last() - first() + 1; }
  [[nodiscard]] bool contains(long iteration) const noexcept {
    return iteration >= first() && iteration <= last();
  }
};

/// The window for a loss in iteration `interrupted` and a roll-back to the checkpoint at the
/// boundary after iteration `checkpoint`. Throws std::invalid_argument naming both when the
/// checkpoint is not before the interrupted iteration, or either is negative.
[[nodiscard]] ReplayWindow replay_window(long checkpoint, long interrupted);

/// What decides, on every survivor alike, whether a recovery may roll back only the teams
/// that lost a rank, from what the survivors gathered (the same values everywhere).
struct TeamRollbackFacts {
  bool logging_between_teams = false;  ///< message logging on with more than one team
  bool steal_across_teams = false;     ///< MessageLogOptions::steal_across_teams
  bool offloading = false;             ///< RuntimeOptions::offload (tasks pushed to other ranks)
  bool resize_under_way = false;       ///< the loss came during a resize or its first iteration
  /// The loss came while an earlier team roll-back's replay ran, or after it before the
  /// checkpoint at the interrupted iteration's start was complete: the survivors hold the
  /// checkpoint that roll-back went to, re-homed for them (rehome_checkpoint()).
  bool replay_under_way = false;
  long fewest_completed = 0;           ///< the fewest iterations any survivor completed
  long most_completed = 0;             ///< the most
  /// The oldest and newest iteration whose start a survivor's kept tiles are of (each rank
  /// keeps its collections' tile pointers as its latest iteration started; -1: none kept).
  long oldest_tiles_kept_at = -1;
  long newest_tiles_kept_at = -1;
};

/// Whether the roll-back is by teams, and if not, why it is global.
struct TeamRollbackChoice {
  bool by_teams = false;
  std::string reason;  ///< why the roll-back is global; empty when by_teams
};

/// Team roll-back (only the teams that lost a rank restart from their checkpoint, the others
/// keep their state and replay their logs) needs: logging between teams; stealing kept inside
/// the teams (a steal across teams would have to be replayed from its determinant) and no
/// proactive offloading (it pushes a team's tasks to other teams' ranks); no resize under way
/// (its moves would mix ranks at different iterations; a recovery's own re-grid waits for the
/// replay's end); every survivor at the same iteration, the one after the last it completed,
/// with its tiles kept as that iteration started (a loss at an iteration's end can leave some
/// survivors past it). The logs may hold collection tiles and task outputs alike: a rank that
/// keeps its state serves the first and sends the second again as activations. No replay
/// under way: its ranks are at different iterations, and no log was kept from its checkpoint
/// for a replay of a replay, so a loss then rolls every rank back to that checkpoint.
/// Otherwise the roll-back is global, as without message logging, and `reason` says why.
[[nodiscard]] TeamRollbackChoice choose_team_rollback(const TeamRollbackFacts& facts);

/// Where a rank outside the teams rolling back replays one entry of its log: the new number
/// of the rank that now does the work of the entry's destination (`destination`, an old
/// number: itself, or for a lost rank the rank `ranks.backup` gives its tiles), or -1 when the
/// entry is not replayed: of an iteration outside `window`, or to a rank that does not roll
/// back (`rolling_back`: old numbers, any order). Throws std::invalid_argument naming the
/// rank for a destination out of range of `ranks` or a lost destination whose backup is lost.
[[nodiscard]] int replay_destination(long entry_iteration, int destination, const ReplayWindow& window,
                                     std::span<const int> rolling_back, const ShrinkPlan& ranks);

/// One survivor's copy of the checkpoint a team roll-back went to, as a recovery re-homes it
/// before the replay (docs/teams.md, "A loss during the replay"): the tiles the survivor holds
/// now, from its own copy and the copies of the lost ranks whose tiles it took (its buddy's
/// copies of them), kept by its new buddy.
struct RehomedCopy {
  int owner = -1;  ///< the survivor, new number
  /// The old ranks whose copies it joins: the survivor itself and the lost ranks whose
  /// tiles it took (ShrinkPlan::backup), ascending.
  std::vector<int> made_of;
  int buddy = -1;  ///< its buddy among the survivors (new number), -1: none
  /// Whether the owner sends it to `buddy`: not when the buddy already holds every tile of
  /// it (it was the survivor's buddy before the loss, and the survivor took no lost rank's
  /// tiles), and not without a buddy.
  bool sent = false;
  friend bool operator==(const RehomedCopy&, const RehomedCopy&) = default;
};

/// The re-homing of a checkpoint's copies for the survivors, one per survivor in new order:
/// `old_buddies` per old rank (under which the checkpoint was taken, -1 for none), `ranks`
/// the recovery's renumbering (a lost rank's backup holds its copy), `new_buddies` per
/// survivor (choose_buddies() over the survivors). A copy is sent when its holder is lost,
/// when the survivor's new buddy is another rank, or when it joins a lost rank's copy. Throws
/// std::invalid_argument naming the value when the lengths do not fit together, a buddy is
/// out of range, or a lost rank's backup is not a survivor.
[[nodiscard]] std::vector<RehomedCopy> rehome_checkpoint(std::span<const int> old_buddies, const ShrinkPlan& ranks,
                                                         std::span<const int> new_buddies);

/// Whether an entry of iteration `entry_iteration` stays in a surviving sender's log at the
/// recovery: entries of the interrupted iteration or later go, since every rank runs that
/// iteration again and logs its messages anew.
[[nodiscard]] constexpr bool kept_at_recovery(long entry_iteration, const ReplayWindow& window) noexcept {
  return entry_iteration < window.interrupted_iteration;
}

/// The tasks of each old rank that run twice because of the roll-back (the protocol's
/// prediction of the work redone): `tasks_per_iteration[r]` times the window's iterations for
/// a rank of `rolling_back`, 0 for the others. A lost rank's count is run again by the rank
/// that took its tiles. Throws std::invalid_argument naming the rank for a rank of
/// `rolling_back` out of range.
[[nodiscard]] std::vector<long> tasks_rerun(std::span<const long> tasks_per_iteration,
                                            std::span<const int> rolling_back, const ReplayWindow& window);

/// What names one message as its receiver holds it: what produced it (a task's class, index
/// and output slot, or a collection's tile) and its version, the iteration that produced it.
/// A task graph makes exactly one tile per (producer, version).
struct MessageVersion {
  bool from_collection = false;
  std::int32_t producer = 0;  ///< the task class, or the collection
  std::array<std::int32_t, 3> index{};  ///< the task's index, or the tile's (m, n, 0)
  std::int32_t slot = 0;      ///< the producer's output slot; 0 for a collection tile
  long version = 0;

  friend auto operator<=>(const MessageVersion&, const MessageVersion&) = default;
};

/// The messages a rank received since its last complete checkpoint, by what names them: a
/// message received again (a team that rolled back re-sends what it sent before the loss)
/// is recognised and dropped. Released with the log, at a complete checkpoint. Not
/// thread-safe.
class ReceivedVersions {
 public:
  /// Records `message`; true when it is the first time, false for a copy already received.
  bool first_receipt(const MessageVersion& message);
  /// The checkpoint at the boundary after `checkpoint_iteration` is complete everywhere:
  /// forgets the versions up to it (released_by_checkpoint()).
  void release_through(long checkpoint_iteration);
  /// A recovery: forgets the versions of `iteration` and later, which the rank receives again
  /// and must take (a rank that rolls back to the checkpoint after c forgets from c + 1; one
  /// that keeps its state, from the interrupted iteration, which every rank runs again).
  void forget_from(long iteration);
  [[nodiscard]] std::size_t size() const noexcept { return received_.size(); }
  /// Copies dropped since construction.
  [[nodiscard]] long duplicates() const noexcept { return duplicates_; }

 private:
  std::set<MessageVersion> received_;
  long duplicates_ = 0;
};

}  // namespace bellows::runtime
