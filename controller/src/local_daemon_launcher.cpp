#include "bellows/controller/local_daemon_launcher.hpp"

#include "daemon_process.hpp"

#include <bellows/protocol/job_directory.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace bellows::controller {

LocalDaemonLauncher::LocalDaemonLauncher(Options options) : options_(std::move(options)) {}

LocalDaemonLauncher::~LocalDaemonLauncher() {
  while (!running_.empty()) stop(running_.begin()->first);
}

std::filesystem::path LocalDaemonLauncher::node_dir(const std::string& node) const {
  return protocol::JobDirectory{options_.job_dir}.node_dir(node);
}

std::filesystem::path LocalDaemonLauncher::uri_file(const std::string& node) const {
  return protocol::JobDirectory{options_.job_dir}.daemon_uri_file(node);
}

pid_t LocalDaemonLauncher::pid_of(const std::string& node) const {
  const auto it = running_.find(node);
  return it == running_.end() ? 0 : it->second;
}

RmStatus LocalDaemonLauncher::launch(const std::string& node, const std::string& job) {
  if (running_.contains(node))
    return {RmCode::bad_request, "a daemon of job " + job + " already runs on " + node};
  const protocol::JobDirectory layout{options_.job_dir};
  const auto dir = node_dir(node);
  if (RmStatus prepared = detail::prepare_node_dir(dir, uri_file(node)); !prepared.ok()) return prepared;

  std::vector<std::string> args = {options_.bellowsd.string(),
                                   "--tmpdir",      layout.pmix_tmpdir(node).string(),
                                   "--uri-file",    uri_file(node).string(),
                                   "--node-name",   node,
                                   "--job-dir",     options_.job_dir.string()};
  if (options_.verbose) args.push_back("--verbose");
  for (auto& argument : detail::heartbeat_timeout_arguments(options_.heartbeat_timeout))
    args.push_back(std::move(argument));
  std::string error;
  const pid_t pid = detail::spawn_logged(std::move(args), detail::current_environment(),
                                         layout.daemon_log(node), &error);
  if (pid == 0) {
    return {RmCode::unavailable,
            "cannot start " + options_.bellowsd.string() + " for " + node + ": " + error};
  }
  running_[node] = pid;
  return {};
}

RmStatus LocalDaemonLauncher::stop(const std::string& node) {
  const auto it = running_.find(node);
  if (it == running_.end()) return {RmCode::unknown_node, "no daemon runs on " + node};
  const pid_t pid = it->second;
  running_.erase(it);
  ::kill(pid, SIGTERM);
  ::kill(pid, SIGCONT);  // a stopped daemon (a node gone silent) takes its SIGTERM once it runs
  if (detail::reaped_within(pid, options_.stop_grace)) return {};
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {RmCode::unavailable, "the daemon on " + node + " did not stop within " +
                             std::to_string(options_.stop_grace.count()) + " ms: killed"};
}

}  // namespace bellows::controller
