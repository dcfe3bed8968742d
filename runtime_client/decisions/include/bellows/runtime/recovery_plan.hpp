#pragma once
// Recovery after the loss of ranks: whom the job recovers onto, and which checkpoint it
// rolls back to.
//
// The job rolls back to its last checkpoint taken before the failure. A lost rank's tiles
// come from its buddy (buddies.hpp), which holds a copy of its checkpoint; every other rank
// restores its own copy. Then the lost ranks' work goes to the survivors, as at a shrink (a
// ShrinkPlan whose lost ranks' backups are their buddies, and with rebalancing the
// re-grid of regrid.hpp), or to replacement ranks on nodes the controller obtained, as the
// policy's `on_node_loss` says. Which ranks roll back is part of the plan: with one team (no
// message logging) every rank of the job does; with teams (Meneses, Kale & Bronevetsky,
// "Dynamic Load Balance for Optimized Message Logging in Fault Tolerant HPC Applications",
// section III; message_logging.hpp) only the teams that lost a rank, and the team of any
// survivor that takes over a lost rank's tiles, roll back, and choose_checkpoint() takes
// whichever ranks roll back. The others keep their state; team_replay.hpp says what their
// logs send the ranks that rolled back.
//
// Numbering: "old" numbers are the ranks before the failure; "new" numbers those after
// recovery. The survivors keep their order and come first (the first survivor is rank 0,
// as after a shrink), then the replacements in the order of the lost ranks they replace
// (as ranks added by an expand come after the job's).
//
// Nothing here sends a message or reads a clock; every survivor computes the same plan from
// the same inputs, and the controller the same answer to whether the job can recover.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "bellows/runtime/regrid.hpp"
#include "bellows/runtime/shrink_plan.hpp"

