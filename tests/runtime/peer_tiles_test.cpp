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
