#include "device_tile_cache.hpp"

#include <iterator>
#include <stdexcept>
#include <utility>

namespace bellows::runtime {

DeviceTileCache::DeviceTileCache(std::size_t capacity_bytes, Free free)
    : capacity_(capacity_bytes), free_(std::move(free)) {}

DeviceTileCache::~DeviceTileCache() {
  for (auto& [tile, entry] : entries_) free_(entry.device, entry.bytes);
}

void* DeviceTileCache::acquire(const Tile* tile) {
  const auto it = entries_.find(tile);
  if (it == entries_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  Entry& e = it->second;
  ++e.in_use;
  recency_.splice(recency_.begin(), recency_, e.recency);
  return e.device;
}

void DeviceTileCache::insert_in_use(TilePtr tile, void* device, std::size_t bytes) {
  insert(std::move(tile), device, bytes, 1, true);
}

void DeviceTileCache::release(const Tile* tile) {
  const auto it = entries_.find(tile);
  if (it == entries_.end() || it->second.in_use == 0) {
    throw std::logic_error("device tile cache: a tile released that no task had acquired");
  }
  --it->second.in_use;
  trim();
}

void* DeviceTileCache::take_for_writing(const Tile* tile) {
  const auto it = entries_.find(tile);
  if (it == entries_.end() || it->second.in_use > 0) return nullptr;
  // The writing task's reference and the cache's: any other is a reader still to come.
  if (!it->second.host_valid && it->second.tile.use_count() > 2) return nullptr;
  void* device = it->second.device;
  erase(it, false);
  return device;
}

void DeviceTileCache::insert_written(TilePtr tile, void* device, std::size_t bytes, bool host_valid) {
  if (const auto it = entries_.find(tile.get()); it != entries_.end()) {
    if (it->second.in_use > 0 && host_valid) {
      // A reader still uses the older copy, of the same contents: keep it, let this one go.
      free_(device, bytes);
      return;
    }
    if (it->second.in_use > 0) {
      // A task wrote a tile in place while another read it: writes clone shared tiles.
      throw std::logic_error("device tile cache: a tile written while a task in flight reads it");
    }
    erase(it, true);
  }
  insert(std::move(tile), device, bytes, 0, host_valid);
  trim();
}

void DeviceTileCache::clear() {
  for (auto it = entries_.begin(); it != entries_.end();) {
    const auto next = std::next(it);
    if (it->second.in_use == 0) erase(it, true);
    it = next;
  }
}

void DeviceTileCache::insert(TilePtr tile, void* device, std::size_t bytes, int in_use,
                             bool host_valid) {
  const Tile* key = tile.get();
  recency_.push_front(key);
  auto [it, inserted] = entries_.try_emplace(key);
  if (!inserted) {
    recency_.pop_front();
    throw std::logic_error("device tile cache: a tile inserted twice");
  }
  it->second = Entry{std::move(tile), device, bytes, in_use, host_valid, recency_.begin()};
  bytes_ += bytes;
}

void DeviceTileCache::erase(std::unordered_map<const Tile*, Entry>::iterator it, bool free_buffer) {
  if (free_buffer) free_(it->second.device, it->second.bytes);
  bytes_ -= it->second.bytes;
  recency_.erase(it->second.recency);
  entries_.erase(it);
}

void DeviceTileCache::trim() {
  // From the least recently used on; `next` stays valid when the entry before it goes.
  for (auto next = recency_.end(); bytes_ > capacity_ && next != recency_.begin();) {
    const auto current = std::prev(next);
    const auto it = entries_.find(*current);
    if (!evictable(it->second)) {
      next = current;
      continue;
    }
    erase(it, true);
  }
}

}  // namespace bellows::runtime
