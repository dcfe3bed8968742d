#pragma once
// An elastic job as an application sees it: create one ElasticSession right after MPI_Init,
// build the runtime on its communicator, and call before_iteration() / after_iteration()
// around each iteration. The session starts the job (the first process grows it to its
// initial size; a process spawned by an expand joins it at the right iteration), attaches
// it to the control plane when it runs under `bellows run` (ControlPlaneLink), and carries
// out the resizes the controller, an operator or the application asks for.
//
//   MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
//   bellows::runtime::ElasticSession session(argc, argv);
//   bellows::runtime::Runtime runtime(session.communicator(), options);
//   session.attach(runtime);
//   ... add collections (over session.grid_ranks() ranks) and task classes ...
//   for (int it = session.first_iteration(); it < iterations; ++it) {
//     if (!session.before_iteration(it)) break;  // this rank left the job
//     session.after_iteration(it, runtime.run_iteration());
//   }
//
// How the job starts (any rank but the first can leave only if it is its own MPI world):
//   - `bellows run -- APP` starts one process on the job's first node with
//     BELLOWS_LOCAL_RANKS=N and BELLOWS_JOB_DIR; it opens an MPI port (JOB_DIR/job.port) and
//     accepts the other N - 1, which the daemons of their nodes start (BELLOWS_JOIN=port,
//     BELLOWS_NODE, and from the controller BELLOWS_JOIN_RESIZE, BELLOWS_JOIN_ORDINAL and
//     BELLOWS_JOIN_COUNT): they form one group among themselves through files in
//     JOB_DIR/joins/RESIZE/ (grow_by_ordinals) and connect to that port as one. An expand
//     brings its ranks in the same way: the controller has the new nodes' daemons start them,
//     the job accepts their group before the iteration the expand is carried out at, and
//     tells them that iteration;
//   - `scripts/bellows-local -n N -- APP` (no control plane) starts one process with
//     BELLOWS_LOCAL_RANKS=N; it spawns the other N - 1, one per MPI_Comm_spawn;
//   - `mpiexec -n N APP` starts N ranks that share one MPI world: the job runs, it can grow,
//     but no rank can leave (ranks_can_leave() is false);
//   - a process spawned by a resize finds BELLOWS_JOIN_ITERATION and BELLOWS_GRID_RANKS in
//     its environment (the session that spawned it set them) and joins.
// After every grow under the control plane, rank 0 learns each rank's node.
// New ranks run the same program with the same arguments.
//
// Thread safety: one application thread, like MPI at MPI_THREAD_SERIALIZED; the job's
// request_*() may be called from any thread.

#include <mpi.h>

#include <chrono>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <bellows/protocol/job_directory.hpp>

#include "bellows/runtime/control_plane_link.hpp"
#include "bellows/runtime/elastic_job.hpp"
#include "bellows/runtime/runtime.hpp"

namespace bellows::runtime {

/// Thrown by ElasticSession in a rank a daemon started when the job stopped waiting for it
/// before it joined (the resize it was started for was called off, or the job ended): the job
/// closed the port it was connecting to; or when the expand it joined by was given up (a member
/// lost before every member confirmed the grown communicator or held the runtime's mapping
/// state: ElasticJob's ExpandGivenUp, whose text it carries). Nothing is wrong; the process should finalize MPI and exit 0.
class JoinCalledOff : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ElasticSession {
 public:
  /// The initial size of a job started as one process (bellows run, bellows-local).
  static constexpr const char* kInitialRanksVariable = protocol::job_environment::kInitialRanks;
  /// Set by the session in the processes it spawns: the iteration (0-based) they join at,
  /// and the ranks the fixed mapping is over.
  static constexpr const char* kJoinIterationVariable = protocol::job_environment::kJoinIteration;
  static constexpr const char* kGridRanksVariable = protocol::job_environment::kGridRanks;

  /// Right after MPI_Init. `argv` are the program's arguments (new ranks get the same).
  /// Throws std::invalid_argument naming the variable when the environment is inconsistent,
  /// MpiError when MPI fails, ControlChannelError when the node's daemon cannot be reached.
  ElasticSession(int argc, char** argv);
  /// Closes the job's port (on the rank that opened it).
  ~ElasticSession();
  ElasticSession(const ElasticSession&) = delete;
  ElasticSession& operator=(const ElasticSession&) = delete;

  /// The ranks the job's fixed mapping (its process grid) is over: its initial size, the
  /// same on every rank whenever it joined. Readable before a session exists (an
  /// application validates its grid with it): BELLOWS_GRID_RANKS, else BELLOWS_LOCAL_RANKS,
  /// else the size of MPI_COMM_WORLD. Throws std::invalid_argument on a bad value.
  [[nodiscard]] static int initial_grid_ranks();

  [[nodiscard]] MPI_Comm communicator() const noexcept { return job_->communicator(); }
  [[nodiscard]] int rank() const noexcept { return job_->rank(); }
  [[nodiscard]] int size() const noexcept { return job_->size(); }
  [[nodiscard]] int grid_ranks() const noexcept { return grid_ranks_; }
  /// 0, or the iteration (0-based) this process joins at.
  [[nodiscard]] int first_iteration() const noexcept { return first_iteration_; }
  /// False for a job started by mpiexec -n N: its ranks share one MPI world and none can
  /// leave it (a shrink would be refused).
  [[nodiscard]] bool ranks_can_leave() const noexcept { return ranks_can_leave_; }

  /// The runtime's resize API: post requests, cancel them, subscribe to resize events.
  [[nodiscard]] ElasticJob& job() noexcept { return *job_; }
  /// The control plane, when the job runs under `bellows run` (else nullptr).
  [[nodiscard]] ControlPlaneLink* control_plane() noexcept { return link_ ? &*link_ : nullptr; }

