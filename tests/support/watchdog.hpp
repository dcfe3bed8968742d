#pragma once
// A watchdog for tests that may hang (a missed message, a deadlocked collective): if it
// is not disarmed within its limit, it prints what was running and aborts the process,
// so that mpiexec tears the whole job down instead of waiting for ctest's timeout.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace bellows::testing {

/// Where a watchdog writes why it aborts: stderr, or the real stderr while a test copies file
/// descriptor 2 into its log (StderrTee in log_check.hpp), so that the line is not lost with
/// the copying thread.
inline std::atomic<int>& watchdog_fd() {
  static std::atomic<int> fd{STDERR_FILENO};
  return fd;
}

class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds limit, std::string what, int rank = 0)
      : what_(std::move(what)), rank_(rank) {
    thread_ = std::thread([this, limit] {
      std::unique_lock lock(mutex_);
      if (!cv_.wait_for(lock, limit, [this] { return disarmed_; })) {
        std::fflush(stderr);
        ::dprintf(watchdog_fd().load(),
                  "\nWATCHDOG: rank %d: '%s' did not finish within %g s; aborting the process\n",
                  rank_, what_.c_str(), std::chrono::duration<double>(limit).count());
        std::fflush(stdout);
        std::abort();
      }
    });
  }

  ~Watchdog() { disarm(); }

  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void disarm() {
    {
      std::lock_guard lock(mutex_);
      disarmed_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string what_;
  int rank_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

/// Seconds from the environment variable `name`, or `fallback` when unset or invalid.
inline std::chrono::milliseconds limit_from_env(const char* name, double fallback_seconds) {
  double seconds = fallback_seconds;
  if (const char* text = std::getenv(name)) {
    char* end = nullptr;
    const double parsed = std::strtod(text, &end);
    if (end != text && parsed > 0.0) seconds = parsed;
  }
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0));
}

}  // namespace bellows::testing
