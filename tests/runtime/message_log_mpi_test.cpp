// Team-based message logging (RuntimeOptions::message_log) under mpiexec -n 3..4, on a GEMM
// whose ranks name nodes of their own: every tile a rank sends to a rank of another team is
// logged and every tile sent within its team is not (the two add up to the bytes it sent), the
// bytes logged are exactly what message_cut() predicts from the task graph, TeamLB applied
// between iterations moves Cholesky's tiles inside the teams it picks and the next iteration
// logs what its plan predicts, with L bit-identical, it reads Cholesky's kernel mix as no
// slowness and a rank slowed four times as four (class by class), a modeled slowdown that the
// bodies' compute hides as none, a complete
// checkpoint releases the iterations up to its boundary, the result is bit-identical to a run
// without logging, stealing stays inside the teams unless it may cross them (then each task
// given to another team is a determinant), the trace carries a line per rank and iteration, each
// iteration counts its page faults and tile buffers (gathered with the rest), and logging without
// checkpoints is refused.

#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/runtime.hpp"
#include "bellows/runtime/teams.hpp"
#include "cholesky_tasks.hpp"
#include "gemm_tasks.hpp"
#include "mpi_test_support.hpp"
#include "tiled_gemm.hpp"

namespace br = bellows::runtime;
namespace be = bellows::examples;
namespace bt = bellows::testing;
using bt::MpiTest;

namespace {

constexpr int kN = 384;
constexpr int kTile = 96;
constexpr unsigned kSeed = 11;

/// A flag in memory shared by the ranks of the host (MPI_Win_allocate_shared), raised by one
/// rank's task body and awaited by another's without a message. Collective to make and free.
class HostFlag {
 public:
  HostFlag() {
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host_);
    int host_size = 0;
    MPI_Comm_size(host_, &host_size);
    if (host_size != bt::world_size()) {
      throw std::runtime_error("HostFlag: the ranks are not all on one host");
    }
    void* mine = nullptr;
    const MPI_Aint bytes = bt::world_rank() == 0 ? static_cast<MPI_Aint>(sizeof(int)) : 0;
    MPI_Win_allocate_shared(bytes, sizeof(int), MPI_INFO_NULL, host_, &mine, &window_);
    MPI_Aint size = 0;
    int unit = 0;
    MPI_Win_shared_query(window_, 0, &size, &unit, &flag_);
    if (bt::world_rank() == 0) std::atomic_ref<int>(*static_cast<int*>(flag_)).store(0);
    MPI_Barrier(host_);
  }
  HostFlag(const HostFlag&) = delete;
  HostFlag& operator=(const HostFlag&) = delete;
  ~HostFlag() {
    MPI_Win_free(&window_);
    MPI_Comm_free(&host_);
  }

  void raise() const { std::atomic_ref<int>(*static_cast<int*>(flag_)).store(1); }
  [[nodiscard]] bool raised() const {
    return std::atomic_ref<int>(*static_cast<int*>(flag_)).load() != 0;
  }
  /// Waits until the flag is raised or `limit` has passed; returns whether it was raised.
  [[nodiscard]] bool wait(std::chrono::milliseconds limit) const {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!raised()) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
  }

 private:
  MPI_Comm host_ = MPI_COMM_NULL;
  MPI_Win window_ = MPI_WIN_NULL;
  void* flag_ = nullptr;
};

/// GEMM whose victim keeps its tasks until a thief has taken one: every task of `victim`
/// waits (up to 20 s) for `stolen`, which a rank `counts` raises when it runs a task of
/// the victim. Steals then happen however late the thieves' requests arrive on a loaded host.
class GemmUntilStolen final : public br::TaskClass {
 public:
  GemmUntilStolen(std::unique_ptr<be::GemmTasks> gemm, int victim, const HostFlag& stolen,
                  std::function<bool(int thief)> counts)
      : TaskClass(gemm->id()),
        gemm_(std::move(gemm)),
        victim_(victim),
        stolen_(stolen),
        counts_(std::move(counts)) {}

  [[nodiscard]] std::string_view name() const override { return gemm_->name(); }
  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override {
    gemm_->for_each_task(fn);
  }
  [[nodiscard]] int owner(const br::TaskKey& key) const override { return gemm_->owner(key); }
  void inputs(const br::TaskKey& key, std::vector<br::InputSource>& out) const override {
    gemm_->inputs(key, out);
  }
  void successors(const br::TaskKey& key, int slot,
                  std::vector<br::Successor>& out) const override {
    gemm_->successors(key, slot, out);
  }
  [[nodiscard]] double flops(const br::TaskKey& key) const override { return gemm_->flops(key); }
  [[nodiscard]] std::int64_t priority(const br::TaskKey& key) const override {
    return gemm_->priority(key);
  }
  void execute_cpu(const br::TaskKey& key, std::span<br::Tile* const> tiles) const override {
    const int here = bt::world_rank();
    if (here == victim_) {
      (void)stolen_.wait(std::chrono::seconds(20));  // the test's counts tell if it timed out
    } else if (gemm_->owner(key) == victim_ && counts_(here)) {
      stolen_.raise();
    }
    gemm_->execute_cpu(key, tiles);
  }

