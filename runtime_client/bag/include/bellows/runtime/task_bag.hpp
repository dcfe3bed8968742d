#pragma once
// A bag of independent tasks (indices 0..n-1, no dependencies) run over the ranks of an MPI
// communicator, distributed by Dtree (dtree.hpp, dtree_node.hpp: Pamnany et al., "Dtree:
// Dynamic Task Scheduling at Petascale", ISC 2015), by random-victim stealing, or in static
// blocks, for comparison.
//
// A run is collective: every rank of the communicator calls TaskBag::run with the same
// count. The calling thread is the bag's driver, the only thread that calls MPI during the
// run (MPI_THREAD_SERIALIZED suffices), on a duplicate of the communicator made for the run
// and freed at its end; `workers` threads run the task bodies. The driver never blocks in
// MPI: it polls for messages, sleeping up to 50 us when nothing happens (its workers wake it
// at once when they run out of work), and gives up with an error once `timeout_seconds` pass.
// Use it between the runtime's iterations (ElasticSession::before_iteration and
// after_iteration): the dataflow runtime's communication thread is idle there.
//
// Elasticity: resizes happen between runs. The tree lives on rank 0 across runs: ranks added
// since the last run join it (DtreeShape::join: a place under the shallowest parent with
// room, nothing else moves) and ranks that left are removed (DtreeShape::leave; a shrink
// removes the highest-numbered ranks, as ElasticJob numbers the survivors), and rank 0 sends
// the tree's parents to every rank at the start of a run (DtreeShape::from_parents), so a
// rank added later holds the same tree. Each rank's share is weighted by its speed measured in
// the previous run (tasks per busy second); a rank not measured yet counts as the mean. A
// shrink ordered during a run (request_leave) lets a Dtree leaf hand its unstarted work back to
// its parent at once; the rank itself leaves the job between runs.
//
// A lost rank (killed, its node lost) does not end the run: each rank watches every other for
// the length of the run (PeerWatch: a zero-byte receive from each, which fails within
// milliseconds when the peer dies), and every wait is bounded by it. On a loss the survivors
// stop taking work (a worker stops at its next task boundary), agree on who is lost and
// rebuild the communicator without them (rebuild_after_loss: agree_on_lost, rebuild_without),
// gather the ranges each finished, and run the indices no survivor finished (plan_bag_rerun)
// as a new bag, Dtree over those ranges, until the bag is done; a loss during that re-run is
// handled the same way. Every index's result is then held by exactly one survivor, and the
// digest is a failure-free run's. The report names the lost ranks and hands the survivors'
// communicator to the caller (BagReport::survivors), which must use it from then on.
//
// Thread safety: one TaskBag per rank, used from one thread.

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "bellows/runtime/dtree.hpp"

namespace bellows::runtime {

/// How a bag's tasks reach the ranks.
enum class BagDistribution {
  dtree,          ///< pulled down a Dtree in contiguous ranges that shrink as pools drain
  steal,          ///< static blocks, then idle ranks take half of a random victim's rest
  static_blocks,  ///< rank r runs [n r / p, n (r + 1) / p), nothing moves
};

[[nodiscard]] std::string_view to_string(BagDistribution distribution) noexcept;
/// "dtree", "steal" or "static"; false for anything else.
[[nodiscard]] bool parse_bag_distribution(std::string_view text, BagDistribution& out) noexcept;

struct BagOptions {
  BagDistribution distribution = BagDistribution::dtree;
  DtreeOptions dtree;
  /// Threads per rank that run task bodies.
  int workers = 1;
  /// Indices a rank asks for at least (Dtree's code: 1.5 x its workers); 0: that default.
  /// With stealing, what a worker takes from its rank's pool at a time.
  std::int64_t min_ask = 0;
  /// Seed of the random victims (stealing); each rank mixes in its number.
  std::uint64_t steal_seed = 1;
  /// How many times longer than its modeled seconds a task takes on this rank (a slow
  /// node; BagTasks::modeled_seconds only).
  double slowdown = 1.0;
  /// A run that has not ended after this many seconds throws std::runtime_error (a peer
  /// that died would otherwise leave the others waiting); 0: no limit.
  double timeout_seconds = 0.0;
  /// How long the survivors of a lost rank may take to agree on the lost set and rebuild
  /// their communicator (each time); past it the run throws what rebuild_after_loss throws.
  double recovery_timeout_seconds = 10.0;

