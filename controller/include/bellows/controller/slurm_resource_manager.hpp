#pragma once
// The Slurm backend of the resource manager, over the libslurm C API (Slurm 22.05; for
// repeated resizes of one job the cluster needs accounting through slurmdbd). Built only when
// libslurm is found (target bellows::controller_slurm).
//
// In Slurm terms, with one of two expand strategies (slurm_expand_strategy.hpp), chosen at
// construction from the controller's SchedulerParameters and PrologFlags (slurm_load_ctl_conf)
// unless SlurmOptions forces one:
// - request_expand, merge (SchedulerParameters=permit_job_expansion): a helper job, an
//   allocation without a job step that depends on the job (dependency "expand:JOBID",
//   slurm_allocate_resources); once it runs, it is merged into the job (slurm_update_job on
//   the helper with min_nodes = 0), and the job, still under its own id, holds the helper's
//   nodes.
// - request_expand, companion (any Slurm): an allocation without a job step of its own
//   (slurm_allocate_resources with no script, as `salloc --no-shell`), named
//   bellows-grow-JOBID, commented bellows:companion-of:JOBID, its time limit trimmed to what
//   the job has left. Once it runs, its nodes are the job's; slurm_job_of() names the
//   companion that holds a node, and the node's daemon runs as a step of it.
//   Either way a helper or companion not granted within the request's timeout is cancelled
//   (slurm_kill_job) and the answer is timeout.
// - release_nodes: the job is shrunk to the nodes that stay (slurm_update_job with
//   req_nodes); Slurm kills what the job still ran on the others. The batch host cannot go.
//   A companion all of whose nodes leave is completed (slurm_complete_job: sacct shows it
//   COMPLETED); one that keeps some is shrunk like the job.
// - idle_nodes, pending_jobs, nodes_of: one slurmctld RPC each (slurm_load_node,
//   slurm_load_jobs, slurm_load_job).
// Answers carry the time of each phase ("granted n3,n4: helper job 41 submitted in 0.00 s,
// allocated in 0.02 s, merged in 0.41 s"), so the controller's event log records them.

#include "bellows/controller/resource_manager.hpp"
#include "bellows/controller/slurm_expand_strategy.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bellows::controller {

/// Settings of the Slurm backend.
struct SlurmOptions {
  /// The partition whose nodes and pending jobs idle_nodes() and pending_jobs() report;
  /// empty: every partition. Helper jobs always go to the partition of the job they grow.
  std::string partition;
  /// How often the backend's thread asks slurmctld about a helper job or a shrink.
  std::chrono::milliseconds poll_interval{10};
  /// How long a release may take before it is answered unavailable (Slurm takes well
  /// under a second), and how long a merge may take to show in the job.
  std::chrono::milliseconds settle_timeout{10'000};
  /// How a job grows: automatic (what the site's settings allow), merge or companion.
  ExpandStrategy expand_strategy = ExpandStrategy::automatic;
};

/// ResourceManager over a Slurm cluster (libslurm; slurm.conf from SLURM_CONF or the
/// default path). Job ids are Slurm job ids ("41").
///
/// Thread safety: as ResourceManager (one thread calls every method). The blocking libslurm
/// calls of request_expand, cancel_expand and release_nodes run on one thread of the
/// backend; their answers are queued and delivered by progress(). The queries
/// (idle_nodes, pending_jobs, nodes_of) block the caller for one RPC.
/// Lifetime: one SlurmResourceManager per process (libslurm's slurm_init/slurm_fini are
/// process-wide). The destructor cancels every helper job not yet merged and joins the
/// backend's thread; callbacks not yet delivered are dropped. It also completes every
/// companion still held, each once the steps in it ended (up to 5 s in all, polled: a step
/// still ending would be CANCELLED): nothing of the job is left in the queue.
class SlurmResourceManager final : public ResourceManager {
 public:
  explicit SlurmResourceManager(SlurmOptions options = {});
  ~SlurmResourceManager() override;
  SlurmResourceManager(const SlurmResourceManager&) = delete;
  SlurmResourceManager& operator=(const SlurmResourceManager&) = delete;

  [[nodiscard]] std::string name() const override { return "slurm"; }
  RmRequestId request_expand(const ExpandRequest& request, ExpandCallback done) override;
  bool cancel_expand(RmRequestId id) override;
  void release_nodes(const std::string& job, const std::vector<std::string>& nodes,
                     ReleaseCallback done) override;
  [[nodiscard]] RmResult<std::vector<std::string>> idle_nodes() override;
  [[nodiscard]] RmResult<std::vector<PendingJob>> pending_jobs() override;
  [[nodiscard]] RmResult<std::vector<std::string>> nodes_of(const std::string& job) override;
  void progress() override;

  /// Writes where `bellows run` keeps the job's files into the job's comment, as
  /// "bellows:DIR", so that `bellows status JOB` finds them from any shell with the job id.
  /// A comment of the user's own is kept: the answer is then denied, quoting it. One RPC.
  RmStatus publish_job_dir(const std::string& job, const std::string& dir);
  /// The directory publish_job_dir() wrote; unknown_job, or denied when the job's comment
  /// names none. One RPC.
  [[nodiscard]] RmResult<std::string> published_job_dir(const std::string& job);

  /// The Slurm job id of the helper job (or companion) of a pending expansion, 0 when it has
  /// none (yet, or any more). For tests and diagnostics.
  [[nodiscard]] std::uint32_t helper_job_of(RmRequestId id) const;

  /// The strategy this backend grows jobs with, and why (chosen at construction).
  [[nodiscard]] const StrategyChoice& expand_strategy() const noexcept;

  /// The Slurm job that holds `node` for `job`: a companion's id, or `job` itself (also for
  /// a node the job does not hold). Reflects every answer progress() delivered.
  [[nodiscard]] std::string slurm_job_of(const std::string& job, const std::string& node) const;

  /// The companions job holds now, in the order they were granted.
  [[nodiscard]] std::vector<std::uint32_t> companions_of(const std::string& job) const;

  /// The job's companions with the nodes each holds (what the job record keeps).
  [[nodiscard]] std::vector<CompanionAllocation> companion_allocations(const std::string& job) const override;

  /// Rebuilds what this backend knows of `job` from its record, for a controller that takes
  /// the running job over (`bellows run --attach`): its nodes (first node first) and the
  /// companions that hold some of them. Asks slurmctld about the job and each companion (one
  /// RPC each) and checks the record against it (check_slurm_takeover): denied, naming what
  /// is wrong, for a job that no longer runs, a companion no longer running or no longer the
  /// job's, a node Slurm no longer gives the job or its companion; unknown_job or
  /// unavailable as slurmctld answers. On ok the job's companions are this backend's, as if
  /// it had granted them: released at a shrink, completed at the end. A first node that was
  /// the job's batch host and that Slurm took out of the job when it failed is no longer the
  /// job's: its name goes to `first_node_lost` (when given), else "" goes there.
  RmStatus take_over(const std::string& job, const std::vector<std::string>& nodes,
                     const std::vector<CompanionAllocation>& companions, std::string* first_node_lost = nullptr);

  /// Ends Slurm job `job` with `exit_status` (slurm_complete_job: COMPLETED for 0, FAILED
  /// otherwise), for a controller that took over a job whose batch script died with its first
  /// node: nothing else would end it before its time limit. Slurm ends what still runs in it,
  /// this process's own step included.
  RmStatus complete_job(const std::string& job, int exit_status);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bellows::controller
