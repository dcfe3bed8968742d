// DeviceChoice: where a ready task runs on a rank with CPU workers and a device, decided on
// synthetic costs (no MPI, threads or clock).

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "bellows/runtime/device_choice.hpp"

using bellows::runtime::ChoiceInput;
using bellows::runtime::DeviceChoice;
using bellows::runtime::Place;
using bellows::runtime::TileUse;

namespace {

constexpr std::uint64_t kTileBytes = 256ULL * 256 * 8;  // 512 KiB
constexpr double kLinkSecondsPerByte = 1.0 / 12e9;       // 12 GB/s
constexpr double kLinkLatency = 10e-6;

TileUse on_host(bool written = false) {
  TileUse t;
  t.bytes = kTileBytes;
  t.written = written;
  return t;
}

TileUse on_device(bool written = false) {
  TileUse t = on_host(written);
  t.on_host = false;
  t.on_device = true;
  return t;
}

ChoiceInput costs(const std::vector<TileUse>& tiles, double cpu, double device) {
  ChoiceInput in;
  in.tiles = tiles;
  in.cpu_compute_seconds = cpu;
  in.device_compute_seconds = device;
  in.link_seconds_per_byte = kLinkSecondsPerByte;
  in.link_latency_seconds = kLinkLatency;
  return in;
}

}  // namespace

TEST(DeviceChoice, TaskWhoseInputsAreResidentGoesToTheDevice) {
  // A GEMM tile update: 1 ms on the CPU, 0.1 ms on the device, all three tiles resident there.
  const std::vector<TileUse> tiles{on_device(), on_device(), on_device(true)};
  const auto c = DeviceChoice::choose(costs(tiles, 1e-3, 1e-4));
  EXPECT_EQ(c.place, Place::device);
  EXPECT_EQ(c.device_move_bytes, 0U);
  EXPECT_EQ(c.cpu_move_bytes, 3 * kTileBytes);
  EXPECT_DOUBLE_EQ(c.device_finish_seconds, 1e-4);
}

TEST(DeviceChoice, ResidentInputsKeepEvenAModestlyFasterCpuTaskOnTheDevice) {
  // Bringing 1.5 MiB back (about 160 us) costs more than the device's 20 us handicap.
  const std::vector<TileUse> tiles{on_device(), on_device(), on_device(true)};
  EXPECT_EQ(DeviceChoice::choose(costs(tiles, 30e-6, 50e-6)).place, Place::device);
}

TEST(DeviceChoice, SmallTaskWhoseInputsAreOnTheHostStaysOnTheCpu) {
  // Cheap to compute (20 us on the CPU, 2 us on the device), expensive to move (3 tiles in,
  // the written one back out because it leaves the rank).
  std::vector<TileUse> tiles{on_host(), on_host(), on_host(true)};
  tiles[2].leaves = true;
  const auto c = DeviceChoice::choose(costs(tiles, 20e-6, 2e-6));
  EXPECT_EQ(c.place, Place::cpu);
  EXPECT_EQ(c.cpu_move_bytes, 0U);
  EXPECT_EQ(c.device_move_bytes, 4 * kTileBytes);
  EXPECT_NEAR(c.device_cost_seconds, 2e-6 + 4 * (kLinkLatency + kTileBytes * kLinkSecondsPerByte),
              1e-12);
}

TEST(DeviceChoice, ComputeHeavyTaskGoesToTheDeviceDespiteMovingItsInputs) {
  const std::vector<TileUse> tiles{on_host(), on_host(), on_host(true)};
  const auto c = DeviceChoice::choose(costs(tiles, 2e-3, 0.2e-3));
  EXPECT_EQ(c.place, Place::device);
  EXPECT_EQ(c.device_move_bytes, 3 * kTileBytes);  // the output stays on the device
}

TEST(DeviceChoice, AWrittenTileThatLeavesTheRankComesBackFromTheDevice) {
  std::vector<TileUse> tiles{on_device(true)};
  tiles[0].leaves = true;
  const auto c = DeviceChoice::choose(costs(tiles, 1.0, 1.0));
  EXPECT_EQ(c.device_move_bytes, kTileBytes);
  EXPECT_EQ(c.cpu_move_bytes, kTileBytes);
}

