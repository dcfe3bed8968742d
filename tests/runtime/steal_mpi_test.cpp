// Inter-rank work stealing (John & Milthorpe,
// "Elasticity in a Task-based Dataflow Runtime Through Inter-node GPU Work Stealing",
// CCGrid 2024, section IV) under mpiexec -n 2..6: no task lost or
// run twice under randomized victims, chunks, hops and thresholds; results exact and,
// for GEMM and Cholesky, bit-identical to a run without stealing; forwarding bounded by
// max_hops; victims never drained below their threshold; one request out per rank; the
// fixed mapping untouched when stealing is off; no hang when a steal races the last tasks.

#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/runtime.hpp"
#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"
#include "mpi_test_support.hpp"
#include "same_host.hpp"

namespace br = bellows::runtime;
namespace be = bellows::examples;
namespace bt = bellows::testing;
using bt::MpiTest;

namespace {

constexpr unsigned kSeed = 7;

/// Counts executions per key index (one counter per task of a class).
class ExecutionCounter {
 public:
  explicit ExecutionCounter(int count) : counts_(static_cast<std::size_t>(count)) {}
  void hit(int i) const { counts_[static_cast<std::size_t>(i)].fetch_add(1); }
  /// Sum over the ranks of comm, on rank 0 (empty elsewhere). Collective.
  [[nodiscard]] std::vector<int> gather(MPI_Comm comm) const {
    std::vector<int> mine(counts_.size()), all(counts_.size());
    for (std::size_t i = 0; i < counts_.size(); ++i) mine[i] = counts_[i].load();
    MPI_Reduce(mine.data(), all.data(), static_cast<int>(mine.size()), MPI_INT, MPI_SUM, 0, comm);
    return bt::world_rank() == 0 ? all : std::vector<int>{};
  }

 private:
  mutable std::vector<std::atomic<int>> counts_;
};

/// STAGE1(i) reads collection tile IN(i), computes IN(i) * 2 + i into a scratch tile and
/// passes it to STAGE2(i) (data) and to STAGE2(i + 1) (a control dependency). Three in
/// four STAGE1 tasks belong to rank 0: the rest of the job starves unless it steals.
class StageOne final : public br::TaskClass {
 public:
  StageOne(br::TaskClassId id, const br::TiledMatrix& in, int count, int ranks, int sleep_us)
      : TaskClass(id), in_(in), count_(count), ranks_(ranks), sleep_us_(sleep_us), runs(count) {}

  std::string_view name() const override { return "STAGE1"; }
  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override {
    for (int i = 0; i < count_; ++i) fn(key(i));
  }
  int owner(const br::TaskKey& k) const override {
    const int i = k.index[0];
    return i % 4 == 3 ? i % ranks_ : 0;
  }
  void inputs(const br::TaskKey& k, std::vector<br::InputSource>& out) const override {
    const int i = k.index[0];
    out.push_back(br::InputSource::from_collection(in_.index(i, 0), br::Access::read));
    out.push_back(br::InputSource::scratch_tile(in_.rows_of_tile(i), in_.cols_of_tile(0)));
  }
  void successors(const br::TaskKey& k, int slot, std::vector<br::Successor>& out) const override {
    const int i = k.index[0];
    if (slot != 1) return;
    out.push_back(br::Successor::to_task(br::TaskKey{static_cast<br::TaskClassId>(id() + 1), {i, 0, 0}}, 0));
    if (i + 1 < count_) {
      out.push_back(br::Successor::to_task(br::TaskKey{static_cast<br::TaskClassId>(id() + 1), {i + 1, 0, 0}}, 1));
    }
  }
  double flops(const br::TaskKey&) const override { return 1e6; }
  std::int64_t priority(const br::TaskKey& k) const override { return -k.index[0]; }
  void execute_cpu(const br::TaskKey& k, std::span<br::Tile* const> tiles) const override {
    const int i = k.index[0];
    const br::Tile& in = *tiles[0];
    br::Tile& out = *tiles[1];
    for (int c = 0; c < in.cols(); ++c) {
      for (int r = 0; r < in.rows(); ++r) out.at(r, c) = in.at(r, c) * 2.0 + i;
    }
    if (sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    runs.hit(i);
  }

  const br::TiledMatrix& in_;
  int count_;
  int ranks_;
  int sleep_us_;
  ExecutionCounter runs;
};

/// STAGE2(i) adds 1 to STAGE1(i)'s tile and writes it to collection OUT(i); it also
/// waits for STAGE1(i - 1) through a control slot, which must arrive empty.
class StageTwo final : public br::TaskClass {
 public:
  StageTwo(br::TaskClassId id, const br::TiledMatrix& out, int count, int ranks)
      : TaskClass(id), out_(out), count_(count), ranks_(ranks), runs(count) {}

