#pragma once
// Device buffers kept for reuse, so that the CUDA device allocates GPU memory for a tile size
// once per process instead of once per task.
//
// A GPU task needs a device buffer for each tile it copies in or writes. Allocating and
// freeing one per task (cudaMallocAsync / cudaFreeAsync) put the driver's allocator on every
// task's path; tiles of a job come in a handful of sizes, so a buffer a task or the tile cache
// (device_tile_cache.hpp) is done with waits here, by size, for the next task that needs one of
// that size. Buffers are given back only once no work on the GPU uses them any more (the task
// that used them retired, or the cache let them go), so a buffer taken from the pool is free to
// be written on any stream.
//
// The pool knows nothing of CUDA: buffers are opaque pointers, made and freed through the
// callbacks it is given, so its bookkeeping is unit-tested without a GPU.
//
// Thread safety: none; the device's manager thread owns it.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace bellows::runtime {

class DeviceBufferPool {
 public:
  /// Makes a device buffer of `bytes`; nullptr when the device has no memory for it.
  using Allocate = std::function<void*(std::size_t bytes)>;
  /// Frees a device buffer the pool made.
  using Free = std::function<void(void* device)>;

  DeviceBufferPool(Allocate allocate, Free free);
  /// Frees the idle buffers; buffers still taken are the taker's to give back first.
  ~DeviceBufferPool();
  DeviceBufferPool(const DeviceBufferPool&) = delete;
  DeviceBufferPool& operator=(const DeviceBufferPool&) = delete;

  /// A buffer of exactly `bytes`: an idle one when there is one, else a new one. When the
  /// device is out of memory, the idle buffers of other sizes are freed and the allocation
  /// tried again; throws std::runtime_error naming the size when it still fails.
  void* take(std::size_t bytes);
  /// `device`, of `bytes`, taken from this pool, is no longer used by any work on the GPU.
  void give_back(void* device, std::size_t bytes);
  /// Frees every idle buffer.
  void free_idle();

  /// Buffers made, and takes answered with an idle buffer.
  [[nodiscard]] std::uint64_t allocations() const noexcept { return allocations_; }
  [[nodiscard]] std::uint64_t reuses() const noexcept { return reuses_; }
  [[nodiscard]] std::size_t idle_bytes() const noexcept { return idle_bytes_; }
  /// Bytes of the buffers made and not freed, idle or taken.
  [[nodiscard]] std::size_t held_bytes() const noexcept { return held_bytes_; }

 private:
  Allocate allocate_;
  Free free_;
  std::unordered_map<std::size_t, std::vector<void*>> idle_;  // by size
  std::size_t idle_bytes_ = 0;
  std::size_t held_bytes_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t reuses_ = 0;
};

}  // namespace bellows::runtime