 private:
  std::unique_ptr<be::GemmTasks> gemm_;
  int victim_;
  const HostFlag& stolen_;
  std::function<bool(int)> counts_;
};

/// A GEMM C = A * B on the CPU with checkpoints every `every` iterations and message logging
/// by `log` (enabled unless `log_on` is false), each rank on a node of its own.
struct Gemm : bellows::test::TiledGemm {
  std::unique_ptr<br::Runtime> runtime;

  Gemm(br::MessageLogOptions log, long every, bool log_on = true,
       const std::string& trace_path = {}, const br::StealOptions& steal = {},
       int slow_rank = -1, const std::function<std::unique_ptr<br::TaskClass>(
                               std::unique_ptr<be::GemmTasks>)>& wrap = {})
      : TiledGemm(kN, kTile, bt::world_size(), bt::world_rank(), kSeed) {
    br::RuntimeOptions options;
    options.comm_max_sleep_us = 100;
    options.checkpoint.enabled = true;
    options.checkpoint.every_iterations = every;
    options.checkpoint.node = "node" + std::to_string(bt::world_rank());
    log.enabled = log_on;
    options.message_log = log;
    options.trace_path = trace_path;
    options.steal = steal;
    if (slow_rank >= 0) {
      // Emulated tasks (not computed), the slow rank 8 times slower: the others steal.
      options.device = br::DeviceKind::emulated;
      options.emulated_gflops = 10.0;
      options.emulated_slowdown = br::EmulatedSlowdown{slow_rank, 1, 8.0};
      options.emulated_compute = static_cast<bool>(wrap);  // runs the bodies wrap gives
    }
    runtime = std::make_unique<br::Runtime>(MPI_COMM_WORLD, options);
    if (!wrap) {
      attach(*runtime);
      return;
    }
    add_collections(*runtime);
    runtime->add_task_class(wrap(std::make_unique<be::GemmTasks>(0, a, b, c)));
  }

  /// One iteration's messages as teams.hpp counts them: tiles numbered A, then B, then C
  /// (column by column), each on its owner; GEMM(i, j, k) runs on C(i, j)'s owner and reads
  /// A(i, k) and B(k, j).
  [[nodiscard]] std::vector<br::TileTraffic> traffic() const {
    const int t = a.tile_rows();
    const auto index = [t](int matrix, int m, int n) { return matrix * t * t + n * t + m; };
    std::vector<br::TileTraffic> out;
    for (int i = 0; i < t; ++i) {
      for (int j = 0; j < t; ++j) {
        for (int k = 0; k < t; ++k) {
          const double bytes = static_cast<double>(kTile) * kTile * sizeof(double);
          out.push_back({index(2, i, j), index(0, i, k), bytes});
          out.push_back({index(2, i, j), index(1, k, j), bytes});
        }
      }
    }
    return out;
  }
  [[nodiscard]] std::vector<int> holders() const {
    std::vector<int> out;
    for (const auto* m : {&a, &b, &c}) {
      for (int n = 0; n < m->tile_cols(); ++n) {
        for (int r = 0; r < m->tile_rows(); ++r) out.push_back(m->owner(r, n));
      }
    }
    return out;
  }
};

/// A task class whose tasks take a time set by their flops: after the body, each sleeps
/// `ns_per_flop` ns per flop, `diagonal_factor` times that for POTRF and SYRK (the diagonal
/// tiles' kernels) and `slow_factor` times more on rank `slow_rank`: a kernel mix and a
/// slowed rank whose seconds per flop the host's load moves little.
class PacedClass final : public br::TaskClass {
 public:
  PacedClass(std::unique_ptr<br::TaskClass> inner, double ns_per_flop, double diagonal_factor, int slow_rank,
             double slow_factor)
      : TaskClass(inner->id()),
        inner_(std::move(inner)),
        ns_per_flop_(ns_per_flop * (inner_->name() == "POTRF" || inner_->name() == "SYRK" ? diagonal_factor : 1.0) *
                     (bt::world_rank() == slow_rank ? slow_factor : 1.0)) {}

  [[nodiscard]] std::string_view name() const override { return inner_->name(); }
  void for_each_task(const std::function<void(const br::TaskKey&)>& fn) const override {
    inner_->for_each_task(fn);
  }
  [[nodiscard]] int owner(const br::TaskKey& key) const override { return inner_->owner(key); }
  void inputs(const br::TaskKey& key, std::vector<br::InputSource>& out) const override { inner_->inputs(key, out); }
  void successors(const br::TaskKey& key, int slot, std::vector<br::Successor>& out) const override {
    inner_->successors(key, slot, out);
  }
  [[nodiscard]] double flops(const br::TaskKey& key) const override { return inner_->flops(key); }
  [[nodiscard]] std::int64_t priority(const br::TaskKey& key) const override { return inner_->priority(key); }
  void execute_cpu(const br::TaskKey& key, std::span<br::Tile* const> tiles) const override {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::nanoseconds(static_cast<std::int64_t>(inner_->flops(key) * ns_per_flop_));
    inner_->execute_cpu(key, tiles);
    std::this_thread::sleep_until(until);
  }

 private:
  std::unique_ptr<br::TaskClass> inner_;
  double ns_per_flop_;
};

