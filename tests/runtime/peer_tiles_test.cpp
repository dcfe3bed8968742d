// Tile buffers in shared slabs, and a peer on the same host reading them with memcpy
// (tile_pool.hpp, peer_tiles.hpp).

#include <gtest/gtest.h>

#include <cstdint>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "bellows/runtime/tile.hpp"
#include "peer_tiles.hpp"
#include "tile_pool.hpp"

namespace br = bellows::runtime;

namespace {

/// A child process that holds a tile of `rows` x `rows` filled with its index plus `base`
/// and a plain heap buffer, sends both addresses, and waits until the pipe closes.
struct Producer {
  pid_t pid = -1;
  std::uint64_t tile_address = 0;
  std::uint64_t heap_address = 0;
  int gate = -1;

  explicit Producer(int rows, double base) {
    int to_parent[2];
    int from_parent[2];
    EXPECT_EQ(::pipe(to_parent), 0);
    EXPECT_EQ(::pipe(from_parent), 0);
    pid = ::fork();
    if (pid == 0) {
      ::close(to_parent[0]);
      ::close(from_parent[1]);
      br::Tile tile(rows, rows);
      for (std::size_t i = 0; i < tile.elements(); ++i) tile.data()[i] = base + static_cast<double>(i);
      std::vector<double> heap(16, base);
      const std::uint64_t addresses[2] = {reinterpret_cast<std::uintptr_t>(tile.data()),
                                          reinterpret_cast<std::uintptr_t>(heap.data())};
      if (::write(to_parent[1], addresses, sizeof addresses) != sizeof addresses) ::_exit(1);
      char c = 0;
      [[maybe_unused]] auto n = ::read(from_parent[0], &c, 1);
      ::_exit(0);
    }
    ::close(to_parent[1]);
    ::close(from_parent[0]);
    std::uint64_t addresses[2] = {0, 0};
    EXPECT_EQ(::read(to_parent[0], addresses, sizeof addresses),
              static_cast<ssize_t>(sizeof addresses));
    ::close(to_parent[0]);
    tile_address = addresses[0];
    heap_address = addresses[1];
    gate = from_parent[1];
  }
  ~Producer() {
    ::close(gate);
    ::waitpid(pid, nullptr, 0);
  }
};

}  // namespace

TEST(TilePool, TilesLieInSharedSlabsAndAreRecycled) {
  double* first = nullptr;
  {
    br::Tile tile(64, 64);
    first = tile.data();
    EXPECT_TRUE(br::tile_pool::in_shared_slab(tile.data()));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(tile.data()) % 4096, 0U);
  }
  br::Tile again(64, 64);
  EXPECT_EQ(again.data(), first);
}

TEST(TilePool, CountsFreshAndReusedBuffersTheBytesInUseAndTheirPeak) {
  // A shape no other test of this process uses: 67 x 61 doubles, 32,696 bytes, 8 pages.
  constexpr int kRows = 67, kCols = 61;
  constexpr std::uint64_t kBytes = 8 * 4096;
  br::tile_pool::restart_peak();
  const auto before = br::tile_pool::counters();
  EXPECT_EQ(before.peak_bytes_in_use, before.bytes_in_use);
  {
    br::Tile a(kRows, kCols), b(kRows, kCols);
    const auto both = br::tile_pool::counters();
    EXPECT_EQ(both.buffers_fresh - before.buffers_fresh, 2U) << "none of this shape was cached";
    EXPECT_EQ(both.buffers_reused, before.buffers_reused);
    EXPECT_EQ(both.bytes_fresh - before.bytes_fresh, 2 * kBytes);
    EXPECT_EQ(both.bytes_in_use - before.bytes_in_use, 2 * kBytes);
    EXPECT_EQ(both.peak_bytes_in_use, both.bytes_in_use);
    EXPECT_EQ(both.bytes_held - before.bytes_held, 2 * kBytes);
  }
  const auto released = br::tile_pool::counters();
  EXPECT_EQ(released.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(released.bytes_held, before.bytes_held + 2 * kBytes) << "both cached, pages kept";
  EXPECT_EQ(released.peak_bytes_in_use, before.bytes_in_use + 2 * kBytes) << "until restarted";
  {
    br::Tile again(kRows, kCols);
    const auto reused = br::tile_pool::counters();
    EXPECT_EQ(reused.buffers_reused - before.buffers_reused, 1U);
    EXPECT_EQ(reused.buffers_fresh, released.buffers_fresh) << "a cached buffer takes no page";
  }
  br::tile_pool::restart_peak();
  EXPECT_EQ(br::tile_pool::counters().peak_bytes_in_use, before.bytes_in_use);
}

namespace {

struct PinnedRange {
  std::uintptr_t base;
  std::size_t bytes;
};
std::vector<PinnedRange> pin_calls;
bool record_pin(void* base, std::size_t bytes) {
  pin_calls.push_back({reinterpret_cast<std::uintptr_t>(base), bytes});
  return true;
}
bool lies_in(const std::vector<PinnedRange>& ranges, const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const auto& r : ranges) {
    if (a >= r.base && a < r.base + r.bytes) return true;
  }
  return false;
}

}  // namespace

