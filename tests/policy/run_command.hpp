#pragma once
// Runs a program with its stdout and stderr captured, under a deadline: a program still
// running at the deadline is killed by its pid and reported.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace bellows::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

namespace detail {

inline std::string slurp_and_remove(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  return text.str();
}

inline std::string temp_path(const char* what) {
  std::string path = "/tmp/bellows-policy-test-" + std::string(what) + "-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  ::close(fd);
  return path;
}

}  // namespace detail

/// Runs argv[0] with the arguments; throws when it cannot start or outlives `limit`.
inline CommandResult run_command(const std::vector<std::string>& argv,
                                 std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const std::string out_path = detail::temp_path("out");
  const std::string err_path = detail::temp_path("err");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_TRUNC, 0);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_TRUNC, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) throw std::runtime_error("cannot start " + argv[0]);

  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      detail::slurp_and_remove(out_path);
      detail::slurp_and_remove(err_path);
      throw std::runtime_error(argv[0] + " did not finish in time; killed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = detail::slurp_and_remove(out_path);
  result.err = detail::slurp_and_remove(err_path);
  return result;
}

}  // namespace bellows::testing