  /// The job ranks the control plane said are lost so far (kRanksLost), ascending; empty
  /// without a control plane. Updated by before_iteration(), which runs its events.
  [[nodiscard]] std::vector<std::uint32_t> lost_ranks() const {
    return link_ ? link_->lost_ranks() : std::vector<std::uint32_t>{};
  }

  /// Registers the runtime built on communicator(), right after constructing it and
  /// before adding collections and task classes. On a rank that joined by an expand, throws
  /// JoinCalledOff when the expand was given up while the runtime's mapping state was shared
  /// (ElasticJob::attach's ExpandGivenUp).
  void attach(Runtime& runtime) {
    try {
      job_->attach(runtime);
    } catch (const ExpandGivenUp& e) {
      throw JoinCalledOff(e.what());
    }
  }
  /// Before iteration `it` (0-based): runs the control plane's events and carries out what
  /// is pending. Collective. Returns false on a rank that has just left the job: it must
  /// destroy its runtime and finalize MPI.
  bool before_iteration(int it);
  /// After iteration `it`: times new ranks' first tasks, publishes this rank's metrics to
  /// the control plane. Collective.
  void after_iteration(int it, const IterationReport& report);

  /// After iteration `it` lost ranks (`report.completed()` false), on every survivor: the
  /// job recovers (ElasticJob::recover: agree on the lost, rebuild the communicator, roll back
  /// to the buddies' checkpoint), and under `bellows run` rank 0 learns the survivors' nodes
  /// and reports the job recovered (ControlPlaneLink::report_recovered) once the controller's
  /// failure has reached it: at once, after a later iteration, or at the latest when the
  /// session ends (waiting up to 5 s then); the job does not wait for it. Returns the iteration (0-based) the loop resumes
  /// at. Collective over the survivors; throws RebuildError or RecoveryError when the job
  /// cannot recover.
  int recover(int it, const IterationReport& report);
  /// After code of the application rebuilt the job's communicator without lost ranks on its
  /// own, and finished what the lost had left (TaskBag::run: BagReport::survivors and
  /// lost_ranks), on every survivor: the job and its runtime carry on on `survivors`
  /// (ElasticJob::adopt_survivors; the session owns it from then on), and under `bellows run`
  /// rank 0 learns the survivors' nodes and reports the job recovered as recover() does. Nothing
  /// rolls back: the loop goes on with the next iteration. `lost` are ranks of communicator() as
  /// it was. Collective over the survivors; throws what ElasticJob::adopt_survivors throws.
  void adopt_survivors(MPI_Comm survivors, std::span<const int> lost);
  /// What each resize did (rank 0), as ElasticJob::telemetry().
  [[nodiscard]] const nlohmann::json& telemetry() const noexcept { return job_->telemetry(); }

 private:
  [[nodiscard]] SpawnSpec spawn_spec(int join_iteration) const;
  /// Under the control plane: grows by the `count` ranks of resize `resize_id` (0: the job's
  /// start), which the nodes' daemons start with their ordinals (grow_by_ordinals: files in
  /// JobDirectory::join_dir, one accept on the job's port).
  const GrowReport& accept_ranks(Membership& membership, int count, int join_iteration,
                                 std::uint64_t resize_id);
  /// Tells rank 0 every rank's node (this one's is `node`): collective over `comm`. After an
  /// expand, once every member confirmed the grown communicator (before, a member lost would
  /// leave the others waiting in it instead of giving the expand up).
  void learn_nodes(MPI_Comm comm, int rank, const std::string& node);
  /// Opens the job's port and writes it where the ranks the daemons start read it.
  void open_job_port();
  /// Closes the port this rank opened, whatever connected to it (no-op after MPI_Finalize).
  void close_job_port() noexcept;
  void close_port(const std::string& port) noexcept;
  /// A fresh port in place of the old one.
  void rotate_job_port();
  /// After a recovery, under the control plane: rank 0 learns the survivors' nodes, opens
  /// the job's port if the first rank was lost, and reports the recovery (`detail`) as soon
  /// as the controller's failure is here. Collective over the survivors.
  void report_survived(std::string detail);

  std::vector<std::string> args_;
  std::optional<ElasticJob> job_;
  std::optional<ControlPlaneLink> link_;  // in place: attach() keeps its address
  int grid_ranks_ = 1;
  int first_iteration_ = 0;
  bool ranks_can_leave_ = true;
  std::string port_;  ///< the job's MPI port (rank 0 of a job under the control plane)
  bool opened_port_ = false;
  std::optional<ControlPlaneLink::JobShape> job_shape_;  ///< rank 0: the last one published
  std::chrono::steady_clock::time_point job_shape_at_{};
  std::size_t failures_reported_ = 0;  ///< rank 0: ControlPlaneLink::failures() reported recovered
  /// Rank 0: a recovery whose failure had not reached this rank from the controller yet.
  struct UnreportedRecovery {
    std::uint32_t ranks = 0;
    std::string detail;
  };
  std::optional<UnreportedRecovery> recovery_unreported_;
  /// Every rank, after a team roll-back that redoes iterations: the recovery's detail for the
  /// event log, reported once the replay is over (report_replayed).
  std::optional<std::string> replay_unreported_;
  /// Collective: adds the bytes the replay served, summed over the ranks, to
  /// replay_unreported_ and reports the recovery (report_survived).
  void report_replayed();
  /// Rank 0: reports recovery_unreported_ as soon as the controller's failure is here,
  /// waiting for it at most `wait`.
  void report_recovery(std::chrono::milliseconds wait);
};

}  // namespace bellows::runtime