  /// Throws std::invalid_argument naming the field ("task bag: workers must be at least
  /// 1, got 0"), and the Dtree's refusals.
  void validate() const;
};

/// The tasks of a bag: how many, and what running one means.
struct BagTasks {
  std::int64_t count = 0;
  /// Runs task `index` and returns a 64-bit digest of its result. The digests of a run are
  /// summed (modulo 2^64, so in any order) into BagReport::digest: a sum that depends on
  /// every task running exactly once. Called from the bag's worker threads, any index on
  /// any rank; it must be safe to call concurrently.
  std::function<std::uint64_t(std::int64_t index)> body;
  /// The emulated device: when set, each task also takes its modeled seconds (times
  /// BagOptions::slowdown) on its worker's modeled clock, which sleeps to it; a late wake-up
  /// is absorbed by the next task while the worker stays busy. The body still runs (it
  /// should then be cheap).
  std::function<double(std::int64_t index)> modeled_seconds;
};

/// One rank's part in a run.
struct BagRankStats {
  int rank = 0;                      ///< in the communicator the run ended on
  int rank_at_start = 0;             ///< in the communicator passed to TaskBag::run
  int parent = -1;                   ///< its Dtree parent (-1: the root, or not Dtree)
  std::uint64_t tasks = 0;           ///< tasks its workers ran
  std::uint64_t ranges = 0;          ///< ranges its workers took
  std::uint64_t requests_sent = 0;   ///< asks to a parent, or steal requests
  std::uint64_t requests_served = 0; ///< asks or steal requests answered with work
  std::uint64_t tasks_given = 0;     ///< indices granted to children, or given to thieves
  double busy_seconds = 0.0;         ///< summed over its workers
  double finish_seconds = 0.0;       ///< from the common start to its last task's end
  double speed = 0.0;                ///< tasks per busy second it entered the run with (0: none)
  std::uint64_t digest = 0;          ///< its tasks' digests, summed
  bool left_run = false;             ///< it left during the run (TaskBag::request_leave)
  std::uint64_t tasks_returned = 0;  ///< indices it gave back to its parent when it left
};

/// One loss during a run, and what the survivors did about it.
struct BagRecovery {
  std::vector<int> lost;         ///< ranks of the communicator passed to TaskBag::run, ascending
  std::int64_t kept_tasks = 0;   ///< finished by survivors before the loss: not redone
  std::int64_t rerun_tasks = 0;  ///< held, granted on, running or finished by the lost: run again
  /// On the first survivor: from the loss noticed to the re-run's start (the grace in which
  /// ranks that died together are found together, the agreement, the rebuild, the gather).
  double seconds = 0.0;
};

/// A run, as every rank sees it at its end.
struct BagReport {
  BagDistribution distribution = BagDistribution::dtree;
  std::int64_t tasks = 0;      ///< tasks run, summed over the ranks
  std::uint64_t digest = 0;    ///< the digests, summed over the ranks (modulo 2^64)
  double seconds = 0.0;        ///< the makespan: the latest finish_seconds
  int tree_height = 0;         ///< the Dtree's height (0: not Dtree, or one rank)
  std::vector<BagRankStats> ranks;  ///< the ranks that finished the run (survivors)
  std::vector<int> lost_ranks;      ///< ranks of the passed communicator lost, ascending
  std::vector<BagRecovery> recoveries;
  /// The survivors' communicator when ranks were lost (the caller owns it and must use it in
  /// place of the one it passed, which holds the dead: free that one, never disconnect it);
  /// MPI_COMM_NULL when none was. Its error handler is the passed communicator's.
  MPI_Comm survivors = MPI_COMM_NULL;
};

void to_json(nlohmann::json& j, const BagRankStats& stats);
void to_json(nlohmann::json& j, const BagReport& report);

class TaskBag {
 public:
  /// Throws what BagOptions::validate throws.
  explicit TaskBag(BagOptions options);

  /// Runs tasks 0..tasks.count-1 over the ranks of `comm` (collective; every rank passes
  /// the same count) and returns the report on every rank that survived it. Throws
  /// std::runtime_error when the survivors of a loss find that they are not recovering the
  /// same run (the rank died as a run ended, after some survivors had its end and went on to
  /// the next run; every survivor throws alike, naming the runs and ranks). Throws
  /// std::invalid_argument on a negative count or a missing body, std::runtime_error past
  /// timeout_seconds or on an MPI error that no lost peer explains, RebuildError (rebuild.hpp)
  /// when the survivors cannot agree or rebuild within recovery_timeout_seconds, and what a
  /// body threw (after the workers stopped; the other ranks then time out).
  BagReport run(MPI_Comm comm, const BagTasks& tasks);

  /// Asks this rank to leave the run going on, or the next one (a shrink ordered during a
  /// long run). Thread-safe: call it from any thread, a body included. A Dtree leaf then stops
  /// taking work, lets the ranges its workers run finish, waits for the answer to a request
  /// out, and gives what it holds unstarted back to its parent (DtreeNode::leave,
  /// on_child_left), where it goes out first; it runs nothing more and sends no request, but
  /// stays in the run's closing barrier and statistics, and leaves the job between runs like
  /// any shrink (ElasticSession::before_iteration). A rank with children, and every rank under
  /// stealing or static blocks, runs to the end: for them the request is taken between runs.
  /// Cleared when a run ends.
  void request_leave() noexcept { leave_requested_.store(true); }

  [[nodiscard]] const BagOptions& options() const noexcept { return options_; }
  /// This rank's slowdown from the next run on (a node that became slow, or fast again).
  /// Throws std::invalid_argument when it is not positive.
  void set_slowdown(double slowdown);

 private:
  struct Phase;
  /// One pass over `pool` on `comm`; false when a peer was lost (Phase::lost names them).
  bool run_phase(MPI_Comm comm, const BagTasks& tasks, Phase& phase);
  /// Rank 0: the parents of its tree for `size` ranks, kept across runs.
  std::vector<int> root_tree_parents(int size);

  BagOptions options_;
  std::optional<DtreeShape> shape_;  ///< rank 0's tree, kept across runs
  double speed_ = 0.0;               ///< tasks per busy second in the last run
  /// Runs so far, the same on every rank (a rank added later takes the others' at its first
  /// run): the survivors of a loss check that they recover the same run.
  std::int64_t run_number_ = 0;
  std::atomic<bool> leave_requested_{false};
};

}  // namespace bellows::runtime
