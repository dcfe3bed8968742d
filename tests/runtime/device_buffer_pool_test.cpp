// DeviceBufferPool: device buffers reused by size, with fake device memory (no GPU needed).

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "device_buffer_pool.hpp"

using bellows::runtime::DeviceBufferPool;

namespace {

/// Fake device memory of a fixed capacity: distinct addresses, a record of what was freed.
struct FakeDevice {
  explicit FakeDevice(std::size_t capacity_bytes) : capacity(capacity_bytes) {}

  DeviceBufferPool pool() {
    return DeviceBufferPool(
        [this](std::size_t bytes) -> void* {
          if (used + bytes > capacity) return nullptr;
          used += bytes;
          void* d = buffers.emplace_back(std::make_unique<char[]>(1)).get();
          live.emplace(d, bytes);
          return d;
        },
        [this](void* d) {
          const auto it = live.find(d);
          ASSERT_NE(it, live.end()) << "freed twice or never made";
          used -= it->second;
          live.erase(it);
          ++frees;
        });
  }

  std::size_t capacity;
  std::size_t used = 0;
  std::vector<std::unique_ptr<char[]>> buffers;
  std::map<void*, std::size_t> live;  // buffer -> bytes
  std::size_t frees = 0;
};

constexpr std::size_t kMiB = 1 << 20;

}  // namespace

TEST(DeviceBufferPool, ABufferGivenBackIsReusedForTheSameSize) {
  FakeDevice gpu(64 * kMiB);
  DeviceBufferPool pool = gpu.pool();
  void* a = pool.take(2 * kMiB);
  pool.give_back(a, 2 * kMiB);
  EXPECT_EQ(pool.take(2 * kMiB), a);
  EXPECT_EQ(pool.allocations(), 1U);
  EXPECT_EQ(pool.reuses(), 1U);
  EXPECT_EQ(pool.idle_bytes(), 0U);
  pool.give_back(a, 2 * kMiB);
}

TEST(DeviceBufferPool, ABufferOfAnotherSizeIsNotReused) {
  FakeDevice gpu(64 * kMiB);
  DeviceBufferPool pool = gpu.pool();
  void* a = pool.take(2 * kMiB);
  pool.give_back(a, 2 * kMiB);
  void* b = pool.take(8 * kMiB);
  EXPECT_NE(b, a);
  EXPECT_EQ(pool.allocations(), 2U);
  EXPECT_EQ(pool.idle_bytes(), 2 * kMiB);
  EXPECT_EQ(pool.held_bytes(), 10 * kMiB);
  pool.give_back(b, 8 * kMiB);
}

TEST(DeviceBufferPool, AnIterationOfTasksAllocatesOnlyItsPeak) {
  // Three iterations of 100 tasks, each holding 3 buffers of one size at a time, 4 in flight.
  FakeDevice gpu(1024 * kMiB);
  DeviceBufferPool pool = gpu.pool();
  for (int iteration = 0; iteration < 3; ++iteration) {
    std::vector<void*> in_flight;
    for (int task = 0; task < 100; ++task) {
      for (int slot = 0; slot < 3; ++slot) in_flight.push_back(pool.take(2 * kMiB));
      if (in_flight.size() == 12) {
        for (int slot = 0; slot < 3; ++slot) {
          pool.give_back(in_flight.front(), 2 * kMiB);
          in_flight.erase(in_flight.begin());
        }
      }
    }
    for (void* d : in_flight) pool.give_back(d, 2 * kMiB);
  }
  EXPECT_EQ(pool.allocations(), 12U);
  EXPECT_EQ(pool.reuses(), 900U - 12U);
  EXPECT_EQ(gpu.frees, 0U);
}

TEST(DeviceBufferPool, OutOfMemoryFreesIdleBuffersOfOtherSizesAndTriesAgain) {
  FakeDevice gpu(10 * kMiB);
  DeviceBufferPool pool = gpu.pool();
  void* small = pool.take(4 * kMiB);
  void* other = pool.take(4 * kMiB);
  pool.give_back(small, 4 * kMiB);
  pool.give_back(other, 4 * kMiB);
  void* large = pool.take(8 * kMiB);  // 2 MiB free: only after the idle 8 MiB go
  EXPECT_NE(large, nullptr);
  EXPECT_EQ(gpu.frees, 2U);
  EXPECT_EQ(pool.idle_bytes(), 0U);
  EXPECT_EQ(pool.held_bytes(), 8 * kMiB);
  pool.give_back(large, 8 * kMiB);
}

TEST(DeviceBufferPool, OutOfMemoryWithNothingIdleNamesTheSize) {
  FakeDevice gpu(4 * kMiB);
  DeviceBufferPool pool = gpu.pool();
  void* a = pool.take(4 * kMiB);
  try {
    (void)pool.take(2 * kMiB);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "device buffer pool: the GPU has no memory left for a buffer of 2097152 bytes "
              "(4194304 bytes held in buffers of tiles)");
  }
  pool.give_back(a, 4 * kMiB);
}

TEST(DeviceBufferPool, DestructionFreesEveryIdleBuffer) {
  FakeDevice gpu(64 * kMiB);
  {
    DeviceBufferPool pool = gpu.pool();
    void* a = pool.take(kMiB);
    void* b = pool.take(2 * kMiB);
    pool.give_back(a, kMiB);
    pool.give_back(b, 2 * kMiB);
  }
  EXPECT_EQ(gpu.frees, 2U);
  EXPECT_TRUE(gpu.live.empty());
}
