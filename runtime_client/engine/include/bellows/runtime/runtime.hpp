#pragma once
// libbellows: a distributed dataflow task runtime over MPI.

#include <cstdint>
#include <memory>
#include <mpi.h>
#include <optional>
#include <stdexcept>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/options.hpp"
#include "bellows/runtime/recovery_plan.hpp"
#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/task_graph.hpp"
#include "bellows/runtime/task.hpp"

namespace bellows::runtime {

class Engine;

/// What a resize did to the ownership of tiles (the same on every rank).
struct Rebalance {
  std::uint64_t tiles = 0;  ///< collection tiles whose owner changed
  std::uint64_t tasks = 0;  ///< tasks of an iteration whose rank changed with them
};

/// What the first half of a shrink did on this rank.
struct ShrinkHandoff {
  bool leaving = false;               ///< this rank leaves
  int new_rank = -1;                  ///< its rank among the survivors (-1 on leavers)
  std::uint64_t tiles_sent = 0;       ///< collection tiles handed to backups
  std::uint64_t tiles_received = 0;   ///< collection tiles taken over as a backup
  std::uint64_t bytes_moved = 0;      ///< sent plus received
  double seconds = 0.0;
  /// Ranks found lost during the hand-off (numbers before the shrink): the shrink is given
  /// up on this rank and nothing changed; the next run_iteration() reports them, and the job
  /// recovers from its last checkpoint, whose copies are kept. Empty when the hand-off
  /// completed everywhere.
  std::vector<int> lost;
};

/// What Runtime::prepare_shrink() does, once the hand-off completed on every rank, with the
/// state the shrink leaves behind: the buddies' checkpoint copies from before it, the tiles
/// and mapping as they were, and the runtime's duplicate of the job's communicator.
enum class StateBeforeShrink {
  released,  ///< let go of at once (the copies dropped, the duplicate disconnected)
  held,      ///< kept until release_state_before_shrink() or give_up_hand_off()
};

/// How Runtime::release_state_before_shrink() lets go of its duplicate of the job's
/// communicator.
enum class OldCommunicator {
  disconnect,  ///< every rank alive and letting go of it too (the shrink confirmed, nobody lost)
  free,        ///< a rank was lost around the shrink's confirmation: freed, never disconnected
};

/// What Runtime::recover() did on this rank.
struct RecoveryReport {
  /// The checkpoint rolled back to: the iterations completed at it. The next run_iteration()
  /// is iteration + 1, and the application's loop resumes there.
  long iteration = 0;
  std::vector<int> lost;  ///< the ranks lost, numbers before the recovery, ascending
  /// The iteration the loss interrupted: the one after the last that any survivor completed,
  /// the same on every survivor (a loss during an iteration's end may leave some survivors
  /// past it, and others reporting the loss in it).
  long interrupted_iteration = 0;
  /// The iterations completed before the loss that the ranks rolling back run again:
  /// interrupted_iteration - 1 - iteration (team_replay.hpp, ReplayWindow).
  long iterations_redone = 0;
  /// The ranks that rolled back to the checkpoint, numbers before the recovery, ascending
  /// (RecoveryPlan::roll_back). With message logging between teams, where
  /// choose_team_rollback() allows it, the ranks of the teams that lost a rank (and of the
  /// team of each lost rank's buddy): they re-run the iterations after the checkpoint alone
  /// (IterationReport::replaying_ranks), and the other ranks keep their state, the tiles as
  /// the interrupted iteration started (docs/teams.md). Otherwise every rank of the job.
  /// Empty for a runtime with no collections: it restores nothing.
  std::vector<int> ranks_rolled_back;
  /// The message-logging teams of those ranks, ascending; {0} without message logging.
  std::vector<int> teams_rolled_back;
  /// Why every rank rolled back although messages are logged between teams
  /// (choose_team_rollback()'s reason); empty when only some teams rolled back, or without
  /// message logging.
  std::string rolled_back_globally_because;
  /// On a rank that kept its state: the bytes of its log that the replay may serve (the
  /// collection tiles it sent in the iterations re-run to ranks that roll back); 0 elsewhere.
  std::uint64_t log_bytes_for_replay = 0;
  /// Counted as the replay runs, so complete once the interrupted iteration has run again:
  /// on a rank that kept its state, the bytes its log actually served to the replay
  /// (MessageLogStats::bytes_replayed of the window's iterations); 0 elsewhere.
  std::uint64_t bytes_replayed = 0;
  /// Likewise: the task outputs the replay sent this rank again, which it dropped as copies
  /// it held (MessageLogOptions::replay_to_ranks_kept; MessageLogStats::copies_dropped).
  std::uint64_t copies_dropped = 0;
  /// Where only some teams rolled back and iterations are redone: the bytes of the copies of
  /// the checkpoint rolled back to that this rank sent its new buddy as the survivors
  /// re-homed them, before the replay (docs/teams.md, "A loss during the replay"); 0 elsewhere.
  std::uint64_t checkpoint_bytes_rehomed = 0;
  int old_rank = -1;
  int old_size = 0;
  int new_rank = -1;
  int new_size = 0;
  std::uint64_t tiles_restored = 0;     ///< tiles installed here from checkpoint copies
  std::uint64_t tiles_taken_over = 0;   ///< of which lost ranks' tiles (this rank was a buddy)
  std::uint64_t tiles_regridded = 0;    ///< tiles the re-grid moved onto the survivors
  double seconds = 0.0;
  /// Of `seconds`: the re-grid's moves and the checkpoint of the state restored, taken under
  /// the new buddies and completed before recover() returned; where only some teams rolled
  /// back and iterations are redone, the re-homing of the checkpoint rolled back to.
  double checkpoint_seconds = 0.0;
};

/// What Runtime::finish() found at the job's end (docs/recovery.md, "The end of a job").
struct JobEnd {
  /// completed(): every rank reached the end after the same last iteration, and rank 0 holds
  /// what was asked for. Otherwise `lost_ranks` names the ranks lost there (numbers in the
  /// communicator the job ran on) and `iteration` is the one after the last iteration the job
  /// completed, as an abandoned iteration reports it: the survivors recover from it
  /// (ElasticJob::recover, ElasticSession::recover), run the iterations after the checkpoint
  /// again and call finish() again.
  IterationReport report;
  /// On rank 0, per collection asked for, in that order: the whole matrix, column-major, as
  /// TiledMatrix::gather_to_root lays it out (0.0 where a tile is not kept). Empty elsewhere.
  std::vector<std::vector<double>> gathered;
  /// On rank 0: every rank's statistics, as gather_stats() returns them. Empty elsewhere.
  std::vector<RankStats> stats;
  [[nodiscard]] bool completed() const noexcept { return report.completed(); }
};

/// Teams TeamLB chose between iterations (MessageLogOptions::plan_teams; docs/teams.md).
struct TeamsApplied {
  int before_iteration = 0;   ///< the first iteration run with these teams
  std::vector<int> rank_team;  ///< per rank: its team
  std::size_t tiles_moved = 0;
  /// What plan_teams() predicts for one iteration with these teams and tiles: the share of
  /// the bytes sent between ranks that crosses teams, and per rank the bytes it logs.
  double predicted_cut = 0.0;
  std::vector<double> predicted_logged_bytes;
  /// The most imbalanced team's I = (max - avg) / avg, with the tiles before and after.
  double imbalance_before = 0.0;
  double imbalance_after = 0.0;
  /// The iterations whose measured seconds the plan weighed (each tile by its median over
  /// them, MessageLogOptions::load_window): 1 for the first plan after an attach.
  int iterations_weighed = 0;
  /// Whether these teams replaced teams TeamLB chose before on the same ranks (a re-plan at
  /// a checkpoint boundary, MessageLogOptions::replan), and its predicted gain: the fall of
  /// the heaviest rank's seconds, as a fraction of its seconds under the teams before.
  bool replanned = false;
  double predicted_gain = 0.0;
  /// Per rank: how many times longer per flop than the median rank its tiles' tasks took,
  /// class by class (rank_slowness_by_class, team_load.hpp), as the plan weighed it; 1 within
  /// the tolerance of 25 %.
  std::vector<double> rank_slowness;
};

/// Thrown by Runtime::recover(), alike on every survivor, when the job cannot recover: the
/// refusal of plan_recovery() or choose_checkpoint() (e.g. "rank 1 and its buddy rank 2 are
/// both lost: no copy of rank 1's checkpoint is left"), or checkpoints that are off.
class RecoveryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thrown by Runtime::recover() on the survivors that find more of them lost during the
/// recovery itself (while they gather their checkpoint copies). The runtime is left as before
/// the call: the survivors may rebuild `survivors` without the newly lost (rebuild_after_loss)
/// and call recover() again with the larger set, the old numbers of both losses
/// (ElasticJob::recover does).
class LostDuringRecovery : public RecoveryError {
 public:
  LostDuringRecovery(const std::string& what, std::vector<int> lost_survivors, std::vector<int> lost_ranks)
      : RecoveryError(what), lost_survivors_(std::move(lost_survivors)), lost_ranks_(std::move(lost_ranks)) {}
  /// The newly lost, as ranks of the survivors' communicator recover() was given, ascending.
  [[nodiscard]] const std::vector<int>& lost_survivors() const noexcept { return lost_survivors_; }
  /// The same ranks numbered as before the recovery (the numbers recover() takes), ascending.
  [[nodiscard]] const std::vector<int>& lost_ranks() const noexcept { return lost_ranks_; }

