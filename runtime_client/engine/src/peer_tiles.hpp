#pragma once
// Tiles of another process on this host, read with memcpy through a mapping of the shared
// slab that holds them (tile_pool.hpp) instead of process_vm_readv.
//
// process_vm_readv pins the source pages and copies them one page at a time: on the machine
// of bench/tile_moves.py it moved a 512 KiB tile at 3.5 GB/s where memcpy moved 8.5 GB/s. A
// consumer that maps the producer's slab (found by its memfd name in /proc/PID/maps and
// opened through /proc/PID/fd, which needs the same permission as process_vm_readv) copies
// at memcpy speed. A producer never unmaps a slab; a consumer keeps its mappings until the
// PeerTiles goes (with the communication engine, which a resize rebuilds: the memory of a
// rank that left is not held, and a new rank with a reused pid is looked up afresh).

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <sys/types.h>
#include <vector>

namespace bellows::runtime {

class PeerTiles {
 public:
  PeerTiles() = default;
  ~PeerTiles();
  PeerTiles(const PeerTiles&) = delete;
  PeerTiles& operator=(const PeerTiles&) = delete;

  /// Copies `bytes` at `address` of process `pid` to `local` when they lie in one of its
  /// tile slabs; returns false (nothing copied) otherwise, and the caller reads another
  /// way. Thread-safe.
  bool read(pid_t pid, std::uint64_t address, void* local, std::size_t bytes);

 private:
  struct Mapping {
    pid_t pid;
    std::uint64_t start;  ///< in the peer's address space
    std::uint64_t end;
    const std::byte* local;  ///< nullptr: that range is no slab of the peer's (don't look again)
  };
  /// Maps the slab of `pid` holding `address` (or records that none does). Locked.
  const Mapping* map_slab(pid_t pid, std::uint64_t address);

  std::mutex mutex_;
  std::vector<Mapping> mappings_;
  std::vector<pid_t> unreadable_;  ///< peers whose /proc entries could not be read
};

}  // namespace bellows::runtime
