#pragma once
// The engine behind bellows::runtime::Runtime: task instantiation from keys,
// dependency counting, completion and successor activation, iteration driving.

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mpi.h>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/cost_model.hpp"
#include "bellows/runtime/device_choice.hpp"
#include "bellows/runtime/offload_policy.hpp"
#include "bellows/runtime/runtime.hpp"
#include "bellows/runtime/options.hpp"
#include "bellows/runtime/resize_loss.hpp"
#include "bellows/runtime/stats.hpp"
#include "bellows/runtime/steal_policy.hpp"
#include "bellows/runtime/task_graph.hpp"
#include "bellows/runtime/task.hpp"
#include "bellows/runtime/team_replay.hpp"
#include "buddy_checkpoints.hpp"
#include "device.hpp"
#include "iteration_memory.hpp"
#include "message_log.hpp"
#include "tiles_at_start.hpp"
#include "peer_watch.hpp"
#include "trace.hpp"

namespace bellows::runtime {

class CommEngine;

/// The node a rank runs on, for its checkpoint buddies: as the options name it, else as the
/// daemon that started it says (BELLOWS_NODE), else its host name.
[[nodiscard]] std::string node_of(const CheckpointOptions& options);


/// The devices call back into the engine through DeviceOwner (device.hpp).
class Engine final : public DeviceOwner {
 public:
  Engine(MPI_Comm comm, RuntimeOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] MPI_Comm communicator() const noexcept { return comm_; }
  [[nodiscard]] const RuntimeOptions& options() const noexcept { return options_; }

  void add_task_class(std::unique_ptr<TaskClass> task_class);
  void add_collection(TiledMatrix& collection);
  [[nodiscard]] const std::string& class_name(TaskClassId id) const override { return class_names_.at(id); }
  [[nodiscard]] std::size_t class_count() const noexcept { return classes_.size(); }
  [[nodiscard]] const TaskClass& task_class(TaskClassId id) const;
  [[nodiscard]] TiledMatrix& collection(CollectionId id) const;

  IterationReport run_iteration();
  /// See Runtime::expand_onto and Runtime::join_expansion: the ranks lost while the mapping
  /// state was shared (empty: every member holds it).
  std::vector<int> expand_onto(MPI_Comm comm);
  std::vector<int> join_expansion(int first_new_rank);
  /// See Runtime::prepare_shrink, release_state_before_shrink and give_up_hand_off
  /// (engine_mapping.cpp).
  ShrinkHandoff prepare_shrink(std::span<const int> leaving, StateBeforeShrink state);
  void release_state_before_shrink(OldCommunicator old = OldCommunicator::disconnect);
  void give_up_hand_off();
  void attach_shrunk(MPI_Comm survivors);
  /// See Runtime::attach_shrunk_checkpointed and Runtime::leave_unconfirmed_survivors
  /// (engine_shrink.cpp).
  std::vector<int> attach_shrunk_checkpointed(MPI_Comm survivors);
  void confirm_shrunk_checkpoint();
  void leave_unconfirmed_survivors();
  /// See Runtime::recover (engine_recovery.cpp).
  RecoveryReport recover(MPI_Comm survivors, std::span<const int> lost);
  /// See Runtime::finish (engine_finish.cpp). `my_stats`: this rank's statistics as numbers
  /// (Runtime encodes and decodes them); rank 0 gets every rank's in `stats_by_rank`.
  struct JobEndTransfers {
    IterationReport report;
    std::vector<std::vector<double>> gathered;
    std::vector<std::vector<double>> stats_by_rank;
  };
  JobEndTransfers finish(std::span<const TiledMatrix* const> gather, const std::vector<double>& my_stats);
  [[nodiscard]] Rebalance last_rebalance() const noexcept { return last_rebalance_; }
  /// See Runtime::graph_profile (engine_profile.cpp).
  [[nodiscard]] GraphProfile graph_profile() const;
  [[nodiscard]] const RankStats& stats() const noexcept { return total_stats_; }
  /// Buddy checkpoints (RuntimeOptions::checkpoint); see Runtime::restore_checkpoint.
  [[nodiscard]] BuddyCheckpoints& checkpoints() noexcept { return *checkpoints_; }
  [[nodiscard]] const BuddyCheckpoints& checkpoints() const noexcept { return *checkpoints_; }
  void restore_checkpoint(long iteration, std::span<const CheckpointSource> sources);
  /// Team-based message logging (RuntimeOptions::message_log): the teams and this rank's log.
  [[nodiscard]] MessageLog& message_log() noexcept { return message_log_; }
  [[nodiscard]] const MessageLog& message_log() const noexcept { return message_log_; }
  [[nodiscard]] std::optional<TeamsApplied> teams_applied() const { return teams_applied_; }
  [[nodiscard]] const std::vector<RecoveryReport>& recoveries() const noexcept { return recoveries_; }

  // ---- called from devices and the communication thread (thread-safe) ----

  /// The tile the communication thread serves to `peer`'s fetch of collection tile `index`:
  /// the local tile, logged when the peer is of another team (RuntimeOptions::message_log);
  /// or, on a rank that keeps its state while other teams replay (team_replay_), the copy
  /// its log kept of the iteration being replayed. Throws std::out_of_range naming the tile
  /// when it is not local, or when the log kept no copy of it for that iteration.
  [[nodiscard]] TilePtr tile_to_serve(const TileIndex& index, int peer);
  /// For an activation naming its producer (message logging between teams; communication
  /// thread only): true when this rank had not received output `slot` of `producer` in
  /// iteration `version` since its last complete checkpoint (it is recorded now); false for
  /// a copy of one it holds, which a rank re-running that iteration in a replay sent again:
  /// counted (MessageLogStats::copies_dropped), and the caller drops it.
  [[nodiscard]] bool first_receipt(const TaskKey& producer, int slot, long version);

