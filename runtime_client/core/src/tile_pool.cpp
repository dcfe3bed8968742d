#include "tile_pool.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <mutex>
#include <new>
#include <sys/mman.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace bellows::runtime::tile_pool {
namespace {

constexpr std::size_t kPage = 4096;

struct Slab {
  std::byte* base = nullptr;
  std::size_t bytes = 0;
  std::size_t used = 0;
  int fd = -1;
  bool pinned = false;  // by the pin_slabs function: its pages stay
};

struct Pool {
  std::mutex mutex;
  std::unordered_map<std::size_t, std::vector<double*>> free_by_size;   // pages resident
  std::unordered_map<std::size_t, std::vector<double*>> given_back;     // pages returned
  std::vector<Slab> slabs;
  std::size_t cached = 0;  // bytes of the buffers in free_by_size, whole pages
  bool slabs_fail = false;  // memfd_create or mmap refused once: plain allocations from then on
  unsigned serial = 0;
  PinSlab pin = nullptr;  // pin_slabs
  Counters counters;        // bytes_held left 0: counters() adds `cached`
};

/// Counts a buffer of `bytes` handed out. Locked.
void count_acquired(Pool& p, std::size_t bytes, bool fresh) {
  Counters& c = p.counters;
  if (fresh) {
    ++c.buffers_fresh;
    c.bytes_fresh += bytes;
  } else {
    ++c.buffers_reused;
  }
  c.bytes_in_use += bytes;
  c.peak_bytes_in_use = std::max(c.peak_bytes_in_use, c.bytes_in_use);
}

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tiles may outlive static destruction
  return *p;
}

std::size_t rounded(std::size_t elements) {
  return (elements * sizeof(double) + kPage - 1) / kPage * kPage;
}

/// A new slab of at least `bytes`, or nullptr when shared memory cannot be had. Locked.
Slab* new_slab(Pool& p, std::size_t bytes) {
  if (p.slabs_fail) return nullptr;
  Slab slab;
  slab.bytes = std::max(bytes, kSlabBytes);
  char name[64];
  std::snprintf(name, sizeof name, "%s%ld-%u", kSlabNamePrefix, static_cast<long>(::getpid()),
                p.serial++);
  slab.fd = ::memfd_create(name, MFD_CLOEXEC);
  if (slab.fd >= 0 && ::ftruncate(slab.fd, static_cast<off_t>(slab.bytes)) == 0) {
    void* m = ::mmap(nullptr, slab.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, slab.fd, 0);
    if (m != MAP_FAILED) {
      slab.base = static_cast<std::byte*>(m);
      if (p.pin != nullptr) slab.pinned = p.pin(slab.base, slab.bytes);
      p.slabs.push_back(slab);
      return &p.slabs.back();
    }
  }
  if (slab.fd >= 0) ::close(slab.fd);
  p.slabs_fail = true;
  return nullptr;
}

const Slab* slab_of(const Pool& p, const void* buffer) {
  const auto* b = static_cast<const std::byte*>(buffer);
  for (const auto& s : p.slabs) {
    if (b >= s.base && b < s.base + s.bytes) return &s;
  }
  return nullptr;
}

double* take(std::unordered_map<std::size_t, std::vector<double*>>& lists, std::size_t elements) {
  auto it = lists.find(elements);
  if (it == lists.end() || it->second.empty()) return nullptr;
  double* b = it->second.back();
  it->second.pop_back();
  return b;
}

}  // namespace

double* acquire(std::size_t elements) {
  if (elements == 0) return nullptr;
  const std::size_t bytes = rounded(elements);
  double* without_pages = nullptr;
  {
    Pool& p = pool();
    std::lock_guard lock(p.mutex);
    if (double* b = take(p.free_by_size, elements)) {
      p.cached -= bytes;
      count_acquired(p, bytes, false);
      return b;
    }
    without_pages = take(p.given_back, elements);
    if (without_pages == nullptr) {
      Slab* slab = p.slabs.empty() ? nullptr : &p.slabs.back();
      if (slab == nullptr || slab->bytes - slab->used < bytes) slab = new_slab(p, bytes);
      if (slab != nullptr) {
        without_pages = reinterpret_cast<double*>(slab->base + slab->used);
        slab->used += bytes;
      }
    }
    count_acquired(p, bytes, true);  // from a slab, or from posix_memalign below
  }
  if (without_pages != nullptr) {
    // Its pages all at once, outside the lock: one call instead of a fault per page on first
    // write (a fault is an exit to the hypervisor on a virtual machine). Best effort: before
    // Linux 5.14 the pages fault in as they are written.
    ::madvise(without_pages, bytes, MADV_POPULATE_WRITE);
    return without_pages;
  }
  void* memory = nullptr;
  if (posix_memalign(&memory, kPage, bytes) != 0) throw std::bad_alloc();
  return static_cast<double*>(memory);
}

void release(double* buffer, std::size_t elements) noexcept {
  if (!buffer) return;
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  const Slab* slab = slab_of(p, buffer);
  const std::size_t bytes = rounded(elements);
  p.counters.bytes_in_use -= std::min<std::uint64_t>(p.counters.bytes_in_use, bytes);
  try {
    if (p.cached + bytes <= kMaxCachedBytes || (slab != nullptr && slab->pinned)) {
      p.free_by_size[elements].push_back(buffer);
      p.cached += bytes;
      return;
    }
    if (slab != nullptr) {
      // Over the cache limit: the pages go back to the system, the addresses stay.
      const auto offset = reinterpret_cast<std::byte*>(buffer) - slab->base;
      ::fallocate(slab->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                  static_cast<off_t>(bytes));
      p.given_back[elements].push_back(buffer);
      return;
    }
  } catch (...) {
    // fall through: a plain buffer is freed; a slab buffer is lost to the pool (rare)
  }
  if (slab == nullptr) std::free(buffer);
}

std::size_t cached_bytes() noexcept {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  return p.cached;
}

Counters counters() noexcept {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  Counters c = p.counters;
  c.bytes_held = c.bytes_in_use + p.cached;
  return c;
}

void restart_peak() noexcept {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  p.counters.peak_bytes_in_use = p.counters.bytes_in_use;
}

bool in_shared_slab(const void* buffer) noexcept {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  return slab_of(p, buffer) != nullptr;
}

void pin_slabs(PinSlab pin) {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  p.pin = pin;
  if (pin == nullptr) return;
  for (auto& s : p.slabs) {
    if (!s.pinned) s.pinned = pin(s.base, s.bytes);
  }
}

std::size_t pinned_bytes() noexcept {
  Pool& p = pool();
  std::lock_guard lock(p.mutex);
  std::size_t bytes = 0;
  for (const auto& s : p.slabs) bytes += s.pinned ? s.bytes : 0;
  return bytes;
}

}  // namespace bellows::runtime::tile_pool
