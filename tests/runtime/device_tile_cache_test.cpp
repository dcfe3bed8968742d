// DeviceTileCache: which device copies of tiles a GPU keeps between tasks, with fake device
// buffers (no GPU needed).

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <stdexcept>
#include <vector>

#include "device_tile_cache.hpp"

using bellows::runtime::DeviceTileCache;
using bellows::runtime::Tile;
using bellows::runtime::TilePtr;

namespace {

/// Fake device buffers: distinct addresses, and a record of the ones freed.
struct FakeDevice {
  std::vector<std::unique_ptr<char>> buffers;
  std::set<void*> freed;
  void* allocate() { return buffers.emplace_back(std::make_unique<char>()).get(); }
  DeviceTileCache::Free free_function() {
    return [this](void* d, std::size_t /*bytes*/) {
      EXPECT_TRUE(freed.insert(d).second) << "freed twice";
    };
  }
};

TilePtr tile() { return std::make_shared<Tile>(2, 2); }

constexpr std::size_t kMiB = 1 << 20;

}  // namespace

TEST(DeviceTileCache, AReadTileIsCopiedInOnceForAllItsReaders) {
  FakeDevice gpu;
  DeviceTileCache cache(8 * kMiB, gpu.free_function());
  const TilePtr a = tile();
  EXPECT_EQ(cache.acquire(a.get()), nullptr);  // first reader: a miss, it copies the tile in
  void* copy = gpu.allocate();
  cache.insert_in_use(a, copy, kMiB);
  EXPECT_EQ(cache.acquire(a.get()), copy);  // a second reader in flight at the same time
  cache.release(a.get());
  cache.release(a.get());
  EXPECT_EQ(cache.acquire(a.get()), copy);  // and a later one
  cache.release(a.get());
  EXPECT_EQ(cache.hits(), 2U);
  EXPECT_EQ(cache.misses(), 1U);
  EXPECT_TRUE(gpu.freed.empty());
}

TEST(DeviceTileCache, HoldsItsTilesSharedSoThatAWriterClonesThem) {
  FakeDevice gpu;
  DeviceTileCache cache(8 * kMiB, gpu.free_function());
  TilePtr a = tile();
  cache.insert_in_use(a, gpu.allocate(), kMiB);
  cache.release(a.get());
  // The task's own reference and the cache's: ReadyTask::make_writable_slots_exclusive
  // would clone the tile before writing it, so the cached copy stays that of the host tile.
  EXPECT_EQ(a.use_count(), 2);
}

TEST(DeviceTileCache, AWriterTakesTheCopyOverOnlyWhenNoReaderUsesIt) {
  FakeDevice gpu;
  DeviceTileCache cache(8 * kMiB, gpu.free_function());
  const TilePtr c = tile();
  void* copy = gpu.allocate();
  cache.insert_in_use(c, copy, kMiB);
  EXPECT_EQ(cache.take_for_writing(c.get()), nullptr);  // a reader is still in flight
  cache.release(c.get());
  EXPECT_EQ(cache.take_for_writing(c.get()), copy);  // now the writer owns the buffer
  EXPECT_EQ(cache.entries(), 0U);
  EXPECT_EQ(cache.bytes(), 0U);
  EXPECT_EQ(c.use_count(), 1);  // no longer shared: the writer need not clone it
  EXPECT_TRUE(gpu.freed.empty());
}

TEST(DeviceTileCache, AWrittenTileStaysForTheNextTaskOfItsChain) {
  FakeDevice gpu;
  DeviceTileCache cache(8 * kMiB, gpu.free_function());
  const TilePtr c = tile();
  void* first = gpu.allocate();
  cache.insert_written(c, first, kMiB);  // task k wrote C and copied it back
  void* taken = cache.take_for_writing(c.get());  // task k + 1 updates the same C
  EXPECT_EQ(taken, first);
  cache.insert_written(c, taken, kMiB);
  EXPECT_EQ(cache.acquire(c.get()), first);  // a reader of the final C
  cache.release(c.get());
  EXPECT_TRUE(gpu.freed.empty());
}

TEST(DeviceTileCache, ANewerCopyReplacesAnIdleOneAndYieldsToOneInUse) {
  FakeDevice gpu;
  DeviceTileCache cache(8 * kMiB, gpu.free_function());
  const TilePtr c = tile();
  void* old_copy = gpu.allocate();
  cache.insert_written(c, old_copy, kMiB);
  void* newer = gpu.allocate();
  cache.insert_written(c, newer, kMiB);
  EXPECT_EQ(gpu.freed, (std::set<void*>{old_copy}));
  EXPECT_EQ(cache.acquire(c.get()), newer);
  void* third = gpu.allocate();
  cache.insert_written(c, third, kMiB);  // the copy in use stays, the new one goes
  EXPECT_EQ(gpu.freed, (std::set<void*>{old_copy, third}));
  cache.release(c.get());
  EXPECT_EQ(cache.bytes(), kMiB);
}