  std::string_view name() const override { return "STAGE2"; }
  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override {
    for (int i = 0; i < count_; ++i) fn(key(i));
  }
  int owner(const br::TaskKey& k) const override { return (k.index[0] * 7) % ranks_; }
  void inputs(const br::TaskKey& k, std::vector<br::InputSource>& out) const override {
    const int i = k.index[0];
    const br::TaskKey producer{static_cast<br::TaskClassId>(id() - 1), {i, 0, 0}};
    out.push_back(br::InputSource::from_task(producer, 1, br::Access::read_write));
    if (i > 0) {
      out.push_back(br::InputSource::control_from(
          br::TaskKey{static_cast<br::TaskClassId>(id() - 1), {i - 1, 0, 0}}, 1));
    }
  }
  void successors(const br::TaskKey& k, int slot, std::vector<br::Successor>& out) const override {
    if (slot == 0) out.push_back(br::Successor::to_collection(out_.index(k.index[0], 0)));
  }
  double flops(const br::TaskKey&) const override { return 1e6; }
  void execute_cpu(const br::TaskKey& k, std::span<br::Tile* const> tiles) const override {
    const int i = k.index[0];
    br::Tile& t = *tiles[0];
    for (int c = 0; c < t.cols(); ++c) {
      for (int r = 0; r < t.rows(); ++r) t.at(r, c) += 1.0;
    }
    if (i > 0 && tiles[1] != nullptr) bad_control.fetch_add(1);
    runs.hit(i);
  }

