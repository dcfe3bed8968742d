#pragma once
// One process of this host, named so that a file can say who owns it: its pid and its start
// time (field 22 of /proc/PID/stat, clock ticks since boot). Together they name one process
// even after its pid is reused, so a record left by a process that was killed can be told
// from one whose owner still runs (socket directories, the local node pool).
//
// Thread safety: free of shared state.

#include <sys/types.h>

#include <string>

namespace bellows::protocol {

struct ProcessIdentity {
  pid_t pid = 0;
  std::string start_time;  ///< "" when unknown

  /// This process.
  [[nodiscard]] static ProcessIdentity self();
  /// The process `pid` as it is now (start_time "" when it does not exist).
  [[nodiscard]] static ProcessIdentity of(pid_t pid);
  /// True while this very process runs (same pid, same start time).
  [[nodiscard]] bool alive() const;

  /// "PID START" (what owner files hold) and back; parse() gives pid 0 on bad text.
  [[nodiscard]] std::string text() const;
  [[nodiscard]] static ProcessIdentity parse(const std::string& text);

  bool operator==(const ProcessIdentity&) const = default;
};

}  // namespace bellows::protocol