TEST(DeviceChoice, QueueLengthsBalanceThePlaces) {
  // Same task each time, the device 4x faster: tasks go to the device until its backlog
  // outweighs the difference, then the CPU takes some. Over many tasks both backlogs grow
  // together and the CPU takes about a fifth of the work (its speed share).
  const std::vector<TileUse> tiles{on_device(), on_device(), on_device(true)};
  double cpu_backlog = 0.0, device_backlog = 0.0;
  int on_cpu = 0, on_dev = 0;
  for (int i = 0; i < 1000; ++i) {
    auto in = costs(tiles, 4e-4, 1e-4);
    in.tiles = {};  // all resident on the device, data on the host too: no moves
    in.cpu_backlog_seconds = cpu_backlog;
    in.device_backlog_seconds = device_backlog;
    const auto c = DeviceChoice::choose(in);
    if (c.place == Place::cpu) {
      ++on_cpu;
      cpu_backlog += c.cpu_cost_seconds;
    } else {
      ++on_dev;
      device_backlog += c.device_cost_seconds;
    }
  }
  EXPECT_NEAR(on_cpu, 200, 3);
  EXPECT_NEAR(on_dev, 800, 3);
  EXPECT_NEAR(cpu_backlog, device_backlog, 4e-4);
}

TEST(DeviceChoice, ABusyDeviceSendsEvenResidentWorkToTheCpu) {
  const std::vector<TileUse> tiles{on_device(), on_device(), on_device(true)};
  auto in = costs(tiles, 1e-3, 1e-4);
  in.device_backlog_seconds = 5e-3;
  const auto c = DeviceChoice::choose(in);
  EXPECT_EQ(c.place, Place::cpu);
  EXPECT_GT(c.device_finish_seconds, c.cpu_finish_seconds);
}

TEST(DeviceChoice, AFreeLinkMovesNothingAtNoCost) {
  const std::vector<TileUse> tiles{on_host(), on_host(), on_host(true)};
  auto in = costs(tiles, 1e-3, 1e-4);
  in.link_seconds_per_byte = 0.0;
  in.link_latency_seconds = 0.0;
  const auto c = DeviceChoice::choose(in);
  EXPECT_EQ(c.place, Place::device);
  EXPECT_DOUBLE_EQ(c.device_cost_seconds, 1e-4);
}

TEST(DeviceChoice, TiesGoToTheCpuUnlessTheDeviceIsLessBusy) {
  auto in = costs({}, 1e-4, 1e-4);
  EXPECT_EQ(DeviceChoice::choose(in).place, Place::cpu);
  in.cpu_backlog_seconds = 1e-4;
  in.device_backlog_seconds = 0.0;
  in.cpu_compute_seconds = 0.0;
  EXPECT_EQ(DeviceChoice::choose(in).place, Place::device);
}

// ---- among the GPUs of a rank (RuntimeOptions::gpus)

namespace {

/// Each GPU's choice for a GEMM update whose three tiles are resident on `holder` only
/// (the others would copy them in), with each GPU's backlog.
std::vector<bellows::runtime::Choice> per_gpu(std::size_t holder, const std::vector<double>& backlogs) {
  std::vector<bellows::runtime::Choice> out;
  for (std::size_t g = 0; g < backlogs.size(); ++g) {
    const bool here = g == holder;
    std::vector<TileUse> tiles{here ? on_device() : on_host(), here ? on_device() : on_host(),
                               here ? on_device(true) : on_host(true)};
    for (auto& t : tiles) t.on_host = true;  // copies on the host too: any GPU may take it
    ChoiceInput in = costs(tiles, 1.0, 1e-4);
    in.device_backlog_seconds = backlogs[g];
    out.push_back(DeviceChoice::choose(in));
  }
  return out;
}

}  // namespace

TEST(DeviceChoice, AmongIdleGpusTheTaskGoesWhereItsTilesAre) {
  const auto choices = per_gpu(2, {0.0, 0.0, 0.0, 0.0});
  EXPECT_EQ(DeviceChoice::first_to_finish({choices, -1}), 2U);
}

TEST(DeviceChoice, ABusyGpuHoldingTheTilesLosesTheTaskToAnIdleOne) {
  // Copying three 512 KiB tiles at 12 GB/s (~160 us) beats waiting 1 ms behind the holder.
  const auto choices = per_gpu(0, {1e-3, 0.0, 5e-4});
  EXPECT_EQ(DeviceChoice::first_to_finish({choices, -1}), 1U);
}

TEST(DeviceChoice, ABriefBacklogOnTheHolderKeepsTheTaskThere) {
  const auto choices = per_gpu(1, {0.0, 5e-5, 0.0});
  EXPECT_EQ(DeviceChoice::first_to_finish({choices, -1}), 1U);
}

TEST(DeviceChoice, TheGpuHoldingTheOnlyValidCopyIsRequired) {
  const auto choices = per_gpu(0, {1.0, 0.0, 0.0});
  EXPECT_EQ(DeviceChoice::first_to_finish({choices, 0}), 0U);
}

TEST(DeviceChoice, EqualGpusTieToTheLowerIndex) {
  const auto choices = per_gpu(99, {0.0, 0.0, 0.0});
  EXPECT_EQ(DeviceChoice::first_to_finish({choices, -1}), 0U);
  EXPECT_EQ(DeviceChoice::first_to_finish({{}, -1}), 0U);
}