TEST(TilePool, PinsTheSlabsThereAndThoseToComeUntilToldToStop) {
  pin_calls.clear();
  br::Tile before(64, 64);
  const std::size_t pinned_before = br::tile_pool::pinned_bytes();
  br::tile_pool::pin_slabs(&record_pin);
  ASSERT_FALSE(pin_calls.empty()) << "the slab already holding a tile was not pinned";
  EXPECT_TRUE(lies_in(pin_calls, before.data()));
  std::size_t recorded = 0;
  for (const auto& r : pin_calls) {
    EXPECT_EQ(r.base % 4096, 0U);
    EXPECT_GE(r.bytes, br::tile_pool::kSlabBytes);
    recorded += r.bytes;
  }
  EXPECT_EQ(br::tile_pool::pinned_bytes(), pinned_before + recorded);
  br::tile_pool::pin_slabs(&record_pin);
  EXPECT_EQ(recorded, [] { std::size_t b = 0; for (const auto& r : pin_calls) b += r.bytes; return b; }())
      << "a slab pinned already was pinned again";

  // A tile larger than a slab gets a slab of its own, pinned as it is made.
  const int big = 3000;  // 72 MB > kSlabBytes
  const std::size_t calls = pin_calls.size();
  {
    br::Tile large(big, big);
    ASSERT_EQ(pin_calls.size(), calls + 1);
    EXPECT_TRUE(lies_in(pin_calls, large.data()));
    EXPECT_GE(pin_calls.back().bytes, large.bytes());
  }
  br::tile_pool::pin_slabs(nullptr);
  br::Tile after(big + 8, big + 8);
  EXPECT_EQ(pin_calls.size(), calls + 1) << "a slab was pinned after pinning stopped";
  EXPECT_TRUE(br::tile_pool::in_shared_slab(after.data()));
}

TEST(PeerTiles, CopiesAPeersTileFromItsSlab) {
  constexpr int kRows = 256;
  Producer producer(kRows, 7.0);
  br::PeerTiles peers;
  std::vector<double> local(kRows * kRows, -1.0);
  ASSERT_TRUE(peers.read(producer.pid, producer.tile_address, local.data(),
                         local.size() * sizeof(double)));
  for (std::size_t i = 0; i < local.size(); i += 997) {
    ASSERT_EQ(local[i], 7.0 + static_cast<double>(i)) << "element " << i;
  }
  // A second read of the same slab uses the mapping made by the first.
  std::vector<double> part(8, -1.0);
  ASSERT_TRUE(peers.read(producer.pid, producer.tile_address + 8 * sizeof(double), part.data(),
                         part.size() * sizeof(double)));
  EXPECT_EQ(part[0], 15.0);
}

TEST(PeerTiles, RefusesMemoryOutsideTileSlabs) {
  Producer producer(16, 1.0);
  br::PeerTiles peers;
  std::vector<double> local(16, -1.0);
  EXPECT_FALSE(peers.read(producer.pid, producer.heap_address, local.data(),
                          local.size() * sizeof(double)));
  EXPECT_EQ(local[0], -1.0);
}
