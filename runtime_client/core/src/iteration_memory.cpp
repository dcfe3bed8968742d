#include "iteration_memory.hpp"

#include <sys/resource.h>

namespace bellows::runtime {

std::uint64_t process_minor_page_faults() noexcept {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::uint64_t>(usage.ru_minflt);
}

void IterationMemory::start() noexcept {
  tile_pool::restart_peak();
  pool_ = tile_pool::counters();
  minor_page_faults_ = process_minor_page_faults();
}

MemoryStats IterationMemory::since_start() const noexcept {
  const tile_pool::Counters now = tile_pool::counters();
  MemoryStats out;
  out.minor_page_faults = process_minor_page_faults() - minor_page_faults_;
  out.tile_buffers_reused = now.buffers_reused - pool_.buffers_reused;
  out.tile_buffers_fresh = now.buffers_fresh - pool_.buffers_fresh;
  out.tile_bytes_fresh = now.bytes_fresh - pool_.bytes_fresh;
  out.peak_tile_bytes_in_use = now.peak_bytes_in_use;
  out.tile_pool_bytes = now.bytes_held;
  out.minor_page_faults_by_iteration.push_back(static_cast<double>(out.minor_page_faults));
  out.tile_buffers_fresh_by_iteration.push_back(static_cast<double>(out.tile_buffers_fresh));
  out.peak_tile_bytes_in_use_by_iteration.push_back(static_cast<double>(out.peak_tile_bytes_in_use));
  return out;
}

}  // namespace bellows::runtime
