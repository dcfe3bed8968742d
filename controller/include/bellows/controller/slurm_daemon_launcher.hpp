#pragma once
// The Slurm backend's NodeLauncher: one bellowsd per node of the job, started as a job step
// on that node (`srun --jobid=JOB --overlap -N1 -n1 -w NODE ... bellowsd ...`), so that Slurm
// accounts for it, places it on the node and ends it with the job. Not `--exact`: on nodes a
// job gained by expansion (Slurm 22.05, select/linear) a step with --exact is refused
// ("Requested node configuration is not available") or waits forever ("Requested nodes are
// busy") while another step runs on the job; --overlap alone shares the nodes with the job's
// other steps. It registers
// with the job's controller like any daemon. Stopping a node's daemon sends SIGINT to its
// srun, which (with --disable-status) forwards it to the step: bellowsd stops cleanly. After
// stop_grace, SIGTERM (srun then cancels the step, SIGKILL to its task), then SIGKILL to srun.
//
// The daemon finds the controller in the job directory (bellowsd --job-dir: controller.endpoint,
// and controller.key for tcp://), so the job directory must be visible on every node of the job:
// a shared home or project directory on a cluster. The node's own directory
// (JOB_DIR/nodes/NODE: PMIx rendezvous files, URI file, log) is in it too.
//
// srun runs with the sizes of the job at the time bellows started removed from its
// environment (SLURM_NNODES, SLURM_NODELIST, SLURM_TASKS_PER_NODE, ...): after an expansion
// they are stale, and srun would refuse a node the job gained ("More processors requested
// than permitted"); srun takes the job's current layout from slurmctld instead.
//
// A node the job spans through a companion allocation (slurm_expand_strategy.hpp) is held by
// that companion, not by the job: its daemon runs as a step of the companion
// (`srun --jobid=COMPANION ...`). Options::slurm_job_of names the Slurm job of each node.

#include "bellows/controller/local_node_pool.hpp"

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace bellows::controller {

/// Thread safety: one thread (the controller's loop) calls every method.
class SlurmDaemonLauncher final : public NodeLauncher {
 public:
  struct Options {
    std::filesystem::path srun = "srun";  ///< the srun executable
    std::string job;                      ///< the Slurm job id the steps run in
    /// The Slurm job that holds a node (a companion's id), when it is not `job`; empty
    /// function or empty answer: `job`.
    std::function<std::string(const std::string& node)> slurm_job_of;
    std::filesystem::path bellowsd;       ///< the bellowsd executable (as seen on the node)
    /// The job's private directory, seen by every node: bellowsd --job-dir.
    std::filesystem::path job_dir;
    bool verbose = false;                 ///< bellowsd --verbose
    /// bellowsd --heartbeat-timeout: the job's recovery.heartbeat_timeout.
    std::chrono::milliseconds heartbeat_timeout{5000};
    std::chrono::milliseconds stop_grace{5000};  ///< SIGINT -> SIGTERM (step cancelled)
  };

  /// The variables removed from srun's environment (stale after a resize of the job).
  static const std::vector<std::string>& stale_variables();

  explicit SlurmDaemonLauncher(Options options);
  /// Stops every daemon still running.
  ~SlurmDaemonLauncher() override;
  SlurmDaemonLauncher(const SlurmDaemonLauncher&) = delete;
  SlurmDaemonLauncher& operator=(const SlurmDaemonLauncher&) = delete;

  /// Starts the srun of the node's daemon; ok once srun runs (the daemon registers with the
  /// controller on its own once the step started), or why it could not start.
  RmStatus launch(const std::string& node, const std::string& job) override;
  /// SIGINT to the srun (forwarded to bellowsd), waits up to stop_grace, then SIGTERM (srun
  /// cancels the step), 2 s later SIGKILL; reaps it.
  RmStatus stop(const std::string& node) override;
  /// The daemon went away on its own: SIGTERM to the srun at once, so that srun cancels the
  /// step and Slurm kills whatever the step still holds on the node (the rank and its
  /// mpiexec, which outlive a killed bellowsd). Does not wait: an srun whose node is cut from
  /// the network may take seconds, and the controller's loop goes on meanwhile. It is reaped
  /// by a later call of this launcher, and SIGKILLed by the first one 2 s or more after the
  /// SIGTERM (or by the destructor). A SIGINT would reach no daemon, and the controller's
  /// loop would wait stop_grace for nothing.
  RmStatus stop_gone(const std::string& node) override;

  /// The Slurm job a node's daemon runs in: Options::slurm_job_of's answer, else the job.
  [[nodiscard]] std::string slurm_job(const std::string& node) const;
  /// The srun command line launch() runs for a node.
  [[nodiscard]] std::vector<std::string> command(const std::string& node) const;
  /// The directory of a node: JOB_DIR/nodes/NODE.
  [[nodiscard]] std::filesystem::path node_dir(const std::string& node) const;
  /// The file holding the URI of a node's daemon.
  [[nodiscard]] std::filesystem::path uri_file(const std::string& node) const;
  /// The pid of a node's srun, 0 when none runs.
  [[nodiscard]] pid_t pid_of(const std::string& node) const;

 private:
  Options options_;
  std::map<std::string, pid_t> running_;
  /// sruns stop_gone() sent SIGTERM, not reaped yet, with when they get SIGKILL.
  std::vector<std::pair<pid_t, std::chrono::steady_clock::time_point>> terminating_;
  /// Reaps the sruns of terminating_ that ended, SIGKILLs those past their time (and, with
  /// `all`, every one) and reaps them.
  void reap_terminating(bool all = false);
};

}  // namespace bellows::controller
