#pragma once
// Processes a test started: that those it spawned (MPI dynamic processes) are gone, and the
// members a launcher starts as worlds of their own (separate_worlds.hpp), reaped, and whatever
// is left of them killed at the end.

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "separate_worlds.hpp"

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

/// A member's mpiexec, as the launcher started it.
struct StartedMember {
  pid_t pid = -1;  ///< mpiexec, leader of its own process group
  int status = -1;
  bool ended = false;
};

/// Reaps the members whose mpiexec ended; with `block_until`, waits until all have ended or
/// that time has come. Returns whether all have ended.
inline bool reap_members(std::vector<StartedMember>& members,
                         std::chrono::steady_clock::time_point block_until = {}) {
  for (;;) {
    bool all = true;
    for (auto& m : members) {
      if (m.ended || m.pid <= 0) continue;
      if (::waitpid(m.pid, &m.status, WNOHANG) == m.pid) {
        m.ended = true;
      } else {
        all = false;
      }
    }
    if (all || std::chrono::steady_clock::now() >= block_until) return all;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// The members of a job a launcher runs as separate worlds: member I is `MPIEXEC -n 1
/// ARGS_OF(I)...` (start_member_world), its output in DIR/member.I.log, given until the
/// launcher's limit to end by itself. end() kills what is left, so that nothing the test
/// started survives it. Not thread-safe.
class LaunchedMembers {
 public:
  using Clock = std::chrono::steady_clock;

  /// Starts `count` members now; the limit is `limit_seconds` from now.
  LaunchedMembers(const std::string& mpiexec, int count, const std::filesystem::path& dir,
                  const std::function<std::vector<std::string>(int)>& args_of, double limit_seconds)
      : mpiexec_(mpiexec),
        dir_(dir),
        limit_seconds_(limit_seconds),
        limit_(Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_seconds))),
        members_(static_cast<std::size_t>(count)) {
    for (int i = 0; i < count; ++i) {
      members_[static_cast<std::size_t>(i)].pid =
          start_member_world(mpiexec, args_of(i), dir / ("member." + std::to_string(i) + ".log"));
    }
  }

  /// Reaps the members whose mpiexec ended, without waiting. Returns whether all have ended.
  bool reap() { return reap_members(members_); }
  /// Waits until every member's mpiexec ended or the limit came. Returns whether all ended.
  bool reap_until_limit() { return reap_members(members_, limit_); }
  [[nodiscard]] Clock::time_point limit() const { return limit_; }
  [[nodiscard]] std::size_t size() const { return members_.size(); }
  [[nodiscard]] const StartedMember& operator[](std::size_t index) const { return members_[index]; }
  /// Whether member `index`'s mpiexec exited 0.
  [[nodiscard]] bool exited_zero(std::size_t index) const {
    const int status = members_[index].status;
    return members_[index].ended && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  /// How many members' mpiexecs exited 0.
  [[nodiscard]] int exited_zero_count() const {
    int count = 0;
    for (std::size_t i = 0; i < members_.size(); ++i) count += exited_zero(i) ? 1 : 0;
    return count;
  }

  /// Each member's output (DIR/member.I.log), headed by its index: what tells why a test failed.
  [[nodiscard]] std::string outputs() const {
    std::string text;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      text += "--- member " + std::to_string(i) + " (mpiexec) output:\n" +
              read_file(dir_ / ("member." + std::to_string(i) + ".log"));
    }
    return text;
  }
  /// Prints outputs() to stderr.
  void print_outputs() const { std::fputs(outputs().c_str(), stderr); }

  /// Kills what is left: each mpiexec still running with its process group (hydra's proxy and
  /// the rank share it), reaped, then each group once more (a rank its proxy left behind);
  /// then waits up to 5 s for every mpiexec and every member process whose pid is in
  /// DIR/PID_FILE.I (I < the member count; a file not written is skipped) to be gone. Returns
  /// what was wrong, each as a sentence: a member whose mpiexec did not start, one still
  /// running at the limit, a process left.
  std::vector<std::string> end(const std::string& pid_file) {
    std::vector<std::string> wrong;
    std::vector<int> pids;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      StartedMember& m = members_[i];
      if (m.pid <= 0) {
        wrong.push_back("member " + std::to_string(i) + ": " + mpiexec_ + " did not start");
        continue;
      }
      pids.push_back(m.pid);
      if (!m.ended) {
        wrong.push_back("mpiexec of member " + std::to_string(i) + " still running after " +
                        std::to_string(limit_seconds_) + " s: killed");
        ::kill(-m.pid, SIGKILL);
        ::waitpid(m.pid, &m.status, 0);
        m.ended = true;
      }
      ::kill(-m.pid, SIGKILL);
      const std::filesystem::path member_pid = dir_ / (pid_file + "." + std::to_string(i));
      if (std::filesystem::exists(member_pid)) pids.push_back(read_int(member_pid));
    }
    if (wait_gone(pids, Clock::now(), 5.0) < 0.0) wrong.emplace_back("a member process is left");
    return wrong;
  }

 private:
  std::string mpiexec_;
  std::filesystem::path dir_;
  double limit_seconds_;
  Clock::time_point limit_;
  std::vector<StartedMember> members_;
};

}  // namespace bellows::testing
