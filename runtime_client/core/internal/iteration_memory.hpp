#pragma once
// What one iteration did to a rank's memory (MemoryStats): the process's minor page faults
// and the tile pool's fresh and reused buffers and its peak of bytes in use. Counts, not
// times, so that the host's load cannot move them. Not thread-safe: the application thread
// calls both, at an iteration's start and end.

#include <cstdint>

#include "bellows/runtime/stats.hpp"
#include "tile_pool.hpp"

namespace bellows::runtime {

class IterationMemory {
 public:
  /// As an iteration starts: the counts now, and a new peak of tile bytes in use.
  void start() noexcept;
  /// What happened since start(), with one entry in each of the per-iteration series.
  [[nodiscard]] MemoryStats since_start() const noexcept;

 private:
  std::uint64_t minor_page_faults_ = 0;
  tile_pool::Counters pool_{};
};

/// The process's minor page faults so far (getrusage RUSAGE_SELF ru_minflt: every thread).
std::uint64_t process_minor_page_faults() noexcept;

}  // namespace bellows::runtime
