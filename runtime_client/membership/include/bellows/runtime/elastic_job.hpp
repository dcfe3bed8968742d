#pragma once
// The resize API of a running job, for whoever decides resizes (the control plane, an
// operator, the application itself): "add k ranks", "remove these ranks", and callbacks
// when a resize starts, commits or is refused.
//
// Requests may be posted at any time, from any thread and on any rank. They are carried
// out between iterations: the application calls apply_pending() before each iteration
// (collectively), which picks one request, runs it on every rank (membership change
// plus the runtime's expand_onto / prepare_shrink + attach_shrunk), and reports it.
// A job that never posts a request pays one sleeping MPI_Iallreduce per iteration.

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/resize_loss.hpp"
#include "bellows/runtime/runtime.hpp"

namespace bellows::runtime {

/// Thrown by the ElasticJob constructor, or by attach(), on a rank an expand was adding, when a member of the
/// grown communicator was lost before every member confirmed it, or before every member held
/// the runtime's mapping state (ElasticJob::attach): the expand is given up, and
/// the ranks from before it carry on without this one. what() names the lost ranks and the
/// phase. Nothing is wrong with this rank: it should finalize MPI and exit 0.
class ExpandGivenUp : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One resize as the callbacks see it.
struct ResizeEvent {
  enum class Kind { expand, shrink };
  Kind kind = Kind::expand;
  int id = 0;              ///< 1 for the job's first resize, then 2, ...
  /// The controller's id of this resize (the one its messages and PMIx events carry), or
  /// 0 for a resize the job asked for itself without a controller.
  std::uint64_t resize_id = 0;
  int from_ranks = 0;      ///< job size before
  int to_ranks = 0;        ///< job size after (what was asked, in on_resize_start)
  int add = 0;             ///< ranks added (expand)
  std::vector<int> remove; ///< ranks removed, numbered as before the shrink
  std::string reason;      ///< the requester's words
  int requested_by = 0;    ///< rank that posted the request
  int before_iteration = 0;///< iteration (0-based) the resize happens before
  bool left = false;       ///< in on_resize_commit: this rank left the job
  double seconds = 0.0;    ///< in on_resize_commit: time the resize took on this rank
};

/// The job's membership, its runtime, and the resize requests waiting to be carried out.
///
/// Thread safety: request_expand(), request_shrink() and pending_requests() may be called
/// from any thread (e.g. a PMIx event handler); everything else from the application's
/// thread, like MPI at MPI_THREAD_SERIALIZED. Callbacks run on the application's thread,
/// inside apply_pending().
class ElasticJob {
 public:
  /// What to start for an expand: called on rank 0 with the iteration (0-based) the new
  /// ranks join at, so the program can tell its new copies where to start.
  using SpawnSpecFor = std::function<SpawnSpec(int join_iteration)>;
  /// How an expand brings its new ranks in, on every rank: grows `membership` by `count`
  /// ranks that start at iteration `join_iteration` (0-based) for the request `resize_id`
  /// (the controller's resize; 0 when none) and returns the grow's report (Membership::grow,
  /// or Membership::grow_by_ordinals for ranks the nodes' daemons start).
  using Grow = std::function<const GrowReport&(Membership& membership, int count, int join_iteration,
                                               std::uint64_t resize_id)>;
  using Callback = std::function<void(const ResizeEvent&)>;

  /// `membership` is the job (constructed, grown to its initial size, or joined). On a
  /// process that joined by an expand, `joined_at_iteration` (> 0) is the iteration it
  /// starts at: its first apply_pending(), for that iteration, does nothing, since the
  /// resize it joined through is done. Elsewhere (first ranks, and ranks spawned to
  /// bring a job to its initial size) it is -1 or 0.
  /// On a process that joined by an expand the constructor confirms the grown communicator
  /// with every member (collective over it); when a member was lost before it was confirmed,
  /// it throws ExpandGivenUp.
  ElasticJob(Membership membership, SpawnSpecFor spawn_spec, int joined_at_iteration = -1);
  /// The same with new ranks brought in by `grow`.
  ElasticJob(Membership membership, Grow grow, int joined_at_iteration = -1);