  /// The rank that runs `key`: its pinned placement if it has one (see pin_new_placements),
  /// else the fixed mapping of its class.
  [[nodiscard]] int rank_of(const TaskKey& key) const;
  /// Tasks that now belong to ranks added by an expand: key -> rank (every rank holds
  /// the same table; it changes only between iterations).
  [[nodiscard]] const std::unordered_map<TaskKey, int>& pinned() const noexcept { return pinned_; }
  /// A predecessor's tile (or control token) for slot `slot` of local task `key`.
  void deliver(const TaskKey& key, int slot, TilePtr tile);
  /// The communication thread, between these calls with true and false, handles messages: a
  /// task they make ready may be held for it to run (comm_thread_runs_it, task_on_arrival.hpp)
  /// instead of waking a worker. Communication thread only.
  void set_handling_messages(bool handling) noexcept;
  /// Runs the task held by the communication thread, if any, on that thread (its completion
  /// included). True when one ran. Communication thread only.
  bool run_held_task();
  /// A remote collection tile requested by instantiate() has arrived.
  void collection_tile_arrived(const TileIndex& index, TilePtr tile);
  /// A task's output written back into a local collection tile.
  void write_back(const TileIndex& index, TilePtr tile);
  /// A device ran `task`: activate its successors, count it done.
  void complete(std::unique_ptr<ReadyTask> task) override;
  void unit_awake(bool awake) override;
  void take_arrivals() override;
  bool take_arrivals_while_idle(const std::function<bool()>& woken) override;
  /// True when every task this rank is responsible for in the current iteration has
  /// run: those it owns, less those given to thieves, plus those it stole.
  [[nodiscard]] bool local_work_done() const noexcept {
    return local_remaining_.load(std::memory_order_acquire) == 0;
  }
  [[nodiscard]] std::size_t ready_count() const;
  [[nodiscard]] double iteration_clock() const;

  // ---- work stealing (John & Milthorpe,
  // "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
  // CCGrid 2024, section IV) ----

  [[nodiscard]] bool stealing() const noexcept { return options_.steal.enabled && size_ > 1; }
  /// Proactive offloading plans this job's iterations (RuntimeOptions::offload).
  [[nodiscard]] bool offloading() const noexcept { return options_.offload.enabled && size_ > 1; }
  /// True once the iteration's root tasks are queued (before that every rank looks idle).
  [[nodiscard]] bool roots_queued() const noexcept {
    return roots_queued_.load(std::memory_order_acquire);
  }
  /// StealPolicy::starving for the device queue's ready tasks now.
  [[nodiscard]] bool starving() const;
  /// StealPolicy::has_tasks_to_spare for the device queue's ready tasks now.
  [[nodiscard]] bool has_tasks_to_spare() const;
  /// Called by a device each time an execution unit takes a ready task: wakes the
  /// communication thread when the rank starts to starve, so any worker detects it.
  void ready_task_taken() override;
  /// Every task of the iteration over all ranks (known after the first iteration starts).
  [[nodiscard]] std::int64_t total_task_count() const noexcept { return total_task_count_; }
  /// Tasks completed here since the previous call.
  [[nodiscard]] std::uint64_t take_completed_delta() noexcept {
    return completed_unreported_.exchange(0, std::memory_order_acq_rel);
  }
  /// What a steal request tells its victims of the thief.
  struct ThiefCosts {
    double load_seconds = 0.0;           ///< its predicted work left, per lane
    double task_overhead_seconds = 0.0;  ///< its task time, overhead + seconds_per_flop *
    double seconds_per_flop = 0.0;       ///< flops; both 0: not measured yet
  };
  /// This rank's ThiefCosts now.
  [[nodiscard]] ThiefCosts thief_costs() const;
  /// Proactive offloading, while the iteration runs (communication thread only): when this
  /// rank's work has drifted past the iteration's plan (OffloadPolicy::drifted), the next rank
  /// to invite to steal from it (OffloadPolicy::invitation_order; each at most once per
  /// iteration); nullopt otherwise.
  [[nodiscard]] std::optional<int> drift_invitee();
  /// The iteration running or last run (counted from 1).
  [[nodiscard]] int iteration() const noexcept { return iteration_; }
  /// Device cuda: `task` reads a tile whose only valid copy is in GPU memory (a thief would be
  /// sent a stale host copy), so it stays here.
  [[nodiscard]] bool reads_host_stale_tile(const ReadyTask& task) const;
  /// Takes the ready tasks StealPolicy::choose_gifts grants a request of rank `thief` for
  /// `wanted` and records their new placement. `left` receives the ready count afterwards,
  /// `refused` how many more the thresholds alone would have let go (those the cost rule
  /// kept).
  std::vector<std::unique_ptr<ReadyTask>> give_tasks(int wanted, int thief, const ThiefCosts& costs,
                                                     std::size_t& left, std::size_t& refused);

  // ---- measured costs (CostModel; any thread) ----