  const br::TiledMatrix& out_;
  int count_;
  int ranks_;
  ExecutionCounter runs;
  mutable std::atomic<int> bad_control{0};
};

struct PipelineRun {
  std::vector<int> stage1_runs, stage2_runs;  ///< rank 0 only
  std::vector<double> out;                    ///< rank 0 only
  std::vector<double> expected;               ///< rank 0 only
  br::RankStats stats;                        ///< this rank
  std::uint64_t owned = 0;                    ///< tasks this rank owns (both classes)
  std::size_t migrations_here = 0;            ///< override entries naming this rank
  std::size_t migrations_total = 0;
  int bad_control = 0;
};

/// The emulated device at its default GPU speed (1000 GFLOP/s), running each task's CPU
/// body too, so that results can be compared.
void use_emulated_gpu(br::RuntimeOptions& options) {
  options.device = br::DeviceKind::emulated;
  options.emulated_gflops = 1000.0;
  options.emulated_compute = true;
}

PipelineRun run_pipeline(const br::StealOptions& steal, int count, int iterations, int sleep_us,
                         bool emulated = false) {
  const int rank = bt::world_rank(), size = bt::world_size();
  constexpr int kTile = 6;
  const br::BlockCyclic2D column{size, 1};
  br::TiledMatrix in(0, count * kTile, kTile, kTile, column, rank);
  br::TiledMatrix out(1, count * kTile, kTile, kTile, column, rank);
  be::fill_random(in, kSeed);

  br::RuntimeOptions options;
  options.comm_max_sleep_us = 100;
  options.steal = steal;
  if (emulated) use_emulated_gpu(options);
  br::Runtime runtime(MPI_COMM_WORLD, options);
  runtime.add_collection(in);
  runtime.add_collection(out);
  auto one = std::make_unique<StageOne>(0, in, count, size, sleep_us);
  auto two = std::make_unique<StageTwo>(1, out, count, size);
  const auto& one_ref = *one;
  const auto& two_ref = *two;
  PipelineRun result;
  for (int i = 0; i < count; ++i) {
    result.owned += one->owner(one->key(i)) == rank ? 1 : 0;
    result.owned += two->owner(two->key(i)) == rank ? 1 : 0;
  }
  runtime.add_task_class(std::move(one));
  runtime.add_task_class(std::move(two));
  for (int it = 0; it < iterations; ++it) runtime.run_iteration();

  result.stats = runtime.stats();
  const auto migrations = runtime.migrations();  // a copy, taken once
  for (const auto& [key, where] : migrations) result.migrations_here += where == rank ? 1 : 0;
  result.migrations_total = migrations.size();
  result.stage1_runs = one_ref.runs.gather(MPI_COMM_WORLD);
  result.stage2_runs = two_ref.runs.gather(MPI_COMM_WORLD);
  result.bad_control = static_cast<int>(bt::sum_over_ranks(static_cast<std::uint64_t>(two_ref.bad_control.load())));
  result.out = out.gather_to_root(MPI_COMM_WORLD);
  const auto input = in.gather_to_root(MPI_COMM_WORLD);
  if (rank == 0) {
    result.expected.resize(input.size());
    const long rows = static_cast<long>(count) * kTile;
    for (long c = 0; c < kTile; ++c) {
      for (long r = 0; r < rows; ++r) {
        const auto idx = static_cast<std::size_t>(c * rows + r);
        result.expected[idx] = input[idx] * 2.0 + static_cast<double>(r / kTile) + 1.0;
      }
    }
  }
  return result;
}

std::string describe(const br::StealOptions& s) {
  return "chunk " + std::to_string(s.chunk) + ", max_hops " + std::to_string(s.max_hops) +
         ", device threshold " + std::to_string(s.device_threshold) + ", node threshold " +
         std::to_string(s.node_threshold) + ", victims " + std::string(br::to_string(s.policy));
}

/// The checks every stealing run must pass, on every rank (collective).
void expect_exactly_once_and_exact(const PipelineRun& run, int iterations, const br::StealOptions& steal) {
  const int rank = bt::world_rank();
  if (rank == 0) {
    for (std::size_t i = 0; i < run.stage1_runs.size(); ++i) {
      EXPECT_EQ(run.stage1_runs[i], iterations) << "STAGE1(" << i << ") with " << describe(steal);
      EXPECT_EQ(run.stage2_runs[i], iterations) << "STAGE2(" << i << ") with " << describe(steal);
    }
    ASSERT_EQ(run.out.size(), run.expected.size());
    for (std::size_t i = 0; i < run.out.size(); ++i) {
      ASSERT_EQ(run.out[i], run.expected[i]) << "OUT element " << i << " with " << describe(steal);
    }
  }
  EXPECT_EQ(run.bad_control, 0) << "a control slot received a tile";
  const auto& s = run.stats.steal;
  // This rank ran what it owns, less what thieves took, plus what it stole.
  EXPECT_EQ(run.stats.tasks_executed,
            run.owned * static_cast<std::uint64_t>(iterations) - s.tasks_given + s.tasks_stolen)
      << "rank " << rank << " with " << describe(steal);
  EXPECT_EQ(bt::sum_over_ranks(s.tasks_stolen), bt::sum_over_ranks(s.tasks_given));
  EXPECT_LE(s.max_hops_seen, static_cast<std::uint64_t>(steal.max_hops)) << describe(steal);
  // At most one request out at a time, counted as the requests go out and come back.
  EXPECT_LE(s.max_outstanding, 1U) << "rank " << rank << " with " << describe(steal);
  if (s.requests_sent > 0) {
    EXPECT_EQ(s.max_outstanding, 1U) << "rank " << rank << " asked, yet counted none out";
  }
  const auto keep = std::max(steal.device_threshold, steal.node_threshold);
  if (s.min_ready_after_serve >= 0) {
    EXPECT_GE(s.min_ready_after_serve, keep) << "rank " << rank << " gave below its threshold";
  }
  if (s.tasks_stolen > 0) {
    EXPECT_GT(run.migrations_here, 0U) << "thief recorded no migration";
  }
  if (s.tasks_given > 0) {
    EXPECT_GT(run.migrations_total, run.migrations_here) << "victim recorded no migration";
  }
  EXPECT_EQ(s.round_trip_seconds.size(), s.requests_sent);
  ASSERT_EQ(s.round_trip_forwards.size(), s.requests_sent);
  for (const int forwards : s.round_trip_forwards) {
    EXPECT_LE(forwards, steal.max_hops) << "an answered request was forwarded too often";
  }
}

}  // namespace

TEST_F(MpiTest, RandomizedStealingRunsEveryTaskExactlyOnce) {
  std::mt19937 random(2026);  // same sequence on every rank
  const br::VictimPolicy policies[] = {br::VictimPolicy::random, br::VictimPolicy::last_victim};
  constexpr int kIterations = 2;
  std::uint64_t stolen_everywhere = 0;
  for (int config = 0; config < 6; ++config) {
    br::StealOptions steal;
    steal.enabled = true;
    steal.chunk = 1 + static_cast<int>(random() % 8);
    steal.max_hops = static_cast<int>(random() % 4);
    steal.device_threshold = 1 + static_cast<int>(random() % 2);  // 0 would never starve
    steal.node_threshold = static_cast<int>(random() % 3);
    steal.policy = policies[random() % 2];
    steal.seed = static_cast<unsigned>(random());
    const auto run = run_pipeline(steal, 64, kIterations, 300);
    expect_exactly_once_and_exact(run, kIterations, steal);
    stolen_everywhere += bt::sum_over_ranks(run.stats.steal.tasks_stolen);
  }
  // Rank 0 owns three quarters of STAGE1: the other ranks must have stolen some of it.
  if (size() > 1) {
    EXPECT_GT(stolen_everywhere, 0U);
  }
}

TEST_F(MpiTest, ForwardingStopsAtMaxHops) {
  for (int hops : {0, 1, 3}) {
    br::StealOptions steal;
    steal.enabled = true;
    steal.chunk = 8;  // rarely satisfied in full: requests get forwarded when they may
    steal.max_hops = hops;
    steal.device_threshold = 2;
    const auto run = run_pipeline(steal, 48, 1, 200);
    expect_exactly_once_and_exact(run, 1, steal);
    EXPECT_LE(run.stats.steal.max_hops_seen, static_cast<std::uint64_t>(hops));
    if (hops == 0) {
      EXPECT_EQ(run.stats.steal.requests_forwarded, 0U);
    }
  }
}

TEST_F(MpiTest, VictimsKeepTheirThreshold) {
  br::StealOptions steal;
  steal.enabled = true;
  steal.chunk = 16;
  steal.device_threshold = 3;
  steal.node_threshold = 5;
  const auto run = run_pipeline(steal, 64, 1, 300);
  expect_exactly_once_and_exact(run, 1, steal);
  if (run.stats.steal.min_ready_after_serve >= 0) {
    EXPECT_GE(run.stats.steal.min_ready_after_serve, 5);
  }
}

TEST_F(MpiTest, StealingOffKeepsTheFixedMapping) {
  br::StealOptions steal;  // enabled = false
  const auto run = run_pipeline(steal, 64, 2, 0);
  expect_exactly_once_and_exact(run, 2, steal);
  EXPECT_EQ(run.stats.tasks_executed, run.owned * 2) << "rank " << rank();
  EXPECT_EQ(run.stats.steal.requests_sent, 0U);
  EXPECT_EQ(run.stats.steal.requests_received, 0U);
  EXPECT_EQ(run.migrations_total, 0U);
}

// A rank that never asks (thresholds of 0) retires once its own tasks have run: it enters the
// end-of-iteration barrier without waiting for the first rank's announcement. Here the first
// rank, the one that owns most of the work and counts every rank's completions, never asks,
// while the others steal from it with the cost rule off (they ask whenever they starve, and
// never retire): every task still runs once, with the same results, and the first rank retires
// in every iteration. Then no rank asks, and every rank retires in every iteration.
TEST_F(MpiTest, RanksThatStopAskingRetireAndEveryTaskRunsOnce) {
  constexpr int kIterations = 3;
  br::StealOptions thief;
  thief.enabled = true;
  thief.cost_rule = false;
  thief.device_threshold = 1;
  thief.policy = br::VictimPolicy::random;
  br::StealOptions never_asks;
  never_asks.enabled = true;
  never_asks.device_threshold = 0;
  never_asks.node_threshold = 0;

  const auto& mine = rank() == 0 ? never_asks : thief;
  const auto mixed = run_pipeline(mine, 64, kIterations, 300);
  expect_exactly_once_and_exact(mixed, kIterations, mine);
  // One rank alone does not steal, nor count completions.
  const std::uint64_t each = size() > 1 ? kIterations : 0;
  EXPECT_EQ(mixed.stats.steal.iterations_retired, rank() == 0 ? each : 0U) << "rank " << rank();
  if (size() > 1) {
    EXPECT_GT(bt::sum_over_ranks(mixed.stats.steal.tasks_stolen), 0U) << "nobody stole";
  }

  const auto quiet = run_pipeline(never_asks, 64, kIterations, 0);
  expect_exactly_once_and_exact(quiet, kIterations, never_asks);
  EXPECT_EQ(quiet.stats.steal.requests_sent, 0U);
  EXPECT_EQ(quiet.stats.steal.iterations_retired, each) << "rank " << rank();
}

TEST_F(MpiTest, StealsRacingTheLastTasksDoNotHang) {
  // Tiny graphs and no task time: requests keep arriving while victims run their last
  // tasks and after every task ran. The watchdog turns a hang into a failure. The cost rule
  // is off: with no task time it would rightly never ask, and the races are the subject here.
  br::StealOptions steal;
  steal.enabled = true;
  steal.cost_rule = false;
  steal.chunk = 8;
  steal.max_hops = 3;
  steal.device_threshold = 1;
  steal.node_threshold = 0;
  steal.policy = br::VictimPolicy::random;
  const auto run = run_pipeline(steal, 2 * size(), 40, 0);
  expect_exactly_once_and_exact(run, 40, steal);
  EXPECT_GT(bt::sum_over_ranks(run.stats.steal.requests_sent), 0U) << "nobody starved";
}

namespace {

/// C of a GEMM, gathered to rank 0.
std::vector<double> gemm_result(const br::StealOptions& steal, int n, int tile,
                                br::RankStats* stats = nullptr, bool emulated = false) {
  const int rank = bt::world_rank(), size = bt::world_size();
  const auto grid = br::BlockCyclic2D::square_for(size);
  br::TiledMatrix a(0, n, n, tile, grid, rank), b(1, n, n, tile, grid, rank),
      c(2, n, n, tile, grid, rank);
  be::fill_random(a, kSeed);
  be::fill_random(b, kSeed + 1);
  br::RuntimeOptions options;
  options.comm_max_sleep_us = 100;
  options.steal = steal;
  if (emulated) use_emulated_gpu(options);
  br::Runtime runtime(MPI_COMM_WORLD, options);
  runtime.add_collection(a);
  runtime.add_collection(b);
  runtime.add_collection(c);
  runtime.add_task_class(std::make_unique<be::GemmTasks>(0, a, b, c));
  runtime.run_iteration();
  if (stats != nullptr) *stats = runtime.stats();
  return c.gather_to_root(MPI_COMM_WORLD);
}

/// The factor L of a Cholesky, gathered to rank 0.
std::vector<double> cholesky_result(const br::StealOptions& steal, int n, int tile,
                                    br::RankStats* stats = nullptr, bool emulated = false) {
  const int rank = bt::world_rank(), size = bt::world_size();
  const auto grid = br::BlockCyclic2D::square_for(size);
  br::TiledMatrix a(0, n, n, tile, grid, rank), l(1, n, n, tile, grid, rank);
  be::fill_spd(a, kSeed);
  br::RuntimeOptions options;
  options.comm_max_sleep_us = 100;
  options.steal = steal;
  if (emulated) use_emulated_gpu(options);
  br::Runtime runtime(MPI_COMM_WORLD, options);
  runtime.add_collection(a);
  runtime.add_collection(l);
  for (auto& cls : be::make_cholesky_tasks(a, l)) runtime.add_task_class(std::move(cls));
  runtime.run_iteration();
  if (stats != nullptr) *stats = runtime.stats();
  return l.gather_to_root(MPI_COMM_WORLD);
}

/// Stealing whatever a victim can spare: these tests check that moved tasks give the same
/// bits, so tasks must move even where the cost rule would keep them (balanced ranks).
br::StealOptions eager_stealing() {
  br::StealOptions steal;
  steal.enabled = true;
  steal.chunk = 3;
  steal.device_threshold = 1;
  steal.cost_rule = false;
  return steal;
}

}  // namespace

// Whether a task moves depends on timing; each run is compared, and some run of a few
// must have moved tasks.
constexpr int kAttempts = 4;

TEST_F(MpiTest, GemmWithStealingIsBitIdenticalToWithout) {
  constexpr int kN = 384;
  const auto off = gemm_result(br::StealOptions{}, kN, 48);
  std::uint64_t moved = 0;
  for (int attempt = 0; attempt < kAttempts && moved == 0; ++attempt) {
    br::RankStats stats;
    const auto on = gemm_result(eager_stealing(), kN, 48, &stats);
    moved = bt::sum_over_ranks(stats.steal.tasks_stolen);
    if (rank() == 0) {  // no ASSERT here: every rank must reach the next run's collectives
      EXPECT_TRUE(on.size() == off.size() &&
                  std::memcmp(on.data(), off.data(), on.size() * sizeof(double)) == 0)
          << "C differs with stealing (attempt " << attempt << ")";
    }
  }
  EXPECT_GT(moved, 0U) << "no GEMM task moved in " << kAttempts << " runs";
}

TEST_F(MpiTest, CholeskyWithStealingIsBitIdenticalToWithout) {
  constexpr int kN = 576;
  const auto off = cholesky_result(br::StealOptions{}, kN, 48);
  std::uint64_t moved = 0;
  for (int attempt = 0; attempt < kAttempts && moved == 0; ++attempt) {
    br::RankStats stats;
    const auto on = cholesky_result(eager_stealing(), kN, 48, &stats);
    moved = bt::sum_over_ranks(stats.steal.tasks_stolen);
    if (rank() == 0) {  // no ASSERT here: every rank must reach the next run's collectives
      EXPECT_EQ(on.size(), off.size());
      // The factor is the lower triangle; tiles above the diagonal are never written.
      bool same = on.size() == off.size();
      for (std::size_t col = 0; same && col < kN; ++col) {
        for (std::size_t row = col; same && row < kN; ++row) {
          const std::size_t i = col * kN + row;
          same = std::memcmp(&on[i], &off[i], sizeof(double)) == 0;
          EXPECT_TRUE(same) << "L(" << row << "," << col << "): " << on[i] << " with stealing, "
                            << off[i] << " without (attempt " << attempt << ")";
        }
      }
    }
  }
  EXPECT_GT(moved, 0U) << "no Cholesky task moved in " << kAttempts << " runs";
}

// ---------------------------------------------------------------- same-host transport

TEST_F(MpiTest, RanksOnThisHostShareDoorbellsAndTileReads) {
  br::SameHost on(MPI_COMM_WORLD, true);
  br::SameHost off(MPI_COMM_WORLD, false);
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    // Every rank of these tests runs on this host.
    EXPECT_TRUE(on.has_doorbell(r)) << "rank " << rank() << " -> " << r;
    EXPECT_TRUE(on.can_read(r)) << "rank " << rank() << " -> " << r;
    EXPECT_FALSE(off.has_doorbell(r));
    EXPECT_FALSE(off.can_read(r));
  }
  EXPECT_TRUE(on.all_have_doorbells());