  [[nodiscard]] MPI_Comm communicator() const noexcept { return membership_.communicator(); }
  [[nodiscard]] int rank() const noexcept { return membership_.rank(); }
  [[nodiscard]] int size() const noexcept { return membership_.size(); }
  [[nodiscard]] const Membership& membership() const noexcept { return membership_; }

  /// Registers the runtime built on communicator(), right after constructing it and
  /// before adding collections and task classes. On a process that joined by an expand,
  /// receives the job's mapping state (Runtime::join_expansion); throws ExpandGivenUp when a
  /// member was lost before every member held it (the expand given up: this rank leaves).
  void attach(Runtime& runtime);
  /// The runtime attach() registered, or nullptr.
  [[nodiscard]] Runtime* runtime() const noexcept { return runtime_; }

  /// Asks for `count` more ranks. `resize_id`: the controller's id of the resize (every
  /// rank's ResizeEvent carries it), 0 when there is none. Throws std::invalid_argument
  /// when count < 1.
  void request_expand(int count, std::string reason = {}, std::uint64_t resize_id = 0);
  /// Asks that `ranks` leave (numbers as they are when the request is carried out).
  /// Checked when it is carried out: a list naming rank 0, a rank out of range, a
  /// duplicate, or every rank is refused (on_resize_refused) and the job goes on.
  void request_shrink(std::vector<int> ranks, std::string reason = {}, std::uint64_t resize_id = 0);
  /// Requests posted on this rank and not carried out yet.
  [[nodiscard]] std::size_t pending_requests() const;
  /// Drops the request of resize `resize_id` (not 0) posted on this rank if apply_pending()
  /// has not taken it yet; true when it did. Once apply_pending() has taken a request (the
  /// point of no return: every rank has agreed on it) it is carried out, and this returns
  /// false. Called on the application's thread between iterations, as the control plane
  /// does, the answer is final: a dropped request never runs.
  bool cancel(std::uint64_t resize_id);

  /// Subscribe to resize events: every callback added runs, in the order added (the control
  /// plane, a trace, the application itself can all listen).
  void on_resize_start(Callback callback) { on_start_.push_back(std::move(callback)); }
  void on_resize_commit(Callback callback) { on_commit_.push_back(std::move(callback)); }
  /// A request that could not be carried out: the event's reason says why.
  void on_resize_refused(Callback callback) { on_refused_.push_back(std::move(callback)); }
  /// A shrink whose tiles were handed off on every rank (the hand-off's barrier passed): from
  /// here on it is no longer given up. Runs on every rank, leavers included, before the
  /// shrink's numbers are gathered and the survivors' communicator is made.
  void on_tiles_handed_off(Callback callback) { on_handed_off_.push_back(std::move(callback)); }
  /// An expand whose grown communicator every member confirmed: from here on it is no longer
  /// given up. Runs on the ranks from before it, on the grown communicator, before the runtime
  /// moves onto it; a collective over communicator() is allowed when the new ranks make the same
  /// call right after constructing their ElasticJob (which confirms on their side).
  void on_expand_confirmed(Callback callback) { on_confirmed_.push_back(std::move(callback)); }