  /// A device ran a task of class `task_class` with `flops` in `seconds`.
  void task_measured(TaskClassId task_class, double flops, double seconds) override;
  /// Device `index` (device hybrid: 0 the emulated device, 1 the CPU workers) spent
  /// `compute_seconds` computing a task, data movement left out: feeds that device's
  /// CostModel, which DeviceChoice reads.
  void device_task_measured(std::size_t index, const TaskKey& key, double flops,
                            double compute_seconds) override;
  /// A tile of `bytes` came from `peer` `seconds` after it was asked for.
  void transfer_measured(int peer, std::uint64_t bytes, double seconds);
  /// A steal request of this rank was answered `seconds` after it was sent.
  void round_trip_measured(double seconds);
  /// Predicted seconds to run what this rank still has to run in this iteration, per lane.
  [[nodiscard]] double remaining_work_seconds() const;
  [[nodiscard]] double round_trip_seconds() const;
  /// What a task has taken to run here lately; nullopt before the first one ran.
  [[nodiscard]] std::optional<double> recent_task_seconds() const;
  [[nodiscard]] double transfer_seconds(int peer, std::uint64_t bytes) const;
  /// The largest share of the last iteration any rank's device spent computing, per lane,
  /// and the mean over the ranks (StealPolicy::ThiefView::busiest_compute_share and
  /// mean_compute_share; both 0 before the first iteration ended).
  [[nodiscard]] std::pair<double, double> compute_shares() const;
  [[nodiscard]] CostSummary cost_summary() const;
  /// Tasks the device runs at once.
  [[nodiscard]] int lanes() const noexcept;
  /// Creates the pending record of a task stolen from another rank: its scratch slots are
  /// made here, every other slot arrives through deliver(). Runs it at once when it has
  /// nothing to receive.
  void adopt_stolen(const TaskKey& key);
  /// A task of `priority` with `flops` left this iteration's remaining work (run here, or
  /// given to a thief).
  void leaves_remaining_work(std::int64_t priority, double flops);
  /// Where migrated tasks ran: key -> rank, recorded on the victim and on the thief (the
  /// override table on top of the fixed mapping). Thread-safe copy.
  [[nodiscard]] std::unordered_map<TaskKey, int> migrations() const;

 private:
  /// A tile that changes owner at the start of the next iteration (after an expand).
  struct TileMove {
    CollectionId collection = 0;
    int m = 0;
    int n = 0;
    int to = 0;               ///< the new owner
    std::uint32_t tasks = 0;  ///< tasks of an iteration that the tile decides
  };
  /// Which tile decides each task's owner, and the work behind each tile. Tiles are
  /// numbered over all collections: collection c's tile (m, n) is base[c] + its slot.
  struct WorkMap {
    std::vector<int> base;              ///< per collection: its first tile number
    std::vector<int> holder;            ///< per tile: its owner now (-1: not kept)
    std::vector<double> weight;         ///< per tile: flops of the tasks it decides
    std::vector<std::uint32_t> tasks;   ///< per tile: how many tasks it decides
    std::vector<double> load;           ///< per rank: flops of tasks no tile decides
  };
  struct PendingTask {
    std::vector<TilePtr> tiles;
    std::uint32_t writable = 0;
    std::uint32_t control = 0;  // slots that receive control tokens only
    int missing = 0;
    bool migrated = false;  // stolen from another rank
  };
  struct CollectionCacheEntry {
    TilePtr tile;  // null while the fetch is in flight
    std::vector<std::pair<TaskKey, int>> waiters;
  };

