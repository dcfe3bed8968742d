#pragma once
// A process-wide pool of tile buffers. Allocating a fresh 0.5-2 MiB buffer per tile
// goes to mmap/munmap: every tile then costs page faults and TLB shootdowns across the
// rank's threads (measured: 12 % of the CPU time of a 2-rank GEMM). Recycling buffers
// of the same size avoids both.
//
// Buffers are cut from slabs of shared memory (memfd_create, mapped MAP_SHARED), so that
// a rank on the same host can map a producer's slab and copy a tile with memcpy
// (peer_tiles.hpp), at about twice the bandwidth of process_vm_readv (bench/tile_moves.py).
// Where a memfd cannot be had, buffers come from posix_memalign.

#include <cstddef>
#include <cstdint>

namespace bellows::runtime::tile_pool {

/// A page-aligned buffer of `elements` doubles (contents unspecified). Thread-safe. A buffer
/// the pool did not hold pages for gets them all at once (MADV_POPULATE_WRITE), not a fault
/// per page as it is first written.
double* acquire(std::size_t elements);
/// Returns a buffer obtained from acquire(elements). Thread-safe.
void release(double* buffer, std::size_t elements) noexcept;
/// Bytes currently cached (not in use), whole pages.
std::size_t cached_bytes() noexcept;

/// What the pool did since the process started, and holds now. Bytes are the buffers' sizes
/// rounded up to whole pages.
struct Counters {
  /// acquire() calls served with a cached buffer whose pages were resident: no page taken.
  std::uint64_t buffers_reused = 0;
  /// acquire() calls that took fresh pages: new space in a slab, a buffer whose pages had gone
  /// back to the system (beyond kMaxCachedBytes), or posix_memalign. Each such page is zeroed
  /// by the kernel, and a peer on the same host reading the buffer maps it for the first time.
  std::uint64_t buffers_fresh = 0;
  std::uint64_t bytes_fresh = 0;  ///< likewise, bytes
  std::uint64_t bytes_in_use = 0;  ///< acquired and not yet released
  /// The most bytes in use at once since restart_peak() (or the process's start).
  std::uint64_t peak_bytes_in_use = 0;
  /// In use and cached: the memory the pool holds (its high-water mark, as it never shrinks
  /// below the cache limit).
  std::uint64_t bytes_held = 0;
};
/// The counters now. Thread-safe.
Counters counters() noexcept;
/// Starts a new peak: peak_bytes_in_use becomes bytes_in_use. Thread-safe.
void restart_peak() noexcept;
/// Whether `buffer` (from acquire) lies in a shared slab. Thread-safe.
bool in_shared_slab(const void* buffer) noexcept;

/// Pins a slab's pages for a device's direct memory access (e.g. cudaHostRegister), and says
/// whether it did. Host <-> device copies from pinned pages skip the driver's staging copy
/// (measured on an H100 host: 42-54 GB/s against 7-14 GB/s for 0.5-8 MiB). Called with the
/// pool locked, once per slab: it must not acquire or release tile buffers.
using PinSlab = bool (*)(void* base, std::size_t bytes);
/// Pins every shared slab with `pin`, those there now and each new one as it is made; nullptr
/// stops pinning new slabs (those pinned stay pinned). Thread-safe. A pinned slab keeps its
/// pages: its buffers released beyond kMaxCachedBytes stay cached, since a hole punched under
/// a device's pinned mapping would part that mapping from the buffer's new pages.
void pin_slabs(PinSlab pin);
/// Bytes of shared slabs pinned so far. Thread-safe.
std::size_t pinned_bytes() noexcept;

/// Most bytes kept cached; the pages of buffers released beyond it go back to the system
/// (the buffer's addresses stay in the pool, and fault in again when reused).
inline constexpr std::size_t kMaxCachedBytes = std::size_t{1} << 30;
/// Size of one slab (a larger buffer gets a slab of its own). Address space only: pages
/// are allocated when a buffer is first written.
inline constexpr std::size_t kSlabBytes = std::size_t{64} << 20;
/// The memfd name of a slab starts with this (then the pid and a serial number); a peer
/// finds the slab by it in /proc/PID/maps and /proc/PID/fd.
inline constexpr const char* kSlabNamePrefix = "bellows-tiles-";

}  // namespace bellows::runtime::tile_pool
