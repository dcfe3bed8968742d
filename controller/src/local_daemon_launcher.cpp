#include "bellows/controller/local_daemon_launcher.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

extern char** environ;

namespace bellows::controller {

LocalDaemonLauncher::LocalDaemonLauncher(Options options) : options_(std::move(options)) {}

LocalDaemonLauncher::~LocalDaemonLauncher() {
  while (!running_.empty()) stop(running_.begin()->first);
}

std::filesystem::path LocalDaemonLauncher::node_dir(const std::string& node) const {
  return options_.job_dir / "nodes" / node;
}

std::filesystem::path LocalDaemonLauncher::uri_file(const std::string& node) const {
  return node_dir(node) / "uri";
}

pid_t LocalDaemonLauncher::pid_of(const std::string& node) const {
  const auto it = running_.find(node);
  return it == running_.end() ? 0 : it->second;
}

RmStatus LocalDaemonLauncher::launch(const std::string& node, const std::string& job) {
  if (running_.contains(node))
    return {RmCode::bad_request, "a daemon of job " + job + " already runs on " + node};
  std::error_code ec;
  const auto dir = node_dir(node);
  std::filesystem::create_directories(dir, ec);
  if (ec) return {RmCode::unavailable, "cannot create " + dir.string() + ": " + ec.message()};
  std::filesystem::remove(uri_file(node), ec);

  std::vector<std::string> args = {options_.bellowsd.string(),
                                   "--tmpdir",      (dir / "pmix").string(),
                                   "--uri-file",    uri_file(node).string(),
                                   "--node-name",   node,
                                   "--controller",  options_.controller_endpoint};
  if (options_.verbose) args.push_back("--verbose");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = (dir / "bellowsd.log").string();
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return {RmCode::unavailable, "cannot start " + options_.bellowsd.string() + " for " + node + ": " +
                               std::strerror(rc)};
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
  const auto deadline = std::chrono::steady_clock::now() + options_.stop_grace;
  int status = 0;
  while (true) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno == ECHILD)) return {};
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return {RmCode::unavailable, "the daemon on " + node + " did not stop within " +
                             std::to_string(options_.stop_grace.count()) + " ms: killed"};
}

}  // namespace bellows::controller
