#include "bellows/controller/slurm_daemon_launcher.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

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
}

std::filesystem::path SlurmDaemonLauncher::node_dir(const std::string& node) const {
  return options_.job_dir / "nodes" / node;
}

std::filesystem::path SlurmDaemonLauncher::uri_file(const std::string& node) const {
  return node_dir(node) / "uri";
}

pid_t SlurmDaemonLauncher::pid_of(const std::string& node) const {
  const auto it = running_.find(node);
  return it == running_.end() ? 0 : it->second;
}

std::vector<std::string> SlurmDaemonLauncher::command(const std::string& node) const {
  const auto dir = node_dir(node);
  std::vector<std::string> args = {options_.srun.string(),
                                   "--jobid=" + options_.job,
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
                                   (dir / "pmix").string(),
                                   "--uri-file",
                                   uri_file(node).string(),
                                   "--node-name",
                                   node,
                                   "--controller",
                                   options_.controller_endpoint};
  if (options_.verbose) args.push_back("--verbose");
  return args;
}

RmStatus SlurmDaemonLauncher::launch(const std::string& node, const std::string& job) {
  if (running_.contains(node))
    return {RmCode::bad_request, "a daemon of job " + job + " already runs on " + node};
  std::error_code ec;
  const auto dir = node_dir(node);
  std::filesystem::create_directories(dir, ec);
  if (ec) return {RmCode::unavailable, "cannot create " + dir.string() + ": " + ec.message()};
  std::filesystem::remove(uri_file(node), ec);

  std::vector<std::string> args = command(node);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const auto& stale = stale_variables();
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (std::find(stale.begin(), stale.end(), name) != stale.end()) continue;
    env.push_back(entry);
  }
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = (dir / "bellowsd.log").string();
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return {RmCode::unavailable,
            "cannot start " + options_.srun.string() + " for " + node + ": " + std::strerror(rc)};
  }
  running_[node] = pid;
  return {};
}

namespace {

/// Waits up to `within` for the child to end; true once it is reaped.
bool reaped(pid_t pid, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  int status = 0;
  while (true) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno == ECHILD)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

RmStatus SlurmDaemonLauncher::stop(const std::string& node) {
  const auto it = running_.find(node);
  if (it == running_.end()) return {RmCode::unknown_node, "no daemon runs on " + node};
  const pid_t pid = it->second;
  running_.erase(it);
  // srun --disable-status forwards a single SIGINT to the step: bellowsd stops cleanly. On
  // SIGTERM srun would end the step with SIGKILL: that is the second resort.
  ::kill(pid, SIGINT);
  if (reaped(pid, options_.stop_grace)) return {};
  ::kill(pid, SIGTERM);
  if (!reaped(pid, std::chrono::milliseconds(2000))) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  return {RmCode::unavailable, "the daemon on " + node + " did not stop within " +
                                   std::to_string(options_.stop_grace.count()) +
                                   " ms of SIGINT: its step was cancelled"};
}

}  // namespace bellows::controller
