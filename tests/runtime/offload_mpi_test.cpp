// Proactive offloading (RuntimeOptions::offload, OffloadPolicy) under mpiexec -n 3..4: a
// GEMM whose rank 1 slows down (RuntimeOptions::emulated_slowdown) invites the other ranks
// to steal from it in the iteration it slows down in (its work drifts past the plan), has its
// work pushed to them from the iteration after, every task still runs
// exactly once per iteration, and C is bit-identical to a run without offloading or
// stealing, at the emulated device's slow (10 GFLOP/s) and GPU (1000 GFLOP/s) speeds.

#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"
#include "mpi_test_support.hpp"

namespace br = bellows::runtime;
namespace be = bellows::examples;
namespace bt = bellows::testing;
using bt::MpiTest;

namespace {

constexpr unsigned kSeed = 11;
constexpr int kN = 384;
constexpr int kTile = 96;
constexpr int kTiles = kN / kTile;
constexpr int kIterations = 5;  // the plans of iterations 3 to 5 see the slowdown of iteration 2 on
constexpr int kSlowRank = 1;

/// A task class that runs another one and counts, per key, how often its body ran here.
class CountingTasks final : public br::TaskClass {
 public:
  explicit CountingTasks(std::unique_ptr<br::TaskClass> inner)
      : TaskClass(inner->id()), inner_(std::move(inner)), runs_(kTiles * kTiles * kTiles) {}

  std::string_view name() const override { return inner_->name(); }
  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override {
    inner_->for_each_task(fn);
  }
  int owner(const br::TaskKey& key) const override { return inner_->owner(key); }
  void inputs(const br::TaskKey& key, std::vector<br::InputSource>& out) const override {
    inner_->inputs(key, out);
  }
  void successors(const br::TaskKey& key, int slot, std::vector<br::Successor>& out) const override {
    inner_->successors(key, slot, out);
  }
  double flops(const br::TaskKey& key) const override { return inner_->flops(key); }
  std::int64_t priority(const br::TaskKey& key) const override { return inner_->priority(key); }
  void execute_cpu(const br::TaskKey& key, std::span<br::Tile* const> tiles) const override {
    inner_->execute_cpu(key, tiles);
    runs_[static_cast<std::size_t>((key.index[0] * kTiles + key.index[1]) * kTiles + key.index[2])]
        .fetch_add(1);
  }

  /// Runs per task summed over the ranks, on rank 0 (empty elsewhere). Collective.
  [[nodiscard]] std::vector<int> gather(MPI_Comm comm) const {
    std::vector<int> mine(runs_.size()), all(runs_.size());
    for (std::size_t i = 0; i < runs_.size(); ++i) mine[i] = runs_[i].load();
    MPI_Reduce(mine.data(), all.data(), static_cast<int>(mine.size()), MPI_INT, MPI_SUM, 0, comm);
    return bt::world_rank() == 0 ? all : std::vector<int>{};
  }