  /// What apply_pending() did on this rank.
  enum class Outcome { none, resized, refused, left };
  /// Before iteration `iteration` (0-based); collective over communicator(). Among the
  /// ranks with pending requests, the lowest rank's oldest request is carried out (one
  /// per call). Before iteration 0 nothing is carried out, and no rank communicates: a rank
  /// added then would join at iteration 0, where the job's initial members join, and could
  /// not be told from them; requests posted before the first iteration wait for the
  /// second. Returns Outcome::left on a rank that has just left the job: it must
  /// destroy its runtime, stop and finalize MPI. Throws MpiError when MPI fails. A rank
  /// lost right after a shrink's hand-off (in the shrink's numbers): the survivors agree on
  /// it; a lost rank that stays gives the shrink up on every survivor, leavers included
  /// (Outcome::refused, the hand-off undone), and the next run_iteration() reports the loss,
  /// which the job recovers from with recover() like any; only leavers lost: the survivors
  /// rebuild without them and the shrink finishes. Throws RecoveryError alike on every
  /// survivor when a rank that stays is lost during that rebuild (the job's communicator is
  /// then theirs; treat it as the end of the job), RebuildError when the agreement or the
  /// rebuild fails.
  /// A member lost between an expand's merge and every member's confirmation of the grown
  /// communicator: the expand is given up (Outcome::refused, the reason naming the lost ranks and
  /// the phase) and the job is back on its communicator from before it; a lost rank from before
  /// the expand is then found by the next iteration and recovered from as from any loss.
  Outcome apply_pending(int iteration);

  /// After an iteration that lost ranks (IterationReport::lost_ranks, completed() false), on
  /// every survivor: agree on the lost set (agree_on_lost), rebuild the job's communicator
  /// without them (rebuild_without), and let the runtime roll back to its buddies'
  /// checkpoint (Runtime::recover, on_node_loss shrink). A survivor that dies during the
  /// rebuild is folded in (rebuild_after_loss: agreed on again, left out too). The
  /// application's loop resumes at the report's iteration. Collective over the survivors;
  /// each gives up after `timeout`. Throws RebuildError or RecoveryError, alike on every
  /// survivor where it can, when the job cannot recover (treat either as the end of the job:
  /// destroy the runtime and finalize; nothing waits on a dead peer).
  RecoveryReport recover(const IterationReport& report,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30));

  /// After code of the application rebuilt the job's communicator without lost ranks on its
  /// own (TaskBag::run: BagReport::survivors and lost_ranks), on every survivor: the job
  /// carries on on `survivors`, which it owns from then on, and frees (never disconnects) the
  /// communicator that held the dead. The attached runtime, if any, moves to `survivors` too
  /// (Runtime::recover: with no collections it only renumbers; with collections it rolls back
  /// to its buddies' checkpoint). `lost` are ranks of communicator() as it was, ascending.
  /// Collective over the survivors. Throws std::invalid_argument when `survivors` is
  /// MPI_COMM_NULL or its size is not communicator()'s less `lost`, and what Runtime::recover
  /// throws.
  RecoveryReport adopt_survivors(MPI_Comm survivors, std::span<const int> lost);

  /// After each iteration, with its report: times each new rank's first task after an
  /// expand (request to first task), and, when the runtime traces (RuntimeOptions::
  /// trace_path), writes this rank's line about the resize before that iteration to the
  /// trace. Collective.
  void after_iteration(const IterationReport& report);

  /// One JSON object per resize carried out (rank 0 keeps them; empty elsewhere): sizes,
  /// timings (for an expand each phase of the grow, see GrowReport, and expand_onto),
  /// bytes handed over, tasks run by leaving ranks and their pinned tasks returned,
  /// "tiles_migrated" and "tasks_migrated" (Runtime::last_rebalance()), request to first
  /// task and tasks pinned to the new ranks.
  /// Its "before_iteration" counts from 1, as the examples' --resize schedules do
  /// (ResizeEvent::before_iteration counts from 0, as apply_pending() does).
  [[nodiscard]] const nlohmann::json& telemetry() const noexcept { return telemetry_; }

 private:
  struct Request {
    int add = 0;              // > 0: expand
    std::vector<int> remove;  // else: shrink
    std::string reason;
    std::int64_t posted_steady_ns = 0;
    std::uint64_t resize_id = 0;  // the controller's, 0 when none
  };