/// A Cholesky A = L * L^T over 8 x 8 tiles (of `tile` rows, kTile by default) on the CPU,
/// checkpoints every iteration, message logging by `log` (enabled unless `log_on` is false),
/// each rank on a node of its own; tiles of at most `eager_tile_bytes` travel in their
/// activations; `wrap`, when given, wraps each task class.
struct Cholesky {
  br::TiledMatrix a, l;
  std::unique_ptr<br::Runtime> runtime;

  Cholesky(br::MessageLogOptions log, bool log_on, int tile = kTile,
           std::size_t eager_tile_bytes = br::RuntimeOptions{}.eager_tile_bytes,
           const std::function<std::unique_ptr<br::TaskClass>(std::unique_ptr<br::TaskClass>)>& wrap = {})
      : a(0, 8 * tile, 8 * tile, tile, br::BlockCyclic2D::square_for(bt::world_size()),
          bt::world_rank(), lower()),
        l(1, 8 * tile, 8 * tile, tile, br::BlockCyclic2D::square_for(bt::world_size()),
          bt::world_rank(), lower()) {
    be::fill_spd(a, kSeed);
    br::RuntimeOptions options;
    options.comm_max_sleep_us = 100;
    options.eager_tile_bytes = eager_tile_bytes;
    options.checkpoint.enabled = true;
    options.checkpoint.every_iterations = 1;
    options.checkpoint.node = "node" + std::to_string(bt::world_rank());
    log.enabled = log_on;
    options.message_log = log;
    runtime = std::make_unique<br::Runtime>(MPI_COMM_WORLD, options);
    runtime->add_collection(a);
    runtime->add_collection(l);
    for (auto& cls : be::make_cholesky_tasks(a, l)) runtime->add_task_class(wrap ? wrap(std::move(cls)) : std::move(cls));
  }
  static br::TiledMatrix::TileFilter lower() {
    return [](int m, int n) { return m >= n; };
  }
};

/// A GEMM C = A * B on the emulated device, which runs every task's CPU body (C exact) and
/// then waits out its modeled time at 0.25 GFLOP/s, with rank `slow_rank` `factor` times slower
/// from iteration `slow_from` on; a checkpoint at every boundary; message logging by `log`
/// (enabled unless `log_on` is false), each rank on a node of its own.
struct SlowedGemm : bellows::test::TiledGemm {
  std::unique_ptr<br::Runtime> runtime;

  SlowedGemm(br::MessageLogOptions log, bool log_on, int slow_rank, int slow_from, double factor)
      : TiledGemm(kN, kTile, bt::world_size(), bt::world_rank(), kSeed) {
    br::RuntimeOptions options;
    options.comm_max_sleep_us = 100;
    options.device = br::DeviceKind::emulated;
    options.emulated_gflops = 0.25;
    options.emulated_compute = true;
    options.emulated_slowdown = br::EmulatedSlowdown{slow_rank, slow_from, factor};
    options.checkpoint.enabled = true;
    options.checkpoint.every_iterations = 1;
    options.checkpoint.node = "node" + std::to_string(bt::world_rank());
    log.enabled = log_on;
    options.message_log = log;
    runtime = std::make_unique<br::Runtime>(MPI_COMM_WORLD, options);
    attach(*runtime);
  }

  /// The C tiles `rank` holds.
  [[nodiscard]] int c_tiles_of(int rank) const {
    int held = 0;
    for (int n = 0; n < c.tile_cols(); ++n) {
      for (int m = 0; m < c.tile_rows(); ++m) held += c.owner(m, n) == rank ? 1 : 0;
    }
    return held;
  }
};

br::MessageLogOptions teams_of(int size) {
  br::MessageLogOptions log;
  log.team_size = size;
  return log;
}

}  // namespace

TEST_F(MpiTest, TeamsOfOneLogEveryTileSentAndOneTeamLogsNone) {
  for (const int team_size : {1, 0}) {
    Gemm gemm(teams_of(team_size), 1);
    const auto report = gemm.runtime->run_iteration();
    ASSERT_TRUE(report.completed());
    const auto& log = report.local.message_log;
    ASSERT_GT(report.local.bytes_sent, 0U) << "every rank serves tiles of A and B";
    if (team_size == 1) {
      EXPECT_EQ(log.bytes_logged, report.local.bytes_sent);
      EXPECT_EQ(log.bytes_in_team, 0U);
      EXPECT_EQ(log.bytes_held, log.bytes_logged);
    } else {
      EXPECT_EQ(log.bytes_logged, 0U);
      EXPECT_EQ(log.messages_logged, 0U);
      EXPECT_EQ(log.bytes_in_team, report.local.bytes_sent);
      EXPECT_EQ(log.bytes_held, 0U);
    }
  }
}

