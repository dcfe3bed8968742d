#pragma once
// The elastic side of the example applications: the job's membership, its resize schedule
// (--resize "iter=3:+2,iter=6:-3"), and what each resize did.
//
// A job can shrink only if every rank but the first is its own MPI world, so an elastic
// job is started as one process (scripts/bellows-local -n N -- APP ARGS runs
// `mpiexec -n 1 APP ARGS` with BELLOWS_LOCAL_RANKS=N), which spawns the other N - 1 ranks
// itself, one per MPI_Comm_spawn. A resize "+k" spawns k more ranks between iterations
// (they run the same program and join at that iteration); "-k" removes the k
// highest-numbered ranks, which hand their data over, finalize and exit 0.
// With --rebalance on (the default; RuntimeOptions::rebalance_on_resize) the runtime moves
// tile ownership at each resize: an expand gives the new ranks a share of the most loaded
// ranks' tiles, a shrink spreads the leaving ranks' tiles over the survivors by load, and
// stealing (--steal on) evens out what is left. With --rebalance off the fixed mapping stays
// over the first N ranks (the grid), ranks added later get their work by stealing alone,
// and each leaving rank hands its tiles to one backup.

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/control_plane_link.hpp"
#include "bellows/runtime/elastic_job.hpp"
#include "bellows/runtime/membership.hpp"
#include "bellows/runtime/runtime.hpp"

namespace bellows::examples {

/// One entry of --resize: before iteration `iteration` (1-based, at least 2), add
/// `delta` ranks (delta > 0) or remove -delta ranks (delta < 0).
struct ResizeStep {
  int iteration = 0;
  int delta = 0;
};

/// Parses "iter=3:+2,iter=6:-3". On error returns nullopt with `error` naming the item.
std::optional<std::vector<ResizeStep>> parse_resize_schedule(const std::string& text,
                                                             int iterations, std::string& error);

/// The example programs' side of an elastic job: starts it (the first process of a
/// bellows-local job grows it to its initial size; a process spawned by an expand joins),
/// and posts the --resize schedule's requests to the runtime's ElasticJob, which carries
/// them out. Under `bellows run` (BELLOWS_JOB_DIR set) the control plane decides the
/// resizes instead: every rank attaches to its node's daemon (ControlPlaneLink).
class ElasticSession {
 public:
  /// Right after MPI_Init and parse_app_options. A process spawned by a resize joins its
  /// job here; the first process of a bellows-local job grows it to its initial size.
  /// Throws std::invalid_argument when the schedule cannot run on this job (e.g. it
  /// shrinks a job started by a plain mpiexec -n N, whose ranks share an MPI world).
  ElasticSession(const std::string& app, const AppOptions& options, int argc, char** argv);

  [[nodiscard]] MPI_Comm communicator() const noexcept { return job_->communicator(); }
  [[nodiscard]] int rank() const noexcept { return job_->rank(); }
  [[nodiscard]] int size() const noexcept { return job_->size(); }
  /// Ranks the fixed mapping (the process grid) is over: the job's initial size.
  [[nodiscard]] int grid_ranks() const noexcept { return grid_ranks_; }
  /// 0, or the iteration (0-based) this process joins at.
  [[nodiscard]] int first_iteration() const noexcept { return first_iteration_; }
  /// The runtime's resize API, e.g. to post requests or register callbacks.
  [[nodiscard]] runtime::ElasticJob& job() noexcept { return *job_; }

  /// Registers the runtime the application built on communicator(), right after
  /// constructing it and before adding collections and task classes.
  void attach(runtime::Runtime& runtime) { job_->attach(runtime); }
  /// Before iteration `it` (0-based): rank 0 posts the schedule's request for `it`, if
  /// any, and the job carries out what is pending. Collective. Returns false on a rank
  /// that has just left the job: it must stop and finalize.
  bool resize_before(int it);
  /// After each iteration: lets the job time the first task of new ranks. Collective.
  void after_iteration(int it, const runtime::IterationReport& report) {
    job_->after_iteration(report);
    if (link_) link_->publish(report, it + 1);
  }
  /// The control plane, when the job runs under `bellows run`.
  [[nodiscard]] runtime::ControlPlaneLink* control_plane() noexcept {
    return link_ ? &*link_ : nullptr;
  }
  /// What each resize did (rank 0), for the JSON report.
  [[nodiscard]] nlohmann::json telemetry() const { return job_->telemetry(); }

 private:
  [[nodiscard]] runtime::SpawnSpec spawn_spec(int join_iteration) const;

  std::string app_;
  std::vector<std::string> args_;  // argv[1..], without the join options
  std::vector<ResizeStep> schedule_;
  std::vector<ResizeStep> asks_;  // --ask-controller
  std::optional<runtime::ElasticJob> job_;
  std::optional<runtime::ControlPlaneLink> link_;  // in place: attach() keeps its address
  int grid_ranks_ = 1;
  int first_iteration_ = 0;
};

}  // namespace bellows::examples
