#include "daemon_process.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <thread>

extern char** environ;

namespace bellows::controller::detail {

RmStatus prepare_node_dir(const std::filesystem::path& dir, const std::filesystem::path& uri_file) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return {RmCode::unavailable, "cannot create " + dir.string() + ": " + ec.message()};
  std::filesystem::remove(uri_file, ec);
  return {};
}

pid_t spawn_logged(std::vector<std::string> args, std::vector<std::string> env,
                   const std::filesystem::path& log, std::string* error) {
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log_path = log.string();
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    if (error) *error = std::strerror(rc);
    return 0;
  }
  return pid;
}

std::vector<std::string> heartbeat_timeout_arguments(std::chrono::milliseconds timeout) {
  // Seconds with the milliseconds that are not zero: "5", "2.5", "0.75".
  std::string seconds = std::to_string(timeout.count() / 1000);
  if (const auto milliseconds = timeout.count() % 1000; milliseconds != 0) {
    std::string fraction = std::to_string(1000 + milliseconds).substr(1);
    fraction.erase(fraction.find_last_not_of('0') + 1);
    seconds += "." + fraction;
  }
  return {"--heartbeat-timeout", seconds};
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

bool reaped_within(pid_t pid, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  int status = 0;
  while (true) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno == ECHILD)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace bellows::controller::detail