TEST_F(MpiTest, TheBytesLoggedAreWhatMessageCutPredicts) {
  const int size = bt::world_size(), rank = bt::world_rank();
  for (const int team_size : {1, 2}) {
    Gemm gemm(teams_of(team_size), 1);
    const auto predicted = br::message_cut(gemm.traffic(), gemm.holders(),
                                           br::consecutive_teams(size, team_size));
    for (int it = 0; it < 2; ++it) {
      const auto report = gemm.runtime->run_iteration();
      ASSERT_TRUE(report.completed());
      const auto& log = report.local.message_log;
      EXPECT_EQ(static_cast<double>(log.bytes_logged),
                predicted.logged_bytes[static_cast<std::size_t>(rank)])
          << "team size " << team_size << ", iteration " << it + 1;
      EXPECT_EQ(log.bytes_logged + log.bytes_in_team, report.local.bytes_sent)
          << "every tile sent is logged or within the team";
    }
    if (team_size == 2 && size == 4) {
      EXPECT_GT(predicted.crossing_bytes, 0.0);
      EXPECT_LT(predicted.crossing_bytes, predicted.total_bytes);
    }
  }
}

TEST_F(MpiTest, ACompleteCheckpointReleasesTheIterationsUpToItsBoundary) {
  // Checkpoints at the boundaries 0, 2, 4: iteration 1 and 2's entries are held until the
  // checkpoint at boundary 2 completes, at the end of iteration 3.
  Gemm gemm(teams_of(1), 2);
  std::vector<br::MessageLogStats> logs;
  for (int it = 0; it < 3; ++it) {
    const auto report = gemm.runtime->run_iteration();
    ASSERT_TRUE(report.completed());
    logs.push_back(report.local.message_log);
  }
  ASSERT_GT(logs[0].bytes_logged, 0U);
  EXPECT_EQ(logs[0].bytes_held, logs[0].bytes_logged);
  EXPECT_EQ(logs[0].messages_released, 0U);
  EXPECT_EQ(logs[1].bytes_held, logs[0].bytes_logged + logs[1].bytes_logged);
  EXPECT_EQ(logs[1].entries_held, logs[0].messages_logged + logs[1].messages_logged);
  EXPECT_EQ(logs[2].bytes_held, logs[2].bytes_logged);
  EXPECT_EQ(logs[2].bytes_released, logs[0].bytes_logged + logs[1].bytes_logged);
  const auto& total = gemm.runtime->stats().message_log;
  EXPECT_EQ(total.bytes_held_by_iteration,
            (std::vector<double>{static_cast<double>(logs[0].bytes_held),
                                 static_cast<double>(logs[1].bytes_held),
                                 static_cast<double>(logs[2].bytes_held)}));
  EXPECT_EQ(total.peak_bytes_held, logs[1].bytes_held);
  // gather_stats carries each rank's sizes per iteration to the first rank.
  const auto gathered = gemm.runtime->gather_stats();
  std::vector<double> mine = total.bytes_held_by_iteration;
  std::vector<double> all(mine.size() * static_cast<std::size_t>(bt::world_size()));
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
             static_cast<int>(mine.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (bt::world_rank() == 0) {
    ASSERT_EQ(gathered.size(), static_cast<std::size_t>(bt::world_size()));
    for (std::size_t r = 0; r < gathered.size(); ++r) {
      const std::vector<double> expected(all.begin() + static_cast<long>(r * mine.size()),
                                         all.begin() + static_cast<long>((r + 1) * mine.size()));
      EXPECT_EQ(gathered[r].message_log.bytes_held_by_iteration, expected) << "rank " << r;
      EXPECT_GT(gathered[r].message_log.bytes_released, 0U) << "rank " << r;
    }
  }
}

TEST_F(MpiTest, TheLogsOwnTimeIsCountedPerIterationAndGathered) {
  Gemm plain(teams_of(1), 1, /*log_on=*/false);
  Gemm logged(teams_of(1), 1);
  double summed = 0.0;
  for (int it = 0; it < 2; ++it) {
    const auto off = plain.runtime->run_iteration();
    ASSERT_TRUE(off.completed());
    EXPECT_EQ(off.local.message_log.seconds, 0.0) << "no log, no time in it";
    const auto on = logged.runtime->run_iteration();
    ASSERT_TRUE(on.completed());
    ASSERT_GT(on.local.message_log.messages_logged, 0U);
    EXPECT_GT(on.local.message_log.seconds, 0.0) << "iteration " << it + 1;
    EXPECT_LT(on.local.message_log.seconds, on.seconds) << "iteration " << it + 1;
    EXPECT_EQ(on.local.copy_on_write_bytes, off.local.copy_on_write_bytes)
        << "the log holds references: no task copies a tile it writes because of it";
    summed += on.local.message_log.seconds;
  }
  const double mine = logged.runtime->stats().message_log.seconds;
  EXPECT_EQ(mine, summed) << "the run's statistics sum the iterations'";
  const auto gathered = logged.runtime->gather_stats();
  std::vector<double> all(static_cast<std::size_t>(bt::world_size()));
  MPI_Gather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (bt::world_rank() == 0) {
    ASSERT_EQ(gathered.size(), all.size());
    for (std::size_t r = 0; r < gathered.size(); ++r) {
      EXPECT_EQ(gathered[r].message_log.seconds, all[r]) << "rank " << r;
    }
  }
}

TEST_F(MpiTest, EachIterationCountsItsPageFaultsAndTileBuffersAndTheyAreGathered) {
  Gemm gemm(teams_of(1), 2);
  constexpr std::uint64_t kTileBytes = std::uint64_t{kTile} * kTile * sizeof(double);  // whole pages
  for (int it = 0; it < 3; ++it) {
    const auto report = gemm.runtime->run_iteration();
    ASSERT_TRUE(report.completed());
    const auto& memory = report.local.memory;
    EXPECT_GT(memory.tile_buffers_reused + memory.tile_buffers_fresh, 0U)
        << "iteration " << it + 1 << ": the tasks' outputs and the tiles received take buffers";
    EXPECT_EQ(memory.tile_bytes_fresh, memory.tile_buffers_fresh * kTileBytes) << "iteration " << it + 1;
    EXPECT_GE(memory.peak_tile_bytes_in_use, report.local.message_log.bytes_held)
        << "iteration " << it + 1 << ": the tiles the log holds are in use";
    EXPECT_GE(memory.tile_pool_bytes, report.local.message_log.bytes_held) << "iteration " << it + 1;
    EXPECT_EQ(memory.minor_page_faults_by_iteration,
              std::vector<double>{static_cast<double>(memory.minor_page_faults)});
    EXPECT_EQ(memory.tile_buffers_fresh_by_iteration,
              std::vector<double>{static_cast<double>(memory.tile_buffers_fresh)});
    EXPECT_EQ(memory.peak_tile_bytes_in_use_by_iteration,
              std::vector<double>{static_cast<double>(memory.peak_tile_bytes_in_use)});
  }
  const auto& total = gemm.runtime->stats().memory;
  ASSERT_EQ(total.tile_buffers_fresh_by_iteration.size(), 3U);
  // gather_stats carries each rank's counts per iteration to the first rank.
  std::vector<double> mine = total.minor_page_faults_by_iteration;
  mine.insert(mine.end(), total.tile_buffers_fresh_by_iteration.begin(), total.tile_buffers_fresh_by_iteration.end());
  mine.insert(mine.end(), total.peak_tile_bytes_in_use_by_iteration.begin(),
              total.peak_tile_bytes_in_use_by_iteration.end());
  mine.push_back(static_cast<double>(total.tile_buffers_reused));
  std::vector<double> all(mine.size() * static_cast<std::size_t>(bt::world_size()));
  const auto gathered = gemm.runtime->gather_stats();
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
             MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (bt::world_rank() == 0) {
    ASSERT_EQ(gathered.size(), static_cast<std::size_t>(bt::world_size()));
    for (std::size_t r = 0; r < gathered.size(); ++r) {
      const auto& m = gathered[r].memory;
      std::vector<double> got = m.minor_page_faults_by_iteration;
      got.insert(got.end(), m.tile_buffers_fresh_by_iteration.begin(), m.tile_buffers_fresh_by_iteration.end());
      got.insert(got.end(), m.peak_tile_bytes_in_use_by_iteration.begin(), m.peak_tile_bytes_in_use_by_iteration.end());
      got.push_back(static_cast<double>(m.tile_buffers_reused));
      const std::vector<double> expected(all.begin() + static_cast<long>(r * mine.size()),
                                         all.begin() + static_cast<long>((r + 1) * mine.size()));
      EXPECT_EQ(got, expected) << "rank " << r;
    }
  }
}

TEST_F(MpiTest, LoggingLeavesTheResultBitIdentical) {
  Gemm plain(teams_of(1), 1, /*log_on=*/false);
  Gemm logged(teams_of(1), 1);
  for (int it = 0; it < 2; ++it) {
    ASSERT_TRUE(plain.runtime->run_iteration().completed());
    ASSERT_TRUE(logged.runtime->run_iteration().completed());
  }
  const auto expected = plain.c.gather_to_root(MPI_COMM_WORLD);
  const auto got = logged.c.gather_to_root(MPI_COMM_WORLD);
  if (bt::world_rank() == 0) {
    ASSERT_EQ(expected.size(), got.size());
    EXPECT_EQ(std::memcmp(expected.data(), got.data(), expected.size() * sizeof(double)), 0);
  }
  EXPECT_EQ(plain.runtime->stats().message_log.messages_logged, 0U);
}

TEST_F(MpiTest, TheTraceHasALinePerRankAndIteration) {
  const std::string path = "message_log_trace_" + std::to_string(bt::world_size()) + ".jsonl";
  if (bt::world_rank() == 0) std::remove(path.c_str());
  MPI_Barrier(MPI_COMM_WORLD);
  {
    Gemm gemm(teams_of(1), 1, true, path);
    for (int it = 0; it < 2; ++it) ASSERT_TRUE(gemm.runtime->run_iteration().completed());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (bt::world_rank() == 0) {
    std::ifstream in(path);
    int lines = 0;
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("\"event\":\"message_log\"") != std::string::npos &&
          line.find("\"bytes_held\":") != std::string::npos) {
        ++lines;
      }
    }
    EXPECT_EQ(lines, 2 * bt::world_size());
    std::remove(path.c_str());
  }
}