  // Each rank reads its right neighbour's buffer, whose address travels by MPI.
  std::vector<double> mine(1000);
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = rank() * 10000.0 + static_cast<double>(i);
  const int right = (rank() + 1) % size(), left = (rank() + size() - 1) % size();
  std::uint64_t address = reinterpret_cast<std::uintptr_t>(mine.data()), right_address = 0;
  MPI_Sendrecv(&address, 1, MPI_UINT64_T, left, 0, &right_address, 1, MPI_UINT64_T, right, 0,
               MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  std::vector<double> theirs(mine.size());
  std::string error;
  EXPECT_TRUE(on.read(right, right_address, theirs.data(), theirs.size() * sizeof(double), error))
      << error;
  EXPECT_EQ(theirs[999], right * 10000.0 + 999.0);
  // A read from an address the peer does not map fails with the reason.
  EXPECT_FALSE(on.read(right, 8, theirs.data(), 64, error));
  EXPECT_NE(error.find("reading 64 bytes from rank " + std::to_string(right)), std::string::npos)
      << error;

  // A ring wakes the rank at once; without one, wait() sleeps its full timeout.
  MPI_Barrier(MPI_COMM_WORLD);
  on.ring(right);
  const auto begin = std::chrono::steady_clock::now();
  on.wait(std::chrono::seconds(20));
  const double woke_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_LT(woke_after, 10.0) << "the doorbell did not wake the rank";
  MPI_Barrier(MPI_COMM_WORLD);
}

// ---------------------------------------------------------------- the cost rule at GPU speed

// With the cost rule on (the default) at 1000 GFLOP/s, whatever the rule lets move or keeps:
// every task runs exactly once and the results are bit-identical to stealing off.
TEST_F(MpiTest, CostRuleAtGpuSpeedRunsEveryTaskOnceWithTheSameBits) {
  br::StealOptions steal;
  steal.enabled = true;
  ASSERT_TRUE(steal.cost_rule);
  // The skewed pipeline, each task counted where it runs.
  const auto run = run_pipeline(steal, 64, 2, 0, true);
  expect_exactly_once_and_exact(run, 2, steal);

  constexpr int kN = 384;
  constexpr int kTile = 48;
  constexpr std::uint64_t kGemmTasks = (kN / kTile) * (kN / kTile) * (kN / kTile);
  br::RankStats off_stats, on_stats;
  const auto off = gemm_result(br::StealOptions{}, kN, kTile, &off_stats, true);
  const auto on = gemm_result(steal, kN, kTile, &on_stats, true);
  EXPECT_EQ(bt::sum_over_ranks(off_stats.tasks_executed), kGemmTasks);
  EXPECT_EQ(bt::sum_over_ranks(on_stats.tasks_executed), kGemmTasks);
  if (rank() == 0) {
    EXPECT_TRUE(on.size() == off.size() &&
                std::memcmp(on.data(), off.data(), on.size() * sizeof(double)) == 0)
        << "C differs with the cost rule on";
  }

  constexpr int kCholeskyN = 576;
  const auto l_off = cholesky_result(br::StealOptions{}, kCholeskyN, kTile, &off_stats, true);
  const auto l_on = cholesky_result(steal, kCholeskyN, kTile, &on_stats, true);
  EXPECT_EQ(bt::sum_over_ranks(on_stats.tasks_executed), bt::sum_over_ranks(off_stats.tasks_executed));
  if (rank() == 0) {
    bool same = l_on.size() == l_off.size();
    for (std::size_t col = 0; same && col < kCholeskyN; ++col) {
      for (std::size_t row = col; same && row < kCholeskyN; ++row) {
        const std::size_t i = col * kCholeskyN + row;
        same = std::memcmp(&l_on[i], &l_off[i], sizeof(double)) == 0;
        EXPECT_TRUE(same) << "L(" << row << "," << col << "): " << l_on[i]
                          << " with the cost rule on, " << l_off[i] << " without";
      }
    }
  }
}
