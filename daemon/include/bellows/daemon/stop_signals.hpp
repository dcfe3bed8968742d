#pragma once
// The signals that stop bellowsd, SIGTERM and SIGINT: the daemon blocks them in every thread
// and takes them by sigwait; the ranks it launches unblock them, so that they stop on them too.
//
// Both functions are async-signal-safe (a launcher calls stop_signals() between fork and exec).

#include <csignal>

namespace bellows::daemon {

/// SIGTERM and SIGINT.
[[nodiscard]] inline sigset_t stop_signals() noexcept {
  sigset_t set;
  ::sigemptyset(&set);
  ::sigaddset(&set, SIGTERM);
  ::sigaddset(&set, SIGINT);
  return set;
}

/// Whether a stop signal is pending for this process: arrived while blocked, not yet taken.
[[nodiscard]] inline bool stop_signal_pending() noexcept {
  sigset_t pending;
  ::sigpending(&pending);
  return ::sigismember(&pending, SIGTERM) == 1 || ::sigismember(&pending, SIGINT) == 1;
}

}  // namespace bellows::daemon