TEST_F(MpiTest, TeamLBBetweenIterationsMovesTilesInsideTeamsAndLogsWhatItPredicts) {
  const int size = bt::world_size(), rank = bt::world_rank();
  br::MessageLogOptions log = teams_of(2);
  log.plan_teams = true;
  Cholesky planned(log, true);
  Cholesky plain(teams_of(2), false);

  const auto first = planned.runtime->run_iteration();
  ASSERT_TRUE(first.completed());
  EXPECT_FALSE(planned.runtime->teams_applied().has_value()) << "nothing measured before";
  EXPECT_EQ(planned.runtime->teams(), br::consecutive_teams(size, 2));

  const auto second = planned.runtime->run_iteration();
  ASSERT_TRUE(second.completed());
  const auto applied = planned.runtime->teams_applied();
  ASSERT_TRUE(applied.has_value());
  EXPECT_EQ(applied->before_iteration, 2);
  EXPECT_EQ(planned.runtime->teams(), applied->rank_team);
  ASSERT_EQ(applied->predicted_logged_bytes.size(), static_cast<std::size_t>(size));
  EXPECT_EQ(static_cast<double>(second.local.message_log.bytes_logged),
            applied->predicted_logged_bytes[static_cast<std::size_t>(rank)])
      << "the log of the first iteration under the plan is the plan's prediction";
  EXPECT_EQ(second.local.message_log.bytes_logged + second.local.message_log.bytes_in_team,
            second.local.bytes_sent);
  EXPECT_EQ(second.local.checkpoint.checkpoints, 1U) << "a fresh checkpoint under the new teams";
  EXPECT_LE(applied->imbalance_after, applied->imbalance_before);
  // Tiles moved only between ranks of one team.
  for (int m = 0; m < planned.l.tile_rows(); ++m) {
    for (int n = 0; n <= m; ++n) {
      const int before = br::BlockCyclic2D::square_for(size).owner(m, n);
      const int after = planned.l.owner(m, n);
      EXPECT_EQ(applied->rank_team[static_cast<std::size_t>(before)],
                applied->rank_team[static_cast<std::size_t>(after)])
          << "tile (" << m << "," << n << ") left its team";
    }
  }
  if (size == 4) {
    EXPECT_GT(applied->tiles_moved, 0U) << "Cholesky's block-cyclic loads differ";
  }
  ASSERT_TRUE(planned.runtime->run_iteration().completed());

  for (int it = 0; it < 3; ++it) ASSERT_TRUE(plain.runtime->run_iteration().completed());
  const auto expected = plain.l.gather_to_root(MPI_COMM_WORLD);
  const auto got = planned.l.gather_to_root(MPI_COMM_WORLD);
  if (rank == 0) {
    ASSERT_EQ(expected.size(), got.size());
    EXPECT_EQ(std::memcmp(expected.data(), got.data(), expected.size() * sizeof(double)), 0)
        << "L is bit-identical with the tiles moved";
  }
}