TEST(DeviceTileCache, EvictsTheLeastRecentlyUsedIdleTilesBeyondItsCapacity) {
  FakeDevice gpu;
  DeviceTileCache cache(3 * kMiB, gpu.free_function());
  std::vector<TilePtr> tiles;
  std::vector<void*> copies;
  for (int i = 0; i < 3; ++i) {
    tiles.push_back(tile());
    copies.push_back(gpu.allocate());
    cache.insert_in_use(tiles.back(), copies.back(), kMiB);
    cache.release(tiles.back().get());
  }
  EXPECT_EQ(cache.acquire(tiles[0].get()), copies[0]);  // 0 is now the most recent
  cache.release(tiles[0].get());
  const TilePtr d = tile();
  void* d_copy = gpu.allocate();
  cache.insert_written(d, d_copy, kMiB);  // 4 MiB: tile 1 goes
  EXPECT_EQ(gpu.freed, (std::set<void*>{copies[1]}));
  EXPECT_EQ(cache.bytes(), 3 * kMiB);
  EXPECT_EQ(tiles[1].use_count(), 1);  // the host tile is let go with it
  // Entries in use stay however full the cache is.
  EXPECT_EQ(cache.acquire(tiles[2].get()), copies[2]);
  EXPECT_EQ(cache.acquire(tiles[0].get()), copies[0]);
  EXPECT_EQ(cache.acquire(d.get()), d_copy);
  const TilePtr e = tile();
  void* e_copy = gpu.allocate();
  cache.insert_in_use(e, e_copy, kMiB);
  EXPECT_EQ(cache.bytes(), 4 * kMiB);
  cache.release(tiles[2].get());  // now idle and the least recent: it goes
  EXPECT_EQ(gpu.freed, (std::set<void*>{copies[1], copies[2]}));
  EXPECT_EQ(cache.bytes(), 3 * kMiB);
}

TEST(DeviceTileCache, ClearFreesTheIdleEntriesAndTheDestructorTheRest) {
  FakeDevice gpu;
  std::set<void*> all;
  {
    DeviceTileCache cache(8 * kMiB, gpu.free_function());
    const TilePtr a = tile(), b = tile();
    void* a_copy = gpu.allocate();
    void* b_copy = gpu.allocate();
    cache.insert_in_use(a, a_copy, kMiB);
    cache.insert_written(b, b_copy, kMiB);
    cache.clear();
    EXPECT_EQ(gpu.freed, (std::set<void*>{b_copy}));
    EXPECT_EQ(cache.entries(), 1U);
    all = {a_copy, b_copy};
  }
  EXPECT_EQ(gpu.freed, all);
}

TEST(DeviceTileCache, RefusesAReleaseWithoutAnAcquire) {
  FakeDevice gpu;
  DeviceTileCache cache(8 * kMiB, gpu.free_function());
  const TilePtr a = tile();
  EXPECT_THROW(cache.release(a.get()), std::logic_error);
  cache.insert_written(a, gpu.allocate(), kMiB);
  EXPECT_THROW(cache.release(a.get()), std::logic_error);
}

TEST(DeviceTileCache, AHostStaleTileStaysWhileAnyoneReferencesIt) {
  FakeDevice gpu;
  DeviceTileCache cache(1 * kMiB, gpu.free_function());
  TilePtr c = tile();  // written on the GPU, not copied back; `c` stands for its next reader
  void* c_copy = gpu.allocate();
  cache.insert_written(c, c_copy, kMiB, false);
  const TilePtr a = tile();
  void* a_copy = gpu.allocate();
  cache.insert_written(a, a_copy, kMiB);  // over capacity: the host-valid copy goes instead
  EXPECT_EQ(gpu.freed, (std::set<void*>{a_copy}));
  const TilePtr b = tile();
  cache.insert_written(b, gpu.allocate(), kMiB);
  EXPECT_EQ(cache.acquire(c.get()), c_copy);  // the only valid copy is still there
  cache.release(c.get());
  c.reset();  // its last reader is done: nobody can read it any more
  const TilePtr d = tile();
  cache.insert_written(d, gpu.allocate(), kMiB);
  EXPECT_TRUE(gpu.freed.count(c_copy));
}

TEST(DeviceTileCache, AWriterTakesAHostStaleCopyOnlyWhenNoReaderIsStillToCome) {
  FakeDevice gpu;
  DeviceTileCache cache(8 * kMiB, gpu.free_function());
  TilePtr c = tile();
  void* c_copy = gpu.allocate();
  cache.insert_written(c, c_copy, kMiB, false);
  TilePtr reader = c;  // a reader of this version, delivered but not yet run
  EXPECT_EQ(cache.take_for_writing(c.get()), nullptr);  // it would read the writer's result
  reader.reset();
  EXPECT_EQ(cache.take_for_writing(c.get()), c_copy);  // the writer's reference and the cache's
}
