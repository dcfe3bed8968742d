#pragma once
// A child process for tests: started with fork/exec, its stdout read line by line on a thread,
// stopped by its pid (SIGKILL) and reaped when the object goes away.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace bellows::testing {

class ChildProcess {
 public:
  /// Starts argv with this process's environment plus extra_env ("NAME=VALUE").
  ChildProcess(std::vector<std::string> argv, std::vector<std::string> extra_env = {}) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    for (auto& e : extra_env) env_strings.push_back(e);
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    reader_ = std::thread([this, fd = fds[0]] { read_lines(fd); });
  }

  ~ChildProcess() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      wait_exit(std::chrono::seconds(10));
    }
    if (reader_.joinable()) reader_.join();
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  /// The next line of output, or std::nullopt when none came within limit (or output ended).
  std::optional<std::string> next_line(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, limit, [&] { return !lines_.empty() || eof_; })) return std::nullopt;
    if (lines_.empty()) return std::nullopt;
    std::string line = std::move(lines_.front());
    lines_.pop_front();
    return line;
  }

  /// The raw waitpid status once the child ended, std::nullopt if it still runs after limit.
  std::optional<int> wait_exit(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int status = 0;
      const pid_t got = ::waitpid(pid_, &status, WNOHANG);
      if (got == pid_) {
        reaped_ = true;
        return status;
      }
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

 private:
  void read_lines(int fd) {
    std::string partial;
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n <= 0) break;
      partial.append(buffer, static_cast<std::size_t>(n));
      std::size_t newline;
      while ((newline = partial.find('\n')) != std::string::npos) {
        {
          std::lock_guard lock(mutex_);
          lines_.push_back(partial.substr(0, newline));
        }
        cv_.notify_all();
        partial.erase(0, newline + 1);
      }
    }
    ::close(fd);
    {
      std::lock_guard lock(mutex_);
      eof_ = true;
    }
    cv_.notify_all();
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  std::thread reader_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  bool eof_ = false;
};

}  // namespace bellows::testing