TEST_F(MpiTest, TeamLBReadsARanksSlownessClassByClassNotItsKernelMix) {
  // Cholesky's tasks (tiles of 48) paced at 100 ns per flop, hundreds of times what their
  // bodies take, POTRF and SYRK three times that: the ranks that hold diagonal tiles spend
  // more seconds per flop. Summed per rank (rank_slowness), on 4 ranks rank 0 reads 1.31 times
  // the median rank and ranks 1 and 2 0.75, past the 25 % tolerance; class by class no rank
  // is slower or faster. Then rank 1 four times slower in every class reads four.
  const int size = bt::world_size();
  br::MessageLogOptions log = teams_of(size == 4 ? 2 : size);
  log.plan_teams = true;
  constexpr int kSlowRank = 1;
  for (const double slowed : {1.0, 4.0}) {
    Cholesky paced(log, true, 48, br::RuntimeOptions{}.eager_tile_bytes, [&](std::unique_ptr<br::TaskClass> cls) {
      return std::make_unique<PacedClass>(std::move(cls), 100.0, 3.0, kSlowRank, slowed);
    });
    for (int it = 0; it < 2; ++it) ASSERT_TRUE(paced.runtime->run_iteration().completed());
    const auto applied = paced.runtime->teams_applied();
    ASSERT_TRUE(applied.has_value());
    ASSERT_EQ(applied->rank_slowness.size(), static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      if (r == kSlowRank && slowed > 1.0) {
        EXPECT_NEAR(applied->rank_slowness[static_cast<std::size_t>(r)], slowed, 0.1 * slowed) << "rank " << r;
      } else {
        EXPECT_EQ(applied->rank_slowness[static_cast<std::size_t>(r)], 1.0) << "rank " << r << ", slowed " << slowed;
      }
    }
  }
}

TEST_F(MpiTest, TeamLBReadsNoSlownessThatTheBodiesComputeHides) {
  // GEMM (tiles of 96: 1.77 MFLOP a task) on the emulated device at 10 GFLOP/s, computing,
  // rank 1 eight times slower: 0.18 ms modeled a task, 1.4 ms on rank 1. Every task's body is
  // paced to 10 ns per flop (18 ms) on every rank, so the lanes are occupied by the bodies
  // alike and rank 1 is no slower: it reads 1, as every rank does (the device's modeled seconds
  // alone read 8). TeamLBWeighsAWindowOfIterationsAndPlansAgainOnceARankStaysSlow reads a
  // slowdown that shows.
  const int size = bt::world_size();
  constexpr int kSlowRank = 1;
  br::MessageLogOptions log = teams_of(size == 4 ? 2 : size);
  log.plan_teams = true;
  Gemm gemm(log, 1, true, {}, {}, kSlowRank, [](std::unique_ptr<be::GemmTasks> tasks) {
    return std::make_unique<PacedClass>(std::move(tasks), 10.0, 1.0, -1, 1.0);
  });
  for (int it = 0; it < 2; ++it) ASSERT_TRUE(gemm.runtime->run_iteration().completed());
  const auto applied = gemm.runtime->teams_applied();
  ASSERT_TRUE(applied.has_value());
  ASSERT_EQ(applied->rank_slowness.size(), static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(applied->rank_slowness[static_cast<std::size_t>(r)], 1.0) << "rank " << r;
  }
}