  /// Creates the pending record of a local task (lock held). Collection inputs that
  /// must be fetched are appended to `fetches`.
  PendingTask& instantiate(const TaskKey& key, std::vector<TileIndex>& fetches);
  void make_ready(const TaskKey& key, PendingTask&& pending);
  void request_fetches(const std::vector<TileIndex>& fetches);
  /// Collective: the local tasks, their roots and counts, and the job's task count. False
  /// when a peer was lost before the count's reduction completed (the watch armed).
  bool prepare_local_tasks();
  /// Tests `requests` until every one completes, polling the watch between tests (it finds
  /// nothing when not armed). False when a peer was found lost first; the requests are then
  /// left as they are, for the caller to let go.
  bool wait_watching_peers(std::span<MPI_Request> requests);
  /// Throws std::invalid_argument when a collection's tiles live on ranks this
  /// communicator does not have.
  void check_fits(const TiledMatrix& collection) const;
  void record_migration(const TaskKey& key, int rank);
  /// "name(i0,i1,i2)", for error texts.
  [[nodiscard]] static std::string describe(const TaskClass& cls, const TaskKey& key);
  /// After an iteration, collective: the tasks that ranks added by an expand stole in it
  /// become theirs for good (John & Milthorpe (CCGrid 2024), section V: a task migrated to a
  /// new node stays there, so its predecessors send straight to it, and it is not migrated
  /// again).
  void pin_new_placements();
  /// After an iteration's reductions, with message logging on: releases what the checkpoint
  /// completed makes needless, puts the log's statistics in `report` and the trace.
  void log_iteration_ended(IterationReport& report);
  /// MessageLogOptions::plan_teams, collective between iterations (engine_teams.cpp): every
  /// rank's measured seconds per tile are summed on the first rank, which calls plan_teams()
  /// over the task graph and broadcasts the teams and tile moves; every rank then takes the new
  /// teams, queues the moves (pending_moves_) and starts its checkpoints afresh. Each
  /// collective is watched (watch_ armed): returns false, nothing applied, once a peer is
  /// found lost; throws when plan_teams() refused on the first rank. With `replan`, teams
  /// were planned before on these ranks: the first rank takes the new plan only when
  /// replan_decision() says it pays, and otherwise every rank keeps its teams and tiles.
  [[nodiscard]] bool plan_teams_between_iterations(bool replan);
  /// Collective after an expand, over comm_: rank 0's mapping state (which ranks are new, each
  /// collection's placement, the pinned tasks) reaches the new ranks, then a barrier confirms
  /// that every member holds it. Every step is watched by `watch` (armed, on the grown
  /// communicator, errors returned). Returns the ranks lost before every member confirmed
  /// (empty: confirmed, and the state taken); nothing of this rank changes when some were.
  std::vector<int> share_mapping_state(PeerWatch& watch);
  /// Every task's weight (flops, at least 1) attributed to the tile whose owner decides
  /// it (found by probing the collections' owners), or to a rank for pinned tasks and
  /// tasks whose owner no tile decides. Pinned tasks of ranks marked in `pinned_leaves`
  /// (indexed by rank; empty: none) count for their tiles. Between iterations only.
  [[nodiscard]] WorkMap map_work(const std::vector<char>& pinned_leaves) const;
  /// Calls fn(task class, key, tile) for every task of every class, `tile` the number (as
  /// in WorkMap) of the collection tile whose owner decides the task's rank, or -1 when no
  /// tile does. While it runs the collections answer owner() with probe values: fn must not
  /// call rank_of() or a collection's owner(). Between iterations only.
  void for_each_task_by_tile(
      const std::function<void(const TaskClass&, const TaskKey&, int tile)>& fn) const;
  /// Proactive offloading, collective at the start of an iteration (engine_offload.cpp):
  /// every rank's measured speed and transfer costs are gathered, rank 0 plans the pushes
  /// (OffloadPolicy) over the work each tile decides and broadcasts them, and every rank
  /// enters the tasks of each pushed tile in pinned_, so that their predecessors send
  /// straight to the new rank. Withdrawn by withdraw_offloads() at the iteration's end.
  void plan_offloads();
  /// Takes this iteration's offloaded tasks out of pinned_ again (they go back to the fixed
  /// mapping, and the next plan starts from it).
  void withdraw_offloads();
  /// RuntimeOptions::emulated_slowdown for the iteration about to run.
  void apply_slowdown();
  /// The re-grid over `ranks` (numbered as work.holder) at a resize (regrid.hpp): per tile
  /// (numbered as in WorkMap), its new owner when it is kept and changes holder, else -1.
  [[nodiscard]] std::vector<int> regrid_moves(const WorkMap& work, std::span<const int> ranks) const;
  /// After an expand to size_ ranks from `old_size`: the tiles that change owner as the
  /// job re-grids (none without RuntimeOptions::rebalance_on_resize).
  [[nodiscard]] std::vector<TileMove> plan_expand(int old_size) const;
  /// The tiles that change owner when the job re-grids onto all its current ranks.
  [[nodiscard]] std::vector<TileMove> plan_regrid() const;
  /// At a recovery: every collection's placement and per-tile owners, and the pinned tasks,
  /// rewritten for the survivors' numbering, each lost rank's tiles and grid place going
  /// to its backup (its buddy) as at a shrink without rebalancing.
  void map_without_lost(const ShrinkPlan& plan, int new_rank);
  /// Collective: carries out pending_moves_ (tile data to the new owners, then every
  /// rank records them). Run at the start of the first iteration after an expand, when
  /// the new ranks have registered their collections. False when a peer was lost during the
  /// transfers (the watch armed): no move is applied, the transfers are let go.
  bool apply_tile_moves();
  /// With logging between teams: keeps the collections' tiles as iteration iteration_ + 1
  /// starts (tiles_at_start_), its time charged to the message log's statistics.
  void keep_tiles_at_start();
  /// In run_iteration, after take() of the first checkpoint since a resize: completes its
  /// transfers under the watch and confirms them with a barrier, so that a loss in the rest
  /// of the iteration recovers from it. False when a peer was lost meanwhile (the caller
  /// abandons the iteration).
  bool complete_checkpoint_before_tasks();
  /// A shrink's hand-off (prepare_shrink): waits for `requests` (the tiles `buffers`, a
  /// receive where `receiving` says 1) and then a barrier, with errors returned and every
  /// peer watched. False when a peer was lost: nothing may be applied, the pending receives
  /// are cancelled and the sends freed (their tiles kept until the process exits), and the
  /// watch keeps the loss for the next run_iteration().
  bool hand_off_watched(std::vector<MPI_Request>& requests, const std::vector<TilePtr>& buffers,
                        const std::vector<char>& receiving);
  /// The end-of-iteration reductions' buffers and requests (Engine::run_iteration).
  struct EndOfIterationSums {
    static constexpr std::size_t kCount = 5;
    std::array<double, kCount> mine{};
    std::array<double, kCount> all{};
    std::array<MPI_Request, kCount> requests{MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                                             MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    /// Reductions a lost peer left pending: MPI may still write into them.
    static void keep_until_exit(std::unique_ptr<EndOfIterationSums> sums);
  };
  /// Waits for the reductions asleep; false when one failed or the watch found a peer lost.
  bool wait_for_reductions(EndOfIterationSums& sums);
  /// Ends an iteration in which a peer was lost or an MPI call failed (docs/recovery.md, "When
  /// a rank dies mid-iteration"): drops the queued and pending work (after stopping the
  /// devices when `devices_started`), the communication thread's messages and the checkpoint
  /// in flight, waits for the verdict on who is lost (wait_for_loss_verdict, peer_watch.hpp:
  /// kLossGrace after the first peer found lost, up to kLossVerdictLimit while none is), and
  /// returns a report naming them. Throws std::runtime_error with the MPI failure when no peer was lost.
  IterationReport abandon_iteration(bool devices_started);
  /// How long an abandoned iteration waits after the first peer was found lost for the watch
  /// to find the others: more than the 2-20 ms ch3 takes to fail what involves a dead peer.
  static constexpr std::chrono::milliseconds kLossGrace{100};
  /// Takes a duplicate of `comm` and a communication engine on it; the trace and the
  /// statistics then name this rank by its number there. Used at construction and after a
  /// shrink. Its collectives (the duplicate, the same-host probe, the nodes' gather) are
  /// watched (watched_setup.hpp): returns the members of `comm` lost before they completed,
  /// the runtime then holding no communicator, else an empty list.
  [[nodiscard]] std::vector<int> attach(MPI_Comm comm);
  /// Whether use_communicator() gives the message log the teams of the new communicator at
  /// once (forgetting its entries), or leaves the log and its entries as they are until the
  /// caller knows the change stands (an expand, which may still be given up).
  enum class MessageLogTeams { now, later };
  /// What attach(), expand_onto() and attach_recovered() share once they hold `duplicate`:
  /// this rank's number and size there, a watch and a communication engine on it (its
  /// same-host probe under `setup_watch` when given: a member lost throws MembersLost), the
  /// trace and the statistics renamed, the local tasks to be counted again.
  void use_communicator(MPI_Comm duplicate, PeerWatch* setup_watch = nullptr,
                        MessageLogTeams log_teams = MessageLogTeams::now);
  /// The message log's teams for the communicator held (its entries forgotten), with the
  /// checkpoints' buddies inside them; nothing without message logging.
  void attach_message_log();
  /// attach() after a recovery (engine_recovery.cpp), without its collectives: `duplicate`
  /// is the survivors' communicator duplicated under a watch, and `nodes` (per rank of it)
  /// are known from before the loss.
  void attach_recovered(MPI_Comm duplicate, std::vector<std::string> nodes);
  /// What recover() does (plan_recovery, choose_checkpoint) from every survivor's copies;
  /// sets out.iteration. Throws RecoveryError with the refusal (engine_recovery.cpp).
  /// `facts` holds what the survivors gathered besides their copies; decide_recovery fills in
  /// the rest and rolls back by teams where choose_team_rollback() allows it.
  RecoveryPlan decide_recovery(RecoveryReport& out, const std::vector<CheckpointCopy>& copies,
                               TeamRollbackFacts facts) const;
  /// During a resize (resize_under_way_): throws RecoveryError with on_loss_during_resize's
  /// reason, and `detail` after it when not empty, unless it carries the resize on
  /// (`checkpoint_after_complete`: every copy the roll-back needs of a checkpoint taken after
  /// it arrived).
  void refuse_unless_resize_carries_on(const RecoveryReport& out, bool checkpoint_after_complete,
                                       const std::string& detail = {}) const;
  /// The end of recover(), collective over the survivors' duplicate under a watch of every
  /// survivor: the re-grid's tile moves, then a checkpoint of the state just restored, taken
  /// under the new buddies and completed before recover() returns, so that a loss in the
  /// next iteration rolls back to it. A survivor lost during the re-grid's moves makes it
  /// throw RecoveryError naming the phase and the ranks; one lost during the checkpoint is
  /// left to the next run_iteration(), which reports it at once (engine_recovery.cpp).
  void checkpoint_recovered_state(const RecoveryReport& out);
  /// The end of recover() after a team roll-back that redoes iterations, collective over the
  /// survivors' duplicate (held, its checkpoints not yet attached) under a watch of every
  /// survivor: the checkpoint rolled back to, re-homed for the survivors
  /// (BuddyCheckpoints::rehome) and completed before recover() returns, so that a loss in the
  /// replay rolls every rank back to it. Sets out.checkpoint_bytes_rehomed. A survivor lost
  /// meanwhile is left to the next run_iteration(), as in checkpoint_recovered_state().
  void rehome_checkpoint_for_replay(RecoveryReport& out, const ShrinkPlan& ranks, std::vector<std::string> nodes);
  /// What checkpoint_recovered_state() and rehome_checkpoint_for_replay() share: completes the
  /// transfers posted under watch_ and confirms them with a barrier, then marks the checkpoint
  /// complete; `what` names it in an error. Returns with the watch's loss kept when a survivor
  /// was lost (the checkpoint not marked complete).
  void complete_recovery_checkpoint(const std::string& what);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  RuntimeOptions options_;