 private:
  std::vector<int> lost_survivors_;
  std::vector<int> lost_ranks_;
};

/// One rank's share of the runtime. Works on the communicator it is given (never on
/// MPI_COMM_WORLD), so the communicator can be replaced while the job runs.
///
/// Usage: register task classes and collections, then call run_iteration() on every
/// rank of the communicator, as many times as wanted. Between iterations the caller
/// may use MPI freely; during an iteration only the runtime's communication thread
/// calls MPI, so MPI_THREAD_SERIALIZED is enough.
///
/// Thread safety: all methods are to be called from one thread (the application's).
class Runtime {
 public:
  /// comm is duplicated; the duplicate is freed by the destructor. Collective over comm: the
  /// duplicate, the same-host probe and the gather of the ranks' nodes, each watched for lost
  /// members (errors returned meanwhile). A member lost there does not end this rank: on a
  /// rank an expand adds join_expansion() returns the lost ranks (the expand is given up),
  /// and elsewhere run_iteration() throws std::runtime_error naming them.
  Runtime(MPI_Comm comm, RuntimeOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  [[nodiscard]] int rank() const noexcept;
  [[nodiscard]] int size() const noexcept;
  [[nodiscard]] MPI_Comm communicator() const noexcept;
  [[nodiscard]] const RuntimeOptions& options() const noexcept;

  /// Registers a task class; its id() must equal the number of classes added before.
  void add_task_class(std::unique_ptr<TaskClass> task_class);
  /// Registers a collection (not owned); its id() must equal the number added before.
  void add_collection(TiledMatrix& collection);

  /// Runs every task of the registered classes once. Collective.
  IterationReport run_iteration();

  /// Moves the runtime onto a grown communicator, between iterations (expand).
  /// `comm` must hold every rank of the current one with the same rank number, plus new
  /// ranks at the end (what grow_by_spawn() returns). Collective in two parts: every
  /// rank of `comm`, new ones included (which construct their Runtime on `comm` instead),
  /// takes a duplicate of it and receives rank 0's mapping state, and then every current
  /// member disconnects its duplicate of the old communicator (MPI_Comm_disconnect, so
  /// that ranks can later leave). With RuntimeOptions::rebalance_on_resize, rank 0 also re-grids
  /// the collections for the new size (regrid.hpp); the tiles change hands at the start
  /// of the next iteration (collective, before its tasks are known). Without it, new
  /// ranks get work by stealing only; with it, stealing evens out what is left. Throws
  /// std::invalid_argument when `comm` is not a grown copy of the current communicator.
  /// Until every rank of `comm` holds the mapping state (a barrier after it) the runtime keeps
  /// its communicator from before, the buddies' copies and the message log's teams and entries,
  /// and every step (the same-host probe included) is watched for lost
  /// ranks (docs/recovery.md, "A loss during the expand itself"): returns the ranks of `comm`
  /// lost before that, the runtime then as it was before the call (the expand is to be given
  /// up), or an empty list once it moved onto `comm` (the old communicator disconnected).
  std::vector<int> expand_onto(MPI_Comm comm);
  /// On a rank added by an expand, right after constructing the runtime on the grown
  /// communicator and before adding collections and task classes: ranks from
  /// `first_new_rank` on are the new ones (the size before the expand). Collective with
  /// the old ranks' expand_onto(): the new rank receives the mapping state (which ranks
  /// are new, each collection's placement and per-tile owners, the tiles it is to take
  /// over, the pinned tasks). Without RuntimeOptions::rebalance_on_resize, the tasks that
  /// new ranks steal after it become theirs for good (see pinned()); with it, the new
  /// ranks own tiles and what they steal stays a steal.
  /// Returns the ranks lost before every rank held the mapping state (watched as
  /// expand_onto() is, and so was this runtime's construction; the expand is then given up
  /// and this rank is to leave), else an empty list.
  std::vector<int> join_expansion(int first_new_rank);
  /// First half of a shrink, between iterations; collective over the current
  /// communicator, every rank passing the same `leaving` list (rank 0 may not leave).
  /// Each leaving rank has a backup, the staying rank that holds the least data (ties:
  /// the first after it in ring order), chosen leaver by leaver. With
  /// RuntimeOptions::rebalance_on_resize the collections re-grid onto the survivors
  /// (regrid.hpp: survivors exchange tiles too, so that the next iteration runs as a job
  /// started on them would); without it every tile of a leaver goes to its backup and the
  /// others stay (John & Milthorpe,
  /// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
  /// CCGrid 2024, section V). The tiles are sent, every collection's placement
  /// and per-tile owners and the pinned tasks are rewritten for the survivors'
  /// numbering (tasks and messages that were the leavers' now go to the new owners;
  /// tasks pinned to a leaver go back to their tile's owner), and the runtime
  /// disconnects its duplicate of the communicator. Then shrink the job communicator
  /// (Membership::shrink) and, on the survivors, call attach_shrunk(); a leaver can only
  /// destroy its runtime. The hand-off is watched (every peer, errors returned) and ends
  /// with a barrier before anything changes: a rank lost there gives the shrink up on the
  /// ranks that find it (ShrinkHandoff::lost; the runtime, its checkpoint copies and its
  /// communicator as before the call), and the next run_iteration() reports the loss.
  /// With StateBeforeShrink::held the copies, the tiles and mapping from before and the
  /// duplicate outlive the hand-off, so that a rank lost after its barrier, before the
  /// survivors' communicator is made, can still give the shrink up (give_up_hand_off()); the
  /// caller lets go of them (release_state_before_shrink()) before the job's communicator is
  /// disconnected (ShrinkLossWatch::before_disconnect of Membership::shrink).
  ShrinkHandoff prepare_shrink(std::span<const int> leaving,
                               StateBeforeShrink state = StateBeforeShrink::released);
  /// After prepare_shrink(..., held): drops the checkpoint copies and the mapping from before,
  /// and disconnects the runtime's duplicate, as prepare_shrink() does with `released` (frees
  /// it with OldCommunicator::free). Throws std::logic_error when nothing is held, or while the
  /// survivors' checkpoint awaits confirm_shrunk_checkpoint().
  void release_state_before_shrink(OldCommunicator old = OldCommunicator::disconnect);
  /// After prepare_shrink(..., held), on every rank alike (leavers too), when a rank was lost
  /// after the hand-off's barrier: the hand-off is undone (every rank's tiles, mapping and
  /// pinned tasks as before prepare_shrink; the copies from before kept), the shrink is over,
  /// and the next run_iteration() on the job's communicator finds the loss, which recover()
  /// rolls back from the copies from before the shrink. Throws std::logic_error when nothing
  /// is held.
  void give_up_hand_off();
  /// Second half of a shrink, on the survivors: the runtime continues on `survivors`.
  void attach_shrunk(MPI_Comm survivors);
  /// Second half of a shrink, on the survivors, after prepare_shrink(..., held) and before the
  /// state from before is let go of: collective over `survivors` (once every survivor holds
  /// it, before the barrier that confirms it over the job's communicator). The runtime moves
  /// onto `survivors` and completes its first checkpoint under the survivors' buddies (every
  /// tile, sent and confirmed by a barrier) while it keeps the job's communicator, the copies
  /// from before the shrink and the tiles as they were. So a rank that stays, lost after the
  /// leavers have gone, rolls back to this checkpoint instead of being refused. Every step is
  /// watched (errors returned): returns the survivors found lost (numbers of `survivors`),
  /// the runtime back on the job's communicator as before the call, except when they were
  /// found in the checkpoint's last barrier (see confirm_shrunk_checkpoint()); empty when the checkpoint
  /// is complete on every survivor. Then release_state_before_shrink() lets go of the job's
  /// communicator and the copies from before (attach_shrunk() is not called), or, when the
  /// shrink is not confirmed after all, leave_unconfirmed_survivors() or give_up_hand_off()
  /// puts the runtime back. With checkpoints off it only moves onto `survivors`.
  [[nodiscard]] std::vector<int> attach_shrunk_checkpointed(MPI_Comm survivors);
  /// After attach_shrunk_checkpointed() found a survivor lost in the barrier that ends the
  /// checkpoint (the transfers complete here; the runtime then stays on `survivors`), once the
  /// shrink's confirmation learned that another rank that stays passed that barrier: the
  /// checkpoint is complete on every survivor, and this rank takes it as such, as if its own
  /// barrier had passed. Throws std::logic_error in any other state. Without it,
  /// leave_unconfirmed_survivors() or give_up_hand_off() puts the runtime back.
  void confirm_shrunk_checkpoint();
  /// After attach_shrunk_checkpointed() succeeded, when a rank was lost before the shrink was
  /// confirmed: the runtime back on the job's communicator (the survivors' duplicate freed,
  /// the checkpoint under it dropped), the state from before still held. Nothing when it is
  /// not on the survivors' communicator.
  void leave_unconfirmed_survivors();
  /// After run_iteration() reported lost ranks (IterationReport::lost_ranks), on every
  /// survivor, collective over `survivors`: the job's communicator rebuilt without `lost`
  /// (rebuild_without(), which also agrees on the set; `lost` holds at least the ranks this
  /// rank's report named, numbers of the communicator the iteration ran on). The runtime
  /// frees its duplicate of the old communicator (never disconnects it: a dead peer would
  /// make that wait), gathers every survivor's checkpoint copies, and decides as at a
  /// shrink (plan_recovery, on_node_loss shrink): each lost rank's tiles go to its buddy and
  /// the survivors are renumbered in their old order. It rolls back to the checkpoint
  /// choose_checkpoint() picks: every survivor installs its own copy of its tiles at that
  /// iteration, and each buddy the copy of its lost ward's, all from its own memory. With
  /// RuntimeOptions::rebalance_on_resize the collections then re-grid onto the survivors,
  /// as after a shrink, and the state restored is checkpointed under the new buddies and
  /// completed before this call returns, so that a loss in the next iteration rolls back to
  /// it (a survivor lost during that checkpoint is reported by the next run_iteration(); one
  /// lost during the re-grid's moves makes this call throw RecoveryError naming the phase
  /// and the ranks). The copies are gathered while every survivor is watched
  /// (a zero-byte receive from each): a survivor that dies then makes this call throw
  /// LostDuringRecovery on the survivors that find it, with the runtime unchanged, so that
  /// they can rebuild again and fold the loss in. Throws RecoveryError when the job cannot
  /// recover, std::invalid_argument when `survivors` or `lost` do not fit this rank's view.
  /// A survivor that dies after the gather (while the runtime attaches to `survivors`) is
  /// found by the next run_iteration().
  /// A runtime with no collections holds nothing to restore, so it needs no checkpoint: it
  /// renumbers the survivors in their old order (plan_survivors_without_data) and carries on
  /// at the iterations completed (the abandoned one, if any, is run again); this is also how
  /// it follows a communicator that code of its own rebuilt between iterations (a TaskBag's
  /// run, ElasticJob::adopt_survivors), with `lost` the ranks that run lost.
  RecoveryReport recover(MPI_Comm survivors, std::span<const int> lost);
  /// The job's end, after its last iteration, on every rank: collective over the communicator,
  /// watched as an iteration is (every peer, errors returned). Gathers to rank 0 the tiles of
  /// `gather` (registered collections), every rank's statistics (as gather_stats()), and ends
  /// with a barrier, so that no rank leaves before rank 0 holds all of it. A rank lost on the
  /// way is reported as by an abandoned iteration (JobEnd::report); the application recovers
  /// from it as from any loss and calls finish() again once it ran the last iteration again.
  /// A rank lost after that barrier completed on some ranks but not on others leaves those
  /// others in their recovery until its deadline (RebuildError): such a job ends, it never
  /// hangs. Throws std::invalid_argument naming a collection that is not registered, and
  /// std::logic_error where run_iteration() would (lost ranks not yet recovered from).
  JobEnd finish(std::span<const TiledMatrix* const> gather = {});
  /// What every recover() of this rank that returned reported, oldest first; the latest's
  /// bytes_replayed and copies_dropped grow as the replay after it runs.
  [[nodiscard]] const std::vector<RecoveryReport>& recoveries() const noexcept;
  /// Tasks pinned to ranks added by an expand: key -> rank. The same on every rank;
  /// changes only between iterations.
  [[nodiscard]] const std::unordered_map<TaskKey, int>& pinned() const noexcept;
  /// What the latest expand_onto() / join_expansion() or prepare_shrink() moved.
  [[nodiscard]] Rebalance last_rebalance() const noexcept;
  /// The whole iteration's task graph weighted by this rank's cost model: summed compute
  /// seconds and critical path (task_graph.hpp). Walks every task class once, the first
  /// time, then reweights the stored graph (linear in tasks and dependencies). Between
  /// iterations only; not collective.
  [[nodiscard]] GraphProfile graph_profile() const;
  /// Tasks this rank's device runs at once.
  [[nodiscard]] int lanes() const noexcept;
  /// Statistics accumulated over all iterations so far.
  [[nodiscard]] const RankStats& stats() const noexcept;
  /// Rank statistics of all ranks, gathered to rank 0 (empty elsewhere). Collective, not
  /// watched: at the job's end, finish() gathers them watched (JobEnd::stats).
  [[nodiscard]] std::vector<RankStats> gather_stats() const;
  // ---- buddy checkpoints (RuntimeOptions::checkpoint; docs/recovery.md, "Recovery") ----
  //
  // At the iteration boundaries the checkpoint-interval decision picks (and at the first,
  // and the first after a resize), every rank keeps its own copy of the tiles it owns in
  // the registered collections and sends a copy to its buddy (choose_buddies: a rank of
  // another node; with message logging, of its own team where the team has another node),
  // which holds it in memory. The sends overlap the iteration that follows
  // and complete by its end; a copy is freed once a newer checkpoint is complete at every
  // holder (superseded_copies). A checkpoint is addressed by its iteration: the tiles as
  // they were after that many iterations (counted as IterationReport::iteration), which is
  // what the next iteration started from.

  /// Collective, between iterations: for every source, the copy of `source.owner`'s tiles at
  /// checkpoint `iteration` held by `source.holder` (the owner itself or its buddy) replaces
  /// the owner's tiles; ranks no source names keep theirs. The copy is bit-identical to the
  /// tiles at the boundary. Throws std::invalid_argument, on every rank alike, naming what is
  /// wrong (no complete checkpoint of that iteration, a holder without that copy, an owner
  /// named twice, a rank out of range).
  void restore_checkpoint(long iteration, std::span<const CheckpointSource> sources);
  /// Every checkpoint copy this rank holds (its own and its wards'), oldest first.
  [[nodiscard]] std::vector<CheckpointCopy> checkpoint_copies() const;
  /// Per rank: its buddy under the latest checkpoint (-1: none on another node); empty
  /// before the first checkpoint.
  [[nodiscard]] std::vector<int> checkpoint_buddies() const;
  /// The latest checkpoint complete at every holder; nullopt: none.
  [[nodiscard]] std::optional<long> last_checkpoint() const;
  /// Team-based message logging (RuntimeOptions::message_log): per rank its team now (empty
  /// when logging is off), and the latest plan TeamLB applied (nullopt: none).
  [[nodiscard]] std::vector<int> teams() const;
  [[nodiscard]] std::optional<TeamsApplied> teams_applied() const;

  /// Tasks that work stealing moved, as key -> rank that ran them: the override table
  /// on top of the fixed mapping, recorded on both the victim and the thief. Holds the
  /// latest placement of each key over all iterations so far.
  [[nodiscard]] std::unordered_map<TaskKey, int> migrations() const;

 private:
  std::unique_ptr<Engine> engine_;
};

}  // namespace bellows::runtime