TEST_F(MpiTest, TeamLBWeighsAWindowOfIterationsAndPlansAgainOnceARankStaysSlow) {
  const int size = bt::world_size(), rank = bt::world_rank();
  constexpr int kSlowRank = 1, kSlowFrom = 5, kIterations = 9;
  // Teams of 2 on 4 ranks; one team of the 3 ranks on 3, so that the slowed rank has a team
  // mate whatever the teams TeamLB picks.
  br::MessageLogOptions log = teams_of(size == 4 ? 2 : size);
  log.plan_teams = true;
  log.load_window = 3;
  SlowedGemm planned(log, true, kSlowRank, kSlowFrom, 4.0);
  SlowedGemm plain(teams_of(2), false, -1, 1, 1.0);

  std::vector<int> c_owners_before_replan;
  for (int it = 1; it <= kIterations; ++it) {
    if (it == kSlowFrom + 2) {
      for (int n = 0; n < planned.c.tile_cols(); ++n) {
        for (int m = 0; m < planned.c.tile_rows(); ++m) c_owners_before_replan.push_back(planned.c.owner(m, n));
      }
    }
    const auto report = planned.runtime->run_iteration();
    ASSERT_TRUE(report.completed()) << "iteration " << it;
    if (rank == 0) std::printf("iteration %d: %.3f s\n", it, report.seconds);  // read, not checked
    const auto applied = planned.runtime->teams_applied();
    if (it == 1) {
      EXPECT_FALSE(applied.has_value());
      continue;
    }
    ASSERT_TRUE(applied.has_value()) << "iteration " << it;
    if (it < kSlowFrom + 2) {
      // The first plan, from iteration 1; before iterations 5 and 6 the window (2-4, then 3-5)
      // weighs the slowed rank's tiles by their median, which one slow iteration leaves as it was.
      EXPECT_EQ(applied->before_iteration, 2) << "iteration " << it;
      EXPECT_EQ(applied->iterations_weighed, 1);
      EXPECT_FALSE(applied->replanned);
    } else {
      // Iterations 5 and 6 slow: the median of 4-6 is, and TeamLB plans again before 7.
      EXPECT_EQ(applied->before_iteration, kSlowFrom + 2) << "iteration " << it;
      EXPECT_EQ(applied->iterations_weighed, 3);
      EXPECT_TRUE(applied->replanned);
      EXPECT_GT(applied->predicted_gain, log.replan_min_gain);
      EXPECT_GT(applied->tiles_moved, 0U);
    }
    if (it == kSlowFrom + 2) {
      EXPECT_EQ(report.local.checkpoint.checkpoints, 1U) << "a fresh checkpoint under the new teams";
      EXPECT_EQ(static_cast<double>(report.local.message_log.bytes_logged),
                applied->predicted_logged_bytes[static_cast<std::size_t>(rank)])
          << "the first iteration under the new plan logs what it predicts";
      EXPECT_EQ(planned.runtime->teams(), applied->rank_team);
    }
  }
  // The plan took tiles off the slowed rank and gave it none.
  ASSERT_EQ(c_owners_before_replan.size(), static_cast<std::size_t>(planned.c.tile_rows() * planned.c.tile_cols()));
  int held_before = 0;
  for (const int owner : c_owners_before_replan) held_before += owner == kSlowRank ? 1 : 0;
  EXPECT_LT(planned.c_tiles_of(kSlowRank), held_before);
  std::size_t at = 0;
  for (int n = 0; n < planned.c.tile_cols(); ++n) {
    for (int m = 0; m < planned.c.tile_rows(); ++m, ++at) {
      if (planned.c.owner(m, n) == kSlowRank) {
        EXPECT_EQ(c_owners_before_replan[at], kSlowRank) << "C(" << m << "," << n << ") moved onto the slowed rank";
      }
    }
  }

  for (int it = 0; it < kIterations; ++it) ASSERT_TRUE(plain.runtime->run_iteration().completed());
  const auto expected = plain.c.gather_to_root(MPI_COMM_WORLD);
  const auto got = planned.c.gather_to_root(MPI_COMM_WORLD);
  if (rank == 0) {
    ASSERT_EQ(expected.size(), got.size());
    EXPECT_EQ(std::memcmp(expected.data(), got.data(), expected.size() * sizeof(double)), 0)
        << "C is bit-identical with the tiles moved";
  }
}