  std::vector<std::unique_ptr<TaskClass>> classes_;
  std::vector<std::string> class_names_;
  std::vector<TiledMatrix*> collections_;

  /// The rank's devices: its GPUs first (RuntimeOptions::gpus; emulated or CUDA, the queues
  /// thieves take from), then, with DeviceKind::hybrid, the CPU workers (index gpus_); with
  /// DeviceKind::cpu the CPU workers alone.
  std::vector<std::unique_ptr<Device>> devices_;
  std::size_t gpus_ = 0;  ///< how many of devices_ are GPUs
  /// With more than one device: picks the device of a ready task (DeviceChoice: the GPU that
  /// finishes it first, then that GPU or the CPU workers) and charges it to that device's
  /// backlog. Returns the device's index.
  std::size_t place(ReadyTask& task);
  /// The slots whose tile is needed on the host after `task` (ReadyTask::leaving).
  /// The slots whose tile leaves the device after `task` (ReadyTask::leaving), and of them
  /// those whose tile goes to another rank (ReadyTask::to_other_ranks).
  void mark_leaving_slots(ReadyTask& task) const;
  std::unique_ptr<CommEngine> comm_engine_;
  std::unique_ptr<PeerWatch> watch_;  ///< dead peers of comm_ (peer_watch.hpp)
  /// Set while an abandoned iteration is cleaned up: make_ready() queues nothing.
  std::atomic<bool> abandoning_{false};
  /// The ranks the last iteration lost (comm_'s numbers); run_iteration refuses until recover().
  std::vector<int> lost_ranks_;
  /// Members lost while the constructor attached to its communicator (attach()); on a rank an
  /// expand adds, join_expansion() returns them and the rank leaves.
  std::vector<int> lost_in_attach_;
  /// From a resize (expand_onto, join_expansion, prepare_shrink, a re-grid) until the first
  /// iteration after it completed: where it is, for a loss meanwhile (on_loss_during_resize).
  struct ResizeUnderWay {
    ResizeKind kind = ResizeKind::expand;
    ResizePhase phase = ResizePhase::attach;
  };
  std::optional<ResizeUnderWay> resize_under_way_;
  /// What a shrink's hand-off changed on this rank, kept from prepare_shrink(..., held) until
  /// release_state_before_shrink() or give_up_hand_off() (which puts it back).
  struct StateBeforeHandOff {
    std::vector<std::vector<int>> placements;     ///< per collection
    std::vector<std::vector<int>> tile_owners;    ///< per collection
    std::vector<std::vector<TilePtr>> tiles;      ///< per collection, per slot: the tile held here, or none
    std::unordered_map<TaskKey, int> pinned;
    int first_new_rank = -1;
    /// Set while the runtime is attached to the survivors' communicator ahead of the
    /// shrink's confirmation (attach_shrunk_checkpointed): the job's communicator from before
    /// and what ran on it, put back by leave_unconfirmed_survivors().
    struct OnJobCommunicator {
      MPI_Comm comm = MPI_COMM_NULL;  ///< the runtime's duplicate of the job's communicator
      int rank = 0;
      int size = 0;
      std::unique_ptr<CommEngine> comm_engine;
      std::unique_ptr<PeerWatch> watch;
      std::unique_ptr<BuddyCheckpoints> checkpoints;  ///< the copies from before the shrink
      int iterations_since_attach = 0;
      bool teams_planned = false;
      std::deque<std::unordered_map<TaskKey, double>> task_seconds_by_iteration;
      /// The survivors' checkpoint's transfers completed here, but its barrier failed: whether
      /// it is complete on every rank that stays is for the shrink's confirmation to tell
      /// (confirm_shrunk_checkpoint()).
      bool checkpoint_barrier_failed = false;
    };
    std::optional<OnJobCommunicator> job_communicator;
  };
  std::optional<StateBeforeHandOff> before_hand_off_;
  /// What TeamLB's plan replaced on this rank (engine_teams.cpp), kept from the plan's
  /// application until the checkpoint under its teams is complete everywhere
  /// (complete_checkpoint_before_tasks): a loss in between gives the plan up
  /// (on_loss_during_resize, kind regrid, with the copies kept) and every rank rolls back to
  /// those copies, under the tiles' owners and the teams from before the plan.
  struct StateBeforePlan {
    long boundary = 0;  ///< the boundary the plan came at: its checkpoint's iteration; older ones are these copies'
    std::unique_ptr<BuddyCheckpoints> checkpoints;  ///< the copies from before the plan
    std::vector<int> rank_team;
    std::vector<std::vector<int>> placements;   ///< per collection
    std::vector<std::vector<int>> tile_owners;  ///< per collection
    std::optional<TeamsApplied> teams_applied;
  };
  std::optional<StateBeforePlan> before_plan_;
  /// Set by give_up_plan() until recover() returns: the roll-back is global (the log was kept
  /// under the plan's teams from its application on, and dropped with them).
  bool plan_given_up_ = false;
  /// At a recovery while before_plan_ is held: carries the plan on when the checkpoint under
  /// its teams holds every copy the recovery needs (before_plan_ dropped), or gives it up
  /// (give_up_plan()); returns the copies, of all the survivors', of the checkpoints that stay.
  std::vector<CheckpointCopy> settle_plan_before_recovery(const RecoveryReport& out,
                                                          std::vector<CheckpointCopy> copies);
  /// Puts back what before_plan_ holds: the copies, the tiles' owners and the teams from
  /// before the plan (the checkpoint under its teams is kept, unused, until the process exits).
  void give_up_plan();
  /// Puts the runtime back onto the job's communicator from before_hand_off_->job_communicator
  /// (the survivors' duplicate freed, the checkpoint under it dropped).
  void back_onto_job_communicator();
  double abandon_seconds_ = 0.0;   ///< the last abandoned iteration's clean-up, grace included
  std::uint64_t tasks_dropped_ = 0;  ///< tasks queued or pending when it was abandoned
  std::unique_ptr<Trace> trace_;
  std::unique_ptr<BuddyCheckpoints> checkpoints_;
  MessageLog message_log_;
  /// With message logging: the collections' tiles as the latest iteration started, which a
  /// rank outside the teams rolling back keeps at a recovery.
  TilesAtIterationStart tiles_at_start_;
  /// A team roll-back's replay (docs/teams.md): set by recover() when only some teams rolled
  /// back, dropped when the interrupted iteration starts. Changed between iterations only.
  struct TeamReplayState {
    ReplayWindow window;
    std::vector<int> replaying;  ///< the ranks of comm_ that re-run the window, ascending
    bool here = false;           ///< this rank is one of them
    /// On a rank that kept its state: the collection tiles its log kept of the window's
    /// iterations, sent to ranks that roll back, by (collection, m, n, iteration); fetches
    /// during the window are served these instead of the tiles the rank holds now.
    std::map<std::tuple<CollectionId, int, int, long>, TilePtr> logged_tiles;
    /// On a rank that kept its state: the task outputs its log kept of the window's
    /// iterations, sent to ranks that roll back, one per (producer, slot, iteration); sent
    /// again as activations as their iteration starts (replay_logged_outputs).
    struct LoggedOutput {
      long iteration = 0;
      TaskKey producer{};
      int slot = 0;
      TilePtr tile;  ///< nullptr: a control token
    };
    std::vector<LoggedOutput> logged_outputs;
    /// The recovery's re-grid (rebalance_on_resize), carried out when the replay ends.
    std::vector<TileMove> moves_after;
  };
  std::optional<TeamReplayState> team_replay_;
  /// From a team roll-back's recovery that re-homed the checkpoint it went to (a window to
  /// replay) until the checkpoint at the interrupted iteration's start is complete
  /// (complete_checkpoint_before_tasks): that checkpoint's iteration and the tiles' owners it
  /// was re-homed under (per collection). A loss meanwhile rolls every rank back to it
  /// (choose_team_rollback, replay_under_way), under those owners (the recovery's re-grid
  /// moves tiles as the interrupted iteration starts).
  struct ReplayCheckpoint {
    long iteration = 0;
    std::vector<std::vector<int>> placements;   ///< per collection
    std::vector<std::vector<int>> tile_owners;  ///< per collection
  };
  std::optional<ReplayCheckpoint> replay_checkpoint_;
  /// At a recovery while replay_checkpoint_ is held: carries on from the checkpoint taken at
  /// the interrupted iteration's start when it holds every copy the recovery needs
  /// (replay_checkpoint_ dropped), or goes back to the re-homed checkpoint (the newer one
  /// dropped, the tiles' owners put back); returns the copies, of all the survivors', of the
  /// checkpoint that stays.
  std::vector<CheckpointCopy> settle_replay_checkpoint(const RecoveryReport& out, std::vector<CheckpointCopy> copies);
  /// Served from logged_tiles since the last iteration's end (MessageLogStats::bytes_replayed).
  std::atomic<std::uint64_t> bytes_replayed_{0};
  /// The task outputs this rank received since its last complete checkpoint, by producer,
  /// slot and iteration (first_receipt): the communication thread's during an iteration, the
  /// caller's between iterations (released at a complete checkpoint, trimmed by recover()).
  ReceivedVersions received_versions_;
  /// Copies first_receipt() refused since the last iteration's end.
  std::atomic<std::uint64_t> copies_dropped_{0};
  /// Whether the iteration running (or about to run, `iteration`) is one the teams that
  /// rolled back re-run alone.
  [[nodiscard]] bool replaying(long iteration) const noexcept {
    return team_replay_ && team_replay_->window.contains(iteration);
  }
  /// recover() on a rank outside the teams rolling back: its tiles as the interrupted
  /// iteration started, and the replay's tiles from its log (engine_recovery.cpp).
  /// At the start of the interrupted iteration (engine_iteration.cpp): the replay is over,
  /// every rank counts its tasks again and steals inside its team again, and the recovery's
  /// re-grid is due.
  void end_team_replay();
  /// On a rank that kept its state, as an iteration of the window starts (after its
  /// barrier): each task output its log kept of that iteration, sent as an activation to
  /// every rank replaying that now holds consumers of the producer's slot (the tasks, or the
  /// collection tiles it writes), naming those consumers.
  void replay_logged_outputs();
  void keep_state_for_replay(RecoveryReport& out, const RecoveryPlan& plan, TeamReplayState& replay);
  /// MessageLogOptions::plan_teams: iterations completed since the communicator was attached
  /// (a resize or recovery plans again), and the latest plan applied.
  int iterations_since_attach_ = 0;
  bool teams_planned_ = false;
  /// While TeamLB weighs loads: each task's measured compute seconds on this rank in the
  /// current iteration (stolen tasks on the thief); guarded by cost_mutex_.
  bool measuring_task_seconds_ = false;
  std::unordered_map<TaskKey, double> task_seconds_this_iteration_;
  /// The same of the last MessageLogOptions::load_window iterations completed since the
  /// attach or the latest plan, oldest first: what the next plan weighs. Alike in length on
  /// every rank (each completed iteration outside a replay adds one).
  std::deque<std::unordered_map<TaskKey, double>> task_seconds_by_iteration_;
  /// Whether TeamLB plans again before the next iteration (MessageLogOptions::replan): at a
  /// boundary that takes a checkpoint, with a full window, outside a replay or a resize.
  [[nodiscard]] bool replan_due() const;
  std::optional<TeamsApplied> teams_applied_;
  std::vector<RecoveryReport> recoveries_;  ///< what each recover() that returned reported
  /// The last iteration completed before the latest loss: iterations up to it that run after
  /// a recovery run again (RankStats::tasks_rerun). -1: no loss yet.
  long completed_before_loss_ = -1;