 private:
  std::unique_ptr<br::TaskClass> inner_;
  mutable std::vector<std::atomic<int>> runs_;
};

struct GemmRun {
  std::vector<double> c;                     ///< rank 0 only
  std::vector<int> runs;                     ///< rank 0 only: per task, over all iterations
  std::vector<std::uint64_t> offloaded;      ///< per iteration, summed over the ranks
  std::vector<std::uint64_t> invitations;    ///< likewise: StealInvitations sent
  std::vector<std::uint64_t> answered;       ///< likewise: invitations answered with a request
};

/// kIterations of C = A * B on the emulated device at `gflops` (computing), rank kSlowRank
/// `slowdown` times slower from iteration 2 on.
GemmRun run_gemm(double gflops, double slowdown, bool offload, bool steal) {
  const int rank = bt::world_rank(), size = bt::world_size();
  const auto grid = br::BlockCyclic2D::square_for(size);
  br::TiledMatrix a(0, kN, kN, kTile, grid, rank), b(1, kN, kN, kTile, grid, rank),
      c(2, kN, kN, kTile, grid, rank);
  be::fill_random(a, kSeed);
  be::fill_random(b, kSeed + 1);
  br::RuntimeOptions options;
  options.comm_max_sleep_us = 100;
  options.device = br::DeviceKind::emulated;
  options.emulated_gflops = gflops;
  options.emulated_compute = true;
  options.steal.enabled = steal;
  options.offload.enabled = offload;
  // The guard that holds a plan back when an iteration takes far longer than its work is
  // OffloadPolicy's (unit tests); on a loaded host it would hold back the plan this test needs.
  options.offload.min_compute_share = 0.0;
  options.emulated_slowdown = br::EmulatedSlowdown{kSlowRank, 2, slowdown};
  br::Runtime runtime(MPI_COMM_WORLD, options);
  runtime.add_collection(a);
  runtime.add_collection(b);
  runtime.add_collection(c);
  auto tasks = std::make_unique<CountingTasks>(std::make_unique<be::GemmTasks>(0, a, b, c));
  const CountingTasks& counted = *tasks;
  runtime.add_task_class(std::move(tasks));
  GemmRun run;
  for (int it = 0; it < kIterations; ++it) {
    const auto report = runtime.run_iteration();
    run.offloaded.push_back(bt::sum_over_ranks(report.local.tasks_offloaded));
    run.invitations.push_back(bt::sum_over_ranks(report.local.steal.invitations_sent));
    run.answered.push_back(bt::sum_over_ranks(report.local.steal.invitations_answered));
    EXPECT_EQ(bt::sum_over_ranks(report.local.tasks_offloaded),
              bt::sum_over_ranks(report.local.tasks_offloaded_here))
        << "iteration " << it + 1 << ": tasks pushed and tasks received differ";
  }
  run.runs = counted.gather(MPI_COMM_WORLD);
  run.c = c.gather_to_root(MPI_COMM_WORLD);
  return run;
}

/// Offloading and stealing on against both off, at `gflops`, with rank 1 slowed so much
/// (about 1.25 GFLOP/s) that it is slower than the host computing the tiles.
void expect_offloading_exact(double gflops) {
  const double slowdown = gflops / 1.25;
  const auto off = run_gemm(gflops, slowdown, false, false);
  const auto on = run_gemm(gflops, slowdown, true, true);
  EXPECT_EQ(on.offloaded.at(0), 0U) << "the first iteration has no measured costs to plan from";
  EXPECT_EQ(on.offloaded.at(1), 0U) << "the second iteration measures stealing alone (OffloadFeedback)";
  EXPECT_GT(on.offloaded.at(2), 0U)
      << "the plan of the third iteration sees the slowdown of the second (its measured speed)";
  EXPECT_EQ(on.invitations.at(0), 0U) << "the first iteration has no plan to drift from";
  EXPECT_GT(on.invitations.at(1), 0U)
      << "the rank that slows down in the second iteration invites thieves while it runs";
  for (std::size_t it = 0; it < on.invitations.size(); ++it) {
    EXPECT_LE(on.answered.at(it), on.invitations.at(it)) << "iteration " << it + 1;
  }
  std::uint64_t moved = 0;
  for (const auto tasks : on.offloaded) moved += tasks;
  EXPECT_GT(moved, 0U) << "no task was offloaded from the slowed rank at " << gflops << " GFLOP/s";
  for (const auto tasks : off.offloaded) EXPECT_EQ(tasks, 0U);
  if (bt::world_rank() == 0) {
    ASSERT_EQ(on.runs.size(), static_cast<std::size_t>(kTiles * kTiles * kTiles));
    for (std::size_t i = 0; i < on.runs.size(); ++i) {
      EXPECT_EQ(on.runs[i], kIterations) << "GEMM task " << i << " ran " << on.runs[i]
                                         << " times in " << kIterations << " iterations";
    }
    EXPECT_TRUE(on.c.size() == off.c.size() &&
                std::memcmp(on.c.data(), off.c.data(), on.c.size() * sizeof(double)) == 0)
        << "C differs with offloading at " << gflops << " GFLOP/s";
  }
}

}  // namespace

TEST_F(MpiTest, OffloadingAtSlowDeviceSpeedRunsEveryTaskOnceWithTheSameBits) {
  expect_offloading_exact(10.0);
}

TEST_F(MpiTest, OffloadingAtGpuSpeedRunsEveryTaskOnceWithTheSameBits) {
  expect_offloading_exact(1000.0);
}
