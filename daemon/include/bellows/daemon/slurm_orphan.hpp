#pragma once
// A daemon under Slurm that stopped because its controller is gone: when the job's batch host
// failed, nothing else ends the job.
//
// Slurm 22.05 (src/slurmctld/job_mgr.c, kill_running_job_by_node_name) takes a failed node out
// of a no-kill job of more than one node whatever the node is, the batch host included, and
// keeps the job RUNNING on the others: the batch script and `bellows run` died with the node,
// its completion never arrives, and _purge_missing_jobs looks only at the nodes still in the
// job. The job would hold its other nodes, idle, until its time limit. A daemon that stopped
// because its controller is gone is the last of Bellows there: it asks slurmctld, and when the
// job runs as a batch job whose batch host is DOWN, it says why in the job's output file and
// cancels the job (docs/slurm.md, "The job's first node").

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <stop_token>
#include <string_view>

namespace bellows::runtime {
struct FirstNodeLossFacts;
}  // namespace bellows::runtime

namespace bellows::daemon {

/// The KEY=VALUE words of one record of `scontrol show job -o` or `scontrol show node -o`.
using ScontrolRecord = std::map<std::string, std::string, std::less<>>;
[[nodiscard]] ScontrolRecord parse_scontrol_record(std::string_view line);

/// Whether to cancel job `job_id` (its record `job`; `batch_node`: the record of its BatchHost,
/// empty when that node is unknown), and why, in words for the job's output.
struct OrphanedJobVerdict {
  bool cancel = false;
  std::string why;
};
[[nodiscard]] OrphanedJobVerdict judge_orphaned_job(const std::string& job_id, const ScontrolRecord& job,
                                                    const ScontrolRecord& batch_node);

/// Whether a companion allocation of a job in `job_state` (its JobState; "" when slurmctld no
/// longer knows the job) is left behind: the job does not run (RUNNING, SUSPENDED, RESIZING),
/// so the controller that holds the companion is gone, and a job that runs again (requeued)
/// starts a controller of its own. A job of one node (as a job that grows by companions
/// starts) is requeued when that node fails (NODE_FAIL without requeue).
[[nodiscard]] bool companion_left_behind(const std::string& job_state);

/// Under Slurm (SLURM_JOB_ID set), once the daemon of `node` stopped because its controller is
/// gone: reads the job (BELLOWS_SLURM_JOB, which the controller sets, else SLURM_JOB_ID) and its
/// batch host with scontrol, and when judge_orphaned_job says so, appends a line to the job's
/// output file (StdOut) and cancels the job (scancel). When SLURM_JOB_ID names another job, the
/// companion allocation the daemon ran in, it cancels that too, once the job is cancelled or
/// companion_left_behind says so. Each command is bounded by `timeout`; a node cut off from
/// slurmctld gets no answer and does nothing.
/// Returns what it found or did, for the daemon's log.
[[nodiscard]] std::string end_job_if_batch_host_lost(const std::string& node, std::chrono::seconds timeout);

/// What start_takeover_if_first_node_lost found or did.
struct TakeoverAttempt {
  /// A controller was started here, or another node's daemon is the one to start it: asking
  /// again changes nothing.
  bool settled = false;
  std::string said;  ///< for the daemon's log
  /// What slurmctld said of the job (its state "" when slurmctld no longer knows it); null
  /// when it did not answer (ControllerLink::slurmctld_said).
  std::shared_ptr<const runtime::FirstNodeLossFacts> slurmctld_said;
};

/// Under Slurm, while the controller of the daemon of `node` is gone and the node's ranks run
/// on: asks slurmctld about the job (BELLOWS_SLURM_JOB, else SLURM_JOB_ID), its batch host and
/// its nodes, and when runtime::plan_first_node_takeover names this node, appends the reason to
/// the job's output file (StdOut) and starts, detached from this daemon, `srun --jobid JOB
/// --overlap -N1 -n1 -w NODE BELLOWS_CLI run --attach JOB` with its output appended to that
/// file too (BELLOWS_CLI: the bellows command of the controller that started the daemon). Each
/// scontrol command is bounded by `timeout`, and ends within 0.1 s once `stop` is requested
/// (the daemon stops): no answer then.
[[nodiscard]] TakeoverAttempt start_takeover_if_first_node_lost(const std::string& node,
                                                                std::chrono::seconds timeout,
                                                                const std::stop_token& stop = {});

/// SlurmdTimeout in seconds from the text of `scontrol show config` ("SlurmdTimeout = 300
/// sec"); nullopt when the text has none.
[[nodiscard]] std::optional<double> parse_slurmd_timeout(std::string_view config);

/// Slurm's SlurmdTimeout, asked of slurmctld (scontrol show config, bounded by `timeout`, or
/// until `stop` is requested); nullopt without an answer.
[[nodiscard]] std::optional<double> slurmd_timeout_seconds(std::chrono::seconds timeout,
                                                           const std::stop_token& stop = {});

}  // namespace bellows::daemon