  /// The communication thread handles messages now (set_handling_messages), and the task it
  /// holds to run itself (communication thread only).
  std::atomic<std::thread::id> message_handler_{};
  std::unique_ptr<ReadyTask> held_for_comm_thread_;

  mutable std::mutex mutex_;  // guards pending_ and cache_
  std::unordered_map<TaskKey, PendingTask> pending_;
  std::unordered_map<TileIndex, CollectionCacheEntry> cache_;

  bool local_tasks_known_ = false;
  std::vector<TaskKey> local_roots_;  // local tasks with no predecessor
  std::int64_t local_task_count_ = 0;
  std::atomic<std::int64_t> local_remaining_{0};
  double local_flops_ = 0.0;                 // flops of the tasks this rank owns
  /// The tasks this rank owns by priority, highest first: their count and flops
  /// (prepare_local_tasks()).
  struct PriorityWork {
    std::int64_t tasks = 0;
    double flops = 0.0;
    void add_task(double task_flops) noexcept {
      tasks += 1;
      flops += task_flops;
    }
  };
  std::map<std::int64_t, PriorityWork, std::greater<>> local_by_priority_;
  /// What of local_by_priority_ is still to run in this iteration, stolen tasks included:
  /// less each task run or given away. Guarded by priority_mutex_.
  std::map<std::int64_t, PriorityWork, std::greater<>> remaining_by_priority_;
  mutable std::mutex priority_mutex_;
  std::atomic<double> remaining_flops_{0.0};  // flops of local_remaining_'s tasks
  mutable std::mutex cost_mutex_;            // guards cost_model_
  CostModel cost_model_;
  std::vector<CostModel> device_costs_;   // per device, compute only; guarded by cost_mutex_
  std::vector<double> backlog_seconds_;   // per device, predicted; guarded by cost_mutex_
  double compute_seconds_this_iteration_ = 0.0;  // all devices' tasks; guarded by cost_mutex_
  /// StealPolicy::GiftContext::compute_share: this rank's in the last iteration, the
  /// largest over all ranks and their mean. Guarded by cost_mutex_.
  double compute_share_ = 0.0;
  double busiest_compute_share_ = 0.0;
  double mean_compute_share_ = 0.0;
  std::shared_ptr<EmulatedLink> link_;    // devices emulated and hybrid: the first GPU's link
  std::int64_t total_task_count_ = 0;
  std::atomic<std::uint64_t> completed_unreported_{0};
  std::atomic<std::uint64_t> completed_this_iteration_{0};
  std::atomic<std::uint64_t> ready_samples_sum_{0};  ///< ready_count() at each completion
  std::atomic<bool> roots_queued_{false};
  std::atomic<std::int64_t> first_task_steady_ns_{0};
  mutable std::mutex migrations_mutex_;
  std::unordered_map<TaskKey, int> migrations_;
  std::vector<TaskKey> stolen_this_iteration_;  // guarded by migrations_mutex_
  int first_new_rank_ = -1;                     // ranks from here on came with an expand
  std::unordered_map<TaskKey, int> pinned_;     // changed between iterations only
  /// The entries of pinned_ that proactive offloading made for the current iteration only
  /// (changed between iterations only). Unlike the other pins these tasks may be stolen.
  std::unordered_set<TaskKey> offloaded_;
  double previous_iteration_seconds_ = 0.0;  // the last iteration's time (max over ranks)
  // The last iteration's measured compute seconds per flop on this rank, all devices' tasks
  // (0: it ran none); guarded by cost_mutex_.
  double previous_seconds_per_flop_ = 0.0;
  // This iteration's measured flops and tasks, beside compute_seconds_this_iteration_;
  // guarded by cost_mutex_.
  double flops_this_iteration_ = 0.0;
  std::uint64_t tasks_measured_this_iteration_ = 0;
  /// This iteration's measured compute seconds per flop, all devices' tasks summed (0 before
  /// any ran); call with cost_mutex_ held.
  [[nodiscard]] double measured_seconds_per_flop() const noexcept {
    return flops_this_iteration_ > 0.0 ? compute_seconds_this_iteration_ / flops_this_iteration_ : 0.0;
  }
  // The plan of this iteration, for drift_invitee (set by plan_offloads before the
  // communication thread runs the iteration): the most work it predicts for any rank (0: no
  // plan), the speed it took this rank at, and whom this rank invites when it drifts.
  double planned_makespan_seconds_ = 0.0;
  double planned_seconds_per_flop_ = 0.0;
  std::vector<int> invitees_;
  std::size_t next_invitee_ = 0;  // communication thread only
  std::uint64_t tasks_offloaded_ = 0;       // this iteration: tasks this rank pushed away
  std::uint64_t tasks_offloaded_here_ = 0;  // this iteration: tasks pushed to this rank
  bool offload_moved_ = false;              // this iteration's plan moved work (every rank)
  OffloadFeedback offload_feedback_;        // read by the planning rank, fed on every rank
  std::vector<std::vector<int>> joined_placements_;  // from join_expansion, by collection id
  std::vector<std::vector<int>> joined_tile_owners_;  // likewise
  std::vector<TileMove> pending_moves_;  // same on every rank; applied by the next iteration
  Rebalance last_rebalance_;
  mutable std::unique_ptr<TaskGraph> task_graph_;  // built by graph_profile(); reset by add_task_class
  std::atomic<std::uint64_t> sequence_{0};

  int iteration_ = 0;
  Clock::time_point iteration_start_{};
  IterationMemory iteration_memory_;  ///< page faults and tile pool counts of the iteration
  RankStats total_stats_;
};

}  // namespace bellows::runtime
