#include "bellows/controller/slurm_daemon_launcher.hpp"

#include "daemon_process.hpp"

#include <bellows/protocol/job_directory.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

namespace bellows::controller {

const std::vector<std::string>& SlurmDaemonLauncher::stale_variables() {
  static const std::vector<std::string> names = {
      "SLURM_NNODES",        "SLURM_JOB_NUM_NODES",     "SLURM_NODELIST",
      "SLURM_JOB_NODELIST",  "SLURM_JOB_CPUS_PER_NODE", "SLURM_TASKS_PER_NODE",
      "SLURM_NTASKS",        "SLURM_NPROCS",            "SLURM_STEP_NUM_NODES",
      "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_TASKS",    "SLURM_STEP_TASKS_PER_NODE"};
  return names;
}

SlurmDaemonLauncher::SlurmDaemonLauncher(Options options) : options_(std::move(options)) {}

SlurmDaemonLauncher::~SlurmDaemonLauncher() {
  while (!running_.empty()) stop(running_.begin()->first);
  reap_terminating(true);
}

std::filesystem::path SlurmDaemonLauncher::node_dir(const std::string& node) const {
  return protocol::JobDirectory{options_.job_dir}.node_dir(node);
}

std::filesystem::path SlurmDaemonLauncher::uri_file(const std::string& node) const {
  return protocol::JobDirectory{options_.job_dir}.daemon_uri_file(node);
}

pid_t SlurmDaemonLauncher::pid_of(const std::string& node) const {
  const auto it = running_.find(node);
  return it == running_.end() ? 0 : it->second;
}

std::string SlurmDaemonLauncher::slurm_job(const std::string& node) const {
  std::string holder = options_.slurm_job_of ? options_.slurm_job_of(node) : std::string();
  return holder.empty() ? options_.job : holder;
}

std::vector<std::string> SlurmDaemonLauncher::command(const std::string& node) const {
  const protocol::JobDirectory layout{options_.job_dir};
  std::vector<std::string> args = {options_.srun.string(),
                                   "--jobid=" + slurm_job(node),
                                   "--overlap",
                                   "-N1",
                                   "-n1",
                                   "-w",
                                   node,
                                   "--quiet",
                                   "--disable-status",
                                   "--job-name=bellowsd",
                                   "--kill-on-bad-exit=1",
                                   options_.bellowsd.string(),
                                   "--tmpdir",
                                   layout.pmix_tmpdir(node).string(),
                                   "--uri-file",
                                   uri_file(node).string(),
                                   "--node-name",
                                   node,
                                   "--job-dir",
                                   options_.job_dir.string()};
  if (options_.verbose) args.push_back("--verbose");
  for (auto& argument : detail::heartbeat_timeout_arguments(options_.heartbeat_timeout))
    args.push_back(std::move(argument));
  return args;
}

RmStatus SlurmDaemonLauncher::launch(const std::string& node, const std::string& job) {
  reap_terminating();
  if (running_.contains(node))
    return {RmCode::bad_request, "a daemon of job " + job + " already runs on " + node};
  const auto dir = node_dir(node);
  if (RmStatus prepared = detail::prepare_node_dir(dir, uri_file(node)); !prepared.ok()) return prepared;

  const auto& stale = stale_variables();
  std::vector<std::string> env = detail::current_environment();
  std::erase_if(env, [&stale](const std::string& entry) {
    return std::find(stale.begin(), stale.end(), entry.substr(0, entry.find('='))) != stale.end();
  });
  // The job the daemon serves, even when its step runs in a companion allocation (whose id
  // srun puts in SLURM_JOB_ID): a daemon left without its controller reads it (slurm_orphan.hpp).
  std::erase_if(env, [](const std::string& entry) { return entry.starts_with("BELLOWS_SLURM_JOB="); });
  env.push_back("BELLOWS_SLURM_JOB=" + job);
  // The bellows command this controller runs as: a daemon that finds the job's first node
  // lost starts `bellows run --attach` with it (slurm_orphan.hpp, first_node_takeover.hpp).
  std::erase_if(env, [](const std::string& entry) { return entry.starts_with("BELLOWS_CLI="); });
  std::error_code ec;
  if (const auto self = std::filesystem::read_symlink("/proc/self/exe", ec); !ec) env.push_back("BELLOWS_CLI=" + self.string());
  std::string error;
  const pid_t pid = detail::spawn_logged(command(node), std::move(env),
                                         protocol::JobDirectory{options_.job_dir}.daemon_log(node), &error);
  if (pid == 0) {
    return {RmCode::unavailable,
            "cannot start " + options_.srun.string() + " for " + node + ": " + error};
  }
  running_[node] = pid;
  return {};
}

RmStatus SlurmDaemonLauncher::stop_gone(const std::string& node) {
  reap_terminating();
  const auto it = running_.find(node);
  if (it == running_.end()) return {RmCode::unknown_node, "no daemon runs on " + node};
  const pid_t pid = it->second;
  running_.erase(it);
  ::kill(pid, SIGTERM);
  terminating_.emplace_back(pid, std::chrono::steady_clock::now() + std::chrono::milliseconds(2000));
  return {};
}

void SlurmDaemonLauncher::reap_terminating(bool all) {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(terminating_, [&](const auto& entry) {
    const auto [pid, kill_at] = entry;
    if (detail::reaped_within(pid, std::chrono::milliseconds(0))) return true;
    if (!all && now < kill_at) return false;
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return true;
  });
}

RmStatus SlurmDaemonLauncher::stop(const std::string& node) {
  reap_terminating();
  const auto it = running_.find(node);
  if (it == running_.end()) return {RmCode::unknown_node, "no daemon runs on " + node};
  const pid_t pid = it->second;
  running_.erase(it);
  // srun --disable-status forwards a single SIGINT to the step: bellowsd stops cleanly. On
  // SIGTERM srun would end the step with SIGKILL: that is the second resort.
  ::kill(pid, SIGINT);
  if (detail::reaped_within(pid, options_.stop_grace)) return {};
  ::kill(pid, SIGTERM);
  if (!detail::reaped_within(pid, std::chrono::milliseconds(2000))) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  return {RmCode::unavailable, "the daemon on " + node + " did not stop within " +
                                   std::to_string(options_.stop_grace.count()) +
                                   " ms of SIGINT: its step was cancelled"};
}

}  // namespace bellows::controller