  /// This rank's line about one resize for the trace, until the iteration that gives
  /// its time base has run (a leaver writes it at once).
  struct TraceLine {
    nlohmann::ordered_json fields;
    std::int64_t request_ns = 0;  // steady clock, ns
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
  };

  [[nodiscard]] std::optional<Request> agree_on_request(int& requester);
  [[nodiscard]] bool tracing() const;
  /// Writes `line` with its times relative to `base_ns`, the start of iteration `iteration`.
  void write_trace(TraceLine& line, int iteration, std::int64_t base_ns,
                   std::int64_t first_task_ns) const;
  /// after_iteration() after an expand: request to first task on each new rank.
  void time_first_tasks(const IterationReport& report);
  Outcome expand(const Request& request, ResizeEvent& event, int iteration);
  /// expand() after a loss before every member confirmed the grown communicator (`phase`
  /// join) or held the runtime's mapping state (attach, Runtime::expand_onto): back on the
  /// communicator from before it; on_loss_during_resize decides (give the expand up, or throw
  /// RecoveryError). `lost` are ranks of the grown communicator.
  Outcome give_up_expand(const Request& request, ResizeEvent& event, int old_size, const std::vector<int>& lost,
                         ResizePhase phase);
  /// On a rank an expand adds: confirms the grown communicator with every member, or gives the
  /// expand up and throws ExpandGivenUp.
  void confirm_join();
  /// On a rank an expand adds, after a loss in `phase` (join: before every member confirmed
  /// the grown communicator; attach: before every member held the mapping state): gives the
  /// expand up and throws ExpandGivenUp naming `lost` (ranks of the grown communicator).
  [[noreturn]] void leave_given_up_expand(const std::vector<int>& lost, ResizePhase phase);
  Outcome shrink(const Request& request, ResizeEvent& event);
  /// The fields of a shrink's telemetry record that every way a shrink ends shares (on rank 0).
  [[nodiscard]] nlohmann::json shrink_record(const Request& request, const ResizeEvent& event, int old_size) const;
  /// shrink() after a loss that broke its numbers' collectives (after the hand-off's barrier):
  /// the survivors agree on the lost, then on_loss_during_resize decides, alike on every
  /// survivor: give the shrink up (a rank that stays lost: the hand-off undone, the copies
  /// from before kept for the recovery), or finish it without them (they were all leaving),
  /// or throw RecoveryError.
  Outcome finish_shrink_after_loss(const Request& request, ResizeEvent& event, const ShrinkHandoff& handoff,
                                   const std::vector<int>& seen);
  /// After a recovery: the boundary this rank joined through, if the roll-back returns to
  /// it, is agreed on like any other (apply_pending no longer skips it).
  void replays_the_join_boundary();

  Membership membership_;
  Grow grow_;
  Runtime* runtime_ = nullptr;
  int joined_at_iteration_ = -1;
  int joined_after_size_ = 0;
  int resizes_ = 0;

  mutable std::mutex mutex_;
  std::deque<Request> pending_;

  std::vector<Callback> on_start_;
  std::vector<Callback> on_commit_;
  std::vector<Callback> on_refused_;
  std::vector<Callback> on_handed_off_;
  std::vector<Callback> on_confirmed_;

  std::int64_t expand_request_steady_ns_ = 0;  // of the latest expand, for the latency
  int first_new_rank_ = -1;                    // of the latest expand, until it ran once
  nlohmann::json telemetry_ = nlohmann::json::array();

  std::optional<TraceLine> trace_pending_;     // written after the next iteration
  std::int64_t joined_steady_ns_ = 0;          // a rank added by an expand: when it joined
  int joined_resize_ = 0;                      // and, from rank 0, the resize's number,
  int joined_requested_by_ = 0;                // who asked for it
  std::int64_t joined_request_ns_ = 0;         // and when
  int last_iteration_ = 0;                     // IterationReport::iteration of the latest
  std::int64_t last_iteration_start_ns_ = 0;   // and when it started
};

}  // namespace bellows::runtime
