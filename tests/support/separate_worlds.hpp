#pragma once
// What the tests that run a job as separate worlds (one `mpiexec -n 1` per member, started by
// a launcher in the same binary, joined by connect/accept) share: the files the launcher and
// its members pass each other in the test's directory, and the launcher's record of each
// member's mpiexec.

#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace bellows::testing {

/// Seconds since the epoch (CLOCK_REALTIME), comparable between the test's processes.
inline double wall_seconds() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

/// Writes `text` to `path` at once (a temporary file renamed): a reader sees all or nothing.
inline void write_file(const std::filesystem::path& path, const std::string& text) {
  {
    std::ofstream out(path.string() + ".tmp");
    out << text;
  }
  std::filesystem::rename(path.string() + ".tmp", path);
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline int read_int(const std::filesystem::path& path) { return std::atoi(read_file(path).c_str()); }

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

}  // namespace bellows::testing
