#pragma once
// Checks that processes a test spawned (MPI dynamic processes) are gone.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace bellows::testing {

/// True once the process is gone or a zombie waiting for its parent (hydra's proxy).
inline bool process_gone(int pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(stat, text);
  const auto paren = text.rfind(')');
  return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
}

/// Seconds from `since` until every pid is gone; a negative value when some are still
/// there `limit_seconds` after the call.
inline double wait_gone(const std::vector<int>& pids, std::chrono::steady_clock::time_point since,
                        double limit_seconds) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(limit_seconds);
  while (!std::all_of(pids.begin(), pids.end(), process_gone)) {
    if (Clock::now() > deadline) return -1.0;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return std::chrono::duration<double>(Clock::now() - since).count();
}

}  // namespace bellows::testing
