#include "tile_pool.hpp"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace bellows::runtime::tile_pool {
namespace {

struct Pool {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<double*>> free_by_size;
  std::size_t cached = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tiles may outlive static destruction
  return *p;
}

}  // namespace

double* acquire(std::size_t elements) {
  if (elements == 0) return nullptr;
  {
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    auto it = p.free_by_size.find(elements);
    if (it != p.free_by_size.end() && !it->second.empty()) {
      double* b = it->second.back();
      it->second.pop_back();
      p.cached -= elements * sizeof(double);
      return b;
    }
  }
  void* memory = nullptr;
  const std::size_t bytes = (elements * sizeof(double) + 63) / 64 * 64;
  if (posix_memalign(&memory, 64, bytes) != 0) throw std::bad_alloc();
  return static_cast<double*>(memory);
}

void release(double* buffer, std::size_t elements) noexcept {
  if (!buffer) return;
  {
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    if (p.cached + elements * sizeof(double) <= kMaxCachedBytes) {
      try {
        p.free_by_size[elements].push_back(buffer);
        p.cached += elements * sizeof(double);
        return;
      } catch (...) {
        // fall through and free it
      }
    }
  }
  std::free(buffer);
}

std::size_t cached_bytes() noexcept {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  return p.cached;
}

}  // namespace bellows::runtime::tile_pool
