#pragma once
// The GEMM pieces the tests of a rank lost around a resize share (boundary_loss_test.cpp,
// teams_after_resize_test.cpp): the ranks as a set in messages, C as a run without failure
// computes it, and GEMM tasks whose first task run once armed kills the process.

#include <signal.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bellows/kernels/tile_kernels.hpp"
#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"
#include "tiled_gemm.hpp"

namespace bellows::test {

/// "{1, 3}".
inline std::string rank_set(const std::vector<int>& ranks) {
  std::string out = "{";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "}";
}

/// C of the n x n GEMM of `seed` in tiles of `tile`, as a run without failure computes it: the
/// same tile kernel in the same order, on this process alone.
inline std::vector<double> serial_gemm_c(int n, int tile, unsigned seed) {
  TiledGemm serial(n, tile, 1, 0, seed);
  const int tiles = n / tile;
  for (int j = 0; j < tiles; ++j) {
    for (int i = 0; i < tiles; ++i) {
      auto result = std::make_shared<runtime::Tile>(tile, tile);
      for (int k = 0; k < tiles; ++k) {
        kernels::gemm_nn(*serial.a.tile(i, k), *serial.b.tile(k, j), k == 0 ? 0.0 : 1.0, *result);
      }
      serial.c.set_tile(i, j, std::move(result));
    }
  }
  return serial.c.gather_to_root(MPI_COMM_SELF);
}

/// The GEMM's tasks, except that once `armed` the first task this rank runs waits `pause_us`
/// and SIGKILLs the process: a loss at a point of the iteration after its start (its barrier,
/// its tile moves and the checkpoint that completes before its tasks after a resize).
class KillingGemm final : public runtime::TaskClass {
 public:
  KillingGemm(TiledGemm& gemm, const std::atomic<bool>& armed, int pause_us)
      : TaskClass(0), gemm_(0, gemm.a, gemm.b, gemm.c), armed_(armed), pause_us_(pause_us) {}

  [[nodiscard]] std::string_view name() const override { return gemm_.name(); }
  void for_each_task(const std::function<void(const runtime::TaskKey&)>& fn) const override {
    gemm_.for_each_task(fn);
  }
  [[nodiscard]] int owner(const runtime::TaskKey& key) const override { return gemm_.owner(key); }
  void inputs(const runtime::TaskKey& key, std::vector<runtime::InputSource>& out) const override {
    gemm_.inputs(key, out);
  }
  void successors(const runtime::TaskKey& key, int slot, std::vector<runtime::Successor>& out) const override {
    gemm_.successors(key, slot, out);
  }
  [[nodiscard]] double flops(const runtime::TaskKey& key) const override { return gemm_.flops(key); }
  [[nodiscard]] std::int64_t priority(const runtime::TaskKey& key) const override { return gemm_.priority(key); }
  void execute_cpu(const runtime::TaskKey& key, std::span<runtime::Tile* const> tiles) const override {
    if (armed_.load()) {
      std::this_thread::sleep_for(std::chrono::microseconds(pause_us_));
      ::raise(SIGKILL);  // in the iteration's tasks
    }
    gemm_.execute_cpu(key, tiles);
  }

 private:
  examples::GemmTasks gemm_;
  const std::atomic<bool>& armed_;
  int pause_us_;
};

}  // namespace bellows::test