TEST_F(MpiTest, StealingStaysInTheTeamOrEachTaskGivenAcrossIsADeterminant) {
  const int size = bt::world_size(), rank = bt::world_rank();
  constexpr int kSlowRank = 0;
  br::StealOptions steal;
  steal.enabled = true;
  steal.cost_rule = false;  // steal whatever a victim can spare
  const auto expected_teams = br::consecutive_teams(size, 2);
  const auto team = [&](int r) { return expected_teams[static_cast<std::size_t>(r)]; };
  for (const bool across : {false, true}) {
    br::MessageLogOptions log = teams_of(2);
    log.steal_across_teams = across;
    // The slow rank's tasks wait until a rank of its team (across: of another team) has run
    // one of them, so that there is a steal to check however loaded the host. Across, its team
    // mate never asks (thresholds of 0): what the slow rank spares goes to another team.
    HostFlag stolen;
    br::StealOptions options = steal;
    if (across && rank != kSlowRank && team(rank) == team(kSlowRank)) {
      options.device_threshold = 0;
      options.node_threshold = 0;
    }
    const auto counts = [&team, across](int thief) {
      return (team(thief) != team(kSlowRank)) == across;
    };
    Gemm gemm(log, 1, true, {}, options, kSlowRank, [&](std::unique_ptr<be::GemmTasks> tasks) {
      return std::make_unique<GemmUntilStolen>(std::move(tasks), kSlowRank, stolen, counts);
    });
    const auto report = gemm.runtime->run_iteration();
    ASSERT_TRUE(report.completed());
    ASSERT_EQ(gemm.runtime->teams(), expected_teams);
    EXPECT_TRUE(stolen.raised()) << "no rank " << (across ? "of another team" : "of its team")
                                 << " ran a task of the slow rank within 20 s";
    // Tasks this rank owned that ran on a rank of another team (the victim's record).
    std::uint64_t given_across = 0, moved_across = 0;
    for (const auto& [key, where] : gemm.runtime->migrations()) {
      const int owner = gemm.c.owner(key.index[0], key.index[1]);
      if (team(where) != team(owner)) ++moved_across;
      if (owner == rank && team(where) != team(rank)) ++given_across;
    }
    EXPECT_GT(bt::sum_over_ranks(report.local.steal.tasks_given), 0U)
        << "the slow rank's tasks were stolen (across " << across << ")";
    if (!across) {
      EXPECT_EQ(moved_across, 0U) << "rank " << rank << " saw a task run in another team";
      EXPECT_EQ(report.local.message_log.determinants_logged, 0U);
    } else {
      EXPECT_EQ(report.local.message_log.determinants_logged, given_across) << "rank " << rank;
      // The slow rank's tasks go to the other team (it waits until they have).
      if (rank == kSlowRank) {
        EXPECT_GT(report.local.message_log.determinants_logged, 0U);
      }
    }
  }
}

// Tiles of 16 x 16 doubles (2 KiB) travel in their activations: each is logged as a fetched
// one is, and the log holds the same entries and bytes as when every tile is fetched.
TEST_F(MpiTest, ATileCarriedInItsActivationIsLoggedAsAFetchedOneIs) {
  constexpr int kSmallTile = 16;
  Cholesky carried(teams_of(1), true, kSmallTile);
  Cholesky fetched(teams_of(1), true, kSmallTile, /*eager_tile_bytes=*/0);
  for (int it = 0; it < 2; ++it) {
    const auto with = carried.runtime->run_iteration();
    const auto without = fetched.runtime->run_iteration();
    ASSERT_TRUE(with.completed());
    ASSERT_TRUE(without.completed());
    EXPECT_EQ(bt::sum_over_ranks(with.local.bytes_sent_in_activations),
              bt::sum_over_ranks(with.local.bytes_sent))
        << "iteration " << it + 1 << ": every tile sent went in its activation";
    EXPECT_GT(bt::sum_over_ranks(with.local.bytes_sent), 0U);
    EXPECT_EQ(without.local.bytes_sent_in_activations, 0U);
    // Teams of one: every tile sent is logged, however it travelled.
    EXPECT_EQ(with.local.message_log.bytes_logged, with.local.bytes_sent);
    EXPECT_EQ(with.local.message_log.bytes_logged, without.local.message_log.bytes_logged);
    EXPECT_EQ(with.local.message_log.messages_logged, without.local.message_log.messages_logged);
    EXPECT_EQ(with.local.message_log.bytes_held, without.local.message_log.bytes_held);
  }
  const auto with_l = carried.l.gather_to_root(MPI_COMM_WORLD);
  const auto without_l = fetched.l.gather_to_root(MPI_COMM_WORLD);
  if (bt::world_rank() == 0) {
    ASSERT_EQ(with_l.size(), without_l.size());
    EXPECT_EQ(std::memcmp(with_l.data(), without_l.data(), with_l.size() * sizeof(double)), 0);
  }
}

TEST_F(MpiTest, LoggingWithoutCheckpointsIsRefused) {
  br::RuntimeOptions options;
  options.message_log.enabled = true;
  try {
    br::Runtime runtime(MPI_COMM_WORLD, options);
    FAIL() << "message logging without checkpoints was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "message log: needs checkpoints (RuntimeOptions::checkpoint): a complete "
                 "checkpoint is what releases the log");
  }
}
