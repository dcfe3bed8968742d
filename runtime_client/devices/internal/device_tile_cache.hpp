#pragma once
// Tiles kept in device memory between the tasks of an iteration, so that a GPU copies a tile
// in once per version instead of once per task that reads it.
//
// Every task on the CUDA device used to copy all of its tiles in and the ones it writes out.
// A GEMM task of tile 512 thus moved 6 MiB in for 0.27 GFLOP, and the GPU ran at its copy bound
// (docs/gpu-node.md). The cache keeps the device copy of
//   - each tile a task read (an A or B tile of a GEMM, a panel of a Cholesky), for every later
//     task on this device that reads the same tile;
//   - each tile a task wrote: the next task of the chain that reads or writes it (the C tile
//     along a GEMM's k loop) starts from it instead of from the host. A written tile that only
//     tasks on this device read next is not copied back at all: the cache's copy is then the
//     only valid one ("host-stale", Tile::residency without kOnHost), and it stays until no one
//     references the tile any more. Its readers all hold a reference from the moment it is
//     delivered to them, so a host-stale tile whose only reference is the cache's is dead.
//
// Why a cached copy of a valid host tile cannot go stale: an entry holds a reference to the
// host tile (TilePtr),
// and every device clones a tile it is about to write when anyone else still references it
// (ReadyTask::make_writable_slots_exclusive). So the host tile of an entry is never written in
// place; a task that writes it first takes the entry out (take_for_writing), and its output
// is a new version. Data received from peers goes into new tiles, and collections replace a
// tile rather than overwrite it. The device empties the cache at the end of every iteration,
// when the application may change its collections in place.
//
// The cache knows nothing of CUDA: device buffers are opaque pointers, let go of through the
// callback it is given (the CUDA device gives them back to its DeviceBufferPool), so the
// bookkeeping is unit-tested without a GPU.
//
// Thread safety: none; the device's manager thread owns it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>

#include "bellows/runtime/tile.hpp"

namespace bellows::runtime {

class DeviceTileCache {
 public:
  /// Lets go of a device buffer of `bytes` the cache owned (no task in flight uses it).
  using Free = std::function<void(void* device, std::size_t bytes)>;

  /// Keeps at most `capacity_bytes` of tiles that no task in flight uses (entries in use stay
  /// whatever their size); the least recently used go first.
  DeviceTileCache(std::size_t capacity_bytes, Free free);
  ~DeviceTileCache();
  DeviceTileCache(const DeviceTileCache&) = delete;
  DeviceTileCache& operator=(const DeviceTileCache&) = delete;

  /// A task reads `tile`: its device copy, now in use by one more task; nullptr when it has
  /// none (then the caller copies it in and hands the copy over with insert_in_use).
  void* acquire(const Tile* tile);
  /// The device copy `device` of `tile`, `bytes` long, made for a task that reads it: the cache
  /// owns it from now on, in use by that task.
  void insert_in_use(TilePtr tile, void* device, std::size_t bytes);
  /// The task that acquired `tile` (or had it inserted) is done with it.
  void release(const Tile* tile);

  /// A task is about to write `tile`: when the cache holds a device copy of it that no task in
  /// flight uses (and, for a host-stale copy, that no one but the cache and the writing task
  /// references: no reader is still to come), the entry leaves the cache and its buffer goes
  /// to the caller (returned; the caller owns it); else nullptr, and the entry stays.
  void* take_for_writing(const Tile* tile);
  /// The device copy `device` of `tile`, which a task wrote: the cache owns it from now on,
  /// not in use. `host_valid`: the task also copied it back to the host; false: the cache's
  /// copy is the only valid one until the tile dies. An older entry for the same tile is
  /// replaced.
  void insert_written(TilePtr tile, void* device, std::size_t bytes, bool host_valid = true);

  /// Frees every entry no task uses (at the end of an iteration all of them: every tile an
  /// iteration's tasks wrote and left host-stale is dead by then).
  void clear();

  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::size_t entries() const noexcept { return entries_.size(); }
  [[nodiscard]] std::size_t capacity_bytes() const noexcept { return capacity_; }
  /// Reads answered from the cache, and those that were not.
  [[nodiscard]] std::uint64_t hits() const noexcept { return hits_; }
  [[nodiscard]] std::uint64_t misses() const noexcept { return misses_; }

 private:
  struct Entry {
    TilePtr tile;  // keeps the host tile shared, hence unwritten (see the file comment)
    void* device = nullptr;
    std::size_t bytes = 0;
    int in_use = 0;
    bool host_valid = true;
    std::list<const Tile*>::iterator recency;  // into recency_, most recent at the front
  };
  void insert(TilePtr tile, void* device, std::size_t bytes, int in_use, bool host_valid);
  /// Whether trim() may free the entry: no task in flight uses it, and its copy is not the
  /// only valid one of a tile someone still references.
  [[nodiscard]] static bool evictable(const Entry& e) noexcept {
    return e.in_use == 0 && (e.host_valid || e.tile.use_count() == 1);
  }
  void erase(std::unordered_map<const Tile*, Entry>::iterator it, bool free_buffer);
  /// Frees least recently used entries not in use while over capacity.
  void trim();

  std::size_t capacity_;
  Free free_;
  std::unordered_map<const Tile*, Entry> entries_;
  std::list<const Tile*> recency_;
  std::size_t bytes_ = 0;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
};

}  // namespace bellows::runtime
