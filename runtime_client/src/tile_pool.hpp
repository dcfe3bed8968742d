#pragma once
// A process-wide pool of tile buffers. Allocating a fresh 0.5-2 MiB buffer per tile
// goes to mmap/munmap: every tile then costs page faults and TLB shootdowns across the
// rank's threads (measured: 12 % of the CPU time of a 2-rank GEMM). Recycling buffers
// of the same size avoids both.

#include <cstddef>

namespace bellows::runtime::tile_pool {

/// A 64-byte aligned buffer of `elements` doubles (contents unspecified). Thread-safe.
double* acquire(std::size_t elements);
/// Returns a buffer obtained from acquire(elements). Thread-safe.
void release(double* buffer, std::size_t elements) noexcept;
/// Bytes currently cached (not in use).
std::size_t cached_bytes() noexcept;

/// Most bytes kept cached; buffers released beyond it are freed.
inline constexpr std::size_t kMaxCachedBytes = std::size_t{1} << 30;

}  // namespace bellows::runtime::tile_pool
