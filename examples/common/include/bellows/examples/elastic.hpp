#pragma once
// The example applications' own resizes: the --resize schedule ("iter=3:+2,iter=6:-3") and
// --ask-controller, on top of libbellows' runtime::ElasticSession, which starts the job and
// carries every resize out (any application can use it the same way; docs/runtime.md).
//
// A job can shrink only if every rank but the first is its own MPI world, so an elastic
// job is started as one process (scripts/bellows-local -n N -- APP ARGS runs
// `mpiexec -n 1 APP ARGS` with BELLOWS_LOCAL_RANKS=N), which spawns the other N - 1 ranks
// itself, one per MPI_Comm_spawn. A resize "+k" spawns k more ranks between iterations
// (they run the same program and join at that iteration); "-k" removes the k
// highest-numbered ranks, which hand their data over, finalize and exit 0.
// With --rebalance on (the default; RuntimeOptions::rebalance_on_resize) the runtime
// re-grids at each resize: every tile goes where a job started at the new size would hold
// it (regrid.hpp), and stealing (--steal on) evens out what is left. With --rebalance off the fixed mapping stays
// over the first N ranks (the grid), ranks added later get their work by stealing alone,
// and each leaving rank hands its tiles to one backup.

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/elastic_session.hpp"

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

/// The example programs' own resizes, on top of libbellows' runtime::ElasticSession (which
/// starts the job, joins spawned processes and carries resizes out): the --resize schedule,
/// posted to the session's ElasticJob, and --ask-controller, the application's requests to
/// the controller under `bellows run`.
class ScheduledResizes {
 public:
  /// Throws std::invalid_argument when the schedule cannot run on this job: --resize under
  /// `bellows run` (the controller decides), a shrink in a job whose ranks cannot leave
  /// (mpiexec -n N), a schedule that leaves no rank, --ask-controller outside `bellows run`.
  ScheduledResizes(const AppOptions& options, runtime::ElasticSession& session);

  /// Before iteration `it` (0-based), on rank 0: posts the schedule's request for `it` and
  /// asks the controller, if either names it. Call before session.before_iteration(it).
  void post_before(int it);

 private:
  runtime::ElasticSession& session_;
  std::vector<ResizeStep> schedule_;
  std::vector<ResizeStep> asks_;
};

/// Runs the example's iterations from the session's first to `options.iterations` and ends
/// the job with runtime.finish(`gather`): a loss in an iteration or at the end rolls back to the
/// buddies' checkpoint (session.recover()) and runs the iterations after it again, forgetting
/// their results (docs/recovery.md, "The end of a job"). `iterations` gets each completed
/// iteration's result at `flops` per iteration. Returns the job's end on every rank that
/// reached it, nullopt on a rank that left the job in a shrink.
std::optional<runtime::JobEnd> run_elastic_iterations(const AppOptions& options, runtime::ElasticSession& session,
                                                      runtime::Runtime& runtime, ScheduledResizes& resizes,
                                                      std::span<const runtime::TiledMatrix* const> gather,
                                                      double flops, std::vector<IterationResult>& iterations);

}  // namespace bellows::examples
