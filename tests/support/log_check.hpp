#pragma once
// A test fails on any warning or error in its log that it did not allow (UCX's habit: an
// unexpected warning is a bug, even when every assertion holds).
//
// LoggedTest is the base fixture for tests that run servers, clients or a controller in
// their own process. While a test runs, everything written to file descriptor 2 (the
// transport's default sink "bellows-transport: warning: ...", the controller's "bellows run:
// ...", a child process that inherited stderr) is copied line by line into the test's log
// and still shown on the real stderr; a test that gives a LogSink of its own records through
// record_log() or log_sink(). When the test ends, after the derived fixture's members are
// destroyed (so that what they log on the way out counts too), every warning or error line
// that no allow_log() covers fails the test, quoting the line.
//
//   EXPECT_EQ(logs.front(), allow_log("warning: refused connection: ..."));
//
// allow_log() returns its text, so that the assertion on a warning the test is about is
// also its allowance. The fixture holds a watchdog as well (BELLOWS_TEST_WATCHDOG_S, 60 s).

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "watchdog.hpp"

namespace bellows::testing {

/// Whether a log line is at warning or error level: its level word, the first of the line's
/// first three "WORD: " fields that names a level, is warning or error ("warning: ...",
/// "bellows run: error: ...", "bellows-transport: warning: ...", "bellowsd: warning: ..."; not
/// "bellows run: info: ... error: ...").
inline bool is_warning_or_error(std::string_view line) {
  for (int field = 0; field < 3; ++field) {
    const auto end = line.find(": ");
    if (end == std::string_view::npos) return false;
    std::string word(line.substr(0, end));
    for (char& c : word) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (word == "warning" || word == "error") return true;
    if (word == "info" || word == "debug" || word == "notice") return false;
    line.remove_prefix(end + 2);
  }
  return false;
}

/// The log lines of one test and the warnings it allows. Thread-safe.
class LogCheck {
 public:
  void record(std::string line) {
    std::lock_guard lock(mutex_);
    lines_.push_back(std::move(line));
  }

  /// Allows every warning or error line that contains `text`; returns `text`.
  std::string allow(std::string text) {
    std::lock_guard lock(mutex_);
    allowed_.push_back(text);
    return text;
  }

  [[nodiscard]] std::vector<std::string> lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }

  /// The warning and error lines no allowance covers, in order.
  [[nodiscard]] std::vector<std::string> unexpected() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& line : lines_) {
      if (!is_warning_or_error(line)) continue;
      bool allowed = false;
      for (const auto& text : allowed_) allowed = allowed || line.find(text) != std::string::npos;
      if (!allowed) out.push_back(line);
    }
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
  std::vector<std::string> allowed_;
};

/// While it lives, file descriptor 2 is a pipe whose every complete line goes to `on_line`
/// and every byte to the real stderr. stop() (or the destructor) puts stderr back and hands
/// over what was written up to then; it does not wait for child processes that inherited the
/// pipe.
class StderrTee {
 public:
  explicit StderrTee(std::function<void(std::string)> on_line) : on_line_(std::move(on_line)) {
    std::fflush(stderr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0 || ::pipe2(wake_, O_CLOEXEC) != 0) return;
    saved_ = ::fcntl(2, F_DUPFD_CLOEXEC, 3);
    read_ = fds[0];
    ::dup2(fds[1], 2);
    ::close(fds[1]);
    watchdog_fd().store(saved_);
    thread_ = std::thread([this] { run(); });
  }
  ~StderrTee() { stop(); }
  StderrTee(const StderrTee&) = delete;
  StderrTee& operator=(const StderrTee&) = delete;

  void stop() {
    if (!thread_.joinable()) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    watchdog_fd().store(2);
    while (::write(wake_[1], "x", 1) < 0 && errno == EINTR) {
    }
    thread_.join();
    for (int fd : {read_, wake_[0], wake_[1], saved_}) ::close(fd);
  }

 private:
  void run() {
    std::string partial;
    bool stopping = false;
    char buffer[4096];
    for (;;) {
      pollfd fds[2] = {{read_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      // Once stopping, whatever this process wrote is already in the pipe: drain, then end.
      const int n = ::poll(fds, 2, stopping ? 0 : -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      if (fds[1].revents != 0) stopping = true;
      if ((fds[0].revents & POLLIN) != 0) {
        const ssize_t got = ::read(read_, buffer, sizeof buffer);
        if (got <= 0) break;
        for (ssize_t done = 0; done < got;) {
          const ssize_t w = ::write(saved_, buffer + done, static_cast<std::size_t>(got - done));
          if (w <= 0) break;
          done += w;
        }
        partial.append(buffer, static_cast<std::size_t>(got));
        for (auto end = partial.find('\n'); end != std::string::npos; end = partial.find('\n')) {
          on_line_(partial.substr(0, end));
          partial.erase(0, end + 1);
        }
      } else if ((fds[0].revents & POLLHUP) != 0 || stopping) {
        break;
      }
    }
    if (!partial.empty()) on_line_(partial);
  }

  std::function<void(std::string)> on_line_;
  int saved_ = -1;
  int read_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

/// The base fixture of tests that log: a watchdog, stderr copied into the test's log, and a
/// failure per unexpected warning or error line when the test ends.
class LoggedTest : public ::testing::Test {
 protected:
  LoggedTest() = default;

  ~LoggedTest() override {
    tee_.stop();
    for (const auto& line : log_.unexpected()) {
      ADD_FAILURE() << "unexpected line in the test's log: " << line
                    << "\n(a test that expects it says so with allow_log())";
    }
  }

  /// Allows warning and error lines that contain `text`; returns `text`.
  std::string allow_log(std::string text) { return log_.allow(std::move(text)); }

  /// Records a line of a sink the test gave ("warning: refused connection: ...").
  void record_log(std::string line) { log_.record(std::move(line)); }

  /// A LogSink (transport::LogSink and the like) that records "LEVEL: TEXT".
  template <class Level>
  std::function<void(Level, const std::string&)> log_sink() {
    return [this](Level level, const std::string& text) {
      record_log(std::string(to_string(level)) + ": " + text);
    };
  }

  /// Every line logged so far.
  [[nodiscard]] std::vector<std::string> logged() const { return log_.lines(); }

 private:
  Watchdog watchdog_{limit_from_env("BELLOWS_TEST_WATCHDOG_S", 60.0),
                     ::testing::UnitTest::GetInstance()->current_test_info()->name()};
  LogCheck log_;
  StderrTee tee_{[this](std::string line) { log_.record(std::move(line)); }};
};

}  // namespace bellows::testing