namespace bellows::runtime {

/// What the job does with a lost node's work (the policy key `on_node_loss`).
enum class NodeLossAction {
  shrink,   ///< the survivors take it; the job runs on fewer nodes
  replace,  ///< replacement ranks on new nodes take it; lost ranks no node came for shrink
};

[[nodiscard]] std::string_view to_string(NodeLossAction action) noexcept;
/// Parses "shrink" or "replace"; returns false on anything else.
[[nodiscard]] bool parse_node_loss_action(std::string_view text, NodeLossAction& out) noexcept;

/// What plan_recovery() decides from.
struct RecoveryRequest {
  /// Per old rank: the node it ran on.
  std::span<const std::string> hosts;
  /// Per old rank: its buddy when the checkpoint was taken (choose_buddies()), -1 for none.
  std::span<const int> buddies;
  /// The ranks lost, old numbers, in any order.
  std::span<const int> lost;
  NodeLossAction on_node_loss = NodeLossAction::shrink;
  /// Under replace: the new nodes the controller obtained for replacement ranks, one rank
  /// each; more than the lost ranks are not used. Under shrink: 0.
  int replacement_nodes = 0;
  /// The fewest nodes the job may run on (the policy's nodes.min).
  int minimum_nodes = 1;
  /// The tiles' holders before the failure, old numbers; empty to plan no re-grid.
  std::span<const TileHolders> collections;
  /// Per old rank: its team for message logging (resolve_teams()); empty for one team, so
  /// that every rank rolls back.
  std::span<const int> rank_team;
};

/// A lost rank's checkpointed tiles, restored from its buddy.
struct TileRestore {
  int lost_rank = -1;  ///< old number: whose tiles
  int from = -1;       ///< new number of its buddy, which holds the copy
  int to = -1;         ///< new number of the rank that takes them: the buddy, or a replacement
  friend bool operator==(const TileRestore&, const TileRestore&) = default;
};

/// Where one rank's checkpoint comes from at a roll-back.
struct CheckpointSource {
  int owner = -1;   ///< old number: whose checkpoint
  int holder = -1;  ///< old number: whose memory holds the copy used (the owner, or its buddy)
  friend bool operator==(const CheckpointSource&, const CheckpointSource&) = default;
};

/// How the job recovers.
struct RecoveryPlan {
  /// Per old rank: `backup` is itself for a survivor and the buddy for a lost rank;
  /// `new_rank` is the survivor's new number, -1 for a lost rank (its replacement, if any,
  /// is numbered after the survivors; see `replaced`).
  ShrinkPlan ranks;
  /// The lost ranks (old numbers) that replacement ranks take over, in rank order; the
  /// replacement of replaced[i] has new number survivors + i.
  std::vector<int> replaced;
  /// One per lost rank, in rank order.
  std::vector<TileRestore> restores;
  /// The ranks that roll back and where each one's checkpoint comes from, in rank order:
  /// the surviving ones from themselves, the lost ones from their buddies. With one team,
  /// every old rank; with teams, the ranks of `teams_rolling_back`. A survivor not named
  /// here keeps its state.
  std::vector<CheckpointSource> roll_back;
  /// The teams whose ranks roll back, ascending: every team that lost a rank and the team
  /// of every survivor that takes a lost rank's tiles (under shrink, its buddy: it re-runs
  /// the lost rank's work from the checkpoint, so its own must be at the same iteration).
  /// With one team: {0}.
  std::vector<int> teams_rolling_back;
  int survivors = 0;    ///< ranks left of the job
  int nodes_after = 0;  ///< the nodes of the survivors plus one per replacement
  /// With collections: the re-grid over new ranks 0 .. survivors + replacements - 1, the
  /// restored tiles held where `restores` puts them; owners in new numbers.
  std::optional<Regrid> layout;
};

/// The plan, or why the job cannot recover.
struct RecoveryDecision {
  std::optional<RecoveryPlan> plan;
  /// Empty with a plan; otherwise the reason, for the event log and the user, e.g.
  /// "rank 2 and its buddy rank 3 are both lost: no copy of rank 2's checkpoint is left".
  std::string refusal;
};

/// Decides how the job recovers from the loss of `request.lost`. Refused, with the reason,
/// when no rank survives, when a lost rank has no buddy or its buddy is lost too, or when
/// the job would run on fewer nodes than `minimum_nodes`. Throws std::invalid_argument
/// naming the value for inputs that do not fit together: hosts and buddies of different
/// lengths, a buddy or lost rank out of range or named twice, no lost rank, a negative
/// replacement count or one under shrink, a minimum below 1, collections whose holders
/// name ranks out of range, a rank_team of another length than hosts or with a negative
/// team. With teams, a re-grid in `layout` may be carried out only once the replay has
/// brought every rank to the same iteration (it moves tiles between teams).
[[nodiscard]] RecoveryDecision plan_recovery(const RecoveryRequest& request);

/// One copy of one rank's checkpoint, as its holder reports it.
struct CheckpointCopy {
  int owner = -1;        ///< whose tiles (old number)
  int holder = -1;       ///< whose memory holds them (old number)
  long iteration = 0;    ///< the iteration boundary it was taken at
  long tiles_expected = 0;
  long tiles_held = 0;   ///< complete when every expected tile is held

  [[nodiscard]] bool complete() const noexcept { return tiles_held == tiles_expected; }
};

/// Which checkpoint the job rolls back to.
struct CheckpointChoice {
  std::optional<long> iteration;
  /// Empty with an iteration; otherwise the reason.
  std::string refusal;
};

/// The last iteration for which every source in `roll_back` has a complete copy at its
/// holder (a checkpoint still being taken when the failure hit is not used). Refused,
/// naming the rank, when a source has no complete copy, or when the sources have no
/// complete iteration in common. Throws std::invalid_argument for an empty `roll_back`.
[[nodiscard]] CheckpointChoice choose_checkpoint(std::span<const CheckpointCopy> copies,
                                                 std::span<const CheckpointSource> roll_back);

/// Every copy of a checkpoint the job keeps under `buddies`: each rank's own, and for a
/// rank with a buddy the buddy's; in rank order, own copy first.
[[nodiscard]] std::vector<CheckpointSource> kept_copies(std::span<const int> buddies);

/// The copies that may be freed: those older than the last iteration for which every copy
/// in `kept` (kept_copies()) is complete. A holder whose own copy of a newer checkpoint is
/// complete still keeps the older one until that checkpoint is complete everywhere: freed
/// earlier, a failure while the newer one is still arriving elsewhere would leave no
/// iteration that every rank could roll back to.
[[nodiscard]] std::vector<CheckpointCopy> superseded_copies(std::span<const CheckpointCopy> copies,
                                                            std::span<const CheckpointSource> kept);

}  // namespace bellows::runtime
