#include "device_buffer_pool.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace bellows::runtime {

DeviceBufferPool::DeviceBufferPool(Allocate allocate, Free free)
    : allocate_(std::move(allocate)), free_(std::move(free)) {}

DeviceBufferPool::~DeviceBufferPool() { free_idle(); }

void* DeviceBufferPool::take(std::size_t bytes) {
  if (auto it = idle_.find(bytes); it != idle_.end() && !it->second.empty()) {
    void* device = it->second.back();
    it->second.pop_back();
    idle_bytes_ -= bytes;
    ++reuses_;
    return device;
  }
  void* device = allocate_(bytes);
  if (device == nullptr && idle_bytes_ > 0) {
    free_idle();
    device = allocate_(bytes);
  }
  if (device == nullptr) {
    throw std::runtime_error("device buffer pool: the GPU has no memory left for a buffer of " +
                             std::to_string(bytes) + " bytes (" + std::to_string(held_bytes_) +
                             " bytes held in buffers of tiles)");
  }
  ++allocations_;
  held_bytes_ += bytes;
  return device;
}

void DeviceBufferPool::give_back(void* device, std::size_t bytes) {
  idle_[bytes].push_back(device);
  idle_bytes_ += bytes;
}

void DeviceBufferPool::free_idle() {
  for (auto& [bytes, buffers] : idle_) {
    for (void* device : buffers) free_(device);
    held_bytes_ -= bytes * buffers.size();
  }
  idle_.clear();
  idle_bytes_ = 0;
}

}  // namespace bellows::runtime
